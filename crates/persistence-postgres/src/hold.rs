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

use std::time::Duration;

pub use palimpsest_persistence::Hold;

/// A duration as the seconds `make_interval` takes: at least a
/// millisecond, and at most [`LONGEST_HOLD_SECS`], since a hold for
/// `Duration::MAX` ended past PostgreSQL's timestamps (`io`, "timestamp
/// out of range") where the SQLite store took it.
pub(crate) fn ttl_seconds(ttl: Duration) -> f64 {
    ttl.as_secs_f64().clamp(0.001, LONGEST_HOLD_SECS)
}

/// The longest hold, in seconds: a hundred years, for "until released".
pub(crate) const LONGEST_HOLD_SECS: f64 = 100.0 * 365.25 * 86_400.0;
