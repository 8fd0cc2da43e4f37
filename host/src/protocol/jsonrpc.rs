//! JSON-RPC 2.0 framing: turning bytes into a request, a notification or a precise error,
//! and the messages the server writes ([`Outgoing`]), serialized straight to bytes.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::asking::ServerRequest;
use super::types::{ErrorData, ServerNotification, ServerResult};

/// A request id: a string or an integer (never null, never fractional).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    Number(IntegerId),
    String(String),
}

/// An integer id: compared by its value (`1` and `1.0` are one id), answered with the number
/// as it was parsed (`1.0` comes back as `1.0`).
#[derive(Debug, Clone)]
pub struct IntegerId {
    value: i128,
    parsed: serde_json::Number,
}

impl PartialEq for IntegerId {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for IntegerId {}

impl std::hash::Hash for IntegerId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.value.hash(state);
    }
}

/// The largest integer a float holds exactly: beyond it, `1e20` and `1e20 + 1` are one float.
const EXACT_FLOAT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// The longest string id (or progress token) taken: each is copied into every message
/// about its request (each progress notification, the answer), so a longer one is
/// refused, not carried.
pub const MAX_ID_BYTES: usize = 256;

/// The longest error message sent. Messages may quote what the client sent (a method, a
/// name, a header), which only the body's size bounds: past this they are cut.
pub const MAX_ERROR_MESSAGE: usize = 4096;

impl RequestId {
    /// The id in `value`, if it is a valid one (a string of at most [`MAX_ID_BYTES`], or
    /// an integer).
    pub fn parse(value: &Value) -> Option<Self> {
        match value {
            Value::String(text) if text.len() <= MAX_ID_BYTES => Some(Self::String(text.clone())),
            Value::Number(number) => {
                integer_value(number).map(|value| Self::Number(IntegerId { value, parsed: number.clone() }))
            }
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Self::Number(id) => Value::Number(id.parsed.clone()),
            Self::String(text) => Value::String(text.clone()),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(id) => id.parsed.serialize(serializer),
            Self::String(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::parse(&value).ok_or_else(|| serde::de::Error::custom("an id must be a string or an integer"))
    }
}

/// The integer `number` stands for exactly: any `i64` or `u64`, or a float with no
/// fraction (JSON Schema's `integer` counts `1.0`) that a float holds exactly.
pub fn integer_value(number: &serde_json::Number) -> Option<i128> {
    if let Some(value) = number.as_i64() {
        return Some(value.into());
    }
    if let Some(value) = number.as_u64() {
        return Some(value.into());
    }
    let float = number.as_f64()?;
    (float.fract() == 0.0 && float.abs() <= EXACT_FLOAT_INTEGER).then_some(float as i128)
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
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
    /// An error with `message`, cut to [`MAX_ERROR_MESSAGE`] bytes (ending in `…`).
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE {
            let cut = message.floor_char_boundary(MAX_ERROR_MESSAGE - '…'.len_utf8());
            message = format!("{}…", &message[..cut]);
        }
        Self { code, message, data: None }
    }

    pub fn with_data(mut self, data: ErrorData) -> Self {
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
    /// The client's response to a request this server sent it ([`Outgoing::Request`]).
    Response {
        id: RequestId,
        answer: Result<Value, PeerError>,
    },
    /// A message that gets no answer, whatever is wrong with it: a response that names no
    /// request (a null or malformed id), or a notification that cannot be served (a
    /// notification is never answered).
    Unanswered {
        problem: String,
    },
}

/// Parse one message. Never fails: bad input becomes [`Incoming::Invalid`] (or
/// [`Incoming::Unanswered`], when it must not be answered).
pub fn parse(bytes: &[u8]) -> Incoming {
    match serde_json::from_slice(bytes) {
        Ok(value) => classify(value),
        Err(error) => parse_error(&error),
    }
}

/// The answer to text that is not JSON, as `error` says why.
pub fn parse_error(error: &serde_json::Error) -> Incoming {
    Incoming::Invalid { id: None, error: RpcError::new(PARSE_ERROR, format!("Parse error: {error}")) }
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
    if !message.contains_key("method") && (message.contains_key("result") || message.contains_key("error")) {
        return response(message);
    }
    // A notification (a method and no id) is never answered, even when it is malformed.
    let notification = message.get("method").is_some_and(Value::is_string) && !message.contains_key("id");
    let unanswered = |problem: &str| Incoming::Unanswered { problem: format!("a notification: {problem}") };
    let invalid = |id: Option<RequestId>, problem: &str| Incoming::Invalid {
        id,
        error: RpcError::new(INVALID_REQUEST, format!("Invalid Request: {problem}")),
    };
    let id = match message.get_mut("id") {
        None => None,
        Some(id) => match RequestId::parse(id) {
            Some(id) => Some(id),
            None if id.is_null() => return invalid(None, "id must not be null"),
            // Refused, but answered to: the client can match the answer to its request
            // (the message's size bounds the copy). A number that is no exact integer is
            // not an id the answer could name again as it was sent.
            None => {
                let echo = match id.take() {
                    Value::String(text) => Some(RequestId::String(text)),
                    _ => None,
                };
                return invalid(
                    echo,
                    &format!("id must be a string of at most {MAX_ID_BYTES} bytes or an integer"),
                );
            }
        },
    };
    if message.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        let problem = "`jsonrpc` must be \"2.0\"";
        return if notification { unanswered(problem) } else { invalid(id, problem) };
    }
    let params = message.remove("params");
    // JSON-RPC allows positional `params`; MCP's schema does not, and a method's fields
    // must be found by name (an HTTP request's `Mcp-Name` is checked against `name`).
    if params.as_ref().is_some_and(|params| !params.is_object()) {
        let problem = "`params` must be an object";
        return if notification { unanswered(problem) } else { invalid(id, problem) };
    }
    match message.remove("method") {
        Some(Value::String(method)) => match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        },
        Some(_) => invalid(id, "`method` must be a string"),
        None => invalid(id, "`method` is missing"),
    }
}

