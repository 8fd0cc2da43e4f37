//! A tool's log reaching the client (`notifications/message`), through the real binary
//! over stdio and HTTP, in both revisions: only when the client asked for a level (the
//! request's `_meta` `logLevel` in 2026-07-28, `logging/setLevel` in 2025-11-25), at or
//! above it, named after the tool, on the call's own stream before its answer, and a log
//! flood rate-limited with its drops counted and said once. Every message is validated
//! against the official schema of its revision. The guests are the conformance fixture
//! (`test_tool_with_logging`: three info lines) and the hostile component (`log_flood`).

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::wire::{Answer, Schema, line_channel, meta, parse_answer, spawn_http_server};
use cordon::dispatch::{CLIENT_LOG_BURST, CLIENT_LOGS_PER_SECOND};
use cordon::runtime::CLIENT_LOG_QUEUE;
use serde_json::{Value, json};

const THREE_LINES: [&str; 3] = ["Tool execution started", "Tool processing data", "Tool execution completed"];

/// A config serving the conformance fixture and the hostile component.
fn config(name: &str) -> std::path::PathBuf {
    let guests = cordon::paths::default_tools_dir();
    let fixture = guests.join("conformance-fixture.wasm");
    assert!(fixture.is_file(), "{} is missing: run `cargo xtask guests` first", fixture.display());
    let dir = common::fresh_dir(name);
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nprogress_interval_ms = 10\n\
             [http]\nsse_after_ms = 200\nkeep_alive_ms = 100\n\n\
             [[components]]\npath = {fixture:?}\n\n\
             [[components]]\npath = {hostile:?}\nlimits = {{ max_duration_ms = 20000 }}\n",
            fixture = fixture.display().to_string(),
            hostile = common::hostile().display().to_string(),
        ),
    )
    .unwrap();
    config
}

/// `cordon serve --stdio`: lines in, every line out checked against the schema of the
/// revision of the request it belongs to.
struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    schema: Schema,
}

impl StdioServer {
    fn start(name: &str, legacy: bool) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["serve", "--stdio", "--config"])
            .arg(config(name))
            .env("CORDON_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = line_channel(stdout);
        let stdin = child.stdin.take().unwrap();
        let schema = if legacy { Schema::legacy() } else { Schema::new() };
        Self { child, stdin, lines, schema }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Every message up to and including the answer to `id` (within 20 s), each checked.
    fn until_answer(&mut self, id: i64, method: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut messages = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("the answer within 20 s");
            let message: Value = serde_json::from_str(&line).unwrap();
            let answers = message.get("id") == Some(&json!(id));
            self.schema.check_sent(&message, answers.then_some(method));
            messages.push(message);
            if answers {
                return messages;
            }
        }
    }

    fn initialize(&mut self) {
        self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        );
        let answer = self.until_answer(1, "initialize");
        assert_eq!(answer.last().unwrap()["result"]["capabilities"]["logging"], json!({}));
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn envelope(log_level: Option<&str>) -> Value {
    let mut envelope = meta();
    if let Some(level) = log_level {
        envelope["io.modelcontextprotocol/logLevel"] = json!(level);
    }
    envelope
}

/// The `notifications/message` among `messages`, each named after `tool`.
fn log_messages<'a>(messages: &'a [Value], tool: &str) -> Vec<&'a Value> {
    let logs: Vec<&Value> =
        messages.iter().filter(|message| message["method"] == "notifications/message").collect();
    for log in &logs {
        assert_eq!(log["params"]["logger"], tool, "{log}");
    }
    logs
}

/// The three info lines of `test_tool_with_logging`, in order, all before the answer.
fn assert_three_info_lines(messages: &[Value]) {
    let logs = log_messages(messages, "test_tool_with_logging");
    let data: Vec<&Value> = logs.iter().map(|log| &log["params"]["data"]).collect();
    assert_eq!(data, THREE_LINES.map(|line| json!(line)).iter().collect::<Vec<_>>(), "{messages:?}");
    assert!(logs.iter().all(|log| log["params"]["level"] == "info"));
    let answer = messages.last().unwrap();
    assert_eq!(answer["result"]["content"][0]["text"], "Logged three messages.", "{answer}");
}

