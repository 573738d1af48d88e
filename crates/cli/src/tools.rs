//! Real tools over a sandboxed workspace directory, for `demo` (and `run`):
//! `list_files`, `read_file`, `write_file` and `calculator`.
//!
//! Paths are relative to the workspace root; absolute paths, `..`, and
//! anything that resolves outside the root (a symlink included) are refused
//! with `INVALID_ARGUMENTS`, so the model cannot touch the rest of the disk.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use palimpsest_core_agent_loop::{BoxFuture, Tool, ToolContext, ToolError, ToolRegistry};
use palimpsest_core_session::payload::Block;
use serde_json::{json, Value};

/// Files larger than this are not read whole.
const MAX_READ_BYTES: u64 = 256 * 1024;

/// The four tools, confined to `root`. Each call first waits `pace` (the
/// demo slows down so a person can follow; zero elsewhere).
pub(crate) fn sandbox_tools(root: &Path, pace: Duration) -> ToolRegistry {
    let root: Arc<Path> = Arc::from(root);
    ToolRegistry::new()
        .with(Paced(pace, ListFiles(root.clone())))
        .with(Paced(pace, ReadFile(root.clone())))
        .with(Paced(pace, WriteFile(root)))
        .with(Paced(pace, Calculator))
}

/// A tool that waits before it runs.
struct Paced<T>(Duration, T);

impl<T: Tool> Tool for Paced<T> {
    fn name(&self) -> &str {
        self.1.name()
    }
    fn description(&self) -> &str {
        self.1.description()
    }
    fn parameters(&self) -> Value {
        self.1.parameters()
    }
    fn concurrent(&self) -> bool {
        self.1.concurrent()
    }
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            if !self.0.is_zero() {
                tokio::time::sleep(self.0).await;
            }
            self.1.execute(arguments, ctx).await
        })
    }
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

/// Resolves a relative path inside `root`, refusing escapes.
fn inside(root: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let rel = Path::new(relative);
    if relative.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(ToolError::invalid_arguments(format!(
            "{relative:?} is not a plain relative path inside the workspace"
        )));
    }
    let path = root.join(rel);
    // A symlink (or a symlinked parent) must not lead out of the root.
    let root_real = root.canonicalize().map_err(|e| ToolError::failed(format!("workspace: {e}")))?;
    let mut probe = path.clone();
    while !probe.exists() {
        match probe.parent() {
            Some(p) => probe = p.to_path_buf(),
            None => break,
        }
    }
    let real = probe.canonicalize().map_err(|e| ToolError::failed(format!("{relative}: {e}")))?;
    if !real.starts_with(&root_real) {
        return Err(ToolError::invalid_arguments(format!("{relative:?} leads outside the workspace")));
    }
    Ok(path)
}

struct ListFiles(Arc<Path>);

impl Tool for ListFiles {
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
    fn execute<'a>(
        &'a self,
        _arguments: &'a str,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            let mut files = Vec::new();
            let mut dirs = vec![self.0.to_path_buf()];
            while let Some(dir) = dirs.pop() {
                let entries =
                    std::fs::read_dir(&dir).map_err(|e| ToolError::failed(format!("listing: {e}")))?;
                for entry in entries.flatten() {
                    let path = entry.path();
                    let meta = entry.metadata().map_err(|e| ToolError::failed(format!("listing: {e}")))?;
                    if meta.is_dir() {
                        dirs.push(path);
                    } else if let Ok(rel) = path.strip_prefix(&*self.0) {
                        files.push((rel.display().to_string(), meta.len()));
                    }
                }
            }
            files.sort();
            let text = files.iter().map(|(p, n)| format!("{p} ({n} bytes)")).collect::<Vec<_>>().join("\n");
            Ok(vec![Block::text(if text.is_empty() { "(no files)".into() } else { text })])
        })
    }
}

struct ReadFile(Arc<Path>);

impl Tool for ReadFile {
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
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            let args = args(arguments)?;
            let rel = string_arg(&args, "path")?;
            let path = inside(&self.0, rel)?;
            let meta = std::fs::metadata(&path).map_err(|e| ToolError::failed(format!("{rel}: {e}")))?;
            if meta.len() > MAX_READ_BYTES {
                return Err(ToolError::failed(format!(
                    "{rel} is {} bytes; the limit is {MAX_READ_BYTES}",
                    meta.len()
                )));
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| ToolError::failed(format!("{rel}: {e}")))?;
            Ok(vec![Block::text(text)])
        })
    }
}

struct WriteFile(Arc<Path>);

impl Tool for WriteFile {
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
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            let args = args(arguments)?;
            let rel = string_arg(&args, "path")?;
            let content = string_arg(&args, "content")?;
            let path = inside(&self.0, rel)?;
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| ToolError::failed(format!("{rel}: {e}")))?;
            }
            std::fs::write(&path, content).map_err(|e| ToolError::failed(format!("{rel}: {e}")))?;
            Ok(vec![Block::text(format!("wrote {} bytes to {rel}", content.len()))])
        })
    }
}

struct Calculator;

impl Tool for Calculator {
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
    fn execute<'a>(
        &'a self,
        arguments: &'a str,
        _ctx: ToolContext,
    ) -> BoxFuture<'a, Result<Vec<Block>, ToolError>> {
        Box::pin(async move {
            let args = args(arguments)?;
            let expr = string_arg(&args, "expression")?;
            let value = evaluate(expr).map_err(ToolError::invalid_arguments)?;
            Ok(vec![Block::text(format_number(value))])
        })
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
    use super::*;

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

    #[test]
    fn paths_cannot_leave_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        assert!(inside(dir.path(), "a.txt").is_ok());
        assert!(inside(dir.path(), "new/b.txt").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "./a.txt"] {
            assert!(inside(dir.path(), bad).is_err(), "{bad:?} was accepted");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", dir.path().join("escape")).unwrap();
            assert!(inside(dir.path(), "escape/passwd").is_err());
        }
    }
}
