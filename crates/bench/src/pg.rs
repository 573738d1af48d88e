//! The PostgreSQL section: the store's writes, load and resume, each beside
//! the bare `postgres` client sending the same rows in the same
//! transactions with no validation (the load also beside a bare
//! `tokio-postgres` select, the store's own client); then concurrent writers, from threads
//! and from processes, beside SQLite under the same load.
//!
//! The server is `PALIMPSEST_TEST_PG_URL` (default [`DEFAULT_URL`]). Each
//! run of the section works in a schema of its own (`bench_<pid>_<n>`),
//! dropped at the end. A server that cannot be reached fails the section
//! with a message saying so.

use std::io::{BufRead as _, BufReader, Write as _};
use std::ops::Range;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use futures_core::Stream as _;
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::{redact_url, schema_sql, PgOptions, PgStore};
use palimpsest_persistence_sqlite::SqliteStore;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{ToSql, Type};
use postgres::{Client, Config, NoTls};

use crate::report::Row;
use crate::sections::{per_sec, row, with_baseline};
use crate::stores::{append_one_by_one, err, load_validate, write_through, ONE_BY_ONE};
use crate::Workload;

/// The server the section uses when `PALIMPSEST_TEST_PG_URL` is not set.
pub(crate) const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server's URL: `PALIMPSEST_TEST_PG_URL`, or [`DEFAULT_URL`], with
/// `sslmode=disable` unless it names an `sslmode`: the baselines speak
/// plain text (`NoTls`), and a store built with the `tls` feature (as it
/// is when the CLI is built alongside) would encrypt under the default
/// `prefer` on a server offering TLS, measuring TLS against no TLS.
pub(crate) fn url() -> String {
    let url = std::env::var("PALIMPSEST_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.into());
    if url.contains("sslmode=") {
        return url;
    }
    let sep = match (url.contains("://"), url.contains('?')) {
        (false, _) => ' ',
        (true, true) => '&',
        (true, false) => '?',
    };
    format!("{url}{sep}sslmode=disable")
}

fn options(schema: &str) -> PgOptions {
    PgOptions { schema: Some(schema.to_owned()), ..PgOptions::default() }
}

/// A bare client, as the baselines use it.
pub(crate) fn bare_connect(url: &str) -> Result<Client, String> {
    let location = redact_url(url);
    let mut config: Config =
        url.parse().map_err(|e| format!("reading the connection string {location}: {e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    config.connect(NoTls).map_err(|e| {
        let cause = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
        format!(
            "cannot reach PostgreSQL at {location} ({e}{cause}): start a server there, or point \
             PALIMPSEST_TEST_PG_URL at one"
        )
    })
}

/// Numbers the schemas of one process.
static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A schema of this run with the store's tables, dropped (with everything
/// in it) when this goes out of scope, whatever happened.
pub(crate) struct Scratch {
    admin: Client,
    name: String,
    quoted: String,
}

impl Scratch {
    pub(crate) fn create(url: &str) -> Result<Scratch, String> {
        let admin = bare_connect(url)?;
        let name = format!("bench_{}_{}", std::process::id(), SCHEMAS.fetch_add(1, Ordering::Relaxed));
        let quoted = format!("\"{name}\"");
        let mut scratch = Scratch { admin, name, quoted };
        // The store's own DDL, so the store and the baseline use the same tables.
        let ddl = format!("CREATE SCHEMA {}; {}", scratch.quoted, schema_sql(&scratch.name));
        scratch.admin.batch_execute(&ddl).map_err(|e| format!("creating schema {}: {e}", scratch.quoted))?;
        Ok(scratch)
    }

    /// Empties the tables between runs (not timed).
    pub(crate) fn truncate(&mut self) -> Result<(), String> {
        let q = &self.quoted;
        self.admin
            .batch_execute(&format!("TRUNCATE {q}.sessions, {q}.events, {q}.holds, {q}.search"))
            .map_err(err)
    }

    /// Gives the planner the tables' statistics, as autovacuum would once
    /// a session has been written: without them a bare select of one
    /// session's rows is planned as a bitmap scan and a sort, which the
    /// store's load (held to the primary key's order) never is, and the
    /// load's baseline would be slower than a client gets in practice.
    pub(crate) fn analyze(&mut self) -> Result<(), String> {
        let q = &self.quoted;
        self.admin.batch_execute(&format!("ANALYZE {q}.sessions, {q}.events")).map_err(err)
    }

    /// The schema's name, quoted as an identifier.
    pub(crate) fn quoted(&self) -> &str {
        &self.quoted
    }

    pub(crate) fn store(&self, url: &str) -> Result<PgStore, String> {
        PgStore::connect_with(url, options(&self.name)).map_err(err)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a schema left behind is named after this process.
        let _ = self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.quoted));
    }
}

