//! # Auth: who is asking, as a step of the HTTP transport
//!
//! This module owns the tenants the operator configured ([`Tenants`], each a [`Tenant`]
//! with its view of the tools and its quotas) and turns a request's credentials into a
//! [`Principal`]: the tenant it acts for and the scopes it was granted. The HTTP transport
//! authenticates each request here before anything else of it is read; stdio names its
//! tenant on the command line. Dispatch receives the [`Tenant`] and never sees a header
//! or a token; nothing below dispatch knows that tokens exist.
//!
//! Credentials are API keys ([`api_keys`]) or OAuth 2.1 access tokens ([`oauth`]: JWTs
//! checked against the issuer's keys, [`jwks`], whose `tenant_claim` names the tenant);
//! both yield the same [`Principal`].
//!
//! A refusal is an [`AuthError`], answered 401 (or 403 for a missing scope) with a
//! `WWW-Authenticate: Bearer` challenge pointing at the protected resource metadata
//! (RFC 9728). No error, log line or metric ever holds a key or a token.

pub mod api_keys;
pub mod jwks;
pub mod oauth;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::TenantView;

pub use api_keys::ApiKeys;

/// A tenant's name, as the operator wrote it in `[[tenants]]` (checked by
/// [`crate::paths::safe_name`]: it names a data directory).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

impl TenantId {
    pub fn new(name: &str) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who within a tenant made a request: an OAuth token's subject (`sub`), the client a
/// token without one was issued to, or which API key.
/// What a caller is handed to bring back (a sealed `requestState`) is bound to it, so that
/// another caller of the same tenant who comes by it cannot use it. Never logged: an API
/// key's is the first half of the key's digest. Made for every request, so it is written
/// out ([`Caller::name`]) only when a state is sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    Key([u8; 16]),
    Subject(Arc<str>),
    /// A token's `client_id` (or `azp`), when it has no `sub`: issuers of
    /// client-credentials tokens often leave `sub` out. Apart from every subject, so a
    /// user whose `sub` reads `client:app` is not the client `app`.
    Client(Arc<str>),
}

impl Caller {
    /// The holder of the API key whose digest is `digest`.
    pub fn of_key(digest: &api_keys::KeyDigest) -> Self {
        Self::Key(digest[..16].try_into().expect("a digest has 32 bytes"))
    }

    /// The subject a token names.
    pub fn of_subject(subject: &str) -> Self {
        Self::Subject(subject.into())
    }

    /// The client a token without a subject was issued to.
    pub fn of_client(client: &str) -> Self {
        Self::Client(client.into())
    }

    /// `key:<hex>`, `sub:<subject>` or `client:<id>`: distinct for distinct callers.
    pub fn name(&self) -> String {
        match self {
            Self::Key(digest) => {
                let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
                format!("key:{hex}")
            }
            Self::Subject(subject) => format!("sub:{subject}"),
            Self::Client(client) => format!("client:{client}"),
        }
    }
}

/// Who a request acts for, once its credentials are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    /// Who within the tenant.
    pub caller: Caller,
    /// Scopes granted (an OAuth token's `scope`); empty for API keys, which grant the
    /// tenant's whole view.
    pub scopes: Vec<String>,
}

/// Why a request was not let in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authentication required: send `Authorization: Bearer <key>`")]
    Missing,
    /// The credential matched nothing (never says which part was wrong, nor echoes it).
    #[error("invalid credentials")]
    Invalid,
    #[error("credentials in the query string are refused: send `Authorization: Bearer <key>`")]
    InQuery,
    /// Two `Authorization` headers: a proxy and this server could each read another.
    #[error("send one Authorization header, not several")]
    Twice,
    #[error("the token lacks the scope {scope:?}")]
    InsufficientScope { scope: String },
}

