//! `cordon serve --stdio` as a client sees it: raw lines in, and every line out validated
//! against the official MCP schema of its request's revision (2026-07-28 or 2025-11-25).
//! The real-client suite (the Python SDK) is in `tests/e2e/`; this one covers bad input no
//! well-behaved client would send.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;
use common::wire::{Schema, examples_config, line_channel, meta};

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    schema: Schema,
    /// For the answers to requests without the 2026-07-28 envelope.
    legacy_schema: Schema,
    /// Request id → method and whether it was a 2025-11-25 request, to pick the schema of
    /// each response.
    methods: std::collections::HashMap<String, (String, bool)>,
}

impl Server {
    fn start() -> Self {
        Self::start_with("")
    }

    /// A server whose config's `[server]` table also holds `server_settings`.
    fn start_with(server_settings: &str) -> Self {
        Self::spawn(server_settings, "warn", Stdio::inherit())
    }

    fn spawn(server_settings: &str, log_level: &str, stderr: Stdio) -> Self {
        let name = format!("stdio-{:?}", std::thread::current().id());
        let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["serve", "--stdio", "--config"])
            .arg(examples_config(&name, server_settings))
            .env("CORDON_LOG", log_level)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = line_channel(stdout);
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            schema: Schema::new(),
            legacy_schema: Schema::legacy(),
            methods: Default::default(),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        if let (Some(id), Some(method)) = (message.get("id"), message.get("method").and_then(Value::as_str)) {
            let legacy = message.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion").is_none();
            self.methods.insert(id.to_string(), (method.to_owned(), legacy));
        }
        self.send_raw(format!("{message}\n").as_bytes());
    }

    fn request(&mut self, id: i64, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// The next line, parsed and checked against the schema.
    fn recv(&mut self, timeout: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("stdout carried a non-JSON line: {line}"));
        match message.get("id").and_then(|id| self.methods.get(&id.to_string())) {
            Some((method, true)) => self.legacy_schema.check_sent(&message, Some(method)),
            Some((method, false)) => self.schema.check_sent(&message, Some(method)),
            None => self.schema.check_sent(&message, None),
        }
        Some(message)
    }

    fn expect(&mut self) -> Value {
        self.recv(Duration::from_secs(10)).expect("an answer within 10 s")
    }

    /// After EOF or a signal: call `id` is answered as stopped by the shutdown, and the
    /// server exits successfully within 15 s.
    fn expect_shutdown_answer_and_exit(&mut self, id: i64) {
        let since = Instant::now();
        let answer = self.expect();
        assert_eq!(answer["id"], id);
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("shutting down"), "{answer}");
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(since.elapsed() < Duration::from_secs(15), "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status:?}");
    }

    /// Ask `locks` (ids from `first_id` on) until it lists `lock`: a tool that takes a lock
    /// is running, whatever the machine's speed. Within 10 s.
    fn wait_for_lock(&mut self, first_id: i64, lock: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for id in first_id.. {
            let held: Vec<String> = serde_json::from_str(&self.call_text(id, "locks", json!({}))).unwrap();
            if held.iter().any(|held| held == lock) {
                return;
            }
            assert!(Instant::now() < deadline, "{lock} was never taken: {held:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn call_text(&mut self, id: i64, tool: &str, arguments: Value) -> String {
        self.request(id, "tools/call", json!({"name": tool, "arguments": arguments, "_meta": meta()}));
        let answer = self.expect();
        assert_eq!(answer["id"], id, "{answer}");
        answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn discover_list_and_call_are_answered_per_the_schema() {
    let mut server = Server::start();
    server.request(1, "server/discover", json!({"_meta": meta()}));
    let discover = server.expect();
    assert_eq!(discover["result"]["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(discover["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "cordon");
    server.request(2, "tools/list", json!({"_meta": meta()}));
    let list = server.expect();
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "reindex", "locks", "spin", "order_book", "fetch", "delete_collection"]);
    assert_eq!(list["result"]["cacheScope"], "public");
    assert!(list["result"]["ttlMs"].is_u64());
    assert_eq!(server.call_text(3, "echo", json!({"text": "hi"})), "hi");
    // Structured output of any JSON type: `locks` gives an array, and says so.
    assert_eq!(list["result"]["tools"][2]["outputSchema"]["type"], "array");
    server.request(4, "tools/call", json!({"name": "locks", "arguments": {}, "_meta": meta()}));
    let locks = server.expect();
    assert_eq!(locks["result"]["structuredContent"], json!([]), "{locks}");
    assert_eq!(locks["result"]["content"][0]["text"], "[]");
}

#[test]
fn bad_lines_get_precise_errors_and_the_server_keeps_serving() {
    let mut server = Server::start();
    let cases: Vec<(&[u8], i64)> = vec![
        (b"{not json\n", -32700),
        (b"\xff\xfe\x00garbage\n", -32700),
        (b"[]\n", -32600),
        (b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]\n", -32600),
        (b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"tools/list\"}\n", -32600),
        (b"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"tools/list\"}\n", -32600),
        (b"{\"id\":5,\"method\":\"tools/list\"}\n", -32600),
        (b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":7}\n", -32600),
    ];
    for (line, code) in cases {
        server.send_raw(line);
        let answer = server.expect();
        assert_eq!(answer["error"]["code"], code, "{:?} -> {answer}", String::from_utf8_lossy(line));
    }
    // Responses (a peer's parse error too) and malformed notifications get no answer at all:
    // the next message out is the answer to the request after them.
    let unanswered: [&[u8]; 4] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}\n",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":\"x\"}\n",
        b"{\"jsonrpc\":\"1.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}\n",
    ];
    for line in unanswered {
        server.send_raw(line);
    }
    assert_eq!(server.call_text(8, "echo", json!({"text": "nothing before"})), "nothing before");
    // An integer id beyond i64 is a valid id, echoed as it came.
    server.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551615,\"method\":\"tools/list\"}\n");
    assert_eq!(server.expect()["id"], json!(18446744073709551615u64));
    // A string id past 256 bytes is refused, and the refusal answers to it.
    let long_id = "i".repeat(300);
    server.send_raw(
        format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{long_id}\",\"method\":\"tools/list\"}}\n").as_bytes(),
    );
    let answer = server.expect();
    assert_eq!((&answer["id"], &answer["error"]["code"]), (&json!(long_id), &json!(-32600)), "{answer}");
    // An oversized line is skipped and answered, and the next line is served.
    let mut huge = vec![b'x'; 5 << 20];
    huge.push(b'\n');
    server.send_raw(&huge);
    assert_eq!(server.expect()["error"]["code"], -32600);
    assert_eq!(server.call_text(9, "echo", json!({"text": "still here"})), "still here");
}

