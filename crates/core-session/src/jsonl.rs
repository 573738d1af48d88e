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
//! section-2 code it breaks), again with its line number; so is a line in
//! which any object names a key twice. A header naming a key twice is
//! `header-malformed`.
//!
//! A line longer than the reader's cap (by default, and at most, the
//! format's [`MAX_EVENT_LINE_BYTES`]) is `event-too-large` with its line
//! number, before it is parsed, **with or without** its `\n`: no writer of
//! this format writes such a line, so it is not the prefix of a torn write,
//! and dropping it could throw away a whole event. A header line longer than
//! [`MAX_HEADER_LINE_BYTES`] is
//! `header-malformed`.
//!
//! Unknown event types are plugin events: kept verbatim, never on the surface.

use crate::error::{AppendError, LoadError};
use crate::event::{seq_prefix, Event, SharedLines};
use crate::header::SessionHeader;
use crate::limits::{MAX_EVENT_LINE_BYTES, MAX_HEADER_LINE_BYTES};
use crate::session::Session;

/// Reading limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// A longer line fails with `event-too-large` before it is parsed, which
    /// bounds the memory a hostile file can make a reader use. The default,
    /// [`MAX_EVENT_LINE_BYTES`], is what every writer holds events to; a
    /// smaller cap reads less, a larger one cannot read more (a line over
    /// [`MAX_EVENT_LINE_BYTES`] is refused once read).
    pub max_line_bytes: usize,
    /// How many threads may decode one large file: `0` (the default) for
    /// as many as the machine has, `1` for none but the caller's. A server
    /// that loads many sessions at once may want `1`.
    pub decode_threads: usize,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions { max_line_bytes: MAX_EVENT_LINE_BYTES, decode_threads: 0 }
    }
}