#[test]
fn stdio_2026_sends_a_tools_log_at_or_above_the_requests_level_and_none_without_one() {
    let mut server = StdioServer::start("log-stdio-2026", false);
    // Discovery advertises logging.
    server.request(1, "server/discover", json!({"_meta": meta()}));
    let discovered = server.until_answer(1, "server/discover");
    assert_eq!(discovered[0]["result"]["capabilities"]["logging"], json!({}));

    let call = |level: Option<&str>| json!({"name": "test_tool_with_logging", "arguments": {}, "_meta": envelope(level)});
    for (id, level) in [(2, "debug"), (3, "info")] {
        server.request(id, "tools/call", call(Some(level)));
        assert_three_info_lines(&server.until_answer(id, "tools/call"));
    }
    // Above info, and without a level at all: the answer alone.
    for (id, level) in [(4, Some("notice")), (5, Some("warning")), (6, Some("emergency")), (7, None)] {
        server.request(id, "tools/call", call(level));
        let messages = server.until_answer(id, "tools/call");
        assert_eq!(messages.len(), 1, "{level:?}: {messages:?}");
    }
    // A level that is none of the eight is refused.
    server.request(8, "tools/call", call(Some("loud")));
    let refused = server.until_answer(8, "tools/call");
    assert_eq!(refused[0]["error"]["code"], -32602, "{refused:?}");
    // Warnings pass a `warning` request; the operator keeps serving after all this.
    server.request(
        9,
        "tools/call",
        json!({"name": "log_flood", "arguments": {"count": 2, "bytes": 5},
        "_meta": envelope(Some("warning"))}),
    );
    let messages = server.until_answer(9, "tools/call");
    let logs = log_messages(&messages, "log_flood");
    assert_eq!(logs.len(), 2, "{messages:?}");
    assert!(logs.iter().all(|log| log["params"]["level"] == "warning" && log["params"]["data"] == "xxxxx"));
}

#[test]
fn stdio_2025_sends_a_tools_log_once_the_client_set_a_level() {
    let mut server = StdioServer::start("log-stdio-2025", true);
    server.initialize();
    let call = json!({"name": "test_tool_with_logging", "arguments": {}});
    // No level set: the spec lets the server choose, and it sends nothing.
    server.request(2, "tools/call", call.clone());
    assert_eq!(server.until_answer(2, "tools/call").len(), 1);

    server.request(3, "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(server.until_answer(3, "logging/setLevel")[0]["result"], json!({}));
    server.request(4, "tools/call", call.clone());
    assert_three_info_lines(&server.until_answer(4, "tools/call"));

    server.request(5, "logging/setLevel", json!({"level": "error"}));
    assert_eq!(server.until_answer(5, "logging/setLevel")[0]["result"], json!({}));
    server.request(6, "tools/call", call.clone());
    assert_eq!(server.until_answer(6, "tools/call").len(), 1, "info is below error");

    for (id, params) in [(7, json!({"level": "loud"})), (8, json!({})), (9, json!({"level": 3}))] {
        server.request(id, "logging/setLevel", params);
        assert_eq!(server.until_answer(id, "logging/setLevel")[0]["error"]["code"], -32602);
    }
    // The refused levels changed nothing: still `error`.
    server.request(10, "tools/call", call);
    assert_eq!(server.until_answer(10, "tools/call").len(), 1);
}

#[test]
fn a_log_flood_is_rate_limited_and_its_drops_are_counted_and_said_once() {
    const LINES: u64 = 20_000;
    let mut server = StdioServer::start("log-flood", false);
    let started = Instant::now();
    server.request(
        1,
        "tools/call",
        json!({"name": "log_flood", "arguments": {"count": LINES, "bytes": 200}, "_meta": envelope(Some("debug"))}),
    );
    let messages = server.until_answer(1, "tools/call");
    let elapsed = started.elapsed();
    assert_eq!(messages.last().unwrap()["result"]["content"][0]["text"], format!("logged {LINES} lines"));
    let logs = log_messages(&messages, "log_flood");
    let (notice, lines) = logs.split_last().expect("the drop notice");
    assert!(lines.iter().all(|line| line["params"]["data"].as_str().unwrap().len() == 200));
    // The burst, the rate over the call's life, and what the queue held at its end.
    let allowed = CLIENT_LOG_BURST as u64
        + (elapsed.as_secs_f64() * CLIENT_LOGS_PER_SECOND as f64).ceil() as u64
        + CLIENT_LOG_QUEUE as u64;
    assert!((lines.len() as u64) <= allowed, "{} lines in {elapsed:?}", lines.len());
    // Said once, as a warning, with the exact count: every line was sent or dropped.
    assert_eq!(notice["params"]["level"], "warning", "{notice}");
    let text = notice["params"]["data"].as_str().unwrap();
    let dropped: u64 = text.split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(dropped + lines.len() as u64, LINES, "{text}");
    assert_eq!(
        logs.iter().filter(|log| log["params"]["data"].as_str().unwrap().contains("dropped")).count(),
        1
    );
    // The server serves on.
    server.request(2, "tools/call", json!({"name": "test_simple_text", "arguments": {}, "_meta": meta()}));
    assert_eq!(server.until_answer(2, "tools/call").len(), 1);
}

fn post(port: u16, headers: &[(&str, &str)], body: &Value, schema: &Schema) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = body.to_string();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    BufReader::new(stream).read_to_end(&mut raw).unwrap();
    parse_answer(&String::from_utf8(raw).unwrap(), schema)
}

