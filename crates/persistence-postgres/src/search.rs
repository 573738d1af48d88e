//! What the `search` table holds for an event, and the tsquery a search
//! sends: both from the reference tokenizer, so the server's text search
//! parser never cuts a text its own way.

use palimpsest_core_session::search::{index_text, searchable_text};
use palimpsest_core_session::Event;
use palimpsest_persistence::SearchQuery;

/// The longest term kept in the index, in bytes: a longer token (and a
/// longer query term) is clipped to this at a character boundary, far
/// below PostgreSQL's 2046-byte lexeme limit. Clipping only adds
/// candidates, which the reference matcher then refuses.
pub const MAX_TERM_BYTES: usize = 255;

/// The most bytes of terms one row's tsvector holds (a tsvector is at most
/// 1 MiB); a message with more has a NULL `terms`, and is a candidate of
/// every search.
pub(crate) const MAX_INDEXED_BYTES: usize = 512 << 10;

/// `term` clipped to [`MAX_TERM_BYTES`] at a character boundary.
fn clip(term: &str) -> &str {
    if term.len() <= MAX_TERM_BYTES {
        return term;
    }
    let mut end = MAX_TERM_BYTES;
    while !term.is_char_boundary(end) {
        end -= 1;
    }
    &term[..end]
}

/// The `search` row of `event`: `None` when it has none (not a message, or
/// no text); `Some(None)` for a row with NULL terms (too many); else the
/// distinct clipped terms, space-separated, for `array_to_tsvector`.
pub(crate) fn index_row(event: &Event) -> Option<Option<String>> {
    let text = searchable_text(event)?;
    let tokens = index_text(&text);
    if tokens.is_empty() {
        return None;
    }
    if tokens.len() > MAX_INDEXED_BYTES {
        return Some(None);
    }
    if tokens.split(' ').all(|t| t.len() <= MAX_TERM_BYTES) {
        return Some(Some(tokens));
    }
    let clipped: Vec<&str> = tokens.split(' ').map(clip).collect();
    Some(Some(clipped.join(" ")))
}

/// The tsquery text of `query`: every term quoted as a lexeme (taken as it
/// is: no parser, no normalization), ANDed.
pub(crate) fn tsquery(query: &SearchQuery) -> String {
    query
        .terms()
        .iter()
        .map(|t| format!("'{}'", clip(t).replace('\\', "\\\\").replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(" & ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_quoted_and_long_ones_clipped_at_a_char_boundary() {
        let long = "é".repeat(200);
        let q = SearchQuery::new(&["Foo", long.as_str()]).unwrap_or_else(|e| panic!("{e}"));
        let text = tsquery(&q);
        assert!(text.starts_with("'foo' & 'é"), "{text}");
        assert_eq!(text.len(), "'foo' & ''".len() + 254);
    }
}
