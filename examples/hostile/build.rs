//! 2 MiB of initial memory (the 1 MiB stack, 1 MiB of heap), so that a typical call never
//! grows its memory: see "Memory" in cordon-guest's docs.
fn main() {
    println!("cargo:rustc-link-arg-cdylib=--initial-memory=2097152");
}
