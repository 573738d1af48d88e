//! `palimpsest search STORE QUERY... [--limit N] [--json]`: the messages of
//! every session of a store that hold every word of the query.
//!
//! What is searched and what matches is the library's
//! ([`palimpsest_persistence::search`]): the text of user, context
//! (compaction summaries included), steering, assistant and tool-result
//! messages, not chunks; whole words, any case, every word required. The
//! whole log is searched, so a message a compaction or prune took off the
//! surface is still found. Each store searches its own way (SQLite FTS5,
//! PostgreSQL full-text search, a scan of JSONL files) and all give the
//! same hits, newest session (by last activity) first, then by seq.
//!
//! One hit is two lines: `<id>  <seq>  <type>  <time>`, an id longer than
//! 12 characters shortened to the shortest prefix (12 characters at least)
//! that `--session` takes for it, then the snippet, indented, its query words highlighted when
//! colours are on. `--json` prints one array of `{"session", "seq", "type",
//! "time", "snippet"}` (full ids, times in epoch milliseconds), one hit a
//! line. Like grep, exit 0 when something was found and 1 when nothing was
//! (with a note on stderr); 2 for a query with no word at all
//! (`search-query-empty`) or a store that cannot be read. A reading
//! command: it never creates, changes or locks a store.

use std::io::Write;
use std::path::Path;

use palimpsest_core_session::search::tokens;
use palimpsest_persistence::{SearchHit, SearchQuery};
use serde::Serialize;

use crate::error::{CliError, Exit};
use crate::output;
use crate::store_arg::{Access, Store};
use crate::timefmt;

/// Ids up to this many characters are shown whole; longer ones are cut to
/// a prefix at least this long.
const MIN_ID_CHARS: usize = 12;

/// One hit as `--json` prints it.
#[derive(Serialize)]
struct JsonHit<'a> {
    session: &'a str,
    seq: u64,
    #[serde(rename = "type")]
    event_type: &'a str,
    time: u64,
    snippet: &'a str,
}

/// `palimpsest search`.
pub(crate) fn search(
    store: &Path,
    words: &[String],
    limit: usize,
    json: bool,
    color: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Exit> {
    let query = SearchQuery::new(words).map_err(|e| CliError {
        code: e.code().to_owned(),
        location: String::new(),
        message: e.detail(),
        exit: Exit::Usage,
    })?;
    let store = Store::open_existing(store, Access::Read).map_err(unreadable)?;
    // One more than shown, to tell whether the limit cut the list.
    let mut hits = store.search(&query.clone().with_limit(limit.saturating_add(1))).map_err(unreadable)?;
    let more = hits.len() > limit;
    hits.truncate(limit);
    if json {
        let lines = hits.iter().map(|h| {
            serde_json::to_string(&JsonHit {
                session: &h.session_id,
                seq: h.seq,
                event_type: &h.event_type,
                time: h.time,
                snippet: &h.snippet,
            })
            .unwrap_or_default()
        });
        output::json_lines_array(out, lines)?;
    } else {
        let ids: Vec<String> = store.list().map_err(unreadable)?.into_iter().map(|h| h.id).collect();
        write_hits(&hits, &ids, query.terms(), color, out)?;
    }
    if hits.is_empty() {
        output::note(&format!(
            "no message in {} holds every word of the query ({}); the whole log is searched, \
             shadowed messages included",
            store.path().display(),
            query.terms().join(" ")
        ));
        return Ok(Exit::Invalid);
    }
    if more {
        output::note(&format!("the first {limit} hits are shown; --limit N shows more"));
    }
    Ok(Exit::Success)
}

/// Any error of a search is exit 2, whatever its code (a session that
/// does not decode is `event-malformed`, elsewhere exit 1): exit 1 is
/// grep's "nothing matched" here, and a script must not read a store it
/// could not search as one without the words (docs/search.md, 3).
fn unreadable(mut error: CliError) -> CliError {
    error.exit = Exit::Usage;
    error
}

/// The human form: a header line and the indented snippet per hit.
fn write_hits(
    hits: &[SearchHit],
    ids: &[String],
    terms: &[String],
    color: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let rows: Vec<[String; 4]> = hits
        .iter()
        .map(|h| {
            let ty = output::printable_line(&h.event_type);
            let id = output::printable_line(&short_id(&h.session_id, ids));
            [id, h.seq.to_string(), ty, timefmt::utc(h.time)]
        })
        .collect();
    let width = |col: usize| rows.iter().map(|r| r[col].chars().count()).max().unwrap_or(0);
    let (w_id, w_seq, w_type) = (width(0), width(1), width(2));
    for (row, hit) in rows.iter().zip(hits) {
        let [id, seq, ty, time] = row;
        let id_pad = " ".repeat(w_id - id.chars().count());
        let seq_pad = " ".repeat(w_seq - seq.chars().count());
        let ty_pad = " ".repeat(w_type - ty.chars().count());
        writeln!(out, "{id}{id_pad}  {seq_pad}{seq}  {ty}{ty_pad}  {time}")?;
        // Logged text, shown: control characters cannot reach the terminal.
        writeln!(out, "    {}", highlight(&output::printable_line(&hit.snippet), terms, color))?;
    }
    Ok(())
}

/// `id` when it is short, else the shortest prefix of it (at least
/// [`MIN_ID_CHARS`] characters) that names it alone among `ids`, as
/// `--session` resolves prefixes.
fn short_id(id: &str, ids: &[String]) -> String {
    let bounds = id.char_indices().map(|(i, _)| i).skip(MIN_ID_CHARS).chain([id.len()]);
    for end in bounds {
        let prefix = &id[..end];
        if prefix == id || ids.iter().filter(|other| other.starts_with(prefix)).count() == 1 {
            return prefix.to_owned();
        }
    }
    id.to_owned()
}

/// `snippet` with every token that is a query term in bold yellow, when
/// `color` is on.
fn highlight(snippet: &str, terms: &[String], color: bool) -> String {
    if !color {
        return snippet.to_owned();
    }
    let mut out = String::with_capacity(snippet.len() + 16);
    let mut at = 0;
    for t in tokens(snippet) {
        if terms.contains(&t.normalized) {
            out.push_str(&snippet[at..t.start]);
            out.push_str("\x1b[1;33m");
            out.push_str(&snippet[t.start..t.end]);
            out.push_str("\x1b[0m");
            at = t.end;
        }
    }
    out.push_str(&snippet[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_cut_to_the_shortest_prefix_that_names_them_alone() {
        let ids: Vec<String> =
            ["run-20261203-120405-1a2b", "run-20261203-130000-ffff", "short", "abcdefghij", "abcdefghik"]
                .map(String::from)
                .into();
        assert_eq!(short_id(&ids[0], &ids), "run-20261203-12");
        assert_eq!(short_id(&ids[2], &ids), "short");
        assert_eq!(short_id(&ids[3], &ids), "abcdefghij");
        let ids: Vec<String> =
            ["session-abcdef-1", "session-abcdef-2", "session-xyz-000000"].map(String::from).into();
        assert_eq!(short_id(&ids[0], &ids), "session-abcdef-1");
        assert_eq!(short_id(&ids[2], &ids), "session-xyz-");
    }

    #[test]
    fn query_words_are_highlighted_whole_and_in_any_case() {
        let terms = vec!["disk".to_owned()];
        assert_eq!(highlight("Disk full; disks", &terms, true), "\x1b[1;33mDisk\x1b[0m full; disks");
        assert_eq!(highlight("Disk full", &terms, false), "Disk full");
    }
}
