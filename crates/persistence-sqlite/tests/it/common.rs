//! Shared helpers: events, fixtures, temporary databases, child processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use palimpsest_core_session::jsonl::JsonlLog;
use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::StoreError;
use tempfile::TempDir;

/// The environment variable that makes a test act as a child process.
pub(crate) const ROLE: &str = "PALIMPSEST_SQLITE_TEST_ROLE";

/// A plugin event tagged `tag` (plugin events carry any data, so the tag
/// rides along verbatim).
pub(crate) fn tick(seq: u64, tag: &str) -> Event {
    let json = format!(r#"{{"seq":{seq},"time":{seq},"type":"test/tick","data":{{"tag":"{tag}"}}}}"#);
    match Event::from_json(&json) {
        Ok(e) => e,
        Err(e) => panic!("test event {json}: {e}"),
    }
}

/// `count` ticks from seq `from`, tagged `tag-i`.
pub(crate) fn ticks(from: u64, count: u64, tag: &str) -> Vec<Event> {
    (0..count).map(|i| tick(from + i, &format!("{tag}-{i}"))).collect()
}

/// The tag of a tick.
pub(crate) fn tag_of(e: &Event) -> String {
    let data: serde_json::Value = e.data_as().unwrap_or_default();
    data["tag"].as_str().unwrap_or_default().to_owned()
}

/// A fresh directory and a database path inside it (not created).
pub(crate) fn temp_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    (dir, path)
}

/// A store at `path` holding session `s` of `n` ticks tagged `t`, closed.
pub(crate) fn store_of_ticks(path: &Path, n: u64) {
    let store = palimpsest_persistence_sqlite::SqliteStore::open(path).expect("open");
    palimpsest_persistence::SessionStore::create(
        &store,
        &palimpsest_core_session::SessionHeader::new("s", 0),
    )
    .expect("create");
    palimpsest_persistence::SessionStore::append(&store, "s", &ticks(0, n, "t")).expect("append");
}

/// The valid JSONL sessions of core-session's fixtures, as (name, bytes).
pub(crate) fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core-session/test_data/ok");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("core-session fixtures")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| {
            (
                p.file_name().unwrap_or_default().to_string_lossy().into_owned(),
                std::fs::read(&p).expect("read"),
            )
        })
        .collect();
    out.sort();
    assert!(out.len() >= 3, "expected the core-session fixtures in {}", dir.display());
    out
}

/// Parses a fixture.
pub(crate) fn parse(bytes: &[u8]) -> (SessionHeader, Vec<Event>) {
    let log = JsonlLog::parse(bytes).expect("fixture parses");
    (log.header, log.events)
}

/// The code of a result: `Ok(())` or `Err(code)`.
pub(crate) fn code<T>(r: Result<T, StoreError>) -> Result<(), &'static str> {
    r.map(drop).map_err(|e| e.code())
}

/// The full libtest name of test `f` in `module` (a `module_path!()`).
pub(crate) fn test_name(module: &str, f: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        f.to_owned()
    } else {
        format!("{module}::{f}")
    }
}

/// Re-runs this test binary as a child process that runs only `test`, with
/// `role` and extra environment.
pub(crate) fn spawn_child(test: &str, role: &str, env: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    child_args(&mut cmd, test);
    cmd.env(ROLE, role).envs(env.iter().copied()).stdout(Stdio::null()).stderr(Stdio::inherit());
    cmd.spawn().expect("spawn child")
}

/// The arguments that run exactly one test.
pub(crate) fn child_args(cmd: &mut Command, test: &str) {
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]);
}

/// Waits until `path` exists, up to 60 s.
pub(crate) fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {}", path.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for a child and asserts it succeeded.
pub(crate) fn wait_ok(mut child: Child, what: &str) {
    let status = child.wait().expect("wait for child");
    assert!(status.success(), "{what} failed: {status}");
}

/// An environment variable the parent set for this child.
pub(crate) fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}
