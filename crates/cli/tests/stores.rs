//! End-to-end tests of the STORE forms (a JSONL file, a JSONL store
//! directory, a SQLite database), `sessions` and `convert`, with the real
//! `palimpsest` binary.

mod support;

use std::fs;
use std::path::Path;

use palimpsest_core_session::payload::{
    AssistantChunk, AssistantMessage, Block, Message, PluginEvent, Role, Source, StepEnd, StepStart,
    StreamChunk, ToolCall, ToolResult, TurnEnd, TurnEndReason, TurnStart, Usage, UserMessage,
};
use palimpsest_core_session::{jsonl, AppendError, Session, SessionHeader, SurfaceIntent};
use serde_json::json;

use support::*;

const EXAMPLE: &str = "ok/compaction-and-prune.jsonl";

// ---------------------------------------------------------------- round trips

#[test]
fn jsonl_to_sqlite_to_jsonl_is_byte_identical_for_the_worked_example() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    let run = ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "store.db"]));
    assert_eq!(
        run.stdout,
        "converted 1 session (27 events) from compaction-and-prune.jsonl (JSONL file) \
         to store.db (SQLite database)\n"
    );
    ok(palimpsest(d, &["convert", "store.db", "--session", "example-1", "back.jsonl"]));
    ok(palimpsest(d, &["convert", "store.db", "back-dir"]));
    let original = fs::read(test_data(EXAMPLE)).expect("read");
    assert_eq!(fs::read(d.join("back.jsonl")).expect("read"), original);
    assert_eq!(fs::read(d.join("back-dir/example-1.jsonl")).expect("read"), original);
}

#[test]
fn jsonl_to_sqlite_to_jsonl_is_byte_identical_for_a_large_session() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let original = large_session(1500).expect("a valid generated session");
    fs::write(d.join("big.jsonl"), &original).expect("write");
    let report = ok(palimpsest(d, &["validate", "--json", "big.jsonl"])).json();
    let events = report["events"].as_u64().unwrap_or_default();
    assert!(events > 20_000, "{report}");

    let run = ok(palimpsest(d, &["convert", "big.jsonl", "big.db"]));
    assert_eq!(run.stderr, "", "no progress bar when stderr is not a terminal");
    assert_eq!(ok(palimpsest(d, &["validate", "--json", "big.db"])).json()["events"], json!(events));
    ok(palimpsest(d, &["convert", "big.db", "back.jsonl", "--session", "big-1"]));
    assert!(fs::read(d.join("back.jsonl")).expect("read") == original, "the round trip changed bytes");
}

#[test]
fn a_whole_store_converts_both_ways_file_for_file() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl", "ok/forked.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl", "forked.jsonl"] {
        ok(palimpsest(d, &["convert", f, "store"]));
    }
    let run = ok(palimpsest(d, &["convert", "store", "all.db"]));
    assert!(
        run.stdout.starts_with("converted 3 sessions (54 events) from store (JSONL directory)"),
        "{run:?}"
    );
    ok(palimpsest(d, &["convert", "all.db", "again"]));
    let mut names: Vec<String> = fs::read_dir(d.join("again"))
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Each session beside its checkpoint, but the crashed one: its last
    // turn is open, and checkpoints are taken at turn boundaries.
    assert_eq!(
        names,
        [
            "%46ork%2F%C3%BC-1.checkpoint.json",
            "%46ork%2F%C3%BC-1.jsonl",
            "crash-1.jsonl",
            "example-1.checkpoint.json",
            "example-1.jsonl"
        ]
    );
    names.retain(|n| n.ends_with(".jsonl"));
    for name in names {
        assert_eq!(
            fs::read(d.join("again").join(&name)).expect("read"),
            fs::read(d.join("store").join(&name)).expect("read"),
            "{name}"
        );
    }
    assert_eq!(
        fs::read(d.join("again/%46ork%2F%C3%BC-1.jsonl")).expect("read"),
        fs::read(test_data("ok/forked.jsonl")).expect("read")
    );
}

