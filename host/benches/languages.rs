//! Guest languages side by side: for each language's example component that is built,
//! its size, its cold load (compile, first instance, `list`), its load from the compile
//! cache, the cost of a fresh instance, and the first and steady-state `echo` call through
//! the runtime, all in one run.
//!
//! ```sh
//! cargo xtask guests   # builds every example component this machine can build
//! cargo bench -p cordon --bench languages --profile dev
//! ```
//! A language whose component is missing is reported and skipped. To add one, add its
//! example component (with an `echo(text)` tool) to `LANGUAGES`.

#[path = "../tests/common/mod.rs"]
mod common;

/// The allocator `cordon` runs on (host/src/main.rs), so these are the server's figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::Path;
use std::time::{Duration, Instant};

use cordon::runtime::{ComponentOptions, Outcome, Runtime, ToolLimits};
use serde_json::json;

/// (language, component in `target/guests/`): each has an `echo(text)` tool.
const LANGUAGES: &[(&str, &str)] = &[("Rust", "example-tools.wasm"), ("Python", "example-python.wasm")];

const CALLS: usize = 2_000;
const INSTANCES: usize = 2_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let median = percentile(&samples, 0.5);
    println!(
        "  {name:<36} n={:<5} median {:>10.2?}  p90 {:>10.2?}  p99 {:>10.2?}",
        samples.len(),
        median,
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
    );
    median
}

async fn load(path: &Path, cache_dir: Option<&Path>) -> (Runtime, Duration) {
    let mut settings = common::settings(4);
    settings.engine.cache_dir = cache_dir.map(Path::to_path_buf);
    let mut runtime = Runtime::new(settings).unwrap();
    let options = ComponentOptions {
        limits: ToolLimits::default(),
        data_dir: Some(common::fresh_dir("languages")),
        ..ComponentOptions::default()
    };
    let started = Instant::now();
    runtime.load_file(path, options).await.unwrap();
    (runtime, started.elapsed())
}

async fn echo(runtime: &Runtime) -> Duration {
    let started = Instant::now();
    let report = runtime.call("echo", &json!({"text": "hello"})).await.unwrap().run().await;
    let elapsed = started.elapsed();
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
    elapsed
}

/// One language's figures; returns its steady-state echo median.
async fn measure(language: &str, path: &Path) -> Duration {
    let size = std::fs::metadata(path).unwrap().len();
    println!("{language}: {} ({:.1} MiB)", path.display(), size as f64 / (1 << 20) as f64);
    let (runtime, cold) = load(path, None).await;
    println!("  {:<36} {cold:>10.2?}", "cold load (compile, instance, list)");
    let cache = common::fresh_dir("languages-cache");
    load(path, Some(&cache)).await; // fills the cache
    let (_, warm) = load(path, Some(&cache)).await;
    println!("  {:<36} {warm:>10.2?}", "load from the compile cache");
    let _ = std::fs::remove_dir_all(&cache);
    let first = echo(&runtime).await;
    println!("  {:<36} {first:>10.2?}", "first echo call after load");
    let (mut instances, mut teardowns) = (Vec::with_capacity(INSTANCES), Vec::with_capacity(INSTANCES));
    for _ in 0..INSTANCES {
        let started = Instant::now();
        let store = runtime.instantiate_once("echo").await.unwrap();
        let created = Instant::now();
        drop(store);
        teardowns.push(created.elapsed());
        instances.push(created - started);
    }
    summary("fresh store + instance", instances);
    summary("dropping it (slot back to the pool)", teardowns);
    for _ in 0..100 {
        echo(&runtime).await; // warm-up
    }
    let mut calls = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        calls.push(echo(&runtime).await);
    }
    summary("echo call (steady state)", calls)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let guests = cordon::paths::default_tools_dir();
    let mut medians = Vec::new();
    for (language, file) in LANGUAGES {
        let path = guests.join(file);
        if !path.is_file() {
            println!("{language}: {} is not built (cargo xtask guests); skipped", path.display());
            continue;
        }
        medians.push((*language, measure(language, &path).await));
    }
    if let Some((baseline, base)) = medians.first() {
        for (language, median) in &medians[1..] {
            println!(
                "echo median, {language} / {baseline}: {:.1}x",
                median.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
}
