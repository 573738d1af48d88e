//! Rows edited behind the store's back are refused on load with `corrupt`,
//! naming the session, the seq and the contract code, as the same edit to a
//! JSONL line would be.

use std::path::Path;

use palimpsest_core_session::jsonl::to_bytes;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_sqlite::SqliteStore;
use rusqlite::Connection;

use crate::common::{fixtures, parse, temp_db};

/// A store holding the compaction fixture (session id from its header).
fn store_with_fixture(path: &Path) -> String {
    let (_, bytes) =
        fixtures().into_iter().find(|(n, _)| n == "compaction-and-prune.jsonl").expect("the worked example");
    let (header, events) = parse(&bytes);
    let store = SqliteStore::open(path).expect("open");
    store.create_with_events(&header, &events).expect("import");
    header.id
}

/// Runs `sql` (with `?1` = the session id) on the closed store, reopens it
/// and returns the load error.
fn tampered(sql: &str) -> (String, StoreError) {
    let (dir, path) = temp_db();
    let id = store_with_fixture(&path);
    let conn = Connection::open(&path).expect("raw open");
    let changed = conn.execute(sql, [&id]).expect("tamper");
    assert_eq!(changed, 1, "{sql} changed one row");
    drop(conn);
    let store = SqliteStore::open(&path).expect("the file itself is fine");
    let err = store.load(&id).expect_err("a tampered row is refused");
    drop(dir);
    (id, err)
}

/// Asserts `err` is `corrupt` at `seq` of `id` with contract code `code`.
fn assert_corrupt_at(id: &str, err: &StoreError, seq: u64, contract: &str) {
    assert_eq!(err.code(), "corrupt", "{err}");
    assert_eq!(err.contract_code(), Some(contract), "{err}");
    let StoreError::Corrupt { location, cause: Some(cause), .. } = err else {
        panic!("expected corrupt with a cause, got {err}");
    };
    assert!(location.ends_with(&format!("events row (session {id:?}, seq {seq})")), "{location}");
    // A row has no line: the location names it (no line number is made up).
    assert_eq!(cause.line(), None, "{cause}");
}

#[test]
fn data_that_is_not_json_is_event_malformed() {
    let (id, err) = tampered("UPDATE events SET data = '{\"turn\":' WHERE session_id = ?1 AND seq = 0");
    assert_corrupt_at(&id, &err, 0, "event-malformed");
}

#[test]
fn a_type_that_does_not_match_its_data_is_event_malformed() {
    let (id, err) = tampered("UPDATE events SET type = 'tool/call' WHERE session_id = ?1 AND seq = 0");
    assert_corrupt_at(&id, &err, 0, "event-malformed");
}

#[test]
fn a_surface_event_that_lost_its_surface_op_is_surface_op_missing() {
    let (id, err) = tampered(
        "UPDATE events SET surface_op = NULL WHERE session_id = ?1 AND seq = \
         (SELECT min(seq) FROM events WHERE session_id = ?1 AND type = 'user/message')",
    );
    let seq = match &err {
        StoreError::Corrupt { cause: Some(c), .. } => c.seq().expect("a seq"),
        other => panic!("{other}"),
    };
    assert_corrupt_at(&id, &err, seq, "surface-op-missing");
}

#[test]
fn a_json_null_where_the_column_should_be_null_is_event_malformed() {
    let (id, err) = tampered(
        "UPDATE events SET source_event_seqs = 'null' WHERE session_id = ?1 AND seq = \
         (SELECT min(seq) FROM events WHERE session_id = ?1 AND type = 'user/message')",
    );
    assert_eq!(err.contract_code(), Some("event-malformed"), "{err}");
    assert!(err.to_string().contains(&format!("{id:?}")), "{err}");
}

#[test]
fn provenance_on_a_log_only_event_is_source_seqs_forbidden() {
    // seq 2 is a step/start.
    let (id, err) = tampered("UPDATE events SET source_event_seqs = '[0]' WHERE session_id = ?1 AND seq = 2");
    assert_corrupt_at(&id, &err, 2, "source-seqs-forbidden");
}

