//! Outbound HTTP from a real component (`examples/hostile`'s `http_get` and `http_hang`,
//! raw `wasi:http`, never cooperating) against a local HTTP server this test runs: what
//! `allow_http` grants and refuses, the inside-address rule, the per-call limits, and a
//! guest stopped while it waits on a response.

use crate::common;

use common::{answer, call, hostile};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cordon::runtime::{CleanupOutcome, ComponentOptions, HttpGrants, Outcome, Runtime, ToolLimits};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A local HTTP/1.1 server: `/ok` answers `hello`, `/big/N` N bytes, `/hang` never answers,
/// `/fat` a head of about 50 KiB and no body, `/authorization` the `authorization` header
/// it was sent (lower case; empty without one),
/// `/sink` reads a request body (by `content-length`, or chunked to its last chunk) and
/// answers `ok`. It counts the connections it accepts, reports each `/hang` connection's
/// close, and the bytes after the head each `/sink` connection read before it answered or
/// the client went away (0 for a connection that ended before its head did). `/closed`
/// answers `closed` once no `/hang` connection is open (waiting up to a second), else `open`.
struct Upstream {
    port: u16,
    connections: Arc<AtomicUsize>,
    /// `/hang` connections open now.
    hanging: Arc<AtomicUsize>,
    hang_closed: mpsc::UnboundedReceiver<()>,
    sunk: mpsc::UnboundedReceiver<usize>,
    /// What each `/closed` answered.
    verdicts: mpsc::UnboundedReceiver<&'static str>,
}