#[test]
fn a_client_that_never_reads_stderr_never_blocks_the_server() {
    // stderr is a pipe nobody reads: once it is full, a server that wrote its log in place
    // would block in the next log line. Every ignored message logs one at debug level.
    let mut server = Server::spawn("", "debug", Stdio::piped());
    let _unread_stderr = server.child.stderr.take();
    let mut stdin = server.stdin.take().unwrap();
    let ignored = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"padding\":\"................................................................................................................................\"}}\n";
    let echo = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "still serving"}, "_meta": meta()}});
    server.methods.insert("2".into(), ("tools/call".into(), false));
    let writer = std::thread::spawn(move || {
        // About 1.5 MB of log lines: far more than a pipe holds.
        for _ in 0..5_000 {
            stdin.write_all(ignored.as_bytes()).unwrap();
        }
        stdin.write_all(format!("{echo}\n").as_bytes()).unwrap();
        stdin
    });
    let answer = server.recv(Duration::from_secs(20)).expect("an answer while stderr is full");
    assert_eq!(answer["result"]["content"][0]["text"], "still serving", "{answer}");
    drop(writer.join());
}

#[test]
fn envelope_version_method_and_argument_errors() {
    let mut server = Server::start();
    let no_caps = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let old = json!({"io.modelcontextprotocol/protocolVersion": "1999-01-01", "io.modelcontextprotocol/clientCapabilities": {}});
    let with_log_level = |level: Value| {
        let mut meta = meta();
        meta["io.modelcontextprotocol/logLevel"] = level;
        meta
    };
    let cases = vec![
        ("tools/list", json!({}), -32602),
        ("tools/list", json!({"_meta": no_caps}), -32602),
        ("tools/list", json!({"_meta": with_log_level(json!("loud"))}), -32602),
        ("tools/list", json!({"_meta": with_log_level(json!(7))}), -32602),
        ("server/discover", json!({"_meta": old}), -32022),
        ("ping", json!({"_meta": meta()}), -32601),
        ("resources/subscribe", json!({"_meta": meta(), "uri": "examples://guide"}), -32601),
        ("tasks/list", json!({"_meta": meta()}), -32601),
        ("resources/read", json!({"_meta": meta()}), -32602),
        ("prompts/get", json!({"_meta": meta(), "name": 5}), -32602),
        ("logging/setLevel", json!({"_meta": meta()}), -32601),
        ("initialize", json!({"_meta": meta(), "protocolVersion": "2026-07-28"}), -32601),
        // The envelope and version before the method (§12.6), as on HTTP.
        ("foo/bar", json!({}), -32602),
        ("foo/bar", json!({"_meta": old}), -32022),
        ("initialize", json!({"_meta": old, "protocolVersion": "2026-07-28"}), -32022),
        ("tools/list", json!({"_meta": meta(), "cursor": "not-a-cursor"}), -32602),
        ("tools/call", json!({"_meta": meta(), "name": "nope"}), -32602),
        ("tools/call", json!({"_meta": meta(), "name": 5}), -32602),
        ("tools/call", json!({"_meta": meta(), "name": "echo", "arguments": []}), -32602),
    ];
    for (id, (method, params, code)) in cases.into_iter().enumerate() {
        server.request(id as i64, method, params.clone());
        let answer = server.expect();
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{method} {params} -> {answer}");
    }
    server.request(98, "tools/list", json!({"_meta": with_log_level(json!("warning"))}));
    assert!(server.expect()["result"]["tools"].is_array(), "a valid logLevel is accepted");
    server.request(99, "server/discover", json!({"_meta": old}));
    let answer = server.expect();
    assert_eq!(answer["error"]["data"], json!({"supported": ["2026-07-28"], "requested": "1999-01-01"}));
    // Arguments that break the tool's input schema: a tool execution error naming the JSON
    // path, so that the model can correct them (SEP-1303); no instance starts.
    let schema_breaks = [
        ("echo", json!({"text": 5}), ["/text", "string"]),
        ("echo", json!({}), ["text", "required"]),
        ("reindex", json!({"collection": "c", "total": -1}), ["/total", "minimum"]),
    ];
    for (id, (tool, arguments, words)) in (100..).zip(schema_breaks) {
        server.request(id, "tools/call", json!({"_meta": meta(), "name": tool, "arguments": arguments}));
        let answer = server.expect();
        let result = &answer["result"];
        assert_eq!(result["isError"], true, "{answer}");
        let message = result["content"][0]["text"].as_str().unwrap();
        assert!(message.starts_with("Invalid arguments for tool"), "{message}");
        assert!(words.iter().all(|word| message.contains(word)), "{words:?} in {message}");
    }
}

