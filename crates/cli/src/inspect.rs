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

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write};

use anstyle::AnsiColor;
use palimpsest_core_session::payload::{AssistantMessage, ToolResult, Usage};
use palimpsest_core_session::repair::{repair, TOOL_NOT_STARTED};
use palimpsest_core_session::{Event, EventType, Session, SurfaceManager, SurfaceOp};

use crate::check::{Checked, Finding, Shown};
use crate::describe::{count, join, ranges, summarize};
use crate::settings_view;
use crate::store_arg::Target;
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

/// Writes the whole report. The session was checked keeping only its
/// surface ([`Retain::Surface`](crate::check::Retain::Surface)); its
/// events are read twice more from `target`, streamed: once to size the
/// columns and count what the header shows, once to write the timeline
/// line by line. Memory is bounded by the surface, not the log.
pub(crate) fn render(
    checked: &Checked,
    target: &Target,
    color: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let style = Style { on: color };
    let Some(session) = &checked.report.session else {
        // Not even a header: say so, and what was wrong.
        writeln!(out, "{} {}", style.bold("session"), checked.origin)?;
        if let Some(f) = &checked.report.fatal {
            writeln!(out, "  {}", style.red(&format!("✗ {}", f.to_error(&checked.origin))))?;
        }
        return Ok(());
    };
    let upto = session.next_seq();
    let listed: HashSet<u64> =
        checked.report.shadowing.replaces().iter().take(MAX_REPLACES_LISTED).copied().collect();
    let totals = target.replay(upto, |events| Totals::of(events, &listed))?;
    let view = View::new(checked, session, totals);
    let mut out = io::BufWriter::new(out);
    let mut text = String::new();
    view.header(&style, &mut text);
    text.push('\n');
    out.write_all(text.as_bytes())?;
    target.replay(upto, |events| view.timeline(&style, events, &mut out))??;
    let mut text = String::from("\n");
    view.footer(&style, &mut text);
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// What the header counts and the timeline's columns need, from one
/// streamed read of the log.
#[derive(Debug, Default)]
struct Totals {
    events: u64,
    /// The first event's time (times are shown from it) and the last
    /// event's seq and time.
    first_time: Option<u64>,
    last: Option<(u64, u64)>,
    turns: usize,
    plugin: usize,
    settings_events: usize,
    usage: Usage,
    responses: usize,
    /// The width of the time column and of the indented type column.
    time_w: usize,
    type_w: usize,
    /// The types of the replaces the header lists, and what each took off
    /// the surface (in surface order).
    replace_types: HashMap<u64, EventType>,
    replace_took: HashMap<u64, Vec<u64>>,
}

impl Totals {
    fn of(events: &mut dyn Iterator<Item = Event>, listed: &HashSet<u64>) -> Totals {
        let mut t = Totals::default();
        let mut depth = Depth::default();
        // The surface, followed: what a listed replace took off.
        let mut surface = SurfaceManager::new();
        for e in events {
            let took = surface.apply_accepted(&e);
            let t0 = *t.first_time.get_or_insert(e.time());
            t.events += 1;
            t.last = Some((e.seq(), e.time()));
            let ty = e.event_type();
            match ty {
                EventType::TurnStart => t.turns += 1,
                EventType::SessionSettings => t.settings_events += 1,
                EventType::AssistantMessage => {
                    if let Ok(AssistantMessage { usage: Some(u), .. }) = e.data_as::<AssistantMessage>() {
                        t.responses += 1;
                        t.usage.input_tokens += u.input_tokens;
                        t.usage.output_tokens += u.output_tokens;
                        if let Some(c) = u.cached_input_tokens {
                            *t.usage.cached_input_tokens.get_or_insert(0) += c;
                        }
                    }
                }
                _ => {}
            }
            if !ty.is_core() {
                t.plugin += 1;
            }
            let d = depth.of(ty);
            t.type_w = t.type_w.max(2 * d + ty.as_str().chars().count());
            t.time_w = t.time_w.max(timefmt::offset(i128::from(e.time()) - i128::from(t0)).len());
            if listed.contains(&e.seq()) {
                t.replace_types.insert(e.seq(), ty.clone());
                t.replace_took.insert(e.seq(), took);
            }
        }
        t.type_w = t.type_w.min(36);
        t
    }
}

/// Everything the report needs, computed once.
struct View<'a> {
    checked: &'a Checked,
    session: &'a Session,
    totals: Totals,
    /// The seqs on the final surface.
    on_surface: HashSet<u64>,
    /// Seq → structural violations at that event.
    violations_at: HashMap<u64, Vec<&'a Finding>>,
}

