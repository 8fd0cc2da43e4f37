//! # Streamable HTTP (MCP 2026-07-28) on hyper
//!
//! One endpoint, `POST /mcp`; one JSON-RPC message per body. Each request runs through the
//! validation ladder of the spec (origin and host, method, `Accept` and `Content-Type`, body
//! size and read time, JSON, envelope, `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name`
//! headers, version, then a `tools/call`'s `Mcp-Param-*` headers against the arguments its
//! tool marks with `x-mcp-header`), so that every refusal keeps its mandated status; then
//! the dispatch layer serves it on a connection of its own.
//!
//! The answer is JSON when it comes quickly. When progress is sent or the call stays quiet
//! for a while, the answer becomes an SSE stream (progress events, then the response),
//! with comment keep-alives so that proxies keep long calls open.
//!
//! **Cancellation is the client closing the response.** hyper watches the socket while a
//! request is in flight and drops the response (or the pending answer) on EOF; a guard
//! dropped with it cancels the call, which the runtime then stops (grace, hard stop,
//! cleanup). Nothing more is written for it.
//!
//! **Holding under load.** Connections are capped in total (`max_connections`; more wait
//! in the listen queue) and per client address ([`Clients`]: `max_connections_per_ip`,
//! beyond which a connection is answered 503 and closed at once, so that one address never
//! takes every slot). A connection is *half-open* until the head of its first request is
//! read; an address may have only `max_header_connections_per_ip` of those, and its other
//! new connections wait, unread, for one to finish or time out (`header_timeout`, for each
//! step), so a client that drips headers and reconnects holds a bounded number of slots
//! however often it comes back. Bodies are charged to the server's admission ledger as
//! they arrive and parsed messages at their estimated cost ([`crate::dispatch`]): over its
//! bound a request is refused with 503 and `Retry-After`.
//!
//! **Refusals a client can read.** A refusal made before the body is read (413, 408, 503,
//! a 4xx of the ladder) closes the connection; closing a socket with unread bytes makes
//! the kernel reset it, and a client that writes its whole body before reading (httpx)
//! then sees the reset, not the status. So such a connection lingers ([`Socket`]): after
//! the answer, the server ends its side and reads and discards what the client still
//! sends, up to `linger_bytes` and `linger_timeout`, before closing.
//!
//! **Clients that stop reading.** A client may send requests and never read the answers
//! (pipelined refusals, a large result, an SSE stream): the answer then waits in the
//! socket, and hyper with it, holding the connection's slot and what the answer holds, with
//! no read deadline running. A write left waiting for `write_timeout` by a client that
//! took less than 64 KiB meanwhile fails ([`Socket`]), and hyper closes the connection. A
//! client that reads a byte now and then makes progress, so a message of 4 KiB or more
//! stays charged to the admission ledger from the moment it is sent until its last byte is
//! written ([`AnswerCharger`]): such clients make new requests wait, not the server's
//! memory grow past its bound. A small request can ask for a large answer, so an answer
//! that does not fit in its client's share (or its tenant's), or would take the server
//! past twice its bound, is not kept: that request is answered with an error saying why.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming as IncomingBody, SizeHint};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::proxies::TrustedProxies;
use super::tls::Tls;
use crate::auth::oauth::{Claims, TokenError, Validator};
use crate::auth::{AuthError, Caller, Tenant, TenantId};
use crate::dispatch::{
    Admitted, AnswerCharger, Charge, Client, Connection, Framed, NotFollowed, Outbox, RETRY_AFTER_SECONDS,
    RateCheck, Refusal, SMALL_UNCHARGED_BYTES, Server, Whose, rate_limited, whose_share,
};
use crate::protocol::jsonrpc::{self, HEADER_MISMATCH, INVALID_REQUEST, Incoming, RequestId, RpcError};
use crate::protocol::mcp;

/// How the HTTP transport behaves.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The endpoint path.
    pub path: String,
    /// The largest request body accepted (413 beyond it).
    pub max_body_bytes: usize,
    /// How long a client may take to send its request body (408 beyond it).
    pub body_timeout: Duration,
    /// A call quiet for this long is answered as an SSE stream, so keep-alives can flow.
    pub sse_after: Duration,
    /// The interval of SSE comment keep-alives.
    pub keep_alive: Duration,
    /// Host names (without port) accepted in `Host` and `Origin`, against DNS rebinding.
    pub allowed_hosts: HashSet<String>,
    /// Connections open at once; more wait in the listen queue until one closes, so that
    /// a flood of connections cannot take every descriptor (and every byte of memory).
    pub max_connections: usize,
    /// Connections open at once from one client address (IPv6: one /48); more are
    /// answered 503 and closed, so one address cannot take every slot.
    pub max_connections_per_ip: usize,
    /// Connections from one client address still reading their first request's head;
    /// that address's other new connections wait, unread, for one of these to finish.
    pub max_header_connections_per_ip: usize,
    /// How long a request's head may take to arrive, counted on a kept-alive connection
    /// from the end of its last answer (so an idle connection closes after it); also how
    /// long a new connection waits for its address's turn to send one.
    pub header_timeout: Duration,
    /// After a refusal that left the body unread: how long to read and discard what the
    /// client still sends before closing...
    pub linger_timeout: Duration,
    /// ...and how many bytes at most.
    pub linger_bytes: usize,
    /// How long a write to a client may wait for the client to take any of it: past it
    /// the connection is closed, with whatever it held.
    pub write_timeout: Duration,
    /// After shutdown begins, how long at least the listener and open connections stay,
    /// answering every request 503 (see [`serve`]), for load balancers still sending here.
    pub close_delay: Duration,
    /// What the listener holds open now, for the metrics (shared with whoever reads them).
    pub stats: Arc<HttpStats>,
    /// `[auth.oauth]`: requests to the endpoint need a valid access token, and the
    /// Protected Resource Metadata is served.
    pub oauth: Option<Arc<Validator>>,
    /// Serve HTTPS with this certificate (`--tls-cert`, `--tls-key`).
    pub tls: Option<Tls>,
    /// Proxies whose `X-Forwarded-For` names the client, for its shares.
    pub trusted_proxies: TrustedProxies,
}

/// Why an entry of `allowed_hosts` (or `--allow-host`) would never match a request.
#[derive(Debug, thiserror::Error)]
#[error(
    "{entry:?} can never match a Host header: give a bare host name (`mcp.example.com`), an \
     IPv4 address, or an IPv6 one in brackets (`[::1]`); no scheme, port, path or wildcard"
)]
pub struct AllowedHostError {
    entry: String,
}

impl HttpSettings {
    /// Accept `entry` in `Host` and `Origin` besides the defaults, as it is compared: the
    /// name alone, without port, in lower case.
    pub fn allow_host(&mut self, entry: &str) -> Result<(), AllowedHostError> {
        // A fully qualified name's root dot is the same host (`Host` is compared without it).
        let name = entry.strip_suffix('.').unwrap_or(entry).to_ascii_lowercase();
        let valid = match name.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            Some(address) => address.parse::<std::net::Ipv6Addr>().is_ok(),
            None => {
                !name.is_empty()
                    && !name.starts_with('.')
                    && !name.ends_with('.')
                    && !name.contains("..")
                    && name
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_'))
            }
        };
        if !valid {
            return Err(AllowedHostError { entry: entry.to_owned() });
        }
        self.allowed_hosts.insert(name);
        Ok(())
    }
}

/// What an HTTP listener holds open right now: counted here, read by the metrics.
#[derive(Debug, Default)]
pub struct HttpStats {
    connections: AtomicUsize,
    streams: AtomicUsize,
    accepting: AtomicBool,
}

impl HttpStats {
    /// Connections open.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Answers being sent as SSE streams.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }

    /// Whether the listener serves requests (from its first accept until shutdown begins).
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
    }

    fn hold(counter: &AtomicUsize) -> Held<'_> {
        counter.fetch_add(1, Ordering::Relaxed);
        Held(counter)
    }
}

/// One unit of an [`HttpStats`] counter, given back when dropped.
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            path: "/mcp".into(),
            max_body_bytes: 4 << 20,
            body_timeout: Duration::from_secs(10),
            sse_after: Duration::from_secs(1),
            keep_alive: Duration::from_secs(15),
            max_connections: 2048,
            // Half the total: one address (or one proxy in front) is never all of it.
            max_connections_per_ip: 1024,
            max_header_connections_per_ip: 64,
            header_timeout: Duration::from_secs(10),
            linger_timeout: Duration::from_secs(5),
            linger_bytes: 16 << 20,
            write_timeout: Duration::from_secs(30),
            // Two probe intervals of the shipped HAProxy config (deploy/haproxy).
            close_delay: Duration::from_secs(1),
            stats: Arc::default(),
            oauth: None,
            tls: None,
            trusted_proxies: TrustedProxies::default(),
            allowed_hosts: ["localhost", "127.0.0.1", "[::1]", "::1"]
                .iter()
                .map(|host| host.to_string())
                .collect(),
        }
    }
}

/// Refusals travel as `Err(response)` through the ladder; they are built once per request,
/// so their size does not matter.
#[allow(clippy::result_large_err)]
type HttpResponse = Response<ResponseBody>;

/// 2025-era sessions, minted at a legacy `initialize`, so that a legacy client's
/// `notifications/cancelled` (sent as a POST of its own) reaches the call it names, and its
/// responses to what a call asked it (also POSTs of their own) reach that call. The
/// 2026 protocol is stateless and needs none. Idle sessions expire; their number is capped.
#[derive(Default)]
struct Sessions {
    live: std::sync::Mutex<SessionTable<Arc<Connection>, SessionOwner>>,
    /// When idle sessions were last looked for (each look walks them all, under the lock).
    swept: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How often an `initialize` looks for idle sessions to end: each look walks every
/// session under the lock every request with a session id waits on.
const SESSION_SWEEP_EVERY: Duration = Duration::from_secs(1);

const SESSION_IDLE: Duration = Duration::from_secs(3600);
const MAX_SESSIONS: usize = 10_000;
/// Sessions one owner (a caller, of its tenant when there are tenants) may hold: one more
/// closes its own oldest, never another's.
const MAX_SESSIONS_PER_CALLER: usize = 1_000;
/// Sessions opened without credentials from one address may hold: half the table (behind
/// a proxy, every such client has the proxy's address), so that one address's
/// initializes can never close the other half.
const MAX_SESSIONS_PER_ADDRESS: usize = MAX_SESSIONS / 2;

/// Whose sessions count together against [`MAX_SESSIONS_PER_CALLER`]: a caller's (an API
/// key's holder, a token's subject), of its tenant when there are tenants, or with no
/// credentials at all (an open server) the client's address, so that one client's
/// initializes close its own sessions, not everyone's; not even those of another caller of
/// its tenant (two people's keys, one organisation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SessionOwner {
    Caller(Option<TenantId>, Caller),
    /// A tenant's request without a caller (not made over HTTP today).
    Tenant(TenantId),
    Address(IpAddr),
}

impl SessionOwner {
    fn of(session: &Connection) -> Option<Self> {
        Self::from_parts(session.tenant().map(|tenant| &tenant.id), session.caller(), session.peer())
    }

