//! # Asking the client for input (`cordon:tool@0.2.0` `input`)
//!
//! A 0.2.0 tool call (or prompt get) may answer "I need input" instead of a result: keyed
//! requests for the client (elicitation, sampling, roots) and opaque state of its own.
//! This module owns what a round hands the guest ([`InputRound`]: what the client can be
//! asked, its answers, the state back) and the bounds on what the guest hands out
//! ([`check_input_required`]); `call.rs` runs each round as any call (a fresh instance,
//! the call's limits, hard stop and cleanup) and reports [`super::Outcome::InputRequired`].
//!
//! Rounds are independent calls: the runtime keeps nothing between them. Who asks the
//! client and carries the state from one round to the next (sealed in `requestState` for
//! a 2026-07-28 client, in memory for a 2025-11-25 one) is the caller's business: build
//! the next round with [`InputRound::retry`] and run it with [`super::Call::with_input`].
//! A 0.1.0 or plain component never asks; its rounds ignore the input.

pub use super::bindings::v2::{ClientAbilities, Elicitation, InputRequest, InputRequired};

/// The most requests one round may hand out.
pub const MAX_INPUT_REQUESTS: usize = 16;
/// The longest key of a request, in bytes.
pub const MAX_INPUT_KEY: usize = 64;
/// The most JSON one request may carry (its schema, or its sampling params), in bytes.
pub const MAX_INPUT_REQUEST_BYTES: usize = 16 * 1024;
/// The most state one round may hand out, in bytes.
pub const MAX_INPUT_STATE: usize = 16 * 1024;

/// What a guest answered in a round: what it was asked for, or a request for input.
#[derive(Debug)]
pub(crate) enum Reply<T> {
    Done(T),
    NeedsInput(InputRequired),
}

/// What one round of a call hands the guest: the first round has no answers and no state.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRound {
    /// What the client declared it can be asked on this request.
    pub client: ClientAbilities,
    /// The client's answers, keyed as asked, each the JSON text of the client's result.
    pub responses: Vec<(String, String)>,
    /// The state the previous round handed out.
    pub state: Option<Vec<u8>>,
    /// The last note a previous round left for a cleanup (the host's: the guest's round
    /// does not see it, its cleanup does).
    pub cleanup_note: Option<Vec<u8>>,
    /// When the whole call, every round and every wait for the client, ends at the latest:
    /// a later round gets what is left of the tool's maximum duration, not all of it again.
    pub call_ends_by: Option<std::time::Instant>,
}

impl Default for InputRound {
    fn default() -> Self {
        Self::first(ClientAbilities::empty())
    }
}

impl InputRound {
    /// A first round, for a client that can be asked what `client` says.
    pub fn first(client: ClientAbilities) -> Self {
        Self { client, responses: Vec::new(), state: None, cleanup_note: None, call_ends_by: None }
    }

    /// A retry: the client's answers and the state the previous round handed out.
    pub fn retry(client: ClientAbilities, responses: Vec<(String, String)>, state: Option<Vec<u8>>) -> Self {
        Self { client, responses, state, cleanup_note: None, call_ends_by: None }
    }

    /// The round as the 0.2.0 guest gets it.
    pub(crate) fn to_wit(&self) -> super::bindings::v2::WitInputRound {
        super::bindings::v2::WitInputRound {
            client: self.client,
            responses: self.responses.clone(),
            state: self.state.clone(),
        }
    }

    /// The bytes it takes, for the call's argument size.
    pub(crate) fn size(&self) -> usize {
        self.responses.iter().map(|(key, value)| key.len() + value.len()).sum::<usize>()
            + self.state.as_ref().map_or(0, Vec::len)
    }
}

