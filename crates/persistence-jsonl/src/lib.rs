#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! * [`JsonlStore`]: the store (`store.rs`).
//! * [`SessionFile`], [`read_session_file`]: one file (`file.rs`).
//! * [`name`]: the id ↔ file-name encoding.

mod file;
pub mod name;
mod store;

pub use file::{read_session_file, SessionFile};
pub use store::JsonlStore;

#[cfg(test)]
mod tests;
