//! # Resources, prompts and completions from components (`cordon:tool@0.2.0`)
//!
//! What a component offers besides tools ([`Offered`]: its resources, resource templates
//! and prompts) is read once at load, in the same bounded instance that lists its tools,
//! and checked here. Every read of a resource, get of a prompt and completion then runs as
//! a tool call does: a [`super::Call`] made by [`super::Runtime::feature_in`] and run by
//! `call.rs`, the one owner of the stop sequence (fresh instance, the component's limits,
//! grace, hard stop, cleanup). This module only says what the guest is asked
//! ([`FeatureRequest`]), routes a request to the component that serves it, and says what
//! the guest answered ([`FeatureAnswer`]).

use std::sync::Arc;

use super::CallError;
use super::bindings::v2::{self, Catalog};
use super::component::{GuestInstance, LoadError};
use super::guest::GuestState;
use super::input::{InputRound, Reply};

pub use super::bindings::v2::{
    Body, Completion, Contents, PromptArgument, PromptInfo, PromptMessage, PromptResult, ReadResult,
    Reference, ResourceInfo, ResourceTemplate, Role,
};

/// The most completion values a client is sent (the spec's limit).
pub const MAX_COMPLETION_VALUES: usize = 100;

/// What a component offers besides tools; empty before `cordon:tool@0.2.0`.
#[derive(Default)]
pub(crate) struct Offered {
    pub(crate) resources: Vec<ResourceInfo>,
    pub(crate) templates: Vec<Template>,
    pub(crate) prompts: Vec<PromptInfo>,
    /// Whether the component exports `completions` (every 0.2.0 component does).
    pub(crate) completions: bool,
    /// The methods as each request's event names them in place of a tool: one allocation
    /// per component, so that observers that key by identity (the metrics) see one
    /// series each.
    pub(crate) methods: Methods,
}

/// [`FeatureRequest::method`]'s names, shared by every request of one component.
pub(crate) struct Methods {
    read: Arc<str>,
    get: Arc<str>,
    complete: Arc<str>,
}

impl Default for Methods {
    fn default() -> Self {
        Self { read: Arc::from(READ_RESOURCE), get: Arc::from(GET_PROMPT), complete: Arc::from(COMPLETE) }
    }
}

impl Methods {
    pub(crate) fn of(&self, request: &FeatureRequest) -> &Arc<str> {
        match request {
            FeatureRequest::ReadResource { .. } => &self.read,
            FeatureRequest::GetPrompt { .. } => &self.get,
            FeatureRequest::Complete { .. } => &self.complete,
        }
    }
}

const READ_RESOURCE: &str = "resources/read";
const GET_PROMPT: &str = "prompts/get";
const COMPLETE: &str = "completion/complete";

