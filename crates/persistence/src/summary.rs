//! [`SessionSummary`]: what a listing shows of a session (its size, its
//! last activity, its last turn, its first prompt), read without holding
//! its log.
//!
//! [`SessionStore::summary`](crate::SessionStore::summary) returns one. The
//! default streams the session through [`SummarySink`] (time O(events),
//! memory O(1)); a backend that can reach the few events it needs directly
//! overrides it (SQL: indexed look-ups; JSONL: the file's head and tail),
//! and must return the same summary as the default for every log it loads
//! (the contract kit checks it).

use std::ops::ControlFlow;

use palimpsest_core_session::payload::{TurnEnd, TurnStart};
use palimpsest_core_session::{Event, EventType, SessionHeader};

use crate::store::LoadSink;

/// What a listing shows of one session.
///
/// ```
/// use palimpsest_core_session::{payload::*, SessionHeader};
/// use palimpsest_persistence::{MemoryStore, SessionStore};
///
/// let store = MemoryStore::default();
/// let mut session = palimpsest_core_session::Session::create(SessionHeader::new("s1", 0));
/// session.append_log(5, TurnStart { turn: 1 })?;
/// store.create_with_events(session.header(), session.events())?;
/// let summary = store.summary("s1")?;
/// assert_eq!((summary.events, summary.last_activity, summary.turns()), (1, Some(5), 1));
/// assert!(summary.first_prompt.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// The header.
    pub header: SessionHeader,
    /// How many events the log holds (the next seq).
    pub events: u64,
    /// The time of the last event; `None` for an empty log.
    pub last_activity: Option<u64>,
    /// The last `turn/start` or `turn/end` event: how the last turn stands,
    /// and (its number) how many turns the log holds.
    pub last_turn: Option<Event>,
    /// The first `user/message` event: the session's title.
    pub first_prompt: Option<Event>,
}

impl SessionSummary {
    /// A summary of a session with no events.
    pub fn empty(header: SessionHeader) -> SessionSummary {
        SessionSummary { header, events: 0, last_activity: None, last_turn: None, first_prompt: None }
    }

    /// The summary of a whole log, as the default
    /// [`summary`](crate::SessionStore::summary) builds it.
    pub fn of(header: SessionHeader, events: &[Event]) -> SessionSummary {
        let mut sink = SummarySink::default();
        let _ = sink.header(header.clone());
        for e in events {
            let _ = sink.event(e.clone());
        }
        sink.finish().unwrap_or_else(|| SessionSummary::empty(header))
    }

    /// How many turns the log holds: the number of its last turn (turns
    /// count from 1, each `turn/start` one more than the last: invariant
    /// `turn-out-of-order`), 0 before the first.
    pub fn turns(&self) -> u64 {
        self.last_turn.as_ref().and_then(turn_number).unwrap_or(0)
    }
}

/// One of the few records a summary is made of, as a backend that reads
/// them directly finds them ([`SessionSummary::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryPart {
    /// The last event: the size and the last activity.
    LastEvent,
    /// The last `turn/start` or `turn/end`.
    LastTurn,
    /// The first `user/message`.
    FirstPrompt,
}

impl SummaryPart {
    /// The part a SQL backend tagged a summary row with: 0, 1 or 2, in the
    /// order of the variants.
    pub fn from_tag(tag: i64) -> Option<SummaryPart> {
        match tag {
            0 => Some(SummaryPart::LastEvent),
            1 => Some(SummaryPart::LastTurn),
            2 => Some(SummaryPart::FirstPrompt),
            _ => None,
        }
    }
}

impl SessionSummary {
    /// Takes in `event`, found as `part` of the session.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Event, SessionHeader};
    /// use palimpsest_persistence::{SessionSummary, SummaryPart};
    ///
    /// let mut summary = SessionSummary::empty(SessionHeader::new("s", 0));
    /// summary.record(SummaryPart::LastEvent, Event::log(41, 7, TurnStart { turn: 3 })?);
    /// assert_eq!((summary.events, summary.last_activity), (42, Some(7)));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn record(&mut self, part: SummaryPart, event: Event) {
        match part {
            SummaryPart::LastEvent => {
                self.events = event.seq() + 1;
                self.last_activity = Some(event.time());
            }
            SummaryPart::LastTurn => self.last_turn = Some(event),
            SummaryPart::FirstPrompt => self.first_prompt = Some(event),
        }
    }
}

/// The `turn` of a `turn/start` or `turn/end` payload.
fn turn_number(e: &Event) -> Option<u64> {
    match e.event_type() {
        EventType::TurnStart => e.data_as::<TurnStart>().ok().map(|t| t.turn),
        EventType::TurnEnd => e.data_as::<TurnEnd>().ok().map(|t| t.turn),
        _ => None,
    }
}

/// Whether `event_type` is one [`SessionSummary::last_turn`] keeps.
pub fn is_turn_bracket(event_type: &EventType) -> bool {
    matches!(event_type, EventType::TurnStart | EventType::TurnEnd)
}

/// A [`LoadSink`] that keeps only what a [`SessionSummary`] needs: the
/// default [`summary`](crate::SessionStore::summary), in O(1) memory.
#[derive(Debug, Default)]
pub struct SummarySink {
    summary: Option<SessionSummary>,
}

impl SummarySink {
    /// The summary; `None` if no header came.
    pub fn finish(self) -> Option<SessionSummary> {
        self.summary
    }
}

impl LoadSink for SummarySink {
    fn header(&mut self, header: SessionHeader) -> ControlFlow<()> {
        self.summary = Some(SessionSummary::empty(header));
        ControlFlow::Continue(())
    }

    fn event(&mut self, event: Event) -> ControlFlow<()> {
        let Some(s) = self.summary.as_mut() else { return ControlFlow::Break(()) };
        s.events = event.seq() + 1;
        s.last_activity = Some(event.time());
        if is_turn_bracket(event.event_type()) {
            s.last_turn = Some(event);
        } else if s.first_prompt.is_none() && *event.event_type() == EventType::UserMessage {
            s.first_prompt = Some(event);
        }
        ControlFlow::Continue(())
    }
}
