//! The JSONL session file format (contract section 6), read from and written
//! to memory. No I/O here: the file backends own the files.
//!
//! # Wire spec
//!
//! ```text
//! {"type":"session","version":0,"id":"…","createdAt":…}      ← line 1: the header
//! {"seq":0,"time":…,"type":"turn/start","data":{"turn":1}}  ← one event a line
//! …
//! ```
//!
//! Every line ends in `\n`. Only the last line may lack it:
//!
//! * if it fails to parse as JSON it is a **torn write**: dropped on load and
//!   reported in [`JsonlLog::torn_tail`], and the writer cuts it off before
//!   its next append;
//! * if it parses whole it is kept, and the writer adds the missing `\n`
//!   first ([`JsonlLog::missing_newline`]).
//!
//! Any other bad line (a blank line included) is `log-corrupt` with its
//! 1-based line number (the header is line 1); nothing is skipped. A line
//! that is JSON but not a well-formed event is `event-malformed` (or the
//! section-2 code it breaks), again with its line number.
//!
//! Unknown event types are plugin events: kept verbatim, never on the surface.

use crate::error::LoadError;
use crate::event::Event;
use crate::header::SessionHeader;
use crate::session::Session;

/// Longest line accepted by default: 64 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// Reading limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// A longer line fails with `log-corrupt` before it is parsed, which
    /// bounds the memory a hostile file can make a reader use.
    pub max_line_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions { max_line_bytes: DEFAULT_MAX_LINE_BYTES }
    }
}

/// A torn last line that was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Its 1-based line number.
    pub line: u64,
    /// Byte offset where it starts: the file's valid length.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// A JSONL file, read: header, events, and what was found at the tail.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlLog {
    /// The header.
    pub header: SessionHeader,
    /// The events, each well-formed (section 1, rules 1–4); rules that relate
    /// events to each other are checked by [`Session::from_log`].
    pub events: Vec<Event>,
    /// A torn last line, dropped.
    pub torn_tail: Option<TornTail>,
    /// The last line parsed whole but had no `\n`.
    pub missing_newline: bool,
}

impl JsonlLog {
    /// Reads a whole file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<JsonlLog, LoadError> {
        JsonlLog::parse_with(bytes, ReadOptions::default())
    }

    /// Reads a whole file's bytes with explicit limits.
    pub fn parse_with(bytes: &[u8], options: ReadOptions) -> Result<JsonlLog, LoadError> {
        let mut reader = JsonlReader::new(bytes, options)?;
        let mut events = Vec::with_capacity(bytes.len() / 256);
        for event in reader.by_ref() {
            events.push(event?);
        }
        Ok(JsonlLog {
            header: reader.header,
            events,
            torn_tail: reader.torn_tail,
            missing_newline: reader.missing_newline,
        })
    }

    /// Seeds a [`Session`] from this log, checking every rule.
    pub fn into_session(self) -> Result<Session, LoadError> {
        // The line is the event's position (+2: the header is line 1), not
        // its seq, which may be anything when it is the thing that is wrong.
        let mut session = Session::create(self.header);
        for (index, event) in self.events.into_iter().enumerate() {
            let line = u64::try_from(index).map_or(u64::MAX, |i| i.saturating_add(2));
            session.append(event).map_err(|error| LoadError::Rule { line, error })?;
        }
        Ok(session)
    }
}

/// Reads a JSONL file's events one at a time, after its header.
///
/// Used by checkers that want to stop at the first bad event but keep the
/// events before it. Yields `Err` at most once, then ends.
#[derive(Debug)]
pub struct JsonlReader<'a> {
    header: SessionHeader,
    bytes: &'a [u8],
    pos: usize,
    line: u64,
    options: ReadOptions,
    torn_tail: Option<TornTail>,
    missing_newline: bool,
    failed: bool,
}

