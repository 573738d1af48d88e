//! Payloads matched as the text serde writes them, before any parser:
//! the turn and step markers, the chunks of `assistant/chunk`,
//! `tool/result`, `assistant/message`, the three user-side messages and
//! `tool/call`.
//!
//! Chunks and markers are most of a log's events. The messages and calls are a
//! seventh of the benchmark workload's events but most of its other
//! bytes, and reading them through serde's visitors was a third of a
//! load's decoding (docs/performance.md, eighteenth session): thousands
//! of instructions each besides their strings. A payload written exactly
//! as [`crate::payload`]'s types serialize (their keys in their order,
//! each once, no whitespace) is matched here in one pass.
//!
//! Like the parent module, this is an accelerator, never the judge:
//! `false` sends the payload to the strict mirrors, then
//! to the owned types, which decide and word the error. Anything written
//! another way answers `false`: keys in another order or named twice, an
//! image block (its data must be base64), anything but text blocks in a
//! tool result's content, a `\u` escape (a lone surrogate is refused by
//! the owned types, which unescape it). What is matched is valid, names no
//! key twice and is a few levels deep, so its verdict is complete.

use crate::event::leading_u64;

/// The call ids of a message that a tool result must agree on, as written.
struct CallIds<'a> {
    /// Its tool-result block's, when that is its only block.
    lone_result: Option<&'a str>,
    /// Its source's, when a tool's.
    source: Option<&'a str>,
}

/// A cursor over a payload's text, each step matching what serde writes
/// there or answering `None` (and the payload is not plain).
struct Plain<'a> {
    rest: &'a str,
}

impl<'a> Plain<'a> {
    /// Steps over `text`, which must come next.
    fn lit(&mut self, text: &str) -> Option<()> {
        self.rest = self.rest.strip_prefix(text)?;
        Some(())
    }

    /// Whether `text` comes next, stepping over it if so.
    fn eat(&mut self, text: &str) -> bool {
        self.lit(text).is_some()
    }

    /// A JSON integer in `0..=u64::MAX`, as serde writes one.
    fn int(&mut self) -> Option<u64> {
        let (n, rest) = leading_u64(self.rest)?;
        self.rest = rest;
        Some(n)
    }

    /// `true` or `false`.
    fn boolean(&mut self) -> Option<()> {
        (self.eat("true") || self.eat("false")).then_some(())
    }

