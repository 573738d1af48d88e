//! [`History`]: the derived messages of contract section 3, kept in step with
//! the surface so that deriving again costs nothing.
//!
//! [`derive_messages`](crate::derive::derive_messages) parses every message
//! on the surface, every call: O(surface). The agent loop derives before
//! every model request, so a [`Session`](crate::Session) also keeps a
//! [`History`], built the first time it is asked for and then brought up to
//! date from a journal of the surface changes made since:
//!
//! - asked again with nothing new: an `Arc` clone, O(1);
//! - after new events: O(the surface changes since), each new surface entry
//!   parsed once; an entry a replace shadows is dropped, never re-parsed;
//! - a session that is never asked (a load, a `validate`) pays nothing but a
//!   test of an `Option` per append.
//!
//! A [`History`] is a snapshot: it does not change when the session does. If
//! a caller still holds one when the next changes are folded in, the fold
//! copies the entry list (pointer copies, O(surface)) instead of changing
//! what the caller holds.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::event::{Event, EventType};
use crate::payload::Message;
use crate::resident::find;
use crate::surface::SurfaceStep;

/// One message of a [`History`], with its provenance. The owned twin of
/// [`DerivedMessage`](crate::derive::DerivedMessage).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMessage {
    /// Seq of the event the message comes from.
    pub seq: u64,
    /// That event's type.
    pub event_type: EventType,
    /// The message, typed.
    pub message: Message,
    /// The event's `sourceEventSeqs`: what the message was built from.
    pub source_event_seqs: Option<Box<[u64]>>,
}

/// The derived history (contract section 3), shared: cloning is O(1).
///
/// ```
/// use palimpsest_core_session::{payload::*, Session, SessionHeader, SurfaceIntent};
///
/// let mut s = Session::create(SessionHeader::new("h", 0));
/// s.append_surface(1, UserMessage { turn: None, message: Message::user("u1", "hi") }, SurfaceIntent::append())?;
/// let first = s.history();
/// assert_eq!(first.len(), 1);
/// // Asking again with nothing new is a pointer copy.
/// assert!(first.same_as(&s.history()));
/// s.append_surface(2, UserMessage { turn: None, message: Message::user("u2", "again") }, SurfaceIntent::append())?;
/// let ids: Vec<_> = s.history().iter().map(|m| m.message.id.clone()).collect();
/// assert_eq!(ids, ["u1", "u2"]);
/// assert_eq!(first.len(), 1, "a History is a snapshot");
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct History {
    /// One slot per surface entry, in surface order; `None` for an entry
    /// that derives no message (an `assistant/message` with empty content).
    slots: Arc<Vec<Option<Arc<HistoryMessage>>>>,
    len: usize,
}

impl History {
    /// The number of messages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The messages, in the order the model sees them.
    pub fn iter(&self) -> impl Iterator<Item = &HistoryMessage> + '_ {
        self.slots.iter().flatten().map(|m| &**m)
    }

    /// Whether `other` is this very snapshot (not merely an equal one).
    pub fn same_as(&self, other: &History) -> bool {
        Arc::ptr_eq(&self.slots, &other.slots)
    }
}

impl<'h> IntoIterator for &'h History {
    type Item = &'h HistoryMessage;
    type IntoIter = Box<dyn Iterator<Item = &'h HistoryMessage> + 'h>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// A surface change made since the cached history was brought up to date.
#[derive(Debug, Clone, Copy)]
enum Change {
    Push(u64),
    Splice { start: usize, end: usize, seq: u64 },
}

/// The [`History`] a session keeps, and the surface changes not yet folded
/// into it.
#[derive(Debug, Default)]
pub(crate) struct HistoryCache {
    built: Option<History>,
    journal: Vec<Change>,
}

impl HistoryCache {
    /// Notes what a committed event did to the surface. Nothing is kept
    /// before the first [`HistoryCache::get`]; a journal longer than the
    /// history it would update is dropped (rebuilding is then cheaper).
    pub(crate) fn record(&mut self, seq: u64, step: SurfaceStep) {
        let Some(built) = &self.built else { return };
        let change = match step {
            SurfaceStep::None => return,
            SurfaceStep::Append => Change::Push(seq),
            SurfaceStep::Replace { start_pos, end_pos } => {
                Change::Splice { start: start_pos, end: end_pos, seq }
            }
        };
        if self.journal.len() >= built.slots.len().max(64) {
            self.forget();
            return;
        }
        self.journal.push(change);
    }

    /// Drops the history (after a rollback, whose changes were recorded).
    pub(crate) fn forget(&mut self) {
        self.built = None;
        self.journal.clear();
    }

    /// The history of `surface` over `events`, bringing the cache up to date.
    pub(crate) fn get(&mut self, events: &[Event], surface: &[u64]) -> History {
        let Some(history) = &mut self.built else {
            let slots: Vec<_> = surface.iter().map(|&seq| slot(events, seq)).collect();
            let len = slots.iter().flatten().count();
            let history = History { slots: Arc::new(slots), len };
            self.built = Some(history.clone());
            return history;
        };
        if !self.journal.is_empty() {
            let slots = Arc::make_mut(&mut history.slots);
            let mut in_step = true;
            for change in self.journal.drain(..) {
                match change {
                    Change::Push(seq) => {
                        let new = slot(events, seq);
                        history.len += usize::from(new.is_some());
                        slots.push(new);
                    }
                    Change::Splice { start, end, seq } if start <= end && end < slots.len() => {
                        let new = slot(events, seq);
                        history.len += usize::from(new.is_some());
                        let removed = slots.splice(start..=end, std::iter::once(new));
                        history.len = history.len.saturating_sub(removed.flatten().count());
                    }
                    Change::Splice { .. } => in_step = false,
                }
            }
            if !in_step || slots.len() != surface.len() {
                // Cannot happen: every surface change is recorded. Were it
                // to, the surface is the truth; derive again from it.
                tracing::error!("derived history out of step with the surface; rebuilt");
                self.built = None;
                return self.get(events, surface);
            }
        }
        history.clone()
    }
}

#[derive(Deserialize)]
struct MessageOnly<'a> {
    #[serde(borrow)]
    message: &'a RawValue,
}

/// The message the surface entry `seq` derives, if any (the rules of
/// [`derive_messages`](crate::derive::derive_messages)).
fn slot(events: &[Event], seq: u64) -> Option<Arc<HistoryMessage>> {
    let Some(event) = find(events, seq) else {
        tracing::error!(seq, "surface entry is not in the log");
        return None;
    };
    let parsed =
        event.data_as::<MessageOnly<'_>>().and_then(|m| serde_json::from_str::<Message>(m.message.get()));
    match parsed {
        Ok(message) if *event.event_type() == EventType::AssistantMessage && message.content.is_empty() => {
            None
        }
        Ok(message) => Some(Arc::new(HistoryMessage {
            seq,
            event_type: event.event_type().clone(),
            message,
            source_event_seqs: event.source_event_seqs().map(Box::from),
        })),
        Err(error) => {
            tracing::error!(seq, %error, "surface event without a message");
            None
        }
    }
}
