//! SQLite backend for Palimpsest session logs (placeholder docs, rewritten below).

mod codec;
mod file;
mod options;
mod schema;
mod sqlerr;
mod store;

pub use options::{SqliteOptions, Synchronous};
pub use schema::{APPLICATION_ID, SCHEMA_SQL, SCHEMA_VERSION};
pub use store::SqliteStore;