impl ReadOptions {
    /// [`ReadOptions::decode_threads`], `0` resolved to the machine's parallelism.
    pub fn threads(&self) -> usize {
        match self.decode_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The error for line `line` of `len` bytes, over this cap: the same
    /// code whether or not a `\n` ends it (see the module docs). `start`
    /// is the line's first bytes, from which its seq is named when they
    /// are a canonical event's.
    pub fn overlong_line(&self, line: u64, len: u64, start: &[u8]) -> LoadError {
        let start = &start[..start.len().min(32)];
        // The prefix may end inside a character; the seq is ASCII anyway.
        let text = match std::str::from_utf8(start) {
            Ok(text) => text,
            // `valid_up_to` is, by its contract, the length of the valid prefix.
            Err(e) => std::str::from_utf8(&start[..e.valid_up_to()]).expect("the valid prefix is UTF-8"),
        };
        let limit = self.max_line_bytes.min(MAX_EVENT_LINE_BYTES) as u64;
        LoadError::Rule {
            line: Some(line),
            error: AppendError::EventTooLarge { seq: seq_prefix(text), len, limit },
        }
    }

    /// The longest header line this reader reads: its cap, and never more
    /// than [`MAX_HEADER_LINE_BYTES`].
    pub fn max_header_bytes(&self) -> usize {
        self.max_line_bytes.min(MAX_HEADER_LINE_BYTES)
    }

    /// The error for a header line of `len` bytes, over
    /// [`max_header_bytes`](ReadOptions::max_header_bytes): `header-malformed`.
    pub fn overlong_header(&self, len: u64) -> LoadError {
        let limit = self.max_header_bytes();
        LoadError::HeaderMalformed {
            detail: format!(
                "the header line is {} bytes, longer than the {limit}-byte limit",
                crate::limits::counted_len(len)
            ),
        }
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
    ///
    /// A large file is decoded on several threads (up to the machine's
    /// parallelism), each taking a run of whole lines; the result, errors
    /// and line numbers included, is exactly that of reading it line by line.
    pub fn parse_with(bytes: &[u8], options: ReadOptions) -> Result<JsonlLog, LoadError> {
        JsonlLog::parse_on(bytes, options, options.threads(), MIN_PART_BYTES)
    }

    /// [`JsonlLog::parse_with`] on at most `threads` threads, each taking at
    /// least `min_part` bytes.
    fn parse_on(
        bytes: &[u8],
        options: ReadOptions,
        threads: usize,
        min_part: usize,
    ) -> Result<JsonlLog, LoadError> {
        // The whole file's events are kept: they share their payloads.
        let mut decoder = JsonlDecoder { threads, min_part, share: true, ..JsonlDecoder::new(options) };
        let used = decoder.feed(bytes)?;
        decoder.finish(&bytes[used..])
    }

    /// Reads a whole file's bytes as far as its first bad line, keeping
    /// every event before it: what a checker that reports the first
    /// violation and the accepted prefix needs (decoded on several threads,
    /// as [`JsonlLog::parse_with`]). `Err` only when the header cannot be
    /// read; any later error is [`JsonlPrefix::error`], and the events are
    /// exactly those a [`JsonlReader`] yields before it.
    pub fn parse_prefix(bytes: &[u8], options: ReadOptions) -> Result<JsonlPrefix, LoadError> {
        let mut decoder = JsonlDecoder::new(options);
        match decoder.feed(bytes) {
            Ok(used) => decoder.finish_prefix(&bytes[used..]),
            Err(error) => decoder.stopped_at(error),
        }
    }

    /// Seeds a [`Session`] from this log, checking every rule.
    pub fn into_session(self) -> Result<Session, LoadError> {
        // The line is the event's position (+2: the header is line 1), not
        // its seq, which may be anything when it is the thing that is wrong.
        let mut session = Session::create(self.header);
        for (index, event) in self.events.into_iter().enumerate() {
            let line = u64::try_from(index).map_or(u64::MAX, |i| i.saturating_add(2));
            session.append(event).map_err(|error| LoadError::Rule { line: Some(line), error })?;
        }
        Ok(session)
    }
}

/// A JSONL file read as far as its first bad line ([`JsonlLog::parse_prefix`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JsonlPrefix {
    /// The header.
    pub header: SessionHeader,
    /// Every event before the first bad line, each well-formed.
    pub events: Vec<Event>,
    /// The first bad line's error, if there is one (reading stopped there).
    pub error: Option<LoadError>,
    /// A torn last line, dropped (only when there is no error).
    pub torn_tail: Option<TornTail>,
    /// The last line parsed whole but had no `\n`.
    pub missing_newline: bool,
}

/// Reads the header line (without its `\n`).
fn header_of(line: &[u8], options: ReadOptions) -> Result<SessionHeader, LoadError> {
    if line.is_empty() {
        return Err(LoadError::HeaderMalformed { detail: "the file has no header line".into() });
    }
    if line.len() > options.max_header_bytes() {
        return Err(options.overlong_header(line.len() as u64));
    }
    let text = std::str::from_utf8(line)
        .map_err(|e| LoadError::HeaderMalformed { detail: format!("the header is not UTF-8: {e}") })?;
    SessionHeader::from_json(text)
}

/// Reads a JSONL file piece by piece, as it is read from disk, so that the
/// file is never held whole: [`feed`](JsonlDecoder::feed) it what has been
/// read, keep what it did not use, and [`finish`](JsonlDecoder::finish)
/// with that rest at the end of the file. The result, errors included, is
/// exactly [`JsonlLog::parse_with`]'s for the whole file, however the bytes
/// were cut (which is how `parse_with` itself reads).
///
/// ```
/// use palimpsest_core_session::jsonl::{JsonlDecoder, JsonlLog, ReadOptions};
///
/// let file = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}\n\
/// {\"seq\":0,\"time\":1,\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n";
/// let mut decoder = JsonlDecoder::new(ReadOptions::default());
/// let mut pending = Vec::new();
/// for piece in file.chunks(20) {
///     pending.extend_from_slice(piece);
///     let used = decoder.feed(&pending)?;
///     pending.drain(..used);
/// }
/// let log = decoder.finish(&pending)?;
/// assert_eq!(log, JsonlLog::parse(file)?);
/// # Ok::<(), palimpsest_core_session::LoadError>(())
/// ```
#[derive(Debug)]
pub struct JsonlDecoder {
    options: ReadOptions,
    threads: usize,
    min_part: usize,
    header: Option<SessionHeader>,
    events: Vec<Event>,
    /// Lines read so far, the header included.
    lines: u64,
    /// Bytes read so far.
    offset: u64,
    /// Whether events share their payloads, a text per run of lines
    /// ([`JsonlDecoder::share_payloads`]).
    share: bool,
}

impl JsonlDecoder {
    /// A decoder for one file, using up to [`ReadOptions::decode_threads`].
    pub fn new(options: ReadOptions) -> JsonlDecoder {
        JsonlDecoder {
            options,
            threads: options.threads(),
            min_part: MIN_PART_BYTES,
            header: None,
            events: Vec::new(),
            lines: 0,
            offset: 0,
            share: false,
        }
    }

