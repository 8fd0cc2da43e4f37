//! # The stop sequence
//!
//! This module is the one owner of how a call runs and how it is stopped. A call goes
//! through at most three phases, all inside [`Call::run`]:
//!
//! 1. **Running.** A fresh `Store` and instance (made on demand, or ahead as a spare,
//!    see `spare.rs`, and bound to this call) run the guest's `call`. The driver waits
//!    for the result, a stop request (the caller's [`CallHandle::cancel`], the runtime's
//!    shutdown) or a deadline (idle timeout, which progress pushes back; maximum duration).
//! 2. **Grace.** The stop is visible to the guest: `cancelled()` is true and `time-left()`
//!    is zero. A cooperative guest returns within the tool's grace period.
//! 3. **Hard stop.** Grace is over: the hard-stop flag is set and the epoch is bumped (the
//!    "kick"), so a guest computing while grace ends traps at its next epoch check, within
//!    microseconds; the driver, polling with `biased` priority for the stop, drops the
//!    call's future, which unwinds a guest parked in a host call (a WASI sleep or poll) or
//!    suspended at an epoch yield (never resumed: it would run on to the next tick).
//!
//! The store is never entered again after a trap or a drop (wasmtime poisons it). A
//! stopped call's store is dropped before its cleanup runs, even when the guest returned
//! within its grace, so nothing the call started (an outgoing request, a stream's task)
//! goes on beside the cleanup. If the
//! call was stopped or trapped, `cleanup` then runs exactly once, in a fresh store and
//! instance with the same capabilities and its own budget, bounded the same way. Its
//! failures are logged and reported, never retried. The call's permit in the instance
//! pool is released only after cleanup, so pool usage always returns to its baseline. (A
//! call whose guest ran a round and asked its client for input, then was stopped before
//! the next round, holds no permit: it is made only to run its cleanup,
//! [`Call::stop_unstarted`].)
//! A call that returned may hand its instance's teardown to the caller ([`Teardown`]), to
//! be done once the answer is out.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use wasmtime::component::ResourceTableError;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::bindings::{self, CleanupContext, Content, StopReason};
use super::component::LoadedComponent;
use super::control::{CallControl, LogLevel, LogLine, Progress, StopRequest};
use super::events::{CallEnded, CallOutcome, CallTags, CleanupEnded, CleanupResult, Observers, StopPath};
use super::features::{FeatureAnswer, FeatureRequest};
use super::guest::GuestState;
use super::input::{InputRequired, InputRound, Reply, check_input_required, input_required_size};
use super::limits::ToolLimits;
use super::schema::Check;
use super::spare::Refill;

/// How a call ended. Every call ends in exactly one.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The tool returned a result (which may itself carry `is_error`).
    Completed(ToolResult),
    /// The tool returned an error message.
    ToolError(String),
    /// The caller cancelled the call.
    Cancelled,
    /// A timeout stopped the call.
    TimedOut(Timeout),
    /// The guest trapped; the trap message.
    Trapped(String),
    /// The guest trapped after the tool's memory limit refused to grow its memory.
    OutOfMemory,
    /// The result exceeded the tool's result size limit.
    ResultTooLarge { bytes: usize, limit: usize },
    /// The tool returned something that breaks the contract (e.g. structured output that
    /// is not JSON, or does not match its output schema).
    InvalidResult(String),
    /// The runtime shut down while the call ran.
    Shutdown,
    /// The host could not start the instance (e.g. the data directory is missing).
    StartFailed(String),
    /// The guest answered a request for a resource, a prompt or a completion
    /// ([`super::Runtime::feature_in`]).
    Answered(FeatureAnswer),
    /// The guest (a 0.2.0 tool call or prompt get) needs input from the client: these
    /// requests (checked against the bounds of [`super::input`]) and its state. The
    /// caller asks the client and runs the next round ([`Call::with_input`]).
    InputRequired(InputRequired),
}

impl Outcome {
    /// The reason handed to `cleanup`, for the outcomes after which cleanup runs.
    fn stop_reason(&self) -> Option<StopReason> {
        Some(match self {
            Outcome::Cancelled => StopReason::Cancelled,
            Outcome::TimedOut(Timeout::Idle(_)) => StopReason::IdleTimeout,
            Outcome::TimedOut(Timeout::MaxDuration(_)) => StopReason::MaxDuration,
            Outcome::Trapped(message) => StopReason::Trapped(message.clone()),
            Outcome::OutOfMemory => StopReason::OutOfMemory,
            Outcome::Shutdown => StopReason::Shutdown,
            _ => return None,
        })
    }

    /// The outcome in the fixed set operators count by.
    pub fn kind(&self) -> CallOutcome {
        match self {
            Outcome::Completed(result) if !result.is_error => CallOutcome::Ok,
            Outcome::Answered(_) => CallOutcome::Ok,
            Outcome::InputRequired(_) => CallOutcome::InputRequired,
            Outcome::Completed(_) | Outcome::ToolError(_) | Outcome::InvalidResult(_) => {
                CallOutcome::ToolError
            }
            Outcome::Cancelled | Outcome::Shutdown => CallOutcome::Cancelled,
            Outcome::TimedOut(_) => CallOutcome::TimedOut,
            Outcome::Trapped(_) | Outcome::StartFailed(_) => CallOutcome::Trapped,
            Outcome::OutOfMemory | Outcome::ResultTooLarge { .. } => CallOutcome::Limit,
        }
    }
}

