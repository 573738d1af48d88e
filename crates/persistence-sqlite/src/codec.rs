//! Events to rows and back.
//!
//! A row is turned back into an [`Event`] through [`Event::from_parts`],
//! which runs exactly the checks `Event::from_json` runs on a JSONL line, so
//! a row edited behind the store's back is refused with the same contract
//! code, without rebuilding and re-reading a JSON line per row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use palimpsest_core_session::{AppendError, Event, EventType, LoadError, SurfaceOp};
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

/// One `events` row, its columns read and copied but not yet checked: the
/// copies become the event's own strings, so a row is copied once.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    pub(crate) seq: i64,
    pub(crate) time: i64,
    /// Parsed as it is read: a core type allocates nothing.
    pub(crate) event_type: EventType,
    pub(crate) data: String,
    pub(crate) source_event_seqs: Option<String>,
    pub(crate) surface_op: Option<String>,
}

impl EventRow {
    /// Reads the columns of `SELECT seq, time, type, data, source_event_seqs,
    /// surface_op`: `log-corrupt` at `line` for a column of the wrong type.
    pub(crate) fn read(row: &rusqlite::Row<'_>, line: u64) -> Result<EventRow, LoadError> {
        let event_type = EventType::parse(required_text(row.get_ref_unwrap(2), "type", line)?);
        Ok(EventRow {
            seq: required_int(row.get_ref_unwrap(0), "seq", line)?,
            time: required_int(row.get_ref_unwrap(1), "time", line)?,
            event_type,
            data: required_text(row.get_ref_unwrap(3), "data", line)?.to_owned(),
            source_event_seqs: text(row.get_ref_unwrap(4), "source_event_seqs", line)?.map(str::to_owned),
            surface_op: text(row.get_ref_unwrap(5), "surface_op", line)?.map(str::to_owned),
        })
    }

