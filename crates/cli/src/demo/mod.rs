//! `palimpsest demo`: the whole system in one command.
//!
//! A scripted model works through a six-turn conversation with real tools
//! over a small sandboxed workspace (a temporary directory seeded with a
//! garden-shed project), appending every event to a store — SQLite by
//! default, in the current directory. Pruning and compaction thresholds are
//! set low, so the run shows tool results pruned and the history compacted
//! more than once. Then it prints the full log beside the surface (what the
//! model saw at the end), reopens the store, validates it, and sums up.
//!
//! Ctrl-C cancels the running turn (it ends `aborted`), or, between turns,
//! stops the demo before the next one; a process killed outright leaves
//! its turn open. Either way `--resume ID` repairs the log (contract
//! section 5), replays into a fresh workspace the files the earlier turns
//! wrote (their successful `write_file` calls, read from the log), and
//! carries on with the turns not yet completed. A resume never creates a
//! store.

mod progress;
mod script;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use palimpsest_core_agent_loop::plugins::{
    Compaction, CompactionConfig, ProviderSummarizer, ToolResultPruning,
};
use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, AgentLoopBuilder, CancellationToken, Clock, IdGenerator, ManualClock, Provider,
    SequentialIds, SystemClock, ToolSpec, TurnInput, UniqueIds,
};
use palimpsest_core_session::payload::{Settings, TurnEnd, TurnEndReason};
use palimpsest_core_session::{EventType, SurfaceOp};

use crate::error::Exit;
use crate::interrupts::Interrupts;
use crate::open_store::{open_existing_store, open_store};
use crate::store_arg::Store;

pub(crate) use script::TURNS;

/// Where the demo writes when `--store` is not given.
pub(crate) const DEFAULT_STORE: &str = "palimpsest-demo.db";

/// The demo's options.
#[derive(Debug, Clone)]
pub(crate) struct DemoOptions {
    /// The store: `.db` is SQLite, anything else a JSONL store directory.
    pub(crate) store: PathBuf,
    /// Continue this session instead of starting one.
    pub(crate) resume: Option<String>,
    /// Pause before each turn and each tool call, so a person can follow.
    pub(crate) pace: Duration,
    /// Skip the full timeline at the end.
    pub(crate) quiet: bool,
    /// Fixed clock, ids and session id (for snapshot tests).
    pub(crate) deterministic: bool,
    /// ANSI colours in the timeline.
    pub(crate) color: bool,
}

fn seed_workspace(dir: &Path) -> anyhow::Result<()> {
    for (name, text) in script::WORKSPACE {
        std::fs::write(dir.join(name), text).with_context(|| format!("seeding the workspace with {name}"))?;
    }
    Ok(())
}

/// The demo agent's system prompt.
const SYSTEM_PROMPT: &str =
    "You are a careful assistant working in a small project workspace. Use the tools to look before you answer.";

/// The demo's context budget: small, so compaction fires within six turns.
const CONTEXT_BUDGET: u64 = 700;

/// The loop the demo runs: the scripted model, the sandboxed tools, pruning
/// and compaction set to fire within six turns, and the progress plugin.
fn builder(
    workspace: &Path,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    progress: tokio::sync::mpsc::UnboundedSender<String>,
    pace: Duration,
) -> anyhow::Result<AgentLoopBuilder> {
    let tools = crate::tools::sandbox_tools(workspace, pace, &[]).context("opening the workspace")?;
    let provider: Arc<dyn Provider> = Arc::new(script::provider());
    // The settings every request is made with, logged first (contract 1.3).
    let settings = Settings {
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        model: Some(provider.model().to_owned()),
        provider: Some(provider.name().to_owned()),
        tools: Some(tools.specs().iter().map(ToolSpec::to_offered).collect()),
        context_budget: Some(CONTEXT_BUDGET),
        ..Settings::default()
    };
    Ok(AgentLoop::builder(provider)
        .clock(clock)
        .ids(ids)
        .settings(settings)
        // One event per delta: the paced demo's log must not depend on how
        // fast the machine runs it.
        .config(AgentConfig::default().with_chunk_window_ms(0))
        .tools(tools)
        .plugin(ToolResultPruning { keep_recent: 1, min_chars: 600 })
        .plugin(
            Compaction::new(CompactionConfig { budget_tokens: CONTEXT_BUDGET, keep_recent: 4 })
                .with_summarizer(ProviderSummarizer::default()),
        )
        .plugin(progress::Progress(progress)))
}

