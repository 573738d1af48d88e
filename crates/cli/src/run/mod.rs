//! `palimpsest run`: talk to a real model through any OpenAI-compatible
//! chat-completions endpoint, with every event landing in a store.
//!
//! One-shot with a PROMPT argument; otherwise an interactive prompt
//! ([`prompt`]): on a terminal a line editor with history and slash
//! commands, else one turn per line of stdin, until `/exit` or end of input. The
//! assistant's text is printed on stdout as it streams, and nothing else
//! goes there, so `palimpsest run "..." > answer.txt` keeps just the
//! answer; the session id, tool calls and results, rewrites and errors are
//! short lines on stderr.
//!
//! The loop is `palimpsest-core-agent-loop`'s, with
//! `palimpsest-llm-openai`'s provider (flags falling back to the
//! `OPENAI_*` variables), the tool-result pruning and compaction plugins,
//! and, with `--tools DIR`, the demo's sandboxed tools. What reaches the
//! screen comes from the events the loop has committed ([`echo`]), so it is
//! what the log says.
//!
//! Ctrl-C cancels the running turn (it ends `aborted`, what streamed is
//! kept); a second Ctrl-C exits. At the line editor's prompt Ctrl-C clears
//! the line, and a second one (or one within 2 s of a cancel) exits, as
//! Ctrl-D on an empty line does. A provider error
//! ends the turn with that error in the log. Either way the log stays
//! valid, and `--session ID` carries on (closing an interrupted turn
//! first).

mod echo;
mod prompt;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use palimpsest_core_agent_loop::plugins::{
    Compaction, CompactionConfig, CompactionTrigger, ToolResultPruning,
};
use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, AgentLoopBuilder, CancellationToken, LoopError, Provider, ToolRegistry, ToolSpec,
    TurnInput, TurnOutcome,
};
use palimpsest_core_session::payload::{Block, SessionSettings, Settings, TurnEndReason};
use palimpsest_core_session::{EventType, Session};
use palimpsest_llm_openai::{ConfigError, OpenAiConfig, OpenAiProvider, ENV_API_KEY, ENV_BASE_URL};
use palimpsest_persistence::{SessionStore, StoreError};
use tokio::sync::mpsc;

use crate::error::{from_store, CliError, Exit};
use crate::interrupts::Interrupts;
use crate::location::Location;
use crate::open_store::{open_existing_store, open_store, writable_location, OpenedStore};
use crate::output;
use echo::{Echo, EchoPlugin};
use prompt::{Command, Input, Read};

/// Where `run` writes when `--store` is not given.
pub(crate) const DEFAULT_STORE: &str = "palimpsest.db";

/// The default `--context-budget`, in estimated tokens.
pub(crate) const DEFAULT_CONTEXT_BUDGET: u64 = 100_000;

/// Talk to a model through an OpenAI-compatible endpoint, logging every event.
///
/// With PROMPT, runs one turn and exits; without, an interactive prompt
/// until `/exit`, Ctrl-D or end of input: on a terminal a line editor
/// (history in $PALIMPSEST_HISTORY, else $XDG_STATE_HOME/palimpsest/history
/// or ~/.local/state/palimpsest/history; Ctrl-R searches it; Alt-Enter
/// inserts a newline; a paste is one message; `/help` lists the commands),
/// else one turn per line of stdin. The answer streams to stdout; the
/// session id, tool calls, results and errors go to stderr.
///
/// The endpoint comes from --base-url, --model and --api-key, each falling
/// back to OPENAI_BASE_URL, OPENAI_MODEL and OPENAI_API_KEY (a base URL such
/// as `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`).
///
/// Two history plugins are always on. Tool-result pruning replaces tool
/// results of more than 2000 characters, once four newer results exist, by
/// a short stub (the original stays in the log). Compaction, when the next
/// request is estimated above --context-budget tokens, asks the session's
/// own model for a summary that stands in for the older history (the newest
/// 8 surface entries are kept verbatim).
///
/// Ctrl-C cancels the running turn; a second Ctrl-C exits; at the line
/// editor's prompt Ctrl-C clears the line, and a second one (or one within
/// 2 s of a cancel) exits. One-shot, the exit is 0 when the turn completed and 1 when it
/// failed, was cancelled or hit the output-token limit; interactively, 0
/// unless a turn failed with an error (1). Usage and I/O errors are 2.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// The store: a path ending in `.db` is SQLite, a postgres:// URL is PostgreSQL, one ending in
    /// `.jsonl` a session file (continued if it exists, else made for the new session), any other a
    /// JSONL store directory (created if missing).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_STORE)]
    pub(crate) store: PathBuf,
    /// Continue this stored session instead of starting a new one (a unique prefix of its id will do).
    /// Its logged model, system prompt and params carry over; its tools and, when a key or credential
    /// header would go there, its endpoint do not (a log grants nothing): give --tools and --base-url.
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// Continue the session of the store that was started last.
    #[arg(short = 'c', long = "continue", conflicts_with = "session")]
    pub(crate) continue_last: bool,
    /// The API base URL [env: OPENAI_BASE_URL]; requests go to {URL}/chat/completions.
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// The model to ask for [env: OPENAI_MODEL].
    #[arg(long, value_name = "MODEL")]
    pub(crate) model: Option<String>,
    /// The API key [env: OPENAI_API_KEY]; prefer the variable, flags show up in process lists.
    #[arg(long, value_name = "KEY")]
    pub(crate) api_key: Option<String>,
    /// Give the model list_files, read_file, write_file and calculator, confined to DIR (on every run:
    /// a continued session's log never turns tools on).
    #[arg(long, value_name = "DIR")]
    pub(crate) tools: Option<PathBuf>,
    /// The system prompt of every request; `--system ""` clears one the session logged.
    #[arg(long, value_name = "PROMPT")]
    pub(crate) system: Option<String>,
    /// Compact the history when a request is estimated above this many tokens [default: 100000].
    #[arg(long, value_name = "TOKENS")]
    pub(crate) context_budget: Option<u64>,
    /// Streamed deltas are written to the log at most once per this many
    /// milliseconds per content block (0: every delta as it arrives).
    #[arg(long, value_name = "MS", default_value_t = palimpsest_core_agent_loop::DEFAULT_CHUNK_WINDOW_MS)]
    pub(crate) chunk_window_ms: u64,
    /// Sampling temperature of every request, a number from 0 to 2 (logged in the settings' params).
    #[arg(long, value_name = "F", value_parser = parse_temperature)]
    pub(crate) temperature: Option<f64>,
    /// The most tokens one answer may have, sent as `max_tokens` (logged in the settings' params).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_tokens: Option<u64>,
    /// An extra HTTP header of every request, NAME:VALUE; repeatable. Logged by name in the
    /// settings, with the value `<redacted>` unless the header is one known to carry no
    /// credential (X-Title, OpenAI-Organization, OpenAI-Project, ...); never
    /// carried over by --session.
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
    /// One turn with this prompt; without it, an interactive prompt on stdin.
    #[arg(value_name = "PROMPT")]
    pub(crate) prompt: Option<String>,
}

