//! `cordon serve --http` as a raw HTTP/1.1 client sees it: the validation ladder, JSON and
//! SSE answers, cancel by disconnect, shutdown, 1,000 concurrent streams. Every JSON-RPC
//! message received is validated against the official MCP schema of the client's revision
//! (2026-07-28, or 2025-11-25 for a legacy session). The real-client suite (the Python SDK over HTTP) is in `tests/e2e/`.

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::wire::{Answer, Schema, examples_config, meta, parse_answer, spawn_http_server};
use serde_json::{Value, json};

struct Server {
    child: Child,
    port: u16,
    schema: Arc<Schema>,
}

impl Server {
    fn start(name: &str) -> Self {
        Self::start_with(name, "")
    }

    /// A server with the example tools and the config text `extra` (more components).
    fn start_with(name: &str, extra: &str) -> Self {
        Self::start_with_tail(name, extra, "")
    }

    /// As `start_with`, and `tail` appended to the config (after the example tools' table).
    fn start_with_tail(name: &str, extra: &str, tail: &str) -> Self {
        Self::start_with_http(
            name,
            &format!(
                "[http]\nbody_timeout_ms = 500\nmax_body_kb = 1024\nsse_after_ms = 200\nkeep_alive_ms = 100\n{extra}"
            ),
            tail,
        )
    }

    /// A server with the example tools, `http` as its config's text before them (the
    /// `[http]` table, whole), and `tail` after them.
    fn start_with_http(name: &str, http: &str, tail: &str) -> Self {
        let config = examples_config(name, http);
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(tail);
        std::fs::write(&config, text).unwrap();
        let (child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config);
        Self { child, port, schema: Arc::new(Schema::new()) }
    }

    fn post(&self, headers: &[(&str, &str)], body: &str) -> Answer {
        post(self.port, headers, body.as_bytes(), &self.schema)
    }

    /// A modern tools/call with every header right.
    fn call(&self, id: i64, tool: &str, arguments: Value, extra_meta: Value) -> Answer {
        let mut envelope = meta();
        envelope.as_object_mut().unwrap().extend(extra_meta.as_object().cloned().unwrap_or_default());
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": envelope}});
        self.post(&modern_headers("tools/call", Some(tool)), &body.to_string())
    }

    fn locks(&self) -> String {
        let answer = self.call(900, "locks", json!({}), json!({}));
        answer.messages.last().unwrap()["result"]["content"][0]["text"].as_str().unwrap().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Answer {
    fn error_code(&self) -> Option<i64> {
        self.messages.last()?.get("error")?.get("code")?.as_i64()
    }
}

fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    headers
}

fn write_request(stream: &mut TcpStream, port: u16, method: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
}

fn post(port: u16, headers: &[(&str, &str)], body: &[u8], schema: &Schema) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write_request(&mut stream, port, "POST", headers, body);
    read_answer(stream, schema)
}

fn read_answer(stream: TcpStream, schema: &Schema) -> Answer {
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    BufReader::new(stream).read_to_end(&mut raw).unwrap();
    parse_answer(&String::from_utf8(raw).unwrap(), schema)
}

#[test]
fn a_call_is_answered_with_json_and_progress_turns_it_into_sse() {
    // A quiet call stays JSON however loaded the machine: only progress makes a stream.
    let server = Server::start_with_http("http-basic", "[http]\nsse_after_ms = 60000\n", "");
    let answer = server.call(1, "echo", json!({"text": "hi"}), json!({}));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.messages[0]["result"]["content"][0]["text"], "hi");

    let answer =
        server.call(2, "reindex", json!({"collection": "c", "step_ms": 20}), json!({"progressToken": "p"}));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("text/event-stream"));
    assert_eq!(answer.header("x-accel-buffering"), Some("no"));
    let (progress, last) = answer.messages.split_at(answer.messages.len() - 1);
    assert!(!progress.is_empty());
    assert!(progress.iter().all(|message| message["params"]["progressToken"] == "p"));
    assert_eq!(last[0]["id"], 2);
    assert_eq!(last[0]["result"]["content"][0]["text"], "Reindexed 120 documents in c");
}

#[test]
fn a_quiet_call_becomes_an_sse_stream_with_keep_alives() {
    let server = Server::start("http-quiet");
    let answer = server.call(1, "spin", json!({"seconds": 0.6}), json!({}));
    assert_eq!(answer.header("content-type"), Some("text/event-stream"));
    assert!(answer.body.contains(": keep-alive"), "{}", answer.body);
    assert!(
        answer.messages.last().unwrap()["result"]["content"][0]["text"].as_str().unwrap().starts_with("Spun")
    );
}

