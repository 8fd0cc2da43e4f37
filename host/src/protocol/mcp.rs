//! MCP requests as the server reads them (the 2026-07-28 envelope, cursors, listen filters,
//! the `Mcp-Param-*` header encoding) and the results it answers them with, built for the
//! revision the client speaks ([`Revision`]). Pure functions of their inputs.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::jsonrpc::{MISSING_REQUIRED_CLIENT_CAPABILITY, RequestId, RpcError, UNSUPPORTED_PROTOCOL_VERSION};
use super::types::{
    AcknowledgedParams, CacheScope, Caching, CancelledParams, Completion, DiscoverResult, Empty, EmptyResult,
    ErrorData, Implementation, InitializeResult, ListCapability, ListChangedParams, ListKind,
    ListToolsResult, LoggingLevel, ResultMeta, Revision, ServerCapabilities, ServerNotification,
    SubscriptionFilter, SubscriptionMeta, Tool,
};
pub use super::types::{LEGACY_VERSIONS, META_SERVER_INFO, META_SUBSCRIPTION_ID, PROTOCOL_VERSION};

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The (deprecated) per-request log level: a tool's log lines at or above it reach the
/// client on the request's stream; without it none do (the spec's MUST NOT).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// How long clients may cache discovery and tool lists. A reload may change the tools
/// sooner: clients that listen are told at once (`notifications/tools/list_changed`).
const TTL: Duration = Duration::from_secs(300);
pub use super::features::PAGE_SIZE;

/// What a request's `params._meta` declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub protocol_version: String,
    pub client_capabilities: Option<serde_json::Map<String, Value>>,
    pub progress_token: Option<RequestId>,
    /// The least severe log level the client wants of this request's tool (none: no log).
    pub log_level: Option<LoggingLevel>,
}

/// Whether `method` runs guest code (a fresh instance of a component), and so counts
/// against a tenant's `calls_per_second` as a tool call does.
pub fn runs_guest_code(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read" | "completion/complete")
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
    let log_level = match meta.get(META_LOG_LEVEL) {
        None => None,
        Some(level) => Some(
            level
                .as_str()
                .and_then(LoggingLevel::parse)
                .ok_or_else(|| invalid_level(&format!("`_meta[\"{META_LOG_LEVEL}\"]`")))?,
        ),
    };
    let progress_token = progress_token(params)?;
    Ok(Envelope { protocol_version, client_capabilities: Some(capabilities), progress_token, log_level })
}

fn invalid_level(what: &str) -> RpcError {
    let levels: Vec<&str> = LoggingLevel::ALL.iter().map(|level| level.as_str()).collect();
    RpcError::invalid_params(format!("Invalid params: {what} must be one of {}", levels.join(", ")))
}

/// The level of a 2025-era `logging/setLevel`: `-32602` unless `params.level` is one.
pub fn set_level(params: Option<&Value>) -> Result<LoggingLevel, RpcError> {
    params
        .and_then(|params| params.get("level"))
        .and_then(Value::as_str)
        .and_then(LoggingLevel::parse)
        .ok_or_else(|| invalid_level("`level`"))
}

/// The request's `_meta.progressToken`, when it is a valid token (a string or an integer;
/// anything else is ignored). Both eras send it there. A string longer than
/// [`MAX_ID_BYTES`](super::jsonrpc::MAX_ID_BYTES) is `-32602`: it would be copied into
/// every progress notification.
pub fn progress_token(params: Option<&Value>) -> Result<Option<RequestId>, RpcError> {
    let Some(token) = params.and_then(|params| params.pointer("/_meta/progressToken")) else {
        return Ok(None);
    };
    if token.as_str().is_some_and(|token| token.len() > super::jsonrpc::MAX_ID_BYTES) {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: `_meta.progressToken` is longer than {} bytes",
            super::jsonrpc::MAX_ID_BYTES
        )));
    }
    Ok(RequestId::parse(token))
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
    let missing: Vec<(&str, Option<&str>)> = required
        .iter()
        // A capability is declared as an object: `"sampling": null` declares nothing.
        .filter(|name| !declared.get(*name).is_some_and(Value::is_object))
        .map(|name| (name.as_str(), None))
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(missing_capabilities(missing)),
    }
}

