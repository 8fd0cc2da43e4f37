//! # The runtime: tool components, instances, and stopping them
//!
//! The runtime owns the wasmtime engine, the loaded components and the instance pool. The
//! layers above it (protocol, transports) ask it for a [`Call`], run it, and may cancel it
//! through its [`CallHandle`]; everything about stopping a call lives in [`call`].
//!
//! - [`engine`]: the engine configuration, the epoch ticker, the compile cache.
//! - [`component`]: loading and checking a component, reading its tool list.
//! - [`features`]: a `cordon:tool@0.2.0` component's resources, prompts and completions,
//!   each request run as a call.
//! - [`input`]: a 0.2.0 call that asks the client for input (elicitation, sampling, roots):
//!   what a round hands the guest, and the bounds on what it asks.
//! - [`call`]: one call, from instance to outcome, and the cleanup after a stop.
//! - [`events`]: the one typed event per call end, and the observers that get it.
//! - `control`: the control block a call shares with its guest and its handle.
//! - `guest`: the store's data and the host side of the guest's imports.
//! - `files`: a component's data directory and mounts, opened once, and the guards on
//!   its files.
//! - `quota`: a read-write mount's `quota_mb`, charged at every write.
//! - `opening`: every name a guest opens, opened so that nothing a host process left
//!   there (a FIFO) can hold a thread.
//! - `ledger`: what a call makes the host hold (host memory, descriptors), charged to it.
//! - `streams`: a call's file streams, at most a few of their reads and writes on
//!   blocking threads at once.
//! - `waits`: a stop wakes a guest parked in a host wait.
//! - `spare`: instances made ahead of the calls that will use them.
//! - `schema`: checking arguments and structured output against a tool's schemas, bounded.
//! - `plain`: plain components (exported typed functions, no Cordon world) as tools.
//! - [`limits`]: per-tool limits.
//! - [`registry`]: the set of loaded components, a snapshot swapped whole at a reload.
//! - `relist`: a component listed again after a call said its lists changed.

mod bindings;
pub mod call;
pub mod component;
mod control;
mod egress;
pub mod engine;
pub mod events;
mod fair;
pub mod features;
mod files;
mod guest;
pub mod input;
mod ledger;
pub mod limits;
mod moves;
mod opening;
mod plain;
mod quota;
pub mod registry;
mod relist;
mod schema;
mod spare;
mod streams;
mod waits;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use bindings::{Content, EmbeddedResource, Media, ResourceLink, ToolAnnotations};
pub use call::{
    Call, CallHandle, CallReport, CleanupOutcome, CleanupReport, Outcome, Teardown, Timeout, ToolResult,
};
pub use component::{
    ComponentOptions, ComponentSource, DEFAULT_DATA_QUOTA_BYTES, Environment, Interfaces, LoadError,
    MAX_SCHEMA_BYTES, ParamHeader, ParamKind, ToolSpec, grant_warnings,
};
pub use control::{CLIENT_LOG_QUEUE, LogLevel, LogLine, MAX_CLIENT_LOG_LINE, MAX_PROGRESS_MESSAGE, Progress};
pub(crate) use egress::tls_config as web_tls_client_config;
pub use egress::{GrantError, HttpGrants, SecretHeaderError};
use engine::CompilePriority;
pub use engine::{CompileCache, EngineSettings};
pub use events::{
    CallEnded, CallObserver, CallOutcome, CallTags, CleanupEnded, CleanupResult, RefusalReason, StopPath,
};
pub use features::{FeatureAnswer, FeatureError, FeatureRequest};
pub use files::{GUEST_DATA_DIR, Mount};
pub use input::{ClientAbilities, Elicitation, InputRequest, InputRequired, InputRound, MAX_INPUT_STATE};
pub use ledger::{DescriptorBudget, raise_open_file_limit};
pub use limits::ToolLimits;
pub use plain::ArgumentError;
pub use registry::{ReloadReport, TenantView, ToolSet};
pub use relist::{RELIST_INTERVAL, RETIRED_SETS_MOST};
pub use schema::CHECK_BUDGET as SCHEMA_CHECK_BUDGET;

use component::LoadedComponent;
use control::CallControl;
use guest::GuestState;

/// A compile under way ([`Runtime::compile`]): the component ready to instantiate and the
/// SHA-256 of its bytes.
type Compiling = tokio::task::JoinHandle<Result<(component::Prepared, [u8; 32]), LoadError>>;

/// Runtime-wide settings.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    pub engine: EngineSettings,
    /// How long a call waits for a free slot when every slot is busy, before it is refused.
    pub queue_timeout: Duration,
    /// Time budget for a component's `list` at load time.
    pub list_budget: Duration,
    /// Descriptors of the process that guests never get: the listener, connections, logs
    /// and the compile cache keep these whatever calls open. Guests share the rest of
    /// the process's limit (`RLIMIT_NOFILE`), each call within its `open_files`.
    pub reserved_descriptors: usize,
    /// Files the server reads that no guest may be granted to write (the config, its
    /// secret and key files, the components' files): see [`Runtime::protect_files`].
    pub server_files: Vec<PathBuf>,
    /// Files holding secrets (`secrets`, `api_keys`), which no guest may be granted to
    /// read either.
    pub secret_files: Vec<PathBuf>,
    /// How many tenants share the call slots (`[[tenants]]`): with two or more, each has
    /// a guaranteed part of them (runtime/fair.rs).
    pub tenants: usize,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            engine: EngineSettings::default(),
            queue_timeout: Duration::from_secs(5),
            list_budget: Duration::from_secs(5),
            reserved_descriptors: 256,
            server_files: Vec::new(),
            secret_files: Vec::new(),
            tenants: 0,
        }
    }
}

/// The component's and the tool's names, for a tool of `tools` only.
fn known_tool(tools: &ToolSet, view: Option<&TenantView>, tool: &str) -> Option<(Arc<str>, Arc<str>)> {
    let component = tools.component_for(view, tool)?;
    Some((component.name.clone(), component.schemas.get(tool)?.name.clone()))
}

/// One component's part in a reload.
enum Step {
    /// Served as it is (unchanged, or kept after its file could not be read).
    Stay(Arc<LoadedComponent>),
    /// To be loaded from these bytes; the old version, if any, stays if that fails.
    Load(Box<ComponentSource>, String, Vec<u8>, Option<Arc<LoadedComponent>>),
    /// New, and unreadable: left out.
    Skip,
}

/// Why `name`'s files (`grants`) cannot sit beside `others`: a directory of one overlaps
/// one of another where either may be written. A guest could otherwise change what the
/// other sees, or replace a directory inside the other's with a symlink.
fn files_conflict(
    name: &str,
    origin: &str,
    grants: &files::FileGrants,
    others: &[Arc<LoadedComponent>],
) -> Option<LoadError> {
    others.iter().find_map(|other| {
        // Its grants for calls of no tenant, and each tenant's (its data directory apart).
        let mut theirs_all = other.files.iter().chain(other.tenant_files.values());
        let (mine, theirs) = theirs_all.find_map(|other_files| grants.conflict(other_files))?;
        let what = |grant: &files::Grant| {
            if grant.guest == GUEST_DATA_DIR { "the data directory" } else { "the mount" }
        };
        Some(LoadError::new(
            origin,
            format!(
                "{} of component {name} ({}) overlaps {} of component {} ({}): each component needs \
                 a directory of its own, neither inside the other, unless both only read it",
                what(mine),
                mine.describe(),
                what(theirs),
                other.name,
                theirs.describe()
            ),
        ))
    })
}

/// Why `name`'s own `file` may not be loaded: it lies inside a writable grant of one of
/// `beside` (another component: one of the same name is its older version), whose guests
/// could replace the code it runs (with its grants); one of a version still running:
/// not yet.
fn file_in_writable_grant(name: &str, origin: &str, file: &Path, beside: &Beside) -> Option<LoadError> {
    let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_owned());
    let inside = |other: &str, files: &files::FileGrants| {
        let grant = files.grants.iter().find(|grant| grant.writable && file.starts_with(&grant.path))?;
        Some(format!(
            "the file of component {name} is inside {} of component {other}, whose guests could replace \
             the code this component runs, with this component's grants",
            grant.describe()
        ))
    };
    let of_others = beside.components.iter().filter(|other| *other.name != *name).find_map(|other| {
        let mut files = other.files.iter().chain(other.tenant_files.values());
        let what = files.find_map(|files| inside(&other.name, files))?;
        Some(LoadError::new(origin, format!("{what}: move the file or the grant")))
    });
    // Versions still running are as able to write it, until they end.
    of_others.or_else(|| {
        let mut draining = beside.draining.iter().filter(|other| *other.name != *name);
        draining.find_map(|other| Some(waiting_on(origin, other, inside(&other.name, &other.files)?)))
    })
}

