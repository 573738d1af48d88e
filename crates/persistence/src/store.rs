//! The [`SessionStore`] trait: what a backend must do, and nothing more.

use std::fmt;
use std::sync::Arc;

use palimpsest_core_session::jsonl::TornTail;
use palimpsest_core_session::{Event, SessionHeader};

use crate::error::StoreError;
use crate::search::{self, SearchHit, SearchQuery};

/// What a load found besides the events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// A torn last record that was dropped (JSONL only). It is cut off before
    /// the next append.
    pub torn_tail: Option<TornTail>,
}

/// A stored session, as loaded: not yet checked against the surface rules
/// (that is [`DurableSession::open`](crate::DurableSession::open)'s job).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The header.
    pub header: SessionHeader,
    /// The events, in seq order, each well-formed.
    pub events: Vec<Event>,
    /// What the load found.
    pub report: LoadReport,
}

/// A place where session logs live.
///
/// A backend stores headers and events faithfully and keeps each session's
/// seqs contiguous; it does **not** know the surface rules, which stay in
/// [`Session`](palimpsest_core_session::Session). Object-safe, so the agent
/// loop holds a `dyn SessionStore`.
///
/// # Contract
///
/// * [`append`](SessionStore::append) is atomic: all events or none. A batch
///   whose first seq is not the stored length is refused with
///   [`StoreError::Conflict`], nothing written.
/// * After `append` returns, a [`load`](SessionStore::load) in this process
///   sees the batch. It survives a crash of the process or machine only after
///   [`sync`](SessionStore::sync) returned (or if the backend syncs every
///   append, which it documents).
/// * After an I/O error during a write the write's outcome is unknown, and
///   a failed batch is never stored in part or twice: the backend refuses
///   further writes with `io` until it is reopened (JSONL, SQLite), or it
///   settles the unknown outcome before writing anything else (PostgreSQL
///   reads the write back).
///
/// The `testkit` feature ships the checks that prove a backend keeps this
/// contract, the last clause included when the backend takes the kit's
/// `testkit::WriteFault` switch.
pub trait SessionStore: Send + Sync + fmt::Debug {
    /// Creates an empty session. `already-exists` if the id is taken.
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError>;

    /// Creates a session holding `events` (seqs `0..n`), atomically: after
    /// an error no part of it is stored, and no reader ever sees the
    /// session without all its events. `already-exists` if the id is
    /// taken, `conflict` if the seqs do not count up from 0. Durable, like
    /// an append, once [`sync`](SessionStore::sync) returned.
    ///
    /// This is how whole sessions are written (a conversion between
    /// backends, a fork): `create` followed by `append` would leave an
    /// empty or partial session behind a crash or a refused batch.
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError>;

    /// Appends a batch atomically. `conflict` if `events[0].seq()` is not the
    /// stored length or the batch's seqs are not contiguous.
    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError>;

    /// Loads a session: header, events, and what was found at the tail.
    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError>;

    /// The headers of every stored session.
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError>;

    /// Deletes a session. `not-found` if there is none.
    fn delete(&self, session_id: &str) -> Result<(), StoreError>;

    /// Makes every append so far durable (fsync or equivalent).
    fn sync(&self, session_id: &str) -> Result<(), StoreError>;

    /// The messages of every session that hold every term of `query`, in
    /// the search order (the session with the latest activity first, then
    /// by seq), at most [`SearchQuery::limit`] of them. See
    /// [`crate::search`] for what is searched and what matches.
    ///
    /// The default is the reference scan ([`search::scan`]): every session
    /// listed and loaded in turn, one in memory at a time. So any backend
    /// can search; one with an index overrides it, and must return the
    /// same hits (the contract kit checks it). A search only reads: it
    /// never creates, changes or locks anything.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        search::scan(self, query)
    }
}

/// A shared store is a store: several owners (a loop, a CLI command, a
/// test factory handing out "reopened" handles) can use one backend through
/// `Arc`, and `Box::new(arc.clone())` is a `Box<dyn SessionStore>`.
impl<S: SessionStore + ?Sized> SessionStore for Arc<S> {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        (**self).create(header)
    }
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        (**self).create_with_events(header, events)
    }
    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        (**self).append(session_id, events)
    }
    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        (**self).load(session_id)
    }
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        (**self).list()
    }
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        (**self).delete(session_id)
    }
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        (**self).sync(session_id)
    }
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        (**self).search(query)
    }
}

/// Checks that `header` can be written: its line is within the format's
/// limit, so every reader reads it back. Every backend runs it in
/// [`create`](SessionStore::create) before writing anything. (Events need no
/// such check: an [`Event`] longer than its limit cannot be built.)
pub fn check_header(header: &SessionHeader) -> Result<(), StoreError> {
    header.check_size().map_err(|cause| StoreError::InvalidHeader { session_id: header.id.clone(), cause })
}

/// Checks that `events` continue a log of `stored_len` events; the shared
/// contiguity check every backend runs before writing.
pub fn check_continues(session_id: &str, stored_len: u64, events: &[Event]) -> Result<(), StoreError> {
    for (i, e) in events.iter().enumerate() {
        let expected = stored_len + i as u64;
        if e.seq() != expected {
            return Err(StoreError::Conflict { session_id: session_id.to_owned(), expected, found: e.seq() });
        }
    }
    Ok(())
}
