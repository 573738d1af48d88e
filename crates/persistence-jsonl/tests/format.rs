//! The file format on disk: canonical bytes, torn tails cut at every byte,
//! corruption with line numbers, versions, file names and listing.

use std::fs;
use std::path::Path;

use palimpsest_core_session::jsonl::{header_line, to_bytes};
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::testkit::sample_events;
use palimpsest_persistence::{Durability, DurableSession, SessionStore, StoreError};
use palimpsest_persistence_jsonl::{name, read_session_file, JsonlStore, SessionFile};
use proptest::prelude::*;

fn tick(seq: u64) -> Event {
    let json = format!(r#"{{"seq":{seq},"time":{seq},"type":"kit/tick","data":{{"n":{seq},"s":"ü🦀"}}}}"#);
    Event::from_json(&json).unwrap_or_else(|e| panic!("{e}"))
}

fn ticks(r: std::ops::Range<u64>) -> Vec<Event> {
    r.map(tick).collect()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn open(dir: &Path) -> JsonlStore {
    JsonlStore::open(dir).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

#[track_caller]
fn ok<T>(r: Result<T, StoreError>) -> T {
    r.unwrap_or_else(|e| panic!("[{}] {e}", e.code()))
}

#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T, StoreError>) -> StoreError {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e,
    }
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
}

#[test]
fn the_file_is_the_canonical_format_byte_for_byte() {
    let dir = tempdir();
    let store = open(dir.path());
    let header = SessionHeader {
        cwd: Some("/home/ü".into()),
        parent_session: Some("p".into()),
        seed_length: Some(4),
        ..SessionHeader::new("canon", 1_767_225_600_000)
    };
    let events = sample_events();
    ok(store.create(&header));
    let path = ok(store.path_of("canon"));
    assert_eq!(read(&path), header_line(&header).into_bytes(), "a new file is just the header line");
    for batch in events.chunks(7) {
        ok(store.append("canon", batch));
    }
    ok(store.sync("canon"));
    assert_eq!(read(&path), to_bytes(&header, &events));
    assert_eq!(ok(read_session_file(&path)).events, events);

    // A bare SessionFile writes the same bytes.
    let bare = dir.path().join("bare.jsonl");
    let mut file = ok(SessionFile::create(&bare, &header));
    assert_eq!(file.path(), bare);
    ok(file.append(&events[..20]));
    ok(file.append(&events[20..]));
    ok(file.sync());
    assert_eq!(read(&bare), to_bytes(&header, &events));
}

/// Contract section 6 and STYLE item 10: cut the last record at every byte,
/// reopen, load, append; the result is always the canonical file.
#[test]
fn a_last_record_cut_at_every_byte_reopens_cleanly() {
    let dir = tempdir();
    let header = SessionHeader::new("cut", 0);
    let full = to_bytes(&header, &ticks(0..3));
    let prefix_len = to_bytes(&header, &ticks(0..2)).len();
    let last_len = full.len() - prefix_len; // with its '\n'
    let path = open(dir.path()).path_of("cut").unwrap_or_else(|e| panic!("{e}"));
    for k in 0..=last_len {
        write(&path, &full[..prefix_len + k]);
        let store = open(dir.path());
        let loaded = ok(store.load("cut"));
        let kept = if k >= last_len - 1 { 3 } else { 2 };
        assert_eq!(loaded.events, ticks(0..kept), "cut at {k}");
        match loaded.report.torn_tail {
            Some(torn) => {
                assert!(k > 0 && k < last_len - 1, "cut at {k}: reported torn");
                assert_eq!(
                    (torn.line, torn.offset, torn.len),
                    (4, prefix_len as u64, k as u64),
                    "cut at {k}"
                );
            }
            None => assert!(k == 0 || k >= last_len - 1, "cut at {k}: torn tail not reported"),
        }
        assert_eq!(read(&path).len(), prefix_len + k, "cut at {k}: a load changed the file");
        ok(store.append("cut", &[tick(kept)]));
        assert_eq!(read(&path), to_bytes(&header, &ticks(0..kept + 1)), "cut at {k}: file after the append");
        drop(store);
        let reread = ok(read_session_file(&path));
        assert_eq!((reread.events, reread.report.torn_tail), (ticks(0..kept + 1), None), "cut at {k}");
    }
}

#[test]
fn a_cut_or_missing_header_is_header_malformed_at_line_1() {
    let dir = tempdir();
    let line = header_line(&SessionHeader::new("h", 0));
    let path = open(dir.path()).path_of("h").unwrap_or_else(|e| panic!("{e}"));
    for k in 0..line.len() - 1 {
        write(&path, &line.as_bytes()[..k]);
        let store = open(dir.path());
        for e in [err(store.load("h")), err(store.append("h", &[tick(0)])), err(store.list())] {
            assert_eq!(
                (e.code(), e.contract_code()),
                ("corrupt", Some("header-malformed")),
                "cut at {k}: {e}"
            );
            assert!(e.to_string().contains("h.jsonl:1:"), "cut at {k}: {e}");
        }
    }
    // The header whole but without its newline is fine.
    write(&path, &line.as_bytes()[..line.len() - 1]);
    let store = open(dir.path());
    ok(store.append("h", &[tick(0)]));
    assert_eq!(read(&path), to_bytes(&SessionHeader::new("h", 0), &[tick(0)]));
}

#[test]
fn any_other_bad_line_is_corrupt_with_its_line_number_and_nothing_is_written() {
    let header = SessionHeader::new("bad", 0);
    let good = to_bytes(&header, &ticks(0..1));
    let user_without_op = r#"{"seq":1,"time":1,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[],"source":{"kind":"user"}}}}"#;
    let cases: [(&str, Vec<u8>, &str); 8] = [
        ("not JSON", b"garbage\n".to_vec(), "log-corrupt"),
        ("a blank line", b"\n".to_vec(), "log-corrupt"),
        ("whitespace only", b"  \t \n".to_vec(), "log-corrupt"),
        ("invalid UTF-8", b"{\"seq\":1,\"x\":\"\xff\"}\n".to_vec(), "log-corrupt"),
        ("JSON but not an event", b"{\"seq\":1}\n".to_vec(), "event-malformed"),
        ("an event breaking rule 1", format!("{user_without_op}\n").into_bytes(), "surface-op-missing"),
        (
            "a null optional key",
            b"{\"seq\":1,\"time\":1,\"type\":\"kit/tick\",\"data\":{},\"surfaceOp\":null}\n".to_vec(),
            "event-malformed",
        ),
        ("unterminated, JSON but not an event", b"{\"seq\":1}".to_vec(), "event-malformed"),
    ];
    for (what, line, contract_code) in cases {
        for followed in [false, true] {
            let dir = tempdir();
            let store = open(dir.path());
            let path = ok(store.path_of("bad"));
            let mut bytes = good.clone();
            bytes.extend_from_slice(&line);
            if !line.ends_with(b"\n") {
                // An unterminated last line that parses as JSON is not torn:
                // it can only be the last line.
                if followed {
                    continue;
                }
            } else if followed {
                bytes.extend_from_slice(&to_bytes(&header, &ticks(2..3))[header_line(&header).len()..]);
            }
            write(&path, &bytes);
            let what = format!("{what} (followed by a line: {followed})");
            for e in
                [err(store.load("bad")), err(store.append("bad", &[tick(1)])), err(read_session_file(&path))]
            {
                assert_eq!((e.code(), e.contract_code()), ("corrupt", Some(contract_code)), "{what}: {e}");
                match &e {
                    StoreError::Corrupt { location, cause: Some(cause), .. } => {
                        assert!(location.ends_with("bad.jsonl:3"), "{what}: location {location}");
                        assert_eq!(cause.line(), Some(3), "{what}");
                    }
                    other => panic!("{what}: {other:?}"),
                }
            }
            assert_eq!(read(&path), bytes, "{what}: the file changed");
            assert_eq!(ok(store.list()).len(), 1, "{what}: list reads only the header");
        }
    }
}

#[test]
fn another_format_version_is_version_unsupported() {
    let dir = tempdir();
    let store = open(dir.path());
    let path = ok(store.path_of("v"));
    write(&path, b"{\"type\":\"session\",\"version\":1,\"id\":\"v\",\"createdAt\":0}\n");
    for e in [
        err(store.load("v")),
        err(store.append("v", &[tick(0)])),
        err(store.list()),
        err(read_session_file(&path)),
    ] {
        assert_eq!(
            (e.code(), e.contract_code()),
            ("version-unsupported", Some("header-version-unsupported")),
            "{e}"
        );
        assert!(
            matches!(&e, StoreError::VersionUnsupported { found, expected }
                if *found == format!("1 ({})", path.display()) && expected == "0"),
            "the version and the file: {e:?}"
        );
    }
}

#[test]
fn a_file_renamed_by_hand_is_corrupt() {
    let dir = tempdir();
    let store = open(dir.path());
    ok(store.create(&SessionHeader::new("a", 0)));
    ok(store.append("a", &ticks(0..1)));
    fs::copy(ok(store.path_of("a")), ok(store.path_of("b"))).unwrap_or_else(|e| panic!("{e}"));
    let store = open(dir.path());
    for e in [err(store.load("b")), err(store.append("b", &[tick(1)])), err(store.list())] {
        assert_eq!(e.code(), "corrupt", "{e}");
        assert!(e.to_string().contains("names session \"a\""), "{e}");
    }
}

#[test]
fn list_ignores_other_files_but_not_broken_session_files() {
    let dir = tempdir();
    let store = open(dir.path());
    ok(store.create(&SessionHeader::new("s", 7)));
    for (name, bytes) in [
        ("README.md", &b"hello"[..]),
        ("notes.txt", b"x"),
        (".hidden.jsonl", b"garbage"),
        (".palimpsest-1-1.tmp", b""),
        ("s.jsonl.bak", b"garbage"),
    ] {
        write(&dir.path().join(name), bytes);
    }
    fs::create_dir(dir.path().join("sub.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok(store.list()), vec![SessionHeader::new("s", 7)]);

    let stray = dir.path().join("My Session.jsonl");
    write(&stray, &header_line(&SessionHeader::new("My Session", 0)).into_bytes());
    let e = err(store.list());
    assert_eq!(e.code(), "corrupt");
    assert!(e.to_string().contains("My Session.jsonl"), "{e}");
    fs::remove_file(&stray).unwrap_or_else(|e| panic!("{e}"));

    write(&dir.path().join("t.jsonl"), b"");
    let e = err(store.list());
    assert_eq!((e.code(), e.contract_code()), ("corrupt", Some("header-malformed")), "{e}");
}

#[test]
fn stored_seqs_that_are_not_contiguous_load_but_cannot_be_continued() {
    let dir = tempdir();
    let store = std::sync::Arc::new(open(dir.path()));
    let header = SessionHeader::new("gap", 0);
    let bytes = to_bytes(&header, &[tick(0), tick(2)]);
    write(&ok(store.path_of("gap")), &bytes);
    assert_eq!(ok(store.load("gap")).events, vec![tick(0), tick(2)]);
    match DurableSession::open(store.clone(), "gap", Durability::default()) {
        Ok(_) => panic!("opened a log with a seq gap"),
        Err(e) => assert_eq!(e.code(), "seq-not-contiguous"),
    }
    let e = err(store.append("gap", &[tick(2)]));
    assert_eq!((e.code(), e.contract_code()), ("corrupt", Some("seq-not-contiguous")), "{e}");
    assert!(e.to_string().contains("gap.jsonl:3"), "{e}");
    assert_eq!(read(&ok(store.path_of("gap"))), bytes);
}

#[test]
fn session_file_api() {
    let dir = tempdir();
    let path = dir.path().join("f.jsonl");
    let header = SessionHeader::new("f", 0);
    assert_eq!(err(SessionFile::open(&path)).code(), "not-found");
    assert_eq!(err(read_session_file(&path)).code(), "not-found");
    let mut file = ok(SessionFile::create(&path, &header));
    assert_eq!(err(SessionFile::create(&path, &header)).code(), "already-exists");
    assert_eq!(err(SessionFile::open(&path)).code(), "locked", "a second writer in this process");
    let loaded = ok(file.load());
    assert_eq!((loaded.header, loaded.events.len()), (header.clone(), 0));
    ok(file.append(&ticks(0..2)));
    assert_eq!(err(file.append(&ticks(3..4))).code(), "conflict");
    ok(file.append(&[]));
    ok(file.sync());
    ok(file.sync());
    assert_eq!(ok(read_session_file(&path)).events, ticks(0..2), "readers take no lock");
    drop(file);
    let mut file = ok(SessionFile::open(&path));
    ok(file.append(&ticks(2..3)));
    assert_eq!(ok(file.load()).events, ticks(0..3));
    let missing_dir = dir.path().join("no").join("such.jsonl");
    assert_eq!(err(SessionFile::create(&missing_dir, &header)).code(), "io");
    // No temporary files are left behind.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f.jsonl")]);
}

#[test]
fn store_paths_and_ids() {
    let dir = tempdir();
    let store = open(&dir.path().join("nested/store"));
    assert_eq!(store.dir(), dir.path().join("nested/store"));
    assert!(JsonlStore::is_store_dir(store.dir()));
    assert_eq!(ok(store.path_of("Ab/c")), store.dir().join("%41b%2Fc.jsonl"));
    for bad in ["", &"é".repeat(200)] {
        assert_eq!(err(store.path_of(bad)).code(), "invalid-id");
        assert_eq!(err(store.create(&SessionHeader::new(bad, 0))).code(), "invalid-id");
        assert_eq!(err(store.load(bad)).code(), "invalid-id");
        assert_eq!(err(store.append(bad, &[])).code(), "invalid-id");
    }
    ok(store.create(&SessionHeader::new("x", 0)));
    let file = ok(store.path_of("x"));
    assert!(!JsonlStore::is_store_dir(&file));
    assert!(!JsonlStore::is_store_dir(&dir.path().join("missing")));
    assert_eq!(err(JsonlStore::open(&file)).code(), "io");
    assert_eq!(err(store.sync("missing")).code(), "not-found");
}

#[test]
fn delete_is_refused_while_another_writer_holds_the_session() {
    let dir = tempdir();
    let (a, b) = (open(dir.path()), open(dir.path()));
    ok(a.create(&SessionHeader::new("s", 0)));
    assert_eq!(err(b.delete("s")).code(), "locked");
    assert_eq!(ok(b.load("s")).events.len(), 0);
    drop(a);
    ok(b.delete("s"));
    assert_eq!(err(b.load("s")).code(), "not-found");
}

#[test]
fn a_writer_that_ignored_the_lock_is_noticed() {
    let dir = tempdir();
    let store = open(dir.path());
    let header = SessionHeader::new("s", 0);
    ok(store.create(&header));
    ok(store.append("s", &ticks(0..1)));
    // The store asks the file's length again at the first append after a
    // sync (between syncs it trusts what it wrote).
    ok(store.sync("s"));
    // Someone appends behind the store's back (flock is advisory).
    let path = ok(store.path_of("s"));
    write(&path, &to_bytes(&header, &ticks(0..2)));
    assert_eq!(err(store.append("s", &[tick(1)])).code(), "conflict");
    ok(store.append("s", &[tick(2)]));
    assert_eq!(read(&path), to_bytes(&header, &ticks(0..3)));
}

proptest! {
    #[test]
    fn names_round_trip_and_stay_in_the_directory(id in "\\PC{1,20}|[a-zA-Z0-9._/%-]{1,80}") {
        let file = name::file_name(&id).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let decoded = name::session_id(&file);
        prop_assert_eq!(decoded.as_deref(), Some(id.as_str()));
        prop_assert!(file.len() <= name::MAX_FILE_NAME_BYTES);
        let stem = file.strip_suffix(name::SUFFIX).unwrap_or("");
        prop_assert!(!stem.is_empty());
        prop_assert!(stem.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-%ABCDEF".contains(&b)));
    }

    #[test]
    fn different_ids_get_names_that_differ_ignoring_case(a in "[a-zA-Z%._-]{1,6}", b in "[a-zA-Z%._-]{1,6}") {
        prop_assume!(a != b);
        let (na, nb) = (name::file_name(&a), name::file_name(&b));
        if let (Ok(na), Ok(nb)) = (na, nb) {
            prop_assert_ne!(na.to_lowercase(), nb.to_lowercase());
        }
    }
}

/// A file several read pieces long, with lines across the piece edges, is
/// read exactly as the whole bytes parse: by `read_session_file`, by a held
/// file's `load`, and with a torn last line or a bad line far into it.
#[test]
fn a_file_larger_than_a_read_piece_reads_as_its_bytes_parse() {
    use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions};
    let dir = tempdir();
    let path = dir.path().join("big.jsonl");
    let header = SessionHeader::new("big", 0);
    // ~20 MB: more than two 8 MiB pieces, lines of odd lengths.
    let events: Vec<Event> = (0..9_000u64)
        .map(|seq| {
            let pad = "x".repeat(1_500 + (seq as usize * 7) % 1_300);
            Event::from_json(&format!(r#"{{"seq":{seq},"time":1,"type":"kit/pad","data":"{pad}"}}"#)).unwrap()
        })
        .collect();
    let bytes = to_bytes(&header, &events);
    assert!(bytes.len() > 16 << 20, "{} bytes", bytes.len());
    let expect = |bytes: &[u8]| {
        JsonlLog::parse_with(bytes, ReadOptions { max_line_bytes: usize::MAX, ..ReadOptions::default() })
    };
    for damage in ["", "{\"seq\":9000,\"ti", "\n{not json\n"] {
        let mut file = bytes.clone();
        file.extend_from_slice(damage.as_bytes());
        write(&path, &file);
        let whole = expect(&file);
        let read = read_session_file(&path);
        match (&whole, &read) {
            (Ok(log), Ok(stored)) => {
                assert_eq!(stored.events, log.events);
                assert_eq!(stored.report.torn_tail, log.torn_tail);
            }
            (Err(e), Err(StoreError::Corrupt { cause: Some(cause), .. })) => assert_eq!(cause, e),
            other => panic!("{damage:?}: {other:?}"),
        }
        if let Ok(log) = &whole {
            let loaded = ok(SessionFile::open(&path)).load();
            assert_eq!(ok(loaded).events.len(), log.events.len(), "{damage:?}");
        }
    }
}
