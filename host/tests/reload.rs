//! Hot reload and `list_changed`, on real `cordon serve` processes: SIGHUP and `--watch`
//! swap the components, calls in flight finish on their old version, a broken component
//! or config changes nothing, `cordon check` exits as CI needs; 2026-07-28 clients hear of
//! list changes on `subscriptions/listen` (stdio and HTTP), 2025-era clients on their
//! session's GET stream and on stdio. Every message the server sends is checked against
//! the official schema. The components are WAT guests, written to files per test.

use crate::common;
use common::server::{Process, WAIT, next_event, open_request};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use common::wire::{Schema, line_channel, meta};
use common::{DONE_BODY, SLEEP_BODY, WatGuest, fresh_dir};
use serde_json::{Value, json};

/// Return "lock" at once: a second version of a tool that returns "done".
const LOCK_BODY: &str = "(call $ok_text (i32.const 2010) (i32.const 4))";
/// Report progress (so the test knows the call runs), sleep 1.5 s, return "done".
const SLOW_BODY: &str =
    "(call $progress (f64.const 1) (i32.const 0) (f64.const 0) (i32.const 0) (i32.const 0) (i32.const 0))
    (call $sleep_ms (i64.const 1500)) (call $ok_text (i32.const 2000) (i32.const 4))";

/// A directory with a config and the components it names.
struct Setup {
    dir: PathBuf,
}

impl Setup {
    fn new(what: &str) -> Self {
        Self { dir: fresh_dir(what) }
    }

    fn config(&self) -> PathBuf {
        self.dir.join("cordon.toml")
    }

    /// Write the component `file` (a guest offering `guest.tool`).
    fn component(&self, file: &str, guest: &WatGuest) {
        write_atomically(&self.dir.join(file), &guest.component());
    }

    /// Serve these component files (`server` goes into `[server]`).
    fn serve(&self, files: &[&str], server: &str) {
        let mut text = format!("[server]\ncache = false\nprogress_interval_ms = 10\n{server}\n");
        for file in files {
            text.push_str(&format!("[[components]]\npath = {file:?}\n"));
        }
        write_atomically(&self.config(), text.as_bytes());
    }
}

/// Replace `path` by renaming a finished file over it, as deployment tools do: a reader
/// never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) {
    let temporary = path.with_extension("partial");
    std::fs::write(&temporary, bytes).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// `cordon serve --stdio`, speaking lines.
struct StdioServer {
    process: Process,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    schema: Schema,
    methods: HashMap<String, String>,
}

impl StdioServer {
    fn start(setup: &Setup, extra: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--stdio", "--config"]).arg(setup.config()).args(extra);
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut process = Process::spawn(command);
        let stdin = process.child.stdin.take();
        let stdout = process.child.stdout.take().unwrap();
        let lines = line_channel(stdout);
        process.wait_log("loaded");
        Self { process, stdin, lines, schema: Schema::new(), methods: HashMap::new() }
    }

