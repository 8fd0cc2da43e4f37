//! HTTP echo throughput and latency: `cordon serve --http` (the echo tool in a fresh
//! WebAssembly instance per call) against the same tool on the official Python SDK's
//! Streamable HTTP server, with the same load generator in the same run: five 1 s slices
//! per server, in alternation, of 16 concurrent clients, each sending `tools/call` after
//! `tools/call` on one kept-alive connection (as HTTP client libraries do).
//!
//! A second cordon runs beside them with the operator's telemetry on (the call log at
//! `info` into a pipe that is drained, `--metrics`), against the first with logging at
//! `warn` and no metrics: the cost of telemetry (target: at most 5 % added at p50). The two
//! take `TELEMETRY_ROUNDS` pairs of slices side by side, each pair in the other order than
//! the last; the verdict is the median over the pairs of the ratio of their medians, so
//! that a slow second on this shared machine spoils one pair, not the figure.
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon, the example tools and the Python env
//! cargo bench -p cordon --bench http --profile dev
//! ```

mod support;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::http::{Subject, free_port, wait_for};

/// Each server is loaded for `ROUNDS` slices of `SLICE`, in alternation.
const ROUNDS: u32 = 5;
const SLICE: Duration = Duration::from_secs(1);
/// Pairs of slices, telemetry off and on.
const TELEMETRY_ROUNDS: u32 = 15;

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
    // The same server, with the log at info (one line per call) into a pipe that a thread
    // drains, and the metrics listener on.
    let observed_port = free_port();
    let mut observed = Command::new(&cordon)
        .args(["serve", "--http", &format!("127.0.0.1:{observed_port}"), "--config"])
        .arg(&config)
        .args(["--metrics", "127.0.0.1:0"])
        .env("CORDON_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log_lines = support::drain_log(observed.stderr.take().unwrap());
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
    wait_for(observed_port);
    wait_for(python_port);
    let mut subjects = [
        Subject::new("cordon (wasm echo, fresh instance)", server, cordon_port),
        Subject::new("cordon, call log at info + metrics", observed, observed_port),
        Subject::new("python SDK reference server", reference, python_port),
    ];
    // Slices alternate between the servers, so that this machine's slow spells fall on
    // all alike; the two cordons take more of them, side by side, in turn first.
    for round in 0..TELEMETRY_ROUNDS {
        let [off, on, reference] = &mut subjects;
        if round % 2 == 0 {
            off.slice(&tokio, SLICE);
            on.slice(&tokio, SLICE);
        } else {
            on.slice(&tokio, SLICE);
            off.slice(&tokio, SLICE);
        }
        if round < ROUNDS {
            reference.slice(&tokio, SLICE);
        }
    }
    let paired = support::http::paired_median_ratio(&subjects[0], &subjects[1]);
    let [ours, observed, theirs] = subjects.map(Subject::report);
    println!(
        "telemetry on / off: median latency {paired:.3}x over {TELEMETRY_ROUNDS} paired slices (target <= 1.05x; \
         pooled medians {:.3}x), throughput {:.3}x, CPU per request {:.3}x; {} log lines",
        observed.median.as_secs_f64() / ours.median.as_secs_f64(),
        observed.rate / ours.rate,
        observed.cpu_per_request.as_secs_f64() / ours.cpu_per_request.as_secs_f64(),
        log_lines.join().unwrap()
    );

    println!(
        "throughput: cordon / reference = {:.1}x; median latency: reference / cordon = {:.1}x (target >= 10x)",
        ours.rate / theirs.rate,
        theirs.median.as_secs_f64() / ours.median.as_secs_f64()
    );
    println!(
        "server CPU per request: reference / cordon = {:.1}x",
        theirs.cpu_per_request.as_secs_f64() / ours.cpu_per_request.as_secs_f64()
    );
}
