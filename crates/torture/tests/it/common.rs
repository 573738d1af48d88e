//! Shared by the tests: child processes (this test binary, re-run), the two
//! stores, and the deterministic agent workload the crash tests append.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use palimpsest_core_agent_loop::plugins::{Compaction, CompactionConfig, FixedSummarizer};
use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, AgentLoopBuilder, DevMode, FinishReason, FnTool, ManualClock, Provider,
    ScriptedProvider, ScriptedResponse, SequentialIds, ToolContext, ToolError, ToolRegistry, TurnInput,
};
use palimpsest_core_session::payload::Block;
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::{Durability, MemoryStore, SessionStore, StoreError, StoredSession};
use palimpsest_persistence_jsonl::JsonlStore;
use palimpsest_persistence_postgres::{PgOptions, PgStore};
use palimpsest_persistence_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use palimpsest_torture::SplitMix64;

/// The environment variable that makes a test act as a child process.
pub(crate) const ROLE: &str = "PALIMPSEST_TORTURE_ROLE";
/// Replays a randomized run: the seed every crash and race test prints.
pub(crate) const SEED_VAR: &str = "PALIMPSEST_CRASH_SEED";
/// Kills per backend in the main crash tests (the other kill tests do half).
pub(crate) const KILLS_VAR: &str = "PALIMPSEST_CRASH_KILLS";
/// The session the crash tests write.
pub(crate) const SID: &str = "crash";
/// The clock's start (2026-01-01T00:00:00Z); each reading adds 1 ms.
pub(crate) const T0: u64 = 1_767_225_600_000;

/// This process's role, when it is a child.
pub(crate) fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// An environment variable the parent set for this child.
pub(crate) fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("the child needs {name}"))
}

/// The number of kills a test should make: [`KILLS_VAR`] or `default`.
pub(crate) fn kills(default: u64) -> u64 {
    std::env::var(KILLS_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The full libtest name of test `f` in `module` (a `module_path!()`).
pub(crate) fn test_name(module: &str, f: &str) -> String {
    match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{f}"),
        None => f.to_owned(),
    }
}

/// Re-runs this test binary as a child that runs only `test`, in `role`,
/// with its stdout piped to the parent.
pub(crate) fn spawn_child(test: &str, role: &str, env: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("test binary path: {e}"));
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd.spawn().unwrap_or_else(|e| panic!("spawn a child: {e}"))
}

/// Marks a protocol line. libtest may print `test name ... ` on the same
/// line before the child's first words, so the marker is searched for.
const MARK: &str = "@@ ";

/// The protocol message (`WORD n`) in one line of a child's stdout.
pub(crate) fn parse_protocol(line: &str) -> Option<(String, u64)> {
    let at = line.rfind(MARK)?;
    let mut words = line[at + MARK.len()..].split_whitespace();
    let word = words.next()?;
    let n = words.next()?.parse().ok()?;
    Some((word.to_owned(), n))
}

/// Reads a child's stdout on a thread, passing on the protocol messages and
/// dropping libtest's own chatter.
pub(crate) fn protocol_lines(stdout: ChildStdout) -> Receiver<(String, u64)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(message) = parse_protocol(&line) {
                if tx.send(message).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

/// Tells the parent something, one line, flushed at once.
pub(crate) fn say(word: &str, n: u64) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{word} {n}");
    let _ = out.flush();
}

/// A child's last act: wait to be killed (bounded, so a failed parent
/// leaves nothing running for long).
pub(crate) fn wait_to_be_killed() {
    std::thread::sleep(Duration::from_secs(60));
}

