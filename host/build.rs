//! Builds the example tools into the `cordon` binary when `cargo xtask guests` has made
//! them (`target/guests/example-tools.wasm`), so that an installed `cordon` serves them
//! without the repository (`cordon::paths::example_tools_source`).
//!
//! `CORDON_EMBED_TOOLS=0` at build time leaves them out.
//!
//! It also embeds what `cordon new` writes (`cordon::author`): every file of the project
//! templates (`guest-sdk/template/`, and `guest-sdk/<language>/template/` for other
//! languages) and of the SDK sources a project vendors, listed in
//! `$OUT_DIR/author_files.rs`.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cordon_embedded_tools)");
    println!("cargo::rerun-if-env-changed=CORDON_EMBED_TOOLS");
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    embed_author_files(&manifest.join(".."));
    let guests = manifest.join("../target/guests");
    let tools = guests.join("example-tools.wasm");
    if env::var_os("CORDON_EMBED_TOOLS").is_some_and(|value| value == "0") {
        return;
    }
    if tools.is_file() {
        // `include_bytes!` makes rustc track the file too; this reruns the script when it
        // goes away.
        println!("cargo::rerun-if-changed={}", tools.display());
        println!("cargo::rustc-env=CORDON_EMBEDDED_TOOLS={}", tools.display());
        println!("cargo::rustc-cfg=cordon_embedded_tools");
    } else if guests.is_dir() {
        // Rerun when the tools appear in it.
        println!("cargo::rerun-if-changed={}", guests.display());
    }
    // Otherwise nothing to watch: cargo reruns a script whose watched path is missing on
    // every build, and rebuilds the crate after it. Such a binary finds the tools in the
    // repository once they are built (`cordon::paths::example_tools`); `cargo install`
    // builds afresh, so it embeds them.
}

/// Folders `cordon new` draws on, relative to the repository: the SDKs (other languages'
/// under `guest-sdk/<language>/`) with their templates, and the rules the Rust SDK shares.
const AUTHOR_ROOTS: &[&str] = &["guest-sdk", "rules"];

/// Names never embedded: build output, caches, installed packages.
const SKIPPED: &[&str] = &["target", "node_modules", "__pycache__", ".venv", "dist", "build"];

/// Write `author_files.rs`: `AUTHOR_FILES`, every file under [`AUTHOR_ROOTS`] with its path
/// relative to the repository and its bytes, plus `examples/Cargo.lock` (the versions the
/// example guests are built and tested with, which a new Rust project starts from).
fn embed_author_files(repo: &std::path::Path) {
    let mut files = Vec::new();
    for root in AUTHOR_ROOTS {
        let dir = repo.join(root);
        println!("cargo::rerun-if-changed={}", dir.display());
        collect(&dir, &mut files);
    }
    files.push(repo.join("examples/Cargo.lock"));
    println!("cargo::rerun-if-changed={}", repo.join("examples/Cargo.lock").display());
    files.sort();
    files.dedup();
    let mut out = String::from("pub(crate) static AUTHOR_FILES: &[(&str, &[u8])] = &[\n");
    for file in &files {
        let relative = file.strip_prefix(repo).expect("under the repository").to_string_lossy().into_owned();
        out.push_str(&format!("    ({relative:?}, include_bytes!({:?})),\n", file.display().to_string()));
    }
    out.push_str("];\n");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out_dir.join("author_files.rs"), out).expect("writing author_files.rs");
}

fn collect(dir: &std::path::Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if SKIPPED.iter().any(|skipped| name == *skipped) {
            continue;
        }
        // Followed through symlinks: guest-sdk/wit/cordon.wit links to wit/cordon.wit.
        match std::fs::metadata(&path) {
            Ok(kind) if kind.is_dir() => collect(&path, files),
            Ok(kind) if kind.is_file() => files.push(path),
            _ => {}
        }
    }
}
