//! Where Cordon keeps state on disk and finds the example tools.

use std::path::PathBuf;

/// The folder `cargo xtask guests` builds the example components into.
pub fn default_tools_dir() -> PathBuf {
    let host = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    host.parent().unwrap_or(host).join("target/guests")
}

/// Where `cargo xtask guests` puts the example tools, in the repository this binary was
/// built from.
pub fn example_tools() -> PathBuf {
    default_tools_dir().join("example-tools.wasm")
}

/// The example tools as they were when this binary was built (host/build.rs), if they
/// had been built by then.
#[cfg(cordon_embedded_tools)]
pub const EMBEDDED_EXAMPLE_TOOLS: Option<&[u8]> = Some(include_bytes!(env!("CORDON_EMBEDDED_TOOLS")));
/// The example tools as they were when this binary was built (host/build.rs), if they
/// had been built by then.
#[cfg(not(cordon_embedded_tools))]
pub const EMBEDDED_EXAMPLE_TOOLS: Option<&[u8]> = None;

/// The example tools `cordon serve` runs without a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExampleTools {
    /// Built into this binary.
    Embedded(&'static [u8]),
    /// In the repository this binary was built from.
    File(PathBuf),
}

/// Without a config there is nothing to serve: what to pass instead.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no --config given, and no example tools built into this binary nor at {}: pass \
     `--config FILE`, a cordon.toml whose [[components]] name your .wasm files, or run \
     `cargo xtask guests` in the repository before building cordon",
    .repository_copy.display()
)]
pub struct NoExampleTools {
    pub repository_copy: PathBuf,
}

/// The example tools: those built into this binary, else the repository's.
pub fn example_tools_source() -> Result<ExampleTools, NoExampleTools> {
    pick_example_tools(EMBEDDED_EXAMPLE_TOOLS, example_tools())
}

/// Embedded bytes win over the repository's file: the binary serves the tools it was
/// built with wherever it runs, and a build after `cargo xtask guests` embeds new ones.
fn pick_example_tools(
    embedded: Option<&'static [u8]>,
    repository_copy: PathBuf,
) -> Result<ExampleTools, NoExampleTools> {
    match embedded {
        Some(bytes) => Ok(ExampleTools::Embedded(bytes)),
        None if repository_copy.is_file() => Ok(ExampleTools::File(repository_copy)),
        None => Err(NoExampleTools { repository_copy }),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: &[u8] = b"(component)";

    #[test]
    fn embedded_tools_win_over_the_repository_copy() {
        let existing = std::env::current_exe().unwrap();
        assert_eq!(pick_example_tools(Some(BYTES), existing), Ok(ExampleTools::Embedded(BYTES)));
    }

    #[test]
    fn without_embedded_tools_the_repository_copy_is_served() {
        let existing = std::env::current_exe().unwrap();
        assert_eq!(pick_example_tools(None, existing.clone()), Ok(ExampleTools::File(existing)));
    }

    #[test]
    fn without_either_the_error_says_what_to_pass() {
        let missing = PathBuf::from("/nonexistent/target/guests/example-tools.wasm");
        let error = pick_example_tools(None, missing.clone()).unwrap_err();
        assert_eq!(error, NoExampleTools { repository_copy: missing });
        assert_eq!(
            error.to_string(),
            "no --config given, and no example tools built into this binary nor at \
             /nonexistent/target/guests/example-tools.wasm: pass `--config FILE`, a cordon.toml \
             whose [[components]] name your .wasm files, or run `cargo xtask guests` in the \
             repository before building cordon"
        );
    }
}