    /// Whether the events decoded from here on share their payloads, one
    /// text per run of up to 1,024 lines
    /// ([`SharedText`](crate::event::SharedText)), instead of each holding
    /// its own: for a reader that keeps the whole file's events (a load),
    /// whose memory it lowers by the allocator's cost of a payload (16
    /// bytes and more an event). Off by default: a reader that takes the
    /// events as it goes and keeps a few of them (a streaming check) would
    /// keep whole runs alive for them, and pays more for the runs than it
    /// saves.
    ///
    /// ```
    /// use palimpsest_core_session::jsonl::{JsonlDecoder, ReadOptions};
    ///
    /// let file = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}\n\
    /// {\"seq\":0,\"time\":1,\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n";
    /// let mut decoder = JsonlDecoder::new(ReadOptions::default());
    /// decoder.share_payloads(true);
    /// decoder.feed(file)?;
    /// assert!(decoder.take_events()[0].shares_text());
    /// # Ok::<(), palimpsest_core_session::LoadError>(())
    /// ```
    pub fn share_payloads(&mut self, share: bool) {
        self.share = share;
    }

    /// Decodes every whole line at the start of `bytes` (the bytes that
    /// follow what earlier calls used) and returns how many bytes that was:
    /// up to and including the last `\n`. The caller keeps the rest and
    /// passes it again with the next bytes. A first error ends the read.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, LoadError> {
        let Some(last) = memchr::memrchr(b'\n', bytes) else { return Ok(0) };
        let mut start = 0;
        let header = match &self.header {
            Some(header) => header.clone(),
            None => {
                let end = memchr(b'\n', bytes).unwrap_or(last);
                let header = header_of(&bytes[..end], self.options)?;
                self.header = Some(header.clone());
                (start, self.lines) = (end + 1, 1);
                header
            }
        };
        let whole = &bytes[..=last];
        let parts = split_lines(whole, start, self.threads, self.min_part);
        if parts.len() > 1 {
            tracing::debug!(
                parts = parts.len(),
                bytes = whole.len() - start,
                "decoding JSONL lines in parallel"
            );
        }
        // Each part is read by its own reader, numbering its lines from 0;
        // they are renumbered below, once the parts before are known whole.
        let options = self.options;
        let decode = |(start, end): (usize, usize)| -> Part {
            let bytes = &whole[start..end];
            let mut part = JsonlReader {
                header: header.clone(),
                bytes,
                text: std::str::from_utf8(bytes).ok(),
                pos: 0,
                line: 0,
                options,
                torn_tail: None,
                missing_newline: false,
                failed: false,
                share: self.share,
                shared: None,
            };
            let mut events = Vec::with_capacity((end - start) / 256);
            let mut error = None;
            for event in part.by_ref() {
                match event {
                    Ok(e) => events.push(e),
                    Err(e) => error = Some(e),
                }
            }
            Part { events, error }
        };
        let decoded: Vec<Part> = std::thread::scope(|scope| {
            let (last, rest) = parts.split_last().unwrap_or((&(0, 0), &[]));
            let spawned: Vec<_> = rest
                .iter()
                .map(|&range| {
                    std::thread::Builder::new()
                        .name("palimpsest-jsonl-decode".into())
                        .spawn_scoped(scope, move || decode(range))
                        .map_err(|e| {
                            tracing::debug!(error = %e, "cannot start a decode thread; decoding here");
                            range
                        })
                })
                .collect();
            let last = decode(*last);
            let mut decoded: Vec<Part> = spawned
                .into_iter()
                .map(|handle| match handle {
                    Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(range) => decode(range),
                })
                .collect();
            decoded.push(last);
            decoded
        });
        for part in decoded {
            // Every line before this part was one event.
            if let Some(error) = part.error {
                let error = error.shifted(self.lines);
                // Kept for [`JsonlLog::parse_prefix`]: every event before the bad line.
                self.events.extend(part.events);
                return Err(error);
            }
            self.lines += part.events.len() as u64;
            if self.events.is_empty() {
                // Move the first part's vector rather than copy it: its
                // events are still in this core's cache.
                self.events = part.events;
            } else {
                self.events.extend(part.events);
            }
        }
        self.offset += whole.len() as u64;
        Ok(whole.len())
    }

