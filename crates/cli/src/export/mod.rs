//! `palimpsest export STORE [--session ID] --format markdown|html|json
//! [--view transcript|model] [-o FILE]`: a session for reading outside the
//! tool.
//!
//! Two views of one log:
//!
//! * **transcript**, what the person saw: every message as it was appended,
//!   in log order, shadowed ones included, with turn boundaries, and a
//!   marker where a replace happened ("— compacted 4 messages into a
//!   summary (seq 20) —", "— pruned the result of call_1 (seq 8) into seq
//!   18 —") carrying the replacement itself;
//! * **model**, what the model saw last: the derived messages in surface
//!   order, each with its position, seq, how it entered the surface and
//!   what it cites.
//!
//! Both are made one item at a time from a streamed read of the log
//! ([`Doc`], this module) and written as they are made by [`markdown`],
//! [`html`] or [`json`]: an export holds the surface and the item at hand,
//! never the log. The JSON shape is documented in `docs/export-format.md`
//! and in [`json`].

pub(crate) mod html;
pub(crate) mod json;
pub(crate) mod markdown;
mod md;

use std::collections::{HashMap, HashSet};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;

use palimpsest_core_session::payload::{
    Block, Message, Settings, Source, ToolError, ToolResult, TurnEnd, TurnEndReason, TurnStart, Usage,
};
use palimpsest_core_session::{Event, EventType, Session, SurfaceManager, SurfaceOp};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::check::Retain;
use crate::cmd::{readable_session, report_tail};
use crate::error::{CliError, Exit};
use crate::replay::{Consume, Reader};
use crate::settings_view;
use crate::store_arg::{self, Access, StoreArgs};
use palimpsest_core_session::explain::Shadowing;

/// The file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Markdown, with fenced code for tool arguments and results.
    #[value(alias = "md")]
    Markdown,
    /// One self-contained HTML file: inline CSS, no scripts, no network.
    Html,
    /// One JSON object, stable within its version (`palimpsest help export` shows its shape).
    Json,
}

/// Which messages, in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportView {
    /// What the person saw: every appended message in log order, shadowed
    /// ones included, compactions and prunes as markers.
    Transcript,
    /// What the model saw last: the surface, each message with its seq and
    /// provenance.
    Model,
}

impl ExportView {
    /// The name used in every format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ExportView::Transcript => "transcript",
            ExportView::Model => "model",
        }
    }
}

/// What every item of an export is shown against: the session as a
/// streamed check left it (its surface resident), who shadowed whom, and
/// what the header counts. The items themselves are made one event at a
/// time ([`Doc::transcript_item`], [`Doc::message_item`]) and written as
/// they are made: nothing holds the log.
#[derive(Debug)]
pub(crate) struct Doc<'a> {
    /// The session (its surface resident).
    pub(crate) session: &'a Session,
    /// Who shadowed whom.
    shadowing: &'a Shadowing,
    /// The view.
    pub(crate) view: ExportView,
    /// Seq → position on the current surface.
    position: HashMap<u64, usize>,
    /// What each replace on the current surface took off it, in surface
    /// order (the model view's replaces).
    surface_took: HashMap<u64, Vec<u64>>,
    /// The time of the first event (times are shown from it).
    pub(crate) t0: u64,
    /// How many events and turns the log has.
    pub(crate) events: u64,
    pub(crate) turns: usize,
    /// How many messages the model sees now.
    pub(crate) derived: usize,
    /// Tool names by call id, from `tool/call` events and `tool-call`
    /// blocks: those of the surface's calls, and in the transcript those
    /// met so far (a call comes before its result) that a result still to
    /// come may name: a call's name is let go once it has a result and
    /// none of its results is on the surface (only a result on the surface
    /// can be pruned into another).
    pub(crate) tool_names: HashMap<String, String>,
    /// The transcript's followed surface: the call of each tool result on
    /// it, and how many results of each call are on it.
    result_calls: HashMap<u64, String>,
    live_results: HashMap<String, usize>,
    /// The settings in effect (the next request's): the request's
    /// `session/settings` seq, typed and as logged; `None` before any.
    pub(crate) settings: Option<(u64, Settings, &'a RawValue)>,
}

