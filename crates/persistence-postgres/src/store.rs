//! [`PgStore`]: the [`SessionStore`] over one PostgreSQL schema.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use palimpsest_core_session::{Checkpoint, Event, LoadError, SessionHeader};
use palimpsest_persistence::search::HitCollector;
use palimpsest_persistence::{
    check_continues, check_header, CollectSink, LoadReport, LoadSink, Resumable, SearchHit, SearchQuery,
    SessionStore, SessionSummary, StoreError, StoredSession, SummaryPart,
};
#[cfg(not(feature = "tls"))]
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Config, SimpleQueryMessage, SimpleQueryRow};

use crate::codec::{self, Columns};
use crate::conn::{Client, ConnectError};
use crate::copy;
use crate::error::{invalid_input, is_lost, pg_err};
use crate::hold::{self, Hold};
use crate::options::PgOptions;
use crate::schema::{self, quote_ident, quote_literal};
use crate::search;
use crate::tls::TlsParams;
use crate::url::redact_url;
use palimpsest_persistence::hold::{check_fence, check_renewal, grant, HoldRecord};

/// The longest session id the store takes, in bytes: a primary key entry
/// must fit a B-tree page (about 2.7 kB) whatever its content.
pub(crate) const MAX_ID_BYTES: usize = 1024;

/// The planner settings of a load's transaction (`SET LOCAL`, so they end
/// with it). A load reads every row of one session in seq order, which is
/// the primary key's order: an index scan gives the rows in order, as they
/// are read, in memory bounded by a page. Without these the planner, on a
/// table it has no statistics for yet (every new store), picks a bitmap
/// scan and a sort of the whole session: 2.4 times the server's work at
/// 10k events, and a sort of a 1M-event session spills to disk past
/// `work_mem`. They only weigh against the other plans, so a plan the
/// index cannot give still runs.
const LOAD_PLAN: &str =
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off";

/// The fewest events of a batch whose search rows are built on another
/// thread while the server inserts the events: below this, a thread costs
/// more than it hides.
const INDEX_ASIDE_MIN_EVENTS: usize = 256;

/// The `search` rows of `events`: the seqs and terms of those that have one.
fn search_rows(events: &[Event]) -> (Vec<i64>, Vec<Option<String>>) {
    let (mut seqs, mut terms) = (Vec::new(), Vec::new());
    for e in events {
        if let Some(row) = search::index_row(e) {
            seqs.push(codec::to_sql_int(e.seq()));
            terms.push(row);
        }
    }
    (seqs, terms)
}

/// The statements, with the schema name spelled into each.
#[derive(Debug)]
struct Sql {
    insert_session: String,
    select_header: String,
    list: String,
    /// The stored seq bounds and the hold, locking the session row against
    /// delete and the hold row against takeover until the write commits.
    check: String,
    insert_events: String,
    max_seq: String,
    /// `COPY (` the events select `) TO STDOUT (FORMAT binary)`, split
    /// where the session id goes as a literal: `COPY` takes no parameters.
    copy_events: (String, String),
    /// The header select up to the session id, which follows it as a
    /// literal: it is sent after the `BEGIN` in the same simple query.
    load_header: String,
    events_between: String,
    delete_session: String,
    delete_events: String,
    delete_hold: String,
    session_exists: String,
    hold_for_update: String,
    upsert_hold: String,
    renew_hold: String,
    release_hold: String,
    insert_search: String,
    delete_search: String,
    search_candidates: String,
    last_activity: String,
    events_at: String,
    /// A summary's rows: the last event, the last turn bracket and the first
    /// prompt, each tagged (0, 1, 2) in a last column.
    summary: String,
    /// The same rows for each of the sessions whose ids are `$1`, the
    /// session id in an eighth column.
    summaries: String,
    upsert_checkpoint: String,
    select_checkpoint: String,
    delete_checkpoint: String,
    /// The events from seq `$2` on: a resume's tail.
    events_from: String,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        let s = quote_ident(schema);
        // An expiry of 'infinity' (or '-infinity'), written by hand, is a
        // hold that never ends (or ended long ago), not an error: the
        // subtraction is only made of finite times.
        let hold_cols = "holder, token, expires_at, expires_at > clock_timestamp() AS live, \
             CASE WHEN isfinite(expires_at) THEN extract(epoch FROM expires_at - clock_timestamp())::float8 \
             WHEN expires_at > clock_timestamp() THEN 'Infinity'::float8 ELSE '-Infinity'::float8 END AS left_s";
        Sql {
            insert_session: format!(
                "INSERT INTO {s}.sessions (id, created_at, cwd, parent_session, seed_length) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING RETURNING 1"
            ),
            select_header: format!(
                "SELECT created_at, cwd, parent_session, seed_length FROM {s}.sessions WHERE id = $1"
            ),
            list: format!(
                "SELECT id, created_at, cwd, parent_session, seed_length FROM {s}.sessions \
                 ORDER BY id COLLATE \"C\""
            ),
            check: format!(
                "SELECT b.lo, b.hi, h.holder, h.token, h.expires_at, h.live, h.left_s \
                 FROM (SELECT (SELECT min(seq) FROM {s}.events WHERE session_id = $1) AS lo, \
                              (SELECT max(seq) FROM {s}.events WHERE session_id = $1) AS hi \
                       FROM {s}.sessions WHERE id = $1 FOR KEY SHARE) AS b \
                 LEFT JOIN LATERAL (SELECT {hold_cols} FROM {s}.holds WHERE session_id = $1 FOR SHARE) AS h \
                 ON true"
            ),
            insert_events: format!(
                "INSERT INTO {s}.events (session_id, seq, time, type, data, source_event_seqs, surface_op) \
                 SELECT $1, u.* FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], \
                 $6::text[], $7::text[]) AS u"
            ),
            max_seq: format!("SELECT max(seq) FROM {s}.events WHERE session_id = $1"),
            copy_events: (
                format!(
                    "COPY (SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                     WHERE session_id = "
                ),
                " ORDER BY seq) TO STDOUT (FORMAT binary)".to_owned(),
            ),
            load_header: format!(
                "SELECT created_at, cwd, parent_session, seed_length FROM {s}.sessions WHERE id = "
            ),
            events_between: format!(
                "SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                 WHERE session_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq"
            ),
            delete_session: format!("DELETE FROM {s}.sessions WHERE id = $1 RETURNING 1"),
            delete_events: format!("DELETE FROM {s}.events WHERE session_id = $1"),
            delete_hold: format!("DELETE FROM {s}.holds WHERE session_id = $1"),
            session_exists: format!("SELECT 1 FROM {s}.sessions WHERE id = $1 FOR KEY SHARE"),
            hold_for_update: format!(
                "SELECT h.holder, h.token, h.expires_at, h.live, h.left_s, n.now_us \
                 FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us) AS n \
                 LEFT JOIN LATERAL (SELECT {hold_cols} FROM {s}.holds WHERE session_id = $1 FOR UPDATE) AS h \
                 ON true"
            ),
            upsert_hold: format!(
                "INSERT INTO {s}.holds (session_id, holder, token, expires_at) \
                 VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4)) \
                 ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, token = excluded.token, \
                 expires_at = excluded.expires_at RETURNING expires_at"
            ),
            renew_hold: format!(
                "UPDATE {s}.holds SET expires_at = clock_timestamp() + make_interval(secs => $3) \
                 WHERE session_id = $1 AND token = $2 RETURNING expires_at"
            ),
            release_hold: format!(
                "UPDATE {s}.holds SET expires_at = clock_timestamp() WHERE session_id = $1 AND token = $2"
            ),
            insert_search: format!(
                "INSERT INTO {s}.search (session_id, seq, terms) \
                 SELECT $1, u.seq, array_to_tsvector(string_to_array(u.terms, ' ')) \
                 FROM unnest($2::bigint[], $3::text[]) AS u(seq, terms)"
            ),
            delete_search: format!("DELETE FROM {s}.search WHERE session_id = $1"),
            upsert_checkpoint: format!(
                "INSERT INTO {s}.checkpoints (session_id, log_len, checkpoint) VALUES ($1, $2, $3) \
                 ON CONFLICT (session_id) DO UPDATE SET log_len = excluded.log_len, \
                 checkpoint = excluded.checkpoint"
            ),
            select_checkpoint: format!("SELECT log_len, checkpoint FROM {s}.checkpoints WHERE session_id = $1"),
            delete_checkpoint: format!("DELETE FROM {s}.checkpoints WHERE session_id = $1"),
            events_from: format!(
                "SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                 WHERE session_id = $1 AND seq >= $2 ORDER BY seq"
            ),
            search_candidates: format!(
                "SELECT session_id, seq FROM {s}.search WHERE terms @@ $1::tsquery OR terms IS NULL"
            ),
            last_activity: format!(
                "SELECT s.id, (SELECT e.time FROM {s}.events AS e WHERE e.session_id = s.id \
                 ORDER BY e.seq DESC LIMIT 1), s.created_at FROM {s}.sessions AS s WHERE s.id = ANY($1::text[])"
            ),
            events_at: format!(
                "SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                 WHERE session_id = $1 AND seq = ANY($2::bigint[]) ORDER BY seq"
            ),
            summary: format!(
                "(SELECT seq, time, type, data, source_event_seqs, surface_op, 0 FROM {s}.events \
                 WHERE session_id = $1 ORDER BY seq DESC LIMIT 1) \
                 UNION ALL (SELECT seq, time, type, data, source_event_seqs, surface_op, 1 FROM {s}.events \
                 WHERE session_id = $1 AND type IN ('turn/start', 'turn/end') ORDER BY seq DESC LIMIT 1) \
                 UNION ALL (SELECT seq, time, type, data, source_event_seqs, surface_op, 2 FROM {s}.events \
                 WHERE session_id = $1 AND type = 'user/message' ORDER BY seq LIMIT 1)"
            ),
            summaries: format!(
                "SELECT u.*, ids.id FROM unnest($1::text[]) AS ids(id) CROSS JOIN LATERAL (\
                 (SELECT seq, time, type, data, source_event_seqs, surface_op, 0 FROM {s}.events \
                 WHERE session_id = ids.id ORDER BY seq DESC LIMIT 1) \
                 UNION ALL (SELECT seq, time, type, data, source_event_seqs, surface_op, 1 FROM {s}.events \
                 WHERE session_id = ids.id AND type IN ('turn/start', 'turn/end') ORDER BY seq DESC LIMIT 1) \
                 UNION ALL (SELECT seq, time, type, data, source_event_seqs, surface_op, 2 FROM {s}.events \
                 WHERE session_id = ids.id AND type = 'user/message' ORDER BY seq LIMIT 1)) AS u"
            ),
        }
    }
}

