//! Duplicate keys: one JSON object naming the same key twice.
//!
//! JSON leaves duplicate keys to the reader, and readers differ: serde's
//! derived structs refuse a duplicate known field, skip a duplicate unknown
//! one, and `serde_json::Value` keeps the last; other languages keep the
//! first. An event read one way by us and another way by the next tool is
//! a parser differential (a text block that another reader sees as an
//! unpaired tool call), so every object anywhere in an event or a header
//! must name each key once. This module finds the first object that does
//! not; [`crate::event`] and [`crate::header`] turn it into
//! `event-malformed` and `header-malformed`.
//!
//! Keys are compared as a parser reads them, escapes decoded (`"a"` and
//! `"\u0061"` are the same key; a lone surrogate escape is its own code
//! point), so no spelling slips a duplicate past the check.
//!
//! # Cost
//!
//! One pass over the bytes, strings skipped with `memchr`. An object's
//! first [`INLINE`] keys are kept on the stack and compared linearly: events
//! hold small objects, so the common case allocates nothing. An object with
//! more keys collects them in a vector that is sorted once when the object
//! ends, so a hostile object of `n` keys costs `O(n log n)` time and one
//! slice per key, never `O(n²)`.

use std::cmp::Ordering;

/// Keys per object compared linearly, without allocating.
const INLINE: usize = 16;

/// Deepest nesting scanned: serde_json's own limit, so deeper text is
/// not JSON to the parsers the callers run, and is left to them.
const MAX_DEPTH: usize = 128;

/// The first key found twice in one object of `json`, decoded and clipped
/// for a message; `None` when every object names each key once.
///
/// `json` is meant to be text a JSON parser accepted. On anything else the
/// answer is `None` or a duplicate found before the text stopped being
/// JSON, never a panic: the caller's parser judges the rest.
///
/// The rule every event and header follows, for other JSON a log holds as
/// text: a tool call's `arguments`, which the agent loop refuses when they
/// name a key twice (the tool would read one value, a person the other).
///
/// ```
/// use palimpsest_core_session::duplicate_key;
///
/// assert_eq!(duplicate_key(r#"{"path":"a","path":"../x"}"#).as_deref(), Some("path"));
/// assert_eq!(duplicate_key(r#"{"a":{"b":1},"c":{"b":2}}"#), None);
/// ```
pub fn duplicate_key(json: &str) -> Option<String> {
    let mut scanner = Scanner { text: json, pos: 0 };
    match scanner.value(0) {
        Err(Stop::Duplicate(raw)) => Some(display(raw)),
        Ok(()) | Err(Stop::NotJson) => None,
    }
}

/// Why a scan stopped early.
enum Stop<'a> {
    /// This key (raw, between its quotes) was named twice in one object.
    Duplicate(&'a str),
    /// The text is not JSON here; the caller's parser says why.
    NotJson,
}

struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then takes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let found = self.peek() == Some(byte);
        self.pos += usize::from(found);
        found
    }

    fn value(&mut self, depth: usize) -> Result<(), Stop<'a>> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{' | b'[') if depth >= MAX_DEPTH => Err(Stop::NotJson),
            Some(b'{') => {
                self.pos += 1;
                self.object(depth + 1)
            }
            Some(b'[') => {
                self.pos += 1;
                self.array(depth + 1)
            }
            Some(b'"') => self.string().map(drop),
            Some(_) => self.scalar(),
            None => Err(Stop::NotJson),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), Stop<'a>> {
        let mut keys = Keys::new();
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(Stop::NotJson);
            }
            keys.insert(self.string()?)?;
            if !self.eat(b':') {
                return Err(Stop::NotJson);
            }
            self.value(depth)?;
            if self.eat(b',') {
                continue;
            }
            return if self.eat(b'}') { keys.finish() } else { Err(Stop::NotJson) };
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), Stop<'a>> {
        if self.eat(b']') {
            return Ok(());
        }
        loop {
            self.value(depth)?;
            if self.eat(b',') {
                continue;
            }
            return if self.eat(b']') { Ok(()) } else { Err(Stop::NotJson) };
        }
    }

    /// A string starting at its opening quote: its raw text, escapes kept.
    fn string(&mut self) -> Result<&'a str, Stop<'a>> {
        let bytes = self.text.as_bytes();
        let start = self.pos + 1;
        let mut at = start;
        loop {
            let rest = bytes.get(at..).ok_or(Stop::NotJson)?;
            let found = memchr::memchr2(b'"', b'\\', rest).ok_or(Stop::NotJson)?;
            at += found;
            if bytes[at] == b'"' {
                self.pos = at + 1;
                // Both ends are at ASCII bytes: character boundaries.
                return self.text.get(start..at).ok_or(Stop::NotJson);
            }
            // An escape: `\` and the byte after it, which is ASCII in JSON
            // (`\u`'s four hex digits are neither a quote nor a backslash).
            at += 2;
        }
    }

    /// A number, `true`, `false` or `null`: up to what ends a value.
    fn scalar(&mut self) -> Result<(), Stop<'a>> {
        let start = self.pos;
        while !matches!(self.peek(), None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
        if self.pos == start {
            Err(Stop::NotJson)
        } else {
            Ok(())
        }
    }
}