    fn from_parts(
        tenant: Option<&TenantId>,
        caller: Option<&Caller>,
        address: Option<IpAddr>,
    ) -> Option<Self> {
        match (tenant, caller, address) {
            (tenant, Some(caller), _) => Some(Self::Caller(tenant.cloned(), caller.clone())),
            (Some(tenant), None, _) => Some(Self::Tenant(tenant.clone())),
            (None, None, Some(address)) => Some(Self::Address(address)),
            (None, None, None) => None,
        }
    }

    /// The most sessions this owner may hold.
    fn cap(owner: Option<&Self>) -> usize {
        match owner {
            Some(Self::Address(_)) => MAX_SESSIONS_PER_ADDRESS,
            _ => MAX_SESSIONS_PER_CALLER,
        }
    }
}

/// A group of session owners that a full table weighs as one ([`SessionTable::to_close`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum OwnerGroup {
    /// A network block: its prefix length and first address.
    Block(u8, IpAddr),
    /// Every caller of a tenant.
    Tenant(TenantId),
}

/// The groups an owner is in, widest first, for a full table to find whose session to
/// close; `None` where the owner is a group of its own.
trait OwnerGroups {
    fn groups(&self) -> [Option<OwnerGroup>; 2];
}

impl OwnerGroups for SessionOwner {
    /// A tenant's callers, its one group: a tenant spreading its sessions over many callers
    /// (keys, subjects, clients) is one holder, so its initializes close its own sessions,
    /// not another tenant's. An address's /16 and /24 (IPv4), or /24 and /32 (IPv6, whose
    /// owner is already a /48): a provider is given a /32 and a registry's block is wider,
    /// so one holder of many /48s (or IPv4 addresses) is one block here, however many
    /// owners it spreads over.
    fn groups(&self) -> [Option<OwnerGroup>; 2] {
        let address = match self {
            Self::Caller(Some(tenant), _) | Self::Tenant(tenant) => {
                return [Some(OwnerGroup::Tenant(tenant.clone())), None];
            }
            Self::Caller(None, _) => return [None, None],
            Self::Address(address) => address,
        };
        let within = |bits: u8| match address {
            IpAddr::V4(v4) => IpAddr::V4((v4.to_bits() & (u32::MAX << (32 - bits))).into()),
            IpAddr::V6(v6) => IpAddr::V6((v6.to_bits() & (u128::MAX << (128 - bits))).into()),
        };
        let block = |bits: u8| Some(OwnerGroup::Block(bits, within(bits)));
        match address {
            IpAddr::V4(_) => [block(16), block(24)],
            IpAddr::V6(_) => [block(24), block(32)],
        }
    }
}

/// Sessions by id, each with its owner and last use, and each owner's sessions ordered by
/// last use: which session to close when an owner's cap or the table is full is found
/// without walking the table ([`Self::to_close`]), and a request's use of its session is
/// a move in its owner's order.
struct SessionTable<S, O> {
    by_id: HashMap<String, (S, std::time::Instant, Option<O>)>,
    by_owner: HashMap<Option<O>, std::collections::BTreeSet<(std::time::Instant, String)>>,
}

impl<S, O> Default for SessionTable<S, O> {
    fn default() -> Self {
        Self { by_id: HashMap::new(), by_owner: HashMap::new() }
    }
}

impl<S, O: Clone + Eq + std::hash::Hash + OwnerGroups> SessionTable<S, O> {
    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn insert(&mut self, id: String, session: S, owner: Option<O>, now: std::time::Instant) {
        self.remove(&id);
        self.by_owner.entry(owner.clone()).or_default().insert((now, id.clone()));
        self.by_id.insert(id, (session, now, owner));
    }

    fn remove(&mut self, id: &str) -> Option<S> {
        let (session, used, owner) = self.by_id.remove(id)?;
        self.forget_use(&owner, used, id);
        Some(session)
    }

    /// The session `id` and its last use.
    fn get(&self, id: &str) -> Option<(&S, std::time::Instant)> {
        self.by_id.get(id).map(|(session, used, _)| (session, *used))
    }

    /// Mark `id` used `now`.
    fn touch(&mut self, id: &str, now: std::time::Instant) {
        let Some((_, used, owner)) = self.by_id.get_mut(id) else { return };
        let (before, owner) = (std::mem::replace(used, now), owner.clone());
        self.forget_use(&owner, before, id);
        self.by_owner.entry(owner).or_default().insert((now, id.to_owned()));
    }

    fn forget_use(&mut self, owner: &Option<O>, used: std::time::Instant, id: &str) {
        if let Some(uses) = self.by_owner.get_mut(owner) {
            uses.remove(&(used, id.to_owned()));
            if uses.is_empty() {
                self.by_owner.remove(owner);
            }
        }
    }

    /// Remove every session `keep` says no to (given it and its last use); those removed.
    fn remove_unless(&mut self, mut keep: impl FnMut(&S, std::time::Instant) -> bool) -> Vec<S> {
        let gone: Vec<String> = (self.by_id.iter())
            .filter(|(_, (session, used, _))| !keep(session, *used))
            .map(|(id, _)| id.clone())
            .collect();
        gone.iter().filter_map(|id| self.remove(id)).collect()
    }

    /// The session to close so that one more of `owner`'s fits: an owner's own least
    /// recently used once it holds `per_owner`; when `total` are open, one of the biggest
    /// holder's, so that an owner's initializes never close another's sessions below its
    /// share. The biggest holder is found from the widest group down: the group holding
    /// the most sessions, in it the narrower group holding the most, in that the owner
    /// holding the most ([`OwnerGroups`]), so that a client spreading its sessions over
    /// many addresses of its network, or a tenant over many callers, closes its own, not
    /// those of a client elsewhere that holds one. (Sessions of no owner are capped by
    /// `total` only.) Walks the owners only when the table is full.
    fn to_close(&self, owner: &Option<O>, total: usize, per_owner: usize) -> Option<&String> {
        let oldest_of = |owner: &Option<O>| self.by_owner.get(owner)?.first().map(|(_, id)| id);
        let held = |owner: &Option<O>| self.by_owner.get(owner).map_or(0, std::collections::BTreeSet::len);
        if owner.is_some() && held(owner) >= per_owner {
            return oldest_of(owner);
        }
        if self.len() < total {
            return None;
        }
        #[derive(PartialEq, Eq, Hash)]
        enum Group<'a, O> {
            Of(OwnerGroup),
            Alone(&'a Option<O>),
        }
        fn group<O: OwnerGroups>(owner: &Option<O>, level: usize) -> Group<'_, O> {
            match owner.as_ref().and_then(|owner| owner.groups()[level].clone()) {
                Some(group) => Group::Of(group),
                None => Group::Alone(owner),
            }
        }
        let mut candidates: Vec<&Option<O>> = self.by_owner.keys().collect();
        for level in 0..2 {
            let mut sizes: HashMap<Group<'_, O>, usize> = HashMap::with_capacity(candidates.len());
            for &candidate in &candidates {
                *sizes.entry(group(candidate, level)).or_default() += held(candidate);
            }
            // Every group holding the most stays in: a tie is not broken by the map's order.
            let biggest = sizes.values().copied().max()?;
            candidates.retain(|&candidate| sizes[&group(candidate, level)] == biggest);
        }
        // Among owners holding as many, the one whose session has waited longest.
        let last_used =
            |owner: &Option<O>| self.by_owner.get(owner).and_then(|uses| uses.first()).map(|(used, _)| *used);
        let most = candidates
            .into_iter()
            .max_by_key(|&candidate| (held(candidate), std::cmp::Reverse(last_used(candidate))))?;
        oldest_of(most)
    }
}

impl Sessions {
    fn open(&self, connection: Arc<Connection>) -> String {
        // 128 bits from the system's CSPRNG: a session id is the only credential of a
        // 2025-era session without an API key. (Keyed hashes of a counter, as std's
        // `RandomState` gives, were never meant to make secrets.)
        use chacha20poly1305::aead::rand_core::RngCore;
        let mut bytes = [0_u8; 16];
        chacha20poly1305::aead::OsRng.fill_bytes(&mut bytes);
        let id = format!("{:032x}", u128::from_be_bytes(bytes));
        let now = std::time::Instant::now();
        let sweep = {
            let mut swept = self.swept.lock().unwrap();
            let due = swept.is_none_or(|at| now.duration_since(at) >= SESSION_SWEEP_EVERY);
            if due {
                *swept = Some(now);
            }
            due
        };
        let owner = SessionOwner::of(&connection);
        let mut live = self.live.lock().unwrap();
        // Idle sessions go, unless a stream still follows them; what goes, ends. (Between
        // sweeps, `get` ends an idle session it is asked for.)
        if sweep {
            let idle = live.remove_unless(|session, used| !is_idle(session, used, now));
            idle.iter().for_each(|session| session.end_session());
        }
        let closing = live.to_close(&owner, MAX_SESSIONS, SessionOwner::cap(owner.as_ref())).cloned();
        if let Some(closed) = closing.and_then(|closing| live.remove(&closing)) {
            closed.end_session();
        }
        live.insert(id.clone(), connection, owner, now);
        id
    }

    /// The session `id` when `holds` it (its tenant and caller are the request's), unless
    /// it has been idle for [`SESSION_IDLE`] (with no stream following it): that one ends
    /// here. Another holder's request neither ends nor refreshes it.
    fn get(&self, id: &str, holds: impl FnOnce(&Connection) -> bool) -> Option<Arc<Connection>> {
        let mut live = self.live.lock().unwrap();
        let (connection, used) = live.get(id)?;
        if !holds(connection) {
            return None;
        }
        let now = std::time::Instant::now();
        if is_idle(connection, used, now) {
            live.remove(id)?.end_session();
            return None;
        }
        let connection = connection.clone();
        live.touch(id, now);
        Some(connection)
    }

    /// End the session `id` when `holds` it.
    fn close(&self, id: &str, holds: impl FnOnce(&Connection) -> bool) -> bool {
        let mut live = self.live.lock().unwrap();
        if !live.get(id).is_some_and(|(connection, _)| holds(connection)) {
            return false;
        }
        live.remove(id).map(|connection| connection.end_session()).is_some()
    }
}

/// Whether a session last used at `used` has been idle for [`SESSION_IDLE`] by `now`: no
/// request and no stream following it in that time.
fn is_idle(session: &Connection, used: std::time::Instant, now: std::time::Instant) -> bool {
    // Following first: a stream ending sets when it stopped, then clears following, so a
    // stream seen ended has its time seen too.
    if session.is_following() {
        return false;
    }
    let used = session.followed_until().map_or(used, |followed| followed.max(used));
    now.duration_since(used) >= SESSION_IDLE
}

/// What every HTTP request shares.
struct Shared {
    server: Arc<Server>,
    settings: HttpSettings,
    sessions: Sessions,
    clients: Arc<Clients>,
    /// Turns true when shutdown begins: from then on requests are refused with 503.
    refusing: tokio::sync::watch::Receiver<bool>,
    protection: Option<Protection>,
}

/// The endpoint behind OAuth: the validator, and the metadata that points clients to the
/// authorization server.
struct Protection {
    validator: Arc<Validator>,
    /// Where the metadata is served: `/.well-known/oauth-protected-resource`, and that
    /// followed by the resource's path (RFC 9728 §3.1) and by the endpoint's.
    metadata_paths: Vec<String>,
    metadata: Bytes,
    /// Where the metadata is published, from the configured audience.
    metadata_url: String,
    /// `Bearer resource_metadata="<url>"`, as a 401 without a token carries it.
    challenge: String,
}

