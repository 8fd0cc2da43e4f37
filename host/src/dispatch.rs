//! # Dispatch: protocol messages in, runtime calls out, answers back
//!
//! A [`Server`] holds what every connection shares (the runtime, the tool list). A
//! [`Connection`] is one client's channel (a stdio process, an HTTP exchange): it decides
//! each message's era (2026-07-28 by its envelope, 2025-11-25 after `initialize`), answers
//! the quick methods inline, and runs each `tools/call` in its own task (unless it is done
//! in its first poll, made in place), so a slow call never blocks another. Call tasks run on
//! a runtime of their own whose threads have the lowest priority (nice 19), so
//! that a guest computing or doing file work never delays the transports or the calls
//! made in place ([`spawn_unless_ready`]); the transports' threads also take the shortest
//! scheduler slice, so that they preempt those threads as soon as they wake
//! (`runtime::engine::shorten_thread_slice`). A call task
//! forwards progress (only with a progress token, only increasing, at most one
//! notification per interval, none after the answer) and the guest's log lines, and on a
//! cancel sends nothing at all; the instance is torn down only after the answer is out.
//! Stopping the call is the runtime's job: this module only asks for it.
//!
//! **Client logging.** A guest's `log` lines go to the operator's log, always, and to the
//! client as `notifications/message` (`logger`: the tool's name) on the call's own stream
//! when the client asked for a level: a 2026-07-28 request by its `_meta` `logLevel`, a
//! 2025-11-25 client by `logging/setLevel` for its connection (its session over HTTP). No
//! level asked, no message: 2026-07-28 says MUST NOT; 2025-11-25 lets the server choose,
//! and it chooses the same. Per call, at most
//! [`CLIENT_LOG_QUEUE`](crate::runtime::CLIENT_LOG_QUEUE) lines wait (more are
//! dropped, counted, and said once, before the answer) and at most
//! [`CLIENT_LOGS_PER_SECOND`] go out, after a first burst of [`CLIENT_LOG_BURST`].
//!
//! **Answers are the protocol's types.** What the runtime reports becomes a
//! [`crate::protocol::types`] message here ([`answers`]: tools, call results, progress),
//! written for the revision of the request (2025-11-25 after `initialize`, else
//! 2026-07-28), and each transport writes the [`Outgoing`] messages it is handed straight
//! into bytes. Transports reach the runtime only through [`Server`]: its tool snapshot, the
//! `Mcp-Param-*` check ([`Server::check_param_headers`]) and [`Server::shutdown`].
//!
//! **Tool list changes.** A reload swaps the runtime's tool set; a client is told when
//! the list it would get changed (a reload that changes nothing sends nothing). A
//! 2026-07-28 client asks with `subscriptions/listen` ([`Connection`] keeps the stream:
//! the acknowledgement first, every message tagged with the listen id, a final answer
//! when the server ends it, at shutdown or when the credentials it was opened with
//! expire, so that an expired token keeps no stream). Listen streams are bounded by
//! [`ServerLimits::max_listen_streams`], of which a tenant of several holds at most half.
//! A 2025-era client gets plain notifications on its stream
//! ([`Connection::follow_tool_changes`],
//! which ends when the credentials of the `GET` that opened it expire).
//!
//! **Asking the client (MRTR).** A 2026-07-28 `tools/call` or `prompts/get` whose guest asks
//! for input is answered with an `InputRequiredResult` whose `requestState` is sealed
//! ([`sealed`]); the retry brings `inputResponses` and the state back, checked before any
//! instance starts, and runs the next round ([`input`]). A 2025-11-25 client is asked its
//! way instead: requests on stdio or on the call's stream ([`asking`]), its responses
//! routed back to the waiting call or prompt, which runs its next round with them
//! ([`Connection::ask_between_rounds`]).
//!
//! **Admission.** Every request is charged what it holds in memory, from its first byte
//! read to its last byte answered, against one server-wide bound ([`Admission`]): a parsed
//! message is charged its estimated size as a [`Value`] ([`crate::cost`]), not its
//! length, since 4 MiB of small keys is ten times that once parsed; with more than one
//! tenant, each one's requests hold at most half the bound; with fewer, each client (over
//! HTTP) half of it ([`admission`]). Over the bound a request
//! is refused at once ([`Refusal::Busy`]) rather than queued; a message that alone would
//! cost more than [`ServerLimits::max_request_cost`] is refused ([`Refusal::TooCostly`])
//! before it is built.

mod admission;
mod asking;
mod features;
mod input;
mod outbox;
pub mod sealed;

use admission::add_within;
pub use admission::{Admission, Charge, Client, ClientShare, SUBSCRIBED_PART, Taken, TenantPool, Whose};
pub(crate) use outbox::whose_share;
pub use outbox::{AnswerCharger, Framed, LineWriter, Outbox};

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::auth::{Caller, Tenant, Tenants};
use crate::protocol::asking::{ClientCapabilities, ServerRequest};
use crate::protocol::jsonrpc::{
    self, INTERNAL_ERROR, INVALID_REQUEST, Incoming, Outgoing, RequestId, RpcError,
};
use crate::protocol::mcp;
use crate::protocol::types::{
    CallToolResult, ErrorData, ListKind, LoggingLevel, Revision, ServerResult, SubscriptionFilter, Tool,
};
use crate::runtime::input::{ClientAbilities, InputRequired, InputRound};
use crate::runtime::{
    Call, CallEnded, CallError, CallHandle, CallOutcome, CallReport, CallTags, Outcome, RefusalReason,
    Runtime, Teardown, TenantView, Timeout, ToolSet,
};

pub use asking::{
    AskError, MAX_OUTSTANDING_ASKS, MAX_SUBSCRIBED_BYTES, MAX_SUBSCRIBED_URI_BYTES, MAX_SUBSCRIPTIONS,
};

mod answers;
pub use answers::{
    call_error, call_result, check_param_headers, dropped_logs_notification, guest_log_threshold,
    log_notification, logging_level, progress_notification, tool,
};

/// What every connection shares.
pub struct Server {
    runtime: Arc<Runtime>,
    /// Every tool of the latest tool set as MCP describes it, in a stable order, made once
    /// per set: (the set's generation, the list).
    tool_list: Mutex<ToolList>,
    /// The same per tenant: each tenant's view, made once per set (bounded by the tenants
    /// configured).
    tenant_tool_lists: Mutex<HashMap<Arc<str>, ToolList>>,
    /// The digests of what each tenant (or, without tenants, everyone) lists, for the
    /// streams that tell clients of list changes: made once per set and tenant.
    list_digests: Mutex<HashMap<Option<Arc<str>>, DigestSlot>>,
    /// The tenants configured (none: one implicit tenant, every tool).
    tenants: Arc<Tenants>,
    /// The shortest gap between two progress notifications of one call.
    progress_interval: Duration,
    /// Calls accepted whose answer is not out yet (or, after a cancel, not yet dropped):
    /// from the first check of their arguments to the last byte of their answer; and
    /// listen streams until their final answer is out.
    calls: AtomicUsize,
    /// `subscriptions/listen` streams open, on every connection.
    listens: AtomicUsize,
    max_listen_streams: usize,
    /// The tenants' shares of the listen streams, with two tenants or more.
    listen_pool: Option<TenantPool>,
    /// Listen streams open per holder (a caller, or without credentials an address) of
    /// each tenant: one subject in two tenants is two holders.
    listen_holders: Mutex<HashMap<ListenHolder, usize>>,
    /// Signalled whenever `calls` goes down.
    call_finished: Notify,
    /// The bytes requests hold, from their first byte read to their answer.
    admission: Admission,
    /// The most one parsed message may cost.
    max_request_cost: usize,
    /// Seals and opens the `requestState` of calls that ask the client for input.
    sealer: sealed::Sealer,
}

/// A tool list as MCP describes it, and the generation of the set it was made from.
type ToolList = (u64, Arc<Vec<Tool>>);
/// A set's generation, and the digests of a tenant's lists in it.
type ListDigests = (u64, features::Lists);
/// A tenant's newest [`ListDigests`], locked while they are made.
type DigestSlot = Arc<Mutex<Option<ListDigests>>>;

/// Bounds on what requests may hold in memory, on every transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Bytes all requests being read, queued or running may hold together (their bodies
    /// and their parsed messages, at estimated cost); a request over it is refused.
    pub max_queued_request_bytes: usize,
    /// The estimated in-memory size of one parsed message beyond which it is refused.
    pub max_request_cost: usize,
    /// `subscriptions/listen` streams open at once, across all clients; more are refused.
    /// (Over HTTP each also holds a connection, within `max_connections`.)
    pub max_listen_streams: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        // 256 MiB holds 64 calls with 4 MiB of string arguments each; 64 MiB is a 4 MiB
        // body of small values (about 10x once parsed) with room to spare.
        // Listen streams: half the default HTTP connections, so they never take them all.
        Self { max_queued_request_bytes: 256 << 20, max_request_cost: 64 << 20, max_listen_streams: 1024 }
    }
}

impl Server {
    pub fn new(runtime: Arc<Runtime>, progress_interval: Duration) -> Arc<Self> {
        Self::with_limits(runtime, progress_interval, ServerLimits::default())
    }

    pub fn with_limits(
        runtime: Arc<Runtime>,
        progress_interval: Duration,
        limits: ServerLimits,
    ) -> Arc<Self> {
        Self::with_tenants(runtime, progress_interval, limits, Arc::default())
    }

    /// A server for these tenants: each connection then serves one tenant's view.
    pub fn with_tenants(
        runtime: Arc<Runtime>,
        progress_interval: Duration,
        limits: ServerLimits,
        tenants: Arc<Tenants>,
    ) -> Arc<Self> {
        Self::with_sealer(runtime, progress_interval, limits, tenants, sealed::Sealer::random())
    }

    /// [`Server::with_tenants`], sealing request states with `sealer` (whose key every
    /// replica shares).
    pub fn with_sealer(
        runtime: Arc<Runtime>,
        progress_interval: Duration,
        limits: ServerLimits,
        tenants: Arc<Tenants>,
        sealer: sealed::Sealer,
    ) -> Arc<Self> {
        let tools = runtime.snapshot();
        let tool_list =
            Mutex::new((tools.generation(), Arc::new(tools.tools().map(answers::tool).collect())));
        let admission = Admission::new(limits.max_queued_request_bytes, tenants.len());
        let listen_pool = TenantPool::new(limits.max_listen_streams, tenants.len());
        Arc::new(Self {
            runtime,
            tool_list,
            tenant_tool_lists: Mutex::default(),
            list_digests: Mutex::default(),
            tenants,
            progress_interval,
            calls: AtomicUsize::new(0),
            listens: AtomicUsize::new(0),
            max_listen_streams: limits.max_listen_streams,
            listen_pool,
            listen_holders: Mutex::default(),
            call_finished: Notify::new(),
            admission,
            max_request_cost: limits.max_request_cost,
            sealer,
        })
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The tools served now: one request checks its headers and runs its call against
    /// this one snapshot, whatever a reload swaps in meanwhile.
    pub fn snapshot(&self) -> Arc<ToolSet> {
        self.runtime.snapshot()
    }

    /// Begin shutting down: every call in flight is stopped (grace, hard stop, cleanup)
    /// and new ones are refused; [`Server::drain`] then waits for their answers.
    pub fn shutdown(&self) {
        self.runtime.shutdown();
    }

    /// Check a 2026-07-28 `tools/call`'s `Mcp-Param-*` headers (read with `header`, by
    /// name) against the tool it names in `tools`, as `tenant` sees them; nothing to check
    /// for another method or an unknown tool (the call itself then says so). The error
    /// says which header is wrong and why.
    pub fn check_param_headers<'h>(
        &self,
        tools: &ToolSet,
        tenant: Option<&Tenant>,
        method: &str,
        params: Option<&Value>,
        header: impl Fn(&str) -> Option<&'h [u8]>,
        required: bool,
    ) -> Result<(), String> {
        let name = params.and_then(|params| params.get("name")).and_then(Value::as_str);
        let tool = name
            .filter(|_| method == "tools/call")
            .and_then(|name| tools.tool_for(tenant.map(|tenant| &tenant.view), name));
        match tool {
            Some(tool) => check_param_headers(tool, params, header, required),
            None => Ok(()),
        }
    }

