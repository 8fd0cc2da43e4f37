//! A component listed again after a call says `lists-changed` (runtime/relist.rs), with real
//! guests: the conformance fixture's `test_trigger_tool_change` adds and removes a tool;
//! the hostile component's `relist` names any extra tool (one that clashes with another
//! component's, or a listing that panics) and says `lists-changed` thousands of times.
//! What clients hear of a change is the reload's path (tests/reload.rs) and the
//! conformance suite's `server-stateless` scenario.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon::runtime::{ComponentOptions, RELIST_INTERVAL, Runtime, ToolSet};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// The fixture and the hostile component, each with a data directory of its own, and the
/// loop that lists components again.
async fn runtime(what: &str) -> Arc<Runtime> {
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    let tools = cordon::paths::default_tools_dir();
    for file in ["conformance-fixture.wasm", "hostile.wasm"] {
        let options = ComponentOptions {
            limits: common::quick_limits(),
            data_dir: Some(common::fresh_dir(&format!("relist-{what}"))),
            ..ComponentOptions::default()
        };
        runtime.load_file(&tools.join(file), options).await.unwrap();
    }
    let runtime = Arc::new(runtime);
    tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.relist_when_asked().await }
    });
    runtime
}

fn lists(set: &ToolSet, tool: &str) -> bool {
    set.tool(tool).is_some()
}

/// Wait for the next set swapped in.
async fn next_set(runtime: &Runtime, generation: u64) -> Arc<ToolSet> {
    let mut sets = runtime.watch_tools();
    tokio::time::timeout(WAIT, sets.wait_for(|set| set.generation() > generation))
        .await
        .expect("no new tool set")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_tool_that_changes_the_list_is_listed_again() {
    let runtime = runtime("trigger").await;
    let before = runtime.snapshot();
    assert!(!lists(&before, "test_dynamic_tool"));

    let report = common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    assert_eq!(common::answer(&report), "test_dynamic_tool added");
    let added = next_set(&runtime, before.generation()).await;
    assert!(lists(&added, "test_dynamic_tool"));
    assert_eq!(added.generation(), before.generation() + 1);
    // The new tool is served, and everything else still is.
    let report = common::call(&runtime, "test_dynamic_tool", json!({})).await;
    assert_eq!(common::answer(&report), "This tool comes and goes with test_trigger_tool_change.");
    let report = common::call(&runtime, "test_simple_text", json!({})).await;
    assert_eq!(common::answer(&report), "This is a simple text response for testing.");

    let report = common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    assert_eq!(common::answer(&report), "test_dynamic_tool removed");
    let removed = next_set(&runtime, added.generation()).await;
    assert!(!lists(&removed, "test_dynamic_tool"));
    assert!(runtime.call("test_dynamic_tool", &json!({})).await.is_err(), "a removed tool is unknown");
}

#[tokio::test]
async fn a_listing_that_finds_nothing_new_swaps_nothing() {
    let runtime = runtime("unchanged").await;
    let before = runtime.snapshot();
    common::call(&runtime, "relist", json!({"extra": "", "times": 1})).await;
    common::call(&runtime, "relist", json!({"extra": "extra_a", "times": 1})).await;
    // Listings run in the order asked: the first, which found the same list, swapped
    // nothing, so the second's set is the very next one.
    let after = next_set(&runtime, before.generation()).await;
    assert!(lists(&after, "extra_a"));
    assert_eq!(after.generation(), before.generation() + 1);
}

#[tokio::test]
async fn requests_are_coalesced_and_listings_spaced() {
    let runtime = runtime("flood").await;
    let before = runtime.snapshot();
    let started = Instant::now();
    let calls = 10;
    for call in 0..calls {
        let report =
            common::call(&runtime, "relist", json!({"extra": format!("t{call}"), "times": 10_000})).await;
        assert_eq!(common::answer(&report), "said lists-changed 10000 times");
    }
    let last = format!("t{}", calls - 1);
    let mut sets = runtime.watch_tools();
    let after = tokio::time::timeout(WAIT, sets.wait_for(|set| lists(set, &last)))
        .await
        .expect("the last list never came")
        .unwrap()
        .clone();
    let elapsed = started.elapsed();
    for earlier in 0..calls - 1 {
        assert!(!lists(&after, &format!("t{earlier}")), "t{earlier} is still listed");
    }
    // At most one listing per interval, whatever 100 000 requests asked.
    let swaps = after.generation() - before.generation();
    let bound = (elapsed.as_millis() / RELIST_INTERVAL.as_millis()) as u64 + 1;
    assert!(swaps <= bound, "{swaps} swaps in {elapsed:?}: more than one per {RELIST_INTERVAL:?}");
    assert!(swaps < calls, "{swaps} swaps for {calls} calls: nothing was coalesced");
}

#[tokio::test]
async fn a_new_list_that_would_not_load_changes_nothing() {
    let runtime = runtime("refused").await;
    let before = runtime.snapshot();
    // A tool the fixture already offers: refused, as at load.
    common::call(&runtime, "relist", json!({"extra": "test_simple_text", "times": 1})).await;
    common::call(&runtime, "relist", json!({"extra": "extra_b", "times": 1})).await;
    let after = next_set(&runtime, before.generation()).await;
    assert_eq!(after.generation(), before.generation() + 1, "the clash was swapped in");
    assert!(lists(&after, "extra_b"));
    let owner = runtime.call("test_simple_text", &json!({})).await.unwrap().component_name().to_owned();
    assert_eq!(owner, "conformance-fixture");

    // A listing that panics keeps the list it had; the next change (the fixture's) swaps
    // in a set where the hostile component still lists `extra_b`.
    common::call(&runtime, "relist", json!({"extra": "!panic", "times": 1})).await;
    common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    let last = next_set(&runtime, after.generation()).await;
    assert_eq!(last.generation(), after.generation() + 1);
    assert!(lists(&last, "test_dynamic_tool"));
    assert!(lists(&last, "extra_b") && lists(&last, "relist"), "the hostile component lost its list");
}
