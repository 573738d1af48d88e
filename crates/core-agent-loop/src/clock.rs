//! Injectable time and message ids, so a run can be replayed byte for byte.
//!
//! The loop reads the [`Clock`] once per event it writes and asks the
//! [`IdGenerator`] once per message it writes, always in the same order for
//! the same inputs. With a [`ManualClock`] and [`SequentialIds`] two runs of
//! the same script write identical logs, which is what the snapshot tests
//! and the demo rely on.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The clocks live in `palimpsest-persistence`, so a
/// [`DurableSession`](palimpsest_persistence::DurableSession) can stamp its
/// own appends with the same clock the loop uses; they are re-exported here
/// under their old paths.
pub use palimpsest_persistence::{Clock, ManualClock, SystemClock};

/// A source of message ids (`Message.id`), unique within a session.
pub trait IdGenerator: Send + Sync + fmt::Debug {
    /// The next id.
    fn next_id(&self) -> String;
}

/// Ids `{prefix}1`, `{prefix}2`, ...: deterministic, for tests and demos.
///
/// ```
/// use palimpsest_core_agent_loop::{IdGenerator, SequentialIds};
///
/// let ids = SequentialIds::new("m");
/// assert_eq!(ids.next_id(), "m1");
/// assert_eq!(ids.next_id(), "m2");
/// ```
#[derive(Debug)]
pub struct SequentialIds {
    prefix: String,
    next: AtomicU64,
}

impl SequentialIds {
    /// Ids starting at `{prefix}1`.
    pub fn new(prefix: impl Into<String>) -> SequentialIds {
        SequentialIds::starting_at(prefix, 1)
    }

    /// Ids starting at `{prefix}{first}` (to continue after a resume).
    pub fn starting_at(prefix: impl Into<String>, first: u64) -> SequentialIds {
        SequentialIds { prefix: prefix.into(), next: AtomicU64::new(first) }
    }
}

impl IdGenerator for SequentialIds {
    fn next_id(&self) -> String {
        format!("{}{}", self.prefix, self.next.fetch_add(1, Ordering::SeqCst))
    }
}

/// The default generator: `msg-` followed by the time in nanoseconds, the
/// process id and a counter, in hex. Unique across processes without a
/// random-number dependency; not meant to be unguessable.
#[derive(Debug, Default)]
pub struct UniqueIds {
    counter: AtomicU64,
}

impl IdGenerator for UniqueIds {
    fn next_id(&self) -> String {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("msg-{nanos:x}-{:x}-{n:x}", std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_do_not_repeat() {
        let ids = UniqueIds::default();
        let a = ids.next_id();
        let b = ids.next_id();
        assert_ne!(a, b);
        assert!(a.starts_with("msg-"));
    }

    #[test]
    fn the_loop_reexports_the_persistence_clocks() {
        let c = ManualClock::new(5);
        c.set(42);
        let clock: &dyn palimpsest_persistence::Clock = &c;
        assert_eq!(clock.now_ms(), 42);
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn sequential_ids_can_continue() {
        let ids = SequentialIds::starting_at("x-", 7);
        assert_eq!(ids.next_id(), "x-7");
    }
}