#[test]
fn convert_never_overwrites_a_session() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "s.db"]));
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "dir"]));
    let before = fs::read(d.join("dir/example-1.jsonl")).expect("read");
    for dst in ["s.db", "dir"] {
        let run = palimpsest(d, &["convert", "compaction-and-prune.jsonl", dst]);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.starts_with(&format!("error[already-exists]: {dst}: ")), "{:?}", run.stderr);
        assert!(run.stderr.contains("\"example-1\""), "{:?}", run.stderr);
    }
    assert_eq!(fs::read(d.join("dir/example-1.jsonl")).expect("read"), before);
    let run = palimpsest(d, &["convert", "s.db", "--session", "example-1", "compaction-and-prune.jsonl"]);
    assert_eq!(run.code, 1, "an existing file is not overwritten either: {run:?}");
    assert!(run.stderr.starts_with("error[already-exists]"), "{:?}", run.stderr);

    // Nor is a session file made inside the directory store being read,
    // under a name that is not its id's.
    let into_itself = palimpsest(d, &["convert", "dir", "dir/copy.jsonl"]);
    assert_eq!(into_itself.code, 2, "{into_itself:?}");
    assert!(into_itself.stderr.contains("inside the JSONL directory being converted"), "{into_itself:?}");
    assert!(!d.join("dir/copy.jsonl").exists());
}

/// A second conversion of a whole store (after one stopped midway, say)
/// names the first few sessions already there and how many, not all.
#[test]
fn convert_into_a_store_holding_many_of_the_sessions_names_a_few() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "src"]));
    for i in 0..6 {
        ok(palimpsest(d, &["fork", "src", "--session", "example-1", "--at", "5", "--id", &format!("b{i}")]));
    }
    ok(palimpsest(d, &["convert", "src", "s.db"]));
    let run = palimpsest(d, &["convert", "src", "s.db"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(
            r#"already holds "b0", "b1", "b2", "b3", "b4", and 2 more (all 7 sessions of the source)"#
        ),
        "{}",
        run.stderr
    );
}

/// A destination file in directories that do not exist yet gets them, as
/// a destination directory does.
#[test]
fn convert_makes_the_directories_of_a_new_destination_file() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    for dst in ["new/a/s.db", "new/b/c/x.jsonl", "new/d/store"] {
        ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", dst]));
        let listed = ok(palimpsest(d, &["sessions", dst, "--json"])).json();
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{dst}: {listed}");
    }
}

#[test]
fn convert_checks_every_session_before_writing_any() {
    let dir = scratch(&[EXAMPLE, "err/replace-reversed.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "src"]));
    // Put an invalid session into the source store by hand.
    fs::copy(d.join("replace-reversed.jsonl"), d.join("src/rules.jsonl")).expect("copy");
    let run = palimpsest(d, &["convert", "src", "out.db"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("error[replace-reversed]: src/rules.jsonl:5: seq 3: "), "{:?}", run.stderr);
    assert!(!d.join("out.db").exists(), "nothing was written, not even the database");
    // The valid session alone converts.
    ok(palimpsest(d, &["convert", "src", "--session", "example-1", "out.db"]));
}

/// An id a SQLite store holds but a JSONL directory cannot name a file
/// after (over 255 bytes encoded) is refused before anything is written:
/// not the sessions before it, not the directory.
#[test]
fn convert_checks_every_id_fits_the_destination_before_writing_any() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "s.db"]));
    let long = "L".repeat(300);
    ok(palimpsest(d, &["fork", "s.db", "--session", "example-1", "--at", "3", "--id", &long]));
    ok(palimpsest(d, &["fork", "s.db", "--session", "example-1", "--at", "3", "--id", "A0"]));
    let run = palimpsest(d, &["convert", "s.db", "out"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("error[invalid-id]: out: "), "{:?}", run.stderr);
    assert!(!d.join("out").exists(), "nothing was written, not even the directory");
    // Without the long one, the rest converts.
    ok(palimpsest(d, &["convert", "s.db", "--session", "A0", "out"]));
}