    /// Whether `method` runs a guest for `tenant` with `tools`, and so spends its call
    /// rate: a feature no component offers it is answered as unknown, spending nothing.
    pub fn spends_rate(&self, tools: &ToolSet, tenant: Option<&Tenant>, method: &str) -> bool {
        mcp::runs_guest_code(method)
            && (method == "tools/call" || features::offered(tools, tenant.map(|tenant| &tenant.view), method))
    }

    /// The tools of `tools` as MCP describes them (made once per tool set).
    pub fn tool_list(&self, tools: &ToolSet) -> Arc<Vec<Tool>> {
        let mut cached = self.tool_list.lock().unwrap();
        if cached.0 != tools.generation() {
            *cached = (tools.generation(), Arc::new(tools.tools().map(answers::tool).collect()));
        }
        cached.1.clone()
    }

    /// The tools of `tools` that `view` sees (all without a view), made once per set.
    pub fn tool_list_for(&self, tools: &ToolSet, view: Option<&TenantView>) -> Arc<Vec<Tool>> {
        let Some(view) = view else { return self.tool_list(tools) };
        let mut lists = self.tenant_tool_lists.lock().unwrap();
        let cached = lists.entry(view.tenant.clone()).or_insert_with(|| (u64::MAX, Arc::default()));
        if cached.0 != tools.generation() {
            let list = tools.tools_for(Some(view)).map(answers::tool).collect();
            *cached = (tools.generation(), Arc::new(list));
        }
        cached.1.clone()
    }

    /// The digests of `tenant`'s lists in `tools`, made by `make` once per set and tenant:
    /// when a set is swapped in, every stream asks at once, and one makes them under its
    /// tenant's lock while that tenant's other streams wait for them (other tenants' do
    /// not).
    fn list_digests_for(
        &self,
        tools: &ToolSet,
        tenant: Option<&Arc<str>>,
        make: impl FnOnce() -> features::Lists,
    ) -> features::Lists {
        let slot = self.list_digests.lock().unwrap().entry(tenant.cloned()).or_default().clone();
        let mut slot = slot.lock().unwrap();
        match *slot {
            Some((generation, lists)) if generation == tools.generation() => lists,
            // A stream still on an older set (a newer one swapped in meanwhile) gets its
            // own, uncached: the cache keeps the newest.
            Some((generation, _)) if generation > tools.generation() => {
                drop(slot);
                make()
            }
            _ => {
                let lists = make();
                *slot = Some((tools.generation(), lists));
                lists
            }
        }
    }

    /// The tenants configured.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.tenants
    }

    /// The ledger of bytes requests hold.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Parse `text` into a message, charged its cost in memory; `text` itself is held by
    /// the caller (and charged by it, see [`Admission::empty_for`]) until it drops it.
    ///
    /// # Errors
    ///
    /// [`Refusal::TooCostly`] when the parsed message alone would cost more than the limit,
    /// [`Refusal::Busy`] when the bytes already held leave no room for it. Text that is not
    /// JSON is admitted as the [`Incoming::Invalid`] that says so, and costs nothing: it is
    /// never parsed (a parse fails only at the first bad byte, which may come after
    /// megabytes of values built and uncharged).
    pub fn admit(&self, text: &[u8]) -> Result<Admitted, Refusal> {
        self.admit_for(text, None, None)
    }

    /// [`Server::admit`], charged to `tenant`'s and `client`'s shares of the bound too (see
    /// [`Admission`]); [`Refusal::TenantBusy`] or [`Refusal::ClientBusy`] when a share has
    /// no room.
    pub fn admit_for(
        &self,
        text: &[u8],
        tenant: Option<&Tenant>,
        client: Option<&ClientShare>,
    ) -> Result<Admitted, Refusal> {
        let mut charge = self.admission.empty_for(tenant, client);
        // Not JSON: the answer that says so comes from the estimate's own failure (parsing
        // into a `Value` would build everything before the first bad byte, uncharged, only
        // to fail the same way).
        let estimate = match crate::cost::estimate(text) {
            Ok(estimate) => estimate,
            Err(error) => return Ok(Admitted { message: jsonrpc::parse_error(&error), charge }),
        };
        let id = estimate.id.as_ref().and_then(RequestId::parse);
        // A client's response refused is never answered: its id is the server's own (one
        // of the ids the server numbers its requests with, which the client's own requests
        // may share), so the refusal would read as the answer to the client's request of
        // that id. The request it answers gets the refusal as its answer instead, so the
        // call that asked ends now rather than at its deadline.
        let refuse = |refusal: Refusal| {
            if !estimate.is_response {
                return Err(refusal);
            }
            let message = match refusal.id() {
                Some(id) => Incoming::Response {
                    id: id.clone(),
                    answer: Err(jsonrpc::PeerError {
                        code: INTERNAL_ERROR,
                        message: format!("the client's answer was refused: {refusal}"),
                    }),
                },
                None => Incoming::Unanswered { problem: format!("a response refused: {refusal}") },
            };
            Ok(Admitted { message, charge: self.admission.empty() })
        };
        if estimate.bytes > self.max_request_cost {
            return refuse(Refusal::TooCostly { id, cost: estimate.bytes, limit: self.max_request_cost });
        }
        // The runtime keeps the arguments as text too while the call runs: about the
        // message's length again.
        let bytes = estimate.bytes.saturating_add(text.len());
        // With its text still held (the body, over HTTP), a message that could never fit in
        // what it is charged against, even on an idle server, is too costly, not a reason
        // to try again later.
        let ceiling = self.admission.ceiling(tenant, client);
        let weight = bytes.saturating_add(text.len());
        if weight > ceiling {
            // The weight compared, so that the refusal's numbers add up.
            return refuse(Refusal::TooCostly { id, cost: weight, limit: ceiling });
        }
        if !charge.grow(bytes) {
            // A small notification or response is let in uncharged even so: refusing a
            // cancel because the server is busy would keep running the calls it stops,
            // and refusing a client's answer would stall the call that asked for it.
            // Neither is answered, and each is done with (or bounded by what waits for
            // answers) before the next message is read.
            if text.len() <= SMALL_UNCHARGED_BYTES {
                let message = jsonrpc::parse(text);
                if matches!(message, Incoming::Notification { .. } | Incoming::Response { .. }) {
                    return Ok(Admitted { message, charge: self.admission.empty() });
                }
            }
            return refuse(match charge.full_share(bytes) {
                Some(Whose::Tenant) => Refusal::TenantBusy { id, limit: self.admission.tenant_limit() },
                Some(Whose::Client) => Refusal::ClientBusy { id, limit: ceiling },
                None => Refusal::Busy { id, limit: self.admission.limit() },
            });
        }
        Ok(Admitted { message: jsonrpc::parse(text), charge })
    }
}

/// The largest notification or response let in when the admission bound is spent.
pub const SMALL_UNCHARGED_BYTES: usize = 4 << 10;

/// A message let in, and the charge it holds until it is answered.
pub struct Admitted {
    pub message: Incoming,
    pub charge: Charge,
}

/// Why a message was not let in. Each carries the message's `id` when it could be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("the message would take about {cost} bytes of memory once parsed; the limit is {limit}")]
    TooCostly { id: Option<RequestId>, cost: usize, limit: usize },
    #[error("the server is busy: requests waiting or running hold its limit of {limit} bytes")]
    Busy { id: Option<RequestId>, limit: usize },
    #[error(
        "the server is busy for this tenant: its requests waiting or running and its answers not yet read fill what it may hold now (at most {limit} bytes, its share of the server's limit, and less while the other tenants hold what tenants share)"
    )]
    TenantBusy { id: Option<RequestId>, limit: usize },
    #[error(
        "the server is busy for this client: its requests waiting or running and its answers not yet read hold {limit} bytes, its share of the server's limit"
    )]
    ClientBusy { id: Option<RequestId>, limit: usize },
}

impl Refusal {
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Self::TooCostly { id, .. }
            | Self::Busy { id, .. }
            | Self::TenantBusy { id, .. }
            | Self::ClientBusy { id, .. } => id.as_ref(),
        }
    }

    /// The refusal as a JSON-RPC error: an invalid request when too costly, an internal
    /// error (the server is overloaded, not the client wrong) when busy.
    pub fn rpc_error(&self) -> RpcError {
        match self {
            Self::TooCostly { .. } => RpcError::new(INVALID_REQUEST, format!("Invalid Request: {self}")),
            Self::Busy { .. } | Self::TenantBusy { .. } | Self::ClientBusy { .. } => {
                RpcError::new(INTERNAL_ERROR, format!("Server busy: {self}; try again later"))
                    .with_data(retry_after_seconds())
            }
        }
    }
}

/// How long a refused client is told to wait before trying again.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// Requests charged more than this are measured again once their call has what it keeps
/// ([`call_keeps`]); smaller ones keep their charge (measuring costs more than it frees).
const CALL_MEASURED_PAST: usize = 64 << 10;

/// What a call keeps of a request `charged` bytes for as long as it runs: its arguments
/// (parsed, and their text for the guest), a retry's answers and state, and its name, id
/// and bookkeeping. The rest of the request (`_meta`, unknown members) is gone once the
/// call starts: a request padded there would otherwise hold its whole parsed size for
/// the call's life (minutes, for a 2025-era call waiting on its client's answer).
fn call_keeps(charged: usize, arguments: &Value, feeds: &Feeds) -> usize {
    if charged <= CALL_MEASURED_PAST {
        return charged;
    }
    let text = serde_json::to_vec(arguments).expect("a Value always serializes");
    let parsed = crate::cost::estimate(&text).map_or(charged, |estimate| estimate.bytes);
    // The round copies the retry's answers, and opens its state, beside the retry itself.
    let retry = 2 * feeds.retry.as_ref().map_or(0, input::Retry::held_bytes);
    (parsed + text.len() + retry + CALL_HELD_BYTES).min(charged)
}

/// Over a channel an answer is charged as it is sent ([`Outbox`]): its request's charge
/// goes first, so that its client's share need not hold both at once (the answer is
/// built, and the request's arguments are no longer needed). Written in place (stdio), an
/// answer is not charged, and the request's charge stays until it is out.
fn release_before_sending(out: &Outbox, charge: &mut Charge) {
    if let Outbox::Channel(..) = out {
        charge.shrink_to(0);
    }
}

