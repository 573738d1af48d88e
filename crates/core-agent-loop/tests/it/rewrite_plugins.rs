//! The shipped rewrite plugins, `Compaction` and `ToolResultPruning`, in
//! real loops against every store: repeated compaction from the previous
//! summary node, pruning by single-node replace, a crash between
//! `compaction/start` and the summary, and a failing summarizer.

use std::sync::Arc;

use palimpsest_core_agent_loop::plugins::{
    Compaction, CompactionConfig, FixedSummarizer, ProviderSummarizer, Summarizer, ToolResultPruning,
};
use palimpsest_core_agent_loop::{
    BoxFuture, PluginError, Provider, ScriptedProvider, ScriptedResponse, TurnInput,
};
use palimpsest_core_session::payload::{Message, TurnEndReason};
use palimpsest_core_session::{EventType, Session, SurfaceOp};
use palimpsest_persistence::{Durability, DurableSession};

use crate::common::*;

fn plugin_events<'a>(
    s: &'a Session,
    ty: &'a str,
) -> impl Iterator<Item = &'a palimpsest_core_session::Event> {
    s.events().iter().filter(move |e| matches!(e.event_type(), EventType::Plugin(p) if &**p == ty))
}

fn summaries(s: &Session) -> Vec<u64> {
    s.events().iter().filter(|e| e.raw_is_compaction_summary()).map(|e| e.seq()).collect()
}

trait SummaryProbe {
    fn raw_is_compaction_summary(&self) -> bool;
}

impl SummaryProbe for palimpsest_core_session::Event {
    fn raw_is_compaction_summary(&self) -> bool {
        *self.event_type() == EventType::UserMessage
            && self.data().contains(r#""source":{"kind":"plugin","plugin":"compaction"}"#)
    }
}

/// Five turns, one tool call each, with a budget so small that every
/// request past the first few compacts.
fn busy_script() -> Vec<ScriptedResponse> {
    let mut script = Vec::new();
    for i in 0..5 {
        let args = format!("{{\"path\": \"notes-{i}.txt\"}}");
        script.push(ScriptedResponse::new().text(0, "Reading.").tool_call(
            1,
            &format!("call-{i}"),
            "read",
            &[&args],
        ));
        script.push(ScriptedResponse::reply(&format!("notes-{i}.txt is read; all is well with file {i}.")));
    }
    script
}

#[tokio::test]
async fn compaction_repeats_from_the_previous_summary_and_pruning_stubs_old_results() {
    check("rewrite_plugins", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new(busy_script()));
        let mut agent = builder(&provider)
            .plugin(ToolResultPruning { keep_recent: 1, min_chars: 10 })
            .plugin(
                Compaction::new(CompactionConfig { budget_tokens: 40, keep_recent: 3 })
                    .with_summarizer(FixedSummarizer),
            )
            .create(backend.store(), SID)
            .expect("create");
        for i in 0..5 {
            let outcome =
                agent.run_turn(TurnInput::text(format!("Read notes-{i}.txt please."))).await.expect("turn");
            assert_eq!(outcome.reason, TurnEndReason::Completed);
        }
        let s = reload(&backend.store());
        let sums = summaries(&s);
        assert!(sums.len() >= 2, "expected repeated compaction, got {sums:?}");
        // Every later compaction starts at the previous summary node.
        for pair in sums.windows(2) {
            let op = s.event(pair[1]).unwrap().surface_op().unwrap();
            assert!(matches!(op, SurfaceOp::Replace { start, .. } if start == pair[0]), "{op:?}");
        }
        // Each summary cites its compaction/start and is bracketed by an end.
        let starts: Vec<u64> = plugin_events(&s, "compaction/start").map(|e| e.seq()).collect();
        let ends = plugin_events(&s, "compaction/end").count();
        assert_eq!((starts.len(), ends), (sums.len(), sums.len()));
        for (sum, start) in sums.iter().zip(&starts) {
            assert!(s.event(*sum).unwrap().source_event_seqs().unwrap().contains(start));
        }
        // Some tool result was pruned by a single-node replace of the same call.
        let pruned = s
            .events()
            .iter()
            .filter(|e| *e.event_type() == EventType::ToolResult)
            .filter(|e| matches!(e.surface_op(), Some(SurfaceOp::Replace { start, end }) if start == end))
            .count();
        assert!(pruned >= 1, "no prune happened");
        // The request the model would see next is provider-valid.
        assert!(agent.request_preview().unpaired_tool_calls().is_empty());
    })
    .await;
}

#[tokio::test]
async fn under_budget_nothing_is_rewritten() {
    let provider = Arc::new(ScriptedProvider::new(busy_script()));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(ToolResultPruning { keep_recent: 1, min_chars: 10_000 })
        .plugin(
            Compaction::new(CompactionConfig { budget_tokens: 1_000_000, keep_recent: 3 })
                .with_summarizer(FixedSummarizer),
        )
        .create(backend.store(), SID)
        .expect("create");
    for i in 0..3 {
        agent.run_turn(TurnInput::text(format!("turn {i}"))).await.expect("turn");
    }
    let s = reload(&backend.store());
    assert!(s.events().iter().all(|e| !matches!(e.surface_op(), Some(SurfaceOp::Replace { .. }))));
    assert_eq!(plugin_events(&s, "compaction/start").count(), 0);
}

