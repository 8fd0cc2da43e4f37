//! # Soak: mixed load over stdio and HTTP, then an account of everything
//!
//! Two real servers, `cordon serve --stdio` and `cordon serve --http 127.0.0.1:0`, each with
//! the example tools (well-behaved) and the hostile component (tight limits) beside them,
//! take a mixed load for the given time: echo, reindex with progress and locks; calls
//! cancelled at random moments (stdio `notifications/cancelled`, HTTP a closed connection);
//! calls stopped by their idle timeout or maximum duration (reindex, park, spin); hostile
//! guests holding descriptors, streams and listings, allocating over their limit,
//! linking and reading outside their data directory; and protocol garbage. A prober per
//! transport sends one echo every 10 ms, on a thread of its own, under the load and in
//! idle windows between its stretches (so both figures come from the same spell of this
//! machine).
//!
//! At the end, each a hard failure: every request answered exactly once (a cancelled one
//! not at all, unless it completed first: counted); every stopped call cleaned up exactly
//! once (the host's cleanup log lines, the example tools' own "released" lines, and no lock
//! left); every call slot free again; descriptors and resident memory back within 10 % of
//! the baseline taken after a warm-up; the prober's p99 under load within 2x of idle, each
//! probe timed from when its request starts onto the wire (over stdio, not the time it
//! queued behind the client's own other messages on the shared stdin).
//!
//! ```sh
//! cargo xtask soak          # 300 s; `cargo xtask soak 30` for a quick run
//! cargo bench -p cordon --bench soak --profile test -- --secs 30 [--seed N] [--lanes N] [--without Spin,ListDir]
//! ```

mod client;
mod load;
mod server;
#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use client::StdioClient;
use load::{Lane, Probe, SharedTally, Tally, Target, quantile};
use server::{Server, Usage};

/// The prober's pace, idle and under load.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// The load runs in this many stretches, each followed by an idle window: the prober's
/// idle figure is taken across the whole run, in the machine's same states as the load's,
/// not in ten seconds before it (see "The echo p99" in BENCHMARKS.md).
const CYCLES: u64 = 10;
/// How long the prober runs alone after each stretch of load (in all about 2,000 samples)...
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// ...once the last calls' cleanups (at most 1 s here) are done.
const QUIET_BEFORE_IDLE: Duration = Duration::from_millis(1200);
/// The prober alone before the baseline is read, and again before the end's.
const FIRST_IDLE: Duration = Duration::from_secs(2);
/// One spin per transport this often.
const SPIN_EVERY: Duration = Duration::from_millis(1500);
/// How long the servers get to give back descriptors and memory after the load.
const SETTLE: Duration = Duration::from_secs(30);
/// Resources after the load may exceed the baseline by this fraction.
const RESOURCE_SLACK: f64 = 0.10;
/// The prober's p99 under load may be this many times its idle p99.
const P99_RATIO: f64 = 2.0;

