//! `palimpsest convert SRC DST`: copies one session or a whole store between
//! JSONL (a file or a directory), SQLite and PostgreSQL, checking every
//! session on the way.
//!
//! SRC takes the STORE forms of [`crate::store_arg`]; `--session` picks one
//! of its sessions. DST is
//!
//! * a PostgreSQL store when it is a `postgres://` or `postgresql://` URL;
//! * a SQLite database when it ends in `.db` or already is one;
//! * a JSONL session file when it ends in `.jsonl` and SRC names one session
//!   (a `.jsonl` file, `--session`, or a store holding just one);
//! * a JSONL store directory otherwise.
//!
//! Missing destinations are created. The conversion runs in two passes, so a
//! problem is found before anything is written: first every session of SRC
//! is loaded and checked (sections 1, 2 and 6 must hold, as
//! `Session::from_log` requires; broken section-2a invariants are warned
//! about and copied as they are), and DST is searched for sessions that
//! already exist (`already-exists`, exit 1: nothing is overwritten); then
//! each session is loaded again, seeded through `Session::from_log`, and
//! written whole, all or nothing ([`SessionStore::create_with_events`]: one
//! transaction per session in SQLite and PostgreSQL, a file that appears
//! whole in JSONL), synced before the next one. A session the destination
//! refuses only then (an id or a value PostgreSQL cannot hold) ends the
//! conversion, and the sessions it wrote before are deleted again: nothing
//! is converted.
//!
//! Events are written in their canonical form, so JSONL → SQLite → JSONL
//! gives back a canonical file byte for byte. A torn last line of a JSONL
//! source is not copied (it is reported).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_jsonl::SessionFile;

use crate::check::{self, Shown};
use crate::error::{from_store, CliError, Exit};
use crate::location::Location;
use crate::output;
use crate::store_arg::Store;

/// How long a conversion runs before its progress bar appears.
const QUIET_FOR: Duration = Duration::from_millis(300);

/// Where sessions are copied to.
#[derive(Debug)]
enum Dest {
    /// One JSONL session file.
    File(PathBuf),
    /// A directory, database or server.
    Store(Arc<dyn SessionStore>, Location),
}

