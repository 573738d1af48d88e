//! Opening a store to write sessions into, from one `--store PATH` flag:
//! a path ending in `.db` is a SQLite database, any other a JSONL store
//! directory. Both are created when missing. Shared by `demo` and `run`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;

/// Opens (creating if needed) the store at `path`.
pub(crate) fn open_store(path: &Path) -> anyhow::Result<Arc<dyn SessionStore>> {
    Ok(if is_sqlite_path(path) {
        Arc::new(
            SqliteStore::open(path)
                .with_context(|| format!("opening the SQLite store {}", path.display()))?,
        )
    } else {
        Arc::new(
            JsonlStore::open(path).with_context(|| format!("opening the JSONL store {}", path.display()))?,
        )
    })
}

/// What kind of store [`open_store`] opens at `path`, for messages.
pub(crate) fn store_kind(path: &Path) -> &'static str {
    if is_sqlite_path(path) {
        "SQLite"
    } else {
        "JSONL directory"
    }
}

fn is_sqlite_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "db")
}
