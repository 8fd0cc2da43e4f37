//! The control block of one call: shared by the driver that owns the stop sequence
//! (`call.rs`), the guest's host imports (`guest.rs`) and the caller's [`CallHandle`].
//!
//! [`CallHandle`]: super::CallHandle

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::limits::{MemoryEvents, ToolLimits};

/// The longest progress message passed on, in bytes.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;

/// A progress report, as the guest made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Work done so far; strictly increasing from one report to the next.
    pub done: f64,
    /// The amount at which the work is done, if known.
    pub total: Option<f64>,
    /// A message for people.
    pub message: Option<String>,
}

/// The most log lines of one call held for its client at once: a guest that logs faster
/// than the client is sent them loses the rest (counted, see [`CallHandle::dropped_logs`]).
///
/// [`CallHandle::dropped_logs`]: super::CallHandle::dropped_logs
pub const CLIENT_LOG_QUEUE: usize = 32;
/// The longest log line passed on to the client, in bytes (the operator's log cuts there too).
pub const MAX_CLIENT_LOG_LINE: usize = 4096;

/// How loud a guest's log line is (the WIT `log-level`), least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// One line of a guest's log, held for the call's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

/// The lines of a call's log on their way to its client: only those at or above the level
/// the caller asked for (none unless it asked), at most [`CLIENT_LOG_QUEUE`] waiting.
#[derive(Default)]
struct ClientLog {
    threshold: Mutex<Option<LogLevel>>,
    queue: Mutex<VecDeque<LogLine>>,
    dropped: AtomicU64,
    /// Wakes the one reader when a line is queued.
    queued: Notify,
}

/// Why a call is being stopped, as requested from outside the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// The caller cancelled.
    Cancel,
    /// No progress for the idle timeout.
    IdleTimeout,
    /// The maximum duration passed.
    MaxDuration,
    /// The runtime is shutting down.
    Shutdown,
}

pub(crate) struct CallControl {
    started: Instant,
    idle_timeout: Option<Duration>,
    max_duration: Option<Duration>,
    /// The end of the whole call this round belongs to, when it began before the round.
    ends_by: OnceLock<Instant>,
    /// The first stop request wins; later ones are ignored.
    stop: Mutex<Option<StopRequest>>,
    /// Mirrors `stop.is_some()` for the guest's cheap `cancelled()` check.
    stopping: AtomicBool,
    /// Set when the grace period is over: the epoch callback traps from then on.
    hard_stop: AtomicBool,
    hard_stop_at: OnceLock<Instant>,
    /// When the first stop was requested.
    stop_requested_at: OnceLock<Instant>,
    /// True while the guest is suspended at an epoch yield (computing, not in a host call):
    /// how the stop sequence tells an epoch trap from a drop inside a host call.
    at_epoch_yield: Arc<AtomicBool>,
    /// Wakes the driver when a stop is requested.
    pub(crate) wake: Notify,
    /// Turns true when a stop is requested: wakes the waits of a guest that checks.
    stop_signal: watch::Sender<bool>,
    /// Whether the guest asked `cancelled()` or `time-left()`: it checks for a stop, so a
    /// stop may end its waits early (waits.rs).
    checks_for_stop: AtomicBool,
    /// Milliseconds since `started` of the last accepted progress report.
    last_progress_ms: AtomicU64,
    progress: watch::Sender<Option<Progress>>,
    note: Mutex<Option<Vec<u8>>>,
    /// The guest said `lists-changed`: list its component again when the call ends.
    lists_changed: AtomicBool,
    pub(crate) memory: Arc<MemoryEvents>,
    client_log: ClientLog,
}

