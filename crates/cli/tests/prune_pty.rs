//! `palimpsest prune` asked on a real pseudo-terminal, while a worker
//! writes to one of the sessions it listed: what the worker wrote must
//! survive the answer. (An outside probe found prune deleting turns that
//! workers had been told were stored: it decided once, at the listing.)
#![cfg(unix)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use expectrl::process::unix::WaitStatus;
use expectrl::{Eof, Expect, Session};

const BIN: &str = env!("CARGO_BIN_EXE_palimpsest");

/// Two sessions, `alpha` and `beta`, whose every event is from January
/// 2026: a JSONL directory of the example log under two ids.
fn old_sessions(dir: &Path) {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../core-session/test_data/ok/compaction-and-prune.jsonl");
    let text = std::fs::read_to_string(example).expect("read the example");
    let (header, events) = text.split_once('\n').expect("a header line");
    std::fs::create_dir(dir).expect("mkdir");
    for id in ["alpha", "beta"] {
        let mut header: serde_json::Value = serde_json::from_str(header).expect("header");
        header["id"] = id.into();
        std::fs::write(dir.join(format!("{id}.jsonl")), format!("{header}\n{events}")).expect("write");
    }
}

fn palimpsest(cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .current_dir(cwd)
        .args(args)
        .env_remove("PALIMPSEST_LOG")
        .output()
        .expect("run palimpsest")
}

#[test]
fn a_session_written_to_while_prune_asks_is_kept() {
    let place = tempfile::tempdir().expect("tempdir");
    let d = place.path();
    old_sessions(&d.join("old"));
    let converted = palimpsest(d, &["convert", "old", "s.db"]);
    assert!(converted.status.success(), "{}", String::from_utf8_lossy(&converted.stderr));

    let mut command = Command::new(BIN);
    command.current_dir(d).args(["prune", "s.db", "--older-than", "1d"]).env_remove("PALIMPSEST_LOG");
    let mut prune = Session::spawn(command).expect("spawn palimpsest on a pty");
    prune.set_expect_timeout(Some(Duration::from_secs(30)));
    let asked = prune.expect("delete? [y/N]").expect("the question");
    let listed = String::from_utf8_lossy(asked.before()).into_owned();
    assert!(listed.contains("about to delete 2 sessions") && listed.contains("alpha"), "{listed}");

    // While the question is open, a worker stores one more event of
    // `alpha` (a plugin's, at the next seq, now), and is told it is.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64;
    let db = rusqlite::Connection::open(d.join("s.db")).expect("open the store");
    let next: i64 = db
        .query_row("SELECT max(seq) + 1 FROM events WHERE session_id = 'alpha'", [], |r| r.get(0))
        .expect("next seq");
    db.execute(
        "INSERT INTO events (session_id, seq, time, type, data) VALUES ('alpha', ?1, ?2, 'worker/note', '{}')",
        rusqlite::params![next, now],
    )
    .expect("the worker's append");
    drop(db);

    prune.send("y\r").expect("answer");
    let mut screen = Vec::new();
    let end = prune.expect(Eof).expect("the end of prune's output");
    screen.extend_from_slice(end.before());
    for matched in end.matches() {
        screen.extend_from_slice(matched);
    }
    let screen = String::from_utf8_lossy(&screen);
    let status = prune.get_process().wait().expect("wait for prune");
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}: {screen}");
    assert!(screen.contains("deleted beta"), "{screen}");
    assert!(!screen.contains("deleted alpha"), "{screen}");
    assert!(screen.contains("s.db#alpha: kept: written to since it was listed"), "{screen}");

    // The worker's event is there, in a valid log; beta is gone.
    let validate = palimpsest(d, &["validate", "s.db", "--session", "alpha", "--json"]);
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stderr));
    let report: serde_json::Value = serde_json::from_slice(&validate.stdout).expect("json");
    assert_eq!(report["events"], next + 1, "{report}");
    let sessions = palimpsest(d, &["sessions", "s.db", "--json"]);
    let sessions = String::from_utf8_lossy(&sessions.stdout);
    assert!(sessions.contains("alpha") && !sessions.contains("beta"), "{sessions}");
}
