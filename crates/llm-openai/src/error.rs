//! How HTTP failures become [`ProviderError`]s.
//!
//! | failure | error | retried |
//! |---|---|---|
//! | connection refused, DNS, TLS, timeout before the response | `Unavailable` (the client error as `source`) | yes |
//! | HTTP 429 | `RateLimited` (with the wait asked by `Retry-After`/`retry-after-ms`) | yes |
//! | HTTP 408, 5xx, or any other non-4xx failure status | `Unavailable` (an [`HttpStatusError`] as `source`) | 408 and 5xx |
//! | HTTP 400, 401, 403, 404, 413, 422 and other 4xx | `Refused` | no |
//! | anything after the response started | `Stream` | no |
//!
//! Every message names the HTTP status, the URL and the server's own error
//! message, read from the usual error shapes (`{"error":{"message"}}`,
//! `{"error":"..."}`, `{"message"}`, `{"detail"}`) or else quoted from the
//! body. An error that gave up after retries says how many attempts it made.

use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::ProviderError;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::Value;

/// The longest server error body quoted in a message, in characters.
const BODY_EXCERPT_CHARS: usize = 500;

/// A failure HTTP status: the `source` of an
/// [`Unavailable`](ProviderError::Unavailable) error caused by a status, so
/// a caller can read the status without parsing the message.
///
/// ```
/// use palimpsest_llm_openai::HttpStatusError;
///
/// let e = HttpStatusError { status: 503, message: "overloaded".into() };
/// assert_eq!(e.to_string(), "HTTP 503 Service Unavailable: overloaded");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HTTP {status} {}: {message}", StatusCode::from_u16(*status).ok().and_then(|s| s.canonical_reason()).unwrap_or("(unknown status)"))]
pub struct HttpStatusError {
    /// The HTTP status code.
    pub status: u16,
    /// The server's error message (or an excerpt of its body).
    pub message: String,
}

impl HttpStatusError {
    /// The status the provider's error carries, when it came from one: an
    /// `Unavailable` error whose source is an `HttpStatusError`.
    pub fn of(error: &ProviderError) -> Option<&HttpStatusError> {
        match error {
            ProviderError::Unavailable { source: Some(source), .. } => {
                source.downcast_ref::<HttpStatusError>()
            }
            _ => None,
        }
    }
}

/// Whether a failure status is worth another attempt.
pub(crate) fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// The error for a failure status. `attempts` is how many requests were
/// made in all.
pub(crate) fn status_error(
    status: StatusCode,
    url: &str,
    body: &[u8],
    retry_after: Option<Duration>,
    attempts: u32,
) -> ProviderError {
    let http = HttpStatusError { status: status.as_u16(), message: server_message(body) };
    let tried = if attempts > 1 { format!(" (gave up after {attempts} attempts)") } else { String::new() };
    let message = format!("{http} (POST {url}){tried}");
    if status == StatusCode::TOO_MANY_REQUESTS {
        let retry_after_ms = retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        ProviderError::RateLimited { message, retry_after_ms }
    } else if status.is_redirection() {
        // Only a redirect to another origin gets here (see the provider's
        // redirect policy): following it would send the headers there.
        ProviderError::Refused {
            message: format!("{message}: a redirect to another origin, which is not followed"),
        }
    } else if status.is_client_error() && status != StatusCode::REQUEST_TIMEOUT {
        ProviderError::Refused { message }
    } else {
        ProviderError::Unavailable { message, source: Some(Arc::new(http)) }
    }
}

/// The error for a request that got no response.
pub(crate) fn send_error(error: reqwest::Error, url: &str, attempts: u32) -> ProviderError {
    let tried = if attempts > 1 { format!(" (gave up after {attempts} attempts)") } else { String::new() };
    let what = if error.is_timeout() { "timed out reaching" } else { "cannot reach" };
    ProviderError::Unavailable {
        message: format!("{what} {url}: {}{tried}", chain(&error)),
        source: Some(Arc::new(error)),
    }
}

