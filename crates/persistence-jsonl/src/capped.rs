//! Reading a session file under a line-size cap without ever holding a line
//! longer than the cap: what bounds the memory a hostile file can make a
//! reader use (see [`ReadOptions`]).
//!
//! The whole lines before an over-long line are kept (they are the events
//! the caller gets back anyway); of the over-long line itself at most one
//! read chunk beyond the cap is ever in memory. The outcome is exactly what
//! [`JsonlLog::parse_with`] says about the same bytes with the same cap:
//! an earlier bad line is reported first, and an over-long line is
//! `event-too-large` at its line, terminated or not (`header-malformed` on
//! line 1, whose cap is the header's).

use std::io::{self, Read};

use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions};
use palimpsest_core_session::limits::line_count_left;
use palimpsest_core_session::{LoadError, MAX_COUNTED_LINE_BYTES};

/// Bytes read per `read` call.
const CHUNK: usize = 64 * 1024;

/// A file read under a cap.
#[derive(Debug)]
pub(crate) struct Capped {
    /// The file's bytes up to the start of its first over-long line (all of
    /// them when there is none).
    pub(crate) bytes: Vec<u8>,
    /// The file's length, over-long line included.
    pub(crate) file_len: u64,
    /// The first over-long line, which was not kept.
    pub(crate) overlong: Option<Overlong>,
}

/// A line longer than the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overlong {
    /// Its 1-based line number.
    pub(crate) line: u64,
    /// Its length, without the `\n`.
    pub(crate) len: u64,
    /// Its first bytes (up to [`START`]), which name its seq.
    pub(crate) start: Vec<u8>,
}

/// Bytes kept of an over-long line: enough for `{"seq":` and a seq.
const START: usize = 32;

impl Overlong {
    /// What [`JsonlLog::parse_with`] makes of this line once every line
    /// before it was read: `event-too-large` at its line, with or without
    /// its `\n` (`header-malformed` on line 1).
    pub(crate) fn error(&self, options: ReadOptions) -> LoadError {
        if self.line == 1 {
            return options.overlong_header(self.len);
        }
        options.overlong_line(self.line, self.len, &self.start)
    }
}

/// Reads `source` to its end, keeping nothing of the first line longer than
/// `options.max_line_bytes` (and nothing after it: from there on bytes are
/// only counted, up to the end of that line).
pub(crate) fn read_capped(mut source: impl Read, options: ReadOptions) -> io::Result<Capped> {
    // The header (line 1) has its own, smaller cap.
    let mut cap = options.max_header_bytes();
    let mut chunk = vec![0u8; CHUNK];
    let mut bytes = Vec::new();
    // Where the current line starts in `bytes`, and its 1-based number.
    let (mut line_start, mut line) = (0usize, 1u64);
    let mut file_len = 0u64;
    loop {
        let n = read_some(&mut source, &mut chunk)?;
        if n == 0 {
            return Ok(Capped { bytes, file_len, overlong: None });
        }
        file_len += n as u64;
        let mut rest = &chunk[..n];
        loop {
            let (piece, newline) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let len = bytes.len() - line_start + piece.len();
            if len > cap {
                // Over the cap: keep nothing more; count to the line's end.
                let mut start = bytes[line_start..].to_vec();
                start.extend_from_slice(&piece[..piece.len().min(START)]);
                start.truncate(START);
                bytes.truncate(line_start);
                let (len, read) = if newline {
                    (len as u64, 0)
                } else {
                    let (len, _, read) = skip_line(&mut source, &mut chunk, len as u64)?;
                    (len, read)
                };
                file_len += read;
                return Ok(Capped { bytes, file_len, overlong: Some(Overlong { line, len, start }) });
            }
            bytes.extend_from_slice(piece);
            if !newline {
                break;
            }
            bytes.push(b'\n');
            line_start = bytes.len();
            line += 1;
            cap = options.max_line_bytes;
            rest = &rest[piece.len() + 1..];
        }
    }
}

/// Reads on to the end of the current line, counting, `so_far` bytes of
/// it already counted: returns the line's whole length (its `\n`
/// excluded), or [`MAX_COUNTED_LINE_BYTES`] where it goes on past that.
/// What follows the line is not read.
pub(crate) fn line_len(source: &mut impl Read, so_far: u64) -> io::Result<u64> {
    let mut chunk = vec![0u8; CHUNK];
    skip_line(source, &mut chunk, so_far).map(|(len, _, _)| len)
}

/// Reads on to the end of the current line, counting: returns the line's
/// whole length, whether a `\n` ended it, and the bytes read. The count
/// stops at [`MAX_COUNTED_LINE_BYTES`]: an endless stream is never read
/// to its end.
fn skip_line(source: &mut impl Read, chunk: &mut [u8], mut len: u64) -> io::Result<(u64, bool, u64)> {
    let mut read = 0u64;
    loop {
        let left = usize::try_from(line_count_left(len)).unwrap_or(usize::MAX);
        if left == 0 {
            return Ok((MAX_COUNTED_LINE_BYTES, false, read));
        }
        let want = chunk.len().min(left);
        let n = read_some(source, &mut chunk[..want])?;
        if n == 0 {
            return Ok((len, false, read));
        }
        read += n as u64;
        if let Some(i) = memchr::memchr(b'\n', &chunk[..n]) {
            // What follows the line is never needed: the load fails here.
            return Ok((len + i as u64, true, read));
        }
        len += n as u64;
    }
}

