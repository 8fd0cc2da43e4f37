//! One toolchain discovery for guests, used by `cargo xtask guests` and `cordon build`: for
//! Rust, which compiler can build a `wasm32-wasip2` component on this machine, and the
//! `cargo` command that uses it; for Python, componentize-py in a virtualenv
//! ([`python`]); for JavaScript, a Node new enough for componentize-js and npm ([`js`]).
//!
//! Rust has two routes, tried in order:
//! 1. rustup's `wasm32-wasip2` target, when installed: a plain `cargo build`.
//! 2. Debian's `rustc-web` (1.96, with `rust-web-src`), `lld-22` and `wasi-libc`: std is
//!    rebuilt with `-Zbuild-std`, and rustup's bundled `wasm-component-ld` links the
//!    component through `wasm-ld-22`. When these packages are missing, [`Install::AptAsRoot`]
//!    installs them (as root on Debian); otherwise the error says what to install.
//!
//! This crate runs commands and reads paths only: no heavy dependencies, so that `xtask`
//! builds in seconds.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

pub mod js;
pub mod python;

/// The target every guest builds for: cargo emits a component directly.
pub const TARGET: &str = "wasm32-wasip2";

/// Debian bookworm's packages for the second route.
pub const DEBIAN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "lld-22", "wasi-libc"];

/// Paths the Debian route needs; all exist once [`DEBIAN_PACKAGES`] are installed.
const DEBIAN_PATHS: &[&str] = &[
    "/usr/bin/cargo",
    "/usr/bin/rustc",
    "/usr/bin/wasm-ld-22",
    "/usr/lib/rustlib/src/rust/library",
    "/usr/lib/wasm32-wasi",
];

/// Why no route can build a component here.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// Neither route is available, and nothing was installed.
    #[error(
        "no toolchain here builds {TARGET} components. Either install rustup's target \
         (`rustup target add {TARGET}`), or on Debian bookworm install Debian's route \
         (as root: `apt-get install -y {packages}`; it also needs rustup's stable toolchain \
         for its wasm-component-ld){detail}",
        packages = DEBIAN_PACKAGES.join(" ")
    )]
    Missing {
        /// What was found missing, starting with "; ", or empty.
        detail: String,
    },
    /// Installing Debian packages failed.
    #[error("installing Debian packages failed: {0}")]
    Install(String),
    /// Programs a step needs are missing, and this process may not install them.
    #[error("{0}")]
    Lacks(String),
    /// No Python that can make the virtualenv componentize-py is installed into.
    #[error(
        "no python3 here that can make a virtualenv, which Python tools are built in \
         (componentize-py from PyPI): install Python 3.10 or later with its venv module \
         (on Debian: `apt-get install -y python3-venv`){detail}"
    )]
    NoPython {
        /// What was found, starting with "; ", or empty.
        detail: String,
    },
    /// No npm, which brings componentize-js (and a Node new enough, when the machine's is not).
    #[error(
        "no npm here, which JavaScript tools are built with (componentize-js from the npm \
         registry): install Node.js and npm (on Debian: `apt-get install -y npm`; a Node older \
         than {major}.{minor} is then replaced by {package} from the npm registry)",
        major = js::NODE_MIN.0, minor = js::NODE_MIN.1, package = js::NODE_PACKAGE
    )]
    NoNpm,
    /// A step of a Python or JavaScript toolchain's setup failed; its own error went to stderr.
    #[error("{what} failed ({status}); its error is above")]
    Failed {
        /// The step, e.g. "installing componentize-py==0.25.1 from PyPI".
        what: String,
        /// How the command exited.
        status: ExitStatus,
    },
    /// A toolchain was installed but does not work.
    #[error("{0}")]
    Broken(String),
    /// A file of the toolchain could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// Run `command`, its output going to this process's stderr (stdout is the caller's own:
/// `cordon build` prints its result there); `what` names the step in the error. `missing`
/// is the error when the program does not run at all.
fn run_step(command: &mut Command, what: &str, missing: ToolchainError) -> Result<(), ToolchainError> {
    match command.stdout(std::io::stderr()).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(ToolchainError::Failed { what: what.to_owned(), status }),
        Err(_) => Err(missing),
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ToolchainError + '_ {
    move |source| ToolchainError::Io { path: path.to_owned(), source }
}

