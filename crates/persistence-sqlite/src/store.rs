//! [`SqliteStore`]: the [`SessionStore`] over one SQLite database file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use palimpsest_core_session::search::{index_text, searchable_text};
use palimpsest_core_session::{Checkpoint, Event, LoadError, SessionHeader};
use palimpsest_persistence::hold::{check_fence, check_renewal, grant};
use palimpsest_persistence::search::HitCollector;
use palimpsest_persistence::{
    check_continues, check_header, CollectSink, Hold, LoadReport, LoadSink, Resumable, SearchHit,
    SearchQuery, SessionStore, SessionSummary, StoreError, StoredSession, SummaryPart,
};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};

use crate::audit::{self, StoreViolation};
use crate::codec;
use crate::file::{self, Purpose};
use crate::fts::{self, QueryTokenizer};
use crate::holds;
use crate::options::{SqliteOptions, Synchronous};
use crate::read_only::{self, FileStamp, ReadMode, Reader};
use crate::schema;
use crate::sqlerr::{poisons, sql_err};

const INSERT_EVENT: &str = "INSERT INTO events \
    (session_id, seq, time, type, data, source_event_seqs, surface_op) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const INSERT_SESSION: &str = "INSERT INTO sessions \
    (id, created_at, cwd, parent_session, seed_length) VALUES (?1, ?2, ?3, ?4, ?5)";
/// The stored length, or no row when the session does not exist.
const STORED_LEN: &str = "SELECT (SELECT min(seq) FROM events WHERE session_id = ?1), \
    (SELECT max(seq) FROM events WHERE session_id = ?1) FROM sessions WHERE id = ?1";
const SELECT_HEADER: &str = "SELECT created_at, cwd, parent_session, seed_length FROM sessions WHERE id = ?1";
const SELECT_EVENTS: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 ORDER BY seq";
/// The events from seq `?2` on: a resume's tail.
const SELECT_EVENTS_FROM: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq";
const UPSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (session_id, log_len, checkpoint) \
    VALUES (?1, ?2, ?3) ON CONFLICT (session_id) DO UPDATE SET \
    log_len = excluded.log_len, checkpoint = excluded.checkpoint";
const SELECT_CHECKPOINT: &str = "SELECT log_len, checkpoint FROM checkpoints WHERE session_id = ?1";
const INSERT_SEARCH: &str = "INSERT INTO search (session_id, seq, text) VALUES (?1, ?2, ?3)";
/// The candidates of a search: the rows of the full-text index holding
/// the index tokens of every term that has some (see [`fts`]).
const SEARCH_CANDIDATES: &str = "SELECT session_id, seq, text FROM search WHERE search MATCH ?1";
/// The candidates of a search none of whose terms the index can narrow to:
/// every row of the full-text index.
const SEARCH_EVERY_ROW: &str = "SELECT session_id, seq, text FROM search";
/// A session's last activity (the time of its last event), or no row when
/// the session does not exist.
const LAST_ACTIVITY: &str =
    "SELECT (SELECT time FROM events WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), \
    created_at FROM sessions WHERE id = ?1";
const SELECT_EVENT: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 AND seq = ?2";
/// What a summary reads: the last event, the last turn bracket and the
/// first prompt, each one row found through the primary key's order.
const LAST_EVENT: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1";
const LAST_TURN: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 AND type IN ('turn/start', 'turn/end') ORDER BY seq DESC LIMIT 1";
const FIRST_PROMPT: &str = "SELECT seq, time, type, data, source_event_seqs, surface_op \
    FROM events WHERE session_id = ?1 AND type = 'user/message' ORDER BY seq LIMIT 1";
/// What `summaries` reads of every session at once, as [`LAST_EVENT`],
/// [`LAST_TURN`] and [`FIRST_PROMPT`] read it of one: per session, one
/// look-up on the primary key's order for the seq, then the row at that
/// seq, in one statement. (Materialized: left to itself SQLite scans
/// `events` and runs the look-up once per row.) The session id is the
/// last column.
macro_rules! every_session {
    ($seq:literal) => {
        concat!(
            "WITH x AS MATERIALIZED (SELECT id, (",
            $seq,
            ") AS m FROM sessions WHERE id >= ?1 AND id <= ?2) SELECT e.seq, e.time, e.type, e.data, e.source_event_seqs, \
             e.surface_op, e.session_id FROM x JOIN events e ON e.session_id = x.id AND e.seq = x.m"
        )
    };
}
const ALL_LAST_EVENTS: &str = every_session!("SELECT max(seq) FROM events WHERE session_id = sessions.id");
const ALL_LAST_TURNS: &str = every_session!(
    "SELECT seq FROM events WHERE session_id = sessions.id AND type IN ('turn/start', 'turn/end') \
     ORDER BY seq DESC LIMIT 1"
);
const ALL_FIRST_PROMPTS: &str = every_session!(
    "SELECT seq FROM events WHERE session_id = sessions.id AND type = 'user/message' ORDER BY seq LIMIT 1"
);
/// Sessions a connection of [`SqliteStore::summaries`] takes at least:
/// below that, a second connection costs more than it saves.
const SUMMARIES_PER_CONNECTION: usize = 500;
const LIST_SESSIONS: &str =
    "SELECT id, created_at, cwd, parent_session, seed_length FROM sessions ORDER BY id";

/// A [`SessionStore`] keeping every session in one SQLite database.
///
/// Opening checks the file and its schema (see the [crate docs](crate) for
/// what is refused and why); each append is one `BEGIN IMMEDIATE`
/// transaction. One connection serves the whole store behind a mutex, so
/// the store is `Send + Sync`; any number of stores, in any number of
/// processes, may open the same file.
///
/// A store opened with [`SqliteStore::open_read_only`] reads the same way
/// and refuses every write; opening and reading it change no byte of the
/// database and create no file beside it (see [`ReadMode`]).
#[derive(Debug)]
pub struct SqliteStore {
    inner: Mutex<Inner>,
    /// The tokens of the holds this store took, by session id: its appends
    /// and deletes of those sessions are fenced by them.
    holds: Mutex<HashMap<String, u64>>,
    path: Option<PathBuf>,
    location: String,
    options: SqliteOptions,
    /// What cuts a search's terms into the index's tokens.
    tokenizer: QueryTokenizer,
    #[cfg(feature = "testkit")]
    write_fault: Option<palimpsest_persistence::testkit::WriteFault>,
}