/// A [`SessionStore`] keeping every session in the tables of one
/// PostgreSQL schema.
///
/// Opening checks the schema (see the [crate docs](crate)); each append is
/// one transaction, compare-and-append on the primary key `(session_id,
/// seq)`. One connection serves the store behind a mutex, so the store is
/// `Send + Sync`; any number of stores, on any number of machines, may
/// use the same schema. Neither `Debug` nor any error shows the password
/// of the connection string.
///
/// ```no_run
/// use palimpsest_core_session::SessionHeader;
/// use palimpsest_persistence::SessionStore;
/// use palimpsest_persistence_postgres::{PgOptions, PgStore};
///
/// let options = PgOptions { schema: Some("palimpsest".into()), ..PgOptions::default() };
/// let store = PgStore::connect_with("postgres://app:secret@db.example/logs", options)?;
/// store.create(&SessionHeader::new("s1", 1_700_000_000_000))?;
/// assert!(!format!("{store:?}").contains("secret"));
/// # Ok::<(), palimpsest_persistence::StoreError>(())
/// ```
pub struct PgStore {
    inner: Mutex<Inner>,
    config: Config,
    /// What the connection string asks of TLS beyond what `config` holds.
    tls: TlsParams,
    /// The connection string, password redacted: what errors name.
    location: String,
    schema: String,
    options: PgOptions,
    sql: Sql,
    /// `BEGIN` for writes and reads, with this store's timeouts.
    begin_write: String,
    begin_read: String,
    #[cfg(feature = "testkit")]
    write_fault: Option<palimpsest_persistence::testkit::WriteFault>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .field("schema", &self.schema)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// `None` after the connection was lost, until the next operation
    /// connects again.
    client: Option<Client>,
    /// The server process of `client`.
    backend_pid: Option<i32>,
    /// A write whose outcome is unknown (its `COMMIT` was sent, then the
    /// connection was lost, and the server could not be asked since):
    /// every later write first reads it back, and is refused until then.
    pending: Option<PendingWrite>,
    /// The tokens of the holds this store took, by session id.
    holds: HashMap<String, u64>,
}

/// A write to read back.
#[derive(Debug, Clone)]
enum PendingWrite {
    Create(SessionHeader),
    CreateWithEvents(SessionHeader, Vec<Event>),
    Append { session_id: String, events: Vec<Event> },
    Delete(String),
}

/// One write, borrowed.
#[derive(Debug, Clone, Copy)]
enum Write<'a> {
    Create(&'a SessionHeader),
    CreateWithEvents(&'a SessionHeader, &'a [Event]),
    Append { session_id: &'a str, events: &'a [Event] },
    Delete(&'a str),
}

impl Write<'_> {
    fn what(&self) -> &'static str {
        match self {
            Write::Create(_) => "creating a session",
            Write::CreateWithEvents(..) => "creating a whole session",
            Write::Append { .. } => "appending",
            Write::Delete(_) => "deleting a session",
        }
    }

    fn to_pending(self) -> PendingWrite {
        match self {
            Write::Create(h) => PendingWrite::Create(h.clone()),
            Write::CreateWithEvents(h, events) => PendingWrite::CreateWithEvents(h.clone(), events.to_vec()),
            Write::Append { session_id, events } => {
                PendingWrite::Append { session_id: session_id.to_owned(), events: events.to_vec() }
            }
            Write::Delete(id) => PendingWrite::Delete(id.to_owned()),
        }
    }
}

impl PendingWrite {
    fn as_write(&self) -> Write<'_> {
        match self {
            PendingWrite::Create(h) => Write::Create(h),
            PendingWrite::CreateWithEvents(h, events) => Write::CreateWithEvents(h, events),
            PendingWrite::Append { session_id, events } => Write::Append { session_id, events },
            PendingWrite::Delete(id) => Write::Delete(id),
        }
    }
}

/// A failure inside a transaction.
enum TxError {
    /// A refusal decided by the store: roll back, nothing written.
    Refused(StoreError),
    /// A client error.
    Pg(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> TxError {
        TxError::Pg(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> TxError {
        TxError::Refused(e)
    }
}

/// How one attempt at a transaction ended, when it did not commit.
enum Attempt {
    /// Refused by the store, rolled back.
    Refused(StoreError),
    /// Refused by the server, rolled back; the connection is still usable.
    Failed(tokio_postgres::Error),
    /// The connection was lost. `committing`: after `COMMIT` was sent, so
    /// the outcome is unknown; before, the server rolled it back.
    Lost { committing: bool, error: tokio_postgres::Error },
}

/// What reading a write back found.
enum Outcome {
    /// It is stored.
    Landed,
    /// It is not (and nothing of it is).
    NotLanded,
    /// It is not, and it never can be as it stands: another writer got
    /// there first.
    Refused(StoreError),
}

impl PgStore {
    /// Connects to the server at `url` (a `postgres://` or `postgresql://`
    /// URL, or a `key=value` connection string) with the default
    /// [`PgOptions`], and opens the store in the connection's current schema.
    ///
    /// Tables that do not exist are created (schema version
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)); a store of any other
    /// version is refused with `schema-mismatch` naming both versions, and
    /// so are tables of that name that are not a Palimpsest store. A
    /// connection string that cannot be read, or a server that cannot be
    /// reached, is `io`; no error shows the password.
    ///
    /// ```no_run
    /// use palimpsest_persistence_postgres::PgStore;
    ///
    /// let store = PgStore::connect("postgres://postgres@127.0.0.1:5432/test")?;
    /// assert_eq!(store.location(), "postgres://postgres@127.0.0.1:5432/test");
    /// # Ok::<(), palimpsest_persistence::StoreError>(())
    /// ```
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(url, PgOptions::default())
    }

