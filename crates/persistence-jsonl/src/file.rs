//! [`SessionFile`]: one JSONL session file, held for writing under an
//! exclusive advisory lock; and [`read_session_file`], the lock-free reader.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use palimpsest_core_session::jsonl::{
    header_line, write_events, JsonlDecoder, JsonlLog, JsonlReader, ReadOptions, TornTail,
};
use palimpsest_core_session::{
    AppendError, Event, LoadError, SessionHeader, MAX_EVENT_LINE_BYTES, SESSION_FORMAT_VERSION,
};
use palimpsest_persistence::{check_continues, check_header, LoadReport, StoreError, StoredSession};

use crate::capped;

/// Whether reads under `options` take the fast paths, which read the
/// file in large pieces: for a cap of at least the format's limit (the
/// default, [`ReadOptions::default`], is exactly that), where a piece is
/// small beside the longest line. A smaller cap reads through
/// [`capped`], which never holds more than the cap and one read chunk of a
/// line. Either way a line over the cap is refused with `event-too-large`
/// before it is held whole.
pub(crate) fn reads_in_pieces(options: ReadOptions) -> bool {
    options.max_line_bytes >= MAX_EVENT_LINE_BYTES
}

/// What is known about the file's end, kept so an append never re-reads it.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The header's session id.
    pub(crate) id: String,
    /// The next seq, or why the stored log cannot be continued.
    pub(crate) next_seq: Result<u64, (u64, AppendError)>,
    /// Bytes in the file (a torn tail included).
    pub(crate) file_len: u64,
    /// The torn last line, still in the file.
    pub(crate) torn: Option<TornTail>,
    /// The last whole line lacks its `\n`.
    pub(crate) missing_newline: bool,
}

/// One bare JSONL session file (contract section 6), open for appending.
///
/// Holds an exclusive advisory lock ([`File::try_lock`]) on the file from
/// [`create`](SessionFile::create) or [`open`](SessionFile::open) until it is
/// dropped: a second writer, in this process or another, gets `locked`.
/// Readers ([`read_session_file`]) take no lock.
///
/// The file is read once, at the first [`load`](SessionFile::load) or
/// [`append`](SessionFile::append); after that an append only checks the
/// file's length (one `fstat`) and writes. See the crate docs for what a
/// returned append guarantees.
#[derive(Debug)]
pub struct SessionFile {
    path: PathBuf,
    file: File,
    tail: Option<Tail>,
    /// Why writes are refused: an earlier write or sync failed.
    poisoned: Option<String>,
    /// Written since the last sync.
    dirty: bool,
    /// Created here; the directory entry is not yet synced.
    dir_unsynced: bool,
    /// The store deleted the file while this handle was shared.
    deleted: bool,
    /// The line cap of every read.
    read: ReadOptions,
    /// The last append's bytes, its allocation kept for the next one (an
    /// agent appends one small event at a time, all day).
    buf: Vec<u8>,
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fault: Option<crate::fault::Fault>,
}

/// The largest append buffer a file keeps for its next append.
const KEPT_BUFFER_BYTES: usize = 64 * 1024;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io_err(context: impl Into<String>, e: io::Error) -> StoreError {
    StoreError::io(context, e)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Maps a format error to a store error, with `path:line` as the location.
pub(crate) fn load_error(path: &Path, e: LoadError) -> StoreError {
    match e {
        // Which file: a store directory's `list` reads every header, and
        // one file of another version must be findable among thousands.
        LoadError::HeaderVersionUnsupported { found } => StoreError::VersionUnsupported {
            found: format!("{found} ({})", path.display()),
            expected: SESSION_FORMAT_VERSION.to_string(),
        },
        e => StoreError::Corrupt {
            location: format!("{}:{}", path.display(), e.line().unwrap_or(1)),
            detail: e.to_string(),
            cause: Some(e),
        },
    }
}

/// Checks that `path` is a regular file (a link to one counts), as every
/// session file and sidecar of a store is: a FIFO would block the reader
/// forever waiting for a writer, and a device (`/dev/zero`) never ends.
/// `not-found` if nothing is there, `corrupt` for anything else.
pub(crate) fn check_regular(path: &Path) -> Result<(), StoreError> {
    match fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(StoreError::Corrupt {
            location: shown(path),
            detail: format!("not a regular file but {}; a session file is a regular file", file_kind(&m)),
            cause: None,
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(not_found(path)),
        Err(e) => Err(io_err(format!("stat {}", shown(path)), e)),
    }
}

/// What a file that is not a regular file is, in words.
#[cfg(unix)]
fn file_kind(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "something else"
    }
}

#[cfg(not(unix))]
fn file_kind(m: &fs::Metadata) -> &'static str {
    if m.is_dir() {
        "a directory"
    } else {
        "something else"
    }
}

