//! A `DurableSession` over the in-memory store, stamped by its clock:
//! append without computing times, reopen, derive the messages.
//!
//! Run with `cargo run -p palimpsest-persistence --example durable_session`.

#![allow(clippy::print_stdout)]

use std::sync::Arc;

use palimpsest_core_session::payload::{Message, TurnEnd, TurnEndReason, TurnStart, UserMessage};
use palimpsest_core_session::{SessionHeader, SurfaceIntent};
use palimpsest_persistence::{Durability, DurableSession, ManualClock, MemoryStore, SessionStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let clock = Arc::new(ManualClock::new(1_767_225_600_000).with_tick(10));
    let mut session =
        DurableSession::create(store.clone(), SessionHeader::new("example", 0), Durability::default())?
            .with_clock(clock);
    session.append_log_now(TurnStart { turn: 1 })?;
    let message = Message::user("u1", "hello");
    session.append_surface_now(UserMessage { turn: Some(1), message }, SurfaceIntent::append())?;
    session.append_log_now(TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;

    let (reopened, report) = DurableSession::open(store, "example", Durability::default())?;
    println!("reopened {:?}: {} events", report, reopened.session().events().len());
    for event in reopened.session().events() {
        println!("{:>3} {} {}", event.seq(), event.time(), event.event_type());
    }
    for derived in reopened.session().derive_messages() {
        println!("{:?}: {:?}", derived.message.role, derived.message.content);
    }
    Ok(())
}
