//! Plugins rewrite history only by appends that pass the surface rules (and
//! the invariants in dev mode): a compaction and a prune as issue 7 will
//! write them, and every way a plugin can fail.

use std::sync::{Arc, Mutex};

use palimpsest_core_agent_loop::{
    codes, complete, AgentConfig, BoxFuture, DevMode, ModelRequest, Plugin, PluginContext, PluginError,
    ScriptedProvider, ScriptedResponse, StepSummary, TurnInput,
};
use palimpsest_core_session::payload::{
    Block, ErrorInfo, Message, Role, Source, ToolResult, TurnEndReason, UserMessage,
};
use palimpsest_core_session::{Event, EventType, Session, SurfaceIntent};

use crate::common::*;

/// Replaces every surface entry before the current turn with a summary the
/// session's own provider writes, bracketed by `compaction/start`/`end`.
struct Compact;

impl Compact {
    async fn run(ctx: &mut PluginContext<'_>) -> Result<(), PluginError> {
        // Everything on the surface before this turn's input, by position:
        // a pruned result's replacement is newer than the turn's start but
        // stands before it.
        let input = ctx.position().turn_start_seq + 1;
        let surface = ctx.session().surface();
        let old: Vec<u64> = surface.iter().copied().take_while(|&s| s != input).collect();
        let (Some(&first), Some(&last)) = (old.first(), old.last()) else { return Ok(()) };
        let start = ctx.append_event("compaction/start", serde_json::json!({ "shadows": old.len() }))?;
        let history = ctx.request().messages.into_iter().filter(|m| m.role == Role::Assistant).collect();
        let request = ModelRequest::new(history).with_system("Summarize the conversation.");
        let summary = complete(ctx.provider(), request)
            .await
            .map_err(|e| PluginError::failed("SUMMARIZER_FAILED", e.to_string()))?
            .text();
        let message = Message {
            id: ctx.new_message_id(),
            role: Role::User,
            content: vec![Block::text(summary)],
            source: Source::Plugin { plugin: "compaction".into() },
        };
        let mut sources = old.clone();
        sources.push(start);
        let summary_seq = ctx.append_message(
            UserMessage { turn: None, message },
            SurfaceIntent::replace(first, last, sources),
        )?;
        ctx.append_event("compaction/end", serde_json::json!({ "start": start, "summary": summary_seq }))?;
        Ok(())
    }
}

impl Plugin for Compact {
    fn name(&self) -> &str {
        "compaction"
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let p = ctx.position();
            if p.turn == 2 && p.step == 1 {
                Compact::run(ctx).await?;
            }
            Ok(())
        })
    }
}

/// Replaces every tool result of an earlier turn with a stub (a
/// single-node `tool/result` replace of the same call).
struct Prune;

