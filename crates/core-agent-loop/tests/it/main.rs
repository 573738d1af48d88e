//! Integration tests of the agent loop, as one binary: every scenario runs
//! against every store through `Arc<dyn SessionStore>` and is snapshotted
//! (full log and derived history) once, the same bytes for every store.

mod caps;
mod checkpoints;
mod coalescing;
mod common;
mod concurrency;
mod failures;
mod holds;
mod misbehave;
mod plugins;
mod resume;
mod rewrite_plugins;
mod scenarios;
mod settings;
mod slow_store;
