//! `palimpsest export STORE [--session ID] --format markdown|html|json
//! [--view transcript|model] [-o FILE]`: a session for reading outside the
//! tool.
//!
//! Two views of one log:
//!
//! * **transcript**, what the person saw: every message as it was appended,
//!   in log order, shadowed ones included, with turn boundaries, and a
//!   marker where a replace happened ("— compacted 4 messages into a
//!   summary (seq 20) —", "— pruned the result of call_1 (seq 8) into seq
//!   18 —") carrying the replacement itself;
//! * **model**, what the model saw last: the derived messages in surface
//!   order, each with its position, seq, how it entered the surface and
//!   what it cites.
//!
//! Both are built once into a [`Doc`] (this module), then written by
//! [`markdown`], [`html`] or [`json`]. The JSON shape is documented in
//! `docs/export-format.md` and in [`json`].

pub(crate) mod html;
pub(crate) mod json;
pub(crate) mod markdown;
mod md;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use palimpsest_core_session::payload::{
    Block, Message, Settings, Source, ToolError, TurnEnd, TurnEndReason, TurnStart, Usage,
};
use palimpsest_core_session::{Event, EventType, Session, SurfaceOp};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cmd::{open_checked, readable_session};
use crate::error::{CliError, Exit};
use crate::settings_view;
use crate::store_arg::StoreArgs;
use palimpsest_core_session::explain::Shadowing;

/// The file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Markdown, with fenced code for tool arguments and results.
    #[value(alias = "md")]
    Markdown,
    /// One self-contained HTML file: inline CSS, no scripts, no network.
    Html,
    /// One JSON object, stable within its version (`palimpsest help export` shows its shape).
    Json,
}

/// Which messages, in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportView {
    /// What the person saw: every appended message in log order, shadowed
    /// ones included, compactions and prunes as markers.
    Transcript,
    /// What the model saw last: the surface, each message with its seq and
    /// provenance.
    Model,
}

impl ExportView {
    /// The name used in every format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ExportView::Transcript => "transcript",
            ExportView::Model => "model",
        }
    }
}

/// Everything an export shows, built once for every format.
#[derive(Debug)]
pub(crate) struct Doc<'a> {
    /// The session.
    pub(crate) session: &'a Session,
    /// The view.
    pub(crate) view: ExportView,
    /// What to show, in order.
    pub(crate) items: Vec<Item<'a>>,
    /// The time of the first event (times are shown from it).
    pub(crate) t0: u64,
    /// How many turns the log has.
    pub(crate) turns: usize,
    /// How many messages the model sees now.
    pub(crate) derived: usize,
    /// Tool names by call id, from `tool/call` events and `tool-call` blocks.
    pub(crate) tool_names: HashMap<String, String>,
    /// The settings in effect (the next request's): the request's
    /// `session/settings` seq, typed and as logged; `None` before any.
    pub(crate) settings: Option<(u64, Settings, &'a RawValue)>,
}

/// One thing to show.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// A `turn/start` (transcript only).
    TurnStart {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The turn number.
        turn: u64,
    },
    /// A `turn/end` (transcript only).
    TurnEnd {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The turn number.
        turn: u64,
        /// Why the turn ended.
        reason: TurnEndReason,
    },
    /// A `session/settings` (transcript only): the settings every later
    /// request is made with.
    Settings {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The settings, typed.
        settings: Box<Settings>,
        /// The settings exactly as logged.
        raw: &'a RawValue,
        /// The keys that changed since the previous settings (all stated
        /// keys for the first).
        changes: Vec<String>,
    },
    /// A message-bearing event.
    Message(Box<Msg<'a>>),
}

/// A message and what the log says about it.
#[derive(Debug)]
pub(crate) struct Msg<'a> {
    /// The event's seq.
    pub(crate) seq: u64,
    /// Its time.
    pub(crate) time: u64,
    /// Its type.
    pub(crate) event_type: &'a EventType,
    /// Its `turn` field.
    pub(crate) turn: Option<u64>,
    /// Its `step` field.
    pub(crate) step: Option<u64>,
    /// The message, typed.
    pub(crate) message: Message,
    /// The message exactly as logged.
    pub(crate) raw: &'a RawValue,
    /// `sourceEventSeqs`.
    pub(crate) sources: Option<&'a [u64]>,
    /// `surfaceOp`.
    pub(crate) surface_op: Option<SurfaceOp>,
    /// Its position on the current surface (from 0).
    pub(crate) position: Option<usize>,
    /// The replace that took it off the surface.
    pub(crate) shadowed_by: Option<u64>,
    /// If it is a replace: what kind, and what it took off.
    pub(crate) replaces: Option<Replace>,
    /// An assistant message's usage.
    pub(crate) usage: Option<Usage>,
    /// An assistant message cut off by cancellation.
    pub(crate) interrupted: bool,
    /// A tool result's error.
    pub(crate) tool_error: Option<ToolError>,
}

