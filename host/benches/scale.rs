//! Scale: what one server holds and how fast it gets there, in one run.
//!
//! - `parked`: 10,000 `park(20 s)` calls of the hostile component in flight at once on one
//!   `cordon serve --stdio`, each waiting in a host call (a WASI sleep). Measures the
//!   server's RSS, threads and descriptors idle and with them parked, the RSS per parked
//!   call, and the latency of an example `echo` beside them against idle, then checks that
//!   every parked call answers.
//! - `parked-http`: the same over `cordon serve --http`, a connection per parked call.
//! - `http`: HTTP echo throughput of `cordon serve --http` against a bare hyper server
//!   (this binary, re-run as `bare-hyper PORT BODY_FILE [SPIN_MICROS]`) that answers the
//!   bytes Cordon answers, from Rust code; the same load generator as the `http` benchmark
//!   (`support::http`), in alternating slices. Three more subjects split Cordon's cost: the
//!   same server over a WAT tool with four small WASI imports (the example component's
//!   surface apart), asked for an unknown tool (no guest: the path every request takes),
//!   and bare hyper spinning a fixed time per request (what a cost per request does to
//!   throughput on this machine, where the load generator shares the cores).
//! - `ready`: time from spawn to the first `tools/list` answer with 500 components (WAT
//!   components with distinct tool names, so each compiles on its own), with an empty
//!   compile cache and then with the cache it filled; and the warm start's time per
//!   component against that of the first 100 alone (a start that grows faster than its
//!   components shows above 1.0x).
//!
//! ```sh
//! cargo xtask guests && cargo build -p cordon
//! sudo sysctl -w vm.max_map_count=262144   # 10,000 calls need more mappings (README)
//! cargo bench -p cordon --bench scale --profile dev [-- parked parked-http http ready]
//! ```

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::http::{Subject, free_port, wait_for};

/// Parked calls held at once, and how long each waits in its host call.
const PARKED: usize = 10_000;
const PARK_MS: u64 = 20_000;
/// Sequential echo round trips per latency figure.
const ECHO_SAMPLES: usize = 2_000;
/// HTTP: each server is loaded for `ROUNDS` slices of `SLICE`, in alternation.
const ROUNDS: u32 = 5;
const SLICE: Duration = Duration::from_secs(1);
/// Components for the time to ready.
const COMPONENTS: usize = 500;
const WARM_STARTS: usize = 3;
/// The smaller set whose warm start is the baseline for [`COMPONENTS`]: a start that grows
/// faster than the components do shows as a ratio above 1.
const FEW_COMPONENTS: usize = 100;

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A `cordon serve --stdio` driven over its pipes; a thread reads its stdout and hands on
/// each message with the time it arrived.
struct StdioServer {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    answers: Receiver<(Value, Instant)>,
    /// Answers read while waiting for another one.
    early: HashMap<u64, (Value, Instant)>,
    next_id: u64,
}

