//! The JSON text of an event: the canonical line, written by hand
//! ([`Event::write_json`]) and measured without writing it
//! ([`Event::line_len`]); the fast path that reads a canonical line or
//! canonical database columns without serde; and the general reading,
//! through serde, that judges and words everything else. Both readings end
//! in the rules of `rules.rs`, so they decide alike (the tests below prove
//! it).

use std::borrow::Cow;
use std::ops::Range;

use serde::de;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::rules::check_line_len;
use super::rules::{check_metadata, check_payload};
use super::text::{PayloadText, SharedText};
use super::{Event, EventType, SurfaceOp};
use crate::error::AppendError;
use crate::limits::MAX_EVENT_LINE_BYTES;

impl Event {
    /// Decodes one event from its JSON text (the runtime path for events read
    /// from a file or built dynamically), checking section 1 and the
    /// context-free rules 1–4 of section 2.
    ///
    /// The event's [`data`](Event::data) is the payload's text as written,
    /// normalized as every constructor normalizes it: no JSON whitespace
    /// around the value, and each raw line break (`\n` or `\r`, which in a
    /// JSON text can only stand between tokens) written as a space, so
    /// that the event's line is one line. The value is the same. A text
    /// pretty-printed over several lines is read, and written back as one
    /// line.
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
            // No whitespace around it: a canonical line has none.
            let data = PayloadText::Own(Box::from(line.data));
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
        // No whitespace around it: a raw value starts and ends with a token.
        let data = wire.data.get();
        let (event_type, sources, op) =
            Event::decode(wire.seq, &wire.event_type, data, wire.source_event_seqs, wire.surface_op)?;
        Event::assemble(wire.seq, wire.time, event_type, PayloadText::Own(data.into()), sources, op)
    }

    /// Rebuilds an event from stored parts (for example a database row),
    /// with exactly the checks of [`Event::from_json`] but without building
    /// and re-reading a JSON envelope. `data`, `source_event_seqs` and
    /// `surface_op` are JSON texts, the optional ones `None` when absent.
    ///
    /// `data` must be one JSON value, which the payload check reads anyway.
    /// It is normalized as [`Event::from_json`] normalizes it: the JSON
    /// whitespace around the value (space, `\t`, `\n`, `\r`) is dropped,
    /// and each raw `\n` or `\r` inside it (whitespace between tokens) is
    /// written as a space, so `" {\n\"a\":1}\n"` is kept as
    /// `{ "a":1}`. A `String` that needs none of this is not copied, and
    /// one that does is changed in place.
    ///
    /// ```
    /// use palimpsest_core_session::Event;
    ///
    /// let e = Event::from_parts(0, 1, "x/y", " {\n\"a\":1}\n", None, None)?;
    /// assert_eq!(e.data(), "{ \"a\":1}");
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn from_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        data: impl Into<String>,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
        let data = trim_json_space(data.into()).into_boxed_str();
        Event::from_text_parts(seq, time, event_type, data.into(), source_event_seqs, surface_op)
    }

    /// [`Event::from_parts`] with `data` the range `data` of `text`, which
    /// the event shares instead of copying it: what a store decoding many
    /// rows at once uses, copying their payloads into one text first
    /// ([`SharedText`] says what that costs and saves). The same checks
    /// and the same event; a range that is not normalized (JSON
    /// whitespace around it, a raw line break in it), or not one of
    /// `text` at character boundaries, is copied out and read as
    /// [`Event::from_parts`] reads it.
    ///
    /// ```
    /// use palimpsest_core_session::event::SharedText;
    /// use palimpsest_core_session::Event;
    ///
    /// let text = SharedText::new(String::from("{\"turn\":1}{\"turn\":1,\"step\":1}"));
    /// let turn = Event::from_shared_parts(0, 1, "turn/start", &text, 0..10, None, None)?;
    /// let step = Event::from_shared_parts(1, 1, "step/start", &text, 10..29, None, None)?;
    /// drop(text);
    /// assert_eq!((turn.data(), step.data()), ("{\"turn\":1}", "{\"turn\":1,\"step\":1}"));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn from_shared_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        text: &SharedText,
        data: Range<usize>,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
        match shared_payload(text, data.clone()) {
            Some(shared) => {
                Event::from_text_parts(seq, time, event_type, shared, source_event_seqs, surface_op)
            }
            None => {
                let data = text.as_str().get(data).unwrap_or_default();
                Event::from_parts(seq, time, event_type, data, source_event_seqs, surface_op)
            }
        }
    }

    /// [`Event::from_parts`] of a `data` already trimmed.
    fn from_text_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        data: PayloadText,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
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
                return Ok(Event::from_fields(seq, time, event_type, data, sources, op));
            }
        }
        Event::from_general_parts(seq, time, event_type, data, source_event_seqs, surface_op)
    }

    /// [`Event::from_parts`] for any texts: serde reads the optional ones.
    /// (`data` is trimmed again, so that this stands on its own as the
    /// reference `from_parts` is tested against; a shared text is one
    /// that needed no trimming.)
    fn from_general_parts(
        seq: u64,
        time: u64,
        event_type: &str,
        data: PayloadText,
        source_event_seqs: Option<&str>,
        surface_op: Option<&str>,
    ) -> Result<Event, AppendError> {
        let data = match data {
            PayloadText::Own(data) => PayloadText::Own(trim_json_space(data.into()).into_boxed_str()),
            shared => shared,
        };
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

    /// Decodes one event from a JSON value. See [`Event::from_json`]
    /// (the value is written compact, so its `data` needs no normalizing).
    pub fn from_value(value: &serde_json::Value) -> Result<Event, AppendError> {
        Event::from_json(&value.to_string())
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
            self.source_event_seqs(),
            self.surface_op(),
        )
    }

    /// At least the length of [`write_json`](Event::write_json)'s text, so
    /// that a buffer reserved by it is written without growing (a guess
    /// below the envelope's ~90 bytes reallocated for every event).
    pub(crate) fn json_len_hint(&self) -> usize {
        // `{"seq":` `,"time":` `,"type":""` `,"data":` `}`, two u64s at most.
        const ENVELOPE: usize = 7 + 8 + 10 + 8 + 1 + 2 * 20;
        let type_len = match &self.event_type {
            // Escaped, a byte takes six at most (`\u001f`).
            EventType::Plugin(name) if name.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) => {
                6 * name.len()
            }
            EventType::Plugin(name) => name.len(),
            core => core.as_str().len(),
        };
        // `,"sourceEventSeqs":[]`, and a u64 and a comma each.
        let sources = self.source_event_seqs().map_or(0, |s| 21 + 21 * s.len());
        // `,"surfaceOp":{"op":"replace","start":` `,"end":` `}`, two u64s.
        let surface_op = if self.surface_op().is_some() { 44 + 2 * 20 } else { 0 };
        ENVELOPE + type_len + self.data.len() + sources + surface_op
    }

    /// Writes the canonical JSON text (no trailing newline).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(self.json_len_hint());
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
        if let Some(sources) = &self.source_event_seqs() {
            out.extend_from_slice(b",\"sourceEventSeqs\":[");
            for (i, s) in sources.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_u64(out, *s);
            }
            out.push(b']');
        }
        match self.surface_op() {
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
}

