//! [`OpenAiConfig`]: where the endpoint is, which model to ask, how to
//! authenticate, and the [`RetryPolicy`]; resolved from flags and the
//! `OPENAI_*` environment variables by
//! [`OpenAiConfig::from_env_and_flags`].

use std::fmt;
use std::time::Duration;

/// The environment variable read for the base URL.
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// The environment variable read for the model.
pub const ENV_MODEL: &str = "OPENAI_MODEL";
/// The environment variable read for the API key.
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";

/// The provider name written into assistant messages' source by default.
pub const DEFAULT_PROVIDER_NAME: &str = "openai";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `CONFIG_MISSING_BASE_URL`: neither the flag nor the variable gave a base URL.
    #[error(
        "no base URL: pass --base-url or set {ENV_BASE_URL} (for example https://api.openai.com/v1 or http://127.0.0.1:8000/v1)"
    )]
    MissingBaseUrl,
    /// `CONFIG_MISSING_MODEL`: neither the flag nor the variable named a model.
    #[error("no model: pass --model or set {ENV_MODEL} (for example gpt-4o-mini)")]
    MissingModel,
    /// `CONFIG_INVALID_BASE_URL`: the base URL does not parse or is not
    /// `http`/`https`.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `CONFIG_INVALID_HEADER`: an API key or extra header that cannot be
    /// sent in an HTTP header.
    #[error("invalid HTTP header {name:?}: {reason}")]
    InvalidHeader {
        /// The header's name (`authorization` for the API key).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `CONFIG_HTTP_CLIENT`: the HTTP client could not be built (its TLS
    /// setup failed).
    #[error("cannot build the HTTP client")]
    HttpClient {
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
}

impl ConfigError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::MissingBaseUrl => "CONFIG_MISSING_BASE_URL",
            ConfigError::MissingModel => "CONFIG_MISSING_MODEL",
            ConfigError::InvalidBaseUrl { .. } => "CONFIG_INVALID_BASE_URL",
            ConfigError::InvalidHeader { .. } => "CONFIG_INVALID_HEADER",
            ConfigError::HttpClient { .. } => "CONFIG_HTTP_CLIENT",
        }
    }
}

/// Which request field carries the output-token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MaxTokensField {
    /// `max_tokens`: understood by every OpenAI-compatible server
    /// (DeepSeek, vLLM, llama.cpp, Ollama) and by OpenAI's older models.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: required by OpenAI's reasoning models
    /// (o-series, gpt-5), which refuse `max_tokens`.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// When and how often a request is tried again.
///
/// Only failures *before* the response stream starts are retried: a
/// connection error, or an HTTP status of 408, 429 or 5xx. The delay before
/// retry `n` (from 0) is `initial_backoff * 2^n`, capped at `max_backoff`,
/// without jitter, so tests can make it tiny and exact. A `Retry-After`
/// (seconds) or `retry-after-ms` header on the failed response replaces
/// that delay, capped at `max_retry_after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` attempts in all).
    pub max_retries: u32,
    /// The delay before the first retry.
    pub initial_backoff: Duration,
    /// The longest computed delay.
    pub max_backoff: Duration,
    /// The longest wait a server's `Retry-After` can ask for.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 2 retries, 500 ms then 1 s, at most 8 s; `Retry-After` honoured up to 60 s.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> RetryPolicy {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }

    /// The computed delay before retry `retry` (0 for the first retry).
    ///
    /// ```
    /// use std::time::Duration;
    /// use palimpsest_llm_openai::RetryPolicy;
    ///
    /// let p = RetryPolicy::default();
    /// assert_eq!(p.backoff(0), Duration::from_millis(500));
    /// assert_eq!(p.backoff(1), Duration::from_secs(1));
    /// assert_eq!(p.backoff(10), Duration::from_secs(8));
    /// ```
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.initial_backoff.checked_mul(factor).unwrap_or(Duration::MAX).min(self.max_backoff)
    }

    /// The delay before retry `retry`, given what the server asked for.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(asked) => asked.min(self.max_retry_after),
            None => self.backoff(retry),
        }
    }
}

/// Default [`OpenAiConfig::max_stream_bytes`]: 1 GiB. A real answer at the
/// loop's response cap, one token a chunk, is a few hundred megabytes of
/// event stream.
pub const DEFAULT_MAX_STREAM_BYTES: u64 = 1 << 30;

