//! Typed payloads of the core event types (contract section 1.2).
//!
//! These are the shapes the log's `data` must have for each core type. They
//! are used in two directions: to build events through the typed append API,
//! and to check the shape of events read from a file. The log itself keeps
//! every `data` verbatim, so keys these types do not know survive untouched.
//!
//! An optional key is omitted when absent: present as `null`, it is read as
//! its type (`deserialize_with = "present"`) and so refused, as for the
//! envelope's optional keys (contract sections 1.1 and 1.2).

use serde::{Deserialize, Serialize};

use crate::tagged::tagged_enum;

/// A chat message as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Stable message id.
    pub id: String,
    /// Who speaks.
    pub role: Role,
    /// Ordered content blocks.
    pub content: Vec<Block>,
    /// Where the message came from.
    pub source: Source,
}

impl Message {
    /// A person's message: role `user`, one text block, source `user`.
    ///
    /// ```
    /// use palimpsest_core_session::payload::{Message, Role, Source};
    ///
    /// let m = Message::user("u1", "Hello");
    /// assert_eq!((m.role, &m.source, m.text()), (Role::User, &Source::User, "Hello".to_owned()));
    /// ```
    pub fn user(id: impl Into<String>, text: impl Into<String>) -> Message {
        Message { id: id.into(), role: Role::User, content: vec![Block::text(text)], source: Source::User }
    }

    /// A model's reply: role `assistant`, one text block, source `model`.
    ///
    /// ```
    /// use palimpsest_core_session::payload::{Message, Role};
    ///
    /// let m = Message::assistant("a1", "Hi!", "openai", "gpt-4o-mini");
    /// assert_eq!((m.role, m.text()), (Role::Assistant, "Hi!".to_owned()));
    /// ```
    pub fn assistant(
        id: impl Into<String>,
        text: impl Into<String>,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Message {
        Message {
            id: id.into(),
            role: Role::Assistant,
            content: vec![Block::text(text)],
            source: Source::Model { provider: provider.into(), model: model.into() },
        }
    }

    /// Text a plugin writes on the user side (a compaction summary, a
    /// notice): role `user`, one text block, source `plugin`.
    pub fn from_plugin(id: impl Into<String>, plugin: impl Into<String>, text: impl Into<String>) -> Message {
        Message {
            id: id.into(),
            role: Role::User,
            content: vec![Block::text(text)],
            source: Source::Plugin { plugin: plugin.into() },
        }
    }

    /// A tool's result for call `call_id`: role `user`, exactly one
    /// `tool-result` block holding `text`, source `tool` (what a
    /// [`ToolResult`] payload carries).
    pub fn tool_result(
        id: impl Into<String>,
        call_id: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Message {
        let call_id = call_id.into();
        Message {
            id: id.into(),
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_call_id: call_id.clone(),
                is_error,
                content: vec![Block::text(text)],
            }],
            source: Source::Tool { call_id },
        }
    }

    /// The text of its text blocks, joined (no separator).
    pub fn text(&self) -> String {
        Block::text_of(&self.content)
    }
}

/// The speaker of a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user side: people, tools results and injected context.
    User,
    /// The model.
    Assistant,
}

/// One block of a [`Message`]'s content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning.
    Reasoning {
        /// The reasoning text.
        text: String,
        /// Provider signature, when the provider sends one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A tool call requested by the model.
    ToolCall {
        /// The call id.
        id: String,
        /// The tool's name.
        name: String,
        /// The raw argument string the model produced.
        arguments: String,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the call this answers.
        #[serde(rename = "toolCallId")]
        tool_call_id: String,
        /// Whether the tool failed.
        #[serde(rename = "isError")]
        is_error: bool,
        /// The result's content.
        content: Vec<Block>,
    },
    /// An inline image.
    Image {
        /// MIME type, e.g. `image/png`.
        #[serde(rename = "mediaType")]
        media_type: String,
        /// Base64 data (RFC 4648's standard alphabet, `=` padding
        /// optional); anything else is refused when read.
        data: String,
    },
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into() }
    }

    /// The text of the text blocks among `blocks`, joined (no separator).
    pub fn text_of(blocks: &[Block]) -> String {
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Where a [`Message`] came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    /// Typed by a person.
    User,
    /// Produced by a model.
    Model {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
    },
    /// The output of a tool call.
    Tool {
        /// The call it answers.
        #[serde(rename = "callId")]
        call_id: String,
    },
    /// Written by a plugin (compaction, a file watcher, ...).
    Plugin {
        /// The plugin's name.
        plugin: String,
    },
}