    /// Like [`PgStore::connect`], with options (the schema, timeouts).
    ///
    /// ```no_run
    /// use palimpsest_persistence_postgres::{PgOptions, PgStore};
    ///
    /// let options = PgOptions { schema: Some("tenant_a".into()), ..PgOptions::default() };
    /// let store = PgStore::connect_with("postgres://postgres@127.0.0.1/test", options)?;
    /// assert_eq!(store.schema(), "tenant_a");
    /// # Ok::<(), palimpsest_persistence::StoreError>(())
    /// ```
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        off_the_runtime(|| {
            let location = redact_url(url);
            let url = crate::url::lowercase_scheme(url);
            let (url, tls) = TlsParams::take(&url)
                .map_err(|why| invalid_input(format!("reading the connection string {location}"), why))?;
            let mut config: Config = url.parse().map_err(|e: tokio_postgres::Error| {
                invalid_input(format!("reading the connection string {location}"), e.to_string())
            })?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(options.connect_timeout);
            }
            if config.get_application_name().is_none() {
                config.application_name("palimpsest");
            }
            let (mut client, pid) = connect(&config, &tls, &location)?;
            let schema = match &options.schema {
                Some(s) => s.clone(),
                None => {
                    let (current, path) = client
                        .query_typed_one("SELECT current_schema()::text, current_setting('search_path')", &[])
                        .and_then(|r| Ok((r.try_get::<_, Option<String>>(0)?, r.try_get::<_, String>(1)?)))
                        .map_err(|e| pg_err(e, &location, "the schema", "reading current_schema()"))?;
                    // No schema of the search path exists yet (a URL naming a
                    // new one with `options=-csearch_path=...`): its first
                    // schema is the store's, created by a writer as a schema
                    // named in PgOptions is.
                    current.or_else(|| first_in_search_path(&path)).ok_or_else(|| {
                        invalid_input(
                            format!("opening a store at {location}"),
                            "the connection has no current schema (its search_path is empty): name the \
                             store's schema, in the URL as `options=-csearch_path%3D<schema>`",
                        )
                    })?
                }
            };
            if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
                return Err(invalid_input(
                    format!("opening a store at {location}"),
                    format!("schema name {schema:?} is not a PostgreSQL identifier (1 to 63 bytes, no NUL)"),
                ));
            }
            if let Some(why) = temporary_schema(&schema) {
                return Err(invalid_input(format!("opening a store at {location}"), why));
            }
            let ms = |d: Duration| d.as_millis().clamp(1, i32::MAX as u128);
            let timeouts = format!(
                "SET LOCAL lock_timeout = {}; SET LOCAL idle_in_transaction_session_timeout = {}",
                ms(options.lock_timeout),
                ms(options.idle_in_transaction_timeout)
            );
            let created =
                schema::open_checked(&mut client, &schema, &location, options.create_missing, &timeouts)?;
            tracing::debug!(location = %location, schema = %schema, created, backend_pid = pid, "opened PostgreSQL store");
            Ok(PgStore {
                inner: Mutex::new(Inner {
                    client: Some(client),
                    backend_pid: Some(pid),
                    pending: None,
                    holds: HashMap::new(),
                }),
                config,
                tls,
                sql: Sql::new(&schema),
                begin_write: format!("BEGIN ISOLATION LEVEL READ COMMITTED; {timeouts}"),
                begin_read: format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {timeouts}"),
                location,
                schema,
                options,
                #[cfg(feature = "testkit")]
                write_fault: None,
            })
        })
    }

    /// The connection string, its password replaced by `***`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The PostgreSQL schema holding the store's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    /// The server process id (`pg_backend_pid()`) of the store's
    /// connection, `None` while it has none (after the connection was lost,
    /// until the next operation connects again). For diagnostics: it is
    /// what `pg_stat_activity` and `pg_terminate_backend` take.
    pub fn backend_pid(&self) -> Option<i32> {
        self.lock().backend_pid
    }

    /// Whether an earlier write's outcome is still unknown (the connection
    /// was lost after its `COMMIT` was sent and the server could not be
    /// asked since): while it is, writes are refused with `io`; each one
    /// first tries to read the outcome back.
    pub fn has_unresolved_write(&self) -> bool {
        self.lock().pending.is_some()
    }

    /// Takes the hold on `session_id` for `holder`, for `ttl` by the
    /// server's clock (see [`Hold`] and the crate docs).
    ///
    /// `locked`, naming the holder and when its hold expires, while another
    /// holder's hold is live; `not-found` for a session that does not
    /// exist. A hold that expired (or was released) is taken over with a
    /// new token, fencing out its old holder. A live hold of the same
    /// holder name is taken again with a new token (a restarted holder
    /// fences out its earlier self); this store's own live hold is renewed.
    /// From now on this store's appends to the session are fenced by the
    /// hold's token.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use palimpsest_persistence_postgres::PgStore;
    ///
    /// let a = PgStore::connect("postgres://postgres@127.0.0.1/test")?;
    /// let b = PgStore::connect("postgres://postgres@127.0.0.1/test")?;
    /// a.hold("s1", "worker-a", Duration::from_secs(30))?;
    /// let refused = b.hold("s1", "worker-b", Duration::from_secs(30)).unwrap_err();
    /// assert_eq!(refused.code(), "locked");
    /// assert!(refused.to_string().contains("worker-a"));
    /// # Ok::<(), palimpsest_persistence::StoreError>(())
    /// ```
    pub fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Hold, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            codec::nul_free("holder", holder).map_err(|why| invalid_input("taking a hold", why))?;
            let mut inner = self.lock();
            let ours = inner.holds.get(session_id).copied();
            let hold = self.with_retry(&mut inner, "taking a hold", |store, client| {
                store.write_tx(client, |client| {
                    exists_or_not_found(client, &store.sql.session_exists, session_id)?;
                    let (row, now_us) = read_hold_for_update(client, &store.sql.hold_for_update, session_id)?;
                    let floor = codec::from_sql_int(now_us.max(0));
                    let token =
                        grant(session_id, holder, row.as_ref(), ours, floor).map_err(TxError::Refused)?;
                    let expires_at: SystemTime = client
                        .query_typed_one(
                            &store.sql.upsert_hold,
                            &[
                                (&session_id, Type::TEXT),
                                (&holder, Type::TEXT),
                                (&codec::to_sql_int(token), Type::INT8),
                                (&hold::ttl_seconds(ttl), Type::FLOAT8),
                            ],
                        )?
                        .try_get(0)?;
                    Ok(Hold::new(session_id, holder, token, Some(expires_at)))
                })
            })?;
            inner.holds.insert(session_id.to_owned(), hold.token());
            tracing::debug!(session_id, holder, token = hold.token(), "took hold");
            Ok(hold)
        })
    }

    /// Extends `hold` to `ttl` from now (server clock), keeping its token.
    /// Works on an expired hold nobody took over; `locked` (naming the new
    /// holder) once it was taken over, `not-found` once the session is gone.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use palimpsest_persistence_postgres::PgStore;
    /// # let store = PgStore::connect("postgres://postgres@127.0.0.1/test")?;
    /// let hold = store.hold("s1", "worker-a", Duration::from_secs(30))?;
    /// let renewed = store.renew(&hold, Duration::from_secs(30))?;
    /// assert_eq!(renewed.token(), hold.token());
    /// # Ok::<(), palimpsest_persistence::StoreError>(())
    /// ```
    pub fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        off_the_runtime(|| {
            let mut inner = self.lock();
            let session_id = hold.session_id();
            let ours = inner.holds.get(session_id).copied();
            let renewed = self.with_retry(&mut inner, "renewing a hold", |store, client| {
                store.write_tx(client, |client| {
                    exists_or_not_found(client, &store.sql.session_exists, session_id)?;
                    let (row, _) = read_hold_for_update(client, &store.sql.hold_for_update, session_id)?;
                    check_renewal(session_id, hold.token(), ours, row.as_ref()).map_err(TxError::Refused)?;
                    let expires_at: SystemTime = client
                        .query_typed_one(
                            &store.sql.renew_hold,
                            &[
                                (&session_id, Type::TEXT),
                                (&codec::to_sql_int(hold.token()), Type::INT8),
                                (&hold::ttl_seconds(ttl), Type::FLOAT8),
                            ],
                        )?
                        .try_get(0)?;
                    Ok(hold.renewed(expires_at))
                })
            })?;
            inner.holds.insert(session_id.to_owned(), hold.token());
            Ok(renewed)
        })
    }

    /// Gives `hold` up: it expires now, so another holder may take the
    /// session at once; this store's appends are no longer fenced by it.
    /// Releasing a hold that was taken over, or whose session is gone,
    /// changes nothing and is not an error.
    pub fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        off_the_runtime(|| {
            let mut inner = self.lock();
            let session_id = hold.session_id();
            self.with_retry(&mut inner, "releasing a hold", |store, client| {
                store.write_tx(client, |client| {
                    client.query_typed(
                        &store.sql.release_hold,
                        &[(&session_id, Type::TEXT), (&codec::to_sql_int(hold.token()), Type::INT8)],
                    )?;
                    Ok(())
                })
            })?;
            if inner.holds.get(session_id) == Some(&hold.token()) {
                inner.holds.remove(session_id);
            }
            tracing::debug!(session_id, token = hold.token(), "released hold");
            Ok(())
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held leaves at worst an open
        // transaction on the connection: drop the connection (the server
        // rolls it back) and reconnect.
        self.inner.lock().unwrap_or_else(|p| {
            let mut inner = p.into_inner();
            PgStore::drop_client(&mut inner);
            inner
        })
    }

    /// The connection, connecting again if it was lost.
    fn client<'a>(&self, inner: &'a mut Inner) -> Result<&'a mut Client, StoreError> {
        if inner.client.as_ref().is_some_and(Client::is_closed) {
            PgStore::drop_client(inner);
        }
        if inner.client.is_none() {
            let (client, pid) = connect(&self.config, &self.tls, &self.location)?;
            tracing::info!(location = %self.location, backend_pid = pid, "reconnected");
            inner.client = Some(client);
            inner.backend_pid = Some(pid);
        }
        inner.client.as_mut().ok_or_else(|| invalid_input("connecting", "no connection"))
    }

    fn drop_client(inner: &mut Inner) {
        inner.client = None;
        inner.backend_pid = None;
    }

    /// Runs `f` in one write transaction (with this store's lock and idle
    /// timeouts) and commits it.
    fn write_tx<T>(
        &self,
        client: &mut Client,
        f: impl FnOnce(&mut Client) -> Result<T, TxError>,
    ) -> Result<T, Attempt> {
        self.tx(client, &self.begin_write, f)
    }

    fn tx<T>(
        &self,
        client: &mut Client,
        begin: &str,
        f: impl FnOnce(&mut Client) -> Result<T, TxError>,
    ) -> Result<T, Attempt> {
        self.tx_begun_by(client, |client| client.batch_execute(begin), |client, ()| f(client))
    }

    /// [`tx`](PgStore::tx) whose `BEGIN` is sent by `begin`, which may
    /// read in the same round trip (a simple query of several statements):
    /// what it read is handed to `f`.
    fn tx_begun_by<B, T>(
        &self,
        client: &mut Client,
        begin: impl FnOnce(&mut Client) -> Result<B, tokio_postgres::Error>,
        f: impl FnOnce(&mut Client, B) -> Result<T, TxError>,
    ) -> Result<T, Attempt> {
        let lost_or_failed = |error: tokio_postgres::Error, committing: bool| {
            if is_lost(&error) {
                Attempt::Lost { committing, error }
            } else {
                Attempt::Failed(error)
            }
        };
        let rollback = |client: &mut Client| {
            if let Err(e) = client.batch_execute("ROLLBACK") {
                tracing::debug!(error = %e, "rollback failed; the server rolls back when the connection ends");
            }
        };
        let begun = match begin(client) {
            Ok(begun) => begun,
            Err(e) => {
                // A statement after the `BEGIN` of a simple query failed:
                // the transaction is open, and aborted.
                if !is_lost(&e) {
                    rollback(client);
                }
                return Err(lost_or_failed(e, false));
            }
        };
        match f(client, begun) {
            Ok(value) => {
                client.batch_execute("COMMIT").map_err(|e| lost_or_failed(e, true))?;
                Ok(value)
            }
            Err(TxError::Refused(e)) => {
                rollback(client);
                Err(Attempt::Refused(e))
            }
            Err(TxError::Pg(e)) => {
                if is_lost(&e) {
                    return Err(Attempt::Lost { committing: false, error: e });
                }
                rollback(client);
                Err(Attempt::Failed(e))
            }
        }
    }

    /// Runs an operation that is safe to run again (a read, a hold
    /// operation): after a lost connection it connects again and retries
    /// once.
    fn with_retry<T>(
        &self,
        inner: &mut Inner,
        what: &str,
        mut f: impl FnMut(&PgStore, &mut Client) -> Result<T, Attempt>,
    ) -> Result<T, StoreError> {
        let mut retried = false;
        loop {
            let client = self.client(inner)?;
            match f(self, client) {
                Ok(v) => return Ok(v),
                Err(Attempt::Refused(e)) => return Err(e),
                Err(Attempt::Failed(e)) => return Err(pg_err(e, &self.location, "the store", what)),
                Err(Attempt::Lost { error, .. }) => {
                    PgStore::drop_client(inner);
                    if retried {
                        return Err(pg_err(error, &self.location, "the store", what));
                    }
                    tracing::warn!(location = %self.location, error = %error, what, "connection lost; retrying");
                    retried = true;
                }
            }
        }
    }

    /// Runs one write: first settles any earlier write whose outcome is
    /// unknown, then the write itself; after a lost connection it connects
    /// again and reads the outcome back before anything else is written.
    fn write(&self, write: Write<'_>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        self.settle_pending(&mut inner)?;
        let what = write.what();
        let mut retried = false;
        loop {
            let token = match write {
                Write::Append { session_id, .. } | Write::Delete(session_id) => {
                    inner.holds.get(session_id).copied()
                }
                Write::Create(_) | Write::CreateWithEvents(..) => None,
            };
            let client = self.client(&mut inner)?;
            let attempt = self.attempt(client, write, token);
            #[cfg(feature = "testkit")]
            if attempt.is_ok() && self.write_fault.as_ref().is_some_and(|f| f.take()) {
                // As a connection lost after COMMIT was sent, with the
                // server out of reach: the write did land, and the store
                // does not know it.
                inner.pending = Some(write.to_pending());
                return Err(StoreError::Io {
                    context: format!(
                        "{what} at {}: injected: the connection was lost after COMMIT was sent",
                        self.location
                    ),
                    source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                });
            }
            let error = match attempt {
                Ok(()) => return Ok(()),
                Err(Attempt::Refused(e)) => return Err(e),
                Err(Attempt::Failed(e)) if crate::error::is_constraint(&e) => {
                    // The server refused a row and rolled the transaction
                    // back: nothing was written. This build's rows meet its
                    // own schema's constraints, so the one that refused is
                    // another program's (an outside probe added a unique
                    // index, which was reported as a racing writer).
                    return Err(StoreError::SchemaMismatch {
                        found: format!(
                            "{}, which refused a row while {what} ({}): a constraint this build's \
                             schema does not have; the transaction was rolled back, nothing was written",
                            self.location,
                            e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned())
                        ),
                        expected: format!(
                            "a store of schema version {} that takes every row this build writes",
                            crate::schema::SCHEMA_VERSION
                        ),
                    });
                }
                Err(Attempt::Failed(e)) => {
                    return Err(pg_err(e, &self.location, &describe_target(write), what))
                }
                Err(Attempt::Lost { committing: false, error }) => {
                    PgStore::drop_client(&mut inner);
                    tracing::warn!(location = %self.location, error = %error, what, "connection lost before commit; nothing was written");
                    error
                }
                Err(Attempt::Lost { committing: true, error }) => {
                    PgStore::drop_client(&mut inner);
                    tracing::warn!(location = %self.location, error = %error, what, "connection lost during commit; reading the outcome back");
                    match self.resolve(&mut inner, write) {
                        Ok(Outcome::Landed) => {
                            tracing::info!(what, "the commit whose acknowledgement was lost is stored");
                            return Ok(());
                        }
                        Ok(Outcome::Refused(e)) => return Err(e),
                        Ok(Outcome::NotLanded) => error,
                        Err(unreachable) => {
                            inner.pending = Some(write.to_pending());
                            tracing::error!(location = %self.location, error = %unreachable, what, "outcome unknown; refusing writes until it is read back");
                            return Err(StoreError::Io {
                                context: format!(
                                    "{what} at {}: the connection was lost after COMMIT was sent and the server \
                                     cannot be asked whether it landed; further writes are refused until it can \
                                     (each write tries again) or the store is reopened",
                                    self.location
                                ),
                                source: Box::new(error),
                            });
                        }
                    }
                }
            };
            if retried {
                return Err(StoreError::Io {
                    context: format!(
                        "{what} at {}: the connection was lost twice; nothing was written",
                        self.location
                    ),
                    source: Box::new(error),
                });
            }
            retried = true;
        }
    }

    /// Reads back a write whose outcome is unknown, or refuses while the
    /// server cannot be asked.
    fn settle_pending(&self, inner: &mut Inner) -> Result<(), StoreError> {
        let Some(pending) = inner.pending.take() else { return Ok(()) };
        match self.resolve(inner, pending.as_write()) {
            Ok(outcome) => {
                let landed = matches!(outcome, Outcome::Landed);
                tracing::info!(
                    what = pending.as_write().what(),
                    landed,
                    "read back the write whose outcome was unknown"
                );
                Ok(())
            }
            Err(e) => {
                inner.pending = Some(pending);
                Err(StoreError::Io {
                    context: format!(
                        "{} refuses writes: an earlier write's outcome is unknown and the server cannot be \
                         asked yet; reopen the store or try again",
                        self.location
                    ),
                    source: Box::new(e),
                })
            }
        }
    }

    /// Takes the contract kit's fault switch: when it is armed, the next
    /// write commits and then fails as if the connection had been lost
    /// after `COMMIT` was sent, its outcome unknown (`io`); the next write
    /// reads it back first (feature `testkit`).
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn with_write_fault(mut self, fault: palimpsest_persistence::testkit::WriteFault) -> PgStore {
        self.write_fault = Some(fault);
        self
    }

    /// Connects again and reads back whether `write` is stored.
    fn resolve(&self, inner: &mut Inner, write: Write<'_>) -> Result<Outcome, StoreError> {
        let client = self.client(inner)?;
        let err =
            |e| pg_err(e, &self.location, &describe_target(write), "reading back an unacknowledged write");
        match write {
            Write::Create(header) => self.resolve_header(client, header),
            Write::CreateWithEvents(header, events) => match self.resolve_header(client, header)? {
                // One transaction: the header landed, so did the events,
                // unless another writer created the same session first.
                Outcome::Landed => match self
                    .resolve(inner, Write::Append { session_id: &header.id, events })?
                {
                    Outcome::Landed => Ok(Outcome::Landed),
                    _ => Ok(Outcome::Refused(StoreError::AlreadyExists { session_id: header.id.clone() })),
                },
                other => Ok(other),
            },
            Write::Delete(id) => {
                let row =
                    client.query_typed_opt(&self.sql.select_header, &[(&id, Type::TEXT)]).map_err(err)?;
                Ok(if row.is_none() { Outcome::Landed } else { Outcome::NotLanded })
            }
            Write::Append { session_id, events } => {
                let (Some(first), Some(last)) = (events.first(), events.last()) else {
                    return Ok(Outcome::Landed);
                };
                let rows = client
                    .query_typed(
                        &self.sql.events_between,
                        &[
                            (&session_id, Type::TEXT),
                            (&codec::to_sql_int(first.seq()), Type::INT8),
                            (&codec::to_sql_int(last.seq()), Type::INT8),
                        ],
                    )
                    .map_err(err)?;
                if rows.is_empty() {
                    return Ok(Outcome::NotLanded);
                }
                let stored: Vec<Option<Event>> = rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        codec::read_row(r, None).ok().and_then(|row| row.decode(first.seq() + i as u64).ok())
                    })
                    .collect();
                let same = stored.len() == events.len()
                    && stored.iter().zip(events).all(|(s, e)| s.as_ref() == Some(e));
                if same {
                    return Ok(Outcome::Landed);
                }
                let max: Option<i64> = client
                    .query_typed_one(&self.sql.max_seq, &[(&session_id, Type::TEXT)])
                    .and_then(|r| r.try_get(0))
                    .map_err(err)?;
                Ok(Outcome::Refused(StoreError::Conflict {
                    session_id: session_id.to_owned(),
                    expected: max.map_or(0, |m| codec::from_sql_int(m) + 1),
                    found: first.seq(),
                }))
            }
        }
    }

    /// Whether `header` is stored (a create whose outcome was unknown).
    fn resolve_header(&self, client: &mut Client, header: &SessionHeader) -> Result<Outcome, StoreError> {
        let row =
            client.query_typed_opt(&self.sql.select_header, &[(&header.id, Type::TEXT)]).map_err(|e| {
                pg_err(
                    e,
                    &self.location,
                    &format!("session {:?}", header.id),
                    "reading back an unacknowledged write",
                )
            })?;
        match row {
            None => Ok(Outcome::NotLanded),
            Some(row) => match header_from_row(&header.id, &row, 0) {
                Ok(stored) if stored == *header => Ok(Outcome::Landed),
                _ => Ok(Outcome::Refused(StoreError::AlreadyExists { session_id: header.id.clone() })),
            },
        }
    }

    /// Inside a write transaction: inserts the session row, `already-exists`
    /// if the id is taken.
    fn insert_session(&self, client: &mut Client, header: &SessionHeader) -> Result<(), TxError> {
        let inserted = client.query_typed_opt(
            &self.sql.insert_session,
            &[
                (&header.id, Type::TEXT),
                (&codec::to_sql_int(header.created_at), Type::INT8),
                (&header.cwd, Type::TEXT),
                (&header.parent_session, Type::TEXT),
                (&header.seed_length.map(codec::to_sql_int), Type::INT8),
            ],
        )?;
        match inserted {
            Some(_) => Ok(()),
            None => Err(TxError::Refused(StoreError::AlreadyExists { session_id: header.id.clone() })),
        }
    }

    /// Inside a write transaction: inserts `events` of `session_id` with one
    /// statement.
    fn insert_events(&self, client: &mut Client, session_id: &str, events: &[Event]) -> Result<(), TxError> {
        if events.is_empty() {
            return Ok(());
        }
        let c = Columns::of(events);
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&session_id, Type::TEXT),
            (&c.seq, Type::INT8_ARRAY),
            (&c.time, Type::INT8_ARRAY),
            (&c.event_type, Type::TEXT_ARRAY),
            (&c.data, Type::TEXT_ARRAY),
            (&c.source_event_seqs, Type::TEXT_ARRAY),
            (&c.surface_op, Type::TEXT_ARRAY),
        ];
        // The full-text rows of the messages go in the same transaction.
        // Tokenizing a large batch takes a while (~2 us per event of the
        // benchmark's workload), so it runs on another thread while the
        // server inserts the events, instead of before or after.
        let (inserted, (seqs, terms)) = if events.len() >= INDEX_ASIDE_MIN_EVENTS {
            std::thread::scope(|scope| {
                let aside = std::thread::Builder::new()
                    .name("palimpsest-pg-index".into())
                    .spawn_scoped(scope, || search_rows(events));
                let inserted = client.query_typed(&self.sql.insert_events, &params);
                let rows = match aside {
                    Ok(aside) => aside.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot start a thread; tokenizing after the insert");
                        search_rows(events)
                    }
                };
                (inserted, rows)
            })
        } else {
            (client.query_typed(&self.sql.insert_events, &params), search_rows(events))
        };
        inserted?;
        if !seqs.is_empty() {
            let params: [(&(dyn ToSql + Sync), Type); 3] =
                [(&session_id, Type::TEXT), (&seqs, Type::INT8_ARRAY), (&terms, Type::TEXT_ARRAY)];
            client.query_typed(&self.sql.insert_search, &params)?;
        }
        Ok(())
    }

    /// One attempt at a write, in one transaction.
    fn attempt(&self, client: &mut Client, write: Write<'_>, token: Option<u64>) -> Result<(), Attempt> {
        match write {
            Write::Create(header) => self.write_tx(client, |client| self.insert_session(client, header)),
            Write::CreateWithEvents(header, events) => self.write_tx(client, |client| {
                self.insert_session(client, header)?;
                self.insert_events(client, &header.id, events)
            }),
            Write::Delete(session_id) => self.write_tx(client, |client| {
                self.check_session(client, session_id, token)?;
                if client.query_typed_opt(&self.sql.delete_session, &[(&session_id, Type::TEXT)])?.is_none() {
                    return Err(StoreError::NotFound { session_id: session_id.to_owned() }.into());
                }
                client.query_typed(&self.sql.delete_events, &[(&session_id, Type::TEXT)])?;
                client.query_typed(&self.sql.delete_search, &[(&session_id, Type::TEXT)])?;
                client.query_typed(&self.sql.delete_hold, &[(&session_id, Type::TEXT)])?;
                client.query_typed(&self.sql.delete_checkpoint, &[(&session_id, Type::TEXT)])?;
                Ok(())
            }),
            Write::Append { session_id, events } => {
                let result = self.write_tx(client, |client| {
                    let len = self.check_session(client, session_id, token)?;
                    check_continues(session_id, len, events)?;
                    self.insert_events(client, session_id, events)
                });
                match result {
                    // Another writer committed the same seqs first: a conflict,
                    // nothing written. Say what the log expects now.
                    Err(Attempt::Failed(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                        let first = events.first().map_or(0, Event::seq);
                        let max: Option<i64> = client
                            .query_typed_one(&self.sql.max_seq, &[(&session_id, Type::TEXT)])
                            .and_then(|r| r.try_get(0))
                            .map_err(|e| {
                                if is_lost(&e) {
                                    Attempt::Lost { committing: false, error: e }
                                } else {
                                    Attempt::Failed(e)
                                }
                            })?;
                        let expected = max.map_or(0, |m| codec::from_sql_int(m) + 1);
                        if expected <= first {
                            // The batch's seqs are free: another unique
                            // constraint refused it: a refusal, below.
                            return Err(Attempt::Failed(e));
                        }
                        tracing::debug!(session_id, first, "lost the race for the next seq");
                        Err(Attempt::Refused(StoreError::Conflict {
                            session_id: session_id.to_owned(),
                            expected,
                            found: first,
                        }))
                    }
                    other => other,
                }
            }
        }
    }

    /// Inside a write transaction: checks that the session exists and that
    /// this store may write it (the hold fence), locking the session row
    /// against delete and the hold row against takeover until commit.
    /// Returns the stored length.
    fn check_session(
        &self,
        client: &mut Client,
        session_id: &str,
        token: Option<u64>,
    ) -> Result<u64, TxError> {
        let Some(row) = client.query_typed_opt(&self.sql.check, &[(&session_id, Type::TEXT)])? else {
            return Err(StoreError::NotFound { session_id: session_id.to_owned() }.into());
        };
        let (lo, hi): (Option<i64>, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
        let hold = hold_from_row(&row, 2)?;
        check_fence(session_id, token, hold.as_ref())?;
        match (lo, hi) {
            (None, _) | (_, None) => Ok(0),
            (Some(0), Some(max)) if (0..i64::MAX).contains(&max) => Ok(max as u64 + 1),
            (Some(min), Some(max)) => Err(StoreError::Corrupt {
                location: format!("{}: events of session {session_id:?}", self.location),
                detail: format!(
                    "stored seqs run from {} to {}; a log starts at 0 and counts up, so nothing is appended",
                    codec::from_sql_int(min),
                    codec::from_sql_int(max)
                ),
                cause: None,
            }
            .into()),
        }
    }

    /// Runs `f` in one read-only snapshot of session `session_id`, begun
    /// in the same round trip as the read of its header (`not-found`
    /// without one), with the planner held to the primary key's order
    /// ([`LOAD_PLAN`]); after a lost connection it connects again and
    /// retries once.
    fn read_loaded<T>(
        &self,
        what: &str,
        session_id: &str,
        mut f: impl FnMut(&mut Client, SessionHeader) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        // One simple query: `BEGIN` and its settings, the header. The id
        // goes in as a literal (`check_id` refused NUL).
        let begin = format!(
            "{}; {LOAD_PLAN}; {}{}",
            self.begin_read,
            self.sql.load_header,
            quote_literal(session_id)
        );
        let mut inner = self.lock();
        self.with_retry(&mut inner, what, |store, client| {
            store.tx_begun_by(
                client,
                |client| client.simple_query(&begin),
                |client, messages| {
                    let row = messages.iter().find_map(|m| match m {
                        SimpleQueryMessage::Row(row) => Some(row),
                        _ => None,
                    });
                    let row =
                        row.ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
                    let header =
                        header_from_text(session_id, row).map_err(|e| self.corrupt(session_id, None, e))?;
                    f(client, header)
                },
            )
        })
        .map_err(|e| self.unreadable(what, e))
    }

    /// Reads the events of session `session_id`, in a transaction begun by
    /// [`read_loaded`](PgStore::read_loaded), into `sink`, decoded on
    /// another thread as rows come off the socket. The first bad row by
    /// position is the error, whether its columns or its contents are
    /// wrong.
    fn read_events(
        &self,
        client: &mut Client,
        session_id: &str,
        sink: &mut dyn LoadSink,
    ) -> Result<(), TxError> {
        // The rows as binary COPY: no result row to build per event, the
        // columns handed on borrowed from the client's buffer.
        // The id as a literal, as the header's select spells it: the server
        // compares it to each index entry faster than a setting's value.
        let (head, tail) = &self.sql.copy_events;
        let copy = format!("{head}{}{tail}", quote_literal(session_id));
        let mut rows_read = codec::RowReader::default();
        let decoded = codec::decode_into(
            // `0`, the store's choice: decode as rows are read (see PgOptions).
            self.options.decode_threads.max(1),
            |push| {
                let mut rows = copy::RowStream::default();
                let mut take = |row: Result<codec::RowRef<'_>, LoadError>| rows_read.take(row, push);
                client.copy_out(&copy, |piece| rows.feed(piece, &mut take))?;
                rows.finish()
            },
            &mut |event| sink.event(event),
        )
        .map_err(|e| self.copy_error(e, session_id))?;
        rows_read
            .finish(decoded)
            .map_err(|(index, e)| TxError::Refused(self.corrupt(session_id, Some(index), e)))
    }

    /// A whole session, collected: `header`, then the events of session
    /// `session_id`.
    fn collect(
        &self,
        client: &mut Client,
        session_id: &str,
        header: SessionHeader,
    ) -> Result<StoredSession, TxError> {
        let mut sink = CollectSink::default();
        if sink.header(header).is_continue() {
            self.read_events(client, session_id, &mut sink)?;
        }
        sink.finish(LoadReport::default())
            .ok_or_else(|| TxError::Refused(StoreError::NotFound { session_id: session_id.to_owned() }))
    }

    /// The header of session `session_id`, read in the caller's
    /// transaction: `not-found` without one, `corrupt` when its row does not
    /// decode. Every read that starts from the header starts here.
    fn stored_header(&self, client: &mut Client, session_id: &str) -> Result<SessionHeader, TxError> {
        let row = client
            .query_typed_opt(&self.sql.select_header, &[(&session_id, Type::TEXT)])?
            .ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
        Ok(header_from_row(session_id, &row, 0).map_err(|e| self.corrupt(session_id, None, e))?)
    }

    /// The session's saved checkpoint, read in the caller's transaction,
    /// if it matches the log: it decodes, its `log_len` column agrees with
    /// it, it was taken of this session under `header`, and the stored row
    /// at seq `log_len - 1` is its last event. `None` (logged at `debug`,
    /// with why) otherwise.
    fn matching_checkpoint(
        &self,
        client: &mut Client,
        session_id: &str,
        header: &SessionHeader,
    ) -> Result<Option<Checkpoint>, TxError> {
        let Some(row) = client.query_typed_opt(&self.sql.select_checkpoint, &[(&session_id, Type::TEXT)])?
        else {
            return Ok(None);
        };
        let ignore = |why: &str| {
            tracing::debug!(session_id, why, "ignoring the saved checkpoint; reading every event");
            Ok(None)
        };
        let checkpoint = match codec::checkpoint_row(header, row.try_get(0).ok(), row.try_get(1).ok()) {
            Ok(c) => c,
            Err(why) => return ignore(&why),
        };
        let Some(last) = checkpoint.log_len().checked_sub(1) else {
            return Ok(Some(checkpoint));
        };
        let at = codec::to_sql_int(last);
        let rows = client.query_typed(
            &self.sql.events_between,
            &[(&session_id, Type::TEXT), (&at, Type::INT8), (&at, Type::INT8)],
        )?;
        let stored = rows.first().map(|row| codec::read_row(row, None).and_then(|r| r.decode(last)));
        match codec::checkpoint_ends_at(&checkpoint, stored) {
            Ok(()) => Ok(Some(checkpoint)),
            Err(why) => ignore(&why),
        }
    }

    /// Runs `f` in one read-only snapshot; after a lost connection it
    /// connects again and retries once.
    ///
    /// A read that waited past `lock_timeout` for a lock another
    /// transaction holds (an `ALTER`, a `LOCK TABLE`) is `io`: the store
    /// could not be read, which is not a refusal of a writer (`locked`,
    /// "holds ... for writing", exit 1 in the CLI, where a reading
    /// command's "cannot read" is 2).
    fn read<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&mut Client) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.lock();
        self.with_retry(&mut inner, what, |store, client| store.tx(client, &store.begin_read, &mut f))
            .map_err(|e| self.unreadable(what, e))
    }

    /// A read's error: a lock it waited for past `lock_timeout` is `io`
    /// (see [`PgStore::read`]); any other as it is.
    fn unreadable(&self, what: &str, e: StoreError) -> StoreError {
        match e {
            StoreError::Locked { what: held } => StoreError::Io {
                context: format!("{what} at {}", self.location),
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!("another transaction holds a lock the read needs, past lock_timeout ({held})"),
                )),
            },
            e => e,
        }
    }

    /// Refuses, before anything is sent, a header the store cannot hold.
    fn check_creatable(&self, header: &SessionHeader) -> Result<(), StoreError> {
        check_id(&header.id)?;
        check_header(header)?;
        codec::header_storable(header).map_err(|detail| StoreError::InvalidHeader {
            session_id: header.id.clone(),
            cause: LoadError::HeaderMalformed { detail },
        })
    }

    /// Refuses, before anything is sent, events the store cannot hold (an
    /// event type with NUL).
    fn check_storable(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        for e in events {
            codec::nul_free("the event type", e.event_type().as_str()).map_err(|why| {
                invalid_input(
                    format!("writing seq {} of session {session_id:?}; nothing was written", e.seq()),
                    why,
                )
            })?;
        }
        Ok(())
    }

    /// A failed COPY read: the client's error as it is (so that a lost
    /// connection is seen as one), else `io`.
    fn copy_error(&self, e: std::io::Error, session_id: &str) -> TxError {
        let kind = e.kind();
        let source: Box<dyn std::error::Error + Send + Sync> = match e.into_inner() {
            Some(inner) => match inner.downcast::<tokio_postgres::Error>() {
                Ok(pg) => return TxError::Pg(*pg),
                Err(other) => Box::new(std::io::Error::new(kind, other)),
            },
            None => Box::new(std::io::Error::from(kind)),
        };
        TxError::Refused(StoreError::Io {
            context: format!("{}: loading session {session_id:?}: reading the event rows", self.location),
            source,
        })
    }

    fn corrupt(&self, session_id: &str, index: Option<u64>, cause: LoadError) -> StoreError {
        let location = match index {
            Some(i) => {
                format!("{}: {}.events row ({session_id:?}, {i})", self.location, quote_ident(&self.schema))
            }
            None => format!("{}: {}.sessions row {session_id:?}", self.location, quote_ident(&self.schema)),
        };
        StoreError::Corrupt { location, detail: cause.to_string(), cause: Some(cause) }
    }
}

