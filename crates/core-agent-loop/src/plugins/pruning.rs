//! Tool-result pruning: old, large `tool/result`s are replaced by a short
//! stub of the same call saying what was pruned and where the original is.

use palimpsest_core_session::rewrite::{plan_pruning, pruned_result};
use palimpsest_core_session::SurfaceIntent;

use crate::plugin::{Plugin, PluginContext, PluginError};
use crate::provider::BoxFuture;

/// The plugin's name, as it appears in logs and errors.
pub const PRUNING_PLUGIN: &str = "tool-result-pruning";

/// Before each request, replaces every `tool/result` on the surface that is
/// older than the `keep_recent` newest results and holds more than
/// `min_chars` characters, with a single-node replace of the same call
/// (contract section 2, rule 8). The original stays in the log.
///
/// ```
/// use palimpsest_core_agent_loop::plugins::ToolResultPruning;
/// let pruning = ToolResultPruning { keep_recent: 2, min_chars: 1_000 };
/// # let _ = pruning;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolResultPruning {
    /// How many of the newest tool results are never pruned.
    pub keep_recent: usize,
    /// Results with at most this many characters of text are kept.
    pub min_chars: usize,
}

impl Default for ToolResultPruning {
    fn default() -> ToolResultPruning {
        ToolResultPruning { keep_recent: 4, min_chars: 2_000 }
    }
}

impl Plugin for ToolResultPruning {
    fn name(&self) -> &str {
        PRUNING_PLUGIN
    }

    fn before_request<'a>(
        &'a mut self,
        ctx: &'a mut PluginContext<'_>,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(async move {
            for candidate in plan_pruning(ctx.session(), self.keep_recent, self.min_chars) {
                let Some(original) = ctx.session().event(candidate.seq).cloned() else { continue };
                let Some(stub) = pruned_result(&original, ctx.new_message_id()) else { continue };
                let seq = candidate.seq;
                let replaced = ctx.append_message(stub, SurfaceIntent::replace(seq, seq, vec![seq]))?;
                tracing::debug!(pruned = seq, by = replaced, chars = candidate.chars, "pruned a tool result");
            }
            Ok(())
        })
    }
}
