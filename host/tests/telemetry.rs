//! Telemetry as an operator sees it: `cordon serve --stdio --log-format json --metrics`
//! with the example tools, the hostile tools and a trapping tool; one JSON log line per
//! call of each outcome, the metrics scraped over a real HTTP connection and parsed, the
//! label-cardinality bound; and the probes, in process, before and after the server is
//! ready.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use common::wire::{Schema, examples_config, meta};

/// A value every call's arguments carry; it must never reach the log.
const MARKER: &str = "ARGUMENT-VALUE-7f3a";

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: mpsc::Receiver<Value>,
    /// The log's lines, parsed (every line on stderr must be JSON).
    log: mpsc::Receiver<Value>,
    /// Every log line's text, to search for leaks.
    log_text: Vec<String>,
    metrics: SocketAddr,
    schema: Schema,
}

impl Server {
    /// `server` is added to the config's `[server]` table.
    fn start(name: &str, server: &str) -> Self {
        let config = examples_config(name, server);
        let dir = config.parent().unwrap();
        let trap = common::WatGuest::new("boom", "unreachable").component();
        std::fs::write(dir.join("trap.wasm"), trap).unwrap();
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!(
            "[components.tools.spin]\nmax_duration_ms = 300\n\n[[components]]\npath = {:?}\nlimits = {{ memory_mb = 16, grace_ms = 100 }}\n\n\
             [[components]]\npath = \"trap.wasm\"\n",
            common::hostile().display().to_string()
        ));
        std::fs::write(&config, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["serve", "--stdio", "--log-format", "json", "--metrics", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("CORDON_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = lines(child.stdout.take().unwrap(), "stdout");
        let log = lines(child.stderr.take().unwrap(), "stderr");
        let mut server = Self {
            child,
            stdin,
            stdout,
            log,
            log_text: Vec::new(),
            metrics: "0.0.0.0:0".parse().unwrap(),
            schema: Schema::new(),
        };
        let line =
            server.log_until(|line| line["fields"]["message"].as_str().unwrap().contains("serving metrics"));
        let message = line["fields"]["message"].as_str().unwrap();
        let address = message.split("http://").nth(1).unwrap().trim_end_matches("/metrics");
        server.metrics = address.parse().unwrap();
        server
    }

    fn call(&mut self, id: Value, tool: &str, arguments: Value) {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta()}});
        writeln!(self.stdin, "{request}").unwrap();
    }

    fn cancel(&mut self, id: i64) {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "_meta": meta()}});
        writeln!(self.stdin, "{cancel}").unwrap();
    }

    /// The next message on stdout, checked against the schema.
    fn answer(&mut self) -> Value {
        let message = self.stdout.recv_timeout(Duration::from_secs(20)).expect("an answer within 20 s");
        let method = message.get("id").map(|_| "tools/call");
        self.schema.check_sent(&message, method);
        message
    }

    /// Log lines up to the first one `wanted` accepts, which is returned.
    fn log_until(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self.log.recv_timeout(Duration::from_secs(20)).expect("a log line within 20 s");
            self.log_text.push(line.to_string());
            if wanted(&line) {
                return line;
            }
        }
    }

    /// The call line of request `id` (as JSON text), with its fields.
    fn call_line(&mut self, id: &str) -> Value {
        let line =
            self.log_until(|line| line["target"] == "cordon::call" && line["fields"]["request_id"] == id);
        line["fields"].clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each line of `stream`, parsed as JSON, on a channel; a line that is not JSON fails.
fn lines(stream: impl Read + Send + 'static, what: &'static str) -> mpsc::Receiver<Value> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let value = serde_json::from_str(&line)
                .unwrap_or_else(|_| panic!("{what} carried a non-JSON line: {line}"));
            if sender.send(value).is_err() {
                break;
            }
        }
    });
    receiver
}