#[test]
fn the_validation_ladder_answers_each_refusal_with_its_status() {
    let server = Server::start("http-ladder");
    let port = server.port;
    let list = |id: i64, meta: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta}}).to_string()
    };
    let old_meta = json!({"io.modelcontextprotocol/protocolVersion": "v999.0.0", "io.modelcontextprotocol/clientCapabilities": {}});

    // Methods and paths.
    for method in ["GET", "DELETE", "PUT"] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write_request(&mut stream, port, method, &modern_headers("tools/list", None), b"");
        let answer = read_answer(stream, &server.schema);
        assert_eq!(answer.status, 405, "{method}");
        // Without a session's id, only POST is served (a DELETE was once allowed here).
        assert_eq!(answer.header("allow"), Some("POST"));
    }
    // Accept and Content-Type.
    let no_sse = [("Accept", "application/json"), ("Content-Type", "application/json")];
    assert_eq!(server.post(&no_sse, &list(1, meta())).status, 406);
    let text = [("Accept", "application/json, text/event-stream"), ("Content-Type", "text/plain")];
    assert_eq!(server.post(&text, &list(1, meta())).status, 415);
    // Bodies.
    let headers = modern_headers("tools/list", None);
    let answer = server.post(&headers, "{nope");
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32700)));
    assert!(answer.messages[0].get("id").is_none());
    let answer = server.post(&headers, &format!("[{}]", list(1, meta())));
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32600)));
    let answer = server
        .post(&headers, r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#);
    assert_eq!((answer.status, answer.body.as_str()), (202, ""));
    // A 2026-07-28 notification ignores a session id, as a request does: no 404 for one
    // that names none alive. (A 2025-era one still gets 404: its cancel reaches nothing.)
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "_meta": meta()}});
    let mut stale = headers.clone();
    stale.push(("Mcp-Session-Id", "deadbeef"));
    let answer = server.post(&stale, &notification.to_string());
    assert_eq!((answer.status, answer.body.as_str()), (202, ""));
    let legacy = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    let mut stale_legacy = stale.clone();
    stale_legacy[2] = ("MCP-Protocol-Version", "2025-11-25");
    assert_eq!(server.post(&stale_legacy, legacy).status, 404);
    // With the 2026-07-28 header the id is ignored, as a request's is: accepted, as
    // without one.
    assert_eq!(server.post(&stale, legacy).status, 202);
    // And by GET and DELETE too: without a session, only POST is served.
    for method in ["GET", "DELETE"] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write_request(&mut stream, port, method, &stale, b"");
        assert_eq!(read_answer(stream, &server.schema).status, 405, "{method}");
    }
    // A server with no credentials to check reads no Authorization header: two are no
    // concern of its.
    let mut twice = headers.clone();
    twice.extend([("Authorization", "Bearer a"), ("Authorization", "Bearer b")]);
    assert_eq!(server.post(&twice, &list(19, meta())).status, 200);
    // Envelope, headers, version, method.
    let answer = server.post(
        &headers,
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}).to_string(),
    );
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32602)));
    assert_eq!(answer.messages[0]["id"], 7);
    // With a session id too: the 2026-07-28 header says whose era it is, and the id is
    // ignored (it once made the request a 2025-era one, refused as of an unknown version).
    let answer = server
        .post(&stale, &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}).to_string());
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32602)), "{}", answer.body);
    assert_eq!(answer.messages[0]["id"], 7);
    // A response answers nothing outside a 2025-era session: clients post requests and
    // notifications only.
    let answer = server.post(&headers, r#"{"jsonrpc":"2.0","id":9,"result":{}}"#);
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32600)), "{}", answer.body);
    assert!(answer.messages[0].get("id").is_none());
    let no_version: Vec<_> =
        headers.iter().filter(|(name, _)| *name != "MCP-Protocol-Version").cloned().collect();
    assert_eq!(server.post(&no_version, &list(8, meta())).error_code(), Some(-32020));
    let wrong_method = modern_headers("server/discover", None);
    assert_eq!(server.post(&wrong_method, &list(9, meta())).error_code(), Some(-32020));
    let answer = server.post(&headers, &list(10, old_meta.clone()));
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32020)), "header 2026-07-28, body v999");
    let mut both_old = headers.clone();
    both_old[2] = ("MCP-Protocol-Version", "v999.0.0");
    let answer = server.post(&both_old, &list(11, old_meta));
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32022)));
    assert_eq!(
        answer.messages[0]["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "v999.0.0"})
    );
    // What the answer quotes of a version is cut past 1 KiB (less is echoed exactly).
    let long = "v".repeat(8 << 10);
    let mut long_headers = headers.clone();
    long_headers[2] = ("MCP-Protocol-Version", &long);
    let long_meta = json!({"io.modelcontextprotocol/protocolVersion": long, "io.modelcontextprotocol/clientCapabilities": {}});
    let answer = server.post(&long_headers, &list(11, long_meta));
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32022)));
    let quoted = answer.messages[0]["error"]["data"]["requested"].as_str().unwrap();
    assert!(quoted.len() < 1100 && quoted.ends_with('…'), "{} bytes quoted", quoted.len());
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "unknown/method"] {
        let body =
            json!({"jsonrpc": "2.0", "id": 12, "method": method, "params": {"_meta": meta()}}).to_string();
        let answer = server.post(&modern_headers(method, None), &body);
        assert_eq!((answer.status, answer.error_code()), (404, Some(-32601)), "{method}");
    }
    // Mcp-Name: required, compared after trimming and base64 decoding.
    let call = |name_header: Option<&str>| {
        let body = json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": meta()}});
        let mut headers = modern_headers("tools/call", None);
        if let Some(name) = name_header {
            headers.push(("Mcp-Name", name));
        }
        server.post(&headers, &body.to_string())
    };
    assert_eq!(call(None).error_code(), Some(-32020));
    assert_eq!(call(Some("spin")).error_code(), Some(-32020));
    assert_eq!(call(Some("  echo  ")).status, 200);
    assert_eq!(call(Some("=?base64?ZWNobw==?=")).messages[0]["result"]["content"][0]["text"], "x");
    // Sent twice, a server and a proxy may each read another: refused, whichever is right.
    let body = json!({"jsonrpc": "2.0", "id": 18, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": meta()}});
    for (name, first, second) in [
        ("Mcp-Name", "echo", "spin"),
        ("Mcp-Method", "tools/call", "tools/list"),
        ("Mcp-Name", "echo", "echo"),
    ] {
        let mut headers: Vec<_> = modern_headers("tools/call", None)
            .into_iter()
            .filter(|(header, _)| !header.eq_ignore_ascii_case(name))
            .collect();
        headers.extend([(name, first), (name, second)]);
        if name != "Mcp-Name" {
            headers.push(("Mcp-Name", "echo"));
        }
        let answer = server.post(&headers, &body.to_string());
        assert_eq!((answer.status, answer.error_code()), (400, Some(-32020)), "{name}: {}", answer.body);
        assert!(answer.body.contains("is sent more than once"), "{}", answer.body);
    }
    // What a refusal quotes of the request is cut: a long name is not sent back whole.
    let body = json!({"jsonrpc": "2.0", "id": 15, "method": "tools/call",
        "params": {"name": "n".repeat(200 << 10), "arguments": {}, "_meta": meta()}});
    let answer = server.post(&modern_headers("tools/call", Some("echo")), &body.to_string());
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32020)));
    assert!(answer.body.len() < 8 << 10, "{} bytes answered", answer.body.len());
    // A progress token is copied into every notification: one past 256 bytes is refused.
    let mut long_token = meta();
    long_token["progressToken"] = json!("t".repeat(257));
    let body = json!({"jsonrpc": "2.0", "id": 16, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": long_token}});
    let answer = server.post(&modern_headers("tools/call", Some("echo")), &body.to_string());
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32602)), "{}", answer.body);
    // Handler errors stay in-band.
    let answer = server.call(14, "nope", json!({}), json!({}));
    assert_eq!((answer.status, answer.error_code()), (200, Some(-32602)));
}

