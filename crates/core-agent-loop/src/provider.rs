//! The model side of the loop: the [`Provider`] trait, the [`ModelRequest`]
//! it receives and the stream of [`StreamItem`]s it answers with.
//!
//! A provider streams the contract's `StreamChunk`s (text, reasoning and
//! tool-call deltas, usage) and, optionally, a [`FinishReason`]. The loop
//! logs the deltas as `assistant/chunk` events, merged per content block
//! and flush window (at most one window late), so whatever the user saw
//! streamed is in the log, whatever happens later.
//!
//! The trait is object-safe: its async method returns a boxed future, and
//! the stream is a boxed [`futures_core::Stream`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_core::Stream;
use palimpsest_core_session::payload::{Block, Message, OfferedTool, Role, StreamChunk, Usage};

use crate::assemble::Assembler;

/// A boxed, sendable future: the return type of the object-safe async
/// methods of this crate's traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The stream a [`Provider`] answers with. It ends when the response is
/// complete; an `Err` item ends it early (the loop reads nothing after it).
pub type ChunkStream<'a> = Pin<Box<dyn Stream<Item = Result<StreamItem, ProviderError>> + Send + 'a>>;

/// A [`ChunkStream`] of items already at hand: for providers that receive
/// a whole response at once, for tests, and for examples. Each item is
/// ready as soon as it is polled; an `Err` item ends the stream.
///
/// ```
/// use palimpsest_core_agent_loop::{stream_from, StreamItem, FinishReason};
///
/// let stream = stream_from(vec![Ok(StreamItem::Finish(FinishReason::Stop))]);
/// # drop(stream);
/// ```
pub fn stream_from(items: Vec<Result<StreamItem, ProviderError>>) -> ChunkStream<'static> {
    Box::pin(ItemsStream { items: items.into() })
}

/// The stream behind [`stream_from`].
struct ItemsStream {
    items: std::collections::VecDeque<Result<StreamItem, ProviderError>>,
}

impl Stream for ItemsStream {
    type Item = Result<StreamItem, ProviderError>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.items.pop_front())
    }
}

/// A shareable error, for the `source` of a [`ProviderError`].
pub type SharedError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// One item of a [`ChunkStream`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamItem {
    /// A streamed piece of the response. Logged as an `assistant/chunk`.
    Chunk(StreamChunk),
    /// Why the model stopped. Not logged as a chunk (the contract has no
    /// finish chunk); the loop uses it to end the turn with `max-tokens`. A
    /// stream may send it before its last chunks (usage often comes after
    /// it); the last one sent wins.
    Finish(FinishReason),
}

/// Why the model stopped generating.
///
/// A stream that ends without a [`StreamItem::Finish`] is read as a natural
/// stop. Whether the loop runs tools does not depend on this value but on
/// the response itself: every `tool-call` block gets a `tool/call` and a
/// `tool/result`, so the history stays provider-valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model stopped to have tools called.
    ToolCalls,
    /// The output-token limit cut the response: the loop executes none of
    /// its tool calls (their arguments may be cut too) and ends the turn
    /// with `max-tokens`.
    MaxTokens,
}

/// A tool as the model sees it in a request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the tool's arguments.
    pub parameters: serde_json::Value,
}

impl ToolSpec {
    /// The tool as logged in `session/settings`.
    pub fn to_offered(&self) -> OfferedTool {
        OfferedTool {
            name: self.name.clone(),
            description: Some(self.description.clone()),
            parameters: Some(self.parameters.clone()),
            extra: serde_json::Map::new(),
        }
    }

    /// The tool a `session/settings` offers: a missing description is
    /// empty, missing parameters are an object schema without properties.
    pub fn from_offered(tool: &OfferedTool) -> ToolSpec {
        ToolSpec {
            name: tool.name.clone(),
            description: tool.description.clone().unwrap_or_default(),
            parameters: tool
                .parameters
                .clone()
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        }
    }
}

