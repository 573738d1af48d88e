//! Checks of a store as a whole, beyond what loading any one session sees:
//! SQLite's page-level integrity, events that belong to no session, and
//! sessions whose seqs do not run 0, 1, 2, ... without a gap.
//!
//! Loading a session reads its header row and its own events only, so an
//! event row whose session row is gone (a foreign `-wal` replaced the
//! `sessions` table's pages, a hand edit, a bug) is never seen by it, and a
//! store holding such rows can look valid and empty. These checks find
//! them; `palimpsest validate` of a SQLite store runs them and reports each
//! finding as a violation with its code.

use crate::codec;

/// `store-integrity`: SQLite's `PRAGMA quick_check` found damaged pages or
/// B-trees (a foreign or mismatched `-wal`, a damaged file).
pub const STORE_INTEGRITY: &str = "store-integrity";
/// `store-orphan-events`: event rows whose session has no `sessions` row.
pub const STORE_ORPHAN_EVENTS: &str = "store-orphan-events";
/// `store-seq-gap`: a session's events do not start at seq 0 or skip seqs.
pub const STORE_SEQ_GAP: &str = "store-seq-gap";

/// How many `quick_check` messages a [`STORE_INTEGRITY`] finding quotes.
const INTEGRITY_LINES: usize = 10;

/// One problem of a store as a whole, found by
/// [`SqliteStore::check_store`](crate::SqliteStore::check_store).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreViolation {
    /// Stable code: [`STORE_INTEGRITY`], [`STORE_ORPHAN_EVENTS`] or
    /// [`STORE_SEQ_GAP`].
    pub code: &'static str,
    /// The session concerned, where there is one.
    pub session_id: Option<String>,
    /// What was found, for people.
    pub message: String,
}

impl StoreViolation {
    fn new(code: &'static str, session_id: Option<String>, message: String) -> StoreViolation {
        StoreViolation { code, session_id, message }
    }
}

/// Integrity first (a damaged B-tree makes the other answers meaningless),
/// then orphans, then gaps; each sorted by session id.
pub(crate) fn check(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<Vec<StoreViolation>> {
    let mut found = Vec::new();

    let mut stmt = tx.prepare(&format!("PRAGMA quick_check({INTEGRITY_LINES})"))?;
    let lines: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    if lines.iter().any(|l| l != "ok") {
        found.push(StoreViolation::new(
            STORE_INTEGRITY,
            None,
            format!("SQLite's quick_check reports damage: {}", lines.join("; ")),
        ));
        // Reading on would fail or mislead: the tables' pages are not sound.
        return Ok(found);
    }

    // One scan of the events for both: per session id, its rows and seqs,
    // and whether a sessions row names it.
    let mut stmt = tx.prepare(
        "SELECT session_id, count(*), min(seq), max(seq), session_id IN (SELECT id FROM sessions) \
         FROM events GROUP BY session_id ORDER BY session_id",
    )?;
    let groups = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, bool>(4)?,
        ))
    })?;
    let mut gaps = Vec::new();
    for group in groups {
        let (id, count, min, max, has_session) = group?;
        if !has_session {
            found.push(StoreViolation::new(
                STORE_ORPHAN_EVENTS,
                Some(id.clone()),
                format!(
                    "{count} event rows (seqs {} to {}) belong to session {id:?}, which has no sessions row: \
                     no command sees them",
                    codec::from_sql_int(min),
                    codec::from_sql_int(max)
                ),
            ));
            continue;
        }
        if min == 0 && max == count - 1 {
            continue;
        }
        let (min, max) = (codec::from_sql_int(min), codec::from_sql_int(max));
        let detail = if min != 0 {
            format!("its first stored seq is {min}, not 0")
        } else {
            // (session_id, seq) is the primary key: seqs are distinct, so
            // max + 1 - count of them are missing.
            format!("{} seqs between 0 and {max} are missing", i128::from(max) + 1 - i128::from(count))
        };
        gaps.push(StoreViolation::new(
            STORE_SEQ_GAP,
            Some(id.clone()),
            format!("session {id:?} holds {count} events with seqs {min} to {max}: {detail}"),
        ));
    }
    // Orphans first, then gaps, each in session id order.
    found.extend(gaps);
    Ok(found)
}
