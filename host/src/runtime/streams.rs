//! # A call's file streams: their reads and writes, at most a few on blocking threads at once
//!
//! wasmtime-wasi runs each file stream's read or write on tokio's blocking pool, started
//! by a non-blocking `read` or `write` that returns at once. A guest that opens a stream
//! on each of its `open_files` descriptors and starts a read on every one would queue
//! hundreds of system calls on a pool every call of the server shares, and other tenants'
//! file work would wait behind them. So Cordon's own streams replace wasmtime-wasi's for
//! every file (wasmtime-wasi still checks the descriptor and answers its errors,
//! `files.rs`), with the same states and results, save that a read or write starts only
//! with one of its call's [`StreamThreads`] permits, which the blocking work holds until
//! its system call returns: [`THREADS_PER_CALL`] at once, whatever the guest starts. A
//! read or write without a permit waits for one (a `read` that finds none starts nothing
//! and reads nothing yet, as a read in flight does; `ready` waits for a permit first).
//!
//! A permit outlives its call while the system call it covers runs on, so work a hard stop
//! left on a blocking thread still counts; work not yet started when its stream drops
//! never starts.
//!
//! Writes to a file under a grant with a quota are charged under the grant's lock
//! (quota.rs, [`quota::write_charged`]); the permit is taken before the lock, so no holder
//! of the lock waits for a permit.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

use super::quota::{self, Quota};

/// The most reads and writes of one call's file streams on blocking threads at once.
pub(crate) const THREADS_PER_CALL: usize = 4;

/// The largest read or write one stream makes at once (wasmtime-wasi's, and the 64 KiB
/// buffer each stream is charged for, `ledger.rs`).
pub(crate) const STREAM_CHUNK_BYTES: usize = 64 << 10;

/// The bytes a `ready` reads when the guest has not asked for a size (wasmtime-wasi's).
const DEFAULT_READ_BYTES: usize = 4096;

/// The permits of one call's streams to run on blocking threads.
#[derive(Debug, Clone)]
pub(crate) struct StreamThreads(Arc<Semaphore>);

impl Default for StreamThreads {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(THREADS_PER_CALL)))
    }
}

impl StreamThreads {
    fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }

    async fn take(&self) -> OwnedSemaphorePermit {
        self.0.clone().acquire_owned().await.expect("the semaphore is never closed")
    }

    /// Permits free now (tests).
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.0.available_permits()
    }
}

/// A file's input stream from `position` on.
pub(crate) struct FileReader {
    file: Arc<std::fs::File>,
    position: u64,
    threads: StreamThreads,
    state: ReadState,
}

enum ReadState {
    Idle,
    Waiting(JoinHandle<ReadState>),
    DataAvailable(Bytes),
    Error(std::io::Error),
    Closed,
}

impl FileReader {
    pub(crate) fn new(file: Arc<std::fs::File>, position: u64, threads: StreamThreads) -> Self {
        Self { file, position, threads, state: ReadState::Idle }
    }

    /// Start reading `size` bytes on a blocking thread that holds `permit` until it is done.
    fn start(&mut self, size: usize, permit: OwnedSemaphorePermit) {
        let (file, position) = (self.file.clone(), self.position);
        self.state = ReadState::Waiting(tokio::task::spawn_blocking(move || {
            let _permit = permit;
            read_at(&file, position, size)
        }));
    }

    async fn wait(&mut self) {
        if let ReadState::Waiting(task) = &mut self.state {
            self.state = task.await.unwrap_or_else(|error| ReadState::Error(std::io::Error::other(error)));
        }
    }
}

