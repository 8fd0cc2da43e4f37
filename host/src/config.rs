//! The server's TOML configuration: which components to serve and their limits.
//! `serve` reads it again on SIGHUP (and with `--watch` when it changes), applying only
//! `[[components]]` (see `reload.rs`); `[[tenants]]` are read at startup.
//!
//! ```toml
//! [server]
//! max_concurrent_calls = 64      # calls at once; more wait up to queue_timeout_ms
//! queue_timeout_ms = 5000
//! epoch_tick_ms = 1              # worst-case stop latency without a kick (at most 100)
//! max_memory_mb = 256            # the most one linear memory may take (a pool slot's size):
//!                                # a memory_mb above it is a load error; below 64 it is
//!                                # also the default memory_mb
//! progress_interval_ms = 50      # at most one progress notification per call per interval
//! cache_dir = "/var/cache/cordon"   # compiled components; `cache = false` turns it off
//! reserved_descriptors = 256     # file descriptors guests never get (the listener,
//!                                # connections, logs); over HTTP, max_connections more.
//!                                # Guests share the rest of the process's limit, which
//!                                # `serve` raises to the hard limit at startup
//! max_queued_request_kb = 262144 # bytes all requests being read, queued or running may
//!                                # hold (bodies as their bytes arrive, and parsed
//!                                # messages at their estimated size in memory); over
//!                                # it a request is refused at once
//!                                # (HTTP 503 + Retry-After; stdio: a -32603 error);
//!                                # with two tenants or more, one tenant's hold at most half
//!                                # and each keeps a guaranteed part (half split evenly);
//!                                # with fewer, one client's (caller or address) at most half
//! max_request_cost_kb = 65536    # one parsed message's estimated size; over it: refused
//!                                # (HTTP 413; stdio: a -32600 error)
//! max_listen_streams = 1024      # `subscriptions/listen` streams open at once; more are
//!                                # refused (a -32603 error); with two tenants or more,
//!                                # one tenant holds at most half, each a guaranteed part
//! request_state_key = "<64 hex digits>" # seals the requestState of tools that ask the
//!                                # client for input (MRTR); replicas behind one address
//!                                # must share it. CORDON_REQUEST_STATE_KEY wins over it;
//!                                # without either, a random key per process
//! request_state_ttl_secs = 600   # how long a client has to answer before the state expires
//!
//! [http]                         # only for `serve --http`
//! max_body_kb = 4096             # 413 beyond it
//! body_timeout_ms = 10000        # 408 when a body arrives slower
//! sse_after_ms = 1000            # a quiet call's answer becomes an SSE stream...
//! keep_alive_ms = 15000          # ...with a comment keep-alive this often
//! max_connections = 2048         # open connections at once; more wait to be accepted
//! max_connections_per_ip = 1024  # from one address (IPv6: one /48); more get 503, closed
//!                                # (and, with under a quarter of max_connections free,
//!                                # more than an eighth of them)
//! max_header_connections_per_ip = 64 # of those, still reading their first request's
//!                                # head; more wait, unread, up to header_timeout_ms
//! header_timeout_ms = 10000      # for a request's head to arrive; a kept-alive
//!                                # connection idle this long is closed
//! linger_ms = 5000               # after a refusal that left the body unread, read and
//! linger_kb = 16384              # discard at most this much before closing
//! write_timeout_ms = 30000       # a connection whose client takes less than 64 KiB of
//!                                # an answer in this long, writes waiting, is closed
//! close_delay_ms = 1000          # on SIGTERM, the listener and open connections stay at
//!                                # least this long (and while calls drain), answering
//!                                # each request 503 + Connection: close, so a load
//!                                # balancer that has not yet probed /readyz retries it
//!                                # elsewhere instead of seeing a reset; 0: close at once
//! allowed_hosts = ["mcp.internal"]   # besides localhost, 127.0.0.1 and [::1]
//! trusted_proxies = ["10.0.0.0/8"]   # reverse proxies (addresses, CIDR blocks) whose
//!                                # X-Forwarded-For names the client for its shares of
//!                                # sessions, listen streams and queued bytes (none)
//!
//! [auth.oauth]                  # HTTP requests need a JWT access token from this issuer
//! issuer = "https://idp.example.com"            # tokens' `iss`; http:// only on loopback
//! audience = "https://mcp.example.com/mcp"      # tokens' `aud`: this server's resource URI
//! jwks = { url = "https://idp.example.com/.well-known/jwks.json" }   # or { file = "jwks.json" }
//!                                # (a URL: https, or http to loopback with a loopback issuer)
//! tenant_claim = "org"           # the claim that names the tenant
//! required_scopes = ["tools"]    # missing one: 403 insufficient_scope
//! jwks_refresh_secs = 600        # the key set is read again this often, so a key the
//!                                # issuer withdrew is trusted at most this long (and
//!                                # at once when a token names a key id it lacks)
//!
//! [[components]]
//! path = "tools.wasm"            # relative to this file
//! name = "tools"                 # defaults to the file's stem; letters, digits, `_`, `-`
//!                                # and `.` (not first), at most 64, distinct per component
//! data_dir = "/srv/tools-data"   # preopened at /data; `true`: ~/.local/share/cordon/<name>;
//!                                # left out: no file system at all. Opened once, at load;
//!                                # no component's may be inside another's
//! data_quota_mb = 1024           # the most the data directory (each tenant's) may hold,
//!                                # 1,024 by default; every name counts 4 KiB besides a
//!                                # file's bytes, so this bounds inodes too (quota.rs)
//!
//! [[components.mounts]]          # more host directories, any number, each opened once at
//! host = "/srv/reference"        # load (relative to this file; it must exist: a missing
//! guest = "/reference"           # one is a load error naming it), seen at `guest`
//! mode = "ro"                    # (absolute, distinct); "ro": read only, "rw": read-write
//! [[components.mounts]]
//! host = "/srv/scratch"
//! guest = "/scratch"
//! mode = "rw"
//! quota_mb = 100                 # rw only: the mount may hold at most this many MiB (its
//!                                # files' bytes, and 4 KiB a name); a write or a new name
//!                                # past it fails (`quota`), exactly (runtime/quota.rs)
//! # A grant that may be written (a data_dir, an rw mount) may not be inside or around
//! # any other grant, this component's or another's; ro mounts may share a directory.
//! # Symlinks in a mount that lead out of it are not followed; links a guest makes may
//! # only point down.
//! env = { REGION = "eu" }       # the environment the guest sees: these variables only
//! secrets = { API_TOKEN = { env = "GITHUB_TOKEN" }, DB_PASSWORD = { file = "/run/secrets/db" } }
//!                                # more variables, read from the server's environment or a
//!                                # file (one trailing newline dropped) when the config is
//!                                # read; values never appear in logs, errors or output
//! allow_http = ["https://api.github.com", "https://*.example.com:8443", "http://127.0.0.1:9000"]
//!                                # outbound HTTP: scheme, host (exact, or *. for
//!                                # subdomains) and port (the scheme's by default); nothing
//!                                # else, and no inside address (loopback, private,
//!                                # link-local, metadata) unless a rule names it literally
//! [[components.secret_headers]]  # a credential the host adds, the guest never sees:
//! header = "authorization"       # set (replacing the guest's) on every request to the
//! secret = { env = "GITHUB_TOKEN" }   # hosts `to` grants (allow_http rules), read as
//! prefix = "Bearer "             # `secrets` are; a guest can use it with those hosts
//! to = ["https://api.github.com"]     # only (never TRACE), and send it nowhere else
//! limits = { memory_mb = 64, idle_timeout_ms = 60000, max_duration_ms = 300000 }
//! # memory_mb counts all of the component's linear memories together (at most
//! # server.max_memory_mb, 256 by default: the most one memory may take). Also:
//! # table_elements, instances, tables, memories, hostcall_kb, result_kb, note_kb,
//! # host_resources (10000), host_memory_kb (16384: file stream buffers and directory
//! # listings the host holds for a call; the parsed structured output apart), open_files (256: files, directories and
//! # file streams a call holds open), stderr_kb (64: stderr and the log import
//! # together, each line charged 128 bytes beside its text), grace_ms (250), cleanup_ms (1000), http_requests (32 per call),
//! # http_response_kb (8192: response bodies of a call, all together),
//! # http_request_kb (8192: request bodies a call sends, all together),
//! # http_connect_timeout_ms (5000), http_first_byte_timeout_ms (30000)
//!
//! [components.tools.spin]        # per-tool limits, over the component's; a tool the
//! max_duration_ms = 10000        # component does not export is a load error
//!
//! [[tenants]]                    # with any, HTTP asks every request for an API key
//! name = "acme"                  # like a component's name: it names directories
//! components = ["tools"]         # whose tools it sees; each component's data_dir
//!                                # becomes <data_dir>/<tenant> for it
//! api_keys = { env = "ACME_API_KEYS" }   # comma-separated; or { file = "..." }: one a
//!                                # line. Hashed (SHA-256) when read; never shown
//! max_concurrent_calls = 8       # its calls holding a slot at once; more wait in the queue
//!                                # (unset, with two or more tenants: half the slots; set or
//!                                # not, within its guaranteed part and the shared half)
//! calls_per_second = 50          # more are refused at once (HTTP 429 + Retry-After)
//! ```
//!
//! Every key is optional except `path`; unknown keys are errors, so typos never pass
//! silently. Without a config file, the example tools (`target/guests/example-tools.wasm`,
//! built by `cargo xtask guests`) are served with default limits.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::auth::jwks::{JwksSource, MAX_REFRESH_INTERVAL, is_loopback_host};
use crate::auth::oauth::OAuthSettings;
use crate::auth::{ApiKeys, Tenant, TenantId, Tenants};
use crate::dispatch::ServerLimits;
use crate::paths;
use crate::runtime::{
    ComponentOptions, DEFAULT_DATA_QUOTA_BYTES, EngineSettings, Environment, HttpGrants, Mount,
    RuntimeSettings, TenantView, ToolLimits,
};
use crate::transport::http::HttpSettings;
use crate::transport::proxies::TrustedProxies;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub components: Vec<ComponentConfig>,
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    #[serde(default)]
    pub auth: AuthConfig,
}

