//! Search against FTS5's own tokenizer: `unicode61` cuts words where the
//! reference does not (at vowel signs, harakat, circled letters), and the
//! store still finds exactly the reference scan's hits, never an FTS5
//! error.

use palimpsest_core_session::payload::{Message, UserMessage};
use palimpsest_core_session::{Event, SessionHeader, SurfaceIntent};
use palimpsest_persistence::{search, SearchQuery, SessionStore, StoreError};
use palimpsest_persistence_sqlite::SqliteStore;
use rusqlite::Connection;

use crate::common::temp_db;

fn user(seq: u64, text: &str) -> Event {
    let message = UserMessage { turn: None, message: Message::user(format!("u{seq}"), text) };
    Event::surface(seq, seq + 1, message, SurfaceIntent::append()).expect("a user message")
}

/// The seqs `store` finds for `words`, checked equal to the reference scan's.
fn seqs(store: &SqliteStore, words: &[&str]) -> Result<Vec<u64>, StoreError> {
    let q = SearchQuery::new(words).expect("a query");
    let hits = store.search(&q)?;
    assert_eq!(hits, search::scan(store, &q).expect("the reference scan"), "search {words:?}");
    Ok(hits.iter().map(|h| h.seq).collect())
}

const TEXTS: [&str; 6] =
    ["Hindi: भाषा", "Thai: สวัสดี", "Arabic: عَرَبِيّ", "circled Ⓐ", "NOT near AND or", "plain words"];

#[test]
fn words_unicode61_cuts_or_drops_are_found_as_the_reference_finds_them() {
    let store = SqliteStore::open_in_memory().expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    let events: Vec<Event> = (0..).zip(TEXTS).map(|(seq, t)| user(seq, t)).collect();
    store.append("s", &events).expect("append");
    let cases: &[(&[&str], &[u64])] = &[
        // One token to the reference, a phrase to unicode61.
        (&["भाषा"], &[0]),
        (&["hindi", "भाषा"], &[0]),
        (&["สวัสดี"], &[1]),
        (&["عَرَبِيّ"], &[2]),
        // A piece unicode61 makes is not a reference token.
        (&["भ"], &[]),
        (&["ع"], &[]),
        // No token at all to unicode61: found by the other term, or by
        // reading every indexed message.
        (&["Ⓐ"], &[3]),
        (&["ⓐ"], &[3]),
        (&["ⓐ", "circled"], &[3]),
        (&["ⓐ", "plain"], &[]),
        // FTS5's operators are words like any other.
        (&["not", "NEAR", "and", "OR"], &[4]),
        (&["words"], &[5]),
    ];
    for (words, expected) in cases {
        assert_eq!(seqs(&store, words).map_err(|e| e.to_string()), Ok(expected.to_vec()), "search {words:?}");
    }
}

/// A file store, read-only too, finds them the same way.
#[test]
fn a_read_only_store_finds_them_too() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    let events: Vec<Event> = (0..).zip(TEXTS).map(|(seq, t)| user(seq, t)).collect();
    store.append("s", &events).expect("append");
    drop(store);
    let reader = SqliteStore::open_read_only(&path).expect("open read-only");
    assert_eq!(seqs(&reader, &["भाषा"]).map_err(|e| e.to_string()), Ok(vec![0]));
    assert_eq!(seqs(&reader, &["Ⓐ"]).map_err(|e| e.to_string()), Ok(vec![3]));
}

/// An index that refuses the query (here one rebuilt behind the open
/// store's back with another tokenizer) is a refusal: a search reads, so it
/// wrote nothing; it is not `io`.
#[test]
fn an_index_that_refuses_the_query_is_schema_mismatch_not_io() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).expect("open");
    store.create(&SessionHeader::new("s", 0)).expect("create");
    store.append("s", &[user(0, "plain words")]).expect("append");
    Connection::open(&path)
        .expect("raw open")
        .execute_batch(
            "DROP TABLE search; CREATE VIRTUAL TABLE search USING fts5(session_id UNINDEXED, \
             seq UNINDEXED, text, tokenize = 'trigram', detail = none);",
        )
        .expect("rebuild the index");
    let err = seqs(&store, &["words"]).expect_err("the trigram index refuses a phrase");
    assert_eq!((err.code(), err.wrote_nothing()), ("schema-mismatch", true), "{err}");
    assert!(err.to_string().contains("search"), "{err}");
}
