//! # What a call makes the host hold, charged to the call
//!
//! A guest's linear memory is bounded by its limiter (limits.rs). What the guest makes the
//! *host* hold on its behalf is not, unless it is counted: wasmtime-wasi gives every file
//! stream a 64 KiB buffer in host memory, copies a whole directory listing into host memory,
//! and keeps a host file descriptor for every open file and for every stream over one. One
//! [`Ledger`] per store counts them against the call's limits (`host_memory_bytes`,
//! `open_files`), and the server's [`DescriptorBudget`] counts descriptors across all
//! calls, so that however many calls open files, the listener, the log and other calls
//! always keep descriptors of their own.
//!
//! A stream's charge lives in the stream (a [`StreamCharge`] dropped with it), so it is
//! exact. Descriptors and listings are wasmtime-wasi's own types, which cannot carry a
//! charge; `files.rs` counts them in the call's resource table when a new one is asked for,
//! and the call's share of the server's budget is returned when its store is dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::limits::ToolLimits;
use super::streams::StreamThreads;

/// Host memory charged for one file stream: wasmtime-wasi's read and write buffer
/// (`MAX_READ_SIZE_ALLOC` and `FILE_WRITE_CAPACITY`, both 64 KiB and not configurable).
pub(crate) const STREAM_BUFFER_BYTES: usize = 64 << 10;

/// Why the host refused to hold more for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("the call's host memory budget is spent")]
    HostMemory,
    #[error("the call holds as many open files as it may")]
    OpenFiles,
    #[error("the server's descriptors for guests are all in use")]
    ServerDescriptors,
}

/// Descriptors every store may hold without drawing on the shared part of the budget, at
/// most: so that however many descriptors a few calls take, every other call can still
/// open a handful of files.
const GUARANTEED_PER_STORE: usize = 16;

/// Host file descriptors that guests may hold, across every call of the server: each store
/// (call, cleanup, spare) is guaranteed a few, and what a store holds beyond those comes
/// from one shared part, first come first served.
#[derive(Debug)]
pub struct DescriptorBudget {
    /// Descriptors each store may hold without drawing on the shared part.
    guaranteed: usize,
    shared: usize,
    used: AtomicUsize,
}

impl DescriptorBudget {
    /// `limit` descriptors for guests, of which `stores` (as many as the instance pool
    /// holds at once) are each guaranteed a few.
    pub fn new(limit: usize, stores: usize) -> Self {
        let guaranteed = GUARANTEED_PER_STORE.min(limit / stores.max(1));
        Self { guaranteed, shared: limit - guaranteed * stores, used: AtomicUsize::new(0) }
    }

    /// Descriptors guests hold now from the shared part.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Descriptors each store may hold without drawing on the shared part.
    pub fn guaranteed(&self) -> usize {
        self.guaranteed
    }

    fn try_take(&self, count: usize) -> bool {
        let take = |used: usize| used.checked_add(count).filter(|&total| total <= self.shared);
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, take).is_ok()
    }

    fn give_back(&self, count: usize) {
        self.used.fetch_sub(count, Ordering::AcqRel);
    }
}

/// One descriptor the host holds for guests beyond any store's life (a removed file kept
/// open to learn when nothing holds it, quota.rs), taken from the shared part of the
/// server's budget and given back when dropped.
#[derive(Debug)]
pub(crate) struct HeldDescriptor(Arc<DescriptorBudget>);

impl HeldDescriptor {
    /// One descriptor from `budget`'s shared part, if it has one left.
    pub(crate) fn take(budget: &Arc<DescriptorBudget>) -> Option<Self> {
        budget.try_take(1).then(|| Self(budget.clone()))
    }
}

impl Drop for HeldDescriptor {
    fn drop(&mut self) {
        self.0.give_back(1);
    }
}

/// The descriptors a store holds: open descriptors (as last counted) and file streams.
#[derive(Debug, Default)]
struct Held {
    descriptors: usize,
    streams: usize,
}

impl Held {
    fn total(&self) -> usize {
        self.descriptors + self.streams
    }
}

