//! The JSON body the OpenAI-compatible provider would send for a request,
//! built and printed without any network or API key.
//!
//! Run with `cargo run -p palimpsest-llm-openai --example request_body`.

#![allow(clippy::print_stdout)]

use palimpsest_core_agent_loop::ModelRequest;
use palimpsest_core_session::payload::Message;
use palimpsest_llm_openai::{request_body, OpenAiConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = OpenAiConfig::new("http://127.0.0.1:9/v1", "gpt-example");
    let mut request = ModelRequest::new(vec![Message::user("u1", "Say hello.")]);
    request.system = Some("You are terse.".into());
    let body = request_body(&config, &request);
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(())
}
