//! For backends that keep one event per row (SQLite, PostgreSQL, yours):
//! the column encodings, and the decoding of rows back into [`Event`]s that
//! the bundled SQL backends share.
//!
//! A row is turned back into an [`Event`] through [`Event::from_parts`],
//! which runs exactly the checks `Event::from_json` runs on a JSONL line, so
//! a row edited behind the store's back is refused with the same contract
//! code, without rebuilding and re-reading a JSON line per row. The columns
//! are `seq`, `time`, `type`, `data` (the payload's JSON text, byte for
//! byte), and the nullable JSON texts `source_event_seqs` and `surface_op`
//! (see `docs/backends.md`).
//!
//! # Example
//!
//! ```
//! use palimpsest_core_session::{Event, EventType};
//! use palimpsest_persistence::rows::{self, EventRow};
//!
//! let event = Event::from_json(r#"{"seq":0,"time":7,"type":"x/note","data":{"n":1}}"#)?;
//! // Writing: one column per part.
//! let row = EventRow {
//!     seq: rows::to_sql_int(event.seq()),
//!     time: rows::to_sql_int(event.time()),
//!     event_type: EventType::parse(event.event_type().as_str()),
//!     data: event.data().to_owned(),
//!     source_event_seqs: event.source_event_seqs().map(rows::sources_json),
//!     surface_op: event.surface_op().map(rows::surface_op_json),
//! };
//! // Reading: the row at position 0 of its session, checked as a line is.
//! assert_eq!(row.decode(0)?, event);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use palimpsest_core_session::event::SharedText;
use palimpsest_core_session::{
    AppendError, Checkpoint, Event, EventType, LoadError, SessionHeader, SurfaceOp,
};

/// A saved checkpoint row of a SQL store (its `log_len` column and its
/// JSON text), checked against the session's `header`: it decodes, the
/// column agrees with it, it was taken of this session under this header.
/// `Err` says why it is not to be used (a reader then ignores it and reads
/// every event); the last check, of the stored event it ends at, is
/// [`checkpoint_ends_at`].
pub fn checkpoint_row(
    header: &SessionHeader,
    log_len: Option<i64>,
    json: Option<String>,
) -> Result<Checkpoint, String> {
    let (Some(log_len), Some(json)) = (log_len, json) else { return Err("its row cannot be read".into()) };
    let checkpoint = Checkpoint::from_json(&json).map_err(|e| format!("it does not decode: {e}"))?;
    if checkpoint.log_len() != from_sql_int(log_len) {
        return Err("its log_len column disagrees with it".into());
    }
    if !checkpoint.matches_header(header) {
        return Err("it was taken of another session or under another header".into());
    }
    Ok(checkpoint)
}

/// Whether `checkpoint` ends at the stored event at seq `log_len - 1`
/// (`None`: the log has no such event, `Some(Err)`: it does not decode).
/// `Err` says why not.
pub fn checkpoint_ends_at(
    checkpoint: &Checkpoint,
    stored: Option<Result<Event, LoadError>>,
) -> Result<(), String> {
    match stored {
        None => Err("the log is shorter than it".into()),
        Some(Err(e)) => Err(format!("the stored event it ends at does not decode: {e}")),
        Some(Ok(event)) if !checkpoint.matches_last_event(&event) => {
            Err("the stored event it ends at is not the one it was taken after".into())
        }
        Some(Ok(_)) => Ok(()),
    }
}

/// The JSON text of a `surfaceOp`, exactly as the JSONL line holds it.
pub fn surface_op_json(op: SurfaceOp) -> String {
    match op {
        SurfaceOp::Append => "\"append\"".to_owned(),
        // Serializing integers and static strings cannot fail; an empty
        // column would be a corrupt row, so a bug here must not be hidden.
        replace => serde_json::to_string(&replace).expect("a SurfaceOp always serializes"),
    }
}

/// The JSON text of a `sourceEventSeqs`, exactly as the JSONL line holds it
/// (`[]` stays `[]`).
pub fn sources_json(sources: &[u64]) -> String {
    // A list of integers always serializes.
    serde_json::to_string(sources).expect("a list of u64 always serializes")
}

/// A `u64` as the `i64` SQL stores (SQLite `INTEGER`, PostgreSQL `bigint`): the same bits. Every value below 2^63
/// reads the same in SQL; larger ones (a `time` no clock produces) show as
/// negative in SQL and still round-trip exactly.
pub fn to_sql_int(v: u64) -> i64 {
    i64::from_ne_bytes(v.to_ne_bytes())
}

/// The inverse of [`to_sql_int`].
pub fn from_sql_int(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

/// One event row, its columns read and copied but not yet checked: the
/// copies become the event's own strings, so a row is copied once.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// Column `seq`, as [`to_sql_int`] wrote it.
    pub seq: i64,
    /// Column `time`, as [`to_sql_int`] wrote it.
    pub time: i64,
    /// Column `type`, parsed as it is read: a core type allocates nothing.
    pub event_type: EventType,
    /// Column `data`: the payload's JSON text, byte for byte.
    pub data: String,
    /// Column `source_event_seqs`: [`sources_json`], or NULL when absent.
    pub source_event_seqs: Option<String>,
    /// Column `surface_op`: [`surface_op_json`], or NULL when absent.
    pub surface_op: Option<String>,
}

impl EventRow {
    /// Rebuilds the event at position `index` of its session, checking it as
    /// a JSONL line would be checked. The row's `data` becomes the event's
    /// own (not copied).
    pub fn decode(self, index: u64) -> Result<Event, LoadError> {
        let (sources, op) = (self.source_event_seqs.as_deref(), self.surface_op.as_deref());
        let data = Payload::Owned(self.data);
        decode_columns(self.seq, self.time, self.event_type.as_str(), data, sources, op, index)
    }
}

