//! Every failure ends in a valid log: tool failures, provider errors,
//! cancellation, the output-token limit, the step limit, a failing store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use palimpsest_core_agent_loop::{
    codes, AgentConfig, DevMode, FinishReason, FnTool, ProviderError, ScriptedProvider, ScriptedResponse,
    ToolContext, ToolError, TurnInput,
};
use palimpsest_core_session::payload::{Block, ErrorInfo, ToolResult, TurnEndReason};
use palimpsest_core_session::{Event, EventType, Session, SessionHeader};
use palimpsest_persistence::{Durability, MemoryStore, SessionStore, StoreError, StoredSession};
use tokio_util::sync::CancellationToken;

use crate::common::*;

fn results(session: &Session) -> Vec<(String, bool, Option<String>)> {
    session
        .events()
        .iter()
        .filter_map(|e| e.data_as::<ToolResult>().ok().filter(|_| *e.event_type() == EventType::ToolResult))
        .map(|r| {
            let is_error = matches!(&r.message.content[..], [Block::ToolResult { is_error: true, .. }]);
            (r.call_id().to_owned(), is_error, r.error.map(|e| e.code))
        })
        .collect()
}

fn error_reason(code: &str, message: &str) -> TurnEndReason {
    TurnEndReason::Error { error: ErrorInfo { message: message.into(), code: code.into() } }
}

#[tokio::test]
async fn tool_failures_are_results_and_the_turn_goes_on() {
    check("tool_failures", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new()
                .tool_call(0, "call-1", "nope", &["{}"])
                .tool_call(1, "call-2", "fail", &["{}"])
                .tool_call(2, "call-3", "read", &["{not json"])
                .tool_call(3, "call-4", "explode", &["{}"])
                .tool_call(4, "call-5", "read", &["{\"path\": \"ok.txt\"}"]),
            ScriptedResponse::reply("Four of five failed."),
        ]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("Try everything.")).await.expect("turn");
        assert_eq!((outcome.reason, outcome.steps), (TurnEndReason::Completed, 2));
        let expected = [
            ("call-1", true, Some(codes::UNKNOWN_TOOL)),
            ("call-2", true, Some("DISK_FULL")),
            ("call-3", true, Some("INVALID_ARGUMENTS")),
            ("call-4", true, Some(codes::TOOL_PANICKED)),
            ("call-5", false, None),
        ]
        .map(|(id, err, code)| (id.to_owned(), err, code.map(str::to_owned)));
        assert_eq!(results(agent.session()), expected);
    })
    .await;
}

#[tokio::test]
async fn provider_error_before_the_stream() {
    check("provider_error_before_stream", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::refuse(ProviderError::unavailable("connection refused")),
            ScriptedResponse::reply("Back online."),
        ]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("hello?")).await.expect("turn");
        assert_eq!(
            outcome.reason,
            error_reason("PROVIDER_UNAVAILABLE", "provider unavailable: connection refused")
        );
        assert_eq!(outcome.message, None);
        // No assistant/message: nothing was streamed.
        assert!(!types(agent.session()).contains(&"assistant/message".to_owned()));
        // The session goes on.
        let next = agent.run_turn(TurnInput::text("and now?")).await.expect("turn 2");
        assert_eq!(next.reason, TurnEndReason::Completed);
    })
    .await;
}

#[tokio::test]
async fn provider_error_mid_stream_keeps_the_prefix() {
    check("provider_error_mid_stream", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()
            .text(0, "I will read ")
            .text(0, "the file")
            .tool_call(1, "call-1", "read", &["{\"path\":", " \"a.t"])
            .error(ProviderError::stream("connection reset"))]));
        let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("read a.txt")).await.expect("turn");
        assert_eq!(
            outcome.reason,
            error_reason("PROVIDER_STREAM", "provider stream failed: connection reset")
        );
        // The prefix became an interrupted message citing the four chunks;
        // its half-streamed call was answered, not run.
        let message = outcome.message.expect("the prefix message");
        assert_eq!(message.content[0], Block::text("I will read the file"));
        assert_eq!(
            results(agent.session()),
            [("call-1".to_owned(), true, Some(codes::STREAM_FAILED.to_owned()))]
        );
        assert!(agent.request_preview().unpaired_tool_calls().is_empty());
    })
    .await;
}

