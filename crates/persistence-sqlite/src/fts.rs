//! The full-text query of a search: how the FTS5 index narrows a search to
//! candidates, which the reference matcher then decides.
//!
//! `search` is fed each message's reference tokens
//! ([`index_text`](palimpsest_core_session::search::index_text)), but
//! FTS5's `unicode61` tokenizer cuts them again by its own rules: it keeps
//! letters, numbers and private-use characters (Unicode categories `L*`,
//! `N*` and `Co`, by the tables of the SQLite in use, case folded) and
//! takes everything else for a separator, where a reference token is a run
//! of [`char::is_alphanumeric`], which also holds vowel signs and harakat
//! (category `M`) and circled letters (`So`). So `भाषा` is one reference
//! token and two index tokens, `भ` and `ष` (quoted whole, a phrase, which
//! `detail = none` refuses); `ⓐ` is a reference token and no index token
//! at all (quoted whole, it matches nothing).
//!
//! So a term is asked for as the index tokens `unicode61` makes of it,
//! each quoted, all ANDed: a message holding the term holds every one of
//! them, and the index finds a superset of the hits. A term of which it
//! makes none cannot narrow and is left out; when no term can, every
//! indexed message is a candidate. The index tokens of the terms come from
//! the tokenizer itself, run on the terms in an in-memory database of
//! [`SCHEMA_SQL`], not from a copy of its rules: its Unicode tables are the
//! SQLite build's, and differ from one SQLite (and Rust) to the next.
//!
//! A candidate is then held to its index row's `text` ([`may_hold`]), the
//! message's reference tokens, before its event is read and confirmed with
//! the reference matcher: the index's extra candidates (`भाषा` asked for
//! as `भ` and `ष`) and a search that reads every indexed message cost a
//! look at the index rows, not a decoded event each.

use std::sync::Mutex;

use palimpsest_persistence::SearchQuery;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::schema::SCHEMA_SQL;

/// The tokenizer's database: an empty store of [`SCHEMA_SQL`] (its
/// `search` table made by the very statement the store's was), and the
/// `vocab` table listing the index tokens `search` holds.
const TOKENIZER_SQL: &str = "CREATE VIRTUAL TABLE vocab USING fts5vocab(search, row);";
const TOKENIZE: &str = "INSERT INTO search (text) VALUES (?1)";
const TOKENS: &str = "SELECT term FROM vocab";

/// Cuts the terms of a query into the index's tokens, in an in-memory
/// database made on first use and kept (one per store).
#[derive(Debug, Default)]
pub(crate) struct QueryTokenizer {
    conn: Mutex<Option<Connection>>,
}

impl QueryTokenizer {
    /// The FTS5 query that finds every message holding all of `query`'s
    /// terms (and maybe others), or `None` when no term can narrow the
    /// search. Always well-formed: every token is quoted.
    pub(crate) fn match_expr(&self, query: &SearchQuery) -> Option<String> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tokens = slot.take().map_or_else(tokenizer, Ok).and_then(|mut conn| {
            let tokens = index_tokens(&mut conn, query.terms())?;
            *slot = Some(conn);
            Ok(tokens)
        });
        match tokens {
            Ok(tokens) if tokens.is_empty() => None,
            Ok(tokens) => Some(tokens.iter().map(|t| quoted(t)).collect::<Vec<_>>().join(" ")),
            Err(e) => {
                // Still every hit, only slower; the next search tries a
                // new database.
                tracing::warn!(error = %e, "could not cut the query into the index's tokens; reading every indexed message");
                None
            }
        }
    }
}

fn tokenizer() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(SCHEMA_SQL)?;
    conn.execute_batch(TOKENIZER_SQL)?;
    Ok(conn)
}

/// The distinct index tokens of `terms`: the terms written as one row
/// (FTS5 reads its own pending rows), read back through `vocab`, and
/// rolled back.
fn index_tokens(conn: &mut Connection, terms: &[String]) -> rusqlite::Result<Vec<String>> {
    let tx = conn.transaction()?;
    tx.prepare_cached(TOKENIZE)?.execute([terms.join(" ")])?;
    let mut stmt = tx.prepare_cached(TOKENS)?;
    let mut rows = stmt.query([])?;
    let mut tokens = Vec::new();
    while let Some(row) = rows.next()? {
        // FTS5 cuts a token at 32 KiB, maybe inside a character: such a
        // token cannot be quoted as text, and narrows nothing anyway.
        if let ValueRef::Text(bytes) = row.get_ref(0)? {
            if let Ok(token) = std::str::from_utf8(bytes) {
                tokens.push(token.to_owned());
            }
        }
    }
    Ok(tokens)
}

