//! `palimpsest demo` as a person runs it: in a fresh directory with no
//! flags, killed mid-turn and resumed, interrupted with Ctrl-C and resumed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_palimpsest");

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).current_dir(dir).args(args).output().expect("run palimpsest")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_demo_needs_no_setup_and_leaves_a_valid_sqlite_store_in_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["demo", "--pace", "0", "--color", "never"]);
    let text = stdout(&o);
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("store:     palimpsest-demo.db (SQLite database)"), "{text}");
    assert!(dir.path().join("palimpsest-demo.db").is_file());
    assert!(text.contains("valid, every surface rule and invariant holds"), "{text}");
    assert!(text.contains("── the full log beside the surface"), "{text}");
    // The store it leaves is readable by the other commands.
    let v = run(dir.path(), &["validate", "palimpsest-demo.db", "--json"]);
    assert!(v.status.success(), "{}", stdout(&v));
    assert!(stdout(&v).contains(r#""valid":true"#));
    // A second run adds a second session to the same store.
    let again = run(dir.path(), &["demo", "--pace", "0", "--quiet"]);
    assert!(again.status.success());
    let sessions = stdout(&run(dir.path(), &["sessions", "palimpsest-demo.db"]));
    assert_eq!(sessions.matches("demo-").count(), 2, "{sessions}");
}

/// Starts a paced demo and reads its output until a tool of turn 2 is
/// running; returns the child, the session id and what it printed.
fn start_until_turn_2_tool(dir: &Path, store: &str) -> (Child, String, String) {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(["demo", "--store", store, "--pace", "500", "--quiet", "--color", "never"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the demo");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut id, mut seen, mut in_turn_2) = (String::new(), String::new(), false);
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.strip_prefix("session:") {
            id = rest.trim().to_owned();
        }
        in_turn_2 |= line.starts_with("turn 2 of");
        if in_turn_2 && line.contains("→ read_file") {
            break;
        }
    }
    assert!(!id.is_empty() && in_turn_2, "the demo never reached turn 2's tool:\n{seen}");
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, id, seen)
}

fn resume(dir: &Path, store: &str, id: &str) -> String {
    let o =
        run(dir, &["demo", "--store", store, "--resume", id, "--pace", "0", "--quiet", "--color", "never"]);
    let text = stdout(&o);
    assert!(o.status.success(), "resume failed:\n{text}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("valid, every surface rule and invariant holds"), "{text}");
    assert!(text.contains("turn 6 of 6"), "{text}");
    text
}

#[cfg(unix)]
#[test]
fn a_demo_killed_mid_turn_resumes_through_repair() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, id, _) = start_until_turn_2_tool(dir.path(), "crash.db");
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    // The turn was left open: repair has closers for it (a tool/result for
    // the running call, step/end, turn/end).
    let closers = run(dir.path(), &["repair", "crash.db", "--session", &id]);
    assert!(closers.status.success());
    let closers: serde_json::Value = serde_json::from_slice(&closers.stdout).unwrap();
    let types: Vec<_> =
        closers.as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(types.last().map(String::as_str), Some("turn/end"), "{types:?}");
    assert!(types.contains(&"tool/result".to_owned()), "the running call gets a result: {types:?}");
    let text = resume(dir.path(), "crash.db", &id);
    assert!(text.contains("resumed:   "), "{text}");
    assert!(text.contains("repaired:  the interrupted turn was closed"), "{text}");
    assert!(text.contains("1 of 6 turns completed"), "{text}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_turn_and_resume_finishes_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jsonl-store");
    let store = store.to_str().unwrap();
    let (mut child, id, _) = start_until_turn_2_tool(dir.path(), store);
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "an interrupted demo is not a success");
    // The turn ended aborted, so there is nothing to repair.
    let closers = run(dir.path(), &["repair", store, "--session", &id]);
    assert_eq!(stdout(&closers).trim(), "[]");
    let text = resume(dir.path(), store, &id);
    assert!(!text.contains("repaired:"), "{text}");
}