/// `[auth]`: how HTTP requests prove who they are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub oauth: Option<OAuthConfig>,
}

/// `[auth.oauth]`: JWT access tokens from one authorization server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    pub issuer: String,
    pub audience: String,
    pub jwks: JwksConfig,
    pub tenant_claim: String,
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// How often the key set is read again (seconds), whatever tokens come.
    pub jwks_refresh_secs: Option<u64>,
}

/// Where the issuer's keys are: `{ url = "..." }` or `{ file = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, untagged)]
pub enum JwksConfig {
    Url { url: String },
    File { file: PathBuf },
}

impl OAuthConfig {
    fn plan(self, base: &Path) -> Result<OAuthSettings> {
        let issuer: http::Uri = self
            .issuer
            .parse()
            .with_context(|| format!("[auth.oauth] issuer {:?} is not a URL", self.issuer))?;
        let issuer_is_loopback = issuer.host().is_some_and(is_loopback_host);
        match issuer.scheme_str() {
            Some("https") => {}
            Some("http") if issuer_is_loopback => {}
            _ => bail!(
                "[auth.oauth] issuer {:?} must be an https:// URL (http:// only on a loopback address)",
                self.issuer
            ),
        }
        // The canonical resource URI (RFC 8707, MCP authorization): absolute, so that the
        // protected resource metadata and its challenge URL name it, and https but on a
        // loopback host.
        let audience: Option<http::Uri> = self.audience.parse().ok();
        let audience_ok = audience.as_ref().is_some_and(|uri| {
            let loopback = uri.host().is_some_and(is_loopback_host);
            let scheme_ok = match uri.scheme_str() {
                Some("https") => true,
                Some("http") => loopback,
                _ => false,
            };
            scheme_ok && uri.host().is_some_and(|host| !host.is_empty()) && uri.query().is_none()
        });
        if !audience_ok {
            bail!(
                "[auth.oauth] audience {:?} must be this server's resource URI, an absolute https:// URL \
                 with no query (http:// only on a loopback address), e.g. https://mcp.example.com/mcp",
                self.audience
            );
        }
        if self.tenant_claim.is_empty() {
            bail!("[auth.oauth] tenant_claim must name the claim that names the tenant, e.g. \"org\"");
        }
        if let Some(scope) =
            self.required_scopes.iter().find(|scope| scope.is_empty() || scope.contains([' ', '"', '\\']))
        {
            bail!(
                "[auth.oauth] required_scopes: {scope:?} is not a scope (no spaces, quotes or backslashes)"
            );
        }
        let jwks = match self.jwks {
            JwksConfig::Url { url } => JwksSource::url(&url, issuer_is_loopback)?,
            JwksConfig::File { file } => JwksSource::File(base.join(file)),
        };
        let mut settings =
            OAuthSettings::new(self.issuer, self.audience, jwks, self.tenant_claim, self.required_scopes);
        match self.jwks_refresh_secs {
            Some(secs) if !(1..=MAX_REFRESH_INTERVAL.as_secs()).contains(&secs) => bail!(
                "[auth.oauth] jwks_refresh_secs must be 1 to {} (a day)",
                MAX_REFRESH_INTERVAL.as_secs()
            ),
            Some(secs) => settings.refresh_interval = Duration::from_secs(secs),
            None => {}
        }
        Ok(settings)
    }
}

/// A `[[tenants]]` entry: who may call which components, with which keys and quotas.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Also its data directory's name under a component's `data_dir`.
    pub name: String,
    /// The components whose tools it sees (by `[[components]]` name).
    pub components: Vec<String>,
    /// Its API keys: `{ env = "VAR" }` (comma-separated) or `{ file = "keys" }` (one a line).
    pub api_keys: Option<SecretSource>,
    /// Its calls holding a slot at once; more wait in the queue.
    pub max_concurrent_calls: Option<usize>,
    /// Its calls per second; more are refused at once.
    pub calls_per_second: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub max_body_kb: Option<usize>,
    pub body_timeout_ms: Option<u64>,
    pub sse_after_ms: Option<u64>,
    pub keep_alive_ms: Option<u64>,
    pub max_connections: Option<usize>,
    pub max_connections_per_ip: Option<usize>,
    pub max_header_connections_per_ip: Option<usize>,
    pub header_timeout_ms: Option<u64>,
    pub linger_ms: Option<u64>,
    pub linger_kb: Option<usize>,
    pub write_timeout_ms: Option<u64>,
    pub close_delay_ms: Option<u64>,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub max_concurrent_calls: Option<usize>,
    pub queue_timeout_ms: Option<u64>,
    pub epoch_tick_ms: Option<u64>,
    pub progress_interval_ms: Option<u64>,
    pub max_queued_request_kb: Option<usize>,
    pub max_request_cost_kb: Option<usize>,
    pub max_memory_mb: Option<usize>,
    pub cache: Option<bool>,
    pub cache_dir: Option<PathBuf>,
    pub reserved_descriptors: Option<usize>,
    pub max_listen_streams: Option<usize>,
    /// 64 hex digits; the environment's `CORDON_REQUEST_STATE_KEY` wins over it.
    pub request_state_key: Option<String>,
    pub request_state_ttl_secs: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentConfig {
    pub path: PathBuf,
    /// How the component is known (logs, its default data directory); the file's stem
    /// unless given.
    pub name: Option<String>,
    /// Files are a grant, never a default: without this key a component sees none.
    pub data_dir: Option<DataDirConfig>,
    /// The most MiB the data directory (each tenant's) may hold, its names counted
    /// (runtime/quota.rs); 1,024 unless given.
    pub data_quota_mb: Option<u64>,
    /// More host directories, each at a guest path of its own.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// Environment variables with literal values.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values are secrets, read from elsewhere.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSource>,
    /// Where the component may send HTTP requests; nowhere unless given.
    #[serde(default)]
    pub allow_http: Vec<String>,
    /// Headers the host sets on requests to some of the `allow_http` hosts, with secret
    /// values the guest never sees.
    #[serde(default)]
    pub secret_headers: Vec<SecretHeaderConfig>,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub tools: HashMap<String, LimitsConfig>,
}

