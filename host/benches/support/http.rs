//! The HTTP load generator the HTTP benchmarks share: `CLIENTS` concurrent clients, each
//! sending `tools/call echo` after `tools/call echo` on one kept-alive connection (as HTTP
//! client libraries do), against servers that run in processes of their own, loaded in
//! alternating slices.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

pub const CLIENTS: usize = 16;

/// The request every client sends: `tools/call echo` with `{"text": "hello"}`.
pub fn echo_request(port: u16) -> String {
    echo_request_with(port, "")
}

/// [`echo_request`] with more header lines (each ending in `\r\n`), e.g. `Authorization`.
pub fn echo_request_with(port: u16, headers: &str) -> String {
    call_request(port, "echo", headers)
}

/// `tools/call <tool>` with `{"text": "hello"}` and more header lines.
pub fn call_request(port: u16, tool: &str, headers: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {"text": "hello"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n\
         {headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The latencies of every `request` (made for `port`) sent in `duration` by `CLIENTS`
/// clients; every answer's body must hold `expected`.
pub async fn load_request(
    port: u16,
    duration: Duration,
    request: String,
    expected: &'static str,
) -> Vec<Duration> {
    let deadline = Instant::now() + duration;
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let request = request.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut connection = None;
            while Instant::now() < deadline {
                let started = Instant::now();
                let body = exchange(&mut connection, port, &request).await;
                assert!(body.contains(expected), "{body}");
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

/// Send `request` on `connection` (connecting first when there is none, to `port`) and
/// read its answer's body; a connection the server closes is dropped.
pub async fn exchange(
    connection: &mut Option<BufReader<tokio::net::TcpStream>>,
    port: u16,
    request: &str,
) -> String {
    if connection.is_none() {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.set_nodelay(true).unwrap();
        *connection = Some(BufReader::new(stream));
    }
    let stream = connection.as_mut().unwrap();
    stream.get_mut().write_all(request.as_bytes()).await.unwrap();
    let (body, keep_alive) = read_response(stream).await;
    if !keep_alive {
        *connection = None;
    }
    body
}

/// Read one HTTP/1.1 response (a `Content-Length` or chunked body); returns the body and
/// whether the connection stays open.
pub async fn read_response(stream: &mut BufReader<tokio::net::TcpStream>) -> (String, bool) {
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
pub struct Subject {
    pub label: &'static str,
    pub child: Child,
    pub port: u16,
    /// Header lines sent with every request.
    headers: String,
    /// The tool every request calls, and what each answer's body must hold.
    tool: &'static str,
    expected: &'static str,
    latencies: Vec<Duration>,
    /// Each slice's median latency, in order.
    pub slice_medians: Vec<Duration>,
    cpu: Duration,
    loaded: Duration,
}

/// What a [`Subject`] did over all its slices.
pub struct Figures {
    pub rate: f64,
    pub median: Duration,
    pub cpu_per_request: Duration,
}

impl Subject {
    /// `child` serves HTTP on `port`; it is paused (SIGSTOP) until its first slice.
    pub fn new(label: &'static str, child: Child, port: u16) -> Self {
        let subject = Self {
            label,
            child,
            port,
            headers: String::new(),
            tool: "echo",
            expected: "hello",
            latencies: Vec::new(),
            slice_medians: Vec::new(),
            cpu: Duration::ZERO,
            loaded: Duration::ZERO,
        };
        subject.signal(libc::SIGSTOP);
        subject
    }

    /// Send these header lines (each ending in `\r\n`) with every request.
    pub fn with_headers(mut self, headers: &str) -> Self {
        self.headers = headers.to_owned();
        self
    }

    /// Call `tool` instead of `echo`; every answer's body must hold `expected`.
    pub fn calling(mut self, tool: &'static str, expected: &'static str) -> Self {
        self.tool = tool;
        self.expected = expected;
        self
    }

    pub fn signal(&self, signal: i32) {
        super::signal(&self.child, signal);
    }

    /// One slice of load; the server is paused (SIGSTOP) outside its slices, so that its
    /// housekeeping does not disturb the other one.
    pub fn slice(&mut self, tokio: &tokio::runtime::Runtime, slice: Duration) {
        self.signal(libc::SIGCONT);
        let cpu_before = super::cpu_used(self.child.id());
        let request = call_request(self.port, self.tool, &self.headers);
        let mut latencies = tokio.block_on(load_request(self.port, slice, request, self.expected));
        self.cpu += super::cpu_used(self.child.id()) - cpu_before;
        latencies.sort_unstable();
        self.slice_medians.push(latencies[latencies.len() / 2]);
        self.latencies.extend(latencies);
        self.loaded += slice;
        self.signal(libc::SIGSTOP);
    }

    /// Print and return its throughput, median latency and CPU per request; ends the server.
    pub fn report(mut self) -> Figures {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let latencies = &mut self.latencies;
        latencies.sort();
        let rate = latencies.len() as f64 / self.loaded.as_secs_f64();
        let cpu = self.cpu / latencies.len() as u32;
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
        println!(
            "{:<36} {rate:>8.0} req/s  median {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}  server CPU/request {cpu:>8.1?}",
            self.label,
            at(0.5),
            at(0.9),
            at(0.99)
        );
        Figures { rate, median: at(0.5), cpu_per_request: cpu }
    }
}

/// The median over paired slices of `b`'s slice median divided by `a`'s (slice `i` of
/// each taken side by side): a ratio that a slow spell spoils for one pair, not the verdict.
pub fn paired_median_ratio(a: &Subject, b: &Subject) -> f64 {
    let mut ratios: Vec<f64> = a
        .slice_medians
        .iter()
        .zip(&b.slice_medians)
        .map(|(a, b)| b.as_secs_f64() / a.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// Wait until `port` accepts connections.
pub fn wait_for(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
