//! Project tasks:
//! - `cargo xtask guests`: build every guest component for `wasm32-wasip2` into
//!   `target/guests/`, with whichever toolchain this machine has.
//! - `cargo xtask test`: build the guests, then run every test, the official MCP
//!   conformance suite included, then the soak (180 s of load, about 5 minutes in all),
//!   then the fuzz targets (60 s each). The fuzz build runs beside the Rust tests (paused for the
//!   end-to-end suites), at idle priority (fuzz.rs, `BuildBeside`). Each stage's time is printed.
//! - `cargo xtask conformance`: run the conformance suite against `cordon serve --http`
//!   on the conformance fixture (`examples/conformance`).
//! - `cargo xtask soak [SECONDS]`: the soak (`host/benches/soak`), 300 s by default:
//!   mixed load with cancels, timeouts, hostile guests and garbage over stdio and HTTP,
//!   then every answer, cleanup, slot, descriptor and byte accounted for (BENCHMARKS.md,
//!   "Soak").
//! - `cargo xtask fuzz [SECONDS]`: build the fuzz targets in `fuzz/` once, then run each
//!   for SECONDS (60 by default) from its seed corpus; fails on any crash.
//!
//! JavaScript guests (`examples/js/`) build with componentize-js through npm: see `js.rs`.
//!
//! The Rust guests build with whichever toolchain `cordon-toolchain` finds (rustup's
//! `wasm32-wasip2` target, else Debian's `rustc-web` route, installed with apt when we are
//! root on Debian): the same discovery `cordon build` uses for authors' projects.
//!
//! Guests build in `target/guest-build/`, apart from the host, so an incremental guest
//! build takes about a second and never invalidates the host's build.
//!
//! Python guests (`examples/python`) are built with componentize-py from PyPI, in a
//! virtualenv under `target/` (python.rs).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use cordon_toolchain::{SystemTool, on_path};

mod fuzz;
mod js;
mod python;

/// Guest workspaces, relative to the repository root.
const GUEST_WORKSPACES: &[&str] = &["examples"];