/// Marks an instantiation that failed without a trap: the host could not make the
/// instance, so the guest never ran ([`Outcome::StartFailed`]).
#[derive(Debug)]
struct NotStarted;

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the instance could not be made")
    }
}

/// Which timeout stopped a call, with its configured length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// No progress for this long.
    Idle(Duration),
    /// The call ran this long.
    MaxDuration(Duration),
}

/// A tool's result, with its structured output parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub content: Vec<Content>,
    pub structured: Option<serde_json::Value>,
    pub is_error: bool,
}

/// How a cleanup went.
#[derive(Debug, Clone, PartialEq)]
pub enum CleanupOutcome {
    Completed,
    /// It trapped (or could not start); the message.
    Failed(String),
    /// It ran past its budget and was stopped.
    TimedOut,
}

/// Everything known about a finished call.
#[derive(Debug, Clone)]
pub struct CallReport {
    pub call_id: u64,
    pub tool: String,
    pub outcome: Outcome,
    /// Whether the guest had to be stopped by force (it did not return within grace).
    pub hard_stopped: bool,
    /// When the hard stop began (grace ran out), if it did.
    pub hard_stop_at: Option<Instant>,
    /// When the guest stopped running: the moment its future returned or was dropped.
    pub stopped_at: Instant,
    /// How the guest stopped running.
    pub stop_path: StopPath,
    /// The cleanup that followed, if the outcome called for one.
    pub cleanup: Option<CleanupReport>,
    /// The last note the call left for a cleanup, when it ended asking for input: the
    /// next round starts with it (so does the cleanup of a call stopped before that round).
    pub cleanup_note: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct CleanupReport {
    pub outcome: CleanupOutcome,
    /// When the cleanup's fresh instance was about to be created.
    pub started_at: Instant,
    /// How long it ran, from then to its end.
    pub duration: Duration,
}

impl CleanupOutcome {
    /// The outcome in fixed names.
    pub fn kind(&self) -> CleanupResult {
        match self {
            CleanupOutcome::Completed => CleanupResult::Completed,
            CleanupOutcome::Failed(_) => CleanupResult::Failed,
            CleanupOutcome::TimedOut => CleanupResult::TimedOut,
        }
    }
}

/// Lets a caller watch and cancel a running call. Cheap to clone.
#[derive(Clone)]
pub struct CallHandle {
    control: Arc<CallControl>,
}

impl CallHandle {
    /// Ask the call to stop: the guest sees it at once, and after the grace period it is
    /// stopped by force. Idempotent; a cancel after the call finished does nothing.
    pub fn cancel(&self) {
        self.control.request_stop(StopRequest::Cancel);
    }

    /// The latest progress report. Only strictly increasing reports get through, and bursts
    /// collapse to the latest one.
    pub fn progress(&self) -> watch::Receiver<Option<Progress>> {
        self.control.subscribe_progress()
    }

    /// From now on, hold the guest's log lines at or above `threshold` for the caller
    /// (at most [`CLIENT_LOG_QUEUE`](super::CLIENT_LOG_QUEUE) at once); none are held
    /// unless asked. The operator's log gets every line either way.
    pub fn forward_logs(&self, threshold: LogLevel) {
        self.control.forward_logs(threshold);
    }

    /// The oldest log line held for the caller.
    pub fn next_log(&self) -> Option<LogLine> {
        self.control.next_log()
    }

    /// Whether a log line is held for the caller.
    pub fn has_logs(&self) -> bool {
        self.control.has_logs()
    }

    /// Resolves once a line was held since the last time it resolved (one reader only).
    pub async fn log_queued(&self) {
        self.control.log_queued().await;
    }

    /// Lines the guest logged at a forwarded level that found the queue full.
    pub fn dropped_logs(&self) -> u64 {
        self.control.dropped_logs()
    }
}

/// A finished call's instance and its slot in the pool, freed when this drops (the store
/// first, then the permit, so pool usage never shows a free slot that is still in use).
///
/// The call's [`CallEnded`] goes to the observers when this drops, which dispatch does
/// once the answer is written (stdio) or handed to the response (HTTP): no observer
/// delays an answer.
pub struct Teardown {
    store: Option<Store<GuestState>>,
    /// Makes the component's next spare instance; set when the guest returned normally.
    refill: Option<Refill>,
    ended: Option<(CallEnded, Observers)>,
    _permit: Option<(OwnedSemaphorePermit, super::fair::FairPermit)>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some((event, observers)) = self.ended.take() {
            observers.emit(&event);
        }
    }
}

impl Teardown {
    /// Free the instance, then make the component's next spare instance (see `spare.rs`)
    /// while still holding the call's pool slot, so spares never outnumber free slots.
    pub async fn finish(mut self) {
        drop(self.store.take());
        if let Some(refill) = self.refill.take() {
            refill.run().await;
        }
    }
}