impl CallControl {
    pub(crate) fn new(limits: &ToolLimits) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            idle_timeout: limits.idle_timeout,
            max_duration: limits.max_duration,
            ends_by: OnceLock::new(),
            stop: Mutex::new(None),
            stopping: AtomicBool::new(false),
            hard_stop: AtomicBool::new(false),
            hard_stop_at: OnceLock::new(),
            stop_requested_at: OnceLock::new(),
            at_epoch_yield: Arc::default(),
            wake: Notify::new(),
            stop_signal: watch::Sender::new(false),
            checks_for_stop: AtomicBool::new(false),
            last_progress_ms: AtomicU64::new(0),
            progress: watch::Sender::new(None),
            note: Mutex::new(None),
            lists_changed: AtomicBool::new(false),
            memory: Arc::default(),
            client_log: ClientLog::default(),
        })
    }

    /// Ask the call to stop. Returns whether this request was the first.
    pub(crate) fn request_stop(&self, request: StopRequest) -> bool {
        let mut stop = self.stop.lock().unwrap();
        if stop.is_some() {
            return false;
        }
        *stop = Some(request);
        self.stop_requested_at.get_or_init(Instant::now);
        self.stopping.store(true, Ordering::Release);
        drop(stop);
        self.wake.notify_one();
        self.stop_signal.send_replace(true);
        true
    }

    /// A receiver that turns true once a stop is requested (at once if one was).
    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop_signal.subscribe()
    }

    /// Grace is over: from now on the guest traps at its next epoch check.
    pub(crate) fn begin_hard_stop(&self) {
        self.hard_stop_at.get_or_init(Instant::now);
        self.hard_stop.store(true, Ordering::Release);
    }

    pub(crate) fn is_hard_stopping(&self) -> bool {
        self.hard_stop.load(Ordering::Acquire)
    }

    /// When the hard stop began, if it did.
    pub(crate) fn hard_stop_at(&self) -> Option<Instant> {
        self.hard_stop_at.get().copied()
    }

    /// When the first stop was requested, if one was.
    pub(crate) fn stop_requested_at(&self) -> Option<Instant> {
        self.stop_requested_at.get().copied()
    }

    /// The flag the epoch callback holds up while the guest is suspended at a yield.
    pub(crate) fn epoch_yield_flag(&self) -> Arc<AtomicBool> {
        self.at_epoch_yield.clone()
    }

    /// Whether the guest is suspended at an epoch yield right now.
    pub(crate) fn is_at_epoch_yield(&self) -> bool {
        self.at_epoch_yield.load(Ordering::Acquire)
    }

    pub(crate) fn stop_request(&self) -> Option<StopRequest> {
        *self.stop.lock().unwrap()
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The guest asked whether it should stop: it is one that checks.
    pub(crate) fn note_stop_check(&self) {
        self.checks_for_stop.store(true, Ordering::Relaxed);
    }

    pub(crate) fn checks_for_stop(&self) -> bool {
        self.checks_for_stop.load(Ordering::Relaxed)
    }

    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// When the idle timeout fires, given the progress so far.
    pub(crate) fn idle_deadline(&self) -> Option<Instant> {
        let last = Duration::from_millis(self.last_progress_ms.load(Ordering::Relaxed));
        self.idle_timeout.map(|idle| self.started + last + idle)
    }

    /// When the call is stopped at its maximum duration: its own, or the earlier end of
    /// the call a later round of it belongs to ([`Self::end_by`]).
    pub(crate) fn max_deadline(&self) -> Option<Instant> {
        let own = self.max_duration.map(|max| self.started + max);
        match (own, self.ends_by.get()) {
            (Some(own), Some(&call)) => Some(own.min(call)),
            (own, call) => own.or(call.copied()),
        }
    }

    /// Stop the call at `at` at the latest, counted as its maximum duration: a later round
    /// of a call that began earlier. Set once, before the round runs.
    pub(crate) fn end_by(&self, at: Instant) {
        let _ = self.ends_by.set(at);
    }

    /// Time before the host stops the call: zero once a stop was requested.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        if self.is_stopping() {
            return Some(Duration::ZERO);
        }
        let deadline = match (self.idle_deadline(), self.max_deadline()) {
            (Some(idle), Some(max)) => Some(idle.min(max)),
            (idle, max) => idle.or(max),
        }?;
        Some(deadline.saturating_duration_since(Instant::now()))
    }

    /// Accept a report if it grows; the watch channel keeps only the latest (coalescing).
    /// Messages are cut to [`MAX_PROGRESS_MESSAGE`] bytes: they are for people. Any finite
    /// report, grown or not, resets the idle timeout: a tool waiting on something slow may
    /// repeat its last value as a heartbeat (and could always add a tiny step instead).
    pub(crate) fn report_progress(&self, mut report: Progress) {
        if !report.done.is_finite() || report.total.is_some_and(|total| !total.is_finite()) {
            return;
        }
        let elapsed = self.started.elapsed().as_millis() as u64;
        self.last_progress_ms.store(elapsed, Ordering::Relaxed);
        if let Some(message) = &mut report.message
            && message.len() > MAX_PROGRESS_MESSAGE
        {
            // A copy, not `truncate`: the guest's allocation (up to its host-call bytes)
            // would otherwise stay in the channel with the cut message.
            *message = message[..message.floor_char_boundary(MAX_PROGRESS_MESSAGE)].to_owned();
        }
        self.progress.send_if_modified(|latest| {
            if latest.as_ref().is_some_and(|latest| report.done <= latest.done) {
                return false;
            }
            *latest = Some(report);
            true
        });
    }

    pub(crate) fn subscribe_progress(&self) -> watch::Receiver<Option<Progress>> {
        self.progress.subscribe()
    }

    /// Pass the guest's log lines at or above `threshold` on to the caller.
    pub(crate) fn forward_logs(&self, threshold: LogLevel) {
        *self.client_log.threshold.lock().unwrap() = Some(threshold);
    }

    /// A line of the guest's log: queued for the caller when it asked for this level and
    /// there is room (cut to [`MAX_CLIENT_LOG_LINE`] bytes), else counted as dropped.
    pub(crate) fn log_for_client(&self, level: LogLevel, message: &str) {
        let log = &self.client_log;
        if log.threshold.lock().unwrap().is_none_or(|threshold| level < threshold) {
            return;
        }
        let mut queue = log.queue.lock().unwrap();
        if queue.len() >= CLIENT_LOG_QUEUE {
            log.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let message = message[..message.floor_char_boundary(MAX_CLIENT_LOG_LINE)].to_owned();
        queue.push_back(LogLine { level, message });
        drop(queue);
        log.queued.notify_one();
    }

    pub(crate) fn next_log(&self) -> Option<LogLine> {
        self.client_log.queue.lock().unwrap().pop_front()
    }

    pub(crate) fn has_logs(&self) -> bool {
        !self.client_log.queue.lock().unwrap().is_empty()
    }

    pub(crate) async fn log_queued(&self) {
        self.client_log.queued.notified().await;
    }

    pub(crate) fn dropped_logs(&self) -> u64 {
        self.client_log.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn set_note(&self, note: Vec<u8>) {
        *self.note.lock().unwrap() = (!note.is_empty()).then_some(note);
    }

    pub(crate) fn take_note(&self) -> Option<Vec<u8>> {
        self.note.lock().unwrap().take()
    }

    pub(crate) fn note_lists_changed(&self) {
        self.lists_changed.store(true, Ordering::Relaxed);
    }

    pub(crate) fn lists_changed(&self) -> bool {
        self.lists_changed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the caller asked for, cut to its bound, at most the queue's length; the rest
    /// counted as dropped.
    #[test]
    fn client_log_lines_are_cut_queued_to_their_bound_and_the_rest_counted() {
        let control = CallControl::new(&ToolLimits::default());
        control.log_for_client(LogLevel::Error, "before anyone asked");
        assert!(!control.has_logs());
        control.forward_logs(LogLevel::Warn);
        control.log_for_client(LogLevel::Info, "below the level asked");
        assert!(!control.has_logs());
        control.log_for_client(LogLevel::Warn, &"é".repeat(MAX_CLIENT_LOG_LINE));
        let line = control.next_log().unwrap();
        assert!(line.message.len() <= MAX_CLIENT_LOG_LINE && line.message.len() > MAX_CLIENT_LOG_LINE - 2);
        for _ in 0..CLIENT_LOG_QUEUE + 5 {
            control.log_for_client(LogLevel::Error, "x");
        }
        assert_eq!(control.dropped_logs(), 5);
        assert_eq!(std::iter::from_fn(|| control.next_log()).count(), CLIENT_LOG_QUEUE);
    }
}
