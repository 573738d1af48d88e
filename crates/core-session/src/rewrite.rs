//! Planning history rewrites on the surface: which range a compaction may
//! replace, and which tool results may be pruned. Pure functions over a
//! [`Session`]; the agent-loop plugins turn the plans into events.
//!
//! Both plans keep the derived history provider-valid:
//!
//! * a compaction range never splits a tool exchange (an `assistant/message`
//!   with `tool-call` blocks and the `tool/result`s answering it stand on the
//!   same side of the range boundary), so the invariant
//!   `tool-exchange-split` cannot fire;
//! * it never reaches into the open turn's input: the open turn's
//!   `user/message`, and everything after it, stays verbatim;
//! * a prune replaces one `tool/result` by a `tool/result` of the same call
//!   (contract section 2, rule 8), so every call keeps its result.

use std::collections::{HashMap, HashSet};

use crate::event::{Event, EventType, SurfaceIntent, SurfaceOp};
use crate::payload::{AssistantMessage, Block, Message, Role, Source, ToolResult, TurnStart};
use crate::session::Session;

/// A range of the surface a compaction may replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPlan {
    /// The seq of the first shadowed surface entry (a seq, not a position;
    /// it may be a newer summary's).
    pub start: u64,
    /// The seq of the last shadowed surface entry.
    pub end: u64,
    /// Every shadowed seq, in surface order: the summary must cite them all.
    pub shadowed: Vec<u64>,
}

impl CompactionPlan {
    /// The surface intent of the summary event, citing every shadowed seq
    /// plus `extra` (e.g. the plugin's `compaction/start`).
    pub fn intent(&self, extra: &[u64]) -> SurfaceIntent {
        let mut sources: Vec<u64> = extra.to_vec();
        sources.extend(self.shadowed.iter().filter(|s| !extra.contains(s)));
        SurfaceIntent::replace(self.start, self.end, sources)
    }
}

/// Plans a compaction of the oldest surface entries, keeping at least
/// `keep_recent` entries at the tail verbatim. Returns `None` when there is
/// nothing worth compacting (fewer than two entries would be shadowed).
/// The cut never splits a tool call from its result, nor reaches into the
/// open turn's input.
///
/// A hand-written compaction is the plan, a summary, and one append:
///
/// ```
/// use palimpsest_core_session::jsonl::JsonlLog;
/// use palimpsest_core_session::payload::{Message, UserMessage};
/// use palimpsest_core_session::rewrite::plan_compaction;
///
/// let log = include_str!("../test_data/ok/multi-step-tools.jsonl");
/// let mut session = JsonlLog::parse(log.as_bytes())?.into_session()?;
/// let before = session.surface().to_vec();
///
/// let plan = plan_compaction(&session, 2).expect("enough to compact");
/// // Your summary of what `plan.shadowed` says (a model call, usually).
/// let text = "The user asked for two files; both were read.";
/// let summary = UserMessage { turn: None, message: Message::from_plugin("sum-1", "my-compactor", text) };
/// let seq = session.append_surface(1_767_225_700_000, summary, plan.intent(&[]))?;
///
/// // The summary stands where the shadowed entries stood; the rest is kept.
/// assert_eq!(session.surface()[0], seq);
/// assert_eq!(&session.surface()[1..], &before[plan.shadowed.len()..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plan_compaction(session: &Session, keep_recent: usize) -> Option<CompactionPlan> {
    let surface = session.surface();
    let mut cut = surface.len().saturating_sub(keep_recent);
    // Never reach into the open turn's input.
    // Resident events: on a resumed session the open turn is among them
    // (checkpoints are taken at turn boundaries).
    if let Some(open_turn_start) = open_turn_start(session.resident()) {
        if let Some(pos) = surface.iter().position(|&s| s > open_turn_start) {
            cut = cut.min(pos);
        }
    }
    // Move the cut earlier until no tool exchange straddles it.
    let calls = exchange_calls(session);
    while cut > 0 && straddles(surface, &calls, cut) {
        cut -= 1;
    }
    if cut < 2 {
        return None;
    }
    let shadowed = surface[..cut].to_vec();
    Some(CompactionPlan { start: shadowed[0], end: shadowed[cut - 1], shadowed })
}

/// A `tool/result` on the surface worth pruning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneCandidate {
    /// The result's seq.
    pub seq: u64,
    /// The call it answers.
    pub call_id: String,
    /// Characters of text in the result.
    pub chars: usize,
}