/// The data directory `data_dir` grants the component `name` (`None`: none) and its
/// quota in bytes.
fn data_dir_of(
    data_dir: Option<&DataDirConfig>,
    data_quota_mb: Option<u64>,
    name: &str,
    base: &Path,
) -> Result<(Option<PathBuf>, u64)> {
    let data_dir = match data_dir {
        Some(DataDirConfig::Path(dir)) => Some(base.join(dir)),
        Some(DataDirConfig::Default(true)) => Some(
            paths::default_data_dir(name).with_context(|| format!("component {name}: data_dir = true"))?,
        ),
        Some(DataDirConfig::Default(false)) | None => None,
    };
    let quota = match data_quota_mb {
        Some(_) if data_dir.is_none() => {
            bail!("component {name}: data_quota_mb is for a data_dir, and it is granted none")
        }
        Some(mb) => mebibytes(mb, "data_quota_mb").with_context(|| format!("component {name}"))?,
        None => DEFAULT_DATA_QUOTA_BYTES,
    };
    Ok((data_dir, quota))
}

/// A quota of `mb` MiB (the key `key`) in bytes, unless that is past what a quota counts.
fn mebibytes(mb: u64, key: &str) -> Result<u64> {
    mb.checked_mul(1 << 20).with_context(|| format!("{key} = {mb} is too large"))
}

/// `[[components.secret_headers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretHeaderConfig {
    /// The header's name, e.g. `authorization`.
    pub header: String,
    /// Its value, read as `secrets` are.
    pub secret: SecretSource,
    /// Put before the value, e.g. `"Bearer "`.
    #[serde(default)]
    pub prefix: String,
    /// The `allow_http` rules whose requests carry it.
    pub to: Vec<String>,
}

impl ComponentConfig {
    /// `allow_http` with the `secret_headers`, their values read relative to `base`
    /// (`None`: left empty, for showing what is granted without reading a secret).
    fn http_grants(
        allow_http: &[String],
        secret_headers: &[SecretHeaderConfig],
        name: &str,
        base: Option<&Path>,
    ) -> Result<HttpGrants> {
        let mut grants = HttpGrants::parse(allow_http)
            .map_err(|problem| anyhow::anyhow!("component {name}: {problem}"))?;
        for header in secret_headers {
            let value = match base {
                Some(base) => format!("{}{}", header.prefix, header.secret.read(&header.header, base)?),
                None => String::new(),
            };
            grants
                .add_secret_header(&header.header, &value, &header.to)
                .map_err(|problem| anyhow::anyhow!("component {name}: {problem}"))?;
        }
        Ok(grants)
    }
}

/// Where a secret's value comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, untagged)]
pub enum SecretSource {
    /// A variable of the server's own environment.
    Env { env: String },
    /// A file (relative to the config file); one trailing newline is dropped.
    File { file: PathBuf },
}

impl SecretSource {
    /// The secret's value. Errors name the variable and where it was looked for, never a
    /// value.
    fn read(&self, name: &str, base: &Path) -> Result<String> {
        match self {
            SecretSource::Env { env } => std::env::var(env)
                .with_context(|| format!("secret {name}: the server's environment has no usable {env}")),
            SecretSource::File { file } => {
                let path = base.join(file);
                let mut value = std::fs::read_to_string(&path)
                    .with_context(|| format!("secret {name}: cannot read {}", path.display()))?;
                if value.ends_with('\n') {
                    value.pop();
                    if value.ends_with('\r') {
                        value.pop();
                    }
                }
                Ok(value)
            }
        }
    }
}

/// A component's `data_dir`: a path (relative to the config file), or `true` for the
/// default place, `~/.local/share/cordon/<name>`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum DataDirConfig {
    Default(bool),
    Path(PathBuf),
}

/// A `[[components.mounts]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// The host directory, relative to the config file.
    pub host: PathBuf,
    /// Where the guest sees it (absolute).
    pub guest: String,
    pub mode: MountMode,
    /// For `rw` mounts: the most MiB its files may hold.
    pub quota_mb: Option<u64>,
}

/// Whether a mount may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum MountMode {
    #[serde(rename = "ro")]
    ReadOnly,
    #[serde(rename = "rw")]
    ReadWrite,
}

impl MountConfig {
    fn resolve(&self, base: &Path) -> Result<Mount> {
        if self.mode == MountMode::ReadOnly && self.quota_mb.is_some() {
            bail!("mount {}: quota_mb is for `rw` mounts, and this one is `ro`", self.guest);
        }
        let quota_bytes = match self.quota_mb {
            Some(mb) => Some(mebibytes(mb, "quota_mb").with_context(|| format!("mount {}", self.guest))?),
            None => None,
        };
        Ok(Mount {
            host: base.join(&self.host),
            guest: self.guest.clone(),
            writable: self.mode == MountMode::ReadWrite,
            quota_bytes,
        })
    }
}

/// Limits as written in the file; each one left out keeps the value it overrides.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub memory_mb: Option<usize>,
    pub table_elements: Option<usize>,
    pub instances: Option<usize>,
    pub tables: Option<usize>,
    pub memories: Option<usize>,
    pub hostcall_kb: Option<usize>,
    pub result_kb: Option<usize>,
    pub note_kb: Option<usize>,
    pub host_resources: Option<usize>,
    pub host_memory_kb: Option<usize>,
    pub open_files: Option<usize>,
    pub stderr_kb: Option<usize>,
    pub http_requests: Option<usize>,
    pub http_response_kb: Option<usize>,
    pub http_request_kb: Option<usize>,
    pub http_connect_timeout_ms: Option<u64>,
    pub http_first_byte_timeout_ms: Option<u64>,
    /// 0 turns the idle timeout off.
    pub idle_timeout_ms: Option<u64>,
    /// 0 turns the maximum duration off.
    pub max_duration_ms: Option<u64>,
    pub grace_ms: Option<u64>,
    pub cleanup_ms: Option<u64>,
}

impl LimitsConfig {
    fn apply(&self, base: &ToolLimits) -> Result<ToolLimits> {
        let ms = Duration::from_millis;
        let optional = |value: u64| (value > 0).then(|| ms(value));
        Ok(ToolLimits {
            memory_bytes: self.memory_mb.map_or(Ok(base.memory_bytes), |mb| bytes(mb, 20, "memory_mb"))?,
            table_elements: self.table_elements.unwrap_or(base.table_elements),
            instances: self.instances.unwrap_or(base.instances),
            tables: self.tables.unwrap_or(base.tables),
            memories: self.memories.unwrap_or(base.memories),
            hostcall_bytes: self
                .hostcall_kb
                .map_or(Ok(base.hostcall_bytes), |kb| bytes(kb, 10, "hostcall_kb"))?,
            result_bytes: self.result_kb.map_or(Ok(base.result_bytes), |kb| bytes(kb, 10, "result_kb"))?,
            note_bytes: self.note_kb.map_or(Ok(base.note_bytes), |kb| bytes(kb, 10, "note_kb"))?,
            host_resources: self.host_resources.unwrap_or(base.host_resources),
            host_memory_bytes: self
                .host_memory_kb
                .map_or(Ok(base.host_memory_bytes), |kb| bytes(kb, 10, "host_memory_kb"))?,
            open_files: self.open_files.unwrap_or(base.open_files),
            stderr_bytes: self.stderr_kb.map_or(Ok(base.stderr_bytes), |kb| bytes(kb, 10, "stderr_kb"))?,
            http_requests: self.http_requests.unwrap_or(base.http_requests),
            http_response_bytes: self
                .http_response_kb
                .map_or(Ok(base.http_response_bytes), |kb| bytes(kb, 10, "http_response_kb"))?,
            http_request_bytes: self
                .http_request_kb
                .map_or(Ok(base.http_request_bytes), |kb| bytes(kb, 10, "http_request_kb"))?,
            http_connect_timeout: self.http_connect_timeout_ms.map_or(base.http_connect_timeout, ms),
            http_first_byte_timeout: self.http_first_byte_timeout_ms.map_or(base.http_first_byte_timeout, ms),
            idle_timeout: self.idle_timeout_ms.map_or(base.idle_timeout, optional),
            max_duration: self.max_duration_ms.map_or(base.max_duration, optional),
            grace: self.grace_ms.map_or(base.grace, ms),
            cleanup_budget: self.cleanup_ms.map_or(base.cleanup_budget, ms),
        })
    }
}

/// The longest epoch tick a config may ask for.
const MAX_EPOCH_TICK_MS: u64 = 100;

