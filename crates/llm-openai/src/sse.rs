//! A server-sent events parser that takes bytes in pieces of any size.
//!
//! It follows the WHATWG event-stream rules: lines end in CRLF, LF or a lone
//! CR (a CR at the end of one piece and an LF at the start of the next are
//! one line end); a line starting with `:` is a comment; `field: value`
//! strips one space after the colon; a line without a colon is a field with
//! an empty value; `data` lines accumulate, joined by `\n`; an empty line
//! dispatches the event (nothing is dispatched when no `data` line came);
//! a UTF-8 byte-order mark at the very start is skipped.
//!
//! Bytes are buffered until a line ends, so a piece boundary may fall
//! anywhere, in the middle of a multi-byte UTF-8 character included: lines
//! are decoded only once complete. A complete line that is not UTF-8 is an
//! error (the WHATWG rules would replace the bytes; a model's text would be
//! silently changed).
//!
//! One deliberate leniency: at the end of the input, an unterminated last
//! line is read as a line and pending data is dispatched, where the WHATWG
//! rules drop it. A server that closes right after `data: [DONE]` (no
//! blank line) is common; a truncated JSON event is still caught by the
//! JSON decoder.

use std::fmt;

/// The longest line (and the largest event) accepted, in bytes: a guard
/// against a server that never ends a line.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event` field, when one was sent (OpenAI sends none).
    pub(crate) event: Option<String>,
    /// The `data` lines, joined by `\n`.
    pub(crate) data: String,
}

