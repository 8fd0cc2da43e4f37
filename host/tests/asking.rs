//! A 2025-11-25 client asked during a call, and its resource subscriptions, on real
//! `cordon serve` processes over stdio and Streamable HTTP: the server's requests
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) go out on the call's own
//! stream and the client's responses come back to it; a response to nothing waiting is
//! dropped and the server keeps serving; `resources/subscribe` and `unsubscribe` (2025-11-25
//! only) and `notifications/resources/updated` when a reload replaces the component that
//! serves a subscribed resource. Every message the server sends is checked against the
//! official 2025-11-25 schema.

use crate::common;
use common::server::{Process, WAIT, open_request};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::fresh_dir;
use common::wire::{Schema, meta};
use serde_json::{Value, json};

/// A directory with a config serving a copy of the conformance fixture (which offers
/// resources), so that a test may replace its bytes and reload.
struct Setup {
    dir: PathBuf,
}

impl Setup {
    fn new(what: &str) -> Self {
        let dir = fresh_dir(what);
        let fixture = cordon::paths::default_tools_dir().join("conformance-fixture.wasm");
        assert!(fixture.is_file(), "{} is missing: run `cargo xtask guests` first", fixture.display());
        std::fs::copy(&fixture, dir.join("fixture.wasm")).unwrap();
        std::fs::write(
            dir.join("cordon.toml"),
            "[server]\ncache = false\n\n[[components]]\npath = \"fixture.wasm\"\n\
             limits = { grace_ms = 100, idle_timeout_ms = 0, max_duration_ms = 3000 }\n",
        )
        .unwrap();
        Self { dir }
    }

    /// The hostile tools alone, with `server` (keys of `[server]`).
    fn hostile(what: &str, server: &str) -> Self {
        Self::hostile_within(what, server, 60_000)
    }

    /// [`Self::hostile`], each call of the tools within `max_duration_ms`.
    fn hostile_within(what: &str, server: &str, max_duration_ms: u64) -> Self {
        let dir = fresh_dir(what);
        let hostile = cordon::paths::default_tools_dir().join("hostile.wasm");
        assert!(hostile.is_file(), "{} is missing: run `cargo xtask guests` first", hostile.display());
        // A data directory, where its cleanup writes why it ran and the note it was given.
        std::fs::create_dir(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("cordon.toml"),
            format!(
                "[server]\ncache = false\n{server}\n[[components]]\npath = {:?}\ndata_dir = \"data\"\n\
                 limits = {{ grace_ms = 100, idle_timeout_ms = 0, max_duration_ms = {max_duration_ms} }}\n",
                hostile.display().to_string()
            ),
        )
        .unwrap();
        Self { dir }
    }

    /// What the hostile component's last cleanup wrote: its reason and note, debug-printed.
    fn cleanup_reason(&self) -> String {
        std::fs::read_to_string(self.dir.join("data/cleanup-reason")).unwrap_or_default()
    }

    fn config(&self) -> PathBuf {
        self.dir.join("cordon.toml")
    }

    /// Give the hostile tools of [`Self::hostile`] a cleanup budget of `ms`; the config's
    /// text before.
    fn raise_cleanup_budget(&self, ms: u64) -> String {
        let config = std::fs::read_to_string(self.config()).unwrap();
        let raised = config
            .replace("max_duration_ms = 60000 }", &format!("max_duration_ms = 60000, cleanup_ms = {ms} }}"));
        assert_ne!(raised, config);
        std::fs::write(self.config(), raised).unwrap();
        config
    }

    /// Give the fixture new bytes (a custom section appended: the same component, another
    /// file), so that a reload replaces it.
    fn touch_fixture(&self, salt: u8) {
        let path = self.dir.join("fixture.wasm");
        let mut bytes = std::fs::read(&path).unwrap();
        // A custom section: id 0, size, a name ("t") and one byte of payload.
        bytes.extend_from_slice(&[0, 3, 1, b't', salt]);
        let temporary = path.with_extension("partial");
        std::fs::write(&temporary, bytes).unwrap();
        std::fs::rename(&temporary, &path).unwrap();
    }
}

/// A 2025-11-25 client of `cordon serve --stdio`.
struct Stdio2025 {
    process: Process,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    schema: Schema,
    /// Request id → its method, to check each answer against its result's schema.
    methods: HashMap<String, String>,
    next_id: i64,
}

impl Stdio2025 {
    /// Start the server and initialize, declaring `capabilities`.
    fn start(setup: &Setup, capabilities: Value) -> Self {
        Self::start_logging(setup, capabilities, "info,cordon::runtime::call=debug")
    }

    /// [`Stdio2025::start`], the server logging as `filter` says.
    fn start_logging(setup: &Setup, capabilities: Value, filter: &str) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--stdio", "--config"]).arg(setup.config());
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut process = Process::spawn_logging(command, filter);
        let stdin = process.child.stdin.take().unwrap();
        let stdout = process.child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        process.wait_log("loaded");
        let mut client =
            Self { process, stdin, lines, schema: Schema::legacy(), methods: HashMap::new(), next_id: 1 };
        let initialized = client.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "asking-test", "version": "1"}}),
        );
        assert_eq!(initialized["result"]["protocolVersion"], "2025-11-25", "{initialized}");
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Send a request; returns its id.
    fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.methods.insert(id.to_string(), method.to_owned());
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message within `timeout`, checked against the schema.
    fn recv(&mut self, timeout: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        let message: Value = serde_json::from_str(&line).unwrap();
        let method = match message.get("method") {
            Some(_) => None,
            None => message.get("id").and_then(|id| self.methods.get(&id.to_string())).cloned(),
        };
        self.schema.check_sent(&message, method.as_deref());
        Some(message)
    }

    fn next(&mut self) -> Value {
        self.recv(WAIT).expect("a message within the deadline")
    }

    /// A request and its answer (nothing else may come first).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        let answer = self.next();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

