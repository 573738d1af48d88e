//! Integration tests of the PostgreSQL store against a real server, as one
//! binary. The server is `PALIMPSEST_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); every test works in a schema
//! of its own, dropped at its end, so tests run in parallel and leave
//! nothing behind. Where the server cannot be reached a test fails under CI
//! (`CI` set) and is skipped, saying so, elsewhere.

mod basics;
mod cluster;
mod common;
mod contract;
mod failover;
mod faults;
mod holds;
mod processes;
#[cfg(feature = "tls")]
mod tls;
