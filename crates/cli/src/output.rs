//! Where output goes: results on stdout (written by the commands), errors,
//! warnings and notes on stderr, one line each.

use std::io::{self, IsTerminal, Write};

use palimpsest_core_session::payload::Block;

/// Writes one `error[<code>]: ...` line to stderr.
pub(crate) fn error_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", to_stderr(line));
}

/// Writes a `warning: ...` line to stderr: something worth knowing that does
/// not change the exit code.
pub(crate) fn warning(message: &str) {
    let _ = writeln!(io::stderr().lock(), "warning: {}", to_stderr(message));
}

/// Writes a `hint: ...` line to stderr: what may fix the error just printed.
pub(crate) fn hint(message: &str) {
    let _ = writeln!(io::stderr().lock(), "hint: {}", to_stderr(message));
}

/// Writes a `note: ...` line to stderr: what the command did besides its output.
pub(crate) fn note(message: &str) {
    let _ = writeln!(io::stderr().lock(), "note: {}", to_stderr(message));
}

/// A message for stderr: it may quote logged text (a session id, a line
/// of the log), so every control character but a line break is shown as
/// [`printable`] shows it.
fn to_stderr(message: &str) -> String {
    printable_text(message)
}

/// Text of several lines for a terminal: every character [`printable`]
/// but the line breaks, which stay.
pub(crate) fn printable_text(text: &str) -> String {
    text.chars().map(|c| if c == '\n' { c } else { printable(c) }).collect()
}

/// How a character of logged text is shown on a terminal line: a line
/// break as `⏎`, a carriage return or tab as a space, any other control
/// character (an escape sequence's ESC, BEL, NUL) as `�`, so that text a
/// model or a user wrote cannot move the cursor, retitle the window or
/// hide itself. The bidirectional controls (U+202A-U+202E, U+2066-U+2069,
/// the marks U+200E, U+200F and U+061C) are `�` too: they reorder what a
/// terminal shows, so `../x` could be shown as something else. So are the
/// characters that show as nothing ([`INVISIBLE`]), which made `proj` and
/// `proj` + U+200B look alike. Every human-readable view of logged text
/// goes through it.
pub(crate) fn printable(c: char) -> char {
    match c {
        '\n' => '⏎',
        '\r' | '\t' => ' ',
        c if c.is_control() => '�',
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => '�',
        c if INVISIBLE.iter().any(|range| range.contains(&c)) => '�',
        c => c,
    }
}

/// Characters a terminal shows as nothing (or as a line break it does not
/// count): the zero-width space, the word joiner and invisible operators,
/// the line and paragraph separators, the byte-order mark, the soft
/// hyphen, the combining grapheme joiner, the Mongolian vowel separator
/// and free variation selectors, interlinear annotation marks, the
/// deprecated format controls, Hangul fillers, the other format controls
/// of Unicode's `Cf` (Arabic, Syriac, Kaithi, Egyptian, shorthand,
/// musical), the noncharacters U+FFFE and U+FFFF, and the tag characters.
/// Not the zero-width joiners (U+200C, U+200D) nor the variation
/// selectors (U+FE00-U+FE0F, U+E0100-U+E01EF), which emoji and scripts
/// need.
const INVISIBLE: &[std::ops::RangeInclusive<char>] = &[
    '\u{00AD}'..='\u{00AD}',
    '\u{034F}'..='\u{034F}',
    '\u{0600}'..='\u{0605}',
    '\u{06DD}'..='\u{06DD}',
    '\u{070F}'..='\u{070F}',
    '\u{0890}'..='\u{0891}',
    '\u{08E2}'..='\u{08E2}',
    '\u{115F}'..='\u{1160}',
    '\u{17B4}'..='\u{17B5}',
    '\u{180B}'..='\u{180D}',
    '\u{180E}'..='\u{180E}',
    '\u{200B}'..='\u{200B}',
    '\u{2028}'..='\u{2029}',
    '\u{2060}'..='\u{2064}',
    '\u{206A}'..='\u{206F}',
    '\u{3164}'..='\u{3164}',
    '\u{FEFF}'..='\u{FEFF}',
    '\u{FFA0}'..='\u{FFA0}',
    '\u{FFF9}'..='\u{FFFB}',
    '\u{FFFE}'..='\u{FFFF}',
    '\u{110BD}'..='\u{110BD}',
    '\u{110CD}'..='\u{110CD}',
    '\u{13430}'..='\u{1343F}',
    '\u{1BCA0}'..='\u{1BCA3}',
    '\u{1D173}'..='\u{1D17A}',
    '\u{E0000}'..='\u{E007F}',
];

