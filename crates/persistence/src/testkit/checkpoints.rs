//! The checkpoint checks of the contract kit: a saved checkpoint
//! ([`SessionStore::save_checkpoint`](crate::SessionStore::save_checkpoint))
//! is what [`load_resumable`](crate::SessionStore::load_resumable) returns,
//! with only the events after it, and a [`DurableSession`] opened from it is
//! the session a whole load gives; a checkpoint that does not match the log
//! (of another session, from before the session was re-created, damaged)
//! is ignored, every event returned.
//!
//! A store that keeps no checkpoints (`save_checkpoint` returns
//! `Ok(false)`) skips them.

use std::sync::Arc;

use palimpsest_core_session::{Checkpoint, Event, Session, SessionHeader};

use super::{append, assert_same_events, header, must, sample_events, shared, ticks, Outcome, StoreFactory};
use crate::{Durability, DurableSession, SessionStore};

const KEEPS_NO_CHECKPOINTS: &str =
    "the store keeps no checkpoints (`SessionStore::save_checkpoint` returned `Ok(false)`)";

/// Where the sample log is cut for a checkpoint: after its first turn,
/// with messages on the surface and the settings in effect.
const CUT: usize = 20;

/// The session a whole log gives, checked by every rule.
#[track_caller]
fn whole(header: &SessionHeader, events: &[Event]) -> Session {
    Session::from_log(header.clone(), events.to_vec())
        .unwrap_or_else(|e| panic!("testkit bug: the sample log is refused: [{}] {e}", e.code()))
}

/// A checkpoint of `events` under `header`, as a writer takes it.
fn checkpoint_of(header: &SessionHeader, events: &[Event]) -> Checkpoint {
    whole(header, events).checkpoint()
}

/// Saves `checkpoint` of session `id`: `false` when the store keeps none.
#[track_caller]
fn save(store: &dyn SessionStore, id: &str, checkpoint: &Checkpoint) -> bool {
    must(store.save_checkpoint(id, checkpoint), &format!("save_checkpoint of {id:?}"))
}

/// `opened` is the session `expected` is: surface, derived messages and
/// history, settings, next seq and time, turn state and its own checkpoint.
#[track_caller]
fn assert_same_session(opened: &Session, expected: &Session, what: &str) {
    assert_eq!(opened.header(), expected.header(), "{what}: header");
    assert_eq!(opened.surface(), expected.surface(), "{what}: surface");
    assert_eq!(opened.next_seq(), expected.next_seq(), "{what}: next_seq");
    assert_eq!(opened.last_time(), expected.last_time(), "{what}: last_time");
    assert_eq!(opened.settings(), expected.settings(), "{what}: settings");
    assert_eq!(opened.settings_seq(), expected.settings_seq(), "{what}: settings_seq");
    assert_eq!(opened.last_turn(), expected.last_turn(), "{what}: last_turn");
    assert_eq!(
        format!("{:?}", opened.derive_messages()),
        format!("{:?}", expected.derive_messages()),
        "{what}: derived messages"
    );
    assert_eq!(format!("{:?}", opened.history()), format!("{:?}", expected.history()), "{what}: history");
    assert_eq!(opened.checkpoint(), expected.checkpoint(), "{what}: a checkpoint of the opened session");
}

/// Opens `id` through [`DurableSession::resume`] and checks it is the whole
/// log's session.
#[track_caller]
fn assert_opens_as_whole(store: &Arc<dyn SessionStore>, h: &SessionHeader, events: &[Event], what: &str) {
    let (opened, report) = DurableSession::resume(store.clone(), &h.id, Durability::default())
        .unwrap_or_else(|e| panic!("{what}: DurableSession::resume: [{}] {e}", e.code()));
    assert_eq!(report, Default::default(), "{what}: the open reported something on a clean log");
    assert_same_session(opened.session(), &whole(h, events), what);
}

/// `load_resumable` of `h.id` found no checkpoint and returned every event.
#[track_caller]
fn assert_ignored(store: &Arc<dyn SessionStore>, h: &SessionHeader, events: &[Event], what: &str) {
    let r = must(store.load_resumable(&h.id), &format!("{what}: load_resumable"));
    assert_eq!(&r.header, h, "{what}: header");
    if let Some(c) = &r.checkpoint {
        panic!("{what}: a checkpoint that does not match the log was returned (log_len {})", c.log_len());
    }
    assert_same_events(&r.tail, events, &format!("{what}: with no checkpoint, every event"));
    assert_opens_as_whole(store, h, events, what);
}

