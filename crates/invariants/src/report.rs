//! [`Report`]: read and check one session the way `palimpsest validate`
//! does, with what was found as data.
//!
//! Checking runs in one pass, one event at a time ([`ReportBuilder`]):
//!
//! 1. the header, then every rule of contract sections 1, 2 and 6,
//!    **stopping at the first violation** (as `Session::from_log` does):
//!    that one is [`Report::fatal`], and the events before it are the
//!    accepted prefix, [`Report::session`];
//! 2. beside them, the structural invariants of section 2a (those of
//!    [`check_log`](crate::check_log)) on each accepted event: **every**
//!    violation, [`Report::invariants`].
//!
//! What the report keeps of the session is the caller's choice
//! ([`Retain`]): the whole log, or what an append needs, so that a log of
//! any length is checked in memory bounded by its surface
//! ([`Report::check_jsonl_read`], [`ReportBuilder`] fed by a store).
//!
//! Positions are typed ([`Position`]): an event's finding always has its
//! seq, and a line only where the log is a file of lines (a JSONL file); a
//! store's rows have seqs, not lines. Only a JSONL file has a torn tail or
//! a missing final newline ([`Report::torn_tail`],
//! [`Report::missing_newline`]).
//!
//! The report serializes (serde) to the object `palimpsest validate --json`
//! prints (contract section 7): see [`Report`]'s `Serialize`.

use std::io::{self, Read};

use palimpsest_core_session::explain::Shadowing;
use palimpsest_core_session::jsonl::{JsonlDecoder, JsonlPrefix, ReadOptions, TornTail};
use palimpsest_core_session::limits::line_count_left;
use palimpsest_core_session::{
    AppendError, Event, LoadError, Session, SessionHeader, SurfaceOp, MAX_COUNTED_LINE_BYTES,
};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::checker::{Checker, Fact};

/// Where a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Position {
    /// The header: line 1 of a JSONL file (only reading a file finds a
    /// header broken; a store hands over a header already read).
    Header,
    /// An event, by seq.
    Event {
        /// The event's seq.
        seq: u64,
        /// Its 1-based line in a JSONL file (the header is line 1); `None`
        /// where the log is not a file of lines (a database row).
        line: Option<u64>,
    },
    /// A line of a JSONL file no seq could be read from: a line that is not
    /// JSON, a blank line, an event whose seq is unreadable.
    Line(u64),
    /// Not one event but the store as a whole (event rows without a
    /// session, seq gaps, damaged pages).
    Store,
}

impl Position {
    /// The seq, for an event.
    pub fn seq(self) -> Option<u64> {
        match self {
            Position::Event { seq, .. } => Some(seq),
            Position::Header | Position::Line(_) | Position::Store => None,
        }
    }

    /// The 1-based line of a JSONL file, where there is one (the header's is 1).
    pub fn line(self) -> Option<u64> {
        match self {
            Position::Header => Some(1),
            Position::Event { line, .. } => line,
            Position::Line(line) => Some(line),
            Position::Store => None,
        }
    }
}

/// One violation: its stable code, where it is, and what was wrong.
///
/// Serializes to one element of `validate --json`'s `violations`:
/// `{"code": s, "seq": n | null, "message": s}` ([`Finding::message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable contract code, e.g. `replace-start-missing`,
    /// `turn-already-open`, `log-corrupt`.
    pub code: String,
    /// Where.
    pub position: Position,
    /// What was wrong, for people, without the code or the position.
    pub detail: String,
}

impl Finding {
    /// A section-1/2 refusal of the event at `seq`, on `line` of a file
    /// where there is one.
    fn refused(error: &AppendError, seq: u64, line: Option<u64>) -> Finding {
        let position = Position::Event { seq: error.seq().unwrap_or(seq), line };
        Finding { code: error.code().to_owned(), position, detail: error.detail() }
    }

    /// A failure of a JSONL file's reader at `line`: the header, a corrupt
    /// line, or an event that breaks a rule (placed by its line alone when
    /// its seq could not be read).
    fn from_load(error: &LoadError, line: u64) -> Finding {
        let line = error.line().unwrap_or(line);
        let position = match error {
            LoadError::HeaderMalformed { .. } | LoadError::HeaderVersionUnsupported { .. } => {
                Position::Header
            }
            _ => match error.seq() {
                Some(seq) => Position::Event { seq, line: Some(line) },
                None => Position::Line(line),
            },
        };
        Finding { code: error.code().to_owned(), position, detail: error.detail() }
    }

    /// A stored row (of a SQL store) that could not be read as an event
    /// or breaks a rule: placed at its seq where the error names one, else
    /// at `index`, its position in the session (no line: a row has none).
    /// The same code a JSONL line with the same fault gets.
    pub fn stored_row(error: &LoadError, index: u64) -> Finding {
        let position = match error {
            LoadError::HeaderMalformed { .. } | LoadError::HeaderVersionUnsupported { .. } => {
                Position::Header
            }
            // A row whose own seq cannot be read as one (a negative seq):
            // its position in the order read blames another event's seq.
            LoadError::Rule { error: AppendError::EventMalformed { seq: None, .. }, .. } => Position::Store,
            _ => Position::Event { seq: error.seq().unwrap_or(index), line: None },
        };
        Finding { code: error.code().to_owned(), position, detail: error.detail() }
    }

    /// A finding about the store as a whole (no seq, no line).
    pub fn store(code: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding { code: code.into(), position: Position::Store, detail: detail.into() }
    }