/// What a 2025-era call keeps while it waits for its client's answers: the note and state
/// its guest left, and what it asked, parsed (about twice its JSON) and waiting for an
/// answer.
fn waiting_bytes(input: &InputRequired, note: Option<&[u8]>) -> usize {
    let asked: usize = input
        .requests
        .iter()
        .map(|(key, request)| {
            key.len() + 2 * serde_json::to_vec(&request.params()).map_or(0, |json| json.len())
        })
        .sum();
    asked + input.state.as_ref().map_or(0, Vec::len) + note.map_or(0, <[u8]>::len)
}

/// A call's name, id and bookkeeping, charged besides what [`call_keeps`] measures.
const CALL_HELD_BYTES: usize = 4096;

/// What an open listen stream stays charged in the admission bound: its id (at most
/// [`jsonrpc::MAX_ID_BYTES`]), its filter and its lists' fingerprints, with room to spare.
const LISTEN_HELD_BYTES: usize = 1024;

/// Resolves when credentials expiring at `at` have expired; never without an expiry.
async fn credentials_expired(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn retry_after_seconds() -> ErrorData {
    ErrorData::RetryAfter { retry_after_ms: None, retry_after_seconds: RETRY_AFTER_SECONDS }
}

/// Let the calling thread (one that reads a transport) preempt the threads of calls that
/// wait ([`spawn_unless_ready`]) as soon as it wakes.
pub fn shorten_thread_slice() {
    crate::runtime::engine::shorten_thread_slice();
}

/// The share of the listen streams one holder may keep: an eighth for a caller, half for
/// an address (behind a proxy, every client without credentials has the proxy's). A
/// stream costs its holder nothing to keep open (nothing need be read), so without a
/// share one client could take every stream and lock everyone else out of list changes.
fn holder_share(holder: &Client, limit: usize) -> usize {
    match holder {
        Client::Caller(_) => (limit / 8).max(1),
        Client::Address(_) => (limit / 2).max(1),
    }
}

/// Whose share of the listen streams a stream counts in: a client of a tenant.
type ListenHolder = (Option<crate::auth::TenantId>, Client);

/// One open `subscriptions/listen` stream, counted against the server's bound
/// ([`ServerLimits::max_listen_streams`]), its holder's share of it ([`holder_share`]) and,
/// when the server has more than one tenant, its tenant's share ([`TenantPool`]): each
/// given back when dropped.
struct ListenSlot {
    server: Arc<Server>,
    holder: Option<ListenHolder>,
    counted: bool,
    tenant: Option<Arc<Tenant>>,
}

impl ListenSlot {
    /// A slot, or the error that says whose bound is full.
    fn take(
        server: &Arc<Server>,
        tenant: Option<Arc<Tenant>>,
        holder: Option<Client>,
    ) -> Result<Self, RpcError> {
        let limit = server.max_listen_streams;
        let busy = |what: String| {
            RpcError::new(INTERNAL_ERROR, format!("Server busy: {what}; close one or try again later"))
        };
        // Each bound taken is given back by the slot's drop, a refusal's included.
        let mut slot = Self { server: server.clone(), holder: None, counted: false, tenant: None };
        if let Some(holder) = holder {
            let share = holder_share(&holder, limit);
            let holder = (tenant.as_ref().map(|tenant| tenant.id.clone()), holder);
            let mut held = server.listen_holders.lock().unwrap();
            let count = held.entry(holder.clone()).or_default();
            if *count >= share {
                return Err(busy(format!(
                    "this client has {share} subscriptions/listen streams open, the most one client keeps"
                )));
            }
            *count += 1;
            slot.holder = Some(holder);
        }
        // The tenant's pool before the server's count: the pool's parts add up to the
        // server's bound, so a stream within the tenant's guaranteed part is there
        // whatever the count says (another tenant's attempt, about to be refused by the
        // pool, may hold a unit of it for a moment).
        let mut guaranteed = false;
        if let Some(tenant) = tenant {
            let held = &tenant.holds.listen_streams;
            match &server.listen_pool {
                Some(pool) => match pool.take(held, 1) {
                    Some(taken) => guaranteed = taken == Taken::Guaranteed,
                    None => {
                        return Err(busy(match pool.share_full(held, 1) {
                            true => format!(
                                "this tenant has {} subscriptions/listen streams open, its share of the server's {limit}",
                                pool.share()
                            ),
                            false => format!(
                                "the subscriptions/listen streams tenants share are all open, and this tenant has \
                                 its own {} open",
                                pool.guaranteed()
                            ),
                        }));
                    }
                },
                None => _ = held.fetch_add(1, Ordering::AcqRel),
            }
            slot.tenant = Some(tenant);
        }
        if guaranteed {
            server.listens.fetch_add(1, Ordering::AcqRel);
        } else if add_within(&server.listens, 1, limit).is_none() {
            return Err(busy(format!(
                "{limit} subscriptions/listen streams are open, the most this server keeps"
            )));
        }
        slot.counted = true;
        Ok(slot)
    }
}

impl Drop for ListenSlot {
    fn drop(&mut self) {
        if self.counted {
            self.server.listens.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(tenant) = &self.tenant {
            let held = &tenant.holds.listen_streams;
            match &self.server.listen_pool {
                Some(pool) => pool.give_back(held, 1),
                None => _ = held.fetch_sub(1, Ordering::AcqRel),
            }
        }
        if let Some(holder) = &self.holder {
            let mut held = self.server.listen_holders.lock().unwrap();
            if let Some(count) = held.get_mut(holder) {
                *count -= 1;
                if *count == 0 {
                    held.remove(holder);
                }
            }
        }
    }
}

impl Server {
    /// Wait until every call accepted on any connection has its answer out, or `timeout`
    /// passes (at least what the tools that calls run on now need to stop and be cleaned
    /// up, [`crate::runtime::Runtime::drain_budget`]: a reload may have brought longer
    /// budgets than those at start); returns whether they all did.
    /// (Waiting for free call slots would miss a call still checking its arguments, which
    /// holds none yet.)
    pub async fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout.max(self.runtime.drain_budget());
        loop {
            let mut finished = std::pin::pin!(self.call_finished.notified());
            finished.as_mut().enable();
            if self.calls.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return false;
            }
        }
    }

    /// One request counted by `Connection::enter_in_flight` is done, its answer out: a
    /// drain may see it finished.
    fn finish_call(&self) {
        self.calls.fetch_sub(1, Ordering::AcqRel);
        self.call_finished.notify_waiters();
    }
}

/// A call in flight: its handle once it has a slot, and whether the client cancelled it.
///
/// `cancelled` is the one source of truth for "send nothing more for this request": it is
/// checked before every progress notification and when the answer is decided, whatever
/// the call's outcome (a guest may still return normally in its grace period, a timeout
/// may have stopped it first, or it may never have left the queue).
#[derive(Default)]
struct InFlight {
    handle: Option<CallHandle>,
    cancelled: bool,
    /// Wakes a call still waiting for a slot when it is cancelled.
    cancel_signal: Arc<Notify>,
}

/// Log lines one call may send its client per second, after its first burst.
pub const CLIENT_LOGS_PER_SECOND: u32 = 50;
/// Log lines one call may send its client at once before the rate applies.
pub const CLIENT_LOG_BURST: u32 = 16;

/// When a call's next log line may go out: a burst of [`CLIENT_LOG_BURST`], then one per
/// `1/CLIENT_LOGS_PER_SECOND` (the generic cell rate algorithm: one instant to keep).
struct LogRate {
    /// When the line sent after the burst's would be due.
    due: Instant,
}

impl LogRate {
    const INTERVAL: Duration = Duration::from_millis(1000 / CLIENT_LOGS_PER_SECOND as u64);

    fn new() -> Self {
        Self { due: Instant::now() }
    }

    /// The earliest the next line may go.
    fn next_slot(&self) -> Instant {
        self.due.checked_sub(Self::INTERVAL * (CLIENT_LOG_BURST - 1)).unwrap_or(self.due)
    }

    fn take(&mut self) {
        self.due = self.due.max(Instant::now()) + Self::INTERVAL;
    }
}

/// One client's channel to the server.
pub struct Connection {
    server: Arc<Server>,
    /// Set by a 2025-era `initialize`: requests without the 2026 envelope are then served.
    legacy: AtomicBool,
    /// Whether a stream of this connection gets 2025-era tool list changes (one at most).
    following: Arc<AtomicBool>,
    /// When a stream last stopped following it: a 2025-era session followed for hours is
    /// used until then, not idle since the stream opened.
    followed_until: std::sync::Mutex<Option<std::time::Instant>>,
    /// Turns true when the 2025-era session this connection serves ends (DELETE, or
    /// closed to make room): its stream of list changes ends with it.
    session_ended: tokio::sync::watch::Sender<bool>,
    in_flight: Mutex<HashMap<RequestId, InFlight>>,
    /// The tenant this connection serves (`None`: no tenants are configured).
    tenant: Option<Arc<Tenant>>,
    /// Who within the tenant (`None`: not known, as over stdio); what is sealed for this
    /// connection's requests opens only for the same caller.
    caller: Option<Caller>,
    /// Where the tenant's `calls_per_second` is enforced.
    rate_check: RateCheck,
    /// The address the client connects from, over HTTP.
    peer: std::sync::OnceLock<std::net::IpAddr>,
    /// When the credentials of the request this connection serves expire (an OAuth
    /// token's `exp` with its leeway): a listen stream, which has no end of its own,
    /// ends then, and the client listens again with a fresh token.
    credentials_expire: std::sync::OnceLock<tokio::time::Instant>,
    /// The log level a 2025-era client set with `logging/setLevel` (none: no log).
    log_level: Mutex<Option<LoggingLevel>>,
    /// What a 2025-era client declared it serves at `initialize` ([`asking`]).
    client: Mutex<ClientCapabilities>,
    /// Requests sent to the client that wait for its answer ([`asking`]).
    asked: Mutex<asking::Asked>,
    /// The resource URIs a 2025-era client subscribed to.
    subscriptions: Mutex<asking::Subscriptions>,
}

/// Why a stream of 2025-era list changes was not opened.
#[derive(Debug)]
pub enum NotFollowed {
    /// The connection has one already.
    AlreadyOpen,
    /// The server's listen streams, or the tenant's share of them, are all open.
    Busy(RpcError),
}

/// Who refuses a tenant's calls over its `calls_per_second`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateCheck {
    /// Dispatch does, answering a JSON-RPC error with a retry hint (stdio).
    Here,
    /// The transport already did, before the request reached dispatch (HTTP: a 429).
    Done,
}

/// The JSON-RPC error for a call over its tenant's rate, with when to retry.
pub fn rate_limited(tenant: &Tenant, retry_after: Duration) -> RpcError {
    let per_second = tenant.rate.as_ref().map_or(0, |rate| rate.per_second());
    let milliseconds = retry_after.as_millis().max(1) as u64;
    RpcError::new(
        INTERNAL_ERROR,
        format!("Rate limited: at most {per_second} calls per second; try again in {milliseconds} ms"),
    )
    .with_data(ErrorData::RetryAfter {
        retry_after_ms: Some(milliseconds),
        retry_after_seconds: milliseconds.div_ceil(1000),
    })
}

