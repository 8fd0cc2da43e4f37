//! Resources, prompts and completions from `cordon:tool@0.2.0` components, served beside a
//! `cordon:tool@0.1.0` one (`examples/legacy`), over stdio and HTTP: every new method, each
//! answer checked against the official schema of its revision; pagination; unknown
//! resources, prompts and references, bad arguments; and a resource read that spins
//! forever (`examples/hostile`), stopped by its timeout, by `notifications/cancelled` and by
//! a closed HTTP stream, each time followed by the component's cleanup.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common;
use common::wire::{Schema, line_channel, meta, parse_answer, spawn_http_server};

/// A config serving the 0.1.0 component, the example tools, the conformance fixture and
/// the hostile component (whose calls and reads stop after 3 s), and the hostile
/// component's data directory.
fn config(name: &str) -> (PathBuf, PathBuf) {
    let guests = cordon::paths::default_tools_dir();
    let path = |file: &str| {
        let path = guests.join(file);
        assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
        path.display().to_string()
    };
    let dir = common::fresh_dir(name);
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\n\n\
             [[components]]\npath = {:?}\n\n\
             [[components]]\npath = {:?}\ndata_dir = \"examples\"\n\n\
             [[components]]\npath = {:?}\n\n\
             [[components]]\npath = {:?}\ndata_dir = \"hostile\"\n\
             limits = {{ grace_ms = 100, idle_timeout_ms = 0, max_duration_ms = 3000 }}\n",
            path("legacy-tool.wasm"),
            path("example-tools.wasm"),
            path("conformance-fixture.wasm"),
            path("hostile.wasm"),
        ),
    )
    .unwrap();
    (config, dir.join("hostile"))
}

