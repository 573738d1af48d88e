//! [`Hold`]: one writer per session across machines, as a lease with a
//! fencing token.
//!
//! A hold names its holder and expires at a time the *server* sets (its
//! clock, never the client's). While a hold is live no other holder gets
//! it (`locked`, naming the holder and when the hold expires), and no
//! store without it appends to or deletes the session. Once it has
//! expired another holder may take it over; the takeover gets a new,
//! larger token, and every append checks, in the same transaction that
//! writes it, that the token of the store's hold is still the session's.
//! So a first holder that was only paused (a stopped process, a long GC,
//! a network partition) and wakes up after the takeover is refused before
//! it writes anything, however late it wakes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A hold on one session, as [`PgStore::hold`](crate::PgStore::hold) granted it.
///
/// The store that took it remembers its token, so its appends (through
/// [`SessionStore::append`](palimpsest_persistence::SessionStore::append),
/// as the agent loop makes them) are fenced by it; this value says what
/// was granted. Renew it before [`expires_at`](Hold::expires_at) with
/// [`PgStore::renew`](crate::PgStore::renew).
///
/// ```no_run
/// use std::time::Duration;
/// use palimpsest_persistence_postgres::PgStore;
///
/// let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/test")?;
/// let hold = store.hold("session-1", "worker-a", Duration::from_secs(30))?;
/// assert_eq!((hold.session_id(), hold.holder()), ("session-1", "worker-a"));
/// // ... append; renew well before hold.expires_at() ...
/// store.release(&hold)?;
/// # Ok::<(), palimpsest_persistence::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub(crate) session_id: String,
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) expires_at: SystemTime,
}

impl Hold {
    /// The session held.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Who holds it: the name given to [`PgStore::hold`](crate::PgStore::hold).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token: larger for every new grant of the session's hold
    /// (a renewal keeps it). Appends made under an older token are refused.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// When the hold expires, by the server's clock.
    pub fn expires_at(&self) -> SystemTime {
        self.expires_at
    }
}

/// A `holds` row as the store reads it.
#[derive(Debug, Clone)]
pub(crate) struct HoldRow {
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) expires_at: SystemTime,
    /// Whether it has not expired, by the server's clock.
    pub(crate) live: bool,
    /// Seconds until it expires (negative once expired), by the server's clock.
    pub(crate) seconds_left: f64,
}

impl HoldRow {
    /// `"worker-a" (token 7) until 2026-12-03T07:30:00.000Z, 12.5 s from now`.
    pub(crate) fn describe(&self) -> String {
        let when = if self.live {
            format!("{:.1} s from now", self.seconds_left)
        } else {
            format!("expired {:.1} s ago", -self.seconds_left)
        };
        format!("{:?} (token {}) until {}, {when}", self.holder, self.token, rfc3339(self.expires_at))
    }
}

/// A time as RFC 3339 in UTC with milliseconds, e.g. `2026-12-03T07:30:00.000Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (negative, d) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (false, d),
        Err(e) => (true, e.duration()),
    };
    if negative {
        return format!("{:.3} s before 1970-01-01T00:00:00Z", d.as_secs_f64());
    }
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    palimpsest_core_session::time::utc(ms)
}

/// A duration as the seconds `make_interval` takes, at least a millisecond.
pub(crate) fn ttl_seconds(ttl: Duration) -> f64 {
    ttl.as_secs_f64().max(0.001)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_282_400_123);
        assert_eq!(rfc3339(t), "2026-12-03T07:20:00.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        let row = HoldRow { holder: "a".into(), token: 3, expires_at: t, live: true, seconds_left: 2.26 };
        assert_eq!(row.describe(), "\"a\" (token 3) until 2026-12-03T07:20:00.123Z, 2.3 s from now");
    }
}