#[test]
fn convert_rejects_a_session_file_destination_for_many_sessions() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "two.db"]));
    ok(palimpsest(d, &["convert", "crash-open.jsonl", "two.db"]));
    let run = palimpsest(d, &["convert", "two.db", "one.jsonl"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("error[usage]: one.jsonl names one session file"), "{:?}", run.stderr);
    assert!(!d.join("one.jsonl").exists());
}

// ---------------------------------------------------------------- STORE forms

#[test]
fn every_reading_command_takes_every_store_form() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "one.db"]));
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "one-dir"]));
    let file = ["compaction-and-prune.jsonl"];
    for cmd in
        [&["validate", "--json"][..], &["surface"], &["derive"], &["derive", "--provenance"], &["repair"]]
    {
        let expected = ok(palimpsest(d, &[cmd, &file[..]].concat())).stdout;
        for store in ["one.db", "one-dir"] {
            for session in [&[][..], &["--session", "example-1"]] {
                let args = [cmd, &[store][..], session].concat();
                let run = ok(palimpsest(d, &args));
                assert_eq!(run.stdout, expected, "{args:?}");
                assert_eq!(run.stderr, "", "{args:?}");
            }
        }
    }
    // inspect names its source: the file inside the directory, or db#id.
    let inspect = ok(palimpsest(d, &["inspect", "one-dir"])).stdout;
    assert!(inspect.contains("source    one-dir/example-1.jsonl\n"), "{inspect}");
    let inspect = ok(palimpsest(d, &["inspect", "one.db"])).stdout;
    assert!(inspect.contains("source    one.db#example-1\n"), "{inspect}");
}

