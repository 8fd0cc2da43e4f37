//! MCP 2026-07-28 message shapes (and the 2025-11-25 `initialize` answer): the request
//! envelope, discovery, tool listings and call results. Pure functions of their inputs.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use super::jsonrpc::{
    MISSING_REQUIRED_CLIENT_CAPABILITY, RequestId, RpcError, UNSUPPORTED_PROTOCOL_VERSION, is_id_like,
};
use crate::runtime::{CallError, Content, Outcome, Timeout, ToolLimits, ToolResult, ToolSpec};

/// The protocol revision this server speaks natively.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Revisions served through the `initialize` handshake, newest first. Older ones (2025-03-26
/// and before) lack what every answer may carry (`structuredContent`, `resource_link`,
/// `outputSchema`, `title`): a client asking for one is offered 2025-11-25 and decides.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The deprecated per-request log level: accepted when valid, and ignored (this server
/// never sends `notifications/message`).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const LOG_LEVELS: [&str; 8] =
    ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// Tags every message of a `subscriptions/listen` stream with the listen request's id.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// How long clients may cache discovery and tool lists. A reload may change the tools
/// sooner: clients that listen are told at once (`notifications/tools/list_changed`).
const TTL: Duration = Duration::from_secs(300);
/// Tools per `tools/list` page.
pub const PAGE_SIZE: usize = 100;

/// What a request's `params._meta` declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub protocol_version: String,
    pub client_capabilities: Option<Map<String, Value>>,
    pub progress_token: Option<Value>,
}

/// Whether `params` carries the 2026-07-28 envelope (the protocol version key).
pub fn has_envelope(params: Option<&Value>) -> bool {
    params.and_then(|params| params.get("_meta")).and_then(|meta| meta.get(META_PROTOCOL_VERSION)).is_some()
}

/// Check the per-request envelope: `-32602` when a required key is missing or mistyped,
/// `-32022` when the version is not ours.
pub fn check_envelope(params: Option<&Value>) -> Result<Envelope, RpcError> {
    let envelope = parse_envelope(params)?;
    check_version(&envelope)?;
    Ok(envelope)
}

/// Read the envelope's keys without judging the version (HTTP checks its headers between
/// the two steps): `-32602` when a required key is missing or mistyped.
pub fn parse_envelope(params: Option<&Value>) -> Result<Envelope, RpcError> {
    let meta = params
        .and_then(|params| params.get("_meta"))
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("Invalid params: `params._meta` is required"))?;
    let protocol_version = match meta.get(META_PROTOCOL_VERSION) {
        Some(Value::String(version)) => version.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: `{META_PROTOCOL_VERSION}` must be a string"
            )));
        }
        None => {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: `_meta[\"{META_PROTOCOL_VERSION}\"]` is required"
            )));
        }
    };
    let capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
        Some(Value::Object(capabilities)) => capabilities.clone(),
        _ => {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: `_meta[\"{META_CLIENT_CAPABILITIES}\"]` is required and must be an object"
            )));
        }
    };
    if let Some(level) = meta.get(META_LOG_LEVEL)
        && !level.as_str().is_some_and(|level| LOG_LEVELS.contains(&level))
    {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: `_meta[\"{META_LOG_LEVEL}\"]` must be one of {}",
            LOG_LEVELS.join(", ")
        )));
    }
    let progress_token = progress_token(params);
    Ok(Envelope { protocol_version, client_capabilities: Some(capabilities), progress_token })
}

/// The request's `_meta.progressToken`, when it is a valid token (a string or an integer).
/// Both eras send it there.
pub fn progress_token(params: Option<&Value>) -> Option<Value> {
    params
        .and_then(|params| params.pointer("/_meta/progressToken"))
        .filter(|token| is_id_like(token))
        .cloned()
}

/// `-32022` unless the envelope names the version we speak.
pub fn check_version(envelope: &Envelope) -> Result<(), RpcError> {
    if envelope.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(unsupported_version(&envelope.protocol_version))
    }
}

/// `-32021` when a tool needs client capabilities the request did not declare.
/// 2025-era requests (no envelope) declared theirs at `initialize`, which a stateless
/// server does not keep, so they are not checked.
pub fn check_capabilities(envelope: Option<&Envelope>, required: &[String]) -> Result<(), RpcError> {
    let Some(declared) = envelope.and_then(|envelope| envelope.client_capabilities.as_ref()) else {
        return Ok(());
    };
    let missing: Map<String, Value> = required
        .iter()
        .filter(|name| !declared.contains_key(*name))
        .map(|name| (name.clone(), json!({})))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.keys().map(String::as_str).collect();
    Err(RpcError::new(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("Missing required client capability: {}", names.join(", ")),
    )
    .with_data(json!({ "requiredCapabilities": missing })))
}

