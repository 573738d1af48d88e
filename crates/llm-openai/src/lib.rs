//! An OpenAI-compatible chat-completions provider for the Palimpsest agent
//! loop: [`OpenAiProvider`] implements the loop's
//! [`Provider`](palimpsest_core_agent_loop::Provider) over HTTP, streaming
//! the response as server-sent events.
//!
//! It speaks the `POST {base}/chat/completions` dialect that OpenAI,
//! DeepSeek, vLLM, llama.cpp's `llama-server`, Ollama and most hosted
//! gateways share, so one crate reaches all of them (the README lists base
//! URLs). Who should depend on it: an application (or the `palimpsest`
//! CLI) that wires a real model into an `AgentLoop`. The loop itself knows
//! only the trait.
//!
//! # The key decision: decode, don't assemble
//!
//! The provider turns the byte stream into the contract's `StreamChunk`s
//! one network read at a time and hands each to the loop at once; it never
//! buffers a response to assemble it. The loop logs every chunk as an
//! `assistant/chunk` before it reads the next and builds the message
//! itself, so what a user saw streamed is in the log even when the
//! connection breaks a second later. The price is that the decoder must
//! keep deltas self-describing: each tool-call delta repeats its call id,
//! which OpenAI sends on the first delta only.
//!
//! # Pieces
//!
//! | item | what it does | I/O |
//! |---|---|---|
//! | [`OpenAiConfig`] | endpoint, model, key, retry policy; from flags and `OPENAI_*` variables | reads the environment |
//! | [`request_body`] | a `ModelRequest` as chat-completions JSON (mapping in [`request`]'s docs) | none |
//! | [`StreamDecoder`] | event-stream bytes → `StreamItem`s (mapping in [`decode`]'s docs) | none |
//! | [`OpenAiProvider`] | sends, retries, streams | HTTP |
//!
//! # Failures
//!
//! Before the response stream starts, connection errors and HTTP 408, 429
//! and 5xx are retried with exponential backoff (deterministic, no jitter;
//! `Retry-After` honoured up to a cap), then reported as typed
//! [`ProviderError`](palimpsest_core_agent_loop::ProviderError)s carrying
//! the status, the URL and the server's message (the table is in
//! [`error`]'s docs). Once the stream has started, nothing is retried: a
//! cut connection, a garbage event or an error event mid-stream ends the
//! stream with a `PROVIDER_STREAM` error, and the loop keeps the chunks it
//! already logged. Nothing here panics on what a server sends.
//!
//! # Runtime
//!
//! [`OpenAiProvider::stream`](palimpsest_core_agent_loop::Provider::stream)
//! must run inside a tokio runtime with I/O and time enabled (the HTTP
//! client and the retry delays need both), as `#[tokio::main]` and
//! `Builder::enable_all` give. Building the provider, [`request_body`] and
//! [`StreamDecoder`] need no runtime.
//!
//! # TLS
//!
//! HTTPS uses rustls with the `ring` backend and Mozilla's root
//! certificates compiled in (`reqwest`'s `rustls-tls` feature): it builds
//! with only a Rust toolchain and a C compiler, needs no system OpenSSL and
//! no CA bundle on the machine. There are no optional features.
//!
//! # Diagnostics
//!
//! The crate emits `tracing` spans and events (`openai_stream` per request,
//! with the attempt, delays, statuses and the server's `x-request-id`) and
//! never prints. The API key is never logged and `Debug` redacts it.
//!
//! # Example
//!
//! Building a provider and the body it would send does no I/O:
//!
//! ```
//! use palimpsest_core_agent_loop::{ModelRequest, Provider, ToolSpec};
//! use palimpsest_core_session::payload::{Block, Message, Role, Source};
//! use palimpsest_llm_openai::{OpenAiConfig, OpenAiProvider};
//! use serde_json::json;
//!
//! // In the CLI: OpenAiConfig::from_env_and_flags(base_url_flag, model_flag, api_key_flag)?
//! let config = OpenAiConfig::new("http://127.0.0.1:8000/v1", "qwen3-8b");
//! let provider = OpenAiProvider::new(config)?;
//!
//! let history = vec![
//!     Message { id: "u1".into(), role: Role::User, content: vec![Block::text("List the files.")], source: Source::User },
//!     Message {
//!         id: "a1".into(),
//!         role: Role::Assistant,
//!         content: vec![
//!             Block::Reasoning { text: "I need ls.".into(), signature: None },
//!             Block::ToolCall { id: "call_1".into(), name: "ls".into(), arguments: "{}".into() },
//!         ],
//!         source: Source::Model { provider: "openai".into(), model: "qwen3-8b".into() },
//!     },
//!     Message {
//!         id: "r1".into(),
//!         role: Role::User,
//!         content: vec![Block::ToolResult { tool_call_id: "call_1".into(), is_error: false, content: vec![Block::text("a.txt")] }],
//!         source: Source::Tool { call_id: "call_1".into() },
//!     },
//! ];
//! let tools = vec![ToolSpec { name: "ls".into(), description: "Lists files.".into(), parameters: json!({"type": "object"}) }];
//! let request = ModelRequest::new(history).with_tools(tools).with_max_output_tokens(256);
//!
//! let body = provider.request_body(&request);
//! assert_eq!(
//!     body["messages"],
//!     json!([
//!         {"role": "user", "content": "List the files."},
//!         // Reasoning is not sent back.
//!         {"role": "assistant", "content": null, "tool_calls": [
//!             {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
//!         ]},
//!         {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}
//!     ])
//! );
//! assert_eq!(body["tools"][0]["function"]["name"], "ls");
//! assert_eq!(body["max_tokens"], 256);
//! assert_eq!(body["stream"], true);
//!
//! // The loop holds it as a trait object and calls `provider.stream(request)`.
//! let provider: std::sync::Arc<dyn Provider> = std::sync::Arc::new(provider);
//! assert_eq!(provider.name(), "openai");
//! # Ok::<(), palimpsest_llm_openai::ConfigError>(())
//! ```
//!
//! # MSRV
//!
//! The workspace's `rust-version` (see the root `Cargo.toml`).

pub mod config;
pub mod decode;
pub mod error;
mod provider;
pub mod request;
mod sse;

pub use config::{
    ConfigError, MaxTokensField, OpenAiConfig, RetryPolicy, DEFAULT_MAX_STREAM_BYTES, DEFAULT_PROVIDER_NAME,
    ENV_API_KEY, ENV_BASE_URL, ENV_MODEL,
};
pub use decode::StreamDecoder;
pub use error::HttpStatusError;
pub use provider::{OpenAiProvider, RetryNotice};
pub use request::request_body;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
