//! # OAuth 2.1 resource server (MCP authorization)
//!
//! Cordon accepts JWT access tokens issued by one authorization server (`[auth.oauth]`).
//! A token is taken only when, in this order:
//! 1. its header names an allowed asymmetric algorithm ([`ALLOWED_ALGORITHMS`]: RSA, ECDSA,
//!    EdDSA; never `none`, never HMAC, so a token "signed" with a public key as an HMAC
//!    secret fails before any key is looked at);
//!    and its `typ`, when it has one, is that of an access token or a plain JWT
//!    ([`is_access_token_type`]): an ID token, a logout or security event token, a DPoP
//!    proof, typed as such (RFC 8725 §3.11), is not taken for one even when it is signed
//!    by the issuer and names this server as its audience;
//! 2. the key its `kid` names is in the issuer's key set ([`super::jwks`]; an unknown `kid`
//!    makes the set be read again, rate-limited) and may verify that algorithm;
//! 3. the signature verifies;
//! 4. `iss` is the issuer, `aud` holds the audience (this server's canonical resource
//!    URI, RFC 8707), `exp` has not passed and `nbf` has, each time with [`LEEWAY`];
//! 5. `tenant_claim` is a non-empty string: the tenant the request acts for;
//! 6. its scopes (`scope`, space-separated, or `scp`, a list) hold every `required_scopes`.
//!
//! Failing 1–5 is [`TokenError::Invalid`] (HTTP 401 `invalid_token`), failing 6
//! [`TokenError::InsufficientScope`] (403). The reasons are fixed words: a token, a claim's
//! value or a key never appears in an error or the log.
//!
//! **Tokens already checked are remembered** ([`Checked`]): a client sends the same token
//! with every request for the token's lifetime, and checking its signature again costs
//! 30–40 µs (ES256, EdDSA with ring on the benchmark machine), against about a
//! microsecond for a lookup (BENCHMARKS.md, "Auth"). An entry is the whole token (so any
//! other byte is another token), is used only until the token's `exp` (plus the leeway)
//! and only while the key set it was checked against is still the one held; the number of
//! entries is bounded. Only tokens that passed 1–5 are remembered; the scopes are checked
//! on every request.
//!
//! The server also publishes its Protected Resource Metadata (RFC 9728,
//! [`OAuthSettings::resource_metadata`]), where a client learns which authorization server
//! issues tokens for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value, json};

use super::jwks::{JwksError, JwksSource, KeyCache, MIN_REFETCH_INTERVAL, REFRESH_INTERVAL};

/// The algorithms a token may be signed with: asymmetric only.
pub const ALLOWED_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How far `exp` and `nbf` may be off, for clocks that disagree a little.
pub const LEEWAY: Duration = Duration::from_secs(30);

/// `[auth.oauth]`, resolved.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// The authorization server: tokens' `iss`, and `authorization_servers` in the metadata.
    pub issuer: String,
    /// This server's canonical resource URI: tokens' `aud`, and `resource` in the metadata.
    pub audience: String,
    pub jwks: JwksSource,
    /// The claim that names the tenant.
    pub tenant_claim: String,
    pub required_scopes: Vec<String>,
    /// How often an unknown `kid` may make the key set be read again.
    pub min_refetch_interval: Duration,
    /// How often the key set is read again whatever tokens come (`jwks_refresh_secs`).
    pub refresh_interval: Duration,
}

impl OAuthSettings {
    pub fn new(
        issuer: String,
        audience: String,
        jwks: JwksSource,
        tenant_claim: String,
        required_scopes: Vec<String>,
    ) -> Self {
        Self {
            issuer,
            audience,
            jwks,
            tenant_claim,
            required_scopes,
            min_refetch_interval: MIN_REFETCH_INTERVAL,
            refresh_interval: REFRESH_INTERVAL,
        }
    }

    /// The Protected Resource Metadata document (RFC 9728 §2).
    pub fn resource_metadata(&self) -> Value {
        let mut document = json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        });
        if !self.required_scopes.is_empty() {
            document["scopes_supported"] = json!(self.required_scopes);
        }
        document
    }
}