#[test]
fn a_legacy_client_is_served_after_initialize() {
    let mut server = Server::start();
    server.request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    let init = server.expect();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "cordon");
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server.request(2, "tools/list", json!({}));
    let list = server.expect();
    assert_eq!(list["result"]["tools"][0]["name"], "echo");
    server.request(3, "ping", json!({}));
    assert_eq!(server.expect(), json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    server.request(4, "tools/call", json!({"name": "echo", "arguments": {"text": "old"}}));
    let call = server.expect();
    assert_eq!(call["result"]["content"][0]["text"], "old");
    // 2025-11-25 knows object output only: an array is the text alone, with no schema.
    assert_eq!(list["result"]["tools"][2]["name"], "locks");
    assert!(list["result"]["tools"][2].get("outputSchema").is_none(), "{list}");
    server.request(6, "tools/call", json!({"name": "locks", "arguments": {}}));
    let locks = server.expect();
    assert!(locks["result"].get("structuredContent").is_none(), "{locks}");
    assert_eq!(locks["result"]["content"][0]["text"], "[]");
    // Nothing only 2026-07-28 defines: no resultType, no serverInfo in _meta, no caching hints.
    for answer in [&init, &list, &call] {
        let result = answer["result"].as_object().unwrap();
        for key in ["resultType", "_meta", "ttlMs", "cacheScope"] {
            assert!(!result.contains_key(key), "{key} in {answer}");
        }
    }
    // A revision older than our answers' shapes is offered 2025-11-25 instead.
    server.request(5, "initialize", json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert_eq!(server.expect()["result"]["protocolVersion"], "2025-11-25");
}

#[test]
fn progress_only_with_a_token_increasing_and_never_after_the_answer() {
    let mut server = Server::start();
    let mut with_token = meta();
    with_token["progressToken"] = json!("tok");
    server.request(
        1,
        "tools/call",
        json!({"name": "reindex", "arguments": {"collection": "a", "step_ms": 30}, "_meta": with_token}),
    );
    let mut progress = Vec::new();
    let answer = loop {
        let message = server.expect();
        if message.get("id").is_some() {
            break message;
        }
        assert_eq!(message["params"]["progressToken"], "tok");
        progress.push(message["params"]["progress"].as_f64().unwrap());
    };
    assert_eq!(answer["result"]["content"][0]["text"], "Reindexed 120 documents in a");
    assert!(!progress.is_empty() && progress.windows(2).all(|pair| pair[0] < pair[1]), "{progress:?}");
    assert!(server.recv(Duration::from_millis(300)).is_none(), "nothing after the answer");
    // Without a token: the answer only.
    server.request(
        2,
        "tools/call",
        json!({"name": "reindex", "arguments": {"collection": "b", "step_ms": 20}, "_meta": meta()}),
    );
    assert_eq!(server.expect()["id"], 2);
}

#[test]
fn a_cancelled_call_gets_no_answer_and_its_lock_is_released() {
    let mut server = Server::start();
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}));
    let started = Instant::now();
    while !server.call_text(100 + started.elapsed().as_millis() as i64, "locks", json!({})).contains("spin") {
        assert!(started.elapsed() < Duration::from_secs(5), "spin never took its lock");
    }
    // Malformed and unknown cancellations are ignored.
    server.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}}),
    );
    server
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12345}}));
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled"}));
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "test"}}));
    // The next answer is for the next request, not the cancelled one; the lock is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let locks = server.call_text(7, "locks", json!({}));
        if locks == "[]" {
            break;
        }
        assert!(Instant::now() < deadline, "the spin lock was never released: {locks}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.recv(Duration::from_millis(300)).is_none(), "no answer for the cancelled call");
}

