//! The provider against the mock server: exact items, exact requests,
//! retries and failures.

use std::time::{Duration, Instant};

use palimpsest_core_agent_loop::{FinishReason, ModelRequest, ProviderError, StreamItem, ToolSpec};
use palimpsest_core_session::payload::{Block, Message, Role, Source};
use palimpsest_llm_openai::{HttpStatusError, OpenAiProvider, RetryPolicy};
use serde_json::json;

use crate::common::*;
use crate::mock::{split, Body, MockServer, Reply};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn request() -> ModelRequest {
    ModelRequest::new(vec![Message {
        id: "u1".into(),
        role: Role::User,
        content: vec![Block::text("Say hello in French.")],
        source: Source::User,
    }])
    .with_system("You are terse.")
    .with_tools(vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }])
    .with_max_output_tokens(256)
}

/// A whole answer, as two events: `done`, then the finish reason.
fn whole_answer() -> Vec<Vec<u8>> {
    vec![
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"done\"}}]}\n\n".to_vec(),
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_vec(),
    ]
}

/// The one item of `items`, an error: its code and message.
fn one_error<T: std::fmt::Debug>(items: &[Result<T, (String, String)>]) -> Result<(String, String), String> {
    match items {
        [Err(error)] => Ok(error.clone()),
        _ => Err(format!("expected one error, got {items:?}")),
    }
}

fn endpoint(server: &MockServer) -> String {
    format!("{}/chat/completions", server.base_url())
}

