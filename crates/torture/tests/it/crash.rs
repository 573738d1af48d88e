//! SIGKILL at seeded random moments while a real agent session is appended
//! under `Durability::EveryAppend` (and SQLite `synchronous = FULL`).
//!
//! A child process (this test binary, re-run) runs a seeded [`Workload`]
//! through the agent loop and prints `ACK n` each time a sync returns: the
//! first `n` events are then durable. The parent kills it once it has
//! acknowledged a random number of events, after a random extra delay of up
//! to 3 ms. One kill in ten comes within 20 ms of the start instead (during
//! start-up or the creation of the session); in sessions with a large tool
//! result (128 KB to 2 MB), half of the others are aimed at that write (the
//! child says `BIG` before it), so that some kills cut a `write(2)` short
//! and leave a torn tail. Then, for every kill, it checks:
//!
//! 1. the store opens, and the session loads;
//! 2. every acknowledged event is there, and every stored event is, byte for
//!    byte, the event the same seeded workload writes (regenerated in
//!    memory by the parent); for JSONL the whole file is the canonical
//!    bytes of those events plus, at most, a torn tail;
//! 3. a torn tail is a cut of the next unacknowledged line, is dropped (not
//!    one of the loaded events) and reported with its offset and length;
//! 4. `repair` closes the log: `Session::from_log` and `check_log` accept
//!    log + closers (and the log alone has no invariant violation);
//! 5. the agent loop opens the session (appending exactly those closers),
//!    runs one more turn, and the reloaded log is valid and clean.
//!
//! The seed is printed (run with `--nocapture` to see it on success) and
//! named in every failure; `PALIMPSEST_CRASH_SEED=<seed>` replays a run,
//! `PALIMPSEST_CRASH_KILLS=<n>` changes the number of kills.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, DevMode, ManualClock, ScriptedProvider, ScriptedResponse, SequentialIds,
    TurnInput,
};
use palimpsest_core_session::jsonl::{to_bytes, write_events};
use palimpsest_core_session::payload::TurnEndReason;
use palimpsest_core_session::repair::repair;
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_invariants::check_log;
use palimpsest_persistence::Durability;
use palimpsest_persistence_sqlite::Synchronous;
use palimpsest_torture::{seed_from_env, SplitMix64};

use crate::common::*;

/// Kills per backend unless `PALIMPSEST_CRASH_KILLS` says otherwise.
const KILLS: u64 = 50;

#[test]
fn jsonl_survives_sigkill_at_random_moments() {
    if role().is_some() {
        return crash_child();
    }
    kill_many(Kind::Jsonl, test_name(module_path!(), "jsonl_survives_sigkill_at_random_moments"));
}

#[test]
fn sqlite_survives_sigkill_at_random_moments() {
    if role().is_some() {
        return crash_child();
    }
    kill_many(Kind::Sqlite, test_name(module_path!(), "sqlite_survives_sigkill_at_random_moments"));
}

/// The same against PostgreSQL (a schema per kill): an acknowledged append
/// is a committed transaction.
#[test]
fn postgres_survives_sigkill_at_random_moments() {
    if role().is_some() {
        return crash_child();
    }
    kill_many(Kind::Postgres, test_name(module_path!(), "postgres_survives_sigkill_at_random_moments"));
}

/// The child: run the workload into the store, acknowledging every sync.
fn crash_child() {
    let kind = Kind::parse(&env("KIND"));
    let location = env("LOCATION");
    let seed: u64 = env("WORKLOAD_SEED").parse().unwrap_or_else(|e| panic!("seed: {e}"));
    let store =
        kind.open(Path::new(&location), Synchronous::Full).unwrap_or_else(|e| panic!("child open: {e}"));
    Workload::new(seed).run(Arc::new(AckingStore::new(store)));
    say("DONE", 0);
    wait_to_be_killed();
}

/// What the kills found, for the summary line.
#[derive(Debug, Default)]
struct Tally {
    kills: u64,
    /// Killed before the session's creation was acknowledged.
    before_create: u64,
    /// Killed after the whole workload was acknowledged.
    after_done: u64,
    /// Events stored beyond the last acknowledged one (written, not yet synced).
    unacked_events_kept: u64,
    torn_tails: u64,
    repaired: u64,
    events_checked: u64,
}

