//! The search section: `SessionStore::search` on a store of many sessions
//! (1,000 at the suite's sizes), in JSONL (the reference scan), SQLite
//! (FTS5) and PostgreSQL (tsvector + GIN), each query beside a baseline.
//!
//! The corpus is the workload of [`crate::workload`] at 50 to 200 events a
//! session, its texts drawing half their words from 5,000 made-up rare
//! ones, each session's clock an hour after the previous one's. Queries,
//! all with the CLI's default limit of 20: a common word (in nearly every
//! message), a rare word (in about a hundred messages), two rare words
//! (in a few, or none), and a word that is nowhere (every candidate path
//! and the whole scan run to the end).
//!
//! Baselines: for JSONL, reading every file and looking for the words with
//! `str::contains` (what any scan costs at least); for SQLite and
//! PostgreSQL, the reference scan ([`palimpsest_persistence::search::scan`])
//! of the same store, so the ratio is the index's speed-up.
//!
//! And what the index costs a writer: the corpus written through the store
//! (one `create_with_events` a session, index rows included) beside the
//! same session and event rows inserted bare, without an index.

use std::sync::atomic::{AtomicBool, Ordering};

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::search::scan;
use palimpsest_persistence::{SearchQuery, SessionStore};
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::measure::median;
use crate::report::Row;
use crate::sections::with_baseline;
use crate::stores::err;
use crate::Workload;

/// Sessions in the store at the suite's sizes.
pub(crate) const SESSIONS: usize = 1_000;

/// Set once the section ran: the corpus does not depend on the workload
/// size, so it is measured at the first size only.
static DONE: AtomicBool = AtomicBool::new(false);

/// The queries, by name.
const QUERIES: [(&str, &[&str]); 4] = [
    ("a common word", &["compaction"]),
    ("a rare word", &["term1234"]),
    ("two rare words", &["term17", "term4000"]),
    ("a word that is nowhere", &["nowhere"]),
];

/// The corpus: `sessions` sessions of 50 to 200 events.
fn corpus(sessions: usize) -> Vec<(SessionHeader, Vec<Event>)> {
    (0..sessions)
        .map(|i| {
            let n = 50 + (i * 37) % 151;
            let (header, events) = crate::workload::generate_searchable(n, 1_000 + i as u64);
            let shift = i as u64 * 3_600_000;
            let events = events
                .iter()
                .map(|e| e.with_seq_and_time(e.seq(), e.time() + shift).expect("a later time is valid"))
                .collect();
            (header, events)
        })
        .collect()
}