/// Cancels `token` when the `n`th `assistant/chunk` is committed.
fn cancel_at_chunk(token: CancellationToken, n: usize) -> impl palimpsest_core_agent_loop::Plugin {
    let mut seen = 0;
    Watch(move |e: &Event, _s: &Session| {
        if *e.event_type() == EventType::AssistantChunk {
            seen += 1;
            if seen == n {
                token.cancel();
            }
        }
    })
}

#[tokio::test]
async fn cancel_mid_stream() {
    check("cancel_mid_stream", async |backend: &Backend| {
        let token = CancellationToken::new();
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new()
                .text(0, "Let me ")
                .text(0, "check")
                .tool_call(1, "call-1", "read", &["{\"pa", "th\": \"x\"}"])
                .text(2, " never delivered")
                .usage(10, 10),
            ScriptedResponse::reply("Fine, stopping."),
        ]));
        let mut agent = builder(&provider)
            .plugin(cancel_at_chunk(token.clone(), 3))
            .create(backend.store(), SID)
            .expect("create");
        let outcome = agent.run_turn(TurnInput::text("check x").with_cancel(token)).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Aborted { reason: "cancelled".into() });
        let message = outcome.message.expect("the delivered prefix");
        assert_eq!(
            message.content,
            [
                Block::text("Let me check"),
                Block::ToolCall { id: "call-1".into(), name: "read".into(), arguments: "{\"pa".into() }
            ]
        );
        assert_eq!(
            results(agent.session()),
            [("call-1".to_owned(), true, Some(codes::CANCELLED.to_owned()))]
        );
        // The next turn's request is provider-valid.
        let next = agent.run_turn(TurnInput::text("never mind")).await.expect("turn 2");
        assert_eq!(next.reason, TurnEndReason::Completed);
        assert!(provider.last_request().expect("request").unpaired_tool_calls().is_empty());
    })
    .await;
}

#[tokio::test]
async fn cancel_while_tools_run() {
    check("cancel_during_tools", async |backend: &Backend| {
        let token = CancellationToken::new();
        let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()
            .tool_call(0, "call-1", "read", &["{\"path\": \"a.txt\"}"])
            .tool_call(1, "call-2", "wait", &["{}"])
            .tool_call(2, "call-3", "stop", &["{}"])
            .tool_call(3, "call-4", "fail", &["{}"])]));
        let wait =
            FnTool::new("wait", "Waits forever.", serde_json::json!({}), |_a: String, _c: ToolContext| {
                std::future::pending::<Result<Vec<Block>, ToolError>>()
            })
            .with_concurrent(true);
        let stop = {
            let token = token.clone();
            FnTool::new(
                "stop",
                "Cancels the turn.",
                serde_json::json!({}),
                move |_a: String, _c: ToolContext| {
                    let token = token.clone();
                    async move {
                        token.cancel();
                        Ok::<_, ToolError>(vec![Block::text("cancelled the turn")])
                    }
                },
            )
            .with_concurrent(true)
        };
        let mut agent =
            builder(&provider).tool(wait).tool(stop).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("go").with_cancel(token)).await.expect("turn");
        assert_eq!(outcome.reason, TurnEndReason::Aborted { reason: "cancelled".into() });
        // `read`, `wait` and `stop` ran together. `read` and `stop` finished
        // and keep their results; `wait` was still running and `fail` (not
        // concurrent) had not started: both are answered as cancelled. All in
        // request order.
        let cancelled = Some(codes::CANCELLED.to_owned());
        assert_eq!(
            results(agent.session()),
            [
                ("call-1".to_owned(), false, None),
                ("call-2".to_owned(), true, cancelled.clone()),
                ("call-3".to_owned(), false, None),
                ("call-4".to_owned(), true, cancelled),
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn max_tokens() {
    check("max_tokens", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().text(0, "The answer is").usage(10, 4).finish(FinishReason::MaxTokens),
            ScriptedResponse::new()
                .text(0, "Reading")
                .tool_call(1, "call-1", "read", &["{\"path\": \"big"])
                .usage(20, 4)
                .finish(FinishReason::MaxTokens),
        ]));
        let config = AgentConfig::default().with_max_output_tokens(4).with_dev_mode(DevMode::On);
        let mut agent = builder(&provider).config(config).create(backend.store(), SID).expect("create");
        let first = agent.run_turn(TurnInput::text("What is it?")).await.expect("turn 1");
        assert_eq!(first.reason, TurnEndReason::MaxTokens);
        assert_eq!(provider.last_request().and_then(|r| r.max_output_tokens), Some(4));
        let second = agent.run_turn(TurnInput::text("Read big.txt")).await.expect("turn 2");
        assert_eq!(second.reason, TurnEndReason::MaxTokens);
        // The truncated call was recorded and answered, never run.
        assert_eq!(
            results(agent.session()),
            [("call-1".to_owned(), true, Some(codes::OUTPUT_TRUNCATED.to_owned()))]
        );
    })
    .await;
}

