//! The benchmark workload of issue 10, generated deterministically from a
//! seed in the session format.
//!
//! One turn is 101 events: `turn/start`; a 400-character `user/message`;
//! three tool steps of 25 events (`step/start`, 18 text deltas of ~24
//! characters, a tool-call delta and a usage chunk, an `assistant/message`
//! citing its 20 chunks, a `tool/call` with ~60 characters of JSON
//! arguments, a 2,000-character `tool/result` citing its call, `step/end`);
//! a final step of 23 events without a tool call; `turn/end`. Whenever 2,000
//! entries have joined the surface since the last compaction, the next turn
//! is preceded by `compaction/start`, a 2,000-character summary
//! `user/message` replacing the whole surface (citing every shadowed seq),
//! and `compaction/end`.

use palimpsest_core_session::payload::*;
use palimpsest_core_session::{Event, SessionHeader, SurfaceIntent};
use palimpsest_persistence::testkit::SplitMix64;

/// The project's seeded generator ([`SplitMix64`], shared with the contract
/// kit and the torture tests), so the workload is the same on every machine
/// for a seed, and whether texts also draw from [`RARE_WORDS`] made-up words
/// (the search corpus), besides the twenty common ones.
struct Rng(SplitMix64, bool);

/// How many rare words the search corpus draws from: `term0` ...
pub(crate) const RARE_WORDS: u64 = 5_000;

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn text(&mut self, chars: usize) -> String {
        const WORDS: &[&str] = &[
            "the",
            "log",
            "surface",
            "agent",
            "tool",
            "result",
            "compaction",
            "seq",
            "model",
            "turn",
            "step",
            "replay",
            "provenance",
            "append",
            "history",
            "file",
            "read",
            "write",
            "summary",
            "event",
        ];
        let mut s = String::with_capacity(chars + 12);
        while s.len() < chars {
            if !s.is_empty() {
                s.push(' ');
            }
            let pick = self.next();
            if self.1 && pick % 2 == 1 {
                s.push_str(&format!("term{}", (pick >> 1) % RARE_WORDS));
            } else {
                s.push_str(WORDS[(pick % WORDS.len() as u64) as usize]);
            }
        }
        s.truncate(chars);
        s
    }
}

/// Builds the workload: a header and exactly `n` events (the last turn may
/// be cut short, so the log can end inside a turn).
pub(crate) fn generate(n: usize, seed: u64) -> (SessionHeader, Vec<Event>) {
    generate_with(n, seed, false)
}

/// [`generate`], with texts that also use [`RARE_WORDS`] made-up words
/// (`term0` ... `term4999`, half the words of a text): a corpus where a
/// word can be rare, for the search section.
pub(crate) fn generate_searchable(n: usize, seed: u64) -> (SessionHeader, Vec<Event>) {
    generate_with(n, seed, true)
}

/// The workload of a session that prunes, as `palimpsest run` does by
/// default: before each turn every `tool/result` older than the four newest
/// is replaced by its stub (a single-node replace citing it, as the
/// tool-result pruning plugin writes), and compaction waits for 20,000
/// surface entries (2,500 turns, ~250k events), so the surface grows to
/// thousands of entries between compactions and a replace comes every
/// ~35 events, not every ~20,000 as in [`generate`].
pub(crate) fn generate_pruned(n: usize, seed: u64) -> (SessionHeader, Vec<Event>) {
    let mut g = Gen::new(n, seed, false);
    g.results = Some(std::collections::VecDeque::new());
    g.run(n, 20_000);
    (SessionHeader::new(format!("bench-pruned-{seed}"), 1_767_225_600_000), g.events)
}