impl Dest {
    /// Opens (creating if missing) the destination `path`.
    fn open(path: &Path, one_session: bool, sessions: usize) -> Result<Dest, CliError> {
        let location = Location::parse(path)?;
        // A missing file's directories are made, as a missing JSONL
        // directory's are: "missing destinations are created".
        if let Location::JsonlFile(p) | Location::Sqlite(p) = &location {
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::io(location.shown(), format!("making the directory {}: {e}", parent.display()))
                })?;
            }
        }
        if let Location::JsonlFile(p) = &location {
            if !one_session {
                return Err(CliError::usage(format!(
                    "{} names one session file, but the source holds {sessions} sessions; \
                     pick one with --session, or give a directory, a .db file or a postgres:// URL",
                    p.display()
                )));
            }
            return Ok(Dest::File(p.clone()));
        }
        match location.open_for_writing()? {
            Some(store) => Ok(Dest::Store(store, location)),
            None => Err(CliError::usage(format!("{}: not a store", location.shown()))),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Dest::File(_) => "JSONL file",
            Dest::Store(_, location) => location.kind(),
        }
    }

    /// Why the destination cannot take `ids`: what it already holds of
    /// them (a session file is taken whatever it holds), said as it is:
    /// the first few, and how many in all.
    fn taken(&self, ids: &[String], shown: &str) -> Result<Option<String>, CliError> {
        const NAMED: usize = 5;
        match self {
            Dest::File(p) if p.exists() => Ok(Some(crate::store_arg::taken_file(p))),
            Dest::File(_) => Ok(None),
            Dest::Store(s, _) => {
                let there: std::collections::HashSet<String> =
                    s.list().map_err(|e| from_store(&e, shown))?.into_iter().map(|h| h.id).collect();
                let existing: Vec<&String> = ids.iter().filter(|id| there.contains(*id)).collect();
                if existing.is_empty() {
                    return Ok(None);
                }
                let mut named: Vec<String> =
                    existing.iter().take(NAMED).map(|id| format!("{id:?}")).collect();
                if existing.len() > NAMED {
                    named.push(format!("and {} more", existing.len() - NAMED));
                }
                let of = match existing.len() {
                    n if n == ids.len() && n > 1 => format!(" (all {n} sessions of the source)"),
                    1 => String::new(),
                    n => format!(" ({n} of the {} sessions of the source)", ids.len()),
                };
                Ok(Some(format!("the {} already holds {}{of}", self.kind(), named.join(", "))))
            }
        }
    }

    /// Deletes `written` (each session's id and the events this conversion
    /// wrote to it), the sessions written before one failed (new ids:
    /// `taken` found none of them there), and says what is left. Each is
    /// held first and its length read again: one a worker wrote to since
    /// (or holds now) is kept and named, as `prune` keeps it, so a turn
    /// acknowledged meanwhile is never deleted with it.
    fn take_back(&self, written: &[(String, u64)]) -> String {
        let Dest::Store(s, _) = self else { return "nothing was converted".to_owned() };
        if written.is_empty() {
            return "nothing was converted".to_owned();
        }
        let mut kept = Vec::new();
        let mut doomed = Vec::new();
        for (id, events) in written {
            match crate::open_store::hold_and_reread(&**s, id) {
                Ok((_, now)) if now.events == *events => doomed.push(id.as_str()),
                Ok((hold, now)) => {
                    kept.push(format!(
                        "{id:?} (written to since: {} events, {events} converted)",
                        now.events
                    ));
                    crate::open_store::release_quietly(&**s, hold);
                }
                Err(e) => kept.push(format!("{id:?} ({e})")),
            }
        }
        kept.extend(
            doomed
                .iter()
                .zip(s.delete_many(&doomed))
                .filter_map(|(id, outcome)| outcome.err().map(|e| format!("{id:?} ({e})"))),
        );
        match kept.len() {
            0 => format!(
                "nothing was converted (the {} sessions written before were deleted again)",
                written.len()
            ),
            n => format!(
                "{n} of the {} sessions written before {} not deleted again: {}",
                written.len(),
                if n == 1 { "was" } else { "were" },
                kept.join(", ")
            ),
        }
    }

    /// Writes one whole session, durably, all or nothing.
    fn write(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        match self {
            Dest::File(p) => SessionFile::create_with_events(p, header, events)?.sync(),
            Dest::Store(s, _) => s.create_with_events(header, events).and_then(|()| s.sync(&header.id)),
        }
    }
}

/// A progress bar that stays hidden for the first [`QUIET_FOR`], and
/// always when stderr is not a terminal. Once shown it ticks on its own, so
/// a single long session still shows a live spinner and elapsed time.
struct Progress {
    bar: ProgressBar,
    /// Set when the work is done; the timer thread shows nothing after it.
    done: Arc<Mutex<bool>>,
}

impl Progress {
    fn new(len: u64, what: &'static str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        let template = "{spinner} {msg} [{bar:32}] {human_pos}/{human_len} {elapsed}";
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what);
        let done = Arc::new(Mutex::new(false));
        if std::io::stderr().is_terminal() {
            let (bar, done) = (bar.clone(), Arc::clone(&done));
            thread::spawn(move || {
                thread::sleep(QUIET_FOR);
                let done = done.lock().unwrap_or_else(PoisonError::into_inner);
                if !*done {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(120));
                }
            });
        }
        Progress { bar, done }
    }

    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    fn finish(self) {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        *done = true;
        self.bar.finish_and_clear();
    }
}

