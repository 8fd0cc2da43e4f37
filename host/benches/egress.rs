//! What an outbound HTTP request costs through the host (the rule check, the address
//! check, the connection charged to the call, wasi:http's resources and streams) against
//! the same request made natively from this process with the same client (hyper, a new
//! connection per request), to the same local server, in one run.
//!
//! ```sh
//! cargo bench -p cordon --bench egress --profile dev
//! ```
//!
//! A guest request's cost is the call of `http_get` with one request less the same call
//! with none (the call itself); the added cost is that less the native request. Rounds
//! interleave the three, so the machine's noise falls on all alike. Target: at most
//! 200 µs added at the median on loopback.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use cordon::runtime::{ComponentOptions, HttpGrants, Outcome, Runtime};
use http_body_util::{BodyExt, Empty};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROUNDS: usize = 2_000;

/// A local server answering every request with `hello` and closing the connection.
async fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 2048];
                while !head.windows(4).any(|window| window == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
                let _ = socket.write_all(answer).await;
            });
        }
    });
    port
}

/// One GET with hyper on a new connection, as the host makes it for a guest.
async fn native_get(port: u16) {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    let driver = tokio::spawn(connection);
    let request = http::Request::get("/")
        .header("host", format!("127.0.0.1:{port}"))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hello");
    // The host does not wait for the connection's close either: its driver ends on its own.
    drop((sender, driver));
}

async fn guest_get(runtime: &Runtime, url: &str, times: u32) {
    let report = runtime.call("http_get", &json!({ "url": url, "times": times })).await.unwrap().run().await;
    match &report.outcome {
        Outcome::Completed(_) => {}
        other => panic!("{other:?}"),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    println!("{name:<52} median {:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}", at(0.5), at(0.9), at(0.99));
    median(samples)
}

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // On a worker, like the calls: block_on's thread would make every wake cross threads.
    tokio.block_on(tokio.spawn(measure())).unwrap();
}

async fn measure() {
    {
        let port = upstream().await;
        let url = format!("http://127.0.0.1:{port}/");
        let mut runtime = Runtime::new(common::settings(4)).unwrap();
        let hostile = common::hostile();
        let options = ComponentOptions {
            allow_http: HttpGrants::parse(&[format!("http://127.0.0.1:{port}")]).unwrap(),
            ..ComponentOptions::default()
        };
        runtime.load_file(&hostile, options).await.unwrap();

        // Warm up: the instance pool, the connection path, the server.
        for _ in 0..200 {
            native_get(port).await;
            guest_get(&runtime, &url, 1).await;
        }
        let (mut native, mut call_only, mut call_with_request) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let started = Instant::now();
            native_get(port).await;
            native.push(started.elapsed());
            let started = Instant::now();
            guest_get(&runtime, &url, 0).await;
            call_only.push(started.elapsed());
            let started = Instant::now();
            guest_get(&runtime, &url, 1).await;
            call_with_request.push(started.elapsed());
        }
        // Many requests in one call: the per-request cost without the call's.
        let mut batched = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            guest_get(&runtime, &url, 100).await;
            batched.push(started.elapsed() / 100);
        }

        println!("outbound HTTP GET on loopback, new connection each, {ROUNDS} rounds");
        let native = report("native (hyper from the host process)", native);
        let call_only = report("call of http_get with no request", call_only);
        let with_request = report("call of http_get with one request", call_with_request);
        let batched = report("per request, 100 in one call", batched);
        let through_host = with_request.saturating_sub(call_only);
        let micros = |duration: Duration| duration.as_secs_f64() * 1e6;
        println!(
            "request through the host (one-request call less no-request call): {through_host:.1?}, \
             native {native:.1?}: added {:+.1} us at the median (target <= +200 us); \
             per request in a batch: {batched:.1?}, added {:+.1} us",
            micros(through_host) - micros(native),
            micros(batched) - micros(native),
        );
    }
}