/// `value` units of `1 << shift` bytes, refused when that many bytes overflow a `usize`
/// (a bare shift wrapped a huge value to a small limit, silently: found by fuzzing).
fn bytes(value: usize, shift: u32, key: &str) -> Result<usize> {
    value.checked_mul(1 << shift).with_context(|| format!("{key} = {value} is too large"))
}

/// Why the file at `path` is not a config, with the line and column at fault but never the
/// line itself (toml's own message quotes it): a config may hold `request_state_key`, and
/// this message goes to stderr and, at a reload, into the log.
fn invalid_config(path: &Path, text: &str, error: toml::de::Error) -> anyhow::Error {
    let at = error.span().map(|span| {
        let before = &text.as_bytes()[..span.start.min(text.len())];
        let line = before.iter().filter(|&&byte| byte == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&byte| byte != b'\n').count() + 1;
        // A value's error names no key: the key just before it, from its own line (its
        // name only, never a value).
        let on_line = &before[before.len() - (column - 1)..];
        let key = String::from_utf8_lossy(on_line.trim_ascii_end().strip_suffix(b"=").unwrap_or_default())
            .trim_end()
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .next()
            .filter(|key| !key.is_empty())
            .map(|key| format!(", at `{key}`"))
            .unwrap_or_default();
        format!(" (line {line}, column {column}{key})")
    });
    anyhow::anyhow!(
        "{} is not a valid Cordon config{}: {}",
        path.display(),
        at.unwrap_or_default(),
        error.message().trim_end()
    )
}

/// The most a count of connections may be: far above any process's descriptor limit, and
/// far below what tokio's semaphores hold (`usize::MAX >> 3`, past which they panic).
const MAX_COUNT: usize = 1 << 24;

/// A count that must be at least 1 and at most [`MAX_COUNT`].
fn count(value: usize, key: &str) -> Result<usize> {
    if !(1..=MAX_COUNT).contains(&value) {
        bail!("{key} = {value} is out of range: from 1 to {MAX_COUNT}");
    }
    Ok(value)
}

/// A timeout or interval that 0 would break (every connection dropped, a keep-alive every
/// instant): at least 1 ms, said so rather than read as something else.
fn positive_ms(ms: u64, key: &str) -> Result<Duration> {
    if ms == 0 {
        bail!("{key} = 0 is not allowed: at least 1 (milliseconds)");
    }
    Ok(Duration::from_millis(ms))
}

/// A component to load, resolved.
pub type ComponentPlan = crate::runtime::ComponentSource;

/// Everything `serve` needs, resolved from a config file (or the defaults).
#[derive(Debug)]
pub struct Plan {
    pub runtime: RuntimeSettings,
    pub http: HttpSettings,
    pub server_limits: ServerLimits,
    pub progress_interval: Duration,
    /// `[server] reserved_descriptors`, when the file sets it.
    pub reserved_descriptors: Option<usize>,
    pub components: Vec<ComponentPlan>,
    /// `[[tenants]]`, their keys read and hashed; empty without any.
    pub tenants: Tenants,
    /// `[auth.oauth]`, when set: HTTP requests need a valid access token.
    pub oauth: Option<OAuthSettings>,
    /// `[server] request_state_key`, if set (the environment may still override it).
    pub request_state_key: Option<String>,
    /// `[server] request_state_ttl_secs`, or the default.
    pub request_state_ttl: Duration,
    /// The file's tables other than `components`, as read for this plan (`None` for the
    /// defaults): what a reload compares to say which settings wait for a restart.
    pub settings: Option<toml::Table>,
}

impl Config {
    /// What the server reads besides the config itself and the components' files (which
    /// each load protects), with paths resolved against `base`: the files no guest may
    /// write (the issuer's key set) and the secret files no guest may read or write
    /// (`secrets`, `secret_headers`, `api_keys`).
    pub fn files_read(&self, base: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let secret_file = |source: &SecretSource| match source {
            SecretSource::File { file } => Some(base.join(file)),
            SecretSource::Env { .. } => None,
        };
        let headers = self.components.iter().flat_map(|component| &component.secret_headers);
        let secrets = (self.components.iter().flat_map(|component| component.secrets.values()))
            .chain(headers.map(|header| &header.secret))
            .chain(self.tenants.iter().filter_map(|tenant| tenant.api_keys.as_ref()))
            .filter_map(secret_file);
        let jwks = self.auth.oauth.as_ref().and_then(|oauth| match &oauth.jwks {
            JwksConfig::File { file } => Some(base.join(file)),
            JwksConfig::Url { .. } => None,
        });
        (jwks.into_iter().collect(), secrets.collect())
    }

    /// [`Config::files_read`] with the config at `path` itself: a file the server reads,
    /// or a secret file when it holds `request_state_key` (a sealing key written in it).
    pub fn protected_files(&self, path: &Path, base: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let (mut files, mut secrets) = self.files_read(base);
        match self.server.request_state_key {
            Some(_) => secrets.push(path.to_owned()),
            None => files.push(path.to_owned()),
        }
        (files, secrets)
    }

    pub fn load(path: &Path) -> Result<Self> {
        Ok(Self::load_with_settings(path)?.0)
    }

