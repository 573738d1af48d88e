//! The line cap (`with_read_options`, `read_session_file_with`): a line over
//! the cap is refused with its line number, or dropped as a torn tail when
//! it is the unterminated last line, through every read path of the store;
//! and a capped store still passes the whole contract kit.

use std::io::Write;
use std::path::Path;

use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions};
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::testkit::StoreFactory;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_jsonl::{read_session_file, read_session_file_with, JsonlStore, SessionFile};

const CAP: ReadOptions = ReadOptions { max_line_bytes: 4096 };

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
fn a_terminated_line_over_the_cap_is_log_corrupt_at_its_line_everywhere() {
    let dir = tempdir();
    let path = session(dir.path());
    let long = format!("{}\n", tick(2, 10_000).to_json());
    append_raw(&path, long.as_bytes());
    append_raw(&path, format!("{}\n", tick(3, 10).to_json()).as_bytes());
    let before = std::fs::read(&path).unwrap_or_default();

    let (code, contract, message) = refusal(read_session_file_with(&path, CAP));
    assert_eq!((code.as_str(), contract.as_deref()), ("corrupt", Some("log-corrupt")));
    assert!(message.contains(":4:") && message.contains("longer than the 4096-byte limit"), "{message}");
    // The same verdict through the store: load, append (which reads first), and a held file.
    let store = capped_store(dir.path());
    assert_eq!(refusal(store.load("s")).1.as_deref(), Some("log-corrupt"));
    assert_eq!(refusal(store.append("s", &[tick(4, 1)])).1.as_deref(), Some("log-corrupt"));
    assert_eq!(refusal(store.load("s")).1.as_deref(), Some("log-corrupt"));
    drop(store);
    let file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(refusal(file.with_read_options(CAP).load()).1.as_deref(), Some("log-corrupt"));
    assert_eq!(std::fs::read(&path).unwrap_or_default(), before, "a refused file is never written");
    // Uncapped, the same file reads whole.
    assert_eq!(read_session_file(&path).map(|s| s.events.len()).ok(), Some(4));
}

#[test]
fn an_unterminated_last_line_over_the_cap_is_a_torn_tail_cut_off_by_the_next_append() {
    let dir = tempdir();
    let path = session(dir.path());
    let torn = "x".repeat(100_000);
    append_raw(&path, torn.as_bytes());
    let clean_len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or_default() - torn.len() as u64;

    let stored = read_session_file_with(&path, CAP).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.events, [tick(0, 10), tick(1, 10)]);
    let t = stored.report.torn_tail.unwrap_or_else(|| panic!("no torn tail reported"));
    assert_eq!((t.line, t.offset, t.len), (4, clean_len, torn.len() as u64));
    // What core-session says about the same bytes, in memory.
    let bytes = std::fs::read(&path).unwrap_or_default();
    let parsed = JsonlLog::parse_with(&bytes, CAP).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((parsed.events, parsed.torn_tail), (stored.events, stored.report.torn_tail));

    let store = capped_store(dir.path());
    store.append("s", &[tick(2, 10)]).unwrap_or_else(|e| panic!("append over a long torn tail: {e}"));
    let reloaded = read_session_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((reloaded.events.len(), reloaded.report.torn_tail), (3, None));
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
