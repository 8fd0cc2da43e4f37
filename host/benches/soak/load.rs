//! The load: lanes of requests on one transport, each checking the answers it gets and
//! counting what the end-of-run checks need (stops answered, cancels left unanswered, the
//! collections whose lock only a cleanup can release).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::client::{HttpClient, Reply, StdioClient, clip};
use crate::server::SLOTS;

/// xorshift64*: seeded, so a run's choices can be replayed with `--seed`.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    pub fn millis(&mut self, bound: u64) -> Duration {
        Duration::from_millis(self.below(bound))
    }
}

/// What one step of a mixed lane does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Well-behaved: `echo`, `reindex` with progress, `locks`.
    Echo,
    Reindex,
    Locks,
    /// Cancelled at a random moment: cooperative (`reindex`) and parked in a host call (`park`).
    ReindexCancelled,
    ParkCancelled,
    /// Stopped by a timeout: no progress for the idle timeout, and past the maximum duration.
    ReindexIdle,
    ParkTimeout,
    /// Hostile: descriptors, streams and listings held in the host, memory over the limit,
    /// a symlink out of the data directory, a file outside it.
    HoldFiles,
    OpenStreams,
    ListDir,
    AllocMb,
    Symlink,
    ReadPasswd,
    /// Protocol garbage: unparsable, invalid with an id, an unknown tool, oversized.
    Malformed,
    InvalidWithId,
    UnknownTool,
    Oversized,
}

/// The mix of a lane's steps, by weight.
const MIX: &[(Kind, u64)] = &[
    (Kind::Echo, 30),
    (Kind::Reindex, 12),
    (Kind::Locks, 8),
    (Kind::ReindexCancelled, 8),
    (Kind::ParkCancelled, 5),
    (Kind::ReindexIdle, 3),
    (Kind::ParkTimeout, 3),
    (Kind::HoldFiles, 4),
    (Kind::OpenStreams, 4),
    (Kind::ListDir, 4),
    (Kind::AllocMb, 4),
    (Kind::Symlink, 3),
    (Kind::ReadPasswd, 3),
    (Kind::Malformed, 3),
    (Kind::InvalidWithId, 2),
    (Kind::UnknownTool, 3),
    (Kind::Oversized, 1),
];

/// Files `make_files` leaves in the hostile data directory, for `list_dir` to list.
pub const LISTED_FILES: u32 = 1000;
/// The most a mixed lane waits between two steps.
const THINK_MS: u64 = 50;

/// What the lanes of one transport saw; the checks read it at the end.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests sent, by kind of step (garbage included).
    pub steps: BTreeMap<String, u64>,
    pub requests: u64,
    pub answers: u64,
    /// Stops answered with an error naming them: (tool, reason as cleanup is told) → count.
    pub answered_stops: BTreeMap<(String, String), u64>,
    /// Cancels sent, and those whose answer came before the cancel went out.
    pub cancels: u64,
    pub answered_before_cancel: u64,
    /// Cancelled calls left without an answer, by tool: each may have needed a cleanup.
    pub unanswered_cancels: BTreeMap<String, u64>,
    /// Collections of cancelled `reindex` calls left without an answer.
    pub cancelled_collections: HashSet<String>,
    /// Collections of `reindex` calls answered as idle-timed-out: each lock was released by
    /// exactly one cleanup.
    pub idle_stopped_collections: Vec<String>,
    /// Lines sent that the server can only answer with a null id (stdio).
    pub expected_null_id_errors: u64,
    /// `spin` refused because a stopped spin's cleanup had not yet released its lock.
    pub spin_locked: u64,
    /// Whatever broke a promise, with what was seen.
    pub violations: Vec<String>,
    /// Latencies of the mixed lanes' echo calls.
    pub echo: Vec<Duration>,
}

pub type SharedTally = Arc<Mutex<Tally>>;

/// The stop an error answer names, as the reason cleanup is told.
fn stop_of(reply: &Reply) -> Option<&'static str> {
    if !reply.is_tool_error() {
        return None;
    }
    let text = reply.text();
    Some(if text.contains("(its maximum duration)") {
        "max-duration"
    } else if text.contains("(its idle timeout)") {
        "idle-timeout"
    } else if text.contains("ran out of memory") {
        "out-of-memory"
    } else if text.starts_with("The tool crashed") {
        "trapped"
    } else if text.contains("shutting down") {
        "shutdown"
    } else {
        return None;
    })
}

