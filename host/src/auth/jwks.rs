//! # An issuer's signing keys (JWKS): fetched, parsed, cached, refreshed on rotation
//!
//! The key set comes from a URL (fetched by the host, bounded in size and time) or a file.
//! It is read at startup and kept; a token naming a key id the set does not hold makes
//! the set be read again (the issuer rotated its keys), at most once per
//! `min_refetch_interval` however many such tokens arrive, so that made-up key ids cannot
//! turn the server into a load generator against the issuer. It is also read again every
//! `refresh_interval` ([`KeyCache::refresh_every`]), so that a key the issuer withdrew
//! (compromised, say) stops being trusted without a token of a new key to trigger a read.
//! A read that fails keeps the keys held (an issuer that cannot be reached does not lock
//! every client out), so a withdrawn key is trusted until a read succeeds.
//!
//! Only asymmetric keys are kept (RSA, EC, OKP): an `oct` (shared secret) entry is dropped,
//! so a token can never be checked with HMAC.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio_rustls::rustls;

/// The largest key set read (bytes): a few dozen keys fit in a small fraction of it.
pub const MAX_JWKS_BYTES: usize = 256 << 10;
/// How long fetching the key set may take, connection and body together.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an unknown key id may make the set be read again.
pub const MIN_REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// How often the set is read again whatever tokens come, unless configured.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(600);
/// The longest `refresh_interval` may be: a day.
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(86_400);

/// Where the key set is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// `https://…`, or `http://` to a loopback address (see [`JwksSource::url`]).
    Url(http::Uri),
    File(PathBuf),
}

/// Why the key set could not be read. Messages name the source, never a key.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error(
        "the JWKS URL {0:?} is not an https:// URL (http:// is accepted only for a loopback address, with a loopback issuer)"
    )]
    Scheme(String),
    #[error("the JWKS URL {0:?} is not a valid URL")]
    BadUrl(String),
    #[error("reading the JWKS file {path}: {error}")]
    File { path: PathBuf, error: std::io::Error },
    #[error("the JWKS file {0} is larger than {MAX_JWKS_BYTES} bytes")]
    FileTooLarge(PathBuf),
    #[error("fetching the JWKS from {url}: {reason}")]
    Fetch { url: String, reason: String },
    #[error("the JWKS from {source_name} is not a JSON Web Key Set: {error}")]
    Parse { source_name: String, error: serde_json::Error },
    #[error("the JWKS from {0} holds no RSA, EC or OKP signing key")]
    NoKeys(String),
}

impl JwksSource {
    /// A JWKS URL. `https://` always; `http://` only to a loopback address (`127.0.0.0/8`,
    /// `::1`, `localhost`) and only when the issuer is loopback too: a test or a sidecar
    /// issuer on the same machine, where there is no network for TLS to protect.
    pub fn url(url: &str, issuer_is_loopback: bool) -> Result<Self, JwksError> {
        let uri: http::Uri = url.parse().map_err(|_| JwksError::BadUrl(url.to_owned()))?;
        let host = uri.host().ok_or_else(|| JwksError::BadUrl(url.to_owned()))?;
        match uri.scheme_str() {
            Some("https") => Ok(Self::Url(uri)),
            Some("http") if issuer_is_loopback && is_loopback_host(host) => Ok(Self::Url(uri)),
            _ => Err(JwksError::Scheme(url.to_owned())),
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Url(uri) => uri.to_string(),
            Self::File(path) => path.display().to_string(),
        }
    }

    /// Read the key set's bytes.
    async fn read(&self) -> Result<Vec<u8>, JwksError> {
        match self {
            Self::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_file(path))
                    .await
                    .expect("reading a file does not panic")
            }
            Self::Url(uri) => {
                let failed = |reason: String| JwksError::Fetch { url: uri.to_string(), reason };
                match tokio::time::timeout(FETCH_TIMEOUT, fetch(uri)).await {
                    Ok(result) => result.map_err(failed),
                    Err(_) => Err(failed(format!("no answer within {FETCH_TIMEOUT:?}"))),
                }
            }
        }
    }
}

