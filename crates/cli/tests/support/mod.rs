//! What every CLI test file needs: run the real binary and look at what it
//! gave. Each file under `tests/` is its own crate, so each uses only part
//! of this.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// What one run of the binary gave.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Stdout, parsed as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// The run as a person sees it, for snapshots.
    pub(crate) fn transcript(&self, args: &[&str]) -> String {
        format!(
            "$ palimpsest {}\n[exit {}]\n--- stdout\n{}--- stderr\n{}",
            args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }
}

/// Runs the binary in `dir`, so paths in its output are relative and stable.
pub(crate) fn palimpsest(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_palimpsest"))
        .args(args)
        .current_dir(dir)
        .env_remove("PALIMPSEST_LOG")
        .output()
        .expect("the palimpsest binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts exit 0 and hands the run back.
pub(crate) fn ok(run: Run) -> Run {
    assert_eq!(run.code, 0, "{run:?}");
    run
}

/// A file of the CLI's `test_data/`.
pub(crate) fn test_data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data").join(file)
}

/// A scratch directory holding copies of some fixtures of `test_data/`
/// (by file name).
pub(crate) fn scratch(fixtures: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    for f in fixtures {
        let name = Path::new(f).file_name().expect("a file name");
        std::fs::copy(test_data(f), dir.path().join(name)).expect("copy a fixture");
    }
    dir
}

/// Breaks the stored event `seq` of a SQLite store behind its back: its
/// `data` is no longer JSON. The store holds one session.
pub(crate) fn break_stored_event(db: &Path, seq: u64) {
    let conn = rusqlite::Connection::open(db).expect("open the database");
    let changed =
        conn.execute("UPDATE events SET data = 'not json' WHERE seq = ?1", [seq as i64]).expect("tamper");
    assert_eq!(changed, 1, "seq {seq} is stored once");
}