    fn send(&mut self, message: Value) {
        if let (Some(id), Some(method)) = (message.get("id"), message.get("method").and_then(Value::as_str)) {
            self.methods.insert(id.to_string(), method.to_owned());
        }
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, id: Value, method: &str, mut params: Value) {
        params["_meta"] = meta();
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// The next message, checked against the schema (2026-era ones; `legacy` skips that).
    fn next(&mut self) -> Value {
        let line = self.lines.recv_timeout(WAIT).expect("a message within the deadline");
        let message: Value = serde_json::from_str(&line).unwrap();
        let method = message.get("id").and_then(|id| self.methods.get(&id.to_string())).cloned();
        self.schema.check_sent(&message, method.as_deref());
        message
    }

    /// Every message up to and with the answer to `id`.
    fn until_answer(&mut self, id: &Value) -> Vec<Value> {
        let mut messages = Vec::new();
        loop {
            let message = self.next();
            let done = message.get("id") == Some(id) && message.get("method").is_none();
            messages.push(message);
            if done {
                return messages;
            }
        }
    }

    /// The tool names `tools/list` gives now, and what was sent before its answer.
    fn tool_names(&mut self, id: i64) -> (Vec<String>, Vec<Value>) {
        self.request(json!(id), "tools/list", json!({}));
        let mut messages = self.until_answer(&json!(id));
        let answer = messages.pop().unwrap();
        let names = answer["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect();
        (names, messages)
    }

    /// Call `tool` and return its answer.
    fn call(&mut self, id: i64, tool: &str) -> Value {
        self.request(json!(id), "tools/call", json!({"name": tool, "arguments": {}}));
        self.until_answer(&json!(id)).pop().unwrap()
    }

    fn close_stdin(&mut self) {
        self.stdin.take();
    }
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer}"))
}

fn is_list_changed(message: &Value, subscription: &Value) -> bool {
    message["method"] == "notifications/tools/list_changed"
        && message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == *subscription
}

fn two_tools(what: &str) -> Setup {
    let setup = Setup::new(what);
    setup.component("alpha.wasm", &WatGuest::new("alpha", DONE_BODY));
    setup.component("beta.wasm", &WatGuest::new("beta", DONE_BODY));
    setup.serve(&["alpha.wasm"], "");
    setup
}

#[test]
fn sighup_swaps_components_and_listen_streams_hear_of_it_as_the_spec_says() {
    let setup = two_tools("sighup");
    let mut server = StdioServer::start(&setup, &[]);
    // Two listens: one for tool changes, one for prompts only (not honoured: no prompts).
    server.request(
        json!("tools"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let ack = server.next();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}));
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "tools");
    server.request(json!(7), "subscriptions/listen", json!({"notifications": {"promptsListChanged": true}}));
    let ack = server.next();
    assert_eq!(ack["params"]["notifications"], json!({}), "{ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7);
    // A third, which the client ends: it hears nothing more, not even at shutdown.
    server.request(
        json!("gone"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    assert_eq!(server.next()["method"], "notifications/subscriptions/acknowledged");
    server.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "gone"}}),
    );
    assert_eq!(server.tool_names(1).0, ["alpha"]);

    // Add beta, remove alpha.
    setup.serve(&["beta.wasm"], "");
    let line = server.process.reload();
    assert!(line.contains("loaded [beta], removed [alpha]"), "{line}");
    let changed = server.next();
    assert!(is_list_changed(&changed, &json!("tools")), "{changed}");
    let (names, before) = server.tool_names(2);
    assert_eq!(names, ["beta"]);
    assert!(before.is_empty(), "only one list_changed per change, on one stream: {before:?}");
    assert_eq!(text(&server.call(3, "beta")), "done");
    let refused = server.call(4, "alpha");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // A reload that changes nothing sends nothing.
    let line = server.process.reload();
    assert!(line.contains("nothing changed"), "{line}");
    let (names, before) = server.tool_names(5);
    assert_eq!(names, ["beta"]);
    assert!(before.is_empty(), "a no-op reload sent {before:?}");

    // The server ends the streams at shutdown: the final answer, then (stdio) cancelled.
    server.close_stdin();
    let mut ended: HashMap<String, Vec<String>> = HashMap::new();
    while let Ok(line) = server.lines.recv_timeout(WAIT) {
        let message: Value = serde_json::from_str(&line).unwrap();
        let method = message.get("id").and_then(|id| server.methods.get(&id.to_string())).cloned();
        server.schema.check_sent(&message, method.as_deref());
        let subscription = match message.get("id") {
            Some(id) => {
                assert_eq!(message["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *id);
                id.clone()
            }
            None => {
                assert_eq!(message["method"], "notifications/cancelled", "{message}");
                let id = message["params"]["requestId"].clone();
                assert_eq!(message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], id);
                id
            }
        };
        let kind = if message.get("id").is_some() { "result" } else { "cancelled" };
        ended.entry(subscription.to_string()).or_default().push(kind.to_owned());
    }
    let expected: HashMap<String, Vec<String>> = [
        ("\"tools\"".to_owned(), vec!["result".to_owned(), "cancelled".to_owned()]),
        ("7".to_owned(), vec!["result".to_owned(), "cancelled".to_owned()]),
    ]
    .into();
    assert_eq!(ended, expected);
}

