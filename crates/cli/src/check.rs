//! Reading and checking one session for a command: the library's
//! [`Report`] (`palimpsest_invariants::report`) does the checking; this
//! module opens the file, names the session in messages, and turns
//! findings into the CLI's `error[<code>]` lines.
//!
//! Every command that reads a session goes through [`Checked`], so
//! `validate`, `surface`, `derive`, `repair` and `inspect` agree on what a
//! valid log is and report violations the same way.

use palimpsest_core_session::{AppendError, Event, Session, SessionHeader};
use palimpsest_invariants::ReportBuilder;
pub(crate) use palimpsest_invariants::{Finding, Position, Report, Retain};
use palimpsest_persistence::LoadSink;

use crate::error::CliError;

/// How a command shows a [`Finding`], given how the session is named.
pub(crate) trait Shown {
    /// Where: `<origin>:<line>`, or the origin alone.
    fn location(&self, origin: &str) -> String;
    /// What: `seq <n>: <detail>`, or the detail alone.
    fn seq_detail(&self) -> String;
    /// The one stderr line: `error[<code>]: <origin>:<line>: seq <n>: <detail>`.
    fn to_error(&self, origin: &str) -> CliError;
}

impl Shown for Finding {
    fn location(&self, origin: &str) -> String {
        match self.line() {
            Some(line) => format!("{origin}:{line}"),
            None => origin.to_owned(),
        }
    }

    fn seq_detail(&self) -> String {
        seq_detail(self.seq(), &self.detail)
    }

    fn to_error(&self, origin: &str) -> CliError {
        CliError::refused(self.code.clone(), self.location(origin), self.seq_detail())
    }
}

/// `seq <n>: <detail>`, or the detail alone.
pub(crate) fn seq_detail(seq: Option<u64>, detail: &str) -> String {
    match seq {
        Some(seq) => format!("seq {seq}: {detail}"),
        None => detail.to_owned(),
    }
}

/// An append refused outside a reading (a fork's seed, a converted
/// session): `error[<code>]: <origin>: seq <n>: <detail>`.
pub(crate) fn refused(error: &AppendError, origin: &str) -> CliError {
    CliError::refused(error.code(), origin, seq_detail(error.seq(), &error.detail()))
}

/// A session as read and checked, and how to name it.
#[derive(Debug)]
pub(crate) struct Checked {
    /// How to name the session in messages: a path, or a store and an id.
    pub(crate) origin: String,
    /// What was read and found.
    pub(crate) report: Report,
    /// How to name the store in messages, once its checks have run
    /// ([`Checked::add_store`]).
    store_origin: Option<String>,
}

/// Violations of a store as a whole rather than of the session: event rows
/// without a session, seq gaps, damaged pages.
#[derive(Debug)]
pub(crate) struct StoreFindings {
    /// How to name the store in messages.
    pub(crate) origin: String,
    /// What was found, each [`Finding::store`]: of the store as a whole
    /// (damaged pages) or of the session checked.
    pub(crate) findings: Vec<Finding>,
    /// What was found of other sessions of the store (`code: message`):
    /// said, but not the checked session's violations.
    pub(crate) elsewhere: Vec<String>,
}

impl Checked {
    /// `report`, named `origin`.
    pub(crate) fn new(report: Report, origin: String) -> Checked {
        Checked { origin, report, store_origin: None }
    }

    /// Adds what the checks of the store as a whole found (`validate` of a
    /// SQLite store).
    pub(crate) fn add_store(&mut self, store: StoreFindings) {
        self.store_origin = Some(store.origin);
        self.report.store.extend(store.findings);
    }

    /// Whether nothing at all was found.
    pub(crate) fn is_valid(&self) -> bool {
        self.report.is_valid()
    }

    /// How many events were accepted.
    pub(crate) fn events_checked(&self) -> usize {
        self.report.events_checked()
    }

    /// Every violation, in [`Report::violations`]' order.
    pub(crate) fn violations(&self) -> Vec<&Finding> {
        self.report.violations()
    }

    /// [`Checked::violations`], each with how to name where it is: the
    /// session's origin, or the store's for a finding about the whole store
    /// (those come last).
    pub(crate) fn located_violations(&self) -> Vec<(&Finding, &str)> {
        let store = self.store_origin.as_deref().unwrap_or(&self.origin);
        let all = self.report.violations();
        // The store's findings are the last ones.
        let of_session = all.len() - self.report.store.len();
        all.into_iter()
            .enumerate()
            .map(|(i, f)| (f, if i < of_session { self.origin.as_str() } else { store }))
            .collect()
    }