#[test]
fn hosts_origins_and_oversized_or_slow_bodies_are_refused() {
    let server = Server::start("http-limits");
    let port = server.port;
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}).to_string();
    let mut headers = modern_headers("tools/list", None);
    headers.push(("Origin", "http://evil.example"));
    assert_eq!(server.post(&headers, &body).status, 403);
    headers.pop();
    headers.push(("Origin", "http://localhost:3000"));
    assert_eq!(server.post(&headers, &body).status, 200);

    // A foreign Host (DNS rebinding).
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: rebind.example:{port}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    assert_eq!(read_answer(stream, &server.schema).status, 403);

    // 10 MB: refused with 413, and the server keeps serving.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"pad\":\"{}\"}}",
        "x".repeat(10 << 20)
    );
    let answer = post(port, &modern_headers("tools/list", None), huge.as_bytes(), &server.schema);
    assert_eq!(answer.status, 413);
    // A Content-Length over the limit is refused before the body arrives (else: 408).
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    assert_eq!(read_answer(stream, &server.schema).status, 413);

    // A head past 64 KiB (hyper reads what its buffer has room for, up to twice that), or
    // of more than 100 lines: 431, before it is all held.
    let long_head = |pad: usize, lines: usize| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let extra: String = (0..lines).map(|line| format!("X-Line-{line}: {line}\r\n")).collect();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nX-Pad: {}\r\n{extra}\r\n",
            "p".repeat(pad)
        );
        // The server may stop reading before the end: what it answered is read regardless.
        let _ = stream.write_all(head.as_bytes());
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_owned()
    };
    assert_eq!(long_head(200_000, 0), "HTTP/1.1 431 Request Header Fields Too Large");
    assert_eq!(long_head(10, 101), "HTTP/1.1 431 Request Header Fields Too Large");
    // Under both bounds the request goes on to its next check (no body: 400 or 415).
    assert!(!long_head(60_000, 90).contains(" 431 "), "a long head under the bounds is read");

    // A body that never finishes arriving: 408 after the read timeout.
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\""
    );
    stream.write_all(head.as_bytes()).unwrap();
    let started = Instant::now();
    assert_eq!(read_answer(stream, &server.schema).status, 408);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(server.call(2, "echo", json!({"text": "ok"}), json!({})).status, 200);
}

#[test]
fn closing_the_stream_cancels_the_call_even_while_the_guest_spins_silently() {
    let server = Server::start("http-disconnect");
    for (when, arguments) in
        [("before SSE", json!({"seconds": 600})), ("during SSE", json!({"seconds": 600}))]
    {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "spin", "arguments": arguments, "_meta": meta()}})
        .to_string();
        write_request(
            &mut stream,
            server.port,
            "POST",
            &modern_headers("tools/call", Some("spin")),
            body.as_bytes(),
        );
        let started = Instant::now();
        while !server.locks().contains("spin") {
            assert!(started.elapsed() < Duration::from_secs(5), "spin never started");
        }
        if when == "during SSE" {
            // Read the SSE head (the answer turns into a stream after 200 ms).
            let mut first = [0u8; 64];
            stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let read = stream.read(&mut first).unwrap();
            assert!(String::from_utf8_lossy(&first[..read]).starts_with("HTTP/1.1 200"), "{when}");
        }
        drop(stream);
        let closed = Instant::now();
        while server.locks() != "[]" {
            assert!(
                closed.elapsed() < Duration::from_secs(10),
                "{when}: the call was not stopped and cleaned up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn connections_beyond_the_cap_wait_until_one_closes() {
    let server = Server::start_with("http-cap", "max_connections = 2\n");
    let idle: Vec<TcpStream> =
        (0..2).map(|_| TcpStream::connect(("127.0.0.1", server.port)).unwrap()).collect();
    // No wait needed for both to be accepted: the listener accepts in the order connections
    // complete, so the third below queues behind them whenever they are taken.
    let (port, schema) = (server.port, server.schema.clone());
    let (answered, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}})
            .to_string();
        let _ =
            answered.send(post(port, &modern_headers("tools/list", None), body.as_bytes(), &schema).status);
    });
    assert!(answer.recv_timeout(Duration::from_millis(500)).is_err(), "the third connection waits");
    drop(idle);
    assert_eq!(answer.recv_timeout(Duration::from_secs(5)).unwrap(), 200, "served once a slot is free");
}

/// One answer read from a kept-alive connection (its body sized by `Content-Length`).
fn read_kept_alive_answer(stream: &mut BufReader<TcpStream>, schema: &Schema) -> Answer {
    use std::io::BufRead;
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(stream.read_line(&mut head).unwrap() > 0, "the server closed before answering: {head}");
    }
    let length: usize = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().to_owned())
        })
        .expect("a sized answer")
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    parse_answer(&(head + &String::from_utf8(body).unwrap()), schema)
}

