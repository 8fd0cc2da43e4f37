//! Tenants over a real `cordon serve`, seen by a raw HTTP/1.1 client (and stdio): API keys
//! (no key, a wrong one: 401 with the challenge; a key in the query string: 400), one tenant's
//! key against another's tool (answered exactly as an unknown tool), private caching of
//! lists and discovery, a data directory per tenant, the per-tenant rate (429 with
//! `Retry-After`; over stdio a JSON-RPC error with a retry hint) and concurrency cap, fair
//! call slots under another tenant's flood, the stdio `--tenant`, the non-loopback rule,
//! and no key in the server's log. Every JSON-RPC message received is validated against
//! the official MCP schema of the client's revision (2026-07-28, or 2025-11-25).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::wire::{Answer, Schema, meta, parse_answer};
use serde_json::{Value, json};

const ACME_KEY: &str = "acme-key-7f3a9c1e5b2d4f60";
const BETA_KEY: &str = "beta-key-0d8e6a4c2f1b3957";
const FLOOD_KEY: &str = "flood-key-5c7e9a1b3d5f7092";
const SOLO_KEY: &str = "solo-key-2b4d6f8a0c1e3579";

/// A config: the example tools (`tools`) and the hostile component (`hostile`), each with
/// a data directory, used by four tenants; `server` is the `[server]` table's extra keys.
fn config(name: &str, server: &str) -> PathBuf {
    let guests = cordon::paths::default_tools_dir();
    let dir = common::scratch(&format!("tenants-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("beta.keys"), format!("{BETA_KEY}\n")).unwrap();
    let text = format!(
        "[server]\ncache = false\n{server}\n\
         [[components]]\nname = \"tools\"\npath = {tools:?}\ndata_dir = \"data\"\n\
         [[components]]\nname = \"hostile\"\npath = {hostile:?}\ndata_dir = \"hdata\"\n\
         limits = {{ grace_ms = 50, idle_timeout_ms = 0, max_duration_ms = 60000 }}\n\
         [[tenants]]\nname = \"acme\"\ncomponents = [\"tools\", \"hostile\"]\napi_keys = {{ env = \"ACME_KEYS\" }}\n\
         [[tenants]]\nname = \"beta\"\ncomponents = [\"hostile\"]\napi_keys = {{ file = \"beta.keys\" }}\ncalls_per_second = 2\n\
         [[tenants]]\nname = \"flood\"\ncomponents = [\"hostile\"]\napi_keys = {{ env = \"FLOOD_KEYS\" }}\n\
         [[tenants]]\nname = \"solo\"\ncomponents = [\"hostile\"]\napi_keys = {{ env = \"SOLO_KEYS\" }}\nmax_concurrent_calls = 1\n",
        tools = guests.join("example-tools.wasm").display().to_string(),
        hostile = guests.join("hostile.wasm").display().to_string(),
    );
    std::fs::write(dir.join("cordon.toml"), text).unwrap();
    dir.join("cordon.toml")
}

fn cordon(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command
        .args(args)
        .env("ACME_KEYS", format!("{ACME_KEY}, acme-second-key-0123"))
        .env("FLOOD_KEYS", FLOOD_KEY)
        .env("SOLO_KEYS", SOLO_KEY)
        .env("CORDON_LOG", "debug");
    command
}

/// `cordon serve --http 127.0.0.1:0`, its port, and everything it logs.
struct Server {
    child: Child,
    port: u16,
    /// Where its metrics are served.
    metrics: String,
    log: Arc<Mutex<String>>,
    schema: Arc<Schema>,
    dir: PathBuf,
}

impl Server {
    fn start(name: &str, server: &str) -> Self {
        let config = config(name, server);
        let mut child = cordon(&["serve", "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let (mut port, mut metrics) = (None, None);
        while port.is_none() || metrics.is_none() {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "the server exited: {}", log.lock().unwrap());
            log.lock().unwrap().push_str(&line);
            let address = line.split("http://").nth(1).map(|rest| rest.split('/').next().unwrap().to_owned());
            if line.contains("serving metrics") {
                metrics = address;
            } else if line.contains("serving MCP") {
                port = address.map(|address| address.rsplit(':').next().unwrap().parse().unwrap());
            }
        }
        let (port, metrics) = (port.unwrap(), metrics.unwrap());
        let collected = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                collected.lock().unwrap().push_str(&line);
                collected.lock().unwrap().push('\n');
            }
        });
        let dir = config.parent().unwrap().to_owned();
        Self { child, port, metrics, log, schema: Arc::new(Schema::new()), dir }
    }

    fn post(&self, target: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
        post(self.port, target, headers, body, &self.schema)
    }

    /// A modern request of `method` as the holder of `key` (none: no Authorization).
    fn request(&self, key: Option<&str>, method: &str, name: Option<&str>, params: Value) -> Answer {
        let mut params = params;
        params.as_object_mut().unwrap().insert("_meta".into(), meta());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let bearer = key.map(|key| format!("Bearer {key}"));
        let mut headers = modern_headers(method, name);
        if let Some(bearer) = &bearer {
            headers.push(("Authorization", bearer));
        }
        self.post("/mcp", &headers, &body)
    }

    /// The log so far, once a line of it passes `wanted` (the log is written in batches).
    fn log_until(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log.lock().unwrap().clone();
            if log.lines().any(&wanted) {
                return log;
            }
            assert!(Instant::now() < deadline, "no such line in {log}");
            std::thread::sleep(Duration::from_millis(20)); // polling the log, with a deadline
        }
    }

    /// `/metrics`, once it holds `sample` (calls are counted just after their answer).
    fn metrics_with(&self, sample: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut stream = TcpStream::connect(&self.metrics).unwrap();
            write!(stream, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.metrics)
                .unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            if text.contains(sample) {
                return text;
            }
            assert!(Instant::now() < deadline, "no {sample} in {text}");
            std::thread::sleep(Duration::from_millis(20)); // polling the scrape, with a deadline
        }
    }

    fn call(&self, key: &str, tool: &str, arguments: Value) -> Answer {
        self.request(Some(key), "tools/call", Some(tool), json!({"name": tool, "arguments": arguments}))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Answer {
    fn message(&self) -> &Value {
        self.messages.last().unwrap_or_else(|| panic!("no message: {} {}", self.status, self.body))
    }

    fn text(&self) -> &str {
        self.message()["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{}", self.message()))
    }
}

fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    headers
}

fn send(port: u16, target: &str, headers: &[(&str, &str)], body: &Value) -> TcpStream {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut head = format!("POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

fn post(port: u16, target: &str, headers: &[(&str, &str)], body: &Value, schema: &Schema) -> Answer {
    read_answer(send(port, target, headers, body), schema)
}

fn read_answer(stream: TcpStream, schema: &Schema) -> Answer {
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut raw = Vec::new();
    BufReader::new(stream).read_to_end(&mut raw).unwrap();
    parse_answer(&String::from_utf8(raw).unwrap(), schema)
}

fn names(answer: &Answer) -> Vec<String> {
    let tools = answer.message()["result"]["tools"].as_array().unwrap();
    tools.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn requests_without_a_valid_key_get_401_with_the_challenge_and_no_key_is_logged() {
    let server = Server::start("keys", "");
    // API keys alone publish no protected resource metadata: nothing to point a client at.
    let metadata = "Bearer realm=\"mcp\"".to_owned();
    let list = |key: Option<&str>| server.request(key, "tools/list", None, json!({}));
    let missing = list(None);
    assert_eq!(missing.status, 401, "{}", missing.body);
    assert_eq!(missing.header("www-authenticate"), Some(metadata.as_str()));
    for wrong in ["wrong-key", "acme-key-7f3a9c1e5b2d4f6", &format!("{ACME_KEY}x")] {
        let refused = list(Some(wrong));
        assert_eq!(refused.status, 401, "{wrong}: {}", refused.body);
        assert_eq!(
            refused.header("www-authenticate"),
            Some(&*format!("{metadata}, error=\"invalid_token\""))
        );
        assert!(!refused.body.contains(wrong), "the refusal echoes the key: {}", refused.body);
    }
    // A refused client keeps no connection: asking again means a new one.
    let mut kept = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let head =
        format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 2\r\n\r\n{{}}", server.port);
    kept.write_all(head.as_bytes()).unwrap();
    // Under the header timeout (10 s), which would close an idle kept-alive connection too.
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut raw = String::new();
    kept.read_to_string(&mut raw).expect("the connection closed after the refusal");
    assert!(raw.starts_with("HTTP/1.1 401") && raw.contains("connection: close"), "{raw}");
    // Another scheme is no credential at all.
    let basic = server.post("/mcp", &[("Authorization", "Basic YWNtZTprZXk=")], &json!({}));
    assert_eq!(basic.status, 401);
    // A key in the query string is refused, even beside a good header.
    let bearer = format!("Bearer {ACME_KEY}");
    let mut headers = modern_headers("tools/list", None);
    headers.push(("Authorization", &bearer));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
    let in_query = server.post(&format!("/mcp?api_key={ACME_KEY}"), &headers, &body);
    // RFC 6750 §3.1: a request made wrongly (not a credential that failed) is 400.
    assert_eq!(in_query.status, 400, "{}", in_query.body);
    assert!(in_query.body.contains("query string"), "{}", in_query.body);
    assert_eq!(in_query.header("www-authenticate"), Some(&*format!("{metadata}, error=\"invalid_request\"")));
    // The challenge never quotes what the client chose: a Host header that would have
    // ended the quoted URL early (before, the URL was made from it).
    let mut odd_host = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let head = "POST /mcp HTTP/1.1\r\nHost: localhost:1@evil.example\"x\r\nContent-Length: 2\r\n\r\n{}";
    odd_host.write_all(head.as_bytes()).unwrap();
    let mut raw = String::new();
    odd_host.read_to_string(&mut raw).unwrap();
    assert!(!raw.contains("evil.example"), "{raw}");
    // Both of acme's keys work; the second from the comma-separated variable.
    assert_eq!(list(Some(ACME_KEY)).status, 200);
    assert_eq!(list(Some("acme-second-key-0123")).status, 200);
    assert_eq!(list(Some(BETA_KEY)).status, 200);
    assert_eq!(server.call(ACME_KEY, "echo", json!({"text": "hi"})).text(), "hi");

    // The call is counted under its tenant, and its log line names the tenant.
    let metrics = server.metrics_with("cordon_tenant_calls_total{tenant=\"acme\",outcome=\"ok\"} 1");
    let log = server.log_until(|line| line.contains("tool=\"echo\"") && line.contains("tenant=\"acme\""));
    for secret in [ACME_KEY, BETA_KEY, "acme-second-key-0123", "wrong-key"] {
        assert!(!log.contains(secret), "the log holds a key: {log}");
        assert!(!metrics.contains(secret), "the metrics hold a key: {metrics}");
    }
}

#[test]
fn a_tenant_sees_its_tools_only_and_another_tenants_tool_is_answered_as_unknown() {
    let server = Server::start("views", "");
    let acme = server.request(Some(ACME_KEY), "tools/list", None, json!({}));
    let beta = server.request(Some(BETA_KEY), "tools/list", None, json!({}));
    let (acme, beta_names) = (names(&acme), names(&beta));
    assert!(acme.contains(&"echo".to_owned()) && acme.contains(&"park".to_owned()), "{acme:?}");
    assert!(
        beta_names.contains(&"park".to_owned()) && !beta_names.contains(&"echo".to_owned()),
        "{beta_names:?}"
    );
    // Lists and discovery depend on the tenant: never to be cached across tenants.
    assert_eq!(beta.message()["result"]["cacheScope"], "private");
    let discover = server.request(Some(BETA_KEY), "server/discover", None, json!({}));
    assert_eq!(discover.message()["result"]["cacheScope"], "private");

    // solo (hostile only) calling acme's `echo` gets exactly what a tool that exists nowhere gets.
    let hidden = server.call(SOLO_KEY, "echo", json!({"text": "hi"}));
    let unknown = server.call(SOLO_KEY, "no_such_tool", json!({"text": "hi"}));
    assert_eq!(hidden.status, unknown.status);
    let same = |answer: &Answer, name: &str| answer.message().to_string().replace(name, "NAME");
    assert_eq!(same(&hidden, "echo"), same(&unknown, "no_such_tool"));
    assert!(
        hidden.message()["error"]["message"].as_str().unwrap().contains("nknown tool"),
        "{}",
        hidden.message()
    );
    // Arguments that would be wrong for the hidden tool change nothing either.
    let bad_arguments = server.call(SOLO_KEY, "echo", json!({"text": 5}));
    assert_eq!(
        same(&bad_arguments, "echo"),
        same(&server.call(SOLO_KEY, "nothing", json!({"text": 5})), "nothing")
    );
    // Nor are solo's refusals counted or logged as acme's `echo`'s, even one refused before
    // the tool is looked up (arguments that are not an object): they name no tool.
    let not_an_object = server.call(SOLO_KEY, "echo", json!(5));
    assert_eq!(not_an_object.message()["error"]["code"], -32602, "{}", not_an_object.message());
    let metrics = server.metrics_with(r#"cordon_calls_total{component="",tool="",outcome="refused"} 5"#);
    assert!(!metrics.contains(r#"tool="echo""#), "{metrics}");
    let log = server.log_until(|line| line.contains("tenant=\"solo\"") && line.contains("refused"));
    assert!(!log.lines().any(|line| line.contains("tenant=\"solo\"") && line.contains("echo")), "{log}");
}

#[test]
fn a_component_used_by_two_tenants_gives_each_a_data_directory_of_its_own() {
    let server = Server::start("data", "");
    let write =
        |key: &str, text: &str| server.call(key, "write_text", json!({"path": "/data/note", "text": text}));
    let read = |key: &str| server.call(key, "read_text", json!({"path": "/data/note"}));
    assert!(write(ACME_KEY, "acme's").text().starts_with("wrote"));
    assert_eq!(read(ACME_KEY).text(), "acme's");
    // beta's /data is another directory: acme's note is not there.
    let beta = read(BETA_KEY);
    assert_eq!(beta.message()["result"]["isError"], true, "{}", beta.message());
    assert!(write(BETA_KEY, "beta's").text().starts_with("wrote"));
    assert_eq!(read(ACME_KEY).text(), "acme's");
    let hdata = server.dir.join("hdata");
    assert_eq!(std::fs::read_to_string(hdata.join("acme/note")).unwrap(), "acme's");
    assert_eq!(std::fs::read_to_string(hdata.join("beta/note")).unwrap(), "beta's");
    assert!(!hdata.join("note").exists());
}

#[test]
fn over_its_rate_a_tenants_call_gets_429_with_retry_after() {
    let server = Server::start("rate", "");
    // beta: 2 calls a second, bursts of 2. Whatever runs guest code counts as a call: a
    // tool call, a resource read, a completion (a prompt too).
    let item = json!({"uri": "hostile://item/0"});
    let complete =
        json!({"ref": {"type": "ref/prompt", "name": "spin"}, "argument": {"name": "label", "value": "x"}});
    // A request the transport refuses (its `Mcp-Name` is not the tool it calls) spends none
    // of the rate: after three of them the burst is whole.
    let mismatched = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "park", "arguments": {"ms": 1}, "_meta": meta()}});
    let bearer = format!("Bearer {BETA_KEY}");
    let mut headers = modern_headers("tools/call", Some("spin"));
    headers.push(("Authorization", &bearer));
    for _ in 0..3 {
        assert_eq!(server.post("/mcp", &headers, &mismatched).status, 400);
    }
    let answers = [
        server.call(BETA_KEY, "park", json!({"ms": 1})),
        server.request(Some(BETA_KEY), "resources/read", Some("hostile://item/0"), item),
        server.request(Some(BETA_KEY), "completion/complete", None, complete),
    ];
    assert_eq!(answers[0].status, 200);
    assert_eq!(answers[1].status, 200);
    assert_eq!(answers[1].message()["result"]["contents"][0]["text"], "item 0", "{}", answers[1].body);
    let refused = &answers[2];
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    let error = &refused.message()["error"];
    assert!(error["message"].as_str().unwrap().contains("2 calls per second"), "{error}");
    assert!(error["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{error}");
    // Other tenants are not held to beta's rate.
    for _ in 0..5 {
        assert_eq!(server.call(ACME_KEY, "park", json!({"ms": 1})).status, 200);
    }
}

#[test]
fn over_its_concurrent_calls_a_tenants_call_waits_its_queue_bound_then_is_refused() {
    let server = Server::start("concurrency", "queue_timeout_ms = 300");
    let port = server.port;
    let bearer = format!("Bearer {SOLO_KEY}");
    let body = |ms: u64| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "park", "arguments": {"ms": ms}, "_meta": meta()}})
    };
    let mut headers = modern_headers("tools/call", Some("park"));
    headers.push(("Authorization", &bearer));
    // Parked until the end of the test, which closes its stream and so cancels it.
    let holding = send(port, "/mcp", &headers, &body(60_000));
    // Wait for the first call to hold solo's one slot: a second call of a short park then
    // waits (the queue bound, 300 ms) and is refused, while acme is not held up.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let started = Instant::now();
        let answer = post(port, "/mcp", &headers, &body(1), &server.schema);
        if answer.message()["result"]["isError"] == true {
            break (answer, started.elapsed());
        }
        assert!(Instant::now() < deadline, "solo's second call never waited behind its first");
    };
    let (answer, waited) = refused;
    assert!(
        answer.text().contains("tenant's call limit is reached: its 1 concurrent calls"),
        "{}",
        answer.text()
    );
    assert!(waited >= Duration::from_millis(300), "refused after {waited:?}, before its queue bound");
    // acme is answered while solo's first call still holds solo's slot (another of solo's
    // calls is still refused after it), so acme never waited behind solo's cap. (Bounded at
    // 300 ms, as it was, it timed the machine's load rather than the cap.)
    assert_eq!(server.call(ACME_KEY, "park", json!({"ms": 1})).status, 200);
    let still_held = post(port, "/mcp", &headers, &body(1), &server.schema);
    assert!(still_held.text().contains("tenant's call limit is reached"), "{}", still_held.text());
    drop(holding);
}