/// `GET path` on a fresh connection; the status and the body.
fn get(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The exposition's samples (`name{labels}` → value), after checking that every line is
/// well formed: `# HELP`, `# TYPE`, `# UNIT`, the final `# EOF`, or a sample whose
/// labels are `name="value"` pairs and whose value is a number.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the exposition ends with # EOF");
    let name_ok = |name: &str| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    };
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let kind = parts.next().unwrap();
            assert!(matches!(kind, "HELP" | "TYPE" | "UNIT"), "unknown comment: {line}");
            assert!(name_ok(parts.next().unwrap_or_default()), "bad metric name: {line}");
            if kind == "TYPE" {
                let type_name = parts.next().unwrap_or_default();
                assert!(["counter", "gauge", "histogram", "info", "unknown"].contains(&type_name), "{line}");
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "bad metric name: {line}");
        if let Some(labels) = series.strip_prefix(name).filter(|rest| !rest.is_empty()) {
            let labels = labels
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or_else(|| panic!("{line}"));
            // Our label values never hold commas or quotes: split naively, check each pair.
            for pair in labels.split(',') {
                let (key, quoted) = pair.split_once('=').unwrap_or_else(|| panic!("bad label: {line}"));
                assert!(name_ok(key), "bad label name: {line}");
                assert!(
                    quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'),
                    "bad label: {line}"
                );
            }
        }
        assert!(samples.insert(series.to_owned(), value).is_none(), "a series twice: {line}");
    }
    samples
}

fn sample(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| {
        let names: Vec<&String> = samples.keys().filter(|key| key.starts_with("cordon_calls")).collect();
        panic!("no series {series}; calls series: {names:?}")
    })
}

