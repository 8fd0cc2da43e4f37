//! # cordon-rules: what the host accepts in a tool list
//!
//! The host refuses to load a component whose `list` breaks one of these rules; the guest
//! SDK checks the same rules in a tool's own tests (`cordon_guest::testing::check_tools`),
//! so an author learns of a bad name or schema from `cargo test`, not from the server.
//! One crate, used by both, so the two can never disagree. It depends on `serde_json`
//! only, and builds for the host and for `wasm32-wasip2` alike.
//!
//! The rules: a tool's name has 1 to 128 characters of `A-Z a-z 0-9 _ - .` and is listed
//! once; each schema is a JSON object of at most [`MAX_SCHEMA_BYTES`], the input schema
//! with `"type": "object"` at its root (arguments are an object), the output schema with any
//! root (MCP 2026-07-28: structured output may be any JSON value); `x-mcp-header` annotations name distinct HTTP tokens on string, integer or
//! boolean properties reached from the root through `properties` alone. (The host also
//! compiles each schema as JSON Schema 2020-12, which needs a JSON Schema library; the
//! SDK's generated schemas always compile.)
//!
//! Resource templates ([`UriTemplate`]) live here too: the host routes a URI to the
//! template it matches and the SDK reads the variables out of it, the same way. So do the
//! URIs a component hands the host to send ([`check_uri`]): absolute, as the protocol's
//! schema says.

use std::fmt;

mod template;
mod uri;
pub use template::{MAX_TEMPLATE_BYTES, Overlap, UriTemplate};
pub use uri::{check_uri, check_uri_template};

use serde_json::Value;

/// The largest schema a tool may declare. Schemas are evaluated in host code that no epoch
/// can interrupt (arguments before a call, structured output after it), so their size is
/// bounded where it is cheap to: at load. Real tool schemas are a few KiB.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// The most items one list may hold (tools; the host applies it to resources, templates
/// and prompts too). Every list is checked at each load and relist, copied to clients and
/// searched to route a request: real components list tens.
pub const MAX_LISTED: usize = 4096;

/// A tool as its component lists it: the parts these rules look at.
#[derive(Debug, Clone, Copy)]
pub struct ListedTool<'a> {
    pub name: &'a str,
    /// The input schema as JSON text.
    pub input_schema: &'a str,
    /// The output schema as JSON text, if the tool has structured output.
    pub output_schema: Option<&'a str>,
}

/// A tool that passed: its schemas parsed, its `x-mcp-header` arguments found.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedTool {
    pub name: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub param_headers: Vec<ParamHeader>,
}

/// A tool argument that HTTP clients send again as the header `Mcp-Param-{name}`, as its
/// input schema asks with `"x-mcp-header": "{name}"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The header's name after `Mcp-Param-`.
    pub name: String,
    /// The property names from the arguments' root down to the value.
    pub path: Vec<String>,
    pub kind: ParamKind,
}

/// The JSON type of an argument mirrored into a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    String,
    Integer,
    Boolean,
}

/// The first rule a tool list breaks. Its `Debug` is its message, so that a test's
/// `check_tools::<P>().unwrap()` fails with words.
#[derive(Clone, PartialEq, Eq)]
pub struct Violation {
    /// The tool at fault.
    pub tool: String,
    /// What is wrong with it, in words.
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool {:?}{}", self.tool, self.problem)
    }
}

impl fmt::Debug for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Violation {}

/// Check a whole list: every tool, no name twice, at most [`MAX_LISTED`] tools.
pub fn check_tools<'a>(
    tools: impl IntoIterator<Item = ListedTool<'a>>,
) -> Result<Vec<CheckedTool>, Violation> {
    let mut checked: Vec<CheckedTool> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for tool in tools {
        if checked.len() == MAX_LISTED {
            let problem = format!(" is one tool too many: a list holds at most {MAX_LISTED}");
            return Err(Violation { tool: tool.name.to_owned(), problem });
        }
        if !names.insert(tool.name) {
            return Err(Violation { tool: tool.name.to_owned(), problem: " is listed twice".into() });
        }
        checked.push(check_tool(tool)?);
    }
    Ok(checked)
}

