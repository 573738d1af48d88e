//! The store's own behaviour: byte-identical round trips, the exact column
//! contents, schema versions refused, racing writers, secrets kept out of
//! errors and `Debug`.

use std::path::Path;
use std::sync::{Arc, Barrier};

use palimpsest_core_session::jsonl::{to_bytes, JsonlLog};
use palimpsest_core_session::{Event, Session, SessionHeader};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::{schema_sql, PgOptions, PgStore, SCHEMA_VERSION};

use crate::common::{code, tick, ticks, url, TestSchema};

/// The valid JSONL sessions of core-session's fixtures, as (name, bytes).
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core-session/test_data/ok");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("core-session fixtures: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    assert!(out.len() >= 3, "expected the core-session fixtures in {}", dir.display());
    out
}

#[test]
fn jsonl_to_postgres_to_jsonl_is_byte_identical() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    for (_, bytes) in fixtures() {
        let log = JsonlLog::parse(&bytes).unwrap_or_else(|e| panic!("fixture: {e}"));
        store.create(&log.header).unwrap_or_else(|e| panic!("create: {e}"));
        store.append(&log.header.id, &log.events).unwrap_or_else(|e| panic!("append: {e}"));
    }
    drop(store);
    let store = schema.store();
    for (name, bytes) in fixtures() {
        let id = JsonlLog::parse(&bytes).map(|l| l.header.id).unwrap_or_default();
        let loaded = store.load(&id).unwrap_or_else(|e| panic!("load {name}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&to_bytes(&loaded.header, &loaded.events)),
            String::from_utf8_lossy(&bytes),
            "{name} changed in the round trip"
        );
        Session::from_log(loaded.header, loaded.events).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn columns_hold_exactly_the_json_text_of_each_field() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    let extra = [
        r#"{"seq":0,"time":1,"type":"assistant/message","data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}},"zExtra":  [1, 2]},"sourceEventSeqs":[],"surfaceOp":"append"}"#,
        r#"{"seq":1,"time":2,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi \u0000 \ud83e\udd80"}],"source":{"kind":"user"}}},"surfaceOp":"append"}"#,
        r#"{"seq":2,"time":3,"type":"context/message","data":{"message":{"id":"c","role":"user","content":[{"type":"text","text":"sum"}],"source":{"kind":"plugin","plugin":"x"}}},"sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","start":0,"end":1}}"#,
        r#"{"seq":3,"time":18446744073709551615,"type":"plug\"in/odd","data":null}"#,
    ];
    let events: Vec<Event> =
        extra.iter().map(|j| Event::from_json(j).unwrap_or_else(|e| panic!("event: {e}"))).collect();
    store.create(&SessionHeader::new("x", 1)).unwrap_or_else(|e| panic!("{e}"));
    store.append("x", &events).unwrap_or_else(|e| panic!("{e}"));
    let mut client = schema.client();
    let rows = client
        .query(
            "SELECT seq, time, type, data, source_event_seqs, surface_op, pg_typeof(data)::text \
             FROM events WHERE session_id = 'x' ORDER BY seq",
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), events.len());
    for (row, e) in rows.iter().zip(&events) {
        let line = e.to_json();
        let fields: std::collections::HashMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_str(&line).unwrap_or_else(|err| panic!("{err}"));
        let field = |k: &str| fields.get(k).map(|v| v.get().to_owned());
        assert_eq!(row.get::<_, i64>(0) as u64, e.seq());
        assert_eq!(row.get::<_, i64>(1) as u64, e.time(), "time keeps its bits (u64::MAX reads back)");
        assert_eq!(row.get::<_, String>(2), e.event_type().as_str());
        assert_eq!(row.get::<_, String>(3), e.data(), "data is the payload text exactly as written");
        assert_eq!(row.get::<_, Option<String>>(4), field("sourceEventSeqs"));
        assert_eq!(row.get::<_, Option<String>>(5), field("surfaceOp"));
        assert_eq!(row.get::<_, String>(6), "text", "stored as text, never jsonb");
    }
    assert!(rows[0].get::<_, String>(3).contains(r#""zExtra":  [1, 2]"#), "whitespace kept");
    assert!(rows[1].get::<_, String>(3).contains(r#"\u0000 \ud83e\udd80"#), "escapes kept as written");
    assert_eq!(store.load("x").map(|s| s.events).unwrap_or_else(|e| panic!("{e}")), events);
}

#[test]
fn a_derived_jsonb_column_is_allowed_and_the_text_stays_canonical() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    let mut client = schema.client();
    client
        .batch_execute(
            "ALTER TABLE events ADD COLUMN data_json jsonb GENERATED ALWAYS AS (data::jsonb) STORED",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    let store = schema.store();
    store.create(&SessionHeader::new("j", 1)).unwrap_or_else(|e| panic!("{e}"));
    store.append("j", &ticks(0, 3, "j")).unwrap_or_else(|e| panic!("{e}"));
    let tag: String = client
        .query_one("SELECT data_json->>'tag' FROM events WHERE session_id = 'j' AND seq = 2", &[])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tag, "j-2");
    assert_eq!(store.load("j").map(|s| s.events).unwrap_or_else(|e| panic!("{e}")), ticks(0, 3, "j"));
}

#[test]
fn older_and_newer_schema_versions_are_refused_naming_both() {
    let Some(schema) = TestSchema::new() else { return };
    drop(schema.store());
    let mut client = schema.client();
    for found in [SCHEMA_VERSION - 1, SCHEMA_VERSION + 1, 99] {
        client
            .batch_execute(&format!("COMMENT ON TABLE sessions IS 'palimpsest schema_version {found}'"))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = PgStore::connect_with(&url(), schema.options()).map(drop);
        let err = err.err().unwrap_or_else(|| panic!("version {found} was opened"));
        assert_eq!(err.code(), "schema-mismatch");
        let text = err.to_string();
        assert!(text.contains(&format!("schema version {found}")), "{text}");
        assert!(text.contains(&format!("schema version {SCHEMA_VERSION}")), "{text}");
    }
    // Nothing was migrated: the comment is as the test left it.
    let comment: Option<String> = client
        .query_one("SELECT obj_description('sessions'::regclass, 'pg_class')", &[])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(comment.as_deref(), Some("palimpsest schema_version 99"));
}

/// Version 2, the schema without the `checkpoints` table, is refused
/// naming both numbers; today's number without the table is refused
/// naming it.
#[test]
fn a_version_2_store_without_checkpoints_is_refused() {
    let Some(schema) = TestSchema::new() else { return };
    let mut client = schema.client();
    let v2 =
        schema_sql(&schema.name).replace(&format!("schema_version {SCHEMA_VERSION}"), "schema_version 2");
    let start = v2
        .find("CREATE TABLE")
        .and_then(|_| v2.find(&format!("CREATE TABLE \"{}\".checkpoints", schema.name)));
    let start = start.unwrap_or_else(|| panic!("schema_sql creates checkpoints"));
    let end = start + v2[start..].find(");").unwrap_or_else(|| panic!("a statement ends")) + 2;
    let v2 = format!("{}{}", &v2[..start], &v2[end..]);
    client.batch_execute(&v2).unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a version 2 store was opened"));
    assert_eq!(err.code(), "schema-mismatch");
    let text = err.to_string();
    assert!(text.contains("schema version 2") && text.contains("schema version 3"), "{text}");
    client
        .batch_execute(&format!("COMMENT ON TABLE sessions IS 'palimpsest schema_version {SCHEMA_VERSION}'"))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a store without checkpoints was opened"));
    assert_eq!(err.code(), "schema-mismatch");
    assert!(err.to_string().contains(".checkpoints"), "{err}");
}

#[test]
fn foreign_or_partial_tables_are_refused_and_left_alone() {
    let Some(schema) = TestSchema::new() else { return };
    let mut client = schema.client();
    client.batch_execute("CREATE TABLE sessions (id int PRIMARY KEY)").unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("another program's table was taken"));
    assert_eq!(err.code(), "schema-mismatch");
    assert!(err.to_string().contains("another program's table"), "{err}");
    client.batch_execute("DROP TABLE sessions").unwrap_or_else(|e| panic!("{e}"));

    // The right version, but a column of the wrong type.
    client.batch_execute(&schema_sql(&schema.name)).unwrap_or_else(|e| panic!("{e}"));
    client
        .batch_execute("ALTER TABLE events ALTER COLUMN data TYPE jsonb USING data::jsonb")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a jsonb data column was accepted"));
    assert_eq!(err.code(), "schema-mismatch");
    assert!(err.to_string().contains("data jsonb"), "{err}");
    client.batch_execute("DROP TABLE holds").unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    assert_eq!(err.map(|e| e.code()), Some("schema-mismatch"));
}

#[test]
fn two_stores_opening_one_new_schema_race_safely() {
    let Some(schema) = TestSchema::new() else { return };
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (barrier, options) = (barrier.clone(), schema.options());
            std::thread::spawn(move || {
                barrier.wait();
                PgStore::connect_with(&url(), options).map(drop).map_err(|e| e.to_string())
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap_or_else(|_| panic!("thread panicked")), Ok(()));
    }
}

/// Writers on separate connections race for the same next seqs: each
/// append either lands whole or is `conflict` with nothing written, and the
/// log ends contiguous, holding exactly the acknowledged batches.
#[test]
fn racing_writers_on_separate_connections_never_break_the_log() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    store.create(&SessionHeader::new("race", 1)).unwrap_or_else(|e| panic!("{e}"));
    let writers = 4;
    let rounds = 40;
    let barrier = Arc::new(Barrier::new(writers));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (barrier, store) = (barrier.clone(), schema.store());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let mut conflicts = 0;
                for round in 0..rounds {
                    barrier.wait();
                    let len =
                        store.load("race").map(|s| s.events.len() as u64).unwrap_or_else(|e| panic!("{e}"));
                    let batch = ticks(len, 1 + (round % 3), &format!("w{w}-r{round}"));
                    match store.append("race", &batch) {
                        Ok(()) => acked.push(batch),
                        Err(e) if e.code() == "conflict" => conflicts += 1,
                        Err(e) => panic!("writer {w}: expected Ok or conflict, got [{}] {e}", e.code()),
                    }
                }
                (acked, conflicts)
            })
        })
        .collect();
    let mut acked: Vec<Vec<Event>> = Vec::new();
    let mut conflicts = 0;
    for h in handles {
        let (a, c) = h.join().unwrap_or_else(|_| panic!("writer panicked"));
        acked.extend(a);
        conflicts += c;
    }
    let stored = store.load("race").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    acked.sort_by_key(|b| b[0].seq());
    let expected: Vec<Event> = acked.into_iter().flatten().collect();
    assert_eq!(stored, expected, "the log holds exactly the acknowledged batches, in order");
    assert!(conflicts > 0, "the writers never raced; the test proves nothing");
    assert_eq!(stored.len() as u64, stored.last().map_or(0, |e| e.seq() + 1));
}

