//! [`Report`]: read and check one session the way `palimpsest validate`
//! does, with what was found as data.
//!
//! Checking runs in two passes over one reading:
//!
//! 1. the header, then every rule of contract sections 1, 2 and 6, one
//!    event at a time, **stopping at the first violation** (as
//!    `Session::from_log` does): that one is [`Report::fatal`], and the
//!    events before it are the accepted prefix, [`Report::session`];
//! 2. the structural invariants of section 2a ([`check_log`]) over the
//!    accepted prefix: **every** violation, [`Report::invariants`].
//!
//! Positions are typed ([`Position`]): an event's finding always has its
//! seq, and a line only where the log is a file of lines (a JSONL file); a
//! store's rows have seqs, not lines. Only a JSONL file has a torn tail or
//! a missing final newline ([`Report::torn_tail`],
//! [`Report::missing_newline`]).
//!
//! The report serializes (serde) to the object `palimpsest validate --json`
//! prints (contract section 7): see [`Report`]'s `Serialize`.

use palimpsest_core_session::explain::Shadowing;
use palimpsest_core_session::jsonl::{JsonlLog, ReadOptions, TornTail};
use palimpsest_core_session::{AppendError, Event, LoadError, Session, SessionHeader, SurfaceOp};
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::check_log;

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
    /// violation); `None` when the header could not be read.
    pub session: Option<Session>,
    /// The first violation of sections 1, 2 or 6; checking stopped there.
    pub fatal: Option<Finding>,
    /// Section-2a violations over the accepted prefix, sorted by seq.
    pub invariants: Vec<Finding>,
    /// Findings about the store as a whole, added by the caller that
    /// checked it ([`Finding::store`]); none from this crate.
    pub store: Vec<Finding>,
    /// Who shadowed whom in the accepted prefix.
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
    pub fn check_jsonl_with(bytes: &[u8], options: ReadOptions) -> Report {
        // Lines decode on every core (they are independent); the rules that
        // relate events then run in order over the decoded prefix. The
        // first violation is the first of a rule's (on an event of the
        // prefix) and the decoder's (on the line after it), as when each
        // line is decoded and checked in turn.
        let prefix = match JsonlLog::parse_prefix(bytes, options) {
            Ok(prefix) => prefix,
            Err(error) => return Report::unread(Finding::from_load(&error, 1)),
        };
        let mut checker = Checker::new(Session::create(prefix.header));
        // Every line after the header is an event: event `i` is on line `i + 2`.
        let after = prefix.events.len() as u64 + 2;
        let mut fatal = None;
        for (i, event) in prefix.events.into_iter().enumerate() {
            if let Err(finding) = checker.push(event, Some(i as u64 + 2)) {
                fatal = Some(finding);
                break;
            }
        }
        if fatal.is_none() {
            fatal = prefix.error.map(|e| Finding::from_load(&e, after));
        }
        let (torn_tail, missing_newline) = match fatal {
            None => (prefix.torn_tail, prefix.missing_newline),
            Some(_) => (None, false),
        };
        let mut report = checker.finish(fatal);
        report.torn_tail = torn_tail;
        report.missing_newline = missing_newline;
        report
    }

    /// Checks a session loaded from a store: its events are each
    /// well-formed already (section 1); the rules that relate them are
    /// checked here. Findings have seqs and no lines.
    pub fn check_events(header: SessionHeader, events: Vec<Event>) -> Report {
        let mut checker = Checker::new(Session::create(header));
        let mut fatal = None;
        for event in events {
            if let Err(finding) = checker.push(event, None) {
                fatal = Some(finding);
                break;
            }
        }
        checker.finish(fatal)
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
        self.session.as_ref().map_or(0, |s| s.events().len())
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

/// Builds a [`Report`] one event at a time.
struct Checker {
    session: Session,
    shadowing: Shadowing,
    /// The line of each accepted event, by seq (JSONL only).
    lines: Vec<u64>,
}

impl Checker {
    fn new(session: Session) -> Checker {
        Checker { session, shadowing: Shadowing::default(), lines: Vec::new() }
    }

    /// Appends `event`, recording what it shadows as it goes: the surface
    /// is walked once, by the append.
    fn push(&mut self, event: Event, line: Option<u64>) -> Result<(), Finding> {
        let shadowed = match event.surface_op() {
            Some(op @ SurfaceOp::Replace { .. }) => self.session.view().shadowed_by(op).to_vec(),
            _ => Vec::new(),
        };
        let at = event.seq();
        let seq = self.session.append(event).map_err(|error| Finding::refused(&error, at, line))?;
        self.shadowing.record(seq, &shadowed);
        self.lines.extend(line);
        Ok(())
    }

    /// The report: `fatal`, and the section-2a violations of what was
    /// accepted.
    fn finish(self, fatal: Option<Finding>) -> Report {
        // Seqs are contiguous from 0 (rule 9), so an event's index is its seq.
        let line_of = |seq: u64| usize::try_from(seq).ok().and_then(|i| self.lines.get(i)).copied();
        let invariants = check_log(self.session.events())
            .into_iter()
            .map(|v| Finding {
                code: v.code.to_owned(),
                position: Position::Event { seq: v.seq, line: line_of(v.seq) },
                detail: v.message,
            })
            .collect();
        Report {
            session: Some(self.session),
            fatal,
            invariants,
            store: Vec::new(),
            shadowing: self.shadowing,
            torn_tail: None,
            missing_newline: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use palimpsest_core_session::explain::Replaced;

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

    #[test]
    fn a_replace_records_what_it_shadowed() {
        let c = check(&[
            r#"{"seq":0,"time":0,"type":"context/message","data":{"message":{"id":"a","role":"user","content":[],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
            r#"{"seq":1,"time":0,"type":"context/message","data":{"message":{"id":"b","role":"user","content":[],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
            r#"{"seq":2,"time":0,"type":"context/message","data":{"message":{"id":"c","role":"user","content":[],"source":{"kind":"user"}}},"sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","start":0,"end":1}}"#,
        ]);
        assert!(c.is_valid());
        assert_eq!(c.shadowing.replaces(), [Replaced { seq: 2, shadowed: vec![0, 1] }]);
        assert_eq!((c.shadowing.shadowed_by(0), c.shadowing.shadowed_by(2)), (Some(2), None));
    }
}
