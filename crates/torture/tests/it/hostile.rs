//! Hostile input: each case gets a typed error (or is stored faithfully
//! when it is legal), never a panic, never a partial write, and never
//! memory in proportion to the attack.
//!
//! Cases already proven elsewhere are not repeated here; `docs/reliability.md`
//! lists which test covers which case.

use std::path::Path;
use std::process::Command;

use palimpsest_core_session::jsonl::{to_bytes, JsonlLog, ReadOptions};
use palimpsest_core_session::repair::repair;
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_invariants::check_log;
use palimpsest_persistence::{Durability, DurableSession, SessionStore, StoreError};
use palimpsest_persistence_jsonl::{read_session_file, read_session_file_with, JsonlStore};
use palimpsest_persistence_sqlite::{SqliteStore, Synchronous};
use palimpsest_torture::SplitMix64;

use crate::common::*;

const HEADER: &str = r#"{"type":"session","version":0,"id":"h","createdAt":0}"#;

fn tick(seq: u64) -> Event {
    Event::from_json(&format!(r#"{{"seq":{seq},"time":{seq},"type":"x/tick","data":{{"n":{seq}}}}}"#))
        .unwrap_or_else(|e| panic!("tick: {e}"))
}

fn code_of<T>(r: Result<T, StoreError>) -> (String, Option<String>) {
    match r {
        Ok(_) => ("ok".into(), None),
        Err(e) => (e.code().to_owned(), e.contract_code().map(str::to_owned)),
    }
}

/// Writes `bytes` as session `h`'s file in a fresh JSONL store directory;
/// returns the directory and the file's path.
fn jsonl_file(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("h.jsonl");
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
    (dir, path)
}

/// Through every JSONL read path (store load, store append, bare reader),
/// `bytes` are refused with `corrupt` carrying `contract`, and the file is
/// never written.
fn jsonl_refuses(bytes: &[u8], contract: &str, what: &str) {
    let (dir, path) = jsonl_file(bytes);
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let want = ("corrupt".to_owned(), Some(contract.to_owned()));
    assert_eq!(code_of(store.load("h")), want, "{what}: load");
    assert_eq!(code_of(store.append("h", &[tick(0)])), want, "{what}: append");
    assert_eq!(code_of(read_session_file(&path)), want, "{what}: read_session_file");
    assert_eq!(std::fs::read(&path).ok().as_deref(), Some(bytes), "{what}: a refused file was written");
}

// ---------------------------------------------------------------------------
// Lines of 100 MB
// ---------------------------------------------------------------------------

const HUNDRED_MB: usize = 100 << 20;

/// A session file whose second line is 100 MB of one JSON string.
fn hundred_mb_line(terminated: bool) -> Vec<u8> {
    let mut bytes = format!("{HEADER}\n{{\"seq\":0,\"time\":0,\"type\":\"x/big\",\"data\":\"").into_bytes();
    bytes.resize(bytes.len() + HUNDRED_MB, b'a');
    bytes.extend_from_slice(b"\"}");
    if terminated {
        bytes.push(b'\n');
    }
    bytes
}

#[test]
fn a_100_mb_line_is_refused_in_memory_by_the_default_cap() {
    for terminated in [true, false] {
        let bytes = hundred_mb_line(terminated);
        // Terminated or not: no writer makes such a line, so an
        // unterminated one is not a torn write to drop.
        match JsonlLog::parse_with(&bytes, ReadOptions::default()) {
            Ok(_) => panic!("a {HUNDRED_MB}-byte line passed the default cap"),
            Err(e) => assert_eq!((e.code(), e.line(), e.seq()), ("event-too-large", Some(2), Some(0)), "{e}"),
        }
    }
}

#[test]
fn a_100_mb_line_is_refused_by_a_capped_jsonl_store() {
    let (dir, path) = jsonl_file(&hundred_mb_line(true));
    let cap = ReadOptions { max_line_bytes: 1 << 20, ..ReadOptions::default() };
    let want = ("corrupt".to_owned(), Some("event-too-large".to_owned()));
    assert_eq!(code_of(read_session_file_with(&path, cap)), want);
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}")).with_read_options(cap);
    assert_eq!(code_of(store.load("h")), want);
    assert_eq!(code_of(store.append("h", &[tick(1)])), want);
    assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), Some(hundred_mb_line(true).len() as u64));
}

