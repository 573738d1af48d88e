//! Checkpoint sidecars: a session file's cached [`Checkpoint`], kept beside
//! it as `<stem>.checkpoint.json`, so that a resume reads the surface and
//! the lines after the checkpoint instead of the whole file (RFC 0002).
//!
//! The sidecar is one JSON object on one line:
//! `{"sidecar":1,"offset":N,"checkpoint":{…}}`, where `offset` is the byte
//! offset in the session file at which the line of event `logLen - 1`
//! starts (for a checkpoint of an empty log, where the first event line
//! starts), and `checkpoint` the checkpoint's JSON text. It is written to a
//! hidden temporary file in the store directory, synced, and renamed over
//! the sidecar: a reader sees the old sidecar or the new one, never a mix.
//!
//! A resume reads the header line, seeks to `offset`, checks that the line
//! there is the checkpoint's last event ([`Checkpoint::matches_last_event`]),
//! and decodes only the lines after it, with a full read's handling of a
//! torn or unterminated last line. Anything wrong (no sidecar, a damaged
//! one, another session's or header's, a file rewritten since, a bad line
//! after the offset) and the sidecar is ignored: the whole file is read, so
//! the result and its errors are a full load's.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use palimpsest_core_session::jsonl::{JsonlReader, ReadOptions, TornTail};
use palimpsest_core_session::{Checkpoint, Event, SessionHeader};
use palimpsest_persistence::{LoadReport, StoreError};
use serde_json::value::RawValue;

use crate::file::{create_temp, read_in_pieces, reads_in_pieces, sync_dir};

/// The sidecar format version this crate writes and reads.
const SIDECAR_VERSION: u64 = 1;

/// What ends a sidecar's file name (after the session file's stem).
pub(crate) const SIDECAR_SUFFIX: &str = ".checkpoint.json";

/// The sidecar path of the session file at `session_path`
/// (`<stem>.jsonl` → `<stem>.checkpoint.json`).
pub(crate) fn sidecar_path(session_path: &Path) -> PathBuf {
    let name = session_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(crate::name::SUFFIX).unwrap_or(&name);
    session_path.with_file_name(format!("{stem}{SIDECAR_SUFFIX}"))
}

/// A sidecar, read back.
struct Sidecar {
    offset: u64,
    checkpoint: Checkpoint,
}

/// A sidecar's one line: each key once (serde refuses a key named twice,
/// which a map would take the last of), none unknown.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    sidecar: u64,
    offset: u64,
    #[serde(borrow)]
    checkpoint: &'a RawValue,
}

/// Parses a sidecar's text; `Err` says why it is unusable.
fn parse(text: &str) -> Result<Sidecar, String> {
    let envelope: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| format!("not a sidecar of this build: {e}"))?;
    if envelope.sidecar != SIDECAR_VERSION {
        return Err(format!("sidecar version {}, this build reads {SIDECAR_VERSION}", envelope.sidecar));
    }
    let checkpoint = Checkpoint::from_json(envelope.checkpoint.get()).map_err(|e| e.to_string())?;
    Ok(Sidecar { offset: envelope.offset, checkpoint })
}

/// Reads the header line of `file` (from its start): the header and the
/// line's length with its `\n`. `None` when it cannot be read or has no
/// `\n` (a header-only file: nothing to skip).
pub(crate) fn header_line(file: &mut File, options: ReadOptions) -> io::Result<Option<(SessionHeader, u64)>> {
    file.seek(SeekFrom::Start(0))?;
    let mut line = Vec::new();
    let limit = u64::try_from(options.max_header_bytes()).unwrap_or(u64::MAX).saturating_add(1);
    BufReader::new(&mut *file).take(limit).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Ok(None);
    }
    let len = line.len() as u64;
    Ok(JsonlReader::new(&line, options).ok().map(|r| (r.header().clone(), len)))
}

/// What a resume from a sidecar read: the checkpoint, the events after it
/// and what was found at the end of the file.
pub(crate) struct Resumed {
    pub(crate) header: SessionHeader,
    pub(crate) checkpoint: Checkpoint,
    pub(crate) tail: Vec<Event>,
    pub(crate) report: LoadReport,
    /// The file's end as read, what an append needs to know of it.
    pub(crate) end: crate::file::Tail,
}

/// The sidecar's text: only a regular file's, so that a sidecar made a
/// FIFO or a link to a device is unusable (as any other bad sidecar is)
/// rather than a read that blocks or never ends.
fn read_sidecar(sidecar: &Path) -> io::Result<String> {
    if !fs::metadata(sidecar)?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    fs::read_to_string(sidecar)
}

