//! The request body: a [`ModelRequest`] in the chat-completions format.
//!
//! `model` is the request's ([`ModelRequest::model`], the session's
//! settings) or else the configured one. The mapping, message by message:
//!
//! * the system prompt becomes a first `system` message;
//! * a user message becomes a `user` message. Its `content` is a plain
//!   string when it holds exactly one text block (the form every server
//!   accepts), else an array of parts: `{"type":"text"}` and
//!   `{"type":"image_url","image_url":{"url":"data:{mediaType};base64,{data}"}}`;
//! * each `tool-result` block becomes its own `tool` message with its
//!   `tool_call_id`, in block order, before the rest of its user message
//!   (chat completions wants tool answers right after the assistant message
//!   that asked). Its text blocks are joined with `\n`. Tool messages
//!   cannot carry images, so a result's images are sent in a `user` message
//!   after the run of `tool` messages, introduced by a text part naming the
//!   call. `isError` has no field in this format and is not sent: the
//!   result's text is all the model sees;
//! * an assistant message becomes an `assistant` message: its text blocks
//!   concatenated as `content` (`null` when it has none but has tool
//!   calls), its `tool-call` blocks as `tool_calls`
//!   (`{"id","type":"function","function":{"name","arguments"}}`); arguments
//!   that are not a JSON object (empty, or broken JSON the model produced
//!   and the log keeps verbatim) are sent as `{}`, which servers that
//!   validate history accept ([`wire_arguments`]; the call's result already
//!   told the model its arguments were invalid); a name outside
//!   `[A-Za-z0-9_-]{1,64}` is sent mapped ([`wire_tool_name`]);
//! * `reasoning` blocks are dropped: servers that stream reasoning refuse
//!   it back (DeepSeek) or ignore it. Images in an assistant message, and
//!   tool calls in a user message, have no place in the format and are
//!   dropped too.
//!
//! Then: `tools` (omitted when empty), `stream: true`,
//! `stream_options: {"include_usage": true}` (unless turned off), the
//! output-token limit under the configured key, and last the configured
//! `extra_body` fields.

use palimpsest_core_agent_loop::{wire_arguments, wire_tool_name, ModelRequest, ToolSpec};
use palimpsest_core_session::payload::{Block, Message, Role};
use serde_json::{json, Map, Value};

use crate::config::OpenAiConfig;

/// The JSON body of a streaming chat-completions request for `request`.
///
/// ```
/// use palimpsest_core_agent_loop::ModelRequest;
/// use palimpsest_core_session::payload::{Block, Message, Role, Source};
/// use palimpsest_llm_openai::{request_body, OpenAiConfig};
///
/// let config = OpenAiConfig::new("http://127.0.0.1:8000/v1", "qwen3");
/// let user = Message { id: "u1".into(), role: Role::User, content: vec![Block::text("Hi")], source: Source::User };
/// let body = request_body(&config, &ModelRequest::new(vec![user]).with_system("Be brief."));
/// assert_eq!(
///     body,
///     serde_json::json!({
///         "model": "qwen3",
///         "messages": [
///             {"role": "system", "content": "Be brief."},
///             {"role": "user", "content": "Hi"}
///         ],
///         "stream": true,
///         "stream_options": {"include_usage": true}
///     })
/// );
/// ```
pub fn request_body(config: &OpenAiConfig, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    // An empty model (settings `"model": ""`) is no model: the configured
    // one, which `OpenAiProvider::new` holds to be one.
    let model = request.model.as_ref().filter(|m| !m.trim().is_empty()).unwrap_or(&config.model);
    body.insert("model".into(), Value::String(model.clone()));
    body.insert("messages".into(), Value::Array(messages(request)));
    if !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(request.tools.iter().map(tool).collect()));
    }
    body.insert("stream".into(), Value::Bool(true));
    if config.include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(limit) = request.max_output_tokens {
        body.insert(config.max_tokens_field.key().into(), Value::from(limit));
    }
    for (key, value) in &config.extra_body {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

fn tool(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        }
    })
}

/// The chat messages, system prompt first.
fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(system) = &request.system {
        out.push(json!({"role": "system", "content": system}));
    }
    // Images from tool results, sent once the run of tool messages ends.
    let mut pending_images: Vec<Value> = Vec::new();
    for message in &request.messages {
        let tool_messages = match message.role {
            Role::User => tool_messages(message, &mut pending_images),
            Role::Assistant => Vec::new(),
        };
        let rest = match message.role {
            Role::User => user_message(message),
            Role::Assistant => Some(assistant_message(message)),
        };
        if !tool_messages.is_empty() {
            out.extend(tool_messages);
        }
        if let Some(rest) = rest {
            flush_images(&mut out, &mut pending_images);
            out.push(rest);
        }
    }
    flush_images(&mut out, &mut pending_images);
    out
}