#[test]
fn watch_picks_up_a_changed_component_file() {
    let setup = two_tools("watch");
    let mut server = StdioServer::start(&setup, &["--watch"]);
    server.request(json!(1), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    assert_eq!(server.next()["method"], "notifications/subscriptions/acknowledged");
    // The same file now holds a component with another tool.
    setup.component("alpha.wasm", &WatGuest::new("gamma", DONE_BODY));
    server.process.wait_log("a watched file changed");
    let line = server.process.reload_finished();
    assert!(line.contains("loaded [alpha]"), "{line}");
    assert!(is_list_changed(&server.next(), &json!(1)));
    assert_eq!(server.tool_names(2).0, ["gamma"]);
    // An edit to the config is seen too.
    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    server.process.wait_log("a watched file changed");
    let line = server.process.reload_finished();
    assert!(line.contains("loaded [beta]") && line.contains("unchanged [alpha]"), "{line}");
    assert!(is_list_changed(&server.next(), &json!(1)));
    assert_eq!(server.tool_names(3).0, ["gamma", "beta"]);
}

#[test]
fn a_reload_warns_that_changed_settings_other_than_components_wait_for_a_restart() {
    let setup = two_tools("settings");
    let mut server = StdioServer::start(&setup, &[]);
    // Components only: applied, and nothing to warn about.
    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    let line = server.process.reload();
    assert!(line.contains("loaded [beta]"), "{line}");
    // A changed [server] table and a new [http] one: not applied, and said so.
    setup.serve(&["alpha.wasm", "beta.wasm"], "max_concurrent_calls = 3\n[http]\nmax_connections = 7");
    server.process.signal(libc::SIGHUP);
    let warning = server.process.wait_log("only a restart applies it");
    assert!(warning.contains("WARN") && warning.contains("[http], [server] changed"), "{warning}");
    assert!(
        !server.process.seen.iter().any(|line| line.contains("only a restart") && line != &warning),
        "the components-only reload warned too: {:?}",
        server.process.seen
    );
    assert_eq!(server.tool_names(1).0, ["alpha", "beta"], "the server still serves");
}

/// A tenant's key file edited (a key taken out) is no change of the config's text, and a
/// reload does not apply it: the operator is told a restart is needed. Before, the reload
/// said nothing, and the key taken out went on working in silence.
#[test]
fn a_reload_warns_that_changed_api_keys_wait_for_a_restart() {
    let setup = two_tools("key-files");
    let keys = setup.dir.join("acme.keys");
    std::fs::write(&keys, "acme-key-one-0123456789\nacme-key-two-0123456789\n").unwrap();
    let tenants =
        "[[tenants]]\nname = \"acme\"\ncomponents = [\"alpha\"]\napi_keys = { file = \"acme.keys\" }\n";
    let config = std::fs::read_to_string(setup.config()).unwrap() + tenants;
    write_atomically(&setup.config(), config.as_bytes());
    let mut server = StdioServer::start(&setup, &["--tenant", "acme"]);
    // Nothing changed: nothing to warn about.
    server.process.reload();
    write_atomically(&keys, b"acme-key-one-0123456789\n");
    server.process.signal(libc::SIGHUP);
    let warning = server.process.wait_log("API keys changed");
    assert!(warning.contains("WARN") && warning.contains("only a restart applies them"), "{warning}");
    assert_eq!(
        server.process.seen.iter().filter(|line| line.contains("API keys changed")).count(),
        1,
        "the reload with nothing changed warned too: {:?}",
        server.process.seen
    );
}

/// The keys a reload compares with are those the server started with, not those found
/// once its components had compiled: a key file edited while they compiled is a change the
/// server did not apply. Before, the reloader read the keys again after loading, took the
/// edited file for what was served, and never warned.
#[test]
fn a_key_file_edited_while_the_components_compile_is_warned_about_at_the_next_reload() {
    let setup = two_tools("key-files-at-start");
    let keys = setup.dir.join("acme.keys");
    std::fs::write(&keys, "acme-key-one-0123456789\nacme-key-two-0123456789\n").unwrap();
    // The Python example besides: its compile (no cache) takes seconds, the window in which
    // the key file is edited.
    let python = cordon::paths::default_tools_dir().join("example-python.wasm");
    assert!(python.is_file(), "{} is missing: run `cargo xtask guests` first", python.display());
    let config = std::fs::read_to_string(setup.config()).unwrap()
        + &format!("[[components]]\npath = {:?}\n", python.display().to_string())
        + "[[tenants]]\nname = \"acme\"\ncomponents = [\"alpha\"]\napi_keys = { file = \"acme.keys\" }\n";
    write_atomically(&setup.config(), config.as_bytes());
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command.args(["serve", "--stdio", "--tenant", "acme", "--config"]).arg(setup.config());
    command.stdin(Stdio::piped()).stdout(Stdio::null());
    // Debug logs: the server says the open-file limit after reading its config, before
    // compiling.
    let mut process = Process::spawn_logging(command, "info,cordon=debug");
    process.wait_log("the process may open");
    write_atomically(&keys, b"acme-key-one-0123456789\n");
    let loaded = process.wait_log("loaded");
    assert!(loaded.contains("alpha"), "{loaded}");
    process.signal(libc::SIGHUP);
    let warning = process.wait_log("API keys changed");
    assert!(warning.contains("WARN") && warning.contains("only a restart applies them"), "{warning}");
}

#[test]
fn a_call_in_flight_finishes_on_the_version_it_started_with() {
    let setup = Setup::new("in-flight");
    setup.component("slow.wasm", &WatGuest::new("slow", SLOW_BODY));
    setup.serve(&["slow.wasm"], "");
    let mut server = StdioServer::start(&setup, &[]);
    server.request(json!(9), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    assert_eq!(server.next()["method"], "notifications/subscriptions/acknowledged");
    let mut envelope = meta();
    envelope["progressToken"] = json!("p");
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}, "_meta": envelope}}));
    server.methods.insert("1".into(), "tools/call".into());
    assert_eq!(server.next()["method"], "notifications/progress", "the call runs");
    // Version 2 of the same tool (same name, description, schema): a new component.
    setup.component("slow.wasm", &WatGuest::new("slow", LOCK_BODY));
    let line = server.process.reload();
    assert!(line.contains("loaded [slow]"), "{line}");
    // The two answers in either order: under load the reload may take longer than the call
    // in flight.
    server.request(json!(2), "tools/call", json!({"name": "slow", "arguments": {}}));
    let mut answers = HashMap::new();
    while answers.len() < 2 {
        let message = server.next();
        if let Some(id) = message["id"].as_i64().filter(|_| message.get("method").is_none()) {
            answers.insert(id, message);
        }
    }
    assert_eq!(text(&answers[&2]), "lock", "a new call runs version 2");
    assert_eq!(text(&answers[&1]), "done", "the call in flight finished on version 1");
    // The tools' list did not change (only the code did): the listener heard nothing.
    let (_, before) = server.tool_names(3);
    assert!(before.is_empty(), "{before:?}");
}

/// A reload that finds every call slot busy (here the only one, held by a call) loads what
/// changed once one frees, with no other signal: it is tried again after a pause. Before,
/// the change waited for the next SIGHUP or file event.
#[test]
fn a_reload_that_found_no_free_slot_is_tried_again() {
    let setup = Setup::new("busy-reload");
    setup.component("sleeper.wasm", &WatGuest::new("sleeper", SLEEP_BODY));
    setup.component("alpha.wasm", &WatGuest::new("alpha", DONE_BODY));
    setup.serve(&["sleeper.wasm", "alpha.wasm"], "max_concurrent_calls = 1\nqueue_timeout_ms = 200\n");
    let mut server = StdioServer::start(&setup, &[]);
    server.request(json!(1), "tools/call", json!({"name": "sleeper", "arguments": {}}));
    // Read in order, the sleeper takes the only slot before the next call asks for it.
    let busy = server.call(2, "alpha");
    assert_eq!(busy["result"]["isError"], true, "{busy}");
    setup.component("alpha.wasm", &WatGuest::new("alpha", LOCK_BODY));
    server.process.signal(libc::SIGHUP);
    let waiting = server.process.wait_log("reading the config again in 2s");
    assert!(waiting.contains("WARN") && waiting.contains("no call slot came free to list"), "{waiting}");
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    let loaded = server.process.wait_log("reload: loaded");
    assert!(loaded.contains("loaded [alpha]"), "{loaded}");
    assert_eq!(text(&server.call(3, "alpha")), "lock");
}