/// Runs `palimpsest run`; the answer text goes to `out`.
pub(crate) fn run(mut args: RunArgs, out: &mut dyn Write) -> anyhow::Result<Exit> {
    // Everything that can be refused is checked before the store is
    // changed. A resumed session's settings are read first: they are the
    // defaults its flags override.
    let location = writable_location(&args.store)?;
    // A session file that exists holds the one session to continue; one
    // that does not is made, as a file, for a new session.
    if matches!(location, Location::JsonlFile(_)) && args.store.exists() && args.session.is_none() {
        args.continue_last = true;
    }
    let resuming = args.session.is_some() || args.continue_last;
    if resuming && !matches!(location, Location::Postgres(_)) && !args.store.exists() {
        // Resuming reads the store: it is never created for that.
        return Err(CliError::io(location.shown(), "cannot read: no such file or directory").into());
    }
    if let Some(dir) = &args.tools {
        if !dir.is_dir() {
            return Err(CliError::usage(format!("--tools {}: not a directory", dir.display())).into());
        }
    }
    if args.prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
        return Err(CliError::usage("the PROMPT is empty").into());
    }
    let (store, logged_seq, logged) = if resuming {
        let store = open_existing_store(&args.store)?;
        let id = session_to_resume(&store, args.session.as_deref())?;
        let (seq, logged) = logged_settings(&store.store, &id, &store.shown())?;
        args.session = Some(id);
        (Some(store), seq, Some(logged))
    } else {
        (None, None, None)
    };
    let resolved = resolve(&args, logged.as_ref(), |name| std::env::var(name).ok()).map_err(|e| match e {
        ResolveError::Config(e) => config_error(e),
        ResolveError::EndpointNotConfirmed { logged, env, why } => {
            // As a URL parser reads it (a look-alike host in punycode).
            let logged = OpenAiConfig::new(logged, "").shown_base_url();
            let (env_names, or_move) = match env {
                Some(env) => (
                    format!(", and {ENV_BASE_URL} names {env}"),
                    format!(", or --base-url {} to move it there", output::shell_word(&env)),
                ),
                None => (String::new(), String::new()),
            };
            CliError::usage(format!(
                "the session was logged against {logged}{env_names}; {why}: pass --base-url {} to \
                 continue there{or_move}",
                output::shell_word(&logged)
            ))
            .into()
        }
    })?;
    let provider = OpenAiProvider::new(resolved.config.clone()).map_err(config_error)?;
    let store = match store {
        Some(store) => store,
        None => open_store(&args.store)?,
    };
    // Multi-threaded, so that the loop's store writes run in
    // `block_in_place` and the signal handler and tools keep running.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let history = prompt::history_path(|name| std::env::var(name).ok());
    let result =
        runtime.block_on(run_async(args, Run { resolved, logged_seq, history }, store, provider, out));
    // A tool thread a cancelled turn left behind (stuck in a read) must not
    // hold the exit: the log is already flushed.
    runtime.shutdown_timeout(ABANDONED_TOOL_GRACE);
    result
}

/// The id of the session to resume: `wanted` (or the one id it is a
/// unique prefix of), or without it the session started last that had a
/// turn (a run that quit before its first turn leaves a session of its
/// settings alone: `-c` means the last conversation), else the one
/// started last.
fn session_to_resume(store: &OpenedStore, wanted: Option<&str>) -> Result<String, CliError> {
    if let Some(wanted) = wanted {
        let headers = store.store.list().map_err(|e| from_store(&e, &store.shown()))?;
        let ids: Vec<String> = headers.into_iter().map(|h| h.id).collect();
        return crate::store_arg::unique_id(&ids, wanted, &store.shown(), store.kind());
    }
    let summaries = store.store.summaries().map_err(|e| from_store(&e, &store.shown()))?;
    let newest = |with_a_turn: bool| {
        summaries
            .iter()
            .filter(|(_, summary)| !with_a_turn || summary.as_ref().is_ok_and(|s| s.last_turn.is_some()))
            .map(|(header, _)| header)
            .max_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| b.id.cmp(&a.id)))
    };
    newest(true).or_else(|| newest(false)).map(|h| h.id.clone()).ok_or_else(|| CliError {
        code: "not-found".into(),
        location: store.shown(),
        message: format!("the {} holds no session to continue", store.kind()),
        exit: Exit::Usage,
    })
}

/// The unknown settings key under which `run` logs its `--tools` directory
/// (an absolute path), so that a resumed session offers the same tools.
pub(crate) const TOOLS_DIR_KEY: &str = "toolsDir";

/// The seq and effective settings of stored session `id` (`None` and `{}`
/// when it has none), read as the resume then reads the session: from its
/// checkpoint and the events after it where the store keeps one, so that
/// this costs the surface, not the log (a whole read of a 1M-event session
/// took 1.4 s before the bounded resume even started). Without a checkpoint
/// the log is read as it is, unchecked (the open that follows checks it):
/// building a checked session here too made such a resume 3-5x slower.
fn logged_settings(
    store: &Arc<dyn SessionStore>,
    id: &str,
    shown: &str,
) -> anyhow::Result<(Option<u64>, Settings)> {
    let from_store = |e: StoreError| from_store(&e, shown);
    let resumable = store.load_resumable(id).map_err(from_store)?;
    let events = match resumable.checkpoint {
        Some(checkpoint) => match Session::resume(resumable.header, checkpoint, resumable.tail) {
            Ok(session) => return Ok((session.settings_seq(), session.settings())),
            // Refused as a resume: the open reads the whole log too.
            Err(_) => store.load(id).map_err(from_store)?.events,
        },
        None => resumable.tail,
    };
    let last = events.iter().rev().find(|e| *e.event_type() == EventType::SessionSettings);
    let settings = last.and_then(|e| e.data_as::<SessionSettings>().ok()).map(|s| s.settings);
    Ok((last.map(|e| e.seq()), settings.unwrap_or_default()))
}

/// What `run` resolved before it started the runtime.
struct Run {
    resolved: Resolved,
    /// The seq of the resumed session's settings before this run.
    logged_seq: Option<u64>,
    /// The line editor's history file.
    history: Option<PathBuf>,
}

/// What a run is made with: each setting from its flag, else from the
/// resumed session's log, else from the environment (or the default).
#[derive(Debug, Clone)]
struct Resolved {
    config: OpenAiConfig,
    context_budget: u64,
    tools_dir: Option<PathBuf>,
    /// `--max-tokens`, or the logged `maxTokens` param.
    max_tokens: Option<u64>,
    /// The params to log: the resumed session's, each flag's over its own.
    params: Option<serde_json::Map<String, serde_json::Value>>,
    /// The system prompt to log: `--system`'s, else the resumed session's
    /// as logged (an empty one is no prompt in the request, but stays as
    /// logged: rewriting it was a change nobody made).
    logged_system: Option<String>,
    /// The resumed session's settings keys this build does not know, kept
    /// verbatim (section 1.3), but for the two `run` itself writes.
    extra: serde_json::Map<String, serde_json::Value>,
    /// The resumed session's logged tools directory, when this run has no
    /// `--tools`: a log never turns tools on (see [`resolve`]).
    unused_tools_dir: Option<PathBuf>,
}

