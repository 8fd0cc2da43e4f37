//! Asking the client for input: a confirmation from the user (elicitation), a completion
//! from its model (sampling), its roots.
//!
//! A tool made with [`Tool::asking`](crate::Tool::asking) (or a prompt made with
//! [`Prompt::asking`](crate::Prompt::asking)) gets a [`Round`] beside its arguments and
//! answers [`Reply::Done`] with its result, or [`Reply::Ask`] with what it needs. The host
//! hands the questions to the client and returns; when the client has the answers it calls
//! again, and the tool runs again, in a fresh instance, with the same arguments and a round
//! that carries the answers and the state the tool handed out. Nothing stays in memory
//! between rounds: put what a later round needs in [`Ask::state`] (at most 16 KiB; the host
//! seals it, so what comes back is what you handed out, for this tool and these arguments).
//!
//! Ask only what the client can answer ([`Round::can_elicit`] and the like): a request the
//! client did not declare a capability for ends the call with the spec's error. A client
//! may answer only some keys, or none: check what came back, and ask again for what is
//! missing. The host ends a call that asks more than a few rounds (8 by default).
//!
//! ```
//! use cordon_guest::input::{Ask, Elicited, Reply, Round};
//! use cordon_guest::{Tool, ToolError};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Target {
//!     /// The collection to delete.
//!     collection: String,
//! }
//!
//! fn delete(target: Target, round: &Round) -> Result<Reply<String>, ToolError> {
//!     match round.elicited("confirm") {
//!         Some(Elicited::Accepted(form)) if form["confirm"] == true => {
//!             Ok(Reply::Done(format!("deleted {}", target.collection)))
//!         }
//!         Some(_) => Ok(Reply::Done("not deleted".into())),
//!         None if !round.can_elicit() => Err(ToolError::new("this client cannot confirm a deletion")),
//!         None => Ok(Ask::new()
//!             .elicit(
//!                 "confirm",
//!                 &format!("Delete {}?", target.collection),
//!                 serde_json::json!({
//!                     "type": "object",
//!                     "properties": {"confirm": {"type": "boolean"}},
//!                     "required": ["confirm"],
//!                 }),
//!             )
//!             .into()),
//!     }
//! }
//!
//! let tool = Tool::asking("delete", "Deletes a collection, once the user confirms.", delete);
//! # let _ = tool;
//! ```

use std::collections::BTreeMap;

use crate::bindings::cordon::tool::input as wit;

/// One round of a call: what the client can be asked, its answers, the state back.
#[derive(Debug, Clone)]
pub struct Round {
    client: wit::ClientAbilities,
    responses: BTreeMap<String, String>,
    state: Option<Vec<u8>>,
}

impl Default for Round {
    fn default() -> Self {
        Self::new()
    }
}

impl Round {
    /// A first round from a client that declared nothing (for tests: add to it with the
    /// `with_` methods).
    pub fn new() -> Self {
        Self { client: wit::ClientAbilities::empty(), responses: BTreeMap::new(), state: None }
    }

    pub(crate) fn from_wit(round: wit::InputRound) -> Self {
        Self { client: round.client, responses: round.responses.into_iter().collect(), state: round.state }
    }

    pub(crate) fn to_wit(&self) -> wit::InputRound {
        wit::InputRound {
            client: self.client,
            responses: self.responses.iter().map(|(key, value)| (key.clone(), value.clone())).collect(),
            state: self.state.clone(),
        }
    }

    /// Whether the client can be asked to elicit (a form for its user).
    pub fn can_elicit(&self) -> bool {
        self.client.contains(wit::ClientAbilities::ELICITATION)
    }

    /// Whether the client can be asked to sample (a completion from its model).
    pub fn can_sample(&self) -> bool {
        self.client.contains(wit::ClientAbilities::SAMPLING)
    }

    /// Whether the client can be asked for its roots.
    pub fn can_list_roots(&self) -> bool {
        self.client.contains(wit::ClientAbilities::ROOTS)
    }

    /// Whether this is the first round (no answers, no state).
    pub fn is_first(&self) -> bool {
        self.responses.is_empty() && self.state.is_none()
    }

    /// The client's answer to `key`, as JSON (`None`: not answered, or not JSON).
    pub fn response(&self, key: &str) -> Option<serde_json::Value> {
        serde_json::from_str(self.responses.get(key)?).ok()
    }

    /// The answer to the elicitation asked as `key`.
    pub fn elicited(&self, key: &str) -> Option<Elicited> {
        let response = self.response(key)?;
        match response.get("action")?.as_str()? {
            "accept" => Some(Elicited::Accepted(
                response.get("content").and_then(serde_json::Value::as_object).cloned().unwrap_or_default(),
            )),
            "decline" => Some(Elicited::Declined),
            "cancel" => Some(Elicited::Cancelled),
            _ => None,
        }
    }

