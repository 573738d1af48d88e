//! Every refusal on open, each proven with a real file made the wrong way.
//! A refused file is never modified.

use std::path::Path;

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_sqlite::{SqliteStore, APPLICATION_ID, SCHEMA_SQL, SCHEMA_VERSION};
use rusqlite::Connection;

use crate::common::{store_of_ticks, temp_db, ticks};

/// The schema of version 1: the events table without the two surface columns.
const SCHEMA_V1: &str = "\
CREATE TABLE sessions (
    id TEXT NOT NULL PRIMARY KEY, created_at INTEGER NOT NULL,
    cwd TEXT, parent_session TEXT, seed_length INTEGER
) STRICT, WITHOUT ROWID;
CREATE TABLE events (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL,
    type TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;
";

/// Today's table `name`, as [`SCHEMA_SQL`] creates it.
fn table(name: &str) -> &'static str {
    let start = SCHEMA_SQL.find(&format!("CREATE TABLE {name} ")).expect("SCHEMA_SQL creates the table");
    let end = start + SCHEMA_SQL[start..].find(';').expect("a statement ends") + 1;
    &SCHEMA_SQL[start..end]
}

/// The schema of version 3: the tables of today without `holds` and
/// `checkpoints` (both added to version 4).
fn schema_v3() -> String {
    SCHEMA_SQL.replace(table("holds"), "").replace(table("checkpoints"), "")
}

/// The schema of version 2: version 3 without the full-text index.
fn schema_v2() -> String {
    schema_v3().split("CREATE VIRTUAL TABLE").next().unwrap_or_default().to_owned()
}

/// Makes a database at `path` with raw SQL, then the two ids.
fn make(path: &Path, sql: &str, user_version: i64, application_id: i32) {
    let conn = Connection::open(path).expect("raw open");
    conn.execute_batch(sql).expect("schema");
    conn.pragma_update(None, "user_version", user_version).expect("user_version");
    conn.pragma_update(None, "application_id", application_id).expect("application_id");
}

/// Opens `path`, expects a refusal, checks the file was not touched, and
/// returns the error.
fn refused(path: &Path) -> StoreError {
    let before = std::fs::read(path).expect("read file");
    let err = SqliteStore::open(path).expect_err("the file must be refused");
    assert_eq!(std::fs::read(path).expect("read file"), before, "a refused file is left as it was");
    err
}

/// The found/expected pair of a schema mismatch.
fn mismatch(err: &StoreError) -> (&str, &str) {
    match err {
        StoreError::SchemaMismatch { found, expected } => (found, expected),
        other => panic!("expected schema-mismatch, got {other}"),
    }
}

#[test]
fn a_version_1_store_is_refused_naming_both_versions() {
    let (_dir, path) = temp_db();
    make(&path, SCHEMA_V1, 1, APPLICATION_ID);
    let err = refused(&path);
    assert_eq!(err.code(), "schema-mismatch");
    let (found, expected) = mismatch(&err);
    assert_eq!(found, "user_version 1");
    assert_eq!(expected, "user_version 4 (stores of other schema versions are not migrated)");
    assert_eq!(
        err.to_string(),
        "schema-mismatch: found user_version 1, expected user_version 4 \
         (stores of other schema versions are not migrated)"
    );
}

#[test]
fn a_version_2_store_without_the_search_index_is_refused_naming_both_versions() {
    let (_dir, path) = temp_db();
    make(&path, &schema_v2(), 2, APPLICATION_ID);
    let err = refused(&path);
    assert_eq!(
        err.to_string(),
        "schema-mismatch: found user_version 2, expected user_version 4 \
         (stores of other schema versions are not migrated)"
    );
}

#[test]
fn a_version_3_store_without_holds_is_refused_naming_both_versions() {
    let (_dir, path) = temp_db();
    make(&path, &schema_v3(), 3, APPLICATION_ID);
    let err = refused(&path);
    assert_eq!(
        err.to_string(),
        "schema-mismatch: found user_version 3, expected user_version 4 \
         (stores of other schema versions are not migrated)"
    );
    // And today's version number on those tables: the table is missing.
    let (_dir, path) = temp_db();
    make(&path, &schema_v3(), SCHEMA_VERSION, APPLICATION_ID);
    assert!(mismatch(&refused(&path)).1.contains("table holds"));
}