/// A response from the client: its id and its result or error. One that names no request
/// or is malformed is [`Incoming::Unanswered`] (a response is never answered).
fn response(mut message: serde_json::Map<String, Value>) -> Incoming {
    let unanswered = |problem: &str| Incoming::Unanswered { problem: format!("a response: {problem}") };
    let Some(id) = message.get("id").and_then(RequestId::parse) else {
        return unanswered("its id names no request");
    };
    if message.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return unanswered("`jsonrpc` must be \"2.0\"");
    }
    match (message.remove("result"), message.remove("error")) {
        (Some(result), None) => Incoming::Response { id, answer: Ok(result) },
        (None, Some(error)) => match serde_json::from_value::<PeerError>(error) {
            Ok(error) => Incoming::Response { id, answer: Err(error) },
            Err(error) => unanswered(&format!("a malformed error ({error})")),
        },
        _ => unanswered("it must have either `result` or `error`"),
    }
}

/// An error the client answered a request of ours with (its `data`, if any, is not read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PeerError {
    pub code: i64,
    pub message: String,
}

/// One message the server writes: an answer to a request, a notification, or a request to
/// the client (2025-11-25, during a call).
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    Result {
        id: RequestId,
        result: ServerResult,
    },
    /// Without an id when none could be read (the schema forbids a null id).
    Error {
        id: Option<RequestId>,
        error: RpcError,
    },
    Notification(ServerNotification),
    /// A request to the client, with an id this server chose.
    Request {
        id: RequestId,
        request: ServerRequest,
    },
}

