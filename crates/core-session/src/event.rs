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
//! byte, so keys unknown to this crate survive any round trip. No object
//! anywhere in an event, `data` included, may name a key twice: readers
//! that keep the first, the last or refuse would read different events,
//! so such an event is `event-malformed`.

use std::borrow::Cow;
use std::fmt;

use serde::de;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::AppendError;
use crate::limits::MAX_EVENT_LINE_BYTES;
use crate::payload::{
    AssistantChunk, AssistantMessage, Block, ContextMessage, LogPayload, Message, Role, SessionSettings,
    Source, SteeringMessage, StepEnd, StepStart, SurfacePayload, ToolCall, ToolResult, TurnEnd, TurnStart,
    UserMessage,
};
use crate::shape;
use crate::tagged::Text;
use crate::unique_keys;

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
    /// Any other type, e.g. `compaction/start`.
    Plugin(Box<str>),
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
            other => EventType::Plugin(other.into()),
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
    /// The payload's JSON text, exactly as written: checked to be one JSON
    /// value (and for a core type, its payload shape) when the event was built.
    data: Box<str>,
    source_event_seqs: Option<Box<[u64]>>,
    surface_op: Option<SurfaceOp>,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.time == other.time
            && self.event_type == other.event_type
            && self.data == other.data
            && self.source_event_seqs == other.source_event_seqs
            && self.surface_op == other.surface_op
    }
}

impl Event {
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

    /// The payload's JSON text, exactly as written (one JSON value, with
    /// no whitespace around it when it was read from a canonical line).
    pub fn data(&self) -> &str {
        &self.data
    }

    /// Provenance, when present (`Some(&[])` is a known empty stream).
    pub fn source_event_seqs(&self) -> Option<&[u64]> {
        self.source_event_seqs.as_deref()
    }

    /// How the event entered the surface, when it did.
    pub fn surface_op(&self) -> Option<SurfaceOp> {
        self.surface_op
    }

