//! The stdio transport: one JSON-RPC message per line on stdin, answers on stdout.
//!
//! Only protocol messages ever reach stdout (logs go to stderr). Lines are read with a size
//! cap, so no byte sequence can exhaust memory: an oversized line is skipped and answered
//! with an error. Each line is admitted by [`Server::admit`] before it is parsed: one whose
//! parsed form would cost too much, or would take the server past its bound on bytes held
//! by requests, is answered with a JSON-RPC error at once. On EOF or a shutdown signal the runtime stops every call in flight (grace,
//! hard stop, cleanup), their answers are flushed, and `serve` returns within a bound.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::io::BufRead;

use tokio::io::AsyncWrite;

use crate::auth::Tenant;
use crate::dispatch::{Admitted, Connection, Outbox, RateCheck, Refusal, Server};
use crate::protocol::jsonrpc::{self, INVALID_REQUEST, Incoming, RpcError};

/// The largest message accepted on stdin.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Serve one client on `input`/`output` until EOF or `shutdown` resolves, then stop what
/// is in flight, waiting at most `drain` for calls to finish and answer.
///
/// `input` is read on a thread of its own with blocking reads, and each message is handled
/// right there: the kernel wakes that thread when a line arrives, and a short call is
/// answered before it reads again, with no other thread involved. (Polling stdin on the
/// reactor costs a second wake-up per message: the reactor's thread, then the reader's.)
/// A call that waits moves to a task of its own (see [`crate::dispatch`]), so reading goes
/// on.
pub async fn serve<R, W>(
    server: Arc<Server>,
    input: R,
    output: W,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()>
where
    R: BufRead + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_as(server, None, input, output, shutdown, drain).await
}

/// [`serve`] as `tenant` (`serve --stdio --tenant NAME`): its view of the tools, its quotas
/// (a call over its rate is answered with a JSON-RPC error and a retry hint).
pub async fn serve_as<R, W>(
    server: Arc<Server>,
    tenant: Option<Arc<Tenant>>,
    input: R,
    output: W,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()>
where
    R: BufRead + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let out = Outbox::lines(output);
    let connection = Connection::for_tenant(server.clone(), tenant, RateCheck::Here);
    let (finished, reader_done) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    let reader = {
        let connection = connection.clone();
        std::thread::Builder::new().name("cordon-stdin".into()).spawn(move || {
            // Each message is handled in place here: wake as promptly as a worker does.
            crate::dispatch::shorten_thread_slice();
            let _ = finished.send(read_messages(input, |message| {
                match admit(&connection, message) {
                    Ok(admitted) => runtime.block_on(connection.handle_admitted(admitted, &out)),
                    // Refused before it was built: answered here, nothing queued; a message
                    // without an id (a notification) is never answered, only logged.
                    Err(refusal) if refusal.id().is_none() => {
                        tracing::warn!("a message without an id was refused: {refusal}");
                    }
                    Err(refusal) => {
                        runtime.block_on(out.send(jsonrpc::failure(refusal.id(), &refusal.rpc_error())))
                    }
                }
            }));
        })?
    };
    tokio::select! {
        read = reader_done => {
            // The reader thread ends only at EOF or on a read error.
            read.unwrap_or(Ok(()))?;
        }
        () = shutdown => {}
    }
    // A reader still blocked in `read` is left behind: the process exits without it.
    drop(reader);
    server.shutdown();
    if !server.drain(drain).await {
        tracing::warn!("calls still running after {drain:?}; exiting anyway");
    }
    Ok(())
}

/// One line read: a message's text, or the error that answers an oversized one.
pub(crate) enum Message<'a> {
    Text(&'a [u8]),
    TooLong(Incoming),
}

/// Admit one line read, charged to the connection's tenant's share of the bound as an
/// HTTP request of that tenant's is (on a server of several tenants; `cordon serve
/// --stdio --tenant` builds its server with that tenant alone, whose share is the whole
/// bound): what the reader does with each line before it handles or refuses it.
pub(crate) fn admit(connection: &Connection, message: Message<'_>) -> Result<Admitted, Refusal> {
    let server = connection.server();
    match message {
        Message::Text(text) => server.admit_for(text, connection.tenant().map(Arc::as_ref), None),
        Message::TooLong(error) => Ok(Admitted { message: error, charge: server.admission().empty() }),
    }
}

/// Read messages from `input` until EOF, handing each to `handle`.
pub(crate) fn read_messages<R: BufRead>(
    mut input: R,
    mut handle: impl FnMut(Message<'_>),
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        reuse_line_buffer(&mut line);
        match read_line(&mut input, &mut line, MAX_MESSAGE_BYTES)? {
            Line::Eof => return Ok(()),
            Line::TooLong => {
                let error = RpcError::new(
                    INVALID_REQUEST,
                    format!("Invalid Request: the message exceeds {MAX_MESSAGE_BYTES} bytes"),
                );
                handle(Message::TooLong(Incoming::Invalid { id: None, error }));
            }
            Line::Complete => {
                if !line.trim_ascii().is_empty() {
                    handle(Message::Text(&line));
                }
            }
        }
    }
}

/// The line buffer's capacity kept between messages. One large message (up to
/// `MAX_MESSAGE_BYTES`) would otherwise keep its 4 MiB resident for the connection's life
/// (the soak saw it as the stdio server's memory staying 10 % up).
const KEPT_LINE_CAPACITY: usize = 64 << 10;

/// Empty `line` for the next message, giving back what a large one grew it to.
fn reuse_line_buffer(line: &mut Vec<u8>) {
    line.clear();
    line.shrink_to(KEPT_LINE_CAPACITY);
}

pub(crate) enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Read up to and without the next `\n` into `line`. A line longer than `limit` is
/// consumed and discarded, and reported as too long.
pub(crate) fn read_line<R: BufRead>(
    input: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if line.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (chunk, done) = match available.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&available[..end], end + 1),
            None => (available, available.len()),
        };
        let found_newline = done > chunk.len();
        if !too_long && line.len() + chunk.len() <= limit {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        input.consume(done);
        if found_newline {
            return Ok(if too_long { Line::TooLong } else { Line::Complete });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_message_does_not_keep_its_buffer() {
        let mut line = Vec::new();
        let mut input = std::io::Cursor::new(vec![b'x'; 1 << 20]);
        read_line(&mut input, &mut line, MAX_MESSAGE_BYTES).unwrap();
        assert!(line.capacity() >= 1 << 20);
        reuse_line_buffer(&mut line);
        assert!(line.is_empty() && line.capacity() <= KEPT_LINE_CAPACITY, "{}", line.capacity());
    }

    fn lines(input: &[u8], limit: usize) -> Vec<Result<String, ()>> {
        let mut reader = std::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line(&mut reader, &mut line, limit).unwrap() {
                Line::Eof => return out,
                Line::TooLong => out.push(Err(())),
                Line::Complete => out.push(Ok(String::from_utf8(line.clone()).unwrap())),
            }
        }
    }

    #[test]
    fn lines_are_split_and_capped() {
        let got = lines(b"ab\n0123456789\ncd\nlast", 5);
        assert_eq!(got, vec![Ok("ab".into()), Err(()), Ok("cd".into()), Ok("last".into())]);
    }
}
