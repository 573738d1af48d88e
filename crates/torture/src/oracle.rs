//! The properties the fuzz targets check, as functions of arbitrary bytes.
//!
//! Each function never fails on bad input (that is the point): it panics
//! exactly when a property of the code under test is broken, which is what
//! a fuzzer reports as a crash and what a proptest run reports as a failing
//! case. It returns how far the input got ([`Reached`]), so a test can check
//! that its generator reaches the deep checks and not only the first refusal.
//!
//! | function | fuzz target | what it checks |
//! |---|---|---|
//! | [`jsonl_bytes`] | `jsonl_load` | core-session's reader and persistence-jsonl's streaming reader agree on every file, capped and not; whatever loads re-encodes to the same events; a loaded session's surface equals a fresh fold; repair always closes it |
//! | [`surface_ops`] | `surface_ops` | the incremental `SurfaceManager` equals a fresh fold and an independent model of rules 5–9 after every op; a refused op changes nothing |
//! | [`json_events`] | `seed_events` | `Event::from_json`, `from_parts` and serde agree; the seed constructor (`Session::from_log`) and the invariants guard agree with `check_log`; repair closes what loads |

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use palimpsest_core_session::jsonl::{to_bytes, JsonlLog, ReadOptions};
use palimpsest_core_session::repair::{needs_repair, repair};
use palimpsest_core_session::{
    Event, EventType, LoadError, Session, SessionHeader, SurfaceManager, SurfaceOp,
};
use palimpsest_invariants::{check_log, InvariantGuard};
use palimpsest_persistence::StoreError;
use palimpsest_persistence_jsonl::read_session_file_with;

/// How far an input got before it was refused (or that it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reached {
    /// Refused before any event: no header, or no well-formed event.
    Nothing,
    /// Events were read, but the log broke a rule of section 2.
    Events,
    /// A whole session was built from it.
    Session,
}

// ---------------------------------------------------------------------------
// jsonl_bytes
// ---------------------------------------------------------------------------

static FILES: AtomicU64 = AtomicU64::new(0);

/// A scratch file, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn with(bytes: &[u8]) -> Scratch {
        let n = FILES.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("palimpsest-oracle-{}-{n}.jsonl", std::process::id()));
        if let Err(e) = std::fs::write(&path, bytes) {
            panic!("oracle: cannot write the scratch file {}: {e}", path.display());
        }
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Loads `data` as a JSONL session file, in memory (core-session) and from
/// a file (persistence-jsonl, uncapped and under a cap taken from the
/// input), and checks that the readers agree and that what loads behaves.
///
/// # Panics
///
/// When a property is broken (see the module docs); never because of the input.
pub fn jsonl_bytes(data: &[u8]) -> Reached {
    let file = Scratch::with(data);
    // A cap from the input: small caps make the over-long paths reachable.
    let small = ReadOptions {
        max_line_bytes: data.first().map_or(0, |&b| usize::from(b) * 4),
        ..ReadOptions::default()
    };
    for options in [ReadOptions { max_line_bytes: usize::MAX, ..ReadOptions::default() }, small] {
        let parsed = JsonlLog::parse_with(data, options);
        let stored = read_session_file_with(&file.0, options);
        agree(&parsed, &stored, options);
    }
    let log = match JsonlLog::parse_with(
        data,
        ReadOptions { max_line_bytes: usize::MAX, ..ReadOptions::default() },
    ) {
        Ok(log) => log,
        Err(_) => return Reached::Nothing,
    };
    if let Some(torn) = log.torn_tail {
        let (offset, len) = (torn.offset as usize, torn.len as usize);
        assert_eq!(offset + len, data.len(), "a torn tail ends the file");
        assert!(!data[offset..].contains(&b'\n'), "a torn tail is one unterminated line");
    }
    for e in &log.events {
        round_trips(e);
    }
    // Re-encoding gives a clean file that reads back as the same events.
    let clean = to_bytes(&log.header, &log.events);
    match JsonlLog::parse(&clean) {
        Ok(again) => {
            assert_eq!(again.header, log.header, "header round trip");
            assert_eq!(again.events, log.events, "events round trip");
            assert_eq!((again.torn_tail, again.missing_newline), (None, false), "a clean file is clean");
        }
        Err(e) => panic!("the canonical bytes of a loaded log do not load: {e}"),
    }
    let (header, events) = (log.header.clone(), log.events.clone());
    match log.into_session() {
        Ok(session) => {
            session_properties(&session);
            Reached::Session
        }
        Err(e) => {
            assert!(e.line().is_some(), "a refused log names a line: {e}");
            assert!(Session::from_log(header, events).is_err(), "into_session and from_log disagree");
            Reached::Events
        }
    }
}

