//! # Asking a 2025-11-25 client, and its resource subscriptions
//!
//! A 2025-era client is asked for input during a call the way its revision defines:
//! `elicitation/create`, `sampling/createMessage` and `roots/list` go to it as JSON-RPC
//! requests on the call's own stream (a line on stdout; an event on the SSE answer of the
//! `tools/call` POST), with ids this connection chooses, and its responses (a line on
//! stdin; a POST to its session) come back here ([`Connection::answered`]) to the call that
//! waits for them. [`Asked`] owns that table: at most [`MAX_OUTSTANDING_ASKS`] requests wait
//! per connection, a response whose id is unknown, already answered or too late is dropped
//! (with a debug log), and a call that stops waiting (cancelled, timed out) takes its ids
//! out with it. Only what the client declared at `initialize` is asked.
//!
//! The same connection keeps the URIs its client subscribed to (`resources/subscribe`,
//! 2025-11-25 only), at most [`MAX_SUBSCRIPTIONS`] of them and [`MAX_SUBSCRIBED_BYTES`] of
//! their text, each at most [`MAX_SUBSCRIBED_URI_BYTES`]: a session may live an hour idle,
//! and what it keeps is held for that long whatever its requests were charged. A reload
//! that replaces the component serving one sends `notifications/resources/updated`
//! ([`Connection::resources_updated`]).

use std::collections::HashMap;

use serde_json::Value;
use tokio::sync::oneshot;

use super::admission::SubscribedBytes;
use super::{Charge, Connection, Outbox};
use crate::protocol::asking::{ClientCapabilities, ServerRequest};
use crate::protocol::jsonrpc::{INTERNAL_ERROR, Outgoing, PeerError, RequestId, RpcError};
use crate::protocol::types::{ResourceUpdatedParams, ServerNotification};
use crate::runtime::ToolSet;

/// Requests to the client one connection may have waiting at once.
pub const MAX_OUTSTANDING_ASKS: usize = 64;
/// Resource URIs one connection may be subscribed to.
pub const MAX_SUBSCRIPTIONS: usize = 1024;
/// The longest URI one may subscribe to, in bytes.
pub const MAX_SUBSCRIBED_URI_BYTES: usize = 4 << 10;
/// The bytes of URI text one connection's subscriptions may keep in all.
pub const MAX_SUBSCRIBED_BYTES: usize = 64 << 10;

/// What one subscription is charged against the admission bound besides its URI's bytes:
/// its set entry and the allocator's share (measured: about 100 bytes a short URI).
const SUBSCRIPTION_OVERHEAD: usize = 96;

/// The URIs a 2025-era client subscribed to, and their bytes. Each is charged to the
/// admission bound (the server's and its tenant's share, dispatch.rs) while it is kept:
/// ten thousand sessions of 64 KiB each would otherwise hold more than any bound admits.
/// And all the sessions of one client (of one tenant, where tenants have shares) keep at
/// most a [`SUBSCRIBED_PART`](super::SUBSCRIBED_PART) of its share: idle sessions would otherwise pin the whole
/// share, and two clients the whole bound, for their hour.
#[derive(Default)]
pub(super) struct Subscriptions {
    uris: HashMap<String, (super::Charge, Option<SubscribedBytes>)>,
    bytes: usize,
}

