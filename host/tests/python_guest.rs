//! The Python example tools (`examples/python`, built with componentize-py and the Python
//! SDK by `cargo xtask guests`), called through the runtime: schemas generated from type
//! hints, calls, progress, a Python exception as the error text, and stops of a CPython
//! guest (cooperative, hard, by timeout) with their cleanup.

use crate::common;

use common::call;
use common::guests::{
    Stopped, assert_cancelled_and_cleaned_up, assert_counts_up, cancel_when_locked, locks,
    run_recording_progress, text_of,
};

use std::path::PathBuf;
use std::time::Duration;

use cordon::runtime::{
    CleanupOutcome, ComponentOptions, Content, Outcome, Runtime, RuntimeSettings, StopPath, Timeout,
    ToolLimits,
};
use serde_json::{Value, json};

fn example_python() -> PathBuf {
    common::guests::built_guest("example-python.wasm")
}

/// Compiled components, shared by this file's tests: CPython takes seconds to compile, so
/// the first test compiles it and the others load the result. Kept under `target/` between
/// runs, holding only the current component's entry.
fn cache_dir() -> PathBuf {
    cordon::paths::default_tools_dir().with_file_name("python-guest-test-cache")
}

fn settings() -> RuntimeSettings {
    let mut settings = common::settings(8);
    settings.engine.cache_dir = Some(cache_dir());
    settings
}

async fn load(limits: ToolLimits) -> Runtime {
    static COMPILED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    COMPILED
        .get_or_init(|| async {
            prune_cache(&std::fs::read(example_python()).unwrap());
            load_uncached(ToolLimits::default()).await;
        })
        .await;
    load_uncached(limits).await
}

async fn load_uncached(limits: ToolLimits) -> Runtime {
    let mut runtime = Runtime::new(settings()).unwrap();
    let options = ComponentOptions {
        limits,
        data_dir: Some(common::fresh_dir("python")),
        ..ComponentOptions::default()
    };
    runtime.load_file(&example_python(), options).await.unwrap();
    runtime
}

