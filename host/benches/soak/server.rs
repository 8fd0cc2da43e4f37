//! The servers under soak: their config, their processes, what they log about cleanups, and
//! what the kernel says about their descriptors and memory.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Call slots of each server: far more than the soak's lanes keep busy (so a busy refusal
/// means a leaked slot), and what the slot probe fills.
pub const SLOTS: usize = 32;
/// How long a call waits for a slot before it is refused; the slot probe's calls run
/// longer than this, so a slot still held makes the probe's last call busy.
pub const QUEUE_TIMEOUT: Duration = Duration::from_millis(400);
/// The maximum duration of the setup's `make_files` (the hostile tools' other calls have
/// 1 s): creating its thousand files took 0.75-0.99 s on an idle machine and past 1 s right
/// after an earlier soak, which failed the soak before its load began.
const MAKE_FILES_MS: u64 = 30_000;
/// The operator log's filter: the cleanup lines of `runtime::call` (debug) and the guests'
/// own log (info), where the example tools' cleanup names the lock it released; why the
/// HTTP server ended or refused a connection (debug), for a lost answer's report.
const LOG_FILTER: &str = "info,cordon::runtime::call=debug,cordon::transport::http=debug";

/// Limits: the well-behaved example tools get room; the hostile component gets a small
/// memory and short timeouts, as an operator would give a tool it does not trust.
pub fn write_config(dir: &Path, root: &Path) -> Result<PathBuf> {
    let guests = root.join("target/guests");
    let (tools, hostile) = (guests.join("example-tools.wasm"), guests.join("hostile.wasm"));
    for guest in [&tools, &hostile] {
        if !guest.is_file() {
            bail!("{} is missing: run `cargo xtask guests` first", guest.display());
        }
    }
    std::fs::create_dir_all(dir.join("tools-data"))?;
    std::fs::create_dir_all(dir.join("hostile-data"))?;
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nmax_concurrent_calls = {SLOTS}\nqueue_timeout_ms = {}\nprogress_interval_ms = 20\n\n\
             [http]\nmax_body_kb = 1024\nsse_after_ms = 300\nkeep_alive_ms = 100\n\n\
             [[components]]\npath = {tools:?}\ndata_dir = \"tools-data\"\n\
             limits = {{ grace_ms = 100, cleanup_ms = 1000, idle_timeout_ms = 500, max_duration_ms = 10000 }}\n\
             [components.tools.spin]\nmax_duration_ms = 300\n\n\
             [[components]]\npath = {hostile:?}\ndata_dir = \"hostile-data\"\n\
             limits = {{ memory_mb = 16, grace_ms = 50, cleanup_ms = 500, idle_timeout_ms = 0, max_duration_ms = 1000 }}\n\
             [components.tools.make_files]\nmax_duration_ms = {MAKE_FILES_MS}\n",
            QUEUE_TIMEOUT.as_millis(),
        ),
    )?;
    Ok(config)
}

/// One `cordon serve` process and the lines of its operator log that the checks read.
pub struct Server {
    pub label: &'static str,
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
    log_reader: Option<std::thread::JoinHandle<()>>,
}

/// Lines worth keeping: cleanups (the host's and the example tools' own), lost log events,
/// warnings and errors.
fn kept(line: &str) -> bool {
    line.contains("cordon::runtime::call")
        || line.contains("cleanup after")
        || line.contains("log events dropped")
        || line.contains("HTTP connection ended")
        || line.contains("closing a connection")
        || line.contains("refusing a connection")
        || line.contains(" WARN ")
        || line.contains(" ERROR ")
}

/// Why the HTTP server ended or refused connections, with how often: the lines of the
/// operator log from its transport, without their timestamps and addresses.
pub fn connection_ends(log: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut ends = std::collections::BTreeMap::new();
    for line in log {
        let reason = ["HTTP connection ended", "closing a connection", "refusing a connection"]
            .iter()
            .find_map(|start| line.find(start).map(|at| &line[at..]));
        if let Some(reason) = reason {
            *ends.entry(reason.to_owned()).or_default() += 1;
        }
    }
    ends
}