/// Why a run's settings cannot be resolved.
#[derive(Debug)]
enum ResolveError {
    /// The endpoint would come from the resumed session's log, and
    /// credentials would go there or the environment names another: the
    /// user must name it (see [`resolve`]).
    EndpointNotConfirmed {
        logged: String,
        /// The endpoint `OPENAI_BASE_URL` names, shown.
        env: Option<String>,
        /// Why it must be named.
        why: String,
    },
    Config(ConfigError),
}

/// Request fields a logged param is never sent as: the request makes them
/// from the derived history and the settings.
const REQUEST_FIELDS: &[&str] = &["messages", "model", "stream", "stream_options", "tools"];

/// Request fields of the output-token limit, which the provider writes
/// from `maxTokens` (or `--max-tokens`) when there is one: a logged param
/// of one of these names is then not sent, so that the limit the loop
/// knows is the one the request carries.
const TOKEN_LIMIT_FIELDS: &[&str] = &["max_tokens", "max_completion_tokens"];

/// The key of the output-token limit in the settings' `params` (contract
/// section 1.3 names it so); the request field is the provider's
/// (`max_tokens`).
pub(crate) const MAX_TOKENS_PARAM: &str = "maxTokens";

/// The unknown settings key under which `run` logs its `--header` names.
pub(crate) const HEADERS_KEY: &str = "headers";

/// What a secret header's value is logged as.
pub(crate) const REDACTED: &str = "<redacted>";

