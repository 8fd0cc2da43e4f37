//! What the runtime reports, as the protocol's types: a tool as `tools/list` describes it,
//! a call's outcome as a `tools/call` result (or the protocol error it is), progress and a
//! guest's log lines as notifications, and the check of a call's `Mcp-Param-*` headers against its tool.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use crate::protocol::jsonrpc::{self, RequestId, RpcError};
use crate::protocol::mcp;
use crate::protocol::types::{
    CallToolResult, ContentBlock, LoggingLevel, LoggingMessageParams, ProgressParams, ResourceContents,
    Revision, ServerNotification, Tool, ToolAnnotations,
};
use crate::runtime::{
    CallError, Content, LogLevel, LogLine, Outcome, ParamKind, Progress, Timeout, ToolLimits, ToolResult,
    ToolSpec,
};

/// A tool as MCP describes it.
pub fn tool(spec: &ToolSpec) -> Tool {
    Tool {
        name: spec.name.clone(),
        title: spec.title.clone(),
        description: spec.description.clone(),
        input_schema: spec.input_schema.clone(),
        output_schema: spec.output_schema.clone(),
        annotations: spec.annotations.as_ref().map(|hints| ToolAnnotations {
            read_only_hint: hints.read_only,
            destructive_hint: hints.destructive,
            idempotent_hint: hints.idempotent,
            open_world_hint: hints.open_world,
        }),
    }
}

/// How a call that could not start is answered: a protocol error for a malformed request
/// (an unknown tool, `arguments` not an object), a tool execution error for the rest.
/// Arguments that break the tool's input schema are a tool execution error naming the JSON
/// path (SEP-1303, 2025-11-25 on), so that the model can correct them and call again.
pub fn call_error(error: &CallError, revision: Revision) -> Result<CallToolResult, RpcError> {
    match error {
        CallError::UnknownTool(_) | CallError::ArgumentsNotObject => {
            Err(RpcError::invalid_params(capitalized(&error.to_string())))
        }
        CallError::InvalidArguments { .. }
        // The tool's own schema is at fault, not the client.
        | CallError::Busy { .. }
        | CallError::TenantBusy { .. }
        | CallError::TenantShareBusy { .. }
        | CallError::ShuttingDown
        | CallError::ArgumentsUnchecked { .. } => {
            Ok(CallToolResult::error(capitalized(&error.to_string()), revision))
        }
    }
}

/// A `CallToolResult` for every outcome but a cancel (which is never answered). Takes the
/// outcome: a result's content moves into the answer.
pub fn call_result(outcome: Outcome, limits: &ToolLimits, revision: Revision) -> CallToolResult {
    let error = |message: String| CallToolResult::error(message, revision);
    match outcome {
        Outcome::Completed(result) => completed_result(result, revision),
        Outcome::ToolError(message) => error(message),
        Outcome::Cancelled => error("The call was cancelled.".into()),
        Outcome::TimedOut(Timeout::Idle(idle)) => error(format!(
            "The tool was stopped: it reported no progress for {} (its idle timeout).",
            seconds(idle)
        )),
        Outcome::TimedOut(Timeout::MaxDuration(max)) => {
            error(format!("The tool was stopped: it ran for {} (its maximum duration).", seconds(max)))
        }
        Outcome::Trapped(message) => error(format!("The tool crashed: {message}.")),
        Outcome::OutOfMemory => {
            error(format!("The tool ran out of memory (its limit is {} MiB).", limits.memory_bytes >> 20))
        }
        Outcome::ResultTooLarge { bytes, limit } => {
            error(format!("The tool's result ({bytes} bytes) is larger than its limit of {limit} bytes."))
        }
        Outcome::InvalidResult(problem) => error(format!("The tool returned an invalid result: {problem}.")),
        Outcome::Shutdown => error("The server is shutting down; the call was stopped.".into()),
        Outcome::StartFailed(problem) => error(format!("The tool could not start: {problem}.")),
        // Only a request for a resource, prompt or completion is answered so (dispatch/features.rs).
        Outcome::Answered(_) => error("The tool returned no tool result.".into()),
        // A 2026-07-28 request gets an InputRequiredResult (dispatch/input.rs) instead.
        Outcome::InputRequired(_) => error(
            "The tool asked the client for input, which this client cannot give on this request.".into(),
        ),
    }
}

fn completed_result(result: ToolResult, revision: Revision) -> CallToolResult {
    let content = result.content.into_iter().map(content_block).collect();
    CallToolResult::completed(content, result.structured, result.is_error, revision)
}

/// A guest's content as the protocol writes it (tool results and prompt messages alike).
pub(super) fn content_block(content: Content) -> ContentBlock {
    match content {
        Content::Text(text) => ContentBlock::Text { text },
        Content::Image(media) => {
            ContentBlock::Image { data: BASE64.encode(&media.data), mime_type: media.mime_type }
        }
        Content::Audio(media) => {
            ContentBlock::Audio { data: BASE64.encode(&media.data), mime_type: media.mime_type }
        }
        Content::ResourceLink(link) => ContentBlock::ResourceLink {
            uri: link.uri,
            name: link.name,
            description: link.description,
            mime_type: link.mime_type,
        },
        Content::EmbeddedResource(resource) => {
            let (uri, mime_type) = (resource.uri, resource.mime_type);
            let resource = match (resource.text, resource.blob) {
                (_, Some(blob)) => ResourceContents::Blob { uri, mime_type, blob: BASE64.encode(blob) },
                (text, None) => ResourceContents::Text { uri, mime_type, text: text.unwrap_or_default() },
            };
            ContentBlock::Resource { resource }
        }
    }
}

