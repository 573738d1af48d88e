//! A store directory's `.jsonl` entries and checkpoint sidecars must be
//! regular files (links to one count). A FIFO named like a session would
//! block every reader forever, waiting for a writer; a link to `/dev/zero`
//! would be read forever. Each is refused with `corrupt`, at once, by every
//! way in, and a bad sidecar is ignored as any other unusable sidecar is.
#![cfg(unix)]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_jsonl::{JsonlStore, SessionFile};

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

/// Runs `f` on another thread and fails the test, instead of hanging it,
/// if it does not return within a few seconds.
fn within_seconds<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} did not return: it blocked"))
}

fn code<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => e.code().to_owned(),
    }
}

fn tick(seq: u64) -> Event {
    let json = format!(r#"{{"seq":{seq},"time":{seq},"type":"kit/tick","data":{{}}}}"#);
    Event::from_json(&json).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_fifo_or_a_device_named_as_a_session_is_refused_at_once_by_every_read_and_write() {
    let dir = tempdir();
    mkfifo(&dir.path().join("pipe.jsonl"));
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().to_owned();
    let codes = within_seconds("the store's reads", move || {
        let store = JsonlStore::open(&root).unwrap_or_else(|e| panic!("open: {e}"));
        let mut codes = Vec::new();
        for id in ["pipe", "zero"] {
            codes.push(code(store.load(id)));
            codes.push(code(store.summary(id)));
            codes.push(code(store.load_resumable(id)));
            codes.push(code(store.append(id, &[tick(0)])));
            let empty =
                Session::from_log(SessionHeader::new(id, 0), Vec::new()).unwrap_or_else(|e| panic!("{e}"));
            codes.push(code(store.save_checkpoint(id, &empty.checkpoint())));
            codes.push(code(SessionFile::open(root.join(format!("{id}.jsonl")))));
        }
        codes.push(code(store.list()));
        // The summaries list each with its error, beside the others.
        let summaries = store.summaries().unwrap_or_else(|e| panic!("summaries: {e}"));
        for (header, summary) in summaries {
            assert_eq!(header.created_at, 0, "{}", header.id);
            codes.push(code(summary));
        }
        codes
    });
    assert!(codes.iter().all(|c| c == "corrupt"), "{codes:?}");
}

#[test]
fn a_sidecar_that_is_not_a_regular_file_is_ignored_as_unusable() {
    let dir = tempdir();
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("open: {e}"));
    let header = SessionHeader::new("s", 0);
    store.create_with_events(&header, &[tick(0), tick(1)]).unwrap_or_else(|e| panic!("{e}"));
    store.close("s");
    let session = Session::from_log(header.clone(), store.load("s").unwrap_or_else(|e| panic!("{e}")).events)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(store.save_checkpoint("s", &session.checkpoint()).unwrap_or_else(|e| panic!("{e}")));
    let sidecar = std::fs::read_dir(dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n != "s.jsonl"))
        .unwrap_or_else(|| panic!("a sidecar was written"));
    for replacement in ["fifo", "zero"] {
        std::fs::remove_file(&sidecar).unwrap_or_else(|e| panic!("{e}"));
        match replacement {
            "fifo" => mkfifo(&sidecar),
            _ => std::os::unix::fs::symlink("/dev/zero", &sidecar).unwrap_or_else(|e| panic!("{e}")),
        }
        let root = dir.path().to_owned();
        let resumed = within_seconds("load_resumable", move || {
            let store = JsonlStore::open(&root).unwrap_or_else(|e| panic!("open: {e}"));
            store.load_resumable("s").map(|r| (r.checkpoint.is_some(), r.tail.len()))
        });
        assert_eq!(resumed.ok(), Some((false, 2)), "{replacement}: the whole file is read instead");
    }
}