/// What a valid token says about the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The tenant the request acts for (the `tenant_claim`'s value).
    pub tenant: String,
    /// Who the token was issued to (its `sub`, or without one its client): the caller
    /// within the tenant. A token that names neither is refused.
    pub caller: super::Caller,
    pub scopes: Vec<String>,
    /// Unix seconds after which the token is expired even with the [`LEEWAY`]: what was
    /// opened with it and has no end of its own (a listen stream) ends then.
    pub usable_until: u64,
}

/// Why a token was not taken. Fixed words only: never the token or a claim's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// 401 `invalid_token`.
    #[error("invalid token: {0}")]
    Invalid(&'static str),
    /// 403 `insufficient_scope`; `required` is the space-separated scopes to ask for.
    #[error("insufficient scope: the token needs {required}")]
    InsufficientScope { required: String },
}

/// At most this many checked tokens are remembered.
pub const MAX_CHECKED_TOKENS: usize = 4096;
/// Longer tokens are checked every time (remembering them would cost more memory than
/// the check costs time).
const MAX_REMEMBERED_TOKEN_BYTES: usize = 4096;

/// Tokens that passed every check but the scopes, with what they said.
#[derive(Default)]
struct Checked {
    tokens: std::sync::RwLock<HashMap<Box<str>, Remembered>>,
}

struct Remembered {
    claims: Claims,
    /// The key set it was checked against ([`KeyCache::generation`]).
    generation: u64,
}

impl Checked {
    fn get(&self, token: &str, generation: u64, now: u64) -> Option<Claims> {
        let tokens = self.tokens.read().unwrap();
        let remembered = tokens.get(token)?;
        (remembered.generation == generation && now <= remembered.claims.usable_until)
            .then(|| remembered.claims.clone())
    }

