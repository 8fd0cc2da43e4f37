//! # Fair call slots: tenants take turns, not first come first served
//!
//! The pool has `max_concurrent_calls` slots. When calls wait for one, a freed slot goes
//! to the next tenant in a round (each tenant's own waiters in their order), so a tenant
//! with 200 calls queued delays another tenant's call by at most one slot's turn, not by
//! its whole queue. A tenant's `max_concurrent_calls` caps the slots it holds at once;
//! its calls over the cap wait in its queue (the queue timeout bounds every wait).
//! Calls without a tenant (no `[[tenants]]` configured) share one queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The gate in front of the pool's slots.
pub(crate) struct FairSlots {
    state: Mutex<State>,
}

struct State {
    free: usize,
    tenants: HashMap<Arc<str>, TenantQueue>,
    /// Tenants with waiters, in turn order: the front is served next.
    turns: VecDeque<Arc<str>>,
}

#[derive(Default)]
struct TenantQueue {
    holding: usize,
    cap: Option<usize>,
    waiters: VecDeque<oneshot::Sender<()>>,
    /// How many waiters there may be before those that gave up are dropped: a waiter
    /// leaves its sender behind, and a tenant held at its cap may never be handed a slot
    /// to drop them on the way (twice those live at the last pruning, so amortised O(1)).
    prune_at: usize,
}

/// Waiters kept before the first pruning of a queue.
const PRUNE_FIRST_AT: usize = 64;

impl TenantQueue {
    fn under_cap(&self) -> bool {
        self.cap.is_none_or(|cap| self.holding < cap)
    }
}

/// A slot held; given back (to the next tenant in turn) when dropped.
pub(crate) struct FairPermit {
    slots: Arc<FairSlots>,
    tenant: Arc<str>,
}

impl Drop for FairPermit {
    fn drop(&mut self) {
        self.slots.release(&self.tenant);
    }
}

/// A place in a tenant's queue; if it is dropped after a slot was handed to it (the call
/// gave up waiting at that very moment), the slot is passed on.
struct Waiting {
    slots: Arc<FairSlots>,
    tenant: Arc<str>,
    receiver: oneshot::Receiver<()>,
    granted: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.granted && self.receiver.try_recv().is_ok() {
            self.slots.release(&self.tenant);
        }
    }
}

