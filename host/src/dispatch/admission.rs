//! # Admission: the bytes requests and answers hold, and whose share they count in
//!
//! One server-wide ledger ([`Admission`]) counts the bytes requests hold from their first
//! byte read to their answer, and answers a client has not read yet. Each [`Charge`]
//! counts in the server's bound and, where they apply, in two shares of it:
//! - its **tenant's**, when the server has two tenants or more ([`TenantPool`]): a tenant
//!   holds at most half the bound, and of that only a guaranteed part (the other half,
//!   split evenly among the tenants) is its own; the rest comes from what all tenants
//!   share. So however two tenants flood, a third always finds its guaranteed part;
//!   with halves alone, two tenants at half each would leave it nothing;
//! - on a server of fewer than two tenants, its **client's** ([`Client`]: the caller its
//!   credentials name, or without any the address it connects from), half the bound. A
//!   client that sends large requests, or reads its answers slowly or not at all, would
//!   otherwise fill the bound alone and every other client would be refused until it let
//!   go. Behind a proxy every client without credentials shares the proxy's address, and
//!   so one half. With two tenants or more, the tenants' shares already keep each
//!   tenant's clients from the others', and one tenant's callers are one party (often one
//!   key): a share each would only halve what a tenant of one caller may use.
//!
//! Charging costs one atomic add per count. A client's count is found once per request
//! ([`Admission::client_share`], one lock) and lives while any charge holds it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::{Caller, Tenant, TenantId};

/// Who a request comes from, for the shares one client may hold (of the admission bound,
/// of the listen streams): the caller its credentials name, or, without any, the address
/// it connects from. Over stdio there is one client, and no share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    Caller(Caller),
    Address(std::net::IpAddr),
}

impl Client {
    /// The client of a request by `caller` from `address`, when either is known.
    pub fn of(caller: Option<&Caller>, address: Option<std::net::IpAddr>) -> Option<Self> {
        match (caller, address) {
            (Some(caller), _) => Some(Self::Caller(caller.clone())),
            (None, Some(address)) => Some(Self::Address(address)),
            (None, None) => None,
        }
    }
}

/// One bound split among two tenants or more so that none can be starved: a tenant holds
/// at most half the bound (its share); the other half is split evenly into each tenant's
/// guaranteed part, and what a tenant holds beyond its guaranteed part comes from the
/// rest, which all tenants share. The guaranteed parts and the shared rest add up to the
/// bound, so everything held stays within it, and whatever the others hold, a tenant can
/// always take its guaranteed part. Used for the admission bound's bytes and for the
/// listen streams.
#[derive(Debug)]
pub struct TenantPool {
    share: usize,
    guaranteed: usize,
    shared: usize,
    /// What tenants hold beyond their guaranteed parts, in all. Signed: a tenant's give
    /// back may land here before the take it undoes, and the sum dips below zero a moment.
    beyond: AtomicIsize,
}

/// What a take from a [`TenantPool`] drew on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The tenant's guaranteed part alone: always there, whatever else is held.
    Guaranteed,
    /// The shared rest too.
    Shared,
}

impl TenantPool {
    /// The pool of `limit` among `tenants`, when there are two or more.
    pub fn new(limit: usize, tenants: usize) -> Option<Self> {
        (tenants > 1).then(|| {
            let guaranteed = limit / (2 * tenants);
            let share = (limit / 2).max(1);
            Self { share, guaranteed, shared: limit - guaranteed * tenants, beyond: AtomicIsize::new(0) }
        })
    }

    /// The most one tenant may hold.
    pub fn share(&self) -> usize {
        self.share
    }

    /// The part of the bound each tenant can always take.
    pub fn guaranteed(&self) -> usize {
        self.guaranteed
    }

    /// How much moving a tenant's count from `before` to `after` moves what it holds
    /// beyond its guaranteed part.
    fn excess_change(&self, before: usize, after: usize) -> isize {
        let excess = |held: usize| held.saturating_sub(self.guaranteed) as isize;
        excess(after) - excess(before)
    }