/// `--temperature`: a finite number from 0 to 2.
fn parse_temperature(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && (0.0..=2.0).contains(&t) => Ok(t),
        Ok(_) => Err(format!("{s:?} is out of range: a temperature is from 0 to 2")),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// `--header NAME:VALUE`: a non-empty name of header characters, then the
/// value (leading spaces dropped).
fn parse_header(s: &str) -> Result<(String, String), String> {
    let Some((name, value)) = s.split_once(':') else {
        return Err(format!("{s:?} is not NAME:VALUE"));
    };
    let name = name.trim();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    let value = value.trim_start();
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("the value of header {name} has a line break or NUL"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Whether a header's value is a secret, by its name: every header but
/// those known to carry no credential ([`PUBLIC_HEADERS`]). Guessing the
/// secret ones by name (`key`, `token`, ...) missed `X-Custom-Creds`,
/// `X-Signature` and the like; a value that is logged is one a user
/// cannot take back, so the guess now goes the other way.
fn is_secret_header(name: &str) -> bool {
    !PUBLIC_HEADERS.iter().any(|public| public.eq_ignore_ascii_case(name))
}

/// Extra headers whose values are logged as they are: titles and API
/// versions, which OpenAI-compatible services and their proxies ask for,
/// and no credential. (Not `Referer`: a URL may carry a user's password or
/// a token in its query.)
const PUBLIC_HEADERS: &[&str] = &[
    "accept",
    "accept-language",
    "anthropic-beta",
    "anthropic-version",
    "openai-beta",
    "openai-organization",
    "openai-project",
    "user-agent",
    "x-request-id",
    "x-title",
];

/// Resolves a run's settings: flag, then the resumed session's logged
/// settings, then `env` (the `OPENAI_*` variables). The API key is never
/// logged, so it comes from the flag or the environment only. A log is
/// data anyone can hand you, so it grants nothing: credentials (the API
/// key, a `--header` not known to carry none) are never sent to an
/// endpoint only the log names, nor is the log's endpoint used where
/// `OPENAI_BASE_URL` names another (the user must name it with
/// `--base-url`); the tools directory is never taken from it (`--tools`
/// each run). A logged provider is the base URL
/// without its user-info and query string: when the environment's base
/// URL is that same endpoint, the environment's is used, so the
/// credentials it carries still reach the server.
fn resolve(
    args: &RunArgs,
    logged: Option<&Settings>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, ResolveError> {
    let logged_provider = logged.and_then(|s| s.provider.clone()).filter(|p| !p.is_empty());
    let env_base = env(ENV_BASE_URL).filter(|v| !v.trim().is_empty());
    let flag_base = args.base_url.clone().filter(|v| !v.is_empty());
    let shown = |url: &str| OpenAiConfig::new(url.to_owned(), "").shown_base_url();
    // The endpoint comes from the log only where no flag names one and the
    // environment's is not that same endpoint (whose full URL, credentials
    // and all, is then used). Both compared as shown: a log written by
    // hand may spell its provider otherwise.
    let from_log = logged_provider
        .clone()
        .filter(|logged| flag_base.is_none() && env_base.as_ref().is_none_or(|e| shown(e) != shown(logged)));
    if let Some(logged) = &from_log {
        // Before the logged URL is read as one (a demo store's "scripted"
        // was a URL without a scheme, and the hint suggested one to send
        // the key to). Credentials: the key, and every header not known to
        // carry none (`api-key:`, `Authorization:`; an outside probe sent
        // them to the log's endpoint as a keyless resume).
        let key = args
            .api_key
            .clone()
            .filter(|k| !k.is_empty())
            .or_else(|| env(ENV_API_KEY).filter(|k| !k.is_empty()));
        let secret_header = args.headers.iter().find(|(name, _)| is_secret_header(name));
        let env = env_base.as_deref().map(shown);
        let why = match (&key, secret_header, &env) {
            (Some(_), _, _) => "your API key is sent only to an endpoint --base-url names".to_owned(),
            (None, Some((name, _)), _) => {
                format!("the --header {name} is sent only to an endpoint --base-url names")
            }
            (None, None, Some(_)) => "a log's endpoint is used only where none other is named".to_owned(),
            (None, None, None) => String::new(),
        };
        if !why.is_empty() {
            return Err(ResolveError::EndpointNotConfirmed { logged: logged.clone(), env, why });
        }
    }
    let model = args.model.clone().filter(|v| !v.is_empty()).or_else(|| logged.and_then(|s| s.model.clone()));
    let mut config =
        OpenAiConfig::from_lookup_and_flags(flag_base.or(from_log), model, args.api_key.clone(), &env)
            .map_err(ResolveError::Config)?;
    // The logged params carry over whole, so that a resumed session makes
    // the same request (section 1.3): each is sent as the request field of
    // its name, but `maxTokens` (the provider's own field) and the fields
    // the request is made of. A flag replaces its own param.
    let mut params = logged.and_then(|s| s.params.clone());
    if let Some(t) = args.temperature {
        params.get_or_insert_default().insert("temperature".into(), t.into());
    }
    if let Some(n) = args.max_tokens {
        let params = params.get_or_insert_default();
        // The flag replaces the limit in every spelling a writer may have logged.
        for field in TOKEN_LIMIT_FIELDS {
            params.remove(*field);
        }
        params.insert(MAX_TOKENS_PARAM.into(), n.into());
    }
    let logged_limit = params.as_ref().and_then(|p| p.get(MAX_TOKENS_PARAM));
    let max_tokens = logged_limit.and_then(serde_json::Value::as_u64).filter(|&n| n > 0);
    if let (Some(value), None) = (logged_limit, max_tokens) {
        output::warning(&format!(
            "the logged {MAX_TOKENS_PARAM} {value} is not a whole number of tokens from 1; it is not sent as the limit"
        ));
    }
    for (key, value) in params.iter().flatten() {
        let limit_field = max_tokens.is_some() && TOKEN_LIMIT_FIELDS.contains(&key.as_str());
        if key == MAX_TOKENS_PARAM || REQUEST_FIELDS.contains(&key.as_str()) || limit_field {
            continue;
        }
        config.extra_body.insert(key.clone(), value.clone());
    }
    let mut extra = logged.map(|s| s.extra.clone()).unwrap_or_default();
    extra.remove(HEADERS_KEY);
    extra.remove(TOOLS_DIR_KEY);
    config.extra_headers = args.headers.clone();
    // `--system ""` clears the prompt: an empty system message is no
    // prompt, and some providers refuse one.
    let logged_system = match args.system.as_deref() {
        Some("") => None,
        Some(given) => Some(given.to_owned()),
        None => logged.and_then(|s| s.system_prompt.clone()),
    };
    let context_budget = args
        .context_budget
        .or_else(|| logged.and_then(|s| s.context_budget))
        .unwrap_or(DEFAULT_CONTEXT_BUDGET);
    let tools_dir = args.tools.clone();
    let unused_tools_dir = logged
        .and_then(|s| s.extra.get(TOOLS_DIR_KEY)?.as_str().map(PathBuf::from))
        .filter(|_| tools_dir.is_none());
    Ok(Resolved {
        config,
        context_budget,
        tools_dir,
        max_tokens,
        params,
        logged_system,
        extra,
        unused_tools_dir,
    })
}

/// The settings a run logs: the whole effective settings, no secret (the
/// provider is the base URL without user-info or query; no API key).
fn settings_of(resolved: &Resolved, tools: &ToolRegistry, tools_dir: Option<&Path>) -> Settings {
    let mut settings = Settings {
        system_prompt: resolved.logged_system.clone(),
        model: Some(resolved.config.model.clone()),
        provider: Some(resolved.config.shown_base_url()),
        tools: Some(tools.specs().iter().map(ToolSpec::to_offered).collect()),
        context_budget: Some(resolved.context_budget),
        params: resolved.params.clone(),
        extra: resolved.extra.clone(),
    };
    if !resolved.config.extra_headers.is_empty() {
        let headers: serde_json::Map<String, serde_json::Value> = resolved
            .config
            .extra_headers
            .iter()
            .map(|(name, value)| {
                let shown = if is_secret_header(name) { REDACTED } else { value.as_str() };
                (name.clone(), shown.into())
            })
            .collect();
        settings.extra.insert(HEADERS_KEY.to_owned(), headers.into());
    }
    if let Some(dir) = tools_dir {
        settings.extra.insert(TOOLS_DIR_KEY.to_owned(), dir.display().to_string().into());
    }
    settings
}

/// How long the exit waits for tool threads a cancelled turn abandoned.
pub(crate) const ABANDONED_TOOL_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// A base URL without `scheme://` (`localhost:8080/v1`) is refused before
/// any request, suggesting the URL with `http://` (a local host) or
/// `https://` in front; the URL parser would read `localhost:` as a scheme.
fn check_scheme(base_url: &str) -> Result<(), CliError> {
    let url = base_url.trim();
    if url.is_empty() || url.contains("://") {
        return Ok(());
    }
    let host = url.split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or(host);
    let local = host.starts_with("localhost")
        || host.starts_with("127.")
        || host.starts_with("0.0.0.0")
        || host.starts_with("[::1]")
        || host.starts_with("10.")
        || host.starts_with("192.168.");
    let scheme = if local { "http" } else { "https" };
    // A URL with user-info may hold a password: not echoed.
    let (shown, suggestion) = if url.contains('@') {
        ("the base URL".to_owned(), format!("{scheme}:// in front of it"))
    } else {
        (format!("base URL {url:?}"), format!("{scheme}://{url}"))
    };
    Err(CliError::usage(format!("{shown} has no scheme (http:// or https://); did you mean {suggestion}?")))
}

/// Where the API key a run sends comes from, for the hint after a 401 or
/// 403: the flag, the variable, or nowhere.
fn key_source(args: &RunArgs, config: &OpenAiConfig) -> &'static str {
    match (&args.api_key, &config.api_key) {
        (Some(k), Some(_)) if !k.is_empty() => "the key of --api-key was sent",
        (_, Some(_)) => "the key of OPENAI_API_KEY was sent",
        (_, None) => "no key was sent: pass --api-key or set OPENAI_API_KEY",
    }
}

/// A configuration the provider refuses: the command line's fault (exit 2).
fn config_error(e: ConfigError) -> anyhow::Error {
    match e {
        ConfigError::HttpClient { .. } => CliError::io("", crate::error::chain(&e)).into(),
        ConfigError::InvalidBaseUrl { ref url, .. } if !url.contains("://") => match check_scheme(url) {
            Err(suggestion) => suggestion.into(),
            Ok(()) => CliError::usage(e.to_string()).into(),
        },
        e => CliError::usage(e.to_string()).into(),
    }
}

async fn run_async(
    args: RunArgs,
    Run { resolved, logged_seq, history }: Run,
    opened: OpenedStore,
    provider: OpenAiProvider,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let mut interrupts = Interrupts::install().context("listening for Ctrl-C")?;
    let shown = opened.shown();
    let store = opened.store.clone();
    let about_model = format!("model {} at {}", provider.config().model, provider.shown_endpoint());
    let hints = Hints { key: key_source(&args, &resolved.config), model: provider.config().model.clone() };
    let (tx, rx) = mpsc::unbounded_channel();
    // A wait before a retry (a rate limit's Retry-After can be a minute)
    // is said on stderr, in order with the rest, not waited out in silence.
    let retries = tx.clone();
    let provider: Arc<dyn Provider> = Arc::new(provider.on_retry(move |n| {
        let why = if n.code == "PROVIDER_RATE_LIMITED" { "rate limited" } else { "the provider failed" };
        let asked = match (n.asked, n.capped) {
            (true, false) => ", as the server asked",
            (true, true) => " (the server asked for longer; that is the most this waits)",
            (false, _) => "",
        };
        let _ = retries.send(Echo::Line(format!(
            "  ⟳ {why} ({}); retrying in {:.1} s{asked} (attempt {} of {})",
            n.code,
            n.delay.as_secs_f64(),
            n.attempt + 1,
            n.attempts
        )));
    }));

    let mut config = AgentConfig::default().with_chunk_window_ms(args.chunk_window_ms);
    if let Some(n) = resolved.max_tokens {
        config = config.with_max_output_tokens(n);
    }
    // The tools directory (`--tools`, checked to be one), absolute, so the
    // log names it wherever the session is resumed from. `tools/` and
    // `tools` are one directory: logged one way.
    let tools_dir = resolved.tools_dir.as_ref().map(|dir| {
        std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).components().collect::<PathBuf>()
    });
    let tools = match &tools_dir {
        Some(dir) => crate::tools::sandbox_tools(dir, std::time::Duration::ZERO, &opened.location.files())
            .map_err(|e| {
                CliError::io(dir.display().to_string(), format!("cannot open the tools' workspace: {e}"))
            })?,
        None => ToolRegistry::new(),
    };
    let settings = settings_of(&resolved, &tools, tools_dir.as_deref());
    let maker = Maker { provider, config, tools, context_budget: resolved.context_budget, echo: tx };
    let (builder, compaction) = maker.builder(settings);

    // No other worker writes the session while the run lasts.
    // From the last checkpoint, not the whole log: a resume costs the
    // surface and what follows it (issue 18).
    let builder =
        builder.hold(crate::open_store::holder_name(), crate::open_store::hold_ttl()).bounded_resume(true);
    let agent = match &args.session {
        None => {
            let id = new_session_id();
            let agent = builder.create(Arc::clone(&store), id.clone()).map_err(|e| loop_error(e, &shown))?;
            let again = match opened.location {
                Location::JsonlFile(_) => format!("`palimpsest run --store {}`", output::shell_word(&shown)),
                _ => format!("--session {id}"),
            };
            output::note(&format!(
                "new session {id} in {shown} ({}); continue it with {again}",
                opened.kind()
            ));
            agent
        }
        Some(id) => {
            let (agent, report) = builder.open(Arc::clone(&store), id).map_err(|e| loop_error(e, &shown))?;
            let turns = agent.last_turn();
            // What the log held: not the closers and settings just written.
            let settings_changed = agent.session().settings_seq() != logged_seq;
            let written =
                report.repaired.as_ref().map_or(0, |r| r.end - r.start) + u64::from(settings_changed);
            output::note(&format!(
                "resuming session {id} in {shown}: {} events, {turns} turn(s)",
                agent.session().next_seq().saturating_sub(written)
            ));
            if let Some(torn) = &report.load.torn_tail {
                output::note(&format!(
                    "dropped a torn last line (line {}, {} bytes): a write cut short; it is cut off before the next append",
                    torn.line, torn.len
                ));
            }
            if let Some(range) = report.repaired {
                output::note(&format!(
                    "closed the interrupted last turn first ({} repair event(s), seqs {}..={})",
                    range.end - range.start,
                    range.start,
                    range.end.saturating_sub(1)
                ));
            }
            if let Some(dir) = &resolved.unused_tools_dir {
                output::note(&format!(
                    "the session offered tools confined to {}; a log never turns tools on: \
                     pass --tools {} to offer them again",
                    dir.display(),
                    output::shell_word(&dir.display().to_string())
                ));
            }
            if settings_changed {
                let seq = agent.session().settings_seq().unwrap_or_default();
                output::note(&format!(
                    "settings changed: {} (logged at seq {seq})",
                    crate::settings_view::line(&agent.settings())
                ));
            }
            agent
        }
    };
    if let (Some(dir), Some(_)) = (&resolved.tools_dir, &tools_dir) {
        output::note(&format!(
            "tools list_files, read_file, write_file, calculator, confined to {}",
            dir.display()
        ));
    }
    output::note(&about_model);

    let mut driver = Driver {
        agent,
        rx,
        console: Console {
            out,
            mid_line: false,
            step: None,
            terminal: io::stdout().is_terminal(),
            closed: false,
        },
        shown,
        store,
        maker,
        compaction,
        hints,
        one_session_file: matches!(opened.location, Location::JsonlFile(_)),
        cancelled_at: None,
    };
    let exit = match args.prompt {
        Some(prompt) => driver.one_shot(prompt, &mut interrupts).await,
        None => driver.interactive(&mut interrupts, history).await,
    };
    // Sync whatever the last turn left unsynced, even after a failure.
    let flushed = driver.agent.flush().map_err(|e| loop_error(e, &driver.shown));
    let exit = exit?;
    flushed?;
    Ok(exit)
}

/// A new session id, `run-YYYYMMDD-HHMMSS-<process tag>` (UTC): sortable,
/// lower-case (a JSONL store encodes capitals in file names), and distinct
/// for runs started in the same second, in containers too (where every
/// worker may be pid 1: the pid made `already-exists` there).
fn new_session_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let digits: String = crate::timefmt::utc(now).chars().take(19).filter(char::is_ascii_digit).collect();
    let (date, time) = digits.split_at(digits.len().min(8));
    format!("run-{date}-{time}-{}", crate::open_store::process_tag())
}

/// A loop failure as the CLI reports it: a store failure keeps the store's
/// code and exit; a refused append is exit 1 with its code. The message is
/// the whole chain, once.
fn loop_error(e: LoopError, location: &str) -> anyhow::Error {
    crate::error::from_chain(&e, location).into()
}

/// How a turn went, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// `completed`.
    Completed,
    /// `aborted` by Ctrl-C, or stopped at the output-token limit.
    Stopped,
    /// `error`: the provider, a plugin or the step limit.
    Failed,
    /// A second Ctrl-C: leave now.
    Quit,
}

