//! [`ResidentLog`]: the events a [`Session`](crate::Session) holds in
//! memory, which are the whole log for a session loaded whole and a sparse
//! subset of it for a session resumed from a [`Checkpoint`](crate::Checkpoint).
//!
//! What an append reads (RFC 0002, "What an append actually reads") is the
//! log's length, the surface's events, the `session/settings` event in
//! effect, and (for the invariants) the events since the checkpoint. So a
//! resumed session keeps exactly those **resident** events:
//!
//! - every event at or after [`ResidentLog::resident_from`] (the tail
//!   appended since the checkpoint);
//! - before it, only the events on the surface, the settings event in
//!   effect, and the open turn's events from its `turn/start` on when the
//!   session was [trimmed](crate::Session::trim) inside a turn (crash
//!   repair needs them). A surface event that a replace shadows leaves
//!   memory, and so does a settings event that a newer one replaces.
//!
//! A log loaded whole has `resident_from() == 0`: every event is resident,
//! the log is dense (`resident()[i].seq() == i`) and
//! [`ResidentLog::is_complete`] is true.
//!
//! # Lookup
//!
//! [`ResidentLog::get`] is O(1) on a dense log and on the tail (both fast
//! paths index the vector by seq, from the front or from the back), and a
//! binary search by seq otherwise (the surface events before the tail).

use std::collections::HashSet;

use crate::event::Event;

/// The resident events of a log, sorted by seq, and the log's length.
///
/// ```
/// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
///
/// let mut s = Session::create(SessionHeader::new("r", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// let log = s.resident_log();
/// assert_eq!(log.len(), 1);
/// assert!(log.is_complete());
/// assert_eq!(log.get(0).map(|e| e.seq()), Some(0));
/// assert!(log.get(1).is_none());
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ResidentLog {
    /// Resident events, strictly ascending by seq.
    events: Vec<Event>,
    /// The log's length: the seq the next event must have.
    len: u64,
    /// Every event with a seq at or after this one is resident.
    from: u64,
    /// Seq of the `turn/start` of the turn open at the last
    /// [`Session::trim`](crate::Session::trim): every event from it on
    /// stays, until a trim finds no turn open.
    open_turn: Option<u64>,
}

impl ResidentLog {
    /// An empty (and complete) log.
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// let log = ResidentLog::new();
    /// assert!(log.is_empty() && log.is_complete());
    /// ```
    pub fn new() -> ResidentLog {
        ResidentLog::default()
    }

    /// A sparse log of length `len` holding `events` (strictly ascending
    /// seqs, each below `len`); every later event joins it.
    pub(crate) fn sparse(events: Vec<Event>, len: u64) -> ResidentLog {
        ResidentLog { events, len, from: len, open_turn: None }
    }

