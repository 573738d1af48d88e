//! Coalescing streamed deltas into fewer `assistant/chunk` events.
//!
//! A model streaming one character per chunk would cost one event (about
//! 110 bytes of JSONL) per character. The loop instead gathers the deltas
//! and writes one chunk per content block (text, reasoning or tool call of
//! one index; the last usage) when a flush is due:
//!
//! * at most once per window ([`AgentConfig::chunk_window_ms`](crate::AgentConfig),
//!   50 ms by default), and then only once the window's deltas hold
//!   [`MIN_FLUSH_BYTES`], so an event's envelope is paid for by at least
//!   that much output, whatever the stream's pace;
//! * at the latest [`MAX_WINDOWS`] windows (500 ms by default) after the
//!   first pending delta, when the provider goes quiet or trickles;
//! * when the stream stops.
//!
//! So at most one chunk event per block per window, and a crash loses at
//! most [`MAX_WINDOWS`] windows of streamed output. A window of 0 writes
//! every delta as it arrives.
//!
//! Merging keeps what the [`Assembler`](crate::assemble) builds: text and
//! arguments concatenate in order, a tool call keeps its first non-empty id
//! and first name, the last usage wins. A call delta naming another id or
//! name than the pending one is not merged but kept as its own chunk, so
//! the log holds everything the model sent. The assistant message still
//! cites every chunk event of its step.

use std::time::Duration;

use palimpsest_core_session::payload::StreamChunk;
use tokio::time::Instant;

/// Bytes of deltas a window must gather before it is flushed early (see
/// the module docs): past the envelope of a chunk event (about 110 bytes),
/// so that chunks cost at most about 1.5 bytes of log per byte of output.
pub(crate) const MIN_FLUSH_BYTES: usize = 256;

/// How many windows pending deltas wait at most for [`MIN_FLUSH_BYTES`].
pub(crate) const MAX_WINDOWS: u32 = 10;

/// The pending deltas, one merged chunk per block.
#[derive(Debug)]
pub(crate) struct Coalescer {
    window: Duration,
    started: Option<Instant>,
    pending: Vec<StreamChunk>,
    /// Bytes of text and arguments in `pending`.
    pending_bytes: usize,
}

