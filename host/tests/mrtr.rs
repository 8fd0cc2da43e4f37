//! Tools and prompts that ask the client for input (MRTR, 2026-07-28) over HTTP, against
//! `cordon serve` processes: an `InputRequiredResult` whose `requestState` is sealed, a
//! retry that lands on a second process with the same key (stateless continuation) and is
//! refused by one with another key; tampered, expired, foreign-tool and foreign-argument
//! states refused with -32602; a request the client cannot answer refused with -32021 and
//! HTTP 400; a tool that asks forever stopped after 8 rounds (both given up, so cleaned
//! up, with the note the round left); malformed answers refused,
//! missing ones asked again, extra ones ignored; every message checked against the
//! official schema.

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::wire::{Schema, parse_answer};
use serde_json::{Value, json};

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const OTHER_KEY: &str = "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// A config serving the example tools, the conformance fixture and the hostile component,
/// sealing with `key`, states valid `ttl_secs`; `extra` TOML ending its `[server]` table.
fn config(name: &str, key: &str, ttl_secs: u64, extra: &str) -> PathBuf {
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
            "[server]\ncache = false\nrequest_state_key = {key:?}\nrequest_state_ttl_secs = {ttl_secs}\n{extra}\n\
             [[components]]\npath = {:?}\ndata_dir = \"examples\"\n\n\
             [[components]]\npath = {:?}\n\n\
             [[components]]\npath = {:?}\ndata_dir = \"hostile\"\nlimits = {{ cleanup_ms = 3000 }}\n",
            path("example-tools.wasm"),
            path("conformance-fixture.wasm"),
            path("hostile.wasm"),
        ),
    )
    .unwrap();
    config
}

struct Server {
    process: common::server::Process,
    port: u16,
    /// The hostile component's data directory, where its cleanup writes why it ran.
    hostile_data: PathBuf,
}

impl Server {
    fn start(name: &str, key: &str, ttl_secs: u64) -> Self {
        Self::start_with(name, key, ttl_secs, "")
    }

    fn start_with(name: &str, key: &str, ttl_secs: u64, extra: &str) -> Self {
        let config = config(name, key, ttl_secs, extra);
        let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
        command.args(["serve", "--http", "127.0.0.1:0", "--config"]).arg(&config);
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut process = common::server::Process::spawn(command);
        let listening = process.wait_log("http://127.0.0.1:");
        let port = listening.split("http://127.0.0.1:").nth(1).and_then(|rest| rest.split('/').next());
        let port = port.and_then(|port| port.parse().ok()).expect("the address it listens on");
        Self { process, port, hostile_data: config.parent().unwrap().join("hostile") }
    }

