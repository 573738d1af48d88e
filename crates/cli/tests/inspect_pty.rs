//! `palimpsest inspect` on a real pseudo-terminal (`expectrl`): lines fit
//! the terminal's width and the output goes through the pager, which a
//! script stands in for here (it marks where its output starts and ends).
//! Piped, the output is unchanged (the snapshots of `cli.rs` pin it).
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use expectrl::process::unix::WaitStatus;
use std::io::Read;

use expectrl::Session;
use unicode_width::UnicodeWidthStr;

const BIN: &str = env!("CARGO_BIN_EXE_palimpsest");

const START: &str = "<<pager>>";
const END: &str = "<</pager>>";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/ok/compaction-and-prune.jsonl")
}

/// A pager that marks its output, in `dir`.
fn marking_pager(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("pager");
    std::fs::write(&path, format!("#!/bin/sh\necho '{START}'\ncat\necho '{END}'\n"))
        .expect("write the pager");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("make it executable");
    path
}

/// `palimpsest inspect FIXTURE ARGS` on a pty with `env` (and no pager
/// variables but those); the screen (CRs dropped) and the exit code.
fn inspect(env: &[(&str, &str)], args: &[&str]) -> (String, i32) {
    inspect_file(&fixture(), env, args)
}

/// [`inspect`] of `file`.
fn inspect_file(file: &Path, env: &[(&str, &str)], args: &[&str]) -> (String, i32) {
    let mut command = Command::new(BIN);
    command
        .arg("inspect")
        .arg(file)
        .args(args)
        .env("TERM", "xterm")
        .env_remove("PAGER")
        .env_remove("PALIMPSEST_PAGER")
        .env_remove("COLUMNS")
        .env_remove("PALIMPSEST_LOG");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut session = Session::spawn(command).expect("spawn palimpsest on a pty");
    session.set_expect_timeout(Some(Duration::from_secs(30)));
    let bytes = read_to_end(&mut session);
    let screen = String::from_utf8_lossy(&bytes).replace('\r', "");
    let code = match session.get_process().wait() {
        Ok(WaitStatus::Exited(_, code)) => code,
        other => panic!("inspect did not exit normally: {other:?}\n{screen}"),
    };
    (screen, code)
}

/// The widest line of `screen`, in columns, escape sequences not counted.
/// Everything the child writes to the pty until it is gone (the pty then
/// reports EIO, or 0).
fn read_to_end<S: Read>(session: &mut S) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match session.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    }
    bytes
}

fn widest(screen: &str) -> usize {
    screen.lines().map(|l| strip_escapes(l).width()).max().unwrap_or(0)
}

fn strip_escapes(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn on_a_terminal_lines_fit_columns_and_the_output_goes_through_the_pager() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pager = marking_pager(dir.path());
    let pager = pager.to_str().expect("a UTF-8 path");
    for color in ["never", "always"] {
        let (screen, code) = inspect(&[("COLUMNS", "40"), ("PALIMPSEST_PAGER", pager)], &["--color", color]);
        assert_eq!(code, 0, "{screen}");
        assert!(screen.starts_with(START) && screen.trim_end().ends_with(END), "paged: {screen}");
        assert!(screen.contains("context/message"), "the timeline is there: {screen}");
        assert!(widest(&screen) <= 40, "every line fits 40 columns ({}):\n{screen}", widest(&screen));
        assert!(screen.lines().any(|l| strip_escapes(l).ends_with('…')), "long lines are cut with …");
    }
    // $PAGER is used when $PALIMPSEST_PAGER is unset.
    let (screen, _) = inspect(&[("COLUMNS", "40"), ("PAGER", pager)], &["--color", "never"]);
    assert!(screen.starts_with(START), "{screen}");
}

/// Environment variables of one run.
type Env<'a> = &'a [(&'a str, &'a str)];

