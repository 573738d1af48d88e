//! PostgreSQL columns to rows and back. The column encodings and the
//! decoding of a row into an [`Event`] are shared with every SQL backend,
//! in [`palimpsest_persistence::rows`]; what is here is PostgreSQL's own:
//! one array per column for a batch insert, and the NUL that `text` cannot
//! hold.

use palimpsest_core_session::{Event, LoadError, SessionHeader};
pub(crate) use palimpsest_persistence::rows::{
    checkpoint_ends_at, checkpoint_row, decode_into, from_sql_int, not_utf8, sources_json, surface_op_json,
    to_sql_int, EventRow, RowReader, RowRef,
};

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

/// Reads the columns of `SELECT seq, time, type, data, source_event_seqs,
/// surface_op` (the schema check made sure of their types): `log-corrupt`
/// at `line` for a value that cannot be read.
pub(crate) fn read_row(row: &tokio_postgres::Row, line: Option<u64>) -> Result<EventRow, LoadError> {
    read_row_ref(row, line).map(|r| r.to_row())
}

/// [`read_row`] without copying: the texts borrowed from `row`.
pub(crate) fn read_row_ref(row: &tokio_postgres::Row, line: Option<u64>) -> Result<RowRef<'_>, LoadError> {
    let corrupt = |e: tokio_postgres::Error| LoadError::LogCorrupt { line, detail: e.to_string() };
    Ok(RowRef {
        seq: row.try_get(0).map_err(corrupt)?,
        time: row.try_get(1).map_err(corrupt)?,
        event_type: row.try_get(2).map_err(corrupt)?,
        data: row.try_get(3).map_err(corrupt)?,
        source_event_seqs: row.try_get(4).map_err(corrupt)?,
        surface_op: row.try_get(5).map_err(corrupt)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_hold_the_shared_json_texts() {
        let data = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;
        let line = format!(
            r#"{{"seq":3,"time":7,"type":"assistant/message","data":{data},"sourceEventSeqs":[],"surfaceOp":"append"}}"#
        );
        let e = Event::from_json(&line).expect("a valid event");
        let cols = Columns::of(std::slice::from_ref(&e));
        assert_eq!((cols.seq, cols.time), (vec![3], vec![7]));
        assert_eq!((cols.event_type, cols.data), (vec!["assistant/message"], vec![data]));
        assert_eq!(cols.source_event_seqs, vec![Some("[]".to_owned())]);
        assert_eq!(cols.surface_op, vec![Some("\"append\"".to_owned())]);
    }

    #[test]
    fn nul_is_named() {
        assert!(nul_free("id", "a\0b").is_err());
        assert!(nul_free("id", "a\\u0000b").is_ok());
        let h = SessionHeader { cwd: Some("/a\0".into()), ..SessionHeader::new("s", 1) };
        assert!(header_storable(&h).is_err());
    }
}
