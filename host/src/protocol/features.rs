//! MCP shapes of resources, prompts and completions: the parameters the server reads and
//! the results it writes for `resources/list`, `resources/templates/list`,
//! `resources/read`, `prompts/list`, `prompts/get` and `completion/complete`, typed
//! after the official schema. The same shapes serve both revisions: a 2025-11-25 client
//! gets them without what only 2026-07-28 defines (`mcp::legacy_result`). Pure data:
//! nothing here knows the runtime.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::jsonrpc::RpcError;
use super::mcp;

/// Items per page of each list.
pub const PAGE_SIZE: usize = 100;

/// How long clients may cache the lists: they change only at a reload.
const LIST_TTL: Duration = Duration::from_secs(300);

/// `cacheScope`: `private` when the answer depends on who asks (a tenant's view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn of(private: bool) -> Self {
        if private { Self::Private } else { Self::Public }
    }
}

fn is_false(flag: &bool) -> bool {
    !flag
}

/// `Resource`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub uri: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// `ResourceTemplate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplate {
    pub uri_template: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// `TextResourceContents` or `BlobResourceContents` (`blob` is base64).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
pub enum ResourceContents {
    Text {
        uri: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        text: String,
    },
    Blob {
        uri: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        blob: String,
    },
}

/// `PromptArgument`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptArgument {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub required: bool,
}

/// `Prompt`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prompt {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgument>,
}

/// `Role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// `ContentBlock`: what a prompt message holds (media `data` is base64).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        data: String,
        mime_type: String,
    },
    Audio {
        data: String,
        mime_type: String,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    Resource {
        resource: ResourceContents,
    },
}

/// `PromptMessage`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    pub role: Role,
    pub content: ContentBlock,
}

/// One page of `resources/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourcesResult<'a> {
    pub resources: &'a [Resource],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub ttl_ms: u64,
    pub cache_scope: CacheScope,
}

/// One page of `resources/templates/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourceTemplatesResult<'a> {
    pub resource_templates: &'a [ResourceTemplate],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub ttl_ms: u64,
    pub cache_scope: CacheScope,
}

/// One page of `prompts/list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPromptsResult<'a> {
    pub prompts: &'a [Prompt],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub ttl_ms: u64,
    pub cache_scope: CacheScope,
}

/// `ReadResourceResult`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResourceResult {
    pub contents: Vec<ResourceContents>,
    pub ttl_ms: u64,
    pub cache_scope: CacheScope,
}

/// `GetPromptResult`.
#[derive(Debug, Serialize)]
pub struct GetPromptResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
}

/// `CompleteResult.completion`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    pub values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u32>,
    #[serde(skip_serializing_if = "is_false")]
    pub has_more: bool,
}

/// `CompleteResult`.
#[derive(Debug, Serialize)]
pub struct CompleteResult {
    pub completion: Completion,
}

/// `ReadResourceRequest.params`.
#[derive(Debug, Deserialize)]
pub struct ReadResourceParams {
    pub uri: String,
}

/// `GetPromptRequest.params`: argument values are strings.
#[derive(Debug, Deserialize)]
pub struct GetPromptParams {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<BTreeMap<String, String>>,
}

/// `CompleteRequest.params.ref`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum Reference {
    #[serde(rename = "ref/prompt")]
    Prompt { name: String },
    #[serde(rename = "ref/resource")]
    Resource { uri: String },
}

/// `CompleteRequest.params.argument`.
#[derive(Debug, Deserialize)]
pub struct CompleteArgument {
    pub name: String,
    pub value: String,
}

/// `CompleteRequest.params.context`.
#[derive(Debug, Default, Deserialize)]
pub struct CompleteContext {
    #[serde(default)]
    pub arguments: Option<BTreeMap<String, String>>,
}

/// `CompleteRequest.params`.
#[derive(Debug, Deserialize)]
pub struct CompleteParams {
    #[serde(rename = "ref")]
    pub reference: Reference,
    pub argument: CompleteArgument,
    #[serde(default)]
    pub context: Option<CompleteContext>,
}