/// The keys of one object, as read so far.
struct Keys<'a> {
    inline: [&'a str; INLINE],
    len: usize,
    /// Whether any key holds an escape, so that raw texts may differ for
    /// equal keys.
    escaped: bool,
    /// Every key, once there are more than [`INLINE`]; checked when the
    /// object ends.
    many: Vec<&'a str>,
}

impl<'a> Keys<'a> {
    fn new() -> Keys<'a> {
        Keys { inline: [""; INLINE], len: 0, escaped: false, many: Vec::new() }
    }

    fn insert(&mut self, key: &'a str) -> Result<(), Stop<'a>> {
        self.escaped |= memchr::memchr(b'\\', key.as_bytes()).is_some();
        if self.len < INLINE {
            let seen = &self.inline[..self.len];
            let twice = if self.escaped {
                seen.iter().any(|k| compare(k, key) == Ordering::Equal)
            } else {
                seen.contains(&key)
            };
            if twice {
                return Err(Stop::Duplicate(key));
            }
            self.inline[self.len] = key;
            self.len += 1;
            return Ok(());
        }
        if self.many.is_empty() {
            self.many.extend_from_slice(&self.inline);
        }
        self.many.push(key);
        Ok(())
    }

    /// The object ended: checks the keys not compared as they came.
    fn finish(mut self) -> Result<(), Stop<'a>> {
        if self.many.is_empty() {
            return Ok(());
        }
        if self.escaped {
            self.many.sort_unstable_by(|a, b| compare(a, b));
        } else {
            self.many.sort_unstable();
        }
        match self.many.windows(2).find(|w| compare(w[0], w[1]) == Ordering::Equal) {
            Some(w) => Err(Stop::Duplicate(w[1])),
            None => Ok(()),
        }
    }
}

/// Orders two raw keys by what they decode to. Without escapes that is
/// their bytes' order (UTF-8 orders as its code points do), so both ways
/// agree and may be mixed in one sort.
fn compare(a: &str, b: &str) -> Ordering {
    if memchr::memchr(b'\\', a.as_bytes()).is_none() && memchr::memchr(b'\\', b.as_bytes()).is_none() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    CodePoints(a.chars()).cmp(CodePoints(b.chars()))
}

/// The code points a raw JSON string body decodes to, as a parser that
/// keeps lone surrogates reads it: an escaped surrogate pair is one code
/// point, a lone surrogate escape its own value. (An invalid escape, which
/// a parser refuses, reads as `u32::MAX`.)
struct CodePoints<'a>(std::str::Chars<'a>);

impl CodePoints<'_> {
    fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
        (0..4).try_fold(0, |n, _| Some(n * 16 + chars.next()?.to_digit(16)?))
    }
}

impl Iterator for CodePoints<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let c = self.0.next()?;
        if c != '\\' {
            return Some(u32::from(c));
        }
        let escaped = match self.0.next() {
            Some('b') => 0x08,
            Some('f') => 0x0c,
            Some('n') => 0x0a,
            Some('r') => 0x0d,
            Some('t') => 0x09,
            Some(c @ ('"' | '\\' | '/')) => u32::from(c),
            Some('u') => {
                let Some(high) = CodePoints::hex4(&mut self.0) else { return Some(u32::MAX) };
                if (0xD800..0xDC00).contains(&high) {
                    let mut ahead = self.0.clone();
                    if ahead.next() == Some('\\') && ahead.next() == Some('u') {
                        if let Some(low @ 0xDC00..0xE000) = CodePoints::hex4(&mut ahead) {
                            self.0 = ahead;
                            return Some(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
                        }
                    }
                }
                high
            }
            _ => u32::MAX,
        };
        Some(escaped)
    }
}

