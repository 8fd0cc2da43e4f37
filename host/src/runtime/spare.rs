//! # Spare instances: the next call's fresh instance, made before the call arrives
//!
//! Creating a store and instantiating a component is half of what a short call costs in
//! the sandbox (the example `echo`: about 13 of 26 µs; BENCHMARKS.md). So once a call's
//! answer is out, the runtime makes the next instance of the same component ahead of time:
//! a *spare*. The next call of one of its tools under the same limits takes the spare and
//! binds it to itself (its control block, limiter, host-call fuel and deadlines, see
//! `call.rs`), and pays only for its guest function.
//!
//! A spare is exactly as fresh as an instance made on demand: no call has run in it, only
//! the component's own instantiation, under a budget; one whose instantiation left the
//! host holding anything (start code that called the host) is not kept. Each component keeps at most one;
//! at most [`SPARE_SLOTS`] exist at once (the pool reserves room for them, so spares never
//! take a slot a call needs), and together they hold at most [`SPARE_MEMORY_BYTES`] of
//! linear memory (a component of several memories could otherwise keep a call's worth of
//! memory idle per spare); shutdown drops them all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use wasmtime::{Engine, Store};

use super::call::{bounded_store, run_bounded};
use super::component::{GuestInstance, LoadedComponent};
use super::engine::Ticker;
use super::guest::GuestState;
use super::limits::ToolLimits;

/// Spares that may exist at once, across all components.
pub(crate) const SPARE_SLOTS: usize = 4;

/// Linear memory all spares may hold together; a spare that would pass it is not kept.
pub(crate) const SPARE_MEMORY_BYTES: usize = 64 << 20;

/// What spares may hold across the runtime: pool slots and linear memory (in KiB permits).
pub(crate) struct SpareBudget {
    slots: Arc<Semaphore>,
    memory_kib: Arc<Semaphore>,
}

impl SpareBudget {
    pub(crate) fn new() -> Self {
        Self {
            slots: Arc::new(Semaphore::new(SPARE_SLOTS)),
            memory_kib: Arc::new(Semaphore::new(SPARE_MEMORY_BYTES >> 10)),
        }
    }

    /// Spares alive now.
    pub(crate) fn spares(&self) -> usize {
        SPARE_SLOTS - self.slots.available_permits()
    }

    /// Linear memory the spares hold now.
    pub(crate) fn memory_bytes(&self) -> usize {
        ((SPARE_MEMORY_BYTES >> 10) - self.memory_kib.available_permits()) << 10
    }
}

/// How long a spare's instantiation may run (a component's start code runs in it), at
/// most: never longer than a call of the tool may run, since what start code computes
/// is the call's to use, and the call's own clock does not see it.
const SPARE_BUDGET: Duration = Duration::from_secs(1);

/// A fresh instance waiting for a call.
struct Spare {
    store: Store<GuestState>,
    instance: GuestInstance,
    /// The limits it was made for: only a call under the same limits takes it.
    limits: ToolLimits,
    _slot: OwnedSemaphorePermit,
    _memory: OwnedSemaphorePermit,
}

/// Where a component keeps its spare.
#[derive(Default)]
pub(crate) struct SpareSlot(Mutex<SlotState>);

#[derive(Default)]
struct SlotState {
    spare: Option<Spare>,
    /// A refill is under way: concurrent calls finishing together make one spare, not many.
    refilling: bool,
    /// The component left the tool set at a reload: calls still running on it make no
    /// spare, which would hold a spare slot and pool memory until they end.
    retired: bool,
}

impl SpareSlot {
    /// The spare, if there is one made for `limits` (one made for other limits is dropped:
    /// the refill after this call makes one for these).
    pub(crate) fn take(&self, limits: &ToolLimits) -> Option<(Store<GuestState>, GuestInstance)> {
        let spare = self.0.lock().unwrap().spare.take()?;
        (spare.limits == *limits).then_some((spare.store, spare.instance))
    }

    /// Drop the spare, if any.
    pub(crate) fn clear(&self) {
        drop(self.0.lock().unwrap().spare.take());
    }

