//! One writer per session across the processes of one machine: the
//! `holds` table, a lease with a fencing token per session (the rule is
//! [`palimpsest_persistence::hold`]'s, shared with PostgreSQL).
//!
//! Expiry is by this machine's clock (every writer of a SQLite file runs
//! on the machine that has it), in milliseconds since the Unix epoch; and
//! since every holder is a process of this machine, a hold whose process
//! has ended has ended too, whatever its expiry, so a crashed writer does
//! not keep its session from the next one for the rest of its lease. A
//! hold row is written in the same `BEGIN IMMEDIATE` transaction as the
//! check that grants it, and every append and delete reads it in its own
//! transaction, so a store whose hold was taken over is refused before it
//! writes anything.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palimpsest_persistence::hold::HoldRecord;
use rusqlite::{params, OptionalExtension, Transaction};

use crate::codec;

const SELECT_HOLD: &str = "SELECT holder, token, expires_at, pid FROM holds WHERE session_id = ?1";
const UPSERT_HOLD: &str = "INSERT INTO holds (session_id, holder, token, expires_at, pid) \
    VALUES (?1, ?2, ?3, ?4, ?5) \
    ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, token = excluded.token, \
    expires_at = excluded.expires_at, pid = excluded.pid";
const SET_EXPIRY: &str = "UPDATE holds SET expires_at = ?3 WHERE session_id = ?1 AND token = ?2";
const DELETE_HOLD: &str = "DELETE FROM holds WHERE session_id = ?1";

/// Now, in milliseconds since the Unix epoch, by this machine's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` after the epoch as a time.
pub(crate) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `now + ttl`, at least a millisecond later.
pub(crate) fn expiry(now: u64, ttl: Duration) -> u64 {
    now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
}

/// The session's hold row, seen at `now`.
pub(crate) fn read(tx: &Transaction<'_>, session_id: &str, now: u64) -> rusqlite::Result<Option<HoldRecord>> {
    let row = tx
        .prepare_cached(SELECT_HOLD)?
        .query_row([session_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
        })
        .optional()?;
    Ok(row.map(|(holder, token, expires, pid)| {
        let expires = codec::from_sql_int(expires);
        HoldRecord {
            holder,
            token: codec::from_sql_int(token),
            expires_at: time_of(expires),
            live: expires > now && process_may_be_running(pid),
            seconds_left: (expires as f64 - now as f64) / 1000.0,
        }
    }))
}

/// Whether process `pid` of this machine may still be running: `false`
/// only where the answer is sure (Linux's `/proc` is mounted and has no
/// entry for it). Elsewhere a hold lasts until its expiry.
fn process_may_be_running(pid: i64) -> bool {
    if pid == i64::from(std::process::id()) {
        return true;
    }
    let proc = std::path::Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Writes the session's hold row.
pub(crate) fn upsert(
    tx: &Transaction<'_>,
    session_id: &str,
    holder: &str,
    token: u64,
    expires: u64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(UPSERT_HOLD)?.execute(params![
        session_id,
        holder,
        codec::to_sql_int(token),
        codec::to_sql_int(expires),
        i64::from(std::process::id())
    ])?;
    Ok(())
}

/// Sets the expiry of the session's hold, if its token is still `token`.
pub(crate) fn set_expiry(
    tx: &Transaction<'_>,
    session_id: &str,
    token: u64,
    expires: u64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(SET_EXPIRY)?.execute(params![
        session_id,
        codec::to_sql_int(token),
        codec::to_sql_int(expires)
    ])?;
    Ok(())
}

/// Deletes the session's hold row (with the session).
pub(crate) fn delete(tx: &Transaction<'_>, session_id: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(DELETE_HOLD)?.execute([session_id])?;
    Ok(())
}
