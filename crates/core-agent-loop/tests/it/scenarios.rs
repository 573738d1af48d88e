//! The ordinary turns: a text reply, tool calls split across deltas, an
//! empty stream, steering and context.

use std::sync::Arc;

use palimpsest_core_agent_loop::{FinishReason, ScriptedProvider, ScriptedResponse, TurnInput};
use palimpsest_core_session::payload::{AssistantMessage, Block, Source, TurnEndReason};
use palimpsest_core_session::EventType;

use crate::common::*;

#[tokio::test]
async fn text_reply() {
    check("text_reply", async |backend: &Backend| {
        let provider =
            Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Hello there!").usage(10, 3)]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("hi")).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
        assert_eq!((outcome.turn, outcome.steps, outcome.seqs.clone()), (1, 1, 0..9));
        assert_eq!(outcome.usage.input_tokens, 10);
        assert_eq!(outcome.message.map(|m| m.content), Some(vec![Block::text("Hello there!")]));
        // What the model was asked.
        let request = provider.last_request().expect("one request");
        assert_eq!(request.system.as_deref(), Some("You are a test agent."));
        assert_eq!(request.messages.len(), 1);
        assert_eq!(
            request.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["read", "add", "fail", "explode"]
        );
    })
    .await;
}

#[tokio::test]
async fn tool_calls_split_across_deltas() {
    check("tool_calls", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new()
                .reasoning(0, "The user wants ")
                .reasoning(0, "a file and a sum.")
                .text(1, "Let me look.")
                .tool_call(2, "call-1", "read", &["{\"pa", "th\": \"no", "tes.txt\"}"])
                .tool_call(3, "call-2", "add", &["{\"a\": 2,", " \"b\": 3}"])
                .usage(50, 20)
                .finish(FinishReason::ToolCalls),
            ScriptedResponse::new().text(0, "The file says hi; ").text(0, "2 + 3 = 5.").usage(90, 8),
        ]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("Read notes.txt and add 2 and 3.")).await.expect("turn");
        assert_eq!((outcome.reason, outcome.steps), (TurnEndReason::Completed, 2));
        assert_eq!((outcome.usage.input_tokens, outcome.usage.output_tokens), (140, 28));
        // The second request carries the calls and both results, paired.
        let second = provider.last_request().expect("two requests");
        assert_eq!(second.messages.len(), 4);
        assert!(second.unpaired_tool_calls().is_empty());
    })
    .await;
}

#[tokio::test]
async fn empty_stream() {
    check("empty_stream", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("say nothing")).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Completed);
        // The empty message is logged, cites [] and derives to nothing.
        let message = &agent.session().events()[3];
        assert_eq!(*message.event_type(), EventType::AssistantMessage);
        assert_eq!(message.source_event_seqs(), Some(&[][..]));
        assert_eq!(agent.session().derive_messages().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn steering_and_context() {
    check("steering_and_context", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a.txt\"}"]),
            ScriptedResponse::reply("a.txt is read."),
            ScriptedResponse::reply("Also done with b.txt."),
        ]));
        // Steers once, when the model first answers without calling a tool.
        let handle = slot();
        let watcher = {
            let handle = handle.clone();
            let mut steered = false;
            Watch(move |e: &palimpsest_core_session::Event, _s: &palimpsest_core_session::Session| {
                let calls_no_tool = e
                    .data_as::<AssistantMessage>()
                    .is_ok_and(|m| !m.message.content.iter().any(|b| matches!(b, Block::ToolCall { .. })));
                let final_answer =
                    *e.event_type() == EventType::AssistantMessage && calls_no_tool && !steered;
                if final_answer {
                    steered = true;
                    if let Some(h) = lock(&handle).as_ref() {
                        let _ =
                            palimpsest_core_agent_loop::SteeringHandle::steer(h, "Now b.txt too, please.");
                    }
                }
            })
        };
        let mut agent = builder(&provider).plugin(watcher).create(backend.store(), SID).expect("create");
        let steering = agent.steering_handle();
        *lock(&handle) = Some(steering.clone());

        // Context between turns lands now; steering sent while idle lands
        // in the first step of the next turn.
        agent
            .append_context(
                vec![Block::text("a.txt changed on disk")],
                Source::Plugin { plugin: "watcher".into() },
            )
            .expect("context");
        steering.add_context("The user is on a slow network.").expect("loop alive");
        steering.steer("Start with a.txt.").expect("loop alive");

        let outcome = agent.run_turn(TurnInput::text("Read the files.")).await.expect("turn");
        // Step 2's answer met waiting steering: a third step answered it.
        assert_eq!((outcome.reason, outcome.steps), (TurnEndReason::Completed, 3));
        let requests = provider.requests();
        let last = requests[2].messages.last().map(|m| m.content.clone());
        assert_eq!(last, Some(vec![Block::text("Now b.txt too, please.")]));

        drop(agent);
        // The loop is gone: a send fails and hands the message back.
        let err = steering.steer("too late").expect_err("the loop was dropped");
        assert_eq!(err.injection.content, vec![Block::text("too late")]);
    })
    .await;
}

#[tokio::test]
async fn two_turns_number_and_derive_in_order() {
    let provider =
        Arc::new(ScriptedProvider::new([ScriptedResponse::reply("One."), ScriptedResponse::reply("Two.")]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
    let first = agent.run_turn(TurnInput::text("1")).await.expect("turn 1");
    let second = agent.run_turn(TurnInput::text("2")).await.expect("turn 2");
    assert_eq!((first.turn, second.turn), (1, 2));
    assert_eq!(second.seqs.start, first.seqs.end);
    assert_eq!(agent.last_turn(), 2);
    let texts: Vec<String> = agent
        .session()
        .derive_messages()
        .iter()
        .map(|m| match &m.message.content[..] {
            [Block::Text { text }] => text.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["1", "One.", "2", "Two."]);
}

#[test]
fn run_turn_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let provider = Arc::new(ScriptedProvider::new([]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
    let fut = agent.run_turn(TurnInput::text("x"));
    assert_send(&fut);
}
