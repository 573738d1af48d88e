//! The Palimpsest benchmark suite (`cargo xtask bench` runs it in release).
//!
//! Every figure is measured in this one process and run, beside a baseline
//! measured in the same run on the same bytes, because these machines are
//! noisy: ratios are what carry across runs. Nothing here asserts a timing.
//!
//! ```text
//! palimpsest-bench [--quick] [--sizes 10000,100000] [--only SECTION] [--json FILE]
//! ```

mod agent;
mod cli;
mod measure;
mod pg;
mod report;
mod search;
mod sections;
mod stores;
mod stream;
mod workload;

use std::process::ExitCode;

use report::Row;

/// The workload at one size, with its JSONL bytes.
pub(crate) struct Workload {
    /// Number of events.
    pub(crate) n: usize,
    /// The header.
    pub(crate) header: palimpsest_core_session::SessionHeader,
    /// The events.
    pub(crate) events: Vec<palimpsest_core_session::Event>,
    /// The canonical JSONL file.
    pub(crate) bytes: Vec<u8>,
    /// Index one past each turn's last event: the per-turn batches.
    pub(crate) turn_ends: Vec<usize>,
}

impl Workload {
    fn new(n: usize) -> Workload {
        let (header, events) = workload::generate(n, 42);
        Workload::of(n, header, events)
    }

    /// The workload of a session that prunes its tool results
    /// ([`workload::generate_pruned`]).
    pub(crate) fn pruned(n: usize) -> Workload {
        let (header, events) = workload::generate_pruned(n, 42);
        Workload::of(n, header, events)
    }

    fn of(
        n: usize,
        header: palimpsest_core_session::SessionHeader,
        events: Vec<palimpsest_core_session::Event>,
    ) -> Workload {
        let bytes = palimpsest_core_session::jsonl::to_bytes(&header, &events);
        let mut turn_ends: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.event_type().as_str() == "turn/end")
            .map(|(i, _)| i + 1)
            .collect();
        if turn_ends.last() != Some(&n) {
            turn_ends.push(n);
        }
        Workload { n, header, events, bytes, turn_ends }
    }

    /// Runs per measurement: fewer for larger workloads.
    pub(crate) fn runs(&self) -> usize {
        match self.n {
            0..=20_000 => 9,
            20_001..=200_000 => 5,
            _ => 3,
        }
    }
}