#[test]
fn a_store_with_many_sessions_needs_session_and_lists_the_ids() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl"] {
        ok(palimpsest(d, &["convert", f, "many.db"]));
        ok(palimpsest(d, &["convert", f, "many"]));
    }
    for store in ["many.db", "many"] {
        let run = palimpsest(d, &["surface", store]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.starts_with(&format!("error[usage]: {store}: ")), "{:?}", run.stderr);
        assert!(run.stderr.contains("pick one with --session: crash-1, example-1"), "{:?}", run.stderr);
        let run = palimpsest(d, &["surface", store, "--session", "crash-1"]);
        assert_eq!((run.code, run.json()), (0, json!([1, 7, 9])));
        let run = palimpsest(d, &["surface", store, "--session", "nope"]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(
            run.stderr.starts_with(&format!("error[not-found]: {store}: no session \"nope\"")),
            "{:?}",
            run.stderr
        );
    }
    let run = palimpsest(d, &["validate", "compaction-and-prune.jsonl", "--session", "other"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run
        .stderr
        .starts_with("error[not-found]: compaction-and-prune.jsonl: this file holds session \"example-1\""));
}

#[test]
fn an_invalid_session_in_a_store_reports_its_code() {
    let dir = scratch(&["err/replace-reversed.jsonl"]);
    let d = dir.path();
    fs::create_dir(d.join("bad")).expect("mkdir");
    fs::copy(d.join("replace-reversed.jsonl"), d.join("bad/rules.jsonl")).expect("copy");
    let run = palimpsest(d, &["validate", "--json", "bad"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.json()["violations"][0]["code"], json!("replace-reversed"));
    assert!(
        run.stderr.starts_with("error[replace-reversed]: bad/rules.jsonl:5: seq 3: "),
        "{:?}",
        run.stderr
    );
}

#[test]
fn a_missing_or_foreign_database_is_refused_and_never_created() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let run = palimpsest(d, &["validate", "missing.db"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("error[io]: missing.db: cannot read"), "{:?}", run.stderr);
    assert!(!d.join("missing.db").exists());

    fs::write(d.join("notes.db"), "just some text, not a database\n").expect("write");
    let run = palimpsest(d, &["sessions", "notes.db"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[schema-mismatch]: notes.db: "), "{:?}", run.stderr);
}

#[test]
fn repair_write_appends_to_a_session_in_any_store() {
    let dir = scratch(&["ok/crash-open.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "crash-open.jsonl", "s.db"]));
    ok(palimpsest(d, &["convert", "crash-open.jsonl", "s"]));
    let expected = ok(palimpsest(d, &["repair", "crash-open.jsonl"])).json();
    for store in ["s.db", "s"] {
        let run = ok(palimpsest(d, &["repair", "--write", store]));
        assert_eq!(run.json(), expected, "{store}");
        assert_eq!(ok(palimpsest(d, &["repair", store])).json(), json!([]), "{store}");
        let report = ok(palimpsest(d, &["validate", "--json", store])).json();
        assert_eq!(report, json!({"valid": true, "events": 15, "violations": []}), "{store}");
    }
    // The directory's file and a converted copy of the database agree byte for byte.
    ok(palimpsest(d, &["convert", "s.db", "check.jsonl"]));
    assert_eq!(
        fs::read(d.join("check.jsonl")).expect("read"),
        fs::read(d.join("s/crash-1.jsonl")).expect("read")
    );
}

// ---------------------------------------------------------------- reading never writes

/// Every file under `dir` (recursively) with its bytes.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for entry in fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            for (name, bytes) in snapshot(&path) {
                out.insert(
                    format!("{}/{name}", path.file_name().unwrap_or_default().to_string_lossy()),
                    bytes,
                );
            }
        } else {
            out.insert(
                path.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                fs::read(&path).expect("read"),
            );
        }
    }
    out
}

/// Every reading command, with the arguments it needs, on STORE.
fn reading_commands(store: &str) -> Vec<Vec<String>> {
    let cmds: [&[&str]; 14] = [
        &["validate", store],
        &["validate", "--json", store],
        &["surface", store],
        &["derive", store],
        &["derive", "--provenance", store],
        &["repair", store],
        &["inspect", "--color", "never", store],
        &["explain", store, "3"],
        &["explain", "--json", store, "3"],
        &["export", "--format", "markdown", store],
        &["export", "--format", "json", "--view", "model", store],
        &["export", "--format", "html", "-o", "../out/x.html", store],
        &["sessions", store],
        &["convert", store, "../out/copy"],
    ];
    cmds.iter().map(|c| c.iter().map(|a| (*a).to_owned()).collect()).collect()
}

#[test]
fn reading_commands_change_no_byte_of_a_clean_sqlite_store_and_create_no_file() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    fs::create_dir(d.join("store")).expect("mkdir");
    fs::create_dir(d.join("out")).expect("mkdir");
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "store/one.db"]));
    let store = d.join("store");
    let before = snapshot(&store);
    assert_eq!(before.keys().collect::<Vec<_>>(), ["one.db"], "closed cleanly: no -wal, no -shm");
    for args in reading_commands("one.db") {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(palimpsest(&store, &args));
        assert_eq!(snapshot(&store), before, "{args:?} changed the store's directory");
    }
    assert!(d.join("out/x.html").exists() && d.join("out/copy/example-1.jsonl").exists());
}

#[test]
fn a_zero_length_db_is_refused_by_every_reading_command_and_stays_empty() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    fs::create_dir(d.join("out")).expect("mkdir");
    let store = d.join("store");
    fs::create_dir(&store).expect("mkdir");
    fs::write(store.join("x.db"), b"").expect("touch");
    for args in reading_commands("x.db") {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = palimpsest(&store, &args);
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert_eq!(
            run.stderr,
            "error[schema-mismatch]: x.db: found x.db, an empty file (0 bytes): there is no store to read, \
             and reading never initialises one, expected a Palimpsest SQLite store \
             (application_id 0x50414C49 (\"PALI\"), user_version 4)\n",
            "{args:?}"
        );
        assert_eq!(snapshot(&store), std::collections::BTreeMap::from([("x.db".to_owned(), Vec::new())]));
    }
}

/// A directory named `x.db` is not a JSONL store to any command: a path
/// ending in `.db` names a SQLite database (contract section 7), for the
/// readers as for `convert`.
#[test]
fn a_directory_named_like_a_database_is_refused_as_one() {
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "jsonl-store"]));
    fs::rename(d.join("jsonl-store"), d.join("d.db")).expect("a JSONL store named d.db");
    for args in reading_commands("d.db") {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = palimpsest(d, &args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.starts_with("error[io]: d.db: is a directory;"), "{args:?}: {}", run.stderr);
    }
}