fn flush_images(out: &mut Vec<Value>, pending: &mut Vec<Value>) {
    if !pending.is_empty() {
        out.push(json!({"role": "user", "content": std::mem::take(pending)}));
    }
}

/// One `tool` message per `tool-result` block; their images go to `pending_images`.
fn tool_messages(message: &Message, pending_images: &mut Vec<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for block in &message.content {
        let Block::ToolResult { tool_call_id, content, .. } = block else { continue };
        let mut texts = Vec::new();
        let mut images = Vec::new();
        for inner in content {
            match inner {
                Block::Text { text } => texts.push(text.as_str()),
                Block::Image { media_type, data } => images.push(image_part(media_type, data)),
                _ => {}
            }
        }
        out.push(json!({"role": "tool", "tool_call_id": tool_call_id, "content": texts.join("\n")}));
        if !images.is_empty() {
            pending_images.push(json!({
                "type": "text",
                "text": format!("Images returned by tool call {tool_call_id}:"),
            }));
            pending_images.extend(images);
        }
    }
    out
}

/// The user message of everything but tool results, or `None` when the
/// message held only tool results.
fn user_message(message: &Message) -> Option<Value> {
    let mut parts = Vec::new();
    let mut had_tool_result = false;
    for block in &message.content {
        match block {
            Block::Text { text } => parts.push(json!({"type": "text", "text": text})),
            Block::Image { media_type, data } => parts.push(image_part(media_type, data)),
            Block::ToolResult { .. } => had_tool_result = true,
            Block::Reasoning { .. } | Block::ToolCall { .. } => {}
        }
    }
    if parts.is_empty() && had_tool_result {
        return None;
    }
    let content = match parts.as_slice() {
        [] => Value::String(String::new()),
        [only] if only["type"] == "text" => only["text"].clone(),
        _ => Value::Array(parts),
    };
    Some(json!({"role": "user", "content": content}))
}

fn assistant_message(message: &Message) -> Value {
    let mut text = String::new();
    let mut has_text = false;
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            Block::Text { text: t } => {
                text.push_str(t);
                has_text = true;
            }
            Block::ToolCall { id, name, arguments } => {
                let arguments = wire_arguments(arguments);
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": wire_tool_name(name), "arguments": arguments},
                }));
            }
            Block::Reasoning { .. } | Block::Image { .. } | Block::ToolResult { .. } => {}
        }
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::String("assistant".into()));
    let content = if has_text || calls.is_empty() { Value::String(text) } else { Value::Null };
    out.insert("content".into(), content);
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

