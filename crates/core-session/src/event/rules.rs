//! The rules of an event on its own: the payload shape of a core type
//! (contract section 1.2), no key named twice in any object (section 1),
//! the size limit, and the surface metadata rules 1–4 of section 2, checked
//! in the contract's order so that the first broken rule is the one
//! reported. Every constructor of [`Event`] ends in [`Event::assemble`].

use std::borrow::Cow;

use serde::de;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::codec::line_len;
use super::text::PayloadText;
use super::{Event, EventType, SurfaceOp, MAX_NESTING};
use crate::error::AppendError;
use crate::limits::MAX_EVENT_LINE_BYTES;
use crate::payload::{
    AssistantChunk, AssistantMessage, Block, ContextMessage, Message, Role, SessionSettings, Source,
    SteeringMessage, StepEnd, StepStart, ToolCall, ToolResult, TurnEnd, TurnStart, UserMessage,
};
use crate::shape;
use crate::tagged::Text;
use crate::unique_keys;

impl Event {
    /// The checks shared by [`Event::from_json`] and [`Event::from_parts`],
    /// up to rule 3: the parts [`Event::assemble`] takes, but `data`.
    pub(super) fn decode(
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

    /// The constructor of the typed paths: checks the payload, then the rules.
    pub(super) fn checked(
        seq: u64,
        time: u64,
        event_type: EventType,
        data: PayloadText,
        source_event_seqs: Option<Box<[u64]>>,
        surface_op: Option<SurfaceOp>,
    ) -> Result<Event, AppendError> {
        // The size first: a payload too large to write is not parsed.
        let len = line_len(seq, time, &event_type, &data, source_event_seqs.as_deref(), surface_op);
        check_line_len(Some(seq), len)?;
        check_payload(seq, &event_type, &data)?;
        // `assemble` without its size check: the size was checked above.
        check_metadata(seq, &event_type, source_event_seqs.as_deref(), surface_op)?;
        Ok(Event::from_fields(seq, time, event_type, data, source_event_seqs, surface_op))
    }

    /// Checks rules 1, 2 and 4 on an event whose payload was checked, and
    /// (again, as every path ends here) the size of its line.
    pub(super) fn assemble(
        seq: u64,
        time: u64,
        event_type: EventType,
        data: PayloadText,
        source_event_seqs: Option<Box<[u64]>>,
        surface_op: Option<SurfaceOp>,
    ) -> Result<Event, AppendError> {
        check_metadata(seq, &event_type, source_event_seqs.as_deref(), surface_op)?;
        let len = line_len(seq, time, &event_type, &data, source_event_seqs.as_deref(), surface_op);
        check_line_len(Some(seq), len)?;
        Ok(Event::from_fields(seq, time, event_type, data, source_event_seqs, surface_op))
    }
}

/// The one size rule of an event: its line is at most
/// [`MAX_EVENT_LINE_BYTES`] long.
pub(super) fn check_line_len(seq: Option<u64>, len: usize) -> Result<(), AppendError> {
    if len <= MAX_EVENT_LINE_BYTES {
        return Ok(());
    }
    Err(AppendError::EventTooLarge { seq, len: len as u64, limit: MAX_EVENT_LINE_BYTES as u64 })
}

/// Rules 1, 2 and 4: the surface metadata an event of `event_type` may,
/// must and does carry.
pub(super) fn check_metadata(
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

/// What [`Event::decode`] makes of an envelope: the type, provenance and
/// surface op, checked up to rule 3.
pub(super) type Envelope = (EventType, Option<Box<[u64]>>, Option<SurfaceOp>);

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

/// Checks a core payload's shape (section 1.2). Plugin data is opaque.
pub(super) fn check_payload(seq: u64, event_type: &EventType, text: &str) -> Result<(), AppendError> {
    // The common case, in one pass and without allocating: a chunk or a
    // message matched as the text serde writes, or a payload the strict
    // mirrors read whole, is valid, within the depth limit and names no
    // key twice (see `shape`), so nothing below has anything to find.
    let verdict = shape::check(event_type, text);
    if verdict == shape::Verdict::Complete {
        return Ok(());
    }
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
    // The owned types decide (and word the error) whenever the fast check
    // is not sure.
    if verdict == shape::Verdict::Unsure {
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
/// [`crate::payload`]: the reference [`shape::check`] must agree with.
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