#[derive(Debug)]
struct Inner {
    conn: Connection,
    /// Set by a failed write: what failed. Every later write is refused.
    poisoned: Option<String>,
    /// For a store opened read-only: how `conn` reads (boxed: the stamp is
    /// large and a writing store has none).
    reader: Option<Box<ReadOnly>>,
}

/// How a read-only store's connection reads.
#[derive(Debug)]
struct ReadOnly {
    mode: ReadMode,
    /// For [`ReadMode::Immutable`]: the files as they were when the
    /// connection opened.
    stamp: Option<FileStamp>,
}

/// A failure inside a write transaction: a refusal decided by the store
/// (nothing was written, the store stays usable) or a SQLite error.
enum WriteError {
    Refused(StoreError),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for WriteError {
    fn from(e: rusqlite::Error) -> WriteError {
        WriteError::Sql(e)
    }
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> WriteError {
        WriteError::Refused(e)
    }
}

/// A failure inside a read: the session's contract-level corruption, or a
/// SQLite error.
enum ReadError {
    Store(StoreError),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> ReadError {
        ReadError::Sql(e)
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with the default
    /// [`SqliteOptions`].
    ///
    /// A missing or empty file is initialised; a Palimpsest store of this
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION) is opened; anything else is
    /// refused: `schema-mismatch` for another schema version, another
    /// program's database or a file that is not SQLite at all, `corrupt` for
    /// a truncated file, `io` when the file cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Like [`SqliteStore::open`], with options.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let location = path.display().to_string();
        file::precheck(path, Purpose::Write)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_err(e, &location, "opening"))?;
        SqliteStore::setup(conn, Some(path.to_owned()), location, options)
    }

    /// A store in memory, lost when dropped (for tests and examples).
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let conn = Connection::open_in_memory().map_err(|e| sql_err(e, ":memory:", "opening"))?;
        SqliteStore::setup(conn, None, ":memory:".to_owned(), SqliteOptions::default())
    }

    fn setup(
        mut conn: Connection,
        path: Option<PathBuf>,
        location: String,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let err = |e| sql_err(e, &location, "configuring the connection");
        conn.busy_timeout(options.busy_timeout).map_err(err)?;
        // Some statements run once per event: keep them all prepared.
        conn.set_prepared_statement_cache_capacity(32);
        let created = schema::open_checked(&mut conn, &location)?;
        if path.is_some() {
            switch_to_wal(&conn, &location, options.busy_timeout)?;
        }
        conn.pragma_update(None, "synchronous", options.synchronous.pragma_value()).map_err(err)?;
        if let (true, Some(p)) = (created, &path) {
            sync_parent_dir(p)
                .map_err(|e| StoreError::io(format!("syncing the directory of {location}"), e))?;
        }
        tracing::debug!(location = %location, created, synchronous = ?options.synchronous, "opened SQLite store");
        Ok(SqliteStore {
            holds: Mutex::default(),
            inner: Mutex::new(Inner { conn, poisoned: None, reader: None }),
            path,
            location,
            options,
            tokenizer: QueryTokenizer::default(),
            #[cfg(feature = "testkit")]
            write_fault: None,
        })
    }

    /// Opens the store at `path` for reading only, with the default
    /// [`SqliteOptions`]: what every reading command uses.
    ///
    /// Nothing is written: no schema, no journal mode, not a byte of the
    /// file; no `-wal` or `-shm` file is created where none exists (with one
    /// exception, see [`ReadMode::Shared`]). So a clean store can be read
    /// where the reader cannot write (another user's directory, a read-only
    /// mount). A missing file is `io`; an empty file or a database without
    /// a schema is `schema-mismatch` (there is nothing to read, and reading
    /// never initialises a store); everything [`SqliteStore::open`] refuses
    /// is refused the same way. Where SQLite cannot read the file, the
    /// `io` error says why and keeps SQLite's error as its source. Every
    /// write ([`create`](SessionStore::create), [`append`](SessionStore::append),
    /// [`delete`](SessionStore::delete), [`create_with_events`](SessionStore::create_with_events)) is
    /// refused with `io`; [`sync`](SessionStore::sync) has nothing to do.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_read_only_with(path, SqliteOptions::default())
    }

    /// Like [`SqliteStore::open_read_only`], with options (only
    /// `busy_timeout` matters to a reader).
    pub fn open_read_only_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let location = path.display().to_string();
        let Reader { conn, mode, stamp } = read_only::connect(path, &location, options)?;
        tracing::debug!(location = %location, mode = ?mode, "opened SQLite store read-only");
        Ok(SqliteStore {
            holds: Mutex::default(),
            inner: Mutex::new(Inner {
                conn,
                poisoned: None,
                reader: Some(Box::new(ReadOnly { mode, stamp })),
            }),
            path: Some(path.to_owned()),
            location,
            options,
            tokenizer: QueryTokenizer::default(),
            #[cfg(feature = "testkit")]
            write_fault: None,
        })
    }

    /// How a store opened with [`SqliteStore::open_read_only`] reads its
    /// file now (it may change from [`ReadMode::Immutable`] to
    /// [`ReadMode::Shared`] when a writer comes along); `None` for a store
    /// opened for writing.
    pub fn read_mode(&self) -> Option<ReadMode> {
        self.lock().reader.as_ref().map(|r| r.mode)
    }

    /// Checks the store as a whole, beyond any one session: SQLite's
    /// `quick_check`, event rows that belong to no session
    /// ([`STORE_ORPHAN_EVENTS`](crate::STORE_ORPHAN_EVENTS)), sessions whose
    /// seqs do not run from 0 without a gap
    /// ([`STORE_SEQ_GAP`](crate::STORE_SEQ_GAP)). One read transaction.
    /// `quick_check` reads every page, so the check costs a scan of the
    /// store; the orphans and gaps are then proven absent by a few index
    /// seeks a session while sessions hold dozens of events each, and
    /// found (or proven absent) by one scan of the event rows otherwise.
    /// Findings are data; `Err` only when the store cannot be read.
    pub fn check_store(&self) -> Result<Vec<StoreViolation>, StoreError> {
        self.read("checking the store", |tx| Ok(audit::check(tx)?))
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The options the store was opened with.
    pub fn options(&self) -> SqliteOptions {
        self.options
    }

    /// Whether the file at `path` starts with the 16-byte SQLite magic
    /// (`"SQLite format 3\0"`). Says nothing about whose database it is:
    /// [`SqliteStore::open`] checks that. `false` when it cannot be read,
    /// and for anything but a regular file (a pipe is never read from).
    pub fn is_sqlite_file(path: &Path) -> bool {
        file::has_sqlite_magic(path)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held cannot leave a half-written batch:
        // the open transaction rolled back when the panic dropped it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the contract kit's fault switch: when it is armed, the next
    /// write fails as a failed commit does (`io`, rolled back, further
    /// writes refused until reopened) (feature `testkit`).
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn with_write_fault(mut self, fault: palimpsest_persistence::testkit::WriteFault) -> SqliteStore {
        self.write_fault = Some(fault);
        self
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction and commits it. A
    /// SQLite failure (other than waiting for a lock) poisons the store.
    fn write<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, WriteError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        if let Some(earlier) = &inner.poisoned {
            return Err(self.poisoned_error(earlier));
        }
        if inner.reader.is_some() {
            return Err(self.read_only_error(what));
        }
        let result = inner
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(WriteError::Sql)
            .and_then(|tx| {
                let value = f(&tx)?;
                #[cfg(feature = "testkit")]
                if self.write_fault.as_ref().is_some_and(|f| f.take()) {
                    // As a failed commit: rolled back, and the store cannot
                    // be sure, so it refuses further writes.
                    drop(tx);
                    return Err(WriteError::Sql(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                        Some("injected I/O error".into()),
                    )));
                }
                tx.commit()?;
                Ok(value)
            });
        match result {
            Ok(value) => Ok(value),
            Err(WriteError::Refused(e)) => Err(e),
            Err(WriteError::Sql(e)) => {
                if poisons(&e) {
                    tracing::error!(location = %self.location, error = %e, "write failed; refusing further writes");
                    inner.poisoned = Some(format!("{what}: {e}"));
                }
                Err(sql_err(e, &self.location, what))
            }
        }
    }

    /// The summaries of the sessions of `headers` (sorted by id), in one
    /// read transaction: three statements over the id range they span.
    fn summaries_of(
        &self,
        headers: Vec<SessionHeader>,
    ) -> Result<palimpsest_persistence::Summaries, StoreError> {
        let (Some(low), Some(high)) = (headers.first(), headers.last()) else { return Ok(Vec::new()) };
        let (low, high) = (low.id.clone(), high.id.clone());
        let mut found = self.read("summarizing every session", |tx| {
            let mut found: HashMap<String, Result<SessionSummary, StoreError>> =
                headers.iter().map(|h| (h.id.clone(), Ok(SessionSummary::empty(h.clone())))).collect();
            for (sql, part) in [
                (ALL_LAST_EVENTS, SummaryPart::LastEvent),
                (ALL_LAST_TURNS, SummaryPart::LastTurn),
                (ALL_FIRST_PROMPTS, SummaryPart::FirstPrompt),
            ] {
                let mut stmt = tx.prepare_cached(sql)?;
                let mut rows = stmt.query([&low, &high])?;
                while let Some(row) = rows.next()? {
                    let id: String = row.get(6)?;
                    let Some(Ok(summary)) = found.get_mut(&id) else { continue };
                    let seq = match row.get::<_, i64>(0) {
                        Ok(seq) => codec::from_sql_int(seq),
                        Err(e) => {
                            found.insert(id, Err(sql_err(e, &self.location, "summarizing a session")));
                            continue;
                        }
                    };
                    let event = match codec::read_row(row, None).and_then(|r| r.decode(seq)) {
                        Ok(event) => event,
                        Err(e) => {
                            let error = self.corrupt(&id, Some(seq), e);
                            found.insert(id, Err(error));
                            continue;
                        }
                    };
                    summary.record(part, event);
                }
            }
            Ok(found)
        })?;
        Ok(headers
            .into_iter()
            .map(|h| {
                let summary = found.remove(&h.id).unwrap_or_else(|| Ok(SessionSummary::empty(h.clone())));
                (h, summary)
            })
            .collect())
    }

    /// Every header, sorted by id, in the caller's read transaction.
    fn list_in(&self, tx: &Transaction<'_>) -> Result<Vec<SessionHeader>, ReadError> {
        let mut stmt = tx.prepare_cached(LIST_SESSIONS)?;
        let mut rows = stmt.query([])?;
        let mut headers = Vec::new();
        while let Some(row) = rows.next()? {
            let id = codec::value(row, 0, "id", None)
                .and_then(|v| codec::required_text(v, "id", None))
                .map_err(|e| ReadError::Store(self.corrupt("?", None, e)))?;
            let header =
                header_from_row(id, row, 1).map_err(|e| ReadError::Store(self.corrupt(id, None, e)))?;
            headers.push(header);
        }
        Ok(headers)
    }

    /// The token of this store's hold on `session_id`, if it took one.
    fn our_token(&self, session_id: &str) -> Option<u64> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).get(session_id).copied()
    }

    /// Refuses a write of `session_id` that its hold does not allow (see
    /// [`check_fence`]), inside the write's transaction.
    fn fence(&self, tx: &Transaction<'_>, session_id: &str) -> Result<(), WriteError> {
        let record = holds::read(tx, session_id, holds::now_ms())?;
        check_fence(session_id, self.our_token(session_id), record.as_ref())?;
        Ok(())
    }

    fn read_only_error(&self, what: &str) -> StoreError {
        StoreError::Io {
            context: format!("{} was opened read-only: {what} is refused", self.location),
            source: Box::new(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "a store opened for reading never writes",
            )),
        }
    }

    fn poisoned_error(&self, earlier: &str) -> StoreError {
        StoreError::Io {
            context: format!("{} refuses writes after an earlier write failed; reopen it", self.location),
            source: Box::new(std::io::Error::other(earlier.to_owned())),
        }
    }

    /// Runs `f` in one read transaction (one snapshot).
    ///
    /// Under [`ReadMode::Immutable`] SQLite takes no lock and trusts the
    /// file not to change, so the files are stamped afterwards: if a writer
    /// touched them since the connection opened, the result (whatever it
    /// was: SQLite may have read a page half old, half new) is thrown
    /// away, a new connection is opened in the mode the files now call
    /// for, and `f` runs again.
    fn read<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&Transaction<'_>) -> Result<T, ReadError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        for _ in 0..read_only::ATTEMPTS {
            let result = inner.conn.transaction().map_err(ReadError::Sql).and_then(|tx| {
                let value = f(&tx)?;
                tx.commit()?;
                Ok(value)
            });
            let stamp = inner.reader.as_ref().and_then(|r| r.stamp.as_ref());
            let changed = match (stamp, &self.path) {
                (Some(stamp), Some(path)) => FileStamp::take(path) != *stamp,
                _ => false,
            };
            if !changed {
                return result.map_err(|e| match e {
                    ReadError::Store(e) => e,
                    ReadError::Sql(e) => sql_err(e, &self.location, what),
                });
            }
            tracing::debug!(location = %self.location, "the file changed under an immutable read; reading again");
            let path = self.path.as_deref().unwrap_or(Path::new(""));
            let Reader { conn, mode, stamp } = read_only::connect(path, &self.location, self.options)?;
            inner.conn = conn;
            inner.reader = Some(Box::new(ReadOnly { mode, stamp }));
        }
        Err(read_only::changing(&self.location))
    }

    /// A failure of a search's full-text query. The query is always
    /// well-formed, so an index that refuses it (`SQLITE_ERROR`: "no such
    /// table", an FTS5 error) is not the index this build makes:
    /// `schema-mismatch`, a refusal (a search writes nothing). Any other
    /// failure is a read's.
    fn index_refused(&self, e: rusqlite::Error, expr: Option<&str>) -> ReadError {
        if e.sqlite_error().is_some_and(|s| s.extended_code & 0xff == rusqlite::ffi::SQLITE_ERROR) {
            let query = expr.map_or_else(|| "reading every row".to_owned(), |x| format!("the query {x:?}"));
            return ReadError::Store(StoreError::SchemaMismatch {
                found: format!("{}, whose full-text index `search` refused {query} ({e})", self.location),
                expected: format!(
                    "{}, whose `search` index takes every query a search makes",
                    schema::expected_store(Purpose::Read)
                ),
            });
        }
        ReadError::Sql(e)
    }

    fn corrupt(&self, session_id: &str, index: Option<u64>, cause: LoadError) -> StoreError {
        let location = match index {
            Some(i) => format!("{}: events row (session {session_id:?}, seq {i})", self.location),
            None => format!("{}: sessions row {session_id:?}", self.location),
        };
        StoreError::Corrupt { location, detail: cause.to_string(), cause: Some(cause) }
    }

    /// Reads a session into `sink` inside the read transaction `tx`: the
    /// header, then the events, decoded on another thread as SQLite steps
    /// through the rows.
    fn read_session(
        &self,
        tx: &Transaction<'_>,
        session_id: &str,
        sink: &mut dyn LoadSink,
    ) -> Result<(), ReadError> {
        let header = self.stored_header(tx, session_id)?;
        let mut stmt = tx.prepare_cached(SELECT_EVENTS)?;
        let mut rows = stmt.query([session_id])?;
        // Not sized from max(seq): a tampered seq must not size an allocation.
        // SQLite steps through rows on this thread; other threads decode
        // them meanwhile. The first bad row by position is the error,
        // whether its columns or its contents are wrong: a row whose
        // columns cannot be read is never decoded, and ends the read.
        let mut rows_read = codec::RowReader::default();
        if sink.header(header).is_break() {
            return Ok(());
        }
        let share = sink.keeps_events();
        let decoded = codec::decode_bytes_into_with(
            codec::decode_threads(self.options.decode_threads),
            share,
            |push| {
                while let Some(row) = rows.next()? {
                    if !rows_read.take(codec::read_row_bytes(row), push) {
                        break;
                    }
                }
                Ok::<(), rusqlite::Error>(())
            },
            &mut |event| sink.event(event),
        )?;
        rows_read
            .finish(decoded)
            .map_err(|(index, e)| ReadError::Store(self.corrupt(session_id, Some(index), e)))
    }

    /// The header of session `session_id`, read in `tx`: `not-found`
    /// without one, `corrupt` when its row does not decode. Every read that
    /// starts from the header starts here.
    fn stored_header(&self, tx: &Transaction<'_>, session_id: &str) -> Result<SessionHeader, ReadError> {
        tx.prepare_cached(SELECT_HEADER)?
            .query_row([session_id], |row| Ok(header_from_row(session_id, row, 0)))
            .optional()?
            .ok_or_else(|| ReadError::Store(StoreError::NotFound { session_id: session_id.to_owned() }))?
            .map_err(|e| ReadError::Store(self.corrupt(session_id, None, e)))
    }

    /// The session's saved checkpoint, read in `tx`, if it matches the log:
    /// it decodes, its `log_len` column agrees with it, it was taken of this
    /// session under `header`, and the stored row at seq `log_len - 1` is
    /// its last event. `None` (logged at `debug`, with why) otherwise.
    fn matching_checkpoint(
        &self,
        tx: &Transaction<'_>,
        session_id: &str,
        header: &SessionHeader,
    ) -> Result<Option<Checkpoint>, ReadError> {
        let row = tx
            .prepare_cached(SELECT_CHECKPOINT)?
            .query_row([session_id], |r| Ok((r.get::<_, i64>(0), r.get::<_, String>(1))))
            .optional()?;
        let Some((log_len, json)) = row else { return Ok(None) };
        let ignore = |why: &str| {
            tracing::debug!(session_id, why, "ignoring the saved checkpoint; reading every event");
            Ok(None)
        };
        let checkpoint = match codec::checkpoint_row(header, log_len.ok(), json.ok()) {
            Ok(c) => c,
            Err(why) => return ignore(&why),
        };
        let Some(last) = checkpoint.log_len().checked_sub(1) else {
            // It covers nothing: the header is all it has to match.
            return Ok(Some(checkpoint));
        };
        let stored = tx
            .prepare_cached(SELECT_EVENT)?
            .query_row(params![session_id, codec::to_sql_int(last)], |row| Ok(codec::read_row(row, None)))
            .optional()?
            .map(|r| r.and_then(|r| r.decode(last)));
        match codec::checkpoint_ends_at(&checkpoint, stored) {
            Ok(()) => Ok(Some(checkpoint)),
            Err(why) => ignore(&why),
        }
    }

    fn checkpoint(&self, inner: &Inner) -> Result<(), rusqlite::Error> {
        let conn = &inner.conn;
        if self.options.synchronous == Synchronous::Off {
            // Under OFF a checkpoint does not fsync: raise the level for it.
            conn.pragma_update(None, "synchronous", Synchronous::Normal.pragma_value())?;
        }
        let result = self.checkpoint_within_timeout(conn);
        if self.options.synchronous == Synchronous::Off {
            conn.pragma_update(None, "synchronous", Synchronous::Off.pragma_value())?;
        }
        result
    }

    /// Runs a FULL checkpoint until it completes or the busy timeout has
    /// passed. The busy handler covers waiting for the write lock, but a
    /// checkpoint that got it still stops short while another connection
    /// reads an older snapshot; under many writers and readers that happens
    /// often and passes in a millisecond or two, so it is tried again
    /// rather than reported as `locked` at once.
    fn checkpoint_within_timeout(&self, conn: &Connection) -> Result<(), rusqlite::Error> {
        let deadline = Instant::now() + self.options.busy_timeout;
        let mut pause = Duration::from_micros(500);
        loop {
            if conn.query_row("PRAGMA wal_checkpoint(FULL)", [], |r| r.get::<_, i64>(0))? == 0 {
                return Ok(());
            }
            if Instant::now() + pause > deadline {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                    Some(
                        "the checkpoint could not finish within the busy timeout: other connections kept \
                         reading older snapshots"
                            .into(),
                    ),
                ));
            }
            tracing::trace!(?pause, "checkpoint stopped short of readers of an older snapshot; trying again");
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