/// A hostile shape, as JSONL: `n / 2` context messages appended, then
/// `n / 2` replaces, each of the surface's first entry by a new message
/// (the first is the previous replace's). Rule-abiding, so it must
/// validate at the workload's pace: a search for a replace's ends that
/// scans the surface makes it quadratic (docs/performance.md).
pub(crate) fn front_replaces_jsonl(n: usize) -> Vec<u8> {
    let header = SessionHeader::new("bench-front-replaces", 1_767_225_600_000);
    let mut out = palimpsest_core_session::jsonl::header_line(&header).into_bytes();
    let message = |seq: usize| {
        format!(
            r#"{{"message":{{"id":"m{seq}","role":"user","content":[{{"type":"text","text":"x"}}],"source":{{"kind":"user"}}}}}}"#
        )
    };
    let appends = n / 2;
    for seq in 0..appends {
        let data = message(seq);
        out.extend(
            format!(
                r#"{{"seq":{seq},"time":0,"type":"context/message","data":{data},"surfaceOp":"append"}}"#
            )
            .bytes(),
        );
        out.push(b'\n');
    }
    let mut first = 0;
    for seq in appends..n {
        let data = message(seq);
        out.extend(
            format!(
                r#"{{"seq":{seq},"time":0,"type":"context/message","data":{data},"sourceEventSeqs":[{first}],"surfaceOp":{{"op":"replace","start":{first},"end":{first}}}}}"#
            )
            .bytes(),
        );
        out.push(b'\n');
        first = seq;
    }
    out
}

fn generate_with(n: usize, seed: u64, rare_words: bool) -> (SessionHeader, Vec<Event>) {
    let mut g = Gen::new(n, seed, rare_words);
    g.run(n, 2000);
    (SessionHeader::new(format!("bench-{seed}"), 1_767_225_600_000), g.events)
}

struct Gen {
    rng: Rng,
    events: Vec<Event>,
    surface: Vec<u64>,
    since: usize,
    ids: u64,
    /// The `tool/result`s on the surface not yet pruned, oldest first;
    /// `None` when the workload does not prune.
    results: Option<std::collections::VecDeque<u64>>,
}

impl Gen {
    fn new(n: usize, seed: u64, rare_words: bool) -> Gen {
        Gen {
            rng: Rng(SplitMix64::new(seed), rare_words),
            events: Vec::with_capacity(n + 128),
            surface: Vec::new(),
            since: 0,
            ids: 0,
            results: None,
        }
    }

    /// Turns until there are `n` events (the last one cut short), a
    /// compaction before a turn once `compact_at` entries have joined the
    /// surface since the last one, and the pruning before each turn.
    fn run(&mut self, n: usize, compact_at: usize) {
        let mut turn = 0;
        while self.events.len() < n {
            if self.since >= compact_at {
                self.compact();
            }
            self.prune();
            turn += 1;
            self.turn(turn);
        }
        self.events.truncate(n);
    }

    /// Replaces every unpruned `tool/result` but the four newest by its
    /// stub, in place on the surface.
    fn prune(&mut self) {
        while self.results.as_ref().is_some_and(|r| r.len() > 4) {
            let Some(seq) = self.results.as_mut().and_then(|r| r.pop_front()) else { return };
            let original = self.events[seq as usize].clone();
            let id = self.id("p");
            let stub = palimpsest_core_session::rewrite::pruned_result(&original, id)
                .expect("the workload's results can be pruned");
            let by = self.seq();
            let e = Event::surface(by, self.time(), stub, SurfaceIntent::replace(seq, seq, vec![seq]))
                .expect("workload events are well-formed");
            self.events.push(e);
            if let Some(at) = self.surface.iter().position(|&s| s == seq) {
                self.surface[at] = by;
            }
        }
    }

    fn seq(&self) -> u64 {
        self.events.len() as u64
    }

    fn time(&self) -> u64 {
        1_767_225_600_000 + self.seq() * 7
    }

    fn id(&mut self, prefix: &str) -> String {
        self.ids += 1;
        format!("{prefix}{}", self.ids)
    }

    fn log(&mut self, payload: impl Into<LogPayload>) -> u64 {
        let seq = self.seq();
        let e = Event::log(seq, self.time(), payload).expect("workload events are well-formed");
        self.events.push(e);
        seq
    }

    fn surface(&mut self, payload: impl Into<SurfacePayload>, intent: SurfaceIntent) -> u64 {
        let seq = self.seq();
        let replace = matches!(intent.op, palimpsest_core_session::SurfaceOp::Replace { .. });
        let e = Event::surface(seq, self.time(), payload, intent).expect("workload events are well-formed");
        self.events.push(e);
        if replace {
            self.surface = vec![seq];
        } else {
            self.surface.push(seq);
            self.since += 1;
        }
        seq
    }

