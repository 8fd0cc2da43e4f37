//! `cordon new` and `cordon build`: a tool project anywhere on the machine, made from a
//! template embedded in this binary, and its component built with whatever toolchain the
//! machine has (`cordon-toolchain`, the discovery `cargo xtask guests` uses too).
//!
//! A language is a template folder plus a build recipe ([`Language`]). Every project gets
//! the SDK itself, because no `cordon-guest` is published to a registry and a path into this
//! repository would not exist on an author's machine: the project builds anywhere with the
//! SDK of the `cordon` that made it.
//!
//! - **Rust**: the template is `guest-sdk/template/`; the SDK goes to `vendor/` (`guest-sdk`
//!   and the `rules` it shares with the host), and `Cargo.lock` starts from the one the
//!   example guests are built and tested with. `build` runs cargo on the route
//!   `cordon-toolchain` finds, in release.
//! - **Python**: `guest-sdk/python/template/`; the SDK goes to `cordon-guest/` (its
//!   `src/` is on componentize-py's path and, through `pyproject.toml`, on pytest's).
//!   `build` runs componentize-py from a virtualenv in the cache folder ([`cache_dir`]),
//!   made on first use, into `<name>.wasm`.
//! - **JavaScript**: `guest-sdk/js/template/`; the SDK goes to `cordon-guest/`, which
//!   `package.json` depends on as `file:cordon-guest`. `build` runs `npm install` when
//!   `node_modules` is missing or older than `package.json`, then `npm run build` (the SDK's
//!   `build.js`: rolldown, then componentize-js) into `dist/<name>.wasm`, on a Node new
//!   enough (the machine's, else Node 22 installed into the cache folder).
//!
//! `build` checks first what would otherwise fail late or silently: a crate without
//! `crate-type = ["cdylib"]` (cargo then builds no `.wasm` and says nothing), no SDK
//! dependency, no toolchain (the error says what to install). The caller loads the result as
//! the server would (main.rs), which reports a missing `export_plugin!` or a tool list the
//! host refuses.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cordon_toolchain::{Install, TARGET, ToolchainError};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/author_files.rs"));
}

/// What can go wrong making or building a project.
#[derive(Debug, thiserror::Error)]
pub enum AuthorError {
    #[error("unknown language {0:?}: `cordon new --lang` takes {known}", known = Language::NAMES.join(", "))]
    UnknownLanguage(String),
    #[error("{0}: already exists; `cordon new` makes a new folder")]
    Exists(PathBuf),
    #[error("{name:?} cannot name a project: {problem}")]
    BadName { name: String, problem: &'static str },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{0}: no Cargo.toml, pyproject.toml or package.json: run `cordon build` in a tool project \
         (`cordon new NAME [--lang rust|python|js]` makes one)"
    )]
    NotAProject(PathBuf),
    #[error("{path}: {problem}")]
    Manifest { path: PathBuf, problem: String },
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("running {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("the build failed ({status}); {tool}'s errors are above")]
    BuildFailed { tool: &'static str, status: std::process::ExitStatus },
    #[error(
        "no folder to keep the Python and JavaScript toolchains in: set CORDON_CACHE_DIR \
         (or XDG_CACHE_HOME or HOME)"
    )]
    NoCacheDir,
    #[error("the build finished but made no {path}: {hint}")]
    NoComponent { path: PathBuf, hint: &'static str },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AuthorError + '_ {
    move |source| AuthorError::Io { path: path.to_owned(), source }
}

/// A language `cordon new` can make a project in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    Js,
}

/// One language's template and recipe.
struct Recipe {
    /// The template folder, relative to the repository: copied with `{{name}}` (or
    /// `__NAME__`) and `{{crate_name}}` filled in (a file named `gitignore` becomes
    /// `.gitignore`).
    template: &'static str,
    /// Folders copied as they are: (from, relative to the repository; to, in the project).
    vendored: &'static [(&'static str, &'static str)],
    /// Subfolders of the vendored ones left out: the templates, the SDK's own tests, and
    /// (for Rust) the other languages' SDKs.
    not_vendored: &'static [&'static str],
    /// Files copied as they are: (from; to).
    extra: &'static [(&'static str, &'static str)],
}