#[test]
fn no_error_and_no_debug_shows_the_password() {
    let secret = "pa55-s3cret-word";
    // A server that is not there.
    let url_down = format!("postgres://postgres:{secret}@127.0.0.1:1/test?connect_timeout=2");
    let err = PgStore::connect(&url_down).map(drop).err().unwrap_or_else(|| panic!("connected to port 1"));
    assert_eq!(err.code(), "io");
    let chain = error_chain(&err);
    assert!(!chain.contains(secret), "{chain}");
    assert!(chain.contains("postgres:***@127.0.0.1:1"), "the error still names the server: {chain}");
    // A connection string that cannot be read.
    let err = PgStore::connect(&format!("postgres://u:{secret}@h/db?port=notanumber")).map(drop).err();
    let chain = err.as_ref().map(error_chain).unwrap_or_default();
    assert!(!chain.is_empty() && !chain.contains(secret), "{chain}");
    let err = PgStore::connect(&format!("host=127.0.0.1 port=1 password={secret} connect_timeout=2"))
        .map(drop)
        .err();
    let chain = err.as_ref().map(error_chain).unwrap_or_default();
    assert!(!chain.is_empty() && !chain.contains(secret), "{chain}");

    // A store connected with a password in its URL (the test server trusts
    // it, so any password works).
    let Some(schema) = TestSchema::new() else { return };
    let with_password = url().replacen("postgres://postgres@", &format!("postgres://postgres:{secret}@"), 1);
    if with_password == url() {
        return; // a custom URL of another shape: nothing more to check
    }
    let store = PgStore::connect_with(&with_password, schema.options()).unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{store:?}");
    assert!(!debug.contains(secret) && debug.contains("***"), "{debug}");
    assert!(!store.location().contains(secret));
    let err = store.append("missing", &[tick(0, "x")]).err().map(|e| error_chain(&e)).unwrap_or_default();
    assert!(!err.contains(secret), "{err}");
}

