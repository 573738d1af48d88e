//! How the CLI describes events to a person, in one line each: the
//! summaries, token counts, turn-end reasons, seq lists and counted nouns
//! that `inspect`, `explain` and the exports (Markdown, HTML) share, so the
//! same event reads the same everywhere.

use std::fmt::Write as _;

use palimpsest_core_session::payload::{
    AssistantChunk, AssistantMessage, Block, Message, Source, StepEnd, StepStart, StreamChunk, ToolCall,
    ToolResult, TurnEnd, TurnEndReason, TurnStart, Usage,
};
use palimpsest_core_session::{Event, EventType};
use serde::Deserialize;

use crate::settings_view;

/// Longest text snippet, in characters.
const SNIPPET: usize = 60;
/// Longest tool-argument snippet, in characters.
const ARGS_SNIPPET: usize = 40;

/// A one-line summary of an event's payload, fit for a terminal: every
/// character of it [`printable`](crate::output::printable), since it quotes
/// logged text (ids, names, error codes).
pub(crate) fn summarize(event: &Event) -> String {
    crate::output::printable_line(&summary_of(event))
}

fn summary_of(event: &Event) -> String {
    let raw = || snippet(&one_line_json(event.data()), SNIPPET + 20);
    if let (EventType::Plugin(_), Some(error)) = (event.event_type(), crate::output::event_error(event)) {
        // A failed plugin step: its reason in full, not a clipped raw dump.
        let message = crate::output::one_line(&error.message, crate::output::ERROR_CHARS);
        return format!("error {}: {message}", error.code);
    }
    match event.event_type() {
        EventType::TurnStart => event.data_as::<TurnStart>().map(|t| format!("turn {}", t.turn)).ok(),
        EventType::TurnEnd => {
            event.data_as::<TurnEnd>().map(|t| format!("turn {} {}", t.turn, reason(&t.reason))).ok()
        }
        EventType::StepStart => {
            event.data_as::<StepStart>().map(|s| format!("turn {} step {}", s.turn, s.step)).ok()
        }
        EventType::StepEnd => {
            event.data_as::<StepEnd>().map(|s| format!("turn {} step {}", s.turn, s.step)).ok()
        }
        EventType::UserMessage | EventType::ContextMessage | EventType::SteeringMessage => {
            #[derive(Deserialize)]
            struct WithMessage {
                message: Message,
            }
            event.data_as::<WithMessage>().map(|m| message(&m.message, true)).ok()
        }
        EventType::AssistantMessage => event
            .data_as::<AssistantMessage>()
            .map(|a| {
                let mut s = if a.message.content.is_empty() {
                    format!("{} (empty: carries usage only, derives nothing)", a.message.id)
                } else {
                    message(&a.message, false)
                };
                if let Some(u) = a.usage {
                    let _ = write!(s, "  [{}]", usage(&u));
                }
                if a.interrupted == Some(true) {
                    s.push_str("  [interrupted]");
                }
                s
            })
            .ok(),
        EventType::AssistantChunk => event.data_as::<AssistantChunk>().map(|c| chunk(&c.chunk)).ok(),
        EventType::ToolCall => event
            .data_as::<ToolCall>()
            .map(|c| format!("{} {}({})", c.call_id, c.name, snippet(&c.arguments, ARGS_SNIPPET)))
            .ok(),
        EventType::ToolResult => event
            .data_as::<ToolResult>()
            .map(|r| {
                let mut s = message(&r.message, false);
                if let Some(e) = &r.error {
                    let _ = write!(s, "  [error {} {}]", e.name, e.code);
                }
                s
            })
            .ok(),
        EventType::SessionSettings => settings_view::of_event(event).map(|s| settings_view::line(&s)),
        _ => None,
    }
    .unwrap_or_else(raw)
}

/// `id "text…"`, blocks joined by ` + `; the source when it says more
/// than the event type does (a plugin's message).
fn message(m: &Message, show_source: bool) -> String {
    let blocks: Vec<String> = m.content.iter().map(block).collect();
    let mut s = m.id.clone();
    if show_source {
        if let Source::Plugin { plugin } = &m.source {
            let _ = write!(s, " (from {plugin})");
        }
    }
    if blocks.is_empty() {
        s.push_str(" (no content)");
    } else {
        s.push(' ');
        s.push_str(&blocks.join(" + "));
    }
    s
}