fn cancel(server: &mut Server, id: i64) {
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}));
}

#[test]
fn a_cancelled_call_that_still_completes_in_its_grace_period_gets_no_answer() {
    let mut server = Server::start();
    // spin ignores the cancel and returns after 50 ms, inside the 100 ms grace period.
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 0.05}, "_meta": meta()}));
    cancel(&mut server, 1);
    assert!(server.recv(Duration::from_millis(500)).is_none(), "no answer for the cancelled call");
    assert_eq!(server.call_text(2, "echo", json!({"text": "next"})), "next");
}

#[test]
fn a_call_cancelled_while_it_waits_for_a_slot_leaves_the_queue_and_gets_no_answer() {
    let mut server = Server::start_with("max_concurrent_calls = 1\nqueue_timeout_ms = 300");
    // Read and admitted in order: the spin takes the one slot before the echo asks for it.
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}));
    server.request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "queued"}, "_meta": meta()}),
    );
    cancel(&mut server, 2);
    // Uncancelled, it would be refused as busy after 300 ms.
    assert!(server.recv(Duration::from_millis(700)).is_none(), "no answer for the cancelled call");
    cancel(&mut server, 1);
    let started = Instant::now();
    loop {
        server.request(
            3,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "free"}, "_meta": meta()}),
        );
        let answer = server.expect();
        assert_eq!(answer["id"], 3, "{answer}");
        if answer["result"]["isError"] != true {
            assert_eq!(answer["result"]["content"][0]["text"], "free");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the slot never freed: {answer}");
    }
    assert!(server.recv(Duration::from_millis(200)).is_none());
}

