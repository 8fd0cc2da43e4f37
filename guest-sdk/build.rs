//! Every component built with this crate starts with 2 MiB of linear memory (the 1 MiB
//! stack and 1 MiB of heap), so that a typical call never grows its memory: see "Memory"
//! in the crate's docs. `rustc-cdylib-link-arg` from a dependency reaches the final cdylib
//! (cargo applies it to every cdylib that depends on this crate), so tools need no
//! `build.rs`. Only for Wasm: a native `cargo test` links with the system's linker.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-cdylib-link-arg=--initial-memory=2097152");
    }
}
