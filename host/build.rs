//! Builds the example tools into the `cordon` binary when `cargo xtask guests` has made
//! them (`target/guests/example-tools.wasm`), so that an installed `cordon` serves them
//! without the repository (`cordon::paths::example_tools_source`).
//!
//! `CORDON_EMBED_TOOLS=0` at build time leaves them out.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(cordon_embedded_tools)");
    println!("cargo::rerun-if-env-changed=CORDON_EMBED_TOOLS");
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
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
