//! Explaining one event: where it stands (turn, step), whether the model
//! sees it, what it was built from (recursively), what was built from it,
//! and, if it left the surface, which replace shadowed it and what stands in
//! its place now.

use std::collections::{BTreeMap, HashMap};

use crate::event::{Event, EventType, SurfaceOp};
use crate::session::Session;
use crate::surface::{SurfaceManager, SurfaceStep};

/// Everything [`explain`] found about one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The event's seq.
    pub seq: u64,
    /// Its type.
    pub event_type: EventType,
    /// The turn it belongs to (its own `turn` field, or the turn open when it
    /// was appended).
    pub turn: Option<u64>,
    /// The step it belongs to, likewise.
    pub step: Option<u64>,
    /// Its position on the current surface, if the model sees it.
    pub surface_position: Option<usize>,
    /// How it entered the surface, if it did.
    pub surface_op: Option<SurfaceOp>,
    /// What it cites, recursively: each node is a seq and what that cites.
    pub cites: Vec<Provenance>,
    /// Events that cite it directly.
    pub cited_by: Vec<u64>,
    /// If this event is a replace: the surface entries it shadowed.
    pub shadowed: Vec<u64>,
    /// If it joined the surface and left it: the replace that shadowed it.
    pub shadowed_by: Option<u64>,
    /// Following `shadowed_by` until an event still on the surface: what
    /// stands in its place now (`None` if the chain ends off the surface).
    pub stands_in_its_place: Option<u64>,
}

/// One node of a provenance tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The cited seq.
    pub seq: u64,
    /// Its type.
    pub event_type: EventType,
    /// What it cites in turn; empty when [`repeated`](Provenance::repeated).
    pub cites: Vec<Provenance>,
    /// Whether this seq was already expanded earlier in the tree (first in
    /// depth-first order): its cites are shown there, not again. Events may
    /// cite any earlier event (rule 7 lets a rewrite cite more than it
    /// shadows), so provenance is a graph; expanded at every occurrence, a
    /// log of 40 rewrites each citing all earlier ones made a tree of 2^39
    /// nodes. Expanded once, the tree has one node per citation.
    pub repeated: bool,
    /// Whether its cites were left out although it has some: the tree
    /// reached [`MAX_PROVENANCE_DEPTH`] levels, or [`MAX_PROVENANCE_NODES`]
    /// nodes, here. `cites` is then empty and says nothing of the event.
    pub cut: bool,
}

/// Explains event `seq` of `session`, or `None` if there is no such event.
/// O(log length): it replays the surface once to learn who shadowed whom.
pub fn explain(session: &Session, seq: u64) -> Option<Explanation> {
    let events = session.events();
    let event = session.event(seq)?;
    let shadowed_by = shadow_map(events);
    let (turn, step) = position_in_turns(events, seq);
    let cited_by = events[seq as usize + 1..]
        .iter()
        .filter(|e| e.source_event_seqs().is_some_and(|s| s.contains(&seq)))
        .map(Event::seq)
        .collect();
    let shadowed = shadowed_by.iter().filter(|&(_, &by)| by == seq).map(|(&s, _)| s).collect::<Vec<_>>();
    let mut shadowed = shadowed;
    shadowed.sort_unstable();
    let mut stands = shadowed_by.get(&seq).copied();
    while let Some(s) = stands {
        match shadowed_by.get(&s) {
            Some(&next) => stands = Some(next),
            None => break,
        }
    }
    Some(Explanation {
        seq,
        event_type: event.event_type().clone(),
        turn,
        step,
        surface_position: session.surface_manager().position(seq),
        surface_op: event.surface_op(),
        cites: provenance(event, &|s| events.get(s as usize)),
        cited_by,
        shadowed,
        shadowed_by: shadowed_by.get(&seq).copied(),
        stands_in_its_place: stands.filter(|s| session.surface_manager().contains(*s)),
    })
}

/// For every seq that left the surface, the replace that shadowed it: a
/// map as large as the shadowed part of the log, for a reader that holds
/// the log anyway ([`Shadowing`] is the compact form).
pub fn shadow_map(events: &[Event]) -> HashMap<u64, u64> {
    let mut by = HashMap::new();
    each_replace(events, |seq, shadowed, _| by.extend(shadowed.iter().map(|&s| (s, seq))));
    by
}

