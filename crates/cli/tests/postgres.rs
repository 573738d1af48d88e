//! Every command that takes a STORE, against a real PostgreSQL server
//! (`PALIMPSEST_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`),
//! each test in a schema of its own, chosen by the URL's `options`. Under
//! CI an unreachable server fails the tests; elsewhere they say so and pass.
//! The URL carries a password (the test server trusts every connection) so
//! the tests can check it never reaches output or errors.

mod support;

use std::fs;
use std::sync::atomic::{AtomicU64, Ordering};

use support::*;

const SECRET: &str = "hunter2-never-shown";

fn base_url() -> String {
    std::env::var("PALIMPSEST_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own, dropped at the end.
struct Schema {
    name: String,
}

impl Schema {
    fn new() -> Option<Schema> {
        static N: AtomicU64 = AtomicU64::new(0);
        let mut client = match postgres::Client::connect(&base_url(), postgres::NoTls) {
            Ok(c) => c,
            Err(e) if std::env::var_os("CI").is_some() => panic!("no PostgreSQL server and CI is set: {e}"),
            Err(e) => {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("skipped: no PostgreSQL server ({e}); under CI this fails");
                }
                return None;
            }
        };
        let name = format!("cli_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"))
            .expect("schema");
        Some(Schema { name })
    }

    /// The store's URL: the test server, this schema, and a password.
    fn url(&self) -> String {
        let url = base_url().replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1);
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options=-csearch_path%3D{}", self.name)
    }

    fn tables(&self) -> i64 {
        let mut client = postgres::Client::connect(&base_url(), postgres::NoTls).expect("connect");
        client
            .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = $1", &[&self.name])
            .and_then(|r| r.try_get(0))
            .expect("count")
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&base_url(), postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

fn no_secret(run: &Run) {
    assert!(!run.stdout.contains(SECRET) && !run.stderr.contains(SECRET), "the password leaked: {run:?}");
}

#[test]
fn demo_sessions_inspect_export_fork_and_convert_work_on_a_postgres_url() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();

    let demo = palimpsest(d, &["demo", "--store", &url, "--pace", "0", "--quiet", "--color", "never"]);
    no_secret(&demo);
    assert_eq!(demo.code, 0, "{demo:?}");
    assert!(demo.stdout.contains("(PostgreSQL store)"), "{}", demo.stdout);
    assert!(demo.stdout.contains("postgres:***@"), "the URL is shown redacted: {}", demo.stdout);

    let sessions = ok(palimpsest(d, &["sessions", &url]));
    no_secret(&sessions);
    let id = sessions
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("demo-"))
        .unwrap_or_else(|| panic!("no demo session listed: {}", sessions.stdout))
        .to_owned();

    let valid = ok(palimpsest(d, &["validate", "--json", &url, "--session", &id])).json();
    assert_eq!(valid["valid"], true, "{valid}");
    let events = valid["events"].as_u64().unwrap_or_default();
    assert!(events > 50, "{valid}");
    let inspect = ok(palimpsest(d, &["inspect", &url, "--session", &id, "--color", "never"]));
    no_secret(&inspect);
    // The timeline is streamed from the server a second time: every event.
    let timeline = inspect.stdout.lines().skip_while(|l| !l.starts_with("timeline")).skip(2);
    assert_eq!(timeline.take_while(|l| !l.is_empty()).count() as u64, events, "{}", inspect.stdout);
    let md = ok(palimpsest(d, &["export", &url, "--session", &id, "--format", "markdown"]));
    assert!(md.stdout.contains("# "), "{}", md.stdout);
    let explained = ok(palimpsest(d, &["explain", &url, "--session", &id, "1", "--json"])).json();
    assert_eq!(explained["seq"], 1, "{explained}");

    // Fork inside the store: the child is written whole, and is valid.
    let fork = ok(palimpsest(d, &["fork", &url, "--session", &id, "--at", "10"]));
    no_secret(&fork);
    let child = fork.stdout.trim().to_owned();
    let child_report = ok(palimpsest(d, &["validate", "--json", &url, "--session", &child])).json();
    assert_eq!(child_report["valid"], true, "{child_report}");

    // PostgreSQL -> JSONL -> another schema -> JSONL: byte for byte.
    ok(palimpsest(d, &["convert", &url, "--session", &id, "a.jsonl"]));
    let other = Schema::new().expect("a second schema");
    let conv = ok(palimpsest(d, &["convert", "a.jsonl", &other.url()]));
    no_secret(&conv);
    assert!(conv.stdout.contains(&format!("converted 1 session ({events} events)")), "{}", conv.stdout);
    ok(palimpsest(d, &["convert", &other.url(), "--session", &id, "b.jsonl"]));
    assert_eq!(fs::read(d.join("a.jsonl")).expect("a"), fs::read(d.join("b.jsonl")).expect("b"));
    // A second conversion into it is refused: nothing overwritten.
    let again = palimpsest(d, &["convert", "a.jsonl", &other.url()]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already-exists"), "{}", again.stderr);

    // demo --resume of a finished session continues on the server.
    let resumed = palimpsest(d, &["demo", "--store", &url, "--resume", &id, "--pace", "0", "--quiet"]);
    no_secret(&resumed);
    assert_eq!(resumed.code, 0, "{resumed:?}");
}

