//! The event envelope (contract section 1.1) and the rules that need nothing
//! but the event itself (section 2, rules 1 to 4).
//!
//! An [`Event`] can only be built through a checking constructor, so every
//! `Event` value is well-formed: its envelope and core payload match section
//! 1, and its surface metadata obeys rules 1–4. The rules that relate an
//! event to the log before it (6–9) live in [`crate::surface`] and
//! [`crate::Session`].
//!
//! # Wire form
//!
//! One JSON object with the keys `seq`, `time`, `type`, `data`, and the
//! optional `sourceEventSeqs` and `surfaceOp`, written in that order, with
//! absent optionals omitted (never `null`). `data` is kept verbatim, byte for
//! byte, so keys unknown to this crate survive any round trip, with one
//! normalization every constructor applies: the JSON whitespace around the
//! value is dropped, and each raw line break in it (`\n` or `\r`, which
//! in a JSON text can only stand between tokens) becomes a space. The value
//! is the same, and an event's line is always one line, which every reader
//! (a JSONL line, a database row) accepts back. No object
//! anywhere in an event, `data` included, may name a key twice: readers
//! that keep the first, the last or refuse would read different events,
//! so such an event is `event-malformed`.
//!
//! # Where the code lives
//!
//! This module holds the types and their accessors, and the typed
//! constructors ([`Event::surface`], [`Event::log`]). The rules of
//! sections 1.2 and 2 (rules 1–4), in the contract's order and with its
//! error codes, are in `event/rules.rs`; the JSON text of an event (the
//! canonical line written by hand, the hand-read fast path for canonical
//! lines and database columns, and serde's general reading) is in
//! `event/codec.rs`; where an event's payload text is held (its own, or a
//! range of a [`SharedText`] decoded with many others) is `event/text.rs`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use crate::error::AppendError;
use crate::payload::{LogPayload, SurfacePayload};

mod codec;
mod rules;
mod text;

pub(crate) use codec::{leading_u64, seq_prefix, SharedLines};
/// The reference payload check, which the fast shape check is tested against.
#[cfg(test)]
pub(crate) use rules::check_owned_payload;
use text::PayloadText;
pub use text::SharedText;

/// An event's `type`. The core types have a fixed payload shape; any other
/// string is a plugin type with opaque data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `turn/start`
    TurnStart,
    /// `turn/end`
    TurnEnd,
    /// `step/start`
    StepStart,
    /// `step/end`
    StepEnd,
    /// `user/message`
    UserMessage,
    /// `context/message`
    ContextMessage,
    /// `steering/message`
    SteeringMessage,
    /// `assistant/chunk`
    AssistantChunk,
    /// `assistant/message`
    AssistantMessage,
    /// `tool/call`
    ToolCall,
    /// `tool/result`
    ToolResult,
    /// `session/settings`
    SessionSettings,
    /// Any other type, e.g. `compaction/start`. The name is shared: every
    /// event of one plugin type parsed on a thread holds the same
    /// allocation ([`EventType::parse`]), so a log of millions of small
    /// plugin events does not hold millions of copies of its type.
    Plugin(Arc<str>),
}

/// Plugin type names a thread keeps shared, at most: a log with more
/// distinct plugin types than this allocates a name per event beyond them.
const SHARED_PLUGIN_TYPES: usize = 256;

thread_local! {
    /// The plugin type names parsed on this thread.
    static PLUGIN_TYPES: RefCell<HashMap<Box<str>, Arc<str>>> = RefCell::new(HashMap::new());
}

/// `name` as a shared plugin type name (see [`EventType::Plugin`]).
fn plugin_type(name: &str) -> Arc<str> {
    PLUGIN_TYPES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(shared) = names.get(name) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(name);
        if names.len() < SHARED_PLUGIN_TYPES {
            names.insert(name.into(), Arc::clone(&shared));
        }
        shared
    })
}