/// Runs `f` where the blocking client may block. Each connection drives
/// its calls on a runtime of its own (`conn.rs`), which panics on a thread that
/// is inside another tokio runtime (an async caller, or a store call made
/// in `block_in_place` on a current-thread runtime). There `f` runs on a
/// scoped thread of its own; elsewhere, inline.
fn off_the_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl Drop for PgStore {
    /// Closing the connection blocks too (the client says goodbye to the
    /// server): off the runtime, like every call.
    fn drop(&mut self) {
        let client = self.inner.get_mut().map_or_else(|p| p.into_inner().client.take(), |i| i.client.take());
        if let Some(client) = client {
            off_the_runtime(move || drop(client));
        }
    }
}

/// `session "x"`, for errors.
fn describe_target(write: Write<'_>) -> String {
    match write {
        Write::Create(h) | Write::CreateWithEvents(h, _) => format!("session {:?}", h.id),
        Write::Append { session_id, .. } | Write::Delete(session_id) => format!("session {session_id:?}"),
    }
}

/// Connects (through TLS as `tls` and the `sslmode` say, see [`crate::tls`])
/// and reads the server process id.
fn connect(config: &Config, tls: &TlsParams, location: &str) -> Result<(Client, i32), StoreError> {
    let mut client = connect_client(config, tls, location)?;
    let pid: i32 = client
        .query_typed_one("SELECT pg_backend_pid()", &[])
        .and_then(|r| r.try_get(0))
        .map_err(|e| pg_err(e, location, "the server", "reading pg_backend_pid()"))?;
    Ok((client, pid))
}

