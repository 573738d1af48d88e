//! Reading JSONL session files (contract section 6): torn tails, missing
//! newlines, corrupt lines and bad headers, each with its code and line.

use palimpsest_core_session::jsonl::{self, JsonlLog, ReadOptions};
use palimpsest_core_session::{Event, LoadError, SessionHeader};

const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;
const E0: &str = r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#;
const E1: &str = r#"{"seq":1,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#;

fn parse(text: &str) -> Result<JsonlLog, LoadError> {
    JsonlLog::parse(text.as_bytes())
}

#[track_caller]
fn check_err(text: &str, code: &str, line: Option<u64>) {
    let err = parse(text).expect_err("should fail");
    assert_eq!((err.code(), err.line()), (code, line), "{err}");
}

#[test]
fn a_clean_file_reads_whole() {
    let log = parse(&format!("{HEADER}\n{E0}\n{E1}\n")).unwrap();
    assert_eq!((log.events.len(), log.torn_tail, log.missing_newline), (2, None, false));
}

#[test]
fn a_torn_last_line_is_dropped_and_reported() {
    let torn = &E1[..20];
    let text = format!("{HEADER}\n{E0}\n{torn}");
    let log = parse(&text).unwrap();
    assert_eq!(log.events.len(), 1);
    let tail = log.torn_tail.unwrap();
    assert_eq!((tail.line, tail.offset as usize, tail.len as usize), (3, HEADER.len() + E0.len() + 2, 20));
    assert!(!log.missing_newline);
}

#[test]
fn a_whole_last_line_without_newline_is_kept() {
    let log = parse(&format!("{HEADER}\n{E0}\n{E1}")).unwrap();
    assert_eq!((log.events.len(), log.torn_tail, log.missing_newline), (2, None, true));
}

