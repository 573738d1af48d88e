//! SQLite columns to rows and back. The column encodings and the decoding
//! of a row into an [`Event`](palimpsest_core_session::Event) are shared
//! with every SQL backend, in [`palimpsest_persistence::rows`]; what is
//! here reads SQLite's dynamically typed values.

use palimpsest_core_session::LoadError;
pub(crate) use palimpsest_persistence::rows::{
    checkpoint_ends_at, checkpoint_row, decode_into, decode_threads, from_sql_int, sources_json,
    surface_op_json, to_sql_int, EventRow, RowReader, RowRef,
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
pub(crate) fn required_text<'a>(
    value: ValueRef<'a>,
    column: &str,
    line: Option<u64>,
) -> Result<&'a str, LoadError> {
    text(value, column, line)?
        .ok_or_else(|| LoadError::LogCorrupt { line, detail: format!("column `{column}` is NULL") })
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
