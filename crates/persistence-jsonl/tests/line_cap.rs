//! The line cap (`with_read_options`, `read_session_file_with`): a line over
//! the cap is refused with `event-too-large` and its line number, with or
//! without its `\n`, through every read path of the store, and nothing is
//! written; the default cap is the format's own limit; and a capped store
//! still passes the whole contract kit.

use std::io::Write;
use std::path::Path;

use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions};
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::testkit::StoreFactory;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_jsonl::{read_session_file, read_session_file_with, JsonlStore, SessionFile};

const CAP: ReadOptions = ReadOptions { max_line_bytes: 4096, decode_threads: 0 };

fn tick(seq: u64, pad: usize) -> Event {
    let json = format!(r#"{{"seq":{seq},"time":{seq},"type":"kit/tick","data":"{}"}}"#, "a".repeat(pad));
    Event::from_json(&json).unwrap_or_else(|e| panic!("{e}"))
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn capped_store(dir: &Path) -> JsonlStore {
    JsonlStore::open(dir).unwrap_or_else(|e| panic!("open: {e}")).with_read_options(CAP)
}

fn append_raw(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap_or_else(|e| panic!("{e}"));
    f.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
}

fn refusal<T: std::fmt::Debug>(r: Result<T, StoreError>) -> (String, Option<String>, String) {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => (e.code().to_owned(), e.contract_code().map(str::to_owned), e.to_string()),
    }
}

/// A session `s` with two short events, written by an uncapped store.
fn session(dir: &Path) -> std::path::PathBuf {
    let store = JsonlStore::open(dir).unwrap_or_else(|e| panic!("{e}"));
    store.create(&SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    store.append("s", &[tick(0, 10), tick(1, 10)]).unwrap_or_else(|e| panic!("{e}"));
    store.path_of("s").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_terminated_line_over_the_cap_is_event_too_large_at_its_line_everywhere() {
    let dir = tempdir();
    let path = session(dir.path());
    let long = format!("{}\n", tick(2, 10_000).to_json());
    append_raw(&path, long.as_bytes());
    append_raw(&path, format!("{}\n", tick(3, 10).to_json()).as_bytes());
    let before = std::fs::read(&path).unwrap_or_default();

    let (code, contract, message) = refusal(read_session_file_with(&path, CAP));
    assert_eq!((code.as_str(), contract.as_deref()), ("corrupt", Some("event-too-large")));
    assert!(message.contains(":4:") && message.contains("longer than the 4096-byte limit"), "{message}");
    // The same verdict through the store: load, append (which reads first), and a held file.
    let store = capped_store(dir.path());
    assert_eq!(refusal(store.load("s")).1.as_deref(), Some("event-too-large"));
    assert_eq!(refusal(store.append("s", &[tick(4, 1)])).1.as_deref(), Some("event-too-large"));
    assert_eq!(refusal(store.load("s")).1.as_deref(), Some("event-too-large"));
    drop(store);
    let file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(refusal(file.with_read_options(CAP).load()).1.as_deref(), Some("event-too-large"));
    assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "a refused file is never written");
    // Uncapped, the same file reads whole.
    assert_eq!(read_session_file(&path).map(|s| s.events.len()).ok(), Some(4));
}

#[test]
fn an_unterminated_last_line_over_the_cap_is_refused_not_dropped() {
    // No writer of the format writes a line over the limit, so such a line
    // is not the prefix of a torn write: dropping it (and cutting it off at
    // the next append) could throw away a whole event.
    for last in ["x".repeat(100_000), tick(2, 100_000).to_json()] {
        let dir = tempdir();
        let path = session(dir.path());
        append_raw(&path, last.as_bytes());
        let before = std::fs::read(&path).unwrap_or_default();
        let (code, contract, message) = refusal(read_session_file_with(&path, CAP));
        assert_eq!((code.as_str(), contract.as_deref()), ("corrupt", Some("event-too-large")), "{message}");
        assert!(message.contains(":4:") && message.contains(&format!("{} bytes", last.len())), "{message}");
        // What core-session says about the same bytes, in memory.
        let parsed = JsonlLog::parse_with(&before, CAP).map(|_| ()).unwrap_err();
        assert_eq!((parsed.code(), parsed.line()), ("event-too-large", Some(4)));
        let store = capped_store(dir.path());
        assert_eq!(refusal(store.append("s", &[tick(2, 10)])).1.as_deref(), Some("event-too-large"));
        assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "a refused file is never written");
    }
}

#[test]
fn the_default_cap_is_the_format_limit_and_refuses_a_longer_line_unread() {
    use palimpsest_core_session::MAX_EVENT_LINE_BYTES;
    assert_eq!(ReadOptions::default().max_line_bytes, MAX_EVENT_LINE_BYTES);
    let dir = tempdir();
    assert_eq!(JsonlStore::open(dir.path()).map(|s| s.read_options()).ok(), Some(ReadOptions::default()));
    // A line one byte over the limit, written by hand, with and without its `\n`.
    let over = palimpsest_persistence::testkit::event_of_line_len(2, MAX_EVENT_LINE_BYTES);
    let mut line = over.to_json().into_bytes();
    line.insert(line.len() - 2, b'a');
    for end in [&b"\n"[..], b""] {
        let dir = tempdir();
        let path = session(dir.path());
        append_raw(&path, &line);
        append_raw(&path, end);
        let before = std::fs::read(&path).unwrap_or_default();
        let (code, contract, message) = refusal(read_session_file(&path));
        assert_eq!((code.as_str(), contract.as_deref()), ("corrupt", Some("event-too-large")), "{message}");
        assert!(message.contains(":4:") && message.contains("seq 2"), "{message}");
        let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(refusal(store.load("s")).1.as_deref(), Some("event-too-large"));
        assert_eq!(refusal(store.append("s", &[tick(2, 10)])).1.as_deref(), Some("event-too-large"));
        assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "a refused file is never written");
    }
}

