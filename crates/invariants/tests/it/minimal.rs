//! Minimal logs: each code in the smallest log that breaks it, its
//! variants, and the near misses that must pass.

use palimpsest_core_session::repair::{TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use palimpsest_invariants::codes::*;

use crate::support::*;

// ---- turn-already-open

#[test]
fn turn_already_open() {
    check(&log(&[turn_start(1), turn_start(2)]), &[(TURN_ALREADY_OPEN, 1)]);
}

#[test]
fn turn_already_open_and_repeated_number() {
    check(&log(&[turn_start(1), turn_start(1)]), &[(TURN_ALREADY_OPEN, 1), (TURN_OUT_OF_ORDER, 1)]);
}

#[test]
fn turn_already_open_opens_the_new_turn() {
    // The second turn/start takes effect, so its turn/end matches.
    check(&log(&[turn_start(1), turn_start(2), turn_end(2)]), &[(TURN_ALREADY_OPEN, 1)]);
}

// ---- turn-out-of-order

#[test]
fn turn_out_of_order_first_is_one() {
    check(&log(&[turn_start(2)]), &[(TURN_OUT_OF_ORDER, 0)]);
}

#[test]
fn turn_out_of_order_skipped_number_is_reported_once() {
    let events = [turn_start(1), turn_end(1), turn_start(3), turn_end(3), turn_start(4), turn_end(4)];
    let v = check(&log(&events), &[(TURN_OUT_OF_ORDER, 2)]);
    assert!(v[0].message.contains("expected turn 2"), "{}", v[0]);
}

#[test]
fn turn_out_of_order_going_back() {
    check(
        &log(&[turn_start(1), turn_end(1), turn_start(2), turn_end(2), turn_start(2)]),
        &[(TURN_OUT_OF_ORDER, 4)],
    );
}

// ---- turn-end-mismatch

#[test]
fn turn_end_mismatch_nothing_open() {
    check(&log(&[turn_end(1)]), &[(TURN_END_MISMATCH, 0)]);
}

#[test]
fn turn_end_mismatch_other_turn() {
    let v = check(&log(&[turn_start(1), turn_end(2)]), &[(TURN_END_MISMATCH, 1)]);
    assert!(v[0].message.contains("turn 1 is open"), "{}", v[0]);
}

#[test]
fn turn_end_mismatch_still_closes_the_turn() {
    check(&log(&[turn_start(1), turn_end(2), turn_start(2), turn_end(2)]), &[(TURN_END_MISMATCH, 1)]);
}

#[test]
fn turn_end_twice() {
    check(&log(&[turn_start(1), turn_end(1), turn_end(1)]), &[(TURN_END_MISMATCH, 2)]);
}

// ---- turn-end-step-open

#[test]
fn turn_end_step_open() {
    check(&log(&[turn_start(1), step_start(1, 1), turn_end(1)]), &[(TURN_END_STEP_OPEN, 2)]);
}

#[test]
fn turn_end_step_open_and_mismatch() {
    check(
        &log(&[turn_start(1), step_start(1, 1), turn_end(2)]),
        &[(TURN_END_MISMATCH, 2), (TURN_END_STEP_OPEN, 2)],
    );
}

#[test]
fn turn_end_closes_the_step_too() {
    // After the bad turn/end, a new turn starts clean.
    let events =
        [turn_start(1), step_start(1, 1), turn_end(1), turn_start(2), step_start(2, 1), step_end(2, 1)];
    check(&log(&events), &[(TURN_END_STEP_OPEN, 2)]);
}

// ---- step-outside-turn

#[test]
fn step_outside_turn_no_turn() {
    check(&log(&[step_start(1, 1)]), &[(STEP_OUTSIDE_TURN, 0)]);
}

#[test]
fn step_outside_turn_other_turn() {
    check(&log(&[turn_start(1), step_start(2, 1)]), &[(STEP_OUTSIDE_TURN, 1)]);
}

#[test]
fn step_outside_turn_after_turn_end() {
    check(&log(&[turn_start(1), turn_end(1), step_start(1, 1), step_end(1, 1)]), &[(STEP_OUTSIDE_TURN, 2)]);
}

// ---- step-already-open

#[test]
fn step_already_open() {
    check(&log(&[turn_start(1), step_start(1, 1), step_start(1, 2)]), &[(STEP_ALREADY_OPEN, 2)]);
}

#[test]
fn step_already_open_same_number() {
    check(
        &log(&[turn_start(1), step_start(1, 1), step_start(1, 1)]),
        &[(STEP_ALREADY_OPEN, 2), (STEP_OUT_OF_ORDER, 2)],
    );
}

// ---- step-out-of-order

#[test]
fn step_out_of_order_first_is_one() {
    check(&log(&[turn_start(1), step_start(1, 2)]), &[(STEP_OUT_OF_ORDER, 1)]);
}

#[test]
fn step_out_of_order_repeated() {
    let events = [turn_start(1), step_start(1, 1), step_end(1, 1), step_start(1, 1), step_end(1, 1)];
    check(&log(&events), &[(STEP_OUT_OF_ORDER, 3)]);
}

#[test]
fn steps_restart_at_one_in_each_turn() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        step_end(1, 1),
        step_start(1, 2),
        step_end(1, 2),
        turn_end(1),
        turn_start(2),
        step_start(2, 1),
        step_end(2, 1),
        turn_end(2),
    ];
    check(&log(&events), &[]);
}

