//! `cargo xtask ci`: every check CI runs, in order, stopping at the first
//! failure.
//!
//! 1. `fmt`: `cargo fmt --all -- --check`
//! 2. `tidy`: the checks of [`crate::tidy`], in process
//! 3. `clippy`: `cargo clippy --workspace --all-targets -- -D warnings`
//! 4. `package`: `cargo package --workspace --no-verify --allow-dirty`:
//!    every crate packages as it would for publishing (description,
//!    license, versioned internal dependencies, no file outside the
//!    package). `--no-verify` keeps it cheap: building every crate from
//!    its package again is left to a release (`cargo package --workspace`);
//!    `--allow-dirty` because the manifests are checked, not the Git state
//! 5. `chromium`: `.ci/install-chromium`, which installs Debian's `chromium`
//!    if it is missing (the CLI's HTML export test renders a page in it)
//! 6. `postgres`: `.ci/ensure-postgres`, which checks that the test server
//!    (`PALIMPSEST_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`)
//!    answers and starts an installed but stopped cluster; the PostgreSQL
//!    store's tests fail without it under CI
//! 7. `tests`: `cargo nextest run --workspace --profile ci` when
//!    `cargo-nextest` is on `PATH`, else `cargo test --workspace`
//! 8. `doctests`: `cargo test --workspace --doc` (only after nextest, which
//!    skips doctests; `cargo test` already ran them)
//! 9. `examples`: `cargo build --workspace --examples`, then every example
//!    target of every workspace crate is run, as `cargo metadata` lists them
//!    (so a new `examples/*.rs` is run without editing this file); each must
//!    exit 0, and no two may share a name (their binaries would collide)
//! 10. `docs`: `cargo doc --workspace --all-features --no-deps` with
//!     `RUSTDOCFLAGS="-D warnings"`; all features, as docs.rs builds them, so
//!     feature-gated modules (`persistence`'s `testkit`) are checked too and
//!     links to them resolve
//! 11. `snapshots`: no pending insta snapshot (`*.snap.new`,
//!     `*.pending-snap`) anywhere in the tree, and no unreferenced one: every
//!     `.snap` file under `crates/` was read by a snapshot assertion of the
//!     `tests` (or `doctests`) step, what `cargo insta test
//!     --unreferenced=reject` checks, without needing cargo-insta
//!
//! Tests run with `INSTA_UPDATE=no` and `CI=true`, so a missing or changed
//! snapshot fails instead of being written, and with
//! `INSTA_SNAPSHOT_REFERENCES_FILE` set to [`SNAPSHOT_REFERENCES`] (under
//! the root): insta appends to it the path of every snapshot file an
//! assertion reads, the list cargo-insta itself uses to find unreferenced
//! snapshots. The file is emptied before the first step.
//!
//! At the end a timing summary lists every step.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::tidy;

/// Environment for every step that runs tests: snapshots are checked, never written.
const TEST_ENV: &[(&str, &str)] = &[("INSTA_UPDATE", "no"), ("CI", "true")];

/// Where the test steps list the snapshot files their assertions read
/// (relative to the root; insta appends one absolute path a line).
const SNAPSHOT_REFERENCES: &str = "target/xtask-ci/insta-snapshot-references";

/// One check.
struct Step {
    name: &'static str,
    action: Action,
}

enum Action {
    /// A cargo command, with extra environment.
    Cargo { args: &'static [&'static str], env: &'static [(&'static str, &'static str)] },
    /// A check run in this process.
    InProcess(fn(&Path) -> anyhow::Result<()>),
}

impl Action {
    fn describe(&self) -> String {
        match self {
            Action::Cargo { args, env } => {
                let quote = |v: &str| if v.contains(' ') { format!("\"{v}\"") } else { v.to_owned() };
                let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={} ", quote(v))).collect();
                format!("{}cargo {}", env.concat(), args.join(" "))
            }
            Action::InProcess(_) => "(in process)".to_owned(),
        }
    }
}

