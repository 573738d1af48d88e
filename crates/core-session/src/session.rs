//! [`Session`]: the log, its surface, and the one place appends happen.
//!
//! Every append goes through the same three steps, so a refused event
//! changes nothing:
//!
//! 1. **check**: the event's own rules (built into [`Event`]), contiguity and
//!    the surface rules ([`SurfaceManager::plan`]), then the optional
//!    [`AppendGuard`] (the invariants checker in dev mode);
//! 2. **write**: for [`Session::append_with`] and [`Session::append_batch_with`],
//!    the caller's store write; a failure here rolls everything back;
//! 3. **commit**: push onto the log, apply the surface plan, tell the guard.

use std::fmt;
use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use crate::checkpoint::{fingerprint, Checkpoint, ResumeError, TurnState};
use crate::derive::{derive_messages, derive_request, effective_settings, DerivedMessage, DerivedRequest};
use crate::error::AppendError;
use crate::event::{Event, EventType, SurfaceIntent, SurfaceOp};
use crate::header::SessionHeader;
use crate::history::{History, HistoryCache};
use crate::payload::{LogPayload, Settings, SurfacePayload};
use crate::resident::{find, ResidentLog};
use crate::surface::{SurfaceManager, SurfaceStep, SurfaceUndo};

/// A read-only view of a session, handed to an [`AppendGuard`].
///
/// For a session held whole, `events` is the whole log
/// (`events[i].seq() == i`). For a session resumed from a [`Checkpoint`],
/// it holds only the resident events (see [`ResidentLog`]), sorted by seq:
/// read events through [`SessionView::event`]. A guard is told which with
/// [`AppendGuard::rebuild`] (whole) or [`AppendGuard::restore`] (resumed).
///
/// (RFC 0002 gives the view the log's length too; a new public field would
/// break every struct literal of a view, tests included, so it waits for a
/// breaking release. [`Session::next_seq`] has it.)
///
/// ```
/// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
///
/// let mut s = Session::create(SessionHeader::new("v", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// let view = s.view();
/// assert_eq!(view.event(0).map(|e| e.seq()), Some(0));
/// assert!(view.event(1).is_none());
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SessionView<'a> {
    /// The header.
    pub header: &'a SessionHeader,
    /// The resident events, sorted by seq: the whole committed log for a
    /// session held whole.
    pub events: &'a [Event],
    /// The current surface.
    pub surface: &'a [u64],
    /// The manager `surface` belongs to, when there is one: it finds a seq
    /// on the surface in O(log surface) instead of a scan.
    manager: Option<&'a SurfaceManager>,
}

impl<'a> SessionView<'a> {
    /// A view of a whole log: `events` is every event, in seq order.
    ///
    /// ```
    /// use palimpsest_core_session::{SessionHeader, SessionView};
    ///
    /// let header = SessionHeader::new("v", 0);
    /// let view = SessionView::whole(&header, &[], &[]);
    /// assert!(view.events.is_empty());
    /// ```
    pub fn whole(header: &'a SessionHeader, events: &'a [Event], surface: &'a [u64]) -> SessionView<'a> {
        SessionView { header, events, surface, manager: None }
    }

    /// A view of `events` (sorted by seq) and the surface `manager` folded
    /// from them: the same as [`whole`](SessionView::whole) with
    /// `manager.seqs()`, but [`shadowed_by`](SessionView::shadowed_by)
    /// finds a range's ends by the manager's index instead of a scan of the
    /// surface (what a checker folding a long log should use).
    ///
    /// ```
    /// use palimpsest_core_session::{SessionHeader, SessionView, SurfaceManager};
    ///
    /// let header = SessionHeader::new("v", 0);
    /// let surface = SurfaceManager::new();
    /// let view = SessionView::of(&header, &[], &surface);
    /// assert!(view.surface.is_empty());
    /// ```
    pub fn of(
        header: &'a SessionHeader,
        events: &'a [Event],
        manager: &'a SurfaceManager,
    ) -> SessionView<'a> {
        SessionView { header, events, surface: manager.seqs(), manager: Some(manager) }
    }

