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
//!
//! # One step, in phases
//!
//! `AgentLoop::step` runs four phases, each a function whose doc says
//! what it guarantees: `open_step` (step/start, injections, the
//! `before_request` hooks), `stream_response` (the request, the chunks),
//! then `close_cut_short` (a stream that stopped early, or a hook that
//! ended the turn) or `finish_step` (the message, its calls, the tools).
//! The durability points: everything the model or a tool acts on is in
//! the store before the request is sent and before any tool runs, and the
//! store syncs at `turn/end` (with the default durability).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use palimpsest_core_session::payload::{
    AssistantChunk, AssistantMessage, Block, ContextMessage, ErrorInfo, Message, Role, SessionSettings,
    Settings, Source, SteeringMessage, StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnEndReason,
    TurnStart, Usage, UserMessage,
};
use palimpsest_core_session::{repair, Event, Session, SurfaceIntent};
use palimpsest_persistence::{DurableSession, Hold, KeptHold};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::assemble::Assembler;
use crate::call_ids::CallIds;
use crate::caps::StreamBudget;
use crate::coalesce::Coalescer;
use crate::codes;
use crate::config::AgentConfig;
use crate::error::LoopError;
use crate::exec::{groups, poll_running, Slot};
use crate::inject::{Injection, InjectionKind, SteeringHandle};
use crate::plugin::{Plugin, PluginContext, PluginError, StepSummary, TurnPosition};
use crate::provider::{arguments_error, ChunkStream, FinishReason, ModelRequest, ProviderError, StreamItem};
use crate::state::{Batch, LoopCore};
use crate::tool::{Tool, ToolContext, ToolError};

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
    /// Whether everything the log holds was made durable as the session's
    /// [`Durability`](palimpsest_persistence::Durability) asks. `false`
    /// when a sync failed after the store took its events (a SQLite
    /// checkpoint held back by another connection's long read, say) and
    /// trying it again at the turn's end failed too: the turn is logged
    /// whole, a crash of this process loses none of it, a power loss may.
    /// The cause is logged (`warn`); [`AgentLoop::flush`] and the next turn
    /// try again.
    pub durable: bool,
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
    /// The store's hold on the session, kept (and renewed) while the loop
    /// lives: see [`AgentLoopBuilder::hold`](crate::AgentLoopBuilder::hold).
    hold: Option<KeptHold>,
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

/// What the stream of one step delivered.
struct Response {
    /// Why the stream stopped.
    stop: Stop,
    /// The seqs of its `assistant/chunk` events, in order.
    chunk_seqs: Vec<u64>,
    /// The assembled content, call ids already made unique.
    content: Vec<Block>,
    /// The provider and model that answered.
    source: Source,
    /// The calls in `content`, in request order.
    calls: Vec<Call>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
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
    /// The loop over `core`'s session, picking up where its log ends: the
    /// last turn's number, whether that turn is open, the call ids used.
    pub(crate) fn from_parts(
        core: LoopCore,
        plugins: Vec<Box<dyn Plugin>>,
        hold: Option<KeptHold>,
    ) -> AgentLoop {
        // A resumed session holds its surface and the events after its
        // checkpoint; its turn state carries what the rest of the log said.
        let session = core.session.session();
        let turns = session.turn_state();
        let last_turn = turns.started;
        let turn_open = turns.open_turn.is_some();
        // Every call id of the events held: on a resumed session, those of
        // the surface and the tail (a shadowed call is in no request).
        let call_ids = CallIds::from_log(session.resident());
        let (inject_tx, inject_rx) = mpsc::unbounded_channel();
        AgentLoop {
            core,
            plugins,
            inject_tx,
            inject_rx,
            queued: VecDeque::new(),
            last_turn,
            turn_open,
            call_ids,
            hold,
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
    /// `None` when nothing changed. The event is made durable (synced), as
    /// a turn's end is: it ends a write between turns, and a store checks
    /// its files afresh at the first append after a sync (a JSONL writer
    /// whose last write was unsynced settings appended the next turn, hours
    /// later, without looking: an outside probe).
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
        // Made durable now, whatever the durability: the next request is
        // sent with them. A sync that fails is reported as a commit's is
        // (the event is logged; the next turn's `durable` says whether a
        // sync caught up), not as a failure to write what was written.
        self.core.sync_now();
        tracing::info!(session_id = %self.session_id(), seq, "logged new settings");
        Ok(Some(seq))
    }

    /// Appends a `context/message` now, between turns (repairing an open
    /// turn first). During a turn, use a [`SteeringHandle`]. As for every
    /// append between turns, a sync that fails after the store took the
    /// event is not an error (it is logged, `warn`): the next turn's
    /// [`TurnOutcome::durable`], or [`flush`](Self::flush), says whether
    /// a sync caught up.
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
        self.core.session.flush().map_err(|e| self.core.error(e))?;
        self.core.not_synced = false;
        Ok(())
    }

