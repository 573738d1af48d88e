//! The schema, how an empty PostgreSQL schema gets it, and how an opened
//! one is checked against it (bump-and-reject: no migration).

use palimpsest_persistence::StoreError;
use tokio_postgres::types::Type;

use crate::conn::Client;
use crate::error::pg_err;

/// The schema version this build reads and writes, kept in the comment of
/// the `sessions` table (`palimpsest schema_version 3`), so that every table
/// stays keyed by session id. Version 1 was the schema without the `search`
/// table; version 2 the schema without the `checkpoints` table (one cached
/// checkpoint per session,
/// [`SessionStore::save_checkpoint`](palimpsest_persistence::SessionStore::save_checkpoint)).
///
/// A store of any other version, older or newer, is refused on open with
/// `schema-mismatch` naming both numbers; nothing is migrated while the
/// format is pre-release.
///
/// ```
/// assert_eq!(palimpsest_persistence_postgres::SCHEMA_VERSION, 3);
/// ```
pub const SCHEMA_VERSION: i64 = 3;

/// The comment of the `sessions` table that carries the version.
const VERSION_PREFIX: &str = "palimpsest schema_version ";

/// The tables of the schema, in the order they are checked.
const TABLES: [&str; 5] = ["sessions", "events", "holds", "search", "checkpoints"];

