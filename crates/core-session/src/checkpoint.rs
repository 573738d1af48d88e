//! [`Checkpoint`]: what a session needs of the log before it to take more
//! appends, so that it can be resumed in O(surface + tail) instead of
//! O(log) (RFC 0002, issue 18).
//!
//! A checkpoint is a **derived cache**, never the truth: it covers the log
//! through event `log_len - 1` and records
//!
//! - the surface (seqs in surface order) and the seq of the
//!   `session/settings` event in effect;
//! - the events those seqs name (the resident events), whole;
//! - the turn and step brackets of the covered log ([`TurnState`]): the
//!   last turn, the open turn and step, and what the open step recorded
//!   (its `tool/call`s, the calls its `assistant/message`s requested, its
//!   chunks), which is all the invariants checker reads of the past;
//! - the log's length and last event time, and two fingerprints: of the
//!   header line (`headerHash`) and of the canonical line of the last
//!   covered event (`tailHash`), so that a reader can tell a checkpoint
//!   of another session, of a rewritten log or of a log from before a
//!   fork from one that matches.
//!
//! [`Session::checkpoint`](crate::Session::checkpoint) takes one;
//! [`Session::resume`](crate::Session::resume) builds a session from one
//! and the events after it. A resumed session refuses and accepts exactly
//! what the session loaded whole does, with the same codes, and derives the
//! same messages and request.
//!
//! # Wire form
//!
//! [`Checkpoint::to_json`] writes one JSON object, keys in this order:
//!
//! ```json
//! {"checkpoint":2,"sessionId":"s","logLen":12,"lastTime":1700000000000,
//!  "headerHash":"fnv1a64:…","tailHash":"fnv1a64:…","surface":[3,9],
//!  "settingsSeq":0,"lastTurn":2,"turnOpen":false,
//!  "turns":{"started":2,"openTurn":null,"lastStep":0,"openStep":null},
//!  "events":[{"seq":0,…},{"seq":3,…},{"seq":9,…}],
//!  "bodyHash":"fnv1a64:…"}
//! ```
//!
//! `checkpoint` is the format version ([`CHECKPOINT_VERSION`]); any other
//! value is refused (`checkpoint-version-unsupported`), never migrated: a
//! cache is rebuilt, not upgraded. `tailHash` is absent for an empty log,
//! `settingsSeq` before the first settings event. `events` are the resident
//! events as their canonical JSON lines, ascending by seq. `openStep`, when
//! a step is open, is `{"turn","step","toolCalls":[[id,seq]…],
//! "requests":[[id,seq]…],"chunks":[seq…]}`. A hash is `fnv1a64:` and 16
//! lowercase hex digits: FNV-1a over the line's bytes (without its `\n`),
//! a fingerprint against mistakes, not a defence against forgery.
//! `bodyHash`, always the last key, is the fingerprint of the text before
//! it (up to the `,` that precedes it): a resume trusts the cached surface
//! events and settings, so an edit of them (a hand edit, a flipped byte)
//! must make the checkpoint unusable rather than send the model text the
//! log does not hold (version 1 had no `bodyHash`; an outside probe found
//! such an edit used, 2026-12-07).
//!
//! [`Checkpoint::from_json`] checks everything it reads (see
//! [`CheckpointError`]): a damaged checkpoint is a typed error, never a
//! panic and never a session that differs from the log.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::AppendError;
use crate::event::{Event, EventType};
use crate::header::SessionHeader;

/// The checkpoint format version this crate writes and reads.
pub const CHECKPOINT_VERSION: u64 = 2;