    /// Count `more` in a tenant's `held`, unless that passes its share or needs more of
    /// the shared rest than is left (`None`, and nothing counted, then). Within its
    /// guaranteed part a take always succeeds, however much the others hold (answers held
    /// past every bound included).
    ///
    /// Each change of `held` moves `beyond` by exactly what it changed the tenant's
    /// excess over its guaranteed part, computed from that change's own before and after,
    /// so the two always agree once every change has landed, however they interleave; a
    /// take that finds the rest overdrawn (perhaps only for a moment, by another take
    /// about to be undone) undoes itself the same way.
    pub fn take(&self, held: &AtomicUsize, more: usize) -> Option<Taken> {
        let before = add_within(held, more, self.share)?;
        let grown = self.excess_change(before, before + more);
        if grown == 0 {
            return Some(Taken::Guaranteed);
        }
        if self.beyond.fetch_add(grown, Ordering::AcqRel) + grown <= self.shared as isize {
            return Some(Taken::Shared);
        }
        self.give_back(held, more);
        None
    }

    /// Count `more` in `held` whatever the bound (what is already made cannot be refused).
    pub fn hold(&self, held: &AtomicUsize, more: usize) {
        let before = held.fetch_add(more, Ordering::AcqRel);
        self.beyond.fetch_add(self.excess_change(before, before + more), Ordering::AcqRel);
    }

    /// Take `less` out of `held`.
    pub fn give_back(&self, held: &AtomicUsize, less: usize) {
        let before = held.fetch_sub(less, Ordering::AcqRel);
        self.beyond.fetch_add(self.excess_change(before, before - less), Ordering::AcqRel);
    }

    /// Whether `more` would pass the share of a tenant holding `held`.
    pub fn share_full(&self, held: &AtomicUsize, more: usize) -> bool {
        self.share_full_at(held.load(Ordering::Acquire), more)
    }

    /// Whether a take of `more` by a tenant holding `held` would be refused now: past its
    /// share, or beyond its guaranteed part with the shared rest spent.
    pub fn refuses(&self, held: &AtomicUsize, more: usize) -> bool {
        let held = held.load(Ordering::Acquire);
        let grown = self.excess_change(held, held.saturating_add(more));
        self.share_full_at(held, more)
            || (grown > 0 && self.beyond.load(Ordering::Acquire) + grown > self.shared as isize)
    }

    fn share_full_at(&self, held: usize, more: usize) -> bool {
        held.saturating_add(more) > self.share
    }
}

/// The server-wide ledger of bytes held by requests, against one limit, with its tenants'
/// and clients' shares (see the module's docs).
pub struct Admission {
    limit: usize,
    tenant_limit: usize,
    /// The tenants' shares, with two tenants or more.
    tenants: Option<Arc<TenantPool>>,
    /// What one client may hold, when clients have shares.
    client_limit: Option<usize>,
    used: Arc<AtomicUsize>,
    /// The most ever held at once.
    peak: Arc<AtomicUsize>,
    /// Each client's count, while anything holds it.
    clients: Mutex<ClientCounts>,
}

/// The clients' counts, and how many were kept at the last look for unused ones.
#[derive(Default)]
struct ClientCounts {
    /// Keyed by tenant too: a caller is named by its tenant's credentials, and one name in
    /// two tenants is two clients.
    counts: HashMap<(Option<TenantId>, Client), ClientShare>,
    kept: usize,
}

/// What subscriptions (`resources/subscribe`) may hold of a share: one part in this many.
/// A 2025-era session keeps its subscriptions while it lives, an hour idle, with no
/// connection open and, without a `GET` stream, delivering nothing; within the whole
/// share a client's idle sessions could hold it, and with a second client all of the
/// bound, for that hour.
pub const SUBSCRIBED_PART: usize = 16;

/// Unused client counts are looked for once the map has grown to twice what the last
/// look kept, and this many at least: amortized, a constant cost per new client.
const CLIENT_SWEEP_FLOOR: usize = 512;

impl Admission {
    pub(super) fn new(limit: usize, tenants: usize) -> Self {
        let pool = TenantPool::new(limit, tenants).map(Arc::new);
        let tenant_limit = pool.as_ref().map_or(limit, |pool| pool.share());
        let client_limit = (tenants < 2).then_some(limit / 2);
        Self {
            limit,
            tenant_limit,
            tenants: pool,
            client_limit,
            used: Arc::default(),
            peak: Arc::default(),
            clients: Mutex::default(),
        }
    }

    /// The bound on bytes held.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The most one tenant's requests may hold.
    pub fn tenant_limit(&self) -> usize {
        self.tenant_limit
    }

    /// The most one client's requests and answers may hold, when clients have shares
    /// (on a server of fewer than two tenants).
    pub fn client_limit(&self) -> Option<usize> {
        self.client_limit
    }

