//! MCP shapes of resources, prompts and completions: the parameters the server reads and
//! the results it writes for `resources/list`, `resources/templates/list`,
//! `resources/read`, `prompts/list`, `prompts/get` and `completion/complete`, typed
//! after the official schema. Each result is built for a [`Revision`] (`types.rs`): a
//! 2025-11-25 client gets it without what only 2026-07-28 defines (`resultType`, caching
//! hints, the server in `_meta`). Pure data: nothing here knows the runtime.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::jsonrpc::RpcError;
pub use super::types::{CacheScope, ContentBlock, ResourceContents};
use super::types::{
    Caching, Completion as ResultCompletion, Empty, ErrorData, ListCapability, ResourcesCapability, Revision,
    ServerCapabilities,
};

/// Items per page of each list.
pub const PAGE_SIZE: usize = 100;

/// How long clients may cache the lists: they change only at a reload.
const LIST_TTL: Duration = Duration::from_secs(300);

/// `cacheScope` for a list or read: `private` when it depends on who asks (a tenant's view).
pub fn cache_scope(private: bool) -> CacheScope {
    if private { CacheScope::Private } else { CacheScope::Public }
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

/// `PromptMessage`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    pub role: Role,
    pub content: ContentBlock,
}

/// One page of `resources/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourcesResult {
    pub resources: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: ResultCompletion,
}

/// One page of `resources/templates/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourceTemplatesResult {
    pub resource_templates: Vec<ResourceTemplate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: ResultCompletion,
}

/// One page of `prompts/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPromptsResult {
    pub prompts: Vec<Prompt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: ResultCompletion,
}

/// `ReadResourceResult`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadResourceResult {
    pub contents: Vec<ResourceContents>,
    #[serde(flatten)]
    pub caching: Caching,
    #[serde(flatten)]
    pub completion: ResultCompletion,
}

/// `GetPromptResult`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GetPromptResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
    #[serde(flatten)]
    pub completion: ResultCompletion,
}

/// `CompleteResult.completion`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    pub values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u32>,
    #[serde(skip_serializing_if = "is_false")]
    pub has_more: bool,
}

/// `CompleteResult`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompleteResult {
    pub completion: Completion,
    #[serde(flatten)]
    pub result: ResultCompletion,
}

/// Every result of this module, as `types::ServerResult::Feature` carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FeatureResult {
    ListResources(ListResourcesResult),
    ListResourceTemplates(ListResourceTemplatesResult),
    ListPrompts(ListPromptsResult),
    ReadResource(ReadResourceResult),
    GetPrompt(GetPromptResult),
    Complete(CompleteResult),
}

/// A list's caching hints in `revision` (lists change only at a reload).
pub fn list_caching(revision: Revision, private: bool) -> Caching {
    Caching::new(revision, LIST_TTL.as_millis() as u64, cache_scope(private))
}

/// What every result of `revision` carries.
pub fn completion(revision: Revision) -> ResultCompletion {
    ResultCompletion::new(revision)
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

/// "Resource not found" (SEP-2164): `-32602`, with the URI in `data`.
pub fn resource_not_found(uri: &str) -> RpcError {
    RpcError::invalid_params("Resource not found")
        .with_data(ErrorData::ResourceNotFound { uri: uri.to_owned() })
}

/// What the server offers besides tools, as `ServerCapabilities` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    pub resources: bool,
    pub prompts: bool,
    pub completions: bool,
}

/// Add the capabilities for what is `offered`, as `revision` defines them: list changes
/// are sent for prompts and resources as for tools; resource subscriptions in 2025-11-25
/// only (2026-07-28 has none).
pub fn advertise(capabilities: &mut ServerCapabilities, offered: Offered, revision: Revision) {
    let subscribe = revision == Revision::R2025_11_25;
    capabilities.resources =
        offered.resources.then_some(ResourcesCapability { subscribe, list_changed: true });
    capabilities.prompts = offered.prompts.then_some(ListCapability { list_changed: true });
    capabilities.completions = offered.completions.then_some(Empty {});
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
    fn parameters_take_the_schema_shapes() {
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