    /// The text the client's model answered to the sampling asked as `key`.
    pub fn sampled_text(&self, key: &str) -> Option<String> {
        let response = self.response(key)?;
        let content = response.get("content")?;
        // One content block, or (for a model that used tools) a list of them.
        let blocks = match content {
            serde_json::Value::Array(blocks) => blocks.iter().collect(),
            block => vec![block],
        };
        let texts: Vec<&str> = blocks
            .into_iter()
            .filter(|block| block.get("type").and_then(serde_json::Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text")?.as_str())
            .collect();
        (!texts.is_empty()).then(|| texts.join(""))
    }

    /// The roots the client listed in answer to `key`.
    pub fn roots(&self, key: &str) -> Option<Vec<Root>> {
        let response = self.response(key)?;
        let roots = response.get("roots")?.as_array()?;
        Some(
            roots
                .iter()
                .filter_map(|root| {
                    Some(Root {
                        uri: root.get("uri")?.as_str()?.to_owned(),
                        name: root.get("name").and_then(serde_json::Value::as_str).map(str::to_owned),
                    })
                })
                .collect(),
        )
    }

    /// The state the previous round handed out ([`Ask::state`]).
    pub fn state(&self) -> Option<&[u8]> {
        self.state.as_deref()
    }

    /// This round with the client able to elicit.
    pub fn with_elicitation(mut self) -> Self {
        self.client |= wit::ClientAbilities::ELICITATION;
        self
    }

    /// This round with the client able to sample.
    pub fn with_sampling(mut self) -> Self {
        self.client |= wit::ClientAbilities::SAMPLING;
        self
    }

    /// This round with the client able to list its roots.
    pub fn with_roots(mut self) -> Self {
        self.client |= wit::ClientAbilities::ROOTS;
        self
    }

    /// This round with the client's answer to `key`.
    pub fn with_response(mut self, key: &str, response: serde_json::Value) -> Self {
        self.responses.insert(key.to_owned(), response.to_string());
        self
    }

    /// The next round after `ask`: the same client, no answers yet, and the state `ask`
    /// handed out (add the answers with [`Round::with_response`]).
    pub fn after(&self, ask: &Ask) -> Self {
        Self { client: self.client, responses: BTreeMap::new(), state: ask.state.clone() }
    }
}

/// The answer to an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum Elicited {
    /// The user filled in the form: its fields.
    Accepted(serde_json::Map<String, serde_json::Value>),
    /// The user said no.
    Declined,
    /// The user dismissed it without choosing.
    Cancelled,
}

/// One of the client's roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// E.g. `file:///home/me/project`.
    pub uri: String,
    pub name: Option<String>,
}

/// What a tool asks the client: questions under keys, and state for the next round.
#[derive(Debug, Clone, Default)]
pub struct Ask {
    requests: Vec<(String, wit::InputRequest)>,
    state: Option<Vec<u8>>,
}

impl Ask {
    /// Nothing asked yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the user `message`, with a form of `schema` (a JSON Schema object of flat
    /// properties: string, number, integer, boolean, enum) to fill in; the answer comes
    /// back as [`Round::elicited`]`(key)`.
    pub fn elicit(mut self, key: &str, message: &str, schema: serde_json::Value) -> Self {
        self.requests.push((
            key.to_owned(),
            wit::InputRequest::Elicit(wit::Elicitation {
                message: message.to_owned(),
                requested_schema: schema.to_string(),
            }),
        ));
        self
    }

    /// Ask the client's model for a completion, with `params` as MCP's
    /// `sampling/createMessage` takes them (`messages`, `maxTokens`, ...); the answer
    /// comes back as [`Round::sampled_text`]`(key)` (or whole, [`Round::response`]).
    pub fn sample(mut self, key: &str, params: serde_json::Value) -> Self {
        self.requests.push((key.to_owned(), wit::InputRequest::CreateMessage(params.to_string())));
        self
    }

    /// Ask the client for its roots; they come back as [`Round::roots`]`(key)`.
    pub fn list_roots(mut self, key: &str) -> Self {
        self.requests.push((key.to_owned(), wit::InputRequest::ListRoots));
        self
    }

    /// Hand `state` to the next round ([`Round::state`]).
    pub fn state(mut self, state: impl Into<Vec<u8>>) -> Self {
        self.state = Some(state.into());
        self
    }

    /// The keys asked, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.requests.iter().map(|(key, _)| key.as_str())
    }

    /// The MCP method each key is asked with, in order (e.g. `elicitation/create`).
    pub fn methods(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.requests.iter().map(|(key, request)| {
            let method = match request {
                wit::InputRequest::Elicit(_) => "elicitation/create",
                wit::InputRequest::CreateMessage(_) => "sampling/createMessage",
                wit::InputRequest::ListRoots => "roots/list",
            };
            (key.as_str(), method)
        })
    }

    pub(crate) fn from_wit(input: wit::InputRequired) -> Self {
        Self { requests: input.requests, state: input.state }
    }

    pub(crate) fn into_wit(self) -> wit::InputRequired {
        wit::InputRequired { requests: self.requests, state: self.state }
    }
}

/// What a tool (or prompt) that may ask answers: its result, or what it asks.
#[derive(Debug)]
pub enum Reply<R> {
    Done(R),
    Ask(Ask),
}

impl<R> From<Ask> for Reply<R> {
    fn from(ask: Ask) -> Self {
        Self::Ask(ask)
    }
}

impl<R> Reply<R> {
    /// The result, if done.
    pub fn done(self) -> Option<R> {
        match self {
            Self::Done(result) => Some(result),
            Self::Ask(_) => None,
        }
    }

    /// What is asked, if it asks.
    pub fn asked(self) -> Option<Ask> {
        match self {
            Self::Done(_) => None,
            Self::Ask(ask) => Some(ask),
        }
    }
}