/// What a request gets right away.
enum Reply {
    Result(ServerResult),
    Error(RpcError),
    /// A task will answer (or, after a cancel, deliberately not).
    Later,
}

impl Connection {
    /// The error for a request running guest code over its tenant's `calls_per_second`,
    /// where dispatch enforces it ([`RateCheck::Here`]).
    fn over_rate(&self, method: &str) -> Option<RpcError> {
        let tenant = (self.tenant.as_ref())
            .filter(|_| self.rate_check == RateCheck::Here && mcp::runs_guest_code(method))?;
        let retry_after = tenant.admit_call().err()?;
        Some(rate_limited(tenant, retry_after))
    }

    /// A connection to `server`.
    pub fn new(server: Arc<Server>) -> Arc<Self> {
        Self::for_tenant(server, None, RateCheck::Here)
    }

    /// A connection serving `tenant`'s view of the tools, under its quotas.
    pub fn for_tenant(server: Arc<Server>, tenant: Option<Arc<Tenant>>, rate_check: RateCheck) -> Arc<Self> {
        Self::for_caller(server, tenant, None, rate_check)
    }

    /// [`Connection::for_tenant`], for requests `caller` made.
    pub fn for_caller(
        server: Arc<Server>,
        tenant: Option<Arc<Tenant>>,
        caller: Option<Caller>,
        rate_check: RateCheck,
    ) -> Arc<Self> {
        Arc::new(Self {
            server,
            legacy: AtomicBool::new(false),
            following: Arc::default(),
            followed_until: std::sync::Mutex::default(),
            session_ended: tokio::sync::watch::Sender::new(false),
            in_flight: Mutex::new(HashMap::new()),
            tenant,
            caller,
            rate_check,
            peer: std::sync::OnceLock::new(),
            credentials_expire: std::sync::OnceLock::new(),
            log_level: Mutex::new(None),
            client: Mutex::default(),
            asked: Mutex::default(),
            subscriptions: Mutex::default(),
        })
    }

    /// The tenant this connection serves.
    pub fn tenant(&self) -> Option<&Arc<Tenant>> {
        self.tenant.as_ref()
    }

