//! The operator's log: stderr, written by a thread of its own so that nothing that logs
//! ever waits for it.
//!
//! A reader that stops draining stderr (an MCP client that pipes it and never reads it, a
//! stalled terminal) would otherwise block every thread that logs once the pipe is full: a
//! guest's stderr line inside a host call, a warning on the stdin thread, and with them the
//! whole server. Events go through a bounded queue to the writer thread instead; when the
//! queue is full they are dropped and counted, and the count is logged once the writer
//! catches up.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

/// Events the queue holds before new ones are dropped.
const QUEUE_EVENTS: usize = 4096;
/// How long [`Flush`] waits at exit for the queue to reach stderr.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

enum Item {
    Event(Vec<u8>),
    /// Acknowledged once everything queued before it is written.
    Flush(SyncSender<()>),
}

/// A `tracing_subscriber` writer that never blocks: see the module docs.
pub struct OperatorLog {
    queue: SyncSender<Item>,
    dropped: Arc<AtomicU64>,
}

/// Waits (a bounded time) at drop for the queued events to be written.
pub struct Flush {
    queue: SyncSender<Item>,
}

/// Start the writer thread for `output` (stderr, in the binary).
pub fn start(output: impl Write + Send + 'static) -> std::io::Result<(OperatorLog, Flush)> {
    let (queue, items) = sync_channel(QUEUE_EVENTS);
    let dropped = Arc::new(AtomicU64::new(0));
    let counter = dropped.clone();
    std::thread::Builder::new()
        .name("cordon-log".into())
        .spawn(move || write_all(items, output, &counter))?;
    Ok((OperatorLog { queue: queue.clone(), dropped }, Flush { queue }))
}

fn write_all(items: Receiver<Item>, mut output: impl Write, dropped: &AtomicU64) {
    for item in items {
        match item {
            Item::Event(bytes) => {
                let lost = dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let _ = writeln!(
                        output,
                        "cordon: {lost} log events dropped: stderr was not read fast enough"
                    );
                }
                let _ = output.write_all(&bytes);
            }
            Item::Flush(done) => {
                let _ = output.flush();
                let _ = done.send(());
            }
        }
    }
}

impl Flush {
    /// Wait until everything logged so far is written, for at most [`FLUSH_WAIT`].
    pub fn flush(&self) {
        let deadline = Instant::now() + FLUSH_WAIT;
        let (done, flushed) = sync_channel(1);
        let mut item = Item::Flush(done);
        loop {
            match self.queue.try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    item = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = flushed.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        self.flush();
    }
}

/// One event's bytes, queued whole when the event is done.
pub struct EventWriter<'a> {
    bytes: Vec<u8>,
    log: &'a OperatorLog,
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
        if self.bytes.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.bytes);
        if let Err(TrySendError::Full(_)) = self.log.queue.try_send(Item::Event(bytes)) {
            self.log.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for OperatorLog {
    type Writer = EventWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        EventWriter { bytes: Vec::new(), log: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An output that blocks until `open` is set, then keeps what it is given.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, std::sync::Condvar)>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let (open, opened) = &*self.open;
            let _open = opened.wait_while(open.lock().unwrap(), |open| !*open).unwrap();
            self.written.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log(log: &OperatorLog, text: &str) {
        use tracing_subscriber::fmt::MakeWriter;
        log.make_writer().write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_blocked_output_never_blocks_the_logger_and_the_loss_is_counted() {
        let gate = Gate::default();
        let (writer, flush) = start(gate.clone()).unwrap();
        // Far more events than the queue holds, while nothing reaches the output.
        for i in 0..QUEUE_EVENTS * 3 {
            log(&writer, &format!("event {i}\n"));
        }
        let (open, opened) = &*gate.open;
        *open.lock().unwrap() = true;
        opened.notify_all();
        flush.flush();
        log(&writer, "after\n");
        drop(flush);
        let written = String::from_utf8(gate.written.lock().unwrap().clone()).unwrap();
        assert!(written.contains("event 0\n"), "the first events were queued");
        assert!(written.contains("log events dropped"), "the loss is reported");
        assert!(written.ends_with("after\n"), "the writer caught up: {}", &written[written.len() - 200..]);
    }
}