impl Language {
    /// The names `--lang` takes.
    pub const NAMES: &[&str] = &["rust", "python", "js"];

    /// The language named `name`.
    pub fn parse(name: &str) -> Result<Self, AuthorError> {
        match name {
            "rust" => Ok(Language::Rust),
            "python" => Ok(Language::Python),
            "js" => Ok(Language::Js),
            other => Err(AuthorError::UnknownLanguage(other.to_owned())),
        }
    }

    /// What to run after `cordon build` in a new project, for people.
    pub fn next_steps(self) -> &'static str {
        match self {
            Language::Rust => "then `cargo test`; the README says how to serve it",
            Language::Python => "then test natively with pytest; the README says how, and how to serve it",
            Language::Js => "the README says how to try and serve it",
        }
    }

    fn recipe(self) -> Recipe {
        match self {
            Language::Rust => Recipe {
                template: "guest-sdk/template",
                vendored: &[("guest-sdk", "vendor/guest-sdk"), ("rules", "vendor/rules")],
                not_vendored: &["template/", "python/", "js/", "tests/"],
                extra: &[("examples/Cargo.lock", "Cargo.lock")],
            },
            Language::Python => Recipe {
                template: "guest-sdk/python/template",
                vendored: &[("guest-sdk/python", PYTHON_SDK)],
                not_vendored: &["template/", "tests/"],
                extra: &[],
            },
            Language::Js => Recipe {
                template: "guest-sdk/js/template",
                vendored: &[("guest-sdk/js", JS_SDK)],
                not_vendored: &["template/", "tests/"],
                extra: &[],
            },
        }
    }
}

/// Where a Python project keeps the SDK; its `src/` holds the `cordon_guest` package.
const PYTHON_SDK: &str = "cordon-guest";
/// Where a JavaScript project keeps the SDK, a `file:` dependency of its `package.json`.
const JS_SDK: &str = "cordon-guest";

/// Make a project at `path` (a new folder; its name names the project). Returns the files
/// written, relative to `path`.
pub fn new_project(path: &Path, language: Language) -> Result<Vec<PathBuf>, AuthorError> {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    check_name(&name)?;
    if path.exists() {
        return Err(AuthorError::Exists(path.to_owned()));
    }
    let crate_name = name.replace('-', "_");
    let recipe = language.recipe();
    let mut written = Vec::new();
    let mut write = |relative: PathBuf, bytes: &[u8]| -> Result<(), AuthorError> {
        let target = path.join(&relative);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        fs::write(&target, bytes).map_err(io(&target))?;
        written.push(relative);
        Ok(())
    };
    for (file, bytes) in embedded::AUTHOR_FILES {
        if let Some(relative) = file.strip_prefix(recipe.template).and_then(|rest| rest.strip_prefix('/')) {
            let relative = match relative {
                "gitignore" => ".gitignore",
                other => other,
            };
            let text = String::from_utf8_lossy(bytes)
                .replace("{{name}}", &name)
                .replace("__NAME__", &name)
                .replace("{{crate_name}}", &crate_name);
            write(PathBuf::from(relative), text.as_bytes())?;
            continue;
        }
        for (from, to) in recipe.vendored {
            if let Some(relative) = file.strip_prefix(from).and_then(|rest| rest.strip_prefix('/'))
                && !recipe.not_vendored.iter().any(|prefix| relative.starts_with(prefix))
            {
                write(Path::new(to).join(relative), bytes)?;
            }
        }
        for (from, to) in recipe.extra {
            if file == from {
                write(PathBuf::from(to), bytes)?;
            }
        }
    }
    Ok(written)
}