    /// The seq of the event, where the finding is about one.
    pub fn seq(&self) -> Option<u64> {
        self.position.seq()
    }

    /// The 1-based line of a JSONL file, where there is one.
    pub fn line(&self) -> Option<u64> {
        self.position.line()
    }

    /// The `message` of `validate --json`: the detail, prefixed with the
    /// line (`line 3: ...`) when there is no seq to place it (a corrupt
    /// line).
    pub fn message(&self) -> String {
        match self.position {
            Position::Line(line) => format!("line {line}: {}", self.detail),
            _ => self.detail.clone(),
        }
    }
}

impl Serialize for Finding {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Finding", 3)?;
        s.serialize_field("code", &self.code)?;
        s.serialize_field("seq", &self.seq())?;
        s.serialize_field("message", &self.message())?;
        s.end()
    }
}

/// One session, read and checked: the header, every rule of contract
/// sections 1, 2 and 6 (stopping at the first violation), then the
/// structural invariants of section 2a over the events accepted.
///
/// Build one with [`Report::check_jsonl`] (the bytes of a session file) or
/// [`Report::check_events`] (a session loaded from a store). Neither fails:
/// what is wrong with the log is in the report.
///
/// Serializes to the object `palimpsest validate --json` prints:
/// `{"valid": b, "events": n, "violations": [finding, ...]}`, with
/// [`Report::is_valid`], [`Report::events_checked`] and
/// [`Report::violations`] (each a [`Finding`]).
///
/// ```
/// use palimpsest_invariants::{Position, Report};
///
/// // A turn/start while turn 1 is open (section 2a), then a seq gap
/// // (section 2, rule 9), where checking stops.
/// let text = r#"{"type":"session","version":0,"id":"s1","createdAt":0}
/// {"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}
/// {"seq":1,"time":2,"type":"turn/start","data":{"turn":2}}
/// {"seq":3,"time":3,"type":"turn/end","data":{"turn":2,"reason":{"kind":"completed"}}}
/// "#;
/// let report = Report::check_jsonl(text.as_bytes());
/// assert!(!report.is_valid());
/// assert_eq!(report.events_checked(), 2);
///
/// let fatal = report.fatal.as_ref().expect("the seq gap");
/// assert_eq!(fatal.code, "seq-not-contiguous");
/// assert_eq!(fatal.position, Position::Event { seq: 3, line: Some(4) });
/// assert_eq!(report.invariants[0].code, "turn-already-open");
///
/// let json = serde_json::to_value(&report)?;
/// assert_eq!(json["valid"], false);
/// assert_eq!(json["violations"][0]["code"], "turn-already-open");
/// assert_eq!(json["violations"][1]["seq"], 3);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Report {
    /// The accepted prefix of the log (every event up to the first
    /// violation); `None` when the header could not be read. Held whole
    /// with [`Retain::Whole`]; with [`Retain::Surface`] it is
    /// [trimmed](Session::trim) (it holds what an append needs, and is not
    /// [complete](Session::is_complete)).
    pub session: Option<Session>,
    /// The first violation of sections 1, 2 or 6; checking stopped there.
    pub fatal: Option<Finding>,
    /// Section-2a violations over the accepted prefix, sorted by seq.
    pub invariants: Vec<Finding>,
    /// Findings about the store as a whole, added by the caller that
    /// checked it ([`Finding::store`]); none from this crate.
    pub store: Vec<Finding>,
    /// Who shadowed whom in the accepted prefix, whatever is retained (its
    /// memory grows with the replaces, not with what they shadowed).
    pub shadowing: Shadowing,
    /// A torn last line that was dropped (JSONL files only).
    pub torn_tail: Option<TornTail>,
    /// The last line parsed whole but had no `\n` (JSONL files only).
    pub missing_newline: bool,
}

impl Report {
    /// Reads and checks the bytes of a JSONL session file (contract
    /// section 6), with the default [`ReadOptions`].
    pub fn check_jsonl(bytes: &[u8]) -> Report {
        Report::check_jsonl_with(bytes, ReadOptions::default())
    }

    /// [`Report::check_jsonl`] with the reader's `options` (its line caps).
    /// The session is held whole ([`Retain::Whole`]).
    pub fn check_jsonl_with(bytes: &[u8], options: ReadOptions) -> Report {
        // Lines decode on every core (they are independent); the rules that
        // relate events then run in order over the decoded prefix.
        let mut check = JsonlCheck::new(options, Retain::Whole);
        let used = check.feed(bytes);
        check.finish(&bytes[used..])
    }