/// Resumes the session file at `path` from its sidecar: `None` (logged at
/// `debug`, with why) when there is none or it is unusable, and the caller
/// reads the whole file (which reports any I/O error of its own).
pub(crate) fn resume(path: &Path, options: ReadOptions) -> Option<Resumed> {
    let sidecar = sidecar_path(path);
    let text = match read_sidecar(&sidecar) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::debug!(path = %sidecar.display(), error = %e, "cannot read the checkpoint sidecar; reading the whole file");
            return None;
        }
    };
    match resume_from(path, &text, options) {
        Ok(resumed) => Some(resumed),
        Err(why) => {
            tracing::debug!(path = %sidecar.display(), why, "ignoring the checkpoint sidecar; reading the whole file");
            None
        }
    }
}

/// [`resume`] as a resume of the session needs it, telling `writer` (the
/// file held for appending, under whose lock the read ran) where the file
/// ends, so that its first append does not read the whole file again.
pub(crate) fn resume_for(
    path: &Path,
    options: ReadOptions,
    writer: Option<&mut crate::SessionFile>,
) -> Option<palimpsest_persistence::Resumable> {
    let r = resume(path, options)?;
    if let Some(file) = writer {
        file.know_tail(r.end);
    }
    Some(palimpsest_persistence::Resumable {
        header: r.header,
        checkpoint: Some(r.checkpoint),
        tail: r.tail,
        report: r.report,
    })
}

/// [`resume`] from the sidecar's `text`; `Err` says why it is unusable.
fn resume_from(path: &Path, text: &str, options: ReadOptions) -> Result<Resumed, String> {
    if !reads_in_pieces(options) {
        return Err("a line cap below the format's limit reads whole files only".into());
    }
    let Sidecar { offset, checkpoint } = parse(text)?;
    if checkpoint.log_len() == 0 {
        return Err("it covers no event: there is nothing to skip".into());
    }
    let io = |e: io::Error| format!("reading the session file: {e}");
    let mut file = File::open(path).map_err(io)?;
    let (header, header_len) =
        header_line(&mut file, options).map_err(io)?.ok_or("the header line cannot be read")?;
    if !checkpoint.matches_header(&header) {
        return Err("it was taken of another session or under another header".into());
    }
    if offset < header_len {
        return Err("its offset is inside the header line".into());
    }
    if offset > file.metadata().map_err(io)?.len() {
        return Err("its offset is past the end of the file".into());
    }
    // The header line, then the file from the checkpoint's last event on:
    // a session file of its own, read as a whole one is.
    let mut head = Vec::with_capacity(usize::try_from(header_len).unwrap_or(0));
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    (&mut file).take(header_len).read_to_end(&mut head).map_err(io)?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let (log, read) = read_in_pieces(io::Cursor::new(head).chain(file), path, options, |e| {
        StoreError::io(format!("read {}", path.display()), e)
    })
    .map_err(|e| format!("a line after its offset does not read: {e}"))?;
    let mut events = log.events.into_iter();
    match events.next() {
        Some(last) if checkpoint.matches_last_event(&last) => {}
        Some(_) => return Err("the line at its offset is not the event it was taken after".into()),
        None => return Err("no whole line at its offset".into()),
    }
    let tail: Vec<Event> = events.collect();
    let from = checkpoint.log_len();
    if tail.iter().enumerate().any(|(i, e)| e.seq() != from + i as u64) {
        return Err("the lines after its offset do not continue its seqs".into());
    }
    // Lines and offsets of the file read (header, the checkpoint's last
    // line, the tail) back to the session file's.
    let torn_tail = log.torn_tail.map(|t| TornTail {
        line: t.line + from - 1,
        offset: t.offset - header_len + offset,
        len: t.len,
    });
    let end = crate::file::Tail {
        id: header.id.clone(),
        next_seq: Ok(from + tail.len() as u64),
        file_len: read - header_len + offset,
        torn: torn_tail,
        missing_newline: log.missing_newline,
    };
    Ok(Resumed { header, checkpoint, tail, report: LoadReport { torn_tail }, end })
}

