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
//! An append is O(1). Finding a seq on the surface is O(log surface): each
//! entry has an order label, increasing along the surface, that never
//! changes while it is there (see [`SurfaceManager`]), so a position is a
//! binary search. A replace then splices: a `memmove` of the entries after
//! the range, O(1) when it replaces one entry with itself. Reading the
//! surface is O(1): it is a slice of the vector.
//!
//! The search used to be a scan, from the newest end: N replaces of the
//! surface's first entry cost O(N²) (a 21 MB log of 50,000 of them took
//! 4.3 s to validate).
//!
//! [`plan`]: SurfaceManager::plan
//! [`apply`]: SurfaceManager::apply

use std::collections::{HashMap, HashSet};

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
    /// `removed` with the labels of those that had one of their own.
    Unreplace {
        pos: usize,
        removed: Vec<u64>,
        labels: Vec<(u64, Label)>,
    },
}

/// An entry's place in the surface's order: strictly increasing along it.
type Label = u128;

/// The label of an entry that was appended: its seq, in the high half, so
/// that a label handed down stays below every later append's.
fn natural_label(seq: u64) -> Label {
    Label::from(seq) << 64
}

/// The incremental surface: one ordered `Vec` of seqs, and what finds a
/// seq in it.
///
/// Every entry has a label, strictly increasing along the surface: an
/// appended entry's is its own seq (shifted; larger than any label before
/// it, since seqs grow), and a replace hands the label of the first entry
/// it shadows down to the event that takes their place, which therefore
/// sits between the same neighbours. Only handed-down labels are stored
/// (`inherited`: a session's summaries and pruned stubs), so the index
/// costs nothing for appended entries, and a seq's position is a binary
/// search of the surface by label.
#[derive(Debug, Clone, Default)]
pub struct SurfaceManager {
    seqs: Vec<u64>,
    /// Number of log events folded in so far (the next seq it expects).
    synced: u64,
    /// The labels of the entries on the surface whose label is not their
    /// [`natural_label`].
    inherited: HashMap<u64, Label, BuildSeqHasher>,
}

/// A hasher for seqs: one folded multiplication (the high and low halves
/// of a 128-bit product, xored), several times cheaper than the standard
/// SipHash on the binary search's path, and mixing every bit of the seq
/// into the low ones the table uses (seqs a log spaces by a power of two
/// do not share a bucket).
#[derive(Debug, Clone, Copy, Default)]
struct BuildSeqHasher;

impl std::hash::BuildHasher for BuildSeqHasher {
    type Hasher = SeqHasher;
    fn build_hasher(&self) -> SeqHasher {
        SeqHasher(0)
    }
}

#[derive(Debug)]
struct SeqHasher(u64);

impl std::hash::Hasher for SeqHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        let product = u128::from(self.0 ^ n) * u128::from(0x9E37_79B9_7F4A_7C15_u64);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

/// Two managers are equal when they hold the same surface over the same
/// log; their labels are how each finds its entries, not what they hold.
impl PartialEq for SurfaceManager {
    fn eq(&self, other: &Self) -> bool {
        self.seqs == other.seqs && self.synced == other.synced
    }
}

