//! Checkpoints from the command line (issue 18): writers leave one beside
//! the log; reading commands never write one, and never trust one to
//! stand for the log: `surface`, `derive` and `repair` read the log
//! whole, so an event edited or removed behind the store's back, before
//! the last event a checkpoint covers, is seen (refused, or shown as the
//! log now holds it), as `validate` sees it.

mod support;

use std::fs;

use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::SqliteStore;
use support::*;

const FIXTURE: &str = "ok/compaction-and-prune.jsonl";
/// The fixture as [`scratch`] names its copy.
const FILE: &str = "compaction-and-prune.jsonl";

/// `surface`, `derive` and `derive --request` of `store`, as printed.
fn reads(d: &std::path::Path, store: &str) -> Vec<String> {
    [vec!["surface", store], vec!["derive", store], vec!["derive", "--request", store]]
        .iter()
        .map(|args| ok(palimpsest(d, args)).stdout)
        .collect()
}

#[test]
fn convert_leaves_a_checkpoint_and_reading_from_it_gives_what_the_whole_log_gives() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    let whole = reads(d, FILE);

    ok(palimpsest(d, &["convert", FILE, "x.db"]));
    let id = ok(palimpsest(d, &["sessions", "--json", "x.db"])).json()[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let store = SqliteStore::open_read_only(d.join("x.db")).expect("open");
    let resumable = store.load_resumable(&id).expect("load_resumable");
    let checkpoint = resumable.checkpoint.expect("convert saved a checkpoint");
    assert!(resumable.tail.is_empty(), "the checkpoint covers the whole converted log");
    assert_eq!(checkpoint.surface(), [20, 15, 17, 24], "the worked example's surface (contract section 8)");
    drop(store);
    assert_eq!(reads(d, "x.db"), whole, "from the checkpoint: the same surface, messages and request");
    assert_eq!(ok(palimpsest(d, &["repair", "x.db"])).stdout.trim(), "[]");

    // An event the surface no longer holds (seq 3, shadowed by the
    // compaction), broken behind the store's back: the checkpoint still
    // matches the header and its last event, but the reading commands read
    // the log, and refuse it as `validate` does, with its code.
    break_stored_event(&d.join("x.db"), 3);
    let invalid = palimpsest(d, &["validate", "x.db"]);
    assert_eq!(invalid.code, 1, "{invalid:?}");
    let code = first_error_code(&invalid.stderr);
    for args in
        [&["surface", "x.db"][..], &["derive", "x.db"], &["derive", "--request", "x.db"], &["repair", "x.db"]]
    {
        let run = palimpsest(d, args);
        assert_eq!((run.code, first_error_code(&run.stderr)), (1, code.clone()), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?} printed from the checkpoint: {run:?}");
    }
    let write = palimpsest(d, &["repair", "--write", "x.db"]);
    assert_eq!(write.code, 1, "{write:?}");

    // `derive --from-checkpoint` reads as a resuming agent does: the
    // checkpoint's surface and the events after it, past the broken event.
    let resumed = ok(palimpsest(d, &["derive", "--request", "--from-checkpoint", "x.db"])).stdout;
    assert_eq!(resumed, whole[2], "the request a resumed agent would send");
}

/// The first `error[code]` of a run's stderr.
fn first_error_code(stderr: &str) -> String {
    let start =
        stderr.find("error[").map(|i| i + "error[".len()).unwrap_or_else(|| panic!("no error: {stderr}"));
    stderr[start..].split(']').next().unwrap_or_default().to_owned()
}

