//! `palimpsest sessions STORE [--tree]`: the sessions of a store, newest
//! first, and their lineage.
//!
//! One row per session: id, creation time, last activity (the time of its
//! last event), events, turns (the number of the last turn), the outcome of
//! its last turn (`completed`, `error`, `interrupted`, `max-tokens`, or `-`
//! before the first), its title (the first prompt, clipped) and parent
//! (with how many events the fork copied). Rows are sorted by creation
//! time, newest first, then by id.
//!
//! Each row comes from the store's [`SessionSummary`]: a few records (the
//! header, the last event, the last turn bracket, the first prompt), not
//! the log, so listing costs O(sessions) whatever their length. A defect
//! elsewhere in a log is `validate`'s to find.
//!
//! `--json` prints the same as one JSON array, for scripts:
//! `[{"id", "createdAt", "lastActivity", "events", "turns", "outcome",
//! "title", "parentSession", "seedLength", "error"}]`, every key always
//! present (`null` when unknown; `error` is `{"code", "message"}` for a
//! session that cannot be loaded, else `null`).
//!
//! `--tree` draws the lineage: each fork under its parent (newest first at
//! every level), with the seq it was forked after. A session whose parent is
//! not in the store is a root, and says so.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

use palimpsest_core_session::payload::{TurnEnd, TurnEndReason, UserMessage};
use palimpsest_core_session::{Event, EventType, SessionHeader};
use palimpsest_persistence::SessionSummary;
use serde_json::json;

use crate::error::Exit;
use crate::output;
use crate::store_arg::Store;
use crate::timefmt;

/// The columns of the table.
const COLUMNS: usize = 8;

/// How many characters of the first prompt the table shows.
const TITLE_CHARS: usize = 40;

/// What `sessions` shows of one session.
struct Row {
    header: SessionHeader,
    /// `Err((code, message))` when the session could not be loaded.
    stats: Result<Stats, (String, String)>,
}

struct Stats {
    events: u64,
    turns: u64,
    last_activity: Option<u64>,
    outcome: Option<&'static str>,
    title: Option<String>,
}

impl Stats {
    /// What the table shows of a summary: a few records, never the log.
    fn of(summary: &SessionSummary) -> Stats {
        Stats {
            events: summary.events,
            turns: summary.turns(),
            last_activity: summary.last_activity,
            outcome: summary.last_turn.as_ref().map(outcome),
            title: summary.first_prompt.as_ref().and_then(title),
        }
    }
}

/// How the last turn ended, from its last bracket: `interrupted` for a
/// turn still open (a crash, or a run in progress) or aborted.
fn outcome(last_turn: &Event) -> &'static str {
    match last_turn.event_type() {
        EventType::TurnEnd => match last_turn.data_as::<TurnEnd>().map(|t| t.reason) {
            Ok(TurnEndReason::Completed) => "completed",
            Ok(TurnEndReason::MaxTokens) => "max-tokens",
            Ok(TurnEndReason::Aborted { .. } | TurnEndReason::Interrupted) => "interrupted",
            Ok(TurnEndReason::Error { .. }) | Err(_) => "error",
        },
        _ => "interrupted",
    }
}

