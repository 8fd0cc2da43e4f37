//! # Resources, prompts and completions: the requests, routed to components
//!
//! The lists (`resources/list`, `resources/templates/list`, `prompts/list`) are answered
//! inline from the request's snapshot of the components, paged, with caching hints, as a
//! tenant's view sees them. A read, a prompt get and a completion each run in a task as a
//! tool call does: the runtime makes a [`crate::runtime::Call`] of it (fresh instance,
//! limits, stop sequence, cleanup: `runtime/call.rs`), a cancel (`notifications/cancelled`,
//! a closed HTTP stream) stops it and sends nothing, and its answer maps here to the
//! typed MCP result (`protocol/features.rs`) or a JSON-RPC error.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;
use tokio::sync::Notify;

use super::{Charge, Connection, InFlight, Outbox, Reply, spawn_unless_ready};
use crate::protocol::features::{self as wire, FeatureResult};
use crate::protocol::jsonrpc::{self, INTERNAL_ERROR, INVALID_REQUEST, Outgoing, RequestId, RpcError};
use crate::protocol::types::{Caching, Revision};
use crate::runtime::features::{
    Body, Completion, Contents, PromptInfo, PromptResult, Reference, ResourceInfo, ResourceTemplate, Role,
};
use crate::runtime::{
    CallEnded, CallOutcome, Content, FeatureAnswer, FeatureError, FeatureRequest, Outcome, Teardown, Timeout,
    ToolLimits, ToolSet,
};

/// The methods answered here.
pub(super) const METHODS: [&str; 6] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

impl Connection {
    /// What the components this connection sees offer besides tools.
    pub(super) fn offered(&self) -> wire::Offered {
        let (resources, prompts, completions) = self.server.runtime.snapshot().features_for(self.view());
        wire::Offered { resources, prompts, completions }
    }

