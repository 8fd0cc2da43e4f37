//! Asking the client (2025-11-25): the requests this server sends a client during a call
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`), the results the client
//! answers them with, and the capabilities a client declares at `initialize` that say which
//! of them it serves. Typed after the 2025-11-25 schema; the parts a guest writes and the
//! server only forwards (a requested schema, sampling messages) stay JSON values, checked
//! by the client. Pure data: nothing here knows the runtime.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A request from the server to the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", content = "params")]
pub enum ServerRequest {
    #[serde(rename = "elicitation/create")]
    Elicit(ElicitRequestParams),
    #[serde(rename = "sampling/createMessage")]
    CreateMessage(CreateMessageRequestParams),
    #[serde(rename = "roots/list")]
    ListRoots(ListRootsRequestParams),
}

impl ServerRequest {
    pub fn method(&self) -> &'static str {
        self.kind().method()
    }

    pub fn kind(&self) -> AskKind {
        match self {
            Self::Elicit(_) => AskKind::Elicitation,
            Self::CreateMessage(_) => AskKind::Sampling,
            Self::ListRoots(_) => AskKind::Roots,
        }
    }

    /// The request `method` with `params`, as a guest names it; an error says what is wrong.
    pub fn parse(method: &str, params: Value) -> Result<Self, String> {
        let mut message = Map::new();
        message.insert("method".into(), Value::String(method.into()));
        message.insert("params".into(), params);
        serde_json::from_value(Value::Object(message)).map_err(|error| format!("{method}: {error}"))
    }
}

/// The three things a server may ask a client, each behind its own client capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AskKind {
    Elicitation,
    Sampling,
    Roots,
}

impl AskKind {
    pub fn method(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation/create",
            Self::Sampling => "sampling/createMessage",
            Self::Roots => "roots/list",
        }
    }

    /// The client capability that lets a server send it.
    pub fn capability(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }

    /// Whether `answer`, the client's result, has this request's result's shape.
    pub fn check_result(self, answer: &Value) -> Result<(), String> {
        let checked = match self {
            Self::Elicitation => serde_json::from_value::<ElicitResult>(answer.clone()).map(drop),
            Self::Sampling => serde_json::from_value::<CreateMessageResult>(answer.clone()).map(drop),
            Self::Roots => serde_json::from_value::<ListRootsResult>(answer.clone()).map(drop),
        };
        checked.map_err(|error| format!("the client's answer to {} is malformed: {error}", self.method()))
    }
}

/// `elicitation/create`: a form (`requestedSchema`) or, with `mode: "url"`, a URL to visit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitRequestParams {
    pub message: String,
    /// The rest as the guest wrote it: `requestedSchema`, or `mode`, `url` and
    /// `elicitationId`.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `sampling/createMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateMessageRequestParams {
    pub messages: Vec<Value>,
    #[serde(rename = "maxTokens")]
    pub max_tokens: u64,
    /// The optional fields as the guest wrote them (`systemPrompt`, `modelPreferences`, ...).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `roots/list`: no parameters besides `_meta`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ListRootsRequestParams {
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    Accept,
    Decline,
    Cancel,
}

/// The client's answer to `elicitation/create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    pub action: ElicitAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
}

/// The client's answer to `sampling/createMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateMessageResult {
    pub role: String,
    pub content: Value,
    pub model: String,
    #[serde(rename = "stopReason", default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// A root the client exposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Root {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The client's answer to `roots/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListRootsResult {
    pub roots: Vec<Root>,
}

/// Which requests a client serves, from the capabilities it declared (a 2025-era client's
/// at `initialize`, a 2026-07-28 request's `clientCapabilities`). A capability is declared
/// when its key holds an object (a malformed one declares nothing). Elicitation serves
/// forms (the only kind a guest asks) unless it names `url` and not `form`: an empty
/// object means forms, and settings beside the modes (as the SDKs read it). Sampling's
/// `tools` and `context` are what a sampling request with tools, or with context beyond
/// `"none"`, needs besides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientCapabilities {
    pub elicitation: bool,
    /// Elicitation declared, whatever its modes (forms missing is then `elicitation.form`).
    pub elicitation_declared: bool,
    pub sampling: bool,
    pub roots: bool,
    pub sampling_tools: bool,
    pub sampling_context: bool,
}