impl Offered {
    pub(crate) fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty() && self.prompts.is_empty()
    }

    /// The prompt called `name`.
    pub(crate) fn prompt(&self, name: &str) -> Option<&PromptInfo> {
        self.prompts.iter().find(|prompt| prompt.name == name)
    }

    /// Whether `uri` is one of its resources or matches one of its templates.
    pub(crate) fn serves_uri(&self, uri: &str) -> bool {
        self.resources.iter().any(|resource| resource.uri == uri)
            || self.templates.iter().any(|template| template.matches(uri))
    }

    /// The template whose `uri-template` is `uri_template`.
    pub(crate) fn template(&self, uri_template: &str) -> Option<&Template> {
        self.templates.iter().find(|template| template.info.uri_template == uri_template)
    }

    /// Check what the guest listed: every URI, template and prompt name given once, every
    /// template parsed.
    pub(crate) fn checked(
        origin: &str,
        catalog: Catalog,
        prompts: Vec<PromptInfo>,
    ) -> Result<Self, LoadError> {
        let problem = |text: String| LoadError::new(origin, text);
        let max = cordon_rules::MAX_LISTED;
        for (kind, count) in [
            ("resources", catalog.resources.len()),
            ("resource templates", catalog.templates.len()),
            ("prompts", prompts.len()),
        ] {
            if count > max {
                return Err(problem(format!("it lists {count} {kind}; a list holds at most {max}")));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for resource in &catalog.resources {
            if resource.uri.is_empty() || resource.name.is_empty() {
                return Err(problem(format!(
                    "resource {:?} ({:?}) needs a URI and a name",
                    resource.uri, resource.name
                )));
            }
            cordon_rules::check_uri(&resource.uri)
                .map_err(|why| problem(format!("resource {:?}: {why}", resource.uri)))?;
            if !seen.insert(resource.uri.as_str()) {
                return Err(problem(format!("resource {:?} is listed twice", resource.uri)));
            }
        }
        let mut templates = Vec::with_capacity(catalog.templates.len());
        let mut patterns = std::collections::HashSet::new();
        for info in catalog.templates {
            if !patterns.insert(info.uri_template.clone()) {
                return Err(problem(format!("resource template {:?} is listed twice", info.uri_template)));
            }
            templates.push(Template::parse(info).map_err(problem)?);
        }
        let mut names = std::collections::HashSet::new();
        for prompt in &prompts {
            cordon_rules::check_tool_name(&prompt.name)
                .map_err(|why| problem(format!("prompt name {:?}: {why}", prompt.name)))?;
            if !names.insert(prompt.name.as_str()) {
                return Err(problem(format!("prompt {:?} is listed twice", prompt.name)));
            }
            let mut arguments = std::collections::HashSet::new();
            for argument in &prompt.arguments {
                if argument.name.is_empty() || !arguments.insert(argument.name.as_str()) {
                    return Err(problem(format!(
                        "prompt {:?}: argument {:?} is empty or listed twice",
                        prompt.name, argument.name
                    )));
                }
            }
        }
        Ok(Self {
            resources: catalog.resources,
            templates,
            prompts,
            completions: true,
            methods: Methods::default(),
        })
    }
}

/// A resource template, parsed (`cordon_rules::UriTemplate`, which the SDK reads too).
pub struct Template {
    pub info: ResourceTemplate,
    parsed: cordon_rules::UriTemplate,
}

impl Template {
    fn parse(info: ResourceTemplate) -> Result<Self, String> {
        let parsed = cordon_rules::UriTemplate::parse(&info.uri_template)
            .and_then(|parsed| cordon_rules::check_uri_template(&info.uri_template).map(|()| parsed))
            .map_err(|why| format!("resource template {:?}: {why}", info.uri_template))?;
        if info.name.is_empty() {
            return Err(format!("resource template {:?} needs a name", info.uri_template));
        }
        Ok(Self { info, parsed })
    }

    /// The template's variables, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parsed.variables()
    }

    /// Whether `uri` is one of the template's URIs.
    pub fn matches(&self, uri: &str) -> bool {
        self.parsed.match_uri(uri).is_some()
    }

    /// How many `/`-separated segments each of its URIs has.
    pub(crate) fn segments(&self) -> usize {
        self.parsed.segments()
    }

    /// Whether a URI could match both it and `other` ([`cordon_rules::UriTemplate::overlap`]).
    pub(crate) fn overlap(&self, other: &Self, budget: &mut u64) -> cordon_rules::Overlap {
        self.parsed.overlap(&other.parsed, budget)
    }
}

/// What a client asks a component for, besides a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureRequest {
    /// `resources/read`.
    ReadResource { uri: String },
    /// `prompts/get`, with its arguments by name.
    GetPrompt { name: String, arguments: Vec<(String, String)> },
    /// `completion/complete`: suggestions for `argument` of `reference`, given `value` so
    /// far and the arguments already chosen.
    Complete { reference: Reference, argument: String, value: String, context: Vec<(String, String)> },
}