#[test]
fn today_s_version_without_the_checkpoints_table_is_refused_naming_it() {
    let (_dir, path) = temp_db();
    make(&path, &SCHEMA_SQL.replace(table("checkpoints"), ""), SCHEMA_VERSION, APPLICATION_ID);
    let err = refused(&path);
    let (found, expected) = mismatch(&err);
    assert!(!found.contains("table checkpoints"), "{found}");
    assert!(expected.contains("table checkpoints"), "{expected}");
    // A checkpoints table of another shape is refused too.
    let (_dir, path) = temp_db();
    make(
        &path,
        &SCHEMA_SQL.replace("log_len    INTEGER NOT NULL", "log_len    INTEGER"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    let err = refused(&path);
    assert_eq!(err.code(), "schema-mismatch");
    assert!(err.to_string().contains("log_len"), "{err}");
}

#[test]
fn the_right_version_without_the_search_index_or_with_another_one_is_refused() {
    let (_dir, path) = temp_db();
    make(&path, &schema_v2(), SCHEMA_VERSION, APPLICATION_ID);
    assert_eq!(
        mismatch(&refused(&path)),
        (
            "schema objects [table events, table sessions]",
            "schema objects [table checkpoints, table events, table holds, table search, table search_config, table search_content, \
             table search_data, table search_docsize, table search_idx, table sessions]"
        )
    );
    let (_dir, path) = temp_db();
    make(
        &path,
        &SCHEMA_SQL.replace("remove_diacritics 0", "remove_diacritics 2"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    let err = refused(&path);
    let (found, expected) = mismatch(&err);
    assert!(
        found.contains("remove_diacritics 2") && expected.contains("remove_diacritics 0"),
        "{found} / {expected}"
    );
}

#[test]
fn a_newer_store_is_refused_naming_both_versions() {
    let (_dir, path) = temp_db();
    make(&path, SCHEMA_SQL, SCHEMA_VERSION + 1, APPLICATION_ID);
    let err = refused(&path);
    assert_eq!(mismatch(&err).0, "user_version 5");
    assert!(mismatch(&err).1.starts_with(&format!("user_version {SCHEMA_VERSION}")));
}

#[test]
fn a_store_of_this_version_that_was_never_given_its_version_is_refused() {
    let (_dir, path) = temp_db();
    make(&path, SCHEMA_SQL, 0, APPLICATION_ID);
    assert_eq!(mismatch(&refused(&path)).0, "user_version 0");
}

#[test]
fn another_programs_database_is_refused_by_its_application_id() {
    let (_dir, path) = temp_db();
    make(&path, "CREATE TABLE notes (body TEXT)", 7, 0x1234_5678);
    let err = refused(&path);
    assert_eq!(
        mismatch(&err),
        (
            "application_id 0x12345678, holding [table notes]: another program's database",
            "application_id 0x50414C49 (\"PALI\")"
        )
    );
}

#[test]
fn a_database_without_any_ids_but_with_tables_is_foreign() {
    let (_dir, path) = temp_db();
    make(&path, "CREATE TABLE sessions (id TEXT)", 0, 0);
    let err = refused(&path);
    assert_eq!(
        mismatch(&err).0,
        "application_id 0x00000000, holding [table sessions]: another program's database"
    );
}

#[test]
fn the_right_version_with_a_missing_column_is_refused() {
    let (_dir, path) = temp_db();
    // Today's ids on version 1's tables: what a botched bump would leave.
    let search_index = &SCHEMA_SQL[SCHEMA_SQL.find("CREATE VIRTUAL TABLE").unwrap_or(0)..];
    make(
        &path,
        &format!("{SCHEMA_V1}{}\n{}\n{search_index}", table("checkpoints"), table("holds")),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    let err = refused(&path);
    assert_eq!(
        mismatch(&err),
        (
            "table events with columns (session_id, seq, time, type, data)",
            "table events with columns (session_id, seq, time, type, data, source_event_seqs, surface_op)"
        )
    );
}

#[test]
fn a_column_of_the_wrong_type_or_nullability_is_refused() {
    let (_dir, path) = temp_db();
    make(
        &path,
        &SCHEMA_SQL.replace("time              INTEGER NOT NULL", "time TEXT NOT NULL"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    assert_eq!(
        mismatch(&refused(&path)),
        ("column events.time TEXT NOT NULL", "column events.time INTEGER NOT NULL")
    );

    let (_dir, path) = temp_db();
    make(
        &path,
        &SCHEMA_SQL.replace("cwd            TEXT,", "cwd TEXT NOT NULL,"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    assert_eq!(mismatch(&refused(&path)), ("column sessions.cwd TEXT NOT NULL", "column sessions.cwd TEXT"));
}

#[test]
fn a_table_that_is_not_strict_is_refused() {
    let (_dir, path) = temp_db();
    let loose = SCHEMA_SQL.replacen(") STRICT, WITHOUT ROWID;", ") WITHOUT ROWID;", 2);
    make(&path, &loose, SCHEMA_VERSION, APPLICATION_ID);
    assert_eq!(
        mismatch(&refused(&path)),
        ("table events not STRICT, WITHOUT ROWID", "table events STRICT, WITHOUT ROWID")
    );
}

#[test]
fn extra_tables_or_indexes_are_refused() {
    let (_dir, path) = temp_db();
    make(
        &path,
        &format!("{SCHEMA_SQL} CREATE INDEX by_type ON events (type);"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    let tables = "table checkpoints, table events, table holds, table search, table search_config, table search_content, \
                  table search_data, table search_docsize, table search_idx, table sessions";
    assert_eq!(
        mismatch(&refused(&path)),
        (
            format!("schema objects [index by_type, {tables}]").as_str(),
            format!("schema objects [{tables}]").as_str()
        )
    );
}

#[test]
fn a_text_file_is_not_a_database() {
    let (dir, _) = temp_db();
    let path = dir.path().join("session.jsonl");
    std::fs::write(&path, "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}\n")
        .expect("write");
    let err = refused(&path);
    let (found, expected) = mismatch(&err);
    assert!(
        found.ends_with("session.jsonl, which is not a SQLite database (it lacks the SQLite header)"),
        "{found}"
    );
    assert_eq!(
        expected,
        "a Palimpsest SQLite store (application_id 0x50414C49 (\"PALI\"), user_version 4) or an empty file"
    );
    assert!(!SqliteStore::is_sqlite_file(&path));
}

/// A store with enough events to span many pages, closed cleanly (so the
/// WAL is checkpointed into the file and removed).
fn closed_store(path: &Path) -> u64 {
    let store = SqliteStore::open(path).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    for i in 0..20 {
        store.append("s", &ticks(i * 100, 100, &"x".repeat(40))).expect("append");
    }
    drop(store);
    assert!(!path.with_extension("db-wal").exists(), "closing removed the WAL");
    std::fs::metadata(path).expect("db").len()
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).and_then(|f| f.set_len(len)).expect("truncate");
}

fn corrupt_detail(err: StoreError) -> String {
    match err {
        StoreError::Corrupt { detail, cause: None, .. } => detail,
        other => panic!("expected corrupt, got {other}"),
    }
}

#[test]
fn a_file_truncated_mid_page_is_corrupt() {
    let (_dir, path) = temp_db();
    let len = closed_store(&path);
    assert!(len >= 4096 * 8, "the store spans pages ({len} bytes)");
    truncate(&path, len - 4096 * 3 - 1000);
    let detail = corrupt_detail(refused(&path));
    assert_eq!(
        detail,
        format!(
            "truncated mid-page: {} bytes is not a whole number of 4096-byte pages",
            len - 4096 * 3 - 1000
        )
    );
}

#[test]
fn a_file_cut_at_a_page_boundary_is_corrupt() {
    let (_dir, path) = temp_db();
    let len = closed_store(&path);
    truncate(&path, len - 4096 * 2);
    let detail = corrupt_detail(refused(&path));
    assert_eq!(
        detail,
        format!("truncated: the header records {} pages, the file holds {}", len / 4096, len / 4096 - 2)
    );
}

#[test]
fn a_file_cut_inside_its_header_is_corrupt() {
    let (_dir, path) = temp_db();
    closed_store(&path);
    for cut in [50, 10] {
        truncate(&path, cut);
        let detail = corrupt_detail(refused(&path));
        assert_eq!(detail, format!("truncated: {cut} bytes, shorter than the 100-byte SQLite header"));
    }
}

#[test]
fn a_directory_is_an_io_error() {
    let (dir, _) = temp_db();
    let err = SqliteStore::open(dir.path()).expect_err("a directory is no database");
    assert_eq!(err.code(), "io", "{err}");
}

#[test]
fn a_refused_store_can_still_be_opened_once_fixed_by_hand() {
    // Refusal is a decision, not damage: the file stays readable by SQLite.
    let (_dir, path) = temp_db();
    make(&path, SCHEMA_SQL, SCHEMA_VERSION + 1, APPLICATION_ID);
    assert_eq!(refused(&path).code(), "schema-mismatch");
    Connection::open(&path).and_then(|c| c.pragma_update(None, "user_version", SCHEMA_VERSION)).expect("fix");
    let store = SqliteStore::open(&path).expect("now it opens");
    assert_eq!(store.list().expect("list"), vec![]);
}

/// Opens `path` for writing and for reading, expects `schema-mismatch` from
/// both, checks the file was not touched, and returns the writer's error.
fn refused_both(path: &Path) -> StoreError {
    let before = std::fs::read(path).expect("read file");
    let read = SqliteStore::open_read_only(path).expect_err("a reader must refuse the file");
    assert_eq!(read.code(), "schema-mismatch", "{read}");
    let err = refused(path);
    assert_eq!(err.code(), "schema-mismatch", "{err}");
    assert_eq!(err.to_string(), read.to_string(), "reader and writer refuse alike");
    assert_eq!(std::fs::read(path).expect("read file"), before, "a refused file is left as it was");
    err
}

/// [`SCHEMA_SQL`] with `from` (which it must hold once) made `to`.
fn schema_with(from: &str, to: &str) -> String {
    assert_eq!(SCHEMA_SQL.matches(from).count(), 1, "{from:?} is in SCHEMA_SQL once");
    SCHEMA_SQL.replace(from, to)
}

/// A store made with `sql` for today's schema is refused by reader and
/// writer, the found side of the refusal naming `clause` in `events`.
fn events_clause_is_refused(sql: &str, clause: &str) {
    let (_dir, path) = temp_db();
    make(&path, sql, SCHEMA_VERSION, APPLICATION_ID);
    let err = refused_both(&path);
    let (found, expected) = mismatch(&err);
    assert!(found.starts_with("table events `CREATE TABLE events (") && found.contains(clause), "{found}");
    assert!(
        expected.starts_with("table events `CREATE TABLE events (") && !expected.contains(clause),
        "{expected}"
    );
}

const EVENTS_KEY: &str = "PRIMARY KEY (session_id, seq)";

#[test]
fn a_collation_on_a_key_column_is_refused() {
    // With NOCASE, sessions "S" and "s" would share their event rows.
    events_clause_is_refused(
        &schema_with("session_id        TEXT    NOT NULL,", "session_id TEXT NOT NULL COLLATE NOCASE,"),
        "COLLATE NOCASE",
    );
}

#[test]
fn a_check_constraint_is_refused() {
    events_clause_is_refused(&schema_with(EVENTS_KEY, &format!("{EVENTS_KEY}, CHECK (seq < 128)")), "CHECK");
}

#[test]
fn a_foreign_key_is_refused() {
    events_clause_is_refused(
        &schema_with(
            EVENTS_KEY,
            &format!("{EVENTS_KEY}, FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE"),
        ),
        "FOREIGN KEY",
    );
}

#[test]
fn a_descending_key_is_refused() {
    events_clause_is_refused(&schema_with(EVENTS_KEY, "PRIMARY KEY (session_id, seq DESC)"), "seq DESC");
}

#[test]
fn a_default_is_refused() {
    let (_dir, path) = temp_db();
    make(
        &path,
        &schema_with("time              INTEGER NOT NULL,", "time INTEGER NOT NULL DEFAULT 0,"),
        SCHEMA_VERSION,
        APPLICATION_ID,
    );
    assert_eq!(
        mismatch(&refused_both(&path)),
        ("column events.time INTEGER NOT NULL DEFAULT ...", "column events.time INTEGER NOT NULL")
    );
}

/// A store of today's schema whose `sqlite_schema` text of `name` had
/// `from` made `to` behind SQLite's back (`writable_schema`), then closed.
fn rewritten(path: &Path, name: &str, from: &str, to: &str) {
    make(path, SCHEMA_SQL, SCHEMA_VERSION, APPLICATION_ID);
    let conn = Connection::open(path).expect("raw open");
    conn.pragma_update(None, "writable_schema", true).expect("writable_schema");
    let changed = conn
        .execute(
            "UPDATE sqlite_schema SET sql = replace(sql, ?2, ?3) WHERE name = ?1 AND instr(sql, ?2)",
            [name, from, to],
        )
        .expect("rewrite");
    assert_eq!(changed, 1, "{name} holds {from:?}");
}

#[test]
fn the_full_text_index_s_own_tables_are_held_by_name_not_statement() {
    // FTS5 chooses their statements, and another SQLite version may make
    // them otherwise: a store it wrote is still this schema.
    let (_dir, path) = temp_db();
    rewritten(&path, "search_data", "block BLOB", "block BLOB DEFAULT x'00'");
    SqliteStore::open(&path).expect("opens for writing");
    SqliteStore::open_read_only(&path).expect("and for reading");
    // Dropped, or one more of that name: not this schema.
    let (_dir, path) = temp_db();
    make(&path, SCHEMA_SQL, SCHEMA_VERSION, APPLICATION_ID);
    Connection::open(&path).expect("raw open").execute_batch("CREATE TABLE search_more(x);").expect("add");
    assert!(mismatch(&refused_both(&path)).0.contains("search_more"));
}

#[test]
fn a_table_rebuilt_with_a_collation_under_a_populated_store_is_refused() {
    // The outside tester's steps: rebuild `events` as it is but for
    // NOCASE, copy the rows, put it in the old one's place.
    let (_dir, path) = temp_db();
    store_of_ticks(&path, 3);
    let rebuilt = table("events")
        .replace("CREATE TABLE events ", "CREATE TABLE e2 ")
        .replace("session_id        TEXT    NOT NULL,", "session_id TEXT NOT NULL COLLATE NOCASE,");
    let conn = Connection::open(&path).expect("raw open");
    conn.execute_batch(&format!(
        "{rebuilt} INSERT INTO e2 SELECT * FROM events; DROP TABLE events; ALTER TABLE e2 RENAME TO events;"
    ))
    .expect("rebuild");
    drop(conn);
    let err = refused_both(&path);
    assert!(mismatch(&err).0.contains("COLLATE NOCASE"), "{err}");
}

#[test]
fn every_store_this_build_writes_opens_after_vacuum_and_analyze_and_reflowed_whitespace() {
    let (_dir, path) = temp_db();
    store_of_ticks(&path, 50);
    let conn = Connection::open(&path).expect("raw open");
    conn.execute_batch("VACUUM; ANALYZE; INSERT INTO search(search) VALUES ('optimize');").expect("vacuum");
    drop(conn);
    let store = SqliteStore::open(&path).expect("a vacuumed, analyzed store opens");
    assert_eq!(store.load("s").expect("load").events.len(), 50);
    drop(store);
    let reader = SqliteStore::open_read_only(&path).expect("and opens for reading");
    assert_eq!(reader.load("s").expect("load").events.len(), 50);

    // The same statements, spaced and broken otherwise (as an edit of
    // SCHEMA_SQL that only reflows it would leave them).
    let (_dir, path) = temp_db();
    let reflowed = SCHEMA_SQL.split_whitespace().collect::<Vec<_>>().join("  ").replace(";", ";\n\n\t");
    make(&path, &reflowed, SCHEMA_VERSION, APPLICATION_ID);
    SqliteStore::open(&path).expect("whitespace is not the schema");
}