fn updated(uri: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
}

#[test]
fn stdio_subscriptions_hear_of_a_reloaded_component_and_unsubscribed_ones_do_not() {
    let setup = Setup::new("subscribe-stdio");
    let mut client = Stdio2025::start(&setup, json!({}));
    // Subscribing is advertised in 2025-11-25.
    let answer = client.request("resources/subscribe", json!({"uri": "test://static-text"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    // A URI nothing serves may be subscribed to (the conformance suite's
    // `test://watched-resource`): nothing changes for it at a reload.
    let answer = client.request("resources/subscribe", json!({"uri": "test://watched-resource"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    let answer = client.request("resources/subscribe", json!({"uri": "test://template/7/data"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    let answer = client.request("resources/unsubscribe", json!({"uri": "test://template/7/data"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    // Unsubscribing from what was never subscribed is no error; a missing uri is one.
    let answer = client.request("resources/unsubscribe", json!({"uri": "test://never"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    let answer = client.request("resources/subscribe", json!({}));
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    setup.touch_fixture(1);
    client.process.reload();
    assert_eq!(client.next(), updated("test://static-text"));
    // Nothing else was sent for that reload: the next message is a ping's answer.
    let answer = client.request("ping", json!({}));
    assert_eq!(answer["result"], json!({}));

    // A reload that leaves the fixture as it was sends nothing.
    client.process.reload();
    let answer = client.request("ping", json!({}));
    assert_eq!(answer["result"], json!({}), "a no-op reload sent something first: {answer}");

    // Unsubscribed: the next replacement sends nothing.
    let answer = client.request("resources/unsubscribe", json!({"uri": "test://static-text"}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    setup.touch_fixture(2);
    client.process.reload();
    let answer = client.request("ping", json!({}));
    assert_eq!(answer["result"], json!({}), "an unsubscribed resource was updated: {answer}");
}

/// What subscriptions keep is charged to the server's memory bound for requests
/// (`max_queued_request_kb`) for as long as it is kept: ten thousand sessions could
/// otherwise keep more than any bound admits. Past it a subscription is refused as a busy
/// server; an unsubscribe gives the room back.
#[test]
fn subscriptions_are_charged_to_the_servers_memory_bound() {
    let setup = Setup::new("subscribe-charged");
    let config = std::fs::read_to_string(setup.config()).unwrap();
    let config = config.replace("[server]\n", "[server]\nmax_queued_request_kb = 32\n");
    std::fs::write(setup.config(), config).unwrap();
    let mut client = Stdio2025::start(&setup, json!({}));
    let uri = |n: usize| format!("test://charged/{n:04}/{}", "x".repeat(2000));
    let mut kept = 0;
    let refused = loop {
        let answer = client.request("resources/subscribe", json!({"uri": uri(kept)}));
        if answer.get("error").is_some() {
            break answer;
        }
        kept += 1;
        assert!(kept < 16, "16 subscriptions of 2 KiB were kept within a bound of 32 KiB");
    };
    assert!(kept >= 8, "only {kept} subscriptions of 2 KiB fit in 32 KiB");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("busy"), "{refused}");
    let answer = client.request("resources/unsubscribe", json!({"uri": uri(0)}));
    assert_eq!(answer["result"], json!({}), "{answer}");
    let answer = client.request("resources/subscribe", json!({"uri": uri(kept)}));
    assert_eq!(answer["result"], json!({}), "room was given back: {answer}");
}

/// A session may live an hour idle, so what its subscriptions keep is bounded in count, in
/// bytes, and per URI; re-subscribing to a kept URI is free, unsubscribing gives room back.
#[test]
fn a_sessions_subscriptions_are_bounded_in_count_and_bytes() {
    use cordon::dispatch::{MAX_SUBSCRIBED_BYTES, MAX_SUBSCRIBED_URI_BYTES, MAX_SUBSCRIPTIONS};
    let setup = Setup::new("subscribe-bounds");
    let mut client = Stdio2025::start(&setup, json!({}));
    let mut subscribe = |uri: &str| client.request("resources/subscribe", json!({"uri": uri}));
    let long = |n: usize, length: usize| format!("test://long/{n:04}/{}", "x".repeat(length - 17));

    let too_long = subscribe(&long(0, MAX_SUBSCRIBED_URI_BYTES + 1));
    assert_eq!(too_long["error"]["code"], -32602, "{too_long}");
    assert!(too_long["error"]["message"].as_str().unwrap().contains("at most 4096"), "{too_long}");
    let fitting = MAX_SUBSCRIBED_BYTES / MAX_SUBSCRIBED_URI_BYTES;
    for n in 0..fitting {
        let answer = subscribe(&long(n, MAX_SUBSCRIBED_URI_BYTES));
        assert_eq!(answer["result"], json!({}), "{n}: {answer}");
    }
    let over = subscribe("test://one-byte-more");
    assert_eq!(over["error"]["code"], -32602, "{over}");
    assert!(over["error"]["message"].as_str().unwrap().contains("65536 bytes of URIs"), "{over}");
    assert_eq!(subscribe(&long(0, MAX_SUBSCRIBED_URI_BYTES))["result"], json!({}), "kept already");
    let unsubscribed =
        client.request("resources/unsubscribe", json!({"uri": long(0, MAX_SUBSCRIBED_URI_BYTES)}));
    assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
    let answer = client.request("resources/subscribe", json!({"uri": "test://one-byte-more"}));
    assert_eq!(answer["result"], json!({}), "room was given back: {answer}");

    // The count: with the long ones gone, short URIs up to the most a session keeps.
    for n in 1..fitting {
        client.request("resources/unsubscribe", json!({"uri": long(n, MAX_SUBSCRIBED_URI_BYTES)}));
    }
    let mut subscribe = |uri: &str| client.request("resources/subscribe", json!({"uri": uri}));
    for n in 1..MAX_SUBSCRIPTIONS {
        let answer = subscribe(&format!("t://{n}"));
        assert_eq!(answer["result"], json!({}), "{n}: {answer}");
    }
    let one_more = subscribe("t://one-more");
    assert!(one_more["error"]["message"].as_str().unwrap().contains("1024 subscriptions"), "{one_more}");
}

#[test]
fn subscriptions_are_2025_only_and_advertised_there() {
    let setup = Setup::new("subscribe-eras");
    let mut client = Stdio2025::start(&setup, json!({}));
    // The 2025-11-25 capabilities say so.
    let again = client.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let resources = json!({"subscribe": true, "listChanged": true});
    assert_eq!(again["result"]["capabilities"]["resources"], resources, "{again}");
    // A 2026-07-28 request on the same process: no such method, and discovery does not offer it.
    let mut params = json!({"uri": "test://static-text"});
    params["_meta"] = meta();
    let id = json!(900);
    client.send(json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe", "params": params}));
    let line = client.lines.recv_timeout(WAIT).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    Schema::new().check_sent(&answer, None);
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (id, json!(-32601)), "{answer}");
    client
        .send(json!({"jsonrpc": "2.0", "id": 901, "method": "server/discover", "params": {"_meta": meta()}}));
    let line = client.lines.recv_timeout(WAIT).unwrap();
    let discovered: Value = serde_json::from_str(&line).unwrap();
    Schema::new().check_sent(&discovered, Some("server/discover"));
    // No `subscribe` in 2026-07-28 (list changes still are).
    assert_eq!(
        discovered["result"]["capabilities"]["resources"],
        json!({"listChanged": true}),
        "{discovered}"
    );
}

#[test]
fn stdio_responses_to_nothing_waiting_are_dropped_and_the_server_keeps_serving() {
    let setup = Setup::new("stray-stdio");
    let mut client = Stdio2025::start(&setup, json!({"elicitation": {}}));
    client.send(json!({"jsonrpc": "2.0", "id": 4242, "result": {"action": "accept"}}));
    client.send(json!({"jsonrpc": "2.0", "id": "nope", "error": {"code": -1, "message": "no"}}));
    // Malformed ones too: a null id, both result and error.
    client.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}));
    client.send(json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}));
    let answer = client.request("ping", json!({}));
    assert_eq!(answer["result"], json!({}), "nothing answers a response: {answer}");
}

/// A raw HTTP/1.1 client of one `cordon serve --http`.
struct Http {
    process: Process,
    port: u16,
}

impl Http {
    fn start(setup: &Setup) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--http", "127.0.0.1:0", "--config"]).arg(setup.config());
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut process = Process::spawn_logging(command, "info,cordon::runtime::call=debug");
        let line = process.wait_log("serving MCP on http://127.0.0.1:");
        let port =
            line.split("http://127.0.0.1:").nth(1).unwrap().split('/').next().unwrap().parse().unwrap();
        Self { process, port }
    }

    /// Send a request and return the stream, its response head read (names lower-cased).
    fn open(&self, method: &str, headers: &[(&str, &str)], body: &str) -> (BufReader<TcpStream>, String) {
        open_request(self.port, method, headers, body)
    }

    /// Initialize a 2025-11-25 session declaring `capabilities`; its id.
    fn initialize(&self, capabilities: Value) -> String {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "asking-test", "version": "1"}}});
        let (mut answer, head) = self.open("POST", &LEGACY, &initialize.to_string());
        let session = head
            .lines()
            .find_map(|line| line.strip_prefix("mcp-session-id: "))
            .unwrap_or_else(|| panic!("no session: {head}"))
            .trim()
            .to_owned();
        let mut body = String::new();
        answer.read_to_string(&mut body).unwrap();
        let message: Value = serde_json::from_str(&body).unwrap();
        Schema::legacy().check_sent(&message, Some("initialize"));
        session
    }

    /// POST `message` to the session; the status and the one JSON message answered, if any.
    fn post(&self, session: &str, message: &Value) -> (u16, Option<Value>) {
        let headers = [LEGACY[0], LEGACY[1], ("Mcp-Session-Id", session)];
        let (mut reader, head) = self.open("POST", &headers, &message.to_string());
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let mut body = String::new();
        reader.read_to_string(&mut body).unwrap();
        // Only a 200 carries a JSON-RPC message (a refusal's body is plain JSON text).
        let answer = (status == 200).then(|| serde_json::from_str::<Value>(&body).unwrap());
        if let Some(answer) = &answer {
            Schema::legacy().check_sent(answer, message["method"].as_str());
        }
        (status, answer)
    }
}

const LEGACY: [(&str, &str); 2] =
    [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];

/// The next SSE event of a chunked stream, checked against the 2025-11-25 schema: `Some`
/// for a message, `None` at its end (keep-alive comments are skipped).
fn next_event(reader: &mut BufReader<TcpStream>, method: Option<&str>) -> Option<Value> {
    let message = common::server::next_event(reader, &mut 0)?;
    let answers = message.get("method").is_none();
    Schema::legacy().check_sent(&message, method.filter(|_| answers));
    Some(message)
}

#[test]
fn http_subscriptions_hear_of_a_reloaded_component_on_the_session_stream() {
    let setup = Setup::new("subscribe-http");
    let mut server = Http::start(&setup);
    let session = server.initialize(json!({}));
    let subscribe = |uri: &str, method: &str| {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"uri": uri}});
        let (status, answer) = server.post(&session, &request);
        assert_eq!((status, answer.as_ref().map(|answer| answer["result"].clone())), (200, Some(json!({}))));
    };
    subscribe("test://static-binary", "resources/subscribe");
    subscribe("test://static-text", "resources/subscribe");
    subscribe("test://static-text", "resources/unsubscribe");
    let sse = [("Accept", "text/event-stream"), ("Mcp-Session-Id", session.as_str())];
    let (mut stream, head) = server.open("GET", &sse, "");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    setup.touch_fixture(1);
    server.process.reload();
    assert_eq!(next_event(&mut stream, None), Some(updated("test://static-binary")));
    // SIGTERM ends the stream: nothing else came for that reload.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(server.process.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    assert_eq!(next_event(&mut stream, None), None, "only the subscribed resource was updated");
}

#[test]
fn http_responses_to_nothing_waiting_are_accepted_and_dropped() {
    let setup = Setup::new("stray-http");
    let server = Http::start(&setup);
    let session = server.initialize(json!({"sampling": {}}));
    let stray = json!({"jsonrpc": "2.0", "id": 77, "result": {"roots": []}});
    assert_eq!(server.post(&session, &stray), (202, None));
    assert_eq!(server.post("not-a-session", &stray).0, 404, "a response to a session that is gone");
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let (status, answer) = server.post(&session, &ping);
    assert_eq!((status, answer.unwrap()["result"].clone()), (200, json!({})));
}

/// The text of a call's answer.
fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {answer}")).to_owned()
}

/// The result a client answers an `elicitation/create` with.
fn accept_user() -> Value {
    json!({"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}})
}

/// The fixture's tool that asks for the client's roots.
const ROOTS_TOOL: &str = "test_input_required_result_list_roots";

const ALL: fn() -> Value = || json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}});

impl Stdio2025 {
    /// Call `tool`; the request the server sends the client in return (checked to be
    /// `method`), and the call's id.
    fn call_until_asked(&mut self, tool: &str, arguments: Value, method: &str) -> (Value, Value) {
        let id = self.send_request("tools/call", json!({"name": tool, "arguments": arguments}));
        let request = self.next();
        assert_eq!(request["method"], method, "{request}");
        (id, request)
    }

    /// Stop the server (SIGTERM) and wait for the cleanup of the call of `request` (a tool
    /// or a method) it stopped between rounds.
    fn shut_down_cleaning_up(&mut self, request: &str) {
        self.process.signal(libc::SIGTERM);
        let cleanup = self.process.wait_log("cleanup completed");
        assert!(cleanup.contains("reason=shutdown") && cleanup.contains(request), "{cleanup}");
    }

    /// Answer the server's `request` with `result`; the call's answer that follows.
    fn answer_with(&mut self, request: &Value, result: Value, call: &Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}));
        let answer = self.next();
        assert_eq!(&answer["id"], call, "{answer}");
        answer
    }
}