#[test]
fn one_json_log_line_per_call_of_each_outcome_and_metrics_that_count_them() {
    let mut server = Server::start("telemetry", "");
    let text = json!({"text": MARKER});

    // ok
    server.call(json!(1), "echo", text.clone());
    assert_eq!(server.answer()["result"]["content"][0]["text"], MARKER);
    let ok = server.call_line("1");

    // tool_error: an origin the component is not granted.
    server.call(json!(2), "fetch", json!({"url": format!("http://127.0.0.1:9/{MARKER}")}));
    assert_eq!(server.answer()["result"]["isError"], true);
    let tool_error = server.call_line("2");

    // cancelled, cooperatively: reindex checks for a stop between its steps. Cancelled
    // once its first progress report shows it running.
    let mut with_progress = meta();
    with_progress["progressToken"] = json!("p3");
    let request = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "reindex",
        "arguments": {"collection": MARKER, "total": 100000, "step_ms": 20}, "_meta": with_progress}});
    writeln!(server.stdin, "{request}").unwrap();
    assert_eq!(server.answer()["method"], "notifications/progress");
    server.cancel(3);
    let cancelled = server.call_line("3");

    // timed_out while computing: spin never checks, and traps at an epoch check after
    // its 300 ms and grace.
    server.call(json!(4), "spin", json!({"seconds": 30}));
    assert_eq!(server.answer()["result"]["isError"], true);
    let epoch = server.call_line("4");

    // timed_out, parked in a host call: order_book sleeps past its 400 ms.
    server.call(json!(5), "order_book", json!({"title": MARKER}));
    assert_eq!(server.answer()["result"]["isError"], true);
    let timed_out = server.call_line("5");

    // trapped
    server.call(json!(6), "boom", json!({"note": MARKER}));
    assert_eq!(server.answer()["result"]["isError"], true);
    let trapped = server.call_line("6");

    // limit: 64 MiB in a component limited to 16.
    server.call(json!(7), "alloc_mb", json!({"mb": 64}));
    assert_eq!(server.answer()["result"]["isError"], true);
    let limit = server.call_line("7");

    // refused: an unknown tool, and arguments that fail the input schema.
    server.call(json!(8), &format!("no_such_tool_{MARKER}"), text.clone());
    assert!(server.answer().get("error").is_some());
    let unknown = server.call_line("8");
    server.call(json!("nine"), "echo", json!({"text": 5, "other": MARKER}));
    // A tool execution error for the model to correct (SEP-1303); no instance started.
    assert_eq!(server.answer()["result"]["isError"], true);
    let invalid = server.call_line("\"nine\"");

    let expect = |line: &Value, outcome: &str, stop: Option<&str>, cleanup: Option<&str>| {
        assert_eq!(line["outcome"], outcome, "{line}");
        assert_eq!(line["stop"].as_str(), stop, "{line}");
        assert_eq!(line["cleanup"].as_str(), cleanup, "{line}");
        assert!(line["duration_ms"].as_f64().is_some(), "{line}");
        assert!(line["argument_bytes"].as_u64().is_some(), "{line}");
        assert!(line["result_bytes"].as_u64().is_some(), "{line}");
        assert!(line.get("tenant").is_none(), "no tenants yet: {line}");
        if stop.is_some() {
            assert!(line["call_id"].as_u64().is_some(), "{line}");
            assert!(line["component"].is_string() && line["tool"].is_string(), "{line}");
        }
        if cleanup.is_some() {
            assert!(line["cleanup_ms"].as_f64().is_some(), "{line}");
        }
        // A stop's latency, only when something stopped the guest.
        let stopped = stop.is_some_and(|stop| stop != "returned");
        assert_eq!(line["stop_latency_ms"].as_f64().is_some(), stopped, "{line}");
    };
    expect(&ok, "ok", Some("returned"), None);
    assert_eq!((ok["component"].as_str(), ok["tool"].as_str()), (Some("example-tools"), Some("echo")));
    assert_eq!(ok["argument_bytes"], json!({"text": MARKER}).to_string().len());
    assert!(ok["result_bytes"].as_u64().unwrap() >= MARKER.len() as u64, "{ok}");
    expect(&tool_error, "tool_error", Some("returned"), None);
    expect(&cancelled, "cancelled", Some("cooperative"), Some("completed"));
    expect(&epoch, "timed_out", Some("epoch_trap"), Some("completed"));
    expect(&timed_out, "timed_out", Some("dropped_in_host_call"), Some("completed"));
    expect(&trapped, "trapped", Some("returned"), Some("completed"));
    assert_eq!(trapped["component"], "trap");
    expect(&limit, "limit", Some("returned"), Some("completed"));
    expect(&unknown, "refused", None, None);
    assert_eq!(unknown["refusal"], "unknown_tool");
    assert!(unknown.get("tool").is_none() && unknown.get("component").is_none(), "{unknown}");
    expect(&invalid, "refused", None, None);
    assert_eq!(
        (invalid["refusal"].as_str(), invalid["tool"].as_str()),
        (Some("invalid_arguments"), Some("echo"))
    );

    // The metrics, over a real HTTP connection.
    let (status, body) = get(server.metrics, "GET", "/metrics");
    assert_eq!(status, 200);
    let samples = parse_exposition(&body);
    let calls = |component: &str, tool: &str, outcome: &str| {
        sample(
            &samples,
            &format!("cordon_calls_total{{component=\"{component}\",tool=\"{tool}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(calls("example-tools", "echo", "ok"), 1.0);
    assert_eq!(calls("example-tools", "fetch", "tool_error"), 1.0);
    assert_eq!(calls("example-tools", "reindex", "cancelled"), 1.0);
    assert_eq!(calls("example-tools", "spin", "timed_out"), 1.0);
    assert_eq!(calls("example-tools", "order_book", "timed_out"), 1.0);
    assert_eq!(calls("trap", "boom", "trapped"), 1.0);
    assert_eq!(calls("hostile", "alloc_mb", "limit"), 1.0);
    assert_eq!(calls("", "", "refused"), 1.0);
    assert_eq!(calls("example-tools", "echo", "refused"), 1.0);
    assert_eq!(sample(&samples, "cordon_refusals_total{reason=\"unknown_tool\"}"), 1.0);
    assert_eq!(
        sample(&samples, "cordon_call_duration_seconds_count{component=\"example-tools\",tool=\"echo\"}"),
        1.0
    );
    for stop in ["cooperative", "epoch_trap", "dropped_in_host_call"] {
        assert_eq!(sample(&samples, &format!("cordon_stop_latency_seconds_count{{stop=\"{stop}\"}}")), 1.0);
    }
    assert_eq!(
        sample(&samples, "cordon_cleanups_total{component=\"example-tools\",cleanup=\"completed\"}"),
        3.0
    );
    assert_eq!(sample(&samples, "cordon_queue_wait_seconds_count"), 7.0, "every call that ran");
    assert_eq!(sample(&samples, "cordon_cleanup_duration_seconds_count"), 5.0);
    assert_eq!(sample(&samples, "cordon_pool_slots"), 256.0);
    assert_eq!(sample(&samples, "cordon_compile_cache_misses_total"), 3.0, "three components, no cache");
    assert_eq!(sample(&samples, "cordon_compile_cache_hits_total"), 0.0);
    assert!(samples.contains_key("cordon_spare_instances"));
    assert!(samples.contains_key("cordon_pool_slots_in_use"));
    assert!(samples.contains_key("cordon_log_events_dropped_total"));

    // 1,000 distinct unknown tool names add no series.
    for i in 0..1000 {
        server.call(json!(1000 + i), &format!("unknown_{i}"), json!({}));
    }
    for _ in 0..1000 {
        assert!(server.answer().get("error").is_some());
    }
    server.call_line("1999");
    let (_, body) = get(server.metrics, "GET", "/metrics");
    let after = parse_exposition(&body);
    let series = |samples: &BTreeMap<String, f64>| samples.keys().cloned().collect::<Vec<_>>();
    assert_eq!(series(&after), series(&samples), "no new series");
    assert_eq!(
        calls("", "", "refused") + 1000.0,
        sample(&after, "cordon_calls_total{component=\"\",tool=\"\",outcome=\"refused\"}")
    );

    // Probes, and nothing else.
    assert_eq!(get(server.metrics, "GET", "/healthz").0, 200);
    assert_eq!(get(server.metrics, "GET", "/readyz").0, 200);
    assert_eq!(get(server.metrics, "GET", "/mcp").0, 404);
    assert_eq!(get(server.metrics, "GET", "/metrics/").0, 404);
    assert_eq!(get(server.metrics, "POST", "/metrics").0, 405);

    // An argument's value never reaches the server's log lines, read up to the last call's
    // (a guest's own lines, target `guest`, say what the guest chose to write: order_book's
    // cleanup names its hold).
    let leaked: Vec<&String> = server
        .log_text
        .iter()
        .filter(|line| line.contains(MARKER) && !line.contains("\"target\":\"guest\""))
        .collect();
    assert!(leaked.is_empty(), "argument values in the log: {leaked:?}");
    let call_lines = server.log_text.iter().filter(|line| line.contains("\"cordon::call\"")).count();
    assert_eq!(call_lines, 1009, "one line per call");
}

/// `get`, from async code.
async fn get_async(address: SocketAddr, path: &'static str) -> (u16, String) {
    tokio::task::spawn_blocking(move || get(address, "GET", path)).await.unwrap()
}

/// Wait until `check` holds of what `path` answers, for at most 10 s.
async fn until(address: SocketAddr, path: &'static str, check: impl Fn(u16, &str) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = get_async(address, path).await;
        if check(status, &body) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path} stayed at {status}: {body}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whoever reaches the metrics listener cannot keep the probes from being answered:
/// idle connections from one address hold only that address's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_cannot_starve_the_probes() {
    use cordon::telemetry::listener::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS};
    use tokio::io::AsyncReadExt;
    let telemetry =
        cordon::telemetry::Telemetry::start(Some("127.0.0.1:0".parse().unwrap()), None).await.unwrap();
    let metrics = telemetry.metrics_address().unwrap();
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
        idle.push(socket.connect(metrics).await.unwrap());
    }
    // Those over the address's share are closed unread.
    let mut closed = 0;
    for stream in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut byte)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, MAX_CONNECTIONS - MAX_CONNECTIONS_PER_ADDRESS);
    // The probe from another address is answered.
    assert_eq!(get_async(metrics, "/healthz").await.0, 200);
}

