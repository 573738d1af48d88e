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

use crate::derive::{derive_messages, derive_request, effective_settings, DerivedMessage, DerivedRequest};
use crate::error::AppendError;
use crate::event::{Event, EventType, SurfaceIntent, SurfaceOp};
use crate::header::SessionHeader;
use crate::history::{History, HistoryCache};
use crate::payload::{LogPayload, Settings, SurfacePayload, TurnEnd, TurnStart};
use crate::surface::{SurfaceManager, SurfaceStep, SurfaceUndo};

/// A read-only view of a session, handed to an [`AppendGuard`].
#[derive(Debug, Clone, Copy)]
pub struct SessionView<'a> {
    /// The header.
    pub header: &'a SessionHeader,
    /// The committed log.
    pub events: &'a [Event],
    /// The current surface.
    pub surface: &'a [u64],
}

impl SessionView<'_> {
    /// The event with this seq, if committed.
    pub fn event(&self, seq: u64) -> Option<&Event> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }

    /// The surface entries a replace would shadow, in surface order (empty for
    /// an append or an invalid range).
    pub fn shadowed_by(&self, op: SurfaceOp) -> &[u64] {
        let SurfaceOp::Replace { start, end } = op else { return &[] };
        let pos = |seq| self.surface.iter().position(|&s| s == seq);
        match (pos(start), pos(end)) {
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
    /// batch was rolled back).
    fn rebuild(&mut self, session: SessionView<'_>);
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
    events: Vec<Event>,
    surface: SurfaceManager,
    /// Seq of the last `session/settings` event: the settings in effect.
    settings_seq: Option<u64>,
    guard: Option<Box<dyn AppendGuard>>,
    /// The derived history, built on first use and kept in step after.
    history: Mutex<HistoryCache>,
}

impl Session {
    /// A new, empty session.
    pub fn create(header: SessionHeader) -> Session {
        Session {
            header,
            events: Vec::new(),
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
            events: Vec::with_capacity(events.len()),
            surface: SurfaceManager::new(),
            settings_seq: None,
            guard,
            history: Mutex::default(),
        };
        for event in events {
            s.append(event)?;
        }
        Ok(s)
    }

    /// Installs (or removes) the guard, rebuilding its state for the current log.
    pub fn set_guard(&mut self, guard: Option<Box<dyn AppendGuard>>) {
        self.guard = guard;
        let view = SessionView { header: &self.header, events: &self.events, surface: self.surface.seqs() };
        if let Some(g) = self.guard.as_mut() {
            g.rebuild(view);
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

    /// The committed log, in seq order (`events()[i].seq() == i`).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Consumes the session, returning its header and log.
    pub fn into_parts(self) -> (SessionHeader, Vec<Event>) {
        (self.header, self.events)
    }

    /// The event with this seq.
    pub fn event(&self, seq: u64) -> Option<&Event> {
        usize::try_from(seq).ok().and_then(|i| self.events.get(i))
    }

    /// The seq the next event must have.
    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// The time of the last event (0 for an empty log).
    pub fn last_time(&self) -> u64 {
        self.events.last().map_or(0, Event::time)
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
        SessionView { header: &self.header, events: &self.events, surface: self.surface.seqs() }
    }

    /// The messages of the next model request (contract section 3), parsed
    /// afresh: O(surface) on every call. [`Session::history`] gives the same
    /// messages, owned and cached.
    pub fn derive_messages(&self) -> Vec<DerivedMessage<'_>> {
        derive_messages(&self.events, self.surface.seqs())
    }

    /// The messages of the next model request (contract section 3), as a
    /// shared snapshot: the same messages as [`Session::derive_messages`],
    /// in the same order. Built on the first call (O(surface)); after that
    /// O(1) when nothing changed and O(the surface changes since the last
    /// call) otherwise. See [`History`].
    pub fn history(&self) -> History {
        let mut cache = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(&self.events, self.surface.seqs())
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
        effective_settings(&self.events, self.settings_seq).1
    }

    /// The next model request (contract section 3): the effective settings
    /// and the derived messages, serialized the same, byte for byte, by
    /// every replay of the log.
    pub fn derive_request(&self) -> DerivedRequest<'_> {
        derive_request(&self.events, self.surface.seqs(), self.settings_seq)
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
        for e in self.events().iter().rev() {
            match e.event_type() {
                EventType::TurnStart => {
                    if let Ok(start) = e.data_as::<TurnStart>() {
                        return (start.turn, true);
                    }
                }
                EventType::TurnEnd => {
                    if let Ok(end) = e.data_as::<TurnEnd>() {
                        return (end.turn, false);
                    }
                }
                _ => {}
            }
        }
        (0, false)
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
        let mut undo: Vec<SurfaceUndo> = Vec::with_capacity(events.len());
        for event in events {
            match self.plan(&event) {
                Ok(step) => {
                    let seq = event.seq();
                    self.track_settings(&event);
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
        if let Err(e) = write(&self.events[start..]) {
            self.roll_back(start, undo, settings_before);
            return Err(BatchError::Write(e));
        }
        Ok(start as u64..self.events.len() as u64)
    }

    fn plan(&self, event: &Event) -> Result<SurfaceStep, AppendError> {
        let step = self.surface.plan(&self.events, event)?;
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
        self.track_settings(&event);
        self.events.push(event);
        self.surface.apply(seq, step);
        self.history_cache().record(seq, step);
        self.notify_guard();
    }

    fn notify_guard(&mut self) {
        let view = SessionView { header: &self.header, events: &self.events, surface: self.surface.seqs() };
        if let (Some(guard), Some(last)) = (self.guard.as_mut(), self.events.last()) {
            guard.committed(view, last);
        }
    }

    /// Keeps [`Session::settings_seq`] up to date; called just before
    /// `event` joins the log.
    fn track_settings(&mut self, event: &Event) {
        if *event.event_type() == EventType::SessionSettings {
            self.settings_seq = Some(event.seq());
        }
    }

    fn history_cache(&mut self) -> &mut HistoryCache {
        self.history.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn roll_back(&mut self, len: usize, undo: Vec<SurfaceUndo>, settings_seq: Option<u64>) {
        self.history_cache().forget();
        for u in undo.into_iter().rev() {
            self.surface.undo(u);
        }
        self.events.truncate(len);
        self.settings_seq = settings_seq;
        if self.guard.is_some() {
            let view =
                SessionView { header: &self.header, events: &self.events, surface: self.surface.seqs() };
            if let Some(g) = self.guard.as_mut() {
                g.rebuild(view);
            }
        }
    }
}
