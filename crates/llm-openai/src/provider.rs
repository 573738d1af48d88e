//! [`OpenAiProvider`]: the loop's [`Provider`] over HTTP.
//!
//! One `stream` call POSTs the [`request_body`] to the endpoint, retrying
//! per the [`RetryPolicy`](crate::RetryPolicy) until a success status comes
//! back (or the retries run out), then returns a stream that reads the
//! response body piece by piece through a [`StreamDecoder`]. Dropping the
//! stream closes the connection, so a cancelled turn stops the generation
//! on servers that notice.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use palimpsest_core_agent_loop::{BoxFuture, ChunkStream, ModelRequest, Provider, ProviderError, StreamItem};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Response, Url};
use tracing::Instrument;

use crate::config::{ConfigError, OpenAiConfig};
use crate::decode::StreamDecoder;
use crate::error::{body_error, is_retryable, retry_after, send_error, server_message, status_error};
use crate::request::request_body;

/// The most bytes of an error response read for its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A [`Provider`] for an OpenAI-compatible `chat/completions` endpoint.
///
/// Building one does no I/O; each [`Provider::stream`] call makes one
/// streaming request (plus its retries).
///
/// ```
/// use palimpsest_core_agent_loop::Provider;
/// use palimpsest_llm_openai::{OpenAiConfig, OpenAiProvider};
///
/// let config = OpenAiConfig::new("http://127.0.0.1:8000/v1", "qwen3-8b").with_provider_name("vllm");
/// let provider = OpenAiProvider::new(config)?;
/// assert_eq!((provider.name(), provider.model()), ("vllm", "qwen3-8b"));
/// assert_eq!(provider.endpoint().as_str(), "http://127.0.0.1:8000/v1/chat/completions");
/// # Ok::<(), palimpsest_llm_openai::ConfigError>(())
/// ```
pub struct OpenAiProvider {
    config: OpenAiConfig,
    endpoint: Url,
    /// The endpoint as error messages show it: no user-info, no query.
    shown_endpoint: String,
    client: reqwest::Client,
    headers: HeaderMap,
    /// The API key and the extra headers' values: taken out of every
    /// error message, which may quote what a server echoed back (an
    /// "incorrect API key" body that repeats the key) and ends up in the
    /// log and on the terminal.
    secrets: Arc<[String]>,
    /// Told of each retry before its wait ([`OpenAiProvider::on_retry`]).
    on_retry: Option<Arc<RetryObserver>>,
}

/// What [`OpenAiProvider::on_retry`] is given.
type RetryObserver = dyn Fn(&RetryNotice) + Send + Sync;

/// A request about to be sent again, as told to an
/// [`OpenAiProvider::on_retry`] observer before the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryNotice {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How many attempts there will be at most.
    pub attempts: u32,
    /// How long the provider waits before the next one (what the server
    /// asked, `Retry-After`, capped; else the backoff).
    pub delay: std::time::Duration,
    /// Whether the server asked for the wait (`Retry-After`).
    pub asked: bool,
    /// Whether the server asked for longer than the provider waits
    /// ([`RetryPolicy::max_retry_after`](crate::RetryPolicy::max_retry_after)).
    pub capped: bool,
    /// The failure's code (`PROVIDER_RATE_LIMITED`, `PROVIDER_UNAVAILABLE`).
    pub code: String,
    /// The failure, as an error would say it (secrets taken out).
    pub message: String,
}

