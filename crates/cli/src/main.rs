//! The `palimpsest` command-line tool: check, inspect, derive and repair
//! Palimpsest session logs; fork them, explain an event, export them for
//! reading.
//!
//! Every command that reads a session takes `STORE [--session ID]`: a JSONL
//! session file, a JSONL store directory, a SQLite database or a PostgreSQL
//! URL (see [`location`] and [`store_arg`]); `convert` copies sessions between them, `sessions`
//! lists them and `fork` branches one inside its store.
//!
//! The commands and their output follow section 7 of the session format
//! contract: exit 0 on success, 1 when the log is invalid or the operation
//! was refused, 2 on a usage or I/O error; every error is one stderr line
//! `error[<code>]: <where>: <what>`. The library crates do the work; this
//! binary only reads arguments, calls them and renders the results.
//!
//! Logging goes to stderr through `tracing`, off unless `PALIMPSEST_LOG` is
//! set (e.g. `PALIMPSEST_LOG=debug`).

/// The allocator: mimalloc, whose per-thread heaps make the frees of
/// events decoded on another thread cheap (docs/performance.md, issue 20).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod check;
mod cmd;
mod convert;
mod demo;
mod describe;
mod error;
mod explain;
mod export;
mod fork;
mod inspect;
mod interrupts;
mod location;
mod open_store;
mod output;
mod pager;
mod remove;
mod replay;
mod run;
mod search;
mod sessions;
mod settings_view;
mod store_arg;
mod timefmt;
mod tools;

use std::io::{self, BufWriter, IsTerminal, Write};

use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::Exit;
use crate::store_arg::StoreArgs;

