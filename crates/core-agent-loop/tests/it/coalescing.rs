//! Issue 21, item 5: a model streaming one character per chunk costs at
//! most one `assistant/chunk` per 50 ms per content block, and at most
//! 3 bytes of JSONL log per streamed character. Time is tokio's paused
//! clock: deterministic, no wall-clock sleeps.

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
use palimpsest_core_session::payload::{Block, StreamChunk, TurnEndReason};
use palimpsest_core_session::EventType;
use palimpsest_persistence::{MemoryStore, SessionStore};

use crate::common::SID;

/// Streams `text` one character per chunk, `per_tick` chunks every `every`
/// (tokio's timer counts whole milliseconds).
#[derive(Debug)]
struct Trickle {
    text: String,
    every: Duration,
    per_tick: usize,
}

struct TrickleStream {
    chars: std::vec::IntoIter<char>,
    every: Duration,
    per_tick: usize,
    sent: usize,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for TrickleStream {
    type Item = Result<StreamItem, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let every = self.every;
        if !self.sent.is_multiple_of(self.per_tick.max(1)) {
            self.sent += 1;
            return Poll::Ready(
                self.chars
                    .next()
                    .map(|c| Ok(StreamItem::Chunk(StreamChunk::TextDelta { index: 0, text: c.to_string() }))),
            );
        }
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.sleep = None;
        self.sent += 1;
        Poll::Ready(
            self.chars
                .next()
                .map(|c| Ok(StreamItem::Chunk(StreamChunk::TextDelta { index: 0, text: c.to_string() }))),
        )
    }
}

impl Provider for Trickle {
    fn name(&self) -> &str {
        "trickle"
    }

    fn model(&self) -> &str {
        "one-char"
    }

    fn stream(&self, _request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
        let chars: Vec<char> = self.text.chars().collect();
        let stream = TrickleStream {
            chars: chars.into_iter(),
            every: self.every,
            per_tick: self.per_tick,
            sent: 0,
            sleep: None,
        };
        Box::pin(async move { Ok(Box::pin(stream) as ChunkStream<'_>) })
    }
}

/// Streams `text`; returns the chunk events' count and JSONL bytes, the
/// whole log's JSONL bytes, and the message's content.
async fn run(text: &str, every: Duration, per_tick: usize) -> (usize, usize, usize, Vec<Block>) {
    let provider = Arc::new(Trickle { text: text.to_owned(), every, per_tick });
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let mut agent = AgentLoop::builder(provider)
        .config(AgentConfig::default().with_dev_mode(DevMode::On))
        .create(store.clone(), SID)
        .expect("create");
    let outcome = agent.run_turn(TurnInput::text("stream")).await.expect("turn");
    assert_eq!(outcome.reason, TurnEndReason::Completed);
    let events = store.load(SID).expect("load").events;
    let chunks: Vec<u64> =
        events.iter().filter(|e| *e.event_type() == EventType::AssistantChunk).map(|e| e.seq()).collect();
    let chunk_bytes: usize = events
        .iter()
        .filter(|e| *e.event_type() == EventType::AssistantChunk)
        .map(|e| e.to_json().len() + 1)
        .sum();
    let message = events.iter().find(|e| *e.event_type() == EventType::AssistantMessage).expect("message");
    // The message still cites every chunk of its step.
    assert_eq!(message.source_event_seqs(), Some(&chunks[..]));
    let log_bytes: usize = events.iter().map(|e| e.to_json().len() + 1).sum();
    let content = outcome.message.expect("message").content;
    (chunks.len(), chunk_bytes, log_bytes, content)
}

#[tokio::test(start_paused = true)]
async fn one_char_per_ms_costs_one_chunk_per_window() {
    let text: String = "The quick brown fox jumps over the lazy dog. ".repeat(45);
    let chars = text.chars().count();
    let (chunks, bytes, log_bytes, content) = run(&text, Duration::from_millis(1), 1).await;
    assert_eq!(content, [Block::text(text.clone())]);
    let streamed_ms = chars as u64;
    let allowed = usize::try_from(streamed_ms.div_ceil(DEFAULT_CHUNK_WINDOW_MS) + 1).unwrap_or(usize::MAX);
    assert!(chunks <= allowed, "{chunks} chunk events for {streamed_ms} ms of streaming");
    // About 110 bytes per event over at least 256 characters (a window
    // is flushed once it holds that much): with the message's own copy of
    // the text, under 3 bytes of log per character.
    let per_char = bytes as f64 / chars as f64;
    assert!(per_char <= 2.0, "{per_char:.2} bytes of chunk log per character");
    let whole = log_bytes as f64 / chars as f64;
    assert!(whole <= 3.0, "{whole:.2} bytes of log per character, every event counted");
}

/// The measurement: 200 KB streamed one character per chunk as fast
/// as a local mock sends it (here 10,000 characters a second) cost 150
/// bytes of log per character; now at most 3.
#[tokio::test(start_paused = true)]
async fn a_fast_one_char_stream_costs_at_most_3_bytes_per_char() {
    let text: String = "abcdefghij".repeat(2_000);
    let (chunks, bytes, _, content) = run(&text, Duration::from_millis(1), 10).await;
    assert_eq!(content, [Block::text(text.clone())]);
    let per_char = bytes as f64 / text.len() as f64;
    assert!(per_char <= 3.0, "{per_char:.2} bytes of chunk log per character ({chunks} events)");
    // 2 s of streaming: one event per 50 ms window.
    assert!(chunks <= 41, "{chunks} chunk events");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_provider_does_not_hold_a_window_back() {
    // One character every 200 ms, from 200 ms on: a trickle is flushed
    // ten windows (500 ms) after its first delta at the latest, so a crash
    // loses at most that much; "abc" at 700 ms, "d" when the stream ends.
    let (chunks, _, _, content) = run("abcd", Duration::from_millis(200), 1).await;
    assert_eq!(content, [Block::text("abcd")]);
    assert_eq!(chunks, 2);
}