impl StdioServer {
    fn spawn(cordon: &Path, config: &Path) -> Self {
        let mut child = Command::new(cordon)
            .args(["serve", "--stdio", "--config"])
            .arg(config)
            .env("CORDON_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = BufWriter::new(child.stdin.take().unwrap());
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (sender, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                let message: Value = serde_json::from_str(&line).unwrap();
                if sender.send((message, Instant::now())).is_err() {
                    break;
                }
            }
        });
        Self { child, stdin, answers, early: HashMap::new(), next_id: 1 }
    }

    /// Queue a request (sent at the next `flush`); returns its id.
    fn queue(&mut self, method: &str, mut params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        params["_meta"] = meta();
        let mut bytes =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .unwrap();
        bytes.push(b'\n');
        self.stdin.write_all(&bytes).unwrap();
        id
    }

    fn flush(&mut self) {
        self.stdin.flush().unwrap();
    }

    /// The answer to request `id`, and when it arrived; others that come first are kept.
    fn answer(&mut self, id: u64, deadline: Instant) -> (Value, Instant) {
        if let Some(answer) = self.early.remove(&id) {
            return answer;
        }
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let (message, at) = match self.answers.recv_timeout(wait) {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => panic!("no answer to request {id} in time"),
                Err(RecvTimeoutError::Disconnected) => panic!("the server closed its stdout"),
            };
            // Notifications (progress, logs) carry no id.
            let Some(got) = message.get("id").and_then(Value::as_u64) else { continue };
            if got == id {
                return (message, at);
            }
            self.early.insert(got, (message, at));
        }
    }

    /// One sequential `tools/call echo` round trip.
    fn echo(&mut self) -> Duration {
        let id = self.queue("tools/call", json!({"name": "echo", "arguments": {"text": "hello"}}));
        let started = Instant::now();
        self.flush();
        let (answer, at) = self.answer(id, started + Duration::from_secs(10));
        assert_eq!(answer["result"]["content"][0]["text"], "hello", "{answer}");
        at - started
    }

    /// Every tool name `tools/list` offers, page after page.
    fn tool_names(&mut self, deadline: Instant) -> Vec<String> {
        let mut names = Vec::new();
        let mut cursor = Value::Null;
        loop {
            let params = if cursor.is_null() { json!({}) } else { json!({"cursor": cursor}) };
            let id = self.queue("tools/list", params);
            self.flush();
            let (answer, _) = self.answer(id, deadline);
            let result = &answer["result"];
            let tools = result["tools"].as_array().unwrap_or_else(|| panic!("{answer}"));
            names.extend(tools.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()));
            cursor = result.get("nextCursor").cloned().unwrap_or(Value::Null);
            if cursor.is_null() {
                return names;
            }
        }
    }

    /// Close stdin (the server stops) and wait for it to exit.
    fn close(self) {
        let Self { mut child, stdin, .. } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

/// What `/proc` says about a process.
#[derive(Debug, Clone, Copy)]
struct ProcessState {
    rss_kb: u64,
    virtual_kb: u64,
    threads: u64,
    fds: usize,
    mappings: usize,
}

fn process_state(pid: u32) -> ProcessState {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|line| line.starts_with(name)).unwrap();
        line[name.len()..].trim().trim_end_matches(" kB").trim().parse().unwrap()
    };
    ProcessState {
        rss_kb: field("VmRSS:"),
        virtual_kb: field("VmSize:"),
        threads: field("Threads:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count(),
        mappings: std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap().lines().count(),
    }
}

