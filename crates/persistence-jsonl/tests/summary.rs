//! `JsonlStore::summary` reads a session file's head and tail, not the log:
//! a defect in the middle is not seen (a load or `validate` finds it), while
//! anything wrong near the end falls back to a full load and its errors.

use std::fs;

use palimpsest_core_session::payload::{Message, TurnEnd, TurnEndReason, TurnStart, UserMessage};
use palimpsest_core_session::{Session, SessionHeader, SurfaceIntent};
use palimpsest_persistence::{SessionStore, SessionSummary};
use palimpsest_persistence_jsonl::JsonlStore;

/// A prompt, then `turns` empty turns: 1 + 2 × `turns` events.
fn long_session(store: &JsonlStore, turns: u64) {
    let mut s = Session::create(SessionHeader::new("long", 0));
    let prompt = UserMessage { turn: None, message: Message::user("u1", "the  first\nprompt") };
    s.append_surface(1, prompt, SurfaceIntent::append()).expect("prompt");
    for turn in 1..=turns {
        s.append_log(turn * 10, TurnStart { turn }).expect("turn/start");
        s.append_log(turn * 10 + 1, TurnEnd { turn, reason: TurnEndReason::Completed }).expect("turn/end");
    }
    store.create_with_events(s.header(), s.events()).expect("create");
}

/// A store holding [`long_session`] of 2000 turns, reopened, and its
/// summary as a full load gives it.
fn long_store(dir: &std::path::Path) -> (JsonlStore, SessionSummary) {
    long_session(&JsonlStore::open(dir).expect("open"), 2000);
    let store = JsonlStore::open(dir).expect("reopen");
    let whole = store.load("long").expect("load");
    let expected = SessionSummary::of(whole.header, &whole.events);
    (store, expected)
}

/// Replaces the first byte of line `line` (0-based, the header being 0).
fn break_line(path: &std::path::Path, line: usize) {
    let mut bytes = fs::read(path).expect("read");
    let start = bytes.split(|&b| b == b'\n').take(line).map(|l| l.len() + 1).sum::<usize>();
    bytes[start] = b'x';
    fs::write(path, bytes).expect("write");
}

#[test]
fn a_summary_reads_the_head_and_tail_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, expected) = long_store(dir.path());
    assert_eq!((expected.events, expected.turns()), (4001, 2000));

    break_line(&store.path_of("long").expect("path"), 2000);
    let e = store.load("long").expect_err("a load reads the broken line");
    assert_eq!(e.code(), "corrupt", "{e}");
    // The summary never reads it: the last bracket is the last line, the
    // first prompt the first.
    assert_eq!(store.summary("long").expect("summary"), expected);
}

#[test]
fn a_defect_near_the_end_is_reported_as_a_load_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JsonlStore::open(dir.path()).expect("open");
    long_session(&store, 10);
    drop(store);
    let store = JsonlStore::open(dir.path()).expect("reopen");
    let path = store.path_of("long").expect("path");
    // The last line: the summary reads it, finds it bad, and a full load
    // words the error with its line number.
    break_line(&path, 21);
    let from_load = store.load("long").expect_err("load");
    let from_summary = store.summary("long").expect_err("summary");
    assert_eq!(from_summary.to_string(), from_load.to_string());
    assert!(from_summary.to_string().contains("line 22"), "{from_summary}");
}

#[test]
fn a_torn_tail_is_left_out_as_a_load_leaves_it_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JsonlStore::open(dir.path()).expect("open");
    long_session(&store, 10);
    drop(store);
    let store = JsonlStore::open(dir.path()).expect("reopen");
    let path = store.path_of("long").expect("path");
    let mut bytes = fs::read(&path).expect("read");
    bytes.extend_from_slice(br#"{"seq":21,"time":3,"type":"turn/st"#);
    fs::write(&path, bytes).expect("write");
    let summary = store.summary("long").expect("summary");
    assert_eq!((summary.events, summary.turns()), (21, 10));
    assert_eq!(summary.last_turn.as_ref().map(|e| e.seq()), Some(20));
}

