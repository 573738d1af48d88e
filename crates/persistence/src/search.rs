//! Full-text search over the messages of every session of a store:
//! [`SearchQuery`], [`SearchHit`], and the reference scan every backend's
//! [`SessionStore::search`] must agree with.
//!
//! What is searched and what matches is decided by
//! [`palimpsest_core_session::search`]: the text of the message-bearing
//! events (user, context, steering, assistant and tool-result messages, not
//! chunks), cut into lowercased alphanumeric tokens; a hit holds every
//! query term as a whole token. The whole log is searched, so a message a
//! compaction or prune shadowed is still found.
//!
//! # Order
//!
//! Hits come session by session, the session with the latest activity
//! (the time of its last event) first, ties by session id; within a
//! session by seq. [`SearchQuery::limit`] keeps the first hits in that
//! order. Every backend gives the same hits in the same order, snippets
//! byte for byte (they are all made by
//! [`snippet`]).

use palimpsest_core_session::search::{matches, query_terms, searchable_text, snippet};
use palimpsest_core_session::Event;

use crate::error::StoreError;
use crate::store::SessionStore;

/// The stable code of [`QueryError::Empty`].
pub const SEARCH_QUERY_EMPTY: &str = "search-query-empty";

/// A search: the terms every hit must hold, and how many hits to return.
///
/// Built with [`SearchQuery::new`], so it always has at least one term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    terms: Vec<String>,
    limit: Option<usize>,
}

/// A query that cannot be searched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// `search-query-empty`: the words hold no term (no letter or digit):
    /// an empty query would match everything or nothing, and is refused.
    #[error("{}: {}", SEARCH_QUERY_EMPTY, self.detail())]
    Empty {
        /// The words given.
        words: Vec<String>,
    },
}

impl QueryError {
    /// The stable code: `search-query-empty`.
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::Empty { .. } => SEARCH_QUERY_EMPTY,
        }
    }

    /// What was wrong, without the code (`Display` is the code, then this).
    pub fn detail(&self) -> String {
        match self {
            QueryError::Empty { words } => {
                format!("the query {words:?} holds no word to search for (letters or digits)")
            }
        }
    }
}

impl SearchQuery {
    /// A query for every token of `words`
    /// ([`query_terms`]), with
    /// no limit. `search-query-empty` when they hold none.
    ///
    /// ```
    /// use palimpsest_persistence::SearchQuery;
    ///
    /// let q = SearchQuery::new(&["Disk", "full-ish"])?.with_limit(20);
    /// assert_eq!(q.terms(), ["disk", "full", "ish"]);
    /// assert_eq!(SearchQuery::new(&["--"]).unwrap_err().code(), "search-query-empty");
    /// # Ok::<(), palimpsest_persistence::QueryError>(())
    /// ```
    pub fn new<S: AsRef<str>>(words: &[S]) -> Result<SearchQuery, QueryError> {
        let terms = query_terms(words);
        if terms.is_empty() {
            return Err(QueryError::Empty { words: words.iter().map(|w| w.as_ref().to_owned()).collect() });
        }
        Ok(SearchQuery { terms, limit: None })
    }

    /// The same query returning at most `limit` hits.
    pub fn with_limit(mut self, limit: usize) -> SearchQuery {
        self.limit = Some(limit);
        self
    }

    /// The terms, normalized (lowercased), each once, never empty.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// At most how many hits, or `None` for all of them.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Whether `text` is a hit ([`matches()`]).
    pub fn matches(&self, text: &str) -> bool {
        matches(text, &self.terms)
    }

    /// The hit for `event` of `session_id` if it is one: its searchable
    /// text holds every term. What every backend confirms its candidates
    /// with.
    pub fn hit(&self, session_id: &str, event: &Event) -> Option<SearchHit> {
        let text = searchable_text(event)?;
        self.matches(&text).then(|| SearchHit {
            session_id: session_id.to_owned(),
            seq: event.seq(),
            event_type: event.event_type().as_str().to_owned(),
            time: event.time(),
            snippet: snippet(&text, &self.terms),
        })
    }
}

/// One message that holds every term of a [`SearchQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    /// The session.
    pub session_id: String,
    /// The event's seq.
    pub seq: u64,
    /// The event's type, e.g. `assistant/message`.
    pub event_type: String,
    /// The event's time (Unix epoch milliseconds).
    pub time: u64,
    /// About a hundred characters around the first term
    /// ([`snippet`]).
    pub snippet: String,
}

/// Puts hits in the search order, session by session: give it each
/// session's hits (in seq order) and its last activity, in any order of
/// sessions; [`finish`](HitCollector::finish) sorts and cuts to the limit.
/// It keeps at most `limit` hits of any one session, so a scan holds one
/// session's events and no more than `limit` hits per session.
#[derive(Debug)]
pub struct HitCollector {
    limit: Option<usize>,
    sessions: Vec<(u64, String, Vec<SearchHit>)>,
}

impl HitCollector {
    /// A collector for `query`'s limit.
    pub fn new(query: &SearchQuery) -> HitCollector {
        HitCollector { limit: query.limit, sessions: Vec::new() }
    }

    /// How many hits of one session are still worth finding: the limit
    /// (`None`: all).
    pub fn per_session(&self) -> Option<usize> {
        self.limit
    }

    /// Adds one session's hits, in seq order, and the time of its last event.
    pub fn add(&mut self, session_id: &str, last_activity: u64, mut hits: Vec<SearchHit>) {
        if hits.is_empty() {
            return;
        }
        if let Some(limit) = self.limit {
            hits.truncate(limit);
        }
        self.sessions.push((last_activity, session_id.to_owned(), hits));
    }

    /// The hits in search order, at most the limit.
    pub fn finish(mut self) -> Vec<SearchHit> {
        self.sessions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut hits: Vec<SearchHit> = self.sessions.into_iter().flat_map(|(_, _, h)| h).collect();
        if let Some(limit) = self.limit {
            hits.truncate(limit);
        }
        hits
    }
}

/// The hits among one session's `events` (in seq order), at most `limit`.
pub fn session_hits(session_id: &str, events: &[Event], query: &SearchQuery) -> Vec<SearchHit> {
    let max = query.limit.unwrap_or(usize::MAX);
    events.iter().filter_map(|e| query.hit(session_id, e)).take(max).collect()
}

/// The reference search: every session of `store`, listed and loaded one at
/// a time (so one session's events are in memory at once), each event
/// checked with [`SearchQuery::hit`]. The default
/// [`SessionStore::search`], and what every backend's own search must
/// return hit for hit.
///
/// A session that is deleted between the listing and its load is skipped
/// (it is no longer in the store); any other error ends the search.
pub fn scan<S: SessionStore + ?Sized>(store: &S, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
    let mut found = HitCollector::new(query);
    for header in store.list()? {
        let stored = match store.load(&header.id) {
            Ok(s) => s,
            Err(StoreError::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        let last = stored.events.last().map_or(header.created_at, Event::time);
        found.add(&header.id, last, session_hits(&header.id, &stored.events, query));
    }
    Ok(found.finish())
}
