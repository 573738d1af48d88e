//! [`StreamDecoder`]: the bytes of a chat-completions event stream in, the
//! loop's [`StreamItem`]s out. No I/O: the provider feeds it what the
//! network delivers, and tests (or a replay of a recorded stream) can feed
//! it anything.
//!
//! # Mapping
//!
//! Each `data:` event is JSON (a `chat.completion.chunk`), or `[DONE]`,
//! which ends the stream. Only choice 0 is read (the provider never asks
//! for more). From its `delta`:
//!
//! * `content` (and `refusal`) → `text-delta`;
//! * `reasoning_content` (DeepSeek, vLLM, llama.cpp) or else `reasoning`
//!   (OpenRouter, Ollama, newer vLLM) → `reasoning-delta`;
//! * each `tool_calls[]` entry → `tool-call-delta`. Entries are matched to
//!   calls by their `index` (by `id`, or else to the last call, when a
//!   server leaves `index` out); an entry with a name and another id than
//!   the call at its `index` starts a new call (servers that give every
//!   parallel call index 0). The call id a server sends on the first
//!   entry is repeated on every later delta of the same call; a call whose
//!   server never sends an id gets `{response id}-call-{n}` (or
//!   `call-{n}`). Entries that carry nothing new (no name, no argument
//!   text, not the call's first) are skipped.
//!
//! The contract's block `index` is given in order of first appearance: the
//! first kind of content to arrive (reasoning, text, or a tool call) gets
//! 0, the next 1, and so on; all text shares one index, all reasoning
//! another, and each tool call its own.
//!
//! `finish_reason` gives a [`StreamItem::Finish`]: `stop` → `Stop`,
//! `tool_calls` (or the legacy `function_call`) → `ToolCalls`, `length` →
//! `MaxTokens`; anything else (`content_filter`, a server's own word) →
//! `Stop`, with a `tracing` warning. A `usage` object (on the last chunk
//! when `stream_options.include_usage` was asked; some servers send one on
//! every chunk) gives a `usage` chunk each time it appears, with
//! `prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens` when present.
//!
//! # Errors
//!
//! Every failure is a [`ProviderError::Stream`] and ends the stream:
//! undecodable bytes or an endless line, a data event that is not JSON or
//! not shaped like a chunk, an `error` object (or `event: error`) sent by
//! the server mid-stream (its message is kept), an end of input before
//! `[DONE]` and before any `finish_reason` (a cut connection), and a
//! `[DONE]` before any content (text, reasoning or a tool call) and before
//! any `finish_reason` (an endpoint that answered nothing: logging it as a
//! completed, empty answer would hide that). An end after a `finish_reason`
//! but without `[DONE]` is accepted: some servers omit it.

use palimpsest_core_agent_loop::{FinishReason, ProviderError, StreamItem};
use palimpsest_core_session::payload::{StreamChunk, Usage};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

use crate::error::error_message;
use crate::sse::{SseEvent, SseParser};

/// The longest excerpt of bad data quoted in an error.
const EXCERPT_CHARS: usize = 200;

/// Decodes a chat-completions event stream, piece by piece.
///
/// ```
/// use palimpsest_core_agent_loop::{FinishReason, StreamItem};
/// use palimpsest_core_session::payload::StreamChunk;
/// use palimpsest_llm_openai::StreamDecoder;
///
/// let mut decoder = StreamDecoder::new();
/// let mut items = decoder.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel");
/// items.extend(decoder.feed(b"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"));
/// items.extend(decoder.finish());
/// let items: Vec<StreamItem> = items.into_iter().collect::<Result<_, _>>()?;
/// assert_eq!(
///     items,
///     [
///         StreamItem::Chunk(StreamChunk::TextDelta { index: 0, text: "Hello".into() }),
///         StreamItem::Finish(FinishReason::Stop),
///     ]
/// );
/// assert!(decoder.is_done());
/// # Ok::<(), palimpsest_core_agent_loop::ProviderError>(())
/// ```
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: SseParser,
    /// The next contract block index to give.
    next_index: u32,
    reasoning_index: Option<u32>,
    text_index: Option<u32>,
    calls: Vec<CallSlot>,
    response_id: Option<String>,
    finished: bool,
    /// Content came after the last finish reason ([`StreamDecoder::is_whole`]).
    content_after_finish: bool,
    /// A text, reasoning or tool-call delta was read.
    content: bool,
    done: bool,
    failed: bool,
    events: u64,
}