/// Read a request's `params` as `T`; `-32602` naming what does not fit.
pub fn params<T: serde::de::DeserializeOwned>(method: &str, params: Option<&Value>) -> Result<T, RpcError> {
    let mut params = params.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    if let Value::Object(map) = &mut params {
        map.remove("_meta");
    }
    serde_json::from_value(params)
        .map_err(|error| RpcError::invalid_params(format!("Invalid params for {method}: {error}")))
}

/// The page of `items` at `cursor` (the page's offset, as text; none or empty: the first)
/// and the cursor of the next page, if any; `-32602` for a cursor this server never gave.
pub fn page<'a, T>(items: &'a [T], cursor: Option<&Value>) -> Result<(&'a [T], Option<String>), RpcError> {
    let start = match cursor {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) if cursor.is_empty() => 0,
        Some(Value::String(cursor)) => cursor
            .parse::<usize>()
            .ok()
            .filter(|start| *start <= items.len())
            .ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?,
        Some(_) => return Err(RpcError::invalid_params("Invalid cursor: it must be a string")),
    };
    let end = (start + PAGE_SIZE).min(items.len());
    Ok((&items[start..end], (end < items.len()).then(|| end.to_string())))
}

/// The list TTL, in milliseconds.
pub fn list_ttl_ms() -> u64 {
    LIST_TTL.as_millis() as u64
}

/// `result` as a complete 2026-07-28 result (`resultType`, the server's identity).
pub fn complete<T: Serialize>(result: &T) -> Value {
    match serde_json::to_value(result).expect("the result types always serialize") {
        Value::Object(map) => mcp::complete(map),
        _ => unreachable!("every result type is a struct"),
    }
}

/// "Resource not found" (SEP-2164): `-32602`, with the URI in `data`.
pub fn resource_not_found(uri: &str) -> RpcError {
    let mut data = Map::new();
    data.insert("uri".into(), Value::String(uri.to_owned()));
    RpcError::invalid_params("Resource not found").with_data(Value::Object(data))
}

/// What the server offers besides tools, as `ServerCapabilities` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    pub resources: bool,
    pub prompts: bool,
    pub completions: bool,
}

/// Add the capabilities for what is `offered` to a `server/discover` or `initialize`
/// result (each an empty object: no subscriptions, no list-change notifications).
pub fn advertise(result: &mut Value, offered: Offered) {
    let Some(Value::Object(capabilities)) = result.get_mut("capabilities") else { return };
    let flags = [
        ("resources", offered.resources),
        ("prompts", offered.prompts),
        ("completions", offered.completions),
    ];
    for (name, offered) in flags {
        if offered {
            capabilities.insert(name.into(), Value::Object(Map::new()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pages_follow_an_opaque_cursor() {
        let items: Vec<u32> = (0..250).collect();
        let (first, next) = page(&items, None).unwrap();
        assert_eq!((first.len(), next.as_deref()), (PAGE_SIZE, Some("100")));
        let (last, none) = page(&items, Some(&json!("200"))).unwrap();
        assert_eq!((last.len(), none), (50, None));
        assert_eq!(page(&items, Some(&json!(""))).unwrap().0[0], 0);
        assert_eq!(page(&items, Some(&json!("x"))).unwrap_err().code, -32602);
        assert_eq!(page(&items, Some(&json!(7))).unwrap_err().code, -32602);
    }

    #[test]
    fn contents_and_blocks_take_the_schema_shapes() {
        let text = ResourceContents::Text { uri: "a://b".into(), mime_type: None, text: "hi".into() };
        assert_eq!(serde_json::to_value(&text).unwrap(), json!({"uri": "a://b", "text": "hi"}));
        let image = ContentBlock::Image { data: "AAA=".into(), mime_type: "image/png".into() };
        assert_eq!(
            serde_json::to_value(&image).unwrap(),
            json!({"type": "image", "data": "AAA=", "mimeType": "image/png"})
        );
        let reference: CompleteParams = params(
            "completion/complete",
            Some(&json!({"_meta": {}, "ref": {"type": "ref/resource", "uri": "x://{id}"}, "argument": {"name": "id", "value": "1"}})),
        )
        .unwrap();
        assert!(matches!(reference.reference, Reference::Resource { .. }));
        let bad =
            params::<GetPromptParams>("prompts/get", Some(&json!({"name": "p", "arguments": {"a": 1}})));
        assert_eq!(bad.unwrap_err().code, -32602);
    }
}