/// A checkpoint could not be read, or does not belong to the session it was
/// offered to. Match on [`CheckpointError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// `checkpoint-malformed`: not a checkpoint object, a field missing or of
    /// the wrong type, or a resident event that is not a valid event.
    #[error("checkpoint-malformed: {detail}")]
    Malformed {
        /// What was wrong.
        detail: String,
    },
    /// `checkpoint-version-unsupported`: a `checkpoint` version other than
    /// [`CHECKPOINT_VERSION`].
    #[error("checkpoint-version-unsupported: version {found}, this build reads {CHECKPOINT_VERSION}")]
    VersionUnsupported {
        /// The version found.
        found: u64,
    },
    /// `checkpoint-inconsistent`: well-formed fields that contradict each
    /// other (a surface seq that is not resident, events out of order, a
    /// settings seq that is not a settings event, ...).
    #[error("checkpoint-inconsistent: {detail}")]
    Inconsistent {
        /// What contradicts what.
        detail: String,
    },
    /// `checkpoint-mismatch`: the checkpoint is of another session, or of
    /// another header (its `sessionId` or `headerHash` differ).
    #[error("checkpoint-mismatch: {detail}")]
    Mismatch {
        /// What differs.
        detail: String,
    },
}

impl CheckpointError {
    /// The stable code, e.g. `"checkpoint-malformed"`.
    ///
    /// ```
    /// use palimpsest_core_session::Checkpoint;
    ///
    /// let err = Checkpoint::from_json("{}").unwrap_err();
    /// assert_eq!(err.code(), "checkpoint-malformed");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            CheckpointError::Malformed { .. } => "checkpoint-malformed",
            CheckpointError::VersionUnsupported { .. } => "checkpoint-version-unsupported",
            CheckpointError::Inconsistent { .. } => "checkpoint-inconsistent",
            CheckpointError::Mismatch { .. } => "checkpoint-mismatch",
        }
    }
}

/// A session could not be resumed from a checkpoint and a tail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The checkpoint does not belong to this header.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A tail event was refused, exactly as a whole load would refuse it.
    #[error(transparent)]
    Tail(#[from] AppendError),
}

impl ResumeError {
    /// The stable code: the checkpoint's or the refused event's.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let checkpoint = Session::create(SessionHeader::new("a", 0)).checkpoint();
    /// let err = Session::resume(SessionHeader::new("b", 0), checkpoint, vec![]).unwrap_err();
    /// assert_eq!(err.code(), "checkpoint-mismatch");
    /// ```
    pub fn code(&self) -> &str {
        match self {
            ResumeError::Checkpoint(e) => e.code(),
            ResumeError::Tail(e) => e.code(),
        }
    }
}

/// The step open at the end of the covered log, and what it recorded: the
/// state the invariants checker keeps for it.
///
/// ```
/// use palimpsest_core_session::payload::{StepStart, TurnStart};
/// use palimpsest_core_session::{Session, SessionHeader};
///
/// let mut s = Session::create(SessionHeader::new("s", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// s.append_log(2, StepStart { turn: 1, step: 1 })?;
/// let step = s.turn_state().open_step.expect("step 1 is open");
/// assert_eq!((step.turn, step.step), (1, 1));
/// assert!(step.chunks.is_empty());
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct StepState {
    /// The turn its `step/start` named.
    pub turn: u64,
    /// Its number.
    pub step: u64,
    /// Call id and seq of the first `tool/call` of this step for each call,
    /// in the order they came.
    pub tool_calls: Vec<(String, u64)>,
    /// Call id and seq of the first `assistant/message` of this step
    /// requesting each call (a `tool-call` block), in the order they came.
    pub requests: Vec<(String, u64)>,
    /// Seqs of the `assistant/chunk`s naming this step, ascending.
    pub chunks: Vec<u64>,
}

