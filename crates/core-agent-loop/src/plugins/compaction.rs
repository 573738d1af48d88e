//! Compaction: when the next request would exceed a token budget, the
//! oldest surface entries are replaced by one summary message.
//!
//! The events a compaction writes, in order:
//!
//! 1. `compaction/start` (off the surface): why, the estimate, the range,
//!    and `supersedes` when an earlier compaction never finished;
//! 2. a `user/message` with source `{"kind":"plugin","plugin":"compaction"}`
//!    and `surfaceOp: replace` over the planned range, citing its
//!    `compaction/start` and every shadowed seq;
//! 3. `compaction/end` naming the summary's seq.
//!
//! A crash between 1 and 2 leaves a valid log (a plugin event with no end).
//! The next compaction recognises the unmatched start, says so in its own
//! `compaction/start`, and plans afresh from the surface as it is: nothing
//! is blocked and no summary is written twice. A summarizer that fails
//! ends the attempt with a `compaction/end` carrying the error; the turn
//! goes on uncompacted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use palimpsest_core_session::payload::{Block, Message, Role, Source, UserMessage};
use palimpsest_core_session::rewrite::{plan_compaction, text_chars};
use palimpsest_core_session::{EventType, Session};
use serde_json::json;

use crate::plugin::{Plugin, PluginContext, PluginError};
use crate::provider::{complete, BoxFuture, FinishReason, ModelRequest, Provider};

/// Type of the event that opens a compaction.
pub const COMPACTION_START: &str = "compaction/start";
/// Type of the event that closes a compaction.
pub const COMPACTION_END: &str = "compaction/end";
/// Type of the event written, once per turn, when a request over the
/// budget goes out uncompacted (nothing to compact, or backing off).
pub const COMPACTION_OVER_BUDGET: &str = "compaction/over-budget";
const PLUGIN: &str = "compaction";

/// The summarizer's model failed.
pub const SUMMARY_FAILED: &str = "SUMMARY_FAILED";
/// The summarizer's model answered with no text.
pub const SUMMARY_EMPTY: &str = "SUMMARY_EMPTY";
/// The summary ended with the output-token limit (`finish_reason: length`).
pub const SUMMARY_TRUNCATED: &str = "SUMMARY_TRUNCATED";
/// The summary is not smaller than what it would replace, or alone takes
/// more than the allowed share of the budget.
pub const SUMMARY_TOO_LARGE: &str = "SUMMARY_TOO_LARGE";

/// The default largest share of the budget one summary may take, in percent.
pub const DEFAULT_MAX_SUMMARY_PERCENT: u64 = 50;
/// The longest back-off after failed compactions, in turns.
const MAX_BACKOFF_TURNS: u64 = 32;

/// Estimates the size of a request in tokens.
pub trait TokenEstimator: Send + Sync {
    /// The estimated prompt size of `request`.
    fn estimate(&self, request: &ModelRequest) -> u64;
}

/// The default estimator: characters of text divided by four.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharsOver4;

impl TokenEstimator for CharsOver4 {
    fn estimate(&self, request: &ModelRequest) -> u64 {
        let messages: usize = request.messages.iter().map(|m| text_chars(&m.content)).sum();
        let system = request.system.as_ref().map_or(0, |s| s.chars().count());
        let tools: usize = request
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.chars().count() + t.parameters.to_string().len())
            .sum();
        ((messages + system + tools) / 4) as u64
    }
}

/// Writes the summary of the messages a compaction shadows.
pub trait Summarizer: Send + Sync {
    /// Summarizes `messages` (in surface order). `provider` is the session's
    /// own model, for summarizers that ask it.
    fn summarize<'a>(
        &'a self,
        provider: &'a dyn Provider,
        messages: Vec<Message>,
    ) -> BoxFuture<'a, Result<String, PluginError>>;
}