struct Args {
    secs: u64,
    seed: u64,
    lanes: usize,
    /// Steps left out of the mix (`--without Spin,ListDir`), to find which one a failing
    /// check is about; the full mix is the soak.
    without: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args { secs: 300, seed: 0, lanes: 4, without: Vec::new() };
    args.seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64;
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        let mut value = || given.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--secs" => args.secs = value()?.parse()?,
            "--seed" => args.seed = value()?.parse()?,
            "--lanes" => args.lanes = value()?.parse()?,
            "--without" => args.without.extend(value()?.split(',').map(str::to_owned)),
            // cargo bench passes this to every harness-less bench.
            "--bench" => {}
            other => bail!("unknown argument {other}; use --secs N, --seed N, --lanes N, --without STEP,..."),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| {
        let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        tokio.block_on(soak(args))
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("soak: FAILED (see the checks above)");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("soak: could not run: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// One check's verdict.
struct Check {
    name: String,
    passed: bool,
    detail: String,
}

async fn soak(args: Args) -> Result<bool> {
    let (root, cordon) = support::cordon();
    let dir = std::env::temp_dir().join(format!("cordon-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let stdio_config = server::write_config(&dir.join("stdio"), &root)?;
    let http_config = server::write_config(&dir.join("http"), &root)?;

    // The probers run on a thread of their own, so that the lanes' work in this process
    // (building and parsing megabyte messages) never delays a probe's timing, and with the
    // short scheduler slice the servers' transport threads have: a prober woken by its
    // answer then gets a core at once, rather than after a busy thread's slice. The stdio
    // client's reader, which hands every answer on (the probes' too), runs there as well.
    let probing = Background(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("soak-prober")
            .on_thread_start(cordon::runtime::engine::shorten_thread_slice)
            .enable_all()
            .build()?,
    ));
    let mut stdio = Server::stdio(&cordon, &stdio_config)?;
    let (stdin, stdout) = (stdio.child.stdin.take(), stdio.child.stdout.take());
    let (client, reading) = {
        let _on_the_probers_thread = probing.handle().enter();
        StdioClient::new(stdin.context("no stdin")?, stdout.context("no stdout")?)?
    };
    let (mut http, port) = Server::http(&cordon, &http_config)?;
    let targets = [Target::Stdio(client.clone()), Target::Http { port, ids: Arc::new(AtomicU64::new(1)) }];
    let tallies: [SharedTally; 2] = Default::default();
    if !args.without.is_empty() {
        println!("soak: NOT the full mix, without {:?}", args.without);
    }
    println!(
        "soak: seed {}, {} s of load, {} mixed lanes + a spinner + a prober per transport; \
         stdio server pid {}, http server pid {} on port {port}",
        args.seed,
        args.secs,
        args.lanes,
        stdio.pid(),
        http.pid()
    );

    for (target, tally) in targets.iter().zip(&tallies) {
        let reply =
            Lane::call_once(target, tally, "make_files", json!({"count": load::LISTED_FILES})).await?;
        if reply.text() != format!("made {}", load::LISTED_FILES) {
            bail!("{}: make_files failed: {}", target.label(), reply.message);
        }
    }

    // Warm-up: the whole mix, then every slot at once, so the baseline is of a server that
    // has done everything it will do, once.
    let warmup = Duration::from_secs((args.secs / 10).clamp(5, 20));
    println!("warm-up: {warmup:?} of the mix");
    run_load("w", &targets, &tallies, &args, u64::MAX, warmup, None).await?;
    for target in &targets {
        let problems = load::probe_slots(target, &Arc::default()).await?;
        if !problems.is_empty() {
            bail!(
                "{}: the slot probe failed after the warm-up, before any soak: {problems:?}",
                target.label()
            );
        }
    }

    let prober = probing.handle().clone();
    let pids = [stdio.pid(), http.pid()];
    let mut idle = run_probers(&prober, &targets, &tallies, "i", FIRST_IDLE).await?;
    let baseline = [stdio.usage()?, http.usage()?];
    let mappings = [server::resident_by_mapping(stdio.pid())?, server::resident_by_mapping(http.pid())?];

    let stretch = Duration::from_secs(args.secs) / CYCLES as u32;
    println!(
        "load: {} s in {CYCLES} stretches of {stretch:?}, each followed by {QUIET_BEFORE_IDLE:?} of quiet \
         and {IDLE_WINDOW:?} of the prober alone (idle)",
        args.secs
    );
    let before: Vec<u64> = tallies.iter().map(|tally| tally.lock().unwrap().requests).collect();
    let peaks = Arc::new(Mutex::new(baseline));
    let monitor = tokio::spawn(watch_peaks([stdio.pid(), http.pid()], peaks.clone()));
    let mut loaded: [Vec<Probe>; 2] = Default::default();
    let (mut load_cpu, mut idle_cpu) = (CpuTotals::default(), CpuTotals::default());
    let mut load_time = Duration::ZERO;
    for cycle in 0..CYCLES {
        let started = Instant::now();
        let clock = CpuClock::now(pids)?;
        let samples =
            run_load(&format!("l{cycle}"), &targets, &tallies, &args, cycle, stretch, Some(&prober)).await?;
        load_cpu.add(&CpuClock::now(pids)?, &clock);
        load_time += started.elapsed();
        tokio::time::sleep(QUIET_BEFORE_IDLE).await;
        let clock = CpuClock::now(pids)?;
        let quiet = run_probers(&prober, &targets, &tallies, &format!("i{cycle}"), IDLE_WINDOW).await?;
        idle_cpu.add(&CpuClock::now(pids)?, &clock);
        for index in 0..2 {
            loaded[index].extend(&samples[index]);
            idle[index].extend(&quiet[index]);
        }
    }
    let (load_cpu, idle_cpu) = (load_cpu.to_string(), idle_cpu.to_string());
    println!("load: {load_cpu}");
    monitor.abort();
    let peaks = *peaks.lock().unwrap();
    let load_requests: Vec<u64> =
        tallies.iter().zip(&before).map(|(tally, before)| tally.lock().unwrap().requests - before).collect();

    let mut checks = Vec::new();
    for target in &targets {
        let problems = load::probe_slots(target, &Arc::default()).await?;
        checks.push(Check {
            name: format!("{}: every call slot free again", target.label()),
            passed: problems.is_empty(),
            detail: if problems.is_empty() {
                format!("{} park calls at once all ran", server::SLOTS)
            } else {
                format!("{} of {} calls at once did not run: {problems:?}", problems.len(), server::SLOTS)
            },
        });
    }
    for (target, tally) in targets.iter().zip(&tallies) {
        checks.push(locks_released(target, tally).await?);
    }
    // The prober alone, as before the baseline. The pool decommits freed memories in
    // batches (`DECOMMIT_BATCH` in runtime/engine.rs), so the slot probe's last calls
    // keep the megabyte each wrote until later calls push them through. Read right after
    // the probe, as it was until 2026-12-03, HTTP's memory ended +9.4 % in one run, the
    // pool +6.9 MiB of it in 1 MiB mappings of probed memories.
    run_probers(&prober, &targets, &tallies, "f", FIRST_IDLE).await?;
    let settled = settle(&[&stdio, &http], &baseline).await?;
    let after = settled.now;
    let grown = [
        server::grown_mappings(&mappings[0], &server::resident_by_mapping(stdio.pid())?),
        server::grown_mappings(&mappings[1], &server::resident_by_mapping(http.pid())?),
    ];

    // Shut down: then every answer and every log line is in.
    client.close().await;
    http.terminate();
    let deadline = Instant::now() + Duration::from_secs(10);
    let statuses = tokio::task::block_in_place(|| [stdio.wait_exit(deadline), http.wait_exit(deadline)]);
    reading.await?;
    let stdio_report = client.take_report();

    for (index, server) in [&stdio, &http].into_iter().enumerate() {
        let label = server.label;
        let status = &statuses[index];
        checks.push(Check {
            name: format!("{label}: clean exit at shutdown"),
            passed: status.as_ref().is_ok_and(|status| status.success()),
            detail: format!("{status:?}"),
        });
        let tally = tallies[index].lock().unwrap();
        checks.push(answers_check(label, &tally, (index == 0).then_some(&stdio_report)));
        checks.push(cleanups_check(label, &tally, &server.log())?);
        let connection_ends = server::connection_ends(&server.log());
        if !connection_ends.is_empty() {
            println!("{label}: connections the server ended early or refused: {connection_ends:?}");
        }
        let (base, now) = (baseline[index], after[index]);
        let within = |now: f64, base: f64| now <= base * (1.0 + RESOURCE_SLACK);
        checks.push(Check {
            name: format!("{label}: descriptors back within 10 %"),
            passed: within(now.fds as f64, base.fds as f64),
            detail: format!("{} before, {} at the peak, {} after", base.fds, peaks[index].fds, now.fds),
        });
        let passed = within(now.rss_kib as f64, base.rss_kib as f64);
        checks.push(Check {
            name: format!("{label}: resident memory back within 10 %"),
            passed,
            // What grew is shown when passing too: a margin that shrinks run after run
            // names its cause.
            detail: format!(
                "{} before, {} at the peak, {} as the load ended, {} after {:.2?}; grown by kind: {}",
                mib(base.rss_kib),
                mib(now.peak_rss_kib.max(peaks[index].rss_kib)),
                mib(settled.first[index].rss_kib),
                mib(now.rss_kib),
                settled.waited,
                grown[index]
            ),
        });
        // The check times each probe from when its line starts onto the pipe: over stdio
        // the lanes share the client's one stdin, and a probe queued behind its own
        // client's 5 MiB garbage line waits for the server to read those bytes (a few ms;
        // 0.8 % of the probes under load in a 60 s run, as many as the p99's tail). That is
        // the stream's order, the same for any stdio client, not a guest slowing a
        // well-behaved call. The full figure is printed beside it.
        let unqueued =
            |probes: &[Probe]| probes.iter().map(|probe| probe.latency - probe.queued).collect::<Vec<_>>();
        let mut full: Vec<Duration> = loaded[index].iter().map(|probe| probe.latency).collect();
        let queued = loaded[index].iter().filter(|probe| probe.queued > Duration::from_micros(100)).count();
        println!(
            "{label}: the prober's echo p99 under load counting its wait behind the client's own messages: {:.2?} \
             ({queued} of {} probes waited over 100 µs)",
            quantile(&mut full, 0.99),
            full.len()
        );
        let (mut idle_latencies, mut load_latencies) = (unqueued(&idle[index]), unqueued(&loaded[index]));
        let idle_p99 = quantile(&mut idle_latencies, 0.99);
        let load_p99 = quantile(&mut load_latencies, 0.99);
        let ratio = load_p99.as_secs_f64() / idle_p99.as_secs_f64().max(1e-9);
        checks.push(Check {
            name: format!("{label}: echo p99 under load within {P99_RATIO}x of idle"),
            passed: ratio <= P99_RATIO,
            detail: format!(
                "idle p50 {:.2?} p99 {idle_p99:.2?} ({} samples); load p50 {:.2?} p99 {load_p99:.2?} ({} samples): {ratio:.2}x",
                quantile(&mut idle_latencies, 0.5),
                idle_latencies.len(),
                quantile(&mut load_latencies, 0.5),
                load_latencies.len()
            ),
        });
        let mut echo = tally.echo.clone();
        println!(
            "{label}: {} requests in {:.0?} of load ({:.0}/s), {} in all; steps {:?}; mixed-lane echo p50 {:.2?} p99 {:.2?}",
            load_requests[index],
            load_time,
            load_requests[index] as f64 / load_time.as_secs_f64(),
            tally.requests,
            tally.steps,
            quantile(&mut echo, 0.5),
            quantile(&mut echo, 0.99),
        );
    }

    println!();
    let mut passed = true;
    for check in &checks {
        passed &= check.passed;
        println!("{} {}: {}", if check.passed { "PASS" } else { "FAIL" }, check.name, check.detail);
    }
    println!("CPU while idle: {idle_cpu}\nCPU under load: {load_cpu}");
    println!("seed {} (replay the choices with --seed {})", args.seed, args.seed);
    let _ = std::fs::remove_dir_all(&dir);
    drop(probing);
    Ok(passed)
}

/// A runtime dropped without waiting for its tasks (a runtime may not block as it drops
/// inside another one), however `soak` returns.
struct Background(Option<tokio::runtime::Runtime>);

impl Background {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("held until dropped").handle()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Mixed lanes and a spinner per transport (and the prober, on `prober`'s runtime, when
/// given) for `duration`; returns the prober's latencies per transport. `stretch` tells
/// this stretch's lanes' choices from the others'. A lane that fails (a lost answer, a
/// broken connection) stops, and its failure is a violation.
async fn run_load(
    phase: &str,
    targets: &[Target; 2],
    tallies: &[SharedTally; 2],
    args: &Args,
    stretch: u64,
    duration: Duration,
    prober: Option<&tokio::runtime::Handle>,
) -> Result<[Vec<Probe>; 2]> {
    let until = Instant::now() + duration;
    let mut lanes = Vec::new();
    let mut probers = Vec::new();
    for (index, (target, tally)) in targets.iter().zip(tallies).enumerate() {
        let seed = |lane: u64| {
            let lane = (stretch.wrapping_mul(100_000)).wrapping_add(index as u64 * 1000 + lane);
            args.seed ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        };
        let name = |lane: &str| format!("{phase}{}{lane}", &target.label()[..1]);
        for lane in 0..args.lanes {
            let worker = Lane::new(target, name(&lane.to_string()), seed(lane as u64), tally.clone());
            lanes.push((tally.clone(), tokio::spawn(worker.run_mixed(until, args.without.clone()))));
        }
        if !args.without.iter().any(|step| step == "Spin") {
            let spinner = Lane::new(target, name("spin"), seed(999), tally.clone());
            lanes.push((tally.clone(), tokio::spawn(spinner.run_spinner(until, SPIN_EVERY))));
        }
        if let Some(runtime) = prober {
            let prober = Lane::new(target, name("probe"), 0, tally.clone());
            probers.push((tally.clone(), runtime.spawn(prober.run_prober(until, PROBE_EVERY))));
        }
    }
    for (tally, lane) in lanes {
        if let Err(error) = lane.await? {
            tally.lock().unwrap().violations.push(format!("a lane stopped: {error:#}"));
        }
    }
    let mut samples = [Vec::new(), Vec::new()];
    for (index, (tally, prober)) in probers.into_iter().enumerate() {
        match prober.await? {
            Ok(latencies) => samples[index] = latencies,
            Err(error) => tally.lock().unwrap().violations.push(format!("the prober stopped: {error:#}")),
        }
    }
    Ok(samples)
}

/// The probers alone, on both transports at once, on `prober`'s runtime.
async fn run_probers(
    prober: &tokio::runtime::Handle,
    targets: &[Target; 2],
    tallies: &[SharedTally; 2],
    phase: &str,
    duration: Duration,
) -> Result<[Vec<Probe>; 2]> {
    let until = Instant::now() + duration;
    let mut samples = [Vec::new(), Vec::new()];
    let probers: Vec<_> = targets
        .iter()
        .zip(tallies)
        .map(|(target, tally)| {
            let lane = Lane::new(target, format!("{phase}{}probe", &target.label()[..1]), 0, tally.clone());
            prober.spawn(lane.run_prober(until, PROBE_EVERY))
        })
        .collect();
    for (index, prober) in probers.into_iter().enumerate() {
        samples[index] = prober.await?.context("the idle prober")?;
    }
    Ok(samples)
}

/// CPU time spent so far: by the whole machine (busy, all cores), by the two servers, and
/// by this process (the clients), to tell the load the soak makes from other work on the
/// machine.
#[derive(Clone, Copy)]
struct CpuClock {
    at: Instant,
    machine: Duration,
    servers: Duration,
    clients: Duration,
}

impl CpuClock {
    fn now(pids: [u32; 2]) -> Result<Self> {
        // /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ..., in
        // clock ticks (100 per second).
        let stat = std::fs::read_to_string("/proc/stat")?;
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|n| n.parse().ok())
            .collect();
        let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&field| ticks.get(field)).sum();
        Ok(Self {
            at: Instant::now(),
            machine: Duration::from_millis(busy * 10),
            servers: support::cpu_used(pids[0]) + support::cpu_used(pids[1]),
            clients: support::cpu_used(std::process::id()),
        })
    }
}

/// CPU use summed over several spans of a phase.
#[derive(Default)]
struct CpuTotals {
    wall: Duration,
    machine: Duration,
    servers: Duration,
    clients: Duration,
}

impl CpuTotals {
    fn add(&mut self, now: &CpuClock, earlier: &CpuClock) {
        self.wall += now.at - earlier.at;
        self.machine += now.machine.saturating_sub(earlier.machine);
        self.servers += now.servers.saturating_sub(earlier.servers);
        self.clients += now.clients.saturating_sub(earlier.clients);
    }
}

impl std::fmt::Display for CpuTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wall = self.wall.as_secs_f64().max(1e-9);
        let cores = |time: Duration| time.as_secs_f64() / wall;
        let (machine, servers, clients) = (cores(self.machine), cores(self.servers), cores(self.clients));
        write!(
            f,
            "{machine:.2} of {} cores busy: servers {servers:.2}, soak clients {clients:.2}, other work {:.2}",
            std::thread::available_parallelism().map_or(0, usize::from),
            (machine - servers - clients).max(0.0)
        )
    }
}

/// The highest descriptor count and resident memory seen, sampled every second.
async fn watch_peaks(pids: [u32; 2], peaks: Arc<Mutex<[Usage; 2]>>) {
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    loop {
        interval.tick().await;
        for (index, pid) in pids.iter().enumerate() {
            if let Ok(now) = server::usage(*pid) {
                let mut peaks = peaks.lock().unwrap();
                peaks[index].fds = peaks[index].fds.max(now.fds);
                peaks[index].rss_kib = peaks[index].rss_kib.max(now.rss_kib);
            }
        }
    }
}

/// `locks` answers `[]`: every lock a stopped call held was released by its cleanup (a
/// cancelled call's cleanup may still be running just after the load: give it time).
async fn locks_released(target: &Target, tally: &SharedTally) -> Result<Check> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut interval = tokio::time::interval(Duration::from_millis(100));
    loop {
        interval.tick().await;
        let reply = Lane::call_once(target, tally, "locks", json!({})).await?;
        let passed = reply.text() == "[]";
        if passed || Instant::now() >= deadline {
            return Ok(Check {
                name: format!("{}: no lock left (each released by its call or its cleanup)", target.label()),
                passed,
                detail: format!("locks: {}", client::clip(reply.text())),
            });
        }
    }
}

/// What the servers used as the load ended and once they had settled.
struct Settled {
    /// The first reading after the load.
    first: [Usage; 2],
    /// The reading the checks judge: the first within the slack, or the last.
    now: [Usage; 2],
    /// How long that took.
    waited: Duration,
}

/// Wait until both servers are back within the slack of their baseline, or `SETTLE` passed.
/// The loop ends at the first reading within the slack, so a server whose memory is still
/// falling then shows a figure just under it: `first` and `waited` tell that apart from one
/// that is steady there.
async fn settle(servers: &[&Server; 2], baseline: &[Usage; 2]) -> Result<Settled> {
    let started = Instant::now();
    let deadline = started + SETTLE;
    let mut interval = tokio::time::interval(Duration::from_millis(250));
    let mut first = None;
    loop {
        interval.tick().await;
        let now = [servers[0].usage()?, servers[1].usage()?];
        let first = *first.get_or_insert(now);
        let settled = now.iter().zip(baseline).all(|(now, base)| {
            now.fds as f64 <= base.fds as f64 * (1.0 + RESOURCE_SLACK)
                && now.rss_kib as f64 <= base.rss_kib as f64 * (1.0 + RESOURCE_SLACK)
        });
        if settled || Instant::now() >= deadline {
            return Ok(Settled { first, now, waited: started.elapsed() });
        }
    }
}

/// Every request answered exactly once, and nothing for a cancelled one unless it was done
/// before the cancel could land.
fn answers_check(label: &str, tally: &Tally, stdio: Option<&client::StdioReport>) -> Check {
    let mut problems = tally.violations.clone();
    let mut late = 0;
    if let Some(report) = stdio {
        problems.extend(report.violations.iter().cloned());
        if report.null_id_errors != tally.expected_null_id_errors {
            problems.push(format!(
                "{} unparsable lines sent, {} answers with a null id",
                tally.expected_null_id_errors, report.null_id_errors
            ));
        }
        for answer in &report.late {
            let text = answer.message["result"]["content"][0]["text"].as_str().unwrap_or_default();
            // The server reads stdin in order on one thread: a cancel it has read stops the
            // answer, so an answer long after the cancel was written is one sent despite it.
            if answer.message["result"].is_null()
                || text == "The call was cancelled."
                || answer.after_cancel > Duration::from_secs(5)
            {
                problems.push(format!(
                    "request {} answered {:?} after its cancel: {}",
                    answer.id,
                    answer.after_cancel,
                    client::clip(&answer.message.to_string())
                ));
            } else {
                late += 1;
            }
        }
    }
    let detail = format!(
        "{} requests, {} answers, {} cancelled without an answer, {} answered before their cancel went out, \
         {late} answered as the cancel crossed them, {} spins refused while a cleanup held their lock{}",
        tally.requests,
        tally.answers,
        tally.cancels,
        tally.answered_before_cancel,
        tally.spin_locked,
        summary(&problems)
    );
    Check {
        name: format!("{label}: every request answered exactly once, no cancelled one answered"),
        passed: problems.is_empty(),
        detail,
    }
}

/// Every stopped call cleaned up exactly once: no call id in two cleanup lines; at least one
/// cleanup per stop answered; no more cleanups per tool than calls that were stopped; each
/// lock released once at most, and once exactly for each timed-out reindex.
fn cleanups_check(label: &str, tally: &Tally, log: &[String]) -> Result<Check> {
    let cleanups = server::cleanups(log)?;
    let mut problems = Vec::new();
    if let Some(line) = log.iter().find(|line| line.contains("log events dropped")) {
        problems.push(format!("the server dropped log lines, so cleanups cannot be counted: {line}"));
    }
    let mut per_call: HashMap<u64, u64> = HashMap::new();
    let mut per_stop: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut per_tool: BTreeMap<&str, u64> = BTreeMap::new();
    let mut unfinished = BTreeMap::<String, u64>::new();
    for cleanup in &cleanups {
        *per_call.entry(cleanup.call).or_default() += 1;
        *per_stop.entry((cleanup.tool.clone(), cleanup.reason.clone())).or_default() += 1;
        *per_tool.entry(&cleanup.tool).or_default() += 1;
        if cleanup.outcome != "completed" {
            *unfinished.entry(format!("{} {}", cleanup.tool, cleanup.outcome)).or_default() += 1;
        }
    }
    for (call, runs) in per_call.iter().filter(|(_, runs)| **runs > 1) {
        problems.push(format!("call {call} was cleaned up {runs} times"));
    }
    for ((tool, reason), answered) in &tally.answered_stops {
        let ran = per_stop.get(&(tool.clone(), reason.clone())).copied().unwrap_or(0);
        if ran < *answered {
            problems.push(format!(
                "{answered} {tool} calls answered as stopped ({reason}), but {ran} cleanups for it"
            ));
        }
    }
    for (tool, ran) in &per_tool {
        let answered: u64 = tally.answered_stops.iter().filter(|((t, _), _)| t == tool).map(|(_, n)| n).sum();
        let stopped = answered + tally.unanswered_cancels.get(*tool).copied().unwrap_or(0);
        if *ran > stopped {
            problems.push(format!("{ran} cleanups of {tool}, but only {stopped} of its calls were stopped"));
        }
    }
    let mut released: HashMap<String, u64> = HashMap::new();
    for name in server::released_locks(log) {
        *released.entry(name).or_default() += 1;
    }
    for (name, times) in &released {
        if name == "spin" {
            continue; // one lock name for every spin
        }
        let known =
            tally.cancelled_collections.contains(name) || tally.idle_stopped_collections.contains(name);
        if *times > 1 || !known {
            problems.push(format!(
                "the lock {name} was released by {times} cleanups{}",
                if known { "" } else { ", and no stopped call held it" }
            ));
        }
    }
    // A `reindex` stopped by its idle timeout checks for stops, so the stop wakes it from
    // its sleep and it releases its lock itself before its cleanup runs (with no note left):
    // its cleanup is counted above (answered as stopped), and "no lock left" shows the
    // release; a cleanup may release it only once.
    let by_reason = per_stop
        .iter()
        .map(|((tool, reason), n)| format!("{tool}/{reason} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let detail = format!(
        "{} cleanups ({by_reason}); not completed: {unfinished:?}; {} locks released by cleanups{}",
        cleanups.len(),
        released.values().sum::<u64>(),
        summary(&problems)
    );
    Ok(Check {
        name: format!("{label}: every stopped call cleaned up exactly once"),
        passed: problems.is_empty(),
        detail,
    })
}

/// The first few problems, and how many there were.
fn summary(problems: &[String]) -> String {
    if problems.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    format!("; {} problems, first: {}", problems.len(), shown.join(" | "))
}