impl Outgoing {
    /// The request this message answers, if it answers one that could be read (a request
    /// of the server's own answers none).
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Self::Result { id, .. } => Some(id),
            Self::Error { id, .. } => id.as_ref(),
            Self::Notification(_) | Self::Request { .. } => None,
        }
    }

    /// The error this message answers with, if it is an error.
    pub fn error(&self) -> Option<&RpcError> {
        match self {
            Self::Error { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl Serialize for Outgoing {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut message = serializer.serialize_map(None)?;
        message.serialize_entry("jsonrpc", "2.0")?;
        match self {
            Self::Result { id, result } => {
                message.serialize_entry("id", id)?;
                message.serialize_entry("result", result)?;
            }
            Self::Error { id, error } => {
                if let Some(id) = id {
                    message.serialize_entry("id", id)?;
                }
                message.serialize_entry("error", error)?;
            }
            Self::Notification(notification) => {
                message.serialize_entry("method", notification.method())?;
                match notification {
                    ServerNotification::Progress(params) => message.serialize_entry("params", params)?,
                    ServerNotification::ListChanged(_, Some(params)) => {
                        message.serialize_entry("params", params)?
                    }
                    ServerNotification::ListChanged(_, None) => {}
                    ServerNotification::SubscriptionsAcknowledged(params) => {
                        message.serialize_entry("params", params)?
                    }
                    ServerNotification::Cancelled(params) => message.serialize_entry("params", params)?,
                    ServerNotification::Message(params) => message.serialize_entry("params", params)?,
                    ServerNotification::ResourceUpdated(params) => {
                        message.serialize_entry("params", params)?
                    }
                }
            }
            Self::Request { id, request } => {
                message.serialize_entry("id", id)?;
                message.serialize_entry("method", request.method())?;
                match request {
                    ServerRequest::Elicit(params) => message.serialize_entry("params", params)?,
                    ServerRequest::CreateMessage(params) => message.serialize_entry("params", params)?,
                    ServerRequest::ListRoots(params) => message.serialize_entry("params", params)?,
                }
            }
        }
        message.end()
    }
}

/// A success response.
pub fn success(id: &RequestId, result: impl Into<ServerResult>) -> Outgoing {
    Outgoing::Result { id: id.clone(), result: result.into() }
}

/// An error response; without an id when none could be read.
pub fn failure(id: Option<&RequestId>, error: &RpcError) -> Outgoing {
    Outgoing::Error { id: id.cloned(), error: error.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_json_is_a_parse_error_without_id() {
        let Incoming::Invalid { id: None, error } = parse(b"{nope") else { panic!() };
        assert_eq!(error.code, PARSE_ERROR);
        assert!(serde_json::to_value(failure(None, &error)).unwrap().get("id").is_none());
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
        let cases: [(&str, i64); 7] = [
            (r#"[]"#, INVALID_REQUEST),
            (r#"5"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#, INVALID_REQUEST),
            // Positional: a legacy `prompts/get` of `["other", {}]` passed its `Mcp-Name` check.
            (r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":["other",{}]}"#, INVALID_REQUEST),
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
    }

    #[test]
    fn responses_and_malformed_notifications_are_never_answered() {
        let cases = [
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#,
            // A peer's parse error comes back with a null id.
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}"#,
            r#"{"jsonrpc":"1.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        ];
        for text in cases {
            assert!(matches!(parse(text.as_bytes()), Incoming::Unanswered { .. }), "{text}");
        }
    }

    #[test]
    fn responses_carry_their_result_or_error() {
        let Incoming::Response { id, answer: Ok(result) } =
            parse(br#"{"jsonrpc":"2.0","id":7,"result":{"a":1}}"#)
        else {
            panic!("a result")
        };
        assert_eq!((id.to_json(), result), (serde_json::json!(7), serde_json::json!({"a": 1})));
        let error = parse(br#"{"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"no","data":[1]}}"#);
        let Incoming::Response { answer: Err(error), .. } = error else { panic!("an error") };
        assert_eq!(error, PeerError { code: -1, message: "no".into() });
    }

    fn request_id(text: &str) -> Option<RequestId> {
        match parse(format!(r#"{{"jsonrpc":"2.0","id":{text},"method":"x"}}"#).as_bytes()) {
            Incoming::Request { id, .. } => Some(id),
            _ => None,
        }
    }

    #[test]
    fn integer_ids_beyond_i64_or_written_as_floats_are_answered_as_sent() {
        for text in ["9223372036854775808", "18446744073709551615", "1.0", "-0", "1e2"] {
            let id = request_id(text).unwrap_or_else(|| panic!("{text} is an integer id"));
            let sent: Value = serde_json::from_str(text).unwrap();
            let answer = serde_json::to_value(success(&id, crate::protocol::types::EmptyResult::default()));
            assert_eq!(answer.unwrap()["id"], sent, "{text}");
        }
        // Beyond what a float holds exactly, an id could not be told from its neighbours.
        assert_eq!(request_id("18446744073709551617"), None);
        assert_eq!(request_id("1e20"), None);
    }

    #[test]
    fn a_string_id_is_at_most_256_bytes_and_a_longer_one_is_refused_to_its_sender() {
        let longest = format!("\"{}\"", "i".repeat(MAX_ID_BYTES));
        assert!(request_id(&longest).is_some());
        let longer = format!("\"{}\"", "i".repeat(1 << 20));
        assert_eq!(request_id(&longer), None);
        let Incoming::Invalid { id: Some(RequestId::String(id)), error } =
            parse(format!(r#"{{"jsonrpc":"2.0","id":{longer},"method":"x"}}"#).as_bytes())
        else {
            panic!("an invalid request answered to its id")
        };
        assert_eq!(id.len(), 1 << 20);
        assert!(error.message.contains("at most 256 bytes"), "{}", error.message);
        // Numbers that are no exact integer are refused with no id: `1e20` is also `1e20 + 1`.
        for id in ["1e20", "1.5", "true", "{}"] {
            let message = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            assert!(matches!(parse(message.as_bytes()), Incoming::Invalid { id: None, .. }), "{id}");
        }
    }

    #[test]
    fn error_messages_are_cut_to_their_bound() {
        let quoted = RpcError::method_not_found(&"é".repeat(1 << 20));
        assert!(quoted.message.len() <= MAX_ERROR_MESSAGE && quoted.message.ends_with('…'));
        assert!(quoted.message.starts_with("Method not found: éé"));
        assert_eq!(RpcError::new(1, "short").message, "short");
    }

    #[test]
    fn an_integer_id_is_one_id_however_it_is_written() {
        assert_eq!(request_id("1"), request_id("1.0"));
        assert_eq!(request_id("0"), request_id("-0"));
        assert_eq!(request_id("100"), request_id("1e2"));
        assert_ne!(request_id("1"), request_id("\"1\""));
    }
}
