//! A JSONL store in a temporary directory: create a session, append, reopen
//! the store, derive the messages.
//!
//! Run with `cargo run -p palimpsest-persistence-jsonl --example jsonl_store`.

#![allow(clippy::print_stdout)]

use std::sync::Arc;

use palimpsest_core_session::payload::{Message, TurnStart, UserMessage};
use palimpsest_core_session::{SessionHeader, SurfaceIntent};
use palimpsest_persistence::{Durability, DurableSession, ManualClock, SessionStore};
use palimpsest_persistence_jsonl::JsonlStore;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    {
        let store: Arc<dyn SessionStore> = Arc::new(JsonlStore::open(dir.path())?);
        let mut session =
            DurableSession::create(store, SessionHeader::new("example", 0), Durability::EveryAppend)?
                .with_clock(Arc::new(ManualClock::new(1_767_225_600_000).with_tick(1)));
        session.append_log_now(TurnStart { turn: 1 })?;
        let message = UserMessage { turn: Some(1), message: Message::user("u1", "hello") };
        session.append_surface_now(message, SurfaceIntent::append())?;
    }
    // A new store over the same directory: what was written is there.
    let store: Arc<dyn SessionStore> = Arc::new(JsonlStore::open(dir.path())?);
    let (session, report) = DurableSession::open(store, "example", Durability::EveryAppend)?;
    println!("reopened: {report:?}, {} events", session.session().events().len());
    for entry in std::fs::read_dir(dir.path())? {
        println!("file: {}", entry?.file_name().to_string_lossy());
    }
    for derived in session.session().derive_messages() {
        println!("{:?}: {:?}", derived.message.role, derived.message.content);
    }
    Ok(())
}
