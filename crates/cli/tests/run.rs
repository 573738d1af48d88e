//! `palimpsest run` end to end, without a network: the real binary talks to
//! a small scripted HTTP server on `127.0.0.1:0` that answers like an
//! OpenAI-compatible endpoint (server-sent events), and each test checks
//! what reached stdout and stderr, what the server was asked, and that the
//! store holds a valid session.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/sse.rs"]
mod sse;

use sse::{text_events, text_reply, tool_reply, Reply, Server};

const BIN: &str = env!("CARGO_BIN_EXE_palimpsest");

// ------------------------------------------------------------ the binary

/// The binary in `dir`, with no `OPENAI_*` variables from the outside.
fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("PALIMPSEST_LOG");
    c
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The session id from the `note: new session ...` line.
    fn session_id(&self) -> String {
        let rest = self.stderr.split("note: new session ").nth(1);
        let id = rest.and_then(|r| r.split_whitespace().next());
        id.unwrap_or_else(|| panic!("no new-session note: {self:?}")).to_owned()
    }
}

fn run(dir: &Path, args: &[&str]) -> Run {
    command(dir, args).stdin(Stdio::null()).output().expect("run palimpsest").into()
}

fn run_with_stdin(dir: &Path, args: &[&str], stdin: &str) -> Run {
    let mut child = command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn palimpsest");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("wait for palimpsest").into()
}

/// `run --base-url <server> --model m --chunk-window-ms 0 ARGS...`: one
/// chunk event per delta, so logs do not depend on the mock's timing.
fn model_args<'a>(server: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--base-url", server, "--model", "m", "--chunk-window-ms", "0"];
    args.extend_from_slice(rest);
    args
}

/// A fresh directory whose store `s` holds one session of one turn (`run
/// EXTRA... Hi`, after `before` prepared the directory), against a server
/// that answers `One.`, then `Two.`, `Three.`, `Four.`: the directory, the
/// server, its base URL and the session's id.
fn one_turn(extra: &[&str], before: impl FnOnce(&Path)) -> (tempfile::TempDir, Server, String, String) {
    let dir = tempfile::tempdir().unwrap();
    before(dir.path());
    let replies = ["One.", "Two.", "Three.", "Four."].iter().map(|r| text_reply(&[r])).collect();
    let server = Server::start(replies);
    let base = server.base_url();
    let args = [&["--store", "s"][..], extra, &["Hi"]].concat();
    let first = run(dir.path(), &model_args(&base, &args));
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.session_id();
    (dir, server, base, id)
}

/// `palimpsest validate STORE --session ID --json` must say valid.
fn assert_valid(dir: &Path, store: &str, id: &str) -> Value {
    let v = run(dir, &["validate", store, "--session", id, "--json"]);
    assert_eq!(v.code, Some(0), "validate: {v:?}");
    let report: Value = serde_json::from_str(&v.stdout).expect("validate --json prints JSON");
    assert_eq!(report["valid"], true, "{report}");
    report
}

