//! Raw JSON-RPC clients of the two transports: one shared client per stdio server (requests
//! from every lane are pipelined on its stdin, and one reader routes what comes back), and
//! one HTTP/1.1 connection per lane (kept alive; a fresh one for each call it will cancel by
//! closing it). Both record what breaks the protocol's promises as they see it: answers to
//! ids never sent, second answers, progress after an answer or not increasing.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::{ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// How long any answer may take before it counts as lost: far beyond every limit the soak
/// configures (the longest call runs 1 s, plus grace and a 1 s cleanup).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// A kept-alive HTTP connection idle this long is not reused: the server closes one idle
/// for its `header_timeout_ms` (10 s by default), and a request written as it closes is
/// never read (HTTP/1.1's keep-alive race). Pooling clients expire theirs sooner for the
/// same reason (httpx after 5 s). Kept well below the server's, and without a check for
/// the server's close before reuse, so that a server closing an idle connection early is
/// still caught as a lost request.
const KEEPALIVE_EXPIRY: Duration = Duration::from_secs(5);

/// The 2026-07-28 request envelope, with a progress token when asked for.
pub fn meta(progress_token: Option<String>) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let Some(token) = progress_token {
        meta["progressToken"] = json!(token);
    }
    meta
}

/// A request's answer (a JSON-RPC response), with the progress values reported before it.
#[derive(Debug)]
pub struct Reply {
    pub message: Value,
    pub progress: Vec<f64>,
    /// How long the request waited for the client's own transport before its first byte
    /// went out: over stdio, behind other lanes' messages on the one shared stdin (a 5 MiB
    /// garbage line takes the server milliseconds to read and drop); over HTTP, zero.
    pub queued: Duration,
}

impl Reply {
    /// The first text content of a tool result ("" if none).
    pub fn text(&self) -> &str {
        self.message["result"]["content"][0]["text"].as_str().unwrap_or("")
    }

    pub fn is_tool_error(&self) -> bool {
        self.message["result"]["isError"] == true
    }

    pub fn is_result(&self) -> bool {
        self.message.get("result").is_some()
    }

    pub fn rpc_error(&self) -> Option<i64> {
        self.message["error"]["code"].as_i64()
    }
}

/// An answer that came for a request after the client had cancelled it.
#[derive(Debug)]
pub struct LateAnswer {
    pub id: u64,
    pub message: Value,
    /// From writing the cancel to reading the answer.
    pub after_cancel: Duration,
}

/// What the stdio reader saw besides the answers it routed.
#[derive(Debug, Default)]
pub struct StdioReport {
    /// Error responses with `"id": null` (what unparsable lines get).
    pub null_id_errors: u64,
    pub late: Vec<LateAnswer>,
    pub violations: Vec<String>,
    /// Requests written.
    pub sent: u64,
}

struct Pending {
    sender: Option<oneshot::Sender<Reply>>,
    progress: Vec<f64>,
    cancelled_at: Option<Instant>,
    answered: bool,
}

#[derive(Default)]
struct StdioState {
    /// Every request ever sent, answered or not, so a second answer is caught.
    pending: HashMap<u64, Pending>,
    report: StdioReport,
}

/// The client of one `cordon serve --stdio`, shared by every lane.
pub struct StdioClient {
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
    state: Mutex<StdioState>,
    next_id: AtomicU64,
}

