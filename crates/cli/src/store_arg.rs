//! `STORE [--session ID]`: where a command finds the session it reads.
//!
//! STORE is one of
//!
//! * a **JSONL session file**: one session (`--session`, if given, must be
//!   its id);
//! * a **JSONL store directory**: one `<encoded id>.jsonl` file per session
//!   (`palimpsest_persistence_jsonl::JsonlStore`);
//! * a **SQLite database**: a file that starts with the SQLite header, or a
//!   path ending in `.db` (`palimpsest_persistence_sqlite::SqliteStore`);
//! * a **PostgreSQL store**: a `postgres://` or `postgresql://` URL
//!   (`palimpsest_persistence_postgres::PgStore`).
//!
//! [`crate::location`] reads the argument (contract §7); this module opens
//! it and finds the session.
//!
//! `--session` may be left out when the store holds exactly one session;
//! otherwise the command stops with exit 2 and lists the ids. A STORE that
//! does not exist is an I/O error (exit 2): reading never creates a store.
//!
//! A command opens STORE for [`Access::Read`] unless it writes to it
//! (`repair --write`, `fork`): a SQLite database is then opened read-only
//! (`SqliteStore::open_read_only`), so reading changes no byte of it,
//! creates no file beside it, and works where the user cannot write; a
//! PostgreSQL store is opened without creating its tables.
//!
//! Every command resolves its argument here, so they all accept the same
//! forms and report the same errors.

use std::fs;
use std::path::{Path, PathBuf};

use palimpsest_core_session::jsonl::ReadOptions;
use palimpsest_core_session::{AppendGuard, Event, Session, SessionHeader};
use palimpsest_persistence::search::{session_hits, HitCollector};
use palimpsest_persistence::{
    LoadReport, SearchHit, SearchQuery, SessionStore, SessionSummary, StoreError, StoredSession,
};
use palimpsest_persistence_jsonl::name::file_name;
use palimpsest_persistence_jsonl::{read_session_file, read_session_summary, JsonlStore, SessionFile};
use palimpsest_persistence_postgres::PgStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::check::{self, Checked, Finding, Retain, StoreFindings};
use crate::error::{from_store, CliError, Exit};
use crate::location::Location;

/// The `STORE [--session ID]` arguments every reading command takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// A session file (`.jsonl`), a JSONL store directory, a SQLite database (`.db`), or a postgres:// URL
    /// [default: ./palimpsest.db, the store `palimpsest run` writes].
    #[arg(value_name = "STORE")]
    pub(crate) store: Option<PathBuf>,
    /// The session to read; may be left out when STORE holds exactly one.
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
}

/// An opened STORE.
#[derive(Debug)]
pub(crate) enum Store {
    /// A bare JSONL session file.
    File(PathBuf),
    /// A JSONL store directory.
    Dir(JsonlStore),
    /// A SQLite database (boxed, as the PostgreSQL store: the variants
    /// stay the size of the small ones).
    Sqlite(Box<SqliteStore>),
    /// A PostgreSQL store, and how messages name it (no password).
    Postgres(Box<PgStore>, PathBuf),
}

/// What a command does to the STORE it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// It only reads: a SQLite database is opened read-only.
    Read,
    /// It may append or add a session (`repair --write`, `fork`).
    Write,
}

/// A session's header with its summary, or why it could not be read.
pub(crate) type SummaryOf = (SessionHeader, Result<SessionSummary, CliError>);

/// Why a session file cannot be made at `path`: it exists, and what it
/// holds (a file is taken whatever session it holds, and naming the new
/// session's id there said something false).
pub(crate) fn taken_file(path: &Path) -> String {
    // A FIFO is not read (that would wait for a writer for ever), nor a
    // device: neither is a session file to keep.
    if fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return "the path already exists and is not a regular file".to_owned();
    }
    match palimpsest_persistence_jsonl::read_session_summary(path, Default::default()) {
        Ok(s) => format!(
            "the file already exists and holds session {:?}",
            crate::output::printable_line(&s.header.id)
        ),
        Err(_) => "the file already exists and is not a session this build reads".to_owned(),
    }
}

