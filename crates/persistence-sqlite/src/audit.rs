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

    // Both counts come from the tables' pages, without reading the rows.
    let count =
        |table: &str| tx.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get::<_, i64>(0));
    let (total, sessions) = (count("events")?, count("sessions")?);
    // More sessions than the walk may visit: it would give up, scan at once.
    let limit = walk_limit(total);
    if u64::try_from(sessions).is_ok_and(|s| s <= limit) && every_session_whole(tx, total, limit)? {
        return Ok(found);
    }
    found.extend(orphans_and_gaps(tx)?);
    Ok(found)
}

/// How many sessions [`every_session_whole`] may walk for a store of
/// `total` event rows: a walk costs four index seeks a session, the scan
/// of [`orphans_and_gaps`] one step a row, so the walk pays off while
/// sessions hold dozens of events each; past the limit the scan is cheaper.
fn walk_limit(total: i64) -> u64 {
    (u64::try_from(total).unwrap_or(0) / 64).max(1)
}

/// Whether every event row belongs to a session that has a `sessions` row
/// and whose seqs run 0, 1, ..., n - 1 without a gap: proven by index
/// seeks, without reading every row. The walk visits each distinct
/// session id of the events (a seek past the last one), checks that its
/// lowest seq is 0, and adds its highest seq + 1. Seqs of a session are
/// distinct (the primary key), so a session whose lowest seq is 0 holds at
/// most highest + 1 rows, and `total` (every row, each in some walked
/// session) equals the sum exactly when none has a gap. `false` as soon as
/// anything is not whole, or after `most_sessions` sessions: then
/// [`orphans_and_gaps`] finds what is wrong, or that nothing is.
fn every_session_whole(
    tx: &rusqlite::Transaction<'_>,
    total: i64,
    most_sessions: u64,
) -> rusqlite::Result<bool> {
    use rusqlite::OptionalExtension;
    let mut next_id =
        tx.prepare("SELECT session_id FROM events WHERE session_id > ?1 ORDER BY session_id LIMIT 1")?;
    let mut has_row = tx.prepare("SELECT 1 FROM sessions WHERE id = ?1")?;
    let mut lowest = tx.prepare("SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq LIMIT 1")?;
    let mut highest = tx.prepare("SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1")?;
    let mut id: Option<String> = tx
        .query_row("SELECT session_id FROM events ORDER BY session_id LIMIT 1", [], |r| r.get(0))
        .optional()?;
    let (mut walked, mut rows) = (0u64, 0i128);
    while let Some(session) = id {
        walked += 1;
        if walked > most_sessions || !has_row.exists([&session])? {
            return Ok(false);
        }
        let low: i64 = lowest.query_row([&session], |r| r.get(0))?;
        if low != 0 {
            return Ok(false);
        }
        let high: i64 = highest.query_row([&session], |r| r.get(0))?;
        rows += i128::from(high) + 1;
        id = next_id.query_row([&session], |r| r.get(0)).optional()?;
    }
    Ok(rows == i128::from(total))
}