/// A raw key as a message shows it: decoded, and clipped to a few dozen
/// characters (a key may be megabytes long).
fn display(raw: &str) -> String {
    const MAX_CHARS: usize = 40;
    let mut shown: String =
        CodePoints(raw.chars()).take(MAX_CHARS).map(|c| char::from_u32(c).unwrap_or('\u{fffd}')).collect();
    if CodePoints(raw.chars()).nth(MAX_CHARS).is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    //! The scan agrees with a parser about which keys are equal: checked
    //! against serde_json, whose map keeps one entry per decoded key.

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_key_named_twice_is_found_at_any_depth_and_position() {
        for (json, key) in [
            (r#"{"a":1,"a":1}"#, "a"),
            (r#"{"a":1,"b":2,"a":3}"#, "a"),
            (r#"[1,{"x":{"y":[{"t":"text","t":"tool-call"}]}}]"#, "t"),
            (r#"{"type":"text","text":"Sure.","type":"tool-call"}"#, "type"),
            (r#" { "k" : [ ] , "k" : { } } "#, "k"),
            (r#"{"a":1,"\u0061":2}"#, "a"),
            (r#"{"é":1,"\u00e9":2}"#, "é"),
            (r#"{"😀":1,"\ud83d\ude00":2}"#, "😀"),
            (r#"{"\ud800":1,"\uD800":2}"#, "\u{fffd}"),
            (r#"{"\n":1,"\u000a":2}"#, "\n"),
        ] {
            assert_eq!(duplicate_key(json).as_deref(), Some(key), "{json}");
        }
    }

    #[test]
    fn distinct_keys_and_keys_in_separate_objects_pass() {
        for json in [
            r#"{}"#,
            r#"[]"#,
            r#""a""#,
            r#"12.5e3"#,
            r#"{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}"#,
            r#"{"a":"\"a\":1","b":"{\"a\":1,\"a\":2}"}"#,
            r#"{"\ud800":1,"\udc00":2,"\ud800\udc00":3}"#,
            r#"{"a\\":1,"a":2,"a\/":3,"a/b":4}"#,
        ] {
            assert_eq!(duplicate_key(json), None, "{json}");
        }
    }

    #[test]
    fn large_objects_are_checked_without_quadratic_work() {
        let keys: Vec<String> = (0..200_000).map(|i| format!("\"k{i}\":0")).collect();
        let distinct = format!("{{{}}}", keys.join(","));
        assert_eq!(duplicate_key(&distinct), None);
        let twice = format!("{{{},\"k12345\":1}}", keys.join(","));
        assert_eq!(duplicate_key(&twice).as_deref(), Some("k12345"));
        let escaped = format!("{{{},\"\\u006b7\":1}}", keys.join(","));
        assert_eq!(duplicate_key(&escaped).as_deref(), Some("k7"));
    }

    #[test]
    fn long_keys_are_clipped_in_the_message() {
        let key = "x".repeat(1000);
        let shown = duplicate_key(&format!("{{\"{key}\":1,\"{key}\":2}}")).unwrap_or_default();
        assert_eq!(shown, format!("{}…", "x".repeat(40)));
    }

    #[test]
    fn text_that_is_not_json_never_panics() {
        for text in
            ["", "{", "{\"a", "{\"a\":", "{\"a\":1,", "[1,", "{\"\\", "\"\\u12", "{:1}", "{\"a\"1}", "}"]
        {
            let _ = duplicate_key(text);
        }
        let deep = "[".repeat(100_000);
        assert_eq!(duplicate_key(&deep), None);
    }

    /// Strings made of characters whose escapes are easy to get wrong.
    fn key() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(&['a', 'b', 'é', '😀', '"', '\\', '/', '\n', '\u{1}'][..]),
            0..4,
        )
        .prop_map(String::from_iter)
    }

    /// A key's JSON text, each character escaped as `\uXXXX` or not, at
    /// random (`/` as `\/`); characters JSON must escape get their short form.
    fn spelled(key: &str, escapes: &[bool]) -> String {
        let mut out = String::from('"');
        for (c, escape) in key.chars().zip(escapes.iter().chain(std::iter::repeat(&false))) {
            match (c, *escape) {
                ('/', true) => out.push_str("\\/"),
                (_, true) => {
                    for unit in c.encode_utf16(&mut [0u16; 2]) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                ('"', false) => out.push_str("\\\""),
                ('\\', false) => out.push_str("\\\\"),
                ('\n', false) => out.push_str("\\n"),
                ('\u{1}', false) => out.push_str("\\u0001"),
                (_, false) => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn keys_are_equal_exactly_when_serde_reads_them_equal(
            keys in prop::collection::vec((key(), prop::collection::vec(any::<bool>(), 4)), 1..24),
        ) {
            let members: Vec<String> = keys.iter().map(|(k, e)| format!("{}:0", spelled(k, e))).collect();
            let json = format!("{{{}}}", members.join(","));
            let map: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{json}: {e}")))?;
            let distinct = map.len() == keys.len();
            prop_assert_eq!(duplicate_key(&json).is_none(), distinct, "{}", json);
        }
    }
}
