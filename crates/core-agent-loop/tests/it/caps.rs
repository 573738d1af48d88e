//! Stream caps: a streamed tool call's arguments and a whole streamed
//! response each have a cap; passing it ends the stream at once (a stream
//! that would hang after the chunk that passed it is never read again),
//! with an error recorded in a valid, resumable log.

use std::sync::Arc;

use palimpsest_core_agent_loop::{
    codes, AgentConfig, DevMode, ScriptedProvider, ScriptedResponse, StreamCaps, TurnInput,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOOL_ARGUMENTS_BYTES, DEFAULT_MAX_TOOL_RESULT_BYTES,
};
use palimpsest_core_session::payload::{AssistantChunk, ToolResult, TurnEndReason};
use palimpsest_core_session::{EventType, Session, MAX_EVENT_LINE_BYTES};

use crate::common::*;

// Each chunk also counts `CHUNK_BYTES` (32) toward the response.
const CAPS: StreamCaps =
    StreamCaps { max_tool_arguments_bytes: 100, max_response_bytes: 350, max_tool_calls: 3 };

fn config() -> AgentConfig {
    AgentConfig::default().with_dev_mode(DevMode::On).with_stream_caps(CAPS).with_chunk_window_ms(0)
}

fn error_code(reason: &TurnEndReason) -> Option<&str> {
    match reason {
        TurnEndReason::Error { error } => Some(&error.code),
        _ => None,
    }
}

/// The bytes of every logged chunk's deltas.
fn logged_chunk_bytes(session: &Session) -> usize {
    session
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::AssistantChunk)
        .filter_map(|e| e.data_as::<AssistantChunk>().ok())
        .map(|c| serde_json::to_value(&c.chunk).map_or(0, |v| v.to_string().len()))
        .sum()
}

#[tokio::test]
async fn tool_arguments_past_their_cap_end_the_stream_with_an_error_and_the_session_goes_on() {
    check("caps_tool_arguments", async |backend: &Backend| {
        // Ten deltas of 30 bytes: the fourth would pass 100. The stream then
        // hangs: reading on would never end the turn.
        let deltas = ["{\"a\":\"aaaaaaaaaaaaaaaaaaaaaaa\"}"; 10];
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().text(0, "Writing.").tool_call(1, "call-1", "write", &deltas).hang(),
            ScriptedResponse::reply("Smaller this time."),
        ]));
        let mut agent = builder(&provider).config(config()).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("Write a lot.")).await.expect("turn");
        assert_eq!(
            error_code(&outcome.reason),
            Some(codes::TOOL_ARGUMENTS_TOO_LARGE),
            "{:?}",
            outcome.reason
        );
        let session = agent.session();
        // The text chunk and three argument deltas were logged, nothing after.
        let chunks = types(session).iter().filter(|t| *t == "assistant/chunk").count();
        assert_eq!(chunks, 4);
        let result = session
            .events()
            .iter()
            .filter(|e| *e.event_type() == EventType::ToolResult)
            .find_map(|e| e.data_as::<ToolResult>().ok())
            .expect("the cut call has a result");
        assert_eq!(result.error.map(|e| e.code).as_deref(), Some(codes::STREAM_FAILED));
        // Valid and resumable: the next turn runs.
        let next = agent.run_turn(TurnInput::text("Try again.")).await.expect("turn 2");
        assert_eq!(next.reason, TurnEndReason::Completed);
    })
    .await;
}

/// A response that starts more calls than the cap: each would be logged
/// twice however small (100,000 empty calls fit the byte cap and logged
/// 90 MB), so the call past the cap ends the stream.
#[tokio::test]
async fn a_call_past_the_calls_cap_ends_the_stream_with_an_error() {
    let mut many = ScriptedResponse::new();
    for i in 0..5u32 {
        many = many.tool_call(i, &format!("call-{i}"), "read", &["{}"]);
    }
    let provider = Arc::new(ScriptedProvider::new([many, ScriptedResponse::reply("Fewer.")]));
    let store: Arc<dyn palimpsest_persistence::SessionStore> =
        Arc::new(palimpsest_persistence::MemoryStore::default());
    let mut agent = builder(&provider).config(config()).create(store, SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("Read everything.")).await.expect("turn");
    assert_eq!(error_code(&outcome.reason), Some(codes::RESPONSE_TOO_LARGE), "{:?}", outcome.reason);
    let calls = agent.session().events().iter().filter(|e| *e.event_type() == EventType::ToolCall).count();
    assert_eq!(calls, 3, "the three calls before the cap are logged, the rest never read");
    let next = agent.run_turn(TurnInput::text("Again.")).await.expect("turn 2");
    assert_eq!(next.reason, TurnEndReason::Completed);
}

#[tokio::test]
async fn a_response_past_its_cap_ends_the_stream_with_an_error() {
    check("caps_response", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new()
                .reasoning(0, &"r".repeat(100))
                .text(1, &"t".repeat(100))
                .text(1, &"t".repeat(100))
                .hang(),
            ScriptedResponse::reply("Short."),
        ]));
        let mut agent = builder(&provider).config(config()).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("Say a lot.")).await.expect("turn");
        assert_eq!(error_code(&outcome.reason), Some(codes::RESPONSE_TOO_LARGE), "{:?}", outcome.reason);
        let message = outcome.message.expect("the delivered prefix is the message");
        let text: usize = serde_json::to_value(&message.content).map_or(0, |v| v.to_string().len());
        assert!(text < 300, "only the chunks under the cap were kept: {text}");
        assert!(logged_chunk_bytes(agent.session()) < 400);
        let next = agent.run_turn(TurnInput::text("Again.")).await.expect("turn 2");
        assert_eq!(next.reason, TurnEndReason::Completed);
    })
    .await;
}

