//! The fixture tools of the official MCP conformance suite (`@modelcontextprotocol/conformance`),
//! as a Cordon component: `cordon serve --http` on this component is what CI runs the
//! suite against. Names and behaviour follow the suite's server scenarios: its tools, and
//! the resources, resource template, prompts and completion its `resources-*`,
//! `prompts-*` and `completion-complete` scenarios ask for.

use std::time::Duration;

use cordon_guest::input::{Ask, Elicited, Reply, Round};
use cordon_guest::{
    CallResult, Content, Media, Plugin, Prompt, PromptMessage, Resource, ResourceBody, ResourceTemplate,
    Tool, ToolError,
};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false))]
struct NoArgs {}

/// A 1×1 transparent PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00,
    0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01,
    0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A WAV header with a few silent 8 kHz mono samples.
fn wav() -> Vec<u8> {
    let samples = [0u8; 16];
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + samples.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&8000u32.to_le_bytes());
    wav.extend_from_slice(&8000u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&8u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    wav.extend_from_slice(&samples);
    wav
}

fn image() -> Content {
    Content::Image(Media { data: PNG.to_vec(), mime_type: "image/png".into() })
}

fn resource() -> Content {
    Content::EmbeddedResource(cordon_guest::EmbeddedResource {
        uri: "test://embedded-resource".into(),
        mime_type: Some("text/plain".into()),
        text: Some("This is an embedded resource content.".into()),
        blob: None,
    })
}

fn simple_text(_: NoArgs) -> Result<String, ToolError> {
    Ok("This is a simple text response for testing.".into())
}

fn image_content(_: NoArgs) -> Result<CallResult, ToolError> {
    Ok(CallResult::default().with(image()))
}

fn audio_content(_: NoArgs) -> Result<CallResult, ToolError> {
    Ok(CallResult::default().with(Content::Audio(Media { data: wav(), mime_type: "audio/wav".into() })))
}

fn embedded_resource(_: NoArgs) -> Result<CallResult, ToolError> {
    Ok(CallResult::default().with(resource()))
}

fn multiple_content_types(_: NoArgs) -> Result<CallResult, ToolError> {
    Ok(CallResult::text("Multiple content types test:").with(image()).with(resource()))
}

fn error_handling(_: NoArgs) -> Result<CallResult, ToolError> {
    let mut result = CallResult::text("This tool intentionally returns an error for testing");
    result.is_error = true;
    Ok(result)
}

fn tool_with_progress(_: NoArgs) -> Result<String, ToolError> {
    for done in [0.0, 50.0, 100.0] {
        cordon_guest::check_cancelled()?;
        cordon_guest::progress(done, Some(100.0), &format!("Progress {done}%"));
        std::thread::sleep(Duration::from_millis(60));
    }
    Ok("Progress test completed".into())
}

/// The schema the suite's `json-schema-2020-12` scenario expects to see preserved.
fn schema_2020_12() -> serde_json::Value {
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

fn json_schema_tool(_: serde_json::Value) -> Result<String, ToolError> {
    Ok("ok".into())
}

fn missing_capability(_: NoArgs) -> Result<String, ToolError> {
    Ok("This tool needs the client's sampling capability, so it only runs when it is declared.".into())
}

fn logging_tool(_: NoArgs) -> Result<String, ToolError> {
    // The client sees it only when its request asks for a level (info or below).
    cordon_guest::log(cordon_guest::LogLevel::Info, "test_logging_tool ran");
    Ok("Logged to the operator log and, when asked, to the client.".into())
}

/// Three info lines about 50 ms apart, for the suite's `tools-call-with-logging`.
fn tool_with_logging(_: NoArgs) -> Result<String, ToolError> {
    let lines = ["Tool execution started", "Tool processing data", "Tool execution completed"];
    for (index, line) in lines.into_iter().enumerate() {
        if index > 0 {
            cordon_guest::check_cancelled()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        cordon_guest::log(cordon_guest::LogLevel::Info, line);
    }
    Ok("Logged three messages.".into())
}

#[derive(Deserialize, JsonSchema)]
struct RegionArgs {
    /// Where to look; HTTP clients repeat it in the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

fn custom_header(args: RegionArgs) -> Result<String, ToolError> {
    Ok(format!("region: {}", args.region))
}

fn streaming_elicitation(_: NoArgs) -> Result<String, ToolError> {
    Ok("This server sends no requests to clients; nothing to elicit.".into())
}

/// The form the `input-required-result-*` scenarios elicit: one required property.
fn form(property: &str, kind: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": { property: { "type": kind } },
        "required": [property],
    })
}

/// The sampling params those scenarios ask with.
fn sampling(text: &str, max_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": text } }],
        "maxTokens": max_tokens,
    })
}

