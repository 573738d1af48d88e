//! The CLI's errors: every failure carries a stable code and maps to one of
//! the contract's exit codes (section 7).
//!
//! Commands return `anyhow::Result`; a [`CliError`] inside the chain gives
//! the code and the exit status. Anything else is an I/O-class failure
//! (`io`, exit 2).

use std::fmt;
use std::process::ExitCode;

use palimpsest_persistence::StoreError;

/// How a command ended, as the contract's exit codes (section 7) say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: success.
    Success,
    /// 1: the log is invalid or the operation was refused.
    Invalid,
    /// 2: usage or I/O error.
    Usage,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        match exit {
            Exit::Success => ExitCode::SUCCESS,
            Exit::Invalid => ExitCode::from(1),
            Exit::Usage => ExitCode::from(2),
        }
    }
}

/// A failure with a stable code, e.g. `log-corrupt`, `io`, `usage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliError {
    /// The stable code printed as `error[<code>]`.
    pub(crate) code: String,
    /// Where: a path, `path:line`, or a store and session. Empty when none.
    pub(crate) location: String,
    /// What went wrong, for people.
    pub(crate) message: String,
    /// The exit status it maps to.
    pub(crate) exit: Exit,
}

impl CliError {
    /// Exit 1: the log is invalid or the operation was refused.
    pub(crate) fn refused(
        code: impl Into<String>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> CliError {
        CliError {
            code: code.into(),
            location: location.into(),
            message: message.into(),
            exit: Exit::Invalid,
        }
    }

    /// Exit 2: the command line asks for something that cannot be done.
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError { code: "usage".into(), location: String::new(), message: message.into(), exit: Exit::Usage }
    }

    /// Exit 2: the file or store could not be read or written.
    pub(crate) fn io(location: impl Into<String>, message: impl Into<String>) -> CliError {
        CliError { code: "io".into(), location: location.into(), message: message.into(), exit: Exit::Usage }
    }
}

/// A store's error as the CLI reports it. The code is the session-format
/// contract's where there is one (`log-corrupt`, `header-version-unsupported`,
/// ...), else the store's (`locked`, `conflict`, `schema-mismatch`, ...).
/// Unreadable media and unknown sessions or ids are exit 2; everything else
/// (invalid data, a refused write) is exit 1.
pub(crate) fn from_store(error: &StoreError, location: &str) -> CliError {
    if let StoreError::Corrupt { location: at, cause: Some(cause), .. } = error {
        let finding = crate::check::Finding::from_load(cause);
        let at = if at.is_empty() { location } else { at.as_str() };
        return CliError::refused(finding.code.clone(), at, finding.seq_detail());
    }
    let code = error.contract_code().unwrap_or(error.code()).to_owned();
    let text = error.to_string();
    let mut message =
        text.strip_prefix(error.code()).map_or(text.as_str(), |t| t.trim_start_matches(": ")).to_owned();
    // Why, from below: SQLite's or the system's reason, each text once.
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    let exit = match error.code() {
        "io" | "not-found" | "invalid-id" => Exit::Usage,
        _ => Exit::Invalid,
    };
    CliError { code, location: location.to_owned(), message, exit }
}

impl fmt::Display for CliError {
    /// `error[<code>]: <location>: <message>`, one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: ", self.code)?;
        if !self.location.is_empty() {
            write!(f, "{}: ", self.location)?;
        }
        f.write_str(&one_line(&self.message))
    }
}

impl std::error::Error for CliError {}

/// Renders any error of a command as its one stderr line and exit status.
pub(crate) fn describe(error: &anyhow::Error) -> (String, Exit) {
    if let Some(e) = error.downcast_ref::<CliError>() {
        return (e.to_string(), e.exit);
    }
    // Not one of ours: an I/O-class failure with the whole context chain.
    let e = CliError::io("", format!("{error:#}"));
    (e.to_string(), e.exit)
}

/// Keeps an error on one line: line breaks inside a message become spaces.
pub(crate) fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) {
        text.split(['\n', '\r']).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_with_code_and_location() {
        let e = CliError::refused("log-corrupt", "a.jsonl:3", "not JSON:\nexpected value");
        assert_eq!(e.to_string(), "error[log-corrupt]: a.jsonl:3: not JSON: expected value");
        assert_eq!(CliError::io("", "disk full").to_string(), "error[io]: disk full");
    }

    #[test]
    fn foreign_errors_are_io_exit_2() {
        let err = anyhow::Error::new(std::io::Error::other("disk on fire")).context("writing x.jsonl");
        let (line, exit) = describe(&err);
        assert_eq!(line, "error[io]: writing x.jsonl: disk on fire");
        assert_eq!(exit, Exit::Usage);
    }

    #[test]
    fn store_errors_keep_their_code_and_map_to_an_exit() {
        let locked = StoreError::Locked { what: "session file a.jsonl".into() };
        let e = from_store(&locked, "a.jsonl");
        assert_eq!(e.to_string(), "error[locked]: a.jsonl: session file a.jsonl is held by another writer");
        assert_eq!(e.exit, Exit::Invalid);
        let missing = StoreError::NotFound { session_id: "s9".into() };
        assert_eq!(from_store(&missing, "x.db").exit, Exit::Usage);
        let old = StoreError::VersionUnsupported { found: "1".into(), expected: "0".into() };
        assert_eq!(from_store(&old, "x").code, "header-version-unsupported");
    }

    #[test]
    fn a_store_errors_reason_is_shown_once_after_its_context() {
        let inner =
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "Permission denied (os error 13)");
        let e = StoreError::io("reading x.db read-only", inner);
        assert_eq!(
            from_store(&e, "x.db").to_string(),
            "error[io]: x.db: reading x.db read-only: Permission denied (os error 13)"
        );
        let said = StoreError::io("opening x.db: disk full", std::io::Error::other("disk full"));
        assert_eq!(from_store(&said, "x.db").message, "opening x.db: disk full", "not repeated");
    }

    #[test]
    fn cli_errors_keep_their_exit() {
        let err = anyhow::Error::new(CliError::refused("replace-reversed", "f", "m"));
        assert_eq!(describe(&err).1, Exit::Invalid);
    }
}