/// Makes the run's loops: the first, and the one a `/fork` carries on in.
struct Maker {
    provider: Arc<dyn Provider>,
    config: AgentConfig,
    tools: ToolRegistry,
    context_budget: u64,
    echo: mpsc::UnboundedSender<Echo>,
}

impl Maker {
    /// A builder, and the trigger of its compaction plugin.
    fn builder(&self, settings: Settings) -> (AgentLoopBuilder, CompactionTrigger) {
        let compaction = Compaction::new(CompactionConfig {
            budget_tokens: self.context_budget,
            ..CompactionConfig::default()
        });
        let trigger = compaction.trigger();
        let builder = AgentLoop::builder(Arc::clone(&self.provider))
            .settings(settings)
            .config(self.config.clone())
            .tools(self.tools.clone())
            .plugin(ToolResultPruning::default())
            .plugin(compaction)
            .plugin(EchoPlugin::new(self.echo.clone()));
        (builder, trigger)
    }
}

/// Runs turns and shows what they write.
struct Driver<'o> {
    agent: AgentLoop,
    rx: mpsc::UnboundedReceiver<Echo>,
    console: Console<'o>,
    /// The store, for messages.
    shown: String,
    store: Arc<dyn SessionStore>,
    maker: Maker,
    /// Asks the loop's compaction plugin for a compaction (`/compact`).
    compaction: CompactionTrigger,
    hints: Hints,
    /// The store is one JSONL session file: it has no room for a fork.
    one_session_file: bool,
    /// When a Ctrl-C last cancelled a turn: another one at the prompt soon
    /// after is the second Ctrl-C that quits (a cancel that took
    /// milliseconds left the second one clearing an empty line).
    cancelled_at: Option<std::time::Instant>,
}