/// Which server a lane talks to.
#[derive(Clone)]
pub enum Target {
    Stdio(Arc<StdioClient>),
    Http { port: u16, ids: Arc<AtomicU64> },
}

impl Target {
    pub fn label(&self) -> &'static str {
        match self {
            Target::Stdio(_) => "stdio",
            Target::Http { .. } => "http",
        }
    }
}

enum Transport {
    Stdio(Arc<StdioClient>),
    Http(HttpClient),
}

/// One client of the soak: it runs steps one after another.
pub struct Lane {
    transport: Transport,
    rng: Rng,
    tally: SharedTally,
    /// Makes collection and link names unique across lanes.
    name: String,
    serial: u64,
}

impl Lane {
    pub fn new(target: &Target, name: String, seed: u64, tally: SharedTally) -> Self {
        let transport = match target {
            Target::Stdio(client) => Transport::Stdio(client.clone()),
            Target::Http { port, ids } => Transport::Http(HttpClient::new(*port, ids.clone())),
        };
        Self { transport, rng: Rng::new(seed), tally, name, serial: 0 }
    }

    fn unique(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!("{prefix}-{}-{}", self.name, self.serial)
    }

    fn violation(&self, message: String) {
        self.tally.lock().unwrap().violations.push(message);
    }

    fn expect(&self, ok: bool, what: &str, reply: &Reply) {
        if !ok {
            self.violation(format!("{what}: got {}", clip(&reply.message.to_string())));
        }
    }

    /// A tools/call and its answer, counted.
    async fn call(&mut self, tool: &str, arguments: Value, progress: bool) -> Result<Reply> {
        self.tally.lock().unwrap().requests += 1;
        let params = json!({"name": tool, "arguments": arguments});
        let reply = match &mut self.transport {
            Transport::Stdio(client) => client.request("tools/call", params, progress).await,
            Transport::Http(client) => client.request("tools/call", Some(tool), params, progress).await,
        }
        .with_context(|| format!("tools/call {tool}"))?;
        self.answered(tool, &reply);
        Ok(reply)
    }

    fn answered(&self, tool: &str, reply: &Reply) {
        let mut tally = self.tally.lock().unwrap();
        tally.answers += 1;
        if let Some(reason) = stop_of(reply) {
            *tally.answered_stops.entry((tool.to_owned(), reason.to_owned())).or_default() += 1;
        }
        if reply.text().contains("server is busy") {
            tally.violations.push(format!(
                "{tool} refused as busy although the soak never fills the {SLOTS} slots: {}",
                reply.text()
            ));
        }
    }

    /// A tools/call cancelled after `after` (stdio: `notifications/cancelled`; HTTP: the
    /// connection closed); its answer if it came first.
    async fn call_then_cancel(
        &mut self,
        tool: &str,
        arguments: Value,
        after: Duration,
    ) -> Result<Option<Reply>> {
        self.tally.lock().unwrap().requests += 1;
        let params = json!({"name": tool, "arguments": arguments});
        let reply = match &mut self.transport {
            Transport::Stdio(client) => client.request_then_cancel("tools/call", params, after).await,
            Transport::Http(client) => client.call_then_close(tool, params, after).await,
        }
        .with_context(|| format!("tools/call {tool}, to cancel"))?;
        let mut tally = self.tally.lock().unwrap();
        match &reply {
            Some(_) => tally.answered_before_cancel += 1,
            None => {
                tally.cancels += 1;
                *tally.unanswered_cancels.entry(tool.to_owned()).or_default() += 1;
            }
        }
        drop(tally);
        if let Some(reply) = &reply {
            self.answered(tool, reply);
        }
        Ok(reply)
    }

