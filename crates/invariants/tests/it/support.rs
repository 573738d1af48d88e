//! The one test helper, [`check`], and a small builder for minimal logs.
//!
//! Every test hands a log (JSONL text) and the violations it expects to
//! [`check`], which asserts that all the ways of running the invariants agree
//! on it: the whole-log [`check_log`], the incremental guard driven through
//! the `AppendGuard` trait, a guard rebuilt from scratch before every event,
//! and a `Session` with the guard installed (which must refuse a bad log at
//! its first violation and change nothing).

use palimpsest_core_session::{
    AppendError, AppendGuard, BatchError, Event, Session, SessionHeader, SessionView, SurfaceManager,
};
use palimpsest_invariants::{check_log, InvariantGuard, Violation, CODES};
use serde_json::{json, Value};

/// A parsed log: the header (a default one when the text has none) and the events.
pub(crate) fn parse(text: &str) -> (SessionHeader, Vec<Event>) {
    let mut header = SessionHeader::new("test", 0);
    let mut events = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with(r#"{"type":"session""#) {
            header = SessionHeader::from_json(line).expect("header");
        } else {
            events.push(Event::from_json(line).unwrap_or_else(|e| panic!("bad test event {line}: {e}")));
        }
    }
    (header, events)
}

fn pairs(violations: &[Violation]) -> Vec<(&'static str, u64)> {
    violations.iter().map(|v| (v.code, v.seq)).collect()
}

/// Checks `text` (a JSONL log; the header line is optional) against
/// `expected` `(code, seq)` pairs, in the order `check_log` reports them.
/// Returns the violations for further assertions on their messages.
pub(crate) fn check(text: &str, expected: &[(&str, u64)]) -> Vec<Violation> {
    let (header, events) = parse(text);
    // The log must satisfy section 2: the invariants are judged on valid logs.
    SurfaceManager::fold(&events).expect("test logs must satisfy the surface rules");

    // 1. The whole-log report.
    let all = check_log(&events);
    let rendered: Vec<String> = all.iter().map(ToString::to_string).collect();
    assert_eq!(pairs(&all), expected, "check_log found:\n{}", rendered.join("\n"));
    for v in &all {
        assert!(CODES.contains(&v.code), "{} is not a section-2a code", v.code);
        assert!(!v.message.is_empty());
    }

    // 2. The incremental guard, a guard rebuilt before each event, and
    //    check_log agree on every event (the guard keeps going past vetoes).
    let mut incremental = InvariantGuard::new();
    let mut surface = SurfaceManager::new();
    for (i, event) in events.iter().enumerate() {
        let before = SessionView::of(&header, &events[..i], &surface);
        let mut rebuilt = InvariantGuard::new();
        rebuilt.rebuild(before);
        let here: Vec<Violation> = all.iter().filter(|v| v.seq == event.seq()).cloned().collect();
        assert_eq!(incremental.violations(before, event), here, "incremental guard at seq {i}");
        assert_eq!(rebuilt.violations(before, event), here, "rebuilt guard at seq {i}");
        let first = AppendGuard::check(&incremental, before, event).err().map(|g| (g.code, g.message));
        assert_eq!(first, here.first().map(|v| (v.code.to_owned(), v.message.clone())), "seq {i}");
        let step = surface.plan(&events[..i], event).expect("valid log");
        surface.apply(event.seq(), step);
        let after = SessionView::of(&header, &events[..=i], &surface);
        incremental.committed(after, event);
    }

    // 3. A session with the guard installed.
    let guarded = Session::from_log_guarded(header.clone(), events.clone(), guard());
    match all.first() {
        None => {
            let session = guarded.expect("a clean log loads with the guard on");
            assert_eq!(session.surface(), surface.seqs());
        }
        Some(first) => {
            let err = guarded.expect_err("the guard refuses the log");
            assert_vetoed(&err, first);
            assert_veto_changes_nothing(&header, &events, first);
        }
    }
    all
}

fn guard() -> Option<Box<dyn AppendGuard>> {
    Some(Box::new(InvariantGuard::new()))
}

fn assert_vetoed(err: &AppendError, expected: &Violation) {
    match err {
        AppendError::Vetoed { seq, code, message } => {
            assert_eq!((code.as_str(), *seq), (expected.code, expected.seq));
            assert_eq!(message, &expected.message);
        }
        other => panic!("expected a veto, got {other}"),
    }
}

/// Loads the log up to its first violation (guard installed at load, or
/// later with `set_guard`), then offers the bad event every way a session
/// takes one: each is vetoed and `events()`/`surface()` stay as they were.
fn assert_veto_changes_nothing(header: &SessionHeader, events: &[Event], first: &Violation) {
    let at = usize::try_from(first.seq).unwrap();
    let bad = &events[at];
    let at_load = Session::from_log_guarded(header.clone(), events[..at].to_vec(), guard());
    let mut later = Session::from_log(header.clone(), events[..at].to_vec()).expect("valid prefix");
    later.set_guard(guard());
    for mut session in [at_load.expect("the prefix before the first violation is clean"), later] {
        let (log, surface) = (session.events().to_vec(), session.surface().to_vec());
        assert_vetoed(&session.check(bad).unwrap_err(), first);
        assert_vetoed(&session.append(bad.clone()).unwrap_err(), first);
        let mut wrote = false;
        let batch = session.append_batch_with(vec![bad.clone()], |_| {
            wrote = true;
            Ok::<(), std::io::Error>(())
        });
        match batch {
            Err(BatchError::Refused(e)) => assert_vetoed(&e, first),
            other => panic!("expected a refused batch, got {other:?}"),
        }
        assert!(!wrote, "a vetoed batch never reaches the store");
        assert_eq!(session.events(), log.as_slice());
        assert_eq!(session.surface(), surface.as_slice());
        // The installed guard is as it was: it still vetoes the same event,
        // and it agrees with a guard rebuilt from the session.
        assert_vetoed(&session.check(bad).unwrap_err(), first);
        let mut fresh = InvariantGuard::new();
        fresh.rebuild(session.view());
        let here: Vec<Violation> = check_log(events).into_iter().filter(|v| v.seq == first.seq).collect();
        assert_eq!(fresh.violations(session.view(), bad), here);
    }
}

