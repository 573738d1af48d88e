//! Tool-call ids the loop writes: unique within the session, whatever the
//! provider sends.
//!
//! A provider may answer with two calls sharing one id, with a call that has
//! no id, or with an id an earlier response already used. Logged as they
//! came, such calls would pair a `tool/result` with the wrong `tool/call`
//! (`tool-result-source-mismatch`) and send the provider two tool answers
//! with one `tool_call_id`. So before any call runs, the loop gives every
//! call whose id is empty or taken an id of its own ([`CallIds::assign`]);
//! the first call to use an id keeps it. The provider's id stays in the log:
//! in the `assistant/chunk` events the message cites, and as
//! `providerCallId` on the renamed call's `tool/call`. See
//! `docs/contract-notes.md`, note 14.

use std::collections::HashSet;

use palimpsest_core_session::payload::{Block, ToolCall};
use palimpsest_core_session::{Event, EventType};

/// The base of the id given to a call that came without one.
const MISSING_BASE: &str = "call";

/// Every call id the session's log has used so far.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallIds {
    used: HashSet<String>,
}

impl CallIds {
    /// The ids of every `tool/call` (and every `tool-call` block of an
    /// `assistant/message`) in `events`.
    pub(crate) fn from_log(events: &[Event]) -> CallIds {
        let mut used = HashSet::new();
        for event in events {
            match event.event_type() {
                EventType::ToolCall => {
                    if let Ok(call) = event.data_as::<ToolCall>() {
                        used.insert(call.call_id);
                    }
                }
                EventType::AssistantMessage => {
                    let Ok(message) = event.data_as::<palimpsest_core_session::payload::AssistantMessage>()
                    else {
                        continue;
                    };
                    for block in message.message.content {
                        if let Block::ToolCall { id, .. } = block {
                            used.insert(id);
                        }
                    }
                }
                _ => {}
            }
        }
        CallIds { used }
    }

    /// Gives each `tool-call` block of `content` an id unused in the
    /// session (and in `content`), keeping the provider's id when it is
    /// non-empty and new, and marks them used. Returns, per call in order,
    /// the provider's id when it was replaced.
    pub(crate) fn assign(&mut self, content: &mut [Block]) -> Vec<Option<String>> {
        let mut replaced = Vec::new();
        for block in content {
            let Block::ToolCall { id, .. } = block else { continue };
            if !id.is_empty() && self.used.insert(id.clone()) {
                replaced.push(None);
                continue;
            }
            let base = if id.is_empty() { MISSING_BASE } else { id.as_str() };
            let mut n: u64 = if id.is_empty() { 1 } else { 2 };
            let mut fresh = format!("{base}-{n}");
            while !self.used.insert(fresh.clone()) {
                n += 1;
                fresh = format!("{base}-{n}");
            }
            tracing::warn!(provider_call_id = %id, call_id = %fresh, "repeated or missing tool-call id; the call gets an id of its own");
            replaced.push(Some(std::mem::replace(id, fresh)));
        }
        replaced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Block {
        Block::ToolCall { id: id.into(), name: "t".into(), arguments: "{}".into() }
    }

    fn ids(content: &[Block]) -> Vec<&str> {
        content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn repeated_missing_and_earlier_ids_get_fresh_ones() {
        let mut calls = CallIds::default();
        let mut first = vec![call("a"), Block::text("x"), call("a"), call(""), call("a-2"), call("")];
        let replaced = calls.assign(&mut first);
        assert_eq!(ids(&first), ["a", "a-2", "call-1", "a-2-2", "call-2"]);
        assert_eq!(
            replaced,
            [None, Some("a".into()), Some(String::new()), Some("a-2".into()), Some(String::new())]
        );
        // A later response reusing an id of the session.
        let mut second = vec![call("a"), call("b")];
        assert_eq!(calls.assign(&mut second), [Some("a".into()), None]);
        assert_eq!(ids(&second), ["a-3", "b"]);
    }
}
