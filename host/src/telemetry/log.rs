//! The operator's log: stderr, written by `tracing-appender`'s non-blocking worker, and
//! the one line each call ends with.
//!
//! A reader that stops draining stderr (an MCP client that pipes it and never reads it, a
//! stalled terminal) would otherwise block every thread that logs once the pipe is full: a
//! guest's stderr line inside a host call, a warning on the stdin thread, and with them the
//! whole server. Events are formatted on the thread that logs and go through a bounded
//! queue ([`QUEUE_EVENTS`]) to the writer thread; when it is full they are dropped
//! (lossy) and counted ([`LogDropped`]): the count is a metric and is logged when it grows.
//!
//! This replaced a hand-written writer of the same design (a bounded `sync_channel` to a
//! thread of its own, `operator_log.rs`). Measured in one run, alternating, 200,000 call
//! lines formatted and handed over on one thread to a writer into `io::sink()` (a scratch
//! benchmark, three runs): the hand-written writer took 0.76–0.77 µs per event at p50 and
//! 10.9–11.1 µs at p99, `tracing-appender` 0.78–0.85 µs at p50 and 2.8–7.9 µs at p99. Not
//! worse where it matters (the same p50 within noise, a shorter tail), so the crate is used.
//!
//! One thing of `tracing-appender`'s is worked around: when its worker cannot take the
//! shutdown message within 100 ms at exit (stderr unread, the queue full), its guard prints
//! a line on *stdout*, which is the MCP stream of `serve --stdio`. [`LogHandle::finish`]
//! therefore checks first whether the queue takes an event; if it does not, nothing could
//! be flushed anyway and the guard is forgotten instead of dropped.

use std::io::Write;

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};

use crate::runtime::{CallEnded, CallObserver};

/// Events the queue holds before new ones are dropped.
pub const QUEUE_EVENTS: usize = 4096;

/// How the log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (`tracing-subscriber`'s default format).
    #[default]
    Text,
    /// One JSON object per line, its fields under `fields`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format {other:?}: use `text` or `json`")),
        }
    }
}

/// Why the log could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadySet(String),
}

/// Log events dropped because stderr was not read fast enough. Cheap to clone.
#[derive(Clone)]
pub struct LogDropped(ErrorCounter);

impl LogDropped {
    pub fn count(&self) -> u64 {
        self.0.dropped_lines() as u64
    }

    /// Log how many events were dropped, whenever that grows (checked every `period`).
    pub async fn report_every(self, period: std::time::Duration) {
        let mut reported = 0;
        loop {
            tokio::time::sleep(period).await;
            let dropped = self.count();
            if dropped > reported {
                tracing::warn!(
                    dropped = dropped - reported,
                    "log events dropped: stderr was not read fast enough"
                );
                reported = dropped;
            }
        }
    }
}

/// The installed log: keeps its writer thread, and flushes it at [`LogHandle::finish`].
pub struct LogHandle {
    writer: NonBlocking,
    guard: Option<WorkerGuard>,
}

impl LogHandle {
    /// The count of events dropped so far.
    pub fn dropped(&self) -> LogDropped {
        LogDropped(self.writer.error_counter())
    }

    /// Wait (at most about a second) for what was logged to reach stderr; see the module
    /// docs for when it does not wait at all.
    pub fn finish(mut self) {
        self.flush_or_forget();
    }

    fn flush_or_forget(&mut self) {
        let Some(guard) = self.guard.take() else { return };
        let before = self.writer.error_counter().dropped_lines();
        // An empty event: written as nothing, but it needs a place in the queue.
        let _ = self.writer.write(b"");
        if self.writer.error_counter().dropped_lines() > before {
            std::mem::forget(guard);
        } else {
            drop(guard);
        }
    }
}

impl Drop for LogHandle {
    fn drop(&mut self) {
        self.flush_or_forget();
    }
}

/// Start the writer thread for `output` (stderr, in the binary) and install the global
/// subscriber: `format`, ANSI colours when `ansi`, and the level filter in `$CORDON_LOG`
/// (default `info`).
pub fn install(
    output: impl Write + Send + 'static,
    format: LogFormat,
    ansi: bool,
) -> Result<LogHandle, LogError> {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUE_EVENTS)
        .thread_name("cordon-log")
        .finish(output);
    let filter = tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_writer(writer.clone()).with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
    installed.map_err(|error| LogError::AlreadySet(error.to_string()))?;
    Ok(LogHandle { writer, guard: Some(guard) })
}

/// The one log line each call ends with (target `cordon::call`, level info): who asked,
/// what ran, how it ended and stopped, its cleanup, and sizes. Never an argument's or a
/// result's value; a tool's name only when the tool is loaded. A field without a value
/// (no tenant, a call that never ran) is left out.
pub struct CallLog;

impl CallObserver for CallLog {
    fn call_ended(&self, event: &CallEnded) {
        let millis = |duration: std::time::Duration| duration.as_secs_f64() * 1e3;
        tracing::info!(
            target: "cordon::call",
            request_id = event.tags.request_id.as_deref(),
            tenant = event.tags.tenant.as_deref(),
            call_id = event.call_id,
            component = event.component.as_deref(),
            tool = event.tool.as_deref(),
            outcome = event.outcome.as_str(),
            refusal = event.refusal.map(|reason| reason.as_str()),
            stop = event.stop_path.map(|path| path.as_str()),
            duration_ms = millis(event.duration),
            queue_ms = millis(event.queue_wait),
            stop_latency_ms = event.stop_latency.map(millis),
            cleanup = event.cleanup.map(|cleanup| cleanup.result.as_str()),
            cleanup_ms = event.cleanup.map(|cleanup| millis(cleanup.duration)),
            argument_bytes = event.argument_bytes,
            result_bytes = event.result_bytes,
            "call ended"
        );
    }
}