/// The turn and step brackets of a log: a fold over it, the one the
/// invariants checker keeps (contract section 2a), plus the answer of
/// [`Session::last_turn`](crate::Session::last_turn).
///
/// A `turn/start` resets every field, so the fold of a whole log equals
/// the fold of the events from its last `turn/start` on.
///
/// ```
/// use palimpsest_core_session::payload::{TurnEnd, TurnEndReason, TurnStart};
/// use palimpsest_core_session::{Session, SessionHeader};
///
/// let mut s = Session::create(SessionHeader::new("s", 0));
/// s.append_log(1, TurnStart { turn: 1 })?;
/// s.append_log(2, TurnEnd { turn: 1, reason: TurnEndReason::Completed })?;
/// let turns = s.turn_state();
/// assert_eq!((turns.started, turns.open_turn, turns.last_turn), (1, None, (1, false)));
/// # Ok::<(), palimpsest_core_session::AppendError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct TurnState {
    /// The number of the last `turn/start` (0 before the first).
    pub started: u64,
    /// The turn open: the number of the last `turn/start`, until a
    /// `turn/end` (whatever turn it names) closes it.
    pub open_turn: Option<u64>,
    /// The number of the last `step/start` naming the open turn (0 before
    /// the first, and after a `turn/start` or `turn/end`).
    pub last_step: u64,
    /// The step open: the last `step/start`, until a `step/end`, a
    /// `turn/start` or a `turn/end`.
    pub open_step: Option<StepState>,
    /// [`Session::last_turn`](crate::Session::last_turn): the turn number of
    /// the last `turn/start` or `turn/end`, and whether it was a start.
    #[serde(skip)]
    pub last_turn: (u64, bool),
}

/// Just the fields the fold reads: turn/step numbers, a call id, the ids of
/// a message's `tool-call` blocks. Core payloads were checked when their
/// event was built, so these parse.
mod lite {
    use std::borrow::Cow;

    use serde::Deserialize;

    #[derive(Deserialize)]
    pub(super) struct Turn {
        pub(super) turn: u64,
    }

    #[derive(Deserialize)]
    pub(super) struct Step {
        pub(super) turn: u64,
        pub(super) step: u64,
    }

    #[derive(Deserialize)]
    pub(super) struct Call<'a> {
        pub(super) turn: u64,
        pub(super) step: u64,
        #[serde(rename = "callId", borrow)]
        pub(super) call_id: Cow<'a, str>,
    }

    #[derive(Deserialize)]
    pub(super) struct Assistant<'a> {
        #[serde(borrow)]
        pub(super) message: Message<'a>,
    }

    #[derive(Deserialize)]
    pub(super) struct Message<'a> {
        #[serde(borrow)]
        pub(super) content: Vec<Block<'a>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Block<'a> {
        #[serde(rename = "type", borrow)]
        pub(super) kind: Cow<'a, str>,
        #[serde(default, borrow)]
        pub(super) id: Option<Cow<'a, str>>,
    }
}