/// A project name: a crate name too (letters, digits, `-`, `_`; a letter first), at most
/// 64 characters.
fn check_name(name: &str) -> Result<(), AuthorError> {
    let bad = |problem| Err(AuthorError::BadName { name: name.to_owned(), problem });
    if name.is_empty() || name.len() > 64 {
        return bad("a name has 1 to 64 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("a name starts with a letter");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return bad("a name uses only letters, digits, `-` and `_`");
    }
    Ok(())
}

/// A component `build` made.
#[derive(Debug)]
pub struct Built {
    /// The `.wasm` file.
    pub component: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Which toolchain built it.
    pub toolchain: String,
    /// Advice that does not stop the build (e.g. a release profile that makes a larger
    /// component than it needs to).
    pub notes: Vec<String>,
}

/// Build the project in `dir` into a component: a Rust crate (`Cargo.toml`), a Python
/// project (`pyproject.toml`) or a JavaScript one (`package.json`).
pub fn build(dir: &Path) -> Result<Built, AuthorError> {
    // Absolute, so that the path printed for the component works from anywhere.
    let dir = &std::path::absolute(dir).map_err(io(dir))?;
    if dir.join("Cargo.toml").is_file() {
        build_rust(dir)
    } else if dir.join("pyproject.toml").is_file() {
        build_python(dir)
    } else if dir.join("package.json").is_file() {
        build_js(dir)
    } else {
        Err(AuthorError::NotAProject(dir.to_owned()))
    }
}

fn build_rust(dir: &Path) -> Result<Built, AuthorError> {
    let rust = RustProject::read(&dir.join("Cargo.toml"))?;
    let route = cordon_toolchain::discover(Install::Never)?;
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target_dir) => std::path::absolute(PathBuf::from(target_dir)).map_err(io(dir))?,
        None => dir.join("target"),
    };
    let component = target_dir.join(TARGET).join("release").join(format!("{}.wasm", rust.lib_name));
    let mut cargo = route.build_command(dir, &target_dir);
    run_build(&mut cargo, "cargo")?;
    let hint = "is `[lib] crate-type = [\"cdylib\"]` in Cargo.toml, and the library named as expected?";
    let bytes = component_size(&component, hint)?;
    Ok(Built { component, bytes, toolchain: route.describe().to_owned(), notes: rust.notes })
}

/// Run a build step whose output goes to stderr (stdout is `cordon build`'s result).
fn run_build(command: &mut Command, tool: &'static str) -> Result<(), AuthorError> {
    let status = command
        .stdout(std::io::stderr())
        .status()
        .map_err(|source| AuthorError::Spawn { program: program_of(command), source })?;
    if !status.success() {
        return Err(AuthorError::BuildFailed { tool, status });
    }
    Ok(())
}

fn component_size(component: &Path, hint: &'static str) -> Result<u64, AuthorError> {
    match fs::metadata(component) {
        Ok(metadata) => Ok(metadata.len()),
        Err(_) => Err(AuthorError::NoComponent { path: component.to_owned(), hint }),
    }
}

/// Where `cordon build` keeps the toolchains it installs (componentize-py's virtualenv,
/// Node 22 when the machine's is too old), shared by every project: `CORDON_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/cordon`, else `~/.cache/cordon`.
pub fn cache_dir() -> Result<PathBuf, AuthorError> {
    let from_env = |key| std::env::var_os(key).filter(|value| !value.is_empty()).map(PathBuf::from);
    let dir = from_env("CORDON_CACHE_DIR")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|cache| cache.join("cordon")))
        .or_else(|| from_env("HOME").map(|home| home.join(".cache/cordon")))
        .ok_or(AuthorError::NoCacheDir)?;
    std::path::absolute(&dir).map_err(io(&dir))
}