/// `palimpsest convert SRC DST [--session ID]`.
pub(crate) fn convert(
    src: &Path,
    session: Option<&str>,
    dst: &Path,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let source = Store::open_existing(src, crate::store_arg::Access::Read)?;
    let src_shown = source.path().display().to_string();
    let dst_shown = Location::parse(dst)?.shown();
    // A session file written into the directory store being read would be
    // one of its files under a name that is not its id's: the store would
    // then hold a session it cannot name (an outside probe).
    if let (Store::Dir(_), Location::JsonlFile(file)) = (&source, Location::parse(dst)?) {
        let inside =
            crate::location::canonical_or_planned(&file).and_then(|f| f.parent().map(Path::to_owned));
        if inside.is_some_and(|dir| std::fs::canonicalize(source.path()).is_ok_and(|src| src == dir)) {
            return Err(CliError::usage(format!(
                "{dst_shown} is inside the JSONL directory being converted; write the file elsewhere, \
                 or convert into another directory"
            ))
            .into());
        }
    }
    let mut ids: Vec<String> = source.list()?.into_iter().map(|h| h.id).collect();
    if let Some(wanted) = session {
        if !ids.iter().any(|id| id == wanted) {
            return Err(CliError {
                code: "not-found".into(),
                location: src_shown,
                message: format!("no session {wanted:?} in this {}", source.kind()),
                exit: Exit::Usage,
            }
            .into());
        }
        ids = vec![wanted.to_owned()];
    }
    // A store holding just one session names it, as for `--session`.
    let one_session = ids.len() == 1;

    // Pass 1: check every session before anything is written.
    let mut total_events = 0u64;
    let progress = Progress::new(ids.len() as u64, "checking");
    for id in &ids {
        let checked = source.check(id)?;
        if let Some(torn) = checked.report.torn_tail {
            output::note(&format!(
                "{}:{}: a torn last line ({} bytes) is not copied",
                checked.origin, torn.line, torn.len
            ));
        }
        if let Some(fatal) = &checked.report.fatal {
            output::note(&format!("{}: invalid sessions are not converted; nothing was written", src_shown));
            return Err(fatal.to_error(&checked.origin).into());
        }
        crate::cmd::warn_invariants(&checked.origin, &checked.report.invariants);
        // What every store refuses to create (an empty id), refused before
        // a new destination is made: a `.db` would be left behind, empty.
        if let Some(header) = checked.report.session.as_ref().map(|s| s.header()) {
            palimpsest_persistence::check_header(header).map_err(|e| {
                output::note(&format!("{}: nothing was converted", dst_shown));
                from_store(&e, &checked.origin)
            })?;
        }
        total_events += checked.events_checked() as u64;
        progress.inc(1);
    }
    progress.finish();

    // Every id must fit the destination before anything is written: a
    // JSONL directory names a file after each (an id SQLite holds may be
    // too long for a file name), and a refused id must not leave the
    // sessions before it written.
    if let Location::JsonlDir(_) = Location::parse(dst)? {
        for id in &ids {
            palimpsest_persistence_jsonl::name::file_name(id).map_err(|e| {
                output::note(&format!("{}: nothing was converted", dst_shown));
                from_store(&e, &dst_shown)
            })?;
        }
    }
    let dest = Dest::open(dst, one_session, ids.len())?;
    if let Some(why) = dest.taken(&ids, &dst_shown)? {
        return Err(
            CliError::refused("already-exists", dst_shown, format!("{why}; nothing was converted")).into()
        );
    }

    // Pass 2: copy.
    let progress = Progress::new(total_events, "copying");
    let mut written: Vec<(String, u64)> = Vec::with_capacity(ids.len());
    for id in &ids {
        let origin = source.origin(id);
        let stored = source.load(id)?;
        let (session, checkpoint) =
            seed_with_checkpoint(stored.header, stored.events).map_err(|e| check::refused(&e, &origin))?;
        let (header, events) = session.into_parts();
        if let Err(e) = dest.write(&header, &events) {
            let mut err = from_store(&e, &dst_shown);
            err.message = format!("writing session {id:?}: {}", err.message);
            // All or nothing, as for a refusal found in pass 1: the
            // sessions this conversion wrote are taken back.
            output::note(&format!("{dst_shown}: {}", dest.take_back(&written)));
            return Err(err.into());
        }
        written.push((id.clone(), events.len() as u64));
        if let Some(checkpoint) = &checkpoint {
            // A writer leaves a checkpoint, so the next open reads the
            // surface, not the log; the copy stands without it.
            let saved = match &dest {
                Dest::Store(s, _) => s.save_checkpoint(&header.id, checkpoint).map(drop),
                Dest::File(p) => palimpsest_persistence_jsonl::sidecar::save(p, &header.id, checkpoint),
            };
            if let Err(e) = saved {
                output::warning(&format!("{}: could not save a checkpoint: {e}", dst_shown));
            }
        }
        progress.inc(events.len() as u64);
    }
    progress.finish();

    let sessions = match ids.len() {
        1 => "1 session".to_owned(),
        n => format!("{n} sessions"),
    };
    writeln!(
        out,
        "converted {sessions} ({total_events} events) from {src_shown} ({}) to {} ({})",
        source.kind(),
        dst_shown,
        dest.kind()
    )?;
    Ok(Exit::Success)
}