    /// Who within the tenant made the connection's requests, when known.
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref()
    }

    /// Tell the connection the address its client connects from (HTTP): without
    /// credentials, that is who holds its listen streams.
    pub fn set_peer(&self, address: std::net::IpAddr) {
        let _ = self.peer.set(address);
    }

    /// When the request's credentials expire; see [`Connection::follow_tool_changes`] and
    /// `subscriptions/listen`, the streams that end then.
    pub fn set_credentials_expire(&self, at: tokio::time::Instant) {
        let _ = self.credentials_expire.set(at);
    }

    /// The address the client connects from, when known (HTTP).
    pub fn peer(&self) -> Option<std::net::IpAddr> {
        self.peer.get().copied()
    }

    /// Who this connection's client is, for its shares: its caller, else the address it
    /// connects from (none over stdio, whose one client needs no share).
    pub fn client(&self) -> Option<Client> {
        Client::of(self.caller.as_ref(), self.peer.get().copied())
    }

    /// The tags of request `id`'s call: its id and, with tenants, the tenant's name (a
    /// configured one: a bounded label).
    fn call_tags(&self, id: &RequestId) -> CallTags {
        let mut tags = call_tags(id);
        tags.tenant = self.tenant.as_ref().map(|tenant| tenant.id.to_string());
        tags
    }

    /// Who this connection's sealed states are for.
    fn holder(&self) -> sealed::Holder<'_> {
        sealed::Holder {
            tenant: self.tenant.as_ref().map(|tenant| tenant.id.as_str()),
            caller: self.caller.as_ref(),
        }
    }

    fn view(&self) -> Option<&TenantView> {
        self.tenant.as_deref().map(|tenant| &tenant.view)
    }

    /// The server this connection belongs to.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Handle one message from the client; what it causes to be sent goes to `out`.
    pub async fn handle(self: &Arc<Self>, message: Incoming, out: &Outbox) {
        let charge = self.server.admission.empty();
        self.handle_admitted(Admitted { message, charge }, out).await;
    }

    /// Handle one message let in by [`Server::admit`]; its charge is held until its answer
    /// is out (for a call, until the call's task ends).
    pub async fn handle_admitted(self: &Arc<Self>, admitted: Admitted, out: &Outbox) {
        self.handle_admitted_in(admitted, None, out).await;
    }

    /// [`Connection::handle_admitted`], serving a call from `tools`, the snapshot the
    /// transport already took to check the request (HTTP checks `Mcp-Param-*` headers
    /// against the tool), so that one request sees one tool set throughout.
    pub async fn handle_admitted_in(
        self: &Arc<Self>,
        admitted: Admitted,
        tools: Option<Arc<ToolSet>>,
        out: &Outbox,
    ) {
        let Admitted { message, charge } = admitted;
        match message {
            Incoming::Invalid { id, error } => out.send(jsonrpc::failure(id.as_ref(), &error)).await,
            Incoming::Unanswered { problem } => tracing::debug!("ignoring a message: {problem}"),
            Incoming::Response { id, answer } => self.answered(id, answer, charge),
            Incoming::Notification { method, params } => {
                if method == "notifications/cancelled" {
                    self.cancel(params.as_ref());
                }
                // Anything else (e.g. notifications/initialized) needs no action.
            }
            Incoming::Request { id, method, params } => {
                match self.route(&id, &method, params, tools, out, charge) {
                    Reply::Result(result) => out.send(jsonrpc::success(&id, result)).await,
                    Reply::Error(error) => out.send(jsonrpc::failure(Some(&id), &error)).await,
                    Reply::Later => {}
                }
            }
        }
    }

    fn route(
        self: &Arc<Self>,
        id: &RequestId,
        method: &str,
        params: Option<Value>,
        tools: Option<Arc<ToolSet>>,
        out: &Outbox,
        charge: Charge,
    ) -> Reply {
        let modern = mcp::has_envelope(params.as_ref());
        if method == "initialize" && !modern {
            self.legacy.store(true, Ordering::Relaxed);
            self.set_client_capabilities(ClientCapabilities::from_initialize(params.as_ref()));
            let requested =
                params.as_ref().and_then(|params| params.get("protocolVersion")).and_then(Value::as_str);
            // A stream that outlives the request (stdio) is where list changes go; over
            // HTTP they go on the session's GET stream.
            if let Outbox::Lines(_) = out {
                // The one stream a stdio client has: it never follows twice, nor takes a slot.
                let _ = self.follow_tool_changes(out.clone(), None);
            }
            let mut result = mcp::initialize_result(requested);
            crate::protocol::features::advertise(
                &mut result.capabilities,
                self.offered(),
                Revision::R2025_11_25,
            );
            return Reply::Result(result.into());
        }
        let legacy = !modern && self.legacy.load(Ordering::Relaxed);
        let revision = if legacy { Revision::R2025_11_25 } else { Revision::R2026_07_28 };
        // A 2026-07-28 request's envelope and version come before its method (§12.6), as
        // on HTTP: whatever the method, a missing envelope is -32602, an unknown version
        // -32022.
        let envelope = if legacy {
            None
        } else {
            match mcp::check_envelope(params.as_ref()) {
                Ok(envelope) => Some(envelope),
                Err(error) => return Reply::Error(error),
            }
        };
        if method == "initialize" {
            return Reply::Error(RpcError::method_not_found(method));
        }
        if legacy && method == "ping" {
            return Reply::Result(mcp::empty_result(revision).into());
        }
        // `server/discover` and `subscriptions/listen` are 2026-07-28's, `logging/setLevel`
        // and resource subscriptions 2025-11-25's.
        let known = matches!(method, "tools/list" | "tools/call")
            || features::METHODS.contains(&method)
            || (matches!(method, "server/discover" | "subscriptions/listen") && !legacy)
            || (method == "logging/setLevel" && legacy)
            || (matches!(method, "resources/subscribe" | "resources/unsubscribe")
                && legacy
                && self.offered().resources);
        if !known {
            return Reply::Error(RpcError::method_not_found(method));
        }
        match method {
            // What a tenant sees is its own: never to be cached across tenants.
            "server/discover" => {
                let mut result = mcp::discover_result(self.tenant.is_some(), revision);
                crate::protocol::features::advertise(&mut result.capabilities, self.offered(), revision);
                Reply::Result(result.into())
            }
            method if features::METHODS.contains(&method) => {
                // A feature not offered is unknown, before it spends any rate.
                let tools = tools.unwrap_or_else(|| self.server.runtime.snapshot());
                if !features::offered(&tools, self.view(), method) {
                    return Reply::Error(RpcError::method_not_found(method));
                }
                if let Some(error) = self.over_rate(method) {
                    return Reply::Error(error);
                }
                // A prompt may ask the client for input, as a tool may.
                let retry = match (&envelope, method) {
                    (Some(envelope), "prompts/get") => {
                        match input::Retry::parse(params.as_ref(), envelope.client_capabilities.as_ref()) {
                            Ok(retry) => Some(retry),
                            Err(error) => return Reply::Error(error),
                        }
                    }
                    _ => None,
                };
                self.route_feature(id, method, params, tools, revision, retry, out, charge)
            }
            "subscriptions/listen" => self.start_listen(id, params.as_ref(), out.clone(), charge),
            "resources/subscribe" => match self.subscribe(params.as_ref()) {
                Ok(()) => Reply::Result(mcp::empty_result(revision).into()),
                Err(error) => Reply::Error(error),
            },
            "resources/unsubscribe" => match self.unsubscribe(params.as_ref()) {
                Ok(()) => Reply::Result(mcp::empty_result(revision).into()),
                Err(error) => Reply::Error(error),
            },
            "logging/setLevel" => match mcp::set_level(params.as_ref()) {
                Ok(level) => {
                    *self.log_level.lock().unwrap() = Some(level);
                    Reply::Result(mcp::empty_result(revision).into())
                }
                Err(error) => Reply::Error(error),
            },
            "tools/list" => {
                let cursor = params.as_ref().and_then(|params| params.get("cursor"));
                let tools = tools.unwrap_or_else(|| self.server.runtime.snapshot());
                let list = self.server.tool_list_for(&tools, self.view());
                match mcp::list_result(&list, cursor, self.tenant.is_some(), revision) {
                    Ok(result) => Reply::Result(result.into()),
                    Err(error) => Reply::Error(error),
                }
            }
            _ => {
                // The call's one snapshot of the tools: a reload from here on changes
                // nothing for it.
                let tools = tools.unwrap_or_else(|| self.server.runtime.snapshot());
                if let Some(error) = self.over_rate(method) {
                    return Reply::Error(error);
                }
                let tool = params.as_ref().and_then(|params| params.get("name")).and_then(Value::as_str);
                if let Some(spec) = tool.and_then(|tool| tools.tool_for(self.view(), tool))
                    && let Err(error) = mcp::check_capabilities(envelope.as_ref(), &spec.requires)
                {
                    self.refused(id, tool, RefusalReason::MissingCapability);
                    return Reply::Error(error);
                }
                let log_level = match &envelope {
                    Some(envelope) => envelope.log_level,
                    None => *self.log_level.lock().unwrap(),
                };
                // Only a 2026-07-28 request asks the client through its result.
                let retry = match &envelope {
                    Some(envelope) => {
                        match input::Retry::parse(params.as_ref(), envelope.client_capabilities.as_ref()) {
                            Ok(retry) => Some(retry),
                            Err(error) => {
                                self.refused(id, tool, RefusalReason::InvalidArguments);
                                return Reply::Error(error);
                            }
                        }
                    }
                    None => None,
                };
                let progress_token = match mcp::progress_token(params.as_ref()) {
                    Ok(token) => token,
                    Err(error) => {
                        self.refused(id, tool, RefusalReason::InvalidArguments);
                        return Reply::Error(error);
                    }
                };
                let feeds = Feeds { progress_token, log_level, retry, progress_sent: Arc::default() };
                self.start_call(id, params, tools, revision, feeds, out.clone(), charge)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_call(
        self: &Arc<Self>,
        id: &RequestId,
        params: Option<Value>,
        tools: Arc<ToolSet>,
        revision: Revision,
        feeds: Feeds,
        out: Outbox,
        mut charge: Charge,
    ) -> Reply {
        let mut params = params.unwrap_or_default();
        let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
            self.refused(id, None, RefusalReason::InvalidArguments);
            return Reply::Error(RpcError::invalid_params("Invalid params: `name` must be a string"));
        };
        // Taken, not copied: a large request's arguments are held once.
        let arguments = match params.get_mut("arguments").map(Value::take) {
            // `null` is read as absent, as a cursor's is: clients whose optional fields
            // serialize as `null` send it, and it asks for nothing else.
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(arguments @ Value::Object(_)) => arguments,
            Some(_) => {
                self.refused(id, Some(&name), RefusalReason::InvalidArguments);
                return Reply::Error(RpcError::invalid_params(
                    "Invalid params: `arguments` must be an object",
                ));
            }
        };
        let cancel_signal = match self.enter_in_flight(id) {
            Ok(signal) => signal,
            Err(error) => return Reply::Error(error),
        };
        drop(params);
        charge.shrink_to(call_keeps(charge.bytes(), &arguments, &feeds));
        let connection = self.clone();
        let id = id.clone();
        spawn_unless_ready(async move {
            // What the call keeps of its request counts until its answer is out.
            let (answer, teardown) = connection
                .run_rounds(
                    &id,
                    &tools,
                    &name,
                    &arguments,
                    feeds,
                    revision,
                    &cancel_signal,
                    &out,
                    &mut charge,
                )
                .await;
            // Left however it ended (a cancelled call has no answer, and must not stay).
            let cancelled = connection.leave_in_flight(&id, &cancel_signal);
            if let Some(answer) = answer.filter(|_| !cancelled) {
                release_before_sending(&out, &mut charge);
                out.send(answer).await;
            }
            drop((charge, arguments));
            if let Some(teardown) = teardown {
                match &out {
                    // The answer is written: free the instance and make the next spare
                    // before reading on, in this thread (handing it to another costs a
                    // wake-up that this thread pays more for than the work itself).
                    Outbox::Lines(_) => teardown.finish().await,
                    // The transport writes the answer only after this task, so there is
                    // no idle moment to fill: free the instance now and make no spare
                    // (under concurrent HTTP load a spare made in a task of its own cost
                    // more than it saved: 15.5k against 16.8k requests/s, BENCHMARKS.md).
                    Outbox::Channel(..) => drop(teardown),
                }
            }
            // Only now, with the teardown done and the call's event told to the observers
            // (the call log, the metrics), may a drain see the call finished: a server that
            // exits after its drain loses nothing.
            connection.server.finish_call();
        });
        Reply::Later
    }

    /// Run a call to its answer (`None` when the client cancelled it, or it went out already), and the teardown of
    /// its last round, to drop once the answer is out. A 2025-era client is asked what the
    /// guest needs between rounds ([`Connection::ask_between_rounds`]); a 2026-07-28
    /// call's request for input is its answer.
    #[allow(clippy::too_many_arguments)]
    async fn run_rounds(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        name: &str,
        arguments: &Value,
        feeds: Feeds,
        revision: Revision,
        cancel_signal: &Notify,
        out: &Outbox,
        charge: &mut Charge,
    ) -> (Option<Outgoing>, Option<Teardown>) {
        let abilities = self.client_abilities();
        // What the request keeps for the whole call; a wait for the client holds more.
        let kept = charge.bytes();
        // The whole call, every round and every wait for the client, within the tool's
        // maximum duration.
        let limits = tools.limits(name).cloned().unwrap_or_default();
        let deadline = limits.max_duration.map(|max| (Instant::now() + max, max));
        let mut round = InputRound::first(abilities);
        // The last note the guest left for a cleanup, carried from round to round.
        let mut note = None;
        // The charges of the answers the next round runs with, until it ends.
        let mut answers_held = AnswersHeld::default();
        for rounds in 1.. {
            let ran = self
                .run_call(id, tools, name, arguments, feeds.clone(), revision, round, cancel_signal, out)
                .await;
            drop(std::mem::take(&mut answers_held));
            charge.shrink_to(kept);
            let input = match ran {
                Ran::Answered(answer, teardown) => return (answer, teardown),
                Ran::NeedsInput(input, note_left, teardown) => {
                    drop(teardown);
                    note = note_left;
                    input
                }
                Ran::CancelledUnstarted(reserved) => {
                    let teardown = match (rounds > 1, reserved) {
                        // A 2026-07-28 retry: its guest ran in the request before.
                        (false, reserved)
                            if let Some(retry) =
                                feeds.retry.as_ref().filter(|retry| retry.brings_state()) =>
                        {
                            self.clean_up_cancelled_retry(id, tools, name, arguments, reserved, retry).await
                        }
                        (false, _) => self.cancelled_before_first_round(id, name),
                        (true, reserved @ Some(_)) => {
                            stop_between_rounds(reserved, Outcome::Cancelled, None, name).await
                        }
                        (true, None) => {
                            self.clean_up_between_rounds(id, tools, name, arguments, Outcome::Cancelled, note)
                                .await
                        }
                    };
                    return (None, teardown);
                }
                // A later round found no slot (the pool full, or shutdown begun): the guest
                // ran before, so its cleanup runs as after any stop.
                Ran::Refused(answer, outcome) if rounds > 1 => {
                    let clean_up = self.clean_up_between_rounds(id, tools, name, arguments, outcome, note);
                    return (
                        None,
                        self.answer_beside_cleanup(id, Some(answer), out, cancel_signal, clean_up).await,
                    );
                }
                Ran::Refused(answer, _) => return (Some(answer), None),
            };
            // Ended here with an error, the guest that asked is given up, and cleaned up
            // (beside the answer, whenever a round ends so).
            let give_up = |answer: Option<Outgoing>, outcome: Outcome, note: Option<Vec<u8>>| {
                let clean_up = self.clean_up_between_rounds(id, tools, name, arguments, outcome, note);
                self.answer_beside_cleanup(id, answer, out, cancel_signal, clean_up)
            };
            if rounds >= MAX_INPUT_ROUNDS {
                let problem = format!(
                    "the tool asked for input {rounds} times; the limit is {MAX_INPUT_ROUNDS} rounds"
                );
                let answer = jsonrpc::success(id, CallToolResult::error(problem, revision));
                return (None, give_up(Some(answer), Outcome::Cancelled, note).await);
            }
            // The round's store and slot are gone, but what the guest left stays while the
            // client is asked: counted in the bound as the request is, until the next round
            // ends, so that waiting calls make new requests wait rather than hold memory
            // nothing counts (already made, it is held whatever the bound).
            charge.hold(waiting_bytes(&input, note.as_deref()));
            match self.ask_between_rounds(input, deadline, cancel_signal, out).await {
                Ok((responses, state, held)) => {
                    round = InputRound::retry(abilities, responses, state);
                    round.cleanup_note = note.clone();
                    round.call_ends_by = deadline.map(|(at, _)| at.into_std());
                    answers_held = held;
                }
                Err(Between::Failed(problem)) => {
                    let answer = jsonrpc::success(id, CallToolResult::error(problem, revision));
                    return (None, give_up(Some(answer), Outcome::Cancelled, note).await);
                }
                Err(Between::Stopped(outcome)) => {
                    // A cancelled call is answered nothing.
                    let answer = (outcome != Outcome::Cancelled)
                        .then(|| jsonrpc::success(id, call_result(outcome.clone(), &limits, revision)));
                    return (None, give_up(answer, outcome, note).await);
                }
            }
        }
        unreachable!("the rounds end at MAX_INPUT_ROUNDS")
    }

    /// A tool call cancelled before its first round's guest ran: nothing ran, so the
    /// observers are told and that is all.
    fn cancelled_before_first_round(&self, id: &RequestId, name: &str) -> Option<Teardown> {
        let event = CallEnded::unstarted(self.call_tags(id), CallOutcome::Cancelled);
        self.server.runtime.report_unstarted(event, self.view(), Some(name));
        None
    }

    /// A 2026-07-28 retry cancelled before its guest ran: the guest of the request before
    /// ran and sealed its state for the client, who now gives the call up, so it is
    /// cleaned up with the note it sealed (the retry's `reserved` call has its state
    /// opened; without one, waiting for a slot, it is opened here). A state that does not
    /// open was never this call's: nothing is cleaned up for it.
    async fn clean_up_cancelled_retry(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        name: &str,
        arguments: &Value,
        reserved: Option<Call>,
        retry: &input::Retry,
    ) -> Option<Teardown> {
        let call = match reserved {
            Some(call) => call,
            None => {
                let cleaning = self.server.runtime.call_to_clean_up(
                    tools,
                    self.view(),
                    name,
                    arguments,
                    self.call_tags(id),
                );
                let Some(call) = cleaning else { return self.cancelled_before_first_round(id, name) };
                let component = call.component();
                match retry.round_for(&self.server.sealer, || self.tool_binding(&component, name, arguments))
                {
                    Ok((round, _)) => call.with_input(round),
                    Err(_) => return self.cancelled_before_first_round(id, name),
                }
            }
        };
        stop_between_rounds(Some(call), Outcome::Cancelled, None, name).await
    }

    /// What a tool call's sealed state is bound to.
    fn tool_binding(&self, component: &str, name: &str, arguments: &Value) -> sealed::Binding {
        sealed::Binding::new(component, format!("tools/call {name}"), self.holder(), arguments)
    }

    /// Stop a tool call whose guest ran a round, between rounds (`outcome`: why), and run
    /// its cleanup with the last `note` it left: in no call slot, so that neither a full
    /// pool nor shutdown keeps a guest that may hold a lock from being cleaned up
    /// ([`crate::runtime::Runtime::call_to_clean_up`]).
    async fn clean_up_between_rounds(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        name: &str,
        arguments: &Value,
        outcome: Outcome,
        note: Option<Vec<u8>>,
    ) -> Option<Teardown> {
        let call =
            self.server.runtime.call_to_clean_up(tools, self.view(), name, arguments, self.call_tags(id));
        stop_between_rounds(call, outcome, note, name).await
    }

    /// A round cancelled after its guest returned: nothing more is sent for it. A guest
    /// that asked for input has run, though. A 2025-era round ends as asking (the cancel's
    /// stored signal then stops the call at once between rounds, and its cleanup runs with
    /// the note the guest left). A 2026-07-28 one is given up, since its client was never
    /// sent the state to come back with, and cleaned up with that note.
    #[allow(clippy::too_many_arguments)]
    async fn cancelled_round(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        name: &str,
        arguments: &Value,
        revision: Revision,
        report: CallReport,
        teardown: Teardown,
    ) -> Ran {
        match report.outcome {
            Outcome::InputRequired(input) if revision == Revision::R2025_11_25 => {
                Ran::NeedsInput(input, report.cleanup_note, teardown)
            }
            Outcome::InputRequired(_) => {
                drop(teardown);
                let note = report.cleanup_note;
                Ran::Answered(
                    None,
                    self.clean_up_between_rounds(id, tools, name, arguments, Outcome::Cancelled, note).await,
                )
            }
            _ => Ran::Answered(None, Some(teardown)),
        }
    }

    /// Send `answer` (none for a cancelled request) beside `clean_up`, the cleanup of a
    /// guest given up, and return its teardown: a client slow to read holds the cleanup up
    /// no more than the cleanup holds the answer
    /// ([`Connection::answer_before_cleanup`]).
    async fn answer_beside_cleanup(
        &self,
        id: &RequestId,
        answer: Option<Outgoing>,
        out: &Outbox,
        signal: &Notify,
        clean_up: impl Future<Output = Option<Teardown>>,
    ) -> Option<Teardown> {
        let answer = async {
            if let Some(answer) = answer {
                self.answer_before_cleanup(id, answer, out, signal).await;
            }
        };
        tokio::join!(answer, clean_up).1
    }

    /// What a 2025-era client declared it can be asked, as a round tells the guest.
    fn client_abilities(&self) -> ClientAbilities {
        input::abilities(*self.client.lock().unwrap())
    }

    /// Ask the client what a round of the guest needs, within the call's `deadline` and
    /// until a cancel: its answers, as the next round gets them, and the guest's state.
    async fn ask_between_rounds(
        &self,
        input: InputRequired,
        deadline: Option<(Instant, Duration)>,
        cancel_signal: &Notify,
        out: &Outbox,
    ) -> Result<(Vec<(String, String)>, Option<Vec<u8>>, AnswersHeld), Between> {
        let InputRequired { requests, state } = input;
        let requests = requests
            .into_iter()
            .map(|(key, request)| Ok((key, ServerRequest::parse(request.method(), request.params())?)))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|problem| {
                Between::Failed(format!("the tool asked for input the client cannot be sent: {problem}"))
            })?;
        let expired = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // Shutdown stops a call waiting for its client as it stops one running (its answer
        // could not get in over HTTP, where each request is refused from then on).
        let mut shutdown = self.server.runtime.shutting_down();
        let answers = tokio::select! {
            biased;
            () = cancel_signal.notified() => return Err(Between::Stopped(Outcome::Cancelled)),
            _ = shutdown.wait_for(|stopping| *stopping) => return Err(Between::Stopped(Outcome::Shutdown)),
            () = expired => {
                let max = deadline.map(|(_, max)| max).unwrap_or_default();
                return Err(Between::Stopped(Outcome::TimedOut(Timeout::MaxDuration(max))));
            }
            answers = self.ask_all(requests, out) => answers,
        };
        let answers = answers
            .map_err(|error| Between::Failed(format!("the tool's request for input failed: {error}")))?;
        let mut held = AnswersHeld(Vec::with_capacity(answers.len()));
        let responses = answers
            .into_iter()
            .map(|(key, answer, mut charge)| {
                let text = answer.to_string();
                // The round keeps the answer's text (twice: the round's copy for the guest).
                charge.shrink_to(2 * (key.len() + text.len()) + ANSWER_HELD_BYTES);
                held.0.push(charge);
                (key, text)
            })
            .collect();
        Ok((responses, state, held))
    }

    /// Run one round of a call to its answer (`None` when the client cancelled it, or it went out already) and the
    /// round's teardown, to drop once the answer is out; or, for a 2025-era client, what
    /// the guest asks for.
    #[allow(clippy::too_many_arguments)]
    async fn run_call(
        &self,
        id: &RequestId,
        tools: &ToolSet,
        name: &str,
        arguments: &Value,
        feeds: Feeds,
        revision: Revision,
        round: InputRound,
        cancel_signal: &Notify,
        out: &Outbox,
    ) -> Ran {
        let runtime = &self.server.runtime;
        let call = tokio::select! {
            biased;
            call = runtime.call_in(tools, self.view(), name, arguments, self.call_tags(id)) => call.map(|call| call.with_input(round)),
            // A call cancelled while it waits for a slot leaves the queue at once.
            () = cancel_signal.notified() => return Ran::CancelledUnstarted(None),
        };
        let call = match call {
            Ok(call) => call,
            Err(error) => {
                let answer = match call_error(&error, revision) {
                    Ok(result) => jsonrpc::success(id, result),
                    Err(error) => jsonrpc::failure(Some(id), &error),
                };
                // What a guest that ran a round before is told by its cleanup: shutdown,
                // or (the pool full, its arguments refused) that the call is given up.
                let outcome = match error {
                    CallError::ShuttingDown => Outcome::Shutdown,
                    _ => Outcome::Cancelled,
                };
                return Ran::Refused(answer, outcome);
            }
        };
        // A retry's state opens (or the call is refused) before the guest runs.
        let Feeds { progress_token: token, log_level, retry, progress_sent } = feeds;
        let mut asking = None;
        let call = match retry {
            Some(retry) => {
                // What a sealed state is bound to, made only when a state is opened or
                // sealed: most calls do neither, and hashing the arguments is not free.
                let component = call.component();
                let binding = move || self.tool_binding(&component, name, arguments);
                match retry.round_for(&self.server.sealer, binding.clone()) {
                    Ok((round, number)) => {
                        let call = call.with_input(round);
                        asking = Some((retry, binding, number));
                        call
                    }
                    Err(error) => return Ran::Answered(Some(jsonrpc::failure(Some(id), &error)), None),
                }
            }
            None => call,
        };
        let handle = call.handle();
        if !self.attach_handle(id, handle.clone()) {
            return Ran::CancelledUnstarted(Some(call));
        }
        let mut progress = handle.progress();
        let log_threshold = log_level.and_then(guest_log_threshold);
        if let Some(threshold) = log_threshold {
            handle.forward_logs(threshold);
        }
        let mut log_rate = LogRate::new();
        let mut log_pending = false;
        let mut run = std::pin::pin!(call.run_deferring_teardown());
        let mut next_progress = Instant::now();
        let mut progress_pending = false;
        // A notification on its way is driven beside the call, never instead of it: a
        // client that reads slowly must not stall the guest, nor the timeouts and stops
        // that only the call's own future watches.
        let mut sending: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
        let (report, teardown) = loop {
            tokio::select! {
                biased;
                finished = &mut run => break finished,
                () = async { sending.as_mut().expect("guarded").await }, if sending.is_some() => sending = None,
                changed = progress.changed(), if token.is_some() && !progress_pending => {
                    progress_pending = changed.is_ok();
                }
                () = tokio::time::sleep_until(next_progress), if progress_pending && sending.is_none() => {
                    progress_pending = false;
                    next_progress = Instant::now() + self.server.progress_interval;
                    let latest = progress.borrow_and_update().clone();
                    if let (Some(token), Some(latest)) = (&token, latest)
                        && !self.is_cancelled(id)
                        && progress_sent.advance(latest.done)
                    {
                        let notification = progress_notification(token, latest);
                        sending = Some(Box::pin(out.send(Outgoing::Notification(notification))));
                    }
                }
                () = handle.log_queued(), if log_threshold.is_some() && !log_pending => log_pending = true,
                () = tokio::time::sleep_until(log_rate.next_slot()), if log_pending && sending.is_none() => {
                    if let Some(line) = handle.next_log()
                        && !self.is_cancelled(id)
                    {
                        log_rate.take();
                        let notification = log_notification(name, line);
                        sending = Some(Box::pin(out.send(Outgoing::Notification(notification))));
                    }
                    log_pending = handle.has_logs();
                }
            }
        };
        // A message half-written is finished before anything else goes out.
        if let Some(sending) = sending {
            sending.await;
        }
        if report.outcome == Outcome::Cancelled || self.is_cancelled(id) {
            return self.cancelled_round(id, tools, name, arguments, revision, report, teardown).await;
        }
        // The lines still held (at most the queue's) go out ahead of the answer, then what
        // was dropped, said once.
        // Each send may wait on a client that reads slowly, and a cancel read meanwhile
        // means no further message for the request (not only no answer): checked before
        // each.
        if let Some(requested) = log_level.filter(|_| log_threshold.is_some()) {
            while let Some(line) = handle.next_log() {
                if self.is_cancelled(id) {
                    return self
                        .cancelled_round(id, tools, name, arguments, revision, report, teardown)
                        .await;
                }
                out.send(Outgoing::Notification(log_notification(name, line))).await;
            }
            let dropped = handle.dropped_logs();
            if dropped > 0 && !self.is_cancelled(id) {
                let notice = dropped_logs_notification(name, dropped, requested, CLIENT_LOGS_PER_SECOND);
                out.send(Outgoing::Notification(notice)).await;
            }
        }
        // The last report made before the tool returned goes out just ahead of the answer.
        let unsent = (progress_pending || progress.has_changed().unwrap_or(false))
            .then(|| progress.borrow_and_update().clone())
            .flatten();
        if let (Some(token), Some(latest)) = (&token, unsent)
            && !self.is_cancelled(id)
            && progress_sent.advance(latest.done)
        {
            out.send(Outgoing::Notification(progress_notification(token, latest))).await;
        }
        if self.is_cancelled(id) {
            return self.cancelled_round(id, tools, name, arguments, revision, report, teardown).await;
        }
        if revision == Revision::R2025_11_25
            && let Outcome::InputRequired(input) = report.outcome
        {
            return Ran::NeedsInput(input, report.cleanup_note, teardown);
        }
        let limits = tools.limits(name).cloned().unwrap_or_default();
        let given_up = match (report.outcome, asking) {
            (Outcome::InputRequired(input), Some((retry, binding, round))) => {
                match retry.ask(input, report.cleanup_note.clone(), round, &self.server.sealer, binding()) {
                    // Decided under the in-flight lock, as the answer's send is: a cancel
                    // either finds the state on its way (and is ignored) or lands before,
                    // and then the guest that asked is given up and cleaned up.
                    Ok(_) if self.leave_in_flight(id, cancel_signal) => {
                        drop(teardown);
                        let note = report.cleanup_note;
                        let clean_up = self.clean_up_between_rounds(
                            id,
                            tools,
                            name,
                            arguments,
                            Outcome::Cancelled,
                            note,
                        );
                        return Ran::Answered(None, clean_up.await);
                    }
                    Ok(result) => return Ran::Answered(Some(jsonrpc::success(id, result)), Some(teardown)),
                    Err(input::NotAsked::Refused(error)) => jsonrpc::failure(Some(id), &error),
                    Err(input::NotAsked::Failed(message)) => {
                        jsonrpc::success(id, CallToolResult::error(format!("The tool {message}"), revision))
                    }
                }
            }
            // Asked where no client can be (today every request that may ask can): given
            // up as when asking fails.
            (outcome @ Outcome::InputRequired(_), None) => {
                jsonrpc::success(id, call_result(outcome, &limits, revision))
            }
            (outcome, _) => {
                let answer = jsonrpc::success(id, call_result(outcome, &limits, revision));
                return Ran::Answered(Some(answer), Some(teardown));
            }
        };
        // Asking failed: the call ends with an error, and the guest that asked is cleaned
        // up as after any stop, with the note it left, beside the answer.
        drop(teardown);
        let clean_up =
            self.clean_up_between_rounds(id, tools, name, arguments, Outcome::Cancelled, report.cleanup_note);
        Ran::Answered(
            None,
            self.answer_beside_cleanup(id, Some(given_up), out, cancel_signal, clean_up).await,
        )
    }

    /// Open a `subscriptions/listen` stream: acknowledge what it will carry, then send
    /// `notifications/<list>/list_changed` (for the tools, prompts and resources lists it
    /// asked for, of those offered) each time such a list changes, until
    /// the client ends it (a cancel, or a closed HTTP stream: nothing more is sent), the
    /// server shuts down or the credentials it was opened with expire (the final answer;
    /// on stdio, at shutdown, then `notifications/cancelled`).
    fn start_listen(
        self: &Arc<Self>,
        id: &RequestId,
        params: Option<&Value>,
        out: Outbox,
        mut charge: Charge,
    ) -> Reply {
        let honoured = match mcp::listen_filter(params) {
            Ok(honoured) => honoured,
            Err(error) => return Reply::Error(error),
        };
        let server = &self.server;
        let listen = match ListenSlot::take(server, self.tenant.clone(), self.client()) {
            Ok(listen) => listen,
            Err(error) => return Reply::Error(error.with_data(retry_after_seconds())),
        };
        let cancel_signal = match self.enter_in_flight(id) {
            Ok(signal) => signal,
            Err(error) => return Reply::Error(error),
        };
        // Prompts and resources only where they are offered: their capabilities say so.
        let offered = self.offered();
        let honoured = SubscriptionFilter {
            prompts_list_changed: honoured.prompts_list_changed && offered.prompts,
            resources_list_changed: honoured.resources_list_changed && offered.resources,
            ..honoured
        };
        // Watched from before the acknowledgement: a change right after it is not missed.
        let mut tools = server.runtime.watch_tools();
        // Out of the watch before the lists are made: a swap never waits on them.
        let set = tools.borrow_and_update().clone();
        let mut last = self.lists_of(&set);
        let mut shutdown = server.runtime.shutting_down();
        let expired = credentials_expired(self.credentials_expire.get().copied());
        // The stream outlives its request: it keeps what it holds (its id, its filter,
        // fingerprints of the lists), not the request's whole charge, which a client
        // padding `_meta` could make megabytes held as long as the stream stays open.
        charge.shrink_to(LISTEN_HELD_BYTES);
        let (connection, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            out.send(Outgoing::Notification(mcp::subscription_acknowledged(&id, honoured.clone()))).await;
            let wants_any = ListKind::ALL.iter().any(|kind| kind.wanted_by(&honoured));
            let mut expired = std::pin::pin!(expired);
            loop {
                tokio::select! {
                    biased;
                    () = cancel_signal.notified() => break,
                    () = async { let _ = shutdown.wait_for(|stopping| *stopping).await; } => break,
                    () = &mut expired => break,
                    changed = tools.changed(), if wants_any => {
                        if changed.is_err() {
                            break;
                        }
                        let set = tools.borrow_and_update().clone();
                        let lists = connection.lists_of(&set);
                        for kind in last.changed_in(&lists).filter(|kind| kind.wanted_by(&honoured)) {
                            out.send(Outgoing::Notification(mcp::list_changed(kind, Some(&id)))).await;
                        }
                        last = lists;
                    }
                }
            }
            if !connection.leave_in_flight(&id, &cancel_signal) {
                out.send(jsonrpc::success(&id, mcp::listen_ended(&id))).await;
                if let Outbox::Lines(_) = out {
                    let cancelled = mcp::listen_cancelled(&id, "the server is shutting down");
                    out.send(Outgoing::Notification(cancelled)).await;
                }
            }
            drop((charge, listen));
            connection.server.finish_call();
        });
        Reply::Later
    }

    /// Send this connection's 2025-era client `notifications/tools/list_changed` on `out`
    /// each time the tool list changes (and `prompts/list_changed`, `resources/list_changed`
    /// for those lists), and `notifications/resources/updated` for each
    /// subscribed resource whose component a reload replaced, until the server shuts down,
    /// `out` closes, the session ends ([`Connection::end_session`]) or the credentials the
    /// stream was opened with expire (`credentials_expire`). One stream per
    /// connection. A stream to an HTTP client (a channel) holds a listen slot, as a
    /// `subscriptions/listen` stream does: the server's bound and its tenant's share.
    pub fn follow_tool_changes(
        self: &Arc<Self>,
        out: Outbox,
        credentials_expire: Option<tokio::time::Instant>,
    ) -> Result<(), NotFollowed> {
        if self.following.swap(true, Ordering::AcqRel) {
            return Err(NotFollowed::AlreadyOpen);
        }
        let slot = match &out {
            Outbox::Channel(..) => match ListenSlot::take(&self.server, self.tenant.clone(), self.client()) {
                Ok(slot) => Some(slot),
                Err(busy) => {
                    self.following.store(false, Ordering::Release);
                    return Err(NotFollowed::Busy(busy));
                }
            },
            Outbox::Lines(_) => None,
        };
        let mut ended = self.session_ended.subscribe();
        let runtime = &self.server.runtime;
        let mut tools = runtime.watch_tools();
        let mut set = tools.borrow_and_update().clone();
        let mut last = self.lists_of(&set);
        let mut shutdown = runtime.shutting_down();
        let (connection, following) = (self.clone(), self.following.clone());
        tokio::spawn(async move {
            let closed = async {
                match &out {
                    Outbox::Channel(sender, _) => sender.closed().await,
                    Outbox::Lines(_) => std::future::pending().await,
                }
            };
            let mut closed = std::pin::pin!(closed);
            let mut expired = std::pin::pin!(credentials_expired(credentials_expire));
            loop {
                tokio::select! {
                    () = &mut closed => break,
                    () = &mut expired => break,
                    () = async { let _ = shutdown.wait_for(|stopping| *stopping).await; } => break,
                    () = async { let _ = ended.wait_for(|ended| *ended).await; } => break,
                    changed = tools.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let next = tools.borrow_and_update().clone();
                        let lists = connection.lists_of(&next);
                        for kind in last.changed_in(&lists) {
                            out.send(Outgoing::Notification(mcp::list_changed(kind, None))).await;
                        }
                        last = lists;
                        for updated in connection.resources_updated(&set, &next) {
                            out.send(updated).await;
                        }
                        set = next;
                    }
                }
            }
            drop(slot);
            *connection.followed_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(std::time::Instant::now());
            following.store(false, Ordering::Release);
        });
        Ok(())
    }

    /// When a stream last stopped following this connection's list changes, if one did.
    pub fn followed_until(&self) -> Option<std::time::Instant> {
        *self.followed_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a stream follows this connection's list changes.
    pub fn is_following(&self) -> bool {
        self.following.load(Ordering::Acquire)
    }

    /// The 2025-era session this connection serves has ended: its stream ends too.
    pub fn end_session(&self) {
        self.session_ended.send_replace(true);
    }

    /// Tell the runtime's observers of a call refused here, before it reached the runtime.
    fn refused(&self, id: &RequestId, tool: Option<&str>, reason: RefusalReason) {
        self.server.runtime.report_unstarted(
            CallEnded::refused(self.call_tags(id), reason),
            self.view(),
            tool,
        );
    }

    /// Register request `id` as in flight, so that a cancel reaches it, and count it among
    /// the calls a drain waits for (until [`Server::finish_call`]). Refused when the id is
    /// already in flight. The signal wakes the request when it is cancelled.
    fn enter_in_flight(&self, id: &RequestId) -> Result<Arc<Notify>, RpcError> {
        let mut in_flight = self.in_flight.lock().unwrap();
        if in_flight.contains_key(id) {
            return Err(RpcError::new(INVALID_REQUEST, "Invalid Request: this id is already in use"));
        }
        let entry = InFlight::default();
        let signal = entry.cancel_signal.clone();
        in_flight.insert(id.clone(), entry);
        self.server.calls.fetch_add(1, Ordering::AcqRel);
        Ok(signal)
    }

    /// Give request `id`'s started call to a later cancel; false (and nothing kept) when the
    /// request was cancelled before its call started.
    fn attach_handle(&self, id: &RequestId, handle: CallHandle) -> bool {
        let mut in_flight = self.in_flight.lock().unwrap();
        let entry = in_flight.entry(id.clone()).or_default();
        if entry.cancelled {
            return false;
        }
        entry.handle = Some(handle);
        true
    }

    /// Send `answer` to request `id` now, unless it was cancelled, beside a cleanup that
    /// may take a while (not after it: over HTTP an answer that waits past `sse_after` goes
    /// out in an event stream with status 200, and a `-32021` must be a 400). The request
    /// leaves flight here (its caller then has no answer to send).
    async fn answer_before_cleanup(&self, id: &RequestId, answer: Outgoing, out: &Outbox, signal: &Notify) {
        if !self.leave_in_flight(id, signal) {
            out.send(answer).await;
        }
    }

    /// Take request `id` out of flight, if its entry is still the one whose cancel signal
    /// is `signal` (it may have left already, and the client used the id again since);
    /// true when it was cancelled (its answer is not sent). Deciding and leaving are one
    /// step: a cancel either lands before it (and nothing is sent) or finds the request
    /// finished (and is ignored), and the id is free again once the answer can be out.
    fn leave_in_flight(&self, id: &RequestId, signal: &Notify) -> bool {
        let mut in_flight = self.in_flight.lock().unwrap();
        match in_flight.get(id) {
            Some(entry) if std::ptr::eq(&*entry.cancel_signal, signal) => {
                in_flight.remove(id).is_some_and(|entry| entry.cancelled)
            }
            _ => false,
        }
    }

    fn is_cancelled(&self, id: &RequestId) -> bool {
        self.in_flight.lock().unwrap().get(id).is_some_and(|entry| entry.cancelled)
    }

    /// `notifications/cancelled`: stop the call if it is ours and still running. Unknown,
    /// finished or malformed cancellations are ignored, as the spec asks.
    fn cancel(&self, params: Option<&Value>) {
        let id = params.and_then(|params| params.get("requestId")).and_then(RequestId::parse);
        if let Some(id) = id {
            self.cancel_request(&id);
        }
    }

    /// Stop the call answering request `id`, if it is still running, and send nothing for
    /// it (HTTP calls this when the client closes the response stream).
    pub fn cancel_request(&self, id: &RequestId) {
        if let Some(entry) = self.in_flight.lock().unwrap().get_mut(id) {
            entry.cancelled = true;
            // `notify_one` keeps a permit: a call that starts waiting later still sees it.
            entry.cancel_signal.notify_one();
            if let Some(handle) = &entry.handle {
                handle.cancel();
            }
        }
    }

    /// Serve requests without the 2026 envelope as 2025-era ones (HTTP learns the era from
    /// each request's headers, not from an earlier `initialize`).
    pub fn set_legacy(&self) {
        self.legacy.store(true, Ordering::Relaxed);
    }
}

