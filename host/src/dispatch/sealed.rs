//! # Sealed `requestState` (MRTR, 2026-07-28)
//!
//! What a guest hands out between rounds travels through the client, so the client sees
//! only a sealed box: [`Sealer::seal`] wraps the guest's state with what it is valid for
//! ([`Binding`]: the component and tool or prompt, the tenant and the caller within it (an
//! OAuth token's subject, or which API key: [`crate::auth::Caller`]), a SHA-256
//! fingerprint of the arguments), the round number, the keys asked and an expiry, and encrypts and
//! authenticates it all with XChaCha20-Poly1305 (a random 24-byte nonce per seal, so one
//! key seals any number of states) into base64url. [`Sealer::open`] refuses a state that
//! was changed, sealed under another key, expired, or sealed for another binding, each
//! with its own message; the guest never sees a state that failed. Any replica that has
//! the same key opens what another sealed: the server keeps nothing between rounds.
//!
//! The key comes from `CORDON_REQUEST_STATE_KEY` or the config's `[server]
//! request_state_key` (64 hex digits; the environment wins); without either, a random key
//! per process, which only that process can open ([`Sealer::from_settings`] says so once).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::auth::Caller;

/// The environment variable that holds the key (64 hex digits), ahead of the config's.
pub const KEY_VARIABLE: &str = "CORDON_REQUEST_STATE_KEY";
/// How long a sealed state stays valid unless configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
/// The longest a sealed state may be (base64url of the sealed bytes): past it, a state is
/// refused unread.
pub const MAX_SEALED_LEN: usize = 64 * 1024;

/// Bound into every seal, so that a box sealed for one thing opens for nothing else.
const ASSOCIATED_DATA: &[u8] = b"cordon requestState v1";
const NONCE_LEN: usize = 24;

/// Why a key could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "{origin}: a request state key is 64 hexadecimal digits (32 bytes), e.g. from `openssl rand -hex 32`"
)]
pub struct KeyError {
    origin: &'static str,
}

/// Where the key came from, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    Environment,
    Config,
    /// Random, for this process only.
    Random,
}

/// Seals and opens request states with one key.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
    ttl: Duration,
    source: KeySource,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("ttl", &self.ttl).field("source", &self.source).finish_non_exhaustive()
    }
}

/// Who a state is sealed for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holder<'a> {
    /// The tenant (none: the one implicit tenant).
    pub tenant: Option<&'a str>,
    /// The caller within it (none: not known, as over stdio).
    pub caller: Option<&'a Caller>,
}

/// What a sealed state is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The component that serves the request.
    pub component: String,
    /// `tools/call <tool>` or `prompts/get <prompt>`.
    pub target: String,
    /// The tenant that made the request (none: the one implicit tenant).
    pub tenant: Option<String>,
    /// Who within the tenant made it. Absent from states sealed before it was bound,
    /// which so open only for a caller that is not known either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// SHA-256 of the arguments as canonical JSON (keys sorted), hex.
    pub arguments: String,
}

impl Binding {
    pub fn new(component: &str, target: String, holder: Holder<'_>, arguments: &serde_json::Value) -> Self {
        // serde_json's map is ordered by key: the same arguments give the same text.
        let arguments = format!("{:x}", Sha256::digest(arguments.to_string().as_bytes()));
        Self {
            component: component.to_owned(),
            target,
            tenant: holder.tenant.map(str::to_owned),
            caller: holder.caller.map(Caller::name),
            arguments,
        }
    }
}

/// What a sealed state holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    pub binding: Binding,
    /// The round that handed it out (1 for the first).
    pub round: u32,
    /// The keys that round asked.
    pub keys: Vec<String>,
    /// The guest's own state, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "bytes")]
    pub state: Option<Vec<u8>>,
    /// The last cleanup note the call left, base64url: a later round starts with it, so
    /// that its cleanup sees what an earlier round noted (the WIT: "the last note the call
    /// left"). Absent in states sealed before notes were carried.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "bytes")]
    pub note: Option<Vec<u8>>,
    /// Unix seconds after which it is refused.
    expires: u64,
}

/// Why a request state was refused; each message is the client's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("requestState is malformed (not one this server issued)")]
    Malformed,
    #[error(
        "requestState failed its integrity check: it was changed, or sealed by a server with another key"
    )]
    Tampered,
    #[error("requestState has expired: start the request again without it")]
    Expired,
    #[error("requestState was issued for {issued}, not for {asked}")]
    Foreign { issued: String, asked: String },
    #[error("requestState was issued for other arguments: retry with the original arguments")]
    OtherArguments,
    #[error("requestState was issued to another tenant")]
    OtherTenant,
    #[error(
        "requestState was issued to another caller (another token subject or API key): start the request again without it"
    )]
    OtherCaller,
}