#[derive(Debug)]
struct CallSlot {
    /// The server's `index`, when it sends one.
    server_index: Option<u64>,
    /// The contract block index.
    block_index: u32,
    id: String,
    /// The id is the server's (not generated for a call without one).
    server_id: bool,
}

impl StreamDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Whether the stream is over: `[DONE]` was read or an error was
    /// returned. Later input is ignored.
    pub fn is_done(&self) -> bool {
        self.done || self.failed
    }

    /// Whether a `finish_reason` was read.
    pub fn saw_finish(&self) -> bool {
        self.finished
    }

    /// Whether the answer is whole: a `finish_reason` was read, and no
    /// content after it (usage aside). Content after a finish says it was
    /// not the end: a stream that breaks then fails as one without a
    /// finish would.
    pub fn is_whole(&self) -> bool {
        self.finished && !self.content_after_finish
    }

    /// Decodes one piece of the byte stream (a piece may end anywhere).
    /// An `Err` item is always the last one this decoder returns.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Result<StreamItem, ProviderError>> {
        if self.is_done() {
            return Vec::new();
        }
        let events = self.sse.feed(bytes);
        self.handle_events(events)
    }

    /// Ends the input. Returns what an unterminated last event gives and,
    /// when the stream ended before `[DONE]` and before a `finish_reason`,
    /// a [`ProviderError::Stream`] saying it was cut.
    pub fn finish(&mut self) -> Vec<Result<StreamItem, ProviderError>> {
        if self.is_done() {
            return Vec::new();
        }
        let events = self.sse.finish();
        let mut out = self.handle_events(events);
        if !self.is_done() {
            if self.finished {
                tracing::debug!(
                    events = self.events,
                    "event stream ended after its finish reason without [DONE]"
                );
                self.done = true;
            } else {
                self.failed = true;
                out.push(Err(ProviderError::stream(format!(
                    "the event stream ended before [DONE] and before a finish reason, after {} events",
                    self.events
                ))));
            }
        }
        out
    }

    /// Decodes `events`, then reports `error` (what stopped the event
    /// stream after them), unless decoding them ended the stream first.
    fn handle_events(
        &mut self,
        (events, error): (Vec<SseEvent>, Option<crate::sse::SseError>),
    ) -> Vec<Result<StreamItem, ProviderError>> {
        let mut out = self.handle_parsed(events);
        if let Some(e) = error {
            if !self.is_done() {
                let e = ProviderError::Stream { message: e.to_string(), source: Some(Arc::new(e)) };
                self.fail(e, &mut out);
            }
        }
        out
    }

    /// Ends the stream at `error`: a failure, unless the answer already
    /// has its finish reason, which says it is whole. Then what trails it
    /// (a usage chunk cut short, a line that does not decode) is dropped,
    /// and the stream ends there, complete, as an event stream drops an
    /// event cut off at its end.
    fn fail(&mut self, error: ProviderError, out: &mut Vec<Result<StreamItem, ProviderError>>) {
        if self.is_whole() {
            tracing::warn!(error = %error, "the stream went wrong after its finish reason; the answer is whole, ending it there");
            self.done = true;
        } else {
            self.failed = true;
            out.push(Err(error));
        }
    }

    fn handle_parsed(&mut self, events: Vec<SseEvent>) -> Vec<Result<StreamItem, ProviderError>> {
        let mut out = Vec::new();
        for event in events {
            if let Err(e) = self.handle_event(event, &mut out) {
                self.fail(e, &mut out);
                break;
            }
            if self.done {
                break;
            }
        }
        out
    }

    fn handle_event(
        &mut self,
        event: SseEvent,
        out: &mut Vec<Result<StreamItem, ProviderError>>,
    ) -> Result<(), ProviderError> {
        self.events += 1;
        let data = event.data.trim();
        if event.event.as_deref() == Some("error") {
            let message = serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| error_message(&v))
                .unwrap_or_else(|| excerpt(data));
            return Err(ProviderError::stream(format!("the server sent an error event: {message}")));
        }
        if data == "[DONE]" {
            if !self.finished && !self.content {
                // Nothing to log as an answer and no word on why: not a
                // turn that completed with an empty answer.
                return Err(ProviderError::stream(format!(
                    "the event stream ended ([DONE]) with no content and no finish reason, after {} events",
                    self.events
                )));
            }
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        // Usually one JSON value; a server that glues several into one
        // event (missing blank lines) gets each read in turn.
        for value in serde_json::Deserializer::from_str(data).into_iter::<Value>() {
            let value = value.map_err(|e| malformed(self.events, data, e))?;
            let before = out.len();
            self.handle_value(value, data, out)?;
            let content = |items: &[Result<StreamItem, ProviderError>]| {
                items.iter().any(
                    |item| matches!(item, Ok(StreamItem::Chunk(c)) if !matches!(c, StreamChunk::Usage(_))),
                )
            };
            self.content |= content(&out[before..]);
            // Content after the last finish in this value (a finish in the
            // same choice comes after its content).
            let last_finish = out[before..].iter().rposition(|i| matches!(i, Ok(StreamItem::Finish(_))));
            if self.finished && content(&out[before + last_finish.map_or(0, |f| f + 1)..]) {
                self.content_after_finish = true;
            }
        }
        Ok(())
    }

    fn handle_value(
        &mut self,
        value: Value,
        data: &str,
        out: &mut Vec<Result<StreamItem, ProviderError>>,
    ) -> Result<(), ProviderError> {
        if value.get("error").is_some_and(|e| !e.is_null()) {
            let message = error_message(&value).unwrap_or_else(|| excerpt(data));
            return Err(ProviderError::stream(format!("the server sent an error mid-stream: {message}")));
        }
        let chunk: WireChunk = serde_json::from_value(value).map_err(|e| malformed(self.events, data, e))?;
        if self.response_id.is_none() {
            self.response_id = chunk.id.filter(|id| !id.is_empty());
        }
        for choice in chunk.choices.iter().filter(|c| c.index.unwrap_or(0) == 0) {
            self.handle_choice(choice, out);
        }
        if let Some(usage) = chunk.usage {
            out.push(Ok(StreamItem::Chunk(StreamChunk::Usage(usage.into_usage()))));
        }
        Ok(())
    }

    fn handle_choice(&mut self, choice: &WireChoice, out: &mut Vec<Result<StreamItem, ProviderError>>) {
        if let Some(delta) = &choice.delta {
            let reasoning = delta
                .reasoning_content
                .as_deref()
                .filter(|s| !s.is_empty())
                .or(delta.reasoning.as_deref().filter(|s| !s.is_empty()));
            if let Some(text) = reasoning {
                let index = slot(&mut self.reasoning_index, &mut self.next_index);
                out.push(Ok(StreamItem::Chunk(StreamChunk::ReasoningDelta { index, text: text.to_owned() })));
            }
            for text in [&delta.content, &delta.refusal].into_iter().flatten() {
                if !text.is_empty() {
                    let index = slot(&mut self.text_index, &mut self.next_index);
                    out.push(Ok(StreamItem::Chunk(StreamChunk::TextDelta { index, text: text.clone() })));
                }
            }
            for (position, call) in delta.tool_calls.iter().flatten().enumerate() {
                if let Some(chunk) = self.tool_call(position, call) {
                    out.push(Ok(StreamItem::Chunk(chunk)));
                }
            }
        }
        // Some proxies put an empty (or a printed null) finish reason on
        // every chunk: that is no finish, and taking it for one ended long
        // answers early.
        let no_finish = |r: &str| {
            let r = r.trim();
            r.is_empty() || r.eq_ignore_ascii_case("null") || r.eq_ignore_ascii_case("none")
        };
        let reason = choice.finish_reason.as_deref().filter(|r| !no_finish(r));
        if let Some(reason) = reason {
            self.finished = true;
            self.content_after_finish = false;
            out.push(Ok(StreamItem::Finish(finish_reason(reason))));
        }
    }

    fn tool_call(&mut self, position: usize, call: &WireToolCall) -> Option<StreamChunk> {
        let id = call.id.as_deref().filter(|id| !id.is_empty());
        let named = call.function.as_ref().and_then(|f| f.name.as_deref()).is_some_and(|n| !n.is_empty());
        let found = match (call.index, id) {
            (Some(index), _) => {
                let at = self.calls.iter().rposition(|c| c.server_index == Some(index));
                // Another id and a name at an index in use start another
                // call: Ollama and some bridges give every parallel call
                // index 0, and merging them made one call of three names'
                // arguments. An id changing without a name is the same
                // call (the first id is kept).
                at.filter(|&i| {
                    let slot = &self.calls[i];
                    !(named && slot.server_id && id.is_some_and(|id| id != slot.id))
                })
            }
            (None, Some(id)) => self.calls.iter().position(|c| c.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let (slot, first) = match found {
            Some(i) => (i, false),
            None => {
                let block_index = self.next_index;
                self.next_index += 1;
                let n = call.index.unwrap_or(position as u64);
                let id = match id {
                    Some(id) => id.to_owned(),
                    None => match &self.response_id {
                        Some(response) => format!("{response}-call-{n}"),
                        None => format!("call-{n}"),
                    },
                };
                let server_id = call.id.as_deref().is_some_and(|id| !id.is_empty());
                self.calls.push(CallSlot { server_index: call.index, block_index, id, server_id });
                (self.calls.len() - 1, true)
            }
        };
        let slot = &self.calls[slot];
        if let Some(late) = id.filter(|id| *id != slot.id) {
            tracing::debug!(call_id = %slot.id, ignored = late, "a tool call delta changed its id; the first one is kept");
        }
        let function = call.function.as_ref();
        let name = function.and_then(|f| f.name.clone()).filter(|n| !n.is_empty());
        let arguments = match function.and_then(|f| f.arguments.as_ref()) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        if !first && name.is_none() && arguments.is_empty() {
            return None;
        }
        Some(StreamChunk::ToolCallDelta {
            index: slot.block_index,
            id: slot.id.clone(),
            name,
            arguments_delta: arguments,
        })
    }
}

/// The block index of a kind of content, given on first use.
fn slot(index: &mut Option<u32>, next: &mut u32) -> u32 {
    *index.get_or_insert_with(|| {
        let i = *next;
        *next += 1;
        i
    })
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::MaxTokens,
        other => {
            tracing::warn!(finish_reason = other, "unknown finish reason, read as stop");
            FinishReason::Stop
        }
    }
}

