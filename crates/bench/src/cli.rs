//! The `cli` section: whole `palimpsest` processes, as a user runs them,
//! each beside the library doing the same job in this process (issue 20,
//! item 1), and their peak resident memory (issue 18's growth table).
//!
//! The binary is the release `palimpsest` next to this executable (`cargo
//! xtask bench` builds it). Each command runs in a child of a small child
//! of this process (`--peak-of`): that middle process's
//! `getrusage(RUSAGE_CHILDREN)` is exactly the command's peak RSS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use palimpsest_core_session::jsonl::ReadOptions;
use palimpsest_core_session::SessionHeader;
use palimpsest_invariants::{Report, Retain};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::report::Row;
use crate::sections::{per_sec, row, with_baseline};
use crate::Workload;

/// One run of a command: wall time and peak resident memory.
#[derive(Debug, Clone, Copy)]
struct Run {
    seconds: f64,
    peak_bytes: f64,
}

/// Child mode (`--peak-of CMD ARGS...`): runs the command with its output
/// discarded, and prints `{"seconds": s, "peakBytes": n}`, or fails with
/// the command's status.
pub(crate) fn peak_of(command: &[String]) -> Result<String, String> {
    let (program, args) = command.split_first().ok_or("--peak-of needs a command")?;
    let start = Instant::now();
    // Stdout goes nowhere (an export of 10M events is gigabytes); stderr
    // is kept for the error.
    let out = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    // Exit 1 is `validate`'s "invalid": a measured answer, not a failure.
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(format!("{command:?}: {}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let peak_bytes = children_peak_bytes()?;
    Ok(serde_json::json!({"seconds": seconds, "peakBytes": peak_bytes}).to_string())
}

#[cfg(unix)]
fn children_peak_bytes() -> Result<f64, String> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).map_err(|e| e.to_string())?;
    // Linux reports ru_maxrss in KiB.
    Ok(usage.max_rss() as f64 * 1024.0)
}

#[cfg(not(unix))]
fn children_peak_bytes() -> Result<f64, String> {
    Ok(f64::NAN)
}

/// The `palimpsest` binary beside this executable.
fn binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Under `cargo test` this is target/<profile>/deps/<test>.
    for dir in exe.ancestors().skip(1).take(2) {
        let candidate = dir.join(format!("palimpsest{}", std::env::consts::EXE_SUFFIX));
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "no palimpsest binary beside {}: build it first (cargo build --release -p palimpsest-cli; \
         `cargo xtask bench` does)",
        exe.display()
    ))
}

/// The median of `runs` runs of `palimpsest ARGS` in `dir`.
fn measure(dir: &Path, runs: usize, args: &[&str]) -> Result<Run, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = binary()?;
    let mut all: Vec<Run> = Vec::new();
    for _ in 0..runs.max(1) {
        let out = Command::new(&exe)
            .current_dir(dir)
            .arg("--peak-of")
            .arg(&bin)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        all.push(Run {
            seconds: v["seconds"].as_f64().unwrap_or(f64::NAN),
            peak_bytes: v["peakBytes"].as_f64().unwrap_or(f64::NAN),
        });
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Run {
        seconds: median(all.iter().map(|r| r.seconds).collect()),
        peak_bytes: median(all.iter().map(|r| r.peak_bytes).collect()),
    })
}

/// Sessions in the many-sessions store of [`many_sessions`].
const MANY: usize = 10_000;

/// Events in each of them.
const MANY_EVENTS: usize = 27;

/// Set once the many-sessions rows ran: they do not depend on the
/// workload's size, so they are measured at the first size only.
static MANY_DONE: AtomicBool = AtomicBool::new(false);

