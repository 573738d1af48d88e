//! Coalescing streamed deltas into fewer `assistant/chunk` events.
//!
//! A model streaming one character per chunk would cost one event (about
//! 110 bytes of JSONL) per character. The loop instead gathers the deltas
//! of a flush window ([`AgentConfig::chunk_window_ms`](crate::AgentConfig),
//! 50 ms by default) and writes one chunk per content block (text,
//! reasoning or tool call of one index; the last usage) when the window
//! ends, when the stream stops, or when the provider goes quiet past the
//! window's end. So at most one chunk event per block per window, and at
//! most one window of streamed output is lost to a crash.
//!
//! Merging keeps what the [`Assembler`](crate::assemble) builds: text and
//! arguments concatenate in order, a tool call keeps its first non-empty id
//! and first name, the last usage wins. The assistant message still cites
//! every chunk event of its step.

use std::time::Duration;

use palimpsest_core_session::payload::StreamChunk;
use tokio::time::Instant;

/// The deltas of the current flush window, one merged chunk per block.
#[derive(Debug)]
pub(crate) struct Coalescer {
    window: Duration,
    started: Option<Instant>,
    pending: Vec<StreamChunk>,
}

impl Coalescer {
    pub(crate) fn new(window_ms: u64) -> Coalescer {
        Coalescer { window: Duration::from_millis(window_ms), started: None, pending: Vec::new() }
    }

    /// Adds a delta; returns whether the window is over (flush now).
    pub(crate) fn push(&mut self, chunk: StreamChunk) -> bool {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        match self.pending.iter_mut().find(|p| same_block(p, &chunk)) {
            Some(pending) => merge(pending, chunk),
            None => self.pending.push(chunk),
        }
        now.duration_since(started) >= self.window
    }

    /// When the current window ends, if anything is pending (and the window
    /// is not too long to name an instant: then only the stream's end
    /// flushes).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.started.and_then(|s| s.checked_add(self.window))
    }

    /// The merged chunks, in the order their blocks first appeared; starts
    /// a new window.
    pub(crate) fn take(&mut self) -> Vec<StreamChunk> {
        self.started = None;
        std::mem::take(&mut self.pending)
    }
}

fn same_block(a: &StreamChunk, b: &StreamChunk) -> bool {
    match (a, b) {
        (StreamChunk::TextDelta { index: x, .. }, StreamChunk::TextDelta { index: y, .. })
        | (StreamChunk::ReasoningDelta { index: x, .. }, StreamChunk::ReasoningDelta { index: y, .. })
        | (StreamChunk::ToolCallDelta { index: x, .. }, StreamChunk::ToolCallDelta { index: y, .. }) => {
            x == y
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
        assert_eq!(chunks.len(), 3, "{chunks:?}");
        for c in &chunks {
            merged.push(c);
        }
        assert_eq!(raw.finish(), merged.finish());
        assert_eq!(coalescer.deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_ends_after_its_length() {
        let mut coalescer = Coalescer::new(50);
        assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: "a".into() }));
        tokio::time::advance(Duration::from_millis(49)).await;
        assert!(!coalescer.push(StreamChunk::TextDelta { index: 0, text: "b".into() }));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(coalescer.push(StreamChunk::TextDelta { index: 0, text: "c".into() }));
        assert_eq!(coalescer.take(), [StreamChunk::TextDelta { index: 0, text: "abc".into() }]);
        // A zero window flushes every delta.
        let mut each = Coalescer::new(0);
        assert!(each.push(StreamChunk::TextDelta { index: 0, text: "a".into() }));
    }
}