/// A torn last line (what a crash mid-append leaves) does not cost a full
/// load: the summary drops it as a load does and still reads the head and
/// the tail only. Proof: a line in the middle is broken, so a full load
/// would fail, and the summary does not.
#[test]
fn a_torn_tail_is_dropped_without_reading_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, expected) = long_store(dir.path());
    let path = store.path_of("long").expect("path");
    break_line(&path, 2000);
    let mut bytes = fs::read(&path).expect("read");
    bytes.extend_from_slice(br#"{"seq":4001,"time":3,"type":"turn/st"#);
    fs::write(&path, &bytes).expect("write");
    assert_eq!(store.load("long").expect_err("a load reads the broken line").code(), "corrupt");
    assert_eq!(store.summary("long").expect("summary"), expected);

    // A session whose only event line is torn: the header alone.
    let mut s = Session::create(SessionHeader::new("fresh", 0));
    s.append_log(1, TurnStart { turn: 1 }).expect("turn/start");
    store.create_with_events(s.header(), &[]).expect("create");
    let fresh = store.path_of("fresh").expect("path");
    let mut bytes = fs::read(&fresh).expect("read");
    bytes.extend_from_slice(br#"{"seq":0,"ti"#);
    fs::write(&fresh, &bytes).expect("write");
    let summary = store.summary("fresh").expect("summary");
    assert_eq!((summary.events, summary.last_turn.is_none()), (0, true));

    // An unterminated last line that parses is kept (a full load decides).
    let mut bytes = fs::read(&fresh).expect("read");
    bytes.truncate(bytes.len() - br#"{"seq":0,"ti"#.len());
    bytes.extend_from_slice(s.events()[0].to_json().as_bytes());
    fs::write(&fresh, &bytes).expect("write");
    let summary = store.summary("fresh").expect("summary");
    assert_eq!(summary.events, 1);
}

/// `summaries` opens each file once and shares the files among threads:
/// on a store of hundreds of sessions, some damaged near their end, it
/// returns what listing them and asking `summary` of each returns, in the
/// same order, errors included.
#[test]
fn summaries_of_many_sessions_are_each_sessions_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JsonlStore::open(dir.path()).expect("open");
    for i in 0..300u64 {
        let mut s = Session::create(SessionHeader::new(format!("s{i:03}"), i));
        let prompt = UserMessage { turn: None, message: Message::user("u1", format!("prompt {i}")) };
        s.append_surface(1, prompt, SurfaceIntent::append()).expect("prompt");
        for turn in 1..=(i % 5) {
            s.append_log(turn * 10, TurnStart { turn }).expect("turn/start");
            s.append_log(turn * 10 + 1, TurnEnd { turn, reason: TurnEndReason::Completed })
                .expect("turn/end");
        }
        store.create_with_events(s.header(), s.events()).expect("create");
    }
    drop(store);
    for i in (7..300).step_by(41) {
        break_line(&dir.path().join(format!("s{i:03}.jsonl")), 1);
    }
    let store = JsonlStore::open(dir.path()).expect("reopen");
    let broken = palimpsest_persistence::testkit::summaries_match_each_summary(&store);
    assert_eq!(store.list().expect("list").len(), 300);
    assert_eq!(broken.len(), 8, "the damaged ones hold their error: {broken:?}");
}

/// One file whose header cannot be read (or names another session) does
/// not hide the others: it is listed under the id its name encodes, with
/// its error, as a session whose log is broken is.
#[test]
fn a_file_with_a_broken_header_is_listed_with_its_error_beside_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JsonlStore::open(dir.path()).expect("open");
    for id in ["a", "c"] {
        store.create(&SessionHeader::new(id, 5)).expect("create");
    }
    drop(store);
    fs::write(dir.path().join("b.jsonl"), "{\"type\":\"session\"\n").expect("write");
    fs::write(
        dir.path().join("d.jsonl"),
        "{\"type\":\"session\",\"version\":0,\"id\":\"other\",\"createdAt\":1}\n",
    )
    .expect("write");
    let store = JsonlStore::open(dir.path()).expect("reopen");
    let all = store.summaries().expect("the listing itself stands");
    let listed: Vec<(&str, Option<&str>)> =
        all.iter().map(|(h, s)| (h.id.as_str(), s.as_ref().err().map(|e| e.code()))).collect();
    assert_eq!(listed, [("a", None), ("b", Some("corrupt")), ("c", None), ("d", Some("corrupt"))]);
    assert_eq!(all[1].0.created_at, 0, "no time is made up for an unreadable header");
}