    /// Parses `data` into `T` (for example a payload type of
    /// [`crate::payload`]). Core payloads were checked when the event was
    /// built, so parsing one into its own type does not fail.
    pub fn data_as<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.data)
    }

    /// Decodes one event from its JSON text (the runtime path for events read
    /// from a file or built dynamically), checking section 1 and the
    /// context-free rules 1–4 of section 2.
    pub fn from_json(json: &str) -> Result<Event, AppendError> {
        // The size first, before anything is parsed: a longer text is
        // never read, as a JSONL reader never reads a longer line.
        check_line_len(seq_prefix(json), json.len())?;
        // Most lines are canonical: read the envelope by hand, so that
        // `data` is parsed once (by the payload check) instead of twice.
        // Anything else, and any error, goes the general way, which judges
        // and words it.
        if let Some(line) = Canonical::read(json) {
            let event_type = EventType::parse(line.event_type);
            let data = Box::from(line.data);
            if let Ok(event) = Event::checked(line.seq, line.time, event_type, data, line.sources, line.op) {
                return Ok(event);
            }
        }
        Event::from_general_json(json)
    }

    /// [`Event::from_json`] for any line: serde reads the envelope.
    fn from_general_json(json: &str) -> Result<Event, AppendError> {
        if !json.trim_start().starts_with('{') {
            // serde would read a struct from an array too; the contract wants an object.
            let detail = "an event must be a JSON object".to_owned();
            return Err(AppendError::EventMalformed { seq: None, detail });
        }
        let wire: WireEvent<'_> = match serde_json::from_str(json) {
            Ok(w) => w,
            Err(e) => {
                return Err(AppendError::EventMalformed { seq: salvage_seq(json), detail: e.to_string() })
            }
        };
        let data = wire.data.get();
        let (event_type, sources, op) =
            Event::decode(wire.seq, &wire.event_type, data, wire.source_event_seqs, wire.surface_op)?;
        Event::assemble(wire.seq, wire.time, event_type, data.into(), sources, op)
    }

    /// Rebuilds an event from stored parts (for example a database row),
    /// with exactly the checks of [`Event::from_json`] but without building
    /// and re-reading a JSON envelope. `data`, `source_event_seqs` and
    /// `surface_op` are JSON texts, the optional ones `None` when absent.
    ///
    /// `data` is taken as it is (a `String` is not copied); it must be one
    /// JSON value, which the payload check reads anyway.
    pub fn from_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        data: impl Into<String>,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
        let data = data.into().into_boxed_str();
        // The size first, as for a line: the row's event, written as one.
        let sources_len = source_event_seqs.map_or(0, |t| ",\"sourceEventSeqs\":".len() + t.len());
        let op_len = surface_op.map_or(0, |t| ",\"surfaceOp\":".len() + t.len());
        let type_len = quoted_len(event_type);
        let len =
            envelope_len(seq, time, type_len, data.len()).saturating_add(sources_len).saturating_add(op_len);
        check_line_len(Some(seq), len)?;
        // Columns as this crate writes them: no envelope to parse, and the
        // payload parsed once. Anything else, and any error, goes the
        // general way, which judges and words it.
        if let (Some(sources), Some(op)) = (
            source_event_seqs.map_or(Some(None), |t| exact_u64_list(t).map(Some)),
            surface_op.map_or(Some(None), |t| exact_surface_op(t).map(Some)),
        ) {
            let event_type = EventType::parse(event_type);
            if check_payload(seq, &event_type, &data).is_ok()
                && check_metadata(seq, &event_type, sources.as_deref(), op).is_ok()
            {
                return Ok(Event { seq, time, event_type, data, source_event_seqs: sources, surface_op: op });
            }
        }
        Event::from_general_parts(seq, time, event_type, data, source_event_seqs, surface_op)
    }

    /// [`Event::from_parts`] for any texts: serde reads the optional ones.
    fn from_general_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        data: Box<str>,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
        let not_json = |what: &str, e: serde_json::Error| AppendError::EventMalformed {
            seq: Some(seq),
            detail: format!("`{what}` is not JSON: {e}"),
        };
        let raw = |what: &str, text: &'_ str| -> Result<Box<RawValue>, AppendError> {
            RawValue::from_string(text.to_owned()).map_err(|e| not_json(what, e))
        };
        // Say "not JSON" before anything else, as a JSONL line would; only
        // on the error path, so that a good row's data is parsed once.
        let data_error =
            |data: &str| serde_json::from_str::<de::IgnoredAny>(data).err().map(|e| not_json("data", e));
        let sources = source_event_seqs.map(|t| raw("sourceEventSeqs", t)).transpose();
        let op = surface_op.map(|t| raw("surfaceOp", t)).transpose();
        let (sources, op) = match (sources, op) {
            (Ok(sources), Ok(op)) => (sources, op),
            (Err(e), _) | (_, Err(e)) => return Err(data_error(&data).unwrap_or(e)),
        };
        match Event::decode(seq, event_type, &data, sources.as_deref(), op.as_deref()) {
            Ok((event_type, sources, op)) => Event::assemble(seq, time, event_type, data, sources, op),
            Err(e) => Err(data_error(&data).unwrap_or(e)),
        }
    }

    /// The checks shared by [`Event::from_json`] and [`Event::from_parts`],
    /// up to rule 3: the parts [`Event::assemble`] takes, but `data`.
    fn decode(
        seq: u64,
        event_type: &str,
        data: &str,
        source_event_seqs: Option<&RawValue>,
        surface_op: Option<&RawValue>,
    ) -> Result<Envelope, AppendError> {
        let event_type = EventType::parse(event_type);
        check_payload(seq, &event_type, data)?;
        // An object with a duplicate key is malformed wherever it stands
        // (section 1), before the rules look at what it says.
        for (key, raw) in [("sourceEventSeqs", source_event_seqs), ("surfaceOp", surface_op)] {
            if let Some(raw) = raw {
                check_unique_keys(seq, key, raw.get())?;
            }
        }
        // The contract's check order: null optionals (section 1), rule 2,
        // rule 1, rule 3, rule 4.
        for (key, raw) in [("surfaceOp", surface_op), ("sourceEventSeqs", source_event_seqs)] {
            if raw.is_some_and(is_null) {
                let detail = format!("`{key}` is null; omit it instead");
                return Err(AppendError::EventMalformed { seq: Some(seq), detail });
            }
        }
        if !event_type.is_surface_eligible() {
            if surface_op.is_some() {
                return Err(AppendError::SurfaceOpForbidden { seq, event_type: event_type.to_string() });
            }
            if source_event_seqs.is_some() {
                return Err(AppendError::SourceSeqsForbidden { seq, event_type: event_type.to_string() });
            }
        } else if surface_op.is_none() {
            return Err(AppendError::SurfaceOpMissing { seq, event_type: event_type.to_string() });
        }
        let surface_op = surface_op.map(|raw| decode_surface_op(seq, raw)).transpose()?;
        let source_event_seqs = source_event_seqs.map(|raw| decode_sources(seq, raw)).transpose()?;
        Ok((event_type, source_event_seqs, surface_op))
    }

    /// Decodes one event from a JSON value. See [`Event::from_json`].
    pub fn from_value(value: &serde_json::Value) -> Result<Event, AppendError> {
        Event::from_json(&value.to_string())
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
        Event::checked(seq, time, event_type, data?, sources, Some(intent.op))
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
        Event::checked(seq, time, event_type, data?, None, None)
    }

    /// A copy of this event with another seq and time (used by fork and
    /// repair). Provenance and surface op are kept as they are.
    pub fn with_seq_and_time(&self, seq: u64, time: u64) -> Result<Event, AppendError> {
        Event::checked(
            seq,
            time,
            self.event_type.clone(),
            self.data.clone(),
            self.source_event_seqs.clone(),
            self.surface_op,
        )
    }

    /// The length in bytes of the event's line: its canonical JSON text, as
    /// [`Event::write_json`] writes it, without the `\n`. Never more than
    /// [`MAX_EVENT_LINE_BYTES`]: no constructor builds a longer event.
    pub fn line_len(&self) -> usize {
        line_len(
            self.seq,
            self.time,
            &self.event_type,
            &self.data,
            self.source_event_seqs.as_deref(),
            self.surface_op,
        )
    }

    /// Writes the canonical JSON text (no trailing newline).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(self.data.len() + 64);
        self.write_json(&mut out);
        // Every piece written is UTF-8: str slices (the data is a `RawValue`,
        // a str) and ASCII digits, so this cannot fail; an empty string
        // would hide a bug in `write_json` as a blank line.
        String::from_utf8(out).expect("write_json writes UTF-8 only")
    }

    /// Appends the canonical JSON text (no trailing newline) to `out`: the
    /// same bytes as serializing the event with serde, written by hand
    /// because `data` is already JSON text and the rest is a few integers.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"seq\":");
        push_u64(out, self.seq);
        out.extend_from_slice(b",\"time\":");
        push_u64(out, self.time);
        out.extend_from_slice(b",\"type\":");
        match &self.event_type {
            // Plugin types may need escaping; serde knows how.
            EventType::Plugin(name) => {
                let _ = serde_json::to_writer(&mut *out, &**name);
            }
            core => {
                out.push(b'"');
                out.extend_from_slice(core.as_str().as_bytes());
                out.push(b'"');
            }
        }
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(self.data.as_bytes());
        if let Some(sources) = &self.source_event_seqs {
            out.extend_from_slice(b",\"sourceEventSeqs\":[");
            for (i, s) in sources.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_u64(out, *s);
            }
            out.push(b']');
        }
        match self.surface_op {
            None => {}
            Some(SurfaceOp::Append) => out.extend_from_slice(b",\"surfaceOp\":\"append\""),
            Some(SurfaceOp::Replace { start, end }) => {
                out.extend_from_slice(b",\"surfaceOp\":{\"op\":\"replace\",\"start\":");
                push_u64(out, start);
                out.extend_from_slice(b",\"end\":");
                push_u64(out, end);
                out.push(b'}');
            }
        }
        out.push(b'}');
    }

    /// The constructor of the typed paths: checks the payload, then the rules.
    fn checked(
        seq: u64,
        time: u64,
        event_type: EventType,
        data: Box<str>,
        source_event_seqs: Option<Box<[u64]>>,
        surface_op: Option<SurfaceOp>,
    ) -> Result<Event, AppendError> {
        // The size first: a payload too large to write is not parsed.
        let len = line_len(seq, time, &event_type, &data, source_event_seqs.as_deref(), surface_op);
        check_line_len(Some(seq), len)?;
        check_payload(seq, &event_type, &data)?;
        Event::assemble(seq, time, event_type, data, source_event_seqs, surface_op)
    }

    /// Checks rules 1, 2 and 4 on an event whose payload was checked, and
    /// (again, as every path ends here) the size of its line.
    fn assemble(
        seq: u64,
        time: u64,
        event_type: EventType,
        data: Box<str>,
        source_event_seqs: Option<Box<[u64]>>,
        surface_op: Option<SurfaceOp>,
    ) -> Result<Event, AppendError> {
        check_metadata(seq, &event_type, source_event_seqs.as_deref(), surface_op)?;
        let len = line_len(seq, time, &event_type, &data, source_event_seqs.as_deref(), surface_op);
        check_line_len(Some(seq), len)?;
        Ok(Event { seq, time, event_type, data, source_event_seqs, surface_op })
    }
}

