//! [`JsonlStore`]: a directory of session files, one per session.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use palimpsest_core_session::{Checkpoint, Event, SessionHeader};
use palimpsest_persistence::{Hold, Resumable, SessionStore, SessionSummary, StoreError, StoredSession};

use palimpsest_core_session::jsonl::ReadOptions;

use crate::file::{check_regular, read_header, read_session_file_with, sync_dir, SessionFile};
use crate::grant::{self, Grant};
use crate::name::{file_name, session_id, SUFFIX};

/// Sessions a thread of [`JsonlStore::summaries`] takes at least: below
/// that, starting a thread costs more than it saves.
const SUMMARIES_PER_THREAD: usize = 64;

type Handle = Arc<Mutex<SessionFile>>;

/// A session the store keeps open: its file (and so its lock), and the
/// hold granted on it, if one was (see [`crate::grant`]). Dropped
/// together, so a closed or deleted session forgets its hold.
#[derive(Debug)]
struct Open {
    file: Handle,
    grant: Option<Grant>,
}

impl Open {
    fn new(file: SessionFile) -> Open {
        Open { file: Arc::new(Mutex::new(file)), grant: None }
    }

    /// Whether `hold` is the hold this store granted and still keeps.
    fn granted(&self, hold: &Hold) -> bool {
        self.grant.as_ref().is_some_and(|g| g.is(hold))
    }
}

/// A [`SessionStore`] keeping each session in its own JSONL file
/// (`<dir>/<encoded id>.jsonl`, see the crate docs for the encoding).
///
/// The store keeps a [`SessionFile`] (and so its lock) for every session it
/// has created or appended to, until the session is deleted,
/// [`close`](JsonlStore::close)d, or the store is dropped. Loads of other
/// sessions read the file without locking it.
#[derive(Debug)]
pub struct JsonlStore {
    dir: PathBuf,
    open: Mutex<BTreeMap<String, Open>>,
    read: ReadOptions,
    #[cfg(feature = "testkit")]
    write_fault: Option<palimpsest_persistence::testkit::WriteFault>,
}

fn lock_handle(handle: &Handle) -> MutexGuard<'_, SessionFile> {
    handle.lock().unwrap_or_else(|poisoned| {
        // A writer panicked mid-append: what reached the file is unknown.
        let mut file = poisoned.into_inner();
        file.poison_after_panic();
        file
    })
}

