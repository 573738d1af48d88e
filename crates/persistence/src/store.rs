//! The [`SessionStore`] trait: what a backend must do, and nothing more.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_session::jsonl::TornTail;
use palimpsest_core_session::{Checkpoint, Event, SessionHeader};

use crate::error::StoreError;
use crate::hold::Hold;
use crate::search::{self, SearchHit, SearchQuery};
use crate::summary::{SessionSummary, SummarySink};

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

/// What a resume reads of a stored session
/// ([`SessionStore::load_resumable`]): its header, a checkpoint the
/// backend found and checked against the log, and the events after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumable {
    /// The header.
    pub header: SessionHeader,
    /// A checkpoint that matches the log (its session, its header, the
    /// event it ends at), `None` when there is none or it does not match.
    pub checkpoint: Option<Checkpoint>,
    /// The events after the checkpoint (`checkpoint.log_len()..`), in seq
    /// order; every event when there is no checkpoint.
    pub tail: Vec<Event>,
    /// What the read found.
    pub report: LoadReport,
}

impl Resumable {
    /// A whole load as a resume: no checkpoint, every event the tail.
    pub fn whole(stored: StoredSession) -> Resumable {
        Resumable { header: stored.header, checkpoint: None, tail: stored.events, report: stored.report }
    }
}