impl<'a> JsonlReader<'a> {
    /// Reads the header; events follow through the iterator.
    pub fn new(bytes: &'a [u8], options: ReadOptions) -> Result<JsonlReader<'a>, LoadError> {
        let (first, rest_at, has_newline) = match memchr(b'\n', bytes) {
            Some(i) => (&bytes[..i], i + 1, true),
            None => (bytes, bytes.len(), false),
        };
        if first.is_empty() {
            return Err(LoadError::HeaderMalformed { detail: "the file has no header line".into() });
        }
        if first.len() > options.max_line_bytes {
            return Err(LoadError::HeaderMalformed {
                detail: format!("the header line is longer than {} bytes", options.max_line_bytes),
            });
        }
        let text = std::str::from_utf8(first)
            .map_err(|e| LoadError::HeaderMalformed { detail: format!("the header is not UTF-8: {e}") })?;
        let header = SessionHeader::from_json(text)?;
        Ok(JsonlReader {
            header,
            bytes,
            pos: rest_at,
            line: 1,
            options,
            torn_tail: None,
            missing_newline: !has_newline,
            failed: false,
        })
    }

    /// The header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The torn last line, once the reader has reached it.
    pub fn torn_tail(&self) -> Option<TornTail> {
        self.torn_tail
    }

    /// Whether the last line lacked its `\n` (known once the reader is done).
    pub fn missing_newline(&self) -> bool {
        self.missing_newline
    }

    /// The 1-based number of the line read last.
    pub fn line(&self) -> u64 {
        self.line
    }
}

impl Iterator for JsonlReader<'_> {
    type Item = Result<Event, LoadError>;

    fn next(&mut self) -> Option<Result<Event, LoadError>> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let start = self.pos;
        let rest = &self.bytes[start..];
        let (raw, terminated) = match memchr(b'\n', rest) {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        self.pos = start + raw.len() + usize::from(terminated);
        self.line += 1;
        let line = self.line;
        let corrupt = |detail: String| LoadError::LogCorrupt { line, detail };
        let result = if raw.len() > self.options.max_line_bytes {
            Err(corrupt(format!(
                "line is {} bytes, longer than the {}-byte limit",
                raw.len(),
                self.options.max_line_bytes
            )))
        } else {
            match std::str::from_utf8(raw) {
                Err(e) if terminated => Err(corrupt(format!("not UTF-8: {e}"))),
                Err(_) => Err(corrupt(String::new())),
                Ok(text) => decode_line(text, line),
            }
        };
        match result {
            Err(LoadError::LogCorrupt { .. }) if !terminated => {
                // The one bad line we forgive: an unterminated last line that
                // does not parse is a torn write.
                tracing::warn!(line, bytes = raw.len(), "dropping torn last line");
                self.torn_tail = Some(TornTail { line, offset: start as u64, len: raw.len() as u64 });
                None
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
            Ok(event) => {
                self.missing_newline = !terminated;
                Some(Ok(event))
            }
        }
    }
}

fn decode_line(text: &str, line: u64) -> Result<Event, LoadError> {
    if text.trim().is_empty() {
        return Err(LoadError::LogCorrupt { line, detail: "blank line".into() });
    }
    Event::from_json(text).map_err(|error| {
        // A line that is not JSON at all is corruption; JSON that is not a
        // valid event is a rule violation.
        match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Err(e) => LoadError::LogCorrupt { line, detail: format!("not JSON: {e}") },
            Ok(_) => LoadError::Rule { line, error },
        }
    })
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    memchr::memchr(needle, haystack)
}

/// Writes a header line, `\n` included.
pub fn header_line(header: &SessionHeader) -> String {
    let mut s = header.to_json();
    s.push('\n');
    s
}

/// Appends events as lines, `\n` included, to `out`.
pub fn write_events(events: &[Event], out: &mut Vec<u8>) {
    out.reserve(events.iter().map(|e| e.data().get().len() + 48).sum());
    for e in events {
        e.write_json(out);
        out.push(b'\n');
    }
}

/// A whole file's bytes: header then every event.
pub fn to_bytes(header: &SessionHeader, events: &[Event]) -> Vec<u8> {
    let mut out = header_line(header).into_bytes();
    write_events(events, &mut out);
    out
}
