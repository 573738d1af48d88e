//! Plugins: code that reads the session and rewrites history *only by
//! appending*, at fixed points of the loop.
//!
//! # Hooks
//!
//! * [`Plugin::before_request`] runs in every step after `step/start` and
//!   the injected messages, right before the request is derived. It may
//!   append plugin events and surface events, replaces included: this is
//!   where compaction and tool-result pruning plug in. Its appends are in
//!   the request it precedes.
//! * [`Plugin::after_step`] runs after the `step/end` of a step whose
//!   response completed (not after a step cut by cancellation or an error).
//! * [`Plugin::on_event`] sees every event the loop commits, in seq order,
//!   including the plugins' own and the repair closers appended on open.
//!   An event a hook appends reaches the other plugins as soon as it is
//!   committed (so a progress display shows a `compaction/start` while the
//!   summary is still being written) and the appending plugin itself when
//!   its hook returns.
//!
//! # What a plugin may append
//!
//! Everything goes through [`PluginContext`], which appends through the
//! session like the loop does: the contract's surface rules apply (and the
//! invariants in dev mode), and a refused append changes nothing. On top of
//! that the context refuses an *appended* `assistant/message` or
//! `tool/result` (`plugin-append-forbidden`): those belong to the loop's
//! steps. A plugin may *replace* with them (a pruned `tool/result`).
//!
//! A hook that returns `Err` ends the turn with `{"kind":"error"}`, code
//! `PLUGIN_FAILED`, unless the store itself failed (then `run_turn` returns
//! the error). Cancelling the turn drops a running hook: a plugin must leave
//! the log valid at every await point (a `compaction/start` with no end is
//! valid).

use std::ops::Range;

use palimpsest_core_session::payload::{PluginEvent, SurfacePayload};
use palimpsest_core_session::{Event, Session, SurfaceIntent, SurfaceOp};

use crate::error::LoopError;
use crate::provider::{BoxFuture, FinishReason, ModelRequest, Provider};
use crate::state::{Batch, LoopCore};
use crate::tool::ToolRegistry;

/// Where in the turn a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnPosition {
    /// The turn number.
    pub turn: u64,
    /// The step number (the step about to request, or the step just ended).
    pub step: u64,
    /// Seq of the turn's `turn/start`; the turn's user input follows it.
    pub turn_start_seq: u64,
}

/// What a completed step did, for [`Plugin::after_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepSummary {
    /// Turn and step.
    pub position: TurnPosition,
    /// Seqs from `step/start` through `step/end`.
    pub seqs: Range<u64>,
    /// Seq of the step's `assistant/message`.
    pub assistant_message_seq: u64,
    /// How many tool calls the model made.
    pub tool_calls: usize,
    /// The finish reason the provider sent, if any.
    pub finish: Option<FinishReason>,
}

/// A plugin failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The plugin's own failure (a summarizer error, ...).
    #[error("{code}: {message}")]
    Failed {
        /// A stable code.
        code: String,
        /// What happened.
        message: String,
    },
    /// An append through the [`PluginContext`] failed.
    #[error(transparent)]
    Loop(#[from] LoopError),
}

impl PluginError {
    /// A plugin's own failure.
    pub fn failed(code: impl Into<String>, message: impl Into<String>) -> PluginError {
        PluginError::Failed { code: code.into(), message: message.into() }
    }

    /// What happened, without the code (which [`code`](Self::code) gives):
    /// the text to store next to the code, so it is not repeated.
    pub fn message(&self) -> String {
        match self {
            PluginError::Failed { message, .. } => message.clone(),
            PluginError::Loop(e) => e.to_string(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            PluginError::Failed { code, .. } => code,
            PluginError::Loop(e) => e.code(),
        }
    }
}

/// A loop plugin. Object-safe: the loop holds `Box<dyn Plugin>`. Every
/// method has a default that does nothing.
///
/// ```
/// use palimpsest_core_agent_loop::{BoxFuture, Plugin, PluginContext, PluginError};
///
/// /// Writes a `note/request` event before every request.
/// struct Notes;
///
/// impl Plugin for Notes {
///     fn name(&self) -> &str { "notes" }
///     fn before_request<'a>(&'a mut self, ctx: &'a mut PluginContext<'_>) -> BoxFuture<'a, Result<(), PluginError>> {
///         Box::pin(async move {
///             let step = ctx.position().step;
///             ctx.append_event("note/request", serde_json::json!({ "step": step }))?;
///             Ok(())
///         })
///     }
/// }
/// ```
pub trait Plugin: Send + Sync {
    /// The plugin's name (in error messages and `{"kind":"plugin"}` sources).
    fn name(&self) -> &str;