    /// Reads and checks a JSONL session file from `read`, a piece at a
    /// time: the file is never held whole, and with [`Retain::Surface`]
    /// neither is its log, so memory is bounded by the session's surface
    /// and open turn, not by the file's size. The findings are exactly
    /// [`Report::check_jsonl_with`]'s. A line longer than
    /// `options.max_line_bytes` is refused without being held. `Err` only
    /// when `read` fails.
    ///
    /// ```
    /// use palimpsest_core_session::jsonl::ReadOptions;
    /// use palimpsest_invariants::{Report, Retain};
    ///
    /// let text = r#"{"type":"session","version":0,"id":"s1","createdAt":0}
    /// {"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}
    /// {"seq":1,"time":2,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}
    /// "#;
    /// let report = Report::check_jsonl_read(text.as_bytes(), ReadOptions::default(), Retain::Surface)?;
    /// assert!(report.is_valid());
    /// assert_eq!(report.events_checked(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn check_jsonl_read(mut read: impl Read, options: ReadOptions, retain: Retain) -> io::Result<Report> {
        // Each piece decodes on every core (JsonlDecoder), then its events
        // are checked in order, while the other cores wait:
        // `check_jsonl_read_ahead` overlaps the two.
        let mut checks = Checks::new(retain);
        decode_pieces(&mut read, options, |decoded| checks.take(decoded))?;
        Ok(checks.into_report())
    }

    /// [`Report::check_jsonl_read`], with the file read and decoded on a
    /// thread of its own, a piece ahead of the checks on this one: the same
    /// findings, with decoding and checking overlapped instead of taking
    /// turns. The events are allocated on the reading thread and freed on
    /// this one, so what it gains depends on the allocator: 1.3-1.7x faster
    /// than [`Report::check_jsonl_read`] in the bench (a process that has
    /// run a while, glibc's `malloc`), and the `palimpsest` binary's
    /// `validate` 1.2x faster with mimalloc; but in a fresh process on
    /// glibc's `malloc`, whose arena for the new thread grows a little at a
    /// time, `validate` ran 1.25x *slower* (figures in
    /// `docs/performance.md`). Measure with your allocator.
    /// `options.decode_threads == 1` keeps everything on this thread.
    ///
    /// ```
    /// use palimpsest_core_session::jsonl::ReadOptions;
    /// use palimpsest_invariants::{Report, Retain};
    ///
    /// let text = r#"{"type":"session","version":0,"id":"s1","createdAt":0}
    /// {"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}
    /// "#;
    /// let report = Report::check_jsonl_read_ahead(text.as_bytes(), ReadOptions::default(), Retain::Surface)?;
    /// assert!(report.is_valid());
    /// assert_eq!(report.events_checked(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn check_jsonl_read_ahead(
        read: impl Read + Send,
        options: ReadOptions,
        retain: Retain,
    ) -> io::Result<Report> {
        if options.decode_threads == 1 {
            return Report::check_jsonl_read(read, options, retain);
        }
        // The reading thread decodes on its own: this one is busy checking.
        let decoding = ReadOptions { decode_threads: 1, ..options };
        let mut checks = Checks::new(retain);
        // Shared with the thread, and still here if it cannot start.
        let read = std::sync::Mutex::new(read);
        let reading = || read.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        std::thread::scope(|scope| {
            let (send, receive) = std::sync::mpsc::sync_channel(1);
            let spawned =
                std::thread::Builder::new().name("palimpsest-jsonl-read".into()).spawn_scoped(scope, || {
                    decode_pieces(&mut *reading(), decoding, move |d| send.send(d).is_ok())
                });
            match spawned {
                Ok(handle) => {
                    for decoded in receive {
                        if !checks.take(decoded) {
                            // Dropping the receiver stops the reader at its next piece.
                            break;
                        }
                    }
                    handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot start a reading thread; reading here");
                    decode_pieces(&mut *reading(), options, |decoded| checks.take(decoded))
                }
            }
        })?;
        Ok(checks.into_report())
    }

    /// Checks a session loaded from a store: its events are each
    /// well-formed already (section 1); the rules that relate them are
    /// checked here. Findings have seqs and no lines. The session is held
    /// whole; [`ReportBuilder`] checks events as a store hands them over.
    pub fn check_events(header: SessionHeader, events: Vec<Event>) -> Report {
        let mut builder = ReportBuilder::new(header, Retain::Whole);
        let mut fatal = None;
        for event in events {
            if let Err(finding) = builder.push(event, None) {
                fatal = Some(finding);
                break;
            }
        }
        builder.finish(fatal)
    }

    /// A file whose header could not be read.
    fn unread(fatal: Finding) -> Report {
        Report {
            session: None,
            fatal: Some(fatal),
            invariants: Vec::new(),
            store: Vec::new(),
            shadowing: Shadowing::default(),
            torn_tail: None,
            missing_newline: false,
        }
    }

    /// Whether nothing at all was found.
    pub fn is_valid(&self) -> bool {
        self.fatal.is_none() && self.invariants.is_empty() && self.store.is_empty()
    }

    /// How many events were accepted.
    pub fn events_checked(&self) -> usize {
        self.session.as_ref().map_or(0, |s| usize::try_from(s.next_seq()).unwrap_or(usize::MAX))
    }

    /// Every violation: the session's sorted by seq (those without a seq
    /// last, the section-2 one after invariants at the same seq), then the
    /// store's.
    pub fn violations(&self) -> Vec<&Finding> {
        let mut all: Vec<&Finding> = self.invariants.iter().chain(self.fatal.as_ref()).collect();
        all.sort_by_key(|f| (f.seq().is_none(), f.seq()));
        all.extend(&self.store);
        all
    }

    /// The session, provided sections 1, 2 and 6 hold (what deriving a
    /// transcript needs), with its section-2a violations; the first
    /// violation otherwise.
    pub fn into_session(self) -> Result<(Session, Vec<Finding>), Finding> {
        if let Some(fatal) = self.fatal {
            return Err(fatal);
        }
        match self.session {
            Some(session) => Ok((session, self.invariants)),
            // Not reached: a session is missing only when the header is
            // broken, and that is the fatal finding.
            None => Err(Finding {
                code: "header-malformed".to_owned(),
                position: Position::Header,
                detail: "no session could be read".to_owned(),
            }),
        }
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Report", 3)?;
        s.serialize_field("valid", &self.is_valid())?;
        s.serialize_field("events", &self.events_checked())?;
        s.serialize_field("violations", &self.violations())?;
        s.end()
    }
}