#[test]
fn a_malformed_surface_op_is_surface_op_malformed() {
    let (id, err) = tampered(
        "UPDATE events SET surface_op = '\"prepend\"' WHERE session_id = ?1 AND seq = \
         (SELECT min(seq) FROM events WHERE session_id = ?1 AND type = 'user/message')",
    );
    assert_eq!(err.contract_code(), Some("surface-op-malformed"), "{err}");
    assert!(err.to_string().contains(&format!("{id:?}")));
}

#[test]
fn a_deleted_row_is_a_gap() {
    let (id, err) = tampered("DELETE FROM events WHERE session_id = ?1 AND seq = 3");
    assert_corrupt_at(&id, &err, 3, "seq-not-contiguous");
    assert!(err.to_string().contains("expected seq 3, found 4"), "{err}");
}

#[test]
fn json_smuggled_into_another_key_is_event_malformed() {
    // Each column must hold exactly one JSON value: `data` followed by
    // `,"x":1` is refused, never read as more keys of the event.
    let (id, err) = tampered(
        "UPDATE events SET data = data || ',\"sourceEventSeqs\":[0]' WHERE session_id = ?1 AND seq = \
         (SELECT min(seq) FROM events WHERE session_id = ?1 AND type = 'user/message' AND seq > 0)",
    );
    assert_eq!(err.contract_code(), Some("event-malformed"), "{err}");
    assert!(err.to_string().contains("`data` is not JSON: trailing characters"), "{err}");
    assert!(err.to_string().contains(&format!("{id:?}")));
}

#[test]
fn text_that_is_not_utf8_is_log_corrupt() {
    let (id, err) =
        tampered("UPDATE events SET type = CAST(x'ff74' AS TEXT) WHERE session_id = ?1 AND seq = 3");
    assert_corrupt_at(&id, &err, 3, "log-corrupt");
}

#[test]
fn a_header_column_that_is_not_utf8_is_header_malformed() {
    let (id, err) = tampered("UPDATE sessions SET cwd = CAST(x'c328' AS TEXT) WHERE id = ?1");
    assert_eq!(err.code(), "corrupt");
    assert_eq!(err.contract_code(), Some("header-malformed"), "{err}");
    assert!(err.to_string().contains(&format!("sessions row {id:?}")), "{err}");
}

#[test]
fn an_untouched_copy_loads_and_equals_the_fixture() {
    // The control for the tests above: the same steps without the edit.
    let (_dir, path) = temp_db();
    let id = store_with_fixture(&path);
    let (_, bytes) =
        fixtures().into_iter().find(|(n, _)| n == "compaction-and-prune.jsonl").expect("the worked example");
    let loaded = SqliteStore::open(&path).and_then(|s| s.load(&id)).expect("load");
    assert_eq!(to_bytes(&loaded.header, &loaded.events), bytes);
}

/// Appending must not continue a log that `load` refuses: a seq edited to a
/// negative or huge value is `corrupt` on append too, and nothing is written.
#[test]
fn an_append_after_a_seq_was_edited_is_refused_and_writes_nothing() {
    for edit in ["-1", "-9223372036854775808", "9223372036854775807", "500"] {
        let (dir, path) = temp_db();
        let id = store_with_fixture(&path);
        let conn = Connection::open(&path).expect("raw open");
        let sql = format!(
            "UPDATE events SET seq = {edit} WHERE session_id = ?1 AND seq = (SELECT max(seq) FROM events WHERE session_id = ?1)"
        );
        assert_eq!(conn.execute(&sql, [&id]).expect("tamper"), 1);
        let rows_before: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).expect("the file itself is fine");
        let next =
            palimpsest_core_session::Event::from_json(r#"{"seq":27,"time":0,"type":"x/y","data":null}"#)
                .unwrap();
        match store.append(&id, &[next]) {
            // A seq edited upwards (500) makes the stored length 501: the
            // append of seq 27 is a conflict, not a write.
            Err(e) if edit == "500" => assert_eq!(e.code(), "conflict", "{edit}: {e}"),
            Err(e) => assert_eq!(e.code(), "corrupt", "{edit}: {e}"),
            Ok(()) => panic!("{edit}: an append continued a tampered log"),
        }
        let conn = Connection::open(&path).expect("raw open");
        let rows_after: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
        assert_eq!(rows_after, rows_before, "{edit}: nothing was written");
        // And the store is not poisoned: a refusal is not a write failure.
        let other = palimpsest_core_session::SessionHeader::new("other", 0);
        store.create(&other).expect("the store still takes writes");
        drop(dir);
    }
}