    /// Takes the events decoded so far (and not taken before), in order:
    /// how a reader checks a file piece by piece without holding its
    /// events. After [`feed`](JsonlDecoder::feed) fails, these are the
    /// events before the bad line.
    ///
    /// ```
    /// use palimpsest_core_session::jsonl::{JsonlDecoder, ReadOptions};
    ///
    /// let file = b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}\n\
    /// {\"seq\":0,\"time\":1,\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n";
    /// let mut decoder = JsonlDecoder::new(ReadOptions::default());
    /// decoder.feed(file)?;
    /// assert_eq!(decoder.take_events().len(), 1);
    /// assert!(decoder.take_events().is_empty());
    /// assert_eq!(decoder.finish_prefix(b"")?.events.len(), 0);
    /// # Ok::<(), palimpsest_core_session::LoadError>(())
    /// ```
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The header, once a [`feed`](JsonlDecoder::feed) has read it.
    pub fn header(&self) -> Option<&SessionHeader> {
        self.header.as_ref()
    }

    /// The 1-based number of the next line to decode (1 before the header).
    pub fn next_line(&self) -> u64 {
        self.lines + 1
    }

    /// The longest line the next line may be: the header's limit before the
    /// header is read, else the reader's cap.
    pub fn next_line_cap(&self) -> usize {
        match self.header {
            None => self.options.max_header_bytes(),
            Some(_) => self.options.max_line_bytes,
        }
    }

    /// The error for the next line when it is `len` bytes long, over
    /// [`next_line_cap`](JsonlDecoder::next_line_cap), and begins with
    /// `start`: what [`feed`](JsonlDecoder::feed) or
    /// [`finish`](JsonlDecoder::finish) would say once they had it all, so
    /// that a reader can refuse the line without holding it whole.
    pub fn overlong(&self, len: u64, start: &[u8]) -> LoadError {
        match self.header {
            None => self.options.overlong_header(len),
            Some(_) => self.options.overlong_line(self.next_line(), len, start),
        }
    }

    /// Ends the file: `rest` is what the last [`feed`](JsonlDecoder::feed)
    /// did not use (a last line without its `\n`, or nothing). A rest that
    /// is not JSON is a torn write, dropped and reported.
    pub fn finish(self, rest: &[u8]) -> Result<JsonlLog, LoadError> {
        let prefix = self.finish_prefix(rest)?;
        if let Some(error) = prefix.error {
            return Err(error);
        }
        Ok(JsonlLog {
            header: prefix.header,
            events: prefix.events,
            torn_tail: prefix.torn_tail,
            missing_newline: prefix.missing_newline,
        })
    }

    /// Ends the file as far as its first bad line, like
    /// [`JsonlLog::parse_prefix`]: `rest` is what the last
    /// [`feed`](JsonlDecoder::feed) did not use. The prefix holds the
    /// events not [taken](JsonlDecoder::take_events); `Err` only when the
    /// header cannot be read.
    pub fn finish_prefix(mut self, rest: &[u8]) -> Result<JsonlPrefix, LoadError> {
        let Some(header) = self.header.take() else {
            // The file is one line without its `\n`: the header alone.
            let header = header_of(rest, self.options)?;
            return Ok(JsonlPrefix {
                header,
                events: Vec::new(),
                error: None,
                torn_tail: None,
                missing_newline: true,
            });
        };
        let mut last = JsonlReader {
            header,
            bytes: rest,
            text: None,
            pos: 0,
            line: self.lines,
            options: self.options,
            torn_tail: None,
            missing_newline: false,
            failed: false,
            share: false,
            shared: None,
        };
        let mut error = None;
        match last.next() {
            Some(Ok(event)) => self.events.push(event),
            Some(Err(e)) => error = Some(e),
            None => {}
        }
        Ok(JsonlPrefix {
            header: last.header,
            events: self.events,
            error,
            torn_tail: last.torn_tail.map(|t| TornTail { offset: t.offset + self.offset, ..t }),
            missing_newline: last.missing_newline,
        })
    }

