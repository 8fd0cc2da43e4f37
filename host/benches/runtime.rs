//! Runtime benchmarks: instance cost, stop latency, cleanup start, epoch overhead, file reads and
//! fairness. Every figure is a distribution or a ratio measured in this one run.
//!
//! ```sh
//! cargo bench -p cordon --bench runtime --profile dev
//! ```
//! (`--profile dev` reuses the test build: dependencies are optimised there too, see the
//! workspace `Cargo.toml`.)

#[path = "../tests/common/mod.rs"]
mod common;

/// The allocator `cordon` runs on (host/src/main.rs), so these are the server's figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use cordon::runtime::{Outcome, Runtime};
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (median, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "{name:<44} n={:<6} median {:>10.2?}  p90 {:>10.2?}  p99 {:>10.2?}  max {:>10.2?}",
        samples.len(),
        median,
        percentile(&samples, 0.9),
        p99,
        samples.last().unwrap()
    );
    (median, p99)
}

/// `rounds` times: a store and instance of `tool`'s component, then its drop; returns the
/// times of each apart.
async fn instance_costs(runtime: &Runtime, tool: &str, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (mut create, mut teardown) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let started = Instant::now();
        let store = runtime.instantiate_once(tool).await.unwrap();
        let created = Instant::now();
        drop(store);
        teardown.push(created.elapsed());
        create.push(created - started);
    }
    (create, teardown)
}

async fn fresh_instances(runtime: &Runtime) {
    instance_costs(runtime, "done", 1_000).await;
    let (create, teardown) = instance_costs(runtime, "done", 10_000).await;
    summary("fresh store + instance (target median <= 5us)", create);
    summary("dropping it (slot back to the pool)", teardown);
    let mut samples = Vec::with_capacity(5_000);
    for _ in 0..5_000 {
        let started = Instant::now();
        let report = runtime.call("done", &json!({})).await.unwrap().run().await;
        samples.push(started.elapsed());
        assert!(matches!(report.outcome, Outcome::Completed(_)));
    }
    summary("whole call of a trivial tool", samples);
}

/// Hard-stop latency: from the end of grace to the guest's future returning or dropping,
/// and from there to the start of cleanup.
async fn stop_latency(runtime: &Runtime, tool: &str) {
    let (mut stops, mut cleanups) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        let call = runtime.call(tool, &json!({})).await.unwrap();
        let handle = call.handle();
        let running = tokio::spawn(call.run());
        tokio::time::sleep(Duration::from_millis(2)).await;
        handle.cancel();
        let report = running.await.unwrap();
        assert_eq!(report.outcome, Outcome::Cancelled);
        let hard_stop_at = report.hard_stop_at.expect("a hard stop");
        stops.push(report.stopped_at.saturating_duration_since(hard_stop_at));
        cleanups.push(report.cleanup.unwrap().started_at.saturating_duration_since(report.stopped_at));
    }
    summary(&format!("stop latency after grace: {tool} (<=1ms/5ms)"), stops);
    summary(&format!("cleanup start after the stop: {tool} (<=1ms)"), cleanups);
}

/// Epoch checks on a compute-heavy guest against the same guest on an engine without them.
fn epoch_overhead() {
    const LOOPS: &str = r#"(module
      (func (export "chain") (param $n i64) (result i64)
        (local $x i64)
        (local.set $x (i64.const 1))
        (loop $l
          (local.set $x (i64.add (i64.mul (local.get $x) (i64.const 6364136223846793005)) (i64.const 1442695040888963407)))
          (local.set $n (i64.sub (local.get $n) (i64.const 1)))
          (br_if $l (i64.ne (local.get $n) (i64.const 0))))
        (local.get $x))
      (func (export "tight") (param $n i64) (result i64)
        (loop $l
          (local.set $n (i64.sub (local.get $n) (i64.const 1)))
          (br_if $l (i64.ne (local.get $n) (i64.const 0))))
        (local.get $n)))"#;
    let run = |epochs: bool, export: &str, iterations: i64| -> Duration {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(epochs);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let module = wasmtime::Module::new(&engine, LOOPS).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let func = instance.get_typed_func::<i64, i64>(&mut store, export).unwrap();
        (0..7)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(func.call(&mut store, iterations).unwrap());
                started.elapsed()
            })
            .min()
            .unwrap()
    };
    for (export, iterations) in [("chain", 200_000_000), ("tight", 500_000_000)] {
        let (off, on) = (run(false, export, iterations), run(true, export, iterations));
        println!(
            "epoch-check overhead, {export:<5} loop: off {off:>9.2?}  on {on:>9.2?}  ratio {:.3} (best of 7)",
            on.as_secs_f64() / off.as_secs_f64()
        );
    }
}