/// Tenant `flood` has 200 calls queued for 4 slots, each holding its slot 100 ms: served
/// first come first served, a call of `acme` made after them would wait behind the whole
/// queue, about 196 / 4 × 100 ms ≈ 4.9 s. Slots are shared in turns, so it waits at most
/// about one call's length.
#[test]
fn another_tenants_flood_does_not_delay_a_tenants_call() {
    let server = Server::start("fair", "max_concurrent_calls = 4\nqueue_timeout_ms = 60000");
    let bearer = format!("Bearer {FLOOD_KEY}");
    let mut headers = modern_headers("tools/call", Some("park"));
    headers.push(("Authorization", &bearer));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "park", "arguments": {"ms": 100}, "_meta": meta()}});
    let (answered, answers) = std::sync::mpsc::channel();
    let streams: Vec<TcpStream> = (0..200).map(|_| send(server.port, "/mcp", &headers, &body)).collect();
    let readers: Vec<_> = streams
        .into_iter()
        .map(|stream| {
            let (schema, answered) = (server.schema.clone(), answered.clone());
            std::thread::spawn(move || {
                let answer = read_answer(stream, &schema);
                let _ = answered.send(answer.status);
            })
        })
        .collect();
    // The first answers mean the flood is in: the rest of it is queued.
    for _ in 0..4 {
        assert_eq!(answers.recv_timeout(Duration::from_secs(30)).unwrap(), 200);
    }
    let started = Instant::now();
    let answer = server.call(ACME_KEY, "echo", json!({"text": "through"}));
    let waited = started.elapsed();
    assert_eq!(answer.text(), "through");
    let mut flood_left = 0;
    while answers.try_recv().is_ok() {
        flood_left += 1;
    }
    assert!(
        waited < Duration::from_millis(1500),
        "acme's call waited {waited:?} behind flood's queue (answered meanwhile: {flood_left})"
    );
    for reader in readers {
        reader.join().unwrap();
    }
}