impl EventType {
    /// Parses a type string.
    pub fn parse(s: &str) -> EventType {
        match s {
            "turn/start" => EventType::TurnStart,
            "turn/end" => EventType::TurnEnd,
            "step/start" => EventType::StepStart,
            "step/end" => EventType::StepEnd,
            "user/message" => EventType::UserMessage,
            "context/message" => EventType::ContextMessage,
            "steering/message" => EventType::SteeringMessage,
            "assistant/chunk" => EventType::AssistantChunk,
            "assistant/message" => EventType::AssistantMessage,
            "tool/call" => EventType::ToolCall,
            "tool/result" => EventType::ToolResult,
            "session/settings" => EventType::SessionSettings,
            other => EventType::Plugin(plugin_type(other)),
        }
    }

    /// The type string as written.
    pub fn as_str(&self) -> &str {
        match self {
            EventType::TurnStart => "turn/start",
            EventType::TurnEnd => "turn/end",
            EventType::StepStart => "step/start",
            EventType::StepEnd => "step/end",
            EventType::UserMessage => "user/message",
            EventType::ContextMessage => "context/message",
            EventType::SteeringMessage => "steering/message",
            EventType::AssistantChunk => "assistant/chunk",
            EventType::AssistantMessage => "assistant/message",
            EventType::ToolCall => "tool/call",
            EventType::ToolResult => "tool/result",
            EventType::SessionSettings => "session/settings",
            EventType::Plugin(s) => s,
        }
    }

    /// Whether events of this type join the surface (and so must carry a `surfaceOp`).
    pub fn is_surface_eligible(&self) -> bool {
        matches!(
            self,
            EventType::UserMessage
                | EventType::ContextMessage
                | EventType::SteeringMessage
                | EventType::AssistantMessage
                | EventType::ToolResult
        )
    }

    /// Whether this is one of the core types with a fixed payload shape.
    pub fn is_core(&self) -> bool {
        !matches!(self, EventType::Plugin(_))
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an event entered the surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SurfaceOp {
    /// Pushed onto the tail.
    Append,
    /// Took the place of a run of surface entries: the entry whose **seq**
    /// is `start` through the entry whose **seq** is `end`, both inclusive,
    /// and every entry between them in surface order. `start` and `end` are
    /// seqs, not positions: the run is found by looking the two seqs up on
    /// the surface, and `start` must come first there.
    Replace {
        /// The seq of the first shadowed surface entry.
        start: u64,
        /// The seq of the last shadowed surface entry.
        end: u64,
    },
}

impl Serialize for SurfaceOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SurfaceOp::Append => s.serialize_str("append"),
            SurfaceOp::Replace { start, end } => {
                let mut st = s.serialize_struct("SurfaceOp", 3)?;
                st.serialize_field("op", "replace")?;
                st.serialize_field("start", start)?;
                st.serialize_field("end", end)?;
                st.end()
            }
        }
    }
}

/// How a surface-eligible payload joins the surface: the `surfaceOp` and the
/// optional `sourceEventSeqs` of the event the typed append API writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceIntent {
    /// The operation.
    pub op: SurfaceOp,
    /// Provenance: seqs of earlier events this one was built from.
    pub sources: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// Append, citing nothing.
    pub fn append() -> SurfaceIntent {
        SurfaceIntent { op: SurfaceOp::Append, sources: None }
    }

    /// Append, citing `sources` (e.g. an assistant message's chunks).
    pub fn append_citing(sources: Vec<u64>) -> SurfaceIntent {
        SurfaceIntent { op: SurfaceOp::Append, sources: Some(sources) }
    }

    /// Replace the run of surface entries from the one whose seq is
    /// `first_seq` through the one whose seq is `last_seq` (both inclusive,
    /// in surface order: seqs, not positions), citing `sources`, which must
    /// include every shadowed seq.
    ///
    /// ```
    /// use palimpsest_core_session::{SurfaceIntent, SurfaceOp};
    ///
    /// // Shadow the surface entries of seqs 4 through 9 (whatever their positions).
    /// let intent = SurfaceIntent::replace(4, 9, vec![4, 7, 9]);
    /// assert_eq!(intent.op, SurfaceOp::Replace { start: 4, end: 9 });
    /// ```
    pub fn replace(first_seq: u64, last_seq: u64, sources: Vec<u64>) -> SurfaceIntent {
        SurfaceIntent { op: SurfaceOp::Replace { start: first_seq, end: last_seq }, sources: Some(sources) }
    }
}