#[test]
fn every_cut_of_the_last_line_is_either_torn_or_whole() {
    let full = format!("{HEADER}\n{E0}\n{E1}\n");
    let start = HEADER.len() + E0.len() + 2;
    for cut in start..full.len() {
        let log = parse(&full[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = cut == full.len() - 1;
        assert_eq!(log.events.len(), if whole { 2 } else { 1 }, "cut at {cut}");
        assert_eq!(log.torn_tail.is_some(), !whole && cut > start, "cut at {cut}");
    }
}

#[test]
fn a_bad_middle_line_is_log_corrupt_with_its_line_number() {
    check_err(&format!("{HEADER}\n{E0}\nnot json\n{E1}\n"), "log-corrupt", Some(3));
    check_err(&format!("{HEADER}\n{E0}\n\n{E1}\n"), "log-corrupt", Some(3));
    check_err(&format!("{HEADER}\n{}\n", &E0[..10]), "log-corrupt", Some(2));
}

#[test]
fn invalid_utf8_is_log_corrupt() {
    let mut bytes = format!("{HEADER}\n").into_bytes();
    bytes.extend_from_slice(b"{\"seq\":0,\"time\":0,\"type\":\"x\xff\",\"data\":1}\n");
    let err = JsonlLog::parse(&bytes).unwrap_err();
    assert_eq!((err.code(), err.line()), ("log-corrupt", Some(2)));
}

#[test]
fn json_that_is_not_an_event_is_a_rule_violation_with_line() {
    check_err(&format!("{HEADER}\n{E0}\n{{\"seq\":1}}\n"), "event-malformed", Some(3));
    check_err(&format!("{HEADER}\n[1,2]\n"), "event-malformed", Some(2));
}

#[test]
fn header_problems() {
    check_err("", "header-malformed", Some(1));
    check_err(&format!("\n{E0}\n"), "header-malformed", Some(1));
    check_err(&format!("{E0}\n"), "header-malformed", Some(1));
    check_err("{\"type\":\"session\",\"version\":0}\n", "header-malformed", Some(1));
    check_err(
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0,\"x\":1}\n",
        "header-malformed",
        Some(1),
    );
    check_err(
        "{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"createdAt\":0}\n",
        "header-version-unsupported",
        Some(1),
    );
    check_err(
        "{\"type\":\"session\",\"version\":\"0\",\"id\":\"s\",\"createdAt\":0}\n",
        "header-version-unsupported",
        Some(1),
    );
}

#[test]
fn a_header_only_file_is_an_empty_session() {
    let s = parse(&format!("{HEADER}\n")).unwrap().into_session().unwrap();
    assert_eq!((s.events().len(), s.surface().len()), (0, 0));
}

#[test]
fn section_2_violations_on_load_carry_seq_and_line() {
    let e1 = r#"{"seq":2,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#;
    let err = parse(&format!("{HEADER}\n{E0}\n{e1}\n")).unwrap().into_session().unwrap_err();
    // The event is on line 3, whatever seq it claims.
    assert_eq!((err.code(), err.seq(), err.line()), ("seq-not-contiguous", Some(2), Some(3)));
    // A seq near u64::MAX is reported, not overflowed.
    for seq in [u64::MAX - 1, u64::MAX] {
        let e = format!(r#"{{"seq":{seq},"time":0,"type":"x","data":1}}"#);
        let err = parse(&format!("{HEADER}\n{E0}\n{e}\n")).unwrap().into_session().unwrap_err();
        assert_eq!((err.code(), err.seq(), err.line()), ("seq-not-contiguous", Some(seq), Some(3)));
    }
}

#[test]
fn the_line_size_cap_bounds_memory() {
    let long = format!(r#"{{"seq":0,"time":0,"type":"x","data":"{}"}}"#, "a".repeat(2000));
    let err = JsonlLog::parse_with(
        format!("{HEADER}\n{long}\n").as_bytes(),
        ReadOptions { max_line_bytes: 1000, ..ReadOptions::default() },
    )
    .unwrap_err();
    assert_eq!((err.code(), err.line(), err.seq()), ("event-too-large", Some(2), Some(0)));
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let nested = |n: usize| {
        let data = format!("{}{}", "[".repeat(n), "]".repeat(n));
        format!("{HEADER}\n{{\"seq\":0,\"time\":0,\"type\":\"x\",\"data\":{data}}}\n")
    };
    let err = parse(&nested(10_000)).unwrap_err();
    assert_eq!((err.code(), err.line()), ("event-malformed", Some(2)));
    assert!(parse(&nested(127)).is_ok(), "127 deep is the limit");
    assert_eq!(parse(&nested(128)).unwrap_err().code(), "event-malformed");
    // Unknown keys inside a core payload are held to the same depth.
    let deep_core = format!(
        "{HEADER}\n{{\"seq\":0,\"time\":0,\"type\":\"turn/start\",\"data\":{{\"turn\":1,\"x\":{}{}}}}}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(parse(&deep_core).unwrap_err().code(), "event-malformed");
    // What is accepted can be parsed by every reader.
    let data = format!("{}{}", "[".repeat(127), "]".repeat(127));
    assert!(serde_json::from_str::<serde_json::Value>(&data).is_ok());
}

/// An event's `data` with a raw line break in it, or whitespace around it,
/// is written on one line and read back equal, wherever the break stands:
/// every constructor keeps the value on one line and without the
/// whitespace around it. (Before, the line broke and the file could never
/// be loaded again: `log-corrupt`.)
#[test]
fn data_with_line_breaks_is_written_on_one_line_and_read_back() {
    let texts = [
        "1\n",
        "\r\n1",
        " {\"a\":1} ",
        "{\n\"a\":1}",
        "{\"a\":\r\n1}\r\n",
        "[1,\n2,\r3]",
        "{\n  \"text\": \"hi\\nthere\"\n}",
    ];
    let mut events = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let seq = 2 * i as u64;
        events.push(Event::from_parts(seq, 1, "x/y", *text, None, None).unwrap_or_else(|e| panic!("{e}")));
        // The same data in a pretty-printed event.
        let pretty = format!(
            "{{\n  \"seq\": {},\n  \"time\": 1,\n  \"type\": \"x/y\",\n  \"data\": {text}\n}}",
            seq + 1
        );
        let event = Event::from_json(&pretty).unwrap_or_else(|e| panic!("{e}"));
        // serde's way in is the same.
        assert_eq!(serde_json::from_str::<Event>(&pretty).ok().as_ref(), Some(&event), "{pretty}");
        events.push(event);
    }
    let header = SessionHeader::new("s", 0);
    let bytes = jsonl::to_bytes(&header, &events);
    let lines = bytes.split(|&b| b == b'\n').count() - 1;
    assert_eq!(lines, 1 + events.len(), "{}", String::from_utf8_lossy(&bytes));
    let log = JsonlLog::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(log.events, events);
    assert_eq!((log.torn_tail, log.missing_newline), (None, false));
    for (e, text) in events.iter().zip(texts.iter().flat_map(|t| [t, t])) {
        let value = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
        assert_eq!(value(e.data()), value(text), "{text:?}");
        assert_eq!(e.data(), e.data().trim(), "{text:?}");
    }
    let session = log.into_session().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(session.events(), &events[..]);
}
