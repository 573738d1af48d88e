//! One writer per session: [`Hold`], what a store grants a writer, and
//! [`KeptHold`], which takes one and keeps it for as long as it lives.
//!
//! Every backend keeps two writers of one session apart in its own way,
//! behind one API ([`SessionStore::hold`], [`renew`](SessionStore::renew),
//! [`release`](SessionStore::release)):
//!
//! * **A lease with a fencing token** (PostgreSQL across machines, SQLite
//!   across the processes of one machine). The hold names its holder and
//!   expires unless renewed; while it is live no other holder gets it
//!   (`locked`, naming the holder and the expiry) and no other store
//!   appends to the session. Once it has expired another holder takes it
//!   over with a larger token, and every append checks, in the transaction
//!   that would write it, that its store's token is still the session's:
//!   a first holder that was only paused (`SIGSTOP`, a long GC, a network
//!   partition) is refused when it wakes, before it writes anything.
//! * **An operating-system lock** (JSONL): the session file is locked by
//!   the store that holds it until it is released or the process ends, so
//!   the hold has no expiry ([`Hold::expires_at`] is `None`) and a dead
//!   holder loses it at once.
//! * **None** (the in-memory store, and the trait's default): a store whose
//!   sessions one process alone can reach grants no hold
//!   ([`SessionStore::hold`] returns `Ok(None)`).
//!
//! The agent loop takes a hold through [`KeptHold`] when it is asked to
//! (`AgentLoopBuilder::hold` in `palimpsest-core-agent-loop`), as the
//! `palimpsest` CLI's `run` and `demo` do.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::error::StoreError;
use crate::store::SessionStore;

/// A hold on one session, as a store granted it.
///
/// The store that took it remembers it, so its appends to the session are
/// fenced by it; this value says what was granted. A hold that expires
/// must be renewed before [`expires_at`](Hold::expires_at) with
/// [`SessionStore::renew`] ([`KeptHold`] does it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    session_id: String,
    holder: String,
    token: u64,
    expires_at: Option<SystemTime>,
}

impl Hold {
    /// A hold as a backend grants it: `token` larger for every new grant of
    /// the session's hold (a renewal keeps it), `expires_at` by the clock
    /// that decides expiry (the server's, for a database), `None` for a
    /// hold that lasts until it is released or its process ends.
    pub fn new(
        session_id: impl Into<String>,
        holder: impl Into<String>,
        token: u64,
        expires_at: Option<SystemTime>,
    ) -> Hold {
        Hold { session_id: session_id.into(), holder: holder.into(), token, expires_at }
    }

    /// The same hold, expiring at `expires_at` (a renewal).
    pub fn renewed(&self, expires_at: SystemTime) -> Hold {
        Hold { expires_at: Some(expires_at), ..self.clone() }
    }

    /// The session held.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Who holds it: the name given to [`SessionStore::hold`].
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token: larger for every new grant of the session's hold
    /// (a renewal keeps it). Appends made under an older token are refused.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// When the hold expires unless renewed, by the clock that decides it;
    /// `None` for a hold that lasts until released or until its process
    /// ends (an operating-system lock).
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }
}

/// A time as RFC 3339 in UTC with milliseconds, e.g.
/// `2026-12-03T07:30:00.000Z`, for the messages that name a hold's expiry.
pub fn describe_time(t: SystemTime) -> String {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => palimpsest_core_session::time::utc(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        Err(e) => format!("{:.3} s before 1970-01-01T00:00:00Z", e.duration().as_secs_f64()),
    }
}

/// A hold taken and kept: renewed in the background (at a third of its
/// time to live) while this value lives, released when it is dropped.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use palimpsest_core_session::SessionHeader;
/// use palimpsest_persistence::{KeptHold, MemoryStore, SessionStore};
///
/// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
/// store.create(&SessionHeader::new("s1", 0))?;
/// let kept = KeptHold::take(store, "s1", "worker-a", Duration::from_secs(30))?;
/// // The in-memory store grants no hold: one process alone reaches it.
/// assert!(kept.hold().is_none());
/// # Ok::<(), palimpsest_persistence::StoreError>(())
/// ```
#[derive(Debug)]
pub struct KeptHold {
    store: Arc<dyn SessionStore>,
    hold: Option<Hold>,
    renewer: Option<(mpsc::Sender<()>, JoinHandle<Hold>)>,
}

impl KeptHold {
    /// Takes the hold on `session_id` for `holder` ([`SessionStore::hold`])
    /// and keeps it. `locked`, naming the holder, while another holds it.
    pub fn take(
        store: Arc<dyn SessionStore>,
        session_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<KeptHold, StoreError> {
        let hold = store.hold(session_id, holder, ttl)?;
        let renewer = match &hold {
            Some(h) if h.expires_at().is_some() => {
                Some(renew_in_background(Arc::clone(&store), h.clone(), ttl))
            }
            _ => None,
        };
        if let Some(h) = &hold {
            tracing::debug!(session_id, holder, token = h.token(), "holding the session");
        }
        Ok(KeptHold { store, hold, renewer })
    }

    /// What was granted, `None` from a store that grants no holds.
    pub fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }
}