/// One thing to show.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// A `turn/start` (transcript only).
    TurnStart {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The turn number.
        turn: u64,
    },
    /// A `turn/end` (transcript only).
    TurnEnd {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The turn number.
        turn: u64,
        /// Why the turn ended.
        reason: TurnEndReason,
    },
    /// A `session/settings` (transcript only): the settings every later
    /// request is made with.
    Settings {
        /// Its seq.
        seq: u64,
        /// Its time.
        time: u64,
        /// The settings, typed.
        settings: Box<Settings>,
        /// The settings exactly as logged.
        raw: &'a RawValue,
        /// The keys that changed since the previous settings (all stated
        /// keys for the first).
        changes: Vec<String>,
    },
    /// A message-bearing event.
    Message(Box<Msg<'a>>),
}

/// A message and what the log says about it.
#[derive(Debug)]
pub(crate) struct Msg<'a> {
    /// The event's seq.
    pub(crate) seq: u64,
    /// Its time.
    pub(crate) time: u64,
    /// Its type.
    pub(crate) event_type: &'a EventType,
    /// Its `turn` field.
    pub(crate) turn: Option<u64>,
    /// Its `step` field.
    pub(crate) step: Option<u64>,
    /// The message, typed.
    pub(crate) message: Message,
    /// The message exactly as logged.
    pub(crate) raw: &'a RawValue,
    /// `sourceEventSeqs`.
    pub(crate) sources: Option<&'a [u64]>,
    /// `surfaceOp`.
    pub(crate) surface_op: Option<SurfaceOp>,
    /// Its position on the current surface (from 0).
    pub(crate) position: Option<usize>,
    /// The replace that took it off the surface.
    pub(crate) shadowed_by: Option<u64>,
    /// If it is a replace: what kind, and what it took off.
    pub(crate) replaces: Option<Replace>,
    /// An assistant message's usage.
    pub(crate) usage: Option<Usage>,
    /// An assistant message cut off by cancellation.
    pub(crate) interrupted: bool,
    /// A tool result's error.
    pub(crate) tool_error: Option<ToolError>,
}

/// What a replace did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replace {
    /// Prune, compaction or rewrite.
    pub(crate) kind: ReplaceKind,
    /// The surface entries it took off, in surface order.
    pub(crate) shadowed: Vec<u64>,
}

/// The kinds of replace a reader tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplaceKind {
    /// A `tool/result` standing in for an earlier result of the same call.
    Prune,
    /// Several messages folded into one.
    Compaction,
    /// One message (not a tool result) standing in for another.
    Rewrite,
}

impl ReplaceKind {
    /// The name used in every format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReplaceKind::Prune => "prune",
            ReplaceKind::Compaction => "compaction",
            ReplaceKind::Rewrite => "rewrite",
        }
    }
}

impl Msg<'_> {
    /// Who speaks, for people: `User`, `Assistant`, `Tool result`,
    /// `Context`, `Steering`.
    pub(crate) fn role_label(&self) -> &'static str {
        match self.event_type {
            EventType::AssistantMessage => "Assistant",
            EventType::ToolResult => "Tool result",
            EventType::ContextMessage => "Context",
            EventType::SteeringMessage => "Steering",
            _ => match self.message.source {
                Source::Plugin { .. } => "Summary",
                _ => "User",
            },
        }
    }

    /// A CSS-class-like name of the role: `user`, `assistant`, `tool`,
    /// `context`, `steering`, `summary`.
    pub(crate) fn role_class(&self) -> &'static str {
        match self.role_label() {
            "Assistant" => "assistant",
            "Tool result" => "tool",
            "Context" => "context",
            "Steering" => "steering",
            "Summary" => "summary",
            _ => "user",
        }
    }

    /// Where the message came from, when the role does not already say:
    /// `example/example-1`, `plugin watcher`.
    pub(crate) fn source_label(&self) -> Option<String> {
        match &self.message.source {
            Source::Model { provider, model } => Some(format!("{provider}/{model}")),
            Source::Plugin { plugin } => Some(format!("plugin {plugin}")),
            _ => None,
        }
    }

    /// The call a tool result answers.
    pub(crate) fn call_id(&self) -> Option<&str> {
        self.message.content.iter().find_map(|b| match b {
            Block::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
    }
}

impl Doc<'_> {
    /// The marker line of a replace, without dashes: `compacted 4 messages
    /// into a summary (seq 20)`.
    pub(crate) fn marker(&self, m: &Msg<'_>, r: &Replace) -> String {
        let seqs = crate::describe::join(&r.shadowed);
        match r.kind {
            ReplaceKind::Prune => {
                let call = m.call_id().unwrap_or("?");
                format!("pruned the result of {call} (seq {seqs}) into seq {}", m.seq)
            }
            ReplaceKind::Compaction => {
                format!("compacted {} messages into a summary (seq {})", r.shadowed.len(), m.seq)
            }
            ReplaceKind::Rewrite => format!("rewrote seq {seqs} as seq {}", m.seq),
        }
    }

    /// `+0.120s` from the first event.
    pub(crate) fn offset(&self, time: u64) -> String {
        crate::timefmt::offset(i128::from(time) - i128::from(self.t0))
    }

    /// The name of the tool a call id belongs to.
    pub(crate) fn tool_name(&self, call_id: &str) -> Option<&str> {
        self.tool_names.get(call_id).map(String::as_str)
    }
}