/// A capability a request needs that its client did not declare: `capability`, or its
/// `sub` capability within it (`sampling.tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    pub capability: &'static str,
    pub sub: Option<&'static str>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sub {
            Some(sub) => write!(f, "{}.{sub}", self.capability),
            None => f.write_str(self.capability),
        }
    }
}

impl ClientCapabilities {
    /// Read from `initialize`'s params.
    pub fn from_initialize(params: Option<&Value>) -> Self {
        Self::from_declared(params.and_then(|params| params.get("capabilities")).and_then(Value::as_object))
    }

    /// Read from a map of declared capabilities.
    pub fn from_declared(declared: Option<&Map<String, Value>>) -> Self {
        let object =
            |name: &str| declared.and_then(|capabilities| capabilities.get(name)).and_then(Value::as_object);
        let within = |object: Option<&Map<String, Value>>, name: &str| {
            object.and_then(|object| object.get(name)).is_some_and(Value::is_object)
        };
        let elicitation = object("elicitation");
        let sampling = object("sampling");
        Self {
            elicitation: elicitation
                .is_some_and(|modes| within(Some(modes), "form") || !within(Some(modes), "url")),
            elicitation_declared: elicitation.is_some(),
            sampling: sampling.is_some(),
            roots: object("roots").is_some(),
            sampling_tools: within(sampling, "tools"),
            sampling_context: within(sampling, "context"),
        }
    }

    pub fn serves(&self, kind: AskKind) -> bool {
        match kind {
            AskKind::Elicitation => self.elicitation,
            AskKind::Sampling => self.sampling,
            AskKind::Roots => self.roots,
        }
    }

    /// What of `request` the client did not declare.
    pub fn lacks_for(&self, request: &ServerRequest) -> Vec<Missing> {
        let sampling = match request {
            ServerRequest::CreateMessage(params) => Some(&params.rest),
            _ => None,
        };
        self.lacks(request.kind(), sampling)
    }

