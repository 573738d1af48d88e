//! [`AgentLoop`]: turns and steps, written to the log with the provenance of
//! contract section 4.
//!
//! # One turn
//!
//! ```text
//! turn/start, user/message                       (one batch)
//! step 1..:
//!   step/start, injected steering/context        (one batch)
//!   before_request hooks                         (plugin appends)
//!   assistant/chunk × n                          (one append per flush window: a chunk per block)
//!   assistant/message [+ tool/call × k]          (one batch; cites the step's chunks)
//!   tool/result × k                              (one append each, in request order, as the prefix completes)
//!   step/end
//!   after_step hooks
//! turn/end                                       (with the failure closers, when there are)
//! ```
//!
//! The model's answer without tool calls ends the turn (`completed`),
//! unless steering is waiting, which buys one more step.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::ops::Range;
use std::sync::Arc;

use crate::caps::{StreamBudget, StreamCaps};
use palimpsest_core_session::payload::{
    AssistantChunk, AssistantMessage, Block, ContextMessage, ErrorInfo, Message, Role, SessionSettings,
    Settings, Source, SteeringMessage, StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnEndReason,
    TurnStart, Usage, UserMessage,
};
use palimpsest_core_session::{repair, Event, EventType, Session, SessionHeader, SurfaceIntent};
use palimpsest_persistence::{Durability, DurableSession, LoadReport, SessionStore};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::assemble::Assembler;
use crate::call_ids::CallIds;
use crate::clock::{Clock, IdGenerator, SystemClock, UniqueIds};
use crate::coalesce::Coalescer;
use crate::codes;
use crate::dev::{dev_guard, DevMode};
use crate::error::LoopError;
use crate::exec::{groups, poll_running, Slot};
use crate::inject::{Injection, InjectionKind, SteeringHandle};
use crate::plugin::{Plugin, PluginContext, PluginError, StepSummary, TurnPosition};
use crate::provider::{
    arguments_error, ChunkStream, FinishReason, ModelRequest, Provider, ProviderError, StreamItem,
};
use crate::state::{Batch, LoopCore};
use crate::tool::{Tool, ToolContext, ToolError, ToolRegistry};

/// The default [`AgentConfig::chunk_window_ms`].
pub const DEFAULT_CHUNK_WINDOW_MS: u64 = 50;

/// How a loop behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The system prompt of every request.
    pub system_prompt: Option<String>,
    /// Most steps in one turn. A turn that needs more ends with
    /// `{"kind":"error","error":{"code":"STEP_LIMIT",..}}` after its last
    /// allowed step closed (every tool call answered). Default 32.
    pub max_steps: u64,
    /// The output-token limit put into each request.
    pub max_output_tokens: Option<u64>,
    /// Whether the invariants guard checks every append (and the stored log
    /// on open). Default: [`DevMode::from_env`].
    pub dev_mode: DevMode,
    /// When appends are synced. Default: at turn boundaries.
    pub durability: Durability,
    /// Caps on one streamed response. Default: [`StreamCaps::default`].
    pub stream_caps: StreamCaps,
    /// The flush window of streamed deltas, in milliseconds: each window
    /// writes at most one `assistant/chunk` per content block, once 256
    /// bytes are pending, or ten windows after the first pending delta at
    /// the latest (see `coalesce.rs`). Default 50; 0 writes one event per
    /// delta.
    pub chunk_window_ms: u64,
    /// Most bytes of one tool's result, as the JSON of its content blocks.
    /// A larger result, from any [`Tool`](crate::Tool), is not logged: the
    /// call is answered with a `TOOL_RESULT_TOO_LARGE` error instead, so
    /// every `tool/result` fits the format's event limit. Default:
    /// [`DEFAULT_MAX_TOOL_RESULT_BYTES`](crate::DEFAULT_MAX_TOOL_RESULT_BYTES).
    pub max_tool_result_bytes: usize,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            system_prompt: None,
            max_steps: 32,
            max_output_tokens: None,
            dev_mode: DevMode::from_env(),
            durability: Durability::TurnBoundary,
            stream_caps: StreamCaps::default(),
            chunk_window_ms: DEFAULT_CHUNK_WINDOW_MS,
            max_tool_result_bytes: crate::caps::DEFAULT_MAX_TOOL_RESULT_BYTES,
        }
    }
}

impl AgentConfig {
    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> AgentConfig {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the step limit per turn.
    pub fn with_max_steps(mut self, max_steps: u64) -> AgentConfig {
        self.max_steps = max_steps;
        self
    }

    /// Sets the output-token limit of each request.
    pub fn with_max_output_tokens(mut self, limit: u64) -> AgentConfig {
        self.max_output_tokens = Some(limit);
        self
    }

    /// Sets dev mode.
    pub fn with_dev_mode(mut self, dev_mode: DevMode) -> AgentConfig {
        self.dev_mode = dev_mode;
        self
    }

    /// Sets the flush window of streamed deltas (0: one event per delta).
    pub fn with_chunk_window_ms(mut self, window_ms: u64) -> AgentConfig {
        self.chunk_window_ms = window_ms;
        self
    }

    /// Sets [`max_tool_result_bytes`](AgentConfig::max_tool_result_bytes).
    pub fn with_max_tool_result_bytes(mut self, max_bytes: usize) -> AgentConfig {
        self.max_tool_result_bytes = max_bytes;
        self
    }

    /// Sets the durability policy.
    pub fn with_durability(mut self, durability: Durability) -> AgentConfig {
        self.durability = durability;
        self
    }

    /// Sets the caps on a streamed response.
    pub fn with_stream_caps(mut self, caps: StreamCaps) -> AgentConfig {
        self.stream_caps = caps;
        self
    }
}

/// The user's input for one turn, and the token that cancels it.
#[derive(Debug, Clone)]
pub struct TurnInput {
    content: Vec<Block>,
    cancel: CancellationToken,
}

impl TurnInput {
    /// Input made of these blocks.
    pub fn new(content: Vec<Block>) -> TurnInput {
        TurnInput { content, cancel: CancellationToken::new() }
    }