/// The one size rule of an event: its line is at most
/// [`MAX_EVENT_LINE_BYTES`] long.
fn check_line_len(seq: Option<u64>, len: usize) -> Result<(), AppendError> {
    if len <= MAX_EVENT_LINE_BYTES {
        return Ok(());
    }
    Err(AppendError::EventTooLarge { seq, len: len as u64, limit: MAX_EVENT_LINE_BYTES as u64 })
}

/// The length of the line [`Event::write_json`] writes for these parts.
fn line_len(
    seq: u64,
    time: u64,
    event_type: &EventType,
    data: &str,
    sources: Option<&[u64]>,
    op: Option<SurfaceOp>,
) -> usize {
    let type_len = match event_type {
        EventType::Plugin(name) => quoted_len(name),
        core => core.as_str().len() + 2,
    };
    let mut len = envelope_len(seq, time, type_len, data.len());
    if let Some(sources) = sources {
        // `,"sourceEventSeqs":[` … `]`, the items separated by commas.
        let items: usize = sources.iter().map(|&s| digits(s)).sum();
        len += ",\"sourceEventSeqs\":[]".len() + items + sources.len().saturating_sub(1);
    }
    len += match op {
        None => 0,
        Some(SurfaceOp::Append) => ",\"surfaceOp\":\"append\"".len(),
        Some(SurfaceOp::Replace { start, end }) => {
            ",\"surfaceOp\":{\"op\":\"replace\",\"start\":,\"end\":}".len() + digits(start) + digits(end)
        }
    };
    len
}

/// `{"seq":N,"time":N,"type":T,"data":D}` with a type of `type_len` bytes
/// (quotes included) and data of `data_len` bytes.
fn envelope_len(seq: u64, time: u64, type_len: usize, data_len: usize) -> usize {
    let fixed = "{\"seq\":,\"time\":,\"type\":,\"data\":}".len();
    (fixed + digits(seq) + digits(time) + type_len).saturating_add(data_len)
}