/// Runs the demo, writing everything a person sees to `out`.
pub(crate) fn run(options: &DemoOptions, out: &mut dyn Write) -> anyhow::Result<Exit> {
    // Multi-threaded, so that the loop's store writes run in
    // `block_in_place` and the signal handler and tools keep running.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // A closed stdout stops the printing, not the demo: its turns run to
    // their end and the log is whole.
    let mut out = crate::output::PrintingStops::new(out, "the demo runs on and its log is written whole");
    let result = runtime.block_on(run_async(options, &mut out));
    runtime.shutdown_timeout(crate::run::ABANDONED_TOOL_GRACE);
    result
}

async fn run_async(options: &DemoOptions, out: &mut dyn Write) -> anyhow::Result<Exit> {
    let started = Instant::now();
    let location = crate::location::Location::parse(&options.store)?;
    if options.resume.is_some() && !matches!(location, crate::location::Location::Postgres(_)) {
        // Nothing to resume where there is no store: say so, create nothing.
        if !options.store.exists() {
            return Err(crate::error::CliError {
                code: "not-found".into(),
                location: location.shown(),
                message: "no store here to resume a session from".into(),
                exit: Exit::Usage,
            }
            .into());
        }
    }
    let opened = match options.resume {
        Some(_) => open_existing_store(&options.store)?,
        None => open_store(&options.store)?,
    };
    let shown = opened.shown();
    // A session to resume is found (a unique prefix will do) before anything
    // is printed: an unknown id is one `not-found` line.
    let resume_id = match &options.resume {
        Some(wanted) => {
            let ids: Vec<String> = opened
                .store
                .list()
                .map_err(|e| crate::error::from_store(&e, &shown))?
                .into_iter()
                .map(|h| h.id)
                .collect();
            Some(crate::store_arg::unique_id(&ids, wanted, &shown, opened.kind())?)
        }
        None => None,
    };
    if matches!(opened.location, crate::location::Location::JsonlFile(_))
        && options.resume.is_none()
        && options.store.exists()
    {
        // A session file holds one session: a new demo needs a new file.
        return Err(crate::error::CliError {
            code: "already-exists".into(),
            location: shown.clone(),
            message: "this JSONL session file already holds a session; `--resume ID` continues it, \
                      or name a new file, a directory or a `.db`"
                .into(),
            exit: Exit::Invalid,
        }
        .into());
    }
    let store = opened.store.clone();
    let workspace =
        tempfile::Builder::new().prefix("palimpsest-demo-").tempdir().context("creating the workspace")?;
    seed_workspace(workspace.path())?;
    let (clock, ids): (Arc<dyn Clock>, Arc<dyn IdGenerator>) = if options.deterministic {
        (Arc::new(ManualClock::new(1_767_225_600_000).with_tick(10)), Arc::new(SequentialIds::new("m")))
    } else {
        (Arc::new(SystemClock), Arc::new(UniqueIds::default()))
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // No other worker writes the session while the demo runs.
    let builder = builder(workspace.path(), clock.clone(), ids, tx, options.pace)?
        .hold(crate::open_store::holder_name(), crate::open_store::hold_ttl());

    writeln!(out, "Palimpsest demo: a scripted agent with real tools, writing a durable session log.")?;
    writeln!(out, "store:     {shown} ({})", opened.kind())?;
    writeln!(
        out,
        "workspace: {} (a throwaway sandbox)",
        if options.deterministic { "<temp>".into() } else { workspace.path().display().to_string() }
    )?;
    let (mut agent, first_turn) = match &resume_id {
        None => {
            let id =
                if options.deterministic { "demo".to_owned() } else { format!("demo-{}", clock.now_ms()) };
            let agent = builder.create(store.clone(), id.clone()).context("creating the demo session")?;
            (agent, 0)
        }
        Some(id) => {
            let (agent, report) =
                builder.open(store.clone(), id).with_context(|| format!("resuming session {id:?}"))?;
            let restored = restore_workspace(agent.session(), workspace.path())?;
            let done = completed_turns(agent.session());
            writeln!(
                out,
                "resumed:   {} events, {} of {} turns completed",
                agent.session().events().len(),
                done,
                TURNS.len()
            )?;
            if restored > 0 {
                writeln!(out, "restored:  {restored} file write(s) of earlier turns, replayed from the log")?;
            }
            if let Some(range) = &report.repaired {
                writeln!(
                    out,
                    "repaired:  the interrupted turn was closed by {} repair event(s), seqs {}..={}",
                    range.end - range.start,
                    range.start,
                    range.end.saturating_sub(1)
                )?;
            }
            (agent, done)
        }
    };
    let id = agent.session_id().to_owned();
    writeln!(out, "session:   {id}\n")?;
    out.flush()?;

    // One listener for the whole run, registered before the first turn is
    // announced: a Ctrl-C between turns, with no turn running, is queued,
    // not lost (see `crate::interrupts`).
    let mut interrupts = Interrupts::install().context("listening for Ctrl-C")?;
    let resume_hint = format!(
        "Resume with:\n  palimpsest demo --store {} --resume {id}",
        crate::output::shell_word(&shown)
    );
    let cancel = CancellationToken::new();
    let mut interrupted = false;
    for (i, turn) in TURNS.iter().enumerate().skip(first_turn) {
        writeln!(out, "turn {} of {}", i + 1, TURNS.len())?;
        out.flush()?;
        // A Ctrl-C in the pause before the turn stops the demo here:
        // nothing is left open. (Without a pause, one pressed as the last
        // turn ended cancels this one at once.)
        let stop = !options.pace.is_zero()
            && tokio::select! {
                _ = tokio::time::sleep(options.pace) => false,
                Some(()) = interrupts.recv() => true,
            };
        if stop || cancel.is_cancelled() {
            writeln!(out, "  ^C: stopped before the turn began.\n\n{resume_hint}")?;
            interrupted = true;
            break;
        }
        let input = TurnInput::text(turn.prompt).with_cancel(cancel.clone());
        let outcome = {
            let run = agent.run_turn(input);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break result,
                    Some(line) = rx.recv() => {
                        writeln!(out, "{line}")?;
                        out.flush()?;
                    }
                    Some(()) = interrupts.recv(), if !cancel.is_cancelled() => {
                        writeln!(out, "  ^C: cancelling the turn…")?;
                        cancel.cancel();
                    }
                }
            }
        };
        while let Ok(line) = rx.try_recv() {
            writeln!(out, "{line}")?;
        }
        let outcome = outcome.with_context(|| format!("turn {} failed", i + 1))?;
        if outcome.reason != TurnEndReason::Completed {
            let why = match &outcome.reason {
                TurnEndReason::Aborted { reason } => format!("aborted ({reason})"),
                TurnEndReason::Error { error } => {
                    format!("with an error: {} ({})", error.message, error.code)
                }
                TurnEndReason::MaxTokens => "at the output-token limit".to_owned(),
                other => format!("{other:?}"),
            };
            writeln!(out, "\nThe turn ended {why}. {resume_hint}")?;
            interrupted = true;
            break;
        }
    }
    agent.flush().context("syncing the store")?;
    drop(agent);

    // Reopen the store from disk, as a new process would, and check it all.
    let reopened = Store::open_existing(&options.store, crate::store_arg::Access::Read)?;
    let reopened = crate::store_arg::Target::new(reopened, id.clone());
    let checked = reopened.check()?;
    if !options.quiet {
        writeln!(out, "\n── the full log beside the surface ──────────────────────────────")?;
        crate::inspect::render(&checked, &reopened, options.color, out)?;
    }
    let session = checked.report.session.as_ref().context("the reopened session has no header")?;
    let replaces: Vec<_> = session
        .events()
        .iter()
        .filter(|e| matches!(e.surface_op(), Some(SurfaceOp::Replace { .. })))
        .collect();
    let compactions = replaces.iter().filter(|e| *e.event_type() == EventType::UserMessage).count();
    let prunes = replaces.iter().filter(|e| *e.event_type() == EventType::ToolResult).count();
    writeln!(out, "\n── summary ──────────────────────────────────────────────────────")?;
    writeln!(
        out,
        "reopened {shown} and validated session {id}: {}",
        if checked.is_valid() {
            "valid, every surface rule and invariant holds"
        } else {
            "INVALID (see above)"
        }
    )?;
    writeln!(
        out,
        "events:     {} in the log, {} on the surface (what the model sees next)",
        session.events().len(),
        session.surface().len()
    )?;
    writeln!(out, "rewrites:   {} replaces: {compactions} compaction(s), {prunes} pruned tool result(s); nothing was deleted", replaces.len())?;
    if !options.deterministic {
        if !matches!(opened.location, crate::location::Location::Postgres(_)) {
            // Closed first: SQLite folds its WAL into the database when the
            // last connection goes, so the files named are the ones left.
            drop((reopened, store, opened));
            writeln!(out, "on disk:    {}", on_disk(&options.store))?;
        }
        writeln!(out, "time:       {:.2} s", started.elapsed().as_secs_f64())?;
    }
    writeln!(out, "next:       palimpsest inspect {} --session {id}", crate::output::shell_word(&shown))?;
    if !checked.is_valid() {
        return Ok(Exit::Invalid);
    }
    Ok(if interrupted { Exit::Invalid } else { Exit::Success })
}