/// Ctrl-C in the pause before a turn, when no turn is running, stops the
/// demo there (it used to be swallowed, and the demo ran to its end): exit
/// 1, nothing left open, and the resume finishes the remaining turns.
#[cfg(unix)]
#[test]
fn ctrl_c_between_turns_stops_the_demo_before_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .current_dir(dir.path())
        .args(["demo", "--pace", "3000", "--quiet", "--color", "never"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the demo");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let mut id = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("session:") {
            id = rest.trim().to_owned();
        }
        seen.push_str(&line);
        seen.push('\n');
        // Printed just before the 3 s pause that precedes turn 1.
        if line.starts_with("turn 1 of") {
            break;
        }
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    for line in lines {
        seen.push_str(&line.unwrap());
        seen.push('\n');
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "a stopped demo is not a success:\n{seen}");
    assert!(seen.contains("^C: stopped before the turn began."), "{seen}");
    assert!(seen.contains(&format!("--resume {id}")), "{seen}");
    assert!(!seen.contains("turn 2 of"), "{seen}");
    let closers = run(dir.path(), &["repair", "palimpsest-demo.db", "--session", &id]);
    assert_eq!(stdout(&closers).trim(), "[]", "no turn was left open");
    let text = resume(dir.path(), "palimpsest-demo.db", &id);
    assert!(text.contains("0 of 6 turns completed"), "{text}");
}

/// A resumed demo works on the files its earlier turns wrote: the
/// workspace of the interrupted run was a throwaway directory, so the
/// resume replays the log's successful `write_file` calls into its own
/// (turn 6 reads the `summary.md` that turn 4 wrote).
#[test]
fn a_resumed_demo_finds_the_files_its_earlier_turns_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = run(d, &["demo", "--pace", "0", "--quiet", "--color", "never"]);
    assert!(whole.status.success());
    let whole = stdout(&whole);
    let id = whole.lines().find_map(|l| l.strip_prefix("session:")).unwrap().trim().to_owned();
    // The seq of turn 4's turn/end, from the log's own lines.
    assert!(run(d, &["convert", "palimpsest-demo.db", "log.jsonl"]).status.success());
    let log = std::fs::read_to_string(d.join("log.jsonl")).unwrap();
    let ends: Vec<u64> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "turn/end")
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let at = ends[3].to_string();
    let fork = run(d, &["fork", "palimpsest-demo.db", "--session", &id, "--at", &at, "--id", "cut4"]);
    assert!(fork.status.success(), "{fork:?}");
    let text = resume(d, "palimpsest-demo.db", "cut4");
    assert!(text.contains("4 of 6 turns completed"), "{text}");
    assert!(text.contains("restored:  1 file write(s) of earlier turns"), "{text}");
    assert!(!text.contains("No such file"), "{text}");
    let events = |t: &str| t.lines().find(|l| l.starts_with("events:")).map(str::to_owned);
    assert_eq!(events(&text), events(&whole), "the resumed session ends as the whole run did");
}

/// The `on disk:` line's figure and the files it names, as printed.
fn on_disk_line(text: &str) -> String {
    let line = text.lines().find_map(|l| l.strip_prefix("on disk:"));
    line.unwrap_or_else(|| panic!("no on-disk line: {text}")).trim().to_owned()
}