/// Waits until `stop` says so about a protocol line, the child's stdout
/// closes, or 60 s pass. Returns every line seen.
pub(crate) fn wait_for_line(
    rx: &Receiver<(String, u64)>,
    mut stop: impl FnMut(&str, u64) -> bool,
) -> Vec<(String, u64)> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((word, n)) => {
                let done = stop(&word, n);
                seen.push((word, n));
                if done {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    seen
}

/// SIGKILLs the child, reaps it, and returns the protocol lines it wrote
/// before it died (its stdout is a pipe: whatever it flushed is there).
pub(crate) fn kill_and_drain(mut child: Child, rx: &Receiver<(String, u64)>) -> Vec<(String, u64)> {
    // `Child::kill` is SIGKILL on Unix: no destructor, no flush, no atexit.
    let _ = child.kill();
    let _ = child.wait();
    rx.iter().collect()
}

/// Which store a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Jsonl,
    Sqlite,
    /// A schema of its own on the test server (`PALIMPSEST_TEST_PG_URL`).
    Postgres,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Jsonl => "jsonl",
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
        }
    }

    pub(crate) fn parse(s: &str) -> Kind {
        match s {
            "jsonl" => Kind::Jsonl,
            "sqlite" => Kind::Sqlite,
            "postgres" => Kind::Postgres,
            other => panic!("unknown store kind {other:?}"),
        }
    }

    /// Where this kind's store lives inside a test directory: for
    /// PostgreSQL, the name of a schema of its own (made from the
    /// directory's name; dropped by [`Kind::clean_up`]).
    pub(crate) fn location(self, dir: &Path) -> PathBuf {
        match self {
            Kind::Jsonl => dir.join("sessions"),
            Kind::Sqlite => dir.join("store.db"),
            Kind::Postgres => {
                let name = dir.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
                let name: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
                PathBuf::from(format!("torture_{}_{name}", std::process::id()))
            }
        }
    }

    /// Removes what [`Kind::location`] made outside the test directory.
    pub(crate) fn clean_up(self, location: &Path) {
        if self == Kind::Postgres {
            if let Ok(mut client) = postgres::Client::connect(&pg_url(), postgres::NoTls) {
                let _ =
                    client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", location.display()));
            }
        }
    }

    /// Opens the store at `location`: SQLite with `synchronous` (JSONL
    /// syncs only when asked, which `Durability` decides).
    pub(crate) fn open(
        self,
        location: &Path,
        synchronous: Synchronous,
    ) -> Result<Arc<dyn SessionStore>, StoreError> {
        Ok(match self {
            Kind::Jsonl => Arc::new(JsonlStore::open(location)?),
            Kind::Sqlite => {
                let options = SqliteOptions { synchronous, ..SqliteOptions::default() };
                Arc::new(SqliteStore::open_with(location, options)?)
            }
            Kind::Postgres => {
                let options =
                    PgOptions { schema: Some(location.display().to_string()), ..PgOptions::default() };
                Arc::new(PgStore::connect_with(&pg_url(), options)?)
            }
        })
    }
}

/// The test PostgreSQL server.
pub(crate) fn pg_url() -> String {
    std::env::var("PALIMPSEST_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A batch of more than this many bytes of data is announced (`BIG seq`).
pub(crate) const BIG: usize = 64 * 1024;

/// A store that says `ACK n` on stdout each time a `sync` returns, `n`
/// being the number of events appended so far: everything before `n` is
/// then durable. Under `Durability::EveryAppend` that is every append.
#[derive(Debug)]
pub(crate) struct AckingStore {
    inner: Arc<dyn SessionStore>,
    len: AtomicU64,
}

impl AckingStore {
    pub(crate) fn new(inner: Arc<dyn SessionStore>) -> AckingStore {
        AckingStore { inner, len: AtomicU64::new(0) }
    }
}

impl SessionStore for AckingStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.inner.create(header)
    }
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        self.inner.create_with_events(header, events)
    }
    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        // Announce a large write, so the parent can aim a kill at it.
        if events.iter().map(|e| e.data().len()).sum::<usize>() > BIG {
            say("BIG", events[0].seq());
        }
        self.inner.append(session_id, events)?;
        if let Some(last) = events.last() {
            self.len.store(last.seq() + 1, Ordering::SeqCst);
        }
        Ok(())
    }
    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        self.inner.load(session_id)
    }
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        self.inner.list()
    }
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.delete(session_id)
    }
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.sync(session_id)?;
        say("ACK", self.len.load(Ordering::SeqCst));
        Ok(())
    }
}

