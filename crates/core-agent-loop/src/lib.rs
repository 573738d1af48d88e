//! The Palimpsest agent loop: turns, steps, streamed chunks, tool calls and
//! their results, appended through a `dyn SessionStore` with the provenance
//! of contract section 4.
//!
//! # The key decision: log first, then act
//!
//! Streamed deltas are appended as `assistant/chunk` events, coalesced:
//! at most one event per content block per flush window
//! ([`AgentConfig::chunk_window_ms`], 50 ms by default), written once 256
//! bytes are pending, and at the latest ten windows (500 ms by default)
//! after the first pending delta arrived. Every `tool/call` is appended
//! before the tool runs; every result is appended alone as soon as it
//! exists. So at any instant the log says what happened up to that point
//! (give or take the streamed text of the last ten windows, which a crash
//! or a dropped future loses; `chunk_window_ms: 0` writes every delta as
//! it arrives), and a crash (or a dropped future, or a
//! failed store) leaves a log that is valid as written and that crash
//! repair (contract section 5) closes on the next open. The loop never
//! rewrites: history changes only by appends that pass the surface rules,
//! its own and its plugins' alike.
//!
//! # What a turn writes
//!
//! `turn/start` → `user/message` (with `data.turn`) → per step: `step/start`
//! → injected `steering/message`/`context/message` → plugin appends →
//! `assistant/chunk` × n (coalesced per flush window) → `assistant/message` citing exactly that step's
//! chunk seqs (`[]` for an empty stream), with the usage of the last usage
//! chunk → one `tool/call` per requested call → `tool/result` per call in
//! request order, each citing `[its tool/call seq]` → `step/end` → … →
//! `turn/end` with its reason. See [`AgentLoop::run_turn`].
//!
//! # Failures, and what the log says about each
//!
//! | what | in the log | `turn/end` reason |
//! |---|---|---|
//! | unknown tool | error `tool/result`, `error {name: UnknownTool, code: UNKNOWN_TOOL}`; the turn goes on | — |
//! | arguments that are not one JSON object, or name a key twice | error `tool/result`, `INVALID_ARGUMENTS`; the tool is not run | — |
//! | more calls in one response than [`AgentConfig::max_tool_calls_per_step`] | the first ones run; the others get `TOO_MANY_TOOL_CALLS` error results | — |
//! | tool error / panic | error `tool/result` with the tool's name and code (`TOOL_PANICKED` for a panic); the turn goes on | — |
//! | provider error before the stream | nothing more in the step | `error`, code from [`ProviderError::code`] |
//! | provider error mid-stream | the chunks; the prefix as an `assistant/message` with `interrupted: true`; its calls get a `tool/call` and a `STREAM_FAILED` error result | `error` |
//! | a streamed response, one call's arguments or the number of calls pass their cap ([`StreamCaps`]) | as a provider error mid-stream: the chunks before the one that passed it, the interrupted prefix, `STREAM_FAILED` results for its calls; the stream is dropped at once | `error`, code `RESPONSE_TOO_LARGE` or `TOOL_ARGUMENTS_TOO_LARGE` |
//! | cancellation mid-stream | same, with `CANCELLED` error results | `aborted` (`reason: "cancelled"`) |
//! | cancellation while tools run | finished calls keep their results; unfinished ones get `CANCELLED` error results | `aborted` |
//! | output-token limit ([`FinishReason::MaxTokens`]) | the message; its calls get `OUTPUT_TRUNCATED` error results, none runs | `max-tokens` |
//! | step limit ([`AgentConfig::max_steps`]) | the last allowed step closes normally | `error`, code `STEP_LIMIT` |
//! | a plugin hook fails | what it appended before failing | `error`, code `PLUGIN_FAILED` |
//! | the store fails, or an append is refused | as far as it got; `run_turn` returns `Err` | none yet: repaired before the next turn |
//!
//! **Partial responses.** When a stream stops early (error or
//! cancellation) after delivering at least one chunk, the loop writes the
//! delivered prefix as an `assistant/message` with `interrupted: true`,
//! citing those chunks. So every chunk in the log is cited by its step's
//! message, the derived history shows what the user saw streamed, and any
//! tool call in the prefix is answered, keeping the next request
//! provider-valid. When no chunk was delivered, no `assistant/message` is
//! written: `sourceEventSeqs: []` would claim a known empty stream.
//!
//! **Every result cites its call.** Calls that are never run (cancelled,
//! cut by the token limit, in a failed stream) still get a `tool/call`
//! event first, so every `tool/result` the loop writes cites
//! `[its tool/call seq]` (contract section 4). Only crash repair writes the
//! `TOOL_NOT_STARTED` form.
//!
//! # Resume
//!
//! [`AgentLoopBuilder::open`] checks the stored log (and the invariants in
//! dev mode) and, if the last turn is open, appends the repair closers as
//! one batch before anything else. The loop does the same before a turn
//! when an earlier `run_turn` was dropped or failed mid-turn.
//!
//! # Durability and I/O
//!
//! Appends go through [`DurableSession`](palimpsest_persistence::DurableSession):
//! the session's rules, then the store, then memory. Natural groups are one
//! batch (`turn/start` with the user message, a message with its calls, a
//! failed step's closers with `turn/end`, the repair closers). With the
//! default [`Durability::TurnBoundary`](palimpsest_persistence::Durability)
//! the store syncs at each `turn/end`. Store calls are synchronous; on a
//! multi-threaded tokio runtime they run in
//! [`block_in_place`](tokio::task::block_in_place), so a slow store (a
//! network database) does not stall the runtime's other tasks.
//!
//! # Runtime requirements
//!
//! [`AgentLoop::run_turn`] is a future that needs a tokio runtime with the
//! time driver enabled (`enable_time()` or `enable_all()`: the chunk flush
//! window is a timer). A multi-threaded runtime is recommended whenever
//! the store can be slow; on a current-thread runtime store writes run
//! inline and hold up other tasks while they wait. Building and opening a
//! loop (`create`, `open`) needs no runtime. The crate enables tokio's
//! `rt`, `rt-multi-thread`, `sync`, `macros` and `time` features.
//!
//! # One import: the prelude
//!
//! An agent author needs types from four crates; [`prelude`] re-exports
//! them without the name clashes (`payload::ToolError` and
//! `payload::ToolCall` stay out of it):
//!
//! ```
//! use palimpsest_core_agent_loop::prelude::*;
//!
//! let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(MemoryStore::default());
//! let reply = Message::assistant("a1", "Hi!", "scripted", "scripted-1");
//! assert_eq!(reply.role, Role::Assistant);
//! # drop(store);
//! ```
//!
//! # Determinism
//!
//! Times come from a [`Clock`] and message ids from an [`IdGenerator`],
//! each read in a fixed order; with [`ManualClock`], [`SequentialIds`] and
//! a [`ScriptedProvider`] a run writes the same bytes every time.
//!
//! # Observability
//!
//! A `turn` span (`session_id`, `turn`, `first_seq`, `last_seq`, `reason`)
//! wraps each turn and a `step` span (`turn`, `step`, `first_seq`,
//! `last_seq`) each step; appends are `trace` events with `seq`. The
//! library never prints and installs no subscriber.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use palimpsest_core_agent_loop::{AgentLoop, ScriptedProvider, ScriptedResponse, TurnInput};
//! use palimpsest_core_session::payload::TurnEndReason;
//! use palimpsest_persistence::{MemoryStore, SessionStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Hello!").usage(12, 3)]));
//! let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
//! let mut agent = AgentLoop::builder(provider).create(store.clone(), "s1")?;
//!
//! // The loop needs tokio's time driver (flush windows, retries): enable it.
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let outcome = runtime.block_on(agent.run_turn(TurnInput::text("hi")))?;
//!
//! assert_eq!(outcome.reason, TurnEndReason::Completed);
//! assert_eq!(outcome.usage.output_tokens, 3);
//! // turn/start, user/message, step/start, 2 chunks, assistant/message, step/end, turn/end
//! assert_eq!(store.load("s1")?.events.len(), 8);
//! let history = agent.session().derive_messages();
//! assert_eq!(history.len(), 2);
//! // The assistant message cites its two chunks.
//! assert_eq!(history[1].source_event_seqs, Some(&[3, 4][..]));
//! # Ok(())
//! # }
//! ```

