#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # Modules
//!
//! * [`JsonlStore`]: the store (`store.rs`).
//! * [`SessionFile`], [`read_session_file`], [`read_session_file_with`]: one
//!   file (`file.rs`); reading under a line cap (`capped.rs`).
//! * [`name`]: the id ↔ file-name encoding.
//! * Checkpoint sidecars (`<stem>.checkpoint.json`): how
//!   [`SessionStore::save_checkpoint`](palimpsest_persistence::SessionStore::save_checkpoint)
//!   and [`load_resumable`](palimpsest_persistence::SessionStore::load_resumable)
//!   are kept (`checkpoint.rs`).
//! * [`sidecar`]: the same sidecar for a lone session file.
//! * [`read_session_summary`]: a session's summary from its file's head
//!   and tail (`summary.rs`).

mod capped;
mod checkpoint;
#[cfg(any(test, feature = "testkit"))]
mod fault;
mod file;
mod file_store;
mod grant;
pub mod name;
pub mod sidecar;
mod store;
mod summary;

pub use file::{read_session_file, read_session_file_with, SessionFile};
pub use file_store::JsonlFileStore;
pub use store::JsonlStore;
pub use summary::read_session_summary;

#[cfg(test)]
mod tests;
