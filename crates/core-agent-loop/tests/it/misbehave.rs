//! A model that misbehaves (issue 21): repeated or missing tool-call ids,
//! interleaved indexes, calls split anywhere, broken arguments, random
//! finish reasons and cut streams. Whatever it sends, in dev mode and
//! release mode alike, the log validates, every tool that ran has its
//! result in the log, and every request carries unique, well-formed tool
//! calls.

use std::sync::{Arc, Mutex};

use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, DevMode, FinishReason, FnTool, ManualClock, ModelRequest, Provider,
    ProviderError, ScriptedProvider, ScriptedResponse, SequentialIds, ToolContext, ToolRegistry, TurnInput,
    PROVIDER_CALL_ID,
};
use palimpsest_core_session::payload::{Block, StreamChunk, ToolResult, TurnEndReason};
use palimpsest_core_session::{EventType, Session};
use palimpsest_persistence::{MemoryStore, SessionStore};
use proptest::prelude::*;

use crate::common::{check, lock, Backend, SID, T0};

/// One tool call as the provider streams it.
#[derive(Debug, Clone)]
struct CallSpec {
    index: u32,
    id: &'static str,
    /// Whether every delta repeats the id (else only the first has it).
    id_on_every_delta: bool,
    name: &'static str,
    arguments: String,
    /// Where the arguments are cut into deltas (byte offsets, any order).
    cuts: Vec<usize>,
}

