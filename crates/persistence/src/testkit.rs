//! The contract test kit: the checks that prove a [`SessionStore`] backend
//! keeps the contract of [`SessionStore`] and of the session format.
//!
//! A backend implements [`StoreFactory`] (how to open the store at one fixed
//! location, again and again) and runs every check with one macro call:
//!
//! ```
//! use palimpsest_persistence::testkit::MemoryFactory;
//!
//! // In `tests/contract.rs` of your backend (here: the in-memory store).
//! // One `#[test]` per check, each with a fresh factory.
//! palimpsest_persistence::store_contract_tests!(MemoryFactory::default());
//! # fn main() {}
//! ```
//!
//! or with one function call, [`run_all`] (given a function making fresh
//! factories), which stops at the first failing check and names it. Each check is also a public function taking
//! `&dyn StoreFactory`, so a backend can run one alone.
//!
//! # What is checked
//!
//! Stored data comes back exactly as appended: every core event kind,
//! `sourceEventSeqs` absent vs `[]` vs non-empty, both `surfaceOp` forms,
//! plugin data of any JSON shape, unknown keys inside known payloads,
//! unicode and escapes, multi-megabyte payloads; each event compares equal
//! *and* has the same canonical JSON text. Appends are atomic and contiguous
//! (`conflict`, nothing written); unknown ids are `not-found`; a second
//! create is `already-exists`; list, delete, reopen after drop, independence
//! of sessions, unusual session ids (`invalid-id` or a working session, never
//! a mix-up), a second handle on the same location, threads appending at
//! once through one handle (nothing lost, nothing twice), holds (one writer per
//! session: a second holder and its appends refused, takeover of an expired
//! lease and the fence against its first holder, a release of another
//! holder's or an earlier grant's hold freeing nothing, a renewal after a
//! delete `not-found`), torn tails (for backends
//! that have them) and [`DurableSession`] over the store. Search
//! ([`SessionStore::search`]): message words found, chunks not, any case,
//! every term, shadowed messages too, the order and the limit, the empty
//! query refused, appends and deletes followed, words of every script
//! (vowel signs, harakat, circled letters) as the reference cuts them, and
//! hits identical to the reference scan on a random-ish corpus. Checkpoints
//! ([`SessionStore::save_checkpoint`], [`SessionStore::load_resumable`]): a
//! saved one is used, with only the events after it, and a session opened
//! from it is the whole log's; a stale one gives the right tail; one of
//! another session, from before a re-creation, under another header or
//! damaged is ignored.
//!
//! The checks panic (they are test assertions) with a message naming what
//! went wrong; they never print.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use palimpsest_core_session::{Event, EventType, Session, SessionHeader, SurfaceOp};

use crate::{Durability, DurableSession, LoadSink, MemoryStore, SessionStore, SessionSummary, StoreError};

mod checkpoints;
mod holds;
mod rng;
mod search;
pub use checkpoints::{
    a_saved_checkpoint_is_used_and_opens_the_same_session, a_stale_checkpoint_gives_the_events_after_it,
    checkpoints_that_do_not_match_are_ignored,
};
pub use holds::{
    an_expired_hold_is_taken_over_and_its_holder_fenced_out, holds_keep_a_second_writer_out,
    only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed,
};
pub use rng::SplitMix64;
pub use search::{
    search_agrees_with_the_reference_scan, search_finds_message_words_not_chunks,
    search_finds_shadowed_messages, search_follows_appends_and_deletes,
    search_is_case_insensitive_and_needs_every_term, search_orders_by_last_activity_then_seq_and_limits,
    search_refuses_an_empty_query,
};

/// How the kit reaches a backend: opens the store at one fixed location.
///
/// Every check gets its own factory (the [`store_contract_tests!`](crate::store_contract_tests) macro
/// evaluates the factory expression once per test), so a factory should
/// point at a fresh, empty location, e.g. a new temporary directory.
pub trait StoreFactory {
    /// Opens the store at this factory's location; called again to test reopen-after-drop.
    fn open(&self) -> Box<dyn SessionStore>;

    /// Appends raw bytes after a session's stored records to simulate a torn write.
    /// Return false if the backend has no torn tails (the torn-tail checks
    /// then return [`Outcome::Skipped`]).
    ///
    /// The kit calls this only while no store opened by this factory is
    /// alive, as after a crash of the writing process.
    fn append_raw_tail(&self, _session_id: &str, _bytes: &[u8]) -> bool {
        false
    }

    /// Makes the next write of the stores this factory opened fail with an
    /// I/O error, as a full disk, a failed fsync or a connection lost
    /// mid-commit would. Return false if the backend cannot (the fault
    /// check then returns [`Outcome::Skipped`]).
    ///
    /// A backend usually passes one [`WriteFault`] to every store it opens
    /// and [arms](WriteFault::arm) it here.
    fn fail_next_write(&self) -> bool {
        false
    }

    /// Damages the saved checkpoint of `session_id` in storage (cuts it
    /// short, as a torn write or a bad disk would), so the checkpoint check
    /// can see it ignored. Return false if the backend cannot (the check
    /// then saves a checkpoint that does not match the log instead).
    ///
    /// The kit calls this only while no store opened by this factory is
    /// writing.
    fn damage_checkpoint(&self, _session_id: &str) -> bool {
        false
    }
}

impl<F: StoreFactory + ?Sized> StoreFactory for &F {
    fn open(&self) -> Box<dyn SessionStore> {
        (**self).open()
    }

    fn append_raw_tail(&self, session_id: &str, bytes: &[u8]) -> bool {
        (**self).append_raw_tail(session_id, bytes)
    }

    fn fail_next_write(&self) -> bool {
        (**self).fail_next_write()
    }

    fn damage_checkpoint(&self, session_id: &str) -> bool {
        (**self).damage_checkpoint(session_id)
    }
}

/// A switch that makes a backend's next write fail with an I/O error: the
/// seam the kit's fault check ([`io_errors_never_store_a_batch_in_part_or_twice`])
/// reaches a backend through. Clones share the switch.
///
/// A backend takes one (behind its own `testkit` feature) and, at the
/// start of each write, asks [`take`](WriteFault::take): when it says
/// `true`, the write fails as that backend's real I/O errors do (part of
/// the batch reaching the file, a transaction whose commit is unknown).
///
/// ```
/// use palimpsest_persistence::testkit::WriteFault;
///
/// let fault = WriteFault::default();
/// let seen_by_the_store = fault.clone();
/// assert!(!seen_by_the_store.take());
/// fault.arm();
/// assert!(seen_by_the_store.take());
/// assert!(!seen_by_the_store.take(), "one write fails, then it is disarmed");
/// ```
#[derive(Debug, Clone, Default)]
pub struct WriteFault(Arc<std::sync::atomic::AtomicBool>);

impl WriteFault {
    /// Makes the next write fail.
    pub fn arm(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether this write must fail; disarms the switch.
    pub fn take(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
    }
}

/// A factory over one shared [`MemoryStore`]: every [`open`](StoreFactory::open)
/// returns a handle on the same sessions, so "reopen after drop" holds. It
/// has no torn tails.
#[derive(Debug, Default, Clone)]
pub struct MemoryFactory {
    store: Arc<MemoryStore>,
}

impl StoreFactory for MemoryFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        Box::new(self.store.clone())
    }
}

/// What a contract check did: it ran (and passed: a failing check panics),
/// or it could not run against this backend and says why.
///
/// A backend without torn tails (a database) skips the torn-tail checks; a
/// factory that cannot inject faults skips the I/O-error check. The
/// [`store_contract_tests!`](crate::store_contract_tests) tests print
/// `skipped: <why>` to stderr, and [`run_all`] returns the skipped checks, so
/// a skip is never mistaken for a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The check ran and passed.
    Ran,
    /// The check did not run; the reason.
    Skipped(&'static str),
}

/// Why the torn-tail checks skip.
const NO_TORN_TAILS: &str = "the backend has no torn tails (`StoreFactory::append_raw_tail` returned false)";

/// A contract check.
pub type Check = fn(&dyn StoreFactory) -> Outcome;

/// Every check, by name, in the order [`run_all`] and [`store_contract_tests!`](crate::store_contract_tests) run them.
pub const CHECKS: &[(&str, Check)] = &[
    ("round_trips_every_core_event_kind", round_trips_every_core_event_kind),
    (
        "source_event_seqs_absent_empty_and_listed_stay_distinct",
        source_event_seqs_absent_empty_and_listed_stay_distinct,
    ),
    ("both_surface_op_forms_round_trip", both_surface_op_forms_round_trip),
    ("plugin_events_keep_arbitrary_json_data", plugin_events_keep_arbitrary_json_data),
    ("unknown_payload_keys_are_kept_verbatim", unknown_payload_keys_are_kept_verbatim),
    ("unicode_and_escapes_round_trip", unicode_and_escapes_round_trip),
    ("very_large_payloads_round_trip", very_large_payloads_round_trip),
    ("batch_is_all_or_nothing", batch_is_all_or_nothing),
    ("non_contiguous_appends_conflict", non_contiguous_appends_conflict),
    ("unknown_ids_are_not_found", unknown_ids_are_not_found),
    ("create_twice_is_already_exists", create_twice_is_already_exists),
    ("create_with_events_is_all_or_nothing", create_with_events_is_all_or_nothing),
    ("io_errors_never_store_a_batch_in_part_or_twice", io_errors_never_store_a_batch_in_part_or_twice),
    ("load_into_hands_over_what_load_returns", load_into_hands_over_what_load_returns),
    ("summary_agrees_with_the_loaded_log", summary_agrees_with_the_loaded_log),
    ("list_returns_every_header", list_returns_every_header),
    ("delete_then_load_is_not_found", delete_then_load_is_not_found),
    (
        "delete_many_deletes_each_and_says_which_it_could_not",
        delete_many_deletes_each_and_says_which_it_could_not,
    ),
    ("reopen_after_drop_sees_everything", reopen_after_drop_sees_everything),
    ("sessions_are_independent", sessions_are_independent),
    ("unusual_ids_work_or_are_refused_cleanly", unusual_ids_work_or_are_refused_cleanly),
    ("second_handle_never_breaks_the_log", second_handle_never_breaks_the_log),
    ("threads_sharing_one_handle_lose_nothing", threads_sharing_one_handle_lose_nothing),
    ("holds_keep_a_second_writer_out", holds_keep_a_second_writer_out),
    (
        "an_expired_hold_is_taken_over_and_its_holder_fenced_out",
        an_expired_hold_is_taken_over_and_its_holder_fenced_out,
    ),
    (
        "only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed",
        only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed,
    ),
    (
        "torn_tail_is_dropped_reported_and_cut_off_if_supported",
        torn_tail_is_dropped_reported_and_cut_off_if_supported,
    ),
    (
        "unterminated_whole_last_record_is_kept_if_supported",
        unterminated_whole_last_record_is_kept_if_supported,
    ),
    ("durable_open_revalidates_the_stored_log", durable_open_revalidates_the_stored_log),
    ("durable_refused_append_writes_nothing", durable_refused_append_writes_nothing),
    (
        "a_saved_checkpoint_is_used_and_opens_the_same_session",
        a_saved_checkpoint_is_used_and_opens_the_same_session,
    ),
    ("a_stale_checkpoint_gives_the_events_after_it", a_stale_checkpoint_gives_the_events_after_it),
    ("checkpoints_that_do_not_match_are_ignored", checkpoints_that_do_not_match_are_ignored),
    ("search_finds_message_words_not_chunks", search_finds_message_words_not_chunks),
    ("search_is_case_insensitive_and_needs_every_term", search_is_case_insensitive_and_needs_every_term),
    ("search_finds_shadowed_messages", search_finds_shadowed_messages),
    (
        "search_orders_by_last_activity_then_seq_and_limits",
        search_orders_by_last_activity_then_seq_and_limits,
    ),
    ("search_refuses_an_empty_query", search_refuses_an_empty_query),
    ("search_follows_appends_and_deletes", search_follows_appends_and_deletes),
    ("search_agrees_with_the_reference_scan", search_agrees_with_the_reference_scan),
];

