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

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;
use tokio::sync::Notify;

use super::input::{NotAsked, Retry};
use super::sealed::Binding;
use super::{
    Between, Charge, Connection, MAX_INPUT_ROUNDS, Outbox, Reply, spawn_unless_ready, stop_between_rounds,
};
use crate::protocol::features::{self as wire, FeatureResult};
use crate::protocol::jsonrpc::{self, INTERNAL_ERROR, Outgoing, RequestId, RpcError};
use crate::protocol::types::{Caching, ListKind, Revision};
use crate::runtime::features::{
    Body, Completion, Contents, PromptInfo, PromptResult, Reference, ResourceInfo, ResourceTemplate, Role,
};
use crate::runtime::input::InputRound;
use crate::runtime::{
    CallEnded, CallOutcome, FeatureAnswer, FeatureError, FeatureRequest, Outcome, Teardown, TenantView,
    Timeout, ToolLimits, ToolSet,
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

/// Whether `method`, one of [`METHODS`], is answered for `view` with `tools`: only what the
/// capabilities advertise is. A server whose components offer no prompts does not know
/// `prompts/list`, as a tools-only server would not.
pub(super) fn offered(tools: &ToolSet, view: Option<&TenantView>, method: &str) -> bool {
    let (resources, prompts, completions) = tools.features_for(view);
    match method.split('/').next() {
        Some("resources") => resources,
        Some("prompts") => prompts,
        _ => completions,
    }
}

impl Connection {
    /// What the components this connection sees offer besides tools.
    pub(super) fn offered(&self) -> wire::Offered {
        let (resources, prompts, completions) = self.server.runtime.snapshot().features_for(self.view());
        wire::Offered { resources, prompts, completions }
    }

    /// The lists whose changes this connection's client hears of, as its view sees
    /// `tools`, as digests: made once per set and tenant, however many streams ask.
    pub(super) fn lists_of(&self, tools: &ToolSet) -> Lists {
        let view = self.view();
        self.server.list_digests_for(tools, view.map(|view| &view.tenant), || Lists {
            tools: Lists::digest(&*self.server.tool_list_for(tools, view)),
            prompts: Lists::digest(&tools.prompts_for(view).map(prompt).collect::<Vec<_>>()),
            resources: Lists::digest(&(
                tools.resources_for(view).map(resource).collect::<Vec<_>>(),
                tools.templates_for(view).map(template).collect::<Vec<_>>(),
            )),
        })
    }

    /// Answer one of [`METHODS`], one that [`offered`] says is.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route_feature(
        self: &Arc<Self>,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        tools: Arc<ToolSet>,
        revision: Revision,
        retry: Option<Retry>,
        out: &Outbox,
        charge: Charge,
    ) -> Reply {
        let caching = wire::list_caching(revision, self.tenant.is_some());
        let completion = wire::completion(revision);
        let cursor = params.as_ref().and_then(|params| params.get("cursor"));
        // Paged over references: only the page is copied (a component may list megabytes).
        let listed = match method {
            "resources/list" => {
                let items: Vec<_> = tools.resources_for(self.view()).collect();
                wire::page(&items, |item| &item.uri, cursor).map(|(resources, next_cursor)| {
                    FeatureResult::ListResources(wire::ListResourcesResult {
                        resources: resources.iter().copied().map(resource).collect(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            "resources/templates/list" => {
                let items: Vec<_> = tools.templates_for(self.view()).collect();
                wire::page(&items, |item| &item.uri_template, cursor).map(|(templates, next_cursor)| {
                    FeatureResult::ListResourceTemplates(wire::ListResourceTemplatesResult {
                        resource_templates: templates.iter().copied().map(template).collect(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            "prompts/list" => {
                let items: Vec<_> = tools.prompts_for(self.view()).collect();
                wire::page(&items, |item| &item.name, cursor).map(|(prompts, next_cursor)| {
                    FeatureResult::ListPrompts(wire::ListPromptsResult {
                        prompts: prompts.iter().copied().map(prompt).collect(),
                        next_cursor,
                        caching,
                        completion,
                    })
                })
            }
            _ => {
                return match request(method, params.as_ref()) {
                    Ok(request) => {
                        self.start_feature(id, request, tools, revision, retry, out.clone(), charge)
                    }
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
    #[allow(clippy::too_many_arguments)]
    fn start_feature(
        self: &Arc<Self>,
        id: &RequestId,
        request: FeatureRequest,
        tools: Arc<ToolSet>,
        revision: Revision,
        retry: Option<Retry>,
        out: Outbox,
        mut charge: Charge,
    ) -> Reply {
        let cancel_signal = match self.enter_in_flight(id) {
            Ok(signal) => signal,
            Err(error) => return Reply::Error(error),
        };
        let connection = self.clone();
        let id = id.clone();
        spawn_unless_ready(async move {
            let (answer, teardown) = connection
                .run_feature(&id, &tools, request, revision, retry, &cancel_signal, &out, &mut charge)
                .await;
            // Left however it ended (a cancelled request has no answer, and must not stay).
            let cancelled = connection.leave_in_flight(&id, &cancel_signal);
            if let Some(answer) = answer.filter(|_| !cancelled) {
                super::release_before_sending(&out, &mut charge);
                out.send(answer).await;
            }
            drop(charge);
            drop(teardown);
            connection.server.finish_call();
        });
        Reply::Later
    }

    /// Run one request to its answer (`None` when the client cancelled it, or it went out already), and the
    /// instance's teardown, to drop once the answer is out. A prompt that asks for input
    /// answers a 2026-07-28 client with an `InputRequiredResult`; a 2025-era client is
    /// asked between rounds, as for a tool call ([`Connection::ask_between_rounds`]).
    #[allow(clippy::too_many_arguments)]
    async fn run_feature(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        request: FeatureRequest,
        revision: Revision,
        mut retry: Option<Retry>,
        cancel_signal: &Notify,
        out: &Outbox,
        charge: &mut Charge,
    ) -> (Option<Outgoing>, Option<Teardown>) {
        let runtime = &self.server.runtime;
        // What the request keeps for the whole prompt; a wait for the client holds more.
        let kept = charge.bytes();
        let uri = match &request {
            FeatureRequest::ReadResource { uri } => Some(uri.clone()),
            _ => None,
        };
        let is_prompt = matches!(request, FeatureRequest::GetPrompt { .. });
        // A prompt is bound by its name and arguments, as a tool by its arguments.
        let bound = match &request {
            FeatureRequest::GetPrompt { name, arguments } => {
                let arguments: serde_json::Map<String, Value> = arguments
                    .iter()
                    .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
                    .collect();
                Some((format!("prompts/get {name}"), Value::Object(arguments)))
            }
            _ => None,
        };
        let method = request.method();
        let bridged = is_prompt && revision == Revision::R2025_11_25;
        let abilities = self.client_abilities();
        let mut round = bridged.then(|| InputRound::first(abilities));
        // Every round and every wait for the client, within the prompt's maximum duration.
        let mut deadline = None;
        // The last note the guest left for a cleanup, carried from round to round.
        let mut note = None;
        // The charges of the answers the next round runs with, until it ends.
        let mut answers_held = super::AnswersHeld::default();
        // The cleanup of a prompt whose guest ran a round, stopped before the next: in no
        // call slot (`Runtime::feature_to_clean_up`).
        let clean_up = |outcome: Outcome, note: Option<Vec<u8>>| {
            let call = runtime.feature_to_clean_up(tools, self.view(), request.clone(), self.call_tags(id));
            stop_between_rounds(call, outcome, note, method)
        };
        // A prompt given up after a round: its answer (if any) goes out beside its cleanup.
        let give_up = |answer: Option<Outgoing>, outcome: Outcome, note: Option<Vec<u8>>| {
            self.answer_beside_cleanup(id, answer, out, cancel_signal, clean_up(outcome, note))
        };
        for rounds in 1.. {
            let reserved = tokio::select! {
                biased;
                call = runtime.feature_in(tools, self.view(), request.clone(), self.call_tags(id)) => call,
                () = cancel_signal.notified() => {
                    // After a first round the guest has run: its cleanup runs (in no
                    // call slot).
                    if rounds > 1 {
                        return (None, clean_up(Outcome::Cancelled, note).await);
                    }
                    // A 2026-07-28 retry: the guest of the request before ran and sealed
                    // its note, so the prompt given up now is cleaned up with it (as a
                    // tool's: `Connection::clean_up_cancelled_retry`).
                    if let (Some(retry), Some((target, arguments))) =
                        (retry.as_ref().filter(|retry| retry.brings_state()), &bound)
                        && let Some(call) = runtime.feature_to_clean_up(tools, self.view(), request.clone(), self.call_tags(id))
                    {
                        let component = call.component();
                        let binding = || Binding::new(&component, target.clone(), self.holder(), arguments);
                        if let Ok((opened, _)) = retry.round_for(&self.server.sealer, binding) {
                            let call = Some(call.with_input(opened));
                            return (None, stop_between_rounds(call, Outcome::Cancelled, None, method).await);
                        }
                    }
                    runtime.report_unstarted(CallEnded::unstarted(self.call_tags(id), CallOutcome::Cancelled), self.view(), None);
                    return (None, None);
                }
            };
            let call = match reserved {
                Ok(call) => call,
                Err(error) => {
                    let answer = Some(jsonrpc::failure(Some(id), &refusal(&error, revision)));
                    if rounds == 1 {
                        return (answer, None);
                    }
                    // A later round found no slot: the guest ran before, so it is cleaned up.
                    let outcome = match error {
                        FeatureError::Refused(crate::runtime::CallError::ShuttingDown) => Outcome::Shutdown,
                        _ => Outcome::Cancelled,
                    };
                    return (None, give_up(answer, outcome, note).await);
                }
            };
            let limits = call.limits().clone();
            let deadline = *deadline.get_or_insert_with(|| {
                limits.max_duration.map(|max| (tokio::time::Instant::now() + max, max))
            });
            let mut asking = None;
            let retried = rounds == 1 && retry.as_ref().is_some_and(Retry::brings_state);
            let call = match (retry.take(), &bound, round.take()) {
                (_, _, Some(round)) => call.with_input(round),
                (Some(retry), Some((target, arguments)), None) => {
                    let holder = self.holder();
                    let component = call.component();
                    let binding = move || Binding::new(&component, target.clone(), holder, arguments);
                    match retry.round_for(&self.server.sealer, binding.clone()) {
                        Ok((round, number)) => {
                            asking = Some((retry, binding, number));
                            call.with_input(round)
                        }
                        Err(error) => return (Some(jsonrpc::failure(Some(id), &error)), None),
                    }
                }
                _ => call,
            };
            if !self.attach_handle(id, call.handle()) {
                // A later round, or a retry whose state just opened: a guest ran before.
                if rounds > 1 || retried {
                    return (None, stop_between_rounds(Some(call), Outcome::Cancelled, None, method).await);
                }
                runtime.report_unstarted(
                    CallEnded::unstarted(self.call_tags(id), CallOutcome::Cancelled),
                    self.view(),
                    None,
                );
                return (None, None);
            }
            let (report, teardown) = call.run_deferring_teardown().await;
            drop(std::mem::take(&mut answers_held));
            charge.shrink_to(kept);
            if report.outcome == Outcome::Cancelled || self.is_cancelled(id) {
                // A prompt that asked has run: cancelled now, it is cleaned up with its note
                // (a 2026-07-28 client was never sent the state to come back with).
                if matches!(report.outcome, Outcome::InputRequired(_)) {
                    drop(teardown);
                    return (None, clean_up(Outcome::Cancelled, report.cleanup_note).await);
                }
                return (None, Some(teardown));
            }
            let scope = wire::cache_scope(self.tenant.is_some());
            let completion = wire::completion(revision);
            let answer = match report.outcome {
                Outcome::Answered(FeatureAnswer::Read(result)) => {
                    Ok(FeatureResult::ReadResource(wire::ReadResourceResult {
                        contents: result.contents.into_iter().map(contents).collect(),
                        caching: Caching::new(revision, resource_ttl_ms(result.ttl_ms), scope),
                        completion,
                    }))
                }
                Outcome::Answered(FeatureAnswer::NotFound) => {
                    Err(wire::resource_not_found(uri.as_deref().unwrap_or_default(), revision))
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
                Outcome::InputRequired(input) if bridged => {
                    drop(teardown);
                    note = report.cleanup_note;
                    if rounds >= MAX_INPUT_ROUNDS {
                        let problem = format!(
                            "The prompt asked for input {rounds} times; the limit is {MAX_INPUT_ROUNDS} rounds"
                        );
                        let answer = jsonrpc::failure(Some(id), &RpcError::new(INTERNAL_ERROR, problem));
                        return (None, give_up(Some(answer), Outcome::Cancelled, note).await);
                    }
                    // Held while the client is asked, as for a tool call.
                    charge.hold(super::waiting_bytes(&input, note.as_deref()));
                    match self.ask_between_rounds(input, deadline, cancel_signal, out).await {
                        Ok((responses, state, held)) => {
                            let mut next = InputRound::retry(abilities, responses, state);
                            next.cleanup_note = note.clone();
                            next.call_ends_by = deadline.map(|(at, _)| at.into_std());
                            round = Some(next);
                            answers_held = held;
                            continue;
                        }
                        Err(Between::Failed(problem)) => {
                            let error = RpcError::new(INTERNAL_ERROR, format!("The prompt {problem}"));
                            let answer = jsonrpc::failure(Some(id), &error);
                            return (None, give_up(Some(answer), Outcome::Cancelled, note).await);
                        }
                        Err(Between::Stopped(outcome)) => {
                            let answer = (outcome != Outcome::Cancelled).then(|| {
                                let error = RpcError::new(INTERNAL_ERROR, failure(method, &outcome, &limits));
                                jsonrpc::failure(Some(id), &error)
                            });
                            return (None, give_up(answer, outcome, note).await);
                        }
                    }
                }
                Outcome::InputRequired(input) if asking.is_some() => {
                    let (retry, binding, round) = asking.expect("guarded");
                    let note = report.cleanup_note.clone();
                    let error = match retry.ask(input, note, round, &self.server.sealer, binding()) {
                        // Decided under the in-flight lock, as for a tool call: a cancel
                        // that lands before gives the prompt up, and it is cleaned up.
                        Ok(_) if self.leave_in_flight(id, cancel_signal) => {
                            drop(teardown);
                            return (None, clean_up(Outcome::Cancelled, report.cleanup_note).await);
                        }
                        Ok(result) => {
                            return (Some(jsonrpc::success(id, result)), Some(teardown));
                        }
                        Err(NotAsked::Refused(error)) => error,
                        Err(NotAsked::Failed(message)) => {
                            RpcError::new(INTERNAL_ERROR, format!("The prompt {message}"))
                        }
                    };
                    // Given up with an error, the prompt that asked is cleaned up as after
                    // any stop, with the note it left, beside the error.
                    drop(teardown);
                    let error = jsonrpc::failure(Some(id), &error);
                    return (None, give_up(Some(error), Outcome::Cancelled, report.cleanup_note).await);
                }
                // Asked where no client can be (today every request that may ask can):
                // given up as when asking fails.
                Outcome::InputRequired(_) => {
                    drop(teardown);
                    let error = RpcError::new(INTERNAL_ERROR, failure(method, &report.outcome, &limits));
                    let error = jsonrpc::failure(Some(id), &error);
                    return (None, give_up(Some(error), Outcome::Cancelled, report.cleanup_note).await);
                }
                // A prompt's own refusal is about its arguments (its WIT contract).
                Outcome::ToolError(message) if is_prompt => Err(RpcError::invalid_params(message)),
                outcome => Err(RpcError::new(INTERNAL_ERROR, failure(method, &outcome, &limits))),
            };
            let answer = match answer {
                Ok(result) => jsonrpc::success(id, result),
                Err(error) => jsonrpc::failure(Some(id), &error),
            };
            return (Some(answer), Some(teardown));
        }
        unreachable!("the rounds end at MAX_INPUT_ROUNDS")
    }
}

/// What a client lists, as it saw it last: to tell which lists a new tool set changed. A
/// digest of each list as it is sent, keyed by the process (so a guest cannot make two of
/// its lists collide): a stream keeps these few bytes, not a copy of every list (which a
/// guest may make megabytes), and each set's are made once per tenant.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Lists {
    tools: u64,
    prompts: u64,
    /// Resources and templates: one list for their notification.
    resources: u64,
}

impl Lists {
    /// The kinds of list that differ in `next`.
    pub(super) fn changed_in(&self, next: &Lists) -> impl Iterator<Item = ListKind> + use<> {
        let changed =
            [self.tools != next.tools, self.prompts != next.prompts, self.resources != next.resources];
        ListKind::ALL.into_iter().zip(changed).filter_map(|(kind, changed)| changed.then_some(kind))
    }

    /// The keyed digest of `list` as JSON.
    fn digest(list: &impl serde::Serialize) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        struct Digest(std::hash::DefaultHasher);
        impl std::io::Write for Digest {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.write(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut digest = Digest(KEY.get_or_init(std::hash::RandomState::new).build_hasher());
        serde_json::to_writer(&mut digest, list).expect("lists serialize");
        digest.0.finish()
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
            // A template may match what is no URI (a variable holds any text but `/`): such
            // a read is the client's mistake, refused before a component echoes it back.
            cordon_rules::check_uri(&uri).map_err(|why| {
                RpcError::invalid_params(format!("Invalid params: `uri` is not a URI: {why}"))
            })?;
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
fn refusal(error: &FeatureError, revision: Revision) -> RpcError {
    match error {
        FeatureError::ResourceNotFound(uri) => wire::resource_not_found(uri, revision),
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
            content: super::answers::content_block(message.content),
        })
        .collect();
    wire::GetPromptResult { description: result.description, messages, completion }
}

fn completion_result(completion: Completion) -> wire::Completion {
    wire::Completion { values: completion.values, total: completion.total, has_more: completion.has_more }
}

/// The longest a client is told it may keep a resource it read: a day.
pub const MAX_RESOURCE_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The `ttlMs` a client is told for a resource whose guest asked for `asked`: none (0) when
/// it asked for none, and never more than [`MAX_RESOURCE_TTL_MS`]. A guest's word reaches
/// caches the server does not control (shared ones, when the server has no tenants), and
/// past 2^53 a JavaScript client cannot even read it exactly.
fn resource_ttl_ms(asked: Option<u64>) -> u64 {
    asked.unwrap_or(0).min(MAX_RESOURCE_TTL_MS)
}

#[cfg(test)]
mod ttl_tests {
    use super::*;

    #[test]
    fn a_guests_ttl_is_kept_up_to_a_day() {
        assert_eq!(resource_ttl_ms(None), 0);
        assert_eq!(resource_ttl_ms(Some(60_000)), 60_000);
        assert_eq!(resource_ttl_ms(Some(u64::MAX)), MAX_RESOURCE_TTL_MS);
    }
}
