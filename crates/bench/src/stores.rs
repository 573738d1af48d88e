//! The store sections: JSONL and SQLite writes and loads, each beside a
//! baseline doing the same I/O on the same bytes or rows with no validation.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use palimpsest_core_session::Session;
use palimpsest_persistence::{load_session, SessionStore};
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::measure::{median, medians_alternated};
use crate::report::Row;
use crate::sections::{per_sec, row, with_baseline};
use crate::Workload;

pub(crate) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The workload's events cut into per-turn batches.
pub(crate) fn turns(w: &Workload) -> Vec<&[palimpsest_core_session::Event]> {
    let mut start = 0;
    w.turn_ends
        .iter()
        .map(|&end| {
            let batch = &w.events[start..end];
            start = end;
            batch
        })
        .collect()
}

/// Writes the workload through a store: one batch, or one batch and one
/// sync per turn.
pub(crate) fn write_through(store: &dyn SessionStore, w: &Workload, per_turn: bool) -> Result<(), String> {
    store.create(&w.header).map_err(err)?;
    if per_turn {
        for batch in turns(w) {
            store.append(&w.header.id, batch).map_err(err)?;
            store.sync(&w.header.id).map_err(err)?;
        }
    } else {
        store.append(&w.header.id, &w.events).map_err(err)?;
        store.sync(&w.header.id).map_err(err)?;
    }
    Ok(())
}

/// How many events the one-at-a-time appends write: what an agent loop
/// does all day, measured on a prefix so the suite stays quick.
pub(crate) const ONE_BY_ONE: usize = 5_000;
/// Runs of the one-at-a-time rows at least, whatever the workload's size.
const ONE_BY_ONE_RUNS: usize = 15;

/// Appends the first events through a store one at a time, then syncs once.
pub(crate) fn append_one_by_one(store: &dyn SessionStore, w: &Workload) -> Result<usize, String> {
    store.create(&w.header).map_err(err)?;
    let events = &w.events[..w.n.min(ONE_BY_ONE)];
    for e in events {
        store.append(&w.header.id, std::slice::from_ref(e)).map_err(err)?;
    }
    store.sync(&w.header.id).map_err(err)?;
    Ok(events.len())
}

/// What opening a session costs a user: [`load_session`], which checks the
/// events as the store reads them (what `DurableSession::open` does).
pub(crate) fn load_validate(store: &dyn SessionStore, id: &str) -> Result<Session, String> {
    load_session(store, id, None).map(|(session, _)| session).map_err(err)
}

