//! The stdio transport: one JSON-RPC message per line on stdin, answers on stdout.
//!
//! Only protocol messages ever reach stdout (logs go to stderr). Lines are read with a size
//! cap, so no byte sequence can exhaust memory: an oversized line is skipped and answered
//! with an error. On EOF or a shutdown signal the runtime stops every call in flight (grace,
//! hard stop, cleanup), their answers are flushed, and `serve` returns within a bound.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite};

use crate::dispatch::{Connection, Outbox, Server};
use crate::protocol::jsonrpc::{self, INVALID_REQUEST, Incoming, RpcError};

/// The largest message accepted on stdin.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Serve one client on `input`/`output` until EOF or `shutdown` resolves, then stop what
/// is in flight, waiting at most `drain` for calls to finish and answer.
pub async fn serve<R, W>(
    server: Arc<Server>,
    input: R,
    output: W,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let out = Outbox::lines(output);
    let connection = Connection::new(server.clone());
    let mut input = input;
    let mut line = Vec::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        line.clear();
        let read = tokio::select! {
            read = read_line(&mut input, &mut line, MAX_MESSAGE_BYTES) => read?,
            () = &mut shutdown => break,
        };
        match read {
            Line::Eof => break,
            Line::TooLong => {
                let error = RpcError::new(
                    INVALID_REQUEST,
                    format!("Invalid Request: the message exceeds {MAX_MESSAGE_BYTES} bytes"),
                );
                connection.handle(Incoming::Invalid { id: None, error }, &out).await;
            }
            Line::Complete => {
                if line.trim_ascii().is_empty() {
                    continue;
                }
                connection.handle(jsonrpc::parse(&line), &out).await;
            }
        }
    }
    server.runtime().shutdown();
    if !connection.drain(drain).await {
        tracing::warn!("calls still running after {drain:?}; exiting anyway");
    }
    Ok(())
}

enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Read up to and without the next `\n` into `line`. A line longer than `limit` is
/// consumed and discarded, and reported as too long.
async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
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

    async fn lines(input: &[u8], limit: usize) -> Vec<Result<String, ()>> {
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line(&mut reader, &mut line, limit).await.unwrap() {
                Line::Eof => return out,
                Line::TooLong => out.push(Err(())),
                Line::Complete => out.push(Ok(String::from_utf8(line.clone()).unwrap())),
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_and_capped() {
        let got = lines(b"ab\n0123456789\ncd\nlast", 5).await;
        assert_eq!(got, vec![Ok("ab".into()), Err(()), Ok("cd".into()), Ok("last".into())]);
    }
}
