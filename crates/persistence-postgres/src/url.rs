//! Connection strings without their secrets: what errors, logs and `Debug`
//! show of a URL.

/// `url` with its scheme in lower case (`PostgreSQL://` as
/// `postgresql://`): URL schemes are case-insensitive (RFC 3986, 3.1), and
/// the driver reads only the lower-case forms. Anything else is unchanged.
pub(crate) fn lowercase_scheme(url: &str) -> std::borrow::Cow<'_, str> {
    let url = url.trim();
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.bytes().any(|b| b.is_ascii_uppercase()) => {
            std::borrow::Cow::Owned(format!("{}://{rest}", scheme.to_ascii_lowercase()))
        }
        _ => std::borrow::Cow::Borrowed(url),
    }
}

/// `url` with any password replaced by `***`: the user-info password of a
/// `postgres://user:password@host/db` URL and a `password=` parameter, in a
/// URL's query string or a `key=value` connection string. Everything else
/// is kept, so the result still says which server and database were meant.
///
/// ```
/// use palimpsest_persistence_postgres::redact_url;
///
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db.example:5432/logs?sslmode=require"),
///     "postgres://app:***@db.example:5432/logs?sslmode=require"
/// );
/// assert_eq!(redact_url("host=db password=s3cret user=app"), "host=db password=*** user=app");
/// assert_eq!(redact_url("postgres://db/logs?password=s3cret&x=1"), "postgres://db/logs?password=***&x=1");
/// ```
pub fn redact_url(url: &str) -> String {
    let url = url.trim();
    if let Some((scheme, rest)) = url.split_once("://") {
        // The driver (tokio-postgres) takes the user-info up to the first
        // '@', whatever comes before it: a password may hold an unencoded
        // '/', '?' or '#'. Where the text before the first '@' holds a
        // ':', the password runs from it to the last '@' before the next
        // '/', '?' or '#' (so a password holding an '@' is hidden whole).
        let unmasked;
        let rest = match rest.find('@').filter(|&at| rest[..at].contains(':')) {
            Some(first_at) => {
                let end = rest[first_at..].find(['/', '?', '#']).map_or(rest.len(), |i| first_at + i);
                let last_at = rest[..end].rfind('@').unwrap_or(first_at);
                let user = rest[..first_at].split_once(':').map_or("", |(user, _)| user);
                unmasked = format!("{user}:***{}", &rest[last_at..]);
                unmasked.as_str()
            }
            None => rest,
        };
        // Authority ends at the first '/', '?' or '#'; user-info at its last '@'.
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let authority = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***@{hosts}"),
                None => format!("{userinfo}@{hosts}"),
            },
            None => authority.to_owned(),
        };
        let tail = match tail.split_once('?') {
            Some((path, query)) => {
                let params: Vec<String> = query
                    .split('&')
                    .map(|kv| match kv.split_once('=') {
                        // The driver decodes `%XX` in a key: `pass%77ord` is
                        // the password too.
                        Some((k, _))
                            if percent_decoded(k).is_ok_and(|k| k.eq_ignore_ascii_case("password")) =>
                        {
                            format!("{k}=***")
                        }
                        _ => kv.to_owned(),
                    })
                    .collect();
                format!("{path}?{}", params.join("&"))
            }
            None => tail.to_owned(),
        };
        mask_stray_passwords(&format!("{scheme}://{authority}{tail}"))
    } else {
        // key=value form; a quoted value may hold spaces.
        let mut out = String::with_capacity(url.len());
        let mut rest = url;
        while let Some(at) = find_password_key(rest) {
            let (before, after) = rest.split_at(at);
            out.push_str(before);
            let after_eq = &after[after.find('=').map_or(after.len(), |i| i + 1)..];
            let trimmed = after_eq.trim_start();
            let value_len = if let Some(quoted) = trimmed.strip_prefix('\'') {
                let mut i = 0;
                let bytes = quoted.as_bytes();
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                1 + (i + 1).min(quoted.len())
            } else {
                trimmed.find(char::is_whitespace).unwrap_or(trimmed.len())
            };
            out.push_str("password=***");
            rest = &trimmed[value_len.min(trimmed.len())..];
        }
        out.push_str(rest);
        out
    }
}