/// `text` with every character [`printable`].
pub(crate) fn printable_line(text: &str) -> String {
    text.chars().map(printable).collect()
}

/// A writer that passes each line on through `map`, whole: a line is
/// held until its `\n` (a last one without it at [`LineMapped::finish`]).
/// How the pager clips lines to the terminal's width, and how a document
/// for a terminal shows control characters ([`LineMapped::printable`]).
pub(crate) struct LineMapped<'w> {
    inner: &'w mut dyn Write,
    map: Box<dyn Fn(&str) -> String + 'w>,
    /// The start of a line not yet ended.
    line: Vec<u8>,
}

impl<'w> LineMapped<'w> {
    pub(crate) fn new(inner: &'w mut dyn Write, map: impl Fn(&str) -> String + 'w) -> LineMapped<'w> {
        LineMapped { inner, map: Box::new(map), line: Vec::new() }
    }

    /// Each line with its control characters (but the tab) shown, not
    /// obeyed ([`printable`]): a document quoting a model's text (an
    /// export to a terminal) cannot move the cursor, retitle the window or
    /// write the clipboard.
    pub(crate) fn printable(inner: &'w mut dyn Write) -> LineMapped<'w> {
        LineMapped::new(inner, |line| {
            line.chars().map(|c| if c == '\t' { c } else { printable(c) }).collect()
        })
    }

    fn emit(&mut self, line: &[u8], end: &[u8]) -> io::Result<()> {
        let text = String::from_utf8_lossy(line);
        self.inner.write_all((self.map)(&text).as_bytes())?;
        self.inner.write_all(end)
    }

    /// Writes a last line without its `\n`, then flushes.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.emit(&line, b"")?;
        }
        self.inner.flush()
    }
}

impl Write for LineMapped<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() {
                self.emit(&rest[..at], b"\n")?;
            } else {
                self.line.extend_from_slice(&rest[..at]);
                let line = std::mem::take(&mut self.line);
                self.emit(&line, b"\n")?;
            }
            rest = &rest[at + 1..];
        }
        self.line.extend_from_slice(rest);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Whether `--color auto` means colour: stdout is a terminal and `NO_COLOR`
/// is unset or empty.
pub(crate) fn stdout_wants_color() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && io::stdout().is_terminal()
}

/// Writes a JSON array with one element a line, each given as ready JSON
/// text (e.g. a message exactly as logged): easy to read, grep and diff,
/// and still one JSON value. An empty array is `[]`.
pub(crate) fn json_lines_array<I, S>(out: &mut dyn Write, items: I) -> io::Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut first = true;
    for item in items {
        out.write_all(if first { b"[\n  " } else { b",\n  " })?;
        out.write_all(item.as_ref().as_bytes())?;
        first = false;
    }
    out.write_all(if first { b"[]\n" } else { b"\n]\n" })
}

/// A writer whose failures stop the printing, not the work: once stdout's
/// reader went away (`| head`, a pager quit early) or a write failed (a
/// full disk), nothing more is written, a note says so once, and every
/// later write "succeeds". For a command whose work must run to its end
/// whatever becomes of its printing (`demo`: a closed pipe ended it
/// mid-turn, exit 0, its last turn left open).
pub(crate) struct PrintingStops<'w> {
    inner: &'w mut dyn Write,
    /// What goes on without the printing, for the note.
    going_on: &'static str,
    stopped: bool,
}

impl<'w> PrintingStops<'w> {
    pub(crate) fn new(inner: &'w mut dyn Write, going_on: &'static str) -> PrintingStops<'w> {
        PrintingStops { inner, going_on, stopped: false }
    }

    fn outcome(&mut self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stopped = true;
                if e.kind() == io::ErrorKind::BrokenPipe {
                    note(&format!("stdout was closed; it is no longer written, but {}", self.going_on));
                } else {
                    warning(&format!(
                        "cannot write to stdout ({e}); it is no longer written, but {}",
                        self.going_on
                    ));
                }
                Ok(())
            }
        }
    }
}