mod agent;
mod assemble;
mod builder;
mod call_ids;
mod caps;
mod clock;
mod coalesce;
mod config;
mod dev;
mod error;
mod exec;
mod inject;
mod plugin;
pub mod plugins;
mod provider;
mod scripted;
mod state;
mod tool;

pub use agent::{AgentLoop, HooksRun, TurnInput, TurnOutcome, PROVIDER_CALL_ID};
pub use builder::{AgentLoopBuilder, OpenReport, DEFAULT_HOLD_TTL};
pub use caps::{
    StreamCaps, CHUNK_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOOL_ARGUMENTS_BYTES,
    DEFAULT_MAX_TOOL_CALLS, DEFAULT_MAX_TOOL_RESULT_BYTES,
};
pub use clock::{Clock, IdGenerator, ManualClock, SequentialIds, SystemClock, UniqueIds};
pub use config::{AgentConfig, DEFAULT_CHUNK_WINDOW_MS, DEFAULT_MAX_TOOL_CALLS_PER_STEP};
pub use dev::DevMode;
pub use error::LoopError;
/// Re-exported: the `Stream` trait a [`ChunkStream`] boxes, for a provider
/// that streams as it receives (implement `futures_core::Stream` for its
/// own type and box it) without a dependency of its own that must match.
pub use futures_core;
pub use inject::{Injection, InjectionKind, LoopGone, SteeringHandle};
pub use plugin::{Plugin, PluginContext, PluginError, StepSummary, TurnPosition};
pub use provider::{
    complete, stream_from, wire_arguments, wire_tool_name, BoxFuture, ChunkStream, Completion, FinishReason,
    ModelRequest, Provider, ProviderError, SharedError, StreamItem, ToolSpec,
};
pub use scripted::{ScriptedProvider, ScriptedResponse, SCRIPT_EXHAUSTED};
/// Re-exported: the token that cancels a turn ([`TurnInput::with_cancel`]).
pub use tokio_util::sync::CancellationToken;
pub use tool::{FnTool, Tool, ToolContext, ToolError, ToolRegistry};