impl JsonlStore {
    /// Opens the store in `dir`, creating the directory if it is missing.
    /// Nothing is locked or read until a session is used.
    pub fn open(dir: impl AsRef<Path>) -> Result<JsonlStore, StoreError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir)
            .map_err(|e| StoreError::io(format!("create store directory {}", dir.display()), e))?;
        if !dir.is_dir() {
            return Err(StoreError::io(
                format!("open store {}", dir.display()),
                io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        Ok(JsonlStore {
            dir: dir.to_owned(),
            open: Mutex::default(),
            read: ReadOptions::default(),
            #[cfg(feature = "testkit")]
            write_fault: None,
        })
    }

    /// Sets the line cap of every read of a session file: loads, the first
    /// append to a session (which reads its file), and the header lines
    /// `list` reads. A line longer than `options.max_line_bytes` is never
    /// held in memory; see [`SessionFile::with_read_options`] for what it
    /// makes of the load. Default: [`ReadOptions::default`], the format's
    /// own limit, so every line any writer of the format wrote is read.
    ///
    /// ```
    /// use palimpsest_core_session::jsonl::ReadOptions;
    /// use palimpsest_persistence_jsonl::JsonlStore;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = JsonlStore::open(dir.path())?.with_read_options(ReadOptions { max_line_bytes: 16 << 20, ..ReadOptions::default() });
    /// assert_eq!(store.read_options().max_line_bytes, 16 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_read_options(mut self, options: ReadOptions) -> JsonlStore {
        self.read = options;
        self
    }

    /// The line cap of this store's reads.
    pub fn read_options(&self) -> ReadOptions {
        self.read
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (or would hold) session `session_id`; `invalid-id`
    /// for an id that has no file name (empty, or too long).
    pub fn path_of(&self, session_id: &str) -> Result<PathBuf, StoreError> {
        Ok(self.dir.join(file_name(session_id)?))
    }

    /// Whether `path` can be opened as a store: an existing directory (a
    /// session file is a regular file). For callers that accept either.
    pub fn is_store_dir(path: &Path) -> bool {
        path.is_dir()
    }

    /// Releases this store's hold on a session (its file handle and lock,
    /// and the [`Hold`] granted on it, if any), without syncing. A no-op
    /// for a session the store does not hold.
    pub fn close(&self, session_id: &str) {
        self.handles().remove(session_id);
    }

    /// Takes the contract kit's fault switch: when it is armed, the next
    /// append writes the first bytes of its batch and fails with `io`, as a
    /// full disk would (feature `testkit`).
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn with_write_fault(mut self, fault: palimpsest_persistence::testkit::WriteFault) -> JsonlStore {
        self.write_fault = Some(fault);
        self
    }

    /// Makes the next write or sync of a held session fail (tests only).
    #[cfg(test)]
    pub(crate) fn inject(&self, session_id: &str, fault: crate::fault::Fault) {
        if let Some(handle) = self.cached(session_id) {
            lock_handle(&handle).fault = Some(fault);
        }
    }

    /// Every session file of the directory and the id its name encodes,
    /// in no order; a `.jsonl` file whose name encodes no id is `corrupt`.
    fn session_files(&self) -> Result<Vec<(PathBuf, String)>, StoreError> {
        let context = || format!("list {}", self.dir.display());
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| StoreError::io(context(), e))? {
            let entry = entry.map_err(|e| StoreError::io(context(), e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.ends_with(SUFFIX) {
                continue;
            }
            let path = entry.path();
            // The directory entry says what it is (no stat), unless it is a
            // link, which is followed as before.
            let is_dir = match entry.file_type() {
                Ok(t) if !t.is_symlink() => t.is_dir(),
                _ => path.is_dir(),
            };
            if is_dir {
                continue;
            }
            let Some(id) = session_id(&name) else {
                return Err(StoreError::Corrupt {
                    location: path.display().to_string(),
                    detail: "a .jsonl file whose name is not the encoding of a session id".into(),
                    cause: None,
                });
            };
            files.push((path, id));
        }
        Ok(files)
    }

    /// The summaries of `files` (see [`SessionStore::summaries`]). A file
    /// whose header cannot be read, or names another session, is listed
    /// under the id its name encodes, with `createdAt` 0 and its error:
    /// one broken file does not hide the others.
    fn summaries_of(
        &self,
        files: &[(PathBuf, String)],
    ) -> Result<palimpsest_persistence::Summaries, StoreError> {
        let mut all = Vec::with_capacity(files.len());
        for (path, id) in files {
            // `summary` reads the header too, and checks it names `id`.
            match self.summary(id) {
                Ok(summary) => all.push((summary.header.clone(), Ok(summary))),
                Err(e) => match read_header(path, self.read) {
                    // Deleted since the directory was read.
                    Ok(None) => {}
                    Ok(Some(header)) if header.id == *id => all.push((header, Err(e))),
                    // The header cannot be read, or names another session:
                    // the session is listed under the id its file name
                    // encodes, with the error, and the others still are.
                    Ok(Some(header)) => {
                        let wrong = check_id(path, &header.id, id).err().unwrap_or(e);
                        all.push((SessionHeader::new(id.clone(), 0), Err(wrong)));
                    }
                    Err(header_error) => all.push((SessionHeader::new(id.clone(), 0), Err(header_error))),
                },
            }
        }
        Ok(all)
    }

    fn handles(&self) -> MutexGuard<'_, BTreeMap<String, Open>> {
        // The map is only inserted into and removed from; a panic cannot
        // leave it half-changed.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cached(&self, session_id: &str) -> Option<Handle> {
        self.handles().get(session_id).map(|open| open.file.clone())
    }

    /// The held file of a session, opening (and locking) it if needed.
    fn handle(&self, session_id: &str) -> Result<Handle, StoreError> {
        // Opening holds the map's lock: two threads opening the same session
        // at once would otherwise see each other's file lock as `locked`.
        let mut handles = self.handles();
        Ok(self.open_in(&mut handles, session_id)?.file.clone())
    }

    /// The entry of a session in `handles` (the map, locked), opening (and
    /// locking) its file if needed.
    fn open_in<'m>(
        &self,
        handles: &'m mut BTreeMap<String, Open>,
        session_id: &str,
    ) -> Result<&'m mut Open, StoreError> {
        if !handles.contains_key(session_id) {
            let path = self.path_of(session_id)?;
            let mut file =
                SessionFile::open(&path).map_err(|e| with_id(e, session_id))?.with_read_options(self.read);
            check_id(&path, &file.header_id()?, session_id)?;
            handles.insert(session_id.to_owned(), Open::new(file));
        }
        // Just inserted if it was missing, under the map's lock.
        handles.get_mut(session_id).ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })
    }
}

