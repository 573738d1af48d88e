//! The loop emits a `turn` span and a `step` span per step, with their seq
//! ranges; checked with a minimal capturing subscriber.
//!
//! A test binary of its own: tracing caches per-callsite interest
//! process-wide, so a scoped subscriber in a binary whose other tests hit
//! the same callsites on other threads could miss spans.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use palimpsest_core_agent_loop::{
    AgentLoop, FnTool, ManualClock, ScriptedProvider, ScriptedResponse, SequentialIds, ToolContext,
    ToolError, TurnInput,
};
use palimpsest_core_session::payload::Block;
use palimpsest_persistence::{MemoryStore, SessionStore};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Fields = BTreeMap<String, String>;

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
}

struct Fill<'a>(&'a mut Fields);

impl Visit for Fill<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut spans = lock(&self.spans);
        let mut fields = Fields::new();
        attrs.record(&mut Fill(&mut fields));
        spans.push((attrs.metadata().name().to_owned(), fields));
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = lock(&self.spans);
        if let Some((_, fields)) = usize::try_from(span.into_u64() - 1).ok().and_then(|i| spans.get_mut(i)) {
            values.record(&mut Fill(fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[test]
fn turn_and_step_spans_carry_seq_ranges() {
    let capture = Capture::default();
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedResponse::new().tool_call(0, "c1", "add", &["{\"a\": 1, \"b\": 2}"]),
        ScriptedResponse::reply("3"),
    ]));
    let add = FnTool::new("add", "Adds.", serde_json::json!({}), |_a: String, _c: ToolContext| async {
        Ok::<_, ToolError>(vec![Block::text("3")])
    });
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    tracing::subscriber::with_default(capture.clone(), || {
        let mut agent = AgentLoop::builder(provider)
            .tool(add)
            .clock(Arc::new(ManualClock::new(0)))
            .ids(Arc::new(SequentialIds::new("m")))
            .create(store, "s1")
            .expect("create");
        runtime.block_on(agent.run_turn(TurnInput::text("1 + 2?"))).expect("turn");
    });
    let spans: Vec<(String, Fields)> =
        lock(&capture.spans).iter().filter(|(name, _)| name == "turn" || name == "step").cloned().collect();
    let show = |f: &Fields, keys: &[&str]| {
        keys.iter().map(|k| format!("{k}={}", f.get(*k).map_or("-", |v| v))).collect::<Vec<_>>().join(" ")
    };
    let lines: Vec<String> = spans
        .iter()
        .map(|(name, f)| match name.as_str() {
            "turn" => format!("turn {}", show(f, &["session_id", "turn", "first_seq", "last_seq", "reason"])),
            _ => format!("step {}", show(f, &["turn", "step", "first_seq", "last_seq"])),
        })
        .collect();
    // turn/start 0, user 1 | step/start 2, chunk 3, message 4, call 5, result 6, step/end 7 |
    // step/start 8, chunk 9, message 10, step/end 11 | turn/end 12
    assert_eq!(
        lines,
        [
            "turn session_id=s1 turn=1 first_seq=0 last_seq=12 reason=\"completed\"",
            "step turn=1 step=1 first_seq=2 last_seq=7",
            "step turn=1 step=2 first_seq=8 last_seq=11",
        ]
    );
}