/// What a [`Report`] keeps of the session it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retain {
    /// The whole log: what a command that shows every event from memory
    /// needs.
    Whole,
    /// What an append needs: the surface's events, the settings event and
    /// the open turn ([`Session::trim`], now and then). Memory is bounded by
    /// the surface, not the log; the findings are the same.
    Surface,
}

/// Events appended between two trims of a [`Retain::Surface`] session, at
/// least (more when the surface is larger, so that a trim, O(surface),
/// costs O(1) per event). Tests trim often, to check trimming changes
/// nothing.
#[cfg(not(test))]
const TRIM_EVERY: u64 = 4096;
#[cfg(test)]
const TRIM_EVERY: u64 = 3;

/// Bytes read at a time by [`Report::check_jsonl_read`]: enough for the
/// decoder to split over the cores, and few enough that the reading thread
/// of [`Report::check_jsonl_read_ahead`] is soon a piece ahead.
#[cfg(not(test))]
const PIECE_BYTES: usize = 2 << 20;
/// Many pieces for the few lines of a test's file.
#[cfg(test)]
const PIECE_BYTES: usize = 97;

/// Builds a [`Report`] one event at a time, as a store hands them over:
/// every rule of sections 1, 2 and 6 on each [`push`](ReportBuilder::push)
/// (the first violation ends the check), and the invariants of section
/// 2a beside them, every violation kept.
///
/// ```
/// use palimpsest_core_session::{Event, SessionHeader};
/// use palimpsest_invariants::{ReportBuilder, Retain};
///
/// let mut builder = ReportBuilder::new(SessionHeader::new("s1", 0), Retain::Surface);
/// let start = Event::from_json(r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}"#)?;
/// let again = Event::from_json(r#"{"seq":1,"time":2,"type":"turn/start","data":{"turn":2}}"#)?;
/// builder.push(start, None).map_err(|f| f.code)?;
/// builder.push(again, None).map_err(|f| f.code)?;
/// let report = builder.finish(None);
/// assert_eq!(report.invariants[0].code, "turn-already-open");
/// assert_eq!(report.events_checked(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ReportBuilder {
    session: Session,
    retain: Retain,
    invariants: Checker,
    found: Vec<Finding>,
    shadowing: Shadowing,
}

impl ReportBuilder {
    /// A check of the session `header` opens, keeping what `retain` says.
    pub fn new(header: SessionHeader, retain: Retain) -> ReportBuilder {
        ReportBuilder {
            session: Session::create(header),
            retain,
            invariants: Checker::default(),
            found: Vec::new(),
            shadowing: Shadowing::default(),
        }
    }

    /// Checks and appends the next event, on `line` of a file where there
    /// is one. `Err` is the first violation of sections 1, 2 or 6: the
    /// check ends there (pass it to [`finish`](ReportBuilder::finish)), and
    /// the event was not appended.
    pub fn push(&mut self, event: Event, line: Option<u64>) -> Result<(), Finding> {
        let shadowed = match event.surface_op() {
            Some(op @ SurfaceOp::Replace { .. }) => self.session.view().shadowed_by(op).to_vec(),
            _ => Vec::new(),
        };
        // The invariants judge the event against the session before it, as
        // a guard would; they count only if the rules accept it.
        let fact = Fact::of(&event);
        let broken = self.invariants.check_fact(self.session.view(), &event, &fact);
        let at = event.seq();
        let seq = self.session.append(event).map_err(|error| Finding::refused(&error, at, line))?;
        if let Some(event) = self.session.event(seq) {
            self.invariants.commit_fact(self.session.view(), event, &fact);
        }
        self.found.extend(broken.into_iter().map(|v| Finding {
            code: v.code.to_owned(),
            position: Position::Event { seq: v.seq, line },
            detail: v.message,
        }));
        self.shadowing.record(seq, &shadowed, self.session.surface());
        match self.retain {
            Retain::Whole => {}
            Retain::Surface => {
                let tail = self.session.next_seq() - self.session.resident_log().resident_from();
                if tail >= TRIM_EVERY.max(self.session.surface().len() as u64) {
                    self.session.trim();
                }
            }
        }
        Ok(())
    }

    /// How many events were accepted so far.
    pub fn events_checked(&self) -> u64 {
        self.session.next_seq()
    }

    /// The report: `fatal` (the error a [`push`](ReportBuilder::push)
    /// returned, or one found outside the events, such as a corrupt line),
    /// and the section-2a violations of what was accepted, by seq.
    pub fn finish(self, fatal: Option<Finding>) -> Report {
        Report {
            session: Some(self.session),
            fatal,
            invariants: self.found,
            store: Vec::new(),
            shadowing: self.shadowing,
            torn_tail: None,
            missing_newline: false,
        }
    }
}

/// Checks a JSONL session file fed a piece at a time, as it is read: the
/// [`JsonlDecoder`] decodes each piece's lines (on several threads), and a
/// [`ReportBuilder`] checks the events in order. The result, errors and
/// line numbers included, is the same however the bytes are cut.
#[derive(Debug)]
pub struct JsonlCheck {
    decoder: PieceDecoder,
    checks: Checks,
}

impl JsonlCheck {
    /// A check of one file, read with `options`, keeping what `retain` says.
    pub fn new(options: ReadOptions, retain: Retain) -> JsonlCheck {
        JsonlCheck { decoder: PieceDecoder::new(options), checks: Checks::new(retain) }
    }

