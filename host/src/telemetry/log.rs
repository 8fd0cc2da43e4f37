//! The operator's log: stderr, written in batches by a thread of its own, and the one
//! line each call ends with.
//!
//! A reader that stops draining stderr (an MCP client that pipes it and never reads it, a
//! stalled terminal) would otherwise block every thread that logs once the pipe is full: a
//! guest's stderr line inside a host call, a warning on the stdin thread, and with them the
//! whole server. Events are formatted on the thread that logs and appended to a bounded
//! buffer ([`BUFFER_BYTES`]); the writer thread takes the whole buffer at once and writes
//! it. When the buffer is full, events are dropped (lossy) and counted ([`LogDropped`]):
//! the count is a metric and is logged when it grows.
//!
//! **Why not `tracing-appender`** (which the issue asked for, unless measured worse; it
//! was, and this writer replaced both it and the earlier hand-written `operator_log.rs`).
//! Both hand each event to the writer thread through a channel and wake it for each one:
//! with one log line per call, that wake-up, the thread's `write(2)` and its sleep again
//! cost more than the call. In the stdio benchmark (BENCHMARKS.md, "Telemetry"), the
//! echo's median was 27.5 µs with logging off and 36.6 µs with the call line at info
//! through `tracing-appender` (1.33x; server CPU per call 28.6 → 49.2 µs, 1.72x). The
//! writer thread here is woken once per batch instead: when the buffer turns non-empty it
//! lets events gather for [`GATHER`] (or until [`WAKE_BYTES`] are waiting), then writes
//! them with one `write(2)`; a log line reaches stderr at most about 10 ms late. (Formatting
//! and handing over one event alone cost the same in both, 0.77–0.85 µs at p50, measured
//! apart.) `tracing-appender` also prints on *stdout* when its worker is stuck at exit,
//! which is the MCP stream of `serve --stdio`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::{CallEnded, CallObserver};

/// Bytes of events the buffer holds before new ones are dropped (about 4,000 call lines).
pub const BUFFER_BYTES: usize = 1 << 20;
/// Bytes waiting that wake the writer at once, without waiting for [`GATHER`].
pub const WAKE_BYTES: usize = 64 << 10;
/// How long the writer lets events gather once one is waiting.
pub const GATHER: Duration = Duration::from_millis(10);
/// How long [`LogHandle::finish`] waits for the buffer to reach stderr.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

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
    #[error("cannot start the log thread: {0}")]
    Thread(std::io::Error),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadySet(String),
}

/// What the loggers and the writer thread share.
#[derive(Default)]
struct Shared {
    batch: Mutex<Batch>,
    /// Wakes the writer: something to write, a flush asked for, or the end.
    wake: Condvar,
    /// Wakes [`LogHandle::finish`] once a flush is done.
    flushed: Condvar,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Flushes asked for, and done, so far.
    flushes_asked: u64,
    flushes_done: u64,
}

impl Batch {
    fn urgent(&self) -> bool {
        self.bytes.len() >= WAKE_BYTES || self.flushes_asked > self.flushes_done
    }
}

/// Log events dropped because stderr was not read fast enough. Cheap to clone.
#[derive(Clone)]
pub struct LogDropped(Arc<Shared>);