/// A field of an accepted elicitation, as text (a decline or cancel gives none).
fn accepted(round: &Round, key: &str, field: &str) -> Option<String> {
    match round.elicited(key)? {
        Elicited::Accepted(form) => Some(match form.get(field)? {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        }),
        Elicited::Declined | Elicited::Cancelled => None,
    }
}

type Asked = Result<Reply<String>, ToolError>;

/// Round 1 asks the user's name; round 2 greets them. A retry without the answer (or with
/// the wrong keys) asks again.
fn input_elicitation(_: NoArgs, round: &Round) -> Asked {
    match round.response("user_name").filter(|answer| answer.is_object()) {
        Some(_) => {
            let name = accepted(round, "user_name", "name").unwrap_or_else(|| "stranger".into());
            Ok(Reply::Done(format!("Hello, {name}!")))
        }
        None => Ok(Ask::new().elicit("user_name", "What is your name?", form("name", "string")).into()),
    }
}

fn input_sampling(_: NoArgs, round: &Round) -> Asked {
    match round.sampled_text("capital_question") {
        Some(text) => Ok(Reply::Done(format!("The model answered: {text}"))),
        None => {
            Ok(Ask::new().sample("capital_question", sampling("What is the capital of France?", 100)).into())
        }
    }
}

fn input_list_roots(_: NoArgs, round: &Round) -> Asked {
    match round.roots("client_roots") {
        Some(roots) => {
            let uris: Vec<String> = roots.into_iter().map(|root| root.uri).collect();
            Ok(Reply::Done(format!("The client has {} root(s): {}", uris.len(), uris.join(", "))))
        }
        None => Ok(Ask::new().list_roots("client_roots").into()),
    }
}

/// The state handed out in round 1, checked in round 2.
const STATE: &[u8] = b"request-state-round-1";

fn input_request_state(_: NoArgs, round: &Round) -> Asked {
    match (round.response("confirm"), round.state()) {
        (Some(_), Some(STATE)) => Ok(Reply::Done("state-ok: the request state came back intact".into())),
        _ => Ok(Ask::new().elicit("confirm", "Please confirm", form("ok", "boolean")).state(STATE).into()),
    }
}

fn input_multiple(_: NoArgs, round: &Round) -> Asked {
    let keys = ["user_name", "greeting", "client_roots"];
    if keys.iter().all(|key| round.response(key).is_some()) {
        let name = accepted(round, "user_name", "name").unwrap_or_else(|| "stranger".into());
        let greeting = round.sampled_text("greeting").unwrap_or_default();
        let roots = round.roots("client_roots").map_or(0, |roots| roots.len());
        return Ok(Reply::Done(format!("{greeting} {name} ({roots} root(s))")));
    }
    Ok(Ask::new()
        .elicit("user_name", "What is your name?", form("name", "string"))
        .sample("greeting", sampling("Generate a greeting", 50))
        .list_roots("client_roots")
        .state("multiple")
        .into())
}

/// Three rounds: the name, then the colour (the state carries the name), then the answer.
fn input_multi_round(_: NoArgs, round: &Round) -> Asked {
    match round.state() {
        Some(name) if name.starts_with(b"name:") => {
            let name = String::from_utf8_lossy(&name[5..]).into_owned();
            match accepted(round, "step2", "color") {
                Some(color) => Ok(Reply::Done(format!("{name} likes {color}."))),
                None => Ok(Ask::new()
                    .elicit("step2", "Step 2: What is your favorite color?", form("color", "string"))
                    .state(format!("name:{name}"))
                    .into()),
            }
        }
        _ => match accepted(round, "step1", "name") {
            Some(name) => Ok(Ask::new()
                .elicit("step2", "Step 2: What is your favorite color?", form("color", "string"))
                .state(format!("name:{name}"))
                .into()),
            None => Ok(Ask::new()
                .elicit("step1", "Step 1: What is your name?", form("name", "string"))
                .state("step1")
                .into()),
        },
    }
}

fn input_tampered_state(_: NoArgs, round: &Round) -> Asked {
    match (round.response("confirm"), round.state()) {
        (Some(_), Some(b"tamper-proof")) => Ok(Reply::Done("state-ok".into())),
        _ => Ok(Ask::new()
            .elicit("confirm", "Please confirm", form("ok", "boolean"))
            .state("tamper-proof")
            .into()),
    }
}

