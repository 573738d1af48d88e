//! The loop's shared state ([`LoopCore`]) and the [`Batch`] builder that
//! turns payloads into events with contiguous seqs and clock times.
//!
//! Both the loop and the plugin context append through [`LoopCore::commit`],
//! so every append takes the same path: the session's rules (and the
//! invariants guard in dev mode) → the store → memory.

use std::ops::Range;
use std::sync::Arc;

use palimpsest_core_session::payload::{LogPayload, SurfacePayload};
use palimpsest_core_session::{AppendError, Event, SurfaceIntent};
use palimpsest_persistence::{DurableError, DurableSession};

use crate::clock::{Clock, IdGenerator};
use crate::config::AgentConfig;
use crate::error::LoopError;
use crate::provider::{ModelRequest, Provider, ToolSpec};
use crate::tool::ToolRegistry;

/// Everything a step needs except the plugins (which are borrowed apart
/// from it while a hook runs).
#[derive(Debug)]
pub(crate) struct LoopCore {
    pub(crate) session: DurableSession,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) tools: ToolRegistry,
    pub(crate) config: AgentConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ids: Arc<dyn IdGenerator>,
    /// A sync failed after its batch was stored ([`DurableError::NotSynced`])
    /// and no sync has succeeded since: what the log holds is not all
    /// durable yet.
    pub(crate) not_synced: bool,
}

impl LoopCore {
    pub(crate) fn session_id(&self) -> &str {
        self.session.session().id()
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.session.session().next_seq()
    }

    pub(crate) fn error(&self, source: impl Into<DurableError>) -> LoopError {
        LoopError::Session { session_id: self.session_id().to_owned(), source: Box::new(source.into()) }
    }

    /// Appends `events` as one atomic batch.
    ///
    /// The store's write is synchronous, and may wait on a disk or a
    /// network. On a multi-threaded tokio runtime it runs in
    /// [`block_in_place`](tokio::task::block_in_place), so the runtime
    /// moves the worker's other tasks elsewhere and their timers keep time
    /// while the write waits; on a current-thread runtime (or none) it runs
    /// inline, as there is no other worker to hand the tasks to.
    pub(crate) fn commit(&mut self, events: Vec<Event>) -> Result<Range<u64>, LoopError> {
        if events.is_empty() {
            let next = self.next_seq();
            return Ok(next..next);
        }
        let session = &mut self.session;
        let appended = off_the_executor(move || session.append_batch(events));
        match appended {
            Ok(range) => Ok(range),
            // The store took the batch and the session holds it: for the
            // loop it is committed (the turn goes on, nothing is appended
            // twice); the turn's end tries the sync again and says whether
            // the turn is durable (`TurnOutcome::durable`).
            Err(DurableError::NotSynced { seqs, source }) => {
                tracing::warn!(
                    session_id = %self.session_id(), code = source.code(), error = %crate::error::chain(&*source),
                    first_seq = seqs.start, "appended, but the sync failed: not yet durable"
                );
                self.not_synced = true;
                Ok(seqs)
            }
            Err(e) => {
                tracing::warn!(session_id = %self.session_id(), code = e.code(), error = %crate::error::chain(&e), "append failed");
                Err(self.error(e))
            }
        }
    }

    /// Tries the sync again if one failed since the last that succeeded:
    /// whether everything appended so far is now durable.
    pub(crate) fn settle(&mut self) -> bool {
        if self.not_synced {
            self.sync_now();
        }
        !self.not_synced
    }

    /// Syncs the store now, whatever the durability. A failure is logged
    /// (`warn`) and kept in `not_synced`, as a commit's failed sync is.
    pub(crate) fn sync_now(&mut self) {
        let session = &mut self.session;
        match off_the_executor(move || session.flush()) {
            Ok(()) => self.not_synced = false,
            Err(e) => {
                tracing::warn!(
                    session_id = %self.session_id(), code = e.code(), error = %crate::error::chain(&e),
                    "logged, but not yet durable: the sync failed"
                );
                self.not_synced = true;
            }
        }
    }

