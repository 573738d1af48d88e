//! The Markdown export: a heading and a short list about the session, then
//! one paragraph per message under a bold header line (`**User** · seq 1 ·
//! +0.010s`), tool arguments and results in fenced code blocks, reasoning
//! as a quote, images inline as data URLs, and replaces as quoted markers.
//!
//! Message text is Markdown already (models write it), so it is kept as it
//! is, except that a `<` outside code is written `\<`: a renderer shows it
//! as text and never as HTML, so a message cannot inject markup.
//! Fences are made longer than any backtick run inside them.

use std::fmt::Write as _;

use palimpsest_core_session::payload::Block;

use super::{pretty_arguments, result_text, Doc, ExportView, Item, Msg};
use crate::inspect::{count, join, reason, usage};
use crate::settings_view;
use crate::timefmt;

/// The whole document.
pub(crate) fn render(doc: &Doc<'_>) -> String {
    let mut o = String::new();
    header(doc, &mut o);
    for item in &doc.items {
        match item {
            Item::TurnStart { turn, .. } => {
                let _ = writeln!(o, "## Turn {turn}\n");
            }
            Item::TurnEnd { turn, reason: r, seq, .. } => {
                if !matches!(r, palimpsest_core_session::payload::TurnEndReason::Completed) {
                    let _ = writeln!(o, "*Turn {turn} ended (seq {seq}): {}.*\n", escape_inline(&reason(r)));
                }
            }
            Item::Settings { seq, time, settings, changes, .. } => {
                let changed = if changes.is_empty() { "nothing".to_owned() } else { changes.join(", ") };
                let _ = writeln!(
                    o,
                    "*Settings (seq {seq}, {}; changes {changed}): {}.*\n",
                    doc.offset(*time),
                    escape_inline(&settings_view::line(settings))
                );
            }
            Item::Message(m) => match (&m.replaces, doc.view) {
                (Some(r), ExportView::Transcript) => marker(doc, m, &doc.marker(m, r), &mut o),
                _ => message(doc, m, &mut o),
            },
        }
    }
    if doc.items.is_empty() {
        o.push_str("*No messages.*\n");
    }
    o
}

fn header(doc: &Doc<'_>, o: &mut String) {
    let h = doc.session.header();
    let _ = writeln!(o, "# Session {}\n", escape_inline(&h.id));
    let what = match doc.view {
        ExportView::Transcript => {
            "transcript — every message as it was appended, in log order; \
             compactions and prunes are marked where they happened"
        }
        ExportView::Model => "model — what the model sees now: the surface, in order, with provenance",
    };
    let _ = writeln!(o, "- **View:** {what}");
    let _ = writeln!(o, "- **Created:** {}", timefmt::utc(h.created_at));
    if let Some(parent) = &h.parent_session {
        let at = h.seed_length.map(|n| format!(" after seq {}", n.saturating_sub(1))).unwrap_or_default();
        let _ = writeln!(o, "- **Forked from:** {}{at}", escape_inline(parent));
    }
    if let Some(cwd) = &h.cwd {
        let _ = writeln!(o, "- **Working directory:** `{}`", cwd.replace('`', "'"));
    }
    if let Some((seq, settings, _)) = &doc.settings {
        let _ = writeln!(o, "- **Settings:** {} (seq {seq})", escape_inline(&settings_view::line(settings)));
    }
    let events = doc.session.events().len();
    let _ = writeln!(
        o,
        "- **Log:** {}, {}; the model sees {} now (surface: {})",
        count(events, "event"),
        count(doc.turns, "turn"),
        count(doc.derived, "message"),
        if doc.session.surface().is_empty() { "empty".to_owned() } else { join(doc.session.surface()) }
    );
    o.push('\n');
}

/// The bold header line and body of one message.
fn message(doc: &Doc<'_>, m: &Msg<'_>, o: &mut String) {
    let mut head = match (doc.view, m.position) {
        (ExportView::Model, Some(p)) => format!("**{}. {}**", p + 1, m.role_label()),
        _ => format!("**{}**", m.role_label()),
    };
    let _ = write!(head, " · seq {} · {}", m.seq, doc.offset(m.time));
    if let Some(call) = m.call_id() {
        match doc.tool_name(call) {
            Some(name) => {
                let _ = write!(head, " · `{name}` `{call}`");
            }
            None => {
                let _ = write!(head, " · `{call}`");
            }
        }
    }
    if let Some(source) = m.source_label() {
        let _ = write!(head, " · {}", escape_inline(&source));
    }
    if let Some(u) = &m.usage {
        let _ = write!(head, " · {} tokens", usage(u));
    }
    if m.interrupted {
        head.push_str(" · interrupted");
    }
    if let Some(e) = &m.tool_error {
        let _ = write!(head, " · error `{}` `{}`", e.name, e.code);
    }
    match doc.view {
        ExportView::Transcript => {
            if let Some(by) = m.shadowed_by {
                let _ = write!(head, " · *no longer seen by the model (shadowed by seq {by})*");
            }
        }
        ExportView::Model => provenance(m, &mut head),
    }
    let _ = writeln!(o, "{head}\n");
    blocks(&m.message.content, o);
}

/// `· replace 1..12 · cites 19, 1, 6, 18, 12` (model view).
fn provenance(m: &Msg<'_>, head: &mut String) {
    match m.surface_op {
        Some(palimpsest_core_session::SurfaceOp::Replace { start, end }) => {
            let range = if start == end { start.to_string() } else { format!("{start}..{end}") };
            let _ = write!(head, " · replace {range}");
        }
        _ => head.push_str(" · append"),
    }
    match m.sources {
        Some([]) => head.push_str(" · cites nothing (empty stream)"),
        Some(s) => {
            let _ = write!(head, " · cites {}", join(s));
        }
        None => {}
    }
}