impl InputRequest {
    /// The MCP method the client is asked with.
    pub fn method(&self) -> &'static str {
        match self {
            Self::Elicit(_) => "elicitation/create",
            Self::CreateMessage(_) => "sampling/createMessage",
            Self::ListRoots => "roots/list",
        }
    }

    /// The client capability it needs, as `clientCapabilities` names it.
    pub fn capability(&self) -> &'static str {
        match self {
            Self::Elicit(_) => "elicitation",
            Self::CreateMessage(_) => "sampling",
            Self::ListRoots => "roots",
        }
    }

    /// The ability flag it needs.
    pub fn ability(&self) -> ClientAbilities {
        match self {
            Self::Elicit(_) => ClientAbilities::ELICITATION,
            Self::CreateMessage(_) => ClientAbilities::SAMPLING,
            Self::ListRoots => ClientAbilities::ROOTS,
        }
    }

    /// The request's params as JSON: checked by [`check_input_required`] to parse.
    pub fn params(&self) -> serde_json::Value {
        match self {
            Self::Elicit(Elicitation { message, requested_schema }) => serde_json::json!({
                "mode": "form",
                "message": message,
                "requestedSchema": serde_json::from_str::<serde_json::Value>(requested_schema)
                    .unwrap_or(serde_json::Value::Null),
            }),
            Self::CreateMessage(params) => serde_json::from_str(params).unwrap_or(serde_json::Value::Null),
            Self::ListRoots => serde_json::json!({}),
        }
    }

    fn json_bytes(&self) -> usize {
        match self {
            Self::Elicit(elicitation) => elicitation.message.len() + elicitation.requested_schema.len(),
            Self::CreateMessage(params) => params.len(),
            Self::ListRoots => 0,
        }
    }
}

/// The bytes a request for input takes, near enough for the result size limit.
pub(crate) fn input_required_size(input: &InputRequired) -> usize {
    input.requests.iter().map(|(key, request)| 32 + key.len() + request.json_bytes()).sum::<usize>()
        + input.state.as_ref().map_or(0, Vec::len)
}

/// Check what a guest handed out against the bounds and the contract: something asked or
/// carried on, keys well-formed and unique, every JSON an object. The error names what
/// broke it, for the client.
pub fn check_input_required(input: &InputRequired) -> Result<(), String> {
    if input.requests.is_empty() && input.state.is_none() {
        return Err("the tool asked for input but gave neither a request nor a state".into());
    }
    if input.requests.len() > MAX_INPUT_REQUESTS {
        return Err(format!(
            "the tool asked for {} inputs at once; the limit is {MAX_INPUT_REQUESTS}",
            input.requests.len()
        ));
    }
    if let Some(state) = &input.state
        && state.len() > MAX_INPUT_STATE
    {
        return Err(format!(
            "the tool's input state is {} bytes; the limit is {MAX_INPUT_STATE}",
            state.len()
        ));
    }
    let mut keys = std::collections::HashSet::new();
    for (key, request) in &input.requests {
        check_key(key)?;
        if !keys.insert(key.as_str()) {
            return Err(format!("the tool asked for input {key:?} twice"));
        }
        let bytes = request.json_bytes();
        if bytes > MAX_INPUT_REQUEST_BYTES {
            return Err(format!(
                "the tool's input request {key:?} is {bytes} bytes; the limit is {MAX_INPUT_REQUEST_BYTES}"
            ));
        }
        let (what, json) = match request {
            InputRequest::Elicit(elicitation) => ("requested schema", elicitation.requested_schema.as_str()),
            InputRequest::CreateMessage(params) => ("sampling params", params.as_str()),
            InputRequest::ListRoots => continue,
        };
        match serde_json::from_str::<serde_json::Value>(json) {
            // MCP's form: a flat object schema with its properties.
            Ok(serde_json::Value::Object(schema))
                if matches!(request, InputRequest::Elicit(_))
                    && (schema.get("type") != Some(&serde_json::Value::from("object"))
                        || !schema.get("properties").is_some_and(serde_json::Value::is_object)) =>
            {
                return Err(format!(
                    "the requested schema of input request {key:?} must be an object schema with `properties`"
                ));
            }
            Ok(serde_json::Value::Object(json)) => check_request_shape(key, request, &json)?,
            Ok(_) => return Err(format!("the {what} of input request {key:?} is not a JSON object")),
            Err(error) => return Err(format!("the {what} of input request {key:?} is not JSON: {error}")),
        }
    }
    Ok(())
}