/// Wait until `path` holds text that satisfies `done`, for at most 10 s; returns the text.
fn wait_for_file(path: &Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The request id's answer must be the error `code`; returns its message.
fn error_of(answer: &Value, code: i64) -> String {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    answer["error"]["message"].as_str().unwrap().to_owned()
}

struct Stdio2 {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    schema: Schema,
    legacy_schema: Schema,
    /// Request id → its method and whether it was a 2025-11-25 request.
    methods: std::collections::HashMap<String, (String, bool)>,
    next_id: i64,
}

impl Stdio2 {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["serve", "--stdio", "--config"])
            .arg(config)
            .env("CORDON_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = line_channel(stdout);
        let stdin = child.stdin.take().unwrap();
        Self {
            child,
            stdin,
            lines,
            schema: Schema::new(),
            legacy_schema: Schema::legacy(),
            methods: Default::default(),
            next_id: 1,
        }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Send a request (with the 2026-07-28 envelope unless `legacy`); returns its id.
    fn send_request(&mut self, method: &str, mut params: Value, legacy: bool) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        if !legacy {
            params["_meta"] = meta();
        }
        self.methods.insert(id.to_string(), (method.to_owned(), legacy));
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message, checked against the schema of its request's revision.
    fn recv(&mut self, timeout: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        let message: Value = serde_json::from_str(&line).unwrap();
        match message.get("id").and_then(|id| self.methods.get(&id.to_string())) {
            Some((method, true)) => self.legacy_schema.check_sent(&message, Some(method)),
            Some((method, false)) => self.schema.check_sent(&message, Some(method)),
            None => self.schema.check_sent(&message, None),
        }
        Some(message)
    }

    /// A 2026-07-28 request and its answer.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.answer(method, params, false)
    }

    fn answer(&mut self, method: &str, params: Value, legacy: bool) -> Value {
        let id = self.send_request(method, params, legacy);
        let answer = self.recv(Duration::from_secs(20)).expect("an answer within 20 s");
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

impl Drop for Stdio2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every page of `method`'s list (`key`), following `nextCursor`.
fn all_pages(server: &mut Stdio2, method: &str, key: &str) -> (Vec<Value>, usize) {
    let (mut items, mut pages, mut cursor) = (Vec::new(), 0, None::<Value>);
    loop {
        let params = cursor.map_or_else(|| json!({}), |cursor| json!({ "cursor": cursor }));
        let answer = server.request(method, params);
        let result = &answer["result"];
        assert!(result["ttlMs"].as_u64().is_some() && result["cacheScope"] == "public", "{answer}");
        items.extend(result[key].as_array().unwrap().iter().cloned());
        pages += 1;
        match result.get("nextCursor") {
            Some(next) => cursor = Some(next.clone()),
            None => return (items, pages),
        }
    }
}

#[test]
fn both_worlds_are_served_at_once_and_every_new_method_answers_over_stdio() {
    let (config, _) = config("features-stdio");
    let mut server = Stdio2::start(&config);

    // Capabilities: what the components offer.
    let discover = server.request("server/discover", json!({}));
    let capabilities = &discover["result"]["capabilities"];
    for capability in ["tools", "resources", "prompts", "completions"] {
        assert!(capabilities.get(capability).is_some(), "{capability}: {discover}");
    }

    // The 0.1.0 component beside the 0.2.0 ones.
    let tools = server.request("tools/list", json!({}));
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"legacy_echo") && names.contains(&"echo"), "{names:?}");
    let legacy = server.request("tools/call", json!({"name": "legacy_echo", "arguments": {"text": "old"}}));
    assert_eq!(legacy["result"]["content"][0]["text"], "old", "{legacy}");
    let echo = server.request("tools/call", json!({"name": "echo", "arguments": {"text": "new"}}));
    assert_eq!(echo["result"]["content"][0]["text"], "new", "{echo}");

    // resources/list: 2 + 1 + 150 resources over two pages, in load order.
    let (resources, pages) = all_pages(&mut server, "resources/list", "resources");
    assert_eq!((resources.len(), pages), (153, 2));
    assert_eq!(resources[0]["uri"], "examples://guide");
    assert_eq!(resources[0]["mimeType"], "text/markdown");
    let bad_cursor = server.request("resources/list", json!({"cursor": "not-ours"}));
    error_of(&bad_cursor, -32602);

    let (templates, _) = all_pages(&mut server, "resources/templates/list", "resourceTemplates");
    let templates: Vec<&str> = templates.iter().map(|t| t["uriTemplate"].as_str().unwrap()).collect();
    assert_eq!(templates, ["test://template/{id}/data", "hostile://spin/{label}"]);

    // resources/read: text, binary, from a template; each with caching hints.
    let text = server.request("resources/read", json!({"uri": "test://static-text"}));
    let contents = &text["result"]["contents"][0];
    assert_eq!(contents["text"], "This is the content of the static text resource.", "{text}");
    assert_eq!(
        (contents["mimeType"].as_str(), text["result"]["ttlMs"].as_u64()),
        (Some("text/plain"), Some(0))
    );
    let binary = server.request("resources/read", json!({"uri": "test://static-binary"}));
    let blob = binary["result"]["contents"][0]["blob"].as_str().unwrap();
    let png = base64::engine::general_purpose::STANDARD.decode(blob).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{binary}");
    let templated = server.request("resources/read", json!({"uri": "test://template/123/data"}));
    let data: Value =
        serde_json::from_str(templated["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(data["id"], "123", "{templated}");
    let guide = server.request("resources/read", json!({"uri": "examples://guide"}));
    assert!(guide["result"]["contents"][0]["text"].as_str().unwrap().starts_with("# The example tools"));

    // Not found: no component serves the URI, or the template matches but the guest has none.
    let missing = server.request("resources/read", json!({"uri": "test://nonexistent"}));
    assert_eq!(error_of(&missing, -32602), "Resource not found");
    assert_eq!(missing["error"]["data"]["uri"], "test://nonexistent");
    let malformed = server.request("resources/read", json!({"uri": 7}));
    assert!(error_of(&malformed, -32602).contains("resources/read"), "{malformed}");
    // A template would match it, and its component echo it back: the client's mistake.
    let spaced = server.request("resources/read", json!({"uri": "hostile://spin/a b"}));
    assert!(error_of(&spaced, -32602).contains("`uri` is not a URI"), "{spaced}");

    // Prompts: listed, rendered with arguments, with an image and an embedded resource.
    let prompts = server.request("prompts/list", json!({}));
    let listed = prompts["result"]["prompts"].as_array().unwrap();
    assert_eq!(listed.len(), 7, "{prompts}");
    assert_eq!(listed[0]["name"], "reindex_collection");
    assert_eq!(
        listed[0]["arguments"][0],
        json!({"name": "collection", "description": "The collection to reindex.", "required": true})
    );
    let simple = server.request("prompts/get", json!({"name": "test_simple_prompt"}));
    assert_eq!(simple["result"]["messages"][0]["content"]["text"], "This is a simple prompt for testing.");
    let with_arguments = server.request(
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "hello", "arg2": "world"}}),
    );
    assert_eq!(
        with_arguments["result"]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='hello', arg2='world'"
    );
    let image = server.request("prompts/get", json!({"name": "test_prompt_with_image"}));
    assert_eq!(image["result"]["messages"][0]["content"]["type"], "image", "{image}");
    let embedded = server.request(
        "prompts/get",
        json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://x"}}),
    );
    assert_eq!(embedded["result"]["messages"][0]["content"]["resource"]["uri"], "test://x", "{embedded}");
    // A URI that is no URI (the schema's `format: uri`) is the component's wrong answer,
    // not a message a client that checks formats would refuse whole.
    let relative = server.request(
        "prompts/get",
        json!({"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "notes/1"}}),
    );
    assert!(
        error_of(&relative, -32603).contains("an embedded resource's URI \"notes/1\" is not a URI"),
        "{relative}"
    );
    let reindex = server
        .request("prompts/get", json!({"name": "reindex_collection", "arguments": {"collection": "books"}}));
    assert!(reindex["result"]["messages"][0]["content"]["text"].as_str().unwrap().contains("\"books\""));

    // Bad prompt requests are refused before any instance starts.
    let missing_argument = server
        .request("prompts/get", json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "x"}}));
    assert!(error_of(&missing_argument, -32602).contains("arg2"), "{missing_argument}");
    let extra_argument =
        server.request("prompts/get", json!({"name": "test_simple_prompt", "arguments": {"bogus": "x"}}));
    assert!(error_of(&extra_argument, -32602).contains("bogus"), "{extra_argument}");
    let not_string =
        server.request("prompts/get", json!({"name": "test_simple_prompt", "arguments": {"n": 1}}));
    error_of(&not_string, -32602);
    let unknown_prompt = server.request("prompts/get", json!({"name": "no_such_prompt"}));
    assert!(error_of(&unknown_prompt, -32602).contains("no_such_prompt"));

    // Completions of a prompt argument and of a template variable.
    let completion = server.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "reindex_collection"}, "argument": {"name": "collection", "value": "f"}}),
    );
    assert_eq!(completion["result"]["completion"]["values"], json!(["films"]), "{completion}");
    let variable = server.request(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"}, "argument": {"name": "id", "value": "4"}}),
    );
    assert_eq!(variable["result"]["completion"]["values"], json!(["456"]), "{variable}");
    let unknown_reference = server.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a", "value": ""}}),
    );
    error_of(&unknown_reference, -32602);
    let unknown_argument = server.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "reindex_collection"}, "argument": {"name": "nope", "value": ""}}),
    );
    error_of(&unknown_argument, -32602);

    // A 2025-11-25 client gets the same, without what only 2026-07-28 defines.
    let initialize = server.answer(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        true,
    );
    assert!(initialize["result"]["capabilities"].get("prompts").is_some(), "{initialize}");
    let legacy_list = server.answer("resources/list", json!({}), true);
    assert!(
        legacy_list["result"].get("ttlMs").is_none() && legacy_list["result"].get("resultType").is_none()
    );
    let legacy_read = server.answer("resources/read", json!({"uri": "test://static-text"}), true);
    assert!(legacy_read["result"].get("cacheScope").is_none(), "{legacy_read}");
    // 2025-11-25 has no discovery: a 2025 session asking for it is told so.
    let legacy_discover = server.answer("server/discover", json!({}), true);
    error_of(&legacy_discover, -32601);
    // A resource that does not exist is 2025-11-25's -32002 (2026-07-28's -32602, above).
    let legacy_missing = server.answer("resources/read", json!({"uri": "test://nonexistent"}), true);
    assert_eq!(error_of(&legacy_missing, -32002), "Resource not found");
    assert_eq!(legacy_missing["error"]["data"]["uri"], "test://nonexistent");
    server.answer("prompts/get", json!({"name": "test_prompt_with_image"}), true);
    server.answer("prompts/list", json!({}), true);
    server.answer("resources/templates/list", json!({}), true);
    server.answer(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "te"}}),
        true,
    );
}