/// The steps, in order. The test runner depends on whether nextest is installed.
fn steps(nextest: bool) -> Vec<Step> {
    let cargo = |name, args, env| Step { name, action: Action::Cargo { args, env } };
    let mut steps = vec![
        cargo("fmt", &["fmt", "--all", "--", "--check"][..], &[][..]),
        Step { name: "tidy", action: Action::InProcess(tidy::run) },
        cargo("clippy", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[]),
        cargo("package", &["package", "--workspace", "--no-verify", "--allow-dirty"], &[]),
        Step { name: "chromium", action: Action::InProcess(install_chromium) },
        Step { name: "postgres", action: Action::InProcess(ensure_postgres) },
    ];
    if nextest {
        steps.push(cargo("tests", &["nextest", "run", "--workspace", "--profile", "ci"], TEST_ENV));
        steps.push(cargo("doctests", &["test", "--workspace", "--doc"], TEST_ENV));
    } else {
        steps.push(cargo("tests", &["test", "--workspace"], TEST_ENV));
    }
    steps.push(Step { name: "examples", action: Action::InProcess(run_examples) });
    steps.push(cargo(
        "docs",
        &["doc", "--workspace", "--all-features", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    ));
    steps.push(Step { name: "snapshots", action: Action::InProcess(check_snapshots) });
    steps
}

/// Runs every step from `root`; stops at the first failure.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let nextest = find_on_path("cargo-nextest").is_some();
    if !nextest {
        eprintln!("xtask ci: cargo-nextest is not on PATH; running tests with `cargo test`");
    }
    let steps = steps(nextest);
    let references = root.join(SNAPSHOT_REFERENCES);
    match std::fs::remove_file(&references) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("emptying {}", references.display()));
        }
        _ => {}
    }
    if let Some(dir) = references.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut timings: Vec<(&str, Duration, bool)> = Vec::new();
    let mut failure = None;
    for step in &steps {
        eprintln!("\n==> {} : {}", step.name, step.action.describe());
        let started = Instant::now();
        let result = run_step(root, &step.action);
        timings.push((step.name, started.elapsed(), result.is_ok()));
        if let Err(e) = result {
            failure = Some((step.name, e));
            break;
        }
    }
    print_summary(&steps, &timings);
    match failure {
        None => Ok(()),
        Some((name, e)) => Err(e.context(format!("xtask ci: step `{name}` failed"))),
    }
}

fn run_step(root: &Path, action: &Action) -> anyhow::Result<()> {
    match action {
        Action::InProcess(check) => check(root),
        Action::Cargo { args, env } => {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(&cargo);
            cmd.args(*args).current_dir(root);
            for (k, v) in *env {
                cmd.env(k, v);
            }
            if is_test_run(args) {
                cmd.env("INSTA_SNAPSHOT_REFERENCES_FILE", root.join(SNAPSHOT_REFERENCES));
            }
            let status = cmd.status().with_context(|| format!("could not start `{}`", action.describe()))?;
            if !status.success() {
                bail!("`{}` exited with {status}", action.describe());
            }
            Ok(())
        }
    }
}

fn print_summary(steps: &[Step], timings: &[(&str, Duration, bool)]) {
    let total: Duration = timings.iter().map(|t| t.1).sum();
    eprintln!("\nxtask ci summary:");
    for (name, took, ok) in timings {
        let verdict = if *ok { "ok" } else { "FAILED" };
        eprintln!("  {verdict:<7} {name:<10} {:>7.1}s", took.as_secs_f64());
    }
    for step in &steps[timings.len()..] {
        eprintln!("  {:<7} {:<10}", "skipped", step.name);
    }
    eprintln!("  {:<7} {:<10} {:>7.1}s", "", "total", total.as_secs_f64());
}

/// The `examples` step: builds every example of every workspace crate in
/// one `cargo build --workspace --examples` (one feature resolution for the
/// workspace, as the tests had: a `cargo run -p` per example resolved each
/// package's features alone and rebuilt shared crates for it), then runs
/// each binary.
fn run_examples(root: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("could not run `cargo metadata`")?;
    if !output.status.success() {
        bail!("`cargo metadata` failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("reading `cargo metadata` output")?;
    let examples = examples_of(&metadata);
    if examples.is_empty() {
        bail!("no example found: every library crate has an `examples/` directory");
    }
    let mut names: Vec<&str> = examples.iter().map(|(_, e)| e.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("two crates have an example named `{}`: their binaries would collide", pair[0]);
    }
    let Some(target) = metadata["target_directory"].as_str() else {
        bail!("`cargo metadata` names no target directory");
    };
    eprintln!("--> cargo build --workspace --examples");
    let status = Command::new(&cargo)
        .args(["build", "--quiet", "--workspace", "--examples"])
        .current_dir(root)
        .status()
        .context("could not run `cargo build --examples`")?;
    if !status.success() {
        bail!("building the examples failed: {status}");
    }
    let dir = Path::new(target).join("debug").join("examples");
    for (package, example) in &examples {
        let binary = dir.join(format!("{example}{}", std::env::consts::EXE_SUFFIX));
        eprintln!("--> {} (example of {package})", binary.display());
        let status = Command::new(&binary).current_dir(root).status().with_context(|| {
            format!("could not start example {example} of {package} ({})", binary.display())
        })?;
        if !status.success() {
            bail!("example `{example}` of {package} exited with {status}");
        }
    }
    Ok(())
}

/// Every (package, example) of `cargo metadata` output, in its order.
fn examples_of(metadata: &serde_json::Value) -> Vec<(String, String)> {
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = Vec::new();
    for package in packages {
        let Some(name) = package["name"].as_str() else { continue };
        let targets = package["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        for target in targets {
            let is_example = target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "example"));
            if let (true, Some(example)) = (is_example, target["name"].as_str()) {
                out.push((name.to_owned(), example.to_owned()));
            }
        }
    }
    out
}