impl Store {
    /// Opens an existing STORE, for reading only or also for writing.
    pub(crate) fn open_existing(path: &Path, access: Access) -> Result<Store, CliError> {
        let location = Location::parse(path)?;
        let shown = location.shown();
        // An existing store, for reading or writing: nothing is created,
        // so a command refused on an empty file or schema leaves it empty.
        if let Location::Postgres(url) = &location {
            let store = Location::connect_postgres(url, false)?;
            return Ok(Store::Postgres(Box::new(store), PathBuf::from(shown)));
        }
        let meta =
            fs::metadata(path).map_err(|e| CliError::io(shown.clone(), format!("cannot read: {e}")))?;
        match location {
            Location::Sqlite(_) if meta.is_file() => {
                let opened = match access {
                    Access::Read => SqliteStore::open_read_only(path),
                    Access::Write => Location::open_existing_sqlite(path),
                };
                opened.map(|s| Store::Sqlite(Box::new(s))).map_err(|e| from_store(&e, &shown))
            }
            // Contract section 7: a path ending in `.db` is a SQLite store,
            // as `convert` and the writers read it too, never a directory.
            Location::Sqlite(_) if meta.is_dir() => Err(CliError::io(
                shown,
                "is a directory; a path ending in `.db` names a SQLite database (contract §7)",
            )),
            _ if JsonlStore::is_store_dir(path) => {
                JsonlStore::open(path).map(Store::Dir).map_err(|e| from_store(&e, &shown))
            }
            // A pipe is read once as a session file; a writing command
            // (`delete`, `repair --write`, `fork` beside it) needs the file
            // itself, and on a FIFO with no writer it waited forever.
            _ if matches!(access, Access::Write) && !meta.is_file() => Err(CliError::usage(format!(
                "{shown}: not a regular file; a command that writes a session file needs the file itself"
            ))),
            _ => Ok(Store::File(path.to_owned())),
        }
    }

    /// The store behind a directory, database or server; `None` for a bare file.
    pub(crate) fn backend(&self) -> Option<&dyn SessionStore> {
        match self {
            Store::File(_) => None,
            Store::Dir(s) => Some(s),
            Store::Sqlite(s) => Some(&**s),
            Store::Postgres(s, _) => Some(&**s),
        }
    }