/// Everything [`OpenAiProvider`](crate::OpenAiProvider) needs.
///
/// Build one with [`OpenAiConfig::new`] or
/// [`OpenAiConfig::from_env_and_flags`], then adjust the public fields.
/// `Debug` never shows the API key.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The API base, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:8000/v1`. Requests go to `{base_url}/chat/completions`
    /// (a base that already ends in `/chat/completions` is used as is).
    pub base_url: String,
    /// The model to ask for.
    pub model: String,
    /// Sent as `Authorization: Bearer {api_key}` when set. Local servers
    /// usually need none.
    pub api_key: Option<String>,
    /// The provider name written into assistant messages' source
    /// (default [`DEFAULT_PROVIDER_NAME`]).
    pub provider_name: String,
    /// Which field carries [`ModelRequest::max_output_tokens`](palimpsest_core_agent_loop::ModelRequest).
    pub max_tokens_field: MaxTokensField,
    /// Whether to ask for a usage chunk (`stream_options.include_usage`);
    /// turn it off for a server that refuses `stream_options`.
    pub include_usage: bool,
    /// The most bytes one event stream may send before it is ended with a
    /// `PROVIDER_STREAM` error (default [`DEFAULT_MAX_STREAM_BYTES`]). The
    /// loop's caps count what a stream carries; a stream of events that
    /// carry nothing (empty choices or deltas, comments, blank lines) was
    /// read for as long as a server sent it: 1.6 GB in 25 seconds.
    pub max_stream_bytes: u64,
    /// Extra top-level request fields (`temperature`, `top_p`, `seed`,
    /// `reasoning_effort`, ...). They are written last, so they override
    /// the fields this crate sets.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Extra HTTP headers sent with every request.
    pub extra_headers: Vec<(String, String)>,
    /// How long to wait for a connection (default 30 s).
    pub connect_timeout: Duration,
    /// How long the response may stay silent (before its headers or
    /// between two pieces of its body) before the request fails. `None`
    /// waits forever. Local models may think for minutes before the first
    /// token on long prompts: the default is generous (600 s).
    pub idle_timeout: Option<Duration>,
    /// Retries before the stream starts.
    pub retry: RetryPolicy,
}

impl OpenAiConfig {
    /// A configuration with these settings and the defaults for the rest.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            provider_name: DEFAULT_PROVIDER_NAME.to_owned(),
            max_tokens_field: MaxTokensField::default(),
            include_usage: true,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            extra_body: serde_json::Map::new(),
            extra_headers: Vec::new(),
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(600)),
            retry: RetryPolicy::default(),
        }
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> OpenAiConfig {
        self.api_key = Some(api_key.into());
        self
    }

    /// Sets the provider name written into assistant messages' source.
    pub fn with_provider_name(mut self, name: impl Into<String>) -> OpenAiConfig {
        self.provider_name = name.into();
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> OpenAiConfig {
        self.retry = retry;
        self
    }

    /// The configuration from explicit values (the CLI's `--base-url`,
    /// `--model`, `--api-key`), each falling back to its environment
    /// variable ([`ENV_BASE_URL`], [`ENV_MODEL`], [`ENV_API_KEY`]). An empty
    /// value counts as absent. A missing base URL or model is an error
    /// naming the flag and the variable; the API key is optional.
    pub fn from_env_and_flags(
        base_url: Option<String>,
        model: Option<String>,
        api_key: Option<String>,
    ) -> Result<OpenAiConfig, ConfigError> {
        OpenAiConfig::from_lookup_and_flags(base_url, model, api_key, |name| std::env::var(name).ok())
    }

    /// [`from_env_and_flags`](OpenAiConfig::from_env_and_flags) with the
    /// environment read through `env` (for tests and embedders).
    ///
    /// ```
    /// use palimpsest_llm_openai::OpenAiConfig;
    ///
    /// let env = |name: &str| (name == "OPENAI_MODEL").then(|| "from-env".to_owned());
    /// let config = OpenAiConfig::from_lookup_and_flags(
    ///     Some("http://127.0.0.1:8000/v1".into()), None, None, env,
    /// )?;
    /// assert_eq!(config.model, "from-env");
    /// assert_eq!(config.api_key, None);
    /// # Ok::<(), palimpsest_llm_openai::ConfigError>(())
    /// ```
    pub fn from_lookup_and_flags(
        base_url: Option<String>,
        model: Option<String>,
        api_key: Option<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<OpenAiConfig, ConfigError> {
        let pick = |flag: Option<String>, var: &str| {
            flag.filter(|v| !v.is_empty()).or_else(|| env(var).filter(|v| !v.is_empty()))
        };
        let base_url = pick(base_url, ENV_BASE_URL).ok_or(ConfigError::MissingBaseUrl)?;
        let model = pick(model, ENV_MODEL).ok_or(ConfigError::MissingModel)?;
        let api_key = pick(api_key, ENV_API_KEY);
        let config = OpenAiConfig { api_key, ..OpenAiConfig::new(base_url, model) };
        config.endpoint()?;
        Ok(config)
    }

    /// The chat-completions URL requests go to.
    ///
    /// ```
    /// use palimpsest_llm_openai::OpenAiConfig;
    ///
    /// let c = OpenAiConfig::new("http://127.0.0.1:11434/v1/", "llama3.2");
    /// assert_eq!(c.endpoint()?.as_str(), "http://127.0.0.1:11434/v1/chat/completions");
    /// # Ok::<(), palimpsest_llm_openai::ConfigError>(())
    /// ```
    pub fn endpoint(&self) -> Result<reqwest::Url, ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidBaseUrl { url: redact(&self.base_url), reason };
        let mut url = reqwest::Url::parse(self.base_url.trim()).map_err(|e| invalid(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!("the scheme must be http or https, not {:?}", url.scheme())));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("it has no host".to_owned()));
        }
        // The path gets `/chat/completions`; a query string stays a query;
        // a fragment is never sent.
        url.set_fragment(None);
        let path = url.path().trim_end_matches('/').to_owned();
        if path.ends_with("/chat/completions") {
            url.set_path(&path);
        } else {
            url.set_path(&format!("{path}/chat/completions"));
        }
        Ok(url)
    }

    /// The base URL as it may be written down (in a session's settings, a
    /// message, a log line): without user-info (`user:password@`), query
    /// string or fragment, where API keys and passwords hide, and without
    /// a trailing `/`.
    ///
    /// ```
    /// use palimpsest_llm_openai::OpenAiConfig;
    ///
    /// let c = OpenAiConfig::new("http://user:secret@127.0.0.1:8000/v1/?key=secret2", "m");
    /// assert_eq!(c.shown_base_url(), "http://127.0.0.1:8000/v1");
    /// ```
    pub fn shown_base_url(&self) -> String {
        redact(&self.base_url)
    }
}

