//! Property tests of the surface: random op sequences, valid and invalid,
//! checked against an independent naive model of rules 5–9, a from-scratch
//! fold, and an incremental manager synced in random chunks. A refused event
//! must change nothing.

use palimpsest_core_session::payload::*;
use palimpsest_core_session::{Event, Session, SessionHeader, SurfaceIntent, SurfaceManager};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    AppendUser,
    AppendToolResult {
        call: u8,
    },
    LogOnly,
    /// Replace the surface entries at positions `a..=b` (taken modulo the
    /// surface length; a reversed pair stays reversed).
    Replace {
        a: usize,
        b: usize,
        cite_all: bool,
        off_surface_start: bool,
    },
    /// A tool/result replacing the entry at position `a`, for `call`.
    ReplaceToolResult {
        a: usize,
        call: u8,
    },
    WrongSeq {
        delta: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::AppendUser),
        3 => (0u8..4).prop_map(|call| Op::AppendToolResult { call }),
        2 => Just(Op::LogOnly),
        4 => (any::<usize>(), any::<usize>(), prop::bool::weighted(0.8), prop::bool::weighted(0.1))
            .prop_map(|(a, b, cite_all, off_surface_start)| Op::Replace { a, b, cite_all, off_surface_start }),
        2 => (any::<usize>(), 0u8..4).prop_map(|(a, call)| Op::ReplaceToolResult { a, call }),
        1 => (1u8..3).prop_map(|delta| Op::WrongSeq { delta }),
    ]
}

fn user_message(seq: u64) -> UserMessage {
    UserMessage {
        turn: None,
        message: Message {
            id: format!("u{seq}"),
            role: Role::User,
            content: vec![Block::text("x")],
            source: Source::User,
        },
    }
}

fn tool_result(seq: u64, call: u8) -> ToolResult {
    let id = format!("c{call}");
    ToolResult {
        turn: 1,
        step: 1,
        message: Message {
            id: format!("r{seq}"),
            role: Role::User,
            content: vec![Block::ToolResult { tool_call_id: id.clone(), is_error: false, content: vec![] }],
            source: Source::Tool { call_id: id },
        },
        error: None,
    }
}

/// The naive model: a surface of (seq, tool-result call id).
#[derive(Default, Clone, Debug)]
struct Model {
    surface: Vec<(u64, Option<u8>)>,
}

impl Model {
    fn seqs(&self) -> Vec<u64> {
        self.surface.iter().map(|e| e.0).collect()
    }
}

