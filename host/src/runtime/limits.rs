//! Per-tool limits and the `ResourceLimiter` that enforces the memory and table ones.
//!
//! `memory_bytes` is the call's total: every linear memory of every core instance of the
//! component counts against it, from its creation at instantiation to its last growth. A
//! component of four memories gets the same budget as one of a single memory, not four
//! times it (wasmtime's own `StoreLimits` bounds each memory alone).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// What one call of a tool may use. Every limit is enforced by the host, whatever the guest
/// or the client does.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLimits {
    /// Linear memory of the whole call, in bytes: all of the component's memories together.
    /// A component whose memories' initial sizes exceed it cannot be instantiated (it is
    /// refused at load); growth past it fails, and a guest that then traps is reported as
    /// out of memory.
    pub memory_bytes: usize,
    /// Elements per table.
    pub table_elements: usize,
    /// Core and component instances per store.
    pub instances: usize,
    /// Tables per store.
    pub tables: usize,
    /// Linear memories per store.
    pub memories: usize,
    /// Bytes the guest may pass to one host call (wasmtime's host-call fuel).
    pub hostcall_bytes: usize,
    /// Size of a result (content plus structured JSON), in bytes.
    pub result_bytes: usize,
    /// Size of the cleanup note, in bytes; a larger note traps.
    pub note_bytes: usize,
    /// Host resources (streams, pollables, open files) an instance may hold at once; they
    /// live in host memory, outside `memory_bytes`. Creating one more traps.
    pub host_resources: usize,
    /// Host memory a call may make the host hold for it outside its linear memory: the
    /// read and write buffers of its file streams (64 KiB each, wasmtime-wasi's buffer) and
    /// the directory listings it has not dropped. What would pass it is refused with
    /// `insufficient-memory`. Its structured output, parsed, is held to it on its own (an
    /// output that would take more is an invalid result).
    pub host_memory_bytes: usize,
    /// Files and directories a call may hold open at once (each is a host descriptor,
    /// and each of its file streams may keep one open too, so both count). One more is
    /// refused with `quota`.
    pub open_files: usize,
    /// Outbound HTTP requests a call may make (egress.rs); more get
    /// `connection-limit-reached`.
    pub http_requests: usize,
    /// Bytes of HTTP response bodies a call may receive, all its requests together; past
    /// it, the body fails with `HTTP-response-body-size`.
    pub http_response_bytes: usize,
    /// Bytes of HTTP request bodies a call may send, all its requests together; past it
    /// (or when a request's `content-length` alone would pass what is left), the request
    /// fails with `HTTP-request-body-size`.
    pub http_request_bytes: usize,
    /// How long resolving, connecting and the TLS handshake of one request may take; a
    /// guest may ask for less.
    pub http_connect_timeout: Duration,
    /// How long a request may wait for the response head, and for each next piece of its
    /// body; a guest may ask for less.
    pub http_first_byte_timeout: Duration,
    /// Bytes an instance may send to the operator's log, through stderr and the `log`
    /// import together; the rest is dropped.
    pub stderr_bytes: usize,
    /// Stop the call when it reports no progress for this long (progress resets it).
    pub idle_timeout: Option<Duration>,
    /// Stop the call when it has run this long, whatever it reports.
    pub max_duration: Option<Duration>,
    /// How long a stopped call may take to return on its own before the hard stop.
    pub grace: Duration,
    /// Time budget of `cleanup`, which runs in a fresh instance after a stop.
    pub cleanup_budget: Duration,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            instances: 32,
            tables: 16,
            memories: 4,
            hostcall_bytes: 16 << 20,
            result_bytes: 4 << 20,
            note_bytes: 64 << 10,
            // wasmtime's own default is a million, hundreds of MiB of host memory.
            host_resources: 10_000,
            host_memory_bytes: 16 << 20,
            open_files: 256,
            http_requests: 32,
            http_response_bytes: 8 << 20,
            http_request_bytes: 8 << 20,
            http_connect_timeout: Duration::from_secs(5),
            http_first_byte_timeout: Duration::from_secs(30),
            stderr_bytes: 64 << 10,
            idle_timeout: Some(Duration::from_secs(60)),
            max_duration: Some(Duration::from_secs(300)),
            grace: Duration::from_millis(250),
            cleanup_budget: Duration::from_secs(1),
        }
    }
}

