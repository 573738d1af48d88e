//! Integration tests of the OpenAI-compatible provider, as one binary and
//! without network: a scripted HTTP server on 127.0.0.1 ([`mock`]) serves
//! recorded-format event streams from `tests/data/`, in small pieces, and
//! records the requests it gets.
//!
//! * [`stream`]: the provider alone: the exact items each stream gives,
//!   the exact request JSON, retries, and every failure mode.
//! * [`e2e`]: the real `AgentLoop` with one tool call, through the
//!   provider, into a `MemoryStore`, checked against the contract.

mod common;
mod e2e;
mod mock;
mod stream;