/// How soon after a Ctrl-C that cancelled a turn another one at the prompt
/// quits, as a second Ctrl-C during the turn would have.
const DOUBLE_CTRL_C: std::time::Duration = std::time::Duration::from_secs(2);

/// What the hints after a provider error name.
struct Hints {
    /// Where the API key came from ([`key_source`]).
    key: &'static str,
    model: String,
}

impl Hints {
    /// Says on stderr what may help after a turn ended with this error: a
    /// 401 or 403 points at the API key; an answer of nothing at all (no
    /// content, no finish reason) is a warning naming the model.
    fn after(&self, code: &str, message: &str) {
        if message.contains("HTTP 401 ") || message.contains("HTTP 403 ") {
            output::hint(&format!(
                "the endpoint refused the request's credentials: check the API key ({})",
                self.key
            ));
        } else if code == "PROVIDER_STREAM" && message.contains("with no content and no finish reason") {
            output::warning(&format!(
                "the endpoint streamed no answer at all; check that it serves the model {:?} (--model or OPENAI_MODEL)",
                self.model
            ));
        }
    }
}

/// What the interactive loop does after a command.
enum Flow {
    Continue,
    Exit,
}

impl Driver<'_> {
    async fn one_shot(&mut self, prompt: String, interrupts: &mut Interrupts) -> anyhow::Result<Exit> {
        Ok(match self.turn(prompt, interrupts).await? {
            Ended::Completed => Exit::Success,
            Ended::Stopped | Ended::Failed | Ended::Quit => Exit::Invalid,
        })
    }

    async fn interactive(
        &mut self,
        interrupts: &mut Interrupts,
        history: Option<PathBuf>,
    ) -> anyhow::Result<Exit> {
        let mut lines = prompt::Lines::start(io::stdin().is_terminal(), history);
        let mut failed = false;
        // The last read was a Ctrl-C at the prompt: another one quits.
        let mut cleared = false;
        loop {
            lines.ask();
            let read = loop {
                tokio::select! {
                    read = lines.recv() => break Some(read),
                    _ = interrupts.recv() => {
                        // The line editor's Ctrl-C is a key, not a signal:
                        // a SIGINT here came from outside, or raced the end
                        // of a turn. Like Ctrl-C at the prompt it changes
                        // nothing (and quitting would leave the terminal in
                        // the editor's raw mode). Without the editor it quits.
                        if !lines.is_editor() || interrupts.terminated() {
                            break None;
                        }
                    }
                }
            };
            let Some(read) = read else {
                eprintln_line("");
                break;
            };
            let line = match read {
                None => {
                    if lines.is_editor() {
                        eprintln_line("");
                    }
                    break;
                }
                Some(Err(e)) => return Err(CliError::io("stdin", format!("cannot read: {e}")).into()),
                Some(Ok(Read::Cleared)) => {
                    let soon_after_a_cancel = self.cancelled_at.is_some_and(|t| t.elapsed() < DOUBLE_CTRL_C);
                    if cleared || soon_after_a_cancel {
                        eprintln_line("");
                        break;
                    }
                    eprintln_line("  (Ctrl-C again, Ctrl-D or /exit to quit)");
                    cleared = true;
                    continue;
                }
                Some(Ok(Read::Line(line))) => {
                    cleared = false;
                    line
                }
            };
            let prompt = match prompt::parse(&line) {
                Input::Blank => continue,
                Input::Command(command) => match self.command(command, interrupts).await? {
                    Flow::Continue => continue,
                    Flow::Exit => break,
                },
                Input::Text(prompt) => prompt,
            };
            match self.turn(prompt, interrupts).await? {
                Ended::Completed | Ended::Stopped => {}
                Ended::Failed => failed = true,
                Ended::Quit => return Ok(Exit::Invalid),
            }
        }
        Ok(if failed { Exit::Invalid } else { Exit::Success })
    }

    /// Runs a slash command.
    async fn command(&mut self, command: Command, interrupts: &mut Interrupts) -> anyhow::Result<Flow> {
        match command {
            Command::Help => eprintln_line(prompt::HELP),
            Command::Exit => return Ok(Flow::Exit),
            Command::Session => eprintln_line(self.agent.session_id()),
            Command::Model(None) => {
                let model = self.agent.settings().model.unwrap_or_default();
                eprintln_line(&format!("model {model}"));
            }
            Command::Model(Some(model)) => {
                let settings = Settings { model: Some(model), ..self.agent.settings() };
                self.set_settings(settings)?;
            }
            Command::System(None) => match self.agent.settings().system_prompt {
                Some(system) => eprintln_line(&format!("system prompt: {system}")),
                None => eprintln_line("no system prompt"),
            },
            Command::System(Some(system)) => {
                let settings = Settings { system_prompt: Some(system), ..self.agent.settings() };
                self.set_settings(settings)?;
            }
            Command::Compact => return self.compact(interrupts).await,
            Command::Fork => self.fork()?,
            Command::Unknown(word) => output::error_line(&format!(
                "error[usage]: unknown command {word}; the commands are {} (/help says more; //TEXT sends /TEXT)",
                prompt::COMMANDS
            )),
            Command::Extra(word) => output::error_line(&format!("error[usage]: {word} takes no argument")),
        }
        Ok(Flow::Continue)
    }

    /// `/compact`: compacts the history now, whatever its size, through the
    /// compaction plugin (between turns, so its events belong to no turn).
    /// Ctrl-C stops it; a second one quits.
    async fn compact(&mut self, interrupts: &mut Interrupts) -> anyhow::Result<Flow> {
        self.compaction.request();
        let cancel = CancellationToken::new();
        let result = {
            let run = self.agent.run_request_hooks(&cancel);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break Some(result),
                    Some(echo) = self.rx.recv() => self.console.show(echo)?,
                    _ = interrupts.recv() => {
                        if cancel.is_cancelled() {
                            break None;
                        }
                        self.console.line("  ^C: stopping the compaction (Ctrl-C again to quit)…")?;
                        cancel.cancel();
                    }
                }
            }
        };
        while let Ok(echo) = self.rx.try_recv() {
            self.console.show(echo)?;
        }
        self.console.end_turn()?;
        let Some(result) = result else { return Ok(Flow::Exit) };
        let run = result.map_err(|e| loop_error(e, &self.shown))?;
        if let Some(failure) = &run.failure {
            output::error_line(&format!(
                "error[{}]: /compact: {failure}",
                palimpsest_core_agent_loop::codes::PLUGIN_FAILED
            ));
        } else if run.cancelled {
            output::note("compaction stopped; the history stays as it is");
        } else if run.seqs.is_empty() {
            output::note("nothing to compact: the history is no longer than what is always kept verbatim");
        }
        // A request left unused (nothing to compact) must not fire later.
        let _ = self.compaction.withdraw();
        Ok(Flow::Continue)
    }

    /// Logs `settings` as the session's from the next turn on.
    fn set_settings(&mut self, settings: Settings) -> anyhow::Result<()> {
        match self.agent.set_settings(settings).map_err(|e| loop_error(e, &self.shown))? {
            Some(seq) => output::note(&format!(
                "settings changed: {} (logged at seq {seq})",
                crate::settings_view::line(&self.agent.settings())
            )),
            None => output::note("the settings are already these"),
        }
        Ok(())
    }

    /// `/fork`: a child of the session as it is now, written to the same
    /// store as `palimpsest fork` would (`<id>-fork-<seq>`, or the first
    /// free `-2`, `-3`, ...); the run carries on in the child, the parent
    /// is left as it is.
    fn fork(&mut self) -> anyhow::Result<()> {
        if self.one_session_file {
            output::error_line(&format!(
                "error[usage]: {}: a JSONL session file holds one session, so /fork has nowhere to write the \
                 child; `palimpsest fork {} --at SEQ` writes it beside the file",
                self.shown,
                output::shell_word(&self.shown)
            ));
            return Ok(());
        }
        self.agent.flush().map_err(|e| loop_error(e, &self.shown))?;
        // A session resumed from a checkpoint holds its surface, not its
        // log; a fork copies the log, so it is read whole for this.
        let whole;
        let parent = match self.agent.session() {
            s if s.is_complete() => s,
            s => {
                let origin = format!("{}#{}", self.shown, s.id());
                let stored = self.store.load(s.id()).map_err(|e| from_store(&e, &origin))?;
                whole = palimpsest_core_session::Session::from_log(stored.header, stored.events)
                    .map_err(|e| crate::check::refused(&e, &origin))?;
                &whole
            }
        };
        let Some(at) = parent.next_seq().checked_sub(1) else {
            output::error_line("error[usage]: the session has no events to fork");
            return Ok(());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let base = format!("{}-fork-{at}", parent.id());
        let mut forked = None;
        for n in 1..=1000u32 {
            let id = if n == 1 { base.clone() } else { format!("{base}-{n}") };
            let child = palimpsest_core_session::fork::fork(parent, at, id.clone(), now).map_err(|e| {
                CliError::refused(
                    e.code().to_owned(),
                    format!("{}#{}", self.shown, parent.id()),
                    e.to_string(),
                )
            })?;
            match self.store.create(child.header()) {
                Ok(()) => {}
                Err(e) if e.code() == "already-exists" => continue,
                Err(e) => return Err(from_store(&e, &self.shown).into()),
            }
            if let Err(e) = self.store.append(&id, child.events()).and_then(|()| self.store.sync(&id)) {
                // Take back the half-written child rather than leave it.
                if let Err(rm) = self.store.delete(&id) {
                    tracing::warn!(session_id = %id, error = %rm, "could not remove a half-written fork");
                }
                return Err(from_store(&e, &self.shown).into());
            }
            forked = Some(id);
            break;
        }
        let Some(id) = forked else {
            output::error_line(&format!(
                "error[already-exists]: {base} and 999 numbered variants are all taken"
            ));
            return Ok(());
        };
        let parent_id = parent.id().to_owned();
        let (builder, compaction) = self.maker.builder(self.agent.settings());
        let (agent, _) =
            builder.open(Arc::clone(&self.store), &id).map_err(|e| loop_error(e, &self.shown))?;
        (self.agent, self.compaction) = (agent, compaction);
        output::note(&format!(
            "forked session {parent_id} after seq {at} into {id}; carrying on in {id} (continue it with --session {id})"
        ));
        Ok(())
    }

    /// One turn: runs it while echoing what it writes; Ctrl-C cancels it,
    /// a second one drops it (the turn stays open, repaired on resume).
    async fn turn(&mut self, prompt: String, interrupts: &mut Interrupts) -> anyhow::Result<Ended> {
        let cancel = CancellationToken::new();
        let input = TurnInput::text(prompt).with_cancel(cancel.clone());
        let result = {
            let run = self.agent.run_turn(input);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    result = &mut run => break Some(result),
                    Some(echo) = self.rx.recv() => self.console.show(echo)?,
                    _ = interrupts.recv() => {
                        if cancel.is_cancelled() {
                            break None;
                        }
                        if interrupts.terminated() {
                            self.console.line("  terminating: cancelling the turn…")?;
                        } else {
                            self.console.line("  ^C: cancelling the turn (Ctrl-C again to quit)…")?;
                        }
                        self.cancelled_at = Some(std::time::Instant::now());
                        cancel.cancel();
                    }
                }
            }
        };
        while let Ok(echo) = self.rx.try_recv() {
            self.console.show(echo)?;
        }
        self.console.end_turn()?;
        let Some(result) = result else {
            output::note(&format!(
                "quit with the turn open; `palimpsest run --store {} --session {}` closes it and carries on",
                self.shown,
                self.agent.session_id()
            ));
            return Ok(Ended::Quit);
        };
        let outcome = result.map_err(|e| loop_error(e, &self.shown))?;
        let ended = self.report(&outcome);
        if cancel.is_cancelled() && !matches!(outcome.reason, TurnEndReason::Aborted { .. }) {
            // The Ctrl-C came once the answer was whole (a server holding
            // the stream open after it): nothing was cancelled, and the
            // next Ctrl-C at the prompt is a first one.
            self.cancelled_at = None;
            output::note("the answer was whole when Ctrl-C came; the turn ended as it was");
        }
        if interrupts.terminated() {
            output::note(&format!(
                "terminated; `palimpsest run --store {} --session {}` carries on",
                self.shown,
                self.agent.session_id()
            ));
            return Ok(Ended::Quit);
        }
        Ok(ended)
    }

    /// Says on stderr how a turn that did not complete ended.
    fn report(&self, outcome: &TurnOutcome) -> Ended {
        if let Some(range) = &outcome.repaired {
            output::note(&format!(
                "closed an interrupted turn first (seqs {}..={})",
                range.start,
                range.end.saturating_sub(1)
            ));
        }
        if !outcome.durable {
            output::warning(&format!(
                "turn {} is logged but not yet durable: syncing the store failed (another connection's \
                 long read can hold a SQLite checkpoint back); the next turn tries again",
                outcome.turn
            ));
        }
        match &outcome.reason {
            TurnEndReason::Completed => {
                // Nothing to show: an empty delta stream, a finish with no
                // call, a shape of chunk this build does not read (a legacy
                // `function_call`, `message` for `delta`). Completed as the
                // server said, but not silently.
                let said_something = outcome.message.as_ref().is_some_and(|m| {
                    m.content.iter().any(|b| match b {
                        Block::Text { text } => !text.trim().is_empty(),
                        Block::ToolCall { .. } => true,
                        _ => false,
                    })
                });
                if !said_something {
                    output::warning(&format!(
                        "turn {}: the model's answer was empty (no text and no tool call); it is logged as it came",
                        outcome.turn
                    ));
                }
                Ended::Completed
            }
            TurnEndReason::Aborted { reason } => {
                output::note(&format!(
                    "turn {} {reason}; what streamed before is kept in the log",
                    outcome.turn
                ));
                Ended::Stopped
            }
            TurnEndReason::MaxTokens => {
                output::warning(&format!(
                    "turn {}: the answer stopped at the output-token limit",
                    outcome.turn
                ));
                Ended::Stopped
            }
            TurnEndReason::Error { error } => {
                let e = CliError::refused(
                    error.code.clone(),
                    format!("{}#{}", self.shown, self.agent.session_id()),
                    format!("turn {} ended with an error: {}", outcome.turn, error.message),
                );
                output::error_line(&e.to_string());
                self.hints.after(&error.code, &error.message);
                Ended::Failed
            }
            other => {
                output::warning(&format!("turn {} ended {other:?}", outcome.turn));
                Ended::Failed
            }
        }
    }
}

