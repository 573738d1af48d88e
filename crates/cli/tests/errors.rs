//! Errors say what happened, once: the CLI's error line on a full disk, a
//! session locked by another process, and a huge malformed value, with
//! their exit codes. A full disk is simulated with the file-size limit
//! (`ulimit -f`, with `SIGXFSZ` ignored, so a write past it fails with
//! `EFBIG` as a write to a full disk fails with `ENOSPC`).

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;

use support::*;

/// Runs the binary in `dir` under a file-size limit of `kib` KiB.
fn palimpsest_limited(dir: &Path, kib: u64, args: &[&str]) -> Run {
    let script = format!("trap '' XFSZ; ulimit -f {kib}; exec \"$0\" \"$@\"");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_palimpsest"))
        .args(args)
        .current_dir(dir)
        .env_remove("PALIMPSEST_LOG")
        .output()
        .expect("bash runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The one session file of a JSONL store directory.
fn only_session(dir: &Path) -> (String, String) {
    // Checkpoint sidecars (`<stem>.checkpoint.json`) are not session files.
    let entries: Vec<_> = fs::read_dir(dir)
        .expect("store dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .collect();
    assert_eq!(entries.len(), 1, "one session file");
    let name = entries[0].file_name().to_string_lossy().into_owned();
    (name.trim_end_matches(".jsonl").to_owned(), name)
}

#[test]
fn a_full_disk_in_the_demo_says_the_outcome_is_unknown_and_reopening_tells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = palimpsest_limited(dir.path(), 20, &["demo", "--store", "s", "--pace", "0", "--quiet"]);
    assert_eq!(run.code, 2, "an I/O failure is exit 2: {run:?}");
    let (id, _) = only_session(&dir.path().join("s"));
    let stderr = run.stderr.replace(&id, "[id]");
    insta::assert_snapshot!("demo_full_disk", stderr);
    assert!(!stderr.contains("nothing committed"), "claims an outcome it does not know");
    assert_eq!(stderr.lines().count(), 1, "one error, one line");
    assert_eq!(stderr.matches("File too large").count(), 1, "the root cause once");
    assert!(stderr.trim_end().ends_with("File too large (os error 27)"), "root cause last: {stderr}");

    // Reopening shows what the store holds: a valid log, the turn left open.
    let session = format!("s/{id}.jsonl");
    let valid = ok(palimpsest(dir.path(), &["validate", &session]));
    assert!(valid.stdout.contains("valid: 90 events"), "{valid:?}");
    let resumed = ok(palimpsest(
        dir.path(),
        &["demo", "--store", "s", "--resume", &id, "--pace", "0", "--quiet", "--color", "never"],
    ));
    assert!(resumed.stdout.contains("4 of 6 turns completed"), "{}", resumed.stdout);
    assert!(resumed.stdout.contains("closed by 2 repair event(s), seqs 90..=91"), "{}", resumed.stdout);
}

#[test]
fn repair_write_on_a_full_disk_gives_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::copy(test_data("ok/crash-open.jsonl"), dir.path().join("open.jsonl")).expect("copy");
    let before = fs::read(dir.path().join("open.jsonl")).expect("read");
    // The file is already past the limit: the append fails at its first byte.
    let args = ["repair", "open.jsonl", "--write"];
    let run = palimpsest_limited(dir.path(), 2, &args);
    assert_eq!(run.code, 2, "{run:?}");
    insta::assert_snapshot!("repair_write_full_disk", run.transcript(&args));
    assert_eq!(run.stderr.matches("File too large").count(), 1, "{}", run.stderr);
    assert_eq!(fs::read(dir.path().join("open.jsonl")).expect("read"), before, "nothing was appended");
}

/// Holds the writer's lock on `path` as another process would.
fn hold_lock(path: &Path) -> fs::File {
    let file = fs::OpenOptions::new().read(true).write(true).open(path).expect("open to lock");
    file.try_lock().expect("the test takes the lock");
    file
}

#[test]
fn a_locked_session_is_exit_1_locked_in_repair_and_in_the_demo() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir(dir.path().join("s")).expect("store dir");
    // A session with an open turn: `repair --write` has closers to append.
    let session = dir.path().join("s").join("crash-1.jsonl");
    fs::copy(test_data("ok/crash-open.jsonl"), &session).expect("copy");
    let _held = hold_lock(&session);

    let repair = ["repair", "s/crash-1.jsonl", "--write"];
    let demo = ["demo", "--store", "s", "--resume", "crash-1", "--pace", "0", "--quiet"];
    let mut text = String::new();
    for args in [&repair[..], &demo[..]] {
        let run = palimpsest(dir.path(), args);
        assert_eq!(run.code, 1, "a lock held elsewhere refuses the operation: {run:?}");
        assert!(run.stderr.starts_with("error[locked]: "), "{}", run.stderr);
        assert!(run.stderr.contains("another process"), "{}", run.stderr);
        let err = run.stderr.lines().find(|l| l.starts_with("error[")).unwrap_or_default().to_owned();
        text.push_str(&format!("$ palimpsest {}\n[exit {}]\n{err}\n", args.join(" "), run.code));
    }
    insta::assert_snapshot!("locked_session", text);
}

#[test]
fn a_huge_malformed_value_is_clipped_with_its_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = "<".repeat(5_000_000);
    let text = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1}}\n\
         {{\"seq\":0,\"time\":1,\"type\":\"turn/start\",\"data\":{{\"turn\":\"{big}\"}}}}\n"
    );
    fs::write(dir.path().join("big.jsonl"), text).expect("write");
    let args = ["validate", "big.jsonl"];
    let run = palimpsest(dir.path(), &args);
    assert_eq!(run.code, 1, "{}", &run.stderr[..run.stderr.len().min(500)]);
    assert!(run.stderr.len() < 1000, "the value is not echoed whole: {} bytes", run.stderr.len());
    insta::assert_snapshot!("huge_value_clipped", run.transcript(&args));
}