    /// A JSON string serde_json reads as one (no control byte in it, each
    /// escape one it knows, no `\u`); its text between the quotes, escapes
    /// as written. Two strings of equal text are equal; two of different
    /// text may still be equal unescaped (`"a\/b"`, `"a/b"`), which only
    /// makes a payload not plain.
    fn string(&mut self) -> Option<&'a str> {
        let body = self.rest.strip_prefix('"')?;
        let bytes = body.as_bytes();
        let mut at = 0;
        loop {
            let stop = at + memchr::memchr2(b'"', b'\\', &bytes[at..])?;
            // Branch-free over the run, so that it vectorizes: strings are
            // most of a message's bytes.
            if bytes[at..stop].iter().fold(0u8, |any, &b| any | u8::from(b < 0x20)) != 0 {
                return None;
            }
            if bytes[stop] == b'"' {
                self.rest = &body[stop + 1..];
                return Some(&body[..stop]);
            }
            match bytes.get(stop + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at = stop + 2,
                _ => return None,
            }
        }
    }

    /// `[` blocks `]`: the call id of its tool-result block when that is
    /// its only block.
    fn blocks(&mut self) -> Option<Option<&'a str>> {
        self.lit("[")?;
        let (mut count, mut result) = (0, None);
        if !self.eat("]") {
            loop {
                result = self.block()?;
                count += 1;
                if !self.eat(",") {
                    break;
                }
            }
            self.lit("]")?;
        }
        Some(result.filter(|_| count == 1))
    }

    /// One content block but an image; `Some(call id)` for a tool result,
    /// whose own content may hold text blocks only.
    fn block(&mut self) -> Option<Option<&'a str>> {
        self.lit("{\"type\":\"")?;
        if self.eat("text\",\"text\":") {
            self.string()?;
        } else if self.eat("reasoning\",\"text\":") {
            self.string()?;
            if self.eat(",\"signature\":") {
                self.string()?;
            }
        } else if self.eat("tool-call\",\"id\":") {
            self.string()?;
            self.lit(",\"name\":")?;
            self.string()?;
            self.lit(",\"arguments\":")?;
            self.string()?;
        } else {
            self.lit("tool-result\",\"toolCallId\":")?;
            let call_id = self.string()?;
            self.lit(",\"isError\":")?;
            self.boolean()?;
            self.lit(",\"content\":[")?;
            if !self.eat("]") {
                loop {
                    self.lit("{\"type\":\"text\",\"text\":")?;
                    self.string()?;
                    self.lit("}")?;
                    if !self.eat(",") {
                        break;
                    }
                }
                self.lit("]")?;
            }
            self.lit("}")?;
            return Some(Some(call_id));
        }
        self.lit("}")?;
        Some(None)
    }

    /// A message's source; `Some(call id)` for a tool's.
    fn source(&mut self) -> Option<Option<&'a str>> {
        self.lit("{\"kind\":\"")?;
        if self.eat("user\"}") {
            return Some(None);
        }
        if self.eat("tool\",\"callId\":") {
            let call_id = self.string()?;
            self.lit("}")?;
            return Some(Some(call_id));
        }
        if self.eat("model\",\"provider\":") {
            self.string()?;
            self.lit(",\"model\":")?;
        } else {
            self.lit("plugin\",\"plugin\":")?;
        }
        self.string()?;
        self.lit("}")?;
        Some(None)
    }

    /// `"message":{...}` of `role`, and the call ids a tool result must
    /// agree on.
    fn message(&mut self, role: &str) -> Option<CallIds<'a>> {
        self.lit("\"message\":{\"id\":")?;
        self.string()?;
        self.lit(",\"role\":\"")?;
        self.lit(role)?;
        self.lit("\",\"content\":")?;
        let lone_result = self.blocks()?;
        self.lit(",\"source\":")?;
        let source = self.source()?;
        self.lit("}")?;
        Some(CallIds { lone_result, source })
    }

    /// `{"turn":N,"step":N,`, what every step's payload starts with.
    fn turn_and_step(&mut self) -> Option<()> {
        self.lit("{\"turn\":")?;
        self.int()?;
        self.lit(",\"step\":")?;
        self.int()?;
        self.lit(",")
    }

    /// A usage's members, braces aside: the two token counts, and the two
    /// optional ones where present, in order.
    fn usage_fields(&mut self) -> Option<()> {
        self.lit("\"inputTokens\":")?;
        self.int()?;
        self.lit(",\"outputTokens\":")?;
        self.int()?;
        for key in [",\"cachedInputTokens\":", ",\"reasoningTokens\":"] {
            if self.eat(key) {
                self.int()?;
            }
        }
        Some(())
    }

    /// The end of the payload: its last `}`, and nothing after it.
    fn end(&mut self) -> Option<()> {
        (self.rest == "}").then_some(())
    }
}

/// Whether `data` is matched whole by `payload`, which steps a cursor
/// over it up to its last `}`.
fn matches<'a>(data: &'a str, payload: impl FnOnce(&mut Plain<'a>) -> Option<()>) -> bool {
    let mut p = Plain { rest: data };
    payload(&mut p).and_then(|()| p.end()).is_some()
}

/// `{"turn":3}`: a `turn/start` exactly as serde writes one.
pub(super) fn is_plain_turn_start(data: &str) -> bool {
    matches(data, |p| {
        p.lit("{\"turn\":")?;
        p.int().map(drop)
    })
}

/// `{"turn":3,"step":1}`: a `step/start` or `step/end` exactly as serde
/// writes one.
pub(super) fn is_plain_step(data: &str) -> bool {
    matches(data, |p| {
        p.lit("{\"turn\":")?;
        p.int()?;
        p.lit(",\"step\":")?;
        p.int().map(drop)
    })
}

/// A `turn/end` of a reason with no fields, exactly as serde writes it:
/// `{"turn":3,"reason":{"kind":"completed"}}`.
pub(super) fn is_plain_turn_end(data: &str) -> bool {
    matches(data, |p| {
        p.lit("{\"turn\":")?;
        p.int()?;
        p.lit(",\"reason\":{\"kind\":\"")?;
        if !(p.eat("completed") || p.eat("max-tokens") || p.eat("interrupted")) {
            return None;
        }
        p.lit("\"}")
    })
}

