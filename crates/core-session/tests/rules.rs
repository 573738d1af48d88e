//! Every section-1 and section-2 code of the contract, each provoked by a
//! minimal log. One helper, [`check`], is the only caller of the API: it
//! appends the valid prefix, then offers the bad event and asserts the code,
//! the seq, and that the refusal changed nothing.

use palimpsest_core_session::jsonl::JsonlLog;
use palimpsest_core_session::{Event, Session, SessionHeader};
use serde_json::{json, Value};

fn user(seq: u64, extra: Value) -> Value {
    let mut e = json!({"seq": seq, "time": 0, "type": "user/message",
        "data": {"message": {"id": format!("u{seq}"), "role": "user",
            "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}},
        "surfaceOp": "append"});
    merge(&mut e, extra);
    e
}

fn tool_result(seq: u64, call: &str, extra: Value) -> Value {
    let mut e = json!({"seq": seq, "time": 0, "type": "tool/result",
        "data": {"turn": 1, "step": 1, "message": {"id": format!("r{seq}"), "role": "user",
            "content": [{"type": "tool-result", "toolCallId": call, "isError": false,
                "content": [{"type": "text", "text": "out"}]}],
            "source": {"kind": "tool", "callId": call}}},
        "surfaceOp": "append"});
    merge(&mut e, extra);
    e
}

fn plain(seq: u64, ty: &str, data: Value) -> Value {
    json!({"seq": seq, "time": 0, "type": ty, "data": data})
}

/// Sets top-level keys; the value `"__remove__"` removes the key.
fn merge(e: &mut Value, extra: Value) {
    if let Value::Object(m) = extra {
        for (k, v) in m {
            if v == json!("__remove__") {
                e.as_object_mut().unwrap().remove(&k);
            } else {
                e[k] = v;
            }
        }
    }
}

/// Appends `prefix` (must be valid), then offers `bad`: asserts it is refused
/// with `code` at `seq`, and that log and surface are unchanged.
#[track_caller]
fn check(prefix: &[Value], bad: Value, code: &str, seq: Option<u64>) {
    let mut s = Session::create(SessionHeader::new("t", 0));
    for e in prefix {
        let event = Event::from_value(e).unwrap_or_else(|err| panic!("prefix event {e} refused: {err}"));
        s.append(event).unwrap_or_else(|err| panic!("prefix event {e} refused: {err}"));
    }
    let (events_before, surface_before) = (s.events().to_vec(), s.surface().to_vec());
    let err = match Event::from_value(&bad) {
        Err(err) => err,
        Ok(event) => {
            assert_eq!(s.check(&event).map_err(|e| e.code().to_owned()), Err(code.to_owned()));
            s.append(event).expect_err("bad event was accepted")
        }
    };
    assert_eq!((err.code(), err.seq()), (code, seq), "{err}");
    assert_eq!(s.events(), events_before.as_slice(), "a refused append changed the log");
    assert_eq!(s.surface(), surface_before.as_slice(), "a refused append changed the surface");
}

// ---- section 1: event-malformed ----------------------------------------

#[test]
fn envelope_problems_are_event_malformed() {
    let base = || user(0, json!({}));
    let cases: Vec<(Value, Option<u64>)> = vec![
        (json!({"seq": 0, "time": 0, "type": "turn/start"}), Some(0)), // no data
        (json!({"time": 0, "type": "turn/start", "data": {"turn": 1}}), None), // no seq
        (json!({"seq": -1, "time": 0, "type": "turn/start", "data": {"turn": 1}}), None),
        (json!({"seq": 0.5, "time": 0, "type": "turn/start", "data": {"turn": 1}}), None),
        (json!({"seq": 0, "time": -3, "type": "turn/start", "data": {"turn": 1}}), Some(0)),
        (json!({"seq": 0, "time": 0, "type": 7, "data": {"turn": 1}}), Some(0)),
        (json!({"seq": 0, "time": 0, "type": "turn/start", "data": {"turn": 1}, "extra": 1}), Some(0)),
        (json!([1, 2, 3]), None),
        // serde reads structs from arrays; the contract wants an object.
        (json!([0, 1, "turn/start", {"turn": 1}]), None),
        (
            {
                let mut e = base();
                e["surfaceOp"] = Value::Null;
                e
            },
            Some(0),
        ),
        (
            {
                let mut e = base();
                e["sourceEventSeqs"] = Value::Null;
                e
            },
            Some(0),
        ),
    ];
    for (bad, seq) in cases {
        check(&[], bad, "event-malformed", seq);
    }
}

#[test]
fn core_payload_shapes_are_enforced() {
    let cases = vec![
        plain(0, "turn/start", json!({})),
        plain(0, "turn/start", json!({"turn": "one"})),
        plain(0, "turn/start", json!([1])),
        plain(0, "turn/end", json!({"turn": 1, "reason": {"kind": "exploded"}})),
        plain(0, "turn/end", json!({"turn": 1, "reason": {"kind": "error"}})),
        plain(0, "step/start", json!({"turn": 1})),
        plain(
            0,
            "assistant/chunk",
            json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "text": "x"}}),
        ),
        plain(0, "tool/call", json!({"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": {}})),
        user(
            0,
            json!({"data": {"message": {"id": "u", "role": "assistant", "content": [], "source": {"kind": "user"}}}}),
        ),
        user(
            0,
            json!({"data": {"message": {"id": "u", "role": "user", "content": [{"type": "video"}], "source": {"kind": "user"}}}}),
        ),
        user(
            0,
            json!({"data": {"message": {"id": "u", "role": "user", "content": [], "source": {"kind": "alien"}}}}),
        ),
        // tool/result: two blocks, wrong source kind, mismatched call ids
        tool_result(
            0,
            "c",
            json!({"data": {"turn": 1, "step": 1, "message": {"id": "r", "role": "user",
            "content": [{"type": "text", "text": "a"}], "source": {"kind": "tool", "callId": "c"}}}}),
        ),
        tool_result(
            0,
            "c",
            json!({"data": {"turn": 1, "step": 1, "message": {"id": "r", "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "c", "isError": false, "content": []}],
            "source": {"kind": "user"}}}}),
        ),
        tool_result(
            0,
            "c",
            json!({"data": {"turn": 1, "step": 1, "message": {"id": "r", "role": "user",
            "content": [{"type": "tool-result", "toolCallId": "c", "isError": false, "content": []}],
            "source": {"kind": "tool", "callId": "other"}}}}),
        ),
    ];
    for bad in cases {
        check(&[], bad, "event-malformed", Some(0));
    }
}

