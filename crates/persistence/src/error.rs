//! Store errors: one enum, one stable code per kind.

use std::error::Error as StdError;
use std::fmt;

/// A store operation failed. Match on [`StoreError::code`] for the stable code.
///
/// `Display` is `<code>: <detail>` ([`StoreError::detail`]); the text is
/// for people and may change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// `not-found`: no session with this id.
    NotFound {
        /// The id asked for.
        session_id: String,
    },
    /// `already-exists`: a session with this id exists.
    AlreadyExists {
        /// The id.
        session_id: String,
    },
    /// `conflict`: the batch does not continue the stored log (another writer
    /// got there first, or the caller is out of date). Nothing was written.
    Conflict {
        /// The session.
        session_id: String,
        /// The seq the stored log expects next.
        expected: u64,
        /// The first seq of the refused batch.
        found: u64,
    },
    /// `corrupt`: stored data cannot be read; `location` says where (a file
    /// and line, a table and row). `detail` already tells the cause, so it
    /// is not also the error's `source()` (the chain names it once).
    Corrupt {
        /// Where: e.g. `sessions/abc.jsonl:12`.
        location: String,
        /// What was wrong, with the contract code where there is one.
        detail: String,
        /// The contract-level cause, when the format was broken (told by
        /// `detail`, so not returned by `source()`).
        cause: Option<palimpsest_core_session::LoadError>,
    },
    /// `version-unsupported`: stored data of a format version this build does not read.
    VersionUnsupported {
        /// What was found.
        found: String,
        /// What this build reads.
        expected: String,
    },
    /// `schema-mismatch`: a database whose schema is not this build's.
    SchemaMismatch {
        /// What was found.
        found: String,
        /// What this build expects.
        expected: String,
    },
    /// `locked`: another writer holds the session or store (another
    /// process, or another handle in this one). Nothing was changed.
    Locked {
        /// What is locked.
        what: String,
    },
    /// `invalid-id`: a session id the store cannot hold.
    InvalidId {
        /// Why.
        reason: String,
    },
    /// `invalid-header`: a header the format refuses (its line is longer than
    /// [`MAX_HEADER_LINE_BYTES`](palimpsest_core_session::MAX_HEADER_LINE_BYTES)),
    /// so no reader could read it back. Nothing was written.
    InvalidHeader {
        /// The header's session id.
        session_id: String,
        /// Why, with its contract code (`header-malformed`).
        #[source]
        cause: palimpsest_core_session::LoadError,
    },
    /// `io`: the medium failed. After a write error a backend refuses further
    /// writes (it cannot know what reached the disk); reopen it.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

/// `<code>: <detail>`: the code first, so a log line can be grepped for it.
impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.detail())
    }
}

impl StoreError {
    /// What went wrong, without the code (that is [`StoreError::code`]): the
    /// text a tool shows after its own `error[<code>]`. The cause of an
    /// `io` error is its `source()`, not part of the detail.
    ///
    /// ```
    /// use palimpsest_persistence::StoreError;
    ///
    /// let e = StoreError::Locked { what: "session file a.jsonl".into() };
    /// assert_eq!(e.code(), "locked");
    /// assert_eq!(e.detail(), "another process (or another open handle) holds session file a.jsonl for writing");
    /// assert_eq!(e.to_string(), format!("locked: {}", e.detail()));
    /// ```
    pub fn detail(&self) -> String {
        match self {
            StoreError::NotFound { session_id } => format!("no session {session_id:?}"),
            StoreError::AlreadyExists { session_id } => format!("session {session_id:?} exists"),
            StoreError::Conflict { session_id, expected, found } => {
                format!("session {session_id:?} expects seq {expected} next, the batch starts at {found}")
            }
            StoreError::Corrupt { location, detail, .. } => format!("{location}: {detail}"),
            StoreError::VersionUnsupported { found, expected } => {
                format!("found {found}, this build reads {expected}")
            }
            StoreError::SchemaMismatch { found, expected } => format!("found {found}, expected {expected}"),
            StoreError::Locked { what } => {
                format!("another process (or another open handle) holds {what} for writing")
            }
            StoreError::InvalidId { reason } => reason.clone(),
            StoreError::InvalidHeader { session_id, cause } => format!("session {session_id:?}: {cause}"),
            StoreError::Io { context, .. } => context.clone(),
        }
    }

    /// The stable code: `not-found`, `already-exists`, `conflict`, `corrupt`,
    /// `version-unsupported`, `schema-mismatch`, `locked`, `invalid-id`,
    /// `invalid-header` or `io`.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not-found",
            StoreError::AlreadyExists { .. } => "already-exists",
            StoreError::Conflict { .. } => "conflict",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::VersionUnsupported { .. } => "version-unsupported",
            StoreError::SchemaMismatch { .. } => "schema-mismatch",
            StoreError::Locked { .. } => "locked",
            StoreError::InvalidId { .. } => "invalid-id",
            StoreError::InvalidHeader { .. } => "invalid-header",
            StoreError::Io { .. } => "io",
        }
    }

    /// The session-format contract code behind a `corrupt` or
    /// `version-unsupported` error (`log-corrupt`, `header-malformed`,
    /// `event-malformed`, ...), when there is one.
    pub fn contract_code(&self) -> Option<&str> {
        match self {
            StoreError::Corrupt { cause: Some(c), .. } | StoreError::InvalidHeader { cause: c, .. } => {
                Some(c.code())
            }
            StoreError::VersionUnsupported { .. } => Some("header-version-unsupported"),
            _ => None,
        }
    }

    /// Whether the failed operation certainly changed nothing in the store:
    /// a refusal (`not-found`, `already-exists`, `conflict`, `locked`,
    /// `invalid-id`, `version-unsupported`, `schema-mismatch`) is decided
    /// before anything is written. After `io` or `corrupt` during a write,
    /// all, part or none of it may have reached the medium: only reopening
    /// tells.
    pub fn wrote_nothing(&self) -> bool {
        !matches!(self, StoreError::Io { .. } | StoreError::Corrupt { .. })
    }

    /// What a write of `seqs` that failed with this error is known to have
    /// done, and no more: "the store refused seq 4; nothing was written",
    /// or, when [`StoreError::wrote_nothing`] cannot be said, that whether
    /// the store holds them is unknown until the session is reopened. The
    /// one wording every writer uses, so no message claims an outcome that
    /// did not happen.
    pub fn write_outcome(&self, seqs: &std::ops::Range<u64>) -> String {
        let (which, them) =
            (seqs_text(seqs), if seqs.end.saturating_sub(seqs.start) > 1 { "them" } else { "it" });
        if self.wrote_nothing() {
            format!("the store refused {which}; nothing was written")
        } else {
            format!(
                "writing {which} to the store failed; whether the store holds {them} is unknown \
                 until the session is reopened"
            )
        }
    }

    /// An `io` error with context.
    pub fn io(context: impl Into<String>, source: impl StdError + Send + Sync + 'static) -> StoreError {
        StoreError::Io { context: context.into(), source: Box::new(source) }
    }
}

/// A batch's seqs as a person reads them: `seq 4`, or `seqs 4..=6`.
pub(crate) fn seqs_text(seqs: &std::ops::Range<u64>) -> String {
    match seqs.end.saturating_sub(seqs.start) {
        0 | 1 => format!("seq {}", seqs.start),
        _ => format!("seqs {}..={}", seqs.start, seqs.end - 1),
    }
}