/// Grants of a component version that may still run guest code beside the versions a
/// reload builds: the version served until the reload's swap, or one swapped out whose
/// calls (and their stores, which hold its grants) still run, up to its `max_duration`.
#[derive(Clone)]
struct Draining {
    name: Arc<str>,
    files: Arc<files::FileGrants>,
    /// Of the version served now, whose calls end only after the swap.
    served: bool,
}

/// What a component being loaded is checked beside: the components of the set it joins,
/// and the versions that may still run calls beside them.
#[derive(Clone)]
struct Beside {
    components: Vec<Arc<LoadedComponent>>,
    draining: Vec<Draining>,
}

impl Beside {
    /// `components` alone.
    fn of(components: &[Arc<LoadedComponent>]) -> Self {
        Self { components: components.to_vec(), draining: Vec::new() }
    }
}

/// Why `name`'s `grants` cannot be opened yet beside `draining`: one overlaps a grant of a
/// version still running where either may be written. Its calls could read and write
/// what the new grant holds, outside the new grant's quota and move lock. The same
/// directory of the same component's versions is one grant (one quota, one move lock).
/// A conflict with a version that will drain is `busy` (the reloader tries again); one
/// with the same component's served version never drains before the swap, so it is not.
fn draining_conflict(
    name: &str,
    origin: &str,
    grants: &files::FileGrants,
    draining: &[Draining],
) -> Option<LoadError> {
    draining.iter().find_map(|other| {
        let same_component = *other.name == *name;
        let (mine, theirs) = grants
            .grants
            .iter()
            .flat_map(|mine| other.files.grants.iter().map(move |theirs| (mine, theirs)))
            .find(|(mine, theirs)| {
                mine.conflicts_with(theirs) && !(same_component && mine.path == theirs.path)
            })?;
        if same_component && other.served {
            return Some(LoadError::new(
                origin,
                format!(
                    "{} of component {name} overlaps {} of the version it replaces, whose calls could \
                     reach it: move a directory into or around its old place in two reloads (remove \
                     the component, then add it back)",
                    mine.describe(),
                    theirs.describe()
                ),
            ));
        }
        let overlap = format!(
            "{} of component {name} overlaps {} of component {}",
            mine.describe(),
            theirs.describe(),
            other.name
        );
        Some(waiting_on(origin, other, overlap))
    })
}

/// The error of a component whose grants (or file) meet those of `other`, a version that
/// may still run calls (`what` says how): busy, loaded once those calls end; but should
/// `other` be a served version that this reload keeps (its update failed, say), it never
/// goes, which [`Runtime::reload`] tells once the set is decided.
fn waiting_on(origin: &str, other: &Draining, what: String) -> LoadError {
    let stays = format!(
        "{what}, which stays served: give each component a directory of its own, or move one \
         between components in two reloads (first out of one, then into the other)"
    );
    LoadError {
        busy: true,
        unless_kept: other.served.then_some((Arc::as_ptr(&other.files) as usize, stays)),
        ..LoadError::new(
            origin,
            format!(
                "{what}, a version a reload replaces or removed whose calls may still run: it is loaded \
                 once they have ended"
            ),
        )
    }
}

/// What the server itself reads, as the file system resolves it.
#[derive(Clone)]
struct ServerPaths {
    /// The compile cache holds native code the server runs: a guest that could write it
    /// could plant its own (the entries' digests stop corruption, not a writer).
    cache: Option<PathBuf>,
    /// The config and the issuer's key set.
    files: Arc<[PathBuf]>,
    /// The files that hold secrets and API keys.
    secrets: Arc<[PathBuf]>,
    /// The files of the components being loaded (set by each load and reload): no new
    /// grant may be written around one. A component that stays is not refused for one (a
    /// new component's file inside its grant refuses the new one: what is served wins).
    components: Arc<[PathBuf]>,
}

impl ServerPaths {
    /// Why one of `grants` may not be granted: any one around a secret file, a writable
    /// one inside or around the cache or around a server file (a component's too, with
    /// `components`).
    fn problem_with(&self, grants: &files::FileGrants, components: bool) -> Option<String> {
        let around_secret = |grant: &files::Grant| {
            let secret = deepest_inside(self.secrets.iter(), grant)?;
            Some(format!(
                "{} holds {}, a secret file: every guest given the grant could read each secret and key \
                 in it; move the file or the grant",
                grant.describe(),
                secret.display()
            ))
        };
        if let Some(problem) = grants.grants.iter().find_map(around_secret) {
            return Some(problem);
        }
        grants.grants.iter().filter(|grant| grant.writable).find_map(|grant| {
            if let Some(cache) = self
                .cache
                .as_ref()
                .filter(|cache| grant.path.starts_with(cache) || cache.starts_with(&grant.path))
            {
                return Some(format!(
                    "{} is inside or around the compile cache {}: a guest that may write there could \
                     plant native code the server runs; move the cache (`[server] cache_dir`) or the grant",
                    grant.describe(),
                    cache.display()
                ));
            }
            let components = if components { &self.components[..] } else { &[] };
            let file = deepest_inside(self.files.iter().chain(components), grant)?;
            Some(format!(
                "{} holds {}, which the server reads: a guest that may write there could change what a \
                 reload grants or runs; move the file or the grant",
                grant.describe(),
                file.display()
            ))
        })
    }
}

/// The deepest of `paths` inside `grant` (a file rather than a directory on its way); the
/// grant's own root is not inside it (no guest can replace it).
fn deepest_inside<'a>(paths: impl Iterator<Item = &'a PathBuf>, grant: &files::Grant) -> Option<&'a PathBuf> {
    let inside = |path: &&PathBuf| path.starts_with(&grant.path) && **path != grant.path;
    paths.filter(inside).max_by_key(|path| path.as_os_str().len())
}

/// Where `files` are, as paths a grant (a real path) may hold: each file as the file
/// system resolves it, and every directory entry on the way to it as written (a symlink
/// on the way, replaced by a guest that may write where it lies, would lead the server's
/// next read elsewhere). `before` are kept: a file the server read once may be read again
/// (the issuer's key set, an `api_keys` file, read at start and kept) whatever a later
/// config says.
/// With `on_the_way` false, the files alone (what a read-only grant could read).
fn resolved(before: &[PathBuf], files: &[PathBuf], on_the_way: bool) -> Arc<[PathBuf]> {
    let mut entries: Vec<PathBuf> = before.to_vec();
    for file in files {
        let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        entries.extend(std::fs::canonicalize(&file));
        if !on_the_way {
            continue;
        }
        for entry in file.ancestors().filter(|entry| entry.parent().is_some()) {
            let (Some(parent), Some(name)) = (entry.parent(), entry.file_name()) else { continue };
            entries.push(std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_owned()).join(name));
        }
    }
    entries.sort();
    entries.dedup();
    entries.into()
}

/// Why a call could not start.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    #[error("arguments must be a JSON object")]
    ArgumentsNotObject,
    #[error("invalid arguments for tool {tool}: {problems}")]
    InvalidArguments { tool: String, problems: String },
    /// The tool's input schema could not be checked in time: the tool is at fault.
    #[error(
        "tool {tool} cannot be called: its arguments could not be checked against its input schema: {reason}"
    )]
    ArgumentsUnchecked { tool: String, reason: String },
    #[error("the server is busy: all {slots} call slots stayed in use for {waited:?}; try again later")]
    Busy { slots: usize, waited: Duration },
    #[error(
        "the tenant's call limit is reached: its {slots} concurrent calls stayed in use for {waited:?}; try again later"
    )]
    TenantBusy { slots: usize, waited: Duration },
    #[error(
        "the tenant's share of the call slots stayed in use for {waited:?}: it holds its guaranteed part, and the other tenants hold the shared rest; try again later"
    )]
    TenantShareBusy { waited: Duration },
    #[error("the server is shutting down; the call did not start")]
    ShuttingDown,
}

impl CallError {
    /// The refusal as call events name it.
    pub fn reason(&self) -> RefusalReason {
        match self {
            Self::UnknownTool(_) => RefusalReason::UnknownTool,
            Self::ArgumentsNotObject | Self::InvalidArguments { .. } | Self::ArgumentsUnchecked { .. } => {
                RefusalReason::InvalidArguments
            }
            Self::Busy { .. } | Self::TenantBusy { .. } | Self::TenantShareBusy { .. } => RefusalReason::Busy,
            Self::ShuttingDown => RefusalReason::ShuttingDown,
        }
    }
}

