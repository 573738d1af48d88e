//! Writing Markdown that no renderer can turn into HTML: one escaping
//! function per context, and the re-emitter for message text.
//!
//! Every piece of text a user, a model or a tool controls reaches the
//! Markdown export through exactly one of these:
//!
//! | context | function | what it guarantees |
//! |---|---|---|
//! | inline text, one line (ids, names, labels) | [`line()`] | every character that can open a construct is backslash-escaped; line breaks become spaces |
//! | inline code | [`code`] | a code span whose delimiter is longer than any backtick run inside; line breaks become spaces |
//! | a block of literal text | [`Md::fenced`] | a fence longer than any backtick run inside, an info string of `[A-Za-z0-9+#._-]` only |
//! | a link destination | [`destination`] | `http`, `https`, `mailto` or a relative reference, else nothing; written with no space, no `<`, no `&` |
//! | message text (Markdown) | [`Md::message`] | parsed by a CommonMark parser and written back through the functions above |
//!
//! Message text is Markdown (models write it), so it is not shown as its
//! source: it is parsed with `pulldown-cmark` (CommonMark, no extensions) and
//! written back node by node. Text nodes are escaped, code and code blocks
//! are re-fenced, raw HTML becomes literal text (inline) or a fenced `html`
//! block, links keep only allowed destinations, and images in message text
//! become links (an export never fetches a remote image). What comes out is
//! unambiguous: every unescaped delimiter in it is one this module wrote, so
//! a renderer that reads the original differently from `pulldown-cmark`
//! still reads our output the same way.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The schemes a link may have. Anything else with a scheme (`javascript:`,
/// `data:`, `vbscript:`, `file:`, ...) is not linked.
const ALLOWED_SCHEMES: &[&str] = &["http", "https", "mailto"];

/// Inline text on one line: line breaks become spaces, and every ASCII
/// character that can open, close or continue a Markdown construct is
/// backslash-escaped. Safe anywhere inline, including mid-line after other
/// output; not at the start of a line (see [`Md::text`]).
pub(crate) fn line(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, if matches!(c, '\n' | '\r') { ' ' } else { c });
    }
    out
}

/// One character of inline text.
fn push_escaped(out: &mut String, c: char) {
    if matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '&' | '#' | '~' | '|') {
        out.push('\\');
    }
    out.push(c);
}

/// An inline code span showing `text` literally (line breaks as spaces).
/// The delimiter is one backtick longer than the longest run inside, and a
/// space pads content that starts or ends with a backtick or a space, so the
/// span always closes where we mean it to.
pub(crate) fn code(text: &str) -> String {
    let flat: String = text.chars().map(|c| if matches!(c, '\n' | '\r') { ' ' } else { c }).collect();
    let fence = "`".repeat(longest_run(&flat, '`') + 1);
    let pad = flat.is_empty() || flat.starts_with(['`', ' ']) || flat.ends_with(['`', ' ']);
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{flat}{pad}{fence}")
}

/// The longest run of `c` in `text`.
fn longest_run(text: &str, c: char) -> usize {
    text.split(|x| x != c).map(|run| run.len() / c.len_utf8()).max().unwrap_or(0)
}

/// A fence info string: the first word, only `[A-Za-z0-9+#._-]`, at most 32
/// characters (so no backtick, no space, nothing a renderer could read as
/// an attribute).
fn info(text: &str) -> String {
    let word = text.split_whitespace().next().unwrap_or_default();
    word.chars().filter(|c| c.is_ascii_alphanumeric() || "+#._-".contains(*c)).take(32).collect()
}

