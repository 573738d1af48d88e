//! [`DurableSession`]: a [`Session`] whose every append is written to a store
//! before it is committed in memory.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use palimpsest_core_session::payload::{LogPayload, SurfacePayload};
use palimpsest_core_session::{
    AppendError, AppendGuard, BatchError, Event, EventType, GuardViolation, Session, SessionHeader,
    SessionView, SurfaceIntent, TurnState,
};

use crate::clock::{Clock, SystemClock};
use crate::error::StoreError;
use crate::store::{LoadReport, LoadSink, Resumable, SessionStore};

/// What [`DurableSession::open_or_create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The session was not there; it was created, empty.
    Created,
    /// The session was there and was opened; what its load found.
    Existing(LoadReport),
}

/// Loads a session from `store` and checks it into a [`Session`] (every
/// rule, and `guard` if given), without keeping a copy of the log: the
/// session is built as the store reads it, through
/// [`SessionStore::load_into`] (on the store's decoding thread, where it
/// has one), not after. The result is that of
/// [`load`](SessionStore::load) followed by
/// [`Session::from_log_guarded`], errors included: a store error comes
/// first, then the first event the rules refuse.
///
/// ```
/// use palimpsest_core_session::SessionHeader;
/// use palimpsest_persistence::{load_session, MemoryStore, SessionStore};
///
/// let store = MemoryStore::default();
/// store.create(&SessionHeader::new("s1", 0))?;
/// let (session, _report) = load_session(&store, "s1", None)?;
/// assert_eq!(session.next_seq(), 0);
/// # Ok::<(), palimpsest_persistence::DurableError>(())
/// ```
pub fn load_session(
    store: &dyn SessionStore,
    session_id: &str,
    guard: Option<Box<dyn AppendGuard>>,
) -> Result<(Session, LoadReport), DurableError> {
    let mut sink = SessionSink { guard, session: None, refused: None };
    let report = store.load_into(session_id, &mut sink)?;
    // A store error (above) comes first, as it would after a whole load.
    if let Some(refused) = sink.refused {
        return Err(refused.into());
    }
    let session = sink.session.ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
    Ok((session, report))
}

/// Saves a checkpoint of `session` in `store` (its log as `store` holds
/// it), at a turn boundary only: while the log ends inside a turn this
/// saves nothing (`Ok(false)`), so a resumed session always holds its open
/// turn whole and crash repair reads it there. Returns whether a
/// checkpoint was kept. What every writer calls after writing a session
/// (the loop through [`DurableSession::save_checkpoint`], `convert`, `fork`,
/// `repair --write`).
pub fn save_checkpoint(store: &dyn SessionStore, session: &Session) -> Result<bool, StoreError> {
    if session.last_turn().1 {
        return Ok(false);
    }
    store.save_checkpoint(session.id(), &session.checkpoint())
}

/// Opens session `session_id` for [`DurableSession::resume_guarded`]: resumed
/// from a checkpoint when the store has one that matches, else (and after
/// any refusal of the checkpoint or of its tail) [`load_session`].
fn open_session(
    store: &dyn SessionStore,
    session_id: &str,
    guard: Option<Box<dyn AppendGuard>>,
) -> Result<(Session, LoadReport), DurableError> {
    let resumable = match store.load_resumable(session_id) {
        Ok(Resumable { checkpoint: Some(checkpoint), header, tail, report }) => {
            Some((header, checkpoint, tail, report))
        }
        // No checkpoint: stream the log, checking it as it arrives, rather
        // than hold it whole twice. A read error is left to the whole load
        // too, so its error is the one an open without checkpoints gives.
        Ok(Resumable { checkpoint: None, .. }) | Err(_) => None,
    };
    let Some((header, checkpoint, tail, report)) = resumable else {
        return load_session(store, session_id, guard);
    };
    let tail_len = tail.len();
    // The guard goes to the resumed session through a shared cell, so that
    // it is still ours to hand to the whole load if the resume fails.
    let shared = guard.map(|g| Arc::new(Mutex::new(g)));
    let lent = shared.clone().map(|g| Box::new(SharedGuard(g)) as Box<dyn AppendGuard>);
    match Session::resume_guarded(header, checkpoint, tail, lent) {
        Ok(mut session) => {
            if let Some(shared) = shared {
                // Take the guard back out of the cell: the session's copy
                // goes first, then the guard is installed again (restored
                // for the session as it now is).
                session.set_guard(None);
                session.set_guard(Some(take_back(shared)));
            }
            tracing::debug!(session_id, tail = tail_len, "resumed from a checkpoint");
            Ok((session, report))
        }
        Err(e) => {
            tracing::debug!(
                session_id, code = e.code(), error = %e,
                "the checkpoint was refused; loading the whole log"
            );
            let guard = shared.map(take_back);
            load_session(store, session_id, guard)
        }
    }
}

