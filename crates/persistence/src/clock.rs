//! [`Clock`]: where event times come from, so a [`DurableSession`](crate::DurableSession)
//! (and the agent loop above it) can stamp events itself, and a run can be
//! replayed byte for byte with a [`ManualClock`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of event times, in Unix epoch milliseconds.
///
/// Shared as an `Arc<dyn Clock>` by a [`DurableSession`](crate::DurableSession)
/// ([`with_clock`](crate::DurableSession::with_clock)) and the agent loop,
/// which re-exports this trait.
///
/// ```
/// use palimpsest_persistence::{Clock, SystemClock};
///
/// // 2020-01-01 in ms: any real clock is past it.
/// assert!(SystemClock.now_ms() > 1_577_836_800_000);
/// ```
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 reads as 0 rather than failing.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to, or by a fixed tick per reading.
///
/// ```
/// use palimpsest_persistence::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000).with_tick(10);
/// assert_eq!(clock.now_ms(), 1_000);
/// assert_eq!(clock.now_ms(), 1_010);
/// clock.advance(5);
/// assert_eq!(clock.now_ms(), 1_025);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
    tick: u64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: u64) -> ManualClock {
        ManualClock { now: AtomicU64::new(start), tick: 0 }
    }

    /// Advances by `tick` after every reading (0: stands still).
    pub fn with_tick(self, tick: u64) -> ManualClock {
        ManualClock { tick, ..self }
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.fetch_add(self.tick, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_set_and_system_clock_is_recent() {
        let c = ManualClock::new(5);
        c.set(42);
        assert_eq!(c.now_ms(), 42);
        assert_eq!(c.now_ms(), 42);
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