/// Asks only what the client declared it can answer.
fn input_capabilities(_: NoArgs, round: &Round) -> Asked {
    if round.response("question").is_some() || round.response("confirm").is_some() {
        return Ok(Reply::Done("answered".into()));
    }
    let mut ask = Ask::new();
    if round.can_elicit() {
        ask = ask.elicit("confirm", "Please confirm", form("ok", "boolean"));
    }
    if round.can_sample() {
        ask = ask.sample("question", sampling("Say hello", 20));
    }
    if ask.keys().next().is_none() {
        return Err(ToolError::new(
            "the client can be asked nothing: it declared neither elicitation nor sampling",
        ));
    }
    Ok(ask.into())
}

/// `test_elicitation`'s argument.
#[derive(Deserialize, JsonSchema)]
struct MessageArgs {
    /// The message to show the user.
    message: String,
}

/// `test_sampling`'s argument.
#[derive(Deserialize, JsonSchema)]
struct PromptArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

/// What the user did with elicitation `key`, as the 2025-11-25 scenarios print it.
fn elicitation_outcome(round: &Round, key: &str) -> Option<String> {
    let answer = round.response(key)?;
    let action = answer.get("action")?.as_str()?.to_owned();
    let content = answer.get("content").cloned().unwrap_or_else(|| serde_json::json!({}));
    Some(format!("action={action}, content={content}"))
}

/// `tools-call-elicitation` (2025-11-25): asks for a username and an email address.
fn elicitation(args: MessageArgs, round: &Round) -> Asked {
    if let Some(outcome) = elicitation_outcome(round, "user") {
        return Ok(Reply::Done(format!("User response: {outcome}")));
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" },
        },
        "required": ["username", "email"],
    });
    Ok(Ask::new().elicit("user", &args.message, schema).into())
}

/// `elicitation-sep1034-defaults`: a default for every primitive type.
fn elicitation_defaults(_: NoArgs, round: &Round) -> Asked {
    if let Some(outcome) = elicitation_outcome(round, "defaults") {
        return Ok(Reply::Done(format!("Elicitation completed: {outcome}")));
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "default": "John Doe" },
            "age": { "type": "integer", "default": 30 },
            "score": { "type": "number", "default": 95.5 },
            "status": { "type": "string", "enum": ["active", "inactive", "pending"], "default": "active" },
            "verified": { "type": "boolean", "default": true },
        },
    });
    Ok(Ask::new().elicit("defaults", "Please review your details.", schema).into())
}

/// `elicitation-sep1330-enums`: the five kinds of enum.
fn elicitation_enums(_: NoArgs, round: &Round) -> Asked {
    if let Some(outcome) = elicitation_outcome(round, "enums") {
        return Ok(Reply::Done(format!("Elicitation completed: {outcome}")));
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
            "titledSingle": { "type": "string", "oneOf": [
                { "const": "value1", "title": "First Option" },
                { "const": "value2", "title": "Second Option" },
                { "const": "value3", "title": "Third Option" },
            ] },
            "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"] },
            "untitledMulti": { "type": "array", "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
            "titledMulti": { "type": "array", "items": { "anyOf": [
                { "const": "value1", "title": "First Choice" },
                { "const": "value2", "title": "Second Choice" },
                { "const": "value3", "title": "Third Choice" },
            ] } },
        },
    });
    Ok(Ask::new().elicit("enums", "Please choose.", schema).into())
}

/// `tools-call-sampling` (2025-11-25): asks the client's model.
fn sampling_tool(args: PromptArgs, round: &Round) -> Asked {
    match round.sampled_text("answer") {
        Some(text) => Ok(Reply::Done(format!("LLM response: {text}"))),
        None => Ok(Ask::new().sample("answer", sampling(&args.prompt, 100)).into()),
    }
}

/// The files whose presence adds `test_dynamic_tool` to the tool list and
/// `test_dynamic_prompt` to the prompt list (in the fixture's data directory: a list is
/// built in a fresh instance each time, so the state lives there).
const TOOL_MARKER: &str = "dynamic-tool";
const PROMPT_MARKER: &str = "dynamic-prompt";

fn is_on(marker: &str) -> bool {
    cordon_guest::data_dir().join(marker).exists()
}