    fn compact(&mut self) {
        let start = self.log(PluginEvent {
            event_type: "compaction/start".into(),
            data: serde_json::json!({"reason": "budget", "entries": self.surface.len()}),
        });
        let shadowed = self.surface.clone();
        let mut sources = vec![start];
        sources.extend(&shadowed);
        let message = Message {
            id: self.id("sum"),
            role: Role::User,
            content: vec![Block::text(self.rng.text(2000))],
            source: Source::Plugin { plugin: "compaction".into() },
        };
        let intent = SurfaceIntent::replace(shadowed[0], *shadowed.last().unwrap_or(&shadowed[0]), sources);
        let summary = self.surface(UserMessage { turn: None, message }, intent);
        self.log(PluginEvent {
            event_type: "compaction/end".into(),
            data: serde_json::json!({"summarySeq": summary}),
        });
        self.since = 0;
        if let Some(results) = &mut self.results {
            results.clear();
        }
    }

    fn turn(&mut self, turn: u64) {
        self.log(TurnStart { turn });
        let message = Message {
            id: self.id("u"),
            role: Role::User,
            content: vec![Block::text(self.rng.text(400))],
            source: Source::User,
        };
        self.surface(UserMessage { turn: Some(turn), message }, SurfaceIntent::append());
        for step in 1..=4 {
            self.step(turn, step, step < 4);
        }
        self.log(TurnEnd { turn, reason: TurnEndReason::Completed });
    }

    fn step(&mut self, turn: u64, step: u64, tool: bool) {
        self.log(StepStart { turn, step });
        let texts = if tool { 18 } else { 19 };
        let mut chunks = Vec::with_capacity(20);
        let mut text = String::new();
        for _ in 0..texts {
            let piece = self.rng.text(24);
            text.push_str(&piece);
            chunks.push(self.log(AssistantChunk {
                turn,
                step,
                chunk: StreamChunk::TextDelta { index: 0, text: piece },
            }));
        }
        let call_id = self.id("call_");
        let arguments =
            format!("{{\"path\":\"src/{}.rs\",\"lines\":[1,200]}}", self.rng.text(20).replace(' ', "_"));
        if tool {
            chunks.push(self.log(AssistantChunk {
                turn,
                step,
                chunk: StreamChunk::ToolCallDelta {
                    index: 1,
                    id: call_id.clone(),
                    name: Some("read_file".into()),
                    arguments_delta: arguments.clone(),
                },
            }));
        }
        let usage =
            Usage { input_tokens: 1000 + self.rng.next() % 1000, output_tokens: 100, ..Usage::default() };
        chunks.push(self.log(AssistantChunk { turn, step, chunk: StreamChunk::Usage(usage) }));
        let mut content = vec![Block::Text { text }];
        if tool {
            content.push(Block::ToolCall {
                id: call_id.clone(),
                name: "read_file".into(),
                arguments: arguments.clone(),
            });
        }
        let message = Message {
            id: self.id("a"),
            role: Role::Assistant,
            content,
            source: Source::Model { provider: "bench".into(), model: "bench-1".into() },
        };
        self.surface(
            AssistantMessage { turn, step, message, usage: Some(usage), interrupted: None },
            SurfaceIntent::append_citing(chunks),
        );
        if tool {
            let call = self.log(ToolCall {
                turn,
                step,
                call_id: call_id.clone(),
                name: "read_file".into(),
                arguments,
            });
            let message = Message {
                id: self.id("r"),
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_call_id: call_id.clone(),
                    is_error: false,
                    content: vec![Block::text(self.rng.text(2000))],
                }],
                source: Source::Tool { call_id },
            };
            let result = self.surface(
                ToolResult { turn, step, message, error: None },
                SurfaceIntent::append_citing(vec![call]),
            );
            if let Some(results) = &mut self.results {
                results.push_back(result);
            }
        }
        self.log(StepEnd { turn, step });
    }
}
