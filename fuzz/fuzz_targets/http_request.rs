//! A raw HTTP/1.1 request (head and body), read with httparse as hyper reads it, through the
//! HTTP transport's validation ladder: origin and host, path, method, `Accept`,
//! `Content-Type`, JSON, envelope, `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name`, and a
//! `tools/call`'s `Mcp-Param-*` headers (plain or `=?base64?…?=`) against the tools below.
//! What passes is dispatched and its answer checked. Two round trips are checked too: a
//! value encoded as a client encodes it decodes to itself, and the `Mcp-Param-*` headers a
//! conforming client sends for a call's arguments are accepted.
#![no_main]

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use cordon::fuzzing::Verdict;
use cordon::runtime::{ParamHeader, ParamKind, ToolSpec};
use cordon::transport::http::HttpSettings;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// The tools the requests are checked against: the conformance fixture's, and one with a
/// header of each kind, nested too.
static TOOLS: LazyLock<Vec<ToolSpec>> = LazyLock::new(|| {
    use ParamKind::{Boolean, Integer, String};
    vec![
        tool("test_custom_header", &[("Region", &["region"], String)]),
        tool(
            "mirror",
            &[
                ("Name", &["name"], String),
                ("Count", &["count"], Integer),
                ("Flag", &["flag"], Boolean),
                ("Deep", &["a", "b", "c"], Integer),
                ("Label", &["a", "label"], String),
            ],
        ),
        tool("plain", &[]),
    ]
});

static SETTINGS: LazyLock<HttpSettings> = LazyLock::new(|| {
    let mut settings = HttpSettings { max_body_bytes: 4 << 10, ..HttpSettings::default() };
    settings.allowed_hosts.insert("mcp.example".into());
    settings
});

fn tool(name: &str, params: &[(&str, &[&str], ParamKind)]) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        title: None,
        description: String::new(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        requires: Vec::new(),
        param_headers: params
            .iter()
            .map(|(header, path, kind)| ParamHeader {
                name: header.to_string(),
                path: path.iter().map(|key| key.to_string()).collect(),
                kind: *kind,
            })
            .collect(),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some(request) = read_request(input) else { return };
    for (name, value) in request.headers() {
        if name.as_str().starts_with("mcp-param-")
            && let Ok(text) = value.to_str()
            && let Some(decoded) = cordon::fuzzing::decode_param(text.trim())
        {
            assert_eq!(cordon::fuzzing::decode_param(&client_encoding(&decoded)).as_deref(), Some(&*decoded));
        }
    }
    match cordon::fuzzing::http_ladder(&request, &SETTINGS, &TOOLS) {
        Verdict::Refused(status) => assert!(status.is_client_error(), "{status}"),
        Verdict::Accepted => {}
        Verdict::Dispatch { message, legacy } => {
            let cordon::protocol::jsonrpc::Incoming::Request { id, .. } = &message else {
                panic!("only requests are dispatched")
            };
            let id = cordon_fuzz::checked_id(id);
            let answers = cordon_fuzz::DISPATCHER.handle(message, legacy);
            assert_eq!(answers.len(), 1, "a request is answered once");
            cordon_fuzz::check_response(&answers[0], Some(&id));
        }
    }
    client_headers_are_accepted(request.body());
});

/// The request in `input`, as hyper would hand it over; `None` where hyper answers 400.
fn read_request(input: &[u8]) -> Option<Request<&[u8]>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head) = parsed.parse(input).ok()? else { return None };
    let mut request = Request::builder().method(parsed.method?).uri(parsed.path?);
    for header in parsed.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        request = request.header(name, HeaderValue::from_bytes(header.value).ok()?);
    }
    request.body(&input[head..]).ok()
}

/// How a client sends a header value: as it is when it is plain visible ASCII (inner
/// spaces allowed) that cannot be mistaken for the encoded form, else `=?base64?…?=`.
fn client_encoding(value: &str) -> String {
    let plain = value.bytes().all(|byte| byte == b' ' || byte.is_ascii_graphic())
        && value.trim() == value
        && !value.starts_with("=?base64?");
    if plain { value.to_owned() } else { format!("=?base64?{}?=", BASE64.encode(value)) }
}

/// For a `tools/call` body naming one of the tools, the `Mcp-Param-*` headers a client
/// derives from its arguments pass the check.
fn client_headers_are_accepted(body: &[u8]) {
    let Ok(mut body) = serde_json::from_slice::<Value>(body) else { return };
    let Some(params) = body.get_mut("params").map(Value::take) else { return };
    let Some(tool) = params["name"].as_str().and_then(|name| TOOLS.iter().find(|tool| tool.name == name))
    else {
        return;
    };
    let Some(arguments) = params.get("arguments") else { return };
    let mut headers = HeaderMap::new();
    for param in &tool.param_headers {
        let value = param.path.iter().try_fold(arguments, |value, key| value.get(key));
        let text = match (param.kind, value) {
            (_, None | Some(Value::Null)) => continue,
            (ParamKind::String, Some(Value::String(text))) => client_encoding(text),
            (ParamKind::Integer, Some(Value::Number(number))) if number.is_i64() || number.is_u64() => {
                number.to_string()
            }
            (ParamKind::Boolean, Some(Value::Bool(flag))) => flag.to_string(),
            // Arguments of the wrong type fail the tool's schema; a client cannot mirror them.
            _ => return,
        };
        let name = HeaderName::try_from(format!("mcp-param-{}", param.name)).expect("a token");
        headers.insert(name, HeaderValue::try_from(text).expect("visible ASCII"));
    }
    if let Err(problem) = cordon::fuzzing::check_param_headers(&headers, tool, Some(&params)) {
        panic!("a conforming client's headers were refused: {problem}");
    }
}