/// The well-known path of Protected Resource Metadata (RFC 9728 §3).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

impl Protection {
    fn new(validator: Arc<Validator>, endpoint: &str) -> Self {
        let oauth = validator.settings();
        let (origin, resource_path) = match oauth.audience.parse::<hyper::Uri>() {
            Ok(uri) if uri.scheme().is_some() && uri.authority().is_some() => (
                format!("{}://{}", uri.scheme_str().unwrap_or("https"), uri.authority().expect("checked")),
                uri.path().trim_end_matches('/').to_owned(),
            ),
            _ => (String::new(), String::new()),
        };
        let mut metadata_paths =
            vec![RESOURCE_METADATA_PATH.to_owned(), format!("{RESOURCE_METADATA_PATH}{endpoint}")];
        if !resource_path.is_empty() {
            metadata_paths.push(format!("{RESOURCE_METADATA_PATH}{resource_path}"));
        }
        let metadata_url = format!("{origin}{RESOURCE_METADATA_PATH}{resource_path}");
        let metadata = Bytes::from(oauth.resource_metadata().to_string());
        Self {
            validator,
            metadata_paths,
            metadata,
            challenge: format!("Bearer resource_metadata=\"{metadata_url}\""),
            metadata_url,
        }
    }

    /// The metadata document: GET only, no credentials needed.
    fn metadata_answer(&self, method: &Method) -> HttpResponse {
        if method != Method::GET {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed: use GET");
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
            return response;
        }
        let mut response = Response::new(ResponseBody::Full(Some(self.metadata.clone())));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }

    /// What a request's bearer token says (its tenant and subject), or the 400, 401 or 403
    /// refusing it.
    #[allow(clippy::result_large_err)]
    async fn authenticate(&self, uri: &hyper::Uri, headers: &HeaderMap) -> Result<Claims, HttpResponse> {
        // A token in the URL ends up in logs and histories (MCP authorization: never).
        if uri.query().is_some_and(crate::auth::query_has_credential) {
            let challenge = format!("{}, error=\"invalid_request\"", self.challenge);
            return Err(self.refusal(
                StatusCode::BAD_REQUEST,
                challenge,
                "Bad Request: send the token in the Authorization header, never in the URL",
            ));
        }
        let Some(token) = headers.get(header::AUTHORIZATION).and_then(bearer_token) else {
            return Err(self.refusal(
                StatusCode::UNAUTHORIZED,
                self.challenge.clone(),
                "Unauthorized: a bearer token is required",
            ));
        };
        match self.validator.validate(token).await {
            Ok(claims) => Ok(claims),
            Err(TokenError::Invalid(reason)) => {
                tracing::debug!("refused a token: {reason}");
                let challenge =
                    format!("Bearer error=\"invalid_token\", {}", &self.challenge["Bearer ".len()..]);
                Err(self.refusal(
                    StatusCode::UNAUTHORIZED,
                    challenge,
                    "Unauthorized: invalid or expired token",
                ))
            }
            Err(TokenError::InsufficientScope { required }) => {
                let challenge = format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{required}\", {}",
                    &self.challenge["Bearer ".len()..]
                );
                Err(self.refusal(
                    StatusCode::FORBIDDEN,
                    challenge,
                    "Forbidden: the token lacks a required scope",
                ))
            }
        }
    }

    fn refusal(&self, status: StatusCode, challenge: String, text: &str) -> HttpResponse {
        let mut response = plain(status, text);
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Open connections by client address. An entry lives while its address has a connection
/// open, so there are never more entries than connections.
#[derive(Default)]
struct Clients {
    by_address: std::sync::Mutex<HashMap<IpAddr, AddressConnections>>,
}

struct AddressConnections {
    open: usize,
    /// One permit per connection still reading its first request's head.
    header_slots: Arc<Semaphore>,
}

/// The address an IP counts as: IPv4 as is (also when mapped into IPv6), IPv6 by its /48,
/// the block a site is given. A host is given a /64 and a home a /56, but anyone may have
/// a /48 for the asking (tunnel brokers hand them out free): counted by /64, one holder
/// of a /48 was 65,536 clients, and two of its /64s filled every share of half a bound.
/// So an IPv6 site is one client, as the hosts behind one IPv4 address are.
pub fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & (u128::MAX << 80))),
        },
    }
}

/// The server's connection slots, as a new connection finds them.
#[derive(Clone, Copy)]
struct SlotsLeft {
    free: usize,
    total: usize,
}

impl SlotsLeft {
    /// Whether an address holding `open` connections is refused one more: when fewer than a
    /// quarter of the slots are free, one holding an eighth of them already is. Each
    /// address's cap is half the slots by default, so without this two addresses that only
    /// connect (and connect again) held every slot, and no one else got in; now it takes
    /// several, and the last quarter goes only to addresses that hold little.
    fn crowded_for(self, open: usize) -> bool {
        self.free < self.total / 4 && open >= (self.total / 8).max(1)
    }
}

impl Clients {
    /// Count a new connection from `ip`, unless its address already has `max_open`, or
    /// holds its share of slots that are running low (`slots`).
    fn enter(
        self: &Arc<Self>,
        ip: IpAddr,
        max_open: usize,
        max_half_open: usize,
        slots: SlotsLeft,
    ) -> Option<ClientTicket> {
        let address = client_address(ip);
        let mut by_address = self.by_address.lock().unwrap();
        let client = by_address.entry(address).or_insert_with(|| AddressConnections {
            open: 0,
            header_slots: Arc::new(Semaphore::new(max_half_open)),
        });
        if client.open >= max_open || slots.crowded_for(client.open) {
            return None; // never 0 here: the entry was there before
        }
        client.open += 1;
        Some(ClientTicket { clients: self.clone(), address, header_slots: client.header_slots.clone() })
    }

    /// Connections open from `ip`'s address.
    #[cfg(test)]
    fn open(&self, ip: IpAddr) -> usize {
        self.by_address.lock().unwrap().get(&client_address(ip)).map_or(0, |client| client.open)
    }
}

/// One open connection, counted against its address until dropped.
struct ClientTicket {
    clients: Arc<Clients>,
    address: IpAddr,
    header_slots: Arc<Semaphore>,
}

impl Drop for ClientTicket {
    fn drop(&mut self) {
        let mut by_address = self.clients.by_address.lock().unwrap();
        if let Some(client) = by_address.get_mut(&self.address) {
            client.open -= 1;
            if client.open == 0 {
                by_address.remove(&self.address);
            }
        }
    }
}

/// What a client over its address's connection cap is told before the connection closes.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nConnection: close\r\nContent-Length: 71\r\n\r\n\
{\"error\":\"Service Unavailable: too many connections from this address\"}";

/// Serve MCP over HTTP on `listener` until `shutdown` resolves; then stop every call in
/// flight (grace, hard stop, cleanup) and wait at most `drain` for them.
///
/// **Stopping behind a load balancer.** From the signal on the replica is no longer ready
/// (`/readyz`), but a balancer learns that only at its next probe, and until then it may
/// send requests on a connection it holds or open a new one. Closing the listener or an
/// idle connection at once would reset those requests (a request in the listen queue or
/// racing the close gets no answer, and a balancer cannot tell whether it ran). So the
/// listener and every connection stay open while calls drain, and for at least
/// `close_delay` from the signal: each request that arrives meanwhile is answered 503
/// with `Connection: close` and `Retry-After`, which says it never reached a handler and
/// may safely go to another replica. Then the listener closes, idle connections close,
/// and busy ones close after their answer.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    settings: HttpSettings,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let protection = settings.oauth.clone().map(|validator| Protection::new(validator, &settings.path));
    let (refuse_requests, refusing) = tokio::sync::watch::channel(false);
    let (close_connections, closing) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared {
        server: server.clone(),
        settings,
        sessions: Sessions::default(),
        clients: Arc::default(),
        refusing,
        protection,
    });
    let listening = Listening {
        listener,
        open_slots: Arc::new(tokio::sync::Semaphore::new(shared.settings.max_connections)),
        shared: shared.clone(),
        closing,
    };
    let mut connections = tokio::task::JoinSet::new();
    let stats = shared.settings.stats.clone();
    stats.accepting.store(true, Ordering::Release);
    listening.serve_until(&mut connections, shutdown).await;
    stats.accepting.store(false, Ordering::Release);
    refuse_requests.send_replace(true);
    let close_at = tokio::time::Instant::now() + shared.settings.close_delay;
    server.shutdown();
    let drained = async {
        if !server.drain(drain).await {
            tracing::warn!("calls still running after {drain:?}; exiting anyway");
        }
        tokio::time::sleep_until(close_at).await;
    };
    listening.serve_until(&mut connections, drained).await;
    drop(listening);
    close_connections.send_replace(true);
    let flushed = tokio::time::timeout(Duration::from_secs(2), async {
        while connections.join_next().await.is_some() {}
    });
    if flushed.await.is_err() {
        tracing::warn!("some HTTP connections did not close in time");
    }
    Ok(())
}

/// The listener and what each connection it accepts shares.
struct Listening {
    listener: TcpListener,
    /// `max_connections`: a permit per open connection.
    open_slots: Arc<tokio::sync::Semaphore>,
    shared: Arc<Shared>,
    /// Turns true when connections are to close (idle ones at once, busy ones after
    /// their answer) and connections still waiting to be read give up.
    closing: tokio::sync::watch::Receiver<bool>,
}

