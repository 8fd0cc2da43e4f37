//! `cordon inspect`: what a component is and what it will get.
//!
//! For one component file: the world it targets (a Cordon tool component, which version,
//! or a plain component of exported functions), each interface it imports with what it
//! will find there, its exports, its tools with their schemas (read by loading it, in a
//! sandbox with nothing granted) and, with a config, what the config grants it. An import
//! Cordon does not provide is refused: the component will not load. An import Cordon
//! provides may still find nothing to use: sockets are always disabled, and the file
//! system, the environment and outbound HTTP hold only what the config grants.

use std::fmt::{self, Write as _};
use std::path::Path;

use crate::config::{Config, Grants};
use crate::runtime::{
    ComponentKind, ComponentOptions, Description, GUEST_DATA_DIR, LoadError, Runtime, RuntimeSettings,
    ToolSpec, grant_warnings,
};

/// Why a component could not be inspected at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The file is not a component (or cannot be read).
    #[error(transparent)]
    Component(#[from] LoadError),
    /// The config could not be read, or names the component in a way that cannot be resolved.
    #[error("{0}")]
    Config(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// Everything `cordon inspect` says about a component; its `Display` is the report.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub path: String,
    pub description: Description,
    /// Its tools, or why it cannot be loaded.
    pub tools: Result<Vec<ToolSpec>, String>,
    /// What the config grants it, when a config was given: `None` inside when the config
    /// has no entry for the file.
    pub grants: Option<(String, Option<Grants>)>,
}

/// What an import will give the component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportVerdict {
    /// Provided, and usable as the grants stand.
    Provided(&'static str),
    /// Provided, but empty or denied as the grants stand: why.
    Empty(String),
    /// Not provided: the component does not load.
    Refused(String),
}

/// Inspect the component in `component`, with the grants `config` gives it, if any.
pub async fn inspect(component: &Path, config: Option<&Path>) -> Result<Inspection, InspectError> {
    let settings = RuntimeSettings::default();
    let mut runtime = Runtime::new(settings).map_err(|error| InspectError::Runtime(format!("{error:#}")))?;
    let description = runtime.describe_file(component)?;
    let grants = match config {
        None => None,
        Some(config) => {
            // A bare file name's parent is empty: the current directory.
            let parent = config.parent().filter(|parent| !parent.as_os_str().is_empty());
            let base = std::path::absolute(parent.unwrap_or(Path::new(".")))
                .map_err(|error| InspectError::Config(format!("{}: {error}", config.display())))?;
            let loaded = Config::load(config).map_err(|error| InspectError::Config(format!("{error:#}")))?;
            let grants = loaded
                .grants_for(&base, component)
                .map_err(|error| InspectError::Config(format!("{error:#}")))?;
            Some((config.display().to_string(), grants))
        }
    };
    // Nothing granted: listing tools must not create a data directory or read secrets.
    let tools = match runtime.load_file(component, ComponentOptions::default()).await {
        Ok(()) => Ok(runtime.snapshot().tools().cloned().collect()),
        Err(error) => Err(error.problem),
    };
    Ok(Inspection { path: component.display().to_string(), description, tools, grants })
}

/// `name` without its version: `wasi:io/poll@0.2.6` → `wasi:io/poll`.
fn unversioned(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// The version after `@`, if any.
fn version(name: &str) -> Option<&str> {
    name.split_once('@').map(|(_, version)| version)
}

/// What import `name` gives a component with `grants` (`None`: nothing granted).
pub fn import_verdict(name: &str, grants: Option<&Grants>) -> ImportVerdict {
    let interface = unversioned(name);
    let version = version(name).unwrap_or("");
    let (package, _) = interface.split_once('/').unwrap_or((interface, ""));
    let is_0_2 = version.starts_with("0.2.");
    match package {
        "cordon:tool"
            if (version.starts_with("0.1.") || is_0_2)
                && matches!(interface, "cordon:tool/host" | "cordon:tool/types")
                || is_0_2 && interface == "cordon:tool/input" =>
        {
            ImportVerdict::Provided("Cordon's host interface")
        }
        "cordon:tool" => ImportVerdict::Refused(format!(
            "Cordon provides cordon:tool/host and cordon:tool/types 0.1.x and 0.2.x, and cordon:tool/input 0.2.x, not {name}: the component will not load"
        )),
        "wasi:io" | "wasi:clocks" | "wasi:random" if is_0_2 => ImportVerdict::Provided("provided"),
        "wasi:cli" if is_0_2 => match interface {
            "wasi:cli/environment" => {
                let names: Vec<&String> =
                    grants.map(|grants| grants.env.iter().chain(&grants.secrets).collect()).unwrap_or_default();
                if names.is_empty() {
                    ImportVerdict::Empty("an empty environment: no `env` or `secrets` granted".into())
                } else {
                    ImportVerdict::Provided("the granted `env` and `secrets` variables")
                }
            }
            "wasi:cli/stdin" => ImportVerdict::Empty("stdin is closed".into()),
            "wasi:cli/stdout" => ImportVerdict::Empty("stdout is discarded".into()),
            "wasi:cli/stderr" => ImportVerdict::Provided("to the operator's log, tagged with the component"),
            _ => ImportVerdict::Provided("provided"),
        },
        "wasi:filesystem" if is_0_2 => {
            let granted = grants.is_some_and(|grants| grants.data_dir.is_some() || !grants.mounts.is_empty());
            if granted {
                ImportVerdict::Provided("the granted data directory and mounts only")
            } else {
                ImportVerdict::Empty("no file system: no `data_dir` or `[[components.mounts]]` granted".into())
            }
        }
        "wasi:sockets" if is_0_2 => ImportVerdict::Empty(
            "sockets are always refused (outbound HTTP goes through wasi:http/outgoing-handler and `allow_http`)".into(),
        ),
        "wasi:http" if is_0_2 && interface == "wasi:http/outgoing-handler" => {
            if grants.is_some_and(|grants| !grants.allow_http.is_empty()) {
                ImportVerdict::Provided("requests to the `allow_http` rules only")
            } else {
                ImportVerdict::Empty("every request is denied: no `allow_http` granted".into())
            }
        }
        "wasi:http" if is_0_2 && interface == "wasi:http/types" => ImportVerdict::Provided("provided"),
        _ => ImportVerdict::Refused(format!("Cordon does not provide {name}: the component will not load")),
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let grants = self.grants.as_ref().and_then(|(_, grants)| grants.as_ref());
        let description = &self.description;
        writeln!(out, "component: {}", self.path)?;
        match &description.kind {
            ComponentKind::Cordon { interface } => {
                let version = version(interface).unwrap_or("unversioned");
                writeln!(
                    out,
                    "world: Cordon tool component (cordon:tool/plugin, exports {interface}; Cordon {version})"
                )?;
            }
            ComponentKind::Plain => writeln!(
                out,
                "world: plain component (exports typed functions, no Cordon world): each function is a tool, \
                 stopped like any other; there is no cleanup to run"
            )?,
        }
        match (&self.grants, grants) {
            (None, _) => writeln!(out, "imports (as served without a config, with nothing granted):")?,
            (Some((config, _)), Some(grants)) => {
                writeln!(out, "imports (with the grants of component {} in {config}):", grants.name)?
            }
            (Some((config, _)), None) => writeln!(
                out,
                "imports ({config} has no [[components]] entry for this file: nothing granted):"
            )?,
        }
        if description.interfaces.imports.is_empty() {
            writeln!(out, "  none")?;
        }
        for name in &description.interfaces.imports {
            match import_verdict(name, grants) {
                ImportVerdict::Provided(what) => writeln!(out, "  {name}: {what}")?,
                ImportVerdict::Empty(why) => writeln!(out, "  {name}: {why}")?,
                ImportVerdict::Refused(why) => writeln!(out, "  {name}: REFUSED: {why}")?,
            }
        }
        writeln!(out, "exports:")?;
        for name in &description.interfaces.exports {
            writeln!(out, "  {name}")?;
        }
        match &self.tools {
            Ok(tools) => {
                writeln!(out, "tools:")?;
                for tool in tools {
                    write_tool(out, tool)?;
                }
            }
            Err(problem) => writeln!(out, "tools: none: the component does not load: {problem}")?,
        }
        for left_out in &description.left_out {
            writeln!(out, "left out: {left_out}")?;
        }
        if let Some((config, grants)) = &self.grants {
            match grants {
                Some(grants) => write_grants(out, config, grants, &description.interfaces.imports)?,
                None => writeln!(out, "grants: none ({config} has no [[components]] entry for this file)")?,
            }
        }
        Ok(())
    }
}

fn write_tool(out: &mut fmt::Formatter<'_>, tool: &ToolSpec) -> fmt::Result {
    let mut line = format!("  {}", tool.name);
    if !tool.description.is_empty() {
        let first = tool.description.lines().next().unwrap_or_default();
        let _ = write!(line, ": {}", crate::text::printable(first));
    }
    writeln!(out, "{line}")?;
    writeln!(out, "    input schema: {}", tool.input_schema)?;
    if let Some(output) = &tool.output_schema {
        writeln!(out, "    output schema: {output}")?;
    }
    Ok(())
}

/// A quota as the config wrote it (MiB), or in bytes when it is not whole MiB.
fn quota_text(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) { format!("{} MiB", bytes >> 20) } else { format!("{bytes} bytes") }
}

fn write_grants(
    out: &mut fmt::Formatter<'_>,
    config: &str,
    grants: &Grants,
    imports: &[String],
) -> fmt::Result {
    writeln!(out, "grants (component {} in {config}):", grants.name)?;
    match &grants.data_dir {
        Some(dir) => writeln!(
            out,
            "  data_dir: {} at {GUEST_DATA_DIR} (quota {})",
            dir.display(),
            quota_text(grants.data_quota_bytes)
        )?,
        None => writeln!(out, "  data_dir: none")?,
    }
    if grants.mounts.is_empty() {
        writeln!(out, "  mounts: none")?;
    } else {
        writeln!(out, "  mounts:")?;
        for mount in &grants.mounts {
            let mode = match (mount.writable, mount.quota_bytes) {
                (false, _) => "ro".to_owned(),
                (true, None) => "rw".to_owned(),
                (true, Some(bytes)) => format!("rw, quota {}", quota_text(bytes)),
            };
            writeln!(out, "    {} at {} ({mode})", mount.host.display(), mount.guest)?;
        }
    }
    let list = |names: &[String]| if names.is_empty() { "none".to_owned() } else { names.join(", ") };
    writeln!(out, "  env: {}", list(&grants.env))?;
    writeln!(out, "  secrets: {} (values never shown)", list(&grants.secrets))?;
    writeln!(out, "  allow_http: {}", list(&grants.allow_http.describe()))?;
    writeln!(
        out,
        "  secret_headers: {} (values never shown)",
        list(&grants.allow_http.describe_secret_headers())
    )?;
    for warning in grant_warnings(imports, &grants.options_without_values()) {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}