/// A row whose `data` (or `surface_op`) names a key twice, written behind
/// the store's back, is `event-malformed` on load, as the same JSONL line
/// would be: for every row of the fixture, the key first or last in its
/// object, with the same value or another, at the top or nested.
#[test]
fn a_key_named_twice_in_any_row_is_event_malformed() {
    let (_dir, path) = temp_db();
    let id = store_with_fixture(&path);
    let conn = Connection::open(&path).expect("raw open");
    let rows: Vec<(i64, String, Option<String>)> = {
        let mut stmt = conn
            .prepare("SELECT seq, data, surface_op FROM events WHERE session_id = ?1 ORDER BY seq")
            .unwrap();
        let rows = stmt.query_map([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
        rows.map(|r| r.expect("a row")).collect()
    };
    // Names the first key of the object that starts at `at` again, first
    // or last, with its own value or another.
    let twice = |json: &str, at: usize, first: bool, same: bool| -> Option<String> {
        let len = object_len(&json[at..])?;
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&json[at..at + len]).ok()?;
        let (key, value) = object.iter().next()?;
        let value = if same { value.clone() } else { serde_json::json!(["another"]) };
        let member = format!("{}:{value}", serde_json::Value::from(key.as_str()));
        let mut out = json.to_owned();
        if first {
            out.insert_str(at + 1, &format!("{member},"));
        } else {
            out.insert_str(at + len - 1, &format!(",{member}"));
        }
        Some(out)
    };
    let mut cases = 0;
    for (seq, data, op) in &rows {
        // The top-level object, and the deepest one opening last.
        let nested = data.rfind('{').unwrap_or(0);
        for (at, first, same) in
            [(0, true, true), (0, false, false), (nested, false, true), (nested, true, false)]
        {
            let Some(bad) = twice(data, at, first, same) else { continue };
            assert_refused_then_restored(&conn, &path, &id, *seq, "data", &bad, data);
            cases += 1;
        }
        if let Some(op) = op.as_deref().filter(|op| op.starts_with('{')) {
            let bad = twice(op, 0, false, false).expect("a replace object");
            assert_refused_then_restored(&conn, &path, &id, *seq, "surface_op", &bad, op);
            cases += 1;
        }
    }
    assert!(cases > 60, "{cases} cases");
}

/// The length of the JSON value at the start of `json`, if it is one.
fn object_len(json: &str) -> Option<usize> {
    let mut stream = serde_json::Deserializer::from_str(json).into_iter::<serde_json::Value>();
    stream.next()?.ok()?;
    Some(stream.byte_offset())
}

/// Sets `column` of row `seq` to `bad`, checks the load refuses that row as
/// `event-malformed`, then puts `good` back and checks the load succeeds.
fn assert_refused_then_restored(
    conn: &Connection,
    path: &Path,
    id: &str,
    seq: i64,
    column: &str,
    bad: &str,
    good: &str,
) {
    let sql = format!("UPDATE events SET {column} = ?1 WHERE session_id = ?2 AND seq = ?3");
    assert_eq!(conn.execute(&sql, rusqlite::params![bad, id, seq]).expect("tamper"), 1);
    let err = SqliteStore::open(path).and_then(|s| s.load(id)).map(drop).expect_err(bad);
    assert_corrupt_at(id, &err, seq as u64, "event-malformed");
    assert_eq!(conn.execute(&sql, rusqlite::params![good, id, seq]).expect("restore"), 1);
    SqliteStore::open(path).and_then(|s| s.load(id)).unwrap_or_else(|e| panic!("restored row {seq}: {e}"));
}

/// A summary reads three rows (the last event, the last turn bracket, the
/// first prompt): a tampered row elsewhere is left to a load to find, and
/// a tampered row among those three is refused as a load refuses it.
#[test]
fn a_summary_reads_only_its_rows_and_refuses_them_as_a_load_does() {
    let (dir, path) = temp_db();
    let id = store_with_fixture(&path);
    let store = SqliteStore::open(&path).expect("open");
    let whole = store.load(&id).expect("load");
    let expected = palimpsest_persistence::SessionSummary::of(whole.header, &whole.events);
    let (prompt, bracket) = (expected.first_prompt.clone(), expected.last_turn.clone());
    let (prompt, bracket) = (prompt.expect("a prompt").seq(), bracket.expect("a bracket").seq());
    drop(store);
    let conn = Connection::open(&path).expect("raw open");
    // A middle row that is none of the three.
    let middle = (prompt + 1..bracket).next().expect("a row between");
    conn.execute(
        "UPDATE events SET data = 'not json' WHERE session_id = ?1 AND seq = ?2",
        rusqlite::params![id, middle],
    )
    .expect("tamper");
    let store = SqliteStore::open(&path).expect("reopen");
    assert!(store.load(&id).is_err(), "a load reads every row");
    assert_eq!(store.summary(&id).expect("the summary does not read it"), expected);
    drop(store);
    conn.execute(
        "UPDATE events SET data = 'not json' WHERE session_id = ?1 AND seq = ?2",
        rusqlite::params![id, bracket],
    )
    .expect("tamper");
    drop(conn);
    let store = SqliteStore::open(&path).expect("reopen");
    let err = store.summary(&id).expect_err("the bracket row is read");
    assert_corrupt_at(&id, &err, bracket, "event-malformed");
    drop(dir);
}

/// `summaries` of a store of many sessions reads them in two halves, the
/// second on a connection of its own: it returns what `list` and `summary`
/// of each return, in order, a session with a tampered row holding its
/// `corrupt` error in both halves.
#[test]
fn summaries_of_many_sessions_in_two_halves_are_each_sessions_summary() {
    use palimpsest_core_session::SessionHeader;
    let (_dir, path) = temp_db();
    let (header, events) = {
        let (_, bytes) = fixtures()
            .into_iter()
            .find(|(n, _)| n == "compaction-and-prune.jsonl")
            .expect("the worked example");
        parse(&bytes)
    };
    let store = SqliteStore::open(&path).expect("open");
    for i in 0..1_200 {
        let h = SessionHeader { id: format!("s{i:04}"), ..header.clone() };
        store.create_with_events(&h, &events[..events.len() - i % 7]).expect("create");
    }
    drop(store);
    let conn = Connection::open(&path).expect("raw open");
    for id in ["s0003", "s1100"] {
        conn.execute("UPDATE events SET data = '{\"turn\":' WHERE session_id = ?1 AND seq = 0", [id])
            .expect("tamper");
        conn.execute(
            "UPDATE events SET data = '{' WHERE session_id = ?1 \
             AND seq = (SELECT max(seq) FROM events WHERE session_id = ?1)",
            [id],
        )
        .expect("tamper");
    }
    drop(conn);
    let store = SqliteStore::open_read_only(&path).expect("reopen");
    let broken = palimpsest_persistence::testkit::summaries_match_each_summary(&store);
    assert_eq!(store.list().expect("list").len(), 1_200);
    assert_eq!(broken, ["s0003", "s1100"], "one in each half");
}

/// Asserts `err` is a constraint's refusal: `schema-mismatch` quoting
/// SQLite's `what`, saying nothing was written.
fn assert_constraint_refusal(err: &StoreError, what: &str) {
    assert_eq!(err.code(), "schema-mismatch", "{err}");
    assert!(err.wrote_nothing(), "{err}");
    assert!(err.to_string().contains(what), "{err}");
    assert!(err.to_string().contains("nothing was written"), "{err}");
    assert_eq!(err.write_outcome(&(3..4)), "the store refused seq 3; nothing was written");
}

/// A constraint SQLite holds a write to refuses it whole: the transaction
/// is rolled back, so the error says nothing was written and the store
/// takes writes on. Here a CHECK put on `events` (rebuilt by another
/// connection) after the store was opened and checked.
#[test]
fn a_constraint_that_refuses_an_append_is_a_refusal_that_wrote_nothing() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    store.create(&palimpsest_core_session::SessionHeader::new("s", 0)).expect("create");
    let tick = |seq: u64| {
        palimpsest_core_session::Event::from_json(&format!(
            r#"{{"seq":{seq},"time":0,"type":"x/y","data":{{"text":"hello"}}}}"#
        ))
        .expect("event")
    };
    store.append("s", &[tick(0), tick(1), tick(2)]).expect("append");

    let conn = Connection::open(&path).expect("raw open");
    let sql: String = conn
        .query_row("SELECT sql FROM sqlite_schema WHERE name = 'events'", [], |r| r.get(0))
        .expect("events sql");
    let rebuilt = sql
        .replace("CREATE TABLE events", "CREATE TABLE e2")
        .replace("PRIMARY KEY (session_id, seq)", "PRIMARY KEY (session_id, seq), CHECK (seq < 3)");
    conn.execute_batch(&format!(
        "{rebuilt}; INSERT INTO e2 SELECT * FROM events; DROP TABLE events; ALTER TABLE e2 RENAME TO events;"
    ))
    .expect("rebuild");

    let err = store.append("s", &[tick(3), tick(4)]).expect_err("the CHECK refuses seq 3");
    assert_constraint_refusal(&err, "CHECK constraint failed");
    let rows: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).expect("count");
    assert_eq!(rows, 3, "nothing was written");
    // Not poisoned: the store goes on writing what the constraint allows.
    store.create(&palimpsest_core_session::SessionHeader::new("other", 0)).expect("the store takes writes");
    assert_eq!(store.load("s").expect("load").events, [tick(0), tick(1), tick(2)]);
}

