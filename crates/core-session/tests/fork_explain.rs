//! Forks are exact, validated, resumable prefixes; explanations trace
//! provenance and shadowing. Checked on the contract's worked example.

use palimpsest_core_session::explain::{explain, Provenance};
use palimpsest_core_session::fork::fork;
use palimpsest_core_session::jsonl::JsonlLog;
use palimpsest_core_session::repair::needs_repair;
use palimpsest_core_session::{Session, SurfaceOp};

fn example() -> Session {
    let text = include_str!("../test_data/ok/compaction-and-prune.jsonl");
    JsonlLog::parse(text.as_bytes()).unwrap().into_session().unwrap()
}

#[test]
fn a_fork_at_every_seq_is_a_valid_closed_prefix() {
    let parent = example();
    let before = parent.events().to_vec();
    for at in 0..parent.events().len() as u64 {
        let child = fork(&parent, at, format!("child-{at}"), 7).unwrap();
        let n = at as usize + 1;
        assert_eq!(&child.events()[..n], &parent.events()[..n], "the seed is an exact prefix");
        assert!(!needs_repair(child.events()), "fork at {at} left a turn open");
        assert_eq!(child.header().seed_length, Some(at + 1));
        assert_eq!(child.header().parent_session.as_deref(), Some("example-1"));
        assert_eq!(child.header().created_at, 7);
    }
    assert_eq!(parent.events(), before.as_slice(), "the parent is never touched");
}

#[test]
fn a_fork_inside_a_tool_step_answers_the_call() {
    let parent = example();
    // Seq 7 is the tool/call of call_1; its result (8) is not in the seed.
    let child = fork(&parent, 7, "c", 0).unwrap();
    let types: Vec<_> = child.events()[8..].iter().map(|e| e.event_type().as_str().to_owned()).collect();
    assert_eq!(types, ["tool/result", "step/end", "turn/end"]);
    assert_eq!(child.events()[8].source_event_seqs(), Some(&[7][..]));
    // A balanced point needs no closers.
    assert_eq!(fork(&parent, 14, "c", 0).unwrap().events().len(), 15);
}

#[test]
fn forking_a_fork_keeps_the_lineage() {
    let parent = example();
    let child = fork(&parent, 20, "child", 0).unwrap();
    let grandchild = fork(&child, 10, "grandchild", 0).unwrap();
    assert_eq!(grandchild.header().parent_session.as_deref(), Some("child"));
    assert_eq!(&grandchild.events()[..11], &parent.events()[..11]);
}

#[test]
fn a_fork_past_the_end_is_refused() {
    let err = fork(&example(), 27, "c", 0).unwrap_err();
    assert_eq!(err.code(), "fork-point-missing");
}

fn seqs(p: &[Provenance]) -> Vec<u64> {
    p.iter().map(|n| n.seq).collect()
}

#[test]
fn explain_traces_provenance_recursively() {
    let s = example();
    let e = explain(&s, 20).unwrap();
    assert_eq!(e.surface_position, Some(0));
    assert_eq!(e.surface_op, Some(SurfaceOp::Replace { start: 1, end: 12 }));
    assert_eq!(seqs(&e.cites), [19, 1, 6, 18, 12]);
    assert_eq!(seqs(&e.cites[2].cites), [3, 4, 5], "the assistant message cites its chunks");
    assert_eq!(seqs(&e.cites[3].cites), [8], "the pruned result cites the original");
    assert_eq!(seqs(&e.cites[3].cites[0].cites), [7], "which cites its tool/call");
    assert_eq!(e.shadowed, [1, 6, 12, 18]);
    assert_eq!((e.turn, e.step), (Some(2), None));
}

#[test]
fn explain_follows_shadowing_to_what_stands_now() {
    let s = example();
    let e = explain(&s, 8).unwrap();
    assert_eq!((e.turn, e.step), (Some(1), Some(1)));
    assert_eq!(e.surface_position, None);
    assert_eq!(e.shadowed_by, Some(18), "pruned first");
    assert_eq!(e.stands_in_its_place, Some(20), "then compacted");
    assert_eq!(e.cited_by, [18]);
    let chunk = explain(&s, 4).unwrap();
    assert_eq!((chunk.cited_by, chunk.shadowed_by, chunk.surface_op), (vec![6], None, None));
    assert!(explain(&s, 99).is_none());
}

/// A chain of rewrites, each citing the one before: `count` events.
fn chain(count: u64, cites: impl Fn(u64) -> Vec<u64>) -> Vec<palimpsest_core_session::Event> {
    (0..count)
        .map(|i| {
            let message = format!(
                r#"{{"message":{{"id":"m{i}","role":"user","content":[{{"type":"text","text":"t"}}],"source":{{"kind":"user"}}}}}}"#
            );
            let sources = cites(i);
            let json = if i == 0 {
                format!(r#"{{"seq":0,"time":1,"type":"context/message","data":{message},"surfaceOp":"append"}}"#)
            } else {
                let list: Vec<String> = sources.iter().map(u64::to_string).collect();
                format!(
                    r#"{{"seq":{i},"time":1,"type":"context/message","data":{message},"sourceEventSeqs":[{}],"surfaceOp":{{"op":"replace","start":{},"end":{}}}}}"#,
                    list.join(","),
                    i - 1,
                    i - 1
                )
            };
            palimpsest_core_session::Event::from_json(&json).unwrap()
        })
        .collect()
}

/// Past its depth or node limit the tree stops, and says where: a node
/// whose cites are left out is `cut`, never a leaf that cites nothing.
#[test]
fn a_provenance_tree_past_its_limits_marks_where_it_was_cut() {
    use palimpsest_core_session::explain::{provenance, MAX_PROVENANCE_DEPTH, MAX_PROVENANCE_NODES};
    let events = chain(100, |i| i.checked_sub(1).into_iter().collect());
    let lookup = |s: u64| events.get(s as usize);
    let mut level = provenance(&events[99], &lookup);
    let mut depth = 1;
    while let [node] = level.as_slice() {
        if node.cites.is_empty() {
            assert!(node.cut, "the deepest node shown cites seq {} but shows nothing", node.seq - 1);
            break;
        }
        assert!(!node.cut);
        level = node.cites.clone();
        depth += 1;
    }
    assert_eq!(depth, MAX_PROVENANCE_DEPTH);

    // Each event citing every earlier one: one node per citation, up to the budget.
    let events = chain(200, |i| (0..i).collect());
    let lookup = |s: u64| events.get(s as usize);
    let tree = provenance(&events[199], &lookup);
    fn count(nodes: &[Provenance]) -> usize {
        nodes.len() + nodes.iter().map(|n| count(&n.cites)).sum::<usize>()
    }
    fn any_cut(nodes: &[Provenance]) -> bool {
        nodes.iter().any(|n| n.cut || any_cut(&n.cites))
    }
    assert_eq!(count(&tree), MAX_PROVENANCE_NODES, "199 * 200 / 2 citations, cut at the budget");
    assert!(any_cut(&tree), "where the budget ran out is marked");
    let small = chain(40, |i| (0..i).collect());
    let lookup = |s: u64| small.get(s as usize);
    let whole = provenance(&small[39], &lookup);
    assert_eq!(count(&whole), 39 * 40 / 2);
    assert!(!any_cut(&whole), "within the limits nothing is cut");
}