/// The commands that write to an existing session refuse a file that is
/// not a store yet, and leave it as it was: opening for writing would
/// have initialised it (a refused command changes nothing).
#[test]
fn a_zero_length_db_is_refused_by_every_writing_command_and_stays_empty() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    fs::write(d.join("x.db"), b"").expect("touch");
    let writers: [&[&str]; 5] = [
        &["repair", "--write", "x.db"],
        &["fork", "x.db", "--at", "1"],
        &["delete", "x.db", "--yes"],
        &["prune", "x.db", "--older-than", "1d", "--yes"],
        &["run", "x.db", "--session", "s"],
    ];
    for args in writers {
        let run = palimpsest(d, args);
        assert!(run.code == 1 || run.code == 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("error["), "{args:?}: {run:?}");
        let left: Vec<String> = fs::read_dir(d)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, ["x.db"], "{args:?} left files behind");
        let len = fs::metadata(d.join("x.db")).expect("stat").len();
        assert_eq!(len, 0, "{args:?} initialised the file");
    }
}

#[test]
fn repair_write_and_fork_still_write_a_sqlite_store() {
    let dir = scratch(&["ok/crash-open.jsonl"]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", "crash-open.jsonl", "s.db"]));
    let run = ok(palimpsest(d, &["repair", "--write", "s.db"]));
    assert_ne!(run.json(), json!([]));
    let run = ok(palimpsest(d, &["fork", "s.db", "--session", "crash-1", "--at", "3"]));
    assert_eq!(run.stdout, "crash-1-fork-3\n");
    let listed = ok(palimpsest(d, &["sessions", "s.db"])).stdout;
    assert!(listed.contains("crash-1-fork-3"), "{listed}");
}

/// The reported case, through the CLI: store A holds session `s` with 64
/// events; the `-wal` of store B, which holds a new session `t`, is copied
/// next to A. SQLite applies B's pages over A's, so A lists `t` alone, valid
/// and empty. `validate` used to say "valid: 0 events".
#[test]
fn validate_does_not_call_a_store_with_a_foreign_wal_valid() {
    use palimpsest_core_session::Event;
    use palimpsest_persistence::SessionStore;
    use palimpsest_persistence_sqlite::SqliteStore;

    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let events: Vec<Event> = (0..64)
        .map(|i| {
            Event::from_json(&format!(r#"{{"seq":{i},"time":{i},"type":"test/tick","data":{{"n":{i}}}}}"#))
                .expect("an event")
        })
        .collect();
    let a = SqliteStore::open(d.join("a.db")).expect("open a");
    a.create(&SessionHeader::new("s", 0)).expect("create s");
    a.append("s", &events).expect("append");
    drop(a);
    assert_eq!(
        ok(palimpsest(d, &["validate", "a.db"])).stdout,
        "a.db#s: valid: 64 events, 0 on the surface\n"
    );

    let b = SqliteStore::open(d.join("b.db")).expect("open b");
    b.create(&SessionHeader::new("t", 0)).expect("create t");
    fs::copy(d.join("b.db-wal"), d.join("a.db-wal")).expect("copy B's wal next to A");
    drop(b);

    let run = palimpsest(d, &["validate", "a.db"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, "a.db#t: invalid: 1 violation in 0 events\n");
    assert_eq!(
        run.stderr,
        "error[store-orphan-events]: a.db: 64 event rows (seqs 0 to 63) belong to session \"s\", \
         which has no sessions row: no command sees them\n"
    );
    let report = palimpsest(d, &["validate", "--json", "a.db"]).json();
    assert_eq!(report["valid"], json!(false));
    assert_eq!(report["violations"][0]["code"], json!("store-orphan-events"));
    assert_eq!(report["violations"][0]["seq"], json!(null));
}

/// One session's gap made every session of a store invalid (an outside
/// probe, 213 sessions): it is that session's violation, and a warning
/// when another session is validated.
#[test]
fn a_gap_in_one_session_is_that_sessions_violation_not_the_others() {
    use palimpsest_core_session::Event;
    use palimpsest_persistence::SessionStore;
    use palimpsest_persistence_sqlite::SqliteStore;

    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let ticks = |n: u64| -> Vec<Event> {
        (0..n)
            .map(|i| {
                Event::from_json(&format!(r#"{{"seq":{i},"time":{i},"type":"test/tick","data":{{}}}}"#))
                    .expect("an event")
            })
            .collect()
    };
    let store = SqliteStore::open(d.join("s.db")).expect("open");
    for id in ["a", "b"] {
        store.create(&SessionHeader::new(id, 0)).expect("create");
        store.append(id, &ticks(3)).expect("append");
    }
    drop(store);
    let conn = rusqlite::Connection::open(d.join("s.db")).expect("raw open");
    assert_eq!(conn.execute("DELETE FROM events WHERE session_id = 'b' AND seq = 1", []).expect("delete"), 1);
    drop(conn);

    let a = palimpsest(d, &["validate", "s.db", "--session", "a", "--json"]);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.json()["valid"], json!(true));
    assert!(a.stderr.contains("warning: s.db: another session of the store: store-seq-gap: "), "{a:?}");
    let b = palimpsest(d, &["validate", "s.db", "--session", "b", "--json"]);
    assert_eq!(b.code, 1, "{b:?}");
    let codes: Vec<serde_json::Value> =
        b.json()["violations"].as_array().expect("violations").iter().map(|v| v["code"].clone()).collect();
    assert!(codes.contains(&json!("store-seq-gap")), "{codes:?}");
}

#[cfg(unix)]
#[test]
fn a_clean_sqlite_store_in_a_directory_that_cannot_be_written_is_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch(&[EXAMPLE]);
    let d = dir.path();
    fs::create_dir(d.join("store")).expect("mkdir");
    ok(palimpsest(d, &["convert", "compaction-and-prune.jsonl", "store/one.db"]));
    let store = d.join("store");
    let before = snapshot(&store);
    let chmod = |m| fs::set_permissions(&store, fs::Permissions::from_mode(m)).expect("chmod");
    chmod(0o555);
    let run = palimpsest(&store, &["validate", "one.db"]);
    let after = snapshot(&store);
    chmod(0o755);
    assert_eq!(run.stdout, "one.db#example-1: valid: 27 events, 4 on the surface\n", "{run:?}");
    assert_eq!(after, before, "no -wal or -shm was made (or, as a user who cannot write here, needed)");
}

// ---------------------------------------------------------------- sessions

#[test]
fn sessions_lists_id_created_events_and_parent() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl", "ok/forked.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl", "forked.jsonl"] {
        ok(palimpsest(d, &["convert", f, "store"]));
    }
    ok(palimpsest(d, &["convert", "store", "store.db"]));
    let listing = ok(palimpsest(d, &["sessions", "store"])).stdout;
    assert_eq!(ok(palimpsest(d, &["sessions", "store.db"])).stdout, listing, "both stores list alike");
    insta::assert_snapshot!("sessions_store", listing);
    let one = ok(palimpsest(d, &["sessions", "forked.jsonl"])).stdout;
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.lines().nth(1).is_some_and(|l| l.starts_with("Fork/ü-1")), "{one}");

    fs::create_dir(d.join("empty")).expect("mkdir");
    let run = ok(palimpsest(d, &["sessions", "empty"]));
    assert_eq!(run.stdout.lines().count(), 1, "just the column names");
    assert!(run.stderr.contains("holds no sessions"), "{:?}", run.stderr);
    assert_eq!(ok(palimpsest(d, &["sessions", "--json", "empty"])).stdout, "[]\n");
}

#[test]
fn sessions_json_has_every_key_for_scripts_and_names_what_failed_to_load() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl", "ok/forked.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl", "forked.jsonl"] {
        ok(palimpsest(d, &["convert", f, "store"]));
    }
    let list = ok(palimpsest(d, &["sessions", "--json", "store"])).json();
    let rows = list.as_array().expect("an array");
    let ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids, ["Fork/ü-1", "crash-1", "example-1"], "newest first, then by id");
    let crash = &rows[1];
    assert_eq!(crash["outcome"], "interrupted");
    assert_eq!(crash["events"], 11);
    assert_eq!(crash["turns"], 1);
    assert_eq!(crash["title"], "Read a.txt and b.txt, then list the directory.", "the whole title in JSON");
    assert_eq!(crash["error"], serde_json::Value::Null);
    assert_eq!(rows[2]["outcome"], "completed");
    assert_eq!(rows[0]["parentSession"], "example-1");
    assert_eq!(rows[0]["seedLength"], 15);
    let keys = [
        "id",
        "createdAt",
        "lastActivity",
        "events",
        "turns",
        "outcome",
        "title",
        "parentSession",
        "seedLength",
        "error",
    ];
    for row in rows {
        let obj = row.as_object().expect("an object");
        assert_eq!(obj.len(), keys.len(), "{row}");
        assert!(keys.iter().all(|k| obj.contains_key(*k)), "{row}");
    }
    // A session file that no longer loads: exit 1, and its row says why.
    let file = d.join("store").join("crash-1.jsonl");
    let mut bytes = fs::read(&file).expect("read");
    // A line that is not JSON, with a whole line after it: not a torn tail.
    bytes.extend_from_slice(b"not json\n{\"seq\":12,\"time\":1,\"type\":\"x/y\",\"data\":{}}\n");
    fs::write(&file, bytes).expect("write");
    let run = palimpsest(d, &["sessions", "--json", "store"]);
    assert_eq!(run.code, 1, "{run:?}");
    let rows = run.json();
    let broken = rows.as_array().and_then(|r| r.iter().find(|r| r["id"] == "crash-1")).expect("still listed");
    assert_eq!(broken["events"], serde_json::Value::Null);
    assert!(broken["error"]["code"].is_string() && broken["error"]["message"].is_string(), "{broken}");
}

