//! The incremental state machine behind both [`check_log`](crate::check_log)
//! and [`InvariantGuard`](crate::InvariantGuard).
//!
//! Same two-phase shape as the `SurfaceManager`: [`Checker::check`] reads
//! the state built so far and a candidate event and changes nothing;
//! [`Checker::commit`] folds the event in once it has joined the log.
//!
//! The state has two independent parts:
//!
//! - [`Brackets`]: the open turn and step, the last turn and step numbers,
//!   and, for the open step, the `tool/call` and requesting
//!   `assistant/message` seqs by call id. It depends only on the log.
//! - [`SurfaceTools`]: which surface entries hold one side of a tool
//!   exchange (a requesting `assistant/message` or a `tool/result`), indexed
//!   by call id. It depends only on the surface.
//!
//! # Complexity
//!
//! Checking or committing an event is O(1) apart from parsing its own
//! `data`, with three bounded exceptions: an appended `assistant/message`
//! reads each event it cites (O(cited)); a replace costs O(range) to check
//! and O(surface) to commit, like the replace itself in the `SurfaceManager`.
//! [`Checker::rebuild`] scans the log's types, parses the events of the last
//! turn, and parses the surface entries; [`Checker::restore`] (a session
//! resumed from a checkpoint) takes the brackets from the checkpoint and
//! parses the surface entries.

use std::collections::{HashMap, HashSet};

use palimpsest_core_session::repair::TOOL_NOT_STARTED;
use palimpsest_core_session::{Event, EventType, SessionView, SurfaceOp, TurnState};

use crate::codes::*;
use crate::Violation;

/// Up to this many cited entries of a replace, the checker looks each up
/// on the surface by a scan instead of hashing the whole surface.
const FEW_CANDIDATES: usize = 8;

/// What the checker needs to know about one event, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fact {
    TurnStart {
        turn: u64,
    },
    TurnEnd {
        turn: u64,
    },
    StepStart {
        turn: u64,
        step: u64,
    },
    StepEnd {
        turn: u64,
        step: u64,
    },
    Chunk {
        turn: u64,
        step: u64,
    },
    /// `calls`: the ids of its `tool-call` blocks, in order.
    Assistant {
        turn: u64,
        step: u64,
        calls: Vec<String>,
    },
    ToolCall {
        turn: u64,
        step: u64,
        call_id: String,
    },
    /// `not_started`: a repair closer with `data.error.code == TOOL_NOT_STARTED`.
    ToolResult {
        turn: u64,
        step: u64,
        call_id: String,
        not_started: bool,
    },
    /// `session/settings`.
    Settings,
    /// Anything the invariants do not look at.
    Other,
}

impl Fact {
    /// Reads only the fields the invariants need, borrowing strings and
    /// skipping message text unparsed: dev mode runs this on every append,
    /// so it must not cost a full typed parse of each payload.
    pub(crate) fn of(event: &Event) -> Fact {
        let data = event.data();
        let fact = match event.event_type() {
            EventType::TurnStart | EventType::TurnEnd => {
                lite::turn(data).map(|turn| match event.event_type() {
                    EventType::TurnStart => Fact::TurnStart { turn },
                    _ => Fact::TurnEnd { turn },
                })
            }
            EventType::StepStart => lite::step(data).map(|(turn, step)| Fact::StepStart { turn, step }),
            EventType::StepEnd => lite::step(data).map(|(turn, step)| Fact::StepEnd { turn, step }),
            EventType::AssistantChunk => lite::step(data).map(|(turn, step)| Fact::Chunk { turn, step }),
            EventType::AssistantMessage => serde_json::from_str::<lite::WithMessage<'_>>(data)
                .map(|d| Fact::Assistant { turn: d.turn, step: d.step, calls: d.message.tool_call_ids() }),
            EventType::ToolCall => serde_json::from_str::<lite::Call<'_>>(data).map(|d| Fact::ToolCall {
                turn: d.turn,
                step: d.step,
                call_id: d.call_id.into_owned(),
            }),
            EventType::ToolResult => {
                serde_json::from_str::<lite::WithMessage<'_>>(data).map(|d| Fact::ToolResult {
                    turn: d.turn,
                    step: d.step,
                    call_id: d.message.result_call_id(),
                    not_started: d.error.is_some_and(|e| e.code == TOOL_NOT_STARTED),
                })
            }
            EventType::SessionSettings => Ok(Fact::Settings),
            _ => Ok(Fact::Other),
        };
        // Core payloads were checked when the event was built, so this does
        // not fail; if it ever did, the event is ignored rather than panicking.
        fact.unwrap_or_else(|error| {
            tracing::warn!(seq = event.seq(), %error, "invariants: could not read a core payload");
            Fact::Other
        })
    }

    /// The side of a tool exchange this event holds when on the surface.
    fn side(&self) -> Option<Side> {
        match self {
            Fact::Assistant { calls, .. } if !calls.is_empty() => Some(Side::Calls(calls.clone())),
            Fact::ToolResult { call_id, .. } => Some(Side::Result(call_id.clone())),
            _ => None,
        }
    }
}

