//! Several real processes on one database file: racing appenders, a reader
//! beside a writer, a writer killed mid-stream, a held write lock.
//!
//! Each test re-runs this test binary as its children (see
//! [`spawn_child`]); a child recognises itself by the role variable and runs
//! its part instead of the parent's.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use rusqlite::{Connection, TransactionBehavior};

use crate::common::{
    code, env, spawn_child, tag_of, temp_db, test_name, tick, ticks, wait_for, wait_ok, ROLE,
};

/// The outcome of an append as one word, written to a file for the parent.
fn outcome(r: &Result<(), StoreError>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(e) => e.code(),
    }
}

fn open(path: &str) -> SqliteStore {
    SqliteStore::open(path).unwrap_or_else(|e| panic!("child open {path}: {e}"))
}

// ---------------------------------------------------------------------------

#[test]
fn two_processes_appending_the_same_seq_one_wins_one_conflicts() {
    if std::env::var(ROLE).is_ok() {
        return racer();
    }
    let (dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    store.append("s", &ticks(0, 5, "base")).expect("append");
    drop(store);

    let name = test_name(module_path!(), "two_processes_appending_the_same_seq_one_wins_one_conflicts");
    let (db, barrier) = (path.display().to_string(), dir.path().display().to_string());
    let children: Vec<_> = (0..2)
        .map(|i| {
            let idx = i.to_string();
            spawn_child(&name, "racer", &[("DB", &db), ("BARRIER", &barrier), ("IDX", &idx)])
        })
        .collect();
    // Both children have loaded the log (5 events) before either appends.
    for i in 0..2 {
        wait_for(&dir.path().join(format!("ready-{i}")));
    }
    std::fs::write(dir.path().join("go"), b"").expect("go");
    for child in children {
        wait_ok(child, "racer");
    }
    let results: Vec<String> = (0..2)
        .map(|i| std::fs::read_to_string(dir.path().join(format!("result-{i}"))).expect("result"))
        .collect();
    let winner = match (results[0].as_str(), results[1].as_str()) {
        ("ok", "conflict") => 0,
        ("conflict", "ok") => 1,
        other => panic!("expected one ok and one conflict, got {other:?}"),
    };
    let events = SqliteStore::open(&path).and_then(|s| s.load("s")).expect("load").events;
    assert_eq!(events.len(), 105, "the base and exactly one batch");
    let mut expected = ticks(0, 5, "base");
    expected.extend(ticks(5, 100, &format!("racer{winner}")));
    assert_eq!(events, expected, "the winner's batch, whole, and nothing of the loser's");
}

fn racer() {
    let (db, barrier, idx) = (env("DB"), env("BARRIER"), env("IDX"));
    let barrier = Path::new(&barrier);
    let store = open(&db);
    let len = store.load("s").expect("load").events.len() as u64;
    std::fs::write(barrier.join(format!("ready-{idx}")), b"").expect("ready");
    wait_for(&barrier.join("go"));
    let result = store.append("s", &ticks(len, 100, &format!("racer{idx}")));
    std::fs::write(barrier.join(format!("result-{idx}")), outcome(&result)).expect("result");
}

// ---------------------------------------------------------------------------

const WRITERS: usize = 2;
const ROUNDS: usize = 60;

/// The size of batch `round` of writer `w`: 1 to 7 events.
fn batch_size(w: usize, round: usize) -> u64 {
    ((w * 3 + round * 5) % 7 + 1) as u64
}

#[test]
fn processes_hammering_one_session_never_interleave_or_lose_a_batch() {
    if std::env::var(ROLE).is_ok() {
        return hammerer();
    }
    let (_dir, path) = temp_db();
    SqliteStore::open(&path).and_then(|s| s.create(&SessionHeader::new("s", 0))).expect("create");
    let name = test_name(module_path!(), "processes_hammering_one_session_never_interleave_or_lose_a_batch");
    let db = path.display().to_string();
    let children: Vec<_> = (0..WRITERS)
        .map(|w| spawn_child(&name, "hammerer", &[("DB", &db), ("IDX", &w.to_string())]))
        .collect();
    for child in children {
        wait_ok(child, "hammerer");
    }

    let events = SqliteStore::open(&path).and_then(|s| s.load("s")).expect("load").events;
    let total: u64 = (0..WRITERS).flat_map(|w| (0..ROUNDS).map(move |r| batch_size(w, r))).sum();
    assert_eq!(events.len() as u64, total, "every acknowledged batch is there, nothing else");
    // Walk the log: each batch's events stand together, in order, whole.
    let mut seen: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut i = 0;
    while i < events.len() {
        let (w, round, k, n) = parse_tag(&events[i]);
        assert_eq!(k, 0, "a batch starts with its first event at seq {i}");
        for j in 0..n {
            let (w2, r2, k2, n2) = parse_tag(&events[i + j as usize]);
            assert_eq!((w2, r2, k2, n2), (w, round, j, n), "batch w{w} r{round} is whole and unbroken");
        }
        assert!(seen.insert((w, round), n).is_none(), "batch w{w} r{round} stored once");
        i += n as usize;
    }
    assert_eq!(seen.len(), WRITERS * ROUNDS);
}

/// Tags are `w{writer}r{round}k{index}n{size}`.
fn parse_tag(e: &Event) -> (usize, usize, u64, u64) {
    let tag = tag_of(e);
    let nums: Vec<u64> = tag
        .split(|c: char| c.is_ascii_alphabetic())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("n"))
        .collect();
    match nums.as_slice() {
        [w, r, k, n] => (*w as usize, *r as usize, *k, *n),
        _ => panic!("bad tag {tag:?} at seq {}", e.seq()),
    }
}

