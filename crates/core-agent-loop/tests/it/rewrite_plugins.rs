//! The shipped rewrite plugins, `Compaction` and `ToolResultPruning`, in
//! real loops against every store: repeated compaction from the previous
//! summary node, pruning by single-node replace, a crash between
//! `compaction/start` and the summary, and a failing summarizer.

use std::sync::Arc;

use palimpsest_core_agent_loop::plugins::{
    Compaction, CompactionConfig, FixedSummarizer, ProviderSummarizer, Summarizer, ToolResultPruning,
};
use palimpsest_core_agent_loop::{
    BoxFuture, CancellationToken, PluginError, Provider, ScriptedProvider, ScriptedResponse, TurnInput,
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
                    .with_summarizer(FixedSummarizer)
                    .with_size_limits(false),
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
                .with_summarizer(FixedSummarizer)
                .with_size_limits(false),
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

/// The `compaction/end` events' error codes and retry turns, in order.
fn compaction_errors(s: &Session) -> Vec<(String, Option<u64>)> {
    plugin_events(s, "compaction/end")
        .filter_map(|e| {
            let data: serde_json::Value = serde_json::from_str(e.data()).ok()?;
            let code = data.get("error")?.get("code")?.as_str()?.to_owned();
            Some((code, data.get("retryTurn").and_then(serde_json::Value::as_u64)))
        })
        .collect()
}

/// A provider that answers every summary request with `summary` and
/// everything else with a long reply, so each turn is over the budget.
fn summarizing_provider(summary: ScriptedResponse) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_fn(move |request| {
        if request.system.as_deref().is_some_and(|p| p.starts_with("Summarize")) {
            summary.clone()
        } else {
            ScriptedResponse::reply(
                "A long answer that keeps the history well over the tiny budget of this test.",
            )
        }
    }))
}

/// Issue 21, item 2: a summary cut off by the output-token limit is not a
/// summary, and a failing compaction backs off instead of retrying (over a
/// larger range) every turn.
#[tokio::test]
async fn a_cut_off_summary_is_refused_and_failures_back_off() {
    let cut = ScriptedResponse::new()
        .text(0, "The user asked")
        .finish(palimpsest_core_agent_loop::FinishReason::MaxTokens);
    let provider = summarizing_provider(cut);
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(Compaction::new(CompactionConfig { budget_tokens: 10, keep_recent: 1 }))
        .create(backend.store(), SID)
        .expect("create");
    for i in 0..8 {
        let outcome =
            agent.run_turn(TurnInput::text(format!("Question {i}, long enough?"))).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
    }
    let s = reload(&backend.store());
    assert!(summaries(&s).is_empty(), "a cut-off summary replaced history");
    // Attempts in turns 2, 3, 5 (back-off 1, 2, 4 turns): not one per turn.
    let errors = compaction_errors(&s);
    assert_eq!(
        errors,
        [
            ("SUMMARY_TRUNCATED".to_owned(), Some(3)),
            ("SUMMARY_TRUNCATED".to_owned(), Some(5)),
            ("SUMMARY_TRUNCATED".to_owned(), Some(9))
        ]
    );
    // The stored message does not repeat its code.
    let end = plugin_events(&s, "compaction/end").next().expect("an end");
    assert!(!end.data().contains("SUMMARY_TRUNCATED: "), "{}", end.data());
    // The turns sent over budget while backing off say so, once per turn.
    let over: Vec<String> = plugin_events(&s, "compaction/over-budget")
        .map(|e| serde_json::from_str::<serde_json::Value>(e.data()).expect("json")["reason"].to_string())
        .collect();
    // Turn 1 has too little history to compact; turns 4, 6, 7, 8 back off.
    assert_eq!(over.len(), 5, "{over:?}");
    assert_eq!(over[0], "\"nothing-to-compact\"");
    assert!(over[1..].iter().all(|r| r == "\"backing-off\""), "{over:?}");
}

/// Issue 21, item 2: a summary larger than what it replaces is refused.
#[tokio::test]
async fn a_summary_larger_than_the_history_is_refused() {
    let huge = "word ".repeat(2_000);
    let provider = summarizing_provider(ScriptedResponse::reply(&huge));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(Compaction::new(CompactionConfig { budget_tokens: 20, keep_recent: 1 }))
        .create(backend.store(), SID)
        .expect("create");
    for i in 0..2 {
        agent.run_turn(TurnInput::text(format!("Question {i}, long enough?"))).await.expect("turn");
    }
    let s = reload(&backend.store());
    assert!(summaries(&s).is_empty(), "a summary larger than the history replaced it");
    assert_eq!(compaction_errors(&s), [("SUMMARY_TOO_LARGE".to_owned(), Some(3))]);
}