    /// Run a mixed lane until `until`, with the steps named in `without` left out; an
    /// error is a transport failure (the lane stops).
    pub async fn run_mixed(mut self, until: Instant, without: Vec<String>) -> Result<()> {
        let mix: Vec<(Kind, u64)> =
            MIX.iter().copied().filter(|(kind, _)| !without.contains(&format!("{kind:?}"))).collect();
        let total: u64 = mix.iter().map(|(_, weight)| weight).sum();
        while Instant::now() < until && total > 0 {
            let mut pick = self.rng.below(total);
            let kind = mix
                .iter()
                .find(|(_, weight)| {
                    let hit = pick < *weight;
                    pick = pick.saturating_sub(*weight);
                    hit
                })
                .map_or(Kind::Echo, |(kind, _)| *kind);
            *self.tally.lock().unwrap().steps.entry(format!("{kind:?}")).or_default() += 1;
            self.step(kind).await?;
            // Pacing, so the load is a mix rather than a flood of whatever is quickest.
            tokio::time::sleep(self.rng.millis(THINK_MS)).await;
        }
        Ok(())
    }

    async fn step(&mut self, kind: Kind) -> Result<()> {
        match kind {
            Kind::Echo => {
                let text = self.unique("echo");
                let started = Instant::now();
                let reply = self.call("echo", json!({"text": text}), false).await?;
                self.tally.lock().unwrap().echo.push(started.elapsed());
                self.expect(reply.text() == text && !reply.is_tool_error(), "echo", &reply);
            }
            Kind::Locks => {
                let reply = self.call("locks", json!({}), false).await?;
                let listed = serde_json::from_str::<Vec<String>>(reply.text()).is_ok();
                self.expect(listed && !reply.is_tool_error(), "locks lists the locks held", &reply);
            }
            Kind::Reindex => {
                let collection = self.unique("c");
                let arguments = json!({"collection": collection, "total": 80, "step_ms": 20});
                let reply = self.call("reindex", arguments, true).await?;
                let done = reply.text() == format!("Reindexed 80 documents in {collection}");
                self.expect(done && !reply.progress.is_empty(), "reindex with progress", &reply);
            }
            Kind::ReindexIdle => {
                // One 800 ms step without progress, over the 500 ms idle timeout.
                let collection = self.unique("idle");
                let arguments = json!({"collection": collection, "total": 40, "step_ms": 800});
                let reply = self.call("reindex", arguments, false).await?;
                self.expect(stop_of(&reply) == Some("idle-timeout"), "reindex past its idle timeout", &reply);
                self.tally.lock().unwrap().idle_stopped_collections.push(collection);
            }
            Kind::ReindexCancelled => {
                // Ten 50 ms steps, cancelled anywhere from before the first to after the last.
                let collection = self.unique("cancel");
                let arguments = json!({"collection": collection, "total": 400, "step_ms": 50});
                let after = self.rng.millis(600);
                match self.call_then_cancel("reindex", arguments, after).await? {
                    Some(reply) => {
                        let done = reply.text() == format!("Reindexed 400 documents in {collection}");
                        self.expect(done, "a reindex answered before its cancel completed", &reply);
                    }
                    None => {
                        self.tally.lock().unwrap().cancelled_collections.insert(collection);
                    }
                }
            }
            Kind::ParkCancelled => {
                let after = self.rng.millis(500);
                if let Some(reply) = self.call_then_cancel("park", json!({"ms": 10_000}), after).await? {
                    self.violation(format!(
                        "park(10 s) answered within {after:?}, before its cancel: {}",
                        clip(&reply.message.to_string())
                    ));
                }
            }
            Kind::ParkTimeout => {
                let reply = self.call("park", json!({"ms": 5_000}), false).await?;
                self.expect(
                    stop_of(&reply) == Some("max-duration"),
                    "park past its 1 s maximum duration",
                    &reply,
                );
            }
            Kind::HoldFiles => {
                let reply = self.call("hold_files", json!({"count": 1000, "hold_ms": 100}), false).await?;
                self.expect(reply.is_result(), "hold_files gets a tool result", &reply);
            }
            Kind::OpenStreams => {
                let reply = self.call("open_streams", json!({"count": 200, "hold_ms": 100}), false).await?;
                self.expect(reply.is_result(), "open_streams gets a tool result", &reply);
            }
            Kind::ListDir => {
                let reply = self.call("list_dir", json!({"times": 100, "hold_ms": 100}), false).await?;
                self.expect(reply.is_result(), "list_dir gets a tool result", &reply);
            }
            Kind::AllocMb => {
                let reply = self.call("alloc_mb", json!({"mb": 64}), false).await?;
                self.expect(
                    stop_of(&reply) == Some("out-of-memory"),
                    "alloc_mb(64) over a 16 MiB limit",
                    &reply,
                );
            }
            Kind::Symlink => {
                let link = self.unique("escape");
                let targets = ["/etc/passwd", "../../../../../../../../etc/passwd", "/"];
                let target = targets[self.rng.below(targets.len() as u64) as usize];
                let reply = self.call("symlink", json!({"target": target, "link": link}), false).await?;
                self.expect(reply.is_result(), "symlink gets a tool result", &reply);
                let reply = self.call("read_text", json!({"path": format!("/data/{link}")}), false).await?;
                let refused = reply.is_tool_error() && !reply.text().contains("root:");
                self.expect(refused, &format!("reading through a link to {target} fails"), &reply);
            }
            Kind::ReadPasswd => {
                let reply = self.call("read_text", json!({"path": "/etc/passwd"}), false).await?;
                let refused = reply.is_tool_error() && !reply.text().contains("root:");
                self.expect(refused, "read_text(/etc/passwd) fails", &reply);
            }
            Kind::UnknownTool => {
                let reply = self.call("no_such_tool", json!({}), false).await?;
                self.expect(reply.rpc_error() == Some(-32602), "an unknown tool is invalid params", &reply);
            }
            Kind::Malformed | Kind::InvalidWithId | Kind::Oversized => self.garbage(kind).await?,
        }
        Ok(())
    }