/// The same with this build's own schema: event rows left without their
/// session (its row deleted behind the store's back) take the keys a new
/// session of that id would write, and its creation is refused whole.
#[test]
fn a_new_session_whose_keys_orphan_rows_hold_is_refused_and_wrote_nothing() {
    let (_dir, path) = temp_db();
    let id = store_with_fixture(&path);
    let conn = Connection::open(&path).expect("raw open");
    assert_eq!(conn.execute("DELETE FROM sessions WHERE id = ?1", [&id]).expect("orphan the rows"), 1);
    let rows: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).expect("count");
    drop(conn);

    let store = SqliteStore::open(&path).expect("open");
    let header = palimpsest_core_session::SessionHeader::new(&id, 0);
    let events = crate::common::ticks(0, 5, "t");
    let err = store.create_with_events(&header, &events).expect_err("the orphans hold seq 0");
    assert_constraint_refusal(&err, "UNIQUE constraint failed: events.session_id, events.seq");
    assert_eq!(store.list().expect("list"), vec![], "the session row was rolled back with the rest");
    store.create(&palimpsest_core_session::SessionHeader::new("other", 0)).expect("the store takes writes");
    drop(store);
    let conn = Connection::open(&path).expect("raw open");
    let after: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).expect("count");
    assert_eq!(after, rows, "no event row was written");
}

