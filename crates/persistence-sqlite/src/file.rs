//! Looking at a file before SQLite does: its 16-byte magic, its 100-byte
//! header, and whether it was cut short.
//!
//! SQLite opens almost anything lazily and reads a truncated file's missing
//! pages as zeros, so a file cut in the middle of a data page could open
//! fine and fail (or worse, not fail) much later. These checks refuse such a
//! file at open with a typed error instead.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use palimpsest_persistence::StoreError;

/// The first 16 bytes of every SQLite 3 database file.
pub(crate) const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Size of the database header at the start of page 1.
const HEADER_LEN: usize = 100;

/// Whether the file at `path` starts with the SQLite magic. Only a
/// regular file is opened: reading a pipe's first bytes would take them
/// from whoever reads it next, and opening a FIFO with no writer blocks.
pub(crate) fn has_sqlite_magic(path: &Path) -> bool {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut magic = [0u8; 16];
    File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == SQLITE_MAGIC
}

/// The file beside the database with `suffix` appended (`-wal`, `-shm`, `-journal`).
pub(crate) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether a non-empty sidecar file exists: then the main file alone is not
/// the whole database (SQLite reads or rolls back from the sidecar), so its
/// length says nothing.
fn has_live_sidecar(path: &Path) -> bool {
    ["-wal", "-journal"].iter().any(|s| std::fs::metadata(sidecar(path, s)).is_ok_and(|m| m.len() > 0))
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Why a file is being opened: a writer initialises a missing or empty
/// file, a reader refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// [`SqliteStore::open`](crate::SqliteStore::open).
    Write,
    /// [`SqliteStore::open_read_only`](crate::SqliteStore::open_read_only).
    Read,
}

/// What [`precheck`] found at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No file.
    Missing,
    /// A file of 0 bytes.
    Empty,
    /// A SQLite database whose header passed the checks.
    Database {
        /// Whether the header says WAL mode (file format versions 2 at
        /// offsets 18 and 19), so that a reader needs a `-wal` and a `-shm`.
        wal: bool,
    },
}

/// Checks the file at `path`, if there is one, before SQLite opens it, and
/// says what is there.
///
/// * missing or empty: [`Found::Missing`] or [`Found::Empty`] (a writer
///   initialises a new store, a reader refuses);
/// * not starting with the SQLite magic: `schema-mismatch`;
/// * shorter than the header, an impossible page size, or (when no WAL or
///   rollback journal stands beside it) a length that is not a whole number
///   of pages or is shorter than the page count the header records:
///   `corrupt`.
pub(crate) fn precheck(path: &Path, purpose: Purpose) -> Result<Found, StoreError> {
    let location = path.display().to_string();
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(StoreError::io(format!("opening {location}"), e)),
    };
    let len =
        file.metadata().map_err(|e| StoreError::io(format!("reading the size of {location}"), e))?.len();
    if len == 0 {
        return Ok(Found::Empty);
    }
    let mut head = Vec::with_capacity(HEADER_LEN);
    (&mut file)
        .take(HEADER_LEN as u64)
        .read_to_end(&mut head)
        .map_err(|e| StoreError::io(format!("reading the header of {location}"), e))?;
    let corrupt = |detail: String| StoreError::Corrupt { location: location.clone(), detail, cause: None };

    let magic_len = head.len().min(SQLITE_MAGIC.len());
    if head[..magic_len] != SQLITE_MAGIC[..magic_len] {
        return Err(StoreError::SchemaMismatch {
            found: format!("{location}, which is not a SQLite database (it lacks the SQLite header)"),
            expected: crate::schema::expected_store(purpose),
        });
    }
    if head.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "truncated: {len} bytes, shorter than the {HEADER_LEN}-byte SQLite header"
        )));
    }
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65_536u64,
        n if n >= 512 && n.is_power_of_two() => u64::from(n),
        n => return Err(corrupt(format!("the header records an impossible page size {n}"))),
    };
    let found = Found::Database { wal: head[18] == 2 && head[19] == 2 };
    if has_live_sidecar(path) {
        return Ok(found);
    }
    if !len.is_multiple_of(page_size) {
        return Err(corrupt(format!(
            "truncated mid-page: {len} bytes is not a whole number of {page_size}-byte pages"
        )));
    }
    // The in-header page count is valid only when the change counter equals
    // the "version-valid-for" number (SQLite file format, section 1.3.7).
    let pages_in_header = u64::from(be_u32(&head, 28));
    if be_u32(&head, 24) == be_u32(&head, 92) && pages_in_header > 0 && len < pages_in_header * page_size {
        return Err(corrupt(format!(
            "truncated: the header records {pages_in_header} pages, the file holds {}",
            len / page_size
        )));
    }
    Ok(found)
}