    async fn garbage(&mut self, kind: Kind) -> Result<()> {
        self.tally.lock().unwrap().requests += 1;
        match (&mut self.transport, kind) {
            (Transport::Stdio(client), Kind::Malformed) => {
                client.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\n").await?;
                self.tally.lock().unwrap().expected_null_id_errors += 1;
            }
            (Transport::Stdio(client), Kind::Oversized) => {
                let mut line = vec![b'x'; 5 << 20];
                line.push(b'\n');
                client.send_raw(&line).await?;
                self.tally.lock().unwrap().expected_null_id_errors += 1;
            }
            (Transport::Stdio(client), Kind::InvalidWithId) => {
                let reply =
                    client.request_with(|id| json!({"jsonrpc": "2.0", "id": id, "method": 7})).await?;
                self.tally.lock().unwrap().answers += 1;
                self.expect(reply.rpc_error() == Some(-32600), "a request whose method is a number", &reply);
            }
            (Transport::Http(client), Kind::Malformed) => {
                let answer = client.post("tools/list", None, b"{nope").await?;
                let reply = crate::client::reply_from(&answer, 0)?;
                self.tally.lock().unwrap().answers += 1;
                self.expect(
                    answer.status == 400 && reply.rpc_error() == Some(-32700),
                    "unparsable JSON over HTTP",
                    &reply,
                );
            }
            (Transport::Http(client), Kind::InvalidWithId) => {
                let answer =
                    client.post("tools/list", None, br#"{"jsonrpc":"2.0","id":5,"method":7}"#).await?;
                let reply = crate::client::reply_from(&answer, 5)?;
                self.tally.lock().unwrap().answers += 1;
                self.expect(
                    answer.status == 400 && reply.rpc_error() == Some(-32600),
                    "a numeric method over HTTP",
                    &reply,
                );
            }
            (Transport::Http(client), Kind::Oversized) => {
                let answer = client.post_oversized(2 << 20).await?;
                self.tally.lock().unwrap().answers += 1;
                if answer.status != 413 {
                    self.violation(format!(
                        "a 2 MiB body over a 1 MiB limit got HTTP {}, not 413",
                        answer.status
                    ));
                }
            }
            _ => unreachable!("{kind:?} is not garbage"),
        }
        Ok(())
    }

    /// The spin lane: `spin` never checks for cancellation, so only a hard stop ends it,
    /// at its 300 ms maximum duration or after a cancel. One at a time (spin takes the
    /// lock `spin`), one every `every`, so spinning guests take a share of the CPU
    /// without owning it.
    pub async fn run_spinner(mut self, until: Instant, every: Duration) -> Result<()> {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Instant::now() < until {
            interval.tick().await;
            if self.rng.below(10) < 3 {
                let after = self.rng.millis(200);
                *self.tally.lock().unwrap().steps.entry("SpinCancelled".into()).or_default() += 1;
                if let Some(reply) = self.call_then_cancel("spin", json!({"seconds": 30}), after).await? {
                    self.note_spin(&reply, "a spin answered before its cancel");
                }
            } else {
                *self.tally.lock().unwrap().steps.entry("SpinTimeout".into()).or_default() += 1;
                let reply = self.call("spin", json!({"seconds": 30}), false).await?;
                self.note_spin(&reply, "spin past its 300 ms maximum duration");
            }
        }
        Ok(())
    }

    fn note_spin(&self, reply: &Reply, what: &str) {
        // The lock of a spin stopped by a cancel is released by its cleanup, which may still
        // be running when the next spin starts: that refusal is the tool's own, and counted.
        if reply.is_tool_error() && reply.text().contains("spin is locked by another call") {
            self.tally.lock().unwrap().spin_locked += 1;
        } else {
            self.expect(stop_of(reply) == Some("max-duration"), what, reply);
        }
    }

    /// The prober: one echo every `every` until `until`; its latencies.
    pub async fn run_prober(mut self, until: Instant, every: Duration) -> Result<Vec<Probe>> {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut samples = Vec::new();
        while Instant::now() < until {
            interval.tick().await;
            let text = self.unique("probe");
            let started = Instant::now();
            let reply = self.call("echo", json!({"text": text}), false).await?;
            samples.push(Probe { latency: started.elapsed(), queued: reply.queued });
            self.expect(reply.text() == text, "the prober's echo", &reply);
        }
        if let Transport::Http(client) = &mut self.transport {
            client.close();
        }
        Ok(samples)
    }

    /// One tools/call by a lane made for it (setup and end-of-run checks).
    pub async fn call_once(
        target: &Target,
        tally: &SharedTally,
        tool: &str,
        arguments: Value,
    ) -> Result<Reply> {
        let mut lane = Lane::new(target, "once".into(), 1, tally.clone());
        let reply = lane.call(tool, arguments, false).await;
        if let Transport::Http(client) = &mut lane.transport {
            client.close();
        }
        reply
    }
}

/// KiB each slot probe's call writes: more than the 256 KiB of a memory the pool keeps
/// resident in a freed slot (`runtime/engine.rs`), so that the probe after the warm-up
/// leaves every slot it takes as full as the load's heavier calls will, and the baseline
/// is taken with them so. With `park`'s few KiB, the load's calls filled those slots
/// further and stdio's memory check ended 6-10 % up (its bound is 10 %), the pool's
/// mappings most of it.
const PROBE_TOUCH_KB: usize = 1024;

/// Take every call slot at once: `SLOTS` calls of `park`, each longer than the queue
/// timeout. A slot still held by an earlier call (or its cleanup) leaves one of them
/// waiting past the timeout, refused as busy. Returns the problems seen.
pub async fn probe_slots(target: &Target, tally: &SharedTally) -> Result<Vec<String>> {
    let park = crate::server::QUEUE_TIMEOUT + Duration::from_millis(200);
    let mut calls = Vec::new();
    for index in 0..SLOTS {
        let (target, tally) = (target.clone(), tally.clone());
        calls.push(tokio::spawn(async move {
            let mut lane = Lane::new(&target, format!("probe{index}"), 1, tally);
            let arguments = json!({"ms": park.as_millis() as u64, "touch_kb": PROBE_TOUCH_KB});
            let reply = lane.call("park", arguments, false).await;
            if let Transport::Http(client) = &mut lane.transport {
                client.close();
            }
            reply
        }));
    }
    let mut problems = Vec::new();
    for call in calls {
        let reply = call.await??;
        if reply.text() != format!("parked {} ms", park.as_millis()) {
            problems.push(clip(reply.text()));
        }
    }
    Ok(problems)
}

/// One probe's echo: from the prober's call to its answer, and how much of that it
/// waited behind the client's own other messages (stdio's shared stdin).
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub latency: Duration,
    pub queued: Duration,
}

/// p-quantile of `samples` (sorted in place).
pub fn quantile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}