#[test]
fn a_timed_out_call_answers_with_an_error_naming_the_limit() {
    let mut server = Server::start();
    server.request(
        1,
        "tools/call",
        json!({"name": "order_book", "arguments": {"title": "Dune"}, "_meta": meta()}),
    );
    let answer = server.expect();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("maximum duration"), "{text}");
    assert_eq!(server.call_text(2, "locks", json!({})), "[]", "cleanup released the hold");
}

#[test]
fn stdin_eof_stops_calls_in_flight_runs_their_cleanup_and_exits() {
    let mut server = Server::start();
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}));
    server.wait_for_lock(100, "spin");
    drop(server.stdin.take());
    server.expect_shutdown_answer_and_exit(1);
}

#[test]
fn sigterm_stops_calls_in_flight_answers_them_and_exits_with_stdin_still_open() {
    let mut server = Server::start();
    assert_eq!(server.call_text(1, "echo", json!({"text": "up"})), "up");
    server.request(2, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}));
    server.wait_for_lock(100, "spin");
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) }, 0);
    server.expect_shutdown_answer_and_exit(2);
    assert!(server.stdin.is_some(), "stdin stayed open throughout");
}

/// Ordered, not timed: the echo's answer is the first line out while a 60 s spin still
/// runs (a server that ran calls one at a time would answer neither within `expect`'s
/// 10 s), and the spin is then cancelled, never answered. (Timed from the spin's request,
/// as it was, the echo's wait included the server's start and failed CI at 1 s.)
#[test]
fn a_slow_call_never_blocks_another() {
    let mut server = Server::start();
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 60}, "_meta": meta()}));
    assert_eq!(server.call_text(2, "echo", json!({"text": "fast"})), "fast");
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    // The next line out is this echo's: the cancelled spin was never answered.
    assert_eq!(server.call_text(3, "echo", json!({"text": "after"})), "after");
}

#[test]
fn random_bytes_never_crash_the_server() {
    let mut server = Server::start();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..300 {
        // A non-blank line of random bytes (JSON punctuation included, newlines excluded).
        let length = 1 + next() as usize % 200;
        let mut line: Vec<u8> = std::iter::once(b'\x01')
            .chain(
                (0..length).map(|_| b"{}[]\":,0a\\\xff\x00 "[next() as usize % 13] ^ (next() as u8 & 0x80)),
            )
            .filter(|&byte| byte != b'\n')
            .collect();
        line.push(b'\n');
        server.send_raw(&line);
        let answer = server.expect();
        let code = answer["error"]["code"].as_i64();
        assert!(matches!(code, Some(-32700 | -32600)), "{:?} -> {answer}", String::from_utf8_lossy(&line));
    }
    assert_eq!(server.call_text(1, "echo", json!({"text": "alive"})), "alive");
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The nice values of the server's threads named `name`.
fn thread_nice_values(pid: u32, name: &str) -> Vec<i64> {
    let mut values = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((head, tail)) = stat.rsplit_once(')') else { continue };
        if head.split_once('(').is_some_and(|(_, comm)| comm == name) {
            // Field 19 of stat is the nice value; `tail` starts at field 3.
            values.push(tail.split_whitespace().nth(16).unwrap().parse().unwrap());
        }
    }
    values
}