impl FairSlots {
    pub(crate) fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State { free: slots, tenants: HashMap::new(), turns: VecDeque::new() }),
        })
    }

    /// Wait for a slot for a call of `tenant` (capped at `cap` slots at once).
    #[cfg(test)]
    pub(crate) async fn acquire(self: &Arc<Self>, tenant: &Arc<str>, cap: Option<usize>) -> FairPermit {
        self.acquire_noting(tenant, cap, || {}).await
    }

    /// [`FairSlots::acquire`], calling `queued` when no slot was free at once and the call
    /// joined its tenant's queue.
    pub(crate) async fn acquire_noting(
        self: &Arc<Self>,
        tenant: &Arc<str>,
        cap: Option<usize>,
        queued: impl FnOnce(),
    ) -> FairPermit {
        let receiver = {
            let mut state = self.state.lock().unwrap();
            let free = state.free;
            let queue = state.tenants.entry(tenant.clone()).or_default();
            queue.cap = cap;
            if free > 0 && queue.waiters.is_empty() && queue.under_cap() {
                queue.holding += 1;
                state.free -= 1;
                return FairPermit { slots: self.clone(), tenant: tenant.clone() };
            }
            let (sender, receiver) = oneshot::channel();
            if queue.waiters.len() >= queue.prune_at.max(PRUNE_FIRST_AT) {
                queue.waiters.retain(|waiter| !waiter.is_closed());
                queue.prune_at = queue.waiters.len() * 2;
            }
            queue.waiters.push_back(sender);
            if !state.turns.contains(tenant) {
                state.turns.push_back(tenant.clone());
            }
            receiver
        };
        queued();
        let mut waiting = Waiting { slots: self.clone(), tenant: tenant.clone(), receiver, granted: false };
        // The sender is only dropped with its slot handed over or the gate gone.
        let _ = (&mut waiting.receiver).await;
        waiting.granted = true;
        FairPermit { slots: self.clone(), tenant: tenant.clone() }
    }

    /// A slot of `tenant`'s is free: hand it to the next tenant in turn that may take it.
    fn release(&self, tenant: &Arc<str>) {
        let mut state = self.state.lock().unwrap();
        if let Some(queue) = state.tenants.get_mut(tenant) {
            queue.holding -= 1;
        }
        state.free += 1;
        Self::hand_out(&mut state);
        // Forget tenants with nothing held or queued: their entries stay bounded by
        // the calls in flight.
        if let Some(queue) = state.tenants.get(tenant)
            && queue.holding == 0
            && queue.waiters.is_empty()
        {
            state.tenants.remove(tenant);
        }
    }

    /// While slots are free, give one to each tenant in turn that has a live waiter and is
    /// under its cap.
    fn hand_out(state: &mut State) {
        let mut passes = state.turns.len();
        while state.free > 0 && passes > 0 {
            let Some(next) = state.turns.pop_front() else { break };
            passes -= 1;
            let queue = state.tenants.get_mut(&next).expect("a tenant in turn has a queue");
            if !queue.under_cap() {
                state.turns.push_back(next);
                continue;
            }
            let mut handed = false;
            while let Some(waiter) = queue.waiters.pop_front() {
                if waiter.send(()).is_ok() {
                    handed = true;
                    break;
                }
            }
            if handed {
                queue.holding += 1;
                state.free -= 1;
                passes = state.turns.len() + 1;
            }
            if !queue.waiters.is_empty() {
                state.turns.push_back(next);
            } else if queue.holding == 0 {
                state.tenants.remove(&next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_next_tenant_in_turn() {
        let slots = FairSlots::new(1);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = slots.acquire(&a, None).await;
        // Tenant a queues three calls, then b one: b is served right after a's first.
        let (order, mut tasks) = (Arc::new(Mutex::new(Vec::new())), Vec::new());
        for (index, tenant) in [a.clone(), a.clone(), a.clone(), b.clone()].into_iter().enumerate() {
            let (gate, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let permit = gate.acquire(&tenant, None).await;
                order.lock().unwrap().push(format!("{tenant}{index}"));
                drop(permit);
            }));
            tokio::task::yield_now().await;
            // Each is queued before the next.
            let queued = |slots: &FairSlots| {
                slots.state.lock().unwrap().tenants.values().map(|queue| queue.waiters.len()).sum::<usize>()
            };
            while queued(&slots) < index + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a0", "b3", "a1", "a2"]);
    }

    #[tokio::test]
    async fn a_tenant_cap_holds_its_calls_in_its_queue() {
        let slots = FairSlots::new(4);
        let a: Arc<str> = "a".into();
        let held = slots.acquire(&a, Some(1)).await;
        let waiting = tokio::time::timeout(Duration::from_millis(50), slots.acquire(&a, Some(1))).await;
        assert!(waiting.is_err(), "a second call passed the tenant's cap of 1");
        // Another tenant is not held up by it.
        let _b = slots.acquire(&"b".into(), None).await;
        drop(held);
        let _again = slots.acquire(&a, Some(1)).await;
        // A waiter that gave up left no slot behind.
        assert_eq!(slots.state.lock().unwrap().free, 2);
    }

    #[tokio::test]
    async fn waiters_that_gave_up_are_not_kept_while_their_tenant_stays_at_its_cap() {
        let slots = FairSlots::new(4);
        let a: Arc<str> = "a".into();
        let _held = slots.acquire(&a, Some(1)).await;
        for _ in 0..1_000 {
            let gave_up = tokio::time::timeout(Duration::ZERO, slots.acquire(&a, Some(1))).await;
            assert!(gave_up.is_err());
        }
        let kept = slots.state.lock().unwrap().tenants[&a].waiters.len();
        assert!(kept <= PRUNE_FIRST_AT, "{kept} senders of waiters that gave up are kept");
    }
}