/// A Python project: `pyproject.toml` names it (`[project] name`: the component is
/// `<name>.wasm`) and may name the module its tools are in (`[tool.cordon] module`, `app`
/// by default); the SDK is in `cordon-guest/src`.
fn build_python(dir: &Path) -> Result<Built, AuthorError> {
    let manifest_path = dir.join("pyproject.toml");
    let manifest = read_toml(&manifest_path)?;
    let problem = |problem: String| AuthorError::Manifest { path: manifest_path.clone(), problem };
    let name = manifest
        .get("project")
        .and_then(|project| project.get("name"))
        .and_then(toml::Value::as_str)
        .ok_or_else(|| problem("no `name` under [project]: it names the component, `<name>.wasm`".into()))?;
    check_name(name)?;
    let module = manifest
        .get("tool")
        .and_then(|tool| tool.get("cordon"))
        .and_then(|cordon| cordon.get("module"))
        .and_then(toml::Value::as_str)
        .unwrap_or("app");
    if !dir.join(format!("{module}.py")).is_file() && !dir.join(module).join("__init__.py").is_file() {
        return Err(problem(format!(
            "the tools' module {module:?} ([tool.cordon] module) is neither {module}.py nor {module}/__init__.py here"
        )));
    }
    let sdk = Path::new(PYTHON_SDK).join("src");
    if !dir.join(&sdk).join("cordon_guest/__init__.py").is_file() {
        return Err(problem(format!(
            "no SDK in {PYTHON_SDK}/: a tool is built on Cordon's Python SDK, which `cordon new --lang python NAME` \
             writes into {PYTHON_SDK}/; copy that folder here"
        )));
    }
    let program = cordon_toolchain::python::componentize_py(&cache_dir()?.join("python-guest-venv"))?;
    let component = dir.join(format!("{name}.wasm"));
    let mut componentize = cordon_toolchain::python::componentize_command(
        &program,
        module,
        &[Path::new("."), &sdk],
        Path::new(&format!("{name}.wasm")),
    );
    run_build(componentize.current_dir(dir), "componentize-py")?;
    let bytes = component_size(&component, "componentize-py wrote no component")?;
    let toolchain = cordon_toolchain::python::COMPONENTIZE_PY.replace("==", " ");
    Ok(Built { component, bytes, toolchain, notes: Vec::new() })
}

/// A JavaScript project: `package.json` names it (the component is `dist/<name>.wasm`),
/// depends on the SDK and has the `build` script the template gives it.
fn build_js(dir: &Path) -> Result<Built, AuthorError> {
    let manifest_path = dir.join("package.json");
    let text = fs::read_to_string(&manifest_path).map_err(io(&manifest_path))?;
    let problem = |problem: String| AuthorError::Manifest { path: manifest_path.clone(), problem };
    let manifest: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| problem(format!("not valid JSON: {error}")))?;
    let name = manifest["name"]
        .as_str()
        .ok_or_else(|| problem("no `name`: it names the component, dist/<name>.wasm".into()))?;
    check_name(name)?;
    if manifest["dependencies"]["cordon-guest"].is_null() {
        return Err(problem(format!(
            "no `cordon-guest` dependency: a tool is built on Cordon's JavaScript SDK, which `cordon new --lang js \
             NAME` writes into {JS_SDK}/; copy that folder here and add, under \"dependencies\",\n\n\
             \"cordon-guest\": \"file:{JS_SDK}\"\n"
        )));
    }
    if manifest["scripts"]["build"].is_null() {
        return Err(problem(format!(
            "no `build` script: add, under \"scripts\",\n\n\
             \"build\": \"cordon-guest-build src/index.js dist/{name}.wasm\"\n"
        )));
    }
    let node = cordon_toolchain::js::node(&cache_dir()?.join("js-node"))?;
    if needs_npm_install(dir) {
        let args = ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"];
        cordon_toolchain::js::npm(dir, Some(&node), &args)?;
    }
    let mut npm = cordon_toolchain::js::on_node("npm", &node);
    run_build(npm.current_dir(dir).args(["run", "--silent", "build"]), "the build script")?;
    let component = dir.join("dist").join(format!("{name}.wasm"));
    let hint = "does the `build` script in package.json write dist/<name>.wasm?";
    let bytes = component_size(&component, hint)?;
    let version = cordon_toolchain::js::node_version(&node).unwrap_or_default();
    let toolchain = format!("componentize-js on Node {}.{}", version.0, version.1);
    Ok(Built { component, bytes, toolchain, notes: Vec::new() })
}

