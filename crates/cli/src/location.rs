//! What a STORE argument names: the one place the contract's rule (§7) is
//! read, used by every command that takes a store.
//!
//! * a `postgres://` or `postgresql://` URL is a PostgreSQL store;
//! * a path ending in `.db`, or a file that starts with the SQLite header, is
//!   a SQLite store;
//! * a path ending in `.jsonl` (that is not a directory) is one JSONL
//!   session file;
//! * any other path is a JSONL store directory, except that an existing
//!   regular file is read as a JSONL session file whatever its name.
//!
//! A path ending in `.sqlite` or `.sqlite3` that does not exist yet is
//! refused rather than made a JSONL directory of that name: the contract
//! names `.db` alone, and a directory called `x.sqlite` is never what was
//! meant (see `docs/contract-notes.md`, note 19).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_postgres::{redact_url, PgOptions, PgStore};
use palimpsest_persistence_sqlite::SqliteStore;

use crate::error::{from_store, CliError};

/// A STORE argument, read by the rule of contract §7.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A PostgreSQL server: the URL as given (it may hold a password:
    /// show it only through [`Location::shown`]).
    Postgres(String),
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// One JSONL session file.
    JsonlFile(PathBuf),
    /// A JSONL store directory.
    JsonlDir(PathBuf),
}

impl Location {
    /// The files and directories the store is made of: a SQLite database
    /// with the files SQLite keeps beside it, a JSONL file with its
    /// checkpoint sidecar, a JSONL directory; none for a server.
    pub(crate) fn files(&self) -> Vec<PathBuf> {
        let beside = |path: &PathBuf, suffixes: &[&str]| -> Vec<PathBuf> {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            suffixes.iter().map(|suffix| path.with_file_name(format!("{name}{suffix}"))).collect()
        };
        let sidecar = |path: &PathBuf| palimpsest_persistence_jsonl::sidecar::path(path);
        // Named as given and as the link it may be resolves: SQLite names
        // its `-wal` after the database a link points to.
        let spellings = |path: &PathBuf| {
            let mut both = vec![path.clone()];
            both.extend(std::fs::canonicalize(path).ok().filter(|real| real != path));
            both
        };
        match self {
            Location::Postgres(_) => Vec::new(),
            Location::Sqlite(path) => {
                spellings(path).iter().flat_map(|p| beside(p, &["", "-wal", "-shm", "-journal"])).collect()
            }
            Location::JsonlFile(path) => {
                spellings(path).iter().flat_map(|p| [p.clone(), sidecar(p)]).collect()
            }
            Location::JsonlDir(dir) => spellings(dir),
        }
    }

    /// Reads a STORE argument.
    pub(crate) fn parse(arg: &Path) -> Result<Location, CliError> {
        // A URL pasted with a space around it is still the URL (the driver
        // trims it); as a path it was a new directory named after it, the
        // password in its name.
        if let Some(url) = arg.to_str().map(str::trim).filter(|s| is_postgres_url(s)) {
            // Past the user-info (which the driver takes up to the first
            // '@', so a password may hold a '#'), a '#' would be glued onto
            // the last query value: `...search_path%3Dapp#run-1`, the way
            // messages name a session, wrote to a new schema `app#run-1`.
            let after_user_info = url.split_once('@').map_or(url, |(_, after)| after);
            if let Some((_, fragment)) = after_user_info.split_once('#') {
                return Err(CliError::usage(format!(
                    "{}: a postgres:// URL has no #fragment; to name a session, give --session {}",
                    redact_url(url),
                    crate::output::shell_word(fragment)
                )));
            }
            return Ok(Location::Postgres(url.to_owned()));
        }
        // A pipe, FIFO or device (`validate <(zcat s.jsonl.gz)`,
        // `/dev/stdin`) is read once, as a session file: its bytes are
        // never sniffed, which would take them from the read.
        if fs::metadata(arg).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            return Ok(Location::JsonlFile(arg.to_owned()));
        }
        // Nor is another scheme's URL (`mysql://`, `sqlite:///x.db`) a
        // new store to make under that name.
        if let Some(url) = arg.to_str().filter(|s| s.contains("://") && !arg.exists()) {
            return Err(CliError::usage(format!(
                "{}: a URL, but this tool's URLs are postgres:// and postgresql:// ones; \
                 a SQLite store is a path ending in .db, a JSONL store a directory or a .jsonl file",
                redact_url(url.trim())
            )));
        }
        let ext = arg.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if ext == "db" || SqliteStore::is_sqlite_file(arg) {
            return Ok(Location::Sqlite(arg.to_owned()));
        }
        if arg.is_dir() {
            return Ok(Location::JsonlDir(arg.to_owned()));
        }
        if ext == "jsonl" || arg.is_file() {
            return Ok(Location::JsonlFile(arg.to_owned()));
        }
        if matches!(ext, "sqlite" | "sqlite3") {
            return Err(CliError::usage(format!(
                "{}: a new SQLite store is named `.db` (contract §7); a `.{ext}` path that does not exist \
                 would be a JSONL directory, which is surely not what you meant",
                arg.display()
            )));
        }
        Ok(Location::JsonlDir(arg.to_owned()))
    }

    /// How messages name the store: the path, or the URL without its password.
    pub(crate) fn shown(&self) -> String {
        match self {
            Location::Postgres(url) => redact_url(url),
            Location::Sqlite(p) | Location::JsonlFile(p) | Location::JsonlDir(p) => p.display().to_string(),
        }
    }

    /// What kind of store this is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Location::Postgres(_) => "PostgreSQL store",
            Location::Sqlite(_) => "SQLite database",
            Location::JsonlFile(_) => "JSONL file",
            Location::JsonlDir(_) => "JSONL directory",
        }
    }

    /// Opens a PostgreSQL store: creating its tables when `create` (a
    /// writing command), or refusing a schema without them (a reader
    /// changes nothing).
    pub(crate) fn connect_postgres(url: &str, create: bool) -> Result<PgStore, CliError> {
        let options = PgOptions { create_missing: create, ..PgOptions::default() };
        PgStore::connect_with(url, options).map_err(|e| from_store(&e, &redact_url(url)))
    }

    /// Opens the SQLite store at `path` for writing, refusing a file that
    /// is not a store yet without touching it: a read-only open first,
    /// since opening for writing initialises an empty file.
    pub(crate) fn open_existing_sqlite(
        path: &Path,
    ) -> Result<SqliteStore, palimpsest_persistence::StoreError> {
        SqliteStore::open_read_only(path).and_then(|probe| {
            drop(probe);
            SqliteStore::open(path)
        })
    }

    /// Opens (creating when missing) a store that sessions are written
    /// into through [`SessionStore`]: a directory, a database or a server,
    /// or a session file as a store of one session
    /// ([`palimpsest_persistence_jsonl::JsonlFileStore`]; the file is made by the first
    /// session created, never as a directory).
    pub(crate) fn open_for_writing(&self) -> Result<Option<Arc<dyn SessionStore>>, CliError> {
        let shown = self.shown();
        Ok(Some(match self {
            Location::Postgres(url) => Arc::new(Location::connect_postgres(url, true)?),
            Location::Sqlite(p) => Arc::new(SqliteStore::open(p).map_err(|e| from_store(&e, &shown))?),
            Location::JsonlDir(p) => Arc::new(JsonlStore::open(p).map_err(|e| from_store(&e, &shown))?),
            Location::JsonlFile(p) => Arc::new(palimpsest_persistence_jsonl::JsonlFileStore::new(p)),
        }))
    }
}