    /// [`Config::load`], and the file's tables other than `components` from the same read
    /// ([`Plan::settings`]).
    pub fn load_with_settings(path: &Path) -> Result<(Self, toml::Table)> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let invalid = |error| invalid_config(path, &text, error);
        let config = toml::from_str(&text).map_err(invalid)?;
        let mut settings: toml::Table = text.parse().map_err(invalid)?;
        settings.remove("components");
        Ok((config, settings))
    }

    /// Resolve paths (relative to `base`) and limits; with no components, serve the
    /// example tools.
    pub fn plan(self, base: &Path) -> Result<Plan> {
        let server = &self.server;
        let mut engine = EngineSettings::default();
        if let Some(calls) = server.max_concurrent_calls {
            engine.max_concurrent_calls = calls.max(1);
        }
        if let Some(tick) = server.epoch_tick_ms {
            // A guest that never yields (looping in `list`, a cleanup or a spare's start
            // code, which no stop kicks) runs until the tick after its budget: a long tick
            // would let it overrun every budget by that much.
            if tick > MAX_EPOCH_TICK_MS {
                bail!(
                    "server.epoch_tick_ms = {tick} is too long: at most {MAX_EPOCH_TICK_MS} (a guest \
                     that never yields overruns its budgets by up to a tick)"
                );
            }
            engine.epoch_tick = Duration::from_millis(tick.max(1));
        }
        if let Some(mb) = server.max_memory_mb {
            engine.max_memory_bytes = bytes(mb, 20, "server.max_memory_mb")?;
        }
        if server.cache == Some(false) {
            engine.cache_dir = None;
        } else if let Some(dir) = &server.cache_dir {
            engine.cache_dir = Some(base.join(dir));
        }
        let mut runtime = RuntimeSettings { engine, ..RuntimeSettings::default() };
        if let Some(ms) = server.queue_timeout_ms {
            runtime.queue_timeout = Duration::from_millis(ms);
        }
        let progress_interval = Duration::from_millis(server.progress_interval_ms.unwrap_or(50));
        let mut server_limits = ServerLimits::default();
        if let Some(kb) = server.max_queued_request_kb {
            server_limits.max_queued_request_bytes = bytes(kb, 10, "server.max_queued_request_kb")?;
        }
        if let Some(kb) = server.max_request_cost_kb {
            server_limits.max_request_cost = bytes(kb, 10, "server.max_request_cost_kb")?;
        }
        if let Some(streams) = server.max_listen_streams {
            server_limits.max_listen_streams = streams;
        }
        let mut http = HttpSettings::default();
        if let Some(kb) = self.http.max_body_kb {
            http.max_body_bytes = bytes(kb, 10, "http.max_body_kb")?;
        }
        if let Some(ms) = self.http.body_timeout_ms {
            http.body_timeout = positive_ms(ms, "http.body_timeout_ms")?;
        }
        if let Some(ms) = self.http.sse_after_ms {
            http.sse_after = Duration::from_millis(ms);
        }
        if let Some(ms) = self.http.keep_alive_ms {
            http.keep_alive = positive_ms(ms, "http.keep_alive_ms")?;
        }
        if let Some(connections) = self.http.max_connections {
            http.max_connections = count(connections, "http.max_connections")?;
        }
        if let Some(connections) = self.http.max_connections_per_ip {
            http.max_connections_per_ip = count(connections, "http.max_connections_per_ip")?;
        }
        if let Some(connections) = self.http.max_header_connections_per_ip {
            http.max_header_connections_per_ip = count(connections, "http.max_header_connections_per_ip")?;
        }
        if let Some(ms) = self.http.header_timeout_ms {
            http.header_timeout = positive_ms(ms, "http.header_timeout_ms")?;
        }
        if let Some(ms) = self.http.linger_ms {
            http.linger_timeout = Duration::from_millis(ms);
        }
        if let Some(kb) = self.http.linger_kb {
            http.linger_bytes = bytes(kb, 10, "http.linger_kb")?;
        }
        if let Some(ms) = self.http.write_timeout_ms {
            http.write_timeout = positive_ms(ms, "http.write_timeout_ms")?;
        }
        if let Some(ms) = self.http.close_delay_ms {
            http.close_delay = Duration::from_millis(ms);
        }
        for host in &self.http.allowed_hosts {
            http.allow_host(host).context("[http] allowed_hosts")?;
        }
        http.trusted_proxies = TrustedProxies::parse(&self.http.trusted_proxies)
            .map_err(|why| anyhow::anyhow!("[http] trusted_proxies: {why}"))?;

        let oauth = self.auth.oauth.map(|oauth| oauth.plan(base)).transpose()?;
        let mut components: Vec<ComponentPlan> = Vec::new();
        for component in self.components {
            let path = base.join(&component.path);
            let name = match component.name {
                Some(name) => name,
                None => component_name(&path),
            };
            check_component_name(&name, &path)?;
            // Alike but for case: a file system that ignores case (macOS, ext4's casefold)
            // would give both the same default data directory.
            if let Some(other) = components.iter().find(|other| other.name.eq_ignore_ascii_case(&name)) {
                bail!(
                    "components {} and {} are both named {name:?}{}: give one a `name` of its own",
                    other.path.display(),
                    path.display(),
                    if other.name == name {
                        String::new()
                    } else {
                        format!(" (or {:?}, alike but for case)", other.name)
                    },
                );
            }
            let in_limits = || format!("in the limits of {}", path.display());
            let fitted = default_limits(runtime.engine.max_memory_bytes);
            let limits = component.limits.apply(&fitted).with_context(in_limits)?;
            let tool_limits = component
                .tools
                .iter()
                .map(|(tool, overrides)| {
                    Ok((tool.clone(), overrides.apply(&limits).with_context(in_limits)?))
                })
                .collect::<Result<_>>()?;
            let (data_dir, data_quota_bytes) =
                data_dir_of(component.data_dir.as_ref(), component.data_quota_mb, &name, base)?;
            let mounts = component
                .mounts
                .iter()
                .map(|mount| mount.resolve(base))
                .collect::<Result<Vec<_>>>()
                .with_context(|| format!("component {name}"))?;
            let allow_http = ComponentConfig::http_grants(
                &component.allow_http,
                &component.secret_headers,
                &name,
                Some(base),
            )?;
            let mut variables: Vec<(String, String)> = component.env.into_iter().collect();
            for (variable, source) in &component.secrets {
                if variables.iter().any(|(name, _)| name == variable) {
                    bail!("component {name}: {variable} is in both `env` and `secrets`");
                }
                variables.push((variable.clone(), source.read(variable, base)?));
            }
            let environment = Environment::new(variables)
                .map_err(|problem| anyhow::anyhow!("component {name}: {problem}"))?;
            components.push(ComponentPlan {
                name,
                path,
                embedded: None,
                options: ComponentOptions {
                    limits,
                    tool_limits,
                    data_dir,
                    data_quota_bytes,
                    tenants: Vec::new(),
                    mounts,
                    environment,
                    allow_http,
                },
            });
        }
        if components.is_empty() {
            components = default_components(runtime.engine.max_memory_bytes)?;
        }
        let tenants = plan_tenants(self.tenants, &mut components, base)?;
        runtime.tenants = tenants.len();
        let reserved_descriptors = server.reserved_descriptors;
        let request_state_key = self.server.request_state_key.clone();
        let request_state_ttl = self
            .server
            .request_state_ttl_secs
            .map_or(crate::dispatch::sealed::DEFAULT_TTL, |secs| Duration::from_secs(secs.max(1)));
        Ok(Plan {
            runtime,
            http,
            server_limits,
            progress_interval,
            reserved_descriptors,
            components,
            tenants,
            oauth,
            request_state_key,
            request_state_ttl,
            settings: None,
        })
    }
}

/// Check the `[[tenants]]` entries against the components, read and hash their keys, and
/// tell each component which tenants use it (each gets a data directory of its own).
fn plan_tenants(
    entries: Vec<TenantConfig>,
    components: &mut [ComponentPlan],
    base: &Path,
) -> Result<Tenants> {
    let mut tenants = Vec::new();
    let mut keys = ApiKeys::default();
    for entry in entries {
        let name = &entry.name;
        if !paths::is_safe_name(name) {
            bail!(
                "tenant {name:?}: a tenant's name is 1 to 64 letters, digits, `_`, `-` and `.` (not first): \
                 it names the tenant's data directories"
            );
        }
        // Alike but for case: on a file system that ignores case the two would share
        // their data directories (and each count the other's files in its quota).
        if let Some(other) =
            tenants.iter().find(|tenant: &&Tenant| tenant.id.as_str().eq_ignore_ascii_case(name))
        {
            bail!(
                "two tenants are named {name:?}{}",
                match other.id.as_str() {
                    same if same == name => String::new(),
                    other => format!(" and {other:?}, alike but for case: each names a data directory"),
                }
            );
        }
        for component in &entry.components {
            let Some(plan) = components.iter_mut().find(|plan| &plan.name == component) else {
                bail!("tenant {name}: no component is named {component:?}");
            };
            plan.options.tenants.push(name.clone());
        }
        if entry.max_concurrent_calls == Some(0) || entry.calls_per_second == Some(0) {
            bail!("tenant {name}: max_concurrent_calls and calls_per_second must be at least 1");
        }
        let id = TenantId::new(name);
        if let Some(source) = &entry.api_keys {
            // The error names where the keys were looked for, never a key.
            let text = source.read(&format!("api_keys of tenant {name}"), base)?;
            let added =
                keys.add(&id, &text).map_err(|refused| anyhow::anyhow!("tenant {name}: {refused}"))?;
            if added == 0 {
                bail!("tenant {name}: its api_keys hold no key");
            }
        }
        let view = TenantView::new(name, entry.components, entry.max_concurrent_calls);
        tenants.push(Tenant::new(id, view, entry.calls_per_second));
    }
    Ok(Tenants::new(tenants, keys))
}

/// What a component is granted, as `cordon inspect` shows it: paths and names only.
/// Secrets are not even read, so no value can be shown.
#[derive(Debug, Clone)]
pub struct Grants {
    pub name: String,
    pub data_dir: Option<PathBuf>,
    pub data_quota_bytes: u64,
    pub mounts: Vec<Mount>,
    /// The names of the `env` variables.
    pub env: Vec<String>,
    /// The names of the `secrets` variables.
    pub secrets: Vec<String>,
    /// The `allow_http` rules.
    pub allow_http: HttpGrants,
}

impl Grants {
    /// Options as loading would make them, but with every variable's value empty: enough
    /// for [`crate::runtime::grant_warnings`], which looks at names only.
    pub fn options_without_values(&self) -> ComponentOptions {
        let names = self.env.iter().chain(&self.secrets).map(|name| (name.clone(), String::new()));
        ComponentOptions {
            data_dir: self.data_dir.clone(),
            data_quota_bytes: self.data_quota_bytes,
            mounts: self.mounts.clone(),
            environment: Environment::new(names.collect()).unwrap_or_default(),
            allow_http: self.allow_http.clone(),
            ..ComponentOptions::default()
        }
    }
}