/// Replays the surface of `events` (seqs contiguous from 0), calling
/// `replaced(seq, shadowed, surface)` for each replace with what it took
/// off (in surface order) and the surface after it; stops at the first
/// event the surface rules refuse.
fn each_replace(events: &[Event], mut replaced: impl FnMut(u64, &[u64], &[u64])) {
    let mut surface = SurfaceManager::new();
    for e in events {
        let Ok(step) = surface.plan(events, e) else { break };
        let shadowed = match step {
            SurfaceStep::Replace { start_pos, end_pos } => surface.seqs()[start_pos..=end_pos].to_vec(),
            _ => Vec::new(),
        };
        surface.apply(e.seq(), step);
        if !shadowed.is_empty() {
            replaced(e.seq(), &shadowed, surface.seqs());
        }
    }
}

/// Who shadowed whom in a log, in memory that grows with the replaces, not
/// with the events they shadowed: for every event that joined the surface
/// and left it, the replace that took it off, kept as disjoint runs of
/// seqs, and the seqs of the replaces. A compaction of a thousand messages
/// is one run (the chunks and calls between them never joined the surface,
/// so a run may span them); a prune is one; an entry still on the surface
/// splits a run, and an entry shadowed earlier keeps its own.
///
/// Built by replaying the surface ([`Shadowing::of`]), or replace by
/// replace while a log is read ([`Shadowing::record`]). Lookups are for
/// events that joined the surface (they have a `surfaceOp`): a run may
/// cover other events, which never were on it. What a replace took off,
/// entry by entry, is not kept: a reader that streams the log replays the
/// surface for it ([`SurfaceManager::apply_accepted`]).
///
/// ```
/// use palimpsest_core_session::explain::Shadowing;
/// use palimpsest_core_session::jsonl::JsonlLog;
///
/// let log = include_str!("../test_data/ok/compaction-and-prune.jsonl");
/// let log = JsonlLog::parse(log.as_bytes())?;
/// let shadowing = Shadowing::of(&log.events);
/// // The prune at seq 18 shadowed the tool result at seq 8; the compaction
/// // at seq 20 shadowed the prune's stand-in in turn.
/// assert_eq!(shadowing.replaces(), [18, 20]);
/// assert_eq!(shadowing.chain(8), [18, 20]);
/// assert_eq!(shadowing.shadowed_by(20), None, "the summary is on the surface");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shadowing {
    /// The replaces that took something off, in log order.
    replaces: Vec<u64>,
    /// Every run, by its first seq: its last seq and the replace that took
    /// it off. Runs never overlap.
    runs: BTreeMap<u64, (u64, u64)>,
}

impl Shadowing {
    /// Replays the surface of `events` (seqs contiguous from 0); stops at
    /// the first event the surface rules refuse.
    pub fn of(events: &[Event]) -> Shadowing {
        let mut shadowing = Shadowing::default();
        each_replace(events, |seq, shadowed, surface| shadowing.record(seq, shadowed, surface));
        shadowing
    }

    /// Records that the replace at `seq` (later than every replace recorded
    /// so far) took `shadowed` off the surface, leaving `surface` (the
    /// surface after it, in any order): for a reader that appends the log
    /// to a [`Session`] anyway and has both at hand
    /// ([`SessionView::shadowed_by`](crate::SessionView::shadowed_by)).
    /// Nothing for an empty `shadowed`. O(`shadowed` + `surface`) for a
    /// replace of several entries, O(log replaces) for one.
    pub fn record(&mut self, seq: u64, shadowed: &[u64], surface: &[u64]) {
        let mut sorted = shadowed.to_vec();
        sorted.sort_unstable();
        let (Some(&lowest), Some(&highest)) = (sorted.first(), sorted.last()) else { return };
        self.replaces.push(seq);
        if lowest == highest {
            // One entry (a pruned tool result): one run, and no scan of
            // the surface for what stays between its entries.
            self.insert_run(&sorted, seq);
            return;
        }
        // What stays on the surface between two shadowed entries splits
        // their run; nothing else can be asked about.
        let mut staying: Vec<u64> = surface.iter().copied().filter(|&s| lowest < s && s < highest).collect();
        staying.sort_unstable();
        let mut start = 0;
        for i in 1..sorted.len() {
            let next_staying = staying.partition_point(|&t| t <= sorted[i - 1]);
            if staying.get(next_staying).is_some_and(|&t| t < sorted[i]) {
                self.insert_run(&sorted[start..i], seq);
                start = i;
            }
        }
        self.insert_run(&sorted[start..], seq);
    }

