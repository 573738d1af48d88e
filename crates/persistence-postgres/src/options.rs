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
    /// How many threads a load uses: `0` (the default) for one reading
    /// rows off the socket and one decoding them where the machine has two
    /// cores or more, `1` to decode on the caller's thread only (a server
    /// loading many sessions at once may want that).
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
