//! Full-text search, the reference semantics every store's search follows:
//! which text of an event is searched, how text is cut into tokens, what a
//! match is, and the snippet a hit shows. Pure functions; the stores (and
//! their indexes) live elsewhere.
//!
//! # The semantics
//!
//! * **What is searched**: the text of the events that carry a
//!   [`Message`] (`user/message`, `context/message` (summaries of
//!   compactions included), `steering/message`, `assistant/message`,
//!   `tool/result`): its text blocks and the text inside its tool-result
//!   blocks ([`searchable_text`]). Not `assistant/chunk` (the final
//!   `assistant/message` holds the same text), turn and step brackets,
//!   `tool/call`, settings, plugin events, reasoning, tool-call arguments
//!   or images.
//! * **Tokens** are maximal runs of Unicode alphanumerics
//!   ([`char::is_alphanumeric`]), lowercased ([`str::to_lowercase`]):
//!   `"Don't PANIC: 42-fold"` is `don`, `t`, `panic`, `42`, `fold`
//!   ([`tokens`]).
//! * **A query** is a list of words, cut into tokens the same way
//!   ([`query_terms`]): `"foo-bar"` is the two terms `foo` and `bar`.
//! * **A match** is a text whose tokens include every term
//!   ([`matches()`]): whole tokens, any case, any order, anywhere.
//! * The whole **log** is searched, not just the surface: a message that a
//!   compaction or prune shadowed is still found.
//!
//! An index may find candidates faster (SQLite FTS5, PostgreSQL tsvector),
//! but [`matches()`] decides, so every store gives the same hits.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Deserialize;

use crate::event::{Event, EventType};
use crate::payload::{Block, Message};

/// How many characters of context a [`snippet`] shows around its match, at
/// most (not counting the `…` marks).
pub const SNIPPET_CHARS: usize = 100;

/// The searchable text of an event: the text of its [`Message`], for the
/// types that carry one, or `None` (for every other type, and for a
/// message with no text, say an assistant message of tool calls only).
///
/// The text is the message's text blocks and the text blocks inside its
/// tool-result blocks, in order, joined with `\n` so that no two blocks'
/// words run together.
///
/// ```
/// use palimpsest_core_session::payload::{Message, UserMessage};
/// use palimpsest_core_session::{search, Event, SurfaceIntent};
///
/// let user = UserMessage { turn: Some(1), message: Message::user("u1", "Hello there") };
/// let e = Event::surface(0, 0, user, SurfaceIntent::append())?;
/// assert_eq!(search::searchable_text(&e).as_deref(), Some("Hello there"));
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
pub fn searchable_text(event: &Event) -> Option<String> {
    if !carries_message(event.event_type()) {
        return None;
    }
    #[derive(Deserialize)]
    struct Carrier {
        message: Message,
    }
    // A core payload was checked when the event was built: this parses.
    let message = event.data_as::<Carrier>().ok()?.message;
    let mut parts = Vec::new();
    collect_text(&message.content, &mut parts);
    let text = parts.join("\n");
    (!text.is_empty()).then_some(text)
}

/// Whether events of this type carry a [`Message`] whose text is searched.
pub fn carries_message(event_type: &EventType) -> bool {
    matches!(
        event_type,
        EventType::UserMessage
            | EventType::ContextMessage
            | EventType::SteeringMessage
            | EventType::AssistantMessage
            | EventType::ToolResult
    )
}

fn collect_text<'a>(blocks: &'a [Block], parts: &mut Vec<&'a str>) {
    for b in blocks {
        match b {
            Block::Text { text } if !text.is_empty() => parts.push(text),
            Block::ToolResult { content, .. } => collect_text(content, parts),
            _ => {}
        }
    }
}

/// One token of a text: where it is (byte offsets into the text) and its
/// normalized (lowercased) form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
    /// The token lowercased: what terms are compared with.
    pub normalized: String,
}

/// The tokens of `text`: maximal runs of alphanumerics, in order.
///
/// ```
/// use palimpsest_core_session::search::tokens;
///
/// let t: Vec<String> = tokens("Don't PANIC: 42-fold").map(|t| t.normalized).collect();
/// assert_eq!(t, ["don", "t", "panic", "42", "fold"]);
/// ```
pub fn tokens(text: &str) -> impl Iterator<Item = Token> + '_ {
    spans(text).map(|(start, end)| Token { start, end, normalized: text[start..end].to_lowercase() })
}

/// The byte ranges of the tokens of `text`, in order: [`tokens`] without
/// the lowercasing.
fn spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let start = loop {
            let (i, c) = chars.next()?;
            if c.is_alphanumeric() {
                break i;
            }
        };
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !c.is_alphanumeric() {
                end = i;
                break;
            }
            chars.next();
        }
        Some((start, end))
    })
}

