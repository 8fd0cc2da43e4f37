//! HTTP echo throughput and latency: `cordon serve --http` (the echo tool in a fresh
//! WebAssembly instance per call) against the same tool on the official Python SDK's
//! Streamable HTTP server, with the same load generator in the same run: 16 concurrent
//! clients for 5 s each, one `tools/call` per TCP connection.
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon, the example tools and the Python env
//! cargo bench -p cordon --bench http --profile dev
//! ```

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json, text/event-stream\r\n\
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
            while Instant::now() < deadline {
                let started = Instant::now();
                let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                stream.write_all(request.as_bytes()).await.unwrap();
                let mut response = Vec::new();
                stream.read_to_end(&mut response).await.unwrap();
                let response = String::from_utf8_lossy(&response);
                assert!(response.starts_with("HTTP/1.1 200") && response.contains("hello"), "{response}");
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

fn report(label: &str, stats: &Stats) -> (f64, Duration) {
    let rate = stats.requests as f64 / DURATION.as_secs_f64();
    let at = |p: f64| stats.latencies[((stats.latencies.len() - 1) as f64 * p) as usize];
    println!(
        "{label:<36} {rate:>8.0} req/s  median {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}",
        at(0.5),
        at(0.9),
        at(0.99)
    );
    (rate, at(0.5))
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
    let ours = report("cordon (wasm echo, fresh instance)", &tokio.block_on(load(cordon_port)));
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
    std::thread::spawn(move || BufReader::new(stderr).lines().for_each(drop));
    wait_for(python_port);
    let theirs = report("python SDK reference server", &tokio.block_on(load(python_port)));
    let _ = reference.kill();
    let _ = reference.wait();

    println!(
        "throughput: cordon / reference = {:.1}x; median latency: reference / cordon = {:.1}x (target >= 10x)",
        ours.0 / theirs.0,
        theirs.1.as_secs_f64() / ours.1.as_secs_f64()
    );
}
