//! `palimpsest search`: the same hits from every kind of STORE, the human
//! and JSON output, grep's exit codes, and that searching changes nothing.

mod support;

use std::fs;
use std::path::Path;

use support::*;

/// Sessions with shadowed messages (a prune, a compaction), a fork, and
/// settings: the CLI's fixtures, four sessions.
const FIXTURES: [&str; 4] = ["compaction-and-prune", "forked", "settings", "crash-open"];

/// Writes the fixtures into `store` (a `.db` file or a directory).
fn fill(dir: &Path, store: &str) {
    for f in FIXTURES {
        let src = test_data(&format!("ok/{f}.jsonl"));
        ok(palimpsest(dir, &["convert", &src.display().to_string(), store]));
    }
}

fn run(dir: &Path, args: &[&str]) -> (Run, String) {
    let run = palimpsest(dir, args);
    let transcript = run.transcript(args);
    (run, transcript)
}

/// Every file under `dir` with its bytes.
fn snapshot_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).expect("read")))
        .collect();
    files.sort();
    files
}

#[test]
fn human_output_shows_id_seq_type_time_and_snippet_shadowed_messages_included() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill(dir.path(), "store.db");
    let (run, transcript) = run(dir.path(), &["search", "store.db", "milk", "--color", "never"]);
    assert_eq!(run.code, 0, "{run:?}");
    insta::assert_snapshot!("search_human", transcript);
}

#[test]
fn json_output_is_one_array_of_hits_with_full_ids() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill(dir.path(), "store.db");
    let (run, transcript) = run(dir.path(), &["search", "store.db", "NOTES.txt", "--json", "--limit", "4"]);
    assert_eq!(run.code, 0, "{run:?}");
    let hits = run.json();
    assert_eq!(hits.as_array().map(Vec::len), Some(4), "{hits}");
    insta::assert_snapshot!("search_json", transcript);
}

#[test]
fn every_store_form_gives_the_same_hits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    fill(d, "store.db");
    fill(d, "jsonl-store");
    for words in [&["milk"][..], &["notes", "txt"][..], &["it", "says"][..], &["You"][..]] {
        for json in [false, true] {
            let mut args = vec!["search", "STORE"];
            args.extend(words);
            args.extend(["--limit", "50"]);
            if json {
                args.push("--json");
            }
            fn with<'a>(args: &[&'a str], store: &'a str) -> Vec<&'a str> {
                args.iter().map(|a| if *a == "STORE" { store } else { a }).collect()
            }
            let db = ok(palimpsest(d, &with(&args, "store.db")));
            let jsonl = ok(palimpsest(d, &with(&args, "jsonl-store")));
            assert_eq!(db.stdout, jsonl.stdout, "search {words:?} (json: {json}): SQLite and JSONL differ");
        }
    }
    // A bare session file is a store of one session.
    let file = test_data("ok/compaction-and-prune.jsonl").display().to_string();
    let one = ok(palimpsest(d, &["search", &file, "milk", "--json"])).json();
    let seqs: Vec<u64> = one.as_array().into_iter().flatten().filter_map(|h| h["seq"].as_u64()).collect();
    assert_eq!(seqs, [8, 12, 20], "{one}");
}

#[test]
fn query_words_are_highlighted_when_colours_are_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill(dir.path(), "store.db");
    let run =
        ok(palimpsest(dir.path(), &["search", "store.db", "forty", "--color", "always", "--limit", "1"]));
    assert!(run.stdout.contains("\x1b[1;33mforty\x1b[0m"), "{:?}", run.stdout);
    let plain = ok(palimpsest(dir.path(), &["search", "store.db", "forty", "--limit", "1"]));
    assert!(!plain.stdout.contains('\x1b'), "no colour when stdout is not a terminal: {:?}", plain.stdout);
}

#[test]
fn no_hit_is_exit_1_like_grep_and_an_empty_query_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill(dir.path(), "store.db");
    let (none, transcript) = run(dir.path(), &["search", "store.db", "milk", "unicorn"]);
    assert_eq!(none.code, 1, "{none:?}");
    insta::assert_snapshot!("search_no_hit", transcript);
    let (json, _) = run(dir.path(), &["search", "store.db", "unicorn", "--json"]);
    assert_eq!((json.code, json.stdout.as_str()), (1, "[]\n"), "{json:?}");

    let (empty, transcript) = run(dir.path(), &["search", "store.db", "--", "--", "?!"]);
    assert_eq!(empty.code, 2, "{empty:?}");
    insta::assert_snapshot!("search_empty_query", transcript);
    let zero = palimpsest(dir.path(), &["search", "store.db", "milk", "--limit", "0"]);
    assert_eq!(zero.code, 2, "{zero:?}");
    let missing = palimpsest(dir.path(), &["search", "nowhere.db", "milk"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(!dir.path().join("nowhere.db").exists(), "a missing store is not created");
}

#[test]
fn the_limit_says_when_it_cut_the_list() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill(dir.path(), "store.db");
    let cut = ok(palimpsest(dir.path(), &["search", "store.db", "milk", "--limit", "2", "--json"]));
    assert_eq!(cut.json().as_array().map(Vec::len), Some(2));
    assert!(cut.stderr.contains("the first 2 hits are shown"), "{}", cut.stderr);
    let all = ok(palimpsest(dir.path(), &["search", "store.db", "milk", "--limit", "5", "--json"]));
    assert_eq!(all.json().as_array().map(Vec::len), Some(5));
    assert_eq!(all.stderr, "", "no note when every hit is shown");
}