    /// What of a request of `kind` the client did not declare: its capability, or forms
    /// within elicitation (`elicitation.form`), or for sampling (`sampling`: its optional
    /// fields) with `tools` (or `toolChoice`) the `tools` within it, and with
    /// `includeContext` other than `"none"` the `context`.
    pub fn lacks(&self, kind: AskKind, sampling: Option<&Map<String, Value>>) -> Vec<Missing> {
        if kind == AskKind::Elicitation && self.elicitation_declared && !self.elicitation {
            return vec![Missing { capability: "elicitation", sub: Some("form") }];
        }
        if !self.serves(kind) {
            return vec![Missing { capability: kind.capability(), sub: None }];
        }
        let field =
            |name: &str| sampling.and_then(|fields| fields.get(name)).filter(|value| !value.is_null());
        let mut missing = Vec::new();
        if (field("tools").is_some() || field("toolChoice").is_some()) && !self.sampling_tools {
            missing.push(Missing { capability: "sampling", sub: Some("tools") });
        }
        if field("includeContext").is_some_and(|context| context != "none") && !self.sampling_context {
            missing.push(Missing { capability: "sampling", sub: Some("context") });
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests_read_and_write_as_method_and_params() {
        let params = json!({"message": "Delete x?", "requestedSchema": {"type": "object", "properties": {}}});
        let request = ServerRequest::parse("elicitation/create", params.clone()).unwrap();
        assert_eq!(request.kind(), AskKind::Elicitation);
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({"method": "elicitation/create", "params": params})
        );
        assert!(
            ServerRequest::parse("sampling/createMessage", json!({"messages": []}))
                .unwrap_err()
                .contains("maxTokens")
        );
        assert!(ServerRequest::parse("tools/call", json!({})).is_err());
        assert_eq!(ServerRequest::parse("roots/list", json!({})).unwrap().method(), "roots/list");
    }

    #[test]
    fn answers_are_checked_against_their_request() {
        assert!(AskKind::Elicitation.check_result(&json!({"action": "accept", "content": {"a": 1}})).is_ok());
        assert!(AskKind::Elicitation.check_result(&json!({"action": "maybe"})).is_err());
        assert!(AskKind::Roots.check_result(&json!({"roots": [{"uri": "file:///x"}]})).is_ok());
        assert!(AskKind::Sampling.check_result(&json!({"role": "assistant"})).is_err());
    }

    #[test]
    fn capabilities_are_the_objects_declared() {
        let params =
            json!({"capabilities": {"elicitation": {}, "sampling": true, "roots": {"listChanged": true}}});
        let declared = ClientCapabilities::from_initialize(Some(&params));
        let expected = ClientCapabilities {
            elicitation: true,
            elicitation_declared: true,
            roots: true,
            ..ClientCapabilities::default()
        };
        assert_eq!(declared, expected);
        assert_eq!(ClientCapabilities::from_initialize(None), ClientCapabilities::default());
    }

    /// A client is sent only what it declared, down to elicitation's modes and sampling's
    /// tools and context (the client/elicitation and client/sampling pages: an empty
    /// `elicitation` means forms; tools need `sampling.tools`).
    #[test]
    fn sub_capabilities_are_needed_for_what_uses_them() {
        let declared = |capabilities: Value| ClientCapabilities::from_declared(capabilities.as_object());
        let named = |missing: Vec<Missing>| missing.iter().map(ToString::to_string).collect::<Vec<_>>();
        let request = |method: &str, params: Value| ServerRequest::parse(method, params).unwrap();
        let form =
            request("elicitation/create", json!({"message": "Sure?", "requestedSchema": {"type": "object"}}));
        for forms in [
            json!({"elicitation": {}}),
            json!({"elicitation": {"form": {}, "url": {}}}),
            json!({"elicitation": {"applyDefaults": true}}),
        ] {
            assert_eq!(named(declared(forms).lacks_for(&form)), Vec::<String>::new());
        }
        let url_only = declared(json!({"elicitation": {"url": {}}}));
        assert_eq!(named(url_only.lacks_for(&form)), ["elicitation.form"]);
        assert_eq!(named(declared(json!({})).lacks_for(&form)), ["elicitation"]);

        let sample = |extra: Value| {
            let mut params = json!({"messages": [], "maxTokens": 5});
            params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            request("sampling/createMessage", params)
        };
        let plain = sample(json!({}));
        let with_tools = sample(json!({"tools": [], "toolChoice": {"mode": "auto"}}));
        let with_context = sample(json!({"includeContext": "thisServer"}));
        let no_context = sample(json!({"includeContext": "none"}));
        let with_both = sample(json!({"toolChoice": {"mode": "auto"}, "includeContext": "allServers"}));
        let sampling = declared(json!({"sampling": {}}));
        assert!(sampling.lacks_for(&plain).is_empty());
        assert!(sampling.lacks_for(&no_context).is_empty());
        assert_eq!(named(sampling.lacks_for(&with_tools)), ["sampling.tools"]);
        assert_eq!(named(sampling.lacks_for(&with_context)), ["sampling.context"]);
        assert_eq!(named(sampling.lacks_for(&with_both)), ["sampling.tools", "sampling.context"]);
        let everything = declared(json!({"sampling": {"tools": {}, "context": {}}}));
        assert!(everything.lacks_for(&with_both).is_empty());
        let roots = request("roots/list", json!({}));
        assert_eq!(named(declared(json!({})).lacks_for(&roots)), ["roots"]);
    }
}