/// The two readers give the same verdict on the same bytes.
fn agree(
    parsed: &Result<JsonlLog, LoadError>,
    stored: &Result<palimpsest_persistence::StoredSession, StoreError>,
    options: ReadOptions,
) {
    let cap = options.max_line_bytes;
    match (parsed, stored) {
        (Ok(p), Ok(s)) => {
            assert_eq!(p.header, s.header, "cap {cap}: header");
            assert_eq!(p.events, s.events, "cap {cap}: events");
            assert_eq!(p.torn_tail, s.report.torn_tail, "cap {cap}: torn tail");
        }
        (Err(p), Err(s)) => {
            let same = match s {
                StoreError::VersionUnsupported { .. } => p.code() == "header-version-unsupported",
                StoreError::Corrupt { cause: Some(c), .. } => c == p,
                _ => false,
            };
            assert!(
                same,
                "cap {cap}: core-session says [{}] {p}, persistence-jsonl says [{}] {s}",
                p.code(),
                s.code()
            );
        }
        (p, s) => panic!("cap {cap}: the readers disagree: core-session {p:?}, persistence-jsonl {s:?}"),
    }
}

/// Canonical JSON round-trips, and `from_parts` and serde agree with `from_json`.
fn round_trips(e: &Event) {
    let json = e.to_json();
    match Event::from_json(&json) {
        Ok(again) => {
            assert_eq!(&again, e, "from_json(to_json(e)) == e");
            assert_eq!(again.to_json(), json, "to_json is stable");
        }
        Err(err) => panic!("the canonical JSON of a well-formed event is refused: {err}\n{json}"),
    }
    let sources = e.source_event_seqs().map(|s| serde_json::to_string(s).unwrap_or_default());
    let op = e.surface_op().map(|op| serde_json::to_string(&op).unwrap_or_default());
    match Event::from_parts(
        e.seq(),
        e.time(),
        e.event_type().as_str(),
        e.data(),
        sources.as_deref(),
        op.as_deref(),
    ) {
        Ok(again) => assert_eq!(&again, e, "from_parts"),
        Err(err) => panic!("from_parts refuses the parts of a well-formed event: {err}"),
    }
    match serde_json::from_str::<Event>(&json) {
        Ok(again) => assert_eq!(&again, e, "serde"),
        Err(err) => panic!("serde refuses the canonical JSON: {err}"),
    }
}

/// What every session built by the seed constructor must satisfy.
fn session_properties(session: &Session) {
    let events = session.events();
    match SurfaceManager::fold(events) {
        Ok(fold) => assert_eq!(fold.seqs(), session.surface(), "the surface equals a fresh fold"),
        Err(e) => panic!("a log the seed constructor accepted does not fold: {e}"),
    }
    let derived = session.derive_messages();
    assert!(derived.len() <= session.surface().len(), "at most one message per surface entry");
    let _ = check_log(events);
    let closers = repair(events);
    assert_eq!(repair(events), closers, "repair is deterministic");
    assert_eq!(closers.is_empty(), !needs_repair(events), "repair closes exactly the logs that need it");
    let mut closed = events.to_vec();
    closed.extend(closers);
    match Session::from_log(session.header().clone(), closed.clone()) {
        Ok(_) => assert!(!needs_repair(&closed), "a repaired log needs no more repair"),
        Err(e) => panic!("log + repair closers is refused: [{}] {e}", e.code()),
    }
}

