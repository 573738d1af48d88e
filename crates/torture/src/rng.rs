//! [`seed_from_env`], which lets a failing torture run be replayed
//! exactly. The generator itself, [`SplitMix64`], is the contract kit's
//! (`palimpsest_persistence::testkit::SplitMix64`), shared with the
//! benchmarks; it is re-exported here.

pub use palimpsest_persistence::testkit::SplitMix64;

/// The seed of a randomized run: the value of the environment variable
/// `var` if it is set (decimal, or hex with `0x`), else a fresh one from the
/// clock and the process id. Returns the seed and whether it was replayed.
///
/// ```
/// use palimpsest_torture::seed_from_env;
///
/// let (seed, replayed) = seed_from_env("PALIMPSEST_DOCTEST_SEED_UNSET");
/// assert!(!replayed);
/// let _ = seed;
/// ```
pub fn seed_from_env(var: &str) -> (u64, bool) {
    if let Ok(text) = std::env::var(var) {
        let text = text.trim();
        let parsed = match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        };
        if let Some(seed) = parsed {
            return (seed, true);
        }
        tracing::warn!(var, value = text, "not a seed (decimal or 0x hex); using a fresh one");
    }
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (SplitMix64::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64(), false)
}