fn print_state(label: &str, state: ProcessState) {
    println!(
        "{label:<34} RSS {:>8.1} MiB  virtual {:>8.1} GiB  threads {:>3}  fds {:>5}  mappings {:>6}",
        state.rss_kb as f64 / 1024.0,
        state.virtual_kb as f64 / (1024.0 * 1024.0),
        state.threads,
        state.fds,
        state.mappings
    );
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Median and p99 of `samples`, printed.
fn summary(label: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (median, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "{label:<34} n={:<5} median {median:>9.1?}  p90 {:>9.1?}  p99 {p99:>9.1?}  max {:>9.1?}",
        samples.len(),
        percentile(&samples, 0.9),
        samples.last().unwrap()
    );
    (median, p99)
}

/// Wait until `pid` stops using CPU (under 10 % of one core over 200 ms), or `deadline`;
/// returns whether it settled.
fn settle(pid: u32, deadline: Instant) -> bool {
    const WINDOW: Duration = Duration::from_millis(200);
    let mut before = support::cpu_used(pid);
    while Instant::now() < deadline {
        std::thread::sleep(WINDOW);
        let now = support::cpu_used(pid);
        if now - before < WINDOW / 10 {
            return true;
        }
        before = now;
    }
    false
}

/// A config serving the hostile component (`park`) and the example tools (`echo`), with
/// room for the parked calls and one echo beside them; `extra` is appended.
fn parked_config(root: &Path, name: &str, extra: &str) -> PathBuf {
    let map_count: u64 =
        std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap().trim().parse().unwrap();
    // Two mappings per pool slot for its stack, four per warm memory (engine.rs).
    let needed = (2 * PARKED as u64 + 5) * 6 + 10_000;
    assert!(
        map_count >= needed,
        "vm.max_map_count is {map_count}, below the {needed} mappings {PARKED} calls may need: \
         run `sysctl -w vm.max_map_count=262144` first (README, operator notes)"
    );
    let guests = root.join("target/guests");
    let config = std::env::temp_dir().join(format!("cordon-bench-scale-{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nmax_concurrent_calls = {}\n{extra}\
             [[components]]\npath = {:?}\n[[components]]\npath = {:?}\n",
            PARKED + 1,
            guests.join("hostile.wasm"),
            guests.join("example-tools.wasm"),
        ),
    )
    .unwrap();
    config
}

fn park_request(port: u16) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "park", "arguments": {"ms": PARK_MS}, "_meta": meta()}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: park\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn parked(root: &Path, cordon: &Path) {
    let config = parked_config(root, "parked", "");
    let mut server = StdioServer::spawn(cordon, &config);
    let pid = server.child.id();
    let names = server.tool_names(Instant::now() + Duration::from_secs(60));
    assert!(names.iter().any(|name| name == "park") && names.iter().any(|name| name == "echo"), "{names:?}");

    for _ in 0..500 {
        server.echo();
    }
    settle(pid, Instant::now() + Duration::from_secs(10));
    let idle = process_state(pid);
    let echo_idle: Vec<_> = (0..ECHO_SAMPLES).map(|_| server.echo()).collect();

    // All the parked calls go out at once; the stdin thread handles each in place until it
    // parks, so once an echo sent after them is answered, every one has started.
    let started = Instant::now();
    let ids: Vec<u64> = (0..PARKED)
        .map(|_| server.queue("tools/call", json!({"name": "park", "arguments": {"ms": PARK_MS}})))
        .collect();
    let marker = server.queue("tools/call", json!({"name": "echo", "arguments": {"text": "hello"}}));
    server.flush();
    let first_done = started + Duration::from_millis(PARK_MS);
    let (_, all_started) = server.answer(marker, first_done);
    let settled = settle(pid, first_done);
    let loaded = process_state(pid);
    let echo_beside: Vec<_> = (0..ECHO_SAMPLES).map(|_| server.echo()).collect();
    let beside_done = Instant::now();
    assert!(
        ids.iter().all(|id| !server.early.contains_key(id)) && beside_done < first_done,
        "a parked call answered before the echoes beside them were done"
    );

    let mut last = started;
    for id in &ids {
        let (answer, at) = server.answer(*id, first_done + Duration::from_secs(120));
        let text = &answer["result"]["content"][0]["text"];
        assert_eq!(*text, format!("parked {PARK_MS} ms"), "{answer}");
        assert_ne!(answer["result"]["isError"], true, "{answer}");
        last = last.max(at);
    }
    settle(pid, Instant::now() + Duration::from_secs(10));
    let after = process_state(pid);
    server.close();

    println!("== {PARKED} calls parked in a host wait (stdio), park({PARK_MS} ms)");
    print_state("idle (after 500 echoes)", idle);
    print_state(&format!("{PARKED} parked"), loaded);
    print_state("after they all answered", after);
    println!(
        "all {PARKED} started {:.2?} after the first was sent{}; RSS per parked call {:.1} KiB",
        all_started - started,
        if settled { "" } else { " (the server never settled)" },
        (loaded.rss_kb - idle.rss_kb) as f64 / PARKED as f64
    );
    let (idle_median, idle_p99) = summary("echo, idle", echo_idle);
    let (median, p99) = summary(&format!("echo beside {PARKED} parked calls"), echo_beside);
    println!(
        "echo beside / idle: median {:.2}x, p99 {:.2}x; all {PARKED} answered, the last {:.2?} after its {PARK_MS} ms",
        median.as_secs_f64() / idle_median.as_secs_f64(),
        p99.as_secs_f64() / idle_p99.as_secs_f64(),
        last - first_done
    );
}