/// The default summarizer: asks the session's own provider, with a
/// summarization prompt, for a summary of the shadowed messages.
#[derive(Debug, Clone)]
pub struct ProviderSummarizer {
    /// The system prompt of the summarization request.
    pub prompt: String,
}

impl Default for ProviderSummarizer {
    fn default() -> ProviderSummarizer {
        ProviderSummarizer {
            prompt: "Summarize the conversation so far for your own future reference. Keep every fact, \
                     decision, file name and open task the rest of the work needs; drop pleasantries. \
                     Answer with the summary only."
                .into(),
        }
    }
}

impl Summarizer for ProviderSummarizer {
    fn summarize<'a>(
        &'a self,
        provider: &'a dyn Provider,
        mut messages: Vec<Message>,
    ) -> BoxFuture<'a, Result<String, PluginError>> {
        Box::pin(async move {
            messages.push(Message {
                id: "compaction-request".into(),
                role: Role::User,
                content: vec![Block::text("Summarize the conversation above.")],
                source: Source::Plugin { plugin: PLUGIN.into() },
            });
            let request = ModelRequest::new(messages).with_system(self.prompt.clone());
            let completion = complete(provider, request).await.map_err(|e| {
                PluginError::failed(SUMMARY_FAILED, format!("the summarizer's model failed: {e}"))
            })?;
            let text = completion.text();
            if completion.finish == Some(FinishReason::MaxTokens) {
                return Err(PluginError::failed(
                    SUMMARY_TRUNCATED,
                    format!(
                        "the summary was cut off by the output-token limit after {} characters; \
                         a cut-off summary is not a summary",
                        text.chars().count()
                    ),
                ));
            }
            if text.trim().is_empty() {
                return Err(PluginError::failed(
                    SUMMARY_EMPTY,
                    "the summarizer's model answered with no text",
                ));
            }
            Ok(text)
        })
    }
}

/// A deterministic summarizer (tests, the demo): a fixed line naming how
/// many messages were summarized, followed by the first words of each.
#[derive(Debug, Clone, Copy, Default)]
pub struct FixedSummarizer;

impl Summarizer for FixedSummarizer {
    fn summarize<'a>(
        &'a self,
        _provider: &'a dyn Provider,
        messages: Vec<Message>,
    ) -> BoxFuture<'a, Result<String, PluginError>> {
        let mut text = format!("Summary of {} earlier messages:", messages.len());
        for m in &messages {
            let first: String = m
                .content
                .iter()
                .find_map(|b| match b {
                    Block::Text { text } => {
                        Some(text.split_whitespace().take(8).collect::<Vec<_>>().join(" "))
                    }
                    Block::ToolCall { name, .. } => Some(format!("[called {name}]")),
                    Block::ToolResult { .. } => Some("[tool result]".into()),
                    _ => None,
                })
                .unwrap_or_default();
            let who = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            text.push_str(&format!("\n- {who}: {first}"));
        }
        Box::pin(std::future::ready(Ok(text)))
    }
}

/// When and how much to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Compact when the estimated request exceeds this many tokens.
    pub budget_tokens: u64,
    /// Surface entries at the tail that are always kept verbatim.
    pub keep_recent: usize,
}

impl Default for CompactionConfig {
    fn default() -> CompactionConfig {
        CompactionConfig { budget_tokens: 100_000, keep_recent: 8 }
    }
}

/// Asks a [`Compaction`] to compact at its next run, whatever the
/// estimate and any back-off: before the next request, or at once with
/// [`AgentLoop::run_request_hooks`](crate::AgentLoop::run_request_hooks).
/// Its `compaction/start` then says `"reason": "requested"`. Cheap to
/// clone; every clone asks the same plugin.
#[derive(Debug, Clone, Default)]
pub struct CompactionTrigger(Arc<AtomicBool>);

