//! SIGKILL aimed at the two riskiest moments of each store:
//!
//! * **SQLite checkpoint**: a child under `synchronous = NORMAL` appends a
//!   batch, says `SYNC n`, runs `sync` (a `wal_checkpoint(FULL)` that copies
//!   the WAL into the database and fsyncs both), then says `ACK n`. The
//!   parent kills it a random 0–3 ms after a random `SYNC`, so many kills
//!   land inside the checkpoint.
//! * **JSONL torn-tail truncation**: a child repeatedly leaves a torn tail
//!   (a cut of the next event's line, as a crashed writer would), says
//!   `TORN n`, reopens the file, appends (which first truncates the torn
//!   tail away, then writes), syncs and says `ACK n`. The parent kills it a
//!   random 0–1.5 ms after a random `TORN`, inside the open, the read, the
//!   truncation, the write or the sync.
//!
//! After each kill: the store (file) opens and loads valid; every event
//! appended before the kill is there (a process crash loses nothing that
//! `append` returned, whatever the sync policy), byte for byte; only whole
//! batches (SQLite) or whole lines plus at most a torn cut of the next one
//! (JSONL) are stored; SQLite passes `PRAGMA integrity_check`; the log
//! opens through `Session::from_log` and takes another append.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use palimpsest_core_session::jsonl::{to_bytes, write_events};
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::{Durability, DurableSession, SessionStore};
use palimpsest_persistence_jsonl::{read_session_file, SessionFile};
use palimpsest_persistence_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use palimpsest_torture::{seed_from_env, SplitMix64};

use crate::common::*;

/// Kills per test unless `PALIMPSEST_CRASH_KILLS` says otherwise (halved).
const KILLS: u64 = 25;
/// Events per SQLite batch.
const BATCH: u64 = 20;

/// Plugin event `seq`, padded to a few hundred bytes to a few KB so the
/// WAL and the lines have some size. The same seq always gives the same bytes.
fn tick(seq: u64) -> Event {
    let pad = "p".repeat(200 + (SplitMix64::new(seq).below(2_800) as usize));
    let json = format!(
        r#"{{"seq":{seq},"time":{},"type":"torture/tick","data":{{"n":{seq},"pad":"{pad}"}}}}"#,
        T0 + seq
    );
    Event::from_json(&json).unwrap_or_else(|e| panic!("tick {seq}: {e}"))
}

fn ticks(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(tick).collect()
}

fn header() -> SessionHeader {
    SessionHeader::new(SID, T0)
}

/// The seed and the kill count, printed.
fn start(test: &str) -> (u64, u64) {
    let (seed, replayed) = seed_from_env(SEED_VAR);
    let kills = kills(KILLS * 2) / 2;
    #[allow(clippy::print_stderr)] // the seed is what makes a failure reproducible
    {
        eprintln!("{test}: seed {seed} ({}), {kills} kills", if replayed { "replayed" } else { "fresh" });
    }
    (seed, kills)
}

fn last(seen: &[(String, u64)], word: &str) -> Option<u64> {
    seen.iter().filter(|(w, _)| w == word).map(|(_, n)| *n).max()
}

// ---------------------------------------------------------------------------

#[test]
fn sqlite_survives_sigkill_during_checkpoints() {
    if role().is_some() {
        return checkpoint_child();
    }
    let test = test_name(module_path!(), "sqlite_survives_sigkill_during_checkpoints");
    let (seed, kills) = start(&test);
    let master = SplitMix64::new(seed ^ 0xC4EC);
    let (mut mid_checkpoint, mut events_checked) = (0, 0);
    for i in 0..kills {
        let ctx = format!("checkpoint kill #{i} (replay with {SEED_VAR}={seed})");
        let mut rng = master.fork(i);
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let db = dir.path().join("store.db");
        let mut child = spawn_child(&test, "checkpoint", &[("DB", db.display().to_string())]);
        let rx = protocol_lines(child.stdout.take().unwrap_or_else(|| panic!("{ctx}: no stdout")));
        let target = rng.below(30) * BATCH;
        let mut seen = wait_for_line(&rx, |word, n| word == "SYNC" && n >= target);
        std::thread::sleep(Duration::from_micros(rng.below(3_000)));
        seen.extend(kill_and_drain(child, &rx));
        let (acked, appended) = (last(&seen, "ACK").unwrap_or(0), last(&seen, "APPENDED").unwrap_or(0));
        mid_checkpoint += u64::from(last(&seen, "SYNC") > last(&seen, "ACK"));

        let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{ctx}: the store does not open: {e}"));
        let events = store.load(SID).unwrap_or_else(|e| panic!("{ctx}: load: {e}")).events;
        let n = events.len() as u64;
        events_checked += n;
        assert!(n >= appended.max(acked), "{ctx}: {appended} appended, {acked} synced, {n} survived");
        assert_eq!(n % BATCH, 0, "{ctx}: only whole batches are stored ({n} events)");
        assert_eq!(events, ticks(0..n), "{ctx}: the stored events are not what was appended");
        let conn = rusqlite::Connection::open(&db).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(check, "ok", "{ctx}: integrity_check");
        drop(conn);
        let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(store);
        let (mut session, _) = DurableSession::open(store.clone(), SID, Durability::EveryAppend)
            .unwrap_or_else(|e| panic!("{ctx}: the log does not open: {e}"));
        session.append(tick(n)).unwrap_or_else(|e| panic!("{ctx}: an append after the kill: {e}"));
        assert_eq!(
            store.load(SID).map(|s| s.events.len() as u64).ok(),
            Some(n + 1),
            "{ctx}: after one more append"
        );
    }
    #[allow(clippy::print_stderr)] // the figures docs/reliability.md quotes
    {
        eprintln!("{test}: seed {seed}: {kills} kills, {mid_checkpoint} between SYNC and ACK, {events_checked} events checked");
    }
}