#[test]
fn no_pager_an_empty_pager_cat_or_one_that_cannot_start_write_directly() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pager = marking_pager(dir.path());
    let pager = pager.to_str().expect("a UTF-8 path");
    let cases: &[(Env, &[&str])] = &[
        (&[("PALIMPSEST_PAGER", pager)], &["--no-pager"]),
        (&[("PAGER", "")], &[]),
        (&[("PAGER", "cat")], &[]),
        (&[("PALIMPSEST_PAGER", ""), ("PAGER", pager)], &[]),
        (&[("PALIMPSEST_PAGER", "/no/such/pager")], &[]),
    ];
    for (env, args) in cases {
        let mut env = env.to_vec();
        env.push(("COLUMNS", "50"));
        let mut args = args.to_vec();
        args.extend(["--color", "never"]);
        let (screen, code) = inspect(&env, &args);
        assert_eq!(code, 0, "{env:?}: {screen}");
        assert!(!screen.contains(START), "{env:?} {args:?}: no pager: {screen}");
        assert!(screen.contains("context/message"), "{env:?}: {screen}");
        assert!(widest(&screen) <= 50, "{env:?}: still fitted ({}):\n{screen}", widest(&screen));
    }
}

#[test]
fn piped_the_output_is_neither_clipped_nor_paged() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pager = marking_pager(dir.path());
    let out = Command::new(BIN)
        .args(["inspect", "--color", "never"])
        .arg(fixture())
        .env("COLUMNS", "40")
        .env("PALIMPSEST_PAGER", &pager)
        .output()
        .expect("run inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(START), "{text}");
    assert!(widest(&text) > 40, "lines keep their length when piped");
}

#[test]
fn ctrl_c_while_the_pager_runs_does_not_end_inspect_before_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pager = dir.path().join("slow-pager");
    {
        use std::os::unix::fs::PermissionsExt;
        // Reads everything, then waits for a signal file before it ends.
        let script = format!(
            "#!/bin/sh\ncat >/dev/null\ntouch '{ready}'\nwhile [ ! -e '{go}' ]; do sleep 0.05; done\necho '{END}'\n",
            ready = dir.path().join("ready").display(),
            go = dir.path().join("go").display()
        );
        std::fs::write(&pager, script).expect("write the pager");
        std::fs::set_permissions(&pager, std::fs::Permissions::from_mode(0o755)).expect("executable");
    }
    let mut command = Command::new(BIN);
    command
        .arg("inspect")
        .arg(fixture())
        .env("TERM", "xterm")
        .env("PALIMPSEST_PAGER", &pager)
        .env_remove("PAGER")
        .env_remove("PALIMPSEST_LOG");
    let mut session = Session::spawn(command).expect("spawn palimpsest on a pty");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !dir.path().join("ready").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(dir.path().join("ready").exists(), "the pager never started");
    let pid = session.get_process().pid().to_string();
    let kill = Command::new("kill").args(["-INT", &pid]).status().expect("kill");
    assert!(kill.success());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(dir.path().join("go"), "").expect("let the pager end");
    let bytes = read_to_end(&mut session);
    let status = session.get_process().wait();
    assert!(matches!(status, Ok(WaitStatus::Exited(_, 0))), "inspect waited for the pager: {status:?}");
    assert!(String::from_utf8_lossy(&bytes).contains(END));
}