impl Write for PrintingStops<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.stopped {
            let written = self.inner.write_all(buf);
            self.outcome(written)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.stopped {
            return Ok(());
        }
        let flushed = self.inner.flush();
        self.outcome(flushed)
    }
}

/// A writer of JSON for a terminal: every character a terminal would act
/// on that JSON writes raw (DEL, the C1 controls U+0080-U+009F, of which
/// U+009B is a CSI on xterm, and the bidirectional controls that
/// [`printable`] maps) is written as its `\uXXXX` escape. In JSON text
/// they stand only inside strings, where the escape is the same
/// character: the document means the same, and the terminal shows it
/// as text. (An outside probe got raw U+009B and U+202E to the terminal
/// through `derive`, `sessions --json`, `explain --json`, `search --json`.)
pub(crate) struct JsonForTerminal<'w> {
    inner: &'w mut dyn Write,
    /// The start of a character cut by the end of the last write.
    carry: Vec<u8>,
}

impl<'w> JsonForTerminal<'w> {
    pub(crate) fn new(inner: &'w mut dyn Write) -> JsonForTerminal<'w> {
        JsonForTerminal { inner, carry: Vec::new() }
    }

    /// Whether `c` is written escaped.
    fn escaped(c: char) -> bool {
        matches!(c, '\u{7F}'..='\u{9F}') || (printable(c) == '�' && c != '�')
    }
}

impl Write for JsonForTerminal<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(buf);
        // A character cut at the end waits for the rest.
        let lead = data.iter().rev().take(4).position(|b| b & 0xC0 != 0x80).map(|i| data.len() - 1 - i);
        let cut = lead.filter(|&i| {
            let want = match data[i] {
                b if b >= 0xF0 => 4,
                b if b >= 0xE0 => 3,
                b if b >= 0xC0 => 2,
                _ => 1,
            };
            i + want > data.len()
        });
        if let Some(i) = cut {
            self.carry = data.split_off(i);
        }
        let mut out = Vec::with_capacity(data.len());
        for chunk in data.utf8_chunks() {
            for c in chunk.valid().chars() {
                if Self::escaped(c) {
                    // Past U+FFFF, as JSON writes it: a surrogate pair.
                    for unit in c.encode_utf16(&mut [0; 2]) {
                        out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                    }
                } else {
                    let mut at = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut at).as_bytes());
                }
            }
            out.extend_from_slice(chunk.invalid());
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let carry = std::mem::take(&mut self.carry);
        self.inner.write_all(&carry)?;
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_for_a_terminal_escapes_what_a_terminal_would_act_on_and_means_the_same() {
        let text = "{\"t\":\"a\u{9b}31mb\u{202e}c\u{7f}d é ⏎ 😀\u{200b}\u{e0041}\u{200d}\"}";
        // Written in every split, characters cut between writes included.
        for split in 0..text.len() {
            let mut out = Vec::new();
            let mut w = JsonForTerminal::new(&mut out);
            w.write_all(&text.as_bytes()[..split]).unwrap();
            w.write_all(&text.as_bytes()[split..]).unwrap();
            w.flush().unwrap();
            let shown = String::from_utf8(out).unwrap();
            assert_eq!(
                shown, "{\"t\":\"a\\u009b31mb\\u202ec\\u007fd é ⏎ 😀\\u200b\\udb40\\udc41\u{200d}\"}",
                "split at {split}"
            );
            let read: serde_json::Value = serde_json::from_str(&shown).unwrap();
            let written: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(read, written);
        }
    }

    #[test]
    fn terminal_text_shows_control_characters_and_keeps_lines() {
        let mut out = Vec::new();
        let mut shown = LineMapped::printable(&mut out);
        shown.write_all("a\x1b[2Jb\tc\n\u{202E}d\r".as_bytes()).unwrap();
        shown.write_all("\u{7}e".as_bytes()).unwrap();
        shown.finish().unwrap();
        drop(shown);
        assert_eq!(String::from_utf8(out).unwrap(), "a\u{FFFD}[2Jb\tc\n\u{FFFD}d \u{FFFD}e");
    }

    #[test]
    fn characters_that_show_as_nothing_are_shown_but_joiners_stay() {
        // `proj` and `proj` + U+200B looked alike in `sessions` (a probe).
        assert_eq!(printable_line("proj\u{200b}\u{feff}\u{2028}\u{e0041}"), "proj����");
        assert_eq!(printable_line("👩\u{200d}💻 ❤\u{fe0f}"), "👩\u{200d}💻 ❤\u{fe0f}");
        assert_eq!(printable_line("a\u{ad}b\u{34f}c\u{1d173}d"), "a�b�c�d");
    }

    fn render(items: &[&str]) -> String {
        let mut buf = Vec::new();
        json_lines_array(&mut buf, items).unwrap_or_default();
        String::from_utf8(buf).unwrap_or_default()
    }

    #[test]
    fn json_lines_arrays_are_json() {
        assert_eq!(render(&[]), "[]\n");
        assert_eq!(render(&["1"]), "[\n  1\n]\n");
        let text = render(&[r#"{"a":1}"#, "[2]"]);
        assert_eq!(text, "[\n  {\"a\":1},\n  [2]\n]\n");
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(parsed, serde_json::json!([{"a": 1}, [2]]));
    }
}

/// `text` on one line (runs of whitespace folded to one space), cut to `max`
/// characters with `…`: for progress lines.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat = printable_line(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

/// Longest error text a terminal line shows, in characters: generous, so
/// the server's reason and "gave up after N attempts" are never cut off.
pub(crate) const ERROR_CHARS: usize = 2_000;

/// The error an event records, in full: a `turn/end` with an error reason,
/// a `tool/result` with `data.error` (its text is the message), or a plugin
/// event with `data.error` (a failed compaction).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct EventError {
    pub(crate) code: String,
    /// The error's name, where the event gives one (tool results).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    pub(crate) message: String,
}

