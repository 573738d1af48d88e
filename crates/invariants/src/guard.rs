//! [`InvariantGuard`]: the checker as an [`AppendGuard`], and [`DevMode`],
//! which decides whether a session gets one.

use std::sync::Mutex;

use palimpsest_core_session::{AppendGuard, Event, GuardViolation, SessionView, TurnState};

use crate::checker::{Checker, Fact};
use crate::Violation;

/// The section-2a checker as an [`AppendGuard`]: installed on a `Session`, it
/// vetoes the first append that breaks an invariant, so the developer finds a
/// broken history at the append that broke it.
///
/// [`check`](AppendGuard::check) reads the state and changes nothing;
/// [`committed`](AppendGuard::committed) folds the new event in
/// (O(1) apart from parsing it, O(surface) for a replace);
/// [`rebuild`](AppendGuard::rebuild) starts over from a whole session, and
/// [`restore`](AppendGuard::restore) from a session resumed from a
/// checkpoint (the brackets from the checkpoint, the tool exchanges from
/// the surface), so a resumed session in dev mode enforces every invariant
/// as the whole log does.
/// A vetoed append reaches the caller as
/// `AppendError::Vetoed { code, .. }` with one of [`CODES`](crate::CODES).
///
/// ```
/// use palimpsest_core_session::{payload::*, AppendError, Session, SessionHeader};
/// use palimpsest_invariants::InvariantGuard;
///
/// let mut session = Session::create(SessionHeader::new("s1", 0));
/// session.set_guard(Some(Box::new(InvariantGuard::new())));
/// session.append_log(1, TurnStart { turn: 1 })?;
/// let err = session.append_log(2, TurnStart { turn: 2 }).unwrap_err();
/// assert_eq!(err.code(), "turn-already-open");
/// assert!(matches!(err, AppendError::Vetoed { seq: 1, .. }));
/// assert_eq!(session.events().len(), 1); // the veto changed nothing
/// # Ok::<(), AppendError>(())
/// ```
#[derive(Debug, Default)]
pub struct InvariantGuard {
    state: Checker,
    /// The facts read by the last `check`, keyed by the candidate's seq and
    /// the address of its data (stable while the event moves into the log),
    /// so `committed` need not parse the same event again.
    checked: Mutex<Option<(u64, usize, Fact)>>,
}

impl Clone for InvariantGuard {
    fn clone(&self) -> InvariantGuard {
        InvariantGuard { state: self.state.clone(), checked: Mutex::new(None) }
    }
}

fn fact_key(event: &Event) -> (u64, usize) {
    (event.seq(), event.data().as_ptr() as usize)
}

impl InvariantGuard {
    /// A guard for an empty session. [`Session::set_guard`] and
    /// [`Session::from_log_guarded`] bring it up to date with their log.
    ///
    /// [`Session::set_guard`]: palimpsest_core_session::Session::set_guard
    /// [`Session::from_log_guarded`]: palimpsest_core_session::Session::from_log_guarded
    pub fn new() -> InvariantGuard {
        InvariantGuard::default()
    }

    /// Every violation `candidate` would commit if appended to `session`,
    /// changing nothing. [`AppendGuard::check`] reports the first of these.
    pub fn violations(&self, session: SessionView<'_>, candidate: &Event) -> Vec<Violation> {
        self.state.check(session, candidate)
    }
}

impl AppendGuard for InvariantGuard {
    fn check(&self, session: SessionView<'_>, candidate: &Event) -> Result<(), GuardViolation> {
        let fact = Fact::of(candidate);
        let violations = self.state.check_fact(session, candidate, &fact);
        let (seq, addr) = fact_key(candidate);
        *self.checked.lock().unwrap_or_else(|p| p.into_inner()) = Some((seq, addr, fact));
        match violations.into_iter().next() {
            None => Ok(()),
            Some(v) => {
                tracing::debug!(
                    session_id = %session.header.id,
                    seq = v.seq,
                    code = v.code,
                    "invariant violated; append vetoed"
                );
                Err(GuardViolation { code: v.code.to_owned(), message: v.message })
            }
        }
    }