pub fn unsupported_version(requested: &str) -> RpcError {
    RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
        .with_data(json!({"supported": [PROTOCOL_VERSION], "requested": requested}))
}

pub fn server_info() -> Value {
    json!({"name": "cordon", "version": env!("CARGO_PKG_VERSION")})
}

/// A complete result: `resultType` and the server's identity in `_meta`.
pub fn complete(mut result: Map<String, Value>) -> Value {
    result.insert("resultType".into(), json!("complete"));
    result.insert("_meta".into(), json!({ META_SERVER_INFO: server_info() }));
    Value::Object(result)
}

/// The same result as a 2025-11-25 client reads it: without what only 2026-07-28 defines
/// (`resultType`, the server's identity in `_meta`, the caching hints `ttlMs` and
/// `cacheScope`). A legacy `ping` is answered `{}`.
pub fn legacy_result(result: Value) -> Value {
    let Value::Object(mut result) = result else { return result };
    for key in ["resultType", "ttlMs", "cacheScope"] {
        result.remove(key);
    }
    if let Some(Value::Object(meta)) = result.get_mut("_meta") {
        meta.remove(META_SERVER_INFO);
        if meta.is_empty() {
            result.remove("_meta");
        }
    }
    Value::Object(result)
}

/// [`legacy_result`] inside a JSON-RPC answer (an error answer is the same in both eras).
pub fn legacy_answer(mut message: Value) -> Value {
    if let Some(result) = message.get_mut("result") {
        *result = legacy_result(result.take());
    }
    message
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("built from json!({{...}})"),
    }
}

const INSTRUCTIONS: &str = "Tools run in WebAssembly sandboxes with hard limits; a call that is cancelled or \
    runs out of time is stopped and cleaned up.";

/// `cacheScope` for results that depend on who asks (`private`) or not.
fn cache_scope(private: bool) -> &'static str {
    if private { "private" } else { "public" }
}

/// `server/discover`; `private` when the server has tenants (their views differ).
pub fn discover_result(private: bool) -> Value {
    complete(object(json!({
        "supportedVersions": [PROTOCOL_VERSION],
        "capabilities": {"tools": {"listChanged": true}},
        "instructions": INSTRUCTIONS,
        "ttlMs": TTL.as_millis() as u64,
        "cacheScope": cache_scope(private),
    })))
}

/// The answer to a 2025-era `initialize`: the client's version when we serve it, else our
/// newest legacy one (the client then decides whether to continue).
pub fn initialize_result(requested: Option<&str>) -> Value {
    let version = requested.filter(|version| LEGACY_VERSIONS.contains(version)).unwrap_or(LEGACY_VERSIONS[0]);
    complete(object(json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": true}},
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
    })))
}

/// A tool as MCP describes it.
pub fn tool_json(spec: &ToolSpec) -> Value {
    let mut tool = Map::new();
    tool.insert("name".into(), json!(spec.name));
    if let Some(title) = &spec.title {
        tool.insert("title".into(), json!(title));
    }
    tool.insert("description".into(), json!(spec.description));
    tool.insert("inputSchema".into(), spec.input_schema.clone());
    if let Some(schema) = &spec.output_schema {
        tool.insert("outputSchema".into(), schema.clone());
    }
    if let Some(annotations) = &spec.annotations {
        let mut hints = Map::new();
        let pairs = [
            ("readOnlyHint", annotations.read_only),
            ("destructiveHint", annotations.destructive),
            ("idempotentHint", annotations.idempotent),
            ("openWorldHint", annotations.open_world),
        ];
        for (key, hint) in pairs {
            if let Some(hint) = hint {
                hints.insert(key.into(), json!(hint));
            }
        }
        tool.insert("annotations".into(), Value::Object(hints));
    }
    Value::Object(tool)
}

/// One page of `tools/list`. The cursor is the offset of the page, as text; the empty
/// string means the first page. `private` when the list is a tenant's view.
pub fn list_result(tools: &[Value], cursor: Option<&Value>, private: bool) -> Result<Value, RpcError> {
    let start = match cursor {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) if cursor.is_empty() => 0,
        Some(Value::String(cursor)) => cursor
            .parse::<usize>()
            .ok()
            .filter(|start| *start <= tools.len())
            .ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?,
        Some(_) => return Err(RpcError::invalid_params("Invalid cursor: it must be a string")),
    };
    let end = (start + PAGE_SIZE).min(tools.len());
    let mut result = object(json!({
        "tools": tools[start..end],
        "ttlMs": TTL.as_millis() as u64,
        "cacheScope": cache_scope(private),
    }));
    if end < tools.len() {
        result.insert("nextCursor".into(), json!(end.to_string()));
    }
    Ok(complete(result))
}

