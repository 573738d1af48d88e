//! A PostgreSQL store in a fresh schema: create a session, append, reopen,
//! derive; then drop the schema. Needs the server of
//! `PALIMPSEST_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! Run with `cargo run -p palimpsest-persistence-postgres --example pg_store`.

#![allow(clippy::print_stdout)]

use std::sync::Arc;

use palimpsest_core_session::payload::{Message, TurnStart, UserMessage};
use palimpsest_core_session::{SessionHeader, SurfaceIntent};
use palimpsest_persistence::{Durability, DurableSession, SessionStore};
use palimpsest_persistence_postgres::{PgOptions, PgStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("PALIMPSEST_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("example_{}", std::process::id());
    let result = run(&url, &schema);
    let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
    client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))?;
    println!("dropped schema {schema}");
    result
}

fn run(url: &str, schema: &str) -> Result<(), Box<dyn std::error::Error>> {
    let options = || PgOptions { schema: Some(schema.to_owned()), ..PgOptions::default() };
    {
        let store: Arc<dyn SessionStore> = Arc::new(PgStore::connect_with(url, options())?);
        let mut session =
            DurableSession::create(store, SessionHeader::new("example", 0), Durability::EveryAppend)?;
        session.append_log_now(TurnStart { turn: 1 })?;
        let message = UserMessage { turn: Some(1), message: Message::user("u1", "hello") };
        session.append_surface_now(message, SurfaceIntent::append())?;
    }
    let store: Arc<dyn SessionStore> = Arc::new(PgStore::connect_with(url, options())?);
    let (session, _) = DurableSession::open(store, "example", Durability::EveryAppend)?;
    println!("reopened from schema {schema}: {} events", session.session().events().len());
    for derived in session.session().derive_messages() {
        println!("{:?}: {:?}", derived.message.role, derived.message.content);
    }
    Ok(())
}