impl FeatureRequest {
    /// The MCP method, which a cleanup is told in place of a tool name.
    pub fn method(&self) -> &'static str {
        match self {
            Self::ReadResource { .. } => READ_RESOURCE,
            Self::GetPrompt { .. } => GET_PROMPT,
            Self::Complete { .. } => COMPLETE,
        }
    }

    /// The request's parameters as JSON text, for the cleanup (its `arguments`).
    pub(crate) fn parameters(&self) -> String {
        let pairs = |pairs: &[(String, String)]| {
            pairs
                .iter()
                .map(|(name, value)| (name.clone(), serde_json::Value::from(value.as_str())))
                .collect()
        };
        let value = match self {
            Self::ReadResource { uri } => serde_json::json!({ "uri": uri }),
            Self::GetPrompt { name, arguments } => {
                serde_json::json!({ "name": name, "arguments": serde_json::Value::Object(pairs(arguments)) })
            }
            Self::Complete { reference, argument, value, context } => {
                let reference = match reference {
                    Reference::Prompt(name) => serde_json::json!({ "type": "ref/prompt", "name": name }),
                    Reference::ResourceTemplate(uri) => {
                        serde_json::json!({ "type": "ref/resource", "uri": uri })
                    }
                };
                serde_json::json!({
                    "ref": reference,
                    "argument": { "name": argument, "value": value },
                    "context": { "arguments": serde_json::Value::Object(pairs(context)) },
                })
            }
        };
        value.to_string()
    }
}

/// What the guest answered.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureAnswer {
    /// A resource's contents.
    Read(ReadResult),
    /// The guest has no resource at that URI (its `read-error::not-found`).
    NotFound,
    /// A rendered prompt.
    Prompt(PromptResult),
    /// Suggestions, at most [`MAX_COMPLETION_VALUES`].
    Completion(Completion),
}

/// What is wrong with the first URI in `content` that is no URI (a resource link's, an
/// embedded resource's), if one is: the client would refuse the whole message.
pub(crate) fn uri_problem<'c>(content: impl IntoIterator<Item = &'c super::Content>) -> Option<String> {
    content.into_iter().find_map(|item| {
        let (what, uri) = match item {
            super::Content::ResourceLink(link) => ("a resource link", &link.uri),
            super::Content::EmbeddedResource(resource) => ("an embedded resource", &resource.uri),
            _ => return None,
        };
        cordon_rules::check_uri(uri).err().map(|why| format!("{what}'s URI {uri:?} is not a URI: {why}"))
    })
}

impl FeatureAnswer {
    /// What is wrong with the first URI it holds that is no URI, if one is.
    pub(crate) fn uri_problem(&self) -> Option<String> {
        match self {
            Self::Read(result) => result.contents.iter().find_map(|contents| {
                cordon_rules::check_uri(&contents.uri)
                    .err()
                    .map(|why| format!("the contents' URI {:?} is not a URI: {why}", contents.uri))
            }),
            Self::Prompt(result) => uri_problem(result.messages.iter().map(|message| &message.content)),
            Self::NotFound | Self::Completion(_) => None,
        }
    }

    /// The bytes it takes in the answer, near enough for the result size limit.
    pub(crate) fn size(&self) -> usize {
        const ITEM: usize = 32;
        let len = |text: &Option<String>| text.as_ref().map_or(0, String::len);
        match self {
            Self::Read(result) => result
                .contents
                .iter()
                .map(|contents| {
                    ITEM + contents.uri.len()
                        + len(&contents.mime_type)
                        + match &contents.body {
                            Body::Text(text) => text.len(),
                            Body::Blob(bytes) => bytes.len(),
                        }
                })
                .sum(),
            Self::NotFound => 0,
            Self::Prompt(result) => {
                len(&result.description)
                    + result
                        .messages
                        .iter()
                        .map(|message| ITEM + super::call::content_size(&message.content))
                        .sum::<usize>()
            }
            Self::Completion(completion) => completion.values.iter().map(|value| ITEM + value.len()).sum(),
        }
    }
}

/// Why a request for a resource, prompt or completion could not start.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    /// No component offers a resource at this URI, nor a template it matches.
    #[error("Resource not found: {0}")]
    ResourceNotFound(String),
    #[error("Unknown prompt: {0}")]
    UnknownPrompt(String),
    #[error("Invalid arguments for prompt {prompt}: {problem}")]
    InvalidArguments { prompt: String, problem: String },
    /// A completion for a prompt or template no component offers, or an argument it does
    /// not have.
    #[error("Invalid completion reference: {0}")]
    UnknownReference(String),
    /// No slot (busy, shutting down).
    #[error(transparent)]
    Refused(CallError),
}

