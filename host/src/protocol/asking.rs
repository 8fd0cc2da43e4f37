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

/// Which requests a 2025-era client serves, from the `capabilities` of its `initialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientCapabilities {
    pub elicitation: bool,
    pub sampling: bool,
    pub roots: bool,
}

impl ClientCapabilities {
    /// Read from `initialize`'s params: a capability is declared when its key holds an
    /// object (a malformed one declares nothing).
    pub fn from_initialize(params: Option<&Value>) -> Self {
        let declared = params.and_then(|params| params.get("capabilities")).and_then(Value::as_object);
        let has = |name: &str| {
            declared.and_then(|capabilities| capabilities.get(name)).is_some_and(Value::is_object)
        };
        Self { elicitation: has("elicitation"), sampling: has("sampling"), roots: has("roots") }
    }

    pub fn serves(&self, kind: AskKind) -> bool {
        match kind {
            AskKind::Elicitation => self.elicitation,
            AskKind::Sampling => self.sampling,
            AskKind::Roots => self.roots,
        }
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
        assert_eq!(declared, ClientCapabilities { elicitation: true, sampling: false, roots: true });
        assert_eq!(ClientCapabilities::from_initialize(None), ClientCapabilities::default());
    }
}
