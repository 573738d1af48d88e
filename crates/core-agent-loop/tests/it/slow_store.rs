//! A store that waits on every write (a disk or a network) does not stall
//! the runtime: on a multi-threaded runtime the loop's writes run in
//! `block_in_place`, so another task's timer keeps time (issue 17).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use palimpsest_core_agent_loop::{ScriptedProvider, ScriptedResponse, TurnInput};
use palimpsest_core_session::payload::TurnEndReason;
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::{MemoryStore, SessionStore, StoreError, StoredSession};

use crate::common::{builder, SID};

/// How long every append waits.
const WRITE: Duration = Duration::from_millis(20);

/// A [`MemoryStore`] whose appends block the calling thread for [`WRITE`].
#[derive(Debug, Default)]
struct SlowStore {
    inner: MemoryStore,
    appends: Mutex<usize>,
}

impl SessionStore for SlowStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.inner.create(header)
    }
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        self.inner.create_with_events(header, events)
    }
    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        std::thread::sleep(WRITE);
        *self.appends.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.inner.append(session_id, events)
    }
    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        self.inner.load(session_id)
    }
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        self.inner.list()
    }
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.delete(session_id)
    }
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.sync(session_id)
    }
}

/// Runs a two-step turn against a [`SlowStore`] while a second task sleeps
/// 2 ms at a time; returns how many appends the turn made and the worst
/// lateness of the second task's wake-ups.
async fn worst_lateness_during_a_turn() -> (usize, Duration) {
    let store = Arc::new(SlowStore::default());
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().text(0, "Reading.").tool_call(1, "call-1", "read", &["{\"path\": \"a\"}"]),
        ScriptedResponse::reply("Done."),
    ]));
    let mut agent = builder(&provider).create(store.clone(), SID).expect("create");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = tokio::spawn({
        let done = Arc::clone(&done);
        async move {
            let mut worst = Duration::ZERO;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = Duration::from_millis(2);
                let start = Instant::now();
                tokio::time::sleep(asked).await;
                worst = worst.max(start.elapsed().saturating_sub(asked));
            }
            worst
        }
    });
    // Let the ticker start its first sleep before the turn writes. The
    // turn runs as a task of its own, on a worker like the ticker's.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let turn = tokio::spawn(async move { agent.run_turn(TurnInput::text("Read a.")).await });
    let outcome = turn.await.expect("task").expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let worst = ticker.await.expect("ticker");
    let appends = *store.appends.lock().unwrap_or_else(|p| p.into_inner());
    (appends, worst)
}

/// One worker: without `block_in_place` the turn's writes would hold the
/// only worker, and the ticker with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_slow_store_does_not_hold_up_other_tasks_on_a_multi_threaded_runtime() {
    let (appends, worst) = worst_lateness_during_a_turn().await;
    assert!(appends >= 8, "the turn wrote {appends} batches, each {WRITE:?}");
    // Held on the loop's worker, the ticker would be late by a whole write.
    assert!(worst < WRITE / 2, "a timer was {worst:?} late while the store wrote");
}

/// The contrast that shows the measurement can see a stall: on a
/// current-thread runtime the write runs inline, and the ticker waits for
/// it (as documented on the loop).
#[tokio::test(flavor = "current_thread")]
async fn on_a_current_thread_runtime_the_write_runs_inline() {
    let (_, worst) = worst_lateness_during_a_turn().await;
    assert!(worst >= WRITE / 2, "a timer was only {worst:?} late: was the write not inline?");
}