impl CompactionTrigger {
    /// Asks for a compaction at the plugin's next run.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a request is pending.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Withdraws a pending request; whether there was one.
    pub fn withdraw(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

/// The compaction plugin. See the module docs for the events it writes.
pub struct Compaction {
    config: CompactionConfig,
    trigger: CompactionTrigger,
    estimator: Box<dyn TokenEstimator>,
    summarizer: Box<dyn Summarizer>,
    max_summary_percent: u64,
    /// Whether summaries are held to the size limits.
    size_limits: bool,
    /// Failed attempts since the last success.
    failures: u32,
    /// No attempt before this turn (back-off after a failure).
    retry_turn: u64,
    /// The last turn an over-budget request was reported in.
    reported_turn: u64,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Compaction {
    /// Compaction with the chars/4 estimator and the provider summarizer.
    pub fn new(config: CompactionConfig) -> Compaction {
        Compaction {
            config,
            trigger: CompactionTrigger::default(),
            estimator: Box::new(CharsOver4),
            summarizer: Box::new(ProviderSummarizer::default()),
            max_summary_percent: DEFAULT_MAX_SUMMARY_PERCENT,
            size_limits: true,
            failures: 0,
            retry_turn: 0,
            reported_turn: 0,
        }
    }

    /// Refuses a summary whose estimate alone exceeds `percent` of the
    /// budget (default [`DEFAULT_MAX_SUMMARY_PERCENT`]).
    pub fn with_max_summary_percent(mut self, percent: u64) -> Compaction {
        self.max_summary_percent = percent;
        self
    }

    /// Whether a summary must be smaller than what it replaces and within
    /// the budget share (default `true`). Turn it off only for stand-in
    /// summarizers, like [`FixedSummarizer`] over a toy history, whose
    /// summaries are not meant to compress.
    pub fn with_size_limits(mut self, on: bool) -> Compaction {
        self.size_limits = on;
        self
    }

    /// The handle that asks this plugin for a compaction.
    pub fn trigger(&self) -> CompactionTrigger {
        self.trigger.clone()
    }

    /// Uses another estimator.
    pub fn with_estimator(mut self, estimator: impl TokenEstimator + 'static) -> Compaction {
        self.estimator = Box::new(estimator);
        self
    }

    /// Uses another summarizer.
    pub fn with_summarizer(mut self, summarizer: impl Summarizer + 'static) -> Compaction {
        self.summarizer = Box::new(summarizer);
        self
    }

    async fn run(&mut self, ctx: &mut PluginContext<'_>) -> Result<(), PluginError> {
        let requested = self.trigger.withdraw();
        let estimate = self.estimator.estimate(&ctx.request());
        let budget = self.config.budget_tokens;
        if !requested && estimate <= budget {
            return Ok(());
        }
        let turn = ctx.position().turn;
        if !requested && turn < self.retry_turn {
            return self.report_over_budget(ctx, estimate, "backing-off");
        }
        let Some(plan) = plan_compaction(ctx.session(), self.config.keep_recent) else {
            if requested && estimate <= budget {
                tracing::info!(estimate, "a compaction was asked for, but there is nothing to compact");
                return Ok(());
            }
            return self.report_over_budget(ctx, estimate, "nothing-to-compact");
        };
        let mut start_data = json!({
            "reason": if requested { "requested" } else { "budget" },
            "estimatedTokens": estimate,
            "budgetTokens": budget,
            "range": {"start": plan.start, "end": plan.end, "entries": plan.shadowed.len()},
        });
        if let Some(unfinished) = unfinished_compaction(ctx.session()) {
            tracing::warn!(unfinished, "an earlier compaction never finished; starting afresh");
            start_data["supersedes"] = json!(unfinished);
        }
        let start = ctx.append_event(COMPACTION_START, start_data)?;
        let messages: Vec<Message> = ctx
            .session()
            .derive_messages()
            .into_iter()
            .filter(|m| plan.shadowed.contains(&m.seq))
            .map(|m| m.message)
            .collect();
        let replaced_tokens = self.estimator.estimate(&ModelRequest::new(messages.clone()));
        let summary = match self.summarizer.summarize(ctx.provider(), messages).await {
            Ok(text) => self.check_summary(ctx, text, replaced_tokens),
            Err(e) => Err(e),
        };
        let summary = match summary {
            Ok(message) => message,
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                let backoff = (1u64 << self.failures.saturating_sub(1).min(5)).min(MAX_BACKOFF_TURNS);
                self.retry_turn = turn.saturating_add(backoff);
                tracing::warn!(
                    code = e.code(),
                    error = %e.message(),
                    retry_turn = self.retry_turn,
                    "compaction abandoned; backing off"
                );
                let end = json!({
                    "startSeq": start,
                    "error": {"code": e.code(), "message": e.message()},
                    "retryTurn": self.retry_turn,
                });
                ctx.append_event(COMPACTION_END, end)?;
                return Ok(());
            }
        };
        let seq = ctx.append_message(UserMessage { turn: None, message: summary }, plan.intent(&[start]))?;
        ctx.append_event(COMPACTION_END, json!({"startSeq": start, "summarySeq": seq}))?;
        (self.failures, self.retry_turn) = (0, 0);
        tracing::info!(summary = seq, shadowed = plan.shadowed.len(), estimate, "compacted the history");
        Ok(())
    }

    /// The summary message, or why it is refused: not smaller than what it
    /// replaces, or alone over the allowed share of the budget.
    fn check_summary(
        &self,
        ctx: &PluginContext<'_>,
        text: String,
        replaced_tokens: u64,
    ) -> Result<Message, PluginError> {
        let message = Message {
            id: ctx.new_message_id(),
            role: Role::User,
            content: vec![Block::text(text)],
            source: Source::Plugin { plugin: PLUGIN.into() },
        };
        let tokens = self.estimator.estimate(&ModelRequest::new(vec![message.clone()]));
        let share = self.config.budget_tokens.saturating_mul(self.max_summary_percent) / 100;
        if self.size_limits && (tokens >= replaced_tokens || tokens > share) {
            return Err(PluginError::failed(
                SUMMARY_TOO_LARGE,
                format!(
                    "the summary is about {tokens} tokens, for {replaced_tokens} tokens of history; a summary \
                     must be smaller than what it replaces and at most {}% of the {}-token budget ({share})",
                    self.max_summary_percent, self.config.budget_tokens
                ),
            ));
        }
        Ok(message)
    }

    /// A request over the budget goes out uncompacted: says so once per
    /// turn, as a `compaction/over-budget` event and a warning.
    fn report_over_budget(
        &mut self,
        ctx: &mut PluginContext<'_>,
        estimate: u64,
        reason: &str,
    ) -> Result<(), PluginError> {
        let turn = ctx.position().turn;
        if self.reported_turn == turn {
            return Ok(());
        }
        self.reported_turn = turn;
        let budget = self.config.budget_tokens;
        tracing::warn!(
            estimate,
            budget,
            reason,
            "the request is over the token budget and goes out uncompacted"
        );
        let mut data = json!({"reason": reason, "estimatedTokens": estimate, "budgetTokens": budget});
        if reason == "backing-off" {
            data["retryTurn"] = json!(self.retry_turn);
        }
        ctx.append_event(COMPACTION_OVER_BUDGET, data)?;
        Ok(())
    }
}

impl Plugin for Compaction {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(self.run(ctx))
    }
}

/// The seq of the last `compaction/start` that no `compaction/end` answers,
/// if the log has one. Scans back only to the last compaction event.
fn unfinished_compaction(session: &Session) -> Option<u64> {
    let is = |e: &palimpsest_core_session::Event, t: &str| matches!(e.event_type(), EventType::Plugin(p) if &**p == t);
    session.resident().iter().rev().find_map(|e| {
        if is(e, COMPACTION_END) {
            Some(None)
        } else if is(e, COMPACTION_START) {
            Some(Some(e.seq()))
        } else {
            None
        }
    })?
}
