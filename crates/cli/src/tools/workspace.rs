//! The workspace the file tools are confined to: one directory handle
//! ([`cap_std::fs::Dir`]) opened once, through which every open, create,
//! listing, stat and rename goes.
//!
//! **The security comes from the handle, not from a path check.** Paths are
//! resolved *beneath* the handle by `cap-std`: on Linux 5.6+ by the kernel
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), elsewhere by
//! its component-by-component emulation, which opens each component with
//! `O_NOFOLLOW` relative to the one before. A symbolic link (in any
//! component, dangling or not, absolute or relative) or a `..` that would
//! lead out is refused at the moment of the open, so there is no gap between
//! a check and a use for another thread or process to swap a link into.
//! [`relative_path`] still refuses absolute paths and `..` up front, but
//! only to give the model a clear `INVALID_ARGUMENTS` message.
//!
//! **Only regular files are read or written.** The type is checked on the
//! *opened handle* (`fstat`), and files are opened with `O_NONBLOCK`, so a
//! FIFO, a socket or a device can neither block the open nor be read: it is
//! refused with `INVALID_ARGUMENTS` naming what it is. (A `stat` before the
//! open gives the same refusal earlier, so a device node is not even
//! opened; the `fstat` after it is what holds if the path changed between.)
//!
//! **Hard links.** A hard link inside the workspace to a file outside it is,
//! for the kernel, a regular file inside the tree; no path resolution can
//! tell. Files with more than one link are therefore refused for reading and
//! writing (`INVALID_ARGUMENTS`): the other name may be outside.
//!
//! **Writes replace, never write through.** `write_file` writes a new file
//! next to the target and renames it over the target, so the target is
//! replaced whole (no torn file, no partial write) and a symbolic link or a
//! hard link at the target can never carry the bytes elsewhere. A target
//! that is a symbolic link is refused outright, so a link is never silently
//! turned into a file.

use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, File, FileType, Metadata, OpenOptions};

mod store_files;
use palimpsest_core_agent_loop::{codes, CancellationToken, ToolError};
use store_files::StoreFiles;

/// Code of the error for content past a cap (a file too large to read, a
/// result too large to log).
pub(crate) const TOO_LARGE: &str = "TOO_LARGE";

/// The error for content past a cap.
pub(crate) fn too_large(message: impl Into<String>) -> ToolError {
    ToolError::new("TooLarge", TOO_LARGE, message)
}

/// How much [`Workspace::list`] does before it stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListLimits {
    /// Directory entries looked at, in all directories together.
    pub(crate) visited: usize,
    /// Bytes of listing text.
    pub(crate) bytes: usize,
    /// Directory levels below the root walked into.
    pub(crate) depth: usize,
}

/// The workspace root, as a directory handle.
#[derive(Debug)]
pub(crate) struct Workspace {
    root: Dir,
    /// The session store's files inside the workspace: never read,
    /// written or listed with their sizes ([`store_files`]).
    store: StoreFiles,
}

impl Workspace {
    /// Opens `root` (the one path resolved outside the sandbox).
    pub(crate) fn open(root: &Path) -> io::Result<Workspace> {
        Workspace::open_protecting(root, &[])
    }

    /// Opens `root`, keeping the tools off `store` (the session store's
    /// files and directories) where they lie inside it.
    pub(crate) fn open_protecting(root: &Path, store: &[PathBuf]) -> io::Result<Workspace> {
        let handle = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(Workspace { root: handle, store: StoreFiles::inside(root, store)? })
    }

    /// Refuses `path` (relative, checked by [`relative_path`]) when it is,
    /// lies in, or leads to one of the store's files.
    fn check_unprotected(&self, rel: &str, path: &Path) -> Result<(), ToolError> {
        if self.store.covers(&self.root, path) {
            return Err(store_file(rel));
        }
        Ok(())
    }