/// The stored events of session `id`, as `palimpsest derive` cannot show
/// them: read straight from a JSONL store directory.
fn jsonl_log(store: &Path) -> Vec<Value> {
    let files: Vec<PathBuf> = std::fs::read_dir(store)
        .expect("the store directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "one session in {}: {files:?}", store.display());
    let text = std::fs::read_to_string(&files[0]).expect("the session file");
    text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn types(log: &[Value]) -> Vec<&str> {
    log.iter().filter_map(|e| e["type"].as_str()).collect()
}

fn turn_end_reasons(log: &[Value]) -> Vec<Value> {
    log.iter().filter(|e| e["type"] == "turn/end").map(|e| e["data"]["reason"].clone()).collect()
}

// ---------------------------------------------------------------- tests

#[test]
fn one_shot_streams_the_answer_to_stdout_as_it_arrives_and_stores_a_valid_session() {
    let dir = tempfile::tempdir().unwrap();
    let (open, gate) = mpsc::channel();
    let all = text_events(&["Hel", "lo, ", "world!"]);
    let (before, after) = all.split_at(2); // the role event and "Hel"
    let server = Server::start(vec![Reply::Gated { before: before.to_vec(), gate, after: after.to_vec() }]);
    let base = server.base_url();
    let mut child = command(dir.path(), &model_args(&base, &["Say hello."]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // "Hel" must reach stdout while the server still holds the rest back.
    let (tx, rx) = mpsc::channel();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while seen != "Hel" && Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(text) => seen = text,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    open.send(()).unwrap();
    let stdout = reader.join().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(seen, "Hel", "the first piece was not shown while the stream was open; stderr: {stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout, "Hello, world!\n", "stdout is the answer and nothing else");

    // The session id is announced, and the session is in ./palimpsest.db.
    let run = Run { code: output.status.code(), stdout, stderr };
    let id = run.session_id();
    assert!(id.starts_with("run-"), "{id}");
    assert!(run.stderr.contains(&format!("continue it with --session {id}")), "{}", run.stderr);
    assert!(dir.path().join("palimpsest.db").is_file());
    let report = assert_valid(dir.path(), "palimpsest.db", &id);
    // session/settings, turn/start, user/message, step/start, 3 text
    // chunks, a usage chunk, assistant/message, step/end, turn/end
    assert_eq!(report["events"], 11, "{report}");

    // What the server was asked: the model, streaming, the prompt, no tools.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["model"], "m");
    assert_eq!(requests[0]["stream"], true);
    assert_eq!(requests[0]["messages"], json!([{"role": "user", "content": "Say hello."}]));
    assert!(requests[0].get("tools").is_none(), "no --tools, no tools: {}", requests[0]);
}

#[test]
fn a_reader_that_closes_stdout_mid_answer_stops_the_printing_not_the_turn() {
    // `run ... | head -c 3`: the answer goes on being logged whole, and the
    // turn ends completed (it was dropped mid-stream, exit 0, turn open).
    let dir = tempfile::tempdir().unwrap();
    let (open, gate) = mpsc::channel();
    let all = text_events(&["Hel", "lo, ", "world!"]);
    let (before, after) = all.split_at(2);
    let server = Server::start(vec![Reply::Gated { before: before.to_vec(), gate, after: after.to_vec() }]);
    let base = server.base_url();
    let mut child = command(dir.path(), &model_args(&base, &["--store", "s", "Say hello."]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 3];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"Hel");
    drop(stdout);
    open.send(()).unwrap();
    let output = child.wait_with_output().unwrap();
    let run = Run::from(output);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("stdout was closed"), "{run:?}");
    let id = run.session_id();
    assert_valid(dir.path(), "s", &id);
    let log = jsonl_log(&dir.path().join("s"));
    assert_eq!(turn_end_reasons(&log), [json!({"kind": "completed"})]);
    let answer = log.iter().find(|e| e["type"] == "assistant/message").expect("the answer");
    assert_eq!(answer["data"]["message"]["content"][0]["text"], "Hello, world!");
}

/// Replaces what differs from run to run (times, the session id, message
/// ids) by placeholders; equal values get equal placeholders, so the
/// snapshot still shows which ids are the same.
fn redact(log: &mut [Value]) {
    fn walk(v: &mut Value, ids: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (key, value) in map.iter_mut() {
                    match (key.as_str(), &*value) {
                        ("time" | "createdAt", Value::Number(_)) => *value = json!("<time>"),
                        ("toolsDir", Value::String(_)) => *value = json!("<tools dir>"),
                        ("provider", Value::String(s)) if s.starts_with("http://127.0.0.1:") => {
                            *value = json!("<server>")
                        }
                        ("id", Value::String(s)) if s.starts_with("msg-") => {
                            let n = ids.iter().position(|i| i == s).unwrap_or_else(|| {
                                ids.push(s.clone());
                                ids.len() - 1
                            });
                            *value = json!(format!("<msg-{}>", n + 1));
                        }
                        _ => walk(value, ids),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, ids)),
            _ => {}
        }
    }
    let mut ids = Vec::new();
    if let Some(header) = log.first_mut() {
        header["id"] = json!("<session>");
    }
    log.iter_mut().for_each(|e| walk(e, &mut ids));
}

#[test]
fn a_tool_call_round_trip_with_tools_runs_in_the_sandbox_and_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("notes.txt"), "The shed key is under the blue pot.\n").unwrap();
    let server = Server::start(vec![
        tool_reply("Let me look.", "call_1", "read_file", &["{\"pa", "th\": \"notes", ".txt\"}"]),
        text_reply(&["It is under ", "the blue pot."]),
    ]);
    let base = server.base_url();
    let run = run(
        dir.path(),
        &model_args(&base, &["--tools", "work", "--store", "sessions", "Where is the shed key?"]),
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "Let me look.\nIt is under the blue pot.\n");
    assert!(run.stderr.contains("  → read_file {\"path\": \"notes.txt\"}\n"), "{}", run.stderr);
    assert!(
        run.stderr.contains("  ← read_file: 36 chars: The shed key is under the blue pot."),
        "{}",
        run.stderr
    );
    assert!(run
        .stderr
        .contains("note: tools list_files, read_file, write_file, calculator, confined to work"));

    // The model was offered the four tools and shown the result.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let mut offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    offered.sort_unstable();
    assert_eq!(offered, ["calculator", "list_files", "read_file", "write_file"]);
    let messages = requests[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[1]["tool_calls"][0]["function"]["arguments"], "{\"path\": \"notes.txt\"}");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    assert_eq!(messages[2]["content"], "The shed key is under the blue pot.\n");

    let id = run.session_id();
    assert_valid(dir.path(), "sessions", &id);
    let mut log = jsonl_log(&dir.path().join("sessions"));
    redact(&mut log);
    insta::assert_json_snapshot!("run_tool_round_trip_log", log);
}

#[test]
fn session_resumes_a_stored_session_and_closes_an_interrupted_turn_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."]), text_reply(&["Three."])]);
    let base = server.base_url();
    let first = run(dir.path(), &model_args(&base, &["--store", "s", "Count: one."]));
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.session_id();

    let second = run(dir.path(), &model_args(&base, &["--store", "s", "--session", &id, "And two?"]));
    assert_eq!(second.code, Some(0), "{second:?}");
    assert_eq!(second.stdout, "Two.\n");
    assert!(
        second.stderr.contains(&format!("note: resuming session {id} in s: 9 events, 1 turn(s)")),
        "{second:?}"
    );
    assert!(!second.stderr.contains("note: new session"), "{second:?}");
    let asked = &server.requests()[1]["messages"];
    assert_eq!(
        *asked,
        json!([
            {"role": "user", "content": "Count: one."},
            {"role": "assistant", "content": "One."},
            {"role": "user", "content": "And two?"},
        ])
    );

    // Cut the last turn's step/end and turn/end, as a crash would leave it.
    // (The checkpoint left at that turn's end now claims more than the
    // file holds: the resume below must ignore it and read the file.)
    let file = std::fs::read_dir(dir.path().join("s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[lines.len() - 1].contains("\"turn/end\"") && lines[lines.len() - 2].contains("\"step/end\"")
    );
    std::fs::write(&file, lines[..lines.len() - 2].join("\n") + "\n").unwrap();
    // The events the file holds: the header line is not one.
    let held = lines.len() - 2 - 1;

    let third = run(dir.path(), &model_args(&base, &["--store", "s", "--session", &id, "Three?"]));
    assert_eq!(third.code, Some(0), "{third:?}");
    assert_eq!(third.stdout, "Three.\n");
    // The count is what the log held, not the closers just written.
    assert!(
        third.stderr.contains(&format!("note: resuming session {id} in s: {held} events, 2 turn(s)")),
        "{third:?}"
    );
    assert!(
        third.stderr.contains("note: closed the interrupted last turn first (2 repair event(s)"),
        "{third:?}"
    );
    assert_valid(dir.path(), "s", &id);
    let log = jsonl_log(&dir.path().join("s"));
    assert_eq!(
        turn_end_reasons(&log),
        [json!({"kind": "completed"}), json!({"kind": "interrupted"}), json!({"kind": "completed"})]
    );

    // A session that is not there is a usage error, and nothing is asked.
    let missing = run(dir.path(), &model_args(&base, &["--store", "s", "--session", "nope", "Hi"]));
    assert_eq!(missing.code, Some(2), "{missing:?}");
    assert!(missing.stderr.starts_with("error[not-found]: "), "{missing:?}");
    assert_eq!(server.requests().len(), 3);
    // Nor is a store that is not there; resuming never creates one.
    let nowhere = run(dir.path(), &model_args(&base, &["--store", "nowhere.db", "--session", &id, "Hi"]));
    assert_eq!(nowhere.code, Some(2), "{nowhere:?}");
    assert!(nowhere.stderr.starts_with("error[io]: nowhere.db: "), "{nowhere:?}");
    assert!(!dir.path().join("nowhere.db").exists());
}

#[test]
fn without_a_prompt_each_stdin_line_is_a_turn_until_exit_or_eof() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![text_reply(&["One", "."]), text_reply(&["Two."])]);
    // The endpoint from the environment this time.
    let mut child = command(dir.path(), &["run", "--store", "s.db", "--chunk-window-ms", "0"])
        .env("OPENAI_BASE_URL", server.base_url())
        .env("OPENAI_MODEL", "m")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"What is one?\n\n   \nWhat is two?\n").unwrap();
    let run: Run = child.wait_with_output().unwrap().into();
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "One.\nTwo.\n");
    assert!(!run.stderr.contains("> "), "no prompt when stdin is not a terminal: {:?}", run.stderr);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "blank lines are not turns");
    assert_eq!(requests[1]["messages"].as_array().map(Vec::len), Some(3));
    let report = assert_valid(dir.path(), "s.db", &run.session_id());
    assert_eq!(
        report["events"], 18,
        "the settings, then two turns of 9 and 8 events (text and usage chunks): {report}"
    );

    // `/exit` ends the session: the line after it is never sent.
    let server = Server::start(vec![text_reply(&["Hi."]), text_reply(&["Never."])]);
    let base = server.base_url();
    let run = run_with_stdin(dir.path(), &model_args(&base, &["--store", "s.db"]), "Hello\n/exit\nAgain\n");
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "Hi.\n");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn missing_configuration_is_a_usage_error_naming_the_flag_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let no_url = run(dir.path(), &["run", "--model", "m", "Hi"]);
    assert_eq!(no_url.code, Some(2), "{no_url:?}");
    assert!(no_url.stderr.starts_with("error[usage]: "), "{no_url:?}");
    assert!(no_url.stderr.contains("--base-url") && no_url.stderr.contains("OPENAI_BASE_URL"), "{no_url:?}");

    let no_model = run(dir.path(), &["run", "--base-url", "http://127.0.0.1:9/v1", "Hi"]);
    assert_eq!(no_model.code, Some(2), "{no_model:?}");
    assert!(no_model.stderr.contains("--model") && no_model.stderr.contains("OPENAI_MODEL"), "{no_model:?}");

    let bad_tools = run(
        dir.path(),
        &["run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "nope", "Hi"],
    );
    assert_eq!(bad_tools.code, Some(2), "{bad_tools:?}");
    assert!(bad_tools.stderr.contains("--tools nope: not a directory"), "{bad_tools:?}");

    assert!(no_url.stdout.is_empty() && no_model.stdout.is_empty());
    assert!(!dir.path().join("palimpsest.db").exists(), "a refused run creates no store");
}