/// The error for a failure while reading the response body.
pub(crate) fn body_error(error: reqwest::Error) -> ProviderError {
    let what =
        if error.is_timeout() { "timed out reading the event stream" } else { "the event stream broke" };
    ProviderError::Stream { message: format!("{what}: {}", chain(&error)), source: Some(Arc::new(error)) }
}

/// An error and its sources, joined by `: ` (reqwest's own `Display`
/// leaves out the cause, such as "connection refused").
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

/// The server's error message from a response body.
pub(crate) fn server_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => error_message(&value).unwrap_or_else(|| excerpt(text)),
        Err(_) => excerpt(text),
    }
}

/// The message of a JSON error object, in the shapes servers use:
/// `{"error":{"message":..}}` (OpenAI, llama.cpp, Ollama, DeepSeek),
/// `{"error":".."}`, `{"message":..}` (vLLM), `{"detail":..}` (FastAPI).
/// The error's `code` or `type` is appended when present.
pub(crate) fn error_message(value: &Value) -> Option<String> {
    let object = match value.get("error") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(inner @ Value::Object(_)) => inner,
        _ => value,
    };
    let message = match object.get("message").or_else(|| object.get("detail"))? {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let kind = [object.get("code"), object.get("type")].into_iter().flatten().find_map(|v| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    });
    Some(match kind {
        Some(kind) => format!("{message} [{kind}]"),
        None => message,
    })
}

fn excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(BODY_EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// The wait a response asks for: `retry-after-ms` (OpenAI's, in
/// milliseconds) or `Retry-After` in seconds (fractions accepted). The
/// HTTP-date form of `Retry-After` is not read (the computed backoff is
/// used instead).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    if let Some(s) = number("retry-after") {
        return Some(Duration::from_secs_f64(s.min(1e9)));
    }
    // The other form HTTP allows: a date (it was ignored, and a server
    // asking for ten seconds was asked again after half of one).
    let date = headers.get("retry-after")?.to_str().ok()?;
    let at = http_date(date)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    // A date already past asks nothing: the usual backoff applies.
    at.checked_sub(now).filter(|&wait| wait > 0).map(Duration::from_secs)
}