/// Replays into a fresh `workspace` every file the session's earlier turns
/// wrote: each `write_file` call whose result came back without an error,
/// in log order. The interrupted run's workspace was a throwaway
/// directory, so without this a resumed turn would look for files its own
/// log says it wrote. Returns how many writes were replayed.
fn restore_workspace(session: &palimpsest_core_session::Session, workspace: &Path) -> anyhow::Result<usize> {
    use palimpsest_core_session::payload::{ToolCall, ToolResult};
    let events = session.events();
    let succeeded: std::collections::HashSet<String> = events
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolResult)
        .filter_map(|e| e.data_as::<ToolResult>().ok())
        .filter(|r| r.error.is_none())
        .map(|r| r.call_id().to_owned())
        .collect();
    let root = crate::tools::Workspace::open(workspace).context("opening the workspace")?;
    let mut replayed = 0;
    for call in events
        .iter()
        .filter(|e| *e.event_type() == EventType::ToolCall)
        .filter_map(|e| e.data_as::<ToolCall>().ok())
        .filter(|c| c.name == "write_file" && succeeded.contains(&c.call_id))
    {
        let args: serde_json::Value = serde_json::from_str(&call.arguments)
            .with_context(|| format!("reading the arguments of write_file call {}", call.call_id))?;
        let (Some(path), Some(content)) = (args["path"].as_str(), args["content"].as_str()) else {
            anyhow::bail!("write_file call {} has no path or content", call.call_id);
        };
        root.write_text(path, content, &CancellationToken::new())
            .map_err(|e| anyhow::anyhow!("replaying write_file call {}: {}", call.call_id, e.message))?;
        replayed += 1;
    }
    Ok(replayed)
}

