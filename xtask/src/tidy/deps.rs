//! Unused dependencies: every dependency a crate's manifest lists is used
//! by that crate's sources.
//!
//! Pure Rust, no tool to install (`cargo machete`, `cargo udeps`): for each
//! manifest (`crates/*/Cargo.toml`, `xtask/Cargo.toml`, `fuzz/Cargo.toml`)
//! every key of `[dependencies]`, `[dev-dependencies]`,
//! `[build-dependencies]` and their `[target.'…'.…]` forms is a name the
//! code refers to (with `-` read as `_`; a renamed dependency is referred to
//! by its key). It counts as used when the crate's `.rs` files (every one
//! under the crate's directory, skipping build output and nested crates)
//! contain the name as a path root (`name::`, `::name::`, `#[name::main]`,
//! `#[derive(name::X)]`), after `use ` or `extern crate `.
//!
//! Where a use is looked for depends on the kind:
//!
//! * a normal or build dependency must be used outside `tests/`, `benches/`
//!   and `examples/`: one only tests use belongs in `[dev-dependencies]`;
//! * a dev-dependency may be used anywhere, the crate's README.md included
//!   (its code blocks are doctests).
//!
//! A dependency the code never names but that is still needed (to turn on
//! a feature of a transitive dependency, say) is listed in [`ALLOWED`] with
//! the reason.
//!
//! The scan is textual: a name in a comment or a string counts as a use.
//! That errs towards passing, never towards a false failure.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{is_skipped_dir, manifest_lines, relative, Violation};

/// Dependencies that are not named in code on purpose: (manifest, dependency key, why).
pub(super) const ALLOWED: &[(&str, &str, &str)] = &[];

/// Directories (relative to the root) whose `Cargo.toml` is checked, besides every `crates/*`.
const EXTRA_CRATES: &[&str] = &["xtask", "fuzz"];

/// Directories of a crate whose code is test-only.
const TEST_ONLY_DIRS: &[&str] = &["tests", "benches", "examples"];

/// One dependency of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Dependency {
    /// The key in the manifest: the name the code uses, `-` for `_`.
    pub(super) key: String,
    /// 1-based line of the key.
    pub(super) line: usize,
    /// A `[dev-dependencies]` entry.
    pub(super) dev: bool,
}

/// The dependencies a manifest lists, in order.
pub(super) fn dependencies(manifest: &str) -> Vec<Dependency> {
    let mut out: Vec<Dependency> = Vec::new();
    let mut depth = 0i32;
    let lines = manifest_lines(manifest);
    for l in &lines {
        let at_top = depth == 0;
        for c in l.compact.chars() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                _ => {}
            }
        }
        if !at_top {
            continue;
        }
        let Some(kind) = dependency_section(l.section) else { continue };
        let dev = kind == "dev-dependencies";
        // `[dependencies.name]`: the section names the dependency, its lines are fields.
        let tail = l.section.rsplit_once(&format!("{kind}.")).map(|(_, name)| name);
        if let Some(name) = tail {
            let name = name.trim_matches(['"', '\'']);
            if !out.iter().any(|d| d.key == name && d.dev == dev) {
                out.push(Dependency { key: name.to_owned(), line: l.line, dev });
            }
            continue;
        }
        let Some((key, _)) = l.compact.split_once('=') else { continue };
        let key = key.strip_suffix(".workspace").unwrap_or(key).trim_matches(['"', '\'']);
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            out.push(Dependency { key: key.to_owned(), line: l.line, dev });
        }
    }
    out
}

/// For a `[section]` that lists dependencies, which kind; `None` for any other.
fn dependency_section(section: &str) -> Option<&'static str> {
    let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
    let first = section.split('.').next()?;
    if first == "target" {
        // `target.'cfg(unix)'.dependencies` and `target.….dependencies.name`: the last part that is a kind.
        return section.split('.').skip(1).filter_map(|p| kinds.into_iter().find(|k| *k == p)).last();
    }
    kinds.into_iter().find(|k| *k == first)
}

/// Whether `text` refers to the crate `ident` (a Rust identifier) in code.
pub(super) fn mentions(text: &str, ident: &str) -> bool {
    let bytes = text.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut from = 0;
    while let Some(found) = text[from..].find(ident) {
        let start = from + found;
        let end = start + ident.len();
        from = end;
        let before = &text[..start];
        let after = &text[end..];
        if before.as_bytes().last().copied().is_some_and(is_ident)
            || bytes.get(end).copied().is_some_and(is_ident)
        {
            continue;
        }
        // `a::name` is some module's item called name, not the crate; `::name` is the crate.
        if let Some(prefix) = before.strip_suffix("::") {
            if prefix.as_bytes().last().copied().is_some_and(is_ident) {
                continue;
            }
            return true;
        }
        if after.trim_start().starts_with("::") {
            return true;
        }
        let before = before.trim_end();
        if before.ends_with("use") || before.ends_with("extern crate") {
            let keyword_start = before.len() - if before.ends_with("use") { 3 } else { 12 };
            if !before.as_bytes()[..keyword_start].last().copied().is_some_and(is_ident) {
                return true;
            }
        }
    }
    false
}

