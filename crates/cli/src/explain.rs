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
//!  "shadowed": [n], "shadowedBy": n|null, "shadowChain": [n], "shadowChainElided"?: n,
//!  "standsInItsPlace": n|null,
//!  "cites": [{"seq": n, "type": s, "cites": [...], "repeated"?: true, "cut"?: true}],
//!  "citesElided"?: n, "citedBy": [n],
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

use std::collections::{HashMap, HashSet};

use palimpsest_core_session::explain::{
    provenance, Explanation, Provenance, TurnTracker, MAX_PROVENANCE_DEPTH, MAX_PROVENANCE_NODES,
};
use palimpsest_core_session::payload::Settings;
use palimpsest_core_session::{Event, Session, SurfaceManager, SurfaceOp};
use serde::Serialize;

use crate::check::Retain;
use crate::cmd::{readable_session, report_tail};
use crate::describe::{count, join, summarize};
use crate::error::{CliError, Exit};
use crate::replay::Consume;
use crate::settings_view;
use crate::store_arg::{self, Access, StoreArgs};
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
///
/// The log is checked keeping only its surface, then read again, streamed,
/// for what the explanation shows of other events (see [`Known`]): memory
/// is bounded by the surface and by what is shown, not by the log.
pub(crate) fn explain(
    args: &StoreArgs,
    seq: Option<u64>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let (args, seq) = store_and_seq(args, seq)?;
    let target = store_arg::open(&args, Access::Read)?;
    let checked = target.check_keeping(Retain::Surface)?;
    report_tail(&checked);
    let origin = checked.origin.clone();
    let (chain, chain_elided) = shorten_chain(checked.report.shadowing.chain(seq));
    let session = readable_session(checked)?;
    if seq >= session.next_seq() {
        let len = session.next_seq();
        let range = match len {
            0 => "it has no events".to_owned(),
            n => format!("it has {} (seq 0 to {})", count(n as usize, "event"), n - 1),
        };
        return Err(CliError {
            code: "not-found".into(),
            location: origin,
            message: format!("no event with seq {seq}; {range}"),
            exit: Exit::Usage,
        }
        .into());
    }
    let mut known = Known::gather(&session, seq, &chain, |upto, consume| target.replay(upto, consume))?;
    known.chain_elided = chain_elided;
    // Only an event that joined the surface can have left it.
    let chain = if known.event(seq).is_some_and(|e| e.surface_op().is_some()) { chain } else { Vec::new() };
    let Some(found) = known.explanation(seq, &chain) else {
        return Err(CliError::io(origin, format!("seq {seq} could not be read again")).into());
    };
    if json {
        serde_json::to_writer(&mut *out, &JsonExplanation::new(&known, &found, chain))?;
        writeln!(out)?;
    } else {
        // Logged text (ids, types, names): no control character of it
        // reaches the terminal.
        out.write_all(crate::output::printable_text(&render(&known, &found, &chain)).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// What an explanation shows of the log, gathered by streamed reads: the
/// event itself, where it stands in its turn, the events that cite it,
/// the events it cites (recursively), the replaces that shadowed it, and
/// the settings events around it. Events on the surface come from the
/// session; every other event shown is kept here, and nothing else is.
struct Known<'a> {
    session: &'a Session,
    /// Events shown that the session does not hold.
    events: HashMap<u64, Event>,
    /// The first event's time (times are shown from it).
    t0: u64,
    /// The explained event's turn and step.
    turn_step: (Option<u64>, Option<u64>),
    /// The events that cite it, in log order.
    cited_by: Vec<u64>,
    /// What it took off the surface, in surface order, if it is a replace.
    took: Vec<u64>,
    /// The `session/settings` before it (seq and settings), and the seq of
    /// the one after it.
    settings_before: Option<(u64, Settings)>,
    settings_after: Option<u64>,
    /// Replaces of the shadow chain left out of the middle ([`shorten_chain`]).
    chain_elided: usize,
}

/// The most replaces of a shadow chain shown: its first and last halves.
/// A chain can be as long as the log (each of a million rewrites replacing
/// the one before), and every replace shown is an event held.
const MAX_CHAIN_SHOWN: usize = 64;

/// `chain` with its middle left out past [`MAX_CHAIN_SHOWN`], and how many
/// replaces were left out. Its first (what shadowed the event) and last
/// (what stands in its place) are always kept.
fn shorten_chain(mut chain: Vec<u64>) -> (Vec<u64>, usize) {
    if chain.len() <= MAX_CHAIN_SHOWN {
        return (chain, 0);
    }
    let elided = chain.len() - MAX_CHAIN_SHOWN;
    chain.drain(MAX_CHAIN_SHOWN / 2..MAX_CHAIN_SHOWN / 2 + elided);
    (chain, elided)
}

impl<'a> Known<'a> {
    /// Reads what explaining `seq` needs: one read of the whole log, then
    /// one read per level of its provenance, each as far as the latest seq
    /// that level cites. `read(upto, consume)` hands the first `upto`
    /// events of the log to `consume`.
    fn gather<E>(
        session: &'a Session,
        seq: u64,
        chain: &[u64],
        mut read: impl FnMut(u64, &mut Consume<'_>) -> Result<(), E>,
    ) -> Result<Known<'a>, E> {
        let mut known = Known {
            session,
            events: HashMap::new(),
            t0: 0,
            turn_step: (None, None),
            cited_by: Vec::new(),
            took: Vec::new(),
            settings_before: None,
            settings_after: None,
            chain_elided: 0,
        };
        // The chain of replaces and what stands in its place are named by type.
        let wanted: HashSet<u64> = chain.iter().copied().chain([seq]).collect();
        read(session.next_seq(), &mut |events| {
            let mut turns = TurnTracker::default();
            // The surface, followed, for what the event took off it.
            let mut surface = SurfaceManager::new();
            for (i, e) in events.enumerate() {
                if i == 0 {
                    known.t0 = e.time();
                }
                let at = turns.observe(&e);
                let took = surface.apply_accepted(&e);
                let s = e.seq();
                if s == seq {
                    known.turn_step = at;
                    known.took = took;
                }
                if s < seq {
                    if let Some(settings) = settings_view::of_event(&e) {
                        known.settings_before = Some((s, settings));
                    }
                } else if s > seq {
                    if known.settings_after.is_none() && settings_view::of_event(&e).is_some() {
                        known.settings_after = Some(s);
                    }
                    if e.source_event_seqs().is_some_and(|c| c.contains(&seq)) {
                        known.cited_by.push(s);
                        known.keep(e);
                        continue;
                    }
                }
                if wanted.contains(&s) {
                    known.keep(e);
                }
            }
        })?;
        // Provenance, a level at a time: what the known events cite and no
        // read has brought yet. Cites point back, so each read stops early.
        // Each seq is looked up once: provenance is a graph (an event may
        // cite any earlier one), and a level of every path to it doubled
        // with each rewrite that cited all before it.
        let mut visited: HashSet<u64> = HashSet::from([seq]);
        let mut level: Vec<u64> = known.cites_of(&[seq]);
        level.retain(|&s| visited.insert(s));
        for _ in 0..MAX_PROVENANCE_DEPTH {
            let missing: HashSet<u64> = level.iter().copied().filter(|&s| known.event(s).is_none()).collect();
            if let Some(&last) = missing.iter().max() {
                read(last + 1, &mut |events| {
                    for e in events.filter(|e| missing.contains(&e.seq())) {
                        known.keep(e);
                    }
                })?;
            }
            level = known.cites_of(&level);
            level.retain(|&s| visited.insert(s));
            if level.is_empty() {
                break;
            }
        }
        Ok(known)
    }

    /// Keeps `e` unless the session holds it.
    fn keep(&mut self, e: Event) {
        if self.session.event(e.seq()).is_none() {
            self.events.insert(e.seq(), e);
        }
    }

    /// Event `seq`, if it is known.
    fn event(&self, seq: u64) -> Option<&Event> {
        self.session.event(seq).or_else(|| self.events.get(&seq))
    }

    /// What the known events among `seqs` cite.
    fn cites_of(&self, seqs: &[u64]) -> Vec<u64> {
        seqs.iter()
            .filter_map(|&s| self.event(s))
            .flat_map(|e| e.source_event_seqs().unwrap_or_default().iter().copied())
            .collect()
    }

    /// What the log says of `seq`: `chain` is the replaces that shadowed
    /// it, in order.
    fn explanation(&self, seq: u64, chain: &[u64]) -> Option<Explanation> {
        let event = self.event(seq)?;
        let surface = self.session.surface_manager();
        Some(Explanation {
            seq,
            event_type: event.event_type().clone(),
            turn: self.turn_step.0,
            step: self.turn_step.1,
            surface_position: surface.position(seq),
            surface_op: event.surface_op(),
            cites: provenance(event, &|s| self.event(s)),
            cited_by: self.cited_by.clone(),
            shadowed: self.took.clone(),
            shadowed_by: chain.first().copied(),
            stands_in_its_place: chain.last().copied().filter(|&s| surface.contains(s)),
        })
    }

    /// Where the settings of the `session/settings` at `seq` stand: what
    /// they replaced and changed, and whether they are still in effect.
    fn settings_history(&self, settings: &Settings) -> String {
        let mut text = match &self.settings_before {
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
        match self.settings_after {
            None => text.push_str("; in effect now: the next request is made with them"),
            Some(next) => {
                let _ = write!(text, "; replaced by those of {next}");
            }
        }
        text
    }

    /// How many of the explained event's own cites the tree left out (its
    /// node budget ran out before them).
    fn cites_left_out(&self, e: &Explanation) -> usize {
        let known = self.event(e.seq).map_or(0, |ev| {
            ev.source_event_seqs().unwrap_or_default().iter().filter(|&&s| self.event(s).is_some()).count()
        });
        known.saturating_sub(e.cites.len())
    }

    fn type_of(&self, seq: u64) -> &str {
        self.event(seq).map_or("?", |e| e.event_type().as_str())
    }
}

/// The text report.
fn render(k: &Known<'_>, e: &Explanation, chain: &[u64]) -> String {
    let mut o = String::new();
    let Some(event) = k.event(e.seq) else { return o };
    let surface_len = k.session.surface().len();
    let t0 = k.t0;
    let label = |o: &mut String, name: &str| {
        let _ = write!(o, "  {name:<9} ");
    };

    let id = crate::output::printable_line(k.session.id());
    let _ = writeln!(o, "event {} of {id}: {}", e.seq, crate::output::printable_line(e.event_type.as_str()));
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
        o.push_str(&k.settings_history(&settings));
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
        let _ = write!(o, "by {first} {}", k.type_of(first));
        for (i, pair) in chain.windows(2).enumerate() {
            if k.chain_elided > 0 && i + 1 == MAX_CHAIN_SHOWN / 2 {
                let _ = write!(
                    o,
                    ", then {} more replaces (not shown), then {} {}",
                    k.chain_elided,
                    pair[1],
                    k.type_of(pair[1])
                );
                continue;
            }
            let _ = write!(o, ", then {} by {} {}", pair[0], pair[1], k.type_of(pair[1]));
        }
        o.push('\n');
        label(&mut o, "now");
        match e.stands_in_its_place.and_then(|s| Some((s, k.session.surface_manager().position(s)?))) {
            Some((s, p)) => {
                let _ = writeln!(
                    o,
                    "{s} {} stands in its place, at position {} of {surface_len}",
                    k.type_of(s),
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
        tree(k, &e.cites, "  ", &mut o);
        let left_out = k.cites_left_out(e);
        if left_out > 0 {
            let _ = writeln!(
                o,
                "  … and {left_out} more of its own cites, not shown: the tree stops at {MAX_PROVENANCE_NODES} nodes"
            );
        }
    }

    o.push_str("\ncited by\n");
    if e.cited_by.is_empty() {
        o.push_str("  nothing\n");
    }
    for &s in &e.cited_by {
        if let Some(cited) = k.event(s) {
            let _ = writeln!(o, "  {s} {}  {}", cited.event_type().as_str(), summarize(cited));
        }
    }
    o
}

/// One level of the provenance tree, with `├─`/`└─` guides.
fn tree(k: &Known<'_>, nodes: &[Provenance], prefix: &str, o: &mut String) {
    for (i, node) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let summary = match k.event(node.seq) {
            Some(_) if node.repeated => "(its cites are shown above)".to_owned(),
            Some(event) if node.cut => format!(
                "{}  (its cites are not shown: the tree stops at {MAX_PROVENANCE_DEPTH} levels and {MAX_PROVENANCE_NODES} nodes)",
                summarize(event)
            ),
            Some(event) => summarize(event),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "{prefix}{}{} {}  {summary}",
            if last { "└─ " } else { "├─ " },
            node.seq,
            node.event_type.as_str()
        );
        let deeper = format!("{prefix}{}", if last { "   " } else { "│  " });
        tree(k, &node.cites, &deeper, o);
    }
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
    /// Present where the chain's middle was left out: how many replaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow_chain_elided: Option<usize>,
    stands_in_its_place: Option<u64>,
    cites: Vec<JsonProvenance<'a>>,
    /// Present where the tree's node budget left some of the event's own
    /// cites out: how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    cites_elided: Option<usize>,
    cited_by: &'a [u64],
    error: Option<crate::output::EventError>,
}

#[derive(Serialize)]
struct JsonProvenance<'a> {
    seq: u64,
    #[serde(rename = "type")]
    event_type: &'a str,
    cites: Vec<JsonProvenance<'a>>,
    /// Present (`true`) where the seq was expanded earlier in the tree.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    repeated: bool,
    /// Present (`true`) where its cites exist but are not shown: the tree
    /// stops at 32 levels and 10,000 nodes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cut: bool,
}

impl<'a> JsonProvenance<'a> {
    fn new(p: &'a Provenance) -> JsonProvenance<'a> {
        JsonProvenance {
            seq: p.seq,
            event_type: p.event_type.as_str(),
            cites: p.cites.iter().map(JsonProvenance::new).collect(),
            repeated: p.repeated,
            cut: p.cut,
        }
    }
}

impl<'a> JsonExplanation<'a> {
    fn new(k: &'a Known<'_>, e: &'a Explanation, chain: Vec<u64>) -> JsonExplanation<'a> {
        JsonExplanation {
            session: k.session.id(),
            seq: e.seq,
            event_type: e.event_type.as_str(),
            time: k.event(e.seq).map_or(0, |ev| ev.time()),
            turn: e.turn,
            step: e.step,
            surface_position: e.surface_position,
            surface_op: e.surface_op,
            shadowed: &e.shadowed,
            shadowed_by: e.shadowed_by,
            shadow_chain: chain,
            shadow_chain_elided: Some(k.chain_elided).filter(|&n| n > 0),
            stands_in_its_place: e.stands_in_its_place,
            cites: e.cites.iter().map(JsonProvenance::new).collect(),
            cites_elided: Some(k.cites_left_out(e)).filter(|&n| n > 0),
            cited_by: &e.cited_by,
            error: k.event(e.seq).and_then(crate::output::event_error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palimpsest_core_session::explain::explain as explain_event;
    use palimpsest_core_session::jsonl::JsonlLog;

    /// `f` of what the command knows of `seq` in `log`, with the session
    /// holding only its surface (as a streamed check leaves it) and every
    /// other event read from the log.
    fn with_known<R>(log: &Session, seq: u64, f: impl FnOnce(&Known<'_>) -> R) -> R {
        let chain = palimpsest_core_session::explain::Shadowing::of(log.events()).chain(seq);
        let trimmed = crate::replay::in_memory::trimmed(log);
        assert!(trimmed.resident().len() < log.events().len(), "the session holds less than the log");
        let read = crate::replay::in_memory::reader::<()>(log);
        let known = Known::gather(&trimmed, seq, &chain, read).unwrap_or_else(|()| unreachable!());
        f(&known)
    }

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
            let json = with_known(&s, seq, |k| serde_json::to_value(JsonExplanation::new(k, &e, vec![])))
                .unwrap_or_default();
            assert_eq!(json["error"]["message"], reason.as_str(), "seq {seq}");
            let human = with_known(&s, seq, |k| render(k, &e, &[]));
            assert!(human.contains("(gave up after 3 attempts)"), "seq {seq}: {human}");
            assert_eq!(human.matches(&reason).count(), 1, "seq {seq}: {human}");
        }
    }

    /// The streamed reads find what the library finds holding the log,
    /// for every event (a replace's `shadowed` in surface order).
    #[test]
    fn what_is_gathered_streamed_is_what_the_whole_log_says() {
        let s = example();
        let shadowing = palimpsest_core_session::explain::Shadowing::of(s.events());
        for seq in 0..s.next_seq() {
            let mut whole = explain_event(&s, seq).unwrap_or_else(|| panic!("seq {seq}"));
            let chain = if whole.surface_op.is_some() { shadowing.chain(seq) } else { Vec::new() };
            let streamed = with_known(&s, seq, |k| k.explanation(seq, &chain));
            let streamed = streamed.unwrap_or_else(|| panic!("seq {seq}"));
            // The library lists what a replace took off by seq; the command in
            // surface order.
            let mut by_seq = streamed.shadowed.clone();
            by_seq.sort_unstable();
            assert_eq!(by_seq, whole.shadowed, "seq {seq}");
            whole.shadowed = streamed.shadowed.clone();
            assert_eq!(streamed, whole, "seq {seq}");
        }
    }

    #[test]
    fn never_on_the_surface_says_why() {
        let s = example();
        let text = |seq| {
            explain_event(&s, seq).map(|e| with_known(&s, seq, |k| render(k, &e, &[]))).unwrap_or_default()
        };
        assert!(text(0).contains("never on the surface: turn/start events never join it"), "{}", text(0));
        assert!(text(19).contains("never on the surface: plugin events never join it"), "{}", text(19));
    }
}
