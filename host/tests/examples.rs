//! The example tools (`examples/tools`, built with the guest SDK by `cargo xtask guests`),
//! called through the runtime: their outputs, their schemas, and their locks after stops.

use crate::common;

use common::call;
use common::guests::{
    Stopped, assert_cancelled_and_cleaned_up, assert_counts_up, cancel_when_locked, locks,
    run_recording_progress, text_of,
};

use std::path::PathBuf;
use std::time::Duration;

use cordon::runtime::{CleanupOutcome, ComponentOptions, HttpGrants, Outcome, Runtime, ToolLimits};
use serde_json::{Value, json};

fn example_tools() -> PathBuf {
    let path = cordon::paths::example_tools();
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

async fn examples() -> Runtime {
    examples_granted(HttpGrants::default()).await
}

async fn examples_granted(allow_http: HttpGrants) -> Runtime {
    let mut runtime = Runtime::new(common::settings(32)).unwrap();
    let limits = ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() };
    let options = ComponentOptions {
        limits,
        data_dir: Some(common::fresh_dir("examples")),
        allow_http,
        ..ComponentOptions::default()
    };
    runtime.load_file(&example_tools(), options).await.unwrap();
    runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_lists_every_tool_with_an_object_schema_generated_from_its_rust_type() {
    let runtime = examples().await;
    let tools = runtime.snapshot();
    let names: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["echo", "reindex", "locks", "spin", "order_book", "fetch", "delete_collection"]);
    for tool in tools.tools() {
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        assert!(!tool.description.is_empty());
    }
    let reindex = &tools.tool("reindex").unwrap().input_schema;
    assert_eq!(reindex["required"], json!(["collection"]));
    assert_eq!(reindex["properties"]["collection"]["type"], "string");
    assert_eq!(reindex["properties"]["total"]["default"], 120);
    assert_eq!(reindex["properties"]["step_ms"]["default"], 100);
    assert_eq!(tools.tool("spin").unwrap().input_schema["properties"]["seconds"]["type"], "number");
    assert_eq!(tools.tool("echo").unwrap().annotations.as_ref().unwrap().read_only, Some(true));
    let fetch = tools.tool("fetch").unwrap();
    assert_eq!(fetch.input_schema["required"], json!(["url"]));
    assert_eq!(fetch.input_schema["properties"]["max_bytes"]["default"], 65536);
    assert_eq!(fetch.annotations.as_ref().unwrap().open_world, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_without_a_grant_is_a_tool_error_saying_denied() {
    let runtime = examples().await; // grants no allow_http
    let report = call(&runtime, "fetch", json!({"url": "http://127.0.0.1:9/"})).await;
    match report.outcome {
        Outcome::ToolError(message) => {
            assert!(message.contains("denied") && message.contains("http://127.0.0.1:9"), "{message}")
        }
        other => panic!("expected a tool error, got {other:?}"),
    }
    assert!(report.cleanup.is_none(), "a plain error return needs no cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_returns_its_text() {
    let runtime = examples().await;
    assert_eq!(text_of(&call(&runtime, "echo", json!({"text": "héllo, wörld"})).await), "héllo, wörld");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_break_the_generated_schema_are_refused_before_an_instance_starts() {
    let runtime = examples().await;
    let error = runtime.call("echo", &json!({"text": 5})).await.err().expect("refused");
    let message = error.to_string();
    assert!(message.contains("invalid arguments for tool echo") && message.contains("/text"), "{message}");
    let error = runtime.call("reindex", &json!({"total": 3})).await.err().expect("refused");
    assert!(error.to_string().contains("collection"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_reports_increasing_progress_and_releases_its_lock() {
    let runtime = examples().await;
    let arguments = json!({"collection": "books", "step_ms": 30});
    let (report, seen) = run_recording_progress(&runtime, "reindex", arguments, 120.0).await;
    assert_eq!(text_of(&report), "Reindexed 120 documents in books");
    assert_counts_up(&seen, 120.0, "Indexed 120 of 120 documents");
    assert!(
        seen.iter()
            .any(|(done, _, message)| *done == 40.0
                && message.as_deref() == Some("Indexed 40 of 120 documents"))
    );
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_a_running_reindex_and_a_second_reindex_of_it_is_refused() {
    let runtime = examples().await;
    let running = runtime.call("reindex", &json!({"collection": "books", "step_ms": 200})).await.unwrap();
    let handle = running.handle();
    let running = tokio::spawn(running.run());
    // Waited for, not assumed after 100 ms: an instance may be slow to start on a busy machine.
    let started = std::time::Instant::now();
    while locks(&runtime).await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "the reindex never took its lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(locks(&runtime).await, ["books"]);
    let second = call(&runtime, "reindex", json!({"collection": "books"})).await;
    match second.outcome {
        Outcome::ToolError(message) => assert!(message.contains("locked"), "{message}"),
        other => panic!("expected a lock error, got {other:?}"),
    }
    handle.cancel();
    assert_eq!(running.await.unwrap().outcome, Outcome::Cancelled);
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_a_tool_does_not_name_cost_it_no_memory() {
    // 4 MB of tiny arrays: as a JSON tree in the guest that would be far over its 64 MiB.
    let padding: Vec<Value> = (0..1_000_000).map(|_| json!([0])).collect();
    let report = call(&examples().await, "echo", json!({"text": "x", "padding": padding})).await;
    assert_eq!(text_of(&report), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_is_exact_while_other_calls_take_and_release_locks() {
    // Names with bytes that the lock files escape come back as they were given.
    const NAMES: [&str; 3] = ["plain", "with space/and:slash", "ünïcödé.lock"];
    let runtime = std::sync::Arc::new(examples().await);
    let churn: Vec<_> = NAMES
        .iter()
        .map(|name| {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                for _ in 0..150 {
                    let report = call(&runtime, "reindex", json!({"collection": name, "step_ms": 0})).await;
                    assert_eq!(text_of(&report), format!("Reindexed 120 documents in {name}"));
                }
            })
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    while !churn.iter().all(|task| task.is_finished()) {
        let report = call(&runtime, "locks", json!({})).await;
        let held: Vec<String> = serde_json::from_str(&text_of(&report)).unwrap();
        assert!(held.iter().all(|lock| NAMES.contains(&lock.as_str())), "{held:?}");
        seen.extend(held);
    }
    for task in churn {
        task.await.unwrap();
    }
    assert!(!seen.is_empty(), "locks saw none of the calls");
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_cannot_keep_its_call_from_being_stopped() {
    use cordon::dispatch::{Connection, Outbox, Server};
    use cordon::protocol::jsonrpc;
    let runtime = std::sync::Arc::new(examples().await);
    let server = Server::new(runtime.clone(), Duration::from_millis(1));
    let connection = Connection::new(server.clone());
    // Room for one message, and nobody reads: the second progress notification waits.
    let (outbox, unread) = Outbox::channel(&server, 1);
    let mut meta = common::wire::meta();
    meta["progressToken"] = json!("t");
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "reindex",
        "arguments": {"collection": "stalled", "total": 1_000_000, "step_ms": 1}, "_meta": meta}});
    connection.handle(jsonrpc::classify(request), &outbox).await;
    let started = std::time::Instant::now();
    while !locks(&runtime).await.iter().any(|held| held == "stalled") {
        assert!(started.elapsed() < Duration::from_secs(5), "the call never took its lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The outbox is full: the call's next message waits for a reader that never comes.
    let started = std::time::Instant::now();
    while unread.len() < unread.max_capacity() {
        assert!(started.elapsed() < Duration::from_secs(5), "the call never filled its outbox");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    connection.cancel_request(&jsonrpc::RequestId::parse(&json!(1)).unwrap());
    // The call is stopped and cleaned up while its notification still waits to be read.
    let started = std::time::Instant::now();
    while !locks(&runtime).await.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(5), "the stalled call was never stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(unread);
    assert!(server.drain(Duration::from_secs(5)).await, "the call's task ends once its client is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reindex_stopped_inside_a_long_sleep_wakes_returns_at_once_and_is_cleaned_up() {
    let runtime = examples().await;
    let arguments = json!({"collection": "archive", "step_ms": 60000});
    let started = std::time::Instant::now();
    let report = cancel_when_locked(&runtime, "reindex", arguments, "archive").await;
    // `reindex` checks for cancellation between steps, so the cancel ends its 60 s sleep
    // and it returns on its own, long before the grace period (100 ms here) would end.
    assert_cancelled_and_cleaned_up(&report, Stopped::ByItself);
    assert!(report.stopped_at - started < Duration::from_secs(5));
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_cancelled_while_it_waits_for_the_response_returns_at_once_and_closes_its_connection() {
    use std::io::Read;
    // A server that takes the request and never answers; it reports when the client hangs up.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted, on_accept) = std::sync::mpsc::channel();
    let (closed, on_close) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        accepted.send(()).unwrap();
        let mut buffer = [0; 4096];
        while socket.read(&mut buffer).is_ok_and(|n| n > 0) {}
        closed.send(std::time::Instant::now()).unwrap();
    });
    let runtime = examples_granted(HttpGrants::parse(&[format!("http://127.0.0.1:{port}")]).unwrap()).await;
    let call =
        runtime.call("fetch", &json!({"url": format!("http://127.0.0.1:{port}/never")})).await.unwrap();
    let handle = call.handle();
    let running = tokio::spawn(call.run());
    tokio::task::spawn_blocking(move || on_accept.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the request reached the server");
    tokio::time::sleep(Duration::from_millis(50)).await; // the guest is parked on the response
    handle.cancel();
    let report = running.await.unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled);
    // cordon_guest::http blocks on the response's pollable between two cancelled() checks,
    // so the cancel wakes it and it returns on its own, within the grace period (100 ms).
    assert!(!report.hard_stopped, "the wait on the response was not woken");
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    let closed_at = tokio::task::spawn_blocking(move || on_close.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the connection was closed");
    assert!(closed_at.saturating_duration_since(report.stopped_at) < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_completes_when_short_and_is_hard_stopped_when_cancelled() {
    let runtime = examples().await;
    assert!(text_of(&call(&runtime, "spin", json!({"seconds": 0.05})).await).starts_with("Spun for"));
    match call(&runtime, "spin", json!({"seconds": 1e20})).await.outcome {
        Outcome::ToolError(message) => assert!(message.contains("too long"), "{message}"),
        other => panic!("a duration beyond any clock is a tool error, not a crash: {other:?}"),
    }
    let report = cancel_when_locked(&runtime, "spin", json!({"seconds": 600}), "spin").await;
    assert_cancelled_and_cleaned_up(&report, Stopped::Hard);
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_order_releases_its_hold() {
    let runtime = examples().await;
    let report = cancel_when_locked(&runtime, "order_book", json!({"title": "Dune"}), "hold:Dune").await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    assert_eq!(locks(&runtime).await, Vec::<String>::new());
}

#[test]
fn the_example_tools_never_grow_their_memory_in_a_call() {
    // They link with 2 MiB of initial memory (cordon-guest's build.rs); without it every
    // call would grow it, and the runtime would log a hint.
    let log = common::capture_log(|| async {
        let runtime = examples().await;
        for text in ["a", "some longer text to echo back"] {
            let report = runtime.call("echo", &json!({"text": text})).await.unwrap().run().await;
            assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
        }
    });
    assert!(!log.contains("grew the component's memory"), "{log}");
}
