//! Unit tests that need the fault-injection seam: I/O errors while writing.

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::SessionStore;

use crate::{JsonlStore, SessionFile};

use crate::fault::Fault;

fn tick(seq: u64) -> Event {
    match Event::from_json(&format!(r#"{{"seq":{seq},"time":{seq},"type":"kit/tick","data":{{"n":{seq}}}}}"#))
    {
        Ok(e) => e,
        Err(e) => panic!("{e}"),
    }
}

fn ticks(r: std::ops::Range<u64>) -> Vec<Event> {
    r.map(tick).collect()
}

#[track_caller]
fn code<T>(r: Result<T, palimpsest_persistence::StoreError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.code().into(),
    }
}

fn tempdir() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

#[test]
fn a_failed_write_is_rolled_back_and_refuses_writes_until_reopen() {
    let dir = tempdir();
    let path = dir.path().join("s.jsonl");
    let mut file = SessionFile::create(&path, &SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(0..2))), "ok");
    let before = std::fs::read(&path).unwrap_or_default();
    file.fault = Some(Fault::Write { after: 10 });
    let err = file.append(&ticks(2..4)).err().map(|e| (e.code(), e.to_string()));
    assert_eq!(err.as_ref().map(|e| e.0), Some("io"));
    assert!(err.is_some_and(|e| e.1.contains("append to")));
    assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "the half-written batch was not taken back");
    // Refused from now on, even a batch that would fit.
    let refused = file.append(&ticks(2..3)).err().map(|e| (e.code(), e.to_string()));
    assert_eq!(refused.as_ref().map(|e| e.0), Some("io"));
    assert!(refused.is_some_and(|e| e.1.contains("an earlier write failed")));
    assert_eq!(code(file.sync()), "io");
    // Reading still works.
    assert_eq!(file.load().map(|s| s.events).ok(), Some(ticks(0..2)));
    drop(file);
    let mut file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(2..3))), "ok");
    assert_eq!(code(file.sync()), "ok");
    assert_eq!(file.load().map(|s| s.events).ok(), Some(ticks(0..3)));
}

#[test]
fn a_failed_sync_refuses_writes_until_reopen() {
    let dir = tempdir();
    let path = dir.path().join("s.jsonl");
    let mut file = SessionFile::create(&path, &SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(0..1))), "ok");
    file.fault = Some(Fault::Sync);
    assert_eq!(code(file.sync()), "io");
    assert_eq!(code(file.append(&ticks(1..2))), "io");
    assert_eq!(code(file.sync()), "io");
    drop(file);
    let mut file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(1..2))), "ok");
    assert_eq!(file.load().map(|s| s.events).ok(), Some(ticks(0..2)));
}

#[test]
fn a_store_refuses_a_session_after_a_write_error_until_reopened() {
    let dir = tempdir();
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    for id in ["bad", "good"] {
        assert_eq!(code(store.create(&SessionHeader::new(id, 0))), "ok");
        assert_eq!(code(store.append(id, &ticks(0..1))), "ok");
    }
    store.inject("bad", Fault::Write { after: 0 });
    assert_eq!(code(store.append("bad", &ticks(1..2))), "io");
    assert_eq!(code(store.append("bad", &ticks(1..2))), "io");
    assert_eq!(code(store.sync("bad")), "io");
    // Other sessions are unaffected; the failed one still loads.
    assert_eq!(code(store.append("good", &ticks(1..2))), "ok");
    assert_eq!(store.load("bad").map(|s| s.events).ok(), Some(ticks(0..1)));
    drop(store);
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(store.append("bad", &ticks(1..2))), "ok");
    assert_eq!(store.load("bad").map(|s| s.events).ok(), Some(ticks(0..2)));
}

#[test]
fn close_releases_the_lock() {
    let dir = tempdir();
    let a = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let b = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(a.create(&SessionHeader::new("s", 0))), "ok");
    assert_eq!(code(b.append("s", &ticks(0..1))), "locked");
    a.close("s");
    assert_eq!(code(b.append("s", &ticks(0..1))), "ok");
    assert_eq!(code(a.append("s", &ticks(1..2))), "locked");
}

/// A writer that ignores the (advisory) lock appends event `seq` itself.
fn write_behind_the_lock(path: &std::path::Path, seq: u64) {
    use std::io::Write as _;
    let mut rogue = std::fs::OpenOptions::new().append(true).open(path).unwrap_or_else(|e| panic!("{e}"));
    rogue.write_all(format!("{}\n", tick(seq).to_json()).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_line_written_behind_the_lock_after_a_sync_is_seen_before_the_next_append() {
    let dir = tempdir();
    let path = dir.path().join("s.jsonl");
    let mut file = SessionFile::create(&path, &SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(0..2))), "ok");
    assert_eq!(code(file.sync()), "ok");
    write_behind_the_lock(&path, 2);
    // The writer reads the file again: seq 2 is taken, 3 is next.
    assert_eq!(code(file.append(&ticks(2..3))), "conflict");
    assert_eq!(code(file.append(&ticks(3..4))), "ok");
    assert_eq!(file.load().map(|s| s.events).ok(), Some(ticks(0..4)));
}

