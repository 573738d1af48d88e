//! The holds a JSONL store grants, one rule for [`JsonlStore`] and
//! [`JsonlFileStore`]: the session file's lock is the hold (it never
//! expires), and the grant records who was given it, with which token, so
//! that only that [`Hold`] releases or renews it; a stale hold (an earlier
//! grant's) or another holder's changes nothing.
//!
//! [`JsonlStore`]: crate::JsonlStore
//! [`JsonlFileStore`]: crate::JsonlFileStore

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use palimpsest_persistence::{Hold, StoreError};

/// Who was given a store's hold of a session, and its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    holder: String,
    token: u64,
}

impl Grant {
    /// The grant to `holder`, given while the store keeps `current`: a
    /// store's own hold keeps its token (taken again, under any holder
    /// name); a new one gets a [`new_token`].
    pub(crate) fn to(holder: &str, current: Option<&Grant>) -> Grant {
        Grant { holder: holder.to_owned(), token: current.map_or_else(new_token, |g| g.token) }
    }

    /// The hold this grant is, of `session_id`.
    pub(crate) fn hold(&self, session_id: &str) -> Hold {
        tracing::debug!(session_id, holder = %self.holder, token = self.token, "took hold");
        Hold::new(session_id, &self.holder, self.token, None)
    }

    /// Whether `hold` names this grant: its holder and its token.
    pub(crate) fn is(&self, hold: &Hold) -> bool {
        self.holder == hold.holder() && self.token == hold.token()
    }
}

/// `locked`: a renewal of a hold the store no longer keeps (released,
/// closed) or never granted; its lock is gone, a hold must be taken again.
pub(crate) fn not_kept(hold: &Hold) -> StoreError {
    StoreError::Locked {
        what: format!(
            "session {:?} (the hold of {:?} with token {} was released, or this store never held it; take a hold again)",
            hold.session_id(),
            hold.holder(),
            hold.token()
        ),
    }
}

/// The token of a new grant: the time in microseconds since the epoch, and
/// larger than every token granted before in this process, so a hold given
/// up and taken again is another hold, and a stale one never names the
/// current one.
fn new_token() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let next = |last: u64| now.max(last.saturating_add(1));
    match LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(next(last))) {
        Ok(last) | Err(last) => next(last),
    }
}