/// Turn `marker` on or off, say that the lists changed (so that the host lists the
/// component again and tells the clients that listen), and say what became of `listed`.
fn toggle(marker: &str, listed: &str) -> Result<String, ToolError> {
    let path = cordon_guest::data_dir().join(marker);
    let added = !path.exists();
    if added {
        std::fs::write(&path, b"on")?;
    } else {
        std::fs::remove_file(&path)?;
    }
    cordon_guest::lists_changed();
    Ok(format!("{listed} {}", if added { "added" } else { "removed" }))
}

/// `server-stateless` (2026-07-28): adds `test_dynamic_tool` to the tool list, or takes it
/// away again.
fn trigger_tool_change(_: NoArgs) -> Result<String, ToolError> {
    toggle(TOOL_MARKER, "test_dynamic_tool")
}

/// `server-stateless` (2026-07-28): adds `test_dynamic_prompt` to the prompt list, or takes
/// it away again.
fn trigger_prompt_change(_: NoArgs) -> Result<String, ToolError> {
    toggle(PROMPT_MARKER, "test_dynamic_prompt")
}

fn dynamic_tool(_: NoArgs) -> Result<String, ToolError> {
    Ok("This tool comes and goes with test_trigger_tool_change.".into())
}

struct Fixture;

impl Plugin for Fixture {
    fn tools() -> Vec<Tool> {
        let mut tools = vec![
            Tool::new("test_simple_text", "Returns simple text content.", simple_text).read_only(),
            Tool::new("test_image_content", "Returns image content.", image_content).read_only(),
            Tool::new("test_audio_content", "Returns audio content.", audio_content).read_only(),
            Tool::new("test_embedded_resource", "Returns an embedded resource.", embedded_resource)
                .read_only(),
            Tool::new(
                "test_multiple_content_types",
                "Returns text, an image and a resource.",
                multiple_content_types,
            )
            .read_only(),
            Tool::new("test_error_handling", "Always fails, as a tool error.", error_handling).read_only(),
            Tool::new(
                "test_tool_with_progress",
                "Reports progress 0, 50 and 100 of 100.",
                tool_with_progress,
            )
            .read_only(),
            Tool::new(
                "test_missing_capability",
                "Requires the client's sampling capability.",
                missing_capability,
            )
            .requires("sampling"),
            Tool::new("test_logging_tool", "Writes one info line to the log.", logging_tool).read_only(),
            Tool::new(
                "test_tool_with_logging",
                "Logs three info lines about 50 ms apart.",
                tool_with_logging,
            )
            .read_only(),
            Tool::with_schema(
                "json_schema_2020_12_tool",
                "Takes arguments described with JSON Schema 2020-12 keywords.",
                schema_2020_12,
                json_schema_tool,
            ),
            Tool::new("test_streaming_elicitation", "Answers without eliciting.", streaming_elicitation)
                .requires("elicitation"),
            Tool::asking(
                "test_elicitation",
                "Asks the user for a username and an email address (2025-11-25: elicitation/create).",
                elicitation,
            ),
            Tool::asking(
                "test_elicitation_sep1034_defaults",
                "Asks with a default for every primitive type (SEP-1034).",
                elicitation_defaults,
            ),
            Tool::asking(
                "test_elicitation_sep1330_enums",
                "Asks with every kind of enum (SEP-1330).",
                elicitation_enums,
            ),
            Tool::asking(
                "test_sampling",
                "Asks the client's model (2025-11-25: sampling/createMessage).",
                sampling_tool,
            ),
            Tool::asking(
                "test_input_required_result_elicitation",
                "Asks the user's name.",
                input_elicitation,
            ),
            Tool::asking("test_input_required_result_sampling", "Asks the client's model.", input_sampling),
            Tool::asking(
                "test_input_required_result_list_roots",
                "Asks the client's roots.",
                input_list_roots,
            ),
            Tool::asking(
                "test_input_required_result_request_state",
                "Asks for a confirmation, with state.",
                input_request_state,
            ),
            Tool::asking(
                "test_input_required_result_multiple_inputs",
                "Asks three things at once.",
                input_multiple,
            ),
            Tool::asking("test_input_required_result_multi_round", "Asks twice, in turn.", input_multi_round),
            Tool::asking(
                "test_input_required_result_tampered_state",
                "Asks for a confirmation, with state to tamper with.",
                input_tampered_state,
            ),
            Tool::asking(
                "test_input_required_result_capabilities",
                "Asks only what the client can answer.",
                input_capabilities,
            ),
            Tool::new(
                "test_custom_header",
                "Echoes its region, which HTTP clients also send as a header (x-mcp-header).",
                custom_header,
            )
            .read_only(),
            Tool::new(
                "test_trigger_tool_change",
                "Adds test_dynamic_tool to the tool list, or takes it away again.",
                trigger_tool_change,
            ),
            Tool::new(
                "test_trigger_prompt_change",
                "Adds test_dynamic_prompt to the prompt list, or takes it away again.",
                trigger_prompt_change,
            ),
        ];
        if is_on(TOOL_MARKER) {
            tools.push(
                Tool::new(
                    "test_dynamic_tool",
                    "Listed while test_trigger_tool_change has it on.",
                    dynamic_tool,
                )
                .read_only(),
            );
        }
        tools
    }

