//! Shared helpers: the test server, a schema per test, events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use palimpsest_core_session::Event;
use palimpsest_persistence::StoreError;
use palimpsest_persistence_postgres::{PgOptions, PgStore};

/// The environment variable naming the test server.
pub(crate) const URL_VAR: &str = "PALIMPSEST_TEST_PG_URL";

/// The test server's URL.
pub(crate) fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A plain connection to the test server, or `None` (skip) when it cannot
/// be reached outside CI. Under CI an unreachable server fails the test.
pub(crate) fn admin() -> Option<postgres::Client> {
    match postgres::Client::connect(&url(), postgres::NoTls) {
        Ok(client) => Some(client),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("the test PostgreSQL server ({URL_VAR}) cannot be reached, and CI is set: {e}")
        }
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("skipped: no PostgreSQL server at {URL_VAR} ({e}); under CI this fails");
            }
            None
        }
    }
}

/// A schema of one test's own: created on `new`, dropped (with everything
/// in it) on drop.
pub(crate) struct TestSchema {
    pub(crate) name: String,
}

impl TestSchema {
    /// A fresh, empty schema, or `None` (skip) as [`admin`] says.
    pub(crate) fn new() -> Option<TestSchema> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut client = admin()?;
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!(
            "p_{}_{}_{}",
            std::process::id(),
            nanos % 1_000_000_000_000,
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .unwrap_or_else(|e| panic!("create schema: {e}"));
        Some(TestSchema { name })
    }

    /// Options naming this schema.
    pub(crate) fn options(&self) -> PgOptions {
        PgOptions { schema: Some(self.name.clone()), ..PgOptions::default() }
    }

    /// A store in this schema.
    pub(crate) fn store(&self) -> PgStore {
        PgStore::connect_with(&url(), self.options()).unwrap_or_else(|e| panic!("connect: {e}"))
    }

    /// A store in this schema holding session `s` of `n` ticks tagged `a`.
    pub(crate) fn store_of_ticks(&self, n: u64) -> PgStore {
        use palimpsest_persistence::SessionStore;
        let store = self.store();
        store.create(&palimpsest_core_session::SessionHeader::new("s", 1)).unwrap_or_else(|e| panic!("{e}"));
        store.append("s", &ticks(0, n, "a")).unwrap_or_else(|e| panic!("{e}"));
        store
    }

    /// A plain connection whose `search_path` is this schema.
    pub(crate) fn client(&self) -> postgres::Client {
        let mut client = admin().unwrap_or_else(|| panic!("the server went away"));
        client.batch_execute(&format!("SET search_path = {}", self.name)).unwrap_or_else(|e| panic!("{e}"));
        client
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&url(), postgres::NoTls) {
            // Other connections of the test may still be open: end them first.
            let _ = client.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%' AND state = 'idle in transaction'",
                &[&self.name],
            );
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

/// A plugin event tagged `tag`.
pub(crate) fn tick(seq: u64, tag: &str) -> Event {
    let json = format!(r#"{{"seq":{seq},"time":{seq},"type":"test/tick","data":{{"tag":"{tag}"}}}}"#);
    Event::from_json(&json).unwrap_or_else(|e| panic!("test event {json}: {e}"))
}

/// `count` ticks from seq `from`, tagged `tag-i`.
pub(crate) fn ticks(from: u64, count: u64, tag: &str) -> Vec<Event> {
    (0..count).map(|i| tick(from + i, &format!("{tag}-{i}"))).collect()
}

/// The code of a result: `Ok(())` or `Err(code)`.
pub(crate) fn code<T>(r: Result<T, StoreError>) -> Result<(), &'static str> {
    r.map(drop).map_err(|e| e.code())
}
