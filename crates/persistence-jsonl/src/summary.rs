//! A session file's [`SessionSummary`] from its head and its tail: the
//! header line, the lines from the end back to the last turn bracket, and
//! the lines from the start up to the first prompt. On a long session that
//! is a few kilobytes of a file of gigabytes.
//!
//! Only a healthy file is read this way: every line read is a well-formed
//! event within the line cap, and the seqs read count by one (from 0 after
//! the header). A torn last line (unterminated, and not JSON: what a crash
//! mid-append leaves) is dropped, as a load drops it. Anything else — an
//! unterminated last line that parses, a bad line, a gap — gives up
//! ([`None`]), and the store falls back to a full load, which reports it
//! exactly as a load does (with its line number).

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::path::Path;

use palimpsest_core_session::jsonl::{JsonlReader, ReadOptions};
use palimpsest_core_session::{Event, EventType};
use palimpsest_persistence::{is_turn_bracket, SessionSummary, StoreError};

use crate::file::read_session_file_with;

/// The first read from the end; doubled while a line does not fit.
const BLOCK: usize = 64 * 1024;

/// The [`SessionSummary`] of the session file at `path`: from its head and
/// tail when the file is healthy (see the module docs), else from a full
/// read, with exactly a full read's errors.
///
/// ```
/// use palimpsest_core_session::jsonl::ReadOptions;
/// use palimpsest_core_session::{payload::*, SessionHeader};
/// use palimpsest_persistence::SessionStore;
/// use palimpsest_persistence_jsonl::{read_session_summary, JsonlStore};
///
/// let dir = tempfile::tempdir()?;
/// let store = JsonlStore::open(dir.path())?;
/// let mut s = palimpsest_core_session::Session::create(SessionHeader::new("s1", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// s.append_log(2, TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;
/// store.create_with_events(s.header(), s.events())?;
/// let summary = read_session_summary(&store.path_of("s1")?, ReadOptions::default())?;
/// assert_eq!((summary.events, summary.turns()), (2, 1));
/// assert_eq!(summary, store.summary("s1")?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_session_summary(path: &Path, options: ReadOptions) -> Result<SessionSummary, StoreError> {
    if let Some(summary) = summarize(path, options) {
        return Ok(summary);
    }
    let stored = read_session_file_with(path, options)?;
    Ok(SessionSummary::of(stored.header, &stored.events))
}

/// The summary of the session file at `path`, or `None` when the file is
/// not healthy (or cannot be read): then a full load decides.
pub(crate) fn summarize(path: &Path, options: ReadOptions) -> Option<SessionSummary> {
    match try_summarize(path, options) {
        Ok(summary) => summary,
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "summary: reading failed; a full load decides");
            None
        }
    }
}

fn try_summarize(path: &Path, options: ReadOptions) -> io::Result<Option<SessionSummary>> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    // The header line, as a load reads it.
    let mut head = Vec::new();
    let cap = options.max_header_bytes() as u64 + 1;
    io::BufReader::new(&mut file).take(cap).read_until(b'\n', &mut head)?;
    if head.last() != Some(&b'\n') {
        return Ok(None);
    }
    let Ok(reader) = JsonlReader::new(&head, options) else { return Ok(None) };
    let mut summary = SessionSummary::empty(reader.header().clone());
    let header_end = head.len() as u64;
    if len == header_end {
        return Ok(Some(summary));
    }

    // From the end back to the last turn bracket (or the header).
    let mut back = Backward {
        file: &mut file,
        low: header_end,
        pos: len,
        buf: Vec::new(),
        cap: options.max_line_bytes,
        too_long: false,
    };
    let mut lowest = len;
    if !back.ends_in_newline()? {
        // The last line has no `\n`. Torn, it is dropped as a load drops
        // it (a crashed session must not cost a full load to list); whole,
        // the full load keeps and words it.
        let Some((offset, tail)) = back.unterminated_tail()? else { return Ok(None) };
        if !is_torn(&head, &tail, options) {
            return Ok(None);
        }
        lowest = offset;
    }
    let mut next_seq: Option<u64> = None;
    let mut earliest_prompt = None;
    while let Some((offset, line)) = back.next_line()? {
        let Some(event) = decode(&line, options) else { return Ok(None) };
        match next_seq {
            None => {
                summary.events = event.seq() + 1;
                summary.last_activity = Some(event.time());
            }
            Some(next) if event.seq().checked_add(1) != Some(next) => return Ok(None),
            Some(_) => {}
        }
        next_seq = Some(event.seq());
        lowest = offset;
        if offset == header_end && event.seq() != 0 {
            return Ok(None);
        }
        if *event.event_type() == EventType::UserMessage {
            earliest_prompt = Some(event);
        } else if is_turn_bracket(event.event_type()) {
            summary.last_turn = Some(event);
            break;
        }
    }
    if back.too_long {
        return Ok(None);
    }

    // From the start up to the first prompt, or to where the tail began.
    file.seek(SeekFrom::Start(header_end))?;
    let mut forward = io::BufReader::new(&mut file);
    let (mut offset, mut seq, mut line) = (header_end, 0u64, Vec::new());
    while offset < lowest {
        line.clear();
        let read = (&mut forward).take(options.max_line_bytes as u64 + 1).read_until(b'\n', &mut line)?;
        if line.last() != Some(&b'\n') {
            return Ok(None);
        }
        offset += read as u64;
        let Some(event) = decode(&line[..line.len() - 1], options) else { return Ok(None) };
        if event.seq() != seq {
            return Ok(None);
        }
        seq += 1;
        if *event.event_type() == EventType::UserMessage {
            summary.first_prompt = Some(event);
            return Ok(Some(summary));
        }
    }
    summary.first_prompt = earliest_prompt;
    Ok(Some(summary))
}