/// Core payloads, each with one optional member (`"key":value`, as it
/// stands in the text) that a conformance probe wrote as `null`.
const NULL_OPTIONAL_CASES: &[(&str, &str, &str)] = &[
    (
        "user/message",
        r#"{"turn":1,"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}"#,
        r#""turn":1"#,
    ),
    (
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":3,"outputTokens":2}}"#,
        r#""usage":{"inputTokens":3,"outputTokens":2}"#,
    ),
    (
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"interrupted":true}"#,
        r#""interrupted":true"#,
    ),
    (
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":3,"outputTokens":2,"cachedInputTokens":1}}"#,
        r#""cachedInputTokens":1"#,
    ),
    (
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":3,"outputTokens":2,"reasoningTokens":1}}"#,
        r#""reasoningTokens":1"#,
    ),
    (
        "assistant/message",
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"reasoning","text":"hm","signature":"sig"},{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}}}"#,
        r#""signature":"sig""#,
    ),
    (
        "tool/result",
        r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":true,"content":[{"type":"text","text":"no"}]}],"source":{"kind":"tool","callId":"c1"}},"error":{"name":"UnknownTool","code":"TOOL_UNKNOWN"}}"#,
        r#""error":{"name":"UnknownTool","code":"TOOL_UNKNOWN"}"#,
    ),
    (
        "assistant/chunk",
        r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c1","name":"read","argumentsDelta":"{"}}"#,
        r#""name":"read""#,
    ),
    (
        "assistant/chunk",
        r#"{"turn":1,"step":1,"chunk":{"type":"usage","inputTokens":3,"outputTokens":2,"cachedInputTokens":1,"reasoningTokens":4}}"#,
        r#""cachedInputTokens":1"#,
    ),
    (
        "assistant/chunk",
        r#"{"turn":1,"step":1,"chunk":{"type":"usage","inputTokens":3,"outputTokens":2,"cachedInputTokens":1,"reasoningTokens":4}}"#,
        r#""reasoningTokens":4"#,
    ),
];