    /// The log's length (the number of events in the log, resident or not):
    /// the seq the next event must have.
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert_eq!(ResidentLog::new().len(), 0);
    /// ```
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log has no events.
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert!(ResidentLog::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every event with a seq at or after this one is resident (0 for a log
    /// held whole; the checkpoint's length for a resumed one).
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert_eq!(ResidentLog::new().resident_from(), 0);
    /// ```
    pub fn resident_from(&self) -> u64 {
        self.from
    }

    /// Whether every event of the log is resident: then
    /// [`resident`](ResidentLog::resident) is the whole log, in seq order,
    /// with `resident()[i].seq() == i`.
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert!(ResidentLog::new().is_complete());
    /// ```
    pub fn is_complete(&self) -> bool {
        self.from == 0
    }

    /// The resident events, sorted by seq (the whole log when
    /// [`is_complete`](ResidentLog::is_complete)).
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert!(ResidentLog::new().resident().is_empty());
    /// ```
    pub fn resident(&self) -> &[Event] {
        &self.events
    }

    /// The resident events with a seq at or after `seq`, sorted by seq.
    /// From a seq at or after [`resident_from`](ResidentLog::resident_from)
    /// this is every event of the log from `seq` on.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("r", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// assert_eq!(s.resident_log().since(0).len(), 1);
    /// assert!(s.resident_log().since(1).is_empty());
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn since(&self, seq: u64) -> &[Event] {
        let at = self.events.partition_point(|e| e.seq() < seq);
        &self.events[at..]
    }

    /// The event with this seq, if it is in the log and resident.
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert!(ResidentLog::new().get(0).is_none());
    /// ```
    pub fn get(&self, seq: u64) -> Option<&Event> {
        if seq >= self.len {
            return None;
        }
        find(&self.events, seq)
    }

    /// The last event of the log, if it is resident (it always is on a
    /// complete log, and after the first append to a resumed one).
    ///
    /// ```
    /// use palimpsest_core_session::ResidentLog;
    ///
    /// assert!(ResidentLog::new().last().is_none());
    /// ```
    pub fn last(&self) -> Option<&Event> {
        self.len.checked_sub(1).and_then(|seq| self.get(seq))
    }

    /// Appends `event`, whose seq must be [`len`](ResidentLog::len) (the
    /// session checked it).
    /// Room for `more` events, exactly: a log read whole is sized once,
    /// with no growth slack left over.
    pub(crate) fn reserve_exact(&mut self, more: usize) {
        self.events.reserve_exact(more);
    }

    pub(crate) fn push(&mut self, event: Event) {
        self.len = event.seq() + 1;
        self.events.push(event);
    }

    /// Takes back every event from seq `len` on (a rolled-back batch, all
    /// of whose events are resident: nothing is trimmed during a batch).
    pub(crate) fn truncate(&mut self, len: u64) {
        let keep = self.events.partition_point(|e| e.seq() < len);
        self.events.truncate(keep);
        self.len = len.min(self.len);
    }

    /// Drops the resident events before [`resident_from`] that are neither
    /// on `surface` nor the settings event `settings_seq` nor part of the
    /// open turn kept by [`keep_open_turn`](ResidentLog::keep_open_turn).
    /// Nothing to do for a complete log. O(resident + surface).
    ///
    /// [`resident_from`]: ResidentLog::resident_from
    pub(crate) fn trim(&mut self, surface: &[u64], settings_seq: Option<u64>) {
        let before = self.trimmable();
        if before == 0 {
            return;
        }
        let keep: HashSet<u64> = surface.iter().copied().filter(|&s| s < self.from).collect();
        let (mut i, from) = (0usize, self.from);
        self.events.retain_mut(|e| {
            i += 1;
            let kept = i > before || keep.contains(&e.seq()) || Some(e.seq()) == settings_seq;
            // What stays of a log loaded whole must not hold on to the
            // shared texts of the events let go of.
            if kept && e.seq() < from {
                e.unshare_text();
            }
            kept
        });
    }

    /// How many resident events, from the first, a trim may let go of:
    /// those before [`resident_from`](ResidentLog::resident_from) and
    /// before the open turn kept.
    fn trimmable(&self) -> usize {
        if self.from == 0 {
            return 0;
        }
        let bound = self.open_turn.map_or(self.from, |start| start.min(self.from));
        self.events.partition_point(|e| e.seq() < bound)
    }

    /// [`trim`](ResidentLog::trim), once enough may have left the surface
    /// to be worth a pass: when the resident events before
    /// [`resident_from`](ResidentLog::resident_from) outnumber twice the
    /// surface (and a few more). A pass is O(resident + surface), so trimming
    /// on every replace would make a long run of replaces quadratic; this way
    /// each pass lets go of at least as many events as it keeps, and what
    /// stays resident is at most about three times what must.
    pub(crate) fn trim_when_worth(&mut self, surface: &[u64], settings_seq: Option<u64>) {
        if self.trimmable() > 2 * surface.len() + TRIM_SLACK {
            self.trim(surface, settings_seq);
        }
    }

    /// Keeps every event from seq `turn_start` on (the open turn's
    /// `turn/start`, resident) through the trims to come; `None` lets the
    /// next trim go back to the surface alone.
    pub(crate) fn keep_open_turn(&mut self, turn_start: Option<u64>) {
        self.open_turn = turn_start;
    }

    /// Makes every event so far part of what a checkpoint covers: from now
    /// on only the tail appended after this call is resident whole (the
    /// caller then trims what came before).
    pub(crate) fn rebase(&mut self) {
        self.from = self.len;
    }

    /// Consumes the log, returning its resident events.
    pub(crate) fn into_events(self) -> Vec<Event> {
        self.events
    }
}

/// Resident events before the tail that may stay beyond twice the surface
/// before [`ResidentLog::trim_when_worth`] lets go of them.
const TRIM_SLACK: usize = 64;

/// The event with this seq in `events`, a slice sorted by seq: O(1) when
/// the slice is dense from 0 (a whole log) or when `seq` lies in a dense
/// run at its end (a resumed session's tail), a binary search otherwise.
pub(crate) fn find(events: &[Event], seq: u64) -> Option<&Event> {
    // From the front: a whole log.
    if let Some(e) = usize::try_from(seq).ok().and_then(|i| events.get(i)) {
        if e.seq() == seq {
            return Some(e);
        }
    }
    // From the back: the tail after a checkpoint.
    let last = events.last()?;
    let back = usize::try_from(last.seq().checked_sub(seq)?).ok()?;
    if let Some(e) = events.len().checked_sub(1 + back).and_then(|i| events.get(i)) {
        if e.seq() == seq {
            return Some(e);
        }
    }
    events.binary_search_by_key(&seq, Event::seq).ok().map(|i| &events[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::TurnStart;

    fn ev(seq: u64) -> Event {
        Event::log(seq, 0, TurnStart { turn: 1 }).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn find_reads_dense_sparse_and_tail_alike() {
        let seqs = [2u64, 5, 9, 10, 11, 12];
        let events: Vec<Event> = seqs.iter().map(|&s| ev(s)).collect();
        for seq in 0..15 {
            let found = find(&events, seq).map(Event::seq);
            assert_eq!(found, seqs.contains(&seq).then_some(seq), "seq {seq}");
        }
        let dense: Vec<Event> = (0..6).map(ev).collect();
        for seq in 0..8 {
            assert_eq!(find(&dense, seq).map(Event::seq), (seq < 6).then_some(seq));
        }
        assert!(find(&[], 0).is_none());
    }

    #[test]
    fn trim_keeps_the_tail_the_surface_and_the_settings() {
        let mut log = ResidentLog::sparse(vec![ev(1), ev(3), ev(4)], 6);
        log.push(ev(6));
        log.trim(&[3, 6], Some(4));
        let kept: Vec<u64> = log.resident().iter().map(Event::seq).collect();
        assert_eq!(kept, [3, 4, 6]);
        log.trim(&[6], None);
        let kept: Vec<u64> = log.resident().iter().map(Event::seq).collect();
        assert_eq!(kept, [6]);
        assert_eq!(log.len(), 7);
        log.truncate(6);
        assert_eq!((log.len(), log.resident().len()), (6, 0));
    }

    /// A log decoded a batch at a time shares one payload text per batch;
    /// the events a trim keeps get their own, so the batch's text goes
    /// with the events let go of.
    #[test]
    fn the_events_a_trim_keeps_share_no_text_with_those_it_let_go() {
        let data = r#"{"turn":1}"#;
        let text = crate::event::SharedText::new(data.repeat(5));
        let shared = |seq: u64| {
            let start = seq as usize * data.len();
            Event::from_shared_parts(seq, 0, "turn/start", &text, start..start + data.len(), None, None)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut log = ResidentLog::sparse((0..4).map(shared).collect(), 4);
        assert!(log.resident().iter().all(Event::shares_text));
        log.push(shared(4));
        log.trim(&[1, 3], Some(2));
        let kept: Vec<(u64, bool)> = log.resident().iter().map(|e| (e.seq(), e.shares_text())).collect();
        // The tail (seq 4, after the checkpoint) is untouched.
        assert_eq!(kept, [(1, false), (2, false), (3, false), (4, true)]);
        assert!(log.resident().iter().all(|e| e.data() == data));
    }
}
