//! Opening the store that `demo` and `run` write sessions into, from one
//! `--store STORE` flag read by [`crate::location`] (contract §7): a SQLite
//! database (`.db`), a PostgreSQL URL or a JSONL store directory, created
//! when missing; or a `.jsonl` session file, a store of one session
//! ([`crate::file_store::FileStore`]), made as a file by the first session.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::{Hold, PgStore};

use crate::error::{from_store, CliError};
use crate::location::Location;

/// How long a hold on a PostgreSQL session lasts unless renewed; it is
/// renewed every third of it. `PALIMPSEST_HOLD_SECS` overrides it (tests
/// use a short one to see a takeover).
const HOLD_TTL: Duration = Duration::from_secs(30);

/// A store opened for writing, and where it is.
#[derive(Debug, Clone)]
pub(crate) struct OpenedStore {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) location: Location,
    /// The same store, when it is PostgreSQL: sessions are held on it.
    postgres: Option<Arc<PgStore>>,
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

    /// Holds session `id` for as long as the returned value lives, so that
    /// no other worker writes it: on PostgreSQL a fenced hold
    /// ([`PgStore::hold`]), renewed in the background and released on drop;
    /// `locked` naming the holder and its expiry if another worker holds it.
    /// JSONL and SQLite need none here: a JSONL session file is locked by
    /// the process writing it, and a second SQLite writer loses every race
    /// with `conflict` (see `docs/scaling.md`).
    pub(crate) fn hold(&self, id: &str) -> Result<Option<SessionHold>, CliError> {
        let Some(pg) = &self.postgres else { return Ok(None) };
        let ttl = std::env::var("PALIMPSEST_HOLD_SECS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(HOLD_TTL, Duration::from_secs_f64);
        let hold = pg
            .hold(id, &holder_name(), ttl)
            .map_err(|e| from_store(&e, &format!("{}#{id}", self.shown())))?;
        tracing::debug!(session_id = id, token = hold.token(), "holding the session");
        let (stop, stopped) = mpsc::channel::<()>();
        let (store, first) = (Arc::clone(pg), hold.clone());
        let renewer = std::thread::spawn(move || {
            let mut hold = first;
            loop {
                match stopped.recv_timeout(ttl / 3) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return hold,
                }
                match store.renew(&hold, ttl) {
                    Ok(renewed) => hold = renewed,
                    Err(e) => {
                        // Appends are fenced whatever happens here: one made
                        // after a takeover is refused with `locked`.
                        tracing::warn!(session_id = %hold.session_id(), error = %e, "could not renew the hold");
                        if e.code() == "locked" {
                            let _ = stopped.recv();
                            return hold;
                        }
                    }
                }
            }
        });
        Ok(Some(SessionHold { store: Arc::clone(pg), stop: Some(stop), renewer: Some(renewer) }))
    }
}

/// A hold on a PostgreSQL session, renewed until dropped, then released.
#[derive(Debug)]
pub(crate) struct SessionHold {
    store: Arc<PgStore>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<Hold>>,
}

impl Drop for SessionHold {
    fn drop(&mut self) {
        drop(self.stop.take());
        let Some(hold) = self.renewer.take().and_then(|t| t.join().ok()) else { return };
        if let Err(e) = self.store.release(&hold) {
            tracing::debug!(session_id = %hold.session_id(), error = %e, "could not release the hold; it expires");
        }
    }
}

/// Who holds a session: `<host>:<pid>`, so `locked` names the worker.
pub(crate) fn holder_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Reads `--store STORE` (every form can be written to).
pub(crate) fn writable_location(arg: &Path) -> Result<Location, CliError> {
    Location::parse(arg)
}

/// Opens (creating if needed) the store `--store STORE` names.
pub(crate) fn open_store(arg: &Path) -> Result<OpenedStore, CliError> {
    let location = writable_location(arg)?;
    if let Location::Postgres(url) = &location {
        let pg = Arc::new(Location::connect_postgres(url, true)?);
        let store: Arc<dyn SessionStore> = pg.clone();
        return Ok(OpenedStore { store, location, postgres: Some(pg) });
    }
    match location.open_for_writing()? {
        Some(store) => Ok(OpenedStore { store, location, postgres: None }),
        None => Err(CliError::usage(format!("--store {}: not a store", location.shown()))),
    }
}
