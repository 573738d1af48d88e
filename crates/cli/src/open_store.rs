//! Opening the store that `demo` and `run` write sessions into, from one
//! `--store STORE` flag read by [`crate::location`] (contract §7): a SQLite
//! database (`.db`), a PostgreSQL URL or a JSONL store directory, created
//! when missing. A `.jsonl` session file is refused here: these commands
//! write through a [`SessionStore`], which a bare file is not.

use std::path::Path;
use std::sync::Arc;

use palimpsest_persistence::SessionStore;

use crate::error::CliError;
use crate::location::Location;

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

/// Reads `--store STORE`, refusing forms `demo` and `run` cannot write to.
pub(crate) fn writable_location(arg: &Path) -> Result<Location, CliError> {
    let location = Location::parse(arg)?;
    if let Location::JsonlFile(p) = &location {
        return Err(CliError::usage(format!(
            "--store {}: a `.jsonl` STORE is one session file; this command writes to a store: \
             a JSONL directory, a `.db` file or a postgres:// URL",
            p.display()
        )));
    }
    Ok(location)
}

/// Opens (creating if needed) the store `--store STORE` names.
pub(crate) fn open_store(arg: &Path) -> Result<OpenedStore, CliError> {
    let location = writable_location(arg)?;
    match location.open_for_writing()? {
        Some(store) => Ok(OpenedStore { store, location }),
        None => Err(CliError::usage(format!("--store {}: not a store", location.shown()))),
    }
}