impl Coalescer {
    pub(crate) fn new(window_ms: u64) -> Coalescer {
        Coalescer {
            window: Duration::from_millis(window_ms),
            started: None,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Adds a delta; returns whether a flush is due now.
    pub(crate) fn push(&mut self, chunk: StreamChunk) -> bool {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        self.pending_bytes += delta_bytes(&chunk);
        match self.pending.iter_mut().find(|p| same_block(p, &chunk)) {
            Some(pending) => merge(pending, chunk),
            None => self.pending.push(chunk),
        }
        let elapsed = now.duration_since(started);
        elapsed >= self.window && (self.pending_bytes >= MIN_FLUSH_BYTES || elapsed >= self.longest())
    }

    /// When pending deltas must be flushed though no delta came (`None` when
    /// nothing is pending, or the window is too long to name an instant:
    /// then only the stream's end flushes).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let wait = if self.pending_bytes >= MIN_FLUSH_BYTES { self.window } else { self.longest() };
        self.started.and_then(|s| s.checked_add(wait))
    }

    /// The merged chunks, in the order their blocks first appeared; starts
    /// a new window.
    pub(crate) fn take(&mut self) -> Vec<StreamChunk> {
        self.started = None;
        self.pending_bytes = 0;
        std::mem::take(&mut self.pending)
    }

    /// The longest pending deltas wait.
    fn longest(&self) -> Duration {
        self.window.saturating_mul(MAX_WINDOWS)
    }
}

/// The output bytes a delta carries.
fn delta_bytes(chunk: &StreamChunk) -> usize {
    match chunk {
        StreamChunk::TextDelta { text, .. } | StreamChunk::ReasoningDelta { text, .. } => text.len(),
        StreamChunk::ToolCallDelta { id, name, arguments_delta, .. } => {
            id.len() + name.as_ref().map_or(0, String::len) + arguments_delta.len()
        }
        _ => 0,
    }
}

fn same_block(a: &StreamChunk, b: &StreamChunk) -> bool {
    match (a, b) {
        (StreamChunk::TextDelta { index: x, .. }, StreamChunk::TextDelta { index: y, .. })
        | (StreamChunk::ReasoningDelta { index: x, .. }, StreamChunk::ReasoningDelta { index: y, .. }) => {
            x == y
        }
        // A delta that names a different id or name than the pending one
        // is not folded in: merging keeps the first of each, and the log
        // must keep what the model sent (a name some server splits across
        // deltas, a reused index).
        (
            StreamChunk::ToolCallDelta { index: x, id, name, .. },
            StreamChunk::ToolCallDelta { index: y, id: next_id, name: next_name, .. },
        ) => {
            let ids_differ = !id.is_empty() && !next_id.is_empty() && id != next_id;
            let names_differ = matches!((name, next_name), (Some(a), Some(b)) if a != b);
            x == y && !ids_differ && !names_differ
        }
        (StreamChunk::Usage(_), StreamChunk::Usage(_)) => true,
        _ => false,
    }
}

fn merge(into: &mut StreamChunk, next: StreamChunk) {
    match (into, next) {
        (StreamChunk::TextDelta { text, .. }, StreamChunk::TextDelta { text: more, .. })
        | (StreamChunk::ReasoningDelta { text, .. }, StreamChunk::ReasoningDelta { text: more, .. }) => {
            text.push_str(&more)
        }
        (
            StreamChunk::ToolCallDelta { id, name, arguments_delta, .. },
            StreamChunk::ToolCallDelta { id: next_id, name: next_name, arguments_delta: more, .. },
        ) => {
            if id.is_empty() {
                *id = next_id;
            }
            if name.is_none() {
                *name = next_name;
            }
            arguments_delta.push_str(&more);
        }
        (into @ StreamChunk::Usage(_), next @ StreamChunk::Usage(_)) => *into = next,
        // `same_block` matched kinds; nothing else reaches here.
        (_, _) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::Assembler;

    fn call(index: u32, id: &str, name: Option<&str>, args: &str) -> StreamChunk {
        StreamChunk::ToolCallDelta {
            index,
            id: id.into(),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn merged_chunks_assemble_like_the_deltas() {
        let deltas = [
            StreamChunk::TextDelta { index: 0, text: "Hel".into() },
            call(1, "", None, "{\"a\""),
            call(1, "c1", Some("read"), ":1"),
            StreamChunk::ReasoningDelta { index: 0, text: "hm".into() },
            StreamChunk::TextDelta { index: 0, text: "lo".into() },
            call(1, "c2", Some("other"), "}"),
        ];
        let mut coalescer = Coalescer::new(50);
        let (mut raw, mut merged) = (Assembler::default(), Assembler::default());
        for d in &deltas {
            raw.push(d);
            assert!(!coalescer.push(d.clone()), "no time passed");
        }
        let chunks = coalescer.take();
        // Text, reasoning, and the call twice: its last delta names another
        // id and tool, which a merge would drop from the log.
        assert_eq!(chunks.len(), 4, "{chunks:?}");
        assert!(
            matches!(&chunks[3], StreamChunk::ToolCallDelta { id, name: Some(n), .. } if id == "c2" && n == "other"),
            "{chunks:?}"
        );
        for c in &chunks {
            merged.push(c);
        }
        assert_eq!(raw.finish(), merged.finish());
        assert_eq!(coalescer.deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_window_ends_after_its_length() {
        let mut coalescer = Coalescer::new(50);
        let big = "x".repeat(MIN_FLUSH_BYTES);
        assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: "a".into() }));
        assert_eq!(coalescer.deadline(), Some(Instant::now() + Duration::from_millis(500)), "not full yet");
        assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: big.clone() }), "full, but early");
        assert_eq!(
            coalescer.deadline(),
            Some(Instant::now() + Duration::from_millis(50)),
            "full: one window"
        );
        tokio::time::advance(Duration::from_millis(49)).await;
        assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: "b".into() }));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(coalescer.push(StreamChunk::TextDelta { index: 0, text: "c".into() }));
        assert_eq!(coalescer.take(), [StreamChunk::TextDelta { index: 0, text: format!("a{big}bc") }]);
        assert_eq!(coalescer.deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_flushed_after_ten_windows_at_the_latest() {
        let mut coalescer = Coalescer::new(50);
        for _ in 0..10 {
            assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: "a".into() }));
            tokio::time::advance(Duration::from_millis(50)).await;
        }
        assert!(coalescer.push(StreamChunk::TextDelta { index: 0, text: "b".into() }), "500 ms: due");
        assert_eq!(coalescer.take(), [StreamChunk::TextDelta { index: 0, text: "aaaaaaaaaab".into() }]);
        // A zero window flushes every delta.
        let mut each = Coalescer::new(0);
        assert!(each.push(StreamChunk::TextDelta { index: 0, text: "a".into() }));
    }
}
