//! stdio echo round trips: `cordon serve --stdio` (the echo tool in a fresh WebAssembly
//! instance per call) against the same tool on a reference server written with the
//! official Python SDK, measured in the same run with the same client loop. `cat` (which
//! echoes the request line back) gives the floor: what the pipes and process wake-ups
//! alone cost on this machine.
//!
//! ```sh
//! cargo xtask guests && cargo xtask test   # builds target/debug/cordon and the Python env
//! cargo bench -p cordon --bench stdio --profile dev
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CALLS: usize = 2_000;
const WARM_UP: usize = 200;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Median and p99 of `CALLS` sequential echo round trips against `command`.
fn round_trips(label: &str, command: &mut Command) -> Duration {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut samples = Vec::with_capacity(CALLS);
    let mut line = String::new();
    for id in 0..WARM_UP + CALLS {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello"}, "_meta": meta}});
        let started = Instant::now();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let answer = loop {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "{label} closed its stdout");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message.get("id") == Some(&json!(id)) {
                break message;
            }
        };
        let elapsed = started.elapsed();
        let echoed = answer["result"]["content"][0]["text"] == "hello"
            || answer["params"]["arguments"]["text"] == "hello";
        assert!(echoed, "{label}: {answer}");
        if id >= WARM_UP {
            samples.push(elapsed);
        }
    }
    drop(stdin);
    let _ = child.wait();
    samples.sort();
    let median = samples[samples.len() / 2];
    println!(
        "{label:<34} n={CALLS} median {median:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}",
        samples[samples.len() * 9 / 10],
        samples[samples.len() * 99 / 100]
    );
    median
}

fn main() {
    let root = repo();
    let cordon =
        std::env::var_os("CORDON_BIN").map_or_else(|| root.join("target/debug/cordon"), PathBuf::from);
    let python = root.join("target/e2e-venv/bin/python");
    assert!(cordon.is_file() && python.is_file(), "run `cargo xtask test` first: it builds both");
    let config = std::env::temp_dir().join("cordon-bench-stdio.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\n[[components]]\npath = {:?}\n",
            root.join("target/guests/example-tools.wasm")
        ),
    )
    .unwrap();
    let floor = round_trips("floor: `cat` echoing the line", &mut Command::new("cat"));
    let cordon_median = round_trips(
        "cordon (wasm echo, fresh instance)",
        Command::new(&cordon).args(["serve", "--stdio", "--config"]).arg(&config),
    );
    let python_median = round_trips(
        "python SDK reference server",
        Command::new(&python).arg(root.join("host/benches/reference_server.py")),
    );
    println!(
        "median latency: reference / cordon = {:.1}x (target >= 10x); above the pipe floor: {:.1}x",
        python_median.as_secs_f64() / cordon_median.as_secs_f64(),
        (python_median - floor).as_secs_f64() / (cordon_median - floor).as_secs_f64()
    );
}