/// One response: text and calls, interleaved as `order` says, then how it ends.
#[derive(Debug, Clone)]
struct ResponseSpec {
    texts: Vec<(u32, String)>,
    calls: Vec<CallSpec>,
    order: Vec<u8>,
    usage: bool,
    finish: Option<FinishReason>,
    fails: bool,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    let arguments = prop_oneof![
        Just(r#"{"path": "a.txt"}"#.to_owned()),
        Just(r#"{"path": "ünïcödé/✓.txt", "n": [1, 2]}"#.to_owned()),
        Just(String::new()),
        Just(r#"{"path": "a.t"#.to_owned()),
        Just("not json at all".to_owned()),
        Just("[1, 2]".to_owned()),
    ];
    (
        0u32..4,
        prop::sample::select(vec!["a", "b", "", "call_0", "a-2"]),
        any::<bool>(),
        prop::sample::select(vec!["rec", "rec", "nope"]),
        arguments,
        prop::collection::vec(0usize..40, 0..4),
    )
        .prop_map(|(index, id, id_on_every_delta, name, arguments, cuts)| CallSpec {
            index,
            id,
            id_on_every_delta,
            name,
            arguments,
            cuts,
        })
}

fn response_spec() -> impl Strategy<Value = ResponseSpec> {
    (
        prop::collection::vec((0u32..4, "[a-z ]{0,6}"), 0..3),
        prop::collection::vec(call_spec(), 0..4),
        prop::collection::vec(any::<u8>(), 0..24),
        any::<bool>(),
        prop::sample::select(vec![
            None,
            Some(FinishReason::Stop),
            Some(FinishReason::ToolCalls),
            Some(FinishReason::MaxTokens),
        ]),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(texts, calls, order, usage, finish, fails)| ResponseSpec {
            texts,
            calls,
            order,
            usage,
            finish,
            fails,
        })
}

/// The deltas of one call: the arguments cut at `cuts` (on char boundaries).
fn call_deltas(call: &CallSpec) -> Vec<StreamChunk> {
    let mut cuts: Vec<usize> = call
        .cuts
        .iter()
        .map(|&c| c.min(call.arguments.len()))
        .filter(|&c| call.arguments.is_char_boundary(c))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([call.arguments.len()]) {
        if cut >= from {
            pieces.push(&call.arguments[from..cut]);
            from = cut;
        }
    }
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| StreamChunk::ToolCallDelta {
            index: call.index,
            id: if i == 0 || call.id_on_every_delta { call.id.to_owned() } else { String::new() },
            name: (i == 0).then(|| call.name.to_owned()),
            arguments_delta: piece.to_owned(),
        })
        .collect()
}

impl ResponseSpec {
    fn response(&self) -> ScriptedResponse {
        let mut queues: Vec<std::collections::VecDeque<StreamChunk>> = self
            .texts
            .iter()
            .map(|(index, text)| [StreamChunk::TextDelta { index: *index, text: text.clone() }].into())
            .chain(self.calls.iter().map(|c| call_deltas(c).into()))
            .collect();
        let mut response = ScriptedResponse::new();
        let mut order = self.order.iter().copied().cycle();
        loop {
            queues.retain(|q| !q.is_empty());
            if queues.is_empty() {
                break;
            }
            let pick = usize::from(order.next().unwrap_or(0)) % queues.len();
            if let Some(chunk) = queues[pick].pop_front() {
                response = response.chunk(chunk);
            }
        }
        if self.usage {
            response = response.usage(10, 5);
        }
        if let Some(finish) = self.finish {
            response = response.finish(finish);
        }
        if self.fails {
            response = response.error(ProviderError::stream("connection reset"));
        }
        response
    }
}

/// The ids every tool execution saw, in order.
type Ran = Arc<Mutex<Vec<String>>>;

fn recording_tools(ran: &Ran) -> ToolRegistry {
    let ran = ran.clone();
    ToolRegistry::new().with(
        FnTool::new(
            "rec",
            "Records that it ran.",
            serde_json::json!({"type": "object"}),
            move |_args: String, ctx: ToolContext| {
                let ran = ran.clone();
                async move {
                    lock(&ran).push(ctx.call_id.clone());
                    Ok(vec![Block::text(format!("ran {}", ctx.call_id))])
                }
            },
        )
        .with_concurrent(true),
    )
}

/// What a request may not carry: two tool calls (or two answers) with one
/// id, an unanswered call, or arguments that are not a JSON object.
fn request_problems(request: &ModelRequest) -> Vec<String> {
    let mut problems = Vec::new();
    let mut calls = std::collections::HashSet::new();
    let mut results = std::collections::HashSet::new();
    for message in &request.messages {
        for block in &message.content {
            match block {
                Block::ToolCall { id, arguments, .. } => {
                    if !calls.insert(id.clone()) {
                        problems.push(format!("tool call id {id:?} sent twice"));
                    }
                    if !matches!(serde_json::from_str(arguments), Ok(serde_json::Value::Object(_))) {
                        problems.push(format!("call {id:?} sent with arguments {arguments:?}"));
                    }
                }
                Block::ToolResult { tool_call_id, .. } if !results.insert(tool_call_id.clone()) => {
                    problems.push(format!("tool_call_id {tool_call_id:?} answered twice"));
                }
                _ => {}
            }
        }
    }
    problems.extend(request.unpaired_tool_calls().into_iter().map(|id| format!("call {id:?} unpaired")));
    problems
}

/// Runs two turns over `script` and checks everything the issue asks.
fn run_case(dev_mode: DevMode, script: Vec<ResponseSpec>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let ran: Ran = Arc::default();
    let mut responses: std::collections::VecDeque<ScriptedResponse> =
        script.iter().map(ResponseSpec::response).collect();
    let provider = Arc::new(ScriptedProvider::from_fn(move |_request: &ModelRequest| {
        responses.pop_front().unwrap_or_else(|| ScriptedResponse::reply("Done."))
    }));
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let dyn_provider: Arc<dyn Provider> = provider.clone();
    let mut agent = AgentLoop::builder(dyn_provider)
        .clock(Arc::new(ManualClock::new(T0).with_tick(1)))
        .ids(Arc::new(SequentialIds::new("m")))
        .config(AgentConfig::default().with_dev_mode(dev_mode).with_max_steps(4))
        .tools(recording_tools(&ran))
        .create(store.clone(), SID)
        .expect("create");
    for input in ["one", "two"] {
        let outcome = runtime.block_on(agent.run_turn(TurnInput::text(input)));
        prop_assert!(outcome.is_ok(), "turn {input:?} failed: {outcome:?}");
    }

    // The stored log passes what `palimpsest validate` checks.
    let stored = store.load(SID).expect("load");
    let violations = palimpsest_invariants::check_log(&stored.events);
    prop_assert!(violations.is_empty(), "invariant violations: {violations:?}");
    let session = Session::from_log(stored.header, stored.events);
    prop_assert!(session.is_ok(), "the log is refused: {:?}", session.err());
    let session = session.expect("checked");

    // Every tool that ran has exactly one (successful) result in the log.
    let results: Vec<ToolResult> = session
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .map(|e| e.data_as::<ToolResult>().expect("tool/result"))
        .collect();
    let ran = lock(&ran).clone();
    let mut seen = std::collections::HashSet::new();
    for id in &ran {
        prop_assert!(seen.insert(id.clone()), "call {id:?} ran twice");
        let answers: Vec<&ToolResult> = results.iter().filter(|r| r.call_id() == id).collect();
        prop_assert_eq!(answers.len(), 1, "call {:?} has {} results", id, answers.len());
        prop_assert!(answers[0].error.is_none(), "call {id:?} ran but its result is an error");
    }

    // Every request was one a strict provider accepts.
    for request in provider.requests() {
        let problems = request_problems(&request);
        prop_assert!(problems.is_empty(), "a request the provider would refuse: {problems:?}");
    }
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_stream_leaves_a_valid_log_in_release_mode(script in prop::collection::vec(response_spec(), 1..5)) {
        run_case(DevMode::Off, script)?;
    }

    #[test]
    fn any_stream_leaves_a_valid_log_in_dev_mode(script in prop::collection::vec(response_spec(), 1..5)) {
        run_case(DevMode::On, script)?;
    }
}

/// The issue's case: two calls sharing one id, and a third reusing an id of
/// the previous turn. Each call runs once under an id of its own; the
/// provider's id stays in the log as `providerCallId`.
#[tokio::test]
async fn repeated_call_ids_get_ids_of_their_own() {
    check("duplicate_call_ids", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().tool_call(0, "call_1", "read", &["{\"path\": \"a\"}"]).tool_call(
                1,
                "call_1",
                "read",
                &["{\"path\": \"b\"}"],
            ),
            ScriptedResponse::reply("Read both."),
            ScriptedResponse::new().tool_call(0, "call_1", "read", &["{\"path\": \"c\"}"]),
            ScriptedResponse::reply("Read c."),
        ]));
        let mut agent = crate::common::builder(&provider).create(backend.store(), SID).expect("create");
        for input in ["Read a and b.", "Read c."] {
            let outcome = agent.run_turn(TurnInput::text(input)).await.expect("turn");
            assert_eq!(outcome.reason, TurnEndReason::Completed);
        }
        let calls: Vec<(String, Option<String>)> = agent
            .session()
            .events()
            .iter()
            .filter(|e| *e.event_type() == EventType::ToolCall)
            .map(|e| {
                let data: serde_json::Value = serde_json::from_str(e.data()).expect("json");
                let provider_id = data.get(PROVIDER_CALL_ID).and_then(|v| v.as_str()).map(str::to_owned);
                (data["callId"].as_str().unwrap_or_default().to_owned(), provider_id)
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("call_1".to_owned(), None),
                ("call_1-2".to_owned(), Some("call_1".to_owned())),
                ("call_1-3".to_owned(), Some("call_1".to_owned())),
            ]
        );
        for request in provider.requests() {
            assert_eq!(request_problems(&request), Vec::<String>::new());
        }
    })
    .await;
}