fn not_found(path: &Path) -> StoreError {
    StoreError::NotFound { session_id: shown(path) }
}

fn lock(file: &File, path: &Path) -> Result<(), StoreError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => {
            Err(StoreError::Locked { what: format!("session file {}", shown(path)) })
        }
        Err(TryLockError::Error(e)) => Err(io_err(format!("lock {}", shown(path)), e)),
    }
}

/// Whether `path` still names the file `file` has open (it was not deleted
/// or replaced between open and lock).
#[cfg(unix)]
fn still_there(file: &File, path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (held, named) = match (file.metadata(), fs::metadata(path)) {
        (Ok(h), Ok(n)) => (h, n),
        (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    Ok(held.dev() == named.dev() && held.ino() == named.ino())
}

#[cfg(not(unix))]
fn still_there(_file: &File, path: &Path) -> io::Result<bool> {
    path.try_exists()
}

/// Syncs a directory, so that names created or removed in it are durable.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be synced through std on this platform.
#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl SessionFile {
    /// Creates a session file holding just `header`, and locks it.
    /// `already-exists` if `path` exists.
    ///
    /// The header is written to a hidden temporary file in the same
    /// directory, which is then hard-linked to `path`, so the file appears
    /// whole or not at all (no reader sees a file without its header). On
    /// file systems without hard links it is created in place.
    pub fn create(path: impl AsRef<Path>, header: &SessionHeader) -> Result<SessionFile, StoreError> {
        SessionFile::create_with_events(path, header, &[])
    }

    /// Creates a session file holding `header` and `events` (seqs `0..n`,
    /// else `conflict`), and locks it. `already-exists` if `path` exists.
    ///
    /// As [`create`](SessionFile::create), the whole file is written to a
    /// hidden temporary file (synced first, when it holds events) and then
    /// hard-linked to `path`: the session appears with every event or not
    /// at all, even across a crash. Only on file systems without hard links
    /// is it written in place, where a crash can leave part of it.
    pub fn create_with_events(
        path: impl AsRef<Path>,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<SessionFile, StoreError> {
        let path = path.as_ref();
        check_header(header)?;
        check_continues(&header.id, 0, events)?;
        let mut bytes = header_line(header).into_bytes();
        write_events(events, &mut bytes);
        let dir = parent_of(path);
        let (tmp, file) = create_temp(dir)?;
        let created = lock(&file, &tmp)
            .and_then(|()| (&file).write_all(&bytes).map_err(|e| io_err(format!("write {}", shown(&tmp)), e)))
            .and_then(|()| match events.is_empty() {
                true => Ok(()),
                false => file.sync_data().map_err(|e| io_err(format!("sync {}", shown(&tmp)), e)),
            })
            .and_then(|()| match fs::hard_link(&tmp, path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    Err(StoreError::AlreadyExists { session_id: header.id.clone() })
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::Unsupported | io::ErrorKind::PermissionDenied) => {
                    tracing::debug!(path = %path.display(), error = %e, "no hard links here; creating in place");
                    Ok(false)
                }
                Err(e) => Err(io_err(format!("link {} to {}", shown(&tmp), shown(path)), e)),
            });
        if let Err(e) = fs::remove_file(&tmp) {
            tracing::warn!(path = %tmp.display(), error = %e, "could not remove a temporary file");
        }
        let file = match created? {
            true => file,
            false => create_in_place(path, header, &bytes)?,
        };
        let len = bytes.len() as u64;
        tracing::debug!(session_id = %header.id, path = %path.display(), "created session file");
        Ok(SessionFile {
            path: path.to_owned(),
            file,
            tail: Some(Tail {
                id: header.id.clone(),
                next_seq: Ok(events.len() as u64),
                file_len: len,
                torn: None,
                missing_newline: false,
            }),
            poisoned: None,
            dirty: true,
            dir_unsynced: true,
            buf: Vec::new(),
            deleted: false,
            read: ReadOptions::default(),
            #[cfg(any(test, feature = "testkit"))]
            fault: None,
        })
    }

    /// Opens an existing session file for appending, and locks it:
    /// `not-found` if there is none, `locked` if another writer holds it.
    /// The file is read at the first [`load`](SessionFile::load) or
    /// [`append`](SessionFile::append).
    pub fn open(path: impl AsRef<Path>) -> Result<SessionFile, StoreError> {
        let path = path.as_ref();
        // A file deleted or replaced between our open and our lock is not
        // the session at `path`: open again (a few times, then give up).
        for _ in 0..3 {
            check_regular(path)?;
            let file = match OpenOptions::new().read(true).append(true).open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_found(path)),
                Err(e) => return Err(io_err(format!("open {}", shown(path)), e)),
            };
            lock(&file, path)?;
            if still_there(&file, path).map_err(|e| io_err(format!("stat {}", shown(path)), e))? {
                return Ok(SessionFile {
                    path: path.to_owned(),
                    file,
                    tail: None,
                    poisoned: None,
                    dirty: false,
                    dir_unsynced: false,
                    buf: Vec::new(),
                    deleted: false,
                    read: ReadOptions::default(),
                    #[cfg(any(test, feature = "testkit"))]
                    fault: None,
                });
            }
            if !path.exists() {
                return Err(not_found(path));
            }
        }
        Err(StoreError::Locked { what: format!("session file {} (it keeps being replaced)", shown(path)) })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the line cap of every later read of this file (by
    /// [`load`](SessionFile::load) and by the first append). A line longer
    /// than `options.max_line_bytes` is never held in memory: the load fails
    /// with `corrupt` (`event-too-large` at its line, terminated or not, or
    /// `header-malformed` on line 1), exactly as [`JsonlLog::parse_with`]
    /// judges the same bytes. Default: [`ReadOptions::default`], the
    /// format's own limit, which every writer holds events to; a larger cap
    /// reads no more.
    pub fn with_read_options(mut self, options: ReadOptions) -> SessionFile {
        self.read = options;
        self
    }

    /// The line cap of this file's reads.
    pub fn read_options(&self) -> ReadOptions {
        self.read
    }

    /// Reads the whole file: header, events, and a torn tail if there is one
    /// (reported, left in place; the next append cuts it off). Events are
    /// well-formed; the rules relating them (contiguity included) are for
    /// [`Session::from_log`](palimpsest_core_session::Session::from_log).
    pub fn load(&mut self) -> Result<StoredSession, StoreError> {
        let (log, file_len) = if reads_in_pieces(self.read) {
            let context = || format!("read {}", shown(&self.path));
            self.file.seek(SeekFrom::Start(0)).map_err(|e| io_err(context(), e))?;
            read_in_pieces(&self.file, &self.path, self.read, |e| io_err(context(), e))?
        } else {
            let capped = self.read_all_capped()?;
            let log = capped::parse_capped(&capped, self.read).map_err(|e| load_error(&self.path, e))?;
            (log, capped.file_len)
        };
        let next_seq = match log.events.iter().enumerate().find(|(i, e)| e.seq() != *i as u64) {
            None => Ok(log.events.len() as u64),
            Some((i, e)) => {
                Err((i as u64 + 2, AppendError::SeqNotContiguous { seq: e.seq(), expected: i as u64 }))
            }
        };
        self.tail = Some(tail_of(&log.header, next_seq, &log, file_len));
        Ok(StoredSession {
            header: log.header,
            events: log.events,
            report: LoadReport { torn_tail: log.torn_tail },
        })
    }

    /// Appends a batch: all events or none, in one write. `conflict` if the
    /// batch does not continue the stored log; `corrupt` if the stored log
    /// cannot be continued; `io` (and every later write refused with `io`
    /// until the file is reopened) if the write fails. A torn tail is cut
    /// off first, and a missing final `\n` is written with the batch.
    /// The first append since the last sync first compares the file's
    /// length with what this writer knows, and reads the file again if a
    /// writer that ignored the lock changed it; later appends trust it.
    ///
    /// Returns once the bytes are handed to the operating system; they are
    /// durable after [`sync`](SessionFile::sync).
    pub fn append(&mut self, events: &[Event]) -> Result<(), StoreError> {
        self.check_writable()?;
        if !self.dirty {
            self.notice_writes_behind_the_lock()?;
        }
        let tail = self.tail()?;
        let next = match &tail.next_seq {
            Ok(n) => *n,
            Err((line, error)) => {
                let e = LoadError::Rule { line: Some(*line), error: error.clone() };
                return Err(load_error(&self.path, e));
            }
        };
        check_continues(&tail.id, next, events)?;
        if events.is_empty() {
            return Ok(());
        }
        let (torn, missing_newline, mut file_len) = (tail.torn, tail.missing_newline, tail.file_len);
        if let Some(torn) = torn {
            tracing::warn!(
                session_id = %self.tail_id(), path = %self.path.display(), line = torn.line, bytes = torn.len,
                "cutting off a torn last line before appending"
            );
            if let Err(e) = self.file.set_len(torn.offset) {
                return Err(self.poison(format!("cut the torn tail off {}", shown(&self.path)), e));
            }
            file_len = torn.offset;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        if missing_newline {
            buf.push(b'\n');
        }
        // Reserved by `write_events` from the events themselves: a fixed
        // guess reallocated whenever a line outgrew it.
        write_events(events, &mut buf);
        let written = self.write_batch(&buf);
        let len = buf.len() as u64;
        // A large batch's buffer is not worth keeping.
        if buf.capacity() <= KEPT_BUFFER_BYTES {
            self.buf = buf;
        }
        if let Err(e) = written {
            // Best effort: take back whatever part of the batch got written,
            // so a reopen is less likely to see half a batch.
            let _ = self.file.set_len(file_len);
            return Err(self.poison(format!("append to {}", shown(&self.path)), e));
        }
        if let Some(tail) = self.tail.as_mut() {
            tail.next_seq = Ok(next + events.len() as u64);
            tail.file_len = file_len + len;
            tail.torn = None;
            tail.missing_newline = false;
        }
        self.dirty = true;
        tracing::trace!(session_id = %self.tail_id(), seq = next, events = events.len(), bytes = len, "appended");
        Ok(())
    }

    /// Reads the file again at the next use if its length is not the one
    /// this writer knows: another writer ignored the lock.
    ///
    /// Asked before the first append since the last sync (or since
    /// opening), not before every append. Between two syncs the writer
    /// trusts what it wrote itself: the lock is what keeps other writers
    /// out, an agent streams many appends a turn a few microseconds apart,
    /// and the extra syscall cost about 15% of a one-event append (see
    /// `docs/performance.md`, item 3 of issue 20). A line written behind
    /// the lock between two syncs lands before this writer's next lines and
    /// is found here at the first append after the sync: `corrupt` (two
    /// lines with one seq), and nothing more is written.
    fn notice_writes_behind_the_lock(&mut self) -> Result<(), StoreError> {
        // The file's length, asked as a seek to its end: one `lseek`, a
        // fraction of the `statx` that `metadata()` costs (the file is
        // opened for appending, so where its offset points changes nothing
        // a write does; reads seek to the start first).
        let len =
            self.file.seek(SeekFrom::End(0)).map_err(|e| io_err(format!("seek {}", shown(&self.path)), e))?;
        if self.tail.as_ref().is_some_and(|t| t.file_len != len) {
            tracing::warn!(path = %self.path.display(), "session file changed under its lock; reading it again");
            self.tail = None;
        }
        // A file renamed over this one (an editor's save, `sed -i`, a copy
        // and a rename) leaves this writer holding the old one, now nameless:
        // every turn written to it was lost, silently (an outside probe).
        let there = still_there(&self.file, &self.path)
            .map_err(|e| io_err(format!("stat {}", shown(&self.path)), e))?;
        if !there {
            return Err(StoreError::Locked {
                what: format!(
                    "{}: another program replaced or removed the file while this writer held it (an editor's \
                     save, a copy renamed over it); nothing was written; open the session again",
                    shown(&self.path)
                ),
            });
        }
        Ok(())
    }

    /// Makes every append so far durable: `fdatasync`s the file (if written
    /// since the last sync) and, once after creation, its directory. A failed
    /// sync refuses later writes with `io` until the file is reopened.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.check_writable()?;
        if self.dirty {
            let result = self.sync_file();
            if let Err(e) = result {
                return Err(self.poison(format!("sync {}", shown(&self.path)), e));
            }
            self.dirty = false;
            // What was appended since the last sync went into this file: if
            // another program renamed a file over it meanwhile (an editor's
            // save mid-turn), those appends are not in the file at the path.
            // Said here, at the turn's end, rather than lost in silence.
            let there = still_there(&self.file, &self.path)
                .map_err(|e| io_err(format!("stat {}", shown(&self.path)), e))?;
            if !there {
                let what = format!(
                    "{}: another program replaced or removed the file while this writer held it; what was \
                     appended since the last sync is not in the file now at that path; open the session again",
                    shown(&self.path)
                );
                self.poisoned = Some(what.clone());
                return Err(StoreError::Locked { what });
            }
        }
        if self.dir_unsynced {
            let dir = parent_of(&self.path).to_owned();
            if let Err(e) = sync_dir(&dir) {
                return Err(self.poison(format!("sync directory {}", shown(&dir)), e));
            }
            self.dir_unsynced = false;
        }
        Ok(())
    }

    /// The header's session id: from its line alone when the file was not
    /// read yet (taking a hold asks it, and a bounded resume then reads
    /// only the lines after the checkpoint), else from what was read. A
    /// header line that does not read is the whole read's error.
    pub(crate) fn header_id(&mut self) -> Result<String, StoreError> {
        if let Some(tail) = &self.tail {
            return Ok(tail.id.clone());
        }
        if let Ok(Some((header, _))) = crate::checkpoint::header_line(&mut self.file, self.read) {
            return Ok(header.id);
        }
        Ok(self.tail()?.id.clone())
    }

    fn tail_id(&self) -> &str {
        self.tail.as_ref().map_or("", |t| t.id.as_str())
    }

    /// Takes `tail`, read by a resume of this file under this writer's
    /// lock, as what the next append needs, unless the writer knows its
    /// end already: so that the first append after a bounded resume does
    /// not read the whole file again to find it. The first append still
    /// compares the file's length with `tail`'s (a writer that ignored the
    /// lock is noticed as before).
    pub(crate) fn know_tail(&mut self, tail: Tail) {
        if self.tail.is_none() && !self.dirty {
            self.tail = Some(tail);
        }
    }

    fn tail(&mut self) -> Result<&Tail, StoreError> {
        let tail = match self.tail.take() {
            Some(t) => t,
            None => self.scan()?,
        };
        Ok(self.tail.insert(tail))
    }

    /// Reads the file through, keeping no events: what an append needs.
    /// In pieces where the line cap allows, so that memory stays a piece
    /// (`repair --write` of a 3M-event file held all 742 MB of it).
    fn scan(&mut self) -> Result<Tail, StoreError> {
        if reads_in_pieces(self.read) {
            let context = || format!("read {}", shown(&self.path));
            self.file.seek(SeekFrom::Start(0)).map_err(|e| io_err(context(), e))?;
            return scan_in_pieces(&self.file, &self.path, self.read, |e| io_err(context(), e));
        }
        let capped::Capped { bytes, file_len, overlong } = self.read_all_capped()?;
        let corrupt = |e| load_error(&self.path, e);
        if let Some(o) = overlong.as_ref().filter(|o| o.line == 1) {
            return Err(corrupt(o.error(self.read)));
        }
        let mut reader = JsonlReader::new(&bytes, self.read).map_err(corrupt)?;
        let mut next_seq = Ok(0);
        // Every line after the header is an event: event `i` is on line `i + 2`.
        for (i, event) in reader.by_ref().enumerate() {
            let event = event.map_err(corrupt)?;
            if let Ok(n) = next_seq {
                if event.seq() != n {
                    let line = i as u64 + 2;
                    next_seq = Err((line, AppendError::SeqNotContiguous { seq: event.seq(), expected: n }));
                } else {
                    next_seq = Ok(n + 1);
                }
            }
        }
        if let Some(o) = overlong {
            // Every line before it was read: it is the first error.
            return Err(corrupt(o.error(self.read)));
        }
        let torn = reader.torn_tail();
        Ok(Tail {
            id: reader.header().id.clone(),
            next_seq,
            file_len,
            torn,
            missing_newline: reader.missing_newline(),
        })
    }

    fn read_all_capped(&mut self) -> Result<capped::Capped, StoreError> {
        let context = || format!("read {}", shown(&self.path));
        self.file.seek(SeekFrom::Start(0)).map_err(|e| io_err(context(), e))?;
        capped::read_capped(&self.file, self.read).map_err(|e| io_err(context(), e))
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        if self.deleted {
            return Err(not_found(&self.path));
        }
        match &self.poisoned {
            None => Ok(()),
            Some(why) => Err(StoreError::io(
                format!("refusing to write {}: an earlier write failed; reopen it", shown(&self.path)),
                io::Error::other(why.clone()),
            )),
        }
    }

    fn poison(&mut self, context: String, e: io::Error) -> StoreError {
        tracing::error!(path = %self.path.display(), error = %e, "{context} failed; refusing further writes");
        self.poisoned = Some(format!("{context}: {e}"));
        self.tail = None;
        io_err(context, e)
    }

    /// Marks the file as deleted: later writes are `not-found`.
    pub(crate) fn mark_deleted(&mut self) {
        self.deleted = true;
        self.tail = None;
    }

    /// Marks the file unusable for writing (after a panic while it was held).
    pub(crate) fn poison_after_panic(&mut self) {
        self.poisoned.get_or_insert_with(|| "a writer panicked while holding the file".into());
        self.tail = None;
    }

    #[cfg(not(any(test, feature = "testkit")))]
    fn write_batch(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }

    #[cfg(any(test, feature = "testkit"))]
    fn write_batch(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.fault.take() {
            Some(crate::fault::Fault::Write { after }) => {
                self.file.write_all(&buf[..after.min(buf.len())])?;
                Err(io::Error::other("injected write failure"))
            }
            Some(other) => {
                self.fault = Some(other);
                self.file.write_all(buf)
            }
            None => self.file.write_all(buf),
        }
    }

    #[cfg(not(any(test, feature = "testkit")))]
    fn sync_file(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    #[cfg(any(test, feature = "testkit"))]
    fn sync_file(&mut self) -> io::Result<()> {
        match self.fault.take() {
            Some(crate::fault::Fault::Sync) => Err(io::Error::other("injected sync failure")),
            other => {
                self.fault = other;
                self.file.sync_data()
            }
        }
    }
}

fn tail_of(
    header: &SessionHeader,
    next_seq: Result<u64, (u64, AppendError)>,
    log: &JsonlLog,
    file_len: u64,
) -> Tail {
    Tail {
        id: header.id.clone(),
        next_seq,
        file_len,
        torn: log.torn_tail,
        missing_newline: log.missing_newline,
    }
}

/// Creates a hidden temporary file in `dir` (ignored by
/// [`JsonlStore::list`](crate::JsonlStore)).
pub(crate) fn create_temp(dir: &Path) -> Result<(PathBuf, File), StoreError> {
    sweep_abandoned_temps(dir);
    loop {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".palimpsest-{}-{n}.tmp", std::process::id()));
        match OpenOptions::new().read(true).append(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io_err(format!("create a file in {} (no such directory)", shown(dir)), e))
            }
            Err(e) => return Err(io_err(format!("create a file in {}", shown(dir)), e)),
        }
    }
}