    /// The session, provided sections 1, 2 and 6 hold (what `surface` and
    /// `derive` need); the first violation otherwise.
    pub(crate) fn into_session(self) -> Result<(Session, Vec<Finding>), CliError> {
        let origin = self.origin;
        self.report.into_session().map_err(|f| f.to_error(&origin))
    }
}

/// Checks the bytes of a JSONL session file (contract section 6).
#[cfg(test)]
pub(crate) fn check_jsonl(bytes: &[u8], origin: String) -> Checked {
    Checked::new(Report::check_jsonl(bytes), origin)
}

/// Reads and checks a bare JSONL session file, a piece at a time (the
/// file is never held whole; with [`Retain::Surface`] neither is its log).
/// Only a file that cannot be read at all is an error (`io`, exit 2);
/// everything else is in the result.
pub(crate) fn check_file(path: &std::path::Path, retain: Retain) -> Result<Checked, CliError> {
    let origin = path.display().to_string();
    let cannot = |e: std::io::Error| CliError::io(origin.clone(), format!("cannot read: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    // Read ahead: this binary's allocator (mimalloc) makes it pay.
    let report = Report::check_jsonl_read_ahead(file, Default::default(), retain).map_err(cannot)?;
    Ok(Checked::new(report, origin))
}

/// Checks a session as a store hands it over ([`SessionStore::load_into`]):
/// each event as it is read, keeping what `retain` says.
///
/// [`SessionStore::load_into`]: palimpsest_persistence::SessionStore::load_into
pub(crate) struct CheckSink {
    retain: Retain,
    builder: Option<ReportBuilder>,
    fatal: Option<Finding>,
}

impl CheckSink {
    pub(crate) fn new(retain: Retain) -> CheckSink {
        CheckSink { retain, builder: None, fatal: None }
    }

    /// The report; `None` if the store handed over no header.
    pub(crate) fn finish(self) -> Option<Report> {
        Some(self.builder?.finish(self.fatal))
    }

    /// The load stopped at a stored row that is not a valid event
    /// (`error`, from the store): the report ends there, with that row as
    /// its fatal finding, as a JSONL line with the same fault ends a file's
    /// check. `false` when that cannot be: no header was read, or a check
    /// had already stopped the load.
    pub(crate) fn stopped_at_row(&mut self, error: &palimpsest_core_session::LoadError) -> bool {
        let Some(builder) = self.builder.as_ref() else { return false };
        if self.fatal.is_some() {
            return false;
        }
        self.fatal = Some(Finding::stored_row(error, builder.events_checked()));
        true
    }
}

impl LoadSink for CheckSink {
    fn header(&mut self, header: SessionHeader) -> std::ops::ControlFlow<()> {
        self.builder = Some(ReportBuilder::new(header, self.retain));
        std::ops::ControlFlow::Continue(())
    }

    fn event(&mut self, event: Event) -> std::ops::ControlFlow<()> {
        let Some(builder) = self.builder.as_mut() else { return std::ops::ControlFlow::Break(()) };
        match builder.push(event, None) {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(fatal) => {
                self.fatal = Some(fatal);
                std::ops::ControlFlow::Break(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","version":0,"id":"t","createdAt":0}"#;

    #[test]
    fn a_finding_is_one_error_line_with_its_line_and_seq() {
        let text = format!(
            "{HEADER}\n{}\n{}\n",
            r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#,
            r#"{"seq":2,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        );
        let c = check_jsonl(text.as_bytes(), "t.jsonl".into());
        let line = c.report.fatal.as_ref().map(|f| f.to_error(&c.origin).to_string());
        assert_eq!(
            line.as_deref(),
            Some("error[seq-not-contiguous]: t.jsonl:3: seq 2: expected seq 1, found 2")
        );
    }

    #[test]
    fn store_findings_are_named_by_the_store_and_come_last() {
        let text = format!(
            "{HEADER}\n{}\n",
            r#"{"seq":0,"time":0,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}"#
        );
        let mut c = check_jsonl(text.as_bytes(), "s.db#t".into());
        c.add_store(StoreFindings {
            origin: "s.db".into(),
            findings: vec![Finding::store("store-seq-gap", "a gap")],
            elsewhere: Vec::new(),
        });
        let named: Vec<(&str, &str)> =
            c.located_violations().into_iter().map(|(f, at)| (f.code.as_str(), at)).collect();
        assert_eq!(named, [("turn-end-mismatch", "s.db#t"), ("store-seq-gap", "s.db")]);
        assert!(!c.is_valid());
    }
}