#[test]
fn stdio_elicitation_sampling_and_roots_round_trip() {
    let setup = Setup::new("round-trip-stdio");
    let mut client = Stdio2025::start(&setup, ALL());

    let (call, request) =
        client.call_until_asked("test_elicitation", json!({"message": "Who are you?"}), "elicitation/create");
    assert_eq!(request["params"]["message"], "Who are you?");
    assert_eq!(request["params"]["requestedSchema"]["required"], json!(["username", "email"]));
    let answer = client.answer_with(&request, accept_user(), &call);
    let said = text(&answer);
    assert!(said.contains("accept") && said.contains("ada@example.com"), "{said}");

    let (call, request) = client.call_until_asked(
        "test_sampling",
        json!({"prompt": "Capital of France?"}),
        "sampling/createMessage",
    );
    assert_eq!(request["params"]["messages"][0]["content"]["text"], "Capital of France?");
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"});
    let answer = client.answer_with(&request, sampled, &call);
    assert_eq!(text(&answer), "LLM response: Paris");

    let (call, request) = client.call_until_asked(ROOTS_TOOL, json!({}), "roots/list");
    let roots = json!({"roots": [{"uri": "file:///home/ada", "name": "home"}]});
    let answer = client.answer_with(&request, roots, &call);
    assert!(text(&answer).contains("file:///home/ada"), "{answer}");

    // A client error answer ends the call with a tool error that says so.
    let (call, request) =
        client.call_until_asked("test_elicitation", json!({"message": "Again?"}), "elicitation/create");
    client.send(
        json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "user went away"}}),
    );
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&call, &json!(true)), "{answer}");
    assert!(text(&answer).contains("user went away"), "{answer}");
    // A malformed answer too; a second answer to the same id is dropped.
    let (call, request) =
        client.call_until_asked("test_elicitation", json!({"message": "Once more?"}), "elicitation/create");
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "perhaps"}}));
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&call, &json!(true)), "{answer}");
    assert!(text(&answer).contains("malformed"), "{answer}");
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": accept_user()}));
    assert_eq!(client.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn stdio_a_prompt_that_asks_is_answered_through_the_client() {
    let setup = Setup::new("prompt-stdio");
    let mut client = Stdio2025::start(&setup, ALL());
    let prompt = json!({"name": "test_input_required_result_prompt", "arguments": {}});

    let get = client.send_request("prompts/get", prompt.clone());
    let request = client.next();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "What context should the prompt use?");
    let context = json!({"action": "accept", "content": {"context": "the 2025 bridge"}});
    let answer = client.answer_with(&request, context, &get);
    assert_eq!(
        answer["result"]["messages"][0]["content"]["text"], "Use this context: the 2025 bridge",
        "{answer}"
    );

    // A client that answers with an error ends the prompt with a JSON-RPC error saying so.
    let get = client.send_request("prompts/get", prompt.clone());
    let request = client.next();
    client.send(
        json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "user went away"}}),
    );
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["error"]["code"]), (&get, &json!(-32603)), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("The prompt") && message.contains("user went away"), "{answer}");
    // Its guest ran a round and is given up: it is cleaned up.
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("prompts/get"), "{cleanup}");

    // One that keeps declining is asked again, up to the round limit.
    let get = client.send_request("prompts/get", prompt);
    for _ in 1..cordon::dispatch::MAX_INPUT_ROUNDS {
        let request = client.next();
        assert_eq!(request["method"], "elicitation/create", "{request}");
        client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "decline"}}));
    }
    let answer = client.next();
    assert_eq!(answer["id"], get, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("the limit is 8 rounds"), "{answer}");
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("prompts/get"), "{cleanup}");
    assert_eq!(client.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_client_that_did_not_declare_a_capability_is_not_asked() {
    let setup = Setup::new("undeclared-stdio");
    let mut client = Stdio2025::start(&setup, json!({"roots": {}}));
    let id =
        client.send_request("tools/call", json!({"name": "test_sampling", "arguments": {"prompt": "x"}}));
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&id, &json!(true)), "{answer}");
    assert!(text(&answer).contains("sampling"), "the error names the capability: {answer}");
}