    fn committed(&mut self, session: SessionView<'_>, event: &Event) {
        let cached = self.checked.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        match cached {
            Some((seq, addr, fact)) if (seq, addr) == fact_key(event) => {
                self.state.commit_fact(session, event, &fact)
            }
            _ => self.state.commit(session, event),
        }
    }

    fn rebuild(&mut self, session: SessionView<'_>) {
        self.state = Checker::rebuild(session);
        *self.checked.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn restore(&mut self, session: SessionView<'_>, turns: &TurnState) {
        self.state = Checker::restore(session, turns);
        *self.checked.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The environment variable [`DevMode::from_env`] reads.
pub const DEV_MODE_ENV: &str = "PALIMPSEST_DEV_MODE";

/// Whether sessions run with the invariants guard ("dev mode"): a structural
/// violation then stops the append that causes it instead of surfacing turns
/// later as a provider error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevMode {
    /// On in debug builds (`cfg!(debug_assertions)`), off in release builds.
    #[default]
    Auto,
    /// Always on.
    On,
    /// Always off.
    Off,
}

impl DevMode {
    /// Reads [`DEV_MODE_ENV`] (`PALIMPSEST_DEV_MODE`): `1` or `on` is
    /// [`DevMode::On`], `0` or `off` is [`DevMode::Off`] (case-insensitive);
    /// unset is [`DevMode::Auto`], and so is any other value (with a warning
    /// event).
    pub fn from_env() -> DevMode {
        let value = std::env::var(DEV_MODE_ENV).ok();
        DevMode::parse(value.as_deref())
    }

    fn parse(value: Option<&str>) -> DevMode {
        let Some(value) = value else { return DevMode::Auto };
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "on" => DevMode::On,
            "0" | "off" => DevMode::Off,
            _ => {
                tracing::warn!(
                    variable = DEV_MODE_ENV,
                    value,
                    "unrecognised dev-mode setting (expected 1, on, 0 or off); using auto"
                );
                DevMode::Auto
            }
        }
    }

    /// Whether the guard is on.
    pub fn enabled(self) -> bool {
        match self {
            DevMode::Auto => cfg!(debug_assertions),
            DevMode::On => true,
            DevMode::Off => false,
        }
    }

    /// A fresh [`InvariantGuard`] when enabled, for `Session::set_guard` or
    /// `Session::from_log_guarded`.
    pub fn guard(self) -> Option<Box<dyn AppendGuard>> {
        if self.enabled() {
            Some(Box::new(InvariantGuard::new()))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_the_documented_values() {
        for (value, mode) in [
            (None, DevMode::Auto),
            (Some("1"), DevMode::On),
            (Some("on"), DevMode::On),
            (Some(" ON "), DevMode::On),
            (Some("0"), DevMode::Off),
            (Some("off"), DevMode::Off),
            (Some("Off"), DevMode::Off),
            (Some("yes"), DevMode::Auto),
            (Some(""), DevMode::Auto),
        ] {
            assert_eq!(DevMode::parse(value), mode, "{value:?}");
        }
    }

    #[test]
    fn enabled_and_guard_follow_the_mode() {
        assert!(DevMode::On.enabled());
        assert!(!DevMode::Off.enabled());
        assert_eq!(DevMode::Auto.enabled(), cfg!(debug_assertions));
        assert!(DevMode::On.guard().is_some());
        assert!(DevMode::Off.guard().is_none());
        assert_eq!(DevMode::Auto.guard().is_some(), cfg!(debug_assertions));
    }

    #[test]
    fn from_env_reads_the_variable() {
        // The only test in this binary that touches the variable.
        std::env::set_var(DEV_MODE_ENV, "off");
        assert_eq!(DevMode::from_env(), DevMode::Off);
        std::env::set_var(DEV_MODE_ENV, "1");
        assert_eq!(DevMode::from_env(), DevMode::On);
        std::env::remove_var(DEV_MODE_ENV);
        assert_eq!(DevMode::from_env(), DevMode::Auto);
    }
}