/// `turn 2 step 1`, for messages.
fn at(turn: u64, step: u64) -> String {
    format!("turn {turn} step {step}")
}

/// The step currently open, and what it has recorded so far.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OpenStep {
    turn: u64,
    step: u64,
    /// Call id -> seq of the first `tool/call` of this step for it.
    tool_calls: HashMap<String, u64>,
    /// Call id -> seq of the first `assistant/message` of this step with a
    /// `tool-call` block for it.
    requests: HashMap<String, u64>,
    /// Seqs of the `assistant/chunk`s naming this step, ascending: an
    /// assistant message citing them needs no re-parse.
    chunks: Vec<u64>,
}

impl OpenStep {
    fn new(turn: u64, step: u64) -> OpenStep {
        OpenStep { turn, step, tool_calls: HashMap::new(), requests: HashMap::new(), chunks: Vec::new() }
    }

    fn is(&self, turn: u64, step: u64) -> bool {
        self.turn == turn && self.step == step
    }
}

/// Turn and step brackets: a fold over the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Brackets {
    open_turn: Option<u64>,
    /// Number of the last `turn/start` (0 before the first).
    last_turn: u64,
    open_step: Option<OpenStep>,
    /// Number of the last `step/start` of the open turn (0 before the first).
    last_step: u64,
}

impl Brackets {
    /// The brackets a fold of the whole log reaches, as core-session's own
    /// fold of the same log recorded them in a checkpoint ([`TurnState`]:
    /// the same rules, field for field).
    fn from_turns(turns: &TurnState) -> Brackets {
        let open_step = turns.open_step.as_ref().map(|o| OpenStep {
            turn: o.turn,
            step: o.step,
            tool_calls: o.tool_calls.iter().cloned().collect(),
            requests: o.requests.iter().cloned().collect(),
            chunks: o.chunks.clone(),
        });
        Brackets {
            open_turn: turns.open_turn,
            last_turn: turns.started,
            open_step,
            last_step: turns.last_step,
        }
    }

    fn check(&self, view: SessionView<'_>, event: &Event, fact: &Fact, out: &mut Vec<Violation>) {
        let seq = event.seq();
        let mut push = |code: &'static str, message: String| out.push(Violation { code, seq, message });
        let appended = event.surface_op() == Some(SurfaceOp::Append);
        match fact {
            Fact::TurnStart { turn } => {
                if let Some(open) = self.open_turn {
                    push(TURN_ALREADY_OPEN, format!("turn/start {turn} while turn {open} is open"));
                }
                let expected = self.last_turn.saturating_add(1);
                if *turn != expected {
                    push(TURN_OUT_OF_ORDER, format!("turn/start {turn}, expected turn {expected}"));
                }
            }
            Fact::TurnEnd { turn } => {
                match self.open_turn {
                    None => push(TURN_END_MISMATCH, format!("turn/end {turn} while no turn is open")),
                    Some(open) if open != *turn => {
                        push(TURN_END_MISMATCH, format!("turn/end {turn} while turn {open} is open"))
                    }
                    Some(_) => {}
                }
                if let Some(step) = &self.open_step {
                    push(
                        TURN_END_STEP_OPEN,
                        format!("turn/end {turn} while {} is open", at(step.turn, step.step)),
                    );
                }
            }
            Fact::StepStart { turn, step } => {
                match self.open_turn {
                    None => {
                        push(STEP_OUTSIDE_TURN, format!("step/start names turn {turn}, but no turn is open"))
                    }
                    Some(open) if open != *turn => push(
                        STEP_OUTSIDE_TURN,
                        format!("step/start names turn {turn}, but turn {open} is open"),
                    ),
                    Some(_) => {}
                }
                if let Some(open) = &self.open_step {
                    push(
                        STEP_ALREADY_OPEN,
                        format!("step/start {} while {} is open", at(*turn, *step), at(open.turn, open.step)),
                    );
                }
                // The order is judged within the open turn; a step naming
                // another turn is already step-outside-turn.
                let expected = self.last_step.saturating_add(1);
                if self.open_turn == Some(*turn) && *step != expected {
                    push(
                        STEP_OUT_OF_ORDER,
                        format!("step/start {step} in turn {turn}, expected step {expected}"),
                    );
                }
            }
            Fact::StepEnd { turn, step } | Fact::Chunk { turn, step } | Fact::ToolCall { turn, step, .. } => {
                self.in_step(event, *turn, *step, &mut push);
            }
            Fact::Assistant { turn, step, .. } => {
                self.in_step(event, *turn, *step, &mut push);
                if appended {
                    let open = self.open_step.as_ref().filter(|o| o.is(*turn, *step));
                    check_assistant_sources(view, event, *turn, *step, open, &mut push);
                }
            }
            Fact::ToolResult { turn, step, call_id, not_started } if appended => {
                self.in_step(event, *turn, *step, &mut push);
                self.check_tool_result(event, call_id, *not_started, &mut push);
            }
            Fact::Settings => {
                if let Some(open) = &self.open_step {
                    push(
                        SETTINGS_INSIDE_STEP,
                        format!(
                            "session/settings while {} is open; settings change between model requests",
                            at(open.turn, open.step)
                        ),
                    );
                }
            }
            Fact::ToolResult { .. } | Fact::Other => {}
        }
    }

