//! Realistic sessions kept as `.jsonl` fixtures in `test_data/ok/`: their
//! surface, derived history (with provenance) and repair closers are pinned
//! by snapshots. Each must also load, re-serialize byte for byte, and — once
//! repaired — need no more repair.

use std::fmt::Write as _;

use palimpsest_core_session::jsonl::{self, JsonlLog};
use palimpsest_core_session::repair::{needs_repair, repair};
use palimpsest_core_session::Session;

fn load(name: &str) -> (String, Session) {
    let path = format!("{}/test_data/ok/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let session = JsonlLog::parse(text.as_bytes()).unwrap().into_session().unwrap();
    (text, session)
}

/// A reviewable rendering: the surface, then each derived message with its
/// provenance, then the derived messages as JSON, then the repair closers.
fn render(session: &Session) -> String {
    let mut out = String::new();
    writeln!(out, "events: {}", session.events().len()).unwrap();
    writeln!(out, "surface: {:?}", session.surface()).unwrap();
    writeln!(out, "derived:").unwrap();
    let derived = session.derive_messages();
    for m in &derived {
        let sources = m.source_event_seqs.map_or("-".to_owned(), |s| format!("{s:?}"));
        writeln!(out, "  #{} {} {} {:?} <- {}", m.seq, m.event_type, m.message.id, m.message.role, sources)
            .unwrap();
    }
    let raw: Vec<serde_json::Value> =
        derived.iter().map(|m| serde_json::from_str(m.raw.get()).unwrap()).collect();
    writeln!(out, "messages:\n{}", serde_json::to_string_pretty(&raw).unwrap()).unwrap();
    let closers = repair(session.events());
    writeln!(out, "repair: {} closer(s)", closers.len()).unwrap();
    for c in &closers {
        writeln!(out, "{}", c.to_json()).unwrap();
    }
    out
}

fn check_fixture(name: &str) -> Session {
    let (text, session) = load(name);
    let bytes = jsonl::to_bytes(session.header(), session.events());
    assert_eq!(String::from_utf8(bytes).unwrap(), text, "{name} does not round-trip byte for byte");
    insta::assert_snapshot!(name, render(&session));
    session
}

#[test]
fn plain_chat() {
    let s = check_fixture("plain-chat");
    assert_eq!(s.derive_messages().len(), 6);
}

#[test]
fn multi_step_tools() {
    let s = check_fixture("multi-step-tools");
    // Every tool call is followed by its result in the derived history.
    let ids: Vec<_> = s.derive_messages().into_iter().map(|m| m.message.id).collect();
    assert_eq!(ids.len(), 7);
}

#[test]
fn two_compactions() {
    let s = check_fixture("two-compactions");
    let first = s.derive_messages()[0].message.id.clone();
    assert!(first.starts_with("sum"), "the second summary leads the history, got {first}");
}

#[test]
fn tool_result_pruning() {
    let s = check_fixture("tool-result-pruning");
    let original = s.events().iter().find(|e| e.event_type().as_str() == "tool/result").unwrap().seq();
    let pruned = s.derive_messages().into_iter().find(|m| m.raw.get().contains("[pruned:")).unwrap();
    assert_eq!(pruned.source_event_seqs, Some(&[original][..]));
    assert!(!s.surface().contains(&original), "the original result stays in the log, off the surface");
}

#[test]
fn worked_example_from_the_contract() {
    let s = check_fixture("compaction-and-prune");
    assert_eq!(s.surface(), &[20, 15, 17, 24]);
}

#[test]
fn crash_repaired_tail() {
    let (_, crashed) = load("crash-open");
    assert!(needs_repair(crashed.events()));
    let closers = repair(crashed.events());
    // Deterministic: the same log gives the same closers.
    assert_eq!(closers, repair(crashed.events()));
    let (header, mut events) = crashed.into_parts();
    events.extend(closers);
    let repaired = Session::from_log(header, events).unwrap();
    assert!(!needs_repair(repaired.events()));
    insta::assert_snapshot!("crash-repaired", render(&repaired));
}

/// The hand-written writer produces exactly serde's bytes for every event of
/// every fixture (plugin types with characters to escape included).
#[test]
fn the_fast_writer_writes_what_serde_writes() {
    let dir = format!("{}/test_data/ok", env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            let log = JsonlLog::parse(&std::fs::read(&path).unwrap()).unwrap();
            for e in &log.events {
                assert_eq!(e.to_json(), serde_json::to_string(e).unwrap(), "{}", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 100);
    let odd = palimpsest_core_session::Event::from_json(
        r#"{"seq":18446744073709551615,"time":0,"type":"odd \"type\"\n✓","data":null}"#,
    )
    .unwrap();
    assert_eq!(odd.to_json(), serde_json::to_string(&odd).unwrap());
}