/// Runs every check in [`CHECKS`], each with a fresh factory from
/// `new_factory` (the checks assume an empty store); panics at the first
/// failure, naming the check. Returns the checks that were skipped, each
/// with its reason, in [`CHECKS`] order.
///
/// ```
/// use palimpsest_persistence::testkit::{run_all, MemoryFactory};
///
/// // The memory store has no torn tails and no fault injection.
/// let skipped: Vec<&str> = run_all(MemoryFactory::default).iter().map(|(name, _)| *name).collect();
/// assert_eq!(skipped, [
///     "io_errors_never_store_a_batch_in_part_or_twice",
///     "holds_keep_a_second_writer_out",
///     "an_expired_hold_is_taken_over_and_its_holder_fenced_out",
///     "only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed",
///     "torn_tail_is_dropped_reported_and_cut_off_if_supported",
///     "unterminated_whole_last_record_is_kept_if_supported",
///     "a_saved_checkpoint_is_used_and_opens_the_same_session",
///     "a_stale_checkpoint_gives_the_events_after_it",
///     "checkpoints_that_do_not_match_are_ignored",
/// ]);
/// ```
pub fn run_all<F: StoreFactory>(mut new_factory: impl FnMut() -> F) -> Vec<(&'static str, &'static str)> {
    let mut skipped = Vec::new();
    for (name, check) in CHECKS {
        let factory = new_factory();
        match catch_unwind(AssertUnwindSafe(|| check(&factory))) {
            Ok(Outcome::Ran) => {}
            Ok(Outcome::Skipped(why)) => skipped.push((*name, why)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                panic!("contract check `{name}` failed: {msg}");
            }
        }
    }
    skipped
}

/// Runs every contract check as its own `#[test]`, evaluating `$factory`
/// (an expression whose value implements
/// [`StoreFactory`](crate::testkit::StoreFactory)) afresh for each.
///
/// Invoke it once per module: it defines one test function per check, named
/// after the check, plus `store_contract_tests_cover_every_check`. A check
/// that [skips](crate::testkit::Outcome::Skipped) passes and prints
/// `skipped: <why>` to stderr.
///
/// ```
/// use palimpsest_persistence::testkit::MemoryFactory;
/// palimpsest_persistence::store_contract_tests!(MemoryFactory::default());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr) => {
        $crate::__store_contract_tests!(
            $factory;
            round_trips_every_core_event_kind,
            source_event_seqs_absent_empty_and_listed_stay_distinct,
            both_surface_op_forms_round_trip,
            plugin_events_keep_arbitrary_json_data,
            unknown_payload_keys_are_kept_verbatim,
            unicode_and_escapes_round_trip,
            very_large_payloads_round_trip,
            batch_is_all_or_nothing,
            non_contiguous_appends_conflict,
            unknown_ids_are_not_found,
            create_twice_is_already_exists,
            create_with_events_is_all_or_nothing,
            io_errors_never_store_a_batch_in_part_or_twice,
            load_into_hands_over_what_load_returns,
            summary_agrees_with_the_loaded_log,
            list_returns_every_header,
            delete_then_load_is_not_found,
            delete_many_deletes_each_and_says_which_it_could_not,
            reopen_after_drop_sees_everything,
            sessions_are_independent,
            unusual_ids_work_or_are_refused_cleanly,
            second_handle_never_breaks_the_log,
            threads_sharing_one_handle_lose_nothing,
            holds_keep_a_second_writer_out,
            an_expired_hold_is_taken_over_and_its_holder_fenced_out,
            only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed,
            torn_tail_is_dropped_reported_and_cut_off_if_supported,
            unterminated_whole_last_record_is_kept_if_supported,
            durable_open_revalidates_the_stored_log,
            durable_refused_append_writes_nothing,
            a_saved_checkpoint_is_used_and_opens_the_same_session,
            a_stale_checkpoint_gives_the_events_after_it,
            checkpoints_that_do_not_match_are_ignored,
            search_finds_message_words_not_chunks,
            search_is_case_insensitive_and_needs_every_term,
            search_finds_shadowed_messages,
            search_orders_by_last_activity_then_seq_and_limits,
            search_refuses_an_empty_query,
            search_follows_appends_and_deletes,
            search_agrees_with_the_reference_scan,
        );
    };
}

/// Implementation detail of [`store_contract_tests!`](crate::store_contract_tests).
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_tests {
    ($factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            #[allow(clippy::print_stderr)]
            fn $check() {
                let factory = $factory;
                if let $crate::testkit::Outcome::Skipped(why) = $crate::testkit::$check(&factory) {
                    // libtest has no run-time skip: say it where `--nocapture` shows it.
                    ::std::eprintln!("skipped: {why}");
                }
            }
        )*

        #[test]
        fn store_contract_tests_cover_every_check() {
            let generated: &[&str] = &[$(stringify!($check)),*];
            let all: ::std::vec::Vec<&str> = $crate::testkit::CHECKS.iter().map(|(name, _)| *name).collect();
            assert_eq!(generated, all.as_slice(), "store_contract_tests! is out of date with testkit::CHECKS");
        }
    };
}

// ---------------------------------------------------------------------------
// Sample data
// ---------------------------------------------------------------------------

/// `time` of the first sample event (2026-01-01T00:00:00Z).
const T0: u64 = 1_767_225_600_000;

/// Builds an event from its JSON text; a failure is a bug in the kit.
fn ev(json: &str) -> Event {
    match Event::from_json(json) {
        Ok(e) => e,
        Err(e) => panic!("testkit bug: sample event refused ({}): {e}\n{}", e.code(), clip(json)),
    }
}

