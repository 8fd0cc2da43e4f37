//! # MRTR for 2026-07-28 clients: `inputResponses` and `requestState` in, `InputRequiredResult` out
//!
//! A `tools/call` or `prompts/get` whose guest asks for input (`runtime::input`) is answered
//! with an `InputRequiredResult`: each request under its key, and a `requestState` sealed by
//! [`super::sealed`] around the guest's state, the last cleanup note the call left (the next
//! round starts with it, so that its cleanup sees it), the round number and the keys asked. The
//! client answers and sends the request again with `inputResponses` and that state; this
//! module checks both ([`Retry::parse`], [`Retry::round_for`]: `-32602` for a malformed answer
//! or a state that fails to open, before any instance starts) and makes the next
//! [`InputRound`] of them. Answers to keys the previous round did not ask are dropped; a
//! missing one is the guest's to ask again. A request goes out only if the request's
//! `clientCapabilities` declared its kind (else `-32021`, naming what is missing), and a
//! call asks at most [`MAX_ROUNDS`] rounds in a row (else the call ends in an error).
//! Nothing is kept between rounds: any replica with the same key continues the call.

use serde_json::Value;

use super::sealed::{Binding, Sealer};
use crate::protocol::asking::{AskKind, ClientCapabilities, Missing};
use crate::protocol::jsonrpc::RpcError;
use crate::protocol::mcp::missing_capabilities;
use crate::protocol::types::{InputRequestMessage, InputRequiredResult};
use crate::runtime::{ClientAbilities, InputRequest, InputRequired, InputRound, MAX_INPUT_STATE};

/// The most rounds one call may ask for input in a row.
pub const MAX_ROUNDS: u32 = 8;
/// The most answers one retry may carry (more are refused; the guest asks at most 16).
const MAX_RESPONSES: usize = 64;

/// What a request brings for MRTR, checked for shape.
#[derive(Debug, Default, Clone)]
pub(crate) struct Retry {
    /// What the guest is told the client can be asked.
    client: ClientAbilities,
    /// What the client declared, down to the sub-capabilities a request may need.
    declared: ClientCapabilities,
    responses: Vec<(String, String)>,
    request_state: Option<String>,
}

/// How a request for input is answered when it cannot go to the client as it is.
#[derive(Debug)]
pub(crate) enum NotAsked {
    /// A protocol error: the client lacks a capability (`-32021`).
    Refused(RpcError),
    /// The call ends in an error the model (or user) reads: too many rounds (what the
    /// tool or prompt did, to follow its name).
    Failed(String),
}

/// What a guest is told the client can be asked, from what the client `declared` (a
/// 2025-era client at `initialize`, a 2026-07-28 request in its envelope).
pub(crate) fn abilities(declared: ClientCapabilities) -> ClientAbilities {
    let mut abilities = ClientAbilities::empty();
    for (serves, ability) in [
        (declared.elicitation, ClientAbilities::ELICITATION),
        (declared.sampling, ClientAbilities::SAMPLING),
        (declared.roots, ClientAbilities::ROOTS),
    ] {
        if serves {
            abilities |= ability;
        }
    }
    abilities
}

/// The kind of client request a guest's `request` is.
fn ask_kind(request: &InputRequest) -> AskKind {
    match request {
        InputRequest::Elicit(_) => AskKind::Elicitation,
        InputRequest::CreateMessage(_) => AskKind::Sampling,
        InputRequest::ListRoots => AskKind::Roots,
    }
}

impl Retry {
    /// Bytes of text it keeps: the answers and the state.
    pub(crate) fn held_bytes(&self) -> usize {
        let answers: usize = self.responses.iter().map(|(key, answer)| key.len() + answer.len()).sum();
        answers + self.request_state.as_ref().map_or(0, String::len)
    }

    /// Read `inputResponses` and `requestState` from `params`, and what the client can be
    /// asked from its declared `capabilities` (2026-07-28: the request's own).
    pub(crate) fn parse(
        params: Option<&Value>,
        capabilities: Option<&serde_json::Map<String, Value>>,
    ) -> Result<Self, RpcError> {
        let declared = ClientCapabilities::from_declared(capabilities);
        let client = abilities(declared);
        let invalid = |problem: &str| RpcError::invalid_params(format!("Invalid params: {problem}"));
        let responses = match params.and_then(|params| params.get("inputResponses")) {
            None => Vec::new(),
            Some(Value::Object(responses)) => {
                if responses.len() > MAX_RESPONSES {
                    return Err(invalid(&format!(
                        "`inputResponses` holds {} answers; at most {MAX_RESPONSES} are read",
                        responses.len()
                    )));
                }
                let mut answers = Vec::with_capacity(responses.len());
                for (key, response) in responses {
                    if !response.is_object() {
                        return Err(invalid(&format!(
                            "`inputResponses.{key}` must be an object (the client's result for that request)"
                        )));
                    }
                    answers.push((key.clone(), response.to_string()));
                }
                answers
            }
            Some(_) => return Err(invalid("`inputResponses` must be an object")),
        };
        let request_state = match params.and_then(|params| params.get("requestState")) {
            None => None,
            Some(Value::String(state)) => Some(state.clone()),
            Some(_) => return Err(invalid("`requestState` must be a string")),
        };
        Ok(Self { client, declared, responses, request_state })
    }

