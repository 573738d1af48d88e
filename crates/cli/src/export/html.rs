//! The HTML export: one self-contained file. The CSS is inline, there is no
//! script (tool calls, tool results, reasoning and compaction summaries
//! fold with `<details>`, which needs none), images are `data:` URLs, and a
//! Content-Security-Policy forbids everything else, so the file reads the
//! same offline and can load nothing even if a message tried.
//!
//! Every piece of text from the log goes through [`escape`]: a message that
//! says `<script>` shows those characters. Links are fragments inside the
//! file (`#seq-20`) and nothing else.

use std::fmt::Write as _;
use std::io::Write;

use palimpsest_core_session::payload::{Block, TurnEndReason};
use palimpsest_core_session::SurfaceOp;

use super::{pretty_arguments, result_text, Doc, ExportView, Item, Msg, Render};
use crate::describe::{count, join, reason, usage};
use crate::settings_view;
use crate::timefmt;

/// The stylesheet: light, with a dark variant; roles told apart by colour
/// and by label, so the page reads in grey too.
const CSS: &str = r#"
:root {
  --bg: #f6f7f9; --card: #ffffff; --text: #1d2430; --muted: #667085; --line: #e3e6eb;
  --code-bg: #f1f3f6; --link: #2f5fb3;
  --user: #2f6fdb; --user-bg: #edf3ff;
  --assistant: #17915a; --assistant-bg: #ffffff;
  --tool: #c27803; --tool-bg: #fffaf0;
  --context: #7b8494; --context-bg: #f4f5f7;
  --steering: #d9480f; --steering-bg: #fff3eb;
  --summary: #7048e8; --summary-bg: #f4f0ff;
  --error: #c92a2a;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #14171c; --card: #1c2027; --text: #e4e7ec; --muted: #98a2b3; --line: #2e3440;
    --code-bg: #232830; --link: #8ab4f8;
    --user-bg: #1a2436; --assistant-bg: #1c2027; --tool-bg: #2a2417;
    --context-bg: #20242b; --steering-bg: #2d1f17; --summary-bg: #231d36;
  }
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body {
  margin: 0 auto; max-width: 880px; padding: 28px 24px 64px;
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--text); background: var(--bg);
}
a { color: var(--link); text-decoration: none; }
a:hover { text-decoration: underline; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 13px; }
header.session {
  background: var(--card); border: 1px solid var(--line); border-radius: 12px;
  padding: 18px 22px; margin-bottom: 26px; box-shadow: 0 1px 2px rgba(16, 24, 40, .05);
}
.eyebrow { color: var(--muted); font-size: 12px; letter-spacing: .08em; text-transform: uppercase; }
h1 { margin: 4px 0 12px; font-size: 24px; line-height: 1.25; overflow-wrap: anywhere; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 12px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
p.view-note { margin: 0 0 12px; color: var(--muted); }
ul.legend { list-style: none; padding: 0; margin: 0; display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 13px; color: var(--muted); }
ul.legend li::before {
  content: ""; display: inline-block; width: 10px; height: 10px; border-radius: 3px;
  margin-right: 6px; vertical-align: -1px; background: var(--swatch);
}
h2.turn {
  display: flex; align-items: baseline; gap: 10px; margin: 30px 0 12px; padding-bottom: 6px;
  font-size: 17px; border-bottom: 2px solid var(--line);
}
.when, .seq { color: var(--muted); font-size: 12px; font-weight: normal; font-variant-numeric: tabular-nums; }
article.msg {
  position: relative; background: var(--card); border: 1px solid var(--line);
  border-left: 4px solid var(--accent); border-radius: 10px; padding: 10px 16px 12px; margin: 12px 0;
  box-shadow: 0 1px 2px rgba(16, 24, 40, .04);
}
.user { --accent: var(--user); --swatch: var(--user); }
.assistant { --accent: var(--assistant); --swatch: var(--assistant); }
.tool { --accent: var(--tool); --swatch: var(--tool); }
.context { --accent: var(--context); --swatch: var(--context); }
.steering { --accent: var(--steering); --swatch: var(--steering); }
.summary { --accent: var(--summary); --swatch: var(--summary); }
article.user { background: var(--user-bg); margin-right: 48px; }
article.assistant { background: var(--assistant-bg); margin-left: 48px; }
article.tool { background: var(--tool-bg); margin-left: 48px; }
article.context { background: var(--context-bg); }
article.steering { background: var(--steering-bg); margin-right: 48px; }
article.summary { background: var(--summary-bg); border-style: dashed; border-left-style: solid; }
.meta { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 10px; margin-bottom: 6px; }
.role { font-weight: 650; color: var(--accent); }
.pos {
  display: inline-block; min-width: 22px; padding: 0 6px; border-radius: 11px; text-align: center;
  background: var(--accent); color: #fff; font-size: 12px; font-weight: 650;
}
.badge {
  font-size: 12px; padding: 1px 8px; border-radius: 999px; border: 1px solid var(--line);
  color: var(--muted); background: var(--card);
}
.badge.error { color: var(--error); border-color: var(--error); }
.prov { font-size: 12px; color: var(--muted); margin: -2px 0 8px; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0; }
details { margin: 8px 0; border: 1px solid var(--line); border-radius: 8px; background: var(--card); }
details > summary {
  cursor: pointer; padding: 6px 12px; font-size: 13px; color: var(--muted); overflow-wrap: anywhere;
}
details > summary code { color: var(--text); }
details[open] > summary { border-bottom: 1px solid var(--line); }
details > .inner { padding: 4px 12px; }
pre {
  margin: 8px 12px 10px; padding: 10px 12px; background: var(--code-bg); border-radius: 6px;
  overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 520px; overflow-y: auto;
}
.text code, details > summary code { background: var(--code-bg); padding: 1px 4px; border-radius: 4px; }
pre.code { margin: 8px 0; }
.chip {
  display: inline-block; font-size: 11px; text-transform: uppercase; letter-spacing: .05em;
  padding: 0 6px; border-radius: 4px; background: var(--code-bg); color: var(--muted); margin-right: 4px;
}
details.reasoning > .inner { font-style: italic; color: var(--muted); }
img.image { display: block; max-width: 100%; height: auto; margin: 8px 0; border-radius: 6px; border: 1px solid var(--line); }
.marker { margin: 22px 0; }
.marker .rule {
  display: flex; align-items: center; gap: 12px; color: var(--summary); font-size: 13px; font-weight: 600;
}
.marker .rule::before, .marker .rule::after { content: ""; flex: 1; border-top: 1px dashed var(--summary); }
.marker details { margin: 8px 48px 0; background: var(--summary-bg); }
.ended { text-align: center; color: var(--muted); font-size: 13px; margin: 14px 0; }
.ended.bad { color: var(--error); }
footer { margin-top: 36px; color: var(--muted); font-size: 12px; text-align: center; }
"#;

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether an image block can be shown as a `data:` URL: an `image/...`
/// media type of plain characters, and base64 data.
pub(crate) fn safe_image(media_type: &str, data: &str) -> bool {
    let subtype = media_type.strip_prefix("image/").unwrap_or_default();
    !subtype.is_empty()
        && subtype.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
        && !data.trim().is_empty()
        && data.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b) || b.is_ascii_whitespace())
}

