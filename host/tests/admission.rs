//! Admission, in process: requests are charged what they hold in memory (a parsed message
//! at its estimated size, not its length), the bytes charged never pass the server's
//! bound, and a request over it is refused at once: 503 with `Retry-After` over HTTP, a
//! JSON-RPC error on stdio. Every JSON-RPC message received is checked against the
//! official schema.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::wire::{Schema, meta};
use cordon::auth::{ApiKeys, Tenant, TenantId, Tenants};
use cordon::dispatch::{Connection, Framed, Outbox, RateCheck, Server, ServerLimits};
use cordon::protocol::jsonrpc;
use cordon::runtime::{ComponentOptions, Runtime, TenantView};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Keys per "large" request: about 1.5 MB of text, about 20 MB once parsed.
const KEYS: usize = 150_000;

/// Room for two large requests (about 22 MB each, with their text), not three; one of
/// twice as many keys is too costly alone.
const LIMITS: ServerLimits =
    ServerLimits { max_queued_request_bytes: 48 << 20, max_request_cost: 32 << 20, max_listen_streams: 1024 };

/// The example tools with one call slot, so that calls queue.
async fn server(name: &str) -> Arc<Server> {
    Server::with_limits(runtime(name).await, Duration::from_millis(10), LIMITS)
}

/// [`server`] for the tenants `a` and `b` (keys `key-a-0123456789ab`, `key-b-…`), within `limits`.
async fn server_of_two_tenants(name: &str, limits: ServerLimits) -> Arc<Server> {
    server_of_tenants(name, limits, &["a", "b"]).await
}

/// [`server`] for the tenants `names` (each `n` with the key `key-n-0123456789ab`), within `limits`.
async fn server_of_tenants(name: &str, limits: ServerLimits, names: &[&str]) -> Arc<Server> {
    let mut keys = ApiKeys::default();
    let tenants = names.iter().map(|name| {
        let id = TenantId::new(name);
        keys.add(&id, &format!("key-{name}-0123456789ab")).unwrap();
        Tenant::new(id, TenantView::new(name, ["example-tools".to_owned()], None), None)
    });
    let tenants = tenants.collect();
    let tenants = Arc::new(Tenants::new(tenants, keys));
    Server::with_tenants(runtime_for(name, names).await, Duration::from_millis(10), limits, tenants)
}

async fn runtime(name: &str) -> Arc<Runtime> {
    runtime_for(name, &[]).await
}

/// The example tools, loaded for `tenants` (each with a data directory of its own).
async fn runtime_for(name: &str, tenants: &[&str]) -> Arc<Runtime> {
    let mut runtime = Runtime::new(common::settings(1)).unwrap();
    let data = common::scratch(&format!("admission-{name}"));
    std::fs::create_dir_all(&data).unwrap();
    let options = ComponentOptions {
        limits: common::quick_limits(),
        data_dir: Some(data),
        tenants: tenants.iter().map(|tenant| (*tenant).to_owned()).collect(),
        ..ComponentOptions::default()
    };
    runtime.load_file(&cordon::paths::example_tools(), options).await.unwrap();
    Arc::new(runtime)
}

/// A `tools/call` of `echo` whose arguments carry `keys` more small keys (the tool skips
/// them; the host parses them all).
fn many_keys(id: i64, keys: usize) -> String {
    let mut arguments = String::from("{\"text\":\"x\"");
    for key in 0..keys {
        arguments.push_str(&format!(",\"k{key}\":0"));
    }
    arguments.push('}');
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\
         \"arguments\":{arguments},\"_meta\":{}}}}}",
        meta()
    )
}

fn spin(id: i64, seconds: f64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "spin", "arguments": {"seconds": seconds}, "_meta": meta()}})
    .to_string()
}

