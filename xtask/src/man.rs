//! `cargo xtask man [--out DIR]`: writes the manual pages of `palimpsest`,
//! one per command (`palimpsest.1`, `palimpsest-run.1`, ...), into DIR
//! (default `target/man/` under the workspace root).
//!
//! The pages come from the CLI's own generator: this builds and runs
//! `palimpsest man --dir DIR` (clap_mangen over the real command line), so
//! the pages always say what the binary's `--help` says. View one with
//! `man -l target/man/palimpsest-run.1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};

/// Reads `[--out DIR]`: the directory, or `None` for the default.
pub(crate) fn parse_args(args: &[String]) -> anyhow::Result<Option<PathBuf>> {
    match args {
        [] => Ok(None),
        [flag, dir] if flag == "--out" && !dir.is_empty() => Ok(Some(PathBuf::from(dir))),
        other => bail!("usage: cargo xtask man [--out DIR], not `{}`", other.join(" ")),
    }
}

/// Where the pages go without `--out`.
pub(crate) fn default_dir(root: &Path) -> PathBuf {
    root.join("target").join("man")
}

/// Builds the CLI and writes its pages.
pub(crate) fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let out = parse_args(args)?.unwrap_or_else(|| default_dir(root));
    let out = std::path::absolute(&out).unwrap_or(out);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut palimpsest = Command::new(cargo);
    palimpsest.current_dir(root).args([
        "run",
        "--quiet",
        "--package",
        "palimpsest-cli",
        "--bin",
        "palimpsest",
        "--",
    ]);
    let pages = write_pages(palimpsest, &out)?;
    println!("wrote {} manual pages to {}", pages.len(), out.display());
    Ok(())
}

/// Runs `<palimpsest> man --dir OUT` and checks what it says it wrote:
/// at least one page, each an existing roff file. Returns the pages.
pub(crate) fn write_pages(mut palimpsest: Command, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let output =
        palimpsest.args(["man", "--dir"]).arg(out).output().context("running `palimpsest man --dir`")?;
    if !output.status.success() {
        bail!(
            "`palimpsest man --dir {}` failed ({}): {}",
            out.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let pages: Vec<PathBuf> = String::from_utf8_lossy(&output.stdout).lines().map(PathBuf::from).collect();
    if pages.is_empty() {
        bail!("`palimpsest man --dir {}` wrote no pages", out.display());
    }
    for page in &pages {
        let text = std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
        if !text.contains(".TH ") {
            bail!("{} is not a manual page (no .TH line)", page.display());
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_an_optional_out_dir() {
        assert_eq!(parse_args(&[]).ok(), Some(None));
        let out = ["--out".to_owned(), "pages".to_owned()];
        assert_eq!(parse_args(&out).ok(), Some(Some(PathBuf::from("pages"))));
        assert!(parse_args(&["--out".to_owned()]).is_err());
        assert!(parse_args(&["pages".to_owned()]).is_err());
        assert_eq!(default_dir(Path::new("/r")), Path::new("/r/target/man"));
        assert!(crate::COMMANDS.iter().any(|(name, _)| *name == "man"), "listed in `cargo xtask help`");
    }

    /// A stand-in for the binary: a shell script that answers `man --dir
    /// DIR` as `palimpsest` does, or fails, or lies.
    #[cfg(unix)]
    fn stub(dir: &Path, body: &str) -> Command {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("palimpsest-stub");
        std::fs::write(
            &path,
            format!("#!/bin/sh\n[ \"$1 $2\" = \"man --dir\" ] || exit 9\nout=\"$3\"\n{body}\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        Command::new(path)
    }

    #[cfg(unix)]
    #[test]
    fn the_pages_the_binary_lists_are_checked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let out = dir.path().join("man");
        let good = "mkdir -p \"$out\"\nfor p in palimpsest palimpsest-run; do printf '.TH %s 1\\n' $p > \"$out/$p.1\"; echo \"$out/$p.1\"; done";
        let pages = write_pages(stub(dir.path(), good), &out).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(pages, [out.join("palimpsest.1"), out.join("palimpsest-run.1")]);

        let failing = "echo 'error[io]: man: cannot create' >&2; exit 2";
        let e = write_pages(stub(dir.path(), failing), &out).map(|_| ()).unwrap_err();
        assert!(format!("{e:#}").contains("error[io]: man: cannot create"), "{e:#}");
        let silent = "exit 0";
        assert!(write_pages(stub(dir.path(), silent), &out).is_err(), "no pages is a failure");
        let lying = "echo \"$out/missing.1\"";
        assert!(write_pages(stub(dir.path(), lying), &out).is_err(), "a listed page must exist");
    }
}