impl Upstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let (closed, hang_closed) = mpsc::unbounded_channel();
        let (sink, sunk) = mpsc::unbounded_channel();
        let (verdict, verdicts) = mpsc::unbounded_channel();
        let counter = connections.clone();
        let hanging = Arc::new(AtomicUsize::new(0));
        let open_hangs = hanging.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let (closed, sink, hanging) = (closed.clone(), sink.clone(), open_hangs.clone());
                let verdict = verdict.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0u8; 4096];
                    let end = loop {
                        if let Some(at) = head.windows(4).position(|window| window == b"\r\n\r\n") {
                            break at + 4;
                        }
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => {
                                // Refused before its head went out (a first body frame
                                // past the limit fails the request before hyper writes
                                // anything): a `/sink` that read nothing.
                                let _ = sink.send(0);
                                return;
                            }
                            Ok(read) => head.extend_from_slice(&buffer[..read]),
                        }
                    };
                    let mut body = head.split_off(end);
                    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let body = if path == "/sink" {
                        let declared = head
                            .lines()
                            .find_map(|line| line.strip_prefix("content-length:"))
                            .map(|length| length.trim().parse::<usize>().unwrap());
                        let whole = |body: &[u8]| match declared {
                            Some(length) => body.len() >= length,
                            None => body.ends_with(b"0\r\n\r\n"),
                        };
                        while !whole(&body) {
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => break,
                                Ok(read) => body.extend_from_slice(&buffer[..read]),
                            }
                        }
                        let _ = sink.send(body.len());
                        if !whole(&body) {
                            return;
                        }
                        b"ok".to_vec()
                    } else if path == "/ok" {
                        b"hello".to_vec()
                    } else if path == "/authorization" {
                        let value = head.lines().find_map(|line| line.strip_prefix("authorization:"));
                        value.unwrap_or("").trim().as_bytes().to_vec()
                    } else if path == "/closed" {
                        let deadline = Instant::now() + Duration::from_secs(1);
                        while hanging.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(5)).await; // polling, with a deadline
                        }
                        let said = if hanging.load(Ordering::SeqCst) > 0 { "open" } else { "closed" };
                        let _ = verdict.send(said);
                        said.as_bytes().to_vec()
                    } else if let Some(size) = path.strip_prefix("/big/") {
                        vec![b'x'; size.parse().unwrap()]
                    } else if path == "/trailers" {
                        // A short chunked body, then a trailer section of about 14 KiB (14
                        // fields of 1,000 bytes: hyper takes up to 16 KiB).
                        let fields: String = (0..14)
                            .map(|index| format!("x-trailer-{index}: {}\r\n", "t".repeat(1000)))
                            .collect();
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
                             5\r\nhello\r\n0\r\n{fields}\r\n"
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                        return;
                    } else if path == "/forbidden" {
                        // A head of about 50 KiB, all of it one field wasmtime-wasi-http
                        // hides from the guest (forbidden), and one short field.
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\
                             proxy-authenticate: {}\r\nx-small: 1\r\n\r\n",
                            "p".repeat(50_000)
                        );
                        let _ = socket.write_all(head.as_bytes()).await;
                        return;
                    } else if path == "/fat" {
                        // A head of about 50 KiB (60 fields of 800 bytes), no body.
                        let fields: String =
                            (0..60).map(|index| format!("x-fat-{index}: {}\r\n", "f".repeat(800))).collect();
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n{fields}\r\n"
                        );
                        let _ = socket.write_all(head.as_bytes()).await;
                        return;
                    } else {
                        // /hang: read until the client goes away, then say so.
                        hanging.fetch_add(1, Ordering::SeqCst);
                        while let Ok(read) = socket.read(&mut buffer).await {
                            if read == 0 {
                                break;
                            }
                        }
                        hanging.fetch_sub(1, Ordering::SeqCst);
                        let _ = closed.send(());
                        return;
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                });
            }
        });
        Self { port, connections, hanging, hang_closed, sunk, verdicts }
    }

    /// The bytes after the head that the next `/sink` connection read (`what`: which).
    async fn sunk(&mut self, what: &str) -> usize {
        tokio::time::timeout(Duration::from_secs(10), self.sunk.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: the /sink connection did not end within 10 s"))
            .unwrap()
    }

    /// What the next `/closed` answered.
    async fn verdict(&mut self) -> &'static str {
        tokio::time::timeout(Duration::from_secs(10), self.verdicts.recv())
            .await
            .expect("/closed was asked within 10 s")
            .unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn runtime(rules: &[String], limits: ToolLimits) -> Runtime {
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let options = ComponentOptions {
        limits,
        allow_http: HttpGrants::parse(rules).unwrap(),
        ..ComponentOptions::default()
    };
    runtime.load_file(&hostile(), options).await.unwrap();
    runtime
}

async fn get(runtime: &Runtime, url: &str, times: u32) -> Vec<String> {
    let report = call(runtime, "http_get", json!({ "url": url, "times": times })).await;
    answer(&report).lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_allow_http_grants_is_reached() {
    let upstream = Upstream::start().await;
    let port = upstream.port;
    let rule = format!("http://127.0.0.1:{port}");
    let runtime = runtime(&[rule, format!("http://localhost:{port}")], common::quick_limits()).await;

    assert_eq!(get(&runtime, &upstream.url("/ok"), 1).await, ["200 5"], "a granted address");
    assert_eq!(upstream.connections(), 1);

    for (url, why) in [
        (format!("http://127.0.0.2:{port}/ok"), "another host"),
        (format!("http://127.0.0.1:{}/ok", port + 1), "another port"),
        (format!("https://127.0.0.1:{port}/ok"), "another scheme"),
        (format!("http://example.com:{port}/ok"), "a name no rule grants"),
    ] {
        assert_eq!(get(&runtime, &url, 1).await, ["error ErrorCode::HttpRequestDenied"], "{why}: {url}");
    }
    // Granted by name, but the name leads to loopback, which only a literal rule may reach.
    let by_name = format!("http://localhost:{port}/ok");
    assert_eq!(get(&runtime, &by_name, 1).await, ["error ErrorCode::DestinationIpProhibited"]);
    assert_eq!(upstream.connections(), 1, "no refused request made a connection");
}

#[test]
fn nothing_is_granted_by_default_and_a_refusal_is_logged_once_per_call() {
    let log = common::capture_log(|| async {
        let upstream = Upstream::start().await;
        let runtime = runtime(&[], common::quick_limits()).await;
        let lines = get(&runtime, &upstream.url("/ok"), 3).await;
        assert_eq!(lines, ["error ErrorCode::HttpRequestDenied"; 3]);
        assert_eq!(upstream.connections(), 0);
    });
    let refusals: Vec<&str> =
        log.lines().filter(|line| line.contains("outbound HTTP request refused")).collect();
    assert_eq!(refusals.len(), 1, "{log}");
    assert!(refusals[0].contains("tool=\"http_get\"") || refusals[0].contains("tool=http_get"), "{log}");
    assert!(refusals[0].contains("127.0.0.1:"), "the refused authority is named: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_response_bytes_are_limited_per_call() {
    let upstream = Upstream::start().await;
    let rules = [format!("http://127.0.0.1:{}", upstream.port)];
    let limits = ToolLimits { http_requests: 3, http_response_bytes: 100_000, ..common::quick_limits() };
    let runtime = runtime(&rules, limits).await;

    let lines = get(&runtime, &upstream.url("/ok"), 5).await;
    assert_eq!(
        lines,
        [
            "200 5",
            "200 5",
            "200 5",
            "error ErrorCode::ConnectionLimitReached",
            "error ErrorCode::ConnectionLimitReached"
        ]
    );
    assert_eq!(upstream.connections(), 3);
    assert_eq!(get(&runtime, &upstream.url("/ok"), 1).await, ["200 5"], "each call counts afresh");

    // 60,000 bytes twice passes 100,000 for the call: the second body fails part way.
    let lines = get(&runtime, &upstream.url("/big/60000"), 2).await;
    assert_eq!(lines[0], "200 60000");
    // wasmtime-wasi-http hands a body's failure to the guest as a stream error with this
    // message (its `http-error-code` is not set for errors the host's body raises).
    assert_eq!(lines[1], "error HTTP response body size exceeds limit: 100000 bytes");
}

/// Request bodies sent are bounded per call like response bodies: the frame that would
/// pass `http_request_bytes` fails the request with `HTTP-request-body-size` and never
/// goes out, and a `content-length` past what the call has left is refused before any
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_sent_are_limited_per_call() {
    let mut upstream = Upstream::start().await;
    let rules = [format!("http://127.0.0.1:{}", upstream.port)];
    let limits = ToolLimits { http_request_bytes: 64 << 10, ..common::quick_limits() };
    let runtime = runtime(&rules, limits).await;
    let sink = upstream.url("/sink");
    let post = |kib: u32, times: u32, declare_length: bool| {
        let arguments = json!({ "url": sink, "kib": kib, "times": times, "declare_length": declare_length });
        let runtime = &runtime;
        async move {
            let report = call(runtime, "http_post", arguments).await;
            answer(&report).lines().map(str::to_owned).collect::<Vec<_>>()
        }
    };
    let refused = "error ErrorCode::HttpRequestBodySize(Some(65536))";

    // Two chunked 40 KiB bodies in one call: the first goes out whole; the second passes
    // the call's 64 KiB on the way and is cut there.
    let lines = post(40, 2, false).await;
    assert_eq!(lines, ["200 40960", refused]);
    let first = upstream.sunk("the first 40 KiB").await;
    assert!((40 << 10..(40 << 10) + 1024).contains(&first), "the first body arrived whole: {first} bytes");
    let second = upstream.sunk("the second 40 KiB").await;
    assert!(second <= (24 << 10) + 1024, "only what the call had left went out: {second} bytes");

    // 1 MiB chunked in a call of its own: no more than the call's 64 KiB goes out.
    assert_eq!(post(1024, 1, false).await, [refused]);
    let cut = upstream.sunk("1 MiB chunked").await;
    assert!(cut <= (64 << 10) + 1024, "at most the limit (and chunk framing) went out: {cut} bytes");

    // Declared: 1 MiB is refused before connecting; 64 KiB (all the call may send) goes.
    let connections = upstream.connections();
    assert_eq!(post(1024, 1, true).await, [refused]);
    assert_eq!(upstream.connections(), connections, "a declared body past the limit connects nowhere");
    assert_eq!(post(64, 1, true).await, ["200 65536"]);
    assert_eq!(upstream.sunk("64 KiB declared").await, 64 << 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_never_comes_times_out_and_closes_its_connection() {
    let mut upstream = Upstream::start().await;
    let rules = [format!("http://127.0.0.1:{}", upstream.port)];
    let limits = ToolLimits { http_first_byte_timeout: Duration::from_millis(300), ..common::quick_limits() };
    let runtime = runtime(&rules, limits).await;
    let started = Instant::now();
    assert_eq!(get(&runtime, &upstream.url("/hang"), 1).await, ["error ErrorCode::ConnectionReadTimeout"]);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    tokio::time::timeout(Duration::from_secs(5), upstream.hang_closed.recv())
        .await
        .expect("the connection is closed after the timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_is_bounded_by_the_connect_timeout() {
    // A listener whose accept queue is full drops new connections' SYNs: connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let address = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    let hangs = loop {
        match tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(address)).await
        {
            Ok(Ok(stream)) if fillers.len() < 64 => fillers.push(stream),
            Ok(_) => break false,
            Err(_) => break true,
        }
    };
    assert!(hangs, "the accept queue never filled");
    let limits = ToolLimits { http_connect_timeout: Duration::from_millis(300), ..common::quick_limits() };
    let runtime = runtime(&[format!("http://{address}")], limits).await;
    let started = Instant::now();
    assert_eq!(get(&runtime, &format!("http://{address}/"), 1).await, ["error ErrorCode::ConnectionTimeout"]);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_waiting_on_a_response_is_stopped_by_timeout_cancel_and_shutdown_and_its_connection_closed() {
    let mut upstream = Upstream::start().await;
    let rules = [format!("http://127.0.0.1:{}", upstream.port)];
    let limits = ToolLimits {
        max_duration: Some(Duration::from_millis(300)),
        grace: Duration::from_millis(50),
        ..common::quick_limits()
    };
    let runtime = runtime(&rules, limits).await;

    // A timeout.
    let report = call(&runtime, "http_hang", json!({ "url": upstream.url("/hang") })).await;
    assert!(matches!(report.outcome, Outcome::TimedOut(_)), "{:?}", report.outcome);
    assert!(report.hard_stopped, "http_hang never checks: it is stopped by force");
    let stop_latency = report.stopped_at - report.hard_stop_at.unwrap();
    assert!(stop_latency < Duration::from_millis(100), "stopped {stop_latency:?} after the hard stop");
    assert_eq!(report.cleanup.as_ref().map(|cleanup| &cleanup.outcome), Some(&CleanupOutcome::Completed));
    tokio::time::timeout(Duration::from_secs(5), upstream.hang_closed.recv())
        .await
        .expect("connection closed");

    // A cancel.
    let call = runtime.call("http_hang", &json!({ "url": upstream.url("/hang") })).await.unwrap();
    let handle = call.handle();
    let running = tokio::spawn(call.run());
    let connected = async {
        while upstream.connections() < 2 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), connected).await.expect("the request reached the server");
    handle.cancel();
    let report = running.await.unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.cleanup.as_ref().map(|cleanup| &cleanup.outcome), Some(&CleanupOutcome::Completed));
    tokio::time::timeout(Duration::from_secs(5), upstream.hang_closed.recv())
        .await
        .expect("connection closed");
    assert_eq!(runtime.pool_usage().calls, 0);

    // A shutdown.
    let call = runtime.call("http_hang", &json!({ "url": upstream.url("/hang") })).await.unwrap();
    let running = tokio::spawn(call.run());
    let connected = async {
        while upstream.connections() < 3 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), connected).await.expect("the request reached the server");
    runtime.shutdown();
    let report = running.await.unwrap();
    assert_eq!(report.outcome, Outcome::Shutdown);
    tokio::time::timeout(Duration::from_secs(5), upstream.hang_closed.recv())
        .await
        .expect("connection closed");
}

/// A call stopped while a request it made is in flight, its guest returning within its
/// grace and leaving the request open, loses its instance, and so the connection, before
/// its cleanup runs: a cleanup undoing what the call started never runs beside it. (The
/// cleanup GETs `/closed`, which says whether the `/hang` connection was still open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_calls_requests_end_before_its_cleanup_runs() {
    let mut upstream = Upstream::start().await;
    let rules = [format!("http://127.0.0.1:{}", upstream.port)];
    let limits = ToolLimits {
        max_duration: Some(Duration::from_millis(300)),
        grace: Duration::from_millis(500),
        cleanup_budget: Duration::from_secs(5),
        ..common::quick_limits()
    };
    let runtime = runtime(&rules, limits).await;
    let arguments = json!({ "url": upstream.url("/hang"), "cleanup_url": upstream.url("/closed") });
    let report = call(&runtime, "http_left_open", arguments).await;
    assert!(matches!(report.outcome, Outcome::TimedOut(_)), "{:?}", report.outcome);
    assert!(!report.hard_stopped, "the guest returned within its grace");
    assert_eq!(report.cleanup.as_ref().map(|cleanup| &cleanup.outcome), Some(&CleanupOutcome::Completed));
    tokio::time::timeout(Duration::from_secs(5), upstream.hang_closed.recv())
        .await
        .expect("connection closed");
    assert_eq!(upstream.hanging.load(Ordering::SeqCst), 0);
    assert_eq!(upstream.verdict().await, "closed", "the cleanup ran while the call's request was open");
}

/// `https` is TLS verified against the bundled web PKI roots: a server whose certificate
/// no public authority signed (this one is self-signed, for 127.0.0.1) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_is_verified_and_a_self_signed_certificate_is_refused() {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let certificate = CertificateDer::from_pem_file(fixtures.join("self-signed-cert.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_file(fixtures.join("self-signed-key.pem")).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certificate], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (handshakes, mut handshake_results) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let result = acceptor.accept(socket).await.map(|_| ()).map_err(|error| error.to_string());
            let _ = handshakes.send(result);
        }
    });

    let runtime = runtime(&[format!("https://127.0.0.1:{port}")], common::quick_limits()).await;
    let lines = get(&runtime, &format!("https://127.0.0.1:{port}/"), 1).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines, ["error ErrorCode::TlsCertificateError"]);
    let server_saw =
        tokio::time::timeout(Duration::from_secs(5), handshake_results.recv()).await.unwrap().unwrap();
    assert!(server_saw.is_err(), "the client gave up the handshake: {server_saw:?}");
}

