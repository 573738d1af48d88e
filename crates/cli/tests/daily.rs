//! The small things of daily use (issue 19): bare `palimpsest`, shell
//! completions and the manual page, `delete` and `prune`, and `export`
//! taking its format from `-o`.

mod support;

use std::fs;
use std::path::Path;

use support::*;

/// A SQLite store holding the two fixture sessions (last active on
/// 2026-01-01) and, when `fresh`, a session active now.
fn store(d: &Path, fresh: bool) {
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl"] {
        ok(palimpsest(d, &["convert", f, "s.db"]));
    }
    if fresh {
        ok(palimpsest(d, &["demo", "--store", "s.db", "--pace", "0", "--quiet"]));
    }
}

fn ids(d: &Path) -> Vec<String> {
    let list = ok(palimpsest(d, &["sessions", "--json", "s.db"])).json();
    list.as_array()
        .map(|a| a.iter().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[test]
fn bare_palimpsest_prints_a_short_usage_not_an_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let run = palimpsest(dir.path(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    assert!(
        run.stdout.contains("palimpsest demo") && run.stdout.contains("palimpsest run"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.lines().count() < 25, "short: {}", run.stdout);
}

#[test]
fn completions_for_every_shell_and_a_man_page() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for (shell, marker) in [
        ("bash", "_palimpsest()"),
        ("zsh", "#compdef palimpsest"),
        ("fish", "complete -c palimpsest"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let run = ok(palimpsest(dir.path(), &["completions", shell]));
        assert!(run.stdout.contains(marker), "{shell}: {}", &run.stdout[..run.stdout.len().min(300)]);
        assert!(
            run.stdout.contains("sessions") && run.stdout.contains("prune"),
            "{shell} knows the commands"
        );
    }
    let bad = palimpsest(dir.path(), &["completions", "tcsh"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let man = ok(palimpsest(dir.path(), &["man"]));
    assert!(
        man.stdout.starts_with(".ie") || man.stdout.contains(".TH palimpsest 1"),
        "{}",
        &man.stdout[..200]
    );
    assert!(man.stdout.contains("export"), "the page lists the commands");
}

#[test]
fn delete_asks_or_needs_yes_and_removes_one_session() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl", "ok/crash-open.jsonl"]);
    let d = dir.path();
    store(d, false);
    // No terminal to ask: nothing is deleted without --yes.
    let refused = palimpsest(d, &["delete", "s.db", "--session", "crash-1"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("pass --yes") && refused.stderr.contains("crash-1 (11 events"),
        "{}",
        refused.stderr
    );
    assert_eq!(ids(d), ["crash-1", "example-1"]);
    let missing = palimpsest(d, &["delete", "s.db", "--session", "nosuch", "--yes"]);
    assert!(missing.stderr.contains("error[not-found]"), "{missing:?}");
    let no_session = palimpsest(d, &["delete", "s.db", "--yes"]);
    assert_eq!(no_session.code, 2, "a store of two sessions needs --session: {no_session:?}");
    // Without a question to show the whole id, a prefix is not enough:
    // a script deleting `proj` twice must not remove `proj-v2` the second
    // time.
    let prefix = palimpsest(d, &["delete", "s.db", "--session", "cra", "--yes"]);
    assert_eq!(prefix.code, 2, "{prefix:?}");
    assert!(
        prefix.stderr.starts_with("error[not-found]: ")
            && prefix.stderr.contains("did you mean \"crash-1\"?"),
        "{}",
        prefix.stderr
    );
    assert_eq!(ids(d), ["crash-1", "example-1"], "nothing deleted");
    let deleted = ok(palimpsest(d, &["delete", "s.db", "--session", "crash-1", "--yes"]));
    assert_eq!(deleted.stdout, "deleted crash-1\n");
    assert_eq!(ids(d), ["example-1"]);
    // A bare session file is deleted as a file, with its checkpoint.
    ok(palimpsest(d, &["convert", "s.db", "--session", "example-1", "lone.jsonl"]));
    assert!(d.join("lone.checkpoint.json").exists(), "convert left a checkpoint beside the file");
    ok(palimpsest(d, &["delete", "lone.jsonl", "--yes"]));
    assert!(!d.join("lone.jsonl").exists() && !d.join("lone.checkpoint.json").exists());
    ok(palimpsest(d, &["delete", "crash-open.jsonl", "--yes"]));
    assert!(!d.join("crash-open.jsonl").exists());
}

#[test]
fn prune_removes_only_sessions_older_than_the_duration() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl", "ok/crash-open.jsonl"]);
    let d = dir.path();
    store(d, true);
    assert_eq!(ids(d).len(), 3);
    let refused = palimpsest(d, &["prune", "s.db", "--older-than", "30d"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("would delete 2 sessions"), "{}", refused.stderr);
    assert_eq!(ids(d).len(), 3, "nothing deleted without --yes");
    let bad = palimpsest(d, &["prune", "s.db", "--older-than", "30"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("the unit is one of"), "{}", bad.stderr);
    let pruned = ok(palimpsest(d, &["prune", "s.db", "--older-than", "30d", "--yes"]));
    assert_eq!(pruned.stdout, "deleted crash-1\ndeleted example-1\n");
    let left = ids(d);
    assert_eq!(left.len(), 1);
    assert!(left[0].starts_with("demo-"), "{left:?}");
    let none = ok(palimpsest(d, &["prune", "s.db", "--older-than", "30d", "--yes"]));
    assert!(none.stdout.is_empty() && none.stderr.contains("no session"), "{none:?}");
}

/// A fork copies its parent's events with their times; made today, it is
/// today's, and `prune` keeps it (its last activity is the later of its
/// last event and its creation).
#[test]
fn prune_keeps_a_fork_made_today_of_an_old_session() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl", "ok/crash-open.jsonl"]);
    let d = dir.path();
    store(d, false);
    ok(palimpsest(d, &["fork", "s.db", "--session", "example-1", "--at", "5", "--id", "branch"]));
    let pruned = ok(palimpsest(d, &["prune", "s.db", "--older-than", "30d", "--yes"]));
    assert_eq!(pruned.stdout, "deleted crash-1\ndeleted example-1\n");
    assert_eq!(ids(d), ["branch"]);
}

/// One damaged session does not keep `prune` from the others: it is kept
/// and named, the others old enough go, and the exit is 1.
#[test]
fn prune_keeps_a_session_it_cannot_read_and_deletes_the_others() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl", "ok/crash-open.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl"] {
        ok(palimpsest(d, &["convert", f, "store"]));
    }
    let damaged = d.join("store").join("crash-1.jsonl");
    let mut text = fs::read_to_string(&damaged).expect("the session file");
    text.push_str("{\"seq\":99,\"time\":1,\"type\":\"x\"\n");
    fs::write(&damaged, text).expect("damage it");
    let run = palimpsest(d, &["prune", "store", "--older-than", "30d", "--yes"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, "deleted example-1\n", "{run:?}");
    assert!(
        run.stderr.contains("crash-1") && run.stderr.contains("kept: it cannot be read"),
        "{}",
        run.stderr
    );
    assert!(damaged.exists() && !d.join("store").join("example-1.jsonl").exists());
}

#[test]
fn export_takes_its_format_from_the_output_file_and_accepts_md() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl"]);
    let d = dir.path();
    let f = "compaction-and-prune.jsonl";
    ok(palimpsest(d, &["export", f, "-o", "a.md"]));
    ok(palimpsest(d, &["export", f, "-o", "a.html"]));
    ok(palimpsest(d, &["export", f, "-o", "a.json"]));
    let md = ok(palimpsest(d, &["export", f, "--format", "md"])).stdout;
    assert_eq!(fs::read_to_string(d.join("a.md")).expect("a.md"), md);
    assert!(fs::read_to_string(d.join("a.html")).expect("a.html").starts_with("<!DOCTYPE html>"));
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(d.join("a.json")).expect("a.json")).expect("JSON");
    assert_eq!(json["format"], "palimpsest-export");
    // --format wins over the extension.
    ok(palimpsest(d, &["export", f, "--format", "json", "-o", "b.md"]));
    assert!(fs::read_to_string(d.join("b.md")).expect("b.md").starts_with('{'));
    for args in [vec!["export", f], vec!["export", f, "-o", "x.txt"]] {
        let run = palimpsest(d, &args);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("error[usage]") && run.stderr.contains("--format"), "{}", run.stderr);
    }
}

/// Every reading command with STORE left out, and what each one needs after it.
const READERS: &[&[&str]] = &[
    &["validate"],
    &["surface"],
    &["derive"],
    &["repair"],
    &["inspect", "--color", "never"],
    &["sessions"],
    &["explain", "0"],
    &["export"],
    &["fork", "--at", "0"],
];

#[test]
fn reading_commands_without_store_use_palimpsest_db_here() {
    let dir = scratch(&["ok/crash-open.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "crash-open.jsonl", "palimpsest.db"]));
    for args in READERS {
        let (command, rest) = args.split_first().expect("a command");
        let defaulted = palimpsest(d, args);
        let mut named = vec![*command, "palimpsest.db"];
        named.extend_from_slice(rest);
        if *command == "fork" {
            // The first fork took the default id; the second gets `-2`.
            assert_eq!(defaulted.code, 0, "{defaulted:?}");
            assert!(defaulted.stdout.contains("-fork-0"), "{defaulted:?}");
            continue;
        }
        let named = palimpsest(d, &named);
        assert_eq!(
            (defaulted.code, &defaulted.stdout, &defaulted.stderr),
            (named.code, &named.stdout, &named.stderr),
            "{args:?} reads ./palimpsest.db"
        );
    }
}

#[test]
fn reading_commands_without_store_and_without_palimpsest_db_say_so_and_create_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let mut transcripts = Vec::new();
    for args in READERS {
        let run = palimpsest(d, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(run.stderr.lines().count(), 1, "one line: {run:?}");
        transcripts.push(run.transcript(args));
        let left: Vec<_> = fs::read_dir(d).expect("the dir").collect();
        assert!(left.is_empty(), "{args:?} created {left:?}");
    }
    // One snapshot: they all say the same thing.
    insta::assert_snapshot!("no_store_here", transcripts.join("\n"));
    for command in ["validate", "sessions", "explain", "export", "inspect"] {
        let help = ok(palimpsest(d, &[command, "--help"])).stdout;
        assert!(help.contains("[default: ./palimpsest.db"), "{command} --help says the default: {help}");
    }
}

#[test]
fn without_a_store_after_the_demo_the_error_names_the_demos_store() {
    let dir = scratch(&[]);
    let d = dir.path();
    ok(palimpsest(d, &["demo"]));
    let run = palimpsest(d, &["sessions"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("error[not-found]"), "{run:?}");
    assert!(run.stderr.contains("the demo wrote palimpsest-demo.db here"), "{run:?}");
    // And the store it names is the one that works.
    let listed = ok(palimpsest(d, &["sessions", "palimpsest-demo.db"])).stdout;
    assert!(listed.contains("demo-"), "{listed}");
}

#[test]
fn where_stdout_is_json_an_error_is_json_there_too() {
    let dir = scratch(&["ok/crash-open.jsonl", "err/seq-not-contiguous.jsonl"]);
    let d = dir.path();
    let cases: &[(&[&str], &str, i32)] = &[
        (&["validate", "--json", "missing.jsonl"], "io", 2),
        (&["sessions", "--json"], "not-found", 2),
        (&["explain", "--json", "crash-open.jsonl", "999"], "not-found", 2),
        (&["export", "--format", "json", "seq-not-contiguous.jsonl"], "seq-not-contiguous", 1),
    ];
    let mut transcripts = Vec::new();
    for (args, code, exit) in cases {
        let run = palimpsest(d, args);
        assert_eq!(run.code, *exit, "{args:?}: {run:?}");
        let json = run.json();
        assert_eq!(json["error"]["code"], *code, "{args:?}: {run:?}");
        // The same error, once on each stream.
        let line = run.stderr.lines().find(|l| l.starts_with("error[")).unwrap_or_default();
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(line, format!("error[{code}]: {message}"), "{args:?}");
        transcripts.push(run.transcript(args));
    }
    insta::assert_snapshot!("json_errors", transcripts.join("\n"));
    // A command line that does not parse, but asked for JSON, gets it too.
    let bad = palimpsest(d, &["sessions", "--json", "--bogus"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert_eq!(bad.json()["error"]["code"], "usage", "{bad:?}");
    assert!(bad.stderr.starts_with("error[usage]: unexpected argument '--bogus'"), "{bad:?}");
    // Not asked for JSON: stdout stays empty.
    for args in
        [&["validate", "missing.jsonl"][..], &["export", "seq-not-contiguous.jsonl", "--format", "md"]]
    {
        let run = palimpsest(d, args);
        assert_ne!(run.code, 0, "{run:?}");
        assert_eq!(run.stdout, "", "{args:?}");
    }
}

/// The paths into the repository a help text names: `docs/...`, `crates/...`
/// and the like, or a Markdown file that is a path (`a/b.md`) or a
/// repository file (`README.md`, `CHANGELOG.md`). An output name such as
/// `-o s.md` is not one.
fn repository_paths(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "()`'\",;[]{}".contains(c))
        .map(|w| w.trim_end_matches(['.', ':']))
        .filter(|w| {
            let md = w.strip_suffix(".md");
            ["docs/", "crates/", "rfcs/", "xtask/", "test_data/"].iter().any(|d| w.contains(d))
                || md.is_some_and(|stem| stem.contains('/') || stem.chars().any(|c| c.is_ascii_uppercase()))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_help_text_points_at_a_file_of_the_repository() {
    assert_eq!(
        repository_paths("see docs/export-format.md, or README.md; write -o s.md or x.md"),
        ["docs/export-format.md", "README.md"]
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let top = ok(palimpsest(dir.path(), &["--help"])).stdout;
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() > 15 && commands.iter().any(|c| c == "export"), "{commands:?}");
    let mut found = Vec::new();
    for command in std::iter::once(None).chain(commands.iter().map(Some)) {
        let args: Vec<&str> = command.map(String::as_str).into_iter().chain(["--help"]).collect();
        let help = ok(palimpsest(dir.path(), &args)).stdout;
        found.extend(repository_paths(&help).into_iter().map(|p| format!("{args:?}: {p}")));
    }
    let man = ok(palimpsest(dir.path(), &["man"])).stdout;
    found.extend(repository_paths(&man).into_iter().map(|p| format!("man: {p}")));
    assert!(found.is_empty(), "an installed binary has no such files: {found:#?}");
}

#[test]
fn man_dir_writes_one_page_per_command_and_lists_them() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let run = ok(palimpsest(dir.path(), &["man", "--dir", "pages"]));
    let listed: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(listed.first(), Some(&"pages/palimpsest.1"), "{listed:?}");
    for command in ["run", "export", "sessions", "man"] {
        assert!(listed.contains(&format!("pages/palimpsest-{command}.1").as_str()), "{command}: {listed:?}");
    }
    let mut on_disk: Vec<String> = fs::read_dir(dir.path().join("pages"))
        .expect("the pages")
        .map(|e| format!("pages/{}", e.expect("an entry").file_name().to_string_lossy()))
        .collect();
    on_disk.sort();
    let mut sorted: Vec<String> = listed.iter().map(|s| (*s).to_owned()).collect();
    sorted.sort();
    assert_eq!(sorted, on_disk, "every page written is listed");
    let top = fs::read_to_string(dir.path().join("pages/palimpsest.1")).expect("the top page");
    assert_eq!(top, ok(palimpsest(dir.path(), &["man"])).stdout, "the same page as `palimpsest man`");
    let run_page = fs::read_to_string(dir.path().join("pages/palimpsest-run.1")).expect("run's page");
    assert!(run_page.contains(".TH palimpsest-run 1"), "{}", &run_page[..200]);
}

/// `export -o`: a new file gets a new file's usual permissions (not the
/// temporary file's private 0600), a replaced file keeps its own, a
/// symlink is followed (the link stays, the file it names is replaced),
/// and `-o -` is stdout.
#[cfg(unix)]
#[test]
fn export_to_a_file_keeps_permissions_and_links_and_dash_is_stdout() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = scratch(&["ok/compaction-and-prune.jsonl"]);
    let d = dir.path();
    let f = "compaction-and-prune.jsonl";
    let md = ok(palimpsest(d, &["export", f, "--format", "md"])).stdout;
    let mode = |p: &str| fs::metadata(d.join(p)).expect("stat").permissions().mode() & 0o777;

    ok(palimpsest(d, &["export", f, "-o", "new.md"]));
    assert_eq!(mode("new.md"), 0o644);
    fs::write(d.join("old.md"), "old").expect("write");
    fs::set_permissions(d.join("old.md"), fs::Permissions::from_mode(0o640)).expect("chmod");
    ok(palimpsest(d, &["export", f, "-o", "old.md"]));
    assert_eq!(mode("old.md"), 0o640, "a replaced file keeps its permissions");
    assert_eq!(fs::read_to_string(d.join("old.md")).expect("read"), md);

    fs::write(d.join("real.md"), "old").expect("write");
    symlink("real.md", d.join("link.md")).expect("symlink");
    ok(palimpsest(d, &["export", f, "-o", "link.md"]));
    assert!(
        fs::symlink_metadata(d.join("link.md")).expect("stat").file_type().is_symlink(),
        "the link stays"
    );
    assert_eq!(fs::read_to_string(d.join("real.md")).expect("read"), md, "the file it names is replaced");

    let dash = ok(palimpsest(d, &["export", f, "--format", "md", "-o", "-"]));
    assert_eq!(dash.stdout, md);
    assert!(!d.join("-").exists(), "no file named -");
}

/// `export -o` naming what it reads from (the session file, the database
/// or a file of it, a session file of a JSONL directory, also through a
/// link) is refused before anything is written: it would replace the log
/// with its own export.
#[cfg(unix)]
#[test]
fn export_never_writes_over_the_store_it_reads() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl"]);
    let d = dir.path();
    let f = "compaction-and-prune.jsonl";
    ok(palimpsest(d, &["convert", f, "s.db"]));
    ok(palimpsest(d, &["convert", f, "dir"]));
    std::os::unix::fs::symlink(f, d.join("link.jsonl")).expect("symlink");
    let before = |p: &str| fs::read(d.join(p)).unwrap_or_default();
    let (log, db) = (before(f), before("s.db"));
    let session = ids_of(d, "dir");
    for (store, out) in [
        (f, f.to_owned()),
        (f, "./link.jsonl".to_owned()),
        ("s.db", "s.db".to_owned()),
        ("s.db", "s.db-wal".to_owned()),
        ("dir", format!("dir/{session}.jsonl")),
    ] {
        let run = palimpsest(d, &["export", store, "--format", "json", "-o", &out]);
        assert_eq!(run.code, 2, "{store} -o {out}: {run:?}");
        assert!(
            run.stderr.contains("error[usage]") && run.stderr.contains("what it is read from"),
            "{run:?}"
        );
    }
    assert_eq!(before(f), log, "the log is unchanged");
    assert_eq!(before("s.db"), db, "the database is unchanged");
    assert!(
        !d.join("s.db-wal").exists() || fs::metadata(d.join("s.db-wal")).map(|m| m.len()).unwrap_or(0) == 0
    );
    ok(palimpsest(d, &["validate", f]));
    ok(palimpsest(d, &["validate", "s.db"]));
    // Beside the store is fine.
    ok(palimpsest(d, &["export", "dir", "--format", "html", "-o", "dir/view.html"]));
}

fn ids_of(d: &Path, store: &str) -> String {
    let list = ok(palimpsest(d, &["sessions", "--json", store])).json();
    list[0]["id"].as_str().map(str::to_owned).unwrap_or_default()
}

/// A session file of `context/message`-shaped events (`kind` is the type)
/// written to `d/name`: event `k` appends when `rewrite(k)` is `None`, or
/// replaces `start..=end` citing `cites` for `Some((cites, start, end))`.
fn message_log(
    d: &Path,
    name: &str,
    kind: &str,
    count: usize,
    rewrite: impl Fn(usize) -> Option<(Vec<usize>, usize, usize)>,
) {
    let mut log = format!("{{\"type\":\"session\",\"version\":0,\"id\":\"{name}\",\"createdAt\":1}}\n");
    for k in 0..count {
        let data = format!(
            r#"{{"message":{{"id":"m{k}","role":"user","content":[{{"type":"text","text":"t{k}"}}],"source":{{"kind":"user"}}}}}}"#
        );
        let surfacing = match rewrite(k) {
            None => "\"surfaceOp\":\"append\"".to_owned(),
            Some((cites, start, end)) => {
                let cites: Vec<String> = cites.iter().map(usize::to_string).collect();
                format!(
                    "\"sourceEventSeqs\":[{}],\"surfaceOp\":{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}",
                    cites.join(",")
                )
            }
        };
        log.push_str(&format!(
            "{{\"seq\":{k},\"time\":1,\"type\":\"{kind}\",\"data\":{data},{surfacing}}}\n"
        ));
    }
    fs::write(d.join(format!("{name}.jsonl")), log).expect("write");
}

/// Provenance is a graph: each rewrite here cites every event before it
/// (rule 7 allows citing more than is shadowed). `explain` shows each
/// cited event's own cites once, so its output grows with the citations,
/// not with the paths through them (2^39 here, which ran out of memory).
#[test]
fn explain_shows_shared_provenance_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    message_log(d, "dag", "user/message", 40, |k| (k > 0).then(|| ((0..k).collect(), k - 1, k - 1)));
    ok(palimpsest(d, &["validate", "dag.jsonl"]));
    let text = ok(palimpsest(d, &["explain", "dag.jsonl", "39"])).stdout;
    // One line per citation reachable from 39: 39 + 38 + ... + 1.
    let tree_lines = text.lines().filter(|l| l.contains("user/message")).count();
    assert!(tree_lines <= 39 * 40 / 2 + 5, "{tree_lines} lines");
    assert!(text.contains("its cites are shown above"), "{text}");
    let json = ok(palimpsest(d, &["explain", "dag.jsonl", "39", "--json"])).json();
    fn nodes(v: &serde_json::Value) -> usize {
        v["cites"].as_array().map_or(0, |c| c.len() + c.iter().map(nodes).sum::<usize>())
    }
    assert_eq!(nodes(&json), 39 * 40 / 2);
    assert_eq!(json["cites"][0]["seq"], 0);
    assert_eq!(json["cites"][1]["repeated"], serde_json::Value::Null, "seq 1 is first met here: expanded");
    assert_eq!(json["citesElided"], serde_json::Value::Null, "within the budget nothing is left out");
}

/// A session no store can hold (an empty id) is refused before the
/// destination is made: no empty database is left behind.
#[test]
fn convert_refuses_an_empty_id_before_making_the_destination() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    fs::write(d.join("empty-id.jsonl"), "{\"type\":\"session\",\"version\":0,\"id\":\"\",\"createdAt\":1}\n")
        .expect("write");
    for dst in ["out.db", "out-dir"] {
        let run = palimpsest(d, &["convert", "empty-id.jsonl", dst]);
        assert_eq!(run.code, 2, "{dst}: {run:?}");
        assert!(run.stderr.contains("error[invalid-id]"), "{run:?}");
        assert!(!d.join(dst).exists(), "{dst} was made");
    }
}

/// A JSONL directory with one file whose header cannot be read: `sessions`
/// lists the others and that one with `?` and its error (exit 1), and a
/// command naming another session by its whole id works.
#[test]
fn one_broken_file_does_not_hide_a_directorys_other_sessions() {
    let dir = scratch(&["ok/compaction-and-prune.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "dir"]));
    fs::write(d.join("dir/broken.jsonl"), "{\"type\":\"session\"\n").expect("write");
    let run = palimpsest(d, &["sessions", "dir"]);
    assert_eq!(run.code, 1, "{run:?}");
    let rows: Vec<&str> = run.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{}", run.stdout);
    assert!(rows.iter().any(|r| r.starts_with("broken ") && r.contains(" ? ")), "{}", run.stdout);
    assert!(rows.iter().any(|r| r.starts_with("example-1 ")), "{}", run.stdout);
    assert!(
        run.stderr.contains("error[header-malformed]") || run.stderr.contains("error[corrupt]"),
        "{run:?}"
    );
    ok(palimpsest(d, &["validate", "dir", "--session", "example-1"]));
}

/// A session read from a pipe (`validate <(zcat s.jsonl.gz)`, `/dev/stdin`,
/// a FIFO) is read once, whole: its first bytes are never taken by a look
/// for the SQLite header, so a valid log is valid. A command that reads
/// the session twice says it cannot, instead of reading nothing or waiting.
#[cfg(unix)]
#[test]
fn a_session_read_from_a_pipe_is_read_whole_and_once() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let dir = scratch(&["ok/compaction-and-prune.jsonl"]);
    let d = dir.path();
    let log = fs::read(d.join("compaction-and-prune.jsonl")).expect("read");
    let piped = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_palimpsest"))
            .args(args)
            .current_dir(d)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        let bytes = log.clone();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
        let out = child.wait_with_output().expect("wait");
        let _ = writer.join();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = piped(&["validate", "--json", "/dev/stdin"]);
    assert_eq!(code, Some(0), "{stdout} {stderr}");
    assert!(stdout.contains("\"valid\":true") && stdout.contains("\"events\":27"), "{stdout}");
    let (code, stdout, _) = piped(&["surface", "/dev/stdin"]);
    assert_eq!((code, stdout.trim()), (Some(0), "[20,15,17,24]"));
    let (code, _, stderr) = piped(&["inspect", "/dev/stdin"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("a pipe can be read once"), "{stderr}");
}

/// A shadow chain as long as the log (each rewrite replacing the one
/// before) is shown by its ends, saying how many replaces were left out:
/// every replace shown is an event held, and a million of them took 516 MB.
#[test]
fn a_long_shadow_chain_is_shown_by_its_ends() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    message_log(d, "chain", "context/message", 200, |k| (k > 0).then(|| (vec![k - 1], k - 1, k - 1)));
    ok(palimpsest(d, &["validate", "chain.jsonl"]));
    let json = ok(palimpsest(d, &["explain", "chain.jsonl", "0", "--json"])).json();
    let chain: Vec<u64> = json["shadowChain"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(chain.len(), 64, "{json}");
    assert_eq!((chain[0], chain[31], chain[32], chain[63]), (1, 32, 168, 199));
    assert_eq!(json["shadowChainElided"], 135);
    assert_eq!(json["standsInItsPlace"], 199);
    let text = ok(palimpsest(d, &["explain", "chain.jsonl", "0"])).stdout;
    assert!(text.contains("then 135 more replaces (not shown), then 168 context/message"), "{text}");
    assert!(text.contains("199 context/message stands in its place"), "{text}");
}

/// One replace citing more events than the tree's node budget: the cites
/// left out are counted, in the text and in `--json`, never dropped silently.
#[test]
fn cites_past_the_node_budget_are_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let n = 10_050usize;
    message_log(d, "wide", "context/message", n + 1, |k| (k == n).then(|| ((0..n).collect(), 0, n - 1)));
    let seq = n.to_string();
    let json = ok(palimpsest(d, &["explain", "wide.jsonl", &seq, "--json"])).json();
    assert_eq!(json["cites"].as_array().map(Vec::len), Some(10_000));
    assert_eq!(json["citesElided"], 50);
    let text = ok(palimpsest(d, &["explain", "wide.jsonl", &seq])).stdout;
    assert!(text.contains("… and 50 more of its own cites, not shown"), "{}", &text[text.len() - 400..]);
}

#[cfg(unix)]
#[test]
fn a_writing_command_on_a_fifo_is_refused_not_waited_on() {
    let dir = scratch(&[]);
    let d = dir.path();
    let made = std::process::Command::new("mkfifo").arg(d.join("ff.jsonl")).status().expect("mkfifo");
    assert!(made.success());
    for args in [&["delete", "ff.jsonl", "--yes"][..], &["repair", "--write", "ff.jsonl"]] {
        let run = palimpsest(d, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("not a regular file"), "{args:?}: {run:?}");
    }
    // A conversion into it is refused as into any path that exists; it
    // used to open the FIFO to read what it held, and wait for ever.
    std::fs::copy(test_data("ok/settings.jsonl"), d.join("src.jsonl")).expect("copy");
    let run = palimpsest(d, &["convert", "src.jsonl", "ff.jsonl"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("error[already-exists]"), "{run:?}");
    assert!(run.stderr.contains("not a regular file"), "{run:?}");
}