fn insert_session(tx: &Transaction<'_>, header: &SessionHeader) -> Result<(), WriteError> {
    let inserted = tx.prepare_cached(INSERT_SESSION)?.execute(params![
        header.id,
        codec::to_sql_int(header.created_at),
        header.cwd,
        header.parent_session,
        header.seed_length.map(codec::to_sql_int),
    ]);
    match inserted {
        Ok(_) => Ok(()),
        Err(e)
            if e.sqlite_error()
                .is_some_and(|s| s.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY) =>
        {
            Err(WriteError::Refused(StoreError::AlreadyExists { session_id: header.id.clone() }))
        }
        Err(e) => Err(WriteError::Sql(e)),
    }
}

/// Inserts the rows of `events`, and the full-text index's row of each
/// message with text, in the caller's transaction.
fn insert_events(tx: &Transaction<'_>, session_id: &str, events: &[Event]) -> Result<(), rusqlite::Error> {
    let mut insert = tx.prepare_cached(INSERT_EVENT)?;
    let mut index = tx.prepare_cached(INSERT_SEARCH)?;
    for e in events {
        if let Some(text) = searchable_text(e) {
            let tokens = index_text(&text);
            if !tokens.is_empty() {
                index.execute(params![session_id, codec::to_sql_int(e.seq()), tokens])?;
            }
        }
        insert.execute(params![
            session_id,
            codec::to_sql_int(e.seq()),
            codec::to_sql_int(e.time()),
            e.event_type().as_str(),
            e.data(),
            e.source_event_seqs().map(codec::sources_json),
            e.surface_op().map(codec::surface_op_json),
        ])?;
    }
    Ok(())
}