/// One event of the log. Always well-formed: see the module docs.
#[derive(Debug, Clone)]
pub struct Event {
    seq: u64,
    time: u64,
    event_type: EventType,
    /// The payload's JSON text, exactly as written but for the
    /// normalization of the module docs (no whitespace around it, no raw
    /// line break in it): checked to be one JSON value (and for a core
    /// type, its payload shape) when the event was built. Its own, or a
    /// range of a text shared with the events decoded with it.
    data: PayloadText,
    /// Provenance and surface op, behind one pointer: most events of a long
    /// log (chunks, brackets, calls, plugin events) have neither, and an
    /// event is 32 bytes smaller for it.
    surfacing: Option<Box<Surfacing>>,
}

/// What an event says of the surface: its provenance and how it joined.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Surfacing {
    source_event_seqs: Option<Box<[u64]>>,
    surface_op: Option<SurfaceOp>,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.time == other.time
            && self.event_type == other.event_type
            && *self.data == *other.data
            && self.source_event_seqs() == other.source_event_seqs()
            && self.surface_op() == other.surface_op()
    }
}

impl Event {
    /// An event of these fields, checked by the caller: `data` is one JSON
    /// value with no whitespace around it. Its raw line breaks (whitespace
    /// between tokens) are written as spaces here, the last step of every
    /// constructor, as only a text known to be JSON may be changed so.
    pub(crate) fn from_fields(
        seq: u64,
        time: u64,
        event_type: EventType,
        data: PayloadText,
        source_event_seqs: Option<Box<[u64]>>,
        surface_op: Option<SurfaceOp>,
    ) -> Event {
        // After the checks: only in a JSON value is a line break whitespace.
        // A shared text was given only if it had none.
        let data = match data {
            PayloadText::Own(text) => PayloadText::Own(codec::line_breaks_as_spaces(text)),
            shared => shared,
        };
        debug_assert!(codec::is_normalized(&data), "`data` with whitespace around it: {data:?}");
        let surfacing = (source_event_seqs.is_some() || surface_op.is_some())
            .then(|| Box::new(Surfacing { source_event_seqs, surface_op }));
        Event { seq, time, event_type, data, surfacing }
    }

    /// The event's position in the log.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Unix epoch milliseconds.
    pub fn time(&self) -> u64 {
        self.time
    }

    /// The event's type.
    pub fn event_type(&self) -> &EventType {
        &self.event_type
    }

    /// The payload's JSON text, exactly as written (one JSON value), but
    /// that no constructor keeps the JSON whitespace around it or a raw
    /// line break (`\n`, `\r`) in it: a line break between tokens is kept
    /// as a space. See [`Event::from_json`].
    pub fn data(&self) -> &str {
        &self.data
    }

    /// Whether the payload text is a range of a [`SharedText`], shared
    /// with other events decoded with this one
    /// ([`Event::from_shared_parts`]), rather than its own.
    pub fn shares_text(&self) -> bool {
        self.data.is_shared()
    }

    /// Gives the event its own payload text if it shares one, so that it
    /// keeps no other event's text alive: for an event kept while those
    /// decoded with it are let go of.
    pub(crate) fn unshare_text(&mut self) {
        if self.data.is_shared() {
            let data = std::mem::replace(&mut self.data, PayloadText::Own(Box::default()));
            self.data = PayloadText::Own(data.into_own());
        }
    }