/// A 2025-era client is sent sampling with tools only if it declared `sampling.tools` at
/// initialize. Before, declaring `sampling` was enough.
#[test]
fn sampling_with_tools_goes_only_to_a_client_that_declared_it() {
    let setup = Setup::hostile("sampling-tools-2025", "");
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 5,
        "tools": [{"name": "t", "inputSchema": {"type": "object"}}],
    });
    let arguments = json!({"sample": params});
    let mut plain = Stdio2025::start(&setup, json!({"sampling": {}}));
    let id = plain.send_request("tools/call", json!({"name": "ask_as_told", "arguments": arguments}));
    let answer = plain.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&id, &json!(true)), "{answer}");
    assert!(text(&answer).contains("`sampling.tools`"), "{answer}");
    let mut with_tools = Stdio2025::start(&setup, json!({"sampling": {"tools": {}}}));
    let (_call, request) = with_tools.call_until_asked("ask_as_told", arguments, "sampling/createMessage");
    assert_eq!(request["params"]["tools"][0]["name"], "t", "{request}");
}

#[test]
fn a_cancel_while_the_client_is_asked_stops_the_call_and_runs_its_cleanup() {
    let setup = Setup::new("cancel-asked-stdio");
    let mut client = Stdio2025::start(&setup, ALL());
    let (call, request) =
        client.call_until_asked("test_elicitation", json!({"message": "Wait"}), "elicitation/create");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call}}));
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("test_elicitation"), "{cleanup}");
    // Nothing is answered, and an answer that comes now is dropped.
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": accept_user()}));
    let answer = client.request("ping", json!({}));
    assert_eq!(answer["result"], json!({}), "the cancelled call was answered: {answer}");
}