    /// `step-event-outside-step`.
    fn in_step(&self, event: &Event, turn: u64, step: u64, push: &mut impl FnMut(&'static str, String)) {
        match &self.open_step {
            Some(open) if open.is(turn, step) => {}
            Some(open) => push(
                STEP_EVENT_OUTSIDE_STEP,
                format!(
                    "{} names {}, but the open step is {}",
                    event.event_type(),
                    at(turn, step),
                    at(open.turn, open.step)
                ),
            ),
            None => push(
                STEP_EVENT_OUTSIDE_STEP,
                format!("{} names {}, but no step is open", event.event_type(), at(turn, step)),
            ),
        }
    }

    /// `tool-result-without-call` and `tool-result-source-mismatch` for an
    /// appended `tool/result`.
    fn check_tool_result(
        &self,
        event: &Event,
        call_id: &str,
        not_started: bool,
        push: &mut impl FnMut(&'static str, String),
    ) {
        let open = self.open_step.as_ref();
        let call = open.and_then(|s| s.tool_calls.get(call_id)).copied();
        // A TOOL_NOT_STARTED closer stands in for a tool/call that never
        // happened: its anchor is the assistant/message that requested it.
        let request = if not_started { open.and_then(|s| s.requests.get(call_id)).copied() } else { None };
        let Some(anchor) = request.or(call) else {
            let message = if not_started {
                format!(
                    "tool/result answers call {call_id:?}: a {TOOL_NOT_STARTED} closer, but no assistant/message \
                     of the open step requested it and it has no tool/call there"
                )
            } else {
                format!("tool/result answers call {call_id:?}, which has no tool/call in the open step")
            };
            push(TOOL_RESULT_WITHOUT_CALL, message);
            return;
        };
        if let Some(sources) = event.source_event_seqs() {
            if sources != [anchor] {
                let what = if request.is_some() {
                    format!("the assistant/message that requested call {call_id:?}")
                } else {
                    format!("its tool/call for call {call_id:?}")
                };
                push(
                    TOOL_RESULT_SOURCE_MISMATCH,
                    format!("tool/result cites {sources:?}; it must cite exactly [{anchor}], {what}"),
                );
            }
        }
    }

    fn commit(&mut self, seq: u64, fact: &Fact) {
        match fact {
            Fact::TurnStart { turn } => {
                self.open_turn = Some(*turn);
                self.last_turn = *turn;
                self.open_step = None;
                self.last_step = 0;
            }
            Fact::TurnEnd { .. } => {
                self.open_turn = None;
                self.open_step = None;
                self.last_step = 0;
            }
            Fact::StepStart { turn, step } => {
                if self.open_turn == Some(*turn) {
                    self.last_step = *step;
                }
                self.open_step = Some(OpenStep::new(*turn, *step));
            }
            Fact::StepEnd { .. } => self.open_step = None,
            Fact::Assistant { turn, step, calls } => {
                if let Some(open) = self.open_step.as_mut().filter(|s| s.is(*turn, *step)) {
                    for id in calls {
                        open.requests.entry(id.clone()).or_insert(seq);
                    }
                }
            }
            Fact::ToolCall { turn, step, call_id } => {
                if let Some(open) = self.open_step.as_mut().filter(|s| s.is(*turn, *step)) {
                    open.tool_calls.entry(call_id.clone()).or_insert(seq);
                }
            }
            Fact::Chunk { turn, step } => {
                if let Some(open) = self.open_step.as_mut().filter(|s| s.is(*turn, *step)) {
                    open.chunks.push(seq);
                }
            }
            Fact::ToolResult { .. } | Fact::Settings | Fact::Other => {}
        }
    }
}

/// `assistant-sources-not-chunks` for an appended `assistant/message`.
fn check_assistant_sources(
    view: SessionView<'_>,
    event: &Event,
    turn: u64,
    step: u64,
    open: Option<&OpenStep>,
    push: &mut impl FnMut(&'static str, String),
) {
    let Some(sources) = event.source_event_seqs() else { return };
    let mut bad: Vec<String> = Vec::new();
    for &cited in sources {
        // Fast path: a chunk of this (open) step, known without parsing.
        if open.is_some_and(|o| o.chunks.binary_search(&cited).is_ok()) {
            continue;
        }
        let Some(e) = view.event(cited) else {
            // A cited seq is below the message's own (section 1), so it is
            // in the log; a session that does not hold its whole log (resumed
            // or trimmed) no longer holds it. Every chunk of the open step
            // is known, so citing this event from the open step is wrong
            // whatever it is; from another step (already a step event
            // outside its step) it cannot be judged, and is not.
            if open.is_some() {
                bad.push(format!("{cited} (not an assistant/chunk of this step)"));
            }
            continue;
        };
        if *e.event_type() != EventType::AssistantChunk {
            bad.push(format!("{cited} (a {})", e.event_type()));
            continue;
        }
        match Fact::of(e) {
            Fact::Chunk { turn: t, step: s } if (t, s) == (turn, step) => {}
            Fact::Chunk { turn: t, step: s } => {
                bad.push(format!("{cited} (an assistant/chunk of {})", at(t, s)))
            }
            _ => bad.push(format!("{cited} (an unreadable assistant/chunk)")),
        }
    }
    if !bad.is_empty() {
        push(
            ASSISTANT_SOURCES_NOT_CHUNKS,
            format!(
                "assistant/message of {} cites {}; it may cite only the assistant/chunk events of its own step",
                at(turn, step),
                bad.join(", ")
            ),
        );
    }
}

/// The side of a tool exchange a surface entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Side {
    /// An `assistant/message` requesting these calls.
    Calls(Vec<String>),
    /// A `tool/result` answering this call.
    Result(String),
}

impl Side {
    fn ids(&self) -> &[String] {
        match self {
            Side::Calls(ids) => ids,
            Side::Result(id) => std::slice::from_ref(id),
        }
    }
}

/// Which surface entries hold one side of a tool exchange: a fold over the
/// surface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SurfaceTools {
    by_seq: HashMap<u64, Side>,
    /// Call id -> seqs of surface `assistant/message`s requesting it.
    calls: HashMap<String, Vec<u64>>,
    /// Call id -> seqs of surface `tool/result`s answering it.
    results: HashMap<String, Vec<u64>>,
}

impl SurfaceTools {
    fn add(&mut self, seq: u64, side: Side) {
        match &side {
            Side::Calls(ids) => {
                for id in ids {
                    self.calls.entry(id.clone()).or_default().push(seq);
                }
            }
            Side::Result(id) => self.results.entry(id.clone()).or_default().push(seq),
        }
        self.by_seq.insert(seq, side);
    }