/// Why the byte stream could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A complete line that is not UTF-8.
    InvalidUtf8 {
        /// The 1-based line number.
        line: u64,
    },
    /// A line or an event longer than [`MAX_EVENT_BYTES`].
    TooLong {
        /// The 1-based line number.
        line: u64,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::InvalidUtf8 { line } => write!(f, "event stream line {line} is not valid UTF-8"),
            SseError::TooLong { line } => {
                write!(f, "event stream line {line} makes an event longer than {MAX_EVENT_BYTES} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// The incremental parser.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of the current, unterminated line.
    line: Vec<u8>,
    /// The previous piece ended with a CR: an LF starting this one belongs to it.
    after_cr: bool,
    /// Whether the start of the stream (and its optional BOM) has been seen.
    started: bool,
    /// Lines completed so far.
    lines: u64,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds one piece of the byte stream; returns the events it completes,
    /// and the error that stopped it, if one did: the events completed
    /// before a bad line in the same piece are still returned (they were
    /// dropped with it).
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> (Vec<SseEvent>, Option<SseError>) {
        let mut out = Vec::new();
        let error = self.feed_into(bytes, &mut out).err();
        (out, error)
    }

    fn feed_into(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.push_bytes(&bytes[..end])?;
            self.end_line(out)?;
            if bytes[end] == b'\r' {
                match bytes.get(end + 1) {
                    Some(b'\n') => bytes = &bytes[end + 2..],
                    Some(_) => bytes = &bytes[end + 1..],
                    None => {
                        self.after_cr = true;
                        bytes = &[];
                    }
                }
            } else {
                bytes = &bytes[end + 1..];
            }
        }
        self.push_bytes(bytes)
    }

    /// Ends the input: a last unterminated line is read, and pending data is
    /// dispatched (see the module docs).
    pub(crate) fn finish(&mut self) -> (Vec<SseEvent>, Option<SseError>) {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            if let Err(e) = self.end_line(&mut out) {
                return (out, Some(e));
            }
        }
        self.dispatch(&mut out);
        (out, None)
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong { line: self.lines + 1 });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.lines += 1;
        let bytes = std::mem::take(&mut self.line);
        if bytes.first() == Some(&b':') {
            // A comment, whatever its bytes: ignored, as the format says.
            self.started = true;
            return Ok(());
        }
        let mut text = match String::from_utf8(bytes) {
            Ok(text) => text,
            // A field this parser reads nothing of but its name (`id`,
            // `retry`, an unknown one) or a short word (`event`) is read
            // with its bad bytes replaced, as the format says streams are
            // decoded; only a `data` line, the answer, is refused.
            Err(e) if e.as_bytes().split(|&b| b == b':').next() != Some(b"data") => {
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
            Err(_) => return Err(SseError::InvalidUtf8 { line: self.lines }),
        };
        if !self.started {
            self.started = true;
            if let Some(rest) = text.strip_prefix('\u{feff}') {
                text = rest.to_owned();
            }
        }
        if text.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if text.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_str(), ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLong { line: self.lines });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // `id` and `retry` matter to browsers reconnecting; a chat
            // completion is never resumed, so they are read and dropped.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent { event, data: std::mem::take(&mut self.data) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pieces(pieces: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            let (events, error) = p.feed(piece);
            out.extend(events);
            if let Some(e) = error {
                return Err(e);
            }
        }
        let (events, error) = p.finish();
        out.extend(events);
        error.map_or(Ok(out), Err)
    }

    fn data(d: &str) -> SseEvent {
        SseEvent { event: None, data: d.to_owned() }
    }

    /// Every way of cutting `input` in two or three pieces, and byte by
    /// byte, parses like the whole.
    fn assert_split_invariant(input: &[u8]) -> Vec<SseEvent> {
        let whole = parse_pieces(&[input]);
        for i in 0..=input.len() {
            assert_eq!(parse_pieces(&[&input[..i], &input[i..]]), whole, "split at {i}");
            for j in i..=input.len() {
                assert_eq!(
                    parse_pieces(&[&input[..i], &input[i..j], &input[j..]]),
                    whole,
                    "split at {i},{j}"
                );
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(parse_pieces(&bytes), whole, "byte by byte");
        whole.unwrap_or_default()
    }

    #[test]
    fn line_endings_comments_and_multi_line_data() {
        let input = "\u{feff}: keep-alive\r\ndata: {\"a\":\r\ndata:1}\r\n\r\nevent: error\rdata: x\r\rid: 7\nretry: 10\nfield-without-colon\ndata\n\ndata: [DONE]\n\n";
        let events = assert_split_invariant(input.as_bytes());
        assert_eq!(
            events,
            [
                data("{\"a\":\n1}"),
                SseEvent { event: Some("error".into()), data: "x".into() },
                data(""),
                data("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_split_inside_a_utf8_character_is_reassembled() {
        let input = "data: h\u{e9}llo \u{1f600} \u{4e16}\n\n";
        let events = assert_split_invariant(input.as_bytes());
        assert_eq!(events, [data("h\u{e9}llo \u{1f600} \u{4e16}")]);
    }

    #[test]
    fn a_blank_line_without_data_dispatches_nothing_and_resets_event() {
        let events = parse_pieces(&[b"event: ping\n\n\n\ndata: a\n\n"]);
        assert_eq!(events, Ok(vec![data("a")]));
    }

    #[test]
    fn an_unterminated_last_event_is_dispatched_at_the_end() {
        assert_eq!(parse_pieces(&[b"data: [DONE]"]), Ok(vec![data("[DONE]")]));
        assert_eq!(parse_pieces(&[b"data: a\n"]), Ok(vec![data("a")]));
        assert_eq!(parse_pieces(&[b"data: a\r"]), Ok(vec![data("a")]));
        assert_eq!(parse_pieces(&[b": only a comment"]), Ok(vec![]));
        assert_eq!(parse_pieces(&[]), Ok(vec![]));
    }

    #[test]
    fn a_bom_is_only_skipped_at_the_start() {
        let events = parse_pieces(&["data: a\n\n\u{feff}data: b\n\n".as_bytes()]);
        // A later BOM starts a field named "\u{feff}data", which is ignored.
        assert_eq!(events, Ok(vec![data("a")]));
    }

    #[test]
    fn invalid_utf8_is_an_error_naming_the_line() {
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"data: ok\n\n"), (vec![data("ok")], None));
        let (events, err) = p.feed(b"data: \xff\xfe\n");
        assert_eq!((events, err.clone()), (vec![], Some(SseError::InvalidUtf8 { line: 3 })));
        assert_eq!(err.map(|e| e.to_string()), Some("event stream line 3 is not valid UTF-8".to_owned()));
        // Split, the bad bytes are caught once the line ends.
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"data: \xe2\x82"), (vec![], None));
        assert_eq!(p.feed(b"\n"), (vec![], Some(SseError::InvalidUtf8 { line: 1 })));
    }

    #[test]
    fn the_events_before_a_bad_line_in_the_same_piece_are_kept() {
        // They were dropped with the error: a whole answer lost to the
        // line after it (an outside probe).
        let mut p = SseParser::default();
        let (events, err) = p.feed(b"data: a\n\ndata: b\n\ndata: \xff\n\n");
        assert_eq!(events, [data("a"), data("b")]);
        assert_eq!(err, Some(SseError::InvalidUtf8 { line: 5 }));
    }

    #[test]
    fn a_field_other_than_data_with_bad_bytes_is_read_lossily() {
        assert_eq!(parse_pieces(&[b"id: \xff\nretry: \xfe\nx\xff: 1\ndata: a\n\n"]), Ok(vec![data("a")]));
        let events = parse_pieces(&[b"event: p\xffng\ndata: a\n\n"]).unwrap_or_default();
        assert_eq!(events[0].event.as_deref(), Some("p\u{FFFD}ng"));
    }

    #[test]
    fn a_comment_is_ignored_whatever_its_bytes() {
        assert_eq!(parse_pieces(&[b": \xff\xfe\ndata: a\n\n"]), Ok(vec![data("a")]));
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::default();
        let big = vec![b'a'; MAX_EVENT_BYTES];
        assert_eq!(p.feed(b"data: "), (vec![], None));
        assert_eq!(p.feed(&big), (vec![], Some(SseError::TooLong { line: 1 })));
    }

    #[test]
    fn an_event_too_large_in_total_is_refused() {
        let mut p = SseParser::default();
        let line = vec![b'a'; MAX_EVENT_BYTES / 2 - 10];
        let mut input = b"data: ".to_vec();
        input.extend_from_slice(&line);
        input.push(b'\n');
        assert_eq!(p.feed(&input), (vec![], None));
        assert_eq!(p.feed(&input), (vec![], None));
        assert_eq!(p.feed(&input), (vec![], Some(SseError::TooLong { line: 3 })));
    }
}