#[test]
fn a_kept_alive_connection_is_closed_once_idle_for_the_header_timeout_from_its_last_answer() {
    // Answers stay sized (a loaded machine once made the first call's answer an SSE stream
    // at the default `sse_after_ms`), and the client has 1 s to send its next request.
    let config = examples_config("http-idle", "[http]\nheader_timeout_ms = 1000\nsse_after_ms = 60000\n");
    let (child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config);
    let server = Server { child, port, schema: Arc::new(Schema::new()) };
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = BufReader::new(stream);
    let mut send = |id: i64, tool: &str, arguments: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta()}});
        let mut request = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
        for (name, value) in modern_headers("tools/call", Some(tool)) {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.to_string().len()));
        // Taken before the request goes: the server's timer starts later, at its answer.
        let sent = Instant::now();
        stream.get_mut().write_all(request.as_bytes()).unwrap();
        let answer = read_kept_alive_answer(&mut stream, &server.schema);
        assert_eq!(answer.status, 200, "{}", answer.body);
        sent
    };
    // A call longer than the timeout: the connection outlives it while busy...
    let opened = Instant::now();
    send(1, "reindex", json!({"collection": "idle-keep-alive", "total": 40, "step_ms": 1200}));
    assert!(opened.elapsed() > Duration::from_millis(1000));
    // ...and stays open for the next request, since the timeout counts from the last answer...
    let sent = send(2, "echo", json!({"text": "still open"}));
    // ...then closes once idle for the timeout.
    let mut byte = [0u8; 1];
    assert_eq!(stream.read(&mut byte).unwrap(), 0, "closed without a byte more");
    let idle = sent.elapsed();
    assert!(
        idle >= Duration::from_millis(1000) && idle < Duration::from_secs(10),
        "closed after {idle:?} idle"
    );
}

#[test]
fn a_legacy_client_gets_a_session_whose_cancellations_reach_its_calls() {
    let server = Server::start("http-legacy");
    let schema = Schema::legacy();
    let post_legacy =
        |headers: &[(&str, &str)], body: &str| post(server.port, headers, body.as_bytes(), &schema);
    let base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let answer = post_legacy(&base, &init.to_string());
    assert_eq!(answer.status, 200);
    assert_eq!(answer.messages[0]["result"]["protocolVersion"], "2025-11-25");
    let session = answer.header("mcp-session-id").expect("a session id").to_owned();
    let mut legacy = base.to_vec();
    legacy.push(("MCP-Protocol-Version", "2025-11-25"));
    legacy.push(("Mcp-Session-Id", &session));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "old"}}});
    let called = post_legacy(&legacy, &call.to_string()).messages[0].clone();
    assert_eq!(called["result"]["content"][0]["text"], "old");
    // Nothing only 2026-07-28 defines; a ping is answered `{}`.
    for result in [&answer.messages[0]["result"], &called["result"]] {
        assert!(result.get("resultType").is_none() && result.get("_meta").is_none(), "{result}");
    }
    let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"});
    assert_eq!(post_legacy(&legacy, &ping.to_string()).messages[0]["result"], json!({}));
    // In-band errors are 200 for a 2025-era client: a 404 would tell it its session is gone.
    let unknown = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/list"});
    let answer = post_legacy(&legacy, &unknown.to_string());
    assert_eq!((answer.status, answer.error_code()), (200, Some(-32601)));
    // The era has no routing headers, but what a client sends must agree with the body: a
    // gateway in front may route or authorize on it.
    let spin = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "spin", "arguments": {"seconds": 0}}});
    for extra in [
        vec![("Mcp-Name", "echo")],
        vec![("Mcp-Method", "tools/list")],
        vec![("Mcp-Name", "spin"), ("Mcp-Name", "spin")],
    ] {
        let headers: Vec<_> = legacy.iter().copied().chain(extra.iter().copied()).collect();
        let answer = post_legacy(&headers, &spin.to_string());
        assert_eq!((answer.status, answer.error_code()), (400, Some(-32020)), "{extra:?}: {}", answer.body);
    }
    let headers: Vec<_> = legacy.iter().copied().chain([("Mcp-Name", "echo")]).collect();
    assert_eq!(post_legacy(&headers, &call.to_string()).messages[0]["result"]["content"][0]["text"], "old");
    // A version header sent must be one of the era's (2025-06-18 and 2025-11-25 transports:
    // 400 for "an invalid or unsupported" one); one left out is served.
    let unsupported =
        [base[0], base[1], ("MCP-Protocol-Version", "1999-01-01"), ("Mcp-Session-Id", &session)];
    let answer = post_legacy(&unsupported, &call.to_string());
    assert_eq!((answer.status, answer.error_code()), (400, Some(-32600)), "{}", answer.body);
    assert!(answer.body.contains("unsupported MCP-Protocol-Version"), "{}", answer.body);
    let cancel_nothing =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}});
    assert_eq!(post_legacy(&unsupported, &cancel_nothing.to_string()).status, 400);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write_request(&mut stream, server.port, "GET", &unsupported[2..], b"");
    assert_eq!(read_answer(stream, &schema).status, 400);
    let unversioned = [base[0], base[1], ("Mcp-Session-Id", &session)];
    assert_eq!(
        post_legacy(&unversioned, &call.to_string()).messages[0]["result"]["content"][0]["text"],
        "old"
    );
    // ...and so is one naming the version a missing header stands for (the conformance
    // suite's 2025 scenarios send it on every session request).
    let assumed = [base[0], base[1], ("MCP-Protocol-Version", "2025-03-26"), ("Mcp-Session-Id", &session)];
    assert_eq!(post_legacy(&assumed, &call.to_string()).messages[0]["result"]["content"][0]["text"], "old");

    // A long call, then its cancellation as a POST of its own: the call stops, its answer
    // stream ends with nothing, and cleanup releases the lock.
    let (port, headers) =
        (server.port, legacy.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>());
    let long = std::thread::spawn(move || {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "spin", "arguments": {"seconds": 600}}});
        post(port, &headers, call.to_string().as_bytes(), &Schema::legacy())
    });
    let started = Instant::now();
    while !server.locks().contains("spin") {
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // A 2026-07-28 cancellation ignores the session id it carries, as its requests do: it
    // reaches no session, and the session's call 3 runs on.
    let modern_cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "_meta": meta()}});
    let unversioned = [base[0], base[1], ("Mcp-Session-Id", session.as_str())];
    assert_eq!(post_legacy(&unversioned, &modern_cancel.to_string()).status, 202);
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(500) {
        assert!(
            server.locks().contains("spin") && !long.is_finished(),
            "a 2026 notification cancelled a session's call"
        );
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}});
    assert_eq!(post_legacy(&legacy, &cancel.to_string()).status, 202);
    let answer = long.join().unwrap();
    assert!(answer.messages.is_empty(), "nothing is sent for a cancelled call: {:?}", answer.messages);
    // Still a request's answer: an event stream, ended without an event.
    assert_eq!((answer.status, answer.header("content-type")), (200, Some("text/event-stream")));
    assert_eq!(server.locks(), "[]");

    // An unknown session is told to start again; DELETE ends a session.
    let mut stale = base.to_vec();
    stale.push(("Mcp-Session-Id", "feedface"));
    assert_eq!(post_legacy(&stale, &call.to_string()).status, 404);
    assert_eq!(post_legacy(&stale, &cancel.to_string()).status, 404, "a cancel for a session that is gone");
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write_request(&mut stream, server.port, "DELETE", &[("Mcp-Session-Id", &session)], b"");
    assert_eq!(read_answer(stream, &schema).status, 200);
    assert_eq!(post_legacy(&legacy, &call.to_string()).status, 404);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write_request(&mut stream, server.port, "DELETE", &[("Mcp-Session-Id", &session)], b"");
    assert_eq!(read_answer(stream, &schema).status, 404, "a session ends once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_streams_are_all_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start("http-thousand");
    let port = server.port;
    let mut tasks = Vec::new();
    for id in 0..1000 {
        tasks.push(tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": format!("stream {id}")}, "_meta": meta()}})
            .to_string();
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let request = format!(
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            (id, response)
        }));
    }
    for task in tasks {
        let (id, response) = task.await.unwrap();
        // Under load some answers take longer than `sse_after` and arrive as SSE: both count.
        let answer = parse_answer(&response, &server.schema);
        assert_eq!(answer.status, 200, "{id}: {response}");
        assert_eq!(answer.messages.last().unwrap()["result"]["content"][0]["text"], format!("stream {id}"));
    }
}