#[test]
fn a_spinning_read_or_prompt_is_stopped_by_its_timeout_and_by_a_cancel_and_cleaned_up_over_stdio() {
    let (config, hostile) = config("features-stop");
    let mut server = Stdio2::start(&config);

    // The maximum duration (3 s): the client gets an error naming it.
    let started = Instant::now();
    let timed_out = server.request("resources/read", json!({"uri": "hostile://spin/slow"}));
    assert!(error_of(&timed_out, -32603).contains("maximum duration"), "{timed_out}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped after {:?}", started.elapsed());
    let reason = wait_for_file(&hostile.join("cleanup-reason"), |text| text.contains("reading slow"));
    assert_eq!(reason, r#"MaxDuration Some("reading slow")"#);
    // The cleanup writes the request's name after the reason: waited for too.
    let request = wait_for_file(&hostile.join("cleanup-request"), |text| text == "resources/read");
    assert_eq!(request, "resources/read");

    // A cancel once the guest spins, in a read or a prompt: nothing is answered, the
    // cleanup runs and is told which request it follows.
    let mut cancel_once_spinning = |method: &str, params: Value, what: &str| {
        let id = server.send_request(method, params, false);
        let started = hostile.join(format!("{what}-cancelled"));
        wait_for_file(&started, |_| started.exists());
        assert!(started.exists(), "{method} never started");
        server.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
        );
        let note = format!("{what} cancelled");
        let reason = wait_for_file(&hostile.join("cleanup-reason"), |text| text.contains(&note));
        assert_eq!(reason, format!("Cancelled Some({note:?})"));
        let request = wait_for_file(&hostile.join("cleanup-request"), |text| text == method);
        assert_eq!(request, method);
    };
    cancel_once_spinning("resources/read", json!({"uri": "hostile://spin/cancelled"}), "reading");
    cancel_once_spinning(
        "prompts/get",
        json!({"name": "spin", "arguments": {"label": "cancelled"}}),
        "prompting",
    );
    // The next answer is the next request's: the cancelled ones were never answered.
    let after = server.request("prompts/list", json!({}));
    assert!(after["result"]["prompts"].is_array(), "{after}");

    // A panic in a read or a prompt is told as the SDK tells a tool's: its message and
    // where, to the client and to the cleanup. Before, only tool calls set the SDK's panic
    // hook, and these quoted std's last line ("note: run with `RUST_BACKTRACE=1`...").
    for (method, params, what) in [
        ("resources/read", json!({"uri": "hostile://spin/panic-read"}), "reading panic-read"),
        (
            "prompts/get",
            json!({"name": "spin", "arguments": {"label": "panic-prompt"}}),
            "prompting panic-prompt",
        ),
    ] {
        let crashed = server.request(method, params);
        let message = error_of(&crashed, -32603);
        assert!(message.contains("panicked at") && message.contains(what), "{crashed}");
        let reason = wait_for_file(&hostile.join("cleanup-reason"), |text| text.contains(what));
        assert!(reason.contains("panicked at") && !reason.contains("RUST_BACKTRACE"), "{reason}");
    }
}

