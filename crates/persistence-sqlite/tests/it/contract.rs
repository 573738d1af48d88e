//! The whole `palimpsest-persistence` contract kit, run against a SQLite
//! file: each check gets a fresh temporary database, and "reopen" opens the
//! same file again.

use std::path::PathBuf;

use palimpsest_persistence::testkit::StoreFactory;
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::SqliteStore;
use tempfile::TempDir;

/// A fresh database file in its own temporary directory. SQLite has no torn
/// tails (a commit is whole or absent), so the torn-tail checks skip.
struct SqliteFactory {
    _dir: TempDir,
    path: PathBuf,
}

impl SqliteFactory {
    fn new() -> SqliteFactory {
        let (dir, path) = crate::common::temp_db();
        SqliteFactory { _dir: dir, path }
    }
}

impl StoreFactory for SqliteFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        match SqliteStore::open(&self.path) {
            Ok(store) => Box::new(store),
            Err(e) => panic!("opening {}: {e}", self.path.display()),
        }
    }
}

palimpsest_persistence::store_contract_tests!(SqliteFactory::new());

/// The same checks against an in-memory store (one shared store, since an
/// in-memory database cannot be reopened).
mod in_memory {
    use std::sync::Arc;

    use palimpsest_core_session::{Event, SessionHeader};
    use palimpsest_persistence::testkit::StoreFactory;
    use palimpsest_persistence::{SessionStore, StoreError, StoredSession};
    use palimpsest_persistence_sqlite::SqliteStore;

    #[derive(Debug)]
    struct Shared(Arc<SqliteStore>);

    impl SessionStore for Shared {
        fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
            self.0.create(header)
        }
        fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
            self.0.append(session_id, events)
        }
        fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
            self.0.load(session_id)
        }
        fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
            self.0.list()
        }
        fn delete(&self, session_id: &str) -> Result<(), StoreError> {
            self.0.delete(session_id)
        }
        fn sync(&self, session_id: &str) -> Result<(), StoreError> {
            self.0.sync(session_id)
        }
    }

    struct MemoryFactory(Arc<SqliteStore>);

    impl StoreFactory for MemoryFactory {
        fn open(&self) -> Box<dyn SessionStore> {
            Box::new(Shared(self.0.clone()))
        }
    }

    fn factory() -> MemoryFactory {
        match SqliteStore::open_in_memory() {
            Ok(store) => MemoryFactory(Arc::new(store)),
            Err(e) => panic!("in-memory store: {e}"),
        }
    }

    #[test]
    fn the_whole_kit_passes_in_memory() {
        palimpsest_persistence::testkit::run_all(factory);
    }
}