fn excerpt(data: &str) -> String {
    let mut chars = data.chars();
    let mut out: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

fn malformed(event: u64, data: &str, e: serde_json::Error) -> ProviderError {
    ProviderError::Stream {
        message: format!("event {event} is not a chat completion chunk ({e}): {:?}", excerpt(data)),
        source: Some(Arc::new(e)),
    }
}

/// A `chat.completion.chunk`, as far as it is read. Unknown fields are
/// ignored; `null` counts as absent everywhere.
#[derive(Debug, Deserialize)]
struct WireChunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct WireChoice {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    /// A string by the standard; some servers send the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient_count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_count")]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct WirePromptDetails {
    #[serde(default, deserialize_with = "lenient_count")]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WireCompletionDetails {
    #[serde(default, deserialize_with = "lenient_count")]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cached_input_tokens: self.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: self.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

/// A token count as servers send it: an integer, or a float some send
/// (`4.0`, rounded); anything else (negative, a string, an object) is no
/// count. Usage is bookkeeping: an odd figure must not fail a turn whose
/// answer arrived whole.
fn lenient_count<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Value::deserialize(deserializer)?;
    let count = match &value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
                .map(|f| f.round() as u64)
        }),
        _ => None,
    };
    if count.is_none() && !value.is_null() {
        tracing::warn!(%value, "a token count that is not a number of tokens; ignored");
    }
    Ok(count)
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Item = Result<StreamItem, (String, String)>;

    /// Items with errors as (code, display), so they compare.
    fn plain(items: Vec<Result<StreamItem, ProviderError>>) -> Vec<Item> {
        items.into_iter().map(|i| i.map_err(|e| (e.code().to_owned(), e.to_string()))).collect()
    }

    fn decode(input: &str) -> Vec<Item> {
        let mut d = StreamDecoder::new();
        let mut out = d.feed(input.as_bytes());
        out.extend(d.finish());
        plain(out)
    }

    fn text(index: u32, t: &str) -> Item {
        Ok(StreamItem::Chunk(StreamChunk::TextDelta { index, text: t.into() }))
    }

    fn call(index: u32, id: &str, name: Option<&str>, args: &str) -> Item {
        Ok(StreamItem::Chunk(StreamChunk::ToolCallDelta {
            index,
            id: id.into(),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        }))
    }

    fn error_text(items: &[Item]) -> Option<(String, String)> {
        items.last().and_then(|i| i.as_ref().err()).cloned()
    }

    #[test]
    fn calls_without_index_or_id_are_matched_and_named() {
        let items = decode(concat!(
            "data: {\"id\":\"resp-9\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[",
            "{\"function\":{\"name\":\"a\",\"arguments\":\"{\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[",
            "{\"id\":\"x\",\"function\":{\"name\":\"b\",\"arguments\":\"\"}},{\"id\":\"x\",\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":5,\"function\":{\"name\":\"c\"}}]},",
            "\"finish_reason\":\"function_call\"}]}\n\n",
            "data: [DONE]\n\n",
        ));
        assert_eq!(
            items,
            [
                call(0, "resp-9-call-0", Some("a"), "{"),
                call(0, "resp-9-call-0", None, "}"),
                call(1, "x", Some("b"), ""),
                call(1, "x", None, "{}"),
                call(2, "resp-9-call-5", Some("c"), ""),
                Ok(StreamItem::Finish(FinishReason::ToolCalls)),
            ]
        );
    }

    #[test]
    fn parallel_calls_that_share_an_index_are_told_apart_by_their_ids() {
        // Ollama and some bridges give every parallel call index 0.
        let delta = |id: &str, name: &str, args: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"{id}\",\"function\":{{\"name\":\"{name}\",\"arguments\":{args:?}}}}}]}}}}]}}\n\n"
            )
        };
        let stream = [
            delta("call_a", "read_file", r#"{"path":"a.txt"}"#),
            delta("call_b", "list_files", "{}"),
            delta("call_c", "calculator", r#"{"expression":"2+2"}"#),
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".into(),
        ]
        .concat();
        assert_eq!(
            decode(&stream),
            [
                call(0, "call_a", Some("read_file"), r#"{"path":"a.txt"}"#),
                call(1, "call_b", Some("list_files"), "{}"),
                call(2, "call_c", Some("calculator"), r#"{"expression":"2+2"}"#),
                Ok(StreamItem::Finish(FinishReason::ToolCalls)),
            ]
        );
        // An id that changes without a name is the same call, as before.
        let same = decode(concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\",\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
        ));
        assert_eq!(&same[..2], [call(0, "a", Some("f"), "{"), call(0, "a", None, "}")]);
    }

    #[test]
    fn empty_and_null_fields_and_other_choices_are_skipped() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}}]}\n\n",
            "data: {\"choices\":null,\"usage\":null}\n\n",
            "data: {}\n\n",
            "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other choice\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't.\"},\"finish_reason\":\"content_filter\"}]}\n\n",
            "data:\n\n",
        ));
        assert_eq!(items, [text(0, "I can't."), Ok(StreamItem::Finish(FinishReason::Stop))]);
    }

    #[test]
    fn reasoning_content_wins_over_reasoning_and_indexes_follow_first_appearance() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"A\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"r1\",\"reasoning\":\"r1\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\"r2\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"B\"}}]}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n",
        ));
        let reasoning =
            |t: &str| Ok(StreamItem::Chunk(StreamChunk::ReasoningDelta { index: 1, text: t.into() }));
        assert_eq!(items, [text(0, "A"), reasoning("r1"), reasoning("r2"), text(0, "B")]);
    }

    #[test]
    fn glued_json_values_in_one_event_are_each_read() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n\n",
        ));
        assert_eq!(items, [text(0, "a"), text(0, "b"), Ok(StreamItem::Finish(FinishReason::MaxTokens))]);
    }

    #[test]
    fn an_end_after_the_finish_reason_is_accepted_and_a_cut_is_an_error() {
        let finished =
            decode("data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}");
        assert_eq!(finished, [text(0, "a"), Ok(StreamItem::Finish(FinishReason::Stop))]);
        let cut = decode("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        assert_eq!(cut.first(), Some(&text(0, "a")));
        assert_eq!(
            error_text(&cut),
            Some((
                "PROVIDER_STREAM".into(),
                "provider stream failed: the event stream ended before [DONE] and before a finish reason, after 1 events"
                    .into()
            ))
        );
        let empty = decode("");
        assert_eq!(empty.len(), 1);
        assert_eq!(error_text(&empty).map(|e| e.0), Some("PROVIDER_STREAM".into()));
    }

    #[test]
    fn done_with_no_content_and_no_finish_reason_is_an_error_but_an_empty_finished_answer_is_not() {
        let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\n";
        let nothing = decode(&format!(
            "data: {{\"choices\":[{{\"delta\":{{\"role\":\"assistant\"}}}}]}}\n\n{usage}data: [DONE]\n\n"
        ));
        assert_eq!(
            error_text(&nothing),
            Some((
                "PROVIDER_STREAM".into(),
                "provider stream failed: the event stream ended ([DONE]) with no content and no finish reason, after 3 events"
                    .into()
            ))
        );
        let empty_answer =
            decode("data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
        assert_eq!(error_text(&empty_answer), None, "{empty_answer:?}");
        let no_finish = decode("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n");
        assert_eq!(no_finish, [text(0, "a")], "content without a finish reason is accepted, as before");
    }

    #[test]
    fn garbage_is_a_stream_error_and_ends_decoding() {
        let mut d = StreamDecoder::new();
        let items = plain(
            d.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: {\"choices\": [tru\n\n"),
        );
        assert_eq!(items.len(), 2);
        assert_eq!(
            error_text(&items),
            Some((
                "PROVIDER_STREAM".into(),
                "provider stream failed: event 2 is not a chat completion chunk (EOF while parsing a value at line 1 column 16): \"{\\\"choices\\\": [tru\""
                    .into()
            ))
        );
        assert!(d.is_done());
        let mut after = d.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"ignored\"}}]}\n\n");
        after.extend(d.finish());
        assert!(after.is_empty());

        let wrong_shape = decode("data: {\"choices\":\"nope\"}\n\n");
        assert_eq!(wrong_shape.len(), 1);
        assert!(error_text(&wrong_shape).is_some_and(|(_, m)| m.contains("not a chat completion chunk")));

        let bad_utf8 = {
            let mut d = StreamDecoder::new();
            plain(d.feed(b"data: \xc3\x28\n\n"))
        };
        assert_eq!(
            error_text(&bad_utf8),
            Some((
                "PROVIDER_STREAM".into(),
                "provider stream failed: event stream line 1 is not valid UTF-8".into()
            ))
        );
    }

    #[test]
    fn a_chunk_before_a_bad_line_in_the_same_read_is_delivered_before_the_error() {
        let mut d = StreamDecoder::new();
        let items =
            plain(d.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"ok \"}}]}\n\ndata: \xff\xfe\n\n"));
        assert_eq!(items.first(), Some(&text(0, "ok ")));
        assert!(error_text(&items).is_some_and(|(_, m)| m.contains("not valid UTF-8")), "{items:?}");
        assert!(d.is_done());
    }

    #[test]
    fn an_empty_or_printed_null_finish_reason_is_no_finish() {
        let chunk = |text: &str, finish: &str| {
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":{text:?}}},\"finish_reason\":{finish:?}}}]}}\n\n")
        };
        let stream =
            [chunk("a", ""), chunk("b", "null"), chunk("c", "None"), chunk("d", "NULL"), chunk("e", "stop")]
                .concat();
        assert_eq!(
            decode(&stream),
            [
                text(0, "a"),
                text(0, "b"),
                text(0, "c"),
                text(0, "d"),
                text(0, "e"),
                Ok(StreamItem::Finish(FinishReason::Stop))
            ]
        );
    }

    #[test]
    fn what_goes_wrong_after_the_finish_reason_ends_a_whole_answer() {
        // A usage line cut off at the end, a bad line, an error: the
        // answer had its finish reason, so it is whole.
        let done = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
        for after in [
            &b"data: {\"usage\":{\"prompt_to"[..],
            b"data: \xff\n\n",
            b"data: {\"error\":{\"message\":\"x\"}}\n\n",
        ] {
            let mut d = StreamDecoder::new();
            let mut items = plain(d.feed(done.as_bytes()));
            items.extend(plain(d.feed(after)));
            items.extend(plain(d.finish()));
            assert_eq!(items, [text(0, "ok"), Ok(StreamItem::Finish(FinishReason::Stop))], "{after:?}");
            assert!(d.is_done());
        }
    }

    #[test]
    fn content_after_the_finish_reason_makes_a_later_break_an_error_again() {
        let mut d = StreamDecoder::new();
        let mut items = plain(
            d.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"A \"},\"finish_reason\":\"stop\"}]}\n\n"),
        );
        assert!(d.is_whole());
        items.extend(plain(d.feed(b"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n")));
        assert!(d.is_whole(), "usage is not content");
        items.extend(plain(d.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"B\"}}]}\n\n")));
        assert!(!d.is_whole(), "content after the finish: it was not the end");
        items.extend(plain(d.feed(b"data: {\"choices\": [tru\n\n")));
        assert!(error_text(&items).is_some_and(|(code, _)| code == "PROVIDER_STREAM"), "{items:?}");
    }

    #[test]
    fn server_errors_mid_stream_keep_the_message() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
            "data: {\"error\":{\"message\":\"The server is overloaded\",\"type\":\"server_error\"}}\n\n",
        ));
        assert_eq!(items.first(), Some(&text(0, "par")));
        assert_eq!(
            error_text(&items).map(|e| e.1),
            Some("provider stream failed: the server sent an error mid-stream: The server is overloaded [server_error]".into())
        );
        let event = decode("event: error\ndata: {\"message\":\"quota\"}\n\n");
        assert_eq!(
            error_text(&event).map(|e| e.1),
            Some("provider stream failed: the server sent an error event: quota".into())
        );
        let long = format!("event: error\ndata: {}\n\n", "x".repeat(300));
        let msg = error_text(&decode(&long)).map(|e| e.1).unwrap_or_default();
        assert!(msg.ends_with(&format!("{}…", "x".repeat(10))) && msg.chars().count() < 300, "{msg}");
    }

    #[test]
    fn usage_maps_details_and_defaults() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3,",
            "\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens_details\":{\"reasoning_tokens\":2}}}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11}}\n\n",
            "data: [DONE]\n\n",
        ));
        assert_eq!(
            items,
            [
                Ok(StreamItem::Finish(FinishReason::Stop)),
                Ok(StreamItem::Chunk(StreamChunk::Usage(Usage {
                    input_tokens: 10,
                    output_tokens: 3,
                    cached_input_tokens: Some(4),
                    reasoning_tokens: Some(2)
                }))),
                Ok(StreamItem::Chunk(StreamChunk::Usage(Usage { input_tokens: 11, ..Usage::default() }))),
            ]
        );
    }

    /// Floats (some servers send `4.0`) are counts; a negative, a string or
    /// an object is no count, and none of them fails the stream: the answer
    /// before it arrived whole.
    #[test]
    fn odd_token_counts_never_fail_a_finished_answer() {
        let items = decode(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12.0,\"completion_tokens\":4.4,\"total_tokens\":16.0}}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":\"3\",",
            "\"prompt_tokens_details\":{\"cached_tokens\":{}}}}\n\n",
            "data: [DONE]\n\n",
        ));
        let usages: Vec<&Usage> = items
            .iter()
            .filter_map(|i| match i {
                Ok(StreamItem::Chunk(StreamChunk::Usage(u))) => Some(u),
                _ => None,
            })
            .collect();
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        assert_eq!(
            usages,
            [&Usage { input_tokens: 12, output_tokens: 4, ..Usage::default() }, &Usage::default()]
        );
    }
}