impl Server {
    /// `cordon serve --stdio`; its stdin and stdout are the caller's to take.
    pub fn stdio(cordon: &Path, config: &Path) -> Result<Self> {
        let mut child = Command::new(cordon)
            .args(["serve", "--stdio", "--config"])
            .arg(config)
            .env("CORDON_LOG", LOG_FILTER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting cordon serve --stdio")?;
        let stderr = BufReader::new(child.stderr.take().context("no stderr")?);
        let (log, log_reader) = keep_reading(stderr.lines());
        Ok(Self { label: "stdio", child, log, log_reader: Some(log_reader) })
    }

    /// `cordon serve --http` on a port of the kernel's choosing; returns it with the port,
    /// read from the line where the server says it listens.
    pub fn http(cordon: &Path, config: &Path) -> Result<(Self, u16)> {
        let mut child = Command::new(cordon)
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(config)
            .env("CORDON_LOG", LOG_FILTER)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting cordon serve --http")?;
        let mut lines = BufReader::new(child.stderr.take().context("no stderr")?).lines();
        let port = loop {
            let Some(line) = lines.next() else {
                let status = child.wait()?;
                bail!("cordon serve --http exited before it listened ({status})");
            };
            let line = line?;
            if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap_or_default().parse::<u16>()?;
            }
        };
        let (log, log_reader) = keep_reading(lines);
        Ok((Self { label: "http", child, log, log_reader: Some(log_reader) }, port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Open descriptors and resident memory now.
    pub fn usage(&self) -> Result<Usage> {
        usage(self.pid())
    }

    /// Wait (until `deadline`) for the server to exit, after its stdin closed or a SIGTERM;
    /// then every line of its log has been read.
    pub fn wait_exit(&mut self, deadline: Instant) -> Result<ExitStatus> {
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                bail!("the {} server did not exit in time after shutdown", self.label);
            }
            // A process exit has no waitable event here short of blocking; poll it.
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.log_reader.take() {
            let _ = reader.join();
        }
        Ok(status)
    }

    pub fn terminate(&self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
    }

    /// The log lines kept so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read `lines` to EOF on a thread of its own (a server must never block on its stderr),
/// keeping the lines the checks need.
fn keep_reading(
    lines: impl Iterator<Item = std::io::Result<String>> + Send + 'static,
) -> (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if kept(&line) {
                sink.lock().unwrap().push(line);
            }
        }
    });
    (log, reader)
}

/// Process `pid`'s open descriptors and resident memory now.
pub fn usage(pid: u32) -> Result<Usage> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> Result<u64> {
        let line = status.lines().find(|line| line.starts_with(key)).with_context(|| format!("no {key}"))?;
        Ok(line[key.len()..].trim().trim_end_matches("kB").trim().parse()?)
    };
    Ok(Usage { fds, rss_kib: kib("VmRSS:")?, peak_rss_kib: kib("VmHWM:")? })
}

/// One mapping of a process (`/proc/PID/smaps`).
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    name: String,
    protection: String,
    rss_kib: u64,
}

/// Where a mapping's resident memory belongs, told from its address and neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemoryKind {
    /// Inside the instance pool's reservation (linear memories and tables, each slot
    /// keeping up to `linear_memory_keep_resident` once warm).
    Pool,
    /// glibc's malloc heap or one of its per-thread arenas (64 MiB-aligned heaps): what C
    /// code allocates (`fdopendir`'s buffers), since Rust's allocator is jemalloc.
    GlibcMalloc,
    /// Other anonymous memory: jemalloc's extents, thread and fiber stacks.
    OtherAnonymous,
    /// Files: the binary, libraries.
    File,
}

