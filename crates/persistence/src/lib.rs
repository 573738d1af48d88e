//! Where Palimpsest session logs are kept: the [`SessionStore`] trait, the
//! [`DurableSession`] that joins a [`Session`](palimpsest_core_session::Session)
//! to a store, and (feature `testkit`) the contract suite every backend runs.
//!
//! # The key decision: stores know bytes, sessions know rules
//!
//! A backend stores headers and events faithfully and keeps seqs contiguous;
//! it never checks the surface rules. Those stay in `core-session`, applied by
//! [`DurableSession`] in the order *validate in memory → write to the store →
//! commit in memory*. So a third-party backend cannot get the rules wrong, and
//! a store failure never leaves memory ahead of the disk.
//!
//! # Features
//!
//! * `testkit`: exposes the `testkit` module, the contract checks, and the
//!   `store_contract_tests!` macro that runs them all as `#[test]`s (shown
//!   on docs.rs, which builds every feature).
//!
//! # Who depends on this
//!
//! Backends (`palimpsest-persistence-jsonl`, `palimpsest-persistence-sqlite`,
//! yours) and consumers that append durably (the agent loop, the CLI).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
mod durable;
mod error;
pub mod hold;
mod memory;
pub mod rows;
pub mod search;
mod store;
mod summary;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use durable::{load_session, save_checkpoint, Durability, DurableError, DurableSession, Opened};
pub use error::StoreError;
pub use hold::{Hold, KeptHold};
pub use memory::MemoryStore;
pub use search::{QueryError, SearchHit, SearchQuery, SEARCH_QUERY_EMPTY};
pub use store::{
    check_continues, check_header, CollectSink, LoadReport, LoadSink, Resumable, SessionStore, StoredSession,
    Summaries,
};
pub use summary::{is_turn_bracket, SessionSummary, SummaryPart, SummarySink};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