/// Renews `hold` every third of `ttl` until told to stop (or the channel
/// is dropped); returns the last hold granted.
fn renew_in_background(
    store: Arc<dyn SessionStore>,
    first: Hold,
    ttl: Duration,
) -> (mpsc::Sender<()>, JoinHandle<Hold>) {
    let (stop, stopped) = mpsc::channel::<()>();
    let renewer = std::thread::spawn(move || {
        let mut hold = first;
        loop {
            match stopped.recv_timeout(ttl / 3) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return hold,
            }
            match store.renew(&hold, ttl) {
                Ok(renewed) => hold = renewed,
                Err(e) => {
                    // Appends are fenced whatever happens here: one made
                    // after a takeover is refused with `locked`.
                    tracing::warn!(session_id = %hold.session_id(), error = %e, "could not renew the hold");
                    if e.code() == "locked" || e.code() == "not-found" {
                        let _ = stopped.recv();
                        return hold;
                    }
                }
            }
        }
    });
    (stop, renewer)
}

impl Drop for KeptHold {
    fn drop(&mut self) {
        let last = match self.renewer.take() {
            Some((stop, renewer)) => {
                drop(stop);
                renewer.join().ok()
            }
            None => self.hold.take(),
        };
        let Some(hold) = last else { return };
        if let Err(e) = self.store.release(&hold) {
            tracing::debug!(session_id = %hold.session_id(), error = %e, "could not release the hold; it expires");
        }
    }
}

/// A session's stored hold, as a backend that keeps holds as records (a
/// `holds` table) reads it: the pieces of the lease-and-fence rule every
/// such backend shares ([`grant`], [`check_fence`]), so the rule is written
/// once. Whether it is live, and for how long, is by the clock that
/// decides expiry (the database server's).
#[derive(Debug, Clone, PartialEq)]
pub struct HoldRecord {
    /// Who holds it.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// When it expires.
    pub expires_at: SystemTime,
    /// Whether it has not expired yet.
    pub live: bool,
    /// Seconds until it expires (negative once expired).
    pub seconds_left: f64,
}

impl HoldRecord {
    /// `"worker-a" (token 7) until 2026-12-03T07:30:00.000Z, 12.5 s from now`.
    pub fn describe(&self) -> String {
        let when = if self.live {
            format!("{:.1} s from now", self.seconds_left)
        } else {
            format!("expired {:.1} s ago", -self.seconds_left)
        };
        format!("{:?} (token {}) until {}, {when}", self.holder, self.token, describe_time(self.expires_at))
    }
}

/// The token a request for the hold of `session_id` by `holder` gets, from
/// the stored record (if any) and the token of this store's own hold
/// (`ours`): this store's live hold keeps its token (a renewal); a live
/// hold of another holder name refuses (`locked`, naming it); anything
/// else (expired, released, the same holder name restarted, no record) is
/// a new grant with a token larger than the record's and at least
/// `floor` (a backend passes the time in microseconds, so that a token
/// outlives a deleted and recreated session's record).
pub fn grant(
    session_id: &str,
    holder: &str,
    record: Option<&HoldRecord>,
    ours: Option<u64>,
    floor: u64,
) -> Result<u64, StoreError> {
    match record {
        Some(r) if r.live && ours == Some(r.token) => Ok(r.token),
        Some(r) if r.live && r.holder != holder => {
            Err(StoreError::Locked { what: format!("session {session_id:?} (hold of {})", r.describe()) })
        }
        // Only a record written by hand can hold the largest token; no
        // larger one exists to fence it out.
        Some(r) => r.token.checked_add(1).map(|next| next.max(floor)).ok_or_else(|| StoreError::Corrupt {
            location: format!("the hold of session {session_id:?}"),
            detail: format!(
                "its token is {}, the largest there is: no later hold can be fenced from it",
                r.token
            ),
            cause: None,
        }),
        None => Ok(floor),
    }
}

/// The fence, checked in the transaction of every write (an append, a
/// delete, a renewal): may a store holding token `ours` (or no hold) write
/// a session whose stored hold is `record`? Its own token, or no live hold
/// of anyone's; otherwise `locked`, saying who holds it.
pub fn check_fence(
    session_id: &str,
    ours: Option<u64>,
    record: Option<&HoldRecord>,
) -> Result<(), StoreError> {
    match (ours, record) {
        (Some(t), Some(r)) if r.token == t => Ok(()),
        (Some(t), Some(r)) => Err(StoreError::Locked {
            what: format!(
                "session {session_id:?} (this store's hold, token {t}, was taken over: hold of {})",
                r.describe()
            ),
        }),
        (Some(t), None) => Err(StoreError::Locked {
            what: format!(
                "session {session_id:?} (this store's hold, token {t}, is gone: the session was deleted)"
            ),
        }),
        (None, Some(r)) if r.live => {
            Err(StoreError::Locked { what: format!("session {session_id:?} (hold of {})", r.describe()) })
        }
        (None, _) => Ok(()),
    }
}