impl LogDropped {
    pub fn count(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Log how many events were dropped, whenever that grows (checked every `period`).
    pub async fn report_every(self, period: Duration) {
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

/// The installed log: its writer thread runs as long as the process.
pub struct LogHandle {
    shared: Arc<Shared>,
    format: LogFormat,
}

impl LogHandle {
    /// The call log, writing its lines straight into this log's buffer.
    pub fn call_log(&self) -> CallLog {
        CallLog { direct: Some((self.shared.clone(), self.format)) }
    }

    /// The count of events dropped so far.
    pub fn dropped(&self) -> LogDropped {
        LogDropped(self.shared.clone())
    }

    /// [`LogHandle::flush`], at the end.
    pub fn finish(self) {
        self.flush();
    }

    /// Wait, at most [`FLUSH_WAIT`], until everything logged so far is written (it is not
    /// when stderr is not read).
    pub fn flush(&self) {
        let deadline = Instant::now() + FLUSH_WAIT;
        let mut batch = self.shared.batch.lock().unwrap();
        batch.flushes_asked += 1;
        let asked = batch.flushes_asked;
        self.shared.wake.notify_one();
        while batch.flushes_done < asked {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            batch = self.shared.flushed.wait_timeout(batch, left).unwrap().0;
        }
    }
}

/// The writer thread: sleep until an event waits, let more gather, write them all at once.
fn write_batches(shared: &Shared, mut output: impl Write) {
    let mut spare = Vec::new();
    let mut batch = shared.batch.lock().unwrap();
    loop {
        batch = shared.wake.wait_while(batch, |batch| batch.bytes.is_empty() && !batch.urgent()).unwrap();
        if !batch.urgent() {
            batch = shared.wake.wait_timeout_while(batch, GATHER, |batch| !batch.urgent()).unwrap().0;
        }
        std::mem::swap(&mut batch.bytes, &mut spare);
        let flushes = batch.flushes_asked;
        drop(batch);
        let _ = output.write_all(&spare);
        let _ = output.flush();
        spare.clear();
        // Keep a spare buffer, but not one a burst grew large.
        spare.shrink_to(WAKE_BYTES);
        batch = shared.batch.lock().unwrap();
        if flushes > batch.flushes_done {
            batch.flushes_done = flushes;
            shared.flushed.notify_all();
        }
    }
}

/// A `tracing_subscriber` writer that never blocks: see the module docs.
#[derive(Clone)]
struct BatchWriter(Arc<Shared>);

/// One event's bytes, added to the batch whole when the event is done.
struct EventWriter<'a> {
    bytes: Vec<u8>,
    shared: &'a Shared,
}

impl Write for EventWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter<'_> {
    fn drop(&mut self) {
        if !self.bytes.is_empty() {
            self.shared.append(&self.bytes);
        }
    }
}

impl Shared {
    /// Add one whole event to the batch, or drop and count it when the buffer is full.
    fn append(&self, event: &[u8]) {
        let mut batch = self.batch.lock().unwrap();
        let before = batch.bytes.len();
        if before + event.len() > BUFFER_BYTES {
            drop(batch);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        batch.bytes.extend_from_slice(event);
        // The writer sleeps until the first event of a batch, and is woken early only by a
        // large one: one wake-up per batch, not per event.
        let wake = before == 0 || (before < WAKE_BYTES && batch.bytes.len() >= WAKE_BYTES);
        drop(batch);
        if wake {
            self.wake.notify_one();
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchWriter {
    type Writer = EventWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        EventWriter { bytes: Vec::new(), shared: &self.0 }
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
    let (writer, mut handle) = start(output)?;
    handle.format = format;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_writer(writer).with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
    installed.map_err(|error| LogError::AlreadySet(error.to_string()))?;
    Ok(handle)
}

/// Start the writer thread for `output`.
fn start(output: impl Write + Send + 'static) -> Result<(BatchWriter, LogHandle), LogError> {
    let shared = Arc::new(Shared::default());
    let writer = shared.clone();
    std::thread::Builder::new()
        .name("cordon-log".into())
        .spawn(move || write_batches(&writer, output))
        .map_err(LogError::Thread)?;
    Ok((BatchWriter(shared.clone()), LogHandle { shared, format: LogFormat::Text }))
}

/// The one log line each call ends with (target `cordon::call`, level info): who asked,
/// what ran, how it ended and stopped, its cleanup, and sizes. Never an argument's or a
/// result's value; a tool's name only when the tool is loaded. A field without a value
/// (no tenant, a call that never ran) is left out.
///
/// With the log installed here ([`LogHandle::call_log`]) the line is formatted by hand, in
/// the shape `tracing-subscriber` gives every other line (text or JSON), and appended to
/// the buffer directly: through `tracing`'s formatter it cost the HTTP echo about 4 µs of
/// CPU per call (its field visitors, `Debug` escaping, float formatting), over the 5 %
/// target at saturation (BENCHMARKS.md, "Telemetry"). `$CORDON_LOG` still decides whether
/// it is written. Without a log of ours (a test), it goes through `tracing`.
#[derive(Clone, Default)]
pub struct CallLog {
    direct: Option<(Arc<Shared>, LogFormat)>,
}

impl CallLog {
    /// A call log that goes through `tracing`, whatever the subscriber.
    pub fn via_tracing() -> Self {
        Self::default()
    }
}

impl CallObserver for CallLog {
    fn call_ended(&self, event: &CallEnded) {
        if !tracing::enabled!(target: "cordon::call", tracing::Level::INFO) {
            return;
        }
        let Some((shared, format)) = &self.direct else {
            return via_tracing(event);
        };
        // One buffer per thread, reused: no allocation per line.
        thread_local! {
            static LINE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(512));
        }
        LINE.with_borrow_mut(|bytes| {
            bytes.clear();
            let mut line = Line::start(bytes, *format);
            line.fields(event);
            line.finish();
            shared.append(bytes);
        });
    }
}

/// The call line through `tracing` (tests, and `cordon call` before a log is installed).
fn via_tracing(event: &CallEnded) {
    let millis = |duration: Duration| duration.as_secs_f64() * 1e3;
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

/// A call line being written, in `tracing-subscriber`'s text or JSON shape, into a buffer.
///
/// Written by hand with no `fmt` machinery: at every call it is a measurable part of a
/// short call's CPU (BENCHMARKS.md, "Telemetry").
struct Line<'a> {
    bytes: &'a mut Vec<u8>,
    json: bool,
}

impl<'a> Line<'a> {
    fn start(bytes: &'a mut Vec<u8>, format: LogFormat) -> Self {
        let json = format == LogFormat::Json;
        if json {
            bytes.extend_from_slice(b"{\"timestamp\":\"");
            write_timestamp(bytes, std::time::SystemTime::now());
            bytes.extend_from_slice(b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"call ended\"");
        } else {
            write_timestamp(bytes, std::time::SystemTime::now());
            bytes.extend_from_slice(b"  INFO cordon::call: call ended");
        }
        Self { bytes, json }
    }

    /// Every field of the call's event that has a value.
    fn fields(&mut self, event: &CallEnded) {
        if let Some(id) = &event.tags.request_id {
            self.text("request_id", id);
        }
        if let Some(tenant) = &event.tags.tenant {
            self.text("tenant", tenant);
        }
        if let Some(id) = event.call_id {
            self.number("call_id", id);
        }
        if let Some(component) = &event.component {
            self.text("component", component);
        }
        if let Some(tool) = &event.tool {
            self.text("tool", tool);
        }
        self.text("outcome", event.outcome.as_str());
        if let Some(reason) = event.refusal {
            self.text("refusal", reason.as_str());
        }
        if let Some(stop) = event.stop_path {
            self.text("stop", stop.as_str());
        }
        self.millis("duration_ms", event.duration);
        self.millis("queue_ms", event.queue_wait);
        if let Some(latency) = event.stop_latency {
            self.millis("stop_latency_ms", latency);
        }
        if let Some(cleanup) = event.cleanup {
            self.text("cleanup", cleanup.result.as_str());
            self.millis("cleanup_ms", cleanup.duration);
        }
        self.number("argument_bytes", event.argument_bytes as u64);
        self.number("result_bytes", event.result_bytes as u64);
    }

    fn key(&mut self, key: &str) {
        if self.json {
            self.bytes.extend_from_slice(b",\"");
            self.bytes.extend_from_slice(key.as_bytes());
            self.bytes.extend_from_slice(b"\":");
        } else {
            self.bytes.push(b' ');
            self.bytes.extend_from_slice(key.as_bytes());
            self.bytes.push(b'=');
        }
    }

    /// A string, quoted and escaped as JSON in both shapes: a tool name or a request id
    /// can never break the line; and its controls that JSON leaves as they are (DEL, C1
    /// such as CSI, bidirectional overrides) escaped the same way: a client's request id
    /// reaches the operator's terminal, and is read back exactly.
    fn text(&mut self, key: &str, value: &str) {
        self.key(key);
        // Names and ids are almost always printable ASCII with nothing to escape.
        if value.bytes().all(|byte| (0x20..0x7f).contains(&byte) && byte != b'"' && byte != b'\\') {
            self.bytes.push(b'"');
            self.bytes.extend_from_slice(value.as_bytes());
            self.bytes.push(b'"');
        } else {
            let start = self.bytes.len();
            serde_json::to_writer(&mut *self.bytes, value).expect("writing to a Vec never fails");
            // JSON leaves DEL, C1 and layout controls raw: escape them as JSON does the
            // rest (`\u007f`), so that the value read back is the id itself.
            let quoted = std::str::from_utf8(&self.bytes[start..]).expect("serde_json writes UTF-8");
            let raw = crate::text::is_unprintable;
            if quoted.chars().any(raw) {
                let escaped: String = quoted
                    .chars()
                    .map(|c| if raw(c) { format!("\\u{:04x}", u32::from(c)) } else { c.to_string() })
                    .collect();
                self.bytes.truncate(start);
                self.bytes.extend_from_slice(escaped.as_bytes());
            }
        }
    }

    fn number(&mut self, key: &str, value: u64) {
        self.key(key);
        self.bytes.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    /// Milliseconds with microseconds: `0.176`.
    fn millis(&mut self, key: &str, value: Duration) {
        self.key(key);
        let micros = value.as_micros();
        self.bytes.extend_from_slice(itoa::Buffer::new().format(micros / 1000).as_bytes());
        self.bytes.push(b'.');
        push_digits(self.bytes, (micros % 1000) as u32, 3);
    }

    fn finish(self) {
        if self.json {
            self.bytes.extend_from_slice(b"},\"target\":\"cordon::call\"}");
        }
        self.bytes.push(b'\n');
    }
}

/// `value` in exactly `width` decimal digits, zero-padded (`value` must fit).
fn push_digits(out: &mut Vec<u8>, mut value: u32, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// `2026-12-01T11:41:23.226102Z`: UTC, to the microsecond, as `tracing-subscriber` writes it.
///
/// The date, hour and minute (`2026-12-01T11:41:`) are worked out once a minute per thread.
fn write_timestamp(out: &mut Vec<u8>, now: std::time::SystemTime) {
    thread_local! {
        /// The minute (since the epoch) last written, and its text.
        static MINUTE: std::cell::Cell<(u64, [u8; 17])> = const { std::cell::Cell::new((u64::MAX, [0; 17])) };
    }
    let since = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let minute = seconds / 60;
    let (cached, mut prefix) = MINUTE.get();
    if cached != minute {
        prefix = minute_prefix(seconds);
        MINUTE.set((minute, prefix));
    }
    out.extend_from_slice(&prefix);
    push_digits(out, (seconds % 60) as u32, 2);
    out.push(b'.');
    push_digits(out, since.subsec_micros(), 6);
    out.push(b'Z');
}

/// `2026-12-01T11:41:` for the minute that holds `seconds` since the epoch.
fn minute_prefix(seconds: u64) -> [u8; 17] {
    let (days, of_day) = ((seconds / 86_400) as i64, seconds % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let text = format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:", of_day / 3600, of_day % 3600 / 60);
    // Years 0 to 9999 (every `SystemTime` from the epoch to then) are 17 bytes.
    let mut prefix = [b'0'; 17];
    let bytes = text.as_bytes();
    prefix.copy_from_slice(&bytes[bytes.len().saturating_sub(17)..]);
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::fmt::MakeWriter;

    /// An output that blocks until `open` is set, then keeps what it is given and counts
    /// its writes.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, Condvar)>,
        written: Arc<Mutex<(Vec<u8>, usize)>>,
    }

    impl Gate {
        fn open(&self) {
            let (open, opened) = &*self.open;
            *open.lock().unwrap() = true;
            opened.notify_all();
        }

        fn written(&self) -> (String, usize) {
            let written = self.written.lock().unwrap();
            (String::from_utf8(written.0.clone()).unwrap(), written.1)
        }
    }

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let (open, opened) = &*self.open;
            let _open = opened.wait_while(open.lock().unwrap(), |open| !*open).unwrap();
            let mut written = self.written.lock().unwrap();
            written.0.extend_from_slice(bytes);
            written.1 += 1;
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log(writer: &BatchWriter, text: &str) {
        writer.make_writer().write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_blocked_output_never_blocks_the_logger_and_the_loss_is_counted() {
        let gate = Gate::default();
        let (writer, handle) = start(gate.clone()).unwrap();
        let dropped = handle.dropped();
        // Far more than the buffer holds, while nothing reaches the output.
        let line = format!("{}\n", "x".repeat(1023));
        let events = 3 * BUFFER_BYTES / line.len();
        for _ in 0..events {
            log(&writer, &line);
        }
        assert!(dropped.count() > 0, "events were dropped, not waited for");
        gate.open();
        handle.flush();
        log(&writer, "after\n");
        handle.finish();
        let (written, _) = gate.written();
        assert!(written.starts_with(&line), "the first events were kept");
        assert!(written.ends_with("after\n"), "the writer caught up");
        assert_eq!(written.len() / line.len() + dropped.count() as usize, events, "kept or counted, each");
    }

    #[test]
    fn events_are_written_whole_in_batches_not_one_write_each() {
        let gate = Gate::default();
        gate.open();
        let (writer, handle) = start(gate.clone()).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..250 {
                        log(&writer, &format!("thread {thread} event {i}\n"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        handle.finish();
        let (written, writes) = gate.written();
        let lines: Vec<&str> = written.lines().collect();
        assert_eq!(lines.len(), 1000, "every event, once");
        assert!(
            lines.iter().all(|line| line.starts_with("thread ") && line.contains(" event ")),
            "whole lines"
        );
        assert!(writes < 100, "{writes} writes for 1,000 events: they were batched");
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn timestamps_are_civil_utc_dates() {
        let at = |seconds: u64, micros: u32| {
            let mut out = Vec::new();
            let time = std::time::UNIX_EPOCH + Duration::new(seconds, micros * 1000);
            write_timestamp(&mut out, time);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.000007Z");
        assert_eq!(at(1_796_125_283, 226_102), "2026-12-01T11:41:23.226102Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
    }

    #[test]
    fn a_json_line_is_one_json_object_in_tracing_subscribers_shape() {
        let mut bytes = Vec::new();
        let mut line = Line::start(&mut bytes, LogFormat::Json);
        line.text("request_id", "\"a\\nb\"");
        line.number("call_id", 7);
        line.millis("duration_ms", Duration::from_micros(176_393));
        line.finish();
        assert_eq!(bytes.iter().filter(|&&byte| byte == b'\n').count(), 1);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["level"], "INFO");
        assert_eq!(value["target"], "cordon::call");
        assert_eq!(value["fields"]["message"], "call ended");
        assert_eq!(value["fields"]["request_id"], "\"a\\nb\"");
        assert_eq!(value["fields"]["call_id"], 7);
        assert_eq!(value["fields"]["duration_ms"], 176.393);
    }

    #[test]
    fn a_text_line_quotes_plain_names_and_escapes_the_rest() {
        let mut bytes = Vec::new();
        let mut line = Line::start(&mut bytes, LogFormat::Text);
        line.text("tool", "echo");
        line.text("request_id", "\"x\u{7f}\u{9b}\u{202e}\"");
        line.millis("duration_ms", Duration::from_micros(7));
        line.number("result_bytes", 1234);
        line.finish();
        let text = String::from_utf8(bytes).unwrap();
        // DEL, CSI and a right-to-left override, which JSON escaping leaves raw: escaped.
        assert!(text.ends_with(
            "  INFO cordon::call: call ended tool=\"echo\" request_id=\"\\\"x\\u007f\\u009b\\u202e\\\"\" duration_ms=0.007 result_bytes=1234\n"
        ), "{text}");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        // Read back as JSON, the value is the id itself.
        let quoted = text.split("request_id=").nth(1).unwrap().split(" duration_ms").next().unwrap();
        assert_eq!(serde_json::from_str::<String>(quoted).unwrap(), "\"x\u{7f}\u{9b}\u{202e}\"");
    }
}
