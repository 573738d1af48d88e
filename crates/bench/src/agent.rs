//! The `loop` section (issues 17 and 20): the agent loop itself, run
//! against each store with a scripted model that streams with no pacing,
//! so what is measured is the loop's own cost and its store's.
//!
//! Each turn is a user message, a step whose model streams
//! [`CHUNKS_PER_TURN`] text deltas, and the turn's brackets. With the
//! loop's flush window at 0 every delta is its own `assistant/chunk`
//! event (the most appends a stream can cause); with the default window
//! the deltas of a fast stream are grouped into few events. Durability is
//! the default (`TurnBoundary`: a sync at each turn's end). The in-memory
//! store is the same-run baseline: the other stores' figures over it are
//! what the store costs the loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, DevMode, ScriptedProvider, ScriptedResponse, TurnInput, DEFAULT_CHUNK_WINDOW_MS,
};
use palimpsest_persistence::{MemoryStore, SessionStore};
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::report::Row;
use crate::Workload;

/// Text deltas the model streams in each turn.
pub(crate) const CHUNKS_PER_TURN: usize = 100;

/// How many turns a run of the section makes for a workload of `n` events:
/// about as many events as the workload has with one event per delta,
/// within bounds that keep the section to a few seconds.
fn turns_for(n: usize) -> usize {
    (n / (CHUNKS_PER_TURN + 6)).clamp(5, 200)
}

/// A model that streams `CHUNKS_PER_TURN` deltas of a few characters each
/// turn, then ends its answer.
fn provider(turns: usize) -> Arc<ScriptedProvider> {
    let reply = || {
        (0..CHUNKS_PER_TURN)
            .fold(ScriptedResponse::new(), |r, i| r.text(0, &format!("word{i} ")))
            .usage(10, 20)
    };
    Arc::new(ScriptedProvider::new((0..turns).map(|_| reply())))
}

/// Runs `turns` turns over `store` with flush window `window_ms`; returns
/// the events the loop appended and the wall time the turns took.
fn run(store: Arc<dyn SessionStore>, turns: usize, window_ms: u64) -> Result<(u64, Duration), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let config = AgentConfig::default().with_dev_mode(DevMode::Off).with_chunk_window_ms(window_ms);
    let mut agent = AgentLoop::builder(provider(turns))
        .config(config)
        .create(store, "bench-loop")
        .map_err(|e| e.to_string())?;
    let before = agent.session().next_seq();
    let started = Instant::now();
    runtime.block_on(async {
        for t in 0..turns {
            agent.run_turn(TurnInput::text(format!("question {t}"))).await.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    })?;
    let took = started.elapsed();
    Ok((agent.session().next_seq() - before, took))
}

/// A store the loop runs over, and its name in the report.
type Named = (&'static str, Arc<dyn SessionStore>);

/// The stores the section runs the loop over, each opened afresh.
fn stores(dir: &std::path::Path, pg: Option<(&crate::pg::Scratch, &str)>) -> Result<Vec<Named>, String> {
    let err = |e: palimpsest_persistence::StoreError| e.to_string();
    let mut stores: Vec<Named> = vec![
        ("memory", Arc::new(MemoryStore::default())),
        ("JSONL", Arc::new(JsonlStore::open(dir.join("jsonl")).map_err(err)?)),
        ("SQLite", Arc::new(SqliteStore::open(dir.join("loop.db")).map_err(err)?)),
    ];
    if let Some((scratch, url)) = pg {
        stores.push(("PostgreSQL", Arc::new(scratch.store(url)?)));
    }
    Ok(stores)
}

pub(crate) fn agent_loop(w: &Workload) -> Result<Vec<Row>, String> {
    let turns = turns_for(w.n);
    let url = crate::pg::url();
    let mut rows = Vec::new();
    for window in [0, DEFAULT_CHUNK_WINDOW_MS] {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let scratch = crate::pg::Scratch::create(&url)?;
        let mut baseline = None;
        for (name, store) in stores(dir.path(), Some((&scratch, &url)))? {
            let (events, took) = run(store, turns, window)?;
            let per_sec = events as f64 / took.as_secs_f64().max(1e-9);
            let chunks = (turns * CHUNKS_PER_TURN) as f64;
            let us_per_chunk = took.as_secs_f64() * 1e6 / chunks;
            let how = if window == 0 { "one event per delta" } else { "default flush window" };
            let (base_rate, base_us) = *baseline.get_or_insert((per_sec, us_per_chunk));
            let label = format!("loop over {name}, {turns} turns of {CHUNKS_PER_TURN} deltas, {how}");
            rows.push(Row {
                section: "loop",
                name: format!("{label}: events/s"),
                n: w.n,
                value: per_sec,
                unit: "ev/s",
                baseline: Some(("the loop over the in-memory store".into(), base_rate)),
                higher_is_better: true,
            });
            let base_turn = base_us * chunks / turns as f64 / 1000.0;
            rows.push(Row {
                section: "loop",
                name: format!("{label}: per turn"),
                n: w.n,
                value: took.as_secs_f64() * 1e3 / turns as f64,
                unit: "ms",
                baseline: Some(("the loop over the in-memory store".into(), base_turn)),
                higher_is_better: false,
            });
            rows.push(Row {
                section: "loop",
                name: format!("{label}: per streamed delta"),
                n: w.n,
                value: us_per_chunk,
                unit: "µs",
                baseline: Some(("the loop over the in-memory store".into(), base_us)),
                higher_is_better: false,
            });
        }
    }
    Ok(rows)
}