/// Runs `.ci/install-chromium`: the CLI's HTML export test renders a page
/// in headless Chromium and, with `CI` set, fails when it is missing. The
/// script installs Debian's package when needed and fails loudly when it
/// cannot.
fn install_chromium(root: &Path) -> anyhow::Result<()> {
    run_script(root, ".ci/install-chromium", "Chromium is needed for the HTML export test")
}

/// Runs `.ci/ensure-postgres`: the PostgreSQL store's tests need the test
/// server and, with `CI` set, fail without it. The script starts an
/// installed but stopped cluster, and fails loudly when no server answers.
fn ensure_postgres(root: &Path) -> anyhow::Result<()> {
    run_script(root, ".ci/ensure-postgres", "the PostgreSQL store's tests need a server")
}

/// Runs the bash script at `root/script`; `why` says what its failure means.
fn run_script(root: &Path, script: &str, why: &str) -> anyhow::Result<()> {
    let script = root.join(script);
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .status()
        .with_context(|| format!("could not run {}", script.display()))?;
    if !status.success() {
        bail!("{} exited with {status}: {why}", script.display());
    }
    Ok(())
}

/// Whether cargo `args` run tests (whose snapshot assertions are recorded).
fn is_test_run(args: &[&str]) -> bool {
    args.first().is_some_and(|a| *a == "test" || *a == "nextest")
}

/// The `snapshots` step: nothing pending, nothing unreferenced.
fn check_snapshots(root: &Path) -> anyhow::Result<()> {
    check_no_pending_snapshots(root)?;
    let references = std::fs::read_to_string(root.join(SNAPSHOT_REFERENCES)).unwrap_or_default();
    check_no_unreferenced_snapshots(root, &references)
}

/// Fails on any `.snap` file under `crates/` that no assertion read: its
/// test was renamed or removed, and nothing checks it any more.
/// `references` is insta's list, one path a line.
fn check_no_unreferenced_snapshots(root: &Path, references: &str) -> anyhow::Result<()> {
    let normalize = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let referenced: std::collections::BTreeSet<PathBuf> =
        references.lines().filter(|l| !l.is_empty()).map(|l| normalize(&root.join(l))).collect();
    let mut unreferenced: Vec<PathBuf> = Vec::new();
    let crates = root.join("crates");
    if crates.is_dir() {
        tidy::walk(&crates, &mut |path| {
            if path.extension().is_some_and(|e| e == "snap") && !referenced.contains(&normalize(path)) {
                unreferenced.push(path.strip_prefix(root).unwrap_or(path).to_path_buf());
            }
        })?;
    }
    if unreferenced.is_empty() {
        return Ok(());
    }
    for path in &unreferenced {
        eprintln!("unreferenced snapshot: {}", path.display());
    }
    bail!(
        "{} insta snapshot(s) no test assertion read (what `cargo insta test --unreferenced=reject` rejects): \
         delete each whose test is gone, or fix the test that should read it",
        unreferenced.len()
    )
}

/// Fails on any pending insta snapshot: a `.snap.new` or `.pending-snap`
/// left behind means a snapshot changed and nobody reviewed it.
fn check_no_pending_snapshots(root: &Path) -> anyhow::Result<()> {
    let mut pending: Vec<PathBuf> = Vec::new();
    tidy::walk(root, &mut |path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if is_pending_snapshot(name) {
            pending.push(path.strip_prefix(root).unwrap_or(path).to_path_buf());
        }
    })?;
    if pending.is_empty() {
        return Ok(());
    }
    for path in &pending {
        eprintln!("pending snapshot: {}", path.display());
    }
    bail!(
        "{} pending insta snapshot(s): review each (cargo insta review, or read it and rename it to .snap), \
         then commit or delete it",
        pending.len()
    )
}

fn is_pending_snapshot(file_name: &str) -> bool {
    file_name.ends_with(".snap.new") || file_name.ends_with(".pending-snap")
}

