//! Tidy: repository-wide checks that are too cheap to leave to review.
//!
//! Run by `cargo xtask tidy`, as a step of `cargo xtask ci`, and as the
//! `tidy_is_clean` test, so a plain `cargo test -p xtask` enforces them too.
//!
//! * every `.rs` file under `crates/` and `xtask/` opens with a `//!` module
//!   doc (or `#![doc = …]`);
//! * no trailing whitespace in `.rs`, `.md` and `.toml` files;
//! * no `should_panic` or `ignore` test attributes and no `todo`/`unimplemented`
//!   stubs under `crates/` (see [`FORBIDDEN_IN_CRATES`]);
//! * every crate in `crates/` has a README.md and a CHANGELOG.md, sets
//!   `[lints] workspace = true`, and takes internal dependencies through
//!   `name.workspace = true`, whose workspace entry carries a version;
//! * the dependency trees of the pure crates contain nothing that does I/O
//!   or async ([`BANNED_DEPENDENCIES`], read from `cargo metadata`), and
//!   [`ISOLATED_CRATES`] depend on no other palimpsest crate;
//! * every stable error code the crates can return is documented in
//!   `docs/format.md` (see [`codes`] for how codes are collected);
//! * a library crate whose README.md has a Rust code block includes the
//!   README as doctests, and no README block is `ignore`d;
//! * every dependency a manifest lists is used by the crate's code, and a
//!   normal dependency outside its tests (see [`deps`]).
//!
//! Every check is data in a table below; adding one is a row or a function.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use serde_json::Value;

mod codes;
mod deps;

/// Text that must not appear in any `.rs` file under `crates/`, with why.
/// (Spelled in pieces so this file does not trip its own check.)
const FORBIDDEN_IN_CRATES: &[(&str, &str)] = &[
    (concat!("#[", "should_panic"), "assert on the `Err` instead of expecting a panic"),
    (concat!("#[", "ignore"), "make the test run (assert today's behaviour with a FIXME if it is wrong)"),
    (concat!("todo", "!("), "a stub is not done"),
    (concat!("unimplemented", "!("), "a stub is not done"),
];

/// File extensions checked for trailing whitespace.
const NO_TRAILING_WHITESPACE: &[&str] = &["rs", "md", "toml"];

/// Files every crate in `crates/` must have.
const CRATE_FILES: &[&str] = &["README.md", "CHANGELOG.md"];

/// Packages whose (normal, transitive) dependency tree must not contain the
/// listed crates, and why.
const BANNED_DEPENDENCIES: &[(&str, &[&str], &str)] = &[(
    "palimpsest-core-session",
    &["tokio", "rusqlite", "libsqlite3-sys", "reqwest", "hyper", "mio"],
    "core-session is pure: no I/O, no async, no storage",
)];

/// Packages that must not depend (in any way) on another palimpsest crate.
const ISOLATED_CRATES: &[&str] = &["palimpsest-core-session"];

/// Directory names never walked into.
fn is_skipped_dir(name: &str) -> bool {
    name == ".git" || name == "target" || name.starts_with("target-")
}

/// One broken rule, at a file (and line).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Violation {
    path: String,
    line: Option<usize>,
    message: String,
}

impl Violation {
    fn new(path: impl Into<String>, line: Option<usize>, message: impl Into<String>) -> Violation {
        Violation { path: path.into(), line, message: message.into() }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// Runs every check from `root`; prints each violation and fails if any.
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let violations = check(root)?;
    if violations.is_empty() {
        eprintln!("tidy: ok");
        return Ok(());
    }
    for v in &violations {
        eprintln!("{v}");
    }
    bail!("tidy: {} violation(s)", violations.len())
}

/// Every violation in the repository at `root`, sorted by path and line.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<Violation>> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    walk(root, &mut |path| files.push(path.to_path_buf()))
        .with_context(|| format!("walking {}", root.display()))?;
    for path in &files {
        let rel = relative(root, path);
        let checked_ext =
            path.extension().and_then(|e| e.to_str()).is_some_and(|e| NO_TRAILING_WHITESPACE.contains(&e));
        if !checked_ext {
            continue;
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {rel}"))?;
        check_text(&rel, &text, &mut out);
    }
    check_crates(root, &mut out)?;
    check_codes_documented(root, &files, &mut out)?;
    deps::check_all(root, &mut out)?;
    let metadata = cargo_metadata(root)?;
    check_metadata(root, &metadata, &mut out);
    out.sort();
    out.dedup();
    Ok(out)
}

/// Calls `f` on every file under `root`, in a stable order, skipping `.git`
/// and build output.
pub(crate) fn walk(root: &Path, f: &mut dyn FnMut(&Path)) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(root)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !entry.file_name().to_str().is_some_and(is_skipped_dir) {
                walk(&path, f)?;
            }
        } else if kind.is_file() {
            f(&path);
        }
    }
    Ok(())
}

fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// The checks that need nothing but one file's path (relative, `/`-separated) and text.
fn check_text(rel: &str, text: &str, out: &mut Vec<Violation>) {
    for (i, line) in text.lines().enumerate() {
        if line.ends_with([' ', '\t']) {
            out.push(Violation::new(rel, Some(i + 1), "trailing whitespace"));
        }
    }
    if !rel.ends_with(".rs") {
        return;
    }
    let in_crates = rel.starts_with("crates/");
    if in_crates || rel.starts_with("xtask/") {
        let first = text.lines().next().unwrap_or_default().trim_start();
        if !(first.starts_with("//!") || first.starts_with("#![doc")) {
            out.push(Violation::new(rel, Some(1), "a module opens with a `//!` doc saying what it is for"));
        }
    }
    if in_crates {
        for (i, line) in text.lines().enumerate() {
            for (pattern, why) in FORBIDDEN_IN_CRATES {
                if line.contains(pattern) {
                    out.push(Violation::new(rel, Some(i + 1), format!("`{pattern}`: {why}")));
                }
            }
        }
    }
}

/// Every error code the crates can return is named in `docs/format.md`.
fn check_codes_documented(root: &Path, files: &[PathBuf], out: &mut Vec<Violation>) -> anyhow::Result<()> {
    let found = codes::collect_all(root, files)?;
    match std::fs::read_to_string(root.join(codes::FORMAT_DOC)) {
        Ok(doc) => codes::check_documented(&found, &doc, out),
        Err(_) => out.push(Violation::new(
            codes::FORMAT_DOC,
            None,
            "missing: the format reference documents every error code the crates return",
        )),
    }
    Ok(())
}

/// README, CHANGELOG and manifest rules for every crate in `crates/`.
fn check_crates(root: &Path, out: &mut Vec<Violation>) -> anyhow::Result<()> {
    let crates_dir = root.join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates_dir)
        .with_context(|| format!("reading {}", crates_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let rel = relative(root, &dir);
        for file in CRATE_FILES {
            if !dir.join(file).is_file() {
                out.push(Violation::new(
                    format!("{rel}/{file}"),
                    None,
                    "missing: every crate in crates/ has a README.md and a CHANGELOG.md",
                ));
            }
        }
        let manifest = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {rel}/Cargo.toml"))?;
        check_manifest(&format!("{rel}/Cargo.toml"), &text, out);
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).ok();
        check_readme_doctests(&rel, &readme, lib.as_deref(), out);
    }
    Ok(())
}

/// Whether a code fence's info string (what follows the backticks) makes it
/// a Rust block, which rustdoc compiles: no language, `rust`, or only
/// rustdoc's own attributes.
fn is_rust_fence(info: &str) -> bool {
    info.split([',', ' ', '\t']).filter(|t| !t.is_empty()).all(|t| {
        ["rust", "no_run", "compile_fail", "should_panic", "ignore", "test_harness"].contains(&t)
            || t.starts_with("edition")
    })
}

/// A library crate's README code blocks are doctests: its `lib.rs` includes
/// the README when the README has a Rust block, and no block is `ignore`d.
fn check_readme_doctests(rel: &str, readme: &str, lib: Option<&str>, out: &mut Vec<Violation>) {
    let mut in_block = false;
    let mut first_rust = None;
    for (i, line) in readme.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else { continue };
        if in_block {
            in_block = false;
            continue;
        }
        in_block = true;
        if !is_rust_fence(info.trim()) {
            continue;
        }
        first_rust.get_or_insert(i + 1);
        if info.split([',', ' ']).any(|t| t == "ignore") {
            out.push(Violation::new(
                format!("{rel}/README.md"),
                Some(i + 1),
                "an `ignore`d example is never checked: make it compile (`no_run` if it needs a server)",
            ));
        }
    }
    let (Some(line), Some(lib)) = (first_rust, lib) else { return };
    if !lib.contains(r#"include_str!("../README.md")"#) {
        out.push(Violation::new(
            format!("{rel}/README.md"),
            Some(line),
            "a Rust example the doctests never compile: include the README in src/lib.rs \
             (`#[cfg(doctest)] #[doc = include_str!(\"../README.md\")] struct ReadmeDoctests;`)",
        ));
    }
}

/// One key line of a manifest, with the `[section]` it is in.
struct ManifestLine<'a> {
    section: &'a str,
    line: usize,
    /// The line with all whitespace removed.
    compact: String,
}