fn kill_many(kind: Kind, test: String) {
    let (seed, replayed) = seed_from_env(SEED_VAR);
    let kills = kills(KILLS);
    #[allow(clippy::print_stderr)] // the seed is what makes a failure reproducible
    {
        eprintln!("{test}: seed {seed} ({}), {kills} kills", if replayed { "replayed" } else { "fresh" });
    }
    let master = SplitMix64::new(seed ^ kind as u64);
    let mut tally = Tally::default();
    for i in 0..kills {
        let ctx = format!("{} kill #{i} (replay with {SEED_VAR}={seed})", kind.name());
        let mut rng = master.fork(i);
        let workload_seed = rng.next_u64();
        let workload = Workload::new(workload_seed);
        let (header, expected) = workload.expected();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{ctx}: tempdir: {e}"));
        let location = kind.location(dir.path());
        let mut child = spawn_child(
            &test,
            "crash",
            &[
                ("KIND", kind.name().to_owned()),
                ("LOCATION", location.display().to_string()),
                ("WORKLOAD_SEED", workload_seed.to_string()),
            ],
        );
        let rx = protocol_lines(child.stdout.take().unwrap_or_else(|| panic!("{ctx}: no stdout")));
        let big = expected.iter().any(|e| e.data().len() > BIG);
        let mut seen = if rng.chance(10) {
            // Early: during start-up or the creation of the session.
            std::thread::sleep(Duration::from_micros(rng.below(20_000)));
            Vec::new()
        } else if big && rng.chance(50) {
            // Aimed at a large write: the kill may cut it (a torn tail).
            let seen = wait_for_line(&rx, |word, _| word == "BIG" || word == "DONE");
            std::thread::sleep(Duration::from_micros(rng.below(3_000)));
            seen
        } else {
            let target = rng.below(expected.len() as u64 + 1);
            let seen = wait_for_line(&rx, |word, n| word == "DONE" || (word == "ACK" && n >= target));
            std::thread::sleep(Duration::from_micros(rng.below(4_000)));
            seen
        };
        seen.extend(kill_and_drain(child, &rx));
        let acked = seen.iter().filter(|(w, _)| w == "ACK").map(|(_, n)| *n).max();
        tally.after_done += u64::from(seen.iter().any(|(w, _)| w == "DONE"));
        verify_after_kill(kind, &location, &header, &expected, acked, &ctx, &mut tally);
        kind.clean_up(&location);
        tally.kills += 1;
    }
    #[allow(clippy::print_stderr)] // the figures docs/reliability.md quotes
    {
        eprintln!("{test}: seed {seed}: {tally:?}");
    }
    assert_eq!(tally.kills, kills);
    assert!(
        tally.kills - tally.after_done - tally.before_create >= kills / 2,
        "most kills must land mid-session: {tally:?}"
    );
}

fn canonical(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    write_events(events, &mut out);
    out
}

