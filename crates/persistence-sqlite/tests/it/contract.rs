//! The whole `palimpsest-persistence` contract kit, run against a SQLite
//! file: each check gets a fresh temporary database, and "reopen" opens the
//! same file again.

use std::path::PathBuf;

use palimpsest_persistence::testkit::{self, StoreFactory, WriteFault};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::{SqliteOptions, SqliteStore};
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

    /// Cuts the stored checkpoint's JSON text in half, behind the store's
    /// back.
    fn damage_checkpoint(&self, session_id: &str) -> bool {
        let conn = rusqlite::Connection::open(&self.path).expect("raw open");
        let changed = conn
            .execute(
                "UPDATE checkpoints SET checkpoint = substr(checkpoint, 1, length(checkpoint) / 2) \
                 WHERE session_id = ?1",
                [session_id],
            )
            .expect("damage the checkpoint");
        assert_eq!(changed, 1, "damage_checkpoint: no checkpoint of {session_id:?}");
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
        let skipped: Vec<&str> =
            palimpsest_persistence::testkit::run_all(factory).iter().map(|(name, _)| *name).collect();
        // This factory has no fault seam, an in-memory database grants no
        // holds (one store alone reaches it), and SQLite has no torn tails.
        assert_eq!(
            skipped,
            [
                "io_errors_never_store_a_batch_in_part_or_twice",
                "holds_keep_a_second_writer_out",
                "an_expired_hold_is_taken_over_and_its_holder_fenced_out",
                "only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed",
                "torn_tail_is_dropped_reported_and_cut_off_if_supported",
                "unterminated_whole_last_record_is_kept_if_supported",
            ]
        );
    }
}

/// A database opened with a given `decode_threads`.
struct ThreadsFactory {
    _dir: TempDir,
    path: PathBuf,
    threads: usize,
}

impl StoreFactory for ThreadsFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        let options = SqliteOptions { decode_threads: self.threads, ..SqliteOptions::default() };
        match SqliteStore::open_with(&self.path, options) {
            Ok(store) => Box::new(store),
            Err(e) => panic!("opening {}: {e}", self.path.display()),
        }
    }
}

/// The decoding-thread knob changes nothing a reader sees: one thread (no
/// decoder of its own), two and three load, hand over and check alike.
#[test]
fn every_decode_thread_count_reads_the_same() {
    let checks: [(&str, testkit::Check); 3] = [
        ("load_into", testkit::load_into_hands_over_what_load_returns),
        ("round trip", testkit::round_trips_every_core_event_kind),
        ("durable open", testkit::durable_open_revalidates_the_stored_log),
    ];
    for threads in [1, 2, 3] {
        for (name, check) in checks {
            let (dir, path) = crate::common::temp_db();
            let factory = ThreadsFactory { _dir: dir, path, threads };
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&factory))) {
                panic!("{name} with decode_threads {threads}: {panic:?}");
            }
        }
    }
}
