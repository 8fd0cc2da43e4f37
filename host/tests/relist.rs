//! A component listed again after a call says `lists-changed` (runtime/relist.rs), with real
//! guests: the conformance fixture's `test_trigger_tool_change` adds and removes a tool;
//! the hostile component's `relist` names any extra tool (one that clashes with another
//! component's, or a listing that panics) and says `lists-changed` thousands of times.
//! Clients hear of each list that changed (tools, prompts, resources) on `cordon serve
//! --stdio`, in both eras; over HTTP, the conformance suite's `server-stateless` scenario
//! and the reload's tests (tests/reload.rs) cover the same path.

use crate::common;

use std::io::Write;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::server::Process;
use common::wire::{Schema, line_channel, meta};
use cordon::runtime::{ComponentOptions, RELIST_INTERVAL, RETIRED_SETS_MOST, Runtime, ToolSet};
use serde_json::{Value, json};

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

/// A component that renames a tool at every listing leaves no metric series behind for the
/// names it dropped: the exposition holds the tools served now, not every name ever called.
#[tokio::test]
async fn metrics_forget_the_series_of_tools_a_listing_dropped() {
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    let metrics = cordon::telemetry::metrics::Metrics::new(None);
    runtime.observe(metrics.clone());
    let options = ComponentOptions {
        limits: common::quick_limits(),
        data_dir: Some(common::fresh_dir("relist-metrics")),
        ..ComponentOptions::default()
    };
    runtime.load_file(&cordon::paths::default_tools_dir().join("hostile.wasm"), options).await.unwrap();
    let runtime = Arc::new(runtime);
    metrics.attach(runtime.clone(), None);
    tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.relist_when_asked().await }
    });
    for name in ["renamed_a", "renamed_b", "renamed_c"] {
        let generation = runtime.snapshot().generation();
        common::call(&runtime, "relist", json!({"extra": name, "times": 1})).await;
        let listed = next_set(&runtime, generation).await;
        assert!(lists(&listed, name), "{name} listed");
        drop(listed);
        assert_eq!(common::answer(&common::call(&runtime, name, json!({})).await), "the extra tool");
    }
    let text = metrics.scrape();
    assert!(text.contains(r#"tool="renamed_c",outcome="ok"} 1"#), "{text}");
    for gone in ["renamed_a", "renamed_b"] {
        assert!(!text.contains(&format!("tool=\"{gone}\"")), "{gone} is still exported: {text}");
    }
    assert!(
        text.contains(r#"tool="relist",outcome="ok"} 3"#),
        "a tool still served keeps its counts: {text}"
    );
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

/// Every version of a component that requests still run on keeps its lists, so a guest
/// that relists without pause beside long calls could pile versions up: past
/// [`RETIRED_SETS_MOST`] of them, its next listing waits until requests let some go, and
/// other components' listings go on. Before, each listing swapped a new version in,
/// however many older ones were held.
#[tokio::test]
async fn a_listing_waits_while_too_many_older_versions_serve_requests() {
    let runtime = runtime("retired").await;
    // Requests hold the set they started with: here, held by the test.
    let mut held = vec![runtime.snapshot()];
    for index in 0..RETIRED_SETS_MOST {
        let generation = runtime.snapshot().generation();
        common::call(&runtime, "relist", json!({"extra": format!("version_{index}"), "times": 1})).await;
        held.push(next_set(&runtime, generation).await);
    }
    // The hostile component's version served, and eight older ones held: its next
    // listing waits. The fixture's does not.
    held.pop();
    let generation = runtime.snapshot().generation();
    common::call(&runtime, "relist", json!({"extra": "one_too_many", "times": 1})).await;
    common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    let fixture_listed = next_set(&runtime, generation).await;
    assert!(lists(&fixture_listed, "test_dynamic_tool"), "the other component was listed");
    assert!(!lists(&fixture_listed, "one_too_many"));
    let mut sets = runtime.watch_tools();
    let swapped = tokio::time::timeout(
        RELIST_INTERVAL * 8,
        sets.wait_for(|set| set.generation() > fixture_listed.generation()),
    )
    .await;
    assert!(swapped.is_err(), "a ninth older version was swapped out while eight were held");
    // Let go, the waiting listing lands.
    drop(held);
    let listed = next_set(&runtime, fixture_listed.generation()).await;
    assert!(lists(&listed, "one_too_many") && lists(&listed, "test_dynamic_tool"));
}

#[tokio::test]
async fn a_listing_that_finds_nothing_new_swaps_nothing() {
    let runtime = runtime("unchanged").await;
    let before = runtime.snapshot();
    common::call(&runtime, "relist", json!({"extra": "", "times": 1})).await;
    // Then a change in the other component (whose files the first listing cannot see
    // change midway). Listings run in the order asked: the first, which found the same
    // lists, swapped nothing, so the second's set is the very next one.
    common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    let after = next_set(&runtime, before.generation()).await;
    assert!(lists(&after, "test_dynamic_tool"));
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

/// Listings that succeed slowly are spaced by their own length: the next comes no sooner
/// than four times as long after (a `list` taking 0.4 s: 1.6 s). Before, only the 250 ms
/// interval spaced them, and a component whose `list` ran for most of its budget, asked for
/// by each cheap call, kept a core, the reload lock and a call slot busy nearly all the time.
#[tokio::test]
async fn slow_listings_are_spaced_by_their_own_length() {
    let runtime = runtime("slow").await;
    let mut sets = runtime.watch_tools();
    let listed = |name: &'static str| {
        let runtime = runtime.clone();
        async move {
            let report = common::call(&runtime, "relist", json!({"extra": name, "times": 1})).await;
            assert_eq!(common::answer(&report), "said lists-changed 1 times");
        }
    };
    listed("slow_first").await;
    tokio::time::timeout(WAIT, sets.wait_for(|set| lists(set, "slow_first"))).await.unwrap().unwrap();
    let first = Instant::now();
    listed("slow_second").await;
    tokio::time::timeout(WAIT, sets.wait_for(|set| lists(set, "slow_second"))).await.unwrap().unwrap();
    let between = first.elapsed();
    assert!(between >= Duration::from_millis(1500), "listings of 0.4 s came {between:?} apart");
}

#[tokio::test]
async fn a_new_list_that_would_not_load_changes_nothing() {
    let runtime = runtime("refused").await;
    let mut generation = runtime.snapshot().generation();
    // A tool the fixture already offers (refused, as at load), then a listing that panics.
    // After each, a change in the other component, whose files the hostile listing cannot
    // see change midway: listings run in the order asked, so the fixture's set is the very
    // next one only if the hostile one swapped nothing.
    for (extra, added) in [("test_simple_text", true), ("!panic", false)] {
        let report = common::call(&runtime, "relist", json!({"extra": extra, "times": 1})).await;
        assert_eq!(common::answer(&report), "said lists-changed 1 times");
        common::call(&runtime, "test_trigger_tool_change", json!({})).await;
        let next = next_set(&runtime, generation).await;
        assert_eq!(next.generation(), generation + 1, "the hostile list ({extra}) was swapped in");
        assert_eq!(lists(&next, "test_dynamic_tool"), added);
        assert!(lists(&next, "relist"), "the hostile component lost its list");
        let owner = runtime.call("test_simple_text", &json!({})).await.unwrap().component_name().to_owned();
        assert_eq!(owner, "conformance-fixture");
        generation = next.generation();
    }
}

/// A listing waits for a call slot no longer than a call would (the queue timeout): it
/// holds the reload lock meanwhile, and a server whose slots are all taken by long calls
/// would otherwise hold every reload off until one ends. Here the hostile component is
/// held back after a failed listing (5 s), asks again, and its next listing finds every
/// slot parked for 15 s: each reload of the same sources meanwhile ends within the queue
/// timeout (1 s) and a margin. Before, one waited for a park to end. Once the parks end,
/// the listing that found no slot is tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_waits_for_a_slot_no_longer_than_a_call_would_and_holds_no_reload_off() {
    let (runtime, sources) = three_slots("relist-slot").await;
    tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.relist_when_asked().await }
    });
    // A refused listing (a tool the fixture offers): the hostile component is held back.
    // The fixture's change, asked after it, is listed after it: once its set is in, the
    // failure is counted.
    let generation = runtime.snapshot().generation();
    common::call(&runtime, "relist", json!({"extra": "test_simple_text", "times": 1})).await;
    common::call(&runtime, "test_trigger_tool_change", json!({})).await;
    next_set(&runtime, generation).await;
    let held_back = Instant::now();
    // It asks again, then every slot is taken for 15 s.
    common::call(&runtime, "relist", json!({"extra": "slot_wait", "times": 1})).await;
    let parks = park_every_slot(&runtime).await;
    // Reloads until well past the hold-back and one queue timeout: none waits long.
    while held_back.elapsed() < Duration::from_secs(8) {
        let reloading = runtime.reload(sources.clone());
        let report = tokio::time::timeout(Duration::from_secs(3), reloading).await.unwrap_or_else(|_| {
            panic!("a reload waited past 3 s, {:?} after the hold-back", held_back.elapsed())
        });
        assert!(report.failed.is_empty(), "{report:?}");
    }
    assert!(!lists(&runtime.snapshot(), "slot_wait"), "a listing found a slot that parks held");
    // Its request still stands: once slots free, it is listed with no call asking again.
    // Before, the listing that found no slot was given up, as if the guest had failed.
    let generation = runtime.snapshot().generation();
    for park in parks {
        park.abort();
    }
    assert!(lists(&*next_set(&runtime, generation).await, "slot_wait"));
}