/// How old an abandoned temporary file must be before it is removed.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes, once per directory and process, the temporary files of
/// writers that are gone: a process killed while writing a session (a
/// `convert` killed mid-copy) left its whole copy behind, hundreds of
/// megabytes that no later run removed (an outside probe). A file is
/// removed only when the process its name carries is not running and it
/// has not changed for ten minutes. Where running processes cannot be
/// told (no `/proc`), nothing is removed. Failures are only logged.
fn sweep_abandoned_temps(dir: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
        if swept.iter().any(|d| d == dir) {
            return;
        }
        swept.push(dir.to_owned());
    }
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(abandoned_temp_pid) else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let old = entry
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok());
        if old.is_none_or(|age| age < ABANDONED_AFTER) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => {
                tracing::info!(path = %entry.path().display(), pid, "removed a temporary file its writer left")
            }
            Err(e) => {
                tracing::debug!(path = %entry.path().display(), error = %e, "cannot remove an abandoned temporary file")
            }
        }
    }
}

/// The process id in a temporary file's name (`.palimpsest-<pid>-<n>.tmp`).
fn abandoned_temp_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".palimpsest-")?.strip_suffix(".tmp")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The fallback of [`SessionFile::create`] without hard links.
fn create_in_place(path: &Path, header: &SessionHeader, bytes: &[u8]) -> Result<File, StoreError> {
    let file = match OpenOptions::new().read(true).append(true).create_new(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(StoreError::AlreadyExists { session_id: header.id.clone() })
        }
        Err(e) => return Err(io_err(format!("create {}", shown(path)), e)),
    };
    lock(&file, path)?;
    (&file).write_all(bytes).map_err(|e| io_err(format!("write {}", shown(path)), e))?;
    Ok(file)
}