/// Reads a fixture file under `test_data/`.
pub(crate) fn fixture(path: &str) -> String {
    let full = format!("{}/test_data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The `(code, seq)` pairs an `err/*.expected` file lists (`seq code` per line).
pub(crate) fn expected_of(text: &str) -> Vec<(&str, u64)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (seq, code) = l.split_once(' ').expect("`seq code`");
            (code.trim(), seq.parse().expect("seq"))
        })
        .collect()
}

// ---- A builder for minimal logs: each function is one event's JSON, without
// ---- seq and time; `log` numbers them.

/// JSONL text for `events`, numbered from 0.
pub(crate) fn log(events: &[Value]) -> String {
    let mut text = String::new();
    for (seq, event) in events.iter().enumerate() {
        let mut obj = serde_json::Map::new();
        obj.insert("seq".into(), json!(seq));
        obj.insert("time".into(), json!(seq));
        for (k, v) in event.as_object().expect("an event object") {
            obj.insert(k.clone(), v.clone());
        }
        text.push_str(&Value::Object(obj).to_string());
        text.push('\n');
    }
    text
}

/// Surface metadata for a builder event.
pub(crate) trait Surface {
    /// Sets `sourceEventSeqs`.
    fn cites(self, seqs: &[u64]) -> Value;
    /// Sets `surfaceOp` to a replace.
    fn replaces(self, start: u64, end: u64) -> Value;
}

impl Surface for Value {
    fn cites(mut self, seqs: &[u64]) -> Value {
        self["sourceEventSeqs"] = json!(seqs);
        self
    }

    fn replaces(mut self, start: u64, end: u64) -> Value {
        self["surfaceOp"] = json!({"op": "replace", "start": start, "end": end});
        self
    }
}

pub(crate) fn turn_start(turn: u64) -> Value {
    json!({"type": "turn/start", "data": {"turn": turn}})
}

pub(crate) fn turn_end(turn: u64) -> Value {
    json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
}

pub(crate) fn step_start(turn: u64, step: u64) -> Value {
    json!({"type": "step/start", "data": {"turn": turn, "step": step}})
}

pub(crate) fn step_end(turn: u64, step: u64) -> Value {
    json!({"type": "step/end", "data": {"turn": turn, "step": step}})
}

fn user_msg(id: &str, source: Value) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": id}], "source": source})
}

/// An appended `user/message`.
pub(crate) fn user(id: &str) -> Value {
    json!({"type": "user/message", "data": {"message": user_msg(id, json!({"kind": "user"}))}, "surfaceOp": "append"})
}

/// A compaction summary: a `user/message` from a plugin (give it `.replaces()` and `.cites()`).
pub(crate) fn summary(id: &str) -> Value {
    json!({"type": "user/message", "data": {"message": user_msg(id, json!({"kind": "plugin", "plugin": "compaction"}))}, "surfaceOp": "append"})
}

/// A `session/settings` naming `model`.
pub(crate) fn settings(model: &str) -> Value {
    json!({"type": "session/settings", "data": {"settings": {"model": model}}})
}

pub(crate) fn plugin(event_type: &str) -> Value {
    json!({"type": event_type, "data": null})
}

pub(crate) fn chunk(turn: u64, step: u64) -> Value {
    json!({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": "…"}}})
}

/// An appended `assistant/message` with one `tool-call` block per id in `calls`.
pub(crate) fn assistant(turn: u64, step: u64, calls: &[&str]) -> Value {
    let mut content = vec![json!({"type": "text", "text": "ok"})];
    content.extend(
        calls.iter().map(|id| json!({"type": "tool-call", "id": id, "name": "t", "arguments": "{}"})),
    );
    json!({"type": "assistant/message", "data": {"turn": turn, "step": step, "message": {
        "id": format!("a{turn}.{step}"), "role": "assistant", "content": content,
        "source": {"kind": "model", "provider": "p", "model": "m"}}}, "surfaceOp": "append"})
}

pub(crate) fn tool_call(turn: u64, step: u64, id: &str) -> Value {
    json!({"type": "tool/call", "data": {"turn": turn, "step": step, "callId": id, "name": "t", "arguments": "{}"}})
}

/// An appended `tool/result` for call `id`.
pub(crate) fn result(turn: u64, step: u64, id: &str) -> Value {
    json!({"type": "tool/result", "data": {"turn": turn, "step": step, "message": {
        "id": format!("r-{id}"), "role": "user",
        "content": [{"type": "tool-result", "toolCallId": id, "isError": false, "content": []}],
        "source": {"kind": "tool", "callId": id}}}, "surfaceOp": "append"})
}

/// An appended error `tool/result` with `data.error.code = code`.
pub(crate) fn error_result(turn: u64, step: u64, id: &str, code: &str) -> Value {
    let mut r = result(turn, step, id);
    r["data"]["message"]["content"][0]["isError"] = json!(true);
    r["data"]["error"] = json!({"name": "Repair", "code": code});
    r
}