/// Check one tool's name and schemas.
pub fn check_tool(tool: ListedTool<'_>) -> Result<CheckedTool, Violation> {
    let fail = |problem: String| Violation { tool: tool.name.to_owned(), problem };
    check_tool_name(tool.name).map_err(|problem| fail(format!(": {problem}")))?;
    let input_schema =
        object_schema(tool.input_schema).map_err(|problem| fail(format!(": input schema {problem}")))?;
    let output_schema = tool
        .output_schema
        .map(output_schema)
        .transpose()
        .map_err(|problem| fail(format!(": output schema {problem}")))?;
    let param_headers =
        param_headers(&input_schema).map_err(|problem| fail(format!(": input schema: {problem}")))?;
    Ok(CheckedTool { name: tool.name.to_owned(), input_schema, output_schema, param_headers })
}

/// MCP tool names: 1-128 characters of `A-Z a-z 0-9 _ - .`.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 128 {
        return Err("a name must have 1 to 128 characters".into());
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))) {
        return Err(format!("a name may only use A-Z, a-z, 0-9, `_`, `-` and `.`, not {bad:?}"));
    }
    Ok(())
}

/// Parse an input schema, which must be a JSON object with `"type": "object"` at its root.
pub fn object_schema(text: &str) -> Result<Value, String> {
    let schema = schema_object(text)?;
    match schema.get("type") {
        Some(Value::String(kind)) if kind == "object" => Ok(schema),
        _ => Err("must be a JSON object with `\"type\": \"object\"` at its root".into()),
    }
}

/// Parse an output schema, which must be a JSON object (a schema, not `true` or `false`)
/// with any root: a tool's structured output may be an array, a string, a number...
pub fn output_schema(text: &str) -> Result<Value, String> {
    schema_object(text)
}

fn schema_object(text: &str) -> Result<Value, String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!("is {} bytes, more than the limit of {MAX_SCHEMA_BYTES}", text.len()));
    }
    let schema: Value = serde_json::from_str(text).map_err(|error| format!("is not valid JSON: {error}"))?;
    if !schema.is_object() {
        return Err("must be a JSON Schema object".into());
    }
    Ok(schema)
}

/// The `x-mcp-header` annotations of an input schema, checked as MCP requires (an HTTP
/// client drops a tool whose annotations break a rule): each names an HTTP token, unique
/// regardless of case, on a string, integer or boolean property reached from the root
/// through `properties` alone (not through `items`, composition or `$ref`).
pub fn param_headers(schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    collect_param_headers(schema, &mut Vec::new(), &mut found)?;
    if count_annotations(schema, false) != found.len() {
        return Err("`x-mcp-header` may only annotate properties reached from the root through \
                    `properties`"
            .into());
    }
    for (at, header) in found.iter().enumerate() {
        if found[..at].iter().any(|earlier| earlier.name.eq_ignore_ascii_case(&header.name)) {
            return Err(format!("`x-mcp-header` {:?} is used twice (names ignore case)", header.name));
        }
    }
    Ok(found)
}

fn collect_param_headers(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Ok(()) };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header") {
            let at = path.join(".");
            let name = name.as_str().filter(|name| is_http_token(name)).ok_or_else(|| {
                format!("the `x-mcp-header` of `{at}` must be a non-empty HTTP token (RFC 9110)")
            })?;
            let kind = match property.get("type").and_then(Value::as_str) {
                Some("string") => ParamKind::String,
                Some("integer") => ParamKind::Integer,
                Some("boolean") => ParamKind::Boolean,
                _ => {
                    return Err(format!(
                        "`x-mcp-header` annotates `{at}`, which is not a string, integer or boolean"
                    ));
                }
            };
            found.push(ParamHeader { name: name.to_owned(), path: path.clone(), kind });
        }
        collect_param_headers(property, path, found)?;
        path.pop();
    }
    Ok(())
}

