//! The generator and the check of RFC 0002's equivalence property, shared
//! by core-session's test (no guard) and the invariants crate's (dev mode,
//! `#[path]`-included: core-session may depend on no palimpsest crate).

use palimpsest_core_session::{
    AppendError, AppendGuard, BatchError, Checkpoint, Event, Session, SessionHeader,
};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub(crate) enum Op {
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    Chunk,
    Assistant {
        calls: u8,
        cite_chunks: bool,
    },
    ToolCall {
        call: u8,
    },
    ToolResult {
        call: u8,
        cite: bool,
    },
    /// A repair closer for a call that never started: cites the
    /// `assistant/message` that requested it.
    NotStarted {
        call: u8,
    },
    User,
    Context,
    Settings {
        v: u8,
    },
    Plugin,
    Replace {
        a: usize,
        b: usize,
        cite_all: bool,
        off_surface: bool,
    },
    ReplaceToolResult {
        a: usize,
        call: u8,
    },
    WrongSeq {
        delta: u8,
    },
}

/// An op, and whether its numbers (turn, step, call id) are deliberately off.
pub(crate) fn op() -> impl Strategy<Value = (Op, bool)> {
    let op = prop_oneof![
        3 => Just(Op::TurnStart),
        3 => Just(Op::TurnEnd),
        4 => Just(Op::StepStart),
        4 => Just(Op::StepEnd),
        5 => Just(Op::Chunk),
        5 => (0u8..3, prop::bool::weighted(0.7)).prop_map(|(calls, cite_chunks)| Op::Assistant { calls, cite_chunks }),
        3 => (0u8..3).prop_map(|call| Op::ToolCall { call }),
        4 => (0u8..3, prop::bool::weighted(0.8)).prop_map(|(call, cite)| Op::ToolResult { call, cite }),
        2 => (0u8..3).prop_map(|call| Op::NotStarted { call }),
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

pub(crate) fn message(id: String, role: &str, content: Value, source: Value) -> Value {
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
            let chunks: Vec<u64> = since_step(s)
                .iter()
                .filter(|e| e.event_type().as_str() == "assistant/chunk")
                .map(Event::seq)
                .collect();
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
            let anchor = first_in_step(s, "tool/call", |d| d["callId"] == json!(id));
            let sources = cite.then(|| vec![anchor.unwrap_or(0) + bump]).filter(|v| v[0] < seq);
            ("tool/result", tool_result_data(sturn, sstep, seq, &id), sources, Some(json!("append")))
        }
        Op::NotStarted { call: c } => {
            let id = call(c);
            let anchor = first_in_step(s, "assistant/message", |d| {
                d["message"]["content"].as_array().is_some_and(|blocks| {
                    blocks.iter().any(|b| b["type"] == json!("tool-call") && b["id"] == json!(id))
                })
            });
            let sources = vec![anchor.unwrap_or(0) + bump];
            let mut data = tool_result_data(sturn, sstep, seq, &id);
            data["error"] = json!({"name": "t", "code": "TOOL_NOT_STARTED"});
            ("tool/result", data, Some(sources).filter(|v| v[0] < seq), Some(json!("append")))
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

/// The events since the last `step/start` of a whole session (empty when
/// none), read off the log itself rather than any fold, so that a fold
/// that forgets something cannot hide it from the check.
fn since_step(s: &Session) -> &[Event] {
    let log = s.complete_events().unwrap_or_default();
    match log.iter().rposition(|e| e.event_type().as_str() == "step/start") {
        Some(at) => &log[at..],
        None => &[],
    }
}

/// Seq of the first event of type `ty` since the last `step/start` whose
/// data satisfies `pick`.
fn first_in_step(s: &Session, ty: &str, pick: impl Fn(&Value) -> bool) -> Option<u64> {
    since_step(s).iter().find_map(|e| {
        let data: Value = serde_json::from_str(e.data()).ok()?;
        (e.event_type().as_str() == ty && pick(&data)).then_some(e.seq())
    })
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
    // The resumed session holds the surface's events, the settings event
    // and the events after its checkpoint; of the events before it, those
    // that left the surface go lazily (`ResidentLog::trim_when_worth`), so
    // at most twice the surface and a few more of them remain.
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
    let missing: Vec<u64> = expected.iter().copied().filter(|s| held.binary_search(s).is_err()).collect();
    prop_assert!(missing.is_empty(), "needed and not resident: {:?}", missing);
    let before = held.iter().filter(|&&s| s < from).count();
    prop_assert!(
        before <= 2 * resumed.surface().len() + 64,
        "{before} events resident before {from}, for a surface of {}",
        resumed.surface().len()
    );
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
    guard: Guard,
) -> Result<Session, TestCaseError> {
    let prefix = Session::from_log_guarded(header.clone(), log[..cut].to_vec(), guard())
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
    let resumed = Session::resume_guarded(header.clone(), read, log[cut..mid].to_vec(), guard())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Some(end) = end else { return Ok(resumed) };
    let read = Checkpoint::from_json(&resumed.checkpoint().to_json())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Session::resume_guarded(header.clone(), read, log[mid..end].to_vec(), guard())
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

/// A guard for each session of a case: none, or the invariants checker.
pub(crate) type Guard = fn() -> Option<Box<dyn AppendGuard>>;

/// Ops for the log, ops after the resume (with whether their batch write
/// fails, and whether the resumed session is [trimmed](Session::trim)
/// after), where to checkpoint, and where to checkpoint again.
pub(crate) type Case =
    (Vec<(Op, bool)>, Vec<((Op, bool), bool, bool)>, prop::sample::Index, Option<prop::sample::Index>);

/// The inputs of one case.
pub(crate) fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(op(), 0..90),
        prop::collection::vec((op(), prop::bool::weighted(0.15), prop::bool::weighted(0.1)), 0..40),
        any::<prop::sample::Index>(),
        prop::option::weighted(0.3, any::<prop::sample::Index>()),
    )
}

/// Appends to `session` the event each op makes of it, where the session
/// accepts it (with no guard, that is any log that keeps sections 1 and 2,
/// broken invariants and all).
pub(crate) fn append_ops(session: &mut Session, ops: &[(Op, bool)]) {
    for (op, noisy) in ops {
        if let Some(e) = candidate(op, *noisy, session) {
            let _ = session.append(e);
        }
    }
}

/// One case: build the log, resume from a checkpoint of a prefix, append
/// to both sessions and compare them after every append.
pub(crate) fn check_case((log_ops, after, cut, again): Case, guard: Guard) -> Result<(), TestCaseError> {
    let header = SessionHeader::new("eq", 7);
    let mut whole = Session::create(header.clone());
    whole.set_guard(guard());
    append_ops(&mut whole, &log_ops);
    let log = whole.events().to_vec();
    let cut = cut.index(log.len() + 1);
    let again = again.map(|i| cut + i.index(log.len() - cut + 1));
    let mut resumed = resume(&header, &log, cut, again, guard)?;
    prop_assert_eq!(resumed.has_guard(), whole.has_guard());
    prop_assert_eq!(resumed.is_complete(), cut == 0 && again.is_none_or(|m| m == 0));
    assert_same(&whole, &resumed)?;
    for ((op, noisy), failing_write, trim) in &after {
        let Some(e) = candidate(op, *noisy, &whole) else { continue };
        if *failing_write {
            // A one-event batch whose store write fails: both roll back.
            let w = whole.append_batch_with(vec![e.clone()], |_| Err::<(), ()>(()));
            let r = resumed.append_batch_with(vec![e], |_| Err::<(), ()>(()));
            let outcome = |r: Result<std::ops::Range<u64>, BatchError<()>>| match r {
                Ok(range) => Ok(range),
                Err(BatchError::Refused(e)) => Err(e.code().to_owned()),
                Err(BatchError::Write(())) => Err("write".to_owned()),
            };
            prop_assert_eq!(outcome(w), outcome(r));
        } else {
            let w = whole.append(e.clone());
            let r = resumed.append(e);
            prop_assert_eq!(code(&w), code(&r), "{:?}", op);
        }
        if *trim {
            // Trimming in place is resuming from a checkpoint taken now.
            resumed.trim();
        }
        assert_same(&whole, &resumed)?;
    }
    Ok(())
}
