//! What the demo's scripted model says: the workspace it works in, the
//! user's turns, and a model that reacts to the real output of its tools
//! (and answers the compaction plugin's summary requests).

use palimpsest_core_agent_loop::{ModelRequest, ScriptedProvider, ScriptedResponse};
use palimpsest_core_session::payload::{Block, Message, Role, Source};

/// The files the demo's workspace starts with.
pub(crate) const WORKSPACE: &[(&str, &str)] = &[
    ("README.md", "# Garden shed project\n\nPlans, notes and the budget for building a garden shed this spring.\nSee notes.md for the task list and budget.csv for what was spent.\n"),
    ("notes.md", NOTES),
    ("budget.csv", "item,amount\ntimber,420.50\nroofing felt,64.99\nscrews and nails,23.40\nconcrete blocks,88.00\nwood stain,37.25\nhinges and latch,18.60\nwindow,95.00\n"),
    ("CHANGELOG.md", CHANGELOG),
];

const NOTES: &str = "# Shed notes\n\n## Decisions\nThe shed is 2.4 m by 1.8 m, on concrete blocks, with a pent roof sloping to the back fence.\nTimber is pressure-treated 45x70 for the frame and 12 mm shiplap for the walls.\nThe door opens outwards, hinged on the left, so the wheelbarrow fits through.\n\n## Tasks\n- [x] Measure the plot and check the ground is level enough\n- [x] Order the timber and the roofing felt\n- [ ] Lay the concrete blocks on a gravel bed\n- [x] Build the floor frame\n- [ ] Raise the wall frames and brace them\n- [ ] Fit the window before the shiplap goes on\n- [ ] Felt the roof and fit the drip edge\n- [x] Buy wood stain (two coats)\n- [ ] Stain everything before the autumn rain\n\n## Questions\nDoes the window need a lintel at this span? The timber merchant says a doubled 45x70 is enough.\nShould the floor get a damp-proof membrane? Probably yes: the blocks sit on clay.\n\n## Log\nSaturday: levelled the plot, it slopes 4 cm over the length; the blocks take it up.\nSunday: floor frame built and squared (diagonals within 3 mm).\nMonday: timber for the walls delivered; two lengths were warped and went back.\n";

const CHANGELOG: &str = "# Changelog\n\n## Week 3\n- Floor frame built and squared; diagonals within 3 mm.\n- Two warped lengths of timber returned; replacements promised for Thursday.\n- Decided on a damp-proof membrane under the floor.\n\n## Week 2\n- Timber and roofing felt delivered.\n- Plot levelled; the slope of 4 cm is taken up by the blocks.\n- Budget reviewed: spending is on plan.\n\n## Week 1\n- Plot measured; shed size fixed at 2.4 m by 1.8 m.\n- Pent roof chosen over apex: simpler, and it sheds rain away from the path.\n- Materials list drawn up and priced at three merchants.\n";