/// `token` as an FTS5 string: in double quotes, each inner one doubled, so
/// it is never read as an operator or a column filter.
fn quoted(token: &str) -> String {
    format!("\"{}\"", token.replace('"', "\"\""))
}

/// Whether the message of an index row whose `text` column is `indexed`
/// may hold every one of `terms`: whether each is one of the row's
/// space-separated tokens. Exactly the reference matcher's answer for the
/// message, since the row is its reference tokens (each lowercased, none
/// holding a space); a value that is not text cannot rule it out.
pub(crate) fn may_hold(indexed: ValueRef<'_>, terms: &[String]) -> bool {
    let ValueRef::Text(bytes) = indexed else { return true };
    let Ok(text) = std::str::from_utf8(bytes) else { return true };
    terms.iter().all(|term| text.split(' ').any(|token| token == term))
}

#[cfg(test)]
mod tests {
    use palimpsest_core_session::search::{index_text, matches};

    use super::*;

    fn query<S: AsRef<str>>(words: &[S]) -> SearchQuery {
        SearchQuery::new(words).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn terms_are_asked_for_as_the_tokens_unicode61_makes_of_them() {
        let t = QueryTokenizer::default();
        assert_eq!(t.match_expr(&query(&["Foo", "bar"])).as_deref(), Some(r#""bar" "foo""#));
        assert_eq!(t.match_expr(&query(&["भाषा"])).as_deref(), Some(r#""भ" "ष""#));
        assert_eq!(t.match_expr(&query(&["ⓐ", "x"])).as_deref(), Some(r#""x""#), "ⓐ cannot narrow");
        assert_eq!(t.match_expr(&query(&["ⓐ", "①"])).as_deref(), Some(r#""①""#));
        assert_eq!(t.match_expr(&query(&["Ⓐ"])), None, "no term can narrow");
    }

    #[test]
    fn the_index_row_holds_a_term_as_a_whole_token_only() {
        let row = index_text("Hindi: भाषा, İstanbul ⓐ");
        let holds = |words: &[&str]| may_hold(ValueRef::Text(row.as_bytes()), query(words).terms());
        assert!(holds(&["भाषा", "hindi"]) && holds(&["İstanbul"]) && holds(&["Ⓐ"]));
        assert!(!holds(&["भ"]) && !holds(&["istanbul"]) && !holds(&["hindi", "x"]));
        assert!(may_hold(ValueRef::Null, &["x".into()]), "not text: no verdict");
    }

    /// For every alphanumeric character, inside a word and at its ends, the
    /// query is well-formed and finds the message holding it: the index
    /// narrows to a superset of the reference's hits, whatever the script.
    /// (A query of 256 such words finds the message of all 256 only if it
    /// finds it for each word alone: their index tokens are ANDed.)
    #[test]
    fn every_alphanumeric_character_is_found_through_the_index() {
        let must = |e: rusqlite::Error| -> ! { panic!("{e}") };
        let t = QueryTokenizer::default();
        let db = Connection::open_in_memory().unwrap_or_else(|e| must(e));
        db.execute_batch(SCHEMA_SQL).unwrap_or_else(|e| must(e));
        let words: Vec<String> = (0..=char::MAX as u32)
            .filter_map(char::from_u32)
            .filter(|c| c.is_alphanumeric() && !c.is_ascii())
            .map(|c| format!("{c}a{c}"))
            .collect();
        assert!(words.len() > 100_000, "{}", words.len());
        let chunks: Vec<String> = words.chunks(256).map(|c| c.join(" ")).collect();
        let tx = db.unchecked_transaction().unwrap_or_else(|e| must(e));
        for (i, text) in (0_i64..).zip(&chunks) {
            tx.execute(
                "INSERT INTO search (rowid, text) VALUES (?1, ?2)",
                rusqlite::params![i, index_text(text)],
            )
            .unwrap_or_else(|e| must(e));
        }
        tx.execute_batch("INSERT INTO search (search) VALUES ('optimize')").unwrap_or_else(|e| must(e));
        tx.commit().unwrap_or_else(|e| must(e));
        let mut find =
            db.prepare("SELECT rowid FROM search WHERE search MATCH ?1").unwrap_or_else(|e| must(e));
        for (i, (text, chunk)) in (0_i64..).zip(chunks.iter().zip(words.chunks(256))) {
            let q = query(chunk);
            assert!(matches(text, q.terms()), "{text:?}");
            let expr = t.match_expr(&q).unwrap_or_else(|| panic!("`a` narrows {text:?}"));
            let rows: Vec<i64> = find
                .query_map([&expr], |r| r.get(0))
                .and_then(|rows| rows.collect())
                .unwrap_or_else(|e| panic!("{text:?} as {expr}: {e}"));
            assert!(rows.contains(&i), "{text:?} as {expr} misses its row");
        }
    }
}
