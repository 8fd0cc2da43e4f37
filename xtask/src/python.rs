//! The Python guests: each is built with componentize-py from its folder and the Python
//! SDK (`guest-sdk/python`) into `target/guests/`.
//!
//! componentize-py comes from PyPI into a virtualenv of its own, `target/python-guest-venv`
//! (made on first use; `python3 -m venv` needs Debian's `python3-venv`). A build takes
//! 15-20 s, so a guest is built again only when one of its inputs (its folder's and the
//! SDK's files, and the componentize-py version) changed; their hash is kept in
//! `target/guest-build/python/`.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use cordon_toolchain::python::COMPONENTIZE_PY;

/// A Python guest: its folder (relative to the repository), the module that defines its
/// tools, and the component it becomes in `target/guests/`.
struct PythonGuest {
    folder: &'static str,
    module: &'static str,
    output: &'static str,
}

const PYTHON_GUESTS: &[PythonGuest] = &[
    PythonGuest { folder: "examples/python", module: "app", output: "example-python.wasm" },
    PythonGuest { folder: "examples/hostile-python", module: "app", output: "hostile-python.wasm" },
];

/// The folder that holds the `cordon_guest` package: on componentize-py's Python path.
const SDK: &str = "guest-sdk/python/src";

/// Build every Python guest that is out of date into `out_dir`; returns their paths.
pub fn build_guests(root: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let stamps = root.join("target/guest-build/python");
    fs::create_dir_all(&stamps)?;
    let mut built = Vec::new();
    let mut componentize = None;
    for guest in PYTHON_GUESTS {
        let dest = out_dir.join(guest.output);
        let stamp = stamps.join(format!("{}.inputs", guest.output));
        let digest = inputs_digest(root, guest)?;
        if dest.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(digest.as_str()) {
            built.push(dest);
            continue;
        }
        let componentize = match &componentize {
            Some(path) => path,
            None => componentize
                .insert(cordon_toolchain::python::componentize_py(&root.join("target/python-guest-venv"))?),
        };
        let partial = stamps.join(format!("{}.partial", guest.output));
        let started = std::time::Instant::now();
        let status = cordon_toolchain::python::componentize_command(
            componentize,
            guest.module,
            &[Path::new(guest.folder), Path::new(SDK)],
            &partial,
        )
        .current_dir(root)
        .status()
        .with_context(|| format!("running {}", componentize.display()))?;
        if !status.success() {
            bail!("componentize-py failed to build {}/ ({status}); its error is above", guest.folder);
        }
        fs::rename(&partial, &dest)?;
        fs::write(&stamp, digest)?;
        eprintln!("built {} with componentize-py in {:.0?}", dest.display(), started.elapsed());
        built.push(dest);
    }
    Ok(built)
}

/// The Python SDK's own tests (schema generation, the native test host), then the
/// scaffold template's and the example's tests against the SDK, with `python` (which has
/// pytest). A run each: the template's and the example's tools are defined at import, the
/// SDK's tests define and clear their own.
pub fn run_sdk_tests(root: &Path, python: &Path) -> Result<()> {
    // Each run's temporary folders under target/, not the system's (pytest keeps three).
    let basetemp = |name: &str| root.join("target/pytest").join(name);
    fs::create_dir_all(root.join("target/pytest"))?;
    run(Command::new(python)
        .current_dir(root)
        .args(["-m", "pytest", "guest-sdk/python/tests", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(basetemp("python-sdk")))?;
    for app in ["guest-sdk/python/template", "examples/python"] {
        run(Command::new(python)
            .current_dir(root.join(app))
            .env("PYTHONPATH", root.join(SDK))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
            .arg(basetemp(app.rsplit('/').next().unwrap_or(app))))?;
    }
    Ok(())
}

/// A hash of the componentize-py pin and every file of the guest's folder and of the SDK
/// (names and contents, in a stable order), leaving out Python's caches. Not
/// cryptographic: it only tells whether to build again (a changed hasher in a new Rust
/// release merely rebuilds once).
fn inputs_digest(root: &Path, guest: &PythonGuest) -> Result<String> {
    let mut files = Vec::new();
    for folder in [guest.folder, SDK] {
        collect_files(&root.join(folder), &mut files)?;
    }
    files.sort();
    let mut hasher = DefaultHasher::new();
    (COMPONENTIZE_PY, guest.module).hash(&mut hasher);
    for file in files {
        file.strip_prefix(root).unwrap_or(&file).hash(&mut hasher);
        fs::read(&file).with_context(|| format!("reading {}", file.display()))?.hash(&mut hasher);
    }
    Ok(format!("{:016x}", hasher.finish()))
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name == "__pycache__" || name.starts_with('.') || name.ends_with(".pyc") {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

fn run(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