/// Removes a sidecar left by a session file removed behind the store's
/// back, before a new session of the same id has one of its own. A
/// failure is only logged: a resume checks a sidecar against the file.
fn forget_checkpoint(path: &Path) {
    if let Err(e) = crate::checkpoint::remove(path) {
        tracing::warn!(path = %path.display(), error = %e, "could not remove an old checkpoint sidecar");
    }
}

/// Names the session, rather than its path, in a `not-found`.
fn with_id(e: StoreError, session_id: &str) -> StoreError {
    match e {
        StoreError::NotFound { .. } => StoreError::NotFound { session_id: session_id.to_owned() },
        e => e,
    }
}

/// A file whose header names another session (renamed by hand) is corrupt.
fn check_id(path: &Path, found: &str, expected: &str) -> Result<(), StoreError> {
    if found == expected {
        return Ok(());
    }
    Err(StoreError::Corrupt {
        location: format!("{}:1", path.display()),
        detail: format!(
            "the header names session {found:?}, but the file name is that of session {expected:?}"
        ),
        cause: None,
    })
}

impl SessionStore for JsonlStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        let path = self.path_of(&header.id)?;
        let mut handles = self.handles();
        let file = SessionFile::create(&path, header)?.with_read_options(self.read);
        handles.insert(header.id.clone(), Open::new(file));
        forget_checkpoint(&path);
        Ok(())
    }

    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        let path = self.path_of(&header.id)?;
        let mut handles = self.handles();
        let file = SessionFile::create_with_events(&path, header, events)?.with_read_options(self.read);
        handles.insert(header.id.clone(), Open::new(file));
        forget_checkpoint(&path);
        Ok(())
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        let handle = self.handle(session_id)?;
        let mut file = lock_handle(&handle);
        #[cfg(feature = "testkit")]
        if self.write_fault.as_ref().is_some_and(|f| f.take()) {
            file.fault = Some(crate::fault::Fault::Write { after: 10 });
        }
        file.append(events).map_err(|e| with_id(e, session_id))
    }

    /// Locks the session file now (as the first append would), for as long
    /// as this store keeps it: until the hold's
    /// [`release`](SessionStore::release), [`close`](JsonlStore::close), a
    /// delete, or the store's drop; the operating system drops the lock
    /// when the process ends. So the hold never expires (`expires_at` is
    /// `None`, `ttl` is unused). Its token only tells this grant from
    /// others (a writer without the lock cannot write the file at all): a
    /// new grant's is larger than every earlier one of this process; this
    /// store's own hold keeps its token. `locked`
    /// while another store, in this process or another, holds the session.
    fn hold(&self, session_id: &str, holder: &str, _ttl: Duration) -> Result<Option<Hold>, StoreError> {
        let mut handles = self.handles();
        let open = self.open_in(&mut handles, session_id)?;
        let grant = open.grant.insert(Grant::to(holder, open.grant.as_ref()));
        Ok(Some(grant.hold(session_id)))
    }

    /// The hold as it is (it does not expire) while it is this store's
    /// current hold of the session; `not-found` once the session's file is
    /// gone; `locked` once this store gave the hold up (released, closed)
    /// or never granted it: its lock is gone, a hold must be taken again.
    fn renew(&self, hold: &Hold, _ttl: Duration) -> Result<Hold, StoreError> {
        let session_id = hold.session_id();
        check_regular(&self.path_of(session_id)?).map_err(|e| with_id(e, session_id))?;
        if self.handles().get(session_id).is_some_and(|open| open.granted(hold)) {
            return Ok(hold.clone());
        }
        Err(grant::not_kept(hold))
    }

    /// Unlocks the session file (as [`close`](JsonlStore::close)) when
    /// `hold` is this store's current hold of it: the holder and token it
    /// granted. Any other hold (released before, of an earlier grant, of
    /// another holder or store, of a deleted session) changes nothing and
    /// is not an error; nor does it unlock a file this store holds with no
    /// hold granted (after an append).
    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        let session_id = hold.session_id();
        let mut handles = self.handles();
        if handles.get(session_id).is_some_and(|open| open.granted(hold)) {
            handles.remove(session_id);
            tracing::debug!(session_id, token = hold.token(), "released hold");
        }
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        let path = self.path_of(session_id)?;
        let stored = match self.cached(session_id) {
            Some(handle) => lock_handle(&handle).load()?,
            None => {
                check_regular(&path).map_err(|e| with_id(e, session_id))?;
                read_session_file_with(&path, self.read).map_err(|e| with_id(e, session_id))?
            }
        };
        check_id(&path, &stored.header.id, session_id)?;
        Ok(stored)
    }

    /// Read from the file's head and tail (the header, the lines back to
    /// the last turn bracket, the lines up to the first prompt), whatever
    /// its length, when the file is healthy; otherwise (a torn tail, a bad
    /// line among those read, a session this store is writing) from a full
    /// load, with its errors.
    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        let path = self.path_of(session_id)?;
        if self.cached(session_id).is_some() {
            let stored = self.load(session_id)?;
            return Ok(SessionSummary::of(stored.header, &stored.events));
        }
        check_regular(&path).map_err(|e| with_id(e, session_id))?;
        let summary = crate::read_session_summary(&path, self.read).map_err(|e| with_id(e, session_id))?;
        check_id(&path, &summary.header.id, session_id)?;
        Ok(summary)
    }

    /// Every session file's header, sorted by id. Hidden files (names
    /// starting with `.`), directories and names not ending in `.jsonl` are
    /// ignored; any other file is a session file, and one whose name is not
    /// an id's encoding, or whose header is unreadable or names another id,
    /// fails the listing with `corrupt` (or `version-unsupported`).
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        let mut headers = Vec::new();
        for (path, id) in self.session_files()? {
            if let Some(header) = read_header(&path, self.read)? {
                check_id(&path, &header.id, &id)?;
                headers.push(header);
            }
        }
        headers.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(headers)
    }

    /// One open of each file: its summary reads the header too (listing
    /// the sessions, then summarizing each, opened every file twice), and
    /// the files are shared among the machine's cores (decoding the head
    /// and tail lines is most of the work). A file whose summary cannot be
    /// read is read again as `list` reads it, so the errors are `list`'s
    /// and `summary`'s, as the default's.
    fn summaries(&self) -> Result<palimpsest_persistence::Summaries, StoreError> {
        let files = self.session_files()?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        let share = files.len().div_ceil(threads).max(SUMMARIES_PER_THREAD);
        if files.len() <= share {
            // One share: no thread to start.
            let mut all = self.summaries_of(&files)?;
            all.sort_by(|a, b| a.0.id.cmp(&b.0.id));
            return Ok(all);
        }
        let parts: Vec<Result<palimpsest_persistence::Summaries, StoreError>> = std::thread::scope(|scope| {
            let workers: Vec<_> =
                files.chunks(share).map(|part| scope.spawn(move || self.summaries_of(part))).collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join().unwrap_or_else(|_| {
                        Err(StoreError::io("summarize", io::Error::other("a thread failed")))
                    })
                })
                .collect()
        });
        let mut all = Vec::with_capacity(files.len());
        for part in parts {
            all.extend(part?);
        }
        all.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        Ok(all)
    }

    /// Writes the session's checkpoint sidecar (`<stem>.checkpoint.json`,
    /// see the crate docs) atomically: a temporary file in the store
    /// directory, synced and renamed over the old one. Finding where the
    /// checkpoint's last event line starts reads the file from the old
    /// sidecar's line on (the whole file the first time). `conflict` when
    /// the file holds fewer whole event lines than the checkpoint covers;
    /// `not-found` without a session file. Not fenced by holds: a
    /// checkpoint is a cache, and one that does not match the file is
    /// ignored by every resume.
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        let path = self.path_of(session_id)?;
        check_regular(&path).map_err(|e| with_id(e, session_id))?;
        // This store's own appends wait while the file is read.
        let handle = self.cached(session_id);
        let _appends = handle.as_ref().map(lock_handle);
        crate::checkpoint::save(&path, session_id, checkpoint)?;
        Ok(true)
    }

    /// From the checkpoint sidecar when it matches the file: the header
    /// line, then only the lines from the checkpoint's last event on (a
    /// seek), with a whole read's handling of a torn or unterminated last
    /// line. Without a usable sidecar, exactly [`load`](SessionStore::load).
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        let path = self.path_of(session_id)?;
        check_regular(&path).map_err(|e| with_id(e, session_id))?;
        let handle = self.cached(session_id);
        let mut appends = handle.as_ref().map(lock_handle);
        // Read under the writer's lock: its first append need not read the
        // whole file to find the end this read found.
        if let Some(r) = crate::checkpoint::resume_for(&path, self.read, appends.as_deref_mut()) {
            check_id(&path, &r.header.id, session_id)?;
            tracing::debug!(
                session_id,
                log_len = r.checkpoint.as_ref().map_or(0, Checkpoint::log_len),
                tail = r.tail.len(),
                "resuming from a checkpoint sidecar"
            );
            return Ok(r);
        }
        drop(appends);
        let stored = self.load(session_id)?;
        Ok(Resumable::whole(stored))
    }

    /// Deletes the session's file and its checkpoint sidecar. `locked` if
    /// another writer holds it.
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        let path = self.path_of(session_id)?;
        let remove = || {
            crate::checkpoint::remove(&path)?;
            fs::remove_file(&path).map_err(|e| StoreError::io(format!("delete {}", path.display()), e))
        };
        let mut handles = self.handles();
        // Hold the file's lock while removing it, so no writer is appending.
        match handles.remove(session_id) {
            Some(open) => {
                let mut file = lock_handle(&open.file);
                remove()?;
                // A thread that fetched this handle before the delete must
                // not append to the removed file.
                file.mark_deleted();
            }
            None => {
                let file = SessionFile::open(&path).map_err(|e| with_id(e, session_id))?;
                remove()?;
                drop(file);
            }
        }
        drop(handles);
        if let Err(e) = sync_dir(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not sync the store directory after a delete");
        }
        tracing::debug!(session_id, path = %path.display(), "deleted session file");
        Ok(())
    }

    /// Syncs the session's file if this store wrote to it; a session this
    /// store did not write needs nothing (`not-found` if it does not exist).
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        match self.cached(session_id) {
            Some(handle) => lock_handle(&handle).sync(),
            None => {
                let path = self.path_of(session_id)?;
                match path.try_exists() {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
                    Err(e) => Err(StoreError::io(format!("stat {}", path.display()), e)),
                }
            }
        }
    }
}
