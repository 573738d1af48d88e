//! The root README's example of using `core-session` from another crate,
//! compiled and run here so it cannot rot.
//!
//! The code between the `ANCHOR` lines is what README.md shows;
//! `readme_shows_this_example` fails if the two drift apart.

// ANCHOR: readme
use palimpsest_core_session::payload::{Block, Message, Role, Source, TurnStart, UserMessage};
use palimpsest_core_session::{Session, SessionHeader, SurfaceIntent};

fn user(id: &str, text: &str, source: Source) -> UserMessage {
    let message = Message { id: id.into(), role: Role::User, content: vec![Block::text(text)], source };
    UserMessage { turn: None, message }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut session = Session::create(SessionHeader::new("readme", 0));
    session.append_log(1, TurnStart { turn: 1 })?;
    let u1 = session.append_surface(2, user("u1", "hi", Source::User), SurfaceIntent::append())?;
    // Compaction: a summary takes u1's place on the surface; u1 stays in the log.
    let plugin = Source::Plugin { plugin: "compaction".into() };
    let summary = user("sum1", "The user said hi.", plugin.clone());
    let s = session.append_surface(3, summary, SurfaceIntent::replace(u1, u1, vec![u1]))?;
    assert_eq!(session.surface(), &[s]);
    assert_eq!(session.derive_messages()[0].message.id, "sum1");
    // A replace must cite every entry it shadows; if not, it is refused and nothing changes.
    let bad = session.append_surface(4, user("sum2", "-", plugin), SurfaceIntent::replace(s, s, vec![u1]));
    assert_eq!(bad.unwrap_err().code(), "replace-sources-incomplete");
    assert_eq!((session.events().len(), session.surface()), (3, &[s][..]));
    Ok(())
}
// ANCHOR_END: readme

#[test]
fn readme_example_runs() {
    main().unwrap();
}

#[test]
fn readme_shows_this_example() {
    let this = include_str!("readme_example.rs");
    let start = this.find("// ANCHOR: readme\n").unwrap() + "// ANCHOR: readme\n".len();
    let end = this.find("// ANCHOR_END: readme").unwrap();
    let example = &this[start..end];
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(&format!("```rust\n{example}```\n")),
        "README.md must show the example of crates/core-session/tests/readme_example.rs verbatim:\n{example}"
    );
}