    /// Whether it brings a state back: the guest ran in the request before, and what it
    /// sealed (its note among it) is this call's to clean up with if this one stops.
    pub(crate) fn brings_state(&self) -> bool {
        self.request_state.is_some()
    }

    /// The round to run, and its number: the first without a state; else the state opened
    /// (`-32602` if it fails: changed, expired, another key, another tool, tenant or
    /// arguments) with the answers to the keys it asked.
    ///
    /// `binding` is made only to open a state: a first round never hashes its arguments.
    pub(crate) fn round_for(
        &self,
        sealer: &Sealer,
        binding: impl FnOnce() -> Binding,
    ) -> Result<(InputRound, u32), RpcError> {
        let Some(sealed) = &self.request_state else {
            // No state: answers given without one (a client that kept none) go as they are.
            // Not ignored as unasked: clients answer without a state, and the conformance
            // suite expects them served (`input-required-result-ignore-extra-params`).
            // What a client answers is the client's word either way; a guest that must
            // know what it asked keeps that in its state.
            return Ok((InputRound::retry(self.client, self.responses.clone(), None), 1));
        };
        let opened = sealer
            .open(sealed, &binding())
            .map_err(|refused| RpcError::invalid_params(format!("Invalid params: {refused}")))?;
        let responses = self.responses.iter().filter(|(key, _)| opened.keys.contains(key)).cloned().collect();
        let mut round = InputRound::retry(self.client, responses, opened.state);
        round.cleanup_note = opened.note;
        Ok((round, opened.round.saturating_add(1)))
    }

    /// The answer to a round (`round`) that asked for `input`, leaving the cleanup `note`:
    /// an `InputRequiredResult` with the state and the note sealed for `binding`, or why it
    /// cannot go out.
    pub(crate) fn ask(
        &self,
        input: InputRequired,
        note: Option<Vec<u8>>,
        round: u32,
        sealer: &Sealer,
        binding: Binding,
    ) -> Result<InputRequiredResult, NotAsked> {
        let missing: Vec<Missing> = input
            .requests
            .iter()
            .flat_map(|(_, request)| self.declared.lacks(ask_kind(request), request.params().as_object()))
            .collect();
        if !missing.is_empty() {
            let missing = missing.iter().map(|missing| (missing.capability, missing.sub));
            return Err(NotAsked::Refused(missing_capabilities(missing)));
        }
        if round >= MAX_ROUNDS {
            return Err(NotAsked::Failed(format!(
                "asked the client for input {round} rounds in a row; a call may ask at most {MAX_ROUNDS}."
            )));
        }
        // The note travels with the state, through the client: bounded with it.
        let (state_bytes, note_bytes) =
            (input.state.as_ref().map_or(0, Vec::len), note.as_ref().map_or(0, Vec::len));
        if state_bytes + note_bytes > MAX_INPUT_STATE {
            return Err(NotAsked::Failed(format!(
                "asked for input leaving a cleanup note of {note_bytes} bytes beside a state of {state_bytes}; \
                 a round that asks hands the client at most {MAX_INPUT_STATE} bytes of both."
            )));
        }
        let keys = input.requests.iter().map(|(key, _)| key.clone()).collect();
        let requests = input
            .requests
            .iter()
            .map(|(key, request)| {
                let message =
                    InputRequestMessage { method: request.method().into(), params: request.params() };
                (key.clone(), message)
            })
            .collect();
        let state = sealer.seal(binding, round, keys, input.state, note);
        Ok(InputRequiredResult::new(requests, Some(state)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::sealed::Holder;

    /// The note a round leaves goes to the client sealed beside the state, and the next
    /// round starts with it; the two together are bounded as the state alone is.
    #[test]
    fn a_rounds_note_is_sealed_with_its_state_and_bounded_with_it() {
        let sealer = Sealer::random();
        let capabilities = serde_json::json!({"roots": {}});
        let retry = Retry::parse(None, capabilities.as_object()).unwrap();
        let binding = || {
            let holder = Holder { tenant: None, caller: None };
            Binding::new("tools", "tools/call t".into(), holder, &serde_json::json!({}))
        };
        let asking = |state_bytes: usize| InputRequired {
            requests: vec![("roots".into(), InputRequest::ListRoots)],
            state: Some(vec![7; state_bytes]),
        };
        let asked = retry.ask(asking(4), Some(b"reserved 42".to_vec()), 1, &sealer, binding()).unwrap();
        let answered = serde_json::json!({
            "inputResponses": {"roots": {"roots": []}},
            "requestState": asked.request_state,
        });
        let next = Retry::parse(Some(&answered), capabilities.as_object()).unwrap();
        let (round, number) = next.round_for(&sealer, binding).unwrap();
        assert_eq!(
            (round.cleanup_note.as_deref(), round.state.as_deref(), number),
            (Some(&b"reserved 42"[..]), Some(&[7; 4][..]), 2)
        );

        let half = MAX_INPUT_STATE / 2;
        let note = Some(vec![b'n'; half + 1]);
        let refused = retry.ask(asking(half), note.clone(), 1, &sealer, binding());
        assert!(
            matches!(&refused, Err(NotAsked::Failed(message)) if message.contains("cleanup note of 8193 bytes")),
            "{refused:?}"
        );
        assert!(retry.ask(asking(half - 1), note, 1, &sealer, binding()).is_ok());
    }
}