/// The guard out of its shared cell, once no one else holds the cell (the
/// session it was lent to is gone or has dropped it); still shared if not.
fn take_back(shared: Arc<Mutex<Box<dyn AppendGuard>>>) -> Box<dyn AppendGuard> {
    match Arc::try_unwrap(shared) {
        Ok(cell) => cell.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(shared) => Box::new(SharedGuard(shared)),
    }
}

/// A guard shared between a resume that may fail and the whole load that
/// then takes over: each call goes to the one guard inside.
#[derive(Debug)]
struct SharedGuard(Arc<Mutex<Box<dyn AppendGuard>>>);

impl SharedGuard {
    fn inner(&self) -> std::sync::MutexGuard<'_, Box<dyn AppendGuard>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AppendGuard for SharedGuard {
    fn check(&self, session: SessionView<'_>, candidate: &Event) -> Result<(), GuardViolation> {
        self.inner().check(session, candidate)
    }

    fn committed(&mut self, session: SessionView<'_>, event: &Event) {
        self.inner().committed(session, event);
    }

    fn rebuild(&mut self, session: SessionView<'_>) {
        self.inner().rebuild(session);
    }

    fn restore(&mut self, session: SessionView<'_>, turns: &TurnState) {
        self.inner().restore(session, turns);
    }
}

/// Builds a [`Session`] from a session handed over as it is read. After a
/// refused event it takes the rest without looking at it, so the read goes
/// on and a store error further on still comes first, as after a whole
/// [`load`](SessionStore::load) followed by [`Session::from_log`].
struct SessionSink {
    guard: Option<Box<dyn AppendGuard>>,
    session: Option<Session>,
    refused: Option<AppendError>,
}

impl LoadSink for SessionSink {
    fn header(&mut self, header: SessionHeader) -> ControlFlow<()> {
        match Session::from_log_guarded(header, Vec::new(), self.guard.take()) {
            Ok(session) => self.session = Some(session),
            Err(e) => self.refused = Some(e),
        }
        ControlFlow::Continue(())
    }