/// Wait until the only call slot is taken.
async fn slot_taken(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.runtime().pool_usage().calls == 0 {
        assert!(Instant::now() < deadline, "the spin call never started");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Wait until every charge is given back (a call's task drops it just after its answer).
async fn all_released(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.admission().used() != 0 {
        assert!(Instant::now() < deadline, "{} bytes still charged", server.admission().used());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One HTTP exchange: status, headers (lower-case names) and the JSON-RPC messages.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    messages: Vec<Value>,
    /// `{"error": "…"}`'s text, for a refusal made before the message could be read.
    plain_error: Option<String>,
}

async fn post(port: u16, method: &str, name: Option<&str>, body: &str, schema: &Schema) -> Answer {
    post_as(None, port, method, name, body, schema).await
}

/// [`post`] with `key` as its bearer credential.
async fn post_as(
    key: Option<&str>,
    port: u16,
    method: &str,
    name: Option<&str>,
    body: &str,
    schema: &Schema,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = name.map(|name| format!("Mcp-Name: {name}\r\n")).unwrap_or_default();
    let key = key.map(|key| format!("Authorization: Bearer {key}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{key}\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n{name}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw)).await.unwrap().unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let sse = headers.iter().any(|(key, value)| key == "content-type" && value == "text/event-stream");
    let mut plain_error = None;
    let messages: Vec<Value> = if sse {
        // Chunked: every event is one `data:` line within a chunk.
        body.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    } else {
        let value: Value = serde_json::from_str(body).unwrap();
        if value.get("jsonrpc").is_some() {
            vec![value]
        } else {
            plain_error = value["error"].as_str().map(str::to_owned);
            Vec::new()
        }
    };
    for message in &messages {
        schema
            .check_sent(message, Some("tools/call").filter(|_| message.pointer("/result/content").is_some()));
    }
    Answer { status, headers, messages, plain_error }
}

/// `cordon::transport::http::serve` on a port of its own, until `stop` is sent.
struct Serving {
    port: u16,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn serve_http(server: &Arc<Server>) -> Serving {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(cordon::transport::http::serve(
        server.clone(),
        listener,
        cordon::transport::http::HttpSettings::default(),
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    Serving { port, stop, serving }
}

/// POST `body` (a `tools/call` of `echo`) from `source` (an address of the loopback), on
/// a socket whose receive buffer is 4 KiB, so that what it does not read waits in the
/// server; the stream, nothing read.
async fn post_echo_reading_little(source: [u8; 4], port: u16, body: &str) -> tokio::net::TcpStream {
    post_reading_little(source, port, "echo", body).await
}

/// [`post_echo_reading_little`], of a `tools/call` of `tool`.
async fn post_reading_little(source: [u8; 4], port: u16, tool: &str, body: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind((source, 0).into()).unwrap();
    let mut stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Connection: close\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

/// A `tools/call` of `echo` with `bytes` of text: about twice that charged while it waits
/// or runs, and its answer about that much.
fn large_echo(bytes: usize) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x".repeat(bytes)}, "_meta": meta()}})
    .to_string()
}

/// The status of the answer coming on `stream`, read no further than its head; for a
/// refusal, the rest of it too (its text).
async fn status_of(stream: &mut tokio::net::TcpStream) -> (u16, String) {
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read =
            tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte)).await.unwrap().unwrap();
        assert_eq!(read, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut rest = Vec::new();
    if status != 200 {
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await.unwrap().unwrap();
    }
    (status, String::from_utf8_lossy(&rest).into_owned())
}

/// Calls ended: each after its answer was handed to its connection.
#[derive(Default)]
struct Ended(std::sync::atomic::AtomicUsize);

impl cordon::runtime::CallObserver for Ended {
    fn call_ended(&self, _: &cordon::runtime::CallEnded) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Ended {
    /// Wait until `calls` have ended.
    async fn reach(&self, calls: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.0.load(std::sync::atomic::Ordering::Acquire) < calls {
            assert!(
                Instant::now() < deadline,
                "{} of {calls} calls ended",
                self.0.load(std::sync::atomic::Ordering::Acquire)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// An answer waiting for a client that does not read it is held in this server's memory:
/// it stays charged to the bound until written, so that thousands of such clients make new
/// requests wait instead of holding gigabytes the bound never saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_a_client_does_not_read_stay_charged_until_written() {
    const CLIENTS: usize = 4;
    let ended = Arc::new(Ended::default());
    let mut runtime = Runtime::new(common::settings(1)).unwrap();
    runtime.observe(ended.clone());
    let options = ComponentOptions { limits: common::quick_limits(), ..ComponentOptions::default() };
    runtime.load_file(&cordon::paths::example_tools(), options).await.unwrap();
    let server = Server::with_limits(Arc::new(runtime), Duration::from_millis(10), LIMITS);
    let Serving { port, stop, serving } = serve_http(&server).await;
    let body = large_echo(3 << 20);
    let mut unread = Vec::new();
    // Each from an address of its own: one client's share is half the bound.
    for client in 1..=CLIENTS as u8 {
        unread.push(post_echo_reading_little([127, 0, 0, client], port, &body).await);
    }
    // Every call answered (its request's charge given back); most of each answer unread.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ended.0.load(std::sync::atomic::Ordering::Acquire) < CLIENTS
        || server.admission().used() < CLIENTS * (2 << 20)
    {
        assert!(
            Instant::now() < deadline,
            "{} bytes charged with {CLIENTS} answers of 3 MiB unread",
            server.admission().used()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(unread);
    all_released(&server).await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// The hostile component on `slots` call slots, its data directory holding `big.txt` of
/// `bytes` bytes (for `read_text`), and the count of its calls ended.
async fn reading_a_big_file(name: &str, slots: usize, bytes: usize) -> (Arc<Runtime>, Arc<Ended>) {
    let ended = Arc::new(Ended::default());
    let mut runtime = Runtime::new(common::settings(slots)).unwrap();
    runtime.observe(ended.clone());
    let data = common::fresh_dir(name);
    std::fs::write(data.join("big.txt"), "x".repeat(bytes)).unwrap();
    let options = ComponentOptions {
        limits: common::quick_limits(),
        data_dir: Some(data),
        ..ComponentOptions::default()
    };
    runtime.load_file(&common::hostile(), options).await.unwrap();
    (Arc::new(runtime), ended)
}

/// An answer leaves its call slot and its request's charge behind as it is sent, and may
/// then wait in its request's outbox behind other messages for as long as the client
/// takes to read them: it is charged from the moment it is sent. Before, it was charged
/// only once the response's task took it to write, so answers waiting behind log lines
/// for a slow client were held by nothing the bound saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_waiting_in_its_outbox_is_charged_from_the_moment_it_is_sent() {
    const ANSWER: usize = 3 << 20;
    let (runtime, ended) = reading_a_big_file("admission-outbox", 2, ANSWER).await;
    let server = Server::with_limits(runtime, Duration::from_millis(10), LIMITS);
    let connection = Connection::new(server.clone());
    // Room for the answer, and no one reads it yet.
    let (out, mut sent) = Outbox::channel(&server, 64);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "read_text", "arguments": {"path": "/data/big.txt"}, "_meta": meta()}});
    connection.handle(jsonrpc::classify(call), &out).await;
    ended.reach(1).await;
    // The call is over, its slot and its request's charge given back: the answer waiting
    // in the outbox is what holds the bound now.
    let held = server.admission().used();
    assert!(held >= ANSWER, "{held} bytes charged with a 3 MiB answer waiting to be read");
    let answer = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().unwrap();
    assert!(answer.is_answer() && answer.json().len() > ANSWER);
    assert_eq!(answer.value()["id"], 3);
    drop(answer);
    all_released(&server).await;
}

/// A small request may ask for a large answer, so requests let in at their own size could
/// make the server hold far more than its bound in answers: one client with many calls in
/// flight that reads slowly keeps at most its share of answers; the others' answers are
/// errors that say why, and each call gets one of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_past_a_clients_share_are_not_kept_but_answered_with_an_error() {
    const CALLS: usize = 8;
    const ANSWER: usize = 3 << 20;
    let (runtime, ended) = reading_a_big_file("admission-answers", 4, ANSWER).await;
    // A client's share is 8 MiB: room for two answers.
    let limits = ServerLimits { max_queued_request_bytes: 16 << 20, ..LIMITS };
    let server = Server::with_limits(runtime, Duration::from_millis(10), limits);
    let Serving { port, stop, serving } = serve_http(&server).await;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "read_text", "arguments": {"path": "/data/big.txt"}, "_meta": meta()}})
    .to_string();
    let mut streams = Vec::new();
    for _ in 0..CALLS {
        streams.push(post_reading_little([127, 0, 0, 5], port, "read_text", &body).await);
    }
    ended.reach(CALLS).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.admission().used() < 2 * (2 << 20) {
        assert!(Instant::now() < deadline, "{} bytes held", server.admission().used());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut kept, mut not_kept) = (0, 0);
    for mut stream in streams {
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        let peak = server.admission().peak();
        assert!(peak <= 8 << 20, "{peak} bytes held at most, the client's share is 8 MiB");
        if answer.len() > ANSWER && answer.contains("\"result\"") {
            kept += 1;
        } else {
            assert!(answer.contains("was not kept") && answer.contains("this client"), "{answer}");
            assert!(answer.contains("\"id\":7"), "{answer}");
            not_kept += 1;
        }
    }
    assert!(kept >= 1 && not_kept >= 1 && kept + not_kept == CALLS, "{kept} kept, {not_kept} not");
    all_released(&server).await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// One client holds at most half the bound: one that asks for large answers and never
/// reads them is refused (503, naming its share) once its unread answers and requests hold
/// that half, where it would otherwise fill the whole bound, and a client at another
/// address is still served a request of the same size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_at_most_half_the_bound() {
    let server = server("client-share").await;
    let Serving { port, stop, serving } = serve_http(&server).await;
    let body = large_echo(3 << 20);
    let admission = server.admission();
    let half = admission.limit() / 2;
    // More than enough to fill the whole bound, were the client let.
    let mut unread = Vec::new();
    let mut refusal = None;
    for _ in 0..24 {
        let mut stream = post_echo_reading_little([127, 0, 0, 2], port, &body).await;
        match status_of(&mut stream).await {
            (200, _) => unread.push(stream),
            (503, text) => {
                refusal = Some(text);
                break;
            }
            (status, text) => panic!("{status}: {text}"),
        }
        assert!(admission.used() <= half, "{} bytes held, the share is {half}", admission.used());
    }
    let refusal =
        refusal.unwrap_or_else(|| panic!("24 answers unread, none refused: {} held", admission.used()));
    assert!(refusal.contains("this client"), "{refusal}");
    assert!(unread.len() >= 2, "refused after {} answers", unread.len());
    // Another client is served a request as large, its answer read in full.
    let mut stream = post_echo_reading_little([127, 0, 0, 3], port, &body).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{}", &answer[..answer.len().min(300)]);
    assert!(answer.len() > 3 << 20, "{} bytes", answer.len());
    drop(unread);
    all_released(&server).await;
    assert_eq!(admission.client_limit(), Some(half));
    assert_eq!(admission.clients_counted(), 2, "a count per address until the next look");
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// A body of no announced length (chunked) grows its buffer by doubling; admission counts
/// a body at its length, so the buffer is cut to it before the parse is charged. Sized
/// so that the request fits its client's share with 64 KiB to spare, it is served on an
/// idle server, where the doubled buffer (4 MiB for 3.1 MiB) would have made it "busy"
/// at every try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_fits_its_share_is_not_refused_for_its_buffers_slack() {
    let body = large_echo((3 << 20) + (100 << 10));
    let estimate = cordon::cost::estimate(body.as_bytes()).unwrap().bytes;
    // What admission checks against the client's share (half the bound): the parse, the
    // arguments' text and the body.
    let needed = estimate + 2 * body.len();
    let limits = ServerLimits { max_queued_request_bytes: 2 * (needed + (64 << 10)), ..LIMITS };
    let server = Server::with_limits(runtime("chunked").await, Duration::from_millis(10), limits);
    let Serving { port, stop, serving } = serve_http(&server).await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json, text/event-stream\r\n\
         Connection: close\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.as_bytes().chunks(64 << 10) {
        stream.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await.unwrap();
        stream.write_all(chunk).await.unwrap();
        stream.write_all(b"\r\n").await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{}", &answer[..answer.len().min(400)]);
    all_released(&server).await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// A 2025-era client (declaring roots) of the hostile component, initialized, in process.
struct Asked {
    server: Arc<Server>,
    connection: Arc<Connection>,
    out: Outbox,
    sent: tokio::sync::mpsc::Receiver<Framed>,
}

async fn asking_client(limits: ServerLimits) -> Asked {
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let options = ComponentOptions { limits: common::quick_limits(), ..ComponentOptions::default() };
    runtime.load_file(&common::hostile(), options).await.unwrap();
    let server = Server::with_limits(Arc::new(runtime), Duration::from_millis(10), limits);
    let connection = Connection::new(server.clone());
    let (out, mut sent) = Outbox::channel(&server, 64);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                   "clientInfo": {"name": "t", "version": "1"}}});
    connection.handle(jsonrpc::classify(initialize), &out).await;
    assert_eq!(next_sent(&mut sent).await["result"]["protocolVersion"], "2025-11-25");
    Asked { server, connection, out, sent }
}

/// The next message the server sent, within 10 s.
async fn next_sent(sent: &mut tokio::sync::mpsc::Receiver<Framed>) -> Value {
    let message = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().unwrap();
    message.value()
}

/// A 2025-era client's answer to what a call asked waits, parsed, until the call has
/// every answer it asked for: charged all that while, so that a client answering all but
/// one question with megabytes holds them against the bound, not beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_answers_stay_charged_while_the_call_waits_for_the_rest() {
    let Asked { server, connection, out, mut sent } = asking_client(LIMITS).await;
    let mut next = async || next_sent(&mut sent).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "ask", "arguments": {"count": 2, "key_len": 4, "state_bytes": 0}}});
    connection.handle(jsonrpc::classify(call), &out).await;
    let (first, _second) = (next().await, next().await);
    assert_eq!(first["method"], "roots/list", "{first}");
    // The first question answered with many roots: about 8 MB parsed.
    let roots: Vec<Value> = (0..40_000).map(|n| json!({"uri": format!("file:///r/{n}")})).collect();
    let answer = json!({"jsonrpc": "2.0", "id": first["id"], "result": {"roots": roots}}).to_string();
    let cost = cordon::cost::estimate(answer.as_bytes()).unwrap().bytes;
    let admitted = server.admit(answer.as_bytes()).unwrap();
    drop(answer);
    connection.handle_admitted(admitted, &out).await;
    assert!(
        server.admission().used() >= cost,
        "{} bytes charged while {cost} wait",
        server.admission().used()
    );
    // The call gives up (cancelled): its answers go, and their charge with them.
    connection
        .handle(
            jsonrpc::classify(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}),
            ),
            &out,
        )
        .await;
    all_released(&server).await;
    server.shutdown();
}

