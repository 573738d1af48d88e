//! The error-code check: every stable error code a crate can return is
//! documented in `docs/format.md`.
//!
//! # How codes are collected
//!
//! Every `.rs` file under `crates/*/src/` is read as Rust tokens (comments
//! dropped, string literals kept whole), test code is removed (each item
//! after a `#[cfg(test)]` attribute), and a string literal is a code when it
//! stands in one of these places:
//!
//! 1. inside the body of a `fn code(&self)` method (the `code()` of every
//!    error enum: `AppendError`, `LoadError`, `ForkError`, `StoreError`,
//!    `ProviderError`, `LoopError`, `ConfigError`, ...);
//! 2. as the value of a `const NAME: &str` inside a `mod codes { .. }`
//!    module or a `codes.rs` file (the codes modules of core-agent-loop and
//!    invariants);
//! 3. as the value of any other `const NAME: &str` whose name is the value
//!    shouted (`TOOL_NOT_STARTED = "TOOL_NOT_STARTED"`,
//!    `STORE_SEQ_GAP = "store-seq-gap"`) and whose value is more than one
//!    word (has a `-` or `_`): the convention for a code given a name;
//! 4. as the value of a `code: ".."` field (the CLI's `CliError { code, .. }`);
//! 5. as the code argument of a constructor that takes one:
//!    [`CODE_ARGUMENTS`] (`CliError::refused("..", ..)`,
//!    `ProviderError::other("..", ..)`, `PluginError::failed("..", ..)`,
//!    `ToolError::new(name, "..", ..)`).
//!
//! A code is documented when `docs/format.md` holds it between backticks
//! (`` `io` ``), so a short code is not found by accident inside a word.
//! A new code that none of these rules sees is a new way of returning codes:
//! add a rule here when adding it.

use std::path::Path;

use super::Violation;

/// The document every code must appear in.
pub(crate) const FORMAT_DOC: &str = "docs/format.md";

/// Constructors whose argument at the given index (from 0) is a code:
/// (type, associated function, argument index).
pub(crate) const CODE_ARGUMENTS: &[(&str, &str, usize)] = &[
    ("CliError", "refused", 0),
    ("ProviderError", "other", 0),
    ("PluginError", "failed", 0),
    ("ToolError", "new", 1),
];

/// One code and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) code: String,
    pub(crate) path: String,
    pub(crate) line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// A string literal's contents (escapes left as written).
    Str(String),
    /// An identifier or keyword.
    Ident(String),
    /// One punctuation character.
    Punct(char),
    /// A number, a lifetime or a character literal: nothing this check reads.
    Other,
}

/// A token and its 1-based line.
type Token = (Tok, usize);

/// Splits Rust source into tokens, dropping comments and whitespace. Good
/// enough for well-formed source: string, raw string, byte string and
/// character literals are read whole, so braces and quotes inside them
/// never confuse the brace matching below.
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let count_lines = |s: &[u8]| s.iter().filter(|&&c| c == b'\n').count();
    while i < b.len() {
        let c = b[i];
        let start_line = line;
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(b[i] == b'\n');
                    i += 1;
                }
            }
        } else if let Some((len, body)) = raw_string(&b[i..]) {
            out.push((Tok::Str(String::from_utf8_lossy(body).into_owned()), start_line));
            line += count_lines(&b[i..i + len]);
            i += len;
        } else if c == b'"' || (c == b'b' && b.get(i + 1) == Some(&b'"')) {
            let open = if c == b'b' { i + 2 } else { i + 1 };
            let mut j = open;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(b.len());
            out.push((Tok::Str(String::from_utf8_lossy(&b[open..end]).into_owned()), start_line));
            line += count_lines(&b[i..end]);
            i = end + 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}', '"') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
            } else if let Some(ch) = text[i + 1..].chars().next() {
                let after = i + 1 + ch.len_utf8();
                if b.get(after) == Some(&b'\'') {
                    i = after + 1;
                } else {
                    // A lifetime: the quote and its name.
                    i += 1;
                    while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                        i += 1;
                    }
                }
            } else {
                i += 1;
            }
            out.push((Tok::Other, start_line));
        } else if c == b'_' || c.is_ascii_alphabetic() {
            let mut j = i;
            while j < b.len() && (b[j] == b'_' || b[j].is_ascii_alphanumeric()) {
                j += 1;
            }
            out.push((Tok::Ident(text[i..j].to_owned()), start_line));
            i = j;
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i] == b'_' || b[i] == b'.' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            out.push((Tok::Other, start_line));
        } else {
            let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
            out.push((Tok::Punct(ch), start_line));
            i += ch.len_utf8();
        }
    }
    out
}

