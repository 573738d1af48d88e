//! A zero-allocation check of a core payload's shape: the fast path of
//! [`crate::event`]'s payload check.
//!
//! Reading `data` into the owned payload types of [`crate::payload`] copies
//! every string into a fresh `String`, only for it to be dropped: on a load,
//! that was most of the allocator's work. The types here mirror those
//! payloads field for field, with the same serde attributes, but read each
//! string without keeping it ([`AnyStr`]). Only the two ids a `tool/result`
//! must agree on are kept. Before them, the most common payloads are
//! matched as the very text serde writes of them, with no parser
//! ([`plain`]).
//!
//! This is an accelerator, never the judge: [`check`] answering
//! [`Verdict::Unsure`] sends the caller to the owned types, which decide,
//! and word the error. What must hold is the other direction: whatever this
//! accepts, the owned types accept. The tests below check that over
//! generated documents.
//!
//! # Keys named once
//!
//! The mirrors are stricter than the owned types in one way: they refuse
//! any key they do not know (`deny_unknown_fields`), and a tagged object
//! whose tag is not its first key. What they accept was therefore read
//! object by object through serde's derived visitors, each of which refuses
//! a known field named twice, and nothing in it was skipped unread: no
//! object of it names a key twice, and the separate scan of
//! [`crate::unique_keys`] has nothing left to find ([`Verdict::Complete`]).
//! Payloads with unknown keys are still valid; they take the owned path
//! and the scan, as every payload did before. Nor was anything skipped
//! without serde_json's depth limit, which is the contract's
//! ([`crate::event::MAX_NESTING`]): a complete payload is no deeper than
//! the limit either.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::event::EventType;
use crate::payload::{is_base64, only_true, present, Role};
use crate::tagged::tagged_enum;

mod plain;

/// What the fast check knows of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not known to be valid: ask the owned types.
    Unsure,
    /// Valid; whether some object in it names a key twice is not known.
    Valid,
    /// Valid, no deeper than the nesting limit, and every object in it
    /// names each key once: no other check of its text is needed.
    Complete,
}

/// What the fast check knows of `data` as the payload of `event_type`
/// (core types only; [`Verdict::Unsure`] for the others).
pub(crate) fn check(event_type: &EventType, data: &str) -> Verdict {
    fn read<'a, T: Deserialize<'a>>(data: &'a str) -> Option<T> {
        // Like the owned check: `data` must be an object, not a sequence
        // that serde would also read into a struct.
        if !data.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(data).ok()
    }
    let complete = |ok: bool| if ok { Verdict::Complete } else { Verdict::Unsure };
    match event_type {
        // Most events of a log: matched as text, a fixed set of keys each
        // named once, before any parser.
        EventType::AssistantChunk => complete(
            plain::is_plain_text_delta(data)
                || plain::is_plain_usage(data)
                || plain::is_plain_tool_call_delta(data)
                || read::<AssistantChunk>(data).is_some(),
        ),
        // The turn and step markers, matched as text: the owned check (and
        // the key scan after it) cost several times the matching.
        EventType::TurnStart => complete(plain::is_plain_turn_start(data)),
        EventType::StepStart | EventType::StepEnd => complete(plain::is_plain_step(data)),
        EventType::TurnEnd => complete(plain::is_plain_turn_end(data)),
        // Messages and calls as serde writes them are matched as text too
        // (`plain`); the mirrors read the rest.
        EventType::ToolCall => complete(plain::is_plain_tool_call(data) || read::<ToolCall>(data).is_some()),
        EventType::UserMessage => complete(
            plain::is_plain_user_message(data, true)
                || read::<WithMessage>(data).is_some_and(|p| p.message.role == Role::User),
        ),
        EventType::ContextMessage | EventType::SteeringMessage => complete(
            plain::is_plain_user_message(data, false)
                || read::<MessageOnly>(data).is_some_and(|p| p.message.role == Role::User),
        ),
        EventType::AssistantMessage => complete(
            plain::is_plain_assistant_message(data)
                || read::<AssistantMessage>(data).is_some_and(|p| p.message.role == Role::Assistant),
        ),
        EventType::ToolResult => complete(
            plain::is_plain_tool_result(data)
                || read::<ToolResult>(data).is_some_and(|r| {
                    let m = &r.message;
                    match (&m.content, &m.source) {
                        (Blocks::Lone(Block::ToolResult { tool_call_id, .. }), Source::Tool { call_id }) => {
                            m.role == Role::User && tool_call_id == call_id
                        }
                        _ => false,
                    }
                }),
        ),
        // Settings keep unknown keys (flattened), so their keys are not
        // all seen by a derived visitor: valid at best.
        EventType::SessionSettings => {
            if read::<SessionSettings>(data).is_some() {
                Verdict::Valid
            } else {
                Verdict::Unsure
            }
        }
        // The rest hold integers or are rare: the owned check is as cheap.
        _ => Verdict::Unsure,
    }
}