/// Decimal digits of `v`.
fn digits(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The length of `s` as serde_json writes it as a JSON string, quotes
/// included: `"` and `\` and the control characters are escaped, as two
/// bytes where JSON has a short form, else as `\u00XX`.
fn quoted_len(s: &str) -> usize {
    let escaped: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum();
    escaped + 2
}

/// The seq at the start of a canonical line (`{"seq":N…`), read without
/// parsing the rest: what names an event too large to parse.
pub(crate) fn seq_prefix(line: &str) -> Option<u64> {
    line.strip_prefix("{\"seq\":").and_then(leading_u64).map(|(seq, _)| seq)
}

/// Rules 1, 2 and 4: the surface metadata an event of `event_type` may,
/// must and does carry.
fn check_metadata(
    seq: u64,
    event_type: &EventType,
    source_event_seqs: Option<&[u64]>,
    surface_op: Option<SurfaceOp>,
) -> Result<(), AppendError> {
    let eligible = event_type.is_surface_eligible();
    // Rule 2: surface metadata only on surface-eligible types.
    if !eligible {
        if surface_op.is_some() {
            return Err(AppendError::SurfaceOpForbidden { seq, event_type: event_type.to_string() });
        }
        if source_event_seqs.is_some() {
            return Err(AppendError::SourceSeqsForbidden { seq, event_type: event_type.to_string() });
        }
    }
    // Rule 1: a surface-eligible event must say how it joins.
    if eligible && surface_op.is_none() {
        return Err(AppendError::SurfaceOpMissing { seq, event_type: event_type.to_string() });
    }
    // Rule 4: provenance shape.
    if let Some(sources) = source_event_seqs {
        check_sources(seq, event_type, sources)?;
    }
    Ok(())
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = 4 + usize::from(self.source_event_seqs.is_some()) + usize::from(self.surface_op.is_some());
        let mut st = s.serialize_struct("Event", n)?;
        st.serialize_field("seq", &self.seq)?;
        st.serialize_field("time", &self.time)?;
        st.serialize_field("type", self.event_type.as_str())?;
        // `data` is JSON text: serde_json embeds a RawValue as it is.
        let data: &RawValue = serde_json::from_str(&self.data).map_err(serde::ser::Error::custom)?;
        st.serialize_field("data", data)?;
        if let Some(sources) = &self.source_event_seqs {
            st.serialize_field("sourceEventSeqs", sources)?;
        }
        if let Some(op) = &self.surface_op {
            st.serialize_field("surfaceOp", op)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Event::from_json(raw.get()).map_err(de::Error::custom)
    }
}

/// What [`Event::decode`] makes of an envelope: the type, provenance and
/// surface op, checked up to rule 3.
type Envelope = (EventType, Option<Box<[u64]>>, Option<SurfaceOp>);

/// The envelope as read: every optional key kept raw, so that a present
/// `null` can be told from an absent key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent<'a> {
    seq: u64,
    time: u64,
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
    #[serde(rename = "sourceEventSeqs", default, borrow, deserialize_with = "present")]
    source_event_seqs: Option<&'a RawValue>,
    #[serde(rename = "surfaceOp", default, borrow, deserialize_with = "present")]
    surface_op: Option<&'a RawValue>,
}

/// A key that is present is `Some`, even when its value is `null`.
fn present<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// On a malformed envelope, still name the seq when it can be read.
fn salvage_seq(json: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct SeqOnly {
        seq: u64,
    }
    serde_json::from_str::<SeqOnly>(json).ok().map(|s| s.seq)
}

fn is_null(raw: &RawValue) -> bool {
    raw.get().trim() == "null"
}

fn decode_surface_op(seq: u64, raw: &RawValue) -> Result<SurfaceOp, AppendError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Replace<'a> {
        #[serde(borrow)]
        op: Cow<'a, str>,
        start: u64,
        end: u64,
    }
    let malformed = |detail: String| AppendError::SurfaceOpMalformed { seq, detail };
    let text = raw.get().trim_start();
    if text.starts_with('"') {
        let op: Text<'_> = serde_json::from_str(raw.get()).map_err(|e| malformed(e.to_string()))?;
        let op = op.as_str();
        return if op == "append" {
            Ok(SurfaceOp::Append)
        } else {
            Err(malformed(format!("unknown op {op:?}; expected \"append\" or a replace object")))
        };
    }
    if !text.starts_with('{') {
        return Err(malformed(format!("expected \"append\" or a replace object, found {}", raw.get())));
    }
    let r: Replace<'_> = serde_json::from_str(raw.get()).map_err(|e| malformed(e.to_string()))?;
    if r.op != "replace" {
        return Err(malformed(format!("op must be \"replace\", found {:?}", r.op)));
    }
    Ok(SurfaceOp::Replace { start: r.start, end: r.end })
}

fn decode_sources(seq: u64, raw: &RawValue) -> Result<Box<[u64]>, AppendError> {
    if !raw.get().trim_start().starts_with('[') {
        return Err(AppendError::SourceSeqsMalformed {
            seq,
            detail: format!("expected an array, found {}", raw.get()),
        });
    }
    serde_json::from_str::<Vec<u64>>(raw.get())
        .map(Vec::into_boxed_slice)
        .map_err(|e| AppendError::SourceSeqsMalformed { seq, detail: e.to_string() })
}

fn check_sources(seq: u64, event_type: &EventType, sources: &[u64]) -> Result<(), AppendError> {
    if sources.is_empty() && *event_type != EventType::AssistantMessage {
        return Err(AppendError::SourceSeqsEmpty { seq, event_type: event_type.to_string() });
    }
    if let Some(&value) = sources.iter().find(|&&v| v >= seq) {
        return Err(AppendError::SourceSeqsNotEarlier { seq, value });
    }
    // Provenance lists are short and usually ascending: check that first.
    if sources.windows(2).all(|w| w[0] < w[1]) {
        return Ok(());
    }
    let mut sorted = sources.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(AppendError::SourceSeqsDuplicate { seq, value: w[0] });
    }
    Ok(())
}

