//! [`SplitMix64`]: the one small seeded generator of the project's tests and
//! benchmarks (the kit's search corpus, the benchmark workload, the torture
//! tests' kill points), so that a seed means the same sequence everywhere.

/// A 64-bit SplitMix generator (Steele, Lea and Flood, 2014): tiny, fast,
/// and the same sequence on every platform for a given seed. Not for
/// cryptography.
///
/// ```
/// use palimpsest_persistence::testkit::SplitMix64;
///
/// let mut a = SplitMix64::new(7);
/// let mut b = SplitMix64::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0). The tiny modulo bias does not
    /// matter for choosing kill points.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A generator for sub-task `index`, independent of this one's sequence:
    /// kill `i` of a run with seed `s` always gets `SplitMix64::new(s).fork(i)`.
    pub fn fork(&self, index: u64) -> SplitMix64 {
        let mut mixer = SplitMix64::new(self.state ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        SplitMix64::new(mixer.next_u64())
    }
}
