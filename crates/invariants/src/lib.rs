//! Dev-mode structural validators for Palimpsest session logs: the
//! invariants of contract section 2a.
//!
//! `palimpsest-core-session` enforces the surface rules (section 2) on every
//! append, always. This crate checks the rules that relate events to each
//! other across the log: turn and step brackets, tool call/result pairing,
//! provenance shape, and tool exchanges split by a replace. A log that breaks
//! them still folds into a surface, but derives transcripts that providers
//! reject, or that lie about where a message came from; see
//! `docs/invariants.md` for each invariant, why it exists and what breaks
//! without it.
//!
//! # The key decision: one incremental checker, two uses
//!
//! The checker has the same two-phase shape as the `SurfaceManager`: *check*
//! a candidate against the state built so far without changing it, *commit*
//! once the event has joined the log. Both entry points drive that one state
//! machine, so they cannot disagree:
//!
//! - [`check_log`] folds a whole log and returns **every** violation, sorted
//!   by seq: what `palimpsest validate` reports.
//! - [`InvariantGuard`] implements [`AppendGuard`] so a `Session` vetoes the
//!   **first** bad append (`AppendError::Vetoed`) and changes nothing. That
//!   is dev mode: [`DevMode`] turns it on in debug builds by default and
//!   lets release builds switch it with `PALIMPSEST_DEV_MODE`.
//!
//! Violations are data ([`Violation`]: a stable code from [`CODES`], the
//! seq, a message for people), never panics: a checker that fails on odd
//! input would be useless for finding odd input.
//!
//! # The whole check of one session: [`Report`]
//!
//! [`Report`] is what `palimpsest validate` runs, for any validator to
//! call: it reads a JSONL file ([`Report::check_jsonl`]) or takes a
//! store's events ([`Report::check_events`]), applies every rule of
//! sections 1, 2 and 6 up to the first violation, then [`check_log`] over
//! the events accepted. Each [`Finding`] has a stable code and a typed
//! [`Position`] (a seq, and a line only in a file); the report serializes
//! to the object `validate --json` prints.
//!
//! # Example
//!
//! ```
//! use palimpsest_core_session::{jsonl::JsonlLog, Session};
//! use palimpsest_invariants::{check_log, DevMode};
//!
//! // A turn/end while step 1 is still open.
//! let text = r#"{"type":"session","version":0,"id":"s1","createdAt":0}
//! {"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}
//! {"seq":1,"time":2,"type":"step/start","data":{"turn":1,"step":1}}
//! {"seq":2,"time":3,"type":"turn/end","data":{"turn":1,"reason":{"kind":"completed"}}}
//! "#;
//! let log = JsonlLog::parse(text.as_bytes())?;
//!
//! // Reported, all at once, by seq:
//! let violations = check_log(&log.events);
//! assert_eq!(violations.len(), 1);
//! assert_eq!((violations[0].code, violations[0].seq), ("turn-end-step-open", 2));
//!
//! // Fatal in dev mode: the guarded session refuses the log at seq 2.
//! let err = Session::from_log_guarded(log.header, log.events, DevMode::On.guard()).unwrap_err();
//! assert_eq!((err.code(), err.seq()), ("turn-end-step-open", Some(2)));
//! # Ok::<(), palimpsest_core_session::LoadError>(())
//! ```
//!
//! # Minimum supported Rust version
//!
//! The workspace's `rust-version` (1.95).
//!
//! [`AppendGuard`]: palimpsest_core_session::AppendGuard

use std::fmt;

use palimpsest_core_session::{Event, SessionHeader, SessionView, SurfaceManager};

mod checker;
pub mod codes;
mod guard;
pub mod report;

pub use codes::CODES;
pub use guard::{DevMode, InvariantGuard, DEV_MODE_ENV};
pub use report::{Finding, JsonlCheck, Position, Report, ReportBuilder, Retain};

use checker::Checker;

/// One broken invariant: which, where, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Stable code, one of [`CODES`] (e.g. `turn-already-open`).
    pub code: &'static str,
    /// Seq of the event that broke it.
    pub seq: u64,
    /// What was wrong, for people; the wording may change.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at seq {}: {}", self.code, self.seq, self.message)
    }
}

/// Every section-2a violation of a whole log, sorted by seq (violations of
/// one event keep a fixed order).
///
/// `events` must satisfy section 2 (pass the valid prefix of a log): the
/// function folds the surface itself with the `SurfaceManager`, and stops at
/// the first event the surface rules refuse, returning what it found before
/// it. Checking carries on past a violation: each event takes effect as
/// written (a second `turn/start` opens its turn, a mismatched `turn/end`
/// still closes the open one), so one mistake is reported once, not at every
/// event after it.
pub fn check_log(events: &[Event]) -> Vec<Violation> {
    let header = SessionHeader::new("", 0);
    let mut surface = SurfaceManager::new();
    let mut checker = Checker::default();
    let mut out = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let before = &events[..i];
        let step = match surface.plan(before, event) {
            Ok(step) => step,
            Err(error) => {
                tracing::warn!(seq = event.seq(), %error, "check_log: stopped at a section-2 violation");
                break;
            }
        };
        out.extend(checker.check(SessionView::of(&header, before, &surface), event));
        surface.apply(event.seq(), step);
        checker.commit(SessionView::of(&header, &events[..=i], &surface), event);
    }
    out.sort_by_key(|v| v.seq);
    out
}

/// The generator of core-session's resume equivalence tests, for the
/// report's own property test (core-session may depend on no palimpsest
/// crate, so the generator lives there and is included here).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../core-session/tests/support/resume_ops.rs"]
mod resume_ops;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