#[test]
fn a_broken_component_keeps_its_old_version_and_the_error_is_logged() {
    let setup = two_tools("broken");
    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    let mut server = StdioServer::start(&setup, &[]);
    server.request(json!(9), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    assert_eq!(server.next()["method"], "notifications/subscriptions/acknowledged");
    write_atomically(&setup.dir.join("beta.wasm"), b"not a component at all");
    server.process.signal(libc::SIGHUP);
    let error = server.process.wait_log("ERROR");
    assert!(error.contains("beta.wasm") && error.contains("not a WebAssembly file"), "{error}");
    let line = server.process.reload_finished();
    assert!(line.contains("nothing changed"), "{line}");
    assert_eq!(text(&server.call(1, "beta")), "done");
    let (names, before) = server.tool_names(2);
    assert_eq!(names, ["alpha", "beta"]);
    assert!(before.is_empty(), "{before:?}");
    // A broken new component stays out; the rest of the reload applies.
    setup.component("gamma.wasm", &WatGuest::new("gamma", DONE_BODY));
    setup.serve(&["alpha.wasm", "beta.wasm", "gamma.wasm", "missing.wasm"], "");
    server.process.signal(libc::SIGHUP);
    let errors = [server.process.wait_log("ERROR"), server.process.wait_log("ERROR")].join("\n");
    assert!(errors.contains("beta.wasm: not a WebAssembly file"), "{errors}");
    assert!(errors.contains("missing.wasm: cannot read"), "{errors}");
    let line = server.process.reload_finished();
    assert!(line.contains("loaded [gamma]"), "{line}");
    assert!(is_list_changed(&server.next(), &json!(9)));
    assert_eq!(server.tool_names(3).0, ["alpha", "beta", "gamma"]);
}

#[test]
fn a_config_that_fails_to_parse_keeps_everything() {
    let setup = two_tools("bad-config");
    let mut server = StdioServer::start(&setup, &[]);
    write_atomically(&setup.config(), b"[[components]\npath = \"beta.wasm\"\n");
    server.process.signal(libc::SIGHUP);
    let error = server.process.wait_log("ERROR");
    assert!(error.contains("the config was not applied") && error.contains("cordon.toml"), "{error}");
    // A config that parses but does not validate is refused the same way.
    write_atomically(
        &setup.config(),
        b"[[components]]\npath = \"beta.wasm\"\nlimits = { memory_mb = \"lots\" }\n",
    );
    server.process.signal(libc::SIGHUP);
    let error = server.process.wait_log("ERROR");
    // One line, naming the key and where, not quoting the line (which may hold a secret).
    assert!(
        error.contains("the config was not applied") && error.contains("line 3, column 24, at `memory_mb`"),
        "{error}"
    );
    assert_eq!(server.tool_names(1).0, ["alpha"]);
    assert_eq!(text(&server.call(2, "alpha")), "done");
}

#[test]
fn cordon_check_validates_a_config_and_compiles_every_component() {
    let setup = two_tools("check");
    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    let check = |config: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["check", "--config"])
            .arg(config)
            .env("CORDON_LOG", "error")
            .output()
            .unwrap();
        let (stdout, stderr) =
            (String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap());
        (output.status.code(), stdout, stderr)
    };
    let (code, stdout, _) = check(&setup.config());
    assert_eq!(code, Some(0));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("ok, 2 components, 2 tools: alpha, beta"), "{stdout}");

    let config = setup.dir.join("unknown-key.toml");
    std::fs::write(&config, "[server]\nmax_calls = 3\n").unwrap();
    let (code, stdout, stderr) = check(&config);
    assert_eq!(code, Some(1));
    assert!(stdout.is_empty());
    assert!(stderr.contains("unknown field `max_calls`") && stderr.contains("unknown-key.toml"), "{stderr}");

    // A sealing key `serve` would refuse after compiling everything is refused first.
    let config = setup.dir.join("short-key.toml");
    std::fs::write(&config, "[server]\nrequest_state_key = \"abc\"\n[[components]]\npath = \"alpha.wasm\"\n")
        .unwrap();
    let (code, _, stderr) = check(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("[server] request_state_key: a request state key is 64 hexadecimal digits"),
        "{stderr}"
    );

    let config = setup.dir.join("broken.toml");
    std::fs::write(setup.dir.join("broken.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(
        &config,
        "[[components]]\npath = \"alpha.wasm\"\n[[components]]\npath = \"broken.wasm\"\n",
    )
    .unwrap();
    let (code, _, stderr) = check(&config);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("1 of 2 components failed") && stderr.contains("broken.wasm"), "{stderr}");
    assert!(!stderr.contains("alpha.wasm:"), "only the broken one is named: {stderr}");

    let (code, _, stderr) = check(&setup.dir.join("absent.toml"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("absent.toml"), "{stderr}");

    // An issuer's key set in a file that `serve --http` could not start with.
    let config = setup.dir.join("no-jwks.toml");
    std::fs::write(
        &config,
        "[auth.oauth]\nissuer = \"https://idp.example.com\"\naudience = \"https://mcp.example.com/mcp\"\n\
         jwks = { file = \"missing-jwks.json\" }\ntenant_claim = \"org\"\n[[components]]\npath = \"alpha.wasm\"\n",
    )
    .unwrap();
    let (code, _, stderr) = check(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("missing-jwks.json"), "{stderr}");

    // A mistake on the line of the sealing key says where, never what the line holds.
    let key = "9f".repeat(32);
    let config = setup.dir.join("key-typo.toml");
    std::fs::write(&config, format!("[server]\nrequest_state_kye = \"{key}\"\n")).unwrap();
    let (code, _, stderr) = check(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown field `request_state_kye`") && stderr.contains("line 2"), "{stderr}");
    assert!(!stderr.contains(&key), "the key was printed: {stderr}");
}

#[test]
fn cordon_check_refuses_http_settings_that_would_break_serving() {
    let setup = two_tools("http-settings");
    let refused = |settings: &str, expected: &str| {
        let config = setup.dir.join("http.toml");
        std::fs::write(&config, format!("[http]\n{settings}\n")).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["check", "--config"])
            .arg(&config)
            .env("CORDON_LOG", "error")
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(1), "{settings}: {stderr}");
        assert!(stderr.contains(expected), "{settings}: {stderr}");
    };
    // Past tokio's semaphores, which would panic at bind or at the first connection.
    refused(
        "max_connections = 3000000000000000000",
        "http.max_connections = 3000000000000000000 is out of range",
    );
    refused("max_header_connections_per_ip = 3000000000000000000", "http.max_header_connections_per_ip");
    refused("max_connections_per_ip = 0", "http.max_connections_per_ip = 0 is out of range");
    // 0 would drop every connection, answer every body 408, or keep-alive without pause.
    for key in ["header_timeout_ms", "body_timeout_ms", "keep_alive_ms", "write_timeout_ms"] {
        refused(&format!("{key} = 0"), &format!("http.{key} = 0 is not allowed"));
    }
    // Hosts that no Host header can match.
    for host in
        ["mcp.example.com:8443", "https://mcp.example.com", "*.example.com", "mcp..example.com", "::1"]
    {
        refused(&format!("allowed_hosts = [{host:?}]"), &format!("{host:?} can never match a Host header"));
    }
}

