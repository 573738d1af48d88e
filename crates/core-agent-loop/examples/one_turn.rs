//! One turn of the agent loop: a scripted provider that asks for a tool,
//! the tool, and an in-memory store. Prints what the log holds.
//!
//! Run with `cargo run -p palimpsest-core-agent-loop --example one_turn`.

#![allow(clippy::print_stdout)]

use std::sync::Arc;

use palimpsest_core_agent_loop::prelude::*;
use palimpsest_core_agent_loop::{ManualClock, ScriptedProvider, ScriptedResponse, SequentialIds};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::reply("Let me look.").tool_call(1, "c1", "clock", &["{}"]),
        ScriptedResponse::reply("It is noon."),
    ]));
    let clock = FnTool::new(
        "clock",
        "The time of day.",
        serde_json::json!({"type": "object"}),
        |_args: String, _ctx: ToolContext| async move { Ok::<_, ToolError>(vec![Block::text("12:00")]) },
    );
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = AgentLoop::builder(provider)
        .tool(clock)
        .clock(Arc::new(ManualClock::new(1_767_225_600_000).with_tick(1)))
        .ids(Arc::new(SequentialIds::new("m")))
        .create(store.clone(), "example")?;

    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    let outcome = runtime.block_on(agent.run_turn(TurnInput::text("What time is it?")))?;
    println!("turn {} ended {:?} after {} steps", outcome.turn, outcome.reason, outcome.steps);
    for event in store.load("example")?.events {
        println!("{:>3} {}", event.seq(), event.event_type());
    }
    for message in agent.session().derive_messages() {
        println!("{:?}: {:?}", message.message.role, message.message.content);
    }
    Ok(())
}