/// Issue 21, item 3: a strict provider refuses any request whose history
/// holds a tool call with arguments that are not a JSON object. The log
/// keeps the broken arguments; the requests never carry them, so the
/// session goes on.
#[tokio::test]
async fn a_strict_provider_accepts_every_request_after_broken_arguments() {
    check("broken_arguments_strict_provider", async |backend: &Backend| {
        let mut script: std::collections::VecDeque<ScriptedResponse> = [
            ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": ", "\"a.t"]),
            ScriptedResponse::reply("Sorry, my arguments were cut."),
            ScriptedResponse::reply("Still here."),
        ]
        .into();
        let provider = Arc::new(ScriptedProvider::from_fn(move |request: &ModelRequest| {
            let problems = request_problems(request);
            if problems.is_empty() {
                script.pop_front().unwrap_or_else(|| ScriptedResponse::reply("Done."))
            } else {
                ScriptedResponse::refuse(ProviderError::refused(format!("invalid history: {problems:?}")))
            }
        }));
        let mut agent = crate::common::builder(&provider).create(backend.store(), SID).expect("create");
        for input in ["Read a.", "Are you there?"] {
            let outcome = agent.run_turn(TurnInput::text(input)).await.expect("turn");
            assert_eq!(outcome.reason, TurnEndReason::Completed, "turn {input:?}");
        }
        // The log keeps what the model produced, verbatim.
        let call = agent
            .session()
            .events()
            .iter()
            .find(|e| *e.event_type() == EventType::ToolCall)
            .map(|e| e.data_as::<palimpsest_core_session::payload::ToolCall>().expect("tool/call"))
            .expect("a tool/call");
        assert_eq!(call.arguments, "{\"path\": \"a.t");
        // The tool did not run; its result says why.
        let result = agent
            .session()
            .events()
            .iter()
            .find(|e| *e.event_type() == EventType::ToolResult)
            .map(|e| e.data_as::<ToolResult>().expect("tool/result"))
            .expect("a tool/result");
        assert_eq!(result.error.map(|e| e.code).as_deref(), Some("INVALID_ARGUMENTS"));
        assert_eq!(provider.requests().len(), 3);
    })
    .await;
}

