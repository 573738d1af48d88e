//! Dev mode: the structural invariants (contract section 2a) checked on
//! every append, so a loop or plugin bug stops at the first bad event
//! instead of writing a log that providers reject turns later.
//!
//! [`DevMode`] is the invariants crate's switch, re-exported: `Auto` (the
//! default of [`DevMode::from_env`] when `PALIMPSEST_DEV_MODE` is unset) is
//! on in debug builds and off in release builds.

use palimpsest_core_session::AppendGuard;
pub use palimpsest_invariants::DevMode;

/// The guard to install for `mode`: the one place the loop meets the
/// invariants crate.
pub(crate) fn dev_guard(mode: DevMode) -> Option<Box<dyn AppendGuard>> {
    mode.guard()
}
