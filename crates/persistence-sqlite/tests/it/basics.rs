//! The store's own behaviour: round trips, refusals that write nothing, the
//! exact column contents, reopening.

use palimpsest_core_session::jsonl::to_bytes;
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::{Durability, DurableSession, SessionStore};
use palimpsest_persistence_sqlite::{
    SqliteOptions, SqliteStore, Synchronous, APPLICATION_ID, SCHEMA_VERSION,
};
use rusqlite::Connection;

use crate::common::{code, fixtures, parse, store_of_ticks, tag_of, temp_db, tick, ticks};

#[test]
fn the_store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SqliteStore>();
}

#[test]
fn a_new_file_gets_the_schema_version_application_id_and_wal() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    assert_eq!(store.path(), Some(path.as_path()));
    drop(store);
    let conn = Connection::open(&path).expect("raw open");
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).expect("user_version");
    let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).expect("application_id");
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).expect("journal_mode");
    assert_eq!((version, app, mode.as_str()), (SCHEMA_VERSION, APPLICATION_ID, "wal"));
    assert_eq!(APPLICATION_ID.to_be_bytes(), *b"PALI");
    assert!(SqliteStore::is_sqlite_file(&path));
}

#[test]
fn a_zero_byte_file_is_initialised_and_reopening_keeps_everything() {
    let (_dir, path) = temp_db();
    std::fs::write(&path, b"").expect("touch");
    let store = SqliteStore::open(&path).expect("open empty file");
    store.create(&SessionHeader::new("s", 5)).expect("create");
    store.append("s", &ticks(0, 3, "a")).expect("append");
    drop(store);
    let store = SqliteStore::open(&path).expect("reopen");
    let loaded = store.load("s").expect("load");
    assert_eq!(loaded.events, ticks(0, 3, "a"));
    assert_eq!(loaded.header, SessionHeader::new("s", 5));
    assert_eq!(loaded.report, Default::default());
}

#[test]
fn is_sqlite_file_checks_the_magic_only() {
    let (dir, path) = temp_db();
    assert!(!SqliteStore::is_sqlite_file(&path), "missing file");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "SQLite format 2\0 and more text").expect("write");
    assert!(!SqliteStore::is_sqlite_file(&text));
    std::fs::write(&text, "SQLite").expect("write");
    assert!(!SqliteStore::is_sqlite_file(&text), "shorter than the magic");
    Connection::open(&path).and_then(|c| c.execute_batch("CREATE TABLE t (x)")).expect("foreign db");
    assert!(SqliteStore::is_sqlite_file(&path), "any SQLite database, even a foreign one");
}

#[test]
fn every_fixture_round_trips_byte_for_byte() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    for (name, bytes) in fixtures() {
        let (header, events) = parse(&bytes);
        // Half through create + append, half through import.
        if name.len() % 2 == 0 {
            store.create(&header).expect("create");
            store.append(&header.id, &events).expect("append");
        } else {
            store.create_with_events(&header, &events).expect("import");
        }
    }
    drop(store);
    let store = SqliteStore::open(&path).expect("reopen");
    for (name, bytes) in fixtures() {
        let (header, _) = parse(&bytes);
        let loaded = store.load(&header.id).expect("load");
        assert_eq!(to_bytes(&loaded.header, &loaded.events), bytes, "{name} changed in the round trip");
        Session::from_log(loaded.header, loaded.events).expect("still a valid session");
    }
}

