//! Bounded resume through the loop (issue 18): the loop leaves a
//! checkpoint at every turn end, a later loop opens the session from it
//! (holding its surface and tail, not its log), and carries on exactly as
//! a loop over the whole log would: the same request, valid appends, and
//! a crash after the checkpoint repaired from the events it holds.

use std::sync::Arc;

use palimpsest_core_agent_loop::{ScriptedProvider, ScriptedResponse, TurnInput};
use palimpsest_core_session::Session;
use tokio::sync::Notify;

use crate::common::*;

fn script() -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "call-1", "read", &["{\"path\": \"a.txt\"}"]),
        ScriptedResponse::reply("It says hello."),
        ScriptedResponse::reply("Second answer."),
        ScriptedResponse::reply("Third answer."),
        ScriptedResponse::reply("Fourth answer."),
        ScriptedResponse::new().text(0, "Half an ans").hang(),
        ScriptedResponse::reply("Picking up again."),
    ]))
}

/// The session as a whole load sees it: every rule and invariant.
fn whole(backend: &Backend) -> Session {
    reload(&backend.store())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_resumes_from_the_checkpoint_of_the_last_turn_and_carries_on_as_a_whole_load_would() {
    for backend in backends().into_iter().filter(|b| b.kind != Kind::Memory) {
        let kind = backend.kind;
        let provider = script();
        {
            let mut agent = builder(&provider).create(backend.store(), SID).expect("create");
            for q in ["read a.txt", "two", "three"] {
                agent.run_turn(TurnInput::text(q)).await.expect("turn");
            }
        }
        let stored = whole(&backend);
        let resumable = backend.store().load_resumable(SID).expect("load_resumable");
        let checkpoint =
            resumable.checkpoint.unwrap_or_else(|| panic!("{kind:?}: no checkpoint after a turn end"));
        assert_eq!(checkpoint.log_len(), stored.next_seq(), "{kind:?}: the checkpoint covers the last turn");
        assert!(resumable.tail.is_empty(), "{kind:?}: nothing after the last turn end");

        // A second worker opens it from the checkpoint.
        let reached = Arc::new(Notify::new());
        {
            let (mut agent, report) = resumed_builder(&provider, T0 + 10_000, "r")
                .bounded_resume(true)
                .open(backend.store(), SID)
                .expect("open");
            assert_eq!(report.repaired, None);
            let session = agent.session();
            assert!(!session.is_complete(), "{kind:?}: the session was resumed, not loaded whole");
            assert!(
                session.resident().len() < stored.next_seq() as usize,
                "{kind:?}: it holds less than the log"
            );
            assert_eq!(session.derive_request().to_json(), stored.derive_request().to_json(), "{kind:?}");
            assert_eq!(agent.last_turn(), 3, "{kind:?}: the next turn is 4");
            // Turn 4 completes; turn 5 hangs mid-stream and the worker dies.
            agent.run_turn(TurnInput::text("four")).await.expect("turn 4");
            // Its checkpoint saved, the turn leaves memory: what a resumed
            // session holds stays its surface, however many turns it runs.
            let session = agent.session();
            let mut needed: Vec<u64> =
                session.surface().iter().copied().chain(session.settings_seq()).collect();
            needed.sort_unstable();
            let held: Vec<u64> = session.resident().iter().map(|e| e.seq()).collect();
            assert_eq!(held, needed, "{kind:?}: trimmed at the turn end");
            let notify = reached.clone();
            let turn5 = agent.run_turn(TurnInput::text("five"));
            tokio::select! {
                r = turn5 => panic!("{kind:?}: the hanging turn finished: {r:?}"),
                () = tokio::time::sleep(std::time::Duration::from_millis(200)) => notify.notify_one(),
            }
        }
        reached.notified().await;

        // A third worker: the open turn 5 is in the events after the
        // checkpoint of turn 4, and is repaired from them.
        let (mut agent, report) = resumed_builder(&provider, T0 + 20_000, "t")
            .bounded_resume(true)
            .open(backend.store(), SID)
            .expect("reopen");
        assert!(report.repaired.is_some(), "{kind:?}: the crashed turn is closed");
        assert!(!agent.session().is_complete(), "{kind:?}");
        agent.run_turn(TurnInput::text("six")).await.expect("turn 6");
        let after = whole(&backend);
        assert_eq!(agent.session().next_seq(), after.next_seq(), "{kind:?}");
        assert_eq!(
            agent.session().derive_request().to_json(),
            after.derive_request().to_json(),
            "{kind:?}: the resumed loop's request is the whole log's"
        );
    }
}