/// Nor can idle connections from many addresses, however they spread: with every place
/// taken by sixteen addresses holding their whole share, or by 64 holding one each, the
/// probe from an address of its own is answered (in the place of the oldest connection of
/// an address holding the most). Before, it was closed unread until one of them left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_many_addresses_cannot_starve_the_probes() {
    use cordon::telemetry::listener::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS};
    let telemetry =
        cordon::telemetry::Telemetry::start(Some("127.0.0.1:0".parse().unwrap()), None).await.unwrap();
    let metrics = telemetry.metrics_address().unwrap();
    for per_address in [MAX_CONNECTIONS_PER_ADDRESS, 1] {
        let mut idle = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            let from = u8::try_from(2 + i / per_address).unwrap();
            socket.bind(SocketAddr::from(([127, 0, 0, from], 0))).unwrap();
            idle.push(socket.connect(metrics).await.unwrap());
        }
        // They are silent: every place stays taken until the head timeout (2 s).
        let probe =
            tokio::time::timeout(cordon::telemetry::listener::HEADER_TIMEOUT, get_async(metrics, "/healthz"));
        let answered = probe.await.expect("the probe was answered within the head timeout");
        assert_eq!(answered.0, 200, "{per_address} connections from each address starved the probe");
        drop(idle);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_loading_listening_and_shutdown_and_the_gauges_follow_connections_and_streams() {
    use cordon::transport::http::{HttpSettings, serve};
    use std::sync::Arc;
    let telemetry =
        cordon::telemetry::Telemetry::start(Some("127.0.0.1:0".parse().unwrap()), None).await.unwrap();
    let metrics = telemetry.metrics_address().unwrap();
    // Alive at once, not ready while components load.
    assert_eq!(get_async(metrics, "/healthz").await.0, 200);
    assert_eq!(get_async(metrics, "/readyz").await.0, 503);
    let wait = common::WatGuest::new(
        "wait",
        "(call $sleep_ms (i64.const 1000)) (call $ok_text (i32.const 2000) (i32.const 4))",
    );
    let mut runtime = common::runtime_with(&[wait], common::quick_limits()).await;
    telemetry.observe(&mut runtime);
    let runtime = Arc::new(runtime);
    // A call quiet for 20 ms is answered as an SSE stream.
    let settings = HttpSettings { sse_after: Duration::from_millis(20), ..HttpSettings::default() };
    telemetry.loaded(runtime.clone(), Some(settings.stats.clone()));
    // Loaded, but the MCP listener does not accept yet.
    assert_eq!(get_async(metrics, "/readyz").await.0, 503);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mcp = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = telemetry.until_stopping(async move {
        let _ = stopped.await;
    });
    let server = cordon::dispatch::Server::new(runtime, Duration::from_millis(10));
    let serving = tokio::spawn(serve(server, listener, settings, shutdown, Duration::from_secs(2)));
    until(metrics, "/readyz", |status, _| status == 200).await;
    // An open MCP connection shows in the gauge.
    let connection = tokio::net::TcpStream::connect(mcp).await.unwrap();
    until(metrics, "/metrics", |_, body| body.contains("cordon_http_connections_open 1\n")).await;
    drop(connection);
    until(metrics, "/metrics", |_, body| body.contains("cordon_http_connections_open 0\n")).await;
    // A call answered as a stream shows in the streams gauge while it runs, and is counted
    // once it is answered.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "wait", "arguments": {}, "_meta": meta()}})
    .to_string();
    let mut stream = tokio::net::TcpStream::connect(mcp).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {mcp}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: wait\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes()).await.unwrap();
    until(metrics, "/metrics", |_, body| body.contains("cordon_http_streams_open 1\n")).await;
    let mut response = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut response).await.unwrap();
    assert!(response.contains("text/event-stream") && response.contains("done"), "{response}");
    until(metrics, "/metrics", |_, body| {
        body.contains("cordon_http_streams_open 0\n")
            && body.contains("cordon_calls_total{component=\"wait\",tool=\"wait\",outcome=\"ok\"} 1\n")
    })
    .await;
    // Shutdown begins: not ready, still alive.
    stop.send(()).unwrap();
    until(metrics, "/readyz", |status, _| status == 503).await;
    assert_eq!(get_async(metrics, "/healthz").await.0, 200);
    serving.await.unwrap().unwrap();
    assert_eq!(get_async(metrics, "/readyz").await.0, 503);
}