#[test]
fn a_provider_error_ends_the_turn_with_it_exit_1_and_the_log_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let fire = || Reply::Json(500, r#"{"error":{"message":"the GPU caught fire"}}"#.into());
    // The provider retries a 500 twice before giving up.
    let server = Server::start(vec![fire(), fire(), fire()]);
    let base = server.base_url();
    let run = run(dir.path(), &model_args(&base, &["Hi"]));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "");
    let error = run.stderr.lines().find(|l| l.starts_with("error[")).unwrap_or_default();
    assert!(error.starts_with("error[PROVIDER_UNAVAILABLE]: palimpsest.db#run-"), "{run:?}");
    assert!(error.contains("turn 1 ended with an error: "), "{error}");
    assert!(error.contains("HTTP 500 Internal Server Error: the GPU caught fire"), "{error}");
    assert_eq!(server.requests().len(), 3);
    // Each wait before a retry is said, not waited out in silence.
    let retries: Vec<&str> = run.stderr.lines().filter(|l| l.contains("⟳")).collect();
    assert_eq!(retries.len(), 2, "{run:?}");
    assert!(
        retries[0].contains("the provider failed (PROVIDER_UNAVAILABLE); retrying in 0.5 s (attempt 2 of 3)"),
        "{retries:?}"
    );

    let id = run.session_id();
    assert_valid(dir.path(), "palimpsest.db", &id);
    let derived = command(dir.path(), &["derive", "palimpsest.db", "--session", &id]).output().unwrap();
    let derived: Value = serde_json::from_slice(&derived.stdout).unwrap();
    assert_eq!(derived.as_array().map(Vec::len), Some(1), "only the prompt: {derived}");
    let repair = command(dir.path(), &["repair", "palimpsest.db", "--session", &id]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&repair.stdout).trim(), "[]", "the turn is closed");
}

/// Starts `run` with `args` against `server` (pipes for stdout and
/// stderr) and waits until its model request has arrived: the turn is
/// running.
fn spawn_until_requested(dir: &Path, server: &Server, args: &[&str]) -> Child {
    let child = command(dir, &model_args(&server.base_url(), args))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.requests().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.requests().len(), 1, "the request never arrived");
    child
}

/// Sends `signal` (`-INT`, `-TERM`, ...) to `child`, then reads its
/// stderr to the end and waits for it.
#[cfg(unix)]
fn signal_and_wait(child: &mut Child, signal: &str) -> (std::process::ExitStatus, String) {
    let kill = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let mut stderr = String::new();
    BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok).for_each(|l| {
        stderr.push_str(&l);
        stderr.push('\n');
    });
    (child.wait().unwrap(), stderr)
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_turn_which_ends_aborted_in_a_valid_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![Reply::Stall]);
    // Wait until the request is in: the turn is running, the handler installed.
    let mut child = spawn_until_requested(dir.path(), &server, &["--store", "s", "Think hard."]);
    let (status, stderr) = signal_and_wait(&mut child, "-INT");
    assert_eq!(status.code(), Some(1), "a cancelled one-shot turn is not a success: {stderr}");
    assert!(stderr.contains("^C: cancelling the turn"), "{stderr}");
    assert!(stderr.contains("note: turn 1 cancelled"), "{stderr}");

    let id = Run { code: None, stdout: String::new(), stderr }.session_id();
    assert_valid(dir.path(), "s", &id);
    let log = jsonl_log(&dir.path().join("s"));
    assert_eq!(turn_end_reasons(&log), [json!({"kind": "aborted", "reason": "cancelled"})]);
    assert_eq!(types(&log).last(), Some(&"turn/end"));
}

/// A server that holds the stream open after a whole answer: a Ctrl-C
/// during that wait ends the wait, and the turn completes with the answer
/// (it was logged under a turn ended aborted, exit 1).
#[cfg(unix)]
#[test]
fn ctrl_c_after_a_whole_answer_ends_the_wait_and_the_turn_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (_keep_shut, gate) = mpsc::channel();
    let before =
        vec![sse::event(json!({"content": "All of it."}), None), sse::event(json!({}), Some("stop"))];
    let server = Server::start(vec![Reply::Gated { before, gate, after: Vec::new() }]);
    let mut child = spawn_until_requested(dir.path(), &server, &["--store", "s", "Say it."]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, stderr) = signal_and_wait(&mut child, "-INT");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("note: the answer was whole when Ctrl-C came"), "{stderr}");
    let id = Run { code: None, stdout: String::new(), stderr }.session_id();
    assert_valid(dir.path(), "s", &id);
    let log = jsonl_log(&dir.path().join("s"));
    assert_eq!(turn_end_reasons(&log), [json!({"kind": "completed"})]);
    let answer = log.iter().find(|e| e["type"] == "assistant/message").expect("the answer");
    assert_eq!(answer["data"]["message"]["content"][0]["text"], "All of it.");
    assert!(answer["data"].get("interrupted").is_none(), "{answer}");
}

/// SIGTERM and SIGHUP (a supervisor stopping the run, the terminal
/// closing) end the turn as Ctrl-C does: cancelled, aborted in a valid
/// log, not left open for repair; and the run ends.
#[cfg(unix)]
#[test]
fn sigterm_and_sighup_cancel_the_turn_like_ctrl_c_and_end_the_run() {
    for signal in ["-TERM", "-HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(vec![Reply::Stall]);
        let mut child = spawn_until_requested(dir.path(), &server, &["--store", "s", "Think hard."]);
        let (status, stderr) = signal_and_wait(&mut child, signal);
        assert_eq!(status.code(), Some(1), "{signal}: {stderr}");
        assert!(stderr.contains("terminating: cancelling the turn"), "{signal}: {stderr}");
        assert!(
            stderr.contains("note: terminated; `palimpsest run --store s --session "),
            "{signal}: {stderr}"
        );
        let id = Run { code: None, stdout: String::new(), stderr }.session_id();
        assert_valid(dir.path(), "s", &id);
        let log = jsonl_log(&dir.path().join("s"));
        assert_eq!(turn_end_reasons(&log), [json!({"kind": "aborted", "reason": "cancelled"})], "{signal}");
    }
}

