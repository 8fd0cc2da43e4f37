//! Entry points for the fuzz targets in `fuzz/` (`cargo xtask fuzz`): thin wrappers that
//! run the server's own parsing and validation code on arbitrary input, without sockets,
//! processes or guests. Not an API: nothing else should call them.
//!
//! - [`Dispatcher`]: stdio framing, JSON-RPC parsing and dispatch, as `serve --stdio`
//!   does it, and dispatch of what survives the HTTP ladder.
//! - [`http_ladder`]: the HTTP transport's validation ladder (origin, host, path, method,
//!   `Accept`, `Content-Type`, JSON, envelope, metadata and `Mcp-Param-*` headers), in its
//!   order, for a request already read.
//! - [`config`]: a config file's text to a [`Config`].

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::header::{self, HeaderMap};
use hyper::{Method, Request, StatusCode};
use serde_json::Value;
use tokio::io::AsyncWrite;

use crate::config::Config;
use crate::dispatch::{self, Connection, Outbox, Server};
use crate::protocol::jsonrpc::{self, Incoming};
use crate::runtime::{EngineSettings, Runtime, RuntimeSettings, ToolSpec};
use crate::transport::{http, stdio};

/// Why the fuzzing harness could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("starting a tokio runtime: {0}")]
    Tokio(#[from] std::io::Error),
    /// `Runtime::new` reports with anyhow, which is not a `std::error::Error`.
    #[error("building the runtime: {0:#}")]
    Runtime(anyhow::Error),
}

/// A server with no components (so every `tools/call` names an unknown tool and no guest
/// ever runs) and a current-thread tokio runtime to drive it.
pub struct Dispatcher {
    tokio: tokio::runtime::Runtime,
    server: Arc<Server>,
}

impl Dispatcher {
    pub fn new() -> Result<Self, SetupError> {
        let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        // The smallest pool: no call ever gets a slot, and the engine reserves less.
        let engine = EngineSettings {
            max_concurrent_calls: 1,
            max_memory_bytes: 1 << 20,
            cache_dir: None,
            ..EngineSettings::default()
        };
        let runtime = Runtime::new(RuntimeSettings { engine, ..RuntimeSettings::default() })
            .map_err(SetupError::Runtime)?;
        let server = Server::new(Arc::new(runtime), Duration::from_millis(50));
        Ok(Self { tokio, server })
    }

    /// What `serve --stdio` does with `input` on one connection: split it into lines,
    /// parse each and dispatch it. Returns the lines written to stdout. `buffer` is the
    /// reader's buffer size, so that lines straddle reads in every way.
    pub fn stdio(&self, input: &[u8], buffer: usize) -> Vec<Vec<u8>> {
        let written = SharedBuffer::default();
        let out = Outbox::lines(written.clone());
        let connection = Connection::new(self.server.clone());
        let reader = std::io::BufReader::with_capacity(buffer.max(1), input);
        // As `stdio::serve`'s reader thread does: admit, then handle or refuse.
        stdio::read_messages(reader, |message| match stdio::admit(&connection, message) {
            Ok(admitted) => self.tokio.block_on(connection.handle_admitted(admitted, &out)),
            Err(refusal) => {
                self.tokio.block_on(out.send(jsonrpc::failure(refusal.id(), &refusal.rpc_error())))
            }
        })
        .expect("reading from a slice never fails");
        let bytes = std::mem::take(&mut *written.0.lock().unwrap());
        let mut lines: Vec<Vec<u8>> = bytes.split(|&byte| byte == b'\n').map(<[u8]>::to_vec).collect();
        // Every message ends with a newline: the last piece is empty.
        assert_eq!(lines.pop().as_deref(), Some(&b""[..]), "the output does not end with a newline");
        lines
    }

    /// Dispatch one message on a fresh connection (as HTTP does for each request; `legacy`
    /// as for a 2025-era request). Returns every message sent for it.
    pub fn handle(&self, message: Incoming, legacy: bool) -> Vec<Value> {
        let connection = Connection::new(self.server.clone());
        if legacy {
            connection.set_legacy();
        }
        // Without guests a message causes at most one answer: the channel never fills.
        let (out, mut sent_to) = Outbox::channel(&self.server, 16);
        self.tokio.block_on(connection.handle(message, &out));
        let mut sent = Vec::new();
        while let Ok(message) = sent_to.try_recv() {
            sent.push(message.value());
        }
        sent
    }
}

