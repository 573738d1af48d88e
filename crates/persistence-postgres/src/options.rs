//! [`PgOptions`]: which schema a store lives in, and how long it waits.

use std::time::Duration;

/// How a [`PgStore`](crate::PgStore) is opened.
///
/// ```
/// use std::time::Duration;
/// use palimpsest_persistence_postgres::PgOptions;
///
/// let options = PgOptions { schema: Some("palimpsest".into()), ..PgOptions::default() };
/// assert_eq!(options.lock_timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PgOptions {
    /// The PostgreSQL schema (namespace) holding the store's tables. Every
    /// statement names it explicitly, so the store depends on no
    /// session-level `search_path` (it works behind a pooler in transaction
    /// mode). `None` (the default): the connection's `current_schema()`,
    /// usually `public`, resolved once on open. A named schema that does not
    /// exist is created when the store is initialised.
    pub schema: Option<String>,
    /// How long one connection attempt may take (unless the URL sets its
    /// own `connect_timeout`). Default 10 seconds.
    pub connect_timeout: Duration,
    /// How long a write waits for a row lock another writer holds (`SET
    /// LOCAL lock_timeout` in each transaction) before it fails with
    /// `locked`, nothing written. Default 5 seconds.
    pub lock_timeout: Duration,
    /// How long a transaction of this store may sit idle (its process
    /// paused, say) before the server ends it and frees its locks (`SET
    /// LOCAL idle_in_transaction_session_timeout`). Default 30 seconds.
    pub idle_in_transaction_timeout: Duration,
    /// Whether opening a schema without the store's tables creates them.
    /// Default `true`; `false` for a reader that must change nothing (the
    /// command line's reading commands): such a schema is then refused with
    /// `io` (a `NotFound` source), and nothing is created.
    pub create_missing: bool,
    /// How many threads a load uses: `0` (the default) for the store's
    /// choice, which is `1`: rows are decoded on the caller's thread as
    /// they come off the socket; `2` adds a thread that decodes while the
    /// caller reads. Reading a row costs little since the store reads a
    /// load's `COPY` in one pass, so the second thread no longer pays for
    /// its hand-offs: on the 2-core bench machine, with the server on it,
    /// a 10k-event load took 6.6-6.9 ms on one thread against 9.1-9.3 ms
    /// on two (docs/performance.md). A client with cores to spare and a
    /// distant server may still gain from `2`.
    pub decode_threads: usize,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            schema: None,
            connect_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(30),
            create_missing: true,
            decode_threads: 0,
        }
    }
}
