//! Fitting `inspect`'s output to the terminal, as git does: when stdout is
//! a terminal, every line is clipped to its width (`…` marks a cut; colours
//! are closed) as it is written, and the lines go through a pager as they
//! are made: `$PALIMPSEST_PAGER`, else `$PAGER`, else `less -FRX` (which
//! prints short output and exits).
//! An empty value or `cat` means no pager, as does `--no-pager`; a pager
//! that cannot be started is skipped and the text written directly. When
//! stdout is not a terminal nothing changes: the bytes go out as rendered.
//!
//! The width is `$COLUMNS` when it is a number, else the terminal's own
//! (`TIOCGWINSZ` on stdout), else 80.

use std::io::{self, IsTerminal, Write};
use std::process::{Command, Stdio};

use crate::output::LineMapped;
use unicode_width::UnicodeWidthChar;

/// The pager when neither variable names one.
pub(crate) const DEFAULT_PAGER: &str = "less -FRX";

/// Runs `render` with where its output should go for a person at a
/// terminal: `out` itself when stdout is not a terminal; otherwise each
/// line clipped to the terminal's width and piped into the pager as it is
/// written (or written to `out` when there is no pager, or it cannot
/// start). Nothing is held whole: a timeline of millions of events pages
/// as it is made. The person quitting the pager early ends the rendering
/// quietly.
pub(crate) fn paged(
    out: &mut dyn Write,
    no_pager: bool,
    render: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if !io::stdout().is_terminal() {
        return render(out);
    }
    let width = width();
    let pager = if no_pager { None } else { pager_command(|name| std::env::var(name).ok()) };
    let child = pager.and_then(|pager| {
        out.flush().ok()?;
        spawn(&pager)
            .map_err(|e| tracing::debug!(pager, error = %e, "the pager could not run; writing directly"))
            .ok()
    });
    let Some(mut child) = child else {
        let mut fitted = fitted(out, width);
        return quit_is_fine(render(&mut fitted).and_then(|()| Ok(fitted.finish()?)));
    };
    // Ctrl-C in the pager reaches this process too: it must not end it
    // and hand the terminal back to the shell while the pager still runs.
    let _calm = IgnoreInterrupts::start();
    let rendered = match child.stdin.take() {
        Some(stdin) => {
            let mut stdin = io::BufWriter::new(stdin);
            let written = {
                let mut fitted = fitted(&mut stdin, width);
                render(&mut fitted).and_then(|()| Ok(fitted.finish()?))
            };
            quit_is_fine(written.and_then(|()| Ok(stdin.flush()?)))
        }
        None => Ok(()),
    };
    child.wait()?;
    rendered
}

/// A pager that stopped reading (the person quit it) is not an error.
fn quit_is_fine(result: anyhow::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) => {
            Ok(())
        }
        other => other,
    }
}

/// A writer that clips every line to `width` columns ([`clip`]) on its way
/// to `inner`.
fn fitted(inner: &mut dyn Write, width: usize) -> LineMapped<'_> {
    LineMapped::new(inner, move |line| clip(line, width))
}

/// The terminal's width in columns (see the module docs).
fn width() -> usize {
    let columns =
        std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&c| c > 0);
    columns.or_else(terminal_columns).unwrap_or(80)
}

#[cfg(unix)]
fn terminal_columns() -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(io::stdout()).ok()?;
    Some(usize::from(size.ws_col)).filter(|&c| c > 0)
}

#[cfg(not(unix))]
fn terminal_columns() -> Option<usize> {
    None
}

/// The pager to run: `PALIMPSEST_PAGER`, else `PAGER`, else
/// [`DEFAULT_PAGER`]; `None` when the one chosen is empty or `cat`.
pub(crate) fn pager_command(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let chosen = env("PALIMPSEST_PAGER").or_else(|| env("PAGER")).unwrap_or_else(|| DEFAULT_PAGER.to_owned());
    let chosen = chosen.trim();
    (!chosen.is_empty() && chosen != "cat").then(|| chosen.to_owned())
}

/// Starts `pager` reading its stdin from a pipe. A command with shell
/// syntax runs through `sh -c`; a plain one (`less -FRX`) directly, so one
/// that does not exist is an error here, not a shell's complaint.
fn spawn(pager: &str) -> io::Result<std::process::Child> {
    let shell = pager.contains(['|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?']);
    let mut command = if shell {
        let mut c = Command::new("sh");
        c.args(["-c", pager]);
        c
    } else {
        let mut words = pager.split_whitespace();
        let mut c = Command::new(words.next().unwrap_or(DEFAULT_PAGER));
        c.args(words);
        c
    };
    command.stdin(Stdio::piped()).spawn()
}