/// A 2025-era call waiting for its client's answer has given back its slot and its store,
/// but keeps what its guest left (the cleanup note, the state, what it asked): counted in
/// the bound while it waits. Before, a call of a small request that left a 60 KB note
/// waited with some 200 bytes charged, so thousands of such waits held memory the bound
/// never saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_call_waiting_for_its_client_keeps_is_charged_while_it_waits() {
    const NOTE: usize = 60_000;
    let Asked { server, connection, out, mut sent } = asking_client(LIMITS).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "note_then_ask", "arguments": {"note_bytes": NOTE}}});
    connection.handle(jsonrpc::classify(call), &out).await;
    let asked = next_sent(&mut sent).await;
    assert_eq!(asked["method"], "roots/list", "{asked}");
    let held = server.admission().used();
    assert!(held >= NOTE, "{held} bytes charged while a call waits with a note of {NOTE}");
    // Answered, the call ends, and what it kept is given back with it.
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": []}});
    connection.handle(jsonrpc::classify(answer), &out).await;
    let done = next_sent(&mut sent).await;
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    all_released(&server).await;
    server.shutdown();
}

/// A client's answer too costly to admit is never answered: its id is the server's own
/// request's, which the client's own requests may share, so a refusal would read as the
/// answer to one of them. The call that asked gets the refusal as its answer, and ends now
/// (before, it waited for its deadline while the client got an error for the wrong id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_answer_refused_is_never_answered_and_ends_the_call_that_asked() {
    let limits = ServerLimits {
        max_queued_request_bytes: 4 << 20,
        max_request_cost: 64 << 10,
        max_listen_streams: 1024,
    };
    let Asked { server, connection, out, mut sent } = asking_client(limits).await;
    let mut next = async || next_sent(&mut sent).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "ask", "arguments": {"count": 1, "key_len": 4, "state_bytes": 0}}});
    connection.handle(jsonrpc::classify(call), &out).await;
    let asked = next().await;
    assert_eq!(asked["method"], "roots/list", "{asked}");
    // About 8 MB parsed, past the 64 KiB a message may cost.
    let roots: Vec<Value> = (0..40_000).map(|n| json!({"uri": format!("file:///r/{n}")})).collect();
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"roots": roots}}).to_string();
    let admitted = server.admit(answer.as_bytes()).expect("a client's answer is never refused with its id");
    let jsonrpc::Incoming::Response { id, answer: Err(refused) } = &admitted.message else {
        panic!("the refusal stands in for the answer: {:?}", admitted.message)
    };
    assert_eq!(id.to_json(), asked["id"]);
    assert!(refused.message.contains("refused"), "{refused:?}");
    connection.handle_admitted(admitted, &out).await;
    let answered = next().await;
    assert_eq!(answered["id"], 2, "the call ends now, and nothing else is sent: {answered}");
    all_released(&server).await;
    server.shutdown();
}

