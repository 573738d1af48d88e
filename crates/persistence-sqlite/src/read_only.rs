//! Opening a store for reading only: never a write, never a new file, and a
//! clean store in a directory the reader cannot write can still be read.
//!
//! In WAL mode a SQLite reader needs the `-wal` file and its `-shm` index.
//! A read-only connection (`mode=ro`) creates both when they are missing and
//! the directory is writable, and leaves them behind (deleting them takes a
//! write lock it cannot hold); when the directory is not writable it fails
//! with `SQLITE_READONLY_DIRECTORY`. So the mode is chosen from what stands
//! beside the database ([`choose`]):
//!
//! * no `-wal`, or an empty one with no `-shm` (a store closed cleanly,
//!   or never written in WAL mode): nothing is pending anywhere, the file
//!   alone is the database. [`ReadMode::Immutable`] (`immutable=1`) reads
//!   it with no lock and no side file. SQLite trusts the file not to change
//!   meanwhile, so the store checks that it did not: a [`FileStamp`] of the
//!   three files is taken before and compared after every read, and a read
//!   that saw a change is thrown away and done again through a new
//!   connection, chosen afresh (a writer that came along left a `-wal`, so
//!   the retry is [`ReadMode::Shared`]).
//! * otherwise (a writer is at work, or crashed, or the `-wal` holds
//!   commits not yet copied into the database): [`ReadMode::Shared`]
//!   (`mode=ro`), SQLite's own read-only mode, which takes its read lock
//!   in the existing `-shm` and reads the `-wal`. It creates nothing, except
//!   a `-shm` when a `-wal` holds data and its `-shm` is missing (copied
//!   without it, or a crash between the two deletions): SQLite cannot read
//!   the `-wal` without that index. Where the directory is not writable
//!   either, the open fails and says so.
//!
//! A database in rollback-journal mode (not WAL) is read in `Shared` mode:
//! its readers create nothing.

use std::fs::Metadata;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use palimpsest_persistence::StoreError;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::file::{self, Found, Purpose};
use crate::schema;
use crate::sqlerr::sql_err;
use crate::SqliteOptions;

/// How many times a read is tried again when the file changed under an
/// [`ReadMode::Immutable`] connection.
pub(crate) const ATTEMPTS: usize = 4;

/// How a store opened with
/// [`SqliteStore::open_read_only`](crate::SqliteStore::open_read_only) reads
/// its file (see [`SqliteStore::read_mode`](crate::SqliteStore::read_mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// SQLite's read-only mode (`mode=ro`): its usual locks, through the
    /// `-wal` and `-shm` files that already stand beside the database.
    /// Chosen whenever a `-wal` holds data or a `-shm` is there.
    Shared,
    /// `immutable=1`: no lock and no side file; the database file is the
    /// whole store. Chosen when no `-wal` holds anything. Every read is
    /// checked afterwards against a change of the files, and done again
    /// through a new connection if one happened.
    Immutable,
}

/// What the three files of a database looked like: size, modification and
/// change times and identity of the database, its `-wal` and its `-shm`
/// (`None` for a missing one). Two equal stamps taken around a read mean
/// that no writer touched the files in between (up to the resolution of
/// the file system's clock: see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStamp([Option<Meta>; 3]);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    len: u64,
    modified: Option<SystemTime>,
    /// Device, inode, change time (seconds, nanoseconds).
    #[cfg(unix)]
    identity: (u64, u64, i64, i64),
}

impl Meta {
    fn of(m: &Metadata) -> Meta {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt as _;
        Meta {
            len: m.len(),
            modified: m.modified().ok(),
            #[cfg(unix)]
            identity: (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()),
        }
    }
}

impl FileStamp {
    /// Stamps the database at `path` and its side files now.
    pub(crate) fn take(path: &Path) -> FileStamp {
        let meta = |p: &Path| std::fs::metadata(p).ok().map(|m| Meta::of(&m));
        FileStamp([meta(path), meta(&file::sidecar(path, "-wal")), meta(&file::sidecar(path, "-shm"))])
    }
}

/// The mode a reader of the WAL-mode (`wal`) database at `path` needs: see
/// the module docs.
pub(crate) fn choose(path: &Path, wal: bool) -> ReadMode {
    if !wal {
        return ReadMode::Shared;
    }
    let wal_len = std::fs::metadata(file::sidecar(path, "-wal")).map(|m| m.len());
    let shm = std::fs::symlink_metadata(file::sidecar(path, "-shm")).is_ok();
    match wal_len {
        Err(_) => ReadMode::Immutable,
        Ok(0) if !shm => ReadMode::Immutable,
        Ok(_) => ReadMode::Shared,
    }
}

/// A read-only connection, checked against the schema.
#[derive(Debug)]
pub(crate) struct Reader {
    /// The connection.
    pub(crate) conn: Connection,
    /// How it reads.
    pub(crate) mode: ReadMode,
    /// For [`ReadMode::Immutable`]: the files as they were before the
    /// first read; every later read must find them the same.
    pub(crate) stamp: Option<FileStamp>,
}