/// Tool results on the surface, older than the `keep_recent` newest ones and
/// holding more than `min_chars` characters of text, that were not pruned
/// already. Oldest first.
pub fn plan_pruning(session: &Session, keep_recent: usize, min_chars: usize) -> Vec<PruneCandidate> {
    let results: Vec<&Event> = session
        .surface()
        .iter()
        .filter_map(|&s| session.event(s))
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .collect();
    let old = results.len().saturating_sub(keep_recent);
    results[..old]
        .iter()
        .filter(|e| matches!(e.surface_op(), Some(SurfaceOp::Append)))
        .filter_map(|e| {
            let r = e.data_as::<ToolResult>().ok()?;
            let chars = text_chars(&r.message.content);
            (chars > min_chars).then(|| PruneCandidate {
                seq: e.seq(),
                call_id: r.call_id().to_owned(),
                chars,
            })
        })
        .collect()
}

/// The replacement for a pruned result: the same call, turn and step, a
/// short stub saying what was pruned and where the original is, and the
/// original's error flag. Append it with [`SurfaceIntent::replace`]`(seq, seq, vec![seq])`.
pub fn pruned_result(original: &Event, message_id: String) -> Option<ToolResult> {
    let r = original.data_as::<ToolResult>().ok()?;
    let [Block::ToolResult { tool_call_id, is_error, content }] = r.message.content.as_slice() else {
        return None;
    };
    let chars = text_chars(content);
    let images = content.iter().filter(|b| matches!(b, Block::Image { .. })).count();
    let mut text = format!("[pruned: {chars} characters");
    if images > 0 {
        text.push_str(&format!(" and {images} image(s)"));
    }
    text.push_str(&format!(
        " of tool output; the original is event {} in the session log (`palimpsest explain STORE {}`)]",
        original.seq(),
        original.seq()
    ));
    Some(ToolResult {
        turn: r.turn,
        step: r.step,
        message: Message {
            id: message_id,
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_call_id: tool_call_id.clone(),
                is_error: *is_error,
                content: vec![Block::text(text)],
            }],
            source: Source::Tool { call_id: tool_call_id.clone() },
        },
        error: r.error,
    })
}

/// Characters of text (text, reasoning, nested results) in `blocks`.
pub fn text_chars(blocks: &[Block]) -> usize {
    blocks
        .iter()
        .map(|b| match b {
            Block::Text { text } | Block::Reasoning { text, .. } => text.chars().count(),
            Block::ToolCall { arguments, .. } => arguments.chars().count(),
            Block::ToolResult { content, .. } => text_chars(content),
            Block::Image { .. } => 0,
        })
        .sum()
}

/// Seq of the open turn's `turn/start`, if the log ends inside a turn.
fn open_turn_start(events: &[Event]) -> Option<u64> {
    let mut open = None;
    for e in events {
        match e.event_type() {
            EventType::TurnStart if e.data_as::<TurnStart>().is_ok() => open = Some(e.seq()),
            EventType::TurnEnd => open = None,
            _ => {}
        }
    }
    open
}

/// For each surface entry taking part in a tool exchange, the call ids it
/// carries (requests for an assistant message, the answered id for a result).
fn exchange_calls(session: &Session) -> HashMap<u64, Vec<String>> {
    let mut calls = HashMap::new();
    for &seq in session.surface() {
        let Some(e) = session.event(seq) else { continue };
        let ids: Vec<String> = match e.event_type() {
            EventType::AssistantMessage => e
                .data_as::<AssistantMessage>()
                .map(|m| {
                    m.message
                        .content
                        .into_iter()
                        .filter_map(|b| match b {
                            Block::ToolCall { id, .. } => Some(id),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            EventType::ToolResult => {
                e.data_as::<ToolResult>().map(|r| vec![r.call_id().to_owned()]).unwrap_or_default()
            }
            _ => Vec::new(),
        };
        if !ids.is_empty() {
            calls.insert(seq, ids);
        }
    }
    calls
}

/// Whether some call id has surface entries on both sides of `cut`.
fn straddles(surface: &[u64], calls: &HashMap<u64, Vec<String>>, cut: usize) -> bool {
    let before: HashSet<&str> =
        surface[..cut].iter().filter_map(|s| calls.get(s)).flatten().map(String::as_str).collect();
    surface[cut..].iter().filter_map(|s| calls.get(s)).flatten().any(|id| before.contains(id.as_str()))
}