pub(crate) fn jsonl(w: &Workload) -> Result<Vec<Row>, String> {
    let runs = w.runs();
    let tmp = tempfile::tempdir().map_err(err)?;
    let mut k = 0;
    let mut fresh_dir = || {
        k += 1;
        tmp.path().join(format!("run{k}"))
    };
    let write = |per_turn: bool, dir: &Path| -> Result<(), String> {
        let store = JsonlStore::open(dir).map_err(err)?;
        write_through(&store, w, per_turn)
    };
    let one_batch = median(runs, &mut fresh_dir, |dir| write(false, &dir));
    let per_turn_runs = if w.n > 200_000 { 1 } else { runs.min(3) };
    let per_turn = median(per_turn_runs, &mut fresh_dir, |dir| write(true, &dir));
    // Baselines: the same bytes, written and synced, in one go or per turn.
    let header_len = palimpsest_core_session::jsonl::header_line(&w.header).len();
    // Each turn's bytes in the file, measured here, outside the timings.
    let turn_lens: Vec<usize> =
        turns(w).iter().map(|batch| batch.iter().map(|e| e.to_json().len() + 1).sum()).collect();
    let raw = |per_turn: bool, dir: &Path| -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut f = std::fs::File::create(dir.join("raw.jsonl")).map_err(err)?;
        if per_turn {
            f.write_all(&w.bytes[..header_len]).map_err(err)?;
            let mut at = header_len;
            for &len in &turn_lens {
                f.write_all(&w.bytes[at..at + len]).and_then(|()| f.sync_data()).map_err(err)?;
                at += len;
            }
            Ok(())
        } else {
            f.write_all(&w.bytes).and_then(|()| f.sync_all()).map_err(err)
        }
    };
    let raw_one = median(runs, &mut fresh_dir, |dir| raw(false, &dir));
    let raw_turns = median(per_turn_runs, &mut fresh_dir, |dir| raw(true, &dir));
    // Load: the store's own read, decode and a full Session seed, against
    // reading the same file and parsing each line into a serde_json::Value.
    let dir = fresh_dir();
    write(false, &dir)?;
    let load =
        median(runs, || JsonlStore::open(&dir).map_err(err), |store| load_validate(&store?, &w.header.id));
    let m = w.n.min(ONE_BY_ONE);
    // Against a baseline of the same lines, one write each, then one fsync;
    // a few milliseconds each, so timed in turns, and more often.
    let (each, raw_each) = medians_alternated(
        &format!("the jsonl appends of the first {m} events one at a time against raw writes"),
        runs.max(ONE_BY_ONE_RUNS),
        &mut fresh_dir,
        |dir| append_one_by_one(&JsonlStore::open(&dir).map_err(err)?, w),
        |dir| -> Result<(), String> {
            std::fs::create_dir_all(&dir).map_err(err)?;
            let mut f = std::fs::File::create(dir.join("raw.jsonl")).map_err(err)?;
            f.write_all(&w.bytes[..header_len]).map_err(err)?;
            for e in &w.events[..m] {
                // Room for the envelope (~90 bytes) too: no reallocation.
                let mut line = Vec::with_capacity(e.data().len() + 160);
                e.write_json(&mut line);
                line.push(b'\n');
                f.write_all(&line).map_err(err)?;
            }
            f.sync_all().map_err(err)
        },
    );
    let file = JsonlStore::open(&dir).map_err(err)?.path_of(&w.header.id).map_err(err)?;
    let values = median(
        runs,
        || (),
        |()| {
            let bytes = std::fs::read(&file).expect("the baseline reads the file the section just wrote");
            bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
                .count()
        },
    );
    Ok(vec![
        with_baseline(
            row("jsonl", "write, one batch + sync", w, per_sec(w.n, one_batch), "ev/s"),
            "same bytes: write + fsync",
            per_sec(w.n, raw_one),
        ),
        with_baseline(
            row("jsonl", "write, a batch + sync per turn", w, per_sec(w.n, per_turn), "ev/s"),
            "same bytes: write + fdatasync per turn",
            per_sec(w.n, raw_turns),
        ),
        with_baseline(
            row("jsonl", "append one event at a time (first 5k), one sync", w, per_sec(m, each), "ev/s"),
            "same lines: one write each, one fsync",
            per_sec(m, raw_each),
        ),
        with_baseline(
            row("jsonl", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "same file: serde_json::Value per line",
            per_sec(w.n, values),
        ),
    ])
}

/// The search rows the store writes beside the workload's events, by
/// position (`None`: the event has none): each message's distinct index
/// tokens, as `SqliteStore::append` makes them.
fn search_rows(w: &Workload) -> Vec<Option<String>> {
    use palimpsest_core_session::search::{index_text, searchable_text};
    w.events.iter().map(|e| searchable_text(e).map(|t| index_text(&t)).filter(|t| !t.is_empty())).collect()
}