/// Raise this process's descriptor limit to its hard limit (the server inherits it): 10,000
/// connections need 10,000 descriptors on each side.
fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit on this process, with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

/// Sequential echoes on one kept-alive connection; returns each round trip.
async fn http_echoes(port: u16, count: usize) -> Vec<Duration> {
    use tokio::io::AsyncWriteExt;
    let request = support::http::echo_request(port);
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut stream = tokio::io::BufReader::new(stream);
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        stream.get_mut().write_all(request.as_bytes()).await.unwrap();
        let (body, keep_alive) = support::http::read_response(&mut stream).await;
        samples.push(started.elapsed());
        assert!(body.contains("hello") && keep_alive, "{body}");
    }
    samples
}

/// The same as `parked`, over Streamable HTTP: one connection per parked call. A call that
/// stays quiet for a second turns its answer into an SSE stream, as it would in service.
fn parked_http(root: &Path, cordon: &Path) {
    use tokio::io::AsyncWriteExt;
    let nofile = raise_nofile();
    assert!(nofile as usize > PARKED + 1_000, "RLIMIT_NOFILE's hard limit {nofile} is too low");
    let config = parked_config(root, "parked-http", &format!("[http]\nmax_connections = {}\n", PARKED + 64));
    let port = free_port();
    let mut server = Command::new(cordon)
        .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&config)
        .env("CORDON_LOG", "warn")
        .spawn()
        .unwrap();
    let pid = server.id();
    wait_for(port);
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    tokio.block_on(http_echoes(port, 500));
    settle(pid, Instant::now() + Duration::from_secs(10));
    let idle = process_state(pid);
    let echo_idle = tokio.block_on(http_echoes(port, ECHO_SAMPLES));

    let started = Instant::now();
    let first_done = started + Duration::from_millis(PARK_MS);
    let request = park_request(port);
    let (sent_sender, mut sent) = tokio::sync::mpsc::unbounded_channel();
    let calls: Vec<_> = (0..PARKED)
        .map(|_| {
            let (request, sent_sender) = (request.clone(), sent_sender.clone());
            tokio.spawn(async move {
                let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                let mut stream = tokio::io::BufReader::new(stream);
                stream.get_mut().write_all(request.as_bytes()).await.unwrap();
                let _ = sent_sender.send(());
                let (body, _) = support::http::read_response(&mut stream).await;
                (body, Instant::now())
            })
        })
        .collect();
    drop(sent_sender);
    // Every request is out once each task has written it; the server has them all once it
    // holds a connection for each and has stopped working on them.
    let all_sent = tokio.block_on(async {
        for _ in 0..PARKED {
            tokio::time::timeout_at(first_done.into(), sent.recv())
                .await
                .expect("requests sent in time")
                .unwrap();
        }
        Instant::now()
    });
    let settled = settle(pid, first_done);
    let loaded = process_state(pid);
    assert!(loaded.fds >= PARKED, "the server holds {} descriptors, not a connection per call", loaded.fds);
    let echo_beside = tokio.block_on(http_echoes(port, ECHO_SAMPLES));
    let beside_done = Instant::now();
    assert!(
        calls.iter().all(|call| !call.is_finished()) && beside_done < first_done,
        "a parked call answered early"
    );

    let mut last = started;
    for call in calls {
        let (body, at) = tokio
            .block_on(async {
                tokio::time::timeout_at((first_done + Duration::from_secs(120)).into(), call)
                    .await
                    .expect("answered in time")
            })
            .unwrap();
        assert!(body.contains(&format!("parked {PARK_MS} ms")), "{body}");
        last = last.max(at);
    }
    settle(pid, Instant::now() + Duration::from_secs(10));
    let after = process_state(pid);
    let _ = server.kill();
    let _ = server.wait();

    println!("== {PARKED} calls parked in a host wait (HTTP, a connection each), park({PARK_MS} ms)");
    print_state("idle (after 500 echoes)", idle);
    print_state(&format!("{PARKED} parked"), loaded);
    print_state("after they all answered", after);
    println!(
        "all {PARKED} sent {:.2?} after the first{}; RSS per parked call (its connection included) {:.1} KiB",
        all_sent - started,
        if settled { "" } else { " (the server never settled)" },
        (loaded.rss_kb - idle.rss_kb) as f64 / PARKED as f64
    );
    let (idle_median, idle_p99) = summary("HTTP echo, idle", echo_idle);
    let (median, p99) = summary(&format!("HTTP echo beside {PARKED} parked"), echo_beside);
    println!(
        "echo beside / idle: median {:.2}x, p99 {:.2}x; all {PARKED} answered, the last {:.2?} after the first could",
        median.as_secs_f64() / idle_median.as_secs_f64(),
        p99.as_secs_f64() / idle_p99.as_secs_f64(),
        last - first_done
    );
}