/// A client that reads its answer a few bytes at a time would hold the connection, and
/// the answer charged while it waits, for as long as it likes. Once a write has waited
/// `write_timeout` (here 1 s) the connection is reset, not closed: on loopback the kernel
/// had taken most of the 3 MiB answer, and after a plain close it went on trickling out
/// to the client (913 KB in 30 s, before the reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_an_answer_a_trickle_at_a_time_is_closed() {
    let server = server("trickle").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let settings = cordon::transport::http::HttpSettings {
        write_timeout: Duration::from_secs(1),
        ..cordon::transport::http::HttpSettings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(cordon::transport::http::serve(
        server.clone(),
        listener,
        settings,
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(5),
    ));
    let mut stream = post_echo_reading_little([127, 0, 0, 1], port, &large_echo(3 << 20)).await;
    // 4 KiB every 100 ms: 40 KiB/s, as a client that never really reads might.
    let started = Instant::now();
    let mut taken = 0;
    let mut chunk = vec![0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(read)) => taken += read,
            Err(_) => panic!("nothing to read for 5 s after {taken} bytes"),
        }
        assert!(started.elapsed() < Duration::from_secs(30), "still served after {taken} bytes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(taken < 3 << 20, "the whole answer was read: {taken} bytes");
    all_released(&server).await;
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

/// A `Content-Length` is a promise, not bytes: heads announcing the largest body a
/// request may have (4 MiB) and sending none of it hold a few KiB of the bound each, so
/// that twice the bound's worth of them does not lock other clients out for the body
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_announcing_large_bodies_hold_little_of_the_bound_until_their_bytes_come() {
    const HEADS: usize = 24;
    let server = server("heads").await;
    let schema = Schema::new();
    let Serving { port, stop, serving } = serve_http(&server).await;
    let mut heads = Vec::new();
    for _ in 0..HEADS {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n\
             Content-Length: {}\r\n\r\n",
            4 << 20
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        heads.push(stream);
    }
    // Every head is read and waits for its body, charged (or, over the bound, refused).
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.admission().used() < HEADS * (16 << 10) {
        assert!(Instant::now() < deadline, "{} bytes charged", server.admission().used());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(server.admission().used() < LIMITS.max_queued_request_bytes / 8, "{}", server.admission().used());
    let answer = post(port, "tools/call", Some("echo"), &many_keys(8, 10), &schema).await;
    assert_eq!((answer.status, &answer.messages[0]["result"]["content"][0]["text"]), (200, &json!("x")));
    drop(heads);
    all_released(&server).await;
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_charged_their_parsed_size_and_refused_over_the_bound_over_http() {
    let server = server("http").await;
    let schema = Arc::new(Schema::new());
    let Serving { port, stop, serving } = serve_http(&server).await;

    // The only slot is held by a spin until it is cancelled below; meanwhile twelve large
    // requests arrive at once.
    let spinning = tokio::spawn({
        let schema = schema.clone();
        async move { post(port, "tools/call", Some("spin"), &spin(1, 60.0), &schema).await }
    });
    slot_taken(&server).await;
    let (answered_tx, mut answered_rx) = tokio::sync::mpsc::unbounded_channel();
    for id in 100..112 {
        let schema = schema.clone();
        let answered_tx = answered_tx.clone();
        tokio::spawn(async move {
            let answer = post(port, "tools/call", Some("echo"), &many_keys(id, KEYS), &schema).await;
            let _ = answered_tx.send((id, answer));
        });
    }
    drop(answered_tx);
    // Each request is refused at once or queued holding its charge (over 16 MiB; a body
    // still being read holds at most its 1.5 MB). Once every one is either, the spin is
    // stopped by closing its stream, so the queued run. (A spin of a fixed 2 s, as it was,
    // could end before the last request arrived on a loaded machine, letting in a third.)
    let mut answers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        while let Ok(answer) = answered_rx.try_recv() {
            answers.push(answer);
        }
        let queued = server.admission().used() / (16 << 20);
        if answers.len() + queued >= 12 {
            break;
        }
        assert!(Instant::now() < deadline, "{} answered, about {queued} queued", answers.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    spinning.abort();
    while let Some(answer) = answered_rx.recv().await {
        answers.push(answer);
    }
    let (mut answered, mut refused) = (0, 0);
    for (id, answer) in answers {
        let retry =
            answer.headers.iter().find(|(key, _)| key == "retry-after").map(|(_, value)| value.as_str());
        // Refused while its body was still arriving (the bodies being read and the queued
        // filled the bound, or this one client's half of it): no id was read yet, so the
        // refusal is HTTP's alone.
        if let (503, Some(error)) = (answer.status, &answer.plain_error) {
            assert!(
                error.contains("hold the server's limit") || error.contains("hold this client's share"),
                "{id}: {error}"
            );
            assert_eq!(retry, Some("1"));
            refused += 1;
            continue;
        }
        let last = answer.messages.last().unwrap_or_else(|| panic!("{id}: no JSON-RPC message"));
        assert_eq!(last["id"], id);
        match answer.status {
            200 => {
                assert_eq!(last["result"]["content"][0]["text"], "x", "{last}");
                answered += 1;
            }
            503 => {
                assert_eq!(retry, Some("1"));
                assert_eq!(last["error"]["code"], -32603, "{last}");
                assert!(last["error"]["message"].as_str().unwrap().contains("busy"), "{last}");
                refused += 1;
            }
            status => panic!("{id}: status {status}: {last}"),
        }
    }
    let admission = server.admission();
    // Each is charged about 22 MB (not its 1.5 MB of text): two fit under 48 MiB, no more.
    assert!((1..=2).contains(&answered), "{answered} answered, {refused} refused");
    assert_eq!(answered + refused, 12);
    assert!(admission.peak() <= admission.limit(), "peak {} over {}", admission.peak(), admission.limit());
    assert!(admission.peak() > 20 << 20, "charged by parsed size: peak {}", admission.peak());

    // A message that alone would cost more than the per-request bound: 413, with its id
    // (once the answered calls have given their charges back: while this one client's
    // half is still full, its body is refused as it arrives, 503, before it can be read).
    all_released(&server).await;
    let answer = post(port, "tools/call", Some("echo"), &many_keys(7, 2 * KEYS), &schema).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.messages[0]["id"], 7);
    assert_eq!(answer.messages[0]["error"]["code"], -32600);
    // The server serves on, and gives every byte back.
    let answer = post(port, "tools/call", Some("echo"), &many_keys(8, 10), &schema).await;
    assert_eq!(answer.messages[0]["result"]["content"][0]["text"], "x");
    all_released(&server).await;
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

/// Serve `input` over stdio (as `tenant`) to its end: what was written, and each line's
/// message, checked against the schema.
async fn serve_stdio(
    server: &Arc<Server>,
    tenant: Option<Arc<Tenant>>,
    input: String,
    schema: &Schema,
) -> (String, Vec<Value>) {
    let (output, mut answers) = tokio::io::duplex(64 << 10);
    let reading = tokio::spawn(async move {
        let mut text = String::new();
        answers.read_to_string(&mut text).await.unwrap();
        text
    });
    let input = std::io::Cursor::new(input.into_bytes());
    cordon::transport::stdio::serve_as(
        server.clone(),
        tenant,
        input,
        output,
        std::future::pending(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let text = reading.await.unwrap();
    let answers: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    for answer in &answers {
        schema.check_sent(answer, Some("tools/call").filter(|_| answer.pointer("/result/content").is_some()));
    }
    (text, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_over_the_bound_are_refused_with_an_error_on_stdio() {
    let server = server("stdio").await;
    let schema = Schema::new();
    // Held until EOF's shutdown stops it: a spin that ended while the reader still parsed
    // (1 s, as it was, on a loaded CI machine) would free the slot and let 4 in.
    let mut input = spin(1, 60.0);
    for id in 2..=6 {
        input.push('\n');
        input.push_str(&many_keys(id, KEYS));
    }
    input.push('\n');
    input.push_str(&many_keys(7, 2 * KEYS));
    input.push('\n');
    // The slot stays busy while the stdin thread reads on: calls 2 and 3 queue, holding
    // their charge; 4 to 6 find no room; 7 is too costly by itself.
    let (text, answers) = serve_stdio(&server, None, input, &schema).await;
    let find = |id: i64| {
        answers
            .iter()
            .find(|answer| answer["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id}: {text}"))
    };
    for id in [2, 3] {
        assert!(find(id).get("result").is_some(), "{id} was queued: {}", find(id));
    }
    for id in [4, 5, 6] {
        let error = &find(id)["error"];
        assert_eq!(error["code"], -32603, "{id}: {error}");
        assert_eq!(error["data"]["retryAfterSeconds"], 1);
    }
    assert_eq!(find(7)["error"]["code"], -32600);
    let admission = server.admission();
    // Two queued at about 22 MB each: charged by parsed size, not by their 1.5 MB of text.
    assert!(
        admission.peak() <= admission.limit() && admission.peak() > 30 << 20,
        "peak {}",
        admission.peak()
    );
    assert_eq!(admission.used(), 0, "every charge is given back once answered");
}

/// A stdio connection of a tenant on a server of several (in process: the binary's
/// `serve --stdio --tenant` serves its tenant alone, tenants.rs) charges what it reads to
/// that tenant's share, as HTTP does a tenant's requests: with two tenants, a request past
/// the share (half the bound) is too costly, with its limit named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_with_a_tenant_charges_what_it_reads_to_the_tenants_share() {
    // Shares of 20 MiB: one large request (about 22 MB with its text) fits the bound, not
    // a share.
    let limits = ServerLimits { max_queued_request_bytes: 40 << 20, ..LIMITS };
    let server = server_of_two_tenants("stdio-tenant", limits).await;
    let tenant = server.tenants().get("a").cloned();
    let input = format!("{}\n{}\n", many_keys(5, KEYS), many_keys(6, 10));
    let (text, answers) = serve_stdio(&server, tenant, input, &Schema::new()).await;
    assert_eq!(answers.len(), 2, "{text}");
    let error = &answers[0]["error"];
    assert_eq!((&answers[0]["id"], &error["code"]), (&json!(5), &json!(-32600)), "{text}");
    let share = server.admission().tenant_limit();
    assert_eq!(share, 20 << 20);
    assert!(error["message"].as_str().unwrap().contains(&format!("the limit is {share}")), "{error}");
    assert_eq!(answers[1]["result"]["content"][0]["text"], "x", "{text}");
    assert_eq!(server.admission().used(), 0, "every charge is given back once answered");
}

/// A bound spent to its last bytes (by a spinning call, sized to leave less room than a
/// cancel costs) still lets a small notification in: the cancel stops the call (refused,
/// it would have left the call running for its minute), and nothing answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_gets_in_when_the_bound_is_spent_and_is_never_answered() {
    let spinning = spin(1, 60.0);
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    let cost = |text: &str| cordon::cost::estimate(text.as_bytes()).unwrap().bytes + text.len();
    // What the spin is charged, plus its length again: the least a bound may be for the
    // spin to get in. The room it leaves is less than the cancel costs.
    let bound = cost(&spinning) + spinning.len();
    assert!(bound - cost(&spinning) < cost(cancel), "the cancel would fit anyway");
    let limits =
        ServerLimits { max_queued_request_bytes: bound, max_request_cost: bound, max_listen_streams: 1024 };
    let server = Server::with_limits(runtime("cancel-full").await, Duration::from_millis(10), limits);
    let (server_input, mut input) = std::io::pipe().unwrap();
    let (output, mut answers) = tokio::io::duplex(64 << 10);
    let serving = tokio::spawn(cordon::transport::stdio::serve(
        server.clone(),
        std::io::BufReader::new(server_input),
        output,
        std::future::pending(),
        Duration::from_secs(5),
    ));
    use std::io::Write;
    writeln!(input, "{spinning}").unwrap();
    slot_taken(&server).await;
    assert_eq!(server.admission().used(), cost(&spinning));
    writeln!(input, "{cancel}").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.runtime().pool_usage().calls != 0 {
        assert!(Instant::now() < deadline, "the cancel never stopped the spin");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(input);
    serving.await.unwrap().unwrap();
    let mut text = String::new();
    answers.read_to_string(&mut text).await.unwrap();
    assert_eq!(text, "", "the cancelled call or the cancel was answered");
    all_released(&server).await;
}

/// With two tenants, one tenant's requests hold at most half the bound: a second large
/// request of `a`'s, queued behind its first, is refused for its tenant's share, and `b`'s
/// large request still gets in (it would not, had `a`'s taken the room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_of_two_holds_at_most_half_the_bound() {
    let server = server_of_two_tenants("tenant-share", LIMITS).await;
    let schema = Arc::new(Schema::new());
    let Serving { port, stop, serving } = serve_http(&server).await;
    let spawn_post = |key: &'static str, body: String| {
        let schema = schema.clone();
        tokio::spawn(async move {
            post_as(Some(key), port, "tools/call", Some(spin_or_echo(&body)), &body, &schema).await
        })
    };
    let spinning = spawn_post("key-a-0123456789ab", spin(1, 60.0));
    slot_taken(&server).await;
    let queued = |bytes: usize| {
        let server = server.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while server.admission().used() < bytes {
                assert!(Instant::now() < deadline, "{} bytes charged", server.admission().used());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let first_of_a = spawn_post("key-a-0123456789ab", many_keys(2, KEYS));
    queued(20 << 20).await;
    let second_of_a =
        post_as(Some("key-a-0123456789ab"), port, "tools/call", Some("echo"), &many_keys(3, KEYS), &schema)
            .await;
    assert_eq!(second_of_a.status, 503);
    // Refused once parsed (a JSON-RPC error with its id), or while its body came in, when
    // `a`'s first body is still charged during that request's parse: which one is a race.
    // Each names the tenant's share, in its own words.
    match second_of_a.messages.first() {
        Some(refusal) => {
            assert_eq!((&refusal["id"], &refusal["error"]["code"]), (&json!(3), &json!(-32603)));
            let message = refusal["error"]["message"].as_str().unwrap();
            assert!(message.contains("busy for this tenant") && message.contains("its share"), "{message}");
        }
        None => {
            let error = second_of_a.plain_error.as_deref().unwrap();
            assert!(error.contains("this tenant's share"), "{error}");
        }
    }
    let of_b = spawn_post("key-b-0123456789ab", many_keys(4, KEYS));
    queued(40 << 20).await;
    spinning.abort();
    for (answer, id) in [(first_of_a.await.unwrap(), 2), (of_b.await.unwrap(), 4)] {
        assert_eq!(answer.status, 200);
        assert_eq!(
            (&answer.messages[0]["id"], &answer.messages[0]["result"]["content"][0]["text"]),
            (&json!(id), &json!("x"))
        );
    }
    all_released(&server).await;
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

/// The tool a request body calls.
fn spin_or_echo(body: &str) -> &'static str {
    if body.contains("\"spin\"") { "spin" } else { "echo" }
}

/// `subscriptions/listen` streams opened in process, on any connection: each acknowledged
/// (`Ok`) or refused, with the error's message.
struct Listens {
    out: Outbox,
    sent: tokio::sync::mpsc::Receiver<Framed>,
    id: i64,
}

impl Listens {
    fn new(server: &Arc<Server>) -> Self {
        let (out, sent) = Outbox::channel(server, 64);
        Self { out, sent, id: 0 }
    }

    async fn open(&mut self, connection: &Arc<Connection>) -> Result<(), String> {
        self.id += 1;
        let request =
            jsonrpc::classify(json!({"jsonrpc": "2.0", "id": self.id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta()}}));
        connection.handle(request, &self.out).await;
        let message = tokio::time::timeout(Duration::from_secs(10), self.sent.recv()).await.unwrap().unwrap();
        let value = message.value();
        if value.get("error").is_some() {
            Err(value["error"]["message"].as_str().unwrap().to_owned())
        } else {
            assert!(value.get("method").is_some() && value.get("id").is_none(), "{value}");
            Ok(())
        }
    }
}

/// With two tenants, one tenant holds at most half the server's `subscriptions/listen`
/// streams: its third of four is refused naming its share, and the other tenant's opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_of_two_holds_at_most_half_the_listen_streams() {
    let limits = ServerLimits { max_listen_streams: 4, ..LIMITS };
    let server = server_of_two_tenants("listen-share", limits).await;
    let tenants = server.tenants();
    let of = |name: &str| {
        let tenant = tenants.get(name).unwrap().clone();
        Connection::for_tenant(server.clone(), Some(tenant), RateCheck::Here)
    };
    let (a, b) = (of("a"), of("b"));
    let (out, mut sent) = Outbox::channel(&server, 64);
    let listen = |id: i64| {
        jsonrpc::classify(json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}, "_meta": meta()}}))
    };
    let mut acknowledged = Vec::new();
    let mut answer_to = async |connection: &Arc<Connection>, id: i64| {
        connection.handle(listen(id), &out).await;
        let message = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().unwrap();
        let value = message.value();
        if value.get("error").is_some() {
            Err(value)
        } else {
            assert_eq!(value["method"], "notifications/subscriptions/acknowledged");
            acknowledged.push(value);
            Ok(())
        }
    };
    for id in [1, 2] {
        answer_to(&a, id).await.unwrap();
    }
    let refused = answer_to(&a, 3).await.unwrap_err();
    assert_eq!(refused["id"], 3);
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("this tenant has 2 subscriptions/listen streams open"), "{message}");
    answer_to(&b, 4).await.unwrap();
    assert_eq!(acknowledged.len(), 3);
    server.shutdown();
}

