//! A real write failure: a child process runs under a file-size limit
//! (`ulimit -f`, with `SIGXFSZ` ignored so the write fails with `EFBIG`
//! instead of killing it) and appends until the WAL cannot grow.

use std::process::{Command, Stdio};

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::SqliteStore;

use crate::common::{child_args, code, env, temp_db, test_name, ticks, ROLE};

#[test]
fn after_a_failed_write_the_store_refuses_writes_until_reopened() {
    if std::env::var(ROLE).is_ok() {
        return limited_writer();
    }
    let (dir, path) = temp_db();
    SqliteStore::open(&path).and_then(|s| s.create(&SessionHeader::new("s", 0))).expect("create");
    let result = dir.path().join("acked");

    let name = test_name(module_path!(), "after_a_failed_write_the_store_refuses_writes_until_reopened");
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new("sh");
    // Ignored signals stay ignored across exec; the limit is in blocks of
    // 512 or 1024 bytes depending on the shell, either is far below what the
    // child tries to write.
    cmd.args(["-c", "trap '' XFSZ; ulimit -f 256 && exec \"$0\" \"$@\""]).arg(exe);
    child_args(&mut cmd, &name);
    cmd.env(ROLE, "limited").env("DB", &path).env("RESULT", &result);
    let status = cmd.stdout(Stdio::null()).status().expect("run the limited child");
    assert!(status.success(), "limited child failed: {status}");

    let acked: usize = std::fs::read_to_string(&result).expect("result").parse().expect("count");
    assert!(acked > 0, "some appends succeeded before the limit");
    let store = SqliteStore::open(&path).expect("reopen without the limit");
    let events = store.load("s").expect("load").events;
    assert_eq!(events.len(), acked, "exactly the acknowledged batches, nothing of the failed one");
    let payload = "p".repeat(1000);
    let expected: Vec<_> = (0..acked as u64 / 10).flat_map(|b| ticks(b * 10, 10, &payload)).collect();
    assert_eq!(events, expected);
    store.append("s", &ticks(acked as u64, 1, "after")).expect("a reopened store writes again");
}

fn limited_writer() {
    let store = SqliteStore::open(env("DB")).expect("open under the limit");
    let payload = "p".repeat(1000);
    let mut acked = 0u64;
    let err = loop {
        assert!(acked < 100_000, "the file-size limit never bit");
        match store.append("s", &ticks(acked, 10, &payload)) {
            Ok(()) => acked += 10,
            Err(e) => break e,
        }
    };
    assert_eq!(err.code(), "io", "{err}");

    // Poisoned: every write is refused, even one that would fit, and says why.
    let again = store.append("s", &ticks(acked, 1, "tiny")).expect_err("refused after the failure");
    assert_eq!(again.code(), "io");
    assert!(again.to_string().contains("refuses writes after an earlier write failed; reopen it"), "{again}");
    assert_eq!(code(store.sync("s")), Err("io"));
    assert_eq!(code(store.create(&SessionHeader::new("t", 0))), Err("io"));
    assert_eq!(code(store.delete("s")), Err("io"));
    assert_eq!(code(store.create_with_events(&SessionHeader::new("u", 0), &[])), Err("io"));
    // Reads still work and show exactly what was acknowledged.
    assert_eq!(store.load("s").expect("load").events.len() as u64, acked);
    std::fs::write(env("RESULT"), acked.to_string()).expect("result");
}