/// The check of a renewal of the hold with `token`, by a store whose own
/// hold of the session is `ours` (forgotten once it released it): the
/// fence ([`check_fence`]), and a hold that is no longer live (released,
/// or run out) comes back only for the store that still holds it. A
/// released hold renewed (a background renewal racing the release) would
/// otherwise come back with no store that knows its token: every writer,
/// its own included, fenced out until it ran out.
pub fn check_renewal(
    session_id: &str,
    token: u64,
    ours: Option<u64>,
    record: Option<&HoldRecord>,
) -> Result<(), StoreError> {
    check_fence(session_id, Some(token), record)?;
    match record {
        Some(r) if !r.live && ours != Some(token) => Err(StoreError::Locked {
            what: format!(
                "session {session_id:?} (the hold with token {token} was released, or this store never held it; take a hold again)"
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn record(holder: &str, token: u64, live: bool) -> HoldRecord {
        let expires_at = UNIX_EPOCH + Duration::from_millis(1_796_282_400_123);
        HoldRecord {
            holder: holder.into(),
            token,
            expires_at,
            live,
            seconds_left: if live { 2.26 } else { -1.0 },
        }
    }

    #[test]
    fn times_and_records_print_as_rfc3339_utc() {
        assert_eq!(describe_time(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(describe_time(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            record("a", 3, true).describe(),
            "\"a\" (token 3) until 2026-12-03T07:20:00.123Z, 2.3 s from now"
        );
        assert_eq!(
            record("a", 3, false).describe(),
            "\"a\" (token 3) until 2026-12-03T07:20:00.123Z, expired 1.0 s ago"
        );
    }

    #[test]
    fn a_released_hold_is_not_renewed_but_one_that_ran_out_is_for_its_store() {
        let ran_out = record("a", 7, false);
        assert_eq!(
            check_renewal("s", 7, Some(7), Some(&ran_out)).ok(),
            Some(()),
            "this store still holds it"
        );
        let released = check_renewal("s", 7, None, Some(&ran_out));
        assert_eq!(released.map_err(|e| e.code().to_owned()), Err("locked".to_owned()));
        let live = record("a", 7, true);
        assert_eq!(check_renewal("s", 7, None, Some(&live)).ok(), Some(()), "a live hold with its token");
        let taken = check_renewal("s", 7, Some(7), Some(&record("b", 8, true)));
        assert_eq!(taken.map_err(|e| e.code().to_owned()), Err("locked".to_owned()));
    }

    /// A record at the largest token (only a hand-made one can be): no
    /// larger token exists, so the grant is refused as `corrupt`, never
    /// wrapped around to a smaller token that an earlier holder could match.
    #[test]
    fn the_largest_token_cannot_be_followed_and_is_never_wrapped() {
        let expired = record("a", u64::MAX, false);
        let refused = grant("s", "b", Some(&expired), None, 100);
        assert_eq!(refused.map_err(|e| e.code().to_owned()), Err("corrupt".to_owned()));
        assert_eq!(grant("s", "b", Some(&record("a", u64::MAX - 1, false)), None, 100).ok(), Some(u64::MAX));
    }

    #[test]
    fn a_live_hold_is_renewed_for_its_store_refused_to_others_and_taken_over_once_expired() {
        let live = record("a", 7, true);
        assert_eq!(
            grant("s", "a", Some(&live), Some(7), 100).ok(),
            Some(7),
            "this store's own hold is renewed"
        );
        assert_eq!(
            grant("s", "a", Some(&live), None, 100).ok(),
            Some(100),
            "the same name restarted: a new token"
        );
        assert_eq!(
            grant("s", "a", Some(&live), None, 3).ok(),
            Some(8),
            "a new token is larger than the last"
        );
        let refused = grant("s", "b", Some(&live), None, 100).map(|_| ()).unwrap_err();
        assert_eq!(refused.code(), "locked");
        assert!(refused.to_string().contains("\"a\" (token 7)"), "{refused}");
        assert_eq!(
            grant("s", "b", Some(&record("a", 7, false)), None, 3).ok(),
            Some(8),
            "expired: taken over"
        );
        assert_eq!(grant("s", "b", None, None, 42).ok(), Some(42));
    }

    #[test]
    fn the_fence_lets_through_only_the_current_token_or_writers_of_an_unheld_session() {
        let live = record("a", 7, true);
        assert!(check_fence("s", Some(7), Some(&live)).is_ok());
        assert!(check_fence("s", Some(7), Some(&record("a", 7, false))).is_ok(), "expired, not taken over");
        assert!(check_fence("s", None, Some(&record("a", 7, false))).is_ok(), "nobody holds it");
        assert!(check_fence("s", None, None).is_ok());
        for (ours, rec) in [(Some(6), Some(&live)), (Some(6), None), (None, Some(&live))] {
            let e = check_fence("s", ours, rec).unwrap_err();
            assert_eq!(e.code(), "locked", "{ours:?} {rec:?}");
        }
    }
}