/// `url` without user-info, query string, fragment and trailing `/`. Text
/// that does not parse as a URL with a host loses what comes before its
/// last `@` and after its first `?` or `#`, so that no secret it holds is
/// repeated.
pub(crate) fn redact(url: &str) -> String {
    match reqwest::Url::parse(url.trim()) {
        Ok(mut parsed) if parsed.has_host() => {
            // Only fails for URLs that cannot have user-info: nothing to remove then.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.as_str().trim_end_matches('/').to_owned()
        }
        _ => {
            let text = url.trim();
            let (text, cut) = match text.find(['?', '#']) {
                Some(i) => (&text[..i], "…"),
                None => (text, ""),
            };
            match text.rfind('@') {
                Some(i) => format!("…{}{cut}", &text[i..]),
                None => format!("{text}{cut}"),
            }
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            // The URL's password and query hold secrets as the key does.
            .field("base_url", &redact(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("provider_name", &self.provider_name)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("include_usage", &self.include_usage)
            .field("max_stream_bytes", &self.max_stream_bytes)
            .field("extra_body", &self.extra_body)
            .field("extra_headers", &self.extra_headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn flags_win_over_the_environment_and_empty_counts_as_absent() {
        let env = env_of(&[
            (ENV_BASE_URL, "http://env.example/v1"),
            (ENV_MODEL, "env-model"),
            (ENV_API_KEY, "env-key"),
        ]);
        let c = OpenAiConfig::from_lookup_and_flags(
            Some("http://flag.example/v1".into()),
            Some(String::new()),
            Some("flag-key".into()),
            &env,
        );
        let c = c.map(|c| (c.base_url, c.model, c.api_key));
        assert_eq!(
            c.ok(),
            Some(("http://flag.example/v1".into(), "env-model".into(), Some("flag-key".into())))
        );

        let c = OpenAiConfig::from_lookup_and_flags(None, None, None, &env).map(|c| c.api_key);
        assert_eq!(c.ok(), Some(Some("env-key".into())));
    }

    #[test]
    fn missing_settings_name_the_flag_and_the_variable() {
        let none = OpenAiConfig::from_lookup_and_flags(None, Some("m".into()), None, |_| None);
        let err = none.err();
        assert_eq!(err.as_ref().map(ConfigError::code), Some("CONFIG_MISSING_BASE_URL"));
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("--base-url") && text.contains("OPENAI_BASE_URL"), "{text}");

        let env = env_of(&[(ENV_BASE_URL, "http://127.0.0.1:8000/v1"), (ENV_MODEL, "")]);
        let err = OpenAiConfig::from_lookup_and_flags(None, None, None, env).err();
        assert_eq!(err.as_ref().map(ConfigError::code), Some("CONFIG_MISSING_MODEL"));
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("--model") && text.contains("OPENAI_MODEL"), "{text}");

        // No key is fine: local servers need none.
        let ok = OpenAiConfig::from_lookup_and_flags(
            Some("http://127.0.0.1:8000/v1".into()),
            Some("m".into()),
            None,
            |_| None,
        );
        assert_eq!(ok.ok().map(|c| c.api_key), Some(None));
    }

    #[test]
    fn endpoints_are_built_and_bad_urls_refused() {
        let ep = |base: &str| {
            OpenAiConfig::new(base, "m").endpoint().map(|u| u.to_string()).map_err(|e| e.to_string())
        };
        assert_eq!(ep("http://127.0.0.1:8000/v1"), Ok("http://127.0.0.1:8000/v1/chat/completions".into()));
        assert_eq!(
            ep(" https://api.deepseek.com// "),
            Ok("https://api.deepseek.com/chat/completions".into())
        );
        assert_eq!(
            ep("http://h/v1/chat/completions/"),
            Ok("http://h/v1/chat/completions".into()),
            "a full endpoint is kept"
        );
        assert_eq!(
            ep("ftp://h/v1"),
            Err("invalid base URL \"ftp://h/v1\": the scheme must be http or https, not \"ftp\"".into())
        );
        assert_eq!(ep("127.0.0.1:8000/v1").map_err(|_| ()), Err(()));
        assert_eq!(ep("not a url").map_err(|_| ()), Err(()));
        let bad = OpenAiConfig::from_lookup_and_flags(Some("nope".into()), Some("m".into()), None, |_| None);
        assert_eq!(bad.err().map(|e| e.code()), Some("CONFIG_INVALID_BASE_URL"));
    }

    #[test]
    fn a_query_in_the_base_url_stays_a_query_and_secrets_are_never_shown() {
        let c = OpenAiConfig::new("http://user:secret@h:8/v1/?key=secret2#frag", "m");
        assert_eq!(
            c.endpoint().map(|u| u.to_string()).ok().as_deref(),
            Some("http://user:secret@h:8/v1/chat/completions?key=secret2")
        );
        assert_eq!(c.shown_base_url(), "http://h:8/v1");
        assert_eq!(
            OpenAiConfig::new("https://api.example.com", "m").shown_base_url(),
            "https://api.example.com"
        );
        assert_eq!(redact("not a url?key=secret2"), "not a url…");
        assert_eq!(redact("user:secret@host/v1?k=secret2"), "…@host/v1…");
        let bad = OpenAiConfig::new("ftp://user:secret@h/v1?key=secret2", "m")
            .endpoint()
            .err()
            .map(|e| e.to_string());
        let bad = bad.unwrap_or_default();
        assert!(!bad.contains("secret"), "{bad}");
    }

    #[test]
    fn debug_never_shows_the_api_key_or_the_urls_secrets() {
        let mut c =
            OpenAiConfig::new("http://u:pw-secret@h/v1?key=q-secret", "m").with_api_key("sk-secret-123");
        c.extra_headers.push(("x-org".into(), "org-secret".into()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret-123") && !shown.contains("org-secret"), "{shown}");
        assert!(!shown.contains("pw-secret") && !shown.contains("q-secret"), "the URL's secrets: {shown}");
        assert!(shown.contains("<redacted>") && shown.contains("h/v1"), "{shown}");
    }

    #[test]
    fn backoff_doubles_and_is_capped_and_retry_after_is_capped() {
        let p = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(35),
            max_retry_after: Duration::from_millis(100),
        };
        let delays: Vec<u128> = (0..4).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(delays, [10, 20, 35, 35]);
        assert_eq!(p.backoff(u32::MAX), Duration::from_millis(35));
        assert_eq!(p.delay(0, Some(Duration::from_millis(70))), Duration::from_millis(70));
        assert_eq!(p.delay(0, Some(Duration::from_secs(30))), Duration::from_millis(100));
        assert_eq!(p.delay(1, None), Duration::from_millis(20));
        assert_eq!(RetryPolicy::none().max_retries, 0);
    }
}