    /// Adds a run over `entries` (sorted, none of them in a run yet) taken
    /// off by `by`, around the runs of earlier replaces among them (their
    /// events left the surface before). Each piece between two of those
    /// is cut to the entries it holds, and a piece holding none is not
    /// added: so there are never more runs than shadowed entries.
    fn insert_run(&mut self, entries: &[u64], by: u64) {
        let (Some(&first), Some(&last)) = (entries.first(), entries.last()) else { return };
        let inside: Vec<(u64, u64)> = self.runs.range(first..=last).map(|(&f, &(l, _))| (f, l)).collect();
        let mut piece = |from: u64, to: u64| {
            let held =
                &entries[entries.partition_point(|&e| e < from)..entries.partition_point(|&e| e <= to)];
            if let (Some(&a), Some(&b)) = (held.first(), held.last()) {
                self.runs.insert(a, (b, by));
            }
        };
        let mut from = first;
        for (f, l) in inside {
            if f > from {
                piece(from, f - 1);
            }
            from = l.saturating_add(1);
        }
        if from <= last {
            piece(from, last);
        }
    }

    /// The replace that took `seq` off the surface, if `seq` joined the
    /// surface and one did (for any other event the answer means nothing).
    pub fn shadowed_by(&self, seq: u64) -> Option<u64> {
        let (_, &(last, by)) = self.runs.range(..=seq).next_back()?;
        (seq <= last).then_some(by)
    }

    /// Whether the event at `seq` is a replace that took something off.
    pub fn is_replace(&self, seq: u64) -> bool {
        self.replaces.binary_search(&seq).is_ok()
    }

    /// The seqs of every replace, in log order.
    pub fn replaces(&self) -> &[u64] {
        &self.replaces
    }

    /// How many runs are kept: what this index costs (for the record).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The replaces that shadowed `seq` (an event that joined the surface),
    /// one after the other: the one that took it off the surface, the one
    /// that took that one off, and so on.
    pub fn chain(&self, seq: u64) -> Vec<u64> {
        let mut chain = Vec::new();
        let mut at = seq;
        while let Some(by) = self.shadowed_by(at) {
            // Each replace is later than what it shadows, so this ends.
            if by <= at {
                break;
            }
            chain.push(by);
            at = by;
        }
        chain
    }
}

/// How many levels of a provenance tree [`provenance`] follows.
pub const MAX_PROVENANCE_DEPTH: usize = 32;

/// How many nodes a provenance tree [`provenance`] builds at most. A log
/// may cite without bound (each of 4,000 events citing every earlier one
/// is eight million citations); past this the nodes not expanded are
/// marked [`cut`](Provenance::cut).
pub const MAX_PROVENANCE_NODES: usize = 10_000;

/// What `event` cites, recursively (to [`MAX_PROVENANCE_DEPTH`] levels),
/// as far as `lookup` finds the cited events: the tree [`explain`] shows,
/// for a reader that holds the cited events some other way than a whole
/// log. Each cited event is expanded once, where depth-first order meets
/// it first; anywhere else it is a leaf marked
/// [`repeated`](Provenance::repeated), so the tree has at most one node per
/// citation in the log.
pub fn provenance<'a>(event: &'a Event, lookup: &dyn Fn(u64) -> Option<&'a Event>) -> Vec<Provenance> {
    let mut walk = Walk { lookup, expanded: std::collections::HashSet::new(), nodes: 0 };
    walk.cites_of(event, 0)
}

