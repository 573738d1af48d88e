//! `palimpsest explain STORE [--session ID] SEQ [--json]`: everything the
//! log says about one event, for people (or, with `--json`, for machines).
//!
//! The facts come from `palimpsest_core_session::explain::explain`; this
//! module only renders them:
//!
//! * **where** the event is: its turn and step, its time;
//! * **surface**: whether the model sees it (its position), how it entered
//!   the surface, what it took off the surface if it is a replace, and, if
//!   it was shadowed, the chain of replaces that shadowed it and what stands
//!   in its place now;
//! * **cites**: its provenance, recursively down to the stream chunks, as an
//!   indented tree;
//! * **cited by**: the events that cite it directly.
//!
//! # `--json`
//!
//! One object (documented in `docs/export-format.md`):
//!
//! ```text
//! {"session": s, "seq": n, "type": s, "time": n, "turn": n|null, "step": n|null,
//!  "surfacePosition": n|null, "surfaceOp": "append"|{"op":"replace","start":n,"end":n}|null,
//!  "shadowed": [n], "shadowedBy": n|null, "shadowChain": [n], "standsInItsPlace": n|null,
//!  "cites": [{"seq": n, "type": s, "cites": [...]}], "citedBy": [n],
//!  "error": {"code": s, "name"?: s, "message": s}|null}
//! ```
//!
//! `error` is the error the event records, its text in full: a `turn/end`
//! ending in an error, a failed `tool/result`, a plugin event with
//! `data.error` (a failed compaction).
//!
//! `surfacePosition` counts from 0; the text output counts from 1.
//! `shadowed` (what a replace took off the surface) is in surface order,
//! which after earlier replaces need not be seq order.

use std::fmt::Write as _;
use std::io::Write;

use palimpsest_core_session::explain::{explain as explain_event, Explanation, Provenance};
use palimpsest_core_session::payload::Settings;
use palimpsest_core_session::{Session, SurfaceOp};
use serde::Serialize;

use crate::cmd::{open_checked, readable_session};
use crate::describe::{count, join, summarize};
use crate::error::{CliError, Exit};
use crate::settings_view;
use crate::store_arg::StoreArgs;
use crate::timefmt;

/// STORE and SEQ from `explain`'s one or two words: `explain STORE SEQ`, or
/// `explain SEQ` for the default store. No SEQ at all is a usage error.
fn store_and_seq(args: &StoreArgs, seq: Option<u64>) -> Result<(StoreArgs, u64), CliError> {
    if let Some(seq) = seq {
        return Ok((args.clone(), seq));
    }
    let Some(word) = args.store.as_ref() else {
        return Err(CliError::usage("explain needs the SEQ of the event to explain"));
    };
    let seq = word.to_str().and_then(|w| w.parse::<u64>().ok()).ok_or_else(|| {
        CliError::usage(format!("{}: not a SEQ (a number); explain takes [STORE] SEQ", word.display()))
    })?;
    Ok((StoreArgs { store: None, session: args.session.clone() }, seq))
}