fn block(b: &Block) -> String {
    match b {
        Block::Text { text } => quoted(text),
        Block::Reasoning { text, .. } => format!("thinking {}", quoted(text)),
        Block::ToolCall { id, name, arguments } => {
            format!("call {id} {name}({})", snippet(arguments, ARGS_SNIPPET))
        }
        Block::ToolResult { tool_call_id, is_error, content } => {
            let len: usize = content
                .iter()
                .map(|c| match c {
                    Block::Text { text } => text.chars().count(),
                    _ => 0,
                })
                .sum();
            let inner: Vec<String> = content.iter().map(block).collect();
            format!(
                "{tool_call_id} {} {} ({len} chars)",
                if *is_error { "ERROR" } else { "ok" },
                inner.join(" + ")
            )
        }
        Block::Image { media_type, data } => format!("[image {media_type}, {} base64 bytes]", data.len()),
    }
}

fn chunk(c: &StreamChunk) -> String {
    match c {
        StreamChunk::TextDelta { index, text } => format!("text-delta #{index} {}", quoted(text)),
        StreamChunk::ReasoningDelta { index, text } => format!("reasoning-delta #{index} {}", quoted(text)),
        StreamChunk::ToolCallDelta { index, id, name, arguments_delta } => {
            let name = name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
            format!("tool-call-delta #{index} {id}{name} {}", snippet(arguments_delta, ARGS_SNIPPET))
        }
        StreamChunk::Usage(u) => format!("usage {}", usage(u)),
    }
}

/// `120 in / 40 out, 80 cached, 12 reasoning`: a model call's token usage.
pub(crate) fn usage(u: &Usage) -> String {
    let mut s = format!("{} in / {} out", u.input_tokens, u.output_tokens);
    if let Some(c) = u.cached_input_tokens {
        let _ = write!(s, ", {c} cached");
    }
    if let Some(r) = u.reasoning_tokens {
        let _ = write!(s, ", {r} reasoning");
    }
    s
}

/// Why a turn ended: `completed`, `aborted: …`, `error <code>: …`, ...
pub(crate) fn reason(r: &TurnEndReason) -> String {
    match r {
        TurnEndReason::Completed => "completed".into(),
        TurnEndReason::Aborted { reason } => format!("aborted: {}", snippet(reason, SNIPPET)),
        TurnEndReason::Error { error } => {
            format!(
                "error {}: {}",
                error.code,
                crate::output::one_line(&error.message, crate::output::ERROR_CHARS)
            )
        }
        TurnEndReason::MaxTokens => "max-tokens".into(),
        TurnEndReason::Interrupted => "interrupted (closed by crash repair)".into(),
    }
}

/// `“text”`, on one line, cut to [`SNIPPET`] characters. Typographic
/// quotes, so that quotes inside the text stay unambiguous.
fn quoted(text: &str) -> String {
    format!("“{}”", snippet(text, SNIPPET))
}

/// `text` on one line (line breaks shown as `⏎`), cut to `max` characters
/// with `…`.
fn snippet(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        out.push(crate::output::printable(c));
    }
    out
}

/// JSON text on one line, keys in their logged order (data is stored
/// verbatim, possibly pretty-printed).
fn one_line_json(raw: &str) -> String {
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `3-5, 9, 1` for `[3, 4, 5, 9, 1]`: runs of consecutive seqs shortened,
/// order kept (provenance order matters).
pub(crate) fn ranges(seqs: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seqs.len() {
        let mut j = i;
        while j + 1 < seqs.len() && seqs[j + 1] == seqs[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => seqs[i].to_string(),
            1 => format!("{},{}", seqs[i], seqs[j]),
            _ => format!("{}-{}", seqs[i], seqs[j]),
        });
        i = j + 1;
    }
    parts.join(",")
}

/// `3, 4, 9`: seqs in full, in order.
pub(crate) fn join(seqs: &[u64]) -> String {
    seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// `1 entry`, `4 entries`, `0 turns`: a count and its noun, agreeing.
pub(crate) fn count(n: usize, word: &str) -> String {
    let plural = match word {
        "entry" => "entries".to_owned(),
        w => format!("{w}s"),
    };
    format!("{n} {}", if n == 1 { word } else { &plural })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_shorten_runs_and_keep_order() {
        assert_eq!(ranges(&[3, 4, 5]), "3-5");
        assert_eq!(ranges(&[19, 1, 6, 18, 12]), "19,1,6,18,12");
        assert_eq!(ranges(&[1, 2, 7, 8, 9, 4]), "1,2,7-9,4");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn snippets_are_one_line_and_cut_by_characters() {
        assert_eq!(snippet("a\nb", 10), "a⏎b");
        assert_eq!(snippet("ééééé", 3), "ééé…");
        assert_eq!(snippet("abc", 3), "abc");
    }

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(count(1, "entry"), "1 entry");
        assert_eq!(count(4, "entry"), "4 entries");
        assert_eq!(count(0, "turn"), "0 turns");
    }
}
