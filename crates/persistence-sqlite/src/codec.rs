//! SQLite columns to rows and back. The column encodings and the decoding
//! of a row into an [`Event`](palimpsest_core_session::Event) are shared
//! with every SQL backend, in [`palimpsest_persistence::rows`]; what is
//! here reads SQLite's dynamically typed values.

use palimpsest_core_session::LoadError;
pub(crate) use palimpsest_persistence::rows::{
    checkpoint_ends_at, checkpoint_row, decode_bytes_into_with, decode_threads, from_sql_int, not_utf8,
    sources_json, surface_op_json, to_sql_int, EventRow, RowBytes, RowReader, RowRef,
};
use rusqlite::types::ValueRef;

/// Column `index` of `row`, named `column`: `log-corrupt` at `line` if the
/// row has no such column (a statement out of step with the schema check),
/// never a panic.
pub(crate) fn value<'a>(
    row: &'a rusqlite::Row<'_>,
    index: usize,
    column: &str,
    line: Option<u64>,
) -> Result<ValueRef<'a>, LoadError> {
    row.get_ref(index)
        .map_err(|e| LoadError::LogCorrupt { line, detail: format!("column `{column}` cannot be read: {e}") })
}

/// Reads a TEXT column; `None` for NULL. Anything else (a BLOB, a number,
/// invalid UTF-8) is `log-corrupt` at `line`.
pub(crate) fn text<'a>(
    value: ValueRef<'a>,
    column: &str,
    line: Option<u64>,
) -> Result<Option<&'a str>, LoadError> {
    let at_line = |e: LoadError| match e {
        LoadError::LogCorrupt { detail, .. } => LoadError::LogCorrupt { line, detail },
        other => other,
    };
    let bytes = text_bytes(value, column).map_err(at_line)?;
    bytes.map(|b| std::str::from_utf8(b).map_err(|e| at_line(not_utf8(column, e)))).transpose()
}

/// [`text`] without the UTF-8 check: the bytes of a TEXT column.
fn text_bytes<'a>(value: ValueRef<'a>, column: &str) -> Result<Option<&'a [u8]>, LoadError> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => Ok(Some(bytes)),
        other => Err(LoadError::LogCorrupt {
            line: None,
            detail: format!("column `{column}` holds {:?}, not TEXT", other.data_type()),
        }),
    }
}

/// `log-corrupt` at `line` for a NULL where column `column` may not be.
fn null(column: &str, line: Option<u64>) -> LoadError {
    LoadError::LogCorrupt { line, detail: format!("column `{column}` is NULL") }
}

/// Reads a TEXT column that may not be NULL.
pub(crate) fn required_text<'a>(
    value: ValueRef<'a>,
    column: &str,
    line: Option<u64>,
) -> Result<&'a str, LoadError> {
    text(value, column, line)?.ok_or_else(|| null(column, line))
}

/// Reads an INTEGER column that may not be NULL.
pub(crate) fn required_int(value: ValueRef<'_>, column: &str, line: Option<u64>) -> Result<i64, LoadError> {
    match value {
        ValueRef::Integer(v) => Ok(v),
        other => Err(LoadError::LogCorrupt {
            line,
            detail: format!("column `{column}` holds {:?}, not INTEGER", other.data_type()),
        }),
    }
}

/// Reads an INTEGER column that may be NULL.
pub(crate) fn optional_int(
    value: ValueRef<'_>,
    column: &str,
    line: Option<u64>,
) -> Result<Option<i64>, LoadError> {
    match value {
        ValueRef::Null => Ok(None),
        other => required_int(other, column, line).map(Some),
    }
}

/// Reads the columns of `SELECT seq, time, type, data, source_event_seqs,
/// surface_op`: `log-corrupt` at `line` for a column of the wrong type.
pub(crate) fn read_row(row: &rusqlite::Row<'_>, line: Option<u64>) -> Result<EventRow, LoadError> {
    read_row_ref(row, line).map(|r| r.to_row())
}

/// [`read_row`] without copying: the texts borrowed from `row`.
pub(crate) fn read_row_ref<'a>(
    row: &'a rusqlite::Row<'_>,
    line: Option<u64>,
) -> Result<RowRef<'a>, LoadError> {
    Ok(RowRef {
        seq: required_int(value(row, 0, "seq", line)?, "seq", line)?,
        time: required_int(value(row, 1, "time", line)?, "time", line)?,
        event_type: required_text(value(row, 2, "type", line)?, "type", line)?,
        data: required_text(value(row, 3, "data", line)?, "data", line)?,
        source_event_seqs: text(value(row, 4, "source_event_seqs", line)?, "source_event_seqs", line)?,
        surface_op: text(value(row, 5, "surface_op", line)?, "surface_op", line)?,
    })
}

/// [`read_row_ref`] without the UTF-8 check, which [`decode_bytes_into_with`]
/// makes a batch at a time. A row refused here is refused with
/// [`read_row_ref`]'s error, so the first bad column in column order is
/// named, UTF-8 or not, as before.
pub(crate) fn read_row_bytes<'a>(row: &'a rusqlite::Row<'_>) -> Result<RowBytes<'a>, LoadError> {
    let read = || -> Result<RowBytes<'a>, LoadError> {
        let required = |column: &str, bytes: Option<&'a [u8]>| bytes.ok_or_else(|| null(column, None));
        Ok(RowBytes {
            seq: required_int(value(row, 0, "seq", None)?, "seq", None)?,
            time: required_int(value(row, 1, "time", None)?, "time", None)?,
            event_type: required("type", text_bytes(value(row, 2, "type", None)?, "type")?)?,
            data: required("data", text_bytes(value(row, 3, "data", None)?, "data")?)?,
            source_event_seqs: text_bytes(value(row, 4, "source_event_seqs", None)?, "source_event_seqs")?,
            surface_op: text_bytes(value(row, 5, "surface_op", None)?, "surface_op")?,
        })
    };
    read().map_err(|e| read_row_ref(row, None).err().unwrap_or(e))
}