impl Listening {
    /// Accept connections, each served on a task of `connections`, until `until` resolves.
    async fn serve_until(
        &self,
        connections: &mut tokio::task::JoinSet<()>,
        until: impl std::future::Future<Output = ()>,
    ) {
        let mut until = std::pin::pin!(until);
        loop {
            let (slot, (stream, peer)) = tokio::select! {
                accepted = async {
                    let slot = self.open_slots.clone().acquire_owned().await.expect("never closed");
                    (slot, self.listener.accept().await)
                } => match accepted {
                    (slot, Ok(accepted)) => (slot, accepted),
                    (_, Err(error)) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!("accept failed: {error}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                () = &mut until => return,
            };
            let settings = &self.shared.settings;
            // A trusted proxy carries many clients: only its own cap bounds it.
            let free = match settings.trusted_proxies.contains(peer.ip()) {
                true => settings.max_connections,
                false => self.open_slots.available_permits(),
            };
            let slots = SlotsLeft { free, total: settings.max_connections };
            let Some(ticket) = self.shared.clients.enter(
                peer.ip(),
                settings.max_connections_per_ip,
                settings.max_header_connections_per_ip,
                slots,
            ) else {
                // Best effort, never waiting: the client learns why if it reads before it writes.
                tracing::debug!(%peer, "refusing a connection: too many from this address");
                let _ = stream.try_write(TOO_MANY_CONNECTIONS);
                continue;
            };
            configure_accepted(&stream, settings);
            connections.spawn(serve_accepted(
                self.shared.clone(),
                stream,
                peer,
                slot,
                ticket,
                self.closing.clone(),
            ));
        }
    }
}

/// An accepted connection's socket options: no Nagle delay for answers, and a bound on
/// unacknowledged writes. A peer gone without a word (its network lost) leaves what was
/// written unacked: the kernel ends the connection after the write timeout, not after its
/// retransmissions' 15 minutes, so its streams end with it (a 2025 session's GET among
/// them, whose client's reconnecting GET is refused while it lasts).
fn configure_accepted(stream: &TcpStream, settings: &HttpSettings) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(stream).set_tcp_user_timeout(Some(settings.write_timeout));
}

/// One accepted connection, from its address's turn to send a head until it closes.
async fn serve_accepted(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    ticket: ClientTicket,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let _slot = slot; // held while the connection is open
    let stats = shared.settings.stats.clone();
    let _open = HttpStats::hold(&stats.connections);
    let header_timeout = shared.settings.header_timeout;
    // Wait, unread, for the address's turn to send a request head.
    let permit = tokio::select! {
        permit = tokio::time::timeout(header_timeout, ticket.header_slots.clone().acquire_owned()) => {
            match permit {
                Ok(permit) => permit.expect("never closed"),
                Err(_) => {
                    tracing::debug!(%peer, "closing a connection: its address kept every header slot");
                    return;
                }
            }
        }
        _ = closing.wait_for(|closing| *closing) => return,
    };
    let half_open = HalfOpen(std::sync::Mutex::new(Some(permit)));
    let tls = shared.settings.tls.clone();
    let unread_body = Arc::new(AtomicBool::new(false));
    let socket = Socket::new(stream, unread_body.clone(), &shared.settings);
    let service = hyper::service::service_fn(move |mut request: Request<IncomingBody>| {
        // The head is read: the address's header slot is free again.
        half_open.end();
        let client = shared.settings.trusted_proxies.client(peer.ip(), request.headers());
        request.extensions_mut().insert(Peer(client_address(client)));
        let (shared, unread_body) = (shared.clone(), unread_body.clone());
        async move { Ok::<_, Infallible>(handle(request, &shared, &unread_body).await) }
    });
    let _ticket = ticket; // counted against the address while open
    match tls {
        None => serve_connection(socket, service, header_timeout, closing).await,
        Some(tls) => {
            // The handshake is part of the head: the same deadline, under the same slot.
            let accepted = tokio::select! {
                accepted = tokio::time::timeout(header_timeout, tls.acceptor().accept(socket)) => accepted,
                _ = closing.wait_for(|closing| *closing) => return,
            };
            match accepted {
                Ok(Ok(stream)) => serve_connection(stream, service, header_timeout, closing).await,
                Ok(Err(error)) => tracing::debug!(%peer, "TLS handshake failed: {error}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
}

/// The longest request head (its line and headers) a connection reads, and so about the
/// most its read buffer holds: hyper answers 431 past it (it reads into whatever room its
/// buffer has, so a head of up to about twice this may be read whole). hyper's default,
/// about 400 KiB, held uncharged by each of thousands of connections, would be gigabytes;
/// a bearer token and a tool's `Mcp-Param-*` headers fit in this many times over.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// The most header lines a request may have (431 past it).
const MAX_HEADERS: usize = 100;

/// Serve HTTP/1.1 on one connection (plain or TLS) until it ends or the server closes.
async fn serve_connection<I, S>(
    io: I,
    service: S,
    header_timeout: Duration,
    mut closing: tokio::sync::watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<IncomingBody>, Response = HttpResponse, Error = Infallible>,
    S::Future: Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = async { let _ = closing.wait_for(|closing| *closing).await; } => {
            // Finish the answer in flight, then close.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!("HTTP connection ended: {error}");
    }
}

/// Bind `address` and serve.
pub async fn bind_and_serve(
    server: Arc<Server>,
    address: SocketAddr,
    settings: HttpSettings,
    shutdown: impl std::future::Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(address).await?;
    let scheme = if settings.tls.is_some() { "https" } else { "http" };
    tracing::info!("serving MCP on {scheme}://{}{}", listener.local_addr()?, settings.path);
    if settings.tls.is_none() && !address.ip().is_loopback() {
        tracing::warn!(
            "serving plain HTTP on {address}, beyond loopback: TLS is expected to be terminated in front of \
             this server (or give --tls-cert and --tls-key)"
        );
    }
    serve(server, listener, settings, shutdown, drain).await
}

/// The address a request comes from, as its shares count it: its connection's, or behind
/// a trusted proxy the client's it names ([`TrustedProxies::client`]); an IPv6 client by
/// its /48, which one holder can fill with addresses ([`client_address`]).
#[derive(Clone, Copy)]
struct Peer(std::net::IpAddr);

/// A connection's permit to read its first request head, given back once it is read.
struct HalfOpen(std::sync::Mutex<Option<OwnedSemaphorePermit>>);

impl HalfOpen {
    fn end(&self) {
        self.0.lock().unwrap().take();
    }
}

/// Serve one request; when the answer goes out before the body was read to its end, mark
/// the connection to linger when it closes.
async fn handle(request: Request<IncomingBody>, shared: &Shared, unread_body: &AtomicBool) -> HttpResponse {
    let has_body = !request.body().is_end_stream();
    let mut body_read = false;
    let response = match serve_request(request, shared, &mut body_read).await {
        Ok(response) | Err(response) => response,
    };
    if has_body && !body_read {
        unread_body.store(true, Ordering::Release);
    }
    // Once shutdown has begun, no connection is left idle for a balancer to reuse just as
    // the server closes it: each answer closes its connection.
    if *shared.refusing.borrow() {
        return closing(response);
    }
    response
}

/// The validation ladder, then dispatch. `Err` is an early refusal. `body_read` is set once
/// the whole body is in.
#[allow(clippy::result_large_err)]
async fn serve_request(
    request: Request<IncomingBody>,
    shared: &Shared,
    body_read: &mut bool,
) -> Result<HttpResponse, HttpResponse> {
    let (server, settings) = (&shared.server, &shared.settings);
    if *shared.refusing.borrow() {
        return Err(shutting_down());
    }
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN)
        && !origin_allowed(origin, &settings.allowed_hosts)
    {
        return Err(closing(plain(StatusCode::FORBIDDEN, "Forbidden: origin not allowed")));
    }
    if !host_allowed(headers.get(header::HOST), &settings.allowed_hosts) {
        return Err(closing(plain(StatusCode::FORBIDDEN, "Forbidden: host not allowed")));
    }
    let protection = shared.protection.as_ref();
    if let Some(protection) = protection
        && protection.metadata_paths.iter().any(|path| path == request.uri().path())
    {
        // Answered to anyone: so as not to keep a connection open on it (`closing`).
        return Err(closing(protection.metadata_answer(request.method())));
    }
    if request.uri().path() != settings.path {
        return Err(closing(plain(StatusCode::NOT_FOUND, "Not Found: the MCP endpoint is POST /mcp")));
    }
    // Who is asking, before anything else of the request is read.
    let Credentials { tenant, caller, expire } = authenticate(shared, &request).await.map_err(closing)?;
    // A 2025-era session's id; a request whose version header names 2026-07-28 ignores
    // one (sessions are not of its era), whatever its method.
    let session_id = header_text(headers, "mcp-session-id").filter(|_| !names_this_version(headers));
    // GET and DELETE name a session: only 2025-era clients send them.
    if session_id.is_some()
        && matches!(*request.method(), Method::GET | Method::DELETE)
        && let Some(problem) = unsupported_legacy_version(headers)
    {
        return Err(plain(StatusCode::BAD_REQUEST, &problem));
    }
    if request.method() == Method::DELETE
        && let Some(id) = &session_id
    {
        // Ending a 2025-era session; a session that is gone (or another's) is told so, as
        // for any request.
        return Err(
            match shared.sessions.close(id, |session| same_holder(session, tenant.as_ref(), caller.as_ref()))
            {
                true => empty(StatusCode::OK),
                false => plain(StatusCode::NOT_FOUND, "Not Found: unknown or expired session"),
            },
        );
    }
    if request.method() == Method::GET
        && let Some(id) = &session_id
    {
        let holder = Credentials { tenant, caller, expire };
        return Err(session_stream(shared, headers, id, &holder));
    }
    if request.method() != Method::POST {
        // GET and DELETE are served only with a 2025-era session's id: without one, POST
        // is what this request may use (as the Python SDK answers).
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed: use POST");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Err(response);
    }
    if !accepts_json_and_sse(headers) {
        return Err(plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Accept must list application/json and text/event-stream",
        ));
    }
    if !is_json(headers) {
        return Err(plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: send application/json",
        ));
    }
    let headers = headers.clone();
    let peer = request.extensions().get::<Peer>().map(|peer| peer.0);
    // Its bytes count in its client's share of the admission bound, its answers' too.
    let client = Client::of(caller.as_ref(), peer)
        .map(|client| server.admission().client_share(tenant.as_deref(), client));
    let body_charge = server.admission().empty_for(tenant.as_deref(), client.as_ref());
    let (body, body_charge) = read_body(request.into_body(), settings, body_charge).await?;
    *body_read = true;
    // Its body may have taken a while: a request not begun when shutdown began gets the
    // 503 a balancer retries elsewhere, not the error of a call refused at its start.
    if *shared.refusing.borrow() {
        return Err(shutting_down());
    }
    let Admitted { message, charge } =
        server.admit_for(&body, tenant.as_deref(), client.as_ref()).map_err(|refusal| refused(&refusal))?;
    // From here on the parsed message is what is held.
    drop((body, body_charge));
    // A 2025-era session, when the request names a live one (with the 2026-07-28 header,
    // none: above), whatever its body lacks. Another tenant's session is no session at all.
    let session = session_id.as_deref().and_then(|id| {
        shared.sessions.get(id, |session| same_holder(session, tenant.as_ref(), caller.as_ref()))
    });
    let (id, method, params) = match message {
        Incoming::Request { id, method, params } => (id, method, params),
        notification @ (Incoming::Notification { .. } | Incoming::Response { .. }) => {
            // Only a 2025-era session's notifications (its cancellations) and responses (to
            // what a call of its asked) mean anything; in the 2026 protocol a cancel is a
            // closed stream, and nothing is asked. A response to nothing waiting is
            // dropped by the session, and still accepted.
            match session {
                // A 2026-07-28 notification ignores a session id, as its requests do.
                Some(_)
                    if !notification_is_modern(&notification)
                        && let Some(problem) = unsupported_legacy_version(&headers) =>
                {
                    return Err(plain(StatusCode::BAD_REQUEST, &problem));
                }
                // ...and reaches no session: it cancels nothing of one.
                Some(connection) if !notification_is_modern(&notification) => {
                    let admitted = Admitted { message: notification, charge };
                    // Nothing answers a notification: what it sends goes nowhere.
                    connection.handle_admitted(admitted, &Outbox::channel(server, 1).0).await
                }
                // Its cancellation could reach nothing: the client must initialize again.
                // (A 2026-07-28 notification ignores a session id, as its requests do.)
                None if session_id.is_some() && !notification_is_modern(&notification) => {
                    return Err(plain(StatusCode::NOT_FOUND, "Not Found: unknown or expired session"));
                }
                // Only a 2025-era session is ever asked anything: a response posted
                // without one answers nothing (§12.2: clients post requests and
                // notifications only).
                None if matches!(notification, Incoming::Response { .. }) => {
                    let error = RpcError::new(
                        INVALID_REQUEST,
                        "Invalid Request: a JSON-RPC response is posted only within the 2025-era \
                         session whose call asked for it",
                    );
                    return Err(rpc_error(StatusCode::BAD_REQUEST, None, &error));
                }
                Some(_) | None => {}
            }
            return Ok(empty(StatusCode::ACCEPTED));
        }
        Incoming::Unanswered { problem } => {
            let error = RpcError::new(INVALID_REQUEST, format!("Invalid Request: {problem}"));
            return Err(rpc_error(StatusCode::BAD_REQUEST, None, &error));
        }
        Incoming::Invalid { id, error } => {
            return Err(rpc_error(StatusCode::BAD_REQUEST, id.as_ref(), &error));
        }
    };

    let legacy = is_legacy(&headers, &method, params.as_ref(), session_id.is_some());
    // Before the rate limit, as every check of the transport's: a request the era's
    // transport refuses spends none of it.
    if legacy
        && method != "initialize"
        && let Some(problem) = unsupported_legacy_version(&headers)
    {
        return Err(rpc_error(StatusCode::BAD_REQUEST, Some(&id), &RpcError::new(INVALID_REQUEST, problem)));
    }
    // The request's one snapshot of the tools: its headers are checked and its call runs
    // against the same set, whatever a reload swaps in meanwhile.
    let tools = server.snapshot();
    let check_params = |required: bool| {
        let header = |name: &str| headers.get(name).map(HeaderValue::as_bytes);
        server.check_param_headers(&tools, tenant.as_deref(), &method, params.as_ref(), header, required)
    };
    if !legacy {
        check_modern(&headers, &id, &method, params.as_ref(), || check_params(true))?;
    } else if session_id.is_some() && session.is_none() && method != "initialize" {
        return Err(plain(StatusCode::NOT_FOUND, "Not Found: unknown or expired session; initialize again"));
    } else {
        legacy_routing_problem(&headers, &method, params.as_ref(), || check_params(false))
            .map_err(|what| header_mismatch(&id, what))?;
    }
    // After every check of the transport's: a request it refuses spends none of the rate.
    if let Some(tenant) = &tenant
        && server.spends_rate(&tools, Some(tenant), &method)
        && let Err(retry_after) = tenant.admit_call()
    {
        // Refused before any handler saw it: 429, and when to come back.
        let mut response =
            rpc_error(StatusCode::TOO_MANY_REQUESTS, Some(&id), &rate_limited(tenant, retry_after));
        let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return Err(response);
    }

    let (sender, mut outbox) = mpsc::channel(64);
    let charger = Arc::new(AnswerCharger::new(server.clone(), tenant.clone(), client));
    // An `initialize` starts a session of its own, whatever session id it came with: two
    // ids on one connection would end together.
    let connection = match session.filter(|_| legacy && method != "initialize") {
        Some(connection) => connection,
        None => {
            let connection = Connection::for_caller(server.clone(), tenant, caller, RateCheck::Done);
            if let Some(peer) = peer {
                connection.set_peer(peer);
            }
            if let Some(expire) = expire {
                connection.set_credentials_expire(expire);
            }
            connection
        }
    };
    if legacy {
        connection.set_legacy();
    }
    let new_session = (legacy && method == "initialize").then(|| shared.sessions.open(connection.clone()));
    // From here on, dropping the guard (the client went away) cancels the call.
    let guard = CancelOnDrop { connection: connection.clone(), id: id.clone(), armed: true };
    let admitted = Admitted { message: Incoming::Request { id, method, params }, charge };
    connection.handle_admitted_in(admitted, Some(tools), &Outbox::Channel(sender, charger)).await;
    drop(connection);

    let first = match tokio::time::timeout(settings.sse_after, outbox.recv()).await {
        Ok(Some(message)) if message.is_answer() => {
            let mut response = json_answer(guard, &message, legacy);
            if let Some(session) = new_session
                && let Ok(value) = HeaderValue::from_str(&session)
            {
                response.headers_mut().insert("mcp-session-id", value);
            }
            return Ok(response);
        }
        Ok(Some(notification)) => Some(notification),
        // Every sender is gone without an answer: a call cancelled by a 2025-era
        // `notifications/cancelled`. A request's answer must still be JSON or SSE: an
        // event stream that ends at once says nothing.
        Ok(None) => None,
        Err(_quiet) => None,
    };
    Ok(sse_answer(Some(guard), first, outbox, settings.keep_alive, settings.stats.clone()))
}

/// The tenant of the request's credentials (`None` when no tenants are configured: every
/// request is let in, as the one implicit tenant), the caller within it (`None`: no
/// credentials) and when they expire ([`Credentials`]). A refusal is a 401 (403 for a missing
/// scope or a tenant not served, 400 for credentials in the query) with a
/// `WWW-Authenticate` challenge: naming the protected resource metadata with OAuth, a
/// realm with API keys alone.
#[allow(clippy::result_large_err)]
async fn authenticate(shared: &Shared, request: &Request<IncomingBody>) -> Result<Credentials, HttpResponse> {
    let tenants = shared.server.tenants();
    let headers = request.headers();
    // Read only where there are credentials to check.
    let authenticating = !tenants.is_empty() || shared.protection.is_some();
    if authenticating && headers.get_all(header::AUTHORIZATION).iter().nth(1).is_some() {
        return Err(unauthorized(shared, &AuthError::Twice));
    }
    if !tenants.is_empty() {
        let authorization = headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes);
        match tenants.authenticate(authorization, request.uri().query()) {
            Ok(principal) => match tenants.of(&principal) {
                Some(tenant) => {
                    let (tenant, caller) = (Some(tenant.clone()), Some(principal.caller));
                    return Ok(Credentials { tenant, caller, expire: None });
                }
                None => return Err(unauthorized(shared, &AuthError::Invalid)),
            },
            // Not an API key: with OAuth configured it may be an access token.
            Err(AuthError::Invalid | AuthError::Missing) if shared.protection.is_some() => {}
            Err(error) => return Err(unauthorized(shared, &error)),
        }
    }
    let Some(protection) = &shared.protection else {
        return Ok(Credentials { tenant: None, caller: None, expire: None });
    };
    let claims = protection.authenticate(request.uri(), headers).await?;
    let (caller, expire) = (Some(claims.caller.clone()), Some(unix_instant(claims.usable_until)));
    if tenants.is_empty() {
        // One implicit tenant: the token lets the request in, as its subject.
        return Ok(Credentials { tenant: None, caller, expire });
    }
    match tenants.get(&claims.tenant) {
        Some(tenant) => Ok(Credentials { tenant: Some(tenant.clone()), caller, expire }),
        // A valid token for a tenant this server does not know: authenticated, not allowed.
        // A 403 with the plain challenge: `invalid_token` is a 401's (RFC 6750 3.1), and
        // the token is valid; no other token of the same tenant would do better.
        None => Err(protection.refusal(
            StatusCode::FORBIDDEN,
            protection.challenge.clone(),
            "Forbidden: the token's tenant is not served here",
        )),
    }
}

/// Who a request's credentials name, and until when they hold.
struct Credentials {
    /// The tenant (`None` when no tenants are configured).
    tenant: Option<Arc<Tenant>>,
    /// The caller within it (`None`: no credentials, or a token naming no one).
    caller: Option<Caller>,
    /// When an OAuth token expires, its leeway included (`None`: API keys and no
    /// credentials do not expire). Streams with no end of their own end then.
    expire: Option<tokio::time::Instant>,
}

/// The instant of the Unix time `seconds` (now, for a time already past; a time too far
/// ahead to represent, about a century on, is as good as never).
fn unix_instant(seconds: u64) -> tokio::time::Instant {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let left = Duration::from_secs(seconds).saturating_sub(now).min(Duration::from_secs(100 * 365 * 86_400));
    tokio::time::Instant::now() + left
}

/// A refusal of an API key (or of credentials in the query): the challenge names the
/// metadata only when OAuth publishes some, at the URL made from the configured audience
/// (never from the request's `Host`, which the client chooses).
fn unauthorized(shared: &Shared, error: &AuthError) -> HttpResponse {
    let metadata = shared.protection.as_ref().map(|protection| protection.metadata_url.as_str());
    let status = StatusCode::from_u16(error.status()).expect("400, 401 or 403");
    let mut response =
        plain(status, &format!("{}: {error}", status.canonical_reason().unwrap_or("Unauthorized")));
    if let Ok(challenge) = HeaderValue::from_str(&error.challenge(metadata)) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// Whether a 2025-era session belongs to the request naming it: the same tenant and the
/// same caller in it (the API key, or the token's subject). Another caller of the tenant
/// who learns a session's id (from a log, a proxy) could otherwise answer what its calls
/// ask the user, cancel them, take its stream or end it.
fn same_holder(session: &Connection, tenant: Option<&Arc<Tenant>>, caller: Option<&Caller>) -> bool {
    session.tenant().map(|tenant| &tenant.id) == tenant.map(|tenant| &tenant.id) && session.caller() == caller
}

/// `GET /mcp` with a 2025-era session's id: the session's stream of server messages (its
/// tool list changes), one per session, open until the client closes it, the server
/// shuts down or the credentials of the `GET` expire (an OAuth token's `exp`: the client
/// opens it again with a fresh one). (Without a session id a GET is answered 405, as the 2026 protocol asks.)
fn session_stream(
    shared: &Shared,
    headers: &HeaderMap,
    session_id: &str,
    holder: &Credentials,
) -> HttpResponse {
    let (tenant, caller) = (holder.tenant.as_ref(), holder.caller.as_ref());
    let accepts_sse = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| item.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("text/event-stream"));
    if !accepts_sse {
        return plain(StatusCode::NOT_ACCEPTABLE, "Not Acceptable: Accept must list text/event-stream");
    }
    let Some(connection) = shared.sessions.get(session_id, |session| same_holder(session, tenant, caller))
    else {
        return plain(StatusCode::NOT_FOUND, "Not Found: unknown or expired session; initialize again");
    };
    let client = connection.client().map(|client| {
        shared.server.admission().client_share(connection.tenant().map(|tenant| &**tenant), client)
    });
    let charger = Arc::new(AnswerCharger::new(shared.server.clone(), connection.tenant().cloned(), client));
    let (sender, outbox) = mpsc::channel(16);
    match connection.follow_tool_changes(Outbox::Channel(sender, charger), holder.expire) {
        Ok(()) => {}
        Err(NotFollowed::AlreadyOpen) => {
            return plain(StatusCode::CONFLICT, "Conflict: this session already has a GET stream open");
        }
        Err(NotFollowed::Busy(busy)) => {
            let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, &busy.message);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            return response;
        }
    }
    sse_answer(None, None, outbox, shared.settings.keep_alive, shared.settings.stats.clone())
}

