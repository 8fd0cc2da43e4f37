//! Loading a tool component: checking the file is a component, compiling it (through the
//! cache), pre-instantiating it once, telling a Cordon tool component (the `plugin` world,
//! `cordon:tool@0.1.0` or `@0.2.0`) from a plain one (exported typed functions, plain.rs),
//! and reading its tool list (and, at 0.2.0, its resources and prompts: features.rs).
//!
//! Every problem becomes a [`LoadError`] that names the file and says what is wrong, so a
//! platform operator can fix the right plugin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value;
use wasmtime::Engine;
use wasmtime::component::Linker;

use super::bindings::{CleanupContext, Plugin, PluginPre, ToolAnnotations, ToolInfo, v2};
use super::egress::{ComponentEgress, HttpGrants};
use super::engine::compile_component;
use super::files::{FileGrants, Mount};
use super::guest::GuestState;
use super::input::InputRound;
use super::ledger::DescriptorBudget;
use super::limits::ToolLimits;
use super::plain::PlainFunctions;
use super::schema::{CheckThreads, MAX_PATTERNS, Schema, pattern_count};
use super::spare::SpareSlot;

/// A component the operator asks for: its name, its file and how to run it.
#[derive(Clone)]
pub struct ComponentSource {
    pub name: String,
    pub path: PathBuf,
    /// The component's bytes when they are built into the binary (the example tools
    /// without a config); `path` is then only where they were built from.
    pub embedded: Option<&'static [u8]>,
    pub options: ComponentOptions,
}

impl ComponentSource {
    /// The file it is read from; none for a component built into the binary.
    pub(crate) fn file(&self) -> Option<PathBuf> {
        self.embedded.is_none().then(|| self.path.clone())
    }

    /// What a load error names: the file, or the name of a component built into the binary.
    pub fn origin(&self) -> String {
        match self.embedded {
            Some(_) => self.name.clone(),
            None => self.path.display().to_string(),
        }
    }

    /// Reads the component's bytes (the file is read only when this runs: on the blocking
    /// pool, beside the compile).
    pub(crate) fn reader(&self) -> impl FnOnce() -> std::io::Result<Vec<u8>> + Send + 'static {
        let (embedded, path) = (self.embedded, self.path.clone());
        move || match embedded {
            Some(bytes) => Ok(bytes.to_vec()),
            None => std::fs::read(path),
        }
    }
}

// By hand, so that embedded bytes show as their length, not as a list of numbers.
impl std::fmt::Debug for ComponentSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ComponentSource")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("embedded", &self.embedded.map(|bytes| format!("{} bytes", bytes.len())))
            .field("options", &self.options)
            .finish()
    }
}

/// Why a component could not be loaded.
/// The longest problem a [`LoadError`] keeps: it may quote what a guest listed (a schema's
/// property names, a trap's backtrace with the guest's own function names).
const MAX_PROBLEM_BYTES: usize = 8 << 10;

/// Shown as one line whatever the guest put in it (control characters escaped): it goes
/// to the operator's log at every load, reload and listing.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {}", crate::text::printable(.problem))]
pub struct LoadError {
    /// The file (or name) the component came from.
    pub origin: String,
    /// What is wrong with it.
    pub problem: String,
    /// Nothing is wrong with it: every call slot stayed busy while it waited for one to be
    /// listed in, or calls of a version a reload replaced or removed still hold a
    /// directory its grants overlap. Loading it again later may succeed.
    pub busy: bool,
    /// While a reload decides: the grants (by address) of another component's served
    /// version this one waits on, and what to say instead should that version stay
    /// served after all (then it never goes, and nothing is busy).
    pub(crate) unless_kept: Option<(usize, String)>,
}

impl LoadError {
    pub(crate) fn new(origin: &str, problem: impl Into<String>) -> Self {
        let mut problem = problem.into();
        if problem.len() > MAX_PROBLEM_BYTES {
            problem.truncate(problem.floor_char_boundary(MAX_PROBLEM_BYTES));
            problem.push('…');
        }
        Self { origin: origin.to_owned(), problem, busy: false, unless_kept: None }
    }
}