/// Reads a session file without locking it (another process may be
/// appending): header, events and a torn tail, as
/// [`SessionFile::load`] does. `not-found` names the path.
pub fn read_session_file(path: &Path) -> Result<StoredSession, StoreError> {
    read_session_file_with(path, ReadOptions::default())
}

/// [`read_session_file`] with a line cap: a line longer than
/// `options.max_line_bytes` is never held in memory (see
/// [`SessionFile::with_read_options`] for what such a line makes of the load).
pub fn read_session_file_with(path: &Path, options: ReadOptions) -> Result<StoredSession, StoreError> {
    let read_err = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => not_found(path),
        _ => io_err(format!("read {}", shown(path)), e),
    };
    let log = if reads_in_pieces(options) {
        let file = File::open(path).map_err(read_err)?;
        read_in_pieces(file, path, options, read_err)?.0
    } else {
        let capped = File::open(path).and_then(|f| capped::read_capped(f, options)).map_err(read_err)?;
        capped::parse_capped(&capped, options).map_err(|e| load_error(path, e))?
    };
    Ok(StoredSession {
        header: log.header,
        events: log.events,
        report: LoadReport { torn_tail: log.torn_tail },
    })
}

/// Bytes read from the file at a time by [`read_in_pieces`].
const PIECE_BYTES: usize = 8 << 20;