    /// Drop the spare and make no more: the component was replaced or removed.
    pub(crate) fn retire(&self) {
        let mut state = self.0.lock().unwrap();
        state.retired = true;
        drop(state.spare.take());
    }

    /// Claim the right to make the spare: `None` when there is one, or one is being made.
    fn begin_refill(&self) -> Option<RefillClaim<'_>> {
        let mut state = self.0.lock().unwrap();
        if state.spare.is_some() || state.refilling || state.retired {
            return None;
        }
        state.refilling = true;
        Some(RefillClaim(self))
    }
}

/// The right to make a component's spare; given up when dropped.
struct RefillClaim<'a>(&'a SpareSlot);

impl RefillClaim<'_> {
    /// Keep `spare` unless the runtime shut down or the component retired. The check
    /// happens under the lock that [`SpareSlot::clear`] takes after shutdown is flagged
    /// (and [`SpareSlot::retire`] takes), so no spare outlives either.
    fn put(self, spare: Spare, shutdown: &watch::Receiver<bool>) {
        let mut state = self.0.0.lock().unwrap();
        if !*shutdown.borrow() && !state.retired {
            state.spare = Some(spare);
        }
        drop(state); // before the claim's drop takes the lock again
    }
}

impl Drop for RefillClaim<'_> {
    fn drop(&mut self) {
        self.0.0.lock().unwrap().refilling = false;
    }
}

/// What it takes to make a component's next spare; a finished call carries one.
pub(crate) struct Refill {
    pub(crate) engine: Engine,
    pub(crate) ticker: Arc<Ticker>,
    pub(crate) component: Arc<LoadedComponent>,
    pub(crate) limits: ToolLimits,
    pub(crate) budget: Arc<SpareBudget>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Refill {
    /// Make the component's spare, unless it has one, the runtime is shutting down, or
    /// every spare slot is taken. A spare that cannot be made is only logged: the next
    /// call instantiates on demand, as it would have anyway.
    pub(crate) async fn run(self) {
        if *self.shutdown.borrow() {
            return;
        }
        let Some(claim) = self.component.spare.begin_refill() else { return };
        let Ok(slot) = self.budget.slots.clone().try_acquire_owned() else { return };
        let _ticking = self.ticker.running();
        let budget = self.limits.max_duration.map_or(SPARE_BUDGET, |max| max.min(SPARE_BUDGET));
        let (mut store, deadline) = bounded_store(&self.engine, &self.component, &self.limits, budget);
        match run_bounded(self.component.pre.instantiate(&mut store), deadline).await {
            Some(Ok(instance)) => {
                // Start code may call the host while the component instantiates (open a
                // file, send a request): what it made the host hold would wait, idle and
                // charged to no call, in the spare (a descriptor count, claimed from the
                // server's shared budget, stays until the next open), and what it sent
                // would be counted against no call's budget. Such a component gets no
                // spare: each call instantiates its own and pays for its start code.
                let state = store.data_mut();
                if !state.table().is_empty() || !state.ledger().holds_nothing() || state.sent_http() {
                    tracing::debug!(component = %self.component.name, "no spare instance: its instantiation made the host hold resources");
                    return;
                }
                let kib = store.data().limiter.memory_used().div_ceil(1 << 10);
                let memory = u32::try_from(kib)
                    .ok()
                    .and_then(|kib| self.budget.memory_kib.clone().try_acquire_many_owned(kib).ok());
                let Some(memory) = memory else {
                    tracing::debug!(component = %self.component.name, "no spare instance: the spares' memory budget is spent");
                    return;
                };
                let spare = Spare { store, instance, limits: self.limits, _slot: slot, _memory: memory };
                claim.put(spare, &self.shutdown);
            }
            Some(Err(error)) => {
                tracing::debug!(component = %self.component.name, "no spare instance: {error:#}");
            }
            None => {
                tracing::debug!(component = %self.component.name, "no spare instance: instantiation ran past {budget:?}");
            }
        }
    }
}