struct Http {
    child: Child,
    port: u16,
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn http_sends_a_tools_log_on_the_calls_sse_stream_in_both_revisions() {
    let (child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config("log-http"));
    let server = Http { child, port };
    let modern = Schema::new();
    let headers = [
        ACCEPT,
        JSON,
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "test_tool_with_logging"),
    ];
    let call = |id: i64, level: Option<&str>| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_tool_with_logging", "arguments": {}, "_meta": envelope(level)}})
    };
    let answer = post(server.port, &headers, &call(1, Some("info")), &modern);
    assert_eq!(answer.status, 200);
    assert!(answer.headers.contains(&("content-type".into(), "text/event-stream".into())));
    assert_three_info_lines(&answer.messages);
    let quiet = post(server.port, &headers, &call(2, None), &modern);
    assert_eq!(quiet.messages.len(), 1, "{:?}", quiet.messages);
    // `logging/setLevel` is gone in 2026-07-28.
    let set_level = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
        "params": {"level": "debug", "_meta": meta()}});
    let mut set_headers = headers[..3].to_vec();
    set_headers.push(("Mcp-Method", "logging/setLevel"));
    let answer = post(server.port, &set_headers, &set_level, &modern);
    assert_eq!(answer.status, 404);
    assert_eq!(answer.messages[0]["error"]["code"], -32601);

    // 2025-11-25: the level is the session's.
    let legacy = Schema::legacy();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let answer = post(server.port, &[ACCEPT, JSON], &init, &legacy);
    assert_eq!(answer.messages[0]["result"]["capabilities"]["logging"], json!({}));
    let session = answer
        .headers
        .iter()
        .find(|(name, _)| name == "mcp-session-id")
        .map(|(_, value)| value.clone())
        .expect("a session");
    let headers = [ACCEPT, JSON, ("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", &session)];
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "test_tool_with_logging", "arguments": {}}});
    assert_eq!(post(server.port, &headers, &call, &legacy).messages.len(), 1, "no level set yet");
    let set_level =
        json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "info"}});
    assert_eq!(post(server.port, &headers, &set_level, &legacy).messages[0]["result"], json!({}));
    let answer = post(server.port, &headers, &call, &legacy);
    assert!(answer.headers.contains(&("content-type".into(), "text/event-stream".into())));
    assert_three_info_lines(&answer.messages);
    let bad =
        json!({"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": {"level": "verbose"}});
    assert_eq!(post(server.port, &headers, &bad, &legacy).messages[0]["error"]["code"], -32602);
}

/// A cancel read while a finished call's held log lines go out ahead of its answer (its
/// client reads slowly) means no further message for the request, as the spec says: at
/// most the line already on its way. Before, every line held (up to `CLIENT_LOG_QUEUE`),
/// the dropped-lines notice and the last progress still went out; only the answer did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_read_while_held_log_lines_go_out_stops_them() {
    use cordon::dispatch::{Connection, Outbox, Server};
    use cordon::protocol::jsonrpc;
    use cordon::runtime::{ComponentOptions, Runtime};
    let dir = common::fresh_dir("client-log-cancel");
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let options = ComponentOptions {
        limits: common::quick_limits(),
        data_dir: Some(dir.clone()),
        ..Default::default()
    };
    runtime.load_file(&common::hostile(), options).await.unwrap();
    let server = Server::new(Arc::new(runtime), Duration::from_millis(10));
    let connection = Connection::new(server.clone());
    // Room for one message: the client reads nothing until the tool is done.
    let (out, mut sent) = Outbox::channel(&server, 1);
    let mut envelope = envelope(Some("warning"));
    envelope["progressToken"] = json!("p");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "log_flood", "arguments": {"count": 200, "bytes": 8, "then_create": "/data/flooded"},
        "_meta": envelope}});
    connection.handle(jsonrpc::classify(call), &out).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("flooded").exists() {
        assert!(Instant::now() < deadline, "the tool never finished its lines");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // One message read: the one waiting goes in, and the next waits again.
    let mut received = vec![sent.recv().await.unwrap()];
    while sent.len() < sent.max_capacity() {
        assert!(Instant::now() < deadline, "nothing more was sent");
        tokio::task::yield_now().await;
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}});
    connection.handle(jsonrpc::classify(cancel), &out).await;
    let after_cancel = received.len();
    while server.runtime().pool_usage().calls != 0 {
        assert!(Instant::now() < deadline, "the call never ended");
        while let Ok(message) = sent.try_recv() {
            received.push(message);
        }
        tokio::task::yield_now().await;
    }
    while let Ok(message) = sent.try_recv() {
        received.push(message);
    }
    let received: Vec<Value> = received.iter().map(|message| message.value()).collect();
    let schema = Schema::new();
    for message in &received {
        schema.check_sent(message, None);
        assert_ne!(message.get("id"), Some(&json!(2)), "the cancelled call was answered: {message}");
    }
    // The one in the channel and the one waiting to go in when the cancel was read.
    let late = received.len() - after_cancel;
    assert!(late <= 2, "{late} messages after the cancel: {:?}", &received[after_cancel..]);
    server.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}