    /// Text input.
    pub fn text(text: impl Into<String>) -> TurnInput {
        TurnInput::new(vec![Block::text(text)])
    }

    /// Cancels the turn when `token` is cancelled: the turn ends `aborted`
    /// with everything streamed so far kept (see the crate docs).
    pub fn with_cancel(mut self, token: CancellationToken) -> TurnInput {
        self.cancel = token;
        self
    }
}

/// How a turn went.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The turn number.
    pub turn: u64,
    /// The reason written into `turn/end`.
    pub reason: TurnEndReason,
    /// How many steps it took.
    pub steps: u64,
    /// Seqs of the turn, from `turn/start` through `turn/end`.
    pub seqs: Range<u64>,
    /// Usage summed over the turn's responses.
    pub usage: Usage,
    /// The turn's last assistant message, if any.
    pub message: Option<Message>,
    /// Repair closers appended before the turn started (an earlier turn was
    /// left open by a crash, a dropped `run_turn` or a store failure).
    pub repaired: Option<Range<u64>>,
}

/// What opening a session found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// What the store's load found (a torn tail, for instance).
    pub load: LoadReport,
    /// The repair closers appended because the last turn was open.
    pub repaired: Option<Range<u64>>,
}

/// Builds an [`AgentLoop`]: wire the provider, tools, plugins, config,
/// clock and ids, then create or open a session.
pub struct AgentLoopBuilder {
    provider: Arc<dyn Provider>,
    settings: Option<Settings>,
    tools: ToolRegistry,
    plugins: Vec<Box<dyn Plugin>>,
    config: AgentConfig,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
}

impl AgentLoopBuilder {
    /// Sets the tool registry.
    pub fn tools(mut self, tools: ToolRegistry) -> AgentLoopBuilder {
        self.tools = tools;
        self
    }

    /// Adds one tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> AgentLoopBuilder {
        self.tools.insert(Arc::new(tool));
        self
    }

    /// Adds a plugin. Hooks run in the order plugins were added.
    pub fn plugin(self, plugin: impl Plugin + 'static) -> AgentLoopBuilder {
        self.boxed_plugin(Box::new(plugin))
    }

    /// Adds a boxed plugin.
    pub fn boxed_plugin(mut self, plugin: Box<dyn Plugin>) -> AgentLoopBuilder {
        self.plugins.push(plugin);
        self
    }

    /// The settings this loop makes its requests with (contract section
    /// 1.3). They are logged as a `session/settings` event when the session
    /// is created, and when an opened session's effective settings differ
    /// (after any repair, before the next turn). Without them, the loop
    /// logs no settings and an opened session keeps its logged ones.
    ///
    /// Never put a secret here: the settings are written to the log.
    pub fn settings(mut self, settings: Settings) -> AgentLoopBuilder {
        self.settings = Some(settings);
        self
    }

    /// Sets the config.
    pub fn config(mut self, config: AgentConfig) -> AgentLoopBuilder {
        self.config = config;
        self
    }

    /// Sets the clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> AgentLoopBuilder {
        self.clock = clock;
        self
    }

    /// Sets the message id generator (default: [`UniqueIds`]).
    pub fn ids(mut self, ids: Arc<dyn IdGenerator>) -> AgentLoopBuilder {
        self.ids = ids;
        self
    }

    /// Creates a new session `session_id` in `store`, created now.
    pub fn create(
        self,
        store: Arc<dyn SessionStore>,
        session_id: impl Into<String>,
    ) -> Result<AgentLoop, LoopError> {
        let header = SessionHeader::new(session_id, self.clock.now_ms());
        self.create_with_header(store, header)
    }

    /// Creates a new session with this header in `store`.
    pub fn create_with_header(
        self,
        store: Arc<dyn SessionStore>,
        header: SessionHeader,
    ) -> Result<AgentLoop, LoopError> {
        let id = header.id.clone();
        let mut session = DurableSession::create(store, header, self.config.durability)
            .map_err(|source| LoopError::Session { session_id: id, source: Box::new(source) })?;
        if let Some(guard) = dev_guard(self.config.dev_mode) {
            session.set_guard(Some(guard));
        }
        let settings = self.settings.clone();
        let mut agent = self.build(session);
        if let Some(settings) = settings {
            agent.set_settings(settings)?;
        }
        Ok(agent)
    }

    /// Opens stored session `session_id`, checking every rule on the way
    /// (and the invariants in dev mode). If its last turn is open (a crash),
    /// appends the repair closers of contract section 5 first, so the next
    /// request is provider-valid.
    pub fn open(
        self,
        store: Arc<dyn SessionStore>,
        session_id: &str,
    ) -> Result<(AgentLoop, OpenReport), LoopError> {
        let guard = dev_guard(self.config.dev_mode);
        let (session, load) =
            DurableSession::open_guarded(store, session_id, self.config.durability, guard).map_err(
                |source| LoopError::Session { session_id: session_id.to_owned(), source: Box::new(source) },
            )?;
        let settings = self.settings.clone();
        let mut agent = self.build(session);
        let repaired = agent.repair_open_turn()?;
        if let Some(settings) = settings {
            agent.set_settings(settings)?;
        }
        Ok((agent, OpenReport { load, repaired }))
    }

    /// Wraps a session opened elsewhere (its log is taken as already
    /// checked), repairing an open last turn like [`open`](Self::open). In
    /// dev mode the invariants guard replaces any guard it had.
    pub fn attach(self, mut session: DurableSession) -> Result<(AgentLoop, OpenReport), LoopError> {
        if let Some(guard) = dev_guard(self.config.dev_mode) {
            session.set_guard(Some(guard));
        }
        let settings = self.settings.clone();
        let mut agent = self.build(session);
        let repaired = agent.repair_open_turn()?;
        if let Some(settings) = settings {
            agent.set_settings(settings)?;
        }
        Ok((agent, OpenReport { load: LoadReport::default(), repaired }))
    }

    fn build(self, session: DurableSession) -> AgentLoop {
        let events = session.session().events();
        let last_turn = events
            .iter()
            .filter(|e| *e.event_type() == EventType::TurnStart)
            .filter_map(|e| e.data_as::<TurnStart>().ok())
            .map(|t| t.turn)
            .max()
            .unwrap_or(0);
        let turn_open = repair::needs_repair(events);
        let call_ids = CallIds::from_log(events);
        let (inject_tx, inject_rx) = mpsc::unbounded_channel();
        AgentLoop {
            core: LoopCore {
                session,
                provider: self.provider,
                tools: self.tools,
                config: self.config,
                clock: self.clock,
                ids: self.ids,
            },
            plugins: self.plugins,
            inject_tx,
            inject_rx,
            queued: VecDeque::new(),
            last_turn,
            turn_open,
            call_ids,
        }
    }
}

