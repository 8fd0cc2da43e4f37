//! `cargo xtask fuzz`: build the fuzz targets in `fuzz/` once, as cargo-fuzz would, then run
//! each for a bounded time from its seed corpus.
//!
//! The build is cargo-fuzz 0.13's (`cargo fuzz build --sanitizer address
//! --debug-assertions`): the same `cargo build` of `fuzz/` with the same instrumentation
//! flags ([`INSTRUMENTATION_FLAGS`], [`ALWAYS_FLAGS`]), made here so that CI does not compile cargo-fuzz
//! itself first (`cargo install cargo-fuzz` took about 2 minutes of a CI run). It
//! instruments every crate of the build (coverage counters, AddressSanitizer)
//! and compiles each as one codegen unit. Most of the build is wasmtime and cranelift,
//! which no fuzz target runs (no guest is ever compiled): instrumenting them made the
//! build take ~16 minutes of CI on 2 cores. So xtask puts itself in as cargo's
//! `RUSTC_WRAPPER` and, for the crates in [`NOT_FUZZED`], drops the instrumentation and
//! the single codegen unit and builds them unoptimised before calling rustc. Measured on
//! cranelift-codegen and its dependencies: 314 s of CPU instrumented at -O1 in one codegen
//! unit, 158 s plain at -O1, 69 s plain at -O0. Everything the targets do run (the
//! cordon crate, serde_json, toml, http, hyper, tokio, ...) stays instrumented. Mixing is
//! sound: an uninstrumented crate is to ASan what the prebuilt standard library is. The
//! `cordon` crate itself keeps its instrumentation but not the single codegen unit: at -O3
//! in one unit it was the build's last step, about 4 minutes on one core while the other
//! idled; in 16 units both cores share it (the whole build: 621 s before, 580 s after, on
//! fresh clones; most of it is the dependencies). The schema validator and its regex
//! engines, HTTP/2 and wasmtime's text encodings are never run either: in [`NOT_FUZZED`]
//! since 2026-12-02, a cold build took 455 s (the sum of its crates' times 817 s, against
//! 1,077 s before; opt-level 1 instead of 3 had saved nothing). Since 2026-12-03 the
//! wrapper also builds what runs only while building (proc macros, build scripts and their
//! dependencies: cargo gives them no `--target`) at -O0 instead of the profile's -O1, and
//! `fuzz/Cargo.toml` has the cordon crate at -O1 instead of -O3.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::{repo_root, run};

/// Seconds each fuzz target runs for, by default and in `cargo xtask test`.
pub const SECONDS: u64 = 60;

/// The fuzz targets, each with the longest input it is given: a JSON-RPC message may be
/// long, a request head or a config file is short.
const TARGETS: &[(&str, usize)] = &[
    ("jsonrpc", 64 << 10),
    ("jsonrpc_structured", 64 << 10),
    ("http_request", 8 << 10),
    ("config", 8 << 10),
];

/// Set (to the real rustc's wrapper chain, possibly empty) when xtask runs as cargo's
/// `RUSTC_WRAPPER` for the fuzz build.
const WRAPPER_ENV: &str = "CORDON_FUZZ_RUSTC_WRAPPER";

/// Crates (by name prefix, as rustc's `--crate-name` spells them) that the fuzz targets
/// link but never run: the Wasm compiler and runtime, the schema validator, TLS and JWT
/// crypto, the allocator, file watching, metrics and terminal output. A crate missing here
/// is only built slower.
const NOT_FUZZED: &[&str] = &[
    "wasmtime",
    "cranelift",
    "pulley",
    "wasmparser",
    "wasm_encoder",
    "wasm_metadata",
    "wasmprinter",
    "wit_parser",
    "wit_component",
    "wast",
    "wat",
    "regalloc2",
    "gimli",
    "object",
    "addr2line",
    "cpp_demangle",
    "rustc_demangle",
    "ring",
    // The schema validator and its regex engines (about 200 s of CPU instrumented): tool
    // arguments are checked against schemas only for loaded tools, and the fuzzed
    // server has none.
    "jsonschema",
    "fancy_regex",
    "regex",
    "aho_corasick",
    "referencing",
    "fluent_uri",
    // HTTP/2 (the HTTP target validates a request already read) and wasmtime's encodings.
    "h2",
    "encoding_rs",
    "rustls",
    "webpki",
    "tokio_rustls",
    "jsonwebtoken",
    "tikv_jemalloc",
    "notify",
    "inotify",
    "rayon",
    "prometheus_client",
    "indicatif",
    "console",
    "clap",
    "rustix",
    "linux_raw_sys",
    "target_lexicon",
    "postcard",
    "ittapi",
    "memfd",
];