/// What the stdio transport's line reader found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line, in the caller's buffer, without its `\n`.
    Complete,
    /// A line longer than the limit, skipped.
    TooLong,
    Eof,
}

/// The stdio transport's line reader, with a chosen limit: `line` receives the line.
pub fn stdio_line(input: &mut impl std::io::BufRead, line: &mut Vec<u8>, limit: usize) -> Line {
    match stdio::read_line(input, line, limit).expect("reading from a slice never fails") {
        stdio::Line::Complete => Line::Complete,
        stdio::Line::TooLong => Line::TooLong,
        stdio::Line::Eof => Line::Eof,
    }
}

/// An `AsyncWrite` into a shared vector: the stdio connection's stdout.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl AsyncWrite for SharedBuffer {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Where a request leaves the HTTP validation ladder.
#[derive(Debug)]
pub enum Verdict {
    /// Refused with this status before dispatch.
    Refused(StatusCode),
    /// A notification: 202, nothing dispatched (there is no live session to give it to).
    Accepted,
    /// A request to dispatch, in the era the ladder chose.
    Dispatch { message: Incoming, legacy: bool },
}

/// The HTTP server's validation ladder (`serve_request` in `transport/http.rs`) for a
/// request whose body has been read, with no live 2025-era session; `tools` stands for the
/// runtime's tools.
pub fn http_ladder(request: &Request<&[u8]>, settings: &http::HttpSettings, tools: &[ToolSpec]) -> Verdict {
    use Verdict::Refused;
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN)
        && !http::origin_allowed(origin, &settings.allowed_hosts)
    {
        return Refused(StatusCode::FORBIDDEN);
    }
    if !http::host_allowed(headers.get(header::HOST), &settings.allowed_hosts) {
        return Refused(StatusCode::FORBIDDEN);
    }
    if request.uri().path() != settings.path {
        return Refused(StatusCode::NOT_FOUND);
    }
    let session_id = http::header_text(headers, "mcp-session-id");
    if request.method() == Method::DELETE && session_id.is_some() {
        return Refused(StatusCode::NOT_FOUND);
    }
    if request.method() != Method::POST {
        return Refused(StatusCode::METHOD_NOT_ALLOWED);
    }
    if !http::accepts_json_and_sse(headers) {
        return Refused(StatusCode::NOT_ACCEPTABLE);
    }
    if !http::is_json(headers) {
        return Refused(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    if request.body().len() > settings.max_body_bytes {
        return Refused(StatusCode::PAYLOAD_TOO_LARGE);
    }
    let (id, method, params) = match jsonrpc::parse(request.body()) {
        Incoming::Request { id, method, params } => (id, method, params),
        Incoming::Notification { .. } | Incoming::Response { .. } if session_id.is_some() => {
            return Refused(StatusCode::NOT_FOUND);
        }
        Incoming::Notification { .. } | Incoming::Response { .. } => return Verdict::Accepted,
        Incoming::Unanswered { .. } | Incoming::Invalid { .. } => return Refused(StatusCode::BAD_REQUEST),
    };
    let legacy = http::is_legacy(headers, &method, params.as_ref(), session_id.is_some());
    if !legacy {
        let tool = (method == "tools/call")
            .then(|| params.as_ref().and_then(|params| params.get("name")).and_then(Value::as_str))
            .flatten()
            .and_then(|name| tools.iter().find(|tool| tool.name == name));
        let check_params = || match tool {
            Some(tool) => check_param_headers(headers, tool, params.as_ref()),
            None => Ok(()),
        };
        if let Err(response) = http::check_modern(headers, &id, &method, params.as_ref(), check_params) {
            return Refused(response.status());
        }
    } else if session_id.is_some() && method != "initialize" {
        return Refused(StatusCode::NOT_FOUND);
    }
    Verdict::Dispatch { message: Incoming::Request { id, method, params }, legacy }
}

/// The `Mcp-Param-*` check of a `tools/call` on its own.
pub fn check_param_headers(
    headers: &HeaderMap,
    tool: &ToolSpec,
    params: Option<&Value>,
) -> Result<(), String> {
    dispatch::check_param_headers(tool, params, |name| headers.get(name).map(|value| value.as_bytes()), true)
}

/// An `Mcp-Param-*` value decoded (`None`: invalid base64 or UTF-8).
pub fn decode_param(value: &str) -> Option<String> {
    crate::protocol::mcp::decode_header_value(value)
}

/// A config file's text, read as `Config::load` reads it.
pub fn config(text: &str) -> Option<Config> {
    toml::from_str(text).ok()
}