/// What a request carries for a tool call's arguments: `raw` itself when it
/// is a JSON object, else `{}`.
///
/// The log keeps the raw string the model produced (contract section 1.2),
/// broken JSON included; a provider that validates history refuses a
/// request that repeats it, every turn after, and a summary request too.
/// So what goes on the wire is always a JSON object, and the call's
/// `tool/result` says the arguments were invalid (the loop runs no tool
/// with them). The one place this rule lives: [`ModelRequest::new`] applies
/// it, and provider crates call it when they write the wire format. See
/// `docs/contract-notes.md`, note 15.
///
/// ```
/// use palimpsest_core_agent_loop::wire_arguments;
///
/// assert_eq!(wire_arguments(r#"{"path": "a.txt"}"#), r#"{"path": "a.txt"}"#);
/// assert_eq!(wire_arguments(r#"{"path": "a.t"#), "{}");
/// assert_eq!(wire_arguments(""), "{}");
/// assert_eq!(wire_arguments("[1, 2]"), "{}");
/// ```
pub fn wire_arguments(raw: &str) -> &str {
    if arguments_error(raw).is_none() && !raw.trim().is_empty() {
        raw
    } else {
        "{}"
    }
}

/// What a request carries for a tool call's name: `name` itself when it is
/// 1 to 64 letters, digits, `_` or `-` (what OpenAI's API and the servers
/// that copy it accept), else every other character as `_`, cut to 64
/// characters (`unnamed_tool` for an empty name).
///
/// The log keeps the name the model produced; a strict provider refuses
/// a request whose history repeats a name outside that pattern
/// (`functions.read_file`), every turn after, so that one bad name left
/// the session unable to go on (an outside probe). The call's
/// `tool/result` already told the model the tool was unknown. As with
/// [`wire_arguments`], [`ModelRequest::new`] applies it and provider
/// crates call it when they write the wire format.
///
/// ```
/// use palimpsest_core_agent_loop::wire_tool_name;
///
/// assert_eq!(wire_tool_name("read_file"), "read_file");
/// assert_eq!(wire_tool_name("functions.read_file"), "functions_read_file");
/// assert_eq!(wire_tool_name(""), "unnamed_tool");
/// assert_eq!(wire_tool_name(&"x".repeat(100)).len(), 64);
/// ```
pub fn wire_tool_name(name: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if (1..=MAX_WIRE_TOOL_NAME).contains(&name.len()) && name.chars().all(allowed) {
        return std::borrow::Cow::Borrowed(name);
    }
    if name.is_empty() {
        return std::borrow::Cow::Borrowed("unnamed_tool");
    }
    let mapped: String =
        name.chars().map(|c| if allowed(c) { c } else { '_' }).take(MAX_WIRE_TOOL_NAME).collect();
    std::borrow::Cow::Owned(mapped)
}

/// The longest tool name [`wire_tool_name`] lets through.
const MAX_WIRE_TOOL_NAME: usize = 64;

/// Why `raw` is not acceptable tool-call arguments, or `None` when it is a
/// JSON object or blank (a call without arguments, which some models send
/// as an empty string; it goes on the wire as `{}`).
pub(crate) fn arguments_error(raw: &str) -> Option<String> {
    if raw.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        // The tool reads the last of a key named twice; what a person reads
        // may be the first (`{"path":"a","path":"../x"}`).
        Ok(serde_json::Value::Object(_)) => palimpsest_core_session::duplicate_key(raw)
            .map(|key| format!("they name the key {key:?} twice; name each key once")),
        Ok(other) => {
            let kind = match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            };
            Some(format!("they are {kind}, not a JSON object"))
        }
        Err(e) => Some(format!("they are not JSON: {e}")),
    }
}

/// `messages` with every tool-call block's arguments and name as
/// [`wire_arguments`] and [`wire_tool_name`] say; a message that needs no
/// change is moved, not copied.
fn wire_messages(messages: Vec<Message>) -> Vec<Message> {
    messages
        .into_iter()
        .map(|mut m| {
            for block in &mut m.content {
                if let Block::ToolCall { arguments, name, .. } = block {
                    let wire = wire_arguments(arguments);
                    if wire != arguments.as_str() {
                        *arguments = wire.to_owned();
                    }
                    if let std::borrow::Cow::Owned(wire) = wire_tool_name(name) {
                        *name = wire;
                    }
                }
            }
            m
        })
        .collect()
}

