//! The MCP messages this server writes, as serde types, for both revisions it speaks:
//! 2026-07-28 and 2025-11-25 (and 2025-06-18, which reads the same shapes).
//!
//! A result is built for a [`Revision`]: a 2026-07-28 result is complete (`resultType`)
//! and names the server in `_meta`, a cacheable one carries `ttlMs` and `cacheScope`; a
//! 2025-11-25 result carries none of those, since that revision does not define them.
//! Every type here serializes to what the official schema of its revision accepts
//! (`host/tests/protocol.rs` checks each against it) and reads back to itself.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jsonrpc::RequestId;

/// The protocol revision this server speaks natively.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Revisions served through the `initialize` handshake, newest first. Older ones (2025-03-26
/// and before) lack what every answer may carry (`structuredContent`, `resource_link`,
/// `outputSchema`, `title`): a client asking for one is offered 2025-11-25 and decides.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Tags every message of a `subscriptions/listen` stream with the listen request's id.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The revision a message is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Revision {
    /// 2025-11-25 (and 2025-06-18): clients that began with `initialize`.
    R2025_11_25,
    /// 2026-07-28: stateless, every request in its `_meta` envelope.
    R2026_07_28,
}

/// `resultType`: complete, or (for `tools/call` and `prompts/get`) input required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultType {
    Complete,
    InputRequired,
}

/// A name and a version: the server's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: Cow<'static, str>,
    pub version: Cow<'static, str>,
}

impl Implementation {
    /// This server.
    pub const CORDON: Self =
        Self { name: Cow::Borrowed("cordon"), version: Cow::Borrowed(env!("CARGO_PKG_VERSION")) };
}

/// A result's `_meta` in 2026-07-28: the server's identity, and on a listen stream's
/// final answer the stream's id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMeta {
    #[serde(rename = "io.modelcontextprotocol/serverInfo")]
    pub server_info: Implementation,
    #[serde(
        rename = "io.modelcontextprotocol/subscriptionId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub subscription_id: Option<RequestId>,
}

/// What every 2026-07-28 result carries, and a 2025-11-25 one does not.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Completion {
    #[serde(rename = "resultType", default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<ResultMeta>,
}

impl Completion {
    /// Complete, naming the server, in 2026-07-28; nothing in 2025-11-25.
    pub fn new(revision: Revision) -> Self {
        match revision {
            Revision::R2025_11_25 => Self::default(),
            Revision::R2026_07_28 => Self {
                result_type: Some(ResultType::Complete),
                meta: Some(ResultMeta { server_info: Implementation::CORDON, subscription_id: None }),
            },
        }
    }
}

/// Whether a cached result may be shared between clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    Public,
    /// It depends on who asks (a tenant's view).
    Private,
}

/// The caching hints of a cacheable 2026-07-28 result (2025-11-25 has none).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Caching {
    #[serde(rename = "ttlMs", default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(rename = "cacheScope", default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
}

impl Caching {
    pub fn new(revision: Revision, ttl_ms: u64, scope: CacheScope) -> Self {
        match revision {
            Revision::R2025_11_25 => Self::default(),
            Revision::R2026_07_28 => Self { ttl_ms: Some(ttl_ms), cache_scope: Some(scope) },
        }
    }
}

fn is_false(flag: &bool) -> bool {
    !*flag
}

/// `{}`: a capability with no options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Empty {}

/// `capabilities.tools` and `capabilities.prompts`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ListCapability {
    #[serde(rename = "listChanged", default, skip_serializing_if = "is_false")]
    pub list_changed: bool,
}

/// `capabilities.resources`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ResourcesCapability {
    /// `resources/subscribe` is served (2025-11-25 only: 2026-07-28 has no such method).
    #[serde(default, skip_serializing_if = "is_false")]
    pub subscribe: bool,
    #[serde(rename = "listChanged", default, skip_serializing_if = "is_false")]
    pub list_changed: bool,
}

