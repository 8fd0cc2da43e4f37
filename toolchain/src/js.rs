//! What JavaScript tools are built with: a Node new enough for the SDK's build (rolldown's
//! floor, 20.19), else Node 22 from the npm registry, and npm to install componentize-js.
//! `cargo xtask guests` keeps that Node in `target/js-node`, `cordon build` in its cache
//! folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{ToolchainError, io_error, run_step};

/// The oldest Node the SDK's build runs on (rolldown's floor).
pub const NODE_MIN: (u32, u32) = (20, 19);
/// The Node installed when the machine's is older (Debian bookworm ships 18).
pub const NODE_PACKAGE: &str = "node@22";

/// A Node new enough for the build: the machine's `node`, else the one in `folder`, which is
/// installed there from the npm registry when it is missing.
pub fn node(folder: &Path) -> Result<PathBuf, ToolchainError> {
    let system = PathBuf::from("node");
    if node_version(&system).is_some_and(|version| version >= NODE_MIN) {
        return Ok(system);
    }
    let node = folder.join("node_modules/.bin/node");
    if node_version(&node).is_some_and(|version| version >= NODE_MIN) {
        return Ok(node);
    }
    std::fs::create_dir_all(folder).map_err(io_error(folder))?;
    npm(
        folder,
        None,
        &["install", "--no-audit", "--no-fund", "--loglevel=error", "--no-save", NODE_PACKAGE],
    )?;
    match node_version(&node) {
        Some(version) if version >= NODE_MIN => Ok(node),
        _ => Err(ToolchainError::Broken(format!(
            "{} (from {NODE_PACKAGE}) does not run, or is older than {}.{}",
            node.display(),
            NODE_MIN.0,
            NODE_MIN.1
        ))),
    }
}

/// `node --version` as (major, minor); `None` when it does not run.
pub fn node_version(node: &Path) -> Option<(u32, u32)> {
    let output = Command::new(node).arg("--version").output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut parts = text.trim().trim_start_matches('v').split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A command running `program` with `node`'s folder first on PATH, so that npm and the
/// scripts it starts (`#!/usr/bin/env node`) run on that Node.
pub fn on_node(program: &str, node: &Path) -> Command {
    let mut command = Command::new(program);
    if let Some(bin) = node.parent().filter(|bin| !bin.as_os_str().is_empty()) {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let joined =
            std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)));
        if let Ok(joined) = joined {
            command.env("PATH", joined);
        }
    }
    command
}

/// Run npm in `folder` with `args`; with `node`, on that Node: npm leaves out optional
/// packages whose `engines` the running Node does not meet, and rolldown's native binding
/// is one.
pub fn npm(folder: &Path, node: Option<&Path>, args: &[&str]) -> Result<(), ToolchainError> {
    let mut npm = match node {
        Some(node) => on_node("npm", node),
        None => Command::new("npm"),
    };
    run_step(
        npm.current_dir(folder).args(args),
        &format!("npm {} in {}", args.join(" "), folder.display()),
        ToolchainError::NoNpm,
    )
}
