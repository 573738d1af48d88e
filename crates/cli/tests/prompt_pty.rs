//! The interactive prompt of `palimpsest run` on a real pseudo-terminal:
//! the binary runs under `expectrl`, talks to the scripted loopback
//! endpoint of `support/sse.rs`, and each test types keys as a person
//! would, then reads the store the run wrote: what the log says is what
//! counts, the screen only tells when to type next.
#![cfg(unix)]

#[path = "support/sse.rs"]
mod sse;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use expectrl::process::unix::WaitStatus;
use expectrl::session::OsSession;
use expectrl::{Eof, Expect, Session};
use serde_json::{json, Value};

use sse::{text_reply, Reply, Server};

const BIN: &str = env!("CARGO_BIN_EXE_palimpsest");

/// Generous: a loaded machine is slow, and a passing test waits no longer
/// than its output takes.
const WAIT: Duration = Duration::from_secs(30);

const LEFT: &str = "\x1b[D";
const UP: &str = "\x1b[A";
const ALT_ENTER: &str = "\x1b\r";
const CTRL_C: &str = "\x03";
const CTRL_D: &str = "\x04";
const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

/// A test's directory: the store `s` (a JSONL store directory) and the
/// history file `history` are in it.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        Place { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    fn history(&self) -> PathBuf {
        self.dir.path().join("history")
    }

    /// `palimpsest run` on a pseudo-terminal, at the scripted `server`.
    fn run(&self, server: &Server, rest: &[&str]) -> Prompt {
        self.run_in("s", server, rest)
    }

    /// [`run`](Place::run) with another store.
    fn run_in(&self, store: &str, server: &Server, rest: &[&str]) -> Prompt {
        let mut command = Command::new(BIN);
        command
            .current_dir(self.dir.path())
            .args(["run", "--store", store, "--base-url", &server.base_url(), "--model", "m"])
            .args(["--chunk-window-ms", "0"])
            .args(rest)
            .env("PALIMPSEST_HISTORY", self.history())
            .env("TERM", "xterm")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("PALIMPSEST_LOG");
        let mut session = Session::spawn(command).expect("spawn palimpsest on a pty");
        session.set_expect_timeout(Some(WAIT));
        let mut prompt = Prompt { session, screen: String::new() };
        prompt.ready();
        prompt
    }

    /// Every session in the store, each as its lines (header first).
    fn logs(&self) -> Vec<Vec<Value>> {
        let store = self.dir.path().join("s");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&store)
            .expect("the store directory")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).expect("a session file");
                text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
            })
            .collect()
    }

    /// Asserts `palimpsest validate` finds every session in the store valid.
    fn assert_valid(&self) {
        for log in self.logs() {
            let id = log[0]["id"].as_str().expect("a session id").to_owned();
            self.validate("s", &id);
        }
    }

    /// `palimpsest validate STORE --session ID --json`, which must say valid.
    fn validate(&self, store: &str, id: &str) -> Value {
        let out = Command::new(BIN)
            .current_dir(self.dir.path())
            .args(["validate", store, "--session", id, "--json"])
            .output()
            .expect("run palimpsest validate");
        let report: Value = serde_json::from_slice(&out.stdout).expect("validate --json prints JSON");
        assert_eq!((out.status.code(), &report["valid"]), (Some(0), &json!(true)), "{id}: {report}");
        report
    }

    /// The one session in the store.
    fn log(&self) -> Vec<Value> {
        let mut logs = self.logs();
        assert_eq!(logs.len(), 1, "one session in the store");
        logs.remove(0)
    }
}

/// The texts of the user messages a log holds, in order.
fn user_messages(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|e| e["type"] == "user/message" && e["data"]["message"]["source"]["kind"] == "user")
        .map(|e| {
            let content = e["data"]["message"]["content"].as_array().expect("content blocks");
            content.iter().filter_map(|b| b["text"].as_str()).collect::<String>()
        })
        .collect()
}