fn to_raw<T: Serialize>(value: &T) -> Result<Box<str>, AppendError> {
    serde_json::to_string(value)
        .map(String::into_boxed_str)
        .map_err(|e| AppendError::EventMalformed { seq: None, detail: e.to_string() })
}

/// Checks a core payload's shape (section 1.2). Plugin data is opaque.
fn check_payload(seq: u64, event_type: &EventType, text: &str) -> Result<(), AppendError> {
    // Any data, core or plugin, is no deeper than serde_json reads elsewhere,
    // so every reader can read whatever was accepted: unknown keys inside a
    // core payload are skipped by the typed parse below without a depth
    // limit. Counting brackets first keeps the common case to one quick pass.
    if more_brackets_than(text, MAX_NESTING) {
        let depth = nesting_depth(text);
        if depth > MAX_NESTING {
            let detail = format!("`data` is nested {depth} deep; the limit is {MAX_NESTING}");
            return Err(AppendError::EventMalformed { seq: Some(seq), detail });
        }
    }
    // Most events of a log: matched as text, keys and all.
    if shape::is_plain_chunk(event_type, text) {
        return Ok(());
    }
    // The common case, without allocating; the owned types decide (and
    // word the error) whenever the fast check is not sure.
    if !shape::accepts(event_type, text) {
        check_owned_payload(seq, event_type, text)?;
    }
    // Now known to be one JSON value: no object in it, known keys or
    // unknown, core payload or opaque, may name a key twice.
    check_unique_keys(seq, "data", text)
}

/// Refuses a JSON text (`what` of the event at `seq`) in which one object
/// names a key twice: readers that keep the first, the last or refuse
/// would each read another event. See [`crate::unique_keys`].
fn check_unique_keys(seq: u64, what: &str, json: &str) -> Result<(), AppendError> {
    match unique_keys::duplicate_key(json) {
        None => Ok(()),
        Some(key) => Err(AppendError::EventMalformed {
            seq: Some(seq),
            detail: format!("`{what}` has an object naming the key {key:?} twice"),
        }),
    }
}

/// Checks a core payload's shape by reading it into its owned type of
/// [`crate::payload`]: the reference [`shape::accepts`] must agree with.
pub(crate) fn check_owned_payload(seq: u64, event_type: &EventType, data: &str) -> Result<(), AppendError> {
    fn parse<'a, T: Deserialize<'a>>(seq: u64, data: &'a str) -> Result<T, AppendError> {
        if !data.trim_start().starts_with('{') {
            return Err(AppendError::EventMalformed {
                seq: Some(seq),
                detail: "`data` must be an object".into(),
            });
        }
        serde_json::from_str(data)
            .map_err(|e| AppendError::EventMalformed { seq: Some(seq), detail: format!("bad `data`: {e}") })
    }
    let malformed = |detail: String| Err(AppendError::EventMalformed { seq: Some(seq), detail });
    let role_is = |m: &Message, role: Role| -> Result<(), AppendError> {
        if m.role == role {
            Ok(())
        } else {
            malformed(format!("a `{event_type}` message must have role {role:?}, not {:?}", m.role))
        }
    };
    match event_type {
        EventType::TurnStart => parse::<TurnStart>(seq, data).map(drop),
        EventType::TurnEnd => parse::<TurnEnd>(seq, data).map(drop),
        EventType::StepStart => parse::<StepStart>(seq, data).map(drop),
        EventType::StepEnd => parse::<StepEnd>(seq, data).map(drop),
        EventType::AssistantChunk => parse::<AssistantChunk>(seq, data).map(drop),
        EventType::ToolCall => parse::<ToolCall>(seq, data).map(drop),
        EventType::SessionSettings => parse::<SessionSettings>(seq, data).map(drop),
        EventType::UserMessage => role_is(&parse::<UserMessage>(seq, data)?.message, Role::User),
        EventType::ContextMessage => role_is(&parse::<ContextMessage>(seq, data)?.message, Role::User),
        EventType::SteeringMessage => role_is(&parse::<SteeringMessage>(seq, data)?.message, Role::User),
        EventType::AssistantMessage => {
            role_is(&parse::<AssistantMessage>(seq, data)?.message, Role::Assistant)
        }
        EventType::ToolResult => {
            let r = parse::<ToolResult>(seq, data)?;
            role_is(&r.message, Role::User)?;
            let [Block::ToolResult { tool_call_id, .. }] = r.message.content.as_slice() else {
                return malformed("a tool/result message must hold exactly one tool-result block".into());
            };
            match &r.message.source {
                Source::Tool { call_id } if call_id == tool_call_id => Ok(()),
                Source::Tool { call_id } => malformed(format!(
                    "tool/result source callId {call_id:?} differs from the block's toolCallId {tool_call_id:?}"
                )),
                _ => malformed("a tool/result message must have source kind `tool`".into()),
            }
        }
        // Opaque: any one JSON value; depth checked above.
        EventType::Plugin(_) => match serde_json::from_str::<de::IgnoredAny>(data) {
            Ok(_) => Ok(()),
            Err(e) => malformed(format!("`data` is not JSON: {e}")),
        },
    }
}