/// A call that holds a slot in the instance pool and is ready to run.
pub struct Call {
    pub(crate) id: u64,
    pub(crate) engine: Engine,
    pub(crate) ticker: Arc<super::engine::Ticker>,
    pub(crate) component: Arc<LoadedComponent>,
    /// The loaded tool's own name (`ToolSchemas::name`).
    pub(crate) tool: Arc<str>,
    pub(crate) limits: ToolLimits,
    pub(crate) arguments: String,
    pub(crate) control: Arc<CallControl>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Its slot in the pool; none for a call made only to run a cleanup.
    pub(crate) permit: Option<(OwnedSemaphorePermit, super::fair::FairPermit)>,
    /// The tenant's own file grants (its data directory), when the component has one per
    /// tenant; the component's otherwise.
    pub(crate) files: Option<Arc<super::files::FileGrants>>,
    pub(crate) cleanup_permits: Arc<Semaphore>,
    /// For a call that holds no slot (made only to run its cleanup, stopped between
    /// rounds): the gate of the cleanup capacity such calls share, and the tenant it waits as.
    pub(crate) unslotted_cleanups: Option<(Arc<super::fair::FairSlots>, Arc<str>)>,
    pub(crate) spares: Arc<super::spare::SpareBudget>,
    pub(crate) tags: CallTags,
    /// How long the call waited for its slot.
    pub(crate) queue_wait: Duration,
    pub(crate) observers: Observers,
    /// Where the component goes when the guest said `lists-changed` (relist.rs).
    pub(crate) relists: Arc<super::relist::Relists>,
    /// The size of what the guest returned (result or error message), once it has.
    pub(crate) result_bytes: AtomicUsize,
    /// The guest asked for input, and its request was refused (past a bound): the call
    /// is given up where the guest expected another round, so its cleanup runs.
    pub(crate) asking_refused: AtomicBool,
    /// What the guest is asked instead of a tool call (then `tool` names the method).
    pub(crate) feature: Option<FeatureRequest>,
    /// The round of input this run is (the first, unless [`Call::with_input`] said).
    pub(crate) input: InputRound,
}

/// What the guest returned: a tool's result, the answer to a [`FeatureRequest`], or a
/// request for input.
enum Returned {
    Tool(bindings::CallResult),
    Feature(FeatureAnswer),
    InputRequired(InputRequired),
}

impl Call {
    /// The call's id, unique while the runtime lives.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name of the component that serves it.
    pub fn component_name(&self) -> &str {
        &self.component.name
    }

    /// The name of the component it runs, to keep beyond the call.
    pub fn component(&self) -> Arc<str> {
        Arc::clone(&self.component.name)
    }

    /// The limits it runs under.
    pub fn limits(&self) -> &ToolLimits {
        &self.limits
    }

    pub fn handle(&self) -> CallHandle {
        CallHandle { control: self.control.clone() }
    }

    /// Run this call as round `input` of a call that asked for input: the guest gets the
    /// client's answers and its state back (and what the client can be asked, which the
    /// first round needs too: [`InputRound::first`]). Everything else is as for any call:
    /// a fresh instance, the tool's limits, the stop sequence and cleanup of this module.
    /// A 0.1.0 or plain component ignores it.
    pub fn with_input(mut self, input: InputRound) -> Self {
        if let Some(note) = input.cleanup_note.clone() {
            // The last note the call left, in a round before: until this round leaves one.
            self.control.set_note(note);
        }
        if let Some(at) = input.call_ends_by {
            self.control.end_by(at);
        }
        self.input = input;
        self
    }

    /// Run the call to its one outcome, then its cleanup if it needs one.
    pub async fn run(self) -> CallReport {
        self.run_deferring_teardown().await.0
    }

    /// [`Call::run`], except that the finished instance is torn down only when the returned
    /// [`Teardown`] drops. Hold it until the answer is out: resetting the instance's pool
    /// slot is a good part of a short call's cost, and the client need not wait for it.
    pub async fn run_deferring_teardown(self) -> (CallReport, Teardown) {
        let _ticking = self.ticker.running();
        let (outcome, hard_stopped, stop_path, mut store) = self.drive().await;
        let stopped_at = Instant::now();
        // Whether the instance ended sound (a trapped one is dropped in `drive`), so a spare
        // may replace the one the call may have used.
        let sound = store.is_some();
        if self.control.memory.grew.load(Ordering::Relaxed)
            && !self.component.growth_hinted.swap(true, Ordering::Relaxed)
        {
            tracing::info!(
                component = %self.component.name,
                "a call grew the component's memory; every call that does pays for page-protection \
                 changes: link it with more initial memory (cordon-guest's docs, \"Memory\")"
            );
        }
        // A round whose request for input was refused is given up as a stopped call is: the
        // guest may have taken something (a lock, a reservation) for the round it asked.
        let cleanup_reason = outcome
            .stop_reason()
            .or_else(|| self.asking_refused.load(Ordering::Relaxed).then_some(StopReason::Cancelled));
        if cleanup_reason.is_some() {
            // A stopped call's instance goes before its cleanup runs, even when the guest
            // returned within its grace: what its table owns (outgoing requests and their
            // uploads, file streams' tasks) must not go on beside a cleanup that may be
            // undoing it, and its descriptors and host memory are given back first.
            drop(store.take());
        }
        let cleanup = match cleanup_reason {
            Some(reason) if self.component.pre.has_cleanup() => Some(self.cleanup(reason).await),
            Some(reason) => {
                tracing::info!(component = %self.component.name, tool = %self.tool, call = self.id, reason = %reason_name(&reason), "no cleanup to run: a plain component has none");
                None
            }
            None => None,
        };
        // Whatever the outcome: the state its lists come from may have changed anyway.
        if self.control.lists_changed() {
            self.relists.request(&self.component.name);
        }
        // A round that asks for input hands its note on to the next (or to the cleanup of
        // a call stopped before it).
        let note_left =
            matches!(outcome, Outcome::InputRequired(_)).then(|| self.control.take_note()).flatten();
        let (mut report, ended) = self.report(outcome, hard_stopped, stop_path, stopped_at, cleanup);
        report.cleanup_note = note_left;
        // A spare is made with the component's own grants: never for a tenant's.
        let refill = (sound && self.files.is_none()).then(|| Refill {
            engine: self.engine.clone(),
            ticker: self.ticker.clone(),
            component: self.component.clone(),
            limits: self.limits.clone(),
            budget: self.spares.clone(),
            shutdown: self.shutdown.clone(),
        });
        (report, Teardown { store, refill, ended, _permit: self.permit })
    }

