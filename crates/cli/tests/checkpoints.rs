//! Checkpoints from the command line (issue 18): writers leave one beside
//! the log, `surface`, `derive` and `repair` read the surface and the
//! tail from it, and give exactly what the whole log gives; a damaged or
//! stale checkpoint is ignored, and reading never writes one.

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

    // Proof that they read the checkpoint and not the log: break an event
    // the surface no longer holds (seq 3, shadowed by the compaction).
    // `validate` reads the whole log and finds it; `surface` and `derive`
    // never read it. (A defect behind a checkpoint is `validate`'s to find.)
    break_stored_event(&d.join("x.db"), 3);
    let invalid = palimpsest(d, &["validate", "x.db"]);
    assert_eq!(invalid.code, 1, "{invalid:?}");
    assert_eq!(reads(d, "x.db"), whole, "read from the checkpoint, past the broken event");
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