/// One streamed piece of a model response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamChunk {
    /// Text.
    TextDelta {
        /// Content block index.
        index: u32,
        /// The text piece.
        text: String,
    },
    /// Reasoning text.
    ReasoningDelta {
        /// Content block index.
        index: u32,
        /// The text piece.
        text: String,
    },
    /// A piece of a tool call. A call usually arrives in several pieces,
    /// merged by `index` (one content block per index): the argument
    /// pieces are concatenated in order; the call id and the name are
    /// taken from the first piece of that index that carries a non-empty
    /// one (providers send them once, on the first piece, and leave them
    /// empty or absent after). A call that ends with no id gets one from
    /// the agent loop (`docs/contract-notes.md`, note 14).
    ToolCallDelta {
        /// Content block index.
        index: u32,
        /// The call id.
        id: String,
        /// The tool name (usually only on the first delta).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A piece of the argument string.
        #[serde(rename = "argumentsDelta")]
        arguments_delta: String,
    },
    /// Token usage.
    Usage(Usage),
}

/// Token usage of one model response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from a cache.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub cached_input_tokens: Option<u64>,
    /// Reasoning tokens.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub reasoning_tokens: Option<u64>,
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnEndReason {
    /// The model finished.
    Completed,
    /// The turn was cancelled.
    Aborted {
        /// Why.
        reason: String,
    },
    /// The turn failed.
    Error {
        /// What failed.
        error: ErrorInfo,
    },
    /// The model hit its output-token limit.
    MaxTokens,
    /// Closed by crash repair (contract section 5).
    Interrupted,
}

/// A failure description inside a [`TurnEndReason::Error`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Human-readable message.
    pub message: String,
    /// Stable code.
    pub code: String,
}

/// A tool failure carried by a `tool/result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// Error name, e.g. `UnknownTool`.
    pub name: String,
    /// Stable code, e.g. `TOOL_OUTCOME_UNKNOWN`.
    pub code: String,
}

/// `turn/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStart {
    /// Turn number, from 1.
    pub turn: u64,
}

/// `turn/end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// Turn number.
    pub turn: u64,
    /// Why it ended.
    pub reason: TurnEndReason,
}

/// `step/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStart {
    /// Turn number.
    pub turn: u64,
    /// Step number inside the turn, from 1.
    pub step: u64,
}

/// `step/end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepEnd {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u64,
}

/// `user/message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The turn it opened, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub turn: Option<u64>,
    /// The message (role `user`).
    pub message: Message,
}

/// `context/message`: injected context (file notices, instructions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextMessage {
    /// The message (role `user`).
    pub message: Message,
}

/// `steering/message`: a person's mid-turn steering input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeringMessage {
    /// The message (role `user`).
    pub message: Message,
}

/// `assistant/chunk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u64,
    /// The streamed piece.
    pub chunk: StreamChunk,
}

/// `assistant/message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u64,
    /// The message (role `assistant`).
    pub message: Message,
    /// Token usage of the response.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub usage: Option<Usage>,
    /// `Some(true)` when the stream was cut off by cancellation. The
    /// contract writes the key only as `true` (section 1.2): `false` is
    /// refused when read; leave the key out instead.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "only_true")]
    pub interrupted: Option<bool>,
}

/// `tool/call`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u64,
    /// The call id.
    #[serde(rename = "callId")]
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The raw argument string the model produced.
    pub arguments: String,
}