/// A `spin` call (which never returns by itself) in flight on `server`, once it holds its
/// lock; the thread ends with its answer.
fn spin_in_flight(server: &Server) -> std::thread::JoinHandle<Answer> {
    let (port, schema) = (server.port, server.schema.clone());
    let caller = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}});
        post(port, &modern_headers("tools/call", Some("spin")), body.to_string().as_bytes(), &schema)
    });
    let started = Instant::now();
    while !server.locks().contains("spin") {
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    caller
}

#[test]
fn sigterm_stops_calls_in_flight_answers_them_and_exits() {
    let mut server = Server::start("http-sigterm");
    let caller = spin_in_flight(&server);
    let signalled = Instant::now();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let answer = caller.join().unwrap();
    let text = answer.messages.last().unwrap()["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(text.contains("shutting down"), "{text}");
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success());
            break;
        }
        assert!(signalled.elapsed() < Duration::from_secs(15), "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An echo `tools/call` as raw HTTP/1.1 on a kept-alive connection.
fn echo_request(port: u16, id: i64, text: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}, "_meta": meta()}})
    .to_string();
    let mut request = format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (name, value) in modern_headers("tools/call", Some("echo")) {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    request
}

/// One answer with a `Content-Length` read off `connection`: its head (names lower-cased)
/// and body; the connection stays open.
fn read_sized_answer(connection: &mut BufReader<TcpStream>) -> (String, String) {
    use std::io::BufRead;
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(connection.read_line(&mut line).unwrap() > 0, "closed after {head:?}");
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let length = head.lines().find_map(|line| line.strip_prefix("content-length:")).expect("a sized answer");
    let mut body = vec![0; length.trim().parse().unwrap()];
    connection.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

/// The connection's peer has closed it (EOF, or a reset) within `wait`.
fn closed_within(connection: &mut BufReader<TcpStream>, wait: Duration) -> bool {
    connection.get_ref().set_read_timeout(Some(wait)).unwrap();
    let mut rest = Vec::new();
    match connection.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// What a load balancer needs from a replica that is stopping (spin draining with a 3 s
/// grace, `close_delay_ms` 200): its listener and connections stay while calls drain, past
/// the close delay, so that a request sent before the balancer's next probe is never reset;
/// each such request, on a connection the balancer held idle, on a new one, or one whose
/// head came before the signal and its body after, is answered 503 with `Connection:
/// close` (it never reached a handler, so it may go elsewhere) and never run; the call in
/// flight still gets its answer. Closing idle connections at SIGTERM (as before) failed
/// the first step: the kept-alive connection closed at once, and a request racing that
/// close got a reset.
#[test]
fn a_stopping_server_answers_503_on_every_connection_until_its_calls_drain() {
    let mut server = Server::start_with_http(
        "http-shutdown-drain",
        "[http]\nbody_timeout_ms = 20000\nclose_delay_ms = 200\n",
        "[components.tools.spin]\ngrace_ms = 3000\n",
    );
    let port = server.port;
    let connect = || {
        let connection = TcpStream::connect(("127.0.0.1", port)).unwrap();
        connection.set_read_timeout(Some(common::server::WAIT)).unwrap();
        BufReader::new(connection)
    };
    // A connection a balancer keeps alive between requests.
    let mut kept = connect();
    kept.get_mut().write_all(echo_request(port, 2, "before").as_bytes()).unwrap();
    let (head, body) = read_sized_answer(&mut kept);
    assert!(head.starts_with("http/1.1 200") && body.contains("before"), "{head}{body}");
    // A request whose head is read before the signal (while the spin call starts), and
    // whose body comes after it.
    let mut split = connect();
    let request = echo_request(port, 3, "split");
    let (split_head, split_body) = request.split_at(request.find("\r\n\r\n").unwrap() + 4);
    split.get_mut().write_all(split_head.as_bytes()).unwrap();
    let caller = spin_in_flight(&server);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    // The idle connection stays open while the spin call drains, past the close delay.
    assert!(!closed_within(&mut kept, Duration::from_millis(700)), "the idle connection was closed");
    kept.get_ref().set_read_timeout(Some(common::server::WAIT)).unwrap();
    let refused = |connection: &mut BufReader<TcpStream>, id: i64, text: &str| {
        let (head, body) = read_sized_answer(connection);
        assert!(head.starts_with("http/1.1 503"), "{id}: {head}{body}");
        assert!(head.contains("connection: close") && head.contains("retry-after:"), "{id}: {head}");
        assert!(body.contains("shutting down") && !body.contains(text), "{id}: {body}");
        assert!(closed_within(connection, common::server::WAIT), "{id}: closed after the 503");
    };
    kept.get_mut().write_all(echo_request(port, 4, "late").as_bytes()).unwrap();
    refused(&mut kept, 4, "late");
    split.get_mut().write_all(split_body.as_bytes()).unwrap();
    refused(&mut split, 3, "split");
    // So does a new connection, still accepted.
    let mut fresh = connect();
    fresh.get_mut().write_all(echo_request(port, 5, "new").as_bytes()).unwrap();
    refused(&mut fresh, 5, "new");
    // The call in flight still ends with its answer; then the server exits.
    let answer = caller.join().unwrap();
    let text = answer.messages.last().unwrap()["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(text.contains("shutting down"), "{text}");
    let status = server.child.wait().unwrap();
    assert!(status.success());
}

/// A second signal exits at once: a person pressing Ctrl-C again, or an orchestrator that
/// will not wait, does not wait out the calls' grace (a spin call here, with 20 s).
#[test]
fn a_second_signal_exits_at_once_without_waiting_for_calls_to_stop() {
    let mut server =
        Server::start_with_tail("http-second-signal", "", "[components.tools.spin]\ngrace_ms = 20000\n");
    let _caller = spin_in_flight(&server);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    // The first is taken (the server turns to refusing requests) before the second. A
    // request that beats the signal's handling is still answered: asked until refused.
    let deadline = Instant::now() + common::server::WAIT;
    loop {
        let mut probe = BufReader::new(TcpStream::connect(("127.0.0.1", server.port)).unwrap());
        probe.get_ref().set_read_timeout(Some(common::server::WAIT)).unwrap();
        probe.get_mut().write_all(echo_request(server.port, 2, "late").as_bytes()).unwrap();
        let (head, body) = read_sized_answer(&mut probe);
        if head.starts_with("http/1.1 503") {
            break;
        }
        assert!(head.starts_with("http/1.1 200") && body.contains("late"), "{head}{body}");
        assert!(Instant::now() < deadline, "no request was refused after SIGTERM");
    }
    let signalled = Instant::now();
    // SAFETY: as above.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGINT) };
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(130));
            break;
        }
        assert!(signalled.elapsed() < Duration::from_secs(10), "the server waited out the grace");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// With nothing in flight, a stopping server holds its idle connections `close_delay_ms`,
/// then closes them and exits.
#[test]
fn a_stopping_server_with_nothing_to_drain_closes_idle_connections_after_its_close_delay() {
    let mut server = Server::start_with("http-close-delay", "close_delay_ms = 1500\n");
    let port = server.port;
    let mut kept = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    kept.get_ref().set_read_timeout(Some(common::server::WAIT)).unwrap();
    kept.get_mut().write_all(echo_request(port, 1, "once").as_bytes()).unwrap();
    assert!(read_sized_answer(&mut kept).0.starts_with("http/1.1 200"));
    let signalled = Instant::now();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    assert!(!closed_within(&mut kept, Duration::from_millis(700)), "closed before its delay");
    assert!(closed_within(&mut kept, common::server::WAIT), "closed after its delay");
    // Closed by the server at the delay's end, not given up 2 s later with its task.
    let closed = signalled.elapsed();
    assert!(closed >= Duration::from_millis(1500) && closed < Duration::from_secs(3), "{closed:?}");
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn mcp_param_headers_mirror_the_arguments_their_schema_marks() {
    let schema = r#"{"type":"object","properties":{
        "region":{"type":"string","x-mcp-header":"Region"},
        "count":{"type":"integer","x-mcp-header":"Count"},
        "where":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}}}}"#;
    let guest = common::WatGuest::new("headed", common::DONE_BODY).input_schema(schema);
    let path = common::scratch("headed.wasm");
    std::fs::write(&path, guest.component()).unwrap();
    let server = Server::start_with("http-param-headers", &format!("\n[[components]]\npath = {:?}\n", path));
    let call = |id: i64, arguments: Value, params: &[(&str, &str)]| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "headed", "arguments": arguments, "_meta": meta()}});
        let mut headers = modern_headers("tools/call", Some("headed"));
        headers.extend_from_slice(params);
        server.post(&headers, &body.to_string())
    };
    let accepted = |answer: Answer| {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.messages[0]["result"]["content"][0]["text"], "done", "{}", answer.body);
    };
    let refused = |answer: Answer, why: &str| {
        assert_eq!((answer.status, answer.error_code()), (400, Some(-32020)), "{}", answer.body);
        assert!(answer.messages[0]["error"]["message"].as_str().unwrap().contains(why), "{}", answer.body);
    };

    // Nothing to mirror: no header needed.
    accepted(call(1, json!({}), &[]));
    // Plain and base64 values; header names ignore case; whitespace around values is trimmed.
    accepted(call(3, json!({"region": "eu-west"}), &[("Mcp-Param-Region", "eu-west")]));
    accepted(call(4, json!({"region": "Zürich"}), &[("mcp-param-region", "=?base64?WsO8cmljaA==?=")]));
    accepted(call(5, json!({"region": "eu"}), &[("MCP-PARAM-REGION", "  eu  ")]));
    // Without both markers a value is literal.
    accepted(call(6, json!({"region": "=?base64?ZXU="}), &[("Mcp-Param-Region", "=?base64?ZXU=")]));
    // Integers compare as numbers; booleans and nested paths.
    accepted(call(7, json!({"count": 42}), &[("Mcp-Param-Count", "42.0")]));
    accepted(call(8, json!({"where": {"flag": true}}), &[("Mcp-Param-Flag", "true")]));

    refused(call(10, json!({"region": "eu"}), &[]), "Mcp-Param-Region is required");
    refused(call(11, json!({"region": "eu"}), &[("Mcp-Param-Region", "us")]), "Mcp-Param-Region is \"us\"");
    refused(call(12, json!({"region": "Hello"}), &[("Mcp-Param-Region", "=?base64?SGVsbG8?=")]), "base64");
    refused(
        call(13, json!({"region": "Hello"}), &[("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?=")]),
        "base64",
    );
    refused(call(14, json!({"count": 42}), &[("Mcp-Param-Count", "43")]), "Mcp-Param-Count");
    // Exactly: 2^53 + 1 is not 2^53, though both are one float.
    let beyond_floats = json!({"count": 9_007_199_254_740_993u64});
    refused(call(17, beyond_floats, &[("Mcp-Param-Count", "9007199254740992")]), "Mcp-Param-Count");
    refused(call(15, json!({"where": {"flag": false}}), &[]), "Mcp-Param-Flag is required");
    refused(call(16, json!({"where": {"flag": false}}), &[("Mcp-Param-Flag", "true")]), "`where.flag`");
    // A header the tool will never see a value for, or one sent twice: a proxy routing on
    // it would be misled.
    refused(call(18, json!({}), &[("Mcp-Param-Region", "eu")]), "Mcp-Param-Region is sent but");
    refused(call(19, json!({"region": null}), &[("Mcp-Param-Region", "eu")]), "nothing at `region`");
    refused(
        call(20, json!({"region": "eu"}), &[("Mcp-Param-Region", "eu"), ("Mcp-Param-Region", "us")]),
        "mcp-param-region is sent more than once",
    );
    // A header mismatch is found before an unsupported version (the spec's ladder).
    let old = json!({"io.modelcontextprotocol/protocolVersion": "v999.0.0", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 17, "method": "tools/call",
        "params": {"name": "headed", "arguments": {"region": "eu"}, "_meta": old}});
    let mut headers = modern_headers("tools/call", Some("headed"));
    headers[2] = ("MCP-Protocol-Version", "v999.0.0");
    refused(server.post(&headers, &body.to_string()), "Mcp-Param-Region is required");
    headers.push(("Mcp-Param-Region", "eu"));
    assert_eq!(server.post(&headers, &body.to_string()).error_code(), Some(-32022));
    // A 2025-era request needs none of them, but those it sends must agree.
    let legacy = |id: i64, arguments: Value, params: &[(&str, &str)]| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "headed", "arguments": arguments}});
        let mut headers = vec![
            ("Accept", "application/json, text/event-stream"),
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        headers.extend_from_slice(params);
        post(server.port, &headers, body.to_string().as_bytes(), &Schema::legacy())
    };
    let both = json!({"region": "eu", "count": 42});
    accepted(legacy(30, both.clone(), &[]));
    accepted(legacy(31, both.clone(), &[("Mcp-Param-Region", "eu")]));
    refused(legacy(32, both, &[("Mcp-Param-Region", "us")]), "Mcp-Param-Region is \"us\"");
    refused(legacy(33, json!({}), &[("Mcp-Param-Region", "eu")]), "Mcp-Param-Region is sent but");
    let _ = std::fs::remove_file(path);
}