/// Check, inspect, derive, repair, fork, explain and export Palimpsest session logs.
#[derive(Debug, Parser)]
#[command(name = "palimpsest", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the header, every surface rule and the structural invariants.
    ///
    /// Exit 0 when the log is valid, 1 when it is not, 2 when it cannot be
    /// read. Every violation is printed on stderr as `error[<code>]`.
    Validate {
        #[command(flatten)]
        target: StoreArgs,
        /// Print `{"valid": bool, "events": n, "violations": [...]}` on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print the surface (the seqs the model sees, in order) as a JSON array.
    Surface {
        #[command(flatten)]
        target: StoreArgs,
    },
    /// Print the derived messages (the next model request) as a JSON array.
    ///
    /// With --request, the whole request instead: `{"settings": S, "messages": M}`,
    /// S the settings of the last `session/settings` event (`{}` before any),
    /// on one line, the same bytes on every replay.
    Derive {
        #[command(flatten)]
        target: StoreArgs,
        /// Print `{"seq", "sourceEventSeqs", "message"}` objects instead of bare messages.
        #[arg(long, conflicts_with = "request")]
        provenance: bool,
        /// Print the derived request `{"settings", "messages"}` instead of the messages.
        #[arg(long)]
        request: bool,
        /// Read the session as an agent resuming it does: from the store's
        /// checkpoint and the events after it, not the whole log (fast on a
        /// long log; trusts the checkpoint for the events it covers, which
        /// only `validate` and the other commands check).
        #[arg(long)]
        from_checkpoint: bool,
    },
    /// Print the events that close an interrupted turn, as a JSON array.
    ///
    /// A balanced log gets `[]`. An invalid log is refused (exit 1).
    Repair {
        #[command(flatten)]
        target: StoreArgs,
        /// Append the closers to the session (a torn last line is cut first).
        #[arg(long)]
        write: bool,
    },
    /// Show a session as a timeline a person can read.
    ///
    /// On a terminal, lines are clipped to its width ($COLUMNS, else the
    /// terminal's) and the output goes through a pager: $PALIMPSEST_PAGER,
    /// else $PAGER, else `less -FRX` (empty or `cat`: none). Piped, the
    /// output is unchanged.
    Inspect {
        #[command(flatten)]
        target: StoreArgs,
        /// When to use colours.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
        /// Write straight to the terminal, without a pager.
        #[arg(long)]
        no_pager: bool,
    },
    /// List the sessions of a store, newest first: id, creation time, last
    /// activity, events, turns, outcome, title, parent.
    ///
    /// Last activity is the time of the session's last event (`prune` goes
    /// by the later of that and the creation: a fork keeps its parent's
    /// event times). The outcome is how the last turn ended: `completed`,
    /// `max-tokens`, `error`, or `interrupted` (cancelled, or still open
    /// after a crash); the title is the first prompt. `--tree` shows
    /// the lineage instead: each fork under its parent, with the seq it was
    /// forked after.
    Sessions {
        /// A session file (`.jsonl`), a JSONL store directory, a SQLite database (`.db`), or a postgres:// URL
        /// [default: ./palimpsest.db, the store `palimpsest run` writes].
        store: Option<PathBuf>,
        /// Show forks under their parents.
        #[arg(long)]
        tree: bool,
        /// Print the sessions as one JSON array, for scripts.
        #[arg(long, conflicts_with = "tree")]
        json: bool,
    },
    /// Find the messages that hold every word of QUERY, in every session of STORE.
    ///
    /// Searched: the text of user, context (compaction summaries included),
    /// steering, assistant and tool-result messages, not streamed chunks.
    /// Words match whole, in any case; every word is required; `foo-bar`
    /// is the two words `foo` and `bar`. The whole log is searched, so
    /// messages a compaction or prune took off the surface are found too.
    /// Hits come newest session (by last activity) first, then by seq: a
    /// line `<id> <seq> <type> <time>` (the id as short as `--session`
    /// takes it), then the snippet. Exit 0 when something was found, 1 when
    /// nothing was (like grep), 2 when the query has no word at all
    /// (`search-query-empty`) or STORE cannot be read.
    Search {
        /// A session file (`.jsonl`), a JSONL store directory, a SQLite database (`.db`), or a postgres:// URL.
        store: PathBuf,
        /// The words to find, all of them.
        #[arg(value_name = "QUERY", required = true, num_args = 1..)]
        query: Vec<String>,
        /// Show at most N hits.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// Print `[{"session", "seq", "type", "time", "snippet"}]` instead, one hit a line.
        #[arg(long)]
        json: bool,
        /// When to highlight the query's words.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
    },
    /// Fork a session after event SEQ into a new session of the same store.
    ///
    /// The child's seed is the parent's events 0..=SEQ; its header names the
    /// parent (`parentSession`) and the seed's length (`seedLength`). A fork
    /// inside a turn gets the repair closers, so the child is valid and can
    /// be resumed. The parent is never written. The child is written whole,
    /// all or nothing (one transaction in SQLite and PostgreSQL, a file that
    /// appears whole in JSONL; beside a bare JSONL file, in the file a JSONL
    /// store would give it). Prints the new id.
    ///
    /// The default id is `<parent>-fork-<SEQ>`, or `<parent>-fork-<SEQ>-2`,
    /// `-3`, ... when that is taken. The seed must be valid: a log broken at
    /// or before SEQ is refused (exit 1); a SEQ past the end is
    /// `fork-point-missing` (exit 2).
    Fork {
        #[command(flatten)]
        target: StoreArgs,
        /// The last event of the parent to copy.
        #[arg(long, value_name = "SEQ")]
        at: u64,
        /// The new session's id (default `<parent>-fork-<SEQ>`, made unique).
        #[arg(long, value_name = "NEW")]
        id: Option<String>,
    },
    /// Explain one event: where it is, whether the model sees it, what it
    /// cites (recursively), what cites it, and what shadowed it.
    ///
    /// `--json` prints one object: `{"session", "seq", "type", "time",
    /// "turn", "step", "surfacePosition" (from 0), "surfaceOp", "shadowed",
    /// "shadowedBy", "shadowChain", "standsInItsPlace", "cites": [{"seq",
    /// "type", "cites"}], "citedBy"}`, each key described in the project's
    /// documentation of the export format. A SEQ that is not in the log is
    /// `not-found` (exit 2).
    Explain {
        #[command(flatten)]
        target: StoreArgs,
        /// The event to explain (required; `explain SEQ` alone reads ./palimpsest.db).
        #[arg(value_name = "SEQ")]
        seq: Option<u64>,
        /// Print one JSON object instead of the report.
        #[arg(long)]
        json: bool,
    },
    /// Export a session for reading: Markdown, one self-contained HTML file, or JSON.
    ///
    /// `--view transcript` (the default) is what the person saw: every
    /// appended message in log order, shadowed ones included, with turns,
    /// and a marker where a compaction or prune happened. `--view model` is
    /// what the model saw last: the surface in order, each message with its
    /// position, seq, surfaceOp and sourceEventSeqs.
    ///
    /// HTML is one file that needs no network and no script: tool calls,
    /// results and summaries fold with `<details>`, images are inline data
    /// URLs, and all text is escaped. Markdown fences tool arguments and
    /// results.
    ///
    /// JSON is one object, stable within its version: `{"format":
    /// "palimpsest-export", "version": 1, "view", "session": {"id",
    /// "createdAt", "cwd", "parentSession", "seedLength", "events",
    /// "turns", "surface", "settings", "settingsSeq"}, "items": [...]}`.
    /// Each item has a "kind": "turn-start" `{"seq", "time", "turn"}`,
    /// "turn-end" `{"seq", "time", "turn", "reason"}`, "settings"
    /// `{"seq", "time", "changes", "settings"}` (transcript view), or
    /// "message" `{"seq", "time", "type", "turn",
    /// "step", "surfacePosition", "surfaceOp", "sourceEventSeqs",
    /// "shadowedBy", "replaces": {"kind", "shadowed"}, "usage",
    /// "toolError", "interrupted", "message"}`. Every key is always present
    /// (null when empty); new keys may be added within a version. The
    /// project's documentation of the export format describes every field.
    Export {
        #[command(flatten)]
        target: StoreArgs,
        /// The file format (`md` for Markdown); left out, -o FILE's extension decides.
        #[arg(long, value_enum)]
        format: Option<export::Format>,
        /// Which messages, in which order.
        #[arg(long, value_enum, default_value_t = export::ExportView::Transcript)]
        view: export::ExportView,
        /// Write to FILE instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Copy one session or a whole store between JSONL, SQLite and PostgreSQL, checking each.
    ///
    /// DST is a postgres:// URL for PostgreSQL; DST ending in `.db` is a
    /// SQLite database; DST ending in `.jsonl` is a session file (when one
    /// session is copied); any other DST is a JSONL store directory.
    /// Existing sessions in DST are never overwritten.
    Convert {
        /// Where to copy from: a session file, a JSONL store directory, a SQLite database or a postgres:// URL.
        src: PathBuf,
        /// Where to copy to (created if missing).
        dst: PathBuf,
        /// Copy only this session of SRC.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// Delete one session, after asking (`--yes` does not ask).
    ///
    /// Shows the session (id, events, last activity) and asks on the
    /// terminal; without a terminal, --yes is required. A session another
    /// worker holds is refused with `locked`. In a SQLite database the
    /// deleted rows' bytes stay in free pages until the file is rewritten
    /// (`VACUUM`; see the persistence-sqlite README).
    Delete {
        /// A session file (`.jsonl`), a JSONL store directory, a SQLite database (`.db`), or a postgres:// URL.
        store: PathBuf,
        /// The session to delete; may be left out when STORE holds exactly one.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Delete every session whose last activity is older than DURATION, after asking.
    ///
    /// DURATION is a whole number and a unit: 45s, 90m, 12h, 30d, 2w. Lists the
    /// sessions and asks once; without a terminal, --yes is required.
    Prune {
        /// A JSONL store directory, a SQLite database (`.db`), or a postgres:// URL.
        store: PathBuf,
        /// How old a session's last activity must be to go, e.g. 30d.
        #[arg(long, value_name = "DURATION", value_parser = remove::parse_duration)]
        older_than: std::time::Duration,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Print a shell completion script: `palimpsest completions bash > ~/.local/share/bash-completion/completions/palimpsest`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `palimpsest man | man -l -`.
    Man {
        /// Write one page per command into DIR instead: palimpsest.1, palimpsest-run.1, ...
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// The main job: a scripted agent session with real tools, end to end.
    ///
    /// Runs six turns over a sandboxed workspace, pruning and compacting the
    /// history on the way, into a store (SQLite in the current directory by
    /// default); then shows the log beside the surface, reopens and
    /// validates the store, and sums up. No setup, no network.
    Demo {
        /// The store: a path ending in `.db` is SQLite, a postgres:// URL is PostgreSQL, one ending in
        /// `.jsonl` a new session file (one session a file), any other a JSONL store directory.
        #[arg(long, value_name = "PATH", default_value = demo::DEFAULT_STORE)]
        store: PathBuf,
        /// Continue a stored demo session (after Ctrl-C, a crash, or a normal exit).
        #[arg(long, value_name = "ID")]
        resume: Option<String>,
        /// Milliseconds to pause before each turn and each tool call, so a person can follow along.
        #[arg(long, value_name = "MS", default_value_t = 150)]
        pace: u64,
        /// Skip the full timeline at the end.
        #[arg(long)]
        quiet: bool,
        /// When to use colours.
        #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
        color: ColorChoice,
    },
    // The help text is `RunArgs`' doc comment.
    Run(run::RunArgs),
}

/// When `inspect` uses ANSI colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColorChoice {
    /// When stdout is a terminal and `NO_COLOR` is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

fn main() -> ExitCode {
    init_tracing();
    if std::env::args_os().len() == 1 {
        // Bare `palimpsest`: what it is and the first two steps, not a
        // usage error with the whole help.
        let _ = io::stdout().lock().write_all(SHORT_USAGE.as_bytes());
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let stdout = io::stdout();
    let json_errors = cli.command.prints_json();
    // JSON shown on a terminal escapes what the terminal would act on.
    let for_terminal = cli.command.stdout_is_json() && stdout.is_terminal();
    let mut locked = stdout.lock();
    let mut escaped;
    let writer: &mut dyn Write = if for_terminal {
        escaped = output::JsonForTerminal::new(&mut locked);
        &mut escaped
    } else {
        &mut locked
    };
    let mut out = BufWriter::new(writer);
    let result = run(cli.command, &mut out).and_then(|exit| {
        out.flush().context("writing stdout")?;
        Ok(exit)
    });
    match result {
        Ok(exit) => exit.into(),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // Whatever was printed before the error still goes out.
            let error = error::resolve(&e);
            if json_errors {
                // Where stdout is JSON, so is the error (stderr has it too).
                let _ = writeln!(out, "{}", error::json_line(&error));
            }
            let _ = out.flush();
            output::error_line(&error.to_string());
            error.exit.into()
        }
    }
}

/// What bare `palimpsest` prints.
const SHORT_USAGE: &str = "\
palimpsest: durable, replayable session logs for LLM agents.

First steps:
  palimpsest demo                         a scripted agent session into ./palimpsest-demo.db, then its log
  palimpsest run \"Hello\"                  talk to a model (OPENAI_BASE_URL, OPENAI_MODEL, OPENAI_API_KEY)

Every day:
  palimpsest run -c \"And then?\"           continue the session started last
  palimpsest sessions palimpsest.db       the sessions: outcome, first prompt
  palimpsest search palimpsest.db WORDS   the messages, in any session, holding every word
  palimpsest inspect palimpsest.db --session ID
                                          one session as a timeline
  palimpsest export palimpsest.db --session ID -o s.html
                                          one session to read (.md, .html, .json)

Commands: validate surface derive repair inspect sessions search fork explain export
          convert delete prune demo run completions man
`palimpsest help COMMAND` tells more.
";

fn run(command: Command, out: &mut dyn Write) -> anyhow::Result<Exit> {
    match command {
        Command::Validate { target, json } => cmd::validate(&target, json, out),
        Command::Surface { target } => cmd::surface(&target, out),
        Command::Derive { target, provenance, request, from_checkpoint } => {
            cmd::derive(&target, provenance, request, from_checkpoint, out)
        }
        Command::Repair { target, write } => cmd::repair(&target, write, out),
        Command::Inspect { target, color, no_pager } => cmd::inspect(&target, color.enabled(), no_pager, out),
        Command::Sessions { store, tree, json } => {
            sessions::sessions(&store_arg::store_or_default(store.as_deref())?, tree, json, out)
        }
        Command::Search { store, query, limit, json, color } => search::search(
            &store,
            &query,
            usize::try_from(limit).unwrap_or(usize::MAX),
            json,
            color.enabled(),
            out,
        ),
        Command::Fork { target, at, id } => fork::fork(&target, at, id.as_deref(), out),
        Command::Explain { target, seq, json } => explain::explain(&target, seq, json, out),
        Command::Export { target, format, view, output } => {
            export::export(&target, format, view, output.as_deref(), out)
        }
        Command::Convert { src, dst, session } => convert::convert(&src, session.as_deref(), &dst, out),
        Command::Demo { store, resume, pace, quiet, color } => {
            let options = demo::DemoOptions {
                store,
                resume,
                pace: std::time::Duration::from_millis(pace),
                quiet,
                deterministic: false,
                color: color.enabled(),
            };
            demo::run(&options, out)
        }
        Command::Run(args) => run::run(args, out),
        Command::Delete { store, session, yes } => {
            remove::delete(&StoreArgs { store: Some(store), session }, yes, out)
        }
        Command::Prune { store, older_than, yes } => remove::prune(&store, older_than, yes, out),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            // Generated in memory: clap_complete panics on a write error
            // (a closed pipe), where `out` reports it.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "palimpsest", &mut script);
            out.write_all(&script)?;
            Ok(Exit::Success)
        }
        Command::Man { dir: None } => {
            use clap::CommandFactory;
            // As `--dir` writes it: no `palimpsest-help(1)`, which has no page.
            clap_mangen::Man::new(Cli::command().disable_help_subcommand(true)).render(out)?;
            Ok(Exit::Success)
        }
        Command::Man { dir: Some(dir) } => man_pages(&dir, out),
    }
}

/// `palimpsest man --dir DIR`: every page, one per command, with clap's
/// generator; prints the path of each page written.
fn man_pages(dir: &std::path::Path, out: &mut dyn Write) -> anyhow::Result<Exit> {
    use clap::CommandFactory;
    let shown = dir.display().to_string();
    std::fs::create_dir_all(dir)
        .map_err(|e| error::CliError::io(shown.clone(), format!("cannot create: {e}")))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .map_err(|e| error::CliError::io(shown.clone(), format!("cannot write the pages: {e}")))?;
    // The pages clap_mangen writes: the command's, then one per subcommand
    // (there are no nested ones).
    let cli = Cli::command();
    let subcommands = cli.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name().to_owned());
    let names =
        std::iter::once("palimpsest.1".to_owned()).chain(subcommands.map(|n| format!("palimpsest-{n}.1")));
    for name in names {
        let page = dir.join(&name);
        if !page.is_file() {
            return Err(error::CliError::io(page.display().to_string(), "the page was not written").into());
        }
        writeln!(out, "{}", page.display())?;
    }
    Ok(Exit::Success)
}

impl Command {
    /// Whether the command's stdout is JSON (`--json`, `export --format
    /// json` to stdout): an error is then printed there as JSON too.
    /// Whether everything the command prints on stdout is JSON: the
    /// commands of [`Command::prints_json`], and `surface`, `derive` and
    /// `repair`, whose output is always JSON.
    fn stdout_is_json(&self) -> bool {
        self.prints_json()
            || matches!(self, Command::Surface { .. } | Command::Derive { .. } | Command::Repair { .. })
    }

    fn prints_json(&self) -> bool {
        match self {
            Command::Validate { json, .. }
            | Command::Sessions { json, .. }
            | Command::Search { json, .. }
            | Command::Explain { json, .. } => *json,
            Command::Export { format, output, .. } => {
                *format == Some(export::Format::Json) && output.is_none()
            }
            _ => false,
        }
    }
}

impl ColorChoice {
    fn enabled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => output::stdout_wants_color(),
        }
    }
}

/// Help and version go to stdout with exit 0; anything else is a usage error:
/// `error[usage]: ...` and clap's hint, exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            if asks_for_json(std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned())) {
                // As a parsed command's error would be: JSON on stdout too.
                let first = text.lines().next().unwrap_or_default();
                let error = error::CliError::usage(first);
                let _ = writeln!(io::stdout().lock(), "{}", error::json_line(&error));
            }
            let mut stderr = io::stderr().lock();
            let _ = write!(stderr, "error[usage]: {text}");
            Exit::Usage.into()
        }
    }
}

/// Whether a command line that did not parse asked for JSON output
/// (`--json`, `--format json`): its usage error is then JSON on stdout too.
fn asks_for_json(args: impl Iterator<Item = String>) -> bool {
    let args: Vec<String> = args.collect();
    args.iter().enumerate().any(|(i, a)| {
        a == "--json"
            || a == "--format=json"
            || (a == "--format" && args.get(i + 1).is_some_and(|v| v == "json"))
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().filter_map(|c| c.downcast_ref::<io::Error>()).any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

/// Logs go to stderr, filtered by `PALIMPSEST_LOG`; off when it is unset.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PALIMPSEST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(io::stderr).try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
