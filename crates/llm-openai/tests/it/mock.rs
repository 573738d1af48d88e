//! A tiny scripted HTTP/1.1 server on `127.0.0.1:0`, written on tokio's
//! `TcpListener` (no server crate needed for this much): each accepted
//! connection gets the next scripted [`Reply`], written in the pieces the
//! script says, and the request it answered is recorded. Every reply
//! closes its connection, so each attempt of the client is one connection.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How a reply's body goes on the wire.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// With `Content-Length`, in one write.
    Full(Vec<u8>),
    /// `Transfer-Encoding: chunked`, one HTTP chunk per piece with a short
    /// pause between them, then the final empty chunk.
    Chunked(Vec<Vec<u8>>),
    /// Like `Chunked`, but the connection is dropped after the pieces,
    /// without the final chunk: a connection cut mid-stream.
    ChunkedThenCut(Vec<Vec<u8>>),
    /// No length at all: the body ends when the connection closes, after
    /// the pieces (a clean end of input, as far as HTTP can tell).
    CloseDelimited(Vec<Vec<u8>>),
    /// Headers, then silence for this long before closing.
    Stall(Duration),
    /// Like `Chunked`, with this pause between the pieces.
    ChunkedSlowly(Vec<Vec<u8>>, Duration),
    /// Like `Chunked`, then a `: keep-alive` comment every 100 ms for
    /// this long, never the final chunk.
    ChunkedThenPings(Vec<Vec<u8>>, Duration),
    /// Not even headers: silence for this long, then the connection closes.
    NoAnswer(Duration),
}

/// One scripted response.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Body,
}

impl Reply {
    /// An event stream, in pieces of `piece` bytes (chunked encoding).
    pub(crate) fn sse(bytes: &[u8], piece: usize) -> Reply {
        Reply::event_stream(Body::Chunked(split(bytes, piece)))
    }

    /// A `200` event stream sent as `body` says (slowly, cut, stalled...).
    pub(crate) fn event_stream(body: Body) -> Reply {
        Reply::new(200, body).header("content-type", "text/event-stream")
    }

    /// A JSON body with this status.
    pub(crate) fn json(status: u16, body: &str) -> Reply {
        Reply::new(status, Body::Full(body.as_bytes().to_vec())).header("content-type", "application/json")
    }

    pub(crate) fn new(status: u16, body: Body) -> Reply {
        Reply { status, headers: Vec::new(), body }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// `bytes` cut every `piece` bytes (anywhere: inside UTF-8 characters and
/// CRLF pairs too).
pub(crate) fn split(bytes: &[u8], piece: usize) -> Vec<Vec<u8>> {
    bytes.chunks(piece.max(1)).map(<[u8]>::to_vec).collect()
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lower-cased, in the order received.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON (`null` if it is not JSON, which a test then sees).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The running server. Dropping it stops it.
pub(crate) struct MockServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: JoinHandle<()>,
}

impl MockServer {
    /// Starts serving `replies`, one per connection, in order. Requests
    /// beyond the script get a 599 naming the problem.
    pub(crate) async fn start(replies: Vec<Reply>) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::json(599, r#"{"error":{"message":"the mock server's script is used up"}}"#)
                });
                // One connection at a time: the client makes its attempts in turn.
                serve(socket, reply, &recorded).await;
            }
        });
        Ok(MockServer { addr, requests, task })
    }

    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut socket: TcpStream, reply: Reply, recorded: &Mutex<Vec<Recorded>>) {
    let Some(request) = read_request(&mut socket).await else { return };
    if let Ok(mut r) = recorded.lock() {
        r.push(request);
    }
    // Write errors mean the client went away: nothing to do about it.
    let _ = write_reply(&mut socket, reply).await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    Some(Recorded { method, path, headers, body })
}

async fn write_reply(socket: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    if let Body::NoAnswer(duration) = reply.body {
        tokio::time::sleep(duration).await;
        return socket.shutdown().await;
    }
    let mut head = format!("HTTP/1.1 {} Mock\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let pause = Duration::from_millis(2);
    match reply.body {
        Body::Full(bytes) => {
            head.push_str(&format!("content-length: {}\r\n\r\n", bytes.len()));
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&bytes).await?;
        }
        Body::Chunked(pieces) | Body::ChunkedThenCut(pieces) if pieces.is_empty() => {
            head.push_str("transfer-encoding: chunked\r\n\r\n0\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
        }
        Body::Chunked(pieces) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            write_chunks(socket, &pieces, pause).await?;
            socket.write_all(b"0\r\n\r\n").await?;
        }
        Body::ChunkedThenCut(pieces) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            write_chunks(socket, &pieces, pause).await?;
            // A chunk announced but never delivered, then the cut.
            socket.write_all(b"40\r\ndata: {\"cho").await?;
            socket.flush().await?;
        }
        Body::CloseDelimited(pieces) => {
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            for piece in pieces {
                socket.write_all(&piece).await?;
                socket.flush().await?;
                tokio::time::sleep(pause).await;
            }
        }
        Body::NoAnswer(_) => {}
        Body::ChunkedSlowly(pieces, pause) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            write_chunks(socket, &pieces, pause).await?;
            socket.write_all(b"0\r\n\r\n").await?;
        }
        Body::ChunkedThenPings(pieces, duration) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            write_chunks(socket, &pieces, pause).await?;
            let until = tokio::time::Instant::now() + duration;
            while tokio::time::Instant::now() < until {
                let ping = b": keep-alive\n\n";
                socket.write_all(format!("{:x}\r\n", ping.len()).as_bytes()).await?;
                socket.write_all(ping).await?;
                socket.write_all(b"\r\n").await?;
                socket.flush().await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Body::Stall(duration) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.flush().await?;
            tokio::time::sleep(duration).await;
        }
    }
    socket.flush().await?;
    socket.shutdown().await
}

async fn write_chunks(socket: &mut TcpStream, pieces: &[Vec<u8>], pause: Duration) -> std::io::Result<()> {
    for piece in pieces {
        socket.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await?;
        socket.write_all(piece).await?;
        socket.write_all(b"\r\n").await?;
        socket.flush().await?;
        tokio::time::sleep(pause).await;
    }
    Ok(())
}
