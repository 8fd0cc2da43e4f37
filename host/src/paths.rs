//! Where Cordon keeps state on disk and finds the example tools.

use std::path::PathBuf;

/// The folder `cargo xtask guests` builds the example components into.
pub fn default_tools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/guests")
}

/// The component `cordon serve` runs without a config: the example tools.
pub fn example_tools() -> PathBuf {
    default_tools_dir().join("example-tools.wasm")
}

/// Where a component's data directory lives unless configured: under
/// `$XDG_DATA_HOME/cordon` (else `~/.local/share/cordon`, else the temp dir).
pub fn default_data_dir(component: &str) -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cordon").join(component)
}

/// Whether `name` may name a directory of ours (a component's, a tenant's): 1 to 64
/// letters, digits, `_`, `-` and `.`, not first, so that it can never climb (`..`), hide
/// (`.x`) or reach elsewhere (`a/b`).
pub fn is_safe_name(name: &str) -> bool {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    !name.is_empty() && name.len() <= 64 && name.chars().all(plain) && !name.starts_with('.')
}
