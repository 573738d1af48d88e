//! The hand-written deserializers of `StreamChunk`, `Block` and `Source`
//! (tag first, no buffering) must accept exactly what serde's derive for an
//! internally tagged enum accepts, and read the same values. The derived
//! enums below are the reference.

use palimpsest_core_session::payload::{Block, Source, StreamChunk, Usage};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum RefChunk {
    TextDelta {
        index: u32,
        text: String,
    },
    ReasoningDelta {
        index: u32,
        text: String,
    },
    ToolCallDelta {
        index: u32,
        id: String,
        #[serde(default, deserialize_with = "present")]
        name: Option<String>,
        #[serde(rename = "argumentsDelta")]
        arguments_delta: String,
    },
    Usage(Usage),
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum RefBlock {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
        #[serde(default, deserialize_with = "present")]
        signature: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        #[serde(rename = "isError")]
        is_error: bool,
        content: Vec<RefBlock>,
    },
    Image {
        #[serde(rename = "mediaType")]
        media_type: String,
        #[serde(deserialize_with = "base64")]
        data: String,
    },
}

/// An image's data: base64 as contract note 25 reads it, written apart
/// from the crate's own check.
fn base64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let body = text.trim_end_matches('=');
    let padding = text.len() - body.len();
    let alphabet = body.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/');
    let length = if padding == 0 { body.len() % 4 != 1 } else { padding <= 2 && text.len() % 4 == 0 };
    if alphabet && length {
        Ok(text)
    } else {
        Err(serde::de::Error::custom("not base64"))
    }
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum RefSource {
    User,
    Model {
        provider: String,
        model: String,
    },
    Tool {
        #[serde(rename = "callId")]
        call_id: String,
    },
    Plugin {
        plugin: String,
    },
}

/// An optional field that, when present, must hold a `T`: `null` is not
/// "absent" (as `payload.rs` reads it).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A value for a field: usually of a plausible type, sometimes not.
fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[a-z ]{0,8}".prop_map(Value::from),
        3 => (0u64..300).prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => Just(json!([])),
        1 => Just(json!([{"type": "text", "text": "x"}])),
        1 => Just(json!({"k": 1})),
        1 => Just(json!(-1)),
    ]
}

/// An object built from a tag value and a random subset of keys, in a
/// random order, each with a random value.
fn object(
    tag_key: &'static str,
    tags: &'static [&'static str],
    keys: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let tag = prop_oneof![
        8 => prop::sample::select(tags).prop_map(Value::from),
        1 => Just(Value::from("bogus")),
        1 => Just(Value::from(3)),
    ];
    (
        tag,
        prop::collection::vec((prop::sample::select(keys), field_value()), 0..6),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(move |(tag, fields, at, with_tag)| {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            for (k, v) in fields {
                if !pairs.iter().any(|(p, _)| p == k) {
                    pairs.push((k.to_owned(), v));
                }
            }
            if with_tag {
                let at = at.index(pairs.len() + 1);
                pairs.insert(at, (tag_key.to_owned(), tag));
            }
            // Build the text by hand to keep this order (serde_json maps sort).
            let body: Vec<String> =
                pairs.iter().map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v)).collect();
            format!("{{{}}}", body.join(","))
        })
}

const CHUNK_TAGS: &[&str] = &["text-delta", "reasoning-delta", "tool-call-delta", "usage"];
const CHUNK_KEYS: &[&str] = &[
    "index",
    "text",
    "id",
    "name",
    "argumentsDelta",
    "inputTokens",
    "outputTokens",
    "cachedInputTokens",
    "reasoningTokens",
    "extra",
];
const BLOCK_TAGS: &[&str] = &["text", "reasoning", "tool-call", "tool-result", "image"];
const BLOCK_KEYS: &[&str] = &[
    "text",
    "signature",
    "id",
    "name",
    "arguments",
    "toolCallId",
    "isError",
    "content",
    "mediaType",
    "data",
    "extra",
];
const SOURCE_TAGS: &[&str] = &["user", "model", "tool", "plugin"];
const SOURCE_KEYS: &[&str] = &["provider", "model", "callId", "plugin", "extra"];

fn same<Fast: std::fmt::Debug + for<'a> Deserialize<'a>, Ref: std::fmt::Debug + for<'a> Deserialize<'a>>(
    text: &str,
) -> Result<(), TestCaseError> {
    let fast = serde_json::from_str::<Fast>(text);
    let reference = serde_json::from_str::<Ref>(text);
    prop_assert_eq!(fast.is_ok(), reference.is_ok(), "{}: fast {:?} vs derive {:?}", text, fast, reference);
    if let (Ok(f), Ok(r)) = (fast, reference) {
        // Same values: compare their Debug forms (the variant names match).
        let norm = |s: String| s.replace("Ref", "");
        prop_assert_eq!(norm(format!("{f:?}")), norm(format!("{r:?}")));
    }
    // And from a serde_json::Value, as other callers deserialize.
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        prop_assert_eq!(
            serde_json::from_value::<Fast>(v.clone()).is_ok(),
            serde_json::from_value::<Ref>(v).is_ok(),
            "{}",
            text
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn stream_chunks_accept_what_the_derive_accepts(text in object("type", CHUNK_TAGS, CHUNK_KEYS)) {
        same::<StreamChunk, RefChunk>(&text)?;
    }

    #[test]
    fn blocks_accept_what_the_derive_accepts(text in object("type", BLOCK_TAGS, BLOCK_KEYS)) {
        same::<Block, RefBlock>(&text)?;
    }

    #[test]
    fn sources_accept_what_the_derive_accepts(text in object("kind", SOURCE_TAGS, SOURCE_KEYS)) {
        same::<Source, RefSource>(&text)?;
    }
}

#[test]
fn the_fast_path_and_the_fallback_read_the_same_chunk() {
    let first = r#"{"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{}"}"#;
    let last = r#"{"index":1,"id":"c","argumentsDelta":"{}","type":"tool-call-delta"}"#;
    let a: StreamChunk = serde_json::from_str(first).unwrap();
    let b: StreamChunk = serde_json::from_str(last).unwrap();
    assert_eq!(a, b);
    // Not an object at all.
    assert!(serde_json::from_str::<StreamChunk>(r#"["text-delta", 0, "x"]"#).is_err());
    let dup = r#"{"index":1,"index":2,"type":"text-delta","text":"x"}"#;
    assert!(serde_json::from_str::<StreamChunk>(dup).is_err(), "duplicate fields are refused");
}