/// What MCP's schema requires of a request the client is sent, as far as a client needs
/// it to answer: a form's every field of a type a form can hold (a string, a number, a
/// boolean, or a list of choices), and sampling's `messages` and `maxTokens`. A request
/// short of it would reach the client as a message its schema refuses.
fn check_request_shape(
    key: &str,
    request: &InputRequest,
    json: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), String> {
    use serde_json::Value;
    let strings = |value: &Value| value.as_array().is_some_and(|items| items.iter().all(Value::is_string));
    match request {
        InputRequest::Elicit(_) => {
            if json.get("required").is_some_and(|required| !strings(required)) {
                return Err(format!("`required` of input request {key:?} must be a list of field names"));
            }
            let fields = json.get("properties").and_then(Value::as_object).into_iter().flatten();
            for (name, field) in fields {
                let problem = match field.get("type").and_then(Value::as_str) {
                    Some("number" | "integer" | "boolean") => None,
                    // A plain string's `format` is one of four; a choice (`enum`, `oneOf`)
                    // may carry any.
                    Some("string") if field.get("enum").is_none() && field.get("oneOf").is_none() => field
                        .get("format")
                        .filter(|format| {
                            !matches!(format.as_str(), Some("date" | "date-time" | "email" | "uri"))
                        })
                        .map(|_| "a string's `format` may only be date, date-time, email or uri"),
                    Some("string") => None,
                    Some("array") => {
                        // A list of choices: `items` of string `enum` values, or of `anyOf`
                        // `{const, title}` options.
                        let items = field.get("items");
                        let plain = items.is_some_and(|items| {
                            items.get("type") == Some(&Value::from("string"))
                                && items.get("enum").is_some_and(strings)
                        });
                        let titled = items
                            .and_then(|items| items.get("anyOf"))
                            .and_then(Value::as_array)
                            .is_some_and(|options| {
                                options.iter().all(|option| {
                                    option.get("const").is_some_and(Value::is_string)
                                        && option.get("title").is_some_and(Value::is_string)
                                })
                            });
                        (!plain && !titled).then_some(
                            "a list of choices needs `items` with string `enum` values or `anyOf` \
                             options of `const` and `title`",
                        )
                    }
                    _ => Some("a form asks for a string, number, boolean or list of choices only"),
                };
                if let Some(problem) = problem {
                    return Err(format!("field {name:?} of input request {key:?}: {problem}"));
                }
            }
        }
        InputRequest::CreateMessage(_) => {
            let messages = json.get("messages").and_then(Value::as_array);
            // A whole number, as JSON Schema's integer takes it (`100.0` too).
            let max_tokens = json
                .get("maxTokens")
                .and_then(Value::as_f64)
                .is_some_and(|tokens| tokens.fract() == 0.0 && tokens >= 0.0);
            if messages.is_none() || !max_tokens {
                return Err(format!(
                    "the sampling params of input request {key:?} need `messages` (a list) and \
                     `maxTokens` (a whole number)"
                ));
            }
            let well_formed = |message: &Value| {
                matches!(message.get("role").and_then(Value::as_str), Some("user" | "assistant"))
                    && message.get("content").is_some_and(|content| content.is_object() || content.is_array())
            };
            if !messages.into_iter().flatten().all(well_formed) {
                return Err(format!(
                    "each sampling message of input request {key:?} needs a `role` (user or assistant) \
                     and `content`"
                ));
            }
            let context = json.get("includeContext");
            if context.is_some_and(|context| {
                !matches!(context.as_str(), Some("none" | "thisServer" | "allServers"))
            }) {
                return Err(format!(
                    "`includeContext` of input request {key:?} is none, thisServer or allServers"
                ));
            }
        }
        InputRequest::ListRoots => {}
    }
    Ok(())
}