/// How the operator runs one component. Compared whole at a reload: a component whose
/// bytes and options are unchanged keeps its loaded version.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentOptions {
    /// Limits for every call of its tools, unless `tool_limits` names the tool.
    pub limits: ToolLimits,
    /// Limits for particular tools, by name.
    pub tool_limits: HashMap<String, ToolLimits>,
    /// A host directory preopened read-write at `/data` in the guest; `None` gives no file
    /// system at all. Created if missing and opened once, at load; it may not overlap
    /// another component's.
    pub data_dir: Option<PathBuf>,
    /// The most the data directory may hold (each tenant's its own), counted as quota.rs
    /// says: bytes of files and a 4 KiB block per name. [`DEFAULT_DATA_QUOTA_BYTES`] by
    /// default: a guest never gets the host's whole disk, nor its inodes.
    pub data_quota_bytes: u64,
    /// The tenants that use the component: with any, the data directory is never opened
    /// itself; each tenant gets `<data_dir>/<tenant>` instead.
    pub tenants: Vec<String>,
    /// More host directories, each at a guest path of its own, read-only or read-write.
    /// Opened once, at load; a missing one is a load error.
    pub mounts: Vec<Mount>,
    /// The environment the guest sees: these variables and nothing of the server's.
    pub environment: Environment,
    /// Where the guest may send HTTP requests (egress.rs); nowhere by default.
    pub allow_http: HttpGrants,
}

/// A data directory's quota unless the operator sets one (`data_quota_mb`): 1 GiB.
pub const DEFAULT_DATA_QUOTA_BYTES: u64 = 1 << 30;

impl Default for ComponentOptions {
    fn default() -> Self {
        Self {
            limits: ToolLimits::default(),
            tool_limits: HashMap::new(),
            data_dir: None,
            data_quota_bytes: DEFAULT_DATA_QUOTA_BYTES,
            tenants: Vec::new(),
            mounts: Vec::new(),
            environment: Environment::default(),
            allow_http: HttpGrants::default(),
        }
    }
}

/// Environment variables for a component, literal values and secrets alike. Its `Debug`
/// shows the names only, so no value ever reaches a log or an error message.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment(Vec<(String, String)>);

impl Environment {
    /// An environment of these variables. A name must be non-empty and hold no `=` or NUL,
    /// a value no NUL; the error names the variable, never its value.
    pub fn new(variables: Vec<(String, String)>) -> Result<Self, String> {
        for (name, value) in &variables {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(format!("{name:?} is not a valid environment variable name"));
            }
            if value.contains('\0') {
                return Err(format!("the value of {name} holds a NUL byte"));
            }
        }
        Ok(Self(variables))
    }

    pub fn variables(&self) -> &[(String, String)] {
        &self.0
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.iter().map(|(name, _)| name)).finish()
    }
}

/// The interfaces a component imports and exports, by name (`wasi:cli/environment@0.2.6`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

impl Interfaces {
    pub(crate) fn of(engine: &Engine, component: &wasmtime::component::Component) -> Self {
        let kind = component.component_type();
        Self {
            imports: kind.imports(engine).map(|(name, _)| name.to_owned()).collect(),
            exports: kind.exports(engine).map(|(name, _)| name.to_owned()).collect(),
        }
    }

    /// Whether it imports `interface` (`wasi:http/outgoing-handler`), at any version.
    pub fn imports_interface(&self, interface: &str) -> bool {
        imports_interface(&self.imports, interface)
    }
}

fn imports_interface(imports: &[String], interface: &str) -> bool {
    imports.iter().any(|name| name.split('@').next() == Some(interface))
}

/// What a component imports that its grants leave unusable, as warnings for the operator
/// (logged at load, shown by `cordon inspect`): nothing is refused, the component simply
/// gets nothing there. An ungranted `wasi:cli/environment` is not warned about: every
/// component built with a language's standard library imports it (Rust's std, CPython,
/// StarlingMonkey), so the warning said nothing; `cordon inspect` shows it as empty.
pub fn grant_warnings(imports: &[String], options: &ComponentOptions) -> Vec<String> {
    let mut warnings = Vec::new();
    if imports_interface(imports, "wasi:http/outgoing-handler") && options.allow_http.is_empty() {
        warnings.push(
            "it imports wasi:http/outgoing-handler but is granted no `allow_http`: every request is denied"
                .to_owned(),
        );
    }
    warnings
}

impl ComponentOptions {
    /// The limits that apply to `tool`.
    pub fn limits_for(&self, tool: &str) -> &ToolLimits {
        self.tool_limits.get(tool).unwrap_or(&self.limits)
    }
}