#[cfg(unix)]
#[test]
fn tools_refuse_a_fifo_and_a_dangling_link_out_without_hanging_and_the_log_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (work, outside) = (dir.path().join("work"), dir.path().join("outside"));
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&outside).unwrap();
    let made = Command::new("mkfifo").arg(work.join("pipe")).status().unwrap();
    assert!(made.success(), "mkfifo");
    std::os::unix::fs::symlink(outside.join("planted.txt"), work.join("notes.txt")).unwrap();
    let server = Server::start(vec![
        tool_reply("Reading.", "call_1", "read_file", &[r#"{"path": "pipe"}"#]),
        tool_reply("Writing.", "call_2", "write_file", &[r#"{"path": "notes.txt", "content": "pwned"}"#]),
        text_reply(&["Neither worked."]),
    ]);
    let base = server.base_url();
    let mut child = command(dir.path(), &model_args(&base, &["--tools", "work", "--store", "s", "Go."]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Before the fix, reading the FIFO blocked forever: give it a deadline.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("run hung on a tool call");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let run: Run = child.wait_with_output().unwrap().into();
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "write_file created a file outside");

    let id = run.session_id();
    assert_valid(dir.path(), "s", &id);
    let log = jsonl_log(&dir.path().join("s"));
    let results: Vec<(&Value, &Value)> = log
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| (&e["data"]["error"]["code"], &e["data"]["message"]["content"][0]["content"][0]["text"]))
        .collect();
    assert_eq!(results.len(), 2, "{log:?}");
    assert_eq!(results[0].0, "INVALID_ARGUMENTS");
    assert_eq!(
        results[0].1,
        "pipe is a FIFO (named pipe), not a regular file; only regular files are read or written"
    );
    assert_eq!(results[1].0, "INVALID_ARGUMENTS");
    assert!(results[1].1.as_str().unwrap().starts_with("notes.txt is a symbolic link"), "{}", results[1].1);
}

/// The `session/settings` events of a JSONL store's one session.
fn settings_events(store: &Path) -> Vec<Value> {
    jsonl_log(store).into_iter().filter(|e| e["type"] == "session/settings").collect()
}

#[test]
fn a_resumed_session_keeps_its_logged_settings_without_flags() {
    // The issue's example: `--system` once, then `--session ID` without it.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![text_reply(&["Arr."]), text_reply(&["Arr again."])]);
    let base = server.base_url();
    let first = run(
        dir.path(),
        &model_args(
            &base,
            &["--store", "s", "--system", "You are a pirate.", "--context-budget", "5000", "Hi"],
        ),
    );
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.session_id();
    let logged = settings_events(&dir.path().join("s"));
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["seq"], 0, "the settings come first");
    assert_eq!(
        logged[0]["data"],
        json!({"settings": {"systemPrompt": "You are a pirate.", "model": "m", "provider": base,
                            "tools": [], "contextBudget": 5000}})
    );

    // No --system, --model or --base-url, no OPENAI_* variables: the log has them.
    let second = run(dir.path(), &["run", "--store", "s", "--session", &id, "Again?"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    assert_eq!(second.stdout, "Arr again.\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request["messages"][0],
            json!({"role": "system", "content": "You are a pirate."}),
            "{request}"
        );
        assert_eq!(request["model"], "m");
    }
    assert_eq!(settings_events(&dir.path().join("s")).len(), 1, "nothing changed, nothing logged");
    assert!(!second.stderr.contains("settings changed"), "{second:?}");

    // The derived request is the log's: settings and messages.
    let derived = run(dir.path(), &["derive", "--request", "s", "--session", &id]);
    assert_eq!(derived.code, Some(0), "{derived:?}");
    let derived: Value = serde_json::from_str(&derived.stdout).unwrap();
    assert_eq!(derived["settings"], logged[0]["data"]["settings"]);
    assert_eq!(derived["messages"].as_array().map(Vec::len), Some(4));
    assert_valid(dir.path(), "s", &id);
}

#[test]
fn a_resume_carries_over_every_logged_setting_it_does_not_set_itself() {
    // Section 1.3: unknown keys are kept verbatim, and a resumed session
    // makes the same request. A writer other than `run` logged params and
    // a key `run` does not know.
    let (dir, server, base, id) = one_turn(&[], |_| ());
    let store = dir.path().join("s");
    let settings = json!({
        "systemPrompt": "by hand", "model": "m9", "provider": base, "tools": [], "contextBudget": 100000,
        "params": {"temperature": 0.2, "top_p": 0.3, "seed": 5, "messages": "not the history"},
        "zz": {"keep": 1}
    });
    log_settings_by_hand(&store, &settings);

    // Without flags: every param is sent (but one named as a field the
    // request makes itself), nothing is logged again.
    let second = run(dir.path(), &["run", "--store", "s", "--session", &id, "Again?"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(!second.stderr.contains("settings changed"), "{second:?}");
    let asked = &server.requests()[1];
    assert_eq!(
        (&asked["model"], &asked["temperature"], &asked["top_p"], &asked["seed"]),
        (&json!("m9"), &json!(0.2), &json!(0.3), &json!(5))
    );
    assert_eq!(asked["messages"][0], json!({"role": "system", "content": "by hand"}), "{asked}");
    assert_eq!(settings_events(&store).len(), 2, "nothing changed, nothing logged");

    // A flag replaces its own param only: the rest is stated again whole.
    let third = run(dir.path(), &["run", "--store", "s", "--session", &id, "--temperature", "0.5", "Three?"]);
    assert_eq!(third.code, Some(0), "{third:?}");
    assert!(third.stderr.contains("settings changed"), "{third:?}");
    let asked = &server.requests()[2];
    assert_eq!((&asked["temperature"], &asked["top_p"]), (&json!(0.5), &json!(0.3)));
    let logged = settings_events(&store);
    assert_eq!(logged.len(), 3);
    let mut expected = settings;
    expected["params"]["temperature"] = json!(0.5);
    assert_eq!(logged[2]["data"]["settings"], expected);
    assert_valid(dir.path(), "s", &id);
}

#[test]
fn a_resume_reads_the_checkpoint_and_what_follows_not_the_whole_log() {
    // A resume that read the whole log (the settings were looked up in a
    // whole load; a JSONL hold read the file to check its id) took 1.4 s
    // at 1M events. An event before the checkpoint made unreadable shows
    // it: a bounded resume never reads it, `validate` does.
    for store in ["s", "s.db"] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."])]);
        let base = server.base_url();
        let first = run(dir.path(), &model_args(&base, &["--store", store, "One?"]));
        assert_eq!(first.code, Some(0), "{first:?}");
        let id = first.session_id();
        if store == "s.db" {
            let db = rusqlite::Connection::open(dir.path().join(store)).unwrap();
            let changed = db.execute("UPDATE events SET data = 'not json' WHERE seq = 1", []).unwrap();
            assert_eq!(changed, 1);
        } else {
            let file = std::fs::read_dir(dir.path().join(store))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .unwrap();
            let text = std::fs::read_to_string(&file).unwrap();
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            lines[2] = "x".repeat(lines[2].len());
            std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        }

        let second = run(dir.path(), &model_args(&base, &["--store", store, "--session", &id, "Two?"]));
        assert_eq!((second.code, second.stdout.as_str()), (Some(0), "Two.\n"), "{store}: {second:?}");
        let checked = run(dir.path(), &["validate", store]);
        assert_eq!(checked.code, Some(1), "{store}: the damage is validate's to find: {checked:?}");
    }
}

/// Appends a `session/settings` event stating `settings` to the one session
/// of the JSONL store directory `store`, as a writer other than `run` would.
fn log_settings_by_hand(store: &Path, settings: &Value) {
    let file = std::fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("the session file");
    let seq = jsonl_log(store).len() - 1;
    let line = json!({"seq": seq, "time": 1, "type": "session/settings", "data": {"settings": settings}});
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!("{line}\n"));
    std::fs::write(&file, text).unwrap();
}

#[test]
fn logged_settings_that_state_nothing_new_log_nothing_and_the_token_limit_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let replies = (0..4).map(|i| text_reply(&[&format!("R{i}.")])).collect();
    let server = Server::start(replies);
    let base = server.base_url();
    let first = run(dir.path(), &model_args(&base, &["--store", "s", "Hi"]));
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.session_id();
    let store = dir.path().join("s");
    // An empty prompt and empty params, as another writer may state them:
    // the same request as none, so a resume logs nothing new.
    let empty = json!({"systemPrompt": "", "model": "m", "provider": base, "tools": [],
                       "contextBudget": 100000, "params": {}});
    log_settings_by_hand(&store, &empty);
    let second = run(dir.path(), &["run", "--store", "s", "--session", &id, "Two?"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(!second.stderr.contains("settings changed"), "{second:?}");
    assert_ne!(server.requests()[1]["messages"][0]["role"], "system", "an empty prompt is none");
    assert_eq!(settings_events(&store).len(), 2);

    // A limit logged in the provider's spelling, one maxTokens that is not
    // a whole number, and the client's own stream_options.
    let mut odd = empty.clone();
    odd["params"] = json!({"maxTokens": 1.5, "max_tokens": 5000, "stream_options": "x"});
    log_settings_by_hand(&store, &odd);
    let third = run(dir.path(), &["run", "--store", "s", "--session", &id, "Three?"]);
    assert_eq!(third.code, Some(0), "{third:?}");
    assert!(
        third.stderr.contains(
            "the logged maxTokens 1.5 is not a whole number of tokens from 1; it is not sent as the limit"
        ),
        "{third:?}"
    );
    let asked = &server.requests()[2];
    assert_eq!(
        (&asked["max_tokens"], &asked["stream_options"]),
        (&json!(5000), &json!({"include_usage": true}))
    );

    // --max-tokens replaces the limit in every spelling: one limit, the
    // one the loop knows.
    let fourth = run(dir.path(), &["run", "--store", "s", "--session", &id, "--max-tokens", "50", "Four?"]);
    assert_eq!(fourth.code, Some(0), "{fourth:?}");
    assert_eq!(server.requests()[3]["max_tokens"], 50);
    let logged = settings_events(&store);
    assert_eq!(
        logged.last().map(|e| e["data"]["settings"]["params"].clone()),
        Some(json!({"maxTokens": 50, "stream_options": "x"}))
    );
    assert_valid(dir.path(), "s", &id);
}

#[test]
fn a_flag_that_overrides_a_logged_setting_logs_new_settings_before_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![text_reply(&["Arr."]), text_reply(&["Aye."]), text_reply(&["Plain."])]);
    let base = server.base_url();
    let first = run(dir.path(), &model_args(&base, &["--store", "s", "--system", "You are a pirate.", "Hi"]));
    assert_eq!(first.code, Some(0), "{first:?}");
    let id = first.session_id();

    let second = run(dir.path(), &["run", "--store", "s", "--session", &id, "--model", "m2", "Again?"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(second.stderr.contains("note: settings changed: model m2 · "), "{second:?}");
    let asked = &server.requests()[1];
    assert_eq!(asked["model"], "m2");
    assert_eq!(asked["messages"][0], json!({"role": "system", "content": "You are a pirate."}));

    let log = jsonl_log(&dir.path().join("s"));
    let settings: Vec<&Value> = log.iter().filter(|e| e["type"] == "session/settings").collect();
    assert_eq!(settings.len(), 2);
    let at = settings[1]["seq"].as_u64().unwrap() as usize;
    // Between the first turn's end and the second turn's start: outside any step.
    assert_eq!(
        (log[at]["type"].as_str(), log[at + 1]["type"].as_str()),
        (Some("turn/end"), Some("session/settings"))
    );
    assert_eq!(log[at + 2]["type"], "turn/start");
    assert_eq!(settings[1]["data"]["settings"]["model"], "m2");
    assert_eq!(settings[1]["data"]["settings"]["systemPrompt"], "You are a pirate.", "stated whole");
    assert_valid(dir.path(), "s", &id);

    // `--system ""` clears the prompt: no empty system message is sent.
    let third = run(
        dir.path(),
        &["run", "--store", "s", "--session", &id, "--model", "m2", "--system", "", "Plain?"],
    );
    assert_eq!(third.code, Some(0), "{third:?}");
    let asked = &server.requests()[2];
    assert_ne!(asked["messages"][0]["role"], "system", "{asked}");
    let log = jsonl_log(&dir.path().join("s"));
    let last = log.iter().rev().find(|e| e["type"] == "session/settings").expect("settings");
    assert_eq!(last["data"]["settings"].get("systemPrompt"), None, "{last}");
    assert_valid(dir.path(), "s", &id);
}

/// Every file under `root`, recursively.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn secrets_never_enter_a_store() {
    for store in ["sessions", "s.db"] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."])]);
        // A password in the URL, a key in its query string, an API key.
        let base = format!("http://user:hunter2pw@{}/v1?key=querysecret2", server.addr);
        let args =
            ["run", "--base-url", &base, "--model", "m", "--api-key", "sk-apikeysecret", "--store", store];
        let first = run(dir.path(), &[&args[..], &["Hi"]].concat());
        assert_eq!(first.code, Some(0), "{store}: {first:?}");
        let id = first.session_id();
        // Resumed with the URL from the environment: its secrets still reach the server, not the log.
        let second = command(dir.path(), &["run", "--store", store, "--session", &id, "Again?"])
            .env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "sk-apikeysecret")
            .stdin(Stdio::null())
            .output()
            .expect("run palimpsest");
        let second = Run::from(second);
        assert_eq!(second.code, Some(0), "{store}: {second:?}");
        assert_eq!(server.requests().len(), 2);

        let derived = run(dir.path(), &["derive", "--request", store, "--session", &id]);
        let derived: Value = serde_json::from_str(&derived.stdout).unwrap();
        assert_eq!(derived["settings"]["provider"], format!("http://{}/v1", server.addr), "{derived}");

        let files = files_under(dir.path());
        assert!(!files.is_empty());
        for file in files {
            let bytes = std::fs::read(&file).unwrap();
            for secret in ["hunter2pw", "querysecret2", "sk-apikeysecret", "user:"] {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{secret} is in {}",
                    file.display()
                );
            }
        }
        for secret in ["hunter2pw", "querysecret2", "sk-apikeysecret"] {
            assert!(
                !first.stderr.contains(secret) && !second.stderr.contains(secret),
                "{first:?} {second:?}"
            );
        }
    }
}