/// Reads a whole session file (from where `file` is) through a
/// [`JsonlDecoder`], a piece at a time: the file is decoded as it is read
/// and never held whole, so a load needs the session's memory plus one
/// piece, not the file's size again. Returns the log and the bytes read.
///
/// A line longer than `options.max_line_bytes` is refused as soon as a
/// piece shows it is: it is counted to its end, never held whole.
pub(crate) fn read_in_pieces(
    file: impl Read,
    path: &Path,
    options: ReadOptions,
    read_err: impl Fn(io::Error) -> StoreError,
) -> Result<(JsonlLog, u64), StoreError> {
    // Every event is kept: they share their payloads, a text per run of lines.
    decode_in_pieces(file, path, options, read_err, true, |_| {})
}

/// The loop of [`read_in_pieces`], handing the decoder to `between` after
/// each piece (to take the events decoded so far, or not). `share`: the
/// events share their payloads ([`JsonlDecoder::share_payloads`]), for a
/// reader that keeps them all.
fn decode_in_pieces(
    mut file: impl Read,
    path: &Path,
    options: ReadOptions,
    read_err: impl Fn(io::Error) -> StoreError,
    share: bool,
    mut between: impl FnMut(&mut JsonlDecoder),
) -> Result<(JsonlLog, u64), StoreError> {
    let mut decoder = JsonlDecoder::new(options);
    decoder.share_payloads(share);
    let (mut pending, mut len) = (Vec::with_capacity(PIECE_BYTES), 0u64);
    loop {
        // A line longer than a piece makes `pending` grow until it ends,
        // or until it is over the cap.
        let read = file.by_ref().take(PIECE_BYTES as u64).read_to_end(&mut pending).map_err(&read_err)?;
        if read == 0 {
            break;
        }
        len += read as u64;
        let used = decoder.feed(&pending).map_err(|e| load_error(path, e))?;
        pending.drain(..used);
        between(&mut decoder);
        if pending.len() > decoder.next_line_cap() {
            let len = capped::line_len(&mut file, pending.len() as u64).map_err(&read_err)?;
            let error = decoder.overlong(len, &pending);
            return Err(load_error(path, error));
        }
    }
    let log = decoder.finish(&pending).map_err(|e| load_error(path, e))?;
    Ok((log, len))
}