    /// Stop this call before its guest runs, with `outcome` (a cancel, a timeout, shutdown,
    /// or no slot for its next round: its guest ran a round and asked the client for
    /// input), and run the tool's cleanup as after any stop, in a fresh instance. No
    /// instance is made for the call itself.
    pub async fn stop_unstarted(self, outcome: Outcome) -> (CallReport, Teardown) {
        let stopped_at = Instant::now();
        let cleanup = match outcome.stop_reason() {
            Some(reason) if self.component.pre.has_cleanup() => Some(self.cleanup(reason).await),
            _ => None,
        };
        let (report, ended) = self.report(outcome, false, StopPath::Cooperative, stopped_at, cleanup);
        (report, Teardown { store: None, refill: None, ended, _permit: self.permit })
    }

    /// The call's report, and the event its observers get (none when there are none).
    fn report(
        &self,
        outcome: Outcome,
        hard_stopped: bool,
        stop_path: StopPath,
        stopped_at: Instant,
        cleanup: Option<CleanupReport>,
    ) -> (CallReport, Option<(CallEnded, Observers)>) {
        let ended = (!self.observers.is_empty())
            .then(|| (self.ended(&outcome, stop_path, stopped_at, cleanup.as_ref()), self.observers.clone()));
        let report = CallReport {
            call_id: self.id,
            hard_stop_at: self.control.hard_stop_at(),
            tool: self.tool.to_string(),
            outcome,
            hard_stopped,
            stopped_at,
            stop_path,
            cleanup,
            cleanup_note: None,
        };
        (report, ended)
    }

    /// The event observers get for this call.
    fn ended(
        &self,
        outcome: &Outcome,
        stop_path: StopPath,
        stopped_at: Instant,
        cleanup: Option<&CleanupReport>,
    ) -> CallEnded {
        let stop_latency = match stop_path {
            StopPath::Returned => None,
            // With no request, the maximum duration's backstop stopped it.
            _ => self.control.stop_requested_at().or_else(|| self.control.max_deadline()),
        };
        CallEnded {
            tags: self.tags.clone(),
            call_id: Some(self.id),
            component: Some(self.component.name.clone()),
            tool: Some(self.tool.clone()),
            outcome: outcome.kind(),
            refusal: None,
            stop_path: Some(stop_path),
            queue_wait: self.queue_wait,
            duration: stopped_at.saturating_duration_since(self.control.started()),
            stop_latency: stop_latency.map(|since| stopped_at.saturating_duration_since(since)),
            cleanup: cleanup
                .map(|cleanup| CleanupEnded { result: cleanup.outcome.kind(), duration: cleanup.duration }),
            argument_bytes: self.arguments.len() + self.input.size(),
            result_bytes: self.result_bytes.load(Ordering::Relaxed),
        }
    }