    /// The prefix of a file whose [`feed`](JsonlDecoder::feed) failed with
    /// `error`: the events before the bad line (those not taken), and the
    /// error; `Err(error)` itself when it is the header's.
    pub fn stopped_at(mut self, error: LoadError) -> Result<JsonlPrefix, LoadError> {
        match self.header.take() {
            None => Err(error),
            Some(header) => Ok(JsonlPrefix {
                header,
                events: self.events,
                error: Some(error),
                torn_tail: None,
                missing_newline: false,
            }),
        }
    }
}

/// One run of lines, decoded.
struct Part {
    events: Vec<Event>,
    error: Option<LoadError>,
}

/// Below this many bytes a part is not worth a thread.
const MIN_PART_BYTES: usize = 1 << 20;

/// Cuts `bytes[start..]` into at most `parts` runs of whole lines, each
/// (but the last) ending just after a `\n`, and each of `min_part` bytes
/// or more.
fn split_lines(bytes: &[u8], start: usize, parts: usize, min_part: usize) -> Vec<(usize, usize)> {
    let parts = parts.clamp(1, ((bytes.len() - start) / min_part.max(1)).max(1));
    let step = (bytes.len() - start) / parts;
    let mut ranges = Vec::with_capacity(parts);
    let mut at = start;
    for i in 1..parts {
        let target = (start + i * step).max(at);
        let Some(nl) = memchr(b'\n', &bytes[target..]) else { break };
        let end = target + nl + 1;
        ranges.push((at, end));
        at = end;
    }
    ranges.push((at, bytes.len()));
    ranges
}

/// Reads a JSONL file's events one at a time, after its header.
///
/// Used by checkers that want to stop at the first bad event but keep the
/// events before it. Yields `Err` at most once, then ends.
#[derive(Debug, Clone)]
pub struct JsonlReader<'a> {
    header: SessionHeader,
    bytes: &'a [u8],
    /// `bytes` as text, when all of it is known to be UTF-8 (checked at
    /// once, which is quicker than line by line).
    text: Option<&'a str>,
    pos: usize,
    line: u64,
    options: ReadOptions,
    torn_tail: Option<TornTail>,
    missing_newline: bool,
    failed: bool,
    /// Whether events share their payloads, a text per run of lines: when
    /// this reader decodes a whole file's part for [`JsonlDecoder`]; not
    /// for a reader of the public API, whose caller may keep a few events
    /// of many.
    share: bool,
    /// The payloads of the lines ahead, when `share`.
    shared: Option<SharedLines<'a>>,
}

/// Lines whose payloads share one text, at most: the text is freed when
/// the last of their events is.
const SHARED_LINES: usize = 1024;