/// Any JSON string, read and dropped without unescaping it: serde_json
/// skips it in place and hands back its raw text, so an escaped string
/// (a text with line breaks, quotes) costs no copy and no allocation.
///
/// Skipping checks every escape but one thing: a `\u` escape's code point
/// (a lone surrogate is refused by the owned types). A raw text with a
/// `\u` in it is therefore read again as a string ([`StrictStr`]): rare,
/// and exactly the owned types' rule.
///
/// Only for a value read straight from the text: inside a `flatten`
/// (which buffers the object first) there is no raw text; use
/// [`StrictStr`] there.
#[derive(Debug)]
struct AnyStr;

impl<'de> Deserialize<'de> for AnyStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyStr, D::Error> {
        let raw = <&'de serde_json::value::RawValue>::deserialize(d)?.get();
        if !raw.starts_with('"') {
            return Err(de::Error::invalid_type(de::Unexpected::Other("a value"), &"a string"));
        }
        if raw.contains("\\u") {
            serde_json::from_str::<StrictStr>(raw).map_err(de::Error::custom)?;
        }
        Ok(AnyStr)
    }
}

/// Any JSON string, unescaped into serde_json's scratch buffer and
/// dropped: for strings inside a `flatten`, and for the rare raw string
/// [`AnyStr`] must read again.
#[derive(Debug)]
struct StrictStr;

impl<'de> Deserialize<'de> for StrictStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StrictStr, D::Error> {
        struct StrictStrVisitor;
        impl Visitor<'_> for StrictStrVisitor {
            type Value = StrictStr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<StrictStr, E> {
                Ok(StrictStr)
            }
        }
        d.deserialize_str(StrictStrVisitor)
    }
}

// Mirrors of `crate::payload`, in the same order, each refusing unknown
// keys (see the module's documentation). Fields that are only checked,
// never read, are named `_` + their key.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    #[serde(rename = "id")]
    _id: AnyStr,
    role: Role,
    content: Blocks,
    source: Source,
}

/// A message's content, each block checked and dropped as read (no
/// `Vec`): only a lone block is kept, since a tool result's must be its
/// message's only block.
#[derive(Debug)]
enum Blocks {
    Lone(Block),
    NoneOrMany,
}

impl<'de> Deserialize<'de> for Blocks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Blocks, D::Error> {
        struct BlocksVisitor;
        impl<'de> Visitor<'de> for BlocksVisitor {
            type Value = Blocks;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of content blocks")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Blocks, A::Error> {
                let Some(first) = seq.next_element::<Block>()? else {
                    return Ok(Blocks::NoneOrMany);
                };
                if seq.next_element::<Block>()?.is_none() {
                    return Ok(Blocks::Lone(first));
                }
                while seq.next_element::<Block>()?.is_some() {}
                Ok(Blocks::NoneOrMany)
            }
        }
        d.deserialize_seq(BlocksVisitor)
    }
}

#[derive(Debug)]
enum Block {
    Text,
    Reasoning,
    ToolCall,
    ToolResult { tool_call_id: String },
    Image,
}

