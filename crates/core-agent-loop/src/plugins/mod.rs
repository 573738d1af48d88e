//! The history rewrites every agent needs, as loop plugins: compaction
//! ([`Compaction`]) and tool-result pruning ([`ToolResultPruning`]).
//!
//! Both choose *what* to rewrite with the pure planners of
//! `palimpsest_core_session::rewrite` (so the choice is testable without a
//! loop and keeps the derived history provider-valid), and rewrite only by
//! appending replace events through the [`PluginContext`]: the shadowed
//! events stay in the log, and every replacement cites what it shadows.
//!
//! Register pruning before compaction: pruning is cheap and often brings the
//! request under the compaction budget on its own.
//!
//! [`PluginContext`]: crate::PluginContext

mod compaction;
mod pruning;

pub use compaction::{
    CharsOver4, Compaction, CompactionConfig, CompactionTrigger, FixedSummarizer, ProviderSummarizer,
    Summarizer, TokenEstimator, COMPACTION_END, COMPACTION_OVER_BUDGET, COMPACTION_START,
    DEFAULT_MAX_SUMMARY_PERCENT, SUMMARY_EMPTY, SUMMARY_FAILED, SUMMARY_TOO_LARGE, SUMMARY_TRUNCATED,
};
pub use pruning::{ToolResultPruning, PRUNING_PLUGIN};