/// A link destination as written between `(` and `)`, or `None` when it
/// must not be linked: a scheme other than [`ALLOWED_SCHEMES`], or a `:`
/// before the first `/`, `?` or `#` that is not a plain scheme. Spaces and
/// control characters are percent-encoded; `\`, `<`, `>`, `&`, `(`, `)`,
/// `` ` `` and the other delimiters are backslash-escaped, so the renderer
/// reads back exactly `url` and never an entity, an autolink or a tag.
pub(crate) fn destination(url: &str) -> Option<String> {
    // What a browser would take the scheme to be: leading spaces and
    // controls dropped, tabs and line breaks removed anywhere, case folded.
    let seen: String = url
        .trim_start_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect::<String>()
        .to_ascii_lowercase();
    let head = seen.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some((scheme, _)) = head.split_once(':') {
        if !ALLOWED_SCHEMES.contains(&scheme) {
            return None;
        }
    }
    let mut out = String::with_capacity(url.len() + 8);
    for c in url.chars() {
        if c.is_ascii_control() || c == ' ' || c == '\u{85}' || c == '\u{a0}' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else if c.is_ascii_punctuation() && !"/:?#=.-_~%@+,;".contains(c) {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// One open container: what starts each line inside it.
#[derive(Debug)]
enum Container {
    /// `> ` on every line.
    Quote,
    /// The marker on the first line, as many spaces on the others.
    Item { marker: String, written: bool },
}

/// An open link or image in message text.
#[derive(Debug)]
enum LinkFrame {
    /// Written as a link: `](dest)` closes it.
    Linked(String),
    /// Not linked: the destination is shown as code after the text.
    Shown(String),
}

/// A Markdown writer that knows which containers (quotes, list items) are
/// open, so every line gets their prefixes and block content stays inside.
#[derive(Debug, Default)]
pub(crate) struct Md {
    out: String,
    stack: Vec<Container>,
    /// Something was written on the current line.
    line_open: bool,
    /// The next block needs a blank line before it.
    gap: bool,
    /// Inside a heading of message text: line breaks become spaces.
    heading: bool,
    /// The open lists of message text: the next number of an ordered one.
    lists: Vec<Option<u64>>,
    /// The open links and images of message text.
    links: Vec<LinkFrame>,
}

impl Md {
    /// What was written since the last take, to pass on: the open
    /// containers stay open.
    pub(crate) fn take(&mut self) -> String {
        std::mem::take(&mut self.out)
    }

    /// What was written.
    pub(crate) fn finish(mut self) -> String {
        self.end_line();
        self.out
    }

    /// What continues a line inside the open containers, for blank lines.
    fn continuation(&self) -> String {
        let mut p = String::new();
        for c in &self.stack {
            match c {
                Container::Quote => p.push_str("> "),
                Container::Item { marker, .. } => p.extend(std::iter::repeat_n(' ', marker.len())),
            }
        }
        p.trim_end().to_owned()
    }

    fn start_line(&mut self) {
        for c in &mut self.stack {
            match c {
                Container::Quote => self.out.push_str("> "),
                Container::Item { marker, written } if !*written => {
                    self.out.push_str(marker);
                    *written = true;
                }
                Container::Item { marker, .. } => {
                    self.out.extend(std::iter::repeat_n(' ', marker.len()));
                }
            }
        }
        self.line_open = true;
    }

    /// Ours: Markdown syntax, written as it is.
    fn raw(&mut self, s: &str) {
        if !self.line_open {
            self.start_line();
        }
        self.out.push_str(s);
    }

    fn newline(&mut self) {
        if !self.line_open {
            self.start_line();
        }
        self.out.push('\n');
        self.line_open = false;
    }

    fn end_line(&mut self) {
        if self.line_open {
            self.newline();
        }
    }

    /// Before a block: close the line, and leave a blank line if one is due.
    fn block(&mut self) {
        if self.line_open {
            self.newline();
            self.gap = true;
        }
        if self.gap {
            let blank = self.continuation();
            self.out.push_str(&blank);
            self.out.push('\n');
            self.gap = false;
        }
    }

    fn end_block(&mut self) {
        self.end_line();
        self.gap = true;
    }

    /// Inline text that may start a line: escaped as [`line()`] does, and at
    /// the start of a line also the spaces, the list and heading markers
    /// (`-`, `+`, `=`, `1.`, `1)`) a line can open with. Line breaks in
    /// `text` become soft breaks.
    pub(crate) fn text(&mut self, text: &str) {
        if self.heading {
            let flat = line(text);
            return self.raw(&flat);
        }
        for (i, part) in text.split(['\n', '\r']).enumerate() {
            if i > 0 {
                self.newline();
            }
            if part.is_empty() {
                continue;
            }
            let at_start = !self.line_open;
            let mut s = String::with_capacity(part.len() + 8);
            let mut chars = part.chars().peekable();
            if at_start {
                while let Some(&c) = chars.peek() {
                    match c {
                        ' ' => s.push_str("&#32;"),
                        '\t' => s.push_str("&#9;"),
                        _ => break,
                    }
                    chars.next();
                }
                let rest: String = chars.clone().collect();
                let digits = rest.chars().take_while(char::is_ascii_digit).count();
                if rest.starts_with(['-', '+', '=']) {
                    s.push('\\');
                } else if digits > 0 && rest[digits..].starts_with(['.', ')']) {
                    s.push_str(&rest[..digits]);
                    s.push('\\');
                    for _ in 0..digits {
                        chars.next();
                    }
                }
            }
            for c in chars {
                push_escaped(&mut s, c);
            }
            self.raw(&s);
        }
    }

    /// A code span (see [`code`]), never glued to a backtick before it.
    pub(crate) fn code(&mut self, text: &str) {
        if self.out.ends_with('`') && self.line_open {
            self.raw(" ");
        }
        self.raw(&code(text));
    }

    /// A fenced block showing `text` literally: the fence is longer than any
    /// backtick run inside, so no line of `text` can close it.
    pub(crate) fn fenced(&mut self, text: &str, lang: &str) {
        self.block();
        let fence = "`".repeat((longest_run(text, '`') + 1).max(3));
        self.raw(&fence);
        self.raw(&info(lang));
        self.newline();
        let body = text.trim_end_matches(['\n', '\r']);
        if !body.is_empty() {
            for l in body.split('\n') {
                self.raw(l.trim_end_matches('\r'));
                self.newline();
            }
        }
        self.raw(&fence);
        self.end_block();
    }

    /// A paragraph of our own Markdown (`raw` is trusted: built from
    /// escaped pieces).
    pub(crate) fn paragraph(&mut self, raw: &str) {
        self.block();
        for (i, l) in raw.split('\n').enumerate() {
            if i > 0 {
                self.newline();
            }
            self.raw(l);
        }
        self.end_block();
    }

    /// Opens a block quote: every line until [`Md::end_quote`] starts `> `.
    pub(crate) fn quote(&mut self) {
        self.block();
        self.stack.push(Container::Quote);
    }

    /// Closes the block quote [`Md::quote`] opened.
    pub(crate) fn end_quote(&mut self) {
        self.end_line();
        self.stack.pop();
        self.gap = true;
    }

    /// Message text: parsed as CommonMark and written back through the
    /// escaping functions, so its formatting survives and nothing in it
    /// becomes HTML or a link to a forbidden scheme.
    pub(crate) fn message(&mut self, markdown: &str) {
        let depth = self.stack.len();
        // Code block or HTML block text being collected, with its info string.
        let mut literal: Option<(String, String)> = None;
        for event in Parser::new_ext(markdown, Options::empty()) {
            if let Some((body, _)) = &mut literal {
                match event {
                    Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => {
                        body.push_str(&t);
                        continue;
                    }
                    Event::End(TagEnd::CodeBlock | TagEnd::HtmlBlock) => {
                        if let Some((body, lang)) = literal.take() {
                            self.fenced(&body, &lang);
                        }
                        continue;
                    }
                    _ => {}
                }
            }
            match event {
                Event::Start(tag) => self.open(tag, &mut literal),
                Event::End(tag) => self.close(tag),
                Event::Text(t) | Event::InlineHtml(t) | Event::Html(t) => self.text(&t),
                Event::Code(t) => self.code(&t),
                Event::SoftBreak | Event::HardBreak if self.heading => self.raw(" "),
                Event::SoftBreak => self.newline(),
                Event::HardBreak => {
                    self.raw("\\");
                    self.newline();
                }
                Event::Rule => {
                    self.block();
                    self.raw("***");
                    self.end_block();
                }
                Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
                Event::FootnoteReference(t) | Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
            }
        }
        if let Some((body, lang)) = literal.take() {
            self.fenced(&body, &lang);
        }
        // Whatever the parser left open is closed: the next block starts clean.
        self.stack.truncate(depth);
        self.heading = false;
        self.lists.clear();
        self.links.clear();
        self.end_line();
        self.gap = true;
    }

    fn open(&mut self, tag: Tag<'_>, literal: &mut Option<(String, String)>) {
        match tag {
            Tag::Paragraph => self.block(),
            Tag::Heading { level, .. } => {
                self.block();
                self.raw(&"#".repeat(heading_level(level)));
                self.raw(" ");
                self.heading = true;
            }
            Tag::BlockQuote(_) => {
                self.block();
                self.stack.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(i) => i.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                *literal = Some((String::new(), lang));
            }
            Tag::HtmlBlock => *literal = Some((String::new(), "html".to_owned())),
            Tag::List(start) => {
                self.block();
                self.lists.push(start);
            }
            Tag::Item => {
                self.block();
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let m = format!("{n}. ");
                        *n = n.saturating_add(1);
                        m
                    }
                    _ => "- ".to_owned(),
                };
                self.stack.push(Container::Item { marker, written: false });
            }
            Tag::Emphasis => self.raw("*"),
            Tag::Strong => self.raw("**"),
            Tag::Link { dest_url, .. } => self.open_link(&dest_url, false),
            Tag::Image { dest_url, .. } => self.open_link(&dest_url, true),
            _ => {}
        }
    }

    /// A link (or an image, written as a link to it) of message text:
    /// linked when its destination is allowed and it is not inside another
    /// link, else its text followed by the destination as code.
    fn open_link(&mut self, dest_url: &str, image: bool) {
        let frame = match (self.links.is_empty(), destination(dest_url)) {
            (true, Some(dest)) => {
                // A `!` just written (text that ended in one, its `\` taken
                // by the parser as an escape) would make the link an image.
                if self.line_open && self.out.ends_with('!') {
                    let before = &self.out[..self.out.len() - 1];
                    if (before.len() - before.trim_end_matches('\\').len()).is_multiple_of(2) {
                        self.out.pop();
                        self.out.push_str("\\!");
                    }
                }
                self.raw("[");
                LinkFrame::Linked(dest)
            }
            _ => LinkFrame::Shown(dest_url.to_owned()),
        };
        self.links.push(frame);
        if image {
            self.text("image: ");
        }
    }

    fn close(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => self.end_block(),
            TagEnd::Heading(_) => {
                self.heading = false;
                self.end_block();
            }
            TagEnd::BlockQuote(_) => {
                self.end_line();
                self.stack.pop();
                self.gap = true;
            }
            TagEnd::List(_) => {
                self.lists.pop();
                self.gap = true;
            }
            TagEnd::Item => {
                if matches!(self.stack.last(), Some(Container::Item { written: false, .. })) {
                    self.raw("");
                }
                self.end_line();
                self.stack.pop();
                self.gap = true;
            }
            TagEnd::Emphasis => self.raw("*"),
            TagEnd::Strong => self.raw("**"),
            TagEnd::Link | TagEnd::Image => match self.links.pop() {
                Some(LinkFrame::Linked(dest)) => {
                    self.raw("](");
                    self.raw(&dest);
                    self.raw(")");
                }
                Some(LinkFrame::Shown(dest)) => {
                    self.raw(" (");
                    self.code(&dest);
                    self.raw(")");
                }
                None => {}
            },
            _ => {}
        }
    }
}

/// `#` count of a heading.
fn heading_level(level: HeadingLevel) -> usize {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}
