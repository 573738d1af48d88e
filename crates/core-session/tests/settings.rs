//! `session/settings` (contract sections 1.2, 1.3 and 3): its shape, its
//! place off the surface, the effective settings and the derived request.

use palimpsest_core_session::payload::{
    Block, Message, OfferedTool, Role, SessionSettings, Settings, Source, StepEnd, StepStart, TurnStart,
    UserMessage,
};
use palimpsest_core_session::{jsonl::JsonlLog, Event, Session, SessionHeader, SurfaceIntent};
use serde_json::{json, Value};

fn settings_event(seq: u64, data: Value) -> Value {
    json!({"seq": seq, "time": 0, "type": "session/settings", "data": data})
}

/// The code `event` is refused with, offered as the first event of a
/// session (a refusal leaves the session empty); `None` when accepted.
fn refusal(event: Value) -> Option<String> {
    let mut s = Session::create(SessionHeader::new("t", 0));
    match Event::from_value(&event).and_then(|e| s.append(e)) {
        Ok(_) => {
            assert_eq!((s.events().len(), s.settings_seq()), (1, Some(0)));
            None
        }
        Err(e) => {
            assert!(
                s.events().is_empty() && s.settings_seq().is_none(),
                "a refused append changed the session"
            );
            Some(e.code().to_owned())
        }
    }
}

