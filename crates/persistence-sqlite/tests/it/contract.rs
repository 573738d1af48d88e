//! The whole `palimpsest-persistence` contract kit, run against a SQLite
//! file: each check gets a fresh temporary database, and "reopen" opens the
//! same file again.

use std::path::PathBuf;

use palimpsest_persistence::testkit::{StoreFactory, WriteFault};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::SqliteStore;
use tempfile::TempDir;

/// A fresh database file in its own temporary directory. SQLite has no torn
/// tails (a commit is whole or absent), so the torn-tail checks skip.
struct SqliteFactory {
    _dir: TempDir,
    path: PathBuf,
    fault: WriteFault,
}

impl SqliteFactory {
    fn new() -> SqliteFactory {
        let (dir, path) = crate::common::temp_db();
        SqliteFactory { _dir: dir, path, fault: WriteFault::default() }
    }
}

impl StoreFactory for SqliteFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        match SqliteStore::open(&self.path) {
            Ok(store) => Box::new(store.with_write_fault(self.fault.clone())),
            Err(e) => panic!("opening {}: {e}", self.path.display()),
        }
    }

    fn fail_next_write(&self) -> bool {
        self.fault.arm();
        true
    }
}

palimpsest_persistence::store_contract_tests!(SqliteFactory::new());

/// One size limit for writers and readers: over it nothing is written, at
/// it everything reads back (issue 15).
#[test]
fn size_limits_hold_for_writers_and_readers() {
    palimpsest_persistence::testkit::size_limits_hold_for_writers_and_readers(&SqliteFactory::new());
}

/// The same checks against an in-memory store (one shared store, since an
/// in-memory database cannot be reopened).
mod in_memory {
    use std::sync::Arc;

    use palimpsest_persistence::testkit::StoreFactory;
    use palimpsest_persistence::SessionStore;
    use palimpsest_persistence_sqlite::SqliteStore;

    struct MemoryFactory(Arc<SqliteStore>);

    impl StoreFactory for MemoryFactory {
        fn open(&self) -> Box<dyn SessionStore> {
            Box::new(self.0.clone())
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
