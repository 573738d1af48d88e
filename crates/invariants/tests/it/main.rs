//! Integration tests of the invariants, built as one binary.

mod minimal;
mod realistic;
mod session;
mod support;