struct Args {
    sizes: Vec<usize>,
    json: Option<String>,
    memory_probe: Option<String>,
    only: Option<String>,
    /// Child mode of the postgres section: store kind, target, session id.
    writer: Option<[String; 3]>,
    /// Writes the workload of N events to FILE and exits (for profiling
    /// the CLI on the same bytes the suite measures).
    workload_file: Option<(usize, String, bool)>,
    /// Child mode of the cli section: the command to run and measure.
    peak_of: Option<Vec<String>>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sizes: vec![10_000, 100_000, 1_000_000],
        json: None,
        memory_probe: None,
        only: None,
        writer: None,
        workload_file: None,
        peak_of: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.sizes = vec![10_000, 100_000],
            "--turns" => measure::show_turns(),
            "--sizes" => {
                let v = it.next().ok_or("--sizes needs a list, e.g. 1000,10000")?;
                args.sizes = v
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|_| format!("not a size: {s}")))
                    .collect::<Result<_, _>>()?;
            }
            "--only" => args.only = Some(it.next().ok_or("--only needs a section name")?),
            "--json" => args.json = Some(it.next().ok_or("--json needs a file")?),
            "--workload-file" => {
                let n = it.next().ok_or("--workload-file needs a size and a file")?;
                let n = n.parse().map_err(|_| format!("not a size: {n}"))?;
                args.workload_file = Some((n, it.next().ok_or("--workload-file needs a file")?, false));
            }
            "--pruned-workload-file" => {
                let n = it.next().ok_or("--pruned-workload-file needs a size and a file")?;
                let n = n.parse().map_err(|_| format!("not a size: {n}"))?;
                args.workload_file = Some((n, it.next().ok_or("--pruned-workload-file needs a file")?, true));
            }
            "--peak-of" => {
                args.peak_of = Some(it.by_ref().collect());
            }
            "--memory-probe" => args.memory_probe = Some(it.next().ok_or("--memory-probe needs a file")?),
            pg::WRITER_ARG => {
                let mut next =
                    || it.next().ok_or("the writer child mode needs a store kind, a target and an id");
                args.writer = Some([next()?, next()?, next()?]);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: palimpsest-bench [--quick] [--sizes N,N,...] [--only SECTION] [--json FILE] [--turns] | --workload-file N FILE | --pruned-workload-file N FILE"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some((n, file, pruned)) = &args.workload_file {
        let w = if *pruned { Workload::pruned(*n) } else { Workload::new(*n) };
        return match std::fs::write(file, &w.bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cannot write {file}: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Some(command) = &args.peak_of {
        // Child mode: run one command and report its time and peak memory.
        return match cli::peak_of(command) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(file) = args.memory_probe {
        // Child mode: load one file and report memory as JSON on stdout.
        return match sections::memory_probe(&file) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("memory probe failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some([kind, target, id]) = &args.writer {
        // Child mode: one concurrent writer of the postgres section.
        return match pg::writer_child(kind, target, id) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("writer failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(only) = &args.only {
        if !sections::ALL.iter().any(|(name, _)| name == only) {
            let names: Vec<&str> = sections::ALL.iter().map(|(n, _)| *n).collect();
            eprintln!("unknown section {only:?}; the sections are {}", names.join(", "));
            return ExitCode::from(2);
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    for &n in &args.sizes {
        eprintln!("workload: {n} events ...");
        let w = Workload::new(n);
        eprintln!(
            "  {} bytes of JSONL ({:.0} B/event)",
            w.bytes.len(),
            w.bytes.len() as f64 / n.max(1) as f64
        );
        for (name, section) in sections::ALL {
            if args.only.as_deref().is_some_and(|o| o != *name) {
                continue;
            }
            eprintln!("  {name} ...");
            match section(&w) {
                Ok(mut r) => rows.append(&mut r),
                Err(e) => {
                    eprintln!("  {name} failed: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    println!("{}", report::table(&rows));
    if let Some(path) = args.json {
        let text =
            serde_json::to_string_pretty(&report::json(&rows)).expect("a JSON value always serializes");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            return ExitCode::from(2);
        }
        eprintln!("wrote {path}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    //! The suite still works: every section runs at a tiny N and yields
    //! finite figures. (Benchmarks are not tests: nothing here checks speed.)

    use super::*;

    #[test]
    fn every_section_runs_at_a_tiny_size() {
        let w = Workload::new(400);
        assert_eq!(w.events.len(), 400);
        assert_eq!(w.turn_ends.last(), Some(&400));
        for (name, section) in sections::ALL {
            // The memory probe and the postgres section's writer processes
            // re-run this executable as a child; under `cargo test` that is
            // the test binary, so they are checked below.
            if *name == "rss" || *name == "postgres" || *name == "search" || *name == "cli" {
                continue;
            }
            let rows = section(&w).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!rows.is_empty(), "{name} measured nothing");
            for r in &rows {
                assert!(r.value.is_finite() && r.value > 0.0, "{name}: {} = {}", r.name, r.value);
                assert!(r.ratio().is_none_or(f64::is_finite), "{name}: {}", r.name);
            }
        }
        let table = report::table(&[]);
        assert!(table.starts_with("| section |"));
    }

    /// Needs the PostgreSQL server of `PALIMPSEST_TEST_PG_URL` (default
    /// `postgres://postgres@127.0.0.1:5432/test`). Writers in threads only:
    /// the child processes are run by the `bench_runs` test.
    #[test]
    fn the_postgres_section_runs_at_a_tiny_size() {
        let w = Workload::new(400);
        let rows = pg::run(&w, false).unwrap_or_else(|e| panic!("postgres: {e}"));
        // 6 figures, two of them beside a second baseline and the load
        // beside a third (the bare tokio-postgres select); 3 concurrency
        // rows for each writer count.
        assert_eq!(rows.len(), 6 + 3 + 3 * 3);
        assert!(rows
            .iter()
            .any(|r| r.baseline.as_ref().is_some_and(|(name, _)| name.contains("tokio-postgres"))));
        for r in &rows {
            assert!(r.value.is_finite() && r.value > 0.0, "{} = {}", r.name, r.value);
            assert!(r.ratio().is_some_and(f64::is_finite), "{}", r.name);
        }
    }

    /// Needs the PostgreSQL server too; 40 sessions instead of 1,000.
    #[test]
    fn the_search_section_runs_on_a_small_store() {
        let w = Workload::new(400);
        let rows = search::run(&w, 40).unwrap_or_else(|e| panic!("search: {e}"));
        assert_eq!(rows.len(), 2 + 4 * 3);
        for r in &rows {
            assert!(r.value.is_finite() && r.value > 0.0, "{} = {}", r.name, r.value);
            assert!(r.ratio().is_some_and(f64::is_finite), "{}", r.name);
        }
        match search::run(&w, 40) {
            Ok(rows) => assert!(rows.is_empty(), "the section runs once a process"),
            Err(e) => panic!("the search section, run again: {e}"),
        }
    }

    #[test]
    fn the_memory_probe_reads_a_file_in_process() {
        let w = Workload::new(300);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        std::fs::write(&path, &w.bytes).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&sections::memory_probe(path.to_str().unwrap()).unwrap()).unwrap();
        assert_eq!(json["events"], 300);
    }

    #[test]
    fn the_workload_is_deterministic_and_valid() {
        let (h1, a) = workload::generate(3_000, 7);
        let (_, b) = workload::generate(3_000, 7);
        assert_eq!(a, b);
        let s = palimpsest_core_session::Session::from_log(h1, a).unwrap();
        assert!(palimpsest_invariants::check_log(s.events()).is_empty());
        // One turn is 101 events.
        assert_eq!(s.events().iter().filter(|e| e.event_type().as_str() == "turn/start").count(), 30);
    }
}
