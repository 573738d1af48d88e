//! The Markdown export: a heading and a short list about the session, then
//! one paragraph per message under a bold header line (`**User** · seq 1 ·
//! +0.010s`), tool arguments and results in fenced code blocks, reasoning
//! as a quote, images inline as data URLs, and replaces as quoted markers.
//!
//! Nothing a user, a model or a tool wrote is written here as it is: every
//! piece goes through one of the escaping functions of [`super::md`]
//! (inline text, code span, fenced block, link destination, message text
//! parsed and written back), so a renderer with HTML enabled never finds a
//! tag or a `javascript:` link in the export.

use std::fmt::Write as _;
use std::io::Write;

use palimpsest_core_session::payload::Block;

use super::md::{code, line, Md};
use super::{pretty_arguments, result_text, Doc, ExportView, Item, Msg, Render};
use crate::describe::{count, join, reason, usage};
use crate::settings_view;
use crate::timefmt;

/// The Markdown writer: a [`Md`] whose text is passed on after each item.
#[derive(Debug, Default)]
pub(crate) struct Markdown {
    o: Md,
}

impl Render for Markdown {
    fn begin(&mut self, doc: &Doc<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        header(doc, &mut self.o);
        Ok(out.write_all(self.o.take().as_bytes())?)
    }

    fn item(&mut self, doc: &Doc<'_>, item: &Item<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        let o = &mut self.o;
        match item {
            Item::TurnStart { turn, .. } => o.paragraph(&format!("## Turn {turn}")),
            Item::TurnEnd { turn, reason: r, seq, .. } => {
                if !matches!(r, palimpsest_core_session::payload::TurnEndReason::Completed) {
                    o.paragraph(&format!("*Turn {turn} ended (seq {seq}): {}.*", line(&reason(r))));
                }
            }
            Item::Settings { seq, time, settings, changes, .. } => {
                let changed = if changes.is_empty() { "nothing".to_owned() } else { changes.join(", ") };
                o.paragraph(&format!(
                    "*Settings (seq {seq}, {}; changes {}): {}.*",
                    doc.offset(*time),
                    line(&changed),
                    line(&settings_view::line(settings))
                ));
            }
            Item::Message(m) => match (&m.replaces, doc.view) {
                (Some(r), ExportView::Transcript) => marker(doc, m, &doc.marker(m, r), o),
                _ => message(doc, m, o),
            },
        }
        Ok(out.write_all(self.o.take().as_bytes())?)
    }

    fn end(&mut self, _: &Doc<'_>, any: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        if !any {
            self.o.paragraph("*No messages.*");
        }
        Ok(out.write_all(std::mem::take(&mut self.o).finish().as_bytes())?)
    }
}

fn header(doc: &Doc<'_>, o: &mut Md) {
    let h = doc.session.header();
    o.paragraph(&format!("# Session {}", line(&h.id)));
    let what = match doc.view {
        ExportView::Transcript => {
            "transcript — every message as it was appended, in log order; \
             compactions and prunes are marked where they happened"
        }
        ExportView::Model => "model — what the model sees now: the surface, in order, with provenance",
    };
    let mut list = format!("- **View:** {what}\n- **Created:** {}", timefmt::utc(h.created_at));
    if let Some(parent) = &h.parent_session {
        let at = h.seed_length.map(|n| format!(" after seq {}", n.saturating_sub(1))).unwrap_or_default();
        let _ = write!(list, "\n- **Forked from:** {}{at}", line(parent));
    }
    if let Some(cwd) = &h.cwd {
        let _ = write!(list, "\n- **Working directory:** {}", code(cwd));
    }
    if let Some((seq, settings, _)) = &doc.settings {
        let _ = write!(list, "\n- **Settings:** {} (seq {seq})", line(&settings_view::line(settings)));
    }
    let _ = write!(
        list,
        "\n- **Log:** {}, {}; the model sees {} now (surface: {})",
        count(doc.events as usize, "event"),
        count(doc.turns, "turn"),
        count(doc.derived, "message"),
        if doc.session.surface().is_empty() { "empty".to_owned() } else { join(doc.session.surface()) }
    );
    o.paragraph(&list);
}

