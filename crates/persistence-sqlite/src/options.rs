//! [`SqliteOptions`]: how often SQLite fsyncs, and how long a writer waits
//! for another one.

use std::time::Duration;

/// SQLite's `PRAGMA synchronous` in WAL mode: when a commit reaches the disk.
///
/// Whatever the level, [`SessionStore::sync`](palimpsest_persistence::SessionStore::sync)
/// makes every append so far durable, and a crash never leaves a half-written
/// batch: SQLite's WAL only counts a commit whose frames are all there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Synchronous {
    /// `FULL`: every commit fsyncs the WAL. A returned append survives a
    /// power loss; `sync` has nothing left to do.
    Full,
    /// `NORMAL` (the default): commits are written to the WAL but fsynced only
    /// at a checkpoint. A returned append survives a crash of the process; a
    /// power loss can roll back the most recent appends (whole batches, never
    /// part of one). `sync` checkpoints, which fsyncs the WAL and the database.
    #[default]
    Normal,
    /// `OFF`: SQLite never fsyncs on its own. Like `Normal` for a process
    /// crash; a power loss before the next `sync` can lose any appends since
    /// the last one and, as the operating system may write pages out of
    /// order, can corrupt the file. For stores that can be rebuilt. `sync`
    /// raises the level for one checkpoint, so it is still durable.
    Off,
}

impl Synchronous {
    /// The value written to `PRAGMA synchronous`.
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }
}

/// How a [`SqliteStore`](crate::SqliteStore) is opened.
///
/// ```
/// use std::time::Duration;
/// use palimpsest_persistence_sqlite::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions { synchronous: Synchronous::Full, ..SqliteOptions::default() };
/// assert_eq!(options.busy_timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqliteOptions {
    /// When commits are fsynced. Default [`Synchronous::Normal`].
    pub synchronous: Synchronous,
    /// How long an operation waits for a lock another connection (usually
    /// another process) holds before it fails with `locked`: an append,
    /// create or delete waiting for the write lock, a `sync` waiting for its
    /// checkpoint, an open waiting to initialise a new file. Reads never
    /// wait for writers. Default 5 seconds.
    pub busy_timeout: Duration,
    /// How many threads a load uses: `0` (the default) for one reading
    /// rows and one decoding them where the machine has two cores or more,
    /// `1` to decode on the caller's thread only (a server loading many
    /// sessions at once may want that).
    pub decode_threads: usize,
    /// How much of the database file a store opened for reading
    /// ([`SqliteStore::open_read_only`](crate::SqliteStore::open_read_only))
    /// maps into memory, SQLite's `PRAGMA mmap_size`: pages in the first
    /// `map_bytes` of the file are then read where they lie in the
    /// operating system's cache instead of being copied out of it one
    /// `pread` at a time (`palimpsest validate` of a 100k-event store,
    /// which reads every page three times: 134 -> 103 ms). Default 64 MiB;
    /// `0` maps nothing. Stores opened for writing never map.
    ///
    /// Mapped pages count in the process's resident memory (they are the
    /// file's cache pages, shared and reclaimable, but `ps` and `ru_maxrss`
    /// count each connection's mapping): the default bounds that at 64 MiB
    /// a connection, which keeps a reader's resident memory independent of
    /// the store's size. And a file that another program **shrinks** while
    /// it is mapped (outside SQLite's locking: Palimpsest's writers only
    /// ever grow it) ends the reading process with `SIGBUS` instead of an
    /// error; set `0` where that can happen.
    pub map_bytes: u64,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            decode_threads: 0,
            map_bytes: 64 << 20,
        }
    }
}
