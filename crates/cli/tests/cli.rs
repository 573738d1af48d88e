//! End-to-end tests: the real `palimpsest` binary over the fixture files in
//! `test_data/` (`ok/` are valid logs, `err/` break one rule each), checking
//! exit codes, stdout shapes and stderr codes against contract section 7.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use support::*;

fn test_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data")
}

/// Runs the binary in `test_data/`, so paths in its output are short and stable.
fn palimpsest(args: &[&str]) -> Run {
    support::palimpsest(&test_data(), args)
}

/// A scratch copy of a fixture, for commands that write.
fn scratch_copy(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(Path::new(fixture).file_name().expect("a file name"));
    fs::copy(test_data().join(fixture), &path).expect("copy the fixture");
    (dir, path)
}

const EXAMPLE: &str = "ok/compaction-and-prune.jsonl";

/// Every fixture, in a stable order.
fn fixtures() -> Vec<String> {
    let mut all = Vec::new();
    for dir in ["ok", "err"] {
        let mut names: Vec<String> = fs::read_dir(test_data().join(dir))
            .expect("the fixture dir")
            .map(|e| format!("{dir}/{}", e.expect("an entry").file_name().to_string_lossy()))
            .collect();
        names.sort();
        all.extend(names);
    }
    all
}

// ---------------------------------------------------------------- the worked example

#[test]
fn worked_example_validates_with_the_exact_json_shape() {
    let run = palimpsest(&["validate", "--json", EXAMPLE]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json(), json!({"valid": true, "events": 27, "violations": []}));
    assert_eq!(run.stderr, "");
}

#[test]
fn worked_example_surface_derive_and_repair_match_the_contract() {
    let surface = palimpsest(&["surface", EXAMPLE]);
    assert_eq!((surface.code, surface.json()), (0, json!([20, 15, 17, 24])));

    let derive = palimpsest(&["derive", EXAMPLE]);
    assert_eq!(derive.code, 0);
    let ids: Vec<Value> = derive.json().as_array().into_iter().flatten().map(|m| m["id"].clone()).collect();
    assert_eq!(ids, [json!("sum1"), json!("ctx1"), json!("u2"), json!("a3")]);

    let repair = palimpsest(&["repair", EXAMPLE]);
    assert_eq!((repair.code, repair.json()), (0, json!([])));
}

#[test]
fn derive_prints_each_message_exactly_as_logged() {
    let derive = palimpsest(&["derive", EXAMPLE]);
    let log = fs::read_to_string(test_data().join(EXAMPLE)).expect("the example");
    for line in derive.stdout.lines().filter(|l| l.starts_with("  ")) {
        let message = line.trim().trim_end_matches(',');
        assert!(log.contains(message), "{message} is not verbatim from the log");
    }
    insta::assert_snapshot!("derive_example", derive.stdout);
}

#[test]
fn derive_provenance_names_seq_and_sources() {
    let run = palimpsest(&["derive", "--provenance", EXAMPLE]);
    assert_eq!(run.code, 0);
    let items = run.json();
    assert_eq!(items[0]["seq"], json!(20));
    assert_eq!(items[0]["sourceEventSeqs"], json!([19, 1, 6, 18, 12]));
    assert_eq!(items[0]["message"]["id"], json!("sum1"));
    // seq 15 carries no provenance: the key is absent, not null.
    assert_eq!(items[1]["seq"], json!(15));
    assert!(items[1].get("sourceEventSeqs").is_none());
    insta::assert_snapshot!("derive_provenance_example", run.stdout);
}