#[test]
fn columns_hold_exactly_the_json_of_each_field() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    let (header, events) = parse(&fixtures().into_iter().next().expect("a fixture").1);
    store.create_with_events(&header, &events).expect("import");
    let extra = [
        r#"{"seq":0,"time":1,"type":"assistant/message","data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}},"zExtra":  [1, 2]},"sourceEventSeqs":[],"surfaceOp":"append"}"#,
        r#"{"seq":1,"time":2,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
        r#"{"seq":2,"time":3,"type":"context/message","data":{"message":{"id":"c","role":"user","content":[{"type":"text","text":"sum"}],"source":{"kind":"plugin","plugin":"x"}}},"sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","start":0,"end":1}}"#,
        r#"{"seq":3,"time":18446744073709551615,"type":"plug\"in/odd","data":null}"#,
    ];
    let extra: Vec<Event> = extra.iter().map(|j| Event::from_json(j).expect("event")).collect();
    store.create_with_events(&SessionHeader::new("x", 1), &extra).expect("import");
    drop(store);

    let conn = Connection::open(&path).expect("raw open");
    let mut stmt = conn
        .prepare(
            "SELECT session_id, seq, time, type, data, source_event_seqs, surface_op \
             FROM events ORDER BY session_id, seq",
        )
        .expect("prepare");
    type Row = (String, i64, i64, String, String, Option<String>, Option<String>);
    let rows: Vec<Row> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let all: Vec<(&str, &Event)> =
        events.iter().map(|e| (header.id.as_str(), e)).chain(extra.iter().map(|e| ("x", e))).collect();
    let mut all = all;
    all.sort_by(|a, b| (a.0, a.1.seq()).cmp(&(b.0, b.1.seq())));
    assert_eq!(rows.len(), all.len());
    for (row, (id, e)) in rows.iter().zip(&all) {
        // The field texts exactly as the canonical JSONL line holds them.
        let line = e.to_json();
        let fields: std::collections::HashMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_str(&line).expect("json");
        let field = |k: &str| fields.get(k).map(|v| v.get().to_owned());
        assert_eq!(row.0, *id);
        assert_eq!(row.1 as u64, e.seq());
        assert_eq!(row.2 as u64, e.time(), "time is stored with its bits (u64::MAX reads back)");
        assert_eq!(row.3, e.event_type().as_str());
        assert_eq!(row.4, e.data(), "data is the payload text exactly as the event holds it");
        assert_eq!(row.5, field("sourceEventSeqs"), "seq {} of {id}", e.seq());
        assert_eq!(row.6, field("surfaceOp"), "seq {} of {id}", e.seq());
    }
    // The cases the contract names, spelled out.
    let x: Vec<&Row> = rows.iter().filter(|r| r.0 == "x").collect();
    assert_eq!(x[0].5.as_deref(), Some("[]"), "[] stays []");
    assert_eq!(x[0].4, extra[0].data());
    assert!(x[0].4.contains(r#""zExtra":  [1, 2]"#), "payload whitespace kept verbatim");
    assert_eq!((x[1].5.as_deref(), x[1].6.as_deref()), (None, Some("\"append\"")), "NULL when absent");
    assert_eq!(x[2].6.as_deref(), Some(r#"{"op":"replace","start":0,"end":1}"#));
    assert_eq!((x[3].5.as_deref(), x[3].6.as_deref(), x[3].4.as_str()), (None, None, "null"));

    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(store.load("x").expect("load").events, extra);
}

#[test]
fn headers_keep_every_optional_field_and_list_is_sorted_by_id() {
    let store = SqliteStore::open_in_memory().expect("open");
    assert_eq!(store.path(), None);
    let full = SessionHeader {
        id: "b-fork".into(),
        created_at: u64::MAX,
        cwd: Some("/tmp/ünïcode dir".into()),
        parent_session: Some("a".into()),
        seed_length: Some(12),
    };
    store.create(&full).expect("create");
    store.create(&SessionHeader::new("a", 1)).expect("create");
    assert_eq!(store.list().expect("list"), vec![SessionHeader::new("a", 1), full.clone()]);
    assert_eq!(store.load("b-fork").expect("load").header, full);
}

#[test]
fn refusals_change_nothing() {
    let store = SqliteStore::open_in_memory().expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    assert_eq!(code(store.create(&SessionHeader::new("s", 9))), Err("already-exists"));
    assert_eq!(store.load("s").expect("load").header.created_at, 0, "the first header stays");
    store.append("s", &ticks(0, 2, "a")).expect("append");

    // A batch that starts in the wrong place, or has a gap inside: conflict.
    let gap = vec![tick(2, "b"), tick(3, "b"), tick(5, "b")];
    for bad in [ticks(1, 3, "b"), ticks(3, 3, "b"), gap] {
        let err = store.append("s", &bad).expect_err("refused");
        assert_eq!(err.code(), "conflict", "{err}");
    }
    let err = store.append("s", &ticks(5, 1, "b")).expect_err("refused");
    assert_eq!(err.to_string(), "conflict: session \"s\" expects seq 2 next, the batch starts at 5");
    assert_eq!(store.load("s").expect("load").events, ticks(0, 2, "a"), "nothing was written");

    assert_eq!(code(store.append("nope", &ticks(0, 1, "a"))), Err("not-found"));
    assert_eq!(code(store.append("nope", &[])), Err("not-found"));
    assert_eq!(code(store.append("s", &[])), Ok(()));
    assert_eq!(code(store.load("nope")), Err("not-found"));
    assert_eq!(code(store.delete("nope")), Err("not-found"));

    // The store is still writable after refusals (they are not I/O errors).
    store.append("s", &ticks(2, 1, "c")).expect("append after refusals");
    assert_eq!(store.load("s").expect("load").events.len(), 3);
}

#[test]
fn delete_removes_the_session_and_its_events_only() {
    let store = SqliteStore::open_in_memory().expect("open");
    for id in ["a", "b"] {
        store.create(&SessionHeader::new(id, 0)).expect("create");
        store.append(id, &ticks(0, 4, id)).expect("append");
    }
    store.delete("a").expect("delete");
    assert_eq!(code(store.load("a")), Err("not-found"));
    assert_eq!(store.list().expect("list"), vec![SessionHeader::new("b", 0)]);
    assert_eq!(store.load("b").expect("load").events, ticks(0, 4, "b"));
    // The id is free again, and starts from seq 0.
    store.create(&SessionHeader::new("a", 3)).expect("recreate");
    assert_eq!(store.load("a").expect("load").events, vec![]);
    assert_eq!(code(store.append("a", &ticks(4, 1, "a"))), Err("conflict"));
    store.append("a", &ticks(0, 1, "new")).expect("append from 0");
}

#[test]
fn create_with_events_is_all_or_nothing() {
    let store = SqliteStore::open_in_memory().expect("open");
    let header = SessionHeader::new("s", 0);
    assert_eq!(code(store.create_with_events(&header, &ticks(1, 3, "a"))), Err("conflict"));
    assert_eq!(code(store.load("s")), Err("not-found"), "a refused import leaves no session");
    store.create_with_events(&header, &ticks(0, 3, "a")).expect("import");
    assert_eq!(code(store.create_with_events(&header, &ticks(0, 1, "b"))), Err("already-exists"));
    assert_eq!(store.load("s").expect("load").events, ticks(0, 3, "a"));
}

#[test]
fn every_synchronous_level_appends_syncs_and_reopens() {
    for synchronous in [Synchronous::Full, Synchronous::Normal, Synchronous::Off] {
        let (_dir, path) = temp_db();
        let options = SqliteOptions { synchronous, ..SqliteOptions::default() };
        let store = SqliteStore::open_with(&path, options).expect("open");
        assert_eq!(store.options(), options);
        store.create(&SessionHeader::new("s", 0)).expect("create");
        store.append("s", &ticks(0, 50, "a")).expect("append");
        store.sync("s").expect("sync");
        store.append("s", &ticks(50, 50, "b")).expect("append");
        store.sync("s").expect("sync again");
        // A second store on the same file sees everything, before and after
        // the first one closes.
        let other = SqliteStore::open(&path).expect("second store");
        assert_eq!(other.load("s").expect("load").events.len(), 100, "{synchronous:?}");
        drop(store);
        let events = other.load("s").expect("load").events;
        assert_eq!(events.last().map(tag_of).as_deref(), Some("b-49"));
    }
}

#[test]
fn sync_under_normal_leaves_nothing_in_the_wal() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    store.append("s", &ticks(0, 200, "a")).expect("append");
    let wal = path.with_extension("db-wal");
    assert!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) > 0, "the batch is in the WAL");
    let before = std::fs::metadata(&path).expect("db").len();
    store.sync("s").expect("sync");
    let after = std::fs::metadata(&path).expect("db").len();
    assert!(after > before, "the checkpoint copied the WAL into the database ({before} -> {after})");
    // The database file alone now holds the batch: copy it without the WAL
    // and open the copy.
    let copy = path.with_file_name("copy.db");
    std::fs::copy(&path, &copy).expect("copy");
    let copied = SqliteStore::open(&copy).expect("open copy");
    assert_eq!(copied.load("s").expect("load").events.len(), 200);
}