    /// Saves a checkpoint of the session beside its log (at a turn
    /// boundary: see [`DurableSession::save_checkpoint`]), off the
    /// executor like every store call. A failure is logged and changes
    /// nothing: the checkpoint is a cache, and the next open reads more.
    /// A resumed session then lets go of the turn it no longer needs
    /// ([`DurableSession::trim`]), so its memory stays that of its surface.
    pub(crate) fn save_checkpoint(&mut self) {
        let session = &self.session;
        match off_the_executor(|| session.save_checkpoint()) {
            Ok(saved) => {
                tracing::trace!(session_id = %self.session_id(), saved, "checkpoint");
                self.session.trim();
            }
            Err(e) => {
                tracing::warn!(session_id = %self.session_id(), code = e.code(), error = %e, "could not save a checkpoint")
            }
        }
    }

    /// The request the model would get now: the effective settings of the
    /// log (contract section 1.3) and the derived history. A setting the
    /// log does not state falls back to the loop's own: the config's system
    /// prompt, the provider's model, the registry's tools.
    pub(crate) fn request(&self) -> ModelRequest {
        let session = self.session.session();
        let settings = session.settings();
        // The session's cached history: no message is parsed again for a
        // request; what the request owns is a copy of each.
        let messages = session.history().iter().map(|m| m.message.clone()).collect();
        let tools = match &settings.tools {
            Some(offered) => offered.iter().map(ToolSpec::from_offered).collect(),
            None => self.tools.specs(),
        };
        let mut request = ModelRequest::new(messages).with_tools(tools);
        // A logged empty prompt is no prompt: some providers refuse an
        // empty system message.
        request.system = match settings.system_prompt {
            Some(logged) => Some(logged).filter(|s| !s.is_empty()),
            None => self.config.system_prompt.clone(),
        };
        request.model = settings.model;
        request.max_output_tokens = self.config.max_output_tokens;
        request
    }
}

/// Events to append together, built with the seqs they will get.
///
/// Build a batch only when nothing else will be appended before it is
/// committed: its seqs continue the log as it is when it was created.
#[derive(Debug)]
pub(crate) struct Batch {
    next: u64,
    events: Vec<Event>,
}

impl Batch {
    pub(crate) fn new(core: &LoopCore) -> Batch {
        Batch { next: core.next_seq(), events: Vec::new() }
    }

    fn push(&mut self, core: &LoopCore, event: Result<Event, AppendError>) -> Result<u64, LoopError> {
        let event = event.map_err(|e| core.error(e))?;
        let seq = event.seq();
        self.events.push(event);
        self.next += 1;
        Ok(seq)
    }

    /// Adds a log-only event; returns the seq it will have.
    pub(crate) fn log(&mut self, core: &LoopCore, payload: impl Into<LogPayload>) -> Result<u64, LoopError> {
        let event = Event::log(self.next, core.clock.now_ms(), payload);
        self.push(core, event)
    }

    /// Adds a log-only event whose `data` is `payload` plus one more key
    /// (kept verbatim: the contract keeps unknown keys of core payloads).
    pub(crate) fn log_with_key(
        &mut self,
        core: &LoopCore,
        payload: impl Into<LogPayload>,
        key: &str,
        value: serde_json::Value,
    ) -> Result<u64, LoopError> {
        let event = Event::log(self.next, core.clock.now_ms(), payload).and_then(|plain| {
            // The typed payload's keys, in their order, then the new one.
            let body = plain.data().trim_end().strip_suffix('}').unwrap_or("{");
            let comma = if body.trim_end().ends_with('{') { "" } else { "," };
            let data = format!("{body}{comma}{}:{value}}}", serde_json::Value::from(key));
            Event::from_parts(plain.seq(), plain.time(), plain.event_type().as_str(), data, None, None)
        });
        self.push(core, event)
    }

    /// Adds a surface event; returns the seq it will have.
    pub(crate) fn surface(
        &mut self,
        core: &LoopCore,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<u64, LoopError> {
        let event = Event::surface(self.next, core.clock.now_ms(), payload, intent);
        self.push(core, event)
    }

    pub(crate) fn into_events(self) -> Vec<Event> {
        self.events
    }
}

/// Runs blocking `work` so that it holds no async worker: in
/// [`block_in_place`](tokio::task::block_in_place) on a multi-threaded
/// runtime, inline elsewhere (see [`LoopCore::commit`]).
fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
