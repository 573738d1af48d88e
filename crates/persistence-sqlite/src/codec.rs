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
    // Every row of a load passes here, on the thread that steps through
    // them, which is the load's slower one: the columns are read as
    // their types are expected, with nothing to carry but `None`, and
    // only a row that is not what it should be goes through the checks
    // that name what is wrong with it.
    let expected = || -> Option<RowBytes<'a>> {
        let int = |index| match row.get_ref(index).ok()? {
            ValueRef::Integer(v) => Some(v),
            _ => None,
        };
        let text = |index| match row.get_ref(index).ok()? {
            ValueRef::Text(bytes) => Some(Some(bytes)),
            ValueRef::Null => Some(None),
            _ => None,
        };
        Some(RowBytes {
            seq: int(0)?,
            time: int(1)?,
            event_type: text(2)??,
            data: text(3)??,
            source_event_seqs: text(4)?,
            surface_op: text(5)?,
        })
    };
    if let Some(row) = expected() {
        return Ok(row);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_row_bytes` of the one row `select` gives: its columns as
    /// (seq, time, type, data, sources, op), or the error's detail.
    #[allow(clippy::type_complexity)]
    fn read(select: &str) -> Result<(i64, i64, Vec<u8>, Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>), String> {
        let conn = rusqlite::Connection::open_in_memory().expect("in-memory database");
        let mut stmt = conn.prepare(select).expect("statement");
        let mut rows = stmt.query([]).expect("query");
        let row = rows.next().expect("step").expect("one row");
        read_row_bytes(row)
            .map(|r| {
                let owned = |b: &[u8]| b.to_vec();
                (
                    r.seq,
                    r.time,
                    owned(r.event_type),
                    owned(r.data),
                    r.source_event_seqs.map(owned),
                    r.surface_op.map(owned),
                )
            })
            .map_err(|e| e.detail().to_owned())
    }

    #[test]
    fn a_row_of_the_expected_types_is_read_as_it_is() {
        assert_eq!(
            read("SELECT 3, 7, 'x/p', '{}', NULL, '\"append\"'"),
            Ok((3, 7, b"x/p".to_vec(), b"{}".to_vec(), None, Some(b"\"append\"".to_vec())))
        );
        // Not UTF-8: read as bytes, checked a batch at a time later.
        assert_eq!(
            read("SELECT 3, 7, 'x/p', CAST(x'7bff7d' AS TEXT), NULL, NULL").map(|r| r.3),
            Ok(b"{\xff}".to_vec())
        );
    }

    #[test]
    fn a_row_of_other_types_names_its_first_bad_column() {
        for (select, detail) in [
            ("SELECT 'a', 7, 'x/p', '{}', NULL, NULL", "column `seq` holds Text, not INTEGER"),
            ("SELECT 3, NULL, 'x/p', '{}', NULL, NULL", "column `time` holds Null, not INTEGER"),
            ("SELECT 3, 7, x'00', '{}', NULL, NULL", "column `type` holds Blob, not TEXT"),
            ("SELECT 3, 7, 'x/p', NULL, NULL, NULL", "column `data` is NULL"),
            ("SELECT 3, 7, 'x/p', '{}', 1.5, NULL", "column `source_event_seqs` holds Real, not TEXT"),
            ("SELECT 3, 7, 'x/p', '{}', NULL, 2", "column `surface_op` holds Integer, not TEXT"),
            // The first bad column in column order, UTF-8 included.
            ("SELECT 3, 7, CAST(x'ff' AS TEXT), NULL, NULL, NULL", "column `type` is not UTF-8"),
        ] {
            let err = read(select).expect_err(select);
            assert!(err.starts_with(detail), "{select}: {err}");
        }
        // Too few columns: an error, not a panic.
        assert!(read("SELECT 3, 7, 'x/p', '{}', NULL").expect_err("five columns").contains("surface_op"));
    }
}