/// A token lowercased, borrowed when it already is (no allocation for the
/// common case of lowercase ASCII).
fn lowercased(token: &str) -> Cow<'_, str> {
    if token.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
        Cow::Borrowed(token)
    } else {
        Cow::Owned(token.to_lowercase())
    }
}

/// The terms of a query given as words: every token of every word, each
/// once, in order of first appearance. Empty when the words hold no
/// alphanumeric character at all.
///
/// ```
/// use palimpsest_core_session::search::query_terms;
///
/// assert_eq!(query_terms(&["Foo-bar", "FOO", "baz"]), ["foo", "bar", "baz"]);
/// assert!(query_terms(&["--", " "]).is_empty());
/// ```
pub fn query_terms<S: AsRef<str>>(words: &[S]) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut terms = Vec::new();
    for w in words {
        for t in tokens(w.as_ref()) {
            if seen.insert(t.normalized.clone()) {
                terms.push(t.normalized);
            }
        }
    }
    terms
}

/// Whether `text` holds every one of `terms` (normalized, as from
/// [`query_terms`]) as a whole token. An empty list of terms matches
/// nothing: there is no empty query.
///
/// ```
/// use palimpsest_core_session::search::matches;
///
/// assert!(matches("The Quick brown fox", &["quick".into(), "fox".into()]));
/// assert!(!matches("quickly", &["quick".into()]));
/// ```
pub fn matches(text: &str, terms: &[String]) -> bool {
    if terms.is_empty() {
        return false;
    }
    // Queries are a few words: a list beats a set.
    let mut missing: Vec<&str> = terms.iter().map(String::as_str).collect();
    for (start, end) in spans(text) {
        let token = lowercased(&text[start..end]);
        if let Some(i) = missing.iter().position(|t| *t == token) {
            missing.swap_remove(i);
            if missing.is_empty() {
                return true;
            }
        }
    }
    false
}

/// The distinct tokens of `text`, normalized, sorted, joined by single
/// spaces: what a full-text index is fed, so that the index's own
/// tokenizer sees exactly these tokens (each a run of alphanumerics,
/// already lowercased) and cannot cut the text otherwise.
///
/// ```
/// use palimpsest_core_session::search::index_text;
///
/// assert_eq!(index_text("Foo, foo-BAR; baz!"), "bar baz foo");
/// ```
pub fn index_text(text: &str) -> String {
    let mut tokens: Vec<Cow<'_, str>> =
        spans(text).map(|(start, end)| lowercased(&text[start..end])).collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens.join(" ")
}

/// A line of `text` to show for a hit: about [`SNIPPET_CHARS`] characters
/// around the first token that is one of `terms`, cut at whole words, with
/// `…` where text was cut off, and every run of whitespace (newlines
/// included) folded to one space. The start of the text when no term
/// occurs in it.
///
/// Every store computes its snippets with this function, from the event's
/// [`searchable_text`], so hits are byte-identical whatever the store.
///
/// ```
/// use palimpsest_core_session::search::snippet;
///
/// assert_eq!(snippet("Short\ntext", &["text".into()]), "Short text");
/// let long = format!("{} needle {}", "hay ".repeat(40), "stack ".repeat(40));
/// let s = snippet(&long, &["needle".into()]);
/// assert!(s.starts_with("…hay ") && s.contains(" needle stack ") && s.ends_with(" stack…"));
/// ```
pub fn snippet(text: &str, terms: &[String]) -> String {
    let hit = tokens(text).find(|t| terms.contains(&t.normalized));
    let (start, end) = hit.map_or((0, 0), |t| (t.start, t.end));
    // Only a window around the match is folded: a text may be megabytes.
    let window = SNIPPET_CHARS * 4;
    let before_src = tail_chars(&text[..start], window);
    let after_src = head_chars(&text[end..], window);
    let before = fold(before_src);
    let after = fold(after_src);
    let matched: Vec<char> = text[start..end].chars().collect();

    if matched.len() >= SNIPPET_CHARS {
        let cut: String = matched[..SNIPPET_CHARS].iter().collect();
        let lead = if start > 0 && !before.trim().is_empty() { "…" } else { "" };
        return format!("{lead}{cut}…");
    }
    let room = SNIPPET_CHARS - matched.len();
    let before_len = before.chars().count();
    let after_len = after.chars().count();
    // A third of the room before the match, the rest after it; room one
    // side does not need goes to the other.
    let mut before_room = (room / 3).min(before_len);
    let after_room = (room - before_room).min(after_len);
    before_room = (room - after_room).min(before_len);

    let clipped_before = before_room < before_len || before_src.len() < start;
    let mut shown_before: String = before.chars().skip(before_len - before_room).collect();
    if before_room < before_len {
        // Cut at a whole word: drop the partial word at the cut.
        shown_before = match shown_before.find(' ') {
            Some(i) => shown_before[i + 1..].to_owned(),
            None => String::new(),
        };
    }
    let clipped_after = after_room < after_len || after_src.len() < text.len() - end;
    let mut shown_after: String = after.chars().take(after_room).collect();
    if after_room < after_len {
        shown_after = match shown_after.rfind(' ') {
            Some(i) => shown_after[..i].to_owned(),
            None => String::new(),
        };
    }
    let mut out = String::new();
    if clipped_before {
        out.push('…');
        out.push_str(shown_before.trim_start());
    } else {
        out.push_str(shown_before.trim_start());
    }
    out.extend(matched.iter());
    out.push_str(if clipped_after { shown_after.as_str() } else { shown_after.trim_end() });
    let trimmed_len = out.trim_end().len();
    out.truncate(trimmed_len);
    if clipped_after {
        out.push('…');
    }
    out
}