/// A key-set file, at most [`MAX_JWKS_BYTES`].
fn read_file(path: PathBuf) -> Result<Vec<u8>, JwksError> {
    use std::io::Read;
    let file = std::fs::File::open(&path).map_err(|error| JwksError::File { path: path.clone(), error })?;
    let mut bytes = Vec::new();
    file.take(MAX_JWKS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| JwksError::File { path: path.clone(), error })?;
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(JwksError::FileTooLarge(path));
    }
    Ok(bytes)
}

/// Whether a URL's host is the local machine: a loopback IP literal or `localhost`.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost") || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// GET `uri` once, over TLS with the web's roots for `https`; the body at most
/// [`MAX_JWKS_BYTES`].
async fn fetch(uri: &http::Uri) -> Result<Vec<u8>, String> {
    let host = uri.host().expect("checked when the source was made");
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((bare_host, port)).await.map_err(|error| error.to_string())?;
    let _ = tcp.set_nodelay(true);
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    let request = http::Request::get(path)
        .header(http::header::HOST, uri.authority().expect("has a host").as_str())
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, concat!("cordon/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|error| error.to_string())?;
    let response = if https {
        let name = rustls::pki_types::ServerName::try_from(bare_host.to_owned())
            .map_err(|error| error.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(crate::runtime::web_tls_client_config())
            .connect(name, tcp)
            .await
            .map_err(|error| error.to_string())?;
        send(hyper_util::rt::TokioIo::new(tls), request).await?
    } else {
        send(hyper_util::rt::TokioIo::new(tcp), request).await?
    };
    if response.status() != http::StatusCode::OK {
        return Err(format!("answered {}", response.status()));
    }
    let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
        .collect()
        .await
        .map_err(|error| format!("reading the body: {error}"))?;
    Ok(body.to_bytes().to_vec())
}

async fn send<I>(
    io: I,
    request: http::Request<Empty<bytes::Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|error| error.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(request).await.map_err(|error| error.to_string())
}

/// One verification key.
pub struct Key {
    pub decoding: DecodingKey,
    /// The algorithms this key may verify: its family's, narrowed to its `alg` when set.
    pub algorithms: Vec<Algorithm>,
}

/// A parsed key set: keys by id; a key without an id is found only when it is the only key.
#[derive(Default)]
pub struct KeySet {
    by_id: HashMap<String, Arc<Key>>,
    sole: Option<Arc<Key>>,
}

impl KeySet {
    /// Parse a JWKS document, keeping its asymmetric signing keys. Each key is read on its
    /// own: one of a type, curve or algorithm this server does not know (an X25519
    /// encryption key, an `ES512` key) is skipped, not the whole set. Before, such a key
    /// made the set unreadable: its rotations were never learned, and a withdrawn key
    /// stayed trusted.
    pub fn parse(bytes: &[u8], source_name: &str) -> Result<Self, JwksError> {
        /// The document's shape: the keys are read one by one.
        #[derive(serde::Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let document: Document = serde_json::from_slice(bytes)
            .map_err(|error| JwksError::Parse { source_name: source_name.to_owned(), error })?;
        let mut keys = Self::default();
        let mut count = 0;
        for value in document.keys {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else { continue };
            let jwk = &jwk;
            let Some(key) = signing_key(jwk) else { continue };
            let key = Arc::new(key);
            count += 1;
            keys.sole = Some(key.clone());
            if let Some(id) = &jwk.common.key_id {
                keys.by_id.insert(id.clone(), key);
            }
        }
        if count == 0 {
            return Err(JwksError::NoKeys(source_name.to_owned()));
        }
        if count > 1 {
            keys.sole = None;
        }
        Ok(keys)
    }

    /// The key a token's `kid` names (or the only key, for a token without one).
    pub fn find(&self, kid: Option<&str>) -> Option<Arc<Key>> {
        match kid {
            Some(kid) => self.by_id.get(kid).cloned(),
            None => self.sole.clone(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len().max(usize::from(self.sole.is_some()))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A JWK as a verification key, unless it is a secret, meant for encryption, or unusable.
fn signing_key(jwk: &Jwk) -> Option<Key> {
    use jsonwebtoken::jwk::PublicKeyUse;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let family: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            jsonwebtoken::jwk::EllipticCurve::P256 => &[Algorithm::ES256],
            jsonwebtoken::jwk::EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(_) => &[Algorithm::EdDSA],
        // A shared secret: never a way to check a token here.
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let algorithms: Vec<Algorithm> = match jwk.common.key_algorithm {
        None => family.to_vec(),
        Some(named) => family.iter().copied().filter(|alg| same_algorithm(*alg, named)).collect(),
    };
    if algorithms.is_empty() {
        return None;
    }
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { decoding, algorithms })
}

fn same_algorithm(alg: Algorithm, named: KeyAlgorithm) -> bool {
    format!("{alg:?}") == format!("{named:?}")
}

/// The current key set, and when it may next be read again.
pub struct KeyCache {
    source: JwksSource,
    current: RwLock<Arc<KeySet>>,
    /// Held while the set is read again; the time of the last read.
    refetch: tokio::sync::Mutex<Option<Instant>>,
    min_refetch_interval: Duration,
    fetches: std::sync::atomic::AtomicU64,
    /// Bumped whenever a new set replaces the held one.
    generation: std::sync::atomic::AtomicU64,
    /// SHA-256 of the bytes the held set was read from: a read that brings the same bytes
    /// leaves the set (and the tokens checked against it) as they are.
    digest: std::sync::Mutex<Option<[u8; 32]>>,
    /// The task that reads the set again on a timer, ended when the cache drops.
    refresher: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for KeyCache {
    fn drop(&mut self) {
        if let Some(task) = self.refresher.get_mut().unwrap_or_else(|poison| poison.into_inner()).take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache").field("source", &self.source).finish_non_exhaustive()
    }
}

impl KeyCache {
    /// Read the key set once. A file that cannot be read is an error; a URL that cannot be
    /// fetched is a warning (the issuer may come up later) and is tried again at the first
    /// token.
    pub async fn start(source: JwksSource, min_refetch_interval: Duration) -> Result<Self, JwksError> {
        let cache = Self {
            source,
            current: RwLock::default(),
            refetch: tokio::sync::Mutex::new(None),
            min_refetch_interval,
            fetches: Default::default(),
            generation: Default::default(),
            digest: Default::default(),
            refresher: Default::default(),
        };
        match cache.load().await {
            // Not counted against the interval: a key rotated in just after startup is
            // still looked up at its first token.
            Ok((set, digest)) => {
                *cache.current.write().unwrap() = Arc::new(set);
                *cache.digest.lock().unwrap() = Some(digest);
            }
            Err(error) if matches!(cache.source, JwksSource::Url(_)) => {
                tracing::warn!("{error}; trying again at the first token");
            }
            Err(error) => return Err(error),
        }
        Ok(cache)
    }

    /// Read and parse the set; with the SHA-256 of its bytes.
    async fn load(&self) -> Result<(KeySet, [u8; 32]), JwksError> {
        use sha2::Digest as _;
        self.fetches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = self.source.name();
        let bytes = self.source.read().await?;
        Ok((KeySet::parse(&bytes, &name)?, sha2::Sha256::digest(&bytes).into()))
    }

    /// How many times the key set was read (fetched or opened), successfully or not.
    pub fn reads(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Which key set is held: it changes whenever the set is replaced, so that what was
    /// checked against an older set can be told apart.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The key `kid` names: from the cached set, else from the set read again if the last
    /// read is at least `min_refetch_interval` old.
    pub async fn key(&self, kid: Option<&str>) -> Option<Arc<Key>> {
        if let Some(key) = self.cached(kid) {
            return Some(key);
        }
        let mut last_read = self.refetch.lock().await;
        // Another request may have read the set again while this one waited.
        if let Some(key) = self.cached(kid) {
            return Some(key);
        }
        if last_read.is_some_and(|at| at.elapsed() < self.min_refetch_interval) {
            return None;
        }
        self.reload(&mut last_read).await;
        self.cached(kid)
    }

    /// Read the set again (the refetch lock held: `last_read`); a set that cannot be read
    /// leaves the held one.
    async fn reload(&self, last_read: &mut Option<Instant>) {
        *last_read = Some(Instant::now());
        match self.load().await {
            Ok((_, digest)) if *self.digest.lock().unwrap() == Some(digest) => {
                tracing::debug!("read the JWKS again: unchanged");
            }
            Ok((set, digest)) => {
                tracing::info!("read the JWKS again ({} keys)", set.len());
                *self.current.write().unwrap() = Arc::new(set);
                *self.digest.lock().unwrap() = Some(digest);
                self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
            Err(error) => tracing::warn!("{error}; keeping the keys held"),
        }
    }

    /// Read the set again every `interval` (at least 1 ms, at most
    /// [`MAX_REFRESH_INTERVAL`]), from a task of its own that ends when the cache drops.
    /// A read that brings a changed set replaces it (tokens checked against the old one
    /// are checked again), so a withdrawn key is trusted at most `interval` more while the
    /// issuer can be read.
    pub fn refresh_every(self: &Arc<Self>, interval: Duration) {
        let interval = interval.clamp(Duration::from_millis(1), MAX_REFRESH_INTERVAL);
        let cache = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(cache) = cache.upgrade() else { break };
                let mut last_read = cache.refetch.lock().await;
                cache.reload(&mut last_read).await;
            }
        });
        if let Some(earlier) = self.refresher.lock().unwrap().replace(task.abort_handle()) {
            earlier.abort();
        }
    }

    fn cached(&self, kid: Option<&str>) -> Option<Arc<Key>> {
        self.current.read().unwrap().find(kid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls_only_to_loopback_with_a_loopback_issuer() {
        assert!(JwksSource::url("https://idp.example.com/jwks.json", false).is_ok());
        assert!(JwksSource::url("http://127.0.0.1:9000/jwks.json", true).is_ok());
        assert!(JwksSource::url("http://[::1]:9000/jwks.json", true).is_ok());
        assert!(JwksSource::url("http://localhost/jwks.json", true).is_ok());
        assert!(matches!(
            JwksSource::url("http://127.0.0.1:9000/jwks.json", false),
            Err(JwksError::Scheme(_))
        ));
        assert!(matches!(
            JwksSource::url("http://idp.example.com/jwks.json", true),
            Err(JwksError::Scheme(_))
        ));
        assert!(matches!(
            JwksSource::url("ftp://idp.example.com/jwks.json", false),
            Err(JwksError::Scheme(_))
        ));
        assert!(matches!(JwksSource::url("not a url", false), Err(JwksError::BadUrl(_))));
    }

    #[test]
    fn secrets_in_a_key_set_are_dropped() {
        let only_secret = br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"}]}"#;
        assert!(matches!(KeySet::parse(only_secret, "test"), Err(JwksError::NoKeys(_))));
        let mixed = br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"s"},
            {"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"e"}]}"#;
        let set = KeySet::parse(mixed, "test").unwrap();
        assert!(set.find(Some("s")).is_none());
        assert_eq!(set.find(Some("e")).unwrap().algorithms, [Algorithm::EdDSA]);
        // The one signing key is found without a kid too.
        assert!(set.find(None).is_some());
    }

    #[test]
    fn a_key_this_server_cannot_read_is_skipped_not_the_set() {
        let set = br#"{"keys":[
            {"kty":"OKP","crv":"X25519","x":"hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo","use":"enc","kid":"x"},
            {"kty":"EC","crv":"P-521","alg":"ES512","x":"AQ","y":"AQ","kid":"p"},
            {"kty":"PQ","kid":"future"},
            {"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"e"}]}"#;
        let set = KeySet::parse(set, "test").unwrap();
        assert_eq!(set.find(Some("e")).unwrap().algorithms, [Algorithm::EdDSA]);
        assert!(set.find(Some("x")).is_none() && set.find(Some("p")).is_none());
        assert_eq!(set.len(), 1);
        // A document that is not a key set is still refused whole.
        assert!(matches!(KeySet::parse(br#"{"keys":{}}"#, "test"), Err(JwksError::Parse { .. })));
    }

    #[test]
    fn a_key_algorithm_narrows_what_it_verifies() {
        let n = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";
        let rsa = format!(r#"{{"keys":[{{"kty":"RSA","n":"{n}","e":"AQAB","alg":"PS256","kid":"r"}}]}}"#);
        let set = KeySet::parse(rsa.as_bytes(), "test").unwrap();
        assert_eq!(set.find(Some("r")).unwrap().algorithms, [Algorithm::PS256]);
    }
}