impl StdioClient {
    /// Take over the child's pipes; a task reads its stdout until EOF (returned, to await
    /// once the server has exited).
    pub fn new(stdin: ChildStdin, stdout: ChildStdout) -> Result<(Arc<Self>, tokio::task::JoinHandle<()>)> {
        let sender = pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?;
        let receiver = pipe::Receiver::from_owned_fd(OwnedFd::from(stdout))?;
        let client = Arc::new(Self {
            stdin: tokio::sync::Mutex::new(Some(sender)),
            state: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        let reader = client.clone();
        let reading = tokio::spawn(async move { reader.read(receiver).await });
        Ok((client, reading))
    }

    async fn read(&self, receiver: pipe::Receiver) {
        let mut lines = BufReader::new(receiver).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            self.route(&line);
        }
        // EOF: whoever still waits learns it now rather than at its timeout.
        for pending in self.state.lock().unwrap().pending.values_mut() {
            pending.sender.take();
        }
    }

    fn route(&self, line: &str) {
        let mut state = self.state.lock().unwrap();
        let state = &mut *state;
        let violations = &mut state.report.violations;
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            violations.push(format!("stdout carried a line that is not JSON: {}", clip(line)));
            return;
        };
        if message["method"] == "notifications/progress" {
            let token = message["params"]["progressToken"].as_str().unwrap_or_default();
            let entry = token
                .strip_prefix('p')
                .and_then(|id| id.parse().ok())
                .and_then(|id: u64| state.pending.get_mut(&id));
            match (entry, message["params"]["progress"].as_f64()) {
                (Some(entry), Some(_)) if entry.answered && entry.cancelled_at.is_none() => {
                    violations.push(format!("progress for {token} after its answer"));
                }
                (Some(entry), Some(value)) => {
                    if entry.progress.last().is_some_and(|&last| value <= last) {
                        violations.push(format!(
                            "progress for {token} did not increase: {value} after {:?}",
                            entry.progress
                        ));
                    }
                    entry.progress.push(value);
                }
                _ => violations.push(format!("a progress notification nobody asked for: {}", clip(line))),
            }
            return;
        }
        let is_response = message.get("result").is_some() || message.get("error").is_some();
        match message.get("id") {
            // Unparsable lines are answered without an id (or with a null one).
            None | Some(Value::Null) if message.get("error").is_some() => state.report.null_id_errors += 1,
            Some(id) if is_response && id.as_u64().is_some() => {
                let id = id.as_u64().unwrap_or_default();
                let Some(entry) = state.pending.get_mut(&id) else {
                    violations.push(format!("an answer to id {id}, which was never sent"));
                    return;
                };
                if entry.answered {
                    violations.push(format!("a second answer to id {id}: {}", clip(line)));
                    return;
                }
                entry.answered = true;
                if let Some(at) = entry.cancelled_at {
                    state.report.late.push(LateAnswer { id, message, after_cancel: at.elapsed() });
                } else if let Some(sender) = entry.sender.take() {
                    let progress = std::mem::take(&mut entry.progress);
                    let _ = sender.send(Reply { message, progress, queued: Duration::ZERO });
                }
            }
            _ => violations.push(format!("an unexpected message: {}", clip(line))),
        }
    }

    /// Write `bytes` once stdin is free; how long that wait took.
    async fn write(&self, bytes: &[u8]) -> Result<Duration> {
        let waiting = Instant::now();
        let mut stdin = self.stdin.lock().await;
        let queued = waiting.elapsed();
        let pipe = stdin.as_mut().context("stdin is already closed")?;
        pipe.write_all(bytes).await.context("writing to the server's stdin")?;
        Ok(queued)
    }

    /// Write the request `build(id)` makes (one line) and register it; returns the id and
    /// where its answer will arrive.
    async fn send(
        &self,
        build: impl FnOnce(u64) -> Value,
    ) -> Result<(u64, oneshot::Receiver<Reply>, Duration)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        {
            let mut state = self.state.lock().unwrap();
            let pending =
                Pending { sender: Some(sender), progress: Vec::new(), cancelled_at: None, answered: false };
            state.pending.insert(id, pending);
            state.report.sent += 1;
        }
        // One message, one write, as a real client sends it.
        let mut line = serde_json::to_vec(&build(id))?;
        line.push(b'\n');
        let queued = self.write(&line).await?;
        Ok((id, receiver, queued))
    }

    /// A request and its answer.
    pub async fn request(&self, method: &str, params: Value, progress: bool) -> Result<Reply> {
        self.request_with(|id| request_json(id, method, params, progress)).await
    }

    /// A request built by `build(id)` (which may be malformed on purpose) and its answer.
    pub async fn request_with(&self, build: impl FnOnce(u64) -> Value) -> Result<Reply> {
        let (id, receiver, queued) = self.send(build).await?;
        match tokio::time::timeout(ANSWER_TIMEOUT, receiver).await {
            Ok(Ok(reply)) => Ok(Reply { queued, ..reply }),
            Ok(Err(_)) => bail!("request {id}: the server closed its stdout before answering"),
            Err(_) => bail!("request {id}: no answer within {ANSWER_TIMEOUT:?}: lost"),
        }
    }

    /// A request cancelled with `notifications/cancelled` after `after`, unless its answer
    /// came first (then returned). An answer after the cancel is recorded as late.
    pub async fn request_then_cancel(
        &self,
        method: &str,
        params: Value,
        after: Duration,
    ) -> Result<Option<Reply>> {
        let (id, mut receiver, _) = self.send(|id| request_json(id, method, params, false)).await?;
        match tokio::time::timeout(after, &mut receiver).await {
            Ok(Ok(reply)) => return Ok(Some(reply)),
            Ok(Err(_)) => bail!("request {id}: the server closed its stdout before answering"),
            Err(_) => {}
        }
        // Marked before the cancel goes out, under the reader's lock: an answer that races
        // with it is either already routed (and returned here) or recorded as late.
        let answered_first = {
            let mut state = self.state.lock().unwrap();
            let entry = state.pending.get_mut(&id).context("a pending request vanished")?;
            if !entry.answered {
                entry.cancelled_at = Some(Instant::now());
            }
            entry.answered
        };
        if answered_first {
            return Ok(Some(receiver.await.context("an answer routed but not delivered")?));
        }
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "soak"}});
        let mut line = serde_json::to_vec(&cancel)?;
        line.push(b'\n');
        self.write(&line).await?;
        Ok(None)
    }

    /// Bytes as they are (garbage lines), in one write.
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<()> {
        self.write(bytes).await.map(drop)
    }

    /// Close stdin: the server finishes what is in flight and exits.
    pub async fn close(&self) {
        self.stdin.lock().await.take();
    }

    /// What the reader saw (call once the server has exited, so nothing more comes).
    pub fn take_report(&self) -> StdioReport {
        std::mem::take(&mut self.state.lock().unwrap().report)
    }
}