    /// Phases 1 to 3; returns how the guest stopped, and the store too when the guest
    /// returned (it is dropped here after a trap or a stop).
    async fn drive(&self) -> (Outcome, bool, StopPath, Option<Store<GuestState>>) {
        let limits = &self.limits;
        let backstop = self.control.max_deadline().map(|at| at + limits.grace);
        // A spare instance made ahead (spare.rs) is bound to this call; otherwise a fresh
        // one is made now.
        let spare = match self.files {
            Some(_) => None,
            None => self.component.spare.take(limits),
        };
        let (mut store, spare) = match spare {
            Some((mut store, instance)) => {
                store.data_mut().bind(limits, self.control.clone());
                arm(&mut store, limits, backstop);
                (store, Some(instance))
            }
            None => (
                new_store_with(
                    &self.engine,
                    &self.component,
                    self.files.as_ref().or(self.component.files.as_ref()),
                    limits,
                    self.control.clone(),
                    backstop,
                ),
                None,
            ),
        };
        store.data_mut().begin_call(&self.tool, limits);
        let pre = self.component.pre.clone();
        let (tool, arguments, feature, input) =
            (&self.tool, &self.arguments, self.feature.as_ref(), &self.input);
        let store_ref = &mut store;
        let mut call = Box::pin(async move {
            let instance = match spare {
                Some(instance) => instance,
                // A failure that is no trap is the host's (a store limit, the pool): the
                // guest never ran, and no cleanup follows.
                None => pre.instantiate(&mut *store_ref).await.map_err(|error| {
                    match error.downcast_ref::<Trap>() {
                        Some(_) => error,
                        None => error.context(NotStarted),
                    }
                })?,
            };
            let returned = match feature {
                None => {
                    instance.call(&pre, store_ref, tool, arguments, input).await?.map(|reply| match reply {
                        bindings::v2::CallReply::Done(result) => Returned::Tool(result),
                        bindings::v2::CallReply::NeedsInput(input) => Returned::InputRequired(input),
                    })
                }
                Some(request) => {
                    instance.serve_feature(store_ref, request, input).await?.map(|reply| match reply {
                        Reply::Done(answer) => Returned::Feature(answer),
                        Reply::NeedsInput(input) => Returned::InputRequired(input),
                    })
                }
            };
            Ok::<_, wasmtime::Error>(returned)
        });

        // Phase 1: running.
        let control = self.control.clone();
        let mut shutdown = self.shutdown.clone();
        let result = loop {
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                () = control.wake.notified() => break None,
                () = shutdown_signalled(&mut shutdown) => {
                    control.request_stop(StopRequest::Shutdown);
                    break None;
                }
                // Before the deadline: a call that finishes in its first poll never
                // registers a timer, which would cost a wake-up of the timer driver.
                result = &mut call => break Some(result),
                () = sleep_until(deadline) => {
                    if let Some(request) = self.expired_deadline() {
                        control.request_stop(request);
                        break None;
                    }
                    // Progress moved the idle deadline; wait again.
                }
            }
        };

        // Phase 2: grace. A separate task kicks the epoch when grace ends, so that a
        // spinning guest traps within microseconds rather than at its next tick.
        let result = match result {
            Some(result) => Some(result),
            None => {
                let grace = limits.grace;
                let kicker = tokio::spawn(kick_after(grace, self.control.clone(), self.engine.clone()));
                let result = tokio::select! {
                    biased;
                    () = tokio::time::sleep(grace) => None,
                    result = &mut call => Some(result),
                };
                kicker.abort();
                result
            }
        };

