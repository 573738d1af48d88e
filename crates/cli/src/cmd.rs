//! The commands: each reads a session through [`crate::check`], then
//! renders. Results go to stdout; errors, warnings and notes to stderr.

use std::io::Write;

use palimpsest_core_session::repair::repair as repair_closers;
use palimpsest_core_session::Session;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::check::{self, Checked, Shown};
use crate::error::Exit;
use crate::output;
use crate::store_arg::{self, Access, StoreArgs, Target};

/// Tells on stderr what the reader forgave: a torn last line, a missing
/// final newline. Neither is a violation.
/// Where every reading command starts: open `STORE [--session ID]`, check
/// the session, and note a dropped torn tail or a missing final newline.
pub(crate) fn open_checked(args: &StoreArgs, access: Access) -> anyhow::Result<(Target, Checked)> {
    let target = store_arg::open(args, access)?;
    let checked = target.check()?;
    report_tail(&checked);
    Ok((target, checked))
}

/// The session of `surface` and `derive`: the whole log streamed through
/// the checks, keeping what these commands show (the surface), not the
/// log. A checkpoint beside the log is not used: it vouches only for the
/// header and the last event it covers, so an event edited or removed
/// behind the store's back before that would go unseen, and the output
/// would be the cache's, not the log's (contract section 1: the log is
/// the only source of truth; `docs/contract-notes.md`, note 22).
fn checked_session(args: &StoreArgs) -> anyhow::Result<Session> {
    let target = store_arg::open(args, Access::Read)?;
    checked_whole(&target)
}

/// [`checked_session`] of an open target.
fn checked_whole(target: &Target) -> anyhow::Result<Session> {
    let checked = target.check_keeping(check::Retain::Surface)?;
    report_tail(&checked);
    readable_session(checked)
}

/// The session of a command that needs sections 1, 2 and 6 to hold (it is
/// refused otherwise); broken invariants are one warning, not a refusal.
pub(crate) fn readable_session(checked: Checked) -> anyhow::Result<Session> {
    let origin = checked.origin.clone();
    let (session, invariants) = checked.into_session()?;
    warn_invariants(&origin, &invariants);
    Ok(session)
}

pub(crate) fn report_tail(checked: &Checked) {
    if let Some(torn) = checked.report.torn_tail {
        torn_note(&checked.origin, torn);
    }
    if checked.report.missing_newline {
        output::note(&format!(
            "{}: the last line has no newline; it is added before the next append",
            checked.origin
        ));
    }
}

/// The note of a torn last line the read dropped.
fn torn_note(origin: &str, torn: palimpsest_core_session::jsonl::TornTail) {
    output::note(&format!(
        "{origin}:{}: dropped a torn last line ({} bytes, no newline); it is cut before the next append",
        torn.line, torn.len
    ));
}

/// Prints every violation as an `error[<code>]` line.
fn report_violations(checked: &Checked) {
    for (finding, origin) in checked.located_violations() {
        output::error_line(&finding.to_error(origin).to_string());
    }
}

/// Warns when a log that sections 1 and 2 accept breaks a section-2a
/// invariant: such a log still has a surface, but `validate` calls it invalid.
pub(crate) fn warn_invariants(origin: &str, found: &[check::Finding]) {
    if let Some(first) = found.first() {
        let more = match found.len() {
            1 => String::new(),
            n => format!(" (and {} more; `palimpsest validate` lists them)", n - 1),
        };
        output::warning(&format!(
            "{}: structural invariant `{}` broken: {}{more}",
            first.location(origin),
            first.code,
            first.seq_detail()
        ));
    }
}

/// `palimpsest validate STORE [--json]`: the session, and for a SQLite
/// store the store as a whole too (`store-orphan-events`, `store-seq-gap`,
/// `store-integrity`: see [`Store::check_store_beside`](crate::store_arg::Store::check_store_beside)).
/// What the audit finds of other sessions only is a warning: it does not
/// make this session invalid.
pub(crate) fn validate(args: &StoreArgs, json: bool, out: &mut dyn Write) -> anyhow::Result<Exit> {
    // The log streams through the checks: memory is bounded by the
    // surface, not the log (issue 18).
    let target = store_arg::open(args, Access::Read)?;
    // A SQLite store is audited as a whole beside the session's check.
    let (checked, store) =
        target.store.check_store_beside(target.id(), || target.check_keeping(check::Retain::Surface));
    let mut checked = checked?;
    report_tail(&checked);
    if let Some(store) = store? {
        for found in &store.elsewhere {
            output::warning(&format!("{}: another session of the store: {found}", store.origin));
        }
        checked.add_store(store);
    }
    report_violations(&checked);
    let violations = checked.violations();
    if json {
        // The object is the library report's serialized form (contract section 7).
        serde_json::to_writer(&mut *out, &checked.report)?;
        writeln!(out)?;
    } else {
        let events = checked.events_checked();
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        let summary = match (&checked.report.session, &checked.report.fatal) {
            (Some(session), None) if violations.is_empty() => {
                format!("valid: {}, {} on the surface", plural(events, "event"), session.surface().len())
            }
            (None, _) => "invalid: the header could not be read".to_owned(),
            (_, Some(fatal)) => format!(
                "invalid: {}; checking stopped at {} after {}",
                plural(violations.len(), "violation"),
                match (fatal.line(), fatal.seq(), &fatal.position) {
                    (Some(line), _, _) => format!("line {line}"),
                    (None, Some(seq), _) => format!("seq {seq}"),
                    (None, None, crate::check::Position::Store) => "a row with no readable seq".to_owned(),
                    (None, None, _) => "the header".to_owned(),
                },
                plural(events, "valid event")
            ),
            _ => format!("invalid: {} in {}", plural(violations.len(), "violation"), plural(events, "event")),
        };
        // The origin names the session: logged text, shown, never obeyed.
        writeln!(out, "{}: {summary}", crate::output::printable_line(&checked.origin))?;
    }
    Ok(if checked.is_valid() { Exit::Success } else { Exit::Invalid })
}

