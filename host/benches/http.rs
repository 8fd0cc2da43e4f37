//! HTTP echo throughput and latency: `cordon serve --http` (the echo tool in a fresh
//! WebAssembly instance per call) against the same tool on the official Python SDK's
//! Streamable HTTP server, with the same load generator in the same run: five 1 s slices
//! per server, in alternation, of 16 concurrent clients, each sending `tools/call` after
//! `tools/call` on one kept-alive connection (as HTTP client libraries do).
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon, the example tools and the Python env
//! cargo bench -p cordon --bench http --profile dev
//! ```

mod support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const CLIENTS: usize = 16;
/// Each server is loaded for `ROUNDS` slices of `SLICE`, in alternation.
const ROUNDS: u32 = 5;
const SLICE: Duration = Duration::from_secs(1);

/// The latencies of every request made in `duration`.
async fn load(port: u16, duration: Duration) -> Vec<Duration> {
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
    let deadline = Instant::now() + duration;
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
    latencies
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

/// A server under load, with what was measured of it so far.
struct Subject {
    label: &'static str,
    child: Child,
    port: u16,
    latencies: Vec<Duration>,
    cpu: Duration,
}

impl Subject {
    fn signal(&self, signal: i32) {
        support::signal(&self.child, signal);
    }

    /// One slice of load; the server is paused (SIGSTOP) outside its slices, so that its
    /// housekeeping does not disturb the other one.
    fn slice(&mut self, tokio: &tokio::runtime::Runtime) {
        self.signal(libc::SIGCONT);
        let cpu_before = support::cpu_used(self.child.id());
        let latencies = tokio.block_on(load(self.port, SLICE));
        self.cpu += support::cpu_used(self.child.id()) - cpu_before;
        self.latencies.extend(latencies);
        self.signal(libc::SIGSTOP);
    }

    /// Print and return its throughput, median latency and CPU per request.
    fn report(mut self) -> (f64, Duration, Duration) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let latencies = &mut self.latencies;
        latencies.sort();
        let rate = latencies.len() as f64 / (SLICE * ROUNDS).as_secs_f64();
        let cpu = self.cpu / latencies.len() as u32;
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
        println!(
            "{:<36} {rate:>8.0} req/s  median {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}  server CPU/request {cpu:>8.1?}",
            self.label,
            at(0.5),
            at(0.9),
            at(0.99)
        );
        (rate, at(0.5), cpu)
    }
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
    let support::Binaries { root, cordon, python } = support::binaries();
    let config = support::examples_config(&root, "http", "max_concurrent_calls = 64\n");
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let cordon_port = free_port();
    let server = Command::new(&cordon)
        .args(["serve", "--http", &format!("127.0.0.1:{cordon_port}"), "--config"])
        .arg(&config)
        .env("CORDON_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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
    wait_for(cordon_port);
    wait_for(python_port);
    let subject =
        |label, child, port| Subject { label, child, port, latencies: Vec::new(), cpu: Duration::ZERO };
    let mut subjects = [
        subject("cordon (wasm echo, fresh instance)", server, cordon_port),
        subject("python SDK reference server", reference, python_port),
    ];
    for subject in &subjects {
        subject.signal(libc::SIGSTOP);
    }
    // Slices alternate between the servers, so that this machine's slow spells fall on
    // both alike.
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.slice(&tokio);
        }
    }
    let [ours, theirs] = subjects.map(Subject::report);

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