    /// Wait (within a deadline) for the hostile component's cleanup to have written
    /// `expected`: why it ran and the note it was given, debug-printed. (Other cleanups of
    /// its calls may have written before, and the one awaited runs after its answer.)
    fn wait_for_cleanup(&self, expected: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let path = self.hostile_data.join("cleanup-reason");
        loop {
            let written = std::fs::read_to_string(&path).unwrap_or_default();
            if written == expected {
                return;
            }
            assert!(Instant::now() < deadline, "no cleanup wrote {expected:?}; the last wrote {written:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

const EVERYTHING: &str = r#"{"elicitation": {}, "sampling": {}, "roots": {}}"#;

/// POST one request with `capabilities` declared; the HTTP status and the answer, checked
/// against the schema (an `InputRequiredResult` and each of its requests as such).
fn post(server: &Server, method: &str, params: Value, capabilities: &str) -> (u16, Value) {
    let schema = Schema::new();
    let stream = send(server, method, params, capabilities);
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    BufReader::new(stream).read_to_end(&mut raw).unwrap();
    let answer = parse_answer(&String::from_utf8(raw).unwrap(), &schema);
    let message = answer.messages.last().cloned().unwrap_or_else(|| panic!("no message: {}", answer.body));
    schema.check_sent(&message, Some(method));
    if message["result"]["resultType"] == "input_required" {
        schema.check("InputRequiredResult", &message["result"]);
        for request in message["result"]["inputRequests"].as_object().unwrap().values() {
            schema.check("InputRequest", request);
        }
        assert!(message["result"].get("ttlMs").is_none(), "never cacheable: {message}");
    }
    (answer.status, message)
}

/// Send one request with `capabilities` declared; the connection its answer comes on.
fn send(server: &Server, method: &str, mut params: Value, capabilities: &str) -> TcpStream {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": serde_json::from_str::<Value>(capabilities).unwrap(),
    });
    let name = params["name"].as_str().unwrap().to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\nMcp-Name: {name}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        server.port,
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

fn call(server: &Server, tool: &str, arguments: Value, capabilities: &str) -> Value {
    let (status, message) =
        post(server, "tools/call", json!({"name": tool, "arguments": arguments}), capabilities);
    assert_eq!(status, 200, "{message}");
    message
}

/// A retry of `tool` with `answers` and the state of `asked`.
fn retry(server: &Server, tool: &str, arguments: Value, answers: Value, asked: &Value) -> (u16, Value) {
    post(server, "tools/call", retry_params(tool, arguments, answers, asked), EVERYTHING)
}

/// The params of a retry of `tool` with `answers` and the state of `asked`.
fn retry_params(tool: &str, arguments: Value, answers: Value, asked: &Value) -> Value {
    json!({
        "name": tool,
        "arguments": arguments,
        "inputResponses": answers,
        "requestState": asked["result"]["requestState"],
    })
}

fn text(message: &Value) -> &str {
    message["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {message}"))
}

fn error(status_and_message: &(u16, Value), code: i64, status: u16) -> String {
    let (got_status, message) = status_and_message;
    assert_eq!((*got_status, &message["error"]["code"]), (status, &json!(code)), "{message}");
    message["error"]["message"].as_str().unwrap().to_owned()
}

fn accept(form: Value) -> Value {
    json!({"action": "accept", "content": form})
}

#[test]
fn a_retry_continues_on_another_process_with_the_same_key_and_is_refused_by_one_with_another() {
    let (first, second, stranger) = (
        Server::start("mrtr-a", KEY, 600),
        Server::start("mrtr-b", KEY, 600),
        Server::start("mrtr-c", OTHER_KEY, 600),
    );
    let books = json!({"collection": "books"});
    let asked = call(&first, "delete_collection", books.clone(), EVERYTHING);
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    assert_eq!(result["inputRequests"]["confirm"]["method"], "elicitation/create");
    assert_eq!(result["inputRequests"]["confirm"]["params"]["message"], "Delete books?");
    assert_eq!(
        result["inputRequests"]["confirm"]["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert!(result["requestState"].as_str().is_some_and(|state| state.len() > 40));

    let confirmed = json!({"confirm": accept(json!({"confirm": true}))});
    let (status, done) = retry(&second, "delete_collection", books.clone(), confirmed.clone(), &asked);
    assert_eq!((status, text(&done)), (200, "Deleted books"), "{done}");
    assert_eq!(done["result"]["resultType"], "complete");
    let declined = json!({"confirm": {"action": "decline"}});
    assert_eq!(
        text(&retry(&first, "delete_collection", books.clone(), declined, &asked).1),
        "books not deleted"
    );
    let cancelled = json!({"confirm": {"action": "cancel"}});
    assert_eq!(
        text(&retry(&second, "delete_collection", books.clone(), cancelled, &asked).1),
        "books not deleted"
    );

    let refused = retry(&stranger, "delete_collection", books, confirmed, &asked);
    assert!(error(&refused, -32602, 200).contains("integrity"), "{refused:?}");
}

#[test]
fn tampered_foreign_and_expired_states_are_refused_before_the_tool_runs() {
    let server = Server::start("mrtr-refused", KEY, 1);
    let books = json!({"collection": "books"});
    let asked = call(&server, "delete_collection", books.clone(), EVERYTHING);
    let confirmed = json!({"confirm": accept(json!({"confirm": true}))});

    let mut tampered = asked.clone();
    tampered["result"]["requestState"] =
        json!(format!("{}-TAMPERED", asked["result"]["requestState"].as_str().unwrap()));
    let refused = retry(&server, "delete_collection", books.clone(), confirmed.clone(), &tampered);
    assert!(error(&refused, -32602, 200).contains("integrity check"), "{refused:?}");

    let other_arguments =
        retry(&server, "delete_collection", json!({"collection": "music"}), confirmed.clone(), &asked);
    assert!(error(&other_arguments, -32602, 200).contains("other arguments"), "{other_arguments:?}");
    let other_tool =
        retry(&server, "test_input_required_result_elicitation", json!({}), confirmed.clone(), &asked);
    assert!(
        error(&other_tool, -32602, 200).contains("issued for tools/call delete_collection"),
        "{other_tool:?}"
    );
    let not_a_string = post(
        &server,
        "tools/call",
        json!({"name": "delete_collection", "arguments": books, "requestState": 7}),
        EVERYTHING,
    );
    assert!(error(&not_a_string, -32602, 200).contains("requestState"), "{not_a_string:?}");

    // With a TTL of one second, the state expires within two.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = retry(&server, "delete_collection", books.clone(), confirmed.clone(), &asked);
        if answer.1.get("error").is_some() {
            assert!(error(&answer, -32602, 200).contains("expired"), "{answer:?}");
            break;
        }
        assert_eq!(text(&answer.1), "Deleted books", "valid until it expires");
        assert!(Instant::now() < deadline, "the state never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_request_the_client_cannot_answer_is_refused_with_its_capability_and_400() {
    let server = Server::start("mrtr-capability", KEY, 600);
    // A guest that left a note and asked what the client cannot answer has run: given up,
    // it is cleaned up with its note. Before, no cleanup ran. (First, so that no cleanup
    // of an earlier refusal in this test can overwrite what these write.)
    let noted = json!({"name": "note_then_ask", "arguments": {}});
    let refused = post(&server, "tools/call", noted, r#"{"elicitation": {}}"#);
    assert!(error(&refused, -32021, 400).contains("roots"), "{refused:?}");
    server.wait_for_cleanup("Cancelled Some(\"reserved 42\")");
    // The error goes out beside the cleanup: one that waited for a slow cleanup (1.5 s
    // here, within its 3 s budget) went out past `sse_after` (1 s), in an event stream
    // with status 200.
    let slow = json!({"name": "note_then_ask", "arguments": {"note": "sleep 1500"}});
    let refused = post(&server, "tools/call", slow, r#"{"elicitation": {}}"#);
    assert!(error(&refused, -32021, 400).contains("roots"), "{refused:?}");
    server.wait_for_cleanup("Cancelled Some(\"sleep 1500\")");

    let asks_roots = json!({"name": "ask", "arguments": {"count": 1, "key_len": 4, "state_bytes": 0}});
    let refused = post(&server, "tools/call", asks_roots.clone(), r#"{"elicitation": {}}"#);
    assert!(error(&refused, -32021, 400).contains("roots"), "{refused:?}");
    // A capability is an object: `null` declares nothing.
    let null = post(&server, "tools/call", asks_roots.clone(), r#"{"roots": null}"#);
    assert!(error(&null, -32021, 400).contains("roots"), "{null:?}");
    assert_eq!(refused.1["error"]["data"]["requiredCapabilities"], json!({"roots": {}}));
    let (status, asked) = post(&server, "tools/call", asks_roots, r#"{"roots": {}}"#);
    assert_eq!((status, &asked["result"]["inputRequests"]["0kkk"]["method"]), (200, &json!("roots/list")));

    // The fixture asks only what the client declared (the conformance capability check).
    let sampling_only =
        call(&server, "test_input_required_result_capabilities", json!({}), r#"{"sampling": {}}"#);
    let methods: Vec<&Value> = sampling_only["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| &r["method"])
        .collect();
    assert_eq!(methods, [&json!("sampling/createMessage")]);
}

/// A later round starts with the cleanup note an earlier round left, sealed in the state
/// beside the guest's own: stopped, its cleanup is told what the earlier round reserved.
/// Before, each 2026-07-28 round began with no note, and the cleanup of a call stopped in
/// its second round was told nothing.
#[test]
fn a_later_round_stopped_is_cleaned_up_with_the_note_an_earlier_round_left() {
    let server = Server::start("mrtr-note", KEY, 600);
    let arguments = json!({"then_spin": true});
    let asked = call(&server, "note_then_ask", arguments.clone(), EVERYTHING);
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert!(!server.hostile_data.join("cleanup-reason").exists(), "asking is no stop");
    // The second round spins, leaving no note; closing its stream cancels it.
    let params = retry_params("note_then_ask", arguments, json!({"roots": {"roots": []}}), &asked);
    let stream = send(&server, "tools/call", params, EVERYTHING);
    let answered = server.hostile_data.join("answered");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !answered.exists() {
        assert!(Instant::now() < deadline, "the second round never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    server.wait_for_cleanup("Cancelled Some(\"reserved 42\")");
}

/// A retry cancelled while it waits for a call slot gives the call up: the guest of the
/// request before ran and sealed its note, so its cleanup runs with it, a tool's as a
/// prompt's. Before, a retry cancelled before its guest ran counted as a call that never
/// started, and the reservation the note names was never undone.
#[test]
fn a_retry_cancelled_while_it_waits_for_a_slot_is_cleaned_up_with_the_sealed_note() {
    let mut server = Server::start_with(
        "mrtr-queued-retry",
        KEY,
        600,
        "max_concurrent_calls = 1\nqueue_timeout_ms = 60000\n[http]\nsse_after_ms = 100\n",
    );
    let asked = call(&server, "note_then_ask", json!({}), EVERYTHING);
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let prompt = "test_input_required_result_prompt";
    let (_, prompt_asked) = post(&server, "prompts/get", json!({"name": prompt}), EVERYTHING);
    assert_eq!(prompt_asked["result"]["resultType"], "input_required", "{prompt_asked}");
    // The only slot, held by a call that spins until its stream closes.
    let spinning =
        send(&server, "tools/call", json!({"name": "spin", "arguments": {"seconds": 600}}), EVERYTHING);
    let lock = server.hostile_data.with_file_name("examples").join("locks").join("spin.lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lock.exists() {
        assert!(Instant::now() < deadline, "spin never took its lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A retry waits for the slot; its answer turns into an event stream after 100 ms, so
    // its head says the server holds it. Then the client gives up.
    let give_up_waiting = |method: &str, params: Value| {
        let waiting = send(&server, method, params, EVERYTHING);
        waiting.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut head = [0_u8; 12];
        (&waiting).read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
    };
    let params = retry_params("note_then_ask", json!({}), json!({"roots": {"roots": []}}), &asked);
    give_up_waiting("tools/call", params);
    server.wait_for_cleanup("Cancelled Some(\"reserved 42\")");
    let answer = json!({"user_context": accept(json!({"context": "the changelog"}))});
    let params = json!({"name": prompt, "inputResponses": answer, "requestState": prompt_asked["result"]["requestState"]});
    give_up_waiting("prompts/get", params);
    let ended = loop {
        let line = server.process.wait_log("cleanup=\"completed\"");
        if line.contains("tool=\"prompts/get\"") {
            break line;
        }
    };
    assert!(ended.contains("outcome=\"cancelled\""), "{ended}");
    drop(spinning);
}

/// What a request uses within a capability is declared too: sampling with tools needs
/// `sampling.tools`, with context beyond `"none"` `sampling.context`, and a form needs
/// elicitation's forms (an empty `elicitation`, or `form` in it), not URLs alone. Before,
/// declaring the capability was enough for anything in it.
#[test]
fn a_request_needs_the_sub_capabilities_it_uses() {
    let server = Server::start("mrtr-sub-capabilities", KEY, 600);
    let sample = |extra: Value| {
        let mut params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 5,
        });
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"name": "ask_as_told", "arguments": {"sample": params}})
    };
    let with_tools = sample(json!({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}));
    let refused = post(&server, "tools/call", with_tools.clone(), r#"{"sampling": {}}"#);
    assert!(error(&refused, -32021, 400).contains("sampling.tools"), "{refused:?}");
    assert_eq!(refused.1["error"]["data"]["requiredCapabilities"], json!({"sampling": {"tools": {}}}));
    let (status, asked) = post(&server, "tools/call", with_tools, r#"{"sampling": {"tools": {}}}"#);
    assert_eq!((status, &asked["result"]["resultType"]), (200, &json!("input_required")), "{asked}");
    let with_context = sample(json!({"includeContext": "thisServer"}));
    let refused = post(&server, "tools/call", with_context.clone(), r#"{"sampling": {"tools": {}}}"#);
    assert!(error(&refused, -32021, 400).contains("sampling.context"), "{refused:?}");
    let (status, _) = post(&server, "tools/call", with_context, r#"{"sampling": {"context": {}}}"#);
    assert_eq!(status, 200);

    let form = json!({"name": "ask_as_told", "arguments": {"elicit": {"type": "object", "properties": {}}}});
    let refused = post(&server, "tools/call", form.clone(), r#"{"elicitation": {"url": {}}}"#);
    assert!(error(&refused, -32021, 400).contains("elicitation.form"), "{refused:?}");
    assert_eq!(refused.1["error"]["data"]["requiredCapabilities"], json!({"elicitation": {"form": {}}}));
    let forms = [
        r#"{"elicitation": {}}"#,
        r#"{"elicitation": {"form": {}, "url": {}}}"#,
        r#"{"elicitation": {"x": {}}}"#,
    ];
    for forms in forms {
        let (status, asked) = post(&server, "tools/call", form.clone(), forms);
        assert_eq!((status, &asked["result"]["resultType"]), (200, &json!("input_required")), "{asked}");
    }
}

#[test]
fn a_tool_that_asks_forever_ends_after_eight_rounds_with_a_clear_error() {
    let server = Server::start("mrtr-forever", KEY, 600);
    let mut asked = call(&server, "ask_forever", json!({}), EVERYTHING);
    for round in 2..=8 {
        let (status, answer) =
            retry(&server, "ask_forever", json!({}), json!({"again": {"roots": []}}), &asked);
        assert_eq!(status, 200);
        if round < 8 {
            assert_eq!(answer["result"]["resultType"], "input_required", "round {round}: {answer}");
            assert!(!server.hostile_data.join("cleanup-reason").exists(), "round {round} cleaned up");
            asked = answer;
        } else {
            assert_eq!(answer["result"]["isError"], true, "{answer}");
            assert!(text(&answer).contains("8 rounds in a row; a call may ask at most 8"), "{answer}");
        }
    }
    // The guest asked once more and was given up: it is cleaned up, as after a stop.
    server.wait_for_cleanup("Cancelled None");
}

#[test]
fn answers_are_checked_missing_ones_asked_again_and_extra_ones_ignored() {
    let server = Server::start("mrtr-answers", KEY, 600);
    let tool = "test_input_required_result_elicitation";
    let bad = json!({"name": tool, "arguments": {}, "inputResponses": {"user_name": 12345}});
    assert!(
        error(&post(&server, "tools/call", bad, EVERYTHING), -32602, 200)
            .contains("inputResponses.user_name")
    );
    let null = json!({"name": tool, "arguments": {}, "inputResponses": null});
    assert!(error(&post(&server, "tools/call", null, EVERYTHING), -32602, 200).contains("inputResponses"));

    let asked = call(&server, tool, json!({}), EVERYTHING);
    let (_, again) =
        retry(&server, tool, json!({}), json!({"wrong_key": accept(json!({"name": "x"}))}), &asked);
    assert_eq!(again["result"]["resultType"], "input_required", "a missing answer is asked again: {again}");
    let extra = json!({"user_name": accept(json!({"name": "Ada"})), "unknown": {"action": "accept"}});
    let (_, done) = retry(&server, tool, json!({}), extra, &asked);
    assert_eq!(text(&done), "Hello, Ada!");
}

#[test]
fn a_prompt_asks_too_and_other_methods_never_do() {
    let mut server = Server::start("mrtr-prompt", KEY, 600);
    let name = "test_input_required_result_prompt";
    let (status, asked) = post(&server, "prompts/get", json!({"name": name}), EVERYTHING);
    assert_eq!((status, &asked["result"]["resultType"]), (200, &json!("input_required")), "{asked}");
    let answer = json!({"user_context": accept(json!({"context": "the changelog"}))});
    let params =
        json!({"name": name, "inputResponses": answer, "requestState": asked["result"]["requestState"]});
    let (_, done) = post(&server, "prompts/get", params, EVERYTHING);
    assert_eq!(done["result"]["messages"][0]["content"]["text"], "Use this context: the changelog", "{done}");
    // A prompt that asked what the client cannot answer has run: given up, it is cleaned
    // up. Before, no cleanup ran.
    let refused = post(&server, "prompts/get", json!({"name": name}), r#"{"roots": {}}"#);
    assert!(error(&refused, -32021, 400).contains("elicitation"), "{refused:?}");
    let ended = server.process.wait_log("outcome=\"cancelled\"");
    assert!(ended.contains("tool=\"prompts/get\"") && ended.contains("cleanup=\"completed\""), "{ended}");
    // A prompt's state is no tool's.
    let params = json!({"name": "delete_collection", "arguments": {"collection": "x"}, "requestState": asked["result"]["requestState"]});
    let refused = post(&server, "tools/call", params, EVERYTHING);
    assert!(error(&refused, -32602, 200).contains("issued for prompts/get"), "{refused:?}");
}
