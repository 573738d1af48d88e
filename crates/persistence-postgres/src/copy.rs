//! Reading a session's event rows as `COPY ... TO STDOUT (FORMAT binary)`:
//! the server sends each row as its columns' bytes behind a length, with no
//! row description to match and no per-row result object on the client,
//! and each row is handed on borrowed from the client's buffer.
//!
//! The format (PostgreSQL docs, "COPY", "Binary Format"): an 11-byte
//! signature, a 32-bit flags word, a 32-bit header-extension length and
//! that many bytes; then per tuple a 16-bit field count (-1 ends the data)
//! and per field a 32-bit length (-1 for NULL) and that many bytes. Every
//! integer is big-endian. `bigint` is sent as 8 bytes, `text` as its UTF-8
//! bytes.

use std::io;

use palimpsest_core_session::LoadError;

use crate::codec::{not_utf8, RowRef};

/// The first bytes of every binary COPY stream.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// The columns of a row, as the select of `events` lists them.
const FIELDS: i16 = 6;

/// Where the next tuple of a buffer ends, as far as its bytes tell.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// A whole tuple of this many bytes.
    Tuple(usize),
    /// The end of the data (a field count of -1, 2 bytes).
    Trailer,
    /// The tuple is longer than the bytes given: at least this many.
    Need(usize),
}

fn be_i16(b: &[u8]) -> i16 {
    i16::from_be_bytes([b[0], b[1]])
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn corrupt(detail: impl Into<String>) -> LoadError {
    LoadError::LogCorrupt { line: None, detail: detail.into() }
}

/// Measures the tuple at the start of `bytes` without reading its values.
fn scan(bytes: &[u8]) -> Result<Scan, LoadError> {
    if bytes.len() < 2 {
        return Ok(Scan::Need(2));
    }
    let fields = be_i16(bytes);
    if fields == -1 {
        return Ok(Scan::Trailer);
    }
    if fields != FIELDS {
        return Err(corrupt(format!("a COPY row of {fields} fields; the events select has {FIELDS}")));
    }
    let mut at = 2usize;
    for _ in 0..fields {
        let Some(len) = bytes.get(at..at + 4) else { return Ok(Scan::Need(at + 4)) };
        let len = be_i32(len);
        at += 4;
        if len == -1 {
            continue;
        }
        let len = usize::try_from(len).map_err(|_| corrupt(format!("a COPY field of length {len}")))?;
        at = at.saturating_add(len);
        if bytes.len() < at {
            return Ok(Scan::Need(at));
        }
    }
    Ok(Scan::Tuple(at))
}

/// Reads the columns of one whole tuple (as measured by [`scan`]).
fn row(tuple: &[u8]) -> Result<RowRef<'_>, LoadError> {
    let mut at = 2usize;
    // `scan` checked the field count and that every field lies within.
    let mut next = || -> Option<&[u8]> {
        let len = be_i32(&tuple[at..at + 4]);
        at += 4;
        let len = usize::try_from(len).ok()?;
        at += len;
        Some(&tuple[at - len..at])
    };
    let int = |column: &str, field: Option<&[u8]>| -> Result<i64, LoadError> {
        let field = field.ok_or_else(|| corrupt(format!("column `{column}` is NULL")))?;
        let bytes: [u8; 8] = field
            .try_into()
            .map_err(|_| corrupt(format!("column `{column}` holds {} bytes, not a bigint", field.len())))?;
        Ok(i64::from_be_bytes(bytes))
    };
    fn text<'a>(column: &str, field: Option<&'a [u8]>) -> Result<Option<&'a str>, LoadError> {
        field.map(|f| std::str::from_utf8(f).map_err(|e| not_utf8(column, e))).transpose()
    }
    fn required<'a>(column: &str, value: Option<&'a str>) -> Result<&'a str, LoadError> {
        value.ok_or_else(|| corrupt(format!("column `{column}` is NULL")))
    }
    let seq = int("seq", next())?;
    let time = int("time", next())?;
    let event_type = required("type", text("type", next())?)?;
    let data = required("data", text("data", next())?)?;
    let source_event_seqs = text("source_event_seqs", next())?;
    let surface_op = text("surface_op", next())?;
    Ok(RowRef { seq, time, event_type, data, source_event_seqs, surface_op })
}

