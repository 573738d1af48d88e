//! Reading and checking one session for a command: the header, every rule
//! of contract sections 1, 2 and 6 (stopping at the first violation, as
//! `Session::from_log` does), then the structural invariants of section 2a
//! over the events accepted so far.
//!
//! Every command that reads a session goes through [`Checked`], so
//! `validate`, `surface`, `derive`, `repair` and `inspect` agree on what a
//! valid log is and report violations the same way.

use palimpsest_core_session::explain::Shadowing;
use palimpsest_core_session::jsonl::{JsonlReader, ReadOptions, TornTail};
use palimpsest_core_session::{AppendError, Event, LoadError, Session, SessionHeader, SurfaceOp};

use crate::error::CliError;
use palimpsest_invariants as invariants;

/// One violation, as `validate` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// Stable contract code, e.g. `replace-start-missing`.
    pub(crate) code: String,
    /// The offending event's seq, where there is one.
    pub(crate) seq: Option<u64>,
    /// The 1-based line of a JSONL file (the header is line 1), where known.
    pub(crate) line: Option<u64>,
    /// What was wrong, without the code, seq or line.
    pub(crate) detail: String,
}

impl Finding {
    /// From a section-1/2 refusal of an event read at `line`.
    pub(crate) fn from_append(error: &AppendError, line: Option<u64>) -> Finding {
        Finding { code: error.code().to_owned(), seq: error.seq(), line, detail: error.detail() }
    }

    /// From a file-level load failure (header, corrupt line, or a rule).
    pub(crate) fn from_load(error: &LoadError) -> Finding {
        if let LoadError::Rule { line, error } = error {
            return Finding::from_append(error, *line);
        }
        Finding {
            code: error.code().to_owned(),
            seq: error.seq(),
            line: error.line(),
            detail: error.detail(),
        }
    }

    /// The `message` of `validate --json`: the detail, prefixed with the line
    /// when there is no seq to place it (a corrupt line).
    pub(crate) fn message(&self) -> String {
        match (self.seq, self.line) {
            (None, Some(line)) if !self.code.starts_with("header-") => {
                format!("line {line}: {}", self.detail)
            }
            _ => self.detail.clone(),
        }
    }

    /// Where: `<origin>:<line>`, or the origin alone.
    pub(crate) fn location(&self, origin: &str) -> String {
        match self.line {
            Some(line) => format!("{origin}:{line}"),
            None => origin.to_owned(),
        }
    }

    /// What: `seq <n>: <detail>`, or the detail alone.
    pub(crate) fn seq_detail(&self) -> String {
        match self.seq {
            Some(seq) => format!("seq {seq}: {}", self.detail),
            None => self.detail.clone(),
        }
    }

    /// The one stderr line: `error[<code>]: <origin>:<line>: seq <n>: <detail>`.
    pub(crate) fn to_error(&self, origin: &str) -> CliError {
        CliError::refused(self.code.clone(), self.location(origin), self.seq_detail())
    }
}

/// A session as read and checked.
#[derive(Debug)]
pub(crate) struct Checked {
    /// How to name the session in messages: a path, or a store and an id.
    pub(crate) origin: String,
    /// The accepted prefix of the log (every event up to the first
    /// violation); `None` when the header could not be read.
    pub(crate) session: Option<Session>,
    /// The first violation of sections 1, 2 or 6; checking stopped there.
    pub(crate) fatal: Option<Finding>,
    /// Section-2a violations over the accepted prefix, sorted by seq.
    pub(crate) invariants: Vec<Finding>,
    /// Who shadowed whom in the accepted prefix.
    pub(crate) shadowing: Shadowing,
    /// A torn last line that was dropped (JSONL only).
    pub(crate) torn_tail: Option<TornTail>,
    /// The last line parsed whole but had no `\n` (JSONL only).
    pub(crate) missing_newline: bool,
    /// What the checks of the store as a whole found (`validate` of a
    /// SQLite store), where they ran.
    pub(crate) store: Option<StoreFindings>,
}

/// Violations of a store as a whole rather than of the session: event rows
/// without a session, seq gaps, damaged pages.
#[derive(Debug)]
pub(crate) struct StoreFindings {
    /// How to name the store in messages.
    pub(crate) origin: String,
    /// What was found, each without a seq.
    pub(crate) findings: Vec<Finding>,
}

impl Checked {
    /// Whether nothing at all was found.
    pub(crate) fn is_valid(&self) -> bool {
        self.fatal.is_none() && self.invariants.is_empty() && self.store_findings().is_empty()
    }

    fn store_findings(&self) -> &[Finding] {
        self.store.as_ref().map_or(&[], |s| &s.findings)
    }

    /// How many events were accepted.
    pub(crate) fn events_checked(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.events().len())
    }

    /// Every violation, sorted by seq (those without a seq last), the
    /// section-2 one after invariants at the same seq.
    pub(crate) fn violations(&self) -> Vec<&Finding> {
        self.located_violations().into_iter().map(|(f, _)| f).collect()
    }

    /// [`Checked::violations`], each with how to name where it is: the
    /// session's origin, or the store's for a finding about the whole store
    /// (those come last).
    pub(crate) fn located_violations(&self) -> Vec<(&Finding, &str)> {
        let mut all: Vec<&Finding> = self.invariants.iter().chain(self.fatal.as_ref()).collect();
        all.sort_by_key(|f| (f.seq.is_none(), f.seq));
        let session = all.into_iter().map(|f| (f, self.origin.as_str()));
        let store = self.store.iter().flat_map(|s| s.findings.iter().map(|f| (f, s.origin.as_str())));
        session.chain(store).collect()
    }

    /// The session, provided sections 1, 2 and 6 hold (what `surface` and
    /// `derive` need); the first violation otherwise.
    pub(crate) fn into_session(self) -> Result<(Session, Vec<Finding>), CliError> {
        if let Some(f) = &self.fatal {
            return Err(f.to_error(&self.origin));
        }
        match self.session {
            Some(session) => Ok((session, self.invariants)),
            None => Err(CliError::refused("header-malformed", self.origin, "no session could be read")),
        }
    }
}