/// A runtime of three call slots and a queue timeout of 1 s serving the fixture and the
/// hostile component, each with a data directory of its own, and the sources it loaded.
async fn three_slots(what: &str) -> (Arc<Runtime>, Vec<cordon::runtime::ComponentSource>) {
    let mut settings = common::settings(3);
    settings.queue_timeout = Duration::from_secs(1);
    let mut runtime = Runtime::new(settings).unwrap();
    let tools = cordon::paths::default_tools_dir();
    let sources: Vec<cordon::runtime::ComponentSource> = ["conformance-fixture", "hostile"]
        .into_iter()
        .map(|name| cordon::runtime::ComponentSource {
            name: name.to_owned(),
            path: tools.join(format!("{name}.wasm")),
            embedded: None,
            options: ComponentOptions {
                limits: common::quick_limits(),
                data_dir: Some(common::fresh_dir(&format!("{what}-{name}"))),
                ..ComponentOptions::default()
            },
        })
        .collect();
    assert!(runtime.load_all(sources.clone()).await.is_empty());
    (Arc::new(runtime), sources)
}

/// Take each of `runtime`'s three slots with a call parked for 15 s; abort them to end.
async fn park_every_slot(
    runtime: &Arc<Runtime>,
) -> Vec<tokio::task::JoinHandle<cordon::runtime::CallReport>> {
    let parks: Vec<_> = (0..3)
        .map(|_| {
            let runtime = runtime.clone();
            tokio::spawn(async move { common::call(&runtime, "park", json!({"ms": 15_000})).await })
        })
        .collect();
    let started = Instant::now();
    while runtime.pool_usage().calls < 3 {
        assert!(started.elapsed() < WAIT, "the parks never all started");
        tokio::task::yield_now().await;
    }
    parks
}

