//! `cargo xtask fuzz [--seconds N] [TARGET]`: runs the `cargo fuzz` targets
//! in `fuzz/` (all of them, or TARGET), each for N seconds (default 60),
//! then prints how many inputs each ran and whether any crashed.
//!
//! Needs `cargo-fuzz` (`cargo install cargo-fuzz`). cargo-fuzz uses nightly
//! compiler flags; on a stable toolchain this sets `RUSTC_BOOTSTRAP=1`,
//! which lets stable rustc accept them. Each target starts from the
//! committed seed corpus `fuzz/corpus/TARGET` and writes what it finds to
//! the ignored `fuzz/corpus-work/TARGET`, so the committed corpus stays
//! small; a crash is saved under `fuzz/artifacts/TARGET`. Targets are built
//! with debug assertions and overflow checks (`--debug-assertions`), which
//! cargo-fuzz's release build otherwise leaves off. The JSON targets
//! use the dictionary `fuzz/dict/json.dict`. CI does not run
//! this: it runs the same properties through proptest on stable
//! (`crates/torture/tests/it/oracles.rs`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

/// The targets, in the order they run.
pub(crate) const TARGETS: &[&str] = &["jsonl_load", "surface_ops", "seed_events"];

/// The libFuzzer dictionary (in `fuzz/`) of a target whose input is JSON:
/// the contract's keys and values and numbers at the edges of `u64`.
fn dictionary(target: &str) -> Option<&'static str> {
    matches!(target, "jsonl_load" | "seed_events").then_some("dict/json.dict")
}

/// What the command was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) seconds: u64,
    pub(crate) targets: Vec<&'static str>,
}

/// Reads `[--seconds N] [TARGET]`.
pub(crate) fn parse_args(args: &[String]) -> anyhow::Result<Plan> {
    let mut plan = Plan { seconds: 60, targets: TARGETS.to_vec() };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--seconds" => {
                let n = rest.next().context("--seconds needs a number")?;
                plan.seconds = n.parse().with_context(|| format!("--seconds {n}: not a number"))?;
            }
            name => match TARGETS.iter().find(|t| **t == name) {
                Some(t) => plan.targets = vec![t],
                None => bail!("unknown fuzz target `{name}`; the targets are {}", TARGETS.join(", ")),
            },
        }
    }
    Ok(plan)
}

/// How one target's run went, read from libFuzzer's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) executions: Option<u64>,
    pub(crate) new_units: Option<u64>,
    /// Where libFuzzer saved the input that crashed the target.
    pub(crate) crash: Option<String>,
}

impl Outcome {
    /// Takes what it needs from one line of libFuzzer's output (run with
    /// `-print_final_stats=1`).
    pub(crate) fn read(&mut self, line: &str) {
        let stat = |name: &str| line.strip_prefix(name).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = stat("stat::number_of_executed_units:") {
            self.executions = Some(n);
        } else if let Some(n) = stat("stat::new_units_added:") {
            self.new_units = Some(n);
        } else if let Some(at) = line.find("Test unit written to ") {
            self.crash = Some(line[at + "Test unit written to ".len()..].trim().to_owned());
        }
    }
}