/// Remove the entries of earlier builds of the component (the cache names entries by the
/// SHA-256 of the component).
fn prune_cache(component: &[u8]) {
    use sha2::Digest;
    let current: String = sha2::Sha256::digest(component).iter().map(|byte| format!("{byte:02x}")).collect();
    let Ok(entries) = std::fs::read_dir(cache_dir()) else { return };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&current) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn quick() -> ToolLimits {
    ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_is_listed_with_schemas_generated_from_its_type_hints() {
    let runtime = load(quick()).await;
    let tools = runtime.snapshot();
    let names: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["echo", "reindex", "locks", "spin", "ratio", "summarize"]);
    let echo = tools.tool("echo").unwrap();
    assert_eq!(echo.description, "Returns the text it is given.");
    assert_eq!(
        echo.input_schema,
        json!({"type": "object", "required": ["text"],
               "properties": {"text": {"type": "string", "description": "The text to return."}}})
    );
    let annotations = echo.annotations.as_ref().unwrap();
    assert_eq!(
        (annotations.read_only, annotations.idempotent, annotations.destructive),
        (Some(true), Some(true), None)
    );
    let reindex = &tools.tool("reindex").unwrap().input_schema;
    assert_eq!(reindex["required"], json!(["collection"]));
    assert_eq!(
        reindex["properties"]["total"],
        json!({"type": "integer", "default": 120, "description": "How many documents to index."})
    );
    assert_eq!(reindex["properties"]["step_ms"]["default"], 100);
    assert!(tools.tool("reindex").unwrap().annotations.is_none());
    // Annotated[float, "..."] describes the parameter.
    assert_eq!(
        tools.tool("spin").unwrap().input_schema["properties"]["seconds"],
        json!({"type": "number", "description": "How long to burn CPU, in seconds."})
    );
    // An Enum parameter with a default, a list, and a dataclass as the output schema.
    let summarize = tools.tool("summarize").unwrap();
    assert_eq!(
        summarize.input_schema["properties"]["unit"],
        json!({"enum": ["none", "seconds", "bytes"], "type": "string", "default": "none", "description": "The unit they are in."})
    );
    assert_eq!(summarize.input_schema["properties"]["values"]["items"], json!({"type": "number"}));
    let output = summarize.output_schema.as_ref().expect("a dataclass return has an output schema");
    assert_eq!(output["required"], json!(["count", "mean", "minimum", "maximum", "unit"]));
    assert_eq!(output["properties"]["mean"]["type"], json!(["number", "null"]));
    // A list is structured output too, of its own schema.
    let locks = tools.tool("locks").unwrap().output_schema.clone();
    assert_eq!(locks, Some(json!({"type": "array", "items": {"type": "string"}})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_its_text_and_arguments_that_break_the_schema_are_refused() {
    let runtime = load(quick()).await;
    assert_eq!(text_of(&call(&runtime, "echo", json!({"text": "héllo, wörld"})).await), "héllo, wörld");
    let error = runtime.call("echo", &json!({"text": 5})).await.err().expect("refused");
    assert!(error.to_string().contains("invalid arguments for tool echo"), "{error}");
    let error =
        runtime.call("summarize", &json!({"values": [1], "unit": "parsecs"})).await.err().expect("refused");
    assert!(error.to_string().contains("/unit"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataclass_result_is_structured_output() {
    let runtime = load(quick()).await;
    let report = call(&runtime, "summarize", json!({"values": [2, 4.5, -1], "unit": "seconds"})).await;
    let Outcome::Completed(result) = &report.outcome else { panic!("{:?}", report.outcome) };
    let expected =
        json!({"count": 3, "mean": 1.8333333333333333, "minimum": -1.0, "maximum": 4.5, "unit": "seconds"});
    assert_eq!(result.structured, Some(expected.clone()));
    let [Content::Text(text)] = result.content.as_slice() else { panic!("{:?}", result.content) };
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_exception_reaches_the_client_as_its_error_text() {
    let runtime = load(quick()).await;
    let report = call(&runtime, "ratio", json!({"numerator": 1, "denominator": 0})).await;
    match &report.outcome {
        Outcome::ToolError(message) => assert!(
            // CPython 3.14 (componentize-py's) says "division by zero" for floats too.
            message.starts_with("ZeroDivisionError: division by zero (app.py, line ")
                && message.ends_with(", in ratio)"),
            "{message}"
        ),
        other => panic!("expected a tool error, got {other:?}"),
    }
    assert!(report.cleanup.is_none(), "an error return that was not asked to stop needs no cleanup");
    assert_eq!(text_of(&call(&runtime, "ratio", json!({"numerator": 1, "denominator": 4})).await), "0.25");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_reports_increasing_progress_and_releases_its_lock() {
    let runtime = load(quick()).await;
    let arguments = json!({"collection": "books", "step_ms": 20});
    let (report, seen) = run_recording_progress(&runtime, "reindex", arguments, 120.0).await;
    assert_eq!(text_of(&report), "Reindexed 120 documents in books");
    assert_counts_up(&seen, 120.0, "Indexed 120 of 120 documents");
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reindex_cancelled_in_its_sleep_returns_at_once_and_its_cleanup_releases_the_lock() {
    let runtime = load(quick()).await;
    let started = std::time::Instant::now();
    let report = cancel_when_locked(
        &runtime,
        "reindex",
        json!({"collection": "archive", "step_ms": 60000}),
        "archive",
    )
    .await;
    // check_cancelled() raised Cancelled after the woken sleep: the guest returned on its
    // own, within the grace period.
    assert_cancelled_and_cleaned_up(&report, Stopped::ByItself);
    assert!(report.stopped_at - started < Duration::from_secs(10));
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_python_guest_is_hard_stopped_on_cancel_and_cleaned_up() {
    let runtime = load(quick()).await;
    assert!(text_of(&call(&runtime, "spin", json!({"seconds": 0.05})).await).starts_with("Spun for"));
    let report = cancel_when_locked(&runtime, "spin", json!({"seconds": 600}), "spin").await;
    // The interpreter's loop trapped at an epoch check.
    assert_cancelled_and_cleaned_up(&report, Stopped::Hard);
    assert_eq!(locks(&runtime).await, Vec::<String>::new(), "the cleanup released the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_python_guest_is_hard_stopped_at_its_maximum_duration_and_cleaned_up() {
    let limits = ToolLimits { max_duration: Some(Duration::from_millis(500)), ..quick() };
    let runtime = load(limits).await;
    let started = std::time::Instant::now();
    let report = call(&runtime, "spin", json!({"seconds": 600})).await;
    assert!(matches!(report.outcome, Outcome::TimedOut(Timeout::MaxDuration(_))), "{:?}", report.outcome);
    // The backstop at the maximum duration (plus grace) trapped it at an epoch check.
    assert_eq!(report.stop_path, StopPath::EpochTrap, "{report:?}");
    assert!(
        report.stopped_at - started < Duration::from_secs(5),
        "stopped after {:?}",
        report.stopped_at - started
    );
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}