    fn event(&mut self, event: Event) -> ControlFlow<()> {
        if self.refused.is_none() {
            if let Some(session) = self.session.as_mut() {
                if let Err(e) = session.append(event) {
                    self.refused = Some(e);
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// A session keeps every event (and gives those it trims away their
    /// batch's text back).
    fn keeps_events(&self) -> bool {
        true
    }
}

/// When appended events are made durable, and so what a crash can lose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Sync after every append. A crash loses nothing that was acknowledged.
    EveryAppend,
    /// Sync after an append that ends a turn (`turn/end`), and on
    /// [`DurableSession::flush`]. A crash can lose the events of the turn in
    /// progress (repair closes the turn on resume); completed turns are safe.
    #[default]
    TurnBoundary,
    /// Never sync; the operating system writes back when it likes. A process
    /// crash loses nothing (the data is in the OS), a power loss or kernel
    /// crash can lose any suffix of the log (a torn tail is dropped on load).
    Os,
}

/// Opening, appending to or flushing a [`DurableSession`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurableError {
    /// The event was refused by the session's rules; nothing was written.
    #[error(transparent)]
    Refused(#[from] AppendError),
    /// The store failed while opening, creating or syncing the session.
    /// The message claims nothing more: the cause is the `source()`.
    #[error("the store failed")]
    Store(#[from] StoreError),
    /// Writing appended events to the store failed. Memory is unchanged
    /// (the session does not hold them). Whether the store holds them
    /// depends on the cause ([`StoreError::wrote_nothing`]): a refusal wrote
    /// nothing; after an `io` failure the store may hold all, part or none
    /// of them, and reopening the session shows which.
    #[error("{}; the session in memory is unchanged", source.write_outcome(seqs))]
    Write {
        /// The seqs of the batch.
        seqs: std::ops::Range<u64>,
        /// Why the store failed (boxed: errors are the cold path).
        #[source]
        source: Box<StoreError>,
    },
    /// The store took the batch and the session in memory holds it, but
    /// making it durable (the store's [`sync`](SessionStore::sync), which
    /// [`Durability`] asked for) failed: a crash of this process loses
    /// nothing the store took, a power loss may. Appending goes on as
    /// usual; [`DurableSession::flush`] tries the sync again. (A SQLite
    /// checkpoint that another connection's long read keeps from finishing
    /// is `locked`, for one.)
    #[error(
        "{} appended and held in memory, but not yet durable: syncing failed (flush to try again)",
        crate::error::seqs_text(seqs)
    )]
    NotSynced {
        /// The seqs of the batch.
        seqs: std::ops::Range<u64>,
        /// Why the sync failed.
        #[source]
        source: Box<StoreError>,
    },
}

impl DurableError {
    /// The stable code: the contract code of a refusal, or the store's code.
    pub fn code(&self) -> &str {
        match self {
            DurableError::Refused(e) => e.code(),
            DurableError::Store(e) => e.code(),
            DurableError::Write { source, .. } | DurableError::NotSynced { source, .. } => source.code(),
        }
    }

    /// The store's error, when the store failed (rather than the session's
    /// rules refusing an event).
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            DurableError::Refused(_) => None,
            DurableError::Store(e) => Some(e),
            DurableError::Write { source, .. } | DurableError::NotSynced { source, .. } => Some(source),
        }
    }
}

/// Without the seqs of the batch: a failed write is a plain
/// [`DurableError::Store`], which claims nothing about the outcome.
impl From<BatchError<StoreError>> for DurableError {
    fn from(e: BatchError<StoreError>) -> DurableError {
        match e {
            BatchError::Refused(e) => DurableError::Refused(e),
            BatchError::Write(e) => DurableError::Store(e),
        }
    }
}

/// A [`Session`] joined to a [`SessionStore`]: validate in memory → write to
/// the store → commit in memory.
///
/// Appends take their `time` from the caller ([`append_log`](Self::append_log),
/// [`append_surface`](Self::append_surface), events built by hand), or from
/// the session's [`Clock`] ([`append_log_now`](Self::append_log_now),
/// [`append_surface_now`](Self::append_surface_now), [`now_ms`](Self::now_ms)):
/// the [`SystemClock`] unless [`with_clock`](Self::with_clock) set another.
///
/// ```
/// # use std::sync::Arc;
/// # use palimpsest_persistence::{DurableSession, Durability, SessionStore, MemoryStore};
/// # use palimpsest_core_session::{SessionHeader, payload::TurnStart};
/// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
/// let mut s = DurableSession::create(store.clone(), SessionHeader::new("s1", 0), Durability::EveryAppend)?;
/// s.append_log(1, TurnStart { turn: 1 })?;
/// assert_eq!(store.load("s1")?.events.len(), 1);
/// # Ok::<(), palimpsest_persistence::DurableError>(())
/// ```
#[derive(Debug)]
pub struct DurableSession {
    session: Session,
    store: Arc<dyn SessionStore>,
    durability: Durability,
    clock: Arc<dyn Clock>,
}