#[tokio::test]
async fn step_limit() {
    check("step_limit", async |backend: &Backend| {
        let again = |n: u32| {
            ScriptedResponse::new().tool_call(0, &format!("call-{n}"), "add", &["{\"a\": 1, \"b\": 1}"])
        };
        let provider = Arc::new(ScriptedProvider::new([again(1), again(2), again(3)]));
        let config = AgentConfig::default().with_max_steps(2).with_dev_mode(DevMode::On);
        let mut agent = builder(&provider).config(config).create(backend.store(), SID).expect("create");
        let outcome = agent.run_turn(TurnInput::text("loop forever")).await.expect("turn");
        assert_eq!(outcome.reason, error_reason(codes::STEP_LIMIT, "the turn reached its limit of 2 steps"));
        assert_eq!(outcome.steps, 2);
        assert_eq!(provider.remaining(), 1);
        assert!(agent.request_preview().unpaired_tool_calls().is_empty());
    })
    .await;
}

/// A store whose appends start failing after `ok` successful ones, and
/// whose next `failing_syncs` syncs fail with `locked` (as a SQLite
/// checkpoint held back by another connection's long read).
#[derive(Debug)]
struct FailingStore {
    inner: MemoryStore,
    ok: AtomicUsize,
    failing_syncs: AtomicUsize,
}

impl SessionStore for FailingStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.inner.create(header)
    }
    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        self.inner.create_with_events(header, events)
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        if self.ok.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err() {
            return Err(StoreError::io("append", std::io::Error::other("disk on fire")));
        }
        self.inner.append(session_id, events)
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        self.inner.load(session_id)
    }

    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        self.inner.list()
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        self.inner.delete(session_id)
    }

    fn sync(&self, session_id: &str) -> Result<(), StoreError> {
        if self.failing_syncs.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(StoreError::Locked { what: "the checkpoint".into() });
        }
        self.inner.sync(session_id)
    }
}