#[test]
fn derive_request_prints_the_last_settings_and_the_messages_byte_for_byte() {
    let args = ["derive", "--request", "ok/settings.jsonl"];
    let run = palimpsest(&args);
    assert_eq!(run.code, 0, "{run:?}");
    let request = run.json();
    let keys: Vec<&String> = request.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    assert_eq!(keys, ["messages", "settings"], "exactly these two keys");
    assert!(run.stdout.starts_with(r#"{"settings":{"systemPrompt":"#), "settings first: {}", run.stdout);
    assert_eq!(request["settings"]["model"], json!("m-2"), "the last settings, whole");
    assert_eq!(request["settings"]["seed"], json!(7), "unknown keys are kept");
    assert_eq!(request["messages"], palimpsest(&["derive", "ok/settings.jsonl"]).json());
    // Replaying the log derives the same bytes; the settings as logged.
    assert_eq!(palimpsest(&args).stdout, run.stdout);
    let log = fs::read_to_string(test_data().join("ok/settings.jsonl")).expect("the fixture");
    let settings = log.lines().nth(9).and_then(|l| l.split(r#""settings":"#).nth(1)).unwrap_or_default();
    assert!(
        run.stdout.starts_with(&format!(r#"{{"settings":{}"#, settings.trim_end_matches("}}"))),
        "{}",
        run.stdout
    );
    insta::assert_snapshot!("derive_request_settings", run.stdout);

    // Before any session/settings the settings are {}.
    let none = palimpsest(&["derive", "--request", EXAMPLE]);
    assert_eq!(none.code, 0);
    assert!(none.stdout.starts_with(r#"{"settings":{},"messages":[{"id":"sum1""#), "{}", none.stdout);
    // --request and --provenance do not mix.
    assert_eq!(palimpsest(&["derive", "--request", "--provenance", EXAMPLE]).code, 2);
}

#[test]
fn validate_reports_settings_inside_a_step() {
    let f = "err/invariant-settings-inside-step.jsonl";
    let run = palimpsest(&["validate", "--json", f]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        run.json()["violations"],
        json!([{"code": "settings-inside-step", "seq": 11,
                "message": "session/settings while turn 2 step 1 is open; settings change between model requests"}])
    );
    let human = palimpsest(&["validate", f]);
    assert!(human.stderr.starts_with(&format!("error[settings-inside-step]: {f}:13: seq 11: ")), "{human:?}");
}

// ---------------------------------------------------------------- section-2 codes

/// Each `err/<code>.jsonl` breaks one rule: the code, the seq and the line.
const RULE_FIXTURES: &[(&str, &str, u64, u64)] = &[
    ("err/event-malformed.jsonl", "event-malformed", 2, 4),
    ("err/event-malformed-null.jsonl", "event-malformed", 2, 4),
    ("err/event-malformed-extra-key.jsonl", "event-malformed", 2, 4),
    ("err/event-malformed-duplicate-key.jsonl", "event-malformed", 2, 4),
    ("err/surface-op-missing.jsonl", "surface-op-missing", 2, 4),
    ("err/surface-op-forbidden.jsonl", "surface-op-forbidden", 2, 4),
    ("err/source-seqs-forbidden.jsonl", "source-seqs-forbidden", 2, 4),
    ("err/surface-op-malformed.jsonl", "surface-op-malformed", 2, 4),
    ("err/source-seqs-malformed.jsonl", "source-seqs-malformed", 2, 4),
    ("err/source-seqs-empty.jsonl", "source-seqs-empty", 2, 4),
    ("err/source-seqs-duplicate.jsonl", "source-seqs-duplicate", 2, 4),
    ("err/source-seqs-not-earlier.jsonl", "source-seqs-not-earlier", 2, 4),
    ("err/replace-start-missing.jsonl", "replace-start-missing", 2, 4),
    ("err/replace-end-missing.jsonl", "replace-end-missing", 2, 4),
    ("err/replace-reversed.jsonl", "replace-reversed", 3, 5),
    ("err/replace-sources-incomplete.jsonl", "replace-sources-incomplete", 3, 5),
    ("err/tool-result-replace-invalid.jsonl", "tool-result-replace-invalid", 2, 4),
    ("err/seq-not-contiguous.jsonl", "seq-not-contiguous", 3, 4),
];

#[test]
fn every_section_2_code_is_reported_with_seq_line_and_exit_1() {
    for &(file, code, seq, line) in RULE_FIXTURES {
        let run = palimpsest(&["validate", "--json", file]);
        assert_eq!(run.code, 1, "{file}: {run:?}");
        let report = run.json();
        assert_eq!(report["valid"], json!(false), "{file}");
        let violations = report["violations"].as_array().cloned().unwrap_or_default();
        assert_eq!(violations.len(), 1, "{file}: the first section-2 violation ends checking");
        assert_eq!(violations[0]["code"], json!(code), "{file}");
        assert_eq!(violations[0]["seq"], json!(seq), "{file}");
        assert!(violations[0]["message"].as_str().is_some_and(|m| !m.is_empty()), "{file}");
        // Every event before the bad one was checked.
        let checked = if code == "seq-not-contiguous" { 2 } else { seq };
        assert_eq!(report["events"], json!(checked), "{file}");
        let expected = format!("error[{code}]: {file}:{line}: seq {seq}: ");
        assert!(run.stderr.starts_with(&expected), "{file}: stderr {:?}", run.stderr);
    }
}

#[test]
fn commands_that_read_a_session_refuse_an_invalid_one() {
    for &(file, code, _, _) in RULE_FIXTURES {
        for cmd in ["surface", "derive", "repair", "inspect"] {
            let run = palimpsest(&[cmd, file]);
            assert_eq!(run.code, 1, "{cmd} {file}: {run:?}");
            assert!(run.stderr.contains(&format!("error[{code}]")), "{cmd} {file}: {:?}", run.stderr);
            if cmd != "inspect" {
                assert_eq!(run.stdout, "", "{cmd} {file} printed a result for an invalid log");
            }
        }
    }
}

/// The issue's parser differential: a text block that names `type` twice
/// would be an unpaired tool call to a reader that keeps the last key.
#[test]
fn validate_refuses_a_key_named_twice_as_event_malformed() {
    let file = "err/event-malformed-duplicate-key.jsonl";
    let run = palimpsest(&["validate", file]);
    assert_eq!(run.code, 1, "{run:?}");
    let expected = format!("error[event-malformed]: {file}:4: seq 2: ");
    assert!(run.stderr.starts_with(&expected), "{:?}", run.stderr);
    assert!(run.stderr.contains("\"type\" twice"), "names the key: {:?}", run.stderr);

    let file = "err/header-duplicate-key.jsonl";
    let run = palimpsest(&["validate", "--json", file]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.json()["violations"][0]["code"], json!("header-malformed"));
    assert!(run.stderr.contains("\"id\" twice"), "names the key: {:?}", run.stderr);
}

// ---------------------------------------------------------------- section-2a invariants

#[test]
fn invariant_violations_are_reported_with_the_first_rule_violation_sorted_by_seq() {
    let run = palimpsest(&["validate", "--json", "err/invariant-then-rule.jsonl"]);
    assert_eq!(run.code, 1, "{run:?}");
    let codes: Vec<(Value, Value)> = run.json()["violations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["code"].clone(), v["seq"].clone()))
        .collect();
    assert_eq!(codes, [(json!("turn-already-open"), json!(1)), (json!("replace-start-missing"), json!(3))]);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(lines[0].starts_with("error[turn-already-open]: err/invariant-then-rule.jsonl:3: seq 1: "));
    assert!(lines[1].starts_with("error[replace-start-missing]: err/invariant-then-rule.jsonl:5: seq 3: "));
}

#[test]
fn a_broken_invariant_still_has_a_surface_but_is_not_repaired() {
    let f = "err/invariant-turn-out-of-order.jsonl";
    let validate = palimpsest(&["validate", "--json", f]);
    assert_eq!(validate.code, 1);
    assert_eq!(validate.json()["events"], json!(5), "an invariant does not stop checking");
    assert_eq!(validate.json()["violations"][0]["code"], json!("turn-out-of-order"));

    let surface = palimpsest(&["surface", f]);
    assert_eq!((surface.code, surface.json()), (0, json!([1])));
    assert!(surface.stderr.starts_with("warning: "), "{:?}", surface.stderr);
    assert!(surface.stderr.contains("turn-out-of-order"));

    let repair = palimpsest(&["repair", f]);
    assert_eq!((repair.code, repair.stdout.as_str()), (1, ""));
    assert!(repair.stderr.starts_with("error[turn-out-of-order]"), "{:?}", repair.stderr);
}

// ---------------------------------------------------------------- bad files

#[test]
fn load_errors_name_their_code_and_line_and_exit_1() {
    let cases = [
        ("err/empty.jsonl", "header-malformed", "err/empty.jsonl:1: "),
        ("err/not-jsonl.txt", "header-malformed", "err/not-jsonl.txt:1: "),
        ("err/header-is-an-event.jsonl", "header-malformed", "err/header-is-an-event.jsonl:1: "),
        ("err/header-duplicate-key.jsonl", "header-malformed", "err/header-duplicate-key.jsonl:1: "),
        ("err/version-1.jsonl", "header-version-unsupported", "err/version-1.jsonl:1: found version 1"),
        ("err/corrupt-middle.jsonl", "log-corrupt", "err/corrupt-middle.jsonl:6: not JSON"),
        ("err/blank-line.jsonl", "log-corrupt", "err/blank-line.jsonl:5: blank line"),
    ];
    for (file, code, where_what) in cases {
        for cmd in ["validate", "surface", "derive", "repair"] {
            let run = palimpsest(&[cmd, file]);
            assert_eq!(run.code, 1, "{cmd} {file}: {run:?}");
            let expected = format!("error[{code}]: {where_what}");
            assert!(run.stderr.starts_with(&expected), "{cmd} {file}: {:?}", run.stderr);
            assert_eq!(run.stderr.lines().count(), 1, "{cmd} {file}: one line: {:?}", run.stderr);
        }
        // --json still prints the object, with a null seq.
        let run = palimpsest(&["validate", "--json", file]);
        let report = run.json();
        assert_eq!(report["valid"], json!(false));
        assert_eq!(report["violations"][0]["code"], json!(code), "{file}");
        assert_eq!(report["violations"][0]["seq"], Value::Null, "{file}");
    }
}

#[test]
fn a_corrupt_line_counts_the_events_before_it_and_names_its_line_in_json() {
    let report = palimpsest(&["validate", "--json", "err/corrupt-middle.jsonl"]).json();
    assert_eq!(report["events"], json!(4));
    let message = report["violations"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("line 6: "), "{message}");
}

#[test]
fn a_missing_or_unreadable_file_is_an_io_error_exit_2() {
    for cmd in ["validate", "surface", "derive", "repair", "inspect"] {
        let run = palimpsest(&[cmd, "no/such/file.jsonl"]);
        assert_eq!(run.code, 2, "{cmd}: {run:?}");
        assert!(run.stderr.starts_with("error[io]: no/such/file.jsonl: cannot read"), "{:?}", run.stderr);
        assert_eq!(run.stdout, "");
    }
    // With --json the error is also JSON on stdout; stderr keeps its line.
    let run = palimpsest(&["validate", "--json", "no/such/file.jsonl"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(run.json()["error"]["code"], "io", "{run:?}");
    assert!(run.stderr.starts_with("error[io]: no/such/file.jsonl: cannot read"), "{run:?}");
}

#[test]
fn usage_errors_exit_2_with_a_usage_code() {
    for args in [&["explain"][..], &["validate", "--bogus", EXAMPLE], &["frobnicate"]] {
        let run = palimpsest(args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.starts_with("error[usage]: "), "{args:?}: {:?}", run.stderr);
    }
    let help = palimpsest(&["--help"]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("validate"));
    assert!(help.stdout.contains("demo"));
    assert!(help.stdout.contains("\n  run "), "{}", help.stdout);
    // `run` refuses a flag it does not know before it looks for a model.
    let run = palimpsest(&["run", "--bogus", "Hi"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("error[usage]: "), "{:?}", run.stderr);
}

// ---------------------------------------------------------------- tails

#[test]
fn a_torn_tail_is_a_note_not_a_violation() {
    let run = palimpsest(&["validate", "--json", "ok/torn-tail.jsonl"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json(), json!({"valid": true, "events": 9, "violations": []}));
    assert!(
        run.stderr.starts_with("note: ok/torn-tail.jsonl:11: dropped a torn last line"),
        "{:?}",
        run.stderr
    );
}

#[test]
fn repair_write_cuts_a_torn_tail_and_appends_the_closers() {
    let (_dir, path) = scratch_copy("ok/torn-tail.jsonl");
    let before = fs::read_to_string(&path).expect("read");
    let path_arg = path.to_string_lossy().into_owned();

    let run = palimpsest(&["repair", "--write", &path_arg]);
    assert_eq!(run.code, 0, "{run:?}");
    let closers = run.json();
    let types: Vec<&str> =
        closers.as_array().into_iter().flatten().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["step/end", "turn/end"]);

    let after = fs::read_to_string(&path).expect("read");
    let kept = &before[..before.rfind('\n').map_or(0, |i| i + 1)];
    // The closers are written exactly as printed, one event a line.
    let appended: String = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| format!("{}\n", l.trim().trim_end_matches(',')))
        .collect();
    assert_eq!(after, format!("{kept}{appended}"));

    // Now the log is balanced, whole and valid.
    let again = palimpsest(&["repair", &path_arg]);
    assert_eq!((again.code, again.json(), again.stderr.as_str()), (0, json!([]), ""));
    assert_eq!(palimpsest(&["validate", &path_arg]).code, 0);
}

#[test]
fn repair_write_adds_a_missing_final_newline_first() {
    let (_dir, path) = scratch_copy("ok/missing-newline.jsonl");
    let before = fs::read_to_string(&path).expect("read");
    assert!(!before.ends_with('\n'));
    let run = palimpsest(&["repair", "--write", &path.to_string_lossy()]);
    assert_eq!(run.code, 0, "{run:?}");
    let after = fs::read_to_string(&path).expect("read");
    assert!(after.starts_with(&format!("{before}\n{{\"seq\":2,")), "{after}");
    assert_eq!(after.lines().count(), before.lines().count() + 1);
    assert_eq!(palimpsest(&["validate", &path.to_string_lossy()]).stderr, "");
}

// ---------------------------------------------------------------- repair

#[test]
fn repair_closes_an_interrupted_turn_in_contract_order() {
    let run = palimpsest(&["repair", "ok/crash-open.jsonl"]);
    assert_eq!(run.code, 0, "{run:?}");
    let closers = run.json();
    let summary: Vec<(u64, String, Value)> = closers
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let code = e["data"]["error"]["code"].clone();
            (e["seq"].as_u64().unwrap_or(u64::MAX), e["type"].as_str().unwrap_or("").to_owned(), code)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (11, "tool/result".to_owned(), json!("TOOL_OUTCOME_UNKNOWN")),
            (12, "tool/result".to_owned(), json!("TOOL_NOT_STARTED")),
            (13, "step/end".to_owned(), Value::Null),
            (14, "turn/end".to_owned(), Value::Null),
        ]
    );
    insta::assert_snapshot!("repair_crash_open", run.stdout);
}

#[test]
fn repair_write_makes_the_log_balanced_and_is_idempotent() {
    let (_dir, path) = scratch_copy("ok/crash-open.jsonl");
    let p = path.to_string_lossy().into_owned();
    let printed = palimpsest(&["repair", &p]).json();
    let run = palimpsest(&["repair", "--write", &p]);
    assert_eq!((run.code, run.json()), (0, printed));
    assert!(run.stderr.contains("appended 4 closing events"), "{:?}", run.stderr);
    assert_eq!(palimpsest(&["validate", "--json", &p]).json()["events"], json!(15));
    assert_eq!(palimpsest(&["surface", &p]).json(), json!([1, 7, 9, 11, 12]));

    let bytes = fs::read(&path).expect("read");
    let second = palimpsest(&["repair", "--write", &p]);
    assert_eq!((second.code, second.json()), (0, json!([])));
    assert_eq!(fs::read(&path).expect("read"), bytes, "a balanced log is left untouched");
}

#[test]
fn repair_write_refuses_an_invalid_log_and_writes_nothing() {
    let (_dir, path) = scratch_copy("err/replace-reversed.jsonl");
    let before = fs::read(&path).expect("read");
    let run = palimpsest(&["repair", "--write", &path.to_string_lossy()]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, "");
    assert!(run.stderr.starts_with("error[replace-reversed]"), "{:?}", run.stderr);
    assert_eq!(fs::read(&path).expect("read"), before);
}

#[test]
fn repair_write_is_refused_while_another_writer_holds_the_file() {
    let (_dir, path) = scratch_copy("ok/crash-open.jsonl");
    let before = fs::read(&path).expect("read");
    let held = palimpsest_persistence_jsonl::SessionFile::open(&path).expect("lock the file");
    let run = palimpsest(&["repair", "--write", &path.to_string_lossy()]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("error[locked]"), "{:?}", run.stderr);
    assert_eq!(fs::read(&path).expect("read"), before);
    drop(held);
    // A child that another test thread forked while `held` was open shares
    // the lock until it execs; give such a sibling a moment.
    let mut run = palimpsest(&["repair", "--write", &path.to_string_lossy()]);
    for _ in 0..50 {
        if !run.stderr.contains("error[locked]") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        run = palimpsest(&["repair", "--write", &path.to_string_lossy()]);
    }
    assert_eq!(run.code, 0, "{run:?}");
}

// ---------------------------------------------------------------- an empty session

#[test]
fn a_header_only_session_is_valid_and_empty() {
    let f = "ok/header-only.jsonl";
    assert_eq!(
        palimpsest(&["validate", "--json", f]).json(),
        json!({"valid": true, "events": 0, "violations": []})
    );
    assert_eq!(palimpsest(&["surface", f]).json(), json!([]));
    assert_eq!(palimpsest(&["derive", f]).json(), json!([]));
    assert_eq!(palimpsest(&["repair", f]).json(), json!([]));
}

// ---------------------------------------------------------------- snapshots

#[test]
fn validate_human_output_for_every_fixture() {
    let mut all = String::new();
    for f in fixtures() {
        let args = ["validate", f.as_str()];
        all.push_str(&palimpsest(&args).transcript(&args));
        all.push('\n');
    }
    insta::assert_snapshot!("validate_human", all);
}

#[test]
fn validate_json_output_for_every_fixture() {
    let mut all = String::new();
    for f in fixtures() {
        let args = ["validate", "--json", f.as_str()];
        let run = palimpsest(&args);
        // The JSON object is printed whatever the verdict (exit 2 aside).
        assert!(run.code == 2 || run.json().is_object(), "{f}");
        all.push_str(&run.transcript(&args));
        all.push('\n');
    }
    insta::assert_snapshot!("validate_json", all);
}

/// `validate --json` prints the library's report as it serializes it:
/// a downstream validator calling `palimpsest_invariants::Report` gets
/// the same object, byte for byte.
#[test]
fn validate_json_is_the_library_report_serialized() {
    for f in fixtures() {
        let bytes = fs::read(test_data().join(&f)).expect("the fixture");
        let report = palimpsest_invariants::Report::check_jsonl(&bytes);
        let expected = serde_json::to_string(&report).expect("the report serializes");
        let run = palimpsest(&["validate", "--json", f.as_str()]);
        assert_eq!(run.code, if report.is_valid() { 0 } else { 1 }, "{f}");
        assert_eq!(run.stdout, format!("{expected}\n"), "{f}");
    }
}

#[test]
fn surface_for_every_valid_fixture() {
    let mut all = String::new();
    for f in fixtures().into_iter().filter(|f| f.starts_with("ok/")) {
        let args = ["surface", f.as_str()];
        all.push_str(&palimpsest(&args).transcript(&args));
        all.push('\n');
    }
    insta::assert_snapshot!("surface", all);
}

#[test]
fn inspect_shows_the_timeline() {
    for (name, file, code) in [
        ("inspect_example", EXAMPLE, 0),
        ("inspect_crash_open", "ok/crash-open.jsonl", 0),
        ("inspect_torn_tail", "ok/torn-tail.jsonl", 0),
        ("inspect_header_only", "ok/header-only.jsonl", 0),
        ("inspect_forked", "ok/forked.jsonl", 0),
        ("inspect_settings", "ok/settings.jsonl", 0),
        ("inspect_invalid", "err/replace-reversed.jsonl", 1),
        ("inspect_invariant", "err/invariant-then-rule.jsonl", 1),
        ("inspect_bad_header", "err/version-1.jsonl", 1),
    ] {
        let args = ["inspect", file];
        let run = palimpsest(&args);
        assert_eq!(run.code, code, "{file}: {run:?}");
        assert!(!run.stdout.contains('\x1b'), "no colour when stdout is not a terminal");
        insta::assert_snapshot!(name, run.transcript(&args));
    }
}

#[test]
fn inspect_marks_surface_shadowed_and_provenance() {
    let out = palimpsest(&["inspect", EXAMPLE]).stdout;
    let line = |seq: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{seq} ")) && l.contains('+'))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("8").contains("○") && line("8").ends_with("shadowed by 18"), "{}", line("8"));
    assert!(line("18").contains("⟲ replaces 8") && line("18").contains("shadowed by 20"), "{}", line("18"));
    assert!(line("20").contains("●") && line("20").contains("← cites 19,1,6,18,12"), "{}", line("20"));
    assert!(line("6").contains("← cites 3-5"), "{}", line("6"));
    assert!(!line("7").contains("●") && !line("7").contains("○"), "{}", line("7"));
}

#[test]
fn inspect_colour_follows_the_flag() {
    let always = palimpsest(&["inspect", "--color", "always", EXAMPLE]);
    assert!(always.stdout.contains("\x1b[32m●\x1b[0m"));
    let never = palimpsest(&["inspect", "--color", "never", EXAMPLE]);
    assert!(!never.stdout.contains('\x1b'));
    assert_eq!(palimpsest(&["inspect", "--color", "sometimes", EXAMPLE]).code, 2);
}