/// A 2025-era session's GET stream holds a listen slot, as a `subscriptions/listen` stream
/// does (here the server keeps one), and ends when its session does: after a DELETE the
/// stream ends and its slot goes to the next session's.
#[test]
fn a_legacy_get_stream_holds_a_listen_slot_and_ends_with_its_session() {
    let config =
        examples_config("http-legacy-streams", "max_listen_streams = 1\n[http]\nkeep_alive_ms = 100\n");
    let (child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config);
    let server = Server { child, port, schema: Arc::new(Schema::new()) };
    let schema = Schema::legacy();
    let base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let session = || {
        let answer = post(server.port, &base, init.to_string().as_bytes(), &schema);
        answer.header("mcp-session-id").expect("a session id").to_owned()
    };
    let (first, second) = (session(), session());
    // A GET stream's status, with the stream kept open (its head read, nothing more).
    let open = |session: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let headers = [
            ("Accept", "text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Mcp-Session-Id", session),
        ];
        write_request(&mut stream, server.port, "GET", &headers, b"");
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let status: u16 = read_head(&mut stream).split(' ').nth(1).unwrap().parse().unwrap();
        (status, stream)
    };
    let (status, mut following) = open(&first);
    assert_eq!(status, 200);
    assert_eq!(open(&second).0, 503, "the one listen slot is the first session's");
    let mut delete = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write_request(&mut delete, server.port, "DELETE", &[("Mcp-Session-Id", &first)], b"");
    assert_eq!(read_answer(delete, &schema).status, 200);
    // The deleted session's stream ends (keep-alives until then)...
    let mut rest = Vec::new();
    following.read_to_end(&mut rest).expect("the stream ends within 20 s of its session");
    // ...and its slot is free again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _stream) = open(&second);
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "the slot never came back");
        std::thread::sleep(Duration::from_millis(20)); // polling for the slot, with a deadline
    }
}