/// `palimpsest surface STORE`: the surface as a JSON array of seqs.
pub(crate) fn surface(args: &StoreArgs, out: &mut dyn Write) -> anyhow::Result<Exit> {
    let session = checked_session(args)?;
    serde_json::to_writer(&mut *out, session.surface())?;
    writeln!(out)?;
    Ok(Exit::Success)
}

/// One element of `derive --provenance`.
#[derive(Serialize)]
struct WithProvenance<'a> {
    seq: u64,
    #[serde(rename = "sourceEventSeqs", skip_serializing_if = "Option::is_none")]
    source_event_seqs: Option<&'a [u64]>,
    message: &'a RawValue,
}

/// `palimpsest derive STORE [--provenance | --request]`: the derived
/// messages, each exactly as logged; or the derived request (contract
/// section 3) on one line, exactly as core-session writes it.
///
/// With `from_checkpoint`, the session as an agent resuming it holds it:
/// from the store's checkpoint and the events after it, in time and memory
/// that follow the surface, not the log
/// ([`Target::resumed`](crate::store_arg::Target::resumed)); the whole
/// log where there is no checkpoint that matches it.
pub(crate) fn derive(
    args: &StoreArgs,
    provenance: bool,
    request: bool,
    from_checkpoint: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let session = if from_checkpoint {
        let target = store_arg::open(args, Access::Read)?;
        match target.resumed()? {
            Some((session, report)) => {
                if let Some(torn) = report.torn_tail {
                    torn_note(&target.origin(), torn);
                }
                session
            }
            None => {
                crate::output::note(&format!(
                    "{}: no checkpoint matches the log; reading the whole log",
                    target.origin()
                ));
                checked_whole(&target)?
            }
        }
    } else {
        checked_session(args)?
    };
    if request {
        writeln!(out, "{}", session.derive_request().to_json())?;
        return Ok(Exit::Success);
    }
    let messages = session.derive_messages();
    if provenance {
        let items = messages.iter().map(|m| {
            let item = WithProvenance { seq: m.seq, source_event_seqs: m.source_event_seqs, message: m.raw };
            serde_json::to_string(&item).unwrap_or_default()
        });
        output::json_lines_array(out, items)?;
    } else {
        output::json_lines_array(out, messages.iter().map(|m| m.raw.get()))?;
    }
    Ok(Exit::Success)
}

/// `palimpsest repair STORE [--write]`: the closers of an interrupted turn
/// (contract section 5) as a JSON array of events.
pub(crate) fn repair(args: &StoreArgs, write: bool, out: &mut dyn Write) -> anyhow::Result<Exit> {
    let access = if write { Access::Write } else { Access::Read };
    let target = store_arg::open(args, access)?;
    // The whole log is checked, as for `surface` and `derive` (a checkpoint
    // is not trusted to stand for it): an invalid log is never appended to.
    // The open turn, all repair needs, stays in a session checked keeping
    // its surface.
    let checked = target.check_keeping(check::Retain::Surface)?;
    report_tail(&checked);
    if !checked.is_valid() {
        report_violations(&checked);
        if write {
            output::note(&format!("{}: an invalid log is not repaired; nothing was written", checked.origin));
        }
        return Ok(Exit::Invalid);
    }
    let origin = checked.origin.clone();
    let (session, _) = checked.into_session()?;
    write_closers(&target, &origin, session, write, out)
}

/// Prints the closers of `session`'s open turn and, with `write`, appends
/// them, then saves a checkpoint of the closed session (a writer's last
/// act, so the next open reads its surface, not its log).
fn write_closers(
    target: &store_arg::Target,
    origin: &str,
    mut session: Session,
    write: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let closers = repair_closers(session.resident());
    if write {
        if closers.is_empty() {
            output::note(&format!("{origin}: nothing to repair; the session is unchanged"));
        } else {
            target.append(&closers)?;
            output::note(&format!("{origin}: appended {} closing events", closers.len()));
            let closed = closers.iter().try_for_each(|e| session.append(e.clone()).map(drop));
            match closed {
                Ok(()) => target.save_checkpoint(&session),
                Err(e) => {
                    tracing::warn!(code = e.code(), error = %e, "the closers did not apply in memory; no checkpoint")
                }
            }
        }
    }
    output::json_lines_array(out, closers.iter().map(|e| e.to_json()))?;
    Ok(Exit::Success)
}

/// `palimpsest inspect STORE`: the timeline. Exit 1 when the log is invalid
/// (everything readable is still shown).
pub(crate) fn inspect(
    args: &StoreArgs,
    color: bool,
    no_pager: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let target = store_arg::open(args, Access::Read)?;
    let checked = target.check_keeping(check::Retain::Surface)?;
    // On a terminal each line is fitted to it and paged as it is made (see
    // `crate::pager`); piped, it goes out as it is. Nothing holds the log.
    crate::pager::paged(out, no_pager, |out| crate::inspect::render(&checked, &target, color, out))?;
    if checked.is_valid() {
        Ok(Exit::Success)
    } else {
        report_violations(&checked);
        Ok(Exit::Invalid)
    }
}