/// What a guest builds without sending it is host memory too: header fields, and the
/// buffer of every outgoing body. Both count against `host_memory_bytes`; before they
/// did, 1,000 unsent requests with full bodies held 64 MiB of host memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_requests_bodies_and_header_fields_are_charged_to_the_call() {
    // A request costs its fields' most (128 KiB: a fields set filled to wasmtime-wasi-
    // http's 16 KiB count holds up to 8 times that), its target's most (9,280 bytes:
    // method 64, authority 1,024, path 8,192) and its body's buffer (64 KiB): 4 MiB and
    // 64 KiB hold 20 of them, and the 21st body is refused. Each body buffers what it is
    // charged, no more (wasmtime-wasi-http's channel holds two chunks: they were 64 KiB
    // each, so 45 bodies held 5.6 MiB of a 4 MiB budget).
    let limits = ToolLimits { host_memory_bytes: (4 << 20) + (64 << 10), ..common::quick_limits() };
    let runtime = runtime(&[], limits).await;
    let report = call(&runtime, "http_hoard", json!({ "count": 1000 })).await;
    assert_eq!(answer(&report), format!("bodies 20 of 1000 buffering {}", 20 * (64 << 10)));

    // Fields alone: 32 sets of 128 KiB fill 4 MiB; the next one traps the guest (at 16
    // KiB each, 256 were let through, holding up to 23 MiB).
    let report = call(&runtime, "http_hoard", json!({ "count": 1000, "fields_only": true })).await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("HTTP header fields"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    // Everything was given back with the stores: the next call has its whole budget.
    // The fields a request hands back share its map: kept after the request is dropped,
    // they are charged as fields (before, they were free: 1,000 kept, 16 MB).
    let report = call(&runtime, "http_hoard", json!({ "count": 1000, "request_fields": true })).await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("HTTP header fields"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let report = call(&runtime, "http_hoard", json!({ "count": 30, "fields_only": true })).await;
    assert_eq!(answer(&report), "bodies 0 fields 30 of 30 buffering 0");
    // A clone shares its source's map and is charged as its source is: fields a guest
    // built, their most. Before, each clone of a 4 KiB name given 100 values was charged
    // per value, 416 KB, and the guest trapped within 10.
    let report = call(&runtime, "http_hoard", json!({ "count": 30, "cloned_fields": true })).await;
    assert_eq!(answer(&report), "bodies 0 fields 30 of 30 buffering 0");
    let report = call(&runtime, "http_hoard", json!({ "count": 1000 })).await;
    assert_eq!(answer(&report), format!("bodies 20 of 1000 buffering {}", 20 * (64 << 10)));
    // A body finished with trailers keeps them until it is sent: they stay charged, so
    // requests with trailers fill the budget sooner and the guest traps building the 13th
    // section. Before, their charge went with their resource, and 20 bodies held 20
    // sections uncharged (the 21st body was refused, as without trailers).
    let report = call(&runtime, "http_hoard", json!({ "count": 1000, "trailers": true })).await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("HTTP header fields"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
}

/// A response's head stays in host memory while the guest keeps the response, after its
/// connection closed and gave its charge back: it counts against `host_memory_bytes` by
/// its size. Kept without bound, 200 heads of 50 KiB were 10 MiB of host memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heads_of_responses_a_guest_keeps_are_charged_to_the_call() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    // 2 MiB hold about 13 heads (each charged 146 KiB: the read buffer its values keep,
    // which grows to twice its 50 KiB, and its 62 lines' entries): then the next
    // connection's buffer finds no room (or, had
    // it found some, keeping the next head would trap).
    let report = call(&runtime, "http_keep", json!({ "url": upstream.url("/fat"), "count": 200 })).await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("responses"), "{message}"),
        _ => {
            let text = answer(&report);
            let kept: usize =
                text.strip_prefix("kept ").and_then(|rest| rest.split(',').next()).unwrap().parse().unwrap();
            assert!(
                (10..=14).contains(&kept)
                    && (text.ends_with("then ErrorCode::ConnectionLimitReached")
                        || text.ends_with("then ErrorCode::HttpResponseHeaderSectionSize(None)")),
                "{text}"
            );
        }
    }
    // Within the budget, kept and given back with the store: again, as many.
    let report = call(&runtime, "http_keep", json!({ "url": upstream.url("/fat"), "count": 10 })).await;
    assert_eq!(answer(&report), "kept 10");
    let report = call(&runtime, "http_keep", json!({ "url": upstream.url("/fat"), "count": 10 })).await;
    assert_eq!(answer(&report), "kept 10");
}