/// How a call that could not start is answered: a protocol error for a malformed request
/// (an unknown tool, `arguments` not an object), a tool execution error for the rest.
/// Arguments that break the tool's input schema are a tool execution error naming the JSON
/// path (SEP-1303, 2025-11-25 on), so that the model can correct them and call again.
pub fn call_error(error: &CallError) -> Result<Value, RpcError> {
    match error {
        CallError::UnknownTool(_) | CallError::ArgumentsNotObject => {
            Err(RpcError::invalid_params(capitalized(&error.to_string())))
        }
        CallError::InvalidArguments { .. }
        // The tool's own schema is at fault, not the client.
        | CallError::Busy { .. }
        | CallError::TenantBusy { .. }
        | CallError::ShuttingDown
        | CallError::ArgumentsUnchecked { .. } => Ok(error_result(&capitalized(&error.to_string()))),
    }
}

/// A `CallToolResult` for every outcome but a cancel (which is never answered).
pub fn call_result(outcome: &Outcome, limits: &ToolLimits) -> Value {
    match outcome {
        Outcome::Completed(result) => completed_result(result),
        Outcome::ToolError(message) => error_result(message),
        Outcome::Cancelled => error_result("The call was cancelled."),
        Outcome::TimedOut(Timeout::Idle(idle)) => error_result(&format!(
            "The tool was stopped: it reported no progress for {} (its idle timeout).",
            seconds(*idle)
        )),
        Outcome::TimedOut(Timeout::MaxDuration(max)) => error_result(&format!(
            "The tool was stopped: it ran for {} (its maximum duration).",
            seconds(*max)
        )),
        Outcome::Trapped(message) => error_result(&format!("The tool crashed: {message}.")),
        Outcome::OutOfMemory => error_result(&format!(
            "The tool ran out of memory (its limit is {} MiB).",
            limits.memory_bytes >> 20
        )),
        Outcome::ResultTooLarge { bytes, limit } => error_result(&format!(
            "The tool's result ({bytes} bytes) is larger than its limit of {limit} bytes."
        )),
        Outcome::InvalidResult(problem) => {
            error_result(&format!("The tool returned an invalid result: {problem}."))
        }
        Outcome::Shutdown => error_result("The server is shutting down; the call was stopped."),
        Outcome::StartFailed(problem) => error_result(&format!("The tool could not start: {problem}.")),
        // Only a request for a resource, prompt or completion is answered so (dispatch/features.rs).
        Outcome::Answered(_) => error_result("The tool returned no tool result."),
    }
}

fn completed_result(result: &ToolResult) -> Value {
    let content: Vec<Value> = result.content.iter().map(content_json).collect();
    let mut body = object(json!({ "content": content }));
    if let Some(structured) = &result.structured {
        body.insert("structuredContent".into(), structured.clone());
    }
    if result.is_error {
        body.insert("isError".into(), json!(true));
    }
    complete(body)
}

fn error_result(message: &str) -> Value {
    complete(object(json!({"content": [{"type": "text", "text": message}], "isError": true})))
}

fn content_json(content: &Content) -> Value {
    match content {
        Content::Text(text) => json!({"type": "text", "text": text}),
        Content::Image(media) => {
            json!({"type": "image", "data": BASE64.encode(&media.data), "mimeType": media.mime_type})
        }
        Content::Audio(media) => {
            json!({"type": "audio", "data": BASE64.encode(&media.data), "mimeType": media.mime_type})
        }
        Content::ResourceLink(link) => {
            let mut item = object(json!({"type": "resource_link", "uri": link.uri, "name": link.name}));
            if let Some(description) = &link.description {
                item.insert("description".into(), json!(description));
            }
            if let Some(mime_type) = &link.mime_type {
                item.insert("mimeType".into(), json!(mime_type));
            }
            Value::Object(item)
        }
        Content::EmbeddedResource(resource) => {
            let mut contents = object(json!({"uri": resource.uri}));
            if let Some(mime_type) = &resource.mime_type {
                contents.insert("mimeType".into(), json!(mime_type));
            }
            match (&resource.text, &resource.blob) {
                (_, Some(blob)) => contents.insert("blob".into(), json!(BASE64.encode(blob))),
                (text, None) => contents.insert("text".into(), json!(text.as_deref().unwrap_or(""))),
            };
            json!({"type": "resource", "resource": contents})
        }
    }
}

fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// The notifications a `subscriptions/listen` request asks for that this server honours:
/// `toolsListChanged` only (there are no prompts or resources). `-32602` unless
/// `params.notifications` is an object.
pub fn listen_filter(params: Option<&Value>) -> Result<Map<String, Value>, RpcError> {
    let Some(requested) = params.and_then(|params| params.get("notifications")).and_then(Value::as_object)
    else {
        return Err(RpcError::invalid_params("Invalid params: `notifications` must be an object"));
    };
    let mut honoured = Map::new();
    if requested.get("toolsListChanged") == Some(&Value::Bool(true)) {
        honoured.insert("toolsListChanged".into(), json!(true));
    }
    Ok(honoured)
}