/// The statements the store sends for the same rows, minus its checks:
/// the session row, one `INSERT ... SELECT FROM unnest(...)` per batch, and
/// the same selects.
pub(crate) struct BareSql {
    insert_session: String,
    insert_events: String,
    /// The store's statement for the `search` rows of a batch.
    insert_search: String,
    select_header: String,
    events: String,
    /// The events select as binary `COPY`, split where the session id
    /// goes (as a literal: `COPY` takes no parameters).
    copy_events: (String, String),
}

impl BareSql {
    pub(crate) fn new(quoted: &str) -> BareSql {
        let s = quoted;
        BareSql {
            insert_session: format!(
                "INSERT INTO {s}.sessions (id, created_at, cwd, parent_session, seed_length) \
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            insert_events: format!(
                "INSERT INTO {s}.events (session_id, seq, time, type, data, source_event_seqs, surface_op) \
                 SELECT $1, u.* FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], \
                 $6::text[], $7::text[]) AS u"
            ),
            insert_search: format!(
                "INSERT INTO {s}.search (session_id, seq, terms) \
                 SELECT $1, u.seq, array_to_tsvector(string_to_array(u.terms, ' ')) \
                 FROM unnest($2::bigint[], $3::text[]) AS u(seq, terms)"
            ),
            select_header: format!(
                "SELECT created_at, cwd, parent_session, seed_length FROM {s}.sessions WHERE id = $1"
            ),
            events: format!(
                "SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                 WHERE session_id = $1 ORDER BY seq"
            ),
            copy_events: (
                format!(
                    "COPY (SELECT seq, time, type, data, source_event_seqs, surface_op FROM {s}.events \
                     WHERE session_id = "
                ),
                " ORDER BY seq) TO STDOUT (FORMAT binary)".to_owned(),
            ),
        }
    }
}

/// Times `ours` and `base` in turns (ours first, then the baseline first,
/// and so on), each after its own `setup` (not timed), so that a noisy
/// moment of this shared machine falls on both sides; returns each one's
/// median, or the first error.
pub(crate) fn paired<A, B>(
    runs: usize,
    setup: impl FnMut() -> Result<(), String>,
    mut ours: impl FnMut() -> Result<A, String>,
    mut base: impl FnMut() -> Result<B, String>,
) -> Result<(Duration, Duration), String> {
    let [a, b] = in_turns(runs, setup, [&mut || timed(&mut ours), &mut || timed(&mut base)])?;
    Ok((a, b))
}

/// [`paired`] with two baselines: every side runs once per round, the
/// first side of each round turning (ours, then the first baseline, then
/// the second, first).
pub(crate) fn three_way<A, B, C>(
    runs: usize,
    setup: impl FnMut() -> Result<(), String>,
    mut ours: impl FnMut() -> Result<A, String>,
    mut base: impl FnMut() -> Result<B, String>,
    mut other: impl FnMut() -> Result<C, String>,
) -> Result<(Duration, Duration, Duration), String> {
    let [a, b, c] = in_turns(
        runs,
        setup,
        [&mut || timed(&mut ours), &mut || timed(&mut base), &mut || timed(&mut other)],
    )?;
    Ok((a, b, c))
}

/// How long `f` took; its result is dropped after the clock stopped.
fn timed<T>(f: &mut impl FnMut() -> Result<T, String>) -> Result<Duration, String> {
    let start = Instant::now();
    let out = f()?;
    let took = start.elapsed();
    drop(std::hint::black_box(out));
    Ok(took)
}

/// Runs every side `runs` times in rounds, each round starting one side
/// later than the last, each run after `setup` (not timed); the medians.
fn in_turns<const N: usize>(
    runs: usize,
    mut setup: impl FnMut() -> Result<(), String>,
    sides: [&mut dyn FnMut() -> Result<Duration, String>; N],
) -> Result<[Duration; N], String> {
    let mut times: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    for i in 0..runs.max(1) {
        for k in 0..N {
            let side = (i + k) % N;
            setup()?;
            times[side].push(sides[side]()?);
        }
    }
    Ok(times.map(|mut v| {
        v.sort_unstable();
        v[v.len() / 2]
    }))
}

/// One transaction of the baseline: the session row first, or not, then
/// the events (one statement), committed.
pub(crate) type BareTx<'a> = (bool, &'a [Event]);