fn connecting(location: &str) -> impl FnOnce(ConnectError) -> StoreError + '_ {
    move |source| StoreError::Io { context: format!("connecting to {location}"), source }
}

#[cfg(feature = "tls")]
fn connect_client(config: &Config, tls: &TlsParams, location: &str) -> Result<Client, StoreError> {
    let Some(verify) = tls.verify(config.get_ssl_mode()) else {
        return Client::connect(config, tokio_postgres::NoTls).map_err(connecting(location));
    };
    let connector = crate::tls::connector(tls, verify)
        .map_err(|why| invalid_input(format!("connecting to {location}"), why))?;
    Client::connect(config, connector).map_err(connecting(location))
}

#[cfg(not(feature = "tls"))]
fn connect_client(config: &Config, tls: &TlsParams, location: &str) -> Result<Client, StoreError> {
    if matches!(tls.verify(config.get_ssl_mode()), Some(Some(_))) {
        return Err(invalid_input(
            format!("connecting to {location}"),
            "the connection string asks to check the server's certificate (`sslmode=verify-ca`, \
             `verify-full` or `sslrootcert`), but this build has no TLS (the crate's `tls` feature is off)",
        ));
    }
    if config.get_ssl_mode() == SslMode::Require {
        tracing::warn!("sslmode=require, but this build has no TLS (the crate's `tls` feature is off)");
    }
    Client::connect(config, tokio_postgres::NoTls).map_err(connecting(location))
}