impl DurableSession {
    /// Creates a new session in `store`.
    pub fn create(
        store: Arc<dyn SessionStore>,
        header: SessionHeader,
        durability: Durability,
    ) -> Result<DurableSession, DurableError> {
        store.create(&header)?;
        if durability == Durability::EveryAppend {
            // The store holds the session now whatever the sync says, so
            // failing here would leave a caller who tries again with
            // `already-exists`. The first append syncs again (and reports
            // `NotSynced` if that fails too), covering the header with it.
            if let Err(e) = store.sync(&header.id) {
                tracing::warn!(
                    session_id = %header.id, code = e.code(), error = %e,
                    "created, but the sync failed: not yet durable"
                );
            }
        }
        Ok(DurableSession {
            session: Session::create(header),
            store,
            durability,
            clock: Arc::new(SystemClock),
        })
    }

    /// Opens session `header.id` if the store holds it (checking every
    /// rule, as [`open`](DurableSession::open)), or creates it from
    /// `header` (as [`create`](DurableSession::create)). Of two processes
    /// racing to create it, the loser opens what the winner created.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use palimpsest_core_session::SessionHeader;
    /// use palimpsest_persistence::{Durability, DurableSession, MemoryStore, Opened};
    ///
    /// let store = Arc::new(MemoryStore::default());
    /// let header = SessionHeader::new("s1", 0);
    /// let (_, first) = DurableSession::open_or_create(store.clone(), header.clone(), Durability::default())?;
    /// let (_, again) = DurableSession::open_or_create(store, header, Durability::default())?;
    /// assert!(matches!((first, again), (Opened::Created, Opened::Existing(_))));
    /// # Ok::<(), palimpsest_persistence::DurableError>(())
    /// ```
    pub fn open_or_create(
        store: Arc<dyn SessionStore>,
        header: SessionHeader,
        durability: Durability,
    ) -> Result<(DurableSession, Opened), DurableError> {
        let open = |store: Arc<dyn SessionStore>| {
            DurableSession::open(store, &header.id, durability)
                .map(|(session, report)| (session, Opened::Existing(report)))
        };
        match open(store.clone()) {
            Err(DurableError::Store(StoreError::NotFound { .. })) => {}
            other => return other,
        }
        match DurableSession::create(store.clone(), header.clone(), durability) {
            Ok(session) => Ok((session, Opened::Created)),
            Err(DurableError::Store(StoreError::AlreadyExists { .. })) => open(store),
            Err(e) => Err(e),
        }
    }

    /// Opens a stored session, reading its whole log and checking every
    /// rule through the seed constructor: an invalid stored log is refused
    /// with its contract code. The session is complete
    /// ([`Session::events`] is the whole log). To read only what appending
    /// needs, see [`DurableSession::resume`].
    pub fn open(
        store: Arc<dyn SessionStore>,
        session_id: &str,
        durability: Durability,
    ) -> Result<(DurableSession, LoadReport), DurableError> {
        DurableSession::open_guarded(store, session_id, durability, None)
    }

    /// Like [`DurableSession::open`], with a guard checking the stored log and
    /// every later append.
    pub fn open_guarded(
        store: Arc<dyn SessionStore>,
        session_id: &str,
        durability: Durability,
        guard: Option<Box<dyn AppendGuard>>,
    ) -> Result<(DurableSession, LoadReport), DurableError> {
        let (session, report) = load_session(&*store, session_id, guard)?;
        Ok((DurableSession { session, store, durability, clock: Arc::new(SystemClock) }, report))
    }