    fn remember(&self, token: &str, remembered: Remembered, now: u64) {
        if token.len() > MAX_REMEMBERED_TOKEN_BYTES {
            return;
        }
        let mut tokens = self.tokens.write().unwrap();
        if tokens.len() >= MAX_CHECKED_TOKENS {
            tokens.retain(|_, entry| {
                now <= entry.claims.usable_until && entry.generation == remembered.generation
            });
            if tokens.len() >= MAX_CHECKED_TOKENS {
                // Many live tokens at once: start over rather than track their age.
                tokens.clear();
            }
        }
        tokens.insert(token.into(), remembered);
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// Checks tokens against one issuer's settings and keys.
pub struct Validator {
    settings: OAuthSettings,
    keys: Arc<KeyCache>,
    checked: Checked,
    /// One prepared `Validation` per allowed algorithm, so a request builds none.
    validations: HashMap<Algorithm, Validation>,
    required_scopes: String,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the remembered tokens.
        f.debug_struct("Validator").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Validator {
    /// Read the key set (see [`KeyCache::start`]) and prepare the checks.
    pub async fn start(settings: OAuthSettings) -> Result<Arc<Self>, JwksError> {
        let keys = Arc::new(KeyCache::start(settings.jwks.clone(), settings.min_refetch_interval).await?);
        keys.refresh_every(settings.refresh_interval);
        let validations = ALLOWED_ALGORITHMS
            .iter()
            .map(|&algorithm| {
                let mut validation = Validation::new(algorithm);
                validation.leeway = LEEWAY.as_secs();
                validation.validate_nbf = true;
                validation.set_issuer(&[&settings.issuer]);
                validation.set_audience(&[&settings.audience]);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
                (algorithm, validation)
            })
            .collect();
        let required_scopes = settings.required_scopes.join(" ");
        Ok(Arc::new(Self { settings, keys, checked: Checked::default(), validations, required_scopes }))
    }

    pub fn settings(&self) -> &OAuthSettings {
        &self.settings
    }

    /// The issuer's key set, for what it has been asked.
    pub fn keys(&self) -> &KeyCache {
        &self.keys
    }

    /// Check a bearer token (the text after `Bearer `).
    pub async fn validate(&self, token: &str) -> Result<Claims, TokenError> {
        let now = unix_now();
        let claims = match self.checked.get(token, self.keys.generation(), now) {
            Some(claims) => claims,
            None => self.check(token, now).await?,
        };
        if !self.settings.required_scopes.iter().all(|needed| claims.scopes.contains(needed)) {
            return Err(TokenError::InsufficientScope { required: self.required_scopes.clone() });
        }
        Ok(claims)
    }

    /// Steps 1–5 of the module's list, remembering a token that passes them.
    async fn check(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        // The set the key comes from: read before the lookup, so that a token checked
        // against a set replaced meanwhile is remembered under the older generation.
        let generation = self.keys.generation();
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| TokenError::Invalid("not a JWT with a known algorithm"))?;
        let Some(validation) = self.validations.get(&header.alg) else {
            return Err(TokenError::Invalid("algorithm not allowed"));
        };
        if !header.typ.as_deref().is_none_or(is_access_token_type) {
            return Err(TokenError::Invalid("typed as another kind of token"));
        }
        let key = self
            .keys
            .key(header.kid.as_deref())
            .await
            .ok_or(TokenError::Invalid("signed with an unknown key"))?;
        if !key.algorithms.contains(&header.alg) {
            return Err(TokenError::Invalid("algorithm not allowed for its key"));
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, validation)
            .map_err(|error| TokenError::Invalid(reason(error.kind())))?;
        let claims = data.claims;
        // jsonwebtoken checks an `nbf` it can read as a u64 (a non-negative integer, or a
        // float it rounds) and takes any other as absent: a token post-dated with
        // `"nbf": "2000000000"`, or `1e20`, would be good at once. (A negative one is in
        // the past, and refused too: a NumericDate here is never before 1970.)
        let readable = |nbf: &Value| {
            nbf.as_u64().is_some()
                || nbf.as_f64().is_some_and(|nbf| nbf.is_finite() && (0.0..1e18).contains(&nbf))
        };
        if claims.get("nbf").is_some_and(|nbf| !readable(nbf)) {
            return Err(TokenError::Invalid("nbf is not a NumericDate"));
        }
        let tenant = match claims.get(&self.settings.tenant_claim) {
            Some(Value::String(tenant)) if !tenant.is_empty() => tenant.clone(),
            _ => return Err(TokenError::Invalid("no tenant claim")),
        };
        // `exp` passed its check, so it is a number; a fractional one counts by its seconds.
        let expires = claims.get("exp").and_then(|exp| exp.as_u64().or(exp.as_f64().map(|exp| exp as u64)));
        let expires = expires.unwrap_or(0);
        let usable_until = expires.saturating_add(LEEWAY.as_secs());
        // A token that names no one would share its sessions and request states with every
        // other such token of its tenant.
        let Some(caller) = caller(&claims) else {
            return Err(TokenError::Invalid("names no caller (sub, client_id or azp)"));
        };
        let checked = Claims { tenant, caller, scopes: scopes(&claims), usable_until };
        self.checked.remember(token, Remembered { claims: checked.clone(), generation }, now);
        Ok(checked)
    }
}

/// Whether a JWT header's `typ` may be an access token's: `at+jwt` (RFC 9068), or `JWT`,
/// which many issuers still put on theirs. A media type, so compared without case and with
/// or without its `application/` prefix (RFC 7515 §4.1.9).
fn is_access_token_type(typ: &str) -> bool {
    let typ = typ
        .get(..12)
        .filter(|prefix| prefix.eq_ignore_ascii_case("application/"))
        .map_or(typ, |_| &typ[12..]);
    typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("jwt")
}

/// Who a token was issued to: its `sub`, when a non-empty string; without one, the client
/// it was issued to (`client_id`, RFC 9068, or `azp`): issuers of client-credentials
/// tokens often leave `sub` out, and the clients of a tenant must not all be one caller
/// (each may take back only the request states it was given). The two are kept apart
/// ([`super::Caller::Client`]). Anything else names no one, and is refused.
fn caller(claims: &Map<String, Value>) -> Option<super::Caller> {
    let text = |name: &str| match claims.get(name) {
        Some(Value::String(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    };
    if let Some(subject) = text("sub") {
        return Some(super::Caller::of_subject(subject));
    }
    text("client_id").or_else(|| text("azp")).map(super::Caller::of_client)
}

/// A token's scopes: `scope` (RFC 9068, space-separated) or `scp` (a list, as some issuers
/// write it).
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(scope)), _) => {
            scope.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect()
        }
        (_, Some(Value::Array(list))) => list.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        (_, Some(Value::String(scp))) => {
            scp.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect()
        }
        _ => Vec::new(),
    }
}