/// A saved checkpoint is used: `load_resumable` returns it with only the
/// events after it (none right after the save, the later ones once the log
/// grew), and a [`DurableSession`] opened then is the whole log's session,
/// holding less than the log. The opened session goes on appending, and
/// its own checkpoint replaces the first one.
pub fn a_saved_checkpoint_is_used_and_opens_the_same_session(factory: &dyn StoreFactory) -> Outcome {
    let store = shared(factory);
    let sample = sample_events();
    let h = header("kit-ckpt-used");
    must(store.create_with_events(&h, &sample[..CUT]), "create_with_events");
    let checkpoint = checkpoint_of(&h, &sample[..CUT]);
    if !save(&*store, &h.id, &checkpoint) {
        return Outcome::Skipped(KEEPS_NO_CHECKPOINTS);
    }
    let r = must(store.load_resumable(&h.id), "load_resumable right after the save");
    assert_eq!(r.header, h, "load_resumable: header");
    assert_eq!(r.checkpoint.as_ref(), Some(&checkpoint), "load_resumable: the saved checkpoint");
    assert!(r.tail.is_empty(), "load_resumable: no event follows the checkpoint, got {}", r.tail.len());
    assert_eq!(r.report, Default::default(), "load_resumable: report");

    let (mut opened, _) = DurableSession::resume(store.clone(), &h.id, Durability::EveryAppend)
        .unwrap_or_else(|e| panic!("DurableSession::resume from a checkpoint: [{}] {e}", e.code()));
    assert_same_session(opened.session(), &whole(&h, &sample[..CUT]), "opened from the checkpoint");
    assert!(
        opened.session().resident().len() < CUT,
        "a session opened from a checkpoint holds the surface and settings events, not the log ({} of {CUT})",
        opened.session().resident().len()
    );
    for event in &sample[CUT..] {
        opened.append(event.clone()).unwrap_or_else(|e| {
            panic!("append seq {} to the resumed session: [{}] {e}", event.seq(), e.code())
        });
    }
    assert_same_events(&must(store.load(&h.id), "load after the appends").events, &sample, "the whole log");
    assert_same_session(opened.session(), &whole(&h, &sample), "the resumed session after its appends");

    assert!(must(opened.save_checkpoint(), "DurableSession::save_checkpoint"), "the store keeps checkpoints");
    let r = must(store.load_resumable(&h.id), "load_resumable after the second save");
    assert_eq!(
        r.checkpoint.map(|c| c.log_len()),
        Some(sample.len() as u64),
        "the later checkpoint replaced it"
    );
    assert!(r.tail.is_empty(), "nothing follows the later checkpoint");
    assert_opens_as_whole(&store, &h, &sample, "opened from the later checkpoint");
    Outcome::Ran
}

/// A checkpoint the log has grown past still gives the right tail: the
/// events after it, in order, with the same text. One that claims more
/// events than the log holds is refused on save or never returned.
pub fn a_stale_checkpoint_gives_the_events_after_it(factory: &dyn StoreFactory) -> Outcome {
    let store = shared(factory);
    let sample = sample_events();
    let h = header("kit-ckpt-stale");
    must(store.create_with_events(&h, &sample[..CUT]), "create_with_events");
    let checkpoint = checkpoint_of(&h, &sample[..CUT]);
    if !save(&*store, &h.id, &checkpoint) {
        return Outcome::Skipped(KEEPS_NO_CHECKPOINTS);
    }
    append(&*store, &h.id, &sample[CUT..CUT + 3]);
    append(&*store, &h.id, &sample[CUT + 3..]);
    let r = must(store.load_resumable(&h.id), "load_resumable of a grown log");
    assert_eq!(r.checkpoint.as_ref(), Some(&checkpoint), "the stale checkpoint still matches");
    assert_same_events(&r.tail, &sample[CUT..], "the events after a stale checkpoint");
    assert_opens_as_whole(&store, &h, &sample, "opened from a stale checkpoint");

    // Ahead of the log: a checkpoint of the whole sample over a shorter log.
    let short = header("kit-ckpt-ahead");
    must(store.create_with_events(&short, &sample[..CUT]), "create_with_events");
    let ahead = checkpoint_of(&short, &sample);
    // Refused (an error) or kept out of sight: either way never returned.
    let _ = store.save_checkpoint(&short.id, &ahead);
    let r = must(store.load_resumable(&short.id), "load_resumable under a checkpoint ahead of the log");
    assert!(
        r.checkpoint.as_ref().is_none_or(|c| c.log_len() <= CUT as u64),
        "a checkpoint of {} events was returned for a log of {CUT}",
        sample.len()
    );
    assert_opens_as_whole(&store, &short, &sample[..CUT], "opened under a checkpoint ahead of the log");
    Outcome::Ran
}