/// What a replace did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replace {
    /// Prune, compaction or rewrite.
    pub(crate) kind: ReplaceKind,
    /// The surface entries it took off, in surface order.
    pub(crate) shadowed: Vec<u64>,
}

/// The kinds of replace a reader tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplaceKind {
    /// A `tool/result` standing in for an earlier result of the same call.
    Prune,
    /// Several messages folded into one.
    Compaction,
    /// One message (not a tool result) standing in for another.
    Rewrite,
}

impl ReplaceKind {
    /// The name used in every format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReplaceKind::Prune => "prune",
            ReplaceKind::Compaction => "compaction",
            ReplaceKind::Rewrite => "rewrite",
        }
    }
}

impl Msg<'_> {
    /// Who speaks, for people: `User`, `Assistant`, `Tool result`,
    /// `Context`, `Steering`.
    pub(crate) fn role_label(&self) -> &'static str {
        match self.event_type {
            EventType::AssistantMessage => "Assistant",
            EventType::ToolResult => "Tool result",
            EventType::ContextMessage => "Context",
            EventType::SteeringMessage => "Steering",
            _ => match self.message.source {
                Source::Plugin { .. } => "Summary",
                _ => "User",
            },
        }
    }

    /// A CSS-class-like name of the role: `user`, `assistant`, `tool`,
    /// `context`, `steering`, `summary`.
    pub(crate) fn role_class(&self) -> &'static str {
        match self.role_label() {
            "Assistant" => "assistant",
            "Tool result" => "tool",
            "Context" => "context",
            "Steering" => "steering",
            "Summary" => "summary",
            _ => "user",
        }
    }

    /// Where the message came from, when the role does not already say:
    /// `example/example-1`, `plugin watcher`.
    pub(crate) fn source_label(&self) -> Option<String> {
        match &self.message.source {
            Source::Model { provider, model } => Some(format!("{provider}/{model}")),
            Source::Plugin { plugin } => Some(format!("plugin {plugin}")),
            _ => None,
        }
    }

    /// The call a tool result answers.
    pub(crate) fn call_id(&self) -> Option<&str> {
        self.message.content.iter().find_map(|b| match b {
            Block::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
    }
}

impl Doc<'_> {
    /// The marker line of a replace, without dashes: `compacted 4 messages
    /// into a summary (seq 20)`.
    pub(crate) fn marker(&self, m: &Msg<'_>, r: &Replace) -> String {
        let seqs = crate::describe::join(&r.shadowed);
        match r.kind {
            ReplaceKind::Prune => {
                let call = m.call_id().unwrap_or("?");
                format!("pruned the result of {call} (seq {seqs}) into seq {}", m.seq)
            }
            ReplaceKind::Compaction => {
                format!("compacted {} messages into a summary (seq {})", r.shadowed.len(), m.seq)
            }
            ReplaceKind::Rewrite => format!("rewrote seq {seqs} as seq {}", m.seq),
        }
    }

    /// `+0.120s` from the first event.
    pub(crate) fn offset(&self, time: u64) -> String {
        crate::timefmt::offset(i128::from(time) - i128::from(self.t0))
    }

    /// The name of the tool a call id belongs to.
    pub(crate) fn tool_name(&self, call_id: &str) -> Option<&str> {
        self.tool_names.get(call_id).map(String::as_str)
    }
}

/// What a message-bearing event carries besides the message.
#[derive(Deserialize)]
struct Carrier<'a> {
    #[serde(borrow)]
    message: &'a RawValue,
    #[serde(default)]
    turn: Option<u64>,
    #[serde(default)]
    step: Option<u64>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    interrupted: Option<bool>,
    #[serde(default)]
    error: Option<ToolError>,
}