/// What [`SessionStore::summaries`] returns: every session's header with
/// its summary, or the error that kept its summary from being read.
pub type Summaries = Vec<(SessionHeader, Result<SessionSummary, StoreError>)>;

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

    /// Hands a session to `sink` as it is read: the header, then each
    /// event in seq order, every one checked as [`load`](SessionStore::load)
    /// checks it. The same events `load` returns, in the same order, with
    /// the same errors; a sink that breaks stops the read early (`Ok`).
    /// After an error the sink may have seen a prefix of the session.
    ///
    /// This is how a consumer's own work (building and checking a
    /// [`Session`](palimpsest_core_session::Session), as
    /// [`DurableSession::open`](crate::DurableSession::open) does) overlaps
    /// the read instead of waiting for it, and how a reader holds less than
    /// the whole log. The sink is `Send` so a backend may call it from a
    /// thread of its own (the SQL backends decode rows on one). The default
    /// calls [`load`](SessionStore::load) and hands over its events.
    fn load_into(&self, session_id: &str, sink: &mut dyn LoadSink) -> Result<LoadReport, StoreError> {
        let stored = self.load(session_id)?;
        if sink.header(stored.header).is_continue() {
            for event in stored.events {
                if sink.event(event).is_break() {
                    break;
                }
            }
        }
        Ok(stored.report)
    }

    /// The headers of every stored session.
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError>;

    /// What a listing shows of one session ([`SessionSummary`]), without
    /// holding its log: the same as [`SessionSummary::of`] the loaded
    /// session, with the errors [`load`](SessionStore::load) gives for the
    /// records it reads.
    ///
    /// The default streams the session through
    /// [`load_into`](SessionStore::load_into) (time O(events), memory
    /// O(1)), so every record is read and checked. A backend that reaches
    /// the few records it needs directly overrides it (the SQL stores: a
    /// handful of indexed look-ups; JSONL: the file's head and tail); such a
    /// summary reads only those records, so a defect elsewhere in the log
    /// is left to a load or `validate` to find.
    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        let mut sink = SummarySink::default();
        self.load_into(session_id, &mut sink)?;
        sink.finish().ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })
    }

    /// Every session's summary, in [`list`](SessionStore::list)'s order:
    /// what a listing of the whole store shows. A session whose summary
    /// cannot be read holds its error and the others are still returned;
    /// the outer error is the listing's own.
    ///
    /// The default lists the sessions, then asks [`summary`](SessionStore::summary)
    /// of each: one read per session. A backend that can answer for every
    /// session at once overrides it (the SQL stores: one read transaction,
    /// a handful of statements whatever the number of sessions), and must
    /// return the same summaries (the contract kit checks it).
    fn summaries(&self) -> Result<Summaries, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .map(|header| {
                let summary = self.summary(&header.id);
                (header, summary)
            })
            .collect())
    }

    /// Keeps `checkpoint` of session `session_id` beside its log, replacing
    /// any earlier one, so that a later [`load_resumable`](SessionStore::load_resumable)
    /// reads the surface and the events after it instead of the whole log.
    /// A checkpoint is a derived cache, never needed for correctness:
    /// writing it changes nothing a `load` returns. Returns whether the
    /// backend keeps checkpoints; the default keeps none (`Ok(false)`).
    /// Writers call it at turn boundaries and when they finish; reading
    /// commands never do (contract section 7).
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        let _ = (session_id, checkpoint);
        Ok(false)
    }

    /// What resuming session `session_id` needs: its header, the saved
    /// checkpoint if it matches the log (same session and header, and the
    /// event it ends at is the stored one: a checkpoint from another
    /// session, from before a fork or of a rewritten log is ignored), and
    /// the events after it. Without a matching checkpoint, every event.
    /// Errors are a load's for the records read.
    ///
    /// The default loads the whole session and finds no checkpoint.
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        self.load(session_id).map(Resumable::whole)
    }

    /// Deletes a session. `not-found` if there is none.
    fn delete(&self, session_id: &str) -> Result<(), StoreError>;

    /// Deletes several sessions, each as [`delete`](SessionStore::delete)
    /// would: one outcome per id, in order (a session another writer holds
    /// is `locked`, and the others still go). The default deletes them one
    /// at a time; a store may do it in fewer steps (SQLite: one transaction
    /// and one pass over its full-text index, where each `delete` makes a
    /// pass: pruning 10,000 sessions took minutes). Where the store fails
    /// as a whole (a read-only store, a failed transaction), every outcome
    /// is an error, the first being the failure itself.
    fn delete_many(&self, session_ids: &[&str]) -> Vec<Result<(), StoreError>> {
        session_ids.iter().map(|id| self.delete(id)).collect()
    }

    /// Makes every append so far durable (fsync or equivalent).
    fn sync(&self, session_id: &str) -> Result<(), StoreError>;

    /// Takes this store's hold on a session for `holder`, so that no other
    /// writer appends to it (see [`crate::hold`] for how each backend keeps
    /// writers apart). `locked`, naming the holder and when its hold
    /// expires, while another store holds the session; `not-found` for a
    /// session that does not exist. From then on this store's appends to
    /// the session are fenced by the hold: refused with `locked`, nothing
    /// written, once another holder has taken it over. A hold of the same
    /// holder name is taken again (a restarted worker fences out its
    /// earlier self); this store's own live hold is renewed.
    ///
    /// A hold that expires ([`Hold::expires_at`]) lasts `ttl` unless
    /// renewed; [`KeptHold`](crate::KeptHold) renews it in the background.
    ///
    /// The default grants nothing and refuses nothing (`Ok(None)`): right
    /// for a store whose sessions one process alone reaches, as the
    /// in-memory one. A backend that other processes or machines can write
    /// overrides it, with [`renew`](SessionStore::renew) and
    /// [`release`](SessionStore::release); the contract kit checks them.
    fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Option<Hold>, StoreError> {
        let _ = (session_id, holder, ttl);
        Ok(None)
    }

    /// Extends `hold` to `ttl` from now, keeping its token. `locked`
    /// (naming the new holder) once another holder took it over,
    /// `not-found` once the session is gone. A hold with no expiry is
    /// returned as it is.
    fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        let _ = ttl;
        Ok(hold.clone())
    }

    /// Gives `hold` up: another holder may take the session at once, and
    /// this store's appends are no longer fenced by it. Releasing a hold
    /// that was taken over, or whose session is gone, changes nothing and
    /// is not an error.
    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        let _ = hold;
        Ok(())
    }

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