/// With three tenants, two that open all they may still leave the third its guaranteed
/// part: of 6 streams, `a` holds its share (3), `b` its own one and the shared one left,
/// and `c` still opens its own (with halves alone, `b` would have taken the last three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_of_three_cannot_take_the_thirds_listen_streams() {
    let limits = ServerLimits { max_listen_streams: 6, ..LIMITS };
    let server = server_of_tenants("listen-three", limits, &["a", "b", "c"]).await;
    let tenants = server.tenants();
    let of = |name: &str| {
        let tenant = tenants.get(name).unwrap().clone();
        Connection::for_tenant(server.clone(), Some(tenant), RateCheck::Here)
    };
    let mut listens = Listens::new(&server);
    let (a, b, c) = (of("a"), of("b"), of("c"));
    for _ in 0..3 {
        listens.open(&a).await.unwrap();
    }
    let refused = listens.open(&a).await.unwrap_err();
    assert!(refused.contains("this tenant has 3 subscriptions/listen streams open"), "{refused}");
    listens.open(&b).await.unwrap();
    listens.open(&b).await.unwrap();
    let refused = listens.open(&b).await.unwrap_err();
    assert!(refused.contains("streams tenants share are all open"), "{refused}");
    listens.open(&c).await.expect("c's own part is left to it");
    server.shutdown();
}