// ---- step-event-outside-step

#[test]
fn step_end_without_step() {
    check(&log(&[turn_start(1), step_end(1, 1)]), &[(STEP_EVENT_OUTSIDE_STEP, 1)]);
}

#[test]
fn step_end_names_another_step() {
    check(&log(&[turn_start(1), step_start(1, 1), step_end(1, 2)]), &[(STEP_EVENT_OUTSIDE_STEP, 2)]);
}

#[test]
fn chunk_outside_step() {
    check(&log(&[turn_start(1), step_start(1, 1), chunk(1, 2)]), &[(STEP_EVENT_OUTSIDE_STEP, 2)]);
}

#[test]
fn assistant_message_outside_step() {
    check(&log(&[turn_start(1), step_start(1, 1), assistant(2, 1, &[])]), &[(STEP_EVENT_OUTSIDE_STEP, 2)]);
}

#[test]
fn tool_call_outside_step() {
    check(&log(&[turn_start(1), tool_call(1, 1, "c")]), &[(STEP_EVENT_OUTSIDE_STEP, 1)]);
}

#[test]
fn replacing_assistant_message_outside_step() {
    // Only tool/result is exempt when it replaces; an assistant/message
    // names its step whatever its surface op (docs/invariants.md).
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &[]),
        step_end(1, 1),
        turn_end(1),
        assistant(1, 1, &[]).replaces(2, 2).cites(&[2]),
    ];
    check(&log(&events), &[(STEP_EVENT_OUTSIDE_STEP, 5)]);
}

#[test]
fn appended_tool_result_outside_step() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        step_end(1, 1),
        result(1, 1, "c").cites(&[3]),
    ];
    // No step is open, so the call is not in the open step either.
    check(&log(&events), &[(STEP_EVENT_OUTSIDE_STEP, 5), (TOOL_RESULT_WITHOUT_CALL, 5)]);
}

#[test]
fn pruning_tool_result_may_come_after_its_step() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[3]),
        step_end(1, 1),
        turn_end(1),
        result(1, 1, "c").replaces(4, 4).cites(&[4]),
    ];
    check(&log(&events), &[]);
}

// ---- tool-result-without-call

#[test]
fn tool_result_without_call() {
    check(&log(&[turn_start(1), step_start(1, 1), result(1, 1, "c")]), &[(TOOL_RESULT_WITHOUT_CALL, 2)]);
}

#[test]
fn tool_result_for_another_call_id() {
    let events = [turn_start(1), step_start(1, 1), tool_call(1, 1, "c1"), result(1, 1, "c2").cites(&[2])];
    check(&log(&events), &[(TOOL_RESULT_WITHOUT_CALL, 3)]);
}

#[test]
fn tool_result_for_a_call_of_an_earlier_step() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[3]),
        step_end(1, 1),
        step_start(1, 2),
        result(1, 2, "c").cites(&[3]),
    ];
    // Reported once: without a call there is no seq to compare the sources to.
    check(&log(&events), &[(TOOL_RESULT_WITHOUT_CALL, 7)]);
}

#[test]
fn tool_not_started_closer_needs_no_tool_call() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        error_result(1, 1, "c", TOOL_NOT_STARTED).cites(&[2]),
        step_end(1, 1),
        turn_end(1),
    ];
    check(&log(&events), &[]);
}

