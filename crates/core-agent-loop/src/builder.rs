//! [`AgentLoopBuilder`]: wires a provider, tools, plugins, config, clock
//! and ids, then creates, opens or attaches the session an [`AgentLoop`]
//! runs over (repairing an open last turn first).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_session::payload::Settings;
use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::{DurableSession, KeptHold, LoadReport, SessionStore};

use crate::agent::AgentLoop;
use crate::clock::{Clock, IdGenerator, SystemClock, UniqueIds};
use crate::config::AgentConfig;
use crate::dev::dev_guard;
use crate::error::LoopError;
use crate::plugin::Plugin;
use crate::provider::Provider;
use crate::state::LoopCore;
use crate::tool::{Tool, ToolRegistry};

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
    hold: Option<(String, Duration)>,
    bounded_resume: bool,
}

/// How long a hold lasts unless renewed, when [`AgentLoopBuilder::hold`]
/// is given none: the loop renews it every third of that.
pub const DEFAULT_HOLD_TTL: Duration = Duration::from_secs(30);

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

    /// Holds the session for `holder` while the loop lives, so that no other
    /// writer (another process, another machine) appends to it: the loop
    /// takes the store's hold ([`SessionStore::hold`]) when it creates or
    /// opens the session (before loading, since opening may append repair
    /// closers), renews it every third of `ttl` in the background, and
    /// releases it when dropped. Opening a session another worker holds
    /// fails with `locked`, naming the holder and when its hold expires.
    /// On a store that grants no holds (the in-memory one) this does
    /// nothing. `holder` should name the worker, e.g. `host:pid`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use palimpsest_core_agent_loop::{AgentLoop, ScriptedProvider, DEFAULT_HOLD_TTL};
    /// use palimpsest_persistence::{MemoryStore, SessionStore};
    ///
    /// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    /// let agent = AgentLoop::builder(Arc::new(ScriptedProvider::new(vec![])))
    ///     .hold("worker-a", DEFAULT_HOLD_TTL)
    ///     .create(store, "s1")?;
    /// assert!(agent.hold().is_none(), "the in-memory store grants no hold");
    /// # Ok::<(), palimpsest_core_agent_loop::LoopError>(())
    /// ```
    pub fn hold(mut self, holder: impl Into<String>, ttl: Duration) -> AgentLoopBuilder {
        self.hold = Some((holder.into(), ttl));
        self
    }

    /// Opens sessions from their store's checkpoint rather than their whole
    /// log ([`DurableSession::resume`]): [`open`](Self::open) then reads the
    /// surface and the events after the last checkpoint (the loop leaves
    /// one at every turn end), O(surface + tail) instead of O(log), and
    /// the session refuses and accepts exactly what a whole load would.
    /// The session is then not complete: [`Session::events`] holds only
    /// what was read (see [`Session::resident`]). Off by default.
    ///
    /// A store that keeps no checkpoint (the in-memory one), a session
    /// with none yet, or one whose checkpoint does not match its log is
    /// opened whole, as without this option; whether a checkpoint was used
    /// shows in [`Session::is_complete`] (`false` when it was).
    ///
    /// [`Session::is_complete`]: palimpsest_core_session::Session::is_complete
    /// [`Session::events`]: palimpsest_core_session::Session::events
    /// [`Session::resident`]: palimpsest_core_session::Session::resident
    pub fn bounded_resume(mut self, on: bool) -> AgentLoopBuilder {
        self.bounded_resume = on;
        self
    }

    /// Takes the hold [`hold`](Self::hold) asked for, if any.
    fn take_hold(
        &self,
        store: &Arc<dyn SessionStore>,
        session_id: &str,
    ) -> Result<Option<KeptHold>, LoopError> {
        let Some((holder, ttl)) = &self.hold else { return Ok(None) };
        KeptHold::take(Arc::clone(store), session_id, holder, *ttl)
            .map(Some)
            .map_err(|e| LoopError::Session { session_id: session_id.to_owned(), source: Box::new(e.into()) })
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
        let mut session = DurableSession::create(Arc::clone(&store), header, self.config.durability)
            .map_err(|source| LoopError::Session { session_id: id.clone(), source: Box::new(source) })?;
        if let Some(guard) = dev_guard(self.config.dev_mode) {
            session.set_guard(Some(guard));
        }
        // Taken once the session exists (a hold names a stored session);
        // nobody else knows the new id yet.
        let hold = self.take_hold(&store, &id)?;
        let settings = self.settings.clone();
        let mut agent = self.build(session, hold);
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
        // Held before it is read: opening may append repair closers.
        let hold = self.take_hold(&store, session_id)?;
        let guard = dev_guard(self.config.dev_mode);
        let durability = self.config.durability;
        let opened = if self.bounded_resume {
            DurableSession::resume_guarded(store, session_id, durability, guard)
        } else {
            DurableSession::open_guarded(store, session_id, durability, guard)
        };
        let (session, load) = opened.map_err(|source| LoopError::Session {
            session_id: session_id.to_owned(),
            source: Box::new(source),
        })?;
        let settings = self.settings.clone();
        let mut agent = self.build(session, hold);
        let repaired = agent.repair_open_turn()?;
        if let Some(settings) = settings {
            agent.set_settings(settings)?;
        }
        Ok((agent, OpenReport { load, repaired }))
    }

    /// Wraps a session opened elsewhere (its log is taken as already
    /// checked), repairing an open last turn like [`open`](Self::open). In
    /// dev mode the invariants guard replaces any guard it had. Its clock
    /// becomes the loop's ([`clock`](Self::clock)). A [`hold`](Self::hold)
    /// is taken before the repair.
    pub fn attach(self, mut session: DurableSession) -> Result<(AgentLoop, OpenReport), LoopError> {
        if let Some(guard) = dev_guard(self.config.dev_mode) {
            session.set_guard(Some(guard));
        }
        let hold = self.take_hold(session.store(), session.session().id())?;
        let settings = self.settings.clone();
        let mut agent = self.build(session, hold);
        let repaired = agent.repair_open_turn()?;
        if let Some(settings) = settings {
            agent.set_settings(settings)?;
        }
        Ok((agent, OpenReport { load: LoadReport::default(), repaired }))
    }

    /// The loop over `session`, which takes the loop's clock: its own
    /// `*_now` appends (after [`AgentLoop::into_session`], say) are stamped
    /// by the clock that stamped the loop's.
    fn build(self, mut session: DurableSession, hold: Option<KeptHold>) -> AgentLoop {
        session.set_clock(Arc::clone(&self.clock));
        let core = LoopCore {
            session,
            provider: self.provider,
            tools: self.tools,
            config: self.config,
            clock: self.clock,
            ids: self.ids,
            not_synced: false,
        };
        AgentLoop::from_parts(core, self.plugins, hold)
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
            hold: None,
            bounded_resume: false,
        }
    }
}
