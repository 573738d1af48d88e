//! Turning SQLite errors into [`StoreError`]s with their stable codes.

use std::fmt;

use palimpsest_persistence::StoreError;
use rusqlite::ErrorCode;

/// Maps a SQLite error: busy or locked → `locked`, a corrupt page →
/// `corrupt`, a file that is not a database → `schema-mismatch`, a
/// constraint that refused a row (`SQLITE_CONSTRAINT_*`) → `schema-mismatch`,
/// anything else → `io` (the SQLite error kept as the source).
///
/// A constraint failure is a refusal, decided before anything is written:
/// SQLite undoes the failing statement, and every write runs in a
/// transaction that is rolled back when it fails, so nothing of it reaches
/// the file ([`StoreError::wrote_nothing`] holds). The rows this build
/// writes keep every constraint of its own schema (a session id that is
/// taken is `already-exists`, a batch's seqs continue the stored ones), so the one
/// that refused is a constraint this build's schema does not make, or rows
/// it would not have left (an event row of no session, say).
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
        Some(ErrorCode::ConstraintViolation) => StoreError::SchemaMismatch {
            found: format!(
                "{location}, which refused a row while {context} ({e}): a constraint or rows \
                 this build's schema does not have; the transaction was rolled back, nothing was written"
            ),
            expected: format!(
                "a store of schema version {} that takes every row this build writes",
                crate::schema::SCHEMA_VERSION
            ),
        },
        _ => StoreError::Io { context: format!("{context} ({location})"), source: Box::new(e) },
    }
}

/// Whether a failed write may have left the medium in an unknown state, so
/// that the store must refuse further writes. Waiting for a lock changes
/// nothing on disk, nor does a constraint's refusal (rolled back, see
/// [`sql_err`]); every other failure of a write counts.
pub(crate) fn poisons(e: &rusqlite::Error) -> bool {
    !matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked | ErrorCode::ConstraintViolation)
    )
}