/// Whether `tail`, the file's unterminated last line, is a torn write a
/// load drops: decided by the load's own reader, given the header line and
/// that line alone.
fn is_torn(head: &[u8], tail: &[u8], options: ReadOptions) -> bool {
    let mut bytes = Vec::with_capacity(head.len() + tail.len());
    bytes.extend_from_slice(head);
    bytes.extend_from_slice(tail);
    let Ok(mut reader) = JsonlReader::new(&bytes, options) else { return false };
    reader.by_ref().next().is_none() && reader.torn_tail().is_some()
}

/// One line (without its `\n`) as a load decodes it, or `None` for any
/// line a load would not take as it is.
fn decode(line: &[u8], options: ReadOptions) -> Option<Event> {
    if line.len() > options.max_line_bytes {
        return None;
    }
    Event::from_json(std::str::from_utf8(line).ok()?).ok()
}

/// Reads a file's lines backwards, from `pos` down to `low`.
struct Backward<'f> {
    file: &'f mut File,
    low: u64,
    /// The file offset of `buf[0]`.
    pos: u64,
    /// Bytes not yet handed out; when not empty, it ends with a `\n`.
    buf: Vec<u8>,
    cap: usize,
    /// Set when a line longer than `cap` ended the reading.
    too_long: bool,
}

impl Backward<'_> {
    /// Reads the last block; whether the file ends in `\n`.
    fn ends_in_newline(&mut self) -> io::Result<bool> {
        self.more()?;
        Ok(self.buf.last() == Some(&b'\n'))
    }

    /// Prepends the block before `pos`: [`BLOCK`] bytes, or as many as
    /// `buf` holds (so that a long line costs O(its length) in all).
    fn more(&mut self) -> io::Result<()> {
        let want = BLOCK.max(self.buf.len()) as u64;
        let start = self.pos.saturating_sub(want).max(self.low);
        let mut chunk = vec![0; (self.pos - start) as usize];
        self.file.seek(SeekFrom::Start(start))?;
        self.file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&self.buf);
        self.buf = chunk;
        self.pos = start;
        Ok(())
    }

    /// The file's last line when it has no `\n` (after
    /// [`ends_in_newline`](Backward::ends_in_newline) said so), and its
    /// offset, taken off `buf` so that [`next_line`](Backward::next_line)
    /// goes on from the line before it; `None` for one longer than the cap
    /// (setting `too_long`).
    fn unterminated_tail(&mut self) -> io::Result<Option<(u64, Vec<u8>)>> {
        loop {
            if let Some(i) = self.buf.iter().rposition(|&b| b == b'\n') {
                let tail = self.buf[i + 1..].to_vec();
                self.buf.truncate(i + 1);
                return Ok(Some((self.pos + i as u64 + 1, tail)));
            }
            if self.pos == self.low {
                return Ok(Some((self.pos, std::mem::take(&mut self.buf))));
            }
            if self.buf.len() > self.cap {
                self.too_long = true;
                return Ok(None);
            }
            self.more()?;
        }
    }

    /// The previous line and its offset, without its `\n`; `None` at `low`,
    /// or for a line longer than the cap (setting `too_long`: a full load
    /// words that).
    fn next_line(&mut self) -> io::Result<Option<(u64, Vec<u8>)>> {
        loop {
            let Some(content_end) = self.buf.len().checked_sub(1) else { return Ok(None) };
            if let Some(i) = self.buf[..content_end].iter().rposition(|&b| b == b'\n') {
                let line = self.buf[i + 1..content_end].to_vec();
                self.buf.truncate(i + 1);
                return Ok(Some((self.pos + i as u64 + 1, line)));
            }
            if self.pos == self.low {
                let line = self.buf[..content_end].to_vec();
                self.buf.clear();
                return Ok(Some((self.pos, line)));
            }
            if content_end > self.cap {
                self.too_long = true;
                return Ok(None);
            }
            self.more()?;
        }
    }
}