/// A request key: 1 to [`MAX_INPUT_KEY`] bytes of `A-Z a-z 0-9 _ - .`.
pub fn check_key(key: &str) -> Result<(), String> {
    let well_formed = !key.is_empty()
        && key.len() <= MAX_INPUT_KEY
        && key.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'));
    if well_formed {
        Ok(())
    } else {
        Err(format!("input request key {key:?} must be 1 to {MAX_INPUT_KEY} characters of A-Z a-z 0-9 _ - ."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elicit(schema: &str) -> InputRequest {
        InputRequest::Elicit(Elicitation { message: "Sure?".into(), requested_schema: schema.into() })
    }

    #[test]
    fn bounds_are_named_when_broken() {
        let ok = InputRequired {
            requests: vec![("confirm".into(), elicit(r#"{"type":"object","properties":{}}"#))],
            state: None,
        };
        assert_eq!(check_input_required(&ok), Ok(()));
        let no_properties =
            InputRequired { requests: vec![("confirm".into(), elicit(r#"{"type":"object"}"#))], state: None };
        assert!(check_input_required(&no_properties).unwrap_err().contains("properties"));
        let many = InputRequired {
            requests: (0..=MAX_INPUT_REQUESTS).map(|n| (format!("k{n}"), InputRequest::ListRoots)).collect(),
            state: None,
        };
        assert!(check_input_required(&many).unwrap_err().contains("limit is 16"));
        let big_state = InputRequired { requests: vec![], state: Some(vec![0; MAX_INPUT_STATE + 1]) };
        assert!(check_input_required(&big_state).unwrap_err().contains("input state"));
        let twice = InputRequired {
            requests: vec![("a".into(), InputRequest::ListRoots), ("a".into(), InputRequest::ListRoots)],
            state: None,
        };
        assert!(check_input_required(&twice).unwrap_err().contains("twice"));
        let bad_key = InputRequired { requests: vec![("a b".into(), InputRequest::ListRoots)], state: None };
        assert!(check_input_required(&bad_key).unwrap_err().contains("key"));
        let long_key =
            InputRequired { requests: vec![("k".repeat(65), InputRequest::ListRoots)], state: None };
        assert!(check_input_required(&long_key).unwrap_err().contains("key"));
        // What the client's schema refuses is not sent: a form field of another type,
        // sampling without its required fields.
        let object_field = InputRequired {
            requests: vec![("a".into(), elicit(r#"{"type":"object","properties":{"x":{"type":"object"}}}"#))],
            state: None,
        };
        assert!(check_input_required(&object_field).unwrap_err().contains("field \"x\""));
        let fields = r#"{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"integer"},
            "b":{"type":"boolean"},"m":{"type":"array","items":{"type":"string","enum":["a"]}},
            "t":{"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}},
            "d":{"type":"string","format":"date"}},"required":["s"]}"#;
        assert_eq!(
            check_input_required(&InputRequired {
                requests: vec![("a".into(), elicit(fields))],
                state: None
            }),
            Ok(())
        );
        let sample = |params: &str| InputRequired {
            requests: vec![("s".into(), InputRequest::CreateMessage(params.into()))],
            state: None,
        };
        assert!(check_input_required(&sample("{}")).unwrap_err().contains("`maxTokens`"));
        assert!(check_input_required(&sample(r#"{"messages":[],"maxTokens":-1}"#)).is_err());
        assert_eq!(check_input_required(&sample(r#"{"messages":[],"maxTokens":10}"#)), Ok(()));
        // The rest the official schema asks of a form and of sampling.
        for (form, problem) in [
            (r#"{"type":"object","properties":{"x":{"type":"array"}}}"#, "list of choices needs `items`"),
            (r#"{"type":"object","properties":{"x":{"type":"string","format":"hostname"}}}"#, "`format`"),
            (r#"{"type":"object","properties":{},"required":"x"}"#, "`required`"),
        ] {
            let request = InputRequired { requests: vec![("a".into(), elicit(form))], state: None };
            assert!(check_input_required(&request).unwrap_err().contains(problem), "{form}");
        }
        assert!(
            check_input_required(&sample(r#"{"messages":[{}],"maxTokens":5}"#))
                .unwrap_err()
                .contains("`role`")
        );
        let everything = r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5,"includeContext":"everything"}"#;
        assert!(check_input_required(&sample(everything)).unwrap_err().contains("includeContext"));
        let good = r#"{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5,"includeContext":"none"}"#;
        assert_eq!(check_input_required(&sample(good)), Ok(()));
        assert_eq!(check_input_required(&sample(r#"{"messages":[],"maxTokens":100.0}"#)), Ok(()));
        // A choice's `format` is open (the schema's enum forms leave it so).
        let choice =
            r#"{"type":"object","properties":{"x":{"type":"string","enum":["a"],"format":"hostname"}}}"#;
        let request = InputRequired { requests: vec![("a".into(), elicit(choice))], state: None };
        assert_eq!(check_input_required(&request), Ok(()));
        let not_object = InputRequired { requests: vec![("a".into(), elicit("[1]"))], state: None };
        assert!(check_input_required(&not_object).unwrap_err().contains("not a JSON object"));
        let huge = InputRequired {
            requests: vec![(
                "a".into(),
                InputRequest::CreateMessage(format!("{{\"x\":\"{}\"}}", "y".repeat(17000))),
            )],
            state: None,
        };
        assert!(check_input_required(&huge).unwrap_err().contains("limit is 16384"));
        let nothing = InputRequired { requests: vec![], state: None };
        assert!(check_input_required(&nothing).is_err());
    }
}
