//! What the example guests' tests share across languages (`examples.rs`, `python_guest.rs`,
//! `js_guest.rs`): each example offers the same tools (`echo`, a `reindex` that reports
//! progress and holds a lock, a `spin` that never checks for cancellation, and in Rust and
//! Python a `locks` tool that lists the locks held), so a call, its progress and its stop
//! are checked the same way in every language.

use std::time::{Duration, Instant};

use cordon::runtime::{
    CallReport, CleanupOutcome, ComponentOptions, Content, Outcome, Runtime, StopPath, ToolLimits,
};
use serde_json::{Value, json};

/// The text of a call that completed with one text item.
pub fn text_of(report: &CallReport) -> String {
    match &report.outcome {
        Outcome::Completed(result) => {
            assert!(!result.is_error, "{result:?}");
            match result.content.as_slice() {
                [Content::Text(text)] => text.clone(),
                other => panic!("expected one text item, got {other:?}"),
            }
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
}

/// The locks held, as the example's `locks` tool lists them.
pub async fn locks(runtime: &Runtime) -> Vec<String> {
    serde_json::from_str(&text_of(&super::call(runtime, "locks", json!({})).await)).unwrap()
}

/// Start `tool`, wait (10 s at most) until `lock` shows in `locks`, cancel it, and return
/// the report.
pub async fn cancel_when_locked(runtime: &Runtime, tool: &str, arguments: Value, lock: &str) -> CallReport {
    let call = runtime.call(tool, &arguments).await.unwrap();
    let handle = call.handle();
    let running = tokio::spawn(call.run());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !locks(runtime).await.iter().any(|held| held == lock) {
        assert!(Instant::now() < deadline, "{lock} was never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.cancel();
    running.await.unwrap()
}

/// Start `tool`, wait (30 s at most) for its first progress report (it is running, its
/// note left), then cancel it.
pub async fn cancel_after_first_progress(runtime: &Runtime, tool: &str, arguments: Value) -> CallReport {
    let call = runtime.call(tool, &arguments).await.unwrap();
    let handle = call.handle();
    let mut progress = handle.progress();
    let running = tokio::spawn(call.run());
    tokio::time::timeout(Duration::from_secs(30), progress.changed())
        .await
        .expect("a first progress report within 30 s")
        .unwrap();
    handle.cancel();
    running.await.unwrap()
}

/// One progress report: done, total, message.
pub type Progress = (f64, Option<f64>, Option<String>);

/// Run `tool` to its end, recording its progress reports until one reaches `last_done`.
pub async fn run_recording_progress(
    runtime: &Runtime,
    tool: &str,
    arguments: Value,
    last_done: f64,
) -> (CallReport, Vec<Progress>) {
    let call = runtime.call(tool, &arguments).await.unwrap();
    let mut progress = call.handle().progress();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while progress.changed().await.is_ok() {
            let report = progress.borrow_and_update().clone().unwrap();
            let done = report.done;
            seen.push((report.done, report.total, report.message));
            if done >= last_done {
                break;
            }
        }
        seen
    });
    let report = call.run().await;
    (report, watcher.await.unwrap())
}

/// The reports count up, each out of `total`, the last saying `last_message`.
pub fn assert_counts_up(seen: &[Progress], total: f64, last_message: &str) {
    assert!(seen.windows(2).all(|pair| pair[0].0 < pair[1].0), "{seen:?}");
    assert!(seen.iter().all(|(_, of, _)| *of == Some(total)), "{seen:?}");
    assert_eq!(seen.last().unwrap().2.as_deref(), Some(last_message), "{seen:?}");
}

/// How a stopped call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It saw the cancel and returned by itself within the grace period.
    ByItself,
    /// It never checked: trapped at an epoch check once the grace period ended.
    Hard,
}

/// The call was cancelled, stopped as `how` says, and its cleanup ran to the end.
pub fn assert_cancelled_and_cleaned_up(report: &CallReport, how: Stopped) {
    assert_eq!(report.outcome, Outcome::Cancelled, "{report:?}");
    match how {
        Stopped::ByItself => assert!(!report.hard_stopped, "it returned by itself: {report:?}"),
        Stopped::Hard => {
            assert!(report.hard_stopped, "it never checks for cancellation: {report:?}");
            assert_eq!(report.stop_path, StopPath::EpochTrap, "{report:?}");
        }
    }
    let cleanup = report.cleanup.as_ref().expect("a cleanup ran");
    assert_eq!(cleanup.outcome, CleanupOutcome::Completed, "{report:?}");
}

/// A built guest in `target/guests/`, which `cargo xtask guests` makes.
pub fn built_guest(file: &str) -> std::path::PathBuf {
    let path = cordon::paths::default_tools_dir().join(file);
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

/// A runtime with the built guest `file` loaded under `limits`, without a data directory.
/// Compiling an interpreter (a 12 MiB JavaScript component, CPython) takes seconds: the
/// first test to load one compiles it into `cache` (under the target folder, so later runs
/// start warm too) while the others wait, then they load the cached code.
pub async fn load_compiled_once(file: &str, limits: ToolLimits, cache: &str) -> Runtime {
    static FIRST_LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let mut settings = crate::common::settings(8);
    settings.engine.cache_dir = Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(cache));
    let mut runtime = Runtime::new(settings).unwrap();
    let options = ComponentOptions { limits, data_dir: None, ..ComponentOptions::default() };
    let _first = FIRST_LOAD.lock().await;
    runtime.load_file(&built_guest(file), options).await.unwrap();
    runtime
}