/// What the server offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ServerCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ListCapability>,
    /// Set when a component offers resources (`protocol/features.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ListCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<Empty>,
    /// A tool's log reaches clients that ask for it (`notifications/message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<Empty>,
}

/// `server/discover` (2026-07-28).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiscoverResult {
    #[serde(rename = "supportedVersions")]
    pub supported_versions: Vec<Cow<'static, str>>,
    pub capabilities: ServerCapabilities,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Cow<'static, str>>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: Completion,
}

/// `initialize` (2025-11-25 and 2025-06-18 only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitializeResult {
    #[serde(rename = "protocolVersion")]
    pub protocol_version: Cow<'static, str>,
    pub capabilities: ServerCapabilities,
    #[serde(rename = "serverInfo")]
    pub server_info: Implementation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Cow<'static, str>>,
}

/// A result with nothing in it but what its revision asks of every result: `ping`'s
/// answer (`{}` in 2025-11-25), and a listen stream's final answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EmptyResult {
    #[serde(flatten)]
    pub completion: Completion,
}

/// A tool's hints; only those it sets are written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolAnnotations {
    #[serde(rename = "readOnlyHint", default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(rename = "destructiveHint", default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(rename = "idempotentHint", default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(rename = "openWorldHint", default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A tool as `tools/list` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(rename = "outputSchema", default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

impl Tool {
    /// The tool as `revision` describes it: 2025-11-25 knows output schemas with
    /// `"type": "object"` at their root only, so another is left out there (and with it the
    /// promise of structured output: [`CallToolResult::completed`]).
    ///
    /// 2025-11-25 also takes each of a schema's `properties` as an object: a boolean one
    /// (`true`, any value; `false`, none, as JSON Schema 2020-12 allows) is written as the
    /// object that means the same (`{}`, `{"not": {}}`).
    pub fn for_revision(&self, revision: Revision) -> Self {
        let mut tool = self.clone();
        if revision == Revision::R2025_11_25 {
            if !tool.output_schema.as_ref().is_some_and(is_object_schema) {
                tool.output_schema = None;
            }
            objects_for_boolean_properties(&mut tool.input_schema);
            if let Some(schema) = &mut tool.output_schema {
                objects_for_boolean_properties(schema);
            }
        }
        tool
    }
}

/// Each boolean schema among `schema`'s `properties` as the object schema that means the same.
fn objects_for_boolean_properties(schema: &mut Value) {
    let Some(Value::Object(properties)) = schema.get_mut("properties") else { return };
    for property in properties.values_mut() {
        if let Value::Bool(any) = property {
            *property = if *any { serde_json::json!({}) } else { serde_json::json!({"not": {}}) };
        }
    }
}

/// Whether a schema describes an object at its root.
fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// One page of `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListToolsResult {
    pub tools: Vec<Tool>,
    #[serde(rename = "nextCursor", default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: Completion,
}

/// A resource's contents embedded in a result: text or binary (base64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResourceContents {
    Text {
        uri: String,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        text: String,
    },
    Blob {
        uri: String,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Base64.
        blob: String,
    },
}

/// One block of a tool's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ContentBlock {
    #[serde(rename = "text")]
    Text { text: String },
    #[serde(rename = "image")]
    Image {
        /// Base64.
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    #[serde(rename = "audio")]
    Audio {
        /// Base64.
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    #[serde(rename = "resource_link")]
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    #[serde(rename = "resource")]
    Resource { resource: ResourceContents },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }
}

/// A `tools/call` result: what the tool returned, or a tool execution error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallToolResult {
    pub content: Vec<ContentBlock>,
    /// Any JSON value in 2026-07-28, `null` included (`Some(Value::Null)`, read back so).
    #[serde(
        rename = "structuredContent",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    pub structured_content: Option<Value>,
    #[serde(rename = "isError", default, skip_serializing_if = "is_false")]
    pub is_error: bool,
    #[serde(flatten)]
    pub completion: Completion,
}

