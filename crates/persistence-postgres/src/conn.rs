//! A blocking connection: `tokio-postgres` driven on a current-thread
//! runtime of the connection's own, as the `postgres` crate drives it,
//! with one difference that matters to a load: a `COPY ... TO STDOUT` is
//! read in **one** pass of the runtime, every message handed on as it
//! arrives, where `postgres`'s `CopyOutReader` enters its runtime once per
//! message (one per event row: clock reads, context switches, waker
//! clones, about half of the reading thread's time in a load).
//!
//! Every other call is one `block_on`, as in `postgres`. The connection is
//! polled inside each call (no task of its own), so nothing runs between
//! calls; a notice the server sends goes to `tracing` when it is read.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Config, Error, Row, SimpleQueryMessage, Socket};

/// The connection's messages that answer no request.
type Messages = Pin<Box<dyn Stream<Item = Result<AsyncMessage, Error>> + Send>>;

/// Why a connection could not be made: the client's error (the server
/// refused, or could not be reached), or the runtime that drives it could
/// not be started.
pub(crate) type ConnectError = Box<dyn std::error::Error + Send + Sync>;

/// One connection to the server, used from one thread at a time.
pub(crate) struct Client {
    client: tokio_postgres::Client,
    /// Reads and writes the socket; polled by every call.
    connection: Messages,
    runtime: Runtime,
}

/// A connection's unsolicited messages as a stream (`poll_message`).
struct Unsolicited<S, T>(tokio_postgres::Connection<S, T>);

impl<S, T> Stream for Unsolicited<S, T>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    type Item = Result<AsyncMessage, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_message(cx)
    }
}

/// Polls the connection until it waits on the socket: `Ready(Ok(()))`
/// when it ended, `Ready(Err)` when it failed, else `Pending` (then the
/// connection has sent every request and handed on every response it
/// could).
fn poll_connection(connection: &mut Messages, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
    loop {
        match connection.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(AsyncMessage::Notice(notice)))) => {
                tracing::debug!(severity = notice.severity(), message = notice.message(), "server notice");
            }
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
            Poll::Ready(None) => return Poll::Ready(Ok(())),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Runs `future` to its end on `runtime`, polling `connection` beside it.
fn block_on<T>(
    runtime: &Runtime,
    connection: &mut Messages,
    future: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut future = pin!(future);
    runtime.block_on(poll_fn(|cx| {
        if let Poll::Ready(Err(e)) = poll_connection(connection, cx) {
            return Poll::Ready(Err(e));
        }
        // A connection that ended fails the request's response channel:
        // the future then ends with the client's "closed" error.
        future.as_mut().poll(cx)
    }))
}

impl Client {
    /// Connects as `config` says, through `tls`. The error is the
    /// client's, or the runtime's when it cannot be started.
    pub(crate) fn connect<T>(config: &Config, tls: T) -> Result<Client, ConnectError>
    where
        T: MakeTlsConnect<Socket> + 'static + Send,
        T::TlsConnect: Send,
        T::Stream: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (client, connection) = runtime.block_on(config.connect(tls))?;
        Ok(Client { client, connection: Box::pin(Unsolicited(connection)), runtime })
    }

    /// Whether the connection is known to be gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs statements as one simple query, discarding any rows.
    pub(crate) fn batch_execute(&mut self, query: &str) -> Result<(), Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.batch_execute(query))
    }

    /// Runs statements as one simple query, returning its messages.
    pub(crate) fn simple_query(&mut self, query: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.simple_query(query))
    }

    /// A statement with typed parameters, unprepared: every row.
    pub(crate) fn query_typed(
        &mut self,
        query: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.query_typed(query, params))
    }

    /// [`query_typed`](Client::query_typed) of exactly one row.
    pub(crate) fn query_typed_one(
        &mut self,
        query: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.query_typed_one(query, params))
    }

    /// [`query_typed`](Client::query_typed) of at most one row.
    pub(crate) fn query_typed_opt(
        &mut self,
        query: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<Row>, Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.query_typed_opt(query, params))
    }

    /// A statement with typed parameters, unprepared: the rows it changed.
    pub(crate) fn execute_typed(
        &mut self,
        query: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, Error> {
        let Client { client, connection, runtime } = self;
        block_on(runtime, connection, client.execute_typed(query, params))
    }

    /// Runs `query`, a `COPY ... TO STDOUT`, handing each of the server's
    /// `CopyData` messages to `take` in order until the data ends or
    /// `take` returns `Ok(false)` (the rest is then discarded by the
    /// connection). All in one pass of the runtime: `take` runs inside it,
    /// and may block (the connection is not read meanwhile).
    ///
    /// The client's errors come wrapped in an `io::Error` (as `postgres`'s
    /// `CopyOutReader` wraps them), `take`'s as they are.
    pub(crate) fn copy_out(
        &mut self,
        query: &str,
        mut take: impl FnMut(&[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        let Client { client, connection, runtime } = self;
        let stream = block_on(runtime, connection, client.copy_out(query)).map_err(io::Error::other)?;
        let mut stream = pin!(stream);
        runtime.block_on(poll_fn(|cx| loop {
            // Let the connection read what the socket holds, then take
            // every message it handed on; wait when it handed on none.
            if let Poll::Ready(Err(e)) = poll_connection(connection, cx) {
                return Poll::Ready(Err(io::Error::other(e)));
            }
            let mut took = false;
            loop {
                match stream.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(bytes))) => {
                        took = true;
                        match take(&bytes) {
                            Ok(true) => {}
                            Ok(false) => return Poll::Ready(Ok(())),
                            Err(e) => return Poll::Ready(Err(e)),
                        }
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io::Error::other(e))),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => break,
                }
            }
            if !took {
                return Poll::Pending;
            }
        }))
    }
}

impl Drop for Client {
    /// Says goodbye to the server (`Terminate`) and waits for the
    /// connection to close, as `postgres` does.
    fn drop(&mut self) {
        // What dropping the client does (it closes the request channel;
        // the connection then sends `Terminate`), here while the client is
        // still a field; `postgres`'s own `Client` closes it the same way.
        self.client.__private_api_close();
        let connection = &mut self.connection;
        self.runtime.block_on(poll_fn(|cx| match poll_connection(connection, cx) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }));
    }
}