/// One step of a scripted turn.
enum Step {
    /// Say `preface`, then call these tools (name, JSON arguments).
    Call(&'static str, &'static [(&'static str, ArgsFn)]),
    /// Answer, given the texts of the turn's tool results so far.
    Answer(fn(&[String]) -> String),
}

type ArgsFn = fn(&[String]) -> String;

/// One user turn: the prompt and what the model does with it.
pub(crate) struct DemoTurn {
    /// What the user types.
    pub(crate) prompt: &'static str,
    steps: &'static [Step],
}

/// The demo's turns, in order.
pub(crate) const TURNS: &[DemoTurn] = &[
    DemoTurn {
        prompt: "What is in this workspace?",
        steps: &[
            Step::Call("Let me look at the files.", &[("list_files", |_| "{}".into())]),
            Step::Answer(|out| {
                let files: Vec<&str> = out[0].lines().map(|l| l.split(' ').next().unwrap_or(l)).collect();
                format!(
                    "The workspace holds {} files: {}. It is a garden shed project.",
                    files.len(),
                    files.join(", ")
                )
            }),
        ],
    },
    DemoTurn {
        prompt: "Read notes.md and tell me which tasks are still open.",
        steps: &[
            Step::Call("Reading the notes.", &[("read_file", |_| r#"{"path":"notes.md"}"#.into())]),
            Step::Answer(|out| {
                let open: Vec<&str> = out[0].lines().filter_map(|l| l.strip_prefix("- [ ] ")).collect();
                format!("{} tasks are still open: {}.", open.len(), open.join("; "))
            }),
        ],
    },
    DemoTurn {
        prompt: "How much has been spent so far, according to budget.csv?",
        steps: &[
            Step::Call("Reading the budget.", &[("read_file", |_| r#"{"path":"budget.csv"}"#.into())]),
            Step::Call(
                "Adding it up.",
                &[("calculator", |out| {
                    let amounts: Vec<&str> =
                        out[0].lines().skip(1).filter_map(|l| l.rsplit(',').next()).collect();
                    serde_json::json!({"expression": amounts.join(" + ")}).to_string()
                })],
            ),
            Step::Answer(|out| {
                format!("{} has been spent so far, across {} items.", out[1], out[0].lines().count() - 1)
            }),
        ],
    },
    DemoTurn {
        prompt: "Write the open tasks and the total spent to summary.md.",
        steps: &[
            Step::Call(
                "Writing the summary file.",
                &[("write_file", |_| {
                    let open: Vec<String> = NOTES
                        .lines()
                        .filter_map(|l| l.strip_prefix("- [ ] "))
                        .map(|t| format!("- {t}"))
                        .collect();
                    let content =
                        format!("# Summary\n\nOpen tasks:\n{}\n\nSpent so far: 747.74\n", open.join("\n"));
                    serde_json::json!({"path": "summary.md", "content": content}).to_string()
                })],
            ),
            Step::Answer(|out| format!("Done: {}.", out[0])),
        ],
    },
    DemoTurn {
        prompt: "Read CHANGELOG.md: what happened in the latest week?",
        steps: &[
            Step::Call("Reading the changelog.", &[("read_file", |_| r#"{"path":"CHANGELOG.md"}"#.into())]),
            Step::Answer(|out| {
                let week: Vec<&str> = out[0]
                    .split("\n## ")
                    .nth(1)
                    .map(|w| w.lines().skip(1).filter_map(|l| l.strip_prefix("- ")).collect())
                    .unwrap_or_default();
                format!("In week 3: {}", week.join(" "))
            }),
        ],
    },
    DemoTurn {
        prompt: "Check summary.md and the README, then recap what we did today.",
        steps: &[
            Step::Call(
                "Checking both files.",
                &[
                    ("read_file", |_| r#"{"path":"summary.md"}"#.into()),
                    ("read_file", |_| r#"{"path":"README.md"}"#.into()),
                ],
            ),
            Step::Answer(|out| {
                format!(
                    "summary.md is there ({} lines) and the README describes the project. Today we listed the \
                     files, found the open tasks, totalled the budget, wrote summary.md and read the changelog.",
                    out[0].lines().count()
                )
            }),
        ],
    },
];

/// The scripted model: it finds the current turn by its prompt, the step by
/// the assistant messages already in the request, and answers from the
/// tool results it is shown.
pub(crate) fn provider() -> ScriptedProvider {
    ScriptedProvider::from_fn(respond).with_names("scripted", "demo-model")
}

fn text_of(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            Block::ToolResult { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|c| match c {
                        Block::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn respond(request: &ModelRequest) -> ScriptedResponse {
    if request.system.as_deref().is_some_and(|s| s.starts_with("Summarize")) {
        return summarize(request);
    }
    // The current turn: the last message a person typed.
    let Some(at) = request.messages.iter().rposition(|m| m.source == Source::User) else {
        return ScriptedResponse::reply("Hello! Ask me about the workspace.");
    };
    let prompt = text_of(&request.messages[at]);
    let Some(turn) = TURNS.iter().find(|t| t.prompt == prompt) else {
        return ScriptedResponse::reply("I only know the demo's script, sorry.");
    };
    let later = &request.messages[at + 1..];
    let step = later.iter().filter(|m| m.role == Role::Assistant).count();
    let outputs: Vec<String> = later
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolResult { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|c| match c {
                        Block::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect();
    let input_tokens = request.messages.iter().map(|m| text_of(m).len() as u64 / 4).sum::<u64>() + 60;
    let response = match turn.steps.get(step) {
        Some(Step::Call(preface, calls)) => {
            let mut r = ScriptedResponse::new().text(0, preface);
            for (i, (name, args)) in calls.iter().enumerate() {
                let args = args(&outputs);
                let (a, b) = args.split_at(args.len() / 2);
                let id = format!("call_{}_{}_{i}", turn_index(turn), step + 1);
                r = r.tool_call(i as u32 + 1, &id, name, &[a, b]);
            }
            r
        }
        Some(Step::Answer(answer)) => {
            let text = answer(&outputs);
            let (a, b) =
                text.split_at(text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i));
            ScriptedResponse::new().text(0, a).text(0, b)
        }
        None => ScriptedResponse::new().text(0, "That is all for this question."),
    };
    response.usage(input_tokens, 40)
}

fn turn_index(turn: &DemoTurn) -> usize {
    TURNS.iter().position(|t| std::ptr::eq(t, turn)).map_or(0, |i| i + 1)
}

/// The summary the model writes when the compaction plugin asks.
fn summarize(request: &ModelRequest) -> ScriptedResponse {
    let mut lines = vec!["Summary of the conversation so far:".to_owned()];
    for m in &request.messages {
        match (&m.source, m.role) {
            (Source::User, _) => lines.push(format!("- The user asked: {}", text_of(m))),
            (Source::Plugin { .. }, _) if m.id != "compaction-request" => {
                lines.push(format!("- Earlier: {}", text_of(m).replace('\n', " ")))
            }
            (_, Role::Assistant)
                if !text_of(m).is_empty() && m.content.iter().all(|b| matches!(b, Block::Text { .. })) =>
            {
                lines.push(format!("- The assistant answered: {}", text_of(m)))
            }
            _ => {}
        }
    }
    let text = lines.join("\n");
    ScriptedResponse::new().text(0, &text).usage(text.len() as u64, text.len() as u64 / 4)
}
