//! Holds on one machine: a hold whose process has ended has ended, so a
//! crashed writer does not keep its session from the next one for the rest
//! of its lease; a live process's hold lasts until it expires.

use std::time::Duration;

use palimpsest_core_session::SessionHeader;
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_sqlite::SqliteStore;
use rusqlite::Connection;

use crate::common::{temp_db, ticks};

/// Sets the pid recorded for `id`'s hold, as if another process had taken it.
fn set_holder_pid(path: &std::path::Path, id: &str, pid: u32) {
    let conn = Connection::open(path).expect("raw open");
    let changed = conn
        .execute("UPDATE holds SET pid = ?2 WHERE session_id = ?1", rusqlite::params![id, i64::from(pid)])
        .expect("update");
    assert_eq!(changed, 1);
}

#[cfg(target_os = "linux")]
#[test]
fn the_hold_of_a_process_that_ended_is_taken_over_at_once_and_its_store_fenced_out() {
    let (_dir, path) = temp_db();
    let first = SqliteStore::open(&path).expect("open");
    first.create(&SessionHeader::new("s", 0)).expect("create");
    first.append("s", &ticks(0, 1, "a")).expect("append");
    let held = first.hold("s", "crashed:1", Duration::from_secs(600)).expect("hold").expect("granted");

    // A live process holds it: refused, naming the holder.
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    set_holder_pid(&path, "s", sleeper.id());
    let second = SqliteStore::open(&path).expect("open again");
    let refused = second.hold("s", "next:2", Duration::from_secs(30)).map(|_| ()).unwrap_err();
    assert_eq!(refused.code(), "locked");
    assert!(refused.to_string().contains("crashed:1"), "{refused}");

    // That process ends: its hold ended with it, ten minutes early.
    sleeper.kill().expect("kill");
    sleeper.wait().expect("reap");
    let taken = second.hold("s", "next:2", Duration::from_secs(30)).expect("take over").expect("granted");
    assert!(taken.token() > held.token());
    second.append("s", &ticks(1, 1, "b")).expect("the new holder appends");
    assert_eq!(first.append("s", &ticks(2, 1, "c")).map_err(|e| e.code().to_owned()), Err("locked".into()));
    let mut expected = ticks(0, 1, "a");
    expected.extend(ticks(1, 1, "b"));
    assert_eq!(second.load("s").expect("load").events, expected);
}

/// `delete_many`: a session another handle holds is `locked` and stays,
/// the others go, with their full-text rows (one pass over the index for
/// all of them, where each `delete` made one).
#[test]
fn delete_many_skips_a_held_session_and_takes_the_others_search_rows() {
    use palimpsest_core_session::Event;
    use palimpsest_persistence::SearchQuery;

    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    let message = |text: &str| {
        Event::from_json(&format!(
            r#"{{"seq":0,"time":1,"type":"user/message","data":{{"message":{{"id":"u","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}}},"surfaceOp":"append"}}"#
        ))
        .expect("an event")
    };
    for id in ["a", "b", "c"] {
        store.create(&SessionHeader::new(id, 0)).expect("create");
        store.append(id, &[message(&format!("apple {id}"))]).expect("append");
    }
    let other = SqliteStore::open(&path).expect("a second handle");
    let held = other.hold("b", "other", Duration::from_secs(60)).expect("hold").expect("a hold");

    let codes: Vec<Result<(), &str>> = store
        .delete_many(&["a", "b", "c"])
        .iter()
        .map(|o| o.as_ref().map(drop).map_err(|e| e.code()))
        .collect();
    assert_eq!(codes, [Ok(()), Err("locked"), Ok(())]);
    let hits = store.search(&SearchQuery::new(&["apple"]).expect("a query")).expect("search");
    let sessions: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
    assert_eq!(sessions, ["b"], "the deleted sessions' messages are out of the index");
    assert_eq!(store.check_store().expect("audit"), vec![]);
    other.release(&held).expect("release");
    assert_eq!(store.delete_many(&["b"]).into_iter().map(|o| o.is_ok()).collect::<Vec<_>>(), [true]);
}