#[tokio::test]
async fn an_unfinished_compaction_is_recognised_and_not_repeated() {
    let backend = Backend::new(Kind::Sqlite);
    let provider = Arc::new(ScriptedProvider::new(busy_script()));
    // Three turns without compaction, then a crash right after a
    // compaction/start: the log as a killed process leaves it.
    {
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        for i in 0..3 {
            agent.run_turn(TurnInput::text(format!("turn {i}"))).await.expect("turn");
        }
        let (mut durable, _) = DurableSession::open(backend.store(), SID, Durability::EveryAppend).unwrap();
        durable
            .append_log(
                T0 + 999,
                palimpsest_core_session::payload::PluginEvent {
                    event_type: "compaction/start".into(),
                    data: serde_json::json!({"reason": "budget"}),
                },
            )
            .unwrap();
    }
    let dangling = reload(&backend.store()).events().len() as u64 - 1;
    let (mut agent, _) = resumed_builder(&provider, T0 + 10_000, "r")
        .plugin(
            Compaction::new(CompactionConfig { budget_tokens: 40, keep_recent: 3 })
                .with_summarizer(FixedSummarizer),
        )
        .open(backend.store(), SID)
        .expect("open");
    agent.run_turn(TurnInput::text("turn 3")).await.expect("turn after the crash");
    let s = reload(&backend.store());
    let starts: Vec<_> = plugin_events(&s, "compaction/start").collect();
    assert_eq!(starts.len(), 2, "the dangling start and exactly one new one");
    let data: serde_json::Value = serde_json::from_str(starts[1].data()).unwrap();
    assert_eq!(data["supersedes"], dangling);
    assert_eq!(summaries(&s).len(), 1, "one summary, not two");
}

struct Failing;

impl Summarizer for Failing {
    fn summarize<'a>(
        &'a self,
        _: &'a dyn Provider,
        _: Vec<Message>,
    ) -> BoxFuture<'a, Result<String, PluginError>> {
        Box::pin(async { Err(PluginError::failed("SUMMARY_FAILED", "the summarizer is down")) })
    }
}

#[tokio::test]
async fn a_failing_summarizer_abandons_the_compaction_not_the_turn() {
    let backend = Backend::new(Kind::Jsonl);
    let provider = Arc::new(ScriptedProvider::new(busy_script()));
    let mut agent = builder(&provider)
        .plugin(
            Compaction::new(CompactionConfig { budget_tokens: 10, keep_recent: 1 }).with_summarizer(Failing),
        )
        .create(backend.store(), SID)
        .expect("create");
    for i in 0..2 {
        let outcome = agent.run_turn(TurnInput::text(format!("turn {i}"))).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
    }
    let s = reload(&backend.store());
    assert!(summaries(&s).is_empty());
    let end = plugin_events(&s, "compaction/end").next().expect("an end");
    assert!(end.data().contains("SUMMARY_FAILED"), "{}", end.data());
}

#[tokio::test]
async fn the_default_summarizer_asks_the_sessions_own_model() {
    let backend = Backend::new(Kind::Memory);
    // Turn 2 is over budget: its summarization request comes before the
    // turn's own request.
    let script = vec![
        ScriptedResponse::reply("First answer, rather long so that it fills the budget up."),
        ScriptedResponse::reply("SUMMARY: one question was answered."),
        ScriptedResponse::reply("Second answer."),
    ];
    let provider = Arc::new(ScriptedProvider::new(script));
    let mut agent = builder(&provider)
        .plugin(
            Compaction::new(CompactionConfig { budget_tokens: 20, keep_recent: 1 })
                .with_summarizer(ProviderSummarizer::default()),
        )
        .create(backend.store(), SID)
        .expect("create");
    agent.run_turn(TurnInput::text("First question, long enough to count?")).await.expect("turn 1");
    let outcome = agent.run_turn(TurnInput::text("Second question?")).await.expect("turn 2");
    assert_eq!(
        outcome.message.as_ref().map(|m| m.content.clone()),
        Some(vec![palimpsest_core_session::payload::Block::text("Second answer.")])
    );
    let s = reload(&backend.store());
    let sums = summaries(&s);
    assert!(!sums.is_empty(), "no compaction happened");
    assert!(s.event(sums[0]).unwrap().data().contains("SUMMARY: one question was answered."));
    let asked = provider
        .requests()
        .into_iter()
        .find(|r| r.system.as_deref().is_some_and(|p| p.starts_with("Summarize")));
    assert!(asked.is_some(), "the summarizer never asked the provider");
}