/// Deepest nesting accepted in opaque data: serde_json's own recursion limit,
/// so anything accepted here can be parsed into a `serde_json::Value`.
pub const MAX_NESTING: usize = 127;

/// Whether `json` holds more than `limit` `[` and `{` bytes (an upper
/// bound of its depth). Vectorized, and stops at the first one over.
fn more_brackets_than(json: &str, limit: usize) -> bool {
    memchr::memchr2_iter(b'[', b'{', json.as_bytes()).nth(limit).is_some()
}

/// Nesting depth of a JSON text known to be valid (strings are skipped).
fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Appends the decimal digits of `v`.
fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// A line exactly as [`Event::write_json`] writes it, read without serde:
///
/// ```text
/// {"seq":N,"time":N,"type":"T","data":D[,"sourceEventSeqs":[N,…]][,"surfaceOp":"append"|{"op":"replace","start":N,"end":N}]}
/// ```
///
/// Only the envelope is read here; `D` is whatever lies between, and is
/// then parsed by the payload check, which refuses it unless it is exactly
/// one JSON value. That is what makes the split sound: a JSON value's end is
/// fixed by its start, so when `D` is one whole value, serde reading the
/// line ends `data` where this does, and reads the same envelope around
/// it. Anything not in this form (whitespace, another key order, escapes in
/// the type, a leading zero) is left to serde.
struct Canonical<'a> {
    seq: u64,
    time: u64,
    event_type: &'a str,
    data: &'a str,
    sources: Option<Box<[u64]>>,
    op: Option<SurfaceOp>,
}

