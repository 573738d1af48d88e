//! Every refusal on open, each proven with a real file made the wrong way.
//! A refused file is never modified.

use std::path::Path;

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::{SessionStore, StoreError};
use palimpsest_persistence_sqlite::{SqliteStore, APPLICATION_ID, SCHEMA_SQL, SCHEMA_VERSION};
use rusqlite::Connection;

use crate::common::{temp_db, ticks};

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