/// Builds a [`Checked`] one event at a time.
struct Checker {
    session: Session,
    shadowing: Shadowing,
}

impl Checker {
    fn new(session: Session) -> Checker {
        Checker { session, shadowing: Shadowing::default() }
    }

    /// Appends `event`, recording what it shadows as it goes: the surface
    /// is walked once, by the append.
    fn push(&mut self, event: Event, line: Option<u64>) -> Result<(), Finding> {
        let shadowed = match event.surface_op() {
            Some(op @ SurfaceOp::Replace { .. }) => self.session.view().shadowed_by(op).to_vec(),
            _ => Vec::new(),
        };
        let seq = self.session.append(event).map_err(|error| Finding::from_append(&error, line))?;
        self.shadowing.record(seq, &shadowed);
        Ok(())
    }
}

/// Runs the section-2a checker over `events` (seqs contiguous from 0). In a
/// JSONL file event `seq` sits on line `seq + 2`.
fn invariant_findings(events: &[Event], lines: bool) -> Vec<Finding> {
    let mut found: Vec<Finding> = invariants::check_log(events)
        .into_iter()
        .map(|v| Finding {
            code: v.code.to_owned(),
            seq: Some(v.seq),
            line: lines.then_some(v.seq + 2),
            detail: v.message,
        })
        .collect();
    found.sort_by_key(|f| f.seq);
    found
}

/// Checks the bytes of a JSONL session file (contract section 6).
pub(crate) fn check_jsonl(bytes: &[u8], origin: String) -> Checked {
    let mut reader = match JsonlReader::new(bytes, ReadOptions::default()) {
        Ok(reader) => reader,
        Err(error) => {
            return Checked {
                origin,
                session: None,
                fatal: Some(Finding::from_load(&error)),
                invariants: Vec::new(),
                shadowing: Shadowing::default(),
                torn_tail: None,
                missing_newline: false,
                store: None,
            }
        }
    };
    let mut checker = Checker::new(Session::create(reader.header().clone()));
    let mut fatal = None;
    while let Some(item) = reader.next() {
        let line = reader.line();
        let result = item.map_err(|e| Finding::from_load(&e)).and_then(|e| checker.push(e, Some(line)));
        if let Err(finding) = result {
            fatal = Some(finding);
            break;
        }
    }
    let (torn_tail, missing_newline) = match fatal {
        None => (reader.torn_tail(), reader.missing_newline()),
        Some(_) => (None, false),
    };
    let invariants = invariant_findings(checker.session.events(), true);
    Checked {
        origin,
        session: Some(checker.session),
        fatal,
        invariants,
        shadowing: checker.shadowing,
        torn_tail,
        missing_newline,
        store: None,
    }
}

/// Checks a session loaded from a store: its events are each well-formed
/// already; the rules that relate them are checked here.
pub(crate) fn check_events(header: SessionHeader, events: Vec<Event>, origin: String) -> Checked {
    let mut checker = Checker::new(Session::create(header));
    let mut fatal = None;
    for event in events {
        if let Err(finding) = checker.push(event, None) {
            fatal = Some(finding);
            break;
        }
    }
    let invariants = invariant_findings(checker.session.events(), false);
    Checked {
        origin,
        session: Some(checker.session),
        fatal,
        invariants,
        shadowing: checker.shadowing,
        torn_tail: None,
        missing_newline: false,
        store: None,
    }
}

/// Reads and checks a bare JSONL session file. Only a file that cannot be
/// read at all is an error (`io`, exit 2); everything else is in the result.
pub(crate) fn check_file(path: &std::path::Path) -> Result<Checked, CliError> {
    let origin = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| CliError::io(origin.clone(), format!("cannot read: {e}")))?;
    Ok(check_jsonl(&bytes, origin))
}

#[cfg(test)]
mod tests {
    use palimpsest_core_session::explain::Replaced;

    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"t","createdAt":0}"#;

    fn check(lines: &[&str]) -> Checked {
        let mut text = String::from(HEADER);
        text.push('\n');
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        check_jsonl(text.as_bytes(), "t.jsonl".into())
    }

    #[test]
    fn a_rule_violation_stops_checking_and_keeps_the_prefix() {
        let c = check(&[
            r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":2,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
            r#"{"seq":3,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        ]);
        assert_eq!(c.events_checked(), 1);
        let fatal = c.fatal.as_ref().map(|f| (f.code.as_str(), f.seq, f.line));
        assert_eq!(fatal, Some(("seq-not-contiguous", Some(2), Some(3))));
        assert!(!c.is_valid());
    }

    #[test]
    fn a_corrupt_line_has_no_seq_but_a_line() {
        let c = check(&[r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#, "nope"]);
        let f = c.fatal.as_ref().map(|f| (f.code.clone(), f.seq, f.message()));
        let (code, seq, message) = f.unwrap_or_default();
        assert_eq!((code.as_str(), seq), ("log-corrupt", None));
        assert!(message.starts_with("line 3: not JSON"), "{message}");
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