/// The bare baseline: the same rows in the same transactions, columns
/// built the same way, nothing checked.
pub(crate) fn bare_write(
    client: &mut Client,
    sql: &BareSql,
    header: &SessionHeader,
    txs: &[BareTx<'_>],
) -> Result<(), String> {
    for &(with_header, events) in txs {
        client.batch_execute("BEGIN").map_err(err)?;
        if with_header {
            bare_session_row(client, sql, header)?;
        }
        bare_events(client, sql, &header.id, events)?;
        client.batch_execute("COMMIT").map_err(err)?;
    }
    Ok(())
}

/// The `search` rows of a batch, as the store sends them: the seqs of the
/// message events with text, and each one's distinct tokens, space-separated.
pub(crate) type SearchRows = (Vec<i64>, Vec<Option<String>>);

/// The search rows of `events`, built as the store builds them (the
/// reference tokenizer, terms clipped to `MAX_TERM_BYTES`, NULL past
/// 512 KiB of terms).
pub(crate) fn search_rows(events: &[Event]) -> SearchRows {
    use palimpsest_core_session::search::{index_text, searchable_text};
    let clip = |t: &str| -> String {
        let mut end = t.len().min(palimpsest_persistence_postgres::MAX_TERM_BYTES);
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t[..end].to_owned()
    };
    let (mut seqs, mut terms) = (Vec::new(), Vec::new());
    for e in events {
        let Some(text) = searchable_text(e) else { continue };
        let tokens = index_text(&text);
        if tokens.is_empty() {
            continue;
        }
        seqs.push(e.seq() as i64);
        terms.push(
            (tokens.len() <= 512 << 10).then(|| tokens.split(' ').map(clip).collect::<Vec<_>>().join(" ")),
        );
    }
    (seqs, terms)
}

/// The second write baseline: one transaction holding everything the
/// store's `create_with_events` sends, the session row, the events and
/// their `search` rows, with the same statements. The search rows are
/// tokenized before the clock starts (`rows`): only sending them is timed.
pub(crate) fn bare_write_indexed(
    client: &mut Client,
    sql: &BareSql,
    header: &SessionHeader,
    events: &[Event],
    rows: &SearchRows,
) -> Result<(), String> {
    client.batch_execute("BEGIN").map_err(err)?;
    bare_session_row(client, sql, header)?;
    bare_events(client, sql, &header.id, events)?;
    if !rows.0.is_empty() {
        let params: [(&(dyn ToSql + Sync), Type); 3] =
            [(&header.id, Type::TEXT), (&rows.0, Type::INT8_ARRAY), (&rows.1, Type::TEXT_ARRAY)];
        client.query_typed(&sql.insert_search, &params).map_err(err)?;
    }
    client.batch_execute("COMMIT").map_err(err)
}

fn bare_session_row(client: &mut Client, sql: &BareSql, header: &SessionHeader) -> Result<(), String> {
    client
        .query_typed(
            &sql.insert_session,
            &[
                (&header.id, Type::TEXT),
                (&(header.created_at as i64), Type::INT8),
                (&header.cwd, Type::TEXT),
                (&header.parent_session, Type::TEXT),
                (&header.seed_length.map(|v| v as i64), Type::INT8),
            ],
        )
        .map_err(err)?;
    Ok(())
}

/// One `unnest` insert of `events`, columns built as the store builds them.
fn bare_events(client: &mut Client, sql: &BareSql, id: &str, events: &[Event]) -> Result<(), String> {
    if events.is_empty() {
        return Ok(());
    }
    let mut seq = Vec::with_capacity(events.len());
    let mut time = Vec::with_capacity(events.len());
    let mut kind = Vec::with_capacity(events.len());
    let mut data = Vec::with_capacity(events.len());
    let mut sources = Vec::with_capacity(events.len());
    let mut ops = Vec::with_capacity(events.len());
    for e in events {
        seq.push(e.seq() as i64);
        time.push(e.time() as i64);
        kind.push(e.event_type().as_str());
        data.push(e.data());
        sources.push(e.source_event_seqs().map(palimpsest_persistence::rows::sources_json));
        ops.push(e.surface_op().map(palimpsest_persistence::rows::surface_op_json));
    }
    let params: [(&(dyn ToSql + Sync), Type); 7] = [
        (&id, Type::TEXT),
        (&seq, Type::INT8_ARRAY),
        (&time, Type::INT8_ARRAY),
        (&kind, Type::TEXT_ARRAY),
        (&data, Type::TEXT_ARRAY),
        (&sources, Type::TEXT_ARRAY),
        (&ops, Type::TEXT_ARRAY),
    ];
    client.query_typed(&sql.insert_events, &params).map_err(err)?;
    Ok(())
}

/// The bare baseline of a load: the header row and every event row, each
/// column read into an owned value, nothing checked.
/// The header row's columns, read into owned values as a client would.
fn header_columns(header: &postgres::Row) -> Result<(), String> {
    std::hint::black_box((
        header.try_get::<_, i64>(0).map_err(err)?,
        header.try_get::<_, Option<String>>(1).map_err(err)?,
        header.try_get::<_, Option<String>>(2).map_err(err)?,
        header.try_get::<_, Option<i64>>(3).map_err(err)?,
    ));
    Ok(())
}

/// An event row's columns, read into owned values as a client would.
fn event_columns(r: &postgres::Row) -> Result<(), String> {
    std::hint::black_box((
        r.try_get::<_, i64>(0).map_err(err)?,
        r.try_get::<_, i64>(1).map_err(err)?,
        r.try_get::<_, String>(2).map_err(err)?,
        r.try_get::<_, String>(3).map_err(err)?,
        r.try_get::<_, Option<String>>(4).map_err(err)?,
        r.try_get::<_, Option<String>>(5).map_err(err)?,
    ));
    Ok(())
}

fn bare_select(client: &mut Client, sql: &BareSql, id: &str) -> Result<usize, String> {
    let header = client.query_typed_opt(&sql.select_header, &[(&id, Type::TEXT)]).map_err(err)?;
    let header = header.ok_or_else(|| format!("no session {id:?}"))?;
    header_columns(&header)?;
    let params: [(&(dyn ToSql + Sync), Type); 1] = [(&id, Type::TEXT)];
    let mut rows = client.query_typed_raw(&sql.events, params).map_err(err)?;
    let mut n = 0;
    while let Some(r) = rows.next().map_err(err)? {
        event_columns(&r)?;
        n += 1;
    }
    Ok(n)
}

/// The bare `tokio-postgres` client, the store's own since 2026-12-05,
/// driven as a caller of an async client would: its connection a task of a
/// current-thread runtime, each call one `block_on`, rows read as a stream.
pub(crate) struct AsyncBare {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl AsyncBare {
    fn connect(url: &str) -> Result<AsyncBare, String> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(err)?;
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))
            .map_err(|e| format!("cannot reach PostgreSQL at {}: {e}", redact_url(url)))?;
        runtime.spawn(connection);
        Ok(AsyncBare { runtime, client })
    }

    /// [`bare_select`], the same columns copied out of the same rows.
    fn select(&self, sql: &BareSql, id: &str) -> Result<usize, String> {
        let client = &self.client;
        self.runtime.block_on(async {
            let header =
                client.query_typed_opt(&sql.select_header, &[(&id, Type::TEXT)]).await.map_err(err)?;
            let header = header.ok_or_else(|| format!("no session {id:?}"))?;
            header_columns(&header)?;
            let params: [(&(dyn ToSql + Sync), Type); 1] = [(&id, Type::TEXT)];
            let rows = client.query_typed_raw(&sql.events, params).await.map_err(err)?;
            let mut rows = std::pin::pin!(rows);
            let mut n = 0;
            while let Some(r) = std::future::poll_fn(|cx| rows.as_mut().poll_next(cx)).await {
                let r = r.map_err(err)?;
                event_columns(&r)?;
                n += 1;
            }
            Ok(n)
        })
    }
}

