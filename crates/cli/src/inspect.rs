//! `palimpsest inspect`: a session as a timeline a person can read.
//!
//! Three parts:
//!
//! * a **header block**: id, creation time, lineage, size, the settings in
//!   effect, the surface, every replace and what it shadowed, token usage,
//!   and the state (valid
//!   or not, an open turn that `repair` would close, a dropped torn tail);
//! * the **timeline**: one line per event with its seq, its time relative
//!   to the first event, a surface marker (`●` on the surface, `○` shadowed,
//!   with the replace that shadowed it), its type indented by turn and step,
//!   a short summary, and its provenance (`← cites 3-5`); a
//!   `session/settings` also says which settings it changed. Structural
//!   violations are shown under the event that broke them, and the first
//!   rule violation where checking stopped;
//! * a **footer**: the final surface, message by message, which is exactly
//!   what the model would be sent next.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use anstyle::AnsiColor;
use palimpsest_core_session::payload::{
    AssistantChunk, AssistantMessage, Block, Message, Source, StepEnd, StepStart, StreamChunk, ToolCall,
    ToolResult, TurnEnd, TurnEndReason, TurnStart, Usage,
};
use palimpsest_core_session::repair::{repair, TOOL_NOT_STARTED};
use palimpsest_core_session::{Event, EventType, Session, SurfaceOp};
use serde::Deserialize;

use crate::check::{Checked, Finding, Shown};
use crate::settings_view;
use crate::timefmt;

/// Longest text snippet, in characters.
const SNIPPET: usize = 60;
/// Longest tool-argument snippet, in characters.
const ARGS_SNIPPET: usize = 40;
/// Replaces listed one by one in the header before "and N more".
const MAX_REPLACES_LISTED: usize = 12;

/// ANSI styles, or nothing when colour is off.
#[derive(Debug, Clone, Copy)]
struct Style {
    on: bool,
}

/// A foreground colour.
const fn fg(color: AnsiColor) -> anstyle::Style {
    anstyle::Style::new().fg_color(Some(anstyle::Color::Ansi(color)))
}

impl Style {
    fn paint(&self, style: anstyle::Style, text: &str) -> String {
        if self.on && !text.is_empty() {
            format!("{style}{text}{style:#}")
        } else {
            text.to_owned()
        }
    }
    fn dim(&self, t: &str) -> String {
        self.paint(anstyle::Style::new().dimmed(), t)
    }
    fn bold(&self, t: &str) -> String {
        self.paint(anstyle::Style::new().bold(), t)
    }
    fn red(&self, t: &str) -> String {
        self.paint(fg(AnsiColor::Red).bold(), t)
    }
    fn yellow(&self, t: &str) -> String {
        self.paint(fg(AnsiColor::Yellow), t)
    }
    fn green(&self, t: &str) -> String {
        self.paint(fg(AnsiColor::Green), t)
    }
    /// The colour of an event type's family.
    fn kind(&self, event_type: &EventType, t: &str) -> String {
        let style = match event_type {
            EventType::TurnStart | EventType::TurnEnd => fg(AnsiColor::Cyan).bold(),
            EventType::StepStart | EventType::StepEnd => fg(AnsiColor::Cyan),
            EventType::UserMessage | EventType::SteeringMessage => fg(AnsiColor::Yellow).bold(),
            EventType::ContextMessage => fg(AnsiColor::Yellow),
            EventType::AssistantMessage => fg(AnsiColor::Green).bold(),
            EventType::AssistantChunk => fg(AnsiColor::Green).dimmed(),
            EventType::ToolCall => fg(AnsiColor::Magenta),
            EventType::ToolResult => fg(AnsiColor::Magenta).bold(),
            EventType::SessionSettings => fg(AnsiColor::Blue).bold(),
            _ => fg(AnsiColor::Blue),
        };
        self.paint(style, t)
    }
}

/// Writes the whole report.
pub(crate) fn render(checked: &Checked, color: bool, out: &mut dyn Write) -> io::Result<()> {
    let style = Style { on: color };
    let Some(session) = &checked.report.session else {
        // Not even a header: say so, and what was wrong.
        writeln!(out, "{} {}", style.bold("session"), checked.origin)?;
        if let Some(f) = &checked.report.fatal {
            writeln!(out, "  {}", style.red(&format!("✗ {}", f.to_error(&checked.origin))))?;
        }
        return Ok(());
    };
    let view = View::new(checked, session);
    let mut text = String::new();
    view.header(&style, &mut text);
    text.push('\n');
    view.timeline(&style, &mut text);
    text.push('\n');
    view.footer(&style, &mut text);
    out.write_all(text.as_bytes())
}