/// The error is said in one line with its causes, never with a backtrace (which `anyhow`
/// captures under `RUST_BACKTRACE`): CI's log keeps only the start and end of the output,
/// and 60 lines of xtask's own frames pushed the failing tests' messages out of its end.
fn main() -> ExitCode {
    match run_task() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_task() -> Result<()> {
    fuzz::run_as_rustc_wrapper_if_asked();
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("guests") => build_guests(),
        Some("test") => {
            cordon_toolchain::ensure_system_tools(TEST_TOOLS)?;
            stage("guests", build_guests)?;
            // The test build first, alone: it keeps both cores busy, and the fuzz build
            // beside it slowed it more than it gained (fuzz.rs, `BuildBeside`).
            stage("test build", build_server)?;
            let mut fuzz_build = fuzz::BuildBeside::start(&repo_root())?;
            stage("tests", run_rust_tests)?;
            // The end-to-end and SDK suites (servers, HAProxy, timing) on a quiet machine.
            if let Some(build) = &mut fuzz_build {
                build.pause();
            }
            let suites = stage("end-to-end and SDK tests", run_peer_tests);
            if let Some(build) = &mut fuzz_build {
                build.resume();
            }
            suites?;
            stage("conformance", conformance)?;
            match fuzz_build {
                Some(build) => {
                    // The soak needs the machine to itself.
                    stage("fuzz build (what was left of it)", || build.finish())?;
                    stage("soak", || soak(TEST_SOAK_SECS))?;
                    stage("fuzz", || fuzz::run_built(fuzz::SECONDS))
                }
                None => {
                    // Before the fuzz build, which may remove the test executables (the
                    // soak's servers are the test build's binary).
                    stage("soak", || soak(TEST_SOAK_SECS))?;
                    reclaim_test_binaries_if_short_of_disk(&repo_root())?;
                    stage("fuzz", || fuzz::run_targets(fuzz::SECONDS))
                }
            }
        }
        Some("soak") => {
            let secs = match args.get(1) {
                Some(secs) => secs.parse().with_context(|| format!("{secs} is not a number of seconds"))?,
                None => DEFAULT_SOAK_SECS,
            };
            build_guests()?;
            build_server()?;
            soak(secs)
        }
        Some("conformance") => {
            // Alone, it must not test a stale server or fixture: build both first (the
            // test build, which `cargo xtask test` has just made; nothing to do when fresh).
            build_guests()?;
            build_server()?;
            conformance()
        }
        Some("fuzz") => {
            let seconds = match args.get(1) {
                Some(seconds) => seconds.parse().context("SECONDS must be a whole number")?,
                None => fuzz::SECONDS,
            };
            fuzz::run_targets(seconds)
        }
        _ => {
            eprintln!("usage: cargo xtask guests   build every guest component into target/guests/");
            eprintln!("       cargo xtask test     build the guests, then run every test");
            eprintln!("       cargo xtask conformance   run the MCP conformance suite over HTTP");
            eprintln!(
                "       cargo xtask soak [SECONDS]   mixed load on both transports, then the accounts (300 s)"
            );
            eprintln!(
                "       cargo xtask fuzz [SECONDS]   run each fuzz target for SECONDS (default {})",
                fuzz::SECONDS
            );
            std::process::exit(2);
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the repository").to_path_buf()
}

/// What the Python and JavaScript guests need from the system (installed as root on Debian).
const GUEST_TOOLS: &[SystemTool] = &[cordon_toolchain::PYTHON_VENV, cordon_toolchain::NPM];

/// What the tests need from the system beyond the guests' tools: so that README's test
/// command works on a fresh Debian machine (as root it installs them; otherwise it names them).
const TEST_TOOLS: &[SystemTool] = &[
    cordon_toolchain::PYTHON_VENV,
    cordon_toolchain::NPM,
    SystemTool {
        purpose: "the replicas test's load balancer",
        package: "haproxy",
        present: || on_path("haproxy"),
    },
    // `cordon call`'s progress bar is tested on a pseudo-terminal through util-linux's `script`.
    SystemTool { purpose: "the pseudo-terminal tests", package: "bsdutils", present: || on_path("script") },
    // The egress own-address test gives a namespace's loopback an address with `ip`.
    SystemTool { purpose: "the egress namespace test", package: "iproute2", present: || on_path("ip") },
    // The fuzz targets' libFuzzer is C++.
    SystemTool { purpose: "the fuzz targets' libFuzzer", package: "g++", present: || on_path("c++") },
];

fn build_guests() -> Result<()> {
    let root = repo_root();
    let route = cordon_toolchain::discover(cordon_toolchain::Install::AptAsRoot)?;
    cordon_toolchain::ensure_system_tools(GUEST_TOOLS)?;
    let build_dir = root.join("target/guest-build");
    let out_dir = root.join("target/guests");
    fs::create_dir_all(&out_dir)?;
    for workspace in GUEST_WORKSPACES {
        let status = route
            .build_command(&root.join(workspace), &build_dir)
            .status()
            .with_context(|| format!("running cargo for {workspace}"))?;
        if !status.success() {
            bail!("building the guests in {workspace}/ failed ({status})");
        }
    }
    let release = build_dir.join(cordon_toolchain::TARGET).join("release");
    let mut built = Vec::new();
    // Only the guest workspaces' own packages: other projects build in this folder too
    // (tests/author.rs shares its compiled dependencies).
    for workspace in GUEST_WORKSPACES {
        for package in workspace_packages(&root.join(workspace))? {
            let path = release.join(format!("{}.wasm", package.replace('-', "_")));
            let dest = out_dir.join(format!("{package}.wasm"));
            // Unchanged bytes keep their mtime: the host embeds example-tools.wasm
            // (host/build.rs), and a new mtime would rebuild it for nothing.
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            if fs::read(&dest).ok() != Some(bytes) {
                fs::copy(&path, &dest)?;
            }
            built.push(dest);
        }
    }
    built.extend(python::build_guests(&root, &out_dir)?);
    built.extend(js::build_guests(&root, &out_dir)?);
    for path in &built {
        println!("{}", path.display());
    }
    Ok(())
}

/// The package names of a guest workspace's members: the `name` under `[package]` in each
/// `<member>/Cargo.toml`, the members being the folders beside the workspace's manifest
/// that hold one.
fn workspace_packages(workspace: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(workspace)? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = fs::read_to_string(&manifest) else { continue };
        let name = text
            .lines()
            .skip_while(|line| line.trim() != "[package]")
            .find_map(|line| {
                line.trim().strip_prefix("name = ").map(|name| name.trim_matches('"').to_owned())
            })
            .with_context(|| format!("{} names no package", manifest.display()))?;
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Every Rust test, then the end-to-end suite that drives the server with the official
/// Python SDK client (in a virtualenv under `target/`, made on first use), then the Python
/// and JavaScript SDKs' native tests.
/// The workspace's tests, the example tools' and the guest SDK's doc examples.
fn run_rust_tests() -> Result<()> {
    let root = repo_root();
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // `cargo test` also builds the `cordon` binary the next suites run; a separate
    // `cargo build` would unify features differently and compile wasmtime a second time.
    // Panics without backtraces, for the same reason as `main`'s errors: a failing test's
    // message and location is what CI's log must keep.
    let scratch_before = scratch_left_behind();
    run(Command::new(&cargo).current_dir(&root).args(["test", "--workspace"]).env("RUST_BACKTRACE", "0"))?;
    let left: Vec<String> = scratch_left_behind().difference(&scratch_before).cloned().collect();
    if !left.is_empty() {
        bail!(
            "the Rust tests left {} entries in {} (each test process keeps its files under \
             one folder that it removes when it exits: host/tests/common/mod.rs, `scratch`): {left:?}",
            left.len(),
            env::temp_dir().display()
        );
    }
    // The example tools' own tests, natively with cordon-guest's test host (the folder
    // tests/author.rs builds a new project's tests in).
    run(Command::new(&cargo)
        .current_dir(root.join("examples"))
        .args(["test", "--quiet", "-p", "example-tools", "--target-dir"])
        .arg(root.join("target/guest-native")))?;
    // The guest SDK's rustdoc examples, which plugin authors copy from (with the example
    // tools' lock file: the SDK has none of its own).
    run(Command::new(&cargo)
        .current_dir(root.join("examples"))
        .args(["test", "--quiet", "--doc", "-p", "cordon-guest", "--target-dir"])
        .arg(root.join("target/guest-native")))
}

/// The end-to-end suite (real clients, HAProxy) and the Python and JS SDKs' tests.
fn run_peer_tests() -> Result<()> {
    let root = repo_root();
    let python = python_env(&root)?;
    // pytest makes `--basetemp` itself, not its parents.
    fs::create_dir_all(root.join("target/pytest"))?;
    run(Command::new(&python)
        .current_dir(&root)
        .args(["-m", "pytest", "host/tests/e2e", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(root.join("target/pytest/e2e"))
        .env("CORDON_BIN", root.join("target/debug/cordon")))?;
    python::run_sdk_tests(&root, &python)?;
    js::run_sdk_tests(&root)
}

/// The entries named `cordon-*` in the system's temporary folder, where the tests write.
fn scratch_left_behind() -> std::collections::BTreeSet<String> {
    let Ok(entries) = fs::read_dir(env::temp_dir()) else { return Default::default() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("cordon-"))
        .collect()
}

/// Build `target/debug/cordon` as `cargo test` builds it (a plain `cargo build` would unify
/// features differently and compile wasmtime a second time).
fn build_server() -> Result<()> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo).current_dir(repo_root()).args(["test", "--workspace", "--no-run"]))
}

/// What the fuzz build needs in `target/fuzz` (about 3.3 GB, instrumented and with line
/// tables), with room to spare.
const FUZZ_BUILD_BYTES: u64 = 6 << 30;

/// Remove the test executables `cargo test` left in `target/debug/deps` (about 0.4 GB)
/// when the disk has less free than the fuzz build needs: they have run, and a machine
/// short of disk (CI's once ran out in the fuzz build) needs the room more than the next
/// `cargo test` needs to skip relinking them. Libraries and build outputs stay, so the
/// servers' binaries and a rebuild are untouched.
fn reclaim_test_binaries_if_short_of_disk(root: &Path) -> Result<()> {
    let target = root.join("target");
    let Some(free) = free_bytes(&target) else { return Ok(()) };
    if free >= FUZZ_BUILD_BYTES {
        return Ok(());
    }
    let mut reclaimed = 0;
    for entry in fs::read_dir(target.join("debug/deps"))? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let metadata = entry.metadata()?;
        // A test executable is `<crate>-<hash>` with no extension (libraries are `.rlib`,
        // `.rmeta`, `.so`, `.d`); xtask's own is the binary running now.
        let is_test_executable = metadata.is_file()
            && !name.contains('.')
            && !name.starts_with("xtask-")
            && std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o111 != 0;
        if is_test_executable {
            fs::remove_file(entry.path())?;
            reclaimed += metadata.len();
        }
    }
    eprintln!(
        "{} MiB free before the fuzz build: removed {} MiB of test executables that have run",
        free >> 20,
        reclaimed >> 20
    );
    Ok(())
}

/// Free bytes on the filesystem holding `path`, as `df` reports them to an unprivileged user.
fn free_bytes(path: &Path) -> Option<u64> {
    let output = Command::new("df").args(["-Pk"]).arg(path).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let kib: u64 = text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

const DEFAULT_SOAK_SECS: u64 = 300;

/// The soak's load in `cargo xtask test`: with its warm-up, idle windows and checks the
/// stage takes 4–5 minutes (276 s on a fresh clone; 344 s with 240 s of load), what
/// CI's budget has room for.
const TEST_SOAK_SECS: u64 = 180;

/// Run one stage of `cargo xtask test` and say how long it took, so that a slow CI run
/// names its slow stage.
fn stage(name: &str, run: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = std::time::Instant::now();
    let result = run();
    let outcome = if result.is_ok() { "done" } else { "failed" };
    eprintln!("[xtask] stage {name} {outcome} in {:.0} s", started.elapsed().as_secs_f64());
    result
}

/// The soak against `target/debug/cordon` (which the test build makes). It builds as a
/// benchmark with `--profile test`, the test build's profile, so it reuses that build
/// (the host at -O1 as well as the dependencies) rather than compiling any of it again.
fn soak(secs: u64) -> Result<()> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo)
        .current_dir(repo_root())
        .args(["bench", "-p", "cordon", "--bench", "soak", "--profile", "test", "--", "--secs"])
        .arg(secs.to_string()))
    .context("the soak failed (its checks are above)")
}