#[test]
fn searching_changes_no_byte_of_any_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    fill(d, "store.db");
    fill(d, "jsonl-store");
    // Leave the database clean, as a closed writer does (no -wal, no -shm).
    let before_db = snapshot_of(d);
    let before_dir = snapshot_of(&d.join("jsonl-store"));
    ok(palimpsest(d, &["search", "store.db", "milk"]));
    ok(palimpsest(d, &["search", "jsonl-store", "milk"]));
    assert_eq!(snapshot_of(d), before_db, "the database (and the files beside it) are unchanged");
    assert_eq!(snapshot_of(&d.join("jsonl-store")), before_dir, "the JSONL store is unchanged");
}

/// Logged text reaches the terminal without its control characters: an
/// ESC that would start a colour or a window-title sequence, a BEL, a NUL
/// in a prompt are shown as `�` by `search` and in `sessions`' TITLE, as
/// `inspect` and `explain` show them; `--json` keeps the text as logged.
#[test]
fn control_characters_in_logged_text_never_reach_the_terminal() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let text = fs::read_to_string(test_data("ok/compaction-and-prune.jsonl")).expect("read");
    let hostile = text
        .replace("What is in notes.txt?", r"What \u001b[31mRED\u001b]0;pwned\u0007 is \u0000in notes.txt?");
    assert_ne!(hostile, text, "the fixture holds the prompt");
    fs::write(d.join("esc.jsonl"), hostile).expect("write");
    for store in ["esc.jsonl", "esc.db"] {
        if store == "esc.db" {
            ok(palimpsest(d, &["convert", "esc.jsonl", "esc.db"]));
        }
        for args in [&["search", store, "notes"][..], &["sessions", store]] {
            let out = ok(palimpsest(d, args)).stdout;
            assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{args:?}: {out:?}");
            assert!(out.contains("What �[31mRED�]0;pwned� is �in"), "{args:?}: {out:?}");
        }
        let json = ok(palimpsest(d, &["search", store, "notes", "--json"])).json();
        let logged = json.to_string();
        assert!(logged.contains(r"\u001b[31mRED"), "--json keeps the text as logged: {logged}");
    }
}

/// A store that cannot be searched whole is exit 2, as grep's error, not
/// exit 1 ("nothing matched"), whatever the error's own code: here one
/// session of a JSONL directory does not decode (`event-malformed`).
#[test]
fn a_store_that_cannot_be_searched_is_exit_2_not_nothing_found() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let src = test_data("ok/compaction-and-prune.jsonl").display().to_string();
    ok(palimpsest(d, &["convert", &src, "store"]));
    let text = fs::read_to_string(test_data("ok/compaction-and-prune.jsonl")).expect("read");
    let broken =
        text.replace("\"id\":\"example-1\"", "\"id\":\"zbad\"").replace("\"turn\":1,", "\"turn\":\"x\",");
    fs::write(d.join("store/zbad.jsonl"), broken).expect("write");
    for json in [false, true] {
        let mut args = vec!["search", "store", "notes"];
        if json {
            args.push("--json");
        }
        let run = palimpsest(d, &args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("error[event-malformed]"), "{args:?}: {run:?}");
    }
}

/// The same for ids, a working directory, a system prompt and tool names:
/// every human view (`sessions`, its tree, `search`, `inspect`, `explain`,
/// the note `fork` prints) shows their control characters as `�`.
#[test]
fn control_characters_in_ids_and_settings_never_reach_the_terminal() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let text = fs::read_to_string(test_data("ok/settings.jsonl")).expect("read");
    let hostile = text
        .replace("You are a pirate.", r"You are \u001b[31ma pirate\u0007.")
        .replace("\"name\":\"read_file\"", r#""name":"read\u001b]0;x\u0007_file""#);
    assert_ne!(hostile, text);
    fs::write(d.join("s.jsonl"), hostile).expect("write");
    ok(palimpsest(d, &["convert", "s.jsonl", "s.db"]));
    let id = ok(palimpsest(d, &["sessions", "--json", "s.db"])).json()[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let evil = "x\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let fork = palimpsest(d, &["fork", "s.db", "--session", &id, "--at", "2", "--id", evil]);
    assert_eq!(fork.code, 0, "{fork:?}");
    assert!(!fork.stderr.chars().any(|c| c.is_control() && c != '\n'), "{:?}", fork.stderr);
    let runs = [
        vec!["sessions", "s.db"],
        vec!["sessions", "--tree", "s.db"],
        vec!["search", "s.db", "pirate"],
        vec!["inspect", "s.db", "--session", evil, "--no-pager", "--color", "never"],
        vec!["inspect", "s.db", "--session", &id, "--no-pager", "--color", "never"],
        vec!["explain", "s.db", "--session", evil, "0"],
    ];
    for args in runs {
        let out = palimpsest(d, &args);
        assert!(out.code == 0 || out.code == 1, "{args:?}: {out:?}");
        let shown = out.stdout + &out.stderr;
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{args:?}: {shown:?}");
    }
}