/// What [`SessionStore::load_into`] hands a session to, as it is read.
///
/// ```
/// use std::ops::ControlFlow;
/// use palimpsest_core_session::{Event, SessionHeader};
/// use palimpsest_persistence::{LoadSink, MemoryStore, SessionStore};
///
/// /// Counts events without keeping them.
/// #[derive(Default)]
/// struct Count(u64);
/// impl LoadSink for Count {
///     fn header(&mut self, _: SessionHeader) -> ControlFlow<()> {
///         ControlFlow::Continue(())
///     }
///     fn event(&mut self, _: Event) -> ControlFlow<()> {
///         self.0 += 1;
///         ControlFlow::Continue(())
///     }
/// }
///
/// let store = MemoryStore::default();
/// store.create(&SessionHeader::new("s1", 0))?;
/// let mut count = Count::default();
/// store.load_into("s1", &mut count)?;
/// assert_eq!(count.0, 0);
/// # Ok::<(), palimpsest_persistence::StoreError>(())
/// ```
pub trait LoadSink: Send {
    /// The header, once, before any event. `Break` ends the read.
    fn header(&mut self, header: SessionHeader) -> ControlFlow<()>;

    /// The next event, in seq order. `Break` ends the read.
    fn event(&mut self, event: Event) -> ControlFlow<()>;

    /// Whether this sink keeps every event it is handed (a load), rather
    /// than a few of them or none (a check, a count): a store may then
    /// have the events share their payloads, a text per batch of rows
    /// ([`Event::shares_text`]), which lowers a load's memory and time.
    /// A sink that keeps a few events of many would keep a whole batch
    /// alive for each, so the default is `false`.
    fn keeps_events(&self) -> bool {
        false
    }
}

/// Collects a whole [`StoredSession`]: how a backend that implements
/// [`SessionStore::load_into`] can implement `load` with the same code.
#[derive(Debug, Default)]
pub struct CollectSink {
    header: Option<SessionHeader>,
    events: Vec<Event>,
}

impl CollectSink {
    /// The session collected, with `report`; `None` if no header came.
    pub fn finish(self, report: LoadReport) -> Option<StoredSession> {
        Some(StoredSession { header: self.header?, events: self.events, report })
    }
}

impl LoadSink for CollectSink {
    fn header(&mut self, header: SessionHeader) -> ControlFlow<()> {
        self.header = Some(header);
        ControlFlow::Continue(())
    }

    fn event(&mut self, event: Event) -> ControlFlow<()> {
        self.events.push(event);
        ControlFlow::Continue(())
    }

    fn keeps_events(&self) -> bool {
        true
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
    fn load_into(&self, session_id: &str, sink: &mut dyn LoadSink) -> Result<LoadReport, StoreError> {
        (**self).load_into(session_id, sink)
    }
    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        (**self).list()
    }
    fn summary(&self, session_id: &str) -> Result<SessionSummary, StoreError> {
        (**self).summary(session_id)
    }
    fn summaries(&self) -> Result<Summaries, StoreError> {
        (**self).summaries()
    }
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        (**self).save_checkpoint(session_id, checkpoint)
    }
    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        (**self).load_resumable(session_id)
    }
    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        (**self).delete(session_id)
    }
    fn delete_many(&self, session_ids: &[&str]) -> Vec<Result<(), StoreError>> {
        (**self).delete_many(session_ids)
    }
    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        (**self).sync(session_id)
    }
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        (**self).search(query)
    }
    fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Option<Hold>, StoreError> {
        (**self).hold(session_id, holder, ttl)
    }
    fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        (**self).renew(hold, ttl)
    }
    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        (**self).release(hold)
    }
}

/// Checks that `header` can be written: its id is not empty (`invalid-id`:
/// no `--session` can name it, and a JSONL store cannot name a file after
/// it, so every store refuses it alike), and its line is within the
/// format's limit, so every reader reads it back. Every backend runs it in
/// [`create`](SessionStore::create) before writing anything. (Events need no
/// such check: an [`Event`] longer than its limit cannot be built.)
pub fn check_header(header: &SessionHeader) -> Result<(), StoreError> {
    if header.id.is_empty() {
        return Err(StoreError::InvalidId { reason: "the session id is empty".into() });
    }
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
