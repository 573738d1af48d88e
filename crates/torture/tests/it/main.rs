//! The torture tests, as one binary: the crash and race tests re-run it as
//! their child processes (a child recognises itself by `PALIMPSEST_TORTURE_ROLE`).

mod common;
#[cfg(unix)]
mod crash;
mod hostile;
#[cfg(unix)]
mod kill_points;
mod oracles;
#[cfg(unix)]
mod races;