#[tokio::test]
async fn a_failing_store_returns_err_and_the_turn_is_repaired_later() {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a\"}"]),
        ScriptedResponse::reply("never seen"),
        ScriptedResponse::reply("Recovered."),
    ]));
    // Appends: turn/start+user, step/start, the chunk, message+call; then the result fails.
    let store = Arc::new(FailingStore {
        inner: MemoryStore::default(),
        ok: AtomicUsize::new(4),
        failing_syncs: AtomicUsize::new(0),
    });
    let dyn_store: Arc<dyn SessionStore> = store.clone();
    let mut agent = builder(&provider).create(dyn_store.clone(), SID).expect("create");
    let err = agent.run_turn(TurnInput::text("read a")).await.expect_err("the store fails");
    assert_eq!(err.code(), "io");
    assert!(err.is_store_failure());
    drop(agent);

    // Memory never got ahead of the store: reopen and repair.
    store.ok.store(usize::MAX, Ordering::SeqCst);
    let (mut agent, report) = resumed_builder(&provider, T0 + 1_000, "r").open(dyn_store, SID).expect("open");
    let repaired = report.repaired.expect("the open turn was repaired");
    assert_eq!(repaired, 6..9);
    let closers = &agent.session().events()[6..];
    let result = closers[0].data_as::<ToolResult>().expect("a tool/result closer");
    assert_eq!(result.error.map(|e| e.code).as_deref(), Some("TOOL_OUTCOME_UNKNOWN"));
    assert_eq!(types(agent.session())[7..9], ["step/end", "turn/end"]);
    let outcome = agent.run_turn(TurnInput::text("again")).await.expect("turn 2");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert!(provider.last_request().expect("request").unpaired_tool_calls().is_empty());
}

/// Syncs that fail after the store took the batch (as a SQLite checkpoint
/// held back by another connection's long read): the turn goes on and is
/// logged once, whole; the outcome says it is not durable; memory is the
/// store; a later turn whose sync works is durable again. (Memory used to
/// stay one batch behind the store, and every later turn failed with
/// `conflict`.)
#[tokio::test]
async fn failed_syncs_leave_the_turn_logged_once_and_say_it_is_not_durable() {
    for durability in [Durability::TurnBoundary, Durability::EveryAppend] {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::reply("First."),
            ScriptedResponse::new().tool_call(0, "call-1", "add", &["{\"a\": 1, \"b\": 2}"]),
            ScriptedResponse::reply("Second."),
            ScriptedResponse::reply("Third."),
        ]));
        let store = Arc::new(FailingStore {
            inner: MemoryStore::default(),
            ok: AtomicUsize::new(usize::MAX),
            failing_syncs: AtomicUsize::new(0),
        });
        let dyn_store: Arc<dyn SessionStore> = store.clone();
        let config = AgentConfig::default().with_durability(durability).with_dev_mode(DevMode::On);
        let mut agent = builder(&provider).config(config).create(dyn_store.clone(), SID).expect("create");
        let first = agent.run_turn(TurnInput::text("one")).await.expect("turn 1");
        assert!(first.durable, "{durability:?}");
        // Every sync of turn 2 fails, the retry at its end too.
        store.failing_syncs.store(usize::MAX, Ordering::SeqCst);
        let second = agent.run_turn(TurnInput::text("two")).await.expect("turn 2 is logged");
        assert_eq!(
            (second.reason.clone(), second.durable),
            (TurnEndReason::Completed, false),
            "{durability:?}"
        );
        assert_eq!(second.steps, 2, "{durability:?}: the tool step and the answer");
        let stored = dyn_store.load(SID).expect("load");
        assert_eq!(agent.session().events(), &stored.events[..], "{durability:?}: memory is the store");
        let users = stored.events.iter().filter(|e| *e.event_type() == EventType::UserMessage).count();
        assert_eq!(users, 2, "{durability:?}: each input logged once");
        // Flushing fails while syncs do; once they work, the next turn is
        // durable and nothing was lost or doubled.
        assert_eq!(agent.flush().map_err(|e| e.code().to_owned()), Err("locked".to_owned()));
        store.failing_syncs.store(0, Ordering::SeqCst);
        let third = agent.run_turn(TurnInput::text("three")).await.expect("turn 3");
        assert_eq!((third.turn, third.durable, third.repaired), (3, true, None), "{durability:?}");
        let stored = dyn_store.load(SID).expect("load");
        assert_eq!(agent.session().events(), &stored.events[..], "{durability:?}");
        let reopened = Session::from_log(stored.header, stored.events).expect("the stored log is valid");
        assert!(palimpsest_invariants::check_log(reopened.events()).is_empty(), "{durability:?}");
    }
}