/// stdout for the answer, stderr for the rest, kept in step: a stderr line
/// first ends the answer's line on stdout, and the texts of two assistant
/// messages are never glued together.
struct Console<'o> {
    out: &'o mut dyn Write,
    /// stdout ends inside a line.
    mid_line: bool,
    /// The `(turn, step)` whose text was printed last.
    step: Option<(u64, u64)>,
    /// stdout is a terminal: the model's text is shown, not obeyed. Its
    /// escape sequences could clear the lines above that showed what the
    /// tools did, retitle the window or write the clipboard (OSC 52), so
    /// every control character but a line break or tab is shown as `�`
    /// ([`output::printable`]). Piped, the text is passed on as written.
    terminal: bool,
    /// stdout's reader went away (`| head`), or writing it failed: the
    /// answer is no longer printed, but the turn runs on and is logged whole. (Ending the run
    /// there dropped the turn mid-stream: it exited 0 with the turn open
    /// and the rest of the answer lost.)
    closed: bool,
}

impl Console<'_> {
    /// Writes to stdout, unless its reader went away: then nothing more is
    /// printed, and the turn carries on.
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.out.write_all(bytes).and_then(|()| self.out.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                output::note("stdout was closed; the answer is no longer printed, but it is logged whole");
                Ok(())
            }
            // A full disk under `> out.txt`, `/dev/full`: the same, said as
            // a warning (the turn was dropped mid-stream too).
            Err(e) => {
                self.closed = true;
                output::warning(&format!(
                    "cannot write the answer to stdout ({e}); it is no longer printed, but it is logged whole"
                ));
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    fn show(&mut self, echo: Echo) -> io::Result<()> {
        match echo {
            Echo::Text { step, text } => {
                if self.step != Some(step) {
                    self.end_line()?;
                    self.step = Some(step);
                }
                if self.terminal {
                    let shown: String = text
                        .chars()
                        .map(|c| if matches!(c, '\n' | '\t') { c } else { output::printable(c) })
                        .collect();
                    self.write(shown.as_bytes())?;
                } else {
                    self.write(text.as_bytes())?;
                }
                self.mid_line = !text.ends_with('\n');
                Ok(())
            }
            Echo::Line(line) => self.line(&line),
        }
    }

    /// A progress line on stderr.
    fn line(&mut self, line: &str) -> io::Result<()> {
        self.end_line()?;
        eprintln_line(line);
        Ok(())
    }

    fn end_line(&mut self) -> io::Result<()> {
        if self.mid_line {
            self.write(b"\n")?;
            self.mid_line = false;
        }
        Ok(())
    }

    fn end_turn(&mut self) -> io::Result<()> {
        self.step = None;
        self.end_line()
    }
}