/// What the limiter saw of a call's linear memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryEvents {
    /// A growth was refused: the trap a guest raises after a failed allocation is then
    /// reported as out of memory.
    pub(crate) refused: AtomicBool,
    /// The guest grew a memory while it ran (not at instantiation): worth a hint to the
    /// operator, since every such call pays for page-protection changes.
    pub(crate) grew: AtomicBool,
}

/// Enforces a call's limits on its linear memories and tables, and reports what happens to
/// memory to the call's control block.
pub(crate) struct GuestLimiter {
    /// Table elements, instances, tables and memories per store: wasmtime's own limiter.
    limits: StoreLimits,
    /// The call's budget for all its linear memories together.
    memory_budget: usize,
    /// Bytes of linear memory granted so far, all memories together. Memories are never
    /// freed while the store lives, so this only grows.
    memory_used: usize,
    memory: Arc<MemoryEvents>,
}

impl GuestLimiter {
    pub(crate) fn new(limits: &ToolLimits, memory: Arc<MemoryEvents>) -> Self {
        let store_limits = StoreLimitsBuilder::new()
            .table_elements(limits.table_elements)
            .instances(limits.instances)
            .tables(limits.tables)
            .memories(limits.memories)
            .build();
        Self { limits: store_limits, memory_budget: limits.memory_bytes, memory_used: 0, memory }
    }

    /// The same limiter for the call that takes a spare instance: the memory the spare's
    /// instantiation was granted stays charged, now to this call.
    pub(crate) fn rebind(&mut self, limits: &ToolLimits, memory: Arc<MemoryEvents>) {
        let used = self.memory_used;
        *self = Self::new(limits, memory);
        self.memory_used = used;
    }

    /// Linear memory granted to the store so far, all memories together.
    pub(crate) fn memory_used(&self) -> usize {
        self.memory_used
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Growth past the memory's own maximum fails anyway: refuse it here, before it is
        // charged (wasmtime calls `memory_grow_failed` for it, which must not refund).
        let growth = desired.saturating_sub(current);
        let allowed = maximum.is_none_or(|maximum| desired <= maximum)
            && self.memory_used.checked_add(growth).is_some_and(|total| total <= self.memory_budget);
        if allowed {
            self.memory_used += growth;
        } else {
            self.memory.refused.store(true, Ordering::Relaxed);
        }
        if current > 0 {
            // Not the memory's creation at instantiation: the guest grew it.
            self.memory.grew.store(true, Ordering::Relaxed);
        }
        Ok(allowed)
    }
    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_bounded_for_all_of_a_store_s_memories_together() {
        let limits = ToolLimits { memory_bytes: 8 << 20, ..ToolLimits::default() };
        let events = Arc::new(MemoryEvents::default());
        let mut limiter = GuestLimiter::new(&limits, events.clone());
        // Three memories of 3 MiB are created at instantiation: each fits, the third does not
        // fit beside the first two.
        assert!(limiter.memory_growing(0, 3 << 20, None).unwrap());
        assert!(limiter.memory_growing(0, 3 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 3 << 20, None).unwrap());
        assert!(events.refused.load(Ordering::Relaxed));
        // Growth is charged by its increase, up to the total.
        assert!(limiter.memory_growing(3 << 20, 5 << 20, None).unwrap());
        assert!(!limiter.memory_growing(5 << 20, (5 << 20) + 1, None).unwrap());
        assert!(!limiter.memory_growing(0, 1 << 20, Some(1 << 10)).unwrap(), "past the memory's own maximum");
        assert_eq!(limiter.memory_used(), 8 << 20);
        // A spare's memory stays charged to the call that takes it.
        limiter.rebind(&limits, Arc::new(MemoryEvents::default()));
        assert!(!limiter.memory_growing(0, 1, None).unwrap());
    }
}