/// Resident memory per mapping of process `pid`, keyed by its address range and name, with
/// its kind: compared before and after, it says where memory stayed.
pub fn resident_by_mapping(pid: u32) -> Result<BTreeMap<String, (MemoryKind, u64)>> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut all: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            if let Some(last) = all.last_mut() {
                last.rss_kib = rss.trim().trim_end_matches("kB").trim().parse()?;
            }
        } else if line
            .split_whitespace()
            .next()
            .is_some_and(|first| first.contains('-') && !first.ends_with(':'))
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields[0].split_once('-').context("a mapping's range")?;
            all.push(Mapping {
                start: u64::from_str_radix(start, 16)?,
                end: u64::from_str_radix(end, 16)?,
                name: fields.get(5).copied().unwrap_or("[anon]").to_owned(),
                protection: fields[1].to_owned(),
                rss_kib: 0,
            });
        }
    }
    // The pool reserves 4 GiB and a guard per linear memory: the span of every
    // inaccessible mapping of at least 1 GiB holds it, and only it.
    let reservations = all.iter().filter(|m| m.protection == "---p" && m.end - m.start >= 1 << 30);
    let pool = reservations.fold(None, |span: Option<(u64, u64)>, m| {
        Some(span.map_or((m.start, m.end), |(low, high)| (low.min(m.start), high.max(m.end))))
    });
    let mut mappings = BTreeMap::new();
    for m in all.iter().filter(|m| m.rss_kib > 0) {
        const ARENA_ALIGNMENT: u64 = 64 << 20;
        let kind = if m.name.starts_with('/') {
            MemoryKind::File
        } else if pool.is_some_and(|(low, high)| m.start >= low && m.end <= high) {
            MemoryKind::Pool
        } else if m.name == "[heap]" || m.start % ARENA_ALIGNMENT == 0 {
            MemoryKind::GlibcMalloc
        } else {
            MemoryKind::OtherAnonymous
        };
        let key = format!("{:x}-{:x} ({} MiB {})", m.start, m.end, (m.end - m.start) >> 20, m.name);
        mappings.insert(key, (kind, m.rss_kib));
    }
    Ok(mappings)
}

/// How resident memory grew from `before` to `after`, by kind (net, in KiB, with how many
/// mappings grew), then the mappings that grew most.
pub fn grown_mappings(
    before: &BTreeMap<String, (MemoryKind, u64)>,
    after: &BTreeMap<String, (MemoryKind, u64)>,
) -> String {
    let mut by_kind: BTreeMap<MemoryKind, (i64, usize)> = BTreeMap::new();
    let mut grown: Vec<(i64, &String)> = Vec::new();
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for key in keys {
        let (kind, now) = after.get(key).copied().unwrap_or_else(|| (before[key].0, 0));
        let growth = now as i64 - before.get(key).map_or(0, |(_, kib)| *kib as i64);
        let entry = by_kind.entry(kind).or_default();
        entry.0 += growth;
        if growth > 0 {
            entry.1 += 1;
            grown.push((growth, key));
        }
    }
    grown.sort_by_key(|(growth, _)| std::cmp::Reverse(*growth));
    let kinds = by_kind
        .iter()
        .map(|(kind, (net, count))| format!("{kind:?} {net:+} KiB ({count} grew)"))
        .collect::<Vec<_>>()
        .join(", ");
    let most = grown
        .iter()
        .take(4)
        .map(|(growth, mapping)| format!("+{growth} KiB in {mapping}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{kinds}; most: {most}")
}

/// A server's open descriptors and memory at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub fds: usize,
    pub rss_kib: u64,
    /// The process's peak resident memory so far.
    pub peak_rss_kib: u64,
}

/// One cleanup, as `runtime::call` logs it.
#[derive(Debug)]
pub struct Cleanup {
    pub call: u64,
    pub tool: String,
    pub reason: String,
    /// "completed", "failed" or "timed out".
    pub outcome: &'static str,
}

/// The value of `key=` in a log line's fields (which follow the message, hence the last).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.rfind(&format!(" {key}="))? + key.len() + 2;
    Some(line[at..].split_whitespace().next()?.trim_matches('"'))
}

pub fn cleanups(log: &[String]) -> Result<Vec<Cleanup>> {
    let mut cleanups = Vec::new();
    for line in log.iter().filter(|line| line.contains("cordon::runtime::call") && line.contains(" cleanup "))
    {
        let outcome = if line.contains("cleanup completed") {
            "completed"
        } else if line.contains("cleanup failed") {
            "failed"
        } else if line.contains("cleanup ran past its budget") {
            "timed out"
        } else {
            continue;
        };
        let parsed = (|| {
            Some(Cleanup {
                call: field(line, "call")?.parse().ok()?,
                tool: field(line, "tool")?.to_owned(),
                reason: field(line, "reason")?.to_owned(),
                outcome,
            })
        })();
        cleanups
            .push(parsed.with_context(|| format!("a cleanup line without call, tool and reason: {line}"))?);
    }
    Ok(cleanups)
}

/// The locks the example tools' cleanup says it released ("cleanup after reindex (…):
/// released NAME").
pub fn released_locks(log: &[String]) -> Vec<String> {
    log.iter()
        .filter_map(|line| line.split_once("): released ").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}