/// Refuses ids the store cannot hold: NUL (PostgreSQL text cannot store
/// it) or longer than [`MAX_ID_BYTES`].
fn check_id(id: &str) -> Result<(), StoreError> {
    if let Err(reason) = codec::nul_free("the session id", id) {
        return Err(StoreError::InvalidId { reason });
    }
    if id.len() > MAX_ID_BYTES {
        return Err(StoreError::InvalidId {
            reason: format!(
                "a session id of {} bytes; the PostgreSQL store takes at most {MAX_ID_BYTES}",
                id.len()
            ),
        });
    }
    Ok(())
}

fn exists_or_not_found(client: &mut Client, sql: &str, session_id: &str) -> Result<(), TxError> {
    match client.query_typed_opt(sql, &[(&session_id, Type::TEXT)])? {
        Some(_) => Ok(()),
        None => Err(StoreError::NotFound { session_id: session_id.to_owned() }.into()),
    }
}

/// Reads the hold columns `holder, token, expires_at, live, left_s`
/// starting at `first` (all NULL: no hold row).
fn hold_from_row(
    row: &tokio_postgres::Row,
    first: usize,
) -> Result<Option<HoldRecord>, tokio_postgres::Error> {
    let holder: Option<String> = row.try_get(first)?;
    let Some(holder) = holder else { return Ok(None) };
    Ok(Some(HoldRecord {
        holder,
        token: codec::from_sql_int(row.try_get(first + 1)?),
        expires_at: row.try_get(first + 2)?,
        live: row.try_get(first + 3)?,
        seconds_left: row.try_get(first + 4)?,
    }))
}