impl<'a> View<'a> {
    fn new(checked: &'a Checked, session: &'a Session, totals: Totals) -> View<'a> {
        let on_surface = session.surface().iter().copied().collect();
        let mut violations_at: HashMap<u64, Vec<&Finding>> = HashMap::new();
        for f in &checked.report.invariants {
            if let Some(seq) = f.seq() {
                violations_at.entry(seq).or_default().push(f);
            }
        }
        View { checked, session, totals, on_surface, violations_at }
    }

    fn header(&self, st: &Style, o: &mut String) {
        let h = self.session.header();
        let t = &self.totals;
        let label = |o: &mut String, name: &str| {
            let _ = write!(o, "{} ", st.bold(&format!("{name:<9}")));
        };
        // Logged text: no control character of it reaches the terminal.
        let shown = crate::output::printable_line;
        label(o, "session");
        let _ = writeln!(o, "{}", shown(&h.id));
        label(o, "created");
        let _ = writeln!(o, "{} ({})", timefmt::utc(h.created_at), h.created_at);
        if let Some(cwd) = &h.cwd {
            label(o, "cwd");
            let _ = writeln!(o, "{}", shown(cwd));
        }
        if let Some(parent) = &h.parent_session {
            label(o, "parent");
            match h.seed_length {
                Some(n) => {
                    let _ = writeln!(o, "{} (forked with its first {n} events)", shown(parent));
                }
                None => {
                    let _ = writeln!(o, "{}", shown(parent));
                }
            }
        }
        label(o, "source");
        let _ = writeln!(o, "{}", shown(&self.checked.origin));

        label(o, "events");
        match (t.first_time, t.last) {
            (Some(first_time), Some((last_seq, last_time))) => {
                let span = last_time.saturating_sub(first_time);
                let _ = write!(
                    o,
                    "{} (seq 0-{last_seq}) over {}, {}",
                    t.events,
                    timefmt::span(span),
                    count(t.turns, "turn")
                );
                if t.plugin > 0 {
                    let _ = write!(o, ", {}", count(t.plugin, "plugin event"));
                }
                o.push('\n');
            }
            _ => o.push_str("none\n"),
        }

        if let Some(seq) = self.session.settings_seq() {
            label(o, "settings");
            let _ = writeln!(
                o,
                "{} (seq {seq}, {})",
                settings_view::line(&self.session.settings()),
                count(t.settings_events, "settings event")
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

        let replaces = self.checked.report.shadowing.replaces();
        if !replaces.is_empty() {
            label(o, "replaces");
            let listed = &replaces[..replaces.len().min(MAX_REPLACES_LISTED)];
            let ty_of = |seq: u64| t.replace_types.get(&seq).map(EventType::as_str).unwrap_or_default();
            let seq_w = listed.iter().map(|&r| digits(r)).max().unwrap_or(1);
            let ty_w = listed.iter().map(|&r| ty_of(r).len()).max().unwrap_or(0);
            for (i, &r) in listed.iter().enumerate() {
                if i > 0 {
                    o.push_str(&" ".repeat(10));
                }
                let took = t.replace_took.get(&r).map(Vec::as_slice).unwrap_or_default();
                let _ = writeln!(o, "{r:>seq_w$} {:ty_w$}  shadowed {}", ty_of(r), shadowed_list(took));
            }
            if replaces.len() > listed.len() {
                let _ = writeln!(o, "{:10}… and {} more", "", replaces.len() - listed.len());
            }
        }

        if t.responses > 0 {
            label(o, "usage");
            let _ = write!(
                o,
                "{} input + {} output tokens over {}",
                t.usage.input_tokens,
                t.usage.output_tokens,
                count(t.responses, "response")
            );
            if let Some(c) = t.usage.cached_input_tokens {
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
            // The open turn is resident: what repair needs of the log.
            let closers = repair(self.session.resident());
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

    /// The timeline, one line per event of `events` as they come.
    fn timeline(
        &self,
        st: &Style,
        events: &mut dyn Iterator<Item = Event>,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let t = &self.totals;
        let Some(t0) = t.first_time else {
            let mut o = String::new();
            let _ = writeln!(o, "{}", st.bold("timeline  (no events)"));
            self.fatal_line(st, &mut o, 0);
            return out.write_all(o.as_bytes());
        };
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{}  times from {}   {} on the surface   {} shadowed",
            st.bold("timeline"),
            timefmt::utc(t0),
            st.green("●"),
            st.dim("○")
        );
        let seq_w = digits(t.events.saturating_sub(1)).max(3);
        let (time_w, type_w) = (t.time_w, t.type_w);
        let _ = writeln!(o, "{}", st.dim(&format!("{:>seq_w$}  {:>time_w$}    event", "seq", "time")));
        out.write_all(o.as_bytes())?;
        let mut settings: Option<palimpsest_core_session::payload::Settings> = None;
        let mut depths = Depth::default();
        for event in events {
            let mut o = String::new();
            let depth = depths.of(event.event_type());
            let time = timefmt::offset(i128::from(event.time()) - i128::from(t0));
            let seq = event.seq();
            // Only an event that joined the surface can have left it.
            let shadowed = event.surface_op().and(self.checked.report.shadowing.shadowed_by(seq));
            let mark = if self.on_surface.contains(&seq) {
                st.green("●")
            } else if shadowed.is_some() {
                st.dim("○")
            } else {
                " ".to_owned()
            };
            let ty = &crate::output::printable_line(event.event_type().as_str());
            let pad = type_w.saturating_sub(2 * depth + ty.chars().count());
            let mut summary = summarize(&event);
            let mut notes = Vec::new();
            if let Some(next) = settings_view::of_event(&event) {
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
                "  ".repeat(depth),
                st.kind(event.event_type(), ty),
                " ".repeat(pad),
            );
            let _ = writeln!(o, "{}", line.trim_end());
            for f in self.violations_at.get(&seq).into_iter().flatten() {
                let indent = seq_w + time_w + 6;
                let _ = writeln!(o, "{:indent$}{}", "", st.red(&format!("⚠ {}: {}", f.code, f.detail)));
            }
            out.write_all(o.as_bytes())?;
        }
        let mut o = String::new();
        self.fatal_line(st, &mut o, seq_w + time_w + 6);
        out.write_all(o.as_bytes())
    }

    /// Where checking stopped, if it did.
    fn fatal_line(&self, st: &Style, o: &mut String, indent: usize) {
        if let Some(f) = &self.checked.report.fatal {
            let _ = writeln!(
                o,
                "{:indent$}{}",
                "",
                // The error quotes what the log holds (a key's name, say):
                // shown, not obeyed.
                st.red(&crate::output::printable_line(&format!(
                    "✗ {}  (checking stopped here)",
                    f.to_error(&self.checked.origin)
                )))
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
            .map(|e| crate::output::printable_line(e.event_type().as_str()).chars().count())
            .max()
            .unwrap_or(0);
        for (i, &seq) in surface.iter().enumerate() {
            let Some(event) = self.session.event(seq) else { continue };
            let ty = crate::output::printable_line(event.event_type().as_str());
            let mut line = format!(
                "  {:>pos_w$}. {:>seq_w$}  {}{}  {}",
                i + 1,
                seq,
                st.kind(event.event_type(), &ty),
                " ".repeat(type_w.saturating_sub(ty.chars().count())),
                summarize(event)
            );
            if let Some(sources) = event.source_event_seqs().filter(|s| !s.is_empty()) {
                let _ = write!(line, "  ← cites {}", ranges(sources));
            }
            let _ = writeln!(o, "{}", line.trim_end());
        }
    }
}

/// Entries a replace took off the header lists one by one, at most.
const MAX_SHADOWED_LISTED: usize = 16;

/// What a replace took off, in surface order: every seq when there are a
/// few, else the first and the last few and how many (a compaction of
/// thousands of messages stays one line).
fn shadowed_list(took: &[u64]) -> String {
    if took.len() <= MAX_SHADOWED_LISTED {
        return join(took);
    }
    format!("{}, …, {} ({} entries)", join(&took[..3]), join(&took[took.len() - 2..]), took.len())
}

/// Indentation depth of each event as the log is read: 1 inside a turn, 2
/// inside a step; turn and step brackets sit at the level of what encloses
/// them.
#[derive(Debug, Default)]
struct Depth {
    turn: bool,
    step: bool,
}

impl Depth {
    /// The depth of the next event, of type `ty`.
    fn of(&mut self, ty: &EventType) -> usize {
        match ty {
            EventType::TurnStart => {
                (self.turn, self.step) = (true, false);
                0
            }
            EventType::TurnEnd => {
                (self.turn, self.step) = (false, false);
                0
            }
            EventType::StepStart => {
                self.step = true;
                usize::from(self.turn)
            }
            EventType::StepEnd => {
                self.step = false;
                usize::from(self.turn)
            }
            _ => usize::from(self.turn) + usize::from(self.step),
        }
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
