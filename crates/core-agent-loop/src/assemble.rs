//! Building an assistant message from its streamed chunks.
//!
//! Content blocks are keyed by the chunk's `index` and ordered by it. Text
//! and reasoning deltas of the same index concatenate; tool-call deltas of
//! the same index concatenate their `argumentsDelta`, take the call id from
//! the first delta, and their names: a later delta's name is the rest of
//! the name (`read_` then `file`, as the OpenAI clients join them), unless
//! it repeats the name so far (servers that send it on every delta). Should a
//! provider reuse an index for blocks of different kinds, each kind keeps
//! its own block (reasoning, then text, then the tool call), so nothing
//! streamed is lost. The last usage chunk wins.

use std::collections::BTreeMap;

use palimpsest_core_session::payload::{Block, StreamChunk, Usage};

#[derive(Debug)]
enum Partial {
    Reasoning(String),
    Text(String),
    Call { id: String, name: Option<String>, arguments: String },
}

/// Accumulates one step's chunks.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// Keyed by (index, kind rank).
    blocks: BTreeMap<(u32, u8), Partial>,
    usage: Option<Usage>,
}

impl Assembler {
    pub(crate) fn push(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::ReasoningDelta { index, text } => {
                if let Partial::Reasoning(s) =
                    self.blocks.entry((*index, 0)).or_insert_with(|| Partial::Reasoning(String::new()))
                {
                    s.push_str(text);
                }
            }
            StreamChunk::TextDelta { index, text } => {
                if let Partial::Text(s) =
                    self.blocks.entry((*index, 1)).or_insert_with(|| Partial::Text(String::new()))
                {
                    s.push_str(text);
                }
            }
            StreamChunk::ToolCallDelta { index, id, name: chunk_name, arguments_delta } => {
                let entry = self.blocks.entry((*index, 2)).or_insert_with(|| Partial::Call {
                    id: id.clone(),
                    name: None,
                    arguments: String::new(),
                });
                if let Partial::Call { id: call_id, name, arguments } = entry {
                    if call_id.is_empty() {
                        call_id.clone_from(id);
                    }
                    match (name.as_mut(), chunk_name) {
                        (None, _) => name.clone_from(chunk_name),
                        (Some(so_far), Some(more)) if so_far != more => so_far.push_str(more),
                        _ => {}
                    }
                    arguments.push_str(arguments_delta);
                }
            }
            StreamChunk::Usage(u) => self.usage = Some(*u),
        }
    }

    /// The content so far, and the usage.
    pub(crate) fn finish(self) -> (Vec<Block>, Option<Usage>) {
        let content = self
            .blocks
            .into_values()
            .map(|p| match p {
                Partial::Reasoning(text) => Block::Reasoning { text, signature: None },
                Partial::Text(text) => Block::Text { text },
                Partial::Call { id, name, arguments } => {
                    Block::ToolCall { id, name: name.unwrap_or_default(), arguments }
                }
            })
            .collect();
        (content, self.usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(index: u32, t: &str) -> StreamChunk {
        StreamChunk::TextDelta { index, text: t.into() }
    }

    fn call(index: u32, id: &str, name: Option<&str>, args: &str) -> StreamChunk {
        StreamChunk::ToolCallDelta {
            index,
            id: id.into(),
            name: name.map(Into::into),
            arguments_delta: args.into(),
        }
    }

    #[test]
    fn interleaved_deltas_assemble_by_index() {
        let mut a = Assembler::default();
        for c in [
            StreamChunk::ReasoningDelta { index: 0, text: "think".into() },
            text(1, "Hel"),
            call(2, "c1", Some("read"), "{\"p\":"),
            call(3, "c2", Some("list"), "{}"),
            text(1, "lo"),
            call(2, "c1", None, "1}"),
            StreamChunk::Usage(Usage { input_tokens: 1, output_tokens: 2, ..Usage::default() }),
            StreamChunk::Usage(Usage { input_tokens: 3, output_tokens: 4, ..Usage::default() }),
        ] {
            a.push(&c);
        }
        let (content, usage) = a.finish();
        assert_eq!(
            content,
            [
                Block::Reasoning { text: "think".into(), signature: None },
                Block::text("Hello"),
                Block::ToolCall { id: "c1".into(), name: "read".into(), arguments: "{\"p\":1}".into() },
                Block::ToolCall { id: "c2".into(), name: "list".into(), arguments: "{}".into() },
            ]
        );
        assert_eq!(usage.map(|u| u.output_tokens), Some(4));
    }

    #[test]
    fn a_reused_index_keeps_both_blocks_and_a_late_name_is_taken() {
        let mut a = Assembler::default();
        a.push(&text(0, "hi"));
        a.push(&call(0, "c", None, "{"));
        a.push(&call(0, "c", Some("late"), "}"));
        let (content, usage) = a.finish();
        assert_eq!(
            content,
            [
                Block::text("hi"),
                Block::ToolCall { id: "c".into(), name: "late".into(), arguments: "{}".into() }
            ]
        );
        assert_eq!(usage, None);
    }

    #[test]
    fn a_name_split_across_deltas_is_joined_and_a_repeated_one_kept_once() {
        let mut a = Assembler::default();
        a.push(&call(0, "c", Some("read_"), "{"));
        a.push(&call(0, "c", Some("file"), "}"));
        a.push(&call(1, "d", Some("list"), "{"));
        a.push(&call(1, "d", Some("list"), "}"));
        let (content, _) = a.finish();
        let names: Vec<&str> = content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["read_file", "list"]);
    }
}
