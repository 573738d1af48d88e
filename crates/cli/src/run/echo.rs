//! A loop plugin that echoes committed events to `run`'s driver while the
//! turn runs: text deltas for stdout, short progress lines for stderr.
//!
//! The plugin only reads events the loop has already appended, so what a
//! person sees is exactly what the log holds, in the same order. It sends
//! over a channel because `on_event` runs inline on the loop's task and
//! must stay cheap; the driver prints.

use crate::output::{first_text, one_line, printable_line, ERROR_CHARS};
use std::collections::HashMap;

use palimpsest_core_agent_loop::plugins::{COMPACTION_END, COMPACTION_OVER_BUDGET, COMPACTION_START};
use palimpsest_core_agent_loop::Plugin;
use palimpsest_core_session::payload::{AssistantChunk, StreamChunk, ToolCall, ToolResult, UserMessage};
use palimpsest_core_session::{Event, EventType, Session, SurfaceOp};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

/// One thing to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Echo {
    /// A piece of the assistant's answer, for stdout. `step` tells pieces of
    /// different assistant messages apart (`(turn, step)`).
    Text {
        /// The turn and step the piece belongs to.
        step: (u64, u64),
        /// The text.
        text: String,
    },
    /// A progress line for stderr (tool calls and results, rewrites).
    Line(String),
}

/// Sends an [`Echo`] per interesting event.
pub(crate) struct EchoPlugin {
    tx: UnboundedSender<Echo>,
    /// Tool names by call id, so a result can name its tool.
    names: HashMap<String, String>,
    /// The step whose reasoning was already announced.
    thinking: Option<(u64, u64)>,
}

impl EchoPlugin {
    pub(crate) fn new(tx: UnboundedSender<Echo>) -> EchoPlugin {
        EchoPlugin { tx, names: HashMap::new(), thinking: None }
    }

    fn echo(&mut self, event: &Event) -> Option<Echo> {
        let seq = event.seq();
        let line = match event.event_type() {
            EventType::AssistantChunk => {
                let chunk = event.data_as::<AssistantChunk>().ok()?;
                let step = (chunk.turn, chunk.step);
                return match chunk.chunk {
                    StreamChunk::TextDelta { text, .. } if !text.is_empty() => {
                        Some(Echo::Text { step, text })
                    }
                    StreamChunk::ReasoningDelta { .. } if self.thinking != Some(step) => {
                        self.thinking = Some(step);
                        Some(Echo::Line("  … thinking".to_owned()))
                    }
                    _ => None,
                };
            }
            EventType::ToolCall => {
                let call = event.data_as::<ToolCall>().ok()?;
                // A tool name is the model's text: shown, never obeyed.
                self.names.insert(call.call_id.clone(), printable_line(&call.name));
                format!("  → {} {}", printable_line(&call.name), one_line(&call.arguments, 80))
            }
            EventType::ToolResult => {
                let result = event.data_as::<ToolResult>().ok()?;
                let id = result.call_id();
                let name = self.names.get(id).cloned().unwrap_or_else(|| printable_line(id));
                let text = first_text(&result.message.content);
                match (event.surface_op(), &result.error) {
                    (Some(SurfaceOp::Replace { start, .. }), _) => {
                        format!("  ✂ pruned the old result of {name} (seq {start}, now a stub at seq {seq})")
                    }
                    (_, Some(error)) => {
                        format!(
                            "  ✗ {name}: {} [{}]",
                            one_line(&text, ERROR_CHARS),
                            printable_line(&error.code)
                        )
                    }
                    (_, None) => {
                        format!("  ← {name}: {} chars: {}", text.chars().count(), one_line(&text, 60))
                    }
                }
            }
            EventType::UserMessage if matches!(event.surface_op(), Some(SurfaceOp::Replace { .. })) => {
                event.data_as::<UserMessage>().ok()?;
                // The summary cites its compaction/start and what it shadows.
                let shadowed = event.source_event_seqs().map_or(0, |s| s.len().saturating_sub(1));
                format!("  ⧉ compacted: a summary (seq {seq}) now stands for {shadowed} earlier entries")
            }
            EventType::Plugin(name) if &**name == COMPACTION_START => {
                let data = event.data_as::<Value>().unwrap_or_default();
                let estimate = data.get("estimatedTokens").and_then(Value::as_u64).unwrap_or(0);
                let why = match data.get("reason").and_then(Value::as_str) {
                    Some("requested") => "as asked",
                    _ => "over the budget",
                };
                format!("  ⧉ compacting the history (about {estimate} tokens, {why})…")
            }
            EventType::Plugin(name) if &**name == COMPACTION_END => {
                let data = event.data_as::<Value>().ok()?;
                let error = data.get("error")?;
                let message = error.get("message").and_then(Value::as_str)?;
                let code = error.get("code").and_then(Value::as_str).unwrap_or_default();
                format!(
                    "  ⧉ compaction abandoned, the history stays as it is [{code}]: {}",
                    one_line(message, ERROR_CHARS)
                )
            }
            EventType::Plugin(name) if &**name == COMPACTION_OVER_BUDGET => {
                let data = event.data_as::<Value>().ok()?;
                let number = |key: &str| data.get(key).and_then(Value::as_u64).unwrap_or(0);
                let why = match data.get("reason").and_then(Value::as_str) {
                    Some("backing-off") => "compaction is backing off after a failure",
                    _ => "nothing can be compacted",
                };
                format!(
                    "  ⚠ this request is over the context budget (about {} of {} tokens): {why}",
                    number("estimatedTokens"),
                    number("budgetTokens")
                )
            }
            _ => return None,
        };
        Some(Echo::Line(line))
    }
}

impl Plugin for EchoPlugin {
    fn name(&self) -> &str {
        "run-echo"
    }

    fn on_event(&mut self, event: &Event, _session: &Session) {
        if let Some(echo) = self.echo(event) {
            // The driver may be gone (the process is exiting): nothing to tell.
            let _ = self.tx.send(echo);
        }
    }
}