/// The bare server: `bare-hyper PORT BODY_FILE [SPIN_MICROS]` answers every request with
/// the bytes of BODY_FILE as `application/json`, after reading the request's body; no
/// parsing, no protocol: the floor of hyper on this machine. With SPIN_MICROS, each
/// request first spins that long on its core: a server of a given cost per request.
fn bare_hyper(port: u16, body_file: &Path, spin: Duration) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;

    let body = bytes::Bytes::from(std::fs::read(body_file).unwrap());
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    async move {
                        request.into_body().collect().await?;
                        let spun = Instant::now();
                        while spun.elapsed() < spin {
                            std::hint::spin_loop();
                        }
                        let mut response = hyper::Response::new(Full::new(body));
                        response.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, hyper::Error>(response)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
}

/// The body Cordon answers the load generator's request with.
fn cordon_echo_body(port: u16) -> String {
    use tokio::io::AsyncWriteExt;
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio.block_on(async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut stream = tokio::io::BufReader::new(stream);
        stream.get_mut().write_all(support::http::echo_request(port).as_bytes()).await.unwrap();
        support::http::read_response(&mut stream).await.0
    })
}

fn http(root: &Path, cordon: &Path) {
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // `cordon serve --http` on a free port with `config`, once it listens.
    let serve = |config: &Path| {
        let port = free_port();
        let server = Command::new(cordon)
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
            .arg(config)
            .env("CORDON_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(port);
        (server, port)
    };
    let server_table = "max_concurrent_calls = 64\n";
    let (server, cordon_port) = serve(&support::examples_config(root, "scale-http", server_table));
    let body = cordon_echo_body(cordon_port);
    let body_file = std::env::temp_dir().join("cordon-bench-scale-echo.json");
    std::fs::write(&body_file, &body).unwrap();
    // Bare hyper, and bare hyper spinning `spin` per request before it answers.
    let bare_hyper = |spin: Duration| {
        let port = free_port();
        let server = Command::new(std::env::current_exe().unwrap())
            .arg("bare-hyper")
            .arg(port.to_string())
            .arg(&body_file)
            .arg(spin.as_micros().to_string())
            .spawn()
            .unwrap();
        wait_for(port);
        (server, port)
    };
    let (bare, bare_port) = bare_hyper(Duration::ZERO);
    // Where the goal lies on this machine: the client shares the cores, so throughput
    // falls with the server's CPU per request, whatever spends it.
    let (spinning, spinning_port) = bare_hyper(CALIBRATION_SPIN);
    // The same server over a WAT tool with four small WASI imports: what Cordon costs per
    // request apart from the example component's large import and export surface.
    let wat_component = std::env::temp_dir().join("cordon-bench-scale-wat-echo.wasm");
    // It answers "hello", as the example's echo does to the load generator's request.
    let wat_echo = common::WatGuest::new("echo", "(call $ok_text (i32.const 60000) (i32.const 5))")
        .extra(r#"(data (i32.const 60000) "hello")"#);
    std::fs::write(&wat_component, wat_echo.component()).unwrap();
    let (wat_server, wat_port) =
        serve(&support::component_config(&wat_component, "scale-http-wat", server_table));
    // The same server again, asked for a tool it does not have: Cordon's whole request
    // path (HTTP checks, JSON-RPC, dispatch, the answer) without a guest, the floor under
    // any call.
    let (no_guest_server, no_guest_port) =
        serve(&support::component_config(&wat_component, "scale-http-no-guest", server_table));
    let mut subjects = [
        Subject::new("cordon (wasm echo, fresh instance)", server, cordon_port),
        Subject::new("bare hyper, same answer bytes", bare, bare_port),
        Subject::new("cordon (WAT tool, 4 WASI imports)", wat_server, wat_port),
        Subject::new("cordon, unknown tool (no guest)", no_guest_server, no_guest_port)
            .calling("no_such_tool", "Unknown tool: no_such_tool"),
        Subject::new(
            String::leak(format!("bare hyper spinning {CALIBRATION_SPIN:?} per request")),
            spinning,
            spinning_port,
        ),
    ];
    // Alternating slices, so that this machine's slow spells fall on both alike.
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.slice(&tokio, SLICE);
        }
    }
    println!(
        "== HTTP echo, {} clients on kept-alive connections, {} x {SLICE:?} each",
        support::http::CLIENTS,
        ROUNDS
    );
    let [ours, bare, wat, no_guest, spinning] = subjects.map(Subject::report);
    println!(
        "throughput: cordon / bare hyper = {:.0} % (goal >= 50 %); median latency: bare / cordon = {:.0} %; \
         server CPU per request: cordon {:.1?}, bare {:.1?}",
        100.0 * ours.rate / bare.rate,
        100.0 * bare.median.as_secs_f64() / ours.median.as_secs_f64(),
        ours.cpu_per_request,
        bare.cpu_per_request
    );
    println!(
        "the WAT tool: {:.0} % of bare hyper's throughput, server CPU per request {:.1?} \
         (the example component's surface: {:.1?} more)",
        100.0 * wat.rate / bare.rate,
        wat.cpu_per_request,
        ours.cpu_per_request.saturating_sub(wat.cpu_per_request)
    );
    println!(
        "no guest (an unknown tool's error): {:.0} % of bare hyper's throughput, server CPU per request {:.1?} \
         (a WAT tool's call adds {:.1?}: its instance, the call, the teardown and their bookkeeping)",
        100.0 * no_guest.rate / bare.rate,
        no_guest.cpu_per_request,
        wat.cpu_per_request.saturating_sub(no_guest.cpu_per_request)
    );
    println!(
        "calibration: bare hyper spending {CALIBRATION_SPIN:?} more per request (server CPU per request {:.1?}) \
         keeps {:.0} % of its throughput",
        spinning.cpu_per_request,
        100.0 * spinning.rate / bare.rate
    );
}