// ---------------------------------------------------------------------------
// surface_ops
// ---------------------------------------------------------------------------

/// Reads the input a byte at a time; `None` once it is used up.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> Option<u8> {
        let b = self.data.get(self.at).copied();
        self.at += 1;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        self.next().map_or(0, |b| usize::from(b) % n)
    }
}

/// The independent model of rules 5–9: the surface as (seq, tool call id
/// of a tool/result).
#[derive(Debug, Clone, Default)]
struct Model {
    surface: Vec<u64>,
    /// The call id of every tool/result in the log.
    calls: HashMap<u64, String>,
    len: u64,
}

impl Model {
    /// What rules 5–9 say about `e`: the new surface, or the refusal's code.
    fn apply(&self, e: &Event, call: Option<&str>) -> Result<Vec<u64>, &'static str> {
        if e.seq() != self.len {
            return Err("seq-not-contiguous");
        }
        let mut surface = self.surface.clone();
        match e.surface_op() {
            None => {}
            Some(SurfaceOp::Append) => surface.push(e.seq()),
            Some(SurfaceOp::Replace { start, end }) => {
                let s = surface.iter().position(|&x| x == start).ok_or("replace-start-missing")?;
                let t = surface.iter().position(|&x| x == end).ok_or("replace-end-missing")?;
                if s > t {
                    return Err("replace-reversed");
                }
                let sources = e.source_event_seqs().unwrap_or_default();
                if surface[s..=t].iter().any(|x| !sources.contains(x)) {
                    return Err("replace-sources-incomplete");
                }
                if *e.event_type() == EventType::ToolResult {
                    let [target] = surface[s..=t] else { return Err("tool-result-replace-invalid") };
                    if self.calls.get(&target).map(String::as_str) != call {
                        return Err("tool-result-replace-invalid");
                    }
                }
                surface.splice(s..=t, [e.seq()]);
            }
        }
        Ok(surface)
    }
}

fn user(seq: u64, time: u64, extra: &str) -> String {
    format!(
        r#"{{"seq":{seq},"time":{time},"type":"user/message","data":{{"message":{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":"hi"}}],"source":{{"kind":"user"}}}}}}{extra}}}"#
    )
}

fn tool_result(seq: u64, call: &str, extra: &str) -> String {
    format!(
        r#"{{"seq":{seq},"time":{seq},"type":"tool/result","data":{{"turn":1,"step":1,"message":{{"id":"r{seq}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","isError":false,"content":[]}}],"source":{{"kind":"tool","callId":"{call}"}}}}}}{extra}}}"#
    )
}