    /// Refuses what was opened when it is one of the store's files (the
    /// authority, after the check by path).
    fn check_not_the_store(&self, rel: &str, opened: &Metadata) -> Result<(), ToolError> {
        if self.store.is_store_entry(opened) {
            return Err(store_file(rel));
        }
        Ok(())
    }

    /// The UTF-8 text of the regular file `rel`, refused past `max` bytes
    /// (counted as read, whatever the metadata says).
    pub(crate) fn read_text(&self, rel: &str, max: u64) -> Result<String, ToolError> {
        self.read_path(rel, relative_path(rel)?, max)
    }

    /// [`read_text`](Self::read_text) after the lexical check: the
    /// directory handle alone keeps the read inside.
    fn read_path(&self, rel: &str, path: &Path, max: u64) -> Result<String, ToolError> {
        self.check_unprotected(rel, path)?;
        // Early and by path, for the reason and so a device is never opened.
        let meta = self.root.metadata(path).map_err(|e| io_error(rel, &e))?;
        regular_file(rel, &meta)?;
        let mut file = self.root.open_with(path, &read_options()).map_err(|e| io_error(rel, &e))?;
        // The authority: what was actually opened.
        let meta = file.metadata().map_err(|e| io_error(rel, &e))?;
        regular_file(rel, &meta)?;
        self.check_not_the_store(rel, &meta)?;
        let mut bytes = Vec::new();
        (&mut file).take(max + 1).read_to_end(&mut bytes).map_err(|e| io_error(rel, &e))?;
        if bytes.len() as u64 > max {
            return Err(too_large(format!(
                "{rel} is larger than the {max}-byte read limit; it was not read"
            )));
        }
        String::from_utf8(bytes).map_err(|e| {
            ToolError::failed(format!(
                "{rel} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ))
        })
    }

    /// Replaces (or creates) the regular file `rel` with `content`,
    /// creating missing parent directories. Nothing is renamed into place
    /// once `cancel` is cancelled.
    pub(crate) fn write_text(
        &self,
        rel: &str,
        content: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        self.write_path(rel, relative_path(rel)?, content, cancel)
    }

    /// [`write_text`](Self::write_text) after the lexical check.
    fn write_path(
        &self,
        rel: &str,
        path: &Path,
        content: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ToolError> {
        let Some(name) = path.file_name() else {
            return Err(ToolError::invalid_arguments(format!("{rel:?} names no file")));
        };
        self.check_unprotected(rel, path)?;
        let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            None => self.root.try_clone().map_err(|e| io_error(rel, &e))?,
            Some(parent) => match self.root.open_dir(parent) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.root.create_dir_all(parent).map_err(|e| io_error(rel, &e))?;
                    self.root.open_dir(parent).map_err(|e| io_error(rel, &e))?
                }
                opened => opened.map_err(|e| io_error(rel, &e))?,
            },
        };
        let permissions = match dir.symlink_metadata(name) {
            Ok(meta) if meta.is_symlink() => {
                return Err(ToolError::invalid_arguments(format!(
                    "{rel} is a symbolic link; write_file replaces regular files only (write to the path it points to)"
                )))
            }
            Ok(meta) => {
                regular_file(rel, &meta)?;
                self.check_not_the_store(rel, &meta)?;
                Some(plain_permissions(meta.permissions()))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(rel, &e)),
        };
        // The new content of an existing file is private until it has the
        // old file's permissions: none of it is readable in between.
        let (temp_name, mut temp) =
            create_temp(&dir, permissions.is_some()).map_err(|e| io_error(rel, &e))?;
        let written = (|| {
            temp.write_all(content.as_bytes())?;
            if let Some(permissions) = permissions {
                temp.set_permissions(permissions)?;
            }
            temp.sync_all()
        })();
        drop(temp);
        let outcome = match written {
            Err(e) => Err(io_error(rel, &e)),
            Ok(()) if cancel.is_cancelled() => Err(ToolError::new(
                "Cancelled",
                codes::CANCELLED,
                format!("the turn was cancelled; {rel} was not written"),
            )),
            // Replaces whatever the name holds now; a link is replaced, not followed.
            Ok(()) => dir.rename(&temp_name, &dir, name).map_err(|e| io_error(rel, &e)),
        };
        if outcome.is_err() {
            if let Err(e) = dir.remove_file(&temp_name) {
                tracing::warn!(path = rel, temp = %Path::new(&temp_name).display(), error = %e, "could not remove a temporary file");
            }
        }
        outcome
    }

