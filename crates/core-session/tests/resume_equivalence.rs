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

use palimpsest_core_session::{AppendError, Checkpoint, Event, Session, SessionHeader};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
enum Op {
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    Chunk,
    Assistant { calls: u8, cite_chunks: bool },
    ToolCall { call: u8 },
    ToolResult { call: u8, cite: bool },
    User,
    Context,
    Settings { v: u8 },
    Plugin,
    Replace { a: usize, b: usize, cite_all: bool, off_surface: bool },
    ReplaceToolResult { a: usize, call: u8 },
    WrongSeq { delta: u8 },
}

/// An op, and whether its numbers (turn, step, call id) are deliberately off.
fn op() -> impl Strategy<Value = (Op, bool)> {
    let op = prop_oneof![
        3 => Just(Op::TurnStart),
        3 => Just(Op::TurnEnd),
        4 => Just(Op::StepStart),
        4 => Just(Op::StepEnd),
        5 => Just(Op::Chunk),
        5 => (0u8..3, prop::bool::weighted(0.7)).prop_map(|(calls, cite_chunks)| Op::Assistant { calls, cite_chunks }),
        3 => (0u8..3).prop_map(|call| Op::ToolCall { call }),
        4 => (0u8..3, prop::bool::weighted(0.8)).prop_map(|(call, cite)| Op::ToolResult { call, cite }),
        4 => Just(Op::User),
        1 => Just(Op::Context),
        1 => (0u8..3).prop_map(|v| Op::Settings { v }),
        1 => Just(Op::Plugin),
        3 => (any::<usize>(), any::<usize>(), prop::bool::weighted(0.85), prop::bool::weighted(0.1))
            .prop_map(|(a, b, cite_all, off_surface)| Op::Replace { a, b, cite_all, off_surface }),
        2 => (any::<usize>(), 0u8..3).prop_map(|(a, call)| Op::ReplaceToolResult { a, call }),
        1 => (1u8..3).prop_map(|delta| Op::WrongSeq { delta }),
    ];
    (op, prop::bool::weighted(0.1))
}

fn message(id: String, role: &str, content: Value, source: Value) -> Value {
    json!({"id": id, "role": role, "content": content, "source": source})
}

fn tool_result_data(turn: u64, step: u64, seq: u64, call: &str) -> Value {
    let content = json!([{"type": "tool-result", "toolCallId": call, "isError": false, "content": []}]);
    json!({"turn": turn, "step": step, "message": message(format!("r{seq}"), "user", content, json!({"kind": "tool", "callId": call}))})
}

