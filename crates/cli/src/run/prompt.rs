//! The interactive prompt of `palimpsest run`: where the next line comes
//! from, and what a line means.
//!
//! On a terminal the line is read by a real line editor (`rustyline`):
//! cursor keys and Emacs-style editing, a history kept across runs, Ctrl-R
//! reverse search, bracketed paste (a pasted block is one message, its
//! newlines kept), Alt-Enter for a newline. The editor blocks, so it runs
//! on its own thread and reads a line only when asked: between lines the
//! terminal is left in its usual mode, so Ctrl-C during a turn is a signal
//! (it cancels the turn) while Ctrl-C at the prompt is a key (it clears the
//! line). When stdin is not a terminal, each line of it is one input.
//!
//! A line starting with `/` is a command ([`parse`]); `//` escapes a
//! leading slash; anything else goes to the model verbatim.

use std::io::{self, BufRead};
use std::path::PathBuf;

use tokio::sync::mpsc;

/// The variable that names the history file, instead of the default one.
pub(crate) const ENV_HISTORY: &str = "PALIMPSEST_HISTORY";

/// How many entries the history keeps.
const HISTORY_SIZE: usize = 1000;

/// The commands, as `/help` lists them.
pub(crate) const HELP: &str = "\
commands:
  /help           this list
  /exit, /quit    leave (Ctrl-D at an empty prompt does too)
  /session        print the session id
  /model [NAME]   ask NAME from the next turn on (logs new settings); without NAME, show the model
  /system [TEXT]  make TEXT the system prompt from the next turn on (logs new settings); without TEXT, show it
  /compact        compact the history now, whatever its size (the newest 8 entries stay verbatim)
  /fork           fork the session here and carry on in the fork
  //TEXT          send /TEXT to the model
keys: Left/Right and the usual Emacs keys edit the line, Up/Down walk the history,
  Ctrl-R searches it, Alt-Enter inserts a newline, a paste is one message,
  Ctrl-C clears the line (during a turn: cancels it; twice: leaves), Ctrl-D on an empty line leaves";

/// The names of the commands, for the error about an unknown one.
pub(crate) const COMMANDS: &str = "/help, /exit, /quit, /session, /model, /system, /compact, /fork";

/// What one line of input asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// Nothing but whitespace: not a turn.
    Blank,
    /// A message for the model, verbatim.
    Text(String),
    /// A slash command.
    Command(Command),
}

/// A slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// `/help`.
    Help,
    /// `/exit` or `/quit`.
    Exit,
    /// `/session`.
    Session,
    /// `/model [NAME]`.
    Model(Option<String>),
    /// `/system [TEXT]`.
    System(Option<String>),
    /// `/compact`.
    Compact,
    /// `/fork`.
    Fork,
    /// `/word` that is none of the above.
    Unknown(String),
    /// A command that takes no argument, given one.
    Extra(String),
}

/// What a line means. Only a final newline is removed; a message keeps its
/// whitespace (leading indentation included).
pub(crate) fn parse(line: &str) -> Input {
    let line = line.strip_suffix('\n').map_or(line, |l| l.strip_suffix('\r').unwrap_or(l));
    if line.trim().is_empty() {
        return Input::Blank;
    }
    if let Some(rest) = line.strip_prefix("//") {
        return Input::Text(format!("/{rest}"));
    }
    let Some(rest) = line.strip_prefix('/') else {
        return Input::Text(line.to_owned());
    };
    let (word, arg) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    let arg = (!arg.is_empty()).then(|| arg.to_owned());
    let bare = |command: Command| match &arg {
        None => command,
        Some(_) => Command::Extra(format!("/{word}")),
    };
    Input::Command(match word {
        "help" | "?" => bare(Command::Help),
        "exit" | "quit" => bare(Command::Exit),
        "session" => bare(Command::Session),
        "compact" => bare(Command::Compact),
        "fork" => bare(Command::Fork),
        "model" => Command::Model(arg),
        "system" => Command::System(arg),
        _ => Command::Unknown(format!("/{word}")),
    })
}