impl std::fmt::Debug for AgentLoopBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoopBuilder")
            .field("provider", &self.provider)
            .field("settings", &self.settings)
            .field("tools", &self.tools)
            .field("plugins", &self.plugins.iter().map(|p| p.name()).collect::<Vec<_>>())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The agent loop over one session. See the crate docs for what it writes.
pub struct AgentLoop {
    core: LoopCore,
    plugins: Vec<Box<dyn Plugin>>,
    inject_tx: mpsc::UnboundedSender<Injection>,
    inject_rx: mpsc::UnboundedReceiver<Injection>,
    /// Injections taken off the channel, waiting for the next step.
    queued: VecDeque<Injection>,
    last_turn: u64,
    /// The log ends inside a turn: repair before anything else is appended.
    turn_open: bool,
    /// Every tool-call id the session has used: a new call never reuses one.
    call_ids: CallIds,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("session_id", &self.core.session_id())
            .field("next_seq", &self.core.next_seq())
            .field("last_turn", &self.last_turn)
            .field("turn_open", &self.turn_open)
            .field("plugins", &self.plugins.iter().map(|p| p.name()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The `tool/call` key that keeps the provider's id of a call whose id the
/// loop replaced: a repeated, reused or missing id gets one unique in the
/// session before the call runs (`docs/contract-notes.md`, note 14).
pub const PROVIDER_CALL_ID: &str = "providerCallId";

/// Why a stream stopped.
enum Stop {
    Done,
    Cancelled,
    Failed(ProviderError),
}

/// What the turn does after a step.
enum Next {
    Continue,
    End(TurnEndReason),
}

/// A step's result. The closers are not yet committed: a cut-short step's
/// closers and `turn/end` go into the log as one batch.
enum StepResult {
    /// Cancelled, or failed: the closers end with `step/end`; the turn ends.
    CutShort { closers: Batch, reason: TurnEndReason },
    /// The response completed: commit the closers, run the `after_step`
    /// hooks, then go on as `next` says.
    Completed { closers: Batch, next: Next, summary: StepSummary },
}

/// A call the model requested.
struct Call {
    /// The id the log and every later request use (unique in the session).
    id: String,
    /// The provider's id, when it was repeated or missing and so replaced.
    provider_id: Option<String>,
    name: String,
    arguments: String,
}

/// The turn being run.
struct TurnState {
    turn: u64,
    turn_start_seq: u64,
    step: u64,
    usage: Usage,
    message: Option<Message>,
}

impl TurnState {
    fn position(&self) -> TurnPosition {
        TurnPosition { turn: self.turn, step: self.step, turn_start_seq: self.turn_start_seq }
    }
}

/// What [`AgentLoop::run_request_hooks`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HooksRun {
    /// The seqs the plugins appended (empty when none did).
    pub seqs: Range<u64>,
    /// Why a plugin stopped the hooks, if one failed.
    pub failure: Option<String>,
    /// Whether the cancellation token stopped them.
    pub cancelled: bool,
}

#[derive(Clone, Copy)]
enum Hook<'h> {
    BeforeRequest,
    AfterStep(&'h StepSummary),
}

fn aborted() -> TurnEndReason {
    TurnEndReason::Aborted { reason: codes::ABORT_REASON.into() }
}

fn error_reason(code: &str, message: String) -> TurnEndReason {
    TurnEndReason::Error { error: ErrorInfo { message, code: code.into() } }
}

/// How much of invalid arguments the error result quotes back.
const QUOTED_ARGUMENTS_CHARS: usize = 2_000;

/// The result of a call whose arguments are not a JSON object: the tool is
/// not run, and the model learns why and what it sent (the request carries
/// `{}` in its place, see [`wire_arguments`](crate::wire_arguments)).
fn invalid_arguments(raw: &str, why: &str) -> ToolError {
    let quoted: String = raw.chars().take(QUOTED_ARGUMENTS_CHARS).collect();
    let clipped = if quoted.len() < raw.len() { " (clipped)" } else { "" };
    ToolError::invalid_arguments(format!(
        "The arguments of this call are invalid: {why}. The tool was not run. \
         The arguments you sent{clipped}: {quoted}"
    ))
}

fn reason_kind(reason: &TurnEndReason) -> &'static str {
    match reason {
        TurnEndReason::Completed => "completed",
        TurnEndReason::Aborted { .. } => "aborted",
        TurnEndReason::Error { .. } => "error",
        TurnEndReason::MaxTokens => "max-tokens",
        TurnEndReason::Interrupted => "interrupted",
    }
}

fn add_usage(total: &mut Usage, u: &Usage) {
    fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
        match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        }
    }
    total.input_tokens = total.input_tokens.saturating_add(u.input_tokens);
    total.output_tokens = total.output_tokens.saturating_add(u.output_tokens);
    total.cached_input_tokens = add(total.cached_input_tokens, u.cached_input_tokens);
    total.reasoning_tokens = add(total.reasoning_tokens, u.reasoning_tokens);
}