impl Plugin for Prune {
    fn name(&self) -> &str {
        "prune"
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let turn_start = ctx.position().turn_start_seq;
            let old_results: Vec<(u64, ToolResult)> = ctx
                .session()
                .surface()
                .iter()
                .filter(|&&s| s < turn_start)
                .filter_map(|&s| ctx.session().event(s).map(|e| (s, e)))
                .filter(|(_, e)| {
                    *e.event_type() == EventType::ToolResult
                        && e.surface_op().is_some_and(|op| op == palimpsest_core_session::SurfaceOp::Append)
                })
                .filter_map(|(s, e)| e.data_as::<ToolResult>().ok().map(|r| (s, r)))
                .collect();
            for (seq, mut result) in old_results {
                let call_id = result.call_id().to_owned();
                result.message.id = ctx.new_message_id();
                result.message.content = vec![Block::ToolResult {
                    tool_call_id: call_id,
                    is_error: false,
                    content: vec![Block::text(format!("[pruned: the original result is seq {seq}]"))],
                }];
                ctx.append_message(result, SurfaceIntent::replace(seq, seq, vec![seq]))?;
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn compaction_and_pruning_through_the_plugin_api() {
    check("plugin_rewrites", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"big.log\"}"]),
            ScriptedResponse::reply("big.log is large."),
            // Turn 2: the summarizer's request, then the turn's own.
            ScriptedResponse::reply("The user had big.log read."),
            ScriptedResponse::reply("Yes, it was big.log."),
        ]));
        let seen = Arc::new(Mutex::new(0usize));
        let counter = {
            let seen = seen.clone();
            Watch(move |_e: &Event, _s: &Session| *lock(&seen) += 1)
        };
        let mut agent = builder(&provider)
            .plugin(Prune)
            .plugin(Compact)
            .plugin(counter)
            .create(backend.store(), SID)
            .expect("create");
        agent.run_turn(TurnInput::text("Read big.log")).await.expect("turn 1");
        let outcome = agent.run_turn(TurnInput::text("Which file was it?")).await.expect("turn 2");
        assert_eq!(outcome.reason, TurnEndReason::Completed);

        let requests = provider.requests();
        assert_eq!(requests[2].system.as_deref(), Some("Summarize the conversation."));
        // The turn's request: the summary, then the turn's input.
        let texts: Vec<&Block> = requests[3].messages.iter().flat_map(|m| &m.content).collect();
        assert_eq!(texts, [&Block::text("The user had big.log read."), &Block::text("Which file was it?")]);
        // on_event saw every committed event, plugin appends included.
        assert_eq!(*lock(&seen), agent.session().events().len());
    })
    .await;
}

/// Fails in a different way on each turn.
struct Misbehave;

impl Plugin for Misbehave {
    fn name(&self) -> &str {
        "misbehave"
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            let surface = ctx.session().surface().to_vec();
            match ctx.position().turn {
                // An appended tool/result belongs to the loop.
                2 => {
                    let message = Message {
                        id: ctx.new_message_id(),
                        role: Role::User,
                        content: vec![Block::ToolResult {
                            tool_call_id: "x".into(),
                            is_error: false,
                            content: vec![],
                        }],
                        source: Source::Tool { call_id: "x".into() },
                    };
                    let result = ToolResult { turn: 2, step: 1, message, error: None };
                    ctx.append_message(result, SurfaceIntent::append())?;
                }
                // A replace of a seq that is not on the surface.
                3 => {
                    ctx.append_message(user(ctx, "s"), SurfaceIntent::replace(9_999, 9_999, vec![0]))?;
                }
                // Shadows the call (the assistant/message at surface[1]) but
                // not its result: the surface rules accept it, the
                // invariants (dev mode) refuse it.
                4 => {
                    ctx.append_message(
                        user(ctx, "split"),
                        SurfaceIntent::replace(surface[0], surface[1], surface[..2].to_vec()),
                    )?;
                }
                // The plugin's own failure.
                5 => return Err(PluginError::failed("OUT_OF_IDEAS", "nothing to do")),
                _ => {}
            }
            Ok(())
        })
    }

    fn after_step<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
        step: &'a StepSummary,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            // A plugin type that is a core type is refused.
            if step.position.turn == 6 {
                ctx.append_event("turn/end", serde_json::json!({}))?;
            }
            Ok(())
        })
    }
}

fn user(ctx: &PluginContext<'_>, text: &str) -> UserMessage {
    let message = Message {
        id: ctx.new_message_id(),
        role: Role::User,
        content: vec![Block::text(text)],
        source: Source::Plugin { plugin: "misbehave".into() },
    };
    UserMessage { turn: None, message }
}

fn plugin_failed(message: &str) -> TurnEndReason {
    TurnEndReason::Error { error: ErrorInfo { message: message.into(), code: codes::PLUGIN_FAILED.into() } }
}

