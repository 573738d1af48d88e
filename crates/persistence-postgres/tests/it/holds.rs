//! Holds: one writer per session, a second holder refused naming the first,
//! takeover after expiry, and the first holder fenced out in the append's
//! own transaction even when it was only paused.

use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::SessionStore;

use crate::common::{code, tick, ticks, TestSchema};

#[test]
fn a_second_holder_is_refused_naming_the_holder_and_the_expiry() {
    let Some(schema) = TestSchema::new() else { return };
    let (a, b) = (schema.store(), schema.store());
    a.create(&SessionHeader::new("s", 1)).unwrap_or_else(|e| panic!("{e}"));
    let hold = a.hold("s", "worker-a", Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((hold.session_id(), hold.holder()), ("s", "worker-a"));
    let left = hold.expires_at().and_then(|t| t.duration_since(SystemTime::now()).ok()).unwrap_or_default();
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(61), "{left:?}");
    let err = b.hold("s", "worker-b", Duration::from_secs(60)).err().unwrap_or_else(|| panic!("two holders"));
    assert_eq!(err.code(), "locked");
    let text = err.to_string();
    assert!(
        text.contains("\"worker-a\"") && text.contains("until 20") && text.contains("s from now"),
        "{text}"
    );
    // Without the hold, b can neither append nor delete; a can.
    assert_eq!(code(b.append("s", &[tick(0, "b")])), Err("locked"));
    assert_eq!(code(b.delete("s")), Err("locked"));
    a.append("s", &ticks(0, 2, "a")).unwrap_or_else(|e| panic!("{e}"));
    // The holder's own store renews; a renewal keeps the token.
    let again = a.hold("s", "worker-a", Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.token(), hold.token());
    a.release(&again).unwrap_or_else(|e| panic!("{e}"));
    // Released: anyone may write, and b may take it, with a larger token.
    b.append("s", &[tick(2, "b")]).unwrap_or_else(|e| panic!("{e}"));
    let hb = b.hold("s", "worker-b", Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert!(hb.token() > hold.token());
    assert_eq!(code(a.append("s", &[tick(3, "a")])), Err("locked"));
    assert_eq!(code(a.hold("missing", "x", Duration::from_secs(1))), Err("not-found"));
    assert_eq!(a.load("s").map(|s| s.events.len()).unwrap_or_default(), 3);
}

/// The first holder is paused past its expiry (a thread that sleeps, as a
/// stopped process would); a second one takes over and writes; the first
/// wakes and tries to append: refused with `locked`, nothing written.
#[test]
fn a_paused_holder_is_fenced_out_after_a_takeover() {
    let Some(schema) = TestSchema::new() else { return };
    let setup = schema.store();
    setup.create(&SessionHeader::new("s", 1)).unwrap_or_else(|e| panic!("{e}"));
    let a = schema.store();
    let (taken_tx, taken_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<u64>();
    let first = std::thread::spawn(move || {
        let hold = a.hold("s", "worker-a", Duration::from_millis(500)).unwrap_or_else(|e| panic!("{e}"));
        a.append("s", &ticks(0, 2, "a")).unwrap_or_else(|e| panic!("{e}"));
        let _ = held_tx.send(hold.token());
        // "Paused": wakes only after the takeover.
        let _ = taken_rx.recv();
        let late = a.append("s", &[tick(2, "a-late")]);
        let renew = a.renew(&hold, Duration::from_secs(5));
        (late.map_err(|e| (e.code(), e.to_string())), renew.map(drop).map_err(|e| e.code()))
    });
    let token_a = held_rx.recv().unwrap_or_else(|e| panic!("{e}"));
    let b = schema.store();
    // Live: refused. Expired: taken over.
    assert_eq!(code(b.hold("s", "worker-b", Duration::from_secs(30))), Err("locked"));
    std::thread::sleep(Duration::from_millis(700));
    let hold_b = b.hold("s", "worker-b", Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    assert!(hold_b.token() > token_a, "a takeover gets a larger token");
    b.append("s", &[tick(2, "b")]).unwrap_or_else(|e| panic!("{e}"));
    let _ = taken_tx.send(());
    let (late, renew) = first.join().unwrap_or_else(|_| panic!("first holder panicked"));
    let (late_code, late_text) = late.err().unwrap_or_else(|| panic!("the fenced holder appended"));
    assert_eq!(late_code, "locked");
    assert!(late_text.contains("taken over") && late_text.contains("worker-b"), "{late_text}");
    assert_eq!(renew, Err("locked"), "a taken-over hold cannot be renewed");
    let events = setup.load("s").map(|s| s.events).unwrap_or_else(|e| panic!("{e}"));
    let mut want = ticks(0, 2, "a");
    want.push(tick(2, "b"));
    assert_eq!(events, want, "nothing of the fenced holder's late append was written");
}

/// Even a late append that would *not* conflict on seqs is refused: the
/// fence, not the seq, keeps the first holder out.
#[test]
fn the_fence_refuses_an_append_that_would_otherwise_continue_the_log() {
    let Some(schema) = TestSchema::new() else { return };
    let (a, b) = (schema.store(), schema.store());
    a.create(&SessionHeader::new("s", 1)).unwrap_or_else(|e| panic!("{e}"));
    let hold_a = a.hold("s", "worker-a", Duration::from_millis(200)).unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(300));
    b.hold("s", "worker-b", Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    // b has written nothing: seq 0 would continue the log.
    assert_eq!(code(a.append("s", &[tick(0, "a")])), Err("locked"));
    assert_eq!(code(a.delete("s")), Err("locked"));
    assert_eq!(a.load("s").map(|s| s.events.len()).unwrap_or(99), 0);
    // A restarted worker-a (same name) takes it again at once, fencing b.
    let c = schema.store();
    c.hold("s", "worker-b", Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(b.append("s", &[tick(0, "b")])), Err("locked"));
    c.append("s", &[tick(0, "c")]).unwrap_or_else(|e| panic!("{e}"));
    // Deleting the session removes its hold; the holder may delete.
    c.delete("s").unwrap_or_else(|e| panic!("{e}"));
    a.create(&SessionHeader::new("s", 2)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code(b.append("s", &[tick(0, "b")])), Err("locked"), "b's old hold is gone, not revived");
    // A fenced store stays fenced (it never silently becomes a writer
    // without a hold) until it gives its stale hold up or takes a new one.
    assert_eq!(code(a.append("s", &[tick(0, "a")])), Err("locked"));
    a.release(&hold_a).unwrap_or_else(|e| panic!("{e}"));
    a.append("s", &[tick(0, "a")]).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_hold_for_ever_is_a_long_hold_not_an_error() {
    // `Duration::MAX` was `io`, "timestamp out of range" (a downstream
    // probe); the SQLite store takes it.
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store();
    store.create(&SessionHeader::new("s", 1)).unwrap_or_else(|e| panic!("{e}"));
    let hold = store.hold("s", "me", Duration::MAX).unwrap_or_else(|e| panic!("{e}"));
    let left = hold.expires_at().and_then(|t| t.duration_since(SystemTime::now()).ok()).unwrap_or_default();
    assert!(left > Duration::from_secs(50 * 365 * 86_400), "{left:?}");
    store.renew(&hold, Duration::MAX).unwrap_or_else(|e| panic!("{e}"));
    store.release(&hold).unwrap_or_else(|e| panic!("{e}"));
}

/// A read that waits past `lock_timeout` for a lock another transaction
/// holds is `io` (the store could not be read), not `locked` ("holds ...
/// for writing", which the CLI reports as a refusal, exit 1): an outside
/// probe's `LOCK TABLE` made `validate` say the log was refused.
#[test]
fn a_read_kept_waiting_past_lock_timeout_is_io_not_a_writers_refusal() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.store_of_ticks(2);
    drop(store);
    let options = palimpsest_persistence_postgres::PgOptions {
        lock_timeout: Duration::from_millis(200),
        ..schema.options()
    };
    let reader = palimpsest_persistence_postgres::PgStore::connect_with(&crate::common::url(), options)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut locker = schema.client();
    let mut tx = locker.transaction().unwrap_or_else(|e| panic!("{e}"));
    tx.batch_execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE").unwrap_or_else(|e| panic!("{e}"));
    let err = reader.load("s").map(drop).expect_err("the table is locked");
    assert_eq!(err.code(), "io", "{err}");
    assert!(crate::basics::error_chain(&err).contains("lock_timeout"), "{err}");
    tx.rollback().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reader.load("s").map(|s| s.events.len()).ok(), Some(2), "readable once the lock is gone");
}