#[test]
fn tool_not_started_closer_without_request() {
    let events = [turn_start(1), step_start(1, 1), error_result(1, 1, "c", TOOL_NOT_STARTED)];
    let v = check(&log(&events), &[(TOOL_RESULT_WITHOUT_CALL, 2)]);
    assert!(v[0].message.contains(TOOL_NOT_STARTED), "{}", v[0]);
}

#[test]
fn other_error_codes_are_not_exempt() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        error_result(1, 1, "c", TOOL_OUTCOME_UNKNOWN).cites(&[2]),
    ];
    check(&log(&events), &[(TOOL_RESULT_WITHOUT_CALL, 3)]);
}

// ---- assistant-sources-not-chunks

#[test]
fn assistant_cites_a_user_message() {
    let events = [turn_start(1), user("u"), step_start(1, 1), assistant(1, 1, &[]).cites(&[1])];
    let v = check(&log(&events), &[(ASSISTANT_SOURCES_NOT_CHUNKS, 3)]);
    assert!(v[0].message.contains("1 (a user/message)"), "{}", v[0]);
}

#[test]
fn assistant_cites_a_chunk_of_another_step() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        chunk(1, 1),
        step_end(1, 1),
        step_start(1, 2),
        chunk(1, 2),
        assistant(1, 2, &[]).cites(&[2, 5]),
    ];
    let v = check(&log(&events), &[(ASSISTANT_SOURCES_NOT_CHUNKS, 6)]);
    assert!(v[0].message.contains("2 (an assistant/chunk of turn 1 step 1)"), "{}", v[0]);
}

#[test]
fn assistant_sources_absent_empty_or_own_chunks_pass() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &[]),
        step_end(1, 1),
        step_start(1, 2),
        assistant(1, 2, &[]).cites(&[]),
        step_end(1, 2),
        step_start(1, 3),
        chunk(1, 3),
        chunk(1, 3),
        assistant(1, 3, &[]).cites(&[8, 9]),
        step_end(1, 3),
        turn_end(1),
    ];
    check(&log(&events), &[]);
}

#[test]
fn replacing_assistant_cites_what_it_shadows() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        chunk(1, 1),
        assistant(1, 1, &[]).cites(&[2]),
        assistant(1, 1, &[]).replaces(3, 3).cites(&[3]),
        step_end(1, 1),
        turn_end(1),
    ];
    check(&log(&events), &[]);
}

// ---- tool-result-source-mismatch

#[test]
fn tool_result_cites_the_assistant_message() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[2]),
    ];
    let v = check(&log(&events), &[(TOOL_RESULT_SOURCE_MISMATCH, 4)]);
    assert!(v[0].message.contains("exactly [3]"), "{}", v[0]);
}

#[test]
fn tool_result_cites_more_than_its_call() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[2, 3]),
    ];
    check(&log(&events), &[(TOOL_RESULT_SOURCE_MISMATCH, 4)]);
}

#[test]
fn tool_result_without_sources_passes() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c"),
        step_end(1, 1),
        turn_end(1),
    ];
    check(&log(&events), &[]);
}

#[test]
fn tool_not_started_closer_cites_the_wrong_event() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        error_result(1, 1, "c", TOOL_NOT_STARTED).cites(&[1]),
    ];
    let v = check(&log(&events), &[(TOOL_RESULT_SOURCE_MISMATCH, 3)]);
    assert!(v[0].message.contains("requested"), "{}", v[0]);
}

// ---- settings-inside-step

#[test]
fn settings_inside_step() {
    let events = [turn_start(1), step_start(1, 1), settings("m2"), chunk(1, 1), step_end(1, 1), turn_end(1)];
    let v = check(&log(&events), &[(SETTINGS_INSIDE_STEP, 2)]);
    assert!(v[0].message.contains("turn 1 step 1 is open"), "{}", v[0]);
}

#[test]
fn settings_before_between_and_after_turns_and_steps_pass() {
    let events = [
        settings("m1"),
        turn_start(1),
        settings("m2"),
        step_start(1, 1),
        chunk(1, 1),
        step_end(1, 1),
        settings("m3"),
        step_start(1, 2),
        step_end(1, 2),
        turn_end(1),
        settings("m4"),
    ];
    check(&log(&events), &[]);
}

