//! Integration tests of the invariants, built as one binary.

mod minimal;
mod realistic;
mod resume;
mod session;
mod support;

/// The guard reuses the facts it read in `check` when the same event is
/// committed; a different event with the same seq must be read afresh.
#[test]
fn guard_cache_is_keyed_to_the_checked_event() {
    use palimpsest_core_session::{AppendGuard, Event, SessionHeader, SessionView};
    use palimpsest_invariants::InvariantGuard;
    let header = SessionHeader::new("g", 0);
    let start1 = Event::from_json(r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#).unwrap();
    let start2 = Event::from_json(r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":2}}"#).unwrap();
    let mut guard = InvariantGuard::new();
    let empty = SessionView::whole(&header, &[], &[]);
    assert!(guard.check(empty, &start1).is_ok());
    // Commit a different event than the one checked.
    let log = [start2.clone()];
    guard.committed(SessionView::whole(&header, &log, &[]), &start2);
    // Turn 2 is open, so turn/start 3 follows in order; turn 2 again does not.
    let next = |turn: u64| {
        Event::from_json(&format!(r#"{{"seq":1,"time":0,"type":"turn/start","data":{{"turn":{turn}}}}}"#))
            .unwrap()
    };
    let view = SessionView::whole(&header, &log, &[]);
    let err = guard.check(view, &next(2)).unwrap_err();
    assert_eq!(err.code, "turn-already-open");
    assert!(err.message.contains("turn 2 is open"), "{}", err.message);
}
