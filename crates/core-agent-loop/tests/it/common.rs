//! The harness: deterministic loops, the stores every scenario runs
//! against, the canonical rendering that is snapshotted, and test tools.

use std::sync::{Arc, Mutex};

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, AgentLoopBuilder, DevMode, FnTool, ManualClock, Plugin, Provider,
    ScriptedProvider, SequentialIds, ToolContext, ToolError, ToolRegistry,
};
use palimpsest_core_session::payload::Block;
use palimpsest_core_session::{Event, Session};
use palimpsest_persistence::{MemoryStore, SessionStore};
use tempfile::TempDir;

/// The session every scenario writes.
pub(crate) const SID: &str = "s1";
/// The clock's start: every event time is T0 plus its reading number.
pub(crate) const T0: u64 = 1_700_000_000_000;

/// A deterministic loop: ticking manual clock, ids `m1, m2, ...`, dev mode on.
pub(crate) fn builder(provider: &Arc<ScriptedProvider>) -> AgentLoopBuilder {
    resumed_builder(provider, T0, "m")
}

/// Like [`builder`], for a loop that continues a session: a later clock and
/// another id prefix, so times still rise and ids stay unique.
pub(crate) fn resumed_builder(
    provider: &Arc<ScriptedProvider>,
    start: u64,
    id_prefix: &str,
) -> AgentLoopBuilder {
    let provider: Arc<dyn Provider> = provider.clone();
    AgentLoop::builder(provider)
        .clock(Arc::new(ManualClock::new(start).with_tick(1)))
        .ids(Arc::new(SequentialIds::new(id_prefix)))
        .config(
            // One event per delta: the scenarios pin chunk-level provenance;
            // coalescing has its own tests (`coalescing.rs`).
            AgentConfig::default()
                .with_system_prompt("You are a test agent.")
                .with_dev_mode(DevMode::On)
                .with_chunk_window_ms(0),
        )
        .tools(tools())
}

/// Where a scenario's session lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Memory,
    Jsonl,
    Sqlite,
}

/// One store backend for one scenario run. [`Backend::store`] opens a fresh
/// handle on the same data each time (the in-memory store is shared), so a
/// scenario can drop its handles and reopen, as a restarted process would.
pub(crate) struct Backend {
    pub(crate) kind: Kind,
    dir: TempDir,
    memory: Arc<MemoryStore>,
}

impl Backend {
    pub(crate) fn new(kind: Kind) -> Backend {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("cannot create a temp dir: {e}"),
        };
        Backend { kind, dir, memory: Arc::new(MemoryStore::default()) }
    }

    /// The JSONL store's directory (of a [`Kind::Jsonl`] backend).
    pub(crate) fn jsonl_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("sessions")
    }

    pub(crate) fn store(&self) -> Arc<dyn SessionStore> {
        match self.kind {
            Kind::Memory => self.memory.clone(),
            Kind::Jsonl => match palimpsest_persistence_jsonl::JsonlStore::open(self.jsonl_dir()) {
                Ok(s) => Arc::new(s),
                Err(e) => panic!("cannot open the JSONL store: {e}"),
            },
            Kind::Sqlite => {
                match palimpsest_persistence_sqlite::SqliteStore::open(self.dir.path().join("s.db")) {
                    Ok(s) => Arc::new(s),
                    Err(e) => panic!("cannot open the SQLite store: {e}"),
                }
            }
        }
    }
}

/// Every backend a scenario runs against.
pub(crate) fn backends() -> Vec<Backend> {
    [Kind::Memory, Kind::Jsonl, Kind::Sqlite].into_iter().map(Backend::new).collect()
}

/// Runs `scenario` against every backend, reloads what it wrote from a
/// fresh store handle, checks that the stored log passes every rule and
/// invariant, that every backend stored the same bytes, and snapshots it.
pub(crate) async fn check(name: &str, scenario: impl AsyncFn(&Backend)) {
    let mut first: Option<(Kind, String)> = None;
    for backend in backends() {
        scenario(&backend).await;
        let rendered = render(&reload(&backend.store()));
        match &first {
            None => first = Some((backend.kind, rendered)),
            Some((kind, expected)) => {
                assert_eq!(&rendered, expected, "{:?} stored a different log than {kind:?}", backend.kind)
            }
        }
    }
    if let Some((_, rendered)) = first {
        insta::with_settings!({ prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, rendered);
        });
    }
}

