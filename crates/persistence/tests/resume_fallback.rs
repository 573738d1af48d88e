//! `DurableSession::resume` with a checkpoint the session refuses: the open
//! falls back to the whole load, with the same guard, and gives the whole
//! log's session.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use palimpsest_core_session::{
    AppendGuard, Checkpoint, Event, GuardViolation, Session, SessionHeader, SessionView,
};
use palimpsest_persistence::testkit::{sample_events, SAMPLE_SURFACE};
use palimpsest_persistence::{
    Durability, DurableSession, MemoryStore, Resumable, SessionStore, StoreError, StoredSession,
};

/// A memory store whose `load_resumable` returns `checkpoint` with every
/// event as its tail (a broken backend): the tail is refused after it.
#[derive(Debug)]
struct Lying {
    inner: MemoryStore,
    checkpoint: Checkpoint,
}

impl SessionStore for Lying {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.inner.create(header)
    }
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        self.inner.create_with_events(header, events)
    }
    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        self.inner.append(session_id, events)
    }
    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        self.inner.load(session_id)
    }
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        self.inner.list()
    }
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        let stored = self.inner.load(session_id)?;
        Ok(Resumable {
            header: stored.header,
            checkpoint: Some(self.checkpoint.clone()),
            tail: stored.events,
            report: stored.report,
        })
    }
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.delete(session_id)
    }
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.sync(session_id)
    }
}

/// Counts what it is asked, and refuses events of type `kit/forbidden`.
#[derive(Debug, Default)]
struct Counting(Arc<AtomicUsize>);

impl AppendGuard for Counting {
    fn check(&self, _: SessionView<'_>, candidate: &Event) -> Result<(), GuardViolation> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if candidate.event_type().as_str() == "kit/forbidden" {
            return Err(GuardViolation { code: "kit-forbidden".into(), message: "no".into() });
        }
        Ok(())
    }
    fn committed(&mut self, _: SessionView<'_>, _: &Event) {}
    fn rebuild(&mut self, _: SessionView<'_>) {}
}

#[test]
fn a_refused_checkpoint_falls_back_to_the_whole_load_with_the_same_guard() {
    let h = SessionHeader::new("s", 0);
    let sample = sample_events();
    let checkpoint = Session::from_log(h.clone(), sample[..10].to_vec()).expect("valid").checkpoint();
    let store = Lying { inner: MemoryStore::default(), checkpoint };
    store.create_with_events(&h, &sample).expect("create");
    let store: Arc<dyn SessionStore> = Arc::new(store);

    let checks = Arc::new(AtomicUsize::new(0));
    let guard = Box::new(Counting(checks.clone()));
    let (mut opened, _) =
        DurableSession::resume_guarded(store.clone(), "s", Durability::default(), Some(guard)).expect("open");
    assert!(opened.session().is_complete(), "loaded whole after the refused resume");
    assert_eq!(opened.session().surface(), SAMPLE_SURFACE);
    assert_eq!(opened.session().next_seq(), sample.len() as u64);
    assert!(opened.session().has_guard(), "the guard survived the refused resume");
    let before = checks.load(Ordering::SeqCst);
    let next = opened.session().next_seq();
    let forbidden = Event::from_json(&format!(
        r#"{{"seq":{next},"time":9999999999999,"type":"kit/forbidden","data":null}}"#
    ))
    .expect("event");
    let err = opened.append(forbidden).expect_err("the guard refuses it");
    assert_eq!(err.code(), "kit-forbidden");
    assert!(checks.load(Ordering::SeqCst) > before, "the installed guard is the caller's");
}