/// The second load baseline: the header row, then the event rows as
/// binary `COPY` (what the store reads since the fourth run), each column
/// read into an owned value, nothing checked.
fn bare_copy(client: &mut Client, sql: &BareSql, id: &str) -> Result<usize, String> {
    use std::io::Read as _;
    let header = client.query_typed_opt(&sql.select_header, &[(&id, Type::TEXT)]).map_err(err)?;
    let header = header.ok_or_else(|| format!("no session {id:?}"))?;
    header_columns(&header)?;
    let literal = format!("E'{}'", id.replace('\\', "\\\\").replace('\'', "''"));
    let copy = format!("{}{literal}{}", sql.copy_events.0, sql.copy_events.1);
    // All of it first, then the columns out of the one buffer: the least
    // a client can do with the stream.
    let mut bytes = Vec::new();
    client.copy_out(copy.as_str()).map_err(err)?.read_to_end(&mut bytes).map_err(err)?;
    let short = || "binary COPY: too short".to_owned();
    let take = |at: &mut usize, len: usize| -> Result<&[u8], String> {
        let b = bytes.get(*at..*at + len).ok_or_else(short)?;
        *at += len;
        Ok(b)
    };
    let mut at = 15;
    let extension = take(&mut at, 4)?;
    at += u32::from_be_bytes([extension[0], extension[1], extension[2], extension[3]]) as usize;
    let mut n = 0;
    loop {
        let fields = take(&mut at, 2)?;
        if i16::from_be_bytes([fields[0], fields[1]]) < 0 {
            break;
        }
        let mut field = || -> Result<Option<&[u8]>, String> {
            let len = take(&mut at, 4)?;
            let Ok(len) = usize::try_from(i32::from_be_bytes([len[0], len[1], len[2], len[3]])) else {
                return Ok(None);
            };
            take(&mut at, len).map(Some)
        };
        let int = |f: Option<&[u8]>| -> Result<i64, String> {
            let f = f.ok_or("a NULL bigint")?;
            Ok(i64::from_be_bytes(f.try_into().map_err(|_| "not a bigint")?))
        };
        let text =
            |f: Option<&[u8]>| f.map(|b| std::str::from_utf8(b).map(str::to_owned).map_err(err)).transpose();
        std::hint::black_box((
            int(field()?)?,
            int(field()?)?,
            text(field()?)?,
            text(field()?)?,
            text(field()?)?,
            text(field()?)?,
        ));
        n += 1;
    }
    Ok(n)
}