fn subscription_meta(subscription: &RequestId) -> Value {
    json!({ META_SUBSCRIPTION_ID: subscription.to_json() })
}

/// The first message of a listen stream: what it will carry.
pub fn subscription_acknowledged(subscription: &RequestId, honoured: Map<String, Value>) -> Value {
    super::jsonrpc::notification(
        "notifications/subscriptions/acknowledged",
        json!({"_meta": subscription_meta(subscription), "notifications": honoured}),
    )
}

/// `notifications/tools/list_changed`: on a listen stream (tagged with its id), or, for a
/// 2025-era client, on its own.
pub fn tools_list_changed(subscription: Option<&RequestId>) -> Value {
    match subscription {
        Some(subscription) => super::jsonrpc::notification(
            "notifications/tools/list_changed",
            json!({"_meta": subscription_meta(subscription)}),
        ),
        None => json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
    }
}

/// The answer that ends a listen stream the server closes (at shutdown).
pub fn listen_ended(subscription: &RequestId) -> Value {
    let mut result = complete(Map::new());
    result["_meta"][META_SUBSCRIPTION_ID] = subscription.to_json();
    result
}

/// On stdio, what follows [`listen_ended`]: the stream is torn down (spec digest §17.1).
pub fn listen_cancelled(subscription: &RequestId, reason: &str) -> Value {
    super::jsonrpc::notification(
        "notifications/cancelled",
        json!({"_meta": subscription_meta(subscription), "requestId": subscription.to_json(), "reason": reason}),
    )
}

/// A progress notification.
pub fn progress_notification(token: &Value, progress: &crate::runtime::Progress) -> Value {
    let mut params = object(json!({"progressToken": token, "progress": progress.done}));
    if let Some(total) = progress.total {
        params.insert("total".into(), json!(total));
    }
    if let Some(message) = &progress.message {
        params.insert("message".into(), json!(message));
    }
    super::jsonrpc::notification("notifications/progress", Value::Object(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(meta: Value) -> Result<Envelope, RpcError> {
        check_envelope(Some(&json!({ "_meta": meta })))
    }

    #[test]
    fn the_envelope_is_required_and_checked() {
        assert_eq!(check_envelope(Some(&json!({}))).unwrap_err().code, -32602);
        assert_eq!(envelope(json!({META_CLIENT_CAPABILITIES: {}})).unwrap_err().code, -32602);
        assert_eq!(envelope(json!({META_PROTOCOL_VERSION: PROTOCOL_VERSION})).unwrap_err().code, -32602);
        assert_eq!(
            envelope(json!({META_PROTOCOL_VERSION: 7, META_CLIENT_CAPABILITIES: {}})).unwrap_err().code,
            -32602
        );
        let error =
            envelope(json!({META_PROTOCOL_VERSION: "1900-01-01", META_CLIENT_CAPABILITIES: {}})).unwrap_err();
        assert_eq!(error.code, -32022);
        assert_eq!(error.data.unwrap(), json!({"supported": [PROTOCOL_VERSION], "requested": "1900-01-01"}));
        let ok = envelope(
            json!({META_PROTOCOL_VERSION: PROTOCOL_VERSION, META_CLIENT_CAPABILITIES: {}, "progressToken": 5}),
        );
        assert_eq!(ok.unwrap().progress_token, Some(json!(5)));
    }

    #[test]
    fn tools_list_pages_with_an_opaque_cursor() {
        let tools: Vec<Value> = (0..250).map(|i| json!({"name": format!("t{i}")})).collect();
        let first = list_result(&tools, None, false).unwrap();
        assert_eq!(first["tools"].as_array().unwrap().len(), PAGE_SIZE);
        let cursor = first["nextCursor"].clone();
        let second = list_result(&tools, Some(&cursor), false).unwrap();
        assert_eq!(second["tools"][0]["name"], "t100");
        let last = list_result(&tools, Some(&second["nextCursor"]), false).unwrap();
        assert_eq!(last["tools"].as_array().unwrap().len(), 50);
        assert!(last.get("nextCursor").is_none());
        assert_eq!(list_result(&tools, Some(&json!("")), false).unwrap()["tools"][0]["name"], "t0");
        assert_eq!(list_result(&tools, Some(&json!("bogus")), false).unwrap_err().code, -32602);
        assert_eq!(list_result(&tools, Some(&json!("999")), false).unwrap_err().code, -32602);
    }
}
