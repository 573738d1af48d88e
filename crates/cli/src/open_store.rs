//! Opening the store that `demo` and `run` write sessions into, from one
//! `--store STORE` flag read by [`crate::location`] (contract §7): a SQLite
//! database (`.db`), a PostgreSQL URL or a JSONL store directory, created
//! when missing; or a `.jsonl` session file, a store of one session
//! ([`palimpsest_persistence_jsonl::JsonlFileStore`]), made as a file by the first session.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::DEFAULT_HOLD_TTL;
use palimpsest_persistence::{Hold, SessionStore, SessionSummary, StoreError};

use crate::error::CliError;
use crate::location::Location;

/// How long a hold on a session lasts unless renewed (the loop renews it
/// every third of it): [`DEFAULT_HOLD_TTL`], or `PALIMPSEST_HOLD_SECS`
/// (tests use a short one to see a takeover), from [`HOLD_SECS`]' bounds.
/// A value that is not a number of seconds in them is the default, with a
/// warning: `u64::MAX` panicked, 1e15 failed every write (a timestamp out
/// of PostgreSQL's range), and a microsecond renewed the hold thousands
/// of times a second.
pub(crate) fn hold_ttl() -> Duration {
    let Ok(given) = std::env::var("PALIMPSEST_HOLD_SECS") else { return DEFAULT_HOLD_TTL };
    match given.trim().parse::<f64>() {
        Ok(secs) if HOLD_SECS.contains(&secs) => Duration::from_secs_f64(secs),
        _ => {
            crate::output::warning(&format!(
                "PALIMPSEST_HOLD_SECS={given:?} is not a number of seconds from {} to {}; holding for the default {} s",
                HOLD_SECS.start(),
                HOLD_SECS.end(),
                DEFAULT_HOLD_TTL.as_secs()
            ));
            DEFAULT_HOLD_TTL
        }
    }
}

/// The hold lengths `PALIMPSEST_HOLD_SECS` may ask for: a tenth of a
/// second to a week.
const HOLD_SECS: std::ops::RangeInclusive<f64> = 0.1..=604_800.0;

/// A store opened for writing, and where it is.
#[derive(Debug, Clone)]
pub(crate) struct OpenedStore {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) location: Location,
}

impl OpenedStore {
    /// How messages name the store (a URL without its password).
    pub(crate) fn shown(&self) -> String {
        self.location.shown()
    }

    /// What kind of store it is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        self.location.kind()
    }
}

/// Who holds a session: `<host>:<pid>:<process tag>`, so `locked` names the
/// worker. The tag tells apart processes of the same host name and pid,
/// as two containers' (each its own pid 1): a hold of the same holder name
/// is taken again, so with `<host>:<pid>` alone the second took over the
/// first's live hold (an outside probe, on PostgreSQL).
pub(crate) fn holder_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}:{}", std::process::id(), process_tag())
}

/// Eight hex digits drawn once per process from the operating system's
/// randomness (std's `RandomState` is seeded from it): what tells this
/// process from another of the same pid, in another container.
pub(crate) fn process_tag() -> &'static str {
    use std::hash::BuildHasher;
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        format!("{:08x}", random as u32)
    })
}

/// Takes this process's hold on `session_id` in `store`, then reads its
/// summary again: what a command about to delete a session it listed
/// earlier (`prune`, a `convert` taking its sessions back) decides on,
/// with no writer able to start meanwhile. The hold is released again when
/// the summary cannot be read; `locked` while a worker holds the session.
pub(crate) fn hold_and_reread(
    store: &dyn SessionStore,
    session_id: &str,
) -> Result<(Option<Hold>, SessionSummary), StoreError> {
    let hold = store.hold(session_id, &holder_name(), hold_ttl())?;
    match store.summary(session_id) {
        Ok(summary) => Ok((hold, summary)),
        Err(e) => {
            release_quietly(store, hold);
            Err(e)
        }
    }
}

/// Gives up a hold taken on a session that is kept after all; one that
/// cannot be released expires.
pub(crate) fn release_quietly(store: &dyn SessionStore, hold: Option<Hold>) {
    if let Some(hold) = hold {
        if let Err(e) = store.release(&hold) {
            tracing::debug!(session_id = hold.session_id(), error = %e, "could not release the hold; it expires");
        }
    }
}

/// Reads `--store STORE` (every form can be written to).
pub(crate) fn writable_location(arg: &Path) -> Result<Location, CliError> {
    Location::parse(arg)
}

/// Opens the store `--store STORE` names to resume a session in it: as
/// [`open_store`], but what is not a store yet is refused, not created (a
/// PostgreSQL schema without the store's tables, an empty `.db`), so a
/// resume of a session that cannot be there changes nothing.
pub(crate) fn open_existing_store(arg: &Path) -> Result<OpenedStore, CliError> {
    let location = writable_location(arg)?;
    match &location {
        Location::Postgres(url) => {
            let store: Arc<dyn SessionStore> = Arc::new(Location::connect_postgres(url, false)?);
            return Ok(OpenedStore { store, location });
        }
        Location::Sqlite(path) => {
            let store = Location::open_existing_sqlite(path)
                .map_err(|e| crate::error::from_store(&e, &location.shown()))?;
            let store: Arc<dyn SessionStore> = Arc::new(store);
            return Ok(OpenedStore { store, location });
        }
        Location::JsonlDir(_) | Location::JsonlFile(_) => {}
    }
    open_store(arg)
}

/// Opens (creating if needed) the store `--store STORE` names.
pub(crate) fn open_store(arg: &Path) -> Result<OpenedStore, CliError> {
    let location = writable_location(arg)?;
    if let Location::Postgres(url) = &location {
        let store: Arc<dyn SessionStore> = Arc::new(Location::connect_postgres(url, true)?);
        return Ok(OpenedStore { store, location });
    }
    match location.open_for_writing()? {
        Some(store) => Ok(OpenedStore { store, location }),
        None => Err(CliError::usage(format!("--store {}: not a store", location.shown()))),
    }
}
