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
/// (invalid data, a refused write, a lock held by another process) is exit 1.
/// The message is the error's whole chain, so an `io` error says why.
pub(crate) fn from_store(error: &StoreError, location: &str) -> CliError {
    if let StoreError::Corrupt { location: at, cause: Some(cause), .. } = error {
        let at = if at.is_empty() { location } else { at.as_str() };
        return CliError::refused(cause.code(), at, crate::check::seq_detail(cause.seq(), &cause.detail()));
    }
    let code = error.contract_code().unwrap_or(error.code()).to_owned();
    let exit = match error.code() {
        "io" | "not-found" | "invalid-id" => Exit::Usage,
        _ => Exit::Invalid,
    };
    CliError { code, location: location.to_owned(), message: chain(error), exit }
}

/// Every message of `error`'s chain, outermost first and root cause last,
/// joined by `: `. Each error of the chain tells its own part only (a
/// wrapper shows its source or returns it from `source()`, never both), so
/// each cause appears once. A typed error the CLI knows tells its part
/// without its code ([`own_text`]): the code is `error[<code>]` already.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = own_text(e).unwrap_or_else(|| e.to_string());
        // A context that already quotes its cause (SQLite's reason folded
        // into the context text) does not get it a second time.
        if !parts.iter().any(|p: &String| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// What a typed error the CLI knows says without its code, built from its
/// typed parts (`detail()`, the seq, the line), never cut out of its
/// `Display` (which starts with the code, for logs). `None` for any other
/// error, whose `Display` is its text.
fn own_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use palimpsest_core_agent_loop::LoopError;
    use palimpsest_core_session::{AppendError, LoadError};
    use palimpsest_persistence::DurableError;
    let store = e.downcast_ref::<StoreError>().or_else(|| e.downcast_ref::<Box<StoreError>>().map(|b| &**b));
    if let Some(store) = store {
        return Some(store.detail());
    }
    let append = match e.downcast_ref::<DurableError>() {
        // Transparent: the refusal's own text, and its source is skipped.
        Some(DurableError::Refused(a)) => Some(a),
        _ => e.downcast_ref::<AppendError>(),
    };
    if let Some(a) = append {
        return Some(crate::check::seq_detail(a.seq(), &a.detail()));
    }
    if let Some(l) = e.downcast_ref::<LoadError>() {
        let text = crate::check::seq_detail(l.seq(), &l.detail());
        // A header's line is 1 by definition; its text names no line.
        return Some(match (l, l.line()) {
            (LoadError::LogCorrupt { .. } | LoadError::Rule { .. }, Some(line)) => {
                format!("line {line}: {text}")
            }
            _ => text,
        });
    }
    if let Some(l @ LoopError::PluginAppendForbidden { .. }) = e.downcast_ref::<LoopError>() {
        return Some(l.detail());
    }
    None
}

/// The code and exit status a typed error in a chain gives, if it is one
/// the CLI knows.
fn classify(e: &(dyn std::error::Error + 'static)) -> Option<(String, Exit)> {
    use palimpsest_core_agent_loop::LoopError;
    use palimpsest_core_session::{AppendError, LoadError};
    use palimpsest_persistence::DurableError;
    // Wrappers box their sources (errors are the cold path): a boxed error
    // is a link of its own type in the chain.
    let store = e.downcast_ref::<StoreError>().or_else(|| e.downcast_ref::<Box<StoreError>>().map(|b| &**b));
    if let Some(store) = store {
        let c = from_store(store, "");
        return Some((c.code, c.exit));
    }
    let durable =
        e.downcast_ref::<DurableError>().or_else(|| e.downcast_ref::<Box<DurableError>>().map(|b| &**b));
    if let Some(DurableError::Refused(a)) = durable {
        return Some((a.code().to_owned(), Exit::Invalid));
    }
    if let Some(l @ LoopError::PluginAppendForbidden { .. }) = e.downcast_ref::<LoopError>() {
        return Some((l.code().to_owned(), Exit::Invalid));
    }
    if let Some(a) = e.downcast_ref::<AppendError>() {
        return Some((a.code().to_owned(), Exit::Invalid));
    }
    if let Some(l) = e.downcast_ref::<LoadError>() {
        return Some((l.code().to_owned(), Exit::Invalid));
    }
    None
}

/// Any error as the CLI reports it: the code and exit status of the
/// outermost typed error in its chain (`io`, exit 2, when there is none),
/// and the whole chain once as the message.
pub(crate) fn from_chain(error: &(dyn std::error::Error + 'static), location: &str) -> CliError {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some((code, exit)) = classify(e) {
            let message = chain(error);
            return CliError { code, location: location.to_owned(), message, exit };
        }
        next = e.source();
    }
    CliError::io(location, chain(error))
}