fn image_part(media_type: &str, data: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MaxTokensField;
    use palimpsest_core_session::payload::Source;

    fn msg(id: &str, role: Role, content: Vec<Block>) -> Message {
        let source = match role {
            Role::User => Source::User,
            Role::Assistant => Source::Model { provider: "p".into(), model: "m".into() },
        };
        Message { id: id.into(), role, content, source }
    }

    fn result(id: &str, content: Vec<Block>, is_error: bool) -> Message {
        Message {
            id: format!("r-{id}"),
            role: Role::User,
            content: vec![Block::ToolResult { tool_call_id: id.into(), is_error, content }],
            source: Source::Tool { call_id: id.into() },
        }
    }

    fn image(data: &str) -> Block {
        Block::Image { media_type: "image/png".into(), data: data.into() }
    }

    fn call(id: &str, name: &str, args: &str) -> Block {
        Block::ToolCall { id: id.into(), name: name.into(), arguments: args.into() }
    }

    #[test]
    fn a_full_conversation_maps_to_chat_messages() {
        let request = ModelRequest::new(vec![
            msg("u1", Role::User, vec![Block::text("What is in this picture?"), image("iVBORw0KGgo=")]),
            msg(
                "a1",
                Role::Assistant,
                vec![
                    Block::Reasoning { text: "I should zoom.".into(), signature: Some("sig".into()) },
                    Block::text("Let me zoom "),
                    Block::text("in."),
                    call("call_1", "zoom", "{\"factor\":2}"),
                    call("call_2", "describe", ""),
                ],
            ),
            result("call_1", vec![Block::text("zoomed"), image("AAAA"), Block::text("(2x)")], false),
            result("call_2", vec![Block::text("no such region")], true),
            msg("a2", Role::Assistant, vec![call("call_3", "zoom", "{\"factor\":4}")]),
            result("call_3", vec![], false),
            msg("c1", Role::User, vec![Block::text("[file a.txt changed]"), Block::text("Please hurry.")]),
            msg(
                "a3",
                Role::Assistant,
                vec![Block::Reasoning { text: "only thoughts".into(), signature: None }],
            ),
            msg("u2", Role::User, vec![]),
        ])
        .with_system("You are terse.")
        .with_tools(vec![ToolSpec {
            name: "zoom".into(),
            description: "Zooms the picture.".into(),
            parameters: json!({"type": "object", "properties": {"factor": {"type": "number"}}}),
        }])
        .with_max_output_tokens(512);
        let mut config = OpenAiConfig::new("http://h/v1", "vision-model");
        config.max_tokens_field = MaxTokensField::MaxCompletionTokens;
        config.extra_body.insert("temperature".into(), json!(0.2));
        insta::assert_json_snapshot!(request_body(&config, &request));
    }

    #[test]
    fn the_request_model_wins_over_the_configured_one() {
        let config = OpenAiConfig::new("http://h/v1", "configured");
        let body = request_body(&config, &ModelRequest::new(vec![]));
        assert_eq!(body["model"], "configured");
        let body = request_body(&config, &ModelRequest::new(vec![]).with_model("from-settings"));
        assert_eq!(body["model"], "from-settings");
        // Settings stating an empty model state none (a downstream probe
        // got `"model": ""` to the server past the provider's refusal).
        for empty in ["", "  "] {
            let body = request_body(&config, &ModelRequest::new(vec![]).with_model(empty));
            assert_eq!(body["model"], "configured", "{empty:?}");
        }
    }

    #[test]
    fn arguments_that_are_not_a_json_object_go_on_the_wire_as_an_empty_object() {
        // Built field by field, past `ModelRequest::new`, as a caller could:
        // the body is well-formed whatever the request holds.
        let mut request = ModelRequest::new(vec![]);
        request.messages.push(msg(
            "a1",
            Role::Assistant,
            vec![
                call("c1", "read", "{\"path\": \"a.t"),
                call("c2", "read", "[1]"),
                call("c3", "read", " "),
                call("c4", "read", "{\"path\": \"b\"}"),
            ],
        ));
        assert_eq!(sent_calls(&request, "arguments"), ["{}", "{}", "{}", "{\"path\": \"b\"}"]);
    }

    /// Field `field` of each tool call of the first message `request` sends.
    fn sent_calls(request: &ModelRequest, field: &str) -> Vec<String> {
        let body = request_body(&OpenAiConfig::new("http://h/v1", "m"), request);
        body["messages"][0]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["function"][field].as_str().map(str::to_owned))
            .collect()
    }

    #[test]
    fn tool_names_outside_the_pattern_strict_servers_accept_are_sent_mapped() {
        // OpenAI refuses a history naming `functions.read_file`, every turn
        // after: one bad name from a model ended the session (an outside
        // probe). The log keeps the name; the wire maps it.
        let names = ["read_file", "functions.read_file", "", "a b/c"];
        let calls = names.iter().enumerate().map(|(i, n)| call(&format!("c{i}"), n, "{}")).collect();
        for request in [
            ModelRequest::new(vec![msg("a1", Role::Assistant, calls)]),
            // Past `ModelRequest::new`, as a caller could build it.
            {
                let mut r = ModelRequest::new(vec![]);
                let calls = names.iter().enumerate().map(|(i, n)| call(&format!("c{i}"), n, "{}")).collect();
                r.messages.push(msg("a1", Role::Assistant, calls));
                r
            },
        ] {
            assert_eq!(
                sent_calls(&request, "name"),
                ["read_file", "functions_read_file", "unnamed_tool", "a_b_c"]
            );
        }
    }

    #[test]
    fn a_user_message_with_results_and_text_sends_the_tool_messages_first() {
        let mixed = Message {
            id: "m".into(),
            role: Role::User,
            content: vec![
                Block::text("note"),
                Block::ToolResult {
                    tool_call_id: "a".into(),
                    is_error: false,
                    content: vec![Block::text("A")],
                },
                Block::ToolResult { tool_call_id: "b".into(), is_error: false, content: vec![image("B")] },
            ],
            source: Source::User,
        };
        let messages = messages(&ModelRequest::new(vec![mixed]));
        assert_eq!(
            Value::Array(messages),
            json!([
                {"role": "tool", "tool_call_id": "a", "content": "A"},
                {"role": "tool", "tool_call_id": "b", "content": ""},
                {"role": "user", "content": [
                    {"type": "text", "text": "Images returned by tool call b:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,B"}}
                ]},
                {"role": "user", "content": "note"}
            ])
        );
    }

    #[test]
    fn usage_and_limits_follow_the_config() {
        let mut config = OpenAiConfig::new("http://h/v1", "m");
        config.include_usage = false;
        let body = request_body(&config, &ModelRequest::new(vec![]).with_max_output_tokens(7));
        assert_eq!(body, json!({"model": "m", "messages": [], "stream": true, "max_tokens": 7}));
        config.extra_body.insert("stream_options".into(), json!({"include_usage": false}));
        config.extra_body.insert("model".into(), json!("override"));
        let body = request_body(&config, &ModelRequest::new(vec![]));
        assert_eq!(body["model"], "override");
        assert_eq!(body["stream_options"], json!({"include_usage": false}));
    }
}