impl TurnState {
    /// Folds in `event`, the next event of the log. O(1) apart from parsing
    /// the turn and step numbers (and, for an `assistant/message` of the
    /// open step, its block ids).
    ///
    /// ```
    /// use palimpsest_core_session::payload::TurnStart;
    /// use palimpsest_core_session::{Event, TurnState};
    ///
    /// let mut turns = TurnState::default();
    /// turns.fold(&Event::log(0, 1, TurnStart { turn: 1 })?);
    /// assert_eq!((turns.open_turn, turns.last_turn), (Some(1), (1, true)));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn fold(&mut self, event: &Event) {
        let seq = event.seq();
        match event.event_type() {
            EventType::TurnStart => {
                if let Ok(d) = event.data_as::<lite::Turn>() {
                    self.started = d.turn;
                    self.open_turn = Some(d.turn);
                    self.open_step = None;
                    self.last_step = 0;
                    self.last_turn = (d.turn, true);
                }
            }
            EventType::TurnEnd => {
                if let Ok(d) = event.data_as::<lite::Turn>() {
                    self.open_turn = None;
                    self.open_step = None;
                    self.last_step = 0;
                    self.last_turn = (d.turn, false);
                }
            }
            EventType::StepStart => {
                if let Ok(d) = event.data_as::<lite::Step>() {
                    if self.open_turn == Some(d.turn) {
                        self.last_step = d.step;
                    }
                    self.open_step = Some(StepState { turn: d.turn, step: d.step, ..StepState::default() });
                }
            }
            EventType::StepEnd if event.data_as::<lite::Step>().is_ok() => self.open_step = None,
            EventType::AssistantChunk => {
                if let (Ok(d), Some(open)) = (event.data_as::<lite::Step>(), self.open_step.as_mut()) {
                    if (open.turn, open.step) == (d.turn, d.step) {
                        open.chunks.push(seq);
                    }
                }
            }
            EventType::ToolCall => {
                if let (Ok(d), Some(open)) = (event.data_as::<lite::Call<'_>>(), self.open_step.as_mut()) {
                    if (open.turn, open.step) == (d.turn, d.step)
                        && !open.tool_calls.iter().any(|(id, _)| *id == d.call_id)
                    {
                        open.tool_calls.push((d.call_id.into_owned(), seq));
                    }
                }
            }
            EventType::AssistantMessage => {
                let Some(open) = self.open_step.as_mut() else { return };
                let Ok(step) = event.data_as::<lite::Step>() else { return };
                if (open.turn, open.step) != (step.turn, step.step) {
                    return;
                }
                if let Ok(d) = event.data_as::<lite::Assistant<'_>>() {
                    for block in &d.message.content {
                        if let (true, Some(id)) = (block.kind == "tool-call", &block.id) {
                            if !open.requests.iter().any(|(known, _)| known == id) {
                                open.requests.push((id.to_string(), seq));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The fold of `events` (consecutive events of a log) on top of this
    /// state, skipping straight to the last `turn/start` among them.
    pub(crate) fn fold_all(&mut self, events: &[Event]) {
        let from = events.iter().rposition(|e| *e.event_type() == EventType::TurnStart).unwrap_or(0);
        for event in &events[from..] {
            self.fold(event);
        }
    }
}

/// A checkpoint of a session: see the [module docs](self).
///
/// ```
/// use palimpsest_core_session::{payload::*, Checkpoint, Session, SessionHeader, SurfaceIntent};
///
/// let header = SessionHeader::new("c", 0);
/// let mut s = Session::create(header.clone());
/// s.append_log(1, TurnStart { turn: 1 })?;
/// s.append_surface(2, UserMessage { turn: Some(1), message: Message::user("u1", "hi") }, SurfaceIntent::append())?;
/// let text = s.checkpoint().to_json();
/// let checkpoint = Checkpoint::from_json(&text)?;
/// assert_eq!((checkpoint.log_len(), checkpoint.surface()), (2, &[1][..]));
/// let resumed = Session::resume(header, checkpoint, vec![])?;
/// assert_eq!(resumed.surface(), s.surface());
/// assert_eq!(resumed.last_turn(), (1, true));
/// assert!(!resumed.is_complete(), "the turn/start at seq 0 is not held");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub(crate) session_id: String,
    pub(crate) header_hash: String,
    pub(crate) log_len: u64,
    pub(crate) last_time: u64,
    pub(crate) tail_hash: Option<String>,
    pub(crate) surface: Vec<u64>,
    pub(crate) settings_seq: Option<u64>,
    pub(crate) turns: TurnState,
    pub(crate) events: Vec<Event>,
}

/// The wire form, for both directions.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire<'a> {
    checkpoint: u64,
    session_id: String,
    log_len: u64,
    last_time: u64,
    header_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tail_hash: Option<String>,
    surface: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settings_seq: Option<u64>,
    last_turn: u64,
    turn_open: bool,
    turns: TurnState,
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
    /// Absent when serializing: [`Checkpoint::to_json`] appends it.
    #[serde(default, skip_serializing)]
    body_hash: Option<&'a str>,
}

/// What precedes the content fingerprint, the wire form's last key.
const BODY_HASH_KEY: &str = ",\"bodyHash\":\"";

/// Only the version, read first so that a newer checkpoint is told apart
/// from a damaged one.
#[derive(Deserialize)]
struct VersionOnly {
    checkpoint: u64,
}

/// `fnv1a64:` and the FNV-1a hash of `bytes`, as 16 lowercase hex digits.
pub(crate) fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut out = String::with_capacity(24);
    let _ = write!(out, "fnv1a64:{h:016x}");
    out
}

/// Checks `bodyHash` (`found`), the last key of `json`, against the
/// fingerprint of the text before it.
fn check_body_hash(json: &str, found: Option<&str>) -> Result<(), CheckpointError> {
    let inconsistent = |detail: String| Err(CheckpointError::Inconsistent { detail });
    let Some(found) = found else { return inconsistent("no bodyHash".to_owned()) };
    let expected_end = format!("{BODY_HASH_KEY}{found}\"}}");
    let Some(body) = json.trim_end().strip_suffix(expected_end.as_str()) else {
        return inconsistent("bodyHash is not the last key of the canonical text".to_owned());
    };
    let actual = fingerprint(body.as_bytes());
    if found != actual {
        return inconsistent(format!(
            "bodyHash {found:?} is not the text's ({actual}): the checkpoint was edited or damaged"
        ));
    }
    Ok(())
}

impl Checkpoint {
    /// The session it is of.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().session_id(), "s");
    /// ```
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The length of the log it covers: it covers seqs `0..log_len()`, and
    /// the first event after it has seq `log_len()`.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().log_len(), 0);
    /// ```
    pub fn log_len(&self) -> u64 {
        self.log_len
    }

    /// The time of the last covered event (0 for an empty log).
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().last_time(), 0);
    /// ```
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// The surface at the end of the covered log, in surface order.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert!(Session::create(SessionHeader::new("s", 0)).checkpoint().surface().is_empty());
    /// ```
    pub fn surface(&self) -> &[u64] {
        &self.surface
    }

    /// Seq of the `session/settings` event in effect, if any.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().settings_seq(), None);
    /// ```
    pub fn settings_seq(&self) -> Option<u64> {
        self.settings_seq
    }

    /// The turn and step brackets at the end of the covered log.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().turns().started, 0);
    /// ```
    pub fn turns(&self) -> &TurnState {
        &self.turns
    }

    /// The resident events: every surface event and the settings event in
    /// effect, ascending by seq.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert!(Session::create(SessionHeader::new("s", 0)).checkpoint().events().is_empty());
    /// ```
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The fingerprint of the header line it was taken under.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let c = Session::create(SessionHeader::new("s", 0)).checkpoint();
    /// assert!(c.header_hash().starts_with("fnv1a64:"));
    /// ```
    pub fn header_hash(&self) -> &str {
        &self.header_hash
    }

    /// The fingerprint of the canonical line of the last covered event
    /// (`None` for an empty log).
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// assert_eq!(Session::create(SessionHeader::new("s", 0)).checkpoint().tail_hash(), None);
    /// ```
    pub fn tail_hash(&self) -> Option<&str> {
        self.tail_hash.as_deref()
    }

    /// Whether the checkpoint was taken under `header` (same id, same header
    /// line).
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let c = Session::create(SessionHeader::new("s", 0)).checkpoint();
    /// assert!(c.matches_header(&SessionHeader::new("s", 0)));
    /// assert!(!c.matches_header(&SessionHeader::new("s", 1)));
    /// ```
    pub fn matches_header(&self, header: &SessionHeader) -> bool {
        self.check_header(header).is_ok()
    }

    pub(crate) fn check_header(&self, header: &SessionHeader) -> Result<(), CheckpointError> {
        if header.id != self.session_id {
            return Err(CheckpointError::Mismatch {
                detail: format!("the checkpoint is of session {:?}, not {:?}", self.session_id, header.id),
            });
        }
        if fingerprint(header.to_json().as_bytes()) != self.header_hash {
            return Err(CheckpointError::Mismatch {
                detail: format!(
                    "session {:?}: the header is not the one the checkpoint was taken under",
                    header.id
                ),
            });
        }
        Ok(())
    }

    /// Whether `event` is the last event the checkpoint covers, as it was
    /// then (its seq is `log_len() - 1` and its canonical line has the
    /// checkpoint's `tailHash`). A reader checks this against the log
    /// before trusting the checkpoint; on a mismatch it loads the log whole.
    ///
    /// ```
    /// use palimpsest_core_session::{payload::TurnStart, Event, Session, SessionHeader};
    ///
    /// let mut s = Session::create(SessionHeader::new("s", 0));
    /// s.append_log(1, TurnStart { turn: 1 })?;
    /// let c = s.checkpoint();
    /// assert!(c.matches_last_event(&s.events()[0]));
    /// assert!(!c.matches_last_event(&Event::log(0, 2, TurnStart { turn: 1 })?));
    /// # Ok::<(), palimpsest_core_session::AppendError>(())
    /// ```
    pub fn matches_last_event(&self, event: &Event) -> bool {
        Some(event.seq()) == self.log_len.checked_sub(1)
            && self.tail_hash.as_deref() == Some(fingerprint(event.to_json().as_bytes()).as_str())
    }

    /// The checkpoint's JSON text (the [wire form](self)), one line.
    ///
    /// ```
    /// use palimpsest_core_session::{Session, SessionHeader};
    ///
    /// let text = Session::create(SessionHeader::new("s", 0)).checkpoint().to_json();
    /// assert!(text.starts_with(r#"{"checkpoint":2,"sessionId":"s","logLen":0,"#));
    /// ```
    pub fn to_json(&self) -> String {
        let lines: Vec<String> = self.events.iter().map(Event::to_json).collect();
        let raws: Vec<Box<RawValue>> =
            lines.into_iter().filter_map(|line| RawValue::from_string(line).ok()).collect();
        let wire = Wire {
            checkpoint: CHECKPOINT_VERSION,
            session_id: self.session_id.clone(),
            log_len: self.log_len,
            last_time: self.last_time,
            header_hash: self.header_hash.clone(),
            tail_hash: self.tail_hash.clone(),
            surface: self.surface.clone(),
            settings_seq: self.settings_seq,
            last_turn: self.turns.last_turn.0,
            turn_open: self.turns.last_turn.1,
            turns: self.turns.clone(),
            events: raws.iter().map(AsRef::as_ref).collect(),
            body_hash: None,
        };
        // Integers, strings and raw JSON texts that are event lines: this
        // cannot fail.
        let mut text = serde_json::to_string(&wire).expect("a checkpoint always serializes");
        text.pop(); // the closing brace
        let hash = fingerprint(text.as_bytes());
        let _ = write!(text, "{BODY_HASH_KEY}{hash}\"}}");
        text
    }

    /// Reads a checkpoint from its JSON text, checking it whole: the
    /// version, every field, every resident event (as
    /// [`Event::from_json`] does), and that they agree with each other.
    ///
    /// ```
    /// use palimpsest_core_session::Checkpoint;
    ///
    /// // Version 1, before `bodyHash`: a cache is rebuilt, not upgraded.
    /// let err = Checkpoint::from_json(r#"{"checkpoint":1}"#).unwrap_err();
    /// assert_eq!(err.code(), "checkpoint-version-unsupported");
    /// let err = Checkpoint::from_json("not json").unwrap_err();
    /// assert_eq!(err.code(), "checkpoint-malformed");
    /// ```
    pub fn from_json(json: &str) -> Result<Checkpoint, CheckpointError> {
        let malformed = |detail: String| CheckpointError::Malformed { detail };
        let version = serde_json::from_str::<VersionOnly>(json).map_err(|e| malformed(e.to_string()))?;
        if version.checkpoint != CHECKPOINT_VERSION {
            return Err(CheckpointError::VersionUnsupported { found: version.checkpoint });
        }
        let wire: Wire<'_> = serde_json::from_str(json).map_err(|e| malformed(e.to_string()))?;
        check_body_hash(json, wire.body_hash)?;
        let mut events = Vec::with_capacity(wire.events.len());
        for (i, raw) in wire.events.iter().enumerate() {
            let event = Event::from_json(raw.get())
                .map_err(|e| malformed(format!("resident event {i} is not a valid event: {e}")))?;
            events.push(event);
        }
        let mut turns = wire.turns;
        turns.last_turn = (wire.last_turn, wire.turn_open);
        let checkpoint = Checkpoint {
            session_id: wire.session_id,
            header_hash: wire.header_hash,
            log_len: wire.log_len,
            last_time: wire.last_time,
            tail_hash: wire.tail_hash,
            surface: wire.surface,
            settings_seq: wire.settings_seq,
            turns,
            events,
        };
        checkpoint.check()?;
        Ok(checkpoint)
    }

    /// The checks of [`Checkpoint::from_json`] past the syntax.
    fn check(&self) -> Result<(), CheckpointError> {
        let bad = |detail: String| Err(CheckpointError::Inconsistent { detail });
        let hash_ok = |h: &str| {
            h.strip_prefix("fnv1a64:").is_some_and(|hex| {
                hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            })
        };
        if !hash_ok(&self.header_hash) {
            return bad(format!("headerHash {:?} is not fnv1a64: and 16 hex digits", self.header_hash));
        }
        match (&self.tail_hash, self.log_len) {
            (None, 0) => {}
            (Some(h), n) if n > 0 && hash_ok(h) => {}
            (Some(h), 0) => return bad(format!("tailHash {h:?} for an empty log")),
            (Some(h), _) => return bad(format!("tailHash {h:?} is not fnv1a64: and 16 hex digits")),
            (None, _) => return bad("no tailHash for a log that is not empty".to_owned()),
        }
        for pair in self.events.windows(2) {
            if pair[0].seq() >= pair[1].seq() {
                return bad(format!(
                    "resident events out of order: seq {} before {}",
                    pair[0].seq(),
                    pair[1].seq()
                ));
            }
        }
        if let Some(last) = self.events.last() {
            if last.seq() >= self.log_len {
                return bad(format!(
                    "resident event {} is past the log's length {}",
                    last.seq(),
                    self.log_len
                ));
            }
        }
        let find = |seq: u64| crate::resident::find(&self.events, seq);
        let mut on_surface = HashSet::with_capacity(self.surface.len());
        for &seq in &self.surface {
            if !on_surface.insert(seq) {
                return bad(format!("seq {seq} is on the surface twice"));
            }
            match find(seq) {
                Some(e) if e.surface_op().is_some() => {}
                Some(e) => {
                    return bad(format!(
                        "surface seq {seq} is a {} event, which never joins the surface",
                        e.event_type()
                    ))
                }
                None => return bad(format!("surface seq {seq} is not among the resident events")),
            }
        }
        if let Some(seq) = self.settings_seq {
            match find(seq) {
                Some(e) if *e.event_type() == EventType::SessionSettings => {}
                Some(e) => return bad(format!("settings seq {seq} is a {} event", e.event_type())),
                None => return bad(format!("settings seq {seq} is not among the resident events")),
            }
        }
        let expected = self.surface.len() + usize::from(self.settings_seq.is_some());
        if self.events.len() != expected {
            return bad(format!(
                "{} resident events, but the surface and the settings name {expected}",
                self.events.len()
            ));
        }
        if let Some(step) = &self.turns.open_step {
            let seqs = step
                .tool_calls
                .iter()
                .chain(&step.requests)
                .map(|(_, s)| *s)
                .chain(step.chunks.iter().copied());
            if let Some(seq) = seqs.into_iter().find(|&s| s >= self.log_len) {
                return bad(format!("the open step names seq {seq}, past the log's length {}", self.log_len));
            }
            if step.chunks.windows(2).any(|p| p[0] >= p[1]) {
                return bad("the open step's chunks are not ascending".to_owned());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_fnv1a_64() {
        // Reference values of FNV-1a 64.
        assert_eq!(fingerprint(b""), "fnv1a64:cbf29ce484222325");
        assert_eq!(fingerprint(b"a"), "fnv1a64:af63dc4c8601ec8c");
        assert_eq!(fingerprint(b"foobar"), "fnv1a64:85944171f73967e8");
    }
}