    /// Checks every whole line at the start of `bytes` (the bytes that
    /// follow what earlier calls used) and returns how many bytes that was;
    /// the caller keeps the rest and passes it again with the next bytes.
    /// Once [`is_done`](JsonlCheck::is_done), every byte is used and
    /// ignored.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        if self.is_done() {
            return bytes.len();
        }
        let (lines, used) = self.decoder.lines(bytes);
        self.checks.take(lines);
        used.unwrap_or(bytes.len())
    }

    /// Whether the first violation has been found: the rest of the file
    /// need not be read.
    pub fn is_done(&self) -> bool {
        self.checks.fatal.is_some()
    }

    /// The longest line the next line may be (see
    /// [`JsonlDecoder::next_line_cap`]).
    pub fn next_line_cap(&self) -> usize {
        self.decoder.decoder.next_line_cap()
    }

    /// Ends the check at a next line `len` bytes long beginning with
    /// `start`, over [`next_line_cap`](JsonlCheck::next_line_cap).
    pub fn overlong(mut self, len: u64, start: &[u8]) -> Report {
        self.checks.take(Decoded::Overlong(self.decoder.decoder.overlong(len, start)));
        self.checks.into_report()
    }

    /// The report, at the end of the file: `rest` is what the last
    /// [`feed`](JsonlCheck::feed) did not use (a last line without its
    /// `\n`, or nothing). A rest that is not JSON is a torn write, dropped
    /// and reported ([`Report::torn_tail`]).
    pub fn finish(mut self, rest: &[u8]) -> Report {
        if self.checks.fatal.is_none() {
            self.checks.take(Decoded::End(self.decoder.decoder.finish_prefix(rest)));
        }
        self.checks.into_report()
    }
}

/// The checking half of a JSONL check: what was decoded goes in, in order,
/// as [`JsonlCheck`] decodes it.
#[derive(Debug)]
struct Checks {
    retain: Retain,
    /// Once the header is read.
    builder: Option<ReportBuilder>,
    /// The first violation; the check ends there.
    fatal: Option<Finding>,
    /// The end of the file, once [`decode_pieces`] reads it.
    last: Option<Result<JsonlPrefix, LoadError>>,
}

impl Checks {
    fn new(retain: Retain) -> Checks {
        Checks { retain, builder: None, fatal: None, last: None }
    }

    /// Checks what [`decode_pieces`] decoded next; `false` once the check
    /// has ended (the rest of the file need not be read).
    fn take(&mut self, decoded: Decoded) -> bool {
        match decoded {
            Decoded::Lines { header, events, error } => {
                self.header(header.as_ref());
                self.push_all(events);
                if let Some(error) = error {
                    self.fail(&error);
                }
            }
            Decoded::Overlong(error) => self.fail(&error),
            Decoded::End(last) => self.last = Some(last),
        }
        self.fatal.is_none()
    }

    /// The header, once the decoder has read it.
    fn header(&mut self, header: Option<&SessionHeader>) {
        if let (None, Some(header)) = (&self.builder, header) {
            self.builder = Some(ReportBuilder::new(header.clone(), self.retain));
        }
    }

    /// Checks `events`, the next lines' events, until a rule refuses one.
    fn push_all(&mut self, events: Vec<Event>) {
        let Some(builder) = self.builder.as_mut() else { return };
        for event in events {
            if self.fatal.is_some() {
                return;
            }
            // Every line after the header is an event: event `i` is on line `i + 2`.
            let line = builder.events_checked() + 2;
            if let Err(finding) = builder.push(event, Some(line)) {
                self.fatal = Some(finding);
            }
        }
    }

    /// The decoder's error on the next line (or the header), unless a rule
    /// refused an event before it.
    fn fail(&mut self, error: &LoadError) {
        let line = self.builder.as_ref().map_or(1, |b| b.events_checked() + 2);
        self.fatal.get_or_insert_with(|| Finding::from_load(error, line));
    }

    /// The end of the file, as the decoder read its last line.
    fn end(mut self, last: Result<JsonlPrefix, LoadError>) -> Report {
        match last {
            Err(error) => self.fail(&error),
            Ok(prefix) => {
                self.header(Some(&prefix.header));
                self.push_all(prefix.events);
                if let Some(error) = &prefix.error {
                    self.fail(error);
                }
                if self.fatal.is_none() {
                    let mut report = self.into_report();
                    report.torn_tail = prefix.torn_tail;
                    report.missing_newline = prefix.missing_newline;
                    return report;
                }
            }
        }
        self.into_report()
    }

    /// The report: at the end of the file if [`decode_pieces`] read it,
    /// else where the check ended.
    fn into_report(mut self) -> Report {
        if let Some(last) = self.last.take() {
            if self.fatal.is_none() {
                return self.end(last);
            }
        }
        match self.builder {
            Some(builder) => builder.finish(self.fatal),
            // The header could not be read: that is the fatal finding.
            None => Report::unread(self.fatal.unwrap_or_else(|| Finding {
                code: "header-malformed".to_owned(),
                position: Position::Header,
                detail: "the file has no header line".to_owned(),
            })),
        }
    }
}

/// What [`decode_pieces`] hands the checks, in the file's order.
enum Decoded {
    /// The next whole lines' events; the header with the first of these
    /// after it is read; the decoder's error on the line after them.
    Lines { header: Option<SessionHeader>, events: Vec<Event>, error: Option<LoadError> },
    /// The next line is longer than the reader's cap.
    Overlong(LoadError),
    /// The end of the file, as the decoder read its last line.
    End(Result<JsonlPrefix, LoadError>),
}

