//! `palimpsest fork` and `palimpsest sessions [--tree]` end to end, with
//! the real binary, in every store form; and a fork resumed by the agent
//! loop.

mod support;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, DevMode, ScriptedProvider, ScriptedResponse, TurnInput,
};
use palimpsest_core_session::payload::{Block, TurnEndReason};
use palimpsest_persistence::{SessionStore, StoredSession};
use palimpsest_persistence_jsonl::{read_session_file, JsonlStore};
use palimpsest_persistence_sqlite::SqliteStore;
use serde_json::json;

use support::*;

/// A scratch directory with the worked example as a bare file
/// (`example.jsonl`), a JSONL store directory (`dir`) and a SQLite
/// database (`s.db`), each holding session `example-1`.
fn stores() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    fs::copy(test_data("ok/compaction-and-prune.jsonl"), d.join("example.jsonl")).expect("copy");
    ok(palimpsest(d, &["convert", "example.jsonl", "s.db"]));
    ok(palimpsest(d, &["convert", "example.jsonl", "dir"]));
    dir
}

/// The parent as stored, in a form that shows any change: the file's bytes,
/// or every event and the header of the database's session.
fn parent_snapshot(d: &Path, store: &str) -> Vec<u8> {
    match store {
        "s.db" => {
            let s = SqliteStore::open(d.join(store)).expect("open");
            let StoredSession { header, events, .. } = s.load("example-1").expect("load");
            let mut text = header.to_json();
            for e in events {
                text.push('\n');
                text.push_str(&e.to_json());
            }
            text.into_bytes()
        }
        "dir" => fs::read(d.join("dir/example-1.jsonl")).expect("read"),
        file => fs::read(d.join(file)).expect("read"),
    }
}

fn load(d: &Path, store: &str, id: &str) -> StoredSession {
    match store {
        "example.jsonl" if id == "example-1" => read_session_file(&d.join(store)),
        "s.db" => SqliteStore::open(d.join(store)).expect("open").load(id),
        "dir" => JsonlStore::open(d.join(store)).expect("open").load(id),
        _ => JsonlStore::open(d).expect("open").load(id),
    }
    .unwrap_or_else(|e| panic!("load {id} from {store}: {e}"))
}

#[test]
fn a_fork_in_every_store_is_a_valid_prefix_and_the_parent_is_untouched() {
    let dir = stores();
    let d = dir.path();
    for store in ["s.db", "dir", "example.jsonl"] {
        let before = parent_snapshot(d, store);
        // Seq 7 is the tool/call of turn 1: the child needs closers.
        let run = ok(palimpsest(d, &["fork", store, "--at", "7"]));
        assert_eq!(run.stdout, "example-1-fork-7\n", "{store}");
        assert!(
            run.stderr.starts_with("note: forked \"example-1\" after seq 7 into \"example-1-fork-7\" at "),
            "{store}: {:?}",
            run.stderr
        );
        assert!(run.stderr.contains("8 events copied, then 3 closing events for the open turn"), "{run:?}");
        assert_eq!(parent_snapshot(d, store), before, "{store}: the parent changed");

        let child = load(d, store, "example-1-fork-7");
        assert_eq!(child.header.parent_session.as_deref(), Some("example-1"));
        assert_eq!(child.header.seed_length, Some(8));
        let parent = load(d, store, "example-1");
        assert_eq!(&child.events[..8], &parent.events[..8], "{store}: the seed is an exact prefix");
        let closers: Vec<&str> = child.events[8..].iter().map(|e| e.event_type().as_str()).collect();
        assert_eq!(closers, ["tool/result", "step/end", "turn/end"], "{store}");

        let child_store: &str = if store == "example.jsonl" { "example-1-fork-7.jsonl" } else { store };
        let args = ["validate", "--json", child_store, "--session", "example-1-fork-7"];
        let report = ok(palimpsest(d, &args)).json();
        assert_eq!(report, json!({"valid": true, "events": 11, "violations": []}), "{store}");
    }
    assert!(d.join("example-1-fork-7.jsonl").is_file(), "a bare file's fork goes beside it");
}

