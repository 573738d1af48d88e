//! Real tools over a sandboxed workspace directory, for `demo` and `run
//! --tools`: `list_files`, `read_file`, `write_file` and `calculator`.
//!
//! The file tools go through a [`Workspace`]: one directory handle that
//! resolves every path beneath the root, so no path, link or race leads
//! outside it, and only regular files are read or written (see
//! [`workspace`] for what is protected and what is not).
//!
//! Every tool runs on tokio's blocking pool ([`OffThread`]), never on the
//! loop's task: a slow disk, or anything else that blocks, leaves the loop
//! free to notice a cancelled turn. Cancelling drops the wait; the thread
//! is abandoned and its result discarded (the loop has already answered the
//! call with a `CANCELLED` error).
//!
//! Caps count bytes, not what metadata says:
//!
//! | what | cap | past it |
//! |---|---|---|
//! | a tool result (all its blocks, as logged) | [`MAX_RESULT_BYTES`] | the call ends with a `TOO_LARGE` error |
//! | every result of one turn together | [`MAX_TURN_RESULT_BYTES`] | each later call ends with a `TOO_LARGE` error |
//! | a file `read_file` reads | [`MAX_READ_BYTES`] bytes read | `TOO_LARGE`, nothing returned |
//! | `list_files` | [`LIST_LIMITS`]: entries looked at, bytes of text, depth | the listing stops, saying so in its last line |

mod workspace;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::{
    codes, BoxFuture, CancellationToken, Tool, ToolContext, ToolError, ToolRegistry,
};
use palimpsest_core_session::payload::Block;
use serde_json::{json, Value};

pub(crate) use workspace::Workspace;
use workspace::{too_large, ListLimits};

/// The largest tool result, in bytes of its logged blocks (JSON).
pub(crate) const MAX_RESULT_BYTES: usize = 256 * 1024;

/// The most `read_file` reads; a larger file is refused, not cut.
pub(crate) const MAX_READ_BYTES: u64 = 192 * 1024;

/// Where `list_files` stops.
pub(crate) const LIST_LIMITS: ListLimits = ListLimits { visited: 100_000, bytes: 128 * 1024, depth: 32 };

/// The four tools, confined to `root` and kept off `store` (the session
/// store's files, where they lie inside `root`). Each call first waits
/// `pace` (the demo slows down so a person can follow; zero elsewhere).
pub(crate) fn sandbox_tools(
    root: &Path,
    pace: Duration,
    store: &[std::path::PathBuf],
) -> std::io::Result<ToolRegistry> {
    let workspace = Arc::new(Workspace::open_protecting(root, store)?);
    let budget = Arc::new(TurnBudget::default());
    Ok(ToolRegistry::new()
        .with(OffThread::new(pace, ListFiles(Arc::clone(&workspace)), &budget))
        .with(OffThread::new(pace, ReadFile(Arc::clone(&workspace)), &budget))
        .with(OffThread::new(pace, WriteFile(workspace), &budget))
        .with(OffThread::new(pace, Calculator, &budget)))
}

/// A tool whose work is plain blocking code.
pub(crate) trait BlockingTool: Send + Sync + 'static {
    /// See [`Tool::name`].
    fn name(&self) -> &str;
    /// See [`Tool::description`].
    fn description(&self) -> &str;
    /// See [`Tool::parameters`].
    fn parameters(&self) -> Value;
    /// See [`Tool::concurrent`].
    fn concurrent(&self) -> bool {
        false
    }
    /// Runs one call, on a blocking thread. `cancel` is the turn's: a tool
    /// with side effects checks it before committing them.
    fn call(&self, arguments: &str, cancel: &CancellationToken) -> Result<Vec<Block>, ToolError>;
}

/// The most bytes of results the tools return in one turn, all calls
/// together: 16 MiB. 64 calls a step of a 190 KB file, for 32 steps, wrote
/// a log of 392 MB in one turn; past this budget a call is answered with
/// a short `TOO_LARGE` error instead of its result.
pub(crate) const MAX_TURN_RESULT_BYTES: usize = 16 << 20;

/// What the tools have returned in one turn, shared by every tool of a
/// registry: `(session, turn)` and the bytes of their results.
#[derive(Debug, Default)]
pub(crate) struct TurnBudget(std::sync::Mutex<Option<((String, u64), usize)>>);