/// `tool/result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u64,
    /// The message: role `user`, exactly one `tool-result` block, source `tool`.
    pub message: Message,
    /// Set when the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub error: Option<ToolError>,
}

impl ToolResult {
    /// The id of the call this result answers (valid results agree on it in
    /// the block and the source).
    pub fn call_id(&self) -> &str {
        match &self.message.source {
            Source::Tool { call_id } => call_id,
            _ => "",
        }
    }
}

/// `session/settings`: the settings every later model request is made
/// with, until the next `session/settings` (contract section 1.3).
///
/// Keys of `data` besides `settings` are allowed and kept verbatim in the
/// log, as in every core payload; this type does not read them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionSettings {
    /// The whole effective settings: they replace the previous ones.
    pub settings: Settings,
}

/// The settings a model request is made with (contract section 1.3).
///
/// Every key is optional; an absent key says nothing about that setting.
/// A known key present with the wrong type (`null` included, except for a
/// tool's `parameters`, which may be any JSON value) makes the event
/// `event-malformed`. Keys this type does not know are kept in
/// [`Settings::extra`], so reading and writing settings loses nothing.
///
/// Secrets never belong here: no API key, token or password (a provider URL
/// is written without its user-info and query string).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The system (or developer) prompt sent before the derived messages.
    #[serde(
        rename = "systemPrompt",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub system_prompt: Option<String>,
    /// The model name the provider is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub model: Option<String>,
    /// Where requests go, e.g. an endpoint URL without user-info or query.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub provider: Option<String>,
    /// The tools offered to the model, in order.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub tools: Option<Vec<OfferedTool>>,
    /// The token budget compaction keeps a request under.
    #[serde(
        rename = "contextBudget",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub context_budget: Option<u64>,
    /// Provider request parameters (`temperature`, `maxTokens`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
    /// Keys this build does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One tool offered to the model, in [`Settings::tools`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OfferedTool {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub description: Option<String>,
    /// The arguments' JSON Schema: any JSON value, `null` included.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub parameters: Option<serde_json::Value>,
    /// Keys this build does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// An optional key that, when present, must hold a `T`: `null` is read as
/// a `T` (so refused unless `T` takes it), never as "absent".
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// An optional key the contract writes only as `true` (`interrupted`,
/// section 1.2: `"interrupted": true`, not a `bool`): `false` and `null`
/// are refused, so that "not interrupted" is said one way, by leaving the
/// key out.
pub(crate) fn only_true<'de, D>(d: D) -> Result<Option<bool>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match bool::deserialize(d)? {
        true => Ok(Some(true)),
        false => Err(serde::de::Error::custom(
            "`interrupted` is written only as `true`: leave it out when the message was not interrupted",
        )),
    }
}

/// An image block's `data`: a string of base64 ([`is_base64`]).
fn base64_text<'de, D>(d: D) -> Result<String, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let text = String::deserialize(d)?;
    if !is_base64(&text) {
        return Err(serde::de::Error::custom(
            "an image block's `data` is not base64 (RFC 4648's standard alphabet, `=` padding optional)",
        ));
    }
    Ok(text)
}

/// Whether `text` is base64 as section 1.2 asks of an image's `data`:
/// RFC 4648's standard alphabet (`A-Z a-z 0-9 + /`), then at most two `=`
/// of padding; padded, a multiple of 4 characters long; unpadded, any
/// length a byte string can have (not 1 more than a multiple of 4). No
/// whitespace, no URL-safe alphabet, no `data:` URL. The empty string is
/// the empty image data, and base64.
///
/// What a tool or provider should check before it puts bytes of its own
/// into an image block: an event holding other `data` is refused.
///
/// ```
/// use palimpsest_core_session::payload::is_base64;
///
/// assert!(is_base64("aGk=") && is_base64("aGk") && is_base64(""));
/// assert!(!is_base64("data:image/png;base64,aGk=") && !is_base64("aG k=") && !is_base64("a-_b"));
/// ```
pub fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    let body = bytes.iter().rposition(|&b| b != b'=').map_or(0, |i| i + 1);
    let padding = bytes.len() - body;
    let alphabet = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    bytes[..body].iter().all(alphabet)
        && match padding {
            0 => body % 4 != 1,
            1 | 2 => bytes.len().is_multiple_of(4) && body > 0,
            _ => false,
        }
}