/// What the loop asks the model: the system prompt, the model, the derived
/// history and the tools it may call.
///
/// The loop builds it from the session's effective settings (contract
/// section 1.3) and the derived messages (section 3); see
/// [`AgentLoop::request_preview`](crate::AgentLoop::request_preview).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The system prompt.
    pub system: Option<String>,
    /// The model to ask for; `None` for the provider's own
    /// ([`Provider::model`]).
    pub model: Option<String>,
    /// The derived history (contract section 3), in surface order.
    pub messages: Vec<Message>,
    /// The tools the model may call, in registration order.
    pub tools: Vec<ToolSpec>,
    /// The output-token limit to ask for, if any.
    pub max_output_tokens: Option<u64>,
}

impl ModelRequest {
    /// A request with these messages and nothing else. Tool-call arguments
    /// that are not a JSON object are replaced by `{}` ([`wire_arguments`]),
    /// names outside `[A-Za-z0-9_-]{1,64}` mapped ([`wire_tool_name`]):
    /// what a request carries is always well-formed for the provider.
    pub fn new(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            system: None,
            model: None,
            messages: wire_messages(messages),
            tools: Vec::new(),
            max_output_tokens: None,
        }
    }

    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> ModelRequest {
        self.system = Some(system.into());
        self
    }

    /// Sets the model to ask for.
    pub fn with_model(mut self, model: impl Into<String>) -> ModelRequest {
        self.model = Some(model.into());
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> ModelRequest {
        self.tools = tools;
        self
    }

    /// Sets the output-token limit.
    pub fn with_max_output_tokens(mut self, limit: u64) -> ModelRequest {
        self.max_output_tokens = Some(limit);
        self
    }

    /// The ids of tool calls that providers would reject this request for:
    /// a `tool-call` block of an assistant message not answered by a
    /// `tool-result` block before the next assistant message, or a
    /// `tool-result` block that answers no earlier call. Empty for a
    /// provider-valid history.
    pub fn unpaired_tool_calls(&self) -> Vec<String> {
        let mut unpaired = Vec::new();
        let mut open: Vec<String> = Vec::new();
        for message in &self.messages {
            if message.role == Role::Assistant {
                unpaired.append(&mut open);
            }
            for block in &message.content {
                match block {
                    Block::ToolCall { id, .. } if message.role == Role::Assistant => open.push(id.clone()),
                    Block::ToolResult { tool_call_id, .. } => {
                        match open.iter().position(|c| c == tool_call_id) {
                            Some(i) => {
                                open.remove(i);
                            }
                            None => unpaired.push(tool_call_id.clone()),
                        }
                    }
                    _ => {}
                }
            }
        }
        unpaired.append(&mut open);
        unpaired
    }
}

/// A language model that streams responses.
///
/// Implement it for your provider's API; the loop holds an
/// `Arc<dyn Provider>`. [`ScriptedProvider`](crate::ScriptedProvider) is a
/// deterministic implementation for tests, examples and demos.
///
/// ```
/// use palimpsest_core_agent_loop::{BoxFuture, ChunkStream, ModelRequest, Provider, ProviderError};
///
/// #[derive(Debug)]
/// struct Offline;
///
/// impl Provider for Offline {
///     fn name(&self) -> &str { "offline" }
///     fn model(&self) -> &str { "none" }
///     fn stream(&self, _request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
///         Box::pin(async { Err(ProviderError::unavailable("no network")) })
///     }
/// }
/// let provider: std::sync::Arc<dyn Provider> = std::sync::Arc::new(Offline);
/// assert_eq!(provider.name(), "offline");
/// ```
///
/// A provider that answers: it streams two text pieces, a usage chunk and
/// its finish reason. A real one maps its API's events to
/// [`StreamItem`]s as they arrive (any `futures_core::Stream`, which this
/// crate re-exports as [`crate::futures_core`], boxed as a
/// [`ChunkStream`]); [`stream_from`] serves a response already at hand.
///
/// ```
/// use std::sync::Arc;
/// use palimpsest_core_agent_loop::prelude::*;
///
/// #[derive(Debug)]
/// struct Echo;
///
/// impl Provider for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn model(&self) -> &str { "echo-1" }
///     fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
///         let last = request.messages.last().map(Message::text).unwrap_or_default();
///         let (head, tail) = last.split_at(last.len() / 2);
///         let text = |t: &str| Ok(StreamItem::Chunk(StreamChunk::TextDelta { index: 0, text: t.to_owned() }));
///         let usage = Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() };
///         let items = vec![
///             text(head),
///             text(tail),
///             Ok(StreamItem::Chunk(StreamChunk::Usage(usage))),
///             Ok(StreamItem::Finish(FinishReason::Stop)),
///         ];
///         Box::pin(async move { Ok(stream_from(items)) })
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
/// let mut agent = AgentLoop::builder(Arc::new(Echo)).create(store, "echo-session")?;
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// let outcome = runtime.block_on(agent.run_turn(TurnInput::text("ping pong")))?;
/// assert_eq!(outcome.reason, TurnEndReason::Completed);
/// let history = agent.session().derive_messages();
/// assert_eq!(history[1].message.text(), "ping pong");
/// # Ok(())
/// # }
/// ```
pub trait Provider: Send + Sync + fmt::Debug {
    /// The provider's name, written into each assistant message's source.
    fn name(&self) -> &str;