/// One store's account of what its guest makes the host hold.
#[derive(Debug)]
pub(crate) struct Ledger {
    host_memory_limit: usize,
    host_memory: AtomicUsize,
    open_files_limit: usize,
    held: Mutex<Held>,
    server: Arc<DescriptorBudget>,
    /// The blocking threads its file streams may use at once (streams.rs).
    stream_threads: StreamThreads,
}

impl Ledger {
    pub(crate) fn new(limits: &ToolLimits, server: Arc<DescriptorBudget>) -> Self {
        Self {
            host_memory_limit: limits.host_memory_bytes,
            host_memory: AtomicUsize::new(0),
            open_files_limit: limits.open_files,
            held: Mutex::default(),
            server,
            stream_threads: StreamThreads::default(),
        }
    }

    /// The permits its file streams' reads and writes run with.
    pub(crate) fn stream_threads(&self) -> StreamThreads {
        self.stream_threads.clone()
    }

    /// The server's budget this store's descriptors come from.
    pub(crate) fn server_descriptors(&self) -> &Arc<DescriptorBudget> {
        &self.server
    }

    /// Host memory charged now.
    pub(crate) fn host_memory(&self) -> usize {
        self.host_memory.load(Ordering::Relaxed)
    }

    /// Whether it holds nothing: no host memory, no descriptor, no stream.
    pub(crate) fn holds_nothing(&self) -> bool {
        self.host_memory() == 0 && self.held.lock().unwrap().total() == 0
    }

    /// Host memory the call may still be charged.
    pub(crate) fn host_memory_left(&self) -> usize {
        self.host_memory_limit.saturating_sub(self.host_memory())
    }

    /// Charge `bytes` of host memory, or refuse if the budget would be passed.
    pub(crate) fn charge_memory(&self, bytes: usize) -> Result<(), Refusal> {
        let limit = self.host_memory_limit;
        let take = |used: usize| used.checked_add(bytes).filter(|&total| total <= limit);
        match self.host_memory.fetch_update(Ordering::AcqRel, Ordering::Acquire, take) {
            Ok(_) => Ok(()),
            Err(_) => Err(Refusal::HostMemory),
        }
    }

    pub(crate) fn release_memory(&self, bytes: usize) {
        self.host_memory.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Move `held` to `next`, taking what it holds beyond the store's guarantee from the
    /// server's shared part (or giving it back); refused, `held` stays as it was.
    fn hold(&self, held: &mut Held, next: Held) -> Result<(), Refusal> {
        let guaranteed = self.server.guaranteed;
        let (before, after) =
            (held.total().saturating_sub(guaranteed), next.total().saturating_sub(guaranteed));
        if after > before {
            if !self.server.try_take(after - before) {
                return Err(Refusal::ServerDescriptors);
            }
        } else {
            self.server.give_back(before - after);
        }
        *held = next;
        Ok(())
    }

    /// The call now holds `open` descriptors, one of which it is about to open: charge
    /// them (against the call's `open_files`, with its streams, and the server's budget), or
    /// refuse. A refused open leaves the earlier count charged.
    pub(crate) fn charge_descriptors(&self, open: usize) -> Result<(), Refusal> {
        let mut held = self.held.lock().unwrap();
        if open + held.streams > self.open_files_limit {
            return Err(Refusal::OpenFiles);
        }
        let streams = held.streams;
        self.hold(&mut held, Held { descriptors: open, streams })
    }

    /// Record that the call holds `open` descriptors (fewer than charged: some closed, or
    /// an open failed).
    pub(crate) fn settle_descriptors(&self, open: usize) {
        let mut held = self.held.lock().unwrap();
        let next = Held { descriptors: open.min(held.descriptors), streams: held.streams };
        // Holding less never needs more of the shared part.
        let _ = self.hold(&mut held, next);
    }

    /// Charge a new file stream: its buffer, and the descriptor it may keep open.
    pub(crate) fn charge_stream(self: &Arc<Self>, open_descriptors: usize) -> Result<StreamCharge, Refusal> {
        self.charge_open(Some(open_descriptors), 1, STREAM_BUFFER_BYTES)
    }

    /// Charge an outbound connection like a stream: its descriptor, and its buffers
    /// (egress.rs caps hyper's at a stream's size) plus `extra_bytes` (TLS).
    pub(crate) fn charge_connection(self: &Arc<Self>, extra_bytes: usize) -> Result<StreamCharge, Refusal> {
        self.charge_open(None, 1, STREAM_BUFFER_BYTES + extra_bytes)
    }

    /// Charge a name lookup under way: the `sockets` its queries may hold at once, and
    /// `bytes` of buffers.
    pub(crate) fn charge_lookup(
        self: &Arc<Self>,
        sockets: usize,
        bytes: usize,
    ) -> Result<StreamCharge, Refusal> {
        self.charge_open(None, sockets, bytes)
    }

    /// Charge `streams` more open streams, connections or sockets holding `bytes`, with
    /// the call's open descriptors recounted as `open_descriptors` if given.
    fn charge_open(
        self: &Arc<Self>,
        open_descriptors: Option<usize>,
        streams: usize,
        bytes: usize,
    ) -> Result<StreamCharge, Refusal> {
        let mut held = self.held.lock().unwrap();
        let descriptors = open_descriptors.unwrap_or(held.descriptors);
        let next = Held { descriptors, streams: held.streams + streams };
        if next.total() > self.open_files_limit {
            return Err(Refusal::OpenFiles);
        }
        self.charge_memory(bytes)?;
        if let Err(refusal) = self.hold(&mut held, next) {
            self.release_memory(bytes);
            return Err(refusal);
        }
        Ok(StreamCharge { ledger: self.clone(), streams, bytes })
    }
}

impl Drop for Ledger {
    /// The store is gone, and with it every descriptor it held.
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap();
        self.server.give_back(held.total().saturating_sub(self.server.guaranteed));
    }
}