/// Whether [`discover`] may install Debian's packages when no route is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// With apt-get, when running as root (CI machines, containers).
    AptAsRoot,
    /// Never: say what to install.
    Never,
}

/// A way to build `wasm32-wasip2` components, found by [`discover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// rustup's toolchain with its `wasm32-wasip2` target.
    Rustup,
    /// Debian's `rustc-web` with std rebuilt, linked by rustup's `wasm-component-ld`.
    Debian {
        /// rustup stable's bundled linker for components.
        wasm_component_ld: PathBuf,
    },
}

impl Route {
    /// A short description for people: which compiler builds.
    pub fn describe(&self) -> &'static str {
        match self {
            Route::Rustup => "rustup's wasm32-wasip2 target",
            Route::Debian { .. } => "Debian's rustc-web with -Zbuild-std",
        }
    }

    /// A `cargo` command for this route, with an outer cargo's environment removed so that
    /// a cargo running under rustup (`cargo xtask`, `cargo run`) does not leak its
    /// toolchain or flags into the guest build. Add `build --release --target` yourself
    /// ([`Route::build_command`] does).
    pub fn cargo(&self) -> Command {
        let mut cargo = match self {
            Route::Rustup => Command::new("cargo"),
            Route::Debian { .. } => Command::new("/usr/bin/cargo"),
        };
        for (key, _) in env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO")
                || key.starts_with("RUSTUP_TOOLCHAIN")
                || key == "RUSTC"
                || key == "RUSTFLAGS"
            {
                cargo.env_remove(key.as_ref());
            }
        }
        if let Route::Debian { wasm_component_ld } = self {
            cargo
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTC", "/usr/bin/rustc")
                .env("CARGO_UNSTABLE_BUILD_STD", "std,panic_abort")
                .env("CARGO_TARGET_WASM32_WASIP2_LINKER", wasm_component_ld)
                .env(
                    "CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS",
                    "-C link-self-contained=no -L native=/usr/lib/wasm32-wasi \
                     -C link-arg=--wasm-ld-path=/usr/bin/wasm-ld-22",
                );
        }
        cargo
    }

    /// `cargo build --release --target wasm32-wasip2 --target-dir TARGET_DIR` in `dir`:
    /// the components land in `<target_dir>/wasm32-wasip2/release/*.wasm`.
    pub fn build_command(&self, dir: &Path, target_dir: &Path) -> Command {
        let mut cargo = self.cargo();
        cargo
            .current_dir(dir)
            .args(["build", "--release", "--target", TARGET, "--target-dir"])
            .arg(target_dir);
        cargo
    }
}

/// The first route that works here; with [`Install::AptAsRoot`], Debian's packages are
/// installed when rustup has no target and they are missing.
pub fn discover(install: Install) -> Result<Route, ToolchainError> {
    if rustup_has_target() {
        return Ok(Route::Rustup);
    }
    let wasm_component_ld = rustup_wasm_component_ld().ok_or_else(|| ToolchainError::Missing {
        detail: "; no rustup stable toolchain with wasm-component-ld was found either".into(),
    })?;
    let missing: Vec<&str> = DEBIAN_PATHS.iter().copied().filter(|path| !Path::new(path).exists()).collect();
    if !missing.is_empty() {
        if install == Install::Never || !can_apt() {
            return Err(ToolchainError::Missing { detail: format!("; missing: {}", missing.join(", ")) });
        }
        install_debian_packages()?;
    }
    Ok(Route::Debian { wasm_component_ld })
}