#[test]
fn a_log_never_turns_tools_on_each_run_passes_tools_again() {
    // A store can come from anyone: its logged `toolsDir` named a
    // directory the model then read and wrote (an outside probe: `/root`).
    let (dir, server, _base, id) =
        one_turn(&["--tools", "work"], |dir| std::fs::create_dir(dir.join("work")).unwrap());
    let logged = settings_events(&dir.path().join("s"));
    let tools_dir = logged[0]["data"]["settings"]["toolsDir"].as_str().unwrap_or_default().to_owned();
    assert!(Path::new(&tools_dir).is_absolute() && tools_dir.ends_with("work"), "{tools_dir}");

    // Without --tools: none offered, said with the flag that offers them.
    let second = run(dir.path(), &["run", "--store", "s", "--session", &id, "Again?"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    assert!(
        second.stderr.contains(&format!("the session offered tools confined to {tools_dir}")),
        "{second:?}"
    );
    assert!(second.stderr.contains(&format!("pass --tools {tools_dir} to offer them again")), "{second:?}");
    let offered = |i: usize| server.requests()[i]["tools"].as_array().map_or(0, Vec::len);
    assert_eq!((offered(0), offered(1)), (4, 0));
    let logged = settings_events(&dir.path().join("s"));
    assert_eq!(logged.len(), 2, "the tools changed: new settings");
    assert_eq!(logged[1]["data"]["settings"]["tools"], json!([]));
    assert!(logged[1]["data"]["settings"].get("toolsDir").is_none());

    // With --tools again: offered again.
    let third = run(dir.path(), &["run", "--store", "s", "--session", &id, "--tools", "work", "Back?"]);
    assert_eq!(third.code, Some(0), "{third:?}");
    assert_eq!(offered(2), 4);
    assert_eq!(settings_events(&dir.path().join("s")).len(), 3);
    assert_valid(dir.path(), "s", &id);
}

#[test]
fn an_api_key_goes_only_to_an_endpoint_the_user_names_not_to_the_logs() {
    // A store handed over names its endpoint: resumed with a key in the
    // environment, the key went there (an outside probe).
    let (dir, server, base, id) = one_turn(&[], |_| ());
    let with_key = |args: &[&str], env_base: Option<&str>| {
        let mut c = command(dir.path(), args);
        c.env("OPENAI_API_KEY", "sk-victimkey");
        if let Some(b) = env_base {
            c.env("OPENAI_BASE_URL", b);
        }
        Run::from(c.stdin(Stdio::null()).output().expect("run palimpsest"))
    };

    // A key, and the endpoint only the log names: refused before any request.
    let refused = with_key(&["run", "--store", "s", "--session", &id, "Again?"], None);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(refused.stderr.contains(&format!("pass --base-url {base} to continue there")), "{refused:?}");
    assert_eq!(server.requests().len(), 1, "nothing was sent");
    // Another endpoint in the environment: the log's is not used either.
    let elsewhere =
        with_key(&["run", "--store", "s", "--session", &id, "Again?"], Some("http://127.0.0.1:9/v1"));
    assert_eq!(elsewhere.code, Some(2), "{elsewhere:?}");
    assert_eq!(server.requests().len(), 1, "nothing was sent");

    // No key, but a credential in a header (Azure's `api-key`): refused
    // too (a second probe); a header known to carry none is not.
    let keyless = |args: &[&str], env_base: Option<&str>| {
        let mut c = command(dir.path(), args);
        if let Some(b) = env_base {
            c.env("OPENAI_BASE_URL", b);
        }
        Run::from(c.stdin(Stdio::null()).output().expect("run palimpsest"))
    };
    let header =
        keyless(&["run", "--store", "s", "--session", &id, "--header", "api-key: AZ-SECRET-1", "Hi?"], None);
    assert_eq!(header.code, Some(2), "{header:?}");
    assert!(
        header.stderr.contains("the --header api-key is sent only to an endpoint --base-url names"),
        "{header:?}"
    );
    // No credential, but the environment names another endpoint: refused.
    let other = keyless(&["run", "--store", "s", "--session", &id, "Hi?"], Some("http://127.0.0.1:9/v1"));
    assert_eq!(other.code, Some(2), "{other:?}");
    assert!(other.stderr.contains("and OPENAI_BASE_URL names http://127.0.0.1:9/v1;"), "{other:?}");
    assert!(other.stderr.contains("or --base-url http://127.0.0.1:9/v1 to move it there"), "{other:?}");
    assert_eq!(server.requests().len(), 1, "nothing was sent");

    // Named by the flag, or by the environment: the key goes there.
    let flagged = with_key(&["run", "--store", "s", "--session", &id, "--base-url", &base, "Two?"], None);
    assert_eq!(flagged.code, Some(0), "{flagged:?}");
    let from_env = with_key(&["run", "--store", "s", "--session", &id, "Three?"], Some(&base));
    assert_eq!(from_env.code, Some(0), "{from_env:?}");
    // Without a credential or another endpoint nothing is at stake: the
    // log's endpoint is used (issue 19: a resumed session keeps its
    // logged settings), a public header with it.
    let plain = keyless(&["run", "--store", "s", "--session", &id, "--header", "X-Title: t", "Four?"], None);
    assert_eq!(plain.code, Some(0), "{plain:?}");
    assert_eq!(server.requests().len(), 4);
    assert_valid(dir.path(), "s", &id);
}

#[test]
fn temperature_max_tokens_and_headers_reach_the_request_and_the_logged_settings_but_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![text_reply(&["Warm."]), text_reply(&["Still."])]);
    let base = server.base_url();
    let flags = [
        "--store",
        "s",
        "--temperature",
        "0.25",
        "--max-tokens",
        "77",
        "--header",
        "X-Title: palimpsest tests",
        "--header",
        "Authorization: Bearer tok-headersecret",
        "--header",
        "x-api-key:key-headersecret",
        "--header",
        "X-Custom-Creds:creds-headersecret",
        "Hi",
    ];
    let first = run(dir.path(), &model_args(&base, &flags));
    assert_eq!(first.code, Some(0), "{first:?}");

    let requests = server.requests();
    assert_eq!(requests[0]["temperature"], 0.25);
    assert_eq!(requests[0]["max_tokens"], 77);
    let head = &server.heads()[0];
    for sent in [
        "x-title: palimpsest tests\n",
        "authorization: Bearer tok-headersecret\n",
        "x-api-key: key-headersecret\n",
    ] {
        assert!(head.contains(sent), "{sent:?} was not sent: {head}");
    }
    let settings = settings_events(&dir.path().join("s"));
    assert_eq!(settings.len(), 1);
    let logged = &settings[0]["data"]["settings"];
    assert_eq!(logged["params"], json!({"temperature": 0.25, "maxTokens": 77}));
    assert_eq!(
        logged["headers"],
        json!({
            "X-Title": "palimpsest tests",
            "Authorization": "<redacted>",
            "x-api-key": "<redacted>",
            "X-Custom-Creds": "<redacted>"
        })
    );

    // Resumed without the flags: temperature and limit carry on from the
    // log; headers do not (their values may be secret, so they are not
    // all in the log), which is a change of settings, logged.
    let id = first.session_id();
    let second = run(dir.path(), &model_args(&base, &["--store", "s", "--session", &id, "Again"]));
    assert_eq!(second.code, Some(0), "{second:?}");
    let requests = server.requests();
    assert_eq!((&requests[1]["temperature"], &requests[1]["max_tokens"]), (&json!(0.25), &json!(77)));
    assert!(!server.heads()[1].contains("x-title"), "{}", server.heads()[1]);
    let settings = settings_events(&dir.path().join("s"));
    assert_eq!(settings.len(), 2);
    assert_eq!(settings[1]["data"]["settings"]["params"], json!({"temperature": 0.25, "maxTokens": 77}));
    assert_eq!(settings[1]["data"]["settings"].get("headers"), None);

    for file in files_under(dir.path()) {
        let bytes = std::fs::read(&file).unwrap();
        for secret in ["tok-headersecret", "key-headersecret", "creds-headersecret"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} is in {}",
                file.display()
            );
        }
    }
}