/// Builds the document of `view` over a session whose accepted replaces
/// shadowed what `shadowing` says.
pub(crate) fn build<'a>(session: &'a Session, shadowing: &Shadowing, view: ExportView) -> Doc<'a> {
    let events = session.events();
    let position: HashMap<u64, usize> = session.surface().iter().enumerate().map(|(i, &s)| (s, i)).collect();
    let message = |e: &'a Event| -> Option<Box<Msg<'a>>> {
        let carrier = e.data_as::<Carrier<'a>>().ok()?;
        let typed: Message = serde_json::from_str(carrier.message.get()).ok()?;
        let replaces = shadowing.took_off(e.seq()).map(|shadowed| Replace {
            kind: match (e.event_type(), shadowed.count()) {
                (EventType::ToolResult, _) => ReplaceKind::Prune,
                (_, 1) => ReplaceKind::Rewrite,
                _ => ReplaceKind::Compaction,
            },
            shadowed: shadowed.shadowed().collect(),
        });
        Some(Box::new(Msg {
            seq: e.seq(),
            time: e.time(),
            event_type: e.event_type(),
            turn: carrier.turn,
            step: carrier.step,
            message: typed,
            raw: carrier.message,
            sources: e.source_event_seqs(),
            surface_op: e.surface_op(),
            position: position.get(&e.seq()).copied(),
            shadowed_by: shadowing.shadowed_by(e.seq()),
            replaces,
            usage: carrier.usage,
            interrupted: carrier.interrupted == Some(true),
            tool_error: carrier.error,
        }))
    };
    // An assistant message without content only carries usage: nobody saw it.
    let shown = |m: &Msg<'_>| !(m.message.content.is_empty() && *m.event_type == EventType::AssistantMessage);

    let mut items = Vec::new();
    match view {
        ExportView::Transcript => {
            let mut settings = Settings::default();
            for e in events {
                match e.event_type() {
                    EventType::SessionSettings => {
                        if let Ok(s) = e.data_as::<SettingsCarrier<'a>>() {
                            if let Ok(next) = serde_json::from_str::<Settings>(s.settings.get()) {
                                let changes = settings_view::changes(&settings, &next);
                                items.push(Item::Settings {
                                    seq: e.seq(),
                                    time: e.time(),
                                    settings: Box::new(next.clone()),
                                    raw: s.settings,
                                    changes,
                                });
                                settings = next;
                            }
                        }
                    }
                    EventType::TurnStart => {
                        if let Ok(t) = e.data_as::<TurnStart>() {
                            items.push(Item::TurnStart { seq: e.seq(), time: e.time(), turn: t.turn });
                        }
                    }
                    EventType::TurnEnd => {
                        if let Ok(t) = e.data_as::<TurnEnd>() {
                            items.push(Item::TurnEnd {
                                seq: e.seq(),
                                time: e.time(),
                                turn: t.turn,
                                reason: t.reason,
                            });
                        }
                    }
                    _ if e.surface_op().is_some() => {
                        if let Some(m) = message(e).filter(|m| shown(m)) {
                            items.push(Item::Message(m));
                        }
                    }
                    _ => {}
                }
            }
        }
        ExportView::Model => {
            for &seq in session.surface() {
                if let Some(m) = session.event(seq).and_then(message).filter(|m| shown(m)) {
                    items.push(Item::Message(m));
                }
            }
        }
    }

    let mut tool_names = HashMap::new();
    for e in events {
        #[derive(Deserialize)]
        struct Call {
            #[serde(rename = "callId")]
            call_id: String,
            name: String,
        }
        if *e.event_type() == EventType::ToolCall {
            if let Ok(c) = e.data_as::<Call>() {
                tool_names.insert(c.call_id, c.name);
            }
        }
    }
    for item in &items {
        if let Item::Message(m) = item {
            for b in &m.message.content {
                if let Block::ToolCall { id, name, .. } = b {
                    tool_names.entry(id.clone()).or_insert_with(|| name.clone());
                }
            }
        }
    }

    Doc {
        session,
        view,
        items,
        t0: events.first().map_or(session.header().created_at, Event::time),
        turns: events.iter().filter(|e| *e.event_type() == EventType::TurnStart).count(),
        derived: session.derive_messages().len(),
        tool_names,
        settings: {
            let request = session.derive_request();
            match (request.settings_seq, request.settings_raw) {
                (Some(seq), Some(raw)) => Some((seq, request.settings, raw)),
                _ => None,
            }
        },
    }
}

/// `data` of a `session/settings`, the settings kept raw.
#[derive(Deserialize)]
struct SettingsCarrier<'a> {
    #[serde(borrow)]
    settings: &'a RawValue,
}

/// `palimpsest export`.
/// The format `-o FILE`'s extension names: `.md`/`.markdown`, `.html`/`.htm`, `.json`.
pub(crate) fn format_of(file: &Path) -> Option<Format> {
    match file.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "md" | "markdown" => Some(Format::Markdown),
        "html" | "htm" => Some(Format::Html),
        "json" => Some(Format::Json),
        _ => None,
    }
}

/// `--format`, or the one `-o`'s extension names; neither is a usage error.
pub(crate) fn chosen_format(format: Option<Format>, output: Option<&Path>) -> Result<Format, CliError> {
    if let Some(format) = format {
        return Ok(format);
    }
    match output {
        Some(file) => format_of(file).ok_or_else(|| {
            CliError::usage(format!(
                "-o {}: the extension names no format (.md, .html, .json); give --format",
                file.display()
            ))
        }),
        None => {
            Err(CliError::usage("give --format markdown|html|json, or -o FILE ending in .md, .html or .json"))
        }
    }
}