/// The instrumentation flags of cargo-fuzz 0.13's `build --sanitizer address
/// --debug-assertions` on Linux (its `project.rs`): coverage counters and comparison
/// tracing, AddressSanitizer, one codegen unit. The build passes them with
/// [`ALWAYS_FLAGS`]; the wrapper drops them for the crates no target runs.
const INSTRUMENTATION_FLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
    "-Zsanitizer=address",
    "-Cllvm-args=-sanitizer-coverage-stack-depth",
    "-Ccodegen-units=1",
];

/// The rest of cargo-fuzz's flags, kept for every crate: `cfg(fuzzing)` and debug
/// assertions (overflow checks follow them).
const ALWAYS_FLAGS: &[&str] = &["--cfg", "fuzzing", "-Cdebug-assertions"];

/// The crate whose single codegen unit is dropped (see the module docs).
const SPLIT_CRATE: &str = "cordon";

/// The arguments rustc gets for crate `crate_name` in the fuzz build, from those cargo gave.
fn rustc_args(crate_name: &str, args: Vec<OsString>) -> Vec<OsString> {
    // Cargo names the target only for what it builds for the targets (the build has
    // `--target`): the rest are proc macros, build scripts and their dependencies, which
    // run only while building.
    let for_build_only = !args.iter().any(|arg| arg == "--target");
    let fuzzed = !for_build_only && !NOT_FUZZED.iter().any(|prefix| crate_name.starts_with(prefix));
    if fuzzed && crate_name == SPLIT_CRATE {
        args.into_iter().filter(|arg| arg != "-Ccodegen-units=1").collect()
    } else if fuzzed {
        args
    } else {
        args.into_iter()
            .filter(|arg| !arg.to_str().is_some_and(|flag| INSTRUMENTATION_FLAGS.contains(&flag)))
            .map(|arg| match arg.to_str() {
                // Unoptimised, without debug info: nothing of it runs hot, and it builds
                // 4.5 times faster than instrumented at -O1 (cranelift-codegen, measured).
                // The proc macros and build scripts had the profile's -O1: about 200 s of
                // the build's 1,100 s of CPU.
                Some(flag) if flag.starts_with("opt-level=") => "opt-level=0".into(),
                Some(flag) if flag.starts_with("debuginfo=") => "debuginfo=0".into(),
                _ => arg,
            })
            .collect()
    }
}

/// If xtask was started as the fuzz build's `RUSTC_WRAPPER`, run rustc and exit.
pub fn run_as_rustc_wrapper_if_asked() {
    if env::var_os(WRAPPER_ENV).is_none() {
        return;
    }
    let mut args = env::args_os().skip(1);
    let rustc = args.next().expect("cargo gives a wrapper the rustc to run");
    let args: Vec<OsString> = args.collect();
    let crate_name = args
        .iter()
        .position(|arg| arg == "--crate-name")
        .and_then(|at| args.get(at + 1))
        .and_then(|name| name.to_str())
        .unwrap_or_default()
        .to_owned();
    let args = rustc_args(&crate_name, args);
    let status = Command::new(rustc).args(args).status().expect("running rustc");
    std::process::exit(status.code().unwrap_or(1));
}

/// Build every fuzz target once (AddressSanitizer, debug assertions and overflow checks on)
/// in `target/fuzz`, then run each for `seconds` from its seed corpus ([`run_built`]).
pub fn run_targets(seconds: u64) -> Result<()> {
    let root = repo_root();
    let started = std::time::Instant::now();
    run(&mut build_command(&root)).context(BUILD_HINT)?;
    eprintln!("fuzz targets built in {:.0?}", started.elapsed());
    run_built(seconds)
}

/// What a failed fuzz build most likely lacked.
const BUILD_HINT: &str = "building the fuzz targets (libFuzzer needs a C++ compiler: on Debian, apt-get install \
     g++; the build needs about 3.5 GB of disk)";

/// The fuzz build: `cargo build` of `fuzz/` with cargo-fuzz's flags, xtask as the rustc
/// wrapper that drops them where no target runs.
///
/// The build asks rustc for `-Z` flags (the sanitizer), which a stable toolchain accepts
/// with `RUSTC_BOOTSTRAP=1`; stable ships the ASan runtime.
fn build_command(root: &Path) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let rustflags = [INSTRUMENTATION_FLAGS, ALWAYS_FLAGS].concat().join(" ");
    let mut command = Command::new(cargo);
    command
        .current_dir(root.join("fuzz"))
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", rustflags)
        .env("RUSTC_WRAPPER", env::current_exe().expect("xtask finds its own binary"))
        .env(WRAPPER_ENV, "1")
        // `--target` keeps the flags off build scripts and proc macros, as cargo-fuzz does.
        .args(["build", "--release", "--bins", "--config", "profile.release.debug=\"line-tables-only\""])
        .args(["--target", &host_tuple(), "--target-dir"])
        .arg(root.join("target/fuzz"));
    command
}