fn request_json(id: u64, method: &str, mut params: Value, progress: bool) -> Value {
    params["_meta"] = meta(progress.then(|| format!("p{id}")));
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// One lane's HTTP client: a kept-alive connection to `cordon serve --http`.
pub struct HttpClient {
    port: u16,
    connection: Option<BufReader<TcpStream>>,
    /// Requests answered on the kept-alive connection, and when the last answer ended:
    /// said when a reused connection closes without answering (the keep-alive race).
    served: u32,
    last_answer: Option<std::time::Instant>,
    ids: Arc<AtomicU64>,
}

impl HttpClient {
    pub fn new(port: u16, ids: Arc<AtomicU64>) -> Self {
        Self { port, connection: None, served: 0, last_answer: None, ids }
    }

    fn head(&self, mcp_method: &str, name: Option<&str>, length: usize) -> String {
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {mcp_method}\r\n",
            self.port
        );
        if let Some(name) = name {
            head.push_str(&format!("Mcp-Name: {name}\r\n"));
        }
        head.push_str(&format!("Content-Length: {length}\r\n\r\n"));
        head
    }

    async fn connect(&self) -> Result<BufReader<TcpStream>> {
        let stream =
            TcpStream::connect(("127.0.0.1", self.port)).await.context("connecting to the HTTP server")?;
        stream.set_nodelay(true)?;
        Ok(BufReader::new(stream))
    }

    /// POST `body` on the kept-alive connection (made anew when the server closed it).
    pub async fn post(&mut self, mcp_method: &str, name: Option<&str>, body: &[u8]) -> Result<HttpAnswer> {
        if self.last_answer.is_some_and(|at| at.elapsed() > KEEPALIVE_EXPIRY) {
            self.connection = None;
        }
        if self.connection.is_none() {
            self.connection = Some(self.connect().await?);
            self.served = 0;
        }
        let reuse = match self.last_answer.filter(|_| self.served > 0) {
            Some(at) => {
                format!("a connection that had answered {} requests, idle {:?}", self.served, at.elapsed())
            }
            None => "a new connection".to_owned(),
        };
        let mut request = self.head(mcp_method, name, body.len()).into_bytes();
        request.extend_from_slice(body);
        let stream = self.connection.as_mut().context("no connection")?;
        stream.get_mut().write_all(&request).await.context("sending a request")?;
        let result = tokio::time::timeout(ANSWER_TIMEOUT, read_response(stream)).await;
        match result {
            Ok(Ok((answer, keep_alive))) => {
                self.served += 1;
                self.last_answer = Some(std::time::Instant::now());
                if !keep_alive {
                    self.connection = None;
                }
                Ok(answer)
            }
            Ok(Err(error)) => {
                self.connection = None;
                Err(error.context(format!("{mcp_method} on {reuse}")))
            }
            Err(_) => {
                self.connection = None;
                bail!("no HTTP answer within {ANSWER_TIMEOUT:?}: lost")
            }
        }
    }

    /// A body larger than the server accepts, on a connection of its own: the answer is
    /// read while the body is still being written (the server may answer before reading it).
    pub async fn post_oversized(&self, bytes: usize) -> Result<HttpAnswer> {
        let stream = self.connect().await?.into_inner();
        let (read, mut write) = stream.into_split();
        let head = self.head("tools/list", None, bytes);
        let writer = tokio::spawn(async move {
            let _ = write.write_all(head.as_bytes()).await;
            let chunk = vec![b' '; 64 << 10];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                if write.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                left -= n;
            }
            write
        });
        let mut read = BufReader::new(read);
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, read_response(&mut read)).await;
        writer.abort();
        Ok(answer.context("no HTTP answer to an oversized body")??.0)
    }

    /// A JSON-RPC request and its answer: its one response, after the progress reported.
    pub async fn request(
        &mut self,
        method: &str,
        name: Option<&str>,
        params: Value,
        progress: bool,
    ) -> Result<Reply> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = request_json(id, method, params, progress).to_string();
        let answer = self.post(method, name, body.as_bytes()).await?;
        reply_from(&answer, id)
    }

    /// A tools/call on a connection of its own, closed after `after` unless the answer came
    /// first (then returned): closing the response stream is the cancel.
    pub async fn call_then_close(&self, name: &str, params: Value, after: Duration) -> Result<Option<Reply>> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = request_json(id, "tools/call", params, false).to_string();
        let mut stream = self.connect().await?;
        let mut request = self.head("tools/call", Some(name), body.len()).into_bytes();
        request.extend_from_slice(body.as_bytes());
        stream.get_mut().write_all(&request).await.context("sending a request")?;
        match tokio::time::timeout(after, read_response(&mut stream)).await {
            Ok(Ok((answer, _))) => Ok(Some(reply_from(&answer, id)?)),
            Ok(Err(error)) => Err(error),
            // Dropping the stream closes the connection.
            Err(_) => Ok(None),
        }
    }

    /// Close the kept-alive connection.
    pub fn close(&mut self) {
        self.connection = None;
    }
}