/// A call whose first round ran, cancelled while its next round waits for a slot: its
/// guest has run, so its cleanup runs (once a slot frees), as when it is cancelled while
/// the client is asked.
#[test]
fn a_cancel_while_a_later_round_waits_for_a_slot_still_runs_the_cleanup() {
    let setup = Setup::hostile("cancel-queued-round", "max_concurrent_calls = 1\nqueue_timeout_ms = 60000");
    let mut client = Stdio2025::start_logging(&setup, ALL(), "info,cordon::runtime=debug");
    let cancel = |client: &mut Stdio2025, call: &Value| {
        client.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call}}),
        );
    };
    let (call, request) = client.call_until_asked("ask_then_spin", json!({}), "roots/list");
    // The only slot, taken by a call parked in the host: a probe queues behind it.
    let parked = client.send_request("tools/call", json!({"name": "park", "arguments": {"ms": 60000}}));
    let probe = client.send_request("tools/call", json!({"name": "park", "arguments": {"ms": 1}}));
    let queued = client.process.wait_log("queued: no slot is free");
    assert!(queued.contains("park"), "{queued}");
    cancel(&mut client, &probe);
    // The client answers; the second round queues for the slot, and is cancelled there.
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": []}}));
    let queued = client.process.wait_log("queued: no slot is free");
    assert!(queued.contains("ask_then_spin"), "{queued}");
    cancel(&mut client, &call);
    cancel(&mut client, &parked);
    let mut cleanups = Vec::new();
    while !cleanups.iter().any(|line: &String| line.contains("ask_then_spin")) {
        let line = client.process.wait_log("cleanup completed");
        assert!(line.contains("reason=cancelled"), "{line}");
        cleanups.push(line);
        assert!(cleanups.len() <= 2, "{cleanups:#?}");
    }
    // Nothing was answered to the cancelled calls; the server goes on serving.
    assert_eq!(client.request("ping", json!({}))["result"], json!({}));
}

