//! Settings live in the log (contract section 1.3): the loop logs the
//! settings it is given, builds every request from the log's effective
//! settings, and a resumed session keeps them unless new ones are given.

use std::sync::Arc;

use palimpsest_core_agent_loop::{ScriptedProvider, ScriptedResponse, TurnInput};
use palimpsest_core_session::payload::{OfferedTool, Settings, Source};
use palimpsest_core_session::EventType;

use crate::common::*;

fn pirate() -> Settings {
    Settings {
        system_prompt: Some("You are a pirate.".into()),
        model: Some("pirate-model".into()),
        tools: Some(vec![OfferedTool {
            name: "read".into(),
            description: Some("Reads a file.".into()),
            parameters: Some(serde_json::json!({"type": "object"})),
            ..OfferedTool::default()
        }]),
        context_budget: Some(1000),
        ..Settings::default()
    }
}

fn settings_seqs(agent: &palimpsest_core_agent_loop::AgentLoop) -> Vec<u64> {
    let events = agent.session().events();
    events.iter().filter(|e| *e.event_type() == EventType::SessionSettings).map(|e| e.seq()).collect()
}

#[tokio::test]
async fn settings_are_logged_on_create_and_every_request_is_made_with_them() {
    let backend = Backend::new(Kind::Jsonl);
    let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::reply("Arr.")]));
    let mut agent = builder(&provider).settings(pirate()).create(backend.store(), SID).expect("create");
    assert_eq!(settings_seqs(&agent), [0], "the settings are the session's first event");
    agent.run_turn(TurnInput::text("hello")).await.expect("turn");

    let request = provider.last_request().expect("a request");
    assert_eq!(request.system.as_deref(), Some("You are a pirate."), "the log's prompt, not the config's");
    assert_eq!(request.model.as_deref(), Some("pirate-model"));
    let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["read"], "the tools the settings offer, not the whole registry");
    let message = agent.session().derive_messages().pop().expect("the answer").message;
    assert_eq!(message.source, Source::Model { provider: "scripted".into(), model: "pirate-model".into() });
    assert_eq!(reload(&backend.store()).settings(), pirate());
}

#[tokio::test]
async fn a_resumed_session_keeps_its_logged_settings_and_logs_changed_ones() {
    let backend = Backend::new(Kind::Sqlite);
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::reply("Arr."),
        ScriptedResponse::reply("Arr again."),
        ScriptedResponse::reply("Aye."),
    ]));
    {
        let mut agent = builder(&provider).settings(pirate()).create(backend.store(), SID).expect("create");
        agent.run_turn(TurnInput::text("one")).await.expect("turn 1");
    }
    {
        // No settings given: the logged ones are used, nothing is appended.
        let (mut agent, _) =
            resumed_builder(&provider, T0 + 1000, "r").open(backend.store(), SID).expect("open");
        let before = agent.session().events().len();
        // The same settings again change nothing either.
        assert_eq!(agent.set_settings(pirate()).expect("same settings"), None);
        assert_eq!(agent.session().events().len(), before);
        agent.run_turn(TurnInput::text("two")).await.expect("turn 2");
        let request = provider.last_request().expect("a request");
        assert_eq!(request.system.as_deref(), Some("You are a pirate."));
        assert_eq!(request.model.as_deref(), Some("pirate-model"));
        assert_eq!(settings_seqs(&agent), [0]);
    }
    // Other settings: logged whole, after the last turn and before the next.
    let plain = Settings { model: Some("plain-model".into()), ..Settings::default() };
    let (mut agent, _) = resumed_builder(&provider, T0 + 2000, "s")
        .settings(plain.clone())
        .open(backend.store(), SID)
        .expect("open");
    let seqs = settings_seqs(&agent);
    assert_eq!(seqs.len(), 2);
    let last = agent.session().event(seqs[1] - 1).expect("the event before");
    assert_eq!(*last.event_type(), EventType::TurnEnd);
    agent.run_turn(TurnInput::text("three")).await.expect("turn 3");
    let request = provider.last_request().expect("a request");
    assert_eq!(request.model.as_deref(), Some("plain-model"));
    assert_eq!(
        request.system.as_deref(),
        Some("You are a test agent."),
        "a key the settings do not state falls back to the loop's config"
    );
    assert_eq!(reload(&backend.store()).settings(), plain);
}

#[tokio::test]
async fn new_settings_after_a_crash_mid_step_come_after_the_repair() {
    let backend = Backend::new(Kind::Memory);
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().text(0, "Half an ans").hang(),
        ScriptedResponse::reply("Done."),
    ]));
    {
        let mut agent = builder(&provider).settings(pirate()).create(backend.store(), SID).expect("create");
        let turn = agent.run_turn(TurnInput::text("one"));
        // The stream hangs: give up on the turn, as a crash would.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(50), turn).await;
    }
    let plain = Settings { model: Some("plain-model".into()), ..Settings::default() };
    // Dev mode is on: a session/settings inside the open step would be vetoed.
    let (agent, report) = resumed_builder(&provider, T0 + 1000, "r")
        .settings(plain.clone())
        .open(backend.store(), SID)
        .expect("open");
    let repaired = report.repaired.expect("the open turn was repaired");
    assert_eq!(settings_seqs(&agent).last(), Some(&repaired.end), "settings follow the closers");
    assert_eq!(agent.settings(), plain);
}

/// New settings end a write between turns: they are synced, so the store
/// looks at its files afresh before the next turn's first append. (A JSONL
/// writer whose last write was unsynced settings appended the next turn,
/// hours later, glued to a line another program had cut.)
#[tokio::test]
async fn new_settings_are_synced_so_the_next_turn_checks_the_file_first() {
    let backend = Backend::new(Kind::Jsonl);
    let provider =
        Arc::new(ScriptedProvider::new([ScriptedResponse::reply("One."), ScriptedResponse::reply("Two.")]));
    let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
    agent.run_turn(TurnInput::text("hello")).await.expect("turn 1");
    assert!(agent.set_settings(pirate()).expect("settings").is_some());
    // Another program takes the last line's newline off, behind the lock.
    let file = std::fs::read_dir(backend.jsonl_dir())
        .expect("the store")
        .map(|e| e.expect("an entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("the session file");
    let mut bytes = std::fs::read(&file).expect("read");
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&file, &bytes).expect("write");
    agent.run_turn(TurnInput::text("again")).await.expect("turn 2");
    drop(agent);
    let stored = backend.store().load(SID).expect("the log reads whole");
    let types: Vec<String> = stored.events.iter().map(|e| e.event_type().to_string()).collect();
    assert_eq!(types.iter().filter(|t| *t == "turn/end").count(), 2, "{types:?}");
}