/// The hold row, locked for update, and the server's clock in microseconds.
fn read_hold_for_update(
    client: &mut Client,
    sql: &str,
    session_id: &str,
) -> Result<(Option<HoldRecord>, i64), TxError> {
    let row = client.query_typed_one(sql, &[(&session_id, Type::TEXT)])?;
    Ok((hold_from_row(&row, 0)?, row.try_get(5)?))
}

/// Reads the header columns `created_at, cwd, parent_session, seed_length`,
/// starting at column `first`.
fn header_from_row(id: &str, row: &tokio_postgres::Row, first: usize) -> Result<SessionHeader, LoadError> {
    let read = || -> Result<SessionHeader, tokio_postgres::Error> {
        Ok(SessionHeader {
            id: id.to_owned(),
            created_at: codec::from_sql_int(row.try_get(first)?),
            cwd: row.try_get(first + 1)?,
            parent_session: row.try_get(first + 2)?,
            seed_length: row.try_get::<_, Option<i64>>(first + 3)?.map(codec::from_sql_int),
        })
    };
    let header = read().map_err(|e| LoadError::HeaderMalformed { detail: e.to_string() })?;
    // The limit every reader holds a header line to, as written to JSONL.
    header.check_size()?;
    Ok(header)
}

/// [`header_from_row`] for a row of a simple query, its columns as text:
/// `created_at, cwd, parent_session, seed_length`.
fn header_from_text(id: &str, row: &SimpleQueryRow) -> Result<SessionHeader, LoadError> {
    let malformed = |detail: String| LoadError::HeaderMalformed { detail };
    let text = |i: usize| row.try_get(i).map_err(|e| malformed(e.to_string()));
    let int = |column: &str, value: &str| {
        value
            .parse::<i64>()
            .map(codec::from_sql_int)
            .map_err(|e| malformed(format!("column `{column}`: {e}")))
    };
    let created_at = text(0)?.ok_or_else(|| malformed("column `created_at` is NULL".to_owned()))?;
    let header = SessionHeader {
        id: id.to_owned(),
        created_at: int("created_at", created_at)?,
        cwd: text(1)?.map(str::to_owned),
        parent_session: text(2)?.map(str::to_owned),
        seed_length: text(3)?.map(|v| int("seed_length", v)).transpose()?,
    };
    // The limit every reader holds a header line to, as written to JSONL.
    header.check_size()?;
    Ok(header)
}

/// Sessions per statement of [`PgStore::summaries`](SessionStore::summaries).
const SUMMARY_BATCH: usize = 1000;

