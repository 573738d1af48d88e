//! Why an event cannot join a session: one variant per contract code.
//!
//! Every variant maps to its stable code (section 1 and 2 of the session
//! format contract) through [`AppendError::code`] and carries the offending
//! event's seq where one is known.

use std::fmt;

/// An event was refused. Nothing changed: not the log, not the surface.
///
/// Match on [`AppendError::code`] for the stable contract code; the
/// `Display` text is for people and may change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// `event-malformed`: the envelope or a core payload does not match section 1.
    #[error("event-malformed{}: {detail}", AtSeq(*seq))]
    EventMalformed {
        /// The event's seq, when it could be read.
        seq: Option<u64>,
        /// What was wrong.
        detail: String,
    },
    /// `event-too-large`: the event's line (its canonical JSON text) is longer
    /// than [`MAX_EVENT_LINE_BYTES`](crate::MAX_EVENT_LINE_BYTES), or, read
    /// from a file, the line is longer than the reader's cap. Checked before
    /// anything else: such an event is never built, written or parsed.
    #[error("event-too-large{}: the event is {len} bytes as a line, longer than the {limit}-byte limit", AtSeq(*seq))]
    EventTooLarge {
        /// The event's seq, when it could be read.
        seq: Option<u64>,
        /// The line's length in bytes, without its `\n`.
        len: u64,
        /// The limit it broke.
        limit: u64,
    },
    /// `surface-op-missing`: a surface-eligible event without `surfaceOp` (rule 1).
    #[error("surface-op-missing at seq {seq}: a `{event_type}` event must say how it joins the surface")]
    SurfaceOpMissing {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `surface-op-forbidden`: `surfaceOp` on an event that never joins the surface (rule 2).
    #[error("surface-op-forbidden at seq {seq}: a `{event_type}` event never joins the surface")]
    SurfaceOpForbidden {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `source-seqs-forbidden`: `sourceEventSeqs` on an event that never joins the surface (rule 2).
    #[error("source-seqs-forbidden at seq {seq}: a `{event_type}` event carries no provenance")]
    SourceSeqsForbidden {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `surface-op-malformed`: neither `"append"` nor `{"op":"replace","start":S,"end":E}` (rule 3).
    #[error("surface-op-malformed at seq {seq}: {detail}")]
    SurfaceOpMalformed {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `source-seqs-malformed`: not an array of integers >= 0 (rule 4).
    #[error("source-seqs-malformed at seq {seq}: {detail}")]
    SourceSeqsMalformed {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `source-seqs-empty`: `[]` on anything but `assistant/message` (rule 4).
    #[error(
        "source-seqs-empty at seq {seq}: only an assistant/message may cite nothing, not `{event_type}`"
    )]
    SourceSeqsEmpty {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `source-seqs-duplicate`: a seq cited twice (rule 4).
    #[error("source-seqs-duplicate at seq {seq}: seq {value} is cited more than once")]
    SourceSeqsDuplicate {
        /// The event's seq.
        seq: u64,
        /// The repeated value.
        value: u64,
    },
    /// `source-seqs-not-earlier`: a cited seq that is not earlier than the event (rule 4).
    #[error("source-seqs-not-earlier at seq {seq}: cites seq {value}, which is not earlier")]
    SourceSeqsNotEarlier {
        /// The event's seq.
        seq: u64,
        /// The offending value.
        value: u64,
    },
    /// `replace-start-missing`: the replace's `start` is not on the surface (rule 6).
    #[error("replace-start-missing at seq {seq}: start {start} is not on the surface")]
    ReplaceStartMissing {
        /// The event's seq.
        seq: u64,
        /// The replace's start.
        start: u64,
    },
    /// `replace-end-missing`: the replace's `end` is not on the surface (rule 6).
    #[error("replace-end-missing at seq {seq}: end {end} is not on the surface")]
    ReplaceEndMissing {
        /// The event's seq.
        seq: u64,
        /// The replace's end.
        end: u64,
    },
    /// `replace-reversed`: `start` stands after `end` on the surface (rule 6).
    #[error("replace-reversed at seq {seq}: start {start} stands after end {end} on the surface")]
    ReplaceReversed {
        /// The event's seq.
        seq: u64,
        /// The replace's start.
        start: u64,
        /// The replace's end.
        end: u64,
    },
    /// `replace-sources-incomplete`: a shadowed entry is not cited (rule 7).
    #[error("replace-sources-incomplete at seq {seq}: shadows {missing:?} without citing them")]
    ReplaceSourcesIncomplete {
        /// The event's seq.
        seq: u64,
        /// Shadowed seqs missing from `sourceEventSeqs`.
        missing: Vec<u64>,
    },
    /// `tool-result-replace-invalid`: a replacing `tool/result` that does not replace
    /// exactly one current `tool/result` of the same call (rule 8).
    #[error("tool-result-replace-invalid at seq {seq}: {detail}")]
    ToolResultReplaceInvalid {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `seq-not-contiguous`: the seq is not previous + 1 (rule 9).
    #[error("seq-not-contiguous: expected seq {expected}, found {seq}")]
    SeqNotContiguous {
        /// The event's seq.
        seq: u64,
        /// The seq the log expects next.
        expected: u64,
    },
    /// An [`AppendGuard`](crate::AppendGuard) (for example the invariants
    /// checker in dev mode) vetoed the event; `code` is the guard's own code.
    #[error("{code} at seq {seq}: {message}")]
    Vetoed {
        /// The event's seq.
        seq: u64,
        /// The guard's stable code, e.g. `turn-already-open`.
        code: String,
        /// What was wrong.
        message: String,
    },
}

impl AppendError {
    /// The stable contract code, e.g. `"replace-start-missing"`.
    pub fn code(&self) -> &str {
        match self {
            AppendError::EventMalformed { .. } => "event-malformed",
            AppendError::EventTooLarge { .. } => "event-too-large",
            AppendError::SurfaceOpMissing { .. } => "surface-op-missing",
            AppendError::SurfaceOpForbidden { .. } => "surface-op-forbidden",
            AppendError::SourceSeqsForbidden { .. } => "source-seqs-forbidden",
            AppendError::SurfaceOpMalformed { .. } => "surface-op-malformed",
            AppendError::SourceSeqsMalformed { .. } => "source-seqs-malformed",
            AppendError::SourceSeqsEmpty { .. } => "source-seqs-empty",
            AppendError::SourceSeqsDuplicate { .. } => "source-seqs-duplicate",
            AppendError::SourceSeqsNotEarlier { .. } => "source-seqs-not-earlier",
            AppendError::ReplaceStartMissing { .. } => "replace-start-missing",
            AppendError::ReplaceEndMissing { .. } => "replace-end-missing",
            AppendError::ReplaceReversed { .. } => "replace-reversed",
            AppendError::ReplaceSourcesIncomplete { .. } => "replace-sources-incomplete",
            AppendError::ToolResultReplaceInvalid { .. } => "tool-result-replace-invalid",
            AppendError::SeqNotContiguous { .. } => "seq-not-contiguous",
            AppendError::Vetoed { code, .. } => code,
        }
    }

    /// The seq of the refused event, when it could be read.
    pub fn seq(&self) -> Option<u64> {
        match self {
            AppendError::EventMalformed { seq, .. } | AppendError::EventTooLarge { seq, .. } => *seq,
            AppendError::SurfaceOpMissing { seq, .. }
            | AppendError::SurfaceOpForbidden { seq, .. }
            | AppendError::SourceSeqsForbidden { seq, .. }
            | AppendError::SurfaceOpMalformed { seq, .. }
            | AppendError::SourceSeqsMalformed { seq, .. }
            | AppendError::SourceSeqsEmpty { seq, .. }
            | AppendError::SourceSeqsDuplicate { seq, .. }
            | AppendError::SourceSeqsNotEarlier { seq, .. }
            | AppendError::ReplaceStartMissing { seq, .. }
            | AppendError::ReplaceEndMissing { seq, .. }
            | AppendError::ReplaceReversed { seq, .. }
            | AppendError::ReplaceSourcesIncomplete { seq, .. }
            | AppendError::ToolResultReplaceInvalid { seq, .. }
            | AppendError::SeqNotContiguous { seq, .. }
            | AppendError::Vetoed { seq, .. } => Some(*seq),
        }
    }

    /// True for a veto by an [`AppendGuard`](crate::AppendGuard) rather than
    /// a rule of the contract's section 1 or 2.
    pub fn is_veto(&self) -> bool {
        matches!(self, AppendError::Vetoed { .. })
    }
}

struct AtSeq(Option<u64>);

impl fmt::Display for AtSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(seq) => write!(f, " at seq {seq}"),
            None => Ok(()),
        }
    }
}

/// A session file or stored log could not be read (contract section 6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// `header-malformed`: the header line is missing or unreadable.
    #[error("header-malformed: {detail}")]
    HeaderMalformed {
        /// What was wrong.
        detail: String,
    },
    /// `header-version-unsupported`: the header's `version` is not [`SESSION_FORMAT_VERSION`](crate::SESSION_FORMAT_VERSION).
    #[error(
        "header-version-unsupported: found version {found}, this build reads version {}",
        crate::SESSION_FORMAT_VERSION
    )]
    HeaderVersionUnsupported {
        /// The version found, as written.
        found: String,
    },
    /// `log-corrupt`: a line that is not a JSON value (and is not a torn last line).
    #[error("log-corrupt at line {line}: {detail}")]
    LogCorrupt {
        /// 1-based line number; the header is line 1.
        line: u64,
        /// What was wrong.
        detail: String,
    },
    /// An event broke a rule of sections 1 or 2.
    #[error("line {line}: {error}")]
    Rule {
        /// 1-based line number of the event.
        line: u64,
        /// The rule it broke (told by `Display`, so not returned by
        /// `source()`: a printed chain names it once).
        error: AppendError,
    },
}

