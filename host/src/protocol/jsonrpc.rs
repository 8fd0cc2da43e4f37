//! JSON-RPC 2.0 framing: turning bytes into a request, a notification or a precise error,
//! and building responses.

use serde_json::{Map, Value, json};

/// A request id: a string or an integer (never null, never fractional).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    /// The id in `value`, if it is a valid one.
    pub fn parse(value: &Value) -> Option<Self> {
        match value {
            Value::String(text) => Some(Self::String(text.clone())),
            Value::Number(number) => number.as_i64().map(Self::Number),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Self::Number(number) => json!(number),
            Self::String(text) => json!(text),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// An HTTP header is missing, malformed or disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// A tool needs a client capability the request did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// The requested protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }
}

/// One parsed message from a client.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A message that cannot be served, with the id to answer to when one could be read.
    Invalid {
        id: Option<RequestId>,
        error: RpcError,
    },
    /// A response from the client: this server sends no requests, so it is ignored.
    Response,
}

/// Parse one message. Never fails: bad input becomes [`Incoming::Invalid`].
pub fn parse(bytes: &[u8]) -> Incoming {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(error) => {
            return Incoming::Invalid {
                id: None,
                error: RpcError::new(PARSE_ERROR, format!("Parse error: {error}")),
            };
        }
    };
    classify(value)
}

/// Classify a JSON value as a JSON-RPC message.
pub fn classify(value: Value) -> Incoming {
    let Value::Object(mut message) = value else {
        let problem = if value.is_array() {
            "Invalid Request: batches are not supported; send one message at a time"
        } else {
            "Invalid Request: a message must be a JSON object"
        };
        return Incoming::Invalid { id: None, error: RpcError::new(INVALID_REQUEST, problem) };
    };
    let id = message.get("id").map(|id| (RequestId::parse(id), id.clone()));
    let invalid = |id: Option<RequestId>, problem: &str| Incoming::Invalid {
        id,
        error: RpcError::new(INVALID_REQUEST, format!("Invalid Request: {problem}")),
    };
    if let Some((None, raw)) = &id {
        let problem = if raw.is_null() { "id must not be null" } else { "id must be a string or an integer" };
        return invalid(None, problem);
    }
    let id = id.and_then(|(id, _)| id);
    if message.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return invalid(id, "`jsonrpc` must be \"2.0\"");
    }
    let params = message.remove("params");
    if params.as_ref().is_some_and(|params| !params.is_object() && !params.is_array()) {
        return invalid(id, "`params` must be an object");
    }
    match message.remove("method") {
        Some(Value::String(method)) => match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        },
        Some(_) => invalid(id, "`method` must be a string"),
        None if message.contains_key("result") || message.contains_key("error") => Incoming::Response,
        None => invalid(id, "`method` is missing"),
    }
}

/// A success response.
pub fn success(id: &RequestId, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.to_json(), "result": result})
}

/// An error response; without an id when none could be read (the schema forbids a null id).
pub fn failure(id: Option<&RequestId>, error: &RpcError) -> Value {
    let mut body = Map::new();
    body.insert("code".into(), json!(error.code));
    body.insert("message".into(), json!(error.message));
    if let Some(data) = &error.data {
        body.insert("data".into(), data.clone());
    }
    let mut message = Map::new();
    message.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        message.insert("id".into(), id.to_json());
    }
    message.insert("error".into(), Value::Object(body));
    Value::Object(message)
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_json_is_a_parse_error_without_id() {
        let Incoming::Invalid { id: None, error } = parse(b"{nope") else { panic!() };
        assert_eq!(error.code, PARSE_ERROR);
        assert!(failure(None, &error).get("id").is_none());
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        assert!(matches!(
            parse(b"\xff\xfe"),
            Incoming::Invalid { error: RpcError { code: PARSE_ERROR, .. }, .. }
        ));
    }

    #[test]
    fn shapes_are_checked() {
        let cases: [(&str, i64); 6] = [
            (r#"[]"#, INVALID_REQUEST),
            (r#"5"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#, INVALID_REQUEST),
        ];
        for (text, code) in cases {
            match parse(text.as_bytes()) {
                Incoming::Invalid { error, .. } => assert_eq!(error.code, code, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn requests_and_notifications_are_told_apart() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}"#),
            Incoming::Request { id: RequestId::String(_), .. }
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#),
            Incoming::Notification { .. }
        ));
        assert_eq!(parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Incoming::Response);
    }
}