    fn resources() -> Vec<Resource> {
        vec![
            Resource::new("test://static-text", "static-text", || {
                Ok(ResourceBody::text("This is the content of the static text resource."))
            })
            .description("A static text resource.")
            .mime_type("text/plain"),
            Resource::new("test://static-binary", "static-binary", || Ok(ResourceBody::blob(PNG)))
                .description("A static binary resource (a PNG image).")
                .mime_type("image/png"),
        ]
    }

    fn resource_templates() -> Vec<ResourceTemplate> {
        vec![
            ResourceTemplate::new("test://template/{id}/data", "template-data", |found| {
                let id = found.get("id").unwrap_or_default();
                let data =
                    serde_json::json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                Ok(ResourceBody::text(data.to_string()))
            })
            .description("Data for an id, substituted into the URI.")
            .mime_type("application/json")
            .complete("id", |typed, _| {
                ["123", "456", "789"]
                    .iter()
                    .filter(|id| id.starts_with(typed))
                    .map(|id| id.to_string())
                    .collect()
            }),
        ]
    }

    fn prompts() -> Vec<Prompt> {
        let mut prompts = vec![
            Prompt::new("test_simple_prompt", "A prompt without arguments.", |_| {
                Ok(vec![PromptMessage::user_text("This is a simple prompt for testing.")])
            }),
            Prompt::new("test_prompt_with_arguments", "A prompt with two arguments.", |arguments| {
                let (arg1, arg2) = (arguments.required("arg1")?, arguments.required("arg2")?);
                Ok(vec![PromptMessage::user_text(format!(
                    "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
                ))])
            })
            .argument("arg1", "First test argument", true)
            .argument("arg2", "Second test argument", true)
            .complete("arg1", |typed, _| {
                ["test", "testing", "tested"]
                    .iter()
                    .filter(|value| value.starts_with(typed))
                    .map(|value| value.to_string())
                    .collect()
            }),
            Prompt::new(
                "test_prompt_with_embedded_resource",
                "A prompt embedding a resource.",
                |arguments| {
                    let uri = arguments.required("resourceUri")?;
                    Ok(vec![
                        PromptMessage::user(Content::EmbeddedResource(cordon_guest::EmbeddedResource {
                            uri: uri.to_owned(),
                            mime_type: Some("text/plain".into()),
                            text: Some("Embedded resource content for testing.".into()),
                            blob: None,
                        })),
                        PromptMessage::user_text("Please process the embedded resource above."),
                    ])
                },
            )
            .argument("resourceUri", "URI of the resource to embed", true),
            Prompt::asking(
                "test_input_required_result_prompt",
                "Asks the user for context, then renders.",
                |_, round| match accepted(round, "user_context", "context") {
                    Some(context) => Ok(Reply::Done(vec![PromptMessage::user_text(format!(
                        "Use this context: {context}"
                    ))])),
                    None => Ok(Ask::new()
                        .elicit(
                            "user_context",
                            "What context should the prompt use?",
                            form("context", "string"),
                        )
                        .into()),
                },
            ),
            Prompt::new("test_prompt_with_image", "A prompt with an image.", |_| {
                Ok(vec![
                    PromptMessage::user(image()),
                    PromptMessage::user_text("Please analyze the image above."),
                ])
            }),
        ];
        if is_on(PROMPT_MARKER) {
            prompts.push(Prompt::new(
                "test_dynamic_prompt",
                "Listed while test_trigger_prompt_change has it on.",
                |_| Ok(vec![PromptMessage::user_text("A prompt that comes and goes.")]),
            ));
        }
        prompts
    }
}

cordon_guest::export_plugin!(Fixture);