    /// The model's name, written into each assistant message's source.
    fn model(&self) -> &str;

    /// Starts a response. An `Err` here means nothing was streamed.
    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>>;
}

/// A whole response, collected by [`complete`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The content blocks, assembled from the deltas as the loop does.
    pub content: Vec<Block>,
    /// The last usage chunk.
    pub usage: Option<Usage>,
    /// The last finish reason sent.
    pub finish: Option<FinishReason>,
}

impl Completion {
    /// The text blocks, concatenated.
    pub fn text(&self) -> String {
        Block::text_of(&self.content)
    }
}

/// Sends `request` and collects the whole response: for side requests that
/// are not turns, such as a compaction plugin's summarizer. Nothing is
/// logged; the caller records what it needs.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use palimpsest_core_agent_loop::{complete, ModelRequest, ScriptedProvider, ScriptedResponse};
///
/// let provider = ScriptedProvider::new([ScriptedResponse::reply("A short summary.")]);
/// let summary = complete(&provider, ModelRequest::new(vec![]).with_system("Summarize.")).await?;
/// assert_eq!(summary.text(), "A short summary.");
/// # Ok::<(), palimpsest_core_agent_loop::ProviderError>(())
/// # }).unwrap();
/// ```
pub async fn complete(provider: &dyn Provider, request: ModelRequest) -> Result<Completion, ProviderError> {
    let mut stream = provider.stream(request).await?;
    let mut assembler = Assembler::default();
    let mut finish = None;
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        match item? {
            StreamItem::Chunk(chunk) => assembler.push(&chunk),
            StreamItem::Finish(reason) => finish = Some(reason),
        }
    }
    let (content, usage) = assembler.finish();
    Ok(Completion { content, usage, finish })
}

/// A provider failed. The turn ends with `{"kind":"error"}` carrying
/// [`ProviderError::code`] and the `Display` text.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// `PROVIDER_UNAVAILABLE`: the provider could not be reached or failed on
    /// its side (network, 5xx, overload).
    #[error("provider unavailable: {message}")]
    Unavailable {
        /// What happened.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<SharedError>,
    },
    /// `PROVIDER_RATE_LIMITED`: too many requests.
    #[error("provider rate limit: {message}")]
    RateLimited {
        /// What happened.
        message: String,
        /// How long the provider asked to wait, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// `PROVIDER_REFUSED`: the provider rejected the request (bad request,
    /// context too long, authentication).
    #[error("provider refused the request: {message}")]
    Refused {
        /// What happened.
        message: String,
    },
    /// `PROVIDER_STREAM`: the stream broke or sent something unreadable.
    #[error("provider stream failed: {message}")]
    Stream {
        /// What happened.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<SharedError>,
    },
    /// Any other failure, with the provider's own stable code.
    #[error("{code}: {message}")]
    Other {
        /// A stable code (`SCREAMING_SNAKE_CASE` by convention).
        code: String,
        /// What happened.
        message: String,
    },
}

impl ProviderError {
    /// An [`Unavailable`](ProviderError::Unavailable) error without a source.
    pub fn unavailable(message: impl Into<String>) -> ProviderError {
        ProviderError::Unavailable { message: message.into(), source: None }
    }

    /// A [`Stream`](ProviderError::Stream) error without a source.
    pub fn stream(message: impl Into<String>) -> ProviderError {
        ProviderError::Stream { message: message.into(), source: None }
    }