#[test]
fn text_that_is_not_utf8_deep_in_a_long_session_is_log_corrupt_at_its_row() {
    // Rows are checked for UTF-8 a batch of ~1,000 at a time: a bad row in
    // the middle of a later batch, and one whose `type` and `data` are each
    // cut inside one character (the batch as a whole stays UTF-8), are each
    // named at their own seq, with the column at fault.
    let edits = [
        ("UPDATE events SET data = CAST(x'7bff7d' AS TEXT) WHERE session_id = 's' AND seq = 2500", "data"),
        (
            "UPDATE events SET type = CAST(CAST(type AS BLOB) || x'c3' AS TEXT), \
             data = CAST(x'a9' || CAST(data AS BLOB) AS TEXT) WHERE session_id = 's' AND seq = 2500",
            "type",
        ),
    ];
    for (sql, column) in edits {
        let (_dir, path) = temp_db();
        crate::common::store_of_ticks(&path, 4000);
        let conn = Connection::open(&path).expect("raw open");
        assert_eq!(conn.execute(sql, []).expect("tamper"), 1, "{sql}");
        drop(conn);
        let err = SqliteStore::open(&path).and_then(|s| s.load("s")).expect_err("refused");
        assert_corrupt_at("s", &err, 2500, "log-corrupt");
        assert!(err.to_string().contains(&format!("column `{column}` is not UTF-8")), "{err}");
    }
}
