//! `palimpsest delete STORE [--session ID]` (the session may be left out
//! when STORE holds one) and `palimpsest prune STORE
//! --older-than DURATION`: remove sessions, after asking.
//!
//! Both say what they will remove (id, events, last activity) and ask on
//! the terminal before removing anything; `--yes` skips the question. When
//! stdin is not a terminal and `--yes` is not given, nothing is removed
//! (`usage`, exit 2): a script must say `--yes`. A session held by another
//! worker (PostgreSQL) or locked by another writer (JSONL) is refused with
//! `locked` and kept. A bare session file is deleted as a file.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palimpsest_persistence::Hold;

use crate::error::{CliError, Exit};
use crate::output;
use crate::store_arg::{self, Access, Store, StoreArgs};
use crate::timefmt;

/// One session to remove, as the question shows it.
struct Doomed {
    id: String,
    events: usize,
    last_activity: u64,
    /// When the session was created: a fork's events keep its parent's
    /// times, so its activity is at least its creation.
    created_at: u64,
}

impl Doomed {
    fn describe(&self) -> String {
        format!("{} ({} events, last activity {})", self.id, self.events, timefmt::utc(self.last_activity))
    }
}

/// `palimpsest delete STORE --session ID [--yes]`.
pub(crate) fn delete(args: &StoreArgs, yes: bool, out: &mut dyn Write) -> anyhow::Result<Exit> {
    let target = store_arg::open(args, Access::Write)?;
    // `--session` takes a unique prefix, and the question shows the whole
    // id; but without a question (`--yes`, a script) a deletion takes the
    // whole id only, so that running `delete --session proj --yes` twice
    // never removes `proj-v2` the second time.
    if let (true, Some(wanted), Some(id)) = (yes, &args.session, target.id()) {
        if wanted != id {
            return Err(CliError {
                code: "not-found".into(),
                location: target.store.path().display().to_string(),
                message: format!(
                    "no session is named {wanted:?}; with --yes, `delete` takes a whole id, not a prefix \
                     (did you mean {id:?}?)"
                ),
                exit: Exit::Usage,
            }
            .into());
        }
    }
    let checked = target.check()?;
    let session =
        checked.report.session.as_ref().map(|s| (s.id().to_owned(), s.events().len(), s.last_time()));
    let (id, events, last_activity) =
        session.unwrap_or_else(|| (args.session.clone().unwrap_or_default(), 0, 0));
    let doomed = [Doomed { id, events, last_activity, created_at: 0 }];
    if !confirm(&doomed, yes)? {
        output::note("nothing was deleted");
        return Ok(Exit::Success);
    }
    target.store.delete(&doomed[0].id)?;
    writeln!(out, "deleted {}", crate::output::printable_line(&doomed[0].id))?;
    Ok(Exit::Success)
}

/// `palimpsest prune STORE --older-than DURATION [--yes]`: every session
/// whose last activity is older than DURATION: the later of its last
/// event and its creation, since a fork copies its parent's events with
/// their times, and a fork made today is today's.
pub(crate) fn prune(
    store: &Path,
    older_than: Duration,
    yes: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let store = Store::open_existing(store, Access::Write)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let cutoff = now.saturating_sub(older_than.as_millis() as u64);
    let mut doomed = Vec::new();
    let mut exit = Exit::Success;
    // Summaries, not loads: a few records per session, one read for the
    // whole store where the backend can (a load of each of 10,000
    // sessions took 1.8 s when nothing was old enough).
    for (header, summary) in store.summaries()? {
        let summary = match summary {
            Ok(summary) => summary,
            Err(e) => {
                // One damaged session does not keep the others: it is
                // kept, said so, and the exit says a session was not
                // looked at.
                output::error_line(&e.to_string());
                output::note(&format!(
                    "{}: kept: it cannot be read, so its age is unknown",
                    store.origin(&header.id)
                ));
                exit = Exit::Invalid;
                continue;
            }
        };
        let last_activity = summary.last_activity.map_or(header.created_at, |t| t.max(header.created_at));
        if last_activity < cutoff {
            let events = usize::try_from(summary.events).unwrap_or(usize::MAX);
            doomed.push(Doomed { id: header.id, events, last_activity, created_at: header.created_at });
        }
    }
    if doomed.is_empty() {
        output::note(&format!(
            "no session of {} is older than {}",
            store.path().display(),
            timefmt::utc(cutoff)
        ));
        return Ok(exit);
    }
    if !confirm(&doomed, yes)? {
        output::note("nothing was deleted");
        return Ok(exit);
    }
    // The list may be old by now (a question left open, a long listing):
    // a session a worker wrote to since must not go with it.
    let (doomed, holds) = hold_still_old(&store, doomed, cutoff, &mut exit);
    // Together: a SQLite store deletes them in one transaction, with one
    // pass over its full-text index (one pass each took 172 s for 10,000).
    let ids: Vec<&str> = doomed.iter().map(|d| d.id.as_str()).collect();
    for ((id, outcome), hold) in ids.iter().zip(store.delete_many(&ids)).zip(holds) {
        match outcome {
            Ok(()) => writeln!(out, "deleted {}", crate::output::printable_line(id))?,
            Err(e) => {
                // The others still go: say which one stayed, and why.
                output::error_line(&e.to_string());
                exit = Exit::Invalid;
                if let Some(backend) = store.backend() {
                    crate::open_store::release_quietly(backend, hold);
                }
            }
        }
    }
    Ok(exit)
}

