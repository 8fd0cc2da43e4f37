//! The protocol's types against the official schemas: every message the server can write
//! (each result, with every kind of content and every outcome of a call, each
//! notification and error) validates against the schema of the revision it is written
//! for, reads back to itself, and a 2025-11-25 one carries nothing only 2026-07-28
//! defines.

use crate::common;

use std::time::Duration;

use common::wire::Schema;
use cordon::dispatch::{self, Refusal};
use cordon::protocol::jsonrpc::{self, Outgoing, RequestId, RpcError};
use cordon::protocol::mcp;
use cordon::protocol::types::{
    CallToolResult, ContentBlock, DiscoverResult, EmptyResult, InitializeResult, ListKind, ListToolsResult,
    ProgressParams, Revision, ServerNotification, SubscriptionFilter,
};
use cordon::runtime::{
    CallError, Content, EmbeddedResource, Media, Outcome, Progress, ResourceLink, Timeout, ToolAnnotations,
    ToolLimits, ToolResult, ToolSpec,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const REVISIONS: [Revision; 2] = [Revision::R2025_11_25, Revision::R2026_07_28];

fn schema(revision: Revision) -> Schema {
    match revision {
        Revision::R2025_11_25 => Schema::legacy(),
        Revision::R2026_07_28 => Schema::new(),
    }
}

fn id(value: Value) -> RequestId {
    RequestId::parse(&value).unwrap()
}

/// What only 2026-07-28 defines, nowhere in a 2025-11-25 result.
fn assert_legacy_shape(result: &Value) {
    for key in ["resultType", "ttlMs", "cacheScope"] {
        assert!(result.get(key).is_none(), "a 2025-11-25 result with {key}: {result}");
    }
    assert!(result.pointer("/_meta/io.modelcontextprotocol~1serverInfo").is_none(), "{result}");
}

/// Send `result` as the answer to `method` in `revision`: it validates, has the shape of
/// its revision, and reads back to itself.
fn check_result<T>(revision: Revision, method: &str, result: T)
where
    T: Into<cordon::protocol::types::ServerResult> + DeserializeOwned + PartialEq + std::fmt::Debug + Clone,
{
    for request in [id(json!(7)), id(json!("a")), id(json!(1.0))] {
        let message = serde_json::to_value(jsonrpc::success(&request, result.clone())).unwrap();
        schema(revision).check_sent(&message, Some(method));
        assert_eq!(message["id"], request.to_json());
        if revision == Revision::R2025_11_25 {
            assert_legacy_shape(&message["result"]);
        } else {
            assert_eq!(message["result"]["resultType"], "complete", "{message}");
            assert_eq!(message["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "cordon");
        }
        let read: T = serde_json::from_value(message["result"].clone()).unwrap();
        assert_eq!(read, result, "{message}");
    }
}

fn check_notification(revision: Revision, notification: ServerNotification) {
    let message = serde_json::to_value(Outgoing::Notification(notification)).unwrap();
    schema(revision).check_sent(&message, None);
}

fn check_error(revision: Revision, error: RpcError) {
    for request in [Some(id(json!(3))), None] {
        let message = serde_json::to_value(jsonrpc::failure(request.as_ref(), &error)).unwrap();
        schema(revision).check_sent(&message, None);
        assert_eq!(message.get("id").is_some(), request.is_some());
        let read: RpcError = serde_json::from_value(message["error"].clone()).unwrap();
        assert_eq!(read, error, "{message}");
    }
}

fn spec(name: &str, full: bool) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        title: full.then(|| "A title".into()),
        description: "What it does".into(),
        input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
        output_schema: full.then(|| json!({"type": "object"})),
        annotations: full.then_some(ToolAnnotations {
            read_only: Some(true),
            destructive: Some(false),
            idempotent: None,
            open_world: Some(true),
        }),
        requires: Vec::new(),
        param_headers: Vec::new(),
    }
}

#[test]
fn discovery_initialize_ping_and_listen_results_match_their_revision() {
    for revision in REVISIONS {
        if revision == Revision::R2026_07_28 {
            // 2025-11-25 has no discovery: its clients begin with `initialize`.
            for private in [false, true] {
                check_result::<DiscoverResult>(
                    revision,
                    "server/discover",
                    mcp::discover_result(private, revision),
                );
            }
            check_result::<EmptyResult>(revision, "subscriptions/listen", mcp::listen_ended(&id(json!(9))));
        } else {
            for requested in [Some("2025-11-25"), Some("2025-06-18"), Some("2024-11-05"), None] {
                let result = mcp::initialize_result(requested);
                check_result::<InitializeResult>(revision, "initialize", result.clone());
                let offered = requested.filter(|version| mcp::LEGACY_VERSIONS.contains(version));
                assert_eq!(result.protocol_version, offered.unwrap_or("2025-11-25"));
            }
            check_result::<EmptyResult>(revision, "ping", mcp::empty_result(revision));
            let ping =
                serde_json::to_value(jsonrpc::success(&id(json!(1)), mcp::empty_result(revision))).unwrap();
            assert_eq!(ping["result"], json!({}), "a 2025-11-25 ping answers {{}}");
        }
    }
}

#[test]
fn tool_lists_match_their_revision() {
    let mut tools: Vec<_> = (0..150).map(|i| dispatch::tool(&spec(&format!("t{i}"), i % 2 == 0))).collect();
    // Output of any JSON type (2026-07-28), which 2025-11-25 lists without its schema.
    tools[2].output_schema = Some(json!({"type": "array", "items": {"type": "integer"}}));
    tools[4].output_schema = Some(json!({"anyOf": [{"type": "string"}, {"type": "null"}]}));
    // Boolean property schemas (JSON Schema 2020-12), which 2025-11-25 takes as objects only.
    tools[0].input_schema = json!({"type": "object", "properties": {"anything": true, "nothing": false}});
    tools[0].output_schema = Some(json!({"type": "object", "properties": {"any": true}}));
    for revision in REVISIONS {
        let first = mcp::list_result(&tools, None, false, revision).unwrap();
        let listed: Vec<_> = first.tools[..5].iter().map(|tool| tool.output_schema.is_some()).collect();
        match revision {
            Revision::R2025_11_25 => assert_eq!(listed, [true, false, false, false, false]),
            Revision::R2026_07_28 => assert_eq!(listed, [true, false, true, false, true]),
        }
        let properties = &first.tools[0].input_schema["properties"];
        match revision {
            Revision::R2025_11_25 => assert_eq!(properties, &json!({"anything": {}, "nothing": {"not": {}}})),
            Revision::R2026_07_28 => assert_eq!(properties, &json!({"anything": true, "nothing": false})),
        }
        for private in [false, true] {
            let first = mcp::list_result(&tools, None, private, revision).unwrap();
            let cursor = json!(first.next_cursor.clone().expect("a second page"));
            check_result::<ListToolsResult>(revision, "tools/list", first);
            let last = mcp::list_result(&tools, Some(&cursor), private, revision).unwrap();
            assert_eq!((last.tools[0].name.as_str(), last.next_cursor.as_ref()), ("t100", None));
            check_result::<ListToolsResult>(revision, "tools/list", last);
            check_result::<ListToolsResult>(
                revision,
                "tools/list",
                mcp::list_result(&[], None, private, revision).unwrap(),
            );
        }
    }
}

/// A result with every kind of content the runtime reports.
fn every_content(is_error: bool, structured: Option<Value>) -> Outcome {
    let media = |mime_type: &str| Media { data: vec![0, 1, 2, 255], mime_type: mime_type.into() };
    Outcome::Completed(ToolResult {
        content: vec![
            Content::Text("hello".into()),
            Content::Text(String::new()),
            Content::Image(media("image/png")),
            Content::Audio(media("audio/wav")),
            Content::ResourceLink(ResourceLink {
                uri: "file:///a".into(),
                name: "a".into(),
                description: None,
                mime_type: None,
            }),
            Content::ResourceLink(ResourceLink {
                uri: "file:///b".into(),
                name: "b".into(),
                description: Some("B".into()),
                mime_type: Some("text/plain".into()),
            }),
            Content::EmbeddedResource(EmbeddedResource {
                uri: "file:///c".into(),
                mime_type: Some("text/plain".into()),
                text: Some("c".into()),
                blob: None,
            }),
            Content::EmbeddedResource(EmbeddedResource {
                uri: "file:///d".into(),
                mime_type: None,
                text: None,
                blob: Some(vec![7; 10]),
            }),
            // Neither set: empty text.
            Content::EmbeddedResource(EmbeddedResource {
                uri: "file:///e".into(),
                mime_type: None,
                text: None,
                blob: None,
            }),
        ],
        structured,
        is_error,
    })
}

#[test]
fn every_call_outcome_is_a_valid_result_in_both_revisions() {
    let outcomes = [
        every_content(false, Some(json!({"count": 3}))),
        every_content(false, Some(json!([1, 2, 3]))),
        every_content(false, Some(json!("text"))),
        every_content(false, Some(Value::Null)),
        every_content(true, None),
        Outcome::Completed(ToolResult { content: Vec::new(), structured: None, is_error: false }),
        Outcome::Completed(ToolResult { content: Vec::new(), structured: Some(json!([1])), is_error: false }),
        Outcome::ToolError("no such collection".into()),
        Outcome::Cancelled,
        Outcome::TimedOut(Timeout::Idle(Duration::from_millis(1500))),
        Outcome::TimedOut(Timeout::MaxDuration(Duration::from_secs(30))),
        Outcome::Trapped("wasm trap: unreachable".into()),
        Outcome::OutOfMemory,
        Outcome::ResultTooLarge { bytes: 10, limit: 5 },
        Outcome::InvalidResult("not JSON".into()),
        Outcome::Shutdown,
        Outcome::StartFailed("no instance".into()),
    ];
    for revision in REVISIONS {
        for outcome in &outcomes {
            let result = dispatch::call_result(outcome.clone(), &ToolLimits::default(), revision);
            let failed = !matches!(outcome, Outcome::Completed(ToolResult { is_error: false, .. }));
            assert_eq!(result.is_error, failed, "{outcome:?}");
            if let Outcome::Completed(ToolResult { structured: Some(structured), .. }) = outcome {
                // 2025-11-25 takes an object only; the rest is left to the content.
                let sent = revision == Revision::R2026_07_28 || structured.is_object();
                assert_eq!(result.structured_content.as_ref(), sent.then_some(structured), "{revision:?}");
                // What is left out is still said: as text, when the result had none.
                let texts: Vec<&str> = result
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                assert!(sent || !texts.is_empty(), "{revision:?}: {structured} is said nowhere");
                if !sent && structured == &json!([1]) {
                    assert_eq!(texts, ["[1]"]);
                }
            }
            check_result::<CallToolResult>(revision, "tools/call", result);
        }
        let refusals = [
            CallError::InvalidArguments { tool: "t".into(), problems: "/x: 1 is not a string".into() },
            CallError::ArgumentsUnchecked { tool: "t".into(), reason: "too costly".into() },
            CallError::Busy { slots: 4, waited: Duration::from_secs(1) },
            CallError::TenantBusy { slots: 1, waited: Duration::from_secs(1) },
            CallError::ShuttingDown,
        ];
        for error in refusals {
            let result = dispatch::call_error(&error, revision).expect("a tool execution error");
            assert!(result.is_error);
            check_result::<CallToolResult>(revision, "tools/call", result);
        }
        for error in [CallError::UnknownTool("nope".into()), CallError::ArgumentsNotObject] {
            let error = dispatch::call_error(&error, revision).expect_err("a protocol error");
            assert_eq!(error.code, jsonrpc::INVALID_PARAMS);
            check_error(revision, error);
        }
    }
}

#[test]
fn notifications_match_their_revision() {
    let progress = |token: Value, total: Option<f64>, message: Option<&str>| {
        dispatch::progress_notification(
            &id(token),
            Progress { done: 40.0, total, message: message.map(str::to_owned) },
        )
    };
    let listen = id(json!("listen-1"));
    for revision in REVISIONS {
        for notification in
            [progress(json!("t"), Some(120.0), Some("indexing")), progress(json!(5), None, None)]
        {
            let ServerNotification::Progress(params) = &notification else { unreachable!() };
            let read: ProgressParams = serde_json::from_value(serde_json::to_value(params).unwrap()).unwrap();
            assert_eq!(&read, params);
            check_notification(revision, notification);
        }
    }
    let legacy =
        serde_json::to_value(Outgoing::Notification(mcp::list_changed(ListKind::Tools, None))).unwrap();
    assert_eq!(legacy, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    // Listen streams are 2026-07-28 only.
    let modern = Revision::R2026_07_28;
    for kind in ListKind::ALL {
        check_notification(Revision::R2025_11_25, mcp::list_changed(kind, None));
        check_notification(modern, mcp::list_changed(kind, Some(&listen)));
    }
    let all = SubscriptionFilter {
        tools_list_changed: true,
        prompts_list_changed: true,
        resources_list_changed: true,
    };
    for filter in [SubscriptionFilter::default(), all] {
        check_notification(modern, mcp::subscription_acknowledged(&listen, filter));
    }
    check_notification(modern, mcp::listen_cancelled(&listen, "the server is shutting down"));
}

#[test]
fn log_messages_match_their_revision_at_every_level() {
    use cordon::protocol::types::{LoggingLevel, LoggingMessageParams};
    use cordon::runtime::{LogLevel, LogLine};
    for revision in REVISIONS {
        for level in [LogLevel::Trace, LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error] {
            let line = LogLine { level, message: "a line \u{1b}[31m with \"quotes\"\n".into() };
            let notification = dispatch::log_notification("echo", line.clone());
            let ServerNotification::Message(params) = &notification else { unreachable!() };
            assert_eq!(params.level, dispatch::logging_level(level));
            assert_eq!(params.data, json!(line.message));
            let read: LoggingMessageParams =
                serde_json::from_value(serde_json::to_value(params).unwrap()).unwrap();
            assert_eq!(&read, params);
            check_notification(revision, notification);
        }
        for level in LoggingLevel::ALL {
            let notice = dispatch::dropped_logs_notification("echo", 12, level, 50);
            let ServerNotification::Message(params) = &notice else { unreachable!() };
            assert_eq!(params.level, level.max(LoggingLevel::Warning));
            check_notification(revision, notice);
            // A guest line passes a client's level exactly when its MCP level is at or above it.
            for guest in [LogLevel::Trace, LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error] {
                let passes = dispatch::guest_log_threshold(level).is_some_and(|threshold| guest >= threshold);
                assert_eq!(passes, dispatch::logging_level(guest) >= level, "{guest:?} for {level:?}");
            }
        }
    }
    // The levels read back by name; anything else is -32602.
    for level in LoggingLevel::ALL {
        assert_eq!(mcp::set_level(Some(&json!({"level": level.as_str()}))), Ok(level));
    }
    for params in [json!({}), json!({"level": "loud"}), json!({"level": 1})] {
        let error = mcp::set_level(Some(&params)).unwrap_err();
        assert_eq!(error.code, -32602);
        check_error(Revision::R2025_11_25, error);
    }
}

#[test]
fn errors_and_their_data_are_valid_in_both_revisions() {
    let errors = [
        RpcError::method_not_found("nope/nope"),
        RpcError::invalid_params("Invalid params: `name` must be a string"),
        mcp::unsupported_version("1900-01-01"),
        mcp::check_capabilities(
            mcp::check_envelope(Some(&json!({"_meta": common::wire::meta()}))).ok().as_ref(),
            &["sampling".into(), "elicitation".into()],
        )
        .unwrap_err(),
        Refusal::Busy { id: None, limit: 10 }.rpc_error(),
        Refusal::TooCostly { id: None, cost: 10, limit: 5 }.rpc_error(),
    ];
    for revision in REVISIONS {
        for error in &errors {
            check_error(revision, error.clone());
        }
    }
    let data = serde_json::to_value(&errors[3].data).unwrap();
    assert_eq!(data, json!({"requiredCapabilities": {"elicitation": {}, "sampling": {}}}));
    assert_eq!(serde_json::to_value(&errors[4].data).unwrap(), json!({"retryAfterSeconds": 1}));
}
