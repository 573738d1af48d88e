#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
//!
//! # Modules
//!
//! * [`JsonlStore`]: the store (`store.rs`).
//! * [`SessionFile`], [`read_session_file`], [`read_session_file_with`]: one
//!   file (`file.rs`); reading under a line cap (`capped.rs`).
//! * [`name`]: the id ↔ file-name encoding.

mod capped;
#[cfg(any(test, feature = "testkit"))]
mod fault;
mod file;
pub mod name;
mod store;

pub use file::{read_session_file, read_session_file_with, SessionFile};
pub use store::JsonlStore;

#[cfg(test)]
mod tests;