/// A call that waits runs on the waiting calls' threads at nice 19, the lowest
/// (dispatch.rs), so that it never delays the transports; the threads that read and answer
/// stdin stay at the default.
#[test]
fn a_call_that_waits_runs_on_threads_of_the_lowest_priority() {
    let mut server = Server::start();
    server.request(1, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}, "_meta": meta()}));
    server.wait_for_lock(100, "spin");
    let pid = server.child.id();
    // The server starts at the tests' own priority (0 unless they run under `nice`).
    // SAFETY: getpriority of this process has no preconditions.
    let own = i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) });
    let waiting = thread_nice_values(pid, "cordon-calls");
    assert!(!waiting.is_empty() && waiting.iter().all(|&nice| nice == 19), "{waiting:?}");
    let main = thread_nice_values(pid, "cordon");
    assert!(!main.is_empty() && main.iter().all(|&nice| nice == own), "{main:?}");
    cancel(&mut server, 1);
}

#[test]
fn an_idle_server_burns_no_cpu_the_epoch_ticker_sleeps() {
    let mut server = Server::start();
    assert_eq!(server.call_text(1, "echo", json!({"text": "warm"})), "warm");
    // The ticker stops once no call is in flight: wait for a window without a tick.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let before = cpu_ticks(server.child.id());
        std::thread::sleep(Duration::from_millis(100));
        if cpu_ticks(server.child.id()) == before {
            break;
        }
        assert!(Instant::now() < deadline, "the server never went idle after its call");
    }
    let before = cpu_ticks(server.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(server.child.id()) - before;
    // A ticker at 1 ms costs a few percent of a core; idle means (almost) nothing.
    assert!(used <= 2, "an idle server used {used} clock ticks in 2 s");
    // And it still stops a spinning guest at once when one runs.
    server.request(2, "tools/call", json!({"name": "spin", "arguments": {"seconds": 0.2}, "_meta": meta()}));
    assert!(server.expect()["result"]["content"][0]["text"].as_str().unwrap().starts_with("Spun"));
}

/// One socket as both stdin and stdout (socat's `EXEC:`, systemd's and inetd's socket
/// activation): writing stdout on the reactor must not turn stdin non-blocking, or the
/// first read with nothing to read fails and the server exits. Each request is sent after
/// the previous answer, when the server has gone back to reading.
#[test]
fn one_socket_as_stdin_and_stdout_is_served() {
    use std::io::{BufRead, BufReader};
    use std::os::fd::OwnedFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_too = OwnedFd::from(theirs.try_clone().unwrap());
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command
        .args(["serve", "--stdio", "--config"])
        .arg(examples_config("stdio-one-socket", ""))
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(theirs_too));
    let mut process = common::server::Process::spawn(command);
    process.wait_log("loaded");
    let schema = Schema::new();
    let mut answers = BufReader::new(ours.try_clone().unwrap());
    ours.set_read_timeout(Some(common::server::WAIT)).unwrap();
    let mut writer = &ours;
    for id in 1..=3 {
        let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": {"_meta": meta()}});
        writeln!(writer, "{ping}").unwrap();
        let mut line = String::new();
        answers.read_line(&mut line).unwrap_or_else(|error| panic!("no answer to ping {id}: {error}"));
        let answer: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("ping {id}: {line:?}"));
        schema.check_sent(&answer, Some("ping"));
        assert_eq!(answer["id"], id, "{answer}");
    }
}