impl TurnBudget {
    /// Counts a result of `size` bytes in the turn of `ctx`, or refuses it
    /// when the turn's results would pass [`MAX_TURN_RESULT_BYTES`].
    fn spend(&self, ctx: &ToolContext, size: usize) -> Result<(), ToolError> {
        let mut used = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let turn = (ctx.session_id.clone(), ctx.turn);
        let spent = match used.as_mut() {
            Some((t, spent)) if *t == turn => spent,
            _ => &mut used.insert((turn, 0)).1,
        };
        if spent.saturating_add(size) > MAX_TURN_RESULT_BYTES {
            return Err(too_large(format!(
                "this turn's tool results reached the {MAX_TURN_RESULT_BYTES}-byte limit for one turn; this result ({size} bytes) was dropped"
            )));
        }
        *spent += size;
        Ok(())
    }
}

/// A [`BlockingTool`] as a [`Tool`]: waits `pace`, runs the call on the
/// blocking pool, and refuses a result past [`MAX_RESULT_BYTES`], or past
/// what is left of the turn's [`TurnBudget`].
pub(crate) struct OffThread<T> {
    pace: Duration,
    tool: Arc<T>,
    budget: Arc<TurnBudget>,
}

impl<T> OffThread<T> {
    pub(crate) fn new(pace: Duration, tool: T, budget: &Arc<TurnBudget>) -> OffThread<T> {
        OffThread { pace, tool: Arc::new(tool), budget: Arc::clone(budget) }
    }
}

impl<T: BlockingTool> std::fmt::Debug for OffThread<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffThread").field("tool", &self.tool.name()).field("pace", &self.pace).finish()
    }
}

impl<T: BlockingTool> Tool for OffThread<T> {
    fn name(&self) -> &str {
        self.tool.name()
    }
    fn description(&self) -> &str {
        self.tool.description()
    }
    fn parameters(&self) -> Value {
        self.tool.parameters()
    }
    fn concurrent(&self) -> bool {
        self.tool.concurrent()
    }
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            if !self.pace.is_zero() {
                tokio::time::sleep(self.pace).await;
            }
            let tool = Arc::clone(&self.tool);
            let arguments = arguments.to_owned();
            let cancel = ctx.cancel.clone();
            // Dropping this future (a cancelled turn) detaches the thread.
            let blocks = tokio::task::spawn_blocking(move || tool.call(&arguments, &cancel)).await.map_err(
                |e| {
                    let what =
                        if e.is_panic() { "the tool panicked" } else { "the tool's thread was stopped" };
                    ToolError::new("ToolPanicked", codes::TOOL_PANICKED, what)
                },
            )??;
            let (blocks, size) = capped(blocks)?;
            self.budget.spend(&ctx, size)?;
            Ok(blocks)
        })
    }
}

/// `blocks` and their size as logged, or a `TOO_LARGE` error when they are
/// past [`MAX_RESULT_BYTES`].
fn capped(blocks: Vec<Block>) -> Result<(Vec<Block>, usize), ToolError> {
    let size = serde_json::to_vec(&blocks).map_or(usize::MAX, |json| json.len());
    if size > MAX_RESULT_BYTES {
        return Err(too_large(format!(
            "the result is {size} bytes, more than the {MAX_RESULT_BYTES}-byte limit for a tool result; it was dropped"
        )));
    }
    Ok((blocks, size))
}

fn args(raw: &str) -> Result<Value, ToolError> {
    serde_json::from_str(raw)
        .map_err(|e| ToolError::invalid_arguments(format!("arguments are not JSON: {e}")))
}

fn string_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid_arguments(format!("`{key}` must be a string")))
}

struct ListFiles(Arc<Workspace>);

impl BlockingTool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }
    fn description(&self) -> &str {
        "Lists the files of the workspace with their sizes in bytes."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn concurrent(&self) -> bool {
        true
    }
    fn call(&self, _arguments: &str, _cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
        Ok(vec![Block::text(self.0.list(LIST_LIMITS)?)])
    }
}

struct ReadFile(Arc<Workspace>);

impl BlockingTool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Reads a UTF-8 text file of the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    fn concurrent(&self) -> bool {
        true
    }
    fn call(&self, arguments: &str, _cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
        let args = args(arguments)?;
        let rel = string_arg(&args, "path")?;
        Ok(vec![Block::text(self.0.read_text(rel, MAX_READ_BYTES)?)])
    }
}

struct WriteFile(Arc<Workspace>);

impl BlockingTool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Writes a UTF-8 text file in the workspace, replacing it if it exists."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
               "required": ["path", "content"]})
    }
    fn call(&self, arguments: &str, cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
        let args = args(arguments)?;
        let rel = string_arg(&args, "path")?;
        let content = string_arg(&args, "content")?;
        self.0.write_text(rel, content, cancel)?;
        Ok(vec![Block::text(format!("wrote {} bytes to {rel}", content.len()))])
    }
}