#[test]
fn a_surface_event_edited_behind_the_store_is_derived_as_the_log_holds_it() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", FILE, "x.db"]));
    // Seq 17 (`u2`) is on the surface, so the checkpoint holds a copy of
    // it; the edit keeps the log valid and the checkpoint's last event.
    let conn = rusqlite::Connection::open(d.join("x.db")).expect("open");
    let changed = conn
        .execute(
            "UPDATE events SET data = replace(data, 'Summarise our chat so far.', 'Summarize our chat, please.') WHERE seq = 17",
            [],
        )
        .expect("edit");
    assert_eq!(changed, 1);
    drop(conn);
    ok(palimpsest(d, &["validate", "x.db"]));
    for args in [&["derive", "x.db"][..], &["derive", "--request", "x.db"]] {
        let out = ok(palimpsest(d, args)).stdout;
        assert!(out.contains("Summarize our chat, please."), "{args:?} shows the log: {out}");
        assert!(
            !out.contains("Summarise our chat so far."),
            "{args:?} shows the checkpoint's stale copy: {out}"
        );
    }
}

#[test]
fn a_jsonl_store_damaged_behind_its_checkpoint_is_refused_by_every_reading_command() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", FILE, "store"]));
    let file = d.join("store").join("example-1.jsonl");
    // One byte of seq 5's line made invalid UTF-8: the file keeps its
    // length and its last line, so the sidecar still matches.
    let mut bytes = fs::read(&file).expect("read");
    let at = String::from_utf8_lossy(&bytes).find("{\"seq\":5,").expect("seq 5") + 3;
    bytes[at] = 0xff;
    fs::write(&file, bytes).expect("damage");
    let invalid = palimpsest(d, &["validate", "store"]);
    assert_eq!(invalid.code, 1, "{invalid:?}");
    for args in [
        &["surface", "store"][..],
        &["derive", "store"],
        &["repair", "store"],
        &["repair", "--write", "store"],
    ] {
        let run = palimpsest(d, args);
        assert_eq!(
            (run.code, first_error_code(&run.stderr)),
            (1, "log-corrupt".to_owned()),
            "{args:?}: {run:?}"
        );
    }
}

#[test]
fn a_damaged_checkpoint_is_ignored_and_reading_never_writes_one() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    let whole = reads(d, FILE);
    ok(palimpsest(d, &["convert", FILE, "store"]));
    let sidecar = fs::read_dir(d.join("store"))
        .expect("store dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.to_string_lossy().ends_with(".checkpoint.json"))
        .expect("convert left a checkpoint sidecar");
    assert_eq!(reads(d, "store"), whole, "from the checkpoint");

    for damage in ["", "{\"sidecar\":1,", "not json at all\n"] {
        fs::write(&sidecar, damage).expect("damage the sidecar");
        assert_eq!(reads(d, "store"), whole, "a damaged checkpoint ({damage:?}) is ignored");
        assert_eq!(fs::read_to_string(&sidecar).expect("read"), damage, "reading never rewrites it");
    }
    fs::remove_file(&sidecar).expect("remove");
    assert_eq!(reads(d, "store"), whole, "no checkpoint: the whole log");
    let resumed = ok(palimpsest(d, &["derive", "--request", "--from-checkpoint", "store"]));
    assert_eq!(resumed.stdout, whole[2], "--from-checkpoint without one: the whole log");
    assert!(resumed.stderr.contains("no checkpoint matches the log; reading the whole log"), "{resumed:?}");
    assert!(!sidecar.exists(), "reading commands write no checkpoint");
}