/// Builds event `seq` of type `ty` with `data` (JSON text) and the optional
/// envelope keys in `tail` (e.g. `,"surfaceOp":"append"`).
fn at(seq: u64, ty: &str, data: &str, tail: &str) -> Event {
    ev(&format!(r#"{{"seq":{seq},"time":{},"type":"{ty}","data":{data}{tail}}}"#, T0 + seq * 10))
}

/// A plugin event: type `kit/tick`, data `{"n":seq}`.
fn tick(seq: u64) -> Event {
    at(seq, "kit/tick", &format!(r#"{{"n":{seq}}}"#), "")
}

fn ticks(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(tick).collect()
}

/// A header with a fixed creation time.
fn header(id: &str) -> SessionHeader {
    SessionHeader::new(id, T0)
}

const MODEL: &str = r#"{"kind":"model","provider":"kit","model":"kit-1"}"#;

/// A valid session log (every rule of sections 1 and 2 holds) that uses
/// every core event type, every block, source, chunk and turn-end kind, the
/// optional payload keys, `sourceEventSeqs` absent, `[]` and listed, both
/// `surfaceOp` forms and plugin events.
pub fn sample_events() -> Vec<Event> {
    let a = r#","surfaceOp":"append""#;
    let user = |id: &str, text: &str| {
        format!(
            r#"{{"id":"{id}","role":"user","content":[{{"type":"text","text":"{text}"}}],"source":{{"kind":"user"}}}}"#
        )
    };
    vec![
        at(0, "turn/start", r#"{"turn":1}"#, ""),
        at(
            1,
            "user/message",
            r#"{"turn":1,"message":{"id":"u1","role":"user","content":[{"type":"text","text":"Read notes.txt and describe the picture."},{"type":"image","mediaType":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="}],"source":{"kind":"user"}}}"#,
            a,
        ),
        at(2, "step/start", r#"{"turn":1,"step":1}"#, ""),
        at(
            3,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"The user wants the file."}}"#,
            "",
        ),
        at(
            4,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"Reading it."}}"#,
            "",
        ),
        at(
            5,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":2,"id":"call_1","name":"read_file","argumentsDelta":"{\"path\":"}}"#,
            "",
        ),
        at(
            6,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":2,"id":"call_1","argumentsDelta":"\"notes.txt\"}"}}"#,
            "",
        ),
        at(
            7,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"usage","inputTokens":120,"outputTokens":30,"cachedInputTokens":100,"reasoningTokens":12}}"#,
            "",
        ),
        at(
            8,
            "assistant/message",
            &format!(
                r#"{{"turn":1,"step":1,"message":{{"id":"a1","role":"assistant","content":[{{"type":"reasoning","text":"The user wants the file.","signature":"sig-1"}},{{"type":"text","text":"Reading it."}},{{"type":"tool-call","id":"call_1","name":"read_file","arguments":"{{\"path\":\"notes.txt\"}}"}}],"source":{MODEL}}},"usage":{{"inputTokens":120,"outputTokens":30,"cachedInputTokens":100,"reasoningTokens":12}}}}"#
            ),
            r#","sourceEventSeqs":[3,4,5,6,7],"surfaceOp":"append""#,
        ),
        at(
            9,
            "tool/call",
            r#"{"turn":1,"step":1,"callId":"call_1","name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}"#,
            "",
        ),
        at(
            10,
            "tool/result",
            r#"{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"call_1","isError":false,"content":[{"type":"text","text":"buy milk"}]}],"source":{"kind":"tool","callId":"call_1"}}}"#,
            r#","sourceEventSeqs":[9],"surfaceOp":"append""#,
        ),
        at(11, "step/end", r#"{"turn":1,"step":1}"#, ""),
        at(
            12,
            "context/message",
            r#"{"message":{"id":"ctx1","role":"user","content":[{"type":"text","text":"notes.txt changed on disk"}],"source":{"kind":"plugin","plugin":"watcher"}}}"#,
            a,
        ),
        at(13, "step/start", r#"{"turn":1,"step":2}"#, ""),
        at(
            14,
            "assistant/message",
            &format!(
                r#"{{"turn":1,"step":2,"message":{{"id":"a2","role":"assistant","content":[],"source":{MODEL}}},"usage":{{"inputTokens":140,"outputTokens":0}}}}"#
            ),
            r#","sourceEventSeqs":[],"surfaceOp":"append""#,
        ),
        at(15, "step/end", r#"{"turn":1,"step":2}"#, ""),
        at(16, "turn/end", r#"{"turn":1,"reason":{"kind":"completed"}}"#, ""),
        at(17, "turn/start", r#"{"turn":2}"#, ""),
        at(18, "user/message", &format!(r#"{{"message":{}}}"#, user("u2", "Stop.")), a),
        at(19, "steering/message", &format!(r#"{{"message":{}}}"#, user("s1", "Actually, go on.")), a),
        at(
            20,
            "tool/result",
            r#"{"turn":1,"step":1,"message":{"id":"r1-pruned","role":"user","content":[{"type":"tool-result","toolCallId":"call_1","isError":false,"content":[{"type":"text","text":"[pruned]"}]}],"source":{"kind":"tool","callId":"call_1"}}}"#,
            r#","sourceEventSeqs":[10],"surfaceOp":{"op":"replace","start":10,"end":10}"#,
        ),
        at(21, "turn/end", r#"{"turn":2,"reason":{"kind":"aborted","reason":"user pressed stop"}}"#, ""),
        at(22, "turn/start", r#"{"turn":3}"#, ""),
        at(
            23,
            "turn/end",
            r#"{"turn":3,"reason":{"kind":"error","error":{"message":"provider unavailable","code":"PROVIDER_DOWN"}}}"#,
            "",
        ),
        at(24, "turn/start", r#"{"turn":4}"#, ""),
        at(25, "step/start", r#"{"turn":4,"step":1}"#, ""),
        at(
            26,
            "assistant/message",
            &format!(
                r#"{{"turn":4,"step":1,"message":{{"id":"a3","role":"assistant","content":[{{"type":"text","text":"The picture shows"}}],"source":{MODEL}}},"interrupted":true}}"#
            ),
            a,
        ),
        at(27, "step/end", r#"{"turn":4,"step":1}"#, ""),
        at(28, "turn/end", r#"{"turn":4,"reason":{"kind":"max-tokens"}}"#, ""),
        at(29, "turn/start", r#"{"turn":5}"#, ""),
        at(30, "step/start", r#"{"turn":5,"step":1}"#, ""),
        at(
            31,
            "assistant/message",
            &format!(
                r#"{{"turn":5,"step":1,"message":{{"id":"a4","role":"assistant","content":[{{"type":"tool-call","id":"call_2","name":"list_dir","arguments":"{{}}"}}],"source":{MODEL}}}}}"#
            ),
            a,
        ),
        at(
            32,
            "tool/result",
            r#"{"turn":5,"step":1,"message":{"id":"r2","role":"user","content":[{"type":"tool-result","toolCallId":"call_2","isError":true,"content":[{"type":"text","text":"the tool never started"}]}],"source":{"kind":"tool","callId":"call_2"}},"error":{"name":"ToolNotStarted","code":"TOOL_NOT_STARTED"}}"#,
            r#","sourceEventSeqs":[31],"surfaceOp":"append""#,
        ),
        at(33, "step/end", r#"{"turn":5,"step":1}"#, ""),
        at(34, "turn/end", r#"{"turn":5,"reason":{"kind":"interrupted"}}"#, ""),
        at(35, "compaction/start", r#"{"reason":"budget","estimatedTokens":9000}"#, ""),
        at(
            36,
            "user/message",
            r#"{"message":{"id":"sum1","role":"user","content":[{"type":"text","text":"Summary: the user asked about notes.txt."}],"source":{"kind":"plugin","plugin":"compaction"}}}"#,
            r#","sourceEventSeqs":[35,1,8,20,12,14,18,19],"surfaceOp":{"op":"replace","start":1,"end":19}"#,
        ),
        at(37, "compaction/end", r#"{"summarySeq":36}"#, ""),
    ]
}

/// The surface [`sample_events`] leaves.
pub const SAMPLE_SURFACE: &[u64] = &[36, 26, 31, 32];

// ---------------------------------------------------------------------------
// Assertion helpers
// ---------------------------------------------------------------------------

/// At most 160 characters of `s`, for panic messages about huge payloads.
fn clip(s: &str) -> String {
    match s.char_indices().nth(160) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], s.len()),
        None => s.to_owned(),
    }
}

#[track_caller]
/// Asserts that [`SessionStore::summaries`] says what
/// [`list`](SessionStore::list) and [`summary`](SessionStore::summary) of
/// each session say: the same sessions in the same order, each summary
/// equal (its header the listed one), and where `summary` fails the same
/// error, code and message. Returns the ids whose summary is an error.
/// For a backend's own tests of stores too large or too damaged for the
/// kit's sample.
pub fn summaries_match_each_summary(store: &dyn SessionStore) -> Vec<String> {
    let all = must(store.summaries(), "summaries");
    let listed = must(store.list(), "list");
    let ids =
        |headers: &mut dyn Iterator<Item = &SessionHeader>| headers.map(|h| h.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&mut all.iter().map(|(h, _)| h)),
        ids(&mut listed.iter()),
        "summaries() lists the sessions in list()'s order"
    );
    let mut broken = Vec::new();
    for ((h, summary), listed) in all.iter().zip(&listed) {
        assert_eq!(h, listed, "summaries(): the header of {}", h.id);
        match (summary, store.summary(&h.id)) {
            (Ok(summary), Ok(one)) => {
                assert_eq!(&summary.header, h, "summaries(): the header of {}", h.id);
                assert_eq!(summary, &one, "summaries() and summary() differ for {}", h.id);
            }
            (Err(e), Err(one)) => {
                assert_eq!((e.code(), e.to_string()), (one.code(), one.to_string()), "{}", h.id);
                broken.push(h.id.clone());
            }
            (summary, one) => panic!("{}: summaries() gave {summary:?}, summary() {one:?}", h.id),
        }
    }
    broken
}

fn must<T>(result: Result<T, StoreError>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error [{}] {e}", e.code()),
    }
}

#[track_caller]
fn must_fail<T: std::fmt::Debug>(result: Result<T, StoreError>, code: &str, what: &str) -> StoreError {
    match result {
        Ok(v) => panic!("{what}: expected `{code}`, got Ok({})", clip(&format!("{v:?}"))),
        Err(e) if e.code() == code => e,
        Err(e) => panic!("{what}: expected `{code}`, got [{}] {e}", e.code()),
    }
}

/// The loaded events are the appended ones: equal, and the same JSON text.
#[track_caller]
fn assert_same_events(loaded: &[Event], expected: &[Event], what: &str) {
    for (i, (l, e)) in loaded.iter().zip(expected).enumerate() {
        let (lj, ej) = (l.to_json(), e.to_json());
        assert!(
            lj == ej,
            "{what}: event #{i} has other JSON text\n loaded: {}\n stored: {}",
            clip(&lj),
            clip(&ej)
        );
        assert!(l == e, "{what}: event #{i} differs (same text, but not equal): {}", clip(&lj));
    }
    assert_eq!(loaded.len(), expected.len(), "{what}: wrong number of events loaded");
}

/// Loads `id` and checks header, events and an empty report.
#[track_caller]
fn assert_stored(store: &dyn SessionStore, header: &SessionHeader, events: &[Event], what: &str) {
    let stored = must(store.load(&header.id), &format!("{what}: load {:?}", clip(&header.id)));
    assert_eq!(&stored.header, header, "{what}: header changed");
    assert_same_events(&stored.events, events, what);
    assert_eq!(stored.report, Default::default(), "{what}: load reported something on a clean log");
}

fn create(store: &dyn SessionStore, header: &SessionHeader) {
    must(store.create(header), &format!("create {:?}", clip(&header.id)));
}

fn append(store: &dyn SessionStore, id: &str, events: &[Event]) {
    let first = events.first().map(Event::seq);
    must(
        store.append(id, events),
        &format!("append {} events from seq {first:?} to {:?}", events.len(), clip(id)),
    );
}

fn sorted_headers(mut headers: Vec<SessionHeader>) -> Vec<SessionHeader> {
    headers.sort_by(|a, b| a.id.cmp(&b.id));
    headers
}

// ---------------------------------------------------------------------------
// Checks: faithful storage
// ---------------------------------------------------------------------------

/// A log using every core event type (and every payload variant) comes back
/// equal and with the same JSON text, appended in batches of 1 to 5 events,
/// both from the same handle and after reopening.
pub fn round_trips_every_core_event_kind(factory: &dyn StoreFactory) -> Outcome {
    let events = sample_events();
    let kinds: BTreeSet<&str> = events.iter().map(|e| e.event_type().as_str()).collect();
    for core in [
        EventType::TurnStart,
        EventType::TurnEnd,
        EventType::StepStart,
        EventType::StepEnd,
        EventType::UserMessage,
        EventType::ContextMessage,
        EventType::SteeringMessage,
        EventType::AssistantChunk,
        EventType::AssistantMessage,
        EventType::ToolCall,
        EventType::ToolResult,
    ] {
        assert!(kinds.contains(core.as_str()), "testkit bug: sample lacks {core}");
    }
    let h = SessionHeader {
        cwd: Some("/work/kit".into()),
        parent_session: Some("kit-parent".into()),
        seed_length: Some(0),
        ..header("kit-every-kind")
    };
    let store = factory.open();
    create(&*store, &h);
    assert_stored(&*store, &h, &[], "fresh session");
    let mut at = 0;
    let mut size = 1;
    while at < events.len() {
        let end = (at + size).min(events.len());
        append(&*store, &h.id, &events[at..end]);
        at = end;
        size = size % 5 + 1;
    }
    must(store.sync(&h.id), "sync");
    assert_stored(&*store, &h, &events, "same handle");
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &h, &events, "after reopen");
    Outcome::Ran
}

/// `sourceEventSeqs` absent, `[]` and a list are three different things, and
/// each comes back as it was (absent stays absent, never `[]` or `null`).
pub fn source_event_seqs_absent_empty_and_listed_stay_distinct(factory: &dyn StoreFactory) -> Outcome {
    let msg = |id: &str| {
        format!(
            r#"{{"turn":1,"step":1,"message":{{"id":"{id}","role":"assistant","content":[],"source":{MODEL}}}}}"#
        )
    };
    let events = vec![
        at(
            0,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
            "",
        ),
        at(
            1,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"y"}}"#,
            "",
        ),
        at(2, "assistant/message", &msg("absent"), r#","surfaceOp":"append""#),
        at(3, "assistant/message", &msg("empty"), r#","sourceEventSeqs":[],"surfaceOp":"append""#),
        at(4, "assistant/message", &msg("listed"), r#","sourceEventSeqs":[0,1],"surfaceOp":"append""#),
        at(5, "assistant/message", &msg("one"), r#","sourceEventSeqs":[0],"surfaceOp":"append""#),
    ];
    let h = header("kit-sources");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &events[..3]);
    append(&*store, &h.id, &events[3..]);
    for store in [store, factory.open()] {
        let loaded = must(store.load(&h.id), "load");
        assert_same_events(&loaded.events, &events, "sourceEventSeqs");
        let got: Vec<Option<&[u64]>> = loaded.events.iter().map(Event::source_event_seqs).collect();
        assert_eq!(got, [None, None, None, Some(&[][..]), Some(&[0, 1][..]), Some(&[0][..])]);
        assert!(!loaded.events[2].to_json().contains("sourceEventSeqs"), "an absent list was written");
        assert!(loaded.events[3].to_json().contains(r#""sourceEventSeqs":[]"#), "an empty list was lost");
    }
    Outcome::Ran
}

/// `"append"` and `{"op":"replace","start":S,"end":E}` both come back as they
/// were, and events off the surface have no `surfaceOp`.
pub fn both_surface_op_forms_round_trip(factory: &dyn StoreFactory) -> Outcome {
    let all = sample_events();
    let events = &all[..21]; // through the replacing tool/result at seq 20
    let h = header("kit-surface-op");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, events);
    let loaded = must(store.load(&h.id), "load");
    assert_same_events(&loaded.events, events, "surfaceOp");
    assert_eq!(loaded.events[1].surface_op(), Some(SurfaceOp::Append));
    assert_eq!(loaded.events[20].surface_op(), Some(SurfaceOp::Replace { start: 10, end: 10 }));
    assert_eq!(loaded.events[0].surface_op(), None);
    assert!(loaded.events[20].to_json().ends_with(r#""surfaceOp":{"op":"replace","start":10,"end":10}}"#));
    let session = Session::from_log(h.clone(), loaded.events)
        .unwrap_or_else(|e| panic!("the loaded log no longer holds: [{}] {e}", e.code()));
    assert_eq!(session.surface(), &[1, 8, 20, 12, 14, 18, 19]);
    Outcome::Ran
}

/// Plugin `data` of any JSON shape (`null`, numbers of every form, strings,
/// booleans, empty and deep containers, unsorted keys, insignificant
/// whitespace) is kept byte for byte.
pub fn plugin_events_keep_arbitrary_json_data(factory: &dyn StoreFactory) -> Outcome {
    let deep = format!("{}0{}", "[".repeat(100), "]".repeat(100));
    let datas: Vec<String> = [
        "null",
        "true",
        "false",
        "0",
        "-0",
        "-1",
        "1.5",
        "-2.5e-7",
        "1E+300",
        "18446744073709551615",
        "-9223372036854775808",
        "123456789012345678901234567890",
        r#""""#,
        r#""a string""#,
        "[]",
        "{}",
        r#"[null,1,"two",[3],{"four":4}]"#,
        r#"{"z":1,"a":2,"m":{"y":[],"b":{}}}"#,
        r#"{ "spaced" : [ 1 , 2 ] ,	"tab": true }"#,
        // Keys that differ only in case; a key named twice is no longer
        // JSON any store may hold (core-session refuses it, contract note 11).
        r#"{"dup":1,"Dup":2}"#,
        &deep,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let events: Vec<Event> = datas
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let ty = if i % 2 == 0 { "kit/plugin" } else { "x-vendor.v2/Event Type ✓" };
            at(i as u64, ty, d, "")
        })
        .collect();
    let h = header("kit-plugin-data");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &events);
    for store in [store, factory.open()] {
        let loaded = must(store.load(&h.id), "load");
        assert_same_events(&loaded.events, &events, "plugin data");
        for (l, d) in loaded.events.iter().zip(&datas) {
            assert_eq!(l.data(), d, "plugin data not kept byte for byte");
        }
    }
    Outcome::Ran
}

/// Keys the core payload types do not know, at every level of a known
/// payload, are kept verbatim (the log is lossless).
pub fn unknown_payload_keys_are_kept_verbatim(factory: &dyn StoreFactory) -> Outcome {
    let events = vec![
        at(0, "turn/start", r#"{"turn":1,"x-trace":{"id":"t-1","sampled":true}}"#, ""),
        at(
            1,
            "user/message",
            r#"{"turn":1,"message":{"id":"u1","role":"user","content":[{"type":"text","text":"hi","cacheControl":{"type":"ephemeral"}}],"source":{"kind":"user","device":"phone"},"lang":"en"},"meta":[1,null,{"k":"v"}]}"#,
            r#","surfaceOp":"append""#,
        ),
        at(2, "step/start", r#"{"turn":1,"step":1,"budget":null}"#, ""),
        at(
            3,
            "assistant/chunk",
            r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"ok","logprob":-0.25}}"#,
            "",
        ),
        at(
            4,
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"kit","model":"kit-1","region":"eu"}},"usage":{"inputTokens":1,"outputTokens":1,"costMicros":7},"finish":"stop"}"#,
            r#","sourceEventSeqs":[3],"surfaceOp":"append""#,
        ),
        at(5, "turn/end", r#"{"turn":1,"reason":{"kind":"completed","latencyMs":812}}"#, ""),
    ];
    let h = header("kit-unknown-keys");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &events);
    for store in [store, factory.open()] {
        let loaded = must(store.load(&h.id), "load");
        assert_same_events(&loaded.events, &events, "unknown keys");
        assert!(loaded.events[1].data().contains(r#""device":"phone""#));
        assert!(loaded.events[4].data().ends_with(r#""finish":"stop"}"#));
    }
    Outcome::Ran
}

/// Unicode (astral, right-to-left, combining, BOM, line separators) and
/// JSON escapes (`\u0000`, surrogate pairs, `\/`) come back as written, in
/// the data, the session id, the header and the event type.
pub fn unicode_and_escapes_round_trip(factory: &dyn StoreFactory) -> Outcome {
    let text = "😀 𝄞 🦀👩‍👩‍👧 שלום עולם مرحبا بالعالم e\u{301} \u{feff}BOM \u{2028}\u{2029} 日本語 ∑ ÿ";
    let escaped =
        r#""nul\u0000 unit\u001f tab\t nl\n cr\r quote\" back\\ slash\/ \u00e9 \ud83d\ude00 \u2028 \uFEFF""#;
    let h = SessionHeader {
        cwd: Some("/home/zoë/проекты/日本".into()),
        parent_session: Some("родитель-🦀".into()),
        ..header("kit-unicode")
    };
    let text_json = match serde_json::to_string(text) {
        Ok(s) => s,
        Err(e) => panic!("testkit bug: {e}"),
    };
    let events = vec![
        at(
            0,
            "user/message",
            &format!(
                r#"{{"message":{{"id":"ü1","role":"user","content":[{{"type":"text","text":{text_json}}},{{"type":"text","text":{escaped}}}],"source":{{"kind":"user"}}}}}}"#
            ),
            r#","surfaceOp":"append""#,
        ),
        at(1, "kit/ünïcödé/🦀", &format!(r#"{{"ключ":{text_json},"raw":{escaped}}}"#), ""),
        at(2, "kit/escaped", escaped, ""),
    ];
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &events);
    for store in [store, factory.open()] {
        assert_stored(&*store, &h, &events, "unicode");
        let loaded = must(store.load(&h.id), "load");
        assert_eq!(loaded.events[2].data(), escaped, "escapes were rewritten");
        let listed = must(store.list(), "list");
        assert_eq!(listed, vec![h.clone()], "list must return the unicode header unchanged");
    }
    Outcome::Ran
}

/// Multi-megabyte payloads (a 4 MiB tool result, a 2 MB plugin array) and
/// a header `cwd` as long as the header's limit allows round-trip, in one batch with small events around them.
pub fn very_large_payloads_round_trip(factory: &dyn StoreFactory) -> Outcome {
    let chunk = "line of tool output with \"quotes\", a tab\t, unicode ü🦀 and a newline\n";
    let mut big_text = String::with_capacity(4 << 20);
    while big_text.len() < 4 << 20 {
        big_text.push_str(chunk);
    }
    let big_json = match serde_json::to_string(&big_text) {
        Ok(s) => s,
        Err(e) => panic!("testkit bug: {e}"),
    };
    let mut array = String::from("[");
    for i in 0..200_000u64 {
        if i > 0 {
            array.push(',');
        }
        array.push_str(&(i * 7919).to_string());
    }
    array.push(']');
    let events = vec![
        tick(0),
        at(1, "tool/call", r#"{"turn":1,"step":1,"callId":"c1","name":"cat","arguments":"{}"}"#, ""),
        at(
            2,
            "tool/result",
            &format!(
                r#"{{"turn":1,"step":1,"message":{{"id":"r1","role":"user","content":[{{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{{"type":"text","text":{big_json}}}]}}],"source":{{"kind":"tool","callId":"c1"}}}}}}"#
            ),
            r#","sourceEventSeqs":[1],"surfaceOp":"append""#,
        ),
        at(3, "kit/big-array", &array, ""),
        tick(4),
    ];
    assert!(events[2].to_json().len() > 4 << 20 && events[3].to_json().len() > 1_500_000);
    // The longest header the format allows.
    let fixed = header("kit-large").to_json().len() + r#","cwd":"""#.len();
    let cwd = "d".repeat(palimpsest_core_session::MAX_HEADER_LINE_BYTES - fixed);
    let h = SessionHeader { cwd: Some(cwd), ..header("kit-large") };
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &events[..4]);
    append(&*store, &h.id, &events[4..]);
    must(store.sync(&h.id), "sync");
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &h, &events, "large payloads");
    append(&*store, &h.id, &[tick(5)]);
    assert_eq!(must(store.load(&h.id), "load").events.len(), 6, "appending after a large event");
    Outcome::Ran
}

// ---------------------------------------------------------------------------
// Checks: atomicity and contiguity
// ---------------------------------------------------------------------------

/// A batch is all or nothing: one with a gap, a repeat or a bad first seq is
/// `conflict` and stores *none* of its events (not even the valid prefix);
/// a batch continuing the log stores all of them, and so does a large one.
pub fn batch_is_all_or_nothing(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-batch");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &ticks(0..2));
    let refused: [(&str, Vec<Event>); 4] = [
        ("gap after a valid prefix", vec![tick(2), tick(3), tick(5)]),
        ("repeated seq", vec![tick(2), tick(2)]),
        ("first seq too far", vec![tick(3), tick(4)]),
        ("first seq already stored", vec![tick(1), tick(2)]),
    ];
    for (what, batch) in &refused {
        must_fail(store.append(&h.id, batch), "conflict", what);
        assert_stored(&*store, &h, &ticks(0..2), &format!("after a refused batch ({what})"));
    }
    let err = must_fail(store.append(&h.id, &[tick(4), tick(5)]), "conflict", "first seq too far");
    match err {
        StoreError::Conflict { session_id, expected, found } => {
            assert_eq!((session_id.as_str(), expected, found), (h.id.as_str(), 2, 4), "conflict fields");
        }
        other => panic!("conflict must be StoreError::Conflict, got {other:?}"),
    }
    append(&*store, &h.id, &ticks(2..5));
    assert_stored(&*store, &h, &ticks(0..5), "a batch continuing the log");
    must(store.append(&h.id, &[]), "an empty batch");
    assert_stored(&*store, &h, &ticks(0..5), "an empty batch changes nothing");
    append(&*store, &h.id, &ticks(5..2_005));
    must_fail(store.append(&h.id, &[tick(2_005), tick(2_007)]), "conflict", "gap after a large batch");
    drop(store);
    assert_stored(&*factory.open(), &h, &ticks(0..2_005), "after reopen");
    Outcome::Ran
}

/// Appends that do not continue the log are `conflict` and change nothing:
/// a gap, a replay of an old seq, a first event that is not seq 0. The right
/// seq still works afterwards.
pub fn non_contiguous_appends_conflict(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-contiguity");
    let store = factory.open();
    create(&*store, &h);
    must_fail(store.append(&h.id, &[tick(1)]), "conflict", "first event at seq 1");
    assert_stored(&*store, &h, &[], "nothing stored");
    append(&*store, &h.id, &[tick(0)]);
    append(&*store, &h.id, &[tick(1)]);
    append(&*store, &h.id, &[tick(2)]);
    for (what, seq) in
        [("a gap", 4), ("far ahead", 1_000_000), ("a replay of seq 0", 0), ("a replay of seq 2", 2)]
    {
        let err = must_fail(store.append(&h.id, &[tick(seq)]), "conflict", what);
        if let StoreError::Conflict { expected, found, .. } = err {
            assert_eq!((expected, found), (3, seq), "conflict fields for {what}");
        }
        assert_stored(&*store, &h, &ticks(0..3), &format!("after {what}"));
    }
    append(&*store, &h.id, &[tick(3)]);
    drop(store);
    let store = factory.open();
    must_fail(store.append(&h.id, &[tick(3)]), "conflict", "a replay after reopen");
    append(&*store, &h.id, &[tick(4)]);
    assert_stored(&*store, &h, &ticks(0..5), "after reopen");
    Outcome::Ran
}

// ---------------------------------------------------------------------------
// Checks: session lifecycle
// ---------------------------------------------------------------------------

/// Append, load and delete of an id never created are `not-found`, and
/// create nothing.
pub fn unknown_ids_are_not_found(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    create(&*store, &header("kit-known"));
    must_fail(store.append("kit-unknown", &[tick(0)]), "not-found", "append to an unknown id");
    must_fail(store.append("kit-unknown", &[]), "not-found", "an empty append to an unknown id");
    must_fail(store.load("kit-unknown"), "not-found", "load of an unknown id");
    must_fail(store.delete("kit-unknown"), "not-found", "delete of an unknown id");
    must_fail(store.load("kit-known-but-longer"), "not-found", "load of an id sharing a prefix");
    assert_eq!(must(store.list(), "list"), vec![header("kit-known")], "an unknown id appeared in the list");
    Outcome::Ran
}

/// A second create of a taken id is `already-exists` and leaves the first
/// session (header and events) untouched.
pub fn create_twice_is_already_exists(factory: &dyn StoreFactory) -> Outcome {
    let h = SessionHeader { cwd: Some("/first".into()), ..header("kit-twice") };
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &ticks(0..2));
    let again = SessionHeader {
        cwd: Some("/second".into()),
        seed_length: Some(9),
        ..SessionHeader::new("kit-twice", 1)
    };
    must_fail(store.create(&again), "already-exists", "second create");
    must_fail(store.create(&h), "already-exists", "identical second create");
    assert_stored(&*store, &h, &ticks(0..2), "the first session");
    drop(store);
    let store = factory.open();
    must_fail(store.create(&again), "already-exists", "create after reopen");
    assert_stored(&*store, &h, &ticks(0..2), "the first session after reopen");
    Outcome::Ran
}

/// [`SessionStore::create_with_events`] writes a whole session or nothing:
/// seqs that do not count up from 0 are `conflict` and leave *no* session
/// (not even an empty one); a taken id is `already-exists` and leaves the
/// first session untouched; a whole session, large batch included, reads
/// back exactly, also after reopen, and continues with `append`.
pub fn create_with_events_is_all_or_nothing(factory: &dyn StoreFactory) -> Outcome {
    let h = SessionHeader { cwd: Some("/whole".into()), seed_length: Some(2), ..header("kit-whole") };
    let store = factory.open();
    let refused: [(&str, Vec<Event>); 3] = [
        ("first seq 1", vec![tick(1), tick(2)]),
        ("a gap after a valid prefix", vec![tick(0), tick(1), tick(3)]),
        ("a repeated seq", vec![tick(0), tick(0)]),
    ];
    for (what, events) in &refused {
        must_fail(store.create_with_events(&h, events), "conflict", what);
        must_fail(store.load(&h.id), "not-found", &format!("after a refused whole session ({what})"));
        assert!(must(store.list(), "list").is_empty(), "a refused whole session is listed ({what})");
    }
    let events = sample_events();
    must(store.create_with_events(&h, &events), "a whole session");
    must(store.sync(&h.id), "sync");
    assert_stored(&*store, &h, &events, "a whole session");
    let other = SessionHeader::new("kit-whole", 1);
    must_fail(store.create_with_events(&other, &ticks(0..3)), "already-exists", "a taken id");
    must_fail(store.create_with_events(&other, &[]), "already-exists", "a taken id, no events");
    assert_stored(&*store, &h, &events, "the first whole session");
    let n = events.len() as u64;
    append(&*store, &h.id, &[tick(n)]);
    let empty = header("kit-whole-empty");
    must(store.create_with_events(&empty, &[]), "a whole session of no events");
    let big = header("kit-whole-big");
    must(store.create_with_events(&big, &ticks(0..2_000)), "a whole session of 2000 events");
    must(store.sync(&big.id), "sync");
    drop(store);
    let store = factory.open();
    let mut longer = events.clone();
    longer.push(tick(n));
    assert_stored(&*store, &h, &longer, "after reopen");
    assert_stored(&*store, &empty, &[], "the empty whole session after reopen");
    assert_stored(&*store, &big, &ticks(0..2_000), "the large whole session after reopen");
    Outcome::Ran
}

/// After an I/O error during an append (injected through
/// [`StoreFactory::fail_next_write`]; [`Outcome::Skipped`] when the backend
/// cannot), the
/// failed batch is stored whole or not at all, and never twice:
///
/// * the append is `io` (its outcome unknown, as the trait says);
/// * retrying the same batch on the same handle is refused with `io` (the
///   backend refuses writes until reopened: JSONL, SQLite), or it settles
///   the unknown outcome first (PostgreSQL reads the write back): then the
///   retry is `Ok` (the batch had not landed; now it has, once) or
///   `conflict` (it had landed);
/// * reopened, the session holds the events before the batch, then the
///   batch whole or not at all, and appending continues from there.
pub fn io_errors_never_store_a_batch_in_part_or_twice(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-io");
    let store = factory.open();
    create(&*store, &h);
    append(&*store, &h.id, &ticks(0..3));
    if !factory.fail_next_write() {
        return Outcome::Skipped("the factory cannot inject an I/O error (`StoreFactory::fail_next_write`)");
    }
    let batch = ticks(3..8);
    must_fail(store.append(&h.id, &batch), "io", "an append with an injected I/O error");
    let mut whole = ticks(0..3);
    whole.extend(batch.iter().cloned());
    let retried = store.append(&h.id, &batch);
    let landed = match &retried {
        Err(e) if e.code() == "io" => None,
        Ok(()) => Some(true),
        Err(e) if e.code() == "conflict" => Some(true),
        Err(e) => {
            panic!("retrying a batch after an I/O error: expected io, Ok or conflict, got [{}] {e}", e.code())
        }
    };
    drop(store);
    let store = factory.open();
    let stored = must(store.load(&h.id), "load after reopening").events;
    if landed == Some(true) {
        assert_eq!(stored, whole, "the retried batch is stored once, whole");
    } else {
        assert!(
            stored == ticks(0..3) || stored == whole,
            "after an I/O error the batch is stored whole or not at all; found {} events",
            stored.len()
        );
    }
    let n = stored.len() as u64;
    append(&*store, &h.id, &[tick(n)]);
    let mut expected = stored;
    expected.push(tick(n));
    assert_stored(&*store, &h, &expected, "appending after the I/O error and a reopen");
    Outcome::Ran
}

/// A sink that keeps what it is handed and breaks after `stop_after`
/// events (never, for `None`).
struct KeepSink {
    header: Option<SessionHeader>,
    events: Vec<Event>,
    stop_after: Option<usize>,
    calls_after_break: usize,
}

impl KeepSink {
    fn new(stop_after: Option<usize>) -> KeepSink {
        KeepSink { header: None, events: Vec::new(), stop_after, calls_after_break: 0 }
    }
}

impl LoadSink for KeepSink {
    fn header(&mut self, header: SessionHeader) -> std::ops::ControlFlow<()> {
        self.header = Some(header);
        if self.stop_after == Some(0) {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    }

    fn event(&mut self, event: Event) -> std::ops::ControlFlow<()> {
        if self.stop_after.is_some_and(|n| self.events.len() >= n) {
            self.calls_after_break += 1;
        }
        self.events.push(event);
        if self.stop_after.is_some_and(|n| self.events.len() >= n) {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    }

    fn keeps_events(&self) -> bool {
        true
    }
}

/// `load_into` hands over exactly what `load` returns, header first and
/// events in order, across many rows (several decoding batches in the SQL
/// backends); a sink that breaks gets nothing more; an unknown id is
/// `not-found` with nothing handed over.
pub fn load_into_hands_over_what_load_returns(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let h = header("kit-into");
    let mut events = sample_events();
    let n = events.len() as u64;
    events.extend((n..n + 3000).map(tick));
    must(store.create_with_events(&h, &events), "create_with_events");
    let loaded = must(store.load("kit-into"), "load");
    let mut all = KeepSink::new(None);
    let report = must(store.load_into("kit-into", &mut all), "load_into");
    assert_eq!(all.header.as_ref(), Some(&loaded.header), "load_into's header");
    assert!(all.events == loaded.events, "load_into handed over other events than load returned");
    assert_eq!(report, loaded.report, "load_into's report");
    for stop in [0, 1, 1024, 2500] {
        let mut some = KeepSink::new(Some(stop));
        must(store.load_into("kit-into", &mut some), "load_into with a sink that breaks");
        assert_eq!(some.header.as_ref(), Some(&loaded.header), "header before a break after {stop}");
        assert_eq!(some.calls_after_break, 0, "a sink that broke after {stop} events was called again");
        assert!(some.events[..] == loaded.events[..stop], "the first {stop} events, in order");
    }
    let mut none = KeepSink::new(None);
    must_fail(store.load_into("kit-no-such", &mut none), "not-found", "load_into of an unknown id");
    assert!(none.header.is_none() && none.events.is_empty(), "nothing handed over for an unknown id");
    Outcome::Ran
}

/// [`SessionStore::summary`] agrees with the summary of the loaded log
/// ([`SessionSummary::of`]) for every shape a listing meets: an empty log;
/// no turns and no prompt; the sample; a long tail after the last turn
/// bracket; a first prompt only after thousands of events; after an
/// append; from a store opened afresh; after a torn tail (where the backend
/// has them). An unknown id is `not-found`. [`SessionStore::summaries`]
/// returns the same summaries for every session, in `list`'s order.
pub fn summary_agrees_with_the_loaded_log(factory: &dyn StoreFactory) -> Outcome {
    let prompt = |seq: u64| {
        at(
            seq,
            "user/message",
            r#"{"message":{"id":"late","role":"user","content":[{"type":"text","text":"a late prompt"}],"source":{"kind":"user"}}}"#,
            r#","surfaceOp":"append""#,
        )
    };
    let n = sample_events().len() as u64;
    let mut long = sample_events();
    long.extend((n..n + 3000).map(tick));
    let mut late = ticks(0..2000);
    late.push(prompt(2000));
    late.extend((2001..2100).map(tick));
    let sessions: Vec<(SessionHeader, Vec<Event>)> = vec![
        (header("kit-sum-empty"), Vec::new()),
        (header("kit-sum-ticks"), ticks(0..50)),
        (header("kit-sum-sample"), sample_events()),
        (header("kit-sum-long"), long),
        (header("kit-sum-late"), late),
    ];
    let agrees = |store: &dyn SessionStore, id: &str, what: &str| {
        let loaded = must(store.load(id), &format!("{what}: load {id}"));
        let expected = SessionSummary::of(loaded.header, &loaded.events);
        let summary = must(store.summary(id), &format!("{what}: summary of {id}"));
        assert_eq!(summary, expected, "{what}: the summary of {id} is not the loaded log's");
        summary
    };
    {
        let store = factory.open();
        for (h, events) in &sessions {
            must(store.create_with_events(h, events), "create_with_events");
            agrees(&*store, &h.id, "on the writing handle");
        }
        append(&*store, "kit-sum-ticks", &[at(50, "turn/start", r#"{"turn":1}"#, "")]);
        let summary = agrees(&*store, "kit-sum-ticks", "after an append");
        assert_eq!((summary.events, summary.turns()), (51, 1), "after an append");
        must(store.sync("kit-sum-ticks"), "sync");
    }
    let store = factory.open();
    for (h, _) in &sessions {
        agrees(&*store, &h.id, "reopened");
    }
    let sample = agrees(&*store, "kit-sum-sample", "reopened");
    assert_eq!(
        (sample.events, sample.turns(), sample.last_activity),
        (n, 5, sample_events().last().map(Event::time)),
        "the sample's size, turns and last activity"
    );
    assert_eq!(sample.first_prompt.as_ref().map(Event::seq), Some(1), "the sample's first prompt");
    assert_eq!(sample.last_turn.as_ref().map(Event::seq), Some(34), "the sample's last turn bracket");
    let late = agrees(&*store, "kit-sum-late", "reopened");
    assert_eq!(late.first_prompt.as_ref().map(Event::seq), Some(2000), "a late first prompt");
    assert_eq!(agrees(&*store, "kit-sum-empty", "reopened"), SessionSummary::empty(header("kit-sum-empty")));
    must_fail(store.summary("kit-sum-no-such"), "not-found", "the summary of an unknown id");
    // Every session at once: the same summaries, in list's order.
    let broken = summaries_match_each_summary(&*store);
    assert!(broken.is_empty(), "summaries(): sessions whose summary failed: {broken:?}");
    drop(store);
    if factory.append_raw_tail("kit-sum-long", br#"{"seq":3038,"time":1,"ty"#) {
        let store = factory.open();
        let summary = agrees(&*store, "kit-sum-long", "after a torn tail");
        assert_eq!(summary.events, n + 3000, "the torn tail is not counted");
    }
    Outcome::Ran
}

/// `list` returns exactly the headers created (optional fields included),
/// empty for an empty store, unchanged by appends, without deleted ones.
pub fn list_returns_every_header(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    assert_eq!(must(store.list(), "list of an empty store"), vec![], "an empty store lists nothing");
    let headers = vec![
        SessionHeader::new("kit-list-a", 1),
        SessionHeader {
            cwd: Some("/home/kit/project".into()),
            parent_session: Some("kit-list-a".into()),
            seed_length: Some(3),
            ..SessionHeader::new("kit-list-b", 2)
        },
        SessionHeader { cwd: Some("C:\\Users\\kit".into()), ..SessionHeader::new("kit-list-c", u64::MAX) },
        SessionHeader { seed_length: Some(0), ..SessionHeader::new("kit-list-d", 0) },
    ];
    for h in &headers {
        create(&*store, h);
    }
    append(&*store, "kit-list-b", &ticks(0..3));
    assert_eq!(sorted_headers(must(store.list(), "list")), headers, "list");
    drop(store);
    let store = factory.open();
    assert_eq!(sorted_headers(must(store.list(), "list after reopen")), headers, "list after reopen");
    must(store.delete("kit-list-b"), "delete");
    let rest: Vec<SessionHeader> = headers.iter().filter(|h| h.id != "kit-list-b").cloned().collect();
    assert_eq!(sorted_headers(must(store.list(), "list after delete")), rest, "list after delete");
    Outcome::Ran
}

/// `delete_many` gives one outcome per id, in order: the sessions that
/// exist are gone, a missing one is `not-found` without stopping the
/// others, and sessions not named are untouched.
pub fn delete_many_deletes_each_and_says_which_it_could_not(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let (a, b, kept) = (header("kit-many-a"), header("kit-many-b"), header("kit-many-kept"));
    for h in [&a, &b, &kept] {
        create(&*store, h);
        append(&*store, &h.id, &ticks(0..2));
        must(store.sync(&h.id), "sync");
    }
    let outcomes = store.delete_many(&[&a.id, "kit-many-missing", &b.id]);
    let codes: Vec<Result<(), &str>> =
        outcomes.iter().map(|o| o.as_ref().map(drop).map_err(|e| e.code())).collect();
    assert_eq!(codes, [Ok(()), Err("not-found"), Ok(())], "delete_many's outcomes, in order");
    must_fail(store.load(&a.id), "not-found", "load after delete_many");
    must_fail(store.load(&b.id), "not-found", "load after delete_many");
    assert_stored(&*store, &kept, &ticks(0..2), "a session not named");
    assert!(store.delete_many(&[]).is_empty(), "no ids, no outcomes");
    drop(store);
    let store = factory.open();
    must_fail(store.load(&a.id), "not-found", "load after reopen");
    assert_stored(&*store, &kept, &ticks(0..2), "a session not named, after reopen");
    Outcome::Ran
}

/// After `delete`, load, append and a second delete are `not-found`; the id
/// can be created again and starts empty; other sessions are untouched.
pub fn delete_then_load_is_not_found(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let (h, other) = (header("kit-delete"), header("kit-delete-other"));
    create(&*store, &h);
    create(&*store, &other);
    append(&*store, &h.id, &ticks(0..3));
    append(&*store, &other.id, &ticks(0..1));
    must(store.sync(&h.id), "sync");
    must(store.delete(&h.id), "delete");
    must_fail(store.load(&h.id), "not-found", "load after delete");
    must_fail(store.append(&h.id, &[tick(3)]), "not-found", "append after delete");
    must_fail(store.delete(&h.id), "not-found", "second delete");
    assert_stored(&*store, &other, &ticks(0..1), "the other session");
    let again = SessionHeader { cwd: Some("/again".into()), ..SessionHeader::new("kit-delete", 5) };
    create(&*store, &again);
    assert_stored(&*store, &again, &[], "a recreated session starts empty");
    must_fail(store.append(&again.id, &[tick(3)]), "conflict", "a recreated session expects seq 0");
    append(&*store, &again.id, &[tick(0)]);
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &again, &ticks(0..1), "the recreated session after reopen");
    must(store.delete(&again.id), "delete after reopen");
    drop(store);
    let store = factory.open();
    must_fail(store.load(&again.id), "not-found", "load of a deleted session after reopen");
    assert_eq!(must(store.list(), "list"), vec![other], "list after deletes");
    Outcome::Ran
}

/// A store dropped and reopened sees every session, header and event, and
/// appends continue where they stopped.
pub fn reopen_after_drop_sees_everything(factory: &dyn StoreFactory) -> Outcome {
    let sample = sample_events();
    let a = SessionHeader { seed_length: Some(2), ..header("kit-reopen-a") };
    let b = header("kit-reopen-b");
    let c = header("kit-reopen-empty");
    {
        let store = factory.open();
        create(&*store, &a);
        create(&*store, &b);
        create(&*store, &c);
        append(&*store, &a.id, &sample[..10]);
        append(&*store, &b.id, &ticks(0..4));
        must(store.sync(&a.id), "sync a");
        must(store.sync(&b.id), "sync b");
        must(store.sync(&c.id), "sync c");
    }
    {
        let store = factory.open();
        assert_stored(&*store, &a, &sample[..10], "a after reopen");
        assert_stored(&*store, &b, &ticks(0..4), "b after reopen");
        assert_stored(&*store, &c, &[], "empty session after reopen");
        append(&*store, &a.id, &sample[10..]);
        append(&*store, &c.id, &ticks(0..1));
    }
    let store = factory.open();
    assert_stored(&*store, &a, &sample, "a after a second reopen");
    assert_stored(&*store, &c, &ticks(0..1), "c after a second reopen");
    assert_eq!(sorted_headers(must(store.list(), "list")), vec![a, b, c], "list after reopen");
    Outcome::Ran
}

/// Sessions do not share seqs, events or errors: interleaved appends each
/// start at seq 0, a conflict in one does not touch the other, deleting one
/// leaves the other.
pub fn sessions_are_independent(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let ids = ["kit-one", "kit-two", "kit-one-two"];
    for id in ids {
        create(&*store, &header(id));
    }
    for seq in 0..6 {
        for (i, id) in ids.iter().enumerate() {
            if seq < 2 + 2 * i as u64 {
                append(&*store, id, &[tick(seq)]);
            }
        }
    }
    must_fail(store.append("kit-one", &[tick(4)]), "conflict", "kit-one is at 2");
    append(&*store, "kit-two", &[tick(4)]);
    must(store.delete("kit-one-two"), "delete");
    assert_stored(&*store, &header("kit-one"), &ticks(0..2), "kit-one");
    assert_stored(&*store, &header("kit-two"), &ticks(0..5), "kit-two");
    must_fail(store.load("kit-one-two"), "not-found", "the deleted one");
    Outcome::Ran
}

/// Odd session ids (path separators, `..`, NUL, control characters, Windows
/// device names, case variants, percent signs, unicode, 4 KB) either work as
/// sessions of their own or are refused with `invalid-id`, and nothing in
/// between. Ids of 1 to 64 ASCII letters, digits, `-` and `_` must work, and
/// ids differing only in case are different sessions. The empty id is
/// refused by every store ([`check_header`](crate::check_header)).
pub fn unusual_ids_work_or_are_refused_cleanly(factory: &dyn StoreFactory) -> Outcome {
    let must_work =
        ["plain", "UPPER", "upper", "Upper", "a-b_c", "0", "9f1c2d3e-aaaa-4bbb-8ccc-0123456789ab"];
    let long_ascii = "x".repeat(64);
    let odd = [
        "",
        ".",
        "..",
        "../escape",
        "a/../../b",
        "/abs",
        "a/b",
        "a\\b",
        "C:\\x",
        "nul\0byte",
        "tab\there",
        "new\nline",
        "%41",
        "A",
        "a",
        "a%2Fb",
        "a.jsonl",
        "a.jsonl.jsonl",
        "-",
        "_",
        "~",
        " ",
        "trailing.",
        "trailing ",
        "*?<>|:\"",
        "con",
        "CON",
        "nul",
        "aux.txt",
        "com1",
        "lpt9",
        "é",
        "e\u{301}",
        "日本語",
        "🦀",
        "שלום",
        "\u{202e}evil",
        "\u{feff}",
    ];
    let huge = "x".repeat(4096);
    let huge_unicode = "é".repeat(2048);
    let mut ids: Vec<&str> = must_work.to_vec();
    ids.push(&long_ascii);
    ids.extend(odd);
    ids.push(&huge);
    ids.push(&huge_unicode);

    let store = factory.open();
    must_fail(store.create(&header("")), "invalid-id", "the empty id");
    match store.load("") {
        Err(e) if e.code() == "not-found" || e.code() == "invalid-id" => {}
        other => panic!(
            "load of the refused empty id: expected `not-found` or `invalid-id`, got {:?}",
            other.map(|s| s.header)
        ),
    }
    let mut accepted = Vec::new();
    for id in &ids {
        match store.create(&header(id)) {
            Ok(()) => accepted.push(*id),
            Err(e) if e.code() == "invalid-id" => {
                assert!(!must_work.contains(id) && *id != long_ascii, "the plain id {id:?} was refused: {e}");
                match store.load(id) {
                    Err(e) if e.code() == "not-found" || e.code() == "invalid-id" => {}
                    other => panic!(
                        "load of the refused id {:?}: expected `not-found` or `invalid-id`, got {:?}",
                        clip(id),
                        other.map(|s| s.header)
                    ),
                }
            }
            Err(e) => panic!("create {:?}: expected Ok or `invalid-id`, got [{}] {e}", clip(id), e.code()),
        }
    }
    for (n, id) in accepted.iter().enumerate() {
        let event = at(0, "kit/which", &format!(r#"{{"n":{n}}}"#), "");
        append(&*store, id, std::slice::from_ref(&event));
    }
    for (n, id) in accepted.iter().enumerate() {
        let event = at(0, "kit/which", &format!(r#"{{"n":{n}}}"#), "");
        assert_stored(&*store, &header(id), std::slice::from_ref(&event), &format!("odd id {:?}", clip(id)));
    }
    let listed: BTreeSet<String> = must(store.list(), "list").into_iter().map(|h| h.id).collect();
    let expected: BTreeSet<String> = accepted.iter().map(|s| s.to_string()).collect();
    assert_eq!(listed, expected, "list must return exactly the accepted ids");
    drop(store);
    let store = factory.open();
    for id in &accepted {
        must(store.delete(id), &format!("delete {:?}", clip(id)));
    }
    assert_eq!(must(store.list(), "list after deleting everything"), vec![], "something was left behind");
    Outcome::Ran
}

/// Two handles on the same location at once (as two processes would have):
/// each append either succeeds or is refused (`conflict` or `locked`), every
/// acknowledged append is stored exactly once, in order, and nothing else is.
pub fn second_handle_never_breaks_the_log(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-two-handles");
    let first = factory.open();
    let second = factory.open();
    create(&*first, &h);
    append(&*first, &h.id, &ticks(0..2));
    let mut acknowledged = ticks(0..2);
    let stale = second.append(&h.id, &[tick(0)]);
    match &stale {
        Err(e) if e.code() == "conflict" || e.code() == "locked" => {}
        other => panic!("a second handle replaying seq 0 must get `conflict` or `locked`, got {other:?}"),
    }
    let mut try_append = |store: &dyn SessionStore, who: &str| {
        let next = tick(acknowledged.len() as u64);
        match store.append(&h.id, std::slice::from_ref(&next)) {
            Ok(()) => acknowledged.push(next),
            Err(e) if e.code() == "conflict" || e.code() == "locked" => {}
            Err(e) => panic!("{who} append: expected Ok, `conflict` or `locked`, got [{}] {e}", e.code()),
        }
    };
    try_append(&*second, "second handle");
    try_append(&*first, "first handle");
    try_append(&*second, "second handle");
    assert!(acknowledged.len() >= 3, "the first handle's own appends must keep working");
    must_fail(second.create(&h), "already-exists", "create through the second handle");
    drop(first);
    drop(second);
    assert_stored(&*factory.open(), &h, &acknowledged, "after two handles");
    Outcome::Ran
}

/// One handle shared by threads, as an agent loop and its tool runners
/// share one `Arc<dyn SessionStore>`: eight threads append to one session
/// at once, one event at a time, each at the seq it last heard of and, on
/// `conflict`, again at the seq the store expects; and each to a session of
/// its own in between. Every acknowledged event is stored once, at the seq
/// it was acknowledged at, in one contiguous log; each thread's session
/// holds exactly its own appends.
pub fn threads_sharing_one_handle_lose_nothing(factory: &dyn StoreFactory) -> Outcome {
    const THREADS: u64 = 8;
    const EACH: u64 = 25;
    let store = factory.open();
    let shared = header("kit-threads");
    create(&*store, &shared);
    let own: Vec<SessionHeader> = (0..THREADS).map(|t| header(&format!("kit-thread-{t}"))).collect();
    for h in &own {
        create(&*store, h);
    }
    let event = |seq: u64, thread: u64, i: u64| {
        at(seq, "kit/racer", &format!(r#"{{"thread":{thread},"i":{i}}}"#), "")
    };
    let acknowledged: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, own, shared) = (&*store, &own[t as usize], &shared);
                scope.spawn(move || {
                    let (mut at_seqs, mut next) = (Vec::new(), 0);
                    for i in 0..EACH {
                        append(store, &own.id, &ticks(i..i + 1));
                        loop {
                            match store.append(&shared.id, &[event(next, t, i)]) {
                                Ok(()) => break,
                                Err(StoreError::Conflict { expected, .. }) => next = expected,
                                Err(e) => panic!(
                                    "thread {t}: append: expected Ok or `conflict`, got [{}] {e}",
                                    e.code()
                                ),
                            }
                        }
                        at_seqs.push(next);
                        next += 1;
                    }
                    at_seqs
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| panic!("a writer thread panicked"))).collect()
    });
    let mut expected: Vec<Option<Event>> = vec![None; (THREADS * EACH) as usize];
    for (t, seqs) in (0..).zip(&acknowledged) {
        for (i, &seq) in (0..).zip(seqs) {
            let slot = expected.get_mut(seq as usize).unwrap_or_else(|| {
                panic!(
                    "thread {t}'s event {i} was acknowledged at seq {seq}, past the {} appended",
                    THREADS * EACH
                )
            });
            assert!(
                slot.is_none(),
                "seq {seq} was acknowledged twice (to thread {t}, event {i}, and another)"
            );
            *slot = Some(event(seq, t, i));
        }
    }
    let expected: Vec<Event> = expected.into_iter().flatten().collect();
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &shared, &expected, "the session eight threads appended to at once");
    for h in &own {
        assert_stored(&*store, h, &ticks(0..EACH), "a thread's own session");
    }
    Outcome::Ran
}

// ---------------------------------------------------------------------------
// Checks: torn tails (backends that have them)
// ---------------------------------------------------------------------------

/// A torn last record (bytes of an unfinished write, no terminator: cut JSON,
/// or cut inside a UTF-8 sequence) is dropped on load and reported in
/// [`LoadReport::torn_tail`](crate::LoadReport) (line = events + 2, the header
/// being line 1; len = the torn bytes); loading again changes nothing; the
/// next append cuts it off, after which the log is clean, also after reopen.
///
/// Returns [`Outcome::Skipped`] when [`StoreFactory::append_raw_tail`]
/// returns false: the backend has no torn tails.
pub fn torn_tail_is_dropped_reported_and_cut_off_if_supported(factory: &dyn StoreFactory) -> Outcome {
    let tails: [&[u8]; 3] = [
        br#"{"seq":3,"time":1767225600030,"type":"kit/tick","da"#,
        b"{\"seq\":3,\"time\":1,\"type\":\"kit/tick\",\"data\":\"\xe6\x97",
        b"{",
    ];
    for (i, tail) in tails.iter().enumerate() {
        let h = header(&format!("kit-torn-{i}"));
        {
            let store = factory.open();
            create(&*store, &h);
            append(&*store, &h.id, &ticks(0..3));
            must(store.sync(&h.id), "sync");
        }
        if !factory.append_raw_tail(&h.id, tail) {
            return Outcome::Skipped(NO_TORN_TAILS);
        }
        let store = factory.open();
        for attempt in ["first load", "second load"] {
            let loaded = must(store.load(&h.id), attempt);
            assert_same_events(&loaded.events, &ticks(0..3), attempt);
            let torn =
                loaded.report.torn_tail.unwrap_or_else(|| panic!("{attempt}: torn tail #{i} not reported"));
            assert_eq!(
                (torn.line, torn.len),
                (5, tail.len() as u64),
                "{attempt}: torn tail #{i} line and length"
            );
        }
        append(&*store, &h.id, &ticks(3..5));
        assert_stored(&*store, &h, &ticks(0..5), "after the append that cut the torn tail off");
        drop(store);
        let store = factory.open();
        assert_stored(&*store, &h, &ticks(0..5), "after reopen");
        append(&*store, &h.id, &ticks(5..6));
        assert_stored(&*store, &h, &ticks(0..6), "appending after reopen");
    }
    Outcome::Ran
}

/// A last record written whole but without its terminator is kept (not
/// torn), and the next append still produces a clean log.
///
/// Returns [`Outcome::Skipped`] when [`StoreFactory::append_raw_tail`]
/// returns false: the backend has no torn tails.
pub fn unterminated_whole_last_record_is_kept_if_supported(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-unterminated");
    {
        let store = factory.open();
        create(&*store, &h);
        append(&*store, &h.id, &ticks(0..3));
    }
    if !factory.append_raw_tail(&h.id, tick(3).to_json().as_bytes()) {
        return Outcome::Skipped(NO_TORN_TAILS);
    }
    let store = factory.open();
    assert_stored(&*store, &h, &ticks(0..4), "an unterminated whole record");
    must_fail(store.append(&h.id, &[tick(3)]), "conflict", "the kept record counts");
    append(&*store, &h.id, &ticks(4..6));
    assert_stored(&*store, &h, &ticks(0..6), "after the next append");
    drop(store);
    assert_stored(&*factory.open(), &h, &ticks(0..6), "after reopen");
    Outcome::Ran
}

// ---------------------------------------------------------------------------
// Checks: DurableSession over the store
// ---------------------------------------------------------------------------

fn shared(factory: &dyn StoreFactory) -> Arc<dyn SessionStore> {
    Arc::from(factory.open())
}

/// [`DurableSession::open`] re-checks every rule of the stored log: a valid
/// log opens with its surface, one that breaks a surface rule (which the
/// store itself does not check) is refused with the rule's contract code,
/// an unknown id is `not-found`.
pub fn durable_open_revalidates_the_stored_log(factory: &dyn StoreFactory) -> Outcome {
    let store = shared(factory);
    let valid = header("kit-durable-valid");
    create(&*store, &valid);
    append(&*store, &valid.id, &sample_events());
    let (session, report) = DurableSession::open(store.clone(), &valid.id, Durability::default())
        .unwrap_or_else(|e| panic!("a valid stored log was refused: [{}] {e}", e.code()));
    assert_eq!(report, Default::default());
    assert_eq!(session.session().surface(), SAMPLE_SURFACE, "surface of the reopened session");
    assert_same_events(session.session().events(), &sample_events(), "DurableSession::open");

    let broken: [(&str, &str, Vec<Event>); 2] = [
        (
            "kit-durable-start-missing",
            "replace-start-missing",
            vec![
                at(0, "turn/start", r#"{"turn":1}"#, ""),
                at(
                    1,
                    "user/message",
                    r#"{"message":{"id":"u","role":"user","content":[],"source":{"kind":"user"}}}"#,
                    r#","sourceEventSeqs":[0],"surfaceOp":{"op":"replace","start":0,"end":0}"#,
                ),
            ],
        ),
        (
            "kit-durable-incomplete",
            "replace-sources-incomplete",
            vec![
                at(
                    0,
                    "user/message",
                    r#"{"message":{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}}"#,
                    r#","surfaceOp":"append""#,
                ),
                at(
                    1,
                    "user/message",
                    r#"{"message":{"id":"u2","role":"user","content":[],"source":{"kind":"user"}}}"#,
                    r#","surfaceOp":"append""#,
                ),
                at(
                    2,
                    "user/message",
                    r#"{"message":{"id":"s","role":"user","content":[],"source":{"kind":"plugin","plugin":"kit"}}}"#,
                    r#","sourceEventSeqs":[0],"surfaceOp":{"op":"replace","start":0,"end":1}"#,
                ),
            ],
        ),
    ];
    for (id, code, events) in broken {
        create(&*store, &header(id));
        append(&*store, id, &events);
        match DurableSession::open(store.clone(), id, Durability::default()) {
            Ok(_) => panic!("{id}: a log breaking `{code}` was opened"),
            Err(e) => assert_eq!(e.code(), code, "{id}: refused with the wrong code: {e}"),
        }
        assert_same_events(&must(store.load(id), "load").events, &events, "a refused open changes nothing");
    }
    match DurableSession::open(store.clone(), "kit-durable-unknown", Durability::default()) {
        Ok(_) => panic!("an unknown session was opened"),
        Err(e) => assert_eq!(e.code(), "not-found", "open of an unknown id: {e}"),
    }
    Outcome::Ran
}

/// Through [`DurableSession`], an append the rules refuse writes nothing
/// (single events and batches with a bad event after good ones), a store
/// refusal (`conflict`) leaves memory unchanged, valid appends reach the
/// store, and a reopened session equals what was acknowledged.
pub fn durable_refused_append_writes_nothing(factory: &dyn StoreFactory) -> Outcome {
    let sample = sample_events();
    let store = shared(factory);
    let h = header("kit-durable-append");
    let mut session = DurableSession::create(store.clone(), h.clone(), Durability::EveryAppend)
        .unwrap_or_else(|e| panic!("DurableSession::create: [{}] {e}", e.code()));
    let batch = sample[..9].to_vec();
    match session.append_batch(batch) {
        Ok(range) => assert_eq!(range, 0..9),
        Err(e) => panic!("a valid batch was refused: [{}] {e}", e.code()),
    }
    let bad_replace = at(
        9,
        "user/message",
        r#"{"message":{"id":"x","role":"user","content":[],"source":{"kind":"user"}}}"#,
        r#","sourceEventSeqs":[2],"surfaceOp":{"op":"replace","start":2,"end":2}"#,
    );
    let check_unchanged = |session: &DurableSession, len: usize, what: &str| {
        assert_eq!(session.session().events().len(), len, "{what}: memory changed");
        assert_same_events(&must(store.load(&h.id), what).events, &sample[..len], what);
    };
    match session.append(bad_replace.clone()) {
        Ok(_) => panic!("an append breaking replace-start-missing was accepted"),
        Err(e) => assert_eq!(e.code(), "replace-start-missing"),
    }
    check_unchanged(&session, 9, "after a refused event");
    match session.append_batch(vec![
        sample[9].clone(),
        sample[10].clone(),
        bad_replace.with_seq_and_time(11, T0).unwrap_or_else(|e| panic!("{e}")),
    ]) {
        Ok(_) => panic!("a batch ending in a bad event was accepted"),
        Err(e) => assert_eq!(e.code(), "replace-start-missing"),
    }
    check_unchanged(&session, 9, "after a refused batch");
    // Another writer gets there first: the store refuses, memory stays.
    append(&*store, &h.id, &sample[9..10]);
    match session.append(sample[9].clone()) {
        Ok(_) => panic!("an append the store should refuse (conflict) was accepted"),
        Err(e) => assert_eq!(e.code(), "conflict", "store refusal: {e}"),
    }
    assert_eq!(session.session().events().len(), 9, "a store refusal changed memory");
    drop(session);
    let (mut session, _) = DurableSession::open(store.clone(), &h.id, Durability::TurnBoundary)
        .unwrap_or_else(|e| panic!("reopen: [{}] {e}", e.code()));
    match session.append_batch(sample[10..].to_vec()) {
        Ok(range) => assert_eq!(range, 10..sample.len() as u64),
        Err(e) => panic!("the rest of the log was refused: [{}] {e}", e.code()),
    }
    match session.flush() {
        Ok(()) => {}
        Err(e) => panic!("flush: [{}] {e}", e.code()),
    }
    drop(session);
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &h, &sample, "the durable session after reopen");
    Outcome::Ran
}

// ---------------------------------------------------------------------------
// Size limits (not in `CHECKS`: a store read under a smaller line cap, as
// a hardened reader may be, cannot hold an event at the format's limit)
// ---------------------------------------------------------------------------

/// A plugin event at `seq` whose line is exactly `len` bytes.
pub fn event_of_line_len(seq: u64, len: usize) -> Event {
    let empty = format!(r#"{{"seq":{seq},"time":{T0},"type":"kit/big","data":""}}"#);
    let pad = len.checked_sub(empty.len()).unwrap_or_else(|| panic!("no event is {len} bytes"));
    ev(&format!(r#"{{"seq":{seq},"time":{T0},"type":"kit/big","data":"{}"}}"#, "a".repeat(pad)))
}

/// One size limit for writers and readers (issue 15): a header over
/// [`MAX_HEADER_LINE_BYTES`](palimpsest_core_session::MAX_HEADER_LINE_BYTES)
/// is refused on create with `invalid-header` (contract code
/// `header-malformed`) and nothing is stored, one at the limit is stored
/// and read back; an event whose line is exactly
/// [`MAX_EVENT_LINE_BYTES`](palimpsest_core_session::MAX_EVENT_LINE_BYTES)
/// is stored and read back byte for byte (after reopening too), and one a
/// byte longer is refused (`event-too-large`) by [`DurableSession`] before
/// the store sees it, the store unchanged.
pub fn size_limits_hold_for_writers_and_readers(factory: &dyn StoreFactory) {
    use palimpsest_core_session::payload::PluginEvent;
    use palimpsest_core_session::{MAX_EVENT_LINE_BYTES, MAX_HEADER_LINE_BYTES};

    let store = shared(factory);
    let mut big = header("kit-big-header");
    let fixed = big.to_json().len() + r#","cwd":"""#.len();
    big.cwd = Some("c".repeat(MAX_HEADER_LINE_BYTES - fixed + 1));
    let e = must_fail(store.create(&big), "invalid-header", "create with a header over the limit");
    assert_eq!(e.contract_code(), Some("header-malformed"), "{e}");
    must_fail(store.load(&big.id), "not-found", "load after a refused create");
    assert!(must(store.list(), "list").is_empty(), "a refused create listed a session");
    big.cwd = Some("c".repeat(MAX_HEADER_LINE_BYTES - fixed));
    create(&*store, &big);
    assert_stored(&*store, &big, &[], "a header at the limit");

    let h = header("kit-big-event");
    let mut session = DurableSession::create(store.clone(), h.clone(), Durability::EveryAppend)
        .unwrap_or_else(|e| panic!("DurableSession::create: [{}] {e}", e.code()));
    let at_limit = event_of_line_len(0, MAX_EVENT_LINE_BYTES);
    assert_eq!(at_limit.line_len(), MAX_EVENT_LINE_BYTES);
    if let Err(e) = session.append(at_limit.clone()) {
        panic!("an event at the limit was refused: [{}] {e}", e.code());
    }
    let data = serde_json::Value::String("a".repeat(MAX_EVENT_LINE_BYTES));
    match session.append_log(T0, PluginEvent { event_type: "kit/big".into(), data }) {
        Ok(_) => panic!("an event over the limit was appended"),
        Err(e) => assert_eq!((e.code(), e.to_string().contains("limit")), ("event-too-large", true), "{e}"),
    }
    assert_eq!(session.session().events().len(), 1, "a refused append changed memory");
    drop(session);
    assert_stored(&*store, &h, std::slice::from_ref(&at_limit), "an event at the limit");
    drop(store);
    let store = factory.open();
    assert_stored(&*store, &h, std::slice::from_ref(&at_limit), "an event at the limit, reopened");
}
