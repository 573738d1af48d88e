//! The JSON export: one object, pretty-printed. The shape is stable; it is
//! documented field by field in `docs/export-format.md`:
//!
//! ```text
//! {
//!   "format": "palimpsest-export",  "version": 1,
//!   "view": "transcript" | "model",
//!   "session": {"id": s, "createdAt": n, "cwd": s|null, "parentSession": s|null,
//!               "seedLength": n|null, "events": n, "turns": n, "surface": [n],
//!               "settings": Settings, "settingsSeq": n|null},
//!   "items": [
//!     {"kind": "turn-start", "seq": n, "time": n, "turn": n},
//!     {"kind": "settings", "seq": n, "time": n, "changes": [s], "settings": Settings},
//!     {"kind": "turn-end", "seq": n, "time": n, "turn": n, "reason": TurnEndReason},
//!     {"kind": "message", "seq": n, "time": n, "type": s, "turn": n|null, "step": n|null,
//!      "surfacePosition": n|null, "surfaceOp": "append"|{"op":"replace","start":n,"end":n},
//!      "sourceEventSeqs": [n]|null, "shadowedBy": n|null,
//!      "replaces": {"kind": "prune"|"compaction"|"rewrite", "shadowed": [n]}|null,
//!      "usage": Usage|null, "toolError": {"name": s, "code": s}|null,
//!      "interrupted": bool, "message": Message}
//!   ]
//! }
//! ```
//!
//! Every key is always present (`null` when it has no value), so consumers
//! need no existence checks. `message` is the message exactly as logged.
//! New keys (and new `kind`s) may be added within version 1; consumers
//! ignore what they do not know. Removing or changing a key bumps `version`.

use std::io::Write;

use palimpsest_core_session::payload::{ToolError, TurnEndReason, Usage};
use palimpsest_core_session::SurfaceOp;
use serde::Serialize;
use serde_json::value::RawValue;

use super::{Doc, Item, Render};

/// The export format's version.
pub(crate) const VERSION: u32 = 1;

#[derive(Serialize)]
struct JsonDoc<'a> {
    format: &'static str,
    version: u32,
    view: &'static str,
    session: JsonSession<'a>,
    /// Always empty: the items are written one by one ([`Json::item`]).
    items: Vec<JsonItem<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonSession<'a> {
    id: &'a str,
    created_at: u64,
    cwd: Option<&'a str>,
    parent_session: Option<&'a str>,
    seed_length: Option<u64>,
    events: u64,
    turns: usize,
    surface: &'a [u64],
    /// The settings in effect, as logged (`{}` before any).
    settings: &'a RawValue,
    settings_seq: Option<u64>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum JsonItem<'a> {
    TurnStart {
        seq: u64,
        time: u64,
        turn: u64,
    },
    TurnEnd {
        seq: u64,
        time: u64,
        turn: u64,
        reason: &'a TurnEndReason,
    },
    Settings {
        seq: u64,
        time: u64,
        changes: &'a [String],
        settings: &'a RawValue,
    },
    #[serde(rename_all = "camelCase")]
    Message {
        seq: u64,
        time: u64,
        #[serde(rename = "type")]
        event_type: &'a str,
        turn: Option<u64>,
        step: Option<u64>,
        surface_position: Option<usize>,
        surface_op: Option<SurfaceOp>,
        source_event_seqs: Option<&'a [u64]>,
        shadowed_by: Option<u64>,
        replaces: Option<JsonReplace<'a>>,
        usage: Option<&'a Usage>,
        tool_error: Option<&'a ToolError>,
        interrupted: bool,
        message: &'a RawValue,
    },
}

#[derive(Serialize)]
struct JsonReplace<'a> {
    kind: &'static str,
    shadowed: &'a [u64],
}

/// The JSON writer: the object up to `"items": [`, each item as it is
/// made, then the closing brackets. The bytes are those of the whole
/// document pretty-printed at once.
#[derive(Debug, Default)]
pub(crate) struct Json {
    /// Items written so far.
    written: u64,
}

/// What ends the object pretty-printed with no items: the start of the
/// items array is everything before it, plus `[`.
const NO_ITEMS_END: &str = "[]\n}";

impl Render for Json {
    fn begin(&mut self, doc: &Doc<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        let h = doc.session.header();
        let no_settings = RawValue::from_string("{}".to_owned())?;
        let json = JsonDoc {
            format: "palimpsest-export",
            version: VERSION,
            view: doc.view.name(),
            session: JsonSession {
                id: &h.id,
                created_at: h.created_at,
                cwd: h.cwd.as_deref(),
                parent_session: h.parent_session.as_deref(),
                seed_length: h.seed_length,
                events: doc.events,
                turns: doc.turns,
                surface: doc.session.surface(),
                settings: doc.settings.as_ref().map_or(&*no_settings, |(_, _, raw)| *raw),
                settings_seq: doc.settings.as_ref().map(|(seq, _, _)| *seq),
            },
            items: Vec::new(),
        };
        let text = serde_json::to_string_pretty(&json)?;
        let Some(head) = text.strip_suffix(NO_ITEMS_END) else {
            anyhow::bail!("the export's JSON does not end with its items");
        };
        out.write_all(head.as_bytes())?;
        Ok(out.write_all(b"[")?)
    }

    fn item(&mut self, _: &Doc<'_>, item: &Item<'_>, out: &mut dyn Write) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(&json_item(item))?;
        out.write_all(if self.written == 0 { b"\n" } else { b",\n" })?;
        // Items sit two levels deep: four spaces before each line. JSON
        // strings hold no raw line breaks, so lines are the printer's own.
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                out.write_all(b"\n")?;
            }
            out.write_all(b"    ")?;
            out.write_all(line.as_bytes())?;
        }
        self.written += 1;
        Ok(())
    }

    fn end(&mut self, _: &Doc<'_>, _: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        Ok(out.write_all(if self.written == 0 { b"]\n}\n" } else { b"\n  ]\n}\n" })?)
    }
}

/// The JSON of one item.
fn json_item<'a>(item: &'a Item<'_>) -> JsonItem<'a> {
    match item {
        Item::TurnStart { seq, time, turn } => JsonItem::TurnStart { seq: *seq, time: *time, turn: *turn },
        Item::TurnEnd { seq, time, turn, reason } => {
            JsonItem::TurnEnd { seq: *seq, time: *time, turn: *turn, reason }
        }
        Item::Settings { seq, time, raw, changes, .. } => {
            JsonItem::Settings { seq: *seq, time: *time, changes, settings: raw }
        }
        Item::Message(m) => JsonItem::Message {
            seq: m.seq,
            time: m.time,
            event_type: m.event_type.as_str(),
            turn: m.turn,
            step: m.step,
            surface_position: m.position,
            surface_op: m.surface_op,
            source_event_seqs: m.sources,
            shadowed_by: m.shadowed_by,
            replaces: m.replaces.as_ref().map(|r| JsonReplace { kind: r.kind.name(), shadowed: &r.shadowed }),
            usage: m.usage.as_ref(),
            tool_error: m.tool_error.as_ref(),
            interrupted: m.interrupted,
            message: m.raw,
        },
    }
}