/// `palimpsest explain [STORE] SEQ`: with one word, it is SEQ and STORE is
/// the default (`./palimpsest.db`).
pub(crate) fn explain(
    args: &StoreArgs,
    seq: Option<u64>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let (args, seq) = store_and_seq(args, seq)?;
    let (_, checked) = open_checked(&args, crate::store_arg::Access::Read)?;
    let origin = checked.origin.clone();
    // What a replace took off, in surface order (the explanation lists it by seq).
    let taken_off = checked.report.shadowing.took_off(seq).map(|r| r.shadowed().collect::<Vec<_>>());
    let chain = checked.report.shadowing.chain(seq);
    let session = readable_session(checked)?;
    let Some(found) = explain_event(&session, seq) else {
        let len = session.events().len();
        let range = match len {
            0 => "it has no events".to_owned(),
            n => format!("it has {} (seq 0 to {})", count(n, "event"), n - 1),
        };
        return Err(CliError {
            code: "not-found".into(),
            location: origin,
            message: format!("no event with seq {seq}; {range}"),
            exit: Exit::Usage,
        }
        .into());
    };
    let mut found = found;
    if let Some(in_surface_order) = taken_off {
        found.shadowed = in_surface_order;
    }
    if json {
        serde_json::to_writer(&mut *out, &JsonExplanation::new(&session, &found, chain))?;
        writeln!(out)?;
    } else {
        out.write_all(render(&session, &found, &chain).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// Where the settings of the `session/settings` at `seq` stand: what they
/// replaced and changed, and whether they are still in effect.
fn settings_history(session: &Session, seq: u64, settings: &Settings) -> String {
    let events = session.events();
    let before = usize::try_from(seq).map_or(&events[..0], |i| &events[..i.min(events.len())]);
    let previous = before.iter().rev().find_map(|e| settings_view::of_event(e).map(|s| (e.seq(), s)));
    let mut text = match &previous {
        Some((p, old)) => {
            let changed = settings_view::changes(old, settings);
            if changed.is_empty() {
                format!("replace those of {p}, unchanged")
            } else {
                format!("replace those of {p}, changing {}", changed.join(", "))
            }
        }
        None => "the session's first settings".to_owned(),
    };
    let next = events.iter().skip(before.len() + 1).find(|e| settings_view::of_event(e).is_some());
    match next {
        None => text.push_str("; in effect now: the next request is made with them"),
        Some(next) => {
            let _ = write!(text, "; replaced by those of {}", next.seq());
        }
    }
    text
}

/// The text report.
fn render(session: &Session, e: &Explanation, chain: &[u64]) -> String {
    let mut o = String::new();
    let Some(event) = session.event(e.seq) else { return o };
    let surface_len = session.surface().len();
    let t0 = session.events().first().map_or(0, |f| f.time());
    let label = |o: &mut String, name: &str| {
        let _ = write!(o, "  {name:<9} ");
    };

    let _ = writeln!(o, "event {} of {}: {}", e.seq, session.id(), e.event_type.as_str());
    label(&mut o, "what");
    let _ = writeln!(o, "{}", summarize(event));
    label(&mut o, "time");
    let _ = writeln!(
        o,
        "{} ({} from the first event)",
        timefmt::utc(event.time()),
        timefmt::offset(i128::from(event.time()) - i128::from(t0))
    );
    label(&mut o, "where");
    let _ = writeln!(
        o,
        "{}",
        match (e.turn, e.step) {
            (Some(t), Some(s)) => format!("turn {t}, step {s}"),
            (Some(t), None) => format!("turn {t}, outside any step"),
            (None, _) => "outside any turn".to_owned(),
        }
    );

    if let Some(settings) = settings_view::of_event(event) {
        label(&mut o, "settings");
        o.push_str(&settings_history(session, e.seq, &settings));
        o.push('\n');
    }

    label(&mut o, "surface");
    match (e.surface_position, e.surface_op) {
        (Some(p), _) => {
            let _ = writeln!(o, "on the surface: position {} of {surface_len}; the model sees it", p + 1);
        }
        (None, Some(_)) => {
            let _ = writeln!(o, "off the surface: it was shadowed; the model no longer sees it");
        }
        (None, None) => {
            let why = if e.event_type.is_surface_eligible() {
                "it has no surfaceOp".to_owned()
            } else if e.event_type.is_core() {
                format!("{} events never join it", e.event_type.as_str())
            } else {
                "plugin events never join it".to_owned()
            };
            let _ = writeln!(o, "never on the surface: {why}");
        }
    }
    match e.surface_op {
        Some(SurfaceOp::Append) => {
            label(&mut o, "entered");
            o.push_str("by append\n");
        }
        Some(SurfaceOp::Replace { start, end }) => {
            label(&mut o, "entered");
            let range = if start == end { format!("{start}") } else { format!("{start}..{end}") };
            let _ = writeln!(o, "by replace {range}, taking {} off the surface", join(&e.shadowed));
        }
        None => {}
    }
    if let Some(&first) = chain.first() {
        label(&mut o, "shadowed");
        let _ = write!(o, "by {first} {}", type_of(session, first));
        for pair in chain.windows(2) {
            let _ = write!(o, ", then {} by {} {}", pair[0], pair[1], type_of(session, pair[1]));
        }
        o.push('\n');
        label(&mut o, "now");
        match e.stands_in_its_place.and_then(|s| Some((s, session.surface_manager().position(s)?))) {
            Some((s, p)) => {
                let _ = writeln!(
                    o,
                    "{s} {} stands in its place, at position {} of {surface_len}",
                    type_of(session, s),
                    p + 1
                );
            }
            None => o.push_str("nothing on the surface stands in its place\n"),
        }
    }

    o.push_str("\ncites (what it was built from, recursively)\n");
    if e.cites.is_empty() {
        let sources = event.source_event_seqs();
        o.push_str(match sources {
            Some([]) => "  nothing: an empty stream\n",
            _ => "  nothing\n",
        });
    } else {
        tree(session, &e.cites, "  ", &mut o);
    }

    o.push_str("\ncited by\n");
    if e.cited_by.is_empty() {
        o.push_str("  nothing\n");
    }
    for &s in &e.cited_by {
        if let Some(cited) = session.event(s) {
            let _ = writeln!(o, "  {s} {}  {}", cited.event_type().as_str(), summarize(cited));
        }
    }
    o
}

/// One level of the provenance tree, with `├─`/`└─` guides.
fn tree(session: &Session, nodes: &[Provenance], prefix: &str, o: &mut String) {
    for (i, node) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let summary = session.event(node.seq).map(summarize).unwrap_or_default();
        let _ = writeln!(
            o,
            "{prefix}{}{} {}  {summary}",
            if last { "└─ " } else { "├─ " },
            node.seq,
            node.event_type.as_str()
        );
        let deeper = format!("{prefix}{}", if last { "   " } else { "│  " });
        tree(session, &node.cites, &deeper, o);
    }
}

fn type_of(session: &Session, seq: u64) -> &str {
    session.event(seq).map_or("?", |e| e.event_type().as_str())
}

/// The `--json` object.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonExplanation<'a> {
    session: &'a str,
    seq: u64,
    #[serde(rename = "type")]
    event_type: &'a str,
    time: u64,
    turn: Option<u64>,
    step: Option<u64>,
    surface_position: Option<usize>,
    surface_op: Option<SurfaceOp>,
    shadowed: &'a [u64],
    shadowed_by: Option<u64>,
    shadow_chain: Vec<u64>,
    stands_in_its_place: Option<u64>,
    cites: Vec<JsonProvenance<'a>>,
    cited_by: &'a [u64],
    error: Option<crate::output::EventError>,
}

#[derive(Serialize)]
struct JsonProvenance<'a> {
    seq: u64,
    #[serde(rename = "type")]
    event_type: &'a str,
    cites: Vec<JsonProvenance<'a>>,
}