    /// Consumes the loop, returning the durable session. The loop's hold
    /// on it, if any, is released.
    pub fn into_session(self) -> DurableSession {
        self.core.session
    }

    /// The store's hold on the session, as granted when the loop created or
    /// opened it (see [`AgentLoopBuilder::hold`](crate::AgentLoopBuilder::hold));
    /// `None` when none was asked for or the store grants none.
    pub fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref().and_then(KeptHold::hold)
    }

    /// If the log ends inside a turn, appends the repair closers (contract
    /// section 5) as one batch and returns their seqs. The loop does this
    /// itself on open and before each turn; a no-op on a balanced log.
    pub fn repair_open_turn(&mut self) -> Result<Option<Range<u64>>, LoopError> {
        if !self.turn_open {
            return Ok(None);
        }
        let closers = repair::repair(self.session().resident());
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
    /// next one. A turn whose events were all written but not all made
    /// durable (a sync failed) is `Ok`, with [`TurnOutcome::durable`]
    /// false. Dropping the returned future mid-turn is a crash as far as
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
            // A cancel that came after a whole answer only ended the wait
            // for the stream's end (see `stream_response`): the turn ends
            // with this step, and its hooks run as they would have.
            let hooks_cancel = match (&next, cancel.is_cancelled()) {
                (Next::End(_), true) => CancellationToken::new(),
                _ => cancel.clone(),
            };
            if let Some(reason) =
                self.run_hooks(Hook::AfterStep(&summary), t.position(), &hooks_cancel).await?
            {
                break self.end_turn(Batch::new(&self.core), turn, reason)?;
            }
            match next {
                Next::Continue => continue,
                Next::End(reason) => break self.end_turn(Batch::new(&self.core), turn, reason)?,
            }
        };
        let durable = self.core.settle();
        Ok(TurnOutcome {
            turn,
            reason,
            steps: t.step,
            seqs: first..self.core.next_seq(),
            usage: t.usage,
            message: t.message,
            repaired: None,
            durable,
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
        // The turn is durable: what the next open needs is its surface.
        self.core.save_checkpoint();
        Ok(reason)
    }

    /// One step: [open it](Self::open_step), [stream the
    /// response](Self::stream_response), then either [close what was cut
    /// short](Self::close_cut_short) or [finish it](Self::finish_step).
    async fn step(&mut self, t: &mut TurnState, cancel: &CancellationToken) -> Result<StepResult, LoopError> {
        let step_start = match self.open_step(t, cancel).await? {
            ControlFlow::Continue(step_start) => step_start,
            ControlFlow::Break(reason) => return self.close_cut_short(t, None, reason),
        };
        let response = self.stream_response(t, cancel).await?;
        let (reason, not_run) = match &response.stop {
            Stop::Done => return self.finish_step(t, response, step_start, cancel).await,
            Stop::Cancelled => {
                let message = "The turn was cancelled before this tool call ran.";
                (aborted(), ToolError::new("Cancelled", codes::CANCELLED, message))
            }
            Stop::Failed(error) => {
                tracing::warn!(code = error.code(), %error, "provider failed");
                let message = "The model's response failed before this tool call ran.";
                let not_run = ToolError::new("StreamFailed", codes::STREAM_FAILED, message);
                (error_reason(error.code(), error.to_string()), not_run)
            }
        };
        self.close_cut_short(t, Some((response, not_run)), reason)
    }

    /// Opens the step: commits `step/start` with the injections waiting for
    /// it as one batch, then runs the plugins' `before_request` hooks.
    ///
    /// Guarantees: when it returns `Continue(seq of step/start)`, everything
    /// the request is built from (the injections, whatever the hooks
    /// appended) is in the store, so the model is never sent what the log
    /// does not hold. An injection leaves the queue only once committed, so
    /// a failed append loses none. `Break(reason)` (a hook failed or the
    /// turn was cancelled): nothing more is appended; the caller closes the
    /// step.
    async fn open_step(
        &mut self,
        t: &TurnState,
        cancel: &CancellationToken,
    ) -> Result<ControlFlow<TurnEndReason, u64>, LoopError> {
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
        if let Some(reason) = self.run_hooks(Hook::BeforeRequest, t.position(), cancel).await? {
            return Ok(ControlFlow::Break(reason));
        }
        Ok(ControlFlow::Continue(step_start))
    }

    /// Sends the request built from the log and streams the response.
    ///
    /// Guarantees: every delivered delta is committed as an
    /// `assistant/chunk` within one flush window of arriving, and all of
    /// them are committed before this returns, whatever stopped the stream
    /// (its end, cancellation, a provider error, a cap). Nothing else is
    /// appended. Every requested call has an id unique in the session
    /// before anything can run it, and the response's usage is added to
    /// the turn's.
    async fn stream_response(
        &mut self,
        t: &mut TurnState,
        cancel: &CancellationToken,
    ) -> Result<Response, LoopError> {
        let (turn, step) = (t.turn, t.step);
        // The request, and the stream: every chunk is logged as it arrives.
        let request = self.core.request();
        let model = request.model.clone();
        let provider = Arc::clone(&self.core.provider);
        let mut assembler = Assembler::default();
        let mut budget = StreamBudget::new(self.core.config.stream_caps);
        let mut chunk_seqs: Vec<u64> = Vec::new();
        let mut coalescer = Coalescer::new(self.core.config.chunk_window_ms);
        let mut finish: Option<FinishReason> = None;
        // A finish reason came, and no content after it: the answer is whole.
        let mut whole = false;
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
                    // After a finish reason of `stop` (or `length`) with no
                    // content after it the answer is whole: a cancel then
                    // (while a server holds the stream open after it) only
                    // stops the wait, and the answer stands (it was logged
                    // complete under a turn `aborted`: an outside probe).
                    // A finish of `tool_calls` is cancelled: no tool runs.
                    () = cancel.cancelled() => break match finish {
                        Some(FinishReason::Stop | FinishReason::MaxTokens) if whole => Stop::Done,
                        _ => Stop::Cancelled,
                    },
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
                        // Content after a finish reason: it was not the end.
                        whole &= matches!(chunk, palimpsest_core_session::payload::StreamChunk::Usage(_));
                        assembler.push(&chunk);
                        if coalescer.push(chunk) {
                            self.flush_chunks(&mut coalescer, turn, step, &mut chunk_seqs)?;
                        }
                    }
                    Some(Ok(StreamItem::Finish(reason))) => {
                        finish = Some(reason);
                        whole = true;
                    }
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
        if let Some(u) = &usage {
            add_usage(&mut t.usage, u);
        }
        Ok(Response { stop, chunk_seqs, content, source, calls, usage, finish })
    }

    /// Closes a step that was cut short: by a hook (`response` is `None`),
    /// or by cancellation or a failure mid-stream (`not_run` answers its
    /// calls).
    ///
    /// Guarantees: nothing is committed here. The closers (when at least
    /// one chunk was delivered: the prefix as an `assistant/message` with
    /// `interrupted: true` citing every chunk, a `tool/call` per call it
    /// requested and a `not_run` error result citing each; then
    /// `step/end`) go into the log with `turn/end` as one batch, synced at
    /// turn end. No tool runs. With no chunk delivered, no message is
    /// written (`sourceEventSeqs: []` would claim a known empty stream).
    fn close_cut_short(
        &mut self,
        t: &mut TurnState,
        response: Option<(Response, ToolError)>,
        reason: TurnEndReason,
    ) -> Result<StepResult, LoopError> {
        let (turn, step) = (t.turn, t.step);
        let mut closers = Batch::new(&self.core);
        if let Some((response, not_run)) = response.filter(|(r, _)| !r.chunk_seqs.is_empty()) {
            let Response { chunk_seqs, content, source, calls, usage, .. } = response;
            let message = Message { id: self.core.ids.next_id(), role: Role::Assistant, content, source };
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
        Ok(StepResult::CutShort { closers, reason })
    }

    /// Finishes a step whose response completed: commits the message with
    /// its `tool/call`s as one batch, then answers the calls (runs them;
    /// or, past the output-token limit, refuses them all) and decides
    /// what the turn does next.
    ///
    /// Guarantees: the message and every call are in the store before any
    /// tool runs, so a tool with side effects never acts on a call the log
    /// does not hold; each result is committed alone, in request order, as
    /// soon as it exists. The closers returned (the `OUTPUT_TRUNCATED`
    /// results, then `step/end`) are not yet committed: a cancelled step's
    /// go in with `turn/end`, a completed step's are committed before the
    /// `after_step` hooks run.
    async fn finish_step(
        &mut self,
        t: &mut TurnState,
        response: Response,
        step_start: u64,
        cancel: &CancellationToken,
    ) -> Result<StepResult, LoopError> {
        let (turn, step) = (t.turn, t.step);
        let Response { chunk_seqs, content, source, calls, usage, finish, .. } = response;
        // The response completed: the message and its calls, one batch.
        let message = Message { id: self.core.ids.next_id(), role: Role::Assistant, content, source };
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
        // The shape first: measuring the size serializes the blocks, which
        // recurses as deep as they nest.
        let outcome = outcome
            .and_then(check_tool_blocks)
            .and_then(|blocks| cap_tool_result(blocks, self.core.config.max_tool_result_bytes));
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
                let max = self.core.config.max_tool_calls_per_step;
                slots[i] = match (&tools[i], bad_arguments) {
                    _ if i >= max => Slot::Done(Err(ToolError::new(
                        "TooManyToolCalls",
                        codes::TOO_MANY_TOOL_CALLS,
                        format!(
                            "This response asked for {} tool calls; at most {max} run per response, and this one (number {}) was not run.",
                            calls.len(),
                            i + 1
                        ),
                    ))),
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
        let offered = match available.is_empty() {
            true => "No tools are offered.".to_owned(),
            false => format!("Available tools: {}.", available.join(", ")),
        };
        ToolError::new(
            "UnknownTool",
            codes::UNKNOWN_TOOL,
            format!("There is no tool named {name:?}. {offered}"),
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

/// `blocks`, or a `TOOL_RESULT_INVALID` error when no event could hold
/// them: tool-result blocks nested past the contract's nesting limit, or
/// an image (nested ones too) whose data is not base64. A tool's output is
/// not trusted, and an event refused for it would fail the turn where a
/// bad result should only be an error result. Walked without recursion,
/// and a refused result taken apart the same way, so that no depth a tool
/// returns overflows the stack.
fn check_tool_blocks(blocks: Vec<Block>) -> Result<Vec<Block>, ToolError> {
    // Where the tool's blocks stand in a `tool/result`'s data: `{"message":
    // {"content": [{"type":"tool-result", "content": [` them: depth 5.
    const ABOVE: usize = 5;
    let mut deepest = 0;
    let mut bad_image = false;
    // Each block with the JSON depth of its object.
    let mut pending: Vec<(&Block, usize)> = blocks.iter().map(|b| (b, 1)).collect();
    while let Some((block, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        match block {
            Block::Image { data, .. } => bad_image |= !palimpsest_core_session::payload::is_base64(data),
            // The object, then its `content` array.
            Block::ToolResult { content, .. } => {
                deepest = deepest.max(depth + 1);
                pending.extend(content.iter().map(|b| (b, depth + 2)));
            }
            _ => {}
        }
    }
    let why = if ABOVE + deepest > palimpsest_core_session::event::MAX_NESTING {
        format!(
            "the tool's result nests its blocks {} deep, past the log's limit of {}; it was not logged",
            ABOVE + deepest,
            palimpsest_core_session::event::MAX_NESTING
        )
    } else if bad_image {
        "the tool's result holds an image whose data is not base64 (a data: URL, say); it was not logged"
            .to_owned()
    } else {
        return Ok(blocks);
    };
    take_apart(blocks);
    Err(ToolError::new("ToolResultInvalid", codes::TOOL_RESULT_INVALID, why))
}

/// Drops `blocks` one level at a time: a result nested deeper than the
/// stack would hold frames for is dropped without recursing.
fn take_apart(blocks: Vec<Block>) {
    let mut pending = blocks;
    while let Some(block) = pending.pop() {
        if let Block::ToolResult { content, .. } = block {
            pending.extend(content);
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
