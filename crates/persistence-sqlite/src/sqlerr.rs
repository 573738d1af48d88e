//! Turning SQLite errors into [`StoreError`]s with their stable codes.

use std::fmt;

use palimpsest_persistence::StoreError;
use rusqlite::ErrorCode;

/// Maps a SQLite error: busy or locked → `locked`, a corrupt page →
/// `corrupt`, a file that is not a database → `schema-mismatch`, anything
/// else → `io` (the SQLite error kept as the source).
pub(crate) fn sql_err(e: rusqlite::Error, location: &str, context: impl fmt::Display) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Locked { what: format!("{location} (while {context})") }
        }
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            location: location.to_owned(),
            detail: format!("{context}: {e}"),
            cause: None,
        },
        Some(ErrorCode::NotADatabase) => StoreError::SchemaMismatch {
            found: format!("{location}, which SQLite cannot read as a database ({e})"),
            expected: crate::schema::expected_store(crate::file::Purpose::Write),
        },
        _ => StoreError::Io { context: format!("{context} ({location})"), source: Box::new(e) },
    }
}

/// Whether a failed write may have left the medium in an unknown state, so
/// that the store must refuse further writes. Waiting for a lock changes
/// nothing on disk; every other failure of a write counts.
pub(crate) fn poisons(e: &rusqlite::Error) -> bool {
    !matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}
