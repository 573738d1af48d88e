//! Turning PostgreSQL client errors into [`StoreError`]s with their stable
//! codes, and telling a lost connection from a refused statement.

use std::fmt;

use palimpsest_persistence::StoreError;
use tokio_postgres::error::SqlState;

/// Whether `e` means the connection is gone (closed, reset, the server
/// process terminated): every later statement on it fails, and an open
/// transaction was rolled back by the server unless its `COMMIT` was
/// already sent. Any other error is the server refusing one statement,
/// which rolls back the transaction and leaves the connection usable.
pub(crate) fn is_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // connection_exception (08...), and operator_intervention 57P01
        // admin_shutdown (pg_terminate_backend), 57P02 crash_shutdown,
        // 57P03 cannot_connect_now.
        Some(code) => code.code().starts_with("08") || code.code().starts_with("57P"),
        // Not a server error: I/O, TLS or protocol trouble on the socket.
        None => e.as_db_error().is_none(),
    }
}

/// Whether the server refused a statement because it waited too long for
/// a lock (`lock_timeout`), found a deadlock or could not serialize: a
/// transient refusal, nothing written.
pub(crate) fn is_lock_refusal(e: &tokio_postgres::Error) -> bool {
    let code = e.code();
    code == Some(&SqlState::LOCK_NOT_AVAILABLE)
        || code == Some(&SqlState::T_R_DEADLOCK_DETECTED)
        || code == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
}

/// Maps a client error: a lock refusal → `locked` (naming `what`), anything
/// else → `io` with the client error kept as the source. `location` is the
/// redacted connection string.
pub(crate) fn pg_err(
    e: tokio_postgres::Error,
    location: &str,
    what: &str,
    context: impl fmt::Display,
) -> StoreError {
    if is_lock_refusal(&e) {
        let reason = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
        return StoreError::Locked { what: format!("{what} at {location} (while {context}: {reason})") };
    }
    let hint = match e.code() {
        // A role's or database's `statement_timeout` ends a long read (a
        // session of a million events) as surely as a stuck one.
        Some(code)
            if *code == SqlState::QUERY_CANCELED
                && e.as_db_error().is_some_and(|d| d.message().contains("statement timeout")) =>
        {
            "; the server's statement_timeout ended it: raise it for this role, or add \
             options=-cstatement_timeout%3D0 to the URL"
        }
        _ => "",
    };
    StoreError::Io { context: format!("{context} ({location}){hint}"), source: Box::new(e) }
}

/// Whether the server refused a row for a constraint (SQLSTATE class 23:
/// unique, check, foreign key, not null, exclusion).
pub(crate) fn is_constraint(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("23"))
}

/// An `io` error for a refusal decided before anything was sent: bad
/// options, a value PostgreSQL cannot hold.
pub(crate) fn invalid_input(context: impl Into<String>, why: impl Into<String>) -> StoreError {
    StoreError::Io {
        context: context.into(),
        source: Box::new(std::io::Error::new(std::io::ErrorKind::InvalidInput, why.into())),
    }
}
