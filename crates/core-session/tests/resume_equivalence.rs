//! RFC 0002's equivalence property: a session resumed from a checkpoint and
//! the events after it behaves exactly like the same log loaded whole.
//!
//! Random logs (turns, steps, chunks, assistant messages requesting tool
//! calls, tool calls and results, user and context messages, settings,
//! plugin events, compaction replaces and tool-result prunes, with noise in
//! the numbers and the ranges) are appended to a whole session; the
//! accepted events are the log. A checkpoint is taken of a random prefix
//! (and sometimes, again, of the session resumed from it), read back from
//! its JSON, and resumed with the rest of the log as its tail. Then random
//! appends, valid and not, some as batches whose write fails, go to both
//! sessions: they must be accepted or refused alike, with the same code,
//! and leave the same surface, messages, request, settings, turn state and
//! checkpoint; the resumed session must hold exactly the surface's events,
//! the settings event and the events after its checkpoint.

use palimpsest_core_session::{Checkpoint, Event, Session, SessionHeader};
use proptest::prelude::*;
use serde_json::{json, Value};

#[path = "support/resume_ops.rs"]
mod resume_ops;

use resume_ops::message;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_resumed_session_behaves_as_the_whole_log(case in resume_ops::case()) {
        resume_ops::check_case(case, || None)?;
    }
}

#[test]
fn a_resumed_session_holds_its_surface_and_tail_not_its_log() {
    // 20 turns of 500 chunks each, compacted after every turn: the log has
    // over 10,000 events, the surface one summary and the last turn's input.
    let header = SessionHeader::new("big", 0);
    let mut s = Session::create(header.clone());
    let add = |s: &mut Session, e: Value| {
        let e = Event::from_json(&e.to_string()).unwrap_or_else(|e| panic!("{e}"));
        s.append(e).unwrap_or_else(|e| panic!("{e}"));
    };
    let settings =
        json!({"seq": 0, "time": 0, "type": "session/settings", "data": {"settings": {"model": "m"}}});
    add(&mut s, settings);
    for turn in 1..=20u64 {
        let seq = s.next_seq();
        add(&mut s, json!({"seq": seq, "time": seq, "type": "turn/start", "data": {"turn": turn}}));
        let user = json!({"message": message(format!("u{turn}"), "user", json!([{"type": "text", "text": "q"}]), json!({"kind": "user"}))});
        add(
            &mut s,
            json!({"seq": seq + 1, "time": seq, "type": "user/message", "data": user, "surfaceOp": "append"}),
        );
        add(
            &mut s,
            json!({"seq": seq + 2, "time": seq, "type": "step/start", "data": {"turn": turn, "step": 1}}),
        );
        for i in 0..500 {
            let chunk =
                json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}});
            add(&mut s, json!({"seq": seq + 3 + i, "time": seq, "type": "assistant/chunk", "data": chunk}));
        }
        let next = s.next_seq();
        let answer = json!({"turn": turn, "step": 1, "message": message(format!("a{turn}"), "assistant", json!([{"type": "text", "text": "a"}]), json!({"kind": "model", "provider": "p", "model": "m"}))});
        add(
            &mut s,
            json!({"seq": next, "time": next, "type": "assistant/message", "data": answer, "surfaceOp": "append", "sourceEventSeqs": (seq + 3..next).collect::<Vec<_>>()}),
        );
        add(
            &mut s,
            json!({"seq": next + 1, "time": next, "type": "step/end", "data": {"turn": turn, "step": 1}}),
        );
        add(
            &mut s,
            json!({"seq": next + 2, "time": next, "type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}),
        );
        let surface = s.surface().to_vec();
        let (first, last) = (surface[0], surface[surface.len() - 1]);
        let summary = json!({"message": message(format!("s{turn}"), "user", json!([{"type": "text", "text": "summary"}]), json!({"kind": "plugin", "plugin": "compaction"}))});
        let at = s.next_seq();
        add(
            &mut s,
            json!({"seq": at, "time": at, "type": "user/message", "data": summary, "surfaceOp": {"op": "replace", "start": first, "end": last}, "sourceEventSeqs": surface}),
        );
    }
    let log = s.events().to_vec();
    assert!(log.len() > 10_000);
    let cut = log.len() - 5;
    let prefix = Session::from_log(header.clone(), log[..cut].to_vec()).unwrap_or_else(|e| panic!("{e}"));
    let checkpoint = prefix.checkpoint();
    assert_eq!(
        checkpoint.events().len(),
        prefix.surface().len() + 1,
        "the surface's events and the settings event"
    );
    let resumed = Session::resume(header, checkpoint, log[cut..].to_vec()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resumed.next_seq(), log.len() as u64);
    assert_eq!(resumed.surface(), s.surface());
    // What left the surface goes lazily: at most twice the surface and a
    // few more stay (`ResidentLog::trim_when_worth`), never the log.
    assert!(
        resumed.resident().len() <= 3 * (resumed.surface().len() + 1) + 64 + 5,
        "{} events resident for a surface of {} and a tail of 5",
        resumed.resident().len(),
        resumed.surface().len()
    );
    assert!(!resumed.is_complete());
    assert!(resumed.complete_events().is_none());
    assert_eq!(resumed.derive_request().to_json(), s.derive_request().to_json());

    // Trimmed in place, the whole session holds just what a resume holds.
    let mut trimmed = s;
    let request = trimmed.derive_request().to_json();
    trimmed.trim();
    let held: Vec<u64> = trimmed.resident().iter().map(Event::seq).collect();
    let mut wanted: Vec<u64> = trimmed.surface().iter().copied().chain(trimmed.settings_seq()).collect();
    wanted.sort_unstable();
    assert_eq!(held, wanted);
    assert_eq!(trimmed.derive_request().to_json(), request);
}