/// A file stream's, a connection's or a lookup's charge (its descriptors and buffers),
/// given back when it drops.
#[derive(Debug)]
pub(crate) struct StreamCharge {
    ledger: Arc<Ledger>,
    streams: usize,
    bytes: usize,
}

impl StreamCharge {
    /// Up to `bytes` of its memory, as a charge of its own: what outlives the descriptor
    /// (a connection's buffered response body, kept by the guest after the socket closed).
    pub(crate) fn split_memory(&mut self, bytes: usize) -> MemoryCharge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        MemoryCharge { ledger: self.ledger.clone(), bytes }
    }
}

impl Drop for StreamCharge {
    fn drop(&mut self) {
        let ledger = &self.ledger;
        let mut held = ledger.held.lock().unwrap();
        let next = Held { descriptors: held.descriptors, streams: held.streams - self.streams };
        let _ = ledger.hold(&mut held, next);
        ledger.release_memory(self.bytes);
    }
}

/// Host memory charged while it is held, given back when this drops (a buffer that lives
/// inside another object, such as an outgoing HTTP body's).
#[derive(Debug)]
pub(crate) struct MemoryCharge {
    ledger: Arc<Ledger>,
    bytes: usize,
}

impl Ledger {
    /// Charge `bytes` of host memory until the returned charge drops.
    pub(crate) fn hold_memory(self: &Arc<Self>, bytes: usize) -> Result<MemoryCharge, Refusal> {
        self.charge_memory(bytes)?;
        Ok(MemoryCharge { ledger: self.clone(), bytes })
    }
}

impl MemoryCharge {
    /// Hand what it holds to another owner that gives it back (a resource's tracked
    /// charge, `GuestState::track_charge`): not given back here. The bytes.
    pub(crate) fn hand_over(mut self) -> usize {
        std::mem::take(&mut self.bytes)
    }
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        self.ledger.release_memory(self.bytes);
    }
}

/// Resources in a call's table charged to its host memory while they live, for types
/// that cannot carry their charge (wasmtime-wasi's and wasmtime-wasi-http's own): each is
/// known by its slot and type, and the table is checked for the ones the guest dropped
/// before the next charge. A slot reused by a new resource of the same type, before a
/// check saw the old one go, keeps the old charge until the new one is tracked (which
/// gives it back); an untracked one keeps it until it goes: the error is only ever on the
/// side of charging more.
#[derive(Default)]
pub(crate) struct TableCharges(Vec<TableCharge>);