/// Whether a request comes from a 2025-era client: without the 2026 envelope, `initialize`,
/// a 2025-era version header or a session id (sessions exist only in that era) mark one.
pub(crate) fn is_legacy(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    has_session: bool,
) -> bool {
    let header_version = header_text(headers, "mcp-protocol-version");
    !mcp::has_envelope(params)
        && (method == "initialize"
            || has_session
            || header_version.as_deref().is_some_and(|version| mcp::LEGACY_VERSIONS.contains(&version)))
}

/// The envelope, the request-metadata headers (a tool's `Mcp-Param-*` ones too, checked by
/// `check_params`: see [`Server::check_param_headers`]) and the version, in the spec's
/// order.
#[allow(clippy::result_large_err)]
pub(crate) fn check_modern(
    headers: &HeaderMap,
    id: &RequestId,
    method: &str,
    params: Option<&Value>,
    check_params: impl FnOnce() -> Result<(), String>,
) -> Result<(), HttpResponse> {
    let refuse = |error: RpcError| rpc_error(StatusCode::BAD_REQUEST, Some(id), &error);
    let envelope = mcp::parse_envelope(params).map_err(refuse)?;
    let mismatch = |what: String| header_mismatch(id, what);
    if let Some(twice) = sent_twice(headers) {
        return Err(mismatch(twice));
    }
    match header_text(headers, "mcp-protocol-version") {
        None => return Err(mismatch("MCP-Protocol-Version is required".into())),
        Some(version) if version != envelope.protocol_version => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version is {version:?} but the body says {:?}",
                envelope.protocol_version
            )));
        }
        Some(_) => {}
    }
    check_routing(headers, method, params, true).map_err(mismatch)?;
    check_params().map_err(mismatch)?;
    mcp::check_version(&envelope).map_err(refuse)
}