/// The HTML writer: the head and header, then each item as it is made.
#[derive(Debug)]
pub(crate) struct Html;

impl Render for Html {
    fn begin(&mut self, doc: &Doc<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        let h = doc.session.header();
        let mut o = String::with_capacity(16 * 1024);
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">\n\
             <meta name=\"generator\" content=\"palimpsest export\">\n\
             <title>{} — {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
            escape(&h.id),
            doc.view.name()
        );
        header(doc, &mut o);
        o.push_str("<main>\n");
        Ok(out.write_all(o.as_bytes())?)
    }

    fn item(&mut self, doc: &Doc<'_>, item: &Item<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        let mut o = String::new();
        match item {
            Item::TurnStart { seq, time, turn } => {
                let _ = writeln!(
                    o,
                    "<h2 class=\"turn\" id=\"seq-{seq}\">Turn {turn} <span class=\"when\">{}</span></h2>",
                    doc.offset(*time)
                );
            }
            Item::TurnEnd { seq, turn, reason: r, .. } => {
                if !matches!(r, TurnEndReason::Completed) {
                    let _ = writeln!(
                        o,
                        "<p class=\"ended bad\" id=\"seq-{seq}\">Turn {turn} ended: {}</p>",
                        escape(&reason(r))
                    );
                }
            }
            Item::Settings { seq, time, settings, changes, .. } => {
                let changed = if changes.is_empty() { "nothing".to_owned() } else { changes.join(", ") };
                let _ = writeln!(
                    o,
                    "<p class=\"ended settings\" id=\"seq-{seq}\">Settings (seq {seq}, {}; changes {}): {}</p>",
                    doc.offset(*time),
                    escape(&changed),
                    escape(&settings_view::line(settings))
                );
            }
            Item::Message(m) => match (&m.replaces, doc.view) {
                (Some(r), ExportView::Transcript) => marker(doc, m, &doc.marker(m, r), &mut o),
                _ => message(doc, m, &mut o),
            },
        }
        Ok(out.write_all(o.as_bytes())?)
    }

    fn end(&mut self, _: &Doc<'_>, any: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        let mut o = String::new();
        if !any {
            o.push_str("<p class=\"ended\">No messages.</p>\n");
        }
        o.push_str("</main>\n<footer>Exported by palimpsest. Times are from the first event. Click a tool call, a result or a summary to unfold it.</footer>\n</body>\n</html>\n");
        Ok(out.write_all(o.as_bytes())?)
    }
}

