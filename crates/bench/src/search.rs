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
    let files: Vec<std::path::PathBuf> =
        corpus.iter().map(|(h, _)| jsonl.path_of(&h.id).map_err(err)).collect::<Result<_, _>>()?;
    let mut rows = Vec::new();
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
                        let text = std::fs::read_to_string(f).unwrap_or_default();
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