/// The stored length of a session, or `None` when there is no such session.
/// The stored length of a session (`None` if there is no such session): one
/// past its largest seq. Two index look-ups, whatever the session's size.
///
/// Rows edited behind the store's back must not let an append continue a
/// log that `load` would refuse: the smallest seq must be 0 and the largest
/// one a plain non-negative number (a negative or huge seq is `corrupt`). A
/// deleted middle row is not seen here (that would take counting every
/// row); `load` refuses such a log with `seq-not-contiguous`.
fn stored_len(tx: &Transaction<'_>, session_id: &str, location: &str) -> Result<Option<u64>, WriteError> {
    let bounds = tx
        .prepare_cached(STORED_LEN)?
        .query_row([session_id], |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?)))
        .optional()?;
    match bounds {
        None => Ok(None),
        Some((None, _) | (_, None)) => Ok(Some(0)),
        Some((Some(0), Some(max))) if (0..i64::MAX).contains(&max) => Ok(Some(max as u64 + 1)),
        Some((Some(min), Some(max))) => Err(WriteError::Refused(StoreError::Corrupt {
            location: format!("{location}: events of session {session_id:?}"),
            detail: format!(
                "stored seqs run from {} to {}; a log starts at 0 and counts up, so nothing is appended",
                codec::from_sql_int(min),
                codec::from_sql_int(max)
            ),
            cause: None,
        })),
    }
}