/// An error's `Display` and every `source()` below it.
pub(crate) fn error_chain(e: &palimpsest_persistence::StoreError) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(" <- ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out.push_str(&format!(" {e:?}"));
    out
}

#[test]
fn ids_and_values_postgres_text_cannot_hold_are_refused_cleanly() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    assert_eq!(code(store.create(&SessionHeader::new("a\0b", 1))), Err("invalid-id"));
    assert_eq!(code(store.create(&SessionHeader::new("x".repeat(1025), 1))), Err("invalid-id"));
    let cwd = SessionHeader { cwd: Some("/a\0b".into()), ..SessionHeader::new("h", 1) };
    assert_eq!(code(store.create(&cwd)), Err("invalid-header"));
    store.create(&SessionHeader::new("t", 1)).unwrap_or_else(|e| panic!("{e}"));
    let odd = Event::from_json(r#"{"seq":0,"time":1,"type":"nul\u0000type","data":1}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let err = store.append("t", &[odd]).err().unwrap_or_else(|| panic!("a NUL type was stored"));
    assert!(error_chain(&err).contains("NUL"), "{err}");
    assert_eq!(store.load("t").map(|s| s.events.len()).unwrap_or(99), 0, "nothing written");
    // The store stays usable.
    store.append("t", &[tick(0, "ok")]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(store.load("x".repeat(1025).as_str())), Err("invalid-id"));
}