/// A plugin's event: any type string outside the core set, opaque data.
/// It never joins the surface.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginEvent {
    /// The type string, e.g. `compaction/start`.
    pub event_type: String,
    /// The payload, any JSON value.
    pub data: serde_json::Value,
}

/// Payloads that join the surface: appending one needs a
/// [`SurfaceIntent`](crate::SurfaceIntent).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SurfacePayload {
    /// `user/message`.
    User(UserMessage),
    /// `context/message`.
    Context(ContextMessage),
    /// `steering/message`.
    Steering(SteeringMessage),
    /// `assistant/message`.
    Assistant(AssistantMessage),
    /// `tool/result`.
    ToolResult(ToolResult),
}

/// Payloads that stay in the log only: appending one takes no surface intent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LogPayload {
    /// `turn/start`.
    TurnStart(TurnStart),
    /// `turn/end`.
    TurnEnd(TurnEnd),
    /// `step/start`.
    StepStart(StepStart),
    /// `step/end`.
    StepEnd(StepEnd),
    /// `assistant/chunk`.
    AssistantChunk(AssistantChunk),
    /// `tool/call`.
    ToolCall(ToolCall),
    /// `session/settings`.
    Settings(SessionSettings),
    /// Any plugin event type.
    Plugin(PluginEvent),
}

macro_rules! into_payload {
    ($($ty:ident => $outer:ident :: $variant:ident),* $(,)?) => {$(
        impl From<$ty> for $outer {
            fn from(p: $ty) -> $outer {
                $outer::$variant(p)
            }
        }
    )*};
}

into_payload! {
    UserMessage => SurfacePayload::User,
    ContextMessage => SurfacePayload::Context,
    SteeringMessage => SurfacePayload::Steering,
    AssistantMessage => SurfacePayload::Assistant,
    ToolResult => SurfacePayload::ToolResult,
    TurnStart => LogPayload::TurnStart,
    TurnEnd => LogPayload::TurnEnd,
    StepStart => LogPayload::StepStart,
    StepEnd => LogPayload::StepEnd,
    AssistantChunk => LogPayload::AssistantChunk,
    ToolCall => LogPayload::ToolCall,
    SessionSettings => LogPayload::Settings,
    PluginEvent => LogPayload::Plugin,
}

tagged_enum! {
    StreamChunk, tag "type", "a stream chunk" {
        "text-delta" => TextDelta { index: u32, text: String },
        "reasoning-delta" => ReasoningDelta { index: u32, text: String },
        "tool-call-delta" => ToolCallDelta {
            index: u32,
            id: String,
            #[serde(default, deserialize_with = "present")] name: Option<String>,
            #[serde(rename = "argumentsDelta")] arguments_delta: String,
        },
        "usage" => |usage: Usage| StreamChunk::Usage(usage),
    }
}

tagged_enum! {
    Block, tag "type", "a content block" {
        "text" => Text { text: String },
        "reasoning" => Reasoning { text: String, #[serde(default, deserialize_with = "present")] signature: Option<String> },
        "tool-call" => ToolCall { id: String, name: String, arguments: String },
        "tool-result" => ToolResult {
            #[serde(rename = "toolCallId")] tool_call_id: String,
            #[serde(rename = "isError")] is_error: bool,
            content: Vec<Block>,
        },
        "image" => Image {
            #[serde(rename = "mediaType")] media_type: String,
            #[serde(deserialize_with = "base64_text")] data: String,
        },
    }
}

tagged_enum! {
    Source, tag "kind", "a message source" {
        "user" => User {},
        "model" => Model { provider: String, model: String },
        "tool" => Tool { #[serde(rename = "callId")] call_id: String },
        "plugin" => Plugin { plugin: String },
    }
}