struct TableCharge {
    rep: u32,
    bytes: usize,
    alive: fn(&mut dyn std::any::Any) -> bool,
}

impl TableCharges {
    /// Remember that the resource of type `T` at `rep`, just made, was charged `bytes`. An
    /// entry left at `rep` was a dropped resource's whose handle the table gave out again
    /// before a settle saw it gone (to an untracked resource of its type, which a settle
    /// takes for it): its charge is given back to `ledger` now.
    pub(crate) fn track<T: 'static>(&mut self, rep: u32, bytes: usize, ledger: &Ledger) {
        self.0.retain(|charge| {
            let stale = charge.rep == rep;
            if stale {
                ledger.release_memory(charge.bytes);
            }
            !stale
        });
        self.0.push(TableCharge { rep, bytes, alive: |entry| entry.is::<T>() });
    }

    /// What the resource at `rep` was charged, if tracked (an untracked resource at a
    /// handle reused before a settle shows its dead predecessor's charge).
    pub(crate) fn charged(&self, rep: u32) -> Option<usize> {
        self.0.iter().rev().find(|charge| charge.rep == rep).map(|charge| charge.bytes)
    }

    /// Give back to `ledger` the charge of every tracked resource the guest has dropped.
    pub(crate) fn settle(&mut self, table: &mut wasmtime::component::ResourceTable, ledger: &Ledger) {
        self.0.retain(|charge| {
            let alive = table.get_any_mut(charge.rep).is_ok_and(|entry| (charge.alive)(entry));
            if !alive {
                ledger.release_memory(charge.bytes);
            }
            alive
        });
    }
}

/// The process's soft limit on open files.
pub(crate) fn open_file_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// Raise the process's soft limit on open files to its hard limit (the default soft limit,
/// often 1,024, is far below what many calls holding files need); returns the new limit.
pub fn raise_open_file_limit() -> std::io::Result<usize> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(open_file_limit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(memory: usize, files: usize, server: &Arc<DescriptorBudget>) -> Arc<Ledger> {
        let limits = ToolLimits { host_memory_bytes: memory, open_files: files, ..ToolLimits::default() };
        Arc::new(Ledger::new(&limits, server.clone()))
    }

    #[test]
    fn streams_are_charged_until_dropped_and_files_count_with_them() {
        // One store, guaranteed 16 of 100; 84 shared.
        let server = Arc::new(DescriptorBudget::new(100, 1));
        assert_eq!(server.guaranteed(), 16);
        let ledger = ledger(3 * STREAM_BUFFER_BYTES, 24, &server);
        let streams: Vec<_> = (0..3).map(|_| ledger.charge_stream(0).unwrap()).collect();
        assert_eq!(ledger.charge_stream(0).unwrap_err(), Refusal::HostMemory);
        assert_eq!(ledger.charge_descriptors(22).unwrap_err(), Refusal::OpenFiles, "3 streams + 22 > 24");
        ledger.charge_descriptors(21).unwrap();
        assert_eq!(server.in_use(), 24 - 16);
        drop(streams);
        assert_eq!((ledger.host_memory(), server.in_use()), (0, 21 - 16));
        drop(ledger);
        assert_eq!(server.in_use(), 0, "the store's descriptors go back with it");
    }

    #[test]
    fn every_store_keeps_its_guarantee_whatever_the_others_take() {
        // Two stores guaranteed 16 each of 52: 20 shared.
        let server = Arc::new(DescriptorBudget::new(52, 2));
        let greedy = ledger(1 << 20, 1000, &server);
        let modest = ledger(1 << 20, 1000, &server);
        greedy.charge_descriptors(36).unwrap();
        assert_eq!(greedy.charge_descriptors(37).unwrap_err(), Refusal::ServerDescriptors);
        modest.charge_descriptors(16).unwrap();
        assert_eq!(modest.charge_descriptors(17).unwrap_err(), Refusal::ServerDescriptors);
        greedy.settle_descriptors(30);
        assert_eq!(server.in_use(), 14, "closed descriptors are given back at the next count");
        modest.charge_descriptors(22).unwrap();
    }
}