fn read_at(file: &std::fs::File, position: u64, size: usize) -> ReadState {
    let mut buffer = BytesMut::zeroed(size.min(STREAM_CHUNK_BYTES));
    loop {
        match file.read_at(&mut buffer, position) {
            Ok(0) => return ReadState::Closed,
            Ok(read) => {
                buffer.truncate(read);
                return ReadState::DataAvailable(buffer.freeze());
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return ReadState::Error(error),
        }
    }
}

impl Drop for FileReader {
    fn drop(&mut self) {
        // A read not yet begun never begins; one begun finishes and lets its permit go.
        if let ReadState::Waiting(task) = &self.state {
            task.abort();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        match &mut self.state {
            ReadState::Idle => {
                if size > 0
                    && let Some(permit) = self.threads.try_take()
                {
                    self.start(size, permit);
                }
                // Without a permit nothing starts yet: `ready` waits for one.
                Ok(Bytes::new())
            }
            ReadState::DataAvailable(bytes) => {
                let chunk = bytes.split_to(bytes.len().min(size));
                if bytes.is_empty() {
                    self.state = ReadState::Idle;
                }
                self.position += chunk.len() as u64;
                Ok(chunk)
            }
            ReadState::Waiting(_) => Ok(Bytes::new()),
            ReadState::Error(_) => match std::mem::replace(&mut self.state, ReadState::Closed) {
                ReadState::Error(error) => Err(StreamError::LastOperationFailed(error.into())),
                _ => unreachable!("the state was an error"),
            },
            ReadState::Closed => Err(StreamError::Closed),
        }
    }

    async fn blocking_read(&mut self, size: usize) -> StreamResult<Bytes> {
        self.wait().await;
        if matches!(self.state, ReadState::Idle) && size > 0 {
            let permit = self.threads.take().await;
            self.start(size, permit);
            self.wait().await;
        }
        self.read(size)
    }

    async fn cancel(&mut self) {
        if let ReadState::Waiting(task) = std::mem::replace(&mut self.state, ReadState::Closed) {
            task.abort();
            let _ = task.await;
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {
        if matches!(self.state, ReadState::Idle) {
            // The guest waits for data without having asked for any: a read is started.
            let permit = self.threads.take().await;
            self.start(DEFAULT_READ_BYTES, permit);
        }
        self.wait().await;
    }
}

/// A file's output stream, at `position` on or appending (`None`); charged to the grant's
/// quota when it has one.
pub(crate) struct FileWriter {
    file: Arc<std::fs::File>,
    quota: Option<Arc<Quota>>,
    position: Option<u64>,
    threads: StreamThreads,
    state: WriteState,
}

enum WriteState {
    Ready,
    Writing(JoinHandle<Result<(), wasmtime::Error>>, Arc<Begun>),
    Failed(wasmtime::Error),
    Closed,
}

/// Whether a write has begun on its blocking thread, or was called off before it could:
/// whichever comes first wins.
#[derive(Default)]
struct Begun(std::sync::atomic::AtomicU8);

impl Begun {
    const WAITING: u8 = 0;
    const BEGUN: u8 = 1;
    const CALLED_OFF: u8 = 2;

    fn change(&self, to: u8) -> bool {
        use std::sync::atomic::Ordering;
        self.0.compare_exchange(Self::WAITING, to, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The blocking thread begins the write, unless it was called off.
    fn begin(&self) -> bool {
        self.change(Self::BEGUN)
    }

    /// Call the write off, unless it has begun.
    fn call_off(&self) -> bool {
        self.change(Self::CALLED_OFF)
    }
}

impl FileWriter {
    pub(crate) fn new(
        file: Arc<std::fs::File>,
        quota: Option<Arc<Quota>>,
        position: Option<u64>,
        threads: StreamThreads,
    ) -> Self {
        Self { file, quota, position, threads, state: WriteState::Ready }
    }

    /// The outcome of a finished write, taken: a failure closes the stream.
    fn take_failure(&mut self) -> StreamResult<()> {
        match std::mem::replace(&mut self.state, WriteState::Closed) {
            WriteState::Failed(error) => Err(StreamError::LastOperationFailed(error)),
            WriteState::Closed => Err(StreamError::Closed),
            other => {
                self.state = other;
                Ok(())
            }
        }
    }
}

/// Write all of `bytes` at `position`, or at the end (atomically, `RWF_APPEND`).
pub(crate) fn write_plain(file: &std::fs::File, position: Option<u64>, bytes: &[u8]) -> std::io::Result<()> {
    match position {
        Some(position) => file.write_all_at(bytes, position),
        None => {
            let mut left = bytes;
            while !left.is_empty() {
                left = &left[append(file, left)?..];
            }
            Ok(())
        }
    }
}

/// Append what one system call takes of `bytes` at the file's end, whatever else writes it.
fn append(file: &std::fs::File, bytes: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let vector = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    loop {
        // SAFETY: one vector over `bytes`, which lives across the call, on a descriptor
        // `file` keeps open.
        let written = unsafe { libc::pwritev2(file.as_raw_fd(), &vector, 1, 0, libc::RWF_APPEND) };
        if written >= 0 {
            return Ok(written as usize);
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => {}
            // A kernel older than 4.16: the end as it is now.
            Some(libc::ENOSYS | libc::EOPNOTSUPP) => return file.write_at(bytes, file.metadata()?.len()),
            _ => return Err(error),
        }
    }
}

/// A stream dropped with a write still waiting (for a permit, for the grant's lock, or for
/// a blocking thread) drops that write: its bytes and its file are held by no call once the
/// call's charges are given back, and a guest could leave one per stream, call after call.
/// A write that has begun finishes.
impl Drop for FileWriter {
    fn drop(&mut self) {
        if let WriteState::Writing(task, begun) = &self.state
            && begun.call_off()
        {
            task.abort();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {
        if let WriteState::Writing(task, _) = &mut self.state {
            self.state = match task.await {
                Ok(Ok(())) => WriteState::Ready,
                Ok(Err(error)) => WriteState::Failed(error),
                Err(error) => WriteState::Failed(wasmtime::format_err!("the write did not finish: {error}")),
            };
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        match self.state {
            WriteState::Ready => {}
            WriteState::Closed => return Err(StreamError::Closed),
            WriteState::Writing(..) | WriteState::Failed(_) => {
                return Err(StreamError::trap("write not permitted: check_write not called first"));
            }
        }
        if bytes.len() > STREAM_CHUNK_BYTES {
            return Err(StreamError::trap("write of more bytes than check_write allowed"));
        }
        let position = self.position;
        if let Some(next) = &mut self.position {
            *next = next.saturating_add(bytes.len() as u64);
        }
        let (file, quota, threads) = (self.file.clone(), self.quota.clone(), self.threads.clone());
        let begun = Arc::new(Begun::default());
        let called_off = begun.clone();
        // The permit, then the grant's lock, go with the write: once it has begun on its
        // thread it finishes, charged and settled under the lock, even if the stream is
        // dropped meanwhile; until then it may be called off (`Drop`, `cancel`).
        let task = tokio::spawn(async move {
            let permit = threads.take().await;
            let lock = match &quota {
                Some(quota) => Some(quota.lock.clone().lock_owned().await),
                None => None,
            };
            tokio::task::spawn_blocking(move || {
                let (_permit, _lock) = (permit, lock);
                if !called_off.begin() {
                    return Ok(());
                }
                match &quota {
                    Some(quota) => quota::write_charged(&file, quota, position, &bytes),
                    None => write_plain(&file, position, &bytes).map_err(wasmtime::Error::from),
                }
            })
            .await
            .unwrap_or_else(|error| Err(wasmtime::format_err!("the write did not finish: {error}")))
        });
        self.state = WriteState::Writing(task, begun);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Nothing is buffered but the write in flight, which `ready` waits for.
        self.take_failure()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.take_failure()?;
        Ok(match self.state {
            WriteState::Ready => STREAM_CHUNK_BYTES,
            _ => 0,
        })
    }

    /// The guest drops the stream: a write not begun never begins; one begun is waited for,
    /// so that it lands before the drop returns.
    async fn cancel(&mut self) {
        if let WriteState::Writing(task, begun) = std::mem::replace(&mut self.state, WriteState::Closed) {
            if begun.call_off() {
                task.abort();
            } else {
                let _ = task.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    /// Every permit of `threads`, as reads or writes in flight would hold them.
    async fn all_of(threads: &StreamThreads) -> Vec<OwnedSemaphorePermit> {
        let mut held = Vec::new();
        for _ in 0..THREADS_PER_CALL {
            held.push(threads.take().await);
        }
        held
    }

    /// While a call's reads hold every permit, another stream's read starts nothing and its
    /// `ready` waits; a permit let go lets it read.
    #[tokio::test]
    async fn a_read_waits_while_the_calls_permits_are_all_in_use() {
        let scratch = Scratch::new("streams-read");
        std::fs::write(scratch.path().join("f"), b"hello").unwrap();
        let file = Arc::new(std::fs::File::open(scratch.path().join("f")).unwrap());
        let threads = StreamThreads::default();
        let mut held = all_of(&threads).await;
        let mut reader = FileReader::new(file, 1, threads.clone());
        assert_eq!(reader.read(10).unwrap(), Bytes::new());
        assert!(matches!(reader.state, ReadState::Idle), "no read started without a permit");
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), reader.ready()).await;
        assert!(waited.is_err(), "ready waits for a permit");
        held.pop();
        tokio::time::timeout(std::time::Duration::from_secs(10), reader.ready())
            .await
            .expect("a permit came");
        assert_eq!(reader.read(10).unwrap(), Bytes::from_static(b"ello"));
        assert!(
            matches!(reader.blocking_read(10).await, Err(StreamError::Closed)),
            "then the end of the file"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while threads.free() != 1 {
            assert!(std::time::Instant::now() < deadline, "the read's permit came back");
            tokio::task::yield_now().await;
        }
    }

    /// A write waits for a permit too, and lands once one is let go; dropped while it waits,
    /// it never lands.
    #[tokio::test]
    async fn a_write_waits_for_a_permit_and_goes_with_its_dropped_stream() {
        let scratch = Scratch::new("streams-write");
        let file = Arc::new(std::fs::File::create(scratch.path().join("f")).unwrap());
        let threads = StreamThreads::default();
        let mut held = all_of(&threads).await;
        let mut dropped = FileWriter::new(file.clone(), None, Some(0), threads.clone());
        dropped.write(Bytes::from_static(b"never")).unwrap();
        drop(dropped);
        let mut cancelled = FileWriter::new(file.clone(), None, Some(0), threads.clone());
        cancelled.write(Bytes::from_static(b"never either")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), cancelled.cancel())
            .await
            .expect("a write not begun is called off at once, not waited for");
        let mut writer = FileWriter::new(file.clone(), None, None, threads.clone());
        assert_eq!(writer.check_write().unwrap(), STREAM_CHUNK_BYTES);
        writer.write(Bytes::from_static(b"abc")).unwrap();
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), writer.ready()).await;
        assert!(waited.is_err(), "the write waits for a permit");
        assert_eq!(file.metadata().unwrap().len(), 0);
        held.pop();
        tokio::time::timeout(std::time::Duration::from_secs(10), writer.ready())
            .await
            .expect("a permit came");
        writer.write(Bytes::from_static(b"def")).unwrap();
        writer.ready().await;
        writer.flush().unwrap();
        assert_eq!(
            std::fs::read(scratch.path().join("f")).unwrap(),
            b"abcdef",
            "appended, the dropped write never"
        );
    }

    /// A write still waiting for the grant's lock when its stream is dropped (its call
    /// over) is dropped with it, bytes, file and all; the file is left as it was. Before,
    /// it waited on, held by no call, and wrote once the lock came free.
    #[tokio::test]
    async fn a_write_waiting_for_the_lock_goes_with_its_dropped_stream() {
        let scratch = Scratch::new("streams-quota");
        let quota = Arc::new(Quota::measure(1 << 20, &std::fs::File::open(scratch.path()).unwrap()).unwrap());
        let file = Arc::new(std::fs::File::create(scratch.path().join("f")).unwrap());
        let held = quota.lock.clone().lock_owned().await;
        let mut stream =
            FileWriter::new(file.clone(), Some(quota.clone()), Some(0), StreamThreads::default());
        stream.write(Bytes::from(vec![b'w'; 64 << 10])).unwrap();
        assert!(matches!(stream.state, WriteState::Writing(..)));
        drop(stream);
        // The task held the file and the quota; both are let go once it is gone.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Arc::strong_count(&file) > 1 || Arc::strong_count(&quota) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped stream's write still waits for the lock"
            );
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(file.metadata().unwrap().len(), 0);
        assert_eq!(quota.used(), 0, "the write was never charged");
    }
}