/// A cancelled request leaves flight: nothing of it is kept, and its id is free again.
/// Before, a cancelled call (which sends no answer) stayed in the connection's table with
/// its handle for as long as the connection lived, uncharged, so a client that called and
/// cancelled in a loop grew it without bound, and its ids were refused as in use.
#[test]
fn a_cancelled_requests_id_is_free_again() {
    let setup = Setup::hostile("cancel-leaves", "");
    let mut client = Stdio2025::start_logging(&setup, ALL(), "info");
    for _ in 0..3 {
        let params = json!({"name": "park", "arguments": {"ms": 60000}});
        client.send(json!({"jsonrpc": "2.0", "id": "again", "method": "tools/call", "params": params}));
        client.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "again"}}),
        );
        let ended = client.process.wait_log("outcome=\"cancelled\"");
        assert!(ended.contains("tool=\"park\""), "{ended}");
    }
    let params = json!({"name": "park", "arguments": {"ms": 1}});
    client.send(json!({"jsonrpc": "2.0", "id": "again", "method": "tools/call", "params": params}));
    let answer = client.next();
    assert_eq!((&answer["id"], answer.get("error")), (&json!("again"), None), "{answer}");
}

/// A client's answers are held by the round that runs with them, so they stay charged to
/// the server's bound for requests (`max_queued_request_kb`) until that round ends. Before,
/// their charge was given back once they arrived: a 1 MB answer to a round that then
/// queued (or spun) for minutes held its memory outside every bound.
#[test]
fn a_clients_answers_stay_charged_while_the_round_that_gets_them_runs() {
    let setup = Setup::hostile(
        "answers-charged",
        "max_concurrent_calls = 1\nqueue_timeout_ms = 60000\nmax_queued_request_kb = 4096",
    );
    let mut client = Stdio2025::start_logging(&setup, ALL(), "info,cordon::runtime=debug");
    let (call, request) = client.call_until_asked("ask_then_spin", json!({}), "roots/list");
    // The only slot, taken by a call parked in the host: the next round will queue.
    let parked = client.send_request("tools/call", json!({"name": "park", "arguments": {"ms": 60000}}));
    let large_root = json!({"roots": [{"uri": format!("file:///{}", "a".repeat(1_000_000))}]});
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": large_root}));
    let queued = client.process.wait_log("queued: no slot is free");
    assert!(queued.contains("ask_then_spin"), "{queued}");
    // The queued round holds twice the answer's 1 MB (its text, and the round's copy), and
    // a request charged 2.5 MB (its parse and its text) does not fit beside that in 4 MiB.
    let padded = || json!({"_meta": {"padding": "p".repeat(1_250_000)}});
    let refused = client.request("ping", padded());
    assert_eq!(refused["error"]["code"], -32603, "the answer's bytes are held: {refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("busy"), "{refused}");
    // The round ends: its answers' bytes are given back.
    for id in [&call, &parked] {
        client.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
        );
    }
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let answer = client.request("ping", padded());
        if answer.get("result").is_some() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the answer's bytes were never given back: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A call stopped between rounds is cleaned up with the last note its guest left, in a
/// round before (the WIT: "the last note the call left"). Before, its cleanup got none:
/// each round's note went with the round.
#[test]
fn a_call_cancelled_between_rounds_is_cleaned_up_with_the_note_its_round_left() {
    let setup = Setup::hostile("note-between-rounds", "");
    let mut client = Stdio2025::start(&setup, ALL());
    let (call, _request) = client.call_until_asked("note_then_ask", json!({}), "roots/list");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call}}));
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("note_then_ask"), "{cleanup}");
    assert_eq!(setup.cleanup_reason(), "Cancelled Some(\"reserved 42\")");
}

/// Shutdown stops a call waiting for its client's answer between rounds, as it stops a
/// running one, and its cleanup runs (in no call slot: shutdown refuses new calls).
/// Before, the call waited out the drain and exited with "no cleanup".
#[test]
fn shutdown_stops_a_call_waiting_between_rounds_and_cleans_it_up() {
    let setup = Setup::hostile("shutdown-between-rounds", "");
    let mut client = Stdio2025::start(&setup, ALL());
    let (_call, _request) = client.call_until_asked("note_then_ask", json!({}), "roots/list");
    client.shut_down_cleaning_up("note_then_ask");
    assert_eq!(setup.cleanup_reason(), "Shutdown Some(\"reserved 42\")");
}

/// Shutdown waits for the cleanup budgets of the tools served then, not only those at
/// start: a reload that raised a tool's `cleanup_ms` is honoured. Before, the drain was
/// fixed at start (6 s here), and the process exited in the middle of an 8 s cleanup.
#[test]
fn shutdown_waits_for_a_cleanup_budget_a_reload_raised() {
    let setup = Setup::hostile("drain-after-reload", "");
    let mut client = Stdio2025::start(&setup, ALL());
    setup.raise_cleanup_budget(15_000);
    let reloaded = client.process.reload();
    assert!(reloaded.contains("loaded [hostile]"), "{reloaded}");
    let (_call, _request) =
        client.call_until_asked("note_then_ask", json!({"note": "sleep 8000"}), "roots/list");
    client.shut_down_cleaning_up("note_then_ask");
}

/// A call keeps the budgets of the version it started on: shutdown waits for its cleanup
/// although a later reload went back to shorter ones. Before, the drain counted only the
/// budgets served at start and at shutdown (6 s here), and cut the 8 s cleanup short.
#[test]
fn shutdown_waits_for_the_cleanup_budget_of_a_version_a_reload_replaced() {
    let setup = Setup::hostile("drain-after-two-reloads", "");
    let mut client = Stdio2025::start(&setup, ALL());
    let config = setup.raise_cleanup_budget(15_000);
    assert!(client.process.reload().contains("loaded [hostile]"));
    let (_call, _request) =
        client.call_until_asked("note_then_ask", json!({"note": "sleep 8000"}), "roots/list");
    std::fs::write(setup.config(), config).unwrap();
    assert!(client.process.reload().contains("loaded [hostile]"));
    client.shut_down_cleaning_up("note_then_ask");
}