    /// The most a charge for `tenant` by `client` may ever hold.
    pub(super) fn ceiling(&self, tenant: Option<&Tenant>, client: Option<&ClientShare>) -> usize {
        match (client.and(self.client_limit), tenant) {
            (Some(client_limit), _) => client_limit,
            (None, Some(_)) => self.tenant_limit,
            (None, None) => self.limit,
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    /// Clients whose count is kept now (each held by a charge, or not yet looked at).
    pub fn clients_counted(&self) -> usize {
        self.clients.lock().unwrap().counts.len()
    }

    /// `client`'s count in `tenant`, to charge its requests and answers with
    /// ([`Self::empty_for`]).
    pub fn client_share(&self, tenant: Option<&Tenant>, client: Client) -> ClientShare {
        let mut clients = self.clients.lock().unwrap();
        if clients.counts.len() >= (clients.kept * 2).max(CLIENT_SWEEP_FLOOR) {
            // A count held by the map alone is held by no charge and no share, so none can
            // clone it meanwhile: only this lock hands it out.
            clients.counts.retain(|_, count| count.in_use());
            clients.kept = clients.counts.len();
        }
        clients.counts.entry((tenant.map(|tenant| tenant.id.clone()), client)).or_default().clone()
    }

    /// The count `client`'s subscriptions are kept within, and its limit: a
    /// [`SUBSCRIBED_PART`] of the client's share where clients have shares, else of its
    /// tenant's (one caller of a tenant does not lock the others out). Without a client
    /// (stdio), the tenant's count where tenants have shares; else `None`.
    pub fn subscribed_count(
        &self,
        tenant: Option<&Tenant>,
        client: Option<&ClientShare>,
    ) -> Option<SubscribedCount> {
        let share = self.client_limit.unwrap_or(self.tenant_limit);
        match (client, tenant.filter(|_| self.tenants.is_some())) {
            (Some(client), _) => {
                Some(SubscribedCount { count: client.subscribed.clone(), limit: share / SUBSCRIBED_PART })
            }
            (None, Some(tenant)) => Some(SubscribedCount {
                count: tenant.holds.subscribed_bytes.clone(),
                limit: self.tenant_limit / SUBSCRIBED_PART,
            }),
            (None, None) => None,
        }
    }

    /// A charge of nothing, to grow.
    pub fn empty(&self) -> Charge {
        self.empty_for(None, None)
    }

    /// A charge of nothing, to grow, counted in `tenant`'s and `client`'s shares too.
    pub fn empty_for(&self, tenant: Option<&Tenant>, client: Option<&ClientShare>) -> Charge {
        let tenant_share = tenant.map(|tenant| Share {
            held: tenant.holds.request_bytes.clone(),
            limit: self.tenant_limit,
            whose: Whose::Tenant,
            pool: self.tenants.clone(),
        });
        let client_share = client.zip(self.client_limit).map(|(client, limit)| Share {
            held: client.held.clone(),
            limit,
            whose: Whose::Client,
            pool: None,
        });
        Charge {
            bytes: 0,
            used: self.used.clone(),
            peak: self.peak.clone(),
            limit: self.limit,
            shares: [tenant_share, client_share],
        }
    }
}

/// One client's counts of bytes held ([`Admission::client_share`]): by its requests and
/// answers, and of that by its sessions' subscriptions.
#[derive(Clone, Default)]
pub struct ClientShare {
    held: Arc<AtomicUsize>,
    subscribed: Arc<AtomicUsize>,
}

impl ClientShare {
    /// Bytes the client's requests and answers hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether anything but the map of counts holds this one.
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.held) > 1 || Arc::strong_count(&self.subscribed) > 1
    }
}

/// The count a holder's subscriptions are kept within ([`Admission::subscribed_count`]).
pub struct SubscribedCount {
    count: Arc<AtomicUsize>,
    limit: usize,
}

impl SubscribedCount {
    /// Count `bytes` more, given back when the guard is dropped; `None` past the limit.
    pub fn take(&self, bytes: usize) -> Option<SubscribedBytes> {
        add_within(&self.count, bytes, self.limit)?;
        Some(SubscribedBytes { count: self.count.clone(), bytes })
    }

