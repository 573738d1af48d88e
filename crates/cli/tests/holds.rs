//! One writer per session on the stores of one machine: while a worker
//! holds a session (`SessionStore::hold`), a writing command on it is
//! refused with `locked`, naming the holder where the store knows it, and
//! writes nothing; once released, the command goes through.

mod support;

use std::sync::Arc;
use std::time::Duration;

use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;
use support::*;

const ID: &str = "crash-1";

/// Converts the crashed fixture into `store`, then checks that
/// `repair --write` is refused while `worker` holds the session and works
/// once it is released.
fn repair_waits_for_the_holder(store: &str, worker: impl Fn() -> Arc<dyn SessionStore>, names_holder: bool) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let fixture = test_data("ok/crash-open.jsonl");
    ok(palimpsest(d, &["convert", fixture.to_str().expect("utf-8"), store]));
    let events =
        || ok(palimpsest(d, &["validate", "--json", store, "--session", ID])).json()["events"].as_u64();
    let before = events();

    let worker = worker();
    let hold =
        worker.hold(ID, "worker-9", Duration::from_secs(60)).expect("hold").expect("a hold is granted");
    let refused = palimpsest(d, &["repair", "--write", store, "--session", ID]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("locked"), "{}", refused.stderr);
    if names_holder {
        assert!(refused.stderr.contains("worker-9"), "`locked` names the holder: {}", refused.stderr);
    }
    assert_eq!(events(), before, "a refused repair wrote nothing");

    worker.release(&hold).expect("release");
    let closers = ok(palimpsest(d, &["repair", "--write", store, "--session", ID])).json();
    let n = closers.as_array().map_or(0, Vec::len) as u64;
    assert!(n > 0, "{closers}");
    assert_eq!(events(), before.map(|b| b + n));
    assert_eq!(ok(palimpsest(d, &["repair", store, "--session", ID])).stdout.trim(), "[]");
}

#[test]
fn on_sqlite_a_held_session_is_refused_to_other_writers_naming_the_holder() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("store.db");
    let path = db.clone();
    repair_waits_for_the_holder(
        db.to_str().expect("utf-8"),
        move || Arc::new(SqliteStore::open(&path).expect("open the store")),
        true,
    );
}

#[test]
fn on_a_jsonl_directory_a_held_session_is_refused_to_other_writers() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = dir.path().join("sessions");
    let path = store.clone();
    // The operating system's lock on the file knows no holder's name.
    repair_waits_for_the_holder(
        store.to_str().expect("utf-8"),
        move || Arc::new(JsonlStore::open(&path).expect("open the store")),
        false,
    );
}
