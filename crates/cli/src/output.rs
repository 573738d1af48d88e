//! Where output goes: results on stdout (written by the commands), errors,
//! warnings and notes on stderr, one line each.

use std::io::{self, IsTerminal, Write};

/// Writes one `error[<code>]: ...` line to stderr.
pub(crate) fn error_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Writes a `warning: ...` line to stderr: something worth knowing that does
/// not change the exit code.
pub(crate) fn warning(message: &str) {
    let _ = writeln!(io::stderr().lock(), "warning: {message}");
}

/// Writes a `note: ...` line to stderr: what the command did besides its output.
pub(crate) fn note(message: &str) {
    let _ = writeln!(io::stderr().lock(), "note: {message}");
}

/// Whether `--color auto` means colour: stdout is a terminal and `NO_COLOR`
/// is unset or empty.
pub(crate) fn stdout_wants_color() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && io::stdout().is_terminal()
}

/// Writes a JSON array with one element a line, each given as ready JSON
/// text (e.g. a message exactly as logged): easy to read, grep and diff,
/// and still one JSON value. An empty array is `[]`.
pub(crate) fn json_lines_array<I, S>(out: &mut dyn Write, items: I) -> io::Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut first = true;
    for item in items {
        out.write_all(if first { b"[\n  " } else { b",\n  " })?;
        out.write_all(item.as_ref().as_bytes())?;
        first = false;
    }
    out.write_all(if first { b"[]\n" } else { b"\n]\n" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(items: &[&str]) -> String {
        let mut buf = Vec::new();
        json_lines_array(&mut buf, items).unwrap_or_default();
        String::from_utf8(buf).unwrap_or_default()
    }

    #[test]
    fn json_lines_arrays_are_json() {
        assert_eq!(render(&[]), "[]\n");
        assert_eq!(render(&["1"]), "[\n  1\n]\n");
        let text = render(&[r#"{"a":1}"#, "[2]"]);
        assert_eq!(text, "[\n  {\"a\":1},\n  [2]\n]\n");
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(parsed, serde_json::json!([{"a": 1}, [2]]));
    }
}
