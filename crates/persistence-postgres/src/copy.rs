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

use std::io::{self, BufRead, Read};

use palimpsest_core_session::LoadError;

use crate::codec::RowRef;

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
        field
            .map(|f| {
                std::str::from_utf8(f).map_err(|e| corrupt(format!("column `{column}` is not UTF-8: {e}")))
            })
            .transpose()
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

/// Reads what is left of the stream after its trailer, so that the client
/// sees the end of the COPY.
fn drain(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let n = reader.fill_buf()?.len();
        if n == 0 {
            return Ok(());
        }
        reader.consume(n);
    }
}

fn early_end(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("binary COPY: ended {what}"))
}

/// Reads a binary COPY stream of the event columns to its end, handing
/// each row to `take` in order, borrowed from the reader's buffer when the
/// row lies within one of the client's messages (the server sends one per
/// row) and from a copy otherwise. A row whose bytes cannot be read is
/// handed on as its error, and the read stops; so it does when `take`
/// returns `false`. The stream itself failing (the connection, a missing
/// signature, an early end) is the `io::Error`.
pub(crate) fn read_rows(
    reader: &mut impl BufRead,
    mut take: impl FnMut(Result<RowRef<'_>, LoadError>) -> bool,
) -> io::Result<()> {
    let mut header = [0u8; 19];
    reader.read_exact(&mut header)?;
    if &header[..11] != SIGNATURE {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "binary COPY: no PGCOPY signature"));
    }
    let extension = u64::from(u32::from_be_bytes([header[15], header[16], header[17], header[18]]));
    io::copy(&mut reader.by_ref().take(extension), &mut io::sink())?;
    // A tuple split over several of the client's buffers, put together.
    let mut spill = Vec::new();
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Err(early_end("without its trailer"));
        }
        let more = match scan(buf) {
            Ok(Scan::Tuple(len)) => {
                let more = take(row(&buf[..len]));
                reader.consume(len);
                more
            }
            Ok(Scan::Trailer) => {
                reader.consume(2);
                return drain(reader);
            }
            Ok(Scan::Need(_)) => {
                spill.clear();
                let whole = loop {
                    match scan(&spill) {
                        Ok(Scan::Need(need)) => {
                            let buf = reader.fill_buf()?;
                            if buf.is_empty() {
                                return Err(early_end("inside a row"));
                            }
                            let n = buf.len().min(need - spill.len());
                            spill.extend_from_slice(&buf[..n]);
                            reader.consume(n);
                        }
                        other => break other,
                    }
                };
                match whole {
                    Ok(Scan::Trailer) => return drain(reader),
                    Ok(_) => take(row(&spill)),
                    Err(e) => {
                        take(Err(e));
                        false
                    }
                }
            }
            Err(e) => {
                take(Err(e));
                false
            }
        };
        if !more {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `tuples` (each a list of fields, `None` for NULL), cut
    /// into chunks of `chunk` bytes as a client's messages might be.
    struct Chunks {
        bytes: Vec<u8>,
        at: usize,
        chunk: usize,
    }

    impl Read for Chunks {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.fill_buf()?.len().min(out.len());
            out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.consume(n);
            Ok(n)
        }
    }

    impl BufRead for Chunks {
        fn fill_buf(&mut self) -> io::Result<&[u8]> {
            let end = self.at.saturating_add(self.chunk).min(self.bytes.len());
            Ok(&self.bytes[self.at..end])
        }
        fn consume(&mut self, n: usize) {
            self.at += n;
        }
    }

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

    /// Every row read, or the first row error's text.
    fn read(bytes: Vec<u8>, chunk: usize) -> io::Result<Result<Vec<Read3>, String>> {
        let mut r = Chunks { bytes, at: 0, chunk };
        let mut rows = Vec::new();
        let mut failed = None;
        read_rows(&mut r, |row| match row {
            Ok(row) => {
                rows.push((row.seq, row.data.to_owned(), row.surface_op.map(str::to_owned)));
                true
            }
            Err(e) => {
                failed = Some(e.to_string());
                false
            }
        })?;
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
