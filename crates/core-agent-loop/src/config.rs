//! [`AgentConfig`]: how a loop behaves (steps, limits, caps, durability,
//! dev mode), set on the [`AgentLoopBuilder`](crate::AgentLoopBuilder).

use palimpsest_persistence::Durability;

use crate::caps::StreamCaps;
use crate::dev::DevMode;

/// The default [`AgentConfig::chunk_window_ms`].
pub const DEFAULT_CHUNK_WINDOW_MS: u64 = 50;

/// How a loop behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The system prompt of every request.
    pub system_prompt: Option<String>,
    /// Most steps in one turn. A turn that needs more ends with
    /// `{"kind":"error","error":{"code":"STEP_LIMIT",..}}` after its last
    /// allowed step closed (every tool call answered). Default 32.
    pub max_steps: u64,
    /// The output-token limit put into each request.
    pub max_output_tokens: Option<u64>,
    /// Whether the invariants guard checks every append (and the stored log
    /// on open). Default: [`DevMode::from_env`].
    pub dev_mode: DevMode,
    /// When appends are synced. Default: at turn boundaries.
    pub durability: Durability,
    /// Caps on one streamed response. Default: [`StreamCaps::default`].
    pub stream_caps: StreamCaps,
    /// The flush window of streamed deltas, in milliseconds: each window
    /// writes at most one `assistant/chunk` per content block, once 256
    /// bytes are pending, or ten windows after the first pending delta at
    /// the latest (see `coalesce.rs`). Default 50; 0 writes one event per
    /// delta.
    pub chunk_window_ms: u64,
    /// Most bytes of one tool's result, as the JSON of its content blocks.
    /// A larger result, from any [`Tool`](crate::Tool), is not logged: the
    /// call is answered with a `TOOL_RESULT_TOO_LARGE` error instead, so
    /// every `tool/result` fits the format's event limit. Default:
    /// [`DEFAULT_MAX_TOOL_RESULT_BYTES`](crate::DEFAULT_MAX_TOOL_RESULT_BYTES).
    pub max_tool_result_bytes: usize,
    /// Most tool calls one response may have run. The calls past it are
    /// answered with `TOO_MANY_TOOL_CALLS` errors, not run: one response
    /// of 8 MiB holds about 250,000 small calls, each of whose results
    /// would be logged (a probe's 3,000 `read_file` calls wrote 574 MB).
    /// Default [`DEFAULT_MAX_TOOL_CALLS_PER_STEP`].
    pub max_tool_calls_per_step: usize,
}

/// Default [`AgentConfig::max_tool_calls_per_step`]: 64, well above what
/// models ask for in parallel.
pub const DEFAULT_MAX_TOOL_CALLS_PER_STEP: usize = 64;

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            system_prompt: None,
            max_steps: 32,
            max_output_tokens: None,
            dev_mode: DevMode::from_env(),
            durability: Durability::TurnBoundary,
            stream_caps: StreamCaps::default(),
            chunk_window_ms: DEFAULT_CHUNK_WINDOW_MS,
            max_tool_result_bytes: crate::caps::DEFAULT_MAX_TOOL_RESULT_BYTES,
            max_tool_calls_per_step: DEFAULT_MAX_TOOL_CALLS_PER_STEP,
        }
    }
}

impl AgentConfig {
    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> AgentConfig {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the most tool calls one response may have run.
    pub fn with_max_tool_calls_per_step(mut self, max: usize) -> AgentConfig {
        self.max_tool_calls_per_step = max;
        self
    }

    /// Sets the step limit per turn.
    pub fn with_max_steps(mut self, max_steps: u64) -> AgentConfig {
        self.max_steps = max_steps;
        self
    }

    /// Sets the output-token limit of each request.
    pub fn with_max_output_tokens(mut self, limit: u64) -> AgentConfig {
        self.max_output_tokens = Some(limit);
        self
    }

    /// Sets dev mode.
    pub fn with_dev_mode(mut self, dev_mode: DevMode) -> AgentConfig {
        self.dev_mode = dev_mode;
        self
    }

    /// Sets the flush window of streamed deltas (0: one event per delta).
    pub fn with_chunk_window_ms(mut self, window_ms: u64) -> AgentConfig {
        self.chunk_window_ms = window_ms;
        self
    }

    /// Sets [`max_tool_result_bytes`](AgentConfig::max_tool_result_bytes).
    pub fn with_max_tool_result_bytes(mut self, max_bytes: usize) -> AgentConfig {
        self.max_tool_result_bytes = max_bytes;
        self
    }

    /// Sets the durability policy.
    pub fn with_durability(mut self, durability: Durability) -> AgentConfig {
        self.durability = durability;
        self
    }

    /// Sets the caps on a streamed response.
    pub fn with_stream_caps(mut self, caps: StreamCaps) -> AgentConfig {
        self.stream_caps = caps;
        self
    }
}
