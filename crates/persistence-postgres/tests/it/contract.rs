//! The whole `palimpsest-persistence` contract kit, run against [`PgStore`]
//! in a fresh schema per check: the same checks JSONL and SQLite pass.

use palimpsest_persistence::testkit::{self, StoreFactory, WriteFault};
use palimpsest_persistence::SessionStore;
use palimpsest_persistence_postgres::PgStore;

use crate::common::TestSchema;

struct PgFactory {
    schema: TestSchema,
    fault: WriteFault,
}

impl StoreFactory for PgFactory {
    fn open(&self) -> Box<dyn SessionStore> {
        Box::new(self.schema.store().with_write_fault(self.fault.clone()))
    }

    fn fail_next_write(&self) -> bool {
        self.fault.arm();
        true
    }

    /// Cuts the stored checkpoint's JSON text in half, behind the store's
    /// back.
    fn damage_checkpoint(&self, session_id: &str) -> bool {
        let changed = self
            .schema
            .client()
            .execute(
                "UPDATE checkpoints SET checkpoint = left(checkpoint, length(checkpoint) / 2) \
                 WHERE session_id = $1",
                &[&session_id],
            )
            .unwrap_or_else(|e| panic!("damage the checkpoint: {e}"));
        assert_eq!(changed, 1, "damage_checkpoint: no checkpoint of {session_id:?}");
        true
    }
}

/// Runs one check in a fresh schema (skipped, saying so, without a server
/// outside CI). A check the store cannot run says so on stderr, as
/// `store_contract_tests!` does.
#[allow(clippy::print_stderr)]
fn run(check: impl FnOnce(&dyn StoreFactory) -> testkit::Outcome) {
    if let Some(schema) = TestSchema::new() {
        if let testkit::Outcome::Skipped(why) = check(&PgFactory { schema, fault: WriteFault::default() }) {
            eprintln!("skipped: {why}");
        }
    }
}

/// One `#[test]` per check, like `store_contract_tests!`, but each able to
/// skip when no server is reachable outside CI.
macro_rules! pg_contract_tests {
    ($($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                run(testkit::$check);
            }
        )*

        #[test]
        fn pg_contract_tests_cover_every_check() {
            let generated: &[&str] = &[$(stringify!($check)),*];
            let all: Vec<&str> = testkit::CHECKS.iter().map(|(name, _)| *name).collect();
            assert_eq!(generated, all.as_slice(), "pg_contract_tests! is out of date with testkit::CHECKS");
        }
    };
}

pg_contract_tests!(
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

/// One size limit for writers and readers: over it nothing is written, at
/// it everything reads back (issue 15).
#[test]
fn size_limits_hold_for_writers_and_readers() {
    run(|factory| {
        testkit::size_limits_hold_for_writers_and_readers(factory);
        testkit::Outcome::Ran
    });
}

#[test]
fn the_store_is_send_and_sync_and_a_boxed_store_is_a_store() {
    fn assert_store<T: SessionStore + Send + Sync>() {}
    assert_store::<PgStore>();
}