/// Seeds `events` into a session, as `Session::from_log` does, and takes a
/// checkpoint at its last turn boundary: the end of the log, or (when the
/// last turn is open, a crash) just before that turn's `turn/start`, so
/// that a resume holds the open turn whole and repairs it from there.
/// `None` for a log with no boundary to take it at (no event before an
/// open first turn).
fn seed_with_checkpoint(
    header: palimpsest_core_session::SessionHeader,
    events: Vec<Event>,
) -> Result<(Session, Option<palimpsest_core_session::Checkpoint>), palimpsest_core_session::AppendError> {
    use palimpsest_core_session::EventType;
    let open_turn_start = events
        .iter()
        .rposition(|e| matches!(e.event_type(), EventType::TurnStart | EventType::TurnEnd))
        .filter(|&i| *events[i].event_type() == EventType::TurnStart);
    let Some(at) = open_turn_start else {
        let session = Session::from_log(header, events)?;
        let checkpoint = Some(session.checkpoint());
        return Ok((session, checkpoint));
    };
    let mut events = events.into_iter();
    let mut session = Session::from_log(header, events.by_ref().take(at).collect())?;
    let checkpoint = (at > 0).then(|| session.checkpoint());
    for event in events {
        session.append(event)?;
    }
    Ok((session, checkpoint))
}

#[cfg(test)]
mod tests {
    use palimpsest_persistence_sqlite::SqliteStore;

    use super::*;

    fn ticks(range: std::ops::Range<u64>) -> Vec<Event> {
        range
            .map(|seq| {
                Event::from_json(&format!(r#"{{"seq":{seq},"time":1,"type":"x/tick","data":{{}}}}"#))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect()
    }

    /// A session a worker wrote to, or holds, after the conversion wrote it
    /// is kept when the conversion takes its sessions back; the others go.
    #[test]
    fn taking_back_keeps_what_a_worker_wrote_to_or_holds_since() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("x.db");
        let store: Arc<dyn SessionStore> =
            Arc::new(SqliteStore::open(&path).unwrap_or_else(|e| panic!("{e}")));
        for id in ["a", "b", "c"] {
            store
                .create_with_events(&SessionHeader::new(id, 0), &ticks(0..2))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // A worker's turn on "b", and a worker holding "c" (its own store).
        let worker = SqliteStore::open(&path).unwrap_or_else(|e| panic!("{e}"));
        worker.append("b", &ticks(2..3)).unwrap_or_else(|e| panic!("{e}"));
        worker.hold("c", "worker-7", Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
        let dest = Dest::Store(Arc::clone(&store), Location::Sqlite(path.clone()));
        let said = dest.take_back(&[("a".into(), 2), ("b".into(), 2), ("c".into(), 2)]);
        assert!(said.starts_with("2 of the 3 sessions written before were not deleted again"), "{said}");
        assert!(said.contains(r#""b" (written to since: 3 events, 2 converted)"#), "{said}");
        assert!(said.contains(r#""c" (locked"#) && said.contains("worker-7"), "{said}");
        let left: Vec<String> =
            store.list().unwrap_or_else(|e| panic!("{e}")).into_iter().map(|h| h.id).collect();
        assert_eq!(left, ["b", "c"]);
    }
}