/// While it lives, SIGINT is caught and dropped (a tokio signal listener,
/// no unsafe code); once caught it stays so, which is fine: the process
/// ends soon after the pager does.
struct IgnoreInterrupts {
    #[cfg(unix)]
    _listener: Option<(tokio::runtime::Runtime, tokio::signal::unix::Signal)>,
}

impl IgnoreInterrupts {
    fn start() -> IgnoreInterrupts {
        #[cfg(unix)]
        {
            let listener =
                tokio::runtime::Builder::new_current_thread().enable_io().build().ok().and_then(|rt| {
                    let signal = rt.block_on(async {
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                    });
                    signal.ok().map(|s| (rt, s))
                });
            IgnoreInterrupts { _listener: listener }
        }
        #[cfg(not(unix))]
        IgnoreInterrupts {}
    }
}

/// Every line of `text` clipped to `width` columns ([`clip`]).
#[cfg(test)]
pub(crate) fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&clip(body, width));
        out.push_str(end);
    }
    out
}

/// `line` cut to `width` terminal columns, the last one a `…` when it is
/// cut. ANSI escape sequences take no column and are kept; a cut line that
/// had any ends with a reset, so no colour runs on.
pub(crate) fn clip(line: &str, width: usize) -> String {
    if visible_width(line) <= width {
        return line.to_owned();
    }
    let room = width.saturating_sub(1);
    let mut out = String::with_capacity(line.len().min(4 * width + 16));
    let (mut used, mut escaped, mut chars) = (0, false, line.chars().peekable());
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            escaped = true;
            out.push(c);
            // CSI: ESC [ parameters, then one final byte in @..~.
            if chars.peek() == Some(&'[') {
                out.extend(chars.next());
                for c in chars.by_ref() {
                    out.push(c);
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    if escaped {
        out.push_str(&anstyle::Reset.render().to_string());
    }
    out
}

/// How many terminal columns `line` takes, escape sequences not counted.
pub(crate) fn visible_width(line: &str) -> usize {
    let (mut width, mut chars) = (0, line.chars().peekable());
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        width += c.width().unwrap_or(0);
    }
    width
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_clipped_to_the_width_in_columns_keeping_colours_closed() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("0123456789abc", 10), "012345678…");
        assert_eq!(visible_width(&clip("0123456789abc", 10)), 10);
        // Wide characters take two columns; escapes none.
        let wide = clip("日本語のテキスト", 7);
        assert_eq!((wide.as_str(), visible_width(&wide)), ("日本語…", 7));
        let red = clip("\x1b[31mred text that goes on\x1b[0m", 8);
        assert_eq!(red, "\x1b[31mred tex…\x1b[0m");
        assert_eq!(visible_width(&red), 8);
        assert_eq!(fit("a long line\nok\nlast one", 6), "a lon…\nok\nlast …");
    }

    #[test]
    fn the_pager_is_palimpsest_pager_then_pager_then_less_and_empty_or_cat_is_none() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(pager_command(env(&[])).as_deref(), Some("less -FRX"));
        assert_eq!(pager_command(env(&[("PAGER", "more")])).as_deref(), Some("more"));
        let both = env(&[("PAGER", "more"), ("PALIMPSEST_PAGER", "most -s")]);
        assert_eq!(pager_command(both).as_deref(), Some("most -s"));
        assert_eq!(pager_command(env(&[("PAGER", "cat")])), None);
        assert_eq!(pager_command(env(&[("PAGER", "")])), None);
        assert_eq!(pager_command(env(&[("PALIMPSEST_PAGER", ""), ("PAGER", "more")])), None);
    }

    #[test]
    fn a_pager_that_cannot_start_is_an_error_to_fall_back_from() {
        assert!(spawn("/no/such/pager -x").is_err());
        let started = spawn("true").and_then(|mut c| c.wait());
        assert!(started.is_ok_and(|s| s.success()));
    }

    #[test]
    fn lines_are_clipped_as_they_are_written_in_any_pieces() {
        let text = "a long line\nok\nlast one";
        for piece in 1..text.len() {
            let mut out = Vec::new();
            let mut fitted = fitted(&mut out, 6);
            for chunk in text.as_bytes().chunks(piece) {
                fitted.write_all(chunk).unwrap_or_else(|e| panic!("{e}"));
            }
            fitted.finish().unwrap_or_else(|e| panic!("{e}"));
            drop(fitted);
            assert_eq!(String::from_utf8_lossy(&out), fit(text, 6), "pieces of {piece}");
        }
    }
}
