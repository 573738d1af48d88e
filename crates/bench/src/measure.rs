//! Timing and memory probes: medians of repeated runs, and resident memory
//! read from `/proc/self/status`.

use std::time::{Duration, Instant};

/// Runs `setup` then times `run` on its output, `runs` times; returns the
/// median. Setup time is not counted.
pub(crate) fn median<S, T>(
    runs: usize,
    mut setup: impl FnMut() -> S,
    mut run: impl FnMut(S) -> T,
) -> Duration {
    let mut times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let input = setup();
            let start = Instant::now();
            let out = run(input);
            let elapsed = start.elapsed();
            drop(std::hint::black_box(out));
            elapsed
        })
        .collect();
    times.sort_unstable();
    times[times.len() / 2]
}

/// The medians of `a` and `b`, timed in turns (a, b, a, b, ...) so that
/// both meet the same moods of a noisy machine: for a ratio of two short
/// timings (milliseconds, a sync each), where two runs one after the other
/// drifted by more than the difference they measure.
pub(crate) fn medians_alternated<S, T, U>(
    runs: usize,
    mut setup: impl FnMut() -> S,
    mut a: impl FnMut(S) -> T,
    mut b: impl FnMut(S) -> U,
) -> (Duration, Duration) {
    let mut times = (Vec::new(), Vec::new());
    for _ in 0..runs.max(1) {
        times.0.push(median(1, &mut setup, &mut a));
        times.1.push(median(1, &mut setup, &mut b));
    }
    for t in [&mut times.0, &mut times.1] {
        t.sort_unstable();
    }
    (times.0[times.0.len() / 2], times.1[times.1.len() / 2])
}

/// Nanoseconds per call of `f`, the median of several batches of `calls`.
pub(crate) fn ns_per_call(calls: u64, mut f: impl FnMut() -> usize) -> f64 {
    let d = median(
        7,
        || (),
        |()| {
            let mut acc = 0usize;
            for _ in 0..calls {
                acc = acc.wrapping_add(f());
            }
            std::hint::black_box(acc)
        },
    );
    d.as_nanos() as f64 / calls as f64
}

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`), where Linux has one.
pub(crate) fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
