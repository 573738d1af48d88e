//! The surface: the ordered seqs of the events whose messages the model sees,
//! and the rules that relate a replace to it (contract section 2, rules 5–8).
//!
//! The [`SurfaceManager`] is a fold over the log, kept incrementally. It
//! works in two phases so that a refused event changes nothing: [`plan`]
//! checks a candidate against the current surface without touching it, and
//! [`apply`] performs the plan once the event is committed to the log.
//!
//! # Complexity
//!
//! An append is O(1). A replace is O(surface length): it finds `start` and
//! `end` by a linear scan (a `Vec<u64>` scan is a few nanoseconds per entry
//! and replaces are rare: compaction and pruning), then splices. Reading the
//! surface is O(1): it is a slice of the vector.
//!
//! [`plan`]: SurfaceManager::plan
//! [`apply`]: SurfaceManager::apply

use std::collections::HashSet;

use crate::error::AppendError;
use crate::event::{Event, EventType, SurfaceOp};
use crate::payload::ToolResult;
use crate::resident::find;

/// What an event will do to the surface, as checked by [`SurfaceManager::plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurfaceStep {
    /// The event stays off the surface.
    None,
    /// Push the event's seq.
    Append,
    /// Replace the entries at positions `start_pos..=end_pos`.
    Replace {
        /// Surface position of `start`.
        start_pos: usize,
        /// Surface position of `end`.
        end_pos: usize,
    },
}

/// How to take back one [`SurfaceManager::apply`] (used to roll back a batch
/// whose store write failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SurfaceUndo {
    None,
    Pop,
    Unreplace { pos: usize, removed: Vec<u64> },
}

/// The incremental surface: one ordered `Vec` of seqs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurfaceManager {
    seqs: Vec<u64>,
    /// Number of log events folded in so far (the next seq it expects).
    synced: u64,
}

impl SurfaceManager {
    /// An empty surface, for an empty log.
    pub fn new() -> SurfaceManager {
        SurfaceManager::default()
    }

    /// Folds a whole log from scratch, stopping at the first refused event.
    pub fn fold(log: &[Event]) -> Result<SurfaceManager, AppendError> {
        let mut m = SurfaceManager::new();
        m.sync(log)?;
        Ok(m)
    }

    /// A surface of `seqs` over a log of `synced` events, as a checkpoint
    /// recorded it.
    pub(crate) fn restore(seqs: Vec<u64>, synced: u64) -> SurfaceManager {
        SurfaceManager { seqs, synced }
    }

    /// The surface, in the order the model sees it.
    pub fn seqs(&self) -> &[u64] {
        &self.seqs
    }

    /// How many log events have been folded in.
    pub fn synced_len(&self) -> u64 {
        self.synced
    }

    /// Folds in the events of `log` committed since the last sync: O(1) when
    /// nothing is new, O(new events) otherwise. `log` must be the log this
    /// manager has followed so far. Stops at the first refused event, leaving
    /// the surface as it was before that event.
    pub fn sync(&mut self, log: &[Event]) -> Result<(), AppendError> {
        let from = usize::try_from(self.synced).unwrap_or(usize::MAX);
        for event in log.get(from..).unwrap_or_default() {
            let step = self.plan(log, event)?;
            self.apply(event.seq(), step);
        }
        Ok(())
    }

    /// Checks how `candidate` would change the surface, without changing it.
    ///
    /// `log` is the committed log (`candidate` not yet in it), or, for a
    /// session resumed from a checkpoint, its resident events sorted by seq
    /// (they include every surface event, the only ones read). Checks rule 9
    /// (contiguity) and rules 6–8 (replace ranges, their provenance, and
    /// tool-result replaces).
    pub fn plan(&self, log: &[Event], candidate: &Event) -> Result<SurfaceStep, AppendError> {
        let seq = candidate.seq();
        if seq != self.synced {
            return Err(AppendError::SeqNotContiguous { seq, expected: self.synced });
        }
        let (start, end) = match candidate.surface_op() {
            None => return Ok(SurfaceStep::None),
            Some(SurfaceOp::Append) => return Ok(SurfaceStep::Append),
            Some(SurfaceOp::Replace { start, end }) => (start, end),
        };
        let (start_pos, end_pos) = range_positions(&self.seqs, start, end);
        let Some(start_pos) = start_pos else {
            return Err(AppendError::ReplaceStartMissing { seq, start });
        };
        let Some(end_pos) = end_pos else {
            return Err(AppendError::ReplaceEndMissing { seq, end });
        };
        if start_pos > end_pos {
            return Err(AppendError::ReplaceReversed { seq, start, end });
        }
        let shadowed = &self.seqs[start_pos..=end_pos];
        let sources = candidate.source_event_seqs().unwrap_or_default();
        let missing: Vec<u64> = if sources.len() < 16 {
            shadowed.iter().copied().filter(|s| !sources.contains(s)).collect()
        } else {
            let cited: HashSet<u64> = sources.iter().copied().collect();
            shadowed.iter().copied().filter(|s| !cited.contains(s)).collect()
        };
        if !missing.is_empty() {
            return Err(AppendError::ReplaceSourcesIncomplete { seq, missing });
        }
        if *candidate.event_type() == EventType::ToolResult {
            check_tool_result_replace(log, candidate, shadowed)?;
        }
        Ok(SurfaceStep::Replace { start_pos, end_pos })
    }

