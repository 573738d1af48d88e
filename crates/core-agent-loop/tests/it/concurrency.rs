//! Tool calls run concurrently where the tools allow it, and alone where
//! they do not; results are appended in request order either way.

use std::sync::{Arc, Mutex};

use palimpsest_core_agent_loop::{
    FnTool, ScriptedProvider, ScriptedResponse, ToolContext, ToolError, TurnInput,
};
use palimpsest_core_session::payload::{Block, ToolResult, TurnEndReason};
use palimpsest_core_session::EventType;
use tokio::sync::Barrier;

use crate::common::*;

/// The `n` of arguments `{"n": 1}`, as text.
fn n_of(args: &str) -> String {
    serde_json::from_str::<serde_json::Value>(args).map(|v| v["n"].to_string()).unwrap_or_default()
}

#[tokio::test]
async fn concurrent_tools_overlap_and_exclusive_tools_run_alone() {
    // `meet` calls only finish when two of them wait on the barrier at once:
    // the step would hang if they ran one after another.
    let barrier = Arc::new(Barrier::new(2));
    let log: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let meet = {
        let (barrier, log) = (barrier.clone(), log.clone());
        FnTool::new(
            "meet",
            "Waits for a partner.",
            serde_json::json!({}),
            move |args: String, _c: ToolContext| {
                let (barrier, log) = (barrier.clone(), log.clone());
                let args = n_of(&args);
                async move {
                    lock(&log).push(format!("start {args}"));
                    barrier.wait().await;
                    tokio::task::yield_now().await;
                    lock(&log).push(format!("end {args}"));
                    Ok::<_, ToolError>(vec![Block::text(format!("met {args}"))])
                }
            },
        )
        .with_concurrent(true)
    };
    let solo = {
        let log = log.clone();
        FnTool::new("solo", "Runs alone.", serde_json::json!({}), move |args: String, _c: ToolContext| {
            let log = log.clone();
            let args = n_of(&args);
            async move {
                lock(&log).push(format!("start {args}"));
                tokio::task::yield_now().await;
                lock(&log).push(format!("end {args}"));
                Ok::<_, ToolError>(vec![Block::text(format!("solo {args}"))])
            }
        })
    };
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new()
            .tool_call(0, "c1", "meet", &[r#"{"n":1}"#])
            .tool_call(1, "c2", "meet", &[r#"{"n":2}"#])
            .tool_call(2, "c3", "solo", &[r#"{"n":3}"#])
            .tool_call(3, "c4", "meet", &[r#"{"n":4}"#])
            .tool_call(4, "c5", "meet", &[r#"{"n":5}"#]),
        ScriptedResponse::reply("All met."),
    ]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).tool(meet).tool(solo).create(backend.store(), SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("meet")).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let order = lock(&log).clone();
    assert_eq!(order[..2], ["start 1", "start 2"]);
    // The exclusive call starts after both earlier calls ended and ends
    // before the later ones start.
    let pos = |s: &str| order.iter().position(|x| x == s).unwrap_or(usize::MAX);
    assert!(pos("end 1") < pos("start 3") && pos("end 2") < pos("start 3"));
    assert_eq!(pos("end 3") + 1, pos("start 4"));
    let results: Vec<String> = agent
        .session()
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .filter_map(|e| e.data_as::<ToolResult>().ok())
        .map(|r| r.call_id().to_owned())
        .collect();
    assert_eq!(results, ["c1", "c2", "c3", "c4", "c5"]);
}

#[tokio::test]
async fn results_keep_request_order_when_later_calls_finish_first() {
    // `slow` yields a few times before answering; `fast` answers at once.
    let slow = FnTool::new("slow", "Slow.", serde_json::json!({}), |_a: String, _c: ToolContext| async {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        Ok::<_, ToolError>(vec![Block::text("slow")])
    })
    .with_concurrent(true);
    let fast = FnTool::new("fast", "Fast.", serde_json::json!({}), |_a: String, _c: ToolContext| async {
        Ok::<_, ToolError>(vec![Block::text("fast")])
    })
    .with_concurrent(true);
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "a", "slow", &["{}"]).tool_call(1, "b", "fast", &["{}"]),
        ScriptedResponse::reply("ok"),
    ]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).tool(slow).tool(fast).create(backend.store(), SID).expect("create");
    agent.run_turn(TurnInput::text("go")).await.expect("turn");
    let results: Vec<(u64, String, Option<Vec<u64>>)> = agent
        .session()
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .filter_map(|e| {
            let r = e.data_as::<ToolResult>().ok()?;
            Some((e.seq(), r.call_id().to_owned(), e.source_event_seqs().map(<[u64]>::to_vec)))
        })
        .collect();
    // Chunks at 3 and 4, the message at 5, the calls at 6 and 7: each
    // result cites its own tool/call.
    assert_eq!(results, [(8, "a".to_owned(), Some(vec![6])), (9, "b".to_owned(), Some(vec![7]))]);
}