    /// Rebuilds the event at position `index` of its session, checking it as
    /// a JSONL line would be checked.
    pub(crate) fn decode(self, index: u64) -> Result<Event, LoadError> {
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
            self.event_type.as_str(),
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

/// Rows per batch handed to the decoding thread.
const BATCH_ROWS: usize = 1024;

/// Decodes rows into events while they are being read: `read` calls
/// `push` with each row in order (row `i` at position `i` of its session)
/// and stops early when `push` returns `false`, which it does once a row
/// failed to decode. With `threads` > 1, rows go in batches to one other
/// thread, which decodes them while `read` goes on: SQLite steps through
/// rows on one thread only, and on the benchmark workload reading a row
/// and decoding it take about as long, so a second decoder would wait.
/// The result is that of decoding the rows in order: the events, or the
/// first bad row's error with its position.
pub(crate) fn decode_while_reading<E>(
    threads: usize,
    read: impl FnOnce(&mut dyn FnMut(EventRow) -> bool) -> Result<(), E>,
) -> Result<Result<Vec<Event>, (u64, LoadError)>, E> {
    /// Decodes rows onto `events`; the first error stops it.
    fn decode_onto(
        events: &mut Vec<Event>,
        rows: impl IntoIterator<Item = EventRow>,
    ) -> Result<(), (u64, LoadError)> {
        for row in rows {
            let index = events.len() as u64;
            events.push(row.decode(index).map_err(|e| (index, e))?);
        }
        Ok(())
    }
    /// Decodes each row as it is read.
    fn inline<E>(
        read: impl FnOnce(&mut dyn FnMut(EventRow) -> bool) -> Result<(), E>,
    ) -> Result<Result<Vec<Event>, (u64, LoadError)>, E> {
        let (mut events, mut failed) = (Vec::new(), None);
        read(&mut |row| match decode_onto(&mut events, [row]) {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        Ok(failed.map_or(Ok(events), Err))
    }
    if threads <= 1 {
        return inline(read);
    }
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<Vec<EventRow>>(4);
        let decoder =
            std::thread::Builder::new().name("palimpsest-sqlite-decode".into()).spawn_scoped(scope, || {
                let mut events = Vec::new();
                for batch in rx {
                    if let Err(e) = decode_onto(&mut events, batch) {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
                Ok(events)
            });
        let decoder = match decoder {
            Ok(decoder) => decoder,
            Err(e) => {
                tracing::debug!(error = %e, "cannot start a decode thread; decoding as rows are read");
                return inline(read);
            }
        };
        let mut batch = Vec::with_capacity(BATCH_ROWS);
        let read = read(&mut |row| {
            batch.push(row);
            if batch.len() == BATCH_ROWS {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_ROWS));
                // A refused send means the decoder stopped: at a bad row.
                return tx.send(full).is_ok() && !failed.load(Ordering::Relaxed);
            }
            true
        });
        if read.is_ok() && !batch.is_empty() {
            // As above: if refused, the decoder already has its error.
            let _ = tx.send(batch);
        }
        drop(tx);
        let decoded = decoder.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read?;
        Ok(decoded)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(data: &str, sources: Option<&str>, op: Option<&str>) -> EventRow {
        EventRow {
            seq: 3,
            time: 7,
            event_type: EventType::parse("assistant/message"),
            data: data.to_owned(),
            source_event_seqs: sources.map(str::to_owned),
            surface_op: op.map(str::to_owned),
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

    /// Decodes `rows` as a load does, on `threads` threads; the error's
    /// position only.
    fn decoded(rows: &[EventRow], threads: usize) -> Result<Vec<Event>, u64> {
        let read = |push: &mut dyn FnMut(EventRow) -> bool| -> Result<(), ()> {
            for row in rows.iter().cloned() {
                if !push(row) {
                    break;
                }
            }
            Ok(())
        };
        decode_while_reading(threads, read).expect("reading cannot fail here").map_err(|e| e.0)
    }

    #[test]
    fn rows_decode_on_threads_exactly_as_in_order() {
        let plugin = |seq: i64| EventRow {
            seq,
            time: 1,
            event_type: EventType::parse("x/p"),
            data: format!("{{\"i\":{seq}}}"),
            source_event_seqs: None,
            surface_op: None,
        };
        // Enough rows for several batches on every thread.
        let n = BATCH_ROWS * 5 + 17;
        let good: Vec<EventRow> = (0..n as i64).map(plugin).collect();
        let expected = decoded(&good, 1).expect("valid rows");
        assert_eq!(expected.len(), n);
        for threads in 2..6 {
            assert_eq!(decoded(&good, threads), Ok(expected.clone()), "{threads} threads");
        }
        // One or two bad rows anywhere: the first by position is the error.
        for bad in [0, 7, BATCH_ROWS - 1, BATCH_ROWS, 3 * BATCH_ROWS + 5, n - 1] {
            for also in [None, Some(bad + BATCH_ROWS), Some(bad.saturating_sub(3))] {
                let mut rows = good.clone();
                rows[bad].data = "{".into();
                if let Some(also) = also.filter(|&a| a < rows.len()) {
                    rows[also].seq = -1;
                }
                let first = also.filter(|&a| a < n).map_or(bad, |a| a.min(bad)) as u64;
                assert_eq!(decoded(&rows, 1).map(drop), Err(first));
                for threads in 2..6 {
                    assert_eq!(decoded(&rows, threads).map(drop), Err(first), "{threads} threads, bad {bad}");
                }
            }
        }
        assert_eq!(decoded(&[], 3), Ok(Vec::new()));
    }

    #[test]
    fn a_read_error_is_returned_after_the_decoders_stop() {
        let rows = [row(MSG, None, Some("\"append\""))];
        for threads in [1, 3] {
            let read = |push: &mut dyn FnMut(EventRow) -> bool| {
                push(rows[0].clone());
                Err("disk gone")
            };
            assert_eq!(decode_while_reading(threads, read).map(drop), Err("disk gone"));
        }
    }

    #[test]
    fn odd_type_strings_and_huge_times_survive() {
        let mut r = row(r#"{"x":1}"#, None, None);
        r.event_type = EventType::parse("odd\"type\n");
        r.time = to_sql_int(u64::MAX);
        let e = r.decode(3).expect("a plugin event with an odd type");
        assert_eq!((e.event_type().as_str(), e.time()), ("odd\"type\n", u64::MAX));
    }
}
