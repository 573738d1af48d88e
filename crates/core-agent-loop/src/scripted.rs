//! [`ScriptedProvider`]: a deterministic [`Provider`] that replays canned
//! responses, for tests, examples and the demo.
//!
//! Each request takes the next [`ScriptedResponse`] from the script (or asks
//! a responder closure for one). A response is a list of stream items
//! replayed in order: chunks (tool calls split across many deltas included),
//! a finish reason, an error at a chosen point, or a hang (a stream that
//! never finishes, for cancellation and crash tests). Every request is
//! recorded, so a test can check what the model was shown.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_core::Stream;
use palimpsest_core_session::payload::{StreamChunk, Usage};

use crate::provider::{
    BoxFuture, ChunkStream, FinishReason, ModelRequest, Provider, ProviderError, StreamItem,
};

/// The code of the error a [`ScriptedProvider`] returns when its script is
/// used up.
pub const SCRIPT_EXHAUSTED: &str = "SCRIPT_EXHAUSTED";

#[derive(Debug, Clone)]
enum ScriptItem {
    Item(StreamItem),
    Error(ProviderError),
    Hang,
}

/// One canned response: what the stream yields, in order.
///
/// ```
/// use palimpsest_core_agent_loop::{FinishReason, ScriptedResponse};
///
/// // "Let me look." then a call to `read` whose arguments arrive in three pieces.
/// let r = ScriptedResponse::new()
///     .text(0, "Let me look.")
///     .tool_call(1, "call-1", "read", &["{\"pa", "th\":\"a.t", "xt\"}"])
///     .usage(120, 14)
///     .finish(FinishReason::ToolCalls);
/// assert_eq!(r.len(), 6);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedResponse {
    refusal: Option<ProviderError>,
    items: Vec<ScriptItem>,
}

impl ScriptedResponse {
    /// An empty response (a known empty stream).
    pub fn new() -> ScriptedResponse {
        ScriptedResponse::default()
    }

    /// A response that fails before streaming anything: the provider's
    /// `stream` call itself returns `error`.
    pub fn refuse(error: ProviderError) -> ScriptedResponse {
        ScriptedResponse { refusal: Some(error), items: Vec::new() }
    }

    /// A whole text answer at index 0, streamed word by word, then
    /// [`FinishReason::Stop`].
    pub fn reply(text: &str) -> ScriptedResponse {
        let mut r = ScriptedResponse::new();
        let mut rest = text;
        while !rest.is_empty() {
            // Each piece is a word with the spaces after it.
            let end = rest
                .find(' ')
                .map_or(rest.len(), |i| i + rest[i..].find(|c: char| c != ' ').unwrap_or(rest.len() - i));
            r = r.text(0, &rest[..end]);
            rest = &rest[end..];
        }
        r.finish(FinishReason::Stop)
    }

    /// Adds any chunk.
    pub fn chunk(mut self, chunk: StreamChunk) -> ScriptedResponse {
        self.items.push(ScriptItem::Item(StreamItem::Chunk(chunk)));
        self
    }

    /// Adds one text delta.
    pub fn text(self, index: u32, text: &str) -> ScriptedResponse {
        self.chunk(StreamChunk::TextDelta { index, text: text.to_owned() })
    }

    /// Adds one reasoning delta.
    pub fn reasoning(self, index: u32, text: &str) -> ScriptedResponse {
        self.chunk(StreamChunk::ReasoningDelta { index, text: text.to_owned() })
    }

    /// Adds a tool call split across one delta per argument piece (at least
    /// one delta); only the first delta names the tool.
    pub fn tool_call(
        mut self,
        index: u32,
        id: &str,
        name: &str,
        argument_pieces: &[&str],
    ) -> ScriptedResponse {
        let pieces: &[&str] = if argument_pieces.is_empty() { &[""] } else { argument_pieces };
        for (i, piece) in pieces.iter().enumerate() {
            self = self.chunk(StreamChunk::ToolCallDelta {
                index,
                id: id.to_owned(),
                name: (i == 0).then(|| name.to_owned()),
                arguments_delta: (*piece).to_owned(),
            });
        }
        self
    }