#[test]
fn the_default_schema_is_the_connections_current_schema() {
    let Some(schema) = TestSchema::new() else { return };
    let url = format!(
        "{}{}options=-csearch_path%3D{}",
        url(),
        if url().contains('?') { "&" } else { "?" },
        schema.name
    );
    let store = PgStore::connect_with(&url, PgOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.schema(), schema.name);
    store.create(&SessionHeader::new("d", 1)).unwrap_or_else(|e| panic!("{e}"));
    let explicit = schema.store();
    assert_eq!(explicit.list().map(|l| l.len()).unwrap_or_default(), 1);
}

/// A reader that must change nothing (`create_missing: false`) is refused
/// a schema without the store's tables, and creates neither the tables nor
/// a missing schema; once a writer made them, it opens.
#[test]
fn a_reader_creates_nothing() {
    let Some(schema) = TestSchema::new() else { return };
    let reader = |name: &str| PgOptions {
        schema: Some(name.to_owned()),
        create_missing: false,
        ..PgOptions::default()
    };
    let err = PgStore::connect_with(&url(), reader(&schema.name)).err().unwrap_or_else(|| panic!("opened"));
    assert_eq!(err.code(), "io");
    assert!(err.to_string().contains("holds no Palimpsest store"), "{err}");
    let mut client = schema.client();
    let tables: i64 = client
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = $1", &[&schema.name])
        .and_then(|r| r.try_get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tables, 0, "the reader created tables");
    let missing = format!("{}_missing", schema.name);
    assert!(PgStore::connect_with(&url(), reader(&missing)).is_err());
    let exists = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&missing])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(exists.is_none(), "the reader created a schema");
    schema.store().create(&SessionHeader::new("r", 1)).unwrap_or_else(|e| panic!("{e}"));
    let store = PgStore::connect_with(&url(), reader(&schema.name)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.list().map(|l| l.len()).unwrap_or_default(), 1);
}

/// The synchronous client runs a runtime of its own per call; the store
/// works from inside an async caller's runtime anyway (current-thread and
/// multi-threaded), opened, used and dropped there.
#[test]
fn the_store_works_inside_a_tokio_runtime() {
    let Some(schema) = TestSchema::new() else { return };
    let options = schema.options();
    for runtime in [
        tokio::runtime::Builder::new_current_thread().build(),
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).build(),
    ] {
        let runtime = runtime.unwrap_or_else(|e| panic!("{e}"));
        let options = options.clone();
        let events = runtime.block_on(async move {
            let store = PgStore::connect_with(&url(), options).unwrap_or_else(|e| panic!("{e}"));
            let id = format!("rt-{}", store.list().map(|l| l.len()).unwrap_or_default());
            store
                .create_with_events(&SessionHeader::new(&id, 1), &[tick(0, "a")])
                .unwrap_or_else(|e| panic!("{e}"));
            store.append(&id, &[tick(1, "b")]).unwrap_or_else(|e| panic!("{e}"));
            let hold =
                store.hold(&id, "w", std::time::Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"));
            store.release(&hold).unwrap_or_else(|e| panic!("{e}"));
            let n = store.load(&id).map(|s| s.events.len()).unwrap_or_default();
            drop(store);
            n
        });
        assert_eq!(events, 2);
    }
}