/// The candidate event for `op`, built from the whole session's state (it
/// is offered to both sessions). `None` when the op makes no event.
fn candidate(op: &Op, noisy: bool, s: &Session) -> Option<Event> {
    let seq = s.next_seq();
    let time = s.last_time() + 1;
    let turns = s.turn_state();
    let bump = u64::from(noisy);
    let turn = turns.open_turn.unwrap_or(turns.started).max(1) + bump;
    let (sturn, sstep) =
        turns.open_step.as_ref().map_or((turn, turns.last_step.max(1)), |o| (o.turn, o.step + bump));
    let surface = s.surface();
    let pick = |i: usize| surface.get(i % surface.len().max(1)).copied();
    let call = |c: u8| format!("c{c}");
    let (ty, data, sources, op_): (&str, Value, Option<Vec<u64>>, Option<Value>) = match *op {
        Op::TurnStart => ("turn/start", json!({"turn": turns.started + 1 + bump}), None, None),
        Op::TurnEnd => ("turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}), None, None),
        Op::StepStart => {
            ("step/start", json!({"turn": turn, "step": turns.last_step + 1 + bump}), None, None)
        }
        Op::StepEnd => ("step/end", json!({"turn": sturn, "step": sstep}), None, None),
        Op::Chunk => (
            "assistant/chunk",
            json!({"turn": sturn, "step": sstep, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
            None,
            None,
        ),
        Op::Assistant { calls, cite_chunks } => {
            let mut content = vec![json!({"type": "text", "text": "a"})];
            for c in 0..calls {
                content.push(json!({"type": "tool-call", "id": call((c + u8::from(noisy)) % 3), "name": "t", "arguments": "{}"}));
            }
            let chunks = turns.open_step.as_ref().map(|o| o.chunks.clone()).unwrap_or_default();
            let sources = match (cite_chunks, noisy) {
                (true, false) => Some(chunks),
                (true, true) => Some(vec![seq.saturating_sub(1)]).filter(|_| seq > 0),
                (false, _) => None,
            };
            let source = json!({"kind": "model", "provider": "p", "model": "m"});
            let data = json!({"turn": sturn, "step": sstep, "message": message(format!("a{seq}"), "assistant", Value::Array(content), source)});
            ("assistant/message", data, sources, Some(json!("append")))
        }
        Op::ToolCall { call: c } => (
            "tool/call",
            json!({"turn": sturn, "step": sstep, "callId": call(c), "name": "t", "arguments": "{}"}),
            None,
            None,
        ),
        Op::ToolResult { call: c, cite } => {
            let id = call(c);
            let anchor = turns
                .open_step
                .as_ref()
                .and_then(|o| o.tool_calls.iter().find(|(i, _)| *i == id).map(|(_, s)| *s));
            let sources = cite.then(|| vec![anchor.unwrap_or(0) + bump]).filter(|v| v[0] < seq);
            ("tool/result", tool_result_data(sturn, sstep, seq, &id), sources, Some(json!("append")))
        }
        Op::User => (
            "user/message",
            json!({"message": message(format!("u{seq}"), "user", json!([{"type": "text", "text": "u"}]), json!({"kind": "user"}))}),
            None,
            Some(json!("append")),
        ),
        Op::Context => (
            "context/message",
            json!({"message": message(format!("x{seq}"), "user", json!([{"type": "text", "text": "ctx"}]), json!({"kind": "plugin", "plugin": "p"}))}),
            None,
            Some(json!("append")),
        ),
        Op::Settings { v } => (
            "session/settings",
            json!({"settings": {"systemPrompt": format!("p{v}"), "model": "m"}}),
            None,
            None,
        ),
        Op::Plugin => ("compaction/start", json!({"n": seq}), None, None),
        Op::Replace { a, b, cite_all, off_surface } => {
            let (start, end) = (pick(a)?, pick(b)?);
            let start =
                if off_surface { (0..seq).find(|x| !surface.contains(x)).unwrap_or(start) } else { start };
            let (pa, pb) = (surface.iter().position(|&x| x == start), surface.iter().position(|&x| x == end));
            let mut sources = match (pa, pb) {
                (Some(x), Some(y)) if x <= y => surface[x..=y].to_vec(),
                _ => vec![start.min(end)],
            };
            if !cite_all && sources.len() > 1 {
                sources.pop();
            }
            let data = json!({"message": message(format!("s{seq}"), "user", json!([{"type": "text", "text": "summary"}]), json!({"kind": "plugin", "plugin": "compaction"}))});
            ("user/message", data, Some(sources), Some(json!({"op": "replace", "start": start, "end": end})))
        }
        Op::ReplaceToolResult { a, call: c } => {
            let target = pick(a)?;
            let data = tool_result_data(sturn, sstep, seq, &call(c));
            (
                "tool/result",
                data,
                Some(vec![target]),
                Some(json!({"op": "replace", "start": target, "end": target})),
            )
        }
        Op::WrongSeq { delta } => {
            let e = json!({"seq": seq + u64::from(delta), "time": time, "type": "turn/start", "data": {"turn": 1}});
            return Event::from_json(&e.to_string()).ok();
        }
    };
    let mut e = json!({"seq": seq, "time": time, "type": ty, "data": data});
    if let Some(sources) = sources {
        e["sourceEventSeqs"] = json!(sources);
    }
    if let Some(op_) = op_ {
        e["surfaceOp"] = op_;
    }
    Event::from_json(&e.to_string()).ok()
}

fn code<T>(r: &Result<T, AppendError>) -> Result<(), String> {
    r.as_ref().map(drop).map_err(|e| e.code().to_owned())
}

/// Everything an append or a request reads must agree.
fn assert_same(whole: &Session, resumed: &Session) -> Result<(), TestCaseError> {
    prop_assert_eq!(whole.surface(), resumed.surface());
    prop_assert_eq!(whole.next_seq(), resumed.next_seq());
    prop_assert_eq!(whole.last_time(), resumed.last_time());
    prop_assert_eq!(whole.last_turn(), resumed.last_turn());
    prop_assert_eq!(whole.settings_seq(), resumed.settings_seq());
    prop_assert_eq!(whole.settings(), resumed.settings());
    prop_assert_eq!(whole.turn_state(), resumed.turn_state());
    let derived =
        |s: &Session| s.derive_messages().into_iter().map(|m| (m.seq, m.message)).collect::<Vec<_>>();
    prop_assert_eq!(derived(whole), derived(resumed));
    prop_assert_eq!(whole.derive_request().to_json(), resumed.derive_request().to_json());
    let history = |s: &Session| s.history().iter().cloned().collect::<Vec<_>>();
    prop_assert_eq!(history(whole), history(resumed));
    prop_assert_eq!(whole.checkpoint(), resumed.checkpoint());
    // The resumed session holds exactly the surface's events, the settings
    // event and the events after its checkpoint.
    let from = resumed.resident_log().resident_from();
    let mut expected: Vec<u64> = resumed
        .surface()
        .iter()
        .copied()
        .chain(resumed.settings_seq())
        .filter(|&s| s < from)
        .chain(from..resumed.next_seq())
        .collect();
    expected.sort_unstable();
    expected.dedup();
    let held: Vec<u64> = resumed.resident().iter().map(Event::seq).collect();
    prop_assert_eq!(held, expected);
    for seq in 0..whole.next_seq() + 1 {
        if let Some(e) = resumed.event(seq) {
            prop_assert_eq!(Some(e), whole.event(seq));
        }
    }
    Ok(())
}

/// Resumes from a checkpoint of `log[..cut]` (read back from its JSON),
/// with `log[cut..]` as the tail; with `again`, checkpoints the resumed
/// session at `again` and resumes once more.
fn resume(
    header: &SessionHeader,
    log: &[Event],
    cut: usize,
    again: Option<usize>,
) -> Result<Session, TestCaseError> {
    let prefix = Session::from_log(header.clone(), log[..cut].to_vec())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let checkpoint = prefix.checkpoint();
    let read =
        Checkpoint::from_json(&checkpoint.to_json()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&read, &checkpoint);
    if cut > 0 {
        prop_assert!(read.matches_last_event(&log[cut - 1]));
    }
    let (mid, end) = match again {
        Some(m) => (m.clamp(cut, log.len()), Some(log.len())),
        None => (log.len(), None),
    };
    let resumed = Session::resume(header.clone(), read, log[cut..mid].to_vec())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Some(end) = end else { return Ok(resumed) };
    let read = Checkpoint::from_json(&resumed.checkpoint().to_json())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Session::resume(header.clone(), read, log[mid..end].to_vec())
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_resumed_session_behaves_as_the_whole_log(
        log_ops in prop::collection::vec(op(), 0..90),
        after in prop::collection::vec((op(), prop::bool::weighted(0.15)), 0..40),
        cut in any::<prop::sample::Index>(),
        again in prop::option::weighted(0.3, any::<prop::sample::Index>()),
    ) {
        let header = SessionHeader::new("eq", 7);
        let mut whole = Session::create(header.clone());
        for (op, noisy) in &log_ops {
            if let Some(e) = candidate(op, *noisy, &whole) {
                let _ = whole.append(e);
            }
        }
        let log = whole.events().to_vec();
        let cut = cut.index(log.len() + 1);
        let again = again.map(|i| cut + i.index(log.len() - cut + 1));
        let mut resumed = resume(&header, &log, cut, again)?;
        prop_assert_eq!(resumed.is_complete(), cut == 0 && again.is_none_or(|m| m == 0));
        assert_same(&whole, &resumed)?;
        for ((op, noisy), failing_write) in &after {
            let Some(e) = candidate(op, *noisy, &whole) else { continue };
            if *failing_write {
                // A one-event batch whose store write fails: both roll back.
                let w = whole.append_batch_with(vec![e.clone()], |_| Err::<(), ()>(()));
                let r = resumed.append_batch_with(vec![e], |_| Err::<(), ()>(()));
                prop_assert_eq!(format!("{w:?}"), format!("{r:?}"));
            } else {
                let w = whole.append(e.clone());
                let r = resumed.append(e);
                prop_assert_eq!(code(&w), code(&r), "{:?}", op);
            }
            assert_same(&whole, &resumed)?;
        }
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
    assert!(
        resumed.resident().len() <= resumed.surface().len() + 1 + 5,
        "{} events resident for a surface of {} and a tail of 5",
        resumed.resident().len(),
        resumed.surface().len()
    );
    assert!(!resumed.is_complete());
    assert!(resumed.complete_events().is_none());
    assert_eq!(resumed.derive_request().to_json(), s.derive_request().to_json());
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
        ("checkpoint-version-unsupported", Box::new(|v| v["checkpoint"] = json!(2))),
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
        let err = Checkpoint::from_json(&v.to_string()).expect_err(&v.to_string());
        assert_eq!(err.code(), expected, "{v} gave {err}");
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
