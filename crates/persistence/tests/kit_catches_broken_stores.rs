//! Tests of the contract kit itself: a correct byte-level store (JSONL in
//! memory, so it has torn tails) passes every check, and each deliberately
//! broken variant fails the check written for its fault.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palimpsest_core_session::jsonl::{header_line, write_events, JsonlLog};
use palimpsest_core_session::{Checkpoint, Event, SessionHeader};
use palimpsest_persistence::hold::{check_fence, check_renewal, grant, HoldRecord};
use palimpsest_persistence::testkit::{self, StoreFactory, WriteFault, CHECKS};
use palimpsest_persistence::{
    check_continues, check_header, Hold, LoadReport, Resumable, SearchHit, SearchQuery, SessionStore,
    StoreError, StoredSession,
};

/// What the store gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Writes the contiguous prefix of a refused batch.
    NonAtomic,
    /// Appends whatever it is given.
    NoContiguityCheck,
    /// Writes `sourceEventSeqs: []` as absent.
    DropsEmptySources,
    /// Re-serialises `data` through `serde_json::Value` (sorted keys, no whitespace).
    NormalisesData,
    /// Treats ids case-insensitively.
    CaseFoldsIds,
    /// `list` loses `cwd`.
    ListDropsCwd,
    /// `delete` hides a session; a later create brings its events back.
    DeleteKeepsEvents,
    /// Appends after a torn tail without cutting it off.
    KeepsTornTail,
    /// Does not report a dropped torn tail.
    HidesTornTail,
    /// Appends after an unterminated last line without adding `\n`.
    NoNewlineFix,
    /// Every `open` starts empty.
    ForgetsOnReopen,
    /// Cuts `data` longer than 1 MiB.
    TruncatesHugeLines,
    /// `create_with_events` is `create` then `append`: a refused batch
    /// leaves an empty session behind.
    CreateThenAppend,
    /// After an I/O error it keeps the part of the batch that reached the
    /// file, and goes on writing.
    KeepsPartOfAFailedBatch,
    /// `search` matches substrings of the lowercased text, not whole tokens.
    SearchMatchesSubstrings,
    /// `search` also finds the words of `assistant/chunk` events.
    SearchIndexesChunks,
    /// `search` orders sessions by id, not by last activity.
    SearchOrdersById,
    /// Grants holds but lets any store append to a held session.
    HoldsDoNotFence,
    /// A takeover keeps the expired hold's token, so its first holder's
    /// appends still pass the fence.
    TakeoverKeepsTheToken,
    /// `renew` checks the fence only, so a released hold comes back.
    RenewsAReleasedHold,
    /// `load_resumable` returns the saved checkpoint without checking that
    /// it matches the log.
    TrustsCheckpoints,
    /// `load_resumable` returns every event after the checkpoint, not only
    /// those after it.
    CheckpointWithTheWholeLog,
}

#[derive(Debug, Default)]
struct Files {
    live: BTreeMap<String, Vec<u8>>,
    deleted: BTreeMap<String, Vec<u8>>,
    /// Each session's hold: holder, token, expiry (a lease, as the SQL
    /// stores keep it, by this process's clock).
    holds: BTreeMap<String, (String, u64, SystemTime)>,
    /// Each session's checkpoint, as its JSON text.
    checkpoints: BTreeMap<String, String>,
}

fn record(held: &(String, u64, SystemTime)) -> HoldRecord {
    let now = SystemTime::now();
    let left = match held.2.duration_since(now) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    HoldRecord {
        holder: held.0.clone(),
        token: held.1,
        expires_at: held.2,
        live: held.2 > now,
        seconds_left: left,
    }
}

#[derive(Debug)]
struct BytesStore {
    fault: Fault,
    files: Arc<Mutex<Files>>,
    /// Armed by the kit: the next append fails with `io`.
    write_fault: WriteFault,
    /// Set by an I/O error: writes are refused until reopened.
    poisoned: std::sync::atomic::AtomicBool,
    /// The tokens of the holds this store took.
    ours: Mutex<BTreeMap<String, u64>>,
}

fn corrupt(e: palimpsest_core_session::LoadError) -> StoreError {
    StoreError::Corrupt { location: "memory".into(), detail: e.to_string(), cause: Some(e) }
}

impl BytesStore {
    fn files(&self) -> MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ours(&self, id: &str) -> Option<u64> {
        self.ours.lock().unwrap_or_else(|p| p.into_inner()).get(id).copied()
    }

    fn fence(&self, files: &Files, id: &str) -> Result<(), StoreError> {
        if self.fault == Fault::HoldsDoNotFence {
            return Ok(());
        }
        check_fence(id, self.ours(id), files.holds.get(&self.key(id)).map(record).as_ref())
    }