#[tokio::test]
async fn plugin_failures_end_the_turn_and_change_nothing() {
    check("plugin_failures", async |backend: &Backend| {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a\"}"]),
            ScriptedResponse::reply("Read it."),
            ScriptedResponse::reply("Turn six."),
            ScriptedResponse::reply("Turn seven."),
        ]));
        let mut agent = builder(&provider).plugin(Misbehave).create(backend.store(), SID).expect("create");
        let reasons: Vec<TurnEndReason> = {
            let mut v = Vec::new();
            for turn in 1..=7 {
                let outcome = agent.run_turn(TurnInput::text(format!("turn {turn}"))).await.expect("turn");
                v.push(outcome.reason);
            }
            v
        };
        assert_eq!(
            reasons,
            [
                TurnEndReason::Completed,
                plugin_failed(
                    "plugin \"misbehave\" failed: plugin-append-forbidden: plugin \"misbehave\" may not append \
                     a tool/result with surfaceOp append (only a replace)"
                ),
                plugin_failed(
                    "plugin \"misbehave\" failed: session \"s1\": replace-start-missing at seq 22: start 9999 is not \
                     on the surface"
                ),
                plugin_failed(
                    "plugin \"misbehave\" failed: session \"s1\": tool-exchange-split at seq 27: the replace takes \
                     assistant/message [4] requesting call \"call-1\" off the surface but leaves its tool/result [6] \
                     on it"
                ),
                plugin_failed("plugin \"misbehave\" failed: OUT_OF_IDEAS: nothing to do"),
                plugin_failed(
                    "plugin \"misbehave\" failed: session \"s1\": event-malformed at seq 41: `turn/end` is a core \
                     type, not a plugin type"
                ),
                TurnEndReason::Completed,
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn without_dev_mode_only_the_surface_rules_apply() {
    struct Split;
    impl Plugin for Split {
        fn name(&self) -> &str {
            "split"
        }
        fn before_request<'a>(
            &'a mut self,
            ctx: &'a mut PluginContext<'_>,
        ) -> BoxFuture<'a, Result<(), PluginError>> {
            Box::pin(async move {
                if ctx.position().turn == 2 {
                    let s = ctx.session().surface().to_vec();
                    ctx.append_message(
                        user(ctx, "split"),
                        SurfaceIntent::replace(s[0], s[1], s[..2].to_vec()),
                    )?;
                }
                Ok(())
            })
        }
    }
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a\"}"]),
        ScriptedResponse::reply("Read it."),
        ScriptedResponse::reply("Split."),
    ]));
    let backend = Backend::new(Kind::Memory);
    let config = AgentConfig::default().with_dev_mode(DevMode::Off);
    let mut agent =
        builder(&provider).config(config).plugin(Split).create(backend.store(), SID).expect("create");
    agent.run_turn(TurnInput::text("one")).await.expect("turn 1");
    let outcome = agent.run_turn(TurnInput::text("two")).await.expect("turn 2");
    // Accepted: the surface rules do not see tool exchanges; the request
    // now has a result without its call, which dev mode would have stopped.
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    assert_eq!(provider.requests()[2].unpaired_tool_calls(), ["call-1"]);
    let violations = palimpsest_invariants::check_log(agent.session().events());
    assert_eq!(violations.iter().map(|v| v.code).collect::<Vec<_>>(), ["tool-exchange-split"]);
}

#[tokio::test]
async fn dev_mode_refuses_to_open_a_log_that_breaks_an_invariant() {
    use palimpsest_core_session::payload::{StepStart, TurnEnd, TurnStart};
    use palimpsest_core_session::SessionHeader;
    use palimpsest_persistence::{MemoryStore, SessionStore};

    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    store.create(&SessionHeader::new(SID, 0)).expect("create");
    let events = vec![
        Event::log(0, 1, TurnStart { turn: 1 }).expect("event"),
        Event::log(1, 2, StepStart { turn: 1, step: 1 }).expect("event"),
        Event::log(2, 3, TurnEnd { turn: 1, reason: TurnEndReason::Completed }).expect("event"),
    ];
    store.append(SID, &events).expect("append");
    let provider = Arc::new(ScriptedProvider::new([]));
    let err = builder(&provider).open(store.clone(), SID).expect_err("dev mode refuses the log");
    assert_eq!(err.code(), "turn-end-step-open");
    let config = AgentConfig::default().with_dev_mode(DevMode::Off);
    let opened = builder(&provider).config(config).open(store, SID);
    assert!(opened.is_ok_and(|(agent, report)| report.repaired.is_none() && agent.last_turn() == 1));
}