/// A reload that loads a changed component lists it in a call slot, under the reload lock,
/// and waits for that slot no longer than a call would: on a server whose every slot is
/// held by long calls, the changed component is refused within the queue timeout (1 s) and
/// its old version stays. Before, the reload waited for one of the calls to end (15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_loads_a_changed_component_waits_for_a_slot_no_longer_than_a_call_would() {
    let (runtime, sources) = three_slots("reload-slot").await;
    let parks = park_every_slot(&runtime).await;
    let mut changed = sources.clone();
    changed[1].options.limits.grace += Duration::from_millis(1);
    let reloading = runtime.reload(changed);
    let report = tokio::time::timeout(Duration::from_secs(5), reloading)
        .await
        .expect("a reload waited for a slot past 5 s, with a queue timeout of 1 s");
    assert_eq!(report.unchanged, ["conformance-fixture", "hostile"], "{report:?}");
    assert!(report.loaded.is_empty(), "{report:?}");
    let [refused] = &report.failed[..] else { panic!("{report:?}") };
    assert!(refused.to_string().contains("no call slot came free within 1s"), "{refused}");
    assert!(lists(&runtime.snapshot(), "park"), "the old version stays");
    for park in parks {
        park.abort();
    }
}

/// `cordon serve --stdio` on the fixture and the hostile component, each with a data
/// directory of its own.
struct Served {
    process: Process,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    schema: Schema,
}