/// Usage chunks carry no text, but each is an event in the log: a server
/// that sends them without end logged 1.8 million events in 8 seconds.
#[tokio::test]
async fn chunks_without_text_count_toward_the_response_cap() {
    let mut endless = ScriptedResponse::new().text(0, "Hi.");
    for i in 0..100 {
        endless = endless.usage(i, i);
    }
    let provider = Arc::new(ScriptedProvider::new([endless.hang(), ScriptedResponse::reply("Done.")]));
    let store: Arc<dyn palimpsest_persistence::SessionStore> =
        Arc::new(palimpsest_persistence::MemoryStore::default());
    let mut agent = builder(&provider).config(config()).create(store, SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("Hello.")).await.expect("turn");
    assert_eq!(error_code(&outcome.reason), Some(codes::RESPONSE_TOO_LARGE), "{:?}", outcome.reason);
    let chunks = types(agent.session()).iter().filter(|t| *t == "assistant/chunk").count();
    // 35 bytes for the text, 32 for each usage chunk: 9 usage chunks fit 350.
    assert_eq!(chunks, 1 + 9);
    let next = agent.run_turn(TurnInput::text("Again.")).await.expect("turn 2");
    assert_eq!(next.reason, TurnEndReason::Completed);
}

#[tokio::test]
async fn one_chunk_larger_than_the_cap_is_never_logged() {
    let backend = &backends()[0];
    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()
        .tool_call(0, "call-1", "write", &[&"x".repeat(1000)])
        .hang()]));
    let mut agent = builder(&provider).config(config()).create(backend.store(), SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("One huge delta.")).await.expect("turn");
    assert_eq!(error_code(&outcome.reason), Some(codes::TOOL_ARGUMENTS_TOO_LARGE));
    assert_eq!(outcome.message, None, "nothing was delivered, so no message");
    assert_eq!(logged_chunk_bytes(agent.session()), 0);
    reload(&backend.store());
}

#[test]
fn the_default_caps_keep_every_event_within_the_event_limit_with_margin() {
    let caps = StreamCaps::default();
    assert_eq!(
        (caps.max_tool_arguments_bytes, caps.max_response_bytes),
        (DEFAULT_MAX_TOOL_ARGUMENTS_BYTES, DEFAULT_MAX_RESPONSE_BYTES)
    );
    assert!(caps.max_tool_arguments_bytes <= caps.max_response_bytes);
    // A byte escapes to at most six (`\u0001`); leave room for the envelope.
    assert!(caps.max_response_bytes * 6 + (1 << 20) <= MAX_EVENT_LINE_BYTES);
}

/// The `tool/result` payloads of a session, in log order.
fn tool_results(session: &Session) -> Vec<ToolResult> {
    session
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .filter_map(|e| e.data_as::<ToolResult>().ok())
        .collect()
}

#[tokio::test]
async fn a_tool_result_past_its_cap_is_answered_with_an_error_and_the_session_goes_on() {
    check("caps_tool_result", async |backend: &Backend| {
        let long = "p".repeat(200);
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new()
                .tool_call(0, "call-1", "read", &[&format!("{{\"path\": \"{long}\"}}")])
                .tool_call(1, "call-2", "read", &["{\"path\": \"a\"}"]),
            ScriptedResponse::reply("One was too large."),
            ScriptedResponse::reply("Fine."),
        ]));
        let config = AgentConfig::default().with_dev_mode(DevMode::On).with_max_tool_result_bytes(100);
        let mut agent = builder(&provider).config(config).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("Read both.")).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
        let results = tool_results(agent.session());
        assert_eq!(results.len(), 2);
        let error = results[0].error.as_ref().expect("the large result is an error");
        assert_eq!(
            (error.name.as_str(), error.code.as_str()),
            ("ToolResultTooLarge", codes::TOOL_RESULT_TOO_LARGE)
        );
        let logged = serde_json::to_string(&results[0].message).unwrap();
        assert!(!logged.contains(&long), "the oversized content was not logged");
        assert!(logged.contains("over the 100-byte cap"), "{logged}");
        assert_eq!(results[1].error, None, "the small result is kept as it was");
        let next = agent.run_turn(TurnInput::text("Again.")).await.expect("turn 2");
        assert_eq!(next.reason, TurnEndReason::Completed);
    })
    .await;
}

#[tokio::test]
async fn the_default_tool_result_cap_keeps_a_huge_result_out_of_the_log() {
    let backend = &backends()[0];
    // A tool of someone else's that returns more than it should.
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "read", &["{}"]),
        ScriptedResponse::reply("Done."),
    ]));
    let tools =
        palimpsest_core_agent_loop::ToolRegistry::new().with(palimpsest_core_agent_loop::FnTool::new(
            "read",
            "Reads a file, far too much of it.",
            serde_json::json!({"type": "object"}),
            |_args: String, _ctx: palimpsest_core_agent_loop::ToolContext| async move {
                Ok(vec![palimpsest_core_session::payload::Block::text(
                    "z".repeat(DEFAULT_MAX_TOOL_RESULT_BYTES),
                )])
            },
        ));
    let mut agent = builder(&provider).tools(tools).create(backend.store(), SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("Read it.")).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let results = tool_results(agent.session());
    assert_eq!(results[0].error.as_ref().map(|e| e.code.as_str()), Some(codes::TOOL_RESULT_TOO_LARGE));
    reload(&backend.store());
}