/// The section, processes included.
pub(crate) fn postgres(w: &Workload) -> Result<Vec<Row>, String> {
    run(w, true)
}

/// The section; `processes`: also measure writers in child processes
/// (which re-run this executable, so not under `cargo test`).
pub(crate) fn run(w: &Workload, processes: bool) -> Result<Vec<Row>, String> {
    let url = url();
    let mut scratch = Scratch::create(&url)?;
    let sql = BareSql::new(&scratch.quoted);
    let store = scratch.store(&url)?;
    let mut bare = bare_connect(&url)?;
    let runs = w.runs();
    // A transaction per turn, or per row, pays a commit (and a WAL flush)
    // each: fewer runs (5,000 single-row commits take seconds).
    let turn_runs = if w.n > 200_000 { 1 } else { runs.min(5) };
    let row_runs = 3;
    let header = &w.header;
    let turns = crate::stores::turns(w);
    let m = w.n.min(ONE_BY_ONE);

    // Writes. The store is connected once, outside the timings, like the
    // bare client; the tables are emptied before each run.
    let indexed = search_rows(&w.events);
    let mut bare_too = bare_connect(&url)?;
    let (one_batch, bare_one, bare_one_indexed) = three_way(
        runs,
        || scratch.truncate(),
        || {
            store.create_with_events(header, &w.events).map_err(err)?;
            store.sync(&header.id).map_err(err)
        },
        || bare_write(&mut bare, &sql, header, &[(true, &w.events)]),
        || bare_write_indexed(&mut bare_too, &sql, header, &w.events, &indexed),
    )?;
    let turn_txs: Vec<BareTx<'_>> =
        std::iter::once((true, &[][..])).chain(turns.iter().map(|t| (false, *t))).collect();
    let (per_turn, bare_turns) = paired(
        turn_runs,
        || scratch.truncate(),
        || write_through(&store, w, true),
        || bare_write(&mut bare, &sql, header, &turn_txs),
    )?;
    let row_txs: Vec<BareTx<'_>> =
        std::iter::once((true, &[][..])).chain(w.events[..m].chunks(1).map(|e| (false, e))).collect();
    let (each, bare_each) = paired(
        row_runs,
        || scratch.truncate(),
        || append_one_by_one(&store, w),
        || bare_write(&mut bare, &sql, header, &row_txs),
    )?;

    // Load, and resume (connect, open, load), of the whole workload. A load
    // of 10k events takes about 10 ms, where one scheduling hiccup on this
    // shared machine moves a median of 9 by a tenth: short loads are
    // repeated until each side has read about 2M events (51 runs at 10k,
    // 20 at 100k, never fewer than `runs`).
    let load_runs = (2_000_000 / w.n.max(1)).clamp(runs, 51);
    scratch.truncate()?;
    store.create_with_events(header, &w.events).map_err(err)?;
    scratch.analyze()?;
    let bare_async = AsyncBare::connect(&url)?;
    let [load, select, copied, select_async] = in_turns(
        load_runs,
        || Ok(()),
        [
            &mut || timed(&mut || load_validate(&store, &header.id)),
            &mut || timed(&mut || bare_select(&mut bare, &sql, &header.id)),
            &mut || timed(&mut || bare_copy(&mut bare_too, &sql, &header.id)),
            &mut || timed(&mut || bare_async.select(&sql, &header.id)),
        ],
    )?;
    // The same, without the surface rules: where the time goes.
    let (load_only, select_again) = paired(
        load_runs,
        || Ok(()),
        || store.load(&header.id).map_err(err),
        || bare_select(&mut bare, &sql, &header.id),
    )?;
    let (resume, bare_resume) = paired(
        load_runs,
        || Ok(()),
        || {
            let store = PgStore::connect_with(&url, options(&scratch.name)).map_err(err)?;
            let session = load_validate(&store, &header.id)?;
            Ok((store, session))
        },
        || {
            let mut client = bare_connect(&url)?;
            let n = bare_select(&mut client, &sql, &header.id)?;
            Ok((client, n))
        },
    )?;
    drop(store);

    let mut rows = vec![
        with_baseline(
            row(
                "postgres",
                "write, one batch + sync (create_with_events)",
                w,
                per_sec(w.n, one_batch),
                "ev/s",
            ),
            "bare postgres: same rows, one transaction",
            per_sec(w.n, bare_one),
        ),
        with_baseline(
            row(
                "postgres",
                "write, one batch + sync (create_with_events)",
                w,
                per_sec(w.n, one_batch),
                "ev/s",
            ),
            "bare postgres: same rows and their search rows (tokenized untimed), one transaction",
            per_sec(w.n, bare_one_indexed),
        ),
        with_baseline(
            row("postgres", "write, a batch + sync per turn", w, per_sec(w.n, per_turn), "ev/s"),
            "bare postgres: same rows, a transaction per turn",
            per_sec(w.n, bare_turns),
        ),
        with_baseline(
            row("postgres", "append one event at a time (first 5k), one sync", w, per_sec(m, each), "ev/s"),
            "bare postgres: same rows, a transaction per row",
            per_sec(m, bare_each),
        ),
        with_baseline(
            row("postgres", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "bare postgres select of the same rows",
            per_sec(w.n, select),
        ),
        with_baseline(
            row("postgres", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "bare postgres binary COPY of the same rows",
            per_sec(w.n, copied),
        ),
        with_baseline(
            row("postgres", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "bare tokio-postgres select of the same rows (one block_on per call)",
            per_sec(w.n, select_async),
        ),
        with_baseline(
            row(
                "postgres",
                "load alone (rows decoded and checked, no surface rules)",
                w,
                per_sec(w.n, load_only),
                "ev/s",
            ),
            "bare postgres select of the same rows",
            per_sec(w.n, select_again),
        ),
        with_baseline(
            row("postgres", "resume: connect, open the store, load + validate", w, ms(resume), "ms"),
            "bare postgres: connect + select of the same rows",
            ms(bare_resume),
        ),
    ];
    rows.extend(concurrency(w, &url, &scratch.name, processes)?);
    drop(scratch);
    Ok(rows)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Turns of the workload each concurrent writer appends to its own session.
const WRITER_TURNS: usize = 3;

/// The most events an append of a concurrent writer carries: the agent loop
/// appends a few at a time (a chunk, a message, a tool call).
const WRITER_BATCH: usize = 4;

/// How many sessions write at once.
const WRITERS: [usize; 3] = [1, 4, 16];

/// What each concurrent writer appends: the first [`WRITER_TURNS`] turns
/// of the workload, in appends of at most [`WRITER_BATCH`] events cut at
/// turn ends; `true` marks an append that ends a turn, which is followed
/// by a sync (the default `TurnBoundary` durability of a `DurableSession`).
struct Load {
    header: SessionHeader,
    events: Vec<Event>,
    appends: Vec<(Range<usize>, bool)>,
}

impl Load {
    fn new() -> Load {
        let (header, events) = crate::workload::generate(WRITER_TURNS * 101, 42);
        let mut appends = Vec::new();
        let mut start = 0;
        for (i, e) in events.iter().enumerate() {
            let ends_turn = e.event_type().as_str() == "turn/end";
            if ends_turn || i + 1 - start == WRITER_BATCH || i + 1 == events.len() {
                appends.push((start..i + 1, ends_turn));
                start = i + 1;
            }
        }
        Load { header, events, appends }
    }

    /// Creates the writer's session (before the clock starts).
    fn prepare(&self, store: &dyn SessionStore, id: &str) -> Result<(), String> {
        store.create(&SessionHeader { id: id.to_owned(), ..self.header.clone() }).map_err(err)
    }

    /// Appends every batch, timing each append (with its sync, if any).
    ///
    /// A sync refused with `locked` is tried again (the append is
    /// committed; only the SQLite store's checkpoint can be refused so,
    /// when other processes keep writing the file) and counted; the
    /// latency includes the retries.
    fn write(&self, store: &dyn SessionStore, id: &str) -> Result<Written, String> {
        let mut out = Written { latencies: Vec::with_capacity(self.appends.len()), retried: 0 };
        for (range, ends_turn) in &self.appends {
            let start = Instant::now();
            store.append(id, &self.events[range.clone()]).map_err(err)?;
            if *ends_turn {
                let mut tries = 0;
                loop {
                    match store.sync(id) {
                        Ok(()) => break,
                        Err(e) if e.code() == "locked" && tries < MAX_SYNC_RETRIES => tries += 1,
                        Err(e) => return Err(err(e)),
                    }
                }
                out.retried += tries;
            }
            out.latencies.push(start.elapsed());
        }
        Ok(out)
    }
}

/// How often one writer's sync is tried again after `locked` before the
/// section fails.
const MAX_SYNC_RETRIES: usize = 100;

/// What one writer measured.
struct Written {
    latencies: Vec<Duration>,
    /// Syncs refused with `locked` and tried again.
    retried: usize,
}

/// What a concurrent run measured: events per second over all writers,
/// and the 50th and 99th percentiles of every append's latency.
struct Figures {
    events_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Syncs refused with `locked` and tried again, over all writers.
    retried: usize,
}

impl Figures {
    fn of(events: usize, wall: Duration, written: Vec<Written>) -> Figures {
        let retried = written.iter().map(|w| w.retried).sum();
        let mut latencies: Vec<Duration> = written.into_iter().flat_map(|w| w.latencies).collect();
        latencies.sort_unstable();
        let at = |p: f64| {
            let i = ((latencies.len().saturating_sub(1)) as f64 * p).round() as usize;
            latencies.get(i).map_or(f64::NAN, |d| ms(*d))
        };
        Figures { events_per_sec: per_sec(events, wall), p50_ms: at(0.50), p99_ms: at(0.99), retried }
    }
}

/// `writers` threads, each with the store `open` gives it and a session of
/// its own, append the load at once.
fn in_threads(
    load: &Load,
    writers: usize,
    tag: &str,
    open: &(dyn Fn() -> Result<Arc<dyn SessionStore>, String> + Sync),
) -> Result<Figures, String> {
    let barrier = Barrier::new(writers + 1);
    let (wall, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    let id = format!("{tag}-{writers}-{i}");
                    let prepared = open().and_then(|store| load.prepare(store.as_ref(), &id).map(|()| store));
                    // Every writer reaches the barrier, ready or not.
                    barrier.wait();
                    load.write(prepared?.as_ref(), &id)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<Written, String>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer thread panicked".into())))
            .collect();
        (start.elapsed(), results)
    });
    let written = results.into_iter().collect::<Result<Vec<Written>, String>>()?;
    Ok(Figures::of(writers * load.events.len(), wall, written))
}

/// The hidden argument that makes this executable a concurrent writer.
pub(crate) const WRITER_ARG: &str = "--concurrent-writer";

/// One writer child: its stdout, and the child itself.
struct Writer {
    child: Child,
    out: BufReader<ChildStdout>,
}

/// `writers` child processes (this executable with [`WRITER_ARG`]), each
/// opening its own store (`kind` `postgres` in schema `target`, or
/// `sqlite` on file `target`) with a session of its own, append the load
/// at once: each says `ready`, all are told `go` together, and the clock
/// runs until the last one has sent its latencies.
fn in_processes(load: &Load, writers: usize, kind: &str, target: &str, tag: &str) -> Result<Figures, String> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut children: Vec<Writer> = Vec::with_capacity(writers);
    let result = (|| {
        for i in 0..writers {
            let mut child = Command::new(&exe)
                .args([WRITER_ARG, kind, target, &format!("{tag}-{writers}-{i}")])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting a writer process: {e}"))?;
            let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
            children.push(Writer { child, out });
        }
        for c in &mut children {
            let mut line = String::new();
            c.out.read_line(&mut line).map_err(err)?;
            if line.trim() != "ready" {
                return Err(format!("a writer process did not get ready (said {:?})", line.trim()));
            }
        }
        let start = Instant::now();
        for c in &mut children {
            let stdin = c.child.stdin.as_mut().ok_or("no stdin")?;
            stdin.write_all(b"go\n").and_then(|()| stdin.flush()).map_err(err)?;
        }
        let mut written = Vec::with_capacity(writers);
        for c in &mut children {
            let mut line = String::new();
            c.out.read_line(&mut line).map_err(err)?;
            let said: serde_json::Value = serde_json::from_str(line.trim())
                .map_err(|_| format!("a writer process failed (said {:?})", line.trim()))?;
            let ns = said["ns"].as_array().ok_or("a writer process sent no latencies")?;
            written.push(Written {
                latencies: ns
                    .iter()
                    .filter_map(serde_json::Value::as_u64)
                    .map(Duration::from_nanos)
                    .collect(),
                retried: said["retried"].as_u64().unwrap_or(0) as usize,
            });
        }
        Ok(Figures::of(writers * load.events.len(), start.elapsed(), written))
    })();
    // Whatever happened: close every stdin (a waiting child takes that as
    // "stop") and reap every child, keeping what a failed one said.
    let mut failures = Vec::new();
    for mut c in children {
        drop(c.child.stdin.take());
        match c.child.wait_with_output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                failures.push(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    match (result, failures.first()) {
        (Ok(f), None) => Ok(f),
        (Ok(_), Some(why)) | (Err(_), Some(why)) => Err(format!("a writer process failed: {why}")),
        (Err(e), None) => Err(e),
    }
}

/// Child side of [`in_processes`]: opens the store, creates the session, says
/// `ready`, waits for `go`, appends, and prints every append's latency in
/// nanoseconds and the syncs it tried again, as JSON (`{"ns": [...],
/// "retried": 0}`).
pub(crate) fn writer_child(kind: &str, target: &str, id: &str) -> Result<String, String> {
    let load = Load::new();
    let store: Box<dyn SessionStore> = match kind {
        "postgres" => Box::new(PgStore::connect_with(&url(), options(target)).map_err(err)?),
        "sqlite" => Box::new(SqliteStore::open(target).map_err(err)?),
        other => return Err(format!("unknown store kind {other:?}")),
    };
    load.prepare(store.as_ref(), id)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(b"ready\n").and_then(|()| stdout.flush()).map_err(err)?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(err)?;
    if line.trim() != "go" {
        return Err("stopped before the start".into());
    }
    let written = load.write(store.as_ref(), id)?;
    let ns: Vec<u64> = written.latencies.iter().map(|d| d.as_nanos() as u64).collect();
    Ok(serde_json::json!({"ns": ns, "retried": written.retried}).to_string())
}

/// The concurrency rows: 1, 4 and 16 writers, from threads (each its own
/// `PgStore`; SQLite: one `SqliteStore` shared) and, if `processes`, from
/// child processes (each its own store; SQLite: each opening the same
/// file).
fn concurrency(w: &Workload, url: &str, schema: &str, processes: bool) -> Result<Vec<Row>, String> {
    let load = Load::new();
    let tmp = tempfile::tempdir().map_err(err)?;
    let mut rows = Vec::new();
    let per_session = load.events.len();
    let mut add = |pg: Figures, lite: Figures, writers: usize, how: &str, lite_how: &str| {
        // The load (see `Load`): appends of at most WRITER_BATCH events, a
        // sync at each turn end, `per_session` events to each session.
        let retried = |n: usize| match n {
            0 => String::new(),
            n => format!(" ({n} syncs refused `locked`, tried again)"),
        };
        let what =
            format!("{writers} writer(s) at once ({per_session} ev each), {how}{}", retried(pg.retried));
        let lite_how = format!("{lite_how}{}", retried(lite.retried));
        rows.push(with_baseline(
            row("postgres", &format!("{what}: throughput"), w, pg.events_per_sec, "ev/s"),
            &format!("SQLite, {lite_how}"),
            lite.events_per_sec,
        ));
        rows.push(with_baseline(
            row("postgres", &format!("{what}: p50 append latency"), w, pg.p50_ms, "ms"),
            &format!("SQLite, {lite_how}"),
            lite.p50_ms,
        ));
        rows.push(with_baseline(
            row("postgres", &format!("{what}: p99 append latency"), w, pg.p99_ms, "ms"),
            &format!("SQLite, {lite_how}"),
            lite.p99_ms,
        ));
    };
    for writers in WRITERS {
        let pg = in_threads(&load, writers, "threads", &|| {
            Ok(Arc::new(PgStore::connect_with(url, options(schema)).map_err(err)?) as Arc<dyn SessionStore>)
        })?;
        let file = tmp.path().join(format!("threads-{writers}.db"));
        let shared: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&file).map_err(err)?);
        let lite = in_threads(&load, writers, "threads", &|| Ok(Arc::clone(&shared)))?;
        add(pg, lite, writers, "threads, a PgStore each", "threads sharing one store");
    }
    if processes {
        for writers in WRITERS {
            let pg = in_processes(&load, writers, "postgres", schema, "processes")?;
            let file = tmp.path().join(format!("processes-{writers}.db"));
            // Created here, so the children race only to write, not to initialise.
            drop(SqliteStore::open(&file).map_err(err)?);
            let lite = in_processes(&load, writers, "sqlite", &path_str(&file)?, "processes")?;
            add(pg, lite, writers, "processes, a PgStore each", "processes, one file");
        }
    }
    Ok(rows)
}

fn path_str(p: &Path) -> Result<String, String> {
    p.to_str().map(str::to_owned).ok_or_else(|| format!("not a UTF-8 path: {}", p.display()))
}