/// Writes the sidecar of the session file at `path` for `checkpoint`:
/// finds where the line of its last event starts (from the old sidecar's
/// offset when that is still good, else from the header), then replaces
/// the sidecar atomically. `conflict` when the file holds fewer whole
/// event lines than the checkpoint covers; the file's contents are not
/// otherwise checked (a resume checks them).
pub(crate) fn save(path: &Path, session_id: &str, checkpoint: &Checkpoint) -> Result<(), StoreError> {
    let read_err = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => StoreError::NotFound { session_id: session_id.to_owned() },
        _ => StoreError::io(format!("read {}", path.display()), e),
    };
    let mut file = File::open(path).map_err(read_err)?;
    let options = ReadOptions::default();
    let Some((_, header_len)) = header_line(&mut file, options).map_err(read_err)? else {
        return Err(StoreError::Conflict {
            session_id: session_id.to_owned(),
            expected: 0,
            found: checkpoint.log_len(),
        });
    };
    let target = checkpoint.log_len().checked_sub(1);
    let offset = match target {
        None => header_len,
        Some(seq) => {
            // Start from the old sidecar's line if it is at or before ours.
            let start = read_sidecar(&sidecar_path(path))
                .ok()
                .and_then(|t| parse(&t).ok())
                .and_then(|s| Some((s.checkpoint.log_len().checked_sub(1)?, s.offset)))
                .filter(|&(old, at)| old <= seq && at >= header_len && line_seq(&mut file, at) == Some(old))
                .unwrap_or((0, header_len));
            match find_line(&mut file, start.1, seq - start.0).map_err(read_err)? {
                Some(at) if line_seq(&mut file, at) == Some(seq) => at,
                _ => {
                    return Err(StoreError::Conflict {
                        session_id: session_id.to_owned(),
                        expected: count_whole_lines(&mut file, header_len).map_err(read_err)?,
                        found: checkpoint.log_len(),
                    })
                }
            }
        }
    };
    let text = format!(
        "{{\"sidecar\":{SIDECAR_VERSION},\"offset\":{offset},\"checkpoint\":{}}}\n",
        checkpoint.to_json()
    );
    write_atomically(&sidecar_path(path), text.as_bytes())?;
    tracing::debug!(session_id, log_len = checkpoint.log_len(), offset, "saved a checkpoint sidecar");
    Ok(())
}

/// The offset of the line `skip` lines after the one starting at `from`;
/// `None` past the end of the file.
fn find_line(file: &mut File, from: u64, skip: u64) -> io::Result<Option<u64>> {
    if skip == 0 {
        return Ok(Some(from));
    }
    file.seek(SeekFrom::Start(from))?;
    let mut reader = BufReader::with_capacity(1 << 20, &mut *file);
    let (mut at, mut left) = (from, skip);
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(None);
        }
        let n = buf.len();
        for i in memchr::memchr_iter(b'\n', buf) {
            left -= 1;
            if left == 0 {
                return Ok(Some(at + i as u64 + 1));
            }
        }
        at += n as u64;
        reader.consume(n);
    }
}

/// The seq of the whole event line starting at `at` (ending in `\n`), or
/// `None`.
fn line_seq(file: &mut File, at: u64) -> Option<u64> {
    file.seek(SeekFrom::Start(at)).ok()?;
    let mut line = Vec::new();
    let cap = palimpsest_core_session::MAX_EVENT_LINE_BYTES as u64 + 1;
    BufReader::new(&mut *file).take(cap).read_until(b'\n', &mut line).ok()?;
    if line.pop() != Some(b'\n') {
        return None;
    }
    let text = std::str::from_utf8(&line).ok()?;
    Event::from_json(text).ok().map(|e| e.seq())
}

/// The number of `\n`-terminated lines after the header (for an error).
fn count_whole_lines(file: &mut File, from: u64) -> io::Result<u64> {
    file.seek(SeekFrom::Start(from))?;
    let mut reader = BufReader::with_capacity(1 << 20, &mut *file);
    let mut count = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(count);
        }
        count += memchr::memchr_iter(b'\n', buf).count() as u64;
        let n = buf.len();
        reader.consume(n);
    }
}

/// Replaces `target` with `bytes`: a hidden temporary file in the same
/// directory, written, synced, renamed over it, then the directory synced.
fn write_atomically(target: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let (tmp, mut file) = create_temp(dir)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::io(format!("write {}", tmp.display()), e));
    }
    drop(file);
    if let Err(e) = fs::rename(&tmp, target) {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::io(format!("rename {} to {}", tmp.display(), target.display()), e));
    }
    if let Err(e) = sync_dir(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not sync the directory after writing a checkpoint sidecar");
    }
    Ok(())
}

/// Removes the sidecar of the session file at `path`, if there is one.
pub(crate) fn remove(path: &Path) -> Result<(), StoreError> {
    let sidecar = sidecar_path(path);
    match fs::remove_file(&sidecar) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(format!("delete {}", sidecar.display()), e)),
    }
}
