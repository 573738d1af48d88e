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
///
/// Seqs are `u64`: when the closers cannot all be numbered, that is when
/// the last one's seq would pass `u64::MAX` (the open turn's last event is
/// at `u64::MAX`, or close enough that the closers do not fit below it),
/// there is no seq to give them and repair returns **no closers** (and
/// logs an error), never some of them and never wrapped seqs. No log this
/// crate builds gets there: a session's seqs count its events from 0.
/// [`needs_repair`] still says such a log ends inside a turn.
pub fn repair(events: &[Event]) -> Vec<Event> {
    let Some(open) = OpenTail::find(events) else { return Vec::new() };
    let calls = match open.step {
        Some(step) => unanswered_calls(events, open.turn, step, open.step_start),
        None => Vec::new(),
    };
    // Every closer's seq, the last one's included, must be a u64.
    let count = calls.len() as u64 + u64::from(open.step.is_some()) + 1;
    let base = events.last().map_or(Some(0), |e| e.seq().checked_add(1));
    let Some(base) = base.filter(|base| base.checked_add(count - 1).is_some()) else {
        let last_seq = events.last().map(Event::seq);
        tracing::error!(?last_seq, closers = count, "repair cannot number its closers past u64::MAX");
        return Vec::new();
    };
    let time = events.last().map_or(0, Event::time);
    let mut closers: Vec<Event> = Vec::with_capacity(calls.len() + 2);
    let next = |closers: &Vec<Event>| base + closers.len() as u64;
    let push = |closers: &mut Vec<Event>, event: Result<Event, crate::AppendError>| match event {
        Ok(e) => closers.push(e),
        // Closers are built from typed payloads and cannot be malformed.
        Err(error) => tracing::error!(%error, "repair could not build a closer"),
    };
    if let Some(step) = open.step {
        for call in calls {
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

#[cfg(test)]
mod tests {
    //! Closers are never numbered past `u64::MAX`.

    use super::*;
    use crate::payload::{StepStart, TurnStart};

    fn turn_start(seq: u64) -> Event {
        Event::log(seq, 5, TurnStart { turn: 1 }).unwrap()
    }

    #[test]
    fn closers_that_would_pass_u64_max_are_not_built() {
        // A turn/start at the last seq: the turn/end would be u64::MAX + 1.
        // (Before, this was "attempt to add with overflow" in debug and a
        // turn/end at seq 0 in release.)
        let open = [turn_start(u64::MAX)];
        assert!(needs_repair(&open));
        assert_eq!(repair(&open), Vec::<Event>::new());
        // An open step needs two closers; the second would not fit.
        let step = Event::log(u64::MAX, 5, StepStart { turn: 1, step: 1 }).unwrap();
        let open = [turn_start(u64::MAX - 1), step];
        assert_eq!(repair(&open), Vec::<Event>::new());
    }

    #[test]
    fn closers_up_to_u64_max_are_built() {
        let closers = repair(&[turn_start(u64::MAX - 1)]);
        let seqs: Vec<u64> = closers.iter().map(Event::seq).collect();
        assert_eq!(seqs, [u64::MAX]);
        assert_eq!(closers[0].event_type(), &EventType::TurnEnd);
        let step = Event::log(u64::MAX - 2, 5, StepStart { turn: 1, step: 1 }).unwrap();
        let closers = repair(&[turn_start(u64::MAX - 3), step]);
        let seqs: Vec<u64> = closers.iter().map(Event::seq).collect();
        assert_eq!(seqs, [u64::MAX - 1, u64::MAX]);
    }
}