impl CallToolResult {
    /// A tool execution error: `message` for the model to read.
    pub fn error(message: impl Into<String>, revision: Revision) -> Self {
        Self {
            content: vec![ContentBlock::text(message)],
            structured_content: None,
            is_error: true,
            completion: Completion::new(revision),
        }
    }

    /// A tool's result for `revision`: in 2025-11-25 `structuredContent` is an object, and
    /// other structured output is left to the result's content (a tool's text block
    /// carries it as JSON, as MCP asks; its `outputSchema` is left out there too).
    pub fn completed(
        mut content: Vec<ContentBlock>,
        structured: Option<Value>,
        is_error: bool,
        revision: Revision,
    ) -> Self {
        let (structured_content, left_out) = match structured {
            Some(value) if revision == Revision::R2025_11_25 && !value.is_object() => (None, Some(value)),
            structured => (structured, None),
        };
        // A result with no text of its own carries what was left out as its JSON text.
        if let Some(value) = left_out
            && !content.iter().any(|block| matches!(block, ContentBlock::Text { .. }))
        {
            content.push(ContentBlock::text(value.to_string()));
        }
        Self { content, structured_content, is_error, completion: Completion::new(revision) }
    }
}

/// A field that is present reads as `Some`, `null` included (serde's default reads `null`
/// as absent).
fn present_value<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Every result the server answers a request with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ServerResult {
    Initialize(InitializeResult),
    Discover(DiscoverResult),
    ListTools(ListToolsResult),
    CallTool(CallToolResult),
    Empty(EmptyResult),
    /// Resources, prompts and completions (`protocol/features.rs`).
    Feature(super::features::FeatureResult),
    /// `tools/call` or `prompts/get` asking the client for input first (2026-07-28).
    InputRequired(InputRequiredResult),
}

/// 2026-07-28 `InputRequiredResult`: the client is to answer `inputRequests` and retry the
/// request with `inputResponses` and `requestState` (MRTR). Never cacheable: no hints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequiredResult {
    #[serde(rename = "resultType")]
    pub result_type: ResultType,
    #[serde(rename = "inputRequests", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_requests: BTreeMap<String, InputRequestMessage>,
    #[serde(rename = "requestState", default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<ResultMeta>,
}

impl InputRequiredResult {
    pub fn new(input_requests: BTreeMap<String, InputRequestMessage>, request_state: Option<String>) -> Self {
        Self {
            result_type: ResultType::InputRequired,
            input_requests,
            request_state,
            meta: Some(ResultMeta { server_info: Implementation::CORDON, subscription_id: None }),
        }
    }
}

/// One request of `inputRequests`: `elicitation/create`, `sampling/createMessage` or
/// `roots/list`, with its params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequestMessage {
    pub method: Cow<'static, str>,
    pub params: Value,
}

macro_rules! server_result_from {
    ($($variant:ident($result:ty)),*) => {$(
        impl From<$result> for ServerResult {
            fn from(result: $result) -> Self {
                Self::$variant(result)
            }
        }
    )*};
}
server_result_from!(
    Initialize(InitializeResult),
    Discover(DiscoverResult),
    ListTools(ListToolsResult),
    CallTool(CallToolResult),
    Empty(EmptyResult),
    Feature(super::features::FeatureResult),
    InputRequired(InputRequiredResult)
);

/// `_meta` tagging a message with the listen stream it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionMeta {
    #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
    pub subscription_id: RequestId,
}

/// `notifications/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressParams {
    #[serde(rename = "progressToken")]
    pub progress_token: RequestId,
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A log message's severity (RFC 5424's, least severe first), in both revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LoggingLevel {
    pub const ALL: [LoggingLevel; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    /// The level named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.as_str() == name)
    }
}

/// `notifications/message`: one line of a tool's log, on its call's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggingMessageParams {
    pub level: LoggingLevel,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    pub data: Value,
}