/// What the calibration subject spins per request: about what separates 50 % of bare
/// hyper's throughput from 100 % on a 2-core machine shared with the load generator.
const CALIBRATION_SPIN: Duration = Duration::from_micros(20);

/// Write `COMPONENTS` one-tool WAT components with distinct names (so distinct bytes, each
/// compiled on its own), a config serving them with its compile cache in `dir/cache`, and
/// one serving only the first [`FEW_COMPONENTS`] of them with the same cache: (all, few).
fn ready_fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let components = dir.join("components");
    std::fs::create_dir_all(&components).unwrap();
    let mut config = format!("[server]\ncache_dir = {:?}\n", dir.join("cache"));
    let mut few = String::new();
    for index in 0..COMPONENTS {
        let name = format!("tool_{index:03}");
        let path = components.join(format!("{name}.wasm"));
        std::fs::write(&path, common::WatGuest::new(&name, common::DONE_BODY).component()).unwrap();
        config.push_str(&format!("[[components]]\npath = {path:?}\n"));
        if index + 1 == FEW_COMPONENTS {
            few = config.clone();
        }
    }
    let (all_file, few_file) = (dir.join("config.toml"), dir.join("config-few.toml"));
    std::fs::write(&all_file, config).unwrap();
    std::fs::write(&few_file, few).unwrap();
    (all_file, few_file)
}

