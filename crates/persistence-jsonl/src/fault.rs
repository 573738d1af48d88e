//! The fault-injection seam: I/O errors while writing, for this crate's
//! unit tests and (feature `testkit`) the contract kit's fault check.

/// A failure the next write or sync of a [`SessionFile`](crate::SessionFile) simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Write the first `after` bytes of the batch, then fail.
    Write { after: usize },
    /// Fail the `fdatasync`.
    #[cfg_attr(not(test), allow(dead_code))]
    Sync,
}
