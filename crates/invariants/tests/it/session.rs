//! The guard installed on a `Session`: what a plugin or loop developer sees.

use palimpsest_core_session::payload::{StepStart, TurnStart};
use palimpsest_core_session::{AppendError, BatchError, Event, Session, SessionHeader};
use palimpsest_invariants::{check_log, DevMode, InvariantGuard};

use crate::support::*;

fn session_of(text: &str, mode: DevMode) -> Result<Session, AppendError> {
    let (header, events) = parse(text);
    Session::from_log_guarded(header, events, mode.guard())
}

#[test]
fn guard_vetoes_the_bad_append_and_changes_nothing() {
    let text = fixture("ok/multi-turn.jsonl");
    let mut session = session_of(&text, DevMode::On).unwrap();
    let (events, surface) = (session.events().to_vec(), session.surface().to_vec());
    let derived = session.derive_messages().len();

    // Turn 3 is closed; a step of turn 3 is outside any turn.
    let err = session.append_log(9, StepStart { turn: 3, step: 2 }).unwrap_err();
    match &err {
        AppendError::Vetoed { seq, code, message } => {
            assert_eq!((*seq, code.as_str()), (44, "step-outside-turn"));
            assert!(message.contains("no turn is open"), "{message}");
        }
        other => panic!("expected a veto, got {other}"),
    }
    assert_eq!(err.code(), "step-outside-turn");
    assert!(err.is_veto());
    assert_eq!(session.events(), events.as_slice());
    assert_eq!(session.surface(), surface.as_slice());
    assert_eq!(session.derive_messages().len(), derived);

    // The right event is accepted next, at the same seq.
    assert_eq!(session.append_log(9, TurnStart { turn: 4 }).unwrap(), 44);
}

#[test]
fn dev_mode_off_reports_instead_of_refusing() {
    let text = fixture("err/several.jsonl");
    let session = session_of(&text, DevMode::Off).expect("without the guard only section 2 is enforced");
    assert!(!session.has_guard());
    assert_eq!(check_log(session.events()).len(), 7);
    assert_eq!(session_of(&text, DevMode::On).unwrap_err().code(), "tool-result-without-call");
}

#[test]
fn guard_is_rebuilt_after_a_failed_batch() {
    let mut session = Session::create(SessionHeader::new("s", 0));
    session.set_guard(Some(Box::new(InvariantGuard::new())));
    session.append_log(1, TurnStart { turn: 1 }).unwrap();
    let batch = |seq: u64| {
        vec![
            Event::log(seq, 2, StepStart { turn: 1, step: 1 }).unwrap(),
            Event::log(seq + 1, 2, palimpsest_core_session::payload::StepEnd { turn: 1, step: 1 }).unwrap(),
        ]
    };
    // The batch is checked (and the guard told of each event), then the
    // store write fails and everything is rolled back, the guard included.
    let failed = session.append_batch_with(batch(1), |_| Err("disk full"));
    assert!(matches!(failed, Err(BatchError::Write("disk full"))));
    assert_eq!(session.events().len(), 1);
    // Had the guard kept the rolled-back steps, step 1 would be out of order.
    assert_eq!(session.append_batch_with(batch(1), |_| Ok::<(), ()>(())).unwrap(), 1..3);
}

#[test]
fn check_log_and_the_guard_agree_on_several_violations() {
    // `check` drives check_log, the incremental guard and a guard rebuilt at
    // every event over the same log, and compares them event by event.
    let violations = check(&fixture("err/several.jsonl"), &expected_of(&fixture("err/several.expected")));
    let mut codes: Vec<&str> = violations.iter().map(|v| v.code).collect();
    codes.dedup();
    assert_eq!(codes.len(), 7, "{codes:?}");
}

#[test]
fn violation_messages() {
    let violations = check_log(&parse(&fixture("err/several.jsonl")).1);
    let rendered: Vec<String> = violations.iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(rendered.join("\n"));
}

#[test]
fn check_log_stops_at_the_first_surface_rule_violation() {
    // Seq 1 replaces a seq that is not on the surface (section 2 rule 6);
    // seq 2 would be turn-out-of-order, but the log is invalid from seq 1 on.
    let text = log(&[turn_start(2), user("u").replaces(0, 0).cites(&[0]), turn_start(5)]);
    let (_, events) = parse(&text);
    let violations = check_log(&events);
    let found: Vec<(&str, u64)> = violations.iter().map(|v| (v.code, v.seq)).collect();
    assert_eq!(found, [("turn-out-of-order", 0)]);
}
