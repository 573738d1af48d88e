//! Racing processes on one JSONL session (the SQLite store's races are in
//! `persistence-sqlite/tests/it/processes.rs`):
//!
//! * two writer processes append batches to one session as fast as they
//!   can, each reloading and retrying when refused: every append either wins
//!   (its whole batch is stored once, at the seqs it named) or is refused
//!   with `conflict` or `locked` and writes nothing; the final log is valid
//!   and holds exactly the batches the writers say they won;
//! * a reader process reads the file lock-free while a writer appends: every
//!   read is a valid prefix of what is being written (whole lines, plus at
//!   most a torn cut of the line in flight, reported as such).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use palimpsest_core_session::jsonl::write_events;
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::{read_session_file, JsonlStore};

use crate::common::*;

fn tagged(seq: u64, tag: &str) -> Event {
    Event::from_json(&format!(r#"{{"seq":{seq},"time":{seq},"type":"race/tick","data":{{"tag":"{tag}"}}}}"#))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn tag_of(e: &Event) -> String {
    e.data_as::<serde_json::Value>()
        .ok()
        .and_then(|v| v["tag"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

const WRITERS: u64 = 2;
const WINS: u64 = 40;

#[test]
fn jsonl_two_writer_processes_one_wins_each_seq_the_other_is_refused() {
    if role().is_some() {
        return racing_writer();
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store_dir = dir.path().join("sessions");
    JsonlStore::open(&store_dir)
        .and_then(|s| s.create(&SessionHeader::new(SID, 0)))
        .unwrap_or_else(|e| panic!("create: {e}"));
    let test = test_name(module_path!(), "jsonl_two_writer_processes_one_wins_each_seq_the_other_is_refused");
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut child = spawn_child(
                &test,
                "writer",
                &[("DIR", store_dir.display().to_string()), ("WRITER", w.to_string())],
            );
            let rx = protocol_lines(child.stdout.take().unwrap_or_else(|| panic!("no stdout")));
            (child, rx)
        })
        .collect();
    // Per writer: the first seq of each batch it won, and its refusals.
    let mut won: Vec<Vec<u64>> = Vec::new();
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for (mut child, rx) in children {
        let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "a writer failed: {status}");
        let lines: Vec<(String, u64)> = rx.iter().collect();
        won.push(lines.iter().filter(|(w, _)| w == "WON").map(|(_, n)| *n).collect());
        for (word, n) in lines.iter().filter(|(w, _)| w == "CONFLICT" || w == "LOCKED") {
            *refused.entry(word.clone()).or_default() += n;
        }
    }

    let stored = read_session_file(&store_dir.join(format!("{SID}.jsonl"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.report.torn_tail, None);
    if let Err(e) = Session::from_log(stored.header.clone(), stored.events.clone()) {
        panic!("the raced log is invalid: {e}");
    }
    // Walk the log batch by batch: each is one writer's, whole, at the seq
    // that writer says it won, and nothing else is there.
    let mut from_log: Vec<Vec<u64>> = vec![Vec::new(); WRITERS as usize];
    let mut i = 0;
    while i < stored.events.len() {
        let tag = tag_of(&stored.events[i]);
        let (w, k, n) = parse_tag(&tag);
        assert_eq!(k, 0, "a batch starts at seq {i}: {tag}");
        for j in 0..n {
            let (w2, k2, n2) = parse_tag(&tag_of(&stored.events[i + j as usize]));
            assert_eq!((w2, k2, n2), (w, j, n), "batch at seq {i} is whole and unbroken");
        }
        from_log[w as usize].push(i as u64);
        i += n as usize;
    }
    assert_eq!(from_log, won, "the log holds exactly the batches the writers won");
    assert!(won.iter().all(|w| w.len() as u64 == WINS));
    #[allow(clippy::print_stderr)] // the figures docs/reliability.md quotes
    {
        eprintln!("jsonl race: {} batches won, refusals {refused:?}", WINS * WRITERS);
    }
}

/// Tags are `w{writer}k{index}n{size}`.
fn parse_tag(tag: &str) -> (u64, u64, u64) {
    let nums: Vec<u64> = tag
        .split(|c: char| c.is_ascii_alphabetic())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    match nums.as_slice() {
        [w, k, n] => (*w, *k, *n),
        _ => panic!("bad tag {tag:?}"),
    }
}

fn racing_writer() {
    let dir = env("DIR");
    let w: u64 = env("WRITER").parse().unwrap_or_else(|e| panic!("{e}"));
    let store = JsonlStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
    let (mut wins, mut conflicts, mut locked, start) = (0, 0, 0, Instant::now());
    while wins < WINS {
        assert!(start.elapsed() < Duration::from_secs(60), "writer {w} starved");
        // A lock-free read, as any process may do; by the append it may be stale.
        let len = read_session_file(Path::new(&dir).join(format!("{SID}.jsonl")).as_path())
            .unwrap_or_else(|e| panic!("writer {w} read: {e}"))
            .events
            .len() as u64;
        let n = 1 + (w + wins) % 5;
        let batch: Vec<Event> = (0..n).map(|k| tagged(len + k, &format!("w{w}k{k}n{n}"))).collect();
        match store.append(SID, &batch) {
            Ok(()) => {
                say("WON", len);
                wins += 1;
            }
            Err(e) if e.code() == "conflict" => conflicts += 1,
            Err(e) if e.code() == "locked" => locked += 1,
            Err(e) => panic!("writer {w}: [{}] {e}", e.code()),
        }
        // Let the other writer in: the lock is held until the session is closed.
        store.close(SID);
    }
    say("CONFLICT", conflicts);
    say("LOCKED", locked);
}

// ---------------------------------------------------------------------------

const BATCHES: u64 = 300;
const BATCH: u64 = 7;

fn big_tick(seq: u64) -> Event {
    // Lines of 1 to 40 KB, so many writes are in flight when the reader reads.
    let pad = "r".repeat(1_000 + (seq as usize * 7_919) % 39_000);
    Event::from_json(&format!(r#"{{"seq":{seq},"time":{seq},"type":"race/tick","data":"{pad}"}}"#))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn jsonl_a_reader_process_always_sees_a_valid_prefix_during_heavy_writes() {
    if role().is_some() {
        return steady_writer();
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store_dir = dir.path().join("sessions");
    let header = SessionHeader::new(SID, 0);
    JsonlStore::open(&store_dir).and_then(|s| s.create(&header)).unwrap_or_else(|e| panic!("create: {e}"));
    let test =
        test_name(module_path!(), "jsonl_a_reader_process_always_sees_a_valid_prefix_during_heavy_writes");
    let mut child = spawn_child(&test, "steady", &[("DIR", store_dir.display().to_string())]);
    let path = store_dir.join(format!("{SID}.jsonl"));
    let total = BATCHES * BATCH;
    let (mut last, mut reads, mut torn, mut mid_batch) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    while last < total {
        assert!(start.elapsed() < Duration::from_secs(120), "the writer stalled at {last}");
        let stored = read_session_file(&path).unwrap_or_else(|e| panic!("read {reads}: [{}] {e}", e.code()));
        reads += 1;
        let n = stored.events.len() as u64;
        assert!(n >= last, "the log shrank: {last} -> {n}");
        for (i, e) in stored.events.iter().enumerate().skip(last as usize) {
            assert_eq!(e, &big_tick(i as u64), "read {reads}: seq {i}");
        }
        if let Some(t) = stored.report.torn_tail {
            torn += 1;
            let bytes = std::fs::read(&path).unwrap_or_default();
            let end = (t.offset + t.len) as usize;
            let cut = &bytes[t.offset as usize..end.min(bytes.len())];
            let mut next = Vec::new();
            write_events(&[big_tick(n)], &mut next);
            // The file has grown since; the part read as torn is a cut of line n.
            assert!(next.starts_with(cut), "read {reads}: the torn tail is not a cut of seq {n}'s line");
        }
        mid_batch += u64::from(!n.is_multiple_of(BATCH));
        if let Err(e) = Session::from_log(stored.header, stored.events) {
            panic!("read {reads}: the prefix is invalid: {e}");
        }
        last = n;
    }
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "the writer failed: {status}");
    #[allow(clippy::print_stderr)] // the figures docs/reliability.md quotes
    {
        eprintln!(
            "jsonl reader: {reads} reads, {torn} saw a write in flight, {mid_batch} saw part of a batch"
        );
    }
    assert!(reads > 1, "the reader saw the log grow");
}

fn steady_writer() {
    let store = JsonlStore::open(env("DIR")).unwrap_or_else(|e| panic!("{e}"));
    for b in 0..BATCHES {
        let batch: Vec<Event> = (b * BATCH..(b + 1) * BATCH).map(big_tick).collect();
        store.append(SID, &batch).unwrap_or_else(|e| panic!("append: {e}"));
    }
}