    fn remove(&mut self, seq: u64) {
        let Some(side) = self.by_seq.remove(&seq) else { return };
        let map = match side {
            Side::Calls(_) => &mut self.calls,
            Side::Result(_) => &mut self.results,
        };
        for id in side.ids() {
            if let Some(seqs) = map.get_mut(id) {
                seqs.retain(|&s| s != seq);
                if seqs.is_empty() {
                    map.remove(id);
                }
            }
        }
    }

    fn from_surface(view: SessionView<'_>) -> SurfaceTools {
        let mut tools = SurfaceTools::default();
        for &seq in view.surface {
            if let Some(side) = view.event(seq).and_then(|e| Fact::of(e).side()) {
                tools.add(seq, side);
            }
        }
        tools
    }

    /// `tool-exchange-split`: judged on the surface as it will be after the
    /// candidate replace, for the calls whose exchange the range touches.
    fn check(&self, view: SessionView<'_>, event: &Event, fact: &Fact, out: &mut Vec<Violation>) {
        let Some(op @ SurfaceOp::Replace { .. }) = event.surface_op() else { return };
        let shadowed = view.shadowed_by(op);
        // In order of first touch (the findings' order), each call once: a
        // compaction touches hundreds of calls, so membership is a set.
        let mut touched: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for seq in shadowed {
            for id in self.by_seq.get(seq).map(Side::ids).unwrap_or_default() {
                if seen.insert(id.as_str()) {
                    touched.push(id);
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        let shadowed: HashSet<u64> = shadowed.iter().copied().collect();
        let added = fact.side();
        let seq = event.seq();
        for id in touched {
            let split = |map: &HashMap<String, Vec<u64>>, adds: bool| {
                let before = map.get(id).map(Vec::as_slice).unwrap_or_default();
                let taken: Vec<u64> = before.iter().copied().filter(|s| shadowed.contains(s)).collect();
                let mut left: Vec<u64> = before.iter().copied().filter(|s| !shadowed.contains(s)).collect();
                if adds {
                    left.push(seq);
                }
                (taken, left)
            };
            let adds_call = matches!(&added, Some(Side::Calls(ids)) if ids.iter().any(|i| i == id));
            let adds_result = matches!(&added, Some(Side::Result(i)) if i == id);
            let (calls_taken, calls_left) = split(&self.calls, adds_call);
            let (results_taken, results_left) = split(&self.results, adds_result);
            if !calls_taken.is_empty() && calls_left.is_empty() && !results_left.is_empty() {
                out.push(Violation {
                    code: TOOL_EXCHANGE_SPLIT,
                    seq,
                    message: format!(
                        "the replace takes assistant/message {calls_taken:?} requesting call {id:?} off the \
                         surface but leaves its tool/result {results_left:?} on it"
                    ),
                });
            }
            if !results_taken.is_empty() && results_left.is_empty() && !calls_left.is_empty() {
                out.push(Violation {
                    code: TOOL_EXCHANGE_SPLIT,
                    seq,
                    message: format!(
                        "the replace takes tool/result {results_taken:?} of call {id:?} off the surface but \
                         leaves assistant/message {calls_left:?} requesting it on it"
                    ),
                });
            }
        }
    }

    /// `after` is the session with `event` committed.
    fn commit(&mut self, after: SessionView<'_>, event: &Event, fact: &Fact) {
        match event.surface_op() {
            None => return,
            Some(SurfaceOp::Append) => {}
            Some(SurfaceOp::Replace { start: op_start, end: op_end }) => {
                // Rule 7: a replace cites every entry it shadows, so the
                // shadowed entries we track are among the cited ones that are
                // no longer on the surface.
                let cited = event.source_event_seqs().unwrap_or_default();
                let candidates: Vec<u64> =
                    cited.iter().copied().filter(|s| self.by_seq.contains_key(s)).collect();
                // A pruning replace has one candidate, and comes every few
                // turns while the surface grows: hashing the whole surface
                // for each made a session that prunes 5x slower to check.
                // A few scans of the surface are cheaper than that; a
                // compaction, with many candidates, hashes it once.
                let gone: Vec<u64> = if candidates.len() <= FEW_CANDIDATES {
                    // The range's ends left the surface; for the rest, look.
                    let ends = [op_start, op_end];
                    candidates
                        .into_iter()
                        .filter(|s| ends.contains(s) || !after.surface.contains(s))
                        .collect()
                } else {
                    let on_surface: HashSet<u64> = after.surface.iter().copied().collect();
                    candidates.into_iter().filter(|s| !on_surface.contains(s)).collect()
                };
                for seq in gone {
                    self.remove(seq);
                }
            }
        }
        if let Some(side) = fact.side() {
            self.add(event.seq(), side);
        }
    }
}

/// The whole incremental state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Checker {
    brackets: Brackets,
    tools: SurfaceTools,
}

impl Checker {
    /// Every violation `candidate` would commit, in a fixed order, changing
    /// nothing. `view` is the session before the candidate.
    pub(crate) fn check(&self, view: SessionView<'_>, candidate: &Event) -> Vec<Violation> {
        self.check_fact(view, candidate, &Fact::of(candidate))
    }

    /// [`Checker::check`] with the candidate's facts already read.
    pub(crate) fn check_fact(&self, view: SessionView<'_>, candidate: &Event, fact: &Fact) -> Vec<Violation> {
        let mut out = Vec::new();
        self.brackets.check(view, candidate, fact, &mut out);
        self.tools.check(view, candidate, fact, &mut out);
        out
    }

    /// Folds in `event`, which is now the last event of `after`.
    pub(crate) fn commit(&mut self, after: SessionView<'_>, event: &Event) {
        self.commit_fact(after, event, &Fact::of(event));
    }

    /// [`Checker::commit`] with the event's facts already read.
    pub(crate) fn commit_fact(&mut self, after: SessionView<'_>, event: &Event, fact: &Fact) {
        self.brackets.commit(event.seq(), fact);
        self.tools.commit(after, event, fact);
    }

    /// The state for `view`, built from scratch: the brackets from the log,
    /// the tool exchanges from the surface.
    pub(crate) fn rebuild(view: SessionView<'_>) -> Checker {
        // A turn/start resets every bracket field, so only the events from
        // the last one on matter (a scan of types, no parsing before it).
        let from = view.events.iter().rposition(|e| *e.event_type() == EventType::TurnStart).unwrap_or(0);
        let mut brackets = Brackets::default();
        for event in &view.events[from..] {
            // Results and plugin events never move a bracket: skip parsing
            // them. (Chunks are remembered by the open step.)
            if matches!(event.event_type(), EventType::ToolResult | EventType::Plugin(_)) {
                continue;
            }
            brackets.commit(event.seq(), &Fact::of(event));
        }
        Checker { brackets, tools: SurfaceTools::from_surface(view) }
    }

    /// The state for `view`, a session resumed from a checkpoint that does
    /// not hold its log: the brackets from `turns` (the fold of the whole
    /// log), the tool exchanges from the surface, whose events it holds.
    pub(crate) fn restore(view: SessionView<'_>, turns: &TurnState) -> Checker {
        Checker { brackets: Brackets::from_turns(turns), tools: SurfaceTools::from_surface(view) }
    }
}

/// Borrowing views of the core payloads: just the fields the invariants
/// read. Unknown and unread keys (message text, chunk contents) are skipped
/// without being copied.
mod lite {
    use std::borrow::Cow;

    use serde::Deserialize;

    #[derive(Deserialize)]
    pub(super) struct Turn {
        pub(super) turn: u64,
    }

    #[derive(Deserialize)]
    pub(super) struct Step {
        pub(super) turn: u64,
        pub(super) step: u64,
    }

    /// `data.turn`: read straight off the front when the payload starts
    /// `{"turn":N` as serde writes it, else parsed ([`Turn`]).
    pub(super) fn turn(data: &str) -> Result<u64, serde_json::Error> {
        match front(data) {
            Some((turn, _)) => Ok(turn),
            None => serde_json::from_str::<Turn>(data).map(|d| d.turn),
        }
    }

    /// `data.turn` and `data.step`: read straight off the front when the
    /// payload starts `{"turn":N,"step":M` as serde writes it (chunks, 80%
    /// of a log, then skip their text unread), else parsed ([`Step`]).
    pub(super) fn step(data: &str) -> Result<(u64, u64), serde_json::Error> {
        match front(data) {
            Some((turn, Some(step))) => Ok((turn, step)),
            _ => serde_json::from_str::<Step>(data).map(|d| (d.turn, d.step)),
        }
    }

    /// `{"turn":N` and, if it follows, `,"step":M`, each number a plain
    /// JSON integer that fits a u64 and ends at `,` or `}`; `None` for any
    /// other start. The payload of an [`Event`](palimpsest_core_session::Event)
    /// is valid JSON with no key twice (checked when it was built), so
    /// these are the values serde would read.
    pub(super) fn front(data: &str) -> Option<(u64, Option<u64>)> {
        let rest = data.as_bytes().strip_prefix(br#"{"turn":"#)?;
        let (turn, rest) = integer(rest)?;
        match rest.first()? {
            b'}' => Some((turn, None)),
            b',' => match rest.strip_prefix(br#","step":"#) {
                None => Some((turn, None)),
                Some(rest) => {
                    let (step, rest) = integer(rest)?;
                    matches!(rest.first()?, b',' | b'}').then_some((turn, Some(step)))
                }
            },
            _ => None,
        }
    }

    /// A JSON integer at the start of `bytes` (no sign, fraction or
    /// exponent: those end it early and make the caller give up), and the
    /// bytes after it.
    fn integer(bytes: &[u8]) -> Option<(u64, &[u8])> {
        let len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let digits = &bytes[..len];
        if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
            return None;
        }
        let mut n: u64 = 0;
        for &d in digits {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        Some((n, &bytes[len..]))
    }

    #[derive(Deserialize)]
    pub(super) struct Call<'a> {
        pub(super) turn: u64,
        pub(super) step: u64,
        #[serde(rename = "callId", borrow)]
        pub(super) call_id: Cow<'a, str>,
    }

    #[derive(Deserialize)]
    pub(super) struct WithMessage<'a> {
        pub(super) turn: u64,
        pub(super) step: u64,
        #[serde(borrow)]
        pub(super) message: Message<'a>,
        #[serde(default, borrow)]
        pub(super) error: Option<Error<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Message<'a> {
        #[serde(borrow)]
        content: Vec<Block<'a>>,
    }

    #[derive(Deserialize)]
    struct Block<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
        #[serde(default, borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(rename = "toolCallId", default, borrow)]
        tool_call_id: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Error<'a> {
        #[serde(borrow)]
        pub(super) code: Cow<'a, str>,
    }