    /// Performs a plan made by [`SurfaceManager::plan`] for the event `seq`,
    /// now committed to the log.
    pub fn apply(&mut self, seq: u64, step: SurfaceStep) {
        self.apply_with_undo(seq, step);
    }

    pub(crate) fn apply_with_undo(&mut self, seq: u64, step: SurfaceStep) -> SurfaceUndo {
        self.synced = seq + 1;
        match step {
            SurfaceStep::None => SurfaceUndo::None,
            SurfaceStep::Append => {
                self.seqs.push(seq);
                SurfaceUndo::Pop
            }
            SurfaceStep::Replace { start_pos, end_pos } => {
                let removed: Vec<u64> = self.seqs.splice(start_pos..=end_pos, std::iter::once(seq)).collect();
                SurfaceUndo::Unreplace { pos: start_pos, removed }
            }
        }
    }

    pub(crate) fn undo(&mut self, undo: SurfaceUndo) {
        self.synced = self.synced.saturating_sub(1);
        match undo {
            SurfaceUndo::None => {}
            SurfaceUndo::Pop => {
                self.seqs.pop();
            }
            SurfaceUndo::Unreplace { pos, removed } => {
                self.seqs.splice(pos..=pos, removed);
            }
        }
    }

    /// Applies `event`, which a check of the log already accepted (the
    /// rules are not checked again), and returns what it took off the
    /// surface, in surface order: empty unless it is a replace. How a
    /// reader that streams a log it checked before follows the surface.
    pub fn apply_accepted(&mut self, event: &Event) -> Vec<u64> {
        let step = match event.surface_op() {
            None => SurfaceStep::None,
            Some(SurfaceOp::Append) => SurfaceStep::Append,
            Some(SurfaceOp::Replace { start, end }) => match range_positions(&self.seqs, start, end) {
                (Some(start_pos), Some(end_pos)) if start_pos <= end_pos => {
                    SurfaceStep::Replace { start_pos, end_pos }
                }
                // Not a log that was accepted: the event stays off.
                _ => SurfaceStep::None,
            },
        };
        match self.apply_with_undo(event.seq(), step) {
            SurfaceUndo::Unreplace { removed, .. } => removed,
            _ => Vec::new(),
        }
    }

    /// Position of `seq` on the surface (searched from the newest end,
    /// where most replaces start: a seq is on the surface once at most).
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.seqs.iter().rposition(|&s| s == seq)
    }

    /// Whether `seq` is on the surface.
    pub fn contains(&self, seq: u64) -> bool {
        self.position(seq).is_some()
    }
}

/// The positions of a replace's `start` and `end` on `surface`, each
/// `None` when not on it: what two scans for them would find (a seq is on
/// the surface once at most), in time proportional to how far `end` lies
/// from the newest entry plus the range's length, not to the surface's.
///
/// A session that prunes replaces one tool result near the newest end
/// every few events while its surface grows to thousands of entries; two
/// scans from the oldest end made each replace cost the whole surface.
pub(crate) fn range_positions(surface: &[u64], start: u64, end: u64) -> (Option<usize>, Option<usize>) {
    let Some(end_pos) = surface.iter().rposition(|&s| s == end) else {
        return (surface.iter().rposition(|&s| s == start), None);
    };
    let start_pos = surface[..=end_pos]
        .iter()
        .rposition(|&s| s == start)
        .or_else(|| surface[end_pos + 1..].iter().position(|&s| s == start).map(|i| end_pos + 1 + i));
    (start_pos, Some(end_pos))
}

/// Rule 8: a replacing tool/result replaces exactly one current tool/result
/// of the same call.
fn check_tool_result_replace(log: &[Event], candidate: &Event, shadowed: &[u64]) -> Result<(), AppendError> {
    let seq = candidate.seq();
    let invalid = |detail: String| Err(AppendError::ToolResultReplaceInvalid { seq, detail });
    let [target] = shadowed else {
        return invalid(format!(
            "replaces {} surface entries; a tool/result replaces exactly one",
            shadowed.len()
        ));
    };
    let Some(target_event) = find(log, *target) else {
        return invalid(format!("replaced seq {target} is not in the log"));
    };
    if *target_event.event_type() != EventType::ToolResult {
        return invalid(format!(
            "replaces seq {target}, a {} event, not a tool/result",
            target_event.event_type()
        ));
    }
    let call_id = |e: &Event| e.data_as::<ToolResult>().map(|r| r.call_id().to_owned());
    // Core payloads are checked when an event is built, so neither parse
    // fails; were one to, two empty ids would compare equal and let the
    // replace through, so it is refused instead.
    let (Ok(mine), Ok(theirs)) = (call_id(candidate), call_id(target_event)) else {
        return invalid("a tool/result payload does not parse as a tool/result".to_owned());
    };
    if mine != theirs {
        return invalid(format!("answers call {mine:?} but replaces the result of call {theirs:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The search from the newest end finds what two scans from the
        /// oldest end find, for ends on the surface or not, in order or
        /// reversed.
        #[test]
        fn range_positions_are_two_scans(
            seqs in prop::collection::hash_set(0u64..64, 0..40),
            start in 0u64..70,
            end in 0u64..70,
        ) {
            let surface: Vec<u64> = seqs.into_iter().collect();
            let scan = |seq: u64| surface.iter().position(|&s| s == seq);
            prop_assert_eq!(range_positions(&surface, start, end), (scan(start), scan(end)));
        }
    }
}