/// How one round of a call ended.
enum Ran {
    /// Its answer (`None` when the client cancelled it, or it went out already) and its teardown.
    Answered(Option<Outgoing>, Option<Teardown>),
    /// A 2025-era client's call whose guest needs input, the last note it left for a
    /// cleanup, and the round's teardown.
    NeedsInput(InputRequired, Option<Vec<u8>>, Teardown),
    /// No slot for the round (its answer says why), and what its cleanup is told, should
    /// a round before have run.
    Refused(Outgoing, Outcome),
    /// Cancelled before the round's guest ran: while it waited for a slot, or with the
    /// slot it was given (here).
    CancelledUnstarted(Option<Call>),
}

/// Stop a call (a tool call, a prompt) between two rounds, as any call is stopped, and run
/// its cleanup: `call` is one reserved for it, or one made only to run the cleanup (none:
/// its tool or prompt is gone, `what` names it), and `note` the last note the guest left
/// in a round before (none: the call already holds it).
async fn stop_between_rounds(
    call: Option<Call>,
    outcome: Outcome,
    note: Option<Vec<u8>>,
    what: &str,
) -> Option<Teardown> {
    let Some(call) = call else {
        tracing::warn!("no cleanup after {what} was stopped between rounds: it is gone");
        return None;
    };
    let call = match note {
        Some(note) => call.with_input(InputRound { cleanup_note: Some(note), ..InputRound::default() }),
        None => call,
    };
    Some(call.stop_unstarted(outcome).await.1)
}