#[test]
fn each_wrong_type_for_a_known_key_is_event_malformed() {
    let wrong: Vec<Value> = vec![
        // data itself
        json!(null),
        json!([]),
        json!({}),
        json!({"settings": null}),
        json!({"settings": "x"}),
        json!({"settings": []}),
        json!({"settings": [{"model": "m"}]}),
        // string keys
        json!({"settings": {"systemPrompt": 1}}),
        json!({"settings": {"systemPrompt": null}}),
        json!({"settings": {"systemPrompt": ["a"]}}),
        json!({"settings": {"model": true}}),
        json!({"settings": {"model": null}}),
        json!({"settings": {"provider": {}}}),
        json!({"settings": {"provider": null}}),
        // tools
        json!({"settings": {"tools": {}}}),
        json!({"settings": {"tools": null}}),
        json!({"settings": {"tools": "read_file"}}),
        json!({"settings": {"tools": ["read_file"]}}),
        json!({"settings": {"tools": [{}]}}),
        json!({"settings": {"tools": [{"name": 1}]}}),
        json!({"settings": {"tools": [{"name": null}]}}),
        json!({"settings": {"tools": [["read_file"]]}}),
        json!({"settings": {"tools": [{"name": "t", "description": 2}]}}),
        json!({"settings": {"tools": [{"name": "t", "description": null}]}}),
        // contextBudget
        json!({"settings": {"contextBudget": -1}}),
        json!({"settings": {"contextBudget": 1.5}}),
        json!({"settings": {"contextBudget": "100"}}),
        json!({"settings": {"contextBudget": null}}),
        // params
        json!({"settings": {"params": []}}),
        json!({"settings": {"params": 0.2}}),
        json!({"settings": {"params": null}}),
    ];
    for data in wrong {
        assert_eq!(refusal(settings_event(0, data.clone())).as_deref(), Some("event-malformed"), "{data}");
    }
    // The same checks on the stored-columns path.
    let e = Event::from_parts(0, 0, "session/settings", r#"{"settings":{"model":7}}"#, None, None);
    assert_eq!(e.err().map(|e| e.code().to_owned()).as_deref(), Some("event-malformed"));
    // A duplicated known key is refused too.
    let e = Event::from_json(
        r#"{"seq":0,"time":0,"type":"session/settings","data":{"settings":{"model":"a","model":"b"}}}"#,
    );
    assert_eq!(e.err().map(|e| e.code().to_owned()).as_deref(), Some("event-malformed"));
}

#[test]
fn every_key_is_optional_and_unknown_keys_are_kept_verbatim() {
    let accepted: Vec<Value> = vec![
        json!({"settings": {}}),
        json!({"settings": {"systemPrompt": "", "model": "m", "provider": "http://h/v1"}}),
        json!({"settings": {"tools": []}}),
        json!({"settings": {"tools": [{"name": "t"}]}}),
        json!({"settings": {"tools": [{"name": "t", "parameters": null}]}}),
        json!({"settings": {"tools": [{"name": "t", "description": "d", "parameters": [1, "any"]}]}}),
        json!({"settings": {"contextBudget": 0}}),
        json!({"settings": {"contextBudget": 18_446_744_073_709_551_615u64}}),
        json!({"settings": {"params": {}}}),
        json!({"settings": {"params": {"temperature": 0.2, "maxTokens": 5, "stop": null}}}),
        json!({"settings": {"future": null, "seed": [1]}}),
        json!({"settings": {}, "note": "besides settings"}),
    ];
    for data in accepted {
        assert_eq!(refusal(settings_event(0, data.clone())), None, "{data}");
    }

    let text = r#"{"seq":0,"time":0,"type":"session/settings","data":{"settings":{"zeta":1,"model":"m","tools":[{"cache":true,"name":"t","parameters":{"type":"object"}}],"alpha":{"b":2,"a":1}},"why":"x"}}"#;
    let event = Event::from_json(text).unwrap();
    assert_eq!(event.to_json(), text, "the event is kept byte for byte");
    let mut s = Session::create(SessionHeader::new("t", 0));
    s.append(event).unwrap();
    let settings = s.settings();
    assert_eq!(settings.model.as_deref(), Some("m"));
    assert_eq!(settings.extra.get("zeta"), Some(&json!(1)));
    let tools = settings.tools.as_deref().unwrap();
    assert_eq!(tools[0].name, "t");
    assert_eq!(tools[0].extra.get("cache"), Some(&json!(true)), "unknown keys of a tool are kept");
    assert_eq!(
        s.derive_request().to_json(),
        r#"{"settings":{"zeta":1,"model":"m","tools":[{"cache":true,"name":"t","parameters":{"type":"object"}}],"alpha":{"b":2,"a":1}},"messages":[]}"#
    );
}

#[test]
fn settings_never_join_the_surface() {
    let mut with_op = settings_event(0, json!({"settings": {}}));
    with_op["surfaceOp"] = json!("append");
    assert_eq!(refusal(with_op).as_deref(), Some("surface-op-forbidden"));
    let mut with_replace = settings_event(0, json!({"settings": {}}));
    with_replace["surfaceOp"] = json!({"op": "replace", "start": 0, "end": 0});
    assert_eq!(refusal(with_replace).as_deref(), Some("surface-op-forbidden"));
    let mut with_sources = settings_event(1, json!({"settings": {}}));
    with_sources["sourceEventSeqs"] = json!([0]);
    let e = Event::from_value(&with_sources);
    assert_eq!(e.err().map(|e| e.code().to_owned()).as_deref(), Some("source-seqs-forbidden"));
    // A bad shape is reported before the forbidden metadata (the documented order).
    let mut both = settings_event(0, json!({"settings": {"model": 1}}));
    both["surfaceOp"] = json!("append");
    assert_eq!(refusal(both).as_deref(), Some("event-malformed"));
}

fn user_message(id: &str, text: &str) -> UserMessage {
    let message =
        Message { id: id.into(), role: Role::User, content: vec![Block::text(text)], source: Source::User };
    UserMessage { turn: None, message }
}

fn pirate() -> Settings {
    Settings {
        system_prompt: Some("You are a pirate.".into()),
        model: Some("m1".into()),
        tools: Some(vec![OfferedTool { name: "read_file".into(), ..OfferedTool::default() }]),
        context_budget: Some(1000),
        ..Settings::default()
    }
}

#[test]
fn the_effective_settings_are_the_last_ones_whole_never_merged() {
    let mut s = Session::create(SessionHeader::new("t", 0));
    assert_eq!(s.settings(), Settings::default());
    assert_eq!(s.settings_seq(), None);
    assert_eq!(s.derive_request().to_json(), r#"{"settings":{},"messages":[]}"#);

    s.append_log(1, SessionSettings { settings: pirate() }).unwrap();
    s.append_log(2, TurnStart { turn: 1 }).unwrap();
    s.append_surface(3, user_message("u1", "ahoy"), SurfaceIntent::append()).unwrap();
    assert_eq!(s.settings(), pirate());
    assert_eq!(s.settings_seq(), Some(0));

    let only_model = Settings { model: Some("m2".into()), ..Settings::default() };
    s.append_log(4, SessionSettings { settings: only_model.clone() }).unwrap();
    assert_eq!(s.settings(), only_model, "the new settings replace the old ones whole");
    assert_eq!(s.settings_seq(), Some(3));
    assert_eq!(
        s.derive_request().to_json(),
        r#"{"settings":{"model":"m2"},"messages":[{"id":"u1","role":"user","content":[{"type":"text","text":"ahoy"}],"source":{"kind":"user"}}]}"#
    );
}

#[test]
fn a_refused_or_unwritten_batch_leaves_the_settings_as_they_were() {
    let mut s = Session::create(SessionHeader::new("t", 0));
    s.append_log(0, SessionSettings { settings: pirate() }).unwrap();
    let other = Settings { model: Some("m2".into()), ..Settings::default() };
    let batch = vec![
        Event::log(1, 0, SessionSettings { settings: other.clone() }).unwrap(),
        Event::log(2, 0, StepEnd { turn: 1, step: 1 }).unwrap(),
    ];
    let failed = s.append_batch_with(batch.clone(), |_| Err::<(), _>("disk full"));
    assert!(failed.is_err());
    assert_eq!((s.settings(), s.settings_seq()), (pirate(), Some(0)));
    let refused = vec![batch[0].clone(), Event::log(9, 0, StepStart { turn: 1, step: 1 }).unwrap()];
    assert!(s.append_batch_with(refused, |_| Ok::<(), &str>(())).is_err());
    assert_eq!((s.settings(), s.settings_seq()), (pirate(), Some(0)));
    s.append_batch_with(vec![batch[0].clone()], |_| Ok::<(), &str>(())).unwrap();
    assert_eq!((s.settings(), s.settings_seq()), (other, Some(1)));
}

#[test]
fn replaying_a_log_derives_the_same_request_byte_for_byte() {
    let mut s = Session::create(SessionHeader::new("replay", 0));
    s.append_log(0, SessionSettings { settings: pirate() }).unwrap();
    s.append_log(1, TurnStart { turn: 1 }).unwrap();
    s.append_surface(2, user_message("u1", "where is the gold?"), SurfaceIntent::append()).unwrap();
    let written = s.derive_request().to_json();
    let text = palimpsest_core_session::jsonl::to_bytes(s.header(), s.events());
    for _ in 0..2 {
        let replayed = JsonlLog::parse(&text).unwrap().into_session().unwrap();
        assert_eq!(replayed.derive_request().to_json(), written);
        assert_eq!(replayed.settings(), pirate());
    }
    assert_eq!(serde_json::to_string(&s.derive_request()).unwrap(), written, "serde writes the same bytes");
}