/// A usage chunk exactly as serde writes one (5% of the benchmark
/// workload's events).
pub(super) fn is_plain_usage(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        p.lit("\"chunk\":{\"type\":\"usage\",")?;
        p.usage_fields()?;
        p.lit("}")
    })
}

/// A text or reasoning delta exactly as serde writes one: most events of
/// a log are such chunks (80% of the benchmark workload).
pub(super) fn is_plain_text_delta(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        p.lit("\"chunk\":{\"type\":\"")?;
        if !(p.eat("text-delta") || p.eat("reasoning-delta")) {
            return None;
        }
        p.lit("\",\"index\":")?;
        u32::try_from(p.int()?).ok()?;
        p.lit(",\"text\":")?;
        p.string()?;
        p.lit("}")
    })
}

/// A tool-call delta chunk exactly as serde writes one.
pub(super) fn is_plain_tool_call_delta(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        p.lit("\"chunk\":{\"type\":\"tool-call-delta\",\"index\":")?;
        u32::try_from(p.int()?).ok()?;
        p.lit(",\"id\":")?;
        p.string()?;
        if p.eat(",\"name\":") {
            p.string()?;
        }
        p.lit(",\"argumentsDelta\":")?;
        p.string()?;
        p.lit("}")
    })
}

/// A `tool/result` exactly as serde writes one: role `user`, one
/// tool-result block, a tool source of the same call id, and the optional
/// `error`.
pub(super) fn is_plain_tool_result(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        let ids = p.message("user")?;
        if ids.lone_result? != ids.source? {
            return None;
        }
        if p.eat(",\"error\":{\"name\":") {
            p.string()?;
            p.lit(",\"code\":")?;
            p.string()?;
            p.lit("}")?;
        }
        Some(())
    })
}

/// An `assistant/message` exactly as serde writes one: role `assistant`,
/// and the optional `usage` and `interrupted` (only ever `true`).
pub(super) fn is_plain_assistant_message(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        p.message("assistant")?;
        if p.eat(",\"usage\":{") {
            p.usage_fields()?;
            p.lit("}")?;
        }
        p.eat(",\"interrupted\":true");
        Some(())
    })
}

/// A `user/message` (`turn` optional) or, without `turn`, a context or
/// steering message, exactly as serde writes one: role `user`.
pub(super) fn is_plain_user_message(data: &str, turn: bool) -> bool {
    matches(data, |p| {
        p.lit("{")?;
        if turn && p.eat("\"turn\":") {
            p.int()?;
            p.lit(",")?;
        }
        p.message("user").map(drop)
    })
}

/// A `tool/call` exactly as serde writes one.
pub(super) fn is_plain_tool_call(data: &str) -> bool {
    matches(data, |p| {
        p.turn_and_step()?;
        p.lit("\"callId\":")?;
        p.string()?;
        p.lit(",\"name\":")?;
        p.string()?;
        p.lit(",\"arguments\":")?;
        p.string().map(drop)
    })
}

#[cfg(test)]
mod tests {
    //! What the matchers accept, the owned types accept, and no key in it
    //! is named twice; and what serde writes of the plain forms is matched.

    use proptest::prelude::*;

    use crate::event::{check_owned_payload, EventType};
    use crate::payload::{
        AssistantChunk, AssistantMessage, Block, ContextMessage, Message, Role, Source, SteeringMessage,
        StreamChunk, ToolCall, ToolError, ToolResult, Usage, UserMessage,
    };
    use crate::shape::{check, Verdict};