/// One client keeps at most a share of the listen streams: a stream costs it nothing to
/// keep (nothing need be read), so without a share one client could lock everyone else
/// out. With credentials a client is its caller, and keeps an eighth; without, it is its
/// address, and keeps half (behind a proxy, all such clients share one address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_at_most_its_share_of_the_listen_streams() {
    let limits = ServerLimits { max_listen_streams: 16, ..LIMITS };
    let server = Server::with_limits(runtime("listen-holder").await, Duration::from_millis(10), limits);
    let from = |address: [u8; 4], caller: Option<&str>| {
        let caller = caller.map(cordon::auth::Caller::of_subject);
        let connection = Connection::for_caller(server.clone(), None, caller, RateCheck::Here);
        connection.set_peer(std::net::IpAddr::from(address));
        connection
    };
    let mut listens = Listens::new(&server);
    let (first, again) = (from([127, 0, 0, 1], None), from([127, 0, 0, 1], None));
    for _ in 1..=8 {
        listens.open(&first).await.unwrap();
    }
    let refused = listens.open(&first).await.unwrap_err();
    assert!(refused.contains("this client has 8 subscriptions/listen streams open"), "{refused}");
    assert!(listens.open(&again).await.is_err(), "another connection from the same address");
    listens.open(&from([127, 0, 0, 2], None)).await.unwrap();
    // A caller is itself, wherever it connects from, and keeps an eighth.
    let alice = from([127, 0, 0, 1], Some("alice"));
    for _ in 0..2 {
        listens.open(&alice).await.unwrap();
    }
    let refused = listens.open(&alice).await.unwrap_err();
    assert!(refused.contains("this client has 2 subscriptions/listen streams open"), "{refused}");
    server.shutdown();
}

