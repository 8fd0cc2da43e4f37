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

/// The page of `items` at `cursor` and the cursor of the next page, if any; `-32602` for
/// a cursor this server never gave, or one whose page no longer starts where it did.
///
/// A cursor names the last item of the page before it (its index, and a hash of its `key`:
/// the tool's or prompt's name, the resource's URI), not only an offset, so that a list
/// changed between pages (a reload, a relist) neither skips nor repeats an item after it:
/// the next page starts after that item wherever it now is (the one nearest its old index,
/// should two keys share a hash: names come from guests), and if it is gone the client is
/// told to list again (the spec: cursors SHOULD be stable). Replicas serving the same
/// config list in the same order, so a cursor from one is good on another.
pub fn page<'a, T>(
    items: &'a [T],
    key: impl Fn(&T) -> &str,
    cursor: Option<&Value>,
) -> Result<(&'a [T], Option<String>), RpcError> {
    let start = match cursor {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) if cursor.is_empty() => 0,
        Some(Value::String(cursor)) => {
            let (index, hash) = cursor
                .strip_prefix(CURSOR_PREFIX)
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(index, hash)| {
                    Some((index.parse::<usize>().ok()?, u64::from_str_radix(hash, 16).ok()?))
                })
                .ok_or_else(|| RpcError::invalid_params("Invalid cursor"))?;
            let at = match items.get(index) {
                Some(item) if key_hash(key(item)) == hash => index,
                _ => (0..items.len())
                    .filter(|&at| key_hash(key(&items[at])) == hash)
                    .min_by_key(|&at| at.abs_diff(index))
                    .ok_or_else(|| {
                        RpcError::invalid_params(
                            "Invalid cursor: the list changed since it was given; list again from the start",
                        )
                    })?,
            };
            at + 1
        }
        Some(_) => return Err(RpcError::invalid_params("Invalid cursor: it must be a string")),
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next = (end < items.len())
        .then(|| format!("{CURSOR_PREFIX}{}-{:016x}", end - 1, key_hash(key(&items[end - 1]))));
    Ok((&items[start..end], next))
}

/// What every cursor this server gives starts with.
const CURSOR_PREFIX: &str = "after-";

/// FNV-1a of `key`: the same in every process and version of the server (a cursor may be
/// used on another replica), and cheap enough to hash a whole list per page.
fn key_hash(key: &str) -> u64 {
    key.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// "Resource not found", with the URI in `data`: `-32602` since 2026-07-28 (SEP-2164),
/// `-32002` before (2025-11-25's resources page).
pub fn resource_not_found(uri: &str, revision: Revision) -> RpcError {
    let error = match revision {
        Revision::R2025_11_25 => RpcError::new(RESOURCE_NOT_FOUND_2025, "Resource not found"),
        Revision::R2026_07_28 => RpcError::invalid_params("Resource not found"),
    };
    error.with_data(ErrorData::ResourceNotFound { uri: uri.to_owned() })
}

/// The code 2025-11-25 gives a resource that does not exist.
const RESOURCE_NOT_FOUND_2025: i64 = -32002;

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

    fn key(item: &String) -> &str {
        item
    }

    #[test]
    fn pages_follow_an_opaque_cursor() {
        let items: Vec<String> = (0..250).map(|n| format!("item-{n}")).collect();
        let (first, next) = page(&items, key, None).unwrap();
        assert_eq!(first.len(), PAGE_SIZE);
        let (second, next) = page(&items, key, Some(&json!(next.unwrap()))).unwrap();
        assert_eq!(second[0], "item-100");
        let (last, none) = page(&items, key, Some(&json!(next.unwrap()))).unwrap();
        assert_eq!((last.len(), none), (50, None));
        assert_eq!(page(&items, key, Some(&json!(""))).unwrap().0[0], "item-0");
        for bad in
            [json!("x"), json!("100"), json!("after-zz"), json!("after-99"), json!("after-x-1"), json!(7)]
        {
            assert_eq!(page(&items, key, Some(&bad)).unwrap_err().code, -32602, "{bad}");
        }
    }

    /// A list that changes between pages: items removed or added before the page's start
    /// neither skip nor repeat one after it (an offset did: ten removed skipped ten); the
    /// item a cursor names gone, the client is told to list again.
    #[test]
    fn a_cursor_holds_its_place_in_a_list_that_changed() {
        let items: Vec<String> = (0..250).map(|n| format!("item-{n}")).collect();
        let (_, next) = page(&items, key, None).unwrap();
        let cursor = json!(next.unwrap());
        let fewer: Vec<String> = items.iter().skip(10).cloned().collect();
        assert_eq!(page(&fewer, key, Some(&cursor)).unwrap().0[0], "item-100");
        let more: Vec<String> = ["new".to_owned()].into_iter().chain(items.iter().cloned()).collect();
        assert_eq!(page(&more, key, Some(&cursor)).unwrap().0[0], "item-100");
        // Two keys of one hash (a guest may pick its names to collide): the cursor's own
        // index settles it, and the pages neither repeat nor loop.
        let colliding: Vec<String> =
            (0..250).map(|n| if n % 100 == 99 { "same".to_owned() } else { format!("item-{n}") }).collect();
        let (_, next) = page(&colliding, key, None).unwrap();
        let (second, next) = page(&colliding, key, Some(&json!(next.unwrap()))).unwrap();
        assert_eq!(second[0], "item-100");
        let (last, none) = page(&colliding, key, Some(&json!(next.unwrap()))).unwrap();
        assert_eq!((last[0].as_str(), last.len(), none), ("item-200", 50, None));
        let without_it: Vec<String> = items.iter().filter(|item| *item != "item-99").cloned().collect();
        let error = page(&without_it, key, Some(&cursor)).unwrap_err();
        assert_eq!(error.code, -32602);
        assert!(error.message.contains("list again"), "{}", error.message);
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