/// The one response to request `id` in an HTTP answer (JSON, or SSE events), with the
/// progress before it; an error when the answer breaks the protocol.
pub fn reply_from(answer: &HttpAnswer, id: u64) -> Result<Reply> {
    let messages: Vec<Value> = if answer.content_type.starts_with("text/event-stream") {
        let mut messages = Vec::new();
        for data in answer.body.lines().filter_map(|line| line.strip_prefix("data:")) {
            messages.push(
                serde_json::from_str(data.trim())
                    .with_context(|| format!("an SSE event that is not JSON: {}", clip(data)))?,
            );
        }
        messages
    } else if answer.content_type.starts_with("application/json") {
        vec![
            serde_json::from_str(&answer.body)
                .with_context(|| format!("a body that is not JSON: {}", clip(&answer.body)))?,
        ]
    } else {
        bail!(
            "HTTP {} with {:?} and no JSON-RPC message: {}",
            answer.status,
            answer.content_type,
            clip(&answer.body)
        );
    };
    let mut progress = Vec::new();
    let mut response = None;
    for message in messages {
        if message["method"] == "notifications/progress" {
            if response.is_some() {
                bail!("progress after the answer to {id}");
            }
            let value = message["params"]["progress"].as_f64().context("progress without a value")?;
            if progress.last().is_some_and(|&last| value <= last) {
                bail!("progress for {id} did not increase: {value} after {progress:?}");
            }
            progress.push(value);
        } else if message.get("result").is_some() || message.get("error").is_some() {
            if response.is_some() {
                bail!("a second answer to {id}: {message}");
            }
            // Unparsable requests are answered with a null id.
            if message["id"] != json!(id) && !message["id"].is_null() {
                bail!("an answer to {} on the stream of {id}", message["id"]);
            }
            response = Some(message);
        } else {
            bail!("an unexpected message on the stream of {id}: {message}");
        }
    }
    let message =
        response.with_context(|| format!("HTTP {}: no answer to {id} in the stream", answer.status))?;
    Ok(Reply { message, progress, queued: Duration::ZERO })
}

/// Read one HTTP/1.1 response (a `Content-Length` or chunked body); returns it and whether
/// the connection stays open.
async fn read_response(
    stream: &mut BufReader<impl tokio::io::AsyncRead + Unpin>,
) -> Result<(HttpAnswer, bool)> {
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        bail!("the server closed the connection without answering");
    }
    let status: u16 = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP status line: {}", clip(&line)))?;
    let (mut length, mut chunked, mut keep_alive, mut content_type) = (None, false, true, String::new());
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            bail!("the connection closed in the headers");
        }
        let header = line.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            break;
        }
        if let Some(value) = header.strip_prefix("content-length:") {
            length = Some(value.trim().parse::<usize>()?);
        } else if let Some(value) = header.strip_prefix("content-type:") {
            content_type = value.trim().to_owned();
        } else if header.starts_with("transfer-encoding:") && header.contains("chunked") {
            chunked = true;
        } else if header.starts_with("connection:") && header.contains("close") {
            keep_alive = false;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            stream.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim_end().split(';').next().unwrap_or_default(), 16)
                .with_context(|| format!("a bad chunk size: {}", clip(&line)))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = length {
        body.resize(length, 0);
        stream.read_exact(&mut body).await?;
    } else {
        stream.read_to_end(&mut body).await?;
        keep_alive = false;
    }
    let body = String::from_utf8(body).context("a body that is not UTF-8")?;
    Ok((HttpAnswer { status, content_type, body }, keep_alive))
}

/// At most 200 characters of `text`, for messages.
pub fn clip(text: &str) -> String {
    let mut clipped: String = text.chars().take(200).collect();
    if clipped.len() < text.len() {
        clipped.push('…');
    }
    clipped
}