impl Sealer {
    /// A sealer with `key` (32 bytes).
    pub fn new(key: [u8; 32], ttl: Duration, source: KeySource) -> Self {
        Self { cipher: XChaCha20Poly1305::new(&key.into()), ttl, source }
    }

    /// The key from the environment (`CORDON_REQUEST_STATE_KEY`), else `configured` (the
    /// config's `request_state_key`), else a random one.
    pub fn from_settings(configured: Option<&str>, ttl: Duration) -> Result<Self, KeyError> {
        let from_env = std::env::var(KEY_VARIABLE).ok().filter(|value| !value.trim().is_empty());
        let (key, source) = match (from_env, configured) {
            (Some(text), _) => {
                (parse_key(&text).ok_or(KeyError { origin: KEY_VARIABLE })?, KeySource::Environment)
            }
            (None, Some(text)) => {
                (parse_key(text).ok_or(KeyError { origin: "[server] request_state_key" })?, KeySource::Config)
            }
            (None, None) => (XChaCha20Poly1305::generate_key(&mut OsRng).into(), KeySource::Random),
        };
        Ok(Self::new(key, ttl, source))
    }

    /// A sealer with a random key and the default expiry (tests, `cordon call`).
    pub fn random() -> Self {
        Self::new(XChaCha20Poly1305::generate_key(&mut OsRng).into(), DEFAULT_TTL, KeySource::Random)
    }

    pub fn source(&self) -> KeySource {
        self.source
    }

    /// Seal `state` for `binding`, handed out by round `round` that asked `keys`.
    pub fn seal(
        &self,
        binding: Binding,
        round: u32,
        keys: Vec<String>,
        state: Option<Vec<u8>>,
        note: Option<Vec<u8>>,
    ) -> String {
        let expires = unix_now().saturating_add(self.ttl.as_secs().max(1));
        let opened = Opened { binding, round, keys, state, note, expires };
        let plaintext = serde_json::to_vec(&opened).expect("a state serializes");
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: &plaintext, aad: ASSOCIATED_DATA })
            .expect("XChaCha20-Poly1305 seals any length a state has");
        let mut bytes = Vec::with_capacity(NONCE_LEN + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Open `sealed`, which must have been sealed by this key for `binding` and not have
    /// expired.
    pub fn open(&self, sealed: &str, binding: &Binding) -> Result<Opened, Refused> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(Refused::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD.decode(sealed).map_err(|_| Refused::Tampered)?;
        if bytes.len() <= NONCE_LEN {
            return Err(Refused::Malformed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let plaintext = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad: ASSOCIATED_DATA })
            .map_err(|_| Refused::Tampered)?;
        let opened: Opened = serde_json::from_slice(&plaintext).map_err(|_| Refused::Malformed)?;
        if opened.expires < unix_now() {
            return Err(Refused::Expired);
        }
        let issued = &opened.binding;
        // Whose it is first: a state's holder may learn what it was issued for (the
        // target, in `Foreign`), another tenant's or caller's who came by it may not.
        if issued.tenant != binding.tenant {
            return Err(Refused::OtherTenant);
        }
        if issued.caller != binding.caller {
            return Err(Refused::OtherCaller);
        }
        if issued.component != binding.component || issued.target != binding.target {
            return Err(Refused::Foreign { issued: issued.target.clone(), asked: binding.target.clone() });
        }
        if issued.arguments != binding.arguments {
            return Err(Refused::OtherArguments);
        }
        Ok(opened)
    }
}