/// Spawn the server and time it to the first `tools/list` answer (which comes once every
/// component is loaded); checks that all the tools are listed.
fn time_to_ready(cordon: &Path, config: &Path, components: usize) -> Duration {
    let started = Instant::now();
    let mut server = StdioServer::spawn(cordon, config);
    let id = server.queue("tools/list", json!({}));
    server.flush();
    let (first, at) = server.answer(id, started + Duration::from_secs(1200));
    assert!(first["result"]["tools"].is_array(), "{first}");
    let names = server.tool_names(Instant::now() + Duration::from_secs(10));
    assert_eq!(names.len(), components, "every component's tool is listed");
    server.close();
    at - started
}

fn ready(cordon: &Path) {
    let dir = std::env::temp_dir().join("cordon-bench-scale-ready");
    let _ = std::fs::remove_dir_all(&dir);
    let (config, few) = ready_fixture(&dir);
    let cold = time_to_ready(cordon, &config, COMPONENTS);
    let cached = std::fs::read_dir(dir.join("cache")).unwrap().count();
    assert_eq!(cached, COMPONENTS, "each component compiled and cached once");
    let mut warm = Vec::new();
    let mut warm_few = Vec::new();
    for _ in 0..WARM_STARTS {
        warm.push(time_to_ready(cordon, &config, COMPONENTS));
        warm_few.push(time_to_ready(cordon, &few, FEW_COMPONENTS));
    }
    let per_component =
        |times: &[Duration], count: usize| times.iter().min().unwrap().as_secs_f64() / count as f64;
    let growth = per_component(&warm, COMPONENTS) / per_component(&warm_few, FEW_COMPONENTS);
    println!("== time to ready, {COMPONENTS} components (spawn -> first tools/list answer)");
    println!("cold compile cache: {cold:.2?} ({:.1?} per component)", cold / COMPONENTS as u32);
    println!("warm compile cache: {warm:.2?}");
    println!("warm compile cache, the first {FEW_COMPONENTS} alone: {warm_few:.2?}");
    println!(
        "warm time per component, {COMPONENTS} against {FEW_COMPONENTS} (best of each; 1.0 is linear): {growth:.2}x"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cargo bench ... -- NAME...` runs only the named sections (`parked`, `parked-http`,
/// `http`, `ready`);
/// with no names it runs them all.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    if args.first().map(String::as_str) == Some("bare-hyper") {
        let spin =
            args.get(3).map_or(Duration::ZERO, |micros| Duration::from_micros(micros.parse().unwrap()));
        return bare_hyper(args[1].parse().unwrap(), Path::new(&args[2]), spin);
    }
    let run = |section: &str| args.is_empty() || args.iter().any(|name| name == section);
    let (root, cordon) = support::cordon();
    if run("parked") {
        parked(&root, &cordon);
    }
    if run("parked-http") {
        parked_http(&root, &cordon);
    }
    if run("http") {
        http(&root, &cordon);
    }
    if run("ready") {
        ready(&cordon);
    }
}