fn header(doc: &Doc<'_>, o: &mut String) {
    let h = doc.session.header();
    let (title, note) = match doc.view {
        ExportView::Transcript => (
            "transcript",
            "What the person saw: every message as it was appended, in log order, including those the \
             model no longer sees. Compactions and prunes are marked where they happened.",
        ),
        ExportView::Model => (
            "what the model sees",
            "What the model sees now: the surface, in order. Each message shows its position, its seq, \
             how it entered the surface and what it was built from.",
        ),
    };
    let _ = writeln!(
        o,
        "<header class=\"session\">\n<div class=\"eyebrow\">Palimpsest session · {title}</div>\n<h1>{}</h1>\n<dl class=\"facts\">",
        escape(&h.id)
    );
    let fact = |o: &mut String, name: &str, value: &str| {
        let _ = writeln!(o, "<dt>{name}</dt><dd>{value}</dd>");
    };
    fact(o, "Created", &timefmt::utc(h.created_at));
    if let Some(parent) = &h.parent_session {
        let at = h.seed_length.map(|n| format!(" after seq {}", n.saturating_sub(1))).unwrap_or_default();
        fact(o, "Forked from", &format!("{}{at}", escape(parent)));
    }
    if let Some(cwd) = &h.cwd {
        fact(o, "Directory", &format!("<code>{}</code>", escape(cwd)));
    }
    if let Some((seq, settings, _)) = &doc.settings {
        fact(o, "Settings", &format!("{} (seq {seq})", escape(&settings_view::line(settings))));
    }
    let surface = doc.session.surface();
    fact(
        o,
        "Log",
        &format!(
            "{}, {}; the model sees {} now{}",
            count(doc.events as usize, "event"),
            count(doc.turns, "turn"),
            count(doc.derived, "message"),
            if surface.is_empty() { String::new() } else { format!(" (surface {})", join(surface)) }
        ),
    );
    let _ = writeln!(o, "</dl>\n<p class=\"view-note\">{note}</p>\n<ul class=\"legend\">");
    for (class, label) in [
        ("user", "user"),
        ("assistant", "assistant"),
        ("tool", "tool result"),
        ("context", "injected context"),
        ("steering", "steering"),
        ("summary", "summary / replacement"),
    ] {
        let _ = writeln!(o, "<li class=\"{class}\">{label}</li>");
    }
    o.push_str("</ul>\n</header>\n");
}

fn message(doc: &Doc<'_>, m: &Msg<'_>, o: &mut String) {
    let class = m.role_class();
    let _ = write!(o, "<article class=\"msg {class}\" id=\"seq-{}\">\n<div class=\"meta\">", m.seq);
    if let (ExportView::Model, Some(p)) = (doc.view, m.position) {
        let _ = write!(o, "<span class=\"pos\" title=\"position on the surface\">{}</span>", p + 1);
    }
    let _ = write!(o, "<span class=\"role\">{}</span>", m.role_label());
    if let Some(source) = m.source_label() {
        let _ = write!(o, "<span class=\"when\">{}</span>", escape(&source));
    }
    let _ = write!(
        o,
        "<span class=\"seq\">seq {}</span><span class=\"when\" title=\"{}\">{}</span>",
        m.seq,
        timefmt::utc(m.time),
        doc.offset(m.time)
    );
    if let Some(u) = &m.usage {
        let _ = write!(o, "<span class=\"badge\">{} tokens</span>", usage(u));
    }
    if m.interrupted {
        o.push_str("<span class=\"badge error\">interrupted</span>");
    }
    if let Some(e) = &m.tool_error {
        let _ = write!(o, "<span class=\"badge error\">{} · {}</span>", escape(&e.name), escape(&e.code));
    }
    if let (ExportView::Transcript, Some(by)) = (doc.view, m.shadowed_by) {
        let _ = write!(
            o,
            "<a class=\"badge\" href=\"#seq-{by}\" title=\"the model no longer sees this message\">shadowed by seq {by}</a>"
        );
    }
    o.push_str("</div>\n");
    if doc.view == ExportView::Model {
        let mut prov = match m.surface_op {
            Some(SurfaceOp::Replace { start, end }) if start == end => format!("entered by replace {start}"),
            Some(SurfaceOp::Replace { start, end }) => format!("entered by replace {start}..{end}"),
            _ => "entered by append".to_owned(),
        };
        match m.sources {
            Some([]) => prov.push_str(" · cites nothing (an empty stream)"),
            Some(s) => {
                let _ = write!(prov, " · cites {}", join(s));
            }
            None => {}
        }
        let _ = writeln!(o, "<div class=\"prov\">{prov}</div>");
    }
    blocks(doc, m, &m.message.content, o);
    o.push_str("</article>\n");
}

