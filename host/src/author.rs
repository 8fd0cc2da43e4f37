//! `cordon new` and `cordon build`: a tool project anywhere on the machine, made from a
//! template embedded in this binary, and its component built with whatever toolchain the
//! machine has (`cordon-toolchain`, the discovery `cargo xtask guests` uses too).
//!
//! A language is a template folder plus a build recipe ([`Language`]). For Rust the
//! template is `guest-sdk/template/`, and the project gets the SDK itself in `vendor/`
//! (`guest-sdk` and the `rules` it shares with the host), because `cordon-guest` is not on
//! crates.io and a path into this repository would not exist on an author's machine: the
//! project builds anywhere, offline once its crates are fetched, with the SDK of the
//! `cordon` that made it. Its `Cargo.lock` starts from the one the example guests are
//! built and tested with.
//!
//! `build` checks first what would otherwise fail late or silently: a crate without
//! `crate-type = ["cdylib"]` (cargo then builds no `.wasm` and says nothing), no
//! `cordon-guest` dependency, no toolchain (the error says what to install). It always
//! builds in release; the caller loads the result as the server would (main.rs), which
//! reports a missing `export_plugin!` or a tool list the host refuses.

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
    #[error("{0}: no Cargo.toml: run `cordon build` in a tool project (`cordon new NAME` makes one)")]
    NotAProject(PathBuf),
    #[error("{path}: {problem}")]
    Manifest { path: PathBuf, problem: String },
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("running {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("the build failed ({0}); cargo's errors are above")]
    BuildFailed(std::process::ExitStatus),
    #[error(
        "the build finished but made no {0}: is `[lib] crate-type = [\"cdylib\"]` in Cargo.toml, \
         and the library named as expected?"
    )]
    NoComponent(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AuthorError + '_ {
    move |source| AuthorError::Io { path: path.to_owned(), source }
}

/// A language `cordon new` can make a project in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
}

/// One language's template and recipe.
struct Recipe {
    /// The template folder, relative to the repository: copied with `{{name}}` and
    /// `{{crate_name}}` filled in (a file named `gitignore` becomes `.gitignore`).
    template: &'static str,
    /// Folders copied as they are: (from, relative to the repository; to, in the project).
    vendored: &'static [(&'static str, &'static str)],
    /// Files copied as they are: (from; to).
    extra: &'static [(&'static str, &'static str)],
}

impl Language {
    /// The names `--lang` takes.
    pub const NAMES: &[&str] = &["rust"];

    /// The language named `name`.
    pub fn parse(name: &str) -> Result<Self, AuthorError> {
        match name {
            "rust" => Ok(Language::Rust),
            other => Err(AuthorError::UnknownLanguage(other.to_owned())),
        }
    }

    fn recipe(self) -> Recipe {
        match self {
            Language::Rust => Recipe {
                template: "guest-sdk/template",
                vendored: &[("guest-sdk", "vendor/guest-sdk"), ("rules", "vendor/rules")],
                extra: &[("examples/Cargo.lock", "Cargo.lock")],
            },
        }
    }
}

/// Folders under a vendored one that are not part of it: the templates and the other
/// languages' SDKs.
fn is_vendored_file(from_root: &str, relative: &str) -> bool {
    let excluded = ["template/", "python/", "js/", "tests/"];
    !(from_root == "guest-sdk" && excluded.iter().any(|prefix| relative.starts_with(prefix)))
}

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
                .replace("{{crate_name}}", &crate_name);
            write(PathBuf::from(relative), text.as_bytes())?;
            continue;
        }
        for (from, to) in recipe.vendored {
            if let Some(relative) = file.strip_prefix(from).and_then(|rest| rest.strip_prefix('/'))
                && is_vendored_file(from, relative)
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
    pub toolchain: &'static str,
    /// Advice that does not stop the build (e.g. a release profile that makes a larger
    /// component than it needs to).
    pub notes: Vec<String>,
}

/// Build the project in `dir` into a component.
pub fn build(dir: &Path) -> Result<Built, AuthorError> {
    let manifest_path = dir.join("Cargo.toml");
    if !manifest_path.is_file() {
        return Err(AuthorError::NotAProject(dir.to_owned()));
    }
    let rust = RustProject::read(&manifest_path)?;
    let route = cordon_toolchain::discover(Install::Never)?;
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target_dir) => std::path::absolute(PathBuf::from(target_dir)).map_err(io(dir))?,
        None => dir.join("target"),
    };
    let component = target_dir.join(TARGET).join("release").join(format!("{}.wasm", rust.lib_name));
    let mut cargo = route.build_command(dir, &target_dir);
    let status =
        cargo.status().map_err(|source| AuthorError::Spawn { program: program_of(&cargo), source })?;
    if !status.success() {
        return Err(AuthorError::BuildFailed(status));
    }
    let bytes = fs::metadata(&component).map_err(|_| AuthorError::NoComponent(component.clone()))?.len();
    Ok(Built { component, bytes, toolchain: route.describe(), notes: rust.notes })
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
        let text = fs::read_to_string(path).map_err(io(path))?;
        let problem = |problem: String| AuthorError::Manifest { path: path.to_owned(), problem };
        let manifest: toml::Table =
            toml::from_str(&text).map_err(|error| problem(format!("not valid TOML: {error}")))?;
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