/// The [`JsonlDecoder`] as the checks take what it decodes: the whole
/// lines at the start of each piece as one [`Decoded::Lines`], the header
/// with the first of them. Both [`JsonlCheck`] and [`decode_pieces`] feed
/// it.
#[derive(Debug)]
struct PieceDecoder {
    decoder: JsonlDecoder,
    header_taken: bool,
}

impl PieceDecoder {
    fn new(options: ReadOptions) -> PieceDecoder {
        PieceDecoder { decoder: JsonlDecoder::new(options), header_taken: false }
    }

    /// Decodes the whole lines at the start of `bytes`: what they hold,
    /// and how many bytes they were; `None` when the decoder failed on the
    /// line after them (the error is in the lines), where reading ends.
    fn lines(&mut self, bytes: &[u8]) -> (Decoded, Option<usize>) {
        let result = self.decoder.feed(bytes);
        let header = if self.header_taken { None } else { self.decoder.header().cloned() };
        self.header_taken |= header.is_some();
        let events = self.decoder.take_events();
        let (used, error) = match result {
            Ok(used) => (Some(used), None),
            Err(error) => (None, Some(error)),
        };
        (Decoded::Lines { header, events, error }, used)
    }
}

/// Reads `read` a piece at a time and decodes each piece's whole lines,
/// handing them to `take` until it returns `false`, the decoder fails, or
/// the file ends ([`Decoded::End`]). `Err` only when `read` fails.
fn decode_pieces(
    read: &mut impl Read,
    options: ReadOptions,
    mut take: impl FnMut(Decoded) -> bool,
) -> io::Result<()> {
    let mut pieces = PieceDecoder::new(options);
    let mut pending = Vec::with_capacity(PIECE_BYTES);
    loop {
        // A line longer than a piece makes `pending` grow until it ends,
        // or until it is over the cap.
        if read.by_ref().take(PIECE_BYTES as u64).read_to_end(&mut pending)? == 0 {
            break;
        }
        let (lines, used) = pieces.lines(&pending);
        let more = take(lines);
        let Some(used) = used.filter(|_| more) else { return Ok(()) };
        pending.drain(..used);
        if pending.len() > pieces.decoder.next_line_cap() {
            let len = line_len(read, pending.len() as u64)?;
            take(Decoded::Overlong(pieces.decoder.overlong(len, &pending)));
            return Ok(());
        }
    }
    take(Decoded::End(pieces.decoder.finish_prefix(&pending)));
    Ok(())
}