    /// A [`Refused`](ProviderError::Refused) error.
    pub fn refused(message: impl Into<String>) -> ProviderError {
        ProviderError::Refused { message: message.into() }
    }

    /// An [`Other`](ProviderError::Other) error.
    pub fn other(code: impl Into<String>, message: impl Into<String>) -> ProviderError {
        ProviderError::Other { code: code.into(), message: message.into() }
    }

    /// The same error with its message passed through `f`: for a provider
    /// that must take something out of text a server sent (a secret the
    /// server echoed back) before it reaches the log.
    ///
    /// ```
    /// use palimpsest_core_agent_loop::ProviderError;
    /// let e = ProviderError::refused("bad key sk-123").map_message(|m| m.replace("sk-123", "***"));
    /// assert_eq!(e.to_string(), "provider refused the request: bad key ***");
    /// assert_eq!(e.code(), "PROVIDER_REFUSED");
    /// ```
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> ProviderError {
        match self {
            ProviderError::Unavailable { message, source } => {
                ProviderError::Unavailable { message: f(message), source }
            }
            ProviderError::RateLimited { message, retry_after_ms } => {
                ProviderError::RateLimited { message: f(message), retry_after_ms }
            }
            ProviderError::Refused { message } => ProviderError::Refused { message: f(message) },
            ProviderError::Stream { message, source } => {
                ProviderError::Stream { message: f(message), source }
            }
            ProviderError::Other { code, message } => ProviderError::Other { code, message: f(message) },
        }
    }

    /// The stable code written into the `turn/end` error.
    pub fn code(&self) -> &str {
        match self {
            ProviderError::Unavailable { .. } => "PROVIDER_UNAVAILABLE",
            ProviderError::RateLimited { .. } => "PROVIDER_RATE_LIMITED",
            ProviderError::Refused { .. } => "PROVIDER_REFUSED",
            ProviderError::Stream { .. } => "PROVIDER_STREAM",
            ProviderError::Other { code, .. } => code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::payload::Source;

    fn msg(role: Role, content: Vec<Block>) -> Message {
        Message { id: "m".into(), role, content, source: Source::User }
    }

    fn call(id: &str) -> Block {
        Block::ToolCall { id: id.into(), name: "t".into(), arguments: "{}".into() }
    }

    fn result(id: &str) -> Block {
        Block::ToolResult { tool_call_id: id.into(), is_error: false, content: vec![] }
    }

    #[test]
    fn unpaired_tool_calls_finds_missing_and_stray_results() {
        let ok = ModelRequest::new(vec![
            msg(Role::User, vec![Block::text("hi")]),
            msg(Role::Assistant, vec![call("a"), call("b")]),
            msg(Role::User, vec![result("b")]),
            msg(Role::User, vec![result("a")]),
            msg(Role::Assistant, vec![Block::text("done")]),
        ]);
        assert!(ok.unpaired_tool_calls().is_empty());

        let missing = ModelRequest::new(vec![
            msg(Role::Assistant, vec![call("a")]),
            msg(Role::Assistant, vec![Block::text("next")]),
        ]);
        assert_eq!(missing.unpaired_tool_calls(), ["a"]);

        let trailing = ModelRequest::new(vec![msg(Role::Assistant, vec![call("z")])]);
        assert_eq!(trailing.unpaired_tool_calls(), ["z"]);

        let stray = ModelRequest::new(vec![msg(Role::User, vec![result("x")])]);
        assert_eq!(stray.unpaired_tool_calls(), ["x"]);
    }

    #[test]
    fn provider_error_codes_are_stable() {
        assert_eq!(ProviderError::unavailable("x").code(), "PROVIDER_UNAVAILABLE");
        assert_eq!(ProviderError::stream("x").code(), "PROVIDER_STREAM");
        assert_eq!(ProviderError::refused("x").code(), "PROVIDER_REFUSED");
        assert_eq!(
            ProviderError::RateLimited { message: "x".into(), retry_after_ms: Some(5) }.code(),
            "PROVIDER_RATE_LIMITED"
        );
        assert_eq!(ProviderError::other("MY_CODE", "x").code(), "MY_CODE");
        let with_source = ProviderError::Unavailable {
            message: "connect".into(),
            source: Some(Arc::new(std::io::Error::other("refused"))),
        };
        let source = std::error::Error::source(&with_source).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("refused"));
    }
}