    fn key(&self, id: &str) -> String {
        if self.fault == Fault::CaseFoldsIds {
            id.to_lowercase()
        } else {
            id.to_owned()
        }
    }

    fn encode(&self, events: &[Event]) -> Vec<u8> {
        let events: Vec<Event> = events
            .iter()
            .map(|e| match self.fault {
                Fault::DropsEmptySources => {
                    Event::from_json(&e.to_json().replace(r#","sourceEventSeqs":[]"#, "")).unwrap()
                }
                Fault::NormalisesData => {
                    let mut v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
                    let data: serde_json::Value = serde_json::from_str(e.data()).unwrap();
                    v["data"] = data;
                    Event::from_value(&v).unwrap()
                }
                Fault::TruncatesHugeLines if e.data().len() > 1 << 20 => {
                    let mut v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
                    v["data"] = serde_json::Value::Null;
                    Event::from_value(&v).unwrap()
                }
                _ => e.clone(),
            })
            .collect();
        let mut out = Vec::new();
        write_events(&events, &mut out);
        out
    }
}

impl SessionStore for BytesStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        check_header(header)?;
        let key = self.key(&header.id);
        let mut files = self.files();
        if files.live.contains_key(&key) {
            return Err(StoreError::AlreadyExists { session_id: header.id.clone() });
        }
        let mut bytes = header_line(header).into_bytes();
        if self.fault == Fault::DeleteKeepsEvents {
            if let Some(old) = files.deleted.remove(&key) {
                let log = JsonlLog::parse(&old).map_err(corrupt)?;
                write_events(&log.events, &mut bytes);
            }
        }
        files.live.insert(key, bytes);
        Ok(())
    }

    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        if self.fault == Fault::CreateThenAppend {
            self.create(header)?;
            return self.append(&header.id, events);
        }
        check_header(header)?;
        check_continues(&header.id, 0, events)?;
        let key = self.key(&header.id);
        let mut files = self.files();
        if files.live.contains_key(&key) {
            return Err(StoreError::AlreadyExists { session_id: header.id.clone() });
        }
        let mut bytes = header_line(header).into_bytes();
        bytes.extend(self.encode(events));
        files.live.insert(key, bytes);
        Ok(())
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(StoreError::io("append", std::io::Error::other("an earlier write failed; reopen")));
        }
        if self.write_fault.take() {
            let injected = StoreError::io("append", std::io::Error::other("injected I/O error"));
            if self.fault == Fault::KeepsPartOfAFailedBatch {
                let mut files = self.files();
                if let Some(bytes) = files.live.get_mut(&self.key(session_id)) {
                    bytes.extend(self.encode(&events[..events.len() / 2]));
                }
                return Err(injected);
            }
            // What reached the "file" is taken back; the store refuses
            // writes until reopened, as it cannot be sure.
            self.poisoned.store(true, Ordering::SeqCst);
            return Err(injected);
        }
        let mut files = self.files();
        self.fence(&files, session_id)?;
        let not_found = || StoreError::NotFound { session_id: session_id.to_owned() };
        let bytes = files.live.get_mut(&self.key(session_id)).ok_or_else(not_found)?;
        let log = JsonlLog::parse(bytes).map_err(corrupt)?;
        let stored = log.events.len() as u64;
        let checked = check_continues(session_id, stored, events);
        let events = match (self.fault, checked) {
            (Fault::NoContiguityCheck, _) | (_, Ok(())) => events,
            (Fault::NonAtomic, Err(e)) => {
                let good =
                    events.iter().enumerate().take_while(|(i, e)| e.seq() == stored + *i as u64).count();
                bytes.extend(self.encode(&events[..good]));
                return Err(e);
            }
            (_, Err(e)) => return Err(e),
        };
        if let Some(torn) = log.torn_tail {
            if self.fault != Fault::KeepsTornTail {
                bytes.truncate(torn.offset as usize);
            }
        } else if log.missing_newline && self.fault != Fault::NoNewlineFix {
            bytes.push(b'\n');
        }
        bytes.extend(self.encode(events));
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        let files = self.files();
        let not_found = || StoreError::NotFound { session_id: session_id.to_owned() };
        let bytes = files.live.get(&self.key(session_id)).ok_or_else(not_found)?;
        let log = JsonlLog::parse(bytes).map_err(corrupt)?;
        let torn_tail = if self.fault == Fault::HidesTornTail { None } else { log.torn_tail };
        Ok(StoredSession { header: log.header, events: log.events, report: LoadReport { torn_tail } })
    }

    /// Keeps the checkpoint's text; refuses one ahead of the log.
    fn save_checkpoint(&self, session_id: &str, checkpoint: &Checkpoint) -> Result<bool, StoreError> {
        let key = self.key(session_id);
        let mut files = self.files();
        let not_found = || StoreError::NotFound { session_id: session_id.to_owned() };
        let stored = JsonlLog::parse(files.live.get(&key).ok_or_else(not_found)?).map_err(corrupt)?;
        let len = stored.events.len() as u64;
        if checkpoint.log_len() > len {
            return Err(StoreError::Conflict {
                session_id: session_id.to_owned(),
                expected: len,
                found: checkpoint.log_len(),
            });
        }
        files.checkpoints.insert(key, checkpoint.to_json());
        Ok(true)
    }

    fn load_resumable(&self, session_id: &str) -> Result<Resumable, StoreError> {
        let stored = self.load(session_id)?;
        let text = self.files().checkpoints.get(&self.key(session_id)).cloned();
        let checkpoint = text.and_then(|t| Checkpoint::from_json(&t).ok()).filter(|c| {
            let len = c.log_len() as usize;
            self.fault == Fault::TrustsCheckpoints
                || (c.matches_header(&stored.header)
                    && len <= stored.events.len()
                    && (len == 0 || c.matches_last_event(&stored.events[len - 1])))
        });
        let Some(checkpoint) = checkpoint else {
            return Ok(Resumable {
                header: stored.header,
                checkpoint: None,
                tail: stored.events,
                report: stored.report,
            });
        };
        let mut tail = stored.events;
        if self.fault != Fault::CheckpointWithTheWholeLog {
            tail.drain(..(checkpoint.log_len() as usize).min(tail.len()));
        }
        Ok(Resumable { header: stored.header, checkpoint: Some(checkpoint), tail, report: stored.report })
    }

    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        let files = self.files();
        let mut headers = Vec::new();
        for bytes in files.live.values() {
            let mut header = JsonlLog::parse(bytes).map_err(corrupt)?.header;
            if self.fault == Fault::ListDropsCwd {
                header.cwd = None;
            }
            headers.push(header);
        }
        Ok(headers)
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        let key = self.key(session_id);
        let mut files = self.files();
        self.fence(&files, session_id)?;
        let bytes = files
            .live
            .remove(&key)
            .ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
        files.deleted.insert(key.clone(), bytes);
        files.holds.remove(&key);
        files.checkpoints.remove(&key);
        Ok(())
    }

    fn hold(&self, session_id: &str, holder: &str, ttl: Duration) -> Result<Option<Hold>, StoreError> {
        let key = self.key(session_id);
        let mut files = self.files();
        if !files.live.contains_key(&key) {
            return Err(StoreError::NotFound { session_id: session_id.to_owned() });
        }
        let current = files.holds.get(&key).map(record);
        let floor = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let mut token = grant(session_id, holder, current.as_ref(), self.ours(session_id), floor)?;
        if let (Fault::TakeoverKeepsTheToken, Some(c)) = (self.fault, &current) {
            token = c.token;
        }
        let expires = SystemTime::now() + ttl;
        files.holds.insert(key, (holder.to_owned(), token, expires));
        self.ours.lock().unwrap_or_else(|p| p.into_inner()).insert(session_id.to_owned(), token);
        Ok(Some(Hold::new(session_id, holder, token, Some(expires))))
    }

    fn renew(&self, hold: &Hold, ttl: Duration) -> Result<Hold, StoreError> {
        let key = self.key(hold.session_id());
        let mut files = self.files();
        if !files.live.contains_key(&key) {
            return Err(StoreError::NotFound { session_id: hold.session_id().to_owned() });
        }
        let current = files.holds.get(&key).map(record);
        match self.fault {
            Fault::RenewsAReleasedHold => {
                check_fence(hold.session_id(), Some(hold.token()), current.as_ref())?
            }
            _ => check_renewal(
                hold.session_id(),
                hold.token(),
                self.ours(hold.session_id()),
                current.as_ref(),
            )?,
        }
        let expires = SystemTime::now() + ttl;
        if let Some(held) = files.holds.get_mut(&key) {
            held.2 = expires;
        }
        Ok(hold.renewed(expires))
    }

    fn release(&self, hold: &Hold) -> Result<(), StoreError> {
        let key = self.key(hold.session_id());
        let mut files = self.files();
        if let Some(held) = files.holds.get_mut(&key).filter(|h| h.1 == hold.token()) {
            held.2 = SystemTime::now();
        }
        let mut ours = self.ours.lock().unwrap_or_else(|p| p.into_inner());
        if ours.get(hold.session_id()) == Some(&hold.token()) {
            ours.remove(hold.session_id());
        }
        Ok(())
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        use palimpsest_core_session::search::snippet;
        use palimpsest_persistence::search::scan;
        let text_of = |e: &Event| -> Option<String> {
            match (self.fault, e.event_type().as_str()) {
                (Fault::SearchIndexesChunks, "assistant/chunk") => {
                    e.data_as::<serde_json::Value>().ok()?["chunk"]["text"].as_str().map(str::to_owned)
                }
                _ => palimpsest_core_session::search::searchable_text(e),
            }
        };
        let mut hits = Vec::new();
        match self.fault {
            Fault::SearchMatchesSubstrings | Fault::SearchIndexesChunks | Fault::SearchOrdersById => {}
            _ => return scan(self, query),
        }
        for header in self.list()? {
            for e in self.load(&header.id)?.events {
                let Some(text) = text_of(&e) else { continue };
                let found = match self.fault {
                    Fault::SearchMatchesSubstrings => {
                        query.terms().iter().all(|t| text.to_lowercase().contains(t.as_str()))
                    }
                    _ => query.matches(&text),
                };
                if found {
                    hits.push(SearchHit {
                        session_id: header.id.clone(),
                        seq: e.seq(),
                        event_type: e.event_type().as_str().to_owned(),
                        time: e.time(),
                        snippet: snippet(&text, query.terms()),
                    });
                }
            }
        }
        if self.fault != Fault::SearchOrdersById {
            // Every other fault keeps the right order: newest activity first.
            let last = |id: &str| self.load(id).ok().and_then(|s| s.events.last().map(Event::time));
            hits.sort_by(|a, b| {
                last(&b.session_id).cmp(&last(&a.session_id)).then(a.session_id.cmp(&b.session_id))
            });
        }
        hits.truncate(query.limit().unwrap_or(usize::MAX));
        Ok(hits)
    }

    fn sync(&self, _session_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

struct Factory {
    fault: Fault,
    files: Arc<Mutex<Files>>,
    write_fault: WriteFault,
}

fn factory(fault: Fault) -> Factory {
    Factory { fault, files: Arc::default(), write_fault: WriteFault::default() }
}

impl StoreFactory for Factory {
    fn open(&self) -> Box<dyn SessionStore> {
        let files = if self.fault == Fault::ForgetsOnReopen { Arc::default() } else { self.files.clone() };
        Box::new(BytesStore {
            fault: self.fault,
            files,
            write_fault: self.write_fault.clone(),
            poisoned: Default::default(),
            ours: Mutex::default(),
        })
    }

    fn fail_next_write(&self) -> bool {
        self.write_fault.arm();
        true
    }

    fn damage_checkpoint(&self, session_id: &str) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        match files.checkpoints.get_mut(session_id) {
            Some(text) => text.truncate(text.len() / 2),
            None => panic!("damage_checkpoint: no checkpoint of {session_id:?}"),
        }
        true
    }

    fn append_raw_tail(&self, session_id: &str, bytes: &[u8]) -> bool {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        match files.live.get_mut(session_id) {
            Some(file) => file.extend_from_slice(bytes),
            None => panic!("append_raw_tail: no session {session_id:?}"),
        }
        true
    }
}