/// The same for a prompt that asks: shutdown stops it between rounds and cleans it up.
#[test]
fn shutdown_stops_a_prompt_waiting_between_rounds_and_cleans_it_up() {
    let setup = Setup::new("shutdown-prompt-between-rounds");
    let mut client = Stdio2025::start(&setup, ALL());
    client.send_request("prompts/get", json!({"name": "test_input_required_result_prompt", "arguments": {}}));
    let request = client.next();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    client.shut_down_cleaning_up("prompts/get");
}

/// A later round that finds no slot within the queue timeout is refused, and the guest,
/// which ran a round before, is cleaned up. Before, the refusal was all: no cleanup.
#[test]
fn a_later_round_refused_for_want_of_a_slot_is_cleaned_up() {
    let setup = Setup::hostile("busy-between-rounds", "max_concurrent_calls = 1\nqueue_timeout_ms = 300");
    let mut client = Stdio2025::start_logging(&setup, ALL(), "info,cordon::runtime=debug");
    let (call, request) = client.call_until_asked("note_then_ask", json!({}), "roots/list");
    // The only slot, taken by a call parked in the host until cancelled: a probe queues
    // behind it once it holds the slot.
    let parked = client.send_request("tools/call", json!({"name": "park", "arguments": {"ms": 60000}}));
    let probe = client.send_request("tools/call", json!({"name": "park", "arguments": {"ms": 1}}));
    let queued = client.process.wait_log("queued: no slot is free");
    assert!(queued.contains("park"), "{queued}");
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": probe}}));
    let answer = client.answer_with(&request, json!({"roots": []}), &call);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(text(&answer).contains("busy"), "{answer}");
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("note_then_ask"), "{cleanup}");
    assert_eq!(setup.cleanup_reason(), "Cancelled Some(\"reserved 42\")");
    client.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": parked}}),
    );
}

/// The rounds of a 2025-era call share its progress token, and each round's guest counts
/// from nothing: what the client is sent under the token only rises.
#[test]
fn progress_across_the_rounds_of_a_call_only_rises() {
    let setup = Setup::hostile("progress-rounds", "");
    let mut client = Stdio2025::start(&setup, ALL());
    let call = client.send_request(
        "tools/call",
        json!({"name": "progress_then_ask", "arguments": {}, "_meta": {"progressToken": "p"}}),
    );
    let mut progress = Vec::new();
    let answer = loop {
        let message = client.next();
        match message["method"].as_str() {
            Some("notifications/progress") => progress.push(message["params"]["progress"].as_f64().unwrap()),
            Some("roots/list") => {
                client.send(json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": []}}));
            }
            _ => break message,
        }
    };
    assert_eq!(answer["id"], call, "{answer}");
    assert_eq!(text(&answer), "counted twice", "{answer}");
    assert_eq!(progress, [0.5], "the second round's 0.25 was sent after the first's 0.5");
}

#[test]
fn a_client_that_never_answers_is_stopped_by_the_calls_timeout() {
    let setup = Setup::new("never-answers-stdio");
    let mut client = Stdio2025::start(&setup, ALL());
    let started = Instant::now();
    let (call, _request) =
        client.call_until_asked("test_elicitation", json!({"message": "Hello?"}), "elicitation/create");
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&call, &json!(true)), "{answer}");
    assert!(text(&answer).contains("maximum duration"), "{answer}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2500) && waited < Duration::from_secs(10), "{waited:?}");
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=max-duration"), "{cleanup}");
}

/// A call's maximum duration spans all its rounds: a round that starts late gets what is
/// left of it. Before, each round got the whole of it again, so a guest that spun after a
/// late answer ran for up to twice its limit (or more, round after round).
#[test]
fn a_later_round_gets_only_what_is_left_of_the_calls_maximum_duration() {
    let setup = Setup::hostile_within("rounds-share-duration", "", 4000);
    let mut client = Stdio2025::start(&setup, ALL());
    let started = Instant::now();
    let (call, request) = client.call_until_asked("ask_then_spin", json!({}), "roots/list");
    // The client's lateness is what is tested: it answers three of the call's four
    // seconds in, and the second round spins.
    std::thread::sleep((started + Duration::from_secs(3)).saturating_duration_since(Instant::now()));
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": []}}));
    let answer = client.next();
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&call, &json!(true)), "{answer}");
    assert!(text(&answer).contains("ran for 4 s (its maximum duration)"), "{answer}");
    let waited = started.elapsed();
    // About 4.1 s (the limit and its grace); without the bound, 3 s + 4 s more.
    assert!(waited < Duration::from_secs(6), "the call ran {waited:?} against a maximum of 4 s");
    let cleanup = client.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=max-duration"), "{cleanup}");
}

impl Http {
    /// POST a `tools/call` to the session; the open SSE stream of its answer.
    fn call(&self, session: &str, id: i64, tool: &str, arguments: Value) -> BufReader<TcpStream> {
        let headers = [LEGACY[0], LEGACY[1], ("Mcp-Session-Id", session)];
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let (stream, head) = self.open("POST", &headers, &call.to_string());
        assert!(head.starts_with("http/1.1 200") && head.contains("text/event-stream"), "{head}");
        stream
    }
}