impl<'a> JsonlReader<'a> {
    /// Reads the header; events follow through the iterator.
    pub fn new(bytes: &'a [u8], options: ReadOptions) -> Result<JsonlReader<'a>, LoadError> {
        let (first, rest_at, has_newline) = match memchr(b'\n', bytes) {
            Some(i) => (&bytes[..i], i + 1, true),
            None => (bytes, bytes.len(), false),
        };
        let header = header_of(first, options)?;
        Ok(JsonlReader {
            header,
            bytes,
            text: None,
            pos: rest_at,
            line: 1,
            options,
            torn_tail: None,
            missing_newline: !has_newline,
            failed: false,
            share: false,
            shared: None,
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
        let corrupt = |detail: String| LoadError::LogCorrupt { line: Some(line), detail };
        let result = if raw.len() > self.options.max_line_bytes {
            // Not torn even when unterminated: see the module docs.
            Err(self.options.overlong_line(line, raw.len() as u64, raw))
        } else {
            // Slicing at line ends is slicing at character boundaries.
            let text = match self.text {
                Some(text) => Ok(&text[start..start + raw.len()]),
                None => std::str::from_utf8(raw),
            };
            match text {
                Err(e) if terminated => Err(corrupt(format!("not UTF-8: {e}"))),
                Err(_) => Err(corrupt(String::new())),
                Ok(text) => match self.shared_lines(start) {
                    Some(shared) => decode_line(text, line, |text| shared.decode(start, text)),
                    None => decode_line(text, line, Event::from_json),
                },
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

impl<'a> JsonlReader<'a> {
    /// The shared payloads of the line starting at `at` and those after
    /// it, taken from the text when this reader shares them and the lines
    /// taken before are behind.
    fn shared_lines(&mut self, at: usize) -> Option<&mut SharedLines<'a>> {
        let text = self.text.filter(|_| self.share)?;
        if self.shared.as_ref().is_none_or(|s| s.is_past(at)) {
            let mut end = at;
            let lines: Vec<(usize, &'a str)> = text
                .get(at..)?
                .split_inclusive('\n')
                .take(SHARED_LINES)
                .map(|l| {
                    let start = end;
                    end += l.len();
                    (start, l.strip_suffix('\n').unwrap_or(l))
                })
                .collect();
            self.shared = Some(SharedLines::new(&lines, end));
        }
        self.shared.as_mut()
    }
}

/// The event of line `line`, whose text is `text`, read by `read`.
fn decode_line(
    text: &str,
    line: u64,
    read: impl FnOnce(&str) -> Result<Event, AppendError>,
) -> Result<Event, LoadError> {
    if text.trim().is_empty() {
        return Err(LoadError::LogCorrupt { line: Some(line), detail: "blank line".into() });
    }
    read(text).map_err(|error| {
        // A line that is not JSON at all is corruption; JSON that is not a
        // valid event is a rule violation. A line too large to read is
        // never parsed (a reader without a cap of its own meets it here).
        if let AppendError::EventTooLarge { .. } = error {
            return LoadError::Rule { line: Some(line), error };
        }
        match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Err(e) => LoadError::LogCorrupt { line: Some(line), detail: format!("not JSON: {e}") },
            Ok(_) => LoadError::Rule { line: Some(line), error },
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
    out.reserve(events.iter().map(|e| e.json_len_hint() + 1).sum());
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

#[cfg(test)]
mod tests {
    //! Reading a file in parallel parts gives exactly what reading it line
    //! by line gives: the same events, the same first error with the same
    //! line number, the same torn tail.

    use proptest::prelude::*;

    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;

    /// The reference: the line-by-line reader, one line at a time.
    fn by_lines(bytes: &[u8], options: ReadOptions) -> Result<JsonlLog, LoadError> {
        let mut reader = JsonlReader::new(bytes, options)?;
        let mut events = Vec::new();
        for event in reader.by_ref() {
            events.push(event?);
        }
        let (torn_tail, missing_newline) = (reader.torn_tail, reader.missing_newline);
        Ok(JsonlLog { header: reader.header, events, torn_tail, missing_newline })
    }

    fn line(kind: u8, seq: u64) -> String {
        match kind % 4 {
            0 => format!(r#"{{"seq":{seq},"time":1,"type":"turn/start","data":{{"turn":{seq}}}}}"#),
            1 => format!(
                r#"{{"seq":{seq},"time":1,"type":"assistant/chunk","data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"t{seq}"}}}}}}"#
            ),
            2 => format!(
                r#"{{"seq":{seq},"time":1,"type":"user/message","data":{{"message":{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"hi"}}],"source":{{"kind":"user"}}}}}},"surfaceOp":"append"}}"#
            ),
            _ => format!(r#"{{"seq":{seq},"time":1,"type":"x/plugin","data":[{seq}]}}"#),
        }
    }

    /// A file, then one of: nothing, a bad line somewhere, a cut at a byte.
    fn file() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec(any::<u8>(), 0..60),
            0u8..6,
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(kinds, damage, at, cut)| {
                let mut lines: Vec<String> = vec![HEADER.to_owned()];
                lines.extend(kinds.iter().enumerate().map(|(i, &k)| line(k, i as u64)));
                let i = 1 + at.index(lines.len());
                match damage {
                    0 => lines.insert(i.min(lines.len()), String::new()),
                    1 => lines.insert(i.min(lines.len()), "{not json".into()),
                    2 => lines.insert(
                        i.min(lines.len()),
                        r#"{"seq":0,"time":1,"type":"turn/start","data":{}}"#.into(),
                    ),
                    _ => {}
                }
                let mut text = lines.join("\n").into_bytes();
                if damage != 4 {
                    text.push(b'\n');
                }
                if damage == 5 {
                    text.truncate(cut.index(text.len() + 1));
                }
                text
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn parts_read_what_lines_read(bytes in file(), threads in 1usize..6, min_part in 1usize..400) {
            let options = ReadOptions { max_line_bytes: 300, ..ReadOptions::default() };
            let parts = JsonlLog::parse_on(&bytes, options, threads, min_part);
            prop_assert_eq!(parts, by_lines(&bytes, options));
        }

        #[test]
        fn pieces_read_what_lines_read(
            bytes in file(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            threads in 1usize..4,
            share in any::<bool>(),
        ) {
            let options = ReadOptions { max_line_bytes: 300, ..ReadOptions::default() };
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            at.push(bytes.len());
            at.sort_unstable();
            let mut decoder = JsonlDecoder { threads, min_part: 1, ..JsonlDecoder::new(options) };
            decoder.share_payloads(share);
            let (mut pending, mut from) = (Vec::new(), 0);
            let mut result = None;
            for to in at {
                pending.extend_from_slice(&bytes[from..to]);
                from = to;
                match decoder.feed(&pending) {
                    Ok(used) => drop(pending.drain(..used)),
                    Err(e) => {
                        result = Some(Err(e));
                        break;
                    }
                }
            }
            let result = result.unwrap_or_else(|| decoder.finish(&pending));
            prop_assert_eq!(result, by_lines(&bytes, options));
        }
    }

    /// A whole file's events share their payloads, a text per run of
    /// lines, but for the lines not written canonically, which are read
    /// the general way; every event, and the first error's line, are what
    /// the line-by-line reader gives.
    #[test]
    fn a_whole_file_shares_payloads_across_runs_of_lines() {
        let n = 3 * SHARED_LINES as u64 + 17;
        // Every 100th line with its keys in another order: not canonical.
        // Every 100th with a raw `\r` between its payload's tokens, which
        // the event keeps as a space: it gets a text of its own.
        let text = |seq: u64| match seq % 100 {
            99 => format!(r#"{{"time":1,"seq":{seq},"type":"x/plugin","data":[{seq}]}}"#),
            49 => format!("{{\"seq\":{seq},\"time\":1,\"type\":\"x/plugin\",\"data\":[1,\r{seq}]}}"),
            _ => line((seq % 4) as u8, seq),
        };
        let mut bytes = format!("{HEADER}\n").into_bytes();
        for seq in 0..n {
            bytes.extend_from_slice(text(seq).as_bytes());
            bytes.push(b'\n');
        }
        let options = ReadOptions::default();
        for threads in [1, 3] {
            let log = JsonlLog::parse_on(&bytes, options, threads, 1).unwrap();
            assert_eq!(Ok(&log), by_lines(&bytes, options).as_ref());
            for e in &log.events {
                assert_eq!(e.shares_text(), !matches!(e.seq() % 100, 49 | 99), "seq {}", e.seq());
                assert!(!e.data().contains('\r'), "seq {}", e.seq());
            }
        }
        assert!(!by_lines(&bytes, options).unwrap().events.iter().any(Event::shares_text));
        // A bad line past the first runs: the same error, at the same line.
        let mut bad = bytes.clone();
        // After the fourth line end from the last: three lines before the end.
        let at =
            1 + bad.iter().enumerate().rev().filter(|(_, &b)| b == b'\n').nth(3).map(|(i, _)| i).unwrap();
        bad.splice(at..at, b"{\"seq\":1}\n".iter().copied());
        let expected = by_lines(&bad, options).unwrap_err();
        assert_eq!(JsonlLog::parse_on(&bad, options, 2, 1).unwrap_err(), expected);
        assert!(
            matches!(expected, LoadError::Rule { line: Some(l), .. } if l > 3 * SHARED_LINES as u64),
            "{expected:?}"
        );
    }

    #[test]
    fn a_large_file_is_cut_at_line_ends() {
        let mut bytes = HEADER.as_bytes().to_vec();
        bytes.push(b'\n');
        let body = bytes.len();
        for seq in 0..100 {
            bytes.extend_from_slice(line(3, seq).as_bytes());
            bytes.push(b'\n');
        }
        let ranges = split_lines(&bytes, body, 4, 1);
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges[0].0, body);
        assert_eq!(ranges[3].1, bytes.len());
        for w in ranges.windows(2) {
            assert_eq!(w[0].1, w[1].0, "the parts are contiguous");
            assert_eq!(bytes[w[0].1 - 1], b'\n', "a part ends after a line");
        }
        // Too small to be worth a thread: one part.
        assert_eq!(split_lines(&bytes, body, 4, MIN_PART_BYTES).len(), 1);
        let log = JsonlLog::parse_on(&bytes, ReadOptions::default(), 4, 1).unwrap();
        assert_eq!(log.events.len(), 100);
        assert!(log.events.iter().enumerate().all(|(i, e)| e.seq() == i as u64));
    }
}