/// A head whose bytes are mostly a field the guest never sees (forbidden, so dropped from
/// its view) still keeps them: its values are slices of the one read buffer. It stays
/// charged as it arrived. Before, taking the response recounted the head as the guest sees
/// it (two short fields, so 8 KiB) and gave the rest back: 150 such heads kept, 15 MiB
/// against a 2 MiB budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_is_charged_as_it_arrived_whatever_the_guest_is_shown() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 150, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    for fields_only in [false, true] {
        let arguments =
            json!({ "url": upstream.url("/forbidden"), "count": 150, "fields_only": fields_only });
        let report = call(&runtime, "http_keep", arguments).await;
        match &report.outcome {
            Outcome::Trapped(message) => assert!(message.contains("responses"), "{message}"),
            _ => {
                let text = answer(&report);
                let (kept, then) = kept_then(&text);
                // Each charged about 130 KiB: the read buffer, twice its 50 KiB.
                assert!((10..=16).contains(&kept) && then.starts_with("ErrorCode::"), "{text}");
            }
        }
    }
}

/// What `http_keep` answered when something ended it early: how many it kept, and what
/// ended it.
fn kept_then(text: &str) -> (usize, &str) {
    let (kept, then) = text
        .strip_prefix("kept ")
        .and_then(|rest| rest.split_once(", then "))
        .unwrap_or_else(|| panic!("{text}"));
    (kept.parse().unwrap_or_else(|_| panic!("{text}")), then)
}