impl<'a> Canonical<'a> {
    fn read(line: &'a str) -> Option<Canonical<'a>> {
        let rest = line.strip_prefix("{\"seq\":")?;
        let (seq, rest) = leading_u64(rest)?;
        let (time, rest) = leading_u64(rest.strip_prefix(",\"time\":")?)?;
        let rest = rest.strip_prefix(",\"type\":\"")?;
        let end = memchr::memchr(b'"', rest.as_bytes())?;
        let (event_type, rest) = (&rest[..end], &rest[end + 1..]);
        if event_type.bytes().any(|b| b == b'\\' || b < 0x20) {
            return None;
        }
        let mut data = rest.strip_prefix(",\"data\":")?.strip_suffix('}')?;
        let mut op = None;
        if let Some(d) = data.strip_suffix(",\"surfaceOp\":\"append\"") {
            (data, op) = (d, Some(SurfaceOp::Append));
        } else if let Some((d, replace)) = replace_suffix(data) {
            (data, op) = (d, Some(replace));
        }
        let mut sources = None;
        if let Some((d, seqs)) = sources_suffix(data) {
            (data, sources) = (d, Some(seqs));
        }
        let (first, last) = (data.bytes().next()?, data.bytes().next_back()?);
        if first.is_ascii_whitespace() || last.is_ascii_whitespace() {
            return None;
        }
        Some(Canonical { seq, time, event_type, data, sources, op })
    }
}

/// `…,"surfaceOp":{"op":"replace","start":N,"end":N}` at the end of `text`.
fn replace_suffix(text: &str) -> Option<(&str, SurfaceOp)> {
    let (rest, end) = trailing_u64(text.strip_suffix('}')?)?;
    let (rest, start) = trailing_u64(rest.strip_suffix(",\"end\":")?)?;
    let rest = rest.strip_suffix(",\"surfaceOp\":{\"op\":\"replace\",\"start\":")?;
    Some((rest, SurfaceOp::Replace { start, end }))
}

/// `…,"sourceEventSeqs":[N,…]` at the end of `text`.
fn sources_suffix(text: &str) -> Option<(&str, Box<[u64]>)> {
    let list = text.strip_suffix(']')?;
    // The list is digits and commas; what precedes it must be the key.
    let open = list.bytes().rposition(|b| !(b.is_ascii_digit() || b == b','))?;
    let rest = list[..=open].strip_suffix(",\"sourceEventSeqs\":[")?;
    Some((rest, u64_items(&list[open + 1..])?))
}

/// `N,N,…` (or nothing), exactly as JSON integers are written.
fn u64_items(mut items: &str) -> Option<Box<[u64]>> {
    let mut seqs = Vec::with_capacity(items.bytes().filter(|&b| b == b',').count() + 1);
    while !items.is_empty() {
        if !seqs.is_empty() {
            items = items.strip_prefix(',')?;
        }
        let (n, r) = leading_u64(items)?;
        seqs.push(n);
        items = r;
    }
    Some(seqs.into_boxed_slice())
}

/// A `sourceEventSeqs` text exactly as [`Event::write_json`] writes it.
fn exact_u64_list(text: &str) -> Option<Box<[u64]>> {
    u64_items(text.strip_prefix('[')?.strip_suffix(']')?)
}

/// A `surfaceOp` text exactly as [`Event::write_json`] writes it.
fn exact_surface_op(text: &str) -> Option<SurfaceOp> {
    if text == "\"append\"" {
        return Some(SurfaceOp::Append);
    }
    let rest = text.strip_prefix("{\"op\":\"replace\",\"start\":")?;
    let (start, rest) = leading_u64(rest)?;
    let (end, rest) = leading_u64(rest.strip_prefix(",\"end\":")?)?;
    (rest == "}").then_some(SurfaceOp::Replace { start, end })
}

/// A JSON integer in `0..=u64::MAX` at the start of `text` (no sign, no
/// leading zero, no fraction or exponent), and what follows it.
pub(crate) fn leading_u64(text: &str) -> Option<(u64, &str)> {
    let bytes = text.as_bytes();
    let (mut value, mut digits) = (0u64, 0);
    while let Some(&b) = bytes.get(digits).filter(|b| b.is_ascii_digit()) {
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        digits += 1;
    }
    let leading_zero = digits > 1 && bytes[0] == b'0';
    if digits == 0 || leading_zero || matches!(bytes.get(digits), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((value, &text[digits..]))
}

/// A JSON integer in `0..=u64::MAX` at the end of `text`, and what
/// precedes it.
fn trailing_u64(text: &str) -> Option<(&str, u64)> {
    let digits = text.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (rest, number) = text.split_at(text.len() - digits);
    Some((rest, json_u64(number)?))
}

/// The value of a run of ASCII digits written as JSON writes an integer:
/// at least one digit, no leading zero, no overflow.
fn json_u64(digits: &str) -> Option<u64> {
    let bytes = digits.as_bytes();
    if bytes.is_empty() || (bytes.len() > 1 && bytes[0] == b'0') {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    //! The hand-read canonical envelope decides exactly as serde's reading
    //! of the same line: same event, or the same error.

    use proptest::prelude::*;

    use super::*;

    /// Every line of the valid fixtures, plus lines that put the suffixes
    /// the canonical reader looks for inside `data`.
    fn seeds() -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        for file in ["plain-chat", "multi-step-tools", "compaction-and-prune", "two-compactions"] {
            let path = format!("{}/test_data/ok/{file}.jsonl", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            lines.extend(text.lines().skip(1).map(str::to_owned));
        }
        lines.extend(
            [
                r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"surfaceOp":"append"}}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":[1,"sourceEventSeqs",[1]]}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1},"surfaceOp":{"op":"replace","start":1,"end":2}}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"surfaceOp":{"op":"replace","start":1,"end":2}}}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":"s\",\"surfaceOp\":\"append\""}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":1,"sourceEventSeqs":[0]}"#,
                r#"{"seq":03,"time":1,"type":"x/y","data":1}"#,
                r#"{"seq":3,"time":1.0,"type":"x/y","data":1}"#,
                r#"{"seq":18446744073709551616,"time":1,"type":"x/y","data":1}"#,
                r#"{"seq":3,"time":1,"type":"x\"y","data":1}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":1 }"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":{},"sourceEventSeqs":[],"surfaceOp":"append"}"#,
                // Keys named twice: in data, in the envelope, in the surface op.
                r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"b":{"c":2,"c":2}}}"#,
                r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1},"data":{"a":1}}"#,
                r#"{"seq":3,"seq":3,"time":1,"type":"x/y","data":1}"#,
                r#"{"seq":3,"time":1,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi","type":"text"}],"source":{"kind":"user"}}},"surfaceOp":{"op":"replace","start":1,"end":2,"end":2}}"#,
                r#"{"seq":3,"time":1,"type":"session/settings","data":{"settings":{"systemPrompt":"Be a pirate.","model":"m","tools":[{"name":"t","parameters":{"type":"object"},"x":1}],"contextBudget":9,"params":{"temperature":0.5}}}}"#,
                r#"{"seq":3,"time":1,"type":"session/settings","data":{"settings":{}},"surfaceOp":"append"}"#,
            ]
            .map(str::to_owned),
        );
        lines
    }

    /// A seed line, then a few edits: a byte replaced, removed or inserted,
    /// or a canonical fragment spliced in anywhere.
    fn line() -> impl Strategy<Value = String> {
        const PIECES: &[&str] = &[
            ",\"surfaceOp\":\"append\"",
            ",\"sourceEventSeqs\":[1,2]",
            ",\"surfaceOp\":{\"op\":\"replace\",\"start\":0,\"end\":1}",
            "}",
            "]",
            "\"",
            "\\",
            ",",
            " ",
            "0",
            "null",
            // A key named again, wherever it lands.
            "\"type\":\"text\",",
            ",\"turn\":1",
            "\"seq\":3,",
            ",\"op\":\"replace\"",
        ];
        let edit = (0u8..4, any::<prop::sample::Index>(), prop::sample::select(PIECES), any::<u8>());
        (prop::sample::select(seeds()), prop::collection::vec(edit, 0..3)).prop_map(|(seed, edits)| {
            let mut bytes = seed.into_bytes();
            for (kind, at, piece, byte) in edits {
                let i = at.index(bytes.len() + 1);
                match kind {
                    0 if i < bytes.len() => bytes[i] = byte % 0x60 + 0x20,
                    1 if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {
                        bytes.splice(i..i, piece.bytes());
                    }
                }
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 6000, ..ProptestConfig::default() })]

        #[test]
        fn the_canonical_reader_agrees_with_serde(line in line()) {
            prop_assert_eq!(Event::from_json(&line), Event::from_general_json(&line), "{}", line);
        }
    }

    #[test]
    fn canonical_lines_take_the_canonical_reader() {
        let seeds = seeds();
        let canonical = seeds.iter().filter(|l| Canonical::read(l).is_some()).count();
        // Every fixture line is canonical; only the crafted ones may not be.
        assert!(canonical >= seeds.len() - 18, "{canonical} of {}", seeds.len());
        let line = r#"{"seq":7,"time":9,"type":"user/message","data":{"x":[1]},"sourceEventSeqs":[1,5],"surfaceOp":{"op":"replace","start":1,"end":5}}"#;
        let c = Canonical::read(line).unwrap();
        assert_eq!((c.seq, c.time, c.event_type, c.data), (7, 9, "user/message", r#"{"x":[1]}"#));
        assert_eq!(c.sources.as_deref(), Some(&[1, 5][..]));
        assert_eq!(c.op, Some(SurfaceOp::Replace { start: 1, end: 5 }));
        for not_canonical in [
            r#"{"seq":01,"time":9,"type":"t","data":1}"#,
            r#"{"seq":1,"time":9,"type":"t","data": 1}"#,
            r#"{"time":9,"seq":1,"type":"t","data":1}"#,
            r#"{"seq":1,"time":9,"type":"t\n","data":1}"#,
        ] {
            assert!(Canonical::read(not_canonical).is_none(), "{not_canonical}");
        }
    }
}

#[cfg(test)]
mod duplicate_keys;

#[cfg(test)]
mod parts_tests {
    //! `from_parts` reads columns written as `write_json` writes them
    //! without serde; it must decide exactly as the general reading does.

    use proptest::prelude::*;

    use super::*;

    fn data() -> impl Strategy<Value = String> {
        const DATA: &[&str] = &[
            r#"{"turn":1}"#,
            r#"{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}"#,
            r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#,
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
            r#"{"settings":{"model":"m","tools":[{"name":"t"}]}}"#,
            r#"{"settings":{"model":null}}"#,
            r#"[1,2]"#,
            r#"{"turn":"1"}"#,
            r#" {"turn":1}"#,
            r#"{"turn":1"#,
            "null",
            r#"{"turn":1,"turn":1}"#,
            r#"{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi","type":"tool-call"}],"source":{"kind":"user"}}}"#,
            r#"{"message":{"id":"u","role":"user","content":[],"source":{"kind":"user","kind":"user"}},"x":{"y":1,"y":2}}"#,
        ];
        prop::sample::select(DATA).prop_map(str::to_owned)
    }

    fn sources() -> impl Strategy<Value = Option<String>> {
        const SOURCES: &[&str] = &[
            "[1,2]",
            "[]",
            "[0]",
            "[01]",
            "[1, 2]",
            "[2,1]",
            "[1,1]",
            "[9]",
            "null",
            "[1.0]",
            "[1",
            "{}",
            r#"[{"a":1,"a":1}]"#,
        ];
        prop::option::of(prop::sample::select(SOURCES).prop_map(str::to_owned))
    }

    fn op() -> impl Strategy<Value = Option<String>> {
        const OPS: &[&str] = &[
            r#""append""#,
            r#"{"op":"replace","start":1,"end":2}"#,
            r#"{"op":"replace","end":2,"start":1}"#,
            r#"{"op":"replace","start":1,"end":2} "#,
            r#"{"op":"replace","start":01,"end":2}"#,
            r#"{"op":"replace","start":1,"end":18446744073709551616}"#,
            r#"x{"op":"replace","start":1,"end":2}"#,
            r#"{"op":"replace","start":1,"end":2}}"#,
            r#"{"op":"replace","start":1,"end":2,"x":0}"#,
            r#"{"op":"replace","start":1,"end":2,"end":2}"#,
            r#"{"op":"replace","op":"replace","start":1,"end":2}"#,
            r#""Append""#,
            r#" "append""#,
            "null",
            "[]",
        ];
        prop::option::of(prop::sample::select(OPS).prop_map(str::to_owned))
    }

    fn event_type() -> impl Strategy<Value = &'static str> {
        prop::sample::select(
            &[
                "turn/start",
                "user/message",
                "assistant/message",
                "assistant/chunk",
                "session/settings",
                "x/plugin",
            ][..],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn from_parts_agrees_with_the_general_reading(
            t in event_type(), d in data(), s in sources(), o in op(), seq in 5u64..8,
        ) {
            let fast = Event::from_parts(seq, 1, t, d.clone(), s.as_deref(), o.as_deref());
            let general = Event::from_general_parts(seq, 1, t, d.into(), s.as_deref(), o.as_deref());
            prop_assert_eq!(fast, general);
        }
    }

    #[test]
    fn columns_as_written_take_the_exact_reading() {
        assert_eq!(exact_surface_op(r#""append""#), Some(SurfaceOp::Append));
        let replace = SurfaceOp::Replace { start: 3, end: 12 };
        assert_eq!(exact_surface_op(&serde_json::to_string(&replace).unwrap()), Some(replace));
        assert_eq!(exact_surface_op(r#"{"op":"replace","start":3,"end":12} "#), None);
        assert_eq!(exact_u64_list("[]").as_deref(), Some(&[][..]));
        assert_eq!(exact_u64_list("[4,18446744073709551615]").as_deref(), Some(&[4, u64::MAX][..]));
        assert_eq!(exact_u64_list("[4, 5]"), None);
    }
}
