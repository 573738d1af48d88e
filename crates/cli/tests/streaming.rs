//! `validate` streams the log through the checks (issue 18): on a session
//! long enough that the checker lets go of events several times over, it
//! finds what a whole read finds, at the same lines and seqs, in a file and
//! in a SQLite store.

mod support;

use std::fmt::Write as _;
use std::fs;

use serde_json::json;
use support::*;

/// A session of `turns` turns (one step of five chunks each), compacted
/// every ten turns; turn `broken` opens its step as step 2, a
/// `step-out-of-order` (section 2a: reported, not fatal). Returns the
/// file's text and the seq of that `step/start`.
fn long_session(turns: u64, broken: u64) -> (String, u64) {
    let mut text = String::from(r#"{"type":"session","version":0,"id":"long","createdAt":0}"#);
    text.push('\n');
    let mut seq = 0u64;
    let mut surface: Vec<u64> = Vec::new();
    let mut bad_seq = 0;
    let mut push = |text: &mut String, mut event: serde_json::Value| -> u64 {
        let at = seq;
        event["seq"] = json!(at);
        event["time"] = json!(at);
        let _ = writeln!(text, "{event}");
        seq += 1;
        at
    };
    let message = |id: String, role: &str, source: serde_json::Value| json!({"id": id, "role": role, "content": [{"type": "text", "text": "words"}], "source": source});
    for turn in 1..=turns {
        push(&mut text, json!({"type": "turn/start", "data": {"turn": turn}}));
        let user = message(format!("u{turn}"), "user", json!({"kind": "user"}));
        let at = push(
            &mut text,
            json!({"type": "user/message", "data": {"turn": turn, "message": user}, "surfaceOp": "append"}),
        );
        surface.push(at);
        let step = if turn == broken { 2 } else { 1 };
        let at = push(&mut text, json!({"type": "step/start", "data": {"turn": turn, "step": step}}));
        if turn == broken {
            bad_seq = at;
        }
        let chunks: Vec<u64> = (0..5)
            .map(|_| {
                let chunk = json!({"type": "text-delta", "index": 0, "text": "x"});
                push(
                    &mut text,
                    json!({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": chunk}}),
                )
            })
            .collect();
        let answer =
            message(format!("a{turn}"), "assistant", json!({"kind": "model", "provider": "p", "model": "m"}));
        let at = push(
            &mut text,
            json!({"type": "assistant/message", "data": {"turn": turn, "step": step, "message": answer}, "surfaceOp": "append", "sourceEventSeqs": chunks}),
        );
        surface.push(at);
        push(&mut text, json!({"type": "step/end", "data": {"turn": turn, "step": step}}));
        push(&mut text, json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}));
        if turn % 10 == 0 {
            let summary =
                message(format!("s{turn}"), "user", json!({"kind": "plugin", "plugin": "compaction"}));
            let (start, end) = (surface[0], surface[surface.len() - 1]);
            let at = push(
                &mut text,
                json!({"type": "user/message", "data": {"message": summary}, "surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": surface}),
            );
            surface = vec![at];
        }
    }
    (text, bad_seq)
}

#[test]
fn a_streamed_validate_finds_a_late_violation_at_its_line_in_a_file_and_a_store() {
    // 1,200 turns: over 13,000 events, the checker trims every 4,096.
    let (text, bad_seq) = long_session(1200, 1100);
    let events = text.lines().count() as u64 - 1;
    assert!(events > 13_000);
    let dir = scratch(&[]);
    let d = dir.path();
    fs::write(d.join("long.jsonl"), &text).expect("write");

    let file = palimpsest(d, &["validate", "--json", "long.jsonl"]);
    assert_eq!(file.code, 1, "{file:?}");
    let report = file.json();
    assert_eq!(report["events"], events);
    let codes: Vec<(&str, u64)> = report["violations"]
        .as_array()
        .map(|v| {
            v.iter().map(|f| (f["code"].as_str().unwrap_or(""), f["seq"].as_u64().unwrap_or(0))).collect()
        })
        .unwrap_or_default();
    assert_eq!(codes, [("step-out-of-order", bad_seq)]);
    let human = palimpsest(d, &["validate", "long.jsonl"]);
    let line = bad_seq + 2;
    assert!(
        human.stderr.contains(&format!("error[step-out-of-order]: long.jsonl:{line}: seq {bad_seq}:")),
        "{}",
        human.stderr
    );
    assert!(human.stdout.contains(&format!("invalid: 1 violation in {events} events")), "{}", human.stdout);

    // The same session, valid, in a SQLite store: the store hands its rows
    // to the checks as it reads them.
    let (valid, _) = long_session(1200, 0);
    fs::write(d.join("valid.jsonl"), &valid).expect("write");
    let from_file = ok(palimpsest(d, &["validate", "--json", "valid.jsonl"])).stdout;
    ok(palimpsest(d, &["convert", "valid.jsonl", "long.db"]));
    let from_store = ok(palimpsest(d, &["validate", "--json", "long.db"])).stdout;
    assert_eq!(from_store, from_file);
    let summary = ok(palimpsest(d, &["validate", "long.db"])).stdout;
    assert!(summary.contains(&format!("valid: {events} events, 1 on the surface")), "{summary}");

    // A row broken deep in the store stops the check there, as a whole
    // read would.
    break_stored_event(&d.join("long.db"), 9000);
    let broken = palimpsest(d, &["validate", "long.db"]);
    assert_eq!(broken.code, 1, "{broken:?}");
    assert!(broken.stderr.contains("seq 9000"), "{}", broken.stderr);
}