        // Phase 3: hard stop. Dropping the future unwinds the guest wherever it is parked.
        let result = match result {
            Some(result) => result,
            None => {
                self.control.begin_hard_stop();
                // Dropped where it is suspended: at an epoch yield (it was computing, and
                // grace ended while it waited for its turn) or in a host call. Not resumed:
                // wasmtime sets the next deadline only after the yield, a tick ahead, so a
                // resumed guest would run on (host calls included) until the ticker's next
                // increment before it trapped.
                let stop_path = if self.control.is_at_epoch_yield() {
                    StopPath::EpochTrap
                } else {
                    StopPath::DroppedInHostCall
                };
                drop(call);
                return (self.stopped_outcome(), true, stop_path, None);
            }
        };
        drop(call);
        let hard_stopped = self.control.is_hard_stopping();
        let stop_path = match &result {
            Err(error) if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => StopPath::EpochTrap,
            _ if self.control.stop_request().is_some() => StopPath::Cooperative,
            _ => StopPath::Returned,
        };
        // A trapped guest's last line on stderr (a Rust tool's panic message) explains
        // the trap, to the client and to the cleanup.
        let last_words = if result.is_err() { store.data().stderr_last_line() } else { None };
        // A trapped store is poisoned: no reason to keep it.
        let store = result.is_ok().then_some(store);
        (self.classify(result, last_words).await, hard_stopped, stop_path, store)
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.control.idle_deadline(), self.control.max_deadline()) {
            (Some(idle), Some(max)) => Some(idle.min(max)),
            (idle, max) => idle.or(max),
        }
    }

    fn expired_deadline(&self) -> Option<StopRequest> {
        let now = Instant::now();
        if self.control.max_deadline().is_some_and(|max| now >= max) {
            Some(StopRequest::MaxDuration)
        } else if self.control.idle_deadline().is_some_and(|idle| now >= idle) {
            Some(StopRequest::IdleTimeout)
        } else {
            None
        }
    }

    /// The outcome of a call stopped at the request of someone outside the guest.
    fn stopped_outcome(&self) -> Outcome {
        let limits = &self.limits;
        match self.control.stop_request() {
            Some(StopRequest::Cancel) => Outcome::Cancelled,
            Some(StopRequest::IdleTimeout) => {
                Outcome::TimedOut(Timeout::Idle(limits.idle_timeout.unwrap_or_default()))
            }
            Some(StopRequest::Shutdown) => Outcome::Shutdown,
            // No request: the epoch backstop fired at the maximum duration.
            Some(StopRequest::MaxDuration) | None => {
                Outcome::TimedOut(Timeout::MaxDuration(limits.max_duration.unwrap_or_default()))
            }
        }
    }

    async fn classify(
        &self,
        result: wasmtime::Result<Result<Returned, String>>,
        last_words: Option<String>,
    ) -> Outcome {
        let stop_requested = self.control.stop_request().is_some();
        match result {
            Ok(Ok(Returned::Tool(result))) => self.check_result(result).await,
            // Asking after a stop request (a cancel, a timeout in grace): stopped, so its
            // cleanup runs, and no round follows.
            Ok(Ok(Returned::InputRequired(_))) if stop_requested => self.stopped_outcome(),
            Ok(Ok(Returned::InputRequired(input))) => {
                let (bytes, limit) =
                    (self.note_result_bytes(input_required_size(&input)), self.limits.result_bytes);
                let refused = if bytes > limit {
                    Outcome::ResultTooLarge { bytes, limit }
                } else {
                    match check_input_required(&input) {
                        Ok(()) => return Outcome::InputRequired(input),
                        Err(problem) => Outcome::InvalidResult(problem),
                    }
                };
                self.asking_refused.store(true, Ordering::Relaxed);
                refused
            }
            Ok(Ok(Returned::Feature(answer))) => {
                let (bytes, limit) = (self.note_result_bytes(answer.size()), self.limits.result_bytes);
                if bytes > limit {
                    Outcome::ResultTooLarge { bytes, limit }
                } else if let Some(problem) = answer.uri_problem() {
                    Outcome::InvalidResult(problem)
                } else {
                    Outcome::Answered(answer)
                }
            }
            // An error after a stop request is the guest's cooperative way out.
            Ok(Err(_)) if stop_requested => self.stopped_outcome(),
            Ok(Err(message)) => {
                let (bytes, limit) = (self.note_result_bytes(message.len()), self.limits.result_bytes);
                if bytes > limit {
                    Outcome::ResultTooLarge { bytes, limit }
                } else {
                    Outcome::ToolError(message)
                }
            }
            Err(error) => {
                // A stop explains the trap even when the guest was refused memory earlier
                // (and carried on): the caller asked for it, and cleanup is told so.
                if stop_requested || error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    self.stopped_outcome()
                } else if self.control.memory.refused.load(Ordering::Relaxed) {
                    Outcome::OutOfMemory
                } else if error.downcast_ref::<NotStarted>().is_some() {
                    Outcome::StartFailed(format!("{:#}", error.root_cause()))
                } else {
                    let message = trap_message(&error, &self.limits);
                    Outcome::Trapped(match last_words {
                        Some(line) => format!("{message}; its last line on stderr: {line}"),
                        None => message,
                    })
                }
            }
        }
    }

    /// Keep the size of what the guest returned for the call's event; returns it.
    fn note_result_bytes(&self, bytes: usize) -> usize {
        self.result_bytes.store(bytes, Ordering::Relaxed);
        bytes
    }

    async fn check_result(&self, result: bindings::CallResult) -> Outcome {
        let limit = self.limits.result_bytes;
        let bytes = self.note_result_bytes(result_size(&result));
        if bytes > limit {
            return Outcome::ResultTooLarge { bytes, limit };
        }
        if let Some(problem) = super::features::uri_problem(&result.content) {
            return Outcome::InvalidResult(problem);
        }
        // Parsed, a small text of many values takes many times its length (4 MiB of
        // `[0,0,…]` is 64 MiB as a `Value`), and a check on a thread of its own takes a copy:
        // the parse is held to the call's host memory before it is built.
        if let Some(text) = result.structured.as_deref() {
            let limit = self.limits.host_memory_bytes;
            match crate::cost::estimate(text.as_bytes()) {
                Ok(estimate) if estimate.bytes > limit => {
                    return Outcome::InvalidResult(format!(
                        "structured output would take about {} bytes of host memory parsed; the call may \
                         hold {limit} (host_memory_kb)",
                        estimate.bytes
                    ));
                }
                Ok(_) => {}
                Err(error) => {
                    return Outcome::InvalidResult(format!("structured output is not JSON: {error}"));
                }
            }
        }
        let structured = match result.structured.as_deref().map(serde_json::from_str::<serde_json::Value>) {
            None => None,
            // Any JSON value (2026-07-28); a 2025-11-25 client is shown objects only
            // (dispatch/answers.rs).
            Some(Ok(value)) => Some(value),
            Some(Err(error)) => {
                return Outcome::InvalidResult(format!("structured output is not JSON: {error}"));
            }
        };
        if let Some(schema) = &self.component.schemas[&*self.tool].output {
            match &structured {
                None if !result.is_error => {
                    return Outcome::InvalidResult(
                        "the tool declares an output schema but returned no structured output".into(),
                    );
                }
                Some(value) => match schema.check(value).await {
                    Check::Valid => {}
                    Check::Invalid(problems) => {
                        return Outcome::InvalidResult(format!(
                            "structured output does not match the output schema: {problems}"
                        ));
                    }
                    Check::Unchecked(reason) => {
                        return Outcome::InvalidResult(format!(
                            "structured output could not be checked against the output schema: {reason}"
                        ));
                    }
                },
                None => {}
            }
        }
        Outcome::Completed(ToolResult { content: result.content, structured, is_error: result.is_error })
    }

    async fn cleanup(&self, reason: StopReason) -> CleanupReport {
        // Epochs must tick while it runs, whichever path stopped the call (one stopped
        // between rounds ran no guest code before): a cleanup that loops is stopped by them.
        let _ticking = self.ticker.running();
        // Cleanup capacity is reserved apart from calls, one slot per call. A call stopped
        // between rounds holds no call slot, so without a bound any number of them could
        // be cleaned up at once: they take a place of `unslotted_cleanups` first (half the
        // capacity, at least one), and the cleanup of a call that holds a slot never waits
        // behind more than that. The places go to tenants in turn, each with its part, as
        // the call slots do (fair.rs): one tenant's flood of them holds at most half, and
        // another tenant's cleanup does not wait behind its queue.
        let _unslotted = match &self.unslotted_cleanups {
            Some((gate, tenant)) => Some(gate.acquire_noting(tenant, None, || {}).await),
            None => None,
        };
        let _permit = self
            .cleanup_permits
            .clone()
            .acquire_owned()
            .await
            .expect("the cleanup semaphore is never closed");
        let started_at = Instant::now();
        let why = reason_name(&reason);
        // A request for a resource, prompt or completion names its method (`tool` holds it).
        let context = CleanupContext {
            call_id: self.id.to_string(),
            tool: self.tool.to_string(),
            arguments: self.arguments.clone(),
            reason,
            note: self.control.take_note(),
        };
        let budget = self.limits.cleanup_budget;
        // The cleanup sees what the call saw: the tenant's data directory, when it has one.
        let files = self.files.as_ref().or(self.component.files.as_ref());
        let outcome = run_cleanup(&self.engine, &self.component, files, &self.limits, context).await;
        let duration = started_at.elapsed();
        // One line per cleanup, whatever its outcome, so an operator (and the soak) can see
        // that each stopped call was cleaned up exactly once.
        match &outcome {
            CleanupOutcome::Completed => {
                tracing::debug!(component = %self.component.name, tool = %self.tool, call = self.id, reason = %why, "cleanup completed");
            }
            CleanupOutcome::Failed(message) => {
                tracing::warn!(component = %self.component.name, tool = %self.tool, call = self.id, reason = %why, "cleanup failed: {message}");
            }
            CleanupOutcome::TimedOut => {
                tracing::warn!(component = %self.component.name, tool = %self.tool, call = self.id, reason = %why, "cleanup ran past its budget of {budget:?} and was stopped");
            }
        }
        CleanupReport { outcome, started_at, duration }
    }
}

