//! SQLite backend for Palimpsest session logs: the embedded default store,
//! with a bump-and-reject [`SCHEMA_VERSION`].
//!
//! The rest of this page is the crate's README: the guarantees of each
//! [`Synchronous`] level, what [`SqliteStore::open`] refuses, the schema
//! ([`SCHEMA_SQL`]) and the versioning policy.
//!
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod audit;
mod codec;
mod file;
mod fts;
mod holds;
mod options;
mod read_only;
mod schema;
mod sqlerr;
mod store;

pub use audit::{StoreViolation, STORE_INTEGRITY, STORE_ORPHAN_EVENTS, STORE_SEQ_GAP};
pub use options::{SqliteOptions, Synchronous};
pub use read_only::ReadMode;
pub use schema::{APPLICATION_ID, SCHEMA_SQL, SCHEMA_VERSION};
pub use store::SqliteStore;