#[test]
fn a_durable_session_works_over_the_store() {
    use palimpsest_core_session::payload::{StepEnd, StepStart, TurnEnd, TurnEndReason, TurnStart};
    use std::sync::Arc;
    let (_dir, path) = temp_db();
    let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path).expect("open"));
    let mut s = DurableSession::create(store.clone(), SessionHeader::new("d", 0), Durability::TurnBoundary)
        .expect("create");
    s.append_log(1, TurnStart { turn: 1 }).expect("turn");
    s.append_log(2, StepStart { turn: 1, step: 1 }).expect("step");
    s.append_log(3, StepEnd { turn: 1, step: 1 }).expect("step end");
    s.append_log(4, TurnEnd { turn: 1, reason: TurnEndReason::Completed }).expect("turn end");
    drop(s);
    let reopened = Arc::new(SqliteStore::open(&path).expect("reopen"));
    let (s, report) = DurableSession::open(reopened, "d", Durability::EveryAppend).expect("open session");
    assert_eq!(s.session().events().len(), 4);
    assert_eq!(report, Default::default());
}

#[test]
fn the_readme_shows_the_schema_the_code_creates() {
    let readme = include_str!("../../README.md");
    let sql = readme.split("```sql\n").nth(1).and_then(|s| s.split("```").next()).expect("an sql block");
    assert_eq!(sql, palimpsest_persistence_sqlite::SCHEMA_SQL);
}