/// The error codes of a turn's tool results, in order.
fn result_codes(session: &Session) -> Vec<Option<String>> {
    session
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .map(|e| e.data_as::<ToolResult>().expect("tool/result").error.map(|e| e.code))
        .collect()
}

/// A response of many calls (one probe sent 3,000 `read_file` calls in
/// one response, and the loop logged 574 MB of results): the first
/// `max_tool_calls_per_step` run, every other one is answered with
/// `TOO_MANY_TOOL_CALLS` without running, and the turn goes on.
#[tokio::test]
async fn calls_past_the_per_step_cap_are_answered_without_running() {
    let mut first = ScriptedResponse::new();
    for i in 0..7u32 {
        first = first.tool_call(i, &format!("call-{i}"), "read", &["{\"path\": \"a\"}"]);
    }
    let provider = Arc::new(ScriptedProvider::new([first, ScriptedResponse::reply("Enough.")]));
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let config = palimpsest_core_agent_loop::AgentConfig::default()
        .with_dev_mode(palimpsest_core_agent_loop::DevMode::On)
        .with_chunk_window_ms(0)
        .with_max_tool_calls_per_step(3);
    let mut agent = crate::common::builder(&provider).config(config).create(store, SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("Read a lot.")).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let codes = result_codes(agent.session());
    let too_many = Some("TOO_MANY_TOOL_CALLS".to_owned());
    assert_eq!(codes, [None, None, None, too_many.clone(), too_many.clone(), too_many.clone(), too_many]);
    assert!(Session::from_log(agent.session().header().clone(), agent.session().events().to_vec()).is_ok());
}

/// Arguments naming a key twice read one way to the tool (the last) and
/// another to a person (often the first): `{"path":"a","path":"../x"}`.
/// The call is refused as invalid arguments, and the tool does not run.
#[tokio::test]
async fn arguments_naming_a_key_twice_are_refused() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a\", \"path\": \"../x\"}"]),
        ScriptedResponse::reply("Oops."),
    ]));
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = crate::common::builder(&provider).create(store, SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("Read.")).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert_eq!(result_codes(agent.session()), [Some("INVALID_ARGUMENTS".to_owned())]);
    let result = agent
        .session()
        .events()
        .iter()
        .find(|e| *e.event_type() == EventType::ToolResult)
        .map(|e| e.data().to_owned())
        .unwrap_or_default();
    assert!(result.contains("twice"), "{result}");
}

/// A server that holds the stream open after the finish reason: a cancel
/// while the loop waits for the end stops the wait, and the whole answer
/// stands as completed (it was logged whole, and the turn `aborted`).
#[tokio::test]
async fn a_cancel_after_the_finish_reason_keeps_the_whole_answer() {
    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()
        .text(0, "All of it.")
        .finish(FinishReason::Stop)
        .hang()]));
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = crate::common::builder(&provider).create(store, SID).expect("create");
    let cancel = tokio_util::sync::CancellationToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        later.cancel();
    });
    let outcome = agent.run_turn(TurnInput::text("Say it.").with_cancel(cancel)).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let message = outcome.message.expect("the answer");
    assert_eq!(message.content, [Block::text("All of it.")]);
}