/// `-32021` naming the `missing` capabilities, each with the sub-capability within it that
/// is needed, if that is what is missing (`sampling.tools`).
pub fn missing_capabilities<'a>(missing: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> RpcError {
    let mut required: BTreeMap<String, BTreeMap<String, Empty>> = BTreeMap::new();
    for (capability, sub) in missing {
        let within = required.entry(capability.to_owned()).or_default();
        within.extend(sub.map(|sub| (sub.to_owned(), Empty {})));
    }
    let names: Vec<String> = required
        .iter()
        .flat_map(|(name, within)| match within.is_empty() {
            true => vec![name.clone()],
            false => within.keys().map(|sub| format!("{name}.{sub}")).collect(),
        })
        .collect();
    RpcError::new(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("Missing required client capability: {}", names.join(", ")),
    )
    .with_data(ErrorData::MissingCapabilities { required_capabilities: required })
}

/// The most of a requested version an answer quotes. `requested` must echo the version
/// exactly (the conformance suite checks it), so any plausible one is quoted whole; a
/// client that sends a header's worth of text gets back no more than this.
const MAX_QUOTED_VERSION: usize = 1024;

pub fn unsupported_version(requested: &str) -> RpcError {
    let requested = match requested.len() > MAX_QUOTED_VERSION {
        true => format!("{}…", &requested[..requested.floor_char_boundary(MAX_QUOTED_VERSION)]),
        false => requested.to_owned(),
    };
    RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version").with_data(
        ErrorData::UnsupportedVersion { supported: vec![Cow::Borrowed(PROTOCOL_VERSION)], requested },
    )
}

const INSTRUCTIONS: &str = "Tools run in WebAssembly sandboxes with hard limits; a call that is cancelled or \
    runs out of time is stopped and cleaned up.";

/// `cacheScope` for results that depend on who asks (`private`) or not.
fn cache_scope(private: bool) -> CacheScope {
    if private { CacheScope::Private } else { CacheScope::Public }
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        tools: Some(ListCapability { list_changed: true }),
        logging: Some(Empty {}),
        ..ServerCapabilities::default()
    }
}

/// `server/discover`; `private` when the server has tenants (their views differ).
pub fn discover_result(private: bool, revision: Revision) -> DiscoverResult {
    DiscoverResult {
        supported_versions: vec![Cow::Borrowed(PROTOCOL_VERSION)],
        capabilities: capabilities(),
        instructions: Some(Cow::Borrowed(INSTRUCTIONS)),
        caching: Caching::new(revision, TTL.as_millis() as u64, cache_scope(private)),
        completion: Completion::new(revision),
    }
}

/// The answer to a 2025-era `initialize`: the client's version when we serve it, else our
/// newest legacy one (the client then decides whether to continue).
pub fn initialize_result(requested: Option<&str>) -> InitializeResult {
    let version =
        LEGACY_VERSIONS.iter().find(|version| Some(**version) == requested).unwrap_or(&LEGACY_VERSIONS[0]);
    InitializeResult {
        protocol_version: Cow::Borrowed(version),
        capabilities: capabilities(),
        server_info: Implementation::CORDON,
        instructions: Some(Cow::Borrowed(INSTRUCTIONS)),
    }
}

/// `ping`'s answer: `{}` in 2025-11-25.
pub fn empty_result(revision: Revision) -> EmptyResult {
    EmptyResult { completion: Completion::new(revision) }
}

/// One page of `tools/list` ([`super::features::page`]: a cursor names the tool the page
/// before it ended with). `private` when the list is a tenant's view.
pub fn list_result(
    tools: &[Tool],
    cursor: Option<&Value>,
    private: bool,
    revision: Revision,
) -> Result<ListToolsResult, RpcError> {
    let (page, next_cursor) = super::features::page(tools, |tool| &tool.name, cursor)?;
    Ok(ListToolsResult {
        tools: page.iter().map(|tool| tool.for_revision(revision)).collect(),
        next_cursor,
        caching: Caching::new(revision, TTL.as_millis() as u64, cache_scope(private)),
        completion: Completion::new(revision),
    })
}