#[test]
fn reading_a_schema_without_a_store_creates_nothing_and_says_so() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    for args in [vec!["sessions", "URL"], vec!["validate", "URL"], vec!["inspect", "URL"]] {
        let args: Vec<String> =
            args.iter().map(|a| if *a == "URL" { schema.url() } else { a.to_string() }).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = palimpsest(dir.path(), &args);
        no_secret(&run);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("holds no Palimpsest store"), "{}", run.stderr);
    }
    assert_eq!(schema.tables(), 0, "a reading command created tables");
}

#[test]
fn an_unreachable_server_is_an_io_error_without_the_password() {
    let dir = tempfile::tempdir().expect("a temp dir");
    // Port 1 on loopback: nothing listens.
    let url = format!("postgres://app:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=2");
    for args in [vec!["sessions", url.as_str()], vec!["demo", "--store", url.as_str(), "--pace", "0"]] {
        let run = palimpsest(dir.path(), &args);
        no_secret(&run);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(
            run.stderr.contains("error[io]") && run.stderr.contains("app:***@127.0.0.1:1"),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn repair_write_closes_a_crashed_session_on_the_server_unless_a_worker_holds_it() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    let fixture = test_data("ok/crash-open.jsonl");
    ok(palimpsest(d, &["convert", fixture.to_str().expect("utf-8"), &url]));
    let id = "crash-1";
    assert!(ok(palimpsest(d, &["sessions", &url])).stdout.contains(id));
    let before = ok(palimpsest(d, &["validate", "--json", &url])).json()["events"].as_u64();

    // A worker holds the session: repair --write is refused, nothing written.
    let mut schema_url = base_url();
    schema_url.push_str(if schema_url.contains('?') { "&" } else { "?" });
    schema_url.push_str(&format!("options=-csearch_path%3D{}", schema.name));
    let worker = palimpsest_persistence_postgres::PgStore::connect(&schema_url).expect("connect");
    let hold = worker.hold(id, "worker-9", std::time::Duration::from_secs(60)).expect("hold");
    let refused = palimpsest(d, &["repair", "--write", &url]);
    no_secret(&refused);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("locked") && refused.stderr.contains("worker-9"), "{}", refused.stderr);
    assert_eq!(ok(palimpsest(d, &["validate", "--json", &url])).json()["events"].as_u64(), before);
    worker.release(&hold).expect("release");

    // Released: the closers are appended, and the session validates closed.
    let closers = ok(palimpsest(d, &["repair", "--write", &url])).json();
    let n = closers.as_array().map_or(0, Vec::len) as u64;
    assert!(n > 0, "{closers}");
    let after = ok(palimpsest(d, &["validate", "--json", &url])).json();
    assert_eq!(after["events"].as_u64(), before.map(|b| b + n), "{after}");
    assert_eq!(ok(palimpsest(d, &["repair", &url])).stdout.trim(), "[]");
}

/// `search` on a postgres:// URL gives byte for byte what it gives on the
/// same sessions in a SQLite file, and reading creates nothing in a schema
/// without a store.
#[test]
fn search_on_a_postgres_url_matches_sqlite_and_creates_nothing() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    let empty = palimpsest(d, &["search", &url, "milk"]);
    no_secret(&empty);
    assert_eq!(empty.code, 2, "{empty:?}");
    assert_eq!(schema.tables(), 0, "searching a schema without a store created tables");
    for f in ["compaction-and-prune", "forked", "settings", "crash-open"] {
        let src = test_data(&format!("ok/{f}.jsonl")).display().to_string();
        ok(palimpsest(d, &["convert", &src, &url]));
        ok(palimpsest(d, &["convert", &src, "store.db"]));
    }
    for words in [&["milk"][..], &["NOTES.txt"][..], &["it", "says"][..], &["unicorn"][..]] {
        for json in [false, true] {
            let mut pg: Vec<&str> = vec!["search", &url];
            let mut db: Vec<&str> = vec!["search", "store.db"];
            pg.extend(words);
            db.extend(words);
            if json {
                pg.push("--json");
                db.push("--json");
            }
            let (pg, db) = (palimpsest(d, &pg), palimpsest(d, &db));
            no_secret(&pg);
            assert_eq!((pg.code, &pg.stdout), (db.code, &db.stdout), "search {words:?} (json: {json})");
        }
    }
}