/// Event rows of no session, and sessions whose seqs do not run from 0
/// without a gap, in one scan of every event row: orphans first, then
/// gaps, each in session id order.
fn orphans_and_gaps(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<Vec<StoreViolation>> {
    let mut found = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A store's tables in memory, `sessions` as (id, events, has a
    /// sessions row), then the rows at `(session index, seq)` in `deleted`
    /// removed, then a row of seq -1 added to each session in `below`.
    fn store(
        sessions: &[(String, u8, bool)],
        deleted: &[(usize, u8)],
        below: &[usize],
    ) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().expect("in memory");
        conn.execute_batch(crate::SCHEMA_SQL).expect("schema");
        for (id, events, has_row) in sessions {
            if *has_row {
                conn.execute("INSERT INTO sessions (id, created_at) VALUES (?1, 0)", [id]).expect("session");
            }
            for seq in 0..*events {
                conn.execute(
                    "INSERT INTO events (session_id, seq, time, type, data) VALUES (?1, ?2, 0, 'tick', '{}')",
                    rusqlite::params![id, seq],
                )
                .expect("event");
            }
        }
        for (i, seq) in deleted {
            if let Some((id, _, _)) = sessions.get(i % sessions.len().max(1)) {
                conn.execute(
                    "DELETE FROM events WHERE session_id = ?1 AND seq = ?2",
                    rusqlite::params![id, seq],
                )
                .expect("delete");
            }
        }
        for i in below {
            if let Some((id, _, _)) = sessions.get(i % sessions.len().max(1)) {
                conn.execute(
                    "INSERT OR IGNORE INTO events (session_id, seq, time, type, data) VALUES (?1, -1, 0, 'tick', '{}')",
                    [id],
                )
                .expect("below");
            }
        }
        conn
    }

    fn sessions() -> impl Strategy<Value = Vec<(String, u8, bool)>> {
        // Ids that sort in every order against each other, the empty one too.
        prop::collection::btree_map(
            "|a|b|ab|b\\u{0}|é|A|aa|Z|\\PC{1,3}",
            (0u8..12, prop::bool::weighted(0.85)),
            0..6,
        )
        .prop_map(|m| m.into_iter().map(|(id, (n, has_row))| (id, n, has_row)).collect())
    }

    proptest! {
        /// The walk proves a store whole exactly when the scan finds
        /// nothing wrong in it, and the whole check reports what the scan
        /// does, whichever of the two answered.
        #[test]
        fn the_walk_proves_whole_exactly_the_stores_the_scan_finds_whole(
            sessions in sessions(),
            deleted in prop::collection::vec((0usize..6, 0u8..12), 0..4),
            below in prop::collection::vec(0usize..6, 0..2),
        ) {
            let mut conn = store(&sessions, &deleted, &below);
            let tx = conn.transaction().expect("tx");
            let total: i64 = tx.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).expect("count");
            let scanned = orphans_and_gaps(&tx).expect("scan");
            let walked = every_session_whole(&tx, total, u64::MAX).expect("walk");
            prop_assert_eq!(walked, scanned.is_empty(), "scan found {:?}", scanned);
            prop_assert_eq!(check(&tx).expect("check"), scanned);
        }
    }

    #[test]
    fn the_walk_gives_up_past_its_limit_and_the_scan_answers() {
        let sessions: Vec<(String, u8, bool)> = (0..5).map(|i| (format!("s{i}"), 3, true)).collect();
        let mut conn = store(&sessions, &[], &[]);
        let tx = conn.transaction().expect("tx");
        assert!(every_session_whole(&tx, 15, 5).expect("walk"));
        assert!(!every_session_whole(&tx, 15, 4).expect("walk"), "five sessions, four allowed");
        assert_eq!(check(&tx).expect("check"), vec![]);
        assert_eq!(walk_limit(15), 1);
        assert_eq!(walk_limit(6_400), 100);
    }

    #[test]
    fn a_gap_and_a_missing_row_that_cancel_out_in_count_are_still_found() {
        // "a" misses seq 1 (3 rows, highest 3); its fourth row lives in "b"
        // as an orphan: four rows in all, as many as a whole "a" would hold.
        let sessions = vec![("a".to_owned(), 4, true), ("b".to_owned(), 1, false)];
        let mut conn = store(&sessions, &[(0, 1)], &[]);
        let tx = conn.transaction().expect("tx");
        let codes: Vec<&str> = check(&tx).expect("check").iter().map(|v| v.code).collect();
        assert_eq!(codes, [STORE_ORPHAN_EVENTS, STORE_SEQ_GAP]);
    }

    #[test]
    fn a_store_of_long_sessions_is_walked_and_a_gap_in_it_still_found() {
        let sessions = vec![("a".to_owned(), 200, true), ("b".to_owned(), 100, true)];
        let mut conn = store(&sessions, &[], &[]);
        let tx = conn.transaction().expect("tx");
        assert_eq!(walk_limit(300), 4, "two sessions: walked");
        assert!(every_session_whole(&tx, 300, walk_limit(300)).expect("walk"));
        assert_eq!(check(&tx).expect("check"), vec![]);
        drop(tx);
        let mut conn = store(&sessions, &[(1, 57)], &[]);
        let tx = conn.transaction().expect("tx");
        let found = check(&tx).expect("check");
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].message,
            "session \"b\" holds 99 events with seqs 0 to 99: 1 seqs between 0 and 99 are missing"
        );
    }

    #[test]
    fn a_seq_below_zero_does_not_make_up_for_a_gap() {
        // Stored seqs -1, 0, 2: three rows, highest 2, as many as 0, 1, 2
        // would be. (-1 is how SQL holds seq 2^64 - 1: it sorts first.)
        let mut conn = store(&[("a".to_owned(), 3, true)], &[(0, 1)], &[0]);
        let tx = conn.transaction().expect("tx");
        assert!(!every_session_whole(&tx, 3, u64::MAX).expect("walk"));
        let found = check(&tx).expect("check");
        assert_eq!(found.iter().map(|v| v.code).collect::<Vec<_>>(), [STORE_SEQ_GAP]);
        assert!(
            found[0].message.contains("its first stored seq is 18446744073709551615, not 0"),
            "{}",
            found[0].message
        );
    }
}