/// `docs/scaling.md` says the schema partitions by session id unchanged:
/// tables made by hand from `schema_sql`, with `events` hash-partitioned
/// on `session_id`, are accepted, and each session's rows land in one
/// partition.
#[test]
fn hash_partitioned_events_work_unchanged() {
    let Some(schema) = TestSchema::new() else { return };
    let sql = schema_sql(&schema.name).replace(
        "PRIMARY KEY (session_id, seq)\n);",
        "PRIMARY KEY (session_id, seq)\n) PARTITION BY HASH (session_id);",
    );
    assert!(sql.contains("PARTITION BY HASH"), "schema_sql changed shape: {sql}");
    let mut client = schema.client();
    client.batch_execute(&sql).unwrap_or_else(|e| panic!("{e}"));
    for r in 0..4 {
        client
            .batch_execute(&format!(
                "CREATE TABLE {s}.events_p{r} PARTITION OF {s}.events FOR VALUES WITH (MODULUS 4, REMAINDER {r})",
                s = schema.name
            ))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let store = schema.store();
    for i in 0..8 {
        let id = format!("s{i}");
        store.create(&SessionHeader::new(&id, 1)).unwrap_or_else(|e| panic!("{e}"));
        store.append(&id, &ticks(0, 3, &id)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.load(&id).map(|s| s.events).unwrap_or_default(), ticks(0, 3, &id));
    }
    let spread: Vec<(String, i64)> = client
        .query("SELECT tableoid::regclass::text, count(DISTINCT session_id) FROM events GROUP BY 1", &[])
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(spread.len() > 1, "all sessions in one partition: {spread:?}");
    let one_each: i64 = client
        .query_one("SELECT count(*) FROM (SELECT session_id FROM events GROUP BY session_id HAVING count(DISTINCT tableoid) > 1) x", &[])
        .and_then(|r| r.try_get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(one_each, 0, "a session's rows spread over partitions");
}

/// A message with more distinct words than one tsvector holds gets a row
/// with NULL terms, and is still found; a word longer than the lexeme
/// limit is found whole and not by a longer or shorter one.
#[test]
fn huge_messages_and_huge_words_are_still_found_exactly() {
    use palimpsest_core_session::payload::{Message, UserMessage};
    use palimpsest_core_session::SurfaceIntent;
    use palimpsest_persistence::SearchQuery;

    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    let many: String = (0..120_000).map(|i| format!("w{i} ")).collect();
    let long = "x".repeat(3000);
    let user = |seq, text: &str| {
        let payload = UserMessage { turn: None, message: Message::user(format!("u{seq}"), text) };
        Event::surface(seq, seq, payload, SurfaceIntent::append()).expect("event")
    };
    let events = [user(0, &format!("{many} needle")), user(1, &format!("a {long} b"))];
    store.create_with_events(&SessionHeader::new("big", 0), &events).expect("create");
    let nulls: i64 = schema
        .client()
        .query_one(&format!("SELECT count(*) FROM \"{}\".search WHERE terms IS NULL", schema.name), &[])
        .and_then(|r| r.try_get(0))
        .expect("count");
    assert_eq!(nulls, 1, "the message with too many words has NULL terms");
    let seqs = |words: &[&str]| -> Vec<u64> {
        let q = SearchQuery::new(words).expect("query");
        store.search(&q).expect("search").iter().map(|h| h.seq).collect()
    };
    assert_eq!(seqs(&["needle"]), [0]);
    assert_eq!(seqs(&["w119999", "W0"]), [0]);
    assert_eq!(seqs(&[&long]), [1]);
    assert_eq!(seqs(&[&"x".repeat(2999)]), Vec::<u64>::new(), "a prefix of a long word is not the word");
    assert_eq!(seqs(&[&"x".repeat(3001)]), Vec::<u64>::new());
}

/// The load names its session in a `SET LOCAL` that its header select and
/// its `COPY` read (`COPY` takes no parameters), the id as a literal, not
/// a parameter: ids with quotes, backslashes and escapes must load their
/// own session and nothing else.
#[test]
fn ids_that_need_quoting_load_their_own_rows() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    let ids = ["it's", "back\\slash", "\\'", "' OR true --", "E'x'", "é\\n\"", "a'); DROP TABLE events; --"];
    for (i, id) in ids.iter().enumerate() {
        store.create(&SessionHeader::new(*id, 1)).unwrap_or_else(|e| panic!("create {id:?}: {e}"));
        store
            .append(id, &ticks(0, i as u64 + 1, &format!("t{i}")))
            .unwrap_or_else(|e| panic!("append {id:?}: {e}"));
    }
    for (i, id) in ids.iter().enumerate() {
        let loaded = store.load(id).unwrap_or_else(|e| panic!("load {id:?}: {e}"));
        assert_eq!(loaded.events, ticks(0, i as u64 + 1, &format!("t{i}")), "{id:?}");
    }
    assert_eq!(code(store.load("it")), Err("not-found"));
}

/// A load decodes as rows are read by default; with `decode_threads: 2` a
/// second thread decodes them in batches. Both read the same events, and
/// both name the same first bad row, past the first batch.
#[test]
fn loads_on_one_thread_and_on_two_read_alike() {
    let Some(schema) = TestSchema::new() else { return };
    let events = ticks(0, 3000, "t");
    let writer = schema.store();
    writer.create_with_events(&SessionHeader::new("t", 1), &events).unwrap_or_else(|e| panic!("{e}"));
    let on = |threads: usize| {
        let options = PgOptions { decode_threads: threads, ..schema.options() };
        PgStore::connect_with(&url(), options).unwrap_or_else(|e| panic!("{e}"))
    };
    for threads in [0, 1, 2] {
        let loaded = on(threads).load("t").unwrap_or_else(|e| panic!("{threads} threads: {e}"));
        assert_eq!(loaded.events, events, "{threads} threads");
    }
    let mut admin = schema.client();
    admin
        .batch_execute("UPDATE events SET data = '{\"n\": ' WHERE session_id = 't' AND seq IN (2500, 2900)")
        .unwrap_or_else(|e| panic!("{e}"));
    let good = ticks(0, 10, "g");
    writer.create_with_events(&SessionHeader::new("g", 1), &good).unwrap_or_else(|e| panic!("{e}"));
    let refusals: Vec<String> = [0, 2]
        .into_iter()
        .map(|threads| {
            let store = on(threads);
            let refused = match store.load("t") {
                Ok(_) => panic!("{threads} threads: a bad row loaded"),
                Err(e) => {
                    assert_eq!(e.code(), "corrupt", "{threads} threads: {e}");
                    e.to_string()
                }
            };
            // The COPY was abandoned at the bad row: the rest of it is
            // discarded, and the connection serves the next load.
            let loaded = store.load("g").unwrap_or_else(|e| panic!("{threads} threads, after: {e}"));
            assert_eq!(loaded.events, good, "{threads} threads");
            refused
        })
        .collect();
    assert!(refusals[0].contains("2500)"), "{}", refusals[0]);
    assert_eq!(refusals[0], refusals[1]);
}

/// Columns and primary keys are read for all tables at once; a key in
/// another order is still told apart, and named.
#[test]
fn a_primary_key_in_another_order_is_refused() {
    let Some(schema) = TestSchema::new() else { return };
    let mut client = schema.client();
    client.batch_execute(&schema_sql(&schema.name)).unwrap_or_else(|e| panic!("{e}"));
    PgStore::connect_with(&url(), schema.options()).unwrap_or_else(|e| panic!("the store as created: {e}"));
    client
        .batch_execute(
            "ALTER TABLE events DROP CONSTRAINT events_pkey CASCADE; \
             ALTER TABLE events ADD PRIMARY KEY (seq, session_id)",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a reordered primary key was accepted"));
    assert_eq!(err.code(), "schema-mismatch");
    let text = err.to_string();
    assert!(text.contains("primary key (seq, session_id)") && text.contains("(session_id, seq)"), "{text}");
}

/// A unique index another program added refused an append, which was
/// reported as a racing writer (`conflict`, "expects seq 8 next, the batch
/// starts at 8"), and a CHECK's refusal as an unknown outcome (`io`). Both
/// rolled back: a refusal that wrote nothing, and the store writes on.
#[test]
fn a_constraint_the_schema_does_not_have_is_a_refusal_that_wrote_nothing() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store_of_ticks(2);
    let mut client = schema.client();
    client
        .batch_execute("CREATE UNIQUE INDEX one_per_data ON events (session_id, data)")
        .unwrap_or_else(|e| panic!("{e}"));
    // Seq 2 is free; its data is seq 0's.
    let twin = tick(2, "a-0");
    let err = store
        .append("s", std::slice::from_ref(&twin))
        .expect_err("the index refuses a second row with the same data");
    assert_eq!((err.code(), err.wrote_nothing()), ("schema-mismatch", true), "{err}");
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert_eq!(store.load("s").map(|s| s.events.len()).unwrap_or_default(), 2);
    store.append("s", &ticks(2, 1, "b")).unwrap_or_else(|e| panic!("the store writes on: {e}"));

    client
        .batch_execute("ALTER TABLE events ADD CONSTRAINT below_5 CHECK (seq < 5)")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = store.append("s", &ticks(3, 3, "c")).expect_err("the CHECK refuses seq 5");
    assert_eq!((err.code(), err.wrote_nothing()), ("schema-mismatch", true), "{err}");
    assert_eq!(store.load("s").map(|s| s.events.len()).unwrap_or_default(), 3, "none of the batch");
}

/// `url()` with `options=-c<setting>` added (`%3D` for its `=`).
fn url_with_setting(setting: &str) -> String {
    let url = url();
    format!("{url}{}options=-c{setting}", if url.contains('?') { "&" } else { "?" })
}

/// A key column under a nondeterministic collation (the twin of SQLite's
/// `COLLATE NOCASE`) opened as the store's: session `case` read `Case`'s
/// rows and `delete("case")` removed them. A column whose collation is not
/// the one the store's DDL gives it is `schema-mismatch`, nothing written;
/// every text column of every table is checked.
#[test]
fn a_column_of_another_collation_is_refused_and_nothing_is_written() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    store.create(&SessionHeader::new("Case", 1)).unwrap_or_else(|e| panic!("{e}"));
    store.append("Case", &ticks(0, 2, "c")).unwrap_or_else(|e| panic!("{e}"));
    drop(store);
    let mut client = schema.client();
    client
        .batch_execute(
            "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false); \
             ALTER TABLE events ALTER session_id TYPE text COLLATE ci",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a nondeterministic key column was accepted"));
    assert_eq!(err.code(), "schema-mismatch");
    let text = err.to_string();
    assert!(text.contains(&format!("session_id text COLLATE {}.ci NOT NULL", schema.name)), "{text}");
    assert!(text.contains("session_id text NOT NULL"), "{text}");
    let rows: i64 = client
        .query_one("SELECT count(*) FROM events WHERE session_id::bytea = 'Case'::bytea", &[])
        .and_then(|r| r.try_get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows, 2, "the refused open changed the rows");

    // Spelling out the default collation is the column the DDL makes.
    client
        .batch_execute("ALTER TABLE events ALTER session_id TYPE text COLLATE \"default\"")
        .unwrap_or_else(|e| panic!("{e}"));
    let store = schema.store();
    assert_eq!(code(store.load("case")), Err("not-found"));
    assert_eq!(store.load("Case").map(|s| s.events).unwrap_or_else(|e| panic!("{e}")), ticks(0, 2, "c"));
    drop(store);

    // Every text column, under a deterministic collation too.
    let text_columns = [
        ("sessions", "id"),
        ("sessions", "cwd"),
        ("sessions", "parent_session"),
        ("events", "session_id"),
        ("events", "type"),
        ("events", "data"),
        ("events", "source_event_seqs"),
        ("events", "surface_op"),
        ("holds", "session_id"),
        ("holds", "holder"),
        ("search", "session_id"),
        ("checkpoints", "session_id"),
        ("checkpoints", "checkpoint"),
    ];
    for (table, column) in text_columns {
        client
            .batch_execute(&format!("ALTER TABLE {table} ALTER {column} TYPE text COLLATE \"C\""))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
        let err = err.unwrap_or_else(|| panic!("{table}.{column} COLLATE \"C\" was accepted"));
        assert_eq!(err.code(), "schema-mismatch", "{table}.{column}: {err}");
        assert!(err.to_string().contains(&format!("{column} text COLLATE pg_catalog.\"C\"")), "{err}");
        client
            .batch_execute(&format!("ALTER TABLE {table} ALTER {column} TYPE text COLLATE \"default\""))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    PgStore::connect_with(&url(), schema.options()).unwrap_or_else(|e| panic!("restored: {e}"));
}

/// A `search_path` naming `pg_temp` gave a store in the session's
/// temporary schema, dropped with every event when the connection closed,
/// while every write reported success. A temporary schema, however it is
/// named, is refused on open, saying why.
#[test]
fn a_temporary_schema_is_refused_on_open() {
    if crate::common::admin().is_none() {
        return;
    }
    for path in ["pg_temp", "PG_TEMP%2Cpublic", "%22pg_temp%22"] {
        let err =
            PgStore::connect_with(&url_with_setting(&format!("search_path%3D{path}")), PgOptions::default())
                .map(|s| s.schema().to_owned())
                .err();
        let err = err.unwrap_or_else(|| panic!("search_path={path} opened a store"));
        assert_eq!(err.code(), "io", "{err}");
        let chain = error_chain(&err);
        assert!(
            chain.contains("temporary schema") && chain.contains("when the connection closes"),
            "{chain}"
        );
    }
    for name in ["pg_temp", "pg_temp_1", "pg_toast_temp_1"] {
        let options = PgOptions { schema: Some(name.to_owned()), ..PgOptions::default() };
        let err = PgStore::connect_with(&url(), options).map(drop).err();
        let err = err.unwrap_or_else(|| panic!("schema {name} opened a store"));
        assert_eq!(err.code(), "io", "{err}");
        assert!(error_chain(&err).contains("temporary schema"), "{err}");
    }
}

/// The schema version comment is read as the store writes it: a number
/// spelled otherwise, or space around it, is not this build's version.
#[test]
fn the_version_comment_is_read_exactly() {
    let Some(schema) = TestSchema::new() else { return };
    drop(schema.store());
    let mut client = schema.client();
    for comment in ["03", "3 ", " 3", "+3", "3\n", "3.0"] {
        client
            .execute(&format!("COMMENT ON TABLE sessions IS 'palimpsest schema_version {comment}'"), &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let err = PgStore::connect_with(&url(), schema.options()).map(drop).err();
        let err = err.unwrap_or_else(|| panic!("version comment {comment:?} was accepted"));
        assert_eq!(err.code(), "schema-mismatch", "{comment:?}: {err}");
    }
    client
        .batch_execute(&format!("COMMENT ON TABLE sessions IS 'palimpsest schema_version {SCHEMA_VERSION}'"))
        .unwrap_or_else(|e| panic!("{e}"));
    PgStore::connect_with(&url(), schema.options()).unwrap_or_else(|e| panic!("as written: {e}"));
}

/// With a `lock_timeout` of 1 ms set for the session (as a role setting
/// does), 19 of 20 first users of a new schema failed `locked` waiting for
/// the one initialising it: the initialising transaction waits under the
/// store's own `lock_timeout`, as its other transactions do.
#[test]
fn initialising_waits_under_the_stores_own_lock_timeout() {
    let Some(schema) = TestSchema::new() else { return };
    let url = url_with_setting("lock_timeout%3D1");
    let barrier = Arc::new(Barrier::new(20));
    let handles: Vec<_> = (0..20)
        .map(|_| {
            let (barrier, options, url) = (barrier.clone(), schema.options(), url.clone());
            std::thread::spawn(move || {
                barrier.wait();
                PgStore::connect_with(&url, options).map(drop).map_err(|e| e.to_string())
            })
        })
        .collect();
    let results: Vec<_> =
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| panic!("thread panicked"))).collect();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// The messages for a connection without a schema and for a reader that
/// found no store name no library option: the command line shows them too.
#[test]
fn schema_messages_name_no_library_option() {
    let Some(schema) = TestSchema::new() else { return };
    let err =
        PgStore::connect_with(&url_with_setting("search_path%3D"), PgOptions::default()).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("an empty search_path opened a store"));
    let chain = error_chain(&err);
    assert!(chain.contains("search_path") && !chain.contains("PgOptions"), "{chain}");
    assert!(chain.contains("options=-csearch_path"), "{chain}");
    let reader = PgOptions { create_missing: false, ..schema.options() };
    let err = PgStore::connect_with(&url(), reader).map(drop).err();
    let err = err.unwrap_or_else(|| panic!("a reader opened an empty schema"));
    let chain = error_chain(&err);
    assert!(chain.contains("holds no Palimpsest store") && !chain.contains("create_missing"), "{chain}");
}

/// A role's or database's `statement_timeout` ending a long read is said
/// as such, with what to do: the error names the setting and the URL
/// option that lifts it for the store's connection.
#[test]
fn a_statement_timeout_that_ends_a_read_says_how_to_lift_it() {
    let Some(schema) = TestSchema::new() else { return };
    drop(schema.store_of_ticks(100_000));
    let sep = if url().contains('?') { '&' } else { '?' };
    let short = format!("{}{sep}options=-cstatement_timeout%3D1", url());
    let err = PgStore::connect_with(&short, schema.options())
        .and_then(|store| store.load("s"))
        .map(|s| s.events.len())
        .expect_err("an open and a 100,000-event load within 1 ms each");
    assert_eq!(err.code(), "io", "{err}");
    assert!(err.to_string().contains("statement_timeout ended it"), "{err}");
    assert!(err.to_string().contains("options=-cstatement_timeout%3D0"), "{err}");
}