fn list(seqs: &[u64]) -> String {
    format!("[{}]", seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

/// Runs the op sequence the bytes spell out through an incremental
/// `SurfaceManager`, a `Session` and the independent model, checking after
/// every op that they agree, that a refusal changed nothing, and at the end
/// that the incremental surface equals a fresh fold and a chunked sync.
///
/// # Panics
///
/// When a property is broken; never because of the input.
pub fn surface_ops(data: &[u8]) -> Reached {
    let header = SessionHeader::new("fuzz", 0);
    let mut bytes = Bytes { data, at: 0 };
    let (mut log, mut manager, mut model) = (Vec::<Event>::new(), SurfaceManager::new(), Model::default());
    let mut session = Session::create(header.clone());
    let mut reached = Reached::Nothing;
    // Long inputs add little but quadratic time: 512 ops are plenty.
    for _ in 0..512 {
        let Some(op) = bytes.next() else { break };
        let seq = log.len() as u64;
        let surface = manager.seqs().to_vec();
        let pick =
            |bytes: &mut Bytes<'_>| surface.get(bytes.below(surface.len().max(1))).copied().unwrap_or(0);
        let call = format!("c{}", bytes.below(4));
        let (json, call_of) = match op % 9 {
            0 => (
                format!(r#"{{"seq":{seq},"time":{seq},"type":"fuzz/tick","data":{}}}"#, bytes.below(256)),
                None,
            ),
            1 => (user(seq, seq, r#","surfaceOp":"append""#), None),
            2 => (tool_result(seq, &call, r#","surfaceOp":"append""#), Some(call)),
            3 | 4 => {
                // A replace over a surface range, citing all of it or not.
                let (a, b) = (bytes.below(surface.len().max(1)), bytes.below(surface.len().max(1)));
                let (start, end) =
                    (surface.get(a).copied().unwrap_or(0), surface.get(b).copied().unwrap_or(0));
                let mut cites: Vec<u64> =
                    surface.get(a.min(b)..=a.max(b)).map(<[u64]>::to_vec).unwrap_or_default();
                if op % 9 == 4 && !cites.is_empty() {
                    cites.remove(bytes.below(cites.len()));
                }
                if bytes.below(2) == 1 && seq > 0 {
                    cites.push(bytes.below(seq as usize) as u64);
                }
                cites.sort_unstable();
                cites.dedup();
                let extra = format!(
                    r#","sourceEventSeqs":{},"surfaceOp":{{"op":"replace","start":{start},"end":{end}}}"#,
                    list(&cites)
                );
                (user(seq, seq, &extra), None)
            }
            5 => {
                // A replace naming any seq at all, on the surface or not.
                let (start, end) =
                    (bytes.below(seq as usize + 2) as u64, bytes.below(seq as usize + 2) as u64);
                let mut cites = surface.clone();
                cites.extend((0..bytes.below(3)).map(|_| bytes.below(seq as usize) as u64));
                cites.retain(|&s| s < seq);
                cites.sort_unstable();
                cites.dedup();
                let extra = format!(
                    r#","sourceEventSeqs":{},"surfaceOp":{{"op":"replace","start":{start},"end":{end}}}"#,
                    list(&cites)
                );
                (user(seq, seq, &extra), None)
            }
            6 => {
                // A tool/result replacing one entry.
                let target = pick(&mut bytes);
                let extra = format!(
                    r#","sourceEventSeqs":[{target}],"surfaceOp":{{"op":"replace","start":{target},"end":{target}}}"#
                );
                (tool_result(seq, &call, &extra), Some(call))
            }
            7 => {
                let wrong =
                    if bytes.below(2) == 0 || seq == 0 { seq + 1 + bytes.below(3) as u64 } else { seq - 1 };
                (user(wrong, seq, r#","surfaceOp":"append""#), None)
            }
            _ => {
                // An assistant message citing any earlier seqs (or none).
                let cites: Vec<u64> =
                    (0..bytes.below(4)).map(|_| bytes.below(seq as usize + 1) as u64).collect();
                let msg = r#"{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}"#;
                (
                    format!(
                        r#"{{"seq":{seq},"time":{seq},"type":"assistant/message","data":{msg},"sourceEventSeqs":{},"surfaceOp":"append"}}"#,
                        list(&cites)
                    ),
                    None,
                )
            }
        };
        let Ok(event) = Event::from_json(&json) else { continue };
        let before = manager.clone();
        let planned = manager.plan(&log, &event);
        let checked = session.check(&event);
        let modelled = model.apply(&event, call_of.as_deref());
        let codes = (
            planned.as_ref().err().map(|e| e.code().to_owned()),
            checked.as_ref().err().map(|e| e.code().to_owned()),
        );
        assert_eq!(codes.0, codes.1, "plan and Session::check disagree on {json}");
        assert_eq!(
            codes.0.as_deref(),
            modelled.as_ref().err().copied(),
            "the manager and the model disagree on {json}"
        );
        match planned {
            Ok(step) => {
                manager.apply(event.seq(), step);
                if let Err(e) = session.append(event.clone()) {
                    panic!("Session::append refuses what check accepted: {e}");
                }
                if let Some(call) = call_of {
                    model.calls.insert(seq, call);
                }
                model.surface = modelled.unwrap_or_default();
                model.len += 1;
                log.push(event);
                reached = Reached::Session;
            }
            Err(_) => {
                assert_eq!(manager, before, "a refused plan changed the manager");
                assert!(session.append(event).is_err(), "Session::append accepted what check refused");
                assert_eq!(session.events().len(), log.len(), "a refused append changed the session");
            }
        }
        assert_eq!(manager.seqs(), model.surface.as_slice(), "the manager and the model");
        assert_eq!(session.surface(), manager.seqs(), "the session and the manager");
    }
    match SurfaceManager::fold(&log) {
        Ok(fold) => assert_eq!(fold, manager, "a fresh fold equals the incremental manager"),
        Err(e) => panic!("the accepted log does not fold: {e}"),
    }
    let mut chunked = SurfaceManager::new();
    let mut upto = 0;
    while upto < log.len() {
        upto = (upto + 1 + bytes.below(5)).min(log.len());
        if let Err(e) = chunked.sync(&log[..upto]) {
            panic!("a chunked sync of the accepted log failed: {e}");
        }
    }
    assert_eq!(chunked, manager, "a chunked sync equals the incremental manager");
    match Session::from_log(header, log) {
        Ok(s) => assert_eq!(s.surface(), manager.seqs(), "the seed constructor's surface"),
        Err(e) => panic!("the seed constructor refuses the accepted log: {e}"),
    }
    reached
}

// ---------------------------------------------------------------------------
// json_events
// ---------------------------------------------------------------------------

/// Reads each line of `data` as one event (`Event::from_json`), checks the
/// constructors agree on every well-formed one, then seeds a session from
/// the well-formed events (as given, and renumbered 0, 1, 2, …) and checks
/// the seed constructor, the invariants guard and `check_log` agree.
///
/// # Panics
///
/// When a property is broken; never because of the input.
pub fn json_events(data: &[u8]) -> Reached {
    let mut events = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(text) = std::str::from_utf8(line) else { continue };
        match Event::from_json(text) {
            Ok(e) => {
                round_trips(&e);
                match serde_json::from_str::<Event>(text) {
                    Ok(again) => assert_eq!(again, e, "serde and from_json"),
                    Err(err) => panic!("serde refuses what from_json accepts: {err}"),
                }
                events.push(e);
            }
            Err(e) => {
                assert!(!e.code().is_empty(), "a refusal has a code");
                assert!(
                    serde_json::from_str::<Event>(text).is_err(),
                    "serde accepts what from_json refuses: {text}"
                );
            }
        }
    }
    if events.is_empty() {
        return Reached::Nothing;
    }
    let renumbered: Vec<Event> =
        events.iter().enumerate().map_while(|(i, e)| e.with_seq_and_time(i as u64, e.time()).ok()).collect();
    let mut reached = Reached::Events;
    for log in [events, renumbered] {
        reached = reached.max(seed(log));
    }
    reached
}

/// The seed constructor on `log`, with and without the invariants guard.
fn seed(log: Vec<Event>) -> Reached {
    let header = SessionHeader::new("fuzz", 0);
    let plain = Session::from_log(header.clone(), log.clone());
    let guarded = Session::from_log_guarded(header, log.clone(), Some(Box::new(InvariantGuard::new())));
    // The guard vetoes check_log's first violation (check_log stops at the
    // first section-2 refusal, as the seed constructor does); with none, the
    // guard changes nothing.
    match (check_log(&log).into_iter().next(), &guarded) {
        (Some(v), Err(e)) => {
            assert!(e.is_veto(), "check_log faults seq {}, the guarded seed refused otherwise: {e}", v.seq);
            assert_eq!(
                (e.code(), e.seq()),
                (v.code, Some(v.seq)),
                "the guard's veto is check_log's first violation"
            );
        }
        (Some(v), Ok(_)) => panic!("the guard accepted a log check_log faults: {v}"),
        (None, _) => match (&plain, &guarded) {
            (Ok(_), Ok(_)) => {}
            (Err(p), Err(g)) => assert_eq!(p, g, "with no violation the guard changes nothing"),
            (p, g) => panic!("with no violation the guard changed the verdict: {p:?} vs {g:?}"),
        },
    }
    match plain {
        Ok(session) => {
            session_properties(&session);
            Reached::Session
        }
        Err(_) => Reached::Events,
    }
}