    /// Opens a stored session for appending, reading what appending needs:
    /// when the store keeps a checkpoint that matches the log
    /// ([`SessionStore::load_resumable`]), the session is resumed from it
    /// and only the events after it are read and checked, O(surface +
    /// tail) instead of O(log); the session then holds its surface, its
    /// settings event and the events after the checkpoint
    /// ([`Session::is_complete`] is false, [`Session::resident`] is what it
    /// holds). It refuses and accepts exactly what a whole load would.
    /// Without a checkpoint, or when the session refuses it (it does not
    /// belong to the header, or a tail event is refused after it), this is
    /// [`DurableSession::open`]: a checkpoint never makes an open fail, nor
    /// open a different session, than a whole load would.
    pub fn resume(
        store: Arc<dyn SessionStore>,
        session_id: &str,
        durability: Durability,
    ) -> Result<(DurableSession, LoadReport), DurableError> {
        DurableSession::resume_guarded(store, session_id, durability, None)
    }

    /// Like [`DurableSession::resume`], with a guard checking the events
    /// read and every later append (restored from the checkpoint's turn
    /// state for the events it covers).
    pub fn resume_guarded(
        store: Arc<dyn SessionStore>,
        session_id: &str,
        durability: Durability,
        guard: Option<Box<dyn AppendGuard>>,
    ) -> Result<(DurableSession, LoadReport), DurableError> {
        let (session, report) = open_session(&*store, session_id, guard)?;
        Ok((DurableSession { session, store, durability, clock: Arc::new(SystemClock) }, report))
    }

    /// Saves a checkpoint of the session in its store
    /// ([`SessionStore::save_checkpoint`]), so that the next open reads
    /// the surface and what follows instead of the whole log. Returns
    /// whether the store keeps checkpoints. A failure changes nothing the
    /// log holds: the caller may carry on (the next open reads more).
    ///
    /// Checkpoints are taken at turn boundaries: while the log ends inside
    /// a turn this saves nothing (`Ok(false)`), so the open turn of a
    /// resumed session is always in the events it holds (crash repair
    /// reads it there).
    pub fn save_checkpoint(&self) -> Result<bool, StoreError> {
        save_checkpoint(&*self.store, &self.session)
    }

    /// For a session that does not hold its whole log (opened with
    /// [`resume`](DurableSession::resume)), lets go of the events an
    /// append no longer needs ([`Session::trim`]): what it holds is then
    /// the surface and what comes next, however long it runs. A session
    /// held whole stays whole ([`Session::events`] keeps its meaning for
    /// callers that opened it so). The loop calls this after each turn's
    /// checkpoint.
    pub fn trim(&mut self) {
        if !self.session.is_complete() {
            self.session.trim();
        }
    }

    /// The in-memory session (read-only: appends go through this wrapper).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The durability policy.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The same session, stamping its `*_now` appends with `clock`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use palimpsest_core_session::{payload::{TurnEnd, TurnEndReason, TurnStart}, SessionHeader};
    /// use palimpsest_persistence::{Durability, DurableSession, ManualClock, MemoryStore};
    ///
    /// let store = Arc::new(MemoryStore::default());
    /// let clock = Arc::new(ManualClock::new(1_000).with_tick(5));
    /// let mut s = DurableSession::create(store, SessionHeader::new("s1", 0), Durability::default())?
    ///     .with_clock(clock.clone());
    /// s.append_log_now(TurnStart { turn: 1 })?;
    /// clock.set(10); // the clock goes back: the log's times do not
    /// s.append_log_now(TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;
    /// let times: Vec<u64> = s.session().events().iter().map(|e| e.time()).collect();
    /// assert_eq!(times, [1_000, 1_000]);
    /// # Ok::<(), palimpsest_persistence::DurableError>(())
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> DurableSession {
        self.clock = clock;
        self
    }

    /// Replaces the clock of the `*_now` appends.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// The clock of the `*_now` appends ([`SystemClock`] unless set).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The time for the next event: the clock's reading, raised to the
    /// last event's time if the clock is behind it. So the times the
    /// `*_now` appends write never go backwards in the log, as repair's
    /// closers reuse the last event's time (contract section 5); the
    /// format itself orders only seqs (`docs/contract-notes.md`, section
    /// 8). Reads the clock once (a [`ManualClock`](crate::ManualClock)
    /// with a tick moves on).
    pub fn now_ms(&self) -> u64 {
        let now = self.clock.now_ms();
        self.session.events().last().map_or(now, |last| now.max(last.time()))
    }