#[test]
fn listen_streams_are_bounded() {
    let setup = two_tools("bounded");
    setup.serve(&["alpha.wasm"], "max_listen_streams = 2");
    let mut server = StdioServer::start(&setup, &[]);
    for id in 1..=2 {
        server.request(
            json!(id),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        );
        assert_eq!(server.next()["method"], "notifications/subscriptions/acknowledged");
    }
    server.request(json!(3), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let refused = server.next();
    assert_eq!(refused["id"], 3);
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("2 subscriptions/listen streams"));
    // Ending one makes room.
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}));
    let deadline = Instant::now() + WAIT;
    let mut id = 4;
    loop {
        server.request(
            json!(id),
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        );
        let answer = server.next();
        if answer["method"] == "notifications/subscriptions/acknowledged" {
            break;
        }
        assert!(Instant::now() < deadline, "the cancelled stream never freed its place");
        id += 1;
    }
}

#[test]
fn a_2025_client_on_stdio_gets_plain_list_changed_notifications() {
    let setup = two_tools("legacy-stdio");
    let mut server = StdioServer::start(&setup, &[]);
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
    let line = server.lines.recv_timeout(WAIT).unwrap();
    let init: Value = serde_json::from_str(&line).unwrap();
    let legacy_schema = Schema::legacy();
    legacy_schema.check_sent(&init, Some("initialize"));
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true, "{init}");
    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    server.process.reload();
    let line = server.lines.recv_timeout(WAIT).unwrap();
    let changed: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(changed, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    legacy_schema.check("ToolListChangedNotification", &changed);
    // Nothing for a no-op reload: the next line is the answer to the next request.
    server.process.reload();
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let line = server.lines.recv_timeout(WAIT).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["id"], 2, "{line}");
}

/// `cordon serve --http` with its log read.
struct Http {
    process: Process,
    port: u16,
    schema: Schema,
}

impl Http {
    fn start(setup: &Setup) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--http", "127.0.0.1:0", "--config"]).arg(setup.config());
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut process = Process::spawn(command);
        let line = process.wait_log("serving MCP on http://127.0.0.1:");
        let port =
            line.split("http://127.0.0.1:").nth(1).unwrap().split('/').next().unwrap().parse().unwrap();
        Self { process, port, schema: Schema::new() }
    }

    /// Send a request and return the stream, its response head read.
    fn open(&self, method: &str, headers: &[(&str, &str)], body: &str) -> (BufReader<TcpStream>, String) {
        open_request(self.port, method, headers, body)
    }
}

/// Read a chunked SSE stream until a comment (a keep-alive) arrives.
fn wait_keep_alive(reader: &mut BufReader<TcpStream>) {
    let mut size = String::new();
    reader.read_line(&mut size).unwrap();
    let size = usize::from_str_radix(size.trim(), 16).unwrap();
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk).unwrap();
    assert!(chunk.starts_with(b":"), "a keep-alive, not {:?}", String::from_utf8_lossy(&chunk));
}