// ---------------------------------------------------------------- a large session

/// A long, valid, realistic session: each turn a tool call and its result,
/// then an answer; every 10th turn prunes that turn's result (a single-node
/// replace), every 50th compacts the whole surface into a summary (a replace
/// that may start at the previous summary).
fn large_session(turns: u64) -> Result<Vec<u8>, AppendError> {
    const T0: u64 = 1_767_225_600_000;
    let model = || Source::Model { provider: "example".into(), model: "example-1".into() };
    let mut s = Session::create(SessionHeader::new("big-1", T0));
    for turn in 1..=turns {
        let t = T0 + turn * 10_000;
        let call = format!("call_{turn}");
        let args = format!("{{\"path\":\"notes/{turn}.txt\"}}");
        s.append_log(t, TurnStart { turn })?;
        let text = Block::text(format!("Question {turn}: what is in notes/{turn}.txt? ü ✓"));
        let message =
            Message { id: format!("u{turn}"), role: Role::User, content: vec![text], source: Source::User };
        s.append_surface(t + 1, UserMessage { turn: Some(turn), message }, SurfaceIntent::append())?;
        s.append_log(t + 2, StepStart { turn, step: 1 })?;
        let delta = StreamChunk::ToolCallDelta {
            index: 0,
            id: call.clone(),
            name: Some("read_file".into()),
            arguments_delta: args.clone(),
        };
        let c1 = s.append_log(t + 3, AssistantChunk { turn, step: 1, chunk: delta })?;
        let usage = Usage { input_tokens: 100 + turn, output_tokens: 12, ..Usage::default() };
        let c2 = s.append_log(t + 4, AssistantChunk { turn, step: 1, chunk: StreamChunk::Usage(usage) })?;
        let ask = Block::ToolCall { id: call.clone(), name: "read_file".into(), arguments: args.clone() };
        let message =
            Message { id: format!("a{turn}"), role: Role::Assistant, content: vec![ask], source: model() };
        let assistant = AssistantMessage { turn, step: 1, message, usage: Some(usage), interrupted: None };
        s.append_surface(t + 5, assistant, SurfaceIntent::append_citing(vec![c1, c2]))?;
        let tc = s.append_log(
            t + 6,
            ToolCall { turn, step: 1, call_id: call.clone(), name: "read_file".into(), arguments: args },
        )?;
        let result = |id: String, text: String| ToolResult {
            turn,
            step: 1,
            message: Message {
                id,
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_call_id: call.clone(),
                    is_error: false,
                    content: vec![Block::text(text)],
                }],
                source: Source::Tool { call_id: call.clone() },
            },
            error: None,
        };
        let r = s.append_surface(
            t + 7,
            result(format!("r{turn}"), "line\n".repeat(40)),
            SurfaceIntent::append_citing(vec![tc]),
        )?;
        s.append_log(t + 8, StepEnd { turn, step: 1 })?;
        s.append_log(t + 9, StepStart { turn, step: 2 })?;
        let delta = StreamChunk::TextDelta { index: 0, text: format!("It has forty lines ({turn}).") };
        let c = s.append_log(t + 10, AssistantChunk { turn, step: 2, chunk: delta })?;
        let answer = Block::text(format!("It has forty lines ({turn})."));
        let message =
            Message { id: format!("b{turn}"), role: Role::Assistant, content: vec![answer], source: model() };
        let assistant = AssistantMessage { turn, step: 2, message, usage: None, interrupted: None };
        s.append_surface(t + 11, assistant, SurfaceIntent::append_citing(vec![c]))?;
        s.append_log(t + 12, StepEnd { turn, step: 2 })?;
        s.append_log(t + 13, TurnEnd { turn, reason: TurnEndReason::Completed })?;
        if turn % 10 == 0 {
            let pruned = result(format!("r{turn}-pruned"), format!("[pruned; the original is event {r}]"));
            s.append_surface(t + 14, pruned, SurfaceIntent::replace(r, r, vec![r]))?;
        }
        if turn % 50 == 0 {
            let plugin = PluginEvent { event_type: "compaction/start".into(), data: json!({"turn": turn}) };
            let start = s.append_log(t + 15, plugin)?;
            let surface = s.surface().to_vec();
            let (first, last) = (surface[0], surface[surface.len() - 1]);
            let mut sources = vec![start];
            sources.extend(surface);
            let text = Block::text(format!("Summary of turns 1 to {turn}."));
            let source = Source::Plugin { plugin: "compaction".into() };
            let message = Message { id: format!("sum{turn}"), role: Role::User, content: vec![text], source };
            s.append_surface(
                t + 16,
                UserMessage { turn: None, message },
                SurfaceIntent::replace(first, last, sources),
            )?;
        }
    }
    Ok(jsonl::to_bytes(s.header(), s.events()))
}