/// What a message-bearing event carries besides the message.
#[derive(Deserialize)]
struct Carrier<'a> {
    #[serde(borrow)]
    message: &'a RawValue,
    #[serde(default)]
    turn: Option<u64>,
    #[serde(default)]
    step: Option<u64>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    interrupted: Option<bool>,
    #[serde(default)]
    error: Option<ToolError>,
}

/// A `tool/call`'s id and name.
#[derive(Deserialize)]
struct Call {
    #[serde(rename = "callId")]
    call_id: String,
    name: String,
}

impl<'a> Doc<'a> {
    /// The document of `view` over a session (its surface resident) whose
    /// replaces shadowed what `shadowing` says. `read(upto, consume)`
    /// hands the first `upto` events of the log to `consume`; it is called
    /// once here, for what the header counts.
    fn new<E>(
        session: &'a Session,
        shadowing: &'a Shadowing,
        view: ExportView,
        read: &mut Reader<'_, E>,
    ) -> Result<Doc<'a>, E> {
        let mut doc = Doc {
            session,
            shadowing,
            view,
            position: session.surface().iter().enumerate().map(|(i, &s)| (s, i)).collect(),
            surface_took: HashMap::new(),
            t0: session.header().created_at,
            events: session.next_seq(),
            turns: 0,
            derived: session.derive_messages().len(),
            tool_names: HashMap::new(),
            result_calls: HashMap::new(),
            live_results: HashMap::new(),
            settings: {
                let request = session.derive_request();
                match (request.settings_seq, request.settings_raw) {
                    (Some(seq), Some(raw)) => Some((seq, request.settings, raw)),
                    _ => None,
                }
            },
        };
        // The model view names the tools of the surface's calls, wherever
        // in the log the calls were made.
        let mut wanted: HashSet<String> = HashSet::new();
        if view == ExportView::Model {
            for e in session.surface().iter().filter_map(|&s| session.event(s)) {
                if let Some(m) = doc.message(e, None) {
                    wanted.extend(m.message.content.iter().filter_map(|b| match b {
                        Block::ToolCall { id, .. } => Some(id.clone()),
                        Block::ToolResult { tool_call_id, .. } => Some(tool_call_id.clone()),
                        _ => None,
                    }));
                }
            }
        }
        read(session.next_seq(), &mut |events| {
            // The surface, followed: what the replaces still on it took off.
            let mut surface = SurfaceManager::new();
            for e in events {
                let took = surface.apply_accepted(&e);
                if !took.is_empty() && doc.position.contains_key(&e.seq()) {
                    doc.surface_took.insert(e.seq(), took);
                }
                if e.seq() == 0 {
                    doc.t0 = e.time();
                }
                match e.event_type() {
                    EventType::TurnStart => doc.turns += 1,
                    EventType::ToolCall if !wanted.is_empty() => {
                        if let Ok(c) = e.data_as::<Call>() {
                            if wanted.contains(&c.call_id) {
                                doc.tool_names.insert(c.call_id, c.name);
                            }
                        }
                    }
                    _ => {}
                }
            }
        })?;
        Ok(doc)
    }

    /// The message `e` carries, and what the log says about it; `None`
    /// for an event that carries none. `took` is what `e` took off the
    /// surface, if it is a replace.
    fn message<'e>(&self, e: &'e Event, took: Option<Vec<u64>>) -> Option<Box<Msg<'e>>> {
        let carrier = e.data_as::<Carrier<'e>>().ok()?;
        let typed: Message = serde_json::from_str(carrier.message.get()).ok()?;
        let replaces = took.filter(|t| !t.is_empty()).map(|shadowed| Replace {
            kind: match (e.event_type(), shadowed.len()) {
                (EventType::ToolResult, _) => ReplaceKind::Prune,
                (_, 1) => ReplaceKind::Rewrite,
                _ => ReplaceKind::Compaction,
            },
            shadowed,
        });
        Some(Box::new(Msg {
            seq: e.seq(),
            time: e.time(),
            event_type: e.event_type(),
            turn: carrier.turn,
            step: carrier.step,
            message: typed,
            raw: carrier.message,
            sources: e.source_event_seqs(),
            surface_op: e.surface_op(),
            position: self.position.get(&e.seq()).copied(),
            shadowed_by: self.shadowing.shadowed_by(e.seq()),
            replaces,
            usage: carrier.usage,
            interrupted: carrier.interrupted == Some(true),
            tool_error: carrier.error,
        }))
    }

    /// The message item of `e`, if it shows one: an assistant message
    /// without content only carries usage, and nobody saw it. Its tool
    /// calls name their tools from here on.
    fn message_item<'e>(&mut self, e: &'e Event, took: Option<Vec<u64>>) -> Option<Item<'e>> {
        let m = self.message(e, took)?;
        if m.message.content.is_empty() && *m.event_type == EventType::AssistantMessage {
            return None;
        }
        for b in &m.message.content {
            if let Block::ToolCall { id, name, .. } = b {
                self.tool_names.entry(id.clone()).or_insert_with(|| name.clone());
            }
        }
        Some(Item::Message(m))
    }

    /// The transcript's item of `e`, the next event of the log, if it shows
    /// one; `settings` are those in effect before it, `took` what it took
    /// off the surface.
    fn transcript_item<'e>(
        &mut self,
        e: &'e Event,
        settings: &mut Settings,
        took: Vec<u64>,
    ) -> Option<Item<'e>> {
        match e.event_type() {
            EventType::SessionSettings => {
                let s = e.data_as::<SettingsCarrier<'e>>().ok()?;
                let next = serde_json::from_str::<Settings>(s.settings.get()).ok()?;
                let changes = settings_view::changes(settings, &next);
                *settings = next.clone();
                Some(Item::Settings {
                    seq: e.seq(),
                    time: e.time(),
                    settings: Box::new(next),
                    raw: s.settings,
                    changes,
                })
            }
            EventType::TurnStart => {
                let t = e.data_as::<TurnStart>().ok()?;
                Some(Item::TurnStart { seq: e.seq(), time: e.time(), turn: t.turn })
            }
            EventType::TurnEnd => {
                let t = e.data_as::<TurnEnd>().ok()?;
                Some(Item::TurnEnd { seq: e.seq(), time: e.time(), turn: t.turn, reason: t.reason })
            }
            EventType::ToolCall => {
                if let Ok(c) = e.data_as::<Call>() {
                    self.tool_names.insert(c.call_id, c.name);
                }
                None
            }
            _ if e.surface_op().is_some() => self.message_item(e, Some(took)),
            _ => None,
        }
    }
}