/// A response body the guest keeps unread stays in host memory after its connection has
/// closed (a body that fits one read is handed over whole as the socket closes): its
/// connection's buffers stay charged to the call until the guest drops the body. Before,
/// closing gave the charge back, and 200 kept bodies fitted a 2 MiB budget however large
/// each read was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bodies_of_responses_a_guest_keeps_unread_are_charged_after_their_connection_closed() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    for streams in [false, true] {
        let arguments = json!({ "url": upstream.url("/big/1000"), "count": 200, "streams": streams });
        let text = answer(&call(&runtime, "http_keep", arguments).await);
        let (kept, then) = kept_then(&text);
        assert!((24..=32).contains(&kept) && then == "ErrorCode::ConnectionLimitReached", "{text}");
    }
}

/// A small response head keeps hyper's whole first read buffer (8 KiB), of which its
/// values are slices: charged so, however few its bytes. Before, 200 heads of about 100
/// bytes were charged 200 bytes each and held 1.6 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_head_is_charged_the_read_buffer_it_keeps() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 1 << 20, http_requests: 200, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments = json!({ "url": upstream.url("/big/0"), "count": 200 });
    let text = answer(&call(&runtime, "http_keep", arguments).await);
    let (kept, then) = kept_then(&text);
    // 1 MiB: a connection's 64 KiB while it is open, and for each head kept 8 KiB and its
    // few lines' entries (288 bytes each).
    assert!((90..=112).contains(&kept), "{text}");
    assert!(then.starts_with("ErrorCode::"), "{text}");
}