/// Why a call ended between two rounds.
enum Between {
    /// Asking failed: a tool error says why (the client refused, answered nonsense, or
    /// did not declare what the tool asks for).
    Failed(String),
    /// A cancel or the call's deadline stopped it while the client was asked.
    Stopped(Outcome),
}

/// The charges of a 2025-era client's answers, each shrunk to what the next round keeps of
/// it, held until that round ends: a client's answers (up to a message's size each) are its
/// requests' bytes in the admission bound for as long as the server holds them.
#[derive(Default)]
struct AnswersHeld(Vec<Charge>);

/// What a kept answer costs besides its key and text: its place in the round's list.
const ANSWER_HELD_BYTES: usize = 64;

/// The most rounds of one 2025-era call: a guest that keeps asking is ended with an error.
pub const MAX_INPUT_ROUNDS: usize = 8;

/// What a call sends its client besides the answer, as the request asked.
#[derive(Clone)]
struct Feeds {
    /// Progress notifications carry it; none without it.
    progress_token: Option<RequestId>,
    /// The least severe of the guest's log lines sent; none without it.
    log_level: Option<LoggingLevel>,
    /// A 2026-07-28 request's answers and state, if it asks the client through its result.
    retry: Option<input::Retry>,
    /// The progress last sent under the token, shared by the rounds of a 2025-era call:
    /// each round's guest counts from nothing, and the client must see progress rise.
    progress_sent: Arc<ProgressSent>,
}