fn events_of<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter().filter(|e| e["type"] == kind).collect()
}

/// A running prompt.
struct Prompt {
    session: OsSession,
    /// Everything read from the terminal so far.
    screen: String,
}

impl Prompt {
    /// Reads up to and including `needle`; panics with the screen when it
    /// does not come.
    fn expect(&mut self, needle: &str) {
        match self.session.expect(needle) {
            Ok(found) => {
                self.screen.push_str(&String::from_utf8_lossy(found.before()));
                self.screen.push_str(needle);
            }
            Err(e) => {
                // What came after the last match, as far as it can be read now.
                let mut rest = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = self.session.try_read(&mut buf) {
                    rest.extend_from_slice(&buf[..n]);
                }
                panic!(
                    "{needle:?} never came ({e}); the screen up to the last match:\n{}\n--- then:\n{}",
                    self.screen,
                    String::from_utf8_lossy(&rest)
                )
            }
        }
    }

    /// Waits for the editor's prompt.
    fn ready(&mut self) {
        self.expect("> ");
    }

    fn send(&mut self, keys: &str) {
        self.session.send(keys).expect("type into the pty");
    }

    /// Types `keys`, Enter, and waits for the answer and the next prompt.
    fn turn(&mut self, keys: &str, answer: &str) {
        self.send(keys);
        self.send("\r");
        self.expect(answer);
        self.ready();
    }

    /// The session id the run announced.
    fn session_id(&self) -> String {
        let rest = self.screen.split("note: new session ").nth(1).expect("a new-session note");
        rest.split_whitespace().next().expect("an id").to_owned()
    }

    /// Ctrl-D at the (empty) prompt; the exit code.
    fn quit(mut self) -> i32 {
        self.send(CTRL_D);
        self.exit_code()
    }

    /// Reads the terminal to its end and waits for the process.
    fn exit_code(mut self) -> i32 {
        let _ = self.session.expect(Eof);
        match self.session.get_process().wait() {
            Ok(WaitStatus::Exited(_, code)) => code,
            other => panic!("palimpsest did not exit normally: {other:?}; the screen:\n{}", self.screen),
        }
    }
}