/// `cordon serve --stdio --tenant NAME` on a config, asked one 2026-07-28 request at a
/// time, every answer checked against the schema.
struct StdioTenant {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    schema: Schema,
}

impl StdioTenant {
    fn start(config: &Path, tenant: &str) -> Self {
        let mut child = cordon(&["serve", "--stdio", "--tenant", tenant, "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self { child, stdin, stdout, schema: Schema::new() }
    }

    fn ask(&mut self, id: i64, method: &str, mut params: Value) -> Value {
        params.as_object_mut().unwrap().insert("_meta".into(), meta());
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{message}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        self.schema.check_sent(&answer, Some(method));
        answer
    }

    /// End of input: the server exits cleanly.
    fn finish(self) {
        let Self { mut child, stdin, .. } = self;
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
}

#[test]
fn stdio_serves_the_tenant_named_and_answers_over_its_rate_with_a_retry_hint() {
    let config = config("stdio", "");
    let mut server = StdioTenant::start(&config, "beta");
    let mut ask = |id: i64, method: &str, params: Value| server.ask(id, method, params);
    let list = ask(1, "tools/list", json!({}));
    let tools: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(tools.contains(&"park") && !tools.contains(&"echo"), "{tools:?}");
    assert_eq!(list["result"]["cacheScope"], "private");
    let answer = ask(2, "tools/call", json!({"name": "park", "arguments": {"ms": 1}}));
    assert_eq!(answer["result"]["content"][0]["text"], "parked 1 ms", "{answer}");
    // A resource read runs guest code too: it counts as a call.
    let answer = ask(3, "resources/read", json!({"uri": "hostile://item/0"}));
    assert_eq!(answer["result"]["contents"][0]["text"], "item 0", "{answer}");
    let refused = ask(4, "resources/read", json!({"uri": "hostile://item/0"}));
    assert!(refused["error"]["message"].as_str().unwrap().starts_with("Rate limited"), "{refused}");
    assert!(refused["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{refused}");
    server.finish();
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[test]
fn a_feature_no_component_offers_is_unknown_and_spends_no_rate() {
    // `legacy-tool` offers tools only: prompts, resources and completions are unknown
    // methods to its tenant, answered before its one call a second is spent.
    let dir = common::scratch("tenants-unoffered");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tool = cordon::paths::default_tools_dir().join("legacy-tool.wasm");
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\n[[components]]\nname = \"legacy\"\npath = {tool:?}\n\
             [[tenants]]\nname = \"lone\"\ncomponents = [\"legacy\"]\napi_keys = {{ env = \"SOLO_KEYS\" }}\n\
             calls_per_second = 1\n"
        ),
    )
    .unwrap();
    let mut server = StdioTenant::start(&config, "lone");
    let mut ask = |id: i64, method: &str, params: Value| server.ask(id, method, params);
    let complete =
        json!({"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "x"}});
    for (id, (method, params)) in [
        ("prompts/get", json!({"name": "p"})),
        ("resources/read", json!({"uri": "a://b"})),
        ("completion/complete", complete),
        ("prompts/get", json!({"name": "p", "inputResponses": 5})),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = ask(id as i64, method, params);
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    let answer = ask(9, "tools/call", json!({"name": "legacy_echo", "arguments": {"text": "whole"}}));
    assert_eq!(answer["result"]["content"][0]["text"], "whole", "{answer}");
    server.finish();
    let _ = std::fs::remove_dir_all(dir);
}

fn refused_at_start(command: &mut Command) -> String {
    let output = command.stdin(Stdio::null()).output().unwrap();
    assert!(!output.status.success());
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn a_symlink_where_a_tenants_data_directory_goes_is_refused_with_what_to_do() {
    let config = config("symlinked", "");
    let dir = config.parent().unwrap();
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(dir.join("hdata")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("hdata/acme")).unwrap();
    let error = refused_at_start(cordon(&["serve", "--stdio", "--tenant", "acme", "--config"]).arg(&config));
    let expected = format!(
        "the tenant's data directory {} is a symlink or not a directory (something wrote it there; \
         a tenant's must be a directory of its own): remove it",
        dir.join("hdata/acme").display()
    );
    assert!(error.contains(&expected), "{error}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stdio_needs_a_known_tenant_and_open_http_needs_tenants_or_a_flag() {
    let config = config("startup", "");
    let serve = |args: &[&str]| {
        let mut command = cordon(args);
        command.arg("--config").arg(&config);
        command
    };
    let error = refused_at_start(&mut serve(&["serve", "--stdio"]));
    assert!(error.contains("choose whose tools and quotas apply with --tenant NAME"), "{error}");
    let error = refused_at_start(&mut serve(&["serve", "--stdio", "--tenant", "../acme"]));
    assert!(error.contains("no such tenant"), "{error}");

    // No [[tenants]]: loopback only, unless the operator says otherwise.
    let open = Path::new(&config).with_file_name("open.toml");
    std::fs::write(&open, "[server]\ncache = false\n").unwrap();
    let error = refused_at_start(cordon(&["serve", "--http", "0.0.0.0:0", "--config"]).arg(&open));
    assert!(error.contains("--allow-unauthenticated"), "{error}");
    let mut allowed = cordon(&["serve", "--http", "0.0.0.0:0", "--allow-unauthenticated", "--config"])
        .arg(&open)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(allowed.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving MCP on http://0.0.0.0:") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "it did not serve");
    }
    let _ = allowed.kill();
    let _ = allowed.wait();
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[test]
fn a_2025_era_session_belongs_to_the_tenant_and_key_that_opened_it() {
    let server = Server::start("sessions", "");
    let base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")];
    let with_key = |key: &str, extra: &[(&'static str, String)]| {
        let mut headers: Vec<(String, String)> =
            base.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect();
        headers.push(("Authorization".into(), format!("Bearer {key}")));
        headers.extend(extra.iter().map(|(name, value)| (name.to_string(), value.clone())));
        headers
    };
    let legacy_schema = Schema::legacy();
    let post_as = |headers: &[(String, String)], body: &Value| {
        let headers: Vec<(&str, &str)> =
            headers.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
        post(server.port, "/mcp", &headers, body, &legacy_schema)
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = post_as(&with_key(SOLO_KEY, &[]), &init);
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened.header("mcp-session-id").expect("a session id").to_owned();
    let legacy = [("MCP-Protocol-Version", "2025-11-25".to_owned()), ("Mcp-Session-Id", session)];
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let own = post_as(&with_key(SOLO_KEY, &legacy), &list);
    assert_eq!(own.status, 200, "{}", own.body);
    // acme holds a valid key, but not this session's: the session is unknown to it.
    let other = post_as(&with_key(ACME_KEY, &legacy), &list);
    assert_eq!(other.status, 404, "{}", other.body);

    // Nor is a session another key's of the same tenant: acme's second key can neither
    // post to, follow nor end a session its first key opened.
    let opened = post_as(&with_key(ACME_KEY, &[]), &init);
    let acme_session = opened.header("mcp-session-id").expect("a session id").to_owned();
    let acme = [("MCP-Protocol-Version", "2025-11-25".to_owned()), ("Mcp-Session-Id", acme_session.clone())];
    let stolen = post_as(&with_key("acme-second-key-0123", &acme), &list);
    assert_eq!(stolen.status, 404, "{}", stolen.body);
    let answer_asked = json!({"jsonrpc": "2.0", "id": 1, "result": {"action": "accept", "content": {}}});
    assert_eq!(post_as(&with_key("acme-second-key-0123", &acme), &answer_asked).status, 404);
    let raw = |method: &str, key: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {key}\r\nMcp-Session-Id: {acme_session}\r\n\
             MCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).unwrap();
        String::from_utf8_lossy(&head[9..12]).into_owned()
    };
    assert_eq!(raw("GET", "acme-second-key-0123"), "404");
    assert_eq!(raw("DELETE", "acme-second-key-0123"), "404");
    assert_eq!(post_as(&with_key(ACME_KEY, &acme), &list).status, 200, "the session outlived those tries");
    assert_eq!(raw("DELETE", ACME_KEY), "200");

    // Another tenant opening sessions past its cap (1,000) closes its own oldest, never
    // solo's.
    let beta_sessions: Vec<String> = (0..1001)
        .map(|_| {
            let opened = post_as(&with_key(BETA_KEY, &[]), &init);
            assert_eq!(opened.status, 200, "{}", opened.body);
            opened.header("mcp-session-id").expect("a session id").to_owned()
        })
        .collect();
    let in_session = |key: &str, session: &str| {
        let headers =
            [("MCP-Protocol-Version", "2025-11-25".to_owned()), ("Mcp-Session-Id", session.to_owned())];
        post_as(&with_key(key, &headers), &list).status
    };
    assert_eq!(in_session(SOLO_KEY, &legacy[1].1), 200, "solo's session was closed by beta's");
    assert_eq!(in_session(BETA_KEY, &beta_sessions[0]), 404, "beta's oldest stayed past its cap");
    assert_eq!(in_session(BETA_KEY, &beta_sessions[1000]), 200);
}

/// A sealed `requestState` is bound to the API key it was issued to: another key of the
/// same tenant that comes by it is refused with -32602 before the tool runs, and the key
/// it was issued to continues the call.
#[test]
fn a_request_state_is_taken_back_only_from_the_key_it_was_issued_to() {
    let server = Server::start("callers", "");
    let delete = |key: &str, extra: Value| {
        let mut params = json!({"name": "delete_collection", "arguments": {"collection": "books"}});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let bearer = format!("Bearer {key}");
        let mut headers = modern_headers("tools/call", Some("delete_collection"));
        headers.push(("Authorization", &bearer));
        server.post("/mcp", &headers, &body).message().clone()
    };
    let asked = delete(ACME_KEY, json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let retry = json!({
        "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}},
        "requestState": asked["result"]["requestState"],
    });
    let stolen = delete("acme-second-key-0123", retry.clone());
    assert_eq!(stolen["error"]["code"], -32602, "{stolen}");
    assert!(stolen["error"]["message"].as_str().unwrap().contains("another caller"), "{stolen}");
    let own = delete(ACME_KEY, retry);
    assert_eq!(own["result"]["content"][0]["text"], "Deleted books", "{own}");
}

/// `serve --stdio --tenant` serves that tenant alone, so the request bytes are its own, not
/// split with the config's other tenants: a request costing more than the half a tenant of
/// several may hold is served (before, it was refused as too costly for its share).
#[test]
fn stdio_with_a_tenant_holds_the_whole_bound_not_a_share_of_it() {
    let config = config("stdio-share", "max_queued_request_kb = 2048\nmax_request_cost_kb = 2048");
    let mut child = cordon(&["serve", "--stdio", "--tenant", "acme", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // What admission weighs it at (parsed, and its text held twice meanwhile) is over
    // the half of 2 MiB a tenant of several may hold, within all of it.
    let text = "x".repeat(400 << 10);
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}, "_meta": meta()}});
    let line = message.to_string();
    let weight = cordon::cost::estimate(line.as_bytes()).unwrap().bytes + 2 * line.len();
    assert!(weight > 1024 << 10 && weight < 2048 << 10, "{weight}");
    writeln!(stdin, "{line}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    Schema::new().check_sent(&answer, Some("tools/call"));
    assert_eq!(
        answer["result"]["content"][0]["text"].as_str().map(str::len),
        Some(text.len()),
        "{line:.300}"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}
