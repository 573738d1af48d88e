//! A second writer in another process is refused with `locked`, in both
//! directions. The test re-executes its own binary as the other process:
//! with `PALIMPSEST_PROBE` set, a test runs one probe action and writes its
//! outcome to a file instead of being the parent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use std::{env, fs};

use palimpsest_core_session::{Event, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_jsonl::{JsonlStore, SessionFile};

const PROBE: &str = "PALIMPSEST_PROBE";

fn tick(seq: u64) -> Event {
    Event::from_json(&format!(r#"{{"seq":{seq},"time":{seq},"type":"kit/tick","data":{{}}}}"#))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn outcome<T>(r: Result<T, palimpsest_persistence::StoreError>, show: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => show(v),
        Err(e) => e.code().to_owned(),
    }
}

/// The probe: `action;dir;result-file`. Returns true if this process is one.
fn run_probe(test: &str) -> bool {
    let Ok(spec) = env::var(PROBE) else { return false };
    let parts: Vec<&str> = spec.splitn(4, ';').collect();
    let [who, action, dir, result] = parts[..] else { panic!("bad probe spec {spec:?}") };
    if who != test {
        return true;
    }
    let dir = Path::new(dir);
    let store = JsonlStore::open(dir).unwrap_or_else(|e| panic!("{e}"));
    let said = match action.split_once(':') {
        Some(("append", seq)) => {
            let seq: u64 = seq.parse().unwrap_or_else(|e| panic!("{e}"));
            outcome(store.append("s", &[tick(seq)]), |()| "ok".into())
        }
        Some(("hold", seq)) => {
            let seq: u64 = seq.parse().unwrap_or_else(|e| panic!("{e}"));
            let said = outcome(store.append("s", &[tick(seq)]), |()| "ok".into());
            fs::write(dir.join("ready"), &said).unwrap_or_else(|e| panic!("{e}"));
            wait_for(&dir.join("release"));
            said
        }
        _ => match action {
            "load" => outcome(store.load("s"), |s| format!("ok:{}", s.events.len())),
            "delete" => outcome(store.delete("s"), |()| "ok".into()),
            "open-file" => {
                let path = store.path_of("s").unwrap_or_else(|e| panic!("{e}"));
                outcome(SessionFile::open(path), |_| "ok".into())
            }
            other => panic!("unknown probe action {other:?}"),
        },
    };
    fs::write(result, said).unwrap_or_else(|e| panic!("{e}"));
    true
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spawn(test: &str, action: &str, dir: &Path, result: &Path) -> Child {
    let exe = env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    Command::new(exe)
        .args([test, "--exact", "--test-threads=1", "-q"])
        .env(PROBE, format!("{test};{action};{};{}", dir.display(), result.display()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"))
}

/// Runs a probe in another process and returns what it said.
fn probe(test: &str, action: &str, dir: &Path) -> String {
    let result: PathBuf = dir.with_extension(format!("result-{action}").replace(':', "-"));
    let _ = fs::remove_file(&result);
    let status = spawn(test, action, dir, &result).wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "the probe process failed: {status}");
    fs::read_to_string(&result).unwrap_or_else(|e| panic!("the probe wrote no result ({e})"))
}

const HELD_BY_US: &str = "another_process_cannot_write_a_session_this_one_holds";

#[test]
fn another_process_cannot_write_a_session_this_one_holds() {
    if run_probe(HELD_BY_US) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("store");
    let store = JsonlStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
    store.create(&SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    store.append("s", &[tick(0), tick(1)]).unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(probe(HELD_BY_US, "append:2", &dir), "locked");
    assert_eq!(probe(HELD_BY_US, "delete", &dir), "locked");
    assert_eq!(probe(HELD_BY_US, "open-file", &dir), "locked");
    assert_eq!(probe(HELD_BY_US, "load", &dir), "ok:2", "readers take no lock");
    store.append("s", &[tick(2)]).unwrap_or_else(|e| panic!("{e}"));

    drop(store);
    assert_eq!(probe(HELD_BY_US, "append:3", &dir), "ok", "the lock is released on drop");
    let store = JsonlStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
    let events = store.load("s").unwrap_or_else(|e| panic!("{e}")).events;
    assert_eq!(events, (0..4).map(tick).collect::<Vec<_>>());
}

const HELD_BY_THEM: &str = "this_process_cannot_write_a_session_another_one_holds";

#[test]
fn this_process_cannot_write_a_session_another_one_holds() {
    if run_probe(HELD_BY_THEM) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("store");
    {
        let store = JsonlStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
        store.create(&SessionHeader::new("s", 0)).unwrap_or_else(|e| panic!("{e}"));
    }
    let result = tmp.path().join("hold-result");
    let mut child = spawn(HELD_BY_THEM, "hold:0", &dir, &result);
    wait_for(&dir.join("ready"));
    assert_eq!(fs::read_to_string(dir.join("ready")).ok().as_deref(), Some("ok"));

    let store = JsonlStore::open(&dir).unwrap_or_else(|e| panic!("{e}"));
    let refused = store.append("s", &[tick(1)]).map_err(|e| e.code());
    let refused_delete = store.delete("s").map_err(|e| e.code());
    let loaded = store.load("s").map(|s| s.events.len()).map_err(|e| e.code());
    fs::write(dir.join("release"), "").unwrap_or_else(|e| panic!("{e}"));
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "the holding process failed: {status}");
    assert_eq!(refused, Err("locked"));
    assert_eq!(refused_delete, Err("locked"));
    assert_eq!(loaded, Ok(1));

    store.append("s", &[tick(1)]).unwrap_or_else(|e| panic!("after the other process exited: {e}"));
    let events = store.load("s").unwrap_or_else(|e| panic!("{e}")).events;
    assert_eq!(events, vec![tick(0), tick(1)]);
}