/// The bare rusqlite baseline: the same schema and rows, no validation.
/// Each batch is one transaction; a checkpoint (what the store's `sync`
/// does) follows every batch, or only the last one. With `search`, each
/// event's search row (made before the clock starts) is inserted too.
fn bare_insert(
    path: &Path,
    w: &Workload,
    batches: &[&[palimpsest_core_session::Event]],
    checkpoint_each: bool,
    search: Option<&[Option<String>]>,
) -> Result<(), String> {
    let mut conn = rusqlite::Connection::open(path).map_err(err)?;
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;").map_err(err)?;
    conn.execute_batch(palimpsest_persistence_sqlite::SCHEMA_SQL).map_err(err)?;
    let insert = |tx: &rusqlite::Transaction<'_>,
                  batch: &[palimpsest_core_session::Event]|
     -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO events (session_id, seq, time, type, data, source_event_seqs, surface_op) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut index =
            tx.prepare_cached("INSERT INTO search (session_id, seq, text) VALUES (?1, ?2, ?3)")?;
        for e in batch {
            let tokens = search.and_then(|rows| rows.get(e.seq() as usize)).and_then(Option::as_ref);
            if let Some(tokens) = tokens {
                index.execute(rusqlite::params![w.header.id, e.seq() as i64, tokens])?;
            }
            let sources = e.source_event_seqs().map(palimpsest_persistence::rows::sources_json);
            let op = e.surface_op().map(palimpsest_persistence::rows::surface_op_json);
            stmt.execute(rusqlite::params![
                w.header.id,
                e.seq() as i64,
                e.time() as i64,
                e.event_type().as_str(),
                e.data(),
                sources,
                op
            ])?;
        }
        Ok(())
    };
    for (i, batch) in batches.iter().enumerate() {
        let tx = conn.transaction().map_err(err)?;
        insert(&tx, batch).map_err(err)?;
        tx.commit().map_err(err)?;
        if checkpoint_each || i + 1 == batches.len() {
            conn.execute_batch("PRAGMA wal_checkpoint(FULL)").map_err(err)?;
        }
    }
    Ok(())
}

/// Turns of the load against the bare select, whatever the size: one
/// turn at 1M costs under two seconds here.
const LOAD_TURNS: usize = 7;

/// One row of the bare select, its texts owned as a load's would be.
type BareRow = (i64, i64, String, String, Option<String>, Option<String>);

/// The bare rusqlite select of a session's rows, each row handed to
/// `take` as read: dropped at once (`select`), or kept (`select, rows
/// kept`), so that the rows' memory is touched as a load's must be.
fn bare_select<T>(path: &Path, id: &str, mut take: impl FnMut(BareRow) -> T) -> Result<Vec<T>, String> {
    let conn = rusqlite::Connection::open(path).map_err(err)?;
    let mut stmt = conn
        .prepare("SELECT seq, time, type, data, source_event_seqs, surface_op FROM events WHERE session_id = ?1 ORDER BY seq")
        .map_err(err)?;
    let rows = stmt
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .map_err(err)?;
    let mut kept = Vec::new();
    for r in rows {
        kept.push(take(r.map_err(err)?));
    }
    Ok(kept)
}

