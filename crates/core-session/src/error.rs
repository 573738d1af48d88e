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
    EventTooLarge {
        /// The event's seq, when it could be read.
        seq: Option<u64>,
        /// The line's length in bytes, without its `\n`; a reader counts no
        /// further than [`MAX_COUNTED_LINE_BYTES`](crate::MAX_COUNTED_LINE_BYTES),
        /// so a line that long or longer (or endless) says that.
        len: u64,
        /// The limit it broke.
        limit: u64,
    },
    /// `surface-op-missing`: a surface-eligible event without `surfaceOp` (rule 1).
    SurfaceOpMissing {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `surface-op-forbidden`: `surfaceOp` on an event that never joins the surface (rule 2).
    SurfaceOpForbidden {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `source-seqs-forbidden`: `sourceEventSeqs` on an event that never joins the surface (rule 2).
    SourceSeqsForbidden {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `surface-op-malformed`: neither `"append"` nor `{"op":"replace","start":S,"end":E}` (rule 3).
    SurfaceOpMalformed {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `source-seqs-malformed`: not an array of integers >= 0 (rule 4).
    SourceSeqsMalformed {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `source-seqs-empty`: `[]` on anything but `assistant/message` (rule 4).
    SourceSeqsEmpty {
        /// The event's seq.
        seq: u64,
        /// The event's type.
        event_type: String,
    },
    /// `source-seqs-duplicate`: a seq cited twice (rule 4).
    SourceSeqsDuplicate {
        /// The event's seq.
        seq: u64,
        /// The repeated value.
        value: u64,
    },
    /// `source-seqs-not-earlier`: a cited seq that is not earlier than the event (rule 4).
    SourceSeqsNotEarlier {
        /// The event's seq.
        seq: u64,
        /// The offending value.
        value: u64,
    },
    /// `replace-start-missing`: the replace's `start` is not on the surface (rule 6).
    ReplaceStartMissing {
        /// The event's seq.
        seq: u64,
        /// The replace's start.
        start: u64,
    },
    /// `replace-end-missing`: the replace's `end` is not on the surface (rule 6).
    ReplaceEndMissing {
        /// The event's seq.
        seq: u64,
        /// The replace's end.
        end: u64,
    },
    /// `replace-reversed`: `start` stands after `end` on the surface (rule 6).
    ReplaceReversed {
        /// The event's seq.
        seq: u64,
        /// The replace's start.
        start: u64,
        /// The replace's end.
        end: u64,
    },
    /// `replace-sources-incomplete`: a shadowed entry is not cited (rule 7).
    ReplaceSourcesIncomplete {
        /// The event's seq.
        seq: u64,
        /// Shadowed seqs missing from `sourceEventSeqs`.
        missing: Vec<u64>,
    },
    /// `tool-result-replace-invalid`: a replacing `tool/result` that does not replace
    /// exactly one current `tool/result` of the same call (rule 8).
    ToolResultReplaceInvalid {
        /// The event's seq.
        seq: u64,
        /// What was wrong.
        detail: String,
    },
    /// `seq-not-contiguous`: the seq is not previous + 1 (rule 9).
    SeqNotContiguous {
        /// The event's seq.
        seq: u64,
        /// The seq the log expects next.
        expected: u64,
    },
    /// An [`AppendGuard`](crate::AppendGuard) (for example the invariants
    /// checker in dev mode) vetoed the event; `code` is the guard's own code.
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
    /// What was wrong, without the code or the seq (those are
    /// [`code`](AppendError::code) and [`seq`](AppendError::seq)): the text a
    /// tool shows after its own `error[<code>]` and position.
    pub fn detail(&self) -> String {
        match self {
            AppendError::EventMalformed { detail, .. } => detail.clone(),
            AppendError::EventTooLarge { len, limit, .. } => {
                let len = crate::limits::counted_len(*len);
                format!("the event is {len} bytes as a line, longer than the {limit}-byte limit")
            }
            AppendError::SurfaceOpMissing { event_type, .. } => {
                format!("a `{event_type}` event must say how it joins the surface")
            }
            AppendError::SurfaceOpForbidden { event_type, .. } => {
                format!("a `{event_type}` event never joins the surface")
            }
            AppendError::SourceSeqsForbidden { event_type, .. } => {
                format!("a `{event_type}` event carries no provenance")
            }
            AppendError::SurfaceOpMalformed { detail, .. } => detail.clone(),
            AppendError::SourceSeqsMalformed { detail, .. } => detail.clone(),
            AppendError::SourceSeqsEmpty { event_type, .. } => {
                format!("only an assistant/message may cite nothing, not `{event_type}`")
            }
            AppendError::SourceSeqsDuplicate { value, .. } => format!("seq {value} is cited more than once"),
            AppendError::SourceSeqsNotEarlier { value, .. } => {
                format!("cites seq {value}, which is not earlier")
            }
            AppendError::ReplaceStartMissing { start, .. } => format!("start {start} is not on the surface"),
            AppendError::ReplaceEndMissing { end, .. } => format!("end {end} is not on the surface"),
            AppendError::ReplaceReversed { end, start, .. } => {
                format!("start {start} stands after end {end} on the surface")
            }
            AppendError::ReplaceSourcesIncomplete { missing, .. } => {
                format!("shadows {missing:?} without citing them")
            }
            AppendError::ToolResultReplaceInvalid { detail, .. } => detail.clone(),
            AppendError::SeqNotContiguous { expected, seq, .. } => {
                format!("expected seq {expected}, found {seq}")
            }
            AppendError::Vetoed { message, .. } => message.clone(),
        }
    }
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

/// `<code>[ at seq N]: <detail>`: the code first, so a log line can be
/// grepped for it.
impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match self {
            AppendError::SeqNotContiguous { .. } => AtSeq(None),
            other => AtSeq(other.seq()),
        };
        write!(f, "{}{at}: {}", self.code(), self.detail())
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
    HeaderMalformed {
        /// What was wrong.
        detail: String,
    },
    /// `header-version-unsupported`: the header's `version` is not [`SESSION_FORMAT_VERSION`](crate::SESSION_FORMAT_VERSION).
    HeaderVersionUnsupported {
        /// The version found, as written.
        found: String,
    },
    /// `log-corrupt`: a line that is not a JSON value (and is not a torn last line).
    LogCorrupt {
        /// 1-based line number in a file (the header is line 1); `None`
        /// where the log is not a file of lines (a database row).
        line: Option<u64>,
        /// What was wrong.
        detail: String,
    },
    /// An event broke a rule of sections 1 or 2.
    Rule {
        /// 1-based line number of the event in a file; `None` where the log
        /// is not a file of lines (a database row: the error's seq says
        /// which event).
        line: Option<u64>,
        /// The rule it broke (told by `Display`, so not returned by
        /// `source()`: a printed chain names it once).
        error: AppendError,
    },
}

/// `<code>: <detail>` for a header, `log-corrupt[ at line N]: <detail>`,
/// and `[line N: ]<the rule's error>` for a rule: a line only where there
/// is one.
impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::LogCorrupt { line: Some(line), .. } => {
                write!(f, "{} at line {line}: {}", self.code(), self.detail())
            }
            LoadError::Rule { line: Some(line), error } => write!(f, "line {line}: {error}"),
            LoadError::Rule { line: None, error } => write!(f, "{error}"),
            _ => write!(f, "{}: {}", self.code(), self.detail()),
        }
    }
}

impl LoadError {
    /// What was wrong, without the code or the position (those are
    /// [`code`](LoadError::code), [`seq`](LoadError::seq) and
    /// [`line`](LoadError::line)).
    pub fn detail(&self) -> String {
        match self {
            LoadError::HeaderMalformed { detail } | LoadError::LogCorrupt { detail, .. } => detail.clone(),
            LoadError::HeaderVersionUnsupported { found } => {
                format!("found version {found}, this build reads version {}", crate::SESSION_FORMAT_VERSION)
            }
            LoadError::Rule { error, .. } => error.detail(),
        }
    }

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
            LoadError::LogCorrupt { line, detail } => {
                LoadError::LogCorrupt { line: line.map(|l| l + by), detail }
            }
            LoadError::Rule { line, error } => LoadError::Rule { line: line.map(|l| l + by), error },
            other => other,
        }
    }

    /// The 1-based line number of the offending line, where there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            LoadError::LogCorrupt { line, .. } | LoadError::Rule { line, .. } => *line,
            LoadError::HeaderMalformed { .. } | LoadError::HeaderVersionUnsupported { .. } => Some(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_code_the_position_and_the_detail() {
        let start = AppendError::ReplaceStartMissing { seq: 5, start: 3 };
        assert_eq!(start.detail(), "start 3 is not on the surface");
        assert_eq!(start.to_string(), "replace-start-missing at seq 5: start 3 is not on the surface");
        let unread = AppendError::EventMalformed { seq: None, detail: "not JSON".into() };
        assert_eq!(unread.to_string(), "event-malformed: not JSON");
        let gap = AppendError::SeqNotContiguous { seq: 3, expected: 1 };
        assert_eq!(gap.to_string(), "seq-not-contiguous: expected seq 1, found 3");
        let veto = AppendError::Vetoed { seq: 2, code: "turn-already-open".into(), message: "turn 1".into() };
        assert_eq!((veto.code(), veto.detail()), ("turn-already-open", "turn 1".to_owned()));
        assert_eq!(veto.to_string(), "turn-already-open at seq 2: turn 1");

        let corrupt = LoadError::LogCorrupt { line: Some(12), detail: "blank line".into() };
        assert_eq!(
            (corrupt.to_string(), corrupt.detail()),
            ("log-corrupt at line 12: blank line".into(), "blank line".into())
        );
        let row = LoadError::Rule { line: None, error: start.clone() };
        assert_eq!((row.to_string(), row.line(), row.seq()), (start.to_string(), None, Some(5)));
        let rule = LoadError::Rule { line: Some(7), error: start };
        assert_eq!(rule.to_string(), "line 7: replace-start-missing at seq 5: start 3 is not on the surface");
        assert_eq!(rule.detail(), "start 3 is not on the surface");
        let version = LoadError::HeaderVersionUnsupported { found: "9".into() };
        assert_eq!(version.to_string(), format!("header-version-unsupported: {}", version.detail()));
        assert!(version.detail().starts_with("found version 9, this build reads version "));
    }
}