/// A checkpoint that does not match the log is ignored, every event
/// returned and the session opened whole: one of another session saved
/// under this id, one of the session before it was deleted and re-created
/// with another log (a fork that reuses an id) or another header, and one
/// damaged in storage (through [`StoreFactory::damage_checkpoint`], where
/// the backend can). A save may refuse the first two; it must never make
/// them count.
pub fn checkpoints_that_do_not_match_are_ignored(factory: &dyn StoreFactory) -> Outcome {
    let store = shared(factory);
    let sample = sample_events();

    // Another session's checkpoint, of the same events.
    let probe = header("kit-ckpt-probe");
    must(store.create_with_events(&probe, &sample[..CUT]), "create_with_events");
    if !save(&*store, &probe.id, &checkpoint_of(&probe, &sample[..CUT])) {
        return Outcome::Skipped(KEEPS_NO_CHECKPOINTS);
    }
    let h = header("kit-ckpt-mine");
    must(store.create_with_events(&h, &sample), "create_with_events");
    let other = checkpoint_of(&header("kit-ckpt-theirs"), &sample);
    let _ = store.save_checkpoint(&h.id, &other);
    assert_ignored(&store, &h, &sample, "a checkpoint of another session");

    // Before a fork: the session re-created with the same header, another log.
    let f = header("kit-ckpt-forked");
    must(store.create_with_events(&f, &sample[..CUT]), "create_with_events");
    let before = checkpoint_of(&f, &sample[..CUT]);
    assert!(save(&*store, &f.id, &before), "the store kept a checkpoint before");
    must(store.delete(&f.id), "delete");
    let forked = ticks(0..CUT as u64 + 2);
    must(store.create_with_events(&f, &forked), "re-create with another log");
    assert_ignored(&store, &f, &forked, "after a delete, the checkpoint is gone");
    let _ = store.save_checkpoint(&f.id, &before);
    assert_ignored(&store, &f, &forked, "a checkpoint from before the session was re-created");

    // Another header, the same events.
    let g = header("kit-ckpt-header");
    let g_later = SessionHeader { created_at: g.created_at + 1, ..g.clone() };
    must(store.create_with_events(&g, &sample[..CUT]), "create_with_events");
    let under_g = checkpoint_of(&g, &sample[..CUT]);
    must(store.delete(&g.id), "delete");
    must(store.create_with_events(&g_later, &sample[..CUT]), "re-create under another header");
    let _ = store.save_checkpoint(&g.id, &under_g);
    assert_ignored(&store, &g_later, &sample[..CUT], "a checkpoint taken under another header");

    // Damaged in storage.
    let d = header("kit-ckpt-damaged");
    must(store.create_with_events(&d, &sample[..CUT]), "create_with_events");
    assert!(save(&*store, &d.id, &checkpoint_of(&d, &sample[..CUT])), "the store kept a checkpoint before");
    append(&*store, &d.id, &sample[CUT..]);
    if factory.damage_checkpoint(&d.id) {
        assert_ignored(&store, &d, &sample, "a damaged checkpoint");
    } else {
        // Its stand-in: a checkpoint whose last event is not the stored one.
        let mut wrong = sample[..CUT].to_vec();
        wrong[CUT - 1] = ticks(CUT as u64 - 1..CUT as u64).remove(0);
        let _ = store.save_checkpoint(&d.id, &checkpoint_of(&d, &wrong));
        assert_ignored(&store, &d, &sample, "a checkpoint whose last event is not the stored one");
    }
    Outcome::Ran
}