/// Whether `s` is a PostgreSQL URL (contract §7).
pub(crate) fn is_postgres_url(s: &str) -> bool {
    ["postgres://", "postgresql://"]
        .iter()
        .any(|scheme| s.len() >= scheme.len() && s[..scheme.len()].eq_ignore_ascii_case(scheme))
}

/// `path` made absolute with its links resolved; for a file that does not
/// exist yet (an export about to be written, SQLite's `-wal`), its
/// directory's, joined with its name. How the store's own files are
/// recognised, whatever spelling or link names them.
pub(crate) fn canonical_or_planned(path: &Path) -> Option<PathBuf> {
    fs::canonicalize(path).ok().or_else(|| {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some(fs::canonicalize(parent).ok()?.join(path.file_name()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Location, String> {
        Location::parse(Path::new(s)).map_err(|e| e.code)
    }

    #[test]
    fn every_form_of_contract_section_7() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let at = |name: &str| dir.path().join(name);
        assert_eq!(parse("postgres://u:pw@h/db"), Ok(Location::Postgres("postgres://u:pw@h/db".into())));
        assert_eq!(parse("PostgreSQL://h/db"), Ok(Location::Postgres("PostgreSQL://h/db".into())));
        // A fragment (how messages name a session) is refused; a '#' in a
        // password is the password's.
        assert_eq!(parse("postgres://h/db?options=-csearch_path%3Dapp#run-1"), Err("usage".to_owned()));
        assert_eq!(parse("postgres://u:a#b@h/db"), Ok(Location::Postgres("postgres://u:a#b@h/db".into())));
        // A URL pasted with spaces around it is the URL, not a new
        // directory named after it (its password in the name).
        assert_eq!(parse(" postgres://u:pw@h/db\n"), Ok(Location::Postgres("postgres://u:pw@h/db".into())));
        // Another scheme's URL is refused, not made a store of that name.
        let refused = Location::parse(Path::new("mysql://u:pw@h/db")).map_err(|e| (e.code, e.message));
        assert!(
            refused.as_ref().is_err_and(|(code, message)| code == "usage" && !message.contains("pw")),
            "{refused:?}"
        );
        assert_eq!(parse("sqlite:///x.db"), Err("usage".to_owned()));
        let new_db = at("new.db");
        assert_eq!(Location::parse(&new_db).ok(), Some(Location::Sqlite(new_db.clone())));
        let new_file = at("new.jsonl");
        assert_eq!(Location::parse(&new_file).ok(), Some(Location::JsonlFile(new_file.clone())));
        let new_dir = at("sessions");
        assert_eq!(Location::parse(&new_dir).ok(), Some(Location::JsonlDir(new_dir.clone())));
        // A database is known by its header, whatever its name.
        let db = at("store.sqlite");
        drop(SqliteStore::open(&db));
        assert_eq!(Location::parse(&db).ok(), Some(Location::Sqlite(db.clone())));
        // A new `.sqlite` path is refused, not made a directory.
        assert_eq!(parse(&at("other.sqlite").display().to_string()), Err("usage".to_owned()));
        // An existing directory named `.jsonl` is a directory; an existing
        // file of any name is a session file.
        let odd_dir = at("d.jsonl");
        std::fs::create_dir(&odd_dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Location::parse(&odd_dir).ok(), Some(Location::JsonlDir(odd_dir.clone())));
        let log = at("session.log");
        std::fs::write(&log, "{}\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Location::parse(&log).ok(), Some(Location::JsonlFile(log.clone())));
    }

    #[test]
    fn a_postgres_location_never_shows_its_password() {
        let l = Location::Postgres("postgres://app:s3cret@db:5432/x".into());
        assert_eq!(l.shown(), "postgres://app:***@db:5432/x");
        assert_eq!(l.kind(), "PostgreSQL store");
    }
}