/// [`read_in_pieces`] keeping no events: the file's [`Tail`], with the
/// same errors, in the same order, as a whole read's.
fn scan_in_pieces(
    file: impl Read,
    path: &Path,
    options: ReadOptions,
    read_err: impl Fn(io::Error) -> StoreError,
) -> Result<Tail, StoreError> {
    let (mut index, mut next_seq) = (0u64, Ok(0));
    // Every line after the header is an event: event `i` is on line `i + 2`.
    let mut count = |events: Vec<palimpsest_core_session::Event>| {
        for event in events {
            if let Ok(n) = next_seq {
                next_seq = if event.seq() == n {
                    Ok(n + 1)
                } else {
                    Err((index + 2, AppendError::SeqNotContiguous { seq: event.seq(), expected: n }))
                };
            }
            index += 1;
        }
    };
    let (log, len) =
        decode_in_pieces(file, path, options, read_err, false, |decoder| count(decoder.take_events()))?;
    let JsonlLog { header, events, torn_tail, missing_newline } = log;
    count(events);
    Ok(Tail { id: header.id, next_seq, file_len: len, torn: torn_tail, missing_newline })
}

/// Reads just the header line of a session file, for listing: at most
/// `options.max_line_bytes` of it.
pub(crate) fn read_header(path: &Path, options: ReadOptions) -> Result<Option<SessionHeader>, StoreError> {
    use std::io::BufRead;
    match check_regular(path) {
        // Deleted since the directory was read: not a session any more.
        Err(StoreError::NotFound { .. }) => return Ok(None),
        other => other?,
    }
    let file = match File::open(path) {
        Ok(f) => f,
        // Deleted since the directory was read: not a session any more.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(format!("open {}", shown(path)), e)),
    };
    let mut line = Vec::new();
    // One byte past the cap is enough to tell that the header is too long.
    let limit = u64::try_from(options.max_header_bytes()).unwrap_or(u64::MAX).saturating_add(1);
    io::BufReader::new(file)
        .take(limit)
        .read_until(b'\n', &mut line)
        .map_err(|e| io_err(format!("read {}", shown(path)), e))?;
    let reader = JsonlReader::new(&line, options).map_err(|e| load_error(path, e))?;
    Ok(Some(reader.header().clone()))
}