/// `url` with the value of every `password=` after a delimiter hidden:
/// one the driver does not read as a query parameter (a query value before
/// it held an '@', which the driver takes for the end of the user-info:
/// `postgres://h:5432/db?application_name=w@n1&password=x`) was still
/// meant as the password, and is hidden too.
fn mask_stray_passwords(url: &str) -> String {
    const KEY: &str = "password=";
    let lower = url.to_ascii_lowercase();
    let mut out = String::with_capacity(url.len());
    let (mut copied, mut from) = (0, 0);
    while let Some(i) = lower[from..].find(KEY) {
        let at = from + i;
        let value = at + KEY.len();
        let end = url[value..].find(['&', '#']).map_or(url.len(), |e| value + e);
        let after_delimiter = at == 0 || matches!(lower.as_bytes()[at - 1], b'?' | b'&' | b'@' | b'/');
        if after_delimiter && &url[value..end] != "***" {
            out.push_str(&url[copied..value]);
            out.push_str("***");
            copied = end;
        }
        from = end.max(value);
    }
    out.push_str(&url[copied..]);
    out
}

/// `text` with its `%XX` escapes decoded, as the driver decodes a URL's
/// query keys and values; `Err` says why it cannot be.
pub(crate) fn percent_decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => out.push(b),
                None => return Err(format!("`{text}` holds a `%` that is not a `%XX` escape")),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` is not UTF-8 once decoded"))
}

/// Where a `password` key (followed by optional spaces and `=`) starts in a
/// key=value string, at the start or after whitespace.
fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let starts_word = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let next = lower[at + "password".len()..].trim_start();
        if starts_word && next.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden_and_everything_else_is_kept() {
        let cases = [
            ("postgres://u:p@h/db", "postgres://u:***@h/db"),
            (
                "postgresql://u:p%40ss@h1:1,h2:2/db?sslmode=disable",
                "postgresql://u:***@h1:1,h2:2/db?sslmode=disable",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://h/db", "postgres://h/db"),
            ("postgres://u:p@h", "postgres://u:***@h"),
            ("postgres://u:a@b@h/db", "postgres://u:***@h/db"),
            // A `password=` the driver reads as part of the host, after an
            // '@' in a query value: still the user's password.
            (
                "postgres://127.0.0.1:5432/test?application_name=w@n1&password=Zq9secret",
                "postgres://127.0.0.1:***@n1&password=***",
            ),
            (
                "postgres://h/db?options=-c%20a%3Db@c&password=x#y",
                "postgres://h/db?options=-c%20a%3Db@c&password=***",
            ),
            // A key the driver decodes to `password`.
            ("postgres://h/db?pass%77ord=s3cret&x=1", "postgres://h/db?pass%77ord=***&x=1"),
            (
                "postgres://h/db?%70%61%73%73%77%6F%72%64=s3cret",
                "postgres://h/db?%70%61%73%73%77%6F%72%64=***",
            ),
            // Unencoded delimiters in a password, which the driver accepts.
            ("postgres://u:TOP/SECRET@h:5999/test", "postgres://u:***@h:5999/test"),
            ("postgres://u:TOP?SECRET@h/test?x=1", "postgres://u:***@h/test?x=1"),
            ("postgres://u:TOP#SECRET@h/test", "postgres://u:***@h/test"),
            ("postgres://u:a/b@c@h/db", "postgres://u:***@h/db"),
            (
                "postgres://h/db?password=x&application_name=a@b",
                "postgres://h/db?password=***&application_name=a@b",
            ),
            ("postgres://h/db?PASSWORD=x&user=u", "postgres://h/db?PASSWORD=***&user=u"),
            ("host=h password = 'a b\\' c' user=u", "host=h password=*** user=u"),
            ("password=x", "password=***"),
            ("host=h mypassword=x", "host=h mypassword=x"),
            ("", ""),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }
}