/// A tool as clients see it: the guest's description with its schemas parsed.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// JSON Schema of the arguments; root `type: object`.
    pub input_schema: Value,
    /// JSON Schema of the structured result, if any; any root (an array, a string...).
    pub output_schema: Option<Value>,
    pub annotations: Option<ToolAnnotations>,
    /// Client capabilities the tool needs.
    pub requires: Vec<String>,
    /// Arguments that HTTP clients mirror into `Mcp-Param-*` headers (`x-mcp-header`).
    pub param_headers: Vec<ParamHeader>,
}

pub use cordon_rules::{MAX_SCHEMA_BYTES, ParamHeader, ParamKind};

/// A loaded component, ready to instantiate.
pub(crate) struct LoadedComponent {
    pub(crate) name: Arc<str>,
    /// SHA-256 of the bytes it was loaded from: a reload with the same bytes and options
    /// keeps this component instead of compiling it again.
    pub(crate) digest: [u8; 32],
    pub(crate) pre: GuestPre,
    /// The data directory and mounts, opened at load, when the operator granted any.
    pub(crate) files: Option<Arc<FileGrants>>,
    /// With tenants: each tenant's grants, its data directory `<data_dir>/<tenant>`
    /// (`options.tenants`), never one shared between tenants.
    pub(crate) tenant_files: HashMap<String, Arc<FileGrants>>,
    /// The server's descriptors for guests, which every call of this component draws on.
    pub(crate) descriptors: Arc<DescriptorBudget>,
    /// `options.allow_http`, shared by every store of the component.
    pub(crate) http_grants: Arc<ComponentEgress>,
    pub(crate) options: ComponentOptions,
    pub(crate) tools: Vec<ToolSpec>,
    /// Compiled schemas, by tool name.
    pub(crate) schemas: HashMap<String, ToolSchemas>,
    /// A fresh instance made ahead of the next call.
    pub(crate) spare: SpareSlot,
    /// Whether the operator was told that calls grow this component's memory.
    pub(crate) growth_hinted: AtomicBool,
    /// Its resources, templates and prompts (none before `cordon:tool@0.2.0`).
    pub(crate) offered: super::features::Offered,
}

/// A tool's schemas, compiled once at load, and its name as every call's event carries it.
pub(crate) struct ToolSchemas {
    /// One allocation per loaded tool: observers may tell tools apart by its identity
    /// (the metrics keep each tool's series by it, `telemetry/metrics.rs`).
    pub(crate) name: Arc<str>,
    pub(crate) input: Schema,
    pub(crate) output: Option<Schema>,
}

impl ToolSchemas {
    fn compile(spec: &ToolSpec, threads: &Arc<CheckThreads>) -> Result<Self, String> {
        let input = Schema::compile(&spec.input_schema, threads)
            .map_err(|error| format!("input schema is not a valid JSON Schema: {error}"))?;
        let output = spec
            .output_schema
            .as_ref()
            .map(|schema| Schema::compile(schema, threads))
            .transpose()
            .map_err(|error| format!("output schema is not a valid JSON Schema: {error}"))?;
        Ok(Self { name: Arc::from(spec.name.as_str()), input, output })
    }
}

const WASM_MAGIC: &[u8] = b"\0asm";
const CORE_MODULE_VERSION: [u8; 4] = [1, 0, 0, 0];
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// How a loaded component's instances are made and called.
#[derive(Clone)]
pub(crate) enum GuestPre {
    /// A Cordon tool component: it implements the `cordon:tool@0.1.0` `plugin` world.
    Cordon(PluginPre<GuestState>),
    /// A Cordon component of `cordon:tool@0.2.0`: tools, resources, prompts, completions.
    CordonV2(v2::PluginPre<GuestState>),
    /// A plain component: its exported functions are its tools (plain.rs).
    Plain { pre: wasmtime::component::InstancePre<GuestState>, functions: Arc<PlainFunctions> },
}

/// An instance of a loaded component, not yet called.
pub(crate) enum GuestInstance {
    Cordon(Plugin),
    CordonV2(v2::Plugin),
    Plain(wasmtime::component::Instance),
}