/// `palimpsest sessions` on a SQLite store and a JSONL directory of
/// [`MANY`] sessions of [`MANY_EVENTS`] events each (issue 18: at most
/// 300 ms): what a picker costs on a store people have used for a while.
fn many_sessions(w: &Workload, dir: &Path) -> Result<Vec<Row>, String> {
    let db = SqliteStore::open(dir.join("many.db")).map_err(|e| e.to_string())?;
    let jsonl = JsonlStore::open(dir.join("many")).map_err(|e| e.to_string())?;
    let (header, events) = crate::workload::generate(MANY_EVENTS, 7);
    for i in 0..MANY {
        let header = SessionHeader { id: format!("session-{i:05}"), ..header.clone() };
        for store in [&db as &dyn SessionStore, &jsonl] {
            store.create_with_events(&header, &events).map_err(|e| e.to_string())?;
        }
    }
    drop((db, jsonl));
    let mut rows = Vec::new();
    for (name, store) in [("SQLite", "many.db"), ("JSONL store", "many/")] {
        let run = measure(dir, 3, &["sessions", store])?;
        rows.push(Row {
            higher_is_better: false,
            ..row(
                "cli",
                &format!("palimpsest sessions, {MANY} sessions ({name}), whole process"),
                w,
                run.seconds * 1e3,
                "ms",
            )
        });
    }
    Ok(rows)
}