    /// The most the holder's subscriptions may keep.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Bytes of one subscription in its holder's [`SubscribedCount`], while it is kept.
pub struct SubscribedBytes {
    count: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for SubscribedBytes {
    fn drop(&mut self) {
        self.count.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Whose share of the bound a charge did not fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Tenant,
    Client,
}

/// A share a charge counts in: the count, its limit, whose it is, and the pool it is
/// part of (a tenant's).
struct Share {
    held: Arc<AtomicUsize>,
    limit: usize,
    whose: Whose,
    pool: Option<Arc<TenantPool>>,
}

impl Share {
    /// Count `more`; `None` when it does not fit.
    fn take(&self, more: usize) -> Option<Taken> {
        match &self.pool {
            Some(pool) => pool.take(&self.held, more),
            None => add_within(&self.held, more, self.limit).map(|_| Taken::Shared),
        }
    }

    /// Whether `more` would not fit now.
    fn full(&self, more: usize) -> bool {
        match &self.pool {
            Some(pool) => pool.refuses(&self.held, more),
            None => self.held.load(Ordering::Acquire).saturating_add(more) > self.limit,
        }
    }

    fn hold(&self, more: usize) {
        match &self.pool {
            Some(pool) => pool.hold(&self.held, more),
            None => _ = self.held.fetch_add(more, Ordering::AcqRel),
        }
    }

    fn give_back(&self, less: usize) {
        match &self.pool {
            Some(pool) => pool.give_back(&self.held, less),
            None => _ = self.held.fetch_sub(less, Ordering::AcqRel),
        }
    }
}

/// Bytes charged to the ledger (and to the shares it counts in), given back when dropped.
pub struct Charge {
    bytes: usize,
    used: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    limit: usize,
    /// The tenant's share and the client's, where they apply.
    shares: [Option<Share>; 2],
}

/// Add `more` to `counter` unless that passes `limit`; the count before, when added.
pub(super) fn add_within(counter: &AtomicUsize, more: usize, limit: usize) -> Option<usize> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(more).filter(|&total| total <= limit)
        })
        .ok()
}

impl Charge {
    /// Charge `more` bytes too; false (and nothing charged) when that would pass a share
    /// or the server's limit.
    #[must_use]
    pub fn grow(&mut self, more: usize) -> bool {
        self.grow_within(more, self.limit)
    }

    /// Charge `more` bytes of an answer already made: within the shares, as any charge, but
    /// the server may go past its bound, to twice it (the request that made the answer was
    /// let in when its small size fitted; refusing the answer too early would only lose
    /// what a client that reads its answers asked for). False, and nothing charged, past
    /// either.
    #[must_use]
    pub fn grow_answer(&mut self, more: usize) -> bool {
        self.grow_within(more, self.limit.saturating_mul(2))
    }

    fn grow_within(&mut self, more: usize, server_limit: usize) -> bool {
        let shares = || self.shares.iter().flatten();
        let (mut added, mut guaranteed) = (0, false);
        for share in shares() {
            match share.take(more) {
                Some(taken) => guaranteed |= taken == Taken::Guaranteed,
                None => break,
            }
            added += 1;
        }
        let before = match (added == shares().count(), guaranteed) {
            // A tenant's guaranteed part is there whatever the server holds: the pool's
            // parts add up to the bound, and only what is held past it (answers) can
            // have filled it.
            (true, true) => Some(self.used.fetch_add(more, Ordering::AcqRel)),
            (true, false) => add_within(&self.used, more, server_limit),
            (false, _) => None,
        };
        let Some(before) = before else {
            for share in shares().take(added) {
                share.give_back(more);
            }
            return false;
        };
        self.bytes += more;
        self.peak.fetch_max(before + more, Ordering::AcqRel);
        true
    }

    /// Whose share `more` bytes would pass, if a share's rather than the server's limit:
    /// what to tell a refused client.
    pub fn full_share(&self, more: usize) -> Option<Whose> {
        self.shares.iter().flatten().find(|share| share.full(more)).map(|share| share.whose)
    }

    /// Bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Give back all but `bytes` of what this charge holds.
    pub fn shrink_to(&mut self, bytes: usize) {
        let less = self.bytes.saturating_sub(bytes);
        self.used.fetch_sub(less, Ordering::AcqRel);
        for share in self.shares.iter().flatten() {
            share.give_back(less);
        }
        self.bytes -= less;
    }

