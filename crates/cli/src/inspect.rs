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
use palimpsest_core_session::payload::{AssistantMessage, ToolResult, Usage};
use palimpsest_core_session::repair::{repair, TOOL_NOT_STARTED};
use palimpsest_core_session::{Event, EventType, Session, SurfaceOp};

use crate::check::{Checked, Finding, Shown};
use crate::describe::{count, join, ranges, summarize};
use crate::settings_view;
use crate::timefmt;

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

fn digits(n: u64) -> usize {
    n.to_string().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_is_only_added_when_on() {
        assert_eq!(Style { on: false }.red("x"), "x");
        assert_eq!(Style { on: true }.red("x"), "\x1b[1m\x1b[31mx\x1b[0m");
        assert_eq!(Style { on: true }.green(""), "", "nothing to colour");
    }
}