/// Memory is bounded by the cap, not by the line: a child process whose
/// address space (`ulimit -v`) is limited to its own peak plus 48 MB reads
/// the 100 MB line under a 1 MiB cap and reports the typed error; the same
/// child reading without the cap cannot (allocating the file fails), which
/// shows that the limit bites.
#[cfg(target_os = "linux")]
#[test]
fn a_capped_read_of_a_100_mb_line_fits_in_far_less_than_100_mb() {
    if role().is_some() {
        return capped_reader_child();
    }
    let (_dir, path) = jsonl_file(&hundred_mb_line(true));
    let test = test_name(module_path!(), "a_capped_read_of_a_100_mb_line_fits_in_far_less_than_100_mb");
    let run = |capped: bool, limit_kb: Option<u64>| {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let limit = limit_kb.map_or("unlimited".to_owned(), |kb| kb.to_string());
        let out = Command::new("sh")
            .args(["-c", r#"ulimit -v "$LIMIT" && exec "$0" "$@""#])
            .arg(exe)
            .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env("LIMIT", limit)
            .env("MALLOC_ARENA_MAX", "1")
            .env(ROLE, "capped-reader")
            .env("FILE", &path)
            .env("CAPPED", if capped { "1" } else { "0" })
            .output()
            .unwrap_or_else(|e| panic!("spawn: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let said =
            |word: &str| stdout.lines().filter_map(parse_protocol).find(|(w, _)| w == word).map(|(_, n)| n);
        (out.status.success() && said("DONE").is_some(), said("CODE"), said("PEAKKB"))
    };
    // Calibrate: the capped reader's own peak, with no limit.
    let (ok, code, peak) = run(true, None);
    assert!(ok, "the capped reader failed without a limit");
    assert_eq!(code, Some(1), "event-too-large");
    let peak = peak.unwrap_or_else(|| panic!("no peak reported"));
    let limit = peak + 48 * 1024;
    let (ok, code, _) = run(true, Some(limit));
    assert_eq!((ok, code), (true, Some(1)), "capped, in {limit} KB: the typed error");
    // Uncapped, the same read needs the whole 100 MB: it fails (std's
    // `fs::read` reports out-of-memory as an I/O error) or dies.
    let (ok, code, _) = run(false, Some(limit));
    assert!(!ok || code != Some(1), "the uncapped read fit in {limit} KB: the limit proves nothing");
}

#[cfg(target_os = "linux")]
fn capped_reader_child() {
    let path = env("FILE");
    let options = match env("CAPPED").as_str() {
        "1" => ReadOptions { max_line_bytes: 1 << 20, ..ReadOptions::default() },
        _ => ReadOptions { max_line_bytes: usize::MAX, ..ReadOptions::default() },
    };
    let result = read_session_file_with(Path::new(&path), options);
    say("CODE", u64::from(matches!(&result, Err(e) if e.contract_code() == Some("event-too-large"))));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPeak:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    say("PEAKKB", peak);
    say("DONE", 0);
}

// ---------------------------------------------------------------------------
// JSON nested 10,000 deep
// ---------------------------------------------------------------------------

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn json_nested_10000_deep_is_event_malformed_wherever_it_hides() {
    let deep = nested(10_000);
    let blocks = |depth: usize| {
        let mut b = r#"{"type":"text","text":"x"}"#.to_owned();
        for _ in 0..depth {
            b = format!(r#"{{"type":"tool-result","toolCallId":"c","isError":false,"content":[{b}]}}"#);
        }
        b
    };
    let cases = [
        ("plugin data", format!(r#"{{"seq":0,"time":0,"type":"x/y","data":{deep}}}"#)),
        (
            "sourceEventSeqs",
            format!(r#"{{"seq":0,"time":0,"type":"x/y","data":1,"sourceEventSeqs":{deep}}}"#),
        ),
        ("surfaceOp", format!(r#"{{"seq":0,"time":0,"type":"x/y","data":1,"surfaceOp":{deep}}}"#)),
        (
            "message blocks",
            format!(
                r#"{{"seq":0,"time":0,"type":"user/message","data":{{"message":{{"id":"u","role":"user","content":[{}],"source":{{"kind":"user"}}}}}},"surfaceOp":"append"}}"#,
                blocks(10_000)
            ),
        ),
    ];
    for (what, line) in &cases {
        match Event::from_json(line) {
            Ok(_) => panic!("{what}: 10,000-deep JSON was accepted"),
            Err(e) => assert!(
                ["event-malformed", "source-seqs-forbidden", "surface-op-forbidden"].contains(&e.code()),
                "{what}: {} {e}",
                e.code()
            ),
        }
        let file = format!("{HEADER}\n{line}\n");
        let err = JsonlLog::parse(file.as_bytes()).err().map(|e| (e.line(), e.code().to_owned()));
        assert_eq!(err.as_ref().map(|e| e.0), Some(Some(2)), "{what}: line");
    }
    // Through the JSONL store and the SQLite store (a row edited by hand).
    jsonl_refuses(format!("{HEADER}\n{}\n", cases[0].1).as_bytes(), "event-malformed", "deep plugin data");
    let header = format!(r#"{{"type":"session","version":0,"id":"h","createdAt":0,"x":{deep}}}"#);
    jsonl_refuses(format!("{header}\n").as_bytes(), "header-malformed", "a deep header");
    let (_dir, db) = sqlite_with_ticks(3);
    tamper(&db, "UPDATE events SET data = ?1 WHERE seq = 1", &deep);
    let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code_of(store.load("h")), ("corrupt".to_owned(), Some("event-malformed".to_owned())));
}

/// A SQLite store with session `h` holding `n` ticks.
fn sqlite_with_ticks(n: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = dir.path().join("store.db");
    let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{e}"));
    store.create(&SessionHeader::new("h", 0)).unwrap_or_else(|e| panic!("{e}"));
    store.append("h", &(0..n).map(tick).collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{e}"));
    (dir, db)
}

/// Runs `sql` (with `?1` = `value`) behind the store's back.
fn tamper(db: &Path, sql: &str, value: &dyn rusqlite::ToSql) {
    let conn = rusqlite::Connection::open(db).unwrap_or_else(|e| panic!("{e}"));
    conn.execute(sql, [value]).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

// ---------------------------------------------------------------------------
// NUL bytes
// ---------------------------------------------------------------------------

#[test]
fn raw_nul_bytes_are_log_corrupt_and_escaped_ones_round_trip_in_both_stores() {
    let tick0 = tick(0).to_json();
    for (what, line) in [
        ("a NUL between tokens", format!("{}\0\n", &tick0)),
        (
            "a raw NUL inside a string",
            r#"{"seq":0,"time":0,"type":"x/y","data":"a?b"}"#.replace('?', "\0") + "\n",
        ),
        ("a line of NULs", "\0".repeat(100) + "\n"),
    ] {
        jsonl_refuses(format!("{HEADER}\n{line}").as_bytes(), "log-corrupt", what);
    }
    jsonl_refuses(b"\0\0\0\n", "header-malformed", "a header of NULs");

    // Escaped, NUL is ordinary data: kept byte for byte by both stores, in
    // events and in the header.
    let event = Event::from_json(r#"{"seq":0,"time":0,"type":"x/y","data":{"s":"a\u0000b"}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let header = SessionHeader { cwd: Some("/tmp/a\0b".into()), ..SessionHeader::new("h", 0) };
    for kind in [Kind::Jsonl, Kind::Sqlite] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let location = kind.location(dir.path());
        let store = kind.open(&location, Synchronous::Normal).unwrap_or_else(|e| panic!("{e}"));
        store.create(&header).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        store.append("h", std::slice::from_ref(&event)).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        drop(store);
        let store = kind.open(&location, Synchronous::Normal).unwrap_or_else(|e| panic!("{e}"));
        let loaded = store.load("h").unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!((&loaded.header, loaded.events[0].to_json()), (&header, event.to_json()), "{kind:?}");
    }
}

// ---------------------------------------------------------------------------
// Seqs near u64::MAX
// ---------------------------------------------------------------------------

#[test]
fn seqs_near_u64_max_are_refused_cleanly() {
    let max = u64::MAX;
    let at = |seq: u64| Event::from_json(&format!(r#"{{"seq":{seq},"time":{max},"type":"x/y","data":1}}"#));
    assert!(at(max).is_ok(), "u64::MAX is a well-formed seq");
    assert_eq!(
        Event::from_json(r#"{"seq":18446744073709551616,"time":0,"type":"x/y","data":1}"#)
            .map_err(|e| e.code().to_owned())
            .err()
            .as_deref(),
        Some("event-malformed"),
        "one past u64::MAX"
    );
    let sources = Event::from_json(&format!(
        r#"{{"seq":5,"time":0,"type":"user/message","data":{{"message":{{"id":"u","role":"user","content":[],"source":{{"kind":"user"}}}}}},"sourceEventSeqs":[{max}],"surfaceOp":{{"op":"replace","start":{max},"end":{max}}}}}"#
    ));
    assert_eq!(sources.map_err(|e| e.code().to_owned()).err().as_deref(), Some("source-seqs-not-earlier"));

    // A log of huge seqs: the seed constructor refuses it; so does a durable
    // open through either store, and an append is `conflict` or `corrupt`.
    for first in [max - 2, max - 1, max] {
        let events: Vec<Event> = (first..=max).map(|s| at(s).unwrap_or_else(|e| panic!("{e}"))).collect();
        let err = Session::from_log(SessionHeader::new("h", 0), events.clone())
            .err()
            .map(|e| (e.code().to_owned(), e.seq()));
        assert_eq!(err, Some(("seq-not-contiguous".to_owned(), Some(first))));
        assert!(repair(&events).is_empty(), "nothing to close");
        assert!(check_log(&events).is_empty(), "check_log stops at the first section-2 refusal");

        let (dir, path) = jsonl_file(&to_bytes(&SessionHeader::new("h", 0), &events));
        let store: std::sync::Arc<dyn SessionStore> =
            std::sync::Arc::new(JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(store.load("h").map(|s| s.events).ok(), Some(events.clone()), "stored as written");
        let open = DurableSession::open(store.clone(), "h", Durability::EveryAppend)
            .err()
            .map(|e| e.code().to_owned());
        assert_eq!(open.as_deref(), Some("seq-not-contiguous"));
        let before = std::fs::read(&path).unwrap_or_default();
        assert_eq!(code_of(store.append("h", &[tick(0)])).0, "corrupt");
        assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "nothing written");
    }
    // Through a store, an append of such an event is just out of order.
    for kind in [Kind::Jsonl, Kind::Sqlite] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store =
            kind.open(&kind.location(dir.path()), Synchronous::Normal).unwrap_or_else(|e| panic!("{e}"));
        store.create(&SessionHeader::new("h", 0)).unwrap_or_else(|e| panic!("{e}"));
        let huge = at(max).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code_of(store.append("h", &[huge])).0, "conflict", "{kind:?}");
        assert_eq!(store.load("h").map(|s| s.events.len()).ok(), Some(0), "{kind:?}: nothing written");
    }
}

#[test]
fn seqs_near_u64_max_written_into_sqlite_rows_are_refused_on_load() {
    // SQLite keeps u64 seqs as their i64 bits: u64::MAX is -1, i64::MAX is
    // the largest. A row edited to either must not load as if it were a
    // real position, nor open as a session.
    for (what, value) in [("u64::MAX", -1i64), ("i64::MAX", i64::MAX), ("i64::MIN", i64::MIN)] {
        let (_dir, db) = sqlite_with_ticks(3);
        tamper(&db, "UPDATE events SET seq = ?1 WHERE seq = 2", &value);
        let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{what}: {e}"));
        let loaded = code_of(store.load("h"));
        assert_eq!(loaded.0, "corrupt", "{what}: load");
        let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(store);
        let opened = DurableSession::open(store.clone(), "h", Durability::EveryAppend)
            .err()
            .map(|e| e.code().to_owned());
        assert_eq!(opened.as_deref(), Some("corrupt"), "{what}: durable open");
    }
}

// ---------------------------------------------------------------------------
// sourceEventSeqs with a million entries
// ---------------------------------------------------------------------------

#[test]
fn a_million_source_event_seqs_are_checked_and_read_back() {
    const N: u64 = 1_000_000;
    let message = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;
    let event = |sources: &str| {
        Event::from_json(&format!(
            r#"{{"seq":{N},"time":0,"type":"assistant/message","data":{message},"sourceEventSeqs":[{sources}],"surfaceOp":"append"}}"#
        ))
    };
    let join = |it: &mut dyn Iterator<Item = u64>| it.map(|v| v.to_string()).collect::<Vec<_>>().join(",");
    // Ascending, descending: well-formed.
    let ascending = event(&join(&mut (0..N))).unwrap_or_else(|e| panic!("ascending: {e}"));
    assert_eq!(ascending.source_event_seqs().map(<[u64]>::len), Some(N as usize));
    assert!(event(&join(&mut (0..N).rev())).is_ok(), "descending");
    // A duplicate at the very end, a value not earlier, one that is not a seq.
    let dup = event(&format!("{},0", join(&mut (0..N - 1).rev())));
    assert_eq!(dup.map_err(|e| e.code().to_owned()).err().as_deref(), Some("source-seqs-duplicate"));
    let late = event(&format!("{},{N}", join(&mut (0..N - 1))));
    assert_eq!(late.map_err(|e| e.code().to_owned()).err().as_deref(), Some("source-seqs-not-earlier"));
    let bad = event(&format!("{},-1", join(&mut (0..N - 1))));
    assert_eq!(bad.map_err(|e| e.code().to_owned()).err().as_deref(), Some("source-seqs-malformed"));

    // Stores keep it byte for byte (they do not check section 2; the seed
    // constructor would, against the whole log).
    for kind in [Kind::Jsonl, Kind::Sqlite] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let location = kind.location(dir.path());
        let store = kind.open(&location, Synchronous::Normal).unwrap_or_else(|e| panic!("{e}"));
        store.create(&SessionHeader::new("h", 0)).unwrap_or_else(|e| panic!("{e}"));
        // Rows 0..N would take long; the store refuses the gap instead.
        assert_eq!(code_of(store.append("h", std::slice::from_ref(&ascending))).0, "conflict", "{kind:?}");
    }
    let file = to_bytes(&SessionHeader::new("h", 0), std::slice::from_ref(&ascending));
    let (_dir, path) = jsonl_file(&file);
    let stored = read_session_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.events[0].to_json(), ascending.to_json());
    let err = Session::from_log(stored.header, stored.events).err().map(|e| e.code().to_owned());
    assert_eq!(err.as_deref(), Some("seq-not-contiguous"));
}

// ---------------------------------------------------------------------------
// Random damage to stored files
// ---------------------------------------------------------------------------

/// Seeded byte damage (flips, zeroed runs, cuts) to real store files: every
/// open and load either works or fails with a typed code; nothing panics,
/// and what loads passes or fails the seed constructor with a code too.
#[test]
fn damaged_store_files_give_typed_errors_never_panics() {
    let (seed, _) = palimpsest_torture::seed_from_env(SEED_VAR);
    let codes = ["corrupt", "schema-mismatch", "version-unsupported", "io", "not-found", "locked"];
    for kind in [Kind::Jsonl, Kind::Sqlite] {
        // One real store file (a seeded agent session, checkpointed), damaged
        // afresh in each round.
        let original = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (header, events) = Workload::new(seed).expected();
        let location = kind.location(original.path());
        {
            let store = kind.open(&location, Synchronous::Normal).unwrap_or_else(|e| panic!("{e}"));
            store.create(&header).unwrap_or_else(|e| panic!("{e}"));
            store.append(SID, &events).unwrap_or_else(|e| panic!("{e}"));
            store.sync(SID).unwrap_or_else(|e| panic!("{e}"));
        }
        let file_of = |location: &Path| match kind {
            Kind::Jsonl => location.join(format!("{SID}.jsonl")),
            Kind::Sqlite => location.to_owned(),
            Kind::Postgres => unreachable!("store files are JSONL and SQLite"),
        };
        let pristine = std::fs::read(file_of(&location)).unwrap_or_else(|e| panic!("{e}"));
        let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
        for round in 0..40u64 {
            let ctx = format!("{kind:?} round {round} (replay with {SEED_VAR}={seed})");
            let mut rng = SplitMix64::new(seed).fork(round ^ (kind as u64) << 32);
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let location = kind.location(dir.path());
            if kind == Kind::Jsonl {
                std::fs::create_dir(&location).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            }
            let file = file_of(&location);
            let mut bytes = pristine.clone();
            match rng.below(3) {
                0 => {
                    for _ in 0..1 + rng.below(8) {
                        let i = rng.below(bytes.len() as u64) as usize;
                        bytes[i] ^= 1 << rng.below(8);
                    }
                }
                1 => {
                    let start = rng.below(bytes.len() as u64) as usize;
                    let end = (start + 1 + rng.below(4096) as usize).min(bytes.len());
                    bytes[start..end].fill(0);
                }
                _ => bytes.truncate(rng.below(bytes.len() as u64) as usize),
            }
            std::fs::write(&file, &bytes).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let outcome = match kind.open(&location, Synchronous::Normal) {
                Err(e) => e.code().to_owned(),
                Ok(store) => match store.load(SID) {
                    Err(e) => e.code().to_owned(),
                    Ok(loaded) => match Session::from_log(loaded.header, loaded.events) {
                        Ok(_) => "loads valid".to_owned(),
                        Err(e) => format!("loads, refused: {}", e.code()),
                    },
                },
            };
            assert!(
                codes.contains(&outcome.as_str()) || outcome.starts_with("loads"),
                "{ctx}: unexpected outcome {outcome}"
            );
            *outcomes.entry(outcome).or_default() += 1;
        }
        #[allow(clippy::print_stderr)] // what the damage did, for docs/reliability.md
        {
            eprintln!("damaged {kind:?} files (seed {seed}): {outcomes:?}");
        }
    }
}