/// Whether `npm install` must run: no `node_modules` yet, or one older than `package.json`.
fn needs_npm_install(dir: &Path) -> bool {
    let modified = |path: PathBuf| fs::metadata(path).and_then(|metadata| metadata.modified()).ok();
    match (modified(dir.join("node_modules/.package-lock.json")), modified(dir.join("package.json"))) {
        (Some(installed), Some(manifest)) => installed < manifest,
        _ => true,
    }
}

fn read_toml(path: &Path) -> Result<toml::Table, AuthorError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    toml::from_str(&text).map_err(|error| AuthorError::Manifest {
        path: path.to_owned(),
        problem: format!("not valid TOML: {error}"),
    })
}

fn program_of(command: &Command) -> String {
    command.get_program().to_string_lossy().into_owned()
}

/// What `build` needs from a Rust project's Cargo.toml, checked.
struct RustProject {
    lib_name: String,
    notes: Vec<String>,
}

impl RustProject {
    fn read(path: &Path) -> Result<Self, AuthorError> {
        let manifest = read_toml(path)?;
        let problem = |problem: String| AuthorError::Manifest { path: path.to_owned(), problem };
        let package = manifest
            .get("package")
            .and_then(toml::Value::as_table)
            .ok_or_else(|| problem("no [package]: a tool project is one crate".into()))?;
        let package_name = package.get("name").and_then(toml::Value::as_str).unwrap_or_default();
        let lib = manifest.get("lib").and_then(toml::Value::as_table);
        let is_cdylib = lib
            .and_then(|lib| lib.get("crate-type"))
            .and_then(toml::Value::as_array)
            .is_some_and(|types| types.iter().any(|kind| kind.as_str() == Some("cdylib")));
        if !is_cdylib {
            return Err(problem(
                "the crate is not a cdylib, so cargo would build no .wasm (and say nothing): add\n\n\
                 [lib]\ncrate-type = [\"cdylib\"]\n"
                    .into(),
            ));
        }
        let depends = |name: &str| {
            manifest
                .get("dependencies")
                .and_then(toml::Value::as_table)
                .is_some_and(|deps| deps.contains_key(name))
        };
        if !depends("cordon-guest") {
            return Err(problem(
                "no `cordon-guest` dependency: a tool is built on Cordon's SDK, which is not on crates.io. \
                 `cordon new NAME` writes a project with the SDK in vendor/guest-sdk and vendor/rules: copy \
                 that vendor/ folder here and add, under [dependencies],\n\n\
                 cordon-guest = { path = \"vendor/guest-sdk\" }\n"
                    .into(),
            ));
        }
        let mut notes = Vec::new();
        for (dependency, why) in
            [("schemars", "derive JsonSchema on argument types"), ("serde", "derive Deserialize")]
        {
            if !depends(dependency) {
                notes.push(format!(
                    "Cargo.toml has no `{dependency}` dependency; tools usually need it to {why}"
                ));
            }
        }
        let release = manifest
            .get("profile")
            .and_then(|profile| profile.get("release"))
            .and_then(toml::Value::as_table);
        let wanted = [
            ("opt-level", "\"s\""),
            ("lto", "true"),
            ("codegen-units", "1"),
            ("strip", "true"),
            ("panic", "\"abort\""),
        ];
        let missing: Vec<String> = wanted
            .iter()
            .filter(|(key, _)| release.is_none_or(|release| !release.contains_key(*key)))
            .map(|(key, value)| format!("{key} = {value}"))
            .collect();
        if !missing.is_empty() {
            notes.push(format!(
                "[profile.release] lacks {}: the component is larger and slower to load than it needs to be",
                missing.join(", ")
            ));
        }
        let lib_name = lib
            .and_then(|lib| lib.get("name"))
            .and_then(toml::Value::as_str)
            .unwrap_or(package_name)
            .replace('-', "_");
        Ok(Self { lib_name, notes })
    }
}