/// Everything the report needs, computed once.
struct View<'a> {
    checked: &'a Checked,
    session: &'a Session,
    /// Seq → position on the final surface.
    surface_pos: HashMap<u64, usize>,
    /// Seq → structural violations at that event.
    violations_at: HashMap<u64, Vec<&'a Finding>>,
}

impl<'a> View<'a> {
    fn new(checked: &'a Checked, session: &'a Session) -> View<'a> {
        let surface_pos = session.surface().iter().enumerate().map(|(i, &s)| (s, i)).collect();
        let mut violations_at: HashMap<u64, Vec<&Finding>> = HashMap::new();
        for f in &checked.report.invariants {
            if let Some(seq) = f.seq() {
                violations_at.entry(seq).or_default().push(f);
            }
        }
        View { checked, session, surface_pos, violations_at }
    }

    fn events(&self) -> &'a [Event] {
        self.session.events()
    }

    fn header(&self, st: &Style, o: &mut String) {
        let h = self.session.header();
        let events = self.events();
        let label = |o: &mut String, name: &str| {
            let _ = write!(o, "{} ", st.bold(&format!("{name:<9}")));
        };
        label(o, "session");
        let _ = writeln!(o, "{}", h.id);
        label(o, "created");
        let _ = writeln!(o, "{} ({})", timefmt::utc(h.created_at), h.created_at);
        if let Some(cwd) = &h.cwd {
            label(o, "cwd");
            let _ = writeln!(o, "{cwd}");
        }
        if let Some(parent) = &h.parent_session {
            label(o, "parent");
            match h.seed_length {
                Some(n) => {
                    let _ = writeln!(o, "{parent} (forked with its first {n} events)");
                }
                None => {
                    let _ = writeln!(o, "{parent}");
                }
            }
        }
        label(o, "source");
        let _ = writeln!(o, "{}", self.checked.origin);

        label(o, "events");
        match (events.first(), events.last()) {
            (Some(first), Some(last)) => {
                let turns = events.iter().filter(|e| *e.event_type() == EventType::TurnStart).count();
                let plugin = events.iter().filter(|e| !e.event_type().is_core()).count();
                let span = last.time().saturating_sub(first.time());
                let _ = write!(
                    o,
                    "{} (seq 0-{}) over {}, {}",
                    events.len(),
                    last.seq(),
                    timefmt::span(span),
                    count(turns, "turn")
                );
                if plugin > 0 {
                    let _ = write!(o, ", {}", count(plugin, "plugin event"));
                }
                o.push('\n');
            }
            _ => o.push_str("none\n"),
        }

        if let Some(seq) = self.session.settings_seq() {
            label(o, "settings");
            let changes =
                self.events().iter().filter(|e| *e.event_type() == EventType::SessionSettings).count();
            let _ = writeln!(
                o,
                "{} (seq {seq}, {})",
                settings_view::line(&self.session.settings()),
                count(changes, "settings event")
            );
        }

        label(o, "surface");
        let surface = self.session.surface();
        let derived = self.session.derive_messages().len();
        let _ = writeln!(
            o,
            "{} → {}: [{}]",
            count(surface.len(), "entry"),
            count(derived, "message"),
            join(surface)
        );

        if !self.checked.report.shadowing.replaces().is_empty() {
            label(o, "replaces");
            let ty_of =
                |seq: u64| self.session.event(seq).map(|e| e.event_type().as_str()).unwrap_or_default();
            let seq_w =
                self.checked.report.shadowing.replaces().iter().map(|r| digits(r.seq)).max().unwrap_or(1);
            let ty_w = self
                .checked
                .report
                .shadowing
                .replaces()
                .iter()
                .map(|r| ty_of(r.seq).len())
                .max()
                .unwrap_or(0);
            for (i, r) in self.checked.report.shadowing.replaces().iter().enumerate() {
                if i == MAX_REPLACES_LISTED {
                    let more = self.checked.report.shadowing.replaces().len() - i;
                    let _ = writeln!(o, "{:10}… and {more} more", "");
                    break;
                }
                if i > 0 {
                    o.push_str(&" ".repeat(10));
                }
                let _ =
                    writeln!(o, "{:>seq_w$} {:ty_w$}  shadowed {}", r.seq, ty_of(r.seq), join(&r.shadowed));
            }
        }

        let (usage, responses) = total_usage(events);
        if responses > 0 {
            label(o, "usage");
            let _ = write!(
                o,
                "{} input + {} output tokens over {}",
                usage.input_tokens,
                usage.output_tokens,
                count(responses, "response")
            );
            if let Some(c) = usage.cached_input_tokens {
                let _ = write!(o, " ({c} input cached)");
            }
            o.push('\n');
        }

        label(o, "state");
        let violations = self.checked.violations().len();
        if violations == 0 {
            o.push_str(&st.green("valid"));
        } else {
            o.push_str(&st.red(&format!("INVALID: {}", count(violations, "violation"))));
        }
        if self.checked.report.fatal.is_none() {
            let closers = repair(events);
            if closers.is_empty() {
                o.push_str("; nothing to repair");
            } else {
                let _ = write!(
                    o,
                    "; {}: `palimpsest repair --write` would append {}",
                    st.yellow("the last turn is open"),
                    count(closers.len(), "closing event")
                );
                let unanswered = unanswered_calls(&closers);
                if !unanswered.is_empty() {
                    let _ = write!(o, "\n{:10}calls without a result: {}", "", unanswered.join(", "));
                }
            }
        }
        o.push('\n');
        if let Some(torn) = self.checked.report.torn_tail {
            o.push_str(&" ".repeat(10));
            let _ = writeln!(
                o,
                "{}",
                st.yellow(&format!("a torn last line was dropped (line {}, {} bytes)", torn.line, torn.len))
            );
        }
        if self.checked.report.missing_newline {
            o.push_str(&" ".repeat(10));
            let _ = writeln!(o, "the last line has no newline");
        }
    }

    fn timeline(&self, st: &Style, o: &mut String) {
        let events = self.events();
        let Some(first) = events.first() else {
            let _ = writeln!(o, "{}", st.bold("timeline  (no events)"));
            self.fatal_line(st, o, 0);
            return;
        };
        let t0 = first.time();
        let _ = writeln!(
            o,
            "{}  times from {}   {} on the surface   {} shadowed",
            st.bold("timeline"),
            timefmt::utc(t0),
            st.green("●"),
            st.dim("○")
        );
        let depths = depths(events);
        let seq_w = digits(events.len().saturating_sub(1) as u64).max(3);
        let times: Vec<String> =
            events.iter().map(|e| timefmt::offset(i128::from(e.time()) - i128::from(t0))).collect();
        let time_w = times.iter().map(String::len).max().unwrap_or(0);
        let type_w = events
            .iter()
            .zip(&depths)
            .map(|(e, d)| 2 * d + e.event_type().as_str().chars().count())
            .max()
            .unwrap_or(0)
            .min(36);
        let _ = writeln!(o, "{}", st.dim(&format!("{:>seq_w$}  {:>time_w$}    event", "seq", "time")));
        let mut settings: Option<palimpsest_core_session::payload::Settings> = None;
        for ((event, depth), time) in events.iter().zip(&depths).zip(&times) {
            let seq = event.seq();
            let shadowed = self.checked.report.shadowing.shadowed_by(seq);
            let mark = if self.surface_pos.contains_key(&seq) {
                st.green("●")
            } else if shadowed.is_some() {
                st.dim("○")
            } else {
                " ".to_owned()
            };
            let ty = event.event_type().as_str();
            let pad = type_w.saturating_sub(2 * depth + ty.chars().count());
            let mut summary = summarize(event);
            let mut notes = Vec::new();
            if let Some(next) = settings_view::of_event(event) {
                notes.push(match &settings {
                    None => "first settings".to_owned(),
                    Some(before) => {
                        let changed = settings_view::changes(before, &next);
                        if changed.is_empty() {
                            "no change".to_owned()
                        } else {
                            format!("changes {}", changed.join(", "))
                        }
                    }
                });
                settings = Some(next);
            }
            if let Some(SurfaceOp::Replace { start, end }) = event.surface_op() {
                notes.push(if start == end {
                    format!("⟲ replaces {start}")
                } else {
                    format!("⟲ replaces {start}..{end}")
                });
            }
            if let Some(sources) = event.source_event_seqs() {
                notes.push(if sources.is_empty() {
                    "← cites nothing (empty stream)".to_owned()
                } else {
                    format!("← cites {}", ranges(sources))
                });
            }
            if let Some(by) = shadowed {
                notes.push(format!("shadowed by {by}"));
            }
            if !notes.is_empty() {
                summary.push_str("  ");
                summary.push_str(&notes.join("  "));
            }
            let summary = if shadowed.is_some() { st.dim(&summary) } else { summary };
            let line = format!(
                "{}  {}  {mark} {}{}{}  {summary}",
                st.dim(&format!("{seq:>seq_w$}")),
                st.dim(&format!("{time:>time_w$}")),
                "  ".repeat(*depth),
                st.kind(event.event_type(), ty),
                " ".repeat(pad),
            );
            let _ = writeln!(o, "{}", line.trim_end());
            for f in self.violations_at.get(&seq).into_iter().flatten() {
                let indent = seq_w + time_w + 6;
                let _ = writeln!(o, "{:indent$}{}", "", st.red(&format!("⚠ {}: {}", f.code, f.detail)));
            }
        }
        self.fatal_line(st, o, seq_w + time_w + 6);
    }

    /// Where checking stopped, if it did.
    fn fatal_line(&self, st: &Style, o: &mut String, indent: usize) {
        if let Some(f) = &self.checked.report.fatal {
            let _ = writeln!(
                o,
                "{:indent$}{}",
                "",
                st.red(&format!("✗ {}  (checking stopped here)", f.to_error(&self.checked.origin)))
            );
        }
    }

    fn footer(&self, st: &Style, o: &mut String) {
        let surface = self.session.surface();
        let _ = writeln!(o, "{}  what the model sees next, in order", st.bold("surface"));
        if surface.is_empty() {
            let _ = writeln!(o, "  (empty)");
            return;
        }
        let pos_w = digits(surface.len() as u64);
        let seq_w = surface.iter().map(|&s| digits(s)).max().unwrap_or(1);
        let type_w = surface
            .iter()
            .filter_map(|&s| self.session.event(s))
            .map(|e| e.event_type().as_str().len())
            .max()
            .unwrap_or(0);
        for (i, &seq) in surface.iter().enumerate() {
            let Some(event) = self.session.event(seq) else { continue };
            let mut line = format!(
                "  {:>pos_w$}. {:>seq_w$}  {}{}  {}",
                i + 1,
                seq,
                st.kind(event.event_type(), event.event_type().as_str()),
                " ".repeat(type_w - event.event_type().as_str().len()),
                summarize(event)
            );
            if let Some(sources) = event.source_event_seqs().filter(|s| !s.is_empty()) {
                let _ = write!(line, "  ← cites {}", ranges(sources));
            }
            let _ = writeln!(o, "{}", line.trim_end());
        }
    }
}

