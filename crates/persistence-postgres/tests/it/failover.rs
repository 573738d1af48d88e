//! The server itself goes away, on private clusters (see `cluster.rs`):
//!
//! * restarted mid-session: every append either happened whole or not at
//!   all, the store reconnects by itself, nothing is lost or doubled;
//! * a primary with a synchronous streaming standby is stopped as a crash
//!   would stop it (`-m immediate`), the standby is promoted, and the
//!   session resumes there: no acknowledged append is missing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::{PgOptions, PgStore};

use crate::cluster::{tools, Cluster};
use crate::common::ticks;

fn options() -> PgOptions {
    PgOptions {
        schema: Some("failover".into()),
        connect_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    }
}

/// Appends batches to session "f" until `stop`, returning what was
/// acknowledged and how many appends failed. After a failure the log is
/// read back (as soon as the server answers) to learn whether the failed
/// batch landed: whole or not at all, never part.
fn append_until(store: &PgStore, url: &str, stop: &AtomicBool) -> (Vec<Event>, u32) {
    let mut acked: Vec<Event> = Vec::new();
    let (mut failed, mut round) = (0u32, 0u64);
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let batch = ticks(acked.len() as u64, 1 + round % 20, &format!("r{round}"));
        match store.append("f", &batch) {
            Ok(()) => acked.extend(batch),
            Err(e) => {
                assert_eq!(e.code(), "io", "[{}] {e}", e.code());
                failed += 1;
                let Some(stored) = read_back(url, stop) else { break };
                let mut with_batch = acked.clone();
                with_batch.extend(batch);
                if stored == with_batch {
                    acked = with_batch;
                } else {
                    assert_eq!(stored, acked, "round {round}: a failed append left part of itself");
                }
            }
        }
    }
    (acked, failed)
}

/// The stored log, once the server at `url` answers again; `None` if it
/// does not before `stop`.
fn read_back(url: &str, stop: &AtomicBool) -> Option<Vec<Event>> {
    loop {
        if let Ok(events) = PgStore::connect_with(url, options()).and_then(|s| s.load("f")).map(|s| s.events)
        {
            return Some(events);
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[allow(clippy::print_stderr)]
fn report(what: &str, line: String) {
    eprintln!("{what}: {line}");
}

#[test]
fn a_server_restarted_mid_session_loses_and_doubles_nothing() {
    let Some((bin, scratch)) = tools() else { return };
    let primary = Cluster::primary(&bin, &scratch, "restart");
    let url = primary.url();
    let store = Arc::new(PgStore::connect_with(&url, options()).unwrap_or_else(|e| panic!("{e}")));
    store.create(&SessionHeader::new("f", 1)).unwrap_or_else(|e| panic!("{e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, url, stop) = (store.clone(), url.clone(), stop.clone());
        std::thread::spawn(move || append_until(&store, &url, &stop))
    };
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(400));
        primary.restart();
    }
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    let (acked, failed) = writer.join().unwrap_or_else(|_| panic!("writer panicked"));
    let stored = store.load("f").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored, acked, "the log holds exactly the batches that landed, once each");
    assert!(failed > 0, "the restarts never hit an append; the test proves nothing");
    // The store reconnected by itself: it writes again.
    store
        .append("f", &ticks(acked.len() as u64, 3, "after"))
        .unwrap_or_else(|e| panic!("after restarts: {e}"));
    report(
        "restart",
        format!("{} events acknowledged, {failed} appends failed during 2 restarts", acked.len()),
    );
}

#[test]
fn failing_over_to_a_synchronous_standby_keeps_every_acknowledged_append() {
    let Some((bin, scratch)) = tools() else { return };
    let primary = Cluster::primary(&bin, &scratch, "primary");
    let standby = Cluster::standby(&bin, &scratch, "standby1", &primary);
    primary.set("synchronous_standby_names = 'standby1'");
    // Wait until the standby is synchronous: from then on a commit returns
    // only once the standby has it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = primary.client();
    loop {
        let sync: Option<String> = client
            .query_opt(
                "SELECT sync_state::text FROM pg_stat_replication WHERE application_name = 'standby1'",
                &[],
            )
            .ok()
            .flatten()
            .map(|r| r.get(0));
        if sync.as_deref() == Some("sync") {
            break;
        }
        assert!(Instant::now() < deadline, "the standby never became synchronous ({sync:?})");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(client);

    let store = Arc::new(PgStore::connect_with(&primary.url(), options()).unwrap_or_else(|e| panic!("{e}")));
    store.create(&SessionHeader::new("f", 1)).unwrap_or_else(|e| panic!("{e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        // Read-backs go to the standby: the primary never comes back.
        let (store, url, stop) = (store.clone(), standby.url(), stop.clone());
        std::thread::spawn(move || append_until(&store, &url, &stop))
    };
    std::thread::sleep(Duration::from_millis(800));
    let crashed = Instant::now();
    primary.crash();
    standby.promote();
    let promoted = crashed.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (acked, failed) = writer.join().unwrap_or_else(|_| panic!("writer panicked"));

    // Every acknowledged append is on the promoted standby.
    let resumed = PgStore::connect_with(&standby.url(), options()).unwrap_or_else(|e| panic!("{e}"));
    let stored = resumed.load("f").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    assert!(acked.len() > 20, "too little was written before the crash: {}", acked.len());
    assert!(stored.len() >= acked.len(), "{} acknowledged, {} on the standby", acked.len(), stored.len());
    assert_eq!(stored[..acked.len()], acked[..], "an acknowledged event differs on the standby");
    assert!(stored.len() - acked.len() <= 20, "more than one batch beyond the acknowledged ones");
    // The session continues there.
    resumed
        .append("f", &ticks(stored.len() as u64, 2, "there"))
        .unwrap_or_else(|e| panic!("on the standby: {e}"));
    report(
        "failover",
        format!(
            "{} events acknowledged, all on the promoted standby ({} stored); {failed} appends failed; \
             stop -m immediate + promote took {:.2} s",
            acked.len(),
            stored.len(),
            promoted.as_secs_f64()
        ),
    );
}