    /// The path the user gave.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Store::File(p) => p,
            Store::Dir(s) => s.dir(),
            Store::Sqlite(s) => s.path().unwrap_or(Path::new(":memory:")),
            Store::Postgres(_, shown) => shown,
        }
    }

    fn shown(&self) -> String {
        self.path().display().to_string()
    }

    /// What kind of store this is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Store::File(_) => "JSONL file",
            Store::Dir(_) => "JSONL directory",
            Store::Sqlite(_) => "SQLite database",
            Store::Postgres(..) => "PostgreSQL store",
        }
    }

    /// The headers of every session, sorted by id.
    pub(crate) fn list(&self) -> Result<Vec<SessionHeader>, CliError> {
        match (self, self.backend()) {
            (Store::File(p), _) => Ok(vec![self.read_file_summary(p)?.header]),
            (_, Some(s)) => s.list().map_err(|e| from_store(&e, &self.shown())),
            (_, None) => Ok(Vec::new()),
        }
    }

    /// Checks a SQLite store as a whole, beyond the session being read
    /// (`SqliteStore::check_store`), while `beside` runs: every finding is a
    /// violation without a seq, named by its stable code
    /// (`store-integrity`, `store-orphan-events`, `store-seq-gap`); `None`
    /// for JSONL stores, whose files hold one session each. The audit runs
    /// on a thread of its own with a connection of its own: it reads every
    /// page of the store while the session's check reads its rows, and the
    /// two overlap (both only read). An in-memory store is audited after.
    pub(crate) fn check_store_beside<R: Send>(
        &self,
        session: Option<&str>,
        beside: impl FnOnce() -> R + Send,
    ) -> (R, Result<Option<StoreFindings>, CliError>) {
        let Store::Sqlite(s) = self else { return (beside(), Ok(None)) };
        let Some(path) = s.path() else {
            let value = beside();
            return (value, self.store_findings(s, session));
        };
        std::thread::scope(|scope| {
            let audit = scope.spawn(|| {
                let own = SqliteStore::open_read_only(path).map_err(|e| from_store(&e, &self.shown()))?;
                self.store_findings(&own, session)
            });
            let value = beside();
            let found =
                audit.join().unwrap_or_else(|_| Err(CliError::io(self.shown(), "the store's audit failed")));
            (value, found)
        })
    }

    /// The store's audit, split: what concerns the whole store or
    /// `session` (the one checked), and the seq gaps of other sessions,
    /// which do not make `session` invalid (an outside probe: one
    /// session's gap made every session of a 213-session store invalid).
    /// Event rows of no session stay the store's: no session is theirs.
    fn store_findings(
        &self,
        store: &SqliteStore,
        session: Option<&str>,
    ) -> Result<Option<StoreFindings>, CliError> {
        let found = store.check_store().map_err(|e| from_store(&e, &self.shown()))?;
        let (mut findings, mut elsewhere) = (Vec::new(), Vec::new());
        for v in found {
            match (&v.session_id, session) {
                (Some(other), Some(checked))
                    if other != checked && v.code == palimpsest_persistence_sqlite::STORE_SEQ_GAP =>
                {
                    elsewhere.push(format!("{}: {}", v.code, v.message));
                }
                _ => findings.push(Finding::store(v.code, v.message)),
            }
        }
        Ok(Some(StoreFindings { origin: self.shown(), findings, elsewhere }))
    }

    /// Picks the session of a store directory or database: `wanted`, or
    /// the only one there is. A bare file holds one session, named by its
    /// header: `None` (the header is read, and `wanted` checked, by
    /// [`Target::check`], so a bad header is reported as one).
    pub(crate) fn resolve(&self, wanted: Option<&str>) -> Result<Option<String>, CliError> {
        if let Store::File(_) = self {
            return Ok(None);
        }
        // A whole id names its file: no need to read every other header, so
        // one unreadable file does not keep a directory's other sessions
        // from being named in full.
        if let (Store::Dir(s), Some(wanted)) = (self, wanted) {
            if s.path_of(wanted).is_ok_and(|p| p.is_file()) {
                return Ok(Some(wanted.to_owned()));
            }
        }
        let ids: Vec<String> = self.list()?.into_iter().map(|h| h.id).collect();
        if let Some(wanted) = wanted {
            return unique_id(&ids, wanted, &self.shown(), self.kind()).map(Some);
        }
        match ids.as_slice() {
            [one] => Ok(Some(one.clone())),
            [] => Err(CliError {
                code: "not-found".into(),
                location: self.shown(),
                message: format!("the {} holds no sessions", self.kind()),
                exit: Exit::Usage,
            }),
            many => Err(CliError {
                code: "usage".into(),
                location: self.shown(),
                message: format!(
                    "the {} holds {} sessions; pick one with --session: {}",
                    self.kind(),
                    many.len(),
                    many.join(", ")
                ),
                exit: Exit::Usage,
            }),
        }
    }

    /// Reads and checks session `id` (see [`crate::check`]), held whole; a
    /// bare file's one session whatever `id` says.
    pub(crate) fn check(&self, id: &str) -> Result<Checked, CliError> {
        self.check_keeping(id, Retain::Whole)
    }

    /// [`Store::check`], keeping what `retain` says of the session: with
    /// [`Retain::Surface`] the log is streamed through the checks, never
    /// held (what `validate` needs).
    pub(crate) fn check_keeping(&self, id: &str, retain: Retain) -> Result<Checked, CliError> {
        match self {
            Store::File(p) => check::check_file(p, retain),
            Store::Dir(s) => {
                let path = s.path_of(id).map_err(|e| from_store(&e, &self.shown()))?;
                if !path.exists() {
                    return Err(self.not_found(id));
                }
                if !path.is_file() {
                    // A FIFO would block the read, a device never end it.
                    return Err(CliError::refused(
                        "corrupt",
                        path.display().to_string(),
                        "not a regular file; a session file is a regular file".to_owned(),
                    ));
                }
                let checked = check::check_file(&path, retain)?;
                match checked.report.session.as_ref().map(|s| s.id()) {
                    Some(found) if found != id => Err(CliError::refused(
                        "corrupt",
                        path.display().to_string(),
                        format!("the file of session {id:?} holds session {found:?}"),
                    )),
                    _ => Ok(checked),
                }
            }
            Store::Sqlite(_) | Store::Postgres(..) => {
                let origin = self.origin(id);
                let Some(store) = self.backend() else { return Err(self.not_found(id)) };
                let mut sink = check::CheckSink::new(retain);
                match store.load_into(id, &mut sink) {
                    Ok(_) => {}
                    // A row that breaks a rule is a violation of the log, as
                    // a line of a file is (`validate --json` lists it).
                    Err(StoreError::Corrupt { cause: Some(cause), .. }) if sink.stopped_at_row(&cause) => {}
                    Err(e) => return Err(self.load_error(&e, id, &origin)),
                }
                let report = sink.finish().ok_or_else(|| self.not_found(id))?;
                Ok(Checked::new(report, origin))
            }
        }
    }

    /// Loads session `id` as stored (events well-formed, not yet checked
    /// against each other); a bare file's one session whatever `id` says.
    pub(crate) fn load(&self, id: &str) -> Result<StoredSession, CliError> {
        let origin = self.origin(id);
        match (self, self.backend()) {
            (Store::File(p), _) => self.read_file(p),
            (_, Some(s)) => s.load(id).map_err(|e| self.load_error(&e, id, &origin)),
            (_, None) => Err(self.not_found(id)),
        }
    }

    /// What `sessions` shows of every session, in `list`'s order
    /// ([`SessionStore::summaries`]: one read for the whole store where the
    /// backend can); a session whose summary cannot be read holds its
    /// error. For a bare file, its head and tail.
    pub(crate) fn summaries(&self) -> Result<Vec<SummaryOf>, CliError> {
        match (self, self.backend()) {
            (Store::File(p), _) => {
                let summary = self.read_file_summary(p)?;
                Ok(vec![(summary.header.clone(), Ok(summary))])
            }
            (_, Some(s)) => {
                let all = s.summaries().map_err(|e| from_store(&e, &self.shown()))?;
                Ok(all
                    .into_iter()
                    .map(|(header, summary)| {
                        let summary =
                            summary.map_err(|e| self.load_error(&e, &header.id, &self.origin(&header.id)));
                        (header, summary)
                    })
                    .collect())
            }
            (_, None) => Ok(Vec::new()),
        }
    }

    /// The messages of every session that hold every term of `query`
    /// ([`SessionStore::search`]); for a bare file, the reference scan of
    /// its one session.
    pub(crate) fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, CliError> {
        match (self, self.backend()) {
            (Store::File(p), _) => {
                let stored = self.read_file(p)?;
                let id = &stored.header.id;
                let last = stored.events.last().map_or(stored.header.created_at, Event::time);
                let mut found = HitCollector::new(query);
                found.add(id, last, session_hits(id, &stored.events, query));
                Ok(found.finish())
            }
            (_, Some(s)) => s.search(query).map_err(|e| from_store(&e, &self.shown())),
            (_, None) => Ok(Vec::new()),
        }
    }

    /// How messages name session `id` of this store.
    pub(crate) fn origin(&self, id: &str) -> String {
        match self {
            Store::File(_) => self.shown(),
            Store::Dir(s) => s.path_of(id).map_or_else(|_| self.shown(), |p| p.display().to_string()),
            Store::Sqlite(_) | Store::Postgres(..) => format!("{}#{id}", self.shown()),
        }
    }

    /// Appends `events` to session `id` (a bare file's one session whatever
    /// `id` says) under the store's writer lock or transaction, then syncs.
    /// `conflict` if the log changed since it was read.
    pub(crate) fn append(&self, id: &str, events: &[Event]) -> Result<(), CliError> {
        let origin = self.origin(id);
        let result = match (self, self.backend()) {
            (Store::File(p), _) => SessionFile::open(p).and_then(|mut f| {
                f.append(events)?;
                f.sync()
            }),
            // Held while written: a worker running the session is not
            // written behind its back (`locked` naming it instead).
            (_, Some(s)) => {
                let ttl = crate::open_store::hold_ttl();
                s.hold(id, &crate::open_store::holder_name(), ttl).and_then(|hold| {
                    let written = s.append(id, events).and_then(|()| s.sync(id));
                    if let Some(hold) = hold {
                        if let Err(e) = s.release(&hold) {
                            tracing::debug!(session_id = id, error = %e, "could not release the hold; it expires");
                        }
                    }
                    written
                })
            }
            (_, None) => Err(StoreError::NotFound { session_id: id.to_owned() }),
        };
        result.map_err(|e| {
            let mut error = from_store(&e, &origin);
            if !e.wrote_nothing() {
                // The file or database may hold all, part or none of them.
                let first = events.first().map_or(0, Event::seq);
                let seqs = first..first + events.len() as u64;
                error.message = format!("{}: {}", e.write_outcome(&seqs), error.message);
            }
            error
        })
    }

    /// Deletes session `id` (a bare file: the file and its checkpoint
    /// sidecar, under its writer lock).
    /// `locked` when another writer holds it.
    pub(crate) fn delete(&self, id: &str) -> Result<(), CliError> {
        let origin = self.origin(id);
        match (self, self.backend()) {
            (Store::File(p), _) => {
                let file = SessionFile::open(p).map_err(|e| from_store(&e, &origin))?;
                // Its checkpoint first, as a directory store deletes one.
                palimpsest_persistence_jsonl::sidecar::remove(p).map_err(|e| from_store(&e, &origin))?;
                fs::remove_file(p)
                    .map_err(|e| CliError::io(origin.clone(), format!("cannot delete: {e}")))?;
                drop(file);
                Ok(())
            }
            (_, Some(s)) => s.delete(id).map_err(|e| self.load_error(&e, id, &origin)),
            (_, None) => Err(self.not_found(id)),
        }
    }

    /// Deletes sessions `ids`, each as [`Store::delete`] would: one outcome
    /// per id, in order; a store deletes them together where it can
    /// ([`SessionStore::delete_many`]).
    pub(crate) fn delete_many(&self, ids: &[&str]) -> Vec<Result<(), CliError>> {
        match (self, self.backend()) {
            (Store::File(_), _) | (_, None) => ids.iter().map(|id| self.delete(id)).collect(),
            (_, Some(s)) => s
                .delete_many(ids)
                .into_iter()
                .zip(ids)
                .map(|(outcome, id)| outcome.map_err(|e| self.load_error(&e, id, &self.origin(id))))
                .collect(),
        }
    }

    /// Whether a session `id` exists here, or (for a bare file) whether the
    /// file [`Store::write_new`] would write for `id` exists, or the file
    /// itself holds session `id`.
    pub(crate) fn has_session(&self, id: &str) -> Result<bool, CliError> {
        match self {
            Store::File(p) => {
                let beside = self.new_file_path(p, id)?;
                Ok(beside.exists() || self.read_file(p).is_ok_and(|s| s.header.id == id))
            }
            Store::Dir(s) => Ok(s.path_of(id).map_err(|e| from_store(&e, &self.shown()))?.exists()),
            Store::Sqlite(_) | Store::Postgres(..) => Ok(self.list()?.iter().any(|h| h.id == id)),
        }
    }

    /// Writes a new, whole session and syncs it, all or nothing
    /// ([`SessionStore::create_with_events`] on a directory, database or
    /// server; [`SessionFile::create_with_events`] for a bare file). A bare
    /// JSONL file holds one session, so the new one goes beside it, in the
    /// file a JSONL store would give it. `already-exists` (exit 1) when the
    /// id is taken. Returns how messages name the new session.
    pub(crate) fn write_new(&self, header: &SessionHeader, events: &[Event]) -> Result<String, CliError> {
        let id = &header.id;
        match (self, self.backend()) {
            (Store::File(p), _) => {
                let path = self.new_file_path(p, id)?;
                let shown = path.display().to_string();
                let written =
                    SessionFile::create_with_events(&path, header, events).and_then(|mut f| f.sync());
                written.map(|()| shown.clone()).map_err(|e| match e {
                    // A file is taken whatever it holds: say what it holds,
                    // not that session `id` exists.
                    StoreError::AlreadyExists { .. } => {
                        CliError::refused("already-exists", shown, taken_file(&path))
                    }
                    e => from_store(&e, &shown),
                })
            }
            (_, Some(s)) => {
                let origin = self.origin(id);
                s.create_with_events(header, events)
                    .and_then(|()| s.sync(id))
                    .map_err(|e| from_store(&e, &origin))?;
                if let Store::Dir(dir) = self {
                    // Release the file (and its lock) now, not when the store is dropped.
                    dir.close(id);
                }
                Ok(origin)
            }
            (_, None) => Err(self.not_found(id)),
        }
    }

    /// Saves a checkpoint of `session`, as just written, beside its log in
    /// this store (a directory, database or server; beside a bare file,
    /// the file's sidecar, for a session written beside it at `written_to`),
    /// at a turn boundary only. A failure is a warning: the checkpoint is a
    /// cache, and the write it follows stands.
    pub(crate) fn save_checkpoint(&self, session: &Session, written_to: &str) {
        let saved = match self.backend() {
            Some(store) => palimpsest_persistence::save_checkpoint(store, session).map(drop),
            None if session.last_turn().1 => Ok(()),
            None => palimpsest_persistence_jsonl::sidecar::save(
                Path::new(written_to),
                session.id(),
                &session.checkpoint(),
            ),
        };
        if let Err(e) = saved {
            crate::output::warning(&format!(
                "{}: could not save a checkpoint: {e}",
                self.origin(session.id())
            ));
        }
    }

    /// Where a new session `id` goes beside the bare file `file`.
    fn new_file_path(&self, file: &Path, id: &str) -> Result<PathBuf, CliError> {
        let name = file_name(id).map_err(|e| from_store(&e, &self.shown()))?;
        Ok(file.parent().unwrap_or(Path::new("")).join(name))
    }

    fn read_file(&self, path: &Path) -> Result<StoredSession, CliError> {
        let shown = path.display().to_string();
        read_session_file(path).map_err(|e| match e {
            StoreError::NotFound { .. } => CliError::io(shown.clone(), "cannot read: no such file"),
            e => from_store(&e, &shown),
        })
    }

    fn read_file_summary(&self, path: &Path) -> Result<SessionSummary, CliError> {
        let shown = path.display().to_string();
        read_session_summary(path, ReadOptions::default()).map_err(|e| match e {
            StoreError::NotFound { .. } => CliError::io(shown.clone(), "cannot read: no such file"),
            e => from_store(&e, &shown),
        })
    }

    fn not_found(&self, id: &str) -> CliError {
        CliError {
            code: "not-found".into(),
            location: self.shown(),
            message: format!("no session {id:?} in this {}", self.kind()),
            exit: Exit::Usage,
        }
    }

    pub(crate) fn load_error(&self, e: &StoreError, id: &str, origin: &str) -> CliError {
        match e {
            StoreError::NotFound { .. } => self.not_found(id),
            e => from_store(e, origin),
        }
    }
}

