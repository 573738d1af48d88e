//! Forking a session at any event: the child's seed is an exact prefix of
//! the parent's log, closed with the repair closers when the fork point falls
//! inside a turn, so the child is valid and resumable. The parent is never
//! touched.

use crate::error::AppendError;
use crate::header::SessionHeader;
use crate::repair::repair;
use crate::session::Session;

/// Why a fork could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// `fork-point-missing`: the parent has no event with that seq.
    #[error("fork-point-missing: {}", self.detail())]
    PointMissing {
        /// The parent's id.
        parent: String,
        /// The requested fork point.
        at_seq: u64,
        /// The parent's length.
        len: u64,
    },
    /// `fork-parent-incomplete`: the parent was resumed from a checkpoint
    /// and holds its surface, not its log; a fork copies the log, so fork
    /// a session loaded whole.
    #[error("fork-parent-incomplete: {}", self.detail())]
    ParentIncomplete {
        /// The parent's id.
        parent: String,
    },
    /// The seed was refused (cannot happen for a valid parent; kept so a
    /// broken parent is reported rather than copied).
    #[error(transparent)]
    Refused(#[from] AppendError),
}

impl ForkError {
    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            ForkError::PointMissing { .. } => "fork-point-missing",
            ForkError::ParentIncomplete { .. } => "fork-parent-incomplete",
            ForkError::Refused(e) => e.code(),
        }
    }

    /// What was wrong, without the code (`Display` is the code, then this).
    pub fn detail(&self) -> String {
        match self {
            ForkError::PointMissing { parent, at_seq, len } => {
                format!("session {parent:?} has {len} events; there is no seq {at_seq}")
            }
            ForkError::ParentIncomplete { parent } => format!(
                "session {parent:?} was resumed from a checkpoint and holds its surface, not its log; \
                 fork a session loaded whole"
            ),
            ForkError::Refused(e) => e.detail(),
        }
    }
}

/// Forks `parent` after the event `at_seq` (inclusive) into a new session
/// with id `new_id` created at `created_at`. The child's header names the
/// parent (`parentSession`) and how many events were copied (`seedLength` =
/// `at_seq + 1`); closers for an open turn follow the seed.
///
/// ```
/// # use palimpsest_core_session::{fork::fork, jsonl::JsonlLog};
/// # let text = include_str!("../test_data/ok/compaction-and-prune.jsonl");
/// let parent = JsonlLog::parse(text.as_bytes())?.into_session()?;
/// // Seq 7 is a tool/call inside turn 1: the child gets closers.
/// let child = fork(&parent, 7, "child", 0)?;
/// assert_eq!(child.header().seed_length, Some(8));
/// assert_eq!(child.header().parent_session.as_deref(), Some("example-1"));
/// assert_eq!(child.events().last().unwrap().event_type().as_str(), "turn/end");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fork(
    parent: &Session,
    at_seq: u64,
    new_id: impl Into<String>,
    created_at: u64,
) -> Result<Session, ForkError> {
    if !parent.is_complete() {
        return Err(ForkError::ParentIncomplete { parent: parent.id().to_owned() });
    }
    let len = parent.events().len() as u64;
    if at_seq >= len {
        return Err(ForkError::PointMissing { parent: parent.id().to_owned(), at_seq, len });
    }
    let mut events = parent.events()[..=at_seq as usize].to_vec();
    events.extend(repair(&events));
    let header = SessionHeader {
        id: new_id.into(),
        created_at,
        cwd: parent.header().cwd.clone(),
        parent_session: Some(parent.id().to_owned()),
        seed_length: Some(at_seq + 1),
    };
    Ok(Session::from_log(header, events)?)
}
