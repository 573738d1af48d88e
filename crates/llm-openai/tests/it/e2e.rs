//! The real `AgentLoop` through the provider: one turn in which the model
//! calls two tools (streamed as interleaved deltas) and then answers. The
//! stored log must load, pass every invariant, and say exactly what was
//! streamed; the second request must carry the calls and their results.

use std::sync::Arc;

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, DevMode, FnTool, ManualClock, SequentialIds, ToolContext, ToolError, TurnInput,
};
use palimpsest_core_session::payload::{Block, TurnEndReason};
use palimpsest_core_session::Session;
use palimpsest_persistence::{MemoryStore, SessionStore};
use serde_json::json;

use crate::common::*;
use crate::mock::{MockServer, Reply};

#[tokio::test]
async fn a_turn_with_tool_calls_through_the_provider_stores_a_valid_log(
) -> Result<(), Box<dyn std::error::Error>> {
    let server = MockServer::start(vec![Reply::sse(TOOL_CALLS, 13), Reply::sse(TEXT, 29)]).await?;
    let provider = Arc::new(provider(config(&server.base_url()).with_provider_name("vllm"))?);
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());

    let read_file = FnTool::new(
        "read_file",
        "Reads a file.",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args: String, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(vec![Block::text(format!("fn main() {{}} // {args}"))])
        },
    );
    let list_dir = FnTool::new(
        "list_dir",
        "Lists a directory.",
        json!({"type": "object", "properties": {"dir": {"type": "string"}}}),
        |_args: String, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(vec![Block::text("Cargo.toml\nsrc/")])
        },
    );
    let mut agent = AgentLoop::builder(provider)
        .tool(read_file)
        .tool(list_dir)
        .clock(Arc::new(ManualClock::new(1_700_000_000_000).with_tick(1)))
        .ids(Arc::new(SequentialIds::new("m")))
        .config(
            AgentConfig::default()
                .with_system_prompt("You are a coding agent.")
                .with_max_output_tokens(1024)
                .with_dev_mode(DevMode::On)
                // One event per delta: the snapshot must not depend on how
                // the mock's pieces are timed.
                .with_chunk_window_ms(0),
        )
        .create(Arc::clone(&store), "s1")?;

    let outcome = agent.run_turn(TurnInput::text("What does src/main.rs do?")).await?;
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert_eq!(outcome.steps, 2);
    assert_eq!((outcome.usage.input_tokens, outcome.usage.output_tokens), (151, 50));

    // The stored log is valid: it loads under the surface rules and breaks no invariant.
    let stored = store.load("s1")?;
    let violations = palimpsest_invariants::check_log(&stored.events);
    assert!(violations.is_empty(), "{violations:?}");
    let session = Session::from_log(stored.header.clone(), stored.events.clone())?;
    assert_eq!(session.events().len(), stored.events.len());

    // The whole log, deterministic thanks to the manual clock and ids.
    let log = stored
        .events
        .iter()
        .map(|e| serde_json::from_str(&e.to_json()))
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    insta::assert_json_snapshot!("e2e_log", log);

    // The second request shows the model its calls and their results.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    insta::assert_json_snapshot!("e2e_second_request", requests[1].json());
    Ok(())
}