/// The session `wanted` names among `ids`: itself, or the one id it is a
/// unique prefix of. An ambiguous prefix is a usage error listing the
/// candidates; no match is `not-found`. Every command that takes a session
/// id resolves it here.
pub(crate) fn unique_id(ids: &[String], wanted: &str, shown: &str, kind: &str) -> Result<String, CliError> {
    if ids.iter().any(|id| id == wanted) {
        return Ok(wanted.to_owned());
    }
    let candidates: Vec<&String> = ids.iter().filter(|id| id.starts_with(wanted)).collect();
    match candidates.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(CliError {
            code: "not-found".into(),
            location: shown.to_owned(),
            message: format!("no session {wanted:?} in this {kind}"),
            exit: Exit::Usage,
        }),
        many => Err(CliError {
            code: "usage".into(),
            location: shown.to_owned(),
            message: format!(
                "{wanted:?} is the start of {} session ids; give more of it: {}",
                many.len(),
                many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
            exit: Exit::Usage,
        }),
    }
}

/// The store a reading command reads when STORE is left out: the one
/// `palimpsest run` writes by default, in the current directory.
pub(crate) const DEFAULT_STORE: &str = crate::run::DEFAULT_STORE;

/// STORE as given, or else [`DEFAULT_STORE`] when it exists. When it does
/// not: `not-found` (exit 2) saying how to name one; nothing is created
/// (reading never creates a store, contract §7).
pub(crate) fn store_or_default(given: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(given) = given {
        return Ok(given.to_owned());
    }
    let default = PathBuf::from(DEFAULT_STORE);
    if fs::symlink_metadata(&default).is_ok() {
        return Ok(default);
    }
    // Right after `palimpsest demo`, its store is what a new user means.
    let demo = crate::demo::DEFAULT_STORE;
    let message = if fs::symlink_metadata(demo).is_ok() {
        format!("no store given and none here; pass STORE (the demo wrote {demo} here) or run `palimpsest run` first")
    } else {
        "no store given and none here; pass STORE or run `palimpsest run` first".to_owned()
    };
    Err(CliError {
        code: "not-found".into(),
        location: format!("./{DEFAULT_STORE}"),
        message,
        exit: Exit::Usage,
    })
}