/// The stop reason as the log names it (the WIT case names).
fn reason_name(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::Cancelled => "cancelled",
        StopReason::IdleTimeout => "idle-timeout",
        StopReason::MaxDuration => "max-duration",
        StopReason::Trapped(_) => "trapped",
        StopReason::OutOfMemory => "out-of-memory",
        StopReason::Shutdown => "shutdown",
    }
}

async fn run_cleanup(
    engine: &Engine,
    component: &Arc<LoadedComponent>,
    files: Option<&Arc<super::files::FileGrants>>,
    limits: &ToolLimits,
    context: CleanupContext,
) -> CleanupOutcome {
    let (mut store, deadline) = bounded_store_with(engine, component, files, limits, limits.cleanup_budget);
    let pre = component.pre.clone();
    let cleanup = async move {
        // A plain component has none: `run_deferring_teardown` never asks for it.
        pre.instantiate(&mut store).await?.cleanup(&mut store, &context).await
    };
    match run_bounded(cleanup, deadline).await {
        Some(Ok(())) => CleanupOutcome::Completed,
        Some(Err(error)) if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
            CleanupOutcome::TimedOut
        }
        Some(Err(error)) => CleanupOutcome::Failed(trap_message(&error, limits)),
        None => CleanupOutcome::TimedOut,
    }
}

/// A store for guest code that has no caller to cancel it (`list` at load time,
/// `cleanup`): the tool's limits, but only `budget` to run; returns the deadline too.
pub(crate) fn bounded_store(
    engine: &Engine,
    component: &LoadedComponent,
    limits: &ToolLimits,
    budget: Duration,
) -> (Store<GuestState>, Instant) {
    bounded_store_with(engine, component, component.files.as_ref(), limits, budget)
}

/// [`bounded_store`] with these file grants (a tenant's).
fn bounded_store_with(
    engine: &Engine,
    component: &LoadedComponent,
    files: Option<&Arc<super::files::FileGrants>>,
    limits: &ToolLimits,
    budget: Duration,
) -> (Store<GuestState>, Instant) {
    let deadline = Instant::now() + budget;
    let limits = ToolLimits { idle_timeout: None, max_duration: Some(budget), ..limits.clone() };
    let control = CallControl::new(&limits);
    (new_store_with(engine, component, files, &limits, control, Some(deadline)), deadline)
}

/// Run guest code that has no caller to cancel it (`list` at load time, `cleanup`) until
/// `deadline`. The store's epoch callback traps at the same deadline; the timeout here
/// also covers a guest parked in a host call.
pub(crate) async fn run_bounded<F: Future>(future: F, deadline: Instant) -> Option<F::Output> {
    tokio::time::timeout_at(deadline.into(), future).await.ok()
}