/// p99 latency of echo calls while every core has a spinning guest, against idle.
async fn fairness(runtime: Arc<Runtime>) {
    async fn echo_p99(runtime: &Runtime, label: &str) -> Duration {
        let mut samples = Vec::new();
        // Enough samples that the p99 is not a handful of outliers.
        for _ in 0..20_000 {
            let started = Instant::now();
            runtime.call("done", &json!({})).await.unwrap().run().await;
            samples.push(started.elapsed());
        }
        summary(label, samples).1
    }
    // Measure from a spawned task: on a worker thread, as a server's connection tasks are.
    let measure = |label: String| {
        let runtime = runtime.clone();
        tokio::spawn(async move { echo_p99(&runtime, &label).await })
    };
    let idle = measure("trivial call, idle".into()).await.unwrap();
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let mut spinners = Vec::new();
    for _ in 0..cores {
        let call = runtime.call("spin", &json!({})).await.unwrap();
        spinners.push((call.handle(), tokio::spawn(call.run())));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let loaded = measure(format!("trivial call, {cores} guests spinning")).await.unwrap();
    for (handle, running) in spinners {
        handle.cancel();
        running.await.unwrap();
    }
    println!(
        "fairness: p99 with every core spinning / idle p99 = {:.2} (target <= 2)",
        loaded.as_secs_f64() / idle.as_secs_f64()
    );
}

/// The sandbox's cost on a real tool: the example `echo` (a Rust SDK component) called
/// through the runtime, against the same work done by a native Rust handler.
async fn sandbox_overhead() {
    let tools = cordon::paths::example_tools();
    assert!(tools.is_file(), "{} is missing: run `cargo xtask guests`", tools.display());
    let mut runtime = Runtime::new(settings(4)).unwrap();
    // With a data directory, as `cordon serve` gives every component by default.
    let data_dir = std::env::temp_dir().join("cordon-bench-data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let options = cordon::runtime::ComponentOptions { data_dir: Some(data_dir), ..Default::default() };
    runtime.load_file(&tools, options).await.unwrap();
    let arguments = json!({"text": "hello"});
    let mut wasm = Vec::new();
    for i in 0..3_000 {
        let started = Instant::now();
        let report = runtime.call("echo", &arguments).await.unwrap().run().await;
        if i >= 500 {
            wasm.push(started.elapsed());
        }
        assert!(matches!(report.outcome, Outcome::Completed(_)));
    }
    #[derive(serde::Deserialize)]
    struct EchoArgs {
        text: String,
    }
    let native_echo = |arguments: &serde_json::Value| -> serde_json::Value {
        let args: EchoArgs = serde_json::from_value(arguments.clone()).unwrap();
        json!({"content": [{"type": "text", "text": args.text}]})
    };
    let mut native = Vec::new();
    for _ in 0..3_000 {
        let started = Instant::now();
        std::hint::black_box(native_echo(std::hint::black_box(&arguments)));
        native.push(started.elapsed());
    }
    // As `cordon serve` runs calls: the instance is torn down and the next one made (a
    // spare) after the answer, off the caller's clock.
    let mut on_spare = Vec::new();
    for i in 0..3_000 {
        let started = Instant::now();
        let call = runtime.call("echo", &arguments).await.unwrap();
        let (report, teardown) = call.run_deferring_teardown().await;
        if i >= 500 {
            on_spare.push(started.elapsed());
        }
        assert!(matches!(report.outcome, Outcome::Completed(_)));
        teardown.finish().await;
    }
    let (create, teardown) = instance_costs(&runtime, "echo", 3_000).await;
    summary("  of which: store + instance (echo)", create);
    summary("  of which: dropping it (echo)", teardown);
    let (wasm_median, _) = summary("echo in the sandbox (Rust SDK component)", wasm);
    let (spare_median, _) = summary("echo on a spare instance (as served)", on_spare);
    let (native_median, _) = summary("echo as a native Rust handler", native);
    println!(
        "sandbox overhead per call (median): {:.1?} with a fresh instance made on demand, \
         {:.1?} on a spare made ahead (target <= 50us)",
        wasm_median.saturating_sub(native_median),
        spare_median.saturating_sub(native_median)
    );
}

/// File reads through the sandbox: the hostile component reads a 64 MiB file from its
/// data directory in 64 KiB reads, through an input stream (Cordon's `FileReader`, each
/// read on the blocking pool within the call's thread permits) and through the
/// descriptor's `read`, against the same reads done natively in this process, each way
/// five times, alternating; the page cache is warm for all of them.
async fn file_reads() {
    const FILE_BYTES: usize = 64 << 20;
    let hostile = cordon::paths::default_tools_dir().join("hostile.wasm");
    assert!(hostile.is_file(), "{} is missing: run `cargo xtask guests`", hostile.display());
    let data_dir = std::env::temp_dir().join("cordon-bench-files");
    std::fs::create_dir_all(&data_dir).unwrap();
    let file = data_dir.join("big");
    std::fs::write(&file, vec![7u8; FILE_BYTES]).unwrap();
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let options =
        cordon::runtime::ComponentOptions { data_dir: Some(data_dir.clone()), ..Default::default() };
    runtime.load_file(&hostile, options).await.unwrap();
    let through = |via: &'static str| {
        let runtime = &runtime;
        async move {
            let arguments = json!({"dir": "/data", "path": "big", "via": via});
            let started = Instant::now();
            let report = runtime.call("read_through", &arguments).await.unwrap().run().await;
            let elapsed = started.elapsed();
            assert_eq!(answer(&report), format!("read {FILE_BYTES} bytes"), "{via}");
            elapsed
        }
    };
    let native = || {
        use std::io::Read;
        let started = Instant::now();
        let mut reader = std::fs::File::open(&file).unwrap();
        let (mut buffer, mut total) = (vec![0u8; 65536], 0);
        loop {
            let read = reader.read(&mut buffer).unwrap();
            if read == 0 {
                break;
            }
            total += std::hint::black_box(read);
        }
        assert_eq!(total, FILE_BYTES);
        started.elapsed()
    };
    let (mut by_stream, mut by_read, mut by_host) = (Vec::new(), Vec::new(), Vec::new());
    let _warm = native();
    for _ in 0..5 {
        by_host.push(native());
        by_stream.push(through("stream").await);
        by_read.push(through("read").await);
    }
    let rate = |mut samples: Vec<Duration>| {
        samples.sort();
        FILE_BYTES as f64 / (1 << 20) as f64 / samples[samples.len() / 2].as_secs_f64()
    };
    let (host, stream, read) = (rate(by_host), rate(by_stream), rate(by_read));
    println!("file reads of 64 MiB in 64 KiB reads, median of 5 (MiB/s):");
    println!("  natively, in this process:       {host:>8.0}");
    println!("  guest, input stream:             {stream:>8.0}  ({:.0} % of native)", 100.0 * stream / host);
    println!("  guest, descriptor read:          {read:>8.0}  ({:.0} % of native)", 100.0 * read / host);
    println!("  stream / descriptor read:        {:>8.2}", stream / read);
    let _ = std::fs::remove_dir_all(&data_dir);
}

/// `cargo bench ... -- NAME...` runs only the named sections (`instances`, `stop`,
/// `fairness`, `sandbox`, `files`, `epoch`); with no names it runs them all.
fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    let run = |section: &str| wanted.is_empty() || wanted.iter().any(|name| name == section);
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    tokio.block_on(async {
        let mut limits = quick_limits();
        limits.grace = Duration::from_millis(5);
        limits.max_duration = Some(Duration::from_secs(600));
        let guests = [
            WatGuest::new("done", DONE_BODY),
            WatGuest::new("spin", SPIN_BODY),
            WatGuest::new("sleepy", SLEEP_BODY),
        ];
        let runtime = Arc::new(runtime_with(&guests, limits).await);
        if run("instances") {
            fresh_instances(&runtime).await;
        }
        if run("stop") {
            stop_latency(&runtime, "spin").await;
            stop_latency(&runtime, "sleepy").await;
        }
        if run("fairness") {
            fairness(runtime.clone()).await;
        }
        if run("sandbox") {
            sandbox_overhead().await;
        }
        if run("files") {
            file_reads().await;
        }
    });
    if run("epoch") {
        epoch_overhead();
    }
}