impl fmt::Display for CliError {
    /// `error[<code>]: <location>: <message>`, one line, long values clipped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: ", self.code)?;
        if !self.location.is_empty() {
            write!(f, "{}: ", self.location)?;
        }
        f.write_str(&clip_values(&one_line(&self.message)))
    }
}

impl std::error::Error for CliError {}

/// Any error of a command as its one stderr line and exit status (the
/// tests' view of [`resolve`]).
#[cfg(test)]
pub(crate) fn describe(error: &anyhow::Error) -> (String, Exit) {
    let e = resolve(error);
    (e.to_string(), e.exit)
}

/// The [`CliError`] any error of a command is reported as: a [`CliError`]
/// in the chain as it is (after the contexts around it), else
/// [`from_chain`]. Its `Display` is the stderr line; [`json_line`] the
/// JSON form.
pub(crate) fn resolve(error: &anyhow::Error) -> CliError {
    let links: Vec<&(dyn std::error::Error + 'static)> = error.chain().collect();
    if let Some(at) = links.iter().position(|e| e.is::<CliError>()) {
        if let Some(e) = links[at].downcast_ref::<CliError>() {
            let mut e = e.clone();
            let contexts: Vec<String> = links[..at].iter().map(ToString::to_string).collect();
            if !contexts.is_empty() {
                e.message = format!("{}: {}", contexts.join(": "), e.message);
            }
            return e;
        }
    }
    from_chain(error.as_ref(), "")
}

/// The error as one JSON line for commands whose stdout is JSON:
/// `{"error": {"code": s, "message": s}}`, the message being the stderr
/// line after its `error[<code>]: ` (so it names the location too).
pub(crate) fn json_line(error: &CliError) -> String {
    let line = error.to_string();
    let prefix = format!("error[{}]: ", error.code);
    let message = line.strip_prefix(&prefix).unwrap_or(&line);
    serde_json::json!({"error": {"code": error.code, "message": message}}).to_string()
}

/// Keeps an error on one line: line breaks inside a message become spaces.
pub(crate) fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) {
        text.split(['\n', '\r']).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
    } else {
        text.to_owned()
    }
}

/// How many characters of an echoed value an error shows.
pub(crate) const CLIP_CHARS: usize = 200;

/// Clips the values an error echoes (a quoted `"..."` or `` `...` `` run,
/// or any run without spaces) to [`CLIP_CHARS`] characters, followed by
/// `…` and the value's full size in bytes: a 50 MB malformed value costs
/// a line, not 50 MB of stderr.
pub(crate) fn clip_values(text: &str) -> String {
    if text.len() <= CLIP_CHARS {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len().min(4 * CLIP_CHARS));
    let mut rest = text;
    while !rest.is_empty() {
        let (value_len, quote) = match rest.chars().next() {
            Some(q @ ('"' | '`')) => (quoted_len(rest, q), Some(q)),
            Some(c) if c.is_whitespace() => (c.len_utf8(), None),
            _ => (rest.find(char::is_whitespace).unwrap_or(rest.len()), None),
        };
        let value = &rest[..value_len];
        if value.chars().count() > CLIP_CHARS + 2 {
            let kept: String = value.chars().take(CLIP_CHARS).collect();
            out.push_str(&kept);
            out.push('…');
            if let Some(q) = quote {
                out.push(q);
            }
            // The value's own size, not its quotes'.
            let quotes = if quote.is_some() && value.len() >= 2 { 2 } else { 0 };
            out.push_str(&format!(" ({} bytes)", value.len() - quotes));
        } else {
            out.push_str(value);
        }
        rest = &rest[value_len..];
    }
    out
}

