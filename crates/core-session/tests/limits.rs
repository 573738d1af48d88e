//! One size limit for every reader and writer (issue 15, item 3): an event
//! whose line would be longer than `MAX_EVENT_LINE_BYTES` is never built,
//! and a reader refuses such a line with the same code, `event-too-large`,
//! before parsing it, whether or not it ends in `\n`.

use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions};
use palimpsest_core_session::payload::{
    Block, LogPayload, Message, PluginEvent, Role, Source, ToolCall, UserMessage,
};
use palimpsest_core_session::{
    Event, SessionHeader, SurfaceIntent, SurfaceOp, MAX_EVENT_LINE_BYTES, MAX_HEADER_LINE_BYTES,
};
use proptest::prelude::*;

const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;
const E0: &str = r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#;

/// A plugin event whose line is exactly `len` bytes long.
fn plugin_line(seq: u64, len: usize) -> String {
    let empty = format!(r#"{{"seq":{seq},"time":0,"type":"x","data":""}}"#);
    format!(r#"{{"seq":{seq},"time":0,"type":"x","data":"{}"}}"#, "a".repeat(len - empty.len()))
}

fn user(text: String) -> UserMessage {
    UserMessage {
        message: Message {
            id: "u".into(),
            role: Role::User,
            content: vec![Block::Text { text }],
            source: Source::User,
        },
        turn: None,
    }
}

#[track_caller]
fn assert_too_large<T: std::fmt::Debug>(result: Result<T, palimpsest_core_session::AppendError>, seq: u64) {
    let err = result.expect_err("an event over the limit must be refused");
    assert_eq!((err.code(), err.seq()), ("event-too-large", Some(seq)), "{err}");
}

proptest! {
    #[test]
    fn line_len_is_the_length_of_the_written_line(
        seq in any::<u64>(),
        time in any::<u64>(),
        name in "[a-z/\"\\\\\\x00-\\x1f\\x7f é]{1,12}",
        data in prop::sample::select(vec!["1", "null", "{\"a\":[1,2]}", "\"\\u0000\""]),
        sources in prop::option::of(prop::collection::vec(0u64..1_000_000, 1..5)),
        replace in prop::option::of((any::<u64>(), any::<u64>())),
    ) {
        let plugin = Event::from_parts(seq, time, &name, data, None, None);
        // Plugin names that happen to be core names are core events.
        if let Ok(e) = plugin {
            prop_assert_eq!(e.line_len(), e.to_json().len());
        }
        let message = serde_json::to_string(&user("hi".into())).unwrap();
        let seq = seq.max(1_000_000);
        let op = replace.map(|(s, e)| serde_json::to_string(&SurfaceOp::Replace { start: s, end: e }).unwrap());
        let sources = sources.map(|s| serde_json::to_string(&s).unwrap());
        let op = op.unwrap_or_else(|| "\"append\"".into());
        let e = Event::from_parts(seq, time, "user/message", message, sources.as_deref(), Some(&op)).unwrap();
        prop_assert_eq!(e.line_len(), e.to_json().len());
    }
}

#[test]
fn an_event_at_the_limit_is_built_and_one_byte_more_is_refused_by_every_constructor() {
    let at = plugin_line(7, MAX_EVENT_LINE_BYTES);
    let event = Event::from_json(&at).unwrap();
    assert_eq!((event.line_len(), event.to_json().len()), (MAX_EVENT_LINE_BYTES, MAX_EVENT_LINE_BYTES));
    // The same event at a seq with one more digit is one byte too long,
    // through every path that builds an event.
    assert_too_large(event.with_seq_and_time(10, 0), 10);
    let over = plugin_line(7, MAX_EVENT_LINE_BYTES + 1);
    assert_too_large(Event::from_json(&over), 7);
    let data = event.data().to_owned();
    assert_too_large(Event::from_parts(10, 0, "x", data, None, None), 10);
}

#[test]
fn typed_constructors_refuse_payloads_too_large_to_write() {
    // Escaping counts: a fifth of the limit in control characters is six
    // fifths of it written (`\u0001`).
    let escaped = "\u{1}".repeat(MAX_EVENT_LINE_BYTES / 5);
    let call =
        ToolCall { turn: 1, step: 1, call_id: "c".into(), name: "n".into(), arguments: escaped.clone() };
    assert_too_large(Event::log(3, 0, call), 3);
    assert_too_large(Event::surface(4, 0, user(escaped.clone()), SurfaceIntent::append()), 4);
    let plugin = PluginEvent { event_type: "x".into(), data: serde_json::Value::String(escaped) };
    assert_too_large(Event::log(5, 0, LogPayload::Plugin(plugin)), 5);
}

#[test]
fn a_line_over_the_cap_is_event_too_large_with_its_line_and_seq_terminated_or_not() {
    let cap = ReadOptions { max_line_bytes: 1000, ..ReadOptions::default() };
    let over = plugin_line(1, 1001);
    for end in ["\n", ""] {
        let file = format!("{HEADER}\n{E0}\n{over}{end}");
        let err = JsonlLog::parse_with(file.as_bytes(), cap).unwrap_err();
        assert_eq!((err.code(), err.line(), err.seq()), ("event-too-large", Some(3), Some(1)), "{err}");
    }
    // Not an event at all, and unterminated: still too large to be a torn
    // write of this format, so refused rather than dropped.
    let file = format!("{HEADER}\n{E0}\n{}", "z".repeat(1001));
    let err = JsonlLog::parse_with(file.as_bytes(), cap).unwrap_err();
    assert_eq!((err.code(), err.line(), err.seq()), ("event-too-large", Some(3), None), "{err}");
    // At the cap, a whole last line without `\n` is kept; a cut one is torn.
    let at = plugin_line(1, 1000);
    let log = JsonlLog::parse_with(format!("{HEADER}\n{E0}\n{at}").as_bytes(), cap).unwrap();
    assert_eq!((log.events.len(), log.missing_newline, log.torn_tail), (2, true, None));
    let log = JsonlLog::parse_with(format!("{HEADER}\n{E0}\n{}", &at[..999]).as_bytes(), cap).unwrap();
    assert_eq!((log.events.len(), log.torn_tail.map(|t| t.len)), (1, Some(999)));
}

#[test]
fn a_reader_without_a_cap_of_its_own_still_refuses_a_line_over_the_format_limit() {
    let uncapped = ReadOptions { max_line_bytes: usize::MAX, ..ReadOptions::default() };
    let over = plugin_line(1, MAX_EVENT_LINE_BYTES + 1);
    let file = format!("{HEADER}\n{E0}\n{over}");
    let err = JsonlLog::parse_with(file.as_bytes(), uncapped).unwrap_err();
    assert_eq!((err.code(), err.line(), err.seq()), ("event-too-large", Some(3), Some(1)), "{err}");
    // And the default reader says the same, without parsing it.
    let err = JsonlLog::parse(file.as_bytes()).unwrap_err();
    assert_eq!((err.code(), err.line(), err.seq()), ("event-too-large", Some(3), Some(1)), "{err}");
}

#[test]
fn the_header_has_its_own_limit_for_readers_and_writers() {
    let mut header = SessionHeader::new("s", 0);
    header.check_size().unwrap();
    let fixed = header.to_json().len() + r#","cwd":"""#.len();
    header.cwd = Some("c".repeat(MAX_HEADER_LINE_BYTES - fixed));
    assert_eq!(header.to_json().len(), MAX_HEADER_LINE_BYTES);
    header.check_size().unwrap();
    let file = format!("{}\n{E0}\n", header.to_json());
    assert_eq!(JsonlLog::parse(file.as_bytes()).unwrap().header, header);
    header.cwd = Some("c".repeat(MAX_HEADER_LINE_BYTES - fixed + 1));
    assert_eq!(header.check_size().unwrap_err().code(), "header-malformed");
    let file = format!("{}\n{E0}\n", header.to_json());
    let err = JsonlLog::parse(file.as_bytes()).unwrap_err();
    assert_eq!((err.code(), err.line()), ("header-malformed", Some(1)), "{err}");
    assert_eq!(SessionHeader::from_json(&header.to_json()).unwrap_err().code(), "header-malformed");
}

#[test]
fn the_limit_is_checked_before_the_payload() {
    // Too large and malformed: the size is what is reported.
    let line = format!(
        r#"{{"seq":2,"time":0,"type":"turn/start","data":{{"turn":"{}"}}}}"#,
        "1".repeat(MAX_EVENT_LINE_BYTES)
    );
    assert_too_large(Event::from_json(&line), 2);
}