fn read_some(source: &mut impl Read, chunk: &mut [u8]) -> io::Result<usize> {
    loop {
        match source.read(chunk) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Parses what [`read_capped`] read, as [`JsonlLog::parse_with`] would
/// parse the whole file.
pub(crate) fn parse_capped(capped: &Capped, options: ReadOptions) -> Result<JsonlLog, LoadError> {
    match &capped.overlong {
        Some(overlong) if overlong.line == 1 => Err(overlong.error(options)),
        Some(overlong) => {
            // The lines before it are read first: an earlier error wins.
            JsonlLog::parse_with(&capped.bytes, options)?;
            Err(overlong.error(options))
        }
        None => JsonlLog::parse_with(&capped.bytes, options),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"s","createdAt":0}"#;

    fn event(seq: u64, pad: usize) -> String {
        format!(r#"{{"seq":{seq},"time":0,"type":"x/y","data":"{}"}}"#, "a".repeat(pad))
    }

    /// Both readers, on every cap from 0 to past the longest line, over
    /// files with an over-long line in every position, terminated or not.
    #[test]
    fn agrees_with_parse_with_on_every_cap() {
        let lines = [HEADER.to_owned(), event(0, 10), event(1, 300), event(2, 5)];
        let mut files: Vec<String> = Vec::new();
        for end in 1..=lines.len() {
            let body = lines[..end].join("\n");
            files.push(body.clone());
            files.push(format!("{body}\n"));
        }
        files.push(format!("{HEADER}\nnot json\n{}\n", event(1, 400)));
        files.push(format!("{HEADER}\n{}\nnot json\n", event(0, 400)));
        for file in &files {
            for cap in (0..400).step_by(7).chain([usize::MAX]) {
                let options = ReadOptions { max_line_bytes: cap, ..ReadOptions::default() };
                let capped = match read_capped(file.as_bytes(), options) {
                    Ok(c) => c,
                    Err(e) => panic!("read: {e}"),
                };
                assert_eq!(capped.file_len, file.len() as u64);
                let ours = parse_capped(&capped, options);
                let theirs = JsonlLog::parse_with(file.as_bytes(), options);
                assert_eq!(ours, theirs, "cap {cap}, file {file:?}");
            }
        }
    }

    #[test]
    fn an_overlong_line_is_never_held_whole() {
        // A reader that fails the test if asked for more than the cap allows
        // past the start of the long line.
        struct Endless {
            served: u64,
        }
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let head = format!("{HEADER}\n");
                let n = if self.served == 0 { head.len() } else { buf.len().min(1 << 20) };
                if self.served >= 100 << 20 {
                    return Ok(0);
                }
                if self.served == 0 {
                    buf[..n].copy_from_slice(head.as_bytes());
                } else {
                    buf[..n].fill(b'a');
                }
                self.served += n as u64;
                Ok(n)
            }
        }
        let options = ReadOptions { max_line_bytes: 1 << 20, ..ReadOptions::default() };
        let capped = match read_capped(Endless { served: 0 }, options) {
            Ok(c) => c,
            Err(e) => panic!("read: {e}"),
        };
        assert_eq!(capped.bytes.len(), HEADER.len() + 1, "nothing of the long line is kept");
        // A Vec at most doubles past what it held: twice (cap + a chunk).
        assert!(capped.bytes.capacity() <= 2 * ((1 << 20) + CHUNK), "{} bytes held", capped.bytes.capacity());
        let overlong = capped.overlong.map(|o| (o.line, o.len));
        assert_eq!(overlong, Some((2, capped.file_len - HEADER.len() as u64 - 1)));
        assert!(capped.file_len >= 100 << 20, "every byte was counted: {}", capped.file_len);
    }

    /// `/dev/zero` as a session file: the header never ends. The count
    /// stops at its bound, so the read ends, and the error says "at least".
    #[test]
    fn an_endless_line_is_counted_to_a_bound_and_said_to_be_at_least_that() {
        let options = ReadOptions::default();
        let capped = match read_capped(io::repeat(0), options) {
            Ok(c) => c,
            Err(e) => panic!("read: {e}"),
        };
        let overlong = capped.overlong.unwrap_or_else(|| panic!("an endless header is over its cap"));
        assert_eq!((overlong.line, overlong.len), (1, MAX_COUNTED_LINE_BYTES));
        let error = overlong.error(options);
        assert_eq!(error.code(), "header-malformed");
        assert!(error.to_string().contains(&format!("at least {MAX_COUNTED_LINE_BYTES} bytes")), "{error}");

        // After a header, an endless event line: `event-too-large`.
        let file = format!("{HEADER}\n").into_bytes();
        let capped = match read_capped(io::Read::chain(file.as_slice(), io::repeat(b'a')), options) {
            Ok(c) => c,
            Err(e) => panic!("read: {e}"),
        };
        let overlong = capped.overlong.unwrap_or_else(|| panic!("an endless line is over its cap"));
        assert_eq!((overlong.line, overlong.len), (2, MAX_COUNTED_LINE_BYTES));
        assert_eq!(overlong.error(options).code(), "event-too-large");
        assert!(overlong.error(options).to_string().contains("at least"));
        // A line that ends under the bound is said exactly.
        assert_eq!(line_len(&mut &b"abc\ndef"[..], 10).ok(), Some(13));
    }
}
