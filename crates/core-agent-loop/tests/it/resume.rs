//! Crash and resume: a loop dropped mid-turn leaves a valid log; opening it
//! appends the repair closers first, and the next request is provider-valid.

use std::sync::Arc;

use palimpsest_core_agent_loop::{
    FnTool, ScriptedProvider, ScriptedResponse, ToolContext, ToolError, TurnInput,
};
use palimpsest_core_session::payload::{Block, ToolResult, TurnEndReason};
use palimpsest_core_session::{Event, EventType, Session};
use tokio::sync::Notify;

use crate::common::*;

/// Notifies when an event of type `event_type` is committed in turn `turn`
/// (counting `turn/start`s).
fn notify_at(
    notify: Arc<Notify>,
    turn: u64,
    event_type: EventType,
) -> Watch<impl FnMut(&Event, &Session) + Send + Sync> {
    let mut current = 0;
    Watch(move |e: &Event, _s: &Session| {
        if *e.event_type() == EventType::TurnStart {
            current += 1;
        }
        if current == turn && *e.event_type() == event_type {
            notify.notify_one();
        }
    })
}

fn hang_tool() -> impl palimpsest_core_agent_loop::Tool {
    FnTool::new("hang", "Never returns.", serde_json::json!({}), |_a: String, _c: ToolContext| {
        std::future::pending::<Result<Vec<Block>, ToolError>>()
    })
    .with_concurrent(true)
}

#[tokio::test]
async fn crash_mid_stream_then_resume() {
    check("resume_mid_stream", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::reply("First answer."),
            ScriptedResponse::new().text(0, "Half an ans").hang(),
            ScriptedResponse::reply("Picking up again."),
        ]));
        let reached = Arc::new(Notify::new());
        {
            let store = backend.store();
            let mut agent = builder(&provider)
                .plugin(notify_at(reached.clone(), 2, EventType::AssistantChunk))
                .create(store, SID)
                .expect("create");
            agent.run_turn(TurnInput::text("one")).await.expect("turn 1");
            tokio::select! {
                r = agent.run_turn(TurnInput::text("two")) => panic!("the hanging turn finished: {r:?}"),
                () = reached.notified() => {}
            }
            // The process "dies": the loop and its store handle are dropped
            // mid-turn, nothing is closed.
        }
        let store = backend.store();
        let (mut agent, report) =
            resumed_builder(&provider, T0 + 1_000, "r").open(store, SID).expect("open the crashed session");
        let repaired = report.repaired.expect("closers were appended");
        let closers: Vec<String> = agent.session().events()[repaired.start as usize..]
            .iter()
            .map(|e| e.event_type().to_string())
            .collect();
        // No message was written for the half answer (its chunk stays in the
        // log): only the step and turn closers.
        assert_eq!(closers, ["step/end", "turn/end"]);
        let outcome = agent.run_turn(TurnInput::text("three")).await.expect("turn 3");
        assert_eq!((outcome.turn, outcome.reason, outcome.repaired), (3, TurnEndReason::Completed, None));
        assert!(provider.last_request().expect("request").unpaired_tool_calls().is_empty());
    })
    .await;
}

#[tokio::test]
async fn crash_while_a_tool_runs_then_resume() {
    check("resume_mid_tools", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a\"}"]).tool_call(
                1,
                "call-2",
                "hang",
                &["{}"],
            ),
            ScriptedResponse::reply("The hang tool may or may not have run."),
        ]));
        let reached = Arc::new(Notify::new());
        {
            let mut agent = builder(&provider)
                .tool(hang_tool())
                .plugin(notify_at(reached.clone(), 1, EventType::ToolResult))
                .create(backend.store(), SID)
                .expect("create");
            tokio::select! {
                r = agent.run_turn(TurnInput::text("go")) => panic!("the hanging turn finished: {r:?}"),
                () = reached.notified() => {}
            }
        }
        let (mut agent, report) = resumed_builder(&provider, T0 + 1_000, "r")
            .tool(hang_tool())
            .open(backend.store(), SID)
            .expect("open");
        let repaired = report.repaired.expect("closers were appended");
        let first = &agent.session().events()[repaired.start as usize];
        let result = first.data_as::<ToolResult>().expect("a tool/result closer");
        // `read` finished before the crash and kept its result; `hang` was
        // recorded as called, so its outcome is unknown.
        assert_eq!(result.call_id(), "call-2");
        assert_eq!(result.error.map(|e| e.code).as_deref(), Some("TOOL_OUTCOME_UNKNOWN"));
        assert!(agent.request_preview().unpaired_tool_calls().is_empty());
        let outcome = agent.run_turn(TurnInput::text("what happened?")).await.expect("turn 2");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
        assert!(provider.last_request().expect("request").unpaired_tool_calls().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_dropped_turn_is_repaired_by_the_next_one() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().text(0, "Never fin").hang(),
        ScriptedResponse::reply("Done."),
    ]));
    let reached = Arc::new(Notify::new());
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider)
        .plugin(notify_at(reached.clone(), 1, EventType::AssistantChunk))
        .create(backend.store(), SID)
        .expect("create");
    tokio::select! {
        r = agent.run_turn(TurnInput::text("one")) => panic!("the hanging turn finished: {r:?}"),
        () = reached.notified() => {}
    }
    // The same loop goes on: its next turn starts with the closers.
    let outcome = agent.run_turn(TurnInput::text("two")).await.expect("turn 2");
    assert_eq!(outcome.turn, 2);
    assert_eq!(outcome.repaired, Some(4..6));
    assert_eq!(types(agent.session())[4..7], ["step/end", "turn/end", "turn/start"]);
    let end =
        agent.session().events()[5].data_as::<palimpsest_core_session::payload::TurnEnd>().expect("turn/end");
    assert_eq!(end.reason, TurnEndReason::Interrupted);
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert!(reload(&backend.store()).events().len() == agent.session().events().len());
}