/// Where the `data` column of a row being decoded is held, and so what
/// the event's payload text will be.
enum Payload<'a> {
    /// Moved into the event.
    Owned(String),
    /// Copied into the event's own text.
    Borrowed(&'a str),
    /// A range of a text shared by the rows of a batch, which the event
    /// shares (`Event::from_shared_parts`).
    Shared(&'a SharedText, Range<usize>),
}

impl Payload<'_> {
    fn as_str(&self) -> &str {
        match self {
            Payload::Owned(data) => data,
            Payload::Borrowed(data) => data,
            Payload::Shared(text, range) => text.as_str().get(range.clone()).unwrap_or_default(),
        }
    }
}

/// [`EventRow::decode`] of columns however they are held.
fn decode_columns(
    raw_seq: i64,
    time: i64,
    event_type: &str,
    data: Payload<'_>,
    source_event_seqs: Option<&str>,
    surface_op: Option<&str>,
    index: u64,
) -> Result<Event, LoadError> {
    // A row has a position (its seq), not a line.
    let at = None;
    let seq = from_sql_int(raw_seq);
    if raw_seq < 0 {
        // Written by no store (a seq past i64::MAX is never reached): a
        // negative seq, `event-malformed` as in a JSONL line (section 1.1).
        return Err(LoadError::Rule {
            line: at,
            error: AppendError::EventMalformed { seq: None, detail: format!("negative seq {raw_seq}") },
        });
    }
    // Each column must hold exactly one JSON value, as written: from_parts
    // refuses trailing text; whitespace around `data` would not survive a
    // round trip byte for byte.
    let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let bytes = data.as_str().as_bytes();
    let padded = bytes.first().is_some_and(json_space) || bytes.last().is_some_and(json_space);
    let time = from_sql_int(time);
    let event = match data {
        Payload::Owned(data) => Event::from_parts(seq, time, event_type, data, source_event_seqs, surface_op),
        Payload::Borrowed(data) => {
            Event::from_parts(seq, time, event_type, data, source_event_seqs, surface_op)
        }
        Payload::Shared(text, range) => {
            Event::from_shared_parts(seq, time, event_type, text, range, source_event_seqs, surface_op)
        }
    }
    .map_err(|error| LoadError::Rule { line: at, error })?;
    let malformed = |detail: &str| LoadError::Rule {
        line: at,
        error: AppendError::EventMalformed { seq: Some(seq), detail: detail.to_owned() },
    };
    if padded {
        return Err(malformed("column `data` does not hold exactly one JSON value"));
    }
    if event.source_event_seqs().is_some() != source_event_seqs.is_some() {
        return Err(malformed("column `source_event_seqs` does not match the event read back"));
    }
    if event.surface_op().is_some() != surface_op.is_some() {
        return Err(malformed("column `surface_op` does not match the event read back"));
    }
    // Rule 9 after the event's own rules (1 to 4), as a session checks a
    // JSONL line: the same log gave `seq-not-contiguous` from a database
    // and `surface-op-forbidden` from its file (an outside probe).
    if seq != index {
        return Err(LoadError::Rule {
            line: at,
            error: AppendError::SeqNotContiguous { seq, expected: index },
        });
    }
    Ok(event)
}

/// One event row's columns as the client yields them, borrowed: what a
/// store's `read` closure hands to [`decode_into`], which copies the texts
/// into a reused batch buffer (no allocation per row on the reading
/// thread) and makes each event's own strings on the decoding thread.
#[derive(Debug, Clone, Copy)]
pub struct RowRef<'a> {
    /// Column `seq`, as [`to_sql_int`] wrote it.
    pub seq: i64,
    /// Column `time`, as [`to_sql_int`] wrote it.
    pub time: i64,
    /// Column `type`.
    pub event_type: &'a str,
    /// Column `data`: the payload's JSON text, byte for byte.
    pub data: &'a str,
    /// Column `source_event_seqs`, or NULL when absent.
    pub source_event_seqs: Option<&'a str>,
    /// Column `surface_op`, or NULL when absent.
    pub surface_op: Option<&'a str>,
}

impl RowRef<'_> {
    /// [`EventRow::decode`] without the row's own copy: `data` is copied
    /// once, into the event; the other texts are read where they lie.
    pub fn decode(&self, index: u64) -> Result<Event, LoadError> {
        self.decode_with(Payload::Borrowed(self.data), index)
    }

    /// [`RowRef::decode`], the payload held as `data` says.
    fn decode_with(&self, data: Payload<'_>, index: u64) -> Result<Event, LoadError> {
        decode_columns(
            self.seq,
            self.time,
            self.event_type,
            data,
            self.source_event_seqs,
            self.surface_op,
            index,
        )
    }

    /// The row with its texts copied.
    pub fn to_row(&self) -> EventRow {
        EventRow {
            seq: self.seq,
            time: self.time,
            event_type: EventType::parse(self.event_type),
            data: self.data.to_owned(),
            source_event_seqs: self.source_event_seqs.map(str::to_owned),
            surface_op: self.surface_op.map(str::to_owned),
        }
    }
}

impl EventRow {
    /// The row's columns, borrowed.
    pub fn as_ref(&self) -> RowRef<'_> {
        RowRef {
            seq: self.seq,
            time: self.time,
            event_type: self.event_type.as_str(),
            data: &self.data,
            source_event_seqs: self.source_event_seqs.as_deref(),
            surface_op: self.surface_op.as_deref(),
        }
    }
}

/// One event row's columns as a client yields them when it does not check
/// its texts itself (SQLite hands out bytes): [`RowRef`] with the texts
/// not yet known to be UTF-8. [`decode_bytes_into`] checks them a whole
/// batch at a time, on the way to the decoding thread, which costs a
/// fraction of checking each column as it is read.
#[derive(Debug, Clone, Copy)]
pub struct RowBytes<'a> {
    /// Column `seq`, as [`to_sql_int`] wrote it.
    pub seq: i64,
    /// Column `time`, as [`to_sql_int`] wrote it.
    pub time: i64,
    /// Column `type`.
    pub event_type: &'a [u8],
    /// Column `data`: the payload's JSON text, byte for byte.
    pub data: &'a [u8],
    /// Column `source_event_seqs`, or NULL when absent.
    pub source_event_seqs: Option<&'a [u8]>,
    /// Column `surface_op`, or NULL when absent.
    pub surface_op: Option<&'a [u8]>,
}

