//! The schema, how an empty database gets it, and how an opened database is
//! checked against it (bump-and-reject: no migration).

use std::fmt;
use std::sync::OnceLock;

use palimpsest_persistence::StoreError;
use rusqlite::{Connection, TransactionBehavior};

use crate::file::Purpose;
use crate::sqlerr::sql_err;

/// The schema version this build reads and writes, kept in `PRAGMA user_version`.
///
/// Version 1 was the schema without the `source_event_seqs` and `surface_op`
/// columns; version 2 the schema without the `search` full-text index;
/// version 3 the schema without the `holds` table (one writer per
/// session, [`SessionStore::hold`](palimpsest_persistence::SessionStore::hold)) and
/// without the `checkpoints` table (one cached checkpoint per session,
/// [`SessionStore::save_checkpoint`](palimpsest_persistence::SessionStore::save_checkpoint));
/// both were added to version 4 before it was released. A
/// database of any other version, older or newer, is refused with
/// `schema-mismatch`; nothing is migrated while the format is pre-release.
pub const SCHEMA_VERSION: i64 = 4;

/// `PRAGMA application_id` of a Palimpsest store: `"PALI"` in ASCII. A SQLite
/// file with another id belongs to another program and is refused.
pub const APPLICATION_ID: i32 = 0x5041_4C49;

/// The schema of version [`SCHEMA_VERSION`], as executed on an empty database.
///
/// It is also the reference an opened database is held to: the objects
/// SQLite keeps for it in `sqlite_schema` (these five tables and the five
/// tables FTS5 makes for `search`), each with its SQL text (but FTS5's own
/// tables, by name), are what a store must hold, no more and no other, on
/// every open.
pub const SCHEMA_SQL: &str = "\
CREATE TABLE sessions (
    id             TEXT    NOT NULL PRIMARY KEY,
    created_at     INTEGER NOT NULL,
    cwd            TEXT,
    parent_session TEXT,
    seed_length    INTEGER
) STRICT, WITHOUT ROWID;

CREATE TABLE events (
    session_id        TEXT    NOT NULL,
    seq               INTEGER NOT NULL,
    time              INTEGER NOT NULL,
    type              TEXT    NOT NULL,
    data              TEXT    NOT NULL,
    source_event_seqs TEXT,
    surface_op        TEXT,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE checkpoints (
    session_id TEXT    NOT NULL PRIMARY KEY,
    log_len    INTEGER NOT NULL,
    checkpoint TEXT    NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE holds (
    session_id TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    pid        INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE VIRTUAL TABLE search USING fts5(session_id UNINDEXED, seq UNINDEXED, text, tokenize = 'unicode61 remove_diacritics 0', detail = none);
";

/// One column as `PRAGMA table_xinfo` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    name: String,
    decl_type: String,
    not_null: bool,
    /// 1-based position in the primary key, 0 when not part of it.
    pk: i64,
    has_default: bool,
    /// Generated or hidden columns are not part of this schema.
    hidden: bool,
}

impl Column {
    fn expected(name: &str, decl_type: &str, not_null: bool, pk: i64) -> Column {
        Column {
            name: name.to_owned(),
            decl_type: decl_type.to_owned(),
            not_null,
            pk,
            has_default: false,
            hidden: false,
        }
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.decl_type)?;
        if self.not_null {
            f.write_str(" NOT NULL")?;
        }
        if self.pk > 0 {
            write!(f, " (primary key part {})", self.pk)?;
        }
        if self.has_default {
            f.write_str(" DEFAULT ...")?;
        }
        if self.hidden {
            f.write_str(" (hidden or generated)")?;
        }
        Ok(())
    }
}

/// One table: its options and its columns in order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    name: &'static str,
    strict: bool,
    without_rowid: bool,
    columns: Vec<Column>,
}

