//! Tests that try to break Palimpsest, and the property oracles the fuzz
//! targets share with them. Not published: nothing here is an API.
//!
//! * `tests/it`: SIGKILL crash tests of both stores, hostile input, racing
//!   processes, and the stable-toolchain (proptest) runs of the oracles.
//! * [`oracle`]: one function per fuzz target, taking arbitrary bytes and
//!   panicking exactly when a property is broken. The `cargo fuzz` targets in
//!   `fuzz/` and the proptest tests call the same functions.
//! * [`SplitMix64`] and [`seed_from_env`]: seeded, replayable randomness.
//!
//! See `docs/reliability.md` for what is tested and what was found.
//!
//! ```
//! use palimpsest_torture::SplitMix64;
//!
//! // Kill `i` of a run is reproducible from the run's seed alone.
//! let run = SplitMix64::new(42);
//! assert_eq!(run.fork(3).next_u64(), SplitMix64::new(42).fork(3).next_u64());
//! ```

pub mod oracle;
mod rng;

pub use rng::{seed_from_env, SplitMix64};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