    /// The event with this seq, if committed and resident (every committed
    /// event is resident for a session held whole). O(1) for a whole log
    /// and for the events after a checkpoint, O(log resident) otherwise.
    ///
    /// ```
    /// use palimpsest_core_session::{SessionHeader, SessionView};
    ///
    /// let header = SessionHeader::new("v", 0);
    /// assert!(SessionView::whole(&header, &[], &[]).event(0).is_none());
    /// ```
    pub fn event(&self, seq: u64) -> Option<&'a Event> {
        find(self.events, seq)
    }

    /// The surface entries a replace would shadow, in surface order (empty for
    /// an append or an invalid range).
    pub fn shadowed_by(&self, op: SurfaceOp) -> &[u64] {
        let SurfaceOp::Replace { start, end } = op else { return &[] };
        if let Some(manager) = self.manager {
            return manager.shadowed_by(start, end);
        }
        match crate::surface::range_positions(self.surface, start, end) {
            (Some(a), Some(b)) if a <= b => &self.surface[a..=b],
            _ => &[],
        }
    }
}

/// Why a guard refused an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// Stable code, e.g. `turn-already-open`.
    pub code: String,
    /// What was wrong.
    pub message: String,
}

/// An external validator that may veto an append before it is committed.
///
/// The [`Session`] holds one as a trait object, so `core-session` need not
/// know the rules it checks (the `invariants` crate implements it). Like the
/// surface, a guard works in two phases: [`check`](AppendGuard::check) must
/// not change its state; [`committed`](AppendGuard::committed) is called
/// after the event joined the log.
pub trait AppendGuard: Send + Sync + fmt::Debug {
    /// Checks `candidate` against the session as it is now.
    fn check(&self, session: SessionView<'_>, candidate: &Event) -> Result<(), GuardViolation>;

    /// `event` was committed (it is the last event of `session.events`).
    fn committed(&mut self, session: SessionView<'_>, event: &Event);

    /// Rebuilds state from scratch for `session` (after a seed, or after a
    /// batch was rolled back), a session held whole.
    fn rebuild(&mut self, session: SessionView<'_>);

    /// Restores state for `session`, a session resumed from a
    /// [`Checkpoint`] whose events before the checkpoint are not all
    /// resident: `turns` is the fold of the turn and step brackets over the
    /// whole log ([`Session::turn_state`]), which stands in for the events
    /// that are gone. Called instead of [`rebuild`](AppendGuard::rebuild)
    /// whenever the session is not [complete](Session::is_complete).
    ///
    /// The default calls `rebuild`, which is right for a guard that reads
    /// only the surface; a guard that reads the log must override it.
    fn restore(&mut self, session: SessionView<'_>, turns: &TurnState) {
        let _ = turns;
        self.rebuild(session);
    }
}

/// A batch write to the store failed; the session was rolled back.
///
/// `Display` tells the inner error, so `source()` does not return it too
/// (a printed chain names each cause once).
#[derive(Debug)]
pub enum BatchError<E> {
    /// An event was refused; nothing was written.
    Refused(AppendError),
    /// The write callback failed; the session is as it was before the batch.
    Write(E),
}

impl<E: fmt::Display> fmt::Display for BatchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Refused(e) => write!(f, "refused: {e}"),
            BatchError::Write(e) => write!(f, "write failed, the session in memory is unchanged: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BatchError<E> {}

/// A session: header, append-only log, and the surface kept in step with it.
///
/// ```
/// use palimpsest_core_session::{payload::*, Session, SessionHeader, SurfaceIntent};
///
/// let mut s = Session::create(SessionHeader::new("demo", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// let msg = Message { id: "u1".into(), role: Role::User, content: vec![Block::text("hi")], source: Source::User };
/// let seq = s.append_surface(2, UserMessage { turn: Some(1), message: msg }, SurfaceIntent::append())?;
/// assert_eq!(s.surface(), &[seq]);
/// assert_eq!(s.derive_messages()[0].message.id, "u1");
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug)]
pub struct Session {
    header: SessionHeader,
    events: ResidentLog,
    /// For a session resumed from a checkpoint: what it said of the log it
    /// covers (`events.resident_from()` events). `None` when held whole.
    base: Option<Base>,
    surface: SurfaceManager,
    /// Seq of the last `session/settings` event: the settings in effect.
    settings_seq: Option<u64>,
    guard: Option<Box<dyn AppendGuard>>,
    /// The derived history, built on first use and kept in step after.
    history: Mutex<HistoryCache>,
}

/// What a checkpoint said of the log before a resumed session's tail.
#[derive(Debug, Clone)]
struct Base {
    last_time: u64,
    tail_hash: Option<String>,
    turns: TurnState,
}

impl Session {
    /// A new, empty session.
    pub fn create(header: SessionHeader) -> Session {
        Session {
            header,
            events: ResidentLog::new(),
            base: None,
            surface: SurfaceManager::new(),
            settings_seq: None,
            guard: None,
            history: Mutex::default(),
        }
    }

    /// Seeds a session from a whole log (resume, replay, load), checking every
    /// rule as if each event were appended in turn. The first violation
    /// refuses the whole log; it is never upgraded or guessed.
    pub fn from_log(header: SessionHeader, events: Vec<Event>) -> Result<Session, AppendError> {
        Session::from_log_guarded(header, events, None)
    }

    /// Like [`Session::from_log`], with `guard` checking every event too.
    pub fn from_log_guarded(
        header: SessionHeader,
        events: Vec<Event>,
        guard: Option<Box<dyn AppendGuard>>,
    ) -> Result<Session, AppendError> {
        let mut s = Session {
            header,
            events: ResidentLog::new(),
            base: None,
            surface: SurfaceManager::new(),
            settings_seq: None,
            guard,
            history: Mutex::default(),
        };
        s.events.reserve_exact(events.len());
        for event in events {
            s.append(event)?;
        }
        Ok(s)
    }

    /// Resumes a session from `checkpoint` (taken by [`Session::checkpoint`]
    /// or read by [`Checkpoint::from_json`]) and `tail`, the events of the
    /// log after it, which are appended through every rule as
    /// [`Session::from_log`] appends them.
    ///
    /// The session holds O(surface + tail) events, not the log (see
    /// [`Session::is_complete`]), and refuses and accepts exactly what the
    /// session loaded whole does, with the same codes; its surface, derived
    /// messages and request, settings, [`Session::last_turn`] and
    /// [`Session::next_seq`] are the same.
    ///
    /// The checkpoint must be of `header` (`checkpoint-mismatch`
    /// otherwise). That it matches the log (its `tailHash`) is the reader's
    /// to check, with [`Checkpoint::matches_last_event`], before reading the
    /// tail after it.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::*, Event, Session, SessionHeader, SurfaceIntent};
    ///
    /// let header = SessionHeader::new("r", 0);
    /// let mut whole = Session::create(header.clone());
    /// whole.append_log(1, TurnStart { turn: 1 })?;
    /// let checkpoint = whole.checkpoint();
    /// whole.append_surface(2, UserMessage { turn: Some(1), message: Message::user("u1", "hi") }, SurfaceIntent::append())?;
    /// let tail = whole.events()[1..].to_vec();
    /// let resumed = Session::resume(header, checkpoint, tail)?;
    /// assert_eq!(resumed.surface(), whole.surface());
    /// assert_eq!(resumed.next_seq(), 2);
    /// assert_eq!(resumed.derive_request().to_json(), whole.derive_request().to_json());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resume(
        header: SessionHeader,
        checkpoint: Checkpoint,
        tail: Vec<Event>,
    ) -> Result<Session, ResumeError> {
        Session::resume_guarded(header, checkpoint, tail, None)
    }

    /// Like [`Session::resume`], with `guard` restored from the checkpoint
    /// ([`AppendGuard::restore`]) and checking every tail event.
    ///
    /// The guard does not check the events the checkpoint covers: a
    /// checkpoint vouches for them (it was taken of a session that accepted
    /// them).
    pub fn resume_guarded(
        header: SessionHeader,
        checkpoint: Checkpoint,
        tail: Vec<Event>,
        guard: Option<Box<dyn AppendGuard>>,
    ) -> Result<Session, ResumeError> {
        checkpoint.check_header(&header)?;
        let Checkpoint { log_len, last_time, tail_hash, surface, settings_seq, turns, events, .. } =
            checkpoint;
        let mut s = Session {
            header,
            events: ResidentLog::sparse(events, log_len),
            base: Some(Base { last_time, tail_hash, turns }),
            surface: SurfaceManager::restore(surface, log_len),
            settings_seq,
            guard: None,
            history: Mutex::default(),
        };
        s.set_guard(guard);
        for event in tail {
            s.append(event)?;
        }
        Ok(s)
    }

    /// A checkpoint of the session as it is now: the surface, the settings,
    /// the turn brackets and the events they name (see [`Checkpoint`]).
    /// O(surface + the events since the last `turn/start`), whether the
    /// session is held whole or resumed.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("c", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// let c = s.checkpoint();
    /// assert_eq!((c.log_len(), c.last_time(), c.turns().open_turn), (1, 1, Some(1)));
    /// assert!(c.events().is_empty(), "a turn/start is neither on the surface nor settings");
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn checkpoint(&self) -> Checkpoint {
        let mut seqs: Vec<u64> = self.surface.seqs().iter().copied().chain(self.settings_seq).collect();
        seqs.sort_unstable();
        let events: Vec<Event> = seqs.iter().filter_map(|&seq| self.events.get(seq).cloned()).collect();
        if events.len() != seqs.len() {
            // Cannot happen: the surface and settings events are resident.
            tracing::error!(session_id = %self.header.id, "a surface or settings event is not resident");
        }
        let tail_hash = self.tail_hash();
        Checkpoint {
            session_id: self.header.id.clone(),
            header_hash: fingerprint(self.header.to_json().as_bytes()),
            log_len: self.events.len(),
            last_time: self.last_time(),
            tail_hash,
            surface: self.surface.seqs().to_vec(),
            settings_seq: self.settings_seq,
            turns: self.turn_state(),
            events,
        }
    }

    /// Lets go of every event an append no longer needs: the session then
    /// holds what [resuming](Session::resume) it from a checkpoint taken
    /// now would hold (the surface's events and the settings event in
    /// effect), plus the open turn's events from its `turn/start` on when a
    /// turn is open (what [crash repair](crate::repair::repair) reads),
    /// plus whatever is appended after. Every rule, every guard, the
    /// surface and the derived messages stay exactly as they were; the
    /// session is no longer [complete](Session::is_complete).
    ///
    /// This is how a reader walks a log of any length in memory bounded by
    /// its surface and its open turn: append, and trim now and then (each
    /// call is O(the events appended since the last + the surface)). A
    /// guard keeps its state: it is the fold of the whole log either way.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::*, repair, Session, SessionHeader, SurfaceIntent};
    ///
    /// let mut s = Session::create(SessionHeader::new("t", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// s.append_surface(2, UserMessage { turn: Some(1), message: Message::user("u1", "hi") }, SurfaceIntent::append())?;
    /// s.trim();
    /// assert!(!s.is_complete());
    /// assert_eq!(s.resident().len(), 2, "the turn is open: its turn/start stays");
    /// assert_eq!(repair::repair(s.resident()).len(), 1, "a turn/end closes it");
    /// s.append_log(3, TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;
    /// s.trim();
    /// assert_eq!(s.resident().len(), 1, "the turn/start and turn/end are off the surface: gone");
    /// assert_eq!((s.next_seq(), s.last_time(), s.turn_state().open_turn), (3, 3, None));
    /// assert_eq!(s.derive_messages().len(), 1);
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn trim(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let tail_hash = self.tail_hash();
        let turns = self.turn_state();
        // Crash repair reads the open turn from its `turn/start` (the last
        // one resident, when a turn is open): those events stay.
        let open_turn_start = turns.open_turn.and_then(|_| {
            self.resident().iter().rfind(|e| *e.event_type() == EventType::TurnStart).map(Event::seq)
        });
        self.base = Some(Base { last_time: self.last_time(), tail_hash, turns });
        self.events.keep_open_turn(open_turn_start);
        self.events.rebase();
        self.events.trim(self.surface.seqs(), self.settings_seq);
    }

    /// The fingerprint of the log's last event, which a checkpoint records
    /// so that it can be checked against the log it claims to cover.
    fn tail_hash(&self) -> Option<String> {
        match self.events.last() {
            Some(last) => Some(fingerprint(last.to_json().as_bytes())),
            None => self.base.as_ref().and_then(|b| b.tail_hash.clone()),
        }
    }

    /// The turn and step brackets at the end of the log (see [`TurnState`]):
    /// a fold from the last `turn/start` (on a resumed session, from the
    /// checkpoint's brackets over the events since).
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("t", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// assert_eq!(s.turn_state().open_turn, Some(1));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn turn_state(&self) -> TurnState {
        let from = self.events.resident_from();
        let mut turns = self.base.as_ref().map(|b| b.turns.clone()).unwrap_or_default();
        turns.fold_all(self.events.since(from));
        turns
    }

    /// Installs (or removes) the guard, rebuilding its state for the current
    /// log ([`AppendGuard::rebuild`]; [`AppendGuard::restore`] for a
    /// session that is not [complete](Session::is_complete)).
    pub fn set_guard(&mut self, guard: Option<Box<dyn AppendGuard>>) {
        self.guard = guard;
        self.reset_guard();
    }

    fn reset_guard(&mut self) {
        if self.guard.is_none() {
            return;
        }
        let turns = (!self.is_complete()).then(|| self.turn_state());
        let view = SessionView::of(&self.header, self.events.resident(), &self.surface);
        if let Some(g) = self.guard.as_mut() {
            match &turns {
                None => g.rebuild(view),
                Some(turns) => g.restore(view, turns),
            }
        }
    }

    /// Whether a guard is installed.
    pub fn has_guard(&self) -> bool {
        self.guard.is_some()
    }

    /// The header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// The committed log, in seq order (`events()[i].seq() == i`), for a
    /// session held whole ([`Session::is_complete`]).
    ///
    /// A session resumed from a [`Checkpoint`] does not hold its log: for
    /// it this is [`Session::resident`], the events it holds, sorted by seq
    /// but **not** indexed by seq, and a warning is logged. Code that may
    /// see a resumed session reads [`Session::complete_events`],
    /// [`Session::resident`] or [`Session::event`] instead.
    pub fn events(&self) -> &[Event] {
        if !self.is_complete() {
            tracing::warn!(
                session_id = %self.header.id,
                "Session::events on a resumed session: only its resident events"
            );
        }
        self.events.resident()
    }

    /// The whole log, in seq order, if the session holds it (`None` for a
    /// session resumed from a checkpoint).
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let s = Session::create(SessionHeader::new("s", 0));
    /// assert_eq!(s.complete_events().map(<[_]>::len), Some(0));
    /// let resumed = Session::resume(s.header().clone(), s.checkpoint(), vec![])?;
    /// assert_eq!(resumed.complete_events().map(<[_]>::len), Some(0), "an empty log is whole");
    /// # Ok::<(), palimpsest_core_session::ResumeError>(())
    /// ```
    pub fn complete_events(&self) -> Option<&[Event]> {
        self.is_complete().then(|| self.events.resident())
    }

    /// The events the session holds, sorted by seq: the whole log for a
    /// session held whole; for a resumed one, the surface's events, the
    /// settings event and every event after the checkpoint (see
    /// [`ResidentLog`]).
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("s", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// assert_eq!(s.resident().len(), 1);
    /// let resumed = Session::resume(s.header().clone(), s.checkpoint(), vec![])?;
    /// assert!(resumed.resident().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resident(&self) -> &[Event] {
        self.events.resident()
    }

    /// The resident log: the resident events, the log's length, and where
    /// the tail after the checkpoint starts.
    pub fn resident_log(&self) -> &ResidentLog {
        &self.events
    }

    /// Whether the session holds its whole log: true for a session created,
    /// loaded or seeded whole, false for one resumed from a checkpoint of a
    /// log that was not empty.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert!(Session::create(SessionHeader::new("s", 0)).is_complete());
    /// ```
    pub fn is_complete(&self) -> bool {
        self.events.is_complete()
    }

    /// Consumes the session, returning its header and log. For a session
    /// resumed from a checkpoint, the log is only its resident events (see
    /// [`Session::events`]); [`Session::is_complete`] says which.
    pub fn into_parts(self) -> (SessionHeader, Vec<Event>) {
        if !self.is_complete() {
            tracing::warn!(
                session_id = %self.header.id,
                "Session::into_parts on a resumed session: only its resident events"
            );
        }
        (self.header, self.events.into_events())
    }

    /// The event with this seq, if it is in the log and the session holds
    /// it (always, for a session held whole; for a resumed one, the
    /// surface's events, the settings event and the events after the
    /// checkpoint).
    pub fn event(&self, seq: u64) -> Option<&Event> {
        self.events.get(seq)
    }

    /// The seq the next event must have (the log's length).
    pub fn next_seq(&self) -> u64 {
        self.events.len()
    }

    /// The time of the last event (0 for an empty log).
    pub fn last_time(&self) -> u64 {
        match self.events.last() {
            Some(last) => last.time(),
            None => self.base.as_ref().map_or(0, |b| b.last_time),
        }
    }

    /// The surface: seqs of the events the model sees, in order. O(1).
    pub fn surface(&self) -> &[u64] {
        self.surface.seqs()
    }

    /// The surface manager, read-only.
    pub fn surface_manager(&self) -> &SurfaceManager {
        &self.surface
    }

    /// A read-only view, as handed to guards.
    pub fn view(&self) -> SessionView<'_> {
        SessionView::of(&self.header, self.events.resident(), &self.surface)
    }