fn hammerer() {
    let (db, w) = (env("DB"), env("IDX").parse::<usize>().expect("idx"));
    let store = open(&db);
    for round in 0..ROUNDS {
        let n = batch_size(w, round);
        loop {
            let len = store.load("s").expect("load").events.len() as u64;
            let batch: Vec<Event> = (0..n).map(|k| tick(len + k, &format!("w{w}r{round}k{k}n{n}"))).collect();
            match store.append("s", &batch) {
                Ok(()) => break,
                // Another writer got there first (or held the lock past the
                // timeout): reload and try again.
                Err(e) if e.code() == "conflict" || e.code() == "locked" => continue,
                Err(e) => panic!("writer {w}: {e}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------

const READER_BATCHES: u64 = 40;
const READER_BATCH: u64 = 50;

#[test]
fn a_reader_in_another_process_sees_a_consistent_prefix_while_a_writer_works() {
    if std::env::var(ROLE).is_ok() {
        return steady_writer();
    }
    let (dir, path) = temp_db();
    SqliteStore::open(&path).and_then(|s| s.create(&SessionHeader::new("s", 0))).expect("create");
    let name = test_name(
        module_path!(),
        "a_reader_in_another_process_sees_a_consistent_prefix_while_a_writer_works",
    );
    let (db, barrier) = (path.display().to_string(), dir.path().display().to_string());
    let child = spawn_child(&name, "writer", &[("DB", &db), ("BARRIER", &barrier)]);

    let reader = SqliteStore::open(&path).expect("reader");
    let total = READER_BATCHES * READER_BATCH;
    let (mut last, mut partial_views, mut reads) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    loop {
        let events = reader.load("s").expect("a read never fails while a writer works").events;
        let len = events.len() as u64;
        reads += 1;
        assert_eq!(len % READER_BATCH, 0, "a whole number of batches, never part of one ({len})");
        assert!(len >= last, "the log never shrinks ({last} -> {len})");
        for (i, e) in events.iter().enumerate() {
            let i = i as u64;
            assert_eq!(tag_of(e), format!("b{}-{}", i / READER_BATCH, i % READER_BATCH), "seq {i}");
        }
        if len > 0 && len < total {
            partial_views += 1;
        }
        if len >= total / 2 {
            // Tell the writer it may finish: we have seen it half way.
            let _ = std::fs::write(dir.path().join("seen"), b"");
        }
        last = len;
        if len == total {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the writer stalled at {len}");
    }
    wait_ok(child, "writer");
    assert!(partial_views >= 1, "the reader saw the log while it grew ({reads} reads)");
}

fn steady_writer() {
    let (db, barrier) = (env("DB"), env("BARRIER"));
    let store = open(&db);
    for b in 0..READER_BATCHES {
        if b == READER_BATCHES / 2 {
            wait_for(&Path::new(&barrier).join("seen"));
        }
        let batch: Vec<Event> =
            (0..READER_BATCH).map(|i| tick(b * READER_BATCH + i, &format!("b{b}-{i}"))).collect();
        store.append("s", &batch).expect("append");
    }
}

// ---------------------------------------------------------------------------

#[test]
fn a_writer_killed_mid_stream_leaves_whole_batches_and_a_usable_store() {
    if std::env::var(ROLE).is_ok() {
        return endless_writer();
    }
    for synchronous in ["full", "normal"] {
        let (_dir, path) = temp_db();
        SqliteStore::open(&path).and_then(|s| s.create(&SessionHeader::new("s", 0))).expect("create");
        let name =
            test_name(module_path!(), "a_writer_killed_mid_stream_leaves_whole_batches_and_a_usable_store");
        let db = path.display().to_string();
        let mut child = spawn_child(&name, "endless", &[("DB", &db), ("SYNC", synchronous)]);
        let reader = SqliteStore::open(&path).expect("reader");
        let start = Instant::now();
        while reader.load("s").expect("load").events.len() < 300 {
            assert!(start.elapsed() < Duration::from_secs(60), "the writer did not get going");
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().expect("kill the writer");
        child.wait().expect("reap");
        drop(reader);

        let store = SqliteStore::open(&path).expect("reopen after the kill");
        let events = store.load("s").expect("load").events;
        let len = events.len() as u64;
        assert!(len >= 300 && len.is_multiple_of(20), "whole batches only ({synchronous}): {len}");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(tag_of(e), format!("e-{}", i % 20), "seq {i}");
        }
        store.append("s", &ticks(len, 1, "after")).expect("the store takes appends after the crash");
    }
}

fn endless_writer() {
    let synchronous = match env("SYNC").as_str() {
        "full" => Synchronous::Full,
        _ => Synchronous::Normal,
    };
    let options = SqliteOptions { synchronous, ..SqliteOptions::default() };
    let store = SqliteStore::open_with(env("DB"), options).expect("open");
    let (mut len, start) = (0, Instant::now());
    // The parent kills this process; the time bound only keeps a failed
    // parent from leaving it running.
    while start.elapsed() < Duration::from_secs(60) {
        store.append("s", &ticks(len, 20, "e")).expect("append");
        len += 20;
    }
}

// ---------------------------------------------------------------------------

#[test]
fn a_writer_that_cannot_get_the_lock_in_time_is_locked_and_writes_nothing() {
    let (_dir, path) = temp_db();
    let options = SqliteOptions { busy_timeout: Duration::from_millis(100), ..SqliteOptions::default() };
    let store = SqliteStore::open_with(&path, options).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");

    // Another connection (as another process would) holds the write lock.
    let mut other = Connection::open(&path).expect("raw open");
    let tx = other.transaction_with_behavior(TransactionBehavior::Immediate).expect("write lock");
    let started = Instant::now();
    let err = store.append("s", &ticks(0, 3, "a")).expect_err("the lock is held");
    assert_eq!(err.code(), "locked", "{err}");
    assert!(started.elapsed() >= Duration::from_millis(100), "it waited the busy timeout first");
    // Reads do not wait for writers in WAL mode.
    assert_eq!(store.load("s").expect("load").events.len(), 0);
    drop(tx);

    // A lock timeout is not an I/O error: the store still writes.
    assert_eq!(code(store.append("s", &ticks(0, 3, "a"))), Ok(()));
    assert_eq!(store.load("s").expect("load").events, ticks(0, 3, "a"));
}

// ---------------------------------------------------------------------------

#[test]
fn processes_initialising_the_same_new_file_at_once_all_succeed() {
    if std::env::var(ROLE).is_ok() {
        return initialiser();
    }
    // Each round races on a fresh file; a race lost in the initialisation
    // shows as a child failing, so several rounds make a miss unlikely.
    for _round in 0..4 {
        let (dir, path) = temp_db();
        let name = test_name(module_path!(), "processes_initialising_the_same_new_file_at_once_all_succeed");
        let (db, barrier) = (path.display().to_string(), dir.path().display().to_string());
        let children: Vec<_> = (0..3)
            .map(|i| {
                spawn_child(
                    &name,
                    "initialiser",
                    &[("DB", &db), ("BARRIER", &barrier), ("IDX", &i.to_string())],
                )
            })
            .collect();
        for i in 0..3 {
            wait_for(&dir.path().join(format!("ready-{i}")));
        }
        assert!(!path.exists(), "no child opened the file before the start");
        std::fs::write(dir.path().join("go"), b"").expect("go");
        for child in children {
            wait_ok(child, "initialiser");
        }
        let store = SqliteStore::open(&path).expect("open");
        let ids: Vec<String> = store.list().expect("list").into_iter().map(|h| h.id).collect();
        assert_eq!(ids, ["s0", "s1", "s2"], "each process initialised or found the schema, and wrote");
    }
}

fn initialiser() {
    let (db, barrier, idx) = (env("DB"), env("BARRIER"), env("IDX"));
    let barrier = Path::new(&barrier);
    std::fs::write(barrier.join(format!("ready-{idx}")), b"").expect("ready");
    wait_for(&barrier.join("go"));
    let store = open(&db);
    let id = format!("s{idx}");
    store.create(&SessionHeader::new(id.clone(), 0)).expect("create");
    store.append(&id, &ticks(0, 10, &id)).expect("append");
}