    impl Message<'_> {
        /// Ids of the `tool-call` blocks, in order, without repeats.
        pub(super) fn tool_call_ids(&self) -> Vec<String> {
            let mut ids: Vec<String> = Vec::new();
            for b in &self.content {
                if let (true, Some(id)) = (b.kind == "tool-call", &b.id) {
                    if !ids.iter().any(|x| x == id) {
                        ids.push(id.to_string());
                    }
                }
            }
            ids
        }

        /// The call a `tool/result` answers (its one `tool-result` block's id;
        /// event validation made it equal to the source's `callId`).
        pub(super) fn result_call_id(&self) -> String {
            self.content
                .iter()
                .find(|b| b.kind == "tool-result")
                .and_then(|b| b.tool_call_id.as_deref())
                .unwrap_or_default()
                .to_owned()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The front reader agrees with serde wherever it answers, and
        /// gives up (so serde decides) on every other shape.
        #[test]
        fn the_front_reader_reads_what_serde_reads_or_nothing() {
            let cases = [
                (r#"{"turn":1}"#, Some((1, None))),
                (r#"{"turn":0,"step":0}"#, Some((0, Some(0)))),
                (
                    r#"{"turn":12,"step":3,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
                    Some((12, Some(3))),
                ),
                (r#"{"turn":18446744073709551615,"step":1}"#, Some((u64::MAX, Some(1)))),
                (r#"{"turn":2,"message":{"step":9}}"#, Some((2, None))),
                (r#"{"turn":2,"stepx":4,"step":5}"#, Some((2, None))),
                (r#"{"turn":18446744073709551616,"step":1}"#, None),
                (r#"{"turn":1.5,"step":1}"#, None),
                (r#"{"turn":1e2,"step":1}"#, None),
                (r#"{"turn":-1,"step":1}"#, None),
                (r#"{"turn":01,"step":1}"#, None),
                (r#"{"turn":1,"step":2.0}"#, None),
                (r#"{ "turn":1,"step":2}"#, None),
                (r#"{"step":2,"turn":1}"#, None),
                (r#"{"turn":"1"}"#, None),
            ];
            for (data, expected) in cases {
                assert_eq!(front(data), expected, "{data}");
                let by_serde = serde_json::from_str::<Step>(data).ok().map(|d| (d.turn, d.step));
                let by_front = match front(data) {
                    Some((turn, Some(step))) => Some((turn, step)),
                    _ => by_serde,
                };
                assert_eq!(step(data).ok(), by_front, "{data}");
                assert_eq!(step(data).ok(), by_serde, "{data}");
                let turn_by_serde = serde_json::from_str::<Turn>(data).ok().map(|d| d.turn);
                assert_eq!(turn(data).ok(), turn_by_serde, "{data}");
            }
        }
    }
}
