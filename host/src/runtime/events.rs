//! # One typed event per call end
//!
//! Telemetry observes outcomes, it does not steer them. Every call the runtime is asked
//! for ends in exactly one [`CallEnded`], handed to the [`CallObserver`]s given to the
//! runtime at construction ([`Runtime::observe`](super::Runtime::observe)): a call that
//! ran, once its teardown drops (after the answer is out), and a call that never ran, at
//! its refusal (or its cancel while it waited for a slot). The runtime knows nothing of logs or metrics; the operator's log
//! line and the Prometheus metrics are two observers (`crate::telemetry`).
//!
//! An event carries sizes, durations and fixed names, never an argument's or a result's
//! value, and a tool's name only when the tool is loaded (so that whatever a client asks
//! for can never become a metric label).

use std::sync::Arc;
use std::time::Duration;

/// Who asked for a call, as the layers above the runtime know it. The runtime only carries
/// these to the event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallTags {
    /// The JSON-RPC request id, as JSON text (`7`, `"abc"`).
    pub request_id: Option<String>,
    /// The tenant the call is made for, once tenants exist.
    pub tenant: Option<String>,
}

/// How a call ended, in the fixed set operators count by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// The tool returned a result that is not an error.
    Ok,
    /// The round ended asking the client for input (`input_required`): the call goes on
    /// in a next round, which ends in an event of its own.
    InputRequired,
    /// The tool returned an error, or a result marked `isError`, or a result that breaks
    /// the contract.
    ToolError,
    /// The caller cancelled it (or the server's shutdown stopped it).
    Cancelled,
    /// Its idle timeout or maximum duration stopped it.
    TimedOut,
    /// The guest trapped (or its instance could not start).
    Trapped,
    /// A limit stopped it: memory, or the result's size.
    Limit,
    /// It never ran: unknown tool, bad arguments, no free slot in time, shutting down.
    Refused,
}

impl CallOutcome {
    pub const ALL: [CallOutcome; 8] = [
        Self::Ok,
        Self::InputRequired,
        Self::ToolError,
        Self::Cancelled,
        Self::TimedOut,
        Self::Trapped,
        Self::Limit,
        Self::Refused,
    ];

    /// Its position in [`CallOutcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::InputRequired => "input_required",
            Self::ToolError => "tool_error",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed_out",
            Self::Trapped => "trapped",
            Self::Limit => "limit",
            Self::Refused => "refused",
        }
    }
}

/// How the guest stopped running: told apart by what the stop sequence saw (`call.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopPath {
    /// Its export ended by itself (a result, an error, or a trap of its own) with no stop
    /// asked of it.
    Returned,
    /// A stop was asked and its export ended by itself within the grace period.
    Cooperative,
    /// It was computing when grace ran out (or at its maximum duration's backstop) and
    /// trapped at its next epoch check.
    EpochTrap,
    /// It was parked in a host call (a sleep, a poll, a read) when grace ran out, and its
    /// future was dropped there.
    DroppedInHostCall,
}

impl StopPath {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Returned => "returned",
            Self::Cooperative => "cooperative",
            Self::EpochTrap => "epoch_trap",
            Self::DroppedInHostCall => "dropped_in_host_call",
        }
    }
}

/// Why a call was refused before it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// No loaded component offers the tool.
    UnknownTool,
    /// The request's parameters or the arguments are malformed or fail the input schema.
    InvalidArguments,
    /// The tool needs a client capability the request does not declare.
    MissingCapability,
    /// Every call slot stayed in use for the queue timeout.
    Busy,
    /// The server is shutting down.
    ShuttingDown,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::InvalidArguments => "invalid_arguments",
            Self::MissingCapability => "missing_capability",
            Self::Busy => "busy",
            Self::ShuttingDown => "shutting_down",
        }
    }
}

/// How a cleanup after a stop went, in fixed names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CleanupResult {
    Completed,
    Failed,
    TimedOut,
}

impl CleanupResult {
    pub const ALL: [CleanupResult; 3] = [Self::Completed, Self::Failed, Self::TimedOut];

    /// Its position in [`CleanupResult::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
        }
    }
}

/// The cleanup that followed a stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanupEnded {
    pub result: CleanupResult,
    pub duration: Duration,
}

/// Everything an observer learns about one call, once it has ended.
#[derive(Debug, Clone)]
pub struct CallEnded {
    pub tags: CallTags,
    /// The runtime's id of the call; `None` when it was refused before getting one.
    pub call_id: Option<u64>,
    /// The component offering the tool; `None` for an unknown tool.
    pub component: Option<Arc<str>>,
    /// The tool's name; `None` for an unknown tool (the client's string is never carried).
    pub tool: Option<Arc<str>>,
    pub outcome: CallOutcome,
    /// Why it was refused, when `outcome` is [`CallOutcome::Refused`].
    pub refusal: Option<RefusalReason>,
    /// How the guest stopped; `None` when it never ran.
    pub stop_path: Option<StopPath>,
    /// How long the call waited for a slot in the instance pool.
    pub queue_wait: Duration,
    /// From the slot taken to the guest stopped (zero when it never ran).
    pub duration: Duration,
    /// From the stop request (or the maximum duration's deadline) to the guest stopped;
    /// `None` when nothing stopped it.
    pub stop_latency: Option<Duration>,
    pub cleanup: Option<CleanupEnded>,
    /// The arguments' size as the guest receives them (JSON text).
    pub argument_bytes: usize,
    /// The result's size (its strings and bytes) or the error message's; zero otherwise.
    pub result_bytes: usize,
}

impl CallEnded {
    /// A call refused before it ran.
    pub fn refused(tags: CallTags, reason: RefusalReason) -> Self {
        Self { refusal: Some(reason), ..Self::unstarted(tags, CallOutcome::Refused) }
    }

    /// A call that ended before it ran, with `outcome`.
    pub fn unstarted(tags: CallTags, outcome: CallOutcome) -> Self {
        Self {
            tags,
            call_id: None,
            component: None,
            tool: None,
            outcome,
            refusal: None,
            stop_path: None,
            queue_wait: Duration::ZERO,
            duration: Duration::ZERO,
            stop_latency: None,
            cleanup: None,
            argument_bytes: 0,
            result_bytes: 0,
        }
    }
}

/// Something that wants to know about every call end: the log, the metrics, a test.
///
/// Called on the thread that ended the call, so it must be quick and must never block.
pub trait CallObserver: Send + Sync {
    fn call_ended(&self, event: &CallEnded);
}

/// The observers a runtime hands its events to; cheap to clone into each call.
#[derive(Clone, Default)]
pub(crate) struct Observers(Arc<[Arc<dyn CallObserver>]>);

impl Observers {
    pub(crate) fn with(&self, observer: Arc<dyn CallObserver>) -> Self {
        Self(self.0.iter().cloned().chain(std::iter::once(observer)).collect())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn emit(&self, event: &CallEnded) {
        for observer in self.0.iter() {
            observer.call_ended(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_enum_lists_all_its_values_in_index_order() {
        for (index, outcome) in CallOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome.index(), index, "{outcome:?}");
        }
        for (index, result) in CleanupResult::ALL.into_iter().enumerate() {
            assert_eq!(result.index(), index, "{result:?}");
        }
    }
}