/// Builds the candidate event for `op` and says whether the model accepts it
/// (and how the model surface looks afterwards).
fn candidate(op: &Op, next: u64, model: &Model) -> (Option<Event>, Option<Model>) {
    let seqs = model.seqs();
    let pick = |i: usize| seqs.get(i % seqs.len().max(1)).copied();
    let mut after = model.clone();
    match *op {
        Op::AppendUser => {
            after.surface.push((next, None));
            (Event::surface(next, 0, user_message(next), SurfaceIntent::append()).ok(), Some(after))
        }
        Op::AppendToolResult { call } => {
            after.surface.push((next, Some(call)));
            (Event::surface(next, 0, tool_result(next, call), SurfaceIntent::append()).ok(), Some(after))
        }
        Op::LogOnly => (Event::log(next, 0, TurnStart { turn: 1 }).ok(), Some(after)),
        Op::WrongSeq { delta } => (Event::log(next + u64::from(delta), 0, TurnStart { turn: 1 }).ok(), None),
        Op::Replace { a, b, cite_all, off_surface_start } => {
            let (Some(start), Some(end)) = (pick(a), pick(b)) else { return (None, None) };
            // An off-surface start: the oldest seq not on the surface, if any.
            let start = if off_surface_start {
                (0..next).find(|s| !seqs.contains(s)).unwrap_or(start)
            } else {
                start
            };
            let (pa, pb) = (seqs.iter().position(|&s| s == start), seqs.iter().position(|&s| s == end));
            let shadowed: Vec<u64> = match (pa, pb) {
                (Some(x), Some(y)) if x <= y => seqs[x..=y].to_vec(),
                _ => vec![],
            };
            let mut sources = if shadowed.is_empty() { vec![start.min(end)] } else { shadowed.clone() };
            if !cite_all && sources.len() > 1 {
                sources.pop();
            }
            let ok = !shadowed.is_empty() && shadowed.iter().all(|s| sources.contains(s));
            let event =
                Event::surface(next, 0, user_message(next), SurfaceIntent::replace(start, end, sources)).ok();
            if !ok {
                return (event, None);
            }
            let (x, y) = (pa.unwrap(), pb.unwrap());
            after.surface.splice(x..=y, [(next, None)]);
            (event, Some(after))
        }
        Op::ReplaceToolResult { a, call } => {
            let Some(target) = pick(a) else { return (None, None) };
            let pos = seqs.iter().position(|&s| s == target).unwrap();
            let ok = model.surface[pos].1 == Some(call);
            let intent = SurfaceIntent::replace(target, target, vec![target]);
            let event = Event::surface(next, 0, tool_result(next, call), intent).ok();
            if !ok {
                return (event, None);
            }
            after.surface[pos] = (next, Some(call));
            (event, Some(after))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn incremental_surface_matches_model_and_fold(ops in prop::collection::vec(op(), 1..80), chunk in 1usize..7) {
        let mut session = Session::create(SessionHeader::new("p", 0));
        let mut model = Model::default();
        let mut synced = SurfaceManager::new();
        for op in &ops {
            let (event, expected) = candidate(op, session.next_seq(), &model);
            let Some(event) = event else { continue };
            let (events_before, surface_before) = (session.events().len(), session.surface().to_vec());
            let result = session.append(event);
            match expected {
                Some(after) => {
                    prop_assert!(result.is_ok(), "{op:?} refused: {:?}", result);
                    model = after;
                }
                None => {
                    prop_assert!(result.is_err(), "{op:?} accepted, model refuses");
                    prop_assert_eq!(session.events().len(), events_before);
                    prop_assert_eq!(session.surface(), surface_before.as_slice());
                }
            }
            prop_assert_eq!(session.surface().to_vec(), model.seqs());
            // An incremental manager following the log in chunks agrees.
            if session.events().len().is_multiple_of(chunk) {
                synced.sync(session.events()).unwrap();
                prop_assert_eq!(synced.seqs(), session.surface());
            }
        }
        synced.sync(session.events()).unwrap();
        prop_assert_eq!(synced.seqs(), session.surface());
        let folded = SurfaceManager::fold(session.events()).unwrap();
        prop_assert_eq!(folded.seqs(), session.surface());
        // And seeding a fresh session from the log gives the same surface.
        let (header, events) = session.into_parts();
        let seeded = Session::from_log(header, events).unwrap();
        prop_assert_eq!(seeded.surface().to_vec(), model.seqs());
    }

    #[test]
    fn batches_commit_whole_or_not_at_all(ops in prop::collection::vec(op(), 1..40), split in 0usize..40) {
        // Apply a prefix one by one, then the rest as one batch: the batch is
        // accepted exactly when every event in it would be, in order.
        let mut single = Session::create(SessionHeader::new("p", 0));
        let mut model = Model::default();
        let mut batch = Vec::new();
        let mut all_ok = true;
        let mut batch_model = None;
        for (i, op) in ops.iter().enumerate() {
            let next = single.next_seq() + batch.len() as u64;
            let current = batch_model.clone().unwrap_or_else(|| model.clone());
            let (event, expected) = candidate(op, next, &current);
            let Some(event) = event else { continue };
            if i < split {
                if let Some(after) = expected { single.append(event).unwrap(); model = after; }
            } else {
                match expected {
                    Some(after) => batch_model = Some(after),
                    None => all_ok = false,
                }
                batch.push(event);
                if !all_ok { break; }
            }
        }
        let before = (single.events().len(), single.surface().to_vec());
        let result = single.append_batch_with(batch, |_| Ok::<(), ()>(()));
        prop_assert_eq!(result.is_ok(), all_ok);
        if all_ok {
            prop_assert_eq!(single.surface().to_vec(), batch_model.unwrap_or(model).seqs());
        } else {
            prop_assert_eq!((single.events().len(), single.surface().to_vec()), before);
        }
    }

    #[test]
    fn cached_history_equals_a_fresh_derive(
        ops in prop::collection::vec(op(), 1..80),
        ask in prop::collection::vec(any::<bool>(), 80),
        fail in prop::collection::vec(prop::bool::weighted(0.2), 80),
    ) {
        // Events go in as one-event batches whose write fails now and then
        // (a rollback); the cached history is asked for at random points
        // and must always equal what derive_messages() parses afresh.
        let mut session = Session::create(SessionHeader::new("p", 0));
        let mut model = Model::default();
        let mut held = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let (event, expected) = candidate(op, session.next_seq(), &model);
            let Some(event) = event else { continue };
            let write_fails = fail[i];
            let result = session.append_batch_with(vec![event], |_| if write_fails { Err(()) } else { Ok(()) });
            if let (Ok(_), Some(after)) = (&result, expected) {
                model = after;
            }
            if ask[i] {
                let history = session.history();
                let fresh: Vec<(u64, Message)> =
                    session.derive_messages().into_iter().map(|d| (d.seq, d.message)).collect();
                let cached: Vec<(u64, Message)> = history.iter().map(|m| (m.seq, m.message.clone())).collect();
                prop_assert_eq!(&cached, &fresh);
                prop_assert_eq!(history.len(), fresh.len());
                prop_assert!(history.same_as(&session.history()), "asked again with nothing new: the same snapshot");
                // Held snapshots must not change under later appends.
                held.push((history, cached));
            }
        }
        for (history, then) in &held {
            let now: Vec<(u64, Message)> = history.iter().map(|m| (m.seq, m.message.clone())).collect();
            prop_assert_eq!(&now, then);
        }
    }
}