/// Runs the whole section on `w`.
pub(crate) fn cli(w: &Workload) -> Result<Vec<Row>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let d = dir.path();
    std::fs::write(d.join("w.jsonl"), &w.bytes).map_err(|e| e.to_string())?;
    let runs = w.runs().min(5);
    // The stores, written by `convert` as a user would (it saves a checkpoint).
    measure(d, 1, &["convert", "w.jsonl", "w.db"])?;
    measure(d, 1, &["convert", "w.jsonl", "dir/"])?;
    let id = w.header.id.as_str();
    let mut rows = Vec::new();
    // What a resume reads grows with the surface, not the log: say how
    // large it is at this size.
    let surface = Command::new(binary()?)
        .current_dir(d)
        .args(["surface", "w.db"])
        .output()
        .map_err(|e| e.to_string())?;
    let entries = serde_json::from_slice::<Vec<u64>>(&surface.stdout).map_err(|e| e.to_string())?.len();
    rows.push(Row {
        higher_is_better: false,
        ..row("cli", "surface entries at the end of the session", w, entries as f64, "entries")
    });
    let mb = |r: Run| r.peak_bytes / 1e6;
    let ms = |r: Run| r.seconds * 1e3;
    let secs = |r: Run| Duration::from_secs_f64(r.seconds);

    // validate: the process against the library's own check of the same
    // bytes, read from memory (no file, no process start).
    let library = crate::measure::median(runs, || (), |()| Report::check_jsonl(&w.bytes).is_valid());
    // A streamed check of the same bytes, keeping what an append needs.
    let streamed_by = |check: fn(&[u8], ReadOptions, Retain) -> std::io::Result<Report>| {
        crate::measure::median(
            runs,
            || (),
            |()| check(w.bytes.as_slice(), ReadOptions::default(), Retain::Surface).map(|r| r.is_valid()),
        )
    };
    let streamed = streamed_by(|bytes, options, retain| Report::check_jsonl_read(bytes, options, retain));
    // What the binary calls: reading ahead on a thread of its own, here on
    // the system allocator (the binary uses mimalloc). In this warm
    // process it beats `check_jsonl_read` even on glibc's malloc; in a
    // fresh process on glibc it did not (docs/performance.md).
    let ahead = streamed_by(|bytes, options, retain| Report::check_jsonl_read_ahead(bytes, options, retain));
    let file = measure(d, runs, &["validate", "w.jsonl"])?;
    rows.push(with_baseline(
        row("cli", "palimpsest validate FILE (JSONL), whole process", w, per_sec(w.n, secs(file)), "ev/s"),
        "library Report::check_jsonl of the bytes in memory",
        per_sec(w.n, library),
    ));
    rows.push(with_baseline(
        row("cli", "library check_jsonl_read, streamed (Retain::Surface)", w, per_sec(w.n, streamed), "ev/s"),
        "library Report::check_jsonl (whole)",
        per_sec(w.n, library),
    ));
    rows.push(with_baseline(
        row("cli", "library check_jsonl_read_ahead, system allocator", w, per_sec(w.n, ahead), "ev/s"),
        "library check_jsonl_read, streamed",
        per_sec(w.n, streamed),
    ));
    // Sessions of other shapes, each beside the workload's own rate.
    let mut beside_the_workload = |name: &str, bytes: &[u8], n: usize, what: &str| -> Result<(), String> {
        std::fs::write(d.join(name), bytes).map_err(|e| e.to_string())?;
        let run = measure(d, runs, &["validate", name])?;
        rows.push(with_baseline(
            row("cli", what, w, per_sec(n, secs(run)), "ev/s"),
            "palimpsest validate FILE, the workload",
            per_sec(w.n, secs(file)),
        ));
        Ok(())
    };
    // A session that prunes (a replace every ~35 events on a surface of
    // thousands of entries): each replace must cost what it shadows, not
    // the whole surface (docs/performance.md).
    let pruned = crate::Workload::pruned(w.n);
    beside_the_workload(
        "pruned.jsonl",
        &pruned.bytes,
        pruned.n,
        "palimpsest validate FILE, a session that prunes its tool results",
    )?;
    // Every replace of the surface's first entry: a search for its ends
    // from either end of the surface would make this quadratic.
    beside_the_workload(
        "front.jsonl",
        &crate::workload::front_replaces_jsonl(w.n),
        w.n,
        "palimpsest validate FILE, a log replacing the surface's first entry, n/2 times",
    )?;
    let db = measure(d, runs, &["validate", "w.db"])?;
    rows.push(with_baseline(
        row("cli", "palimpsest validate STORE.db (SQLite), whole process", w, per_sec(w.n, secs(db)), "ev/s"),
        "library Report::check_jsonl of the bytes in memory",
        per_sec(w.n, library),
    ));
    let json_mb = w.bytes.len() as f64 / 1e6;
    let peak = |name: &str, run: Run| Row {
        higher_is_better: false,
        ..row("cli", &format!("peak RSS, {name} (the file: {json_mb:.0} MB)"), w, mb(run), "MB")
    };
    rows.push(peak("validate FILE", file));
    rows.push(peak("validate STORE.db", db));

    // Resume: open + derive the next request, from the checkpoint (plain
    // `derive` reads the whole log, as `validate` does).
    for (name, store) in [("SQLite", "w.db"), ("JSONL store", "dir/")] {
        let run = measure(d, runs, &["derive", "--request", "--from-checkpoint", store, "--session", id])?;
        rows.push(Row {
            higher_is_better: false,
            ..row(
                "cli",
                &format!("palimpsest derive --request --from-checkpoint ({name}), whole process"),
                w,
                ms(run),
                "ms",
            )
        });
        rows.push(Row {
            higher_is_better: false,
            ..row("cli", &format!("peak RSS, derive --request --from-checkpoint ({name})"), w, mb(run), "MB")
        });
    }

    if !MANY_DONE.swap(true, Ordering::Relaxed) {
        rows.extend(many_sessions(w, d)?);
    }

    // sessions: O(sessions), whatever the session's length.
    for (name, store) in [("SQLite", "w.db"), ("JSONL store", "dir/")] {
        let run = measure(d, runs, &["sessions", store])?;
        rows.push(Row {
            higher_is_better: false,
            ..row("cli", &format!("palimpsest sessions ({name}), whole process"), w, ms(run), "ms")
        });
    }

    // inspect, export and explain show every event, or any one: they
    // stream the log (twice or more), so their memory stays flat while
    // their time grows with the log. Output goes nowhere.
    let middle = (w.n / 2).to_string();
    let showing: [(&str, Vec<&str>); 5] = [
        ("inspect FILE", vec!["inspect", "w.jsonl"]),
        ("inspect STORE.db", vec!["inspect", "w.db"]),
        ("export FILE --format md", vec!["export", "w.jsonl", "--format", "md"]),
        ("export STORE.db --format json", vec!["export", "w.db", "--format", "json"]),
        ("explain FILE (the middle event)", vec!["explain", "w.jsonl", &middle]),
    ];
    for (name, args) in showing {
        let run = measure(d, runs.min(3), &args)?;
        rows.push(row(
            "cli",
            &format!("palimpsest {name}, whole process"),
            w,
            per_sec(w.n, secs(run)),
            "ev/s",
        ));
        rows.push(peak(name, run));
    }
    Ok(rows)
}