impl GuestPre {
    /// A fresh instance in `store`.
    pub(crate) async fn instantiate(
        &self,
        store: &mut wasmtime::Store<GuestState>,
    ) -> wasmtime::Result<GuestInstance> {
        Ok(match self {
            Self::Cordon(pre) => GuestInstance::Cordon(pre.instantiate_async(store).await?),
            Self::CordonV2(pre) => GuestInstance::CordonV2(pre.instantiate_async(store).await?),
            Self::Plain { pre, .. } => GuestInstance::Plain(pre.instantiate_async(store).await?),
        })
    }

    pub(crate) fn component(&self) -> &wasmtime::component::Component {
        match self {
            Self::Cordon(pre) => pre.instance_pre().component(),
            Self::CordonV2(pre) => pre.instance_pre().component(),
            Self::Plain { pre, .. } => pre.component(),
        }
    }

    /// The function a plain component's `tool` calls.
    pub(crate) fn plain_function(&self, tool: &str) -> Option<&super::plain::PlainFunction> {
        match self {
            Self::Cordon(_) | Self::CordonV2(_) => None,
            Self::Plain { functions, .. } => functions.get(tool),
        }
    }

    /// Whether the component exports a `cleanup` to run after a stopped call: a plain one
    /// has none.
    pub(crate) fn has_cleanup(&self) -> bool {
        matches!(self, Self::Cordon(_) | Self::CordonV2(_))
    }
}

impl GuestInstance {
    /// Run tool `tool` with `arguments` (JSON text) in this instance, made from `pre`, in
    /// round `input` (which only a 0.2.0 guest sees, and only it may answer with a request
    /// for input).
    pub(crate) async fn call(
        &self,
        pre: &GuestPre,
        store: &mut wasmtime::Store<GuestState>,
        tool: &str,
        arguments: &str,
        input: &InputRound,
    ) -> wasmtime::Result<Result<v2::CallReply, String>> {
        match (self, pre) {
            (Self::Cordon(plugin), _) => Ok(plugin
                .cordon_tool_tool()
                .call_call(store, tool, arguments)
                .await?
                .map(v2::CallReply::Done)),
            (Self::CordonV2(plugin), _) => {
                plugin.cordon_tool_tool().call_call(store, tool, arguments, &input.to_wit()).await
            }
            (Self::Plain(instance), GuestPre::Plain { functions, .. }) => {
                let function = functions
                    .get(tool)
                    .ok_or_else(|| wasmtime::format_err!("the component has no function for tool {tool}"))?;
                Ok(function.call(store, instance, arguments).await?.map(v2::CallReply::Done))
            }
            (Self::Plain(_), GuestPre::Cordon(_) | GuestPre::CordonV2(_)) => {
                unreachable!("an instance is made from its own component")
            }
        }
    }

    /// The guest's tool list (`None`: a plain component, which has none).
    pub(crate) async fn list_tools(
        &self,
        store: &mut wasmtime::Store<GuestState>,
    ) -> wasmtime::Result<Option<Vec<ToolInfo>>> {
        Ok(match self {
            Self::Cordon(plugin) => Some(plugin.cordon_tool_tool().call_list(store).await?),
            Self::CordonV2(plugin) => Some(plugin.cordon_tool_tool().call_list(store).await?),
            Self::Plain(_) => None,
        })
    }

    /// Run the guest's `cleanup` (a plain component has none: nothing runs).
    pub(crate) async fn cleanup(
        &self,
        store: &mut wasmtime::Store<GuestState>,
        context: &CleanupContext,
    ) -> wasmtime::Result<()> {
        match self {
            Self::Cordon(plugin) => plugin.cordon_tool_tool().call_cleanup(store, context).await,
            Self::CordonV2(plugin) => plugin.cordon_tool_tool().call_cleanup(store, context).await,
            Self::Plain(_) => Ok(()),
        }
    }
}

/// A component compiled and pre-instantiated, and what kind it is.
pub(crate) struct Prepared {
    pub(crate) pre: GuestPre,
    /// A plain component's tools, derived from its exports (a Cordon component lists its
    /// own when instantiated).
    pub(crate) plain_tools: Vec<ToolSpec>,
    /// Exports of a plain component left out, each with why.
    pub(crate) warnings: Vec<String>,
}

/// The interface a Cordon tool component exports.
const CORDON_TOOL_INTERFACE: &str = "cordon:tool/tool";

