//! stdio echo round trips: `cordon serve --stdio` (the echo tool in a fresh WebAssembly
//! instance per call) against the same tool on a reference server written with the
//! official Python SDK, measured in the same run with the same client loop. `cat` (which
//! echoes the request line back) gives the floor: what the pipes and process wake-ups
//! alone cost on this machine. A second cordon has the operator's telemetry on (the call
//! log at `info` into a pipe that is drained, `--metrics`), the first has logging off and
//! no metrics: their ratio of medians is the cost of telemetry (target: at most 5 % added
//! at p50). The four run side by side, in alternating rounds.
//!
//! ```sh
//! cargo xtask guests && cargo xtask test   # builds target/debug/cordon and the Python env
//! cargo bench -p cordon --bench stdio --profile dev
//! ```

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ROUNDS: usize = 20;
const CALLS_PER_ROUND: usize = 100;
const WARM_UP: usize = 200;

/// One server under test, spawned once and driven over its stdin and stdout.
struct Subject {
    label: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    samples: Vec<Duration>,
    /// CPU time the server's threads spent in the measured rounds.
    cpu: Duration,
    /// Drains the server's stderr when it is a pipe (as a log collector would); counts lines.
    log_lines: Option<std::thread::JoinHandle<usize>>,
}

impl Subject {
    fn spawn(label: &'static str, command: &mut Command) -> Self {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let log_lines = child.stderr.take().map(support::drain_log);
        let mut subject = Self {
            label,
            child,
            stdin,
            stdout,
            next_id: 0,
            samples: Vec::new(),
            cpu: Duration::ZERO,
            log_lines,
        };
        for _ in 0..WARM_UP {
            subject.round_trip();
        }
        subject
    }

    fn cpu_used(&self) -> Duration {
        support::cpu_used(self.child.id())
    }

    fn signal(&self, signal: i32) {
        support::signal(&self.child, signal);
    }

    /// One `tools/call echo` and its answer; returns the time it took.
    fn round_trip(&mut self) -> Duration {
        let id = self.next_id;
        self.next_id += 1;
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello"}, "_meta": meta}});
        let mut line = String::new();
        // One message, one write, as a real client sends it (`writeln!` on the unbuffered
        // pipe would make a syscall per JSON token, and the server a read per token).
        let mut bytes = serde_json::to_vec(&request).unwrap();
        bytes.push(b'\n');
        let started = Instant::now();
        self.stdin.write_all(&bytes).unwrap();
        // The clock stops when the answer's line is in, before the client parses it.
        let (answer, elapsed) = loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "{} closed its stdout", self.label);
            let elapsed = started.elapsed();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message.get("id") == Some(&json!(id)) {
                break (message, elapsed);
            }
        };
        let echoed = answer["result"]["content"][0]["text"] == "hello"
            || answer["params"]["arguments"]["text"] == "hello";
        assert!(echoed, "{}: {answer}", self.label);
        elapsed
    }

    /// Median round trip and CPU per call, after printing the distribution.
    fn report(mut self) -> (Duration, Duration) {
        drop(self.stdin);
        let _ = self.child.wait();
        let samples = &mut self.samples;
        samples.sort();
        let median = samples[samples.len() / 2];
        let cpu_per_call = self.cpu / samples.len() as u32;
        println!(
            "{:<34} n={} median {median:>9.1?}  p90 {:>9.1?}  p99 {:>9.1?}  server CPU/call {cpu_per_call:>9.1?}",
            self.label,
            samples.len(),
            samples[samples.len() * 9 / 10],
            samples[samples.len() * 99 / 100]
        );
        (median, cpu_per_call)
    }
}

fn main() {
    let support::Binaries { root, cordon, python } = support::binaries();
    let config = support::examples_config(&root, "stdio", "");
    let mut subjects = [
        Subject::spawn("floor: `cat` echoing the line", Command::new("cat").stderr(Stdio::null())),
        Subject::spawn(
            "cordon (wasm echo, fresh instance)",
            Command::new(&cordon)
                .args(["serve", "--stdio", "--config"])
                .arg(&config)
                .env("CORDON_LOG", "off")
                .stderr(Stdio::null()),
        ),
        Subject::spawn(
            "cordon, call log at info + metrics",
            Command::new(&cordon)
                .args(["serve", "--stdio", "--metrics", "127.0.0.1:0", "--config"])
                .arg(&config)
                .env("CORDON_LOG", "info")
                .stderr(Stdio::piped()),
        ),
        Subject::spawn(
            "python SDK reference server",
            Command::new(&python).arg(root.join("host/benches/reference_server.py")).stderr(Stdio::null()),
        ),
    ];
    let log_lines = subjects[2].log_lines.take().expect("the observed server logs into a pipe");
    // Rounds alternate between the servers, so that this machine's slow spells (which
    // move round trips by up to 1.7x) fall on all of them alike; the servers not being
    // measured are paused (SIGSTOP), so that their timers and housekeeping threads do not
    // disturb the one that is.
    for subject in &subjects {
        subject.signal(libc::SIGSTOP);
    }
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.signal(libc::SIGCONT);
            let cpu_before = subject.cpu_used();
            for _ in 0..CALLS_PER_ROUND {
                let sample = subject.round_trip();
                subject.samples.push(sample);
            }
            subject.cpu += subject.cpu_used() - cpu_before;
            subject.signal(libc::SIGSTOP);
        }
    }
    for subject in &subjects {
        subject.signal(libc::SIGCONT);
    }
    let [(floor, _), (cordon, cordon_cpu), (observed, observed_cpu), (python, python_cpu)] =
        subjects.map(Subject::report);
    println!(
        "telemetry on / off: median latency {:.3}x (target <= 1.05x), server CPU per call {:.3}x; {} log lines",
        observed.as_secs_f64() / cordon.as_secs_f64(),
        observed_cpu.as_secs_f64() / cordon_cpu.as_secs_f64(),
        log_lines.join().unwrap()
    );
    println!(
        "median latency: reference / cordon = {:.1}x (target >= 10x); above the pipe floor: {:.1}x",
        python.as_secs_f64() / cordon.as_secs_f64(),
        (python - floor).as_secs_f64() / (cordon - floor).as_secs_f64()
    );
    println!(
        "server CPU per call: reference / cordon = {:.1}x",
        python_cpu.as_secs_f64() / cordon_cpu.as_secs_f64()
    );
}