    /// The files of the workspace, one `path (N bytes)` line each (other
    /// kinds say what they are), depth first in name order. Symbolic links
    /// are listed, never followed. Stops at `limits`, saying so in a last
    /// line.
    pub(crate) fn list(&self, limits: ListLimits) -> Result<String, ToolError> {
        let mut walk = Walk { limits, visited: 0, text: String::new(), stopped: None, store: &self.store };
        walk.dir(&self.root, Path::new(""), 0).map_err(|e| ToolError::failed(format!("listing: {e}")))?;
        let mut text = walk.text;
        match walk.stopped {
            Some(why) => text.push_str(&format!("(listing stopped: {why})")),
            None if text.is_empty() => text.push_str("(no files)"),
            None => {
                text.pop(); // the last line's newline
            }
        }
        Ok(text)
    }
}

/// A listing in progress.
struct Walk<'p> {
    /// [`Workspace::store`]: listed by name only, never entered.
    store: &'p StoreFiles,
    limits: ListLimits,
    visited: usize,
    text: String,
    /// Why the listing stopped early.
    stopped: Option<String>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Dir, prefix: &Path, depth: usize) -> io::Result<()> {
        let mut entries = Vec::new();
        for entry in dir.entries()? {
            if self.visited >= self.limits.visited {
                self.stopped = Some(format!("more than {} entries", self.limits.visited));
                break;
            }
            self.visited += 1;
            let entry = entry?;
            let kind = entry.file_type()?;
            entries.push((entry.file_name(), kind, entry));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind, entry) in entries {
            let path = prefix.join(&name);
            if self.store.lists(dir, &name, entry.metadata().ok().as_ref()) {
                self.line(format!("{} (the session store: the tools do not open it)", path.display()));
            } else if kind.is_dir() {
                if depth >= self.limits.depth {
                    self.line(format!(
                        "{}/ (not listed: deeper than {} levels)",
                        path.display(),
                        self.limits.depth
                    ));
                } else {
                    // Opened beneath `dir`: a swap to a link cannot lead out.
                    self.dir(&entry.open_dir()?, &path, depth + 1)?;
                }
            } else if kind.is_file() {
                let len = entry.metadata()?.len();
                self.line(format!("{} ({len} bytes)", path.display()));
            } else {
                self.line(format!("{} ({})", path.display(), kind_name(kind)));
            }
            if self.stopped.is_some() {
                break;
            }
        }
        Ok(())
    }

    fn line(&mut self, line: String) {
        if self.stopped.is_some() {
            return;
        }
        if self.text.len() + line.len() + 1 > self.limits.bytes {
            self.stopped = Some(format!("the listing reached its {}-byte limit", self.limits.bytes));
            return;
        }
        self.text.push_str(&line);
        self.text.push('\n');
    }
}

/// The lexical check: a non-empty relative path of plain names. Only for
/// clear messages; the directory handle is what keeps paths inside.
pub(crate) fn relative_path(rel: &str) -> Result<&Path, ToolError> {
    let path = Path::new(rel);
    let refuse = |why: &str| Err(ToolError::invalid_arguments(format!("{rel:?} {why}")));
    if rel.is_empty() {
        return refuse("is empty; give a path relative to the workspace root");
    }
    if rel.contains('\0') {
        return refuse("contains a NUL byte");
    }
    for component in path.components() {
        match component {
            Component::Normal(_) => {}
            Component::RootDir | Component::Prefix(_) => {
                return refuse("is absolute; paths are relative to the workspace root")
            }
            Component::ParentDir => return refuse("contains `..`; paths must stay inside the workspace"),
            Component::CurDir => return refuse("contains `.`; give plain names, like `notes/todo.txt`"),
        }
    }
    Ok(path)
}