/// An optional key inside a core payload, present as `null`, is not
/// "absent": like an envelope key (section 1.1), it is `event-malformed`
/// on every entry point (an outside conformance probe found it read as
/// absent). Each payload is offered as written (which the fast shape check
/// reads whole) and with an unknown key beside it (which sends it to the
/// owned types); without the key, it loads.
#[test]
fn a_null_optional_payload_key_is_event_malformed() {
    const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;
    for &(ty, data, member) in NULL_OPTIONAL_CASES {
        assert_eq!(data.matches(member).count(), 1, "{member} in {data}");
        let key = &member[..member.find(':').unwrap()];
        let null = data.replace(member, &format!("{key}:null"));
        let absent = data.replace(&format!(",{member}"), "").replace(&format!("{member},"), "");
        let op = if ty == "assistant/chunk" { None } else { Some(r#""append""#) };
        let line = |data: &str| {
            let op = op.map(|op| format!(r#","surfaceOp":{op}"#)).unwrap_or_default();
            format!(r#"{{"seq":0,"time":0,"type":"{ty}","data":{data}{op}}}"#)
        };
        let with_unknown = |data: &str| data.replacen('{', r#"{"future":1,"#, 1);
        for data in [null.clone(), with_unknown(&null)] {
            let err = Event::from_json(&line(&data)).expect_err(&data);
            assert_eq!((err.code(), err.seq()), ("event-malformed", Some(0)), "{data}: {err}");
            let err = Event::from_parts(0, 0, ty, data.as_str(), None, op).expect_err(&data);
            assert_eq!((err.code(), err.seq()), ("event-malformed", Some(0)), "{data}: {err}");
            let file = format!("{HEADER}\n{}\n", line(&data));
            let err = JsonlLog::parse(file.as_bytes()).expect_err(&data);
            assert_eq!((err.code(), err.line()), ("event-malformed", Some(2)), "{data}: {err}");
            check(&[], serde_json::from_str(&line(&data)).unwrap(), "event-malformed", Some(0));
        }
        for data in [data.to_owned(), absent.clone(), with_unknown(&absent)] {
            assert!(!data.contains("null"), "{data}");
            let event = Event::from_json(&line(&data)).unwrap_or_else(|e| panic!("{data}: {e}"));
            assert_eq!(event.data(), data);
            Event::from_parts(0, 0, ty, data.as_str(), None, op).unwrap_or_else(|e| panic!("{data}: {e}"));
            let file = format!("{HEADER}\n{}\n", line(&data));
            let log = JsonlLog::parse(file.as_bytes()).unwrap_or_else(|e| panic!("{data}: {e}"));
            assert_eq!(log.events, std::slice::from_ref(&event));
            let mut s = Session::create(SessionHeader::new("t", 0));
            s.append(event).unwrap_or_else(|e| panic!("{data}: {e}"));
        }
    }
}

#[test]
fn unknown_keys_in_known_payloads_and_any_plugin_data_are_accepted() {
    let mut s = Session::create(SessionHeader::new("t", 0));
    let with_extra = user(
        0,
        json!({"data": {"future": {"x": 1}, "message": {"id": "u", "role": "user",
        "content": [{"type": "text", "text": "hi", "cache": true}], "source": {"kind": "user"}, "meta": 1}}}),
    );
    for e in [with_extra, plain(1, "compaction/start", Value::Null), plain(2, "x/y", json!([1, "two"]))] {
        let event = Event::from_value(&e).unwrap();
        s.append(event).unwrap();
    }
    assert_eq!(s.surface(), &[0]);
    // Unknown keys survive verbatim.
    assert!(s.events()[0].to_json().contains(r#""future":{"x":1}"#));
    assert!(s.derive_messages()[0].raw.get().contains(r#""meta":1"#));
}

// ---- section 2 ------------------------------------------------------------

#[test]
fn rule_1_surface_op_missing() {
    check(&[], user(0, json!({"surfaceOp": "__remove__"})), "surface-op-missing", Some(0));
    check(&[], tool_result(0, "c", json!({"surfaceOp": "__remove__"})), "surface-op-missing", Some(0));
}

#[test]
fn rules_are_checked_in_the_documented_order() {
    // docs/contract-notes.md (a): rule 2, then 1, then 3, then 4, then 9.
    let mut e = plain(0, "turn/start", json!({"turn": 1}));
    e["surfaceOp"] = json!("bogus");
    e["sourceEventSeqs"] = json!("bogus");
    check(&[], e, "surface-op-forbidden", Some(0));
    check(
        &[],
        user(0, json!({"surfaceOp": "__remove__", "sourceEventSeqs": "x"})),
        "surface-op-missing",
        Some(0),
    );
    check(
        &[],
        user(0, json!({"surfaceOp": "bogus", "sourceEventSeqs": "x"})),
        "surface-op-malformed",
        Some(0),
    );
    check(&[], user(3, json!({"sourceEventSeqs": [7]})), "source-seqs-not-earlier", Some(3));
    check(&[], user(3, json!({"sourceEventSeqs": [1]})), "seq-not-contiguous", Some(3));
}

#[test]
fn rule_2_surface_metadata_forbidden_off_the_surface() {
    let mut e = plain(0, "turn/start", json!({"turn": 1}));
    e["surfaceOp"] = json!("append");
    check(&[], e, "surface-op-forbidden", Some(0));
    let mut e = plain(1, "compaction/start", json!({}));
    e["sourceEventSeqs"] = json!([0]);
    check(&[plain(0, "turn/start", json!({"turn": 1}))], e, "source-seqs-forbidden", Some(1));
}

#[test]
fn rule_3_surface_op_malformed() {
    for op in [
        json!("prepend"),
        json!(7),
        json!({"op": "replace", "start": 0}),
        json!({"op": "replace", "start": 0, "end": 0, "extra": 1}),
        json!({"op": "insert", "start": 0, "end": 0}),
        json!({"op": "replace", "start": -1, "end": 0}),
        json!(["append"]),
    ] {
        check(&[], user(0, json!({"surfaceOp": op})), "surface-op-malformed", Some(0));
    }
}

#[test]
fn rule_4_source_seqs_shape() {
    let p = [plain(0, "turn/start", json!({"turn": 1}))];
    for bad in [json!("0"), json!([0, -1]), json!([0.5]), json!({"0": 1})] {
        check(&p, user(1, json!({"sourceEventSeqs": bad})), "source-seqs-malformed", Some(1));
    }
    check(&p, user(1, json!({"sourceEventSeqs": []})), "source-seqs-empty", Some(1));
    check(&p, user(1, json!({"sourceEventSeqs": [0, 0]})), "source-seqs-duplicate", Some(1));
    check(&p, user(1, json!({"sourceEventSeqs": [1]})), "source-seqs-not-earlier", Some(1));
    check(&p, user(1, json!({"sourceEventSeqs": [5]})), "source-seqs-not-earlier", Some(1));
}

#[test]
fn rule_4_empty_sources_allowed_on_assistant_message() {
    let mut s = Session::create(SessionHeader::new("t", 0));
    let e = json!({"seq": 0, "time": 0, "type": "assistant/message", "data": {"turn": 1, "step": 1,
        "message": {"id": "a", "role": "assistant", "content": [], "source": {"kind": "model", "provider": "p", "model": "m"}}},
        "sourceEventSeqs": [], "surfaceOp": "append"});
    s.append(Event::from_value(&e).unwrap()).unwrap();
    assert_eq!(s.events()[0].source_event_seqs(), Some(&[][..]));
    // Empty content derives nothing.
    assert!(s.derive_messages().is_empty());
}

#[test]
fn rule_6_replace_range() {
    let p = [user(0, json!({})), user(1, json!({})), user(2, json!({}))];
    let replace = |seq, start, end, sources: Value| {
        user(
            seq,
            json!({"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources}),
        )
    };
    check(&p, replace(3, 9, 1, json!([0, 1])), "replace-start-missing", Some(3));
    check(&p, replace(3, 0, 9, json!([0, 1])), "replace-end-missing", Some(3));
    check(&p, replace(3, 2, 0, json!([0, 1, 2])), "replace-reversed", Some(3));
    // A seq shadowed earlier is no longer on the surface.
    let mut shadowed = p.to_vec();
    shadowed.push(replace(3, 0, 1, json!([0, 1])));
    check(&shadowed, replace(4, 0, 2, json!([0, 2])), "replace-start-missing", Some(4));
}

#[test]
fn rule_6_order_is_by_surface_position_not_seq() {
    // After a replace the newer seq 3 stands before 2; a replace from 3 to 2
    // is legitimate (a second compaction starting at the first summary).
    let mut s = Session::create(SessionHeader::new("t", 0));
    let events = [
        user(0, json!({})),
        user(1, json!({})),
        user(2, json!({})),
        user(3, json!({"surfaceOp": {"op": "replace", "start": 0, "end": 1}, "sourceEventSeqs": [0, 1]})),
        user(4, json!({"surfaceOp": {"op": "replace", "start": 3, "end": 2}, "sourceEventSeqs": [2, 3]})),
    ];
    for e in &events {
        s.append(Event::from_value(e).unwrap()).unwrap();
    }
    assert_eq!(s.surface(), &[4]);
    // start == end replaces one entry.
    s.append(
        Event::from_value(&user(
            5,
            json!({"surfaceOp": {"op": "replace", "start": 4, "end": 4}, "sourceEventSeqs": [4]}),
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(s.surface(), &[5]);
}

#[test]
fn rule_7_replace_sources_incomplete() {
    let p = [user(0, json!({})), user(1, json!({})), user(2, json!({}))];
    let bad =
        user(3, json!({"surfaceOp": {"op": "replace", "start": 0, "end": 2}, "sourceEventSeqs": [0, 2]}));
    check(&p, bad, "replace-sources-incomplete", Some(3));
    let none = user(3, json!({"surfaceOp": {"op": "replace", "start": 0, "end": 0}}));
    check(&p, none, "replace-sources-incomplete", Some(3));
}

#[test]
fn rule_8_tool_result_replace_invalid() {
    let p = [user(0, json!({})), tool_result(1, "c1", json!({})), tool_result(2, "c2", json!({}))];
    let replace = |seq, call, start, end, sources: Value| {
        tool_result(
            seq,
            call,
            json!({"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources}),
        )
    };
    // Another call's result.
    check(&p, replace(3, "c1", 2, 2, json!([2])), "tool-result-replace-invalid", Some(3));
    // Not a tool/result.
    check(&p, replace(3, "c1", 0, 0, json!([0])), "tool-result-replace-invalid", Some(3));
    // More than one entry.
    check(&p, replace(3, "c1", 1, 2, json!([1, 2])), "tool-result-replace-invalid", Some(3));
    // The right one is fine.
    let mut s = Session::create(SessionHeader::new("t", 0));
    for e in p.iter().chain([&replace(3, "c2", 2, 2, json!([2]))]) {
        s.append(Event::from_value(e).unwrap()).unwrap();
    }
    assert_eq!(s.surface(), &[0, 1, 3]);
}

#[test]
fn rule_9_seq_not_contiguous() {
    check(&[], plain(1, "turn/start", json!({"turn": 1})), "seq-not-contiguous", Some(1));
    check(
        &[plain(0, "turn/start", json!({"turn": 1}))],
        plain(0, "x", json!(1)),
        "seq-not-contiguous",
        Some(0),
    );
    check(
        &[plain(0, "turn/start", json!({"turn": 1}))],
        plain(5, "x", json!(1)),
        "seq-not-contiguous",
        Some(5),
    );
}

#[test]
fn typed_api_builds_the_same_events_as_the_wire() {
    use palimpsest_core_session::payload::*;
    use palimpsest_core_session::SurfaceIntent;
    let mut s = Session::create(SessionHeader::new("t", 0));
    let msg =
        Message { id: "u0".into(), role: Role::User, content: vec![Block::text("hi")], source: Source::User };
    s.append_surface(0, UserMessage { turn: None, message: msg }, SurfaceIntent::append()).unwrap();
    let as_value = |e: &Event| serde_json::from_str::<Value>(&e.to_json()).unwrap();
    assert_eq!(as_value(&s.events()[0]), user(0, json!({})));
    // The typed path refuses what the wire path refuses.
    let msg = Message { id: "u1".into(), role: Role::Assistant, content: vec![], source: Source::User };
    let err =
        s.append_surface(0, UserMessage { turn: None, message: msg }, SurfaceIntent::append()).unwrap_err();
    assert_eq!(err.code(), "event-malformed");
    let err = s
        .append_log(0, PluginEvent { event_type: "turn/start".into(), data: json!({"turn": 1}) })
        .unwrap_err();
    assert_eq!(err.code(), "event-malformed");
    assert_eq!(s.events().len(), 1);
}

#[test]
fn batches_are_all_or_nothing() {
    use palimpsest_core_session::BatchError;
    let mut s = Session::create(SessionHeader::new("t", 0));
    s.append(Event::from_value(&user(0, json!({}))).unwrap()).unwrap();
    let good = Event::from_value(&user(1, json!({}))).unwrap();
    let replace = Event::from_value(&user(
        2,
        json!({"surfaceOp": {"op": "replace", "start": 0, "end": 1}, "sourceEventSeqs": [0, 1]}),
    ))
    .unwrap();
    let bad = Event::from_value(&user(
        3,
        json!({"surfaceOp": {"op": "replace", "start": 0, "end": 0}, "sourceEventSeqs": [0]}),
    ))
    .unwrap();
    // Refused at the third event: the first two are rolled back too.
    let r = s.append_batch_with(vec![good.clone(), replace.clone(), bad], |_| Ok::<(), String>(()));
    assert!(matches!(r, Err(BatchError::Refused(ref e)) if e.code() == "replace-start-missing"));
    assert_eq!((s.events().len(), s.surface()), (1, &[0][..]));
    // A failed write rolls back a batch that passed every check.
    let r = s.append_batch_with(vec![good.clone(), replace.clone()], |batch| {
        assert_eq!(batch.len(), 2);
        Err("disk full".to_owned())
    });
    assert!(matches!(r, Err(BatchError::Write(ref e)) if e == "disk full"));
    assert_eq!((s.events().len(), s.surface()), (1, &[0][..]));
    // And the same batch goes through when the write succeeds.
    let r = s.append_batch_with(vec![good, replace], |_| Ok::<(), String>(()));
    assert_eq!(r.unwrap(), 1..3);
    assert_eq!(s.surface(), &[2]);
}

#[test]
fn from_parts_checks_exactly_what_from_json_checks() {
    // Every event the rule tests use, valid or not, decodes the same way
    // from its parts as from its JSON text.
    let cases = [
        user(0, json!({})),
        user(3, json!({"sourceEventSeqs": [0, 1]})),
        user(0, json!({"surfaceOp": "__remove__"})),
        user(0, json!({"surfaceOp": {"op": "replace", "start": 0}})),
        user(1, json!({"sourceEventSeqs": [0, 0]})),
        user(1, json!({"sourceEventSeqs": []})),
        user(0, json!({"surfaceOp": Value::Null})),
        tool_result(
            4,
            "c",
            json!({"surfaceOp": {"op": "replace", "start": 1, "end": 1}, "sourceEventSeqs": [1]}),
        ),
        plain(0, "turn/start", json!({"turn": "x"})),
        plain(0, "compaction/start", Value::Null),
        {
            let mut e = plain(0, "turn/start", json!({"turn": 1}));
            e["surfaceOp"] = json!("append");
            e
        },
    ];
    for case in cases {
        let part = |k: &str| case.get(k).map(|v| v.to_string());
        let from_parts = Event::from_parts(
            case["seq"].as_u64().unwrap(),
            case["time"].as_u64().unwrap(),
            case["type"].as_str().unwrap(),
            case["data"].to_string(),
            part("sourceEventSeqs").as_deref(),
            part("surfaceOp").as_deref(),
        );
        let from_json = Event::from_value(&case);
        match (from_parts, from_json) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!((a.code(), a.seq()), (b.code(), b.seq()), "{case}"),
            (a, b) => panic!("{case}: from_parts {a:?} but from_json {b:?}"),
        }
    }
    let err = Event::from_parts(0, 0, "x", "{not json", None, None).unwrap_err();
    assert_eq!((err.code(), err.seq()), ("event-malformed", Some(0)));
}