#[test]
fn settings_after_a_step_left_open_by_a_crash_is_inside_it() {
    // A resumed writer must repair (close the step) before it logs settings.
    let events = [turn_start(1), step_start(1, 1), chunk(1, 1), settings("m2")];
    check(&log(&events), &[(SETTINGS_INSIDE_STEP, 3)]);
}

// ---- tool-exchange-split

/// A finished turn with one tool exchange: user 1, assistant 3 (call "c"),
/// tool/call 4, tool/result 5.
fn exchange() -> Vec<serde_json::Value> {
    vec![
        turn_start(1),
        user("u1"),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[4]),
        step_end(1, 1),
        turn_end(1),
    ]
}

fn with(mut events: Vec<serde_json::Value>, more: &[serde_json::Value]) -> String {
    events.extend_from_slice(more);
    log(&events)
}

#[test]
fn split_takes_the_call_and_leaves_the_result() {
    let v =
        check(&with(exchange(), &[summary("s").replaces(1, 3).cites(&[1, 3])]), &[(TOOL_EXCHANGE_SPLIT, 8)]);
    assert!(v[0].message.contains("leaves its tool/result [5]"), "{}", v[0]);
}

#[test]
fn split_takes_the_result_and_leaves_the_call() {
    let v = check(&with(exchange(), &[summary("s").replaces(5, 5).cites(&[5])]), &[(TOOL_EXCHANGE_SPLIT, 8)]);
    assert!(v[0].message.contains("leaves assistant/message [3]"), "{}", v[0]);
}

#[test]
fn split_leaves_a_pruned_result() {
    let events = [result(1, 1, "c").replaces(5, 5).cites(&[5]), summary("s").replaces(1, 3).cites(&[1, 3])];
    let v = check(&with(exchange(), &events), &[(TOOL_EXCHANGE_SPLIT, 9)]);
    assert!(v[0].message.contains("[8]"), "{}", v[0]);
}

#[test]
fn split_one_violation_per_split_call() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c1", "c2"]),
        tool_call(1, 1, "c1"),
        tool_call(1, 1, "c2"),
        result(1, 1, "c1").cites(&[3]),
        result(1, 1, "c2").cites(&[4]),
        step_end(1, 1),
        turn_end(1),
        summary("s").replaces(2, 2).cites(&[2]),
    ];
    let v = check(&log(&events), &[(TOOL_EXCHANGE_SPLIT, 9), (TOOL_EXCHANGE_SPLIT, 9)]);
    assert!(v[0].message.contains("\"c1\"") && v[1].message.contains("\"c2\""), "{v:?}");
}

#[test]
fn whole_exchange_in_the_range_passes() {
    // A compaction: its plugin's trace event, then the summary citing it too.
    let events = [plugin("compaction/start"), summary("s").replaces(1, 5).cites(&[1, 3, 5, 8])];
    check(&with(exchange(), &events), &[]);
}

#[test]
fn pruning_a_result_keeps_the_exchange() {
    check(&with(exchange(), &[result(1, 1, "c").replaces(5, 5).cites(&[5])]), &[]);
}

#[test]
fn rewriting_the_call_message_keeps_the_exchange() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[3]),
        assistant(1, 1, &["c"]).replaces(2, 2).cites(&[2]),
        step_end(1, 1),
        turn_end(1),
    ];
    check(&log(&events), &[]);
}

#[test]
fn rewriting_the_call_message_without_the_call_splits() {
    let events = [
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        tool_call(1, 1, "c"),
        result(1, 1, "c").cites(&[3]),
        assistant(1, 1, &[]).replaces(2, 2).cites(&[2]),
    ];
    check(&log(&events), &[(TOOL_EXCHANGE_SPLIT, 5)]);
}

#[test]
fn compacting_a_call_whose_result_is_not_written_yet_passes() {
    // Nothing of the exchange is left on the surface after the replace, so
    // it is not split (see docs/invariants.md for the result that follows).
    let events = [
        turn_start(1),
        user("u1"),
        step_start(1, 1),
        assistant(1, 1, &["c"]),
        summary("s").replaces(1, 3).cites(&[1, 3]),
    ];
    check(&log(&events), &[]);
}

#[test]
fn replace_away_from_tool_exchanges_passes() {
    check(&with(exchange(), &[user("u2"), summary("s").replaces(8, 8).cites(&[8])]), &[]);
}
