//! The measured sections. Each takes a workload and returns its rows.

use std::time::Duration;

use palimpsest_core_session::{Session, SurfaceManager};
use palimpsest_invariants::InvariantGuard;

use crate::measure::{median, ns_per_call, proc_status_bytes};
use crate::report::Row;
use crate::Workload;

type Section = fn(&Workload) -> Result<Vec<Row>, String>;

/// Every section, in report order.
pub(crate) const ALL: &[(&str, Section)] = &[
    ("memory", in_memory),
    ("jsonl", crate::stores::jsonl),
    ("sqlite", crate::stores::sqlite),
    ("sqlite-load", crate::stores::sqlite_load),
    ("postgres", crate::pg::postgres),
    ("rss", resident_memory),
    ("stream", crate::stream::stream),
    ("loop", crate::agent::agent_loop),
    ("search", crate::search::search),
    ("cli", crate::cli::cli),
];

pub(crate) fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

pub(crate) fn row(section: &'static str, name: &str, w: &Workload, value: f64, unit: &'static str) -> Row {
    Row { section, name: name.into(), n: w.n, value, unit, baseline: None, higher_is_better: unit == "ev/s" }
}

pub(crate) fn with_baseline(mut r: Row, name: &str, value: f64) -> Row {
    r.baseline = Some((name.into(), value));
    r
}

fn in_memory(w: &Workload) -> Result<Vec<Row>, String> {
    let runs = w.runs();
    let append = |guarded: bool| {
        median(
            runs,
            || w.events.clone(),
            |events| {
                let mut s = Session::create(w.header.clone());
                if guarded {
                    s.set_guard(Some(Box::new(InvariantGuard::new())));
                }
                for e in events {
                    s.append(e).map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(s)
            },
        )
    };
    let off = per_sec(w.n, append(false));
    let on = per_sec(w.n, append(true));
    // The floor any append can reach: pushing the same events onto a Vec.
    let push = per_sec(
        w.n,
        median(
            runs,
            || w.events.clone(),
            |events| {
                let mut v = Vec::new();
                for e in events {
                    v.push(e);
                }
                v
            },
        ),
    );
    let session = Session::from_log(w.header.clone(), w.events.clone()).map_err(|e| e.to_string())?;
    let idle_read = ns_per_call(10_000_000, || std::hint::black_box(&session).surface().len());
    let mut manager = SurfaceManager::fold(&w.events).map_err(|e| e.to_string())?;
    let idle_sync = ns_per_call(1_000_000, || {
        let _ = manager.sync(std::hint::black_box(&w.events));
        manager.seqs().len()
    });
    let derive = median(runs, || (), |()| session.derive_messages().len());
    let derive_again = median(runs, || (), |()| session.derive_messages().len());
    let mut live = Session::from_log(w.header.clone(), w.events.clone()).map_err(|e| e.to_string())?;
    let history_first = median(1, || (), |()| live.history().len());
    let history_again = ns_per_call(1_000_000, || std::hint::black_box(&live).history().len());
    let history_after_append = history_after_each_append(&mut live, 1_000)?;
    Ok(vec![
        with_baseline(
            row("memory", "append, full validation, dev mode off", w, off, "ev/s"),
            "Vec::push",
            push,
        ),
        with_baseline(
            row("memory", "append, full validation, dev mode on", w, on, "ev/s"),
            "dev mode off",
            off,
        ),
        row("memory", "surface read, nothing new", w, idle_read, "ns"),
        row("memory", "SurfaceManager::sync, nothing new", w, idle_sync, "ns"),
        row("memory", "derive_messages, first call", w, derive.as_secs_f64() * 1e3, "ms"),
        row("memory", "derive_messages, repeated", w, derive_again.as_secs_f64() * 1e3, "ms"),
        row("memory", "Session::history, first call", w, history_first.as_secs_f64() * 1e3, "ms"),
        with_baseline(
            row("memory", "Session::history, repeated", w, history_again, "ns"),
            "derive_messages, repeated",
            derive_again.as_nanos() as f64,
        ),
        row("memory", "Session::history after one append", w, history_after_append, "ns"),
    ])
}

/// Mean time of `Session::history` right after each of `count` appends of
/// one user message: what the loop pays per model request once the cache is
/// warm (the appends themselves are not timed).
fn history_after_each_append(session: &mut Session, count: u64) -> Result<f64, String> {
    use palimpsest_core_session::payload::{Message, UserMessage};
    use palimpsest_core_session::SurfaceIntent;
    let mut total = Duration::ZERO;
    for i in 0..count {
        let message = Message::user(format!("bench-{i}"), "one more question");
        let time = session.last_time();
        session
            .append_surface(time, UserMessage { turn: None, message }, SurfaceIntent::append())
            .map_err(|e| e.to_string())?;
        let start = std::time::Instant::now();
        std::hint::black_box(session.history().len());
        total += start.elapsed();
    }
    Ok(total.as_nanos() as f64 / count as f64)
}

/// Parent side: runs the memory probe in a fresh child process, so nothing
/// else this process allocated counts: on the workload, and on a log of
/// as many small events (issue 20, item 5: every shape of event, small
/// ones included, should cost at most twice its JSON).
fn resident_memory(w: &Workload) -> Result<Vec<Row>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for (shape, bytes) in [("", w.bytes.clone()), (", small events", small_events(w.n))] {
        let path = dir.path().join("bench.jsonl");
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        let v = probe(&path)?;
        let json = bytes.len() as f64;
        let get = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let per_event = json / w.n.max(1) as f64;
        let what = if shape.is_empty() { String::new() } else { format!("{shape} ({per_event:.0} B each)") };
        rows.push(Row {
            higher_is_better: false,
            ..row(
                "rss",
                &format!("resident memory of a loaded session / JSON bytes{what}"),
                w,
                get("resident") / json,
                "x",
            )
        });
        rows.push(Row {
            higher_is_better: false,
            ..row(
                "rss",
                &format!("peak resident memory while loading / JSON bytes{what}"),
                w,
                get("peak") / json,
                "x",
            )
        });
    }
    Ok(rows)
}

