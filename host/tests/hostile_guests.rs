//! Hostile guests in the interpreted languages: the same attacks, written in Python
//! (`examples/hostile-python`, CPython through componentize-py) and in JavaScript
//! (`examples/hostile-js`, StarlingMonkey through componentize-js), built by `cargo xtask
//! guests` into `target/guests/`. An interpreter brings its own allocator, stack checks
//! and exception handling between the attack and the host's limits; whichever of them
//! gives way first, each attack must end its own call with a clear outcome, and the next
//! call on the same runtime must be served as if nothing happened.

use crate::common;

use common::call;
use common::guests::{cancel_after_first_progress, load_compiled_once, run_recording_progress, text_of};

use std::time::Duration;

use cordon::runtime::{CallReport, CleanupOutcome, Outcome, Runtime, StopPath, ToolLimits};
use serde_json::json;

/// The two hostile components: their file in `target/guests/` and a name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    Python,
    Js,
}

const LANGUAGES: [Language; 2] = [Language::Python, Language::Js];

impl Language {
    fn component(self) -> &'static str {
        match self {
            Language::Python => "hostile-python.wasm",
            Language::Js => "hostile-js.wasm",
        }
    }
}

async fn hostile(language: Language, limits: ToolLimits) -> Runtime {
    load_compiled_once(language.component(), limits, "hostile-guest-cache").await
}

fn quick() -> ToolLimits {
    ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() }
}

/// After an attack: the runtime holds no call, and serves the next one.
async fn serves_on(runtime: &Runtime, language: Language, after: &CallReport) {
    assert_eq!(runtime.pool_usage().calls, 0, "{language:?}: a slot is still held after {after:?}");
    let report = call(runtime, "echo", json!({"text": "still here"})).await;
    assert_eq!(text_of(&report), "still here", "{language:?} after {after:?}");
}

/// The message of a tool error.
fn error_text(report: &CallReport) -> &str {
    match &report.outcome {
        Outcome::ToolError(message) => message,
        other => panic!("{}: expected a tool error, got {other:?}", report.tool),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_stops_at_the_call_s_memory_limit() {
    for language in LANGUAGES {
        let limits = ToolLimits { memory_bytes: 96 << 20, ..quick() };
        let runtime = hostile(language, limits).await;
        // What fits, fits: the limit is the call's, not a fixed share.
        assert_eq!(text_of(&call(&runtime, "hog", json!({"mb": 8})).await), "held 8 MiB");
        let report = call(&runtime, "hog", json!({"mb": 1024})).await;
        match (language, &report.outcome) {
            // CPython raises MemoryError when its allocator is refused memory.
            (Language::Python, Outcome::ToolError(message)) => {
                assert!(message.starts_with("MemoryError"), "{message}")
            }
            // SpiderMonkey reports its own out-of-memory, which the SDK returns as the error.
            (Language::Js, Outcome::ToolError(message)) => assert_eq!(message, "out of memory"),
            (_, other) => panic!("{language:?}: {other:?}"),
        }
        serves_on(&runtime, language, &report).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_recursion_ends_in_the_interpreter_s_own_error() {
    for language in LANGUAGES {
        let runtime = hostile(language, quick()).await;
        let report = call(&runtime, "recurse", json!({})).await;
        let message = error_text(&report);
        match language {
            Language::Python => assert!(message.starts_with("RecursionError"), "{message}"),
            Language::Js => assert!(message.contains("too much recursion"), "{message}"),
        }
        serves_on(&runtime, language, &report).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursion_inside_the_interpreter_s_native_code_is_contained() {
    for language in LANGUAGES {
        let runtime = hostile(language, quick()).await;
        // Printing 100,000 nested lists recurses in C (CPython's repr, SpiderMonkey's
        // JSON.stringify), not in the guest's own code.
        let report = call(&runtime, "nest", json!({"depth": 100_000})).await;
        match (language, &report.outcome) {
            // CPython's C recursion check does not see WASI's stack run out: wasmtime's
            // stack limit is what stops it, and the call's cleanup is told it trapped.
            (Language::Python, Outcome::Trapped(message)) => {
                assert!(message.contains("call stack exhausted"), "{message}");
                let cleanup = report.cleanup.as_ref().expect("a trapped call is cleaned up");
                assert_eq!(cleanup.outcome, CleanupOutcome::Completed);
            }
            (Language::Js, Outcome::ToolError(message)) => {
                assert!(message.contains("too much recursion"), "{message}")
            }
            (_, other) => panic!("{language:?}: {other:?}"),
        }
        serves_on(&runtime, language, &report).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_result_is_refused_at_the_result_limit() {
    for language in LANGUAGES {
        let limits = ToolLimits { result_bytes: 1 << 20, ..quick() };
        let runtime = hostile(language, limits).await;
        let report = call(&runtime, "shout", json!({"mb": 8})).await;
        match report.outcome {
            Outcome::ResultTooLarge { bytes, limit } => {
                assert!(bytes >= 8 << 20 && limit == 1 << 20, "{language:?}: {bytes} bytes, limit {limit}")
            }
            ref other => panic!("{language:?}: expected the result to be refused, got {other:?}"),
        }
        serves_on(&runtime, language, &report).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_is_coalesced_and_the_call_completes() {
    const COUNT: u32 = 100_000;
    for language in LANGUAGES {
        let runtime = hostile(language, quick()).await;
        let (report, seen) =
            run_recording_progress(&runtime, "flood", json!({"count": COUNT}), f64::from(COUNT)).await;
        assert_eq!(text_of(&report), format!("reported {COUNT} times"), "{language:?}");
        assert!(seen.windows(2).all(|pair| pair[0].0 < pair[1].0), "{language:?}: only increasing values");
        assert_eq!(
            seen.last().map(|last| last.0),
            Some(f64::from(COUNT)),
            "{language:?}: the last one is kept"
        );
        assert!(seen.len() < COUNT as usize, "{language:?}: bursts are coalesced, saw all {}", seen.len());
        serves_on(&runtime, language, &report).await;
    }
}

/// Stop `doomed` (a busy loop that never checks) with `note` as its cleanup's order.
async fn doomed(runtime: &Runtime, note: &str) -> CallReport {
    let report = cancel_after_first_progress(runtime, "doomed", json!({"cleanup": note})).await;
    assert_eq!(report.outcome, Outcome::Cancelled, "{report:?}");
    assert!(report.hard_stopped, "it never checks: {report:?}");
    assert_eq!(report.stop_path, StopPath::EpochTrap, "{report:?}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_crashes_is_reported_failed_and_the_guest_serves_on() {
    for language in LANGUAGES {
        let runtime = hostile(language, quick()).await;
        let crash = match language {
            Language::Python => "abort",
            Language::Js => "throw",
        };
        for note in [crash, "recurse"] {
            let report = doomed(&runtime, note).await;
            match &report.cleanup.as_ref().expect("a cleanup ran").outcome {
                // The SDK logs the exception and raises it on; the component traps.
                CleanupOutcome::Failed(message) => {
                    assert!(message.contains("unreachable"), "{language:?} {note}: {message}")
                }
                other => panic!("{language:?} {note}: expected a failed cleanup, got {other:?}"),
            }
            serves_on(&runtime, language, &report).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_never_ends_is_stopped_at_its_budget() {
    for language in LANGUAGES {
        let runtime = hostile(language, quick()).await;
        let report = doomed(&runtime, "spin").await;
        assert_eq!(report.cleanup.as_ref().expect("a cleanup ran").outcome, CleanupOutcome::TimedOut);
        serves_on(&runtime, language, &report).await;
    }
}