/// Waits until `deadline`, or forever when there is none.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_item(stream: &mut ChunkStream<'_>) -> Option<Result<StreamItem, ProviderError>> {
    poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}

impl AgentLoop {
    /// Starts building a loop around `provider`.
    pub fn builder(provider: Arc<dyn Provider>) -> AgentLoopBuilder {
        AgentLoopBuilder {
            provider,
            settings: None,
            tools: ToolRegistry::new(),
            plugins: Vec::new(),
            config: AgentConfig::default(),
            clock: Arc::new(SystemClock),
            ids: Arc::new(UniqueIds::default()),
        }
    }

    /// The session: log, surface, derived messages.
    pub fn session(&self) -> &Session {
        self.core.session.session()
    }

    /// The durable session (store and durability policy).
    pub fn durable_session(&self) -> &DurableSession {
        &self.core.session
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        self.core.session_id()
    }

    /// The config.
    pub fn config(&self) -> &AgentConfig {
        &self.core.config
    }

    /// The number of the last turn started (0 before the first).
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// A handle that injects steering and context from any task.
    pub fn steering_handle(&self) -> SteeringHandle {
        SteeringHandle { tx: self.inject_tx.clone() }
    }

    /// The request the model would get now.
    pub fn request_preview(&self) -> ModelRequest {
        self.core.request()
    }

    /// The session's effective settings (contract section 1.3): those of
    /// its last `session/settings` event, empty before the first.
    pub fn settings(&self) -> Settings {
        self.session().settings()
    }

    /// Makes `settings` the session's settings from the next request on:
    /// appends a `session/settings` event stating them whole, unless they
    /// are already the effective ones. Between turns only (repairing an
    /// open turn first), so never inside a step. Returns the event's seq,
    /// `None` when nothing changed.
    ///
    /// Never put a secret here: the settings are written to the log.
    pub fn set_settings(&mut self, settings: Settings) -> Result<Option<u64>, LoopError> {
        self.repair_open_turn()?;
        // Before the first event the settings are `{}`: stating `{}` changes nothing.
        if self.session().settings() == settings {
            return Ok(None);
        }
        let mut batch = Batch::new(&self.core);
        let seq = batch.log(&self.core, SessionSettings { settings })?;
        self.commit(batch)?;
        tracing::info!(session_id = %self.session_id(), seq, "logged new settings");
        Ok(Some(seq))
    }

    /// Appends a `context/message` now, between turns (repairing an open
    /// turn first). During a turn, use a [`SteeringHandle`].
    pub fn append_context(&mut self, content: Vec<Block>, source: Source) -> Result<u64, LoopError> {
        self.repair_open_turn()?;
        let mut batch = Batch::new(&self.core);
        let message = Message { id: self.core.ids.next_id(), role: Role::User, content, source };
        let seq = batch.surface(&self.core, ContextMessage { message }, SurfaceIntent::append())?;
        self.commit(batch)?;
        Ok(seq)
    }

    /// Runs the plugins' `before_request` hooks now, between turns
    /// (repairing an open turn first), as they run before each request:
    /// tool-result pruning and compaction, whatever is due. A compaction
    /// asked for with [`CompactionTrigger::request`](crate::plugins::CompactionTrigger::request)
    /// happens here, whatever the estimate. The hooks see the position of
    /// the last turn (0 before the first) at step 0, with `turn_start_seq`
    /// the seq the next event gets.
    ///
    /// Returns the seqs the plugins appended, and the failure that stopped
    /// them, if one did (between turns there is no turn for it to end; it
    /// is also logged with `tracing`). Cancelling `cancel` stops the hook
    /// that is running (a compaction then leaves its `compaction/start`
    /// unmatched, which the next one recognises). `Err` is a store failure.
    pub async fn run_request_hooks(&mut self, cancel: &CancellationToken) -> Result<HooksRun, LoopError> {
        self.repair_open_turn()?;
        let first = self.core.next_seq();
        let position = TurnPosition { turn: self.last_turn, step: 0, turn_start_seq: first };
        let (failure, cancelled) = match self.run_hooks(Hook::BeforeRequest, position, cancel).await? {
            None => (None, false),
            Some(TurnEndReason::Error { error }) => (Some(error.message), false),
            Some(_) => (None, true),
        };
        Ok(HooksRun { seqs: first..self.core.next_seq(), failure, cancelled })
    }

    /// Makes everything appended so far durable.
    pub fn flush(&mut self) -> Result<(), LoopError> {
        self.core.session.flush().map_err(|e| self.core.error(e))
    }