/// A request that could never fit in its tenant's share (half the bound), even on an idle
/// server, is too costly (413, with its id), not busy: a 503 would have its client retry
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_a_tenants_share_on_an_idle_server_is_too_costly_not_busy() {
    // Shares of 20 MiB: one large request (about 22 MB with its text) never fits one.
    let limits = ServerLimits { max_queued_request_bytes: 40 << 20, ..LIMITS };
    let server = server_of_two_tenants("tenant-ceiling", limits).await;
    let schema = Schema::new();
    let Serving { port, stop, serving } = serve_http(&server).await;
    let answer =
        post_as(Some("key-a-0123456789ab"), port, "tools/call", Some("echo"), &many_keys(5, KEYS), &schema)
            .await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.messages[0]["id"], 5);
    assert_eq!(answer.messages[0]["error"]["code"], -32600);
    let answer =
        post_as(Some("key-a-0123456789ab"), port, "tools/call", Some("echo"), &many_keys(6, 10), &schema)
            .await;
    assert_eq!(answer.messages[0]["result"]["content"][0]["text"], "x");
    all_released(&server).await;
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

/// A `subscriptions/listen` stream outlives its request: it stays charged what it keeps
/// (about a kilobyte), not the request's whole charge. Before, a listen padded in `_meta`
/// to a few megabytes held them for as long as the stream stayed open, and a handful of
/// such streams filled the bound for every client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_listen_stream_keeps_a_small_charge_not_its_requests() {
    let server = server("listen-charge").await;
    let padding: serde_json::Map<String, Value> = (0..100_000).map(|i| (format!("k{i}"), json!(0))).collect();
    let mut meta = meta();
    meta.as_object_mut().unwrap().extend(padding);
    let body = json!({"jsonrpc": "2.0", "id": "watch", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": meta}})
    .to_string();
    let admitted = server.admit(body.as_bytes()).unwrap();
    let charged = server.admission().used();
    assert!(charged > 4 << 20, "the padded request is charged its parsed size: {charged}");
    let connection = Connection::new(server.clone());
    let (out, mut sent) = Outbox::channel(&server, 64);
    connection.handle_admitted(admitted, &out).await;
    let message = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().unwrap();
    let value = message.value();
    assert_eq!(value["method"], "notifications/subscriptions/acknowledged", "{value}");
    let held = server.admission().used();
    assert!(held <= 4 << 10, "an open listen stream holds {held} bytes of the bound");
    server.shutdown();
    let ended = tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().unwrap();
    assert_eq!(ended.value()["id"], "watch");
    // The messages taken and not yet dropped are held, as a transport writing them holds them.
    drop((message, ended));
    all_released(&server).await;
}

/// `resources/subscribe` sent in process, each on the session given, and its answer.
struct Subscriber {
    out: Outbox,
    sent: tokio::sync::mpsc::Receiver<Framed>,
    id: i64,
}

impl Subscriber {
    fn new(server: &Arc<Server>) -> Self {
        let (out, sent) = Outbox::channel(server, 64);
        Self { out, sent, id: 0 }
    }

    async fn subscribe(&mut self, connection: &Arc<Connection>, uri: String) -> Value {
        self.id += 1;
        let request =
            json!({"jsonrpc": "2.0", "id": self.id, "method": "resources/subscribe", "params": {"uri": uri}});
        connection.handle(jsonrpc::classify(request), &self.out).await;
        let answer = tokio::time::timeout(Duration::from_secs(10), self.sent.recv()).await.unwrap().unwrap();
        answer.value()
    }

    /// Subscribe sessions `open` makes, 16 URIs of about 4 KiB each, until one is refused:
    /// the refusal, and the sessions (kept, with what they hold).
    async fn fill(&mut self, open: impl Fn() -> Arc<Connection>) -> (Value, Vec<Arc<Connection>>) {
        let mut sessions = Vec::new();
        loop {
            assert!(sessions.len() < 1000, "never refused");
            sessions.push(open());
            let connection = sessions.last().unwrap().clone();
            for n in 0..16 {
                let answer = self.subscribe(&connection, big_uri(sessions.len(), n)).await;
                if answer.get("error").is_some() {
                    return (answer, sessions);
                }
                assert_eq!(answer["result"], json!({}), "{answer}");
            }
        }
    }
}

/// A URI of about 4 KiB, the `n`th of session `session`.
fn big_uri(session: usize, n: usize) -> String {
    format!("test://s{session}/{n:02}/{}", "x".repeat(4000))
}

/// The subscriptions of all of one client's 2025-era sessions keep at most a sixteenth of
/// its share of the bound: a session keeps them while it lives (an hour idle, with no
/// connection open), and before, one address's idle sessions pinned its whole share (two
/// addresses the whole bound). Another client still subscribes, and ending a session
/// gives its part back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_sessions_keep_at_most_a_part_of_its_share_in_subscriptions() {
    use cordon::dispatch::SUBSCRIBED_PART;
    let server = server("subscribed-part").await;
    let limit = server.admission().client_limit().unwrap() / SUBSCRIBED_PART;
    let session = |address: [u8; 4]| {
        let connection = Connection::for_caller(server.clone(), None, None, RateCheck::Here);
        connection.set_peer(std::net::IpAddr::from(address));
        connection.set_legacy();
        connection
    };
    let mut subscriber = Subscriber::new(&server);
    let (refused, mut sessions) = subscriber.fill(|| session([192, 0, 2, 7])).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("this client's sessions already keep the most subscriptions"), "{message}");
    let held = server.admission().used();
    assert!(held <= limit, "one client's subscriptions hold {held} bytes, past {limit}");
    assert!(held > limit - (8 << 10), "refused at {held} bytes, short of {limit}");
    // Another client is not held back by the first one's.
    let elsewhere = session([192, 0, 2, 8]);
    assert_eq!(subscriber.subscribe(&elsewhere, big_uri(0, 0)).await["result"], json!({}));
    // A session that ends gives its part back to its client.
    let ended = sessions.pop().unwrap();
    ended.end_session();
    drop(ended);
    let again = session([192, 0, 2, 7]);
    assert_eq!(subscriber.subscribe(&again, big_uri(9999, 0)).await["result"], json!({}));
}