fn expected_tables() -> [Table; 4] {
    [
        Table {
            name: "checkpoints",
            strict: true,
            without_rowid: true,
            columns: vec![
                Column::expected("session_id", "TEXT", true, 1),
                Column::expected("log_len", "INTEGER", true, 0),
                Column::expected("checkpoint", "TEXT", true, 0),
            ],
        },
        Table {
            name: "holds",
            strict: true,
            without_rowid: true,
            columns: vec![
                Column::expected("session_id", "TEXT", true, 1),
                Column::expected("holder", "TEXT", true, 0),
                Column::expected("token", "INTEGER", true, 0),
                Column::expected("expires_at", "INTEGER", true, 0),
                Column::expected("pid", "INTEGER", true, 0),
            ],
        },
        Table {
            name: "events",
            strict: true,
            without_rowid: true,
            columns: vec![
                Column::expected("session_id", "TEXT", true, 1),
                Column::expected("seq", "INTEGER", true, 2),
                Column::expected("time", "INTEGER", true, 0),
                Column::expected("type", "TEXT", true, 0),
                Column::expected("data", "TEXT", true, 0),
                Column::expected("source_event_seqs", "TEXT", false, 0),
                Column::expected("surface_op", "TEXT", false, 0),
            ],
        },
        Table {
            name: "sessions",
            strict: true,
            without_rowid: true,
            columns: vec![
                Column::expected("id", "TEXT", true, 1),
                Column::expected("created_at", "INTEGER", true, 0),
                Column::expected("cwd", "TEXT", false, 0),
                Column::expected("parent_session", "TEXT", false, 0),
                Column::expected("seed_length", "INTEGER", false, 0),
            ],
        },
    ]
}

/// What an opened database holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DbState {
    /// No schema, no ids: initialise it.
    Empty,
    /// A Palimpsest store of this schema version.
    Current,
}

/// Describes the application id for an error message.
fn describe_application_id(id: i32) -> String {
    let bytes = id.to_be_bytes();
    if bytes.iter().all(|b| b.is_ascii_graphic()) {
        format!("application_id {:#010X} ({:?})", id, String::from_utf8_lossy(&bytes))
    } else {
        format!("application_id {:#010X}", id)
    }
}

/// What a Palimpsest store is, for the `expected` side of a refusal of a
/// file that is not one at all: a writer also takes an empty file.
pub(crate) fn expected_store(purpose: Purpose) -> String {
    let store = format!(
        "a Palimpsest SQLite store ({}, user_version {SCHEMA_VERSION})",
        describe_application_id(APPLICATION_ID)
    );
    match purpose {
        Purpose::Write => format!("{store} or an empty file"),
        Purpose::Read => store,
    }
}

/// One object of `sqlite_schema`: what [`inspect`] compares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SchemaObject {
    /// `table`, `index`, `view` or `trigger`.
    kind: String,
    name: String,
    /// The table it belongs to (its own name for a table).
    table: String,
    /// The statement that made it, as SQLite keeps it, with every run of
    /// whitespace made one space; `None` for an object SQLite made itself.
    sql: Option<String>,
}

impl SchemaObject {
    /// `table events`: how lists of objects name it.
    fn label(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

impl fmt::Display for SchemaObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())?;
        if self.table != self.name {
            write!(f, " on table {}", self.table)?;
        }
        match &self.sql {
            Some(sql) => write!(f, " `{sql}`"),
            None => f.write_str(" (no SQL)"),
        }
    }
}