/// Holds each of `doomed` (where the store has holds), then reads its
/// last activity again: what is still older than `cutoff` is returned
/// with its hold, to be deleted before any writer can start on it. A
/// session a worker wrote to since it was listed is kept and said so; one
/// a worker holds now is kept as `locked`, as its deletion would be (and
/// `exit` says a session was not deleted).
///
/// Without the holds, a turn acknowledged between the listing and the
/// deletion was deleted with its session (an outside probe: six of six
/// workers on PostgreSQL).
fn hold_still_old(
    store: &Store,
    doomed: Vec<Doomed>,
    cutoff: u64,
    exit: &mut Exit,
) -> (Vec<Doomed>, Vec<Option<Hold>>) {
    let Some(backend) = store.backend() else {
        // A bare file is deleted under its writer lock, and read by no one
        // else's worker: nothing to hold.
        let holds = doomed.iter().map(|_| None).collect();
        return (doomed, holds);
    };
    let mut still = Vec::with_capacity(doomed.len());
    let mut holds = Vec::with_capacity(doomed.len());
    for d in doomed {
        let origin = store.origin(&d.id);
        match crate::open_store::hold_and_reread(backend, &d.id) {
            Ok((hold, now)) => {
                let last = now.last_activity.map_or(0, |t| t.max(d.created_at));
                if last < cutoff {
                    still.push(d);
                    holds.push(hold);
                } else {
                    output::note(&format!(
                        "{origin}: kept: written to since it was listed (last activity {})",
                        timefmt::utc(last)
                    ));
                    crate::open_store::release_quietly(backend, hold);
                }
            }
            Err(e) => {
                output::error_line(&store.load_error(&e, &d.id, &origin).to_string());
                *exit = Exit::Invalid;
            }
        }
    }
    (still, holds)
}

/// Asks on the terminal whether to remove `doomed`; `yes` answers for it.
fn confirm(doomed: &[Doomed], yes: bool) -> Result<bool, CliError> {
    let list: Vec<String> = doomed.iter().map(Doomed::describe).collect();
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(format!(
            "would delete {}: {}; stdin is not a terminal to ask, so pass --yes",
            plural(doomed.len()),
            list.join(", ")
        )));
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "about to delete {}:", plural(doomed.len()));
    for line in &list {
        let _ = writeln!(err, "  {line}");
    }
    let _ = write!(err, "delete? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| CliError::io("stdin", e.to_string()))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 session".to_owned()
    } else {
        format!("{n} sessions")
    }
}

/// Reads a duration such as `30d`, `12h`, `90m`, `45s` or `2w`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{text:?}: a number then a unit, e.g. 30d, 12h, 90m"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("{text:?}: the unit is one of s, m, h, d, w (e.g. 30d)")),
    };
    n.checked_mul(secs).map(Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_number_and_a_unit() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("3y").is_err());
        assert!(parse_duration("99999999999999999999w").is_err());
    }
}