/// A head that waits in its future, the response never taken, is host memory as much as
/// a response kept: charged from its arrival. Before, 200 such heads (10 MiB) waited
/// uncharged, and only taking them found the budget spent (a trap at the 41st).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heads_of_responses_a_guest_never_takes_are_charged_from_their_arrival() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments = json!({ "url": upstream.url("/fat"), "count": 200, "untaken": true });
    let report = call(&runtime, "http_keep", arguments).await;
    // About 13 heads fill 2 MiB: the responses after them failed as they came (no room
    // for the head, or for the next connection's buffer), and taking the first ones
    // finds them charged already.
    let text = answer(&report);
    let (kept, then) = kept_then(&text);
    assert!((10..=14).contains(&kept), "{text}");
    assert!(
        matches!(
            then,
            "ErrorCode::ConnectionLimitReached" | "ErrorCode::HttpResponseHeaderSectionSize(None)"
        ),
        "{text}"
    );
    let report =
        call(&runtime, "http_keep", json!({ "url": upstream.url("/fat"), "count": 10, "untaken": true }))
            .await;
    assert_eq!(answer(&report), "kept 10", "given back with the store");
}

/// A secret header is set by the host on requests to the hosts its `to` names, and only
/// those: the guest, which never sees the value, cannot send it anywhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_header_reaches_the_hosts_it_is_bound_to_and_no_other() {
    let (bound, other) = (Upstream::start().await, Upstream::start().await);
    let rules = [format!("http://127.0.0.1:{}", bound.port), format!("http://127.0.0.1:{}", other.port)];
    let mut grants = HttpGrants::parse(&rules).unwrap();
    grants.add_secret_header("authorization", "Bearer s3cr3t", &rules[..1]).unwrap();
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let options = ComponentOptions {
        limits: common::quick_limits(),
        allow_http: grants,
        ..ComponentOptions::default()
    };
    runtime.load_file(&hostile(), options).await.unwrap();
    // `/authorization` answers with the header's value: 13 bytes, or nothing.
    assert_eq!(get(&runtime, &bound.url("/authorization"), 1).await, ["200 13"]);
    assert_eq!(get(&runtime, &other.url("/authorization"), 1).await, ["200 0"]);
    // Nor to another virtual host named in user info, which the `Host` header would carry.
    let disguised = format!("http://other.example:80@127.0.0.1:{}/authorization", bound.port);
    assert_eq!(get(&runtime, &disguised, 1).await, ["error ErrorCode::HttpRequestUriInvalid"]);
    // Nor to one named after the host where a port goes: `http` reads no port there, so the
    // rule's host and default port would match while `Host` carries the rest.
    for disguised in ["http://127.0.0.1:x.other.example/authorization", "http://127.0.0.1:/authorization"] {
        assert_eq!(
            get(&runtime, disguised, 1).await,
            ["error ErrorCode::HttpRequestUriInvalid"],
            "{disguised}"
        );
    }
    let environment = answer(&call(&runtime, "env_names", json!({})).await);
    assert!(!environment.contains("s3cr3t"), "{environment}");
}

