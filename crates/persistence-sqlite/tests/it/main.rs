//! Integration tests of the SQLite store, as one binary. The multi-process
//! tests re-run this binary as their child processes.

mod basics;
mod common;
mod contract;
#[cfg(unix)]
mod holds;
mod io_errors;
mod processes;
mod read_only;
mod refusals;
mod search;
mod tamper;
