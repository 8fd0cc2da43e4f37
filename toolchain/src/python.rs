//! componentize-py, which builds Python tools, in a virtualenv of its own: `cargo xtask
//! guests` keeps it in `target/python-guest-venv`, `cordon build` in its cache folder.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{ToolchainError, io_error, run_step};

/// The componentize-py release every Python tool is built with (guest-sdk/python/README.md
/// gives authors the same pin).
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The world a Python tool targets, named by the SDK's `componentize-py.toml`.
pub const WORLD: &str = "plugin";

/// `componentize-py` in the virtualenv `venv`, which is made (with `python3 -m venv`) and
/// given the pinned release from PyPI when it lacks it.
pub fn componentize_py(venv: &Path) -> Result<PathBuf, ToolchainError> {
    let stamp = venv.join("componentize-py.installed");
    let program = venv.join("bin/componentize-py");
    if program.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(COMPONENTIZE_PY) {
        return Ok(program);
    }
    // Without pip the virtualenv is half made (e.g. `python3-venv` was missing): make it anew.
    if !venv.join("bin/pip").exists() {
        let has_venv = Command::new("python3")
            .args(["-c", "import ensurepip, venv"])
            .output()
            .map_err(|_| ToolchainError::NoPython { detail: "; no python3 on PATH".into() })?;
        if !has_venv.status.success() {
            return Err(ToolchainError::NoPython {
                detail: "; python3 lacks its venv or ensurepip module".into(),
            });
        }
        run_step(
            Command::new("python3").args(["-m", "venv", "--clear"]).arg(venv),
            &format!("making a virtualenv in {}", venv.display()),
            ToolchainError::NoPython { detail: String::new() },
        )?;
    }
    run_step(
        Command::new(venv.join("bin/python"))
            .env_remove("VIRTUAL_ENV")
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .arg(COMPONENTIZE_PY),
        &format!("installing {COMPONENTIZE_PY} from PyPI"),
        ToolchainError::NoPython { detail: format!("; {} does not run", venv.join("bin/python").display()) },
    )?;
    fs::write(&stamp, COMPONENTIZE_PY).map_err(io_error(&stamp))?;
    Ok(program)
}

/// `componentize-py` building `module`, found on `paths` (folders searched in order; the
/// SDK's `cordon_guest` must be in one of them), into the component `out`. Run it in the
/// project's folder.
pub fn componentize_command(program: &Path, module: &str, paths: &[&Path], out: &Path) -> Command {
    let mut command = Command::new(program);
    // An activated virtualenv would put its site-packages on componentize-py's path.
    command.env_remove("VIRTUAL_ENV").args(["-q", "-w", WORLD, "componentize", module]);
    for path in paths {
        command.arg("-p").arg(path);
    }
    command.arg("-o").arg(out);
    command
}
