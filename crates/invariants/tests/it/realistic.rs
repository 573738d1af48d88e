//! Realistic sessions from `test_data/`: clean ones under `ok/`, and under
//! `err/` one per code, each a multi-turn session (parallel tool calls,
//! steering, a prune and a compaction) with one defect, its expected
//! violations in the `.expected` file beside it.

use palimpsest_core_session::jsonl;
use palimpsest_core_session::payload::ToolResult;
use palimpsest_core_session::repair::{repair, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use palimpsest_invariants::{check_log, CODES};

use crate::support::*;

fn check_err(name: &str) {
    let expected = fixture(&format!("err/{name}.expected"));
    check(&fixture(&format!("err/{name}.jsonl")), &expected_of(&expected));
}

macro_rules! err_fixtures {
    ($($test:ident => $name:literal,)*) => {
        $(#[test]
        fn $test() {
            check_err($name);
        })*

        /// Every code has a realistic fixture, and every fixture has a test.
        #[test]
        fn every_code_has_a_realistic_fixture() {
            let names = [$($name),*];
            for code in CODES {
                assert!(names.contains(code), "no err fixture test for {code}");
                let expected = fixture(&format!("err/{code}.expected"));
                assert!(expected_of(&expected).iter().any(|(c, _)| c == code), "err/{code}.expected");
            }
            let dir = format!("{}/test_data/err", env!("CARGO_MANIFEST_DIR"));
            for entry in std::fs::read_dir(dir).unwrap() {
                let file = entry.unwrap().file_name().into_string().unwrap();
                let stem = file.trim_end_matches(".jsonl").trim_end_matches(".expected");
                assert!(names.contains(&stem), "test_data/err/{file} has no test");
            }
        }
    };
}

err_fixtures! {
    realistic_turn_already_open => "turn-already-open",
    realistic_turn_out_of_order => "turn-out-of-order",
    realistic_turn_end_mismatch => "turn-end-mismatch",
    realistic_turn_end_step_open => "turn-end-step-open",
    realistic_step_outside_turn => "step-outside-turn",
    realistic_step_already_open => "step-already-open",
    realistic_step_out_of_order => "step-out-of-order",
    realistic_step_event_outside_step => "step-event-outside-step",
    realistic_tool_result_without_call => "tool-result-without-call",
    realistic_assistant_sources_not_chunks => "assistant-sources-not-chunks",
    realistic_tool_result_source_mismatch => "tool-result-source-mismatch",
    realistic_tool_exchange_split => "tool-exchange-split",
    realistic_settings_inside_step => "settings-inside-step",
    several_violations => "several",
}

#[test]
fn ok_fixtures_are_clean() {
    let dir = format!("{}/test_data/ok", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        check(&fixture(&format!("ok/{file}")), &[]);
        seen += 1;
    }
    assert!(seen >= 4, "only {seen} ok fixtures");
}

/// The contract's worked example (section 8): a prune by single-node
/// tool/result replace, then a compaction over 1..12 that shadows the
/// pruned result with its call.
#[test]
fn worked_example_has_no_violations() {
    let text = fixture("ok/compaction-and-prune.jsonl");
    assert_eq!(text, include_str!("../../../core-session/test_data/ok/compaction-and-prune.jsonl"));
    check(&text, &[]);
}

/// Section 2 rule 6 orders a replace by surface position, not seq value:
/// after the first compaction the summary (seq 20) stands before older
/// seqs, and a second compaction may start at it and end at seq 17.
#[test]
fn second_compaction_starting_at_an_earlier_summary_node() {
    let base = fixture("ok/compaction-and-prune.jsonl");
    let (_, events) = parse(&base);
    assert_eq!(palimpsest_core_session::SurfaceManager::fold(&events).unwrap().seqs(), &[20, 15, 17, 24]);
    let more = [
        r#"{"seq":27,"time":1767225600270,"type":"compaction/start","data":{"reason":"budget"}}"#,
        r#"{"seq":28,"time":1767225600280,"type":"user/message","data":{"message":{"id":"sum2","role":"user","content":[{"type":"text","text":"Summary: notes.txt says buy milk; it changed on disk."}],"source":{"kind":"plugin","plugin":"compaction"}}},"sourceEventSeqs":[27,20,15,17],"surfaceOp":{"op":"replace","start":20,"end":17}}"#,
        r#"{"seq":29,"time":1767225600290,"type":"compaction/end","data":{"summarySeq":28}}"#,
        r#"{"seq":30,"time":1767225600300,"type":"turn/start","data":{"turn":3}}"#,
    ];
    let text = format!("{base}{}\n", more.join("\n"));
    // Surface rules (a guarded Session loads it) and the invariants both pass.
    check(&text, &[]);
    let (header, events) = parse(&text);
    let session = palimpsest_core_session::Session::from_log_guarded(
        header,
        events,
        palimpsest_invariants::DevMode::On.guard(),
    )
    .unwrap();
    assert_eq!(session.surface(), &[28, 24]);
}

/// The same on the realistic session: its second compaction starts at
/// summary 35 and ends at seq 30.
#[test]
fn second_compaction_in_a_realistic_session() {
    let text = fixture("ok/second-compaction.jsonl");
    assert!(text.contains(r#""surfaceOp":{"op":"replace","start":35,"end":30}"#));
    check(&text, &[]);
}

/// Crash repair's closers satisfy the invariants: a `TOOL_OUTCOME_UNKNOWN`
/// result citing its tool/call, a `TOOL_NOT_STARTED` one citing the
/// requesting message, then step/end and turn/end.
#[test]
fn repair_closers_pass() {
    let (header, mut events) = parse(&fixture("ok/crashed-open-turn.jsonl"));
    let closers = repair(&events);
    let codes: Vec<String> = closers
        .iter()
        .filter_map(|e| e.data_as::<ToolResult>().ok())
        .filter_map(|r| r.error.map(|e| e.code))
        .collect();
    assert_eq!(codes, [TOOL_OUTCOME_UNKNOWN, TOOL_NOT_STARTED]);
    events.extend(closers);
    assert!(check_log(&events).is_empty(), "{:?}", check_log(&events));
    check(&String::from_utf8(jsonl::to_bytes(&header, &events)).unwrap(), &[]);
}