    /// Provenance, when present (`Some(&[])` is a known empty stream).
    pub fn source_event_seqs(&self) -> Option<&[u64]> {
        self.surfacing.as_ref().and_then(|s| s.source_event_seqs.as_deref())
    }

    /// How the event entered the surface, when it did.
    pub fn surface_op(&self) -> Option<SurfaceOp> {
        self.surfacing.as_ref().and_then(|s| s.surface_op)
    }

    /// Parses `data` into `T` (for example a payload type of
    /// [`crate::payload`]). Core payloads were checked when the event was
    /// built, so parsing one into its own type does not fail.
    pub fn data_as<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.data)
    }

    /// Builds a surface-eligible event: the typed path, where the compiler
    /// guarantees a surface intent is given.
    pub fn surface(
        seq: u64,
        time: u64,
        payload: impl Into<SurfacePayload>,
        intent: SurfaceIntent,
    ) -> Result<Event, AppendError> {
        let (event_type, data) = match payload.into() {
            SurfacePayload::User(p) => (EventType::UserMessage, to_raw(&p)),
            SurfacePayload::Context(p) => (EventType::ContextMessage, to_raw(&p)),
            SurfacePayload::Steering(p) => (EventType::SteeringMessage, to_raw(&p)),
            SurfacePayload::Assistant(p) => (EventType::AssistantMessage, to_raw(&p)),
            SurfacePayload::ToolResult(p) => (EventType::ToolResult, to_raw(&p)),
        };
        let sources = intent.sources.map(Vec::into_boxed_slice);
        Event::checked(seq, time, event_type, data?.into(), sources, Some(intent.op))
    }

    /// Builds a log-only event: the typed path, where no surface metadata can
    /// be given.
    pub fn log(seq: u64, time: u64, payload: impl Into<LogPayload>) -> Result<Event, AppendError> {
        let (event_type, data) = match payload.into() {
            LogPayload::TurnStart(p) => (EventType::TurnStart, to_raw(&p)),
            LogPayload::TurnEnd(p) => (EventType::TurnEnd, to_raw(&p)),
            LogPayload::StepStart(p) => (EventType::StepStart, to_raw(&p)),
            LogPayload::StepEnd(p) => (EventType::StepEnd, to_raw(&p)),
            LogPayload::AssistantChunk(p) => (EventType::AssistantChunk, to_raw(&p)),
            LogPayload::ToolCall(p) => (EventType::ToolCall, to_raw(&p)),
            LogPayload::Settings(p) => (EventType::SessionSettings, to_raw(&p)),
            LogPayload::Plugin(p) => {
                let event_type = EventType::parse(&p.event_type);
                if event_type.is_core() {
                    return Err(AppendError::EventMalformed {
                        seq: Some(seq),
                        detail: format!("`{event_type}` is a core type, not a plugin type"),
                    });
                }
                (event_type, to_raw(&p.data))
            }
        };
        Event::checked(seq, time, event_type, data?.into(), None, None)
    }

    /// A copy of this event with another seq and time (used by fork and
    /// repair). Provenance and surface op are kept as they are.
    pub fn with_seq_and_time(&self, seq: u64, time: u64) -> Result<Event, AppendError> {
        Event::checked(
            seq,
            time,
            self.event_type.clone(),
            PayloadText::Own(Box::from(self.data())),
            self.source_event_seqs().map(Box::from),
            self.surface_op(),
        )
    }
}

fn to_raw<T: Serialize>(value: &T) -> Result<Box<str>, AppendError> {
    serde_json::to_string(value)
        .map(String::into_boxed_str)
        .map_err(|e| AppendError::EventMalformed { seq: None, detail: e.to_string() })
}

/// Deepest nesting accepted in opaque data: serde_json's own recursion limit,
/// so anything accepted here can be parsed into a `serde_json::Value`.
pub const MAX_NESTING: usize = 127;

#[cfg(test)]
pub(crate) mod duplicate_keys;