    /// Consumes the loop, returning the durable session.
    pub fn into_session(self) -> DurableSession {
        self.core.session
    }

    /// If the log ends inside a turn, appends the repair closers (contract
    /// section 5) as one batch and returns their seqs. The loop does this
    /// itself on open and before each turn; a no-op on a balanced log.
    pub fn repair_open_turn(&mut self) -> Result<Option<Range<u64>>, LoopError> {
        if !self.turn_open {
            return Ok(None);
        }
        let closers = repair::repair(self.session().events());
        let range = if closers.is_empty() { None } else { Some(self.commit_events(closers)?) };
        if let Some(r) = &range {
            tracing::info!(session_id = %self.session_id(), first_seq = r.start, last_seq = r.end - 1, "repaired an open turn");
        }
        self.turn_open = false;
        Ok(range)
    }

    /// Runs one turn: the user's input, then steps until the model stops
    /// calling tools, then `turn/end`.
    ///
    /// Provider errors, tool errors, plugin failures, cancellation, the
    /// output-token limit and the step limit all end the turn *in the log*
    /// and return `Ok` with the reason. `Err` means the log could not be
    /// written (see [`LoopError`]); the turn is then repaired before the
    /// next one. Dropping the returned future mid-turn is a crash as far as
    /// the log is concerned: the next turn (or open) repairs it.
    pub async fn run_turn(&mut self, input: TurnInput) -> Result<TurnOutcome, LoopError> {
        let repaired = self.repair_open_turn()?;
        let turn = self.last_turn + 1;
        let span = tracing::info_span!(
            "turn",
            session_id = %self.session_id(),
            turn,
            first_seq = self.core.next_seq(),
            last_seq = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let mut outcome = self.turn(turn, input).instrument(span.clone()).await?;
        span.record("last_seq", outcome.seqs.end.saturating_sub(1));
        span.record("reason", reason_kind(&outcome.reason));
        outcome.repaired = repaired;
        Ok(outcome)
    }

    async fn turn(&mut self, turn: u64, input: TurnInput) -> Result<TurnOutcome, LoopError> {
        let TurnInput { content, cancel } = input;
        let first = self.core.next_seq();
        let mut batch = Batch::new(&self.core);
        let turn_start_seq = batch.log(&self.core, TurnStart { turn })?;
        let message =
            Message { id: self.core.ids.next_id(), role: Role::User, content, source: Source::User };
        batch.surface(&self.core, UserMessage { turn: Some(turn), message }, SurfaceIntent::append())?;
        self.commit(batch)?;
        self.last_turn = turn;
        self.turn_open = true;

        let mut t = TurnState { turn, turn_start_seq, step: 0, usage: Usage::default(), message: None };
        let reason = loop {
            if cancel.is_cancelled() {
                break self.end_turn(Batch::new(&self.core), turn, aborted())?;
            }
            if t.step >= self.core.config.max_steps {
                let message = format!("the turn reached its limit of {} steps", self.core.config.max_steps);
                break self.end_turn(
                    Batch::new(&self.core),
                    turn,
                    error_reason(codes::STEP_LIMIT, message),
                )?;
            }
            t.step += 1;
            let span = tracing::debug_span!(
                "step",
                turn,
                step = t.step,
                first_seq = self.core.next_seq(),
                last_seq = tracing::field::Empty,
            );
            let (closers, next, summary) = match self.step(&mut t, &cancel).instrument(span.clone()).await? {
                StepResult::CutShort { closers, reason } => {
                    let reason = self.end_turn(closers, turn, reason)?;
                    // The step ends just before turn/end.
                    span.record("last_seq", self.core.next_seq().saturating_sub(2));
                    break reason;
                }
                StepResult::Completed { closers, next, summary } => (closers, next, summary),
            };
            let range = self.commit(closers)?;
            span.record("last_seq", range.end.saturating_sub(1));
            let summary = StepSummary { seqs: summary.seqs.start..range.end, ..summary };
            if let Some(reason) = self.run_hooks(Hook::AfterStep(&summary), t.position(), &cancel).await? {
                break self.end_turn(Batch::new(&self.core), turn, reason)?;
            }
            match next {
                Next::Continue => continue,
                Next::End(reason) => break self.end_turn(Batch::new(&self.core), turn, reason)?,
            }
        };
        Ok(TurnOutcome {
            turn,
            reason,
            steps: t.step,
            seqs: first..self.core.next_seq(),
            usage: t.usage,
            message: t.message,
            repaired: None,
        })
    }

    /// Appends `turn/end` (after `closers`) and marks the turn closed.
    fn end_turn(
        &mut self,
        mut closers: Batch,
        turn: u64,
        reason: TurnEndReason,
    ) -> Result<TurnEndReason, LoopError> {
        closers.log(&self.core, TurnEnd { turn, reason: reason.clone() })?;
        self.commit(closers)?;
        self.turn_open = false;
        Ok(reason)
    }

    async fn step(&mut self, t: &mut TurnState, cancel: &CancellationToken) -> Result<StepResult, LoopError> {
        let (turn, step) = (t.turn, t.step);
        let step_start = self.core.next_seq();
        let mut batch = Batch::new(&self.core);
        batch.log(&self.core, StepStart { turn, step })?;
        self.pull_injections();
        // Dequeued only once committed: a failed append loses no injection.
        for Injection { kind, content, source } in &self.queued {
            let (content, source) = (content.clone(), source.clone());
            let message = Message { id: self.core.ids.next_id(), role: Role::User, content, source };
            match kind {
                InjectionKind::Steering => {
                    batch.surface(&self.core, SteeringMessage { message }, SurfaceIntent::append())?
                }
                InjectionKind::Context => {
                    batch.surface(&self.core, ContextMessage { message }, SurfaceIntent::append())?
                }
            };
        }
        self.commit(batch)?;
        self.queued.clear();

        let cut_short = |this: &Self, reason: TurnEndReason| -> Result<StepResult, LoopError> {
            let mut closers = Batch::new(&this.core);
            closers.log(&this.core, StepEnd { turn, step })?;
            Ok(StepResult::CutShort { closers, reason })
        };
        if let Some(reason) = self.run_hooks(Hook::BeforeRequest, t.position(), cancel).await? {
            return cut_short(self, reason);
        }

        // The request, and the stream: every chunk is logged as it arrives.
        let request = self.core.request();
        let model = request.model.clone();
        let provider = Arc::clone(&self.core.provider);
        let mut assembler = Assembler::default();
        let mut budget = StreamBudget::new(self.core.config.stream_caps);
        let mut chunk_seqs: Vec<u64> = Vec::new();
        let mut coalescer = Coalescer::new(self.core.config.chunk_window_ms);
        let mut finish: Option<FinishReason> = None;
        let connected = tokio::select! {
            biased;
            () = cancel.cancelled() => Err(Stop::Cancelled),
            r = provider.stream(request) => r.map_err(Stop::Failed),
        };
        let stop = match connected {
            Err(stop) => stop,
            Ok(mut stream) => loop {
                let deadline = coalescer.deadline();
                let item = tokio::select! {
                    biased;
                    () = cancel.cancelled() => break Stop::Cancelled,
                    item = next_item(&mut stream) => item,
                    // The provider went quiet past the window's end.
                    () = sleep_until(deadline) => {
                        self.flush_chunks(&mut coalescer, turn, step, &mut chunk_seqs)?;
                        continue;
                    }
                };
                match item {
                    None => break Stop::Done,
                    Some(Ok(StreamItem::Chunk(chunk))) => {
                        // Measured before it is kept: past a cap, the
                        // stream ends here and is dropped.
                        if let Err(error) = budget.admit(&chunk) {
                            break Stop::Failed(error);
                        }
                        assembler.push(&chunk);
                        if coalescer.push(chunk) {
                            self.flush_chunks(&mut coalescer, turn, step, &mut chunk_seqs)?;
                        }
                    }
                    Some(Ok(StreamItem::Finish(reason))) => finish = Some(reason),
                    Some(Err(error)) => break Stop::Failed(error),
                }
            },
        };

        self.flush_chunks(&mut coalescer, turn, step, &mut chunk_seqs)?;
        let (mut content, usage) = assembler.finish();
        // Before anything runs: every call gets an id unique in the session.
        let mut provider_ids = self.call_ids.assign(&mut content).into_iter();
        let calls: Vec<Call> = content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall { id, name, arguments } => Some(Call {
                    id: id.clone(),
                    provider_id: provider_ids.next().flatten(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                }),
                _ => None,
            })
            .collect();
        let model = model.unwrap_or_else(|| provider.model().to_owned());
        let source = Source::Model { provider: provider.name().to_owned(), model };
        // The id is drawn only when the message is written.
        let message =
            |this: &Self| Message { id: this.core.ids.next_id(), role: Role::Assistant, content, source };
        if let Some(u) = &usage {
            add_usage(&mut t.usage, u);
        }

        // Cancelled or failed: keep the delivered prefix, answer its calls
        // without running them, close the step.
        let cut = match stop {
            Stop::Done => None,
            Stop::Cancelled => {
                let message = "The turn was cancelled before this tool call ran.";
                Some((aborted(), ToolError::new("Cancelled", codes::CANCELLED, message)))
            }
            Stop::Failed(error) => {
                tracing::warn!(code = error.code(), %error, "provider failed");
                let message = "The model's response failed before this tool call ran.";
                let not_run = ToolError::new("StreamFailed", codes::STREAM_FAILED, message);
                Some((error_reason(error.code(), error.to_string()), not_run))
            }
        };
        if let Some((reason, not_run)) = cut {
            let mut closers = Batch::new(&self.core);
            if !chunk_seqs.is_empty() {
                let message = message(self);
                let payload =
                    AssistantMessage { turn, step, message: message.clone(), usage, interrupted: Some(true) };
                closers.surface(&self.core, payload, SurfaceIntent::append_citing(chunk_seqs))?;
                let call_seqs = self.push_calls(&mut closers, t, &calls)?;
                for (call, call_seq) in calls.iter().zip(call_seqs) {
                    let result = self.result_payload(t, call, Err(not_run.clone()));
                    closers.surface(&self.core, result, SurfaceIntent::append_citing(vec![call_seq]))?;
                }
                t.message = Some(message);
            }
            closers.log(&self.core, StepEnd { turn, step })?;
            return Ok(StepResult::CutShort { closers, reason });
        }

        // The response completed: the message and its calls, one batch.
        let message = message(self);
        let mut batch = Batch::new(&self.core);
        let payload = AssistantMessage { turn, step, message: message.clone(), usage, interrupted: None };
        let message_seq = batch.surface(&self.core, payload, SurfaceIntent::append_citing(chunk_seqs))?;
        let call_seqs = self.push_calls(&mut batch, t, &calls)?;
        self.commit(batch)?;
        t.message = Some(message);

        let mut closers_results: Vec<(usize, ToolError)> = Vec::new();
        let next = if finish == Some(FinishReason::MaxTokens) {
            let truncated = ToolError::new(
                "OutputTruncated",
                codes::OUTPUT_TRUNCATED,
                "The response hit the output-token limit; this tool call was not run.",
            );
            closers_results.extend((0..calls.len()).map(|i| (i, truncated.clone())));
            Next::End(TurnEndReason::MaxTokens)
        } else if !calls.is_empty() {
            let unfinished = self.execute(t, &calls, &call_seqs, cancel).await?;
            if unfinished {
                Next::End(aborted())
            } else {
                Next::Continue
            }
        } else {
            self.pull_injections();
            if self.queued.iter().any(|i| i.kind == InjectionKind::Steering) {
                Next::Continue
            } else {
                Next::End(TurnEndReason::Completed)
            }
        };
        let mut closers = Batch::new(&self.core);
        for (i, error) in closers_results {
            let result = self.result_payload(t, &calls[i], Err(error));
            closers.surface(&self.core, result, SurfaceIntent::append_citing(vec![call_seqs[i]]))?;
        }
        closers.log(&self.core, StepEnd { turn, step })?;
        if let Next::End(reason @ TurnEndReason::Aborted { .. }) = next {
            return Ok(StepResult::CutShort { closers, reason });
        }
        let summary = StepSummary {
            position: t.position(),
            seqs: step_start..step_start,
            assistant_message_seq: message_seq,
            tool_calls: calls.len(),
            finish,
        };
        Ok(StepResult::Completed { closers, next, summary })
    }