    /// Texts of every kind of character: quotes, backslashes, line breaks
    /// (escaped by serde), control bytes (`\u` escapes), and beyond ASCII.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "[a-z ]{0,12}",
            2 => "[a-z\"\\\\/\n\t\r é😀]{0,10}",
            1 => ".{0,6}",
            1 => "[a\u{1}\u{8}\u{c}\u{1f}\u{7f}]{0,4}",
        ]
    }

    /// Call ids: they agree more often than not.
    fn call_id() -> impl Strategy<Value = String> {
        prop_oneof![3 => Just("c1".to_owned()), 1 => Just("c2".to_owned()), 1 => text()]
    }

    fn block(depth: u32) -> BoxedStrategy<Block> {
        let leaf = prop_oneof![
            4 => text().prop_map(Block::text),
            1 => (text(), prop::option::of(text())).prop_map(|(text, signature)| Block::Reasoning { text, signature }),
            1 => (text(), text(), text()).prop_map(|(id, name, arguments)| Block::ToolCall { id, name, arguments }),
            1 => prop::sample::select(&["aGk=", "!"][..])
                .prop_map(|data| Block::Image { media_type: "image/png".into(), data: data.into() }),
        ];
        if depth == 0 {
            return leaf.boxed();
        }
        prop_oneof![
            3 => leaf,
            2 => (call_id(), any::<bool>(), prop::collection::vec(block(depth - 1), 0..3))
                .prop_map(|(tool_call_id, is_error, content)| Block::ToolResult { tool_call_id, is_error, content }),
        ]
        .boxed()
    }

    fn source() -> impl Strategy<Value = Source> {
        prop_oneof![
            Just(Source::User),
            (text(), text()).prop_map(|(provider, model)| Source::Model { provider, model }),
            call_id().prop_map(|call_id| Source::Tool { call_id }),
            text().prop_map(|plugin| Source::Plugin { plugin }),
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        let role = prop_oneof![Just(Role::User), Just(Role::Assistant)];
        (text(), role, prop::collection::vec(block(2), 0..3), source())
            .prop_map(|(id, role, content, source)| Message { id, role, content, source })
    }

    /// A tool result's message, most often the one it must hold.
    fn result_message() -> impl Strategy<Value = Message> {
        prop_oneof![
            3 => (text(), call_id(), text(), any::<bool>())
                .prop_map(|(id, call_id, text, is_error)| Message::tool_result(id, call_id, text, is_error)),
            1 => message(),
        ]
    }

    fn usage() -> impl Strategy<Value = Usage> {
        let n = prop_oneof![0u64..5, any::<u64>()];
        (n.clone(), n.clone(), prop::option::of(n.clone()), prop::option::of(n)).prop_map(
            |(input_tokens, output_tokens, cached_input_tokens, reasoning_tokens)| Usage {
                input_tokens,
                output_tokens,
                cached_input_tokens,
                reasoning_tokens,
            },
        )
    }

    /// Whether `blocks` are of the forms the matchers take: no image, and
    /// only text in a tool result's content.
    fn plain_blocks(blocks: &[Block]) -> bool {
        blocks.iter().all(|b| match b {
            Block::Image { .. } => false,
            Block::ToolResult { content, .. } => content.iter().all(|b| matches!(b, Block::Text { .. })),
            _ => true,
        })
    }

    /// A message payload of each kind as serde writes it, and whether its
    /// blocks are of the plain forms ([`plain_blocks`]).
    fn written() -> impl Strategy<Value = (EventType, String, bool)> {
        let json = |v: Result<String, serde_json::Error>| v.expect("payloads serialize");
        let turn = prop_oneof![0u64..5, any::<u64>()];
        prop_oneof![
            (prop::option::of(turn.clone()), message()).prop_map(move |(turn, message)| {
                let plain = plain_blocks(&message.content);
                (EventType::UserMessage, json(serde_json::to_string(&UserMessage { turn, message })), plain)
            }),
            message().prop_map(move |message| {
                let plain = plain_blocks(&message.content);
                (EventType::ContextMessage, json(serde_json::to_string(&ContextMessage { message })), plain)
            }),
            message().prop_map(move |message| {
                let plain = plain_blocks(&message.content);
                (EventType::SteeringMessage, json(serde_json::to_string(&SteeringMessage { message })), plain)
            }),
            (turn.clone(), turn.clone(), message(), prop::option::of(usage()), prop::option::of(Just(true)))
                .prop_map(move |(turn, step, message, usage, interrupted)| {
                    let plain = plain_blocks(&message.content);
                    let m = AssistantMessage { turn, step, message, usage, interrupted };
                    (EventType::AssistantMessage, json(serde_json::to_string(&m)), plain)
                }),
            (turn.clone(), turn.clone(), text(), text(), text()).prop_map(
                move |(turn, step, call_id, name, arguments)| {
                    let c = ToolCall { turn, step, call_id, name, arguments };
                    (EventType::ToolCall, json(serde_json::to_string(&c)), true)
                }
            ),
            (turn.clone(), turn.clone(), any::<u32>(), text(), prop::option::of(text()), text()).prop_map(
                move |(turn, step, index, id, name, arguments_delta)| {
                    let chunk = StreamChunk::ToolCallDelta { index, id, name, arguments_delta };
                    let c = AssistantChunk { turn, step, chunk };
                    (EventType::AssistantChunk, json(serde_json::to_string(&c)), true)
                }
            ),
            (turn.clone(), turn, result_message(), prop::option::of((text(), text()))).prop_map(
                move |(turn, step, message, error)| {
                    let plain = plain_blocks(&message.content);
                    let error = error.map(|(name, code)| ToolError { name, code });
                    let r = ToolResult { turn, step, message, error };
                    (EventType::ToolResult, json(serde_json::to_string(&r)), plain)
                }
            ),
        ]
    }

    /// Edits that break what serde wrote in one place.
    fn edited() -> impl Strategy<Value = (EventType, String, bool, String)> {
        const PIECES: &[&str] = &[
            "\"", "\\", "}", "]", "{", "[", ",", "0", "-", "1.5", ",\"x\":1", "\u{1}", " ", "true", "null",
            "\\u0041",
        ];
        let edit = (any::<prop::sample::Index>(), prop::sample::select(PIECES), any::<bool>());
        (written(), prop::collection::vec(edit, 0..3)).prop_map(|((event_type, seed, plain), edits)| {
            let text = crate::shape::tests::edited(&seed, edits);
            (event_type, seed, plain, text)
        })
    }

    /// The matcher of the parent's `check` for `event_type`.
    fn plain(event_type: &EventType, text: &str) -> bool {
        match event_type {
            EventType::ToolResult => super::is_plain_tool_result(text),
            EventType::AssistantMessage => super::is_plain_assistant_message(text),
            EventType::UserMessage => super::is_plain_user_message(text, true),
            EventType::ContextMessage | EventType::SteeringMessage => {
                super::is_plain_user_message(text, false)
            }
            EventType::ToolCall => super::is_plain_tool_call(text),
            EventType::AssistantChunk => super::is_plain_tool_call_delta(text),
            other => unreachable!("no plain matcher for {other}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 6000, ..ProptestConfig::default() })]

        #[test]
        fn a_plain_message_is_one_the_owned_types_accept((event_type, seed, plain_shape, text) in edited()) {
            if plain(&event_type, &text) {
                let owned = check_owned_payload(0, &event_type, &text);
                prop_assert!(owned.is_ok(), "{} {}: {:?}", event_type, text, owned);
                prop_assert!(crate::unique_keys::duplicate_key(&text).is_none(), "{}", text);
                prop_assert_eq!(check(&event_type, &text), Verdict::Complete, "{}", text);
            }
            // What serde writes of the plain forms is matched, when valid
            // and free of `\u` escapes.
            if plain_shape && !seed.contains("\\u") && check_owned_payload(0, &event_type, &seed).is_ok() {
                prop_assert!(plain(&event_type, &seed), "{} {}", event_type, seed);
            }
        }
    }

    /// The generator reaches both answers for every type, edited or not,
    /// so the property above is not vacuous.
    #[test]
    fn the_generated_messages_are_matched_and_not() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mut seen = std::collections::BTreeMap::<String, [usize; 4]>::new();
        for _ in 0..12_000 {
            let (event_type, seed, _, text) = edited().new_tree(&mut runner).unwrap().current();
            let entry = seen.entry(event_type.to_string()).or_default();
            let edited = usize::from(seed != text);
            entry[2 * edited + usize::from(plain(&event_type, &text))] += 1;
        }
        assert_eq!(seen.len(), 7, "{seen:?}");
        for (name, counts) in &seen {
            // [as written, not matched], [as written, matched], [edited, not], [edited, matched]
            assert!(counts.iter().all(|&n| n >= 10), "{name}: {counts:?}");
        }
    }

    /// Cases the generator seldom reaches, each on both paths.
    #[test]
    fn tool_results_are_plain_only_as_the_owned_types_take_them() {
        let result = |content: &str, call_id: &str| {
            format!(
                r#"{{"turn":1,"step":1,"message":{{"id":"r","role":"user","content":[{content}],"source":{{"kind":"tool","callId":{call_id}}}}}}}"#
            )
        };
        let block = |call_id: &str| {
            format!(
                r#"{{"type":"tool-result","toolCallId":{call_id},"isError":false,"content":[{{"type":"text","text":"a\nb"}}]}}"#
            )
        };
        let text = r#"{"type":"text","text":"t"}"#;
        let cases = [
            // One tool-result block, the same id: plain and valid.
            (result(&block(r#""c1""#), r#""c1""#), true, true),
            // A second block before or after it: refused.
            (result(&format!("{text},{}", block(r#""c1""#)), r#""c1""#), false, false),
            (result(&format!("{},{text}", block(r#""c1""#)), r#""c1""#), false, false),
            (result(&format!("{},{}", block(r#""c1""#), block(r#""c1""#)), r#""c1""#), false, false),
            // Ids that differ: refused; that differ only as written: valid,
            // but left to serde, which unescapes them.
            (result(&block(r#""c1""#), r#""c2""#), false, false),
            (result(&block(r#""a\/b""#), r#""a/b""#), false, true),
            (result(&block(r#""c\u0031""#), r#""c1""#), false, true),
        ];
        for (text, plain, valid) in cases {
            assert_eq!(super::is_plain_tool_result(&text), plain, "{text}");
            let owned = check_owned_payload(0, &EventType::ToolResult, &text);
            assert_eq!(owned.is_ok(), valid, "{text}: {owned:?}");
            let verdict = if valid { Verdict::Complete } else { Verdict::Unsure };
            assert_eq!(check(&EventType::ToolResult, &text), verdict, "{text}");
        }
    }

    #[test]
    fn tool_call_deltas_are_plain_only_as_the_owned_types_take_them() {
        let delta = |index: &str, name: &str| {
            format!(
                r#"{{"turn":1,"step":2,"chunk":{{"type":"tool-call-delta","index":{index},"id":"c1"{name},"argumentsDelta":"{{\"a\""}}}}"#
            )
        };
        let cases = [
            (delta("0", r#","name":"read""#), true, true),
            (delta("4294967295", ""), true, true),
            // An index past a u32 or with a leading zero; a name of null.
            (delta("4294967296", ""), false, false),
            (delta("0", r#","name":null"#), false, false),
            (delta("01", ""), false, false),
        ];
        for (text, plain, valid) in cases {
            assert_eq!(super::is_plain_tool_call_delta(&text), plain, "{text}");
            let owned = check_owned_payload(0, &EventType::AssistantChunk, &text);
            assert_eq!(owned.is_ok(), valid, "{text}: {owned:?}");
        }
    }

    /// A usage missing one of its two required counts, in a usage chunk
    /// and in an assistant message: plain in neither, refused by the owned
    /// types (the edits of the proptests seldom remove a whole member).
    #[test]
    fn a_usage_without_both_counts_is_not_plain() {
        const MESSAGE: &str = r#"{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}"#;
        for usage in [r#""inputTokens":3"#, r#""outputTokens":2"#, r#""inputTokens":3,"cachedInputTokens":1"#]
        {
            let chunk = format!(r#"{{"turn":1,"step":1,"chunk":{{"type":"usage",{usage}}}}}"#);
            let message = format!(r#"{{"turn":1,"step":1,"message":{MESSAGE},"usage":{{{usage}}}}}"#);
            for (event_type, text, plain) in [
                (EventType::AssistantChunk, &chunk, super::is_plain_usage(&chunk)),
                (EventType::AssistantMessage, &message, super::is_plain_assistant_message(&message)),
            ] {
                assert!(!plain, "{text}");
                assert!(check_owned_payload(0, &event_type, text).is_err(), "{text}");
            }
        }
        // Both counts out of order: valid, but left to serde.
        let chunk = r#"{"turn":1,"step":1,"chunk":{"type":"usage","outputTokens":2,"inputTokens":3}}"#;
        assert!(!super::is_plain_usage(chunk));
        assert!(check_owned_payload(0, &EventType::AssistantChunk, chunk).is_ok());
        // Both counts, in order: plain in both.
        let usage = r#""inputTokens":3,"outputTokens":2"#;
        assert!(super::is_plain_usage(&format!(
            r#"{{"turn":1,"step":1,"chunk":{{"type":"usage",{usage}}}}}"#
        )));
        assert!(super::is_plain_assistant_message(&format!(
            r#"{{"turn":1,"step":1,"message":{MESSAGE},"usage":{{{usage}}}}}"#
        )));
    }
}
