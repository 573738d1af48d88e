//! One size limit for every reader and writer, end to end (issue 15): a log
//! whose last event is exactly at the 64 MiB limit and lacks its final `\n`
//! is kept, repaired in place and converted to SQLite and back byte for
//! byte; one a byte longer is `event-too-large` for every command, never a
//! torn tail, and nothing writes to it.

mod support;

use std::fs;
use std::path::Path;

use palimpsest_core_session::MAX_EVENT_LINE_BYTES;
use palimpsest_persistence::testkit::event_of_line_len;

use support::Run;

const HEADER: &str = r#"{"type":"session","version":0,"id":"big","createdAt":0}"#;
const TURN: &str = r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#;

fn palimpsest(dir: &Path, args: &[&str]) -> Run {
    support::palimpsest(dir, args)
}

/// An open turn whose last line, `len` bytes long, has no `\n`.
fn file_with_last_line(dir: &Path, len: usize) -> Vec<u8> {
    let mut last = event_of_line_len(1, MAX_EVENT_LINE_BYTES.min(len)).to_json().into_bytes();
    // One more byte inside the data string, when asked for more.
    for _ in MAX_EVENT_LINE_BYTES..len {
        last.insert(last.len() - 2, b'a');
    }
    let mut bytes = format!("{HEADER}\n{TURN}\n").into_bytes();
    bytes.extend_from_slice(&last);
    fs::write(dir.join("big.jsonl"), &bytes).expect("write");
    bytes
}

#[test]
fn a_last_event_at_the_limit_without_its_newline_is_kept_repaired_and_converted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = file_with_last_line(dir.path(), MAX_EVENT_LINE_BYTES);
    let run = palimpsest(dir.path(), &["validate", "big.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = palimpsest(dir.path(), &["repair", "--write", "big.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let after = fs::read(dir.path().join("big.jsonl")).expect("read");
    assert_eq!(&after[..before.len()], &before[..], "the big event is kept whole");
    assert_eq!(after[before.len()], b'\n', "the missing newline is added before the closers");
    assert_eq!(palimpsest(dir.path(), &["validate", "big.jsonl"]).code, 0);
    // SQLite and back: the same bytes, and both validate.
    let run = palimpsest(dir.path(), &["convert", "big.jsonl", "big.db"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(palimpsest(dir.path(), &["validate", "big.db", "--session", "big"]).code, 0);
    let run = palimpsest(dir.path(), &["convert", "big.db", "back.jsonl", "--session", "big"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(fs::read(dir.path().join("back.jsonl")).expect("read back"), after);
}

#[test]
fn a_last_line_over_the_limit_is_event_too_large_for_every_command_and_never_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = file_with_last_line(dir.path(), MAX_EVENT_LINE_BYTES + 1);
    for args in
        [&["validate", "big.jsonl"][..], &["repair", "big.jsonl"], &["repair", "--write", "big.jsonl"]]
    {
        let run = palimpsest(dir.path(), args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("event-too-large"), "{args:?}: {}", run.stderr);
    }
    assert!(
        fs::read(dir.path().join("big.jsonl")).expect("read") == before,
        "a refused file is never written"
    );
}

#[test]
fn repair_write_still_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("t.jsonl"), format!("{HEADER}\n{TURN}\n{}", &TURN[..30])).expect("write");
    let run = palimpsest(dir.path(), &["repair", "--write", "t.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let after = fs::read_to_string(dir.path().join("t.jsonl")).expect("read");
    assert!(after.starts_with(&format!("{HEADER}\n{TURN}\n{{\"seq\":1,")), "{after}");
    assert_eq!(palimpsest(dir.path(), &["validate", "t.jsonl"]).code, 0);
}