#[test]
fn the_metrics_listener_refuses_long_heads_never_reads_a_body_and_caps_its_connections() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let telemetry = runtime
        .block_on(cordon::telemetry::Telemetry::start(Some("127.0.0.1:0".parse().unwrap()), None))
        .unwrap();
    let address = telemetry.metrics_address().unwrap();
    // A head past 8 KiB is refused, not buffered.
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let long = "x".repeat(16 << 10);
    let _ = write!(stream, "GET /metrics HTTP/1.1\r\nHost: a\r\nX-Long: {long}\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 431"), "{response:.200}");
    // A request announcing a body it never sends is answered at once, its body unread.
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Its own connection limits: with every slot its address may hold taken by silent
    // clients, the next connection is closed unread; once they leave, connections are
    // served again.
    let silent: Vec<TcpStream> = (0..cordon::telemetry::listener::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    let mut refused = TcpStream::connect(address).unwrap();
    refused.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(refused, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut answer = Vec::new();
    let _ = refused.read_to_end(&mut answer);
    assert!(answer.is_empty(), "over the limit, nothing is answered: {:?}", String::from_utf8_lossy(&answer));
    drop(silent);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = write!(stream, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "slots never came back");
    }
}

#[test]
fn calls_that_wait_for_a_slot_count_their_wait_and_are_refused_or_cancelled_there() {
    let mut server = Server::start("telemetry-queue", "max_concurrent_calls = 1\nqueue_timeout_ms = 300");
    // order_book holds the one slot for its 400 ms (then grace and cleanup).
    server.call(json!(1), "order_book", json!({"title": "slot"}));
    // Waits, then is refused: the slot stays taken past the queue timeout.
    server.call(json!(2), "echo", json!({"text": "busy"}));
    let busy = server.call_line("2");
    assert_eq!(
        (busy["outcome"].as_str(), busy["refusal"].as_str()),
        (Some("refused"), Some("busy")),
        "{busy}"
    );
    assert!(busy["queue_ms"].as_f64().unwrap() >= 300.0, "{busy}");
    let held = server.call_line("1");
    assert_eq!(held["outcome"], "timed_out");
    // Holding the slot again, a waiting call is cancelled before it runs.
    server.call(json!(3), "order_book", json!({"title": "slot"}));
    server.call(json!(4), "echo", json!({"text": "never runs"}));
    server.cancel(4);
    let cancelled = server.call_line("4");
    assert_eq!(cancelled["outcome"], "cancelled", "{cancelled}");
    assert!(
        cancelled.get("stop").is_none() && cancelled.get("call_id").is_none(),
        "it never ran: {cancelled}"
    );
    assert_eq!(cancelled["tool"], "echo");
    let (_, body) = get(server.metrics, "GET", "/metrics");
    let samples = parse_exposition(&body);
    assert_eq!(sample(&samples, "cordon_refusals_total{reason=\"busy\"}"), 1.0);
    assert_eq!(
        sample(
            &samples,
            "cordon_calls_total{component=\"example-tools\",tool=\"echo\",outcome=\"cancelled\"}"
        ),
        1.0
    );
    // The busy refusal's wait is a queue wait too, beside the calls that ran.
    assert!(sample(&samples, "cordon_queue_wait_seconds_count") >= 2.0);
}

/// Metrics served beyond loopback are served to anyone who reaches them, and they name
/// every tenant and tool: the operator is told so at start.
#[test]
fn metrics_beyond_loopback_are_warned_of() {
    let config = examples_config("metrics-beyond-loopback", "");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["serve", "--stdio", "--log-format", "json", "--metrics", "0.0.0.0:0", "--config"])
        .arg(&config)
        .env("CORDON_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = lines(child.stderr.take().unwrap(), "stderr");
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|line: &String| line.contains("serving metrics on http://")) {
        let line = log.recv_timeout(Duration::from_secs(20)).expect("a log line within 20 s");
        seen.push(line["fields"]["message"].as_str().unwrap_or_default().to_owned());
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|line| line.contains("beyond loopback, to anyone who reaches it")), "{seen:#?}");
}