fn reason(kind: &jsonwebtoken::errors::ErrorKind) -> &'static str {
    use jsonwebtoken::errors::ErrorKind;
    match kind {
        ErrorKind::InvalidSignature => "bad signature",
        ErrorKind::ExpiredSignature => "expired",
        ErrorKind::ImmatureSignature => "not yet valid",
        ErrorKind::InvalidIssuer => "wrong issuer",
        ErrorKind::InvalidAudience => "wrong audience",
        ErrorKind::MissingRequiredClaim(_) => "a required claim is missing",
        ErrorKind::InvalidAlgorithm => "algorithm not allowed for its key",
        _ => "malformed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_token_types_are_at_jwt_or_jwt_in_any_case_with_or_without_the_prefix() {
        for typ in
            ["at+jwt", "AT+JWT", "application/at+jwt", "Application/At+JWT", "JWT", "jwt", "application/jwt"]
        {
            assert!(is_access_token_type(typ), "{typ}");
        }
        for typ in
            ["", "application/", "id_token+jwt", "logout+jwt", "secevent+jwt", "dpop+jwt", "JOSE", "at+jwt "]
        {
            assert!(!is_access_token_type(typ), "{typ}");
        }
    }

    #[test]
    fn scopes_are_read_from_scope_or_scp() {
        let claims = |value: Value| value.as_object().unwrap().clone();
        assert_eq!(scopes(&claims(json!({"scope": "tools  read"}))), ["tools", "read"]);
        assert_eq!(scopes(&claims(json!({"scp": ["tools", "read"]}))), ["tools", "read"]);
        assert!(scopes(&claims(json!({}))).is_empty());
    }

    #[test]
    fn the_caller_is_a_non_empty_sub_string_or_else_the_client() {
        use super::super::Caller;
        let claims = |value: Value| value.as_object().unwrap().clone();
        let name = |value: Value| caller(&claims(value)).map(|caller| caller.name());
        assert_eq!(name(json!({"sub": "user-1"})).as_deref(), Some("sub:user-1"));
        assert_eq!(name(json!({"sub": "user-1", "client_id": "app"})).as_deref(), Some("sub:user-1"));
        assert_eq!(caller(&claims(json!({"client_id": "app"}))), Some(Caller::of_client("app")));
        assert_eq!(name(json!({"sub": "", "azp": "web"})).as_deref(), Some("client:web"));
        // A user who picked the `sub` `client:app` is not the client `app`.
        assert_ne!(
            caller(&claims(json!({"sub": "client:app"}))),
            caller(&claims(json!({"client_id": "app"})))
        );
        for nobody in
            [json!({"sub": ""}), json!({"sub": 7}), json!({"sub": ["a"]}), json!({"client_id": 1}), json!({})]
        {
            assert_eq!(caller(&claims(nobody.clone())), None, "{nobody}");
        }
    }

    #[test]
    fn the_metadata_names_the_resource_and_its_issuer() {
        let settings = OAuthSettings::new(
            "https://idp.example.com".into(),
            "https://mcp.example.com/mcp".into(),
            JwksSource::File("jwks.json".into()),
            "org".into(),
            vec!["tools".into()],
        );
        let document = settings.resource_metadata();
        assert_eq!(document["resource"], "https://mcp.example.com/mcp");
        assert_eq!(document["authorization_servers"], json!(["https://idp.example.com"]));
        assert_eq!(document["scopes_supported"], json!(["tools"]));
    }

    #[test]
    fn errors_are_fixed_words() {
        let error = TokenError::InsufficientScope { required: "tools".into() };
        assert_eq!(error.to_string(), "insufficient scope: the token needs tools");
        assert_eq!(TokenError::Invalid("expired").to_string(), "invalid token: expired");
    }
}