impl AuthError {
    /// The HTTP status: 401 for credentials missing or wrong, 400 for credentials in the
    /// query (RFC 6750 §3.1, `invalid_request`), 403 for a missing scope.
    pub fn status(&self) -> u16 {
        match self {
            Self::InsufficientScope { .. } => 403,
            Self::InQuery | Self::Twice => 400,
            _ => 401,
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750 §3): with OAuth, pointing at the
    /// protected resource metadata published at `resource_metadata` (RFC 9728 §5.1);
    /// with API keys alone there is none to point at (a client sent to look would find a
    /// 404, and start an OAuth flow that cannot succeed), so a realm.
    pub fn challenge(&self, resource_metadata: Option<&str>) -> String {
        let base = match resource_metadata {
            Some(url) => format!("Bearer resource_metadata=\"{url}\""),
            None => "Bearer realm=\"mcp\"".to_owned(),
        };
        match self {
            Self::Missing => base,
            Self::Invalid => format!("{base}, error=\"invalid_token\""),
            Self::InQuery | Self::Twice => format!("{base}, error=\"invalid_request\""),
            Self::InsufficientScope { scope } => {
                format!("{base}, error=\"insufficient_scope\", scope=\"{scope}\"")
            }
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header value (the scheme is
/// case-insensitive, RFC 6750).
pub fn bearer_token(authorization: &[u8]) -> Option<&[u8]> {
    let space = authorization.iter().position(|byte| *byte == b' ')?;
    let (scheme, rest) = authorization.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Whether a query string carries a credential (`access_token`, `api_key`, `key`,
/// `token`): refused outright, since URLs end up in logs and histories.
pub fn query_has_credential(query: &str) -> bool {
    // Names as a server reading the query would take them: percent-decoded, any case.
    form_urlencoded::parse(query.as_bytes()).any(|(name, _)| {
        ["access_token", "api_key", "apikey", "key", "token"]
            .iter()
            .any(|known| name.eq_ignore_ascii_case(known))
    })
}

/// A configured tenant: what it may call, where its files are, its quotas.
#[derive(Debug)]
pub struct Tenant {
    pub id: TenantId,
    /// Its view of the tool set (its components) and its share of call slots.
    pub view: TenantView,
    /// Calls per second, refused at once over it.
    pub rate: Option<RateLimit>,
    /// What its requests hold of the server's shared bounds now (dispatch keeps each
    /// within the tenant's share).
    pub holds: TenantHolds,
}

/// A tenant's part of bounds every tenant shares.
#[derive(Debug, Default)]
pub struct TenantHolds {
    /// Bytes its requests hold on the server's admission ledger.
    pub request_bytes: Arc<AtomicUsize>,
    /// Its open `subscriptions/listen` streams.
    pub listen_streams: AtomicUsize,
    /// Bytes its sessions' subscriptions keep (also counted in `request_bytes`).
    pub subscribed_bytes: Arc<AtomicUsize>,
}

impl Tenant {
    pub fn new(id: TenantId, view: TenantView, calls_per_second: Option<u32>) -> Self {
        Self { id, view, rate: calls_per_second.map(RateLimit::new), holds: TenantHolds::default() }
    }

    /// Take one call from the tenant's rate; `Err` holds how long until one is free.
    pub fn admit_call(&self) -> Result<(), Duration> {
        match &self.rate {
            Some(rate) => rate.take(),
            None => Ok(()),
        }
    }
}

/// A token bucket: `per_second` calls a second, bursts of up to one second's worth.
#[derive(Debug)]
pub struct RateLimit {
    per_second: u32,
    /// (tokens left, when last refilled).
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimit {
    pub fn new(per_second: u32) -> Self {
        Self { per_second, bucket: Mutex::new((f64::from(per_second), Instant::now())) }
    }

    pub fn per_second(&self) -> u32 {
        self.per_second
    }

    /// Take a token, or how long until the next one.
    pub fn take(&self) -> Result<(), Duration> {
        let rate = f64::from(self.per_second.max(1));
        let mut bucket = self.bucket.lock().unwrap();
        let now = Instant::now();
        let (tokens, last) = *bucket;
        let tokens = (tokens + now.duration_since(last).as_secs_f64() * rate).min(rate);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            Ok(())
        } else {
            *bucket = (tokens, now);
            Err(Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }
}

/// The configured tenants, by name, and how to authenticate a request as one of them.
#[derive(Debug, Default)]
pub struct Tenants {
    by_name: HashMap<TenantId, Arc<Tenant>>,
    keys: ApiKeys,
}

impl Tenants {
    /// The API keys' fingerprint ([`ApiKeys::fingerprint`]).
    pub fn keys_fingerprint(&self) -> api_keys::KeyDigest {
        self.keys.fingerprint()
    }

    pub fn new(tenants: Vec<Tenant>, keys: ApiKeys) -> Self {
        Self {
            by_name: tenants.into_iter().map(|tenant| (tenant.id.clone(), Arc::new(tenant))).collect(),
            keys,
        }
    }

    /// Only the tenant called `name`, with no credentials: what a server of that one
    /// tenant (stdio's `--tenant`) serves, its bounds its own and not split with tenants it
    /// never serves.
    pub fn only(&self, name: &str) -> Option<Self> {
        let tenant = self.get(name)?.clone();
        Some(Self { by_name: HashMap::from([(tenant.id.clone(), tenant)]), keys: ApiKeys::default() })
    }

    /// Whether any tenant is configured: without, the server runs as one implicit tenant
    /// and asks for no credentials.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// How many tenants are configured.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// The configured tenant called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.by_name.get(&TenantId::new(name))
    }

    /// The tenant a principal acts for.
    pub fn of(&self, principal: &Principal) -> Option<&Arc<Tenant>> {
        self.by_name.get(&principal.tenant)
    }

    /// Every tenant's name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(TenantId::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Authenticate a request by its `Authorization` header value and its query string.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        query: Option<&str>,
    ) -> Result<Principal, AuthError> {
        if query.is_some_and(query_has_credential) {
            return Err(AuthError::InQuery);
        }
        let token = bearer_token(authorization.ok_or(AuthError::Missing)?).ok_or(AuthError::Missing)?;
        let (tenant, digest) = self.keys.holder_of(token).ok_or(AuthError::Invalid)?;
        Ok(Principal { tenant, caller: Caller::of_key(&digest), scopes: Vec::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_point_at_the_metadata_when_there_is_some() {
        let url = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";
        assert_eq!(AuthError::Missing.challenge(Some(url)), format!("Bearer resource_metadata=\"{url}\""));
        assert_eq!(AuthError::Missing.challenge(None), "Bearer realm=\"mcp\"");
        assert_eq!(AuthError::Missing.status(), 401);
        assert_eq!(AuthError::InQuery.status(), 400);
        assert!(AuthError::InQuery.challenge(None).ends_with("error=\"invalid_request\""));
        let scope = AuthError::InsufficientScope { scope: "tools".into() };
        assert_eq!(scope.status(), 403);
        assert!(scope.challenge(Some(url)).ends_with("error=\"insufficient_scope\", scope=\"tools\""));
    }

    #[test]
    fn bearer_tokens_are_read_and_query_credentials_seen() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert!(query_has_credential("a=1&access_token=x"));
        assert!(query_has_credential("api_key=x"));
        assert!(!query_has_credential("a=1&keys=2"));
        // As a server reading the query takes the names: any case, percent-decoded.
        assert!(query_has_credential("ACCESS_TOKEN=x"));
        assert!(query_has_credential("a=1&%61ccess_token=x"));
        assert!(query_has_credential("Token"));
    }

    #[test]
    fn the_rate_refuses_past_its_burst_and_says_when() {
        let rate = RateLimit::new(2);
        assert!(rate.take().is_ok() && rate.take().is_ok());
        let wait = rate.take().unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(500), "{wait:?}");
    }
}