impl Doc<'_> {
    /// After the transcript showed `e`, which took `took` off the surface:
    /// counts the tool result `e` put on the surface, and lets go of the
    /// names of calls none of whose results is left on it.
    fn followed(&mut self, e: &Event, took: &[u64]) {
        if *e.event_type() == EventType::ToolResult && e.surface_op().is_some() {
            if let Ok(result) = e.data_as::<ToolResult>() {
                let call = result.call_id().to_owned();
                *self.live_results.entry(call.clone()).or_default() += 1;
                self.result_calls.insert(e.seq(), call);
            }
        }
        for s in took {
            let Some(call) = self.result_calls.remove(s) else { continue };
            let live = self.live_results.entry(call.clone()).or_default();
            *live = live.saturating_sub(1);
            if *live == 0 {
                self.live_results.remove(&call);
                self.tool_names.remove(&call);
            }
        }
    }
}

/// How one format writes a document: its start, each item as it is made,
/// and its end (`any`: whether an item was written).
pub(crate) trait Render {
    /// The start of the document.
    fn begin(&mut self, doc: &Doc<'_>, out: &mut dyn Write) -> anyhow::Result<()>;
    /// One item.
    fn item(&mut self, doc: &Doc<'_>, item: &Item<'_>, out: &mut dyn Write) -> anyhow::Result<()>;
    /// The end of the document.
    fn end(&mut self, doc: &Doc<'_>, any: bool, out: &mut dyn Write) -> anyhow::Result<()>;
}

/// The writer of `format`.
fn renderer(format: Format) -> Box<dyn Render> {
    match format {
        Format::Markdown => Box::new(markdown::Markdown::default()),
        Format::Html => Box::new(html::Html),
        Format::Json => Box::new(json::Json::default()),
    }
}

/// Writes the `view` of a session (its surface resident; its replaces
/// shadowed what `shadowing` says) with `render`, reading the log with
/// `read`: once for the header's counts, once more, item by item, for the
/// transcript. Memory is bounded by the surface and the item at hand.
fn write_doc(
    session: &Session,
    shadowing: &Shadowing,
    view: ExportView,
    render: &mut dyn Render,
    read: &mut Reader<'_, CliError>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut doc = Doc::new(session, shadowing, view, read)?;
    render.begin(&doc, out)?;
    let mut any = false;
    match view {
        ExportView::Transcript => {
            let mut failed = None;
            read(session.next_seq(), &mut |events| {
                let mut settings = Settings::default();
                let mut surface = SurfaceManager::new();
                for e in events {
                    let took = surface.apply_accepted(&e);
                    if let Some(item) = doc.transcript_item(&e, &mut settings, took.clone()) {
                        any = true;
                        if let Err(error) = render.item(&doc, &item, out) {
                            failed = Some(error);
                            return;
                        }
                    }
                    doc.followed(&e, &took);
                }
            })?;
            if let Some(error) = failed {
                return Err(error);
            }
        }
        ExportView::Model => {
            for e in session.surface().iter().filter_map(|&s| session.event(s)) {
                let took = doc.surface_took.get(&e.seq()).cloned();
                if let Some(item) = doc.message_item(e, took) {
                    any = true;
                    render.item(&doc, &item, out)?;
                }
            }
        }
    }
    render.end(&doc, any, out)
}

/// `data` of a `session/settings`, the settings kept raw.
#[derive(Deserialize)]
struct SettingsCarrier<'a> {
    #[serde(borrow)]
    settings: &'a RawValue,
}

/// `palimpsest export`.
/// The format `-o FILE`'s extension names: `.md`/`.markdown`, `.html`/`.htm`, `.json`.
pub(crate) fn format_of(file: &Path) -> Option<Format> {
    match file.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "md" | "markdown" => Some(Format::Markdown),
        "html" | "htm" => Some(Format::Html),
        "json" => Some(Format::Json),
        _ => None,
    }
}