/// Loads [`SID`] and checks it: every surface rule and, through the dev-mode
/// guard, every invariant.
pub(crate) fn reload(store: &Arc<dyn SessionStore>) -> Session {
    let stored = match store.load(SID) {
        Ok(s) => s,
        Err(e) => panic!("cannot load {SID}: {e}"),
    };
    let violations = palimpsest_invariants::check_log(&stored.events);
    assert!(violations.is_empty(), "invariant violations: {violations:?}");
    match Session::from_log_guarded(stored.header, stored.events, DevMode::On.guard()) {
        Ok(s) => s,
        Err(e) => panic!("the stored log is invalid: {e}"),
    }
}

/// The canonical text of a session: header and log as JSONL, the surface,
/// and the derived history (seq, type, message as logged).
pub(crate) fn render(session: &Session) -> String {
    let mut out = String::new();
    out.push_str("# log\n");
    out.push_str(&session.header().to_json());
    out.push('\n');
    for e in session.events() {
        out.push_str(&e.to_json());
        out.push('\n');
    }
    out.push_str(&format!("# surface\n{:?}\n# derived\n", session.surface()));
    for m in session.derive_messages() {
        out.push_str(&format!("{} {} {}\n", m.seq, m.event_type, m.raw.get()));
    }
    out
}

/// The event types of a log, in order.
pub(crate) fn types(session: &Session) -> Vec<String> {
    session.events().iter().map(|e| e.event_type().to_string()).collect()
}

/// A plugin that only watches events, calling `f` on each.
pub(crate) struct Watch<F>(pub(crate) F);

impl<F: FnMut(&Event, &Session) + Send + Sync> Plugin for Watch<F> {
    fn name(&self) -> &str {
        "watch"
    }

    fn on_event(&mut self, event: &Event, session: &Session) {
        (self.0)(event, session)
    }
}

fn arg<'a>(args: &'a serde_json::Value, key: &str) -> Result<&'a serde_json::Value, ToolError> {
    args.get(key).ok_or_else(|| ToolError::invalid_arguments(format!("missing `{key}`")))
}

fn parse(args: &str) -> Result<serde_json::Value, ToolError> {
    serde_json::from_str(args)
        .map_err(|e| ToolError::invalid_arguments(format!("arguments are not JSON: {e}")))
}

/// The tools of every test loop: `read` and `add` (concurrent), `fail`
/// (always a tool error), `explode` (panics).
pub(crate) fn tools() -> ToolRegistry {
    let schema = |props: serde_json::Value| serde_json::json!({"type": "object", "properties": props});
    ToolRegistry::new()
        .with(
            FnTool::new(
                "read",
                "Reads a file.",
                schema(serde_json::json!({"path": {"type": "string"}})),
                |args: String, _ctx: ToolContext| async move {
                    let args = parse(&args)?;
                    let path = arg(&args, "path")?.as_str().unwrap_or_default().to_owned();
                    Ok(vec![Block::text(format!("contents of {path}"))])
                },
            )
            .with_concurrent(true),
        )
        .with(
            FnTool::new(
                "add",
                "Adds two numbers.",
                schema(serde_json::json!({"a": {"type": "number"}, "b": {"type": "number"}})),
                |args: String, _ctx: ToolContext| async move {
                    let args = parse(&args)?;
                    let a = arg(&args, "a")?.as_f64().unwrap_or_default();
                    let b = arg(&args, "b")?.as_f64().unwrap_or_default();
                    Ok(vec![Block::text(format!("{}", a + b))])
                },
            )
            .with_concurrent(true),
        )
        .with(FnTool::new(
            "fail",
            "Always fails.",
            schema(serde_json::json!({})),
            |_args: String, _ctx: ToolContext| async move {
                Err::<Vec<Block>, _>(ToolError::new("DiskFull", "DISK_FULL", "no space left on device"))
            },
        ))
        .with(FnTool::new(
            "explode",
            "Panics.",
            schema(serde_json::json!({})),
            |_args: String, _ctx: ToolContext| async move { explode() },
        ))
}

fn explode() -> Result<Vec<Block>, ToolError> {
    panic!("the explode tool always panics")
}

/// A shared slot a test fills after building the loop (for a plugin that
/// needs something only the built loop has, like a steering handle).
pub(crate) type Slot<T> = Arc<Mutex<Option<T>>>;

pub(crate) fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(None))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