fn host_tuple() -> String {
    cordon_toolchain::rustc_output(&["--print", "host-tuple"])
        .unwrap_or_else(|| "x86_64-unknown-linux-gnu".into())
}

/// Free disk the fuzz build needs beside everything else `cargo xtask test` builds (the
/// test build, the guests, the virtualenvs and npm packages: about 4.5 GB on a fresh
/// clone), with room to spare.
const ROOM_TO_BUILD_BESIDE: u64 = 14 << 30;

/// The fuzz build under way beside the tests of `cargo xtask test` (once they are built),
/// at idle priority: it gets only the CPU they leave (the tests' waits, the end-to-end
/// suite's), and what is left of it is done before the soak, which must run on a quiet
/// machine. Alone, after the soak, it was 5 to 10 minutes of a CI run with nothing else
/// to do. Started before the guests instead, it did 151 of its 288 crates by the time the
/// tests ended, but the test build took 10 min 32 s against 9 min 8 s (the VM's two cores
/// are likely one physical core's two threads), and the whole run gained only 51 s.
///
/// Idle priority is the kernel's `SCHED_IDLE` (util-linux's `chrt --idle`): a woken task
/// of any other policy preempts it at once, so the tests' latencies do not wait on it.
pub struct BuildBeside {
    child: Child,
    log: PathBuf,
    started: Instant,
}

impl BuildBeside {
    /// Start the build, once its crates are fetched (in the foreground: a starved build
    /// must not hold the package cache's lock while the other stages wait on it). `None`
    /// when this machine cannot build beside: no `chrt`, or less free disk than
    /// [`ROOM_TO_BUILD_BESIDE`]. The caller then builds after the soak, as before.
    pub fn start(root: &Path) -> Result<Option<Self>> {
        let enough_disk =
            crate::free_bytes(&root.join("target")).is_none_or(|free| free >= ROOM_TO_BUILD_BESIDE);
        let chrt = Command::new("chrt").arg("--help").output().is_ok_and(|output| output.status.success());
        if !enough_disk || !chrt {
            eprintln!("the fuzz build waits for the soak (chrt found: {chrt}; enough disk: {enough_disk})");
            return Ok(None);
        }
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        run(Command::new(&cargo).current_dir(root.join("fuzz")).args(["fetch", "--quiet"]))
            .context("fetching the fuzz targets' crates")?;
        let build = build_command(root);
        let log = root.join("target/fuzz-build.log");
        fs::create_dir_all(root.join("target"))?;
        let output = fs::File::create(&log)?;
        let mut command = Command::new("chrt");
        command
            .args(["--idle", "0"])
            .arg(build.get_program())
            .args(build.get_args())
            .arg("--offline")
            .envs(build.get_envs().filter_map(|(name, value)| Some((name, value?))))
            .current_dir(build.get_current_dir().expect("set above"))
            // Its own process group, so that a failed stage can stop every rustc of it.
            .process_group(0)
            .stdout(output.try_clone()?)
            .stderr(output);
        let child = command.spawn().context("starting the fuzz build")?;
        eprintln!("the fuzz build runs beside the tests, at idle priority (its output: {})", log.display());
        Ok(Some(Self { child, log, started: Instant::now() }))
    }

    /// Stop the build where it is (`SIGSTOP` to its process group), for a stage that needs
    /// a quiet machine: the end-to-end suite's replicas behind HAProxy failed twice beside
    /// it (timing races of a replica being stopped), never alone.
    pub fn pause(&mut self) {
        self.signal("-STOP");
    }

    /// Let a paused build go on.
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&mut self, signal: &str) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args([signal, "--", &group]).status();
        }
    }

    /// Wait for the build to finish; its output is shown only when it failed.
    pub fn finish(mut self) -> Result<()> {
        let status = self.child.wait()?;
        if !status.success() {
            let output = fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = output.lines().collect();
            eprintln!("{}", lines[lines.len().saturating_sub(80)..].join("\n"));
            bail!("{BUILD_HINT} failed ({status}); its whole output is in {}", self.log.display());
        }
        eprintln!("fuzz targets built in {:.0?}, beside the other stages", self.started.elapsed());
        Ok(())
    }
}

impl Drop for BuildBeside {
    /// A stage failed before the build was waited for: stop all of it.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            // A paused build takes the signal once it runs again.
            let _ = Command::new("kill").args(["-CONT", "--", &group]).status();
            let _ = self.child.wait();
        }
    }
}

