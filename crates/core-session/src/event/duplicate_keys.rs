//! Any valid event with one key named twice, in any object at any depth
//! (the envelope, a core payload, an unknown key's value, opaque plugin
//! data, the `surfaceOp` object), first or last in its object, with the
//! same value or another, is refused as `event-malformed` by every entry
//! point: `Event::from_json`, serde, a JSONL file and `Event::from_parts`.

use proptest::prelude::*;
use serde::de;
use serde_json::{Map, Value};

use super::*;
use crate::error::LoadError;
use crate::jsonl::JsonlLog;

const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;

/// Every event of the valid fixtures.
fn fixture_lines() -> Vec<String> {
    let dir = format!("{}/test_data/ok", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.map(|e| e.path()).unwrap_or_default())
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        lines.extend(text.lines().skip(1).map(str::to_owned));
    }
    lines
}

/// Any JSON value, objects and arrays nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z\"\\\\é]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,3}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid event's canonical line: a fixture's, a generated core payload's
/// (with unknown keys now and then), or a plugin event with any data.
fn valid_line() -> impl Strategy<Value = String> {
    let fixtures = fixture_lines();
    // A generated core payload is valid about one time in ten; rather than
    // generate again, the others stand in for a fixture's line.
    let core = (crate::shape::tests::payload(), any::<bool>(), prop::sample::select(fixtures.clone()))
        .prop_map(|((event_type, data), replace, fixture)| {
            let op = match (event_type.is_surface_eligible(), replace) {
                (false, _) => String::new(),
                (true, false) => r#","surfaceOp":"append""#.to_owned(),
                (true, true) => {
                    r#","sourceEventSeqs":[1,2],"surfaceOp":{"op":"replace","start":1,"end":2}"#.to_owned()
                }
            };
            let line = format!(r#"{{"seq":5,"time":1,"type":"{event_type}","data":{data}{op}}}"#);
            Event::from_json(&line).map_or(fixture, |e| e.to_json())
        });
    let replaces: Vec<String> =
        fixtures.iter().filter(|l| l.contains(r#""op":"replace""#)).cloned().collect();
    let (fixture, replace) = (prop::sample::select(fixtures), prop::sample::select(replaces));
    let plugin =
        any_json().prop_map(|data| format!(r#"{{"seq":5,"time":1,"type":"x/plugin","data":{data}}}"#));
    prop_oneof![1 => fixture, 1 => replace, 2 => core, 1 => plugin]
}

/// Every object of a JSON text that names at least one key: the byte
/// offsets of its `{` and its `}`.
fn objects(json: &str) -> Vec<(usize, usize)> {
    let (mut open, mut found, mut in_string, mut escaped) = (Vec::new(), Vec::new(), false, false);
    for (i, b) in json.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => open.push(i),
            b'}' => {
                let start = open.pop().unwrap_or_default();
                if json[start + 1..i].trim() != "" {
                    found.push((start, i));
                }
            }
            _ => {}
        }
    }
    found
}

/// How the key is named again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Duplicate {
    object: prop::sample::Index,
    /// Whether the object is the one that closes just before the envelope:
    /// the `surfaceOp` object when there is one, else `data` itself.
    outer: bool,
    key: prop::sample::Index,
    first: bool,
    same_value: bool,
}

pub(crate) fn duplicate() -> impl Strategy<Value = Duplicate> {
    (
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.25),
        any::<prop::sample::Index>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(object, outer, key, first, same_value)| Duplicate {
            object,
            outer,
            key,
            first,
            same_value,
        })
}

/// `line` with one key of one of its objects named a second time; the
/// object's span in `line`, and where the extra text went and how long it is.
pub(crate) fn with_duplicate(line: &str, d: Duplicate) -> (String, (usize, usize), usize, usize) {
    let all = objects(line);
    let (start, end) = match all.len() {
        n if d.outer && n >= 2 => all[n - 2],
        n => all[d.object.index(n)],
    };
    let members: Map<String, Value> = serde_json::from_str(&line[start..=end]).unwrap_or_default();
    let (key, value) = members.iter().nth(d.key.index(members.len())).unwrap_or_else(|| panic!("{line}"));
    let value = if d.same_value { value.clone() } else { Value::from("another") };
    let member = format!("{}:{value}", Value::from(key.as_str()));
    let (at, extra) = if d.first { (start + 1, format!("{member},")) } else { (end, format!(",{member}")) };
    let mut out = line.to_owned();
    out.insert_str(at, &extra);
    (out, (start, end), at, extra.len())
}

fn refused_as_malformed<T: std::fmt::Debug>(result: Result<T, AppendError>) -> Result<(), TestCaseError> {
    match result {
        Err(e) => {
            prop_assert_eq!(e.code(), "event-malformed", "{}", e);
            Ok(())
        }
        Ok(event) => Err(TestCaseError::fail(format!("accepted: {event:?}"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn a_key_named_twice_anywhere_is_event_malformed_everywhere(line in valid_line(), d in duplicate()) {
        let event = Event::from_json(&line).map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
        prop_assert_eq!(event.to_json(), line.clone(), "the generated line is canonical");
        let (bad, object, at, len) = with_duplicate(&line, d);
        prop_assert!(serde_json::from_str::<de::IgnoredAny>(&bad).is_ok(), "still JSON: {}", bad);

        refused_as_malformed(Event::from_json(&bad))?;
        prop_assert!(serde_json::from_str::<Event>(&bad).is_err(), "serde accepts {}", bad);
        match JsonlLog::parse(format!("{HEADER}\n{bad}\n").as_bytes()) {
            Err(LoadError::Rule { line: Some(2), error }) => prop_assert_eq!(error.code(), "event-malformed"),
            other => prop_assert!(false, "{}: {:?}", bad, other),
        }

        // The same text as stored columns: `data`, or `surfaceOp` after it.
        let data_at = line.find(",\"data\":").unwrap_or_default() + ",\"data\":".len();
        let data_end = data_at + event.data().len();
        let sources = event.source_event_seqs().map(|s| serde_json::to_string(s).unwrap_or_default());
        let op = event.surface_op().map(|op| serde_json::to_string(&op).unwrap_or_default());
        let parts = if object.0 >= data_at && object.1 < data_end {
            Some((bad[data_at..data_end + len].to_owned(), op))
        } else if object.0 > data_end {
            let op_text = bad[..bad.len() - 1].split_once(",\"surfaceOp\":").map(|(_, t)| t.to_owned());
            prop_assert!(at > data_end && op_text.is_some(), "{}", bad);
            Some((event.data().to_owned(), op_text))
        } else {
            None // The envelope itself: columns have none.
        };
        if let Some((data, op)) = parts {
            let t = event.event_type().as_str();
            refused_as_malformed(Event::from_parts(event.seq(), event.time(), t, data.clone(), sources.as_deref(), op.as_deref()))
                .map_err(|e| TestCaseError::fail(format!("from_parts {data} {op:?}: {e}")))?;
        }
    }
}

/// The generator reaches every kind of place a key can be named twice.
#[test]
fn duplicates_are_generated_in_the_envelope_the_payload_and_the_surface_op() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (lines, duplicates) = (valid_line(), duplicate());
    let (mut envelope, mut data, mut op, mut plugin) = (0, 0, 0, 0);
    for _ in 0..500 {
        let line = lines.new_tree(&mut runner).map(|t| t.current()).unwrap_or_default();
        let d = duplicates.new_tree(&mut runner).map(|t| t.current()).unwrap_or_else(|e| panic!("{e}"));
        let (_, (start, _), _, _) = with_duplicate(&line, d);
        let data_at = line.find(",\"data\":").unwrap_or_default() + 8;
        match start {
            0 => envelope += 1,
            s if line[s..].starts_with("{\"op\":") => op += 1,
            s if s >= data_at && line.contains("x/plugin") => plugin += 1,
            _ => data += 1,
        }
    }
    for (place, n) in [("envelope", envelope), ("data", data), ("surfaceOp", op), ("plugin data", plugin)] {
        assert!(n >= 20, "{place}: {n} of 500");
    }
}

/// The cases of issue 15: a text block that a last-key-wins reader sees as
/// a tool call, and a `source.kind` read two ways; on every path.
#[test]
fn the_issues_parser_differentials_are_refused() {
    let message = |content: &str, source: &str| {
        format!(
            r#"{{"seq":2,"time":1,"type":"assistant/message","data":{{"turn":1,"step":1,"message":{{"id":"a","role":"assistant","content":[{content}],"source":{source}}}}},"surfaceOp":"append"}}"#
        )
    };
    let model = r#"{"kind":"model","provider":"p","model":"m"}"#;
    let lines = [
        message(
            r#"{"type":"text","text":"Sure.","type":"tool-call","id":"c1","name":"rm","arguments":"{}"}"#,
            model,
        ),
        message(
            r#"{"type":"text","text":"Sure."}"#,
            r#"{"kind":"model","provider":"p","model":"m","kind":"tool","callId":"c1"}"#,
        ),
        message(r#"{"type":"text","text":"Sure.","\u0074ype":"tool-call"}"#, model),
    ];
    let valid = message(r#"{"type":"text","text":"Sure."}"#, model);
    assert!(Event::from_json(&valid).is_ok(), "{valid}");
    for line in &lines {
        let err = Event::from_json(line).map(drop).map_err(|e| e.code().to_owned());
        assert_eq!(err, Err("event-malformed".to_owned()), "{line}");
        let data = &line
            [line.find(r#""data":"#).unwrap_or_default() + 7..line.len() - r#","surfaceOp":"append"}"#.len()];
        let err = Event::from_parts(2, 1, "assistant/message", data, None, Some(r#""append""#));
        assert_eq!(
            err.map(drop).map_err(|e| e.code().to_owned()),
            Err("event-malformed".to_owned()),
            "{data}"
        );
    }
}