/// rustc's answer to `args` (the rustup toolchain's, not an outer cargo's override).
pub fn rustc_output(args: &[&str]) -> Option<String> {
    let output = Command::new("rustc").env_remove("RUSTUP_TOOLCHAIN").args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn rustup_has_target() -> bool {
    rustc_output(&["--print", "sysroot"])
        .is_some_and(|sysroot| Path::new(&sysroot).join("lib/rustlib").join(TARGET).join("lib").is_dir())
}

/// rustup's stable toolchain ships `wasm-component-ld`; Debian's rustc-web does not.
fn rustup_wasm_component_ld() -> Option<PathBuf> {
    let sysroot = rustc_output(&["--print", "sysroot"])?;
    let host = rustc_output(&["--print", "host-tuple"]).unwrap_or_else(|| "x86_64-unknown-linux-gnu".into());
    let path = Path::new(&sysroot).join("lib/rustlib").join(host).join("bin/wasm-component-ld");
    path.is_file().then_some(path)
}

fn can_apt() -> bool {
    let is_root = Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    is_root && Path::new("/usr/bin/apt-get").exists()
}

fn install_debian_packages() -> Result<(), ToolchainError> {
    eprintln!("installing the Debian guest toolchain: {}", DEBIAN_PACKAGES.join(" "));
    apt_install(DEBIAN_PACKAGES)
}

/// `apt-get update`, then `apt-get install` of `packages` (as root).
fn apt_install(packages: &[&str]) -> Result<(), ToolchainError> {
    let status =
        |command: &mut Command| command.status().map_err(|error| ToolchainError::Install(error.to_string()));
    let update = status(Command::new("apt-get").args(["update", "-qq"]))?;
    if !update.success() {
        return Err(ToolchainError::Install(format!("apt-get update ({update})")));
    }
    let install = status(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    if !install.success() {
        return Err(ToolchainError::Install(format!("apt-get install {} ({install})", packages.join(" "))));
    }
    Ok(())
}

/// A program a build or test step runs from the system, and the Debian package that has it.
#[derive(Debug, Clone, Copy)]
pub struct SystemTool {
    /// What it is for, in the error when it is missing.
    pub purpose: &'static str,
    /// The Debian bookworm package that brings it.
    pub package: &'static str,
    /// Whether this machine has it.
    pub present: fn() -> bool,
}

/// python3 with its `venv` and `ensurepip` modules (Debian splits them into python3-venv).
pub const PYTHON_VENV: SystemTool = SystemTool {
    purpose: "Python guests' and the end-to-end suite's virtualenvs",
    package: "python3-venv",
    present: || {
        Command::new("python3")
            .args(["-c", "import ensurepip, venv"])
            .output()
            .is_ok_and(|out| out.status.success())
    },
};

/// npm, which brings componentize-js and the conformance suite.
pub const NPM: SystemTool = SystemTool {
    purpose: "JavaScript guests and the conformance suite",
    package: "npm",
    present: || on_path("npm"),
};

/// Whether `program` is an executable in `PATH`, or in the system directories root's
/// `PATH` has and a user's may not (`/usr/sbin`, `/sbin`).
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path).chain(["/usr/sbin", "/sbin"].map(PathBuf::from)).map(|dir| dir.join(program)).any(
        |file| {
            file.metadata()
                .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
        },
    )
}

/// Make sure this machine has every one of `tools`: the missing ones are installed with
/// apt-get when running as root on Debian (one update, one install); otherwise the error
/// names each with its package.
pub fn ensure_system_tools(tools: &[SystemTool]) -> Result<(), ToolchainError> {
    let missing: Vec<&SystemTool> = tools.iter().filter(|tool| !(tool.present)()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|tool| tool.package).collect();
    if !can_apt() {
        let each: Vec<String> =
            missing.iter().map(|tool| format!("{} ({})", tool.package, tool.purpose)).collect();
        return Err(ToolchainError::Lacks(format!(
            "this machine lacks {}: install them (on Debian, as root: `apt-get install -y {}`)",
            each.join(", "),
            packages.join(" ")
        )));
    }
    eprintln!("installing what this machine lacks: {}", packages.join(" "));
    apt_install(&packages)?;
    match missing.iter().find(|tool| !(tool.present)()) {
        Some(tool) => Err(ToolchainError::Install(format!(
            "{} was installed but {} is still missing",
            tool.package, tool.purpose
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_path_or_in_the_system_directories() {
        assert!(on_path("sh"));
        // Not in a user's PATH on Debian, but always in /sbin or /usr/sbin.
        assert!(on_path("ldconfig"));
        assert!(!on_path("no-such-program-cordon"));
        assert!(!on_path("sh/"));
    }

    #[test]
    fn present_tools_need_nothing_installed() {
        let here = SystemTool { purpose: "a shell", package: "dash", present: || on_path("sh") };
        ensure_system_tools(&[here]).unwrap();
    }
}
