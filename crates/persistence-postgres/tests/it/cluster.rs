//! Private PostgreSQL clusters for the tests that stop, restart or fail
//! over a server: made with this machine's `initdb`, on a free port and a
//! socket directory of their own, owned by the `postgres` user when the
//! tests run as root, and removed at the end. The shared test server is
//! never touched.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The directory of `initdb`, `pg_ctl` and `pg_basebackup`, or `None`.
fn bindir() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").is_file() {
            return Some(dir);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Whether this process runs as root (initdb refuses to).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// `bin` with `args`, as the `postgres` user when we are root.
fn run(bin: &Path, args: &[&str]) -> Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args).output().unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

fn must(bin: &Path, args: &[&str]) {
    let out = run(bin, args);
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        bin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A scratch directory the `postgres` user owns, removed on drop.
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Tools and a scratch directory for private clusters, or `None` (skip)
/// without PostgreSQL's server binaries outside CI; under CI, a failure.
pub(crate) fn tools() -> Option<(PathBuf, Scratch)> {
    let Some(bin) = bindir() else {
        assert!(std::env::var_os("CI").is_none(), "no initdb on this machine, and CI is set");
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: no initdb (PostgreSQL's server binaries) here; under CI this fails");
        }
        return None;
    };
    let dir = tempfile::Builder::new().prefix("palimpsest-pg-").tempdir().unwrap_or_else(|e| panic!("{e}"));
    if is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(dir.path())
            .status()
            .unwrap_or_else(|e| panic!("chown: {e}"));
        assert!(status.success(), "chown the scratch directory to postgres");
    }
    Some((bin, Scratch { dir }))
}

/// One running cluster.
pub(crate) struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    pub(crate) port: u16,
}

impl Cluster {
    /// A new primary in `scratch/name`, trust authentication, ready for
    /// streaming replication.
    pub(crate) fn primary(bin: &Path, scratch: &Scratch, name: &str) -> Cluster {
        let data = scratch.path().join(name);
        let data_s = data.display().to_string();
        must(
            &bin.join("initdb"),
            &["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"],
        );
        let cluster = Cluster::configured(bin, scratch, name, data, "");
        cluster.start();
        cluster
    }

    /// A streaming standby of `primary` in `scratch/name`, named `name` to
    /// the primary (`application_name`, for `synchronous_standby_names`).
    pub(crate) fn standby(bin: &Path, scratch: &Scratch, name: &str, primary: &Cluster) -> Cluster {
        let data = scratch.path().join(name);
        let port = primary.port.to_string();
        must(
            &bin.join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &data.display().to_string(),
                "-R",
                "-X",
                "stream",
            ],
        );
        let conninfo = format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n",
            primary.port
        );
        let cluster = Cluster::configured(bin, scratch, name, data, &conninfo);
        cluster.start();
        cluster
    }

    fn configured(bin: &Path, scratch: &Scratch, name: &str, data: PathBuf, extra: &str) -> Cluster {
        let port = free_port();
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             wal_level = replica\nmax_wal_senders = 4\nsynchronous_commit = on\nfsync = on\n{extra}",
            scratch.path().display()
        );
        // Appended as the postgres user (the files are theirs).
        let file = data.join("postgresql.auto.conf");
        let script = format!("cat >> '{}' <<'EOF'\n{conf}\nEOF", file.display());
        must(Path::new("sh"), &["-c", &script]);
        let log = scratch.path().join(format!("{name}.log"));
        Cluster { bin: bin.to_owned(), data, log, port }
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data.display().to_string();
        let log = self.log.display().to_string();
        let mut all = vec!["-D", &data, "-l", &log, "-w", "-t", "60"];
        all.extend_from_slice(args);
        must(&self.bin.join("pg_ctl"), &all);
    }

    pub(crate) fn start(&self) {
        self.pg_ctl(&["start"]);
    }

    /// Restarts it (`fast`: sessions are cut off, nothing committed is lost).
    pub(crate) fn restart(&self) {
        self.pg_ctl(&["restart", "-m", "fast"]);
    }

    /// Stops it as a crash would (`immediate`: no shutdown checkpoint).
    pub(crate) fn crash(&self) {
        self.pg_ctl(&["stop", "-m", "immediate"]);
    }

    pub(crate) fn promote(&self) {
        self.pg_ctl(&["promote"]);
    }

    /// Sets a server setting and reloads the configuration.
    pub(crate) fn set(&self, setting: &str) {
        let mut client = self.client();
        // Two statements: ALTER SYSTEM cannot run inside a transaction block.
        client.batch_execute(&format!("ALTER SYSTEM SET {setting}")).unwrap_or_else(|e| panic!("{e:?}"));
        client.batch_execute("SELECT pg_reload_conf()").unwrap_or_else(|e| panic!("{e:?}"));
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres?connect_timeout=5", self.port)
    }

    pub(crate) fn client(&self) -> postgres::Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match postgres::Client::connect(&self.url(), postgres::NoTls) {
                Ok(c) => return c,
                Err(e) if Instant::now() > deadline => panic!("cluster on port {}: {e}", self.port),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let _ = run(&self.bin.join("pg_ctl"), &["-D", &data, "stop", "-m", "immediate"]);
    }
}
