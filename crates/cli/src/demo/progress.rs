//! A loop plugin that turns committed events into progress lines, sent to
//! the demo's driver (which prints them while the turn runs).

use crate::output::{first_text, one_line};
use palimpsest_core_agent_loop::Plugin;
use palimpsest_core_session::payload::{AssistantMessage, Block, ToolCall, ToolResult, UserMessage};
use palimpsest_core_session::{Event, EventType, Session, SurfaceOp};
use tokio::sync::mpsc::UnboundedSender;

/// Sends one line per interesting event.
pub(crate) struct Progress(pub(crate) UnboundedSender<String>);

impl Plugin for Progress {
    fn name(&self) -> &str {
        "demo-progress"
    }

    fn on_event(&mut self, event: &Event, session: &Session) {
        let seq = event.seq();
        let line = match event.event_type() {
            EventType::UserMessage => match event.data_as::<UserMessage>() {
                Ok(m) if matches!(event.surface_op(), Some(SurfaceOp::Replace { .. })) => {
                    let shadowed = event.source_event_seqs().map_or(0, |s| s.len().saturating_sub(1));
                    let _ = m;
                    Some(format!("    ⧉ compaction: a summary (seq {seq}) now stands for {shadowed} earlier surface entries"))
                }
                Ok(m) => Some(format!("  you  ▸ {}", one_line(&first_text(&m.message.content), 90))),
                Err(_) => None,
            },
            EventType::ToolCall => event
                .data_as::<ToolCall>()
                .ok()
                .map(|c| format!("    → {}({})", c.name, one_line(&c.arguments, 60))),
            EventType::ToolResult => event.data_as::<ToolResult>().ok().map(|r| {
                let text = first_text(&r.message.content);
                match event.surface_op() {
                    Some(SurfaceOp::Replace { start, .. }) => {
                        format!(
                            "    ✂ pruned the old result of {} (seq {start} → stub at seq {seq})",
                            r.call_id()
                        )
                    }
                    _ if r.error.is_some() => format!("    ✗ {}: {}", r.call_id(), one_line(&text, 70)),
                    _ => format!("    ← {} chars: {}", text.chars().count(), one_line(&text, 60)),
                }
            }),
            EventType::AssistantMessage => event.data_as::<AssistantMessage>().ok().and_then(|m| {
                let text = first_text(&m.message.content);
                let calls = m.message.content.iter().filter(|b| matches!(b, Block::ToolCall { .. })).count();
                if calls > 0 || text.is_empty() {
                    None
                } else {
                    Some(format!("  model ◂ {}", one_line(&text, 100)))
                }
            }),
            EventType::TurnEnd => Some(format!(
                "    ({} events so far, {} on the surface)",
                session.events().len(),
                session.surface().len()
            )),
            _ => None,
        };
        if let Some(line) = line {
            // The driver may be gone (the process is exiting): nothing to tell.
            let _ = self.0.send(line);
        }
    }
}