#[test]
fn a_crashed_session_is_checkpointed_before_its_open_turn_and_repaired_from_there() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    // The worked example cut inside its second turn (seq 16 starts it).
    let text = fs::read_to_string(d.join(FILE)).expect("read");
    let cut: Vec<&str> = text.lines().take(1 + 22).collect();
    fs::write(d.join("crashed.jsonl"), cut.join("\n") + "\n").expect("write");
    let closers = ok(palimpsest(d, &["repair", "crashed.jsonl"])).stdout;
    assert_ne!(closers.trim(), "[]", "the cut log has an open turn");

    ok(palimpsest(d, &["convert", "crashed.jsonl", "x.db"]));
    let store = SqliteStore::open_read_only(d.join("x.db")).expect("open");
    let resumable = store.load_resumable("example-1").expect("load_resumable");
    let checkpoint = resumable.checkpoint.expect("a checkpoint at the last turn boundary");
    assert_eq!(checkpoint.log_len(), 16, "taken just before the open turn's turn/start");
    assert_eq!(resumable.tail.first().map(|e| e.seq()), Some(16), "the open turn is the tail, whole");
    drop(store);

    assert_eq!(ok(palimpsest(d, &["repair", "x.db"])).stdout, closers, "the same closers as the whole log");
    assert_eq!(ok(palimpsest(d, &["repair", "--write", "x.db"])).stdout, closers);
    ok(palimpsest(d, &["validate", "x.db"]));
    assert_eq!(ok(palimpsest(d, &["repair", "x.db"])).stdout.trim(), "[]");
    // repair --write, a writer, left a checkpoint of the closed session.
    let store = SqliteStore::open_read_only(d.join("x.db")).expect("open");
    let resumable = store.load_resumable("example-1").expect("load_resumable");
    assert!(resumable.tail.is_empty() && resumable.checkpoint.is_some(), "{resumable:?}");
}

/// A stored row that breaks a rule is a violation of the log, as the same
/// fault on a JSONL line is: `validate --json` prints the section 7 object
/// with it at its seq (not an `{"error": ...}`), and `inspect` shows the
/// timeline up to it with the state `INVALID`. Before, both stopped at
/// the row with only the error.
#[test]
fn a_row_that_breaks_a_rule_is_a_violation_in_validate_and_inspect() {
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    ok(palimpsest(d, &["convert", FILE, "x.db"]));
    let conn = rusqlite::Connection::open(d.join("x.db")).expect("open");
    // Seq 17 (`u2`, a user message) loses its surfaceOp: rule 1.
    let changed = conn.execute("UPDATE events SET surface_op = NULL WHERE seq = 17", []).expect("edit");
    assert_eq!(changed, 1);
    drop(conn);
    let run = palimpsest(d, &["validate", "--json", "x.db"]);
    assert_eq!(run.code, 1, "{run:?}");
    let report = run.json();
    assert_eq!(report["valid"], false, "{report}");
    assert_eq!(report["events"], 17, "{report}");
    let violations = report["violations"].as_array().cloned().unwrap_or_default();
    assert!(violations.iter().any(|v| v["code"] == "surface-op-missing" && v["seq"] == 17), "{report}");
    let inspect = palimpsest(d, &["inspect", "x.db"]);
    assert_eq!(inspect.code, 1, "{inspect:?}");
    assert!(inspect.stdout.contains("INVALID"), "{}", inspect.stdout);
    assert!(inspect.stderr.contains("error[surface-op-missing]"), "{}", inspect.stderr);
}

#[test]
fn a_torn_last_line_after_the_checkpoint_still_resumes_from_it() {
    // Crash recovery is where a bounded resume matters most; a torn last
    // line made `derive --from-checkpoint` read the whole log.
    let dir = scratch(&[FIXTURE]);
    let d = dir.path();
    let whole = reads(d, FILE);
    ok(palimpsest(d, &["convert", FILE, "store/"]));
    let file = fs::read_dir(d.join("store"))
        .expect("the store")
        .map(|e| e.expect("an entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("the session file");
    let lines = fs::read_to_string(&file).expect("read").lines().count();
    let mut bytes = fs::read(&file).expect("read");
    bytes.extend_from_slice(br#"{"seq":99,"time":5,"ty"#);
    fs::write(&file, bytes).expect("write");

    let resumed = ok(palimpsest(d, &["derive", "--request", "--from-checkpoint", "store"]));
    assert_eq!(resumed.stdout, whole[2]);
    assert!(!resumed.stderr.contains("no checkpoint matches"), "{resumed:?}");
    assert!(
        resumed.stderr.contains(&format!(":{}: dropped a torn last line (22 bytes", lines + 1)),
        "the file's own line: {resumed:?}"
    );
}
