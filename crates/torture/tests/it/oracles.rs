//! The fuzz targets' properties on stable: proptest drives the same oracle
//! functions `cargo fuzz` runs (`palimpsest_torture::oracle`), with
//! arbitrary bytes and with mutations of the valid fixtures, so CI checks
//! them on every run without nightly. `cargo xtask fuzz` runs the real
//! fuzzers for as long as you like.

use std::path::Path;

use palimpsest_torture::oracle::{json_events, jsonl_bytes, surface_ops, Reached};
use proptest::prelude::*;

/// The valid session files of core-session's and invariants' fixtures (the
/// fuzz seed corpus is made of the same files).
fn fixtures() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in ["core-session/test_data/ok", "invariants/test_data/ok", "invariants/test_data/err"] {
        let dir = root.join(dir);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        paths.sort();
        out.extend(paths.iter().map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{e}"))));
    }
    assert!(out.len() >= 10, "fixtures not found under {}", root.display());
    out
}

/// One edit to a file's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// Overwrite the digits at `at` with a number, seqs near `u64::MAX`
    /// included (they once overflowed a line computation; see
    /// docs/reliability.md §4).
    Number {
        at: usize,
        value: u64,
    },
    Truncate {
        at: usize,
    },
    DuplicateLine {
        line: usize,
    },
    SwapLines {
        a: usize,
        b: usize,
    },
    Token {
        at: usize,
        token: &'static str,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let tokens = prop::sample::select(vec![
        "null",
        "\"append\"",
        "[]",
        "{}",
        "\"\\u0000\"",
        "-1",
        "1e3",
        "\"replace\"",
        "\"turn/start\"",
        "\"tool/result\"",
        "\"surfaceOp\":",
        "\"sourceEventSeqs\":",
        ",",
        "\n",
        "\"",
        "\\",
        "\u{feff}",
    ]);
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (
            any::<usize>(),
            prop_oneof![
                0u64..64,
                Just(u64::from(u32::MAX)),
                Just(1 << 53),
                Just(u64::MAX - 1),
                Just(u64::MAX)
            ]
        )
            .prop_map(|(at, value)| Mutation::Number { at, value }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines { a, b }),
        (any::<usize>(), tokens).prop_map(|(at, token)| Mutation::Token { at, token }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len().max(1);
    match m {
        Mutation::Flip { at, bit } => {
            if let Some(b) = bytes.get_mut(at % len) {
                *b ^= 1 << bit;
            }
        }
        Mutation::Delete { at, len: n } => {
            let start = at % len;
            let end = (start + n).min(bytes.len());
            if start < end {
                bytes.drain(start..end);
            }
        }
        Mutation::Insert { at, bytes: new } => {
            let at = at % (bytes.len() + 1);
            bytes.splice(at..at, new.iter().copied());
        }
        Mutation::Number { at, value } => {
            // The first run of digits at or after `at`.
            let from = at % len;
            if let Some(start) = bytes.iter().skip(from).position(u8::is_ascii_digit).map(|i| from + i) {
                let end = bytes[start..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .map_or(bytes.len(), |i| start + i);
                bytes.splice(start..end, value.to_string().into_bytes());
            }
        }
        Mutation::Truncate { at } => bytes.truncate(at % (bytes.len() + 1)),
        Mutation::DuplicateLine { line } | Mutation::SwapLines { a: line, .. } => {
            let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            let n = lines.len();
            match m {
                Mutation::SwapLines { b, .. } => lines.swap(line % n, b % n),
                _ => {
                    let copy = lines[line % n].clone();
                    lines.insert(line % n, copy);
                }
            }
            *bytes = lines.join(&b'\n');
        }
        Mutation::Token { at, token } => {
            let at = at % (bytes.len() + 1);
            bytes.splice(at..at, token.bytes());
        }
    }
}

/// A fixture with a few mutations.
fn mutated_fixture() -> impl Strategy<Value = Vec<u8>> {
    let fixtures = fixtures();
    (0..fixtures.len(), prop::collection::vec(mutation(), 0..4)).prop_map(move |(i, ms)| {
        let mut bytes = fixtures[i].clone();
        for m in &ms {
            apply(&mut bytes, m);
        }
        bytes
    })
}

/// Events made of plausible pieces: the envelope's keys in any mix, values
/// of every kind, so the rules of section 1 and 2 are reached.
fn generated_events() -> impl Strategy<Value = Vec<u8>> {
    let types = prop::sample::select(vec![
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "user/message",
        "context/message",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        "compaction/start",
        "x/y",
    ]);
    let data = prop::sample::select(vec![
        r#"{"turn":1}"#,
        r#"{"turn":1,"step":1}"#,
        r#"{"turn":1,"reason":{"kind":"completed"}}"#,
        r#"{"message":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}"#,
        r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"t","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}}}"#,
        r#"{"turn":1,"step":1,"callId":"c1","name":"t","arguments":"{}"}"#,
        r#"{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[]}],"source":{"kind":"tool","callId":"c1"}}}"#,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        "null",
        "[1,2]",
        "\"s\"",
    ]);
    let op = prop_oneof![
        Just(String::new()),
        Just(r#","surfaceOp":"append""#.to_owned()),
        (0u64..8, 0u64..8)
            .prop_map(|(s, e)| format!(r#","surfaceOp":{{"op":"replace","start":{s},"end":{e}}}"#)),
        Just(r#","surfaceOp":null"#.to_owned()),
        Just(r#","surfaceOp":{"op":"replace","start":0}"#.to_owned()),
    ];
    let sources = prop_oneof![
        Just(String::new()),
        prop::collection::vec(0u64..10, 0..4).prop_map(|v| format!(
            r#","sourceEventSeqs":[{}]"#,
            v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        )),
        Just(r#","sourceEventSeqs":"x""#.to_owned()),
    ];
    let seq = prop_oneof![4 => 0u64..12, 1 => Just(u64::from(u32::MAX)), 1 => Just(u64::MAX - 1), 1 => Just(u64::MAX)];
    let event = (seq, types, data, sources, op).prop_map(|(seq, t, d, s, o)| {
        format!(r#"{{"seq":{seq},"time":{seq},"type":"{t}","data":{d}{s}{o}}}"#)
    });
    prop::collection::vec(event, 0..12).prop_map(|lines| lines.join("\n").into_bytes())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(384)
}

proptest! {
    // 384 cases each in CI; `PROPTEST_CASES=n` runs more.
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn jsonl_load_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..400)) {
        jsonl_bytes(&data);
    }

    #[test]
    fn jsonl_load_mutated_fixtures(data in mutated_fixture()) {
        jsonl_bytes(&data);
    }

    #[test]
    fn surface_ops_arbitrary_sequences(data in prop::collection::vec(any::<u8>(), 0..600)) {
        surface_ops(&data);
    }

    #[test]
    fn seed_events_mutated_fixture_lines(data in mutated_fixture()) {
        json_events(&data);
    }

    #[test]
    fn seed_events_generated(data in generated_events()) {
        json_events(&data);
    }

    #[test]
    fn seed_events_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..300)) {
        json_events(&data);
    }
}

/// The generators reach the deep checks, not only the first refusal: the
/// unmutated fixtures load as sessions through every oracle, and op
/// sequences build sessions.
#[test]
fn the_oracles_reach_whole_sessions() {
    for (i, f) in fixtures().iter().take(6).enumerate() {
        assert_eq!(jsonl_bytes(f), Reached::Session, "core-session fixture {i}");
        assert!(json_events(f) >= Reached::Events, "core-session fixture {i}");
    }
    let ops: Vec<u8> = (0..=255u8).collect();
    assert_eq!(surface_ops(&ops), Reached::Session);
}