/// Why asking the client gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AskError {
    #[error("the client did not declare {capability} at initialize, so it cannot be sent {method}")]
    NotDeclared { capability: String, method: &'static str },
    #[error("{MAX_OUTSTANDING_ASKS} requests to this client already wait for an answer")]
    TooMany,
    #[error("the client answered {method} with error {code}: {message}")]
    Refused { method: &'static str, code: i64, message: String },
    #[error("{0}")]
    Malformed(String),
    #[error("the client's connection closed before it answered")]
    Gone,
}

/// The requests this connection sent its client and waits on, by the id it chose.
#[derive(Default)]
pub(super) struct Asked {
    next: u64,
    /// Each answer comes with the charge its message was admitted under, held until the
    /// call is done waiting: a client could otherwise answer all but one of a call's
    /// requests with megabytes each and hold them, uncharged, for the call's whole life.
    waiting: HashMap<RequestId, oneshot::Sender<ChargedAnswer>>,
}

/// A client's answer to a request of ours, and the charge its message was admitted under.
type ChargedAnswer = (Result<Value, PeerError>, Charge);

/// Takes a call's request ids out of the table when it stops waiting, answered or not.
struct Waiting<'c> {
    connection: &'c Connection,
    ids: Vec<RequestId>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut asked = self.connection.asked.lock().unwrap();
        for id in &self.ids {
            asked.waiting.remove(id);
        }
    }
}

impl Connection {
    /// Record what a 2025-era client declared at `initialize`.
    pub(super) fn set_client_capabilities(&self, declared: ClientCapabilities) {
        *self.client.lock().unwrap() = declared;
    }

    /// Send each of `requests` to the client on `out`, all at once (the client may answer
    /// them in any order), and wait for every answer: each result, checked against its
    /// request's result type, under the request's key, with the charge its message came
    /// with (the round that gets the answers holds it). The first failure ends the wait.
    /// Dropping the future stops waiting (a late answer is then dropped).
    pub async fn ask_all(
        &self,
        requests: Vec<(String, ServerRequest)>,
        out: &Outbox,
    ) -> Result<Vec<(String, Value, Charge)>, AskError> {
        let declared = *self.client.lock().unwrap();
        let lacking = requests.iter().find_map(|(_, request)| {
            let missing = declared.lacks_for(request);
            (!missing.is_empty()).then(|| (missing, request.method()))
        });
        if let Some((missing, method)) = lacking {
            let names: Vec<String> = missing.iter().map(|missing| format!("`{missing}`")).collect();
            let capability = match names.len() {
                1 => format!("the {} capability", names[0]),
                _ => format!("the {} capabilities", names.join(" and ")),
            };
            return Err(AskError::NotDeclared { capability, method });
        }
        let mut waiting = Waiting { connection: self, ids: Vec::with_capacity(requests.len()) };
        let mut sent = Vec::with_capacity(requests.len());
        {
            let mut asked = self.asked.lock().unwrap();
            if asked.waiting.len() + requests.len() > MAX_OUTSTANDING_ASKS {
                return Err(AskError::TooMany);
            }
            for (key, request) in requests {
                asked.next += 1;
                let id = RequestId::parse(&Value::from(asked.next)).expect("an integer is an id");
                let (sender, answer) = oneshot::channel();
                asked.waiting.insert(id.clone(), sender);
                waiting.ids.push(id.clone());
                sent.push((key, request.kind(), answer, Outgoing::Request { id, request }));
            }
        }
        let mut pending = Vec::with_capacity(sent.len());
        for (key, kind, answer, request) in sent {
            out.send(request).await;
            pending.push((key, kind, answer));
        }
        let mut answers = Vec::with_capacity(pending.len());
        for (key, kind, answer) in pending {
            let Ok((answer, charge)) = answer.await else { return Err(AskError::Gone) };
            let result = match answer {
                Ok(result) => kind.check_result(&result).map(|()| result).map_err(AskError::Malformed)?,
                Err(PeerError { code, message }) => {
                    return Err(AskError::Refused { method: kind.method(), code, message });
                }
            };
            answers.push((key, result, charge));
        }
        drop(waiting);
        Ok(answers)
    }

    /// The client's response to request `id` of ours: to the call waiting for it, or
    /// dropped when none does (an unknown, repeated or late id).
    pub(super) fn answered(&self, id: RequestId, answer: Result<Value, PeerError>, charge: Charge) {
        let waiting = self.asked.lock().unwrap().waiting.remove(&id);
        match waiting {
            Some(sender) => {
                if sender.send((answer, charge)).is_err() {
                    tracing::debug!(id = ?id, "dropping a response: its call stopped waiting");
                }
            }
            None => tracing::debug!(id = ?id, "dropping a response to no request waiting"),
        }
    }