impl<'a> RowBytes<'a> {
    /// The row with its texts checked: `log-corrupt` naming the first
    /// column, in column order, that is not UTF-8.
    pub fn check(&self) -> Result<RowRef<'a>, LoadError> {
        fn text<'a>(column: &str, bytes: &'a [u8]) -> Result<&'a str, LoadError> {
            std::str::from_utf8(bytes).map_err(|e| not_utf8(column, e))
        }
        Ok(RowRef {
            seq: self.seq,
            time: self.time,
            event_type: text("type", self.event_type)?,
            data: text("data", self.data)?,
            source_event_seqs: self.source_event_seqs.map(|t| text("source_event_seqs", t)).transpose()?,
            surface_op: self.surface_op.map(|t| text("surface_op", t)).transpose()?,
        })
    }
}

impl<'a> From<RowRef<'a>> for RowBytes<'a> {
    fn from(row: RowRef<'a>) -> RowBytes<'a> {
        RowBytes {
            seq: row.seq,
            time: row.time,
            event_type: row.event_type.as_bytes(),
            data: row.data.as_bytes(),
            source_event_seqs: row.source_event_seqs.map(str::as_bytes),
            surface_op: row.surface_op.map(str::as_bytes),
        }
    }
}

/// `log-corrupt` for a stored text column that is not UTF-8: the wording
/// of every SQL backend's column reads.
pub fn not_utf8(column: &str, e: std::str::Utf8Error) -> LoadError {
    LoadError::LogCorrupt { line: None, detail: format!("column `{column}` is not UTF-8: {e}") }
}

/// Rows per batch handed to the decoding thread.
const BATCH_ROWS: usize = 1024;

/// A batch of rows for the decoding thread: every text of the batch in one
/// buffer, each row's texts as ranges of it. Batches go back to the
/// reading thread once decoded, so the reader copies columns into memory
/// it has already touched instead of allocating fresh strings per row.
#[derive(Debug, Default)]
struct Batch {
    text: BatchText,
    rows: Vec<BatchRow>,
    /// Whether the reading thread decoded the rows itself, having found
    /// the decoder behind ([`Batch::decode_here`]): then `events` holds
    /// the events of the rows up to the first bad one, `failed` that row's
    /// error, and the decoder only hands them on.
    decoded: bool,
    events: Vec<Event>,
    failed: Option<(u64, LoadError)>,
}

/// The texts of a [`Batch`], copied in as bytes and checked to be UTF-8
/// all at once when the batch is decoded: one check of ~300 KB instead of
/// four per row, which on the benchmark workload cost the reading thread
/// a fifth of its time (docs/performance.md, fifteenth session).
#[derive(Debug)]
enum BatchText {
    /// Being filled by the reading thread.
    Bytes(Vec<u8>),
    /// Full, and UTF-8 as a whole.
    Checked(String),
    /// Full, and not UTF-8 somewhere: each row is checked on its own.
    NotUtf8(Vec<u8>),
}

impl Default for BatchText {
    fn default() -> BatchText {
        BatchText::Bytes(Vec::new())
    }
}

/// One row of a [`Batch`]: its integers, and where its texts lie in the
/// batch's buffer (`(start, end)`; `None` for NULL).
#[derive(Debug)]
struct BatchRow {
    seq: i64,
    time: i64,
    event_type: (usize, usize),
    data: (usize, usize),
    source_event_seqs: Option<(usize, usize)>,
    surface_op: Option<(usize, usize)>,
}

impl Batch {
    fn push(&mut self, row: RowBytes<'_>) {
        let BatchText::Bytes(text) = &mut self.text else {
            unreachable!("a batch is filled only between `clear` and `seal`")
        };
        let mut put = |t: &[u8]| {
            let start = text.len();
            text.extend_from_slice(t);
            (start, text.len())
        };
        let event_type = put(row.event_type);
        let data = put(row.data);
        let source_event_seqs = row.source_event_seqs.map(&mut put);
        let surface_op = row.surface_op.map(&mut put);
        self.rows.push(BatchRow {
            seq: row.seq,
            time: row.time,
            event_type,
            data,
            source_event_seqs,
            surface_op,
        });
    }

    /// Checks the batch's texts as a whole, once it is full: on the thread
    /// that decodes it, as the reading thread has the longer task.
    fn seal(&mut self) {
        if let BatchText::Bytes(text) = &mut self.text {
            self.text = match String::from_utf8(std::mem::take(text)) {
                Ok(text) => BatchText::Checked(text),
                Err(e) => BatchText::NotUtf8(e.into_bytes()),
            };
        }
    }

    fn clear(&mut self) {
        let mut text = match std::mem::take(&mut self.text) {
            BatchText::Bytes(text) | BatchText::NotUtf8(text) => text,
            BatchText::Checked(text) => text.into_bytes(),
        };
        text.clear();
        self.text = BatchText::Bytes(text);
        self.rows.clear();
        self.decoded = false;
        self.events.clear();
        self.failed = None;
    }

    /// Decodes a batch, whose first row is at position `*next`, into
    /// `consume`; `Ok(false)` when `consume` broke. Rows the reading
    /// thread decoded already are handed on as they are.
    fn decode(
        &mut self,
        share: bool,
        ranges: &mut Vec<Option<Range<usize>>>,
        next: &mut u64,
        consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
    ) -> Result<bool, (u64, LoadError)> {
        if self.decoded {
            for event in self.events.drain(..) {
                *next += 1;
                if consume(event).is_break() {
                    return Ok(false);
                }
            }
            return self.failed.take().map_or(Ok(true), Err);
        }
        self.seal();
        let shared = self.share_payloads(share, ranges);
        let rows = self.rows().zip(ranges.iter()).map(|(row, range)| {
            row.map(|row| {
                let data = range
                    .as_ref()
                    .map_or(Payload::Borrowed(row.data), |range| Payload::Shared(&shared, range.clone()));
                (row, data)
            })
        });
        decode_onto(next, rows, consume)
    }

