//! A scripted OpenAI-compatible endpoint on loopback, for the tests of
//! `palimpsest run`: each connection gets the next [`Reply`] (server-sent
//! events, like a streaming chat completion), and every request body is
//! recorded. Included with `#[path]` by the test files that need it.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

// ------------------------------------------------------------ the server

/// One scripted response.
pub(crate) enum Reply {
    /// An event stream, one HTTP chunk per event, a few ms apart.
    Sse(Vec<String>),
    /// `before`, then nothing until `gate` fires, then `after`: proves the
    /// client showed `before` while the response was still open.
    Gated { before: Vec<String>, gate: mpsc::Receiver<()>, after: Vec<String> },
    /// A JSON body with this status.
    Json(u16, String),
    /// An event stream's headers, then silence until the client hangs up.
    Stall,
}

/// A server answering each connection with the next [`Reply`]; requests
/// beyond the script get a 599. It records every request body, and the
/// headers of each request (names in lower case).
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub(crate) fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the local address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded_heads = Arc::clone(&heads);
        thread::spawn(move || {
            let mut replies = replies.into_iter();
            for socket in listener.incoming() {
                let Ok(mut socket) = socket else { return };
                let Some((head, body)) = read_request(&mut socket) else { continue };
                recorded_heads.lock().expect("the header log").push(head);
                recorded.lock().expect("the request log").push(body);
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::Json(599, r#"{"error":{"message":"the script is used up"}}"#.into())
                });
                // A write error means the client went away: nothing to do.
                let _ = write_reply(&mut socket, reply);
            }
        });
        Server { addr, requests, heads }
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("the request log").clone()
    }

    /// The head (request line and headers) of each request, as sent but
    /// for the header names, which are in lower case.
    pub(crate) fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("the header log").clone()
    }
}

/// The head and JSON body of one HTTP request.
pub(crate) fn read_request(socket: &mut TcpStream) -> Option<(String, Value)> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = socket.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head: String = String::from_utf8_lossy(&buf[..head_end])
        .lines()
        .map(|l| match l.split_once(':') {
            Some((name, value)) => format!("{}:{value}\n", name.to_ascii_lowercase()),
            None => format!("{l}\n"),
        })
        .collect();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some((head, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

pub(crate) fn write_reply(socket: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunks = |socket: &mut TcpStream, events: &[String]| -> std::io::Result<()> {
        for event in events {
            write!(socket, "{:x}\r\n{event}\r\n", event.len())?;
            socket.flush()?;
            thread::sleep(Duration::from_millis(3));
        }
        Ok(())
    };
    match reply {
        Reply::Sse(events) => {
            socket.write_all(SSE_HEAD.as_bytes())?;
            chunks(socket, &events)?;
            socket.write_all(b"0\r\n\r\n")?;
        }
        Reply::Gated { before, gate, after } => {
            socket.write_all(SSE_HEAD.as_bytes())?;
            chunks(socket, &before)?;
            // The test opens the gate (or gives up and drops it).
            let _ = gate.recv_timeout(Duration::from_secs(30));
            chunks(socket, &after)?;
            socket.write_all(b"0\r\n\r\n")?;
        }
        Reply::Json(status, body) => {
            write!(
                socket,
                "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )?;
        }
        Reply::Stall => {
            socket.write_all(SSE_HEAD.as_bytes())?;
            socket.flush()?;
            // Wait for the client to hang up (a cancelled turn drops the stream).
            socket.set_read_timeout(Some(Duration::from_secs(30)))?;
            let _ = socket.read(&mut [0u8; 64]);
        }
    }
    socket.flush()
}

// ---------------------------------------------------- scripted responses

pub(crate) fn event(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {chunk}\n\n")
}

pub(crate) fn usage_and_done() -> Vec<String> {
    let usage = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    });
    vec![format!("data: {usage}\n\n"), "data: [DONE]\n\n".to_owned()]
}

/// The events of an answer streamed in these pieces.
pub(crate) fn text_events(pieces: &[&str]) -> Vec<String> {
    let mut events = vec![event(json!({"role": "assistant", "content": ""}), None)];
    events.extend(pieces.iter().map(|p| event(json!({"content": p}), None)));
    events.push(event(json!({}), Some("stop")));
    events.extend(usage_and_done());
    events
}

pub(crate) fn text_reply(pieces: &[&str]) -> Reply {
    Reply::Sse(text_events(pieces))
}

/// Some text, then one tool call whose arguments come in these pieces.
pub(crate) fn tool_reply(text: &str, id: &str, name: &str, arguments: &[&str]) -> Reply {
    let mut events = vec![event(json!({"role": "assistant", "content": text}), None)];
    events.push(event(
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
        None,
    ));
    events.extend(
        arguments
            .iter()
            .map(|a| event(json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}), None)),
    );
    events.push(event(json!({}), Some("tool_calls")));
    events.extend(usage_and_done());
    Reply::Sse(events)
}