/// `--format`, or the one `-o`'s extension names; neither is a usage error.
pub(crate) fn chosen_format(format: Option<Format>, output: Option<&Path>) -> Result<Format, CliError> {
    if let Some(format) = format {
        return Ok(format);
    }
    match output {
        Some(file) => format_of(file).ok_or_else(|| {
            CliError::usage(format!(
                "-o {}: the extension names no format (.md, .html, .json); give --format",
                file.display()
            ))
        }),
        None => {
            Err(CliError::usage("give --format markdown|html|json, or -o FILE ending in .md, .html or .json"))
        }
    }
}

/// The permissions of a new export: read and write for the owner, read
/// for the others (`0644`, what `umask 022` gives a file an editor makes).
fn new_file_permissions(file: &std::fs::File) -> std::io::Result<std::fs::Permissions> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = file;
        Ok(std::fs::Permissions::from_mode(0o644))
    }
    #[cfg(not(unix))]
    {
        file.metadata().map(|m| m.permissions())
    }
}

pub(crate) fn export(
    args: &StoreArgs,
    format: Option<Format>,
    view: ExportView,
    output: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let format = chosen_format(format, output)?;
    // `-o -` is stdout, as for most tools.
    let output = output.filter(|p| *p != Path::new("-"));
    let target = store_arg::open(args, Access::Read)?;
    let checked = target.check_keeping(Retain::Surface)?;
    report_tail(&checked);
    let origin = checked.origin.clone();
    let shadowing = checked.report.shadowing.clone();
    let session = readable_session(checked)?;
    let mut read = |upto: u64, consume: &mut Consume<'_>| target.replay(upto, consume);
    let mut render = renderer(format);
    match output {
        None if std::io::stdout().is_terminal() => {
            // A person reads it: the model's text is shown, not obeyed.
            let mut out = BufWriter::new(out);
            let mut shown = crate::output::LineMapped::printable(&mut out);
            write_doc(&session, &shadowing, view, &mut *render, &mut read, &mut shown)?;
            shown.finish()?;
            drop(shown);
            out.flush()?;
        }
        None => {
            let mut out = BufWriter::new(out);
            write_doc(&session, &shadowing, view, &mut *render, &mut read, &mut out)?;
            out.flush()?;
        }
        Some(path) => {
            // Written beside the file and renamed over it once whole: a
            // failed export leaves no half file, and the old one stands.
            let cannot = |e: &dyn std::fmt::Display| {
                CliError::io(path.display().to_string(), format!("cannot write the export: {e}"))
            };
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            // A FIFO, a device or a socket (`-o /dev/stdout`, `-o
            // /dev/null`) is written to, as the shell's `>` would: replacing
            // it with a file would destroy what is not the user's export.
            if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
                let file = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| cannot(&e))?;
                let mut writer = BufWriter::new(file);
                write_doc(&session, &shadowing, view, &mut *render, &mut read, &mut writer)?;
                writer.flush().map_err(|e| cannot(&e))?;
                note_written(&origin, view, format, path);
                return Ok(Exit::Success);
            }
            // A symlink is followed: the file it names is replaced, and
            // the link stays.
            let real = match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| cannot(&e))?,
                _ => path.to_owned(),
            };
            let dir = match real.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => dir,
            };
            if let Some(what) = overwrites_store(&target.store, &real) {
                return Err(CliError::usage(format!(
                    "{}: -o names {what}; the export would replace what it is read from",
                    path.display()
                ))
                .into());
            }
            let file = tempfile::NamedTempFile::new_in(dir).map_err(|e| cannot(&e))?;
            // The temporary file is private (0600); the export gets the
            // permissions of the file it replaces, or a new file's usual
            // ones.
            let permissions = match std::fs::metadata(&real) {
                Ok(m) => m.permissions(),
                Err(_) => new_file_permissions(file.as_file()).map_err(|e| cannot(&e))?,
            };
            file.as_file().set_permissions(permissions).map_err(|e| cannot(&e))?;
            let mut writer = BufWriter::new(file);
            write_doc(&session, &shadowing, view, &mut *render, &mut read, &mut writer)?;
            let file = writer.into_inner().map_err(|e| cannot(&e.into_error()))?;
            file.persist(&real).map_err(|e| cannot(&e.error))?;
            note_written(&origin, view, format, path);
        }
    }
    Ok(Exit::Success)
}