/// One session of a STORE, as a command names it.
#[derive(Debug)]
pub(crate) struct Target {
    /// The opened store.
    pub(crate) store: Store,
    /// The session id; `None` for a bare file (its header names it).
    id: Option<String>,
    /// The id asked for with `--session`.
    wanted: Option<String>,
}

impl Target {
    /// Session `id` of `store`.
    pub(crate) fn new(store: Store, id: String) -> Target {
        Target { store, wanted: Some(id.clone()), id: Some(id) }
    }

    /// Reads and checks the session, held whole.
    pub(crate) fn check(&self) -> Result<Checked, CliError> {
        self.check_keeping(Retain::Whole)
    }

    /// [`Target::check`], keeping what `retain` says of the session.
    pub(crate) fn check_keeping(&self, retain: Retain) -> Result<Checked, CliError> {
        let Some(id) = &self.id else {
            let checked = match &self.store {
                Store::File(p) => check::check_file(p, retain)?,
                _ => return Err(CliError::usage("no session named")),
            };
            let found = checked.report.session.as_ref().map(|s| s.id().to_owned());
            return match (&self.wanted, found) {
                (Some(w), Some(found)) if *w != found => Err(CliError {
                    code: "not-found".into(),
                    location: self.store.shown(),
                    message: format!("this file holds session {found:?}, not {w:?}"),
                    exit: Exit::Usage,
                }),
                _ => Ok(checked),
            };
        };
        self.store.check_keeping(id, retain)
    }