/// Refuses anything but a regular file with one link.
fn regular_file(rel: &str, meta: &Metadata) -> Result<(), ToolError> {
    if !meta.is_file() {
        return Err(ToolError::invalid_arguments(format!(
            "{rel} is {}, not a regular file; only regular files are read or written",
            kind_name(meta.file_type())
        )));
    }
    let links = link_count(meta);
    if links > 1 {
        return Err(ToolError::invalid_arguments(format!(
            "{rel} has {links} hard links; a file with more than one may also be reachable outside the workspace, so it is not read or written"
        )));
    }
    Ok(())
}

#[cfg(unix)]
fn link_count(meta: &Metadata) -> u64 {
    cap_std::fs::MetadataExt::nlink(meta)
}

#[cfg(not(unix))]
fn link_count(_meta: &Metadata) -> u64 {
    1
}

/// What a non-regular file is, in words.
fn kind_name(kind: FileType) -> &'static str {
    if kind.is_dir() {
        return "a directory";
    }
    if kind.is_symlink() {
        return "a symbolic link";
    }
    #[cfg(unix)]
    {
        use cap_std::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
    }
    "not a regular file"
}

/// Read-only, and non-blocking so a FIFO or device cannot hold the open.
fn read_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    options
}

/// An existing file's permissions as a replacement written by this
/// process may take them: without setuid, setgid or sticky bits. The new
/// file is the running user's, so a setuid bit kept would make the model's
/// content a program that runs as that user (as root, when run as root).
#[cfg(unix)]
fn plain_permissions(permissions: cap_std::fs::Permissions) -> cap_std::fs::Permissions {
    use cap_std::fs::PermissionsExt;
    cap_std::fs::Permissions::from_mode(permissions.mode() & 0o777)
}

#[cfg(not(unix))]
fn plain_permissions(permissions: cap_std::fs::Permissions) -> cap_std::fs::Permissions {
    permissions
}

/// Creates a new, empty file in `dir`, under a fresh name; readable and
/// writable by its owner only when `private`, with the default mode
/// otherwise.
fn create_temp(dir: &Dir, private: bool) -> io::Result<(PathBuf, File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut options = OpenOptions::new();
    // `create_new` is O_EXCL: never opens, or follows, something already there.
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use cap_std::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut last = None;
    for _ in 0..16 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Not derived from `name`, which may already be as long as a name can be.
        let temp = format!(".palimpsest-write-{}-{n}.tmp", std::process::id());
        match dir.open_with(&temp, &options) {
            Ok(file) => return Ok((PathBuf::from(temp), file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

/// The error for a path of the session store.
fn store_file(rel: &str) -> ToolError {
    ToolError::invalid_arguments(format!(
        "{rel} is the session store (or one of its files), where this session is logged; the tools never read or write it"
    ))
}

/// An I/O error as a tool error: a path that leads outside is the model's
/// fault (`INVALID_ARGUMENTS`), anything else `TOOL_FAILED`.
fn io_error(rel: &str, e: &io::Error) -> ToolError {
    if is_escape(e) {
        return ToolError::invalid_arguments(format!(
            "{rel:?} leads outside the workspace (through `..` or a symbolic link); it was not opened"
        ));
    }
    ToolError::failed(format!("{rel}: {e}"))
}

/// `cap-std`'s refusal of a path that would resolve outside the handle: a
/// `PermissionDenied` it makes itself (a real `EACCES` carries an OS code).
fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

#[cfg(all(test, unix))]
mod tests;