/// Runs one turn in which the model calls a tool once that returns
/// `blocks()`: how the turn ended, and its tool results.
async fn one_tool_call(
    blocks: impl Fn() -> Vec<Block> + Send + Sync + 'static,
) -> (TurnEndReason, Vec<(String, bool, Option<String>)>) {
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "tool", &["{}"]),
        ScriptedResponse::reply("Done."),
    ]));
    let blocks = Arc::new(blocks);
    let tool = FnTool::new(
        "tool",
        "Returns what the test gives it.",
        serde_json::json!({"type": "object"}),
        move |_args: String, _ctx: ToolContext| {
            let blocks = Arc::clone(&blocks);
            async move { Ok(blocks()) }
        },
    );
    let tools = palimpsest_core_agent_loop::ToolRegistry::new().with(tool);
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = builder(&provider).tools(tools).create(store, SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("go")).await.expect("the turn goes on");
    (outcome.reason, results(agent.session()))
}

/// A tool whose result holds an image that is not base64 gets an error
/// result, as an oversized one does; the turn goes on (it used to fail
/// with `event-malformed` and be closed by crash repair).
#[tokio::test]
async fn a_tool_image_that_is_not_base64_is_an_error_result() {
    let (reason, results) = one_tool_call(|| {
        vec![Block::Image { media_type: "image/png".into(), data: "data:image/png;base64,QUJD".into() }]
    })
    .await;
    assert_eq!(reason, TurnEndReason::Completed);
    assert_eq!(results.len(), 1);
    assert!(results[0].1, "an error result: {results:?}");
    assert_eq!(results[0].2.as_deref(), Some(codes::TOOL_RESULT_INVALID));
}

/// A tool result nested past the log's limit is an error result too,
/// however deep (a deep one must not overflow the stack); one just inside
/// the limit is logged as it is.
#[tokio::test]
async fn a_tool_result_nested_too_deep_is_an_error_result() {
    fn nested(levels: usize) -> Vec<Block> {
        let mut blocks = vec![Block::text("bottom")];
        for i in 0..levels {
            blocks =
                vec![Block::ToolResult { tool_call_id: format!("n{i}"), is_error: false, content: blocks }];
        }
        blocks
    }
    // The limit is 127: five levels of the event above the tool's blocks,
    // two per nested tool-result, one for the text at the bottom.
    for (levels, logged) in [(60, true), (61, false), (200_000, false)] {
        let (reason, results) = one_tool_call(move || nested(levels)).await;
        assert_eq!(reason, TurnEndReason::Completed, "{levels}");
        let code = if logged { None } else { Some(codes::TOOL_RESULT_INVALID) };
        assert_eq!((results[0].1, results[0].2.as_deref()), (!logged, code), "{levels}");
    }
}

/// `set_settings` makes its event durable at once; when that sync fails
/// the event is logged all the same and the call is `Ok` (it was `Err`,
/// and a `create` with settings then left a session a retry found taken).
#[tokio::test]
async fn settings_whose_sync_fails_are_logged_once_and_the_create_holds() {
    use palimpsest_core_session::payload::Settings;

    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Hi.")]));
    let store = Arc::new(FailingStore {
        inner: MemoryStore::default(),
        ok: AtomicUsize::new(usize::MAX),
        failing_syncs: AtomicUsize::new(usize::MAX),
    });
    let dyn_store: Arc<dyn SessionStore> = store.clone();
    let settings = Settings { system_prompt: Some("Be brief.".into()), ..Settings::default() };
    let mut agent =
        builder(&provider).settings(settings.clone()).create(dyn_store.clone(), SID).expect("created");
    let stored = dyn_store.load(SID).expect("load").events;
    assert_eq!(types(agent.session()), ["session/settings"]);
    assert_eq!(agent.session().events(), &stored[..]);
    let other = Settings { system_prompt: Some("Be thorough.".into()), ..Settings::default() };
    let seq = agent.set_settings(other).expect("logged though not synced");
    assert_eq!(seq, Some(1));
    store.failing_syncs.store(0, Ordering::SeqCst);
    let outcome = agent.run_turn(TurnInput::text("hi")).await.expect("turn");
    assert!(outcome.durable);
    let stored = dyn_store.load(SID).expect("load").events;
    assert_eq!(agent.session().events(), &stored[..]);
    let settings_events = stored.iter().filter(|e| *e.event_type() == EventType::SessionSettings).count();
    assert_eq!(settings_events, 2);
}