/// A connection that fails after its response head (the guest's body passes the call's
/// limit while the server already answered) is the guest's to learn of, and a debug line
/// for the operator: wasmtime-wasi-http logged each as a warning, outside the call's log
/// budget, so a guest and a server it talks to could write one per request.
#[test]
fn a_connection_failing_after_its_answer_writes_no_warning() {
    let log = common::capture_log(|| async {
        let upstream = Upstream::start().await;
        let rules = [format!("http://127.0.0.1:{}", upstream.port)];
        let limits = ToolLimits { http_request_bytes: 64 << 10, ..common::quick_limits() };
        let runtime = runtime(&rules, limits).await;
        let arguments =
            json!({ "url": upstream.url("/ok"), "kib": 1024, "times": 3, "declare_length": false });
        let report = call(&runtime, "http_post", arguments).await;
        // Each request is answered (the server reads no body) before its body fails.
        assert_eq!(answer(&report).lines().count(), 3, "{}", answer(&report));
    });
    assert!(!log.contains("dropping error") && !log.contains("WARN"), "{log}");
}

/// wasmtime-wasi-http keeps a request's method, authority and path as long as the guest
/// gives them (its host-call fuel bounds one call, not what is kept): a guest holding a
/// thousand requests with 16 MiB each would hold gigabytes. Each is bounded: 64 bytes,
/// 1 KiB and 8 KiB, and one byte more is refused by its setter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_method_authority_and_path_are_bounded() {
    let runtime = runtime(&[], common::quick_limits()).await;
    for (part, most) in [("method", 64), ("authority", 1024), ("path", 8192)] {
        for (bytes, expected) in [(most, "set"), (most + 1, "refused"), (4 << 20, "refused")] {
            let report = call(&runtime, "http_target", json!({ "part": part, "bytes": bytes })).await;
            assert_eq!(answer(&report), expected, "{part} of {bytes} bytes");
        }
    }
}