/// An `initialize` sent with a live session's id starts a session of its own: ending the
/// first does not end the second, nor the stream that follows it.
#[test]
fn an_initialize_that_names_a_session_starts_one_of_its_own() {
    let server = Server::start("http-initialize-again");
    let schema = Schema::legacy();
    let base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = post(server.port, &base, init.to_string().as_bytes(), &schema);
    let first = opened.header("mcp-session-id").expect("a session id").to_owned();
    let again = [base[0], base[1], ("Mcp-Session-Id", first.as_str())];
    let reopened = post(server.port, &again, init.to_string().as_bytes(), &schema);
    let second = reopened.header("mcp-session-id").expect("a session id").to_owned();
    assert_ne!(first, second);
    let mut delete = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write_request(&mut delete, server.port, "DELETE", &[("Mcp-Session-Id", &first)], b"");
    assert_eq!(read_answer(delete, &schema).status, 200);
    let mut following = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let headers = [
        ("Accept", "text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Mcp-Session-Id", &second),
    ];
    write_request(&mut following, server.port, "GET", &headers, b"");
    following.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    assert!(read_head(&mut following).starts_with("HTTP/1.1 200"));
    // The stream stays open (keep-alives, or nothing) until the deadline.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut buffer = [0u8; 256];
    while Instant::now() < deadline {
        match following.read(&mut buffer) {
            Ok(0) => panic!("the second session's stream ended with the first session"),
            Ok(_) => {}
            Err(error) => assert!(
                matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                "{error}"
            ),
        }
    }
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let in_second =
        [base[0], base[1], ("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", second.as_str())];
    assert_eq!(post(server.port, &in_second, ping.as_bytes(), &schema).status, 200);
}

