//! [`JsonlFileStore`]: one JSONL session file seen as a store of (at most)
//! one session, so that a single file can stand behind `DurableSession` or
//! an agent loop like any other store (the `palimpsest` CLI's `run --store
//! x.jsonl` writes through it; contract §7: a path ending `.jsonl` is one
//! JSONL session file, never a directory).
//!
//! The file holds one session: `create` makes the file (`already-exists`
//! when it is there, whatever session it holds), and every other call names
//! the file's own session or gets `not-found`. Writing holds the file as
//! [`JsonlStore`](crate::JsonlStore) holds each of a directory's:
//! a [`SessionFile`], locked from the first write until the store is
//! dropped, so a second writer gets `locked`. Loads before that read the
//! file without locking it. Checkpoints are kept beside the file, as a
//! JSONL directory keeps them beside each of its files
//! ([`sidecar`](crate::sidecar)), so a resume reads the
//! checkpoint and the lines after it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::grant::{self, Grant};
use crate::{read_session_file, read_session_summary, sidecar, SessionFile};
use palimpsest_core_session::jsonl::ReadOptions;
use palimpsest_core_session::{Checkpoint, Event, SessionHeader};
use palimpsest_persistence::{Hold, Resumable, SessionStore, SessionSummary, StoreError, StoredSession};

/// One JSONL session file as a store of at most one session.
///
/// ```
/// use palimpsest_core_session::{Event, SessionHeader};
/// use palimpsest_persistence::SessionStore;
/// use palimpsest_persistence_jsonl::JsonlFileStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = JsonlFileStore::new(&dir.path().join("chat.jsonl"));
/// store.create(&SessionHeader::new("chat", 0))?;
/// store.append("chat", &[Event::from_json(r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#)?])?;
/// store.sync("chat")?;
/// assert_eq!(store.load("chat")?.events.len(), 1);
/// // One session per file: another id is `already-exists` to create, `not-found` to read.
/// assert_eq!(store.create(&SessionHeader::new("other", 0)).unwrap_err().code(), "already-exists");
/// assert_eq!(store.load("other").unwrap_err().code(), "not-found");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct JsonlFileStore {
    path: PathBuf,
    /// The file, held (and locked) once this store has written to it, with
    /// the id of the session it holds: every call naming another is
    /// `not-found`, held or not.
    held: Mutex<Option<(String, SessionFile)>>,
    /// The hold granted on the held file, if one was (see
    /// [`crate::grant`]); gone with the held file.
    grant: Mutex<Option<Grant>>,
}

impl JsonlFileStore {
    /// The store of the file at `path`, which need not exist yet. Nothing is
    /// opened or locked until it is used.
    pub fn new(path: &Path) -> JsonlFileStore {
        JsonlFileStore { path: path.to_owned(), held: Mutex::new(None), grant: Mutex::new(None) }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_summary(&self) -> Result<SessionSummary, StoreError> {
        // A store's file is a regular file: a FIFO named as the store
        // blocked `run` forever (the header read refuses it).
        sidecar::read_header(&self.path)?;
        read_session_summary(&self.path, ReadOptions::default())
    }

    fn held(&self) -> MutexGuard<'_, Option<(String, SessionFile)>> {
        // The slot is only set or read; a panic cannot leave it half-changed.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken after [`held`](JsonlFileStore::held) when both are.
    fn grant(&self) -> MutexGuard<'_, Option<Grant>> {
        self.grant.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets go of the held file (its lock) and of the hold granted on it.
    fn let_go(&self, held: &mut Option<(String, SessionFile)>) -> Option<(String, SessionFile)> {
        *self.grant() = None;
        held.take()
    }

    /// The id of the session the file holds, when it exists: from its
    /// header line alone (a resume then reads only what follows its
    /// checkpoint; this read the whole file, 2.75 s at 1M events).
    fn id(&self) -> Result<Option<String>, StoreError> {
        match self.path.try_exists() {
            Ok(false) => Ok(None),
            Ok(true) => match sidecar::read_header(&self.path)? {
                Some(header) => Ok(Some(header.id)),
                // A header line that does not read: the whole read's error.
                None => Ok(Some(read_session_file(&self.path)?.header.id)),
            },
            Err(e) => Err(StoreError::io(format!("stat {}", self.path.display()), e)),
        }
    }

    /// `not-found` unless the file holds session `id`.
    fn check(&self, id: &str) -> Result<(), StoreError> {
        match self.id()? {
            Some(found) if found == id => Ok(()),
            _ => Err(StoreError::NotFound { session_id: id.to_owned() }),
        }
    }

    /// Runs `f` on the held file, opening (and locking) it first if needed.
    fn with_file<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionFile) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut held = self.held();
        if held.is_none() {
            self.check(id)?;
            *held = Some((id.to_owned(), SessionFile::open(&self.path)?));
        }
        match held.as_mut() {
            Some((held_id, file)) if held_id == id => f(file),
            _ => Err(StoreError::NotFound { session_id: id.to_owned() }),
        }
    }
}

