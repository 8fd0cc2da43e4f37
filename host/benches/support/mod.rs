//! What the server benchmarks share: the binaries under test, a config serving the example
//! tools, the means to pause a server and read its CPU time, and the HTTP load generator.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

pub mod http;

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// The repository, `target/debug/cordon` (or `$CORDON_BIN`) and the end-to-end venv's python.
pub struct Binaries {
    pub root: PathBuf,
    pub cordon: PathBuf,
    pub python: PathBuf,
}

pub fn binaries() -> Binaries {
    let (root, cordon) = cordon();
    let python = root.join("target/e2e-venv/bin/python");
    assert!(python.is_file(), "run `cargo xtask test` first: it builds the Python env");
    Binaries { root, cordon, python }
}

/// The repository and `target/debug/cordon` (or `$CORDON_BIN`), for the benchmarks that
/// need no Python.
pub fn cordon() -> (PathBuf, PathBuf) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cordon =
        std::env::var_os("CORDON_BIN").map_or_else(|| root.join("target/debug/cordon"), PathBuf::from);
    assert!(cordon.is_file(), "run `cargo build -p cordon` (or `cargo xtask test`) first");
    (root, cordon)
}

/// A config file serving the example tools, with `server` as extra `[server]` keys.
pub fn examples_config(root: &std::path::Path, name: &str, server: &str) -> PathBuf {
    component_config(&root.join("target/guests/example-tools.wasm"), name, server)
}

/// [`examples_config`] for the component at `component`.
pub fn component_config(component: &std::path::Path, name: &str, server: &str) -> PathBuf {
    let config = std::env::temp_dir().join(format!("cordon-bench-{name}.toml"));
    std::fs::write(
        &config,
        format!("[server]\ncache = false\n{server}[[components]]\npath = {component:?}\n"),
    )
    .unwrap();
    config
}

/// CPU time used so far by all of process `pid`'s threads (the scheduler's nanosecond
/// accounting in `/proc/PID/task/*/schedstat`).
pub fn cpu_used(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let nanos = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// Send `signal` to `child` (SIGSTOP and SIGCONT pause and resume a server between its
/// rounds).
pub fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

/// Read a server's log from `stream` until it closes, as a log collector that stores it
/// would (large reads, no parsing), on a thread of its own; the thread returns the lines.
pub fn drain_log(mut stream: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 1 << 16];
        let mut lines = 0;
        while let Ok(read @ 1..) = stream.read(&mut buffer) {
            lines += buffer[..read].iter().filter(|&&byte| byte == b'\n').count();
        }
        lines
    })
}