impl Served {
    fn start(what: &str, schema: Schema) -> Self {
        let dir = common::fresh_dir(&format!("relist-served-{what}"));
        let tools = cordon::paths::default_tools_dir();
        let mut config = String::new();
        for (file, data) in [("conformance-fixture.wasm", "fixture"), ("hostile.wasm", "hostile")] {
            let (path, data) = (tools.join(file), dir.join(data));
            config +=
                &format!("[[components]]\npath = {:?}\ndata_dir = {:?}\n", path.display(), data.display());
        }
        std::fs::write(dir.join("cordon.toml"), config).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--stdio", "--config"]).arg(dir.join("cordon.toml"));
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut process = Process::spawn(command);
        let stdin = process.child.stdin.take().unwrap();
        let lines = line_channel(process.child.stdout.take().unwrap());
        process.wait_log("loaded");
        Self { process, stdin, lines, schema }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message, checked against the schema as a notification when it is one.
    fn next(&mut self) -> Value {
        let line = self.lines.recv_timeout(WAIT).expect("a message within the deadline");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message.get("method").is_some() {
            self.schema.check_sent(&message, None);
        }
        message
    }

    /// Messages until every one of `expected` (method, and the listen id it is tagged with)
    /// has come, and the answer to request `id`: the notifications seen, in order.
    fn collect(&mut self, id: &Value, expected: &[(&str, Value)]) -> Vec<(String, Value)> {
        let mut seen = Vec::new();
        let mut answered = false;
        while !answered
            || !expected
                .iter()
                .all(|wanted| seen.iter().any(|got: &(String, Value)| got.0 == wanted.0 && got.1 == wanted.1))
        {
            let message = self.next();
            match message["method"].as_str() {
                Some(method) => {
                    let tag = &message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"];
                    seen.push((method.to_owned(), tag.clone()));
                }
                None => {
                    assert_eq!(&message["id"], id, "{message}");
                    assert!(message.get("error").is_none(), "{message}");
                    answered = true;
                }
            }
        }
        seen
    }
}

const TOOLS: &str = "notifications/tools/list_changed";
const PROMPTS: &str = "notifications/prompts/list_changed";
const RESOURCES: &str = "notifications/resources/list_changed";

#[test]
fn listen_streams_hear_of_each_list_they_asked_for_and_only_those() {
    let mut served = Served::start("listen", Schema::new());
    let all = json!({"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true});
    for (id, notifications) in [("all", all.clone()), ("prompts", json!({"promptsListChanged": true}))] {
        served.send(json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                           "params": {"_meta": meta(), "notifications": notifications}}));
        let acknowledged = served.next();
        assert_eq!(acknowledged["method"], "notifications/subscriptions/acknowledged", "{acknowledged}");
        if id == "all" {
            assert_eq!(acknowledged["params"]["notifications"], all, "every list is offered: all honoured");
        }
    }
    let call = |id: i64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"_meta": meta(), "name": name, "arguments": arguments}})
    };
    // The hostile component's tools and resources change; no prompt does.
    served.send(call(1, "relist", json!({"extra": "more", "times": 1})));
    let first = served.collect(&json!(1), &[(TOOLS, json!("all")), (RESOURCES, json!("all"))]);
    // The fixture's prompts change.
    served.send(call(2, "test_trigger_prompt_change", json!({})));
    let second = served.collect(&json!(2), &[(PROMPTS, json!("all")), (PROMPTS, json!("prompts"))]);
    served.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta()}}));
    let last = served.collect(&json!(3), &[]);
    let mut everything: Vec<(String, Value)> = [first, second, last].concat();
    everything.sort_by_key(|(method, tag)| format!("{method} {tag}"));
    let expected = [(PROMPTS, "all"), (PROMPTS, "prompts"), (RESOURCES, "all"), (TOOLS, "all")];
    let expected: Vec<(String, Value)> =
        expected.iter().map(|(method, tag)| (method.to_string(), json!(tag))).collect();
    assert_eq!(everything, expected, "one notification per list changed, on the streams that asked");
    drop(served.process);
}

#[test]
fn a_2025_client_hears_of_each_list_that_changed() {
    let mut served = Served::start("legacy", Schema::legacy());
    served.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
    let initialized = served.next();
    let capabilities = &initialized["result"]["capabilities"];
    for list in ["tools", "prompts", "resources"] {
        assert_eq!(capabilities[list]["listChanged"], true, "{initialized}");
    }
    served.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = |id: i64, name: &str, arguments: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    served.send(call(1, "test_trigger_prompt_change", json!({})));
    let first = served.collect(&json!(1), &[(PROMPTS, Value::Null)]);
    assert_eq!(first, [(PROMPTS.to_owned(), Value::Null)]);
    served.send(call(2, "relist", json!({"extra": "more", "times": 1})));
    let mut second = served.collect(&json!(2), &[(TOOLS, Value::Null), (RESOURCES, Value::Null)]);
    second.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(second, [(RESOURCES.to_owned(), Value::Null), (TOOLS.to_owned(), Value::Null)]);
}