/// The first `Mcp-*` header sent more than once, as a refusal's words. Intermediaries
/// route and authorize on these headers: sent twice, the server and a proxy may each read
/// a different one (the first, the last, or both joined).
fn sent_twice(headers: &HeaderMap) -> Option<String> {
    let twice = headers
        .keys()
        .filter(|name| name.as_str().starts_with("mcp-"))
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())?;
    Some(format!("{twice} is sent more than once"))
}

/// Whether `Mcp-Method` and `Mcp-Name` agree with the body; `required`: whether they must
/// be there (2026-07-28 requests), or may be left out (2025-era ones).
fn check_routing(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    required: bool,
) -> Result<(), String> {
    match header_text(headers, "mcp-method") {
        None if required => return Err("Mcp-Method is required".into()),
        Some(value) if value != method => {
            return Err(format!("Mcp-Method is {value:?} but the body's method is {method:?}"));
        }
        _ => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.and_then(|params| params.get("name")),
        "resources/read" => params.and_then(|params| params.get("uri")),
        _ => None,
    };
    if let Some(name) = named.and_then(Value::as_str) {
        match header_text(headers, "mcp-name").map(|value| decode_header(&value)) {
            None if required => return Err("Mcp-Name is required".into()),
            Some(value) if value != name => {
                return Err(format!("Mcp-Name is {value:?} but the body names {name:?}"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The refusal of request `id` whose headers say `what` other than its body.
fn header_mismatch(id: &RequestId, what: String) -> HttpResponse {
    let error = RpcError::new(HEADER_MISMATCH, format!("Header mismatch: {what}"));
    rpc_error(StatusCode::BAD_REQUEST, Some(id), &error)
}

/// What is wrong with a 2025-era request's `Mcp-*` headers, if anything: that era has no
/// routing headers, but a gateway in front may still route or authorize on what a client
/// sends, so what is sent must agree with the body as a 2026-07-28 request's must (sent
/// once, the same method, name and arguments); what is left out is not asked for.
fn legacy_routing_problem(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Value>,
    check_params: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    if let Some(twice) = sent_twice(headers) {
        return Err(twice);
    }
    check_routing(headers, method, params, false)?;
    check_params()
}

/// The version a 2025-era request without `MCP-Protocol-Version` is taken to speak (the
/// 2025-06-18 and 2025-11-25 transports say so). Such a request is served, so one that
/// names it is too: clients of those eras (the conformance suite's among them) send it.
const VERSION_WITHOUT_HEADER: &str = "2025-03-26";

/// What is wrong with a 2025-era request's `MCP-Protocol-Version`, if it is sent and is
/// not one of that era's versions: the 2025-06-18 and 2025-11-25 transports answer "an
/// invalid or unsupported" one with 400 (one left out means the oldest, and is served).
fn unsupported_legacy_version(headers: &HeaderMap) -> Option<String> {
    let sent = headers.get("mcp-protocol-version")?;
    let version = sent.to_str().map(str::trim).unwrap_or_default();
    if mcp::LEGACY_VERSIONS.contains(&version) || version == VERSION_WITHOUT_HEADER {
        return None;
    }
    // Quoted only when short: a header may be kilobytes long.
    let quoted = if version.len() <= 32 { format!(" {version:?}") } else { String::new() };
    Some(format!(
        "Bad Request: unsupported MCP-Protocol-Version{quoted}; this server's 2025-era versions are {}",
        mcp::LEGACY_VERSIONS.join(" and ")
    ))
}

/// Whether a notification carries the 2026-07-28 envelope (a response never does).
fn notification_is_modern(message: &Incoming) -> bool {
    matches!(message, Incoming::Notification { params, .. } if mcp::has_envelope(params.as_ref()))
}

/// Whether the request's `MCP-Protocol-Version` header names the 2026-07-28 version.
fn names_this_version(headers: &HeaderMap) -> bool {
    header_text(headers, "mcp-protocol-version").as_deref() == Some(mcp::PROTOCOL_VERSION)
}

/// A header's value with optional whitespace trimmed (RFC 9110), if present and text.
pub(crate) fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|value| value.to_str().ok()).map(|value| value.trim().to_owned())
}

/// Values outside visible ASCII travel as `=?base64?<base64 of UTF-8>?=`; an `Mcp-Name`
/// that is not valid in that form is taken literally.
fn decode_header(value: &str) -> String {
    mcp::decode_header_value(value).unwrap_or_else(|| value.to_owned())
}

pub(crate) fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let accept: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| item.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .collect();
    let has = |wanted: &str| accept.iter().any(|item| item == wanted || item == "*/*");
    has("application/json") && has("text/event-stream")
}

pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).is_some_and(|value| {
        value.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json")
    })
}

/// `host[:port]` → `host`, keeping IPv6 brackets and dropping a fully qualified name's
/// root dot.
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        let host = authority.split(':').next().unwrap_or(authority);
        host.strip_suffix('.').unwrap_or(host)
    }
}

pub(crate) fn host_allowed(host: Option<&HeaderValue>, allowed: &HashSet<String>) -> bool {
    host.and_then(|value| value.to_str().ok())
        .is_some_and(|host| allowed.contains(&host_name(host.trim()).to_ascii_lowercase()))
}

pub(crate) fn origin_allowed(origin: &HeaderValue, allowed: &HashSet<String>) -> bool {
    let Ok(origin) = origin.to_str() else { return false };
    let Some((scheme, authority)) = origin.trim().split_once("://") else { return false };
    matches!(scheme, "http" | "https") && allowed.contains(&host_name(authority).to_ascii_lowercase())
}

/// The most of a body's announced length that is allocated and charged before its bytes
/// arrive: a JSON-RPC request is usually well under it.
const UPFRONT_BODY_BYTES: usize = 16 << 10;

/// Why a body was not read.
enum BodyError {
    TooLarge,
    /// No room on the admission ledger: in a share (the tenant's or the client's) or the
    /// server's.
    Busy(Option<Whose>),
    Broken(hyper::Error),
}

/// The body, within the size and time limits, and its charge on the admission ledger
/// (`charge`, empty: its buffer, charged as it grows).
#[allow(clippy::result_large_err)]
async fn read_body(
    body: IncomingBody,
    settings: &HttpSettings,
    mut charge: Charge,
) -> Result<(Bytes, Charge), HttpResponse> {
    let limit = settings.max_body_bytes;
    let too_large =
        || plain(StatusCode::PAYLOAD_TOO_LARGE, &format!("Payload Too Large: the limit is {limit} bytes"));
    // A `Content-Length` over the limit is refused before a byte of the body is buffered.
    let announced = body.size_hint().lower();
    if announced > limit as u64 {
        return Err(too_large());
    }
    let read = async {
        let mut body = std::pin::pin!(body);
        let mut buffer = Vec::new();
        // A small body is one allocation; a large one is charged as its bytes arrive, so
        // that a `Content-Length` promising megabytes holds no more than this while its
        // bytes do not come (a client could otherwise fill the server's bound with heads).
        let upfront = (announced as usize).min(UPFRONT_BODY_BYTES);
        // A small body is read even when the bound is spent: it may be a cancel or a
        // client's answer, which admission lets in uncharged (`Server::admit_for`); a
        // request among them is refused there.
        let small = |len: usize| {
            announced > 0 && announced <= SMALL_UNCHARGED_BYTES as u64 && len <= SMALL_UNCHARGED_BYTES
        };
        if !charge.grow(upfront) && !small(upfront) {
            return Err(BodyError::Busy(charge.full_share(upfront)));
        }
        buffer.reserve_exact(upfront);
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(BodyError::Broken)?.into_data() else { continue };
            if buffer.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            buffer.reserve(data.len());
            let more = buffer.capacity().saturating_sub(charge.bytes());
            if !charge.grow(more) && !small(buffer.len() + data.len()) {
                return Err(BodyError::Busy(charge.full_share(more)));
            }
            buffer.extend_from_slice(&data);
        }
        Ok(buffer)
    };
    match tokio::time::timeout(settings.body_timeout, read).await {
        Err(_) => {
            Err(plain(StatusCode::REQUEST_TIMEOUT, "Request Timeout: the body took too long to arrive"))
        }
        Ok(Err(BodyError::TooLarge)) => Err(too_large()),
        Ok(Err(BodyError::Busy(share))) => {
            let text = format!(
                "Service Unavailable: requests being read, queued or running hold {}; try again later",
                whose_share(share)
            );
            Err(busy(plain(StatusCode::SERVICE_UNAVAILABLE, &text)))
        }
        Ok(Err(BodyError::Broken(error))) => {
            Err(plain(StatusCode::BAD_REQUEST, &format!("Bad Request: {error}")))
        }
        Ok(Ok(mut buffer)) => {
            // Grown by doubling (a body of no announced length), the buffer may hold twice
            // its length, where admission counts the body at its length: a body near the
            // ceiling would otherwise be refused as busy on an idle server, again and again.
            buffer.shrink_to_fit();
            charge.shrink_to(buffer.capacity());
            Ok((Bytes::from(buffer), charge))
        }
    }
}

/// A message refused admission: 413 when it alone costs too much, 503 when the server's
/// bound is reached; a JSON-RPC error either way, with its id when it could be read.
fn refused(refusal: &Refusal) -> HttpResponse {
    let error = refusal.rpc_error();
    match refusal {
        Refusal::TooCostly { .. } => rpc_error(StatusCode::PAYLOAD_TOO_LARGE, refusal.id(), &error),
        Refusal::Busy { .. } | Refusal::TenantBusy { .. } | Refusal::ClientBusy { .. } => {
            busy(rpc_error(StatusCode::SERVICE_UNAVAILABLE, refusal.id(), &error))
        }
    }
}

/// Tell a refused client when to try again.
fn busy(mut response: HttpResponse) -> HttpResponse {
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    response
}