impl Config {
    /// What the config grants the component in `component` (the `[[components]]` entry
    /// whose path is that file), or `None` when no entry names it.
    pub fn grants_for(&self, base: &Path, component: &Path) -> Result<Option<Grants>> {
        let wanted =
            component.canonicalize().with_context(|| format!("cannot resolve {}", component.display()))?;
        for entry in &self.components {
            let path = base.join(&entry.path);
            if path.canonicalize().ok().as_ref() != Some(&wanted) {
                continue;
            }
            let name = entry.name.clone().unwrap_or_else(|| component_name(&path));
            let (data_dir, data_quota_bytes) =
                data_dir_of(entry.data_dir.as_ref(), entry.data_quota_mb, &name, base)?;
            let mounts = entry.mounts.iter().map(|mount| mount.resolve(base)).collect::<Result<_>>()?;
            let allow_http =
                ComponentConfig::http_grants(&entry.allow_http, &entry.secret_headers, &name, None)?;
            return Ok(Some(Grants {
                name,
                data_dir,
                data_quota_bytes,
                mounts,
                env: entry.env.keys().cloned().collect(),
                secrets: entry.secrets.keys().cloned().collect(),
                allow_http,
            }));
        }
        Ok(None)
    }
}

fn component_name(path: &Path) -> String {
    path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_else(|| "component".into())
}

/// A component's name becomes a directory name (its default data directory) and a log
/// field: plain characters only, so it can never climb (`..`) or hide (`.x`).
fn check_component_name(name: &str, path: &Path) -> Result<()> {
    if !paths::is_safe_name(name) {
        bail!(
            "component {} has the name {name:?}: a name is 1 to 64 letters, digits, `_`, `-` and `.` \
             (not first); set `name` in its [[components]] entry",
            path.display()
        );
    }
    Ok(())
}

/// The example tools, with their default data directory: those built into this binary,
/// else the repository's (`paths::example_tools_source`).
/// The limits a component gets where its config sets none: the default memory_mb fits a
/// smaller pool (`max_memory_bytes`, server.max_memory_mb) as it is; one written above it
/// is refused at load, naming both.
fn default_limits(max_memory_bytes: usize) -> ToolLimits {
    let defaults = ToolLimits::default();
    ToolLimits { memory_bytes: defaults.memory_bytes.min(max_memory_bytes), ..defaults }
}