#[test]
fn a_header_over_the_cap_is_header_malformed_and_fails_the_listing() {
    let dir = tempdir();
    let store = JsonlStore::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let long_cwd = SessionHeader { cwd: Some("/".repeat(10_000)), ..SessionHeader::new("s", 0) };
    store.create(&long_cwd).unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    let path = dir.path().join("s.jsonl");
    for (what, result) in [
        ("read", refusal(read_session_file_with(&path, CAP))),
        ("load", refusal(capped_store(dir.path()).load("s"))),
        ("list", refusal(capped_store(dir.path()).list())),
    ] {
        assert_eq!(result.1.as_deref(), Some("header-malformed"), "{what}: {}", result.2);
    }
    assert_eq!(JsonlStore::open(dir.path()).and_then(|s| s.list()).map(|l| l.len()).ok(), Some(1));
}

#[test]
fn lines_at_the_cap_are_read() {
    let dir = tempdir();
    let path = session(dir.path());
    // Exactly CAP bytes, without its `\n`.
    let pad = 4096 - tick(2, 0).to_json().len();
    let exact = tick(2, pad);
    assert_eq!(exact.to_json().len(), 4096);
    capped_store(dir.path()).append("s", std::slice::from_ref(&exact)).unwrap_or_else(|e| panic!("{e}"));
    let stored = read_session_file_with(&path, CAP).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.events.last(), Some(&exact));
}

/// The whole contract kit against a store capped at 64 MiB (the kit's
/// largest payloads are a few MB).
mod capped_contract {
    use super::*;

    struct CappedFactory {
        dir: tempfile::TempDir,
    }

    impl CappedFactory {
        fn new() -> CappedFactory {
            CappedFactory { dir: tempdir() }
        }

        fn store(&self) -> JsonlStore {
            JsonlStore::open(self.dir.path().join("store"))
                .unwrap_or_else(|e| panic!("open: {e}"))
                .with_read_options(ReadOptions::default())
        }
    }

    impl StoreFactory for CappedFactory {
        fn open(&self) -> Box<dyn SessionStore> {
            Box::new(self.store())
        }

        fn append_raw_tail(&self, session_id: &str, bytes: &[u8]) -> bool {
            append_raw(&self.store().path_of(session_id).unwrap_or_else(|e| panic!("{e}")), bytes);
            true
        }
    }

    palimpsest_persistence::store_contract_tests!(CappedFactory::new());
}