/// A replace in the transcript: the marker, then what replaced, quoted.
fn marker(doc: &Doc<'_>, m: &Msg<'_>, line: &str, o: &mut String) {
    let _ = writeln!(o, "> **— {line} —**");
    let mut body = String::new();
    blocks(&m.message.content, &mut body);
    let source = m.source_label().map(|s| format!(" from {}", escape_inline(&s))).unwrap_or_default();
    let instead = match m.shadowed_by {
        Some(by) => format!("What the model saw instead{source}, until seq {by} replaced it too"),
        None => format!("What the model sees instead{source}"),
    };
    let _ = writeln!(o, ">\n> *{instead} ({}):*\n>", doc.offset(m.time));
    for l in body.trim_end().lines() {
        if l.is_empty() {
            o.push_str(">\n");
        } else {
            let _ = writeln!(o, "> {l}");
        }
    }
    o.push('\n');
}

fn blocks(content: &[Block], o: &mut String) {
    if content.is_empty() {
        o.push_str("*(no content)*\n\n");
    }
    for b in content {
        match b {
            Block::Text { text } => {
                let _ = writeln!(o, "{}\n", escape_text(text.trim_end()));
            }
            Block::Reasoning { text, .. } => {
                o.push_str("> *Reasoning:*\n>\n");
                for l in escape_text(text.trim_end()).lines() {
                    let _ = writeln!(o, ">{}{l}", if l.is_empty() { "" } else { " " });
                }
                o.push('\n');
            }
            Block::ToolCall { id, name, arguments } => {
                let _ = writeln!(o, "Tool call `{}` · `{}`\n", name.replace('`', "'"), id.replace('`', "'"));
                let args = pretty_arguments(arguments);
                let lang = if args.trim_start().starts_with(['{', '[']) { "json" } else { "text" };
                fenced(&args, lang, o);
            }
            Block::ToolResult { is_error, content, .. } => {
                if *is_error {
                    o.push_str("*The tool failed:*\n\n");
                }
                let text = result_text(content);
                if !text.is_empty() || content.iter().all(|b| !matches!(b, Block::Image { .. })) {
                    fenced(&text, "text", o);
                }
                for inner in content {
                    if let Block::Image { .. } = inner {
                        blocks(std::slice::from_ref(inner), o);
                    }
                }
            }
            Block::Image { media_type, data } => {
                if super::html::safe_image(media_type, data) {
                    let _ =
                        writeln!(o, "![image ({media_type})](data:{media_type};base64,{})\n", compact(data));
                } else {
                    let _ = writeln!(
                        o,
                        "*[an image of type `{}` that is not shown]*\n",
                        media_type.replace('`', "'")
                    );
                }
            }
        }
    }
}

/// Base64 without the line breaks some encoders put in.
fn compact(data: &str) -> String {
    data.chars().filter(|c| !c.is_whitespace()).collect()
}

/// A fenced block longer than any backtick run inside it.
fn fenced(text: &str, lang: &str, o: &mut String) {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let body = text.trim_end_matches('\n');
    let _ = writeln!(o, "{fence}{lang}\n{body}\n{fence}\n");
}

/// Message text as Markdown, with every `<` outside code escaped, so a
/// renderer never takes it for HTML. Fenced blocks (```` ``` ```` or `~~~`)
/// and inline code spans are left alone: their content is shown literally.
pub(crate) fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<String> = None;
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let opener: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
        let is_fence =
            indent < 4 && opener.len() >= 3 && opener.chars().all(|c| c == opener.as_bytes()[0] as char);
        match &fence {
            Some(open) => {
                out.push_str(line);
                if is_fence && opener.starts_with(open.as_str()) && trimmed[opener.len()..].trim().is_empty()
                {
                    fence = None;
                }
            }
            None if is_fence => {
                out.push_str(line);
                fence = Some(opener);
            }
            None => out.push_str(&escape_line(line)),
        }
    }
    out
}

/// One line outside fences: `<` escaped except inside code spans.
fn escape_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|&&c| c == '`').count();
            // The span closes at the next run of exactly the same length.
            let mut j = i + run;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let r = chars[j..].iter().take_while(|&&c| c == '`').count();
                    if r == run {
                        close = Some(j + r);
                        break;
                    }
                    j += r;
                } else {
                    j += 1;
                }
            }
            let end = close.unwrap_or(i + run);
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        if chars[i] == '<' {
            out.push('\\');
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Text inside a header line: one line, `<` escaped.
fn escape_inline(text: &str) -> String {
    escape_line(&text.replace(['\n', '\r'], " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angle_brackets_are_escaped_outside_code_only() {
        assert_eq!(escape_text("<script>alert(1)</script>"), "\\<script>alert(1)\\</script>");
        assert_eq!(escape_text("a `<b>` c <d>"), "a `<b>` c \\<d>");
        assert_eq!(escape_text("``x ` <y>`` <z>"), "``x ` <y>`` \\<z>");
        assert_eq!(escape_text("```html\n<p>\n```\n<p>"), "```html\n<p>\n```\n\\<p>");
        assert_eq!(escape_text("~~~~\n<p>\n~~~\n<q>\n~~~~\n<r>"), "~~~~\n<p>\n~~~\n<q>\n~~~~\n\\<r>");
        assert_eq!(escape_text("an `unclosed <span>"), "an `unclosed \\<span>");
    }

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        let mut o = String::new();
        fenced("a ```` b", "text", &mut o);
        assert_eq!(o, "`````text\na ```` b\n`````\n\n");
        let mut o = String::new();
        fenced("plain\n", "json", &mut o);
        assert_eq!(o, "```json\nplain\n```\n\n");
    }
}