#[test]
fn the_on_disk_figure_is_the_sum_of_the_files_it_names() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite: `N bytes: a.db (n) + a.db-wal (m) ...`.
    let o = run(dir.path(), &["demo", "--pace", "0", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = on_disk_line(&stdout(&o));
    let (total, files) = line.split_once(" bytes: ").unwrap_or_else(|| panic!("{line}"));
    let total: u64 = total.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
    let mut sum = 0;
    let mut names = Vec::new();
    for part in files.split(" + ") {
        let (name, size) =
            part.strip_suffix(')').and_then(|p| p.split_once(" (")).unwrap_or_else(|| panic!("{part}"));
        let on_disk = std::fs::metadata(dir.path().join(name))
            .map(|m| m.len())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(size.parse::<u64>().ok(), Some(on_disk), "{name} as named in {line}");
        sum += on_disk;
        names.push(name.to_owned());
    }
    assert_eq!(total, sum, "{line}");
    assert!(names.contains(&"palimpsest-demo.db".to_owned()), "{line}");
    // Every file of the store beside it is named.
    for suffix in ["-wal", "-shm"] {
        let name = format!("palimpsest-demo.db{suffix}");
        assert_eq!(dir.path().join(&name).exists(), names.contains(&name), "{name}: {line}");
    }

    // A JSONL directory: `N bytes in K files under DIR`.
    let o = run(dir.path(), &["demo", "--pace", "0", "--quiet", "--store", "jsonl-store"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = on_disk_line(&stdout(&o));
    let files: Vec<u64> = std::fs::read_dir(dir.path().join("jsonl-store"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    let total: u64 = files.iter().sum();
    // The session file and its checkpoint, left at the last turn's end.
    assert_eq!(files.len(), 2, "{line}");
    assert_eq!(line, format!("{total} bytes in {} files under jsonl-store", files.len()), "{line}");
}

#[test]
fn a_jsonl_store_is_one_session_file_and_a_second_demo_needs_another() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["demo", "--store", "d.jsonl", "--pace", "0", "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.path().join("d.jsonl").is_file(), "a file, not a directory");
    assert!(stdout(&o).contains("store:     d.jsonl (JSONL file)"), "{}", stdout(&o));
    let v = run(dir.path(), &["validate", "d.jsonl"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let again = run(dir.path(), &["demo", "--store", "d.jsonl", "--pace", "0", "--quiet"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        "error[already-exists]: d.jsonl: this JSONL session file already holds a session; `--resume ID` \
         continues it, or name a new file, a directory or a `.db`\n"
    );
    let mut entries: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    entries.sort();
    assert_eq!(entries, ["d.checkpoint.json", "d.jsonl"], "the file and its checkpoint beside it");
}

/// `--resume` with an id no session has, or with no store at all: one
/// `not-found` line on stderr, nothing on stdout, nothing created.
#[test]
fn resuming_an_unknown_session_is_one_line_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let none = run(dir.path(), &["demo", "--resume", "nosuch", "--pace", "0"]);
    assert_eq!(none.status.code(), Some(2), "{none:?}");
    assert_eq!(stdout(&none), "", "nothing printed before the error");
    let err = String::from_utf8_lossy(&none.stderr).into_owned();
    assert_eq!(err, "error[not-found]: palimpsest-demo.db: no store here to resume a session from\n");
    assert!(!dir.path().join("palimpsest-demo.db").exists(), "no store was created");

    assert!(run(dir.path(), &["demo", "--pace", "0", "--quiet"]).status.success());
    let unknown = run(dir.path(), &["demo", "--resume", "nosuch", "--pace", "0"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert_eq!(stdout(&unknown), "", "nothing printed before the error");
    let err = String::from_utf8_lossy(&unknown.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error[not-found]: palimpsest-demo.db: no session \"nosuch\""), "{err}");
}

/// `palimpsest demo | head -1`: the closed pipe stops the printing, not
/// the demo (it exited 0 with its first turn left open: a probe).
#[cfg(unix)]
#[test]
fn a_closed_stdout_stops_the_printing_not_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("sh")
        .current_dir(dir.path())
        .arg("-c")
        .arg(format!("'{BIN}' demo --pace 0 --quiet --store d.db | head -1; exit \"${{PIPESTATUS:-0}}\""))
        .output()
        .expect("run sh");
    assert!(o.status.success(), "{o:?}");
    let sessions = stdout(&run(dir.path(), &["sessions", "d.db", "--json"]));
    let listed: serde_json::Value = serde_json::from_str(&sessions).expect("sessions --json");
    assert_eq!(listed[0]["outcome"], "completed", "{sessions}");
    assert_eq!(listed[0]["turns"], 6, "{sessions}");
    assert!(run(dir.path(), &["validate", "d.db"]).status.success());
}