/// POST one 2026-07-28 request with every header right; the answer's messages are
/// checked against the schema of `method`'s result.
fn post(port: u16, schema: &Schema, id: i64, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write_request(&mut stream, port, method, name.as_deref(), &body);
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    BufReader::new(stream).read_to_end(&mut raw).unwrap();
    let answer = parse_answer(&String::from_utf8(raw).unwrap(), schema);
    let message = answer.messages.last().cloned().unwrap_or_else(|| panic!("no message: {}", answer.body));
    schema.check_sent(&message, Some(method));
    message
}

fn write_request(stream: &mut TcpStream, port: u16, method: &str, name: Option<&str>, body: &str) {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
    );
    if let Some(name) = name {
        head.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
}

#[test]
fn every_new_method_answers_over_http_and_a_closed_stream_stops_a_read() {
    let (config, hostile) = config("features-http");
    let (mut child, port) = spawn_http_server(env!("CARGO_BIN_EXE_cordon").as_ref(), &config);
    let schema = Schema::new();

    let discover = post(port, &schema, 1, "server/discover", json!({}));
    assert!(discover["result"]["capabilities"].get("completions").is_some(), "{discover}");
    let legacy =
        post(port, &schema, 2, "tools/call", json!({"name": "legacy_echo", "arguments": {"text": "old"}}));
    assert_eq!(legacy["result"]["content"][0]["text"], "old");
    let list = post(port, &schema, 3, "resources/list", json!({}));
    assert_eq!(list["result"]["resources"].as_array().unwrap().len(), 100);
    let second = post(port, &schema, 4, "resources/list", json!({"cursor": list["result"]["nextCursor"]}));
    assert_eq!(second["result"]["resources"].as_array().unwrap().len(), 53);
    post(port, &schema, 5, "resources/templates/list", json!({}));
    let read = post(port, &schema, 6, "resources/read", json!({"uri": "test://template/9/data"}));
    assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("\"9\""), "{read}");
    let missing = post(port, &schema, 7, "resources/read", json!({"uri": "test://nonexistent"}));
    assert_eq!(missing["error"]["data"]["uri"], "test://nonexistent");
    post(port, &schema, 8, "prompts/list", json!({}));
    let prompt = post(port, &schema, 9, "prompts/get", json!({"name": "test_prompt_with_image"}));
    assert_eq!(prompt["result"]["messages"][1]["content"]["text"], "Please analyze the image above.");
    let completion = post(
        port,
        &schema,
        10,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "tes"}}),
    );
    assert_eq!(completion["result"]["completion"]["values"], json!(["test", "testing", "tested"]));

    // Closing the response stream while the guest spins stops the read; cleanup follows.
    let body = json!({"jsonrpc": "2.0", "id": 11, "method": "resources/read",
        "params": {"uri": "hostile://spin/closed", "_meta": meta()}})
    .to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write_request(&mut stream, port, "resources/read", Some("hostile://spin/closed"), &body);
    let reading = hostile.join("reading-closed");
    wait_for_file(&reading, |_| reading.exists());
    assert!(reading.exists(), "the read never started");
    drop(stream);
    let reason = wait_for_file(&hostile.join("cleanup-reason"), |text| text.contains("reading closed"));
    assert_eq!(reason, r#"Cancelled Some("reading closed")"#);

    let _ = child.kill();
    let _ = child.wait();
}