/// Runs each planned target for the planned time, then prints a summary.
pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let plan = parse_args(args)?;
    let fuzz_dir = root.join("fuzz");
    let mut outcomes = Vec::new();
    for target in &plan.targets {
        let work = fuzz_dir.join("corpus-work").join(target);
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        eprintln!("==> fuzz {target} for {} s", plan.seconds);
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut child = Command::new(cargo)
            .current_dir(&fuzz_dir)
            .env("RUSTC_BOOTSTRAP", "1")
            // Debug assertions and overflow checks on: an arithmetic bug is a crash.
            .args(["fuzz", "run", "--debug-assertions", target])
            .arg(format!("corpus-work/{target}"))
            .arg(format!("corpus/{target}"))
            .args(["--", &format!("-max_total_time={}", plan.seconds), "-print_final_stats=1"])
            .args(dictionary(target).map(|d| format!("-dict={d}")))
            .stderr(Stdio::piped())
            .spawn()
            .context("running `cargo fuzz` (install it with `cargo install cargo-fuzz`)")?;
        let mut outcome = Outcome::default();
        if let Some(stderr) = child.stderr.take() {
            for line in BufReader::new(stderr).lines() {
                let line = line.context("reading the fuzzer's output")?;
                eprintln!("{line}");
                outcome.read(&line);
            }
        }
        let status = child.wait().context("waiting for `cargo fuzz`")?;
        if !status.success() && outcome.crash.is_none() {
            bail!("`cargo fuzz run {target}` failed ({status}); is cargo-fuzz installed?");
        }
        outcomes.push((*target, outcome));
    }
    println!("\n{:<12} {:>12} {:>10}  result", "target", "executions", "new units");
    for (target, o) in &outcomes {
        let show = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
        let result = o.crash.as_deref().map_or("no crash".to_owned(), |path| format!("CRASH: {path}"));
        println!("{target:<12} {:>12} {:>10}  {result}", show(o.executions), show(o.new_units));
    }
    let crashed: Vec<&str> = outcomes.iter().filter(|(_, o)| o.crash.is_some()).map(|(t, _)| *t).collect();
    if !crashed.is_empty() {
        bail!("crashed: {}; replay with `cargo fuzz run TARGET ARTIFACT` in fuzz/", crashed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_choose_the_time_and_the_targets() {
        assert_eq!(parse_args(&[]).unwrap(), Plan { seconds: 60, targets: TARGETS.to_vec() });
        assert_eq!(
            parse_args(&args(&["--seconds", "5", "surface_ops"])).unwrap(),
            Plan { seconds: 5, targets: vec!["surface_ops"] }
        );
        assert!(parse_args(&args(&["--seconds"])).is_err());
        assert!(parse_args(&args(&["--seconds", "x"])).is_err());
        let unknown = parse_args(&args(&["nope"])).unwrap_err().to_string();
        assert!(unknown.contains("jsonl_load, surface_ops, seed_events"), "{unknown}");
    }

    #[test]
    fn the_summary_is_read_from_libfuzzers_output() {
        let mut o = Outcome::default();
        for line in [
            "#11275\tDONE   cov: 4356 ft: 12627 corp: 435/1196Kb lim: 5799 exec/s: 536 rss: 409Mb",
            "stat::number_of_executed_units: 11275",
            "stat::average_exec_per_sec:     536",
            "stat::new_units_added:          326",
        ] {
            o.read(line);
        }
        assert_eq!(o, Outcome { executions: Some(11275), new_units: Some(326), crash: None });
        o.read(
            "artifact_prefix='artifacts/jsonl_load/'; Test unit written to artifacts/jsonl_load/crash-1f2e",
        );
        assert_eq!(o.crash.as_deref(), Some("artifacts/jsonl_load/crash-1f2e"));
    }

    /// The targets listed here are the ones `fuzz/Cargo.toml` declares,
    /// each with a committed seed corpus.
    #[test]
    fn every_target_is_declared_and_has_a_seed_corpus() {
        let root = crate::project_root();
        let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).unwrap();
        let declared: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"'))
            .collect();
        assert_eq!(declared[1..], *TARGETS, "fuzz/Cargo.toml's [[bin]] names (after the package's)");
        for target in TARGETS {
            if let Some(dict) = dictionary(target) {
                assert!(root.join("fuzz").join(dict).is_file(), "{target}: no {dict}");
            }
            let seeds =
                std::fs::read_dir(root.join("fuzz/corpus").join(target)).map(|d| d.count()).unwrap_or(0);
            assert!(seeds > 0, "fuzz/corpus/{target} has no seed inputs");
        }
    }
}