    /// Decodes a batch, whose first row is at position `first`, on this
    /// thread, keeping the events for the decoder to hand on: what the
    /// reading thread does with a batch when the decoder is behind, so
    /// that neither thread waits for the other.
    fn decode_here(&mut self, share: bool, ranges: &mut Vec<Option<Range<usize>>>, first: u64) {
        let mut events = std::mem::take(&mut self.events);
        let mut next = first;
        // `consume` never breaks here: `Ok(false)` cannot come back.
        let result = self.decode(share, ranges, &mut next, &mut |event| {
            events.push(event);
            ControlFlow::Continue(())
        });
        (self.events, self.failed, self.decoded) = (events, result.err(), true);
    }

    /// The payloads of a sealed batch's rows, copied into one text that
    /// the events decoded from them share, and each row's range of it in
    /// `ranges` (`None` for a row whose texts are not known to be UTF-8,
    /// which is decoded as read; for every row when not `share`). One
    /// allocation for the batch's events instead of one each
    /// (`SharedText` says why).
    fn share_payloads(&self, share: bool, ranges: &mut Vec<Option<Range<usize>>>) -> SharedText {
        ranges.clear();
        let (true, BatchText::Checked(text)) = (share, &self.text) else {
            ranges.resize(self.rows.len(), None);
            return SharedText::new(String::new());
        };
        let payload = |r: &BatchRow| text.get(r.data.0..r.data.1);
        let len = self.rows.iter().filter_map(payload).map(str::len).sum();
        let mut shared = String::with_capacity(len);
        ranges.extend(self.rows.iter().map(|r| {
            let data = payload(r)?;
            let start = shared.len();
            shared.push_str(data);
            Some(start..shared.len())
        }));
        SharedText::new(shared)
    }

    /// The rows of a sealed batch, their texts borrowed from the buffer;
    /// `log-corrupt` for a row whose texts are not UTF-8. A buffer that is
    /// UTF-8 as a whole holds rows that each are, unless a text starts or
    /// ends inside a character (`str::get` says so): those rows, and every
    /// row of a buffer that is not UTF-8, are checked on their own.
    fn rows(&self) -> impl Iterator<Item = Result<RowRef<'_>, LoadError>> + '_ {
        let (bytes, checked) = match &self.text {
            BatchText::Checked(text) => (text.as_bytes(), Some(text.as_str())),
            BatchText::Bytes(text) | BatchText::NotUtf8(text) => (text.as_slice(), None),
        };
        self.rows.iter().map(move |r| {
            let fast = checked.and_then(|text| {
                let text = |(start, end): (usize, usize)| text.get(start..end);
                Some(RowRef {
                    seq: r.seq,
                    time: r.time,
                    event_type: text(r.event_type)?,
                    data: text(r.data)?,
                    source_event_seqs: r.source_event_seqs.map_or(Some(None), |t| text(t).map(Some))?,
                    surface_op: r.surface_op.map_or(Some(None), |t| text(t).map(Some))?,
                })
            });
            fast.map_or_else(
                || {
                    let raw = |(start, end): (usize, usize)| bytes.get(start..end).unwrap_or_default();
                    RowBytes {
                        seq: r.seq,
                        time: r.time,
                        event_type: raw(r.event_type),
                        data: raw(r.data),
                        source_event_seqs: r.source_event_seqs.map(raw),
                        surface_op: r.surface_op.map(raw),
                    }
                    .check()
                },
                Ok,
            )
        })
    }
}

/// What a store's `read` closure for [`decode_into`] does with each row
/// its client yields: push the row's columns on, or stop at the first row
/// whose columns cannot be read, keeping that row's error and position.
///
/// ```
/// use palimpsest_core_session::LoadError;
/// use palimpsest_persistence::rows::{decode_into, RowReader};
///
/// let unreadable = Err(LoadError::LogCorrupt { line: None, detail: "not TEXT".into() });
/// let mut rows = RowReader::default();
/// let decoded = decode_into(1, |push| {
///     for row in [unreadable] {
///         if !rows.take(row, push) {
///             break;
///         }
///     }
///     Ok::<(), ()>(())
/// }, &mut |_| std::ops::ControlFlow::Continue(()));
/// let err = rows.finish(decoded.unwrap()).unwrap_err();
/// assert_eq!((err.0, err.1.code()), (0, "log-corrupt"));
/// ```
#[derive(Debug, Default)]
pub struct RowReader {
    index: u64,
    unreadable: Option<(u64, LoadError)>,
}

impl RowReader {
    /// Takes the next row, its columns read (or not): `false` when the
    /// read must stop, because they could not be read or `push` refused.
    /// The row is a [`RowRef`] for [`decode_into`], a [`RowBytes`] for
    /// [`decode_bytes_into`].
    pub fn take<R>(&mut self, row: Result<R, LoadError>, push: &mut dyn FnMut(R) -> bool) -> bool {
        match row {
            Ok(row) => {
                self.index += 1;
                push(row)
            }
            Err(e) => {
                self.unreadable = Some((self.index, e));
                false
            }
        }
    }

    /// The outcome of the load: `decoded` (what [`decode_into`] gave),
    /// then an unreadable row, if there was one; each error with its
    /// position. The first bad row by position wins either way, as no row
    /// after an unreadable one was pushed.
    pub fn finish(self, decoded: Result<(), (u64, LoadError)>) -> Result<(), (u64, LoadError)> {
        decoded.and_then(|()| self.unreadable.map_or(Ok(()), Err))
    }
}