/// The first prompt's text, whitespace collapsed.
fn title(first_prompt: &Event) -> Option<String> {
    let message = first_prompt.data_as::<UserMessage>().ok()?.message;
    let text = message.text().split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// `text` cut to `max` characters, with `…` when it was longer.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

impl Row {
    fn cells(&self, lineage: String) -> [String; COLUMNS] {
        let (last, events, turns, outcome, title) = match &self.stats {
            Ok(s) => (
                s.last_activity.map_or_else(|| "-".to_owned(), timefmt::utc),
                s.events.to_string(),
                s.turns.to_string(),
                s.outcome.unwrap_or("-").to_owned(),
                s.title.as_deref().map_or_else(|| "-".to_owned(), |t| clip(t, TITLE_CHARS)),
            ),
            Err(_) => ["?"; 5].map(str::to_owned).into(),
        };
        // A session whose header could not be read is listed by its file's
        // name with no creation time (0): not 1970.
        let created = match &self.stats {
            Err(_) if self.header.created_at == 0 => "?".to_owned(),
            _ => timefmt::utc(self.header.created_at),
        };
        [lineage, created, last, events, turns, outcome, title, String::new()]
    }

    fn json(&self) -> serde_json::Value {
        let h = &self.header;
        let (stats, error) = match &self.stats {
            Ok(s) => (Some(s), serde_json::Value::Null),
            Err((code, message)) => (None, json!({"code": code, "message": message})),
        };
        json!({
            "id": h.id,
            "createdAt": h.created_at,
            "lastActivity": stats.and_then(|s| s.last_activity),
            "events": stats.map(|s| s.events),
            "turns": stats.map(|s| s.turns),
            "outcome": stats.and_then(|s| s.outcome),
            "title": stats.and_then(|s| s.title.clone()),
            "parentSession": h.parent_session,
            "seedLength": h.seed_length,
            "error": error,
        })
    }

    fn parent_cell(&self) -> String {
        let h = &self.header;
        match (&h.parent_session, h.seed_length) {
            (Some(p), Some(n)) => format!("{p} (first {n} events)"),
            (Some(p), None) => p.clone(),
            (None, _) => "-".to_owned(),
        }
    }

    /// The tree's last column: where this fork was made. `parent_here`:
    /// drawn under its parent; `ids`: every session of the store (a
    /// parent that is there but could not be drawn above its child is in
    /// a cycle of hand-edited headers, or is the session itself).
    fn forked_cell(&self, parent_here: bool, ids: &HashSet<&str>) -> String {
        let h = &self.header;
        let at = match h.seed_length {
            Some(0) => "before seq 0".to_owned(),
            Some(n) => format!("after seq {}", n - 1),
            None => "at an unknown point".to_owned(),
        };
        match &h.parent_session {
            None => "-".to_owned(),
            Some(_) if parent_here => at,
            Some(p) if *p == h.id => format!("from itself {at} (its header names it as its own parent)"),
            Some(p) if ids.contains(p.as_str()) => format!("from {p} {at} (a cycle of parents)"),
            Some(p) => format!("from {p} {at} (not in this store)"),
        }
    }
}

/// Newest first, then by id.
fn newest_first(a: &Row, b: &Row) -> std::cmp::Ordering {
    b.header.created_at.cmp(&a.header.created_at).then_with(|| a.header.id.cmp(&b.header.id))
}

/// `palimpsest sessions STORE [--tree] [--json]`. Exit 1 when a session's
/// summary cannot be read (its row shows `?`, the error is printed, and in
/// JSON it is the row's `error`).
pub(crate) fn sessions(store: &Path, tree: bool, as_json: bool, out: &mut dyn Write) -> anyhow::Result<Exit> {
    let store = Store::open_existing(store, crate::store_arg::Access::Read)?;
    let summaries = store.summaries()?;
    let mut exit = Exit::Success;
    let mut rows: Vec<Row> = Vec::with_capacity(summaries.len());
    for (header, summary) in summaries {
        let stats = match summary {
            Ok(summary) => Ok(Stats::of(&summary)),
            Err(e) => {
                if !as_json {
                    output::error_line(&e.to_string());
                }
                exit = Exit::Invalid;
                Err((e.code.clone(), e.message.clone()))
            }
        };
        rows.push(Row { header, stats });
    }
    rows.sort_by(newest_first);
    if as_json {
        let list: Vec<serde_json::Value> = rows.iter().map(Row::json).collect();
        writeln!(out, "{}", serde_json::Value::Array(list))?;
        return Ok(exit);
    }

    let last_column = if tree { "FORKED" } else { "PARENT" };
    let mut table: Vec<[String; COLUMNS]> =
        vec![["ID", "CREATED", "LAST ACTIVITY", "EVENTS", "TURNS", "OUTCOME", "TITLE", last_column]
            .map(String::from)];
    if tree {
        let ids: HashSet<&str> = rows.iter().map(|r| r.header.id.as_str()).collect();
        for (row, prefix, parent_here) in lineage(&rows) {
            let mut cells = row.cells(format!("{prefix}{}", row.header.id));
            cells[COLUMNS - 1] = row.forked_cell(parent_here, &ids);
            table.push(cells);
        }
    } else {
        for row in &rows {
            let mut cells = row.cells(row.header.id.clone());
            cells[COLUMNS - 1] = row.parent_cell();
            table.push(cells);
        }
    }
    // Ids, parents and titles are logged text: no control character of
    // theirs reaches the terminal (`output::printable`).
    let table: Vec<[String; COLUMNS]> =
        table.into_iter().map(|row| row.map(|cell| output::printable_line(&cell))).collect();
    write_table(&table, out)?;
    if rows.is_empty() {
        output::note(&format!("{}: the {} holds no sessions", store.path().display(), store.kind()));
    }
    Ok(exit)
}

/// The rows in tree order, each with its drawing prefix (`├─ `, `│  └─ `,
/// ...) and whether its parent is in the store. Roots are the sessions
/// without a parent here; a cycle of hand-edited headers, which has no
/// root, is listed flat at the end rather than lost.
fn lineage(rows: &[Row]) -> Vec<(&Row, String, bool)> {
    let ids: HashSet<&str> = rows.iter().map(|r| r.header.id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        match row.header.parent_session.as_deref() {
            Some(p) if ids.contains(p) && p != row.header.id => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    let mut seen = vec![false; rows.len()];
    // Depth-first, with an explicit stack: (row, prefix for its children,
    // its own prefix, parent here).
    let mut stack: Vec<(usize, String, String, bool)> =
        roots.iter().rev().map(|&i| (i, String::new(), String::new(), false)).collect();
    while let Some((i, child_prefix, own_prefix, parent_here)) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        out.push((&rows[i], own_prefix, parent_here));
        let kids = children.get(rows[i].header.id.as_str()).map(Vec::as_slice).unwrap_or_default();
        for (k, &child) in kids.iter().enumerate().rev() {
            let last = k + 1 == kids.len();
            let own = format!("{child_prefix}{}", if last { "└─ " } else { "├─ " });
            let next = format!("{child_prefix}{}", if last { "   " } else { "│  " });
            stack.push((child, next, own, true));
        }
    }
    for (i, row) in rows.iter().enumerate() {
        if !seen[i] {
            out.push((row, String::new(), false));
        }
    }
    out
}

/// Left-aligned text columns, right-aligned numbers (EVENTS, TURNS), two
/// spaces apart; no trailing spaces.
fn write_table<const N: usize>(table: &[[String; N]], out: &mut dyn Write) -> std::io::Result<()> {
    let width = |col: usize| table.iter().map(|r| r[col].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..N).map(width).collect();
    for row in table {
        let mut line = String::new();
        for (col, cell) in row.iter().enumerate() {
            if col > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(widths[col].saturating_sub(cell.chars().count()));
            if col == 3 || col == 4 {
                line.push_str(&pad);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&pad);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, created: u64, parent: Option<&str>) -> Row {
        let mut header = SessionHeader::new(id, created);
        header.parent_session = parent.map(str::to_owned);
        header.seed_length = parent.map(|_| 3);
        Row { header, stats: Err(("io".into(), "not loaded".into())) }
    }

    fn drawn(rows: &mut [Row]) -> Vec<String> {
        rows.sort_by(newest_first);
        lineage(rows).into_iter().map(|(r, prefix, _)| format!("{prefix}{}", r.header.id)).collect()
    }

    #[test]
    fn forks_hang_under_their_parents_newest_first() {
        let mut rows = vec![
            row("a", 1, None),
            row("b", 2, None),
            row("a1", 3, Some("a")),
            row("a2", 4, Some("a")),
            row("a1x", 5, Some("a1")),
            row("orphan", 6, Some("gone")),
        ];
        assert_eq!(drawn(&mut rows), ["orphan", "b", "a", "├─ a2", "└─ a1", "   └─ a1x"]);
    }

    #[test]
    fn a_cycle_of_parents_is_listed_not_lost() {
        let mut rows = vec![row("x", 1, Some("y")), row("y", 2, Some("x")), row("self", 3, Some("self"))];
        assert_eq!(drawn(&mut rows), ["self", "y", "x"]);
    }

    #[test]
    fn a_parent_in_the_store_is_never_said_to_be_missing() {
        let mut rows = vec![
            row("x", 1, Some("y")),
            row("y", 2, Some("x")),
            row("self", 3, Some("self")),
            row("orphan", 4, Some("gone")),
        ];
        rows.sort_by(newest_first);
        let ids: HashSet<&str> = rows.iter().map(|r| r.header.id.as_str()).collect();
        let cells: Vec<String> =
            lineage(&rows).into_iter().map(|(r, _, here)| r.forked_cell(here, &ids)).collect();
        assert_eq!(
            cells,
            [
                "from gone after seq 2 (not in this store)",
                "from itself after seq 2 (its header names it as its own parent)",
                "from x after seq 2 (a cycle of parents)",
                "from y after seq 2 (a cycle of parents)",
            ]
        );
    }

    #[test]
    fn numbers_align_right_and_lines_end_clean() {
        let table = [
            ["ID", "C", "L", "EVENTS", "TURNS", "P"].map(String::from),
            ["abc", "c", "l", "7", "1", ""].map(String::from),
        ];
        let mut out = Vec::new();
        write_table(&table, &mut out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(String::from_utf8_lossy(&out), "ID   C  L  EVENTS  TURNS  P\nabc  c  l       7      1\n");
    }

    #[test]
    fn titles_are_clipped_to_a_width_and_say_so() {
        assert_eq!(clip("short", 40), "short");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("ünïcödé", 4).chars().count(), 4);
    }
}
