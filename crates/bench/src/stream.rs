//! The `stream` section (issue 21, item 5): what a model streaming one
//! character per chunk costs in log, with the loop's flush window and,
//! as the baseline, with one event per delta (window 0).
//!
//! The stream runs on tokio's paused clock, 10 characters a millisecond
//! (a fast local server, as in the measurement), so the figures
//! are exact and the section takes no wall time to wait.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use palimpsest_core_agent_loop::{
    AgentConfig, AgentLoop, BoxFuture, ChunkStream, DevMode, ModelRequest, Provider, ProviderError,
    StreamItem, TurnInput, DEFAULT_CHUNK_WINDOW_MS,
};
use palimpsest_core_session::payload::StreamChunk;
use palimpsest_core_session::EventType;
use palimpsest_persistence::{MemoryStore, SessionStore};

use crate::report::Row;
use crate::Workload;

/// Characters streamed per millisecond of (paused) time.
const CHARS_PER_MS: usize = 10;

#[derive(Debug)]
struct OneCharProvider {
    chars: usize,
}

struct OneCharStream {
    left: usize,
    sent: usize,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for OneCharStream {
    type Item = Result<StreamItem, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if self.sent.is_multiple_of(CHARS_PER_MS) {
            let sleep =
                self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(1))));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.sent += 1;
        self.left -= 1;
        let text = char::from(b'a' + (self.sent % 26) as u8).to_string();
        Poll::Ready(Some(Ok(StreamItem::Chunk(StreamChunk::TextDelta { index: 0, text }))))
    }
}

impl Provider for OneCharProvider {
    fn name(&self) -> &str {
        "bench"
    }

    fn model(&self) -> &str {
        "one-char"
    }

    fn stream(&self, _request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
        let stream = OneCharStream { left: self.chars, sent: 0, sleep: None };
        Box::pin(async move { Ok(Box::pin(stream) as ChunkStream<'_>) })
    }
}

/// Streams `chars` characters with flush window `window_ms`: the chunk
/// events' JSONL bytes and their number.
fn measure(chars: usize, window_ms: u64) -> Result<(usize, usize), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = AgentLoop::builder(Arc::new(OneCharProvider { chars }))
        .config(AgentConfig::default().with_dev_mode(DevMode::Off).with_chunk_window_ms(window_ms))
        .create(store.clone(), "bench")
        .map_err(|e| e.to_string())?;
    runtime.block_on(agent.run_turn(TurnInput::text("stream"))).map_err(|e| e.to_string())?;
    let events = store.load("bench").map_err(|e| e.to_string())?.events;
    let chunks: Vec<_> = events.iter().filter(|e| *e.event_type() == EventType::AssistantChunk).collect();
    let bytes = chunks.iter().map(|e| e.to_json().len() + 1).sum();
    Ok((bytes, chunks.len()))
}

pub(crate) fn stream(w: &Workload) -> Result<Vec<Row>, String> {
    let chars = w.n.clamp(100, 200_000);
    let seconds = chars as f64 / (CHARS_PER_MS as f64 * 1000.0);
    let (bytes, count) = measure(chars, DEFAULT_CHUNK_WINDOW_MS)?;
    let (bytes0, count0) = measure(chars, 0)?;
    let row = |name: &str, value: f64, unit: &'static str, base: f64| Row {
        section: "stream",
        name: name.into(),
        n: chars,
        value,
        unit,
        baseline: Some(("one event per delta".into(), base)),
        higher_is_better: false,
    };
    Ok(vec![
        row(
            "chunk log per streamed char, one char per chunk",
            bytes as f64 / chars as f64,
            "B/char",
            bytes0 as f64 / chars as f64,
        ),
        row(
            "chunk events per second of streaming",
            count as f64 / seconds,
            "chunks/s",
            count0 as f64 / seconds,
        ),
    ])
}
