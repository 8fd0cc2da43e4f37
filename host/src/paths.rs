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
/// `$XDG_DATA_HOME/cordon` (else `~/.local/share/cordon`); with neither variable set, in
/// a directory of the server's user alone in the temp dir ([`private_temp_dir`]).
pub fn default_data_dir(component: &str) -> std::io::Result<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")));
    let base = match base {
        Some(base) => base.join("cordon"),
        None => private_temp_dir(&std::env::temp_dir())?,
    };
    Ok(base.join(component))
}

/// `cordon-<uid>` in `temp` (made 0700 when missing), refused unless it is a directory of
/// this user's that no one else may enter, and not a symlink: in a shared temp dir, anyone
/// could have made it first, with symlinks inside that lead the data elsewhere.
fn private_temp_dir(temp: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: `geteuid` only reads the process's effective user id; it cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = temp.join(format!("cordon-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => return Err(error),
        _ => {}
    }
    let metadata = std::fs::symlink_metadata(&dir)?;
    if !metadata.is_dir() || metadata.uid() != uid || metadata.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's alone (mode 0700, not a symlink); set data_dir, \
             XDG_DATA_HOME or HOME",
            dir.display()
        )));
    }
    Ok(dir)
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

    #[test]
    fn the_temp_fallback_is_a_directory_of_this_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let temp = std::env::temp_dir().join(format!("cordon-paths-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temp);
        std::fs::create_dir_all(&temp).unwrap();
        let dir = private_temp_dir(&temp).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(private_temp_dir(&temp).unwrap(), dir, "found again");
        // Opened to others, or planted as a symlink by someone else first: refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_temp_dir(&temp).is_err());
        std::fs::remove_dir(&dir).unwrap();
        std::fs::create_dir(temp.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(temp.join("elsewhere"), &dir).unwrap();
        let error = private_temp_dir(&temp).unwrap_err().to_string();
        assert!(error.contains("not a symlink"), "{error}");
        std::fs::remove_dir_all(&temp).unwrap();
    }

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
