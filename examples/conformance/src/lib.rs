//! The fixture tools of the official MCP conformance suite (`@modelcontextprotocol/conformance`),
//! as a Cordon component: `cordon serve --http` on this component is what CI runs the
//! suite against. Names and behaviour follow the suite's server scenarios.

use std::time::Duration;

use cordon_guest::{CallResult, Content, Media, Plugin, Tool, ToolError};
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

struct Fixture;

impl Plugin for Fixture {
    fn tools() -> Vec<Tool> {
        vec![
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
            Tool::new(
                "test_custom_header",
                "Echoes its region, which HTTP clients also send as a header (x-mcp-header).",
                custom_header,
            )
            .read_only(),
        ]
    }
}

cordon_guest::export_plugin!(Fixture);