/// A current-thread runtime for the loop.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// The tools of the workload: `read` returns a text whose size the
/// arguments name (`{"bytes":n}`), so some results are large enough that a
/// kill can land inside their `write(2)`.
pub(crate) fn tools() -> ToolRegistry {
    let read = FnTool::new(
        "read",
        "Reads a file.",
        serde_json::json!({"type":"object","properties":{"bytes":{"type":"integer"}}}),
        |args: String, _ctx: ToolContext| async move {
            let v: serde_json::Value =
                serde_json::from_str(&args).map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
            let n = v["bytes"].as_u64().unwrap_or(16) as usize;
            let line = "the quick brown fox jumps over the lazy dog; ";
            Ok::<_, ToolError>(vec![Block::text(line.repeat(n / line.len() + 1))])
        },
    );
    let grep = FnTool::new(
        "grep",
        "Searches.",
        serde_json::json!({"type":"object"}),
        |args: String, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(vec![Block::text(format!("3 matches for {args}"))])
        },
    );
    ToolRegistry::new().with(read).with(grep)
}

/// A deterministic, seeded agent session: a few turns of streamed text,
/// tool calls (some with large results) and their results, and compaction
/// whenever the history passes a small budget.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    turns: Vec<String>,
    responses: Vec<ScriptedResponse>,
}

impl Workload {
    pub(crate) fn new(seed: u64) -> Workload {
        let mut rng = SplitMix64::new(seed);
        let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"];
        let sentence = |rng: &mut SplitMix64, n: u64| {
            (0..n).map(|_| words[rng.below(words.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
        };
        let (mut turns, mut responses) = (Vec::new(), Vec::new());
        let mut call = 0;
        for t in 0..2 + rng.below(3) {
            turns.push(format!("turn {t}: {}", sentence(&mut rng, 6)));
            for _step in 0..rng.below(3) {
                let mut r = ScriptedResponse::new().text(0, "Let me look. ");
                for index in 1..=1 + rng.below(2) {
                    call += 1;
                    let (name, args) = if rng.chance(50) {
                        // Mostly small, sometimes up to 2 MB.
                        let bytes = if rng.chance(30) {
                            128 * 1024 + rng.below(1920 * 1024)
                        } else {
                            rng.below(4096)
                        };
                        ("read", format!("{{\"bytes\":{bytes}}}"))
                    } else {
                        ("grep", format!("{{\"pattern\":\"{}\"}}", sentence(&mut rng, 1)))
                    };
                    let cut = args.len() / 2;
                    r = r.tool_call(
                        index as u32,
                        &format!("call-{call}"),
                        name,
                        &[&args[..cut], &args[cut..]],
                    );
                }
                responses.push(r.usage(100, 20).finish(FinishReason::ToolCalls));
            }
            let n = 3 + rng.below(10);
            responses.push(ScriptedResponse::reply(&sentence(&mut rng, n)).usage(120, n));
        }
        Workload { turns, responses }
    }

    /// The loop builder: manual clock, sequential ids, dev mode on,
    /// compaction with the fixed summarizer.
    fn builder(&self, durability: Durability) -> AgentLoopBuilder {
        let provider: Arc<dyn Provider> = Arc::new(ScriptedProvider::new(self.responses.clone()));
        AgentLoop::builder(provider)
            .clock(Arc::new(ManualClock::new(T0).with_tick(1)))
            .ids(Arc::new(SequentialIds::new("m")))
            .config(AgentConfig::default().with_dev_mode(DevMode::On).with_durability(durability))
            .tools(tools())
            .plugin(
                Compaction::new(CompactionConfig { budget_tokens: 200, keep_recent: 4 })
                    .with_summarizer(FixedSummarizer),
            )
    }

    /// Runs the whole session into `store` (under `EveryAppend`).
    pub(crate) fn run(&self, store: Arc<dyn SessionStore>) {
        let mut agent = self
            .builder(Durability::EveryAppend)
            .create(store, SID)
            .unwrap_or_else(|e| panic!("create: {e}"));
        let rt = runtime();
        for text in &self.turns {
            rt.block_on(agent.run_turn(TurnInput::text(text.clone())))
                .unwrap_or_else(|e| panic!("turn: {e}"));
        }
    }

    /// What the whole session writes: run into memory.
    pub(crate) fn expected(&self) -> (SessionHeader, Vec<Event>) {
        let store = Arc::new(MemoryStore::default());
        self.run(store.clone());
        let stored = store.load(SID).unwrap_or_else(|e| panic!("load the expected session: {e}"));
        (stored.header, stored.events)
    }
}
