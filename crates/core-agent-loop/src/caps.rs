//! Caps on a streamed response: what keeps every event the loop writes from
//! a stream within the format's event limit, and its memory bounded.
//!
//! Each chunk is measured *before* it is logged or assembled: the bytes of
//! its text, or of its tool call's id, name and arguments delta. A chunk
//! that would take one call's arguments past
//! [`StreamCaps::max_tool_arguments_bytes`], or the whole response past
//! [`StreamCaps::max_response_bytes`], ends the stream there: it is dropped
//! unread and unlogged, and the loop ends the step as for a failed stream
//! (the delivered prefix becomes an interrupted `assistant/message`, its
//! calls get error results, the turn ends with `{"kind":"error"}` and code
//! [`RESPONSE_TOO_LARGE`](crate::codes::RESPONSE_TOO_LARGE) or
//! [`TOOL_ARGUMENTS_TOO_LARGE`](crate::codes::TOOL_ARGUMENTS_TOO_LARGE)).
//!
//! Every chunk also counts [`CHUNK_BYTES`] toward the response, whatever
//! it carries: a usage chunk or a one-byte delta is an event of its own in
//! the log (with the chunk window at 0) and a seq in the message's
//! provenance. Counted as nothing, a server sending usage-only chunks
//! logged 1.8 million events (278 MB) in 8 seconds and never stopped
//! (an outside probe); now a response is at most
//! `max_response_bytes / CHUNK_BYTES` chunks (262,144 by default).
//!
//! The defaults leave a margin: JSON escaping writes a byte as at most six
//! (`\u0001`), so a response of 8 MiB is at most 48 MiB in its
//! `assistant/message`, under the 64 MiB
//! [`MAX_EVENT_LINE_BYTES`](palimpsest_core_session::MAX_EVENT_LINE_BYTES).

use std::collections::BTreeMap;

use palimpsest_core_session::payload::StreamChunk;

use crate::codes;
use crate::provider::ProviderError;

/// Default [`StreamCaps::max_tool_arguments_bytes`]: 4 MiB.
pub const DEFAULT_MAX_TOOL_ARGUMENTS_BYTES: usize = 4 << 20;

/// Default [`AgentConfig::max_tool_result_bytes`](crate::AgentConfig::max_tool_result_bytes):
/// 16 MiB of JSON, a quarter of the event limit.
pub const DEFAULT_MAX_TOOL_RESULT_BYTES: usize = 16 << 20;

/// Default [`StreamCaps::max_response_bytes`]: 8 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 8 << 20;

/// What every streamed chunk counts toward
/// [`StreamCaps::max_response_bytes`] besides its text: about what its
/// event costs the log beyond that text, at the least. See the module docs.
pub const CHUNK_BYTES: usize = 32;

/// Default [`StreamCaps::max_tool_calls`]: 256.
pub const DEFAULT_MAX_TOOL_CALLS: usize = 256;

// The margin of the module docs, held at build time: escaped six times
// over, with a MiB for the envelope, a capped response fits in one event.
const _: () =
    assert!(DEFAULT_MAX_RESPONSE_BYTES * 6 + (1 << 20) <= palimpsest_core_session::MAX_EVENT_LINE_BYTES);

/// How much one streamed response may carry. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCaps {
    /// Most bytes of one tool call's streamed arguments.
    pub max_tool_arguments_bytes: usize,
    /// Most bytes of one response: every text, reasoning and tool-call
    /// delta, and [`CHUNK_BYTES`] for each chunk. At most a sixth of the
    /// event limit, less the envelope.
    pub max_response_bytes: usize,
    /// Most tool calls in one response. Each call is logged twice (its
    /// `tool/call` and its result) whether it runs or not
    /// ([`AgentConfig::max_tool_calls_per_step`](crate::AgentConfig::max_tool_calls_per_step)
    /// decides that), and an empty call costs the response only a few
    /// bytes: 100,000 of them fit the byte cap and logged 90 MB. A delta
    /// that starts one call more ends the stream
    /// ([`RESPONSE_TOO_LARGE`](crate::codes::RESPONSE_TOO_LARGE)).
    pub max_tool_calls: usize,
}

impl Default for StreamCaps {
    fn default() -> StreamCaps {
        StreamCaps {
            max_tool_arguments_bytes: DEFAULT_MAX_TOOL_ARGUMENTS_BYTES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
        }
    }
}

/// What one response has used of its caps so far.
#[derive(Debug)]
pub(crate) struct StreamBudget {
    caps: StreamCaps,
    response: usize,
    /// Arguments bytes per tool-call index.
    arguments: BTreeMap<u32, usize>,
}

impl StreamBudget {
    pub(crate) fn new(caps: StreamCaps) -> StreamBudget {
        StreamBudget { caps, response: 0, arguments: BTreeMap::new() }
    }

    /// Counts `chunk` in, or says which cap it would break (and counts
    /// nothing): the stream must end before it.
    pub(crate) fn admit(&mut self, chunk: &StreamChunk) -> Result<(), ProviderError> {
        let (bytes, call) = match chunk {
            StreamChunk::TextDelta { text, .. } | StreamChunk::ReasoningDelta { text, .. } => {
                (text.len(), None)
            }
            StreamChunk::ToolCallDelta { index, id, name, arguments_delta } => {
                let bytes = id.len() + name.as_ref().map_or(0, String::len) + arguments_delta.len();
                (bytes, Some((*index, arguments_delta.len())))
            }
            StreamChunk::Usage(_) => (0, None),
        };
        let bytes = bytes + CHUNK_BYTES;
        if let Some((index, delta)) = call {
            let calls = self.caps.max_tool_calls;
            if !self.arguments.contains_key(&index) && self.arguments.len() >= calls {
                return Err(ProviderError::Other {
                    code: codes::RESPONSE_TOO_LARGE.into(),
                    message: format!(
                        "the streamed response started more than {calls} tool calls; the stream was ended there"
                    ),
                });
            }
            let so_far = self.arguments.get(&index).copied().unwrap_or(0);
            let cap = self.caps.max_tool_arguments_bytes;
            if so_far.saturating_add(delta) > cap {
                return Err(ProviderError::Other {
                    code: codes::TOOL_ARGUMENTS_TOO_LARGE.into(),
                    message: format!(
                        "the arguments of streamed tool call {index} passed the {cap}-byte cap; the stream was ended there"
                    ),
                });
            }
        }
        let cap = self.caps.max_response_bytes;
        if self.response.saturating_add(bytes) > cap {
            return Err(ProviderError::Other {
                code: codes::RESPONSE_TOO_LARGE.into(),
                message: format!(
                    "the streamed response passed the {cap}-byte cap; the stream was ended there"
                ),
            });
        }
        self.response += bytes;
        if let Some((index, delta)) = call {
            *self.arguments.entry(index).or_insert(0) += delta;
        }
        Ok(())
    }
}