/// Seconds since the Unix epoch of an HTTP date (RFC 9110, 5.6.7): the
/// IMF-fixdate senders use (`Sun, 06 Nov 1994 08:49:37 GMT`), and the two
/// obsolete forms recipients must read, RFC 850 (`Sunday, 06-Nov-94
/// 08:49:37 GMT`, a two-digit year more than 50 years ahead is in the last
/// century) and asctime (`Sun Nov  6 08:49:37 1994`); `None` for anything
/// else.
fn http_date(text: &str) -> Option<u64> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let (day, month, year, time) = match parts.as_slice() {
        [_weekday, day, month, year, time, "GMT"] => (*day, *month, (*year).to_owned(), *time),
        [_weekday, date, time, "GMT"] => {
            let mut pieces = date.split('-');
            let (day, month, yy) = (pieces.next()?, pieces.next()?, pieces.next()?);
            let yy: u64 = yy.parse().ok().filter(|_| yy.len() == 2)?;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
            let this_year = 1970 + now / 31_556_952;
            let mut year = this_year / 100 * 100 + yy;
            if year > this_year + 50 {
                year -= 100;
            }
            (day, month, year.to_string(), *time)
        }
        [_weekday, month, day, time, year] => (*day, *month, (*year).to_owned(), *time),
        _ => return None,
    };
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let (day, year): (u64, u64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<u64> = time.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let [h, m, sec] = hms.as_slice() else { return None };
    if !(1..=31).contains(&day) || !(1970..=9999).contains(&year) || *h > 23 || *m > 59 || *sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), March-based.
    let (y, mo) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3_600 + m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn server_messages_are_read_from_every_usual_shape() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
                "Incorrect API key provided [invalid_api_key]",
            ),
            (
                r#"{"error":{"code":400,"message":"context too long","type":"invalid_request_error"}}"#,
                "context too long [invalid_request_error]",
            ),
            (r#"{"error":"model 'x' not found"}"#, "model 'x' not found"),
            (
                r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
                "bad [BadRequestError]",
            ),
            (r#"{"detail":"Not Found"}"#, "Not Found"),
            (
                r#"{"detail":[{"loc":["body"],"msg":"field required"}]}"#,
                r#"[{"loc":["body"],"msg":"field required"}]"#,
            ),
            (r#"{"unexpected":true}"#, r#"{"unexpected":true}"#),
            ("<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),
            ("  ", "(empty body)"),
        ];
        for (body, expected) in cases {
            assert_eq!(server_message(body.as_bytes()), *expected, "{body}");
        }
        let long = "x".repeat(BODY_EXCERPT_CHARS + 10);
        assert_eq!(server_message(long.as_bytes()).chars().count(), BODY_EXCERPT_CHARS + 1);
    }

    #[test]
    fn statuses_map_to_typed_errors() {
        let url = "http://h/v1/chat/completions";
        let body = br#"{"error":{"message":"nope"}}"#;
        let e = status_error(StatusCode::UNAUTHORIZED, url, body, None, 1);
        assert_eq!(e.code(), "PROVIDER_REFUSED");
        assert_eq!(
            e.to_string(),
            "provider refused the request: HTTP 401 Unauthorized: nope (POST http://h/v1/chat/completions)"
        );
        let e = status_error(StatusCode::TOO_MANY_REQUESTS, url, body, Some(Duration::from_millis(1500)), 3);
        assert!(matches!(e, ProviderError::RateLimited { retry_after_ms: Some(1500), .. }), "{e:?}");
        assert!(e.to_string().ends_with("(gave up after 3 attempts)"), "{e}");
        let e = status_error(StatusCode::BAD_GATEWAY, url, b"", None, 1);
        assert_eq!(e.code(), "PROVIDER_UNAVAILABLE");
        assert_eq!(
            HttpStatusError::of(&e),
            Some(&HttpStatusError { status: 502, message: "(empty body)".into() })
        );
        let e = status_error(StatusCode::REQUEST_TIMEOUT, url, b"slow", None, 1);
        assert_eq!(HttpStatusError::of(&e).map(|h| h.status), Some(408));
        assert_eq!(HttpStatusError::of(&ProviderError::refused("x")), None);
        for (status, retry) in
            [(408, true), (429, true), (500, true), (503, true), (400, false), (401, false), (404, false)]
        {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            assert_eq!(is_retryable(status), retry, "{status}");
        }
    }

    #[test]
    fn retry_after_reads_an_http_date() {
        assert_eq!(http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(http_date("Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777), "RFC 850");
        assert_eq!(http_date("Sun Nov  6 08:49:37 1994"), Some(784_111_777), "asctime");
        for bad in [
            "",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(http_date(bad), None, "{bad}");
        }
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert_eq!(retry_after(&h), None, "a date past asks nothing");
        let later = std::time::SystemTime::now() + Duration::from_secs(30);
        let secs = later.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let date = fixdate(secs);
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        let asked = retry_after(&h).unwrap();
        assert!((Duration::from_secs(28)..=Duration::from_secs(30)).contains(&asked), "{date}: {asked:?}");
    }

    /// An IMF-fixdate of `secs`, for the test (the inverse of `http_date`),
    /// from the RFC 3339 form core-session writes event times in.
    fn fixdate(secs: u64) -> String {
        let rfc3339 = palimpsest_core_session::time::utc(secs * 1000);
        let (date, time) = rfc3339.split_once('T').expect("a date and a time");
        let [year, month, day] = [&date[..4], &date[5..7], &date[8..10]];
        const MONTHS: [&str; 12] =
            ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
        let month = MONTHS[month.parse::<usize>().expect("a month") - 1];
        format!("Mon, {day} {month} {year} {} GMT", &time[..8])
    }

    #[test]
    fn retry_after_reads_milliseconds_then_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after", HeaderValue::from_static("0.25"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        h.insert("retry-after-ms", HeaderValue::from_static("40"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(40)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(1_000_000_000)));
    }
}
