//! `palimpsest fork STORE [--session ID] --at SEQ [--id NEW]`: a new session
//! whose seed is the parent's events `0..=SEQ`, written to the same store.
//!
//! The child is made by `palimpsest_core_session::fork::fork`: its header
//! names the parent (`parentSession`) and the seed's length (`seedLength`);
//! when SEQ falls inside a turn, the repair closers of contract section 5
//! follow the seed, so the child is valid and resumable. The parent is only
//! read, never written.
//!
//! The child is written whole: one transaction in SQLite, one create and one
//! append in a JSONL store directory (removed again if the append fails). A
//! bare JSONL file holds one session, so a child of it goes beside it, in
//! the file a JSONL store would give it (`<encoded id>.jsonl`).
//!
//! The seed must be valid: a parent whose log breaks a rule or an invariant
//! *after* SEQ can still be forked before the break (that is one way to
//! salvage it), but not at or after it (exit 1). A SEQ past the end is
//! `fork-point-missing` (exit 2, like an unknown session).
//!
//! The new id is printed on stdout. Without `--id` it is
//! `<parent>-fork-<SEQ>`, or `<parent>-fork-<SEQ>-2`, `-3`, ... when that
//! is taken; an `--id` that is taken is `already-exists` (exit 1).

use std::io::{IsTerminal, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use palimpsest_core_session::fork::{fork as fork_session, ForkError};
use palimpsest_core_session::Session;
use palimpsest_invariants as invariants;

use crate::check::{self, Finding, Shown};
use crate::cmd::open_checked;
use crate::error::{CliError, Exit};
use crate::output;
use crate::store_arg::{Store, StoreArgs};

/// How many `-2`, `-3`, ... suffixes a default id tries before giving up.
const MAX_SUFFIX: u32 = 1000;

/// `palimpsest fork`.
pub(crate) fn fork(
    args: &StoreArgs,
    at: u64,
    new_id: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    if new_id == Some("") {
        // Some stores could hold it, a JSONL store cannot name a file for
        // it, and no one can pass it to `--session`: refused everywhere.
        return Err(CliError {
            code: "invalid-id".into(),
            location: String::new(),
            message: "--id is empty; a session id needs at least one character".into(),
            exit: Exit::Usage,
        }
        .into());
    }
    let (target, checked) = open_checked(args, crate::store_arg::Access::Write)?;
    let origin = checked.origin.clone();

    // The seed must be valid: every violation at or before `at` refuses.
    let accepted = checked.events_checked() as u64;
    let blocking: Vec<&Finding> = checked
        .violations()
        .into_iter()
        .filter(|f| match f.seq() {
            Some(seq) => seq <= at,
            // A corrupt line or a bad header stops reading where it is.
            None => at >= accepted,
        })
        .collect();
    if !blocking.is_empty() {
        for f in &blocking {
            output::error_line(&f.to_error(&origin).to_string());
        }
        output::note(&format!(
            "{origin}: the log is invalid at or before seq {at}; a fork's seed must be valid, nothing was written"
        ));
        return Ok(Exit::Invalid);
    }
    let Some(parent) = checked.report.session else {
        return Err(CliError::refused("header-malformed", origin, "no session could be read").into());
    };

    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let store = &target.store;
    let (child, written_to) = match new_id {
        // A bare file's neighbours are named by file, not by header: only
        // this check keeps a fork beside it from taking its parent's id.
        Some(id) if id == parent.id() => {
            return Err(CliError::refused(
                "already-exists",
                origin,
                format!("{id:?} is the id of the session being forked; a fork needs an id of its own"),
            )
            .into());
        }
        Some(id) => {
            let child = make_child(&parent, at, id, now, &origin)?;
            let written_to = store.write_new(child.header(), child.events())?;
            (child, written_to)
        }
        None => write_with_default_id(store, &parent, at, now, &origin)?,
    };
    store.save_checkpoint(&child, &written_to);

    let seed = at + 1;
    let closers = child.events().len() as u64 - seed;
    let closed = match closers {
        0 => String::new(),
        1 => ", then 1 closing event for the open turn".to_owned(),
        n => format!(", then {n} closing events for the open turn"),
    };
    output::note(&format!(
        "forked {:?} after seq {at} into {:?} at {written_to}: {seed} events copied{closed}",
        parent.id(),
        child.id()
    ));
    // The id as it is for a script (`id=$(palimpsest fork ...)`); on a
    // terminal, shown, not obeyed: it comes from the parent's header, and a
    // received log's header may carry escape sequences.
    if std::io::stdout().is_terminal() {
        writeln!(out, "{}", output::printable_line(child.id()))?;
    } else {
        writeln!(out, "{}", child.id())?;
    }
    Ok(Exit::Success)
}

/// Forks, and checks the child's invariants (the closers are built to keep
/// them; a child that broke one would not be written).
fn make_child(parent: &Session, at: u64, id: &str, now: u64, origin: &str) -> Result<Session, CliError> {
    let child = fork_session(parent, at, id, now).map_err(|e| match e {
        ForkError::PointMissing { len, .. } => CliError {
            code: "fork-point-missing".to_owned(),
            location: origin.to_owned(),
            message: format!(
                "there is no seq {at}; the session has {len} events (seq 0 to {})",
                len.saturating_sub(1)
            ),
            exit: Exit::Usage,
        },
        ForkError::Refused(refused) => check::refused(&refused, origin),
        other => CliError::refused(other.code().to_owned(), origin, other.to_string()),
    })?;
    if let Some(v) = invariants::check_log(child.events()).into_iter().next() {
        return Err(CliError::refused(
            v.code,
            origin,
            format!("the fork would break an invariant at seq {}: {}; nothing was written", v.seq, v.message),
        ));
    }
    Ok(child)
}

/// Writes the child under `<parent>-fork-<at>`, or the first free
/// `<parent>-fork-<at>-<n>`. An id taken between the look and the write
/// (another writer) moves on to the next one.
fn write_with_default_id(
    store: &Store,
    parent: &Session,
    at: u64,
    now: u64,
    origin: &str,
) -> Result<(Session, String), CliError> {
    let base = format!("{}-fork-{at}", parent.id());
    for n in 1..=MAX_SUFFIX {
        let id = if n == 1 { base.clone() } else { format!("{base}-{n}") };
        if store.has_session(&id)? {
            continue;
        }
        let child = make_child(parent, at, &id, now, origin)?;
        match store.write_new(child.header(), child.events()) {
            Ok(written_to) => return Ok((child, written_to)),
            Err(e) if e.code == "already-exists" => continue,
            Err(e) => return Err(e),
        }
    }
    Err(CliError::refused(
        "already-exists",
        origin,
        format!("{base} and {MAX_SUFFIX} numbered variants are all taken; name the fork with --id"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::jsonl::JsonlLog;

    fn example() -> Session {
        let text = include_str!("../test_data/ok/compaction-and-prune.jsonl");
        JsonlLog::parse(text.as_bytes())
            .and_then(|l| l.into_session())
            .unwrap_or_else(|e| panic!("the fixture loads: {e}"))
    }

    #[test]
    fn a_point_past_the_end_is_a_usage_error_naming_the_length() {
        let e = make_child(&example(), 27, "c", 0, "x.jsonl").map(|_| ()).unwrap_err();
        assert_eq!((e.code.as_str(), e.exit), ("fork-point-missing", Exit::Usage));
        assert_eq!(e.message, "there is no seq 27; the session has 27 events (seq 0 to 26)");
    }

    #[test]
    fn default_ids_skip_taken_ones() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let store = Store::open_existing(dir.path(), crate::store_arg::Access::Read)
            .unwrap_or_else(|e| panic!("{e}"));
        let parent = example();
        let ids: Vec<String> = (0..3)
            .map(|_| {
                write_with_default_id(&store, &parent, 7, 0, "x")
                    .map(|(c, _)| c.id().to_owned())
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        assert_eq!(ids, ["example-1-fork-7", "example-1-fork-7-2", "example-1-fork-7-3"]);
    }
}