/// A writing command that needs a stored session (`repair --write`,
/// `fork`, `delete`) refuses a schema without a store, and creates nothing
/// in it: a refused command changes nothing.
#[test]
fn writing_commands_on_a_schema_without_a_store_create_nothing() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    for args in [&["repair", "--write", &url][..], &["fork", &url, "--at", "1"], &["delete", &url, "--yes"]] {
        let run = palimpsest(d, args);
        no_secret(&run);
        assert!(run.code == 1 || run.code == 2, "{args:?}: {run:?}");
        assert_eq!(schema.tables(), 0, "{args:?} created tables");
    }
}

/// Resuming a session in a schema without a store (`demo --resume`,
/// `run --session`) is `not-found`, and creates no table there.
#[test]
fn resuming_in_a_schema_without_a_store_creates_nothing() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    let demo = ["demo", "--store", &url, "--resume", "nope", "--pace", "0", "--quiet"];
    let run = [
        "run",
        "--store",
        &url,
        "--session",
        "nope",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "hi",
    ];
    for args in [&demo[..], &run[..]] {
        let out = palimpsest(d, args);
        no_secret(&out);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert_eq!(schema.tables(), 0, "{args:?} created tables");
    }
}

/// The README's recipe for a schema of one's own (`?options=-csearch_path%3D
/// NAME`) works on a schema that does not exist yet: a writing command
/// creates it with the store's tables; a reading command on another new one
/// creates nothing and says there is no store.
#[test]
fn a_url_naming_a_new_schema_gets_it_on_the_first_write() {
    let Some(schema) = Schema::new() else { return };
    let mut client = postgres::Client::connect(&base_url(), postgres::NoTls).expect("connect");
    client.batch_execute(&format!("DROP SCHEMA {} CASCADE", schema.name)).expect("drop");
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    let fixture = test_data("ok/crash-open.jsonl");
    ok(palimpsest(d, &["convert", fixture.to_str().expect("utf-8"), &url]));
    assert!(schema.tables() > 0, "the writer created the schema and its tables");
    assert!(ok(palimpsest(d, &["sessions", &url])).stdout.contains("crash-1"));

    let other = Schema { name: format!("{}_unread", schema.name) };
    let listed = palimpsest(d, &["sessions", &other.url()]);
    assert_ne!(listed.code, 0, "{listed:?}");
    no_secret(&listed);
    let exists: bool = client
        .query_one("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", &[&other.name])
        .and_then(|r| r.try_get(0))
        .expect("query");
    assert!(!exists, "reading created nothing: {}", listed.stderr);
}

/// A whole store converted into PostgreSQL is all or nothing: a session
/// the server refuses only when it is written (an id longer than it takes)
/// ends the conversion, and the sessions written before it are deleted
/// again.
#[test]
fn a_session_the_server_refuses_leaves_nothing_of_a_whole_store_conversion() {
    let Some(schema) = Schema::new() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let url = schema.url();
    let fixture = fs::read_to_string(test_data("ok/crash-open.jsonl")).expect("the fixture");
    let long_id = "z".repeat(1100);
    fs::write(d.join("long.jsonl"), fixture.replacen("\"crash-1\"", &format!("{long_id:?}"), 1))
        .expect("write");
    for f in ["ok/compaction-and-prune.jsonl", "ok/crash-open.jsonl"] {
        ok(palimpsest(d, &["convert", test_data(f).to_str().expect("utf-8"), "s.db"]));
    }
    ok(palimpsest(d, &["convert", "long.jsonl", "s.db"]));
    assert_eq!(ok(palimpsest(d, &["sessions", "s.db", "--json"])).json().as_array().map(Vec::len), Some(3));

    let run = palimpsest(d, &["convert", "s.db", &url]);
    no_secret(&run);
    assert_eq!(run.code, 2, "invalid-id is exit 2, as everywhere: {run:?}");
    assert!(run.stderr.contains("invalid-id"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing was converted (the 2 sessions written before"), "{}", run.stderr);
    let left = ok(palimpsest(d, &["sessions", &url, "--json"])).json();
    assert_eq!(left.as_array().map(Vec::len), Some(0), "sessions left behind: {left}");
}