/// One crate's sources, split by whether only tests see them.
#[derive(Default)]
pub(super) struct Sources {
    /// Library, binaries and build script.
    pub(super) shipped: String,
    /// `tests/`, `benches/`, `examples/` and the README's doctests.
    pub(super) test_only: String,
}

/// The unused dependencies of one crate, given its manifest and sources.
pub(super) fn check_crate(rel_manifest: &str, manifest: &str, sources: &Sources, out: &mut Vec<Violation>) {
    for dep in dependencies(manifest) {
        if ALLOWED.iter().any(|(m, key, _)| *m == rel_manifest && *key == dep.key) {
            continue;
        }
        let ident = dep.key.replace('-', "_");
        let in_shipped = mentions(&sources.shipped, &ident);
        if dep.dev {
            if !in_shipped && !mentions(&sources.test_only, &ident) {
                out.push(Violation::new(
                    rel_manifest,
                    Some(dep.line),
                    format!(
                        "dev-dependency `{}` is not used (no `{ident}::`, `use {ident}` in the crate's code): \
                         remove it, or list it in tidy/deps.rs ALLOWED with the reason",
                        dep.key
                    ),
                ));
            }
        } else if !in_shipped {
            let hint = if mentions(&sources.test_only, &ident) {
                "only tests use it: move it to [dev-dependencies]"
            } else {
                "remove it, or list it in tidy/deps.rs ALLOWED with the reason"
            };
            out.push(Violation::new(
                rel_manifest,
                Some(dep.line),
                format!("dependency `{}` is not used by the crate's code (`{ident}`): {hint}", dep.key),
            ));
        }
    }
}

/// Reads the sources of the crate in `dir`.
pub(super) fn read_sources(dir: &Path) -> anyhow::Result<Sources> {
    let mut files = Vec::new();
    collect_rs(dir, dir, &mut files)?;
    let mut sources = Sources::default();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let top = file.strip_prefix(dir).ok().and_then(|r| r.components().next());
        let test_only = top.and_then(|c| c.as_os_str().to_str()).is_some_and(|c| TEST_ONLY_DIRS.contains(&c));
        let into = if test_only { &mut sources.test_only } else { &mut sources.shipped };
        into.push_str(&text);
        into.push('\n');
    }
    if let Ok(readme) = std::fs::read_to_string(dir.join("README.md")) {
        sources.test_only.push_str(&readme);
    }
    Ok(sources)
}