/// The notifications a listen stream carries (of those this server sends).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubscriptionFilter {
    #[serde(rename = "toolsListChanged", default, skip_serializing_if = "is_false")]
    pub tools_list_changed: bool,
    #[serde(rename = "promptsListChanged", default, skip_serializing_if = "is_false")]
    pub prompts_list_changed: bool,
    #[serde(rename = "resourcesListChanged", default, skip_serializing_if = "is_false")]
    pub resources_list_changed: bool,
}

/// The lists whose changes clients hear of (`notifications/<list>/list_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
    /// Resources and resource templates.
    Resources,
}

impl ListKind {
    pub const ALL: [ListKind; 3] = [Self::Tools, Self::Prompts, Self::Resources];

    /// Whether `filter` asks for this list's changes.
    pub fn wanted_by(self, filter: &SubscriptionFilter) -> bool {
        match self {
            Self::Tools => filter.tools_list_changed,
            Self::Prompts => filter.prompts_list_changed,
            Self::Resources => filter.resources_list_changed,
        }
    }
}

/// `notifications/subscriptions/acknowledged`: what a listen stream will carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcknowledgedParams {
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta,
    pub notifications: SubscriptionFilter,
}

/// The params of a list-changed notification on a listen stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListChangedParams {
    #[serde(rename = "_meta")]
    pub meta: SubscriptionMeta,
}

/// `notifications/cancelled` from the server: it tears down a listen stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelledParams {
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<SubscriptionMeta>,
    #[serde(rename = "requestId")]
    pub request_id: RequestId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Every notification the server sends.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotification {
    Progress(ProgressParams),
    /// A list changed: on a listen stream (2026-07-28), or on its own without params
    /// (2025-11-25).
    ListChanged(ListKind, Option<ListChangedParams>),
    SubscriptionsAcknowledged(AcknowledgedParams),
    Cancelled(CancelledParams),
    /// A tool's log line (`notifications/message`).
    Message(LoggingMessageParams),
    /// A resource the client subscribed to changed (2025-11-25).
    ResourceUpdated(ResourceUpdatedParams),
}

/// `notifications/resources/updated`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUpdatedParams {
    pub uri: String,
}

impl ServerNotification {
    pub fn method(&self) -> &'static str {
        match self {
            Self::Progress(_) => "notifications/progress",
            Self::ListChanged(ListKind::Tools, _) => "notifications/tools/list_changed",
            Self::ListChanged(ListKind::Prompts, _) => "notifications/prompts/list_changed",
            Self::ListChanged(ListKind::Resources, _) => "notifications/resources/list_changed",
            Self::SubscriptionsAcknowledged(_) => "notifications/subscriptions/acknowledged",
            Self::Cancelled(_) => "notifications/cancelled",
            Self::Message(_) => "notifications/message",
            Self::ResourceUpdated(_) => "notifications/resources/updated",
        }
    }
}

/// The `data` of an error the server answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorData {
    /// `-32022`: the versions this server speaks, and the one asked for.
    UnsupportedVersion { supported: Vec<Cow<'static, str>>, requested: String },
    /// `-32021`: the client capabilities a tool needs that the request did not declare.
    MissingCapabilities {
        /// Each capability, with the sub-capabilities within it that are needed
        /// (`{"sampling": {"tools": {}}}`), or none (`{"roots": {}}`).
        #[serde(rename = "requiredCapabilities")]
        required_capabilities: BTreeMap<String, BTreeMap<String, Empty>>,
    },
    /// The server is busy or the client over its rate: when to try again.
    RetryAfter {
        #[serde(rename = "retryAfterMs", default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        #[serde(rename = "retryAfterSeconds")]
        retry_after_seconds: u64,
    },
    /// `-32602` "Resource not found" (SEP-2164): the URI asked for.
    ResourceNotFound { uri: String },
}