/// The `file:` URI SQLite opens for `mode`: the absolute path,
/// percent-encoded but for unreserved characters and `/`.
fn uri(path: &Path, mode: ReadMode) -> io::Result<String> {
    let absolute = std::path::absolute(path)?;
    let mut uri = String::from("file://");
    for &b in absolute.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str(match mode {
        ReadMode::Shared => "?mode=ro",
        ReadMode::Immutable => "?mode=ro&immutable=1",
    });
    Ok(uri)
}

/// Opens the database at `path` for reading, checks its schema, and
/// returns the connection and how it reads. Refuses a missing file (`io`),
/// an empty one or an empty database (`schema-mismatch`: reading never
/// initialises a store), and everything [`SqliteStore::open`] refuses.
///
/// [`SqliteStore::open`]: crate::SqliteStore::open
pub(crate) fn connect(path: &Path, location: &str, options: SqliteOptions) -> Result<Reader, StoreError> {
    for _ in 0..ATTEMPTS {
        let stamp = FileStamp::take(path);
        let wal = match file::precheck(path, Purpose::Read)? {
            Found::Missing => {
                return Err(StoreError::io(
                    format!("opening {location} for reading"),
                    io::Error::new(io::ErrorKind::NotFound, "no such file (reading never creates a store)"),
                ))
            }
            Found::Empty => {
                return Err(StoreError::SchemaMismatch {
                    found: format!(
                        "{location}, an empty file (0 bytes): there is no store to read, \
                         and reading never initialises one"
                    ),
                    expected: schema::expected_store(Purpose::Read),
                })
            }
            Found::Database { wal } => wal,
        };
        let mode = choose(path, wal);
        let uri = uri(path, mode).map_err(|e| StoreError::io(format!("resolving the path {location}"), e))?;
        let flags =
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(&uri, flags).map_err(|e| refusal(e, path, location, mode))?;
        conn.busy_timeout(options.busy_timeout)
            .map_err(|e| sql_err(e, location, "configuring the connection"))?;
        conn.set_prepared_statement_cache_capacity(32);
        // See `SqliteOptions::map_bytes`.
        let map = i64::try_from(options.map_bytes).unwrap_or(i64::MAX);
        conn.pragma_update(None, "mmap_size", map)
            .map_err(|e| sql_err(e, location, "configuring the connection"))?;
        // The first read of page 1: where SQLite opens the -wal and -shm.
        conn.pragma_query_value(None, "schema_version", |r| r.get::<_, i64>(0))
            .map_err(|e| refusal(e, path, location, mode))?;
        schema::check_read_only(&mut conn, location)?;
        match mode {
            ReadMode::Shared => return Ok(Reader { conn, mode, stamp: None }),
            ReadMode::Immutable if FileStamp::take(path) == stamp => {
                return Ok(Reader { conn, mode, stamp: Some(stamp) })
            }
            ReadMode::Immutable => {
                tracing::debug!(location, "the file changed while its schema was read; opening it again");
            }
        }
    }
    Err(changing(location))
}

/// The error when the files kept changing under an immutable reader.
pub(crate) fn changing(location: &str) -> StoreError {
    StoreError::Locked {
        what: format!(
            "{location} (it changed during each of {ATTEMPTS} reads: another process is writing it; try again)"
        ),
    }
}

/// A failure to open or first read the database read-only, with the
/// reason where SQLite's code gives one; the SQLite error stays the source.
fn refusal(e: rusqlite::Error, path: &Path, location: &str, mode: ReadMode) -> StoreError {
    let extended = e.sqlite_error().map(|s| s.extended_code);
    if extended == Some(rusqlite::ffi::SQLITE_READONLY_ROLLBACK) {
        // A hot journal: SQLite must roll it back before anyone reads the
        // database, and a read-only connection cannot.
        let journal = file::sidecar(path, "-journal");
        return StoreError::Io {
            context: format!(
                "reading {location} read-only: its rollback journal {} is hot (a writer crashed in the \
                 middle of a transaction), and the database cannot be read until that journal is rolled \
                 back, which a reader cannot do; open the store once for writing where the database and \
                 its journal can be written (SQLite rolls the journal back then), or copy the .db with its \
                 -journal somewhere writable. Never delete the -journal: the database would keep the \
                 half-written transaction",
                journal.display()
            ),
            source: Box::new(e),
        };
    }
    let denied = matches!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly));
    if !denied {
        return sql_err(e, location, "opening read-only");
    }
    let why = match mode {
        ReadMode::Shared => {
            "its -wal holds commits not yet copied into the database, and SQLite reads them only \
             through the -shm index beside it, which it could not open or create (a directory or \
             files this user cannot write?); open the store once where they can be written, or \
             copy the .db with its -wal (and -shm, if any) somewhere writable"
        }
        ReadMode::Immutable => "SQLite could not open the database file read-only",
    };
    StoreError::Io { context: format!("reading {location} read-only: {why}"), source: Box::new(e) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uri_is_absolute_and_escapes_what_sqlite_would_read_as_syntax() {
        let escaped = uri(Path::new("/tmp/a b/x?y#z%.db"), ReadMode::Immutable).unwrap_or_default();
        assert_eq!(escaped, "file:///tmp/a%20b/x%3Fy%23z%25.db?mode=ro&immutable=1");
        let slashes = uri(Path::new("//host/x.db"), ReadMode::Shared).unwrap_or_default();
        assert_eq!(slashes, "file:////host/x.db?mode=ro", "a leading // is a path, never an authority");
    }
}