    /// Appends the coalesced chunks of the window (one batch) and records
    /// their seqs.
    fn flush_chunks(
        &mut self,
        coalescer: &mut Coalescer,
        turn: u64,
        step: u64,
        chunk_seqs: &mut Vec<u64>,
    ) -> Result<(), LoopError> {
        let chunks = coalescer.take();
        if chunks.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new(&self.core);
        for chunk in chunks {
            chunk_seqs.push(batch.log(&self.core, AssistantChunk { turn, step, chunk })?);
        }
        self.commit(batch)?;
        Ok(())
    }

    /// Adds one `tool/call` per call to `batch`; returns their seqs. A call
    /// whose id the loop replaced keeps the provider's as `providerCallId`.
    fn push_calls(&self, batch: &mut Batch, t: &TurnState, calls: &[Call]) -> Result<Vec<u64>, LoopError> {
        calls
            .iter()
            .map(|c| {
                let payload = ToolCall {
                    turn: t.turn,
                    step: t.step,
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                };
                match &c.provider_id {
                    None => batch.log(&self.core, payload),
                    Some(provider_id) => {
                        batch.log_with_key(&self.core, payload, PROVIDER_CALL_ID, provider_id.as_str().into())
                    }
                }
            })
            .collect()
    }

    fn result_payload(
        &self,
        t: &TurnState,
        call: &Call,
        outcome: Result<Vec<Block>, ToolError>,
    ) -> ToolResult {
        let outcome =
            outcome.and_then(|blocks| cap_tool_result(blocks, self.core.config.max_tool_result_bytes));
        let (is_error, content, error) = match outcome {
            Ok(blocks) => (false, blocks, None),
            Err(e) => {
                let info = palimpsest_core_session::payload::ToolError { name: e.name, code: e.code };
                (true, vec![Block::text(e.message)], Some(info))
            }
        };
        ToolResult {
            turn: t.turn,
            step: t.step,
            message: Message {
                id: self.core.ids.next_id(),
                role: Role::User,
                content: vec![Block::ToolResult { tool_call_id: call.id.clone(), is_error, content }],
                source: Source::Tool { call_id: call.id.clone() },
            },
            error,
        }
    }