/// A store for one instance of `component`, with its limits, host-call fuel, and an epoch
/// callback that yields to tokio every tick (so a spinning guest cannot starve other calls)
/// and traps once the hard-stop flag is set or `backstop` passes.
pub(crate) fn new_store(
    engine: &Engine,
    component: &LoadedComponent,
    limits: &ToolLimits,
    control: Arc<CallControl>,
    backstop: Option<Instant>,
) -> Store<GuestState> {
    new_store_with(engine, component, component.files.as_ref(), limits, control, backstop)
}

/// [`new_store`] with these file grants (a tenant's) instead of the component's.
pub(crate) fn new_store_with(
    engine: &Engine,
    component: &LoadedComponent,
    files: Option<&Arc<super::files::FileGrants>>,
    limits: &ToolLimits,
    control: Arc<CallControl>,
    backstop: Option<Instant>,
) -> Store<GuestState> {
    let state = GuestState::new(
        component.name.clone(),
        limits,
        files,
        &component.options.environment,
        component.http_grants.clone(),
        component.descriptors.clone(),
        control,
    );
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    arm(&mut store, limits, backstop);
    store
}

/// How long a run computes before an epoch tick makes it yield: past it, every tick does.
const FIRST_SLICE: Duration = Duration::from_micros(250);

/// Give `store` one run's bounds: its host-call fuel, and an epoch callback that traps at
/// the hard stop or at `backstop` and otherwise yields at every tick once the run has
/// lasted [`FIRST_SLICE`].
///
/// The first tick of a run comes at a random point of it, often within microseconds: a
/// short call that yielded there would wait behind every busy guest (the trivial call's
/// p99 beside two spinning guests was 2.2–2.8× its idle p99; without the first yield,
/// 1.3–1.9×). Skipping the first tick outright let a busy guest hold its thread for one to
/// two ticks before its first yield, and a call's first slice runs in place, on the thread
/// that reads the transport (dispatch.rs): a guest filling its memory or spinning held up
/// every request behind it for up to 2 ms. Now it yields at the first tick that finds it
/// at least 250 µs in. The hard stop is checked at every tick, the first included.
fn arm(store: &mut Store<GuestState>, limits: &ToolLimits, backstop: Option<Instant>) {
    // Host-call fuel also bounds the result copied out of the guest: leave room above the
    // result limit so an oversized result is measured and refused by `check_result`.
    store.set_hostcall_fuel(limits.hostcall_bytes.max(limits.result_bytes.saturating_mul(2)));
    store.set_epoch_deadline(1);
    let armed = Instant::now();
    store.epoch_deadline_callback(move |store| {
        if store.data().control().is_hard_stopping()
            || backstop.is_some_and(|backstop| Instant::now() >= backstop)
        {
            Ok(UpdateDeadline::Interrupt)
        } else if armed.elapsed() < FIRST_SLICE {
            Ok(UpdateDeadline::Continue(1))
        } else {
            // Held up while the guest waits for its turn: it is computing, not in a host
            // call, should grace end now (`Call::drive`, phase 3).
            let at_yield = store.data().control().epoch_yield_flag();
            at_yield.store(true, Ordering::Release);
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    at_yield.store(false, Ordering::Release);
                }),
            ))
        }
    });
}

async fn kick_after(grace: Duration, control: Arc<CallControl>, engine: Engine) {
    tokio::time::sleep(grace).await;
    control.begin_hard_stop();
    engine.increment_epoch();
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the runtime's shutdown flag is set (at once if it already is).
async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|down| *down).await.is_err() {
        // The runtime is gone without a shutdown: nothing will ever signal.
        std::future::pending::<()>().await;
    }
}

/// What one content item costs at least in the answer besides its strings (its JSON
/// object, `type` and keys), so that many empty items still count.
const CONTENT_ITEM_BYTES: usize = 32;

/// The bytes a result takes in the answer, near enough for a limit: every string and byte
/// list the guest chose, plus [`CONTENT_ITEM_BYTES`] per content item.
fn result_size(result: &bindings::CallResult) -> usize {
    let len = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    let content: usize = result.content.iter().map(|item| CONTENT_ITEM_BYTES + content_size(item)).sum();
    content + len(&result.structured)
}

/// The bytes of the strings and byte lists of one content item.
pub(crate) fn content_size(item: &Content) -> usize {
    let len = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    match item {
        Content::Text(text) => text.len(),
        Content::Image(media) | Content::Audio(media) => media.data.len() + media.mime_type.len(),
        Content::ResourceLink(link) => {
            link.uri.len() + link.name.len() + len(&link.description) + len(&link.mime_type)
        }
        Content::EmbeddedResource(resource) => {
            resource.uri.len()
                + len(&resource.mime_type)
                + len(&resource.text)
                + resource.blob.as_ref().map_or(0, Vec::len)
        }
    }
}

/// The trap's own message (e.g. "wasm `unreachable` instruction executed"), without the
/// backtrace wasmtime attaches.
fn trap_message(error: &wasmtime::Error, limits: &ToolLimits) -> String {
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    if let Some(ResourceTableError::Full) = error.downcast_ref::<ResourceTableError>() {
        return format!(
            "it holds {} host resources (streams, pollables, files) at once, the limit",
            limits.host_resources
        );
    }
    // A host function's error: its own words, without the wasm backtrace around them.
    error.root_cause().to_string()
}