fn early_end(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("binary COPY: ended {what}"))
}

/// Where a [`RowStream`] is in the data.
#[derive(Debug, Default, PartialEq, Eq)]
enum State {
    /// Before the end of the header (signature, flags, extension).
    #[default]
    Header,
    /// Between tuples.
    Rows,
    /// After the trailer, or after `take` stopped the read.
    Ended,
}

/// Reads a binary COPY stream of the event columns fed to it in pieces
/// (the client's messages: the server sends one per row, but nothing here
/// counts on it), handing each row to `take` in order, borrowed from the
/// piece when the row lies within one and from a copy otherwise.
#[derive(Debug, Default)]
pub(crate) struct RowStream {
    state: State,
    /// The header, or a tuple split over pieces, put together.
    spill: Vec<u8>,
}

impl RowStream {
    /// Reads the rows of the next piece. A row whose bytes cannot be read
    /// is handed on as its error, and the read stops; so it does when
    /// `take` returns `false`: then `Ok(false)`, and every later piece is
    /// ignored. The stream itself failing (a missing signature) is the
    /// `io::Error`.
    pub(crate) fn feed(
        &mut self,
        mut piece: &[u8],
        take: &mut impl FnMut(Result<RowRef<'_>, LoadError>) -> bool,
    ) -> io::Result<bool> {
        if self.state == State::Header {
            self.spill.extend_from_slice(piece);
            let Some(rest) = self.header_end()? else { return Ok(true) };
            let rest = self.spill.split_off(rest);
            self.spill.clear();
            self.state = State::Rows;
            return self.feed(&rest, take);
        }
        if self.state == State::Ended {
            return Ok(true);
        }
        if !self.spill.is_empty() {
            loop {
                match scan(&self.spill) {
                    Ok(Scan::Need(need)) => {
                        let n = piece.len().min(need - self.spill.len());
                        self.spill.extend_from_slice(&piece[..n]);
                        piece = &piece[n..];
                        if self.spill.len() < need {
                            return Ok(true);
                        }
                    }
                    Ok(Scan::Tuple(_)) => {
                        let more = take(row(&self.spill));
                        self.spill.clear();
                        if !more {
                            return Ok(self.stop());
                        }
                        break;
                    }
                    Ok(Scan::Trailer) => {
                        self.state = State::Ended;
                        return Ok(true);
                    }
                    Err(e) => {
                        take(Err(e));
                        return Ok(self.stop());
                    }
                }
            }
        }
        while !piece.is_empty() {
            match scan(piece) {
                Ok(Scan::Tuple(len)) => {
                    if !take(row(&piece[..len])) {
                        return Ok(self.stop());
                    }
                    piece = &piece[len..];
                }
                Ok(Scan::Trailer) => {
                    self.state = State::Ended;
                    return Ok(true);
                }
                Ok(Scan::Need(_)) => {
                    self.spill.extend_from_slice(piece);
                    return Ok(true);
                }
                Err(e) => {
                    take(Err(e));
                    return Ok(self.stop());
                }
            }
        }
        Ok(true)
    }

    /// Where the header ends in `spill`, once it is all there.
    fn header_end(&self) -> io::Result<Option<usize>> {
        let got = &self.spill;
        if got[..got.len().min(SIGNATURE.len())] != SIGNATURE[..got.len().min(SIGNATURE.len())] {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "binary COPY: no PGCOPY signature"));
        }
        if got.len() < 19 {
            return Ok(None);
        }
        let extension = u32::from_be_bytes([got[15], got[16], got[17], got[18]]);
        let end = 19usize.saturating_add(usize::try_from(extension).unwrap_or(usize::MAX));
        Ok((got.len() >= end).then_some(end))
    }

    fn stop(&mut self) -> bool {
        self.state = State::Ended;
        self.spill = Vec::new();
        false
    }

    /// After the last piece: an error if the data ended early (before its
    /// trailer, inside a row or its header) without the read being
    /// stopped.
    pub(crate) fn finish(&self) -> io::Result<()> {
        match self.state {
            State::Ended => Ok(()),
            State::Header => Err(early_end("inside its header")),
            State::Rows if self.spill.is_empty() => Err(early_end("without its trailer")),
            State::Rows => Err(early_end("inside a row")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(tuples: &[Vec<Option<Vec<u8>>>], trailer: bool) -> Vec<u8> {
        let mut b = SIGNATURE.to_vec();
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(b"ext");
        for t in tuples {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            for f in t {
                match f {
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(f) => {
                        b.extend_from_slice(&(f.len() as i32).to_be_bytes());
                        b.extend_from_slice(f);
                    }
                }
            }
        }
        if trailer {
            b.extend_from_slice(&(-1i16).to_be_bytes());
        }
        b
    }

    fn tuple(seq: i64, data: &str, op: Option<&str>) -> Vec<Option<Vec<u8>>> {
        vec![
            Some(seq.to_be_bytes().to_vec()),
            Some(7i64.to_be_bytes().to_vec()),
            Some(b"x/p".to_vec()),
            Some(data.as_bytes().to_vec()),
            None,
            op.map(|o| o.as_bytes().to_vec()),
        ]
    }

    /// A row read: seq, data, surface op.
    type Read3 = (i64, String, Option<String>);

    /// Every row read, or the first row error's text, with the stream fed
    /// in pieces of `chunk` bytes as a client's messages might cut it.
    fn read(bytes: Vec<u8>, chunk: usize) -> io::Result<Result<Vec<Read3>, String>> {
        let mut stream = RowStream::default();
        let mut rows = Vec::new();
        let mut failed = None;
        let mut take = |row: Result<RowRef<'_>, LoadError>| match row {
            Ok(row) => {
                rows.push((row.seq, row.data.to_owned(), row.surface_op.map(str::to_owned)));
                true
            }
            Err(e) => {
                failed = Some(e.to_string());
                false
            }
        };
        for piece in bytes.chunks(chunk.min(bytes.len()).max(1)) {
            if !stream.feed(piece, &mut take)? {
                break;
            }
        }
        stream.finish()?;
        Ok(failed.map_or(Ok(rows), Err))
    }

    #[test]
    fn rows_read_alike_whatever_the_messages_cut() {
        let tuples: Vec<_> = (0..20)
            .map(|i| tuple(i, &format!("{{\"i\":\"{}\"}}", "é".repeat(i as usize)), Some("\"append\"")))
            .collect();
        let whole = read(stream(&tuples, true), usize::MAX).expect("reads").expect("valid rows");
        assert_eq!(whole.len(), 20);
        assert_eq!(whole[3], (3, "{\"i\":\"ééé\"}".to_owned(), Some("\"append\"".to_owned())));
        for chunk in [1, 2, 3, 5, 7, 64] {
            assert_eq!(
                read(stream(&tuples, true), chunk).expect("reads"),
                Ok(whole.clone()),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn bad_rows_are_row_errors_and_a_broken_stream_is_an_io_error() {
        let good = tuple(0, "{}", None);
        let mut null_data = tuple(1, "{}", None);
        null_data[3] = None;
        let mut short_int = tuple(1, "{}", None);
        short_int[0] = Some(vec![0, 1]);
        let mut not_utf8 = tuple(1, "{}", None);
        not_utf8[3] = Some(vec![b'"', 0xff, b'"']);
        let few = vec![Some(1i64.to_be_bytes().to_vec())];
        for (bad, says) in [
            (null_data, "column `data` is NULL"),
            (short_int, "2 bytes, not a bigint"),
            (not_utf8, "not UTF-8"),
            (few, "1 fields"),
        ] {
            for chunk in [1, 4, usize::MAX] {
                let got =
                    read(stream(&[good.clone(), bad.clone(), good.clone()], true), chunk).expect("reads");
                let err = got.expect_err("a bad row");
                assert!(err.contains(says), "{err}");
            }
        }
        let cut = read(stream(std::slice::from_ref(&good), false), 3).map(drop).expect_err("no trailer");
        assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
        let mut bytes = stream(&[good], true);
        bytes[0] = b'X';
        assert_eq!(read(bytes, 100).map(drop).expect_err("no signature").kind(), io::ErrorKind::InvalidData);
    }
}
