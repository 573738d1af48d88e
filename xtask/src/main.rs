//! Project automation for Palimpsest, run through the `cargo xtask` alias
//! (see `.cargo/config.toml`): an ordinary, unpublished binary, so the
//! project's checks are Rust code that works the same on every machine.
//!
//! * `cargo xtask ci` runs every check CI runs, in order, and stops at the
//!   first failure (see [`ci`]).
//! * `cargo xtask tidy` runs only the repository-wide tidy checks (see
//!   [`tidy`]); `cargo test -p xtask` runs them too.
//! * `cargo xtask bench` builds the benchmark suite in release and runs it
//!   (see [`mod@bench`]).
//! * `cargo xtask fuzz [--seconds N] [TARGET]` runs the `cargo fuzz` targets
//!   for a chosen time and reports their executions (see [`fuzz`]).
//! * `cargo xtask man [--out DIR]` writes the CLI's manual pages, one per
//!   command, into `target/man/` or DIR (see [`man`]).
//!
//! # Adding a command
//!
//! A command is a module with a `run(root: &Path) -> anyhow::Result<()>`
//! function, one row in [`COMMANDS`] and one arm in [`run`]. Later commands
//! (`cargo xtask bench`, `cargo xtask fuzz`) go in the same way; only
//! commands that work are listed.

// xtask is a binary whose job is to report to the person running it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod ci;
mod fuzz;
mod man;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Every command: name and one-line description, as `help` prints them.
const COMMANDS: &[(&str, &str)] = &[
    ("ci", "run every CI check in order (fmt, tidy, clippy, tests, doctests, docs, snapshots)"),
    ("tidy", "run the repository-wide tidy checks (module docs, whitespace, manifests, banned deps)"),
    (
        "bench",
        "build the benchmark suite in release and run it: [--quick] [--sizes N,..] [--only S] [--json FILE] [--turns]",
    ),
    ("fuzz", "run the cargo-fuzz targets (needs cargo-fuzz): [--seconds N] [TARGET]"),
    ("man", "write the CLI's manual pages (one per command) into target/man/: [--out DIR]"),
    ("help", "print this list"),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let root = project_root();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["ci"] => ci::run(&root),
        ["tidy"] => tidy::run(&root),
        ["bench", rest @ ..] => bench::run(&root, &rest.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        ["fuzz", rest @ ..] => fuzz::run(&root, &rest.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        ["man", rest @ ..] => man::run(&root, &rest.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        [] | ["help" | "--help" | "-h"] => {
            print_help();
            Ok(())
        }
        other => {
            print_help();
            anyhow::bail!("unknown command or arguments: `{}`", other.join(" "))
        }
    }
}

fn print_help() {
    println!("usage: cargo xtask <command>\n\ncommands:");
    for (name, about) in COMMANDS {
        println!("  {name:<6} {about}");
    }
}

/// The workspace root, whatever the current directory: xtask always lives
/// in `<root>/xtask`.
pub(crate) fn project_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.parent().map(Path::to_path_buf).unwrap_or(manifest_dir)
}
