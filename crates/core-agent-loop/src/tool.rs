//! Tools the model can call: the [`Tool`] trait, the [`ToolContext`] a call
//! runs with, the [`ToolError`] it may fail with, and the [`ToolRegistry`].
//!
//! A tool receives the raw argument string the model produced (it is logged
//! verbatim in `tool/call`) and returns content blocks, which become the
//! `tool-result` block of its `tool/result`. A failure becomes an error
//! `tool/result` (`isError: true`, `data.error {name, code}`) and the turn
//! goes on: the model sees the error and may try again.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use palimpsest_core_session::payload::Block;
use tokio_util::sync::CancellationToken;

use crate::provider::{BoxFuture, ToolSpec};

/// What a tool call runs with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// The session the call belongs to.
    pub session_id: String,
    /// The turn number.
    pub turn: u64,
    /// The step number inside the turn.
    pub step: u64,
    /// The call id the model gave.
    pub call_id: String,
    /// Cancelled when the turn is cancelled. The loop stops polling a
    /// cancelled call and answers it with a `CANCELLED` error result, so a
    /// tool only needs to watch this token to stop side work it spawned.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// A context for calling a tool outside the loop (tests, direct use).
    pub fn new(session_id: impl Into<String>, call_id: impl Into<String>) -> ToolContext {
        ToolContext {
            session_id: session_id.into(),
            turn: 0,
            step: 0,
            call_id: call_id.into(),
            cancel: CancellationToken::new(),
        }
    }
}

/// A tool failed. It becomes an error `tool/result`: `message` is its text
/// content, `name` and `code` go into `data.error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} ({code}): {message}")]
#[non_exhaustive]
pub struct ToolError {
    /// Error name, e.g. `InvalidArguments`.
    pub name: String,
    /// Stable code, e.g. `INVALID_ARGUMENTS`.
    pub code: String,
    /// What went wrong, for the model.
    pub message: String,
}

impl ToolError {
    /// A tool error with its own name and code.
    pub fn new(name: impl Into<String>, code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError { name: name.into(), code: code.into(), message: message.into() }
    }

    /// `InvalidArguments` / `INVALID_ARGUMENTS`: the model's arguments did not parse or fit the schema.
    pub fn invalid_arguments(message: impl Into<String>) -> ToolError {
        ToolError::new("InvalidArguments", "INVALID_ARGUMENTS", message)
    }

    /// `ToolFailed` / `TOOL_FAILED`: the tool ran and failed.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError::new("ToolFailed", "TOOL_FAILED", message)
    }
}

/// Something the model can call.
///
/// Object-safe: the registry holds `Arc<dyn Tool>`. For a tool made of a
/// closure, see [`FnTool`]. `Debug`, like `Provider` and `SessionStore`, so
/// that a loop, a registry and an error can show what they hold.
pub trait Tool: Send + Sync + fmt::Debug {
    /// The name the model calls it by. Unique within a registry.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON Schema of its arguments.
    fn parameters(&self) -> serde_json::Value;

    /// Whether calls to it may run at the same time as other calls of the
    /// same step (reads, pure computation). A tool that is not concurrent
    /// runs alone: the calls before it finish first, the calls after it
    /// start after it. Defaults to `false`, the safe choice for tools with
    /// side effects.
    fn concurrent(&self) -> bool {
        false
    }

    /// Runs one call. `arguments` is the raw string the model produced.
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>>;
}

/// A [`Tool`] made of a name, a description, a schema and an async closure.
///
/// ```
/// use palimpsest_core_agent_loop::{FnTool, ToolContext, ToolError, Tool};
/// use palimpsest_core_session::payload::Block;
///
/// let echo = FnTool::new("echo", "Repeats its arguments.", serde_json::json!({"type": "object"}),
///     |args: String, _ctx: ToolContext| async move { Ok::<_, ToolError>(vec![Block::text(args)]) })
///     .with_concurrent(true);
/// assert_eq!(echo.name(), "echo");
/// assert!(echo.concurrent());
/// ```
pub struct FnTool<F> {
    name: String,
    description: String,
    parameters: serde_json::Value,
    concurrent: bool,
    run: F,
}