/// An `Mcp-Param-*` (or `Mcp-Name`) header's value: `=?base64?…?=` decoded strictly
/// (padding, alphabet, UTF-8), else the literal text. `None` when the encoded form is
/// invalid.
pub fn decode_header_value(value: &str) -> Option<String> {
    match value.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// The list changes a `subscriptions/listen` request asks for (of those this server sends;
/// `resourceSubscriptions` is not among them). `-32602` unless `params.notifications` is
/// an object.
pub fn listen_filter(params: Option<&Value>) -> Result<SubscriptionFilter, RpcError> {
    let Some(requested) = params.and_then(|params| params.get("notifications")).and_then(Value::as_object)
    else {
        return Err(RpcError::invalid_params("Invalid params: `notifications` must be an object"));
    };
    let asked = |key: &str| requested.get(key) == Some(&Value::Bool(true));
    Ok(SubscriptionFilter {
        tools_list_changed: asked("toolsListChanged"),
        prompts_list_changed: asked("promptsListChanged"),
        resources_list_changed: asked("resourcesListChanged"),
    })
}

fn subscription_meta(subscription: &RequestId) -> SubscriptionMeta {
    SubscriptionMeta { subscription_id: subscription.clone() }
}

/// The first message of a listen stream: what it will carry.
pub fn subscription_acknowledged(
    subscription: &RequestId,
    honoured: SubscriptionFilter,
) -> ServerNotification {
    ServerNotification::SubscriptionsAcknowledged(AcknowledgedParams {
        meta: subscription_meta(subscription),
        notifications: honoured,
    })
}

/// `notifications/<kind>/list_changed`: on a listen stream (tagged with its id), or, for a
/// 2025-era client, on its own.
pub fn list_changed(kind: ListKind, subscription: Option<&RequestId>) -> ServerNotification {
    ServerNotification::ListChanged(
        kind,
        subscription.map(|subscription| ListChangedParams { meta: subscription_meta(subscription) }),
    )
}

/// The answer that ends a listen stream the server closes (at shutdown, or when the
/// credentials it was opened with expire). Listening is
/// 2026-07-28 only.
pub fn listen_ended(subscription: &RequestId) -> EmptyResult {
    EmptyResult {
        completion: Completion {
            meta: Some(ResultMeta {
                server_info: Implementation::CORDON,
                subscription_id: Some(subscription.clone()),
            }),
            ..Completion::new(Revision::R2026_07_28)
        },
    }
}

/// On stdio, what follows [`listen_ended`]: the stream is torn down (spec digest §17.1).
pub fn listen_cancelled(subscription: &RequestId, reason: &str) -> ServerNotification {
    ServerNotification::Cancelled(CancelledParams {
        meta: Some(subscription_meta(subscription)),
        request_id: subscription.clone(),
        reason: Some(reason.to_owned()),
    })
}

#[cfg(test)]
mod tests {

    /// `requested` echoes any plausible version exactly; only a header's worth is cut.
    #[test]
    fn an_unsupported_version_is_echoed_exactly_unless_it_is_huge() {
        let requested = |version: &str| match unsupported_version(version).data {
            Some(data) => serde_json::to_value(data).unwrap()["requested"].as_str().unwrap().to_owned(),
            None => panic!("no data"),
        };
        let long = format!("2026-07-28-{}", "x".repeat(100));
        assert_eq!(requested(&long), long);
        let huge = "y".repeat(64 << 10);
        assert_eq!(requested(&huge), format!("{}…", &huge[..MAX_QUOTED_VERSION]));
    }

    use serde_json::json;

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
        let data = serde_json::to_value(error.data.unwrap()).unwrap();
        assert_eq!(data, json!({"supported": [PROTOCOL_VERSION], "requested": "1900-01-01"}));
        let ok = envelope(
            json!({META_PROTOCOL_VERSION: PROTOCOL_VERSION, META_CLIENT_CAPABILITIES: {}, "progressToken": 5}),
        );
        assert_eq!(ok.unwrap().progress_token, RequestId::parse(&json!(5)));
    }

    #[test]
    fn tools_list_pages_with_an_opaque_cursor() {
        let tools: Vec<Tool> = (0..250)
            .map(|i| Tool {
                name: format!("t{i}"),
                title: None,
                description: String::new(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
                annotations: None,
            })
            .collect();
        let list = |cursor: Option<&Value>| list_result(&tools, cursor, false, Revision::R2026_07_28);
        let first = list(None).unwrap();
        assert_eq!(first.tools.len(), PAGE_SIZE);
        let cursor = Value::from(first.next_cursor.unwrap());
        let second = list(Some(&cursor)).unwrap();
        assert_eq!(second.tools[0].name, "t100");
        let last = list(Some(&Value::from(second.next_cursor.unwrap()))).unwrap();
        assert_eq!(last.tools.len(), 50);
        assert!(last.next_cursor.is_none());
        assert_eq!(list(Some(&json!(""))).unwrap().tools[0].name, "t0");
        assert_eq!(list(Some(&json!("bogus"))).unwrap_err().code, -32602);
        assert_eq!(list(Some(&json!("100"))).unwrap_err().code, -32602, "an offset is no cursor");
    }
}
