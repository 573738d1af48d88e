//! The text of the CLI's error paths, pinned in one snapshot so that a
//! change to what users read is a reviewed diff: each run's command line,
//! exit code and stderr, in a scratch directory holding a JSONL store, a
//! SQLite store and a few broken logs (paths in the output are relative).

mod support;

use std::fs;

use support::*;

#[test]
fn every_error_path_says_what_happened_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |name: &str| dir.path().join(name);
    for (from, to) in [
        ("err/event-malformed.jsonl", "malformed.jsonl"),
        ("err/version-1.jsonl", "version-1.jsonl"),
        ("err/empty.jsonl", "empty.jsonl"),
        ("err/corrupt-middle.jsonl", "corrupt.jsonl"),
        ("err/replace-start-missing.jsonl", "replace.jsonl"),
        ("ok/compaction-and-prune.jsonl", "example.jsonl"),
        ("ok/settings.jsonl", "settings.jsonl"),
        ("ok/crash-open.jsonl", "crash.jsonl"),
    ] {
        fs::copy(test_data(from), at(to)).expect("copy a fixture");
    }
    // A SQLite store with three sessions, two of them sharing a prefix.
    for file in ["example.jsonl", "settings.jsonl", "crash.jsonl"] {
        ok(palimpsest(dir.path(), &["convert", file, "s.db"]));
    }
    ok(palimpsest(dir.path(), &["fork", "s.db", "--session", "example-1", "--at", "3"]));

    let cases: &[&[&str]] = &[
        // Finding the store and the session.
        &["validate"],
        &["validate", "nosuch.jsonl"],
        &["sessions", "nosuch-dir"],
        &["inspect", "s.db", "--session", "nosuch"],
        &["inspect", "s.db", "--session", "example"],
        &["inspect", "s.db"],
        // Logs that break the contract.
        &["validate", "malformed.jsonl"],
        &["validate", "version-1.jsonl"],
        &["validate", "empty.jsonl"],
        &["validate", "corrupt.jsonl"],
        &["derive", "replace.jsonl"],
        &["repair", "replace.jsonl", "--write"],
        // Operations refused.
        &["fork", "s.db", "--session", "example-1", "--at", "9999"],
        &["explain", "s.db", "--session", "example-1", "9999"],
        &["convert", "example.jsonl", "s.db"],
        &["delete", "s.db", "--session", "nosuch", "--yes"],
        &["prune", "s.db", "--older-than", "soon"],
        &["search", "s.db", "--", "  "],
        &["demo", "--resume", "nosuch", "--store", "s.db"],
        &["run", "--store", "new.sqlite", "hello"],
        // Usage.
        &["frobnicate"],
        &["export", "s.db", "--session", "example-1", "--format", "pdf"],
    ];
    let mut text = String::new();
    for args in cases {
        let run = palimpsest(dir.path(), args);
        assert_ne!(run.code, 0, "an error path that succeeded: {run:?}");
        assert!(!run.stderr.is_empty(), "an error with nothing on stderr: {run:?}");
        let errors = run.stderr.lines().filter(|l| l.starts_with("error")).count();
        assert!(errors >= 1, "no error line: {run:?}");
        text.push_str(&format!(
            "$ palimpsest {}\n[exit {}]\n{}\n",
            args.join(" "),
            run.code,
            run.stderr.trim_end()
        ));
    }
    // Nothing a refused command touched was created or changed.
    assert!(!at("palimpsest.db").exists(), "a reading command created the default store");
    assert!(!at("new.sqlite").exists(), "a refused run created its store");
    insta::assert_snapshot!("every_error_path", text);
}