pub(crate) fn sqlite(w: &Workload) -> Result<Vec<Row>, String> {
    let runs = w.runs();
    let tmp = tempfile::tempdir().map_err(err)?;
    let mut k = 0;
    let mut fresh = || {
        k += 1;
        tmp.path().join(format!("run{k}.db"))
    };
    let write = |per_turn: bool, path: &Path| -> Result<(), String> {
        let store = Arc::new(SqliteStore::open(path).map_err(err)?);
        write_through(store.as_ref(), w, per_turn)
    };
    let per_turn_runs = if w.n > 200_000 { 1 } else { runs.min(3) };
    let one_batch = median(runs, &mut fresh, |p| write(false, &p));
    let per_turn = median(per_turn_runs, &mut fresh, |p| write(true, &p));
    let bare_one = median(runs, &mut fresh, |p| bare_insert(&p, w, &[&w.events[..]], true, None));
    let search = search_rows(w);
    let bare_one_indexed =
        median(runs, &mut fresh, |p| bare_insert(&p, w, &[&w.events[..]], true, Some(&search)));
    let bare_turns = median(per_turn_runs, &mut fresh, |p| bare_insert(&p, w, &turns(w), true, None));
    let m = w.n.min(ONE_BY_ONE);
    let each = median(runs, &mut fresh, |p| {
        append_one_by_one(Arc::new(SqliteStore::open(&p).map_err(err)?).as_ref(), w)
    });
    // Baseline: one transaction per row, one checkpoint at the end.
    let rows: Vec<&[palimpsest_core_session::Event]> = w.events[..m].chunks(1).collect();
    let bare_each = median(runs, &mut fresh, |p| bare_insert(&p, w, &rows, false, None));
    let db = fresh();
    write(false, &db)?;
    let loads = sqlite_loads(w, &db)?;
    Ok([
        vec![
            with_baseline(
                row("sqlite", "write, one batch + sync", w, per_sec(w.n, one_batch), "ev/s"),
                "bare rusqlite insert, one transaction",
                per_sec(w.n, bare_one),
            ),
            // The store also writes the search rows of its messages (FTS5),
            // which cost SQLite ~40% of a batch write (docs/performance.md):
            // the same statements, bare, are the fair measure of its own work.
            with_baseline(
                row("sqlite", "write, one batch + sync", w, per_sec(w.n, one_batch), "ev/s"),
                "bare rusqlite insert with the search rows (tokenized untimed), one transaction",
                per_sec(w.n, bare_one_indexed),
            ),
            with_baseline(
                row("sqlite", "write, a batch + sync per turn", w, per_sec(w.n, per_turn), "ev/s"),
                "bare rusqlite insert, a transaction per turn",
                per_sec(w.n, bare_turns),
            ),
            with_baseline(
                row("sqlite", "append one event at a time (first 5k), one sync", w, per_sec(m, each), "ev/s"),
                "bare rusqlite insert, a transaction per row",
                per_sec(m, bare_each),
            ),
        ],
        loads,
    ]
    .concat())
}

/// The `sqlite-load` section: the `sqlite` section's loads alone, on a
/// store written once, for working on the load without the minutes of
/// writes before it.
pub(crate) fn sqlite_load(w: &Workload) -> Result<Vec<Row>, String> {
    let tmp = tempfile::tempdir().map_err(err)?;
    let db = tmp.path().join("load.db");
    write_through(&SqliteStore::open(&db).map_err(err)?, w, false)?;
    sqlite_loads(w, &db)
}

/// The load of the store `db`, which holds the workload, against bare
/// selects of its rows.
fn sqlite_loads(w: &Workload, db: &Path) -> Result<Vec<Row>, String> {
    let runs = w.runs();
    // Timed in turns: runs one after the other drifted apart by more than
    // the goal's margin. A store is opened before each run of either and
    // closed after its timing; the select does not use it. `()` for each
    // selected row: the Vec holds no memory, the rows are dropped as read.
    // Seven turns at least: at 1M the median of three swung by more than
    // the goal's margin on a noisy VM, for the same binary from one
    // process to the next (docs/performance.md, fifteenth session).
    let (load, select) = medians_alternated(
        &format!("the sqlite load + validate of {} events against the bare select", w.n),
        runs.max(LOAD_TURNS),
        || SqliteStore::open(db).map_err(err),
        |store| store.map(|store| (load_validate(&store, &w.header.id), store)),
        |store| (bare_select(db, &w.header.id, |row| drop(std::hint::black_box(row))), store),
    );
    let select_kept = median(runs, || (), |()| bare_select(db, &w.header.id, |row| row));
    Ok(vec![
        with_baseline(
            row("sqlite", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "bare rusqlite select of the same rows",
            per_sec(w.n, select),
        ),
        // The same load against a select that keeps what it read: a load
        // must touch as much fresh memory as it holds, a select that drops
        // each row touches almost none (docs/performance.md, item 4).
        with_baseline(
            row("sqlite", "load + validate into a Session", w, per_sec(w.n, load), "ev/s"),
            "bare rusqlite select, rows kept in a Vec",
            per_sec(w.n, select_kept),
        ),
    ])
}