#[test]
fn bad_temperature_max_tokens_or_header_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let base = "http://127.0.0.1:9/v1";
    for (flags, says) in [
        (&["--temperature", "warm"][..], "is not a number"),
        (&["--temperature", "3"], "from 0 to 2"),
        (&["--temperature", "NaN"], "from 0 to 2"),
        (&["--max-tokens", "0"], "--max-tokens"),
        (&["--max-tokens", "-5"], "-5"),
        (&["--header", "no colon"], "is not NAME:VALUE"),
        (&["--header", ": empty name"], "is not a header name"),
        (&["--header", "bad name: v"], "is not a header name"),
    ] {
        let args = model_args(base, &[&["--store", "s.db"], flags, &["Hi"]].concat());
        let run = run(dir.path(), &args);
        assert_eq!(run.code, Some(2), "{flags:?}: {run:?}");
        assert!(run.stderr.contains(says), "{flags:?}: {}", run.stderr);
    }
    assert!(!dir.path().join("s.db").exists(), "nothing was written");
}

#[test]
fn continue_picks_the_session_started_last_and_a_prefix_names_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![
        text_reply(&["One."]),
        text_reply(&["Two."]),
        text_reply(&["Three."]),
        text_reply(&["Four."]),
        text_reply(&["Five."]),
    ]);
    let base = server.base_url();
    let first = run(dir.path(), &model_args(&base, &["--store", "s.db", "First?"]));
    assert_eq!(first.code, Some(0), "{first:?}");
    // Session ids carry the time to the second: make the second one later.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = run(dir.path(), &model_args(&base, &["--store", "s.db", "Second?"]));
    assert_eq!(second.code, Some(0), "{second:?}");
    let (a, b) = (first.session_id(), second.session_id());
    assert_ne!(a, b);

    let cont = run(dir.path(), &model_args(&base, &["--store", "s.db", "-c", "Third?"]));
    assert_eq!(cont.code, Some(0), "{cont:?}");
    assert!(cont.stderr.contains(&format!("resuming session {b}")), "{}", cont.stderr);
    let requests = server.requests();
    let last = &requests[2]["messages"];
    assert!(last.to_string().contains("Second?") && !last.to_string().contains("First?"), "{last}");

    // A unique prefix of the first id (it differs from the second's by its time).
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let prefix = &a[..common + 1];
    let resumed = run(dir.path(), &model_args(&base, &["--store", "s.db", "--session", prefix, "Fourth?"]));
    assert_eq!(resumed.code, Some(0), "{resumed:?}");
    assert!(resumed.stderr.contains(&format!("resuming session {a}")), "{}", resumed.stderr);
    // Ambiguous: the part both share; unknown: nothing starts so.
    let ambiguous = run(dir.path(), &model_args(&base, &["--store", "s.db", "--session", &a[..common], "x"]));
    assert_eq!(ambiguous.code, Some(2), "{ambiguous:?}");
    assert!(ambiguous.stderr.contains("give more of it"), "{}", ambiguous.stderr);
    let unknown = run(dir.path(), &model_args(&base, &["--store", "s.db", "--session", "nosuch", "x"]));
    assert_eq!(unknown.code, Some(2), "{unknown:?}");
    assert!(unknown.stderr.contains("error[not-found]"), "{}", unknown.stderr);
    assert_eq!(server.requests().len(), 4, "no model call for a refused resume");

    // A run that quits before its first turn (stdin at its end) leaves a
    // session of its settings alone, started last: `-c` still means the
    // last conversation.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let quit = run(dir.path(), &model_args(&base, &["--store", "s.db"]));
    assert_eq!(quit.code, Some(0), "{quit:?}");
    let listed = run(dir.path(), &["sessions", "--json", "s.db"]);
    let count = serde_json::from_str::<Value>(&listed.stdout).ok().and_then(|v| v.as_array().map(Vec::len));
    assert_eq!(count, Some(3), "the run that quit left its session: {listed:?}");
    let cont = run(dir.path(), &model_args(&base, &["--store", "s.db", "-c", "Fifth?"]));
    assert_eq!(cont.code, Some(0), "{cont:?}");
    assert!(cont.stderr.contains(&format!("resuming session {b}")), "{}", cont.stderr);
}