/// One read from the prompt.
#[derive(Debug)]
pub(crate) enum Read {
    /// A line (or a pasted block, or lines joined with Alt-Enter).
    Line(String),
    /// Ctrl-C at the prompt: the line was dropped.
    Cleared,
}

/// Where lines come from: the line editor on a terminal, else stdin's
/// lines. `None` from its `next` is the end of input.
pub(crate) struct Lines {
    /// On a terminal: asks the editor thread for one line.
    ask: Option<std::sync::mpsc::Sender<()>>,
    rx: mpsc::UnboundedReceiver<io::Result<Read>>,
}

impl Lines {
    /// The editor on a terminal (`history` is its file, if any), else
    /// stdin's lines.
    pub(crate) fn start(terminal: bool, history: Option<PathBuf>) -> Lines {
        if terminal {
            editor(history)
        } else {
            Lines { ask: None, rx: stdin_lines() }
        }
    }

    /// Whether the lines come from the line editor.
    pub(crate) fn is_editor(&self) -> bool {
        self.ask.is_some()
    }

    /// Asks for the next read (the editor shows its prompt); a no-op for
    /// stdin's lines, which are read ahead.
    pub(crate) fn ask(&self) {
        if let Some(ask) = &self.ask {
            // A gone thread has closed (or is closing) the channel.
            let _ = ask.send(());
        }
    }

    /// The next read, once asked for; `None` at the end of input.
    pub(crate) async fn recv(&mut self) -> Option<io::Result<Read>> {
        self.rx.recv().await
    }
}

/// The history file: `$PALIMPSEST_HISTORY` (an empty value: no history),
/// else `palimpsest/history` in the user's state directory
/// (`$XDG_STATE_HOME`, else `~/.local/state`).
pub(crate) fn history_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = env(ENV_HISTORY) {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let state = env("XDG_STATE_HOME")
        .filter(|d| !d.is_empty() && std::path::Path::new(d).is_absolute())
        .map(PathBuf::from)
        .or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("palimpsest").join("history"))
}

/// stdin's lines, read on their own thread so a turn (and Ctrl-C) never
/// waits on the input. The channel closes at end of input.
fn stdin_lines() -> mpsc::UnboundedReceiver<io::Result<Read>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let failed = line.is_err();
            if tx.send(line.map(Read::Line)).is_err() || failed {
                break;
            }
        }
    });
    rx
}

/// The line editor on its own thread: one `readline` per ask, so the
/// terminal is in raw mode only while the prompt is shown. The channel
/// closes at Ctrl-D on an empty line.
fn editor(history: Option<PathBuf>) -> Lines {
    let (ask, asked) = std::sync::mpsc::channel::<()>();
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut editor = match new_editor(history.as_deref()) {
            Ok(editor) => editor,
            Err(e) => {
                let _ = tx.send(Err(io::Error::other(format!("cannot start the line editor: {e}"))));
                return;
            }
        };
        while asked.recv().is_ok() {
            let read = match editor.readline("> ") {
                Ok(line) => {
                    remember(&mut editor, history.as_deref(), &line);
                    Ok(Read::Line(line))
                }
                Err(rustyline::error::ReadlineError::Interrupted) => Ok(Read::Cleared),
                Err(rustyline::error::ReadlineError::Eof) => break,
                Err(e) => Err(io::Error::other(e)),
            };
            let failed = read.is_err();
            if tx.send(read).is_err() || failed {
                break;
            }
        }
    });
    Lines { ask: Some(ask), rx }
}

type Editor = rustyline::Editor<(), rustyline::history::FileHistory>;