    /// `resources/subscribe`: remember `uri` (any URI: what serves it may come with a
    /// reload), answered `{}`.
    pub(super) fn subscribe(&self, params: Option<&Value>) -> Result<(), RpcError> {
        let uri = subscription_uri(params)?;
        if uri.len() > MAX_SUBSCRIBED_URI_BYTES {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: `uri` is {} bytes long; one subscribed to may be at most {MAX_SUBSCRIBED_URI_BYTES}",
                uri.len()
            )));
        }
        let mut subscriptions = self.subscriptions.lock().unwrap();
        if subscriptions.uris.contains_key(uri) {
            return Ok(());
        }
        if subscriptions.uris.len() >= MAX_SUBSCRIPTIONS {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: this session already has {MAX_SUBSCRIPTIONS} subscriptions, the most it may keep; unsubscribe first"
            )));
        }
        if subscriptions.bytes + uri.len() > MAX_SUBSCRIBED_BYTES {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: this session's subscriptions already keep {} bytes of URIs, and may keep at most {MAX_SUBSCRIBED_BYTES}; unsubscribe first",
                subscriptions.bytes
            )));
        }
        let admission = self.server.admission();
        let client = self.client().map(|client| admission.client_share(self.tenant.as_deref(), client));
        let kept = uri.len() + SUBSCRIPTION_OVERHEAD;
        let subscribed = match admission.subscribed_count(self.tenant.as_deref(), client.as_ref()) {
            Some(count) => match count.take(kept) {
                Some(taken) => Some(taken),
                None => {
                    let whose = if client.is_some() { "this client's" } else { "this tenant's" };
                    return Err(RpcError::invalid_params(format!(
                        "Invalid params: {whose} sessions already keep the most subscriptions they may \
                         ({} bytes); unsubscribe, or end idle sessions, first",
                        count.limit()
                    )));
                }
            },
            None => None,
        };
        let mut charge = admission.empty_for(self.tenant.as_deref(), client.as_ref());
        if !charge.grow(kept) {
            return Err(RpcError::new(
                INTERNAL_ERROR,
                "Server busy: the requests and subscriptions held fill the server's (or this tenant's) \
                 memory bound; try again later",
            ));
        }
        subscriptions.bytes += uri.len();
        subscriptions.uris.insert(uri.to_owned(), (charge, subscribed));
        Ok(())
    }

    /// `resources/unsubscribe`: forget `uri` (one never subscribed is no error).
    pub(super) fn unsubscribe(&self, params: Option<&Value>) -> Result<(), RpcError> {
        let uri = subscription_uri(params)?;
        let mut subscriptions = self.subscriptions.lock().unwrap();
        if subscriptions.uris.remove(uri).is_some() {
            subscriptions.bytes -= uri.len();
        }
        Ok(())
    }

    /// The subscribed URIs whose serving component differs between `before` and `after`
    /// (reloaded, added or gone), each as its `notifications/resources/updated`.
    pub(super) fn resources_updated(&self, before: &ToolSet, after: &ToolSet) -> Vec<Outgoing> {
        let subscriptions = self.subscriptions.lock().unwrap();
        (before.owners_changed(after, self.view(), subscriptions.uris.keys()).into_iter())
            .map(|uri| {
                let uri = uri.clone();
                Outgoing::Notification(ServerNotification::ResourceUpdated(ResourceUpdatedParams { uri }))
            })
            .collect()
    }
}

fn subscription_uri(params: Option<&Value>) -> Result<&str, RpcError> {
    params
        .and_then(|params| params.get("uri"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("Invalid params: `uri` must be a string"))
}