/// Every object of the database's `sqlite_schema`, sorted, but SQLite's
/// statistics tables (`sqlite_stat1`, ..., made by `ANALYZE`), which only
/// guide the query planner. SQLite's other internal objects are listed:
/// this schema makes none (no `UNIQUE`, no `AUTOINCREMENT`), so one is a
/// difference.
fn schema_objects(conn: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema \
         WHERE name NOT LIKE 'sqlite\\_stat%' ESCAPE '\\'",
    )?;
    let mut objects = stmt
        .query_map([], |r| {
            Ok(SchemaObject {
                kind: r.get(0)?,
                name: r.get(1)?,
                table: r.get(2)?,
                sql: r
                    .get::<_, Option<String>>(3)?
                    .map(|sql| sql.split_whitespace().collect::<Vec<_>>().join(" ")),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    objects.sort();
    Ok(objects)
}

/// The objects [`SCHEMA_SQL`] makes, as this build's SQLite keeps them:
/// read once from an in-memory database it was executed on. So the shadow
/// tables FTS5 makes for `search` are held to exactly the statements it
/// made, as our own tables are.
fn expected_objects() -> Result<&'static [SchemaObject], StoreError> {
    static EXPECTED: OnceLock<Result<Vec<SchemaObject>, String>> = OnceLock::new();
    let made = EXPECTED.get_or_init(|| {
        let made = || -> rusqlite::Result<Vec<SchemaObject>> {
            let conn = Connection::open_in_memory()?;
            conn.execute_batch(SCHEMA_SQL)?;
            schema_objects(&conn)
        };
        made().map_err(|e| e.to_string())
    });
    made.as_deref().map_err(|e| {
        StoreError::io(
            "making the reference schema in memory (does this SQLite have FTS5?)",
            std::io::Error::other(e.clone()),
        )
    })
}

/// Reads the ids and the schema objects, and says whether the database is
/// empty, current, or refused (`schema-mismatch` naming what was found).
/// Run it inside a transaction so the answer is one snapshot.
///
/// A current database holds exactly the objects [`SCHEMA_SQL`] makes (type,
/// name, table), each made by the same statement: SQLite keeps every
/// object's statement in `sqlite_schema` and rebuilds the schema from that
/// text on open, so equal text (up to whitespace) is an equal schema, with
/// every clause that a column list does not show (a collation, a `CHECK`, a
/// foreign key, a key's order, a default, `STRICT`). The columns are
/// compared first only to name the first difference more plainly.
fn inspect(conn: &Connection, location: &str) -> Result<DbState, StoreError> {
    let err = |e| sql_err(e, location, "reading the schema");
    let application_id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).map_err(err)?;
    let user_version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
    let found = schema_objects(conn).map_err(err)?;
    let mut objects: Vec<String> = found.iter().map(SchemaObject::label).collect();
    objects.sort();

    if application_id == 0 && user_version == 0 && objects.is_empty() {
        return Ok(DbState::Empty);
    }
    if application_id != APPLICATION_ID {
        let holding = if objects.is_empty() {
            String::new()
        } else {
            format!(", holding [{}]: another program's database", objects.join(", "))
        };
        return Err(StoreError::SchemaMismatch {
            found: format!("{}{holding}", describe_application_id(application_id)),
            expected: describe_application_id(APPLICATION_ID),
        });
    }
    if user_version != SCHEMA_VERSION {
        return Err(StoreError::SchemaMismatch {
            found: format!("user_version {user_version}"),
            expected: format!(
                "user_version {SCHEMA_VERSION} (stores of other schema versions are not migrated)"
            ),
        });
    }
    let expected = expected_objects()?;
    let mut expected_labels: Vec<String> = expected.iter().map(SchemaObject::label).collect();
    expected_labels.sort();
    if objects != expected_labels {
        return Err(StoreError::SchemaMismatch {
            found: format!("schema objects [{}]", objects.join(", ")),
            expected: format!("schema objects [{}]", expected_labels.join(", ")),
        });
    }
    for table in &expected_tables() {
        check_table(conn, table, location)?;
    }
    // The same objects, sorted alike: compare each whole, but the tables
    // FTS5 makes for `search` (`search_data`, ...), whose statements are
    // FTS5's to choose: another SQLite version may make them otherwise,
    // and a store it wrote is still this schema. `search` itself is held
    // to its statement (its columns, tokenizer and options).
    let fts5_shadow = |o: &SchemaObject| o.kind == "table" && o.name.starts_with("search_");
    if let Some((found, want)) =
        found.iter().zip(expected).find(|(a, b)| a != b && !(fts5_shadow(a) && a.label() == b.label()))
    {
        return Err(StoreError::SchemaMismatch { found: found.to_string(), expected: want.to_string() });
    }
    Ok(DbState::Current)
}

/// Compares one table's options and columns with the expected ones.
fn check_table(conn: &Connection, expected: &Table, location: &str) -> Result<(), StoreError> {
    let err = |e| sql_err(e, location, "reading the schema");
    let (without_rowid, strict): (bool, bool) = conn
        .query_row(
            "SELECT wr, strict FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
            [expected.name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(err)?;
    let mut stmt = conn
        .prepare(
            "SELECT name, type, \"notnull\", pk, dflt_value IS NOT NULL, hidden \
             FROM pragma_table_xinfo(?1) ORDER BY cid",
        )
        .map_err(err)?;
    let columns: Vec<Column> = stmt
        .query_map([expected.name], |r| {
            Ok(Column {
                name: r.get(0)?,
                decl_type: r.get(1)?,
                not_null: r.get(2)?,
                pk: r.get(3)?,
                has_default: r.get(4)?,
                hidden: r.get::<_, i64>(5)? != 0,
            })
        })
        .map_err(err)?
        .collect::<Result<_, _>>()
        .map_err(err)?;

    let names = |cols: &[Column]| cols.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ");
    if columns.len() != expected.columns.len()
        || columns.iter().zip(&expected.columns).any(|(a, b)| a.name != b.name)
    {
        return Err(StoreError::SchemaMismatch {
            found: format!("table {} with columns ({})", expected.name, names(&columns)),
            expected: format!("table {} with columns ({})", expected.name, names(&expected.columns)),
        });
    }
    if let Some((found, want)) = columns.iter().zip(&expected.columns).find(|(a, b)| a != b) {
        return Err(StoreError::SchemaMismatch {
            found: format!("column {}.{found}", expected.name),
            expected: format!("column {}.{want}", expected.name),
        });
    }
    let options = |strict: bool, wr: bool| {
        format!(
            "table {} {}, {}",
            expected.name,
            if strict { "STRICT" } else { "not STRICT" },
            if wr { "WITHOUT ROWID" } else { "with rowid" }
        )
    };
    if (strict, without_rowid) != (expected.strict, expected.without_rowid) {
        return Err(StoreError::SchemaMismatch {
            found: options(strict, without_rowid),
            expected: options(expected.strict, expected.without_rowid),
        });
    }
    Ok(())
}

/// Checks a database opened read-only, changing nothing: a store of this
/// schema version passes; an empty database (no ids, no tables) is refused
/// with `schema-mismatch`, as reading never initialises one; anything else
/// as [`open_checked`] refuses it.
pub(crate) fn check_read_only(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
    let tx = conn.transaction().map_err(|e| sql_err(e, location, "reading the schema"))?;
    match inspect(&tx, location)? {
        DbState::Current => Ok(()),
        DbState::Empty => Err(StoreError::SchemaMismatch {
            found: format!(
                "{location}, a SQLite database with no tables and no ids: there is no store to read, \
                 and reading never initialises one"
            ),
            expected: expected_store(Purpose::Read),
        }),
    }
}

/// Checks an opened database and initialises it when it is empty: schema,
/// `user_version` and `application_id` commit in one transaction. Returns
/// whether it created the schema.
///
/// Two processes opening the same new file race safely: the check is
/// repeated inside the write transaction, so the loser finds the winner's
/// schema and checks it like any other.
pub(crate) fn open_checked(conn: &mut Connection, location: &str) -> Result<bool, StoreError> {
    let state = {
        let tx = conn.transaction().map_err(|e| sql_err(e, location, "reading the schema"))?;
        inspect(&tx, location)?
    };
    if state == DbState::Current {
        return Ok(false);
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| sql_err(e, location, "initialising the schema"))?;
    if inspect(&tx, location)? == DbState::Current {
        return Ok(false);
    }
    let init = |tx: &rusqlite::Transaction<'_>| -> rusqlite::Result<()> {
        tx.execute_batch(SCHEMA_SQL)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        Ok(())
    };
    init(&tx).map_err(|e| sql_err(e, location, "initialising the schema"))?;
    tx.commit().map_err(|e| sql_err(e, location, "committing the new schema"))?;
    tracing::debug!(location, schema_version = SCHEMA_VERSION, "initialised an empty database");
    Ok(true)
}