/// One subject in two tenants is two holders of listen streams: the share one keeps in
/// tenant `a` leaves the other's in `b` whole (both counted under the subject alone,
/// `a`'s streams used to refuse `b`'s first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subject_in_two_tenants_keeps_a_share_of_listen_streams_in_each() {
    let limits = ServerLimits { max_listen_streams: 32, ..LIMITS };
    let server = server_of_two_tenants("listen-subject", limits).await;
    let tenants = server.tenants();
    let of = |name: &str| {
        let tenant = tenants.get(name).unwrap().clone();
        let caller = Some(cordon::auth::Caller::of_subject("user-1"));
        Connection::for_caller(server.clone(), Some(tenant), caller, RateCheck::Here)
    };
    let mut listens = Listens::new(&server);
    let (a, b) = (of("a"), of("b"));
    for _ in 0..4 {
        listens.open(&a).await.unwrap();
    }
    let refused = listens.open(&a).await.unwrap_err();
    assert!(refused.contains("this client has 4 subscriptions/listen streams open"), "{refused}");
    for _ in 0..4 {
        listens.open(&b).await.expect("the same subject in another tenant is another holder");
    }
    server.shutdown();
}

/// A running call keeps what it uses of its request, its arguments, not the rest: a
/// `tools/call` padded in `_meta` to 14 MB parsed holds a few kilobytes of the bound while
/// it runs. Before, it held all of it until its answer, and a few such calls waiting on
/// slow tools (or a 2025-era client's answers) refused everyone else's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_call_keeps_the_charge_of_its_arguments_not_of_its_padding() {
    let server = server("call-charge").await;
    let mut request: Value = serde_json::from_str(&spin(1, 60.0)).unwrap();
    let padding: serde_json::Map<String, Value> = (0..100_000).map(|i| (format!("k{i}"), json!(0))).collect();
    request["params"]["_meta"].as_object_mut().unwrap().extend(padding);
    let admitted = server.admit(request.to_string().as_bytes()).unwrap();
    let charged = server.admission().used();
    assert!(charged > 4 << 20, "the padded request is charged its parsed size: {charged}");
    let connection = Connection::new(server.clone());
    let (out, mut sent) = Outbox::channel(&server, 64);
    connection.handle_admitted(admitted, &out).await;
    slot_taken(&server).await;
    let held = server.admission().used();
    assert!(held <= 8 << 10, "a running call holds {held} bytes of the bound");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    connection.handle(jsonrpc::classify(cancel), &Outbox::channel(&server, 1).0).await;
    drop((connection, out));
    while tokio::time::timeout(Duration::from_secs(10), sent.recv()).await.unwrap().is_some() {}
    all_released(&server).await;
}

/// On a server of two tenants, subscriptions are still kept per client: one caller's
/// sessions keep at most a sixteenth of its tenant's share, and another caller of the
/// same tenant still subscribes (with one count for the tenant, the first locked it out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_cannot_take_its_tenants_subscriptions() {
    use cordon::dispatch::SUBSCRIBED_PART;
    let server = server_of_two_tenants("subscribed-tenant", LIMITS).await;
    let limit = server.admission().tenant_limit() / SUBSCRIBED_PART;
    let tenant = server.tenants().get("a").unwrap().clone();
    let session = |caller: &str| {
        let caller = Some(cordon::auth::Caller::of_subject(caller));
        let connection =
            Connection::for_caller(server.clone(), Some(tenant.clone()), caller, RateCheck::Here);
        connection.set_legacy();
        connection
    };
    let mut subscriber = Subscriber::new(&server);
    let (refused, _sessions) = subscriber.fill(|| session("user-1")).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let held = server.admission().used();
    assert!(held <= limit, "one caller's subscriptions hold {held} bytes, past {limit}");
    let other = session("user-2");
    assert_eq!(
        subscriber.subscribe(&other, big_uri(0, 0)).await["result"],
        json!({}),
        "another caller of the tenant"
    );
}