/// A raw (byte) string literal at the start of `b`: its whole length and
/// its contents.
fn raw_string(b: &[u8]) -> Option<(usize, &[u8])> {
    let prefix = if b.starts_with(b"br") {
        2
    } else if b.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = b[prefix..].iter().take_while(|&&c| c == b'#').count();
    let open = prefix + hashes;
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body_start = open + 1;
    let rel_end = b[body_start..].windows(close.len()).position(|w| w == close.as_slice())?;
    let body = &b[body_start..body_start + rel_end];
    Some((body_start + rel_end + close.len(), body))
}

/// The tokens without test code: every item that follows a `#[cfg(test)]`
/// attribute (up to its matching `}` or its `;`) is dropped.
fn without_tests(tokens: Vec<Token>) -> Vec<Token> {
    let cfg_test: Vec<Tok> = ["#", "[", "cfg", "(", "test", ")", "]"]
        .iter()
        .map(|s| match *s {
            "cfg" | "test" => Tok::Ident((*s).to_owned()),
            p => Tok::Punct(p.chars().next().unwrap_or(' ')),
        })
        .collect();
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let is_attr = tokens.len() - i >= cfg_test.len()
            && tokens[i..i + cfg_test.len()].iter().map(|(t, _)| t).eq(cfg_test.iter());
        if !is_attr {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i += cfg_test.len();
        let mut depth = 0usize;
        while i < tokens.len() {
            match tokens[i].0 {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                Tok::Punct(';') if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// The index just past the `}` that closes the `{` at `open`.
fn block_end(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, (t, _)) in tokens.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// Whether the tokens at `at` spell `pattern` (identifiers and punctuation
/// as written, one character per punctuation token).
fn spells(tokens: &[Token], at: usize, pattern: &[&str]) -> bool {
    pattern.len() <= tokens.len().saturating_sub(at)
        && pattern.iter().zip(&tokens[at..]).all(|(p, (t, _))| match t {
            Tok::Ident(s) => s == p,
            Tok::Punct(c) => p.len() == c.len_utf8() && p.starts_with(*c),
            _ => false,
        })
}

fn str_at(tokens: &[Token], at: usize) -> Option<(&str, usize)> {
    match tokens.get(at) {
        Some((Tok::Str(s), line)) => Some((s.as_str(), *line)),
        _ => None,
    }
}

/// `NAME` is `value` shouted: `store-seq-gap` → `STORE_SEQ_GAP`.
fn is_named_code(name: &str, value: &str) -> bool {
    (value.contains('-') || value.contains('_'))
        && value.bytes().all(|c| c == b'-' || c == b'_' || c.is_ascii_alphanumeric())
        && value.replace('-', "_").to_ascii_uppercase() == name
}

/// Every code the source `text` of the file at `rel` can return (see the
/// module docs for the rules), in source order.
pub(crate) fn collect(rel: &str, text: &str) -> Vec<Found> {
    let toks = without_tests(tokens(text));
    let in_codes_file = rel.ends_with("/codes.rs");
    let mut found = Vec::new();
    let mut push = |code: &str, line: usize| {
        found.push(Found { code: code.to_owned(), path: rel.to_owned(), line });
    };
    // Token ranges of `mod codes { .. }` bodies.
    let mut codes_modules = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if spells(&toks, i, &["mod", "codes", "{"]) {
            codes_modules.push(i + 2..block_end(&toks, i + 2));
        }
        i += 1;
    }
    let mut i = 0;
    while i < toks.len() {
        // Rule 1: string literals in the body of `fn code(&self)`.
        if spells(&toks, i, &["fn", "code", "(", "&", "self", ")"]) {
            let Some(open) = (i..toks.len()).find(|&j| toks[j].0 == Tok::Punct('{')) else { break };
            let end = block_end(&toks, open);
            for j in open..end {
                if let Some((s, line)) = str_at(&toks, j) {
                    push(s, line);
                }
            }
            i = end;
            continue;
        }
        // Rules 2 and 3: `const NAME: &str = "..."` (also `&'static str`).
        if let (Tok::Ident(kw), Some((Tok::Ident(name), _))) = (&toks[i].0, toks.get(i + 1)) {
            if kw == "const" {
                let ty_static = spells(&toks, i + 2, &[":", "&"])
                    && matches!(toks.get(i + 4), Some((Tok::Other, _)))
                    && spells(&toks, i + 5, &["str", "="]);
                let ty_plain = spells(&toks, i + 2, &[":", "&", "str", "="]);
                let value_at = if ty_static { i + 7 } else { i + 6 };
                if ty_static || ty_plain {
                    if let Some((value, line)) = str_at(&toks, value_at) {
                        let in_codes = in_codes_file || codes_modules.iter().any(|r| r.contains(&i));
                        if in_codes || is_named_code(name, value) {
                            push(value, line);
                        }
                    }
                }
            }
        }
        // Rule 4: a `code: "..."` field.
        if spells(&toks, i, &["code", ":"]) && !spells(&toks, i.saturating_sub(1), &[":"]) {
            if let Some((s, line)) = str_at(&toks, i + 2) {
                push(s, line);
            }
        }
        // Rule 5: the code argument of a constructor that takes one.
        for (ty, func, arg) in CODE_ARGUMENTS {
            if spells(&toks, i, &[ty, ":", ":", func, "("]) {
                if let Some(at) = argument_start(&toks, i + 5, *arg) {
                    if let Some((s, line)) = str_at(&toks, at) {
                        push(s, line);
                    }
                }
            }
        }
        i += 1;
    }
    found
}

/// The index of the first token of argument `n` of a call whose arguments
/// start at `from` (just past its `(`).
fn argument_start(tokens: &[Token], from: usize, n: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut seen = 0;
    if n == 0 {
        return Some(from);
    }
    for (i, (t, _)) in tokens.iter().enumerate().skip(from) {
        match t {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                if depth == 0 {
                    return None;
                }
                depth -= 1;
            }
            Tok::Punct(',') if depth == 0 => {
                seen += 1;
                if seen == n {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `doc` names `code` between backticks.
pub(crate) fn is_documented(doc: &str, code: &str) -> bool {
    doc.contains(&format!("`{code}`"))
}

/// A violation for every found code that `doc` (the text of [`FORMAT_DOC`])
/// does not document, at the place the code was found.
pub(crate) fn check_documented(found: &[Found], doc: &str, out: &mut Vec<Violation>) {
    for f in found.iter().filter(|f| !is_documented(doc, &f.code)) {
        out.push(Violation::new(
            f.path.clone(),
            Some(f.line),
            format!("error code `{}` is not documented in {FORMAT_DOC}: add it with its meaning", f.code),
        ));
    }
}

/// Every code of the crates under `root` (`crates/*/src/**/*.rs`), in path order.
pub(crate) fn collect_all(root: &Path, files: &[std::path::PathBuf]) -> anyhow::Result<Vec<Found>> {
    let mut found = Vec::new();
    for path in files {
        let rel = super::relative(root, path);
        let in_src = rel.starts_with("crates/") && rel.split('/').nth(2) == Some("src");
        if !in_src || !rel.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {rel}: {e}"))?;
        found.extend(collect(&rel, &text));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(rel: &str, text: &str) -> Vec<String> {
        collect(rel, text).into_iter().map(|f| f.code).collect()
    }

    #[test]
    fn every_rule_finds_its_codes_and_test_code_is_skipped() {
        let source = r####"//! Docs.
impl E {
    /// The code. A "comment" with { braces is not code.
    pub fn code(&self) -> &str {
        match self {
            E::A { .. } => "a-code",
            E::B => { "b-code" }
            E::C(inner) => inner.code(),
        }
    }
    fn code(text: &str) -> String { "not-a-code".into() }
}
pub mod codes {
    pub const ONE: &str = "ONE";
    pub const REASON: &'static str = "cancelled";
}
pub const TOOL_GONE: &str = "TOOL_GONE";
pub const STORE_SEQ_GAP: &str = "store-seq-gap";
const TEXT: &str = "text";
const ENV: &str = "SOME_VAR";
const RAW: &str = r#"{"code": "raw-not-a-code"}"#;
fn f() -> CliError {
    let c = '{';
    let e = CliError { code: "usage".into(), message: "x".into() };
    let code: &str = "typed-not-a-code";
    CliError::refused("header-malformed", origin, format!("{}", 1));
    ProviderError::other("PROVIDER_REQUEST", "m");
    PluginError::failed(SUMMARY, "m");
    ToolError::new("TooLarge", "TOO_LARGE", f(a, b));
    e
}
#[cfg(test)]
mod tests {
    fn t() { ProviderError::other("MY_CODE", "x"); let e = E { code: "test-code" }; }
}
"####;
        assert_eq!(
            codes("crates/a/src/lib.rs", source),
            [
                "a-code",
                "b-code",
                "ONE",
                "cancelled",
                "TOOL_GONE",
                "store-seq-gap",
                "usage",
                "header-malformed",
                "PROVIDER_REQUEST",
                "TOO_LARGE"
            ]
        );
        let lines: Vec<usize> = collect("x", source).iter().map(|f| f.line).collect();
        assert_eq!(lines[..2], [6, 7]);
    }

    #[test]
    fn every_const_of_a_codes_file_is_a_code() {
        assert_eq!(
            codes("crates/i/src/codes.rs", "//! Codes.\npub const TURN: &str = \"turn-open\";\n"),
            ["turn-open"]
        );
        assert!(codes("crates/i/src/other.rs", "pub const TURN: &str = \"turn-open\";\n").is_empty());
    }

    /// The check can fail: a code the document does not name is reported,
    /// where it was found; one between backticks is not, and a code merely
    /// inside a word or without backticks does not count.
    #[test]
    fn a_code_missing_from_the_document_is_reported() {
        let found = collect(
            "crates/a/src/error.rs",
            "//! E.\nimpl E {\n    fn code(&self) -> &str {\n        match self { E::A => \"io\", E::B => \"gone-away\" }\n    }\n}\n",
        );
        let mut out = Vec::new();
        check_documented(
            &found,
            "| `io` | the medium failed |\nThe gone-away case, also gone-away.\n",
            &mut out,
        );
        let listed: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(
            listed,
            ["crates/a/src/error.rs:4: error code `gone-away` is not documented in docs/format.md: \
              add it with its meaning"]
        );
        let mut out = Vec::new();
        check_documented(&found, "`io`, `gone-away`", &mut out);
        assert!(out.is_empty());
        assert!(!is_documented("radio", "io"));
    }

    /// Guards against the collection going vacuous (a refactor of the
    /// tokenizer or of the crates' error types): the real crates return
    /// codes of every family.
    #[test]
    fn the_real_crates_have_codes_of_every_family() {
        let root = crate::project_root();
        let mut files = Vec::new();
        super::super::walk(&root.join("crates"), &mut |p| files.push(p.to_path_buf())).unwrap();
        let all: Vec<String> = collect_all(&root, &files).unwrap().into_iter().map(|f| f.code).collect();
        for code in [
            "event-malformed",
            "log-corrupt",
            "fork-point-missing",
            "schema-mismatch",
            "turn-already-open",
            "TOOL_NOT_STARTED",
            "STEP_LIMIT",
            "PROVIDER_UNAVAILABLE",
            "CONFIG_MISSING_MODEL",
            "store-seq-gap",
            "usage",
            "TOO_LARGE",
            "INVALID_ARGUMENTS",
            "SUMMARY_FAILED",
        ] {
            assert!(all.iter().any(|c| c == code), "`{code}` was not collected; found {all:?}");
        }
        assert!(!all.iter().any(|c| c == "MY_CODE"), "test code was collected");
    }
}
