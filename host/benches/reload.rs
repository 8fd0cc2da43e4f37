//! stdio echo round trips while the server reloads, against the same server quiet, in one
//! run: does a reload (compiling a component in the background, then swapping the set)
//! hold up calls? One `cordon serve --stdio` serves the example tools and the hostile
//! component; in the reloading rounds a thread keeps changing the hostile component's
//! `[[components]]` section (so each reload compiles it again; the compile cache is off)
//! and sends SIGHUP. Quiet and reloading rounds alternate.
//!
//! ```sh
//! cargo xtask guests && cargo build -p cordon
//! cargo bench -p cordon --bench reload --profile dev
//! ```

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

const ROUNDS: usize = 6;
/// Each round calls for this long: reloads take hundreds of milliseconds.
const ROUND: Duration = Duration::from_millis(1500);
const WARM_UP: usize = 300;

fn config(root: &std::path::Path, path: &std::path::Path, memory_mb: u32) {
    let guests = root.join("target/guests");
    let text = format!(
        "[server]\ncache = false\n[[components]]\npath = {:?}\n[[components]]\npath = {:?}\nlimits = {{ memory_mb = {memory_mb} }}\n",
        guests.join("example-tools.wasm"),
        guests.join("hostile.wasm"),
    );
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).unwrap();
    std::fs::rename(&partial, path).unwrap();
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let (root, cordon) = support::cordon();
    let path = std::env::temp_dir().join(format!("cordon-bench-reload-{}.toml", std::process::id()));
    config(&root, &path, 64);
    let mut child = Command::new(&cordon)
        .args(["serve", "--stdio", "--config"])
        .arg(&path)
        .env("CORDON_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let reloads = Arc::new(AtomicUsize::new(0));
    {
        let (stderr, reloads) = (child.stderr.take().unwrap(), reloads.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("reload: loaded") {
                    reloads.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let mut id = 0u64;
    let mut round_trip = || {
        id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hello"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}}});
        let mut line = request.to_string();
        line.push('\n');
        let start = Instant::now();
        stdin.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        stdout.read_line(&mut answer).unwrap();
        let took = start.elapsed();
        assert!(answer.contains(r#""text":"hello""#), "{answer}");
        took
    };
    for _ in 0..WARM_UP {
        round_trip();
    }
    let (mut quiet, mut reloading) = (Vec::new(), Vec::new());
    let mut reloads_during = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        while start.elapsed() < ROUND {
            quiet.push(round_trip());
        }
        // Reloads, back to back, while the calls of this round run.
        let stop = Arc::new(AtomicBool::new(false));
        let before = reloads.load(Ordering::Relaxed);
        let driver = {
            let (stop, root, path, pid) = (stop.clone(), root.clone(), path.clone(), child.id());
            std::thread::spawn(move || {
                let mut memory_mb = 64;
                while !stop.load(Ordering::Relaxed) {
                    memory_mb = if memory_mb == 64 { 65 } else { 64 };
                    config(&root, &path, memory_mb);
                    // SAFETY: kill(2) on our own child's pid.
                    unsafe { libc::kill(pid as i32, libc::SIGHUP) };
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        // Let the first compile start.
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        while start.elapsed() < ROUND {
            reloading.push(round_trip());
        }
        stop.store(true, Ordering::Relaxed);
        driver.join().unwrap();
        // Wait out the reload under way, so that the next quiet round is quiet.
        let settle = Instant::now();
        let mut last = reloads.load(Ordering::Relaxed);
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = reloads.load(Ordering::Relaxed);
            if now == last || settle.elapsed() > Duration::from_secs(10) {
                break;
            }
            last = now;
        }
        reloads_during += last - before;
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (quiet_p50, quiet_p99) = (percentile(&mut quiet, 0.5), percentile(&mut quiet, 0.99));
    let (busy_p50, busy_p99) = (percentile(&mut reloading, 0.5), percentile(&mut reloading, 0.99));
    let busy_max = percentile(&mut reloading, 1.0);
    println!(
        "echo over stdio, {ROUNDS} rounds of {ROUND:?} each way ({} and {} calls)",
        quiet.len(),
        reloading.len()
    );
    println!("  quiet:     p50 {quiet_p50:?}, p99 {quiet_p99:?}");
    println!("  reloading: p50 {busy_p50:?}, p99 {busy_p99:?}, max {busy_max:?} ({reloads_during} reloads)");
    println!(
        "  ratio reloading / quiet: p50 {:.2}x, p99 {:.2}x",
        busy_p50.as_secs_f64() / quiet_p50.as_secs_f64(),
        busy_p99.as_secs_f64() / quiet_p99.as_secs_f64()
    );
}