/// The `error`, `hint` and `warning` lines of a run, its session id and
/// server address replaced, for snapshots.
fn advice(run: &Run, base: &str) -> String {
    let id = if run.stderr.contains("note: new session ") { run.session_id() } else { String::new() };
    run.stderr
        .lines()
        .filter(|l| l.starts_with("error[") || l.starts_with("hint: ") || l.starts_with("warning: "))
        .map(|l| {
            let l = if id.is_empty() { l.to_owned() } else { l.replace(&id, "<id>") };
            format!("{}\n", l.replace(base, "<base>"))
        })
        .collect()
}

#[test]
fn a_401_or_403_hints_at_the_api_key_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |status| Reply::Json(status, r#"{"error":{"message":"invalid api key"}}"#.into());
    let server = Server::start(vec![refused(401), refused(403)]);
    let base = server.base_url();
    let no_key = run(dir.path(), &model_args(&base, &["Hi"]));
    assert_eq!(no_key.code, Some(1), "{no_key:?}");
    let with_flag = run(dir.path(), &model_args(&base, &["--api-key", "sk-wrong", "Hi"]));
    assert_eq!(with_flag.code, Some(1), "{with_flag:?}");
    assert_eq!(server.requests().len(), 2, "a refusal is not retried");
    insta::assert_snapshot!(
        "provider_refused_credentials",
        format!("--- no key\n{}--- --api-key\n{}", advice(&no_key, &base), advice(&with_flag, &base))
    );
    let hint = |r: &Run| r.stderr.lines().filter(|l| l.starts_with("hint: ")).count();
    assert_eq!((hint(&no_key), hint(&with_flag)), (1, 1));
    assert_valid(dir.path(), "palimpsest.db", &no_key.session_id());
}

#[test]
fn a_base_url_without_a_scheme_is_refused_before_any_request_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let local = run(dir.path(), &model_args("localhost:8080/v1", &["Hi"]));
    assert_eq!(local.code, Some(2), "{local:?}");
    assert_eq!(
        local.stderr,
        "error[usage]: base URL \"localhost:8080/v1\" has no scheme (http:// or https://); did you mean http://localhost:8080/v1?\n"
    );
    // From the variable too, and a remote host gets https.
    let remote = command(dir.path(), &["run", "--model", "m", "Hi"])
        .env("OPENAI_BASE_URL", "api.example.com/v1")
        .stdin(Stdio::null())
        .output()
        .map(Run::from)
        .unwrap();
    assert_eq!(remote.code, Some(2), "{remote:?}");
    assert!(remote.stderr.contains("did you mean https://api.example.com/v1?"), "{remote:?}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing is created before the URL is checked: {left:?}");
}

#[test]
fn a_stream_of_nothing_without_a_finish_reason_is_a_warning_exit_1_and_an_error_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let nothing = vec![sse::event(json!({"role": "assistant"}), None), "data: [DONE]\n\n".to_owned()];
    let server = Server::start(vec![Reply::Sse(nothing)]);
    let base = server.base_url();
    let run = run(dir.path(), &model_args(&base, &["--store", "s", "Hi"]));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "");
    insta::assert_snapshot!("provider_empty_stream", advice(&run, &base));
    let log = jsonl_log(&dir.path().join("s"));
    let reasons = turn_end_reasons(&log);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(
        (&reasons[0]["kind"], &reasons[0]["error"]["code"]),
        (&json!("error"), &json!("PROVIDER_STREAM"))
    );
    assert!(!types(&log).contains(&"assistant/message"), "no empty answer is logged: {:?}", types(&log));
    assert_valid(dir.path(), "s", &run.session_id());
}