/// The SQL that creates the schema of version [`SCHEMA_VERSION`] in the
/// PostgreSQL schema `schema` (quoted as an identifier), as the store runs
/// it on an empty schema.
///
/// Every table is keyed by session id first, and event text is stored as
/// written: `data`, `source_event_seqs` and `surface_op` hold the JSON text
/// of the event's fields byte for byte (`text`, never `jsonb`, which would
/// reorder keys and drop whitespace). To shard or partition, create these
/// tables yourself with the same columns and keys (hash-partitioned by
/// `session_id`, or distributed by it) and the same comment on `sessions`:
/// the store checks columns (name, type, collation, NOT NULL), keys and the
/// version, not storage. Extra *generated* columns (say `data_json jsonb
/// GENERATED ALWAYS AS (data::jsonb) STORED`) are allowed.
///
/// `search` is the full-text index of [`SessionStore::search`]: one row per
/// message event with text, written in the event's transaction and deleted
/// with its session, keyed like `events`. `terms` is the tsvector of the
/// message's distinct tokens as the reference tokenizer cuts them
/// ([`index_text`](palimpsest_core_session::search::index_text), each
/// clipped to [`MAX_TERM_BYTES`](crate::MAX_TERM_BYTES)), made with
/// `array_to_tsvector` so that no text search parser cuts them otherwise;
/// NULL for a message whose tokens are too many for one tsvector (it is
/// then always a candidate). A GIN index serves `@@`; a partial index finds
/// the NULL rows.
///
/// `checkpoints` holds each session's cached checkpoint: the length of the
/// log it covers and its JSON text. It is derived data, never needed to
/// read the log; a resume uses it only when it matches the stored events.
///
/// [`SessionStore::search`]: palimpsest_persistence::SessionStore::search
///
/// ```
/// let sql = palimpsest_persistence_postgres::schema_sql("palimpsest");
/// assert!(sql.contains("CREATE TABLE \"palimpsest\".events"));
/// assert!(sql.contains("PRIMARY KEY (session_id, seq)"));
/// assert!(sql.contains("'palimpsest schema_version 3'"));
/// ```
pub fn schema_sql(schema: &str) -> String {
    let s = quote_ident(schema);
    format!(
        "\
CREATE TABLE {s}.sessions (
    id             text   NOT NULL,
    created_at     bigint NOT NULL,
    cwd            text,
    parent_session text,
    seed_length    bigint,
    PRIMARY KEY (id)
);
CREATE TABLE {s}.events (
    session_id        text   NOT NULL,
    seq               bigint NOT NULL,
    time              bigint NOT NULL,
    type              text   NOT NULL,
    data              text   NOT NULL,
    source_event_seqs text,
    surface_op        text,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE {s}.holds (
    session_id text                     NOT NULL,
    holder     text                     NOT NULL,
    token      bigint                   NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    PRIMARY KEY (session_id)
);
CREATE TABLE {s}.search (
    session_id text     NOT NULL,
    seq        bigint   NOT NULL,
    terms      tsvector,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE {s}.checkpoints (
    session_id text   NOT NULL,
    log_len    bigint NOT NULL,
    checkpoint text   NOT NULL,
    PRIMARY KEY (session_id)
);
CREATE INDEX search_terms ON {s}.search USING gin (terms);
CREATE INDEX search_unindexed ON {s}.search (session_id, seq) WHERE terms IS NULL;
COMMENT ON TABLE {s}.sessions IS '{VERSION_PREFIX}{SCHEMA_VERSION}';
"
    )
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a SQL string literal, for the one statement that cannot take
/// a parameter (`COPY`): `E'...'` with `\\` and `'` doubled, which reads
/// the same whatever `standard_conforming_strings` is. `text` holds no NUL
/// (session ids are checked before anything is sent).
pub(crate) fn quote_literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The schema version a `sessions` comment states, read exactly as
/// [`schema_sql`] writes it: the prefix, then the number in decimal with
/// no sign, no leading zero and nothing around it. `None` for any other
/// comment (`... 03`, `... 3 `), which this build did not write.
fn read_version(comment: &str) -> Option<i64> {
    let digits = comment.strip_prefix(VERSION_PREFIX)?;
    digits.parse::<i64>().ok().filter(|v| v.to_string() == digits)
}

/// One expected column: name, `format_type` spelling (with no `COLLATE`:
/// the type's default collation, as [`schema_sql`] makes it), NOT NULL.
type Col = (&'static str, &'static str, bool);

fn expected_columns(table: &str) -> (&'static [Col], &'static [&'static str]) {
    const TEXT: &str = "text";
    const BIGINT: &str = "bigint";
    match table {
        "sessions" => (
            &[
                ("id", TEXT, true),
                ("created_at", BIGINT, true),
                ("cwd", TEXT, false),
                ("parent_session", TEXT, false),
                ("seed_length", BIGINT, false),
            ],
            &["id"],
        ),
        "events" => (
            &[
                ("session_id", TEXT, true),
                ("seq", BIGINT, true),
                ("time", BIGINT, true),
                ("type", TEXT, true),
                ("data", TEXT, true),
                ("source_event_seqs", TEXT, false),
                ("surface_op", TEXT, false),
            ],
            &["session_id", "seq"],
        ),
        "search" => (
            &[("session_id", TEXT, true), ("seq", BIGINT, true), ("terms", "tsvector", false)],
            &["session_id", "seq"],
        ),
        "checkpoints" => (
            &[("session_id", TEXT, true), ("log_len", BIGINT, true), ("checkpoint", TEXT, true)],
            &["session_id"],
        ),
        _ => (
            &[
                ("session_id", TEXT, true),
                ("holder", TEXT, true),
                ("token", BIGINT, true),
                ("expires_at", "timestamp with time zone", true),
            ],
            &["session_id"],
        ),
    }
}

fn describe(cols: &[(String, String, bool)]) -> String {
    cols.iter()
        .map(|(n, t, nn)| if *nn { format!("{n} {t} NOT NULL") } else { format!("{n} {t}") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What an opened schema holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DbState {
    /// None of the store's tables: initialise it.
    Empty,
    /// A Palimpsest store of this schema version.
    Current,
}

/// Reads the store's tables in `schema` and says whether they are absent,
/// current, or refused (`schema-mismatch` naming what was found and what
/// this build expects).
pub(crate) fn inspect(client: &mut Client, schema: &str, location: &str) -> Result<DbState, StoreError> {
    let err = |e| pg_err(e, location, "the schema", "reading the schema");
    let rows = client
        .query_typed(
            "SELECT c.oid, c.relname::text, obj_description(c.oid, 'pg_class') \
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname::text = ANY($2) AND c.relkind IN ('r', 'p')",
            &[(&schema, Type::TEXT), (&&TABLES[..], Type::TEXT_ARRAY)],
        )
        .map_err(err)?;
    let found: Vec<(u32, String, Option<String>)> = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(err)?;
    if found.is_empty() {
        return Ok(DbState::Empty);
    }
    let q = quote_ident(schema);
    let expected_version =
        || format!("schema version {SCHEMA_VERSION} (stores of other schema versions are not migrated)");
    let Some((_, _, comment)) = found.iter().find(|t| t.1 == "sessions") else {
        let names: Vec<&str> = found.iter().map(|t| t.1.as_str()).collect();
        return Err(StoreError::SchemaMismatch {
            found: format!("tables [{}] in schema {q} but no sessions table", names.join(", ")),
            expected: format!("a Palimpsest store ({}) or none of its tables", expected_version()),
        });
    };
    match comment.as_deref().and_then(read_version) {
        Some(v) if v == SCHEMA_VERSION => {}
        Some(v) => {
            return Err(StoreError::SchemaMismatch {
                found: format!("schema version {v} (table {q}.sessions)"),
                expected: expected_version(),
            })
        }
        _ => {
            return Err(StoreError::SchemaMismatch {
                found: format!(
                    "table {q}.sessions with comment {:?}, not a schema version as Palimpsest writes it: \
                     another program's table, or an edited comment",
                    comment.as_deref().unwrap_or("")
                ),
                expected: format!("comment '{VERSION_PREFIX}{SCHEMA_VERSION}'"),
            })
        }
    }
    let mut oids = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let Some((oid, _, _)) = found.iter().find(|t| t.1 == table) else {
            return Err(StoreError::SchemaMismatch {
                found: format!("schema version {SCHEMA_VERSION} without table {q}.{table}"),
                expected: format!(
                    "tables {q}.sessions, {q}.events, {q}.holds, {q}.search and {q}.checkpoints"
                ),
            });
        };
        oids.push(*oid);
    }
    // Every table's columns and primary key in two statements, not two per
    // table: opening a store is part of every resume.
    //
    // A column's type is spelled as `format_type` spells it, followed by
    // ` COLLATE <schema>.<name>` when its collation is not its type's
    // default (`typcollation`), which is the one `schema_sql` gives every
    // column, since it names none. A key under another collation changes
    // which ids are equal (a nondeterministic one made `case` read and
    // delete `Case`'s rows) or how they sort, so it is refused; `COLLATE
    // "default"` spelled out is the same column and is not.
    let columns = client
        .query_typed(
            "SELECT a.attrelid, a.attname::text, \
                    format_type(a.atttypid, a.atttypmod) || CASE \
                      WHEN a.attcollation = t.typcollation THEN '' \
                      ELSE ' COLLATE ' || coalesce(quote_ident(cn.nspname) || '.' || quote_ident(co.collname), \
                                                   'oid ' || a.attcollation::text) END, \
                    a.attnotnull \
             FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation \
             LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace \
             WHERE a.attrelid = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' \
             ORDER BY a.attrelid, a.attnum",
            &[(&oids, Type::OID_ARRAY)],
        )
        .map_err(err)?
        .iter()
        .map(|r| Ok((r.try_get::<_, u32>(0)?, (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?))))
        .collect::<Result<Vec<(u32, (String, String, bool))>, tokio_postgres::Error>>()
        .map_err(err)?;
    let keys = client
        .query_typed(
            "SELECT i.indrelid, array_agg(a.attname::text ORDER BY k.ord) \
             FROM pg_catalog.pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = ANY($1) AND i.indisprimary \
             GROUP BY i.indrelid",
            &[(&oids, Type::OID_ARRAY)],
        )
        .map_err(err)?
        .iter()
        .map(|r| Ok((r.try_get::<_, u32>(0)?, r.try_get::<_, Vec<String>>(1)?)))
        .collect::<Result<Vec<(u32, Vec<String>)>, tokio_postgres::Error>>()
        .map_err(err)?;
    for (table, oid) in TABLES.iter().zip(oids) {
        let columns: Vec<(String, String, bool)> =
            columns.iter().filter(|(o, _)| *o == oid).map(|(_, c)| c.clone()).collect();
        let pk = keys.iter().find(|(o, _)| *o == oid).map(|(_, k)| k.clone()).unwrap_or_default();
        check_table(&q, table, &columns, &pk)?;
    }
    Ok(DbState::Current)
}

/// Compares one table's (non-generated) columns and primary key, as read,
/// with the expected ones.
fn check_table(
    q: &str,
    table: &str,
    columns: &[(String, String, bool)],
    pk: &[String],
) -> Result<(), StoreError> {
    let (want, want_pk) = expected_columns(table);
    let want_cols: Vec<(String, String, bool)> =
        want.iter().map(|(n, t, nn)| (n.to_string(), t.to_string(), *nn)).collect();
    if columns != want_cols {
        return Err(StoreError::SchemaMismatch {
            found: format!("table {q}.{table} ({})", describe(columns)),
            expected: format!("table {q}.{table} ({})", describe(&want_cols)),
        });
    }
    if pk != want_pk {
        return Err(StoreError::SchemaMismatch {
            found: format!("table {q}.{table} with primary key ({})", pk.join(", ")),
            expected: format!("table {q}.{table} with primary key ({})", want_pk.join(", ")),
        });
    }
    Ok(())
}

/// Checks the store's tables in `schema` and creates them when none exist,
/// in one transaction under an advisory lock, so that two stores opening
/// the same new schema race safely (the loser finds the winner's tables and
/// checks them). `set_local` is the store's `SET LOCAL` of its timeouts,
/// run first in that transaction as in every other: a waiting opener waits
/// for the initialising one under the store's `lock_timeout`, not the
/// role's or the server's. Returns whether it created them. Without
/// `create_missing`, a schema without them is `io` and nothing is created.
pub(crate) fn open_checked(
    client: &mut Client,
    schema: &str,
    location: &str,
    create_missing: bool,
    set_local: &str,
) -> Result<bool, StoreError> {
    if inspect(client, schema, location)? == DbState::Current {
        return Ok(false);
    }
    if !create_missing {
        // Worded for a library caller and a command line user alike: the
        // command line's reading commands open this way.
        return Err(StoreError::Io {
            context: format!(
                "opening {location}: schema {} holds no Palimpsest store, and this open creates none: \
                 check that it is the schema meant; writing a session there creates the store",
                quote_ident(schema)
            ),
            source: Box::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
        });
    }
    let err = |e| pg_err(e, location, "the schema", "initialising the schema");
    client.batch_execute(&format!("BEGIN; {set_local}")).map_err(err)?;
    let result = (|| {
        client
            .query_typed(
                "SELECT pg_advisory_xact_lock(hashtext('palimpsest-schema:' || $1))",
                &[(&schema, Type::TEXT)],
            )
            .map_err(err)?;
        if inspect(client, schema, location)? == DbState::Current {
            return Ok(false);
        }
        let exists = client
            .query_typed_opt(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                &[(&schema, Type::TEXT)],
            )
            .map_err(err)?
            .is_some();
        if !exists {
            client.batch_execute(&format!("CREATE SCHEMA {}", quote_ident(schema))).map_err(err)?;
        }
        client.batch_execute(&schema_sql(schema)).map_err(err)?;
        Ok(true)
    })();
    match result {
        Ok(created) => {
            client.batch_execute("COMMIT").map_err(err)?;
            if created {
                tracing::debug!(
                    location,
                    schema,
                    schema_version = SCHEMA_VERSION,
                    "initialised the store's tables"
                );
            }
            Ok(created)
        }
        Err(e) => {
            if let Err(rollback) = client.batch_execute("ROLLBACK") {
                tracing::debug!(error = %rollback, "rollback after a failed initialisation");
            }
            Err(e)
        }
    }
}