#[test]
fn http_requests_go_on_the_calls_stream_and_answers_come_back_as_posts() {
    let setup = Setup::new("round-trip-http");
    let mut server = Http::start(&setup);
    let session = server.initialize(ALL());

    let mut stream = server.call(&session, 1, "test_elicitation", json!({"message": "Who?"}));
    let request = next_event(&mut stream, Some("tools/call")).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let response = json!({"jsonrpc": "2.0", "id": request["id"], "result": accept_user()});
    assert_eq!(server.post(&session, &response), (202, None));
    let answer = next_event(&mut stream, Some("tools/call")).unwrap();
    assert_eq!(answer["id"], 1);
    assert!(text(&answer).contains("ada@example.com"), "{answer}");
    assert_eq!(next_event(&mut stream, None), None, "the stream ends with the answer");
    // The same response again: nothing waits for it.
    assert_eq!(server.post(&session, &response), (202, None));

    let mut stream = server.call(&session, 2, "test_sampling", json!({"prompt": "Hi"}));
    let request = next_event(&mut stream, Some("tools/call")).unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "Hello"}, "model": "m"});
    let response = json!({"jsonrpc": "2.0", "id": request["id"], "result": sampled});
    assert_eq!(server.post(&session, &response), (202, None));
    assert_eq!(text(&next_event(&mut stream, Some("tools/call")).unwrap()), "LLM response: Hello");

    let mut stream = server.call(&session, 3, ROOTS_TOOL, json!({}));
    let request = next_event(&mut stream, Some("tools/call")).unwrap();
    assert_eq!(request["method"], "roots/list", "{request}");
    let response =
        json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": [{"uri": "file:///srv"}]}});
    assert_eq!(server.post(&session, &response), (202, None));
    assert!(text(&next_event(&mut stream, Some("tools/call")).unwrap()).contains("file:///srv"));

    // Closing the call's stream while the client is asked stops the call and cleans up.
    let mut stream = server.call(&session, 4, "test_elicitation", json!({"message": "Gone?"}));
    let request = next_event(&mut stream, Some("tools/call")).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    drop(stream);
    let cleanup = server.process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("test_elicitation"), "{cleanup}");
}

/// Wait (within [`WAIT`]) until `path` exists.
fn wait_for_path(path: &std::path::Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A 2026-07-28 round cancelled after its guest asked, while the lines it logged are still
/// going out (to a client that has stopped reading), is given up and cleaned up with its
/// note: the client was never sent the state to come back with. Before, the guest was
/// dropped with no cleanup.
#[test]
fn a_2026_round_cancelled_after_its_guest_asked_is_cleaned_up_with_its_note() {
    let setup = Setup::hostile("cancelled-after-asking", "");
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command.args(["serve", "--stdio", "--config"]).arg(setup.config());
    command.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut process = Process::spawn_logging(command, "info,cordon::runtime::call=debug");
    let mut stdin = process.child.stdin.take().unwrap();
    let stdout = process.child.stdout.take().unwrap();
    process.wait_log("loaded");
    let mut envelope = meta();
    envelope["io.modelcontextprotocol/clientCapabilities"] = json!({"roots": {}});
    envelope["io.modelcontextprotocol/logLevel"] = json!("warning");
    let params = json!({"name": "note_then_ask", "arguments": {"log_lines": 32}, "_meta": envelope});
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}))
        .unwrap();
    // Its stdout unread, the 32 lines held for the client (128 KiB) fill the pipe before
    // the answer can go out; the guest has returned once `asking` exists.
    wait_for_path(&setup.dir.join("data/asking"));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}});
    writeln!(stdin, "{cancel}").unwrap();
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"_meta": meta()}}))
        .unwrap();
    // Read now: up to the ping's answer, nothing answers the call.
    let schema = Schema::new();
    let lines = common::wire::line_channel(stdout);
    loop {
        let line = lines.recv_timeout(WAIT).expect("the ping's answer");
        let message: Value = serde_json::from_str(&line).unwrap();
        let method = match message["id"].as_i64() {
            Some(7) => panic!("the cancelled call was answered: {message}"),
            Some(8) => Some("ping"),
            _ => None,
        };
        schema.check_sent(&message, method);
        if method.is_some() {
            break;
        }
    }
    let cleanup = process.wait_log("cleanup completed");
    assert!(cleanup.contains("reason=cancelled") && cleanup.contains("note_then_ask"), "{cleanup}");
    assert_eq!(setup.cleanup_reason(), "Cancelled Some(\"reserved 42\")");
}

/// A call given up between rounds is answered beside its cleanup, not after it: here the
/// client answers the roots it was asked for with an error, and the guest's cleanup takes
/// 60 s (its budget 30 s). Before, the answer waited for the cleanup to end.
#[test]
fn a_call_given_up_between_rounds_is_answered_while_its_cleanup_runs() {
    let setup = Setup::hostile("answered-beside-cleanup", "");
    setup.raise_cleanup_budget(30_000);
    let mut client = Stdio2025::start(&setup, ALL());
    let (call, request) =
        client.call_until_asked("note_then_ask", json!({"note": "sleep 60000"}), "roots/list");
    let refusal = json!({"code": -32603, "message": "no roots today"});
    client.send(json!({"jsonrpc": "2.0", "id": request["id"], "error": refusal}));
    let answer = client.recv(Duration::from_secs(15)).expect("the answer, long before the cleanup's 30 s");
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&call, &json!(true)), "{answer}");
    assert!(text(&answer).contains("no roots today"), "{answer}");
    // The cleanup runs meanwhile, with the note.
    let deadline = Instant::now() + WAIT;
    while setup.cleanup_reason() != "Cancelled Some(\"sleep 60000\")" {
        assert!(Instant::now() < deadline, "no cleanup: {:?}", setup.cleanup_reason());
        std::thread::sleep(Duration::from_millis(20));
    }
}
