//! One tenant's flood against another tenant's latency, in one run (issue 11: within 2× of
//! idle at p99).
//!
//! One `cordon serve --http` with two tenants: `acme` (the example tools) and `flood` (the
//! hostile example, capped by `max_concurrent_calls` below the pool). `acme` makes echo
//! calls one at a time, first with the server idle, then while `flood` keeps 200 calls in
//! flight (each parks its slot for 100 ms; most of them wait in the queue for `flood`'s
//! share of slots); the two phases alternate, so that both see the same machine. Reported:
//! `acme`'s p50 and p99 in each phase and their ratio.
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon and the example tools
//! cargo bench -p cordon --bench fairness --profile dev
//! ```

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::http::{echo_request_with, exchange, free_port, wait_for};

const ROUNDS: usize = 4;
const SAMPLES_PER_ROUND: usize = 500;
const FLOOD_CALLS: usize = 200;
const ACME_KEY: &str = "acme-bench-key-0123456789abcdef";
const FLOOD_KEY: &str = "flood-bench-key-0123456789abcdef";

fn park_request(port: u16) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "park", "arguments": {"ms": 100},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: park\r\n\
         Authorization: Bearer {FLOOD_KEY}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// `acme`'s echo latencies, one call at a time on one kept-alive connection.
async fn acme_samples(port: u16, samples: usize) -> Vec<Duration> {
    let request = echo_request_with(port, &format!("Authorization: Bearer {ACME_KEY}\r\n"));
    let mut latencies = Vec::with_capacity(samples);
    let mut connection = None;
    while latencies.len() < samples {
        let started = Instant::now();
        let body = exchange(&mut connection, port, &request).await;
        assert!(body.contains("hello"), "{body}");
        latencies.push(started.elapsed());
    }
    latencies
}

/// `flood`'s clients: each keeps one park call in flight until `stop`; returns how many
/// calls were answered.
fn start_flood(
    port: u16,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let request = park_request(port);
    (0..FLOOD_CALLS)
        .map(|_| {
            let (request, stop, answered) = (request.clone(), stop.clone(), answered.clone());
            tokio::spawn(async move {
                let mut connection = None;
                while !stop.load(Ordering::Relaxed) {
                    let body = exchange(&mut connection, port, &request).await;
                    assert!(body.contains("parked"), "{body}");
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
}

fn main() {
    let (root, cordon) = support::cordon();
    let config = std::env::temp_dir().join(format!("cordon-bench-fairness-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nmax_concurrent_calls = 32\nqueue_timeout_ms = 60000\n\
             [http]\nmax_connections = 1024\n\
             [[components]]\nname = \"tools\"\npath = {:?}\n\
             [[components]]\nname = \"hostile\"\npath = {:?}\n\
             [[tenants]]\nname = \"acme\"\ncomponents = [\"tools\"]\napi_keys = {{ env = \"ACME_KEYS\" }}\n\
             [[tenants]]\nname = \"flood\"\ncomponents = [\"hostile\"]\napi_keys = {{ env = \"FLOOD_KEYS\" }}\n\
             max_concurrent_calls = 16\n",
            root.join("target/guests/example-tools.wasm"),
            root.join("target/guests/hostile.wasm"),
        ),
    )
    .unwrap();
    let port = free_port();
    let mut server = Command::new(&cordon)
        .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&config)
        .env("CORDON_LOG", "warn")
        .env("ACME_KEYS", ACME_KEY)
        .env("FLOOD_KEYS", FLOOD_KEY)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(port);
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (mut idle, mut flooded) = (Vec::new(), Vec::new());
    let mut flood_answered = 0;
    tokio.block_on(async {
        acme_samples(port, 50).await; // warm up
        for _ in 0..ROUNDS {
            idle.extend(acme_samples(port, SAMPLES_PER_ROUND).await);
            let (stop, answered) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
            let flood = start_flood(port, stop.clone(), answered.clone());
            // Wait until the flood holds its share of slots and the rest of it is queued.
            while answered.load(Ordering::Relaxed) < 16 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            flooded.extend(acme_samples(port, SAMPLES_PER_ROUND).await);
            stop.store(true, Ordering::Relaxed);
            for client in flood {
                client.await.unwrap();
            }
            flood_answered += answered.load(Ordering::Relaxed);
        }
    });
    let _ = server.kill();
    let _ = server.wait();
    idle.sort();
    flooded.sort();
    let (idle50, idle99) = (percentile(&idle, 0.5), percentile(&idle, 0.99));
    let (flood50, flood99) = (percentile(&flooded, 0.5), percentile(&flooded, 0.99));
    println!(
        "acme echo, server idle            p50 {idle50:>10.2?}  p99 {idle99:>10.2?}  ({} calls)",
        idle.len()
    );
    println!(
        "acme echo, flood's 200 in flight   p50 {flood50:>10.2?}  p99 {flood99:>10.2?}  ({} calls; flood answered {flood_answered})",
        flooded.len()
    );
    println!(
        "flooded / idle: p50 {:.2}x, p99 {:.2}x (target: p99 within 2x)",
        flood50.as_secs_f64() / idle50.as_secs_f64(),
        flood99.as_secs_f64() / idle99.as_secs_f64()
    );
}