impl SessionStore for JsonlFileStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.create_with_events(header, &[])
    }

    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        let mut held = self.held();
        // `already-exists` when the file is there, whichever session it holds.
        let file = SessionFile::create_with_events(&self.path, header, events)?;
        self.let_go(&mut held);
        *held = Some((header.id.clone(), file));
        // A sidecar left by a file removed behind our back is not this one's
        // (a resume would ignore it anyway: it matches no header here).
        if let Err(e) = sidecar::remove(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove an old checkpoint sidecar");
        }
        Ok(())
    }

    /// Beside the file, as a JSONL directory keeps one for each of its
    /// files (`<stem>.checkpoint.json`).
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        // This store's own appends wait while the file is read.
        let held = self.held();
        match held.as_ref() {
            None => self.check(session_id)?,
            Some((held_id, _)) if held_id == session_id => {}
            Some(_) => return Err(StoreError::NotFound { session_id: session_id.to_owned() }),
        }
        sidecar::save(&self.path, session_id, checkpoint)?;
        drop(held);
        Ok(true)
    }

    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        let mut held = self.held();
        let resumable =
            sidecar::load_resumable(&self.path, held.as_mut().map(|(_, f)| f)).map_err(|e| match e {
                StoreError::NotFound { .. } => StoreError::NotFound { session_id: session_id.to_owned() },
                e => e,
            })?;
        match resumable.header.id == session_id {
            true => Ok(resumable),
            false => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
        }
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        self.with_file(session_id, |file| file.append(events))
    }

    /// Locks the file now, as a JSONL store's hold does: until released or
    /// the process ends, with no expiry. The hold's token tells this grant
    /// from others, as [`JsonlStore`](crate::JsonlStore)'s does.
    fn hold(&self, session_id: &str, holder: &str, _ttl: Duration) -> Result<Option<Hold>, StoreError> {
        self.with_file(session_id, |_| Ok(()))?;
        let mut grant = self.grant();
        let next = Grant::to(holder, grant.as_ref());
        let granted = grant.insert(next);
        Ok(Some(granted.hold(session_id)))
    }

    /// The hold as it is while it is this store's current hold of the
    /// file; `not-found` once the file no longer holds its session;
    /// `locked` once this store gave it up or never granted it.
    fn renew(&self, hold: &Hold, _ttl: Duration) -> Result<Hold, StoreError> {
        self.check(hold.session_id())?;
        let held = self.held();
        let kept = held.as_ref().is_some_and(|(id, _)| id == hold.session_id())
            && self.grant().as_ref().is_some_and(|g| g.is(hold));
        match kept {
            true => Ok(hold.clone()),
            false => Err(grant::not_kept(hold)),
        }
    }

    /// Unlocks the file when `hold` is this store's current hold of it: the
    /// holder and token it granted. Any other hold (of another session, an
    /// earlier grant, another holder) changes nothing and is not an error.
    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        let mut held = self.held();
        let current = held.as_ref().is_some_and(|(id, _)| id == hold.session_id())
            && self.grant().as_ref().is_some_and(|g| g.is(hold));
        if current {
            self.let_go(&mut held);
        }
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        if let Some((_, file)) = self.held().as_mut() {
            let stored = file.load()?;
            return match stored.header.id == session_id {
                true => Ok(stored),
                false => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
            };
        }
        let stored = match read_session_file(&self.path) {
            Err(StoreError::NotFound { .. }) => None,
            other => Some(other?),
        };
        match stored {
            Some(stored) if stored.header.id == session_id => Ok(stored),
            _ => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
        }
    }

    /// The header from the file's summary: its head and tail when the file
    /// is healthy, a full read (with its errors) when it is not.
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        if !self.path.exists() {
            return Ok(Vec::new());
        }
        Ok(vec![self.read_summary()?.header])
    }

    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        if self.held().is_some() {
            let stored = self.load(session_id)?;
            return Ok(SessionSummary::of(stored.header, &stored.events));
        }
        let summary = match self.read_summary() {
            Err(StoreError::NotFound { .. }) => None,
            other => Some(other?),
        };
        match summary {
            Some(summary) if summary.header.id == session_id => Ok(summary),
            _ => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
        }
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.check(session_id)?;
        let mut held = self.held();
        // Held (locked) while removed, so no other writer is appending.
        let file = match self.let_go(&mut held) {
            Some((_, file)) => file,
            None => SessionFile::open(&self.path)?,
        };
        sidecar::remove(&self.path)?;
        std::fs::remove_file(&self.path)
            .map_err(|e| StoreError::io(format!("delete {}", self.path.display()), e))?;
        drop(file);
        Ok(())
    }

    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        match self.held().as_mut() {
            Some((held_id, file)) if held_id == session_id => file.sync(),
            Some(_) => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
            None => self.check(session_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::payload::TurnStart;

    fn header(id: &str) -> SessionHeader {
        SessionHeader::new(id, 1)
    }

    #[test]
    fn one_session_per_file_created_appended_loaded_and_locked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("s.jsonl");
        let store = JsonlFileStore::new(&path);
        assert_eq!(store.list().map(|l| l.len()).ok(), Some(0));
        assert_eq!(store.load("a").map(|_| ()).map_err(|e| e.code()), Err("not-found"));
        store.create(&header("a")).unwrap_or_else(|e| panic!("{e}"));
        assert!(path.is_file(), "a file, not a directory");
        let again = store.create(&header("b")).map_err(|e| e.code());
        assert_eq!(again, Err("already-exists"), "the file holds one session");
        assert_eq!(
            store.list().map(|l| l.into_iter().map(|h| h.id).collect::<Vec<_>>()).ok(),
            Some(vec!["a".to_owned()])
        );
        assert_eq!(store.load("a").map(|s| s.header.id).ok().as_deref(), Some("a"));
        assert_eq!(store.load("b").map(|_| ()).map_err(|e| e.code()), Err("not-found"));
        store.sync("a").unwrap_or_else(|e| panic!("{e}"));

        // A second store of the same file can read it, but not write it
        // while the first holds it.
        let other = JsonlFileStore::new(&path);
        assert_eq!(other.load("a").map(|s| s.events.len()).ok(), Some(0));
        let event = Event::log(0, 2, TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other.append("a", std::slice::from_ref(&event)).map_err(|e| e.code()), Err("locked"));
        store.append("a", &[event]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other.load("a").map(|s| s.events.len()).ok(), Some(1));
        drop(store);
        other.delete("a").unwrap_or_else(|e| panic!("{e}"));
        assert!(!path.exists());
    }

    #[test]
    fn once_held_another_id_is_still_not_found_and_another_hold_releases_nothing() {
        // Held, the store wrote `other-id`'s events into `a`'s file and
        // took holds and checkpoints for ids it does not hold; any hold
        // released the lock (a downstream probe).
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("s.jsonl");
        let store = JsonlFileStore::new(&path);
        store.create(&header("a")).unwrap_or_else(|e| panic!("{e}"));
        let event = Event::log(0, 2, TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"));
        let code = |r: Result<(), StoreError>| r.map_err(|e| e.code());
        assert_eq!(code(store.append("other-id", std::slice::from_ref(&event))), Err("not-found"));
        assert_eq!(code(store.sync("other-id")), Err("not-found"));
        assert_eq!(code(store.hold("other-id", "w", Duration::from_secs(1)).map(drop)), Err("not-found"));
        let session = palimpsest_core_session::Session::create(header("a"));
        assert_eq!(
            code(store.save_checkpoint("other-id", &session.checkpoint()).map(drop)),
            Err("not-found")
        );
        assert_eq!(store.load("a").map(|s| s.events.len()).ok(), Some(0), "nothing went into the file");

        store.release(&Hold::new("not-mine", "x", 0, None)).unwrap_or_else(|e| panic!("{e}"));
        let other = JsonlFileStore::new(&path);
        assert_eq!(code(other.append("a", std::slice::from_ref(&event))), Err("locked"), "still held");
        store.append("a", &[event]).unwrap_or_else(|e| panic!("{e}"));
        store.release(&Hold::new("a", "x", 0, None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other.load("a").map(|s| s.events.len()).ok(), Some(1));
    }

    /// Only the current hold is given up, as in a JSONL directory: a
    /// release naming another holder or an earlier grant's token leaves
    /// the file locked; a renewal once the file is deleted is `not-found`.
    #[test]
    fn only_the_current_hold_is_released_and_a_deleted_file_is_not_renewed() {
        let must = |e: StoreError| -> ! { panic!("{e}") };
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("s.jsonl");
        let store = JsonlFileStore::new(&path);
        let other = JsonlFileStore::new(&path);
        store.create(&header("a")).unwrap_or_else(|e| must(e));
        let first = store.hold("a", "w", Duration::from_secs(60)).unwrap_or_else(|e| must(e));
        let first = first.unwrap_or_else(|| panic!("a hold"));
        store.release(&first).unwrap_or_else(|e| must(e));
        let held = store.hold("a", "w", Duration::from_secs(60)).unwrap_or_else(|e| must(e));
        let held = held.unwrap_or_else(|| panic!("a hold"));
        assert!(held.token() > first.token(), "{held:?} after {first:?}");
        let event = |seq| Event::log(seq, 2, TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"));
        for stale in [first.clone(), Hold::new("a", "someone", held.token(), None)] {
            store.release(&stale).unwrap_or_else(|e| must(e));
            assert_eq!(
                other.append("a", &[event(0)]).map_err(|e| e.code()),
                Err("locked"),
                "after {stale:?}"
            );
        }
        assert_eq!(store.renew(&held, Duration::from_secs(60)).map(|h| h.token()).ok(), Some(held.token()));
        assert_eq!(store.renew(&first, Duration::from_secs(60)).map_err(|e| e.code()).err(), Some("locked"));
        store.release(&held).unwrap_or_else(|e| must(e));
        other.append("a", &[event(0)]).unwrap_or_else(|e| must(e));
        drop(other);
        store.delete("a").unwrap_or_else(|e| must(e));
        assert_eq!(
            store.renew(&held, Duration::from_secs(60)).map_err(|e| e.code()).err(),
            Some("not-found")
        );
    }
}
