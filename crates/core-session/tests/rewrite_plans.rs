//! Compaction and pruning plans, applied to the fixture sessions: the
//! rewritten session must be accepted by the surface rules and its derived
//! history must still pair every tool call with a result.

use std::collections::HashSet;

use palimpsest_core_session::jsonl::JsonlLog;
use palimpsest_core_session::payload::*;
use palimpsest_core_session::rewrite::{plan_compaction, plan_pruning, pruned_result};
use palimpsest_core_session::{Session, SurfaceIntent};

fn load(name: &str) -> Session {
    let path = format!("{}/test_data/ok/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    JsonlLog::parse(&std::fs::read(path).unwrap()).unwrap().into_session().unwrap()
}

fn summary(id: &str) -> UserMessage {
    UserMessage {
        turn: None,
        message: Message {
            id: id.into(),
            role: Role::User,
            content: vec![Block::text("summary")],
            source: Source::Plugin { plugin: "compaction".into() },
        },
    }
}

/// Every requested call in the derived history has a result, and every
/// result answers a requested call.
#[track_caller]
fn assert_exchanges_paired(s: &Session) {
    let (mut asked, mut answered) = (HashSet::new(), HashSet::new());
    for m in s.derive_messages() {
        for b in &m.message.content {
            match b {
                Block::ToolCall { id, .. } => {
                    asked.insert(id.clone());
                }
                Block::ToolResult { tool_call_id, .. } => {
                    answered.insert(tool_call_id.clone());
                }
                _ => {}
            }
        }
    }
    assert_eq!(asked, answered, "surface {:?}", s.surface());
}

#[test]
fn compaction_never_splits_a_tool_exchange() {
    let s = load("multi-step-tools");
    // Surface: u, a(call_a, call_b), r_a, r_b, a(call_c), r_c, a(final).
    // Keeping 2 would cut between a(call_c) and r_c: the cut moves earlier.
    for keep in 0..s.surface().len() {
        let mut s = load("multi-step-tools");
        let Some(plan) = plan_compaction(&s, keep) else { continue };
        assert!(plan.shadowed.len() >= 2);
        assert!(s.surface().len() - plan.shadowed.len() >= keep);
        s.append_surface(0, summary("sum"), plan.intent(&[])).unwrap();
        assert_exchanges_paired(&s);
    }
    let plan = plan_compaction(&s, 2).unwrap();
    assert_eq!(plan.shadowed.len(), 4, "u, a(call_a,call_b), r_a, r_b");
}

#[test]
fn repeated_compaction_starts_at_the_previous_summary() {
    let mut s = load("two-compactions");
    let lead = s.surface()[0];
    let plan = plan_compaction(&s, 1).unwrap();
    assert_eq!(plan.start, lead, "the previous summary is the oldest surface entry");
    let kept = *s.surface().last().unwrap();
    let seq = s.append_surface(0, summary("sum3"), plan.intent(&[])).unwrap();
    assert_eq!(s.surface(), &[seq, kept]);
}

#[test]
fn compaction_keeps_the_open_turns_input() {
    let s = load("crash-open");
    // The open turn's user message is u3 (seq 10): nothing from it on may be
    // shadowed, whatever the tail to keep.
    let plan = plan_compaction(&s, 0).unwrap();
    assert!(plan.shadowed.iter().all(|&seq| seq < 10), "{plan:?}");
}

#[test]
fn compaction_cites_its_extra_sources_first() {
    let s = load("plain-chat");
    let plan = plan_compaction(&s, 2).unwrap();
    let intent = plan.intent(&[99]);
    assert_eq!(intent.sources.as_ref().unwrap()[0], 99);
    assert_eq!(intent.sources.unwrap()[1..], plan.shadowed[..]);
}

#[test]
fn nothing_to_compact_is_none() {
    let s = load("plain-chat");
    assert_eq!(plan_compaction(&s, s.surface().len()), None);
    assert_eq!(plan_compaction(&s, s.surface().len() - 1), None, "one entry is not worth a summary");
}

#[test]
fn pruning_picks_old_large_results_and_the_stub_replaces_them() {
    let mut s = load("multi-step-tools");
    assert!(plan_pruning(&s, 0, 100).is_empty(), "no result is that large");
    let candidates = plan_pruning(&s, 1, 1);
    let ids: Vec<_> = candidates.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b"], "the newest result (call_c) is kept");
    for c in candidates {
        let original = s.event(c.seq).unwrap().clone();
        let stub = pruned_result(&original, format!("pruned-{}", c.seq)).unwrap();
        assert_eq!(stub.call_id(), c.call_id);
        s.append_surface(0, stub, SurfaceIntent::replace(c.seq, c.seq, vec![c.seq])).unwrap();
    }
    assert_exchanges_paired(&s);
    // Pruned results are not pruned again.
    assert!(plan_pruning(&s, 0, 1).iter().all(|c| c.call_id == "call_c"));
}

#[test]
fn already_pruned_fixture_has_nothing_left_to_prune() {
    let s = load("tool-result-pruning");
    assert!(plan_pruning(&s, 0, 10).is_empty());
}