/// Every `.rs` file under `dir`, not entering build output or another crate.
fn collect_rs(crate_dir: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let skipped = entry.file_name().to_str().is_some_and(is_skipped_dir);
            let nested_crate = path != crate_dir && path.join("Cargo.toml").is_file();
            if !skipped && !nested_crate {
                collect_rs(crate_dir, &path, out)?;
            }
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Checks every crate of the repository at `root`.
pub(super) fn check_all(root: &Path, out: &mut Vec<Violation>) -> anyhow::Result<()> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .context("reading crates/")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    dirs.sort();
    dirs.extend(EXTRA_CRATES.iter().map(|d| root.join(d)));
    for dir in dirs.iter().filter(|d| d.join("Cargo.toml").is_file()) {
        let rel = format!("{}/Cargo.toml", relative(root, dir));
        let manifest =
            std::fs::read_to_string(dir.join("Cargo.toml")).with_context(|| format!("reading {rel}"))?;
        let sources = read_sources(dir)?;
        check_crate(&rel, &manifest, &sources, out);
    }
    for (manifest, key, _) in ALLOWED {
        let listed = std::fs::read_to_string(root.join(manifest))
            .map(|text| dependencies(&text).iter().any(|d| d.key == *key))
            .unwrap_or(false);
        if !listed {
            out.push(Violation::new(
                "xtask/src/tidy/deps.rs",
                None,
                format!("ALLOWED lists `{key}` of {manifest}, which no longer has it: drop the row"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_of_dependency() {
        let manifest = "[package]\nname = \"x\"\nversion = \"1\"\n\n[dependencies]\n\
                        serde.workspace = true\nfoo-bar = { version = \"1\", features = [\n  \"a\",\n] }\n\
                        baz = \"1\"\n\n[dependencies.qux]\nversion = \"1\"\nfeatures = [\"b\"]\n\n\
                        [target.'cfg(unix)'.dependencies]\nrustix = \"1\"\n\
                        [target.\"cfg(target_os = \\\"linux\\\")\".dev-dependencies]\nlinux-only = \"1\"\n\
                        [dev-dependencies]\ninsta = \"1\"\n[build-dependencies]\ncc = \"1\"\n\
                        [features]\nfeat = [\"serde/std\"]\n";
        let deps: Vec<(String, bool)> = dependencies(manifest).into_iter().map(|d| (d.key, d.dev)).collect();
        let expect = [
            ("serde", false),
            ("foo-bar", false),
            ("baz", false),
            ("qux", false),
            ("rustix", false),
            ("linux-only", true),
            ("insta", true),
            ("cc", false),
        ];
        let expect: Vec<(String, bool)> = expect.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect();
        assert_eq!(deps, expect);
    }

    #[test]
    fn recognises_uses_of_a_crate() {
        for used in [
            "use serde::Serialize;",
            "pub use serde;",
            "extern crate serde;",
            "let x = serde::de::Error;",
            "#[derive(serde::Serialize)]",
            "fn f() -> ::serde::X {}",
            "use {serde :: Serialize};",
        ] {
            assert!(mentions(used, "serde"), "{used}");
        }
        for unused in [
            "use serde_json::Value;",
            "let serde = 1;",
            "use my::serde::X;",
            "a.serde()",
            "fn myserde() {}",
            "reuse serde",
        ] {
            assert!(!mentions(unused, "serde"), "{unused}");
        }
        assert!(mentions("#[tokio::main]\nasync fn main() {}", "tokio"));
    }

    fn violations(manifest: &str, shipped: &str, test_only: &str) -> Vec<String> {
        let sources = Sources { shipped: shipped.to_owned(), test_only: test_only.to_owned() };
        let mut out = Vec::new();
        check_crate("crates/x/Cargo.toml", manifest, &sources, &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn unused_dependencies_of_each_kind_are_reported() {
        let manifest = "[dependencies]\nused-dep = \"1\"\nunused = \"1\"\ntest-only = \"1\"\n\
                        [dev-dependencies]\ninsta = \"1\"\nnever = \"1\"\n";
        let found =
            violations(manifest, "use used_dep::X;", "fn t() { test_only::f(); insta::assert_snapshot!(x) }");
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("crates/x/Cargo.toml:3: dependency `unused` is not used"),
            "{}",
            found[0]
        );
        assert!(found[1].starts_with("crates/x/Cargo.toml:4: dependency `test-only`"), "{}", found[1]);
        assert!(found[1].ends_with("only tests use it: move it to [dev-dependencies]"), "{}", found[1]);
        assert!(
            found[2].starts_with("crates/x/Cargo.toml:7: dev-dependency `never` is not used"),
            "{}",
            found[2]
        );
    }

    /// A fixture crate on disk: a manifest with an unused dependency fails; using it passes.
    #[test]
    fn a_fixture_crate_with_an_unused_dependency_fails() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("crates/fixture");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::create_dir_all(dir.join("target/debug")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"fixture\"\n\n[dependencies]\nserde_json = \"1\"\nmemchr = \"2\"\n\n\
             [dev-dependencies]\nproptest = \"1\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("src/lib.rs"),
            "//! Fixture.\npub fn f() -> serde_json::Value { serde_json::Value::Null }\n",
        )
        .unwrap();
        std::fs::write(dir.join("tests/t.rs"), "use proptest::prelude::*;\n").unwrap();
        // Build output does not count as a use.
        std::fs::write(dir.join("target/debug/gen.rs"), "use memchr::memchr;\n").unwrap();
        let mut out = Vec::new();
        check_all(root.path(), &mut out).unwrap();
        let found: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].starts_with("crates/fixture/Cargo.toml:6: dependency `memchr` is not used"),
            "{}",
            found[0]
        );

        std::fs::write(dir.join("src/extra.rs"), "//! More.\nuse memchr::memchr;\n").unwrap();
        let mut out = Vec::new();
        check_all(root.path(), &mut out).unwrap();
        assert!(out.is_empty(), "{out:#?}");
    }

    #[test]
    fn dependency_sections_are_recognised() {
        assert_eq!(dependency_section("dependencies"), Some("dependencies"));
        assert_eq!(dependency_section("dev-dependencies.x"), Some("dev-dependencies"));
        assert_eq!(dependency_section("target.'cfg(unix)'.dev-dependencies"), Some("dev-dependencies"));
        assert_eq!(dependency_section("target.x86_64-unknown-linux-gnu.dependencies"), Some("dependencies"));
        assert_eq!(dependency_section("features"), None);
        assert_eq!(dependency_section("package.metadata.docs.rs"), None);
        assert_eq!(dependency_section("workspace.dependencies"), None);
    }
}