#[test]
fn left_left_x_edits_the_line_and_the_log_holds_the_edited_text() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["Done."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn(&format!("abcdef{LEFT}{LEFT}X"), "Done.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["abcdXef"]);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["messages"], json!([{"role": "user", "content": "abcdXef"}]));
}

#[test]
fn up_recalls_the_previous_prompt_and_the_history_outlives_the_run() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."]), text_reply(&["Three."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn("first prompt", "One.");
    // Up, in the same run.
    prompt.turn(UP, "Two.");
    assert_eq!(prompt.quit(), 0);
    let history = std::fs::read_to_string(place.history()).expect("the history file was written");
    assert!(history.contains("first prompt"), "{history:?}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(place.history()).expect("the history file").permissions().mode();
    assert_eq!(mode & 0o077, 0, "the history is the user's alone: {mode:o}");

    // A second run, a new session, the same history file.
    let mut prompt = place.run(&server, &[]);
    prompt.turn(UP, "Three.");
    assert_eq!(prompt.quit(), 0);
    let logs = place.logs();
    assert_eq!(logs.len(), 2, "two runs, two sessions");
    let mut messages: Vec<Vec<String>> = logs.iter().map(|l| user_messages(l)).collect();
    messages.sort();
    assert_eq!(messages, [vec!["first prompt"], vec!["first prompt", "first prompt"]]);
}

#[test]
fn a_bracketed_paste_of_three_lines_is_one_message_and_one_model_call() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["Pasted."]), text_reply(&["Never."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn(&format!("{PASTE_START}line one\n  line two\r\nline three{PASTE_END}"), "Pasted.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["line one\n  line two\nline three"]);
    assert_eq!(server.requests().len(), 1, "one model call");
}

#[test]
fn alt_enter_inserts_a_newline_and_indentation_is_kept() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["A."]), text_reply(&["B."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn(&format!("first{ALT_ENTER}  second"), "A.");
    prompt.turn("    indented ", "B.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["first\n  second", "    indented "]);
}

#[test]
fn help_lists_the_commands_and_calls_no_model() {
    let place = Place::new();
    let server = Server::start(vec![]);
    let mut prompt = place.run(&server, &[]);
    prompt.send("/help\r");
    for command in ["/exit", "/session", "/model", "/system", "/compact", "/fork", "//TEXT", "Alt-Enter"] {
        prompt.expect(command);
    }
    prompt.ready();
    // An unknown command is an error listing them, not a message either.
    prompt.send("/frobnicate\r");
    prompt.expect("unknown command /frobnicate; the commands are /help");
    prompt.ready();
    assert_eq!(prompt.quit(), 0);
    assert!(server.requests().is_empty(), "no model call: {:?}", server.requests());
    let log = place.log();
    assert!(user_messages(&log).is_empty(), "{log:?}");
    assert!(events_of(&log, "turn/start").is_empty(), "{log:?}");
}

#[test]
fn a_double_slash_sends_the_rest_verbatim() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["Path."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn("//etc/hosts, what is it?", "Path.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["/etc/hosts, what is it?"]);
}

#[test]
fn session_prints_the_session_id() {
    let place = Place::new();
    let server = Server::start(vec![]);
    let mut prompt = place.run(&server, &[]);
    let id = prompt.session_id();
    prompt.send("/session\r");
    prompt.expect(&format!("\n{id}\r\n"));
    prompt.ready();
    assert_eq!(prompt.quit(), 0);
    assert_eq!(place.log()[0]["id"], json!(id), "the id printed is the stored session's");
}

#[test]
fn system_and_model_log_new_settings_used_from_the_next_turn() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["Before."]), text_reply(&["After."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn("one", "Before.");
    prompt.send("/system Be terse.\r");
    prompt.expect("settings changed:");
    prompt.ready();
    prompt.send("/model other-model\r");
    prompt.expect("settings changed:");
    prompt.ready();
    prompt.turn("two", "After.");
    assert_eq!(prompt.quit(), 0);

    let log = place.log();
    let settings: Vec<&Value> =
        events_of(&log, "session/settings").into_iter().map(|e| &e["data"]["settings"]).collect();
    assert_eq!(settings.len(), 3, "the run's, then one per command: {settings:?}");
    assert_eq!(settings[0].get("systemPrompt"), None);
    assert_eq!(settings[1]["systemPrompt"], "Be terse.");
    assert_eq!(settings[1]["model"], "m");
    assert_eq!(
        (&settings[2]["systemPrompt"], &settings[2]["model"]),
        (&json!("Be terse."), &json!("other-model"))
    );
    // Both after the first turn, before the second.
    let seq_of = |kind: &str, nth: usize| events_of(&log, kind)[nth]["seq"].as_u64().expect("a seq");
    assert!(seq_of("turn/end", 0) < seq_of("session/settings", 1));
    assert!(seq_of("session/settings", 2) < seq_of("turn/start", 1));

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "m");
    assert_eq!(requests[0]["messages"][0]["role"], "user");
    assert_eq!(requests[1]["model"], "other-model");
    assert_eq!(requests[1]["messages"][0], json!({"role": "system", "content": "Be terse."}));
}

#[test]
fn ctrl_c_at_the_prompt_clears_the_line() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["Clean."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.send("never sent");
    prompt.expect("never sent");
    prompt.send(CTRL_C);
    prompt.expect("(Ctrl-C again, Ctrl-D or /exit to quit)");
    prompt.ready();
    prompt.turn("kept", "Clean.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["kept"]);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn ctrl_c_twice_at_the_prompt_quits() {
    let place = Place::new();
    let server = Server::start(vec![]);
    let mut prompt = place.run(&server, &[]);
    prompt.send(CTRL_C);
    prompt.expect("(Ctrl-C again, Ctrl-D or /exit to quit)");
    prompt.ready();
    prompt.send(CTRL_C);
    assert_eq!(prompt.exit_code(), 0);
    place.assert_valid();
}

#[test]
fn a_ctrl_c_soon_after_a_cancel_quits_as_a_second_one_would_have() {
    // The cancel takes milliseconds: the second Ctrl-C of a double tap
    // lands at the prompt, where it only cleared an empty line.
    let place = Place::new();
    let server = Server::start(vec![Reply::Stall]);
    let mut prompt = place.run(&server, &[]);
    prompt.send("Think hard.\r");
    let deadline = Instant::now() + WAIT;
    while server.requests().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    prompt.send(CTRL_C);
    prompt.expect("note: turn 1 cancelled");
    prompt.ready();
    prompt.send(CTRL_C);
    assert_eq!(prompt.exit_code(), 0);
    place.assert_valid();
}

#[test]
fn ctrl_c_mid_stream_cancels_the_turn_and_the_prompt_comes_back() {
    let place = Place::new();
    let server = Server::start(vec![Reply::Stall, text_reply(&["Again."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.send("Think hard.\r");
    // The request is in: the turn is streaming (its headers came).
    let deadline = Instant::now() + WAIT;
    while server.requests().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.requests().len(), 1, "the request never arrived; the screen:\n{}", prompt.screen);
    prompt.send(CTRL_C);
    prompt.expect("^C: cancelling the turn");
    prompt.expect("note: turn 1 cancelled");
    prompt.ready();
    prompt.turn("and now?", "Again.");
    assert_eq!(prompt.quit(), 0, "a cancelled turn is not a failure of the session");
    place.assert_valid();

    let log = place.log();
    let ends: Vec<&Value> = events_of(&log, "turn/end").into_iter().map(|e| &e["data"]["reason"]).collect();
    assert_eq!(ends, [&json!({"kind": "aborted", "reason": "cancelled"}), &json!({"kind": "completed"})]);
    assert_eq!(user_messages(&log), ["Think hard.", "and now?"]);
}

#[test]
fn ctrl_d_at_an_empty_prompt_exits_0() {
    let place = Place::new();
    let server = Server::start(vec![]);
    let prompt = place.run(&server, &[]);
    assert_eq!(prompt.quit(), 0);
    let log = place.log();
    assert_eq!(events_of(&log, "session/settings").len(), 1);
    assert!(events_of(&log, "turn/start").is_empty());
}

#[test]
fn fork_carries_on_in_a_child_and_leaves_the_parent_as_it_was() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."])]);
    let mut prompt = place.run(&server, &[]);
    let parent = prompt.session_id();
    prompt.turn("one", "One.");
    prompt.send("/fork\r");
    prompt.expect("carrying on in ");
    prompt.ready();
    prompt.turn("two", "Two.");
    prompt.send("/session\r");
    prompt.expect(&format!("{parent}-fork-"));
    prompt.ready();
    assert_eq!(prompt.quit(), 0);
    place.assert_valid();

    let logs = place.logs();
    assert_eq!(logs.len(), 2, "the parent and the fork");
    let (parent_log, child_log) =
        if logs[0][0]["id"] == json!(parent) { (&logs[0], &logs[1]) } else { (&logs[1], &logs[0]) };
    assert_eq!(user_messages(parent_log), ["one"], "the parent stops at the fork");
    assert_eq!(user_messages(child_log), ["one", "two"]);
    assert_eq!(child_log[0]["parentSession"], json!(parent));
    let seed = u64::try_from(parent_log.len() - 1).expect("a length");
    assert_eq!(child_log[0]["seedLength"], json!(seed), "the whole parent is the seed");
    // The second request carried the first turn: the fork has the history.
    assert_eq!(server.requests()[1]["messages"].as_array().map(Vec::len), Some(3));
}

#[test]
fn compact_summarises_the_history_now_and_the_next_request_starts_from_the_summary() {
    let place = Place::new();
    let mut replies: Vec<Reply> = (1..=5).map(|i| text_reply(&[&format!("Answer {i}.")])).collect();
    replies.push(text_reply(&["The summary."]));
    replies.push(text_reply(&["After."]));
    let server = Server::start(replies);
    let mut prompt = place.run(&server, &[]);
    for i in 1..=5 {
        prompt.turn(&format!("question {i}"), &format!("Answer {i}."));
    }
    prompt.send("/compact\r");
    prompt.expect("compacting the history (about ");
    prompt.expect("compacted: a summary");
    prompt.ready();
    prompt.turn("question 6", "After.");
    assert_eq!(prompt.quit(), 0);
    place.assert_valid();

    let log = place.log();
    let starts = events_of(&log, "compaction/start");
    assert_eq!(starts.len(), 1, "{log:?}");
    assert_eq!(starts[0]["data"]["reason"], "requested");
    let ends = events_of(&log, "compaction/end");
    assert_eq!(ends.len(), 1);
    let summary_seq = ends[0]["data"]["summarySeq"].as_u64().expect("a summary, not an error");
    // Between turns 5 and 6.
    let seq = |e: &Value| e["seq"].as_u64().expect("a seq");
    assert!(seq(events_of(&log, "turn/end")[4]) < seq(starts[0]));
    assert!(summary_seq < seq(events_of(&log, "turn/start")[5]));

    let requests = server.requests();
    assert_eq!(requests.len(), 7, "five turns, the summary, the sixth turn");
    let sixth = requests[6]["messages"].as_array().expect("messages");
    assert!(sixth[0]["content"].as_str().is_some_and(|c| c.contains("The summary.")), "{sixth:?}");
    assert!(sixth.len() < 12, "the older history is gone: {sixth:?}");
}

#[test]
fn fork_works_in_a_sqlite_store_too() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["One."]), text_reply(&["Two."])]);
    let mut prompt = place.run_in("s.db", &server, &[]);
    let parent = prompt.session_id();
    prompt.turn("one", "One.");
    prompt.send("/fork\r");
    prompt.expect("carrying on in ");
    prompt.ready();
    prompt.turn("two", "Two.");
    assert_eq!(prompt.quit(), 0);

    let child = format!("{parent}-fork-");
    let child = listed_session(&place, &child);
    let parent_report = place.validate("s.db", &parent);
    let child_report = place.validate("s.db", &child);
    let events = |r: &Value| r["events"].as_u64().expect("an event count");
    // The child is the whole parent, then a second turn (turn/start, the
    // message, step/start, a text chunk, a usage chunk, the answer,
    // step/end, turn/end).
    assert_eq!(events(&child_report), events(&parent_report) + 8, "{parent_report} {child_report}");
}

/// The id of the session `palimpsest sessions` lists that starts with `prefix`.
fn listed_session(place: &Place, prefix: &str) -> String {
    let out = Command::new(BIN)
        .current_dir(place.dir.path())
        .args(["sessions", "s.db"])
        .output()
        .expect("run palimpsest sessions");
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = listing.split_whitespace().find(|w| w.starts_with(prefix));
    id.unwrap_or_else(|| panic!("no fork in the listing:\n{listing}")).to_owned()
}

#[test]
fn ctrl_r_finds_an_older_prompt_in_the_history() {
    let place = Place::new();
    let server = Server::start(vec![text_reply(&["A."]), text_reply(&["B."]), text_reply(&["C."])]);
    let mut prompt = place.run(&server, &[]);
    prompt.turn("alpha one", "A.");
    prompt.turn("beta two", "B.");
    prompt.send("\x12alp");
    prompt.expect("alpha one");
    prompt.turn("", "C.");
    assert_eq!(prompt.quit(), 0);
    assert_eq!(user_messages(&place.log()), ["alpha one", "beta two", "alpha one"]);
}