/// A provenance tree being built: what was expanded, and how many nodes.
struct Walk<'a, 'l> {
    lookup: &'l dyn Fn(u64) -> Option<&'a Event>,
    expanded: std::collections::HashSet<u64>,
    nodes: usize,
}

impl<'a> Walk<'a, '_> {
    /// The nodes of what `event`, at `depth`, cites.
    fn cites_of(&mut self, event: &'a Event, depth: usize) -> Vec<Provenance> {
        let mut nodes = Vec::new();
        for cited in event.source_event_seqs().unwrap_or_default().iter().filter_map(|&s| (self.lookup)(s)) {
            if self.nodes >= MAX_PROVENANCE_NODES {
                break;
            }
            self.nodes += 1;
            let first = self.expanded.insert(cited.seq());
            let has_cites = cited.source_event_seqs().is_some_and(|c| !c.is_empty());
            let deeper = first && depth + 1 < MAX_PROVENANCE_DEPTH;
            let cites = if deeper { self.cites_of(cited, depth + 1) } else { Vec::new() };
            // Cut where its cites exist but are not shown: too deep, or
            // the node budget ran out before (or while) they were built.
            let cut = first && has_cites && (!deeper || cites.len() < cited_len(cited, self.lookup));
            nodes.push(Provenance {
                seq: cited.seq(),
                event_type: cited.event_type().clone(),
                cites,
                repeated: !first,
                cut,
            });
        }
        nodes
    }
}

/// How many of `event`'s cites `lookup` finds: the nodes a whole tree
/// gives it.
fn cited_len<'a>(event: &'a Event, lookup: &dyn Fn(u64) -> Option<&'a Event>) -> usize {
    event.source_event_seqs().unwrap_or_default().iter().filter(|&&s| lookup(s).is_some()).count()
}

/// The turn and step `seq` belongs to: its own `turn`/`step` fields when it
/// has them, else the turn and step open when it was appended.
fn position_in_turns(events: &[Event], seq: u64) -> (Option<u64>, Option<u64>) {
    let mut turns = TurnTracker::default();
    for e in &events[..=seq as usize] {
        let at = turns.observe(e);
        if e.seq() == seq {
            return at;
        }
    }
    (None, None)
}

/// Where each event of a log stands in its turns, as the log is read one
/// event at a time: for a reader that streams the log instead of holding
/// it ([`explain`] holds it).
///
/// ```
/// use palimpsest_core_session::explain::TurnTracker;
/// use palimpsest_core_session::Event;
///
/// let mut turns = TurnTracker::default();
/// let start = Event::from_json(r#"{"seq":0,"time":1,"type":"turn/start","data":{"turn":3}}"#)?;
/// let note = Event::from_json(r#"{"seq":1,"time":2,"type":"x/note","data":{}}"#)?;
/// assert_eq!(turns.observe(&start), (Some(3), None));
/// assert_eq!(turns.observe(&note), (Some(3), None), "inside turn 3, outside any step");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TurnTracker {
    turn: Option<u64>,
    step: Option<u64>,
}

impl TurnTracker {
    /// The turn and step of `e`, the next event of the log: its own
    /// `turn`/`step` fields when it has them, else the turn and step open
    /// when it was appended.
    pub fn observe(&mut self, e: &Event) -> (Option<u64>, Option<u64>) {
        #[derive(serde::Deserialize)]
        struct TurnStep {
            turn: Option<u64>,
            step: Option<u64>,
        }
        let (t, s) = if !e.event_type().is_core() || !e.data().starts_with('{') {
            (None, None)
        } else {
            e.data_as::<TurnStep>().map(|t| (t.turn, t.step)).unwrap_or((None, None))
        };
        match e.event_type() {
            EventType::TurnStart => (self.turn, self.step) = (t, None),
            EventType::StepStart => self.step = s,
            _ => {}
        }
        let at = (t.or(self.turn), s.or(self.step));
        match e.event_type() {
            EventType::TurnEnd => (self.turn, self.step) = (None, None),
            EventType::StepEnd => self.step = None,
            _ => {}
        }
        at
    }
}