/// See [`EventError`].
pub(crate) fn event_error(event: &palimpsest_core_session::Event) -> Option<EventError> {
    use palimpsest_core_session::payload::{ToolResult, TurnEnd, TurnEndReason};
    use palimpsest_core_session::EventType;
    match event.event_type() {
        EventType::TurnEnd => match event.data_as::<TurnEnd>().ok()?.reason {
            TurnEndReason::Error { error } => {
                Some(EventError { code: error.code, name: None, message: error.message })
            }
            _ => None,
        },
        EventType::ToolResult => {
            let result = event.data_as::<ToolResult>().ok()?;
            let error = result.error?;
            let message = first_text(&result.message.content);
            Some(EventError { code: error.code, name: Some(error.name), message })
        }
        EventType::Plugin(_) => {
            let data: serde_json::Value = serde_json::from_str(event.data()).ok()?;
            let error = data.get("error")?;
            let text = |key: &str| error.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
            Some(EventError {
                code: text("code")?,
                name: text("name"),
                message: text("message").unwrap_or_default(),
            })
        }
        _ => None,
    }
}

/// The first text of `blocks`, looking inside a tool result.
pub(crate) fn first_text(blocks: &[Block]) -> String {
    blocks
        .iter()
        .find_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            Block::ToolResult { content, .. } => Some(first_text(content)),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn one_line_folds_whitespace_and_cuts_by_characters() {
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(one_line("ééé", 3), "ééé");
    }

    #[test]
    fn first_text_looks_inside_tool_results() {
        let result = Block::ToolResult {
            tool_call_id: "c".into(),
            is_error: false,
            content: vec![Block::text("out")],
        };
        assert_eq!(
            first_text(&[Block::Image { media_type: "image/png".into(), data: String::new() }, result]),
            "out"
        );
        assert_eq!(first_text(&[]), "");
    }
}

/// `word` as the shell reads it back: as it is when it holds only safe
/// characters, else in single quotes (a URL's `?` and `&` would otherwise
/// glob or fork). For the commands the CLI suggests.
pub(crate) fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod shell_word_tests {
    use super::shell_word;

    #[test]
    fn only_words_the_shell_would_change_are_quoted() {
        assert_eq!(shell_word("palimpsest-demo.db"), "palimpsest-demo.db");
        assert_eq!(shell_word("postgres://u@h:5432/db"), "postgres://u@h:5432/db");
        assert_eq!(shell_word("postgres://u:***@h/db"), "'postgres://u:***@h/db'");
        assert_eq!(shell_word("postgres://h/db?a=1&b=2"), "'postgres://h/db?a=1&b=2'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