impl GuestInstance {
    /// Ask the guest for `request` in round `input` (only a prompt's get may ask for
    /// input); a read's not-found is an answer, its failure an `Err`.
    pub(crate) async fn serve_feature(
        &self,
        store: &mut wasmtime::Store<GuestState>,
        request: &FeatureRequest,
        input: &InputRound,
    ) -> wasmtime::Result<Result<Reply<FeatureAnswer>, String>> {
        let GuestInstance::CordonV2(plugin) = self else {
            wasmtime::bail!("the component exports no {}", request.method());
        };
        Ok(match request {
            FeatureRequest::ReadResource { uri } => {
                match plugin.cordon_tool_resources().call_read(store, uri).await? {
                    Ok(result) => Ok(Reply::Done(FeatureAnswer::Read(result))),
                    Err(v2::ReadError::NotFound) => Ok(Reply::Done(FeatureAnswer::NotFound)),
                    Err(v2::ReadError::Failed(message)) => Err(message),
                }
            }
            FeatureRequest::GetPrompt { name, arguments } => {
                plugin.cordon_tool_prompts().call_get(store, name, arguments, &input.to_wit()).await?.map(
                    |reply| match reply {
                        v2::PromptReply::Done(result) => Reply::Done(FeatureAnswer::Prompt(result)),
                        v2::PromptReply::NeedsInput(input) => Reply::NeedsInput(input),
                    },
                )
            }
            FeatureRequest::Complete { reference, argument, value, context } => plugin
                .cordon_tool_completions()
                .call_complete(store, reference, argument, value, context)
                .await?
                .map(|mut completion| {
                    if completion.values.len() > MAX_COMPLETION_VALUES {
                        completion.values.truncate(MAX_COMPLETION_VALUES);
                        completion.has_more = true;
                    }
                    Reply::Done(FeatureAnswer::Completion(completion))
                }),
        })
    }

    /// A 0.2.0 guest's resources and prompts, listed in the instance that listed its tools.
    pub(crate) async fn list_features(
        &self,
        store: &mut wasmtime::Store<GuestState>,
    ) -> wasmtime::Result<Option<(Catalog, Vec<PromptInfo>)>> {
        let GuestInstance::CordonV2(plugin) = self else { return Ok(None) };
        let catalog = plugin.cordon_tool_resources().call_list(&mut *store).await?;
        let prompts = plugin.cordon_tool_prompts().call_list(store).await?;
        Ok(Some((catalog, prompts)))
    }
}

/// Check `arguments` against `prompt`'s: every required one given, none it does not declare.
pub(crate) fn check_prompt_arguments(
    prompt: &PromptInfo,
    arguments: &[(String, String)],
) -> Result<(), String> {
    if let Some((name, _)) =
        arguments.iter().find(|(name, _)| !prompt.arguments.iter().any(|a| &a.name == name))
    {
        let declared: Vec<&str> = prompt.arguments.iter().map(|argument| argument.name.as_str()).collect();
        return Err(format!(
            "it takes no argument {name:?} (it takes: {})",
            if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
        ));
    }
    let missing: Vec<&str> = prompt
        .arguments
        .iter()
        .filter(|argument| argument.required && !arguments.iter().any(|(name, _)| name == &argument.name))
        .map(|argument| argument.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing required argument(s): {}", missing.join(", ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(pattern: String) -> ResourceTemplate {
        ResourceTemplate {
            uri_template: pattern,
            name: "t".into(),
            title: None,
            description: None,
            mime_type: None,
        }
    }

    /// Every list is checked at each load and relist: its size is bounded, and a duplicate
    /// is found without comparing every pair.
    #[test]
    fn lists_are_bounded_and_duplicates_found() {
        let templates =
            |count: usize| (0..count).map(|n| template(format!("notes://{n}/{{id}}"))).collect::<Vec<_>>();
        let offered =
            |templates| Offered::checked("t.wasm", Catalog { resources: vec![], templates }, vec![]);
        let max = cordon_rules::MAX_LISTED;
        assert_eq!(offered(templates(max)).unwrap().templates.len(), max);
        let error = offered(templates(max + 1)).err().unwrap();
        assert!(
            error.problem.contains("it lists 4097 resource templates; a list holds at most 4096"),
            "{error}"
        );
        let mut twice = templates(3);
        twice.push(template("notes://1/{id}".into()));
        let error = offered(twice).err().unwrap();
        assert!(error.problem.contains("listed twice"), "{error}");
    }
}