/// A minimal, line-based reading of a Cargo manifest: enough to find keys
/// by section without a TOML parser.
fn manifest_lines(text: &str) -> Vec<ManifestLine<'_>> {
    let mut section = "";
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line.trim_start_matches('[').split(']').next().unwrap_or_default().trim();
            continue;
        }
        out.push(ManifestLine { section, line: i + 1, compact: line.split_whitespace().collect() });
    }
    out
}

/// Whether a `[section]` lists dependencies that ship with the crate (not dev-dependencies).
fn is_shipped_dependency_section(section: &str) -> bool {
    let last = |s: &str| s == "dependencies" || s == "build-dependencies";
    let mut parts = section.split('.');
    match parts.next() {
        Some(first) if last(first) => true,
        Some("target") => section.split('.').any(last),
        _ => false,
    }
}

fn check_manifest(rel: &str, text: &str, out: &mut Vec<Violation>) {
    let lines = manifest_lines(text);
    let lints_ok = lines.iter().any(|l| {
        (l.section == "lints" && l.compact == "workspace=true")
            || (l.section.is_empty() && l.compact == "lints.workspace=true")
    });
    if !lints_ok {
        out.push(Violation::new(rel, None, "set `[lints] workspace = true` so the workspace lints apply"));
    }
    for l in lines.iter().filter(|l| is_shipped_dependency_section(l.section)) {
        if !l.compact.contains("path=") {
            continue;
        }
        // `name = { path = … }`, or `path = …` inside `[dependencies.name]`.
        let key = l.compact.split('=').next().unwrap_or_default();
        let name = if key == "path" { l.section.rsplit('.').next().unwrap_or(key) } else { key };
        out.push(Violation::new(
            rel,
            Some(l.line),
            format!(
                "internal dependency `{name}`: write `{name}.workspace = true`; \
                 its [workspace.dependencies] entry carries the path and the version"
            ),
        ));
    }
}