fn check(name: &str) -> testkit::Check {
    match CHECKS.iter().find(|(n, _)| *n == name) {
        Some((_, check)) => *check,
        None => panic!("no check named {name}"),
    }
}

fn fails(check_name: &str, fault: Fault) -> bool {
    let f = factory(fault);
    catch_unwind(AssertUnwindSafe(|| check(check_name)(&f))).is_err()
}

#[test]
fn a_correct_byte_store_passes_every_check_including_torn_tails() {
    let skipped = testkit::run_all(|| factory(Fault::None));
    assert_eq!(skipped, [], "a store with torn tails, fault injection and holds runs every check");
}

#[test]
fn the_sample_log_is_valid_and_has_the_documented_surface() {
    let session =
        palimpsest_core_session::Session::from_log(SessionHeader::new("s", 0), testkit::sample_events())
            .unwrap_or_else(|e| panic!("{}: {e}", e.code()));
    assert_eq!(session.surface(), testkit::SAMPLE_SURFACE);
}

#[test]
fn each_fault_is_caught_by_its_check() {
    let cases = [
        (Fault::NonAtomic, "batch_is_all_or_nothing"),
        (Fault::NoContiguityCheck, "non_contiguous_appends_conflict"),
        (Fault::NoContiguityCheck, "batch_is_all_or_nothing"),
        (Fault::NoContiguityCheck, "second_handle_never_breaks_the_log"),
        (Fault::NoContiguityCheck, "threads_sharing_one_handle_lose_nothing"),
        (Fault::NoContiguityCheck, "durable_refused_append_writes_nothing"),
        (Fault::DropsEmptySources, "source_event_seqs_absent_empty_and_listed_stay_distinct"),
        (Fault::DropsEmptySources, "round_trips_every_core_event_kind"),
        (Fault::NormalisesData, "plugin_events_keep_arbitrary_json_data"),
        (Fault::NormalisesData, "unknown_payload_keys_are_kept_verbatim"),
        (Fault::NormalisesData, "unicode_and_escapes_round_trip"),
        (Fault::CaseFoldsIds, "unusual_ids_work_or_are_refused_cleanly"),
        (Fault::ListDropsCwd, "list_returns_every_header"),
        (Fault::DeleteKeepsEvents, "delete_then_load_is_not_found"),
        (Fault::KeepsTornTail, "torn_tail_is_dropped_reported_and_cut_off_if_supported"),
        (Fault::HidesTornTail, "torn_tail_is_dropped_reported_and_cut_off_if_supported"),
        (Fault::NoNewlineFix, "unterminated_whole_last_record_is_kept_if_supported"),
        (Fault::ForgetsOnReopen, "reopen_after_drop_sees_everything"),
        (Fault::ForgetsOnReopen, "create_twice_is_already_exists"),
        (Fault::TruncatesHugeLines, "very_large_payloads_round_trip"),
        (Fault::CreateThenAppend, "create_with_events_is_all_or_nothing"),
        (Fault::KeepsPartOfAFailedBatch, "io_errors_never_store_a_batch_in_part_or_twice"),
        (Fault::SearchMatchesSubstrings, "search_is_case_insensitive_and_needs_every_term"),
        (Fault::SearchMatchesSubstrings, "search_agrees_with_the_reference_scan"),
        (Fault::SearchIndexesChunks, "search_finds_message_words_not_chunks"),
        (Fault::SearchIndexesChunks, "search_agrees_with_the_reference_scan"),
        (Fault::SearchOrdersById, "search_orders_by_last_activity_then_seq_and_limits"),
        (Fault::SearchOrdersById, "search_agrees_with_the_reference_scan"),
        (Fault::HoldsDoNotFence, "holds_keep_a_second_writer_out"),
        (Fault::HoldsDoNotFence, "an_expired_hold_is_taken_over_and_its_holder_fenced_out"),
        (Fault::TakeoverKeepsTheToken, "an_expired_hold_is_taken_over_and_its_holder_fenced_out"),
        (Fault::RenewsAReleasedHold, "holds_keep_a_second_writer_out"),
        (Fault::TrustsCheckpoints, "checkpoints_that_do_not_match_are_ignored"),
        (Fault::CheckpointWithTheWholeLog, "a_saved_checkpoint_is_used_and_opens_the_same_session"),
        (Fault::CheckpointWithTheWholeLog, "a_stale_checkpoint_gives_the_events_after_it"),
    ];
    let missed: Vec<String> = cases
        .iter()
        .filter(|(fault, name)| !fails(name, *fault))
        .map(|(fault, name)| format!("{fault:?} not caught by {name}"))
        .collect();
    assert!(missed.is_empty(), "{missed:#?}");
    // The same checks pass on the correct store, so they fail for the fault.
    for (_, name) in cases {
        assert!(!fails(name, Fault::None), "{name} fails on the correct store");
    }
}

/// `ListDropsCwd` is first caught by the unicode check (it lists a header with a `cwd`).
#[test]
fn run_all_names_the_failing_check() {
    let panic = catch_unwind(|| testkit::run_all(|| factory(Fault::ListDropsCwd))).err().map(|p| match p
        .downcast::<String>()
    {
        Ok(s) => *s,
        Err(_) => String::from("(not a string)"),
    });
    let msg = panic.unwrap_or_default();
    assert!(msg.starts_with("contract check `unicode_and_escapes_round_trip` failed: "), "{msg}");
}

#[test]
fn a_backend_without_torn_tails_skips_those_checks() {
    // MemoryFactory's append_raw_tail returns false: the checks pass without
    // touching the store beyond their setup.
    let f = testkit::MemoryFactory::default();
    assert!(!f.append_raw_tail("any", b"x"));
    check("torn_tail_is_dropped_reported_and_cut_off_if_supported")(&f);
    check("unterminated_whole_last_record_is_kept_if_supported")(&f);
}