fn modern(method: &str) -> Vec<(&str, &str)> {
    vec![
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ]
}

#[test]
fn a_listen_stream_over_http_hears_of_changes_with_keep_alives_and_ends_at_shutdown() {
    let setup = two_tools("http-listen");
    setup.serve(&["alpha.wasm"], "");
    std::fs::write(
        setup.config(),
        format!("{}[http]\nkeep_alive_ms = 100\n", std::fs::read_to_string(setup.config()).unwrap()),
    )
    .unwrap();
    let mut server = Http::start(&setup);
    let body = json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": meta()}});
    let (mut stream, head) = server.open("POST", &modern("subscriptions/listen"), &body.to_string());
    assert!(head.starts_with("http/1.1 200") && head.contains("content-type: text/event-stream"), "{head}");
    let mut comments = 0;
    let ack = next_event(&mut stream, &mut comments).unwrap();
    server.schema.check_sent(&ack, None);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
    wait_keep_alive(&mut stream); // a quiet stream is kept open
    // A filtered stream hears nothing of the change.
    let body = json!({"jsonrpc": "2.0", "id": "P", "method": "subscriptions/listen",
        "params": {"notifications": {"promptsListChanged": true}, "_meta": meta()}});
    let (mut prompts, _) = server.open("POST", &modern("subscriptions/listen"), &body.to_string());
    let mut prompt_comments = 0;
    assert_eq!(next_event(&mut prompts, &mut prompt_comments).unwrap()["params"]["notifications"], json!({}));

    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    let line = server.process.reload();
    assert!(line.contains("loaded [beta]"), "{line}");
    let changed = next_event(&mut stream, &mut comments).unwrap();
    server.schema.check_sent(&changed, None);
    assert!(is_list_changed(&changed, &json!("L")), "{changed}");
    server.process.reload(); // no change: nothing sent

    server.process.signal(libc::SIGTERM);
    let last = next_event(&mut stream, &mut comments).unwrap();
    server.schema.check_sent(&last, Some("subscriptions/listen"));
    assert_eq!(last["id"], "L", "the final answer, with nothing between: {last}");
    assert_eq!(last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
    assert!(next_event(&mut stream, &mut comments).is_none(), "the stream ends after the answer");
    let last = next_event(&mut prompts, &mut prompt_comments).unwrap();
    assert_eq!(last["id"], "P", "the filtered stream got no list_changed: {last}");
}

#[test]
fn a_2025_session_gets_list_changed_on_its_get_stream() {
    let setup = two_tools("http-get");
    let mut server = Http::start(&setup);
    let legacy = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (mut answer, head) = server.open("POST", &legacy, &initialize.to_string());
    let session = head
        .lines()
        .find_map(|line| line.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("no session: {head}"))
        .trim()
        .to_owned();
    let mut body = String::new();
    answer.read_to_string(&mut body).unwrap();
    assert!(body.contains(r#""listChanged":true"#), "{body}");

    let (_, head) = server.open("GET", &[("Accept", "application/json"), ("Mcp-Session-Id", &session)], "");
    assert!(head.starts_with("http/1.1 406"), "{head}");
    let (_, head) = server.open("GET", &[("Accept", "text/event-stream"), ("Mcp-Session-Id", "nope")], "");
    assert!(head.starts_with("http/1.1 404"), "{head}");
    let (_, head) = server.open("GET", &[("Accept", "text/event-stream")], "");
    assert!(head.starts_with("http/1.1 405"), "a GET without a session is a 2026 client's: {head}");
    let sse = [("Accept", "text/event-stream"), ("Mcp-Session-Id", session.as_str())];
    let (mut stream, head) = server.open("GET", &sse, "");
    assert!(head.starts_with("http/1.1 200") && head.contains("text/event-stream"), "{head}");
    let (_, head) = server.open("GET", &sse, "");
    assert!(head.starts_with("http/1.1 409"), "one GET stream per session: {head}");

    setup.serve(&["alpha.wasm", "beta.wasm"], "");
    server.process.reload();
    let mut comments = 0;
    let changed = next_event(&mut stream, &mut comments).unwrap();
    assert_eq!(changed, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    Schema::legacy().check("ToolListChangedNotification", &changed);
    server.process.signal(libc::SIGTERM);
    assert!(next_event(&mut stream, &mut comments).is_none(), "the stream ends at shutdown");
}

fn source(setup: &Setup, file: &str, data: bool) -> cordon::runtime::ComponentSource {
    let options = cordon::runtime::ComponentOptions {
        limits: common::quick_limits(),
        data_dir: data.then(|| setup.dir.join(format!("{file}.data"))),
        ..Default::default()
    };
    cordon::runtime::ComponentSource {
        name: file.trim_end_matches(".wasm").to_owned(),
        path: setup.dir.join(file),
        embedded: None,
        options,
    }
}

/// One call of `tool`, its instance torn down as stdio does (which makes a spare).
async fn call_and_refill(runtime: &cordon::runtime::Runtime, tool: &str) -> String {
    let call = runtime.call(tool, &json!({})).await.unwrap();
    let (report, teardown) = call.run_deferring_teardown().await;
    teardown.finish().await;
    common::answer(&report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_components_are_carried_over_and_replaced_ones_drop_their_spares() {
    let setup = two_tools("carry-over");
    let runtime = cordon::runtime::Runtime::new(common::settings(8)).unwrap();
    let sources = || vec![source(&setup, "alpha.wasm", true), source(&setup, "beta.wasm", false)];
    let report = runtime.reload(sources()).await;
    assert_eq!(
        (report.loaded.as_slice(), report.swapped),
        (["alpha".to_owned(), "beta".to_owned()].as_slice(), true)
    );
    let first = runtime.snapshot();
    assert_eq!(call_and_refill(&runtime, "alpha").await, "done");
    assert_eq!(runtime.pool_usage().spares, 1, "a finished call leaves a spare");

    // The same bytes and options: nothing compiled, nothing swapped, the spare kept.
    let report = runtime.reload(sources()).await;
    assert!(report.loaded.is_empty() && !report.swapped, "{report:?}");
    assert_eq!(report.unchanged, ["alpha", "beta"]);
    assert!(Arc::ptr_eq(&first, &runtime.snapshot()), "the very same set");
    assert_eq!(runtime.pool_usage().spares, 1);

    // Other options for alpha make it a new component; beta is carried over as it is.
    let mut changed = sources();
    changed[0].options.limits.memory_bytes /= 2;
    let report = runtime.reload(changed).await;
    assert_eq!(
        (report.loaded.as_slice(), report.unchanged.as_slice()),
        (["alpha".to_owned()].as_slice(), ["beta".to_owned()].as_slice())
    );
    assert_eq!(runtime.pool_usage().spares, 0, "the replaced component's spare is dropped");
    assert_eq!(runtime.snapshot().generation(), first.generation() + 1);
    // A call on the old snapshot still runs (on the old version), and leaves no spare.
    let old_call = runtime.call_in(&first, None, "alpha", &json!({}), Default::default()).await.unwrap();
    let (report, teardown) = old_call.run_deferring_teardown().await;
    teardown.finish().await;
    assert_eq!(common::answer(&report), "done");
    assert_eq!(runtime.pool_usage().spares, 0, "a retired component makes no spare");
    // Removing beta drops it from the set.
    let report = runtime.reload(vec![source(&setup, "alpha.wasm", true)]).await;
    assert_eq!(report.removed, ["beta"]);
    let names: Vec<String> = runtime.snapshot().tools().map(|tool| tool.name.clone()).collect();
    assert_eq!(names, ["alpha"]);
    drop(first);
    assert_eq!(runtime.pool_usage().component_instances, 0, "no instance outlives its component");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_served_wins_over_a_new_component_that_clashes_with_it() {
    let setup = two_tools("precedence");
    setup.component("alpha2.wasm", &WatGuest::new("alpha", LOCK_BODY));
    let runtime = cordon::runtime::Runtime::new(common::settings(8)).unwrap();
    runtime.reload(vec![source(&setup, "alpha.wasm", true)]).await;
    // Listed first, a new component with alpha's tool name; then one with its directory.
    let same_tool = source(&setup, "alpha2.wasm", false);
    let mut same_dir = source(&setup, "beta.wasm", false);
    same_dir.options.data_dir = Some(setup.dir.join("alpha.wasm.data"));
    let report = runtime.reload(vec![same_tool, same_dir, source(&setup, "alpha.wasm", true)]).await;
    assert_eq!(report.unchanged, ["alpha"]);
    assert!(report.loaded.is_empty(), "{report:?}");
    let problems: Vec<String> = report.failed.iter().map(ToString::to_string).collect();
    assert!(
        problems[0].contains("alpha2.wasm") && problems[0].contains("also offered by component alpha"),
        "{problems:?}"
    );
    assert!(problems[1].contains("beta.wasm") && problems[1].contains("overlaps"), "{problems:?}");
    assert!(!report.swapped);
    assert_eq!(call_and_refill(&runtime, "alpha").await, "done", "the served alpha, not the new one");
}

/// A component whose new version fails keeps its old one even when a new component
/// listed before it in the config offers the same tool: updates are loaded first. Before,
/// the new component loaded, and the old version, clashing with it, was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_update_keeps_its_old_version_whatever_the_config_order() {
    let setup = two_tools("failed-update");
    setup.component("alpha2.wasm", &WatGuest::new("alpha", LOCK_BODY));
    let runtime = cordon::runtime::Runtime::new(common::settings(8)).unwrap();
    runtime.reload(vec![source(&setup, "alpha.wasm", true)]).await;
    std::fs::write(setup.dir.join("alpha.wasm"), b"not a component").unwrap();
    let report =
        runtime.reload(vec![source(&setup, "alpha2.wasm", false), source(&setup, "alpha.wasm", true)]).await;
    assert_eq!(report.unchanged, ["alpha"], "{report:?}");
    assert!(report.loaded.is_empty() && report.removed.is_empty(), "{report:?}");
    let problems: Vec<String> = report.failed.iter().map(ToString::to_string).collect();
    assert!(
        problems
            .iter()
            .any(|problem| problem.contains("alpha2.wasm")
                && problem.contains("also offered by component alpha")),
        "{problems:?}"
    );
    assert_eq!(call_and_refill(&runtime, "alpha").await, "done", "the old alpha still serves");
}

/// A version a reload replaced or removed still runs its calls, and they hold its grants:
/// a new grant inside or around one of them waits until they end. Before, a component
/// granted a directory inside a removed one's was loaded at once, and a call the removed
/// one still ran read and wrote its files, outside the new grant's quota and move lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_grant_overlapping_a_version_still_running_waits_for_its_calls() {
    let setup = two_tools("draining-grants");
    let runtime = cordon::runtime::Runtime::new(common::settings(8)).unwrap();
    let report = runtime.reload(vec![source(&setup, "alpha.wasm", true)]).await;
    assert_eq!(report.loaded, ["alpha"]);
    // A call of alpha's, begun and not yet run: its store holds alpha's grants.
    let in_flight = runtime.call("alpha", &json!({})).await.unwrap();
    // alpha removed; beta granted a directory inside alpha's.
    let mut inside = source(&setup, "beta.wasm", false);
    inside.options.data_dir = Some(setup.dir.join("alpha.wasm.data/beta"));
    let report = runtime.reload(vec![inside.clone()]).await;
    assert_eq!(report.removed, ["alpha"]);
    assert!(report.loaded.is_empty(), "{report:?}");
    let failure = &report.failed[0];
    assert!(failure.busy, "{failure}");
    assert!(
        failure.to_string().contains("overlaps") && failure.to_string().contains("component alpha"),
        "{failure}"
    );
    // alpha is served no more, but the call's store still holds its grants: still busy.
    let report = runtime.reload(vec![inside.clone()]).await;
    assert!(report.loaded.is_empty(), "{report:?}");
    assert!(report.failed[0].busy, "{}", report.failed[0]);
    // Once the call has ended, the same reload loads it.
    let (answer, teardown) = in_flight.run_deferring_teardown().await;
    teardown.finish().await;
    assert_eq!(common::answer(&answer), "done");
    let report = runtime.reload(vec![inside]).await;
    assert_eq!(report.loaded, ["beta"], "{report:?}");

    // A component moving its own directory inside the one its served version has: never
    // loadable while that version is served, so said at once, not waited for.
    let mut moved = source(&setup, "beta.wasm", false);
    moved.options.data_dir = Some(setup.dir.join("alpha.wasm.data/beta/deeper"));
    let report = runtime.reload(vec![moved]).await;
    let failure = &report.failed[0];
    assert!(!failure.busy && failure.to_string().contains("the version it replaces"), "{failure}");
    assert_eq!(report.unchanged, ["beta"], "the served version stays");
    // Its same directory, with other options, is the same grant: loaded.
    let mut same = source(&setup, "beta.wasm", false);
    same.options.data_dir = Some(setup.dir.join("alpha.wasm.data/beta"));
    same.options.limits.memory_bytes /= 2;
    assert_eq!(runtime.reload(vec![same]).await.loaded, ["beta"]);
}

/// Two components swapping directories in one reload: each new version meets the other's
/// served one, which stays when that one's update fails too. Said as it is (not busy, so
/// the reloader does not retry forever), and both keep their versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_swapping_directories_are_told_to_do_it_in_two_reloads() {
    let setup = two_tools("swapping-grants");
    let runtime = cordon::runtime::Runtime::new(common::settings(8)).unwrap();
    let with_dir = |file: &str, dir: &str| {
        let mut component = source(&setup, file, false);
        component.options.data_dir = Some(setup.dir.join(dir));
        component
    };
    let report = runtime.reload(vec![with_dir("alpha.wasm", "one"), with_dir("beta.wasm", "two")]).await;
    assert_eq!(report.loaded, ["alpha", "beta"]);
    let report = runtime.reload(vec![with_dir("alpha.wasm", "two"), with_dir("beta.wasm", "one")]).await;
    assert!(report.loaded.is_empty() && !report.swapped, "{report:?}");
    assert_eq!(report.unchanged, ["alpha", "beta"]);
    assert_eq!(report.failed.len(), 2, "{report:?}");
    // The first meets the other's served version; the second, the first's kept one.
    assert!(report.failed.iter().all(|failure| !failure.busy), "{report:?}");
    assert!(report.failed[0].to_string().contains("which stays served"), "{}", report.failed[0]);
    assert!(
        report.failed[1].to_string().contains("each component needs a directory of its own"),
        "{}",
        report.failed[1]
    );
}

#[test]
fn watch_follows_a_config_behind_a_swapped_symlink_as_kubernetes_mounts_it() {
    // A ConfigMap volume: cordon.toml -> ..data/cordon.toml, ..data -> a versioned
    // directory; an update makes a new directory and renames a new `..data` link over the
    // old one. The file's own path is never written.
    let setup = two_tools("configmap");
    let volume = setup.dir.join("volume");
    let version = |name: &str, files: &[&str]| {
        let dir = volume.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("[server]\ncache = false\n");
        for file in files {
            text.push_str(&format!("[[components]]\npath = {:?}\n", setup.dir.join(file)));
        }
        std::fs::write(dir.join("cordon.toml"), text).unwrap();
    };
    version("v1", &["alpha.wasm"]);
    std::os::unix::fs::symlink("v1", volume.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/cordon.toml", volume.join("cordon.toml")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command.args(["serve", "--stdio", "--watch", "--config"]).arg(volume.join("cordon.toml"));
    command.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut process = Process::spawn(command);
    process.wait_log("loaded 1 tools: alpha");
    version("v2", &["alpha.wasm", "beta.wasm"]);
    std::os::unix::fs::symlink("v2", volume.join("..data_tmp")).unwrap();
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
    process.wait_log("a watched file changed");
    let line = process.reload_finished();
    assert!(line.contains("loaded [beta]") && line.contains("unchanged [alpha]"), "{line}");
}