    /// The messages of the next model request (contract section 3), parsed
    /// afresh: O(surface) on every call. [`Session::history`] gives the same
    /// messages, owned and cached.
    pub fn derive_messages(&self) -> Vec<DerivedMessage<'_>> {
        derive_messages(self.events.resident(), self.surface.seqs())
    }

    /// The messages of the next model request (contract section 3), as a
    /// shared snapshot: the same messages as [`Session::derive_messages`],
    /// in the same order. Built on the first call (O(surface)); after that
    /// O(1) when nothing changed and O(the surface changes since the last
    /// call) otherwise. See [`History`].
    pub fn history(&self) -> History {
        let mut cache = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(self.events.resident(), self.surface.seqs())
    }

    /// Seq of the `session/settings` event in effect (the last one), `None`
    /// before the first. O(1): kept up to date on every append.
    pub fn settings_seq(&self) -> Option<u64> {
        self.settings_seq
    }

    /// The effective settings at the end of the log (contract section 1.3):
    /// those of the last `session/settings` event, empty before the first.
    /// Finds that event in O(1) and parses only its payload.
    pub fn settings(&self) -> Settings {
        effective_settings(self.events.resident(), self.settings_seq).1
    }

    /// The next model request (contract section 3): the effective settings
    /// and the derived messages, serialized the same, byte for byte, by
    /// every replay of the log.
    pub fn derive_request(&self) -> DerivedRequest<'_> {
        derive_request(self.events.resident(), self.surface.seqs(), self.settings_seq)
    }

    /// The number of the last turn started in the log (its last
    /// `turn/start`), 0 before the first; and whether it is still open (no
    /// `turn/end` after it). A resumed session's next turn is
    /// `last_turn().0 + 1`.
    ///
    /// ```
    /// use palimpsest_core_session::payload::{TurnEnd, TurnEndReason, TurnStart};
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("s", 0));
    /// assert_eq!(s.last_turn(), (0, false));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// assert_eq!(s.last_turn(), (1, true));
    /// s.append_log(2, TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;
    /// assert_eq!(s.last_turn(), (1, false));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn last_turn(&self) -> (u64, bool) {
        // Only the tail after a checkpoint holds turn events (they never
        // join the surface); before it, the checkpoint's fold answers.
        let from = self.events.resident_from();
        let tail = self.events.since(from);
        let last = tail.iter().rfind(|e| matches!(e.event_type(), EventType::TurnStart | EventType::TurnEnd));
        let Some(last) = last else {
            return self.base.as_ref().map_or((0, false), |b| b.turns.last_turn);
        };
        // Folding that one event parses only it, and sets `last_turn`.
        let mut turns = TurnState::default();
        turns.fold(last);
        turns.last_turn
    }

    /// Appends a surface-eligible payload at the next seq; returns its seq.
    pub fn append_surface(
        &mut self,
        time: u64,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<u64, AppendError> {
        let event = Event::surface(self.next_seq(), time, payload, intent)?;
        self.append(event)
    }

    /// Appends a log-only payload at the next seq; returns its seq.
    ///
    /// A surface-eligible payload cannot be appended this way: the compiler
    /// insists on a [`SurfaceIntent`] through [`Session::append_surface`].
    ///
    /// ```compile_fail
    /// use palimpsest_core_session::{payload::*, Session, SessionHeader};
    /// let mut s = Session::create(SessionHeader::new("s", 0));
    /// let message = Message { id: "u".into(), role: Role::User, content: vec![], source: Source::User };
    /// s.append_log(0, UserMessage { turn: None, message }); // no surface intent: does not compile
    /// ```
    pub fn append_log(&mut self, time: u64, payload: impl Into<LogPayload>) -> Result<u64, AppendError> {
        let event = Event::log(self.next_seq(), time, payload)?;
        self.append(event)
    }

    /// Appends a built event (the runtime path); returns its seq.
    pub fn append(&mut self, event: Event) -> Result<u64, AppendError> {
        self.append_with(event, |_| Ok::<(), std::convert::Infallible>(())).map_err(|e| match e {
            BatchError::Refused(e) => e,
            BatchError::Write(never) => match never {},
        })
    }

    /// Checks whether `event` would be accepted as the next event, changing
    /// nothing.
    pub fn check(&self, event: &Event) -> Result<(), AppendError> {
        self.plan(event).map(drop)
    }

    /// Appends one event, calling `write` (the store) between check and
    /// commit. If `write` fails the session is unchanged.
    pub fn append_with<E>(
        &mut self,
        event: Event,
        write: impl FnOnce(&Event) -> Result<(), E>,
    ) -> Result<u64, BatchError<E>> {
        let step = self.plan(&event).map_err(BatchError::Refused)?;
        write(&event).map_err(BatchError::Write)?;
        let seq = event.seq();
        self.commit(event, step);
        Ok(seq)
    }

    /// Appends a batch atomically: every event is checked (each against the
    /// state the earlier ones leave), then `write` gets the whole batch, then
    /// the batch is committed. A refused event or a failed write leaves the
    /// session exactly as it was. Returns the seq range appended.
    pub fn append_batch_with<E>(
        &mut self,
        events: Vec<Event>,
        write: impl FnOnce(&[Event]) -> Result<(), E>,
    ) -> Result<Range<u64>, BatchError<E>> {
        let start = self.events.len();
        let settings_before = self.settings_seq;
        let mut trim = false;
        let mut undo: Vec<SurfaceUndo> = Vec::with_capacity(events.len());
        for event in events {
            match self.plan(&event) {
                Ok(step) => {
                    let seq = event.seq();
                    trim |= self.track_settings(&event) || matches!(step, SurfaceStep::Replace { .. });
                    self.events.push(event);
                    undo.push(self.surface.apply_with_undo(seq, step));
                    self.history_cache().record(seq, step);
                    self.notify_guard();
                }
                Err(e) => {
                    self.roll_back(start, undo, settings_before);
                    return Err(BatchError::Refused(e));
                }
            }
        }
        if let Err(e) = write(self.events.since(start)) {
            self.roll_back(start, undo, settings_before);
            return Err(BatchError::Write(e));
        }
        if trim {
            self.events.trim_when_worth(self.surface.seqs(), self.settings_seq);
        }
        Ok(start..self.events.len())
    }

    fn plan(&self, event: &Event) -> Result<SurfaceStep, AppendError> {
        let step = self.surface.plan(self.events.resident(), event)?;
        if let Some(guard) = &self.guard {
            guard.check(self.view(), event).map_err(|v| AppendError::Vetoed {
                seq: event.seq(),
                code: v.code,
                message: v.message,
            })?;
        }
        Ok(step)
    }

    fn commit(&mut self, event: Event, step: SurfaceStep) {
        let seq = event.seq();
        let settings_changed = self.track_settings(&event);
        self.events.push(event);
        self.surface.apply(seq, step);
        self.history_cache().record(seq, step);
        self.notify_guard();
        if settings_changed || matches!(step, SurfaceStep::Replace { .. }) {
            // A resumed session lets go of what left the surface, and of
            // the settings event no longer in effect.
            self.events.trim_when_worth(self.surface.seqs(), self.settings_seq);
        }
    }

    fn notify_guard(&mut self) {
        let view = SessionView::of(&self.header, self.events.resident(), &self.surface);
        if let (Some(guard), Some(last)) = (self.guard.as_mut(), self.events.last()) {
            guard.committed(view, last);
        }
    }

    /// Keeps [`Session::settings_seq`] up to date; called just before
    /// `event` joins the log. Whether `event` is a settings event.
    fn track_settings(&mut self, event: &Event) -> bool {
        let is_settings = *event.event_type() == EventType::SessionSettings;
        if is_settings {
            self.settings_seq = Some(event.seq());
        }
        is_settings
    }

    fn history_cache(&mut self) -> &mut HistoryCache {
        self.history.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn roll_back(&mut self, len: u64, undo: Vec<SurfaceUndo>, settings_seq: Option<u64>) {
        self.history_cache().forget();
        for u in undo.into_iter().rev() {
            self.surface.undo(u);
        }
        self.events.truncate(len);
        self.settings_seq = settings_seq;
        self.reset_guard();
    }
}