/// Decodes rows into events while they are being read, collecting them:
/// [`decode_into`] with a consumer that keeps every event. The result is
/// that of decoding the rows in order: the events, or the first bad row's
/// error with its position.
pub fn decode_while_reading<E>(
    threads: usize,
    read: impl FnOnce(&mut dyn FnMut(RowRef<'_>) -> bool) -> Result<(), E>,
) -> Result<Result<Vec<Event>, (u64, LoadError)>, E> {
    let mut events = Vec::new();
    let decoded = decode_into(threads, read, &mut |event| {
        events.push(event);
        ControlFlow::Continue(())
    })?;
    Ok(decoded.map(|()| events))
}

/// Decodes rows into events while they are being read, handing each event
/// to `consume` in order: `read` calls `push` with each row in order (row
/// `i` at position `i` of its session) and stops early when `push` returns
/// `false`, which it does once a row failed to decode or `consume` broke.
///
/// With `threads` > 1, rows go in batches to one other thread, which
/// decodes them and calls `consume` while `read` goes on: a database
/// client (SQLite stepping through rows, PostgreSQL reading them off the
/// socket) yields rows on one thread only, and on the benchmark workload
/// reading a row takes about as long as decoding and checking it, so a
/// second decoder would wait. When the decoder falls behind (its queue of
/// batches is full), the reading thread decodes the next batch itself
/// rather than wait, and the decoder only hands those events on: the two
/// threads share the work whichever of them is slower on the machine of
/// the moment. Pass [`decode_threads`] unless you have a
/// reason not to: the PostgreSQL store has one, and passes `1` by default,
/// since reading its rows off the socket in one pass leaves too little
/// reading to overlap for the hand-offs to pay (docs/performance.md).
///
/// The result is `Ok(())` when every row read decoded (or `consume`
/// broke), or the first bad row's error with its position; `consume` has
/// then seen every event before it.
pub fn decode_into<E>(
    threads: usize,
    read: impl FnOnce(&mut dyn FnMut(RowRef<'_>) -> bool) -> Result<(), E>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<Result<(), (u64, LoadError)>, E> {
    if threads <= 1 {
        return decode_as_read(|push| read(&mut |row| push(Ok(row))), consume);
    }
    // The batches' texts are checked again as a whole: a small cost
    // beside reading them, and one way through for both kinds of rows.
    decode_bytes_into(threads, |push| read(&mut |row| push(RowBytes::from(row))), consume)
}

/// [`decode_into`] for a client that yields its texts as bytes (SQLite):
/// the same result, each text checked to be UTF-8 (`log-corrupt` at its
/// row otherwise). With `threads` > 1 the reading thread copies bytes only,
/// and each full batch is checked in one pass.
pub fn decode_bytes_into<E>(
    threads: usize,
    read: impl FnOnce(&mut dyn FnMut(RowBytes<'_>) -> bool) -> Result<(), E>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<Result<(), (u64, LoadError)>, E> {
    decode_bytes_into_with(threads, true, read, consume)
}

/// [`decode_bytes_into`], saying whether the events decoded a batch at a
/// time share the batch's payload text (`share`: for a consumer that
/// keeps every event, [`LoadSink::keeps_events`](crate::LoadSink::keeps_events))
/// or each get their own (for one that keeps a few of many, which would
/// otherwise keep a batch alive for each).
pub fn decode_bytes_into_with<E>(
    threads: usize,
    share: bool,
    read: impl FnOnce(&mut dyn FnMut(RowBytes<'_>) -> bool) -> Result<(), E>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<Result<(), (u64, LoadError)>, E> {
    decode_batched(threads, share, Handoff::WhenBehind, read, consume)
}

/// Which batches (each full one, and the last) the reading thread decodes
/// itself instead of handing them to the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    /// Those it finds the decoder's queue full for.
    WhenBehind,
    /// Every other one too, whatever the queue holds: for tests, which
    /// cannot make the decoder fall behind on purpose.
    #[cfg_attr(not(test), allow(dead_code))]
    EveryOther,
}

/// [`decode_bytes_into_with`], `handoff` saying which batches the reading
/// thread decodes.
fn decode_batched<E>(
    threads: usize,
    share: bool,
    handoff: Handoff,
    read: impl FnOnce(&mut dyn FnMut(RowBytes<'_>) -> bool) -> Result<(), E>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<Result<(), (u64, LoadError)>, E> {
    if threads <= 1 {
        return decode_as_read(|push| read(&mut |row| push(row.check())), consume);
    }
    let stopped = AtomicBool::new(false);
    // The decoder takes `consume` through this lock; if it cannot be
    // started, the lock is free and this thread decodes instead.
    let consume_cell = std::sync::Mutex::new(consume);
    // Decoded batches come back to be filled again.
    let (back_tx, back_rx) = mpsc::channel::<Batch>();
    std::thread::scope(|scope| {
        // Four batches queued absorb a short stall of the decoder before
        // the reader starts decoding; two measured no better (the
        // seventeenth session, docs/performance.md).
        let (tx, rx) = mpsc::sync_channel::<Batch>(4);
        let decoder =
            std::thread::Builder::new().name("palimpsest-row-decode".into()).spawn_scoped(scope, || {
                let mut consume = consume_cell.lock().unwrap_or_else(|p| p.into_inner());
                let (mut next, mut ranges) = (0, Vec::new());
                for mut batch in rx {
                    match batch.decode(share, &mut ranges, &mut next, &mut **consume) {
                        Ok(true) => {
                            batch.clear();
                            // The reader may have finished: then it is dropped.
                            let _ = back_tx.send(batch);
                        }
                        Ok(false) => {
                            stopped.store(true, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(e) => {
                            stopped.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                }
                Ok(())
            });
        let decoder = match decoder {
            Ok(decoder) => decoder,
            Err(e) => {
                tracing::debug!(error = %e, "cannot start a decode thread; decoding as rows are read");
                let mut consume = consume_cell.lock().unwrap_or_else(|p| p.into_inner());
                return decode_as_read(|push| read(&mut |row| push(row.check())), &mut **consume);
            }
        };
        let (mut ranges, mut sent) = (Vec::new(), 0);
        // Hands a batch to the decoder, or decodes it here when the
        // decoder is behind (its queue is full): on the benchmark workload
        // decoding a batch takes a little longer than reading one, and
        // either thread may lose its core for a while on a busy machine;
        // this way neither waits. `false` when reading must stop: the
        // decoder stopped (at a bad row, or because `consume` broke), or
        // this thread found a bad row.
        let mut hand_over = |mut batch: Batch| -> bool {
            let first = sent;
            sent += batch.rows.len() as u64;
            if handoff == Handoff::WhenBehind || (first / BATCH_ROWS as u64).is_multiple_of(2) {
                batch = match tx.try_send(batch) {
                    Ok(()) => return !stopped.load(Ordering::Relaxed),
                    Err(mpsc::TrySendError::Disconnected(_)) => return false,
                    Err(mpsc::TrySendError::Full(batch)) => batch,
                };
            }
            batch.decode_here(share, &mut ranges, first);
            let failed = batch.failed.is_some();
            tx.send(batch).is_ok() && !failed && !stopped.load(Ordering::Relaxed)
        };
        let mut batch = Batch::default();
        let read = read(&mut |row| {
            batch.push(row);
            if batch.rows.len() == BATCH_ROWS {
                let empty = back_rx.try_recv().unwrap_or_default();
                return hand_over(std::mem::replace(&mut batch, empty));
            }
            true
        });
        if read.is_ok() && !batch.rows.is_empty() {
            // The last batch too: were it queued behind others, this thread
            // would only wait for the decoder to reach it.
            hand_over(batch);
        }
        drop(tx);
        let decoded = decoder.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read?;
        Ok(decoded)
    })
}

/// Decodes rows in order, from position `*next` on, into `consume`: each
/// row as its columns were read (`Err`: they could not be). `Ok(false)`
/// when `consume` broke.
fn decode_onto<'a>(
    next: &mut u64,
    rows: impl IntoIterator<Item = Result<(RowRef<'a>, Payload<'a>), LoadError>>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<bool, (u64, LoadError)> {
    for row in rows {
        let index = *next;
        let event = row.and_then(|(row, data)| row.decode_with(data, index)).map_err(|e| (index, e))?;
        *next += 1;
        if consume(event).is_break() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Decodes each row on the reading thread, as it is read.
fn decode_as_read<E>(
    read: impl FnOnce(&mut dyn FnMut(Result<RowRef<'_>, LoadError>) -> bool) -> Result<(), E>,
    consume: &mut (dyn FnMut(Event) -> ControlFlow<()> + Send),
) -> Result<Result<(), (u64, LoadError)>, E> {
    let (mut next, mut failed) = (0, None);
    read(
        &mut |row| match decode_onto(&mut next, [row.map(|row| (row, Payload::Borrowed(row.data)))], consume)
        {
            Ok(more) => more,
            Err(e) => {
                failed = Some(e);
                false
            }
        },
    )?;
    Ok(failed.map_or(Ok(()), Err))
}

/// The threads [`decode_into`] should use for a `decode_threads` option
/// (as in the SQL stores' options): `0` for the machine's choice, one
/// reader and one decoder where there are two cores or more; any other
/// number as it is (`1`: decode on the reading thread).
///
/// The machine's choice is asked once per process: on Linux
/// `available_parallelism` reads the cgroup's CPU quota from files, some
/// tens of microseconds that every load paid.
pub fn decode_threads(option: usize) -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    match option {
        0 => *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        n => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(data: &str, sources: Option<&str>, op: Option<&str>) -> EventRow {
        EventRow {
            seq: 3,
            time: 7,
            event_type: EventType::parse("assistant/message"),
            data: data.to_owned(),
            source_event_seqs: sources.map(str::to_owned),
            surface_op: op.map(str::to_owned),
        }
    }

    const MSG: &str = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;

    #[test]
    fn a_row_decodes_to_the_event_whose_columns_it_holds() {
        let e = row(MSG, Some("[]"), Some("\"append\"")).decode(3).map_err(|e| e.to_string());
        let e = e.expect("valid row");
        assert_eq!(e.seq(), 3);
        assert_eq!(e.time(), 7);
        assert_eq!(e.data(), MSG);
        assert_eq!(e.source_event_seqs(), Some(&[][..]));
        assert_eq!(e.surface_op(), Some(SurfaceOp::Append));
        assert_eq!(surface_op_json(e.surface_op().unwrap_or(SurfaceOp::Append)), "\"append\"");
        assert_eq!(sources_json(&[]), "[]");
    }

    #[test]
    fn a_negative_seq_is_event_malformed_as_in_a_jsonl_line() {
        let mut r = row(MSG, Some("[]"), Some("\"append\""));
        r.seq = -1;
        let err = r.decode(3).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
        assert!(err.is_err_and(|e| e.detail().contains("negative seq -1")));
    }

    #[test]
    fn a_row_breaks_its_own_rules_before_the_seq_rule_as_a_line_does() {
        // Rule 2 before rule 9: a plugin event with a surfaceOp, at seq 5
        // where 2 is next.
        let mut r = row("null", None, Some("\"append\""));
        r.event_type = EventType::parse("x/y");
        r.seq = 5;
        let err = r.decode(2).map(drop);
        assert_eq!(err.map_err(|e| e.code().to_owned()), Err("surface-op-forbidden".to_owned()));
        // Without it, the gap.
        let mut r = row("null", None, None);
        r.event_type = EventType::parse("x/y");
        r.seq = 5;
        let err = r.decode(2).map(drop);
        assert_eq!(err.map_err(|e| e.code().to_owned()), Err("seq-not-contiguous".to_owned()));
    }

    #[test]
    fn json_smuggled_through_one_column_into_another_key_is_refused() {
        let smuggled = format!("{MSG},\"sourceEventSeqs\":[1]");
        let err = row(&smuggled, None, Some("\"append\"")).decode(3).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
        let err = row(MSG, Some("[1],\"surfaceOp\":\"append\""), None).decode(3).map(drop);
        // Without the smuggled op the event would lack its surfaceOp (rule 1);
        // with it, the surface_op column (NULL) does not match.
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"));
    }

    #[test]
    fn whitespace_around_data_is_refused_as_it_would_not_round_trip() {
        for padded in [format!(" {MSG}"), format!("{MSG}\n"), format!("\t{MSG}\r")] {
            let err = row(&padded, None, Some("\"append\"")).decode(3).map(drop);
            assert_eq!(err.as_ref().map_err(LoadError::code), Err("event-malformed"), "{padded:?}");
        }
        // Inside the value it is part of the payload, and kept.
        let inner = MSG.replace("\"turn\":1", "\"turn\": 1");
        let e = row(&inner, None, Some("\"append\"")).decode(3).map_err(|e| e.to_string());
        assert_eq!(e.expect("valid row").data(), inner);
    }

    #[test]
    fn a_seq_other_than_the_position_is_not_contiguous() {
        let err = row(MSG, None, Some("\"append\"")).decode(2).map(drop);
        assert_eq!(err.as_ref().map_err(LoadError::code), Err("seq-not-contiguous"));
        let err = err.err();
        assert_eq!(err.as_ref().and_then(LoadError::seq), Some(3), "the row's seq");
        assert_eq!(err.and_then(|e| e.line()), None, "a row has no line");
    }

    #[test]
    fn integers_round_trip_through_their_sql_form() {
        for v in [0, 1, 1_700_000_000_000, i64::MAX as u64, u64::MAX] {
            assert_eq!(from_sql_int(to_sql_int(v)), v);
        }
        assert_eq!(to_sql_int(42), 42);
    }

    /// Decodes `rows` as a load does, on `threads` threads; the error's
    /// position only.
    fn decoded(rows: &[EventRow], threads: usize) -> Result<Vec<Event>, u64> {
        let read = |push: &mut dyn FnMut(RowRef<'_>) -> bool| -> Result<(), ()> {
            for row in rows {
                if !push(row.as_ref()) {
                    break;
                }
            }
            Ok(())
        };
        decode_while_reading(threads, read).expect("reading cannot fail here").map_err(|e| e.0)
    }

    /// `n` valid rows of a plugin event, seqs 0 to `n - 1`.
    fn plugin_rows(n: usize) -> Vec<EventRow> {
        (0..n as i64)
            .map(|seq| EventRow {
                seq,
                time: 1,
                event_type: EventType::parse("x/p"),
                data: format!("{{\"i\":{seq}}}"),
                source_event_seqs: None,
                surface_op: None,
            })
            .collect()
    }

    #[test]
    fn rows_decode_on_threads_exactly_as_in_order() {
        // Enough rows for several batches on every thread.
        let n = BATCH_ROWS * 5 + 17;
        let good = plugin_rows(n);
        let expected = decoded(&good, 1).expect("valid rows");
        assert_eq!(expected.len(), n);
        for threads in 2..6 {
            assert_eq!(decoded(&good, threads), Ok(expected.clone()), "{threads} threads");
        }
        // One or two bad rows anywhere: the first by position is the error.
        for bad in [0, 7, BATCH_ROWS - 1, BATCH_ROWS, 3 * BATCH_ROWS + 5, n - 1] {
            for also in [None, Some(bad + BATCH_ROWS), Some(bad.saturating_sub(3))] {
                let mut rows = good.clone();
                rows[bad].data = "{".into();
                if let Some(also) = also.filter(|&a| a < rows.len()) {
                    rows[also].seq = -1;
                }
                let first = also.filter(|&a| a < n).map_or(bad, |a| a.min(bad)) as u64;
                assert_eq!(decoded(&rows, 1).map(drop), Err(first));
                for threads in 2..6 {
                    assert_eq!(decoded(&rows, threads).map(drop), Err(first), "{threads} threads, bad {bad}");
                }
            }
        }
        assert_eq!(decoded(&[], 3), Ok(Vec::new()));
    }

    /// Decodes `rows` on two threads, the reading thread decoding every
    /// other batch itself, into a consumer that breaks after `keep`
    /// events: the events it saw, and the error's position.
    fn decoded_half_by_the_reader(rows: &[EventRow], keep: usize) -> (Vec<Event>, Result<(), u64>) {
        decoded_half_by_the_reader_reading(rows, keep).0
    }

    /// [`decoded_half_by_the_reader`], and how many rows were read.
    fn decoded_half_by_the_reader_reading(
        rows: &[EventRow],
        keep: usize,
    ) -> ((Vec<Event>, Result<(), u64>), usize) {
        let mut pushed = 0;
        let read = |push: &mut dyn FnMut(RowBytes<'_>) -> bool| -> Result<(), ()> {
            for row in rows {
                pushed += 1;
                if !push(RowBytes::from(row.as_ref())) {
                    break;
                }
            }
            Ok(())
        };
        let mut events = Vec::new();
        let decoded = decode_batched(2, true, Handoff::EveryOther, read, &mut |event| {
            events.push(event);
            if events.len() == keep {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        ((events, decoded.expect("reading cannot fail here").map_err(|e| e.0)), pushed)
    }

    #[test]
    fn batches_the_reading_thread_decodes_come_out_as_decoded_in_order() {
        let n = BATCH_ROWS * 5 + 17;
        let good = plugin_rows(n);
        let expected = decoded(&good, 1).expect("valid rows");
        let (events, result) = decoded_half_by_the_reader(&good, usize::MAX);
        assert_eq!((events, result), (expected.clone(), Ok(())));
        // A consumer that stops, in a batch of either thread, sees the
        // events before, and no error from the rows after.
        for keep in [1, BATCH_ROWS - 1, BATCH_ROWS + 1, 3 * BATCH_ROWS + 2, n] {
            let (events, result) = decoded_half_by_the_reader(&good, keep);
            assert_eq!((&events[..], result), (&expected[..keep], Ok(())), "keep {keep}");
        }
        // A bad row in a batch of either thread: the events before it,
        // then its error at its position.
        for bad in [0, 7, BATCH_ROWS - 1, BATCH_ROWS, BATCH_ROWS + 9, 3 * BATCH_ROWS + 5, n - 1] {
            let mut rows = good.clone();
            rows[bad].data = "{".into();
            let (events, result) = decoded_half_by_the_reader(&rows, usize::MAX);
            assert_eq!((&events[..], result), (&expected[..bad], Err(bad as u64)), "bad {bad}");
            // Found bad by the reading thread, which reads no further.
            if (bad / BATCH_ROWS) % 2 == 1 {
                let (_, read) = decoded_half_by_the_reader_reading(&rows, usize::MAX);
                assert_eq!(read, ((bad / BATCH_ROWS + 1) * BATCH_ROWS).min(n), "bad {bad}");
            }
            // Stopped before it, the consumer never hears of it.
            if bad > 0 {
                let (events, result) = decoded_half_by_the_reader(&rows, bad);
                assert_eq!((&events[..], result), (&expected[..bad], Ok(())), "bad {bad}");
            }
        }
    }

    #[test]
    fn batches_reused_across_rows_of_every_shape_give_each_row_its_own_texts() {
        // Rows of different lengths, with and without the optional
        // columns, over many batches: a reused batch buffer must never
        // let one row's text leak into another's.
        let rows: Vec<EventRow> = (0..(BATCH_ROWS * 7 + 3) as i64)
            .map(|seq| {
                if seq % 3 == 0 {
                    let mut r = row(MSG, Some("[]"), Some("\"append\""));
                    r.seq = seq;
                    r
                } else {
                    EventRow {
                        seq,
                        time: seq * 7,
                        event_type: EventType::parse("x/p"),
                        data: format!("{{\"pad\":\"{}\"}}", "y".repeat((seq % 50) as usize)),
                        source_event_seqs: None,
                        surface_op: None,
                    }
                }
            })
            .collect();
        let inline = decoded(&rows, 1).expect("valid rows");
        let batched = decoded(&rows, 2).expect("valid rows");
        assert_eq!(batched, inline);
        // Decoded a batch at a time, the events share their batch's
        // payloads; decoded as read, each has its own.
        assert!(batched.iter().all(Event::shares_text) && !inline.iter().any(Event::shares_text));
        for (event, row) in inline.iter().zip(&rows) {
            assert_eq!((event.data(), event.time()), (row.data.as_str(), from_sql_int(row.time)));
            assert_eq!(event.surface_op().is_some(), row.surface_op.is_some());
        }
    }

    /// Rows of texts as bytes, decoded as a SQLite load does, on
    /// `threads` threads: the events, or the error's position, code and
    /// detail.
    fn decoded_bytes(
        rows: &[(EventRow, Vec<u8>, Vec<u8>)],
        threads: usize,
    ) -> Result<Vec<Event>, (u64, String)> {
        let read = |push: &mut dyn FnMut(RowBytes<'_>) -> bool| -> Result<(), ()> {
            for (row, event_type, data) in rows {
                let bytes = RowBytes { event_type, data, ..RowBytes::from(row.as_ref()) };
                if !push(bytes) {
                    break;
                }
            }
            Ok(())
        };
        let mut events = Vec::new();
        let decoded = decode_bytes_into(threads, read, &mut |event| {
            events.push(event);
            ControlFlow::Continue(())
        });
        match decoded.expect("reading cannot fail here") {
            Ok(()) => Ok(events),
            Err((at, e)) => Err((at, format!("{}: {}", e.code(), e.detail()))),
        }
    }

    #[test]
    fn texts_read_as_bytes_are_checked_to_be_utf8_wherever_a_batch_holds_them() {
        let n = BATCH_ROWS * 3 + 5;
        let good: Vec<(EventRow, Vec<u8>, Vec<u8>)> = (0..n as i64)
            .map(|seq| {
                // Characters of two, three and four bytes in every row.
                let data = format!("{{\"i\":{seq},\"s\":\"é€😀\"}}");
                let row = EventRow {
                    seq,
                    time: 1,
                    event_type: EventType::parse("x/p"),
                    data: data.clone(),
                    source_event_seqs: None,
                    surface_op: None,
                };
                (row, b"x/p".to_vec(), data.into_bytes())
            })
            .collect();
        let expected = decoded(&good.iter().map(|(r, ..)| r.clone()).collect::<Vec<_>>(), 1).expect("valid");
        for threads in 1..4 {
            assert_eq!(decoded_bytes(&good, threads), Ok(expected.clone()), "{threads} threads");
        }
        for bad in [0, 9, BATCH_ROWS - 1, BATCH_ROWS, 2 * BATCH_ROWS + 3, n - 1] {
            // A byte that is never UTF-8, in `data`: the batch is not UTF-8
            // as a whole.
            let mut rows = good.clone();
            rows[bad].2.insert(3, 0xff);
            // A character cut in two between `type` and `data`: the batch is
            // UTF-8 as a whole, the row's columns are not.
            let mut cut = good.clone();
            cut[bad].1.push(0xc3);
            cut[bad].2.insert(0, 0xa9);
            for threads in 1..4 {
                let err = decoded_bytes(&rows, threads).map(drop).unwrap_err();
                assert_eq!(err.0, bad as u64, "{threads} threads");
                assert!(err.1.starts_with("log-corrupt: column `data` is not UTF-8"), "{err:?}");
                let err = decoded_bytes(&cut, threads).map(drop).unwrap_err();
                assert_eq!(err.0, bad as u64, "{threads} threads");
                assert!(err.1.starts_with("log-corrupt: column `type` is not UTF-8"), "{err:?}");
            }
        }
    }

    #[test]
    fn a_read_error_is_returned_after_the_decoders_stop() {
        let rows = [row(MSG, None, Some("\"append\""))];
        for threads in [1, 3] {
            let read = |push: &mut dyn FnMut(RowRef<'_>) -> bool| {
                push(rows[0].as_ref());
                Err("disk gone")
            };
            assert_eq!(decode_while_reading(threads, read).map(drop), Err("disk gone"));
        }
    }

    #[test]
    fn odd_type_strings_and_huge_times_survive() {
        let mut r = row(r#"{"x":1}"#, None, None);
        r.event_type = EventType::parse("odd\"type\n");
        r.time = to_sql_int(u64::MAX);
        let e = r.decode(3).expect("a plugin event with an odd type");
        assert_eq!((e.event_type().as_str(), e.time()), ("odd\"type\n", u64::MAX));
    }
}