/// The length of the line [`Event::write_json`] writes for these parts.
pub(super) fn line_len(
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
    // Every type a log holds needs no escape: one quick scan says so.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        return s.len() + 2;
    }
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

/// Whether `b` is JSON whitespace (RFC 8259: space, `\t`, `\n`, `\r`),
/// the only bytes that may stand around or between a JSON text's tokens.
pub(crate) fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `data` without the JSON whitespace around it (what an event keeps),
/// changed in place: never allocates, and moves the text only when there
/// is whitespace in front. Whether the text is one JSON value is
/// unchanged, as JSON allows whitespace around a value.
pub(crate) fn trim_json_space(mut data: String) -> String {
    let bytes = data.as_bytes();
    // Whitespace is ASCII, so both bounds are character boundaries.
    let start = bytes.iter().position(|&b| !is_json_space(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|&b| !is_json_space(b)).map_or(start, |i| i + 1);
    data.truncate(end);
    if start > 0 {
        data.drain(..start);
    }
    data
}

/// A payload text known to be one JSON value, with each raw `\n` and `\r`
/// in it written as a space, in place (no allocation). In a JSON value a
/// raw line break can only stand between tokens (a string must escape
/// it), so the value is the same, and the text now fits on one line of a
/// JSONL file. Only for a checked text: in one that is not JSON the break
/// could be inside a string, and a space there would make it JSON. One
/// vectorized scan when there is none.
pub(crate) fn line_breaks_as_spaces(data: Box<str>) -> Box<str> {
    let Some(first) = memchr::memchr2(b'\n', b'\r', data.as_bytes()) else { return data };
    let mut bytes = data.into_string().into_bytes();
    for b in &mut bytes[first..] {
        if matches!(*b, b'\n' | b'\r') {
            *b = b' ';
        }
    }
    // An ASCII byte replaced by another leaves UTF-8 valid, and a vector
    // as long as its text is boxed without reallocating.
    match String::from_utf8(bytes) {
        Ok(text) => text.into_boxed_str(),
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into(),
    }
}

/// Whether `data` is as every constructor leaves it: no JSON whitespace
/// around it, no raw line break in it.
pub(crate) fn is_normalized(data: &str) -> bool {
    let bytes = data.as_bytes();
    !bytes.first().is_some_and(|&b| is_json_space(b))
        && !bytes.last().is_some_and(|&b| is_json_space(b))
        && memchr::memchr2(b'\n', b'\r', bytes).is_none()
}

/// The seq at the start of a canonical line (`{"seq":N…`), read without
/// parsing the rest: what names an event too large to parse.
pub(crate) fn seq_prefix(line: &str) -> Option<u64> {
    line.strip_prefix("{\"seq\":").and_then(leading_u64).map(|(seq, _)| seq)
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n =
            4 + usize::from(self.source_event_seqs().is_some()) + usize::from(self.surface_op().is_some());
        let mut st = s.serialize_struct("Event", n)?;
        st.serialize_field("seq", &self.seq)?;
        st.serialize_field("time", &self.time)?;
        st.serialize_field("type", self.event_type.as_str())?;
        // `data` is JSON text: serde_json embeds a RawValue as it is.
        let data: &RawValue = serde_json::from_str(&self.data).map_err(serde::ser::Error::custom)?;
        st.serialize_field("data", data)?;
        if let Some(sources) = &self.source_event_seqs() {
            st.serialize_field("sourceEventSeqs", sources)?;
        }
        if let Some(op) = &self.surface_op() {
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
#[derive(Debug, Clone)]
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
        if is_json_space(first) || is_json_space(last) {
            return None;
        }
        Some(Canonical { seq, time, event_type, data, sources, op })
    }
}

/// The canonical lines of a run of JSONL lines, their payloads copied
/// into one [`SharedText`] that their events share: what a whole file's
/// decoder uses instead of a `Box<str>` per event (`SharedText` says why).
/// Lines are taken in order; each is decoded by [`SharedLines::decode`]
/// or, when it is not canonical, by [`Event::from_json`].
#[derive(Debug, Clone)]
pub(crate) struct SharedLines<'a> {
    text: SharedText,
    /// The canonical lines taken, in order: where each starts (an offset
    /// the caller chose), its envelope, and its payload's range of `text`.
    lines: std::collections::VecDeque<(usize, Canonical<'a>, Range<usize>)>,
    /// Where the line after the last one taken starts.
    end: usize,
}

impl<'a> SharedLines<'a> {
    /// Takes `lines` (each with where it starts, in increasing order, and
    /// `end`, where the line after them starts): reads their envelopes and
    /// copies the payloads of the canonical ones into one text.
    pub(crate) fn new(lines: &[(usize, &'a str)], end: usize) -> SharedLines<'a> {
        // Each envelope read once: the text is sized from them, then filled.
        let canonical: Vec<(usize, Canonical<'a>)> = lines
            .iter()
            .filter(|(_, line)| line.len() <= MAX_EVENT_LINE_BYTES)
            .filter_map(|&(at, line)| Canonical::read(line).map(|c| (at, c)))
            .collect();
        let mut text = String::with_capacity(canonical.iter().map(|(_, c)| c.data.len()).sum());
        let lines = canonical
            .into_iter()
            .map(|(at, c)| {
                let start = text.len();
                text.push_str(c.data);
                (at, c, start..text.len())
            })
            .collect();
        SharedLines { text: SharedText::new(text), lines, end }
    }

    /// Whether the line starting at `at` is past the lines taken.
    pub(crate) fn is_past(&self, at: usize) -> bool {
        at >= self.end
    }

    /// The event of `line`, which starts at `at`: built on the shared text
    /// when it is one of the canonical lines taken and its event is valid,
    /// else read by [`Event::from_json`], which judges and words any error.
    /// Lines taken before `at` and not decoded are let go of.
    pub(crate) fn decode(&mut self, at: usize, line: &str) -> Result<Event, AppendError> {
        while self.lines.front().is_some_and(|(start, ..)| *start < at) {
            self.lines.pop_front();
        }
        if let Some((_, c, range)) = self.lines.pop_front_if(|(start, ..)| *start == at) {
            if let Some(data) = shared_payload(&self.text, range) {
                let event_type = EventType::parse(c.event_type);
                if let Ok(event) = Event::checked(c.seq, c.time, event_type, data, c.sources, c.op) {
                    return Ok(event);
                }
            }
        }
        Event::from_json(line)
    }
}

/// `range` of `text` as an event's payload, if it is one at character
/// boundaries that needs no normalizing: no JSON whitespace around it and
/// no raw line break in it (a `\r` may stand between a line's tokens).
fn shared_payload(text: &SharedText, range: Range<usize>) -> Option<PayloadText> {
    PayloadText::shared(text, range).filter(|t| is_normalized(t))
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
    if items.is_empty() {
        // `[]`, the sources of most derived messages: no allocation.
        return Some(Box::default());
    }
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
mod tests;

#[cfg(test)]
mod parts_tests;