/// What a component is, as `cordon inspect` shows it ([`Runtime::describe_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    pub interfaces: Interfaces,
    pub kind: ComponentKind,
    /// A plain component's exports that are not served, each with why.
    pub left_out: Vec<String>,
}

/// The world a component targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentKind {
    /// A Cordon tool component; `interface` is the `cordon:tool/tool` it exports, with its
    /// version.
    Cordon { interface: String },
    /// A plain component: its exported functions are its tools.
    Plain,
}

/// What the pool holds right now; all zero when no call runs and no spare instance is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    /// Calls holding a slot (running, or running their cleanup).
    pub calls: usize,
    /// Spare instances made ahead of calls (at most one per component).
    pub spares: usize,
    /// Linear memory the spare instances hold.
    pub spare_memory_bytes: usize,
    /// Component instances alive in the pooling allocator.
    pub component_instances: u64,
    /// Core instances alive in the pooling allocator.
    pub core_instances: u64,
    /// Linear memories alive in the pooling allocator.
    pub memories: usize,
    /// Host file descriptors guests hold beyond their stores' guarantees (open files and
    /// file streams).
    pub guest_descriptors: usize,
}

/// Loaded tool components and the means to run them.
pub struct Runtime {
    engine: Engine,
    ticker: Arc<engine::Ticker>,
    linker: Arc<Linker<GuestState>>,
    settings: RuntimeSettings,
    /// The components, swapped whole at a reload ([`registry`]); requests take a snapshot.
    tool_set: watch::Sender<Arc<ToolSet>>,
    /// Sets a reload or a listing swapped out, held no longer here: each lives on only as
    /// long as a request still runs on it, and a drain waits for their budgets too.
    retired_sets: std::sync::Mutex<Vec<std::sync::Weak<ToolSet>>>,
    /// The file grants of every component version loaded, by component name, while
    /// anything holds them (a set, a store of a call still running): what a reload checks
    /// new grants against besides the versions it keeps ([`Draining`]).
    loaded_files: std::sync::Mutex<Vec<(Arc<str>, std::sync::Weak<files::FileGrants>)>>,
    /// One reload at a time: each builds on the set the previous one left.
    reloading: tokio::sync::Mutex<()>,
    call_permits: Arc<Semaphore>,
    /// Who gets the next free call slot: tenants take turns (fair.rs).
    fair_slots: Arc<fair::FairSlots>,
    cleanup_permits: Arc<Semaphore>,
    /// Half of `cleanup_permits`' capacity (at least one): what the cleanups of calls that
    /// hold no call slot (stopped between rounds) may take at once.
    unslotted_cleanups: Arc<fair::FairSlots>,
    spares: Arc<spare::SpareBudget>,
    /// Host descriptors guests may hold, across every call.
    descriptors: Arc<DescriptorBudget>,
    shutdown: watch::Sender<bool>,
    next_call_id: AtomicU64,
    /// Who gets each call's [`CallEnded`].
    observers: events::Observers,
    compile_cache: Arc<CompileCache>,
    /// The compile cache's directory and the server's files as the file system resolves
    /// them: no guest may be granted to write around them (nor inside the cache).
    server_paths: std::sync::RwLock<ServerPaths>,
    /// The threads every schema's costly checks share (`schema.rs`).
    check_threads: Arc<schema::CheckThreads>,
    /// Components to list again: a call of theirs said `lists-changed` (relist.rs).
    relists: Arc<relist::Relists>,
}

impl Runtime {
    /// An engine, a linker with WASI (async) and the Cordon host imports, and no components.
    pub fn new(settings: RuntimeSettings) -> Result<Self> {
        let (engine, ticker) = engine::build_engine(&settings.engine)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        egress::shadow_http_types(&mut linker)?;
        files::shadow_filesystem(&mut linker)?;
        quota::shadow_quota(&mut linker)?;
        waits::wake_waits_on_stop(&mut linker)?;
        bindings::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        bindings::v2::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
        let slots = settings.engine.max_concurrent_calls;
        let process_limit = ledger::open_file_limit();
        let guest_descriptors = process_limit.saturating_sub(settings.reserved_descriptors);
        if guest_descriptors < ToolLimits::default().open_files {
            tracing::warn!(
                "the process may open {process_limit} files and {} are reserved for the server: guests \
                 share {guest_descriptors}; raise the hard limit (ulimit -Hn) or lower reserved_descriptors",
                settings.reserved_descriptors
            );
        }
        let runtime = Self {
            engine,
            ticker,
            linker: Arc::new(linker),
            tool_set: watch::Sender::new(Arc::default()),
            retired_sets: std::sync::Mutex::default(),
            loaded_files: std::sync::Mutex::default(),
            reloading: tokio::sync::Mutex::new(()),
            call_permits: Arc::new(Semaphore::new(slots)),
            fair_slots: {
                if let Some(warning) = fair::too_few_slots(slots, settings.tenants) {
                    tracing::warn!("{warning}");
                }
                fair::FairSlots::new(slots, settings.tenants)
            },
            cleanup_permits: Arc::new(Semaphore::new(slots)),
            unslotted_cleanups: fair::FairSlots::new((slots / 2).max(1), settings.tenants),
            spares: Arc::new(spare::SpareBudget::new()),
            // Every store the pool can hold at once is guaranteed a few descriptors.
            descriptors: Arc::new(DescriptorBudget::new(
                guest_descriptors,
                engine::pool_slots(&settings.engine),
            )),
            shutdown: watch::Sender::new(false),
            next_call_id: AtomicU64::new(1),
            observers: events::Observers::default(),
            compile_cache: Arc::default(),
            server_paths: std::sync::RwLock::new(ServerPaths {
                cache: settings.engine.cache_dir.as_deref().map(engine::prepare_cache_dir),
                files: Arc::default(),
                secrets: Arc::default(),
                components: Arc::default(),
            }),
            check_threads: Arc::default(),
            relists: Arc::default(),
            settings,
        };
        runtime.protect_files(&runtime.settings.server_files, &runtime.settings.secret_files);
        Ok(runtime)
    }

    /// Refuse, from the next load or reload on, any writable grant around one of `files`
    /// (the config, the issuer's key set; a reload hands the new config's, added to those
    /// before) or around a component's file (those of each load's sources), any grant at
    /// all around one of `secrets`, and any component whose own file is inside another's
    /// writable grant; a reload also drops a component it keeps whose grants now hold one
    /// of `files` or `secrets`. A guest that could rewrite a file the
    /// server reads would, at the next reload (`serve --watch` reloads when one changes),
    /// grant itself what it wrote there or run its code as another component, with that
    /// component's grants; one that could read a secret file would hold every secret and
    /// API key in it, its tenant's or not.
    pub fn protect_files(&self, files: &[PathBuf], secrets: &[PathBuf]) {
        let mut paths = self.server_paths.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A secret file is also a file the server reads: where a symlink on its way lies, a
        // guest that may write could lead the next read of it elsewhere.
        let read = [files, secrets].concat();
        (paths.files, paths.secrets) =
            (resolved(&paths.files, &read, true), resolved(&paths.secrets, secrets, false));
    }

    /// Hand every call's end to `observer` too, from now on (set before serving).
    pub fn observe(&mut self, observer: Arc<dyn CallObserver>) {
        self.observers = self.observers.with(observer);
    }

    /// How the compile cache has served the components loaded so far.
    pub fn compile_cache(&self) -> &CompileCache {
        &self.compile_cache
    }

    /// The call slots of the instance pool.
    pub fn call_slots(&self) -> usize {
        self.settings.engine.max_concurrent_calls
    }

    /// Tell the observers of a call that ended before it ran, outside [`Runtime::call_as`]
    /// (refused for a malformed request, or cancelled while it waited for a slot); the
    /// event names `tool` only when it is loaded and in `view` (a tenant naming another
    /// tenant's tool must not make its refusals count as that tool's, in metrics or logs).
    pub fn report_unstarted(&self, mut event: CallEnded, view: Option<&TenantView>, tool: Option<&str>) {
        if self.observers.is_empty() {
            return;
        }
        if let Some((component, tool)) = tool.and_then(|tool| known_tool(&self.snapshot(), view, tool)) {
            event.component = Some(component);
            event.tool = Some(tool);
        }
        self.observers.emit(&event);
    }

    /// Load the component in `path`; its name is the file's stem.
    pub async fn load_file(&mut self, path: &Path, options: ComponentOptions) -> Result<(), LoadError> {
        let name = path
            .file_stem()
            .map_or_else(|| path.display().to_string(), |stem| stem.to_string_lossy().into_owned());
        self.load_named_file(&name, path, options).await
    }