/// Turns that ended `completed`: where a resumed demo carries on.
fn completed_turns(session: &palimpsest_core_session::Session) -> usize {
    session
        .events()
        .iter()
        .filter(|e| *e.event_type() == EventType::TurnEnd)
        .filter(|e| e.data_as::<TurnEnd>().is_ok_and(|t| t.reason == TurnEndReason::Completed))
        .count()
}

/// The store's files and their sizes, summed: `N bytes: a.db (N)`, with
/// `-wal` and `-shm` files when they exist, or a directory's files
/// (`N bytes in K files under DIR`). The figure is the sum of the sizes
/// of exactly the files named.
fn on_disk(path: &Path) -> String {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    if path.is_dir() {
        let files: Vec<u64> = std::fs::read_dir(path).map_or_else(
            |_| Vec::new(),
            |d| d.flatten().filter(|e| e.path().is_file()).map(|e| size(&e.path())).collect(),
        );
        let total: u64 = files.iter().sum();
        let n = files.len();
        return format!(
            "{total} bytes in {n} file{} under {}",
            if n == 1 { "" } else { "s" },
            path.display()
        );
    }
    let named: Vec<(String, u64)> = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| {
            let mut s = path.as_os_str().to_owned();
            s.push(suffix);
            let p = std::path::PathBuf::from(s);
            std::fs::metadata(&p).ok().filter(|m| m.is_file()).map(|m| (p.display().to_string(), m.len()))
        })
        .collect();
    let total: u64 = named.iter().map(|(_, n)| n).sum();
    let list: Vec<String> = named.iter().map(|(p, n)| format!("{p} ({n})")).collect();
    format!("{total} bytes: {}", list.join(" + "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's whole session log, with times and ids fixed, is pinned:
    /// any change to what it writes shows up here for review.
    #[test]
    fn the_demo_writes_a_valid_log_with_compactions_and_a_prune() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("demo-store");
        let options = DemoOptions {
            store: store.clone(),
            resume: None,
            pace: Duration::ZERO,
            quiet: true,
            deterministic: true,
            color: false,
        };
        let mut out = Vec::new();
        let exit = run(&options, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(exit, Exit::Success, "{text}");
        assert!(text.contains("valid, every surface rule and invariant holds"), "{text}");
        assert!(text.contains("2 compaction(s), 1 pruned tool result(s)"), "{text}");
        let log = std::fs::read_to_string(store.join("demo.jsonl")).unwrap();
        insta::assert_snapshot!("demo_session_log", log);
        insta::assert_snapshot!("demo_progress", text.replace(&store.display().to_string(), "<store>"));
    }
}