#[cfg(test)]
mod scan_tests {
    use super::*;

    /// What a [`Tail`] says, comparable.
    type Said = (String, Result<u64, (u64, String)>, u64, Option<TornTail>, bool);

    fn said(tail: &Tail) -> Said {
        let next = tail.next_seq.as_ref().map(|n| *n).map_err(|(line, e)| (*line, e.code().to_owned()));
        (tail.id.clone(), next, tail.file_len, tail.torn, tail.missing_newline)
    }

    /// The tail a scan in pieces finds is the one a whole load leaves, and
    /// the one a capped scan (a smaller line cap, read whole) finds: for a
    /// file that ends well, torn, without its newline, with a gap, with no
    /// event, and longer than a piece.
    #[test]
    fn a_scan_in_pieces_finds_the_tail_a_whole_load_does() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let header = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;
        let tick =
            |i: u64| format!(r#"{{"seq":{i},"time":0,"type":"x/t","data":{{"pad":"{}"}}}}"#, "p".repeat(300));
        let lines = |seqs: &mut dyn Iterator<Item = u64>| seqs.map(tick).collect::<Vec<_>>().join("\n");
        let pieces = (PIECE_BYTES / 300 + 100) as u64;
        let cases = [
            ("whole", format!("{header}\n{}\n", lines(&mut (0..5)))),
            ("torn", format!("{header}\n{}\n{{\"seq\":5,\"ti", lines(&mut (0..5)))),
            ("no newline", format!("{header}\n{}", lines(&mut (0..5)))),
            ("gap", format!("{header}\n{}\n", lines(&mut (0..3).chain(7..9)))),
            ("header only", format!("{header}\n")),
            ("past a piece", format!("{header}\n{}\n{{\"seq\":", lines(&mut (0..pieces)))),
        ];
        for (name, text) in cases {
            let path = dir.path().join(format!("{name}.jsonl"));
            std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
            let scanned =
                SessionFile::open(&path).and_then(|mut f| f.scan()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let loaded = {
                let mut file = SessionFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
                file.load().unwrap_or_else(|e| panic!("{name}: {e}"));
                file.tail.as_ref().map(said)
            };
            let capped = ReadOptions { max_line_bytes: 1 << 20, ..ReadOptions::default() };
            let whole = SessionFile::open(&path)
                .map(|f| f.with_read_options(capped))
                .and_then(|mut f| f.scan())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(Some(said(&scanned)), loaded, "{name}: a scan against a load");
            assert_eq!(said(&scanned), said(&whole), "{name}: in pieces against read whole");
            assert_eq!(scanned.file_len, text.len() as u64, "{name}");
        }
    }
}
