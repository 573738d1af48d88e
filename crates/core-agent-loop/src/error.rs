//! [`LoopError`]: why a loop operation returned `Err` instead of ending the
//! turn in the log.
//!
//! Failures the log can record (a provider error, a tool error, a failed
//! plugin, cancellation, a step limit) end the turn with a `turn/end` reason
//! and `run_turn` returns `Ok`. A `LoopError` means the log itself could not
//! be written as intended: the store failed, or an append was refused (a
//! bug, or an invariant caught in dev mode). The turn may then be left open
//! in the store; the next turn (or the next open) appends the repair
//! closers first.

use palimpsest_persistence::DurableError;

/// A loop operation failed to write the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The session refused an append or the store failed.
    #[error("session {session_id:?}")]
    Session {
        /// The session.
        session_id: String,
        /// What failed (boxed: it is large, and errors are the cold path).
        #[source]
        source: Box<DurableError>,
    },
    /// `plugin-append-forbidden`: a plugin tried an append reserved to the
    /// loop (an appended `assistant/message` or `tool/result`).
    #[error("plugin-append-forbidden: plugin {plugin:?} may not append {what}")]
    PluginAppendForbidden {
        /// The plugin's name.
        plugin: String,
        /// What it tried.
        what: String,
    },
}

impl LoopError {
    /// The stable code: the contract code of a refused append (e.g.
    /// `replace-start-missing`, or an invariant code in dev mode), the
    /// store's code (e.g. `io`), or `plugin-append-forbidden`.
    pub fn code(&self) -> &str {
        match self {
            LoopError::Session { source, .. } => source.code(),
            LoopError::PluginAppendForbidden { .. } => "plugin-append-forbidden",
        }
    }

    /// What was wrong, without the code (`Display` is the code, then this,
    /// for [`PluginAppendForbidden`](LoopError::PluginAppendForbidden); a
    /// [`Session`](LoopError::Session) error names the session and leaves
    /// the cause to its `source()`).
    ///
    /// ```
    /// use palimpsest_core_agent_loop::LoopError;
    ///
    /// let e = LoopError::PluginAppendForbidden { plugin: "p".into(), what: "a tool/result".into() };
    /// assert_eq!(e.code(), "plugin-append-forbidden");
    /// assert_eq!(e.detail(), "plugin \"p\" may not append a tool/result");
    /// assert_eq!(e.to_string(), format!("{}: {}", e.code(), e.detail()));
    /// ```
    pub fn detail(&self) -> String {
        match self {
            LoopError::Session { session_id, .. } => format!("session {session_id:?}"),
            LoopError::PluginAppendForbidden { plugin, what } => {
                format!("plugin {plugin:?} may not append {what}")
            }
        }
    }

    /// True when the store failed (as opposed to an append being refused
    /// by the session's rules): the batch is not in memory, and what the
    /// store holds of it is what [`StoreError::wrote_nothing`] says. A sync
    /// that failed after the store took its events is not an error of the
    /// loop: the turn goes on, and [`TurnOutcome::durable`] says it is not
    /// yet durable.
    ///
    /// [`StoreError::wrote_nothing`]: palimpsest_persistence::StoreError::wrote_nothing
    /// [`TurnOutcome::durable`]: crate::TurnOutcome::durable
    pub fn is_store_failure(&self) -> bool {
        matches!(self, LoopError::Session { source, .. } if source.store_error().is_some())
    }
}

/// Every message of `error`'s chain, outermost first and root cause last,
/// joined by `: `: how a failure is written into the log or a trace, with
/// each cause once (a wrapper's `Display` does not repeat its source).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}
