//! The JavaScript route of `cargo xtask guests`: the example tools in `examples/js/`, the
//! hostile tools in `examples/hostile-js/` and the `cordon new --lang js` scaffold's tool,
//! built with the JavaScript SDK (`guest-sdk/js`) into `target/guests/example-js.wasm`,
//! `hostile-js.wasm` and `template-js.wasm`.
//!
//! The SDK package is copied to `target/js-sdk/` and its pinned dependencies
//! (componentize-js, rolldown; `guest-sdk/js/package-lock.json`) are installed there with
//! `npm ci`, once per lock. The build needs Node 20.19 or newer; when the machine's is older
//! (Debian bookworm ships 18), Node 22 comes from the npm registry into `target/js-node/`,
//! as for the conformance suite. A component is rebuilt only when its sources, the SDK or
//! the lock change: componentize-js takes about ten seconds.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The JavaScript components: (entry module, component name), relative to the repository.
/// The scaffold's tool is built too, so that its code is tested as it is shipped.
const JS_GUESTS: &[(&str, &str)] = &[
    ("examples/js/tools.js", "example-js"),
    ("examples/hostile-js/tools.js", "hostile-js"),
    ("guest-sdk/js/template/src/index.js", "template-js"),
];
/// The SDK files the build uses, relative to `guest-sdk/js/`.
const SDK_FILES: &[&str] = &["package.json", "package-lock.json", "index.js", "build.js", "wit/cordon.wit"];

/// Build every JavaScript component into `out_dir`; returns their paths.
pub fn build_guests(root: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let node = cordon_toolchain::js::node(&root.join("target/js-node"))?;
    let sdk = install_sdk(root, &node)?;
    let mut built = Vec::new();
    for (entry, name) in JS_GUESTS {
        let entry = root.join(entry);
        let out = sdk.join(format!("{name}.wasm"));
        let stamp = sdk.join(format!("{name}.stamp"));
        let inputs = inputs_digest(&sdk, entry.parent().context("an entry has a folder")?)?;
        if !(out.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(inputs.as_str())) {
            let status = Command::new(&node)
                .arg(sdk.join("build.js"))
                .arg(&entry)
                .arg(&out)
                .status()
                .with_context(|| format!("running {}", node.display()))?;
            if !status.success() {
                bail!(
                    "building {} with componentize-js failed ({status}); its error is above",
                    entry.display()
                );
            }
            fs::write(&stamp, &inputs)?;
        }
        let dest = out_dir.join(format!("{name}.wasm"));
        // Unchanged bytes keep their mtime, as for the Rust guests.
        if fs::read(&dest).ok() != Some(fs::read(&out)?) {
            fs::copy(&out, &dest)?;
        }
        built.push(dest);
    }
    Ok(built)
}

/// The SDK's native tests and those of the example tools and the scaffold's tool: each
/// runs under Node with the SDK's test host (`guest-sdk/js/testing/`), from its folder.
/// The test host needs no npm package, so these run on the SDK's own files.
const NATIVE_TESTS: &[(&str, &str)] = &[
    ("guest-sdk/js", "tests/sdk.test.js"),
    ("examples/js", "tools.test.js"),
    ("guest-sdk/js/template", "test/index.test.js"),
];

/// Run the JavaScript native tests ([`NATIVE_TESTS`]) on the Node `cargo xtask guests` uses.
pub fn run_sdk_tests(root: &Path) -> Result<()> {
    let node = cordon_toolchain::js::node(&root.join("target/js-node"))?;
    let register = root.join("guest-sdk/js/testing/register.js");
    for (folder, file) in NATIVE_TESTS {
        let status = Command::new(&node)
            .current_dir(root.join(folder))
            .arg("--import")
            .arg(&register)
            .args(["--test", "--test-reporter=dot", file])
            .status()
            .with_context(|| format!("running {}", node.display()))?;
        if !status.success() {
            bail!("the JavaScript tests in {folder}/{file} failed ({status}); their report is above");
        }
    }
    Ok(())
}

/// Copy the SDK to `target/js-sdk/` and install its locked dependencies there, with npm
/// running on `node`: npm leaves out optional packages whose `engines` the running Node
/// does not meet, and rolldown's native binding is one (it needs Node 20.19).
fn install_sdk(root: &Path, node: &Path) -> Result<PathBuf> {
    let source = root.join("guest-sdk/js");
    let sdk = root.join("target/js-sdk");
    fs::create_dir_all(sdk.join("wit"))?;
    for file in SDK_FILES {
        let bytes = fs::read(source.join(file)).with_context(|| format!("reading guest-sdk/js/{file}"))?;
        if fs::read(sdk.join(file)).ok().as_deref() != Some(bytes.as_slice()) {
            fs::write(sdk.join(file), bytes)?;
        }
    }
    let installed = format!("{}\n{}", node.display(), fs::read_to_string(sdk.join("package-lock.json"))?);
    let stamp = sdk.join("node_modules/.installed-lock");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(installed.as_str()) {
        cordon_toolchain::js::npm(&sdk, Some(node), &["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .context("installing the JavaScript SDK's dependencies with npm ci")?;
        fs::write(&stamp, &installed)?;
    }
    Ok(sdk)
}

/// A digest of everything a component is built from: the installed SDK files and every file
/// in the entry's folder. A stamp, not a security check: std's hasher with fixed keys.
fn inputs_digest(sdk: &Path, sources: &Path) -> Result<String> {
    let mut hasher = DefaultHasher::new();
    for file in SDK_FILES {
        fs::read(sdk.join(file))?.hash(&mut hasher);
    }
    let mut files: Vec<PathBuf> = Vec::new();
    collect_files(sources, &mut files)?;
    files.sort();
    for file in files {
        file.hash(&mut hasher);
        fs::read(&file)?.hash(&mut hasher);
    }
    Ok(format!("{:016x}\n", hasher.finish()))
}

fn collect_files(folder: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "node_modules" {
                collect_files(&path, files)?;
            }
        } else {
            files.push(path);
        }
    }
    Ok(())
}