#[test]
fn forking_a_fork_keeps_the_lineage_and_sessions_shows_it() {
    let dir = stores();
    let d = dir.path();
    ok(palimpsest(d, &["convert", &test_data("ok/crash-open.jsonl").display().to_string(), "s.db"]));
    let fork = ok(palimpsest(d, &["fork", "s.db", "--session", "example-1", "--at", "14"])).stdout;
    assert_eq!(fork, "example-1-fork-14\n");
    // A balanced point copies just the seed.
    let run =
        ok(palimpsest(d, &["fork", "s.db", "--session", "example-1-fork-14", "--at", "3", "--id", "deep"]));
    assert_eq!(run.stdout, "deep\n");
    let again = ok(palimpsest(d, &["fork", "s.db", "--session", "example-1", "--at", "14"])).stdout;
    assert_eq!(again, "example-1-fork-14-2\n", "a taken default id gets a number");

    let deep = load(d, "s.db", "deep");
    assert_eq!(deep.header.parent_session.as_deref(), Some("example-1-fork-14"));
    assert_eq!(deep.header.seed_length, Some(4));
    assert_eq!(&deep.events[..4], &load(d, "s.db", "example-1").events[..4]);

    let flat = redact_now(&ok(palimpsest(d, &["sessions", "s.db"])).stdout);
    insta::assert_snapshot!("sessions_with_forks", flat);
    let tree = redact_now(&ok(palimpsest(d, &["sessions", "--tree", "s.db"])).stdout);
    insta::assert_snapshot!("sessions_tree", tree);
}