impl LoadError {
    /// The stable contract code, e.g. `"log-corrupt"`.
    pub fn code(&self) -> &str {
        match self {
            LoadError::HeaderMalformed { .. } => "header-malformed",
            LoadError::HeaderVersionUnsupported { .. } => "header-version-unsupported",
            LoadError::LogCorrupt { .. } => "log-corrupt",
            LoadError::Rule { error, .. } => error.code(),
        }
    }

    /// The seq of the offending event, where there is one.
    pub fn seq(&self) -> Option<u64> {
        match self {
            LoadError::Rule { error, .. } => error.seq(),
            _ => None,
        }
    }

    /// The same error, `by` lines further down the file (for a part of a
    /// file read on its own).
    pub(crate) fn shifted(self, by: u64) -> LoadError {
        match self {
            LoadError::LogCorrupt { line, detail } => LoadError::LogCorrupt { line: line + by, detail },
            LoadError::Rule { line, error } => LoadError::Rule { line: line + by, error },
            other => other,
        }
    }

    /// The 1-based line number of the offending line, where there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            LoadError::LogCorrupt { line, .. } | LoadError::Rule { line, .. } => Some(*line),
            LoadError::HeaderMalformed { .. } | LoadError::HeaderVersionUnsupported { .. } => Some(1),
        }
    }
}
