//! A hostile component (`examples/hostile`) and hostile WAT guests against the runtime:
//! whatever a guest makes the host hold (stream buffers, listings, descriptors, linear
//! memory across memories) is charged to its call and bounded, and its data directory
//! cannot be redirected or escaped.

use crate::common;

use common::{answer, call, fresh_dir, hostile};

use std::path::Path;
use std::time::Duration;

use cordon::runtime::{ComponentOptions, Outcome, Runtime, RuntimeSettings, ToolLimits};
use serde_json::{Value, json};

async fn hostile_runtime(settings: RuntimeSettings, limits: ToolLimits, data_dir: &Path) -> Runtime {
    let mut runtime = Runtime::new(settings).unwrap();
    let options =
        ComponentOptions { limits, data_dir: Some(data_dir.to_owned()), ..ComponentOptions::default() };
    runtime.load_file(&hostile(), options).await.unwrap();
    runtime
}

/// The first number in `text` ("opened 255 of 5000: ...").
fn first_number(text: &str) -> usize {
    let digits: String =
        text.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number in {text:?}"))
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    first_number(line) << 10
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_streams_are_charged_to_the_call_s_host_memory() {
    let dir = fresh_dir("streams");
    // Descriptors are not the limit here: host memory is.
    let limits = ToolLimits { open_files: 100_000, ..common::quick_limits() };
    let runtime = hostile_runtime(common::settings(4), limits.clone(), &dir).await;
    let before = rss_bytes();
    let report = call(&runtime, "open_streams", json!({ "count": 10_000 })).await;
    let text = answer(&report);
    // 16 MiB of host memory, 64 KiB a stream: before the fix, all 10,000 (654 MB).
    let allowed = limits.host_memory_bytes / (64 << 10);
    assert!(text.starts_with(&format!("opened {allowed} of 10000 streams")), "{text}");
    assert!(text.contains("insufficient-memory"), "{text}");
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 200 << 20, "the server grew by {} MiB", grown >> 20);
    assert_eq!(runtime.pool_usage().guest_descriptors, 0, "every stream's descriptor is given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_listings_are_charged_while_the_guest_holds_them() {
    let dir = fresh_dir("listings");
    let limits = ToolLimits { host_memory_bytes: 4 << 20, ..common::quick_limits() };
    let runtime = hostile_runtime(common::settings(4), limits.clone(), &dir).await;
    let entries = 5_000;
    assert_eq!(answer(&call(&runtime, "make_files", json!({ "count": entries })).await), "made 5000");
    let report = call(&runtime, "list_dir", json!({ "times": 300 })).await;
    let text = answer(&report);
    // A listing costs 256 bytes, and 64 more than its name per entry ("entry-with-a-long-
    // name-00000000": 31 bytes). Before the fix, all 300 listings (1.7 GB at 20,000 entries).
    let listing = 256 + entries * (64 + 31);
    let allowed = limits.host_memory_bytes / listing;
    assert!(text.starts_with(&format!("took {allowed} of 300 listings")), "{text}");
    assert!(text.contains("insufficient-memory"), "{text}");
}

/// A poll's list lives in host memory while the guest waits on it, however often it names
/// one pollable: charged to the call. Before, 40,000 entries (2.5 MiB) waited uncharged
/// against a 1 MiB budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polls_list_is_charged_while_the_guest_waits() {
    let dir = fresh_dir("poll-list");
    let limits = ToolLimits { host_memory_bytes: 1 << 20, ..common::quick_limits() };
    let runtime = hostile_runtime(common::settings(4), limits, &dir).await;
    // 64 bytes an entry: 10,000 fit in 1 MiB, 40,000 do not (wasmtime lends at most
    // about 50,000 handles at once).
    let report = call(&runtime, "poll_many", json!({ "count": 10_000, "ms": 1 })).await;
    assert_eq!(answer(&report), "ready 10000");
    let report = call(&runtime, "poll_many", json!({ "count": 40_000, "ms": 1 })).await;
    match &report.outcome {
        Outcome::Trapped(message) => assert!(message.contains("polls a list of 40000"), "{message}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let report = call(&runtime, "poll_many", json!({ "count": 10_000, "ms": 1 })).await;
    assert_eq!(answer(&report), "ready 10000", "the charge was given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_holds_at_most_its_open_files() {
    let dir = fresh_dir("files");
    let limits = common::quick_limits();
    let runtime = hostile_runtime(common::settings(4), limits.clone(), &dir).await;
    let report = call(&runtime, "hold_files", json!({ "count": 5_000 })).await;
    let text = answer(&report);
    // `/data` itself is one of the call's descriptors. Before the fix: 4,079, until the
    // process ran out.
    let opened = first_number(&text);
    assert!((limits.open_files - 4..limits.open_files).contains(&opened), "{text}");
    assert!(text.contains("\"quota\""), "{text}");
    assert_eq!(runtime.pool_usage().guest_descriptors, 0, "the call's descriptors are given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_share_the_server_s_descriptors_and_never_take_its_reserve() {
    let dir = fresh_dir("server-files");
    // Leave guests 300 of the process's descriptors, whatever the limit here is: the pool's
    // 13 stores (4 calls, their cleanups, a `list`, 4 spares) are guaranteed 16 each, and
    // 92 are shared.
    let process_limit = cordon::runtime::raise_open_file_limit().unwrap();
    let settings = RuntimeSettings { reserved_descriptors: process_limit - 300, ..common::settings(4) };
    let runtime = hostile_runtime(settings, common::quick_limits(), &dir).await;
    let holder = runtime.call("hold_files", &json!({ "count": 5_000, "hold_ms": 60_000 })).await.unwrap();
    let holder_handle = holder.handle();
    let holder_task = tokio::spawn(holder.run());
    // Wait until the first call holds its files: the server's count tells.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while runtime.pool_usage().guest_descriptors < 92 {
        assert!(tokio::time::Instant::now() < deadline, "the first call never opened its files");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = answer(&call(&runtime, "hold_files", json!({ "count": 5_000 })).await);
    let opened = first_number(&second);
    assert!((12..16).contains(&opened), "the second call opened {opened}, its guarantee is 16: {second}");
    assert!(second.contains("\"quota\""), "{second}");
    // The server itself still opens files.
    let files: Vec<_> = (0..100).map(|_| std::fs::File::open("/proc/self/status").unwrap()).collect();
    drop(files);
    holder_handle.cancel();
    holder_task.await.unwrap();
    assert_eq!(runtime.pool_usage().guest_descriptors, 0);
}

/// A file whose last name a guest removes while it holds it stays open in the host too
/// (its quota counts it until nothing holds it): that descriptor is the server's, taken
/// from what guests may hold in all, and given back once the file is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_files_the_host_keeps_open_are_counted_in_the_servers_descriptors() {
    let dir = fresh_dir("orphan-descriptors");
    let process_limit = cordon::runtime::raise_open_file_limit().unwrap();
    let settings = RuntimeSettings { reserved_descriptors: process_limit - 300, ..common::settings(4) };
    let runtime = hostile_runtime(settings, common::quick_limits(), &dir).await;
    let arguments = json!({ "dir": "/data", "count": 30, "kib": 1, "hold_ms": 60_000 });
    let holder = runtime.call("hold_unlinked", &arguments).await.unwrap();
    let handle = holder.handle();
    let holding = tokio::spawn(holder.run());
    // 30 files the guest holds (16 of them within its store's guarantee) and the host's 30.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runtime.pool_usage().guest_descriptors < 40 {
        let held = runtime.pool_usage().guest_descriptors;
        assert!(tokio::time::Instant::now() < deadline, "{held} of the shared descriptors in use");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.cancel();
    holding.await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while runtime.pool_usage().guest_descriptors != 0 {
        let held = runtime.pool_usage().guest_descriptors;
        assert!(tokio::time::Instant::now() < deadline, "{held} still held once the call ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_is_opened_once_so_a_swapped_path_leads_nowhere() {
    let dir = fresh_dir("swap");
    let runtime = hostile_runtime(common::settings(4), common::quick_limits(), &dir).await;
    let wrote = call(&runtime, "write_text", json!({ "path": "/data/mine.txt", "text": "mine" })).await;
    assert_eq!(answer(&wrote), "wrote 4 bytes to /data/mine.txt");
    // What a neighbour (or anyone) could do to the path: move the directory away and put a
    // symlink to somewhere else in its place.
    let elsewhere = fresh_dir("elsewhere");
    std::fs::write(elsewhere.join("secret.txt"), "secret").unwrap();
    std::fs::rename(&dir, dir.with_extension("moved")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let secret = answer(&call(&runtime, "read_text", json!({ "path": "/data/secret.txt" })).await);
    assert!(!secret.contains("secret") || secret.contains("No such file"), "reached the symlink: {secret}");
    assert_eq!(answer(&call(&runtime, "read_text", json!({ "path": "/data/mine.txt" })).await), "mine");
    let planted = call(&runtime, "write_text", json!({ "path": "/data/planted.txt", "text": "x" })).await;
    assert_eq!(answer(&planted), "wrote 1 bytes to /data/planted.txt");
    assert!(!elsewhere.join("planted.txt").exists(), "a write went through the swapped path");
    assert!(dir.with_extension("moved").join("planted.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_a_guest_makes_point_down_only() {
    let dir = fresh_dir("links");
    let runtime = hostile_runtime(common::settings(4), common::quick_limits(), &dir).await;
    for target in ["../../etc", "..", "sub/../../x", "/etc/passwd"] {
        let text = answer(&call(&runtime, "symlink", json!({ "target": target, "link": "escape" })).await);
        assert!(text.contains("not-permitted"), "{target}: {text}");
        assert!(std::fs::symlink_metadata(dir.join("escape")).is_err(), "{target} was linked");
    }
    let text = answer(&call(&runtime, "symlink", json!({ "target": "mine.txt", "link": "alias" })).await);
    assert_eq!(text, "linked alias -> mine.txt");
    assert_eq!(std::fs::read_link(dir.join("alias")).unwrap(), Path::new("mine.txt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_inside_another_component_s_is_refused() {
    let outer = fresh_dir("outer");
    let mut runtime = hostile_runtime(common::settings(4), common::quick_limits(), &outer).await;
    let inner = outer.join("inner");
    let options = ComponentOptions { data_dir: Some(inner.clone()), ..ComponentOptions::default() };
    let error = runtime.load_file(&cordon::paths::example_tools(), options).await.unwrap_err();
    assert!(error.problem.contains("overlaps the data directory of component hostile"), "{error}");
    // And around it, and the same one.
    for dir in [outer.parent().unwrap().to_owned(), outer.clone()] {
        let options = ComponentOptions { data_dir: Some(dir), ..ComponentOptions::default() };
        let error = runtime.load_file(&cordon::paths::example_tools(), options).await.unwrap_err();
        assert!(error.problem.contains("overlaps"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_for_a_tool_the_component_does_not_export_are_a_load_error() {
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let mut options = ComponentOptions::default();
    options.tool_limits.insert("hold_fils".into(), ToolLimits::default());
    let error = runtime.load_file(&hostile(), options).await.unwrap_err();
    assert!(error.problem.contains("tool \"hold_fils\", which component hostile does not export"), "{error}");
    assert!(error.problem.contains("hold_files"), "the message lists what it exports: {error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_whose_memories_exceed_memory_mb_at_instantiation_is_refused_at_load() {
    let limits = ToolLimits { memory_bytes: 8 << 20, ..common::quick_limits() };
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let options = ComponentOptions { limits, ..ComponentOptions::default() };
    let guest = common::WatGuest::new("big", common::DONE_BODY).memory_pages(129);
    let error = runtime.load_bytes("big", &guest.component(), options).await.unwrap_err();
    assert!(error.problem.contains("need more than the 8 MiB its calls may have"), "{error}");
}

/// `cordon serve --stdio --config <config>`, its hard limit on open files at `max_files`
/// when given, with `environment` added to its own; its stdout lines come as "out ..." and
/// its stderr lines as "log ..." on one channel.
struct Served {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Served {
    fn start(config: &Path, max_files: Option<u64>, environment: &[(&str, &str)]) -> Self {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};

        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command
            .args(["serve", "--stdio", "--config"])
            .arg(config)
            .env("CORDON_LOG", "debug")
            .envs(environment.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(max_files) = max_files {
            // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit { rlim_cur: max_files, rlim_max: max_files };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let (sender, lines) = std::sync::mpsc::channel::<String>();
        common::wire::lines_of(child.stdout.take().unwrap(), sender.clone(), |line| format!("out {line}"));
        common::wire::lines_of(child.stderr.take().unwrap(), sender, |line| format!("log {line}"));
        let stdin = child.stdin.take();
        Self { child, stdin, lines }
    }

    fn call(&mut self, id: u32, tool: &str, arguments: Value) {
        use std::io::Write;
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta}});
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{request}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The next line before `deadline`, or a panic saying what was awaited.
    fn next_line(&self, deadline: std::time::Instant, awaited: &str) -> String {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("{awaited}: nothing before the deadline"))
    }

    /// The answers to `ids`, and every log line seen on the way.
    fn answers(
        &self,
        ids: &[u64],
        deadline: std::time::Instant,
    ) -> (std::collections::HashMap<u64, Value>, Vec<String>) {
        let mut answers = std::collections::HashMap::new();
        let mut log = Vec::new();
        while !ids.iter().all(|id| answers.contains_key(id)) {
            let line = self.next_line(deadline, "answers");
            match line.strip_prefix("out ") {
                Some(message) => {
                    let message: Value = serde_json::from_str(message).unwrap();
                    answers.insert(message["id"].as_u64().unwrap(), message);
                }
                None => log.push(line),
            }
        }
        (answers, log)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cordon serve --stdio` with the process's hard limit at 1,024 descriptors: four calls
/// that each try to hold 5,000 files get the guests' share only, and the server and the
/// other tools keep theirs (before: the first call took every descriptor, and every other
/// tool failed with "Too many open files"). Guests share 1,024 − 256 (the server's
/// reserve on stdio); the pool's 21 stores (8 calls, 8 cleanups, a `list`, 4 spares) are
/// guaranteed 16 each, so other tools' calls always open files.
#[test]
fn guests_holding_files_leave_the_server_and_other_tools_their_descriptors() {
    let dir = fresh_dir("serve-files");
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nmax_concurrent_calls = 8\n\n\
             [[components]]\npath = {hostile:?}\ndata_dir = \"hostile-data\"\n\
             limits = {{ grace_ms = 50, max_duration_ms = 20000 }}\n\n\
             [[components]]\npath = {tools:?}\ndata_dir = \"tools-data\"\n",
            hostile = hostile().display().to_string(),
            tools = cordon::paths::example_tools().display().to_string(),
        ),
    )
    .unwrap();
    let mut server = Served::start(&config, Some(1024), &[]);
    for id in 1..=4 {
        server.call(id, "hold_files", json!({ "count": 5_000, "hold_ms": 4_000 }));
    }
    // Wait (on the operator's log) until all four hold what they could get.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut held = Vec::new();
    while held.len() < 4 {
        let line = server.next_line(deadline, "the holders' reports");
        if let Some(at) = line.find("holding ") {
            held.push(first_number(&line[at..]));
        }
    }
    // The guests' share is the limit less the server's reserve (256 on stdio).
    assert!(held.iter().sum::<usize>() <= 1024 - 256, "guests hold {held:?}");
    server.call(5, "reindex", json!({ "collection": "books", "total": 40, "step_ms": 1 }));
    server.call(6, "locks", json!({}));
    let (answers, _) = server.answers(&[5, 6], deadline);
    for id in [5, 6] {
        let result = &answers[&id]["result"];
        assert!(result["content"].is_array() && result["isError"] != true, "call {id}: {}", answers[&id]);
    }
    assert!(answers.keys().all(|&id| id > 4), "the holders were still holding: {answers:?}");
}

#[test]
fn a_component_sees_exactly_its_environment_and_secrets_never_reach_the_log() {
    let dir = fresh_dir("serve-env");
    std::fs::write(dir.join("db-password"), "pa55-from-file\n").unwrap();
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\n\n\
             [[components]]\npath = {hostile:?}\n\
             env = {{ REGION = \"eu\" }}\n\
             secrets = {{ API_TOKEN = {{ env = \"CORDON_TEST_TOKEN\" }}, DB_PASSWORD = {{ file = \"db-password\" }} }}\n",
            hostile = hostile().display().to_string(),
        ),
    )
    .unwrap();
    let mut server = Served::start(&config, None, &[("CORDON_TEST_TOKEN", "t0ken-from-env")]);
    server.call(1, "env_names", json!({}));
    server.call(2, "env_var", json!({ "name": "API_TOKEN" }));
    server.call(3, "env_var", json!({ "name": "DB_PASSWORD" }));
    server.call(4, "env_var", json!({ "name": "CORDON_TEST_TOKEN" }));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (answers, log) = server.answers(&[1, 2, 3, 4], deadline);
    let text = |id: u64| answers[&id]["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    // Nothing of the server's environment (PATH, HOME, CORDON_LOG, the token's source).
    assert_eq!(text(1), "API_TOKEN,DB_PASSWORD,REGION");
    assert_eq!(text(2), "t0ken-from-env");
    assert_eq!(text(3), "pa55-from-file");
    assert_eq!(text(4), "(unset)");
    drop(server);
    for line in &log {
        assert!(!line.contains("t0ken") && !line.contains("pa55"), "a secret reached the log: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spare_instances_share_a_memory_budget() {
    // Four components of 20 MiB of memory each: a spare of each would hold 80 MiB idle,
    // past the spares' 64 MiB.
    let limits = ToolLimits { memory_bytes: 32 << 20, ..common::quick_limits() };
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    for index in 0..4 {
        let tool = format!("big{index}");
        let guest = common::WatGuest::new(&tool, common::DONE_BODY).memory_pages(320);
        let options = ComponentOptions { limits: limits.clone(), ..ComponentOptions::default() };
        runtime.load_bytes(&tool, &guest.component(), options).await.unwrap();
    }
    for index in 0..4 {
        let call = runtime.call(&format!("big{index}"), &json!({})).await.unwrap();
        let (report, teardown) = call.run_deferring_teardown().await;
        assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
        teardown.finish().await; // makes the component's spare, if the budget allows
    }
    let usage = runtime.pool_usage();
    assert_eq!(usage.spares, 3, "{usage:?}");
    assert_eq!(usage.spare_memory_bytes, 3 * (20 << 20), "{usage:?}");
}

/// A spare's start code runs before any call, off every call's clock: it may take no
/// longer than a call of the tool may, or a tool limited to 100 ms would get a second of
/// work done for each call in its spare. (The start code counts to 2^26; how long that
/// takes here is measured first, and the limits are set around it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spares_start_code_gets_no_more_time_than_a_call() {
    let slow_start = common::WatGuest::new("slow_start", common::DONE_BODY).extra(
        "(global $spins (mut i64) (i64.const 0))
         (func $slow
           (loop $more
             (global.set $spins (i64.add (global.get $spins) (i64.const 1)))
             (br_if $more (i64.lt_u (global.get $spins) (i64.const 67108864)))))
         (start $slow)",
    );
    let component = slow_start.component();
    let runtime_with = |max_duration: Duration| {
        let component = component.clone();
        async move {
            let mut runtime = Runtime::new(common::settings(8)).unwrap();
            let limits = ToolLimits { max_duration: Some(max_duration), ..common::quick_limits() };
            let options = ComponentOptions { limits, ..ComponentOptions::default() };
            runtime.load_bytes("slow_start", &component, options).await.unwrap();
            runtime
        }
    };
    let spares_after_a_call = |runtime: Runtime| async move {
        let call = runtime.call("slow_start", &json!({})).await.unwrap();
        let (_report, teardown) = call.run_deferring_teardown().await;
        teardown.finish().await; // makes the component's spare, if it may have one
        runtime.pool_usage().spares
    };
    let calibrating = runtime_with(Duration::from_secs(60)).await;
    let started = std::time::Instant::now();
    drop(calibrating.instantiate_once("slow_start").await.unwrap());
    let start_code = started.elapsed();
    assert!(start_code < Duration::from_secs(2), "the start code took {start_code:?}: too slow to judge");
    // Wide factors: a busy machine may run the same start code several times slower or
    // faster from one instantiation to the next.
    let short = runtime_with(start_code / 10).await;
    assert_eq!(spares_after_a_call(short).await, 0, "start code of {start_code:?} outran the call's limit");
    let long = runtime_with(start_code * 10 + Duration::from_millis(100)).await;
    assert_eq!(spares_after_a_call(long).await, 1, "within the limit, a spare is made");
}

/// A component's start code can call the host while it instantiates (here it makes a
/// timer, a host resource, and keeps it). A spare of it would hold that idle, charged to
/// no call: such a component gets no spare, while one whose instantiation holds nothing
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_whose_start_code_takes_host_resources_gets_no_spare() {
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    let grabbing = common::WatGuest::new("grabbing", common::DONE_BODY)
        .extra("(func $grab (drop (call $subscribe (i64.const 1000000)))) (start $grab)");
    let plain = common::WatGuest::new("plain", common::DONE_BODY);
    for guest in [&grabbing, &plain] {
        let options = ComponentOptions { limits: common::quick_limits(), ..ComponentOptions::default() };
        runtime.load_bytes(&guest.tool, &guest.component(), options).await.unwrap();
    }
    for tool in ["grabbing", "plain"] {
        let call = runtime.call(tool, &json!({})).await.unwrap();
        let (report, teardown) = call.run_deferring_teardown().await;
        assert!(matches!(report.outcome, Outcome::Completed(_)), "{tool}: {:?}", report.outcome);
        teardown.finish().await; // makes the component's spare, if it may have one
    }
    assert_eq!(runtime.pool_usage().spares, 1, "only `plain` has a spare");
}