fn parse_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut key = [0; 32];
    for (byte, pair) in key.iter_mut().zip(text.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// Bytes as base64url text inside the sealed JSON.
mod bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, serializer: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => serializer.serialize_str(&URL_SAFE_NO_PAD.encode(bytes)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        text.map(|text| URL_SAFE_NO_PAD.decode(text).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(target: &str, tenant: Option<&str>, arguments: serde_json::Value) -> Binding {
        Binding::new(
            "tools",
            target.to_owned(),
            Holder { tenant, caller: Some(&Caller::Key([1; 16])) },
            &arguments,
        )
    }

    /// A state sealed by another replica, or by this server before an upgrade, binds the
    /// arguments by this exact text: SHA-256 of their canonical JSON, 64 lowercase hex digits.
    #[test]
    fn the_arguments_are_bound_by_the_hex_sha256_of_their_canonical_json() {
        // `printf '{"a":2,"b":"x"}' | sha256sum` (its byte 0x03 needs a leading zero)
        assert_eq!(
            binding("tools/call echo", None, serde_json::json!({"b": "x", "a": 2})).arguments,
            "e5a71045b6b297a5ba41ee2a7551269c2ef5e7b0d5b1032456e17b6b7b373db5"
        );
    }

    #[test]
    fn a_state_opens_only_as_sealed_and_for_what_it_was_sealed_for() {
        let sealer = Sealer::random();
        let bound = binding("tools/call delete", Some("acme"), serde_json::json!({"b": 1, "a": 2}));
        let note = Some(b"reserved 42".to_vec());
        let sealed =
            sealer.seal(bound.clone(), 1, vec!["confirm".into()], Some(b"mine".to_vec()), note.clone());
        let opened = sealer.open(&sealed, &bound).unwrap();
        assert_eq!(
            (opened.round, opened.keys, opened.state, opened.note),
            (1, vec!["confirm".to_owned()], Some(b"mine".to_vec()), note)
        );
        // The same arguments in another order are the same arguments.
        let reordered = binding("tools/call delete", Some("acme"), serde_json::json!({"a": 2, "b": 1}));
        assert!(sealer.open(&sealed, &reordered).is_ok());

        let mut changed = sealed.clone().into_bytes();
        let last = changed.len() - 5;
        changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(sealer.open(std::str::from_utf8(&changed).unwrap(), &bound), Err(Refused::Tampered));
        assert_eq!(sealer.open(&format!("{sealed}-TAMPERED"), &bound), Err(Refused::Tampered));
        assert_eq!(sealer.open("", &bound), Err(Refused::Malformed));
        assert_eq!(Sealer::random().open(&sealed, &bound), Err(Refused::Tampered));
        let other_tool = binding("tools/call echo", Some("acme"), serde_json::json!({"b": 1, "a": 2}));
        assert!(matches!(sealer.open(&sealed, &other_tool), Err(Refused::Foreign { .. })));
        let other_tenant = binding("tools/call delete", Some("other"), serde_json::json!({"b": 1, "a": 2}));
        assert_eq!(sealer.open(&sealed, &other_tenant), Err(Refused::OtherTenant));
        // Another tenant's, asking another tool, is told no more: not what it was for.
        let other_tenant_tool = binding("tools/call echo", Some("other"), serde_json::json!({}));
        assert_eq!(sealer.open(&sealed, &other_tenant_tool), Err(Refused::OtherTenant));
        let other_arguments = binding("tools/call delete", Some("acme"), serde_json::json!({"b": 2, "a": 2}));
        assert_eq!(sealer.open(&sealed, &other_arguments), Err(Refused::OtherArguments));
        let mut other_caller = bound.clone();
        other_caller.caller = Some(Caller::Key([2; 16]).name());
        assert_eq!(sealer.open(&sealed, &other_caller), Err(Refused::OtherCaller));
        other_caller.caller = None;
        assert_eq!(
            sealer.open(&sealed, &other_caller),
            Err(Refused::OtherCaller),
            "an unknown caller is another"
        );
    }

    /// A state sealed before callers were bound (no `caller` in it) still opens where the
    /// caller is not known, and only there.
    #[test]
    fn a_state_sealed_without_a_caller_opens_only_for_no_caller() {
        let sealer = Sealer::random();
        let arguments = serde_json::json!({"a": 1});
        let unbound = Binding::new(
            "tools",
            "tools/call t".into(),
            Holder { tenant: Some("acme"), caller: None },
            &arguments,
        );
        let text = serde_json::to_string(&unbound).unwrap();
        assert!(!text.contains("caller"), "no caller is written as none: {text}");
        let sealed = sealer.seal(unbound.clone(), 1, Vec::new(), None, None);
        assert!(sealer.open(&sealed, &unbound).is_ok());
        let known = Binding::new(
            "tools",
            "tools/call t".into(),
            Holder { tenant: Some("acme"), caller: Some(&Caller::of_subject("u")) },
            &arguments,
        );
        assert_eq!(sealer.open(&sealed, &known), Err(Refused::OtherCaller));
    }

    #[test]
    fn keys_are_64_hex_digits() {
        assert_eq!(parse_key(&"ab".repeat(32)), Some([0xab; 32]));
        assert_eq!(parse_key(&"ab".repeat(31)), None);
        assert_eq!(parse_key(&"zz".repeat(32)), None);
        assert!(Sealer::from_settings(Some("short"), DEFAULT_TTL).is_err());
    }
}
