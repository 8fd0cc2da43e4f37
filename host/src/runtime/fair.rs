//! # Fair call slots: tenants take turns, not first come first served
//!
//! The pool has `max_concurrent_calls` slots. When calls wait for one, a freed slot goes
//! to the next tenant in a round (each tenant's own waiters in their order), so a tenant
//! with 200 calls queued delays another tenant's call by at most one slot's turn, not by
//! its whole queue. A tenant's `max_concurrent_calls` caps the slots it holds at once;
//! its calls over the cap wait in its queue (the queue timeout bounds every wait).
//! Calls without a tenant (no `[[tenants]]` configured) share one queue.
//!
//! Turns alone only share the slots that come free: a tenant that took every slot with
//! calls that run for minutes would keep the others out for as long. So with two or more
//! tenants the slots are split as the admission bound is (`dispatch/admission.rs`): half
//! into a guaranteed part per tenant, the other half shared, and a tenant holds slots
//! beyond its part only from the shared half. However the others flood, each tenant can
//! always take its own part at once (with two tenants and 64 slots, 16 each); one without
//! a `max_concurrent_calls` of its own holds at most half the slots.

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
    parts: Parts,
    /// Slots tenants hold beyond their guaranteed parts, in all (at most `parts.shared`).
    beyond: usize,
}

/// How the slots are split among two or more tenants (all zero: not split).
#[derive(Clone, Copy, Default)]
struct Parts {
    /// Slots each tenant can always take.
    guaranteed: usize,
    /// Slots held beyond the guaranteed parts, by all tenants together.
    shared: usize,
    /// The most a tenant without a cap of its own holds.
    default_cap: Option<usize>,
}

/// What the operator is told when the slots are too few to give each of the tenants a
/// guaranteed part of one slot or more: they then only take turns, and one tenant's
/// long calls may hold half the slots.
pub(crate) fn too_few_slots(slots: usize, tenants: usize) -> Option<String> {
    (tenants >= 2 && Parts::of(slots, tenants).guaranteed == 0).then(|| {
        format!(
            "{tenants} tenants share {slots} call slots, too few for each to be guaranteed one \
             (half the slots are split into the tenants' parts): their calls only take turns. \
             Set [server] max_concurrent_calls to {} or more",
            2 * tenants
        )
    })
}

impl Parts {
    fn of(slots: usize, tenants: usize) -> Self {
        if tenants < 2 {
            return Self { guaranteed: 0, shared: slots, default_cap: None };
        }
        let guaranteed = slots / (2 * tenants);
        Self { guaranteed, shared: slots - guaranteed * tenants, default_cap: Some((slots / 2).max(1)) }
    }
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

    /// Whether the tenant may take one more slot, should one be free: under its cap, and
    /// within its guaranteed part or with room left in the shared rest.
    fn may_take(&self, parts: &Parts, beyond: usize) -> bool {
        self.under_cap() && (self.holding < parts.guaranteed || beyond < parts.shared)
    }

    /// Count a slot taken: how much it adds to what tenants hold beyond their parts.
    fn take(&mut self, parts: &Parts) -> usize {
        self.holding += 1;
        usize::from(self.holding > parts.guaranteed)
    }
}

/// Why a call found no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its tenant holds as many as it may: its `max_concurrent_calls`, or half the slots.
    TenantCap(usize),
    /// Its tenant holds its guaranteed part, and the others hold the whole shared rest.
    Shared,
    /// Every slot is in use.
    Pool,
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
        if self.granted {
            return;
        }
        // Closed first: a slot handed over between the check and the receiver's drop
        // would otherwise be counted as held and never given back.
        self.receiver.close();
        if self.receiver.try_recv().is_ok() {
            self.slots.release(&self.tenant);
        }
    }
}

