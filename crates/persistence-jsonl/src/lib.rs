#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! * [`JsonlStore`]: the store (`store.rs`).
//! * [`SessionFile`], [`read_session_file`], [`read_session_file_with`]: one
//!   file (`file.rs`); reading under a line cap (`capped.rs`).
//! * [`name`]: the id ↔ file-name encoding.

mod capped;
mod file;
pub mod name;
mod store;

pub use file::{read_session_file, read_session_file_with, SessionFile};
pub use store::JsonlStore;

#[cfg(test)]
mod tests;
