//! Events to rows and back.
//!
//! A row is turned back into an [`Event`] through [`Event::from_parts`],
//! which runs exactly the checks `Event::from_json` runs on a JSONL line, so
//! a row edited behind the store's back is refused with the same contract
//! code, without rebuilding and re-reading a JSON line per row.

use palimpsest_core_session::{AppendError, Event, LoadError, SurfaceOp};
use rusqlite::types::ValueRef;

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

/// A `u64` as the `i64` SQLite stores: the same bits. Every value below 2^63
/// reads the same in SQL; larger ones (a `time` no clock produces) show as
/// negative in SQL and still round-trip exactly.
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

/// Reads a TEXT column; `None` for NULL. Anything else (a BLOB, a number,
/// invalid UTF-8) is `log-corrupt` at `line`.
pub(crate) fn text<'a>(value: ValueRef<'a>, column: &str, line: u64) -> Result<Option<&'a str>, LoadError> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).map(Some).map_err(|e| LoadError::LogCorrupt {
            line,
            detail: format!("column `{column}` is not UTF-8: {e}"),
        }),
        other => Err(LoadError::LogCorrupt {
            line,
            detail: format!("column `{column}` holds {:?}, not TEXT", other.data_type()),
        }),
    }
}

/// Reads a TEXT column that may not be NULL.
pub(crate) fn required_text<'a>(value: ValueRef<'a>, column: &str, line: u64) -> Result<&'a str, LoadError> {
    text(value, column, line)?
        .ok_or_else(|| LoadError::LogCorrupt { line, detail: format!("column `{column}` is NULL") })
}

/// Reads an INTEGER column that may not be NULL.
pub(crate) fn required_int(value: ValueRef<'_>, column: &str, line: u64) -> Result<i64, LoadError> {
    match value {
        ValueRef::Integer(v) => Ok(v),
        other => Err(LoadError::LogCorrupt {
            line,
            detail: format!("column `{column}` holds {:?}, not INTEGER", other.data_type()),
        }),
    }
}

/// Reads an INTEGER column that may be NULL.
pub(crate) fn optional_int(value: ValueRef<'_>, column: &str, line: u64) -> Result<Option<i64>, LoadError> {
    match value {
        ValueRef::Null => Ok(None),
        other => required_int(other, column, line).map(Some),
    }
}

/// One `events` row, its columns read but not yet checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventRow<'a> {
    pub(crate) seq: i64,
    pub(crate) time: i64,
    pub(crate) event_type: &'a str,
    pub(crate) data: &'a str,
    pub(crate) source_event_seqs: Option<&'a str>,
    pub(crate) surface_op: Option<&'a str>,
}

impl EventRow<'_> {
    /// Rebuilds the event at position `index` of its session, checking it as
    /// a JSONL line would be checked.
    pub(crate) fn decode(&self, index: u64) -> Result<Event, LoadError> {
        let at = line_of(index);
        let seq = from_sql_int(self.seq);
        if self.seq < 0 {
            return Err(LoadError::LogCorrupt { line: at, detail: format!("negative seq {}", self.seq) });
        }
        if seq != index {
            return Err(LoadError::Rule {
                line: at,
                error: AppendError::SeqNotContiguous { seq, expected: index },
            });
        }
        let event = Event::from_parts(
            seq,
            from_sql_int(self.time),
            self.event_type,
            self.data,
            self.source_event_seqs,
            self.surface_op,
        )
        .map_err(|error| LoadError::Rule { line: at, error })?;
        // Each column must hold exactly one JSON value, as written: from_parts
        // refuses trailing text; whitespace around `data` would not survive a
        // round trip byte for byte.
        let malformed = |detail: &str| LoadError::Rule {
            line: at,
            error: AppendError::EventMalformed { seq: Some(seq), detail: detail.to_owned() },
        };
        let json_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
        if self.data.trim_matches(json_space) != self.data {
            return Err(malformed("column `data` does not hold exactly one JSON value"));
        }
        if event.source_event_seqs().is_some() != self.source_event_seqs.is_some() {
            return Err(malformed("column `source_event_seqs` does not match the event read back"));
        }
        if event.surface_op().is_some() != self.surface_op.is_some() {
            return Err(malformed("column `surface_op` does not match the event read back"));
        }
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(data: &'a str, sources: Option<&'a str>, op: Option<&'a str>) -> EventRow<'a> {
        EventRow {
            seq: 3,
            time: 7,
            event_type: "assistant/message",
            data,
            source_event_seqs: sources,
            surface_op: op,
        }
    }

    const MSG: &str = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;

    #[test]
    fn a_row_decodes_to_the_event_whose_columns_it_holds() {
        let e = row(MSG, Some("[]"), Some("\"append\"")).decode(3).map_err(|e| e.to_string());
        let e = e.expect("valid row");
        assert_eq!(e.seq(), 3);
        assert_eq!(e.time(), 7);
        assert_eq!(e.data(), MSG);
        assert_eq!(e.source_event_seqs(), Some(&[][..]));
        assert_eq!(e.surface_op(), Some(SurfaceOp::Append));
        assert_eq!(surface_op_json(e.surface_op().unwrap_or(SurfaceOp::Append)), "\"append\"");
        assert_eq!(sources_json(&[]), "[]");
    }

    #[test]
    fn json_smuggled_through_one_column_into_another_key_is_refused() {
        let smuggled = format!("{MSG},\"sourceEventSeqs\":[1]");
        let err = row(&smuggled, None, Some("\"append\"")).decode(3).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
        let err = row(MSG, Some("[1],\"surfaceOp\":\"append\""), None).decode(3).map(drop);
        // Without the smuggled op the event would lack its surfaceOp (rule 1);
        // with it, the surface_op column (NULL) does not match.
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
    }

    #[test]
    fn whitespace_around_data_is_refused_as_it_would_not_round_trip() {
        for padded in [format!(" {MSG}"), format!("{MSG}\n"), format!("\t{MSG}\r")] {
            let err = row(&padded, None, Some("\"append\"")).decode(3).map(drop);
            assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"), "{padded:?}");
        }
        // Inside the value it is part of the payload, and kept.
        let inner = MSG.replace("\"turn\":1", "\"turn\": 1");
        let e = row(&inner, None, Some("\"append\"")).decode(3).map_err(|e| e.to_string());
        assert_eq!(e.expect("valid row").data(), inner);
    }

    #[test]
    fn a_seq_other_than_the_position_is_not_contiguous() {
        let err = row(MSG, None, Some("\"append\"")).decode(2).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("seq-not-contiguous"));
        assert_eq!(err.err().and_then(|e| e.line()), Some(4));
    }

    #[test]
    fn integers_round_trip_through_their_sql_form() {
        for v in [0, 1, 1_700_000_000_000, i64::MAX as u64, u64::MAX] {
            assert_eq!(from_sql_int(to_sql_int(v)), v);
        }
        assert_eq!(to_sql_int(42), 42);
    }

    #[test]
    fn odd_type_strings_and_huge_times_survive() {
        let mut r = row(r#"{"x":1}"#, None, None);
        r.event_type = "odd\"type\n";
        r.time = to_sql_int(u64::MAX);
        let e = r.decode(3).expect("a plugin event with an odd type");
        assert_eq!((e.event_type().as_str(), e.time()), ("odd\"type\n", u64::MAX));
    }
}
