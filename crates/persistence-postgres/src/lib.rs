//! PostgreSQL backend for Palimpsest session logs: a [`SessionStore`] whose
//! appends are compare-and-append transactions, with a bump-and-reject
//! [`SCHEMA_VERSION`] and fenced holds ([`Hold`]) for one writer per
//! session across machines.
//!
//! The rest of this page is the crate's README: why `tokio-postgres`
//! driven by the store, the schema ([`schema_sql`]), what an append
//! guarantees, how an unknown commit outcome is resolved, and holds.
//!
//! [`SessionStore`]: palimpsest_persistence::SessionStore
//!
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod codec;
mod conn;
mod copy;
mod error;
mod hold;
mod options;
mod schema;
mod search;
mod store;
mod tls;
mod url;

pub use hold::Hold;
pub use options::PgOptions;
pub use schema::{schema_sql, SCHEMA_VERSION};
pub use search::MAX_TERM_BYTES;
pub use store::PgStore;
pub use url::redact_url;
