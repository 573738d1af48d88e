//! Events to rows and back.
//!
//! A row is turned back into an [`Event`] through [`Event::from_parts`],
//! which runs exactly the checks `Event::from_json` runs on a JSONL line, so
//! a row edited behind the store's back is refused with the same contract
//! code, without rebuilding and re-reading a JSON line per row.

use palimpsest_core_session::{AppendError, Event, LoadError, SessionHeader, SurfaceOp};

/// The JSON text of a `surfaceOp`, exactly as the JSONL line holds it.
pub(crate) fn surface_op_json(op: SurfaceOp) -> String {
    match op {
        SurfaceOp::Append => "\"append\"".to_owned(),
        // Serializing integers and static strings cannot fail.
        replace => serde_json::to_string(&replace).unwrap_or_default(),
    }
}

/// The JSON text of a `sourceEventSeqs`, exactly as the JSONL line holds it
/// (`[]` stays `[]`).
pub(crate) fn sources_json(sources: &[u64]) -> String {
    serde_json::to_string(sources).unwrap_or_default()
}

/// A `u64` as the `bigint` PostgreSQL stores: the same bits. Every value
/// below 2^63 reads the same in SQL; larger ones (a `time` no clock
/// produces) show as negative in SQL and still round-trip exactly.
pub(crate) fn to_sql_int(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

/// The inverse of [`to_sql_int`].
pub(crate) fn from_sql_int(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

/// The 1-based line the event at `index` would occupy in the equivalent
/// JSONL file (the header is line 1), used in [`LoadError`]s.
pub(crate) fn line_of(index: u64) -> u64 {
    index + 2
}

/// The event columns of one row, for an `INSERT ... SELECT FROM unnest(...)`:
/// one array per column, so a batch is one statement.
#[derive(Debug, Default)]
pub(crate) struct Columns<'a> {
    pub(crate) seq: Vec<i64>,
    pub(crate) time: Vec<i64>,
    pub(crate) event_type: Vec<&'a str>,
    pub(crate) data: Vec<&'a str>,
    pub(crate) source_event_seqs: Vec<Option<String>>,
    pub(crate) surface_op: Vec<Option<String>>,
}

impl<'a> Columns<'a> {
    pub(crate) fn of(events: &'a [Event]) -> Columns<'a> {
        let mut c = Columns::default();
        for e in events {
            c.seq.push(to_sql_int(e.seq()));
            c.time.push(to_sql_int(e.time()));
            c.event_type.push(e.event_type().as_str());
            c.data.push(e.data());
            c.source_event_seqs.push(e.source_event_seqs().map(sources_json));
            c.surface_op.push(e.surface_op().map(surface_op_json));
        }
        c
    }
}

/// Why a value cannot be stored in PostgreSQL `text`: it holds NUL
/// (U+0000), which `text` cannot hold. JSON text never does (it escapes
/// it as `\u0000`), but ids, header fields and event types are plain
/// strings.
pub(crate) fn nul_free(what: &str, value: &str) -> Result<(), String> {
    if value.contains('\0') {
        Err(format!("{what} holds NUL (U+0000), which PostgreSQL text cannot store"))
    } else {
        Ok(())
    }
}

/// The header fields PostgreSQL cannot store, if any.
pub(crate) fn header_storable(header: &SessionHeader) -> Result<(), String> {
    nul_free("cwd", header.cwd.as_deref().unwrap_or(""))?;
    nul_free("parentSession", header.parent_session.as_deref().unwrap_or(""))
}

/// One `events` row, its columns read but not yet checked.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) time: i64,
    pub(crate) event_type: String,
    pub(crate) data: String,
    pub(crate) source_event_seqs: Option<String>,
    pub(crate) surface_op: Option<String>,
}

impl EventRow {
    /// Reads the columns of `SELECT seq, time, type, data,
    /// source_event_seqs, surface_op` (the schema check made sure of their
    /// types): `log-corrupt` at `line` for a value that cannot be read.
    pub(crate) fn read(row: &postgres::Row, line: u64) -> Result<EventRow, LoadError> {
        let corrupt = |e: postgres::Error| LoadError::LogCorrupt { line, detail: e.to_string() };
        Ok(EventRow {
            seq: row.try_get(0).map_err(corrupt)?,
            time: row.try_get(1).map_err(corrupt)?,
            event_type: row.try_get(2).map_err(corrupt)?,
            data: row.try_get(3).map_err(corrupt)?,
            source_event_seqs: row.try_get(4).map_err(corrupt)?,
            surface_op: row.try_get(5).map_err(corrupt)?,
        })
    }

    /// Rebuilds the event at position `index` of its session, checking it as
    /// a JSONL line would be checked.
    pub(crate) fn decode(self, index: u64) -> Result<Event, LoadError> {
        let at = line_of(index);
        if self.seq < 0 {
            return Err(LoadError::LogCorrupt { line: at, detail: format!("negative seq {}", self.seq) });
        }
        let seq = from_sql_int(self.seq);
        if seq != index {
            return Err(LoadError::Rule {
                line: at,
                error: AppendError::SeqNotContiguous { seq, expected: index },
            });
        }
        // Each column must hold exactly one JSON value, as written: from_parts
        // refuses trailing text; whitespace around `data` would not survive a
        // round trip byte for byte.
        let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let padded = self.data.as_bytes().first().is_some_and(json_space)
            || self.data.as_bytes().last().is_some_and(json_space);
        let (has_sources, has_op) = (self.source_event_seqs.is_some(), self.surface_op.is_some());
        let event = Event::from_parts(
            seq,
            from_sql_int(self.time),
            &self.event_type,
            self.data,
            self.source_event_seqs.as_deref(),
            self.surface_op.as_deref(),
        )
        .map_err(|error| LoadError::Rule { line: at, error })?;
        let malformed = |detail: &str| LoadError::Rule {
            line: at,
            error: AppendError::EventMalformed { seq: Some(seq), detail: detail.to_owned() },
        };
        if padded {
            return Err(malformed("column `data` does not hold exactly one JSON value"));
        }
        if event.source_event_seqs().is_some() != has_sources {
            return Err(malformed("column `source_event_seqs` does not match the event read back"));
        }
        if event.surface_op().is_some() != has_op {
            return Err(malformed("column `surface_op` does not match the event read back"));
        }
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;

    fn row(data: &str, sources: Option<&str>, op: Option<&str>) -> EventRow {
        EventRow {
            seq: 3,
            time: 7,
            event_type: "assistant/message".into(),
            data: data.to_owned(),
            source_event_seqs: sources.map(str::to_owned),
            surface_op: op.map(str::to_owned),
        }
    }

    #[test]
    fn a_row_decodes_to_the_event_whose_columns_it_holds() {
        let e = row(MSG, Some("[]"), Some("\"append\"")).decode(3).map_err(|e| e.to_string());
        let e = e.expect("valid row");
        assert_eq!((e.seq(), e.time(), e.data()), (3, 7, MSG));
        assert_eq!(e.source_event_seqs(), Some(&[][..]));
        assert_eq!(e.surface_op(), Some(SurfaceOp::Append));
        let cols = Columns::of(std::slice::from_ref(&e));
        assert_eq!(cols.source_event_seqs, vec![Some("[]".to_owned())]);
        assert_eq!(cols.surface_op, vec![Some("\"append\"".to_owned())]);
    }

    #[test]
    fn smuggled_keys_padding_and_wrong_positions_are_refused() {
        let smuggled = format!("{MSG},\"sourceEventSeqs\":[1]");
        let err = row(&smuggled, None, Some("\"append\"")).decode(3).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
        let err = row(&format!(" {MSG}"), None, Some("\"append\"")).decode(3).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
        let err = row(MSG, None, Some("\"append\"")).decode(2).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("seq-not-contiguous"));
        let mut negative = row(MSG, None, Some("\"append\""));
        negative.seq = -1;
        assert_eq!(negative.decode(0).map(drop).as_ref().map_err(LoadError::code), Err("log-corrupt"));
    }

    #[test]
    fn integers_round_trip_and_nul_is_named() {
        for v in [0, 1, i64::MAX as u64, u64::MAX] {
            assert_eq!(from_sql_int(to_sql_int(v)), v);
        }
        assert!(nul_free("id", "a\0b").is_err());
        assert!(nul_free("id", "a\\u0000b").is_ok());
        let h = SessionHeader { cwd: Some("/a\0".into()), ..SessionHeader::new("s", 1) };
        assert!(header_storable(&h).is_err());
    }
}