impl<'a> JsonProvenance<'a> {
    fn new(p: &'a Provenance) -> JsonProvenance<'a> {
        JsonProvenance {
            seq: p.seq,
            event_type: p.event_type.as_str(),
            cites: p.cites.iter().map(JsonProvenance::new).collect(),
        }
    }
}

impl<'a> JsonExplanation<'a> {
    fn new(session: &'a Session, e: &'a Explanation, chain: Vec<u64>) -> JsonExplanation<'a> {
        JsonExplanation {
            session: session.id(),
            seq: e.seq,
            event_type: e.event_type.as_str(),
            time: session.event(e.seq).map_or(0, |ev| ev.time()),
            turn: e.turn,
            step: e.step,
            surface_position: e.surface_position,
            surface_op: e.surface_op,
            shadowed: &e.shadowed,
            shadowed_by: e.shadowed_by,
            shadow_chain: chain,
            stands_in_its_place: e.stands_in_its_place,
            cites: e.cites.iter().map(JsonProvenance::new).collect(),
            cited_by: &e.cited_by,
            error: session.event(e.seq).and_then(crate::output::event_error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::jsonl::JsonlLog;

    fn example() -> Session {
        let text = include_str!("../test_data/ok/compaction-and-prune.jsonl");
        JsonlLog::parse(text.as_bytes())
            .and_then(|l| l.into_session())
            .unwrap_or_else(|e| panic!("the fixture loads: {e}"))
    }

    #[test]
    fn the_shadow_chain_follows_every_replace() {
        let s = palimpsest_core_session::explain::Shadowing::of(example().events());
        assert_eq!(s.chain(8), [18, 20], "pruned, then compacted with the rest");
        assert_eq!(s.chain(1), [20]);
        assert_eq!(s.chain(20), Vec::<u64>::new());
        assert_eq!(s.chain(4), Vec::<u64>::new(), "a chunk is never on the surface");
    }

    /// Issue 21, item 4: the error text in full, once, where people look.
    #[test]
    fn errors_are_shown_in_full() {
        let reason =
            format!("provider unavailable: HTTP 503: {} (gave up after 3 attempts)", "x".repeat(300));
        let end = serde_json::json!({"seq": 1, "time": 2, "type": "turn/end", "data": {"turn": 1,
            "reason": {"kind": "error", "error": {"message": reason, "code": "PROVIDER_UNAVAILABLE"}}}});
        let failed = serde_json::json!({"seq": 2, "time": 3, "type": "compaction/end", "data": {"startSeq": 0,
            "error": {"code": "SUMMARY_FAILED", "message": reason}}});
        let text = format!(
            "{{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":0}}\n\
             {{\"seq\":0,\"time\":1,\"type\":\"turn/start\",\"data\":{{\"turn\":1}}}}\n{end}\n{failed}\n"
        );
        let s = JsonlLog::parse(text.as_bytes())
            .and_then(|l| l.into_session())
            .unwrap_or_else(|e| panic!("the log loads: {e}"));
        for seq in [1, 2] {
            let e = explain_event(&s, seq).unwrap_or_else(|| panic!("seq {seq}"));
            let json = serde_json::to_value(JsonExplanation::new(&s, &e, vec![])).unwrap_or_default();
            assert_eq!(json["error"]["message"], reason.as_str(), "seq {seq}");
            let human = render(&s, &e, &[]);
            assert!(human.contains("(gave up after 3 attempts)"), "seq {seq}: {human}");
            assert_eq!(human.matches(&reason).count(), 1, "seq {seq}: {human}");
        }
    }

    #[test]
    fn never_on_the_surface_says_why() {
        let s = example();
        let text = |seq| explain_event(&s, seq).map(|e| render(&s, &e, &[])).unwrap_or_default();
        assert!(text(0).contains("never on the surface: turn/start events never join it"), "{}", text(0));
        assert!(text(19).contains("never on the surface: plugin events never join it"), "{}", text(19));
    }
}
