//! The checkpoint sidecar of one bare session file, for a program that
//! keeps a session as a lone `.jsonl` file rather than in a
//! [`JsonlStore`](crate::JsonlStore) directory (`palimpsest run --store
//! x.jsonl`): the same `<stem>.checkpoint.json` beside it, written and
//! read as the store keeps one for each of its files (see the crate docs,
//! "Checkpoint sidecars").
//!
//! ```
//! use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
//! use palimpsest_persistence_jsonl::{sidecar, SessionFile};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("s.jsonl");
//! let mut session = Session::create(SessionHeader::new("s", 0));
//! session.append_log(1, TurnStart { turn: 1 })?;
//! let mut file = SessionFile::create_with_events(&path, session.header(), session.events())?;
//! file.sync()?;
//! sidecar::save(&path, "s", &session.checkpoint())?;
//! assert_eq!(sidecar::path(&path), dir.path().join("s.checkpoint.json"));
//! let resumable = sidecar::load_resumable(&path, Some(&mut file))?;
//! assert!(resumable.checkpoint.is_some() && resumable.tail.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use palimpsest_core_session::jsonl::ReadOptions;
use palimpsest_core_session::{Checkpoint, SessionHeader};
use palimpsest_persistence::{Resumable, StoreError};

use crate::SessionFile;

/// What ends a sidecar's file name, after the session file's stem.
pub const SUFFIX: &str = crate::checkpoint::SIDECAR_SUFFIX;

/// Where the sidecar of the session file at `session_file` is:
/// `<stem>.checkpoint.json` beside it.
pub fn path(session_file: &Path) -> PathBuf {
    crate::checkpoint::sidecar_path(session_file)
}

/// Saves `checkpoint` of session `session_id` beside its file, atomically
/// (a reader sees the old sidecar or the new one). `conflict` when the
/// file holds fewer whole event lines than the checkpoint covers.
pub fn save(session_file: &Path, session_id: &str, checkpoint: &Checkpoint) -> Result<(), StoreError> {
    crate::checkpoint::save(session_file, session_id, checkpoint)
}

/// Removes the sidecar, if there is one.
pub fn remove(session_file: &Path) -> Result<(), StoreError> {
    crate::checkpoint::remove(session_file)
}

/// What resuming the session in `session_file` needs: from the sidecar
/// when it matches the file (the header line, then the lines after the
/// checkpoint), else the whole file, as
/// [`JsonlStore::load_resumable`](palimpsest_persistence::SessionStore::load_resumable)
/// reads each of its files. `writer`, the file held for appending (and
/// locked), is read whole in the second case, and in the first is told
/// where the file ends, so that its first append does not read it again.
pub fn load_resumable(
    session_file: &Path,
    writer: Option<&mut SessionFile>,
) -> Result<Resumable, StoreError> {
    crate::file::check_regular(session_file)?;
    let mut writer = writer;
    if let Some(r) =
        crate::checkpoint::resume_for(session_file, ReadOptions::default(), writer.as_deref_mut())
    {
        return Ok(r);
    }
    let stored = match writer {
        Some(file) => file.load()?,
        None => crate::read_session_file(session_file)?,
    };
    Ok(Resumable::whole(stored))
}

/// The resume [`load_resumable`] gives when the session file's sidecar
/// matches it: the checkpoint and the events after it; `None` (having
/// read only the sidecar and what it points at) when there is no sidecar
/// or it does not match, where `load_resumable` would read the whole file.
/// For a reader that has a cheaper way of its own to read a whole log.
pub fn resume(session_file: &Path) -> Result<Option<Resumable>, StoreError> {
    crate::file::check_regular(session_file)?;
    Ok(crate::checkpoint::resume_for(session_file, ReadOptions::default(), None))
}

/// The header of the session file at `path`, from its first line alone;
/// `None` when there is no such file.
pub fn read_header(path: &Path) -> Result<Option<SessionHeader>, StoreError> {
    crate::file::read_header(path, ReadOptions::default())
}