/// A load into a sink that keeps every event (a session) has them share
/// a payload text per batch of rows; one into a sink that keeps a few of
/// many (the default of `LoadSink::keeps_events`) gives each its own, so
/// that it keeps no batch alive for them. The events are the same.
#[test]
fn events_share_their_batch_only_with_a_sink_that_keeps_them_all() {
    use std::ops::ControlFlow;

    use palimpsest_persistence::{load_session, LoadSink};

    /// Keeps whether each event shares its text, and drops it.
    #[derive(Default)]
    struct Flags(Vec<(u64, bool)>);
    impl LoadSink for Flags {
        fn header(&mut self, _: SessionHeader) -> ControlFlow<()> {
            ControlFlow::Continue(())
        }
        fn event(&mut self, event: Event) -> ControlFlow<()> {
            self.0.push((event.seq(), event.shares_text()));
            ControlFlow::Continue(())
        }
    }

    let (_dir, path) = temp_db();
    store_of_ticks(&path, 3_000);
    let events = ticks(0, 3_000, "t");
    let options = SqliteOptions { decode_threads: 2, ..SqliteOptions::default() };
    let store = SqliteStore::open_with(&path, options).expect("reopen");
    let (session, _) = load_session(&store, "s", None).expect("load");
    assert_eq!(session.resident(), &events[..]);
    assert!(session.resident().iter().all(Event::shares_text));
    let mut flags = Flags::default();
    store.load_into("s", &mut flags).expect("load_into");
    assert_eq!(flags.0, (0..3_000).map(|seq| (seq, false)).collect::<Vec<_>>());
}