/// On an open server a client is its address: ten thousand 2025-era initializes from one
/// address (the server's cap on sessions) close that address's own oldest sessions, at
/// most half the table kept, never another client's.
#[test]
fn one_address_cannot_close_another_clients_sessions() {
    let server = Server::start("http-session-owners");
    let schema = Schema::legacy();
    let base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let answer = post(server.port, &base, init.as_bytes(), &schema);
    let ours = answer.header("mcp-session-id").expect("a session id").to_owned();

    // Another address, one kept-alive connection, as many initializes as the server keeps.
    let theirs = connect_from([127, 0, 0, 2], server.port);
    let mut writer = theirs.try_clone().unwrap();
    let mut reader = BufReader::new(theirs);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{init}",
        server.port,
        init.len()
    );
    let mut first_of_theirs = None;
    for _ in 0..10_000 {
        writer.write_all(head.as_bytes()).unwrap();
        let answer = read_kept_alive_answer(&mut reader, &schema);
        assert_eq!(answer.status, 200, "{}", answer.body);
        first_of_theirs.get_or_insert_with(|| answer.header("mcp-session-id").unwrap().to_owned());
    }
    let still = |session: &str| {
        let headers = [base[0], base[1], ("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", session)];
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
        post(server.port, &headers, ping.as_bytes(), &schema).status
    };
    assert_eq!(still(&ours), 200, "another address's initializes closed our session");
    assert_eq!(still(first_of_theirs.as_deref().unwrap()), 404, "that address's own oldest was closed");
}

/// A response's head, read a byte at a time so that nothing after it is taken.
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the head ended early: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// A plain TCP connection to `port` from `source`, an address of the loopback.
fn connect_from(source: [u8; 4], port: u16) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(std::net::SocketAddr::from((source, 0))).unwrap();
        socket.connect(([127, 0, 0, 1], port).into()).await.unwrap().into_std().unwrap()
    });
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

/// Behind a trusted proxy, clients without credentials are told apart by the address the
/// proxy appends to `X-Forwarded-For`: each keeps its own share of the listen streams
/// (half of the 8 here), a client cannot pose as another by writing an address on the
/// left, and a connection from elsewhere is its own address whatever it claims.
#[test]
fn behind_a_trusted_proxy_each_forwarded_client_keeps_its_own_share() {
    let config = examples_config(
        "http-trusted-proxy",
        "max_listen_streams = 8\n[http]\nkeep_alive_ms = 100\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
    );
    let (child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config);
    let server = Server { child, port, schema: Arc::new(Schema::new()) };
    let mut id = 0;
    // A listen stream opened from `source` with `forwarded`: kept open, or the refusal.
    let mut listen = |source: [u8; 4], forwarded: &str| -> Result<TcpStream, String> {
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta()}})
        .to_string();
        let mut headers = modern_headers("subscriptions/listen", None);
        headers.push(("X-Forwarded-For", forwarded));
        let mut stream = connect_from(source, server.port);
        write_request(&mut stream, server.port, "POST", &headers, body.as_bytes());
        let head = read_head(&mut stream);
        if head.to_ascii_lowercase().contains("content-type: text/event-stream") {
            return Ok(stream);
        }
        let mut rest = String::new();
        stream.read_to_string(&mut rest).unwrap();
        let answer = parse_answer(&format!("{head}{rest}"), &server.schema);
        Err(answer.messages[0]["error"]["message"].as_str().unwrap().to_owned())
    };
    let proxy = [127, 0, 0, 1];
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(listen(proxy, "203.0.113.7").expect("within the client's share"));
    }
    let refused = listen(proxy, "203.0.113.7").unwrap_err();
    assert!(refused.contains("this client has 4 subscriptions/listen streams open"), "{refused}");
    // Whatever the client wrote on the left, the proxy appended its address on the right.
    let refused = listen(proxy, "198.51.100.1, 203.0.113.7").unwrap_err();
    assert!(refused.contains("this client has 4"), "{refused}");
    // Another client behind the same proxy has a share of its own.
    open.push(listen(proxy, "198.51.100.1, 203.0.113.8").expect("another client"));
    // Not from the proxy: the header is ignored, and 127.0.0.2 has a share of its own.
    open.push(listen([127, 0, 0, 2], "203.0.113.7").expect("the connection's own address"));
    drop(open);
}

/// A `subscriptions/listen` stream keeps digests of the lists it tells changes of, not a
/// copy of them: a guest may list megabytes (here 150 resources described in 64 KiB each,
/// about 10 MB), and each stream a client opens (from one address, up to half the server's
/// 1,024) held its own copy, uncharged: 60 streams took the server up by about 600 MB.
#[test]
fn listen_streams_hold_no_copy_of_the_lists_however_large_a_guest_makes_them() {
    let server = Server::start_with(
        "http-listen-lists",
        &format!(
            "\n[[components]]\npath = {:?}\nenv = {{ HOSTILE_DESCRIPTION_BYTES = \"65536\" }}\n",
            common::hostile()
        ),
    );
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
        let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() << 10
    };
    let listen = |id: usize| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"resourcesListChanged": true}, "_meta": meta()}})
        .to_string();
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let headers = modern_headers("subscriptions/listen", None);
        write_request(&mut stream, server.port, "POST", &headers, body.as_bytes());
        let head = read_head(&mut stream).to_ascii_lowercase();
        assert!(head.contains("content-type: text/event-stream"), "{head}");
        stream
    };
    // The first stream makes the digests, once for everyone.
    let first = listen(0);
    let before = rss();
    let open: Vec<TcpStream> = (1..=60).map(listen).collect();
    let grown = rss().saturating_sub(before);
    assert!(grown < 64 << 20, "60 listen streams took {} MiB", grown >> 20);
    drop((first, open));
}