/// A line for stderr. It may quote a resumed log's text (`/session`,
/// `/model`, `/system` show the header's id and the logged settings): every
/// control character of it is shown, not obeyed ([`output::printable_text`]).
fn eprintln_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", output::printable_text(line));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_session_ids_are_stamped_lower_case_and_storable() {
        let id = new_session_id();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.len(), 4, "{id}");
        assert_eq!((parts[0], parts[1].len(), parts[2].len()), ("run", 8, 6), "{id}");
        assert!(
            parts[1].starts_with("20") && parts[1..3].concat().bytes().all(|b| b.is_ascii_digit()),
            "{id}"
        );
        assert_eq!(parts[3], crate::open_store::process_tag());
        assert!(
            parts[3].len() == 8 && parts[3].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    /// A writer that fails every write, as `/dev/full` does.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(28))
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stdout_that_cannot_be_written_stops_the_printing_not_the_turn() {
        let mut full = Full;
        let mut console =
            Console { out: &mut full, mid_line: false, step: None, terminal: false, closed: false };
        let text = |t: &str| Echo::Text { step: (1, 1), text: t.into() };
        console.show(text("Hello")).expect("the turn goes on");
        assert!(console.closed);
        console.show(text(", world")).expect("nothing more is printed");
        console.end_turn().expect("nor the line's end");
    }

    #[test]
    fn two_messages_are_never_glued_and_stderr_lines_end_the_answer_line() {
        let mut buf = Vec::new();
        let mut console =
            Console { out: &mut buf, mid_line: false, step: None, terminal: false, closed: false };
        let text = |step: u64, t: &str| Echo::Text { step: (1, step), text: t.into() };
        console.show(text(1, "Let me ")).unwrap();
        console.show(text(1, "look.")).unwrap();
        console.show(text(2, "It says ")).unwrap();
        console.show(text(2, "hi.")).unwrap();
        console.end_turn().unwrap();
        console.end_turn().unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "Let me look.\nIt says hi.\n");
    }

    #[test]
    fn on_a_terminal_the_answer_cannot_move_the_cursor_or_retitle_the_window() {
        let answer = "\u{1b}[4A\u{1b}[0JAll good.\u{1b}]0;title\u{7}\tdone\u{202e}\n";
        for (terminal, expected) in [(true, "�[4A�[0JAll good.�]0;title�\tdone�\n"), (false, answer)]
        {
            let mut buf = Vec::new();
            let mut console = Console { out: &mut buf, mid_line: false, step: None, terminal, closed: false };
            console.show(Echo::Text { step: (1, 1), text: answer.into() }).unwrap();
            assert_eq!(String::from_utf8(buf).unwrap(), expected, "terminal: {terminal}");
        }
    }

    #[test]
    fn missing_settings_are_usage_errors_naming_flag_and_variable() {
        let (line, exit) = crate::error::describe(&config_error(ConfigError::MissingModel));
        assert_eq!(exit, Exit::Usage);
        assert!(line.starts_with("error[usage]: no model: pass --model or set OPENAI_MODEL"), "{line}");
    }
}
