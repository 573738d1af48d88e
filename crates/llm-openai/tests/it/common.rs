//! Shared helpers: the fixtures, a provider with fast deterministic
//! retries, and collecting a stream into comparable items.

use std::time::Duration;

use futures_util::StreamExt;
use palimpsest_core_agent_loop::{ModelRequest, Provider, ProviderError, StreamItem};
use palimpsest_core_session::payload::{StreamChunk, Usage};
use palimpsest_llm_openai::{OpenAiConfig, OpenAiProvider, RetryPolicy};

/// An OpenAI text answer with a keep-alive comment, multi-byte text and a usage chunk.
pub(crate) const TEXT: &[u8] = include_bytes!("../data/text.sse");
/// Text, then two parallel tool calls interleaved across many deltas (vLLM style).
pub(crate) const TOOL_CALLS: &[u8] = include_bytes!("../data/tool_calls.sse");
/// DeepSeek-reasoner style reasoning then text, with CRLF line ends.
pub(crate) const REASONING: &[u8] = include_bytes!("../data/reasoning.sse");
/// A gateway's HTML error page as a data line in the middle of a stream.
pub(crate) const MALFORMED: &[u8] = include_bytes!("../data/malformed.sse");

/// An item with its error as `(code, display)`, so items compare.
pub(crate) type Item = Result<StreamItem, (String, String)>;

pub(crate) fn plain(error: &ProviderError) -> (String, String) {
    (error.code().to_owned(), error.to_string())
}

/// A config for `base_url` with a key, and retries that wait 1 ms, 2 ms.
pub(crate) fn config(base_url: &str) -> OpenAiConfig {
    OpenAiConfig::new(base_url, "test-model").with_api_key("sk-test-key").with_retry(RetryPolicy {
        max_retries: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        max_retry_after: Duration::from_secs(2),
    })
}

pub(crate) fn provider(config: OpenAiConfig) -> Result<OpenAiProvider, String> {
    OpenAiProvider::new(config).map_err(|e| e.to_string())
}

/// Every item of the stream for `request`. Checks that nothing follows an
/// error: the stream must end right after it.
/// A `stream` call that fails is an `Err` naming its code and message.
pub(crate) async fn collect(provider: &OpenAiProvider, request: ModelRequest) -> Result<Vec<Item>, String> {
    let mut stream =
        provider.stream(request).await.map_err(|e| format!("the stream did not start: {}: {e}", e.code()))?;
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        let failed = item.is_err();
        items.push(item.map_err(|e| plain(&e)));
        if failed {
            let after = stream.next().await;
            assert!(after.is_none(), "an item after an error: {after:?}");
            break;
        }
    }
    Ok(items)
}

pub(crate) fn text(index: u32, t: &str) -> Item {
    Ok(StreamItem::Chunk(StreamChunk::TextDelta { index, text: t.into() }))
}

pub(crate) fn reasoning(index: u32, t: &str) -> Item {
    Ok(StreamItem::Chunk(StreamChunk::ReasoningDelta { index, text: t.into() }))
}

pub(crate) fn call(index: u32, id: &str, name: Option<&str>, args: &str) -> Item {
    Ok(StreamItem::Chunk(StreamChunk::ToolCallDelta {
        index,
        id: id.into(),
        name: name.map(Into::into),
        arguments_delta: args.into(),
    }))
}

pub(crate) fn usage(input: u64, output: u64, cached: Option<u64>, reasoning: Option<u64>) -> Item {
    Ok(StreamItem::Chunk(StreamChunk::Usage(Usage {
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
    })))
}

/// The bytes of `fixture` up to (not including) the `n`th `data:` event.
pub(crate) fn first_events(fixture: &[u8], n: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(fixture);
    let cut = text.match_indices("data: ").nth(n).map_or(text.len(), |(i, _)| i);
    text.as_bytes()[..cut].to_vec()
}