    /// Adds a usage chunk.
    pub fn usage(self, input_tokens: u64, output_tokens: u64) -> ScriptedResponse {
        self.chunk(StreamChunk::Usage(Usage {
            input_tokens,
            output_tokens,
            cached_input_tokens: None,
            reasoning_tokens: None,
        }))
    }

    /// Adds a finish reason.
    pub fn finish(mut self, reason: FinishReason) -> ScriptedResponse {
        self.items.push(ScriptItem::Item(StreamItem::Finish(reason)));
        self
    }

    /// Makes the stream fail here: it yields `error` and ends.
    pub fn error(mut self, error: ProviderError) -> ScriptedResponse {
        self.items.push(ScriptItem::Error(error));
        self
    }

    /// Makes the stream hang here: it never yields again (until the turn is
    /// cancelled or dropped).
    pub fn hang(mut self) -> ScriptedResponse {
        self.items.push(ScriptItem::Hang);
        self
    }

    /// How many items the stream yields (a hang counts as one).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the stream is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

type Responder = Box<dyn FnMut(&ModelRequest) -> ScriptedResponse + Send>;

enum Script {
    Queue(VecDeque<ScriptedResponse>),
    Responder(Responder),
}

/// A deterministic provider replaying [`ScriptedResponse`]s.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use palimpsest_core_agent_loop::{ModelRequest, Provider, ScriptedProvider, ScriptedResponse};
///
/// let provider = ScriptedProvider::new([ScriptedResponse::reply("Hi there")]);
/// assert!(provider.stream(ModelRequest::new(vec![])).await.is_ok());
/// assert_eq!(provider.requests().len(), 1);
/// // The script is used up.
/// assert!(provider.stream(ModelRequest::new(vec![])).await.is_err());
/// # });
/// ```
pub struct ScriptedProvider {
    name: String,
    model: String,
    script: Mutex<Script>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ScriptedProvider {
    /// Replays `responses` in order, one per request; named `scripted` /
    /// `scripted-model`.
    pub fn new(responses: impl IntoIterator<Item = ScriptedResponse>) -> ScriptedProvider {
        ScriptedProvider::with_script(Script::Queue(responses.into_iter().collect()))
    }

    /// Answers each request with `respond(request)`: for scripts that react
    /// to what the model is shown (a tool's output, a summary request).
    pub fn from_fn(
        respond: impl FnMut(&ModelRequest) -> ScriptedResponse + Send + 'static,
    ) -> ScriptedProvider {
        ScriptedProvider::with_script(Script::Responder(Box::new(respond)))
    }

    fn with_script(script: Script) -> ScriptedProvider {
        ScriptedProvider {
            name: "scripted".into(),
            model: "scripted-model".into(),
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Sets the provider and model names written into assistant messages.
    pub fn with_names(mut self, provider: impl Into<String>, model: impl Into<String>) -> ScriptedProvider {
        self.name = provider.into();
        self.model = model.into();
        self
    }

    /// Queues one more response (no effect on a [`from_fn`](ScriptedProvider::from_fn) provider).
    pub fn push(&self, response: ScriptedResponse) {
        if let Script::Queue(q) = &mut *lock(&self.script) {
            q.push_back(response);
        }
    }

    /// How many queued responses are left (0 for a responder).
    pub fn remaining(&self) -> usize {
        match &*lock(&self.script) {
            Script::Queue(q) => q.len(),
            Script::Responder(_) => 0,
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ModelRequest> {
        lock(&self.requests).last().cloned()
    }
}

/// A poisoned lock only means a responder panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
        let response = match &mut *lock(&self.script) {
            Script::Queue(q) => q.pop_front(),
            Script::Responder(respond) => Some(respond(&request)),
        };
        let n = {
            let mut requests = lock(&self.requests);
            requests.push(request);
            requests.len()
        };
        let result = match response {
            None => {
                Err(ProviderError::other(SCRIPT_EXHAUSTED, format!("no scripted response for request {n}")))
            }
            Some(ScriptedResponse { refusal: Some(error), .. }) => Err(error),
            Some(ScriptedResponse { refusal: None, items }) => {
                Ok(Box::pin(ScriptStream { items: items.into() }) as ChunkStream<'_>)
            }
        };
        Box::pin(std::future::ready(result))
    }
}

/// The stream of one scripted response.
struct ScriptStream {
    items: VecDeque<ScriptItem>,
}

impl Stream for ScriptStream {
    type Item = Result<StreamItem, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.items.pop_front() {
            None => Poll::Ready(None),
            Some(ScriptItem::Item(item)) => Poll::Ready(Some(Ok(item))),
            Some(ScriptItem::Error(error)) => {
                // An error ends the stream.
                self.items.clear();
                Poll::Ready(Some(Err(error)))
            }
            Some(ScriptItem::Hang) => {
                // Never woken: the stream stays pending until it is dropped.
                self.items.push_front(ScriptItem::Hang);
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(
        provider: &ScriptedProvider,
    ) -> Result<Vec<Result<StreamItem, ProviderError>>, ProviderError> {
        let mut stream = provider.stream(ModelRequest::new(vec![])).await?;
        let mut out = Vec::new();
        while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            out.push(item);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn reply_streams_words_then_stop() {
        let p = ScriptedProvider::new([ScriptedResponse::reply("Hello  big world")]);
        let items = collect(&p).await.unwrap_or_default();
        let texts: Vec<String> = items
            .iter()
            .filter_map(|i| match i {
                Ok(StreamItem::Chunk(StreamChunk::TextDelta { text, .. })) => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["Hello  ", "big ", "world"]);
        assert!(matches!(items.last(), Some(Ok(StreamItem::Finish(FinishReason::Stop)))));
    }

    #[tokio::test]
    async fn error_ends_the_stream_and_refusal_fails_the_call() {
        let p = ScriptedProvider::new([
            ScriptedResponse::new().text(0, "a").error(ProviderError::stream("cut")).text(0, "never"),
            ScriptedResponse::refuse(ProviderError::refused("no")),
        ]);
        let items = collect(&p).await.unwrap_or_default();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].as_ref().err().map(ProviderError::code), Some("PROVIDER_STREAM"));
        let refused = collect(&p).await;
        assert_eq!(refused.err().map(|e| e.code().to_owned()).as_deref(), Some("PROVIDER_REFUSED"));
        let exhausted = collect(&p).await;
        assert_eq!(exhausted.err().map(|e| e.code().to_owned()).as_deref(), Some(SCRIPT_EXHAUSTED));
        assert_eq!(p.requests().len(), 3);
    }

    #[tokio::test]
    async fn tool_call_pieces_name_only_the_first_delta() {
        let r = ScriptedResponse::new().tool_call(2, "c1", "read", &["{", "}"]);
        let p = ScriptedProvider::from_fn(move |_| r.clone()).with_names("p", "m");
        assert_eq!((p.name(), p.model()), ("p", "m"));
        let items = collect(&p).await.unwrap_or_default();
        let expected = [
            StreamChunk::ToolCallDelta {
                index: 2,
                id: "c1".into(),
                name: Some("read".into()),
                arguments_delta: "{".into(),
            },
            StreamChunk::ToolCallDelta { index: 2, id: "c1".into(), name: None, arguments_delta: "}".into() },
        ];
        let got: Vec<StreamChunk> = items
            .into_iter()
            .filter_map(|i| match i {
                Ok(StreamItem::Chunk(c)) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn hang_stays_pending() {
        let p = ScriptedProvider::new([ScriptedResponse::new().text(0, "x").hang()]);
        let mut stream = match p.stream(ModelRequest::new(vec![])).await {
            Ok(s) => s,
            Err(e) => panic!("scripted stream failed: {e}"),
        };
        let first = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await;
        assert!(matches!(first, Some(Ok(StreamItem::Chunk(_)))));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(stream.as_mut().poll_next(&mut cx).is_pending());
        assert!(stream.as_mut().poll_next(&mut cx).is_pending());
    }
}
