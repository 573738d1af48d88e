//! `from_parts` reads columns written as `write_json` writes them
//! without serde; it must decide exactly as the general reading does.

use proptest::prelude::*;

use super::*;

fn data() -> impl Strategy<Value = String> {
    const DATA: &[&str] = &[
        r#"{"turn":1}"#,
        r#"{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}"#,
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        r#"{"settings":{"model":"m","tools":[{"name":"t"}]}}"#,
        r#"{"settings":{"model":null}}"#,
        r#"[1,2]"#,
        r#"{"turn":"1"}"#,
        r#" {"turn":1}"#,
        "{\"turn\":1}\n",
        "{\n\"turn\":1}",
        "\r\n[1,\r2]\t",
        r#"{"turn":1"#,
        "null",
        r#"{"turn":1,"turn":1}"#,
        r#"{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi","type":"tool-call"}],"source":{"kind":"user"}}}"#,
        r#"{"message":{"id":"u","role":"user","content":[],"source":{"kind":"user","kind":"user"}},"x":{"y":1,"y":2}}"#,
    ];
    prop::sample::select(DATA).prop_map(str::to_owned)
}

fn sources() -> impl Strategy<Value = Option<String>> {
    const SOURCES: &[&str] = &[
        "[1,2]",
        "[]",
        "[0]",
        "[01]",
        "[1, 2]",
        "[2,1]",
        "[1,1]",
        "[9]",
        "null",
        "[1.0]",
        "[1",
        "{}",
        r#"[{"a":1,"a":1}]"#,
    ];
    prop::option::of(prop::sample::select(SOURCES).prop_map(str::to_owned))
}

fn op() -> impl Strategy<Value = Option<String>> {
    const OPS: &[&str] = &[
        r#""append""#,
        r#"{"op":"replace","start":1,"end":2}"#,
        r#"{"op":"replace","end":2,"start":1}"#,
        r#"{"op":"replace","start":1,"end":2} "#,
        r#"{"op":"replace","start":01,"end":2}"#,
        r#"{"op":"replace","start":1,"end":18446744073709551616}"#,
        r#"x{"op":"replace","start":1,"end":2}"#,
        r#"{"op":"replace","start":1,"end":2}}"#,
        r#"{"op":"replace","start":1,"end":2,"x":0}"#,
        r#"{"op":"replace","start":1,"end":2,"end":2}"#,
        r#"{"op":"replace","op":"replace","start":1,"end":2}"#,
        r#""Append""#,
        r#" "append""#,
        "null",
        "[]",
    ];
    prop::option::of(prop::sample::select(OPS).prop_map(str::to_owned))
}

fn event_type() -> impl Strategy<Value = &'static str> {
    prop::sample::select(
        &[
            "turn/start",
            "user/message",
            "assistant/message",
            "assistant/chunk",
            "session/settings",
            "x/plugin",
        ][..],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn from_parts_agrees_with_the_general_reading(
        t in event_type(), d in data(), s in sources(), o in op(), seq in 5u64..8,
    ) {
        let fast = Event::from_parts(seq, 1, t, d.clone(), s.as_deref(), o.as_deref());
        let general = Event::from_general_parts(seq, 1, t, Box::<str>::from(d).into(), s.as_deref(), o.as_deref());
        prop_assert_eq!(fast, general);
    }

    /// The same columns with `data` a range of a text shared with other
    /// payloads: the same event or the same error, and a text shared only
    /// where it needed no normalizing.
    #[test]
    fn from_shared_parts_agrees_with_from_parts(
        t in event_type(), d in data(), s in sources(), o in op(), seq in 5u64..8,
        before in data(), after in data(),
    ) {
        let text = SharedText::new(format!("{before}{d}{after}"));
        let range = before.len()..before.len() + d.len();
        let shared = Event::from_shared_parts(seq, 1, t, &text, range, s.as_deref(), o.as_deref());
        let own = Event::from_parts(seq, 1, t, d.clone(), s.as_deref(), o.as_deref());
        prop_assert_eq!(shared.as_ref().is_ok_and(Event::shares_text), own.is_ok() && is_normalized(&d));
        prop_assert_eq!(shared, own);
    }
}