pub(crate) fn export(
    args: &StoreArgs,
    format: Option<Format>,
    view: ExportView,
    output: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let format = chosen_format(format, output)?;
    let (_, checked) = open_checked(args, crate::store_arg::Access::Read)?;
    let origin = checked.origin.clone();
    let shadowing = checked.report.shadowing.clone();
    let session = readable_session(checked)?;
    let doc = build(&session, &shadowing, view);
    let text = match format {
        Format::Markdown => markdown::render(&doc),
        Format::Html => html::render(&doc),
        Format::Json => json::render(&doc)?,
    };
    match output {
        None => out.write_all(text.as_bytes())?,
        Some(path) => {
            fs::write(path, text.as_bytes()).map_err(|e| {
                CliError::io(path.display().to_string(), format!("cannot write the export: {e}"))
            })?;
            crate::output::note(&format!(
                "{origin}: wrote the {} view as {} to {}",
                view.name(),
                match format {
                    Format::Markdown => "Markdown",
                    Format::Html => "HTML",
                    Format::Json => "JSON",
                },
                path.display()
            ));
        }
    }
    Ok(Exit::Success)
}

/// Tool-call arguments for reading: an object or array that parses as
/// JSON is re-indented (keys kept in the model's order), anything else is
/// shown as the model wrote it.
pub(crate) fn pretty_arguments(arguments: &str) -> String {
    let trimmed = arguments.trim();
    if !trimmed.starts_with(['{', '[']) || serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_err() {
        return arguments.to_owned();
    }
    let mut out = String::with_capacity(trimmed.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = trimmed.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // Skip the whitespace inside an empty container: `{}`, `[]`.
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&n| n == '}' || n == ']') {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// The text blocks of a tool result's content, joined.
pub(crate) fn result_text(content: &[Block]) -> String {
    let mut text = String::new();
    for b in content {
        match b {
            Block::Text { text: t } | Block::Reasoning { text: t, .. } => text.push_str(t),
            Block::ToolCall { name, arguments, .. } => {
                text.push_str(&format!("[tool call {name}({arguments})]"))
            }
            Block::ToolResult { content, .. } => text.push_str(&result_text(content)),
            Block::Image { .. } => {}
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_jsonl;

    fn doc_of(view: ExportView, f: impl FnOnce(&Doc<'_>)) {
        let text = include_str!("../../test_data/ok/compaction-and-prune.jsonl");
        let checked = check_jsonl(text.as_bytes(), "x".into());
        let shadowing = checked.report.shadowing.clone();
        let (session, _) = checked.into_session().unwrap_or_else(|e| panic!("{e}"));
        f(&build(&session, &shadowing, view));
    }

    fn seqs(doc: &Doc<'_>) -> Vec<u64> {
        doc.items
            .iter()
            .filter_map(|i| match i {
                Item::Message(m) => Some(m.seq),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_transcript_is_every_message_in_log_order_and_the_model_view_is_the_surface() {
        doc_of(ExportView::Transcript, |doc| {
            assert_eq!(seqs(doc), [1, 6, 8, 12, 15, 17, 18, 20, 24]);
            let turns = doc.items.iter().filter(|i| matches!(i, Item::TurnStart { .. })).count();
            assert_eq!((turns, doc.turns, doc.derived), (2, 2, 4));
            assert_eq!(doc.tool_name("call_1"), Some("read_file"));
        });
        doc_of(ExportView::Model, |doc| assert_eq!(seqs(doc), [20, 15, 17, 24]));
    }

    #[test]
    fn replaces_are_told_apart_and_named() {
        doc_of(ExportView::Transcript, |doc| {
            let markers: Vec<String> = doc
                .items
                .iter()
                .filter_map(|i| match i {
                    Item::Message(m) => m.replaces.as_ref().map(|r| doc.marker(m, r)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                markers,
                [
                    "pruned the result of call_1 (seq 8) into seq 18",
                    "compacted 4 messages into a summary (seq 20)"
                ]
            );
        });
    }

    #[test]
    fn arguments_are_pretty_when_they_are_json_and_keep_their_order() {
        assert_eq!(pretty_arguments(r#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(
            pretty_arguments(r#"{"z": [1, {}], "a": {"s": "x,\"{y}:"}, "e": []}"#),
            "{\n  \"z\": [\n    1,\n    {}\n  ],\n  \"a\": {\n    \"s\": \"x,\\\"{y}:\"\n  },\n  \"e\": []\n}"
        );
        assert_eq!(pretty_arguments("not json {"), "not json {");
        assert_eq!(pretty_arguments("{\"a\": 1"), "{\"a\": 1", "broken JSON is left as written");
        assert_eq!(pretty_arguments("42"), "42", "a bare scalar is left as written");
    }
}