fn verify_after_kill(
    kind: Kind,
    location: &Path,
    header: &SessionHeader,
    expected: &[Event],
    acked: Option<u64>,
    ctx: &str,
    tally: &mut Tally,
) {
    // 1. The store opens and the session loads.
    let store = kind
        .open(location, Synchronous::Normal)
        .unwrap_or_else(|e| panic!("{ctx}: the store does not open: [{}] {e}", e.code()));
    let loaded = match store.load(SID) {
        Ok(loaded) => loaded,
        Err(e) if e.code() == "not-found" && acked.is_none() => {
            tally.before_create += 1;
            assert_eq!(
                store.list().map(|l| l.len()).ok(),
                Some(0),
                "{ctx}: a half-created session is listed"
            );
            return;
        }
        Err(e) => panic!("{ctx}: the session does not load (acknowledged {acked:?}): [{}] {e}", e.code()),
    };
    if acked.is_none() {
        tally.before_create += 1;
    }
    let n = loaded.events.len();
    tally.events_checked += n as u64;

    // 2. Everything acknowledged is there, and all of it is what was written.
    assert_eq!(&loaded.header, header, "{ctx}: header");
    let acked = acked.unwrap_or(0);
    assert!(n as u64 >= acked, "{ctx}: {acked} events were acknowledged, {n} survived");
    assert!(n <= expected.len(), "{ctx}: {n} events stored, the workload writes {}", expected.len());
    tally.unacked_events_kept += n as u64 - acked;
    for (i, (got, want)) in loaded.events.iter().zip(expected).enumerate() {
        assert_eq!(got.to_json(), want.to_json(), "{ctx}: event {i} differs from what was appended");
    }

    // 3. A torn tail is a cut of the next line, dropped and reported.
    match kind {
        Kind::Jsonl => {
            let path = location.join(format!("{SID}.jsonl"));
            let bytes =
                std::fs::read(&path).unwrap_or_else(|e| panic!("{ctx}: read {}: {e}", path.display()));
            let clean = to_bytes(header, &loaded.events);
            assert!(bytes.starts_with(&clean), "{ctx}: the file is not the canonical bytes of its events");
            let rest = &bytes[clean.len()..];
            match loaded.report.torn_tail {
                None => {
                    assert!(rest.is_empty(), "{ctx}: {} bytes after the last event, not reported", rest.len())
                }
                Some(torn) => {
                    tally.torn_tails += 1;
                    assert_eq!(
                        (torn.offset, torn.len),
                        (clean.len() as u64, rest.len() as u64),
                        "{ctx}: torn tail position"
                    );
                    assert_eq!(torn.line, n as u64 + 2, "{ctx}: torn tail line");
                    assert!(
                        !rest.is_empty() && !rest.contains(&b'\n'),
                        "{ctx}: a torn tail is one unterminated line"
                    );
                    assert!(
                        canonical(&expected[n..]).starts_with(rest),
                        "{ctx}: the torn tail is not a cut of the next line"
                    );
                }
            }
        }
        Kind::Sqlite => {
            assert_eq!(loaded.report.torn_tail, None, "{ctx}: SQLite has no torn tails");
            let conn = rusqlite::Connection::open(location).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{ctx}: integrity_check: {e}"));
            assert_eq!(check, "ok", "{ctx}: SQLite integrity_check");
        }
        Kind::Postgres => {
            assert_eq!(loaded.report.torn_tail, None, "{ctx}: PostgreSQL has no torn tails");
        }
    }

    // 4. Repair closes the log; log and log + closers pass every check.
    let violations = check_log(&loaded.events);
    assert!(violations.is_empty(), "{ctx}: the surviving prefix breaks invariants: {violations:?}");
    let closers = repair(&loaded.events);
    tally.repaired += u64::from(!closers.is_empty());
    let mut closed = loaded.events.clone();
    closed.extend(closers.iter().cloned());
    if let Err(e) = Session::from_log(header.clone(), closed.clone()) {
        panic!("{ctx}: log + closers refused: [{}] {e}", e.code());
    }
    let violations = check_log(&closed);
    assert!(violations.is_empty(), "{ctx}: log + closers break invariants: {violations:?}");

    // 5. The loop resumes: the closers first, then a whole turn.
    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Picking up after the crash.")]));
    let rt = runtime();
    let (mut agent, report) = AgentLoop::builder(provider)
        .clock(Arc::new(ManualClock::new(T0 + 100_000_000).with_tick(1)))
        .ids(Arc::new(SequentialIds::new("resumed")))
        .config(AgentConfig::default().with_dev_mode(DevMode::On).with_durability(Durability::EveryAppend))
        .tools(tools())
        .open(store.clone(), SID)
        .unwrap_or_else(|e| panic!("{ctx}: the loop does not open the crashed session: {e}"));
    assert_eq!(report.load.torn_tail, loaded.report.torn_tail, "{ctx}: the loop's load report");
    let c = closers.len() as u64;
    assert_eq!(report.repaired, (c > 0).then(|| n as u64..n as u64 + c), "{ctx}: the loop's repair");
    let outcome = rt
        .block_on(agent.run_turn(TurnInput::text("Where were we?")))
        .unwrap_or_else(|e| panic!("{ctx}: the resumed turn failed: {e}"));
    assert_eq!(outcome.reason, TurnEndReason::Completed, "{ctx}: the resumed turn");
    drop(agent);
    drop(store);

    let store = kind.open(location, Synchronous::Normal).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let after = store.load(SID).unwrap_or_else(|e| panic!("{ctx}: reload after resuming: {e}"));
    assert_eq!(after.report.torn_tail, None, "{ctx}: the torn tail was cut off by the next append");
    assert_eq!(after.events[..n + closers.len()], closed[..], "{ctx}: resuming changed the surviving log");
    if let Err(e) = Session::from_log(after.header.clone(), after.events.clone()) {
        panic!("{ctx}: the resumed log is refused: [{}] {e}", e.code());
    }
    let violations = check_log(&after.events);
    assert!(violations.is_empty(), "{ctx}: the resumed log breaks invariants: {violations:?}");
}