    /// Answer one of [`METHODS`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route_feature(
        self: &Arc<Self>,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        tools: Option<Arc<ToolSet>>,
        revision: Revision,
        out: &Outbox,
        charge: Charge,
    ) -> Reply {
        let tools = tools.unwrap_or_else(|| self.server.runtime.snapshot());
        // Only what the capabilities advertise is answered: a server whose components offer
        // no prompts does not know `prompts/list`, as a tools-only server would not.
        let (resources, prompts, completions) = tools.features_for(self.view());
        let offered = match method.split('/').next() {
            Some("resources") => resources,
            Some("prompts") => prompts,
            _ => completions,
        };
        if !offered {
            return Reply::Error(RpcError::method_not_found(method));
        }
        let caching = wire::list_caching(revision, self.tenant.is_some());
        let completion = wire::completion(revision);
        let cursor = params.as_ref().and_then(|params| params.get("cursor"));
        let listed = match method {
            "resources/list" => {
                let items: Vec<wire::Resource> = tools.resources_for(self.view()).map(resource).collect();
                wire::page(&items, cursor).map(|(resources, next_cursor)| {
                    FeatureResult::ListResources(wire::ListResourcesResult {
                        resources: resources.to_vec(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            "resources/templates/list" => {
                let items: Vec<wire::ResourceTemplate> =
                    tools.templates_for(self.view()).map(template).collect();
                wire::page(&items, cursor).map(|(templates, next_cursor)| {
                    FeatureResult::ListResourceTemplates(wire::ListResourceTemplatesResult {
                        resource_templates: templates.to_vec(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            "prompts/list" => {
                let items: Vec<wire::Prompt> = tools.prompts_for(self.view()).map(prompt).collect();
                wire::page(&items, cursor).map(|(prompts, next_cursor)| {
                    FeatureResult::ListPrompts(wire::ListPromptsResult {
                        prompts: prompts.to_vec(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            _ => {
                return match request(method, params.as_ref()) {
                    Ok(request) => self.start_feature(id, request, tools, revision, out.clone(), charge),
                    Err(error) => Reply::Error(error),
                };
            }
        };
        match listed {
            Ok(result) => Reply::Result(result.into()),
            Err(error) => Reply::Error(error),
        }
    }

    /// Run `request` in a task, as `start_call` runs a tool call: registered in flight (so
    /// that a cancel reaches it), answered unless cancelled, counted until its answer is out.
    fn start_feature(
        self: &Arc<Self>,
        id: &RequestId,
        request: FeatureRequest,
        tools: Arc<ToolSet>,
        revision: Revision,
        out: Outbox,
        charge: Charge,
    ) -> Reply {
        let cancel_signal = {
            let mut in_flight = self.in_flight.lock().unwrap();
            if in_flight.contains_key(id) {
                return Reply::Error(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: this id is already in use",
                ));
            }
            let entry = InFlight::default();
            let signal = entry.cancel_signal.clone();
            in_flight.insert(id.clone(), entry);
            self.server.calls.fetch_add(1, Ordering::AcqRel);
            signal
        };
        let connection = self.clone();
        let id = id.clone();
        spawn_unless_ready(async move {
            let (answer, teardown) =
                connection.run_feature(&id, &tools, request, revision, &cancel_signal).await;
            let cancelled =
                connection.in_flight.lock().unwrap().remove(&id).is_some_and(|entry| entry.cancelled);
            if let Some(answer) = answer.filter(|_| !cancelled) {
                out.send(answer).await;
            }
            drop(charge);
            drop(teardown);
            connection.server.calls.fetch_sub(1, Ordering::AcqRel);
            connection.server.call_finished.notify_waiters();
        });
        Reply::Later
    }

    /// Run one request to its answer (`None` when the client cancelled it), and the
    /// instance's teardown, to drop once the answer is out.
    async fn run_feature(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        request: FeatureRequest,
        revision: Revision,
        cancel_signal: &Notify,
    ) -> (Option<Outgoing>, Option<Teardown>) {
        let runtime = &self.server.runtime;
        let uri = match &request {
            FeatureRequest::ReadResource { uri } => Some(uri.clone()),
            _ => None,
        };
        let is_prompt = matches!(request, FeatureRequest::GetPrompt { .. });
        let method = request.method();
        let call = tokio::select! {
            biased;
            call = runtime.feature_in(tools, self.view(), request, self.call_tags(id)) => call,
            () = cancel_signal.notified() => {
                runtime.report_unstarted(CallEnded::unstarted(self.call_tags(id), CallOutcome::Cancelled), None);
                return (None, None);
            }
        };
        let call = match call {
            Ok(call) => call,
            Err(error) => return (Some(jsonrpc::failure(Some(id), &refusal(&error))), None),
        };
        let limits = call.limits().clone();
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let entry = in_flight.entry(id.clone()).or_default();
            if entry.cancelled {
                return (None, None);
            }
            entry.handle = Some(call.handle());
        }
        let (report, teardown) = call.run_deferring_teardown().await;
        if report.outcome == Outcome::Cancelled || self.is_cancelled(id) {
            return (None, Some(teardown));
        }
        let scope = wire::cache_scope(self.tenant.is_some());
        let completion = wire::completion(revision);
        let answer = match report.outcome {
            Outcome::Answered(FeatureAnswer::Read(result)) => {
                Ok(FeatureResult::ReadResource(wire::ReadResourceResult {
                    contents: result.contents.into_iter().map(contents).collect(),
                    caching: Caching::new(revision, result.ttl_ms.unwrap_or(0), scope),
                    completion,
                }))
            }
            Outcome::Answered(FeatureAnswer::NotFound) => {
                Err(wire::resource_not_found(uri.as_deref().unwrap_or_default()))
            }
            Outcome::Answered(FeatureAnswer::Prompt(result)) => {
                Ok(FeatureResult::GetPrompt(prompt_result(result, completion)))
            }
            Outcome::Answered(FeatureAnswer::Completion(suggested)) => {
                Ok(FeatureResult::Complete(wire::CompleteResult {
                    completion: completion_result(suggested),
                    result: completion,
                }))
            }
            // A prompt's own refusal is about its arguments (its WIT contract).
            Outcome::ToolError(message) if is_prompt => Err(RpcError::invalid_params(message)),
            outcome => Err(RpcError::new(INTERNAL_ERROR, failure(method, &outcome, &limits))),
        };
        let answer = match answer {
            Ok(result) => jsonrpc::success(id, result),
            Err(error) => jsonrpc::failure(Some(id), &error),
        };
        (Some(answer), Some(teardown))
    }
}

/// The runtime's request for one of the methods that run in a component.
fn request(method: &str, params: Option<&Value>) -> Result<FeatureRequest, RpcError> {
    let pairs = |map: Option<std::collections::BTreeMap<String, String>>| {
        map.unwrap_or_default().into_iter().collect()
    };
    Ok(match method {
        "resources/read" => {
            let wire::ReadResourceParams { uri } = wire::params(method, params)?;
            FeatureRequest::ReadResource { uri }
        }
        "prompts/get" => {
            let wire::GetPromptParams { name, arguments } = wire::params(method, params)?;
            FeatureRequest::GetPrompt { name, arguments: pairs(arguments) }
        }
        _ => {
            let wire::CompleteParams { reference, argument, context } = wire::params(method, params)?;
            FeatureRequest::Complete {
                reference: match reference {
                    wire::Reference::Prompt { name } => Reference::Prompt(name),
                    wire::Reference::Resource { uri } => Reference::ResourceTemplate(uri),
                },
                argument: argument.name,
                value: argument.value,
                context: pairs(context.unwrap_or_default().arguments),
            }
        }
    })
}

/// A request refused before it ran: what the client asked for does not exist or does not
/// fit (`-32602`), or the server has no slot for it.
fn refusal(error: &FeatureError) -> RpcError {
    match error {
        FeatureError::ResourceNotFound(uri) => wire::resource_not_found(uri),
        FeatureError::UnknownPrompt(_)
        | FeatureError::InvalidArguments { .. }
        | FeatureError::UnknownReference(_) => RpcError::invalid_params(error.to_string()),
        FeatureError::Refused(refused) => RpcError::new(INTERNAL_ERROR, capitalized(&refused.to_string())),
    }
}

/// Why a request that ran gave no answer, in a sentence.
fn failure(method: &str, outcome: &Outcome, limits: &ToolLimits) -> String {
    let seconds = |duration: std::time::Duration| format!("{} s", duration.as_secs_f64());
    match outcome {
        Outcome::ToolError(message) => format!("The component failed to answer {method}: {message}"),
        Outcome::TimedOut(Timeout::Idle(idle)) => {
            format!(
                "The {method} request was stopped: it reported no progress for {} (its idle timeout).",
                seconds(*idle)
            )
        }
        Outcome::TimedOut(Timeout::MaxDuration(max)) => {
            format!("The {method} request was stopped: it ran for {} (its maximum duration).", seconds(*max))
        }
        Outcome::Trapped(message) => format!("The component crashed answering {method}: {message}."),
        Outcome::OutOfMemory => {
            format!(
                "The component ran out of memory answering {method} (its limit is {} MiB).",
                limits.memory_bytes >> 20
            )
        }
        Outcome::ResultTooLarge { bytes, limit } => {
            format!("The answer to {method} ({bytes} bytes) is larger than the limit of {limit} bytes.")
        }
        Outcome::Shutdown => format!("The server is shutting down; the {method} request was stopped."),
        Outcome::StartFailed(problem) => format!("The component could not start: {problem}."),
        Outcome::InvalidResult(problem) => format!("The component answered {method} wrongly: {problem}."),
        Outcome::Cancelled => format!("The {method} request was cancelled."),
        Outcome::InputRequired(_) => {
            format!("The component asked for input answering {method}, which this client cannot give.")
        }
        Outcome::Completed(_) | Outcome::Answered(_) => format!("The component answered {method} wrongly."),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

fn resource(info: &ResourceInfo) -> wire::Resource {
    wire::Resource {
        uri: info.uri.clone(),
        name: info.name.clone(),
        title: info.title.clone(),
        description: info.description.clone(),
        mime_type: info.mime_type.clone(),
        size: info.size,
    }
}

fn template(info: &ResourceTemplate) -> wire::ResourceTemplate {
    wire::ResourceTemplate {
        uri_template: info.uri_template.clone(),
        name: info.name.clone(),
        title: info.title.clone(),
        description: info.description.clone(),
        mime_type: info.mime_type.clone(),
    }
}

fn prompt(info: &PromptInfo) -> wire::Prompt {
    wire::Prompt {
        name: info.name.clone(),
        title: info.title.clone(),
        description: info.description.clone(),
        arguments: info
            .arguments
            .iter()
            .map(|argument| wire::PromptArgument {
                name: argument.name.clone(),
                title: argument.title.clone(),
                description: argument.description.clone(),
                required: argument.required,
            })
            .collect(),
    }
}

fn contents(contents: Contents) -> wire::ResourceContents {
    let Contents { uri, mime_type, body } = contents;
    match body {
        Body::Text(text) => wire::ResourceContents::Text { uri, mime_type, text },
        Body::Blob(bytes) => wire::ResourceContents::Blob { uri, mime_type, blob: BASE64.encode(bytes) },
    }
}

fn prompt_result(
    result: PromptResult,
    completion: crate::protocol::types::Completion,
) -> wire::GetPromptResult {
    let messages = result
        .messages
        .into_iter()
        .map(|message| wire::PromptMessage {
            role: match message.role {
                Role::User => wire::Role::User,
                Role::Assistant => wire::Role::Assistant,
            },
            content: content_block(message.content),
        })
        .collect();
    wire::GetPromptResult { description: result.description, messages, completion }
}

fn content_block(content: Content) -> wire::ContentBlock {
    match content {
        Content::Text(text) => wire::ContentBlock::Text { text },
        Content::Image(media) => {
            wire::ContentBlock::Image { data: BASE64.encode(&media.data), mime_type: media.mime_type }
        }
        Content::Audio(media) => {
            wire::ContentBlock::Audio { data: BASE64.encode(&media.data), mime_type: media.mime_type }
        }
        Content::ResourceLink(link) => wire::ContentBlock::ResourceLink {
            uri: link.uri,
            name: link.name,
            description: link.description,
            mime_type: link.mime_type,
        },
        Content::EmbeddedResource(resource) => {
            let (uri, mime_type) = (resource.uri, resource.mime_type);
            let resource = match (resource.text, resource.blob) {
                (_, Some(blob)) => wire::ResourceContents::Blob { uri, mime_type, blob: BASE64.encode(blob) },
                (text, None) => {
                    wire::ResourceContents::Text { uri, mime_type, text: text.unwrap_or_default() }
                }
            };
            wire::ContentBlock::Resource { resource }
        }
    }
}

fn completion_result(completion: Completion) -> wire::Completion {
    wire::Completion { values: completion.values, total: completion.total, has_more: completion.has_more }
}