    /// Hold `more` bytes whatever the bound: what is already made (an answer on its way to
    /// a client) cannot be refused, only counted, so that new requests wait for it.
    pub fn hold(&mut self, more: usize) {
        for share in self.shares.iter().flatten() {
            share.hold(more);
        }
        let before = self.used.fetch_add(more, Ordering::AcqRel);
        self.peak.fetch_max(before + more, Ordering::AcqRel);
        self.bytes += more;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Ordering::AcqRel);
        for share in self.shares.iter().flatten() {
            share.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_may_take_the_server_to_twice_its_bound_never_a_client_past_its_share() {
        let admission = Admission::new(1000, 1);
        let clients: Vec<ClientShare> = (1..=5)
            .map(|last| admission.client_share(None, Client::Address([10, 0, 0, last].into())))
            .collect();
        let mut charges: Vec<Charge> =
            clients.iter().map(|client| admission.empty_for(None, Some(client))).collect();
        assert!(charges[0].grow_answer(500));
        assert!(!charges[0].grow_answer(1), "past its half");
        assert_eq!(charges[0].full_share(1), Some(Whose::Client));
        assert!(charges[1].grow_answer(500) && charges[2].grow_answer(500));
        assert!(!charges[3].grow(1), "requests stay within the bound");
        assert!(charges[3].grow_answer(500), "an answer may take it to twice the bound");
        assert!(!charges[4].grow_answer(1) && charges[4].full_share(1).is_none(), "never past that");
        assert_eq!(admission.used(), 2000);
    }

    #[test]
    fn one_client_holds_at_most_half_and_others_keep_the_rest() {
        let admission = Admission::new(1000, 1);
        let greedy = admission.client_share(None, Client::Address([10, 0, 0, 1].into()));
        let other = admission.client_share(None, Client::Address([10, 0, 0, 2].into()));
        let mut held = admission.empty_for(None, Some(&greedy));
        assert!(held.grow(500));
        assert!(!held.grow(1), "past its half");
        assert_eq!(held.full_share(1), Some(Whose::Client));
        assert_eq!((admission.used(), greedy.held()), (500, 500));
        // A refusal leaves nothing charged, in the share or the bound.
        let mut more = admission.empty_for(None, Some(&greedy));
        assert!(!more.grow(10));
        assert_eq!((admission.used(), greedy.held()), (500, 500));
        let mut theirs = admission.empty_for(None, Some(&other));
        assert!(theirs.grow(500));
        // The bound is full: neither share is, so the refusal is the server's.
        let mut third = admission.empty_for(None, None);
        assert!(!third.grow(1));
        assert_eq!(third.full_share(1), None);
        drop((held, more));
        assert_eq!((admission.used(), greedy.held()), (500, 0));
        // Shrunk, a charge gives back the difference, in its share too.
        theirs.shrink_to(100);
        assert_eq!((admission.used(), other.held(), theirs.bytes()), (100, 100, 100));
        theirs.shrink_to(200);
        assert_eq!(theirs.bytes(), 100, "shrinking never grows");
    }

    #[test]
    fn with_two_tenants_the_tenants_have_shares_and_their_clients_none() {
        let admission = Admission::new(1000, 2);
        assert_eq!((admission.tenant_limit(), admission.client_limit()), (500, None));
        let client = admission.client_share(None, Client::Address([10, 0, 0, 1].into()));
        let mut charge = admission.empty_for(None, Some(&client));
        assert!(charge.grow(1000));
        assert_eq!(client.held(), 0);
    }

    #[test]
    fn two_tenants_flooding_leave_a_third_its_guaranteed_part() {
        let pool = TenantPool::new(1200, 3).unwrap();
        assert_eq!((pool.share(), pool.guaranteed()), (600, 200));
        let [a, b, c] = [0, 0, 0].map(AtomicUsize::new);
        // a takes its whole share; b gets its guaranteed part and what is left of the rest.
        assert_eq!(pool.take(&a, 600), Some(Taken::Shared));
        assert_eq!(pool.take(&a, 1), None, "past its share");
        assert_eq!(pool.take(&b, 200), Some(Taken::Guaranteed));
        assert_eq!(pool.take(&b, 200), Some(Taken::Shared));
        assert_eq!(pool.take(&b, 1), None, "the shared rest is spent");
        assert!(pool.refuses(&b, 1) && !pool.share_full(&b, 1));
        assert_eq!(b.load(Ordering::Acquire), 400, "a refusal counts nothing");
        // c still finds its guaranteed part, and no more.
        assert_eq!(pool.take(&c, 200), Some(Taken::Guaranteed));
        assert_eq!(pool.take(&c, 1), None);
        assert_eq!(a.load(Ordering::Acquire) + b.load(Ordering::Acquire) + c.load(Ordering::Acquire), 1200);
        // What a gives back beyond its part is the others' to take.
        pool.give_back(&a, 100);
        assert_eq!(pool.take(&c, 100), Some(Taken::Shared));
        // Held whatever the bound, then given back: the shared rest comes back whole.
        pool.hold(&b, 50);
        pool.give_back(&b, 450);
        pool.give_back(&a, 500);
        pool.give_back(&c, 300);
        assert_eq!(pool.beyond.load(Ordering::Acquire), 0);
        assert_eq!(pool.take(&b, 600), Some(Taken::Shared));
        assert!(TenantPool::new(1200, 1).is_none());
    }

    fn three_tenants() -> [Tenant; 3] {
        ["a", "b", "c"].map(|name| {
            let id = crate::auth::TenantId::new(name);
            Tenant::new(id, crate::runtime::TenantView::new(name, [], None), None)
        })
    }

    #[test]
    fn answers_held_past_the_bound_never_take_a_tenants_guaranteed_part() {
        let admission = Admission::new(1200, 3);
        let tenants = three_tenants();
        // a and b hold answers (whatever the bound) far past it.
        let mut answers =
            tenants[..2].iter().map(|tenant| admission.empty_for(Some(tenant), None)).collect::<Vec<_>>();
        for answer in &mut answers {
            answer.hold(2000);
        }
        assert!(admission.used() > admission.limit());
        let mut theirs = admission.empty_for(Some(&tenants[0]), None);
        assert!(!theirs.grow(1));
        assert_eq!(theirs.full_share(1), Some(Whose::Tenant));
        // c's guaranteed part is still there; past it, nothing is.
        let mut ours = admission.empty_for(Some(&tenants[2]), None);
        assert!(ours.grow(200));
        assert!(!ours.grow(1));
        assert_eq!(ours.full_share(1), Some(Whose::Tenant), "named as the tenant's, not the server's");
    }

    #[test]
    fn a_tenants_charge_counts_in_its_pool() {
        let admission = Admission::new(1200, 3);
        let tenants = three_tenants();
        let mut charges = tenants.each_ref().map(|tenant| admission.empty_for(Some(tenant), None));
        assert!(charges[0].grow(600) && charges[1].grow(400));
        assert!(!charges[1].grow(1) && !charges[2].grow(201));
        assert!(charges[2].grow(200));
        assert_eq!(admission.used(), 1200);
        drop(charges);
        assert_eq!(
            (admission.used(), admission.tenants.as_ref().unwrap().beyond.load(Ordering::Acquire)),
            (0, 0)
        );
    }

    /// One caller's name in two tenants is two clients (a subject in one tenant's
    /// identity provider is not the same one in another's): neither's subscriptions count
    /// in the other's part.
    #[test]
    fn a_callers_name_in_two_tenants_is_two_clients() {
        let admission = Admission::new(1 << 20, 3);
        let [a, b, _] = three_tenants();
        let alice = || Client::Caller(Caller::Subject("alice".into()));
        let part = |tenant: &Tenant| {
            let client = admission.client_share(Some(tenant), alice());
            admission.subscribed_count(Some(tenant), Some(&client)).unwrap()
        };
        let limit = admission.tenant_limit() / SUBSCRIBED_PART;
        let _all_of_a = part(&a).take(limit).expect("a's alice takes her whole part");
        assert!(part(&a).take(1).is_none(), "the same tenant's alice is the same client");
        assert!(part(&b).take(limit).is_some(), "b's alice has her own part");
    }

    #[test]
    fn unused_client_counts_are_forgotten() {
        let admission = Admission::new(1000, 1);
        let kept = admission.client_share(None, Client::Address([10, 0, 0, 1].into()));
        for n in 0..CLIENT_SWEEP_FLOOR as u32 * 4 {
            let share =
                admission.client_share(None, Client::Address(std::net::Ipv6Addr::from_bits(n.into()).into()));
            let mut charge = admission.empty_for(None, Some(&share));
            assert!(charge.grow(1));
        }
        assert!(admission.clients_counted() <= CLIENT_SWEEP_FLOOR + 1, "{}", admission.clients_counted());
        // The one still held is kept, with its count.
        let mut charge = admission.empty_for(None, Some(&kept));
        assert!(charge.grow(7));
        let again = admission.client_share(None, Client::Address([10, 0, 0, 1].into()));
        assert_eq!(again.held(), 7);
    }
}
