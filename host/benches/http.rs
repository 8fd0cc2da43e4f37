//! HTTP echo throughput and latency: `cordon serve --http` (the echo tool in a fresh
//! WebAssembly instance per call) against the same tool on the official Python SDK's
//! Streamable HTTP server, with the same load generator in the same run: 16 concurrent
//! clients for 5 s each, each sending `tools/call` after `tools/call` on one kept-alive
//! connection (as HTTP client libraries do).
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon, the example tools and the Python env
//! cargo bench -p cordon --bench http --profile dev
//! ```

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const CLIENTS: usize = 16;
const DURATION: Duration = Duration::from_secs(5);

struct Stats {
    requests: usize,
    latencies: Vec<Duration>,
}

async fn load(port: u16) -> Stats {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hello"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let deadline = Instant::now() + DURATION;
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let request = request.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut connection = None;
            while Instant::now() < deadline {
                let started = Instant::now();
                if connection.is_none() {
                    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    connection = Some(BufReader::new(stream));
                }
                let stream = connection.as_mut().unwrap();
                stream.get_mut().write_all(request.as_bytes()).await.unwrap();
                let (body, keep_alive) = read_response(stream).await;
                assert!(body.contains("hello"), "{body}");
                if !keep_alive {
                    connection = None;
                }
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    latencies.sort();
    Stats { requests: latencies.len(), latencies }
}

/// Read one HTTP/1.1 response (a `Content-Length` or chunked body); returns the body and
/// whether the connection stays open.
async fn read_response(stream: &mut BufReader<tokio::net::TcpStream>) -> (String, bool) {
    let mut line = String::new();
    stream.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let (mut length, mut chunked, mut keep_alive) = (None, false, true);
    loop {
        line.clear();
        stream.read_line(&mut line).await.unwrap();
        let header = line.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            break;
        }
        if let Some(value) = header.strip_prefix("content-length:") {
            length = Some(value.trim().parse::<usize>().unwrap());
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
            stream.read_line(&mut line).await.unwrap();
            let size = usize::from_str_radix(line.trim_end().split(';').next().unwrap(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await.unwrap();
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = length {
        body.resize(length, 0);
        stream.read_exact(&mut body).await.unwrap();
    } else {
        stream.read_to_end(&mut body).await.unwrap();
        keep_alive = false;
    }
    (String::from_utf8(body).unwrap(), keep_alive)
}

/// CPU time used so far by all of process `pid`'s threads (the scheduler's nanosecond
/// accounting in `/proc/PID/task/*/schedstat`).
fn cpu_used(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let nanos = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// Load `server` (listening on `port`); print and return its throughput, median latency
/// and CPU per request.
fn measure(
    tokio: &tokio::runtime::Runtime,
    label: &str,
    server: &Child,
    port: u16,
) -> (f64, Duration, Duration) {
    let cpu_before = cpu_used(server.id());
    let stats = tokio.block_on(load(port));
    let cpu = (cpu_used(server.id()) - cpu_before) / stats.requests as u32;
    let rate = stats.requests as f64 / DURATION.as_secs_f64();
    let at = |p: f64| stats.latencies[((stats.latencies.len() - 1) as f64 * p) as usize];
    println!(
        "{label:<36} {rate:>8.0} req/s  median {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}  server CPU/request {cpu:>8.1?}",
        at(0.5),
        at(0.9),
        at(0.99)
    );
    (rate, at(0.5), cpu)
}

/// Wait until `port` accepts connections.
fn wait_for(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cordon =
        std::env::var_os("CORDON_BIN").map_or_else(|| root.join("target/debug/cordon"), PathBuf::from);
    let python = root.join("target/e2e-venv/bin/python");
    assert!(cordon.is_file() && python.is_file(), "run `cargo xtask test` first: it builds both");
    let config = std::env::temp_dir().join("cordon-bench-http.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nmax_concurrent_calls = 64\n[[components]]\npath = {:?}\n",
            root.join("target/guests/example-tools.wasm")
        ),
    )
    .unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let cordon_port = free_port();
    let mut server: Child = Command::new(&cordon)
        .args(["serve", "--http", &format!("127.0.0.1:{cordon_port}"), "--config"])
        .arg(&config)
        .env("CORDON_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(cordon_port);
    let ours = measure(&tokio, "cordon (wasm echo, fresh instance)", &server, cordon_port);
    let _ = server.kill();
    let _ = server.wait();

    let python_port = free_port();
    let mut reference = Command::new(&python)
        .arg(root.join("host/benches/reference_server.py"))
        .args(["http", &python_port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = reference.stderr.take().unwrap();
    std::thread::spawn(move || std::io::BufReader::new(stderr).lines().for_each(drop));
    wait_for(python_port);
    let theirs = measure(&tokio, "python SDK reference server", &reference, python_port);
    let _ = reference.kill();
    let _ = reference.wait();

    println!(
        "throughput: cordon / reference = {:.1}x; median latency: reference / cordon = {:.1}x (target >= 10x)",
        ours.0 / theirs.0,
        theirs.1.as_secs_f64() / ours.1.as_secs_f64()
    );
    println!(
        "server CPU per request: reference / cordon = {:.1}x",
        theirs.2.as_secs_f64() / ours.2.as_secs_f64()
    );
}
