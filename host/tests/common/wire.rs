//! What the protocol tests share: the official schemas of both revisions, the example-tools config, the
//! request envelope.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{Value, json};

const SCHEMA: &str = include_str!("../schema/mcp-2026-07-28.schema.json");
const LEGACY_SCHEMA: &str = include_str!("../schema/mcp-2025-11-25.schema.json");

/// Validators for definitions of one official MCP schema, compiled once each: 2026-07-28
/// ([`Schema::new`]) or 2025-11-25 ([`Schema::legacy`]), the revision a client speaks.
pub struct Schema {
    root: Value,
    legacy: bool,
    validators: Mutex<HashMap<String, std::sync::Arc<jsonschema::Validator>>>,
}

impl Schema {
    pub fn new() -> Self {
        Self { root: serde_json::from_str(SCHEMA).unwrap(), legacy: false, validators: Mutex::default() }
    }

    /// The 2025-11-25 schema, for what a client of that revision is sent.
    pub fn legacy() -> Self {
        Self {
            root: serde_json::from_str(LEGACY_SCHEMA).unwrap(),
            legacy: true,
            validators: Mutex::default(),
        }
    }

    /// Panic unless `message` is a valid `definition`.
    pub fn check(&self, definition: &str, message: &Value) {
        let validator = self
            .validators
            .lock()
            .unwrap()
            .entry(definition.to_owned())
            .or_insert_with(|| {
                let mut schema = self.root.clone();
                schema["$ref"] = json!(format!("#/$defs/{definition}"));
                std::sync::Arc::new(jsonschema::validator_for(&schema).unwrap())
            })
            .clone();
        let errors: Vec<String> = validator.iter_errors(message).map(|error| error.to_string()).collect();
        assert!(errors.is_empty(), "{message} is not a valid {definition}: {errors:?}");
    }

    /// Check a message the server sent, with the schema of its kind; `method` is the
    /// request's method when the message answers one.
    pub fn check_sent(&self, message: &Value, method: Option<&str>) {
        self.check("JSONRPCMessage", message);
        if message.get("id").is_some() && message.get("method").is_some() {
            // A request to the client (2025-11-25, during a call).
            self.check("JSONRPCRequest", message);
            let definition = match message["method"].as_str() {
                Some("elicitation/create") => "ElicitRequest",
                Some("sampling/createMessage") => "CreateMessageRequest",
                Some("roots/list") => "ListRootsRequest",
                other => panic!("the server sent an unexpected request {other:?}: {message}"),
            };
            self.check(definition, message);
        } else if message.get("error").is_some() {
            self.check("JSONRPCErrorResponse", message);
        } else if message.get("id").is_some() && self.legacy {
            // 2025-11-25 names the results, not the responses that carry them.
            self.check("JSONRPCResultResponse", message);
            let definition = match method {
                Some("tools/call") => "CallToolResult",
                Some("tools/list") => "ListToolsResult",
                Some("initialize") => "InitializeResult",
                Some("ping") => "EmptyResult",
                Some("resources/list") => "ListResourcesResult",
                Some("resources/templates/list") => "ListResourceTemplatesResult",
                Some("resources/read") => "ReadResourceResult",
                Some("prompts/list") => "ListPromptsResult",
                Some("prompts/get") => "GetPromptResult",
                Some("completion/complete") => "CompleteResult",
                _ => "Result",
            };
            self.check(definition, &message["result"]);
        } else if message.get("id").is_some() {
            let definition = match method {
                Some("tools/call") => "CallToolResultResponse",
                Some("tools/list") => "ListToolsResultResponse",
                Some("server/discover") => "DiscoverResultResponse",
                Some("subscriptions/listen") => "SubscriptionsListenResultResponse",
                Some("resources/list") => "ListResourcesResultResponse",
                Some("resources/templates/list") => "ListResourceTemplatesResultResponse",
                Some("resources/read") => "ReadResourceResultResponse",
                Some("prompts/list") => "ListPromptsResultResponse",
                Some("prompts/get") => "GetPromptResultResponse",
                Some("completion/complete") => "CompleteResultResponse",
                _ => "JSONRPCResultResponse",
            };
            self.check(definition, message);
        } else {
            let definition = match message["method"].as_str() {
                Some("notifications/progress") => "ProgressNotification",
                Some("notifications/subscriptions/acknowledged") => "SubscriptionsAcknowledgedNotification",
                Some("notifications/tools/list_changed") => "ToolListChangedNotification",
                Some("notifications/prompts/list_changed") => "PromptListChangedNotification",
                Some("notifications/resources/list_changed") => "ResourceListChangedNotification",
                Some("notifications/cancelled") => "CancelledNotification",
                Some("notifications/message") => "LoggingMessageNotification",
                Some("notifications/resources/updated") => "ResourceUpdatedNotification",
                _ => "JSONRPCNotification",
            };
            self.check(definition, message);
        }
    }
}