/// The server cannot be made to reach itself through a name that leads to one of its own
/// addresses, however public that address looks. `cordon serve --stdio` runs in network
/// and mount namespaces of its own (`unshare`, as a user namespace's root: no privilege
/// needed), where the loopback interface also has 11.22.33.44, `own.test` names it in
/// `/etc/hosts`, and the server's metrics listen there. A guest granted
/// `http://own.test:9464` is refused with `destination-IP-prohibited`; granted the address
/// literally, it reaches the metrics, so the refusal is the own-address rule's.
#[test]
fn a_name_leading_to_the_servers_own_public_address_is_refused() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    let dir = common::fresh_dir("own-address");
    std::fs::write(dir.join("hosts"), "127.0.0.1 localhost\n11.22.33.44 own.test\n").unwrap();
    std::fs::write(
        dir.join("cordon.toml"),
        format!(
            "[server]\ncache = false\n\n[[components]]\npath = {:?}\n\
             allow_http = [\"http://own.test:9464\", \"http://11.22.33.44:9464\"]\n",
            hostile().display().to_string()
        ),
    )
    .unwrap();
    let setup = "mount --bind \"$1\" /etc/hosts && ip link set lo up && ip addr add 11.22.33.44/32 dev lo \
                 && shift && exec \"$@\"";
    let path = format!("{}:/usr/sbin:/sbin", std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--mount", "sh", "-c", setup, "sh"])
        .arg(dir.join("hosts"))
        .arg(env!("CARGO_BIN_EXE_cordon"))
        .args(["serve", "--stdio", "--metrics", "11.22.33.44:9464", "--config"])
        .arg(dir.join("cordon.toml"))
        .env("PATH", path)
        .env("CORDON_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) runs");
    let lines = common::wire::line_channel(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let schema = common::wire::Schema::new();
    let mut get = |id: u32, url: &str| -> String {
        let arguments = json!({"url": url, "times": 1});
        let params = json!({"name": "http_get", "arguments": arguments, "_meta": common::wire::meta()});
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .unwrap();
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("an answer within 20 s: else the namespace set-up failed (stderr says why; it needs user namespaces and iproute2's `ip`)");
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        schema.check_sent(&answer, Some("tools/call"));
        answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned()
    };
    let literal = get(1, "http://11.22.33.44:9464/healthz");
    assert!(literal.starts_with("200 "), "the metrics listener is reachable at its address: {literal}");
    assert_eq!(get(2, "http://own.test:9464/healthz"), "error ErrorCode::DestinationIpProhibited");
    let _ = child.kill();
    let _ = child.wait();
}

/// A response's header fields share its head: kept after the response is dropped, they
/// are charged by the head's size. Before, dropping the response gave its charge back
/// while its fields kept the head: 200 heads (10 MiB) held uncharged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_fields_of_a_dropped_response_are_charged_as_its_head() {
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let runtime = runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments = json!({ "url": upstream.url("/fat"), "count": 200, "fields_only": true });
    let report = call(&runtime, "http_keep", arguments).await;
    match &report.outcome {
        // Taking the fields of the response that fills the budget traps.
        Outcome::Trapped(message) => assert!(message.contains("responses"), "{message}"),
        _ => {
            let text = answer(&report);
            let kept: usize =
                text.strip_prefix("kept ").and_then(|rest| rest.split(',').next()).unwrap().parse().unwrap();
            assert!((10..=14).contains(&kept) && text.contains(", then ErrorCode::"), "{text}");
        }
    }
    let arguments = json!({ "url": upstream.url("/fat"), "count": 10, "fields_only": true });
    assert_eq!(answer(&call(&runtime, "http_keep", arguments).await), "kept 10", "given back with the store");
    // A clone of a head's fields shares the head too: charged by its size, not as fields
    // a guest builds (when those were charged 16 KiB, that let about 120 of these 50 KiB
    // heads be kept). The call
    // ends at the budget either way (a trap, or refusals): how far it got tells.
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let fresh = self::runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments = json!({ "url": upstream.url("/fat"), "count": 200, "fields_only": true, "cloned": true });
    let report = call(&fresh, "http_keep", arguments).await;
    let served = upstream.connections.load(Ordering::SeqCst);
    assert!(served <= 15, "{served} heads were taken within 2 MiB: {:?}", report.outcome);
    // A trailer section the guest takes is charged by its size while it keeps it. Before,
    // it was free: 200 sections of 14 KiB kept past a 2 MiB budget.
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let fresh = self::runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments = json!({ "url": upstream.url("/trailers"), "count": 200, "trailers": true });
    let report = call(&fresh, "http_keep", arguments).await;
    // The budget ends the call (a trap, or a connection or a response's head refused for
    // want of memory, whichever finds it spent).
    if let Outcome::Completed(_) = &report.outcome {
        let text = answer(&report);
        assert!(
            text.ends_with(", then ErrorCode::ConnectionLimitReached")
                || text.ends_with(", then ErrorCode::HttpResponseHeaderSectionSize(None)"),
            "{text}"
        );
    }
    let served = upstream.connections.load(Ordering::SeqCst);
    assert!((100..=150).contains(&served), "{served} trailer sections were taken within 2 MiB");
    // So does a request made of them: charged by the head's size too, not as fields a
    // guest builds (which let 80 of them be kept, 4 MB of heads against a 2 MiB budget).
    let upstream = Upstream::start().await;
    let limits = ToolLimits { host_memory_bytes: 2 << 20, http_requests: 200, ..common::quick_limits() };
    let fresh = self::runtime(&[format!("http://127.0.0.1:{}", upstream.port)], limits).await;
    let arguments =
        json!({ "url": upstream.url("/fat"), "count": 200, "fields_only": true, "into_requests": true });
    let report = call(&fresh, "http_keep", arguments).await;
    let served = upstream.connections.load(Ordering::SeqCst);
    assert!(served <= 15, "{served} heads were taken within 2 MiB: {:?}", report.outcome);
}