/// The wire form's keys, in order, but its last (`bodyHash`).
const WIRE_KEYS: [&str; 12] = [
    "checkpoint",
    "sessionId",
    "logLen",
    "lastTime",
    "headerHash",
    "tailHash",
    "surface",
    "settingsSeq",
    "lastTurn",
    "turnOpen",
    "turns",
    "events",
];

/// `fnv1a64:` and FNV-1a of `text`, as the checkpoint's fingerprints are.
fn fnv1a64(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

/// The text of `v` before its `bodyHash`: the wire keys in order, then any
/// other key but `bodyHash`.
fn body_of(v: &Value) -> String {
    let object = v.as_object().expect("an object");
    let extra = object.keys().filter(|k| !WIRE_KEYS.contains(&k.as_str()) && *k != "bodyHash");
    let keys = WIRE_KEYS.iter().copied().chain(extra.map(String::as_str));
    let fields: Vec<String> =
        keys.filter_map(|k| object.get(k).map(|value| format!("{}:{value}", json!(k)))).collect();
    format!("{{{}", fields.join(","))
}

/// `v` as a checkpoint text sealed with its own `bodyHash`.
fn sealed(v: &Value) -> String {
    let body = body_of(v);
    format!("{body},\"bodyHash\":\"{}\"}}", fnv1a64(&body))
}

#[test]
fn a_damaged_checkpoint_is_a_typed_error() {
    let header = SessionHeader::new("d", 0);
    let mut s = Session::create(header.clone());
    let settings =
        json!({"seq": 0, "time": 1, "type": "session/settings", "data": {"settings": {"model": "m"}}});
    s.append(Event::from_json(&settings.to_string()).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let user = json!({"seq": 1, "time": 2, "type": "user/message", "data": {"message": message("u1".into(), "user", json!([{"type": "text", "text": "hi"}]), json!({"kind": "user"}))}, "surfaceOp": "append"});
    s.append(Event::from_json(&user.to_string()).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = s.checkpoint().to_json();
    let good: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    type Damage = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("checkpoint-version-unsupported", Box::new(|v| v["checkpoint"] = json!(1))),
        ("checkpoint-version-unsupported", Box::new(|v| v["checkpoint"] = json!(3))),
        ("checkpoint-malformed", Box::new(|v| v["logLen"] = json!(-1))),
        ("checkpoint-malformed", Box::new(|v| v["surprise"] = json!(1))),
        ("checkpoint-malformed", Box::new(|v| v["events"][0]["seq"] = json!("zero"))),
        (
            "checkpoint-malformed",
            Box::new(|v| {
                v.as_object_mut().map(|o| o.remove("surface"));
            }),
        ),
        ("checkpoint-inconsistent", Box::new(|v| v["surface"] = json!([1, 1]))),
        ("checkpoint-inconsistent", Box::new(|v| v["surface"] = json!([0]))),
        ("checkpoint-inconsistent", Box::new(|v| v["surface"] = json!([]))),
        ("checkpoint-inconsistent", Box::new(|v| v["settingsSeq"] = json!(1))),
        ("checkpoint-inconsistent", Box::new(|v| v["logLen"] = json!(1))),
        ("checkpoint-inconsistent", Box::new(|v| v["tailHash"] = json!("md5:00"))),
        (
            "checkpoint-inconsistent",
            Box::new(|v| {
                v.as_object_mut().map(|o| o.remove("tailHash"));
            }),
        ),
        ("checkpoint-inconsistent", Box::new(|v| v["events"] = json!([v["events"][1], v["events"][0]]))),
    ];
    for (expected, damage) in cases {
        let mut v = good.clone();
        damage(&mut v);
        // Sealed again, so that each check past the fingerprint is reached.
        let text = sealed(&v);
        let err = Checkpoint::from_json(&text).expect_err(&text);
        assert_eq!(err.code(), expected, "{text} gave {err}");
    }
    // The test's seal is the format's: the undamaged checkpoint, sealed
    // by it, reads back as the same checkpoint.
    let resealed = Checkpoint::from_json(&sealed(&good)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Some(resealed), Checkpoint::from_json(&text).ok());
    // An edit of what a resume trusts, not sealed again: the text of a
    // cached message, the surface's order, the settings seq left out.
    let edits: Vec<Damage> = vec![
        Box::new(|v| v["events"][1]["data"]["message"]["content"][0]["text"] = json!("not in the log")),
        Box::new(|v| v["events"][0]["data"]["settings"]["model"] = json!("m2")),
        Box::new(|v| {
            v.as_object_mut().map(|o| o.remove("settingsSeq"));
            v["events"] = json!([v["events"][1]]);
        }),
    ];
    for edit in edits {
        let mut v = good.clone();
        edit(&mut v);
        let stale = v["bodyHash"].as_str().unwrap_or_default().to_owned();
        let text = sealed(&v).replace(&fnv1a64(&body_of(&v)), &stale);
        let err = Checkpoint::from_json(&text).expect_err(&text);
        assert_eq!(err.code(), "checkpoint-inconsistent", "{text} gave {err}");
        assert!(err.to_string().contains("bodyHash"), "{err}");
    }
    // Every cut of the text is refused, none panics.
    for cut in 0..text.len() {
        assert!(Checkpoint::from_json(&text[..cut]).is_err());
    }
    // A checkpoint of another header, or of a different last event.
    let checkpoint = Checkpoint::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    let err = Session::resume(SessionHeader::new("d", 1), checkpoint.clone(), vec![]).unwrap_err();
    assert_eq!(err.code(), "checkpoint-mismatch");
    assert!(checkpoint.matches_last_event(&s.events()[1]));
    assert!(!checkpoint.matches_last_event(&s.events()[0]));
    // A tail that does not continue the log is refused as a whole load would.
    let err = Session::resume(header, checkpoint, vec![s.events()[1].clone()]).unwrap_err();
    assert_eq!(err.code(), "seq-not-contiguous");
}
