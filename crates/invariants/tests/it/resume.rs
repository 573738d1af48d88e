//! RFC 0002 in dev mode: a session resumed from a checkpoint, with the
//! invariants guard restored from it, vetoes exactly what the guarded
//! session holding the whole log vetoes, with the same codes.
//!
//! The generator and the check are core-session's
//! (`tests/support/resume_ops.rs`), run here with an [`InvariantGuard`] on
//! every session: the whole one, the prefix a checkpoint is taken of, and
//! each resumed one.

use palimpsest_core_session::AppendGuard;
use palimpsest_invariants::InvariantGuard;
use proptest::prelude::*;

#[path = "../../../core-session/tests/support/resume_ops.rs"]
mod resume_ops;

fn guard() -> Option<Box<dyn AppendGuard>> {
    Some(Box::new(InvariantGuard::new()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_resumed_guarded_session_vetoes_as_the_whole_log(case in resume_ops::case()) {
        resume_ops::check_case(case, guard)?;
    }
}