/// Issue 21, item 2: over budget with nothing to compact, the request goes
/// out with one `compaction/over-budget` event per turn naming the estimate
/// and the budget; other plugins see `compaction/start` before the summary
/// request is sent.
#[tokio::test]
async fn over_budget_is_reported_once_per_turn_and_compaction_start_is_seen_at_once() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "c1", "read", &[r#"{"path": "a"}"#]),
        ScriptedResponse::reply("Done reading, and this answer is long enough."),
    ]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(Compaction::new(CompactionConfig { budget_tokens: 1, keep_recent: 100 }))
        .create(backend.store(), SID)
        .expect("create");
    agent.run_turn(TurnInput::text("Read a, and tell me about it at length.")).await.expect("turn");
    let s = reload(&backend.store());
    let over: Vec<serde_json::Value> = plugin_events(&s, "compaction/over-budget")
        .map(|e| serde_json::from_str(e.data()).expect("json"))
        .collect();
    // Two steps in the turn, one report.
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!(over[0]["reason"], "nothing-to-compact");
    assert_eq!(over[0]["budgetTokens"], 1);
    assert!(over[0]["estimatedTokens"].as_u64().is_some_and(|e| e > 1));

    // A watcher added after the compaction plugin sees its start while the
    // summarizer still waits on the provider.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let provider = {
        let seen = seen.clone();
        Arc::new(ScriptedProvider::from_fn(move |request| {
            if request.system.as_deref().is_some_and(|p| p.starts_with("Summarize")) {
                lock(&seen).push("summary request".into());
                ScriptedResponse::reply("Short.")
            } else {
                ScriptedResponse::reply("A long answer that keeps the history well over the tiny budget.")
            }
        }))
    };
    let watcher = {
        let seen = seen.clone();
        Watch(move |e: &palimpsest_core_session::Event, _s: &Session| {
            if matches!(e.event_type(), EventType::Plugin(p) if &**p == "compaction/start") {
                lock(&seen).push("compaction/start".into());
            }
        })
    };
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(Compaction::new(CompactionConfig { budget_tokens: 10, keep_recent: 1 }))
        .plugin(watcher)
        .create(backend.store(), SID)
        .expect("create");
    for i in 0..2 {
        agent.run_turn(TurnInput::text(format!("Question {i}, long enough?"))).await.expect("turn");
    }
    assert_eq!(lock(&seen)[..2], ["compaction/start", "summary request"]);
}

#[tokio::test]
async fn a_requested_compaction_runs_between_turns_under_budget_and_only_once() {
    let provider = Arc::new(ScriptedProvider::new(busy_script()));
    let backend = Backend::new(Kind::Memory);
    let compaction = Compaction::new(CompactionConfig { budget_tokens: 1_000_000, keep_recent: 3 })
        .with_summarizer(FixedSummarizer)
        .with_size_limits(false);
    let trigger = compaction.trigger();
    let mut agent = builder(&provider).plugin(compaction).create(backend.store(), SID).expect("create");
    for i in 0..3 {
        agent.run_turn(TurnInput::text(format!("turn {i}"))).await.expect("turn");
    }
    // Under budget, not asked: the hooks run and write nothing.
    let quiet = agent.run_request_hooks(&CancellationToken::new()).await.expect("hooks");
    assert!(quiet.seqs.is_empty() && quiet.failure.is_none() && !quiet.cancelled, "{quiet:?}");

    trigger.request();
    assert!(trigger.withdraw() && !trigger.withdraw(), "withdrawn once");
    assert!(agent.run_request_hooks(&CancellationToken::new()).await.expect("hooks").seqs.is_empty());
    trigger.request();
    assert!(trigger.is_requested());
    let first = agent.session().events().len() as u64;
    let run = agent.run_request_hooks(&CancellationToken::new()).await.expect("hooks");
    assert_eq!((run.failure.as_deref(), run.cancelled), (None, false));
    assert_eq!(run.seqs.start, first);
    assert!(!trigger.is_requested(), "the request is used up");
    let s = reload(&backend.store());
    let starts: Vec<_> = plugin_events(&s, "compaction/start").collect();
    assert_eq!(starts.len(), 1);
    assert!(starts[0].data().contains(r#""reason":"requested""#), "{}", starts[0].data());
    assert_eq!(summaries(&s).len(), 1);
    assert_eq!(plugin_events(&s, "compaction/end").count(), 1);
    assert_eq!(s.events().len() as u64, run.seqs.end, "start, summary, end: {:?}", run.seqs);
    assert_eq!(run.seqs.end - run.seqs.start, 3);

    // Asked for nothing more: the next turn does not compact again.
    agent.run_turn(TurnInput::text("after")).await.expect("turn");
    assert_eq!(plugin_events(&reload(&backend.store()), "compaction/start").count(), 1);
}
