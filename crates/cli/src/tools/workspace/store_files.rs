//! The session store's files, kept from the tools when they lie inside the
//! workspace (`--tools .` with the default `./palimpsest.db`): a model
//! could otherwise read its own log, or replace the store it is logged to.
//!
//! A path is compared by what it names, not only by how it is spelled, so
//! no link inside the workspace leads around the check:
//!
//! * by spelling, relative to the root (`palimpsest.db`, `logs/s.jsonl`);
//! * every directory the path walks through, by identity (device and
//!   inode): none may be a store directory (`lnk/` linking to `logs/`);
//! * the file it names, as the directory it is in (by identity) and its
//!   name: a store file that does not exist yet (SQLite's `-wal`, a
//!   checkpoint sidecar) is protected too, whatever link leads to its
//!   directory (`self/p.db-journal`, `self` linking to `.`);
//! * the file it opens, by identity (a link to the database).
//!
//! Identities are read at each check: SQLite's `-wal` and `-shm` come and
//! go. Off Unix only the spelling is compared.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Metadata};

/// A file's identity: its device and inode.
type Identity = (u64, u64);

/// The store's files and directories inside one workspace.
#[derive(Debug, Default)]
pub(super) struct StoreFiles {
    /// Relative to the workspace root, as canonical paths spell them.
    relative: Vec<PathBuf>,
    /// Absolute and canonical (a file that does not exist yet: its
    /// directory canonical, joined with its name).
    absolute: Vec<PathBuf>,
}

impl StoreFiles {
    /// The entries of `store` (absolute or relative to the current
    /// directory) that lie inside `root`.
    pub(super) fn inside(root: &Path, store: &[PathBuf]) -> std::io::Result<StoreFiles> {
        let root = std::fs::canonicalize(root)?;
        let mut files = StoreFiles::default();
        for path in store {
            let Some(abs) = crate::location::canonical_or_planned(path) else { continue };
            if let Ok(rel) = abs.strip_prefix(&root) {
                files.relative.push(rel.to_owned());
                files.absolute.push(abs);
            }
        }
        Ok(files)
    }

    /// Whether `path` (relative to `root`, checked lexically) is, lies in,
    /// or opens one of the store's files.
    pub(super) fn covers(&self, root: &Dir, path: &Path) -> bool {
        if self.absolute.is_empty() {
            return false;
        }
        if self.relative.iter().any(|p| path.starts_with(p)) {
            return true;
        }
        // Every directory walked through, the root included.
        let mut dir = PathBuf::new();
        let components: Vec<_> = path.components().collect();
        for (i, component) in components.iter().enumerate() {
            let dir_id = if dir.as_os_str().is_empty() { root.dir_metadata() } else { root.metadata(&dir) };
            let Ok(dir_meta) = dir_id else { return false };
            if self.is_store_dir(&dir_meta) {
                return true;
            }
            let name = component.as_os_str();
            if self.is_store_name(&dir_meta, name) {
                return true;
            }
            if i + 1 == components.len() {
                // The file itself, where it exists (a link to the store).
                return root.metadata(path).is_ok_and(|m| self.is_store_entry(&m));
            }
            dir.push(name);
        }
        false
    }

    /// Whether the entry `name` of the directory `dir` (during a listing)
    /// is one of the store's files or directories.
    pub(super) fn lists(&self, dir: &Dir, name: &OsStr, meta: Option<&Metadata>) -> bool {
        if self.absolute.is_empty() {
            return false;
        }
        let Ok(dir_meta) = dir.dir_metadata() else { return false };
        self.is_store_name(&dir_meta, name) || meta.is_some_and(|m| self.is_store_entry(m))
    }

    /// Whether `dir` is one of the store's directories.
    fn is_store_dir(&self, dir: &Metadata) -> bool {
        let id = identity(dir);
        id.is_some()
            && self
                .absolute
                .iter()
                .any(|p| std::fs::metadata(p).is_ok_and(|m| m.is_dir() && std_identity(&m) == id))
    }

    /// Whether `name` in the directory `dir` is where one of the store's
    /// files is, or would be.
    fn is_store_name(&self, dir: &Metadata, name: &OsStr) -> bool {
        let id = identity(dir);
        id.is_some()
            && self.absolute.iter().any(|p| {
                p.file_name() == Some(name)
                    && p.parent()
                        .and_then(|d| std::fs::metadata(d).ok())
                        .is_some_and(|m| std_identity(&m) == id)
            })
    }

    /// Whether `entry` is one of the store's files or directories itself.
    pub(super) fn is_store_entry(&self, entry: &Metadata) -> bool {
        let id = identity(entry);
        id.is_some()
            && self.absolute.iter().any(|p| std::fs::metadata(p).is_ok_and(|m| std_identity(&m) == id))
    }
}

#[cfg(unix)]
fn identity(meta: &Metadata) -> Option<Identity> {
    use cap_std::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(_meta: &Metadata) -> Option<Identity> {
    None
}

#[cfg(unix)]
fn std_identity(meta: &std::fs::Metadata) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn std_identity(_meta: &std::fs::Metadata) -> Option<Identity> {
    None
}