fn checkpoint_child() {
    let options = SqliteOptions { synchronous: Synchronous::Normal, ..SqliteOptions::default() };
    let store = SqliteStore::open_with(env("DB"), options).unwrap_or_else(|e| panic!("child open: {e}"));
    store.create(&header()).unwrap_or_else(|e| panic!("create: {e}"));
    let (mut len, start) = (0, Instant::now());
    while start.elapsed() < Duration::from_secs(60) {
        store.append(SID, &ticks(len..len + BATCH)).unwrap_or_else(|e| panic!("append: {e}"));
        len += BATCH;
        say("APPENDED", len);
        say("SYNC", len);
        store.sync(SID).unwrap_or_else(|e| panic!("sync: {e}"));
        say("ACK", len);
    }
}

// ---------------------------------------------------------------------------

#[test]
fn jsonl_survives_sigkill_while_cutting_torn_tails() {
    if role().is_some() {
        return truncation_child();
    }
    let test = test_name(module_path!(), "jsonl_survives_sigkill_while_cutting_torn_tails");
    let (seed, kills) = start(&test);
    let master = SplitMix64::new(seed ^ 0x7022);
    let (mut torn_seen, mut events_checked) = (0, 0);
    for i in 0..kills {
        let ctx = format!("truncation kill #{i} (replay with {SEED_VAR}={seed})");
        let mut rng = master.fork(i);
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let path = dir.path().join("s.jsonl");
        let mut child = spawn_child(&test, "truncation", &[("FILE", path.display().to_string())]);
        let rx = protocol_lines(child.stdout.take().unwrap_or_else(|| panic!("{ctx}: no stdout")));
        let target = rng.below(40);
        let mut seen = wait_for_line(&rx, |word, n| word == "TORN" && n >= target);
        std::thread::sleep(Duration::from_micros(rng.below(1_500)));
        seen.extend(kill_and_drain(child, &rx));
        let (acked, appended) = (last(&seen, "ACK").unwrap_or(0), last(&seen, "APPENDED").unwrap_or(0));

        let stored = read_session_file(&path)
            .unwrap_or_else(|e| panic!("{ctx}: the file does not load: [{}] {e}", e.code()));
        let n = stored.events.len() as u64;
        events_checked += n;
        assert!(n >= appended.max(acked), "{ctx}: {appended} appended, {acked} synced, {n} survived");
        assert_eq!(stored.events, ticks(0..n), "{ctx}: the stored events are not what was appended");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let clean = to_bytes(&header(), &stored.events);
        assert!(bytes.starts_with(&clean), "{ctx}: the file is not the canonical bytes of its events");
        let rest = &bytes[clean.len()..];
        let mut next = Vec::new();
        write_events(&ticks(n..n + 8), &mut next);
        match stored.report.torn_tail {
            None => assert!(rest.is_empty(), "{ctx}: unreported bytes after the last event"),
            Some(torn) => {
                torn_seen += 1;
                assert_eq!(
                    (torn.offset, torn.len),
                    (clean.len() as u64, rest.len() as u64),
                    "{ctx}: torn tail"
                );
                assert!(
                    !rest.contains(&b'\n') && next.starts_with(rest),
                    "{ctx}: the torn tail is not a cut of the next line"
                );
            }
        }
        let mut file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{ctx}: reopen for writing: {e}"));
        file.append(&[tick(n)]).unwrap_or_else(|e| panic!("{ctx}: append after the kill: {e}"));
        file.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
        drop(file);
        let after = read_session_file(&path).unwrap_or_else(|e| panic!("{ctx}: reload: {e}"));
        assert_eq!(after.report.torn_tail, None, "{ctx}: the torn tail was cut off");
        assert_eq!(
            std::fs::read(&path).ok(),
            Some(to_bytes(&header(), &ticks(0..n + 1))),
            "{ctx}: the file after one more append"
        );
        if let Err(e) = Session::from_log(after.header, after.events) {
            panic!("{ctx}: the log is refused: {e}");
        }
    }
    #[allow(clippy::print_stderr)] // the figures docs/reliability.md quotes
    {
        eprintln!("{test}: seed {seed}: {kills} kills, {torn_seen} left a torn tail, {events_checked} events checked");
    }
}

fn truncation_child() {
    let path = env("FILE");
    let path = Path::new(&path);
    let mut file = SessionFile::create(path, &header()).unwrap_or_else(|e| panic!("create: {e}"));
    file.sync().unwrap_or_else(|e| panic!("sync: {e}"));
    drop(file);
    let (mut len, mut round, start) = (0u64, 0u64, Instant::now());
    while start.elapsed() < Duration::from_secs(60) {
        // What a writer killed mid-line leaves: the first bytes of the next line.
        let line = tick(len).to_json();
        let cut = 1 + SplitMix64::new(round).below(line.len() as u64 - 1) as usize;
        let mut raw = OpenOptions::new().append(true).open(path).unwrap_or_else(|e| panic!("open raw: {e}"));
        raw.write_all(&line.as_bytes()[..cut]).unwrap_or_else(|e| panic!("write the torn tail: {e}"));
        drop(raw);
        say("TORN", round);
        let mut file = SessionFile::open(path).unwrap_or_else(|e| panic!("open: {e}"));
        let k = 1 + SplitMix64::new(round ^ 0xBA7C).below(4);
        file.append(&ticks(len..len + k)).unwrap_or_else(|e| panic!("append: {e}"));
        say("APPENDED", len + k);
        file.sync().unwrap_or_else(|e| panic!("sync: {e}"));
        say("ACK", len + k);
        len += k;
        round += 1;
    }
}