fn default_components(max_memory_bytes: usize) -> Result<Vec<ComponentPlan>> {
    let (path, embedded) = match paths::example_tools_source()? {
        paths::ExampleTools::Embedded(bytes) => {
            tracing::info!("no --config: serving the example tools built into this binary");
            (paths::example_tools(), Some(bytes))
        }
        paths::ExampleTools::File(path) => {
            tracing::info!("no --config: serving the example tools in {}", path.display());
            (path, None)
        }
    };
    let name = component_name(&path);
    let data_dir = Some(paths::default_data_dir(&name).context("the example tools' data directory")?);
    Ok(vec![ComponentPlan {
        name,
        path,
        embedded,
        options: ComponentOptions {
            data_dir,
            limits: default_limits(max_memory_bytes),
            ..ComponentOptions::default()
        },
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth(table: &str) -> Result<Option<OAuthSettings>> {
        let config: Config = toml::from_str(&format!("[auth.oauth]\n{table}"))?;
        config.auth.oauth.map(|oauth| oauth.plan(Path::new("/etc/cordon"))).transpose()
    }

    #[test]
    fn auth_oauth_takes_exactly_the_issues_keys() {
        let settings = oauth(
            r#"issuer = "https://idp.example.com"
            audience = "https://mcp.example.com/mcp"
            jwks = { url = "https://idp.example.com/.well-known/jwks.json" }
            tenant_claim = "org"
            required_scopes = ["tools"]"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(settings.tenant_claim, "org");
        assert_eq!(settings.required_scopes, ["tools"]);
        assert_eq!(settings.refresh_interval, crate::auth::jwks::REFRESH_INTERVAL);
        let table = r#"issuer = "https://idp.example.com"
            audience = "https://mcp.example.com/mcp"
            jwks = { file = "jwks.json" }
            tenant_claim = "org""#;
        let refreshed = oauth(&format!("{table}\njwks_refresh_secs = 60")).unwrap().unwrap();
        assert_eq!(refreshed.refresh_interval, Duration::from_secs(60));
        let error = oauth(&format!("{table}\njwks_refresh_secs = 0")).unwrap_err();
        assert!(format!("{error:#}").contains("jwks_refresh_secs must be 1 to 86400"), "{error:#}");
        assert!(oauth(&format!("{table}\njwks_refresh_secs = 86401")).is_err());
        let file = oauth(
            r#"issuer = "https://idp.example.com"
            audience = "https://mcp.example.com/mcp"
            jwks = { file = "jwks.json" }
            tenant_claim = "org""#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(file.jwks, JwksSource::File("/etc/cordon/jwks.json".into()));
        // A typo is an error, as everywhere in the config.
        assert!(oauth("issuer = \"https://a\"\naudience = \"b\"\njwks = { file = \"j\" }\ntenant_claim = \"org\"\nrequired_scope = []").is_err());
        // Plain HTTP: only for a loopback issuer and a loopback JWKS.
        let plain = |issuer: &str, jwks: &str| {
            oauth(&format!(
                "issuer = {issuer:?}\naudience = \"https://mcp.example.com/mcp\"\njwks = {{ url = {jwks:?} }}\ntenant_claim = \"org\""
            ))
        };
        assert!(plain("http://127.0.0.1:9000", "http://127.0.0.1:9000/jwks.json").is_ok());
        assert!(plain("https://idp.example.com", "http://127.0.0.1:9000/jwks.json").is_err());
        assert!(plain("http://idp.example.com", "https://idp.example.com/jwks.json").is_err());
        assert!(plain("https://idp.example.com", "http://idp.example.com/jwks.json").is_err());
        // The audience is the resource URI the metadata publishes: absolute, https.
        let audience = |audience: &str| {
            oauth(&format!(
                "issuer = \"https://idp.example.com\"\naudience = {audience:?}\njwks = {{ file = \"j\" }}\ntenant_claim = \"org\""
            ))
        };
        assert!(audience("https://mcp.example.com/mcp").is_ok());
        assert!(audience("http://127.0.0.1:8080/mcp").is_ok());
        for refused in
            ["", "mcp", "/mcp", "http://mcp.example.com/mcp", "https://mcp.example.com/mcp?x=1", "urn:mcp"]
        {
            let error = audience(refused).unwrap_err();
            assert!(
                format!("{error:#}").contains("must be this server's resource URI"),
                "{refused}: {error:#}"
            );
        }
    }

    #[test]
    fn limits_cascade_from_defaults_to_component_to_tool() {
        let config: Config = toml::from_str(
            r#"
            [server]
            max_concurrent_calls = 8
            cache = false
            [[components]]
            path = "tools.wasm"
            data_dir = "data"
            limits = { memory_mb = 32, idle_timeout_ms = 0, stderr_kb = 8 }
            [components.tools.spin]
            max_duration_ms = 1500
            host_resources = 100
            "#,
        )
        .unwrap();
        let plan = config.plan(Path::new("/etc/cordon")).unwrap();
        assert_eq!(plan.runtime.engine.max_concurrent_calls, 8);
        assert_eq!(plan.runtime.engine.cache_dir, None);
        assert_eq!(plan.server_limits, ServerLimits::default());
        assert_eq!(plan.http.max_connections_per_ip, 1024);
        let component = &plan.components[0];
        assert_eq!(component.path, Path::new("/etc/cordon/tools.wasm"));
        assert_eq!(component.options.data_dir.as_deref(), Some(Path::new("/etc/cordon/data")));
        assert_eq!(component.options.limits.memory_bytes, 32 << 20);
        assert_eq!(component.options.limits.idle_timeout, None);
        let spin = component.options.limits_for("spin");
        assert_eq!(spin.max_duration, Some(Duration::from_millis(1500)));
        assert_eq!(spin.memory_bytes, 32 << 20, "tool limits build on the component's");
        assert_eq!((spin.host_resources, spin.stderr_bytes), (100, 8 << 10));
        assert_eq!(component.options.limits_for("echo").max_duration, ToolLimits::default().max_duration);
    }

    /// A pool smaller than the default memory_mb takes a component that sets none: its
    /// calls get the pool's size. (Written above the pool, memory_mb is a load error.)
    #[test]
    fn the_default_memory_limit_fits_a_smaller_pool() {
        let config: Config =
            toml::from_str("[server]\nmax_memory_mb = 32\n[[components]]\npath = \"tools.wasm\"\n").unwrap();
        let plan = config.plan(Path::new("/etc/cordon")).unwrap();
        assert_eq!(plan.components[0].options.limits.memory_bytes, 32 << 20);
        // The example tools, served without a [[components]] table, alike.
        let config: Config = toml::from_str("[server]\nmax_memory_mb = 32\n").unwrap();
        let plan = config.plan(Path::new("/etc/cordon")).unwrap();
        assert_eq!(plan.components[0].options.limits.memory_bytes, 32 << 20);
    }

    #[test]
    fn a_data_directory_is_granted_only_when_configured() {
        let config: Config = toml::from_str(
            "[[components]]\npath = \"a.wasm\"\n[[components]]\npath = \"b.wasm\"\ndata_dir = true\n\
             [[components]]\npath = \"c.wasm\"\ndata_dir = false\n",
        )
        .unwrap();
        let plan = config.plan(Path::new("/etc/cordon")).unwrap();
        let dirs: Vec<_> =
            plan.components.iter().map(|component| component.options.data_dir.clone()).collect();
        assert_eq!(dirs, [None, Some(paths::default_data_dir("b").unwrap()), None]);
    }

    #[test]
    fn a_data_directory_has_a_quota_of_1_gib_unless_given_and_only_a_data_directory_has_one() {
        let plan = |text: &str| toml::from_str::<Config>(text).unwrap().plan(Path::new("/etc/cordon"));
        let quotas: Vec<_> = plan(
            "[[components]]\npath = \"a.wasm\"\ndata_dir = true\n\
             [[components]]\npath = \"b.wasm\"\ndata_dir = \"b\"\ndata_quota_mb = 5\n",
        )
        .unwrap()
        .components
        .iter()
        .map(|component| component.options.data_quota_bytes)
        .collect();
        assert_eq!(quotas, [1 << 30, 5 << 20]);
        let error = plan("[[components]]\npath = \"a.wasm\"\ndata_quota_mb = 5\n").unwrap_err();
        assert!(format!("{error:#}").contains("data_quota_mb is for a data_dir"), "{error:#}");
    }

    #[test]
    fn component_names_are_safe_and_distinct() {
        let plan = |text: &str| toml::from_str::<Config>(text).unwrap().plan(Path::new("/etc/cordon"));
        let error =
            plan("[[components]]\npath = \"a/x.wasm\"\n[[components]]\npath = \"b/x.wasm\"\n").unwrap_err();
        assert!(format!("{error:#}").contains("both named \"x\""), "{error:#}");
        let error =
            plan("[[components]]\npath = \"a/x.wasm\"\n[[components]]\npath = \"b/X.wasm\"\n").unwrap_err();
        assert!(format!("{error:#}").contains("alike but for case"), "{error:#}");
        let error = plan("[[components]]\npath = \"...wasm\"\ndata_dir = true\n").unwrap_err();
        assert!(format!("{error:#}").contains("has the name \"..\""), "{error:#}");
        for bad in ["../up", "a/b", ".hidden", "", "sp ace"] {
            let text = format!("[[components]]\npath = \"x.wasm\"\nname = {bad:?}\n");
            assert!(plan(&text).is_err(), "{bad:?} was accepted");
        }
        let plan = plan(
            "[[components]]\npath = \"a/x.wasm\"\nname = \"first\"\ndata_dir = true\n\
             [[components]]\npath = \"b/x.wasm\"\ndata_dir = true\n",
        )
        .unwrap();
        let dirs: Vec<_> = plan.components.iter().map(|c| c.options.data_dir.clone().unwrap()).collect();
        assert_eq!(dirs, [paths::default_data_dir("first").unwrap(), paths::default_data_dir("x").unwrap()]);
    }

    #[test]
    fn secret_headers_are_read_bound_to_allow_http_rules_and_never_shown() {
        let dir = std::env::temp_dir().join(format!("cordon-config-headers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cr3t-header\n").unwrap();
        let text = |to: &str| {
            format!(
                "[[components]]\npath = \"a.wasm\"\nallow_http = [\"https://api.example.com\"]\n\
                 [[components.secret_headers]]\nheader = \"authorization\"\n\
                 secret = {{ file = \"token\" }}\nprefix = \"Bearer \"\nto = [{to:?}]\n"
            )
        };
        let config: Config = toml::from_str(&text("https://api.example.com")).unwrap();
        assert!(config.files_read(&dir).1.contains(&dir.join("token")), "a secret file the server reads");
        let plan = config.plan(&dir).unwrap();
        let grants = &plan.components[0].options.allow_http;
        assert_eq!(grants.describe_secret_headers(), ["authorization -> https://api.example.com:443"]);
        assert!(!format!("{plan:?}").contains("s3cr3t"));
        let config: Config = toml::from_str(&text("https://elsewhere.example.com")).unwrap();
        let error = format!("{:#}", config.plan(&dir).unwrap_err());
        assert!(
            error.contains("component a: secret header \"authorization\"")
                && error.contains("not one of allow_http")
        );
        assert!(!error.contains("s3cr3t"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn environment_and_secrets_are_resolved_and_never_shown() {
        let dir = std::env::temp_dir().join(format!("cordon-config-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cr3t-from-file\n").unwrap();
        let config: Config = toml::from_str(
            "[[components]]\npath = \"a.wasm\"\nenv = { REGION = \"eu\" }\n\
             secrets = { TOKEN = { file = \"token\" } }\n",
        )
        .unwrap();
        let plan = config.plan(&dir).unwrap();
        let environment = &plan.components[0].options.environment;
        assert_eq!(
            environment.variables(),
            [("REGION".to_owned(), "eu".to_owned()), ("TOKEN".to_owned(), "s3cr3t-from-file".to_owned())]
        );
        let shown = format!("{plan:?}");
        assert!(shown.contains("TOKEN") && !shown.contains("s3cr3t") && !shown.contains("\"eu\""), "{shown}");

        let missing = toml::from_str::<Config>(
            "[[components]]\npath = \"a.wasm\"\nsecrets = { T = { env = \"CORDON_NO_SUCH_VARIABLE\" } }\n",
        )
        .unwrap()
        .plan(&dir)
        .unwrap_err();
        assert!(
            format!("{missing:#}")
                .contains("secret T: the server's environment has no usable CORDON_NO_SUCH_VARIABLE")
        );
        let both = toml::from_str::<Config>(
            "[[components]]\npath = \"a.wasm\"\nenv = { T = \"x\" }\nsecrets = { T = { file = \"token\" } }\n",
        )
        .unwrap()
        .plan(&dir)
        .unwrap_err();
        assert!(format!("{both:#}").contains("T is in both"), "{both:#}");
        assert!(
            toml::from_str::<Config>(
                "[[components]]\npath = \"a.wasm\"\nsecrets = { T = { vault = \"x\" } }\n"
            )
            .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_too_large_for_memory_are_errors() {
        for text in [
            "[server]\nmax_memory_mb = 17592186044416\n",
            "[http]\nmax_body_kb = 18014398509481984\n",
            "[http]\nlinger_kb = 18014398509481984\n",
            "[server]\nmax_queued_request_kb = 18014398509481984\n",
            "[server]\nmax_request_cost_kb = 18014398509481985\n",
            "[[components]]\npath = \"a.wasm\"\nlimits = { result_kb = 18014398509481984 }\n",
            "[[components]]\npath = \"a.wasm\"\n[components.tools.t]\nmemory_mb = 17592186044416\n",
            "[[components]]\npath = \"a.wasm\"\ndata_dir = true\ndata_quota_mb = 17592186044416\n",
        ] {
            let config: Config = toml::from_str(text).unwrap();
            let error = config.plan(Path::new("/etc/cordon")).unwrap_err();
            assert!(format!("{error:#}").contains("is too large"), "{text}: {error:#}");
        }
    }

    #[test]
    fn mounts_are_resolved_against_the_config_file_and_checked() {
        let plan = |text: &str| toml::from_str::<Config>(text).map_err(|error| error.to_string());
        let config = plan(
            "[[components]]\npath = \"a.wasm\"\n\
             [[components.mounts]]\nhost = \"ref\"\nguest = \"/ref\"\nmode = \"ro\"\n\
             [[components.mounts]]\nhost = \"/srv/scratch\"\nguest = \"/scratch\"\nmode = \"rw\"\nquota_mb = 2\n",
        )
        .unwrap();
        let planned = config.plan(Path::new("/etc/cordon")).unwrap();
        assert_eq!(
            planned.components[0].options.mounts,
            [
                Mount {
                    host: "/etc/cordon/ref".into(),
                    guest: "/ref".into(),
                    writable: false,
                    quota_bytes: None
                },
                Mount {
                    host: "/srv/scratch".into(),
                    guest: "/scratch".into(),
                    writable: true,
                    quota_bytes: Some(2 << 20)
                },
            ]
        );
        let error = plan("[[components]]\npath = \"a.wasm\"\n[[components.mounts]]\nhost = \"x\"\nguest = \"/x\"\nmode = \"wr\"\n")
            .unwrap_err();
        assert!(error.contains("wr"), "{error}");
        let ro_quota = plan(
            "[[components]]\npath = \"a.wasm\"\n[[components.mounts]]\nhost = \"x\"\nguest = \"/x\"\nmode = \"ro\"\nquota_mb = 1\n",
        )
        .unwrap()
        .plan(Path::new("/etc/cordon"))
        .unwrap_err();
        assert!(format!("{ro_quota:#}").contains("quota_mb is for `rw` mounts"), "{ro_quota:#}");
    }

    #[test]
    fn tenants_are_checked_and_their_keys_hashed() {
        let dir = std::env::temp_dir().join(format!("cordon-config-tenants-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keys"), "key-one-0123456789\nkey-two-0123456789\n").unwrap();
        let plan = |tenants: &str| {
            let text = format!(
                "[[components]]\npath = \"a.wasm\"\nname = \"tools\"\ndata_dir = \"/srv/d\"\n\
                 [[components]]\npath = \"b.wasm\"\n{tenants}"
            );
            toml::from_str::<Config>(&text).map_err(anyhow::Error::from).and_then(|config| config.plan(&dir))
        };
        let planned = plan(
            "[[tenants]]\nname = \"acme\"\ncomponents = [\"tools\"]\napi_keys = { file = \"keys\" }\n\
             max_concurrent_calls = 8\ncalls_per_second = 50\n\
             [[tenants]]\nname = \"beta\"\ncomponents = [\"tools\", \"b\"]\n",
        )
        .unwrap();
        assert_eq!(planned.tenants.names(), ["acme", "beta"]);
        assert_eq!(planned.runtime.tenants, 2, "the call slots are split among them");
        assert_eq!(planned.components[0].options.tenants, ["acme", "beta"]);
        assert_eq!(planned.components[1].options.tenants, ["beta"]);
        let acme = planned.tenants.get("acme").unwrap();
        assert_eq!(acme.view.max_concurrent_calls, Some(8));
        assert_eq!(acme.rate.as_ref().unwrap().per_second(), 50);
        let principal = planned.tenants.authenticate(Some(b"Bearer key-two-0123456789"), None).unwrap();
        assert_eq!(principal.tenant.as_str(), "acme");
        assert!(!format!("{planned:?}").contains("key-one"), "a key shows in the plan's Debug");

        // Path tricks in a tenant's name, unknown components, typos: config errors.
        for bad in ["..", "../up", "a/b", ".hidden", "", "sp ace", "x\\y"] {
            let error =
                plan(&format!("[[tenants]]\nname = {bad:?}\ncomponents = [\"tools\"]\n")).unwrap_err();
            assert!(format!("{error:#}").contains("a tenant's name is"), "{bad:?}: {error:#}");
        }
        let alike = plan(
            "[[tenants]]\nname = \"acme\"\ncomponents = [\"tools\"]\n\
             [[tenants]]\nname = \"Acme\"\ncomponents = [\"tools\"]\n",
        )
        .unwrap_err();
        assert!(format!("{alike:#}").contains("\"Acme\" and \"acme\", alike but for case"), "{alike:#}");
        let unknown = plan("[[tenants]]\nname = \"acme\"\ncomponents = [\"../tools\"]\n").unwrap_err();
        assert!(format!("{unknown:#}").contains("no component is named \"../tools\""), "{unknown:#}");
        assert!(plan("[[tenants]]\nname = \"acme\"\ncomponents = []\napi_key = \"x\"\n").is_err());
        let empty = plan("[[tenants]]\nname = \"acme\"\ncomponents = []\napi_keys = { env = \"CORDON_NO_SUCH_VARIABLE\" }\n")
            .unwrap_err();
        assert!(format!("{empty:#}").contains("CORDON_NO_SUCH_VARIABLE"), "{empty:#}");
        std::fs::write(dir.join("beta-keys"), "key-beta-0123456789\nkey-two-0123456789\n").unwrap();
        let shared = plan(
            "[[tenants]]\nname = \"acme\"\ncomponents = []\napi_keys = { file = \"keys\" }\n\
             [[tenants]]\nname = \"beta\"\ncomponents = []\napi_keys = { file = \"beta-keys\" }\n",
        )
        .unwrap_err();
        let shared = format!("{shared:#}");
        assert!(shared.contains("tenant beta: a key is also one of tenant acme's keys"), "{shared}");
        assert!(!shared.contains("key-two"), "{shared}");
        std::fs::write(dir.join("short-keys"), "key-beta-0123456789\nsecret\n").unwrap();
        let short =
            plan("[[tenants]]\nname = \"beta\"\ncomponents = []\napi_keys = { file = \"short-keys\" }\n")
                .unwrap_err();
        let short = format!("{short:#}");
        assert!(short.contains("tenant beta: key 2 is 6 bytes long; a key has 16 or more"), "{short}");
        assert!(!short.contains("secret"), "{short}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_epoch_tick_longer_than_a_tenth_of_a_second_is_an_error() {
        let plan = |tick: u64| {
            let text = format!("[server]\nepoch_tick_ms = {tick}\n[[components]]\npath = \"a.wasm\"\n");
            toml::from_str::<Config>(&text).unwrap().plan(Path::new("/etc/cordon"))
        };
        assert_eq!(plan(100).unwrap().runtime.engine.epoch_tick, Duration::from_millis(100));
        let error = plan(60_000).unwrap_err().to_string();
        assert!(error.contains("epoch_tick_ms = 60000 is too long: at most 100"), "{error}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error =
            toml::from_str::<Config>("[[components]]\npath = \"a.wasm\"\nmemroy_mb = 3\n").unwrap_err();
        assert!(error.to_string().contains("memroy_mb"), "{error}");
    }

    #[test]
    fn admission_and_per_address_keys_are_read() {
        let config: Config = toml::from_str(
            "[server]\nmax_queued_request_kb = 1024\nmax_request_cost_kb = 512\n\
             [http]\nmax_connections_per_ip = 8\nmax_header_connections_per_ip = 2\n\
             header_timeout_ms = 1500\nlinger_ms = 200\nlinger_kb = 64\nclose_delay_ms = 2500\n\
             [[components]]\npath = \"a.wasm\"\n",
        )
        .unwrap();
        let plan = config.plan(Path::new("/etc/cordon")).unwrap();
        assert_eq!(
            plan.server_limits,
            ServerLimits {
                max_queued_request_bytes: 1 << 20,
                max_request_cost: 512 << 10,
                ..ServerLimits::default()
            }
        );
        let http = &plan.http;
        assert_eq!((http.max_connections_per_ip, http.max_header_connections_per_ip), (8, 2));
        assert_eq!(http.header_timeout, Duration::from_millis(1500));
        assert_eq!((http.linger_timeout, http.linger_bytes), (Duration::from_millis(200), 64 << 10));
        assert_eq!(http.close_delay, Duration::from_millis(2500));
    }

    #[test]
    fn trusted_proxies_are_addresses_or_blocks() {
        let plan = |proxies: &str| {
            let text = format!("[http]\ntrusted_proxies = {proxies}\n[[components]]\npath = \"a.wasm\"\n");
            toml::from_str::<Config>(&text).unwrap().plan(Path::new("/etc/cordon"))
        };
        let trusted = plan(r#"["10.0.0.0/8", "::1"]"#).unwrap().http.trusted_proxies;
        assert!(trusted.contains("10.1.2.3".parse().unwrap()) && trusted.contains("::1".parse().unwrap()));
        assert!(!trusted.contains("11.0.0.1".parse().unwrap()));
        let error = plan(r#"["10.0.0.0/8", "proxy.internal"]"#).unwrap_err().to_string();
        assert!(error.contains(r#"[http] trusted_proxies: "proxy.internal" is not an address"#), "{error}");
    }
}