    /// Runs before each request; may append (see the module docs).
    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        let _ = ctx;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Runs after each completed step; may append.
    fn after_step<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
        step: &'a StepSummary,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        let _ = (ctx, step);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Sees every committed event (it is already in `session`). Keep it
    /// cheap: it runs inline on the loop's task.
    fn on_event(&mut self, event: &Event, session: &Session) {
        let _ = (event, session);
    }
}

/// A plugin's restricted handle on the loop: read everything, append
/// through the session's rules only.
pub struct PluginContext<'s> {
    plugin: String,
    core: &'s mut LoopCore,
    position: TurnPosition,
    /// The other plugins: they see each append as soon as it is committed
    /// (a `compaction/start` while the summary is still being written).
    others: [&'s mut [Box<dyn Plugin>]; 2],
}

impl<'s> PluginContext<'s> {
    pub(crate) fn new(
        plugin: String,
        core: &'s mut LoopCore,
        position: TurnPosition,
        others: [&'s mut [Box<dyn Plugin>]; 2],
    ) -> PluginContext<'s> {
        PluginContext { plugin, core, position, others }
    }

    /// Commits `batch` and shows its events to the other plugins.
    fn commit(&mut self, batch: Batch) -> Result<u64, LoopError> {
        let range = self.core.commit(batch.into_events())?;
        let session = self.core.session.session();
        for seq in range.clone() {
            let Some(event) = session.event(seq) else { continue };
            for plugin in self.others.iter_mut().flat_map(|o| o.iter_mut()) {
                plugin.on_event(event, session);
            }
        }
        Ok(range.start)
    }

    /// The name of the plugin this context was made for.
    pub fn plugin_name(&self) -> &str {
        &self.plugin
    }

    /// The session as it is now (log, surface, derived messages).
    pub fn session(&self) -> &Session {
        self.core.session.session()
    }

    /// Where in the turn the hook runs.
    pub fn position(&self) -> TurnPosition {
        self.position
    }

    /// The request the model would get if it were sent now.
    pub fn request(&self) -> ModelRequest {
        self.core.request()
    }

    /// The loop's provider (e.g. for a summarizer that asks the session's
    /// own model).
    pub fn provider(&self) -> &dyn Provider {
        &*self.core.provider
    }

    /// The loop's tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.core.tools
    }

    /// The loop's clock.
    pub fn now_ms(&self) -> u64 {
        self.core.clock.now_ms()
    }

    /// A fresh message id from the loop's generator.
    pub fn new_message_id(&self) -> String {
        self.core.ids.next_id()
    }

    /// Appends a plugin event (any non-core type, opaque data, never on the
    /// surface); returns its seq. A core type is refused (`event-malformed`).
    pub fn append_event(
        &mut self,
        event_type: impl Into<String>,
        data: serde_json::Value,
    ) -> Result<u64, LoopError> {
        let mut batch = Batch::new(self.core);
        batch.log(self.core, PluginEvent { event_type: event_type.into(), data })?;
        self.commit(batch)
    }

    /// Appends a surface event: a message appended or replacing a surface
    /// range (which it must cite in full); returns its seq.
    pub fn append_message(
        &mut self,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<u64, LoopError> {
        let payload = payload.into();
        if intent.op == SurfaceOp::Append {
            let reserved = match &payload {
                SurfacePayload::Assistant(_) => Some("an assistant/message"),
                SurfacePayload::ToolResult(_) => Some("a tool/result"),
                _ => None,
            };
            if let Some(what) = reserved {
                return Err(LoopError::PluginAppendForbidden {
                    plugin: self.plugin.clone(),
                    what: format!("{what} with surfaceOp append (only a replace)"),
                });
            }
        }
        let mut batch = Batch::new(self.core);
        batch.surface(self.core, payload, intent)?;
        self.commit(batch)
    }
}

impl std::fmt::Debug for PluginContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginContext")
            .field("plugin", &self.plugin)
            .field("session_id", &self.core.session_id())
            .field("position", &self.position)
            .finish()
    }
}