/// The length of a quoted run at the start of `text` (quotes included,
/// backslash escapes skipped); the rest of the text when it never closes.
fn quoted_len(text: &str, quote: char) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            '\\' if quote == '"' && !escaped => escaped = true,
            c if c == quote && !escaped => return i + c.len_utf8(),
            _ => escaped = false,
        }
    }
    text.len()
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
        assert_eq!(
            e.to_string(),
            "error[locked]: a.jsonl: another process (or another open handle) holds session file a.jsonl for writing"
        );
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
    fn a_store_chain_is_printed_once_with_its_root_cause_last() {
        let full = StoreError::io("appending to a.jsonl", std::io::Error::other("No space left on device"));
        let e = from_store(&full, "a.jsonl");
        assert_eq!(e.to_string(), "error[io]: a.jsonl: appending to a.jsonl: No space left on device");
        let wrapped = anyhow::Error::new(full).context("turn 6 failed");
        assert_eq!(
            describe(&wrapped).0,
            "error[io]: turn 6 failed: appending to a.jsonl: No space left on device"
        );
    }

    /// Walks a chain, asserting no error repeats its source's message.
    fn each_cause_once(error: &(dyn std::error::Error + 'static)) {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(source) = e.source() {
                let (outer, inner) = (e.to_string(), source.to_string());
                assert!(!outer.contains(&inner), "{outer:?} repeats its source {inner:?}");
            }
            next = e.source();
        }
    }

    #[test]
    fn no_wrapper_shows_its_source_twice() {
        use palimpsest_core_agent_loop::LoopError;
        use palimpsest_core_session::{AppendError, BatchError, LoadError};
        use palimpsest_persistence::DurableError;
        let rule = || AppendError::SeqNotContiguous { seq: 5, expected: 4 };
        let load = LoadError::Rule { line: Some(6), error: rule() };
        let corrupt = || StoreError::Corrupt {
            location: "a.jsonl:6".into(),
            detail: load.to_string(),
            cause: Some(load.clone()),
        };
        let io = || StoreError::io("appending to a.jsonl", std::io::Error::other("No space left on device"));
        let write = DurableError::Write { seqs: 4..6, source: Box::new(io()) };
        let session = LoopError::Session { session_id: "s".into(), source: Box::new(write) };
        let chained = anyhow::Error::new(session).context("turn 6 failed");
        assert_eq!(
            describe(&chained).0,
            "error[io]: turn 6 failed: session \"s\": writing seqs 4..=5 to the store failed; whether the \
             store holds them is unknown until the session is reopened; the session in memory is unchanged: \
             appending to a.jsonl: No space left on device"
        );
        let errors: Vec<Box<dyn std::error::Error + Send + Sync>> = vec![
            Box::new(load.clone()),
            Box::new(corrupt()),
            Box::new(DurableError::Store(corrupt())),
            Box::new(DurableError::Refused(rule())),
            Box::new(LoopError::Session {
                session_id: "s".into(),
                source: Box::new(DurableError::Store(io())),
            }),
            Box::new(BatchError::Write(io())),
            Box::new(BatchError::<StoreError>::Refused(rule())),
        ];
        for e in &errors {
            each_cause_once(e.as_ref());
        }
        each_cause_once(chained.as_ref());
    }

    #[test]
    fn typed_errors_tell_their_part_without_their_code() {
        use palimpsest_core_session::{AppendError, LoadError};
        use palimpsest_persistence::DurableError;
        let gap = AppendError::SeqNotContiguous { seq: 3, expected: 1 };
        let refused = anyhow::Error::new(DurableError::Refused(gap.clone())).context("turn 2 failed");
        assert_eq!(
            describe(&refused).0,
            "error[seq-not-contiguous]: turn 2 failed: seq 3: expected seq 1, found 3"
        );
        let header = LoadError::HeaderMalformed { detail: "no header".into() };
        assert_eq!(from_chain(&header, "a.jsonl").to_string(), "error[header-malformed]: a.jsonl: no header");
        let rule = LoadError::Rule { line: Some(4), error: gap };
        assert_eq!(from_chain(&rule, "").message, "line 4: seq 3: expected seq 1, found 3");
        let old = StoreError::VersionUnsupported { found: "1".into(), expected: "0".into() };
        assert_eq!(from_chain(&old, "x").message, "found 1, this build reads 0");
    }

    #[test]
    fn long_values_are_clipped_with_their_size() {
        let big = "x".repeat(50_000);
        let line = clip_values(&format!("bad `data`: invalid type: string \"{big}\", expected u64"));
        assert_eq!(
            line,
            format!(
                "bad `data`: invalid type: string \"{}…\" (50000 bytes), expected u64",
                "x".repeat(CLIP_CHARS - 1)
            )
        );
        assert_eq!(clip_values("short \"values\" stay"), "short \"values\" stay");
        let bare = clip_values(&format!("found {big} at the end"));
        assert!(bare.ends_with("… (50000 bytes) at the end") && bare.len() < 400, "{bare}");
    }

    #[test]
    fn the_json_form_has_the_code_and_the_rest_of_the_line() {
        let e = CliError::refused("log-corrupt", "a.jsonl:3", "not \"JSON\"");
        let v: serde_json::Value = serde_json::from_str(&json_line(&e)).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"error": {"code": "log-corrupt", "message": "a.jsonl:3: not \"JSON\""}})
        );
    }

    #[test]
    fn cli_errors_keep_their_exit() {
        let err = anyhow::Error::new(CliError::refused("replace-reversed", "f", "m"));
        assert_eq!(describe(&err).1, Exit::Invalid);
    }
}