/// The request envelope of MCP 2026-07-28.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A config serving the example tools from a fresh data directory, quick limits, and
/// `extra` TOML appended.
pub fn examples_config(name: &str, extra: &str) -> PathBuf {
    let tools = cordon::paths::example_tools();
    assert!(tools.is_file(), "{} is missing: run `cargo xtask guests` first", tools.display());
    let dir = crate::common::scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nprogress_interval_ms = 10\n{slots}{extra}\n\n\
             [[components]]\npath = {:?}\ndata_dir = \"data\"\n\
             limits = {{ grace_ms = 100, idle_timeout_ms = 0, max_duration_ms = 60000 }}\n\
             [components.tools.order_book]\nmax_duration_ms = 400\n",
            tools.display().to_string(),
            // 256 unless `extra` sets it.
            slots = if extra.contains("max_concurrent_calls") { "" } else { "max_concurrent_calls = 256\n" },
        ),
    )
    .unwrap();
    config
}

/// `binary serve --http 127.0.0.1:0 --config config`, and the port it listens on (read from
/// its log, which is then drained so the server never blocks on it).
pub fn spawn_http_server(binary: &std::ffi::OsStr, config: &std::path::Path) -> (std::process::Child, u16) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(binary)
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(config)
        .env("CORDON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let port = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the server exited before listening");
        if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in stderr.lines() {});
    (child, port)
}

/// What came back over HTTP: status, headers (lower-case names), the body, and the
/// JSON-RPC messages in it (one for JSON, each `data:` event for SSE), each already checked
/// against the schema.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub messages: Vec<Value>,
}

impl Answer {
    /// The first value of header `name` (as the response spelled it, lowercase for hyper).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// Parse a whole HTTP response: a JSON body or SSE events (chunked or not).
pub fn parse_answer(text: &str, schema: &Schema) -> Answer {
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete HTTP response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(key, value)| key == "transfer-encoding" && value == "chunked");
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    let is_sse = headers.iter().any(|(key, value)| key == "content-type" && value == "text/event-stream");
    let messages: Vec<Value> = if is_sse {
        body.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    } else if headers.iter().any(|(key, value)| key == "content-type" && value == "application/json") {
        let message: Value = serde_json::from_str(&body).unwrap();
        if message.get("jsonrpc").is_some() { vec![message] } else { Vec::new() }
    } else {
        Vec::new()
    };
    for message in &messages {
        schema
            .check_sent(message, Some("tools/call").filter(|_| message.pointer("/result/content").is_some()));
    }
    Answer { status, headers, body, messages }
}

pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// The lines `reader` (a child's stdout or stderr) yields, each through `tag`, read on a
/// thread of their own until it ends or the receiver is dropped.
pub fn lines_of(
    reader: impl std::io::Read + Send + 'static,
    sender: std::sync::mpsc::Sender<String>,
    tag: fn(String) -> String,
) {
    use std::io::BufRead;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(reader).lines().map_while(Result::ok) {
            if sender.send(tag(line)).is_err() {
                break;
            }
        }
    });
}

/// The lines of `reader`, as they come: see [`lines_of`].
pub fn line_channel(reader: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (sender, lines) = std::sync::mpsc::channel();
    lines_of(reader, sender, |line| line);
    lines
}