#[test]
fn a_unique_prefix_of_an_id_works_wherever_an_id_does_and_an_ambiguous_one_lists_the_candidates() {
    let dir = scratch(&[EXAMPLE, "ok/crash-open.jsonl"]);
    let d = dir.path();
    for f in ["compaction-and-prune.jsonl", "crash-open.jsonl"] {
        ok(palimpsest(d, &["convert", f, "store.db"]));
    }
    let fork = ok(palimpsest(d, &["fork", "store.db", "--session", "exam", "--at", "3"]));
    assert_eq!(fork.stdout.trim(), "example-1-fork-3", "a prefix names the parent");
    let full = ok(palimpsest(d, &["surface", "store.db", "--session", "example-1"])).stdout;
    assert_eq!(
        ok(palimpsest(d, &["surface", "store.db", "--session", "example-1"])).stdout,
        full,
        "an exact id wins"
    );
    let child = ok(palimpsest(d, &["surface", "store.db", "--session", "example-1-f"])).stdout;
    assert_ne!(child, full, "a longer prefix names the child");
    let ambiguous = palimpsest(d, &["surface", "store.db", "--session", "exa"]);
    assert_eq!(ambiguous.code, 2, "{ambiguous:?}");
    assert!(
        ambiguous.stderr.contains("error[usage]") && ambiguous.stderr.contains("example-1, example-1-fork-3"),
        "{}",
        ambiguous.stderr
    );
    let none = palimpsest(d, &["surface", "store.db", "--session", "zzz"]);
    assert!(none.stderr.contains("error[not-found]"), "{}", none.stderr);
    assert!(ok(palimpsest(d, &["validate", "store.db", "--session", "cra"])).stdout.contains("valid"));
}
