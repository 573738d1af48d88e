//! Faults against the real server: our connection's backend terminated
//! (`pg_terminate_backend`) over and over while a writer appends. Every
//! acknowledged append is stored whole; an append that failed with `io`
//! (its outcome unknown, as the trait says of `io`) is stored whole or not
//! at all, never in part and never twice; the store reconnects by itself,
//! and the log ends holding exactly the batches that landed, in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::PgStore;

use crate::common::{admin, ticks, url, TestSchema};

/// The test server's URL with an application name of this test's own, so
/// the killer terminates only this store's connections.
fn tagged_url(app: &str) -> String {
    let base = url();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}application_name={app}")
}

/// Terminates the server processes of the connections named `app` (only
/// those running a statement, when `active_only`): how many.
fn terminate(admin: &mut postgres::Client, app: &str, active_only: bool) -> Result<i64, postgres::Error> {
    let active = if active_only { " AND state = 'active'" } else { "" };
    admin
        .query_one(
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1{active}"
            ),
            &[&app],
        )
        .and_then(|r| r.try_get(0))
}

/// A thread terminating the backends of `app` until stopped, sleeping
/// `pause(n)` before its `n`th round.
struct Killer {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Killer {
    fn start(app: &str, active_only: bool, pause: impl Fn(u64) -> Duration + Send + 'static) -> Killer {
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, kills, app) = (Arc::clone(&stop), Arc::clone(&kills), app.to_owned());
            std::thread::spawn(move || {
                let mut admin = admin().unwrap_or_else(|| panic!("the server went away"));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    std::thread::sleep(pause(n));
                    let killed = terminate(&mut admin, &app, active_only).unwrap_or(0);
                    kills.fetch_add(killed.unsigned_abs(), Ordering::Relaxed);
                }
            })
        };
        Killer { stop, kills, thread }
    }

    /// Stops the thread; how many backends it terminated.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        self.kills.load(Ordering::Relaxed)
    }
}

#[test]
fn appends_survive_their_backend_being_terminated_again_and_again() {
    let Some(schema) = TestSchema::new() else { return };
    let app = format!("kill_{}", schema.name);
    let store = PgStore::connect_with(&tagged_url(&app), schema.options()).unwrap_or_else(|e| panic!("{e}"));
    store.create(&SessionHeader::new("k", 1)).unwrap_or_else(|e| panic!("{e}"));

    let killer = Killer::start(&app, false, |n| Duration::from_millis(2 + n % 13));

    let mut acked: Vec<Event> = Vec::new();
    let (mut refused, mut landed_anyway, mut rounds) = (0u32, 0u32, 0u32);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        rounds += 1;
        let batch = ticks(acked.len() as u64, 1 + u64::from(rounds % 40), &format!("r{rounds}"));
        match store.append("k", &batch) {
            Ok(()) => acked.extend(batch),
            Err(e) => {
                assert_eq!(e.code(), "io", "a lost connection is io, got [{}] {e}", e.code());
                refused += 1;
                // Read on a connection of its own: the acknowledged events,
                // then the failed batch whole or not at all.
                let stored = schema.store().load("k").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
                let mut with_batch = acked.clone();
                with_batch.extend(batch);
                if stored == with_batch {
                    landed_anyway += 1;
                    acked = with_batch;
                } else {
                    assert_eq!(stored, acked, "round {rounds}: a failed append left part of itself: {e}");
                }
            }
        }
    }
    let kills = killer.stop();

    let stored = schema.store().load("k").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored, acked, "the log holds exactly the acknowledged batches, none twice");
    assert!(kills >= 10, "the backend was terminated only {kills} times");
    assert!(acked.len() > 100, "too few appends landed to prove anything: {}", acked.len());
    // The store reconnected by itself and still writes.
    let next = ticks(acked.len() as u64, 1, "after");
    let mut landed = false;
    for _ in 0..5 {
        if store.append("k", &next).is_ok() {
            landed = true;
            break;
        }
    }
    assert!(landed, "the store never recovered");
    eprintln_summary(rounds, refused, landed_anyway, kills);
}

/// What the run exercised, for whoever reads the test output.
fn eprintln_summary(rounds: u32, refused: u32, landed_anyway: u32, kills: u64) {
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "{rounds} appends, {refused} failed with io ({landed_anyway} of them had landed), \
             {kills} backends terminated"
        );
    }
}

/// A load begins its transaction, names its session and reads the header
/// in one simple query: after the connection is lost, the next load
/// connects again, and every way of loading reads the same session.
#[test]
fn loads_read_the_same_session_after_a_lost_connection() {
    let Some(schema) = TestSchema::new() else { return };
    let app = format!("reload_{}", schema.name);
    let store = PgStore::connect_with(&tagged_url(&app), schema.options()).unwrap_or_else(|e| panic!("{e}"));
    let events = ticks(0, 50, "r");
    store.create_with_events(&SessionHeader::new("r", 1), &events).unwrap_or_else(|e| panic!("{e}"));
    let mut admin = admin().unwrap_or_else(|| panic!("the server went away"));
    for round in 0..3 {
        assert_eq!(store.load("r").unwrap_or_else(|e| panic!("round {round}: {e}")).events, events);
        let resumed = store.load_resumable("r").unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(resumed.tail, events, "round {round}");
        let killed = terminate(&mut admin, &app, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(killed, 1, "round {round}");
    }
    assert_eq!(store.load("r").unwrap_or_else(|e| panic!("{e}")).events, events);
}

/// The backend terminated whenever it is running a statement while loads
/// run, most of whose time is their `COPY` (a load retries once after a
/// lost connection, so one fails when cut twice): each load returns the
/// whole session or an `io` error (never a part of it, never `corrupt`,
/// never a hang), and once the killing stops the store has reconnected
/// and loads the session whole.
#[test]
fn loads_cut_inside_their_copy_fail_whole_and_the_next_one_reads_everything() {
    let Some(schema) = TestSchema::new() else { return };
    let app = format!("cut_{}", schema.name);
    let store = PgStore::connect_with(&tagged_url(&app), schema.options()).unwrap_or_else(|e| panic!("{e}"));
    let events = ticks(0, 20_000, "c");
    store.create_with_events(&SessionHeader::new("c", 1), &events).unwrap_or_else(|e| panic!("{e}"));
    let killer = Killer::start(&app, true, |_| Duration::from_millis(3));
    let (mut whole, mut failed) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while (failed < 3 || whole < 3) && Instant::now() < deadline {
        match store.load("c") {
            Ok(loaded) => {
                assert_eq!(loaded.events.len(), events.len(), "a load returned part of the session");
                assert!(loaded.events == events, "a load returned other events");
                whole += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), "io", "a cut load: {e}");
                failed += 1;
            }
        }
    }
    let kills = killer.stop();
    assert!(failed > 0, "no load was cut ({whole} whole, {kills} kills)");
    assert_eq!(store.load("c").unwrap_or_else(|e| panic!("after the kills: {e}")).events, events);
}