/// The first executable called `name` on `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_runs_doctests_separately_and_cargo_test_does_not() {
        let names = |nextest| steps(nextest).iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(
            names(true),
            [
                "fmt",
                "tidy",
                "clippy",
                "package",
                "chromium",
                "postgres",
                "tests",
                "doctests",
                "examples",
                "docs",
                "snapshots"
            ]
        );
        assert_eq!(
            names(false),
            [
                "fmt",
                "tidy",
                "clippy",
                "package",
                "chromium",
                "postgres",
                "tests",
                "examples",
                "docs",
                "snapshots"
            ]
        );
    }

    #[test]
    fn examples_are_read_from_cargo_metadata() {
        let metadata = serde_json::json!({"packages": [
            {"name": "a", "targets": [{"kind": ["lib"], "name": "a"}, {"kind": ["example"], "name": "first"}]},
            {"name": "b", "targets": [{"kind": ["test"], "name": "it"}]},
            {"name": "c", "targets": [{"kind": ["example"], "name": "x"}, {"kind": ["example"], "name": "y"}]},
        ]});
        let found = examples_of(&metadata);
        let found: Vec<(&str, &str)> = found.iter().map(|(p, e)| (p.as_str(), e.as_str())).collect();
        assert_eq!(found, [("a", "first"), ("c", "x"), ("c", "y")]);
    }

    #[test]
    fn every_library_crate_has_an_example() {
        let root = crate::project_root();
        let metadata =
            std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args(["metadata", "--format-version", "1", "--no-deps"])
                .current_dir(&root)
                .output()
                .unwrap();
        let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
        let examples = examples_of(&metadata);
        let libraries = [
            "core-session",
            "core-agent-loop",
            "persistence",
            "persistence-jsonl",
            "persistence-sqlite",
            "persistence-postgres",
            "invariants",
            "llm-openai",
        ];
        for library in libraries {
            let package = format!("palimpsest-{library}");
            assert!(examples.iter().any(|(p, _)| *p == package), "{package} has no example: {examples:?}");
        }
    }

    #[test]
    fn test_steps_never_write_snapshots() {
        for step in steps(true).iter().chain(&steps(false)) {
            if let Action::Cargo { args, env } = &step.action {
                if args.contains(&"test") || args.contains(&"nextest") {
                    assert!(env.contains(&("INSTA_UPDATE", "no")), "{}", step.name);
                    assert!(env.contains(&("CI", "true")), "{}", step.name);
                }
            }
        }
    }

    #[test]
    fn describes_commands_as_they_would_be_typed() {
        let docs = steps(true).into_iter().find(|s| s.name == "docs").unwrap();
        assert_eq!(
            docs.action.describe(),
            r#"RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps"#
        );
    }

    #[test]
    fn pending_snapshots_fail_the_check_outside_build_output() {
        let root = std::env::temp_dir().join(format!("xtask-pending-snapshots-{}", std::process::id()));
        let write = |rel: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        };
        write("crates/a/tests/snapshots/a__x.snap");
        write("target/debug/b__y.snap.new");
        assert!(check_no_pending_snapshots(&root).is_ok(), "accepted snapshots and build output are fine");
        write("crates/a/tests/snapshots/a__x.snap.new");
        let err = check_no_pending_snapshots(&root).unwrap_err().to_string();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(err.starts_with("1 pending insta snapshot(s)"), "{err}");
    }

    #[test]
    fn test_steps_record_the_snapshots_they_read() {
        let recorded: Vec<&str> = steps(true)
            .iter()
            .chain(&steps(false))
            .filter(|s| matches!(&s.action, Action::Cargo { args, .. } if is_test_run(args)))
            .map(|s| s.name)
            .collect();
        assert_eq!(recorded, ["tests", "doctests", "tests"]);
        assert!(!is_test_run(&["clippy", "--all-targets"]));
    }

    #[test]
    fn unreferenced_snapshots_fail_the_check() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        for rel in ["crates/a/tests/snapshots/t__x.snap", "crates/a/src/snapshots/a__m__y.snap"] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::write(root.join(rel), "").unwrap();
        }
        let both = format!(
            "{}\n{}\n{0}\n",
            root.join("crates/a/tests/snapshots/t__x.snap").display(),
            root.join("crates/a/src/snapshots/a__m__y.snap").display()
        );
        assert!(check_no_unreferenced_snapshots(root, &both).is_ok());
        let one = format!("{}\n", root.join("crates/a/tests/snapshots/t__x.snap").display());
        let err = check_no_unreferenced_snapshots(root, &one).unwrap_err().to_string();
        assert!(err.starts_with("1 insta snapshot(s) no test assertion read"), "{err}");
        assert!(check_no_unreferenced_snapshots(root, "").is_err(), "no list: nothing was read");
    }

    #[test]
    fn recognises_pending_snapshots() {
        assert!(is_pending_snapshot("derive__plain_chat.snap.new"));
        assert!(is_pending_snapshot(".derive__plain_chat.pending-snap"));
        assert!(!is_pending_snapshot("derive__plain_chat.snap"));
    }
}
