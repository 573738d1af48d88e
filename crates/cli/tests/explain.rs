//! `palimpsest explain` end to end: snapshots of the report for every
//! message event of every valid fixture (the CLI's and core-session's),
//! and the `--json` shape.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use support::*;

fn cli_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/ok")
}

fn core_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core-session/test_data/ok")
}

/// The seqs worth explaining in a fixture: every event that carries a
/// message (where provenance and shadowing live), and the first event of
/// each other kind that occurs (a chunk, a turn bracket, a plugin event...),
/// so every branch of the report shows up.
fn interesting_seqs(dir: &Path, file: &str) -> Vec<u64> {
    let derive = ok(palimpsest(dir, &["validate", "--json", file]));
    let events = serde_json::from_str::<Value>(&derive.stdout).expect("JSON")["events"].as_u64().unwrap_or(0);
    let text = std::fs::read_to_string(dir.join(file)).expect("read");
    let mut seen_types = Vec::new();
    let mut seqs = Vec::new();
    for line in text.lines().skip(1) {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        let (Some(seq), Some(ty)) = (event["seq"].as_u64(), event["type"].as_str()) else { continue };
        if seq >= events {
            break;
        }
        let carries_message = event["data"].get("message").is_some();
        if carries_message || !seen_types.contains(&ty.to_owned()) {
            seqs.push(seq);
            seen_types.push(ty.to_owned());
        }
    }
    seqs
}

fn snapshot_fixture(dir: &Path, file: &str, name: &str) {
    let mut report = String::new();
    for seq in interesting_seqs(dir, file) {
        let seq = seq.to_string();
        let run = ok(palimpsest(dir, &["explain", file, &seq]));
        report.push_str(&format!("$ palimpsest explain {file} {seq}\n{}{}\n", run.stderr, run.stdout));
    }
    insta::assert_snapshot!(name, report);
}

#[test]
fn explain_says_what_settings_replaced_changed_and_whether_they_hold() {
    let first = ok(palimpsest(&cli_data(), &["explain", "settings.jsonl", "0"])).stdout;
    assert!(first.contains("  settings  the session's first settings; replaced by those of 8\n"), "{first}");
    assert!(first.contains("never on the surface: session/settings events never join it"), "{first}");
    let last = ok(palimpsest(&cli_data(), &["explain", "settings.jsonl", "8"])).stdout;
    assert!(
        last.contains(
            "  settings  replace those of 0, changing systemPrompt, model, params, seed; in effect now: the next request is made with them\n"
        ),
        "{last}"
    );
}

#[test]
fn explain_the_cli_fixtures() {
    for file in [
        "compaction-and-prune.jsonl",
        "crash-open.jsonl",
        "forked.jsonl",
        "torn-tail.jsonl",
        "settings.jsonl",
    ] {
        let name = format!("cli_{}", file.trim_end_matches(".jsonl"));
        snapshot_fixture(&cli_data(), file, &name);
    }
}

#[test]
fn explain_the_core_session_fixtures() {
    for file in [
        "crash-open.jsonl",
        "multi-step-tools.jsonl",
        "plain-chat.jsonl",
        "tool-result-pruning.jsonl",
        "two-compactions.jsonl",
    ] {
        let name = format!("core_{}", file.trim_end_matches(".jsonl"));
        snapshot_fixture(&core_data(), file, &name);
    }
}

#[test]
fn explain_json_is_one_object_with_the_documented_keys() {
    let run = ok(palimpsest(&cli_data(), &["explain", "compaction-and-prune.jsonl", "8", "--json"]));
    let value: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        value,
        json!({
            "session": "example-1", "seq": 8, "type": "tool/result", "time": 1767225600080_u64,
            "turn": 1, "step": 1, "surfacePosition": null, "surfaceOp": "append",
            "shadowed": [], "shadowedBy": 18, "shadowChain": [18, 20], "standsInItsPlace": 20,
            "cites": [{"seq": 7, "type": "tool/call", "cites": []}], "citedBy": [18], "error": null
        })
    );
    let run = ok(palimpsest(&cli_data(), &["explain", "compaction-and-prune.jsonl", "20", "--json"]));
    let value: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(value["surfacePosition"], json!(0));
    assert_eq!(value["surfaceOp"], json!({"op": "replace", "start": 1, "end": 12}));
    assert_eq!(value["shadowed"], json!([1, 6, 18, 12]), "in surface order");
    let grandchildren: Vec<Value> =
        value["cites"].as_array().expect("cites").iter().map(|c| c["cites"].clone()).collect();
    assert_eq!(grandchildren[3][0]["cites"][0]["type"], json!("tool/call"), "recursive to the call");
}

#[test]
fn explain_refuses_a_missing_event_and_an_invalid_log() {
    let run = palimpsest(&cli_data(), &["explain", "compaction-and-prune.jsonl", "27"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(
        run.stderr,
        "error[not-found]: compaction-and-prune.jsonl: no event with seq 27; it has 27 events (seq 0 to 26)\n"
    );
    let err = cli_data().join("../err");
    let run = palimpsest(&err, &["explain", "replace-reversed.jsonl", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error[replace-reversed]: replace-reversed.jsonl:5: seq 3: "), "{run:?}");
}