/// Every `x-mcp-header` key in `value`, wherever it is (the keys of a `properties` map are
/// property names, not keywords).
fn count_annotations(value: &Value, property_names: bool) -> usize {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(key, inner)| {
                usize::from(!property_names && key == "x-mcp-header")
                    + count_annotations(inner, !property_names && key == "properties")
            })
            .sum(),
        Value::Array(items) => items.iter().map(|item| count_annotations(item, false)).sum(),
        _ => 0,
    }
}

/// RFC 9110 `token`: one or more of `tchar`.
fn is_http_token(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, input_schema: &'a str) -> ListedTool<'a> {
        ListedTool { name, input_schema, output_schema: None }
    }

    #[test]
    fn each_rule_names_the_tool_and_the_problem() {
        let object = r#"{"type":"object"}"#;
        let refused = |tools: Vec<ListedTool>| check_tools(tools).unwrap_err().to_string();
        assert_eq!(
            refused(vec![tool("bad name", object)]),
            r#"tool "bad name": a name may only use A-Z, a-z, 0-9, `_`, `-` and `.`, not ' '"#
        );
        assert_eq!(refused(vec![tool("", object)]), r#"tool "": a name must have 1 to 128 characters"#);
        assert_eq!(refused(vec![tool("a", object), tool("a", object)]), r#"tool "a" is listed twice"#);
        let names: Vec<String> = (0..=MAX_LISTED).map(|n| format!("t{n}")).collect();
        let many: Vec<_> = names.iter().map(|name| tool(name, object)).collect();
        assert_eq!(refused(many), r#"tool "t4096" is one tool too many: a list holds at most 4096"#);
        assert!(check_tools(names[..MAX_LISTED].iter().map(|name| tool(name, object))).is_ok());
        assert!(refused(vec![tool("a", r#"{"type":"string"}"#)]).contains("must be a JSON object"));
        assert!(refused(vec![tool("a", "{")]).contains("input schema is not valid JSON"));
        let huge = format!(r#"{{"type":"object","description":"{}"}}"#, "x".repeat(MAX_SCHEMA_BYTES));
        assert!(refused(vec![tool("a", &huge)]).contains("more than the limit"));
        let header = r#"{"type":"object","properties":{"a":{"type":"array","x-mcp-header":"A"}}}"#;
        assert!(refused(vec![tool("a", header)]).contains("not a string, integer or boolean"));
        let output = ListedTool { name: "a", input_schema: object, output_schema: Some("[]") };
        assert!(refused(vec![output]).contains("output schema must be a JSON Schema object"));
        let output = ListedTool { name: "a", input_schema: object, output_schema: Some("true") };
        assert!(refused(vec![output]).contains("output schema must be a JSON Schema object"));
    }

    #[test]
    fn a_good_list_passes_with_its_headers() {
        let schema = r#"{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}"#;
        let checked =
            check_tools(vec![tool("deploy.v2", schema), tool("echo", r#"{"type":"object"}"#)]).unwrap();
        assert_eq!(
            checked[0].param_headers,
            vec![ParamHeader { name: "Region".into(), path: vec!["region".into()], kind: ParamKind::String }]
        );
        assert_eq!(checked.len(), 2);
    }

    #[test]
    fn an_output_schema_may_have_any_root() {
        let object = r#"{"type":"object"}"#;
        for root in [r#"{"type":"array","items":{"type":"integer"}}"#, r#"{"type":"string"}"#, "{}"] {
            let listed = ListedTool { name: "a", input_schema: object, output_schema: Some(root) };
            let checked = check_tools(vec![listed]).unwrap();
            assert_eq!(checked[0].output_schema, Some(serde_json::from_str::<Value>(root).unwrap()));
        }
    }
}