/// Redirects are followed only within the endpoint's origin (scheme, host
/// and port), at most [`MAX_REDIRECTS`] of them. A redirect elsewhere would
/// carry the extra headers (an `api-key`, an `x-api-key`) and the whole
/// conversation to another server: reqwest drops only `Authorization` on
/// the way. It is not followed, and the request fails with the redirect's
/// status, which names where it pointed.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(Url::origin);
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if first.is_some_and(|origin| origin == attempt.url().origin()) {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// The most redirects within the endpoint's origin a request follows.
const MAX_REDIRECTS: usize = 5;

/// `message` with every secret replaced by `***`.
fn scrub(message: String, secrets: &[String]) -> String {
    secrets.iter().fold(message, |m, secret| {
        if m.contains(secret.as_str()) {
            m.replace(secret.as_str(), "***")
        } else {
            m
        }
    })
}

/// Every text an error message must not carry: the API key, the extra
/// headers' values, and the endpoint's password and query values, each as
/// written and as a server may echo it back, JSON-escaped or
/// percent-encoded (an outside probe found those forms logged). Short
/// values would blank out ordinary words; keys are long.
fn secret_forms(config: &OpenAiConfig, endpoint: &reqwest::Url) -> Arc<[String]> {
    let from_url = endpoint
        .password()
        .map(str::to_owned)
        .into_iter()
        .chain(endpoint.query_pairs().flat_map(|(_, value)| [value.into_owned()]))
        .chain(endpoint.query().map(str::to_owned).into_iter().flat_map(|q| {
            q.split('&')
                .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_owned()))
                .collect::<Vec<_>>()
        }));
    let plain: Vec<String> = config
        .api_key
        .iter()
        .chain(config.extra_headers.iter().map(|(_, value)| value))
        .cloned()
        .chain(from_url)
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .collect();
    let mut forms: Vec<String> = Vec::new();
    for secret in plain {
        let json = serde_json::to_string(&secret).unwrap_or_default();
        let json = json.trim_matches('"').to_owned();
        // JSON may also escape `/` (as `\/`, an HTML-safe writer's habit);
        // percent-encoders differ in case and in what they leave alone
        // (Python's `quote` keeps `/`, form encoders `=`).
        let json_slash = json.replace('/', "\\/");
        let encoded = [("", false), ("", true), ("/", false), ("/", true), ("/=+", false), ("/=+", true)]
            .map(|(safe, lower)| percent_encoded(&secret, safe, lower));
        for form in encoded.into_iter().chain([json_slash, json, secret]) {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    // Longest first, so that a form inside another is not replaced first
    // and leaves the rest of the longer one behind.
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.into()
}

/// The shortest value taken for a secret: shorter ones are ordinary words
/// (`ollama`, `none`, `test` as keys blanked out `ollama pull` and
/// `llama3:latest` in error messages: an outside probe), and no real key
/// is that short.
const MIN_SECRET_LEN: usize = 8;

/// `text` percent-encoded: every byte but the URL-unreserved ones and
/// those in `safe` as `%XX`, in lower-case hex if `lower`.
fn percent_encoded(text: &str, safe: &str, lower: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || safe.as_bytes().contains(&b) {
            out.push(char::from(b));
        } else if lower {
            out.push_str(&format!("%{b:02x}"));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl OpenAiProvider {
    /// A provider for `config`. Fails on an empty model
    /// ([`ConfigError::MissingModel`], as
    /// [`OpenAiConfig::from_env_and_flags`] refuses one), a base URL that
    /// is not a usable `http(s)` URL, an API key or extra header that
    /// cannot be sent, or an HTTP client that cannot be built.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiProvider, ConfigError> {
        if config.model.trim().is_empty() {
            return Err(ConfigError::MissingModel);
        }
        let endpoint = config.endpoint()?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(key) = &config.api_key {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ConfigError::InvalidHeader {
                    name: AUTHORIZATION.to_string(),
                    reason: "the API key contains characters a header cannot carry".into(),
                })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        for (name, value) in &config.extra_headers {
            let invalid =
                |reason: &str| ConfigError::InvalidHeader { name: name.clone(), reason: reason.into() };
            let header =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("not a valid header name"))?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| invalid("its value is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!(env!("CARGO_PKG_NAME"), "/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(config.connect_timeout)
            .redirect(same_origin_redirects());
        if let Some(idle) = config.idle_timeout {
            builder = builder.read_timeout(idle);
        }
        let client = builder.build().map_err(|source| ConfigError::HttpClient { source })?;
        let shown_endpoint = crate::config::redact(endpoint.as_str());
        let secrets = secret_forms(&config, &endpoint);
        Ok(OpenAiProvider { config, endpoint, shown_endpoint, client, headers, secrets, on_retry: None })
    }

    /// Tells `observer` of each retry before its wait: a rate limit's
    /// `Retry-After` of a minute, waited out in silence, looked like a hang
    /// (the waits are also logged through `tracing` at `debug`).
    ///
    /// ```
    /// use palimpsest_llm_openai::{OpenAiConfig, OpenAiProvider};
    ///
    /// let provider = OpenAiProvider::new(OpenAiConfig::new("http://127.0.0.1:8000/v1", "m"))?
    ///     .on_retry(|n| eprintln!("retrying in {:?} ({})", n.delay, n.code));
    /// # let _ = provider;
    /// # Ok::<(), palimpsest_llm_openai::ConfigError>(())
    /// ```
    pub fn on_retry(mut self, observer: impl Fn(&RetryNotice) + Send + Sync + 'static) -> OpenAiProvider {
        self.on_retry = Some(Arc::new(observer));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// The URL requests go to, as it may be shown or logged: without
    /// user-info or query string (see [`OpenAiConfig::shown_base_url`]).
    pub fn shown_endpoint(&self) -> &str {
        &self.shown_endpoint
    }

    /// The JSON body this provider sends for `request` (see [`request_body`]).
    pub fn request_body(&self, request: &ModelRequest) -> serde_json::Value {
        request_body(&self.config, request)
    }

    /// Sends the request, retrying before the stream starts; returns the
    /// successful response.
    async fn send(&self, body: Vec<u8>) -> Result<Response, ProviderError> {
        let policy = &self.config.retry;
        // Error messages end up in the log (a turn's error): no secrets.
        let url = self.shown_endpoint.as_str();
        let mut retry = 0u32;
        loop {
            let attempt = retry + 1;
            let sent = self
                .client
                .post(self.endpoint.clone())
                .headers(self.headers.clone())
                .body(body.clone())
                .send()
                .await;
            let (error, retryable, asked) = match sent {
                Ok(response) if response.status().is_success() => {
                    tracing::debug!(
                        attempt,
                        status = response.status().as_u16(),
                        request_id = response.headers().get("x-request-id").and_then(|v| v.to_str().ok()),
                        "stream started"
                    );
                    return Ok(response);
                }
                Ok(response) => {
                    let status = response.status();
                    let asked = retry_after(response.headers());
                    let body = read_limited(response).await;
                    (status_error(status, url, &body, asked, attempt), is_retryable(status), asked)
                }
                Err(e) => {
                    // A server that took the request and stayed silent for
                    // the whole idle timeout is not asked again: with the
                    // default ten minutes and two retries, a hung server
                    // held the turn for half an hour. Failing to connect
                    // (a connect timeout included) is retried.
                    let silent = e.is_timeout() && !e.is_connect();
                    let retryable = (e.is_connect() || e.is_request()) && !silent;
                    (send_error(e.without_url(), url, attempt), retryable, None)
                }
            };
            // Scrubbed before it is logged or returned.
            let error = error.map_message(|m| scrub(m, &self.secrets));
            if !retryable || retry >= policy.max_retries {
                tracing::warn!(attempt, code = error.code(), error = %error, "request failed");
                return Err(error);
            }
            let delay = policy.delay(retry, asked);
            tracing::debug!(attempt, delay_ms = delay.as_millis() as u64, code = error.code(), error = %error, "retrying");
            if let Some(observer) = &self.on_retry {
                observer(&RetryNotice {
                    attempt,
                    attempts: policy.max_retries + 1,
                    delay,
                    asked: asked.is_some(),
                    capped: asked.is_some_and(|asked| asked > delay),
                    code: error.code().to_owned(),
                    message: error.to_string(),
                });
            }
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    async fn start(&self, request: ModelRequest) -> Result<ChunkStream<'_>, ProviderError> {
        let body = serde_json::to_vec(&self.request_body(&request)).map_err(|e| {
            ProviderError::other("PROVIDER_REQUEST", format!("cannot encode the request: {e}"))
        })?;
        let scrubbed = |e: ProviderError| e.map_message(|m| scrub(m, &self.secrets));
        let response = self.send(body).await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim()
            .to_owned();
        if content_type.starts_with("text/html") {
            // A proxy's or a login page: say what came, not that the
            // event stream was empty.
            let body = read_limited(response).await;
            return Err(scrubbed(ProviderError::stream(format!(
                "the server answered with {content_type} instead of an event stream: {}",
                server_message(&body)
            ))));
        }
        let is_json = content_type.starts_with("application/json");
        if is_json {
            // A server that answers a streaming request with one JSON body:
            // an error object, or a completion that ignored `stream`.
            let body = read_limited(response).await;
            return Err(scrubbed(ProviderError::stream(format!(
                "the server answered with JSON instead of an event stream: {}",
                server_message(&body)
            ))));
        }
        let secrets = self.secrets.clone();
        Ok(Box::pin(
            chunk_stream(response, self.config.max_stream_bytes)
                .map(move |item| item.map_err(|e| e.map_message(|m| scrub(m, &secrets)))),
        ))
    }
}

/// How long a stream may go on after its finish reason (for its usage
/// chunk and `[DONE]`) before it is taken as ended there. A server that
/// sent the whole answer and its finish reason, then kept the connection
/// open (with keep-alive comments, or silent), held the turn until the
/// idle timeout and had the complete answer logged as failed (an outside
/// probe). The grace runs from the finish reason; comments and usage
/// chunks do not extend it, and content after the finish ends it (the
/// finish was not the end: the idle timeout applies again).
const AFTER_FINISH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The response body as stream items.
fn chunk_stream(
    response: Response,
    max_bytes: u64,
) -> impl futures_util::Stream<Item = Result<StreamItem, ProviderError>> + Send {
    struct State {
        response: Option<Response>,
        decoder: StreamDecoder,
        queue: VecDeque<Result<StreamItem, ProviderError>>,
        bytes: u64,
        /// When the stream ends at the latest, once its finish reason came.
        finish_by: Option<tokio::time::Instant>,
    }
    let state = State {
        response: Some(response),
        decoder: StreamDecoder::new(),
        queue: VecDeque::new(),
        bytes: 0,
        finish_by: None,
    };
    stream::unfold(state, move |mut state| async move {
        loop {
            if let Some(item) = state.queue.pop_front() {
                return Some((item, state));
            }
            // The grace runs while the answer is whole: from its finish
            // reason, and not past content that came after it (that says
            // the finish was not the end; the idle timeout applies again).
            if !state.decoder.is_whole() {
                state.finish_by = None;
            } else if state.finish_by.is_none() {
                state.finish_by = Some(tokio::time::Instant::now() + AFTER_FINISH_GRACE);
            }
            let response = state.response.as_mut()?;
            let read = match state.finish_by {
                None => Some(response.chunk().await),
                Some(deadline) => tokio::time::timeout_at(deadline, response.chunk()).await.ok(),
            };
            match read {
                Some(Ok(Some(bytes))) => {
                    state.bytes += bytes.len() as u64;
                    state.queue.extend(state.decoder.feed(&bytes));
                    if state.bytes > max_bytes {
                        state.queue.push_back(Err(ProviderError::stream(format!(
                            "the event stream passed {max_bytes} bytes; it was ended there"
                        ))));
                    }
                }
                Some(Ok(None)) => state.queue.extend(state.decoder.finish()),
                // A connection reset, a bad chunked encoding or a body short
                // of its length after a whole answer: the answer stands.
                Some(Err(e)) if state.decoder.is_whole() => {
                    tracing::warn!(error = %e, "the connection failed after the finish reason; the answer is whole");
                    state.queue.extend(state.decoder.finish());
                }
                Some(Err(e)) => state.queue.push_back(Err(body_error(e.without_url()))),
                None => {
                    tracing::debug!(
                        grace_ms = AFTER_FINISH_GRACE.as_millis() as u64,
                        "no [DONE] after the finish reason; ending the stream there"
                    );
                    state.queue.extend(state.decoder.finish());
                }
            }
            let failed = state.queue.back().is_some_and(Result::is_err);
            if failed || state.decoder.is_done() {
                // Done, cut or unreadable: stop reading (dropping the
                // response closes the connection).
                state.response = None;
                tracing::debug!(bytes = state.bytes, failed, "event stream ended");
            }
        }
    })
}

/// At most [`MAX_ERROR_BODY`] bytes of a response body; a read failure
/// ends it early (the status is what matters then).
async fn read_limited(mut response: Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(bytes)) => body.extend_from_slice(&bytes),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    body
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.shown_endpoint)
            .field("config", &self.config)
            .finish()
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.config.provider_name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: ModelRequest) -> BoxFuture<'_, Result<ChunkStream<'_>, ProviderError>> {
        let span = tracing::debug_span!(
            "openai_stream",
            provider = %self.config.provider_name,
            model = %self.config.model,
            endpoint = %self.endpoint,
            messages = request.messages.len(),
        );
        Box::pin(self.start(request).instrument(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_model_is_refused_as_the_config_lookup_refuses_it() {
        // `OpenAiConfig::new` + `OpenAiProvider::new` took one, and every
        // request then failed at the server (a downstream probe).
        for model in ["", "  "] {
            let err = OpenAiProvider::new(OpenAiConfig::new("http://127.0.0.1:8/v1", model)).map(drop);
            assert_eq!(err.map_err(|e| e.code()), Err("CONFIG_MISSING_MODEL"), "{model:?}");
        }
        assert!(OpenAiProvider::new(OpenAiConfig::new("http://127.0.0.1:8/v1", "m")).is_ok());
    }

    #[test]
    fn a_secret_echoed_back_escaped_or_encoded_is_scrubbed() {
        let mut config = OpenAiConfig::new("http://h:8/v1?key=QSECRET9&api-version=1", "m");
        config.api_key = Some(r#"sk-"q\uote\back"#.to_owned());
        let endpoint = config.endpoint().expect("an endpoint");
        let secrets = secret_forms(&config, &endpoint);
        let echoes = [
            r#"{"error":"bad key sk-\"q\\uote\\back"}"#.to_owned(),
            "bad key sk-%22q%5Cuote%5Cback".to_owned(),
            r#"bad key sk-"q\uote\back"#.to_owned(),
            "GET /v1/chat/completions?key=QSECRET9 refused".to_owned(),
        ];
        for echo in echoes {
            let scrubbed = scrub(echo.clone(), &secrets);
            assert!(scrubbed.contains("***"), "{echo} -> {scrubbed}");
            for leak in ["q\\uote", "q%5Cuote", "QSECRET9"] {
                assert!(!scrubbed.contains(leak), "{echo} -> {scrubbed}");
            }
        }
        // A short value is left alone: it would blank out ordinary words.
        assert_eq!(scrub("api-version 1".to_owned(), &secrets), "api-version 1");
    }

    #[test]
    fn a_key_with_slashes_and_equals_is_scrubbed_however_it_is_encoded() {
        let mut config = OpenAiConfig::new("http://h:8/v1", "m");
        config.api_key = Some("AbCdEf0123+gHiJkL/4567mNoP==".to_owned());
        let endpoint = config.endpoint().expect("an endpoint");
        let secrets = secret_forms(&config, &endpoint);
        for echo in [
            r"key AbCdEf0123+gHiJkL\/4567mNoP== refused",
            "key AbCdEf0123%2BgHiJkL/4567mNoP%3D%3D refused",
            "key AbCdEf0123%2bgHiJkL%2f4567mNoP%3d%3d refused",
            "key AbCdEf0123+gHiJkL/4567mNoP== refused",
        ] {
            assert_eq!(scrub(echo.to_owned(), &secrets), "key *** refused", "{echo}");
        }
        // Ordinary words are not secrets, however the key is spelled.
        let mut config = OpenAiConfig::new("http://h:8/v1", "m");
        config.api_key = Some("ollama".to_owned());
        let secrets = secret_forms(&config, &config.endpoint().expect("an endpoint"));
        assert_eq!(scrub("run ollama pull llama3".to_owned(), &secrets), "run ollama pull llama3");
    }
}