/// Reads `read` through its next `\n` (or to its end), keeping nothing,
/// `so_far` bytes of the line already read: returns the line's length
/// (its `\n` excluded), or [`MAX_COUNTED_LINE_BYTES`] where it goes on past
/// that, so that an endless stream is refused in bounded time.
fn line_len(read: &mut impl Read, so_far: u64) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut count = so_far;
    loop {
        let left = usize::try_from(line_count_left(count)).unwrap_or(usize::MAX);
        if left == 0 {
            return Ok(MAX_COUNTED_LINE_BYTES);
        }
        let want = buf.len().min(left);
        let n = match read.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(count);
        }
        if let Some(at) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(count + at as u64);
        }
        count += n as u64;
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"t","createdAt":0}"#;

    fn check(lines: &[&str]) -> Report {
        let mut text = String::from(HEADER);
        text.push('\n');
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        Report::check_jsonl(text.as_bytes())
    }

    #[test]
    fn a_rule_violation_stops_checking_and_keeps_the_prefix() {
        let c = check(&[
            r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":2,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
            r#"{"seq":3,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        ]);
        assert_eq!(c.events_checked(), 1);
        let fatal = c.fatal.as_ref().map(|f| (f.code.as_str(), f.position));
        assert_eq!(fatal, Some(("seq-not-contiguous", Position::Event { seq: 2, line: Some(3) })));
        assert!(!c.is_valid());
    }

    #[test]
    fn a_corrupt_line_has_no_seq_but_a_line() {
        let c = check(&[r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#, "nope"]);
        let f = c.fatal.as_ref().map(|f| (f.code.clone(), f.position, f.message()));
        let (code, position, message) = f.unwrap_or((String::new(), Position::Store, String::new()));
        assert_eq!((code.as_str(), position), ("log-corrupt", Position::Line(3)));
        assert!(message.starts_with("line 3: not JSON"), "{message}");
    }

    #[test]
    fn a_broken_header_is_placed_at_the_header_and_its_message_has_no_line() {
        let c = Report::check_jsonl(b"");
        let f = c.fatal.as_ref().map(|f| (f.code.as_str(), f.position, f.line(), f.message()));
        assert_eq!(
            f,
            Some(("header-malformed", Position::Header, Some(1), "the file has no header line".to_owned()))
        );
        assert!(c.session.is_none());
        assert_eq!(c.events_checked(), 0);
    }

    #[test]
    fn invariants_of_a_file_have_lines_and_of_a_store_do_not() {
        let lines = [
            r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":0,"type":"turn/start","data":{"turn":2}}"#,
        ];
        let file = check(&lines);
        assert_eq!(file.invariants[0].position, Position::Event { seq: 1, line: Some(3) });
        let events = lines.iter().map(|l| Event::from_json(l)).collect::<Result<Vec<_>, _>>();
        let events = events.unwrap_or_default();
        let stored = Report::check_events(SessionHeader::new("t", 0), events);
        assert_eq!(stored.invariants[0].position, Position::Event { seq: 1, line: None });
        assert_eq!(stored.invariants[0].code, file.invariants[0].code);
        assert_eq!(serde_json::to_value(&stored).ok(), serde_json::to_value(&file).ok());
    }

    #[test]
    fn the_serialized_form_is_the_validate_json_object() {
        let mut c = check(&[
            r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":1,"time":0,"type":"turn/start","data":{"turn":2}}"#,
            "nope",
        ]);
        c.store.push(Finding::store("store-seq-gap", "session \"x\" skips seq 4"));
        let json = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"valid": false, "events": 2, "violations": [
                {"code": "turn-already-open", "seq": 1, "message": "turn/start 2 while turn 1 is open"},
                {"code": "log-corrupt", "seq": null,
                 "message": "line 4: not JSON: expected ident at line 1 column 2"},
                {"code": "store-seq-gap", "seq": null, "message": "session \"x\" skips seq 4"},
            ]})
        );
    }

    mod streamed {
        use palimpsest_core_session::jsonl::{to_bytes, ReadOptions};
        use palimpsest_core_session::{Session, SessionHeader};
        use proptest::prelude::*;

        use crate::report::{JsonlCheck, Report, Retain};
        use crate::resume_ops::{append_ops, op};

        /// How a file is damaged after it is written.
        #[derive(Debug, Clone)]
        enum Damage {
            None,
            /// A line replaced with text that is not an event.
            Line(prop::sample::Index, &'static str),
            /// The file cut short: a torn last line, or no final newline.
            Cut(prop::sample::Index),
        }

        fn damage() -> impl Strategy<Value = Damage> {
            prop_oneof![
                2 => Just(Damage::None),
                1 => (any::<prop::sample::Index>(), prop::sample::select(vec![
                    "nope",
                    "",
                    r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
                    r#"{"seq":1}"#,
                ])).prop_map(|(i, text)| Damage::Line(i, text)),
                1 => any::<prop::sample::Index>().prop_map(Damage::Cut),
            ]
        }

        fn file(ops: &[(crate::resume_ops::Op, bool)], damage: &Damage) -> Vec<u8> {
            let mut session = Session::create(SessionHeader::new("st", 3));
            append_ops(&mut session, ops);
            let bytes = to_bytes(session.header(), session.events());
            match damage {
                Damage::None => bytes,
                Damage::Line(i, bad) => {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    let mut lines: Vec<&str> = text.lines().collect();
                    let at = 1 + i.index(lines.len());
                    if at < lines.len() {
                        lines[at] = bad;
                    }
                    let mut out = lines.join("\n");
                    out.push('\n');
                    out.into_bytes()
                }
                Damage::Cut(i) => bytes[..i.index(bytes.len() + 1)].to_vec(),
            }
        }

        /// The findings as a trimmed session can reproduce them: an
        /// `assistant/message` citing events the session no longer holds
        /// is judged without their types (`check_assistant_sources`), so
        /// that finding keeps its code and position but not its detail,
        /// and on a message already outside its step (`step-event-outside-
        /// step` at the same seq) it is not judged at all.
        fn comparable(found: &[crate::Finding]) -> Vec<(String, crate::Position, String)> {
            let outside: Vec<_> =
                found.iter().filter(|f| f.code == "step-event-outside-step").map(|f| f.position).collect();
            found
                .iter()
                .filter(|f| !(f.code == "assistant-sources-not-chunks" && outside.contains(&f.position)))
                .map(|f| {
                    let detail = if f.code == "assistant-sources-not-chunks" { "" } else { &f.detail };
                    (f.code.clone(), f.position, detail.to_owned())
                })
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            /// A file checked a piece at a time, its session trimmed every
            /// few events, reports exactly what the whole check reports.
            #[test]
            fn a_streamed_check_reports_what_the_whole_check_reports(
                ops in prop::collection::vec(op(), 0..120),
                damage in damage(),
                pieces in prop::collection::vec(1usize..300, 1..40),
            ) {
                let bytes = file(&ops, &damage);
                let whole = Report::check_jsonl(&bytes);
                let mut check = JsonlCheck::new(ReadOptions::default(), Retain::Surface);
                let (mut pending, mut at, mut piece) = (Vec::new(), 0usize, 0usize);
                while at < bytes.len() {
                    let n = pieces[piece % pieces.len()].min(bytes.len() - at);
                    piece += 1;
                    pending.extend_from_slice(&bytes[at..at + n]);
                    at += n;
                    let used = check.feed(&pending);
                    pending.drain(..used);
                }
                let streamed = check.finish(&pending);
                let read = Report::check_jsonl_read(bytes.as_slice(), ReadOptions::default(), Retain::Surface);
                let read = read.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let ahead = Report::check_jsonl_read_ahead(bytes.as_slice(), ReadOptions::default(), Retain::Surface);
                let ahead = ahead.map_err(|e| TestCaseError::fail(e.to_string()))?;
                for other in [&streamed, &read, &ahead] {
                    prop_assert_eq!(&other.fatal, &whole.fatal);
                    prop_assert_eq!(comparable(&other.invariants), comparable(&whole.invariants));
                    prop_assert_eq!(other.torn_tail, whole.torn_tail);
                    prop_assert_eq!(other.missing_newline, whole.missing_newline);
                    prop_assert_eq!(other.events_checked(), whole.events_checked());
                    prop_assert_eq!(other.is_valid(), whole.is_valid());
                    let surface = |r: &Report| r.session.as_ref().map(|s| s.surface().to_vec());
                    prop_assert_eq!(surface(other), surface(&whole));
                    let request = |r: &Report| r.session.as_ref().map(|s| s.derive_request().to_json());
                    prop_assert_eq!(request(other), request(&whole));
                    // Crash repair reads the open turn, which trimming keeps.
                    let closers = |r: &Report| {
                        r.session.as_ref().map(|s| {
                            palimpsest_core_session::repair::repair(s.resident()).iter().map(palimpsest_core_session::Event::to_json).collect::<Vec<_>>()
                        })
                    };
                    prop_assert_eq!(closers(other), closers(&whole));
                }
                if let (Some(session), Some(whole)) = (&streamed.session, &whole.session) {
                    let held = session.resident().len() as u64;
                    // The open turn, from its turn/start on, stays too.
                    let open_turn = match whole.turn_state().open_turn {
                        Some(_) => whole.resident().iter().rev().position(|e| e.event_type().as_str() == "turn/start").map_or(0, |i| i as u64 + 1),
                        None => 0,
                    };
                    prop_assert!(
                        held <= 3 * (session.surface().len() as u64 + 1) + 64 + 2 * super::super::TRIM_EVERY + open_turn,
                        "{} events held for a surface of {} and an open turn of {}", held, session.surface().len(), open_turn
                    );
                }
            }
        }
    }

    /// Reads a file's bytes, then fails.
    struct Failing<'a>(&'a [u8]);

    impl std::io::Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn lines(count: usize, long_at: Option<usize>) -> Vec<u8> {
        let mut text = format!("{HEADER}\n");
        for seq in 0..count {
            let pad = if Some(seq) == long_at { "x".repeat(1000) } else { String::new() };
            text.push_str(&format!(r#"{{"seq":{seq},"time":0,"type":"x/tick","data":{{"pad":"{pad}"}}}}"#));
            text.push('\n');
        }
        text.into_bytes()
    }

    #[test]
    fn reading_ahead_refuses_an_overlong_line_where_reading_in_place_does() {
        let options = ReadOptions { max_line_bytes: 300, ..ReadOptions::default() };
        let bytes = lines(40, Some(25));
        let whole = Report::check_jsonl_with(&bytes, options);
        let fatal = whole.fatal.as_ref().expect("the long line is refused");
        assert_eq!((fatal.code.as_str(), fatal.position.line()), ("event-too-large", Some(27)));
        for threads in [0, 1, 2] {
            let options = ReadOptions { decode_threads: threads, ..options };
            let read = Report::check_jsonl_read(bytes.as_slice(), options, Retain::Surface).unwrap();
            let ahead = Report::check_jsonl_read_ahead(bytes.as_slice(), options, Retain::Surface).unwrap();
            for report in [&read, &ahead] {
                assert_eq!(report.fatal, whole.fatal);
                assert_eq!(report.events_checked(), 25);
            }
        }
    }

    /// A stream that never sends a `\n` (`validate /dev/zero`, a pipe):
    /// the check ends, at the count's bound, with the line "at least" that.
    #[test]
    fn an_endless_line_ends_the_check_at_the_count_bound() {
        let head = lines(3, None);
        for threads in [0, 1] {
            // A small cap: in tests a piece is 97 bytes, and the decoder
            // looks for a line's end in all it holds at each piece.
            let options = ReadOptions { decode_threads: threads, max_line_bytes: 1000 };
            let endless = io::Read::chain(head.as_slice(), io::repeat(b'x'));
            let report = Report::check_jsonl_read(endless, options, Retain::Surface).unwrap();
            let fatal = report.fatal.as_ref().expect("the endless line is refused");
            assert_eq!((fatal.code.as_str(), fatal.position.line()), ("event-too-large", Some(5)));
            assert!(
                fatal.message().contains(&format!("at least {MAX_COUNTED_LINE_BYTES} bytes")),
                "{}",
                fatal.message()
            );
            assert_eq!(report.events_checked(), 3);
        }
        let report =
            Report::check_jsonl_read(io::repeat(0), ReadOptions::default(), Retain::Surface).unwrap();
        let fatal = report.fatal.as_ref().expect("an endless header is refused");
        assert_eq!(fatal.code, "header-malformed");
        assert!(fatal.message().contains("at least"), "{}", fatal.message());
    }

    #[test]
    fn reading_ahead_reports_a_failed_read_as_an_error() {
        let bytes = lines(40, None);
        assert!(Report::check_jsonl_read_ahead(bytes.as_slice(), ReadOptions::default(), Retain::Surface)
            .unwrap()
            .is_valid());
        for threads in [0, 1] {
            let options = ReadOptions { decode_threads: threads, ..ReadOptions::default() };
            let error =
                Report::check_jsonl_read_ahead(Failing(&bytes), options, Retain::Surface).unwrap_err();
            assert_eq!(error.to_string(), "disk on fire");
            let error = Report::check_jsonl_read(Failing(&bytes), options, Retain::Surface).unwrap_err();
            assert_eq!(error.to_string(), "disk on fire");
        }
    }

    #[test]
    fn a_replace_records_what_it_shadowed() {
        let c = check(&[
            r#"{"seq":0,"time":0,"type":"context/message","data":{"message":{"id":"a","role":"user","content":[],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
            r#"{"seq":1,"time":0,"type":"context/message","data":{"message":{"id":"b","role":"user","content":[],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
            r#"{"seq":2,"time":0,"type":"context/message","data":{"message":{"id":"c","role":"user","content":[],"source":{"kind":"user"}}},"sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","start":0,"end":1}}"#,
        ]);
        assert!(c.is_valid());
        assert_eq!(c.shadowing.replaces(), [2]);
        assert_eq!((c.shadowing.shadowed_by(0), c.shadowing.shadowed_by(2)), (Some(2), None));
    }
}