    /// The session from its store's checkpoint and the events after it
    /// ([`SessionStore::load_resumable`]), as an agent resuming it holds it
    /// (`derive --from-checkpoint`): the surface and the tail are read, not
    /// the log, and the tail is checked by every rule and invariant. The
    /// checkpoint is trusted for the events it covers; it is checked
    /// against the header and the last of them only. `None` when the store
    /// has no checkpoint that matches the log, or the tail breaks a rule or
    /// an invariant: the caller then reads and checks the whole log, and
    /// reports what it finds. Reading never writes a checkpoint.
    pub(crate) fn resumed(&self) -> Result<Option<(Session, LoadReport)>, CliError> {
        let resumable = match (&self.id, self.store.backend(), &self.store) {
            (Some(id), Some(store), _) => {
                store.load_resumable(id).map_err(|e| self.store.load_error(&e, id, &self.store.origin(id)))?
            }
            // A bare file: its sidecar, as a directory keeps one per file;
            // without one, `None` at once (the caller's whole read is
            // streamed: a whole load here held a 3M-event file, 784 MB).
            (None, None, Store::File(path)) => {
                match palimpsest_persistence_jsonl::sidecar::resume(path)
                    .map_err(|e| from_store(&e, &self.store.shown()))?
                {
                    Some(resumable) => resumable,
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        let id = resumable.header.id.clone();
        let id = &id;
        let Some(checkpoint) = resumable.checkpoint else { return Ok(None) };
        // A torn last line is dropped by the resume as by a whole read (the
        // store reports it with the file's own line): what a resuming agent
        // holds. (It used to mean a whole read here, at crash recovery,
        // where a bounded resume matters most.)
        let report = resumable.report;
        let guard: Box<dyn AppendGuard> = Box::new(palimpsest_invariants::InvariantGuard::new());
        match Session::resume_guarded(resumable.header, checkpoint, resumable.tail, Some(guard)) {
            Ok(session) => Ok(Some((session, report))),
            Err(e) => {
                tracing::debug!(session_id = %id, code = e.code(), error = %e, "not resuming from the checkpoint; reading the whole log");
                Ok(None)
            }
        }
    }

    /// The session's id in its store; `None` for a bare file.
    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// How messages name the session: the file, or `STORE#ID`.
    pub(crate) fn origin(&self) -> String {
        match &self.id {
            Some(id) => self.store.origin(id),
            None => self.store.shown(),
        }
    }

    /// Saves a checkpoint of `session` (this target's session, as written)
    /// beside its log, where the store keeps checkpoints. A failure is a
    /// warning: the checkpoint is a cache, and the write it follows stands.
    pub(crate) fn save_checkpoint(&self, session: &Session) {
        self.store.save_checkpoint(session, &self.store.shown());
    }

    /// Appends `events` to the session, then syncs (see [`Store::append`]).
    pub(crate) fn append(&self, events: &[Event]) -> Result<(), CliError> {
        self.store.append(self.id.as_deref().unwrap_or_default(), events)
    }
}

/// Opens STORE and picks the session: the one place every command that
/// takes `STORE [--session ID]` resolves its argument.
pub(crate) fn open(args: &StoreArgs, access: Access) -> Result<Target, CliError> {
    let store = Store::open_existing(&store_or_default(args.store.as_deref())?, access)?;
    let id = store.resolve(args.session.as_deref())?;
    // A bare file names its session in its header: the id asked for must
    // be that one, in full. Elsewhere a prefix has been resolved.
    let wanted = match &store {
        Store::File(_) => args.session.clone(),
        _ => id.clone(),
    };
    Ok(Target { store, id, wanted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_store_is_an_io_error_and_is_not_created() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let missing = dir.path().join("nope.db");
        let e = Store::open_existing(&missing, Access::Read).map(|_| ()).unwrap_err();
        assert_eq!((e.code.as_str(), e.exit), ("io", Exit::Usage));
        assert!(!missing.exists());
    }
}