impl SessionStore for PgStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        off_the_runtime(|| {
            self.check_creatable(header)?;
            self.write(Write::Create(header))?;
            tracing::debug!(session_id = %header.id, "created session");
            Ok(())
        })
    }

    /// One transaction: the session row and every event, or nothing.
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        off_the_runtime(|| {
            self.check_creatable(header)?;
            check_continues(&header.id, 0, events)?;
            self.check_storable(&header.id, events)?;
            self.write(Write::CreateWithEvents(header, events))?;
            tracing::debug!(session_id = %header.id, events = events.len(), "created a whole session");
            Ok(())
        })
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            self.check_storable(session_id, events)?;
            self.write(Write::Append { session_id, events })?;
            tracing::trace!(session_id, events = events.len(), "appended");
            Ok(())
        })
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            // A fresh collector per attempt: after a lost connection the
            // read starts again from nothing.
            self.read_loaded("loading a session", session_id, |client, header| {
                self.collect(client, session_id, header)
            })
        })
    }

    fn load_into(&self, session_id: &str, sink: &mut dyn LoadSink) -> Result<LoadReport, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            let mut attempts = 0;
            self.read_loaded("loading a session", session_id, |client, header| {
                attempts += 1;
                if attempts > 1 {
                    // The sink has seen part of the session: it cannot be
                    // handed the session again from the start.
                    return Err(TxError::Refused(StoreError::Io {
                        context: format!(
                            "{}: loading session {session_id:?}: the connection was lost during the read; \
                             load it again",
                            self.location
                        ),
                        source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                    }));
                }
                if sink.header(header).is_break() {
                    return Ok(());
                }
                self.read_events(client, session_id, &mut *sink)
            })?;
            Ok(LoadReport::default())
        })
    }

    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        off_the_runtime(|| {
            self.read("listing sessions", |client| {
                let rows = client.query_typed(&self.sql.list, &[])?;
                let mut headers = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: String = row.try_get(0)?;
                    let header = header_from_row(&id, row, 1).map_err(|e| self.corrupt(&id, None, e))?;
                    headers.push(header);
                }
                Ok(headers)
            })
        })
    }

    /// Two statements in one read-only snapshot, whatever the log's
    /// length: the header, then one `UNION ALL` of three look-ups on the
    /// primary key's order (the last event, the last turn bracket, the
    /// first prompt). Only those rows are read and checked.
    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            self.read("summarizing a session", |client| {
                let header = self.stored_header(client, session_id)?;
                let mut summary = SessionSummary::empty(header);
                for row in &client.query_typed(&self.sql.summary, &[(&session_id, Type::TEXT)])? {
                    let index = codec::from_sql_int(row.try_get::<_, i64>(0)?);
                    let event = codec::read_row(row, None)
                        .and_then(|r| r.decode(index))
                        .map_err(|e| self.corrupt(session_id, Some(index), e))?;
                    if let Some(part) = SummaryPart::from_tag(row.try_get::<_, i32>(6)?.into()) {
                        summary.record(part, event);
                    }
                }
                Ok(summary)
            })
        })
    }

    /// One read-only snapshot: the headers, then the summary rows of
    /// 1,000 sessions per statement (each statement names its
    /// session ids, as the search's does), so a store of 10,000 sessions
    /// is listed in a dozen round trips rather than 20,000.
    fn summaries(&self) -> Result<palimpsest_persistence::Summaries, StoreError> {
        off_the_runtime(|| {
            self.read("summarizing every session", |client| {
                // A batch of a thousand look-ups is estimated costly enough
                // for the server to JIT-compile it (about 0.2 s a statement
                // here, for 15 ms of work): no JIT in this transaction.
                client.batch_execute("SET LOCAL jit = off")?;
                let rows = client.query_typed(&self.sql.list, &[])?;
                let mut headers = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: String = row.try_get(0)?;
                    let header = header_from_row(&id, row, 1).map_err(|e| self.corrupt(&id, None, e))?;
                    headers.push(header);
                }
                drop(rows);
                let mut found: std::collections::HashMap<String, Result<SessionSummary, StoreError>> =
                    headers.iter().map(|h| (h.id.clone(), Ok(SessionSummary::empty(h.clone())))).collect();
                for batch in headers.chunks(SUMMARY_BATCH) {
                    let ids: Vec<&str> = batch.iter().map(|h| h.id.as_str()).collect();
                    for row in &client.query_typed(&self.sql.summaries, &[(&ids, Type::TEXT_ARRAY)])? {
                        let id: String = row.try_get(7)?;
                        let Some(Ok(summary)) = found.get_mut(&id) else { continue };
                        let index = codec::from_sql_int(row.try_get::<_, i64>(0)?);
                        let event = match codec::read_row(row, None).and_then(|r| r.decode(index)) {
                            Ok(event) => event,
                            Err(e) => {
                                let error = self.corrupt(&id, Some(index), e);
                                found.insert(id, Err(error));
                                continue;
                            }
                        };
                        if let Some(part) = SummaryPart::from_tag(row.try_get::<_, i32>(6)?.into()) {
                            summary.record(part, event);
                        }
                    }
                }
                Ok(headers
                    .into_iter()
                    .map(|h| {
                        let summary =
                            found.remove(&h.id).unwrap_or_else(|| Ok(SessionSummary::empty(h.clone())));
                        (h, summary)
                    })
                    .collect())
            })
        })
    }

    /// Replaces the session's row of the `checkpoints` table, in one write
    /// transaction, after settling any earlier write whose outcome is
    /// unknown (safe to run again after a lost connection). Not fenced by
    /// holds: a checkpoint is a cache that changes nothing a load returns.
    /// A checkpoint of more events than the log holds is refused with
    /// `conflict` (`expected` the stored length, `found` its `log_len`),
    /// nothing written; one that does not match the log in any other way
    /// is kept, and ignored by every resume.
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            let json = checkpoint.to_json();
            let log_len = checkpoint.log_len();
            let mut inner = self.lock();
            self.settle_pending(&mut inner)?;
            self.with_retry(&mut inner, "saving a checkpoint", |store, client| {
                store.write_tx(client, |client| {
                    exists_or_not_found(client, &store.sql.session_exists, session_id)?;
                    let max: Option<i64> = client
                        .query_typed_one(&store.sql.max_seq, &[(&session_id, Type::TEXT)])?
                        .try_get(0)?;
                    let len = max.map_or(0, |m| codec::from_sql_int(m) + 1);
                    if log_len > len {
                        return Err(StoreError::Conflict {
                            session_id: session_id.to_owned(),
                            expected: len,
                            found: log_len,
                        }
                        .into());
                    }
                    client.execute_typed(
                        &store.sql.upsert_checkpoint,
                        &[
                            (&session_id, Type::TEXT),
                            (&codec::to_sql_int(log_len), Type::INT8),
                            (&json, Type::TEXT),
                        ],
                    )?;
                    Ok(())
                })
            })?;
            tracing::debug!(session_id, log_len, "saved a checkpoint");
            Ok(true)
        })
    }

    /// One read-only snapshot: the header, the checkpoint row, the row it
    /// ends at, then only the rows from seq `log_len` on. A checkpoint that
    /// does not decode or does not match is ignored (`debug`, with why)
    /// and every row is read, as [`load`](SessionStore::load) reads them.
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            self.read_loaded("resuming a session", session_id, |client, header| {
                if let Some(checkpoint) = self.matching_checkpoint(client, session_id, &header)? {
                    let from = checkpoint.log_len();
                    let rows = client.query_typed(
                        &self.sql.events_from,
                        &[(&session_id, Type::TEXT), (&codec::to_sql_int(from), Type::INT8)],
                    )?;
                    let mut tail = Vec::with_capacity(rows.len());
                    for row in &rows {
                        let index = from + tail.len() as u64;
                        let event = codec::read_row(row, None)
                            .and_then(|r| r.decode(index))
                            .map_err(|e| self.corrupt(session_id, Some(index), e))?;
                        tail.push(event);
                    }
                    return Ok(Resumable {
                        header,
                        checkpoint: Some(checkpoint),
                        tail,
                        report: LoadReport::default(),
                    });
                }
                Ok(Resumable::whole(self.collect(client, session_id, header)?))
            })
        })
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        off_the_runtime(|| {
            check_id(session_id)?;
            self.write(Write::Delete(session_id))?;
            self.lock().holds.remove(session_id);
            tracing::debug!(session_id, "deleted session");
            Ok(())
        })
    }

    /// Asks the GIN index for the rows holding every term (and the rows
    /// too large to index), then reads the candidates' events session by
    /// session in the search order and confirms each with the reference
    /// matcher, until the limit. One read-only snapshot. The candidate query
    /// is a per-store query like `list`; the last-activity query names the
    /// candidate sessions' ids; every other statement names one session id.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let tsquery = search::tsquery(query);
        off_the_runtime(|| {
            self.read("searching", |client| {
                let rows = client.query_typed(&self.sql.search_candidates, &[(&tsquery, Type::TEXT)])?;
                let mut by_session: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
                for row in &rows {
                    by_session.entry(row.try_get(0)?).or_default().push(row.try_get(1)?);
                }
                drop(rows);
                // The last activity of every candidate session, in one
                // statement; index rows of a session that is not in
                // `sessions` are not hits.
                let ids: Vec<&str> = by_session.keys().map(String::as_str).collect();
                let rows = client.query_typed(&self.sql.last_activity, &[(&ids, Type::TEXT_ARRAY)])?;
                let mut order = Vec::with_capacity(rows.len());
                for row in &rows {
                    let id: String = row.try_get(0)?;
                    let (last, created): (Option<i64>, i64) = (row.try_get(1)?, row.try_get(2)?);
                    if let Some(seqs) = by_session.remove(&id) {
                        order.push((codec::from_sql_int(last.unwrap_or(created)), id, seqs));
                    }
                }
                drop(rows);
                order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
                let mut found = HitCollector::new(query);
                let mut remaining = query.limit().unwrap_or(usize::MAX);
                for (last, id, seqs) in order {
                    if remaining == 0 {
                        break;
                    }
                    let params: [(&(dyn ToSql + Sync), Type); 2] =
                        [(&id, Type::TEXT), (&seqs, Type::INT8_ARRAY)];
                    let rows = client.query_typed(&self.sql.events_at, &params)?;
                    let mut hits = Vec::new();
                    for row in &rows {
                        if hits.len() == remaining {
                            break;
                        }
                        let seq: i64 = row.try_get(0)?;
                        let index = codec::from_sql_int(seq);
                        let event = codec::read_row(row, None)
                            .and_then(|r| r.decode(index))
                            .map_err(|e| self.corrupt(&id, Some(index), e))?;
                        hits.extend(query.hit(&id, &event));
                    }
                    remaining -= hits.len();
                    found.add(&id, last, hits);
                }
                Ok(found.finish())
            })
        })
    }

    /// Every acknowledged commit is already durable (the server's
    /// `synchronous_commit`, `on` by default, decides when COMMIT returns);
    /// `sync` only settles an earlier write whose outcome is unknown, and is
    /// `io` while it cannot.
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        off_the_runtime(|| {
            let mut inner = self.lock();
            self.settle_pending(&mut inner)?;
            tracing::trace!(session_id, "synced (nothing to do: commits are durable)");
            Ok(())
        })
    }

    /// [`PgStore::hold`]: a lease fenced by its token; always granted
    /// (`Some`) or refused.
    fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Option<Hold>, StoreError> {
        PgStore::hold(self, session_id, holder, ttl).map(Some)
    }

    fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        PgStore::renew(self, hold, ttl)
    }

    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        PgStore::release(self, hold)
    }
}

/// Why `schema` cannot hold a store: `Some` for a temporary schema, which
/// PostgreSQL drops with everything in it when the connection closes (the
/// store would report every write a success and lose them all). That is
/// `pg_temp`, however the schema was named: `pg_temp` itself (in
/// [`PgOptions::schema`] or first in a `search_path` whose temporary schema
/// does not exist yet), or the connection's own `pg_temp_N` (which
/// `current_schema()` returns for such a path once it exists), or another
/// connection's `pg_temp_N` / `pg_toast_temp_N`. The prefix `pg_` is
/// reserved, so no permanent schema a user made is named so.
fn temporary_schema(schema: &str) -> Option<String> {
    let numbered = |prefix: &str| {
        schema.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    (schema == "pg_temp" || numbered("pg_temp_") || numbered("pg_toast_temp_")).then(|| {
        format!(
            "schema {} is the connection's temporary schema (pg_temp) or another's: \
             PostgreSQL drops it, with every table and event in it, when the connection closes; \
             name a permanent schema, in the URL as `options=-csearch_path%3D<schema>`",
            quote_ident(schema)
        )
    })
}

/// The first schema a `search_path` setting names, as PostgreSQL reads it:
/// unquoted names fold to lower case, `"..."` keeps its case (a doubled
/// `""` is one quote), and `"$user"` (the role's own schema) is skipped.
/// `None` when it names none.
fn first_in_search_path(path: &str) -> Option<String> {
    path.split(',').map(str::trim).filter(|n| !n.is_empty() && *n != "\"$user\"" && *n != "$user").find_map(
        |name| match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => (!quoted.is_empty()).then(|| quoted.replace("\"\"", "\"")),
            None => Some(name.to_lowercase()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{first_in_search_path, temporary_schema};

    #[test]
    fn temporary_schemas_are_told_by_name() {
        for name in ["pg_temp", "pg_temp_3", "pg_temp_12", "pg_toast_temp_3"] {
            assert!(temporary_schema(name).is_some(), "{name}");
        }
        for name in
            ["public", "PG_TEMP", "pg_temp_", "pg_temporary", "pg_temp_x", "app_pg_temp_1", "pg_toast"]
        {
            assert_eq!(temporary_schema(name), None, "{name}");
        }
    }

    #[test]
    fn the_first_schema_of_a_search_path_is_read_as_postgresql_reads_it() {
        assert_eq!(first_in_search_path("my_schema").as_deref(), Some("my_schema"));
        assert_eq!(first_in_search_path("\"$user\", public").as_deref(), Some("public"));
        assert_eq!(first_in_search_path("  Mixed , public").as_deref(), Some("mixed"), "unquoted folds");
        assert_eq!(first_in_search_path("\"Mixed\"\"Q\", x").as_deref(), Some("Mixed\"Q"), "quoted keeps");
        assert_eq!(first_in_search_path(""), None);
        assert_eq!(first_in_search_path("\"$user\""), None);
    }
}
