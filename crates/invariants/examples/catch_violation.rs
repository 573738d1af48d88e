//! The invariants checker over a log that breaks the turn structure: a
//! second `turn/start` while the first turn is open.
//!
//! Run with `cargo run -p palimpsest-invariants --example catch_violation`.

#![allow(clippy::print_stdout)]

use palimpsest_core_session::payload::{TurnEnd, TurnEndReason, TurnStart};
use palimpsest_core_session::Event;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let events = vec![
        Event::log(0, 1, TurnStart { turn: 1 })?,
        Event::log(1, 2, TurnStart { turn: 2 })?,
        Event::log(2, 3, TurnEnd { turn: 2, reason: TurnEndReason::Completed })?,
    ];
    let violations = palimpsest_invariants::check_log(&events);
    for violation in &violations {
        println!("{violation}");
    }
    if violations.is_empty() {
        return Err("the second turn/start should have been caught".into());
    }
    Ok(())
}