/// A person who quits the pager after a screen of a long session (the
/// pager stops reading while the timeline is still being written to it)
/// ends `inspect` quietly: exit 0, no broken-pipe error.
#[test]
fn quitting_the_pager_early_ends_inspect_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::from(r#"{"type":"session","version":0,"id":"long","createdAt":0}"#);
    text.push('\n');
    for seq in 0..20_000u64 {
        text.push_str(&format!(r#"{{"seq":{seq},"time":{seq},"type":"x/tick","data":{{"n":{seq}}}}}"#));
        text.push('\n');
    }
    let file = dir.path().join("long.jsonl");
    std::fs::write(&file, text).expect("write the session");
    let (screen, code) = inspect_file(&file, &[("COLUMNS", "60"), ("PALIMPSEST_PAGER", "head -n 3")], &[]);
    assert_eq!(code, 0, "{screen}");
    assert_eq!(screen.lines().count(), 3, "the pager's three lines: {screen}");
    assert!(!screen.contains("error"), "{screen}");
}

/// JSON on a terminal: the characters a terminal acts on (a C1 CSI, a
/// bidirectional override) are written as their `\u` escapes, the same
/// JSON; piped, the bytes are as logged (an outside probe).
#[test]
fn json_on_a_terminal_escapes_what_the_terminal_would_act_on() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("s.jsonl");
    let text = "a\u{9b}31mRED\u{202e}evil";
    let lines = [
        r#"{"type":"session","version":0,"id":"s","createdAt":0}"#.to_owned(),
        r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#.to_owned(),
        format!(
            r#"{{"seq":1,"time":0,"type":"user/message","data":{{"turn":1,"message":{{"id":"u1","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}}},"surfaceOp":"append"}}"#
        ),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").expect("write the session");
    for args in [&["derive"][..], &["derive", "--request"], &["sessions", "--json"]] {
        let mut command = Command::new(BIN);
        command.args(args).arg(&file);
        command.env("TERM", "xterm").env_remove("PALIMPSEST_LOG");
        let mut session = Session::spawn(command).expect("spawn palimpsest on a pty");
        session.set_expect_timeout(Some(Duration::from_secs(30)));
        let screen = String::from_utf8_lossy(&read_to_end(&mut session)).into_owned();
        assert!(screen.contains(r"a\u009b31mRED\u202eevil"), "{args:?}: {screen:?}");
        assert!(!screen.contains('\u{9b}') && !screen.contains('\u{202e}'), "{args:?}: {screen:?}");
        let piped = Command::new(BIN).args(args).arg(&file).output().expect("run");
        assert!(String::from_utf8_lossy(&piped.stdout).contains(text), "{args:?}: {piped:?}");
    }
}

/// Two places an outside probe found text of the log reaching the
/// terminal raw: `fork`'s new id (made from the parent's header) and the
/// line where `inspect` says checking stopped (it quotes a key's name).
#[test]
fn a_forked_id_and_a_stopped_check_are_shown_not_obeyed_on_a_terminal() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let evil = r"ev\u001b]0;PWN\u0007\u001b[2J\u202e";
    let header = format!(r#"{{"type":"session","version":0,"id":"{evil}","createdAt":0}}"#);
    let turn = r#"{"seq":0,"time":0,"type":"turn/start","data":{"turn":1}}"#;
    std::fs::write(dir.path().join("evil.jsonl"), format!("{header}\n{turn}\n")).expect("write");
    let bad_key = format!(r#"{{"seq":1,"time":0,"type":"x/y","data":1,"{evil}":1}}"#);
    let plain = r#"{"type":"session","version":0,"id":"k","createdAt":0}"#;
    std::fs::write(dir.path().join("key.jsonl"), format!("{plain}\n{turn}\n{bad_key}\n")).expect("write");
    let on_a_pty = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command.args(args).current_dir(dir.path()).env("TERM", "xterm").env_remove("PALIMPSEST_LOG");
        let mut session = Session::spawn(command).expect("spawn palimpsest on a pty");
        session.set_expect_timeout(Some(Duration::from_secs(30)));
        String::from_utf8_lossy(&read_to_end(&mut session)).into_owned()
    };
    for args in [
        &["fork", "evil.jsonl", "--at", "0"][..],
        &["inspect", "key.jsonl", "--no-pager", "--color", "never"],
    ] {
        let screen = on_a_pty(args);
        assert!(screen.contains("PWN"), "{args:?}: {screen:?}");
        for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
            assert!(!screen.contains(raw), "{args:?}: {raw:?} reached the terminal: {screen:?}");
        }
    }
    // Piped, the forked id is the id, for a script to use.
    let piped = Command::new(BIN)
        .args(["fork", "evil.jsonl", "--at", "0", "--id", "plain-\u{1b}x"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(String::from_utf8_lossy(&piped.stdout), "plain-\u{1b}x\n", "{piped:?}");
}
