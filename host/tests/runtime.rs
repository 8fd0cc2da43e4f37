//! The runtime's promise, tested on hostile guests written in WAT: every call ends in one
//! outcome, stops when asked whatever the guest does, and is cleaned up after exactly once.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use cordon::runtime::{
    CleanupOutcome, ComponentOptions, Content, Outcome, PoolUsage, Runtime, Timeout, ToolLimits,
};
use serde_json::json;

fn no_args() -> serde_json::Value {
    json!({})
}

async fn run(runtime: &Runtime, tool: &str) -> cordon::runtime::CallReport {
    runtime.call(tool, &no_args()).await.unwrap().run().await
}

/// Start a call, cancel it after `after`, and return its report.
async fn cancel_after(runtime: &Runtime, tool: &str, after: Duration) -> cordon::runtime::CallReport {
    let call = runtime.call(tool, &no_args()).await.unwrap();
    let handle = call.handle();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(after).await;
        handle.cancel();
    });
    let report = call.run().await;
    canceller.await.unwrap();
    report
}

fn baseline() -> PoolUsage {
    PoolUsage {
        calls: 0,
        spares: 0,
        spare_memory_bytes: 0,
        component_instances: 0,
        core_instances: 0,
        memories: 0,
        guest_descriptors: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_with_no_calls_is_stopped_after_grace_and_cleaned_up() {
    let guest = WatGuest::new("spin", SPIN_BODY);
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let started = Instant::now();
    let report = cancel_after(&runtime, "spin", Duration::from_millis(20)).await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert!(report.hard_stopped, "a loop never returns on its own");
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_blocked_in_a_60s_host_sleep_is_stopped_and_its_note_reaches_cleanup() {
    let guest = WatGuest::new("sleepy", SLEEP_BODY).cleanup(CLEANUP_CHECKS_NOTE);
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let started = Instant::now();
    let report = cancel_after(&runtime, "sleepy", Duration::from_millis(20)).await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert!(report.hard_stopped);
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed, "cleanup saw the note");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_the_sleep_of_a_guest_that_checks_so_it_returns_at_once() {
    // Checks, then sleeps 60 s, in a loop: before, it noticed the cancel only when the
    // grace period ended and the hard stop dropped it.
    // It reports progress just before each sleep, so the test knows when it sleeps.
    let body = "(block $out (loop $l (br_if $out (call $cancelled))
                  (call $progress (f64.const 1) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
                  (call $sleep_ms (i64.const 60000)) (br $l)))
                (call $err_text (i32.const 2000) (i32.const 4))";
    let guest = WatGuest::new("napper", body).cleanup("");
    let mut limits = quick_limits();
    limits.grace = Duration::from_secs(10);
    let runtime = runtime_with(&[guest], limits).await;
    let call = runtime.call("napper", &no_args()).await.unwrap();
    let handle = call.handle();
    let mut progress = handle.progress();
    let running = tokio::spawn(call.run());
    progress.changed().await.unwrap();
    let cancelled_at = Instant::now();
    handle.cancel();
    let report = running.await.unwrap();
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert!(!report.hard_stopped, "the guest returned on its own");
    let took = report.stopped_at - cancelled_at;
    assert!(took < Duration::from_secs(1), "it returned {took:?} after the cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooperative_guest_returns_within_grace_without_a_hard_stop() {
    let body = "(block $out (loop $l (br_if $out (call $cancelled)) (call $sleep_ms (i64.const 1)) (br $l)))
                (call $err_text (i32.const 2000) (i32.const 4))";
    let guest = WatGuest::new("polite", body);
    let mut limits = quick_limits();
    limits.grace = Duration::from_secs(5);
    let grace = limits.grace;
    let runtime = runtime_with(&[guest], limits).await;
    let started = Instant::now();
    let report = cancel_after(&runtime, "polite", Duration::from_millis(20)).await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    // Returned on its own within the grace (it polls every millisecond), not at its end.
    assert!(!report.hard_stopped);
    assert!(started.elapsed() < grace, "took {:?}", started.elapsed());
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_growth_is_refused_at_the_limit_and_reported_as_out_of_memory() {
    let body = "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable";
    let guest =
        WatGuest::new("hog", body).cleanup("(if (i32.ne (local.get 6) (i32.const 4)) (then unreachable))");
    let mut limits = quick_limits();
    limits.memory_bytes = 8 << 20;
    let runtime = runtime_with(&[guest], limits).await;
    let report = run(&runtime, "hog").await;
    assert_eq!(report.outcome, Outcome::OutOfMemory);
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed, "cleanup was told out-of-memory");
    assert_eq!(run(&runtime, "hog").await.outcome, Outcome::OutOfMemory, "the runtime keeps serving");
}

/// A `memory_mb` above the pool's size for one memory (`server.max_memory_mb`) is a load
/// error naming both. Before, it loaded: growth the limiter granted failed in the pool, so
/// the guest's trap was told as a crash, not out of memory, and the failed growth stayed
/// charged to the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_above_the_pools_memory_size_is_a_load_error() {
    let mut settings = common::settings(4);
    settings.engine.max_memory_bytes = 16 << 20;
    let mut runtime = Runtime::new(settings).unwrap();
    let guest = WatGuest::new("hog", DONE_BODY);
    let mut limits = quick_limits();
    limits.memory_bytes = 64 << 20;
    let options = ComponentOptions { limits: limits.clone(), ..ComponentOptions::default() };
    let refused = runtime.load_bytes("hog", &guest.component(), options).await.unwrap_err().to_string();
    assert!(
        refused.contains("memory_mb = 64 for component hog is more than server.max_memory_mb = 16"),
        "{refused}"
    );
    let mut tool_limits = limits.clone();
    limits.memory_bytes = 16 << 20;
    tool_limits.memory_bytes = 32 << 20;
    let options = ComponentOptions {
        limits,
        tool_limits: [("hog".to_owned(), tool_limits)].into(),
        ..ComponentOptions::default()
    };
    let refused = runtime.load_bytes("hog", &guest.component(), options).await.unwrap_err().to_string();
    assert!(refused.contains("memory_mb = 32 for tool \"hog\" of component hog"), "{refused}");
}

/// An instance the host cannot make (a store limit its component breaks) is a call that
/// never started: no guest code ran, so no cleanup runs and the client is told so. Before,
/// it was told the tool crashed, and a cleanup ran (and failed the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_the_host_cannot_make_is_a_start_failure_with_no_cleanup() {
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let guest = WatGuest::new("crowded", DONE_BODY);
    let mut one_instance = quick_limits();
    one_instance.instances = 1;
    let options = ComponentOptions {
        limits: quick_limits(),
        tool_limits: [("crowded".to_owned(), one_instance)].into(),
        ..ComponentOptions::default()
    };
    runtime.load_bytes("crowded", &guest.component(), options).await.unwrap();
    let report = run(&runtime, "crowded").await;
    match &report.outcome {
        Outcome::StartFailed(message) => assert!(message.contains("instance"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(report.cleanup.is_none(), "no guest ran: {:?}", report.cleanup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_traps_with_a_stack_overflow() {
    let guest = WatGuest::new("deep", "(call $recurse (i32.const 0))").extra(
        "(func $recurse (param i32) (result i32) (call $recurse (i32.add (local.get 0) (i32.const 1))))",
    );
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let report = run(&runtime, "deep").await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("stack"), "{message}"),
        other => panic!("expected a stack overflow trap, got {other:?}"),
    }
    assert!(report.cleanup.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_growth_is_refused_at_the_limit() {
    let body = "(loop $l (br_if $l (i32.ne (table.grow $t (ref.null func) (i32.const 1000)) (i32.const -1)))) unreachable";
    let guest = WatGuest::new("tables", body);
    let mut limits = quick_limits();
    limits.table_elements = 5_000;
    let runtime = runtime_with(&[guest], limits).await;
    let report = run(&runtime, "tables").await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected the guest to trap once growth was refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_result_is_refused() {
    // 8 MiB of zero bytes (valid UTF-8) as text, against a 1 MiB result limit.
    let body = "(drop (memory.grow (i32.const 256))) (call $ok_text (i32.const 65536) (i32.const 8388608))";
    let guest = WatGuest::new("huge", body);
    let mut limits = quick_limits();
    limits.result_bytes = 1 << 20;
    let runtime = runtime_with(&[guest], limits).await;
    let report = run(&runtime, "huge").await;
    match report.outcome {
        Outcome::ResultTooLarge { bytes, limit } => assert!(bytes > 8 << 20 && limit == 1 << 20),
        other => panic!("expected the result to be refused, got {other:?}"),
    }
    assert!(report.cleanup.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_output_that_would_take_more_host_memory_parsed_than_the_call_may_hold_is_refused() {
    // ok(call-result) with structured = `{"a":[0,0,…,0]}`: 2 MB of text, within the result
    // limit, and about 32 MB once parsed.
    const ZEROS: i32 = 1 << 20;
    let body = format!(
        "(local $p i32)
        (local.set $p (i32.const 60006))
        (block $done (loop $fill
            (br_if $done (i32.ge_u (local.get $p) (i32.const {end})))
            (i32.store16 (local.get $p) (i32.const 0x2c30))
            (local.set $p (i32.add (local.get $p) (i32.const 2)))
            (br $fill)))
        (i32.store8 (local.get $p) (i32.const 48))
        (i32.store8 (i32.add (local.get $p) (i32.const 1)) (i32.const 93))
        (i32.store8 (i32.add (local.get $p) (i32.const 2)) (i32.const 125))
        (drop (call $ok_text (i32.const 2000) (i32.const 4)))
        (i32.store8 (i32.const 3012) (i32.const 1))
        (i32.store (i32.const 3016) (i32.const 60000))
        (i32.store (i32.const 3020) (i32.sub (i32.add (local.get $p) (i32.const 3)) (i32.const 60000)))
        (i32.const 3000)",
        end = 60006 + 2 * (ZEROS - 1)
    );
    let guest =
        WatGuest::new("zeros", &body).extra(r#"(data (i32.const 60000) "{\"a\":[")"#).memory_pages(40);
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let report = run(&runtime, "zeros").await;
    match &report.outcome {
        Outcome::InvalidResult(message) => {
            assert!(message.contains("host memory") && message.contains("may hold 16777216"), "{message}")
        }
        other => panic!("expected the output to be refused, got {other:?}"),
    }
    // With room for it in the call's host memory, the same output is the call's.
    let guest =
        WatGuest::new("zeros", &body).extra(r#"(data (i32.const 60000) "{\"a\":[")"#).memory_pages(40);
    let mut limits = quick_limits();
    limits.host_memory_bytes = 256 << 20;
    let runtime = runtime_with(&[guest], limits).await;
    match run(&runtime, "zeros").await.outcome {
        Outcome::Completed(result) => {
            let structured = result.structured.expect("structured output");
            assert_eq!(structured["a"].as_array().map(Vec::len), Some(ZEROS as usize));
        }
        other => panic!("expected the output, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_tool_error_is_refused_like_a_huge_result() {
    let body = "(drop (memory.grow (i32.const 256))) (call $err_text (i32.const 65536) (i32.const 8388608))";
    let guest = WatGuest::new("huge_error", body);
    let mut limits = quick_limits();
    limits.result_bytes = 1 << 20;
    let runtime = runtime_with(&[guest], limits).await;
    let report = run(&runtime, "huge_error").await;
    assert_eq!(report.outcome, Outcome::ResultTooLarge { bytes: 8 << 20, limit: 1 << 20 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_cancelled_even_if_it_was_refused_memory_before() {
    // The guest shrugs off a refused growth and spins; the cancel is what stops it.
    let body = "(drop (memory.grow (i32.const 1000))) (loop $l (br $l)) unreachable";
    let guest =
        WatGuest::new("shrug", body).cleanup("(if (i32.ne (local.get 6) (i32.const 0)) (then unreachable))");
    let mut limits = quick_limits();
    limits.memory_bytes = 8 << 20;
    let runtime = runtime_with(&[guest], limits).await;
    let report = cancel_after(&runtime, "shrug", Duration::from_millis(20)).await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed, "cleanup was told cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_is_coalesced_and_only_increasing_values_pass() {
    // A million reports: 1, 2, ... 1e6, each followed by a smaller one that must be dropped.
    let body = "(local $i f64)
      (loop $l
        (local.set $i (f64.add (local.get $i) (f64.const 1)))
        (call $progress (local.get $i) (i32.const 1) (f64.const 1000000) (i32.const 0) (i32.const 0) (i32.const 0))
        (call $progress (f64.sub (local.get $i) (f64.const 0.5)) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
        (br_if $l (f64.lt (local.get $i) (f64.const 1000000))))
      (call $ok_text (i32.const 2000) (i32.const 4))";
    let guest = WatGuest::new("flood", body);
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let call = runtime.call("flood", &no_args()).await.unwrap();
    let mut progress = call.handle().progress();
    let watcher = tokio::spawn(async move {
        let (mut seen, mut last) = (0u64, 0.0f64);
        while progress.changed().await.is_ok() {
            let report = progress.borrow_and_update().clone().unwrap();
            assert!(report.done > last, "{} after {last}", report.done);
            assert_eq!(report.total, Some(1_000_000.0));
            last = report.done;
            seen += 1;
            if last == 1_000_000.0 {
                break;
            }
        }
        (seen, last)
    });
    let report = call.run().await;
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
    let (seen, last) = watcher.await.unwrap();
    assert_eq!(last, 1_000_000.0);
    assert!(seen < 1_000_000, "bursts are coalesced: saw {seen} updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_guest_is_reported_with_its_trap_and_cleaned_up_with_the_reason() {
    let guest = WatGuest::new("crash", "unreachable")
        .cleanup("(if (i32.ne (local.get 6) (i32.const 3)) (then unreachable))");
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let report = run(&runtime, "crash").await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed, "cleanup was told `trapped`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_traps_is_reported_once_and_the_runtime_keeps_serving() {
    let guest = WatGuest::new("spin", SPIN_BODY).cleanup("unreachable");
    let runtime = runtime_with(&[guest], quick_limits()).await;
    for _ in 0..3 {
        let report = cancel_after(&runtime, "spin", Duration::from_millis(5)).await;
        assert_eq!(report.outcome, Outcome::Cancelled);
        match report.cleanup.unwrap().outcome {
            CleanupOutcome::Failed(message) => {
                assert!(message.contains("unreachable"), "{message}")
            }
            other => panic!("expected a failed cleanup, got {other:?}"),
        }
    }
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_that_loops_is_stopped_at_its_budget() {
    let guest = WatGuest::new("spin", SPIN_BODY).cleanup("(loop $l (br $l))");
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let report = cancel_after(&runtime, "spin", Duration::from_millis(5)).await;
    let cleanup = report.cleanup.unwrap();
    assert_eq!(cleanup.outcome, CleanupOutcome::TimedOut);
    let budget = quick_limits().cleanup_budget;
    let took = cleanup.started_at.elapsed();
    assert!(took >= budget && took < budget + Duration::from_secs(1), "cleanup took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_stops_a_silent_call_and_progress_keeps_a_busy_one_alive() {
    let silent = WatGuest::new("silent", SLEEP_BODY);
    // Reports progress every 20 ms for 400 ms, then returns.
    let chatty = WatGuest::new(
        "chatty",
        "(local $i f64)
         (loop $l
           (local.set $i (f64.add (local.get $i) (f64.const 1)))
           (call $progress (local.get $i) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
           (call $sleep_ms (i64.const 20))
           (br_if $l (f64.lt (local.get $i) (f64.const 20))))
         (call $ok_text (i32.const 2000) (i32.const 4))",
    );
    // Reports the same value every 20 ms for 400 ms: a heartbeat.
    let heartbeat = WatGuest::new(
        "heartbeat",
        "(local $i f64)
         (loop $l
           (local.set $i (f64.add (local.get $i) (f64.const 1)))
           (call $progress (f64.const 1) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
           (call $sleep_ms (i64.const 20))
           (br_if $l (f64.lt (local.get $i) (f64.const 20))))
         (call $ok_text (i32.const 2000) (i32.const 4))",
    );
    let mut limits = quick_limits();
    limits.idle_timeout = Some(Duration::from_millis(150));
    let runtime = runtime_with(&[silent, chatty, heartbeat], limits).await;
    let report = run(&runtime, "silent").await;
    assert_eq!(report.outcome, Outcome::TimedOut(Timeout::Idle(Duration::from_millis(150))));
    assert!(report.cleanup.is_some());
    let report = run(&runtime, "chatty").await;
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
    let report = run(&runtime, "heartbeat").await;
    assert!(
        matches!(report.outcome, Outcome::Completed(_)),
        "a repeated value keeps it alive: {:?}",
        report.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maximum_duration_stops_a_call_whatever_it_reports() {
    let chatty = WatGuest::new(
        "chatty",
        "(local $i f64)
         (loop $l
           (local.set $i (f64.add (local.get $i) (f64.const 1)))
           (call $progress (local.get $i) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
           (br $l))
         unreachable",
    );
    let mut limits = quick_limits();
    limits.idle_timeout = Some(Duration::from_millis(100));
    limits.max_duration = Some(Duration::from_millis(300));
    let runtime = runtime_with(&[chatty], limits).await;
    let started = Instant::now();
    let report = run(&runtime, "chatty").await;
    assert_eq!(report.outcome, Outcome::TimedOut(Timeout::MaxDuration(Duration::from_millis(300))));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_calls_in_flight_and_refuses_new_ones() {
    let guest = WatGuest::new("spin", SPIN_BODY);
    let runtime = Arc::new(runtime_with(&[guest], quick_limits()).await);
    let mut calls = Vec::new();
    for _ in 0..4 {
        let call = runtime.call("spin", &no_args()).await.unwrap();
        calls.push(tokio::spawn(call.run()));
    }
    // Every call has its instance (so its guest runs) before the shutdown.
    let deadline = Instant::now() + Duration::from_secs(10);
    while runtime.pool_usage().component_instances < 4 + runtime.pool_usage().spares as u64 {
        assert!(Instant::now() < deadline, "the calls never started: {:?}", runtime.pool_usage());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    runtime.shutdown();
    for call in calls {
        let report = call.await.unwrap();
        assert_eq!(report.outcome, Outcome::Shutdown);
        assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    }
    assert!(runtime.idle(Duration::from_secs(1)).await);
    assert!(matches!(runtime.call("spin", &no_args()).await, Err(cordon::runtime::CallError::ShuttingDown)));
}

/// A call still queued for a slot when the runtime shuts down is refused when the slot
/// frees, not run: its guest would only be stopped again, adding its grace and cleanup to
/// the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_at_shutdown_is_refused_when_a_slot_frees() {
    let guest = WatGuest::new("spin", SPIN_BODY);
    let mut runtime = Runtime::new(common::settings(1)).unwrap();
    let options = ComponentOptions { limits: quick_limits(), ..ComponentOptions::default() };
    runtime.load_bytes(&guest.tool, &guest.component(), options).await.unwrap();
    let running = runtime.call("spin", &no_args()).await.unwrap();
    let running = tokio::spawn(running.run());
    let arguments = no_args();
    let mut queued = Box::pin(runtime.call("spin", &arguments));
    assert!(
        tokio::time::timeout(Duration::from_millis(20), &mut queued).await.is_err(),
        "it waits for the slot"
    );
    runtime.shutdown();
    assert_eq!(running.await.unwrap().outcome, Outcome::Shutdown);
    assert!(matches!(queued.await, Err(cordon::runtime::CallError::ShuttingDown)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_completion_ends_each_call_in_exactly_one_outcome() {
    // About a millisecond of work that checks for cancellation, so cancels land before,
    // during and after it.
    let body = "(local $i i32)
      (block $stop
        (loop $l
          (br_if $stop (call $cancelled))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get $i) (i32.const 10000))))
        (return (call $ok_text (i32.const 2000) (i32.const 4))))
      (call $err_text (i32.const 2000) (i32.const 4))";
    let guest = WatGuest::new("quick", body);
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let (mut completed, mut cancelled) = (0, 0);
    for i in 0..1000u64 {
        let call = runtime.call("quick", &no_args()).await.unwrap();
        let handle = call.handle();
        let running = tokio::spawn(call.run());
        if i % 3 != 0 {
            tokio::time::sleep(Duration::from_micros(i * 7 % 1500)).await;
        }
        handle.cancel();
        let report = running.await.unwrap();
        match &report.outcome {
            Outcome::Completed(result) => {
                assert_eq!(result.content, vec![Content::Text("done".into())]);
                assert!(report.cleanup.is_none(), "no cleanup after a completed call");
                completed += 1;
            }
            Outcome::Cancelled => {
                assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
                cancelled += 1;
            }
            other => panic!("unexpected outcome {other:?}"),
        }
        handle.cancel(); // a cancel after the end is harmless
    }
    assert_eq!(completed + cancelled, 1000);
    assert!(cancelled > 0 && completed > 0, "{completed} completed, {cancelled} cancelled: both must happen");
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_calls_with_random_cancels_leave_the_pool_at_baseline() {
    let spin = WatGuest::new("spin", SPIN_BODY);
    let sleepy = WatGuest::new("sleepy", SLEEP_BODY).cleanup(CLEANUP_CHECKS_NOTE);
    let quick = WatGuest::new("quick", DONE_BODY);
    let crash = WatGuest::new("crash", "unreachable");
    let runtime = Arc::new(runtime_with(&[spin, sleepy, quick, crash], quick_limits()).await);
    let tools = ["spin", "sleepy", "quick", "crash"];
    let mut tasks = Vec::new();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..200 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let tool = tools[i % tools.len()];
        let call = runtime.call(tool, &no_args()).await.unwrap();
        let handle = call.handle();
        let delay = Duration::from_millis(seed % 200);
        tasks.push(tokio::spawn(async move {
            let canceller = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                handle.cancel();
            });
            let report = call.run().await;
            canceller.abort();
            (tool, report)
        }));
    }
    for task in tasks {
        let (tool, report) = task.await.unwrap();
        match (tool, &report.outcome) {
            ("spin" | "sleepy", Outcome::Cancelled) => assert!(report.cleanup.is_some()),
            ("quick", Outcome::Completed(_)) => assert!(report.cleanup.is_none()),
            ("quick", Outcome::Cancelled) => assert!(report.cleanup.is_some()),
            ("crash", Outcome::Trapped(_) | Outcome::Cancelled) => {
                assert!(report.cleanup.is_some())
            }
            (tool, outcome) => panic!("{tool}: unexpected outcome {outcome:?}"),
        }
    }
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_refuses_a_call_clearly_after_the_queue_timeout() {
    let guest = WatGuest::new("spin", SPIN_BODY);
    let mut settings = settings(2);
    settings.queue_timeout = Duration::from_millis(50);
    let mut runtime = Runtime::new(settings).unwrap();
    let options =
        cordon::runtime::ComponentOptions { limits: quick_limits(), data_dir: None, ..Default::default() };
    runtime.load_bytes("spin", &guest.component(), options).await.unwrap();
    let first = runtime.call("spin", &no_args()).await.unwrap();
    let second = runtime.call("spin", &no_args()).await.unwrap();
    let error = runtime.call("spin", &no_args()).await.err().expect("a third call is refused");
    assert!(error.to_string().contains("busy"), "{error}");
    drop((first, second));
    assert!(runtime.call("spin", &no_args()).await.is_ok(), "slots come back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_and_non_object_arguments_are_refused_before_any_instance() {
    let runtime = runtime_with(&[WatGuest::new("quick", DONE_BODY)], quick_limits()).await;
    assert!(matches!(
        runtime.call("nope", &no_args()).await,
        Err(cordon::runtime::CallError::UnknownTool(_))
    ));
    assert!(matches!(
        runtime.call("quick", &json!([1])).await,
        Err(cordon::runtime::CallError::ArgumentsNotObject)
    ));
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_are_checked_against_a_costly_schema_too() {
    // `anyOf` over `$ref`s, 8 levels: a check that is not sure to be cheap (runtime/schema.rs
    // runs it on a thread of its own, within a budget).
    let mut defs = serde_json::Map::new();
    for level in 0..8 {
        let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
        defs.insert(format!("d{level}"), json!({"anyOf": [next, next]}));
    }
    defs.insert("d8".into(), json!({"type": "string"}));
    let schema = json!({"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}});
    let guest = WatGuest::new("costly", DONE_BODY).input_schema(&schema.to_string());
    let runtime = runtime_with(&[guest], quick_limits()).await;
    match runtime.call("costly", &json!({"a": 1})).await {
        Err(cordon::runtime::CallError::InvalidArguments { problems, .. }) => {
            assert!(problems.starts_with("/a: "), "{problems}")
        }
        other => panic!("expected invalid arguments, got {:?}", other.map(|_| ())),
    }
    let report = runtime.call("costly", &json!({"a": "fine"})).await.unwrap().run().await;
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_messages_are_capped_and_non_finite_values_dropped() {
    // done = NaN (dropped), then done = 1 with a 100 KB message (cut to 1 KiB), then a
    // non-finite total (dropped), then wait so the watcher sees the kept report.
    let body = "(drop (memory.grow (i32.const 2)))
      (call $progress (f64.const nan) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
      (call $progress (f64.const 1) (i32.const 0) (f64.const 0) (i32.const 1) (i32.const 65536) (i32.const 100000))
      (call $progress (f64.const 2) (i32.const 1) (f64.const inf) (i32.const 0) (i32.const 0) (i32.const 0))
      (call $sleep_ms (i64.const 100))
      (call $ok_text (i32.const 2000) (i32.const 4))";
    let runtime = runtime_with(&[WatGuest::new("loud", body)], quick_limits()).await;
    let call = runtime.call("loud", &no_args()).await.unwrap();
    let progress = call.handle().progress();
    let report = call.run().await;
    assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
    // What is kept holds the cut message only, not the guest's whole allocation.
    let kept = progress.borrow().as_ref().and_then(|report| report.message.as_ref()).map(String::capacity);
    assert!(kept.is_some_and(|bytes| bytes <= cordon::runtime::MAX_PROGRESS_MESSAGE), "{kept:?}");
    let latest = progress.borrow().clone().expect("one report kept");
    assert_eq!(latest.done, 1.0);
    assert_eq!(latest.message.unwrap().len(), cordon::runtime::MAX_PROGRESS_MESSAGE);
}

/// Fails unless this instance is fresh: a global and a memory cell it sets are still at
/// their initial values. With arguments other than `{}` it spins instead.
const FRESH_OR_SPIN_BODY: &str = "
    (if (i32.gt_u (local.get 3) (i32.const 2)) (then (loop $l (br $l))))
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (result i32) (i32.or (i32.ne (global.get $calls) (i32.const 1)) (i32.load (i32.const 4000)))
      (then (call $err_text (i32.const 2010) (i32.const 4)))
      (else (i32.store (i32.const 4000) (i32.const 1)) (call $ok_text (i32.const 2000) (i32.const 4))))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_leaves_a_fresh_spare_that_the_next_call_takes() {
    let guest = WatGuest::new("fresh", FRESH_OR_SPIN_BODY).extra("(global $calls (mut i32) (i32.const 0))");
    let runtime = runtime_with(&[guest], quick_limits()).await;
    for round in 0..5 {
        let call = runtime.call("fresh", &no_args()).await.unwrap();
        let (report, teardown) = call.run_deferring_teardown().await;
        let Outcome::Completed(result) = &report.outcome else {
            panic!("round {round}: {:?}", report.outcome)
        };
        assert!(!result.is_error, "round {round}: the instance was not fresh");
        // From the second round on, the call took the spare the previous one left.
        assert_eq!(runtime.pool_usage().spares, 0, "round {round}");
        assert_eq!(runtime.pool_usage().calls, 1, "round {round}: the slot is held until the teardown");
        teardown.finish().await;
        assert_eq!(runtime.pool_usage().spares, 1, "round {round}: a spare is made after the answer");
        assert_eq!(runtime.pool_usage().calls, 0, "round {round}");
    }
    // A plain `run` (no `finish`) makes no spare, and takes the one there is.
    assert!(matches!(run(&runtime, "fresh").await.outcome, Outcome::Completed(_)));
    assert_eq!(runtime.pool_usage(), baseline());
    let (_, teardown) = runtime.call("fresh", &no_args()).await.unwrap().run_deferring_teardown().await;
    teardown.finish().await;
    assert_eq!(runtime.pool_usage().spares, 1);
    runtime.shutdown();
    assert_eq!(runtime.pool_usage(), baseline(), "shutdown drops the spares");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_spare_instance_is_stopped_like_any_other() {
    let guest = WatGuest::new("fresh", FRESH_OR_SPIN_BODY).extra("(global $calls (mut i32) (i32.const 0))");
    let runtime = runtime_with(&[guest], quick_limits()).await;
    let (_, teardown) = runtime.call("fresh", &no_args()).await.unwrap().run_deferring_teardown().await;
    teardown.finish().await;
    assert_eq!(runtime.pool_usage().spares, 1);

    let call = runtime.call("fresh", &json!({"spin": true})).await.unwrap();
    let handle = call.handle();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        handle.cancel();
    });
    let started = Instant::now();
    let (report, teardown) = call.run_deferring_teardown().await;
    canceller.await.unwrap();
    assert_eq!(runtime.pool_usage().spares, 0, "the spinning call ran on the spare");
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert!(report.hard_stopped, "the epoch callback was re-armed for this call");
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    teardown.finish().await;
    assert_eq!(runtime.pool_usage().spares, 0, "a stopped call leaves no spare");
    assert_eq!(runtime.pool_usage(), baseline());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_resources_created_in_a_loop_are_capped_and_the_call_traps() {
    // 1,000 pollables, never dropped: they live in host memory, outside the guest's memory
    // limit. The tool may hold 500 (the default is 10,000; wasmtime's own, a million).
    let body = "(local.set 0 (i32.const 0))
        (loop $l
          (drop (call $subscribe (i64.const 1000000000)))
          (local.set 0 (i32.add (local.get 0) (i32.const 1)))
          (br_if $l (i32.lt_u (local.get 0) (i32.const 1000))))
        (call $ok_text (i32.const 2000) (i32.const 4))";
    let limits = ToolLimits { host_resources: 500, ..quick_limits() };
    let runtime = runtime_with(&[WatGuest::new("hoarder", body)], limits).await;
    let report = run(&runtime, "hoarder").await;
    let Outcome::Trapped(message) = &report.outcome else { panic!("{:?}", report.outcome) };
    assert_eq!(message, "it holds 500 host resources (streams, pollables, files) at once, the limit");
    assert_eq!(ToolLimits::default().host_resources, 10_000);
    assert_eq!(report.cleanup.unwrap().outcome, CleanupOutcome::Completed);
    assert_eq!(runtime.pool_usage(), baseline());
}

#[test]
fn guest_stderr_reaches_the_operator_log_line_by_line_tagged_and_capped() {
    let log = capture_log(|| async {
        let chatty = WatGuest::new(
            "chatty",
            "(call $eprint (i32.const 5000) (i32.const 11)) (call $ok_text (i32.const 2000) (i32.const 4))",
        )
        .extra(r#"(data (i32.const 5000) "hello\nworld")"#);
        // 100 writes of 4 KiB, each on a stream of its own: 400 KiB against a 64 KiB cap.
        let flood = WatGuest::new(
            "flood",
            "(local.set 0 (i32.const 0))
             (loop $l
               (call $eprint (i32.const 8192) (i32.const 4096))
               (local.set 0 (i32.add (local.get 0) (i32.const 1)))
               (br_if $l (i32.lt_u (local.get 0) (i32.const 100))))
             (call $ok_text (i32.const 2000) (i32.const 4))",
        )
        .extra(r#"(data (i32.const 8192) "flood")"#);
        let runtime = runtime_with(&[chatty, flood], quick_limits()).await;
        assert!(matches!(run(&runtime, "chatty").await.outcome, Outcome::Completed(_)));
        assert!(matches!(run(&runtime, "flood").await.outcome, Outcome::Completed(_)));
    });
    let lines = |component: &str| -> Vec<&str> {
        log.lines().filter(|line| line.contains(&format!("component=\"{component}\""))).collect()
    };
    let chatty = lines("chatty");
    assert!(chatty.iter().any(|line| line.contains("stderr: hello")), "{log}");
    assert!(
        chatty.iter().any(|line| line.contains("stderr: world")),
        "a last line without a newline too: {log}"
    );
    let flood = lines("flood");
    let logged = flood.iter().filter(|line| line.contains("stderr: flood")).count();
    assert_eq!(logged, 16, "64 KiB of 4 KiB lines, then nothing: {log}");
    assert!(flood.iter().any(|line| line.contains("more output dropped")), "{log}");
}

#[test]
fn the_log_import_shares_the_stderr_budget_and_cannot_forge_lines() {
    let log = capture_log(|| async {
        // One forged line, then 100 warnings of 4 KiB against the 64 KiB budget.
        let logger = WatGuest::new(
            "logger",
            "(call $log (i32.const 3) (i32.const 5000) (i32.const 23))
             (local.set 0 (i32.const 0))
             (loop $l
               (call $log (i32.const 3) (i32.const 8192) (i32.const 4096))
               (local.set 0 (i32.add (local.get 0) (i32.const 1)))
               (br_if $l (i32.lt_u (local.get 0) (i32.const 100))))
             (call $eprint (i32.const 5100) (i32.const 5))
             (call $ok_text (i32.const 2000) (i32.const 4))",
        )
        .extra(
            r#"(data (i32.const 5000) "real\nFAKE server line\r\1b") (data (i32.const 5100) "after")
               (data (i32.const 8192) "loud")"#,
        );
        let runtime = runtime_with(&[logger], quick_limits()).await;
        assert!(matches!(run(&runtime, "logger").await.outcome, Outcome::Completed(_)));
    });
    assert!(!log.lines().any(|line| line.starts_with("FAKE")), "a guest's newline started a line: {log}");
    assert!(log.contains(r"real\nFAKE server line\r\u{1b}"), "control characters are escaped: {log}");
    let loud = log.lines().filter(|line| line.contains("loud")).count();
    assert_eq!(loud, 16, "64 KiB less the first line: 15 lines of 4 KiB and a part of one: {log}");
    assert!(log.contains("more output dropped"), "{log}");
    assert!(!log.contains("stderr: after"), "stderr draws on the same budget: {log}");
}

#[test]
fn each_log_line_costs_the_budget_what_it_writes_not_only_its_text() {
    // 8,000 lines of a byte, half log events and half stderr lines: the 64 KiB budget
    // pays for at most 512 events (128 bytes each besides their text), not all of them.
    let log = capture_log(|| async {
        let tiny = WatGuest::new(
            "tiny",
            "(local.set 0 (i32.const 0))
             (loop $l
               (call $log (i32.const 2) (i32.const 5000) (i32.const 1))
               (call $eprint (i32.const 5100) (i32.const 2))
               (local.set 0 (i32.add (local.get 0) (i32.const 1)))
               (br_if $l (i32.lt_u (local.get 0) (i32.const 4000))))
             (call $ok_text (i32.const 2000) (i32.const 4))",
        )
        .extra(r#"(data (i32.const 5000) "x") (data (i32.const 5100) "y\n")"#);
        let runtime = runtime_with(&[tiny], quick_limits()).await;
        let outcome = run(&runtime, "tiny").await.outcome;
        assert!(matches!(outcome, Outcome::Completed(_)), "{:.300}", format!("{outcome:?}"));
    });
    let events = log.lines().filter(|line| line.contains("component=\"tiny\"")).count();
    assert!((400..=513).contains(&events), "{events} events logged");
    assert!(log.contains("more output dropped"), "{log}");
}

#[tokio::test]
async fn a_request_for_64_mib_of_random_bytes_is_refused_in_the_host() {
    let greedy = WatGuest::new(
        "greedy",
        "(call $random_bytes (i64.const 67108864) (i32.const 4000)) (call $ok_text (i32.const 2000) (i32.const 4))",
    );
    let runtime = runtime_with(&[greedy], quick_limits()).await;
    match run(&runtime, "greedy").await.outcome {
        Outcome::Trapped(message) => assert!(message.contains("exceeds limit 1048576"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[test]
fn a_component_whose_calls_grow_memory_gets_one_hint_in_the_log() {
    let log = capture_log(|| async {
        let grower = WatGuest::new(
            "grower",
            "(drop (memory.grow (i32.const 1))) (call $ok_text (i32.const 2000) (i32.const 4))",
        );
        let steady = WatGuest::new("steady", DONE_BODY);
        let runtime = runtime_with(&[grower, steady], quick_limits()).await;
        for _ in 0..3 {
            assert!(matches!(run(&runtime, "grower").await.outcome, Outcome::Completed(_)));
            assert!(matches!(run(&runtime, "steady").await.outcome, Outcome::Completed(_)));
        }
    });
    let hints: Vec<&str> = log.lines().filter(|line| line.contains("grew the component's memory")).collect();
    assert_eq!(hints.len(), 1, "{log}");
    assert!(hints[0].contains("component=grower"), "{log}");
}

/// The cleanups of calls stopped between rounds (which hold no call slot) take places of
/// half the cleanup capacity in their tenants' turns, each tenant at most half of them:
/// one tenant's many slow cleanups leave another tenant's a place at once. Before, they
/// took places first come, first served, and the other tenant's cleanup waited behind
/// all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_cleanups_between_rounds_leave_another_tenant_a_place() {
    use cordon::runtime::{CallTags, InputRound, TenantView};
    // Eight call slots: as many places for cleanups, four of them for those between rounds.
    let mut settings = settings(8);
    settings.tenants = 2;
    let mut runtime = Runtime::new(settings).unwrap();
    let data = scratch("unslotted-cleanups");
    std::fs::create_dir_all(&data).unwrap();
    let options = ComponentOptions {
        limits: ToolLimits { cleanup_budget: Duration::from_secs(10), ..ToolLimits::default() },
        data_dir: Some(data.clone()),
        tenants: vec!["flood".into(), "calm".into()],
        ..ComponentOptions::default()
    };
    runtime.load_file(&hostile(), options).await.unwrap();
    let runtime = Arc::new(runtime);
    let stopped = |tenant: &str, note: &str| {
        let view = TenantView::new(tenant, ["hostile".to_owned()], None);
        let call = runtime
            .call_to_clean_up(
                &runtime.snapshot(),
                Some(&view),
                "ask_then_spin",
                &json!({}),
                CallTags::default(),
            )
            .expect("the tool is in the tenant's view");
        let round = InputRound { cleanup_note: Some(note.as_bytes().to_vec()), ..InputRound::default() };
        call.with_input(round).stop_unstarted(Outcome::Cancelled)
    };
    let mut floods = tokio::task::JoinSet::new();
    for _ in 0..8 {
        floods.spawn(stopped("flood", "sleep 3000"));
    }
    // The flood's cleanups run (each writes its reason, then sleeps).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !data.join("flood/cleanup-reason").exists() {
        assert!(Instant::now() < deadline, "the flood's cleanups never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let (report, _teardown) = tokio::time::timeout(Duration::from_millis(2500), stopped("calm", "quick"))
        .await
        .expect("the calm tenant's cleanup waited behind the flood's");
    assert_eq!(report.cleanup.expect("it was cleaned up").outcome, CleanupOutcome::Completed);
    eprintln!("the calm tenant's cleanup, beside the flood's eight: {:?}", started.elapsed());
    floods.abort_all();
}