#[tokio::test]
async fn a_turn_cancelled_before_it_starts_has_no_step() {
    let token = CancellationToken::new();
    token.cancel();
    let provider = Arc::new(ScriptedProvider::new([]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("never mind").with_cancel(token)).await.expect("turn");
    assert_eq!((outcome.reason, outcome.steps), (TurnEndReason::Aborted { reason: "cancelled".into() }, 0));
    assert_eq!(types(&reload(&backend.store())), ["turn/start", "user/message", "turn/end"]);
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn cancel_while_waiting_for_the_first_chunk() {
    let token = CancellationToken::new();
    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new().hang()]));
    let backend = Backend::new(Kind::Memory);
    let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
    // Runs once the turn waits on the silent stream (the test runtime has one thread).
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move { token.cancel() })
    };
    let outcome = agent.run_turn(TurnInput::text("hello").with_cancel(token)).await.expect("turn");
    canceller.await.expect("the canceller ran");
    assert_eq!(outcome.reason, TurnEndReason::Aborted { reason: "cancelled".into() });
    // Nothing was streamed: no assistant/message (`[]` would claim a known empty stream).
    assert_eq!(
        types(&reload(&backend.store())),
        ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
    );
    assert_eq!(provider.requests().len(), 1);
}

/// Starts a compaction, then waits forever (a summarizer that never answers).
struct Stuck(CancellationToken);

impl palimpsest_core_agent_loop::Plugin for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut palimpsest_core_agent_loop::PluginContext<'_>,
    ) -> palimpsest_core_agent_loop::BoxFuture<'a, Result<(), palimpsest_core_agent_loop::PluginError>> {
        Box::pin(async move {
            ctx.append_event("compaction/start", serde_json::json!({}))?;
            self.0.cancel();
            std::future::pending::<()>().await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn cancel_during_a_plugin_hook_leaves_its_appends_and_a_valid_log() {
    let token = CancellationToken::new();
    let provider = Arc::new(ScriptedProvider::new([]));
    let backend = Backend::new(Kind::Memory);
    let mut agent =
        builder(&provider).plugin(Stuck(token.clone())).create(backend.store(), SID).expect("create");
    let outcome = agent.run_turn(TurnInput::text("compact").with_cancel(token)).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Aborted { reason: "cancelled".into() });
    assert_eq!(
        types(&reload(&backend.store())),
        ["turn/start", "user/message", "step/start", "compaction/start", "step/end", "turn/end"]
    );
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn an_unknown_tool_with_none_offered_says_so_not_an_empty_list() {
    // "Available tools: ." read as a broken sentence (a probe: a resumed
    // `run` without `--tools`, its model calling the tools it had).
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "write_file", &["{}"]),
        ScriptedResponse::reply("None, then."),
    ]));
    let store = Backend::new(Kind::Memory).store();
    let mut agent = builder(&provider)
        .tools(palimpsest_core_agent_loop::ToolRegistry::new())
        .create(store, SID)
        .expect("create");
    agent.run_turn(TurnInput::text("Write.")).await.expect("turn");
    let text = agent
        .session()
        .events()
        .iter()
        .filter_map(|e| e.data_as::<ToolResult>().ok().filter(|_| *e.event_type() == EventType::ToolResult))
        .find_map(|r| match &r.message.content[..] {
            [Block::ToolResult { content, .. }] => Some(format!("{content:?}")),
            _ => None,
        })
        .expect("a tool result");
    assert!(text.contains("There is no tool named \\\"write_file\\\". No tools are offered."), "{text}");
}
