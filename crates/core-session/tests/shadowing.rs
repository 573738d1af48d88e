//! `Shadowing` keeps who shadowed whom as runs, not per event; following
//! the surface of a stream (`SurfaceManager::apply_accepted`) gives what
//! each replace took off. Over random logs (compactions over prunes over
//! compactions, ranges with entries left standing between them), both say
//! exactly what replaying the whole log per event says.

use std::collections::HashMap;

use palimpsest_core_session::explain::{shadow_map, Shadowing};
use palimpsest_core_session::{Session, SessionHeader, SurfaceManager};
use proptest::prelude::*;

#[path = "support/resume_ops.rs"]
#[allow(dead_code)]
mod resume_ops;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn runs_and_a_followed_surface_say_what_the_whole_log_says(
        ops in prop::collection::vec(resume_ops::op(), 0..160),
    ) {
        let mut session = Session::create(SessionHeader::new("s", 0));
        resume_ops::append_ops(&mut session, &ops);
        let events = session.events();
        let exact = shadow_map(events);
        let shadowing = Shadowing::of(events);

        // Every event that joined the surface: the same replace, the same chain.
        for e in events.iter().filter(|e| e.surface_op().is_some()) {
            let s = e.seq();
            prop_assert_eq!(shadowing.shadowed_by(s), exact.get(&s).copied(), "seq {}", s);
            let mut chain = Vec::new();
            let mut at = s;
            while let Some(&by) = exact.get(&at) {
                chain.push(by);
                at = by;
            }
            prop_assert_eq!(shadowing.chain(s), chain, "seq {}", s);
        }
        let mut replaces: Vec<u64> = exact.values().copied().collect();
        replaces.sort_unstable();
        replaces.dedup();
        prop_assert_eq!(shadowing.replaces(), &replaces[..]);
        prop_assert!(shadowing.runs() <= exact.len());

        // Following the surface event by event: what each replace took off.
        let mut followed = SurfaceManager::new();
        let mut took: HashMap<u64, u64> = HashMap::new();
        for e in events {
            for s in followed.apply_accepted(e) {
                took.insert(s, e.seq());
            }
        }
        prop_assert_eq!(took, exact);
        prop_assert_eq!(followed.seqs(), session.surface());
    }
}

#[test]
fn a_compaction_of_many_messages_is_one_run_and_a_prune_inside_it_keeps_its_own() {
    // Messages at 1, 3, 5, 7 (chunks between them never join); a prune at
    // 8 replaces 3; a compaction at 9 takes 1, 8, 5, 7 off.
    let mut s = Shadowing::default();
    s.record(8, &[3], &[1, 8, 5, 7]);
    s.record(9, &[1, 8, 5, 7], &[9]);
    assert_eq!(s.runs(), 3, "1-2 and 4-8 by 9 around 3 by 8");
    assert_eq!([1, 3, 5, 7, 8].map(|q| s.shadowed_by(q)), [Some(9), Some(8), Some(9), Some(9), Some(9)]);
    assert_eq!(s.chain(3), [8, 9]);
    // An entry left standing splits the run.
    let mut t = Shadowing::default();
    t.record(9, &[1, 5], &[3, 9]);
    assert_eq!((t.shadowed_by(1), t.shadowed_by(3), t.shadowed_by(5)), (Some(9), None, Some(9)));
}