/// Says on stderr where an export written to a file went.
fn note_written(origin: &impl std::fmt::Display, view: ExportView, format: Format, path: &Path) {
    crate::output::note(&format!(
        "{origin}: wrote the {} view as {} to {}",
        view.name(),
        match format {
            Format::Markdown => "Markdown",
            Format::Html => "HTML",
            Format::Json => "JSON",
        },
        path.display()
    ));
}

/// What of `store` the export file `real` would replace, if anything: the
/// session file, the database or one of SQLite's files beside it (`-wal`,
/// `-shm`, `-journal`), or a session file or checkpoint sidecar of a JSONL
/// directory. Compared by canonical path, so `./x.db` and a link to it are
/// the store too.
fn overwrites_store(store: &crate::store_arg::Store, real: &Path) -> Option<&'static str> {
    use crate::store_arg::Store;
    let canonical = crate::location::canonical_or_planned;
    let export = canonical(real)?;
    match store {
        Store::File(file) => {
            let sidecar = palimpsest_persistence_jsonl::sidecar::path(file);
            let taken = canonical(file)? == export || canonical(&sidecar).is_some_and(|s| s == export);
            taken.then_some("the session file being exported, or its checkpoint")
        }
        Store::Sqlite(_) => {
            let db = canonical(store.path())?;
            let name = db.file_name()?.to_string_lossy().into_owned();
            let beside =
                ["", "-wal", "-shm", "-journal"].map(|suffix| db.with_file_name(format!("{name}{suffix}")));
            beside.contains(&export).then_some("the SQLite store being exported, or one of its files")
        }
        Store::Dir(_) => {
            let dir = canonical(store.path())?;
            let name = export.file_name()?.to_string_lossy();
            let session_file =
                name.ends_with(".jsonl") || name.ends_with(palimpsest_persistence_jsonl::sidecar::SUFFIX);
            (export.parent() == Some(dir.as_path()) && session_file)
                .then_some("a session file of the JSONL store being exported")
        }
        Store::Postgres(..) => None,
    }
}

