//! `AgentLoopBuilder::hold`: a loop holds its session on every store that
//! grants holds, so a second worker's loop cannot open it (`locked`, and
//! nothing written) until the first is dropped.

use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::{ScriptedProvider, ScriptedResponse, TurnInput, DEFAULT_HOLD_TTL};

use crate::common::*;

#[tokio::test]
async fn a_held_session_cannot_be_opened_by_a_second_worker_until_the_first_is_dropped() {
    for backend in backends() {
        let provider = Arc::new(ScriptedProvider::new([
            ScriptedResponse::reply("First answer."),
            ScriptedResponse::reply("Second answer."),
        ]));
        let kind = backend.kind;
        let mut first = builder(&provider)
            .hold("worker-a", DEFAULT_HOLD_TTL)
            .create(backend.store(), SID)
            .expect("create");
        let held = first.hold().cloned();
        assert_eq!(held.is_some(), kind != Kind::Memory, "{kind:?}: only the in-memory store grants no hold");
        first.run_turn(TurnInput::text("one")).await.expect("turn 1");
        let events = reload(&backend.store()).events().len();

        if kind != Kind::Memory {
            let refused = builder(&provider)
                .hold("worker-b", DEFAULT_HOLD_TTL)
                .open(backend.store(), SID)
                .map(|_| ())
                .expect_err("a second worker opens a held session");
            assert_eq!(refused.code(), "locked", "{kind:?}: {refused}");
            if kind == Kind::Sqlite {
                assert!(
                    refused.to_string().contains("worker-a") || format!("{refused:?}").contains("worker-a")
                );
            }
            assert_eq!(
                reload(&backend.store()).events().len(),
                events,
                "{kind:?}: the refusal wrote nothing"
            );
        }

        drop(first);
        let (mut second, _) = builder(&provider)
            .hold("worker-b", Duration::from_secs(5))
            .open(backend.store(), SID)
            .expect("open");
        assert_eq!(second.hold().map(|h| h.holder()), held.as_ref().map(|_| "worker-b"), "{kind:?}");
        second.run_turn(TurnInput::text("two")).await.expect("turn 2");
        assert!(
            reload(&backend.store()).events().len() > events,
            "{kind:?}: the second worker's turn is stored"
        );
    }
}