fn cargo_metadata(root: &Path) -> anyhow::Result<Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("could not run `cargo metadata`")?;
    if !output.status.success() {
        bail!("`cargo metadata` failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("reading `cargo metadata` output")
}

/// The checks that need the resolved dependency graph.
fn check_metadata(root: &Path, metadata: &Value, out: &mut Vec<Violation>) {
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let members: Vec<&str> =
        metadata["workspace_members"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let manifest_of =
        |pkg: &Value| relative(root, Path::new(pkg["manifest_path"].as_str().unwrap_or_default()));

    for pkg in packages.iter().filter(|p| p["id"].as_str().is_some_and(|id| members.contains(&id))) {
        let name = pkg["name"].as_str().unwrap_or_default();
        for dep in pkg["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let shipped = dep["kind"].is_null() || dep["kind"] == "build";
            if shipped && dep.get("path").is_some() && dep["req"] == "*" {
                out.push(Violation::new(
                    manifest_of(pkg),
                    None,
                    format!("internal dependency `{dep_name}` has no version; give its workspace entry one"),
                ));
            }
            if ISOLATED_CRATES.contains(&name) && dep_name.starts_with("palimpsest-") {
                out.push(Violation::new(
                    manifest_of(pkg),
                    None,
                    format!("`{name}` must not depend on another palimpsest crate, found `{dep_name}`"),
                ));
            }
        }
    }

    for (package, banned, why) in BANNED_DEPENDENCIES {
        let Some(pkg) = packages.iter().find(|p| p["name"] == *package) else {
            out.push(Violation::new(
                "Cargo.toml",
                None,
                format!("package `{package}` not found in the workspace"),
            ));
            continue;
        };
        for chain in banned_paths(metadata, pkg["id"].as_str().unwrap_or_default(), banned) {
            out.push(Violation::new(
                manifest_of(pkg),
                None,
                format!(
                    "depends on `{}` through {}: {why}",
                    chain.last().map_or("", String::as_str),
                    chain.join(" -> ")
                ),
            ));
        }
    }
}

/// For each banned crate reachable from package `id` through normal
/// dependencies, the chain of package names that reaches it.
fn banned_paths(metadata: &Value, id: &str, banned: &[&str]) -> Vec<Vec<String>> {
    let nodes = metadata["resolve"]["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let packages = metadata["packages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let name_of = |id: &str| {
        packages.iter().find(|p| p["id"] == id).and_then(|p| p["name"].as_str()).unwrap_or(id).to_owned()
    };
    let node_of = |id: &str| nodes.iter().find(|n| n["id"] == id);
    // Breadth-first, remembering how each package was reached.
    let mut parent: Vec<(String, Option<usize>)> = vec![(id.to_owned(), None)];
    let mut next = 0;
    let mut found = Vec::new();
    while next < parent.len() {
        let current = parent[next].0.clone();
        let name = name_of(&current);
        if next > 0 && banned.contains(&name.as_str()) {
            let mut chain = Vec::new();
            let mut at = Some(next);
            while let Some(i) = at {
                chain.push(name_of(&parent[i].0));
                at = parent[i].1;
            }
            chain.reverse();
            found.push(chain);
        }
        for dep in node_of(&current).and_then(|n| n["deps"].as_array()).into_iter().flatten() {
            let normal = dep["dep_kinds"].as_array().into_iter().flatten().any(|k| k["kind"].is_null());
            let dep_id = dep["pkg"].as_str().unwrap_or_default();
            if normal && !parent.iter().any(|(seen, _)| seen == dep_id) {
                parent.push((dep_id.to_owned(), Some(next)));
            }
        }
        next += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_violations(rel: &str, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        check_text(rel, text, &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    fn manifest_violations(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        check_manifest("crates/x/Cargo.toml", text, &mut out);
        out.iter().map(|v| v.to_string()).collect()
    }

    /// The real repository passes every check.
    #[test]
    fn tidy_is_clean() {
        let violations = check(&crate::project_root()).unwrap();
        let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(
            violations.is_empty(),
            "tidy found {} violation(s):\n{}",
            violations.len(),
            listed.join("\n")
        );
    }

    /// Guards against a `cargo metadata` format change making the banned-crate check vacuous.
    #[test]
    fn the_dependency_walk_sees_the_real_graph() {
        let metadata = cargo_metadata(&crate::project_root()).unwrap();
        let packages = metadata["packages"].as_array().unwrap();
        let core = packages.iter().find(|p| p["name"] == "palimpsest-core-session").unwrap();
        let chains = banned_paths(&metadata, core["id"].as_str().unwrap(), &["serde_json", "insta"]);
        // serde_json is a normal dependency of core-session; insta only a dev-dependency.
        assert_eq!(chains, [["palimpsest-core-session", "serde_json"]]);
    }

    #[test]
    fn a_module_without_a_doc_is_reported() {
        assert_eq!(
            text_violations("crates/a/src/lib.rs", "use std::fmt;\n"),
            ["crates/a/src/lib.rs:1: a module opens with a `//!` doc saying what it is for"]
        );
        assert!(text_violations("xtask/src/x.rs", "//! Docs.\nfn f() {}\n").is_empty());
        assert!(
            text_violations("crates/a/src/lib.rs", "#![doc = include_str!(\"../README.md\")]\n").is_empty()
        );
        // Outside crates/ and xtask/ (fuzz targets, examples) module docs are not required.
        assert!(text_violations("fuzz/fuzz_targets/load.rs", "fn f() {}\n").is_empty());
    }

    #[test]
    fn trailing_whitespace_is_reported_in_code_docs_and_manifests_only() {
        assert_eq!(text_violations("README.md", "ok\ntrailing \n"), ["README.md:2: trailing whitespace"]);
        assert_eq!(text_violations("Cargo.toml", "a = 1\t\n"), ["Cargo.toml:1: trailing whitespace"]);
        assert_eq!(
            text_violations("xtask/src/x.rs", "//! Docs. \n"),
            ["xtask/src/x.rs:1: trailing whitespace"]
        );
    }

    #[test]
    fn panicking_ignored_and_stub_code_is_reported_in_crates() {
        let source = format!(
            "//! Docs.\n{}]\nfn a() {{}}\n{}]\nfn b() {{ {}) }}\nfn c() {{ {}) }}\n",
            FORBIDDEN_IN_CRATES[0].0,
            FORBIDDEN_IN_CRATES[1].0,
            FORBIDDEN_IN_CRATES[2].0,
            FORBIDDEN_IN_CRATES[3].0,
        );
        let lines: Vec<Option<usize>> = {
            let mut out = Vec::new();
            check_text("crates/a/tests/t.rs", &source, &mut out);
            out.iter().map(|v| v.line).collect()
        };
        assert_eq!(lines, [Some(2), Some(4), Some(5), Some(6)]);
        // xtask itself may name them (it has to, to check for them).
        assert!(text_violations("xtask/src/t.rs", &source).is_empty());
    }

    #[test]
    fn readme_rust_blocks_must_be_doctests() {
        let readme = "# x\n```console\n$ x\n```\n\n```rust,no_run\nlet a = 1;\n```\n```ignore\nb\n```\n";
        let check = |lib: Option<&str>| {
            let mut out = Vec::new();
            check_readme_doctests("crates/x", readme, lib, &mut out);
            out.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let found = check(Some("//! X.\n"));
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].starts_with("crates/x/README.md:9: an `ignore`d example"), "{}", found[0]);
        assert!(found[1].starts_with("crates/x/README.md:6: a Rust example the doctests never compile"));
        let included = check(Some("#[cfg(doctest)]\n#[doc = include_str!(\"../README.md\")]\nstruct R;\n"));
        assert_eq!(included.len(), 1, "only the ignored block: {included:#?}");
        // A binary crate's README has no doctests to be part of.
        assert_eq!(check(None).len(), 1);
        assert!(is_rust_fence("") && is_rust_fence("rust,no_run") && is_rust_fence("edition2021"));
        assert!(!is_rust_fence("console") && !is_rust_fence("sh") && !is_rust_fence("sql"));
    }

    #[test]
    fn a_clean_manifest_passes() {
        let manifest = "[package]\nname = \"x\"\n\n[lints]\nworkspace = true\n\n[dependencies]\n\
                        palimpsest-core-session.workspace = true\nserde = { workspace = true }\n\n\
                        [dev-dependencies]\npalimpsest-persistence = { path = \"../persistence\", features = [\"testkit\"] }\n";
        assert_eq!(manifest_violations(manifest), Vec::<String>::new());
    }

    #[test]
    fn missing_workspace_lints_are_reported() {
        assert_eq!(
            manifest_violations("[package]\nname = \"x\"\n"),
            ["crates/x/Cargo.toml: set `[lints] workspace = true` so the workspace lints apply"]
        );
        assert!(manifest_violations("lints.workspace = true\n[package]\nname = \"x\"\n").is_empty());
        assert_eq!(manifest_violations("[lints]\nworkspace = false\n").len(), 1);
    }

    #[test]
    fn path_dependencies_that_bypass_the_workspace_are_reported() {
        let manifest =
            "[lints]\nworkspace = true\n[dependencies]\na = { path = \"../a\", version = \"0.1\" }\n\
                        [target.'cfg(unix)'.dependencies]\nb = { path = \"../b\" }\n\
                        [dependencies.c]\npath = \"../c\"\n[build-dependencies]\nd = { path = \"../d\" }\n";
        let found = manifest_violations(manifest);
        let names: Vec<&str> = found.iter().map(|v| v.split('`').nth(1).unwrap_or_default()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        assert!(found[0].starts_with("crates/x/Cargo.toml:4: internal dependency `a`"));
    }

    /// A hand-made `cargo metadata` graph: app -> lib -> tokio, lib -dev-> mio.
    fn graph() -> Value {
        let pkg = |name: &str, deps: Value| {
            serde_json::json!({ "id": format!("{name}-id"), "name": name,
                                "manifest_path": format!("/r/crates/{name}/Cargo.toml"), "dependencies": deps })
        };
        let node = |name: &str, deps: &[(&str, Value)]| {
            let deps: Vec<Value> = deps
                .iter()
                .map(|(d, kind)| serde_json::json!({ "pkg": format!("{d}-id"), "dep_kinds": [{ "kind": kind }] }))
                .collect();
            serde_json::json!({ "id": format!("{name}-id"), "deps": deps })
        };
        serde_json::json!({
            "packages": [
                pkg("app", serde_json::json!([{ "name": "lib", "kind": null, "req": "*", "path": "/r/crates/lib" }])),
                pkg("lib", serde_json::json!([])),
                pkg("tokio", serde_json::json!([])),
                pkg("mio", serde_json::json!([])),
            ],
            "workspace_members": ["app-id", "lib-id"],
            "resolve": { "nodes": [
                node("app", &[("lib", Value::Null)]),
                node("lib", &[("tokio", Value::Null), ("mio", Value::from("dev"))]),
                node("tokio", &[]),
                node("mio", &[]),
            ] }
        })
    }

    #[test]
    fn banned_crates_are_found_through_normal_dependencies_only() {
        assert_eq!(banned_paths(&graph(), "app-id", &["tokio", "mio"]), [["app", "lib", "tokio"]]);
        assert!(
            banned_paths(&graph(), "tokio-id", &["tokio"]).is_empty(),
            "a package is not its own dependency"
        );
    }

    #[test]
    fn internal_dependencies_without_a_version_are_reported() {
        let mut out = Vec::new();
        check_metadata(Path::new("/r"), &graph(), &mut out);
        let messages: Vec<&str> = out.iter().map(|v| v.message.as_str()).collect();
        assert!(messages.contains(&"internal dependency `lib` has no version; give its workspace entry one"));
    }
}