/// Whether `component` exports Cordon's `tool` interface, at any version.
pub(crate) fn exports_cordon_tool(engine: &Engine, component: &wasmtime::component::Component) -> bool {
    component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name.split('@').next() == Some(CORDON_TOOL_INTERFACE))
}

/// The version of the `cordon:tool/tool` interface `component` exports (`0.1.0`, `0.2.0`).
fn cordon_tool_version(engine: &Engine, component: &wasmtime::component::Component) -> Option<String> {
    component.component_type().exports(engine).find_map(|(name, _)| {
        let (interface, version) = name.split_once('@')?;
        (interface == CORDON_TOOL_INTERFACE).then(|| version.to_owned())
    })
}

/// Check the header, compile, and pre-instantiate against our linker; a component that
/// does not export `cordon:tool/tool` is served as a plain component (plain.rs).
pub(crate) fn prepare(
    engine: &Engine,
    linker: &Linker<GuestState>,
    origin: &str,
    bytes: &[u8],
    cache_dir: Option<&Path>,
    cache: &super::engine::CompileCache,
) -> Result<Prepared, LoadError> {
    let is_text = bytes.trim_ascii_start().starts_with(b"(");
    if !is_text {
        if bytes.len() < 8 || &bytes[..4] != WASM_MAGIC {
            return Err(LoadError::new(origin, "not a WebAssembly file (no `\\0asm` header)"));
        }
        if bytes[4..8] == CORE_MODULE_VERSION {
            return Err(LoadError::new(
                origin,
                "is a core WebAssembly module, not a component; build it for wasm32-wasip2 \
                 (or wrap it with `wasm-tools component new`)",
            ));
        }
        if bytes[6..8] != COMPONENT_LAYER {
            return Err(LoadError::new(origin, "not a WebAssembly component (unknown header layer)"));
        }
    }
    let component = compile_component(engine, bytes, cache_dir, cache)
        .map_err(|error| LoadError::new(origin, format!("invalid component: {error:#}")))?;
    let instance_pre = linker.instantiate_pre(&component).map_err(|error| {
        LoadError::new(origin, format!("imports something Cordon does not provide: {error:#}"))
    })?;
    if !exports_cordon_tool(engine, &component) {
        let found = super::plain::discover(engine, &component, bytes)
            .map_err(|problem| LoadError::new(origin, problem))?;
        let pre = GuestPre::Plain { pre: instance_pre, functions: Arc::new(found.functions) };
        return Ok(Prepared { pre, plain_tools: found.tools, warnings: found.warnings });
    }
    let version = cordon_tool_version(engine, &component).unwrap_or_default();
    let refused = |error: wasmtime::Error| {
        LoadError::new(
            origin,
            format!(
                "does not implement the cordon:tool@{version} `plugin` world (export `cordon:tool/tool`): \
                 {error:#}; a Rust tool exports it with `cordon_guest::export_plugin!(YourPlugin);` \
                 at its crate root"
            ),
        )
    };
    let pre = if version == "0.2.0" {
        GuestPre::CordonV2(v2::PluginPre::new(instance_pre).map_err(refused)?)
    } else {
        GuestPre::Cordon(PluginPre::new(instance_pre).map_err(refused)?)
    };
    Ok(Prepared { pre, plain_tools: Vec::new(), warnings: Vec::new() })
}

/// Compile every tool's schemas.
pub(crate) fn compile_schemas(
    origin: &str,
    specs: &[ToolSpec],
    threads: &Arc<CheckThreads>,
) -> Result<HashMap<String, ToolSchemas>, LoadError> {
    // Each pattern is compiled now and held while the component is: bounded in number here
    // and in size by schema.rs.
    let patterns: usize = specs
        .iter()
        .flat_map(|spec| std::iter::once(&spec.input_schema).chain(&spec.output_schema))
        .map(pattern_count)
        .sum();
    if patterns > MAX_PATTERNS {
        return Err(LoadError::new(
            origin,
            format!(
                "its tools' schemas hold {patterns} patterns (`pattern`, `patternProperties`); at most {} \
                 are compiled for one component",
                MAX_PATTERNS
            ),
        ));
    }
    specs
        .iter()
        .map(|spec| {
            let schemas = ToolSchemas::compile(spec, threads)
                .map_err(|problem| LoadError::new(origin, format!("tool {:?}: {problem}", spec.name)))?;
            Ok((spec.name.clone(), schemas))
        })
        .collect()
}

