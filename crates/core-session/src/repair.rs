//! Crash repair (contract section 5): the events that close a log whose last
//! turn is open, so it is valid and resumable again.

use std::collections::HashSet;

use crate::event::{Event, EventType, SurfaceIntent};
use crate::payload::{
    AssistantMessage, Block, Message, Role, Source, StepEnd, StepStart, ToolCall, ToolError, ToolResult,
    TurnEnd, TurnEndReason, TurnStart,
};

/// `data.error.code` of a closer for a call whose `tool/call` was recorded:
/// it may or may not have run.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
/// `data.error.code` of a closer for a call the model requested but that
/// never started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";

/// Returns the closers to append to `events`, in order, with seqs continuing
/// the log and the last event's time: an error `tool/result` for each
/// unanswered call of the open step, `step/end` if a step is open, and
/// `turn/end` with reason `interrupted`. A balanced log gets nothing. Pure
/// and deterministic.
///
/// `events` may be any part of the log that ends with its last event and
/// holds the open turn from its `turn/start` on (a resumed session's
/// [`resident`](crate::Session::resident) events, say): seqs continue
/// from the last event's.
pub fn repair(events: &[Event]) -> Vec<Event> {
    let Some(open) = OpenTail::find(events) else { return Vec::new() };
    let base = events.last().map_or(0, |e| e.seq() + 1);
    let time = events.last().map_or(0, Event::time);
    let mut closers: Vec<Event> = Vec::new();
    let next = |closers: &Vec<Event>| base + closers.len() as u64;
    let push = |closers: &mut Vec<Event>, event: Result<Event, crate::AppendError>| match event {
        Ok(e) => closers.push(e),
        // Closers are built from typed payloads and cannot be malformed.
        Err(error) => tracing::error!(%error, "repair could not build a closer"),
    };
    if let Some(step) = open.step {
        for call in unanswered_calls(events, open.turn, step, open.step_start) {
            let (code, name, cites, text) = match call.tool_call_seq {
                Some(seq) => (
                    TOOL_OUTCOME_UNKNOWN,
                    "ToolOutcomeUnknown",
                    seq,
                    "The session was interrupted while this tool call ran; its outcome is unknown.",
                ),
                None => (
                    TOOL_NOT_STARTED,
                    "ToolNotStarted",
                    call.requested_by,
                    "The session was interrupted before this tool call started.",
                ),
            };
            let result = ToolResult {
                turn: open.turn,
                step,
                message: Message {
                    id: format!("repair-{}", next(&closers)),
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_call_id: call.id.clone(),
                        is_error: true,
                        content: vec![Block::text(text)],
                    }],
                    source: Source::Tool { call_id: call.id },
                },
                error: Some(ToolError { name: name.into(), code: code.into() }),
            };
            let event =
                Event::surface(next(&closers), time, result, SurfaceIntent::append_citing(vec![cites]));
            push(&mut closers, event);
        }
        let event = Event::log(next(&closers), time, StepEnd { turn: open.turn, step });
        push(&mut closers, event);
    }
    let event =
        Event::log(next(&closers), time, TurnEnd { turn: open.turn, reason: TurnEndReason::Interrupted });
    push(&mut closers, event);
    closers
}

/// Whether `events` ends inside a turn (and so needs repair).
pub fn needs_repair(events: &[Event]) -> bool {
    OpenTail::find(events).is_some()
}

/// The open turn at the end of a log, and its open step if any.
struct OpenTail {
    turn: u64,
    step: Option<u64>,
    /// Index of the open step's `step/start`.
    step_start: usize,
}

impl OpenTail {
    fn find(events: &[Event]) -> Option<OpenTail> {
        let mut open: Option<OpenTail> = None;
        for (i, e) in events.iter().enumerate() {
            match e.event_type() {
                EventType::TurnStart => {
                    if let Ok(t) = e.data_as::<TurnStart>() {
                        open = Some(OpenTail { turn: t.turn, step: None, step_start: i });
                    }
                }
                EventType::TurnEnd => open = None,
                EventType::StepStart => {
                    if let (Some(o), Ok(s)) = (open.as_mut(), e.data_as::<StepStart>()) {
                        o.step = Some(s.step);
                        o.step_start = i;
                    }
                }
                EventType::StepEnd => {
                    if let Some(o) = open.as_mut() {
                        o.step = None;
                    }
                }
                _ => {}
            }
        }
        open
    }
}

struct RequestedCall {
    id: String,
    /// Seq of the `assistant/message` whose `tool-call` block asked for it
    /// (or of the `tool/call` when no message asked).
    requested_by: u64,
    tool_call_seq: Option<u64>,
}

/// Calls requested in the open step without a result yet, in request order.
fn unanswered_calls(events: &[Event], turn: u64, step: u64, step_start: usize) -> Vec<RequestedCall> {
    let mut calls: Vec<RequestedCall> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    let in_step = |t: u64, s: u64| t == turn && s == step;
    for e in &events[step_start..] {
        match e.event_type() {
            EventType::AssistantMessage => {
                let Ok(m) = e.data_as::<AssistantMessage>() else { continue };
                if !in_step(m.turn, m.step) {
                    continue;
                }
                for block in m.message.content {
                    if let Block::ToolCall { id, .. } = block {
                        if !calls.iter().any(|c| c.id == id) {
                            calls.push(RequestedCall { id, requested_by: e.seq(), tool_call_seq: None });
                        }
                    }
                }
            }
            EventType::ToolCall => {
                let Ok(c) = e.data_as::<ToolCall>() else { continue };
                if !in_step(c.turn, c.step) {
                    continue;
                }
                match calls.iter_mut().find(|r| r.id == c.call_id) {
                    Some(r) => {
                        r.tool_call_seq.get_or_insert(e.seq());
                    }
                    None => calls.push(RequestedCall {
                        id: c.call_id,
                        requested_by: e.seq(),
                        tool_call_seq: Some(e.seq()),
                    }),
                }
            }
            EventType::ToolResult => {
                if let Ok(r) = e.data_as::<ToolResult>() {
                    if in_step(r.turn, r.step) {
                        answered.insert(r.call_id().to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    calls.retain(|c| !answered.contains(&c.id));
    calls
}