/// The most progress sent under one token so far.
#[derive(Default)]
struct ProgressSent(Mutex<Option<f64>>);

impl ProgressSent {
    /// Whether `done` is past all progress sent so far (then it is the new mark).
    fn advance(&self, done: f64) -> bool {
        let mut sent = self.0.lock().unwrap();
        if sent.is_some_and(|sent| done <= sent) {
            return false;
        }
        *sent = Some(done);
        true
    }
}

/// The longest request id a call's event carries, in bytes of JSON text.
const MAX_TAGGED_ID: usize = 128;

/// Who asks for the call answering request `id`: the id as JSON text (escaped, so it is
/// one line whatever the client sent), cut to [`MAX_TAGGED_ID`] bytes.
fn call_tags(id: &RequestId) -> CallTags {
    let mut text = serde_json::to_string(&id.to_json()).expect("a Value always serializes");
    text.truncate(text.floor_char_boundary(MAX_TAGGED_ID));
    CallTags { request_id: Some(text), ..CallTags::default() }
}

/// Run `task` in its own task, unless it completes in its first poll, made here and now.
///
/// Most calls (a fresh instance, a short guest function, the answer written) finish
/// without ever waiting; handing them to another task would cost a thread wake-up and a
/// context switch per call, the bulk of a short call's latency. A call that does wait
/// (a guest running past an epoch tick, a host call that blocks, a full output pipe)
/// moves to a task of its own, so it never holds up the caller for longer than that first
/// slice. The first poll uses a no-op waker: the spawned task polls again at once, and
/// every future re-registers its waker then.
fn spawn_unless_ready(task: impl Future<Output = ()> + Send + 'static) {
    let mut task = Box::pin(task);
    let mut first_slice = std::task::Context::from_waker(std::task::Waker::noop());
    if task.as_mut().poll(&mut first_slice).is_pending() {
        spawn_behind_the_transports(task);
    }
}

/// Run `task` on the runtime of calls that wait ([`waiting_calls`]), at its lower
/// priority: for work a guest can cause outside any call (listing a component again), which
/// must not take the threads that serve the transports.
pub fn spawn_behind_the_transports(task: impl Future<Output = ()> + Send + 'static) {
    match waiting_calls() {
        Some(runtime) => drop(runtime.spawn(task)),
        None => drop(tokio::spawn(task)),
    }
}

/// The runtime that calls move to once they wait ([`spawn_unless_ready`]): its own worker
/// threads and blocking pool (where wasmtime-wasi does a guest's file work), at the
/// operating system's lower priority ([`lower_priority`]), apart from the threads that
/// read and write the transports and run the calls that finish in their first slice.
///
/// Those are what a client waits on; what moves here is a guest that computes past an epoch
/// tick or waits in a host call. On a machine whose cores are busy with such guests
/// (a spinning tool, thousands of files opened or listed), the kernel otherwise lets them
/// run out their time slice (1.5 ms on 2 cores) before a woken transport thread gets a
/// core: the soak's echo p99 beside them was 2.8–3.8× its idle p99.
///
/// Its blocking pool is small: a guest that opens 200 file streams starts a background
/// read on each, and tokio's default of 512 threads let one such call make the server
/// start 200 threads (the soak's HTTP server had 219 after its warm-up), each with its stack
/// and allocator cache; idle ones end after 2 s, not 10.
/// `None` when the runtime cannot be started; calls then stay on the caller's runtime.
fn waiting_calls() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("cordon-calls")
                .max_blocking_threads(WAITING_CALLS_BLOCKING_THREADS)
                .thread_keep_alive(Duration::from_secs(2))
                .on_thread_start(lower_priority)
                .enable_all()
                .build()
                .inspect_err(|error| tracing::warn!("calls that wait share the transport's threads: {error}"))
                .ok()
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
}

/// Threads for the file work of calls that wait (wasmtime-wasi does each file operation on
/// the blocking pool): enough for every core many times over.
const WAITING_CALLS_BLOCKING_THREADS: usize = 32;

/// Lower the calling thread's priority to nice 19, the lowest: when it competes with the
/// transport threads (nice 0) for a core, the kernel gives it a small share of theirs and
/// lets a woken transport thread preempt it sooner. Not `SCHED_IDLE` (tried first): it
/// measured no better in the soak (30 s runs on the same tree: echo p99 under load
/// 2.77x/3.24x idle against 2.51x/2.47x at nice 19, 3.46x/3.04x at nice 10; the runs are
/// noisy), and it leaves a waiting call almost nothing on a machine other processes keep
/// busy. Any process may lower its own threads' priority.
fn lower_priority() {
    crate::runtime::engine::lower_thread_priority();
}

#[cfg(test)]
impl Server {
    /// A server of the smallest pool and no components, for tests of what surrounds calls.
    pub(crate) fn with_no_components() -> Arc<Self> {
        use crate::runtime::engine::EngineSettings;
        let engine = EngineSettings {
            max_concurrent_calls: 1,
            max_memory_bytes: 1 << 20,
            cache_dir: None,
            ..EngineSettings::default()
        };
        let runtime = Runtime::new(crate::runtime::RuntimeSettings { engine, ..Default::default() })
            .expect("the smallest runtime starts");
        Self::new(Arc::new(runtime), Duration::from_millis(50))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's log line carries the request id as one line of JSON text, cut to its bound:
    /// a client's megabyte id does not make megabyte log lines.
    #[test]
    fn the_call_line_carries_the_request_id_escaped_and_cut() {
        let long = RequestId::String(format!("a\n{}", "i".repeat(1 << 20)));
        let tagged = call_tags(&long).request_id.unwrap();
        assert!(tagged.len() <= MAX_TAGGED_ID && tagged.starts_with("\"a\\n"), "{tagged}");
        let id = RequestId::parse(&serde_json::json!(7)).unwrap();
        assert_eq!(call_tags(&id).request_id.unwrap(), "7");
    }

    /// The rounds of a 2025-era call share a token, and each round's guest counts from
    /// nothing: what the client is sent under the token only ever rises.
    #[test]
    fn progress_sent_under_a_token_only_rises_across_rounds() {
        let sent = ProgressSent::default();
        let first_round = [0.2, 0.5, 1.0];
        let second_round = [0.1, 0.5, 1.0, 1.5];
        let passed: Vec<f64> =
            first_round.into_iter().chain(second_round).filter(|done| sent.advance(*done)).collect();
        assert_eq!(passed, [0.2, 0.5, 1.0, 1.5]);
    }

    /// When a set is swapped in, every listen stream asks for its lists at once: they are
    /// made once per set and tenant, not once per stream; a stream still on an older set
    /// gets its own without undoing the cache of the newer.
    #[tokio::test]
    async fn list_digests_are_made_once_per_set_and_tenant() {
        let runtime = Arc::new(Runtime::new(crate::runtime::RuntimeSettings::default()).unwrap());
        let server = Server::with_limits(runtime, Duration::from_millis(10), ServerLimits::default());
        let made = std::sync::atomic::AtomicUsize::new(0);
        let digests_of = |set: &ToolSet, tenant: Option<&Arc<str>>| {
            server.list_digests_for(set, tenant, || {
                made.fetch_add(1, Ordering::Relaxed);
                features::Lists::default()
            })
        };
        let (older, newer) = (ToolSet::new(Vec::new(), 1), ToolSet::new(Vec::new(), 2));
        let acme: Arc<str> = Arc::from("acme");
        for _ in 0..100 {
            digests_of(&older, None);
            digests_of(&older, Some(&acme));
        }
        assert_eq!(made.load(Ordering::Relaxed), 2, "once for everyone, once for acme");
        digests_of(&newer, None);
        digests_of(&older, None);
        digests_of(&newer, None);
        assert_eq!(made.load(Ordering::Relaxed), 4, "the newer set made once, the older again");
    }
}