impl FairSlots {
    /// The gate in front of `slots` slots, shared by `tenants` tenants (fewer than two:
    /// not split into parts).
    pub(crate) fn new(slots: usize, tenants: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: slots,
                tenants: HashMap::new(),
                turns: VecDeque::new(),
                parts: Parts::of(slots, tenants),
                beyond: 0,
            }),
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
            let mut guard = self.state.lock().unwrap();
            let state = &mut *guard;
            let (free, parts, beyond) = (state.free, state.parts, state.beyond);
            let queue = state.tenants.entry(tenant.clone()).or_default();
            queue.cap = cap.or(parts.default_cap);
            if free > 0 && queue.waiters.is_empty() && queue.may_take(&parts, beyond) {
                state.beyond += queue.take(&parts);
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

    /// Why a call of `tenant` (capped at `cap`) found no slot it could take.
    pub(crate) fn why_full(&self, tenant: &Arc<str>, cap: Option<usize>) -> Full {
        let state = self.state.lock().unwrap();
        let holding = state.tenants.get(tenant).map_or(0, |queue| queue.holding);
        match cap.or(state.parts.default_cap) {
            Some(cap) if holding >= cap => Full::TenantCap(cap),
            _ if state.parts.default_cap.is_some() && holding >= state.parts.guaranteed => Full::Shared,
            _ => Full::Pool,
        }
    }

    /// A slot of `tenant`'s is free: hand it to the next tenant in turn that may take it.
    fn release(&self, tenant: &Arc<str>) {
        let mut guard = self.state.lock().unwrap();
        let state = &mut *guard;
        let guaranteed = state.parts.guaranteed;
        if let Some(queue) = state.tenants.get_mut(tenant) {
            let was_beyond = queue.holding > guaranteed;
            queue.holding -= 1;
            state.beyond -= usize::from(was_beyond);
        }
        state.free += 1;
        Self::hand_out(state);
        // Forget tenants with nothing held or queued: their entries stay bounded by
        // the calls in flight.
        if let Some(queue) = state.tenants.get(tenant)
            && queue.holding == 0
            && queue.waiters.is_empty()
        {
            state.tenants.remove(tenant);
        }
    }

    /// While slots are free, give one to each tenant in turn that has a live waiter and may
    /// take one (under its cap, within its part or the shared rest).
    fn hand_out(state: &mut State) {
        let mut passes = state.turns.len();
        let parts = state.parts;
        while state.free > 0 && passes > 0 {
            let Some(next) = state.turns.pop_front() else { break };
            passes -= 1;
            let beyond = state.beyond;
            let queue = state.tenants.get_mut(&next).expect("a tenant in turn has a queue");
            if !queue.may_take(&parts, beyond) {
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
                state.beyond += queue.take(&parts);
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
        let slots = FairSlots::new(1, 0);
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

    /// Every slot a tenant can take at once, without waiting.
    async fn take_all(slots: &Arc<FairSlots>, tenant: &Arc<str>, cap: Option<usize>) -> Vec<FairPermit> {
        let mut held = Vec::new();
        while let Ok(permit) = tokio::time::timeout(Duration::ZERO, slots.acquire(tenant, cap)).await {
            held.push(permit);
        }
        held
    }

    /// Three tenants of twelve slots: a guaranteed part of two each, six shared. However
    /// the first two flood (with calls that would run for minutes), the third takes its
    /// part at once; a tenant without a cap of its own holds at most half.
    #[tokio::test]
    async fn each_tenant_can_always_take_its_guaranteed_part_however_the_others_flood() {
        let slots = FairSlots::new(12, 3);
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = ("a".into(), "b".into(), "c".into());
        let held_a = take_all(&slots, &a, None).await;
        assert_eq!(held_a.len(), 6, "half the slots: its part and four shared");
        assert_eq!(slots.why_full(&a, None), Full::TenantCap(6));
        let held_b = take_all(&slots, &b, None).await;
        assert_eq!(held_b.len(), 4, "its part and the two shared slots left");
        assert_eq!(slots.why_full(&b, None), Full::Shared);
        let held_c = take_all(&slots, &c, Some(10)).await;
        assert_eq!(held_c.len(), 2, "its part, however the others flood (and whatever its cap)");
        assert_eq!(slots.why_full(&c, Some(10)), Full::Shared);
        // A's calls end: the shared slots they held go to whoever is under its cap, and
        // a's part stays free for a.
        drop(held_a);
        let more_c = take_all(&slots, &c, Some(10)).await;
        assert_eq!(more_c.len(), 4, "the shared rest but the two b holds");
        let again_a = take_all(&slots, &a, None).await;
        assert_eq!(again_a.len(), 2, "its part");
        drop((held_b, held_c, more_c, again_a));
        let state = slots.state.lock().unwrap();
        assert_eq!((state.free, state.beyond), (12, 0), "every slot given back, nothing held beyond");
    }

    /// With more tenants than half the slots, none has a guaranteed slot: the operator is
    /// told, with the setting that gives each one.
    #[test]
    fn too_few_slots_for_a_part_each_are_reported() {
        assert_eq!(too_few_slots(12, 3), None);
        assert_eq!(too_few_slots(6, 3), None, "one each");
        assert_eq!(too_few_slots(8, 1), None, "one tenant: nothing is split");
        let told = too_few_slots(5, 3).expect("a part of 0 each");
        assert!(
            told.contains("3 tenants share 5 call slots") && told.contains("max_concurrent_calls to 6"),
            "{told}"
        );
    }

    /// With one tenant (or none) the slots are not split: one may take them all.
    #[tokio::test]
    async fn one_tenant_takes_every_slot() {
        let slots = FairSlots::new(8, 1);
        assert_eq!(take_all(&slots, &"a".into(), None).await.len(), 8);
        assert_eq!(slots.why_full(&"a".into(), None), Full::Pool);
    }

    #[tokio::test]
    async fn a_tenant_cap_holds_its_calls_in_its_queue() {
        let slots = FairSlots::new(4, 0);
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
        let slots = FairSlots::new(4, 0);
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
