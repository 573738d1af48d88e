//! Running one step's tool calls: which calls may run together, and a small
//! join that polls them on the loop's own task.
//!
//! Calls run on the loop's task (concurrently, not in parallel), so a tool
//! future needs no `'static` bound and cancelling the turn simply drops the
//! futures. A tool that does blocking or CPU-heavy work should move it to
//! `tokio::task::spawn_blocking` itself. A panicking tool is caught and
//! answered with a `TOOL_PANICKED` error result; the loop goes on.

use std::any::Any;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll};

use palimpsest_core_session::payload::Block;

use crate::codes;
use crate::provider::BoxFuture;
use crate::tool::ToolError;

/// One call's execution state.
pub(crate) enum Slot<'a> {
    /// Not started (its group has not run yet).
    Idle,
    /// Running.
    Running(BoxFuture<'a, Result<Vec<Block>, ToolError>>),
    /// Finished, result not yet appended.
    Done(Result<Vec<Block>, ToolError>),
    /// Its result is in the log.
    Flushed,
}

impl Slot<'_> {
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self, Slot::Done(_) | Slot::Flushed)
    }
}

/// Splits calls into groups run one after another: consecutive concurrent
/// calls share a group; a call that is not concurrent is a group alone.
pub(crate) fn groups(concurrent: &[bool]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, &c) in concurrent.iter().enumerate() {
        match out.last_mut() {
            Some(g) if c && concurrent[g.start] => g.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Polls every running slot once. Ready when at least one finished.
pub(crate) fn poll_running(slots: &mut [Slot<'_>], cx: &mut Context<'_>) -> Poll<()> {
    let mut progressed = false;
    for slot in slots.iter_mut() {
        let Slot::Running(fut) = slot else { continue };
        let finished = match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => continue,
            Ok(Poll::Ready(result)) => result,
            Err(payload) => Err(ToolError::new(
                "ToolPanicked",
                codes::TOOL_PANICKED,
                format!("the tool panicked: {}", panic_message(payload.as_ref())),
            )),
        };
        *slot = Slot::Done(finished);
        progressed = true;
    }
    if progressed {
        Poll::Ready(())
    } else {
        Poll::Pending
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_split_at_exclusive_calls() {
        assert_eq!(groups(&[]), Vec::<Range<usize>>::new());
        assert_eq!(
            groups(&[true, true, false, true, false, false, true, true]),
            [0..2, 2..3, 3..4, 4..5, 5..6, 6..8]
        );
    }

    #[test]
    fn a_panicking_future_becomes_an_error() {
        let mut slots = vec![
            Slot::Running(Box::pin(async { panic!("boom") })),
            Slot::Running(Box::pin(std::future::pending())),
        ];
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(poll_running(&mut slots, &mut cx).is_ready());
        let Slot::Done(Err(e)) = &slots[0] else { panic!("slot 0 should be done with an error") };
        assert_eq!((e.code.as_str(), e.message.as_str()), (codes::TOOL_PANICKED, "the tool panicked: boom"));
        assert!(matches!(slots[1], Slot::Running(_)));
        assert!(poll_running(&mut slots, &mut cx).is_pending());
    }
}