/// Run each fuzz target (built) for `seconds` from its seed corpus in `fuzz/corpus/`.
/// What the fuzzer discovers goes to `target/fuzz/corpus/`, so the repository's corpus
/// stays the curated seeds; a crash leaves its input in `target/fuzz/artifacts/`.
pub fn run_built(seconds: u64) -> Result<()> {
    let root = repo_root();
    let target_dir = root.join("target/fuzz");
    let host = host_tuple();
    let binaries = target_dir.join(&host).join("release");
    let scratch = target_dir.join("tmp");
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch)?;
    // Each fuzzer runs on one core: two at a time take the 2 cores CI has, so the four
    // targets run their full time each in half the wall time.
    for pair in TARGETS.chunks(2) {
        let running = pair
            .iter()
            .map(|&(target, max_len)| {
                let corpus = target_dir.join("corpus").join(target);
                let artifacts = target_dir.join("artifacts").join(target);
                fs::create_dir_all(&corpus)?;
                fs::create_dir_all(&artifacts)?;
                let log = target_dir.join(format!("{target}.log"));
                let output = fs::File::create(&log)?;
                eprintln!("fuzzing {target} for {seconds} s (its output in {})", log.display());
                let child = Command::new(binaries.join(target))
                    // What a target writes (the config target's folder) stays under target/.
                    .env("TMPDIR", &scratch)
                    .arg(format!("-max_total_time={seconds}"))
                    .arg(format!("-max_len={max_len}"))
                    // An input that needs more than this in one allocation, or in all, is a
                    // failure: nothing the server reads may make it allocate without bound.
                    .args([
                        "-rss_limit_mb=2048",
                        "-malloc_limit_mb=512",
                        "-timeout=10",
                        "-print_final_stats=1",
                    ])
                    // No leak scan: the server keeps what an input makes it hold (a 2025
                    // session) reachable, so LeakSanitizer found nothing, but scanning the
                    // engine's heap after such inputs made the targets 6 times slower
                    // (jsonrpc: 211 against 1,300 runs a second). Growth is still bounded
                    // by the limits above.
                    .arg("-detect_leaks=0")
                    .arg(format!("-artifact_prefix={}/", artifacts.display()))
                    .arg(&corpus)
                    .arg(root.join("fuzz/corpus").join(target))
                    .stdout(output.try_clone()?)
                    .stderr(output)
                    .spawn()
                    .with_context(|| format!("starting fuzz target {target}"))?;
                Ok((target, log, artifacts, child))
            })
            .collect::<Result<Vec<_>>>()?;
        for (target, log, artifacts, mut child) in running {
            let status = child.wait()?;
            let output = fs::read_to_string(&log).unwrap_or_default();
            if !status.success() {
                eprintln!("{output}");
                bail!("fuzz target {target} failed ({status}): its input is in {}", artifacts.display());
            }
            // The summary: what was run, how fast, how much memory, what the corpus holds.
            let summary: Vec<&str> = output
                .lines()
                .filter(|line| line.starts_with("stat::") || line.starts_with("Done "))
                .collect();
            eprintln!("{target}: {}", summary.join("; "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> Vec<OsString> {
        flags.iter().map(OsString::from).collect()
    }

    #[test]
    fn crates_no_target_runs_lose_the_instrumentation_and_keep_the_rest() {
        let target = ["--target", "x86_64-unknown-linux-gnu"];
        let given =
            [INSTRUMENTATION_FLAGS, ALWAYS_FLAGS, &["-C", "opt-level=1", "-C", "debuginfo=1"], &target]
                .concat();
        assert_eq!(
            rustc_args("cranelift_codegen", args(&given)),
            args(
                &[
                    &["--cfg", "fuzzing", "-Cdebug-assertions", "-C", "opt-level=0", "-C", "debuginfo=0"],
                    &target[..]
                ]
                .concat()
            )
        );
        // A crate the targets run keeps every flag; cordon all but the single codegen unit.
        assert_eq!(rustc_args("serde_json", args(&given)), args(&given));
        let cordon = rustc_args("cordon", args(&given));
        assert_eq!(cordon.len(), given.len() - 1);
        assert!(!cordon.iter().any(|arg| arg == "-Ccodegen-units=1"));
    }

    #[test]
    fn what_runs_only_while_building_is_built_unoptimised() {
        // Proc macros and build scripts: cargo gives them neither `--target` nor RUSTFLAGS.
        let given = ["--crate-type", "proc-macro", "-C", "opt-level=1", "-C", "debuginfo=1"];
        assert_eq!(
            rustc_args("serde_derive", args(&given)),
            args(&["--crate-type", "proc-macro", "-C", "opt-level=0", "-C", "debuginfo=0"])
        );
        // serde_json is also a dependency of a build step here: that copy too.
        assert_eq!(
            rustc_args("serde_json", args(&given[2..])),
            args(&["-C", "opt-level=0", "-C", "debuginfo=0"])
        );
    }
}