impl<F> FnTool<F> {
    /// A tool calling `run(arguments, ctx)`; not concurrent.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
        run: F,
    ) -> FnTool<F> {
        FnTool { name: name.into(), description: description.into(), parameters, concurrent: false, run }
    }

    /// Sets whether calls may run alongside others (see [`Tool::concurrent`]).
    pub fn with_concurrent(mut self, concurrent: bool) -> FnTool<F> {
        self.concurrent = concurrent;
        self
    }
}

impl<F> fmt::Debug for FnTool<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool").field("name", &self.name).field("concurrent", &self.concurrent).finish()
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(String, ToolContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Vec<Block>, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> serde_json::Value {
        self.parameters.clone()
    }

    fn concurrent(&self) -> bool {
        self.concurrent
    }

    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin((self.run)(arguments.to_owned(), ctx))
    }
}

/// The tools of a loop, by name, in registration order (the order the model
/// sees them in).
///
/// ```
/// use palimpsest_core_agent_loop::{FnTool, ToolRegistry, ToolContext, ToolError};
///
/// let noop = |name: &str| FnTool::new(name, "does nothing", serde_json::json!({}),
///     |_args: String, _ctx: ToolContext| async { Ok::<_, ToolError>(vec![]) });
/// let registry = ToolRegistry::new().with(noop("b")).with(noop("a"));
/// assert_eq!(registry.names().collect::<Vec<_>>(), ["b", "a"]);
/// assert!(registry.get("a").is_some());
/// ```
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds `tool` (builder form of [`insert`](ToolRegistry::insert)).
    pub fn with(mut self, tool: impl Tool + 'static) -> ToolRegistry {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds `tool`. A tool of the same name is replaced in place (keeping
    /// its position) and returned.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) -> Option<Arc<dyn Tool>> {
        match self.tools.iter().position(|t| t.name() == tool.name()) {
            Some(i) => Some(std::mem::replace(&mut self.tools[i], tool)),
            None => {
                self.tools.push(tool);
                None
            }
        }
    }

    /// Removes the tool called `name`.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        let i = self.tools.iter().position(|t| t.name() == name)?;
        Some(self.tools.remove(i))
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The tool names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }

    /// The specs sent to the model, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &'static str, text: &'static str) -> impl Tool {
        FnTool::new(
            name,
            "test",
            serde_json::json!({"type": "object"}),
            move |_a: String, _c: ToolContext| async move { Ok::<_, ToolError>(vec![Block::text(text)]) },
        )
    }

    #[tokio::test]
    async fn insert_replaces_in_place_and_specs_keep_order() {
        let mut r = ToolRegistry::new().with(tool("a", "1")).with(tool("b", "2"));
        let old = r.insert(Arc::new(tool("a", "3")));
        assert_eq!(old.map(|t| t.name().to_owned()).as_deref(), Some("a"));
        assert_eq!(r.names().collect::<Vec<_>>(), ["a", "b"]);
        let specs = r.specs();
        assert_eq!(specs[1].name, "b");
        assert_eq!(specs[0].parameters, serde_json::json!({"type": "object"}));
        let Some(a) = r.get("a").cloned() else { panic!("tool a is registered") };
        assert_eq!(a.execute("{}", ToolContext::new("s", "c")).await, Ok(vec![Block::text("3")]));
        assert!(r.remove("a").is_some());
        assert_eq!(r.len(), 1);
        assert!(r.remove("zzz").is_none());
    }

    #[test]
    fn tool_error_constructors_have_stable_codes() {
        assert_eq!(ToolError::invalid_arguments("x").code, "INVALID_ARGUMENTS");
        assert_eq!(ToolError::failed("x").name, "ToolFailed");
        assert_eq!(ToolError::new("N", "C", "m").to_string(), "N (C): m");
    }
}