/// A replace in the transcript: a dashed rule with the marker, and what the
/// model sees instead, folded.
fn marker(doc: &Doc<'_>, m: &Msg<'_>, line: &str, o: &mut String) {
    let _ = writeln!(
        o,
        "<div class=\"marker\" id=\"seq-{}\">\n<div class=\"rule\"><span>— {} —</span></div>",
        m.seq,
        escape(line)
    );
    let from = m.source_label().map(|s| format!(" from {}", escape(&s))).unwrap_or_default();
    let instead = match m.shadowed_by {
        Some(by) => format!(
            "What the model saw instead{from}, until <a href=\"#seq-{by}\">seq {by}</a> replaced it too"
        ),
        None => format!("What the model sees instead{from}"),
    };
    let _ = writeln!(
        o,
        "<details><summary>{instead} <span class=\"when\">{}</span></summary>\n<div class=\"inner\">",
        doc.offset(m.time)
    );
    blocks(doc, m, &m.message.content, o);
    o.push_str("</div>\n</details>\n</div>\n");
}

fn blocks(doc: &Doc<'_>, m: &Msg<'_>, content: &[Block], o: &mut String) {
    for b in content {
        match b {
            Block::Text { text } => rich_text(text.trim_end(), o),
            Block::Reasoning { text, .. } => {
                let _ = writeln!(
                    o,
                    "<details class=\"reasoning\"><summary><span class=\"chip\">reasoning</span></summary>\
                     <div class=\"inner\"><div class=\"text\">{}</div></div></details>",
                    escape(text.trim_end())
                );
            }
            Block::ToolCall { id, name, arguments } => {
                let arguments = pretty_arguments(arguments);
                let _ = writeln!(
                    o,
                    "<details class=\"tool-call\"{}><summary><span class=\"chip\">tool call</span> <code>{}</code> · {}</summary>\
                     <pre><code>{}</code></pre></details>",
                    open_if(arguments.lines().count() <= OPEN_UP_TO_LINES),
                    escape(name),
                    escape(id),
                    escape(&arguments)
                );
            }
            Block::ToolResult { tool_call_id, is_error, content } => {
                let text = result_text(content);
                let lines = text.lines().count();
                let name = doc.tool_name(tool_call_id).map(|n| format!("<code>{}</code> · ", escape(n)));
                let state = if *is_error { "<span class=\"badge error\">error</span> " } else { "" };
                let _ = write!(
                    o,
                    "<details class=\"tool-result\"{}><summary><span class=\"chip\">result</span> {state}{}{} · {}, {}</summary>",
                    open_if(lines <= OPEN_UP_TO_LINES),
                    name.unwrap_or_default(),
                    escape(tool_call_id),
                    count(lines, "line"),
                    count(text.chars().count(), "character")
                );
                if !text.is_empty() {
                    let _ = write!(o, "<pre><code>{}</code></pre>", escape(&text));
                }
                let images: Vec<Block> =
                    content.iter().filter(|b| matches!(b, Block::Image { .. })).cloned().collect();
                if !images.is_empty() {
                    o.push_str("<div class=\"inner\">");
                    blocks(doc, m, &images, o);
                    o.push_str("</div>");
                }
                o.push_str("</details>\n");
            }
            Block::Image { media_type, data } => {
                if safe_image(media_type, data) {
                    let data: String = data.chars().filter(|c| !c.is_whitespace()).collect();
                    let _ = writeln!(
                        o,
                        "<img class=\"image\" alt=\"image ({})\" src=\"data:{};base64,{data}\">",
                        escape(media_type),
                        escape(media_type)
                    );
                } else {
                    let _ = writeln!(
                        o,
                        "<div class=\"text\"><span class=\"badge\">an image of type {} that is not shown</span></div>",
                        escape(media_type)
                    );
                }
            }
        }
    }
    if content.is_empty() {
        let _ = writeln!(o, "<div class=\"text when\">(no content; seq {})</div>", m.seq);
    }
}