#[test]
fn an_empty_answer_that_completes_is_said_on_stderr() {
    // A finish reason with nothing before it (an empty delta stream, a
    // finish of tool_calls with no call, a chunk shape this build does not
    // read): completed, as the server said, but not silently.
    let dir = tempfile::tempdir().unwrap();
    let empty = vec![
        sse::event(json!({"role": "assistant", "content": ""}), None),
        sse::event(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = Server::start(vec![Reply::Sse(empty)]);
    let run = run(dir.path(), &model_args(&server.base_url(), &["--store", "s", "Hi"]));
    assert_eq!((run.code, run.stdout.as_str()), (Some(0), ""), "{run:?}");
    assert!(run.stderr.contains("turn 1: the model's answer was empty"), "{run:?}");
    assert_valid(dir.path(), "s", &run.session_id());
}

/// The events of a JSONL session file.
fn file_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the session file");
    text.lines().skip(1).map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[test]
fn store_jsonl_makes_one_session_file_then_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![
        text_reply(&["One."]),
        text_reply(&["Two."]),
        text_reply(&["Three."]),
        text_reply(&["Four."]),
    ]);
    let base = server.base_url();
    let first = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "Hi"]));
    assert_eq!(first.code, Some(0), "{first:?}");
    let file = dir.path().join("s.jsonl");
    assert!(file.is_file(), "a session file, not a directory");
    let id = first.session_id();
    assert!(
        first.stderr.contains(&format!("note: new session {id} in s.jsonl (JSONL file); continue it with `palimpsest run --store s.jsonl`")),
        "{first:?}"
    );
    // Named again, the file's one session carries on, with or without --session.
    let second = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "And?"]));
    assert_eq!((second.code, second.stdout.as_str()), (Some(0), "Two.\n"), "{second:?}");
    assert!(second.stderr.contains(&format!("note: resuming session {id} in s.jsonl")), "{second:?}");
    let third = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "--session", &id, "More?"]));
    assert_eq!(third.code, Some(0), "{third:?}");
    let log = file_log(&file);
    assert_eq!(turn_end_reasons(&log).len(), 3, "three turns in the one file");
    assert_valid(dir.path(), "s.jsonl", &id);
    let mut entries: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    entries.sort();
    assert_eq!(entries, ["s.checkpoint.json", "s.jsonl"], "nothing beside it but its checkpoint");
    // The resume reads the checkpoint and what follows it: a line of the
    // second turn (before the checkpoint, and neither in the head nor the
    // tail that a file's summary reads) made unreadable, its length kept,
    // is not read, as in a directory.
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let middle = lines.len() / 2;
    lines[middle] = "x".repeat(lines[middle].len());
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let fourth = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "Four?"]));
    assert_eq!(fourth.code, Some(0), "bounded: {fourth:?}");
    let resumed = run(dir.path(), &["derive", "--request", "--from-checkpoint", "s.jsonl"]);
    assert_eq!(resumed.code, Some(0), "{resumed:?}");
    assert!(!resumed.stderr.contains("no checkpoint matches"), "{resumed:?}");
    assert_eq!(run(dir.path(), &["validate", "s.jsonl"]).code, Some(1), "validate reads it all");

    // A --session that is not the file's is not-found; nothing is asked.
    let wrong = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "--session", "other", "Hi"]));
    assert_eq!(wrong.code, Some(2), "{wrong:?}");
    assert!(wrong.stderr.starts_with("error[not-found]: s.jsonl: no session \"other\""), "{wrong:?}");
    assert_eq!(server.requests().len(), 4);
    // A new file with --session has nothing to continue.
    let missing = run(dir.path(), &model_args(&base, &["--store", "new.jsonl", "--session", "x", "Hi"]));
    assert_eq!(missing.code, Some(2), "{missing:?}");
    assert!(!dir.path().join("new.jsonl").exists());
}

#[cfg(unix)]
#[test]
fn a_fifo_named_as_the_store_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let made = Command::new("mkfifo").arg(dir.path().join("f.jsonl")).status().unwrap();
    assert!(made.success());
    let server = Server::start(vec![]);
    let started = Instant::now();
    let run = run(dir.path(), &model_args(&server.base_url(), &["--store", "f.jsonl", "Hi"]));
    assert!(started.elapsed() < Duration::from_secs(10), "it waited on the FIFO");
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("not a regular file but a FIFO"), "{run:?}");
    assert!(server.requests().is_empty());
}

#[test]
fn a_session_file_being_run_is_locked_for_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(vec![Reply::Stall]);
    let base = server.base_url();
    let mut child = spawn_until_requested(dir.path(), &server, &["--store", "s.jsonl", "Think hard."]);
    // The first run's turn is open; continuing would close it, and cannot.
    let second = run(dir.path(), &model_args(&base, &["--store", "s.jsonl", "Me too"]));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(second.code, Some(1), "{second:?}");
    assert!(second.stderr.contains("error[locked]: "), "{second:?}");
    assert_eq!(server.requests().len(), 1, "the second run asked nothing");
}

#[test]
fn a_hold_length_out_of_bounds_is_the_default_with_a_warning_not_a_panic() {
    // `u64::MAX` panicked (`Duration::from_secs_f64`); 1e-6 s renewed the
    // hold thousands of times a turn (an outside probe).
    for given in ["18446744073709551615", "0.000001", "abc"] {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(vec![text_reply(&["One."])]);
        let base = server.base_url();
        let out = command(dir.path(), &model_args(&base, &["--store", "s", "Hi"]))
            .env("PALIMPSEST_HOLD_SECS", given)
            .stdin(Stdio::null())
            .output()
            .expect("run palimpsest");
        let out = Run::from(out);
        assert_eq!(out.code, Some(0), "{given}: {out:?}");
        assert!(out.stderr.contains("is not a number of seconds from 0.1 to 604800"), "{given}: {out:?}");
    }
}

#[test]
fn a_logged_provider_spelled_otherwise_is_the_same_endpoint_and_a_schemeless_one_is_refused_as_unnamed() {
    // A log written by hand: its provider in another spelling than the
    // environment's same endpoint was refused, naming two equal URLs; a
    // provider without a scheme got "did you mean https://..." before the
    // credential check (a probe).
    let (dir, server, base, id) = one_turn(&[], |_| ());
    let store = dir.path().join("s");
    let keyed = |env_base: &str, prompt: &str| {
        let out = command(dir.path(), &["run", "--store", "s", "--session", &id, prompt])
            .env("OPENAI_API_KEY", "sk-victimkey")
            .env("OPENAI_BASE_URL", env_base)
            .stdin(Stdio::null())
            .output()
            .expect("run palimpsest");
        Run::from(out)
    };
    let settings =
        |provider: &str| json!({"model": "m", "provider": provider, "tools": [], "contextBudget": 100000});
    log_settings_by_hand(&store, &settings(&format!("{}/", base.replacen("http://", "HTTP://", 1))));
    let same = keyed(&base, "Two?");
    assert_eq!(same.code, Some(0), "{same:?}");

    log_settings_by_hand(&store, &settings("scripted"));
    let unnamed = keyed("http://127.0.0.1:9/v1", "Three?");
    assert_eq!(unnamed.code, Some(2), "{unnamed:?}");
    assert!(
        unnamed.stderr.contains("your API key is sent only to an endpoint --base-url names"),
        "{unnamed:?}"
    );
    assert!(!unnamed.stderr.contains("did you mean"), "{unnamed:?}");
    assert_eq!(server.requests().len(), 2);
}