#[test]
fn a_line_written_behind_the_lock_between_syncs_is_found_at_the_first_append_after_the_sync() {
    let dir = tempdir();
    let path = dir.path().join("s.jsonl");
    let mut file = SessionFile::create(&path, &SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(file.append(&ticks(0..1))), "ok");
    // Between two syncs the writer trusts what it wrote: the rogue line
    // lands before its next one.
    write_behind_the_lock(&path, 1);
    assert_eq!(code(file.append(&ticks(1..2))), "ok");
    assert_eq!(code(file.sync()), "ok");
    let written = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    // The first append after the sync reads the file again and finds seq 1
    // twice: refused, and nothing more is written.
    assert_eq!(code(file.append(&ticks(2..3))), "corrupt");
    assert_eq!(std::fs::read(&path).ok(), Some(written));
}

#[test]
fn a_temporary_file_whose_writer_is_gone_is_removed_at_the_next_write_there() {
    let dir = tempdir();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let place = |name: &str, modified: std::time::SystemTime| {
        let path = dir.path().join(name);
        let file = std::fs::File::create(&path).expect("create");
        file.set_modified(modified).expect("set_modified");
        path
    };
    // No process has pid 999999999 (Linux's largest is 4194304).
    let abandoned = place(".palimpsest-999999999-0.tmp", old);
    let recent = place(".palimpsest-999999999-1.tmp", std::time::SystemTime::now());
    let running = place(&format!(".palimpsest-{}-77.tmp", std::process::id()), old);
    let other = place(".palimpsest-notes.tmp", old);
    let store = JsonlStore::open(dir.path()).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    let on_linux = std::path::Path::new("/proc/self").exists();
    assert_eq!(abandoned.exists(), !on_linux, "an old file of a process that is gone");
    assert!(recent.exists(), "changed less than ten minutes ago: its writer may be stalled, not gone");
    assert!(running.exists(), "its writer runs");
    assert!(other.exists(), "not a temporary file of ours");
}

/// Replaces the file at `path` with a copy of it, renamed over it, as an
/// editor's save or `sed -i` does.
fn save_as_an_editor_does(path: &std::path::Path) {
    let copy = path.with_extension("edited");
    std::fs::copy(path, &copy).expect("copy");
    std::fs::rename(&copy, path).expect("rename over");
}

#[test]
fn a_file_renamed_over_the_held_one_refuses_the_next_append() {
    // An editor's save, `sed -i`: a new file renamed over the session's.
    // The writer held the old one, nameless, and wrote every later turn
    // there, lost.
    let dir = tempdir();
    let store = JsonlStore::open(dir.path()).expect("open");
    store.create_with_events(&SessionHeader::new("s", 0), &ticks(0..3)).expect("create");
    store.sync("s").expect("sync");
    let path = store.path_of("s").expect("path");
    save_as_an_editor_does(&path);
    let before = std::fs::read(&path).expect("read");
    assert_eq!(code(store.append("s", &ticks(3..4))), "locked");
    assert_eq!(std::fs::read(&path).expect("read"), before, "nothing was written to the file at the path");
    // Opened again, the session carries on in the file now at the path.
    drop(store);
    let store = JsonlStore::open(dir.path()).expect("open");
    store.append("s", &ticks(3..4)).expect("append");
    assert_eq!(store.load("s").expect("load").events.len(), 4);
}

#[test]
fn a_file_renamed_over_the_held_one_mid_turn_fails_the_sync() {
    // The appends of a turn are not checked one by one; at the turn's end
    // the sync finds them gone with the old file, and says so.
    let dir = tempdir();
    let store = JsonlStore::open(dir.path()).expect("open");
    store.create_with_events(&SessionHeader::new("s", 0), &ticks(0..3)).expect("create");
    store.sync("s").expect("sync");
    store.append("s", &ticks(3..4)).expect("the first append after the sync is checked, and fine");
    let path = store.path_of("s").expect("path");
    save_as_an_editor_does(&path);
    store.append("s", &ticks(4..5)).expect("mid-turn appends are not checked");
    assert_eq!(code(store.sync("s")), "locked");
    assert_ne!(code(store.append("s", &ticks(5..6))), "ok", "nothing more goes to the old file");
}
