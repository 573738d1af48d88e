//! The hand-read canonical envelope decides exactly as serde's reading
//! of the same line: same event, or the same error.

use proptest::prelude::*;

use super::*;

/// Every line of the valid fixtures, plus lines that put the suffixes
/// the canonical reader looks for inside `data`.
fn seeds() -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for file in ["plain-chat", "multi-step-tools", "compaction-and-prune", "two-compactions"] {
        let path = format!("{}/test_data/ok/{file}.jsonl", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        lines.extend(text.lines().skip(1).map(str::to_owned));
    }
    lines.extend(
        [
            r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"surfaceOp":"append"}}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":[1,"sourceEventSeqs",[1]]}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1},"surfaceOp":{"op":"replace","start":1,"end":2}}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"surfaceOp":{"op":"replace","start":1,"end":2}}}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":"s\",\"surfaceOp\":\"append\""}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":1,"sourceEventSeqs":[0]}"#,
            r#"{"seq":03,"time":1,"type":"x/y","data":1}"#,
            r#"{"seq":3,"time":1.0,"type":"x/y","data":1}"#,
            r#"{"seq":18446744073709551616,"time":1,"type":"x/y","data":1}"#,
            r#"{"seq":3,"time":1,"type":"x\"y","data":1}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":1 }"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":{},"sourceEventSeqs":[],"surfaceOp":"append"}"#,
            // Keys named twice: in data, in the envelope, in the surface op.
            r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1,"b":{"c":2,"c":2}}}"#,
            r#"{"seq":3,"time":1,"type":"x/y","data":{"a":1},"data":{"a":1}}"#,
            r#"{"seq":3,"seq":3,"time":1,"type":"x/y","data":1}"#,
            r#"{"seq":3,"time":1,"type":"user/message","data":{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi","type":"text"}],"source":{"kind":"user"}}},"surfaceOp":{"op":"replace","start":1,"end":2,"end":2}}"#,
            r#"{"seq":3,"time":1,"type":"session/settings","data":{"settings":{"systemPrompt":"Be a pirate.","model":"m","tools":[{"name":"t","parameters":{"type":"object"},"x":1}],"contextBudget":9,"params":{"temperature":0.5}}}}"#,
            r#"{"seq":3,"time":1,"type":"session/settings","data":{"settings":{}},"surfaceOp":"append"}"#,
        ]
        .map(str::to_owned),
    );
    lines
}

/// A seed line, then a few edits: a byte replaced, removed or inserted,
/// or a canonical fragment spliced in anywhere.
fn line() -> impl Strategy<Value = String> {
    const PIECES: &[&str] = &[
        ",\"surfaceOp\":\"append\"",
        ",\"sourceEventSeqs\":[1,2]",
        ",\"surfaceOp\":{\"op\":\"replace\",\"start\":0,\"end\":1}",
        "}",
        "]",
        "\"",
        "\\",
        ",",
        " ",
        "\n",
        "\r",
        "0",
        "null",
        // A key named again, wherever it lands.
        "\"type\":\"text\",",
        ",\"turn\":1",
        "\"seq\":3,",
        ",\"op\":\"replace\"",
    ];
    let edit = (0u8..4, any::<prop::sample::Index>(), prop::sample::select(PIECES), any::<u8>());
    (prop::sample::select(seeds()), prop::collection::vec(edit, 0..3)).prop_map(|(seed, edits)| {
        let mut bytes = seed.into_bytes();
        for (kind, at, piece, byte) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 if i < bytes.len() => bytes[i] = byte % 0x60 + 0x20,
                1 if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {
                    bytes.splice(i..i, piece.bytes());
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6000, ..ProptestConfig::default() })]

    #[test]
    fn the_canonical_reader_agrees_with_serde(line in line()) {
        prop_assert_eq!(Event::from_json(&line), Event::from_general_json(&line), "{}", line);
    }
}

#[test]
fn canonical_lines_take_the_canonical_reader() {
    let seeds = seeds();
    let canonical = seeds.iter().filter(|l| Canonical::read(l).is_some()).count();
    // Every fixture line is canonical; only the crafted ones may not be.
    assert!(canonical >= seeds.len() - 18, "{canonical} of {}", seeds.len());
    let line = r#"{"seq":7,"time":9,"type":"user/message","data":{"x":[1]},"sourceEventSeqs":[1,5],"surfaceOp":{"op":"replace","start":1,"end":5}}"#;
    let c = Canonical::read(line).unwrap();
    assert_eq!((c.seq, c.time, c.event_type, c.data), (7, 9, "user/message", r#"{"x":[1]}"#));
    assert_eq!(c.sources.as_deref(), Some(&[1, 5][..]));
    assert_eq!(c.op, Some(SurfaceOp::Replace { start: 1, end: 5 }));
    for not_canonical in [
        r#"{"seq":01,"time":9,"type":"t","data":1}"#,
        r#"{"seq":1,"time":9,"type":"t","data": 1}"#,
        r#"{"time":9,"seq":1,"type":"t","data":1}"#,
        r#"{"seq":1,"time":9,"type":"t\n","data":1}"#,
    ] {
        assert!(Canonical::read(not_canonical).is_none(), "{not_canonical}");
    }
}

proptest! {
    /// The buffer reserved by the hint holds the written text: the hint is
    /// never below it.
    #[test]
    fn the_length_hint_covers_the_written_text(line in line(), seq in any::<u64>(), time in any::<u64>(), ends in any::<(u64, u64)>()) {
        if let Ok(e) = Event::from_json(&line) {
            prop_assert!(e.to_json().len() <= e.json_len_hint(), "{}", line);
            // The widest numbers, in the envelope and in a replace op.
            let mut json: serde_json::Value = serde_json::from_str(&line).map_err(|e| TestCaseError::fail(e.to_string()))?;
            json["seq"] = seq.into();
            json["time"] = time.into();
            if json["surfaceOp"].is_object() {
                json["surfaceOp"]["start"] = ends.0.min(ends.1).into();
                json["surfaceOp"]["end"] = ends.0.max(ends.1).into();
            }
            if let Ok(wide) = Event::from_json(&json.to_string()) {
                prop_assert!(wide.to_json().len() <= wide.json_len_hint(), "{}", json);
            }
        }
    }
}

#[test]
fn the_length_hint_covers_the_widest_envelope() {
    let data = r#"{"message":{"id":"s","role":"user","content":[{"type":"text","text":"x"}],"source":{"kind":"plugin","plugin":"compaction"}}}"#;
    let line = format!(
        r#"{{"seq":{m},"time":{m},"type":"user/message","data":{data},"sourceEventSeqs":[{a},{b}],"surfaceOp":{{"op":"replace","start":{a},"end":{b}}}}}"#,
        m = u64::MAX,
        // Earlier than the event, and as wide (20 digits).
        a = u64::MAX - 2,
        b = u64::MAX - 1,
    );
    let e = Event::from_json(&line).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.to_json(), line);
    assert!(line.len() <= e.json_len_hint(), "{} > {}", line.len(), e.json_len_hint());
}
