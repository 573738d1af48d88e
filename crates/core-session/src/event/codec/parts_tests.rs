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
        let general = Event::from_general_parts(seq, 1, t, d.into(), s.as_deref(), o.as_deref());
        prop_assert_eq!(fast, general);
    }
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