struct Calculator;

impl BlockingTool for Calculator {
    fn name(&self) -> &str {
        "calculator"
    }
    fn description(&self) -> &str {
        "Evaluates an arithmetic expression: numbers, + - * /, parentheses."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]})
    }
    fn concurrent(&self) -> bool {
        true
    }
    fn call(&self, arguments: &str, _cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
        let args = args(arguments)?;
        let expr = string_arg(&args, "expression")?;
        let value = evaluate(expr).map_err(ToolError::invalid_arguments)?;
        Ok(vec![Block::text(format_number(value))])
    }
}

fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Evaluates `expr` by recursive descent; nesting is bounded.
pub(crate) fn evaluate(expr: &str) -> Result<f64, String> {
    let mut p = Parser { s: expr.as_bytes(), i: 0, depth: 0 };
    let v = p.sum()?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected {:?} at position {}", char::from(p.s[p.i]), p.i));
    }
    if !v.is_finite() {
        return Err("the result is not a finite number (division by zero?)".into());
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut v = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.product()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut v = self.unary()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.unary()?;
            v = if op == b'*' { v * r } else { v / r };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > 64 {
            return Err("the expression is nested too deeply".into());
        }
        let v = match self.peek() {
            Some(b'-') => {
                self.i += 1;
                -self.unary()?
            }
            Some(b'(') => {
                self.i += 1;
                let v = self.sum()?;
                if self.peek() != Some(b')') {
                    return Err(format!("expected `)` at position {}", self.i));
                }
                self.i += 1;
                v
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(|c| c.is_ascii_digit() || *c == b'.') {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default();
                text.parse::<f64>().map_err(|_| format!("{text:?} is not a number"))?
            }
            Some(c) => return Err(format!("unexpected {:?} at position {}", char::from(c), self.i)),
            None => return Err("the expression ends too soon".into()),
        };
        self.depth -= 1;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use palimpsest_core_agent_loop::{
        AgentLoop, FinishReason, ScriptedProvider, ScriptedResponse, TurnInput,
    };
    use palimpsest_core_session::payload::TurnEndReason;
    use palimpsest_persistence::{MemoryStore, SessionStore};
    use serde_json::Value;

    use super::*;

    /// A tool that blocks its thread until `release` is dropped or sent to,
    /// saying on `started` that it is in.
    struct Stuck {
        started: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
        release: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl BlockingTool for Stuck {
        fn name(&self) -> &str {
            "stuck"
        }
        fn description(&self) -> &str {
            "Blocks like a read from a FIFO nobody writes to."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn call(&self, _arguments: &str, _cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
            if let Some(started) = self.started.lock().unwrap().take() {
                let _ = started.send(());
            }
            // Deliberately ignores `cancel`: only the release ends this.
            let _ = self.release.lock().unwrap().recv();
            Ok(vec![Block::text("too late")])
        }
    }

    /// The log's events as JSON objects.
    fn events(store: &dyn SessionStore, id: &str) -> Vec<Value> {
        let stored = store.load(id).unwrap();
        stored.events.iter().map(|e| serde_json::from_str(&e.to_json()).unwrap()).collect()
    }

    #[tokio::test]
    async fn a_cancelled_turn_ends_while_a_tool_is_stuck_in_blocking_work_and_the_log_is_valid() {
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let stuck = Stuck { started: Mutex::new(Some(started_tx)), release: Mutex::new(release_rx) };
        let provider = Arc::new(ScriptedProvider::new([ScriptedResponse::new()
            .tool_call(0, "call-1", "stuck", &["{}"])
            .finish(FinishReason::ToolCalls)]));
        let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::default());
        let mut agent = AgentLoop::builder(provider)
            .tools(ToolRegistry::new().with(OffThread::new(Duration::ZERO, stuck, &Arc::default())))
            .create(Arc::clone(&store), "s1")
            .unwrap();
        let cancel = CancellationToken::new();
        let canceller = cancel.clone();
        tokio::spawn(async move {
            // The loop's task stays free while the tool blocks, so this runs.
            if started.await.is_ok() {
                canceller.cancel();
            }
        });
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            agent.run_turn(TurnInput::text("go").with_cancel(cancel)),
        )
        .await
        .expect("the cancelled turn ended while the tool was still blocked")
        .unwrap();
        assert_eq!(outcome.reason, TurnEndReason::Aborted { reason: codes::ABORT_REASON.into() });

        let log = events(&*store, "s1");
        let result = log.iter().find(|e| e["type"] == "tool/result").expect("the call is answered");
        assert_eq!(result["data"]["error"]["code"], codes::CANCELLED, "{result}");
        assert_eq!(log.last().unwrap()["type"], "turn/end");
        let stored = store.load("s1").unwrap();
        assert!(palimpsest_invariants::check_log(&stored.events).is_empty());
        palimpsest_core_session::Session::from_log(stored.header, stored.events).unwrap();
        drop(release); // frees the abandoned thread, so the test's runtime can shut down
    }

    /// Returns a text of `len` bytes.
    struct Big(usize);

    impl BlockingTool for Big {
        fn name(&self) -> &str {
            "big"
        }
        fn description(&self) -> &str {
            "Returns a large text."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn call(&self, _arguments: &str, _cancel: &CancellationToken) -> Result<Vec<Block>, ToolError> {
            Ok(vec![Block::text("x".repeat(self.0))])
        }
    }

    #[tokio::test]
    async fn a_result_past_the_cap_ends_the_call_with_too_large() {
        let ctx = || ToolContext::new("s", "c");
        let fits = OffThread::new(Duration::ZERO, Big(MAX_RESULT_BYTES - 100), &Arc::default());
        assert_eq!(
            fits.execute("{}", ctx()).await.unwrap()[0],
            Block::text("x".repeat(MAX_RESULT_BYTES - 100))
        );
        let over = OffThread::new(Duration::ZERO, Big(MAX_RESULT_BYTES), &Arc::default());
        let e = over.execute("{}", ctx()).await.unwrap_err();
        assert_eq!(e.code, workspace::TOO_LARGE, "{e}");
        assert!(e.message.contains("more than the 262144-byte limit for a tool result"), "{e}");
    }

    #[tokio::test]
    async fn the_sandbox_tools_refuse_a_fifo_through_the_tool_interface() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
        #[cfg(unix)]
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("pipe"),
            rustix::fs::FileType::Fifo,
            0o600.into(),
            0,
        )
        .unwrap();
        let tools = sandbox_tools(dir.path(), Duration::ZERO, &[]).unwrap();
        let call = |name: &str, args: &str| {
            let tool = Arc::clone(tools.get(name).unwrap());
            let args = args.to_owned();
            async move { tool.execute(&args, ToolContext::new("s", "c")).await }
        };
        assert_eq!(call("read_file", r#"{"path": "a.txt"}"#).await.unwrap(), vec![Block::text("hello")]);
        #[cfg(unix)]
        {
            let e = call("read_file", r#"{"path": "pipe"}"#).await.unwrap_err();
            assert_eq!(
                (e.code.as_str(), e.message.as_str()),
                (
                    "INVALID_ARGUMENTS",
                    "pipe is a FIFO (named pipe), not a regular file; only regular files are read or written"
                )
            );
        }
        let listing = call("list_files", "{}").await.unwrap();
        assert!(
            matches!(&listing[0], Block::Text { text } if text.starts_with("a.txt (5 bytes)\n")),
            "{listing:?}"
        );
        assert_eq!(call("calculator", r#"{"expression": "6 * 7"}"#).await.unwrap(), vec![Block::text("42")]);
    }

    /// `--tools .` with the default `./palimpsest.db`: the model could
    /// read its own log or replace the store. The store's files (and a
    /// link to them inside the workspace) are refused by name and by what
    /// they are, and listed without their sizes.
    #[tokio::test]
    async fn the_tools_never_read_or_write_the_session_store() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("palimpsest.db"), "the store").unwrap();
        std::fs::write(ws.join("palimpsest.db-wal"), "its wal").unwrap();
        std::fs::create_dir(ws.join("logs")).unwrap();
        std::fs::write(ws.join("logs/s.jsonl"), "a session").unwrap();
        std::fs::write(ws.join("notes.txt"), "mine").unwrap();
        // A second store, opened through a link: SQLite names its `-wal`
        // after the file the link points to.
        std::fs::write(ws.join("real.db"), "another store").unwrap();
        std::fs::write(ws.join("real.db-wal"), "its wal").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            symlink("palimpsest.db", ws.join("alias")).unwrap();
            symlink("logs", ws.join("lnk")).unwrap();
            symlink(".", ws.join("self")).unwrap();
            symlink("real.db", ws.join("link.db")).unwrap();
            std::fs::hard_link(ws.join("palimpsest.db"), ws.join("hl")).unwrap();
        }
        let mut protected = crate::location::Location::Sqlite(ws.join("palimpsest.db")).files();
        protected.push(ws.join("logs"));
        if cfg!(unix) {
            protected.extend(crate::location::Location::Sqlite(ws.join("link.db")).files());
        }
        let tools = sandbox_tools(ws, Duration::ZERO, &protected).unwrap();
        let call = |name: &str, args: String| {
            let tool = Arc::clone(tools.get(name).unwrap());
            async move { tool.execute(&args, ToolContext::new("s", "c")).await }
        };
        let mut refused =
            vec!["palimpsest.db", "palimpsest.db-wal", "palimpsest.db-shm", "logs/s.jsonl", "logs/new.jsonl"];
        if cfg!(unix) {
            // Around the spelling: a link to the database, a link to the
            // store directory, a link to the root for files not made yet,
            // and the files of a store opened through a link.
            refused.extend([
                "alias",
                "lnk/s.jsonl",
                "lnk/new.jsonl",
                "self/palimpsest.db-journal",
                "self/logs/s.jsonl",
                "real.db",
                "real.db-wal",
                "self/real.db-shm",
            ]);
        }
        for path in refused {
            let read = call("read_file", format!(r#"{{"path": "{path}"}}"#)).await;
            let write = call("write_file", format!(r#"{{"path": "{path}", "content": "gone"}}"#)).await;
            for (e, how) in [(read.unwrap_err(), "read"), (write.unwrap_err(), "write")] {
                assert_eq!(e.code, "INVALID_ARGUMENTS", "{path}: {e:?}");
                assert!(e.message.contains("session store"), "{path} ({how}): {}", e.message);
            }
        }
        assert_eq!(std::fs::read_to_string(ws.join("palimpsest.db")).unwrap(), "the store");
        for made in ["palimpsest.db-shm", "palimpsest.db-journal", "logs/new.jsonl", "real.db-shm"] {
            assert!(!ws.join(made).exists(), "{made} was made");
        }
        assert_eq!(std::fs::read_to_string(ws.join("real.db-wal")).unwrap(), "its wal");
        assert_eq!(
            call("read_file", r#"{"path": "notes.txt"}"#.into()).await.unwrap(),
            vec![Block::text("mine")]
        );
        let listing = call("list_files", "{}".into()).await.unwrap();
        let Block::Text { text } = &listing[0] else { panic!("{listing:?}") };
        assert!(text.contains("palimpsest.db (the session store: the tools do not open it)"), "{text}");
        assert!(text.contains("logs (the session store: the tools do not open it)"), "{text}");
        assert!(!text.contains("s.jsonl"), "{text}");
        if cfg!(unix) {
            // A hard link to the database is the database: no size shown.
            assert!(text.contains("hl (the session store: the tools do not open it)"), "{text}");
            assert!(text.contains("real.db-wal (the session store"), "{text}");
        }
    }

    /// The turn's results together are capped: past the budget a result
    /// is refused; the next turn (or another session) starts afresh.
    #[test]
    fn a_turns_results_share_one_budget() {
        let budget = TurnBudget::default();
        let mut ctx = ToolContext::new("s", "c");
        ctx.turn = 1;
        let half = MAX_TURN_RESULT_BYTES / 2;
        assert!(budget.spend(&ctx, half).is_ok());
        assert!(budget.spend(&ctx, half).is_ok());
        let refused = budget.spend(&ctx, 1).unwrap_err();
        assert_eq!(refused.code, "TOO_LARGE");
        assert!(refused.message.contains("this turn's tool results"), "{}", refused.message);
        ctx.turn = 2;
        assert!(budget.spend(&ctx, half).is_ok(), "a new turn has its whole budget");
        let other = ToolContext::new("t", "c");
        assert!(budget.spend(&other, half).is_ok(), "so has another session");
    }

    #[test]
    fn the_calculator_follows_precedence_and_refuses_garbage() {
        assert_eq!(evaluate("1 + 2 * 3").unwrap(), 7.0);
        assert_eq!(evaluate("(1 + 2) * 3").unwrap(), 9.0);
        assert_eq!(evaluate("-4 / 2 - -1").unwrap(), -1.0);
        assert_eq!(evaluate("120.50 + 80 + 45.25").unwrap(), 245.75);
        assert!(evaluate("1 / 0").is_err());
        assert!(evaluate("2 +").is_err());
        assert!(evaluate("2 ) 3").is_err());
        assert!(evaluate("rm -rf /").is_err());
        assert!(evaluate(&"(".repeat(10_000)).is_err());
        assert_eq!(format_number(245.75), "245.75");
        assert_eq!(format_number(7.0), "7");
    }
}