/// Reads the header columns `created_at, cwd, parent_session, seed_length`,
/// starting at column `first`.
fn header_from_row(id: &str, row: &rusqlite::Row<'_>, first: usize) -> Result<SessionHeader, LoadError> {
    let read = || -> Result<SessionHeader, LoadError> {
        let created_at =
            codec::required_int(codec::value(row, first, "created_at", None)?, "created_at", None)?;
        let cwd = codec::text(codec::value(row, first + 1, "cwd", None)?, "cwd", None)?;
        let parent =
            codec::text(codec::value(row, first + 2, "parent_session", None)?, "parent_session", None)?;
        let seed =
            codec::optional_int(codec::value(row, first + 3, "seed_length", None)?, "seed_length", None)?;
        Ok(SessionHeader {
            id: id.to_owned(),
            created_at: codec::from_sql_int(created_at),
            cwd: cwd.map(str::to_owned),
            parent_session: parent.map(str::to_owned),
            seed_length: seed.map(codec::from_sql_int),
        })
    };
    let header = read().map_err(|e| LoadError::HeaderMalformed { detail: e.to_string() })?;
    // The limit every reader holds a header line to, as written to JSONL.
    header.check_size()?;
    Ok(header)
}

/// Sets the journal mode to WAL (a no-op once the file is in WAL mode: the
/// mode is kept in the file). Switching a new file needs an exclusive lock,
/// and SQLite reports `SQLITE_BUSY` at once, without its busy handler, while
/// another process is reading the file, as happens when several processes
/// open the same new file together: so retry until `timeout`.
fn switch_to_wal(conn: &Connection, location: &str, timeout: Duration) -> Result<(), StoreError> {
    let start = Instant::now();
    loop {
        let mode = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0));
        match mode {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            // Not switched (the old mode came back), or busy: wait and retry.
            Ok(_) => {}
            Err(e) if !poisons(&e) => {}
            Err(e) => return Err(sql_err(e, location, "switching to the WAL journal")),
        }
        if start.elapsed() >= timeout {
            return Err(StoreError::Locked {
                what: format!("{location} (switching to the WAL journal, for {timeout:?})"),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    // A new file's directory entry is durable only once its directory is.
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

impl SessionStore for SqliteStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        check_header(header)?;
        self.write("creating a session", |tx| insert_session(tx, header))?;
        tracing::debug!(session_id = %header.id, "created session");
        Ok(())
    }

    /// One transaction: either the whole session exists afterwards or
    /// nothing changed. The events are stored as given (check them with
    /// [`Session::from_log`](palimpsest_core_session::Session::from_log)
    /// first).
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        check_header(header)?;
        self.write("creating a whole session", |tx| {
            check_continues(&header.id, 0, events)?;
            insert_session(tx, header)?;
            insert_events(tx, &header.id, events)?;
            Ok(())
        })?;
        tracing::debug!(session_id = %header.id, events = events.len(), "created a whole session");
        Ok(())
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        self.write("appending", |tx| {
            let len = stored_len(tx, session_id, &self.location)?
                .ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
            self.fence(tx, session_id)?;
            check_continues(session_id, len, events)?;
            insert_events(tx, session_id, events)?;
            Ok(())
        })?;
        tracing::trace!(session_id, events = events.len(), "appended");
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        // A fresh collector per attempt: a read that is tried again (the
        // file changed under an immutable read) starts from nothing.
        self.read("loading a session", |tx| {
            let mut sink = CollectSink::default();
            self.read_session(tx, session_id, &mut sink)?;
            sink.finish(LoadReport::default())
                .ok_or_else(|| ReadError::Store(StoreError::NotFound { session_id: session_id.to_owned() }))
        })
    }

    fn load_into(&self, session_id: &str, sink: &mut dyn LoadSink) -> Result<LoadReport, StoreError> {
        let mut attempts = 0;
        self.read("loading a session", |tx| {
            attempts += 1;
            if attempts > 1 {
                // The sink has seen part of a read that must be done again.
                return Err(ReadError::Store(read_only::changing(&self.location)));
            }
            self.read_session(tx, session_id, &mut *sink)
        })?;
        Ok(LoadReport::default())
    }

    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        self.read("listing sessions", |tx| self.list_in(tx))
    }

    /// Three indexed look-ups in one read transaction (the last event, the
    /// last turn bracket, the first prompt), whatever the log's length:
    /// only those rows are read and checked.
    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        self.read("summarizing a session", |tx| {
            let header = self.stored_header(tx, session_id)?;
            let one = |sql: &str| -> Result<Option<Event>, ReadError> {
                let row = tx
                    .prepare_cached(sql)?
                    .query_row([session_id], |row| Ok((row.get::<_, i64>(0), codec::read_row(row, None))))
                    .optional()?;
                let Some((seq, row)) = row else { return Ok(None) };
                let seq = codec::from_sql_int(seq?);
                row.and_then(|r| r.decode(seq))
                    .map(Some)
                    .map_err(|e| ReadError::Store(self.corrupt(session_id, Some(seq), e)))
            };
            let last = one(LAST_EVENT)?;
            let mut summary = SessionSummary::empty(header);
            summary.events = last.as_ref().map_or(0, |e| e.seq() + 1);
            summary.last_activity = last.as_ref().map(Event::time);
            summary.last_turn = one(LAST_TURN)?;
            summary.first_prompt = one(FIRST_PROMPT)?;
            Ok(summary)
        })
    }

    /// The headers, then every session's last event, last turn bracket and
    /// first prompt in three statements over the whole store (each one
    /// look-up on the primary key's order per session). Only those rows are
    /// read and checked; a row that does not decode is its session's error.
    /// A store of a file with many sessions is summarized in two halves at
    /// once, the second on a read-only connection of its own (each
    /// session's summary is read in one snapshot, as the default's one read
    /// per session is): the look-ups are most of the time.
    fn summaries(&self) -> Result<palimpsest_persistence::Summaries, StoreError> {
        let headers = self.read("listing the sessions", |tx| self.list_in(tx))?;
        let split = match &self.path {
            Some(path) if headers.len() >= 2 * SUMMARIES_PER_CONNECTION => Some(path),
            _ => None,
        };
        let Some(path) = split else { return self.summaries_of(headers) };
        let mut first = headers;
        let second = first.split_off(first.len() / 2);
        let (first, second) = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                SqliteStore::open_read_only_with(path, self.options)
                    .and_then(|store| store.summaries_of(second))
            });
            let first = self.summaries_of(first);
            let second = other.join().unwrap_or_else(|_| {
                Err(StoreError::io("summarizing every session", std::io::Error::other("a thread failed")))
            });
            (first, second)
        });
        let mut all = first?;
        all.extend(second?);
        Ok(all)
    }

    /// Replaces the session's row of the `checkpoints` table, in one write
    /// transaction (refused, as every write, on a read-only store). Not
    /// fenced by holds: a checkpoint is a cache that changes nothing a load
    /// returns. A checkpoint of more events than the log holds is refused
    /// with `conflict` (`expected` the stored length, `found` its
    /// `log_len`), nothing written; one that does not match the log in any
    /// other way is kept, and ignored by every resume.
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        let json = checkpoint.to_json();
        self.write("saving a checkpoint", |tx| {
            let len = stored_len(tx, session_id, &self.location)?
                .ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
            if checkpoint.log_len() > len {
                return Err(WriteError::Refused(StoreError::Conflict {
                    session_id: session_id.to_owned(),
                    expected: len,
                    found: checkpoint.log_len(),
                }));
            }
            tx.prepare_cached(UPSERT_CHECKPOINT)?.execute(params![
                session_id,
                codec::to_sql_int(checkpoint.log_len()),
                json
            ])?;
            Ok(())
        })?;
        tracing::debug!(session_id, log_len = checkpoint.log_len(), "saved a checkpoint");
        Ok(true)
    }

    /// One read transaction: the header, the checkpoint row, the stored
    /// row at seq `log_len - 1` it is checked against, then only the rows
    /// from seq `log_len` on. A checkpoint that does not decode or does not
    /// match is ignored (`debug`, with why) and every row is read, as
    /// [`load`](SessionStore::load) reads them, with its errors.
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        self.read("resuming a session", |tx| {
            let header = self.stored_header(tx, session_id)?;
            if let Some(checkpoint) = self.matching_checkpoint(tx, session_id, &header)? {
                let from = checkpoint.log_len();
                let mut stmt = tx.prepare_cached(SELECT_EVENTS_FROM)?;
                let mut rows = stmt.query(params![session_id, codec::to_sql_int(from)])?;
                let mut tail = Vec::new();
                while let Some(row) = rows.next()? {
                    let index = from + tail.len() as u64;
                    let event = codec::read_row_ref(row, None)
                        .and_then(|r| r.decode(index))
                        .map_err(|e| ReadError::Store(self.corrupt(session_id, Some(index), e)))?;
                    tail.push(event);
                }
                return Ok(Resumable {
                    header,
                    checkpoint: Some(checkpoint),
                    tail,
                    report: LoadReport::default(),
                });
            }
            let mut sink = CollectSink::default();
            self.read_session(tx, session_id, &mut sink)?;
            let stored = sink.finish(LoadReport::default()).ok_or_else(|| {
                ReadError::Store(StoreError::NotFound { session_id: session_id.to_owned() })
            })?;
            Ok(Resumable::whole(stored))
        })
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        // One way to delete: `delete_many`'s, for one id.
        self.delete_many(&[session_id]).pop().unwrap_or(Ok(()))
    }

    /// One transaction for them all, and one pass over the full-text index
    /// per thousand sessions deleted: the index keeps `session_id`
    /// unindexed, so each `DELETE FROM search WHERE session_id = ?` reads
    /// every row of it (17 ms a session in a 10,000-session store, whose
    /// prune took 172 s). All or nothing on a failure of the transaction;
    /// a session held by another writer (`locked`) or missing
    /// (`not-found`) is its own outcome, and the others go.
    fn delete_many(&self, session_ids: &[&str]) -> Vec<Result<(), StoreError>> {
        /// Ids per pass over the index: under SQLite's bound on a
        /// statement's parameters.
        const PER_PASS: usize = 1000;
        let what = if session_ids.len() == 1 { "deleting a session" } else { "deleting sessions" };
        let deleted = self.write(what, |tx| {
            let mut outcomes = Vec::with_capacity(session_ids.len());
            let mut doomed = Vec::new();
            for &session_id in session_ids {
                match self.fence(tx, session_id) {
                    Ok(()) => {}
                    Err(WriteError::Refused(e)) => {
                        outcomes.push(Err(e));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                if tx.prepare_cached("DELETE FROM sessions WHERE id = ?1")?.execute([session_id])? == 0 {
                    outcomes.push(Err(StoreError::NotFound { session_id: session_id.to_owned() }));
                    continue;
                }
                tx.prepare_cached("DELETE FROM events WHERE session_id = ?1")?.execute([session_id])?;
                tx.prepare_cached("DELETE FROM checkpoints WHERE session_id = ?1")?.execute([session_id])?;
                holds::delete(tx, session_id)?;
                doomed.push(session_id);
                outcomes.push(Ok(()));
            }
            for ids in doomed.chunks(PER_PASS) {
                let marks = vec!["?"; ids.len()].join(",");
                tx.execute(
                    &format!("DELETE FROM search WHERE session_id IN ({marks})"),
                    rusqlite::params_from_iter(ids),
                )?;
            }
            Ok(outcomes)
        });
        match deleted {
            Ok(outcomes) => {
                let mut held = self.holds.lock().unwrap_or_else(|p| p.into_inner());
                for (id, outcome) in session_ids.iter().zip(&outcomes) {
                    if outcome.is_ok() {
                        held.remove(*id);
                        tracing::debug!(session_id = id, "deleted session");
                    }
                }
                outcomes
            }
            // Rolled back, or unknown: every id says so, the first with
            // the error itself.
            Err(e) => {
                let said = e.to_string();
                let mut first = Some(e);
                session_ids
                    .iter()
                    .map(|_| {
                        Err(first.take().unwrap_or_else(|| StoreError::Io {
                            context: format!("deleting sessions at {}", self.location),
                            source: Box::new(std::io::Error::other(said.clone())),
                        }))
                    })
                    .collect()
            }
        }
    }

    /// Asks the FTS5 index for the rows holding the index tokens of every
    /// term, as FTS5's tokenizer cuts it (every row when no term has any),
    /// keeps those whose indexed tokens hold every term, then reads each
    /// one's event row and confirms it with the reference matcher, session
    /// by session in the search order, until the limit. One read
    /// transaction: one snapshot, as a `load` is.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let expr = self.tokenizer.match_expr(query);
        self.read("searching", |tx| {
            let mut by_session: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
            {
                let refused = |e| self.index_refused(e, expr.as_deref());
                let sql = if expr.is_some() { SEARCH_CANDIDATES } else { SEARCH_EVERY_ROW };
                let mut stmt = tx.prepare_cached(sql).map_err(refused)?;
                let mut rows = match &expr {
                    Some(expr) => stmt.query([expr]),
                    None => stmt.query([]),
                }
                .map_err(refused)?;
                while let Some(row) = rows.next().map_err(refused)? {
                    if !fts::may_hold(row.get_ref(2)?, query.terms()) {
                        continue;
                    }
                    let id: String = row.get(0)?;
                    by_session.entry(id).or_default().push(row.get(1)?);
                }
            }
            let mut order = Vec::with_capacity(by_session.len());
            for (id, seqs) in by_session {
                let last = tx
                    .prepare_cached(LAST_ACTIVITY)?
                    .query_row([&id], |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?)))
                    .optional()?;
                // Index rows of a session that is not in `sessions` are not hits.
                if let Some((last, created)) = last {
                    order.push((codec::from_sql_int(last.unwrap_or(created)), id, seqs));
                }
            }
            order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            let mut found = HitCollector::new(query);
            let mut remaining = query.limit().unwrap_or(usize::MAX);
            for (last, id, mut seqs) in order {
                if remaining == 0 {
                    break;
                }
                seqs.sort_unstable();
                seqs.dedup();
                let mut hits = Vec::new();
                let mut stmt = tx.prepare_cached(SELECT_EVENT)?;
                for seq in seqs {
                    if hits.len() == remaining {
                        break;
                    }
                    let row =
                        stmt.query_row(params![id, seq], |row| Ok(codec::read_row(row, None))).optional()?;
                    let Some(row) = row else { continue };
                    let event = row.and_then(|r| r.decode(codec::from_sql_int(seq))).map_err(|e| {
                        ReadError::Store(self.corrupt(&id, Some(codec::from_sql_int(seq)), e))
                    })?;
                    hits.extend(query.hit(&id, &event));
                }
                remaining -= hits.len();
                found.add(&id, last, hits);
            }
            Ok(found.finish())
        })
    }

    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(earlier) = &inner.poisoned {
            return Err(self.poisoned_error(earlier));
        }
        // Under FULL every commit already fsynced the WAL; in memory, or
        // read-only, there is nothing to sync.
        if self.path.is_none() || inner.reader.is_some() || self.options.synchronous == Synchronous::Full {
            return Ok(());
        }
        match self.checkpoint(&inner) {
            Ok(()) => {
                tracing::trace!(session_id, "synced");
                Ok(())
            }
            Err(e) => {
                if poisons(&e) {
                    inner.poisoned = Some(format!("syncing: {e}"));
                }
                Err(sql_err(e, &self.location, "syncing (checkpointing the WAL)"))
            }
        }
    }

    /// A lease in the `holds` table, fenced by its token, with expiry by
    /// this machine's clock (see the crate docs): what keeps two processes
    /// from writing one session. Written in a `BEGIN IMMEDIATE`
    /// transaction, so two processes asking at once are served one after
    /// the other. An in-memory database grants none (`Ok(None)`).
    fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Option<Hold>, StoreError> {
        if self.path.is_none() {
            // An in-memory database: this store alone reaches it.
            return Ok(None);
        }
        let ours = self.our_token(session_id);
        let hold = self.write("taking a hold", |tx| {
            if stored_len(tx, session_id, &self.location)?.is_none() {
                return Err(WriteError::Refused(StoreError::NotFound { session_id: session_id.to_owned() }));
            }
            let now = holds::now_ms();
            let record = holds::read(tx, session_id, now)?;
            // Milliseconds since the epoch: a token outlives a deleted and
            // recreated session's hold row.
            let token = grant(session_id, holder, record.as_ref(), ours, now)?;
            let expires = holds::expiry(now, ttl);
            holds::upsert(tx, session_id, holder, token, expires)?;
            Ok(Hold::new(session_id, holder, token, Some(holds::time_of(expires))))
        })?;
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).insert(session_id.to_owned(), hold.token());
        tracing::debug!(session_id, holder, token = hold.token(), "took hold");
        Ok(Some(hold))
    }

    fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        let session_id = hold.session_id();
        self.write("renewing a hold", |tx| {
            if stored_len(tx, session_id, &self.location)?.is_none() {
                return Err(WriteError::Refused(StoreError::NotFound { session_id: session_id.to_owned() }));
            }
            let now = holds::now_ms();
            let record = holds::read(tx, session_id, now)?;
            check_renewal(session_id, hold.token(), self.our_token(session_id), record.as_ref())?;
            let expires = holds::expiry(now, ttl);
            holds::set_expiry(tx, session_id, hold.token(), expires)?;
            Ok(hold.renewed(holds::time_of(expires)))
        })
    }

    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        let session_id = hold.session_id();
        self.write("releasing a hold", |tx| {
            holds::set_expiry(tx, session_id, hold.token(), holds::now_ms())?;
            Ok(())
        })?;
        let mut ours = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        if ours.get(session_id) == Some(&hold.token()) {
            ours.remove(session_id);
        }
        tracing::debug!(session_id, token = hold.token(), "released hold");
        Ok(())
    }
}