    /// Load the component in `path` under `name`.
    pub async fn load_named_file(
        &mut self,
        name: &str,
        path: &Path,
        options: ComponentOptions,
    ) -> Result<(), LoadError> {
        let source = ComponentSource { name: name.into(), path: path.into(), embedded: None, options };
        let origin = source.origin();
        let compiling = self.compile(&origin, source.reader(), CompilePriority::Startup);
        self.add_compiled(name, &origin, Some(path), compiling, source.options).await
    }

    /// Load a component from bytes (binary, or component WAT text).
    pub async fn load_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
        options: ComponentOptions,
    ) -> Result<(), LoadError> {
        let bytes = bytes.to_vec();
        let compiling = self.compile(name, move || Ok(bytes), CompilePriority::Startup);
        self.add_compiled(name, name, None, compiling, options).await
    }

    /// Load `sources` in order, as [`Self::load_named_file`] (or [`Self::load_bytes`], for
    /// one embedded in the binary, named by its name) would one after another, but with up
    /// to one compile per core under way ahead of the component being loaded: wasmtime
    /// compiles a component's functions in parallel but the rest of it on one thread, and
    /// a start with many components is mostly compiles (500 small ones kept 1.35 of 2 cores
    /// busy one at a time; BENCHMARKS.md, "Time to ready"). Every component is tried;
    /// those that fail are left out, and their errors returned in order.
    pub async fn load_all(&mut self, sources: Vec<ComponentSource>) -> Vec<LoadError> {
        self.loading_files(&sources);
        let ahead = std::thread::available_parallelism().map_or(1, usize::from);
        let mut sources = sources.into_iter();
        let mut compiling = std::collections::VecDeque::new();
        let mut failed = Vec::new();
        loop {
            while compiling.len() < ahead
                && let Some(source) = sources.next()
            {
                let origin = source.origin();
                let started = self.compile(&origin, source.reader(), CompilePriority::Startup);
                compiling.push_back((source, origin, started));
            }
            let Some((source, origin, started)) = compiling.pop_front() else { break };
            if let Err(error) = self
                .add_compiled(&source.name, &origin, source.file().as_deref(), started, source.options)
                .await
            {
                failed.push(error);
            }
        }
        failed
    }

    /// Finish loading a component whose compile is under way, and add it to the set.
    async fn add_compiled(
        &mut self,
        name: &str,
        origin: &str,
        file: Option<&Path>,
        compiling: Compiling,
        options: ComponentOptions,
    ) -> Result<(), LoadError> {
        let current = self.snapshot();
        // `&mut self`: nothing is served yet.
        // Nothing is served yet, so no other version runs calls: the set is all there is to
        // check against (walking every loaded grant per load made start-up quadratic).
        let loaded =
            self.build(name, origin, file, compiling, options, Beside::of(&current.components)).await?;
        if let Some(clash) = current.clash(origin, &loaded) {
            return Err(clash);
        }
        // Added in place (the set is copied only if someone still holds a snapshot of it):
        // a copy per component made loading n components quadratic.
        drop(current);
        loaded.apply_quota_limits();
        self.tool_set.send_modify(|set| Arc::make_mut(set).push(Arc::new(loaded)));
        Ok(())
    }

    /// Start compiling the bytes `read` gives at `priority`, on the blocking pool (a reload
    /// must not hold up the threads that serve calls): the component ready to instantiate,
    /// and the SHA-256 of its bytes.
    fn compile(
        &self,
        origin: &str,
        read: impl FnOnce() -> std::io::Result<Vec<u8>> + Send + 'static,
        priority: CompilePriority,
    ) -> Compiling {
        let cache_dir = self.settings.engine.cache_dir.clone();
        let (engine, linker, origin) = (self.engine.clone(), self.linker.clone(), origin.to_owned());
        let compile_cache = self.compile_cache.clone();
        tokio::task::spawn_blocking(move || {
            use sha2::Digest;
            let bytes = read().map_err(|error| LoadError::new(&origin, format!("cannot read: {error}")))?;
            let digest: [u8; 32] = sha2::Sha256::digest(&bytes).into();
            engine::compile_at(priority, || {
                component::prepare(&engine, &linker, &origin, &bytes, cache_dir.as_deref(), &compile_cache)
            })
            .map(|prepared| (prepared, digest))
        })
    }

    /// Open the component's files, check them (and its own `file`, when it was read from
    /// one) against what it joins (`beside`), take what `compiling` made, and read its tools.
    async fn build(
        &self,
        name: &str,
        origin: &str,
        file: Option<&Path>,
        compiling: Compiling,
        options: ComponentOptions,
        beside: Beside,
    ) -> Result<LoadedComponent, LoadError> {
        self.check_memory_limits(name, origin, &options)?;
        // On the blocking pool: opening directories is file system work, and measuring a
        // quota walks a tree a guest filled (up to a name per 4 KiB of quota), which must
        // not hold up a thread that serves calls (a reload runs beside them).
        let opening = {
            let (name, origin, options) = (name.to_owned(), origin.to_owned(), options.clone());
            let file = file.map(Path::to_path_buf);
            let paths = self.server_paths.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            tokio::task::spawn_blocking(move || {
                if let Some(error) =
                    file.and_then(|file| file_in_writable_grant(&name, &origin, &file, &beside))
                {
                    return Err(error);
                }
                Self::open_tenant_files(&name, &origin, &options, &beside, &paths)
            })
        };
        let (files, tenant_files) = opening
            .await
            .map_err(|error| LoadError::new(origin, format!("opening its directories failed: {error}")))??;
        {
            let mut loaded_files =
                self.loaded_files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            loaded_files.retain(|(_, files)| files.strong_count() > 0);
            for files in files.iter().chain(tenant_files.values()) {
                loaded_files.push((name.into(), Arc::downgrade(files)));
            }
        }
        let (prepared, digest) = compiling
            .await
            .map_err(|error| LoadError::new(origin, format!("compiling failed: {error}")))??;
        let component::Prepared { pre, plain_tools, warnings } = prepared;
        let interfaces = Interfaces::of(&self.engine, pre.component());
        for warning in grant_warnings(&interfaces.imports, &options).into_iter().chain(warnings) {
            tracing::warn!(component = name, "{warning}");
        }
        let mut loaded = LoadedComponent {
            name: name.into(),
            digest,
            pre,
            files,
            tenant_files,
            descriptors: self.descriptors.clone(),
            http_grants: Arc::new(egress::ComponentEgress::new(options.allow_http.clone())),
            options,
            tools: Vec::new(),
            schemas: HashMap::new(),
            spare: Default::default(),
            growth_hinted: Default::default(),
            offered: Default::default(),
        };
        self.list_into(&mut loaded, origin, plain_tools).await?;
        Ok(loaded)
    }

    /// Refuse a `memory_mb` (the component's, or a tool's) above the pool's size for one
    /// linear memory (`server.max_memory_mb`): the limiter would grant growth the pool's
    /// slot cannot hold, and the guest would see a failed grow it was told it may have
    /// (its trap then told as a crash, not as out of memory).
    fn check_memory_limits(
        &self,
        name: &str,
        origin: &str,
        options: &ComponentOptions,
    ) -> Result<(), LoadError> {
        let pool = self.settings.engine.max_memory_bytes;
        let mut limits: Vec<(Option<&String>, &ToolLimits)> = vec![(None, &options.limits)];
        limits.extend(options.tool_limits.iter().map(|(tool, limits)| (Some(tool), limits)));
        limits.sort_by_key(|(tool, _)| *tool);
        match limits.into_iter().find(|(_, limits)| limits.memory_bytes > pool) {
            None => Ok(()),
            Some((tool, limits)) => Err(LoadError::new(
                origin,
                format!(
                    "memory_mb = {} {} is more than server.max_memory_mb = {}, the most one linear memory may take: \
                     lower it or raise server.max_memory_mb",
                    limits.memory_bytes >> 20,
                    match tool {
                        Some(tool) => format!("for tool {tool:?} of component {name}"),
                        None => format!("for component {name}"),
                    },
                    pool >> 20,
                ),
            )),
        }
    }

    /// Run `loaded`'s `list` (and a 0.2.0 component's resource and prompt lists) and keep
    /// what it lists, checked as at load: valid tools, every tool with configured limits
    /// still there, schemas that compile. A plain component lists nothing: it keeps
    /// `plain_tools`. The listing takes a call slot, waiting for one no longer than a call
    /// would (the queue timeout): a reload or relist lists under the reload lock, and on a
    /// server whose every slot is held by long calls an unbounded wait would hold every
    /// later reload off until one of them ended. At start nothing is served, so a slot is
    /// always free.
    async fn list_into(
        &self,
        loaded: &mut LoadedComponent,
        origin: &str,
        plain_tools: Vec<ToolSpec>,
    ) -> Result<(), LoadError> {
        let name = loaded.name.clone();
        let (infos, features) = self
            .list_tools(loaded)
            .await
            .map_err(|(problem, busy)| LoadError { busy, ..LoadError::new(origin, problem) })?;
        // On the blocking pool: checking what a guest listed and compiling its schemas
        // takes time in proportion to what it listed (up to the host-call allowance), and
        // a relist runs beside calls.
        let checking = {
            let (origin, threads) = (origin.to_owned(), self.check_threads.for_component(&name));
            tokio::task::spawn_blocking(move || {
                let tools = match infos {
                    Some(infos) => component::tool_specs(&origin, infos)?,
                    None => plain_tools,
                };
                let offered = features
                    .map(|(catalog, prompts)| features::Offered::checked(&origin, catalog, prompts))
                    .transpose()?;
                let schemas = component::compile_schemas(&origin, &tools, &threads)?;
                Ok::<_, LoadError>((tools, offered, schemas))
            })
        };
        let (tools, offered, schemas) = checking
            .await
            .map_err(|error| LoadError::new(origin, format!("checking its lists failed: {error}")))??;
        loaded.tools = tools;
        if let Some(offered) = offered {
            loaded.offered = offered;
        }
        let mut configured: Vec<&String> = loaded.options.tool_limits.keys().collect();
        configured.sort();
        for tool in configured {
            if !loaded.tools.iter().any(|spec| &spec.name == tool) {
                let exported: Vec<&str> = loaded.tools.iter().map(|spec| spec.name.as_str()).collect();
                return Err(LoadError::new(
                    origin,
                    format!(
                        "limits are configured for tool {tool:?}, which component {name} does not export \
                         (it exports: {})",
                        exported.join(", ")
                    ),
                ));
            }
        }
        loaded.schemas = schemas;
        Ok(())
    }

    /// The components a request may call now: a snapshot that no reload changes.
    pub fn snapshot(&self) -> Arc<ToolSet> {
        self.tool_set.borrow().clone()
    }

    /// Serve `next` from now on; the set it replaces is retired
    /// ([`Runtime::drain_budget`]).
    fn swap_tool_set(&self, next: ToolSet) {
        let old = self.tool_set.send_replace(Arc::new(next));
        let mut retired = self.retired_sets.lock().unwrap();
        retired.retain(|set| set.strong_count() > 0);
        retired.push(Arc::downgrade(&old));
    }

    /// How many versions of component `name` other than `served`, each with lists of its
    /// own, the sets swapped out (by a reload or a listing) that requests still run on hold.
    fn older_versions_alive(&self, name: &str, served: &Arc<component::LoadedComponent>) -> usize {
        let mut retired = self.retired_sets.lock().unwrap();
        retired.retain(|set| set.strong_count() > 0);
        let mut versions: Vec<*const component::LoadedComponent> = retired
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter_map(|set| {
                set.component(name).filter(|older| !Arc::ptr_eq(older, served)).map(Arc::as_ptr)
            })
            .collect();
        versions.sort_unstable();
        versions.dedup();
        versions.len()
    }

    /// How long a shutdown waits for the calls in flight to stop and be cleaned up: the
    /// longest [`ToolSet::drain_budget`] of the set served now and of those a reload or a
    /// listing swapped out that requests still run on. Calls on a version a reload removed
    /// keep that version's budgets.
    pub fn drain_budget(&self) -> std::time::Duration {
        let retired: Vec<Arc<ToolSet>> =
            self.retired_sets.lock().unwrap().iter().filter_map(std::sync::Weak::upgrade).collect();
        let current = self.snapshot().drain_budget();
        retired.iter().map(|set| set.drain_budget()).fold(current, std::cmp::Ord::max)
    }

    /// The current set, and each one a reload swaps in after it.
    pub fn watch_tools(&self) -> watch::Receiver<Arc<ToolSet>> {
        self.tool_set.subscribe()
    }

    /// Make `sources` the set of components: carry over each whose bytes and options are
    /// unchanged, load the others (in the background: calls go on meanwhile), and swap the
    /// new set in at once when something changed. A component that fails to load keeps
    /// its old version (or stays out, when it is new); the report says which and why.
    /// Components left out are dropped from the set at the swap; calls running on them
    /// finish on them, and they make no more spare instances.
    ///
    /// What is already served wins: a new or changed component whose tools or directories
    /// clash with one carried over (or kept after a failure) is the one refused. Its
    /// directories and file are also checked against the versions that may still run
    /// calls beside it (the ones it replaces or removes, and older ones whose calls have
    /// not ended: [`Draining`]); such a conflict is `busy`, loaded by a later reload once
    /// those calls have ended.
    pub async fn reload(&self, sources: Vec<ComponentSource>) -> ReloadReport {
        let _one_at_a_time = self.reloading.lock().await;
        self.loading_files(&sources);
        let current = self.snapshot();
        let mut report = ReloadReport::default();
        // First what stays as it is, then what must be loaded, checked against it all.
        let mut steps = Vec::new();
        let mut staying = ToolSet::default();
        for mut source in sources {
            let origin = source.origin();
            let old = current.component(&source.name).cloned();
            // The tenants served are those read at start, so each keeps the data directory
            // it had, whatever the new `[[tenants]]` say (reload.rs).
            if let Some(old) = &old {
                source.options.tenants.clone_from(&old.options.tenants);
            }
            let read_bytes = source.reader();
            let read = tokio::task::spawn_blocking(move || {
                use sha2::Digest;
                read_bytes().map(|bytes| (<[u8; 32]>::from(sha2::Sha256::digest(&bytes)), bytes))
            });
            let step = match read.await.unwrap_or_else(|error| Err(std::io::Error::other(error))) {
                Ok((digest, _))
                    if old
                        .as_ref()
                        .is_some_and(|old| old.digest == digest && old.options == source.options) =>
                {
                    let old = old.expect("checked");
                    // Its file may have moved (same bytes) into another's writable grant.
                    let moved = source.file().and_then(|file| {
                        file_in_writable_grant(&source.name, &origin, &file, &Beside::of(&current.components))
                    });
                    match moved.map(|error| error.problem).or_else(|| self.grants_problem(&old, false)) {
                        Some(problem) => {
                            report.failed.push(LoadError::new(&origin, problem));
                            Step::Skip
                        }
                        None => {
                            staying.push(old.clone());
                            report.unchanged.push(source.name.clone());
                            Step::Stay(old)
                        }
                    }
                }
                Ok((_, bytes)) => Step::Load(Box::new(source), origin, bytes, old),
                Err(error) => {
                    report.failed.push(LoadError::new(&origin, format!("cannot read: {error}")));
                    match old.map(|old| (self.grants_problem(&old, false), old)) {
                        Some((None, old)) => {
                            staying.push(old.clone());
                            report.unchanged.push(source.name.clone());
                            Step::Stay(old)
                        }
                        Some((Some(problem), _)) => {
                            report.failed.push(LoadError::new(&origin, problem));
                            Step::Skip
                        }
                        None => Step::Skip,
                    }
                }
            };
            steps.push(step);
        }
        // Computed once: what this loop loads joins `staying`, checked against it there.
        let draining = self.draining_beside(&current, &staying.components);
        // Each in its place in the config's order, but updates loaded first: a component's
        // new version (or its old one, kept when the new one fails) is what a new
        // component is checked against, whatever the order, so that what is served wins.
        let mut slots: Vec<Option<Arc<LoadedComponent>>> = Vec::with_capacity(steps.len());
        let mut loads = Vec::new();
        for step in steps {
            match step {
                Step::Stay(component) => slots.push(Some(component)),
                Step::Skip => slots.push(None),
                Step::Load(source, origin, bytes, old) => {
                    loads.push((slots.len(), source, origin, bytes, old));
                    slots.push(None);
                }
            }
        }
        loads.sort_by_key(|(_, _, _, _, old)| old.is_none());
        for (at, source, origin, bytes, old) in loads {
            let compiling = self.compile(&origin, move || Ok(bytes), CompilePriority::Background);
            let built = self
                .build(
                    &source.name,
                    &origin,
                    source.file().as_deref(),
                    compiling,
                    source.options,
                    Beside { components: staying.components.clone(), draining: draining.clone() },
                )
                .await
                .and_then(|loaded| match staying.clash(&origin, &loaded) {
                    Some(clash) => Err(clash),
                    None => Ok(Arc::new(loaded)),
                });
            let component = match built {
                Ok(component) => {
                    report.loaded.push(source.name.clone());
                    component
                }
                Err(error) => {
                    report.failed.push(error);
                    // The old version stays, unless it no longer fits beside the others (nor
                    // around a file the server reads now, the components' loaded here too).
                    let mut fits = |old: &LoadedComponent| {
                        if let Some(problem) = self.grants_problem(old, true) {
                            report.failed.push(LoadError::new(&origin, problem));
                            return false;
                        }
                        staying.clash(&origin, old).is_none()
                            && (old.files.iter().chain(old.tenant_files.values())).all(|files| {
                                files_conflict(&source.name, &origin, files, &staying.components).is_none()
                            })
                    };
                    match old.filter(|old| fits(old)) {
                        Some(old) => {
                            report.unchanged.push(source.name.clone());
                            old
                        }
                        None => continue,
                    }
                }
            };
            staying.push(component.clone());
            slots[at] = Some(component);
        }
        let order: Vec<Arc<LoadedComponent>> = slots.into_iter().flatten().collect();
        // A wait on another component's served version that this reload keeps would never
        // end (two components swapping directories, or one whose update failed): said as it
        // is, not busy, so that the reloader does not try again forever.
        let kept: Vec<usize> = order
            .iter()
            .flat_map(|component| component.files.iter().chain(component.tenant_files.values()))
            .map(|files| Arc::as_ptr(files) as usize)
            .collect();
        for failure in &mut report.failed {
            if let Some((at, stays)) = failure.unless_kept.take()
                && kept.contains(&at)
            {
                failure.problem = stays;
                failure.busy = false;
            }
        }
        let next = ToolSet::new(order, current.generation());
        let same = next.components.len() == current.components.len()
            && next.components.iter().zip(&current.components).all(|(a, b)| Arc::ptr_eq(a, b));
        if same {
            return report;
        }
        for old in &current.components {
            if !next.components.iter().any(|new| Arc::ptr_eq(new, old)) {
                if next.component(&old.name).is_none() {
                    report.removed.push(old.name.to_string());
                }
                old.spare.retire();
            }
        }
        let next = next.with_generation(current.generation() + 1);
        for component in &next.components {
            component.apply_quota_limits();
        }
        self.swap_tool_set(next);
        // A new version was listed at its load: an old one's failed listings hold it back
        // no longer.
        for name in report.loaded.iter().chain(&report.removed) {
            self.relists.forget_failures(name);
        }
        report.swapped = true;
        report
    }

    /// The grants of every loaded version still held, but not those of `staying`, which
    /// are checked as components of the set: the versions of `current` are served until
    /// the swap.
    fn draining_beside(&self, current: &ToolSet, staying: &[Arc<LoadedComponent>]) -> Vec<Draining> {
        let grants_of = |components: &[Arc<LoadedComponent>]| -> Vec<*const files::FileGrants> {
            let files = components
                .iter()
                .flat_map(|component| component.files.iter().chain(component.tenant_files.values()));
            files.map(Arc::as_ptr).collect()
        };
        let (kept, served) = (grants_of(staying), grants_of(&current.components));
        let mut loaded_files = self.loaded_files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loaded_files.retain(|(_, files)| files.strong_count() > 0);
        loaded_files
            .iter()
            .filter_map(|(name, files)| {
                let files = files.upgrade()?;
                let at = Arc::as_ptr(&files);
                (!kept.contains(&at)).then(|| Draining {
                    name: name.clone(),
                    served: served.contains(&at),
                    files,
                })
            })
            .collect()
    }

    /// The files of `sources`, which the components loaded from now on may not be granted
    /// to write around.
    fn loading_files(&self, sources: &[ComponentSource]) {
        let files: Vec<PathBuf> = sources.iter().filter_map(ComponentSource::file).collect();
        self.server_paths.write().unwrap_or_else(std::sync::PoisonError::into_inner).components =
            resolved(&[], &files, true);
    }

    /// Why a component already loaded may not stay: one of its grants holds a file the
    /// server reads now (a reload's config named a new one there; with `components`, the
    /// file of a component this load loads counts too).
    fn grants_problem(&self, component: &LoadedComponent, components: bool) -> Option<String> {
        let paths = self.server_paths.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut grants = component.files.iter().chain(component.tenant_files.values());
        let problem = grants.find_map(|files| paths.problem_with(files, components))?;
        Some(format!("component {}: {problem}", component.name))
    }

    /// Open `name`'s grants: with tenants, its mounts for calls of no tenant and, for each
    /// tenant, its mounts with the data directory `<data_dir>/<tenant>`; otherwise its data
    /// directory and mounts.
    #[allow(clippy::type_complexity)]
    fn open_tenant_files(
        name: &str,
        origin: &str,
        options: &ComponentOptions,
        beside: &Beside,
        paths: &ServerPaths,
    ) -> Result<(Option<Arc<files::FileGrants>>, HashMap<String, Arc<files::FileGrants>>), LoadError> {
        let open = |options: &ComponentOptions, quotas_from, of_tenant| {
            Self::open_files(name, origin, options, beside, quotas_from, of_tenant, paths)
        };
        let Some(data_dir) = options.data_dir.as_ref().filter(|_| !options.tenants.is_empty()) else {
            return Ok((open(options, None, false)?, HashMap::new()));
        };
        // The mounts first: every tenant's grants share their quotas.
        let shared = ComponentOptions { data_dir: None, ..options.clone() };
        let shared = open(&shared, None, false)?;
        let mut by_tenant = HashMap::new();
        for tenant in &options.tenants {
            if !crate::paths::is_safe_name(tenant) {
                return Err(LoadError::new(
                    origin,
                    format!("tenant name {tenant:?} cannot name a directory"),
                ));
            }
            let own = ComponentOptions { data_dir: Some(data_dir.join(tenant)), ..options.clone() };
            if let Some(grants) = open(&own, shared.as_deref(), true)? {
                by_tenant.insert(tenant.clone(), grants);
            }
        }
        Ok((shared, by_tenant))
    }

    /// Open `name`'s data directory and mounts once, refusing any that overlaps one of
    /// `beside` where either may be written (one of a version still running: not yet), and any writable one inside or around the
    /// compile cache or around a server file (`paths`); a mount's quota is `quotas_from`'s
    /// when it has one.
    fn open_files(
        name: &str,
        origin: &str,
        options: &ComponentOptions,
        beside: &Beside,
        quotas_from: Option<&files::FileGrants>,
        of_tenant: bool,
        paths: &ServerPaths,
    ) -> Result<Option<Arc<files::FileGrants>>, LoadError> {
        let data_dir = options.data_dir.as_deref();
        let Some(grants) = files::FileGrants::open(
            data_dir,
            options.data_quota_bytes,
            &options.mounts,
            quotas_from,
            of_tenant,
        )
        .map_err(|problem| LoadError::new(origin, format!("component {name}: {problem}")))?
        else {
            return Ok(None);
        };
        if let Some(conflict) = files_conflict(name, origin, &grants, &beside.components)
            .or_else(|| draining_conflict(name, origin, &grants, &beside.draining))
        {
            return Err(conflict);
        }
        if let Some(problem) = paths.problem_with(&grants, true) {
            return Err(LoadError::new(origin, format!("component {name}: {problem}")));
        }
        // Told once, with the grants the quotas were measured for (a tenant's data directory
        // has a quota of its own; its mounts share the component's).
        let measured = |grant: &&files::Grant| quotas_from.is_none() || grant.guest == files::GUEST_DATA_DIR;
        for grant in grants.grants.iter().filter(measured) {
            let Some(quota) = &grant.quota else { continue };
            let (used, limit) = (quota.used(), quota.limit());
            let path = grant.path.display();
            if used > limit {
                tracing::warn!(
                    component = name,
                    "{} ({path}) already holds {used} bytes (its names counted), over its quota of {limit}: \
                     writes that grow a file and new names fail until files are removed",
                    grant.guest
                );
            } else {
                tracing::debug!(component = name, "{} ({path}): {used} of {limit} bytes used", grant.guest);
            }
        }
        Ok(Some(Arc::new(grants)))
    }

    /// What the component in `path` is (a Cordon tool component or a plain one), the
    /// interfaces it imports and exports, and, if plain, the exports it would leave out;
    /// without loading it (its tools are not listed).
    pub fn describe_file(&self, path: &Path) -> Result<Description, LoadError> {
        let origin = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|error| LoadError::new(&origin, format!("cannot read: {error}")))?;
        let cache_dir = self.settings.engine.cache_dir.clone();
        let compiled =
            engine::compile_component(&self.engine, &bytes, cache_dir.as_deref(), &self.compile_cache)
                .map_err(|error| LoadError::new(&origin, format!("invalid component: {error:#}")))?;
        let interfaces = Interfaces::of(&self.engine, &compiled);
        if component::exports_cordon_tool(&self.engine, &compiled) {
            let interface = interfaces
                .exports
                .iter()
                .find(|name| name.starts_with("cordon:tool/tool"))
                .cloned()
                .unwrap_or_default();
            return Ok(Description {
                interfaces,
                kind: ComponentKind::Cordon { interface },
                left_out: Vec::new(),
            });
        }
        let left_out = match plain::discover(&self.engine, &compiled, &bytes) {
            Ok(found) => found.warnings,
            Err(problem) => vec![problem],
        };
        Ok(Description { interfaces, kind: ComponentKind::Plain, left_out })
    }

    /// Run the guest's `list` in a bounded instance, in a call slot; a plain component
    /// (which has none) is only instantiated there, to check that it can be, and gives
    /// `None`. A 0.2.0 component lists its resources and prompts in the same instance.
    /// Failed: why, and whether only because no slot came free.
    #[allow(clippy::type_complexity)]
    async fn list_tools(
        &self,
        component: &LoadedComponent,
    ) -> Result<
        (Option<Vec<bindings::ToolInfo>>, Option<(bindings::v2::Catalog, Vec<bindings::v2::PromptInfo>)>),
        (String, bool),
    > {
        let budget = self.settings.list_budget;
        let wait = self.settings.queue_timeout;
        let _permit = tokio::time::timeout(wait, self.call_permits.acquire())
            .await
            .map_err(|_| {
                (format!("no call slot came free within {wait:?} to list it: calls held every slot"), true)
            })?
            .expect("the call semaphore is never closed");
        let _ticking = self.ticker.running();
        let (mut store, deadline) =
            call::bounded_store(&self.engine, component, &component.options.limits, budget);
        let memory = store.data().control().memory.clone();
        let pre = component.pre.clone();
        let list = async move {
            let instance: component::GuestInstance = pre.instantiate(&mut store).await?;
            let tools = instance.list_tools(&mut store).await?;
            Ok::<_, wasmtime::Error>((tools, instance.list_features(&mut store).await?))
        };
        let problem = match call::run_bounded(list, deadline).await {
            Some(Ok(tools)) => return Ok(tools),
            Some(Err(_)) if memory.refused.load(Ordering::Relaxed) => format!(
                "its linear memories need more than the {} MiB its calls may have (memory_mb counts \
                 all of a component's memories together) just to be instantiated",
                component.options.limits.memory_bytes >> 20
            ),
            Some(Err(error)) => format!("`list` failed: {error:#}"),
            None => format!("`list` did not return within {budget:?}"),
        };
        Err((problem, false))
    }

    /// Reserve a slot for a call of `tool` with `arguments`. Waits for a free slot for at
    /// most the queue timeout, then refuses with [`CallError::Busy`].
    pub async fn call(&self, tool: &str, arguments: &Value) -> Result<Call, CallError> {
        self.call_as(tool, arguments, CallTags::default()).await
    }

    /// [`Runtime::call`] for the asker `tags` names, which the call's event carries. A
    /// refusal is an event too.
    pub async fn call_as(&self, tool: &str, arguments: &Value, tags: CallTags) -> Result<Call, CallError> {
        self.call_in(&self.snapshot(), None, tool, arguments, tags).await
    }

    /// [`Runtime::call_as`] with the tool taken from `tools`, the snapshot the request took,
    /// as `view` sees it: a tool outside the tenant's view is an unknown tool, refused in
    /// the same words; the call runs with the tenant's data directory and waits for a
    /// slot in the tenant's turn.
    pub async fn call_in(
        &self,
        tools: &ToolSet,
        view: Option<&TenantView>,
        tool: &str,
        arguments: &Value,
        tags: CallTags,
    ) -> Result<Call, CallError> {
        let observed = if self.observers.is_empty() { None } else { Some(tags.clone()) };
        let call = self.reserve(tools, view, tool, arguments, tags).await;
        if let (Err(error), Some(tags)) = (&call, observed) {
            let mut event = CallEnded::refused(tags, error.reason());
            if let Some((component, tool)) = known_tool(tools, view, tool) {
                event.component = Some(component);
                event.tool = Some(tool);
            }
            event.argument_bytes = if arguments.is_object() { arguments.to_string().len() } else { 0 };
            if let CallError::Busy { waited, .. }
            | CallError::TenantBusy { waited, .. }
            | CallError::TenantShareBusy { waited } = error
            {
                event.queue_wait = *waited;
            }
            self.observers.emit(&event);
        }
        call
    }

    async fn reserve(
        &self,
        tools: &ToolSet,
        view: Option<&TenantView>,
        tool: &str,
        arguments: &Value,
        tags: CallTags,
    ) -> Result<Call, CallError> {
        let component =
            tools.component_for(view, tool).ok_or_else(|| CallError::UnknownTool(tool.to_owned()))?;
        if !arguments.is_object() {
            return Err(CallError::ArgumentsNotObject);
        }
        let schemas = &component.schemas[tool];
        // A plain function's arguments are checked by converting them, which is exact and
        // names the path of what it refuses (its schema says the same, for clients).
        let check = match component.pre.plain_function(tool) {
            Some(function) => match plain::to_params(function, arguments) {
                Ok(_) => schema::Check::Valid,
                Err(error) => schema::Check::Invalid(error.to_string()),
            },
            None => schemas.input.check(arguments).await,
        };
        match check {
            schema::Check::Valid => {}
            schema::Check::Invalid(problems) => {
                return Err(CallError::InvalidArguments { tool: tool.to_owned(), problems });
            }
            schema::Check::Unchecked(reason) => {
                return Err(CallError::ArgumentsUnchecked { tool: tool.to_owned(), reason });
            }
        }
        let limits = component.options.limits_for(tool).clone();
        let arguments = serde_json::to_string(arguments).expect("a Value always serializes");
        self.take_slot(component, view, schemas.name.clone(), limits, arguments, None, tags).await
    }

    /// A slot for a call of `component` (a tool call, or `feature`) as `view` sees it:
    /// waits for one for at most the queue timeout, in the tenant's turn.
    #[allow(clippy::too_many_arguments)]
    async fn take_slot(
        &self,
        component: &Arc<LoadedComponent>,
        view: Option<&TenantView>,
        tool: Arc<str>,
        limits: ToolLimits,
        arguments: String,
        feature: Option<FeatureRequest>,
        tags: CallTags,
    ) -> Result<Call, CallError> {
        if *self.shutdown.borrow() {
            return Err(CallError::ShuttingDown);
        }
        let waited = self.settings.queue_timeout;
        let queued = std::time::Instant::now();
        let tenant = view.map_or_else(|| Arc::<str>::from(""), |view| view.tenant.clone());
        let cap = view.and_then(|view| view.max_concurrent_calls);
        let deadline = tokio::time::Instant::now() + waited;
        let busy = || match self.fair_slots.why_full(&tenant, cap) {
            fair::Full::TenantCap(slots) => CallError::TenantBusy { slots, waited },
            fair::Full::Shared => CallError::TenantShareBusy { waited },
            fair::Full::Pool => CallError::Busy { slots: self.settings.engine.max_concurrent_calls, waited },
        };
        let note_queued = || {
            tracing::debug!(component = %component.name, tool = %tool, "queued: no slot is free for the call");
        };
        let fair_permit =
            tokio::time::timeout_at(deadline, self.fair_slots.acquire_noting(&tenant, cap, note_queued))
                .await
                .map_err(|_| busy())?;
        // The fair gate has as many slots as the pool: this waits only while a load's
        // `list` holds one.
        // Timed out here, the pool is what was full (a listing held the slot the gate
        // gave), whatever the tenant holds.
        let permit = tokio::time::timeout_at(deadline, self.call_permits.clone().acquire_owned())
            .await
            .map_err(|_| CallError::Busy { slots: self.settings.engine.max_concurrent_calls, waited })?
            .expect("the call semaphore is never closed");
        // Queued before a shutdown: refused now, not run only to be stopped again.
        if *self.shutdown.borrow() {
            return Err(CallError::ShuttingDown);
        }
        let mut call =
            self.new_call(component, view, tool, limits, arguments, Some((permit, fair_permit)), tags);
        call.feature = feature;
        call.queue_wait = queued.elapsed();
        Ok(call)
    }

    /// A call of `component`'s `tool` as `view` sees it, holding `permit` (none: a call
    /// whose guest never runs, only its cleanup).
    #[allow(clippy::too_many_arguments)]
    fn new_call(
        &self,
        component: &Arc<LoadedComponent>,
        view: Option<&TenantView>,
        tool: Arc<str>,
        limits: ToolLimits,
        arguments: String,
        permit: Option<(tokio::sync::OwnedSemaphorePermit, fair::FairPermit)>,
        tags: CallTags,
    ) -> Call {
        // A tenant's own grants; none when the component has no data directory (the view
        // sees it only then, `LoadedComponent::seen_by`): its mounts are every tenant's.
        let files = view.and_then(|view| component.tenant_files.get(&*view.tenant).cloned());
        let unslotted_cleanups = permit.is_none().then(|| {
            let tenant = view.map_or_else(|| Arc::<str>::from(""), |view| view.tenant.clone());
            (self.unslotted_cleanups.clone(), tenant)
        });
        Call {
            id: self.next_call_id.fetch_add(1, Ordering::Relaxed),
            engine: self.engine.clone(),
            ticker: self.ticker.clone(),
            control: CallControl::new(&limits),
            limits,
            tool,
            component: component.clone(),
            // Not `to_string`: `Display` goes through `fmt`, a call per token.
            arguments,
            feature: None,
            input: InputRound::default(),
            shutdown: self.shutdown.subscribe(),
            permit,
            files,
            unslotted_cleanups,
            cleanup_permits: self.cleanup_permits.clone(),
            spares: self.spares.clone(),
            tags,
            queue_wait: Duration::ZERO,
            observers: self.observers.clone(),
            relists: self.relists.clone(),
            result_bytes: Default::default(),
            asking_refused: Default::default(),
        }
    }

    /// The call of `tool` (in `tools`, as `view` sees it) whose guest ran a round and was
    /// then stopped (a cancel, its deadline, shutdown, no slot for its next round): only
    /// to run its cleanup, with [`Call::stop_unstarted`]. It takes no call slot and is
    /// refused neither by a full pool nor by shutdown (its cleanup waits only for a share of
    /// the capacity kept for cleanups): a guest that may have taken a lock in its round must be
    /// cleaned up whatever else is going on. `None` when `tools` has no such tool.
    pub fn call_to_clean_up(
        &self,
        tools: &ToolSet,
        view: Option<&TenantView>,
        tool: &str,
        arguments: &Value,
        tags: CallTags,
    ) -> Option<Call> {
        let component = tools.component_for(view, tool)?;
        let name = component.schemas.get(tool)?.name.clone();
        let limits = component.options.limits_for(tool).clone();
        let arguments = serde_json::to_string(arguments).expect("a Value always serializes");
        Some(self.new_call(component, view, name, limits, arguments, None, tags))
    }

    /// Reserve a slot to ask the component that serves `request` (as `view` sees the set
    /// `tools`): a resource read, a prompt or a completion, run by [`Call::run`] like a tool
    /// call, with the component's limits. Refused before any slot is taken when no
    /// component serves it, or the prompt's arguments do not fit.
    pub async fn feature_in(
        &self,
        tools: &ToolSet,
        view: Option<&TenantView>,
        request: FeatureRequest,
        tags: CallTags,
    ) -> Result<Call, FeatureError> {
        let component = Self::feature_owner(tools, view, &request)?;
        let method = component.offered.methods.of(&request).clone();
        let limits = component.options.limits.clone();
        let parameters = request.parameters();
        let observed = if self.observers.is_empty() { None } else { Some(tags.clone()) };
        let call =
            self.take_slot(component, view, method.clone(), limits, parameters, Some(request), tags).await;
        if let (Err(error), Some(tags)) = (&call, observed) {
            let mut event = CallEnded::refused(tags, error.reason());
            event.component = Some(component.name.clone());
            event.tool = Some(method);
            self.observers.emit(&event);
        }
        call.map_err(FeatureError::Refused)
    }

    /// [`Self::call_to_clean_up`] for a prompt (or any request `feature_in` serves) whose
    /// guest ran a round and was then stopped: only to run its cleanup, in no call slot.
    pub fn feature_to_clean_up(
        &self,
        tools: &ToolSet,
        view: Option<&TenantView>,
        request: FeatureRequest,
        tags: CallTags,
    ) -> Option<Call> {
        let component = Self::feature_owner(tools, view, &request).ok()?;
        let method = component.offered.methods.of(&request).clone();
        let (limits, parameters) = (component.options.limits.clone(), request.parameters());
        let mut call = self.new_call(component, view, method, limits, parameters, None, tags);
        call.feature = Some(request);
        Some(call)
    }

    /// The component that serves `request` as `view` sees `tools`, its arguments checked.
    fn feature_owner<'a>(
        tools: &'a ToolSet,
        view: Option<&TenantView>,
        request: &FeatureRequest,
    ) -> Result<&'a Arc<LoadedComponent>, FeatureError> {
        Ok(match request {
            FeatureRequest::ReadResource { uri } => {
                tools.resource_owner(view, uri).ok_or_else(|| FeatureError::ResourceNotFound(uri.clone()))?
            }
            FeatureRequest::GetPrompt { name, arguments } => {
                let component = tools
                    .prompt_owner(view, name)
                    .ok_or_else(|| FeatureError::UnknownPrompt(name.clone()))?;
                let prompt = component.offered.prompt(name).expect("its owner offers it");
                features::check_prompt_arguments(prompt, arguments)
                    .map_err(|problem| FeatureError::InvalidArguments { prompt: name.clone(), problem })?;
                component
            }
            FeatureRequest::Complete { reference, argument, .. } => {
                let unknown = |what: String| FeatureError::UnknownReference(what);
                match reference {
                    features::Reference::Prompt(name) => {
                        let component = tools
                            .prompt_owner(view, name)
                            .ok_or_else(|| unknown(format!("no prompt {name:?}")))?;
                        let prompt = component.offered.prompt(name).expect("its owner offers it");
                        if !prompt.arguments.iter().any(|declared| &declared.name == argument) {
                            return Err(unknown(format!("prompt {name:?} takes no argument {argument:?}")));
                        }
                        component
                    }
                    features::Reference::ResourceTemplate(uri) => {
                        let component = tools
                            .template_owner(view, uri)
                            .ok_or_else(|| unknown(format!("no resource template {uri:?}")))?;
                        let template = component.offered.template(uri).expect("its owner offers it");
                        if !template.variables().any(|variable| variable == argument) {
                            return Err(unknown(format!("template {uri:?} has no variable {argument:?}")));
                        }
                        component
                    }
                }
            }
        })
    }

    /// Stop every call in flight (with the reason `shutdown`, grace, then the hard stop and
    /// cleanup) and refuse new ones. Wait for [`Runtime::idle`] to see them finish.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
        for component in &self.snapshot().components {
            component.spare.clear();
        }
    }

    /// Whether [`Runtime::shutdown`] was called, and a way to wait for it.
    pub fn shutting_down(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Wait until no call holds a slot, or `timeout` passes; returns whether it is idle.
    pub async fn idle(&self, timeout: Duration) -> bool {
        let slots = self.settings.engine.max_concurrent_calls as u32;
        tokio::time::timeout(timeout, self.call_permits.acquire_many(slots)).await.is_ok()
    }

    /// What the pool holds now.
    pub fn pool_usage(&self) -> PoolUsage {
        let calls = self.settings.engine.max_concurrent_calls - self.call_permits.available_permits();
        let metrics = self.engine.pooling_allocator_metrics();
        PoolUsage {
            calls,
            spares: self.spares.spares(),
            spare_memory_bytes: self.spares.memory_bytes(),
            component_instances: metrics.as_ref().map_or(0, |m| m.component_instances()),
            core_instances: metrics.as_ref().map_or(0, |m| m.core_instances()),
            memories: metrics.as_ref().map_or(0, |m| m.memories()),
            guest_descriptors: self.descriptors.in_use(),
        }
    }

    /// Create a store and an instance of `tool`'s component: what every call pays before
    /// the guest runs. Returns the store so that a benchmark can time its drop apart.
    #[doc(hidden)]
    pub async fn instantiate_once(&self, tool: &str) -> Result<impl Drop> {
        let tools = self.snapshot();
        let component = tools.component_of(tool).context("unknown tool")?;
        let limits = component.options.limits_for(tool);
        let mut store = call::new_store(&self.engine, component, limits, CallControl::new(limits), None);
        component.pre.instantiate(&mut store).await?;
        Ok(store)
    }
}