/// A connection's socket. When hyper closes a connection whose last request's body was
/// left unread (`unread_body`), shutting it down lingers: the server's side is ended (the
/// client sees the answer, then EOF) and what the client still sends is read and
/// discarded, within a time and a byte bound, so that closing does not reset the
/// connection under an answer the client has not read yet.
///
/// A write (or flush) that the client leaves waiting for `write_timeout` fails with
/// `TimedOut`, unless the client took at least [`MIN_BYTES_PER_WRITE_TIMEOUT`] meanwhile:
/// only that much progress starts the wait afresh. A client reading a few bytes now and
/// then would otherwise hold its connection, and the answer waiting in it, for hours.
struct Socket {
    stream: TcpStream,
    unread_body: Arc<AtomicBool>,
    linger: Option<Linger>,
    linger_timeout: Duration,
    linger_bytes: usize,
    write_timeout: Duration,
    /// Running while a write waits on the client.
    write_stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Bytes the client took since the wait began.
    taken_while_stalled: usize,
    /// Whether everything written so far is out (the last flush finished).
    drained: bool,
}

/// What a client must take of an answer within each `write_timeout` while its writes wait
/// on it: 64 KiB (about 2 KiB/s at the default 30 s), far below any client that reads.
const MIN_BYTES_PER_WRITE_TIMEOUT: usize = 64 << 10;

struct Linger {
    deadline: Pin<Box<tokio::time::Sleep>>,
    left: usize,
    write_closed: bool,
}

impl Socket {
    fn new(stream: TcpStream, unread_body: Arc<AtomicBool>, settings: &HttpSettings) -> Self {
        Self {
            stream,
            unread_body,
            linger: None,
            linger_timeout: settings.linger_timeout,
            linger_bytes: settings.linger_bytes,
            write_timeout: settings.write_timeout,
            write_stalled: None,
            taken_while_stalled: 0,
            drained: true,
        }
    }

