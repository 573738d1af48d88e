//! The Palimpsest session log: events, the surface, derived messages and
//! crash repair. Pure: no I/O, no async, no storage.
//!
//! An agent session is an append-only log of [`Event`]s. The log is the only
//! truth. What the model sees is the **surface**: an ordered list of event
//! seqs, kept incrementally by the [`SurfaceManager`]. An event joins it by
//! `append`, or by `replace {start, end}`, which shadows a range (compaction,
//! tool-result pruning) while the shadowed events stay in the log.
//! [`Session::derive_messages`] walks the surface to build the next model
//! request, and every derived message keeps its provenance.
//!
//! # The key decision: check, then commit
//!
//! Every rule of the contract is checked *before* anything changes. A
//! refused append returns an [`AppendError`] with its stable code
//! ([`AppendError::code`]) and leaves the log and the surface exactly as they
//! were. Stores plug in between check and commit with
//! [`Session::append_with`] / [`Session::append_batch_with`], so a failed
//! write changes nothing either.
//!
//! # Where each rule lives
//!
//! | contract | module |
//! |---|---|
//! | 1.1 envelope, 1.2 payloads, 2 rules 1–4 | [`event`], [`payload`] |
//! | 2 rules 5–9 (surface, replace, contiguity) | [`surface`] |
//! | 2a structural invariants | the `palimpsest-invariants` crate, via [`AppendGuard`] |
//! | 3 derived messages | [`derive`](mod@derive) |
//! | 5 crash repair | [`repair`] |
//! | compaction and pruning plans | [`rewrite`] |
//! | forking at an event, explaining an event | [`fork`], [`explain`] |
//! | what full-text search finds, and the snippet it shows | [`search`] |
//! | 6 header and JSONL files | [`header`], [`jsonl`] |
//! | resuming from a checkpoint in O(surface + tail) (RFC 0002) | [`checkpoint`], [`ResidentLog`] |
//! | the size of an event and of a header, for every reader and writer | [`limits`] |
//!
//! # Example
//!
//! ```
//! use palimpsest_core_session::{jsonl::JsonlLog, repair::repair};
//!
//! let text = r#"{"type":"session","version":0,"id":"s1","createdAt":0}
//! {"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}
//! {"seq":1,"time":2,"type":"user/message","data":{"message":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}},"surfaceOp":"append"}
//! "#;
//! let session = JsonlLog::parse(text.as_bytes())?.into_session()?;
//! assert_eq!(session.surface(), &[1]);
//! assert_eq!(session.derive_messages()[0].message.id, "u1");
//! // The turn is still open: repair closes it.
//! let closers = repair(session.events());
//! assert_eq!(closers[0].event_type().as_str(), "turn/end");
//! # Ok::<(), palimpsest_core_session::LoadError>(())
//! ```

pub mod checkpoint;
pub mod derive;
mod error;
pub mod event;
pub mod explain;
pub mod fork;
pub mod header;
pub mod history;
pub mod jsonl;
pub mod limits;
pub mod payload;
pub mod repair;
mod resident;
pub mod rewrite;
pub mod search;
mod session;
mod shape;
pub mod surface;
mod tagged;
pub mod time;
mod unique_keys;

pub use checkpoint::{Checkpoint, CheckpointError, ResumeError, StepState, TurnState, CHECKPOINT_VERSION};
pub use derive::{DerivedMessage, DerivedRequest};
pub use error::{AppendError, LoadError};
pub use event::{Event, EventType, SurfaceIntent, SurfaceOp};
pub use header::{SessionHeader, SESSION_FORMAT_VERSION};
pub use history::{History, HistoryMessage};
pub use limits::{MAX_COUNTED_LINE_BYTES, MAX_EVENT_LINE_BYTES, MAX_HEADER_LINE_BYTES};
pub use resident::ResidentLog;
pub use session::{AppendGuard, BatchError, GuardViolation, Session, SessionView};
pub use surface::{SurfaceManager, SurfaceStep};
pub use unique_keys::duplicate_key;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