/// The forks made by a test are created now; the fixtures on
/// 2026-01-01. Every other timestamp is replaced by a placeholder of the
/// same width, so the table keeps its alignment.
fn redact_now(text: &str) -> String {
    const WIDTH: usize = "2026-01-01T00:00:00.000Z".len();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
        let candidate = rest.get(i..i + WIDTH).unwrap_or_default();
        let is_time =
            candidate.len() == WIDTH && candidate.as_bytes()[10] == b'T' && candidate.ends_with('Z');
        if is_time && !candidate.starts_with("2026-01-01T") {
            out.push_str(&rest[..i]);
            out.push_str("<created by the test>   ");
            rest = &rest[i + WIDTH..];
        } else {
            out.push_str(&rest[..=i]);
            rest = &rest[i + 1..];
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn fork_refusals_name_their_code_and_write_nothing() {
    let dir = stores();
    let d = dir.path();
    let run = palimpsest(d, &["fork", "s.db", "--at", "27"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(
        run.stderr,
        "error[fork-point-missing]: s.db#example-1: there is no seq 27; the session has 27 events (seq 0 to 26)\n"
    );
    let run = palimpsest(d, &["fork", "s.db", "--at", "3", "--id", "example-1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[already-exists]: s.db#example-1: "), "{:?}", run.stderr);
    let run = palimpsest(d, &["fork", "dir", "--at", "3", "--id", "example-1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[already-exists]: "), "{:?}", run.stderr);
    // Beside a bare file, whose name (`example`) is not its id: the file
    // names do not catch the parent's own id, the check does.
    let run = palimpsest(d, &["fork", "example.jsonl", "--at", "3", "--id", "example-1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("error[already-exists]") && run.stderr.contains("an id of its own"),
        "{run:?}"
    );
    assert!(!d.join("example-1.jsonl").exists(), "nothing was written");
    // An empty id: some stores could hold one, a JSONL store cannot, and
    // `--session` cannot name it, so every store refuses it.
    for store in ["s.db", "dir"] {
        let run = palimpsest(d, &["fork", store, "--at", "3", "--id", ""]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.starts_with("error[invalid-id]: "), "{:?}", run.stderr);
    }
    assert_eq!(ok(palimpsest(d, &["sessions", "s.db"])).stdout.lines().count(), 2, "nothing was added");

    // A log broken at seq 3 forks before the break, not at or after it.
    fs::copy(test_data("err/replace-reversed.jsonl"), d.join("bad.jsonl")).expect("copy");
    let before = fs::read(d.join("bad.jsonl")).expect("read");
    let run = palimpsest(d, &["fork", "bad.jsonl", "--at", "3"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[replace-reversed]: bad.jsonl:5: seq 3: "), "{:?}", run.stderr);
    assert!(run.stderr.contains("a fork's seed must be valid, nothing was written"), "{:?}", run.stderr);
    let run = ok(palimpsest(d, &["fork", "bad.jsonl", "--at", "2", "--id", "salvaged"]));
    assert_eq!(run.stdout, "salvaged\n");
    ok(palimpsest(d, &["validate", "salvaged.jsonl"]));
    // A corrupt line has no seq: it blocks every fork point from where reading stopped.
    fs::copy(test_data("err/corrupt-middle.jsonl"), d.join("torn.jsonl")).expect("copy");
    let run = palimpsest(d, &["fork", "torn.jsonl", "--at", "4"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[log-corrupt]: torn.jsonl:6: "), "{:?}", run.stderr);
    ok(palimpsest(d, &["fork", "torn.jsonl", "--at", "3", "--id", "before-the-tear"]));
    assert_eq!(fs::read(d.join("bad.jsonl")).expect("read"), before, "the parent is never written");
}

#[tokio::test]
async fn a_resumed_fork_runs_a_turn_in_the_agent_loop() {
    let dir = stores();
    let d = dir.path();
    for store in ["s.db", "dir"] {
        // Forked inside turn 1's tool step: the closers make it resumable.
        ok(palimpsest(d, &["fork", store, "--at", "7", "--id", "resumed"]));
        let backend: Arc<dyn SessionStore> = match store {
            "s.db" => Arc::new(SqliteStore::open(d.join(store)).expect("open")),
            _ => Arc::new(JsonlStore::open(d.join(store)).expect("open")),
        };
        let provider =
            Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Picking up where we left off.")]));
        let (mut agent, report) = AgentLoop::builder(provider.clone())
            .config(AgentConfig::default().with_dev_mode(DevMode::On))
            .open(backend, "resumed")
            .expect("the fork opens");
        assert_eq!(report.repaired, None, "{store}: the fork was already closed");
        let outcome = agent.run_turn(TurnInput::text("Where were we?")).await.expect("a turn runs");
        assert_eq!((outcome.turn, outcome.reason), (2, TurnEndReason::Completed), "{store}");
        // The model sees the seed, the closer answering call_1, and the new question.
        let request = provider.last_request().expect("the model was asked");
        let ids: Vec<&str> = request.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids.len(), 4, "{store}: {ids:?}");
        assert_eq!(&ids[..2], ["u1", "a1"], "{store}");
        assert!(
            matches!(
                request.messages[2].content.as_slice(),
                [Block::ToolResult { tool_call_id, is_error: true, .. }] if tool_call_id == "call_1"
            ),
            "{store}: {:?}",
            request.messages[2]
        );
        assert_eq!(request.messages[3].content, [Block::text("Where were we?")], "{store}");
        agent.flush().expect("flush");
        drop(agent);

        let report = ok(palimpsest(d, &["validate", "--json", store, "--session", "resumed"])).json();
        assert_eq!(report["valid"], json!(true), "{store}: {report}");
        let parent = ok(palimpsest(d, &["validate", "--json", store, "--session", "example-1"])).json();
        assert_eq!(parent, json!({"valid": true, "events": 27, "violations": []}), "{store}");
    }
}

#[test]
fn a_taken_file_is_refused_naming_what_it_holds() {
    // A file is taken whatever it holds; the refusals named the new
    // session's id (or the source's) as if the file held it.
    let dir = scratch(&[]);
    let d = dir.path();
    ok(palimpsest(d, &["demo", "--store", "d.db"]));
    ok(palimpsest(d, &["demo", "--store", "f.jsonl"]));
    let held = read_session_file(&d.join("f.jsonl")).expect("f.jsonl").header.id;
    fs::copy(d.join("f.jsonl"), d.join("fx.jsonl")).expect("copy");
    fs::write(d.join("plain.jsonl"), "hello\n").expect("write");

    let fork = palimpsest(d, &["fork", "--at", "5", "--id", "fx", "f.jsonl"]);
    let convert = palimpsest(d, &["convert", "d.db", "fx.jsonl"]);
    for run in [&fork, &convert] {
        assert_eq!(run.code, 1, "{run:?}");
        assert!(
            run.stderr.contains(&format!("fx.jsonl: the file already exists and holds session {held:?}")),
            "{run:?}"
        );
    }
    let plain = palimpsest(d, &["convert", "d.db", "plain.jsonl"]);
    assert!(plain.stderr.contains("plain.jsonl: the file already exists and is not a session"), "{plain:?}");
    assert_eq!(fs::read_to_string(d.join("plain.jsonl")).expect("read"), "hello\n", "nothing was written");
}