    /// Appends a surface-eligible payload stamped [`now_ms`](Self::now_ms);
    /// returns its seq.
    pub fn append_surface_now(
        &mut self,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<u64, DurableError> {
        let time = self.now_ms();
        self.append_surface(time, payload, intent)
    }

    /// Appends a log-only payload stamped [`now_ms`](Self::now_ms); returns
    /// its seq.
    pub fn append_log_now(&mut self, payload: impl Into<LogPayload>) -> Result<u64, DurableError> {
        let time = self.now_ms();
        self.append_log(time, payload)
    }

    /// Installs (or removes) a guard.
    pub fn set_guard(&mut self, guard: Option<Box<dyn AppendGuard>>) {
        self.session.set_guard(guard);
    }

    /// Appends a surface-eligible payload; returns its seq.
    pub fn append_surface(
        &mut self,
        time: u64,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<u64, DurableError> {
        let event = Event::surface(self.session.next_seq(), time, payload, intent)?;
        self.append(event)
    }

    /// Appends a log-only payload; returns its seq.
    pub fn append_log(&mut self, time: u64, payload: impl Into<LogPayload>) -> Result<u64, DurableError> {
        let event = Event::log(self.session.next_seq(), time, payload)?;
        self.append(event)
    }

    /// Appends one event; returns its seq.
    pub fn append(&mut self, event: Event) -> Result<u64, DurableError> {
        let range = self.append_batch(vec![event])?;
        Ok(range.start)
    }

    /// Appends a batch atomically (all or nothing, in memory and in the
    /// store); returns the seq range. When the store took the batch but
    /// the sync after it failed, memory holds the batch too, as the store
    /// does, and the error is [`DurableError::NotSynced`].
    pub fn append_batch(&mut self, events: Vec<Event>) -> Result<std::ops::Range<u64>, DurableError> {
        let (store, durability) = (&self.store, self.durability);
        let id = self.session.id().to_owned();
        let first = self.session.next_seq();
        let seqs = first..first.saturating_add(events.len() as u64);
        let mut not_synced = None;
        let range = self.session.append_batch_with(events, |batch| {
            store.append(&id, batch)?;
            let ends_turn = batch.iter().any(|e| *e.event_type() == EventType::TurnEnd);
            let synced = match durability {
                Durability::EveryAppend => store.sync(&id),
                Durability::TurnBoundary if ends_turn => store.sync(&id),
                _ => Ok(()),
            };
            // The store holds the batch whatever the sync says: memory
            // must hold it too, or the next append would not continue the
            // stored log.
            not_synced = synced.err();
            Ok(())
        });
        match (range, not_synced) {
            (Ok(range), None) => Ok(range),
            (Ok(range), Some(source)) => {
                Err(DurableError::NotSynced { seqs: range, source: Box::new(source) })
            }
            (Err(BatchError::Refused(e)), _) => Err(DurableError::Refused(e)),
            (Err(BatchError::Write(source)), _) => {
                Err(DurableError::Write { seqs, source: Box::new(source) })
            }
        }
    }

    /// Makes everything appended so far durable.
    pub fn flush(&mut self) -> Result<(), DurableError> {
        self.store.sync(self.session.id()).map_err(DurableError::Store)
    }

    /// Consumes the wrapper, returning the session.
    pub fn into_session(self) -> Session {
        self.session
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use palimpsest_core_session::payload::TurnStart;

    use super::*;
    use crate::MemoryStore;

    /// How [`Failing`]'s appends fail.
    #[derive(Debug, Default, Clone, Copy)]
    enum AppendFault {
        /// They do not.
        #[default]
        None,
        /// With `locked`, before writing.
        LockedBefore,
        /// With `io` after writing the batch (as a write whose last step
        /// failed after the bytes landed).
        IoAfter,
    }

    /// A store whose appends fail as `append` says, and whose syncs fail
    /// with `locked` while `sync_fails` is set (a SQLite checkpoint held
    /// back by another connection's long read).
    #[derive(Debug, Default)]
    struct Failing {
        inner: MemoryStore,
        append: AppendFault,
        sync_fails: std::sync::atomic::AtomicBool,
    }

    impl SessionStore for Failing {
        fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
            self.inner.create(header)
        }
        fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
            self.inner.create_with_events(header, events)
        }
        fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
            match self.append {
                AppendFault::None => self.inner.append(session_id, events),
                AppendFault::LockedBefore => Err(StoreError::Locked { what: "the session".into() }),
                AppendFault::IoAfter => {
                    self.inner.append(session_id, events)?;
                    Err(StoreError::io("syncing", std::io::Error::other("No space left on device")))
                }
            }
        }
        fn load(&self, session_id: &str) -> Result<crate::StoredSession, StoreError> {
            self.inner.load(session_id)
        }
        fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
            self.inner.list()
        }
        fn delete(&self, session_id: &str) -> Result<(), StoreError> {
            self.inner.delete(session_id)
        }
        fn sync(&self, session_id: &str) -> Result<(), StoreError> {
            if self.sync_fails.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::Locked { what: "the checkpoint".into() });
            }
            self.inner.sync(session_id)
        }
    }

    #[test]
    fn a_failed_sync_after_the_store_took_the_batch_leaves_memory_as_the_store() {
        use palimpsest_core_session::payload::{TurnEnd, TurnEndReason};

        let store = Arc::new(Failing::default());
        let dyn_store: Arc<dyn SessionStore> = store.clone();
        let mut s = DurableSession::create(dyn_store, SessionHeader::new("s1", 0), Durability::EveryAppend)
            .unwrap_or_else(|e| panic!("{e}"));
        store.sync_fails.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = s.append_log(1, TurnStart { turn: 1 }).err().unwrap_or_else(|| panic!("the sync fails"));
        assert!(matches!(&err, DurableError::NotSynced { seqs, .. } if *seqs == (0..1)), "{err:?}");
        assert_eq!(err.code(), "locked");
        assert!(err.to_string().contains("not yet durable"), "{err}");
        // Memory holds what the store holds.
        let stored = store.inner.load("s1").unwrap_or_else(|e| panic!("{e}")).events;
        assert_eq!(s.session().events(), &stored[..]);
        assert_eq!(stored.len(), 1);
        // Flushing fails while the sync does, and appending goes on.
        assert_eq!(s.flush().map_err(|e| e.code().to_owned()), Err("locked".to_owned()));
        store.sync_fails.store(false, std::sync::atomic::Ordering::SeqCst);
        s.flush().unwrap_or_else(|e| panic!("{e}"));
        let end = TurnEnd { turn: 1, reason: TurnEndReason::Completed };
        assert_eq!(s.append_log(2, end).map_err(|e| e.to_string()), Ok(1));
    }

    fn failed_append(io: bool) -> (DurableError, Arc<Failing>) {
        let append = if io { AppendFault::IoAfter } else { AppendFault::LockedBefore };
        let store = Arc::new(Failing { append, ..Failing::default() });
        let dyn_store: Arc<dyn SessionStore> = store.clone();
        let mut s = DurableSession::create(dyn_store, SessionHeader::new("s1", 0), Durability::Os)
            .unwrap_or_else(|e| panic!("{e}"));
        let err = s.append_log(1, TurnStart { turn: 1 }).err().unwrap_or_else(|| panic!("the append fails"));
        assert!(s.session().events().is_empty(), "memory is unchanged");
        (err, store)
    }

    #[test]
    fn now_appends_take_the_clock_and_never_go_back() {
        use palimpsest_core_session::payload::{Block, Message, Role, Source, UserMessage};

        use crate::{Clock, ManualClock};

        let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
        let mut s = DurableSession::create(store.clone(), SessionHeader::new("s1", 0), Durability::Os)
            .unwrap_or_else(|e| panic!("{e}"));
        // The default clock is the system's.
        let before = crate::SystemClock.now_ms();
        s.append_log_now(TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.session().events()[0].time() >= before);

        let clock = Arc::new(ManualClock::new(0).with_tick(1));
        s.set_clock(clock.clone());
        // Behind the last event: raised to its time.
        let message = Message {
            id: "u1".into(),
            role: Role::User,
            content: vec![Block::text("hi")],
            source: Source::User,
        };
        let seq = s
            .append_surface_now(UserMessage { turn: Some(1), message }, SurfaceIntent::append())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seq, 1);
        let last = s.session().events()[0].time();
        assert_eq!(s.session().events()[1].time(), last);
        // Ahead of it: the clock's own reading.
        clock.set(last + 100);
        s.append_log_now(TurnStart { turn: 2 }).map(drop).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.session().events()[2].time(), last + 100);
        assert_eq!(clock.now_ms(), last + 101, "one reading per append");
        let stored: Vec<u64> =
            store.load("s1").unwrap_or_else(|e| panic!("{e}")).events.iter().map(Event::time).collect();
        assert_eq!(stored, [last, last, last + 100]);
    }

    #[test]
    fn a_failed_io_write_says_the_outcome_is_unknown_and_it_was() {
        let (err, store) = failed_append(true);
        assert_eq!(
            err.to_string(),
            "writing seq 0 to the store failed; whether the store holds it is unknown until the \
             session is reopened; the session in memory is unchanged"
        );
        assert_eq!(err.source().map(ToString::to_string).as_deref(), Some("io: syncing"));
        assert_eq!(store.inner.load("s1").map(|s| s.events.len()).ok(), Some(1), "the store does hold it");
    }

    #[test]
    fn a_refused_write_says_nothing_was_written() {
        let (err, store) = failed_append(false);
        assert_eq!(
            err.to_string(),
            "the store refused seq 0; nothing was written; the session in memory is unchanged"
        );
        assert_eq!(err.code(), "locked");
        assert_eq!(store.inner.load("s1").map(|s| s.events.len()).ok(), Some(0));
    }

    #[test]
    fn open_or_create_opens_what_is_there_and_never_creates_over_a_bad_log() {
        let store = Arc::new(MemoryStore::default());
        let header = SessionHeader::new("s", 1);
        let (mut durable, opened) =
            DurableSession::open_or_create(store.clone(), header.clone(), Durability::EveryAppend)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(opened, Opened::Created);
        durable.append_log(2, TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"));
        let (again, opened) = DurableSession::open_or_create(store.clone(), header, Durability::EveryAppend)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(opened, Opened::Existing(_)));
        assert_eq!(again.session().next_seq(), 1, "the stored event is there, not a new session");

        // A stored log the rules refuse is an error, not a reason to create.
        let bad = [
            r#"{"seq":0,"time":2,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":3,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[],"source":{"kind":"user"}}},"sourceEventSeqs":[0],"surfaceOp":{"op":"replace","start":0,"end":0}}"#,
        ]
        .map(|line| Event::from_json(line).unwrap_or_else(|e| panic!("{e}")));
        store.create_with_events(&SessionHeader::new("bad", 1), &bad).unwrap_or_else(|e| panic!("{e}"));
        let err = DurableSession::open_or_create(store.clone(), SessionHeader::new("bad", 1), Durability::Os)
            .map(drop)
            .expect_err("a replace of an event not on the surface is refused");
        assert!(matches!(err, DurableError::Refused(_)), "{err:?}");
        assert_eq!(err.code(), "replace-start-missing");
        assert_eq!(store.load("bad").map(|s| s.events.len()).ok(), Some(2), "nothing written over it");
    }
}
