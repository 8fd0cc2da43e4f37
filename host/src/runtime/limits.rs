//! Per-tool limits and the `ResourceLimiter` that enforces the memory and table ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// What one call of a tool may use. Every limit is enforced by the host, whatever the guest
/// or the client does.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLimits {
    /// Linear memory, per memory, in bytes. Growth past it fails; a guest that then traps is
    /// reported as out of memory.
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

/// Wasmtime's `StoreLimits`, reporting what happens to memory to the call's control block.
pub(crate) struct GuestLimiter {
    limits: StoreLimits,
    memory: Arc<MemoryEvents>,
}

impl GuestLimiter {
    pub(crate) fn new(limits: &ToolLimits, memory: Arc<MemoryEvents>) -> Self {
        let limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            .instances(limits.instances)
            .tables(limits.tables)
            .memories(limits.memories)
            .build();
        Self { limits, memory }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if !allowed {
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
