//! Guests written in each language, side by side in one run: the component's size, its
//! cold load (compile, write the compile cache, instantiate and list), its load from the
//! compile cache, a fresh instance, the first call after
//! loading, steady-state `echo` latency through the runtime, a hard stop's latency (a
//! cancelled `spin`, which never checks, with no grace period: from the cancel to the trap),
//! and the smallest memory limit under which `echo` still runs. Each language's example
//! component offers `echo({"text"})` and `spin({"seconds"})`; add a row to `LANGUAGES` for
//! a new one.
//!
//! ```sh
//! cargo xtask guests
//! cargo bench -p cordon --bench languages --profile dev
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

/// The allocator `cordon` runs on (host/src/main.rs), so these are the server's figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon::runtime::{ComponentOptions, EngineSettings, Outcome, Runtime, ToolLimits};
use serde_json::json;

/// (language, component in `target/guests/`).
const LANGUAGES: &[(&str, &str)] =
    &[("Rust", "example-tools.wasm"), ("Python", "example-python.wasm"), ("JavaScript", "example-js.wasm")];
const CALLS: usize = 2_000;
const WARMUP: usize = 100;
const INSTANCES: usize = 200;
const STOPS: usize = 20;

fn runtime(cache_dir: Option<PathBuf>) -> Runtime {
    let mut settings = common::settings(8);
    settings.engine = EngineSettings { cache_dir, ..settings.engine };
    Runtime::new(settings).unwrap()
}

fn options(memory_bytes: usize) -> ComponentOptions {
    ComponentOptions {
        limits: ToolLimits { memory_bytes, ..ToolLimits::default() },
        ..ComponentOptions::default()
    }
}

const DEFAULT_MEMORY: usize = 64 << 20;

async fn echo(runtime: &Runtime) -> Duration {
    let started = Instant::now();
    let report = runtime.call("echo", &json!({"text": "hello"})).await.unwrap().run().await;
    let took = started.elapsed();
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// From `cancel()` to the moment a spinning call stopped, with no grace period: the
/// hard-stop flag, the epoch bump and the trap at the guest's next epoch check.
async fn hard_stop(runtime: &Runtime) -> Duration {
    let call = runtime.call("spin", &json!({"seconds": 600})).await.unwrap();
    let handle = call.handle();
    let running = tokio::spawn(call.run());
    // Let the instance start and enter its loop (a CPython or StarlingMonkey instance takes
    // about a millisecond); a cancel before that would measure a call that never ran.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = Instant::now();
    handle.cancel();
    let report = running.await.unwrap();
    assert!(report.hard_stopped && report.outcome == Outcome::Cancelled, "{report:?}");
    report.stopped_at.saturating_duration_since(cancelled)
}

/// The smallest limit, in MiB, under which the component loads and `echo` completes.
async fn memory_floor(path: &Path, cache: &Path) -> usize {
    let works = |mib: usize| async move {
        let mut runtime = runtime(Some(cache.to_path_buf()));
        if runtime.load_file(path, options(mib << 20)).await.is_err() {
            return false;
        }
        let report = runtime.call("echo", &json!({"text": "hello"})).await.unwrap().run().await;
        matches!(report.outcome, Outcome::Completed(_))
    };
    let (mut low, mut high) = (0, 64); // low fails (nothing loads in 0 bytes), high works
    assert!(works(high).await, "{} does not run echo in 64 MiB", path.display());
    while high - low > 1 {
        let middle = (low + high) / 2;
        if works(middle).await { high = middle } else { low = middle }
    }
    high
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let guests = cordon::paths::default_tools_dir();
    let cache = std::env::temp_dir().join(format!("cordon-bench-languages-{}", std::process::id()));
    println!(
        "{:<11} {:>9} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}",
        "language",
        "size",
        "cold load",
        "cached load",
        "instance",
        "first call",
        "echo p50",
        "echo p99",
        "stop p50",
        "stop max",
        "memory"
    );
    for (language, file) in LANGUAGES {
        let path = guests.join(file);
        assert!(path.is_file(), "{} is missing: run `cargo xtask guests`", path.display());
        let size = std::fs::metadata(&path).unwrap().len();

        // Cold: compiled from the bytes (the cache is empty; the load also writes it),
        // instantiated once to read the tool list.
        let started = Instant::now();
        let mut cold = runtime(Some(cache.clone()));
        cold.load_file(&path, options(DEFAULT_MEMORY)).await.unwrap();
        let cold_load = started.elapsed();
        assert_eq!(cold.compile_cache().misses(), 1);
        drop(cold);

        // Warm: a second runtime loads it from the compile cache.
        let started = Instant::now();
        let mut warm = runtime(Some(cache.clone()));
        warm.load_file(&path, options(DEFAULT_MEMORY)).await.unwrap();
        let cached_load = started.elapsed();

        let first_call = echo(&warm).await;
        let mut instances = Vec::with_capacity(INSTANCES);
        for _ in 0..INSTANCES {
            let started = Instant::now();
            let store = warm.instantiate_once("echo").await.unwrap();
            instances.push(started.elapsed());
            drop(store);
        }
        instances.sort();
        for _ in 0..WARMUP {
            echo(&warm).await;
        }
        let mut calls = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            calls.push(echo(&warm).await);
        }
        calls.sort();
        drop(warm);
        let mut stopping = runtime(Some(cache.clone()));
        // `spin` holds a lock file (Rust, Python): a data directory, which its cleanup empties.
        let stop_dir = common::fresh_dir("bench-languages-stop");
        let no_grace = ComponentOptions {
            limits: ToolLimits { grace: Duration::ZERO, ..options(DEFAULT_MEMORY).limits },
            data_dir: Some(stop_dir.clone()),
            ..ComponentOptions::default()
        };
        stopping.load_file(&path, no_grace).await.unwrap();
        let mut stops = Vec::with_capacity(STOPS);
        for _ in 0..STOPS {
            stops.push(hard_stop(&stopping).await);
        }
        stops.sort();
        drop(stopping);
        let _ = std::fs::remove_dir_all(&stop_dir);
        let floor = memory_floor(&path, &cache).await;
        println!(
            "{language:<11} {:>7.1}MiB {:>12.2?} {:>12.2?} {:>11.2?} {:>11.2?} {:>11.2?} {:>11.2?} {:>11.2?} {:>11.2?} {:>5}MiB",
            size as f64 / f64::from(1 << 20),
            cold_load,
            cached_load,
            percentile(&instances, 0.5),
            first_call,
            percentile(&calls, 0.5),
            percentile(&calls, 0.99),
            percentile(&stops, 0.5),
            stops[STOPS - 1],
            floor,
        );
    }
    let _ = std::fs::remove_dir_all(&cache);
}