#[tokio::test]
async fn a_text_answer_streams_its_deltas_then_finish_then_usage() -> TestResult {
    let server = MockServer::start(vec![Reply::sse(TEXT, 7)]).await?;
    let mut config = config(&server.base_url());
    config.extra_headers.push(("x-trace".into(), "t-1".into()));
    let provider = provider(config)?;

    let items = collect(&provider, request()).await?;
    assert_eq!(
        items,
        [
            text(0, "Bonjour"),
            text(0, " à"),
            text(0, " tous"),
            text(0, " 😀"),
            text(0, " — "),
            text(0, "ça"),
            text(0, " va"),
            text(0, "?"),
            Ok(StreamItem::Finish(FinishReason::Stop)),
            usage(31, 9, Some(16), Some(0)),
        ]
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-key"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    assert_eq!(r.header("x-trace"), Some("t-1"));
    assert!(r.header("user-agent").is_some_and(|ua| ua.starts_with("palimpsest-llm-openai/")));
    insta::assert_json_snapshot!(r.json());
    Ok(())
}

#[tokio::test]
async fn parallel_tool_calls_split_across_deltas_keep_their_ids() -> TestResult {
    let server = MockServer::start(vec![Reply::sse(TOOL_CALLS, 11)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    // Text took block 0; the calls get 1 and 2 in order of appearance, and
    // every delta repeats its call's id, which the server sent once.
    assert_eq!(
        items,
        [
            text(0, "Let me look."),
            call(1, "chatcmpl-tool-a1", Some("read_file"), ""),
            call(1, "chatcmpl-tool-a1", None, "{\"pa"),
            call(2, "chatcmpl-tool-b2", Some("list_dir"), ""),
            call(2, "chatcmpl-tool-b2", None, "{\"dir"),
            call(1, "chatcmpl-tool-a1", None, "th\": \"src/"),
            call(2, "chatcmpl-tool-b2", None, "\": \".\"}"),
            call(1, "chatcmpl-tool-a1", None, "main.rs\"}"),
            Ok(StreamItem::Finish(FinishReason::ToolCalls)),
            usage(120, 41, None, None),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn reasoning_deltas_come_before_text_with_crlf_lines() -> TestResult {
    // The fixture must really use CRLF (a checkout that rewrote it would
    // make this test weaker without failing it).
    assert!(REASONING.windows(2).filter(|w| w == b"\r\n").count() > 10);
    assert!(!REASONING.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r'));
    let server = MockServer::start(vec![Reply::sse(REASONING, 5)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(
        items,
        [
            reasoning(0, "The user"),
            reasoning(0, " asks 2+2."),
            reasoning(0, " That is 4."),
            text(1, "2 + 2"),
            text(1, " = 4"),
            Ok(StreamItem::Finish(FinishReason::Stop)),
            usage(12, 25, Some(0), Some(18)),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_connection_cut_mid_stream_ends_with_a_stream_error_after_the_delivered_chunks() -> TestResult {
    let prefix = first_events(TEXT, 4);
    let server =
        MockServer::start(vec![Reply::event_stream(Body::ChunkedThenCut(split(&prefix, 9)))]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(items.len(), 4, "{items:?}");
    assert_eq!(items[..3], [text(0, "Bonjour"), text(0, " à"), text(0, " tous")]);
    let (code, message) = items[3].clone().err().unwrap_or_default();
    assert_eq!(code, "PROVIDER_STREAM");
    assert!(message.starts_with("provider stream failed: the event stream broke: "), "{message}");
    // Nothing is retried once the stream has started.
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_clean_close_before_done_is_a_stream_error() -> TestResult {
    let prefix = first_events(TEXT, 3);
    let server =
        MockServer::start(vec![Reply::event_stream(Body::CloseDelimited(split(&prefix, 64)))]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(
        items,
        [
            text(0, "Bonjour"),
            text(0, " à"),
            Err((
                "PROVIDER_STREAM".into(),
                "provider stream failed: the event stream ended before [DONE] and before a finish reason, after 3 events"
                    .into()
            )),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn malformed_sse_is_a_typed_stream_error_not_a_panic() -> TestResult {
    let server = MockServer::start(vec![Reply::sse(MALFORMED, 16)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(
        items,
        [
            text(0, "Partial"),
            Err((
                "PROVIDER_STREAM".into(),
                "provider stream failed: event 3 is not a chat completion chunk (expected value at line 1 column 1): \
                 \"<html><body>502 Bad Gateway</body></html>\""
                    .into()
            )),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_429_is_retried_after_the_retry_after_the_server_asked_for() -> TestResult {
    let limited = r#"{"error":{"message":"Rate limit reached for test-model","type":"requests","code":"rate_limit_exceeded"}}"#;
    let server = MockServer::start(vec![
        Reply::json(429, limited).header("retry-after-ms", "150"),
        Reply::sse(TEXT, 4096),
    ])
    .await?;
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = told.clone();
    let provider = provider(config(&server.base_url()))?
        .on_retry(move |n| seen.lock().unwrap_or_else(|p| p.into_inner()).push(n.clone()));
    let started = Instant::now();
    let items = collect(&provider, request()).await?;
    let elapsed = started.elapsed();
    // The observer heard of the wait before it, with what the server asked.
    let told = told.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!((told[0].attempt, told[0].delay, told[0].asked), (1, Duration::from_millis(150), true));
    assert_eq!(told[0].code, "PROVIDER_RATE_LIMITED");
    assert!(told[0].message.contains("Rate limit reached"), "{}", told[0].message);
    // The computed backoff would be 1 ms: waiting 150 ms shows the header won.
    assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
    assert_eq!(items.first(), Some(&text(0, "Bonjour")));
    assert_eq!(items.len(), 10);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body, "a retry resends the same body");
    Ok(())
}

#[tokio::test]
async fn a_long_retry_after_is_capped() -> TestResult {
    let server = MockServer::start(vec![
        Reply::json(429, r#"{"error":"slow down"}"#).header("retry-after", "30"),
        Reply::sse(TEXT, 4096),
    ])
    .await?;
    let mut config = config(&server.base_url());
    config.retry.max_retry_after = Duration::from_millis(100);
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = told.clone();
    let provider =
        provider(config)?.on_retry(move |n| seen.lock().unwrap_or_else(|p| p.into_inner()).push(n.clone()));
    let started = Instant::now();
    let items = collect(&provider, request()).await?;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(100) && elapsed < Duration::from_secs(10), "{elapsed:?}");
    let told = told.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        told.iter().map(|n| (n.delay, n.asked, n.capped)).collect::<Vec<_>>(),
        [(Duration::from_millis(100), true, true)],
        "the wait is the cap, and the notice says so"
    );
    assert_eq!(items.len(), 10);
    assert_eq!(server.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn rate_limits_that_outlast_the_retries_are_rate_limited_errors() -> TestResult {
    let limited = r#"{"error":{"message":"quota","code":"rate_limit_exceeded"}}"#;
    let reply = Reply::json(429, limited).header("retry-after-ms", "5");
    let server = MockServer::start(vec![reply.clone(), reply.clone(), reply]).await?;
    let provider = provider(config(&server.base_url()))?;
    let error = provider_error(&provider).await?;
    match &error {
        ProviderError::RateLimited { retry_after_ms, .. } => assert_eq!(*retry_after_ms, Some(5)),
        other => return Err(format!("expected RateLimited, got {other:?}").into()),
    }
    assert_eq!(
        error.to_string(),
        format!(
            "provider rate limit: HTTP 429 Too Many Requests: quota [rate_limit_exceeded] (POST {}) (gave up after 3 attempts)",
            endpoint(&server)
        )
    );
    assert_eq!(server.requests().len(), 3);
    Ok(())
}

#[tokio::test]
async fn a_500_three_times_gives_up_with_the_status_and_the_server_message() -> TestResult {
    let body = r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#;
    let server = MockServer::start(vec![
        Reply::json(500, body),
        Reply::json(502, "<html>Bad Gateway</html>"),
        Reply::json(500, body),
    ])
    .await?;
    let provider = provider(config(&server.base_url()))?;
    let error = provider_error(&provider).await?;
    assert_eq!(error.code(), "PROVIDER_UNAVAILABLE");
    assert_eq!(
        HttpStatusError::of(&error),
        Some(&HttpStatusError {
            status: 500,
            message: "The server had an error while processing your request. [server_error]".into()
        })
    );
    assert_eq!(
        error.to_string(),
        format!(
            "provider unavailable: HTTP 500 Internal Server Error: The server had an error while processing your \
             request. [server_error] (POST {}) (gave up after 3 attempts)",
            endpoint(&server)
        )
    );
    assert_eq!(server.requests().len(), 3);
    Ok(())
}

#[tokio::test]
async fn client_errors_are_refused_at_once() -> TestResult {
    let unauthorized = r#"{"error":{"message":"Incorrect API key provided: sk-test-***","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    let context = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}"#;
    let server = MockServer::start(vec![Reply::json(401, unauthorized), Reply::json(400, context)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let first = provider_error(&provider).await?;
    assert_eq!(
        plain(&first),
        (
            "PROVIDER_REFUSED".into(),
            format!(
                "provider refused the request: HTTP 401 Unauthorized: Incorrect API key provided: sk-test-*** \
                 [invalid_api_key] (POST {})",
                endpoint(&server)
            )
        )
    );
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    let second = provider_error(&provider).await?;
    assert_eq!(
        plain(&second).1,
        format!(
            "provider refused the request: HTTP 400 Bad Request: This model's maximum context length is 4096 tokens. \
             [BadRequestError] (POST {})",
            endpoint(&server)
        )
    );
    assert_eq!(server.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn connection_errors_are_retried_then_unavailable() -> TestResult {
    // A port that was just free: nothing listens there.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    let base = format!("http://{addr}/v1");
    let provider = provider(config(&base))?;
    let error = provider_error(&provider).await?;
    assert_eq!(error.code(), "PROVIDER_UNAVAILABLE");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("provider unavailable: cannot reach {base}/chat/completions: ")),
        "{message}"
    );
    assert!(message.ends_with("(gave up after 3 attempts)"), "{message}");
    assert!(std::error::Error::source(&error).is_some());
    Ok(())
}

#[tokio::test]
async fn a_silent_stream_times_out_as_a_stream_error() -> TestResult {
    let server = MockServer::start(vec![Reply::event_stream(Body::Stall(Duration::from_secs(5)))]).await?;
    let mut config = config(&server.base_url());
    config.idle_timeout = Some(Duration::from_millis(200));
    let provider = provider(config)?;
    let started = Instant::now();
    let items = collect(&provider, request()).await?;
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let (code, message) = one_error(&items)?;
    assert_eq!(code, "PROVIDER_STREAM");
    assert!(message.starts_with("provider stream failed: timed out reading the event stream"), "{message}");
    Ok(())
}

/// A server that sends the whole answer and its finish reason, then keeps
/// the connection open with keep-alive comments: the answer completes a
/// few seconds after its finish reason, not at the idle timeout as a
/// failure (and never, with the pings).
#[tokio::test]
async fn an_answer_whose_stream_stays_open_after_its_finish_reason_completes() -> TestResult {
    let pieces = whole_answer();
    let server =
        MockServer::start(vec![Reply::event_stream(Body::ChunkedThenPings(pieces, Duration::from_secs(30)))])
            .await?;
    let mut config = config(&server.base_url());
    config.idle_timeout = Some(Duration::from_secs(60));
    let provider = provider(config)?;
    let started = Instant::now();
    let items = collect(&provider, request()).await?;
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert_eq!(items, [text(0, "done"), Ok(StreamItem::Finish(FinishReason::Stop))]);
    Ok(())
}

/// A finish reason sent early, then more of the answer, each piece 3 s
/// after the last: every piece is kept (content after the finish ends the
/// grace), none is cut off as if the answer were whole.
#[tokio::test]
async fn content_after_an_early_finish_reason_is_all_kept() -> TestResult {
    let piece = |text: &str, finish: Option<&str>| {
        let finish = finish.map_or("null".to_owned(), |f| format!("{f:?}"));
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text:?}}},\"finish_reason\":{finish}}}]}}\n\n")
            .into_bytes()
    };
    let pieces = vec![piece("A ", Some("stop")), piece("B ", None), piece("C", None)];
    let server =
        MockServer::start(vec![Reply::event_stream(Body::ChunkedSlowly(pieces, Duration::from_secs(3)))])
            .await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(
        items,
        [text(0, "A "), Ok(StreamItem::Finish(FinishReason::Stop)), text(0, "B "), text(0, "C")]
    );
    Ok(())
}

/// A stream of events that carry nothing is ended at the stream's byte
/// cap, not read for as long as the server sends it.
#[tokio::test]
async fn a_stream_of_empty_events_is_ended_at_its_byte_cap() -> TestResult {
    let empty = b"data: {\"choices\":[]}\n\n: ping\n\n".repeat(2000);
    let server = MockServer::start(vec![Reply::sse(&empty, 4096)]).await?;
    let mut config = config(&server.base_url());
    config.max_stream_bytes = 10_000;
    let provider = provider(config)?;
    let items = collect(&provider, request()).await?;
    let (code, message) = one_error(&items)?;
    assert_eq!(code, "PROVIDER_STREAM");
    assert!(message.contains("passed 10000 bytes"), "{message}");
    Ok(())
}

/// A connection that breaks after a whole answer (a proxy's reset, a
/// chunk announced and never sent) leaves the answer whole, not failed.
#[tokio::test]
async fn a_connection_that_breaks_after_a_whole_answer_leaves_it_whole() -> TestResult {
    let pieces = whole_answer();
    let server = MockServer::start(vec![Reply::event_stream(Body::ChunkedThenCut(pieces))]).await?;
    let provider = provider(config(&server.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert_eq!(items, [text(0, "done"), Ok(StreamItem::Finish(FinishReason::Stop))]);
    Ok(())
}

/// A server that takes the request and never answers fails the call once,
/// after one idle timeout: it is not asked again (with the defaults, ten
/// minutes and two retries, that held a turn for half an hour).
#[tokio::test]
async fn a_server_that_never_answers_is_not_retried() -> TestResult {
    let silent = || Reply::new(200, Body::NoAnswer(Duration::from_secs(5)));
    let server = MockServer::start(vec![silent(), silent(), silent()]).await?;
    let mut config = config(&server.base_url());
    config.idle_timeout = Some(Duration::from_millis(200));
    let provider = provider(config)?;
    let started = Instant::now();
    let (code, message) = plain(&provider_error(&provider).await?);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(code, "PROVIDER_UNAVAILABLE");
    assert!(message.contains("timed out"), "{message}");
    assert!(!message.contains("gave up after"), "not retried: {message}");
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_is_reported() -> TestResult {
    let server =
        MockServer::start(vec![Reply::json(200, r#"{"error":{"message":"streaming is disabled"}}"#)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let error = provider_error(&provider).await?;
    assert_eq!(
        plain(&error),
        (
            "PROVIDER_STREAM".into(),
            "provider stream failed: the server answered with JSON instead of an event stream: streaming is disabled"
                .into()
        )
    );
    Ok(())
}

#[tokio::test]
async fn no_retries_means_one_attempt() -> TestResult {
    let server = MockServer::start(vec![Reply::json(503, "{}"), Reply::sse(TEXT, 4096)]).await?;
    let provider = provider(config(&server.base_url()).with_retry(RetryPolicy::none()))?;
    let error = provider_error(&provider).await?;
    assert_eq!(HttpStatusError::of(&error).map(|e| e.status), Some(503));
    assert!(!error.to_string().contains("gave up"), "{error}");
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

/// A server that echoes the API key back (in an HTTP error body, or in an
/// error event of the stream): the key never reaches an error message,
/// which the loop writes into the log.
#[tokio::test]
async fn an_api_key_a_server_echoes_back_is_taken_out_of_every_error() -> TestResult {
    let echoed =
        r#"{"error":{"message":"Incorrect API key provided: Bearer sk-test-key","code":"invalid_api_key"}}"#;
    let in_stream = b"data: {\"error\":{\"message\":\"key sk-test-key is over quota\"}}\n\n";
    let server = MockServer::start(vec![Reply::json(401, echoed), Reply::sse(in_stream, 64)]).await?;
    let provider = provider(config(&server.base_url()))?;
    let refused = plain(&provider_error(&provider).await?);
    assert_eq!(refused.0, "PROVIDER_REFUSED");
    assert!(refused.1.contains("Incorrect API key provided: Bearer ***"), "{}", refused.1);
    let items = collect(&provider, request()).await?;
    let failed = items.iter().find_map(|i| i.as_ref().err()).ok_or("the stream did not fail")?;
    assert!(failed.1.contains("key *** is over quota"), "{}", failed.1);
    for message in [&refused.1, &failed.1] {
        assert!(!message.contains("sk-test-key"), "{message}");
    }
    Ok(())
}

/// A 200 that is an HTML page (a proxy's, a login's): the error says what
/// came instead of an event stream, not that the stream was empty.
#[tokio::test]
async fn an_html_page_instead_of_a_stream_is_named() -> TestResult {
    let page = b"<html><body>502 Bad Gateway (nginx)</body></html>".to_vec();
    let reply =
        Reply::new(200, crate::mock::Body::Full(page)).header("content-type", "text/html; charset=utf-8");
    let server = MockServer::start(vec![reply]).await?;
    let provider = provider(config(&server.base_url()))?;
    let (code, message) = plain(&provider_error(&provider).await?);
    assert_eq!(code, "PROVIDER_STREAM");
    assert!(
        message.contains("answered with text/html; charset=utf-8 instead of an event stream"),
        "{message}"
    );
    assert!(message.contains("502 Bad Gateway (nginx)"), "{message}");
    Ok(())
}

/// A redirect to another origin would carry the extra headers (an
/// `api-key`) and the conversation there: it is not followed, and the
/// request fails with its status. One within the endpoint's origin is.
#[tokio::test]
async fn redirects_are_followed_only_within_the_endpoints_origin() -> TestResult {
    let elsewhere = MockServer::start(vec![Reply::sse(TEXT, 64)]).await?;
    let moved = Reply::json(307, "{}").header("location", &endpoint(&elsewhere));
    let server = MockServer::start(vec![moved]).await?;
    let mut with_header = config(&server.base_url());
    with_header.extra_headers.push(("api-key".into(), "azure-secret".into()));
    let provider = provider(with_header)?;
    let (code, message) = plain(&provider_error(&provider).await?);
    assert_eq!(code, "PROVIDER_REFUSED", "{message}");
    assert!(message.contains("307"), "{message}");
    assert!(elsewhere.requests().is_empty(), "the other origin was asked: {:?}", elsewhere.requests().len());

    let same = Reply::json(308, "{}").header("location", "/moved/chat/completions");
    let followed = MockServer::start(vec![same, Reply::sse(TEXT, 64)]).await?;
    let provider = crate::common::provider(config(&followed.base_url()))?;
    let items = collect(&provider, request()).await?;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    let paths: Vec<String> = followed.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/moved/chat/completions"]);
    Ok(())
}

/// The error a `stream` call returns (a test failure if it succeeds).
async fn provider_error(provider: &OpenAiProvider) -> Result<ProviderError, String> {
    use palimpsest_core_agent_loop::Provider;
    match provider.stream(request()).await {
        Ok(_) => Err("the stream started".into()),
        Err(e) => Ok(e),
    }
}
