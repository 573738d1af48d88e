//! `cargo xtask bench [--quick] [--json FILE] [...]`: builds the benchmark
//! suite (`crates/bench`, package `palimpsest-bench`) in release mode and
//! runs it, passing every argument through. xtask itself runs in debug, so
//! the suite is its own binary; see `docs/performance.md`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};

/// Builds and runs the suite with `args`, after building the release
/// `palimpsest` binary that its `cli` section runs.
pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--quiet", "--release", "--package", "palimpsest-cli"])
        .status()
        .context("building the palimpsest binary")?;
    if !status.success() {
        bail!("building the palimpsest binary failed ({status})");
    }
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["run", "--quiet", "--release", "--package", "palimpsest-bench", "--"])
        .args(args)
        .status()
        .context("running the benchmark suite")?;
    if !status.success() {
        bail!("the benchmark suite failed ({status})");
    }
    Ok(())
}