/// A virtualenv with the end-to-end suite's requirements; returns its python.
fn python_env(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/e2e-venv");
    let python = venv.join("bin/python");
    let requirements = root.join("host/tests/e2e/requirements.txt");
    let stamp = venv.join("requirements.installed");
    let wanted = fs::read_to_string(&requirements)?;
    if fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    // Without pip the virtualenv is half made (e.g. `python3-venv` was missing): make it anew.
    if !venv.join("bin/pip").exists() {
        run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
            .context("creating a Python virtualenv (on Debian: apt-get install python3-venv)")?;
    }
    run(Command::new(&python).args(["-m", "pip", "install", "-q", "-r"]).arg(&requirements))?;
    fs::write(stamp, wanted)?;
    Ok(python)
}

const CONFORMANCE_PACKAGES: &[&str] = &["@modelcontextprotocol/conformance@0.2.0-alpha.12", "node@22"];

/// The official MCP conformance suite (the server scenarios of 2026-07-28, then of
/// 2025-11-25) against
/// `cordon serve --http` on the conformance fixture, with the baseline of scenarios not yet
/// supported. The suite and Node 22 come from the npm registry into `target/conformance`.
fn conformance() -> Result<()> {
    let root = repo_root();
    let tools = root.join("target/conformance");
    fs::create_dir_all(&tools)?;
    let stamp = tools.join("installed");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(&CONFORMANCE_PACKAGES.join(" ")) {
        run(Command::new("npm")
            .current_dir(&tools)
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--no-save"])
            .args(CONFORMANCE_PACKAGES))
        .context("installing the conformance suite with npm (npm's own error is above; on Debian: apt-get install npm)")?;
        fs::write(&stamp, CONFORMANCE_PACKAGES.join(" "))?;
    }
    let cordon = root.join("target/debug/cordon");
    let mut server = Command::new(&cordon)
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(root.join("examples/conformance/cordon.toml"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting cordon")?;
    let log = tools.join("cordon.log");
    let url = match listening_url(&mut server, &log) {
        Ok(url) => url,
        Err(error) => {
            let _ = server.kill();
            return Err(error);
        }
    };
    let bin = tools.join("node_modules/.bin");
    let path = env::join_paths(
        std::iter::once(bin.clone()).chain(env::split_paths(&env::var_os("PATH").unwrap_or_default())),
    )?;
    // Both revisions the server speaks, each against its own baseline.
    let result = [("2026-07-28", "baseline.yml"), ("2025-11-25", "baseline-2025-11-25.yml")]
        .into_iter()
        .try_for_each(|(revision, baseline)| {
            eprintln!("conformance: MCP {revision}");
            run(Command::new(bin.join("conformance"))
                .current_dir(&tools)
                .env("PATH", &path)
                .args(["server", "--url", &url, "--spec-version", revision, "--suite", "all", "-o"])
                .arg(format!("results/{revision}"))
                .arg("--expected-failures")
                .arg(root.join("examples/conformance").join(baseline)))
        });
    let _ = server.kill();
    let _ = server.wait();
    result.context("the conformance suite failed (results in target/conformance/results, the server's log in target/conformance/cordon.log)")
}

/// Read the server's stderr until it says where it listens; afterwards keep copying it to
/// `log`, for when a scenario fails.
fn listening_url(server: &mut std::process::Child, log: &Path) -> Result<String> {
    use std::io::{BufRead, BufReader, Write};
    let mut lines = BufReader::new(server.stderr.take().context("no stderr")?).lines();
    for line in lines.by_ref() {
        let line = line?;
        eprintln!("{line}");
        if let Some(at) = line.find("http://") {
            let url = line[at..].split_whitespace().next().unwrap_or_default().to_owned();
            let mut log = fs::File::create(log)?;
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    let _ = writeln!(log, "{line}");
                }
            });
            return Ok(url);
        }
    }
    bail!("cordon exited before it listened")
}

fn run(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
