//! A session in memory: append a turn, replace a message with a summary
//! (a hand-written compaction), derive what the model would be sent.
//!
//! Run with `cargo run -p palimpsest-core-session --example build_and_derive`.

#![allow(clippy::print_stdout)]

use palimpsest_core_session::payload::{Message, TurnEnd, TurnEndReason, TurnStart, UserMessage};
use palimpsest_core_session::{Session, SessionHeader, SurfaceIntent};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut session = Session::create(SessionHeader::new("example", 0));
    session.append_log(1, TurnStart { turn: 1 })?;
    let hello = UserMessage { turn: Some(1), message: Message::user("u1", "hello, a long message") };
    let u1 = session.append_surface(2, hello, SurfaceIntent::append())?;
    session.append_log(3, TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;

    // The summary replaces u1 on the surface and cites it; the log keeps both.
    let summary = UserMessage { turn: None, message: Message::user("s1", "(the user said hello)") };
    session.append_surface(4, summary, SurfaceIntent::replace(u1, u1, vec![u1]))?;

    println!("{} events in the log", session.events().len());
    for derived in session.derive_messages() {
        println!(
            "{:?}: {:?} from {:?}",
            derived.message.role, derived.message.content, derived.source_event_seqs
        );
    }
    Ok(())
}