/// Turn the guest's `list` into specs, rejecting anything clients could not use: the
/// rules of `cordon-rules`, which the guest SDK checks in a tool's own tests too.
pub(crate) fn tool_specs(origin: &str, infos: Vec<ToolInfo>) -> Result<Vec<ToolSpec>, LoadError> {
    let listed = infos.iter().map(|info| cordon_rules::ListedTool {
        name: &info.name,
        input_schema: &info.input_schema,
        output_schema: info.output_schema.as_deref(),
    });
    let checked = cordon_rules::check_tools(listed)
        .map_err(|violation| LoadError::new(origin, violation.to_string()))?;
    Ok(infos
        .into_iter()
        .zip(checked)
        .map(|(info, checked)| ToolSpec {
            name: checked.name,
            title: info.title,
            description: info.description,
            input_schema: checked.input_schema,
            output_schema: checked.output_schema,
            annotations: info.annotations,
            requires: info.requires,
            param_headers: checked.param_headers,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a guest listed reaches the log in a load error (a schema's property name, a
    /// trap's backtrace): one line, escaped, cut. Before, a name with a newline wrote a
    /// line of the guest's own into the operator's log, at each listing.
    #[test]
    fn a_load_error_is_one_bounded_line_whatever_the_guest_put_in_it() {
        let forged =
            "`a\n2026-12-06T00:00:00Z  INFO cordon::call: call ended outcome=\"ok\"\u{202e}` is invalid";
        let shown = LoadError::new("tools.wasm", forged).to_string();
        assert!(!shown.contains('\n') && !shown.contains('\u{202e}'), "{shown}");
        assert!(shown.starts_with("tools.wasm: `a\\n2026-12-06"), "{shown}");
        let long = LoadError::new("tools.wasm", "x".repeat(1 << 20)).to_string();
        assert!(long.len() < MAX_PROBLEM_BYTES + 64 && long.ends_with('…'), "{} bytes", long.len());
    }

    #[test]
    fn importing_outbound_http_without_a_grant_is_warned_about_and_the_environment_is_not() {
        let none = ComponentOptions::default();
        let imports = vec!["wasi:cli/environment@0.2.12".to_owned(), "wasi:io/poll@0.2.12".to_owned()];
        assert!(grant_warnings(&imports, &none).is_empty(), "std imports the environment: no news");
        let http = vec!["wasi:http/outgoing-handler@0.2.12".to_owned()];
        assert_eq!(grant_warnings(&http, &none).len(), 1);
        let allowed = ComponentOptions {
            allow_http: HttpGrants::parse(&["https://api.example.com".to_owned()]).unwrap(),
            ..ComponentOptions::default()
        };
        assert!(grant_warnings(&http, &allowed).is_empty());
    }

    #[test]
    fn a_component_whose_schemas_hold_too_many_patterns_is_refused_naming_the_bound() {
        let spec = |name: &str, patterns: usize| {
            let properties: serde_json::Map<String, Value> = (0..patterns)
                .map(|index| {
                    (format!("p{index}"), serde_json::json!({ "type": "string", "pattern": "^a+$" }))
                })
                .collect();
            ToolSpec {
                name: name.into(),
                title: None,
                description: String::new(),
                input_schema: serde_json::json!({ "type": "object", "properties": properties }),
                output_schema: Some(
                    serde_json::json!({ "type": "object", "patternProperties": { "^x": {} } }),
                ),
                annotations: None,
                requires: Vec::new(),
                param_headers: Vec::new(),
            }
        };
        let threads = Arc::default();
        let at_the_bound = [spec("a", MAX_PATTERNS / 2 - 1), spec("b", MAX_PATTERNS / 2 - 1)];
        assert!(compile_schemas("c.wasm", &at_the_bound, &threads).is_ok());
        let over = [spec("a", MAX_PATTERNS / 2 - 1), spec("b", MAX_PATTERNS / 2)];
        let error = compile_schemas("c.wasm", &over, &threads).err().expect("loaded").to_string();
        assert!(error.contains(&format!("hold {} patterns", MAX_PATTERNS + 1)), "{error}");
        assert!(error.contains(&format!("at most {MAX_PATTERNS}")), "{error}");
    }
}
