//! Tests only: a folder of the test process's own under the system's temporary folder,
//! removed when dropped (its name starts `cordon-`, as `cargo xtask test` checks).

use std::path::{Path, PathBuf};

pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// An empty folder named for `name` and this process.
    pub(crate) fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("cordon-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