/// Everything an agent author needs, from this crate and the three below
/// it, in one glob import without name clashes: the loop and its builder,
/// providers and streams, tools, the session payloads a provider or tool
/// builds, and the stores.
///
/// ```
/// use std::sync::Arc;
/// use palimpsest_core_agent_loop::prelude::*;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
/// let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Hi.")]));
/// let config = AgentConfig::default().with_dev_mode(DevMode::On);
/// let mut agent = AgentLoop::builder(provider).config(config).create(store.clone(), "s1")?;
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// let outcome: Result<TurnOutcome, LoopError> = runtime.block_on(agent.run_turn(TurnInput::text("hello")));
/// assert_eq!(outcome?.reason, TurnEndReason::Completed);
/// // What another process would read back.
/// let (session, _report) = load_session(store.as_ref(), "s1", None)?;
/// assert_eq!(session.events(), agent.session().events());
/// # let _ = SurfaceIntent::append();
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use crate::{
        stream_from, AgentConfig, AgentLoop, AgentLoopBuilder, BoxFuture, CancellationToken, ChunkStream,
        Completion, DevMode, FinishReason, FnTool, LoopError, ModelRequest, Plugin, PluginContext, Provider,
        ProviderError, ScriptedProvider, ScriptedResponse, StreamItem, Tool, ToolContext, ToolError,
        ToolRegistry, ToolSpec, TurnInput, TurnOutcome,
    };
    pub use palimpsest_core_session::payload::{
        Block, Message, Role, Source, StreamChunk, TurnEndReason, Usage,
    };
    pub use palimpsest_core_session::{Event, Session, SessionHeader, SurfaceIntent};
    pub use palimpsest_persistence::{
        load_session, Durability, DurableError, DurableSession, MemoryStore, SessionStore, StoreError,
    };
}

/// The stable codes the loop writes into the log: `tool/result`
/// `data.error.code`, and the `turn/end` error code for failures that are
/// not the provider's (those use [`ProviderError::code`]).
pub mod codes {
    /// A call to a tool the registry does not have (error name `UnknownTool`).
    pub const UNKNOWN_TOOL: &str = "UNKNOWN_TOOL";
    /// The tool panicked (error name `ToolPanicked`).
    pub const TOOL_PANICKED: &str = "TOOL_PANICKED";
    /// The turn was cancelled before the call finished (error name `Cancelled`).
    pub const CANCELLED: &str = "CANCELLED";
    /// The response hit the output-token limit; the call was not run (error
    /// name `OutputTruncated`).
    pub const OUTPUT_TRUNCATED: &str = "OUTPUT_TRUNCATED";
    /// The response's stream failed; the call was not run (error name
    /// `StreamFailed`).
    pub const STREAM_FAILED: &str = "STREAM_FAILED";
    /// `turn/end` error code: the turn reached [`AgentConfig::max_steps`](crate::AgentConfig::max_steps).
    pub const STEP_LIMIT: &str = "STEP_LIMIT";
    /// `turn/end` error code: a streamed response passed
    /// [`StreamCaps::max_response_bytes`](crate::StreamCaps::max_response_bytes);
    /// the stream was ended there.
    pub const RESPONSE_TOO_LARGE: &str = "RESPONSE_TOO_LARGE";
    /// `turn/end` error code: a streamed tool call's arguments passed
    /// [`StreamCaps::max_tool_arguments_bytes`](crate::StreamCaps::max_tool_arguments_bytes);
    /// the stream was ended there.
    pub const TOOL_ARGUMENTS_TOO_LARGE: &str = "TOOL_ARGUMENTS_TOO_LARGE";
    /// The tool's result was over
    /// [`AgentConfig::max_tool_result_bytes`](crate::AgentConfig::max_tool_result_bytes)
    /// and was not logged (error name `ToolResultTooLarge`).
    pub const TOOL_RESULT_TOO_LARGE: &str = "TOOL_RESULT_TOO_LARGE";
    /// The call was past [`AgentConfig::max_tool_calls_per_step`](crate::AgentConfig::max_tool_calls_per_step)
    /// and was not run (error name `TooManyToolCalls`).
    pub const TOO_MANY_TOOL_CALLS: &str = "TOO_MANY_TOOL_CALLS";
    /// The tool's result could not be logged: it held an image whose data
    /// is not base64 (contract note 25), or nested its blocks past the
    /// log's nesting limit (error name `ToolResultInvalid`).
    pub const TOOL_RESULT_INVALID: &str = "TOOL_RESULT_INVALID";
    /// `turn/end` error code: a plugin hook failed.
    pub const PLUGIN_FAILED: &str = "PLUGIN_FAILED";
    /// The `reason` of an `aborted` turn end written on cancellation.
    pub const ABORT_REASON: &str = "cancelled";
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