    /// Runs the calls (concurrently where the tools allow) and appends their
    /// results in request order as soon as each prefix is complete. On
    /// cancellation, unfinished calls are answered with `CANCELLED` errors.
    /// Returns whether the turn was cancelled.
    async fn execute(
        &mut self,
        t: &TurnState,
        calls: &[Call],
        call_seqs: &[u64],
        cancel: &CancellationToken,
    ) -> Result<bool, LoopError> {
        let tools: Vec<Option<Arc<dyn Tool>>> =
            calls.iter().map(|c| self.core.tools.get(&c.name).cloned()).collect();
        let concurrent: Vec<bool> = tools.iter().map(|t| t.as_ref().is_none_or(|t| t.concurrent())).collect();
        let mut slots: Vec<Slot<'_>> = calls.iter().map(|_| Slot::Idle).collect();
        let mut flushed = 0;
        for group in groups(&concurrent) {
            for i in group.clone() {
                let bad_arguments = arguments_error(&calls[i].arguments);
                slots[i] = match (&tools[i], bad_arguments) {
                    (None, _) => Slot::Done(Err(self.unknown_tool(&calls[i].name))),
                    (Some(_), Some(why)) => Slot::Done(Err(invalid_arguments(&calls[i].arguments, &why))),
                    (Some(tool), None) => {
                        let mut ctx = ToolContext::new(self.session_id(), calls[i].id.clone());
                        (ctx.turn, ctx.step, ctx.cancel) = (t.turn, t.step, cancel.child_token());
                        tracing::debug!(call_id = %calls[i].id, tool = %calls[i].name, "tool call started");
                        Slot::Running(tool.execute(&calls[i].arguments, ctx))
                    }
                };
            }
            loop {
                flushed = self.flush_results(t, calls, call_seqs, &mut slots, flushed)?;
                if slots[group.clone()].iter().all(Slot::is_finished) {
                    break;
                }
                let cancelled = tokio::select! {
                    biased;
                    () = cancel.cancelled() => true,
                    () = poll_fn(|cx| poll_running(&mut slots[group.clone()], cx)) => false,
                };
                if cancelled {
                    let cancelled = |what: &str| {
                        let message = format!("The turn was cancelled before this tool call {what}.");
                        Slot::Done(Err(ToolError::new("Cancelled", codes::CANCELLED, message)))
                    };
                    for slot in &mut slots {
                        match slot {
                            Slot::Idle => *slot = cancelled("started"),
                            Slot::Running(_) => *slot = cancelled("finished"),
                            Slot::Done(_) | Slot::Flushed => {}
                        }
                    }
                    self.flush_results(t, calls, call_seqs, &mut slots, flushed)?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn unknown_tool(&self, name: &str) -> ToolError {
        let available: Vec<&str> = self.core.tools.names().collect();
        ToolError::new(
            "UnknownTool",
            codes::UNKNOWN_TOOL,
            format!("There is no tool named {name:?}. Available tools: {}.", available.join(", ")),
        )
    }

    /// Appends the results of the finished prefix of `slots` from `from`;
    /// returns the new prefix end.
    fn flush_results(
        &mut self,
        t: &TurnState,
        calls: &[Call],
        call_seqs: &[u64],
        slots: &mut [Slot<'_>],
        from: usize,
    ) -> Result<usize, LoopError> {
        let mut end = from;
        while end < slots.len() {
            let Slot::Done(_) = &slots[end] else { break };
            let Slot::Done(outcome) = std::mem::replace(&mut slots[end], Slot::Flushed) else { break };
            if let Err(e) = &outcome {
                tracing::debug!(call_id = %calls[end].id, code = %e.code, "tool call failed");
            }
            // One append per result: a result is in the log as soon as it
            // exists, and a refused append can cost no other call its result.
            let result = self.result_payload(t, &calls[end], outcome);
            let mut batch = Batch::new(&self.core);
            batch.surface(&self.core, result, SurfaceIntent::append_citing(vec![call_seqs[end]]))?;
            self.commit(batch)?;
            end += 1;
        }
        Ok(end)
    }

    /// Runs one hook of every plugin, in order. `Some(reason)` ends the turn.
    async fn run_hooks(
        &mut self,
        hook: Hook<'_>,
        position: TurnPosition,
        cancel: &CancellationToken,
    ) -> Result<Option<TurnEndReason>, LoopError> {
        for i in 0..self.plugins.len() {
            let from = self.core.next_seq();
            let (before, rest) = self.plugins.split_at_mut(i);
            let Some((plugin, after)) = rest.split_first_mut() else { break };
            let name = plugin.name().to_owned();
            let outcome = {
                let mut ctx = PluginContext::new(name.clone(), &mut self.core, position, [before, after]);
                let fut = match hook {
                    Hook::BeforeRequest => plugin.before_request(&mut ctx),
                    Hook::AfterStep(summary) => plugin.after_step(&mut ctx, summary),
                };
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => None,
                    r = fut => Some(r),
                }
            };
            // The other plugins saw these as they were committed.
            let to = self.core.next_seq();
            self.notify_one(i, from..to);
            match outcome {
                None => return Ok(Some(aborted())),
                Some(Ok(())) => {}
                Some(Err(PluginError::Loop(e))) if e.is_store_failure() => return Err(e),
                Some(Err(e)) => {
                    let why = crate::error::chain(&e);
                    tracing::warn!(plugin = %name, code = e.code(), error = %why, "plugin failed");
                    let message = format!("plugin {name:?} failed: {why}");
                    return Ok(Some(error_reason(codes::PLUGIN_FAILED, message)));
                }
            }
        }
        Ok(None)
    }

    fn pull_injections(&mut self) {
        while let Ok(injection) = self.inject_rx.try_recv() {
            self.queued.push_back(injection);
        }
    }

    fn commit(&mut self, batch: Batch) -> Result<Range<u64>, LoopError> {
        self.commit_events(batch.into_events())
    }

    fn commit_events(&mut self, events: Vec<Event>) -> Result<Range<u64>, LoopError> {
        let range = self.core.commit(events)?;
        self.notify(range.clone());
        Ok(range)
    }

    /// Tells plugin `i` about the committed events in `range`.
    fn notify_one(&mut self, i: usize, range: Range<u64>) {
        let session = self.core.session.session();
        let Some(plugin) = self.plugins.get_mut(i) else { return };
        for seq in range {
            let Some(event) = session.event(seq) else { continue };
            tracing::trace!(seq, event_type = %event.event_type(), "appended");
            plugin.on_event(event, session);
        }
    }

    /// Tells every plugin about the committed events in `range`.
    fn notify(&mut self, range: Range<u64>) {
        let session = self.core.session.session();
        for seq in range {
            let Some(event) = session.event(seq) else { continue };
            tracing::trace!(seq, event_type = %event.event_type(), "appended");
            for plugin in &mut self.plugins {
                plugin.on_event(event, session);
            }
        }
    }
}

/// `blocks`, or a `TOOL_RESULT_TOO_LARGE` error when their JSON is over
/// `max_bytes` (see [`AgentConfig::max_tool_result_bytes`]).
fn cap_tool_result(blocks: Vec<Block>, max_bytes: usize) -> Result<Vec<Block>, ToolError> {
    let bytes = serde_json::to_string(&blocks).map_or(usize::MAX, |json| json.len());
    if bytes <= max_bytes {
        return Ok(blocks);
    }
    Err(ToolError::new(
        "ToolResultTooLarge",
        codes::TOOL_RESULT_TOO_LARGE,
        format!(
            "the tool's result is {bytes} bytes as JSON, over the {max_bytes}-byte cap; it was not logged"
        ),
    ))
}
