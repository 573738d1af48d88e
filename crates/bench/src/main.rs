//! The Palimpsest benchmark suite (`cargo xtask bench` runs it in release).
//!
//! Every figure is measured in this one process and run, beside a baseline
//! measured in the same run on the same bytes, because these machines are
//! noisy: ratios are what carry across runs. Nothing here asserts a timing.
//!
//! ```text
//! palimpsest-bench [--quick] [--sizes 10000,100000] [--only SECTION] [--json FILE]
//! ```

mod measure;
mod report;
mod sections;
mod stores;
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
}

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { sizes: vec![10_000, 100_000, 1_000_000], json: None, memory_probe: None, only: None };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.sizes = vec![10_000, 100_000],
            "--sizes" => {
                let v = it.next().ok_or("--sizes needs a list, e.g. 1000,10000")?;
                args.sizes = v
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|_| format!("not a size: {s}")))
                    .collect::<Result<_, _>>()?;
            }
            "--only" => args.only = Some(it.next().ok_or("--only needs a section name")?),
            "--json" => args.json = Some(it.next().ok_or("--json needs a file")?),
            "--memory-probe" => args.memory_probe = Some(it.next().ok_or("--memory-probe needs a file")?),
            "-h" | "--help" => {
                return Err(
                    "usage: palimpsest-bench [--quick] [--sizes N,N,...] [--only SECTION] [--json FILE]"
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
        let text = serde_json::to_string_pretty(&report::json(&rows)).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("cannot write {path}: {e}");
            return ExitCode::from(2);
        }
        eprintln!("wrote {path}");
    }
    ExitCode::SUCCESS
}