/// Indentation depth of each event: 1 inside a turn, 2 inside a step;
/// turn and step brackets sit at the level of what encloses them.
fn depths(events: &[Event]) -> Vec<usize> {
    let (mut turn, mut step) = (false, false);
    events
        .iter()
        .map(|e| match e.event_type() {
            EventType::TurnStart => {
                let d = 0;
                turn = true;
                step = false;
                d
            }
            EventType::TurnEnd => {
                turn = false;
                step = false;
                0
            }
            EventType::StepStart => {
                step = true;
                usize::from(turn)
            }
            EventType::StepEnd => {
                step = false;
                usize::from(turn)
            }
            _ => usize::from(turn) + usize::from(step),
        })
        .collect()
}

/// A one-line summary of an event's payload.
pub(crate) fn summarize(event: &Event) -> String {
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

/// The calls the repair closers answer, as `call_b (started at seq 10,
/// outcome unknown)` / `call_c (requested at seq 7, never started)`.
fn unanswered_calls(closers: &[Event]) -> Vec<String> {
    closers
        .iter()
        .filter_map(|e| {
            let r = e.data_as::<ToolResult>().ok()?;
            let cited = e.source_event_seqs().and_then(|s| s.first()).copied().unwrap_or_default();
            let state = match r.error.as_ref().map(|e| e.code.as_str()) {
                Some(TOOL_NOT_STARTED) => format!("requested at seq {cited}, never started"),
                _ => format!("started at seq {cited}, outcome unknown"),
            };
            Some(format!("{} ({state})", r.call_id()))
        })
        .collect()
}

/// The usage of every `assistant/message`, summed, and how many carried one.
fn total_usage(events: &[Event]) -> (Usage, usize) {
    let mut total = Usage::default();
    let mut n = 0;
    for e in events.iter().filter(|e| *e.event_type() == EventType::AssistantMessage) {
        if let Ok(AssistantMessage { usage: Some(u), .. }) = e.data_as::<AssistantMessage>() {
            n += 1;
            total.input_tokens += u.input_tokens;
            total.output_tokens += u.output_tokens;
            if let Some(c) = u.cached_input_tokens {
                *total.cached_input_tokens.get_or_insert(0) += c;
            }
        }
    }
    (total, n)
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
        match c {
            '\n' => out.push('⏎'),
            '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push('�'),
            c => out.push(c),
        }
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
fn ranges(seqs: &[u64]) -> String {
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

pub(crate) fn join(seqs: &[u64]) -> String {
    seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

pub(crate) fn count(n: usize, word: &str) -> String {
    let plural = match word {
        "entry" => "entries".to_owned(),
        w => format!("{w}s"),
    };
    format!("{n} {}", if n == 1 { word } else { &plural })
}

fn digits(n: u64) -> usize {
    n.to_string().len()
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

    #[test]
    fn colour_is_only_added_when_on() {
        assert_eq!(Style { on: false }.red("x"), "x");
        assert_eq!(Style { on: true }.red("x"), "\x1b[1m\x1b[31mx\x1b[0m");
        assert_eq!(Style { on: true }.green(""), "", "nothing to colour");
    }
}