/// The bold header line and body of one message.
fn message(doc: &Doc<'_>, m: &Msg<'_>, o: &mut Md) {
    let mut head = match (doc.view, m.position) {
        (ExportView::Model, Some(p)) => format!("**{}. {}**", p + 1, m.role_label()),
        _ => format!("**{}**", m.role_label()),
    };
    let _ = write!(head, " · seq {} · {}", m.seq, doc.offset(m.time));
    if let Some(call) = m.call_id() {
        match doc.tool_name(call) {
            Some(name) => {
                let _ = write!(head, " · {} {}", code(name), code(call));
            }
            None => {
                let _ = write!(head, " · {}", code(call));
            }
        }
    }
    if let Some(source) = m.source_label() {
        let _ = write!(head, " · {}", line(&source));
    }
    if let Some(u) = &m.usage {
        let _ = write!(head, " · {} tokens", usage(u));
    }
    if m.interrupted {
        head.push_str(" · interrupted");
    }
    if let Some(e) = &m.tool_error {
        let _ = write!(head, " · error {} {}", code(&e.name), code(&e.code));
    }
    match doc.view {
        ExportView::Transcript => {
            if let Some(by) = m.shadowed_by {
                let _ = write!(head, " · *no longer seen by the model (shadowed by seq {by})*");
            }
        }
        ExportView::Model => provenance(m, &mut head),
    }
    o.paragraph(&head);
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
fn marker(doc: &Doc<'_>, m: &Msg<'_>, marker_line: &str, o: &mut Md) {
    o.quote();
    o.paragraph(&format!("**— {} —**", line(marker_line)));
    let source = m.source_label().map(|s| format!(" from {}", line(&s))).unwrap_or_default();
    let instead = match m.shadowed_by {
        Some(by) => format!("What the model saw instead{source}, until seq {by} replaced it too"),
        None => format!("What the model sees instead{source}"),
    };
    o.paragraph(&format!("*{instead} ({}):*", doc.offset(m.time)));
    blocks(&m.message.content, o);
    o.end_quote();
}

fn blocks(content: &[Block], o: &mut Md) {
    if content.is_empty() {
        o.paragraph("*(no content)*");
    }
    for b in content {
        match b {
            Block::Text { text } => o.message(text.trim_end()),
            Block::Reasoning { text, .. } => {
                o.quote();
                o.paragraph("*Reasoning:*");
                o.message(text.trim_end());
                o.end_quote();
            }
            Block::ToolCall { id, name, arguments } => {
                o.paragraph(&format!("Tool call {} · {}", code(name), code(id)));
                let args = pretty_arguments(arguments);
                let lang = if args.trim_start().starts_with(['{', '[']) { "json" } else { "text" };
                o.fenced(&args, lang);
            }
            Block::ToolResult { is_error, content, .. } => {
                if *is_error {
                    o.paragraph("*The tool failed:*");
                }
                let text = result_text(content);
                if !text.is_empty() || content.iter().all(|b| !matches!(b, Block::Image { .. })) {
                    o.fenced(&text, "text");
                }
                for inner in content {
                    if let Block::Image { .. } = inner {
                        blocks(std::slice::from_ref(inner), o);
                    }
                }
            }
            Block::Image { media_type, data } => {
                if super::html::safe_image(media_type, data) {
                    // `safe_image` allows only `image/[a-z0-9+.-]+` and base64
                    // characters: nothing here needs escaping.
                    o.paragraph(&format!(
                        "![image ({})](data:{media_type};base64,{})",
                        line(media_type),
                        compact(data)
                    ));
                } else {
                    o.paragraph(&format!("*\\[an image of type {} that is not shown\\]*", code(media_type)));
                }
            }
        }
    }
}

/// Base64 without the line breaks some encoders put in.
fn compact(data: &str) -> String {
    data.chars().filter(|c| !c.is_whitespace()).collect()
}

#[cfg(test)]
mod tests {
    use super::super::md::{destination, Md};
    use super::*;

    fn message(text: &str) -> String {
        let mut o = Md::default();
        o.message(text);
        o.finish()
    }

    #[test]
    fn angle_brackets_in_text_are_escaped_and_code_is_kept() {
        // An HTML block is shown as its source.
        assert_eq!(message("<script>alert(1)</script>"), "```html\n<script>alert(1)</script>\n```\n");
        assert_eq!(message("a <script>b"), "a \\<script\\>b\n");
        assert_eq!(message("a `<b>` c <d>"), "a `<b>` c \\<d\\>\n");
        assert_eq!(message("```html\n<p>\n```"), "```html\n<p>\n```\n");
    }

    #[test]
    fn the_known_escapes_stay_closed() {
        // A backslash before a backtick: not a code span, so the tag is text.
        assert_eq!(message("\\`<img src=x onerror=alert(1)>`"), "\\`\\<img src=x onerror=alert(1)\\>\\`\n");
        // A fence whose info string holds a backtick is no fence.
        assert!(!message("```a`b\n<img src=x>\n```").contains("\n<img"));
        // Names and media types are code spans on one line.
        assert_eq!(code("a\n\n<img>"), "`a  <img>`");
        assert_eq!(code("x`y"), "``x`y``");
        assert_eq!(code("`"), "`` ` ``");
        assert_eq!(line("a\n# <b>"), "a \\# \\<b\\>");
    }

    #[test]
    fn links_keep_only_allowed_schemes() {
        assert_eq!(message("[a](https://x.org/p?q=1&r=2)"), "[a](https://x.org/p?q=1\\&r=2)\n");
        assert_eq!(message("[a](javascript:alert(1))"), "a (`javascript:alert(1)`)\n");
        assert_eq!(message("[a](JaVa&#9;ScRiPt&#58;x)"), "a (`JaVa\tScRiPt:x`)\n");
        assert_eq!(message("<javascript:alert(1)>"), "javascript:alert(1) (`javascript:alert(1)`)\n");
        assert_eq!(message("![cat](https://x.org/c.png)"), "[image: cat](https://x.org/c.png)\n");
        // Text ending in `!` before a link (the `\` of `\!` taken as an
        // escape by the parser) must not turn the link into an image.
        assert_eq!(message("<\\![i]()"), "\\<\\![i]()\n");
        assert_eq!(message("Look!\n[a](https://x.org)"), "Look!\n[a](https://x.org)\n");
        assert_eq!(message("a\\\\![b](https://x.org)"), "a\\\\[image: b](https://x.org)\n");
        assert_eq!(destination("data:text/html,x"), None);
        assert_eq!(destination("vbscript:x"), None);
        assert_eq!(destination(" a b"), Some("%20a%20b".to_owned()));
        assert_eq!(destination("rel/path#x"), Some("rel/path#x".to_owned()));
    }

    #[test]
    fn structure_survives_the_round_trip() {
        assert_eq!(message("# T\n\n- a\n- b *c*\n\n> q\n\n1. x"), "# T\n\n- a\n\n- b *c*\n\n> q\n\n1. x\n");
        assert_eq!(message("3) x\n4) y"), "3. x\n\n4. y\n");
        assert_eq!(message("a\n-b"), "a\n\\-b\n");
    }

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        let mut o = Md::default();
        o.fenced("a ```` b", "text");
        assert_eq!(o.finish(), "`````text\na ```` b\n`````\n");
        let mut o = Md::default();
        o.fenced("plain\n", "json");
        assert_eq!(o.finish(), "```json\nplain\n```\n");
    }

    /// A session whose every user-, model- and tool-controlled string is
    /// one of `h` (cycled), exported in both views.
    fn exports(h: &[String]) -> Vec<String> {
        use serde_json::json;
        let s = |i: usize| h[i % h.len()].clone();
        let call = s(4);
        let lines = [
            json!({"type":"session","version":0,"id":"hostile","createdAt":1_767_225_600_000_u64,
                   "cwd":s(0),"parentSession":s(1),"seedLength":1}),
            json!({"seq":0,"time":1,"type":"turn/start","data":{"turn":1}}),
            json!({"seq":1,"time":2,"type":"user/message","data":{"turn":1,"message":{"id":"u","role":"user",
                "content":[{"type":"text","text":s(2)},{"type":"image","mediaType":s(3),"data":"PHNjcmlwdD4="},
                           {"type":"image","mediaType":"image/png","data":"aGk="}],
                "source":{"kind":"user"}}},"surfaceOp":"append"}),
            json!({"seq":2,"time":3,"type":"step/start","data":{"turn":1,"step":1}}),
            json!({"seq":3,"time":4,"type":"assistant/message","data":{"turn":1,"step":1,"message":{"id":"a",
                "role":"assistant","content":[{"type":"text","text":s(6)},{"type":"reasoning","text":s(7)},
                {"type":"tool-call","id":call,"name":s(8),"arguments":s(9)}],
                "source":{"kind":"model","provider":s(10),"model":s(11)}}},"surfaceOp":"append"}),
            json!({"seq":4,"time":5,"type":"tool/call","data":{"turn":1,"step":1,"callId":call,"name":s(8),
                "arguments":s(9)}}),
            json!({"seq":5,"time":6,"type":"tool/result","data":{"turn":1,"step":1,"message":{"id":"r",
                "role":"user","content":[{"type":"tool-result","toolCallId":call,"isError":true,
                "content":[{"type":"text","text":s(12)},{"type":"image","mediaType":s(13),"data":"aGk"}]}],
                "source":{"kind":"tool","callId":call}},
                "error":{"name":s(15),"code":s(16),"message":s(17)}},"sourceEventSeqs":[4],"surfaceOp":"append"}),
            json!({"seq":6,"time":7,"type":"tool/result","data":{"turn":1,"step":1,"message":{"id":"p",
                "role":"user","content":[{"type":"tool-result","toolCallId":call,"isError":false,
                "content":[{"type":"text","text":s(18)}]}],"source":{"kind":"tool","callId":call}}},
                "sourceEventSeqs":[5],"surfaceOp":{"op":"replace","start":5,"end":5}}),
            json!({"seq":7,"time":8,"type":"step/end","data":{"turn":1,"step":1}}),
            json!({"seq":8,"time":9,"type":"turn/end","data":{"turn":1,"reason":{"kind":"error",
                "error":{"message":s(19),"code":s(20)}}}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let checked = crate::check::check_jsonl(text.as_bytes(), "x".into());
        let shadowing = checked.report.shadowing.clone();
        let (session, _) = checked.into_session().unwrap_or_else(|e| panic!("{e}: {text}"));
        [ExportView::Transcript, ExportView::Model]
            .into_iter()
            .map(|view| {
                super::super::render_session(&session, &shadowing, view, super::super::Format::Markdown)
            })
            .collect()
    }

    /// What a CommonMark renderer finds in `markdown` that it would turn
    /// into live HTML or a dangerous link, read with and without the GFM
    /// extensions. Empty when the export is safe.
    fn live_html(markdown: &str) -> Vec<String> {
        use pulldown_cmark::{Event, Options, Parser, Tag};
        let mut found = Vec::new();
        for options in [Options::empty(), Options::all()] {
            for event in Parser::new_ext(markdown, options) {
                match event {
                    Event::Html(h) | Event::InlineHtml(h) => found.push(format!("HTML {h:?}")),
                    Event::Start(Tag::Link { dest_url, .. }) => {
                        let seen: String = dest_url
                            .chars()
                            .filter(|c| !c.is_ascii_whitespace() && !c.is_ascii_control())
                            .collect::<String>()
                            .to_ascii_lowercase();
                        let head = seen.split(['/', '?', '#']).next().unwrap_or_default().to_owned();
                        if head.contains(':')
                            && !["http:", "https:", "mailto:"].iter().any(|p| head.starts_with(p))
                        {
                            found.push(format!("link {dest_url:?}"));
                        }
                    }
                    Event::Start(Tag::Image { dest_url, .. }) => {
                        // Only our own inlined images: a plain type and base64.
                        let ok = dest_url
                            .strip_prefix("data:image/")
                            .and_then(|r| r.split_once(";base64,"))
                            .is_some_and(|(sub, data)| {
                                !sub.is_empty()
                                    && sub.bytes().all(|b| {
                                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b)
                                    })
                                    && data.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
                            });
                        if !ok {
                            found.push(format!("image {dest_url:?}"));
                        }
                    }
                    _ => {}
                }
            }
        }
        found
    }

    /// Text rich in what Markdown and HTML are made of.
    fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => proptest::sample::select(
                "<>&`\"'\\\n[]()!:*_#-+=.|~ 1aZ\t\r".chars().collect::<Vec<_>>()
            ).prop_map(String::from),
            1 => proptest::sample::select(vec![
                "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "<a href=\"javascript:x\">",
                "javascript:alert(1)", "JaVaScRiPt:", "data:text/html,<b>", "vbscript:msgbox", "&#58;", "&lt;",
                "```", "~~~", "    ", "> ", "- ", "1. ", "[x](", "](javascript:alert(1))", "![i](",
                "<javascript:alert(1)>", "<!--", "-->", "<![CDATA[", "<?php", "<div>", "\n\n", "`` ` ``",
                "\\`", "```a`b\n", "image/png", "image/png\n\n<img src=x onerror=alert(1)>",
            ]).prop_map(String::from),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

        #[test]
        fn no_hostile_text_becomes_html_or_a_dangerous_link(
            h in proptest::collection::vec(hostile(), 21)
        ) {
            for md in exports(&h) {
                let found = live_html(&md);
                proptest::prop_assert!(found.is_empty(), "{found:?} in:\n{md}");
            }
        }
    }

    #[test]
    fn the_reported_escapes_render_as_text() {
        let h: Vec<String> = [
            "\\`<img src=x onerror=alert(1)>`",
            "```a`b\n<img src=x onerror=alert(1)>\n```",
            "read\n\n<img src=x onerror=alert(1)>",
            "image/png\n\n<img src=x onerror=alert(1)>",
            "[click](javascript:alert(1))",
            "<javascript:alert(1)>",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for md in exports(&h) {
            assert_eq!(live_html(&md), Vec::<String>::new(), "{md}");
            assert!(md.contains("onerror"), "the text is still shown: {md}");
        }
    }
}