/// A progress notification for the call whose request carried `token`.
pub fn progress_notification(token: &RequestId, progress: Progress) -> ServerNotification {
    ServerNotification::Progress(ProgressParams {
        progress_token: token.clone(),
        progress: progress.done,
        total: progress.total,
        message: progress.message,
    })
}

/// The least severe guest log level that is at or above `level`; `None` when the client
/// wants only what a guest cannot log (`critical` and above).
pub fn guest_log_threshold(level: LoggingLevel) -> Option<LogLevel> {
    match level {
        // A guest's trace lines are sent as `debug`, the least severe MCP level.
        LoggingLevel::Debug => Some(LogLevel::Trace),
        LoggingLevel::Info => Some(LogLevel::Info),
        LoggingLevel::Notice | LoggingLevel::Warning => Some(LogLevel::Warn),
        LoggingLevel::Error => Some(LogLevel::Error),
        LoggingLevel::Critical | LoggingLevel::Alert | LoggingLevel::Emergency => None,
    }
}

/// The MCP level of a guest's log level.
pub fn logging_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// `notifications/message` for a line of `tool`'s log.
pub fn log_notification(tool: &str, line: LogLine) -> ServerNotification {
    ServerNotification::Message(LoggingMessageParams {
        level: logging_level(line.level),
        logger: Some(tool.to_owned()),
        data: Value::String(line.message),
    })
}

/// The one `notifications/message` saying that `dropped` lines of `tool`'s log never reached
/// the client, at `level` (at least `warning`, and never below what the client asked for).
pub fn dropped_logs_notification(
    tool: &str,
    dropped: u64,
    level: LoggingLevel,
    per_second: u32,
) -> ServerNotification {
    ServerNotification::Message(LoggingMessageParams {
        level: level.max(LoggingLevel::Warning),
        logger: Some(tool.to_owned()),
        data: Value::String(format!(
            "{dropped} log lines of this call were dropped: the tool logged faster than the {per_second} \
             lines per second (and {} waiting) a call may send",
            crate::runtime::CLIENT_LOG_QUEUE
        )),
    })
}

/// The `Mcp-Param-*` headers of a `tools/call` (read with `header`, by name) against the
/// arguments they mirror: each is required when its argument has a value (unless not
/// `required`: a 2025-era request need send none) and refused when it has none, must be
/// visible ASCII (or valid `=?base64?…?=`), and must equal the argument (integers compared
/// as numbers). The error says which header is wrong and why.
pub fn check_param_headers<'h>(
    tool: &ToolSpec,
    params: Option<&Value>,
    header: impl Fn(&str) -> Option<&'h [u8]>,
    required: bool,
) -> Result<(), String> {
    let Some(arguments) = params.and_then(|params| params.get("arguments")) else { return Ok(()) };
    for param in &tool.param_headers {
        let value = param.path.iter().try_fold(arguments, |value, key| value.get(key));
        let name = format!("Mcp-Param-{}", param.name);
        let Some(value) = value.filter(|value| !value.is_null()) else {
            // An intermediary may route or authorize on the header: one the tool will
            // never see a value for would mislead it.
            if header(&name).is_some() {
                return Err(format!(
                    "{name} is sent but the arguments have nothing at `{}`",
                    param.path.join(".")
                ));
            }
            continue;
        };
        let Some(raw) = header(&name) else {
            if !required {
                continue;
            }
            return Err(format!("{name} is required: the arguments have `{}`", param.path.join(".")));
        };
        let text = std::str::from_utf8(raw)
            .ok()
            .filter(|text| text.bytes().all(|byte| byte == b'\t' || (b' '..=b'~').contains(&byte)))
            .ok_or_else(|| format!("{name} has characters outside visible ASCII"))?;
        let text = mcp::decode_header_value(text.trim())
            .ok_or_else(|| format!("{name} is not valid base64 UTF-8"))?;
        let equal = match param.kind {
            ParamKind::String => value.as_str() == Some(text.as_str()),
            // Exactly, as integers: as floats, 2^53 + 1 would pass for 2^53.
            ParamKind::Integer => {
                let header = serde_json::from_str::<serde_json::Number>(&text).ok();
                let number = |number: Option<&serde_json::Number>| number.and_then(jsonrpc::integer_value);
                number(value.as_number()).zip(number(header.as_ref())).is_some_and(|(a, b)| a == b)
            }
            ParamKind::Boolean => value.as_bool().map(|flag| flag.to_string()) == Some(text.clone()),
        };
        if !equal {
            return Err(format!(
                "{name} is {text:?} but the arguments have {value} at `{}`",
                param.path.join(".")
            ));
        }
    }
    Ok(())
}

fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}