/// Tool calls and results this short are shown unfolded.
const OPEN_UP_TO_LINES: usize = 4;

fn open_if(open: bool) -> &'static str {
    if open {
        " open"
    } else {
        ""
    }
}

/// Message text, with the two bits of Markdown that matter most for
/// reading a transcript: fenced code blocks become `<pre>`, and inline code
/// spans `<code>`. Everything else is shown as written (line breaks kept);
/// nothing becomes a link or markup, and everything is escaped.
fn rich_text(text: &str, o: &mut String) {
    let mut para: Vec<&str> = Vec::new();
    let mut lines = text.split('\n');
    let flush = |para: &mut Vec<&str>, o: &mut String| {
        if !para.is_empty() {
            let joined = para.join("\n");
            if !joined.trim().is_empty() {
                let _ = writeln!(o, "<div class=\"text\">{}</div>", inline_code(joined.trim_matches('\n')));
            }
            para.clear();
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start_matches(' ');
        let fence: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
        let is_fence =
            line.len() - trimmed.len() < 4 && fence.len() >= 3 && fence.chars().all(|c| fence.starts_with(c));
        if !is_fence {
            para.push(line);
            continue;
        }
        flush(&mut para, o);
        let lang = trimmed[fence.len()..].trim();
        let mut code: Vec<&str> = Vec::new();
        for inner in lines.by_ref() {
            let t = inner.trim_start_matches(' ');
            if t.starts_with(fence.as_str()) && t.trim_end().chars().all(|c| fence.starts_with(c)) {
                break;
            }
            code.push(inner);
        }
        let label = if lang.is_empty() { String::new() } else { format!(" data-lang=\"{}\"", escape(lang)) };
        let _ = writeln!(o, "<pre class=\"code\"{label}><code>{}</code></pre>", escape(&code.join("\n")));
    }
    flush(&mut para, o);
}

/// Escapes `text`, turning `` `code` `` spans into `<code>`.
fn inline_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        let run = rest[start..].chars().take_while(|&c| c == '`').count();
        let ticks = &rest[start..start + run];
        let after = &rest[start + run..];
        // The span closes at the next run of exactly as many backticks.
        let mut search = 0;
        let mut close = None;
        while let Some(i) = after[search..].find(ticks) {
            let at = search + i;
            let len = after[at..].chars().take_while(|&c| c == '`').count();
            if len == run {
                close = Some(at);
                break;
            }
            search = at + len;
        }
        match close {
            Some(end) => {
                out.push_str(&escape(&rest[..start]));
                let _ = write!(out, "<code>{}</code>", escape(&after[..end]));
                rest = &after[end + run..];
            }
            None => {
                out.push_str(&escape(&rest[..start + run]));
                rest = after;
            }
        }
    }
    out.push_str(&escape(rest));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }

    fn rich(text: &str) -> String {
        let mut o = String::new();
        rich_text(text, &mut o);
        o
    }

    #[test]
    fn fences_and_code_spans_render_and_everything_is_escaped() {
        assert_eq!(rich("a `<b>` c <d>"), "<div class=\"text\">a <code>&lt;b&gt;</code> c &lt;d&gt;</div>\n");
        assert_eq!(
            rich("see:\n\n```html\n<p>\n```\nafter"),
            "<div class=\"text\">see:</div>\n<pre class=\"code\" data-lang=\"html\"><code>&lt;p&gt;</code></pre>\n\
             <div class=\"text\">after</div>\n"
        );
        assert_eq!(rich("an `unclosed <x>"), "<div class=\"text\">an `unclosed &lt;x&gt;</div>\n");
        assert_eq!(rich("``a ` b`` c"), "<div class=\"text\"><code>a ` b</code> c</div>\n");
        assert_eq!(
            rich("```\nnever closed <x>"),
            "<pre class=\"code\"><code>never closed &lt;x&gt;</code></pre>\n"
        );
    }

    #[test]
    fn only_plain_image_types_and_base64_are_inlined() {
        assert!(safe_image("image/png", "iVBORw0KGgo=\n"));
        assert!(safe_image("image/svg+xml", "PHN2Zz4="));
        assert!(!safe_image("image/png\" onerror=\"x", "AAAA"));
        assert!(!safe_image("text/html", "AAAA"));
        assert!(!safe_image("image/png", "AA\"><script>"));
        assert!(!safe_image("image/", "AAAA"));
        assert!(!safe_image("image/png", " "));
    }
}
