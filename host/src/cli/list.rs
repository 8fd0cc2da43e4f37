//! `cordon list`: a component's tools as clients see them (MCP's tool shape: absent fields
//! left out, annotations as hints), as JSON for a pipe or a short summary for people.

use serde::Serialize;
use serde_json::Value;

use crate::dispatch;
use crate::protocol::types::Tool;
use crate::runtime::ToolSpec;

/// A tool as `cordon list --json` prints it: as `tools/list` shows it, plus what it needs
/// of the client.
#[derive(Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    tool: Tool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    requires: &'a [String],
}

/// The tools as one JSON array: each as `tools/list` shows it (no `title`, `outputSchema`
/// or `annotations` unless the tool has them; only the hints it sets, and no annotations
/// when it sets none), plus `requires` when the tool needs client capabilities.
pub fn tools_json<'a>(tools: impl IntoIterator<Item = &'a ToolSpec>) -> Value {
    let tools: Vec<Listed> = tools
        .into_iter()
        .map(|spec| {
            let mut tool = dispatch::tool(spec);
            // Annotations that set no hint say nothing.
            tool.annotations = tool.annotations.filter(|hints| !hints.is_empty());
            Listed { tool, requires: &spec.requires }
        })
        .collect();
    serde_json::to_value(tools).expect("a tool list always serializes")
}

/// The tools for people: each tool's name (and title), description, hints, what it
/// requires, its arguments (name, type, required or default, description) and whether it
/// returns structured output.
pub fn tools_text<'a>(tools: impl IntoIterator<Item = &'a ToolSpec>) -> String {
    let mut out = String::new();
    for spec in tools {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&spec.name);
        if let Some(title) = &spec.title {
            out.push_str(&format!(" ({title})"));
        }
        out.push('\n');
        if !spec.description.is_empty() {
            out.push_str(&format!("  {}\n", spec.description));
        }
        if let Some(annotations) = &spec.annotations {
            let hints: Vec<String> = [
                ("read-only", annotations.read_only),
                ("destructive", annotations.destructive),
                ("idempotent", annotations.idempotent),
                ("open-world", annotations.open_world),
            ]
            .into_iter()
            .filter_map(|(name, hint)| {
                hint.map(|hint| if hint { name.to_owned() } else { format!("not {name}") })
            })
            .collect();
            if !hints.is_empty() {
                out.push_str(&format!("  hints: {}\n", hints.join(", ")));
            }
        }
        if !spec.requires.is_empty() {
            out.push_str(&format!("  requires: {}\n", spec.requires.join(", ")));
        }
        let arguments = arguments(&spec.input_schema);
        if arguments.is_empty() {
            out.push_str("  arguments: none\n");
        } else {
            out.push_str("  arguments:\n");
            for line in arguments {
                out.push_str(&format!("    {line}\n"));
            }
        }
        if let Some(schema) = &spec.output_schema {
            let fields: Vec<&str> = properties(schema).map(|(name, _)| name.as_str()).collect();
            match fields.as_slice() {
                [] => out.push_str("  structured output\n"),
                fields => out.push_str(&format!("  structured output: {}\n", fields.join(", "))),
            }
        }
    }
    // Titles and descriptions are the component's: no terminal control from them.
    crate::text::printable_lines(&out).into_owned()
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

/// One line per top-level property, the required ones first: `name: type, required —
/// description`.
fn arguments(schema: &Value) -> Vec<String> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let rank = |name: &str| required.iter().position(|wanted| *wanted == name).unwrap_or(usize::MAX);
    let mut properties: Vec<_> = properties(schema).collect();
    properties.sort_by_key(|(name, _)| (rank(name), name.as_str()));
    properties
        .into_iter()
        .map(|(name, property)| {
            let mut line = format!("{name}: {}", type_name(property));
            if required.contains(&name.as_str()) {
                line.push_str(", required");
            } else if let Some(default) = property.get("default") {
                line.push_str(&format!(", default {default}"));
            }
            if let Some(description) = property.get("description").and_then(Value::as_str) {
                line.push_str(&format!(" — {description}"));
            }
            line
        })
        .collect()
}

/// A property's type in a few words: its `type` (or types), its `enum` values, the name
/// its `$ref` points at, else `any`.
fn type_name(property: &Value) -> String {
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        return format!("one of {}", values.join(", "));
    }
    match property.get("type") {
        Some(Value::String(kind)) if kind == "array" => match property.get("items") {
            Some(items) => format!("array of {}", type_name(items)),
            None => "array".into(),
        },
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ => match property.get("$ref").and_then(Value::as_str) {
            Some(reference) => reference.rsplit('/').next().unwrap_or(reference).to_owned(),
            None => "any".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runtime::ToolAnnotations;

    fn spec(name: &str, schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: None,
            description: format!("The {name} tool."),
            input_schema: schema,
            output_schema: None,
            annotations: None,
            requires: Vec::new(),
            param_headers: Vec::new(),
        }
    }

    #[test]
    fn text_escapes_a_components_terminal_controls() {
        let mut tool = spec("t", json!({"type": "object"}));
        tool.title = Some("T\u{1b}[2K".into());
        tool.description = "first\nsecond\r\u{9b}".into();
        let text = tools_text([&tool]);
        assert!(!text.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{text:?}");
        assert!(text.contains("T\\u{1b}[2K") && text.contains("first\nsecond\\r\\u{9b}"), "{text:?}");
    }

    #[test]
    fn json_leaves_out_absent_fields_and_keeps_annotations() {
        let mut bare = spec("bare", json!({"type": "object"}));
        bare.annotations =
            Some(ToolAnnotations { read_only: None, destructive: None, idempotent: None, open_world: None });
        let mut hinted = spec("hinted", json!({"type": "object"}));
        hinted.annotations = Some(ToolAnnotations {
            read_only: Some(true),
            destructive: None,
            idempotent: Some(false),
            open_world: None,
        });
        hinted.requires = vec!["sampling".into()];
        assert_eq!(
            tools_json([&bare, &hinted]),
            json!([
                {"name": "bare", "description": "The bare tool.", "inputSchema": {"type": "object"}},
                {"name": "hinted", "description": "The hinted tool.", "inputSchema": {"type": "object"},
                 "annotations": {"readOnlyHint": true, "idempotentHint": false}, "requires": ["sampling"]},
            ])
        );
    }

    #[test]
    fn text_lists_arguments_hints_and_structured_output() {
        let mut tool = spec(
            "reindex",
            json!({"type": "object", "required": ["collection"], "properties": {
                "collection": {"type": "string", "description": "What to reindex."},
                "total": {"type": "integer", "default": 120},
                "mode": {"enum": ["fast", "full"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "when": {"type": ["string", "null"]},
            }}),
        );
        tool.title = Some("Reindex".into());
        tool.annotations = Some(ToolAnnotations {
            read_only: Some(false),
            destructive: None,
            idempotent: Some(true),
            open_world: None,
        });
        tool.output_schema = Some(json!({"type": "object", "properties": {"count": {"type": "integer"}}}));
        let bare = spec("bare", json!({"type": "object"}));
        assert_eq!(
            tools_text([&tool, &bare]),
            "reindex (Reindex)\n  The reindex tool.\n  hints: not read-only, idempotent\n  arguments:\n    \
             collection: string, required — What to reindex.\n    mode: one of \"fast\", \"full\"\n    \
             tags: array of string\n    total: integer, default 120\n    when: string or null\n  \
             structured output: count\n\nbare\n  The bare tool.\n  arguments: none\n"
        );
    }
}