#[test]
fn a_shared_range_that_is_not_a_text_of_it_is_read_as_nothing_else_would_be() {
    let text = SharedText::new("{\"é\":1}".to_owned());
    // Outside the text, or inside `é`: read as the empty text, not JSON.
    #[allow(clippy::reversed_empty_ranges)] // on purpose: no text of any text
    let ranges = [0..99, 0..3, 5..2];
    for range in ranges {
        let e = Event::from_shared_parts(0, 1, "x/y", &text, range.clone(), None, None);
        assert_eq!(e.as_ref().map_err(AppendError::code), Err("event-malformed"), "{range:?}");
    }
    let e = Event::from_shared_parts(0, 1, "x/y", &text, 0..8, None, None).unwrap();
    assert!(e.shares_text());
    assert_eq!(e.data(), "{\"é\":1}");
}

#[test]
fn columns_as_written_take_the_exact_reading() {
    assert_eq!(exact_surface_op(r#""append""#), Some(SurfaceOp::Append));
    let replace = SurfaceOp::Replace { start: 3, end: 12 };
    assert_eq!(exact_surface_op(&serde_json::to_string(&replace).unwrap()), Some(replace));
    assert_eq!(exact_surface_op(r#"{"op":"replace","start":3,"end":12} "#), None);
    assert_eq!(exact_u64_list("[]").as_deref(), Some(&[][..]));
    assert_eq!(exact_u64_list("[4,18446744073709551615]").as_deref(), Some(&[4, u64::MAX][..]));
    assert_eq!(exact_u64_list("[4, 5]"), None);
}

/// JSON whitespace around `data` is not part of the value's text, and a
/// raw line break inside it is whitespace between tokens: every
/// constructor drops the one and keeps the other as a space, so the event
/// is written on one line and read back equal (from a JSONL line or from
/// the row's columns). Before, `"1\n"` and `"{\n\"a\":1}"` were accepted
/// and broke the line they were written on.
#[test]
fn data_is_trimmed_and_kept_on_one_line() {
    for (data, kept) in [
        ("1\n", "1"),
        ("\n1", "1"),
        (" \t\r\n1 \t\r\n", "1"),
        ("{\n\"a\":1}", "{ \"a\":1}"),
        ("{\r\n  \"a\": 1\r\n}", "{    \"a\": 1  }"),
        ("[1,\r2]", "[1, 2]"),
        ("\n{\"a\":[1,\n2]}\n", "{\"a\":[1, 2]}"),
        // Escaped line breaks are the string's, and stay.
        ("\"a\\nb\\r\"\n", "\"a\\nb\\r\""),
        ("{\"a\":1}", "{\"a\":1}"),
    ] {
        let e = Event::from_parts(0, 1, "x/y", data, None, None).unwrap_or_else(|e| panic!("{data:?}: {e}"));
        assert_eq!(e.data(), kept, "{data:?}");
        let general = Event::from_general_parts(0, 1, "x/y", Box::<str>::from(data).into(), None, None);
        assert_eq!(general.as_ref(), Ok(&e), "{data:?}");
        // Written as a line and read back; read back from its columns.
        let line = e.to_json();
        assert!(!line.contains(['\n', '\r']), "{line:?}");
        assert_eq!(Event::from_json(&line).as_ref(), Ok(&e), "{line:?}");
        assert_eq!(Event::from_parts(0, 1, "x/y", e.data(), None, None).as_ref(), Ok(&e));
        // The same data in an event's JSON text, as a pretty-printer or a
        // hand edit writes it.
        let json = format!("{{\n  \"seq\": 0,\n  \"time\": 1,\n  \"type\": \"x/y\",\n  \"data\": {data}\n}}");
        assert_eq!(Event::from_json(&json).as_ref(), Ok(&e), "{json:?}");
    }
    // A line break inside a string is not JSON, normalized or not.
    for data in ["\"a\nb\"", "\"a\rb\"", "{\"a\n\":1}"] {
        let err = Event::from_parts(0, 1, "x/y", data, None, None).unwrap_err();
        assert_eq!(err.code(), "event-malformed", "{data:?}");
        let json = format!("{{\"seq\":0,\"time\":1,\"type\":\"x/y\",\"data\":{data}}}");
        assert_eq!(Event::from_json(&json).unwrap_err().code(), "event-malformed", "{json:?}");
    }
    // Nothing but whitespace is no value.
    assert_eq!(Event::from_parts(0, 1, "x/y", " \n", None, None).unwrap_err().code(), "event-malformed");
}

#[test]
fn a_core_payload_over_several_lines_is_kept_on_one() {
    let data = "{\n  \"message\": {\n    \"id\": \"u\",\n    \"role\": \"user\",\r\n    \"content\": [{\"type\": \"text\", \"text\": \"hi\\nthere\"}],\n    \"source\": {\"kind\": \"user\"}\n  }\n}\n";
    let e = Event::from_parts(3, 1, "user/message", data, None, Some(r#""append""#)).unwrap();
    assert!(!e.data().contains(['\n', '\r']), "{:?}", e.data());
    let value = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    assert_eq!(value(e.data()), value(data));
    assert_eq!(Event::from_json(&e.to_json()), Ok(e));
}

/// A JSON value, any shape, small.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Strings with line breaks, which JSON escapes.
        "[a\n\r \t\"\\\\é]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c\n]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// JSON whitespace, line breaks included.
fn json_space() -> impl Strategy<Value = String> {
    "[ \t\r\n]{0,3}"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Any JSON value, pretty-printed with any line ends and padded with
    /// any whitespace, is the same value on one line, written and read
    /// back equal.
    #[test]
    fn any_data_text_is_kept_on_one_line(
        value in json_value(), crlf in any::<bool>(), before in json_space(), after in json_space(),
    ) {
        let mut pretty = serde_json::to_string_pretty(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if crlf {
            pretty = pretty.replace('\n', "\r\n");
        }
        let data = format!("{before}{pretty}{after}");
        let e = Event::from_parts(4, 1, "x/y", data.clone(), None, None)
            .map_err(|e| TestCaseError::fail(format!("{data:?}: {e}")))?;
        let kept = e.data();
        prop_assert!(!kept.contains(['\n', '\r']), "{:?}", kept);
        prop_assert!(!kept.starts_with(|c: char| c.is_ascii_whitespace()), "{:?}", kept);
        prop_assert!(!kept.ends_with(|c: char| c.is_ascii_whitespace()), "{:?}", kept);
        prop_assert_eq!(kept.len(), pretty.len());
        prop_assert_eq!(serde_json::from_str::<serde_json::Value>(kept).ok(), Some(value));
        prop_assert_eq!(Event::from_json(&e.to_json()), Ok(e.clone()));
        prop_assert_eq!(Event::from_parts(4, 1, "x/y", kept, None, None), Ok(e.clone()));
        let json = format!("{{\"seq\":4,\"time\":1,\"type\":\"x/y\",\"data\":{data}}}");
        prop_assert_eq!(Event::from_json(&json), Ok(e));
    }
}

#[test]
fn a_types_quoted_length_is_what_serde_writes() {
    // Each byte class: plain, quote, backslash, short escapes, other
    // control bytes, DEL and non-ASCII (both written as they are).
    for s in [
        "assistant/chunk",
        "",
        "x\"y",
        "a\\b",
        "t\tn\nr\r",
        "\u{1}\u{1f}",
        "\u{7f}",
        "é/€",
        "a \"b\" \\ \u{0}",
    ] {
        let written = serde_json::to_string(s).map(|t| t.len());
        assert_eq!(Ok(quoted_len(s)), written.map_err(|e| e.to_string()), "{s:?}");
    }
}

#[test]
fn an_empty_source_list_reads_as_one() {
    assert_eq!(exact_u64_list("[]").as_deref(), Some(&[][..]));
    assert_eq!(exact_u64_list("[3,5]").as_deref(), Some(&[3, 5][..]));
    assert_eq!(exact_u64_list("[,]"), None);
}