impl Eq for SurfaceManager {}

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
        // Labels that increase along the surface: an entry standing before
        // an older one (a replace's) takes the next label after its
        // predecessor's, still below any later append's.
        let mut inherited = HashMap::default();
        let mut previous: Option<Label> = None;
        for &seq in &seqs {
            let label = match previous {
                Some(p) if natural_label(seq) <= p => {
                    inherited.insert(seq, p + 1);
                    p + 1
                }
                _ => natural_label(seq),
            };
            previous = Some(label);
        }
        SurfaceManager { seqs, synced, inherited }
    }

    /// The label of `seq`, were it on the surface.
    fn label(&self, seq: u64) -> Label {
        if self.inherited.is_empty() {
            return natural_label(seq);
        }
        self.inherited.get(&seq).copied().unwrap_or_else(|| natural_label(seq))
    }

    /// The positions of a replace's `start` and `end`, each `None` when not
    /// on the surface.
    fn range_positions(&self, start: u64, end: u64) -> (Option<usize>, Option<usize>) {
        (self.position(start), self.position(end))
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
        let (start_pos, end_pos) = self.range_positions(start, end);
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
                let label = self.label(self.seqs[start_pos]);
                let removed: Vec<u64> = self.seqs.splice(start_pos..=end_pos, std::iter::once(seq)).collect();
                let labels =
                    removed.iter().filter_map(|s| self.inherited.remove(s).map(|l| (*s, l))).collect();
                self.inherited.insert(seq, label);
                SurfaceUndo::Unreplace { pos: start_pos, removed, labels }
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
            SurfaceUndo::Unreplace { pos, removed, labels } => {
                if let Some(seq) = self.seqs.get(pos) {
                    self.inherited.remove(seq);
                }
                self.seqs.splice(pos..=pos, removed);
                self.inherited.extend(labels);
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
            Some(SurfaceOp::Replace { start, end }) => match self.range_positions(start, end) {
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

    /// Position of `seq` on the surface: a binary search by label,
    /// O(log surface).
    pub fn position(&self, seq: u64) -> Option<usize> {
        let label = self.label(seq);
        let pos = self.seqs.partition_point(|&s| self.label(s) < label);
        (self.seqs.get(pos) == Some(&seq)).then_some(pos)
    }

    /// The entries a replace `{start, end}` would shadow, in surface order
    /// (empty for a range that is not on it, or reversed).
    pub(crate) fn shadowed_by(&self, start: u64, end: u64) -> &[u64] {
        match self.range_positions(start, end) {
            (Some(a), Some(b)) if a <= b => &self.seqs[a..=b],
            _ => &[],
        }
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

        /// The index finds what a scan finds, after any appends and
        /// replaces (anywhere: first entry, last, middle, whole), after an
        /// undo, and on a manager restored from a checkpoint of the surface
        /// (where a replace's entry stands before older ones) that carries
        /// on with the same steps.
        #[test]
        fn positions_are_what_a_scan_finds(
            steps in prop::collection::vec((0u8..4, any::<prop::sample::Index>(), 0usize..4), 1..80),
            restore_at in any::<prop::sample::Index>(),
        ) {
            let restore_at = restore_at.index(steps.len());
            let mut manager = SurfaceManager::new();
            let mut restored: Option<SurfaceManager> = None;
            for (i, (kind, at, len)) in steps.into_iter().enumerate() {
                if i == restore_at {
                    restored = Some(SurfaceManager::restore(manager.seqs.clone(), manager.synced));
                }
                let seq = manager.synced;
                let n = manager.seqs.len();
                let step = match kind {
                    0 | 1 if n > 0 => {
                        let start_pos = at.index(n);
                        SurfaceStep::Replace { start_pos, end_pos: (start_pos + len).min(n - 1) }
                    }
                    2 => SurfaceStep::None,
                    _ => SurfaceStep::Append,
                };
                for m in std::iter::once(&mut manager).chain(restored.as_mut()) {
                    let before = m.clone();
                    let undo = m.apply_with_undo(seq, step);
                    if kind == 1 {
                        // Taken back, then done again.
                        m.undo(undo);
                        prop_assert_eq!(&*m, &before);
                        check_positions(&before)?;
                        m.apply(seq, step);
                    }
                    check_positions(m)?;
                }
                if let Some(r) = &restored {
                    prop_assert_eq!(r, &manager);
                }
            }
        }
    }

    /// Every seq of the log: found where a scan finds it, or not at all.
    fn check_positions(m: &SurfaceManager) -> Result<(), TestCaseError> {
        for seq in 0..m.synced + 2 {
            let scan = m.seqs.iter().position(|&s| s == seq);
            prop_assert_eq!(m.position(seq), scan, "seq {} on {:?}", seq, m.seqs);
        }
        for (i, &a) in m.seqs.iter().enumerate() {
            for &b in &m.seqs[i..] {
                prop_assert_eq!(m.shadowed_by(a, b), &m.seqs[i..=m.position(b).unwrap()]);
                if a != b {
                    prop_assert!(m.shadowed_by(b, a).is_empty());
                }
            }
        }
        Ok(())
    }
}
