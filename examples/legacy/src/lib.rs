//! A `cordon:tool@0.1.0` component, as one built before 0.2.0 was (wit-bindgen against
//! `wit/cordon.wit`, no SDK): one tool, `legacy_echo(text)`. The host's tests serve it
//! beside 0.2.0 components to show that 0.1.0 components keep working unchanged.

wit_bindgen::generate!({ path: "../../wit", world: "plugin" });

use cordon::tool::types::{CallResult, CleanupContext, Content, ToolInfo};
use exports::cordon::tool::tool::Guest;

struct Legacy;

impl Guest for Legacy {
    fn list() -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "legacy_echo".into(),
            title: None,
            description: "Returns the text it is given (a cordon:tool@0.1.0 component).".into(),
            input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#
                .into(),
            output_schema: None,
            annotations: None,
            requires: Vec::new(),
        }]
    }

    fn call(name: String, arguments: String) -> Result<CallResult, String> {
        if name != "legacy_echo" {
            return Err(format!("unknown tool: {name}"));
        }
        // The host validated the arguments against the schema: `text` is a string.
        let arguments: serde_json::Value =
            serde_json::from_str(&arguments).map_err(|error| error.to_string())?;
        let text = arguments["text"].as_str().unwrap_or_default().to_owned();
        Ok(CallResult { content: vec![Content::Text(text)], structured: None, is_error: false })
    }

    fn cleanup(_: CleanupContext) {}
}

export!(Legacy);