/// Tool-call arguments for reading: an object or array that parses as
/// JSON is re-indented (keys kept in the model's order), anything else is
/// shown as the model wrote it.
pub(crate) fn pretty_arguments(arguments: &str) -> String {
    let trimmed = arguments.trim();
    if !trimmed.starts_with(['{', '[']) || serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_err() {
        return arguments.to_owned();
    }
    let mut out = String::with_capacity(trimmed.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = trimmed.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // Skip the whitespace inside an empty container: `{}`, `[]`.
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&n| n == '}' || n == ']') {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// The text blocks of a tool result's content, joined.
pub(crate) fn result_text(content: &[Block]) -> String {
    let mut text = String::new();
    for b in content {
        match b {
            Block::Text { text: t } | Block::Reasoning { text: t, .. } => text.push_str(t),
            Block::ToolCall { name, arguments, .. } => {
                text.push_str(&format!("[tool call {name}({arguments})]"))
            }
            Block::ToolResult { content, .. } => text.push_str(&result_text(content)),
            Block::Image { .. } => {}
        }
    }
    text
}

/// The export of `view` as `format` of `log`, made as the command makes
/// it: against the session trimmed to its surface, the log read streamed.
#[cfg(test)]
pub(crate) fn render_session(
    log: &Session,
    shadowing: &Shadowing,
    view: ExportView,
    format: Format,
) -> String {
    let mut out = Vec::new();
    render_with(log, shadowing, view, &mut *renderer(format), &mut out);
    String::from_utf8(out).unwrap_or_else(|e| panic!("the export is UTF-8: {e}"))
}

/// [`render_session`] with any [`Render`].
#[cfg(test)]
fn render_with(
    log: &Session,
    shadowing: &Shadowing,
    view: ExportView,
    render: &mut dyn Render,
    out: &mut Vec<u8>,
) {
    let trimmed = crate::replay::in_memory::trimmed(log);
    let mut read = crate::replay::in_memory::reader::<CliError>(log);
    write_doc(&trimmed, shadowing, view, render, &mut read, out)
        .unwrap_or_else(|e| panic!("the export: {e}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_jsonl;

    /// What the tests look at of an export: the items and the document.
    #[derive(Debug, Default)]
    struct Collect {
        seqs: Vec<u64>,
        turn_starts: usize,
        markers: Vec<String>,
        /// Each tool result's seq and the name of its call's tool, as shown.
        named: Vec<(u64, Option<String>)>,
        /// `turns` and `derived`, at the end.
        end: Option<(usize, usize)>,
    }

    impl Render for Collect {
        fn begin(&mut self, _: &Doc<'_>, _: &mut dyn Write) -> anyhow::Result<()> {
            Ok(())
        }
        fn item(&mut self, doc: &Doc<'_>, item: &Item<'_>, _: &mut dyn Write) -> anyhow::Result<()> {
            match item {
                Item::Message(m) => {
                    self.seqs.push(m.seq);
                    self.markers.extend(m.replaces.as_ref().map(|r| doc.marker(m, r)));
                    if let Some(call) = m.call_id() {
                        self.named.push((m.seq, doc.tool_name(call).map(str::to_owned)));
                    }
                }
                Item::TurnStart { .. } => self.turn_starts += 1,
                _ => {}
            }
            Ok(())
        }
        fn end(&mut self, doc: &Doc<'_>, _: bool, _: &mut dyn Write) -> anyhow::Result<()> {
            self.end = Some((doc.turns, doc.derived));
            Ok(())
        }
    }

    fn collect(view: ExportView) -> Collect {
        let text = include_str!("../../test_data/ok/compaction-and-prune.jsonl");
        let checked = check_jsonl(text.as_bytes(), "x".into());
        let shadowing = checked.report.shadowing.clone();
        let (session, _) = checked.into_session().unwrap_or_else(|e| panic!("{e}"));
        let mut collect = Collect::default();
        render_with(&session, &shadowing, view, &mut collect, &mut Vec::new());
        collect
    }

    #[test]
    fn the_transcript_is_every_message_in_log_order_and_the_model_view_is_the_surface() {
        let transcript = collect(ExportView::Transcript);
        assert_eq!(transcript.seqs, [1, 6, 8, 12, 15, 17, 18, 20, 24]);
        assert_eq!(transcript.turn_starts, 2);
        assert_eq!(transcript.end, Some((2, 4)));
        let read_file = Some("read_file".to_owned());
        assert_eq!(transcript.named, [(8, read_file.clone()), (18, read_file.clone())], "the prune too");
        let model = collect(ExportView::Model);
        assert_eq!(model.seqs, [20, 15, 17, 24]);
        assert_eq!(model.end, Some((2, 4)));
    }

    #[test]
    fn replaces_are_told_apart_and_named() {
        assert_eq!(
            collect(ExportView::Transcript).markers,
            [
                "pruned the result of call_1 (seq 8) into seq 18",
                "compacted 4 messages into a summary (seq 20)"
            ]
        );
    }

    /// The JSON written item by item is one document, its items indented
    /// as a pretty printer indents them (the bytes are pinned by the
    /// export tests' snapshot).
    #[test]
    fn the_streamed_json_is_one_document() {
        let text = include_str!("../../test_data/ok/compaction-and-prune.jsonl");
        let checked = check_jsonl(text.as_bytes(), "x".into());
        let shadowing = checked.report.shadowing.clone();
        let (session, _) = checked.into_session().unwrap_or_else(|e| panic!("{e}"));
        // 9 messages, 2 turn starts and 2 turn ends; the 4 messages of the surface.
        for (view, items) in [(ExportView::Transcript, 13), (ExportView::Model, 4)] {
            let streamed = render_session(&session, &shadowing, view, Format::Json);
            let whole: serde_json::Value =
                serde_json::from_str(&streamed).unwrap_or_else(|e| panic!("{e}: {streamed}"));
            assert_eq!(whole["items"].as_array().map(Vec::len), Some(items), "{view:?}: {streamed}");
            assert_eq!(whole["session"]["events"], session.events().len());
            assert!(streamed.contains("\n  \"items\": [\n    {\n      \"kind\": "), "{streamed}");
            assert!(streamed.ends_with("\n    }\n  ]\n}\n"), "{streamed}");
        }
    }

    #[test]
    fn arguments_are_pretty_when_they_are_json_and_keep_their_order() {
        assert_eq!(pretty_arguments(r#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(
            pretty_arguments(r#"{"z": [1, {}], "a": {"s": "x,\"{y}:"}, "e": []}"#),
            "{\n  \"z\": [\n    1,\n    {}\n  ],\n  \"a\": {\n    \"s\": \"x,\\\"{y}:\"\n  },\n  \"e\": []\n}"
        );
        assert_eq!(pretty_arguments("not json {"), "not json {");
        assert_eq!(pretty_arguments("{\"a\": 1"), "{\"a\": 1", "broken JSON is left as written");
        assert_eq!(pretty_arguments("42"), "42", "a bare scalar is left as written");
    }
}