fn new_editor(history: Option<&std::path::Path>) -> rustyline::Result<Editor> {
    use rustyline::{Cmd, Config, EventHandler, KeyCode, KeyEvent, Modifiers};
    let config = Config::builder()
        // The prompt and the echo go to the terminal, never to stdout: stdout is the answer's.
        .behavior(rustyline::config::Behavior::PreferTerm)
        .auto_add_history(false)
        .history_ignore_dups(true)?
        .history_ignore_space(false)
        .max_history_size(HISTORY_SIZE)?
        .bracketed_paste(true)
        .build();
    let mut editor = Editor::with_config(config)?;
    editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), EventHandler::Simple(Cmd::Newline));
    if let Some(path) = history {
        if path.exists() {
            if let Err(e) = editor.load_history(path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the prompt history");
            }
        }
    }
    Ok(editor)
}

/// Adds a non-blank line to the history and appends it to the file.
fn remember(editor: &mut Editor, history: Option<&std::path::Path>, line: &str) {
    if line.trim().is_empty() {
        return;
    }
    let _ = editor.add_history_entry(line);
    let Some(path) = history else { return };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = editor.append_history(path) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the prompt history");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Input {
        Input::Text(s.to_owned())
    }

    #[test]
    fn messages_keep_their_whitespace_but_lose_the_final_newline() {
        assert_eq!(parse("    indented\n"), text("    indented"));
        assert_eq!(parse("a\n  b \n"), text("a\n  b "));
        assert_eq!(parse("crlf\r\n"), text("crlf"));
        assert_eq!(parse(" \t\n"), Input::Blank);
        assert_eq!(parse(""), Input::Blank);
        // A slash after whitespace is text.
        assert_eq!(parse(" /exit"), text(" /exit"));
    }

    #[test]
    fn slash_commands_and_the_double_slash_escape() {
        assert_eq!(parse("/exit"), Input::Command(Command::Exit));
        assert_eq!(parse("/quit\n"), Input::Command(Command::Exit));
        assert_eq!(parse("/help"), Input::Command(Command::Help));
        assert_eq!(parse("/session"), Input::Command(Command::Session));
        assert_eq!(parse("/compact"), Input::Command(Command::Compact));
        assert_eq!(parse("/fork"), Input::Command(Command::Fork));
        assert_eq!(parse("/model  gpt-x "), Input::Command(Command::Model(Some("gpt-x".into()))));
        assert_eq!(parse("/model"), Input::Command(Command::Model(None)));
        assert_eq!(
            parse("/system Be terse.\nVery."),
            Input::Command(Command::System(Some("Be terse.\nVery.".into())))
        );
        assert_eq!(parse("/system"), Input::Command(Command::System(None)));
        assert_eq!(parse("/frobnicate now"), Input::Command(Command::Unknown("/frobnicate".into())));
        assert_eq!(parse("/"), Input::Command(Command::Unknown("/".into())));
        assert_eq!(parse("/exit now"), Input::Command(Command::Extra("/exit".into())));
        assert_eq!(parse("//etc/hosts is a file"), text("/etc/hosts is a file"));
        assert_eq!(parse("//"), text("/"));
    }

    #[test]
    fn the_history_file_follows_the_variable_then_the_state_directory() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let path = |p: &str| Some(PathBuf::from(p));
        assert_eq!(history_path(env(&[("PALIMPSEST_HISTORY", "/t/h"), ("HOME", "/home/u")])), path("/t/h"));
        assert_eq!(history_path(env(&[("PALIMPSEST_HISTORY", ""), ("HOME", "/home/u")])), None);
        assert_eq!(
            history_path(env(&[("XDG_STATE_HOME", "/s"), ("HOME", "/home/u")])),
            path("/s/palimpsest/history")
        );
        // A relative XDG_STATE_HOME is ignored, as the spec says.
        assert_eq!(
            history_path(env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/home/u")])),
            path("/home/u/.local/state/palimpsest/history")
        );
        assert_eq!(history_path(env(&[])), None);
    }
}
