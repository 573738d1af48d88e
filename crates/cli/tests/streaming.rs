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

/// `inspect`, `explain` and `export` read the log streamed too (issue 18):
/// on a session long enough that the checked session lets go of its early
/// events, they still show every event, and what they say of an early
/// event (shadowed many times over, its chunks long gone from memory) is
/// what the log says. A file and a SQLite store say the same.
#[test]
fn inspect_explain_and_export_show_every_event_of_a_long_session_from_a_file_and_a_store() {
    let (text, _) = long_session(1200, 0);
    let events = text.lines().count() - 1;
    let dir = scratch(&[]);
    let d = dir.path();
    fs::write(d.join("long.jsonl"), &text).expect("write");
    ok(palimpsest(d, &["convert", "long.jsonl", "long.db"]));

    // Eleven events a turn. Turn 1: turn/start 0, user 1, step/start 2,
    // chunks 3-7, assistant 8, step/end 9, turn/end 10; the first
    // compaction follows turn 10.
    let first_summary = 11 * 10;
    for store in ["long.jsonl", "long.db"] {
        let inspect = ok(palimpsest(d, &["inspect", "--color", "never", store])).stdout;
        let timeline: Vec<&str> = inspect
            .lines()
            .skip_while(|l| !l.starts_with("timeline"))
            .skip(2)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(timeline.len(), events, "{store}: one line per event");
        assert!(inspect.contains(&format!("{events} (seq 0-{}) over", events - 1)), "{store}");
        assert!(inspect.contains("… and 108 more"), "{store}: 120 compactions, 12 listed");
        let a1 = timeline[8];
        assert!(a1.contains("○") && a1.contains(&format!("shadowed by {first_summary}")), "{store}: {a1}");
        assert!(a1.contains("← cites 3-7"), "{store}: {a1}");
        assert!(timeline[events - 1].contains("●"), "{store}: the last summary is on the surface");

        let explain = ok(palimpsest(d, &["explain", store, "8", "--json"])).json();
        assert_eq!(explain["type"], "assistant/message");
        assert_eq!((explain["turn"].as_u64(), explain["step"].as_u64()), (Some(1), Some(1)));
        // Shadowed by every compaction in turn: 120, shown by its ends.
        let chain = explain["shadowChain"].as_array().map(Vec::len);
        assert_eq!(chain, Some(64), "{store}: the first and last 32 of the chain");
        assert_eq!(explain["shadowChainElided"], 120 - 64, "{store}");
        assert_eq!(explain["shadowedBy"], first_summary);
        assert_eq!(explain["standsInItsPlace"].as_u64(), Some(events as u64 - 1));
        let cited: Vec<u64> = explain["cites"]
            .as_array()
            .map(|c| c.iter().filter_map(|n| n["seq"].as_u64()).collect())
            .unwrap_or_default();
        assert_eq!(cited, [3, 4, 5, 6, 7], "{store}");
        let chunk = ok(palimpsest(d, &["explain", store, "3", "--json"])).json();
        assert_eq!(chunk["citedBy"], json!([8]), "{store}");
        let summary = ok(palimpsest(d, &["explain", store, &first_summary.to_string()])).stdout;
        assert!(summary.contains("taking 1, 8, 12, 19"), "{store}: {summary}");
        assert!(
            summary.contains("├─ 8 assistant/message"),
            "{store}: the tree reaches the chunks: {summary}"
        );
        assert!(summary.contains("│  ├─ 3 assistant/chunk"), "{store}: {summary}");

        let export = ok(palimpsest(d, &["export", store, "--format", "json"])).json();
        let items = export["items"].as_array().map(Vec::len);
        // Every turn's start, user message, answer and end; every summary.
        assert_eq!(items, Some(1200 * 4 + 120), "{store}");
        assert_eq!(export["session"]["events"], events);
        let model = ok(palimpsest(d, &["export", store, "--format", "json", "--view", "model"])).json();
        assert_eq!(model["items"].as_array().map(Vec::len), Some(1), "{store}: the last summary alone");
        let markdown = ok(palimpsest(d, &["export", store, "--format", "markdown"])).stdout;
        assert_eq!(markdown.matches("## Turn ").count(), 1200, "{store}");
    }
    // The file and the store tell the same story.
    let json = |store: &str, args: &[&str]| {
        let mut all = vec![args[0], store];
        all.extend(&args[1..]);
        ok(palimpsest(d, &all)).stdout
    };
    for args in
        [&["export", "--format", "json"][..], &["explain", "500", "--json"], &["explain", "8", "--json"]]
    {
        assert_eq!(json("long.jsonl", args), json("long.db", args), "{args:?}");
    }
}
