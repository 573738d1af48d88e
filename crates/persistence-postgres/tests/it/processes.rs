//! One writer per session across processes: a child process (this test
//! binary, run again as a worker) holds a session and appends; it is
//! stopped with `SIGSTOP` past its hold's expiry; a second worker takes
//! the session over and writes; the first is resumed with `SIGCONT` and
//! tries to append: refused with `locked` in the append's own transaction,
//! nothing of it written.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::{PgOptions, PgStore};

use crate::common::{tick, url, TestSchema};

/// Set in the child: the schema to work in.
const CHILD_SCHEMA: &str = "PALIMPSEST_PG_TEST_WORKER_SCHEMA";

/// The worker: holds session "p" for 800 ms (never renewed), says `held`,
/// then for each line `append N` appends tick N and says `ok` or
/// `err <code> <message>`.
#[test]
fn worker_process() {
    let Ok(schema) = std::env::var(CHILD_SCHEMA) else { return };
    let options = PgOptions { schema: Some(schema), ..PgOptions::default() };
    let store = PgStore::connect_with(&url(), options).unwrap_or_else(|e| panic!("{e}"));
    let hold = store.hold("p", "worker-1", Duration::from_millis(800)).unwrap_or_else(|e| panic!("{e}"));
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(&mut out, format!("held {}", hold.token()));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Some(n) = line.strip_prefix("append ").and_then(|n| n.parse::<u64>().ok()) else { break };
        match store.append("p", &[tick(n, "worker-1")]) {
            Ok(()) => say(&mut out, "ok".into()),
            Err(e) => say(&mut out, format!("err {} {e}", e.code())),
        }
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(schema: &str) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
            .args(["processes::worker_process", "--exact", "--nocapture", "--test-threads", "1", "-q"])
            .env(CHILD_SCHEMA, schema)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the worker: {e}"));
        let stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
        let stdout = BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("no stdout")));
        Worker { child, stdin, stdout }
    }

    /// The worker's next line that is one of its replies (the test harness
    /// prints lines of its own).
    fn reply(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
            assert!(n > 0, "the worker ended early");
            let line = line.trim().to_owned();
            if ["held", "ok", "err"].iter().any(|w| line.starts_with(w)) {
                return line;
            }
        }
    }

    fn append(&mut self, n: u64) -> String {
        writeln!(self.stdin, "append {n}").unwrap_or_else(|e| panic!("{e}"));
        self.stdin.flush().unwrap_or_else(|e| panic!("{e}"));
        self.reply()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill: {e}"));
        assert!(status.success(), "kill {sig} failed");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_stopped_worker_is_fenced_out_after_another_process_takes_over() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    store.create(&SessionHeader::new("p", 1)).unwrap_or_else(|e| panic!("{e}"));
    let mut first = Worker::start(&schema.name);
    let held = first.reply();
    assert!(held.starts_with("held "), "{held}");
    assert_eq!(first.append(0), "ok");
    // A second worker is refused while the hold is live, naming the holder.
    let second = schema.store();
    let refused =
        second.hold("p", "worker-2", Duration::from_secs(30)).err().unwrap_or_else(|| panic!("two holders"));
    assert_eq!(refused.code(), "locked");
    assert!(refused.to_string().contains("worker-1"), "{refused}");

    first.signal("-STOP");
    std::thread::sleep(Duration::from_millis(1200));
    let taken =
        second.hold("p", "worker-2", Duration::from_secs(30)).unwrap_or_else(|e| panic!("takeover: {e}"));
    second.append("p", &[tick(1, "worker-2")]).unwrap_or_else(|e| panic!("{e}"));
    first.signal("-CONT");

    // Seq 2 would continue the log: only the fence refuses it.
    let late = first.append(2);
    assert!(late.starts_with("err locked ") && late.contains("taken over"), "{late}");
    second.append("p", &[tick(2, "worker-2")]).unwrap_or_else(|e| panic!("{e}"));
    let events = store.load("p").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events, vec![tick(0, "worker-1"), tick(1, "worker-2"), tick(2, "worker-2")]);
    second.release(&taken).unwrap_or_else(|e| panic!("{e}"));
}
