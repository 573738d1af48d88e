//! `--turns`: the built benchmark binary prints each turn of a figure timed
//! in turns against its baseline, and only when asked.

use std::process::Command;

/// The stderr of `palimpsest-bench --only sqlite-load --sizes 400` with
/// `extra` arguments, after checking that it succeeded.
fn stderr_of(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_palimpsest-bench"))
        .args(["--only", "sqlite-load", "--sizes", "400"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn turns_are_printed_one_entry_per_turn_when_asked() {
    let stderr = stderr_of(&["--turns"]);
    let prefix =
        "turns of the sqlite load + validate of 400 events against the bare select (ms, ms, ratio): ";
    let line = stderr
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no turns line in {stderr}"));
    let turns: Vec<&str> = line.split(", ").collect();
    // Seven turns at least, each "LOAD/SELECT RATIOx" with SELECT / LOAD.
    assert!(turns.len() >= 7, "{line}");
    for turn in turns {
        let (times, ratio) = turn.split_once(' ').unwrap();
        let (load, select) = times.split_once('/').unwrap();
        let (load, select): (f64, f64) = (load.parse().unwrap(), select.parse().unwrap());
        let ratio: f64 = ratio.strip_suffix('x').unwrap().parse().unwrap();
        assert!(load > 0.0 && select > 0.0, "{turn}");
        // Both times are rounded to 10 µs: a few percent of a turn here.
        assert!((ratio - select / load).abs() < 0.01 + 0.03 * ratio, "{turn}");
    }
    assert!(!stderr_of(&[]).contains("turns of"), "turns printed without --turns");
}