/// A log of `n` small plugin events (`{"n":k}` payloads, a few dozen bytes
/// a line): the shape where the fixed cost per event dominates.
fn small_events(n: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut bytes = Vec::with_capacity(n * 56 + 64);
    let _ = writeln!(bytes, r#"{{"type":"session","version":0,"id":"small","createdAt":0}}"#);
    for k in 0..n {
        let _ = writeln!(bytes, r#"{{"seq":{k},"time":{k},"type":"x/tick","data":{{"n":{k}}}}}"#);
    }
    bytes
}

/// Runs `--memory-probe` of `path` in a child process.
fn probe(path: &std::path::Path) -> Result<serde_json::Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg("--memory-probe")
        .arg(path)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Child side: loads `file` and reports resident memory growth, in bytes.
pub(crate) fn memory_probe(file: &str) -> Result<String, String> {
    let before = proc_status_bytes("VmRSS").ok_or("no /proc/self/status")?;
    // As a user loads a file: the store's reader, then a Session.
    let stored = palimpsest_persistence_jsonl::read_session_file(std::path::Path::new(file))
        .map_err(|e| e.to_string())?;
    let session = Session::from_log(stored.header, stored.events).map_err(|e| e.to_string())?;
    let resident = proc_status_bytes("VmRSS").ok_or("no VmRSS")?.saturating_sub(before);
    let peak = proc_status_bytes("VmHWM").ok_or("no VmHWM")?.saturating_sub(before);
    let events = std::hint::black_box(&session).events().len();
    Ok(serde_json::json!({"resident": resident, "peak": peak, "events": events}).to_string())
}