fn fill(store: &dyn SessionStore, corpus: &[(SessionHeader, Vec<Event>)]) -> Result<(), String> {
    for (header, events) in corpus {
        store.create_with_events(header, events).map_err(err)?;
    }
    Ok(())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One query's time on `store`, in ms, and its hits.
fn timed(store: &dyn SessionStore, q: &SearchQuery, runs: usize) -> Result<(f64, usize), String> {
    let hits = store.search(q).map_err(err)?.len();
    Ok((ms(median(runs, || (), |()| store.search(q))), hits))
}

pub(crate) fn search(w: &Workload) -> Result<Vec<Row>, String> {
    run(w, SESSIONS)
}

/// The section with `sessions` sessions (fewer in the suite's own test).
pub(crate) fn run(w: &Workload, sessions: usize) -> Result<Vec<Row>, String> {
    if DONE.swap(true, Ordering::SeqCst) {
        return Ok(Vec::new());
    }
    let corpus = corpus(sessions);
    let events: usize = corpus.iter().map(|(_, e)| e.len()).sum();
    let runs = 5;
    let tmp = tempfile::tempdir().map_err(err)?;
    let jsonl = JsonlStore::open(tmp.path().join("jsonl")).map_err(err)?;
    fill(&jsonl, &corpus)?;
    let sqlite = SqliteStore::open(tmp.path().join("search.db")).map_err(err)?;
    fill(&sqlite, &corpus)?;
    let url = crate::pg::url();
    let scratch = crate::pg::Scratch::create(&url)?;
    let pg = scratch.store(&url)?;
    fill(&pg, &corpus)?;

    let row = |name: String, value: f64| Row {
        section: "search",
        name,
        n: events,
        value,
        unit: "ms",
        baseline: None,
        higher_is_better: false,
    };
    let mut rows = write_rows(&corpus, events, &tmp, &url)?;
    let files: Vec<std::path::PathBuf> =
        corpus.iter().map(|(h, _)| jsonl.path_of(&h.id).map_err(err)).collect::<Result<_, _>>()?;
    for (what, words) in QUERIES {
        let q = SearchQuery::new(words).map_err(err)?.with_limit(20);
        let (j, hits) = timed(&jsonl, &q, runs)?;
        let grep = median(
            runs,
            || (),
            |()| {
                files
                    .iter()
                    .filter(|f| {
                        let text = std::fs::read_to_string(f)
                            .expect("the baseline reads the files the section just wrote");
                        words.iter().all(|w| text.contains(w))
                    })
                    .count()
            },
        );
        rows.push(with_baseline(
            row(format!("JSONL, {sessions} sessions: {what} ({hits} hits shown)"), j),
            "read every file, str::contains the words",
            ms(grep),
        ));
        for (kind, store) in
            [("SQLite", &sqlite as &dyn SessionStore), ("PostgreSQL", &pg as &dyn SessionStore)]
        {
            let (t, own_hits) = timed(store, &q, runs)?;
            if own_hits != hits {
                return Err(format!("{kind} found {own_hits} hits for {words:?}, JSONL {hits}"));
            }
            let reference = median(runs.min(3), || (), |()| scan(store, &q));
            rows.push(with_baseline(
                row(format!("{kind}, {sessions} sessions: {what}"), t),
                "the reference scan of the same store",
                ms(reference),
            ));
        }
    }
    drop(pg);
    drop(scratch);
    let _ = w;
    Ok(rows)
}

/// The corpus written through each store beside the same rows inserted
/// bare (no index, no checks), paired run by run.
fn write_rows(
    corpus: &[(SessionHeader, Vec<Event>)],
    events: usize,
    tmp: &tempfile::TempDir,
    url: &str,
) -> Result<Vec<Row>, String> {
    let runs = 3;
    let k = std::cell::Cell::new(0);
    let next = || {
        k.set(k.get() + 1);
        tmp.path().join(format!("write{}.db", k.get()))
    };
    let (ours, bare) = crate::pg::paired(
        runs,
        || Ok(()),
        || fill(&SqliteStore::open(next()).map_err(err)?, corpus),
        || bare_sqlite(&next(), corpus),
    )?;
    let mut scratch = crate::pg::Scratch::create(url)?;
    let store = scratch.store(url)?;
    let sql = crate::pg::BareSql::new(scratch.quoted());
    let mut client = crate::pg::bare_connect(url)?;
    let (pg_ours, pg_bare) = crate::pg::paired(
        runs,
        || scratch.truncate(),
        || fill(&store, corpus),
        || {
            for (header, events) in corpus {
                crate::pg::bare_write(&mut client, &sql, header, &[(true, events)])?;
            }
            Ok(())
        },
    )?;
    let write = |name: String, d: std::time::Duration| Row {
        section: "search",
        name,
        n: events,
        value: crate::sections::per_sec(events, d),
        unit: "ev/s",
        baseline: None,
        higher_is_better: true,
    };
    let sessions = corpus.len();
    Ok(vec![
        with_baseline(
            write(
                format!("SQLite: write {sessions} sessions, one create_with_events each (index included)"),
                ours,
            ),
            "bare rusqlite insert of the same rows, no index",
            crate::sections::per_sec(events, bare),
        ),
        with_baseline(
            write(
                format!(
                    "PostgreSQL: write {sessions} sessions, one create_with_events each (index included)"
                ),
                pg_ours,
            ),
            "bare postgres insert of the same rows, no index",
            crate::sections::per_sec(events, pg_bare),
        ),
    ])
}

/// The bare SQLite baseline: the schema of today without the index, each
/// session (its row and its events) in one transaction.
fn bare_sqlite(path: &std::path::Path, corpus: &[(SessionHeader, Vec<Event>)]) -> Result<(), String> {
    let mut conn = rusqlite::Connection::open(path).map_err(err)?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;").map_err(err)?;
    let tables =
        palimpsest_persistence_sqlite::SCHEMA_SQL.split("CREATE VIRTUAL TABLE").next().unwrap_or_default();
    conn.execute_batch(tables).map_err(err)?;
    for (header, events) in corpus {
        let tx = conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO sessions (id, created_at, cwd, parent_session, seed_length) VALUES (?1, ?2, NULL, NULL, NULL)",
            rusqlite::params![header.id, header.created_at as i64],
        )
        .map_err(err)?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO events (session_id, seq, time, type, data, source_event_seqs, surface_op) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(err)?;
            for e in events {
                let sources = e.source_event_seqs().map(palimpsest_persistence::rows::sources_json);
                let op = e.surface_op().map(palimpsest_persistence::rows::surface_op_json);
                stmt.execute(rusqlite::params![
                    header.id,
                    e.seq() as i64,
                    e.time() as i64,
                    e.event_type().as_str(),
                    e.data(),
                    sources,
                    op
                ])
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
    }
    Ok(())
}
