//! The JavaScript example tools (`examples/js/tools.js`, built with the JavaScript SDK and
//! componentize-js by `cargo xtask guests` into `target/guests/example-js.wasm`), called
//! through the runtime: their schemas, results, progress, and the stops of a StarlingMonkey
//! guest (a cancel it notices, a busy loop it never leaves, a timeout) with their cleanups.

use crate::common;

use common::call;
use common::guests::{
    Stopped, assert_cancelled_and_cleaned_up, assert_counts_up, cancel_after_first_progress,
    load_compiled_once, run_recording_progress, text_of,
};

use std::time::Duration;

use cordon::runtime::{CleanupOutcome, Outcome, Runtime, StopPath, Timeout, ToolLimits};
use serde_json::json;

async fn example_js_with(limits: ToolLimits) -> Runtime {
    load_js("example-js.wasm", limits).await
}

async fn load_js(file: &str, limits: ToolLimits) -> Runtime {
    load_compiled_once(file, limits, "js-guest-cache").await
}

async fn example_js() -> Runtime {
    example_js_with(ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_lists_every_tool_with_its_schema_object() {
    let runtime = example_js().await;
    let tools = runtime.snapshot();
    let names: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["echo", "reindex", "spin", "word_count", "fail"]);
    for tool in tools.tools() {
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        assert!(!tool.description.is_empty());
    }
    let reindex = &tools.tool("reindex").unwrap().input_schema;
    assert_eq!(reindex["required"], json!(["collection"]));
    assert_eq!(reindex["properties"]["collection"]["type"], "string");
    assert_eq!(reindex["properties"]["total"]["default"], 120);
    assert_eq!(reindex["properties"]["step_ms"]["default"], 100);
    let echo = tools.tool("echo").unwrap();
    assert_eq!(echo.annotations.as_ref().unwrap().read_only, Some(true));
    assert_eq!(echo.annotations.as_ref().unwrap().destructive, None);
    assert!(echo.output_schema.is_none());
    let word_count = tools.tool("word_count").unwrap();
    assert_eq!(word_count.output_schema.as_ref().unwrap()["required"], json!(["words", "characters"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_its_text() {
    let runtime = example_js().await;
    assert_eq!(text_of(&call(&runtime, "echo", json!({"text": "héllo, wörld 🦀"})).await), "héllo, wörld 🦀");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_object_is_structured_content_matching_the_output_schema() {
    let runtime = example_js().await;
    let report = call(&runtime, "word_count", json!({"text": "one two  três"})).await;
    match report.outcome {
        Outcome::Completed(result) => {
            assert_eq!(result.structured, Some(json!({"words": 3, "characters": 13})));
            assert!(!result.is_error);
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thrown_exception_reaches_the_client_as_its_error_text() {
    let runtime = example_js().await;
    let report = call(&runtime, "fail", json!({"message": "the index is corrupt"})).await;
    assert_eq!(report.outcome, Outcome::ToolError("Error: the index is corrupt".into()));
    assert!(report.cleanup.is_none(), "a call that returned needs no cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_reports_increasing_progress_with_its_schema_defaults() {
    let runtime = example_js().await;
    // `total` is left out: the SDK fills in the schema's default, 120.
    let arguments = json!({"collection": "books", "step_ms": 20});
    let (report, seen) = run_recording_progress(&runtime, "reindex", arguments, 120.0).await;
    assert_eq!(text_of(&report), "Reindexed 120 documents in books");
    assert_counts_up(&seen, 120.0, "Indexed 120 of 120 documents");
}

#[test]
fn a_cancelled_reindex_wakes_from_its_sleep_and_its_cleanup_gets_the_note() {
    let log = common::capture_log(|| async {
        let runtime = example_js().await;
        let arguments = json!({"collection": "archive", "step_ms": 60000, "total": 400});
        let started = std::time::Instant::now();
        // Its first report comes before its first 60 s sleep: the cancel lands in it.
        let report = cancel_after_first_progress(&runtime, "reindex", arguments).await;
        // It checks for cancellation around the sleep, so the host wakes the sleep and the
        // call returns on its own, within the grace period.
        assert_cancelled_and_cleaned_up(&report, Stopped::ByItself);
        assert!(report.stopped_at - started < Duration::from_secs(10));
    });
    assert!(log.contains("cleanup after reindex (cancelled): rolled back archive"), "{log}");
}

#[test]
fn spin_never_checks_so_a_cancel_hard_stops_it_and_cleanup_runs() {
    let log = common::capture_log(|| async {
        let runtime = example_js().await;
        let report = cancel_after_first_progress(&runtime, "spin", json!({"seconds": 600})).await;
        assert_cancelled_and_cleaned_up(&report, Stopped::Hard);
    });
    assert!(log.contains("cleanup after spin (cancelled): rolled back spin"), "{log}");
}

#[test]
fn spin_past_its_maximum_duration_is_hard_stopped_and_cleaned_up() {
    let log = common::capture_log(|| async {
        let limits = ToolLimits {
            max_duration: Some(Duration::from_millis(500)),
            grace: Duration::from_millis(100),
            ..ToolLimits::default()
        };
        let runtime = example_js_with(limits).await;
        let started = std::time::Instant::now();
        let report = call(&runtime, "spin", json!({"seconds": 600})).await;
        assert!(matches!(report.outcome, Outcome::TimedOut(Timeout::MaxDuration(_))), "{:?}", report.outcome);
        // Trapped while computing: by the grace period's kick or by the maximum duration's
        // epoch backstop, whichever came first.
        assert_eq!(report.stop_path, StopPath::EpochTrap);
        assert!(report.stopped_at - started < Duration::from_secs(5), "{:?}", report.stopped_at - started);
        assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    });
    assert!(log.contains("cleanup after spin (max-duration): rolled back spin"), "{log}");
}

#[test]
fn the_scaffold_tool_reports_progress_and_is_rolled_back_when_cancelled() {
    // `guest-sdk/js/template/src/index.js`, what `cordon new --lang js` writes.
    let log = common::capture_log(|| async {
        let limits = ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() };
        let runtime = load_js("template-js.wasm", limits).await;
        let call = runtime.call("process_batch", &json!({"batch": "first", "items": 3})).await.unwrap();
        let mut progress = call.handle().progress();
        let report = call.run().await;
        assert_eq!(text_of(&report), "Processed 3 items of first");
        let last = progress.borrow_and_update().clone().unwrap();
        assert_eq!((last.done, last.total), (3.0, Some(3.0)));

        let report = cancel_after_first_progress(&runtime, "process_batch", json!({"batch": "second"})).await;
        // It checks for cancellation around each wait.
        assert_cancelled_and_cleaned_up(&report, Stopped::ByItself);
    });
    assert!(log.contains("process_batch stopped (cancelled): rolling back batch second"), "{log}");
}

#[test]
fn the_sdk_ships_the_contract_unchanged() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let contract = std::fs::read_to_string(root.join("wit/cordon.wit")).unwrap();
    let shipped = std::fs::read_to_string(root.join("guest-sdk/js/wit/cordon.wit")).unwrap();
    assert!(shipped == contract, "guest-sdk/js/wit/cordon.wit differs from wit/cordon.wit: copy it again");
}