/// Every run of whitespace as one space.
fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
}

/// The last `n` characters of `text` (all of it when shorter).
fn tail_chars(text: &str, n: usize) -> &str {
    match text.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((i, _)) if n > 0 => &text[i..],
        _ if n == 0 => "",
        _ => text,
    }
}

/// The first `n` characters of `text` (all of it when shorter).
fn head_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(words: &[&str]) -> Vec<String> {
        query_terms(words)
    }

    #[test]
    fn tokens_are_alphanumeric_runs_lowercased_with_their_offsets() {
        let t: Vec<(usize, usize, String)> =
            tokens("Ünïcode, ÇA va? x2").map(|t| (t.start, t.end, t.normalized)).collect();
        assert_eq!(
            t,
            [
                (0, 9, "ünïcode".to_owned()),
                (11, 14, "ça".to_owned()),
                (15, 17, "va".to_owned()),
                (19, 21, "x2".to_owned())
            ]
        );
        assert_eq!(tokens("").count(), 0);
        assert_eq!(tokens("  -- ").count(), 0);
        assert_eq!(tokens("a+b$c😀d").map(|t| t.normalized).collect::<Vec<_>>(), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_match_needs_every_term_as_a_whole_token_in_any_case() {
        assert!(matches("Error: file NOT found", &terms(&["not", "FILE"])));
        assert!(!matches("Error: file found", &terms(&["not", "file"])));
        assert!(!matches("notfound", &terms(&["not"])));
        assert!(matches("it's not-found", &terms(&["not-found"])));
        assert!(!matches("anything", &[]));
    }

    #[test]
    fn short_texts_are_shown_whole_with_whitespace_folded() {
        assert_eq!(snippet("  one\n\n two\tthree  ", &terms(&["two"])), "one two three");
    }

    #[test]
    fn long_texts_are_cut_at_whole_words_around_the_first_match() {
        let text = format!("{}needle{}", "alpha beta gamma delta ".repeat(10), " omega psi chi".repeat(20));
        let s = snippet(&text, &terms(&["NEEDLE"]));
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("needle"), "{s}");
        let inner = s.trim_start_matches('…').trim_end_matches('…');
        assert!(inner.chars().count() <= SNIPPET_CHARS, "{s}");
        assert!(inner.chars().count() >= SNIPPET_CHARS - 12, "{s}");
        for w in inner.split(' ') {
            assert!(
                ["alpha", "beta", "gamma", "delta", "omega", "psi", "chi", "needle"].contains(&w),
                "partial word {w:?} in {s}"
            );
        }
    }

    #[test]
    fn a_match_at_either_end_is_shown_without_a_mark_on_that_side() {
        let text = format!("needle {}", "word ".repeat(50));
        let s = snippet(&text, &terms(&["needle"]));
        assert!(s.starts_with("needle word") && s.ends_with("word…"), "{s}");
        let text = format!("{}needle", "word ".repeat(50));
        let s = snippet(&text, &terms(&["needle"]));
        assert!(s.starts_with("…word") && s.ends_with("word needle"), "{s}");
    }

    #[test]
    fn a_huge_token_is_cut_hard() {
        let text = format!("x {} y", "a".repeat(500));
        let s = snippet(&text, &[String::from("a").repeat(500)]);
        assert_eq!(s, format!("…{}…", "a".repeat(SNIPPET_CHARS)));
    }

    #[test]
    fn the_index_text_holds_each_token_once() {
        assert_eq!(index_text("B a b A c"), "a b c");
        assert_eq!(index_text("!!!"), "");
    }
}
