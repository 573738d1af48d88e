//! Timing and memory probes: medians of repeated runs, and resident memory
//! read from `/proc/self/status`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether [`medians_alternated`] prints each of its turns (`--turns`).
static SHOW_TURNS: AtomicBool = AtomicBool::new(false);

/// Prints every turn of the figures timed in turns, on stderr: the spread
/// behind a median, where the machine's noise is what is in question.
pub(crate) fn show_turns() {
    SHOW_TURNS.store(true, Ordering::Relaxed);
}

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
    what: &str,
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
    if SHOW_TURNS.load(Ordering::Relaxed) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{}", turns_line(what, &times.0, &times.1));
        }
    }
    for t in [&mut times.0, &mut times.1] {
        t.sort_unstable();
    }
    (times.0[times.0.len() / 2], times.1[times.1.len() / 2])
}

/// One line for `--turns`: each turn's two timings in ms and `b / a`,
/// the ratio the report gives of the medians (above 1: `a` is faster).
fn turns_line(what: &str, a: &[Duration], b: &[Duration]) -> String {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let turns: Vec<String> =
        a.iter().zip(b).map(|(a, b)| format!("{:.2}/{:.2} {:.2}x", ms(a), ms(b), ms(b) / ms(a))).collect();
    format!("    turns of {what} (ms, ms, ratio): {}", turns.join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_line_gives_each_turn_and_its_ratio_in_order() {
        let ms = Duration::from_millis;
        assert_eq!(
            turns_line("x against y", &[ms(100), ms(50)], &[ms(90), ms(60)]),
            "    turns of x against y (ms, ms, ratio): 100.00/90.00 0.90x, 50.00/60.00 1.20x"
        );
    }
}