tagged_enum! {
    Block, tag_first "type", "a content block" {
        "text" => |_b: TextBlock| Block::Text,
        "reasoning" => |_b: ReasoningBlock| Block::Reasoning,
        "tool-call" => |_b: ToolCallBlock| Block::ToolCall,
        "tool-result" => |b: ToolResultBlock| Block::ToolResult { tool_call_id: b.tool_call_id },
        "image" => |_b: ImageBlock| Block::Image,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextBlock {
    #[serde(rename = "text")]
    _text: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningBlock {
    #[serde(rename = "text")]
    _text: AnyStr,
    #[serde(rename = "signature", default, deserialize_with = "present")]
    _signature: Option<AnyStr>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallBlock {
    #[serde(rename = "id")]
    _id: AnyStr,
    #[serde(rename = "name")]
    _name: AnyStr,
    #[serde(rename = "arguments")]
    _arguments: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResultBlock {
    #[serde(rename = "toolCallId")]
    tool_call_id: String,
    #[serde(rename = "isError")]
    _is_error: bool,
    #[serde(rename = "content")]
    _content: Blocks,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageBlock {
    #[serde(rename = "mediaType")]
    _media_type: AnyStr,
    #[serde(rename = "data")]
    _data: Base64Str,
}

/// A JSON string holding base64 ([`is_base64`]), read where it lies
/// unless it has escapes (a `\/` is legal JSON in base64 text).
#[derive(Debug)]
struct Base64Str;

impl<'de> Deserialize<'de> for Base64Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Base64Str, D::Error> {
        let raw = <&'de serde_json::value::RawValue>::deserialize(d)?.get();
        let base64 = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(text) if !text.contains('\\') => is_base64(text),
            Some(_) => {
                serde_json::from_str::<String>(raw).map_err(de::Error::custom).map(|t| is_base64(&t))?
            }
            None => return Err(de::Error::invalid_type(de::Unexpected::Other("a value"), &"a string")),
        };
        if base64 {
            Ok(Base64Str)
        } else {
            Err(de::Error::custom("an image block's `data` is not base64"))
        }
    }
}

#[derive(Debug)]
enum Source {
    Other,
    Tool { call_id: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelSource {
    #[serde(rename = "provider")]
    _provider: AnyStr,
    #[serde(rename = "model")]
    _model: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolSource {
    #[serde(rename = "callId")]
    call_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginSource {
    #[serde(rename = "plugin")]
    _plugin: AnyStr,
}

tagged_enum! {
    Source, tag_first "kind", "a message source" {
        "user" => |_s: NoFields| Source::Other,
        "model" => |_s: ModelSource| Source::Other,
        "tool" => |s: ToolSource| Source::Tool { call_id: s.call_id },
        "plugin" => |_s: PluginSource| Source::Other,
    }
}

#[derive(Debug)]
struct StreamChunk;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaChunk {
    #[serde(rename = "index")]
    _index: u32,
    #[serde(rename = "text")]
    _text: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallDeltaChunk {
    #[serde(rename = "index")]
    _index: u32,
    #[serde(rename = "id")]
    _id: AnyStr,
    #[serde(rename = "name", default, deserialize_with = "present")]
    _name: Option<AnyStr>,
    #[serde(rename = "argumentsDelta")]
    _arguments_delta: AnyStr,
}

tagged_enum! {
    StreamChunk, tag_first "type", "a stream chunk" {
        "text-delta" => |_c: DeltaChunk| StreamChunk,
        "reasoning-delta" => |_c: DeltaChunk| StreamChunk,
        "tool-call-delta" => |_c: ToolCallDeltaChunk| StreamChunk,
        "usage" => |_u: Usage| StreamChunk,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Usage {
    #[serde(rename = "inputTokens")]
    _input_tokens: u64,
    #[serde(rename = "outputTokens")]
    _output_tokens: u64,
    #[serde(rename = "cachedInputTokens", default, deserialize_with = "present")]
    _cached_input_tokens: Option<u64>,
    #[serde(rename = "reasoningTokens", default, deserialize_with = "present")]
    _reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolError {
    #[serde(rename = "name")]
    _name: AnyStr,
    #[serde(rename = "code")]
    _code: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WithMessage {
    #[serde(rename = "turn", default, deserialize_with = "present")]
    _turn: Option<u64>,
    message: Message,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageOnly {
    message: Message,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssistantChunk {
    #[serde(rename = "turn")]
    _turn: u64,
    #[serde(rename = "step")]
    _step: u64,
    #[serde(rename = "chunk")]
    _chunk: StreamChunk,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssistantMessage {
    #[serde(rename = "turn")]
    _turn: u64,
    #[serde(rename = "step")]
    _step: u64,
    message: Message,
    #[serde(rename = "usage", default, deserialize_with = "present")]
    _usage: Option<Usage>,
    #[serde(rename = "interrupted", default, deserialize_with = "only_true")]
    _interrupted: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    #[serde(rename = "turn")]
    _turn: u64,
    #[serde(rename = "step")]
    _step: u64,
    #[serde(rename = "callId")]
    _call_id: AnyStr,
    #[serde(rename = "name")]
    _name: AnyStr,
    #[serde(rename = "arguments")]
    _arguments: AnyStr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResult {
    #[serde(rename = "turn")]
    _turn: u64,
    #[serde(rename = "step")]
    _step: u64,
    message: Message,
    #[serde(rename = "error", default, deserialize_with = "present")]
    _error: Option<ToolError>,
}

#[derive(Deserialize)]
struct SessionSettings {
    #[serde(rename = "settings")]
    _settings: Settings,
}

// `flatten` makes serde read these two as maps only, as it does the owned
// types (which flatten their unknown keys), never as sequences.
#[derive(Deserialize)]
struct Settings {
    #[serde(rename = "systemPrompt", default, deserialize_with = "present")]
    _system_prompt: Option<StrictStr>,
    #[serde(rename = "model", default, deserialize_with = "present")]
    _model: Option<StrictStr>,
    #[serde(rename = "provider", default, deserialize_with = "present")]
    _provider: Option<StrictStr>,
    #[serde(rename = "tools", default, deserialize_with = "present")]
    _tools: Option<Vec<OfferedTool>>,
    #[serde(rename = "contextBudget", default, deserialize_with = "present")]
    _context_budget: Option<u64>,
    #[serde(rename = "params", default, deserialize_with = "present")]
    _params: Option<AnyMap>,
    #[serde(flatten)]
    _extra: AnyMap,
}

#[derive(Deserialize)]
struct OfferedTool {
    #[serde(rename = "name")]
    _name: StrictStr,
    #[serde(rename = "description", default, deserialize_with = "present")]
    _description: Option<StrictStr>,
    #[serde(rename = "parameters", default, deserialize_with = "present")]
    _parameters: Option<de::IgnoredAny>,
    #[serde(flatten)]
    _extra: AnyMap,
}

/// Any JSON object, read and dropped.
struct AnyMap;

impl<'de> Deserialize<'de> for AnyMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyMap, D::Error> {
        struct AnyMapVisitor;
        impl<'de> Visitor<'de> for AnyMapVisitor {
            type Value = AnyMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<AnyMap, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(AnyMap)
            }
        }
        d.deserialize_map(AnyMapVisitor)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Whatever the fast check accepts, the owned payload types accept:
    //! checked over generated documents that are mostly plausible (so both
    //! paths are taken) and sometimes wrong in one place.

    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;
    use crate::event::check_owned_payload;

    /// Call ids: they agree more often than not.
    const IDS: &[&str] = &["c1", "c1", "c1", "c2"];

    /// A plausible value for `key`, or (one time in seventeen) a wrong one.
    fn value_for(key: &'static str, depth: u32) -> BoxedStrategy<Value> {
        let junk = prop_oneof![
            Just(Value::Null),
            Just(json!(7)),
            Just(json!(-1)),
            Just(json!("s")),
            Just(json!(true)),
            Just(json!([])),
            Just(json!({})),
        ];
        let plausible: BoxedStrategy<Value> = match key {
            "turn" | "step" | "index" | "inputTokens" | "outputTokens" | "contextBudget" => {
                (0u64..4).prop_map(Value::from).boxed()
            }
            "interrupted" | "isError" => any::<bool>().prop_map(Value::from).boxed(),
            "role" => prop::sample::select(&["user", "assistant"][..]).prop_map(Value::from).boxed(),
            "callId" | "toolCallId" => prop::sample::select(IDS).prop_map(Value::from).boxed(),
            "message" if depth > 0 => object(MESSAGE, depth - 1),
            "content" if depth > 0 => prop_oneof![
                1 => prop::collection::vec(block(depth - 1), 0..3).prop_map(Value::from),
                // What a tool/result needs: exactly one tool-result block.
                2 => prop_oneof![
                    1 => tagged("type", &["tool-result"], BLOCK, depth - 1),
                    3 => tagged("type", &["tool-result"], &["toolCallId", "isError", "content"], depth - 1),
                ]
                .prop_map(|b| json!([b])),
            ]
            .boxed(),
            "content" => Just(json!([])).boxed(),
            // Weighted towards what a tool/result needs.
            "source" => prop_oneof![
                1 => tagged("kind", &["user", "model", "tool", "tool", "tool", "plugin"], SOURCE, depth),
                3 => variant("kind", SOURCES, depth),
            ]
            .boxed(),
            "chunk" => prop_oneof![
                1 => tagged("type", &["text-delta", "reasoning-delta", "tool-call-delta", "usage"], CHUNK, depth),
                3 => variant("type", CHUNKS, depth),
            ]
            .boxed(),
            "usage" => object(&["inputTokens", "outputTokens"], depth),
            "settings" if depth > 0 => object(SETTINGS, depth - 1),
            "tools" if depth > 0 => {
                prop::collection::vec(object(TOOL, depth - 1), 0..3).prop_map(Value::from).boxed()
            }
            "params" => object(&["temperature", "maxTokens"], depth),
            "parameters" => {
                prop_oneof![Just(Value::Null), Just(json!({"type": "object"})), Just(json!([1]))].boxed()
            }
            "error" => object(&["name", "code"], depth),
            _ => "[a-z\\\\\"]{0,4}".prop_map(Value::from).boxed(),
        };
        prop_oneof![16 => plausible, 1 => junk].boxed()
    }

    /// An object with a random subset of `keys` (plus sometimes an unknown
    /// one), each with a value for it.
    fn object(keys: &'static [&'static str], depth: u32) -> BoxedStrategy<Value> {
        let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = keys
            .iter()
            .chain(&["extra"])
            .map(|&k| {
                let keep = if k == "extra" { 0.1 } else { 0.96 };
                prop::option::weighted(keep, value_for(k, depth))
                    .prop_map(move |v| v.map(|v| (k.to_owned(), v)))
                    .boxed()
            })
            .collect();
        fields.prop_map(|fs| Value::Object(fs.into_iter().flatten().collect())).boxed()
    }

    fn tagged(
        tag: &'static str,
        tags: &'static [&'static str],
        keys: &'static [&'static str],
        depth: u32,
    ) -> BoxedStrategy<Value> {
        let with_tag = prop::option::weighted(0.95, prop::bool::weighted(0.85));
        (prop::sample::select(tags), object(keys, depth), with_tag)
            .prop_map(move |(t, mut o, with_tag)| {
                match with_tag {
                    // As canonical writers put it, and the strict mirrors
                    // want it: first (see `text`).
                    Some(true) => o[format!("{FIRST}{tag}")] = Value::from(t),
                    // Where the map sorts it.
                    Some(false) => o[tag] = Value::from(t),
                    None => {}
                }
                o
            })
            .boxed()
    }

    /// A key starting with this sorts first in a `serde_json` map, which
    /// otherwise sorts keys, and loses it in [`text`].
    const FIRST: char = '\u{1}';

    /// A generated document as text, its first-sorted keys renamed.
    fn text(v: &Value) -> String {
        v.to_string().replace("\"\\u0001", "\"")
    }

    /// A tagged object with the keys of its tag's variant (which the strict
    /// mirrors may find complete), where [`tagged`] draws from the keys of
    /// every variant (which they seldom do).
    fn variant(
        tag: &'static str,
        variants: &'static [(&'static str, &'static [&'static str])],
        depth: u32,
    ) -> BoxedStrategy<Value> {
        (0..variants.len())
            .prop_flat_map(move |i| {
                let (name, keys) = &variants[i];
                tagged(tag, std::slice::from_ref(name), keys, depth)
            })
            .boxed()
    }

    fn block(depth: u32) -> BoxedStrategy<Value> {
        prop_oneof![
            1 => tagged("type", &["text", "reasoning", "tool-call", "tool-result", "image"], BLOCK, depth),
            3 => variant("type", BLOCKS, depth),
        ]
        .boxed()
    }

    const BLOCKS: &[(&str, &[&str])] = &[
        ("text", &["text"]),
        ("reasoning", &["text", "signature"]),
        ("tool-call", &["id", "name", "arguments"]),
        ("tool-result", &["toolCallId", "isError", "content"]),
        ("image", &["mediaType", "data"]),
    ];
    /// Weighted towards what a tool/result needs, as in `value_for`.
    const SOURCES: &[(&str, &[&str])] = &[
        ("user", &[]),
        ("model", &["provider", "model"]),
        ("tool", &["callId"]),
        ("tool", &["callId"]),
        ("tool", &["callId"]),
        ("plugin", &["plugin"]),
    ];
    const CHUNKS: &[(&str, &[&str])] = &[
        ("text-delta", &["index", "text"]),
        ("reasoning-delta", &["index", "text"]),
        ("tool-call-delta", &["index", "id", "name", "argumentsDelta"]),
        ("usage", &["inputTokens", "outputTokens"]),
    ];

    const MESSAGE: &[&str] = &["id", "role", "content", "source"];
    const SETTINGS: &[&str] = &["systemPrompt", "model", "provider", "tools", "contextBudget", "params"];
    const TOOL: &[&str] = &["name", "description", "parameters"];
    const SOURCE: &[&str] = &["provider", "model", "callId", "plugin"];
    const CHUNK: &[&str] = &["index", "text", "id", "name", "argumentsDelta", "inputTokens", "outputTokens"];
    const BLOCK: &[&str] = &[
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
    ];

    /// A core type and a payload for it: mostly plausible, now and then
    /// wrong in one place (also used by the duplicate-key tests of
    /// [`crate::event`]).
    pub(crate) fn payload() -> impl Strategy<Value = (EventType, String)> {
        let types: &[(&str, &'static [&'static str])] = &[
            ("assistant/chunk", &["turn", "step", "chunk"]),
            ("tool/call", &["turn", "step", "callId", "name", "arguments"]),
            ("user/message", &["turn", "message"]),
            ("context/message", &["message"]),
            ("steering/message", &["message"]),
            ("assistant/message", &["turn", "step", "message", "usage", "interrupted"]),
            ("tool/result", &["turn", "step", "message", "error"]),
        ];
        prop::sample::select(types).prop_flat_map(|(name, keys)| {
            (object(keys, 2), prop::bool::weighted(0.2)).prop_map(move |(v, as_array)| {
                // Now and then the same fields as an array, which serde
                // would read into a struct.
                let text = match (as_array, &v) {
                    (true, Value::Object(o)) => text(&Value::from(o.values().cloned().collect::<Vec<_>>())),
                    _ => text(&v),
                };
                (EventType::parse(name), text)
            })
        })
    }

    /// `session/settings` payloads: their own generator, so that the
    /// documents generated for the other types stay what they were.
    fn settings_payload() -> impl Strategy<Value = String> {
        (object(&["settings"], 2), any::<bool>()).prop_map(|(v, as_array)| match (as_array, &v) {
            (true, Value::Object(o)) => text(&Value::from(o.values().cloned().collect::<Vec<_>>())),
            _ => text(&v),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn what_the_fast_check_accepts_for_settings_the_owned_types_accept(text in settings_payload()) {
            let owned = check_owned_payload(0, &EventType::SessionSettings, &text);
            let verdict = check(&EventType::SessionSettings, &text);
            // Settings flatten their unknown keys: never complete.
            prop_assert_ne!(verdict, Verdict::Complete);
            if verdict == Verdict::Valid {
                prop_assert!(owned.is_ok(), "{}: fast accepts, owned says {:?}", text, owned);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        #[test]
        fn what_the_fast_check_accepts_the_owned_types_accept((event_type, text) in payload()) {
            let owned = check_owned_payload(0, &event_type, &text);
            if check(&event_type, &text) != Verdict::Unsure {
                prop_assert!(owned.is_ok(), "{} {}: fast accepts, owned says {:?}", event_type, text, owned);
            }
        }

        /// A complete payload with one key named again, anywhere in it, in
        /// any spelling serde reads as that key, is complete no more.
        #[test]
        fn a_key_named_twice_makes_a_payload_incomplete(
            (event_type, text) in payload(),
            d in crate::event::duplicate_keys::duplicate(),
            escaped in any::<bool>(),
        ) {
            if check(&event_type, &text) != Verdict::Complete {
                return Ok(());
            }
            let (bad, _, at, len) = crate::event::duplicate_keys::with_duplicate(&text, d);
            // The extra member's key, its first letter as a `\u` escape.
            let bad = if escaped {
                let key_at = at + usize::from(bad.as_bytes()[at] == b',') + 1;
                let first = bad.as_bytes()[key_at];
                format!("{}\\u{:04x}{}", &bad[..key_at], first, &bad[key_at + 1..])
            } else {
                bad
            };
            prop_assert!(crate::unique_keys::duplicate_key(&bad).is_some(), "{} ({} at {})", bad, len, at);
            prop_assert_ne!(check(&event_type, &bad), Verdict::Complete, "{}", bad);
        }
    }

    /// A complete payload is within the nesting limit: tool results nested
    /// in tool results up to and past it are complete only within it.
    #[test]
    fn a_complete_payload_is_no_deeper_than_the_limit() {
        use crate::event::MAX_NESTING;
        let mut complete_at_limit = false;
        for levels in 55..70 {
            let mut block = r#"{"type":"text","text":"t"}"#.to_owned();
            for _ in 0..levels {
                block = format!(
                    r#"{{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{block}]}}"#
                );
            }
            let text = format!(
                r#"{{"turn":1,"step":1,"message":{{"id":"m","role":"user","content":[{block}],"source":{{"kind":"tool","callId":"c1"}}}}}}"#
            );
            // No bracket in a string here: the depth is the brackets open.
            let depth = text
                .bytes()
                .scan(0usize, |open, b| {
                    match b {
                        b'[' | b'{' => *open += 1,
                        b']' | b'}' => *open -= 1,
                        _ => {}
                    }
                    Some(*open)
                })
                .max()
                .unwrap_or_default();
            let verdict = check(&EventType::ToolResult, &text);
            if verdict == Verdict::Complete {
                assert!(depth <= MAX_NESTING, "depth {depth} is complete");
                complete_at_limit |= depth + 2 > MAX_NESTING;
            } else {
                assert!(depth > MAX_NESTING, "depth {depth} is {verdict:?}");
            }
        }
        assert!(complete_at_limit, "no payload within two levels of the limit was complete");
    }

    /// `seed` with each edit made in turn: at a position (moved back to a
    /// character's start), a character removed or a piece inserted.
    pub(super) fn edited(seed: &str, edits: Vec<(prop::sample::Index, &str, bool)>) -> String {
        let mut text = seed.to_owned();
        for (at, piece, remove) in edits {
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            if remove && i < text.len() {
                text.remove(i);
            } else {
                text.insert_str(i, piece);
            }
        }
        text
    }

    /// Deltas as serde writes them, text of any characters, then edited.
    fn delta() -> impl Strategy<Value = (String, String)> {
        let chunk = (0u64..3, 0u64..300, any::<bool>(), 0u32..5, ".{0,12}").prop_map(
            |(turn, step, reasoning, index, text)| {
                let chunk = if reasoning {
                    crate::payload::StreamChunk::ReasoningDelta { index, text }
                } else {
                    crate::payload::StreamChunk::TextDelta { index, text }
                };
                serde_json::to_string(&crate::payload::AssistantChunk { turn, step, chunk }).unwrap()
            },
        );
        const PIECES: &[&str] = &["\"", "\\", "}", "0", "-", "1.5", ",\"x\":1", "\u{1}", " ", "99999999999"];
        let edit = (any::<prop::sample::Index>(), prop::sample::select(PIECES), any::<bool>());
        (chunk, prop::collection::vec(edit, 0..2)).prop_map(|(seed, edits)| {
            let text = edited(&seed, edits);
            (seed, text)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        #[test]
        fn a_plain_delta_is_one_the_owned_types_accept((seed, text) in delta()) {
            if plain::is_plain_text_delta(&text) {
                let owned = check_owned_payload(0, &EventType::AssistantChunk, &text);
                prop_assert!(owned.is_ok(), "{}: {:?}", text, owned);
            }
            // And the fast path is taken for what serde writes, `\u`
            // escapes aside.
            if !seed.contains("\\u") {
                prop_assert!(plain::is_plain_text_delta(&seed), "{}", seed);
            }
        }
    }

    /// Turn and step markers and usage chunks as serde writes them, of
    /// any integers, then edited as the deltas are.
    fn marker() -> impl Strategy<Value = (EventType, String, String)> {
        use crate::payload::{AssistantChunk, StepEnd, StepStart, TurnEnd, TurnEndReason, TurnStart, Usage};
        let n = prop_oneof![0u64..5, any::<u64>()];
        let maybe = prop::option::of(n.clone());
        let reason = prop::sample::select(&[0u8, 1, 2, 3, 4][..]);
        (0u8..5, n.clone(), n.clone(), n.clone(), maybe.clone(), maybe, reason).prop_flat_map(
            |(kind, turn, step, tokens, cached, reasoning, why)| {
                let (event_type, seed) = match kind {
                    0 => ("turn/start", serde_json::to_string(&TurnStart { turn })),
                    1 => ("step/start", serde_json::to_string(&StepStart { turn, step })),
                    2 => ("step/end", serde_json::to_string(&StepEnd { turn, step })),
                    3 => {
                        let reason = match why {
                            0 => TurnEndReason::Completed,
                            1 => TurnEndReason::MaxTokens,
                            2 => TurnEndReason::Interrupted,
                            _ => TurnEndReason::Aborted { reason: "stop".into() },
                        };
                        ("turn/end", serde_json::to_string(&TurnEnd { turn, reason }))
                    }
                    _ => {
                        let usage = Usage {
                            input_tokens: tokens,
                            output_tokens: step,
                            cached_input_tokens: cached,
                            reasoning_tokens: reasoning,
                        };
                        let chunk = crate::payload::StreamChunk::Usage(usage);
                        ("assistant/chunk", serde_json::to_string(&AssistantChunk { turn, step, chunk }))
                    }
                };
                let seed = seed.unwrap();
                const PIECES: &[&str] = &[
                    "\"",
                    "}",
                    "{",
                    "0",
                    "-",
                    "1.5",
                    "e3",
                    ",\"x\":1",
                    ",\"turn\":1",
                    " ",
                    "99999999999999999999",
                ];
                let edit = (any::<prop::sample::Index>(), prop::sample::select(PIECES), any::<bool>());
                prop::collection::vec(edit, 0..2).prop_map(move |edits| {
                    let text = edited(&seed, edits);
                    (EventType::parse(event_type), seed.clone(), text)
                })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// What the text matchers accept, the owned types accept and no key
        /// is named twice; and what serde writes of the plain forms is
        /// matched.
        #[test]
        fn a_plain_marker_is_one_the_owned_types_accept((event_type, seed, text) in marker()) {
            if check(&event_type, &text) == Verdict::Complete {
                let owned = check_owned_payload(0, &event_type, &text);
                prop_assert!(owned.is_ok(), "{} {}: {:?}", event_type, text, owned);
                prop_assert!(crate::unique_keys::duplicate_key(&text).is_none(), "{}", text);
            }
            if !seed.contains("aborted") {
                prop_assert_eq!(check(&event_type, &seed), Verdict::Complete, "{}", seed);
            }
        }
    }

    /// The generator reaches both answers for every type it covers, so the
    /// property above is not vacuous.
    #[test]
    fn the_generated_documents_are_accepted_and_refused() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mut seen = std::collections::BTreeMap::<String, (usize, usize)>::new();
        for _ in 0..8000 {
            let (event_type, text) = payload().new_tree(&mut runner).unwrap().current();
            let entry = seen.entry(event_type.to_string()).or_default();
            match check(&event_type, &text) {
                Verdict::Complete => entry.0 += 1,
                Verdict::Unsure => entry.1 += 1,
                Verdict::Valid => panic!("{event_type}: valid but not complete: {text}"),
            }
        }
        assert_eq!(seen.len(), 7, "{seen:?}");
        // A complete tool/result needs the most to go right (one block,
        // ids that agree, no unknown key in five objects): the rarest.
        for (name, (yes, no)) in &seen {
            assert!(*yes >= 5 && *no >= 10, "{name}: complete {yes}, unsure {no}");
        }
        let (mut yes, mut no) = (0, 0);
        for _ in 0..1000 {
            let text = settings_payload().new_tree(&mut runner).unwrap().current();
            if check(&EventType::SessionSettings, &text) == Verdict::Valid {
                yes += 1;
            } else {
                no += 1;
            }
        }
        assert!(yes >= 10 && no >= 10, "session/settings: accepted {yes}, refused {no}");
    }

    /// Strings are skipped, not unescaped; a `\u` escape is the one thing
    /// skipping does not judge, so a lone surrogate (which the owned types
    /// refuse) must not pass, while a pair, and every other escape, does.
    #[test]
    fn escaped_strings_are_judged_as_the_owned_types_judge_them() {
        let cases = [
            (
                r#"{"turn":1,"step":0,"chunk":{"type":"text-delta","index":0,"text":"a\nb \"q\" \\ \/ \t"}}"#,
                true,
            ),
            (
                r#"{"turn":1,"step":0,"chunk":{"type":"text-delta","index":0,"text":"\ud83d\ude00 \u00e9"}}"#,
                true,
            ),
            (r#"{"turn":1,"step":0,"chunk":{"type":"text-delta","index":0,"text":"\ud800"}}"#, false),
            (r#"{"turn":1,"step":0,"chunk":{"type":"text-delta","index":0,"text":"x\ude00y"}}"#, false),
            (r#"{"turn":1,"step":0,"chunk":{"type":"text-delta","index":0,"text":7}}"#, false),
            (r#"{"turn":1,"step":0,"callId":"c\u0031","name":"n","arguments":"{\"a\":\"\ud800\"}"}"#, false),
            (r#"{"turn":1,"step":0,"callId":"c\u0031","name":"n","arguments":"{\"a\":\"\\ud800\"}"}"#, true),
        ];
        for (text, valid) in cases {
            let event_type =
                if text.contains("callId") { EventType::ToolCall } else { EventType::AssistantChunk };
            let owned = check_owned_payload(0, &event_type, text);
            assert_eq!(owned.is_ok(), valid, "{text}: {owned:?}");
            let expected = if valid { Verdict::Complete } else { Verdict::Unsure };
            assert_eq!(check(&event_type, text), expected, "{text}");
        }
    }

    /// An optional key of a core payload present as `null` is not "absent"
    /// (contract sections 1.1 and 1.2): the owned types refuse it with
    /// `event-malformed`, and the fast check does not accept it (it sends
    /// it to them). Without the key, both accept it, the fast check whole.
    #[test]
    fn a_null_optional_payload_key_is_refused_by_both_paths() {
        for (event_type, text, member) in null_optional_cases() {
            let (null, absent) = null_and_absent(text, member);
            let owned = check_owned_payload(0, &event_type, &null);
            assert_eq!(owned.as_ref().map_err(|e| e.code()), Err("event-malformed"), "{event_type} {null}");
            assert_eq!(check(&event_type, &null), Verdict::Unsure, "{event_type} {null}");
            for text in [text.to_owned(), absent] {
                assert!(check_owned_payload(0, &event_type, &text).is_ok(), "{event_type} {text}");
                assert_eq!(check(&event_type, &text), Verdict::Complete, "{event_type} {text}");
            }
        }
    }

    #[test]
    fn interrupted_is_only_true_and_image_data_only_base64_on_both_paths() {
        const ASSISTANT: &str = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"interrupted":INTERRUPTED}"#;
        const USER: &str = r#"{"message":{"id":"u","role":"user","content":[{"type":"image","mediaType":"image/png","data":DATA}],"source":{"kind":"user"}}}"#;
        const RESULT: &str = r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"image","mediaType":"image/png","data":DATA}]}],"source":{"kind":"tool","callId":"c1"}}}"#;
        let judge = |event_type: &EventType, text: &str| {
            let owned = check_owned_payload(0, event_type, text).map_err(|e| e.code().to_owned());
            let fast = check(event_type, text);
            // The fast path never passes what the owned types refuse.
            assert!(owned.is_ok() || fast != Verdict::Complete, "{event_type} {text}");
            owned.is_ok()
        };
        let assistant = |v: &str| ASSISTANT.replace("INTERRUPTED", v);
        assert!(judge(&EventType::AssistantMessage, &assistant("true")));
        assert_eq!(check(&EventType::AssistantMessage, &assistant("true")), Verdict::Complete);
        for refused in ["false", "null", "1", "\"true\""] {
            assert!(!judge(&EventType::AssistantMessage, &assistant(refused)), "interrupted {refused}");
        }
        let accepted = [
            r#""""#,
            r#""aGk=""#,
            r#""aGk""#,
            r#""aGVsbG8gd29ybGQ=""#,
            r#""AAEC+/9=""#,
            r#""ab\/c""#,
            r#""YQ==""#,
        ];
        let refused = [
            r#""!!!not base64""#,
            r#""aGk= ""#,
            r#""aG k=""#,
            r#""a""#,
            r#""a===""#,
            r#""aGk=x""#,
            r#""ab-_""#,
            r#""data:image/png;base64,aGk=""#,
            r#""=""#,
            r#""aGk\n""#,
            "1",
        ];
        for template in [USER, RESULT] {
            let event_type = if template == USER { EventType::UserMessage } else { EventType::ToolResult };
            for data in accepted {
                let text = template.replace("DATA", data);
                assert!(judge(&event_type, &text), "{event_type} {text}");
                assert_eq!(check(&event_type, &text), Verdict::Complete, "{event_type} {text}");
            }
            for data in refused {
                assert!(!judge(&event_type, &template.replace("DATA", data)), "{event_type} data {data}");
            }
        }
    }

    /// Core payloads, each with one optional member (`"key":value`, as it
    /// stands in the text) to write as `null` or leave out.
    fn null_optional_cases() -> Vec<(EventType, &'static str, &'static str)> {
        const USER: &str = r#"{"turn":1,"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}"#;
        const ASSISTANT: &str = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"reasoning","text":"hm","signature":"sig"},{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":3,"outputTokens":2,"cachedInputTokens":1,"reasoningTokens":4},"interrupted":true}"#;
        const RESULT: &str = r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":true,"content":[{"type":"reasoning","text":"x","signature":"sig"}]}],"source":{"kind":"tool","callId":"c1"}},"error":{"name":"E","code":"C"}}"#;
        const DELTA: &str = r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c1","name":"read","argumentsDelta":"{"}}"#;
        const USAGE_CHUNK: &str = r#"{"turn":1,"step":1,"chunk":{"type":"usage","inputTokens":3,"outputTokens":2,"cachedInputTokens":1,"reasoningTokens":4}}"#;
        vec![
            (EventType::UserMessage, USER, r#""turn":1"#),
            (EventType::AssistantMessage, ASSISTANT, r#""signature":"sig""#),
            (
                EventType::AssistantMessage,
                ASSISTANT,
                r#""usage":{"inputTokens":3,"outputTokens":2,"cachedInputTokens":1,"reasoningTokens":4}"#,
            ),
            (EventType::AssistantMessage, ASSISTANT, r#""cachedInputTokens":1"#),
            (EventType::AssistantMessage, ASSISTANT, r#""reasoningTokens":4"#),
            (EventType::AssistantMessage, ASSISTANT, r#""interrupted":true"#),
            (EventType::ToolResult, RESULT, r#""signature":"sig""#),
            (EventType::ToolResult, RESULT, r#""error":{"name":"E","code":"C"}"#),
            (EventType::AssistantChunk, DELTA, r#""name":"read""#),
            (EventType::AssistantChunk, USAGE_CHUNK, r#""cachedInputTokens":1"#),
            (EventType::AssistantChunk, USAGE_CHUNK, r#""reasoningTokens":4"#),
        ]
    }

    /// `text` with `member` (found once in it) written as `null`, and left out.
    fn null_and_absent(text: &str, member: &str) -> (String, String) {
        assert_eq!(text.matches(member).count(), 1, "{member} in {text}");
        let key = &member[..member.find(':').unwrap()];
        let null = text.replace(member, &format!("{key}:null"));
        let absent = if text.contains(&format!(",{member}")) {
            text.replace(&format!(",{member}"), "")
        } else {
            text.replace(&format!("{member},"), "")
        };
        (null, absent)
    }
}