    /// `write` on the stream, failing once it has waited `write_timeout` for a client that
    /// took less than [`MIN_BYTES_PER_WRITE_TIMEOUT`] meanwhile. `taken` says how many
    /// bytes a finished write moved (`None`: everything is out, as after a flush).
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<std::io::Result<T>>,
        taken: impl FnOnce(&T) -> Option<usize>,
    ) -> Poll<std::io::Result<T>> {
        if let Poll::Ready(result) = write(Pin::new(&mut self.stream), cx) {
            let moved = result.as_ref().ok().and_then(taken);
            match moved {
                Some(bytes) if self.write_stalled.is_some() => {
                    self.taken_while_stalled += bytes;
                    if self.taken_while_stalled >= MIN_BYTES_PER_WRITE_TIMEOUT {
                        self.write_stalled = None;
                        self.taken_while_stalled = 0;
                    }
                }
                Some(_) => {}
                // Everything written is out (hyper flushes only then): the next wait is
                // for another answer, and starts a window of its own. Not cleared here,
                // or a flush after each small piece would restart the window forever.
                None => self.drained = true,
            }
            return Poll::Ready(result);
        }
        if std::mem::take(&mut self.drained) {
            self.write_stalled = None;
            self.taken_while_stalled = 0;
        }
        let timeout = self.write_timeout;
        let stalled = self.write_stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(stalled.as_mut().poll(cx));
        // Reset, not closed: what the kernel still queues for this client (megabytes, on
        // a fast link) would otherwise trickle out to it after the close.
        if let Err(error) = self.stream.set_zero_linger() {
            tracing::debug!("could not reset a stalled connection: {error}");
        }
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the client took {} bytes of an answer in {timeout:?}, less than {MIN_BYTES_PER_WRITE_TIMEOUT}",
                self.taken_while_stalled
            ),
        )))
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.bounded(cx, |stream, cx| stream.poll_write(cx, bytes), |written| Some(*written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.bounded(cx, |stream, cx| stream.poll_write_vectored(cx, bufs), |written| Some(*written))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.bounded(cx, |stream, cx| stream.poll_flush(cx), |()| None)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.unread_body.load(Ordering::Acquire) {
            return Pin::new(&mut this.stream).poll_shutdown(cx);
        }
        let (timeout, bytes) = (this.linger_timeout, this.linger_bytes);
        let linger = this.linger.get_or_insert_with(|| Linger {
            deadline: Box::pin(tokio::time::sleep(timeout)),
            left: bytes,
            write_closed: false,
        });
        if !linger.write_closed {
            // A failure here means the peer is gone: nothing left to drain.
            if ready!(Pin::new(&mut this.stream).poll_shutdown(cx)).is_err() {
                return Poll::Ready(Ok(()));
            }
            linger.write_closed = true;
        }
        let mut scratch = [0u8; 16 << 10];
        loop {
            if linger.deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch[..linger.left.min(16 << 10)]);
            match ready!(Pin::new(&mut this.stream).poll_read(cx, &mut buf)) {
                Ok(()) if !buf.filled().is_empty() => {
                    linger.left -= buf.filled().len();
                    if linger.left == 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                // EOF, or the peer reset: done either way.
                Ok(()) | Err(_) => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// Cancels the request's call when dropped while armed: the client closed the stream.
struct CancelOnDrop {
    connection: Arc<Connection>,
    id: RequestId,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(id = ?self.id, "client closed the response stream: cancelling the call");
            self.connection.cancel_request(&self.id);
        }
    }
}

/// The status for a 2026-era answer carrying `error`: 404 for an unknown method, 400 for
/// the protocol-level refusals, 200 for errors of a request that was understood. (2025-era
/// answers are always 200: a 404 would tell such a client its session is gone.)
fn status_for(code: i64) -> StatusCode {
    match code {
        jsonrpc::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY
        | jsonrpc::UNSUPPORTED_PROTOCOL_VERSION
        | HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

fn json_answer(mut guard: CancelOnDrop, message: &Framed, legacy: bool) -> HttpResponse {
    guard.armed = false;
    let status = match message.error_code() {
        Some(code) if !legacy => status_for(code),
        _ => StatusCode::OK,
    };
    with_json_body(status, message.json())
}

fn sse_answer(
    guard: Option<CancelOnDrop>,
    first: Option<Framed>,
    mut outbox: mpsc::Receiver<Framed>,
    keep_alive: Duration,
    stats: Arc<HttpStats>,
) -> HttpResponse {
    let (events, body) = mpsc::channel::<Bytes>(16);
    // A client that stops reading (its connection still open) is treated as gone once a
    // write has waited this long: the call is cancelled rather than held for good.
    let stall = keep_alive * 2;
    tokio::spawn(async move {
        // Own the whole guard here: it cancels the call if this task ends early.
        let mut guard = guard;
        let _open = HttpStats::hold(&stats.streams);
        let send = |bytes: Bytes| {
            let events = events.clone();
            async move { matches!(tokio::time::timeout(stall, events.send(bytes)).await, Ok(Ok(()))) }
        };
        if let Some(first) = first
            && !send(first.event()).await
        {
            return; // the guard cancels
        }
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keep_alive, keep_alive);
        loop {
            tokio::select! {
                biased;
                () = events.closed() => return, // the client went away: the guard cancels
                message = outbox.recv() => {
                    let Some(message) = message else { break };
                    let done = message.is_answer();
                    if done && let Some(guard) = &mut guard {
                        guard.armed = false;
                    }
                    if !send(message.event()).await {
                        return; // gone or stalled: the guard cancels
                    }
                    if done {
                        break;
                    }
                }
                _ = ticker.tick() => {
                    if !send(Bytes::from_static(b": keep-alive\n\n")).await {
                        return;
                    }
                }
            }
        }
        if let Some(guard) = &mut guard {
            guard.armed = false;
        }
    });
    let mut response = Response::new(ResponseBody::Stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn json_response(status: StatusCode, message: &impl Serialize) -> HttpResponse {
    // Straight into bytes: `to_string` goes through `fmt`, a call per token, which measured
    // a few per cent of an echo's CPU.
    let bytes = serde_json::to_vec(message).expect("a message always serializes");
    with_json_body(status, Bytes::from(bytes))
}

fn with_json_body(status: StatusCode, bytes: Bytes) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(Some(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn rpc_error(status: StatusCode, id: Option<&RequestId>, error: &RpcError) -> HttpResponse {
    json_response(status, &jsonrpc::failure(id, error))
}

/// A refusal before any JSON-RPC message was read: a JSON body saying why.
fn plain(status: StatusCode, text: &str) -> HttpResponse {
    /// `{"error": "…"}`: no JSON-RPC message, since none was read.
    #[derive(Serialize)]
    struct PlainRefusal<'a> {
        error: &'a str,
    }
    json_response(status, &PlainRefusal { error: text })
}

/// A request that arrives once shutdown has begun: it never reached a handler, so a load
/// balancer may safely send it to another replica (`Retry-After`), on a new connection.
fn shutting_down() -> HttpResponse {
    let response = plain(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable: the server is shutting down");
    closing(busy(response))
}

/// Close the connection after `response`: a client refused before it proved who it is (or
/// for its Host or Origin), or answered something anyone may ask (a wrong path, the
/// resource metadata), keeps no connection open by asking again and again (only a new
/// one, which waits for its address's header slots).
fn closing(mut response: HttpResponse) -> HttpResponse {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn empty(status: StatusCode) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(None));
    *response.status_mut() = status;
    response
}

/// A whole body, or SSE events as they come.
pub enum ResponseBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Full(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
            Self::Stream(events) => {
                events.poll_recv(cx).map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Self::Full(None) => SizeHint::with_exact(0),
            Self::Stream(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_gives_up_on_unacknowledged_writes_after_the_write_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let settings = HttpSettings { write_timeout: Duration::from_secs(7), ..HttpSettings::default() };
        configure_accepted(&accepted, &settings);
        let socket = socket2::SockRef::from(&accepted);
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(Duration::from_secs(7)));
        assert!(accepted.nodelay().unwrap());
    }

    /// A 2025-era session whose GET stream followed it past the idle time is in use until
    /// the stream ends: before, it counted as idle since the GET opened, and the client's
    /// reconnecting GET (after a network blip, or its token's expiry) got 404.
    #[tokio::test]
    async fn a_session_followed_past_the_idle_time_survives_its_stream_ending() {
        let server = Server::with_no_components();
        let sessions = Sessions::default();
        let session = Connection::new(server.clone());
        session.set_peer("127.0.0.1".parse().unwrap());
        let id = sessions.open(session.clone());
        let (outbox, stream) = Outbox::channel(&server, 16);
        session.follow_tool_changes(outbox, None).unwrap();
        // The GET was the session's last request, two idle times ago.
        let opened = std::time::Instant::now().checked_sub(2 * SESSION_IDLE).expect("uptime");
        sessions.live.lock().unwrap().touch(&id, opened);
        drop(stream);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while session.is_following() {
            assert!(tokio::time::Instant::now() < deadline, "the stream never ended");
            tokio::task::yield_now().await;
        }
        assert!(sessions.get(&id, |_| true).is_some(), "the session ended with its stream");
    }

    #[test]
    fn two_callers_of_one_tenant_own_their_sessions_apart() {
        let tenant = TenantId::new("org");
        let (alice, bob) = (Caller::of_subject("alice"), Caller::of_subject("bob"));
        let owner = |caller: &Caller| SessionOwner::from_parts(Some(&tenant), Some(caller), None);
        assert_ne!(owner(&alice), owner(&bob));
        let elsewhere = SessionOwner::from_parts(Some(&TenantId::new("other")), Some(&alice), None);
        assert_ne!(owner(&alice), elsewhere, "one subject in two tenants is two owners");
    }

    #[test]
    fn hosts_and_origins_are_checked_without_ports() {
        let allowed = HttpSettings::default().allowed_hosts;
        let host = |value: &'static str| host_allowed(Some(&HeaderValue::from_static(value)), &allowed);
        assert!(host("localhost:8080") && host("127.0.0.1") && host("[::1]:3000"));
        assert!(host("localhost.:8080"), "a fully qualified name is the same host");
        let mut settings = HttpSettings::default();
        settings.allow_host("MCP.Example.com.").unwrap();
        let named = |value: &'static str| {
            host_allowed(Some(&HeaderValue::from_static(value)), &settings.allowed_hosts)
        };
        assert!(named("mcp.example.com") && named("mcp.example.com.:443"));
        assert!(origin_allowed(
            &HeaderValue::from_static("https://mcp.example.com."),
            &settings.allowed_hosts
        ));
        assert!(!host("evil.example:8080") && !host_allowed(None, &allowed));
        let origin = |value: &'static str| origin_allowed(&HeaderValue::from_static(value), &allowed);
        assert!(origin("http://localhost:3000") && origin("https://127.0.0.1"));
        assert!(!origin("http://evil.example") && !origin("null") && !origin("file://localhost"));
    }

    /// Test owners by name: each a block of its own.
    impl OwnerGroups for &str {
        fn groups(&self) -> [Option<OwnerGroup>; 2] {
            [None, None]
        }
    }

    /// A full table closes a session of the network block holding the most, not one of
    /// the single session of a client elsewhere, however many addresses (/48s here) the
    /// block's sessions are spread over. By owner alone (as before), every owner held one
    /// and the one closed was any of them: as likely the lone client's.
    #[test]
    fn a_full_table_closes_a_session_of_the_block_that_holds_the_most_not_of_a_lone_client() {
        let start = std::time::Instant::now();
        let address = |text: &str| Some(SessionOwner::Address(client_address(text.parse().unwrap())));
        let mut table = SessionTable::<(), SessionOwner>::default();
        // The lone client's is the oldest session of all.
        table.insert("lone".into(), (), address("2001:db8:aaaa::1"), start);
        for i in 0..40_u64 {
            let owner = address(&format!("2001:db9:{i:x}::1"));
            table.insert(format!("spread{i}"), (), owner, start + Duration::from_secs(1 + i));
        }
        let newcomer = address("2001:db9:ffff::1");
        let closed = table.to_close(&newcomer, table.len(), MAX_SESSIONS_PER_ADDRESS).unwrap();
        assert_eq!(closed, "spread0", "the oldest of the biggest /48 of the biggest /32");
        // The same with IPv4: many addresses of one /24 against one elsewhere.
        let mut table = SessionTable::<(), SessionOwner>::default();
        table.insert("lone".into(), (), address("198.51.100.7"), start);
        for i in 0..40_u64 {
            table.insert(
                format!("spread{i}"),
                (),
                address(&format!("203.0.113.{i}")),
                start + Duration::from_secs(1),
            );
        }
        let closed =
            table.to_close(&address("203.0.113.200"), table.len(), MAX_SESSIONS_PER_ADDRESS).unwrap();
        assert!(closed.starts_with("spread"), "{closed}");
        // Blocks count what their owners hold: a caller holding more than a block is the one.
        let caller = Some(SessionOwner::Tenant(crate::auth::TenantId::new("acme")));
        for i in 0..50 {
            table.insert(format!("acme{i}"), (), caller.clone(), start + Duration::from_secs(2 + i));
        }
        let closed = table.to_close(&address("198.51.100.7"), table.len(), MAX_SESSIONS_PER_ADDRESS).unwrap();
        assert_eq!(closed, "acme0");
    }

    /// A tenant spreading its sessions over many callers, each under its own cap, is one
    /// holder to a full table: its newcomer closes one of its own, not one of another
    /// tenant's caller who holds more than any one of its callers. By caller alone (as
    /// before), the other tenant's caller was the biggest holder, closed again and again.
    #[test]
    fn a_full_table_closes_a_session_of_the_tenant_that_holds_the_most_not_of_its_biggest_caller() {
        let start = std::time::Instant::now();
        let (flooder, victim) = (TenantId::new("flood"), TenantId::new("victim"));
        let owner = |tenant: &TenantId, caller: &str| {
            SessionOwner::from_parts(Some(tenant), Some(&Caller::of_subject(caller)), None)
        };
        let mut table = SessionTable::<(), SessionOwner>::default();
        for i in 0..30_u64 {
            table.insert(format!("victim{i}"), (), owner(&victim, "service"), start + Duration::from_secs(i));
        }
        for caller in 0..10_u64 {
            for i in 0..5 {
                let used = start + Duration::from_secs(100 + caller * 10 + i);
                table.insert(format!("flood{caller}-{i}"), (), owner(&flooder, &format!("c{caller}")), used);
            }
        }
        let newcomer = owner(&flooder, "c99");
        let closed = table.to_close(&newcomer, table.len(), MAX_SESSIONS_PER_CALLER).unwrap();
        assert!(closed.starts_with("flood"), "the flooding tenant's newcomer closed {closed}");
        // Within the tenant, its caller holding the most (all hold five: the least recently used).
        assert_eq!(closed, "flood0-0");
    }

    #[test]
    fn an_owners_sessions_close_its_own_least_recently_used_and_a_full_table_the_largest_holders() {
        let start = std::time::Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        // s0 (acme) is the oldest of all; beta holds s1..s4, s1 its oldest; s5 has no owner.
        let mut table = SessionTable::<(), &str>::default();
        for (id, owner, used) in [
            ("s0", Some("acme"), 0),
            ("s2", Some("beta"), 2),
            ("s1", Some("beta"), 1),
            ("s3", Some("beta"), 3),
            ("s4", Some("beta"), 4),
            ("s5", None, 5),
        ] {
            table.insert(id.into(), (), owner, at(used));
        }
        let close = |table: &SessionTable<(), &str>, owner: Option<&'static str>, total, per_owner| {
            table.to_close(&owner, total, per_owner).cloned()
        };
        // Room for all: nothing closes.
        assert_eq!(close(&table, Some("beta"), 10, 10), None);
        // beta at its own cap: its own oldest, not acme's older one.
        assert_eq!(close(&table, Some("beta"), 10, 4).as_deref(), Some("s1"));
        // acme under its cap with the table full: the largest holder's (beta's) oldest.
        assert_eq!(close(&table, Some("acme"), 6, 4).as_deref(), Some("s1"));
        assert_eq!(close(&table, Some("acme"), 6, 1).as_deref(), Some("s0"), "acme at its cap: its own");
        // A session used again is no longer its owner's oldest.
        table.touch("s1", at(9));
        assert_eq!(close(&table, Some("beta"), 10, 4).as_deref(), Some("s2"));
        // Removed, it is forgotten in its owner's order too.
        assert_eq!(table.remove("s2"), Some(()));
        assert_eq!(close(&table, Some("beta"), 10, 3).as_deref(), Some("s3"));
        // Sessions of no owner: the oldest of those once the table is full; no cap of their own.
        let mut ownerless = SessionTable::<(), &str>::default();
        ownerless.insert("s0".into(), (), None, at(1));
        ownerless.insert("s1".into(), (), None, at(0));
        assert_eq!(close(&ownerless, None, 2, 1).as_deref(), Some("s1"));
        assert_eq!(close(&ownerless, None, 3, 1), None, "no cap per owner");
        // The idle go, and their owners' orders with them.
        let gone = table.remove_unless(|_, used| used >= at(4));
        assert_eq!((gone.len(), table.len()), (2, 3), "s0 and s3 idle");
        assert_eq!(close(&table, Some("acme"), 10, 1), None, "acme holds none now");
        assert!(table.by_owner.values().map(std::collections::BTreeSet::len).sum::<usize>() == table.len());
    }

    #[test]
    fn addresses_count_per_ipv4_and_per_ipv6_48() {
        let address = |text: &str| client_address(text.parse().unwrap());
        assert_eq!(address("2001:db8:1:2::1"), address("2001:db8:1:2:ffff::9"));
        assert_eq!(address("2001:db8:1:2::1"), address("2001:db8:1:ffff::1"), "one site's /64s are one");
        assert_ne!(address("2001:db8:1:2::1"), address("2001:db8:2:2::1"));
        assert_eq!(address("::ffff:10.0.0.1"), address("10.0.0.1"));
        assert_ne!(address("10.0.0.1"), address("10.0.0.2"));
    }

    const SLOTS_FREE: SlotsLeft = SlotsLeft { free: 100, total: 100 };

    #[test]
    fn an_address_gets_its_cap_and_its_entry_goes_with_its_last_connection() {
        let clients = Arc::new(Clients::default());
        let (one, other): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap());
        let tickets: Vec<_> =
            (0..3).map(|_| clients.enter(one, 3, 1, SLOTS_FREE).expect("under the cap")).collect();
        assert!(clients.enter(one, 3, 1, SLOTS_FREE).is_none(), "the fourth from one address is refused");
        let elsewhere = clients.enter(other, 3, 1, SLOTS_FREE).expect("another address is not affected");
        assert_eq!((clients.open(one), clients.open(other)), (3, 1));
        // One header slot per address, shared by its connections.
        let _half_open = tickets[0].header_slots.clone().try_acquire_owned().unwrap();
        assert!(tickets[1].header_slots.clone().try_acquire_owned().is_err());
        assert!(elsewhere.header_slots.clone().try_acquire_owned().is_ok());
        drop((tickets, elsewhere));
        assert!(clients.by_address.lock().unwrap().is_empty());
    }

    /// Once fewer than a quarter of the slots are free, an address holding an eighth of
    /// them is refused more; one holding less still gets in.
    #[test]
    fn an_address_holding_its_share_is_refused_when_slots_run_low() {
        let clients = Arc::new(Clients::default());
        let (heavy, light): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let plenty = SlotsLeft { free: 100, total: 100 };
        let low = SlotsLeft { free: 24, total: 100 };
        let held: Vec<_> = (0..12).map(|_| clients.enter(heavy, 50, 4, plenty).unwrap()).collect();
        assert!(clients.enter(heavy, 50, 4, SlotsLeft { free: 25, ..low }).is_some(), "a quarter free");
        assert!(clients.enter(heavy, 50, 4, low).is_none(), "13 of 100 held, under a quarter free");
        let others: Vec<_> = (0..12).map(|_| clients.enter(light, 50, 4, low).unwrap()).collect();
        assert!(clients.enter(light, 50, 4, low).is_none(), "its eighth reached");
        drop((held, others));
    }

    #[test]
    fn the_too_many_connections_answer_is_well_formed() {
        let text = std::str::from_utf8(TOO_MANY_CONNECTIONS).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 ") && head.contains("\r\nRetry-After: 1\r\n"));
        assert!(head.ends_with(&format!("\r\nContent-Length: {}", body.len())), "{head}");
        assert!(serde_json::from_str::<Value>(body).unwrap()["error"].is_string());
    }

    #[test]
    fn base64_header_values_are_decoded() {
        assert_eq!(decode_header("=?base64?w6ljaG8=?="), "écho");
        assert_eq!(decode_header("echo"), "echo");
    }
}
