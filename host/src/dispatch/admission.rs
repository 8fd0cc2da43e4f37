//! # Admission: the bytes requests and answers hold, and whose share they count in
//!
//! One server-wide ledger ([`Admission`]) counts the bytes requests hold from their first
//! byte read to their answer, and answers a client has not read yet. Each [`Charge`]
//! counts in the server's bound and, where they apply, in two shares of it:
//! - its **tenant's**, half the bound when the server has two tenants or more, so that one
//!   tenant's flood leaves every other tenant room;
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::{Caller, Tenant};

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

/// The server-wide ledger of bytes held by requests, against one limit, with its tenants'
/// and clients' shares (see the module's docs).
pub struct Admission {
    limit: usize,
    tenant_limit: usize,
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
    counts: HashMap<Client, Arc<AtomicUsize>>,
    kept: usize,
}

/// Unused client counts are looked for once the map has grown to twice what the last
/// look kept, and this many at least: amortized, a constant cost per new client.
const CLIENT_SWEEP_FLOOR: usize = 512;

impl Admission {
    pub(super) fn new(limit: usize, tenants: usize) -> Self {
        let tenant_limit = if tenants > 1 { limit / 2 } else { limit };
        let client_limit = (tenants < 2).then_some(limit / 2);
        Self {
            limit,
            tenant_limit,
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

    /// `client`'s count, to charge its requests and answers with ([`Self::empty_for`]).
    pub fn client_share(&self, client: Client) -> ClientShare {
        let mut clients = self.clients.lock().unwrap();
        if clients.counts.len() >= (clients.kept * 2).max(CLIENT_SWEEP_FLOOR) {
            // Counts are cloned only under this lock, so one held here alone is held by
            // no charge and no share, and none can take it meanwhile.
            clients.counts.retain(|_, count| Arc::strong_count(count) > 1);
            clients.kept = clients.counts.len();
        }
        ClientShare(clients.counts.entry(client).or_default().clone())
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
        });
        let client_share = client.zip(self.client_limit).map(|(client, limit)| Share {
            held: client.0.clone(),
            limit,
            whose: Whose::Client,
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

/// One client's count of bytes held ([`Admission::client_share`]).
#[derive(Clone)]
pub struct ClientShare(Arc<AtomicUsize>);

impl ClientShare {
    /// Bytes the client's requests and answers hold now.
    pub fn held(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Whose share of the bound a charge did not fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Tenant,
    Client,
}

/// A share a charge counts in: the count, its limit, and whose it is.
struct Share {
    held: Arc<AtomicUsize>,
    limit: usize,
    whose: Whose,
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
        let shares = || self.shares.iter().flatten();
        let mut added = 0;
        for share in shares() {
            if add_within(&share.held, more, share.limit).is_none() {
                break;
            }
            added += 1;
        }
        let before = match added == shares().count() {
            true => add_within(&self.used, more, self.limit),
            false => None,
        };
        let Some(before) = before else {
            for share in shares().take(added) {
                share.held.fetch_sub(more, Ordering::AcqRel);
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
        self.shares
            .iter()
            .flatten()
            .find(|share| share.held.load(Ordering::Acquire).saturating_add(more) > share.limit)
            .map(|share| share.whose)
    }

    /// Bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Hold `more` bytes whatever the bound: what is already made (an answer on its way to
    /// a client) cannot be refused, only counted, so that new requests wait for it.
    pub fn hold(&mut self, more: usize) {
        for share in self.shares.iter().flatten() {
            share.held.fetch_add(more, Ordering::AcqRel);
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
            share.held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_holds_at_most_half_and_others_keep_the_rest() {
        let admission = Admission::new(1000, 1);
        let greedy = admission.client_share(Client::Address([10, 0, 0, 1].into()));
        let other = admission.client_share(Client::Address([10, 0, 0, 2].into()));
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
    }

    #[test]
    fn with_two_tenants_the_tenants_have_shares_and_their_clients_none() {
        let admission = Admission::new(1000, 2);
        assert_eq!((admission.tenant_limit(), admission.client_limit()), (500, None));
        let client = admission.client_share(Client::Address([10, 0, 0, 1].into()));
        let mut charge = admission.empty_for(None, Some(&client));
        assert!(charge.grow(1000));
        assert_eq!(client.held(), 0);
    }

    #[test]
    fn unused_client_counts_are_forgotten() {
        let admission = Admission::new(1000, 1);
        let kept = admission.client_share(Client::Address([10, 0, 0, 1].into()));
        for n in 0..CLIENT_SWEEP_FLOOR as u32 * 4 {
            let share =
                admission.client_share(Client::Address(std::net::Ipv6Addr::from_bits(n.into()).into()));
            let mut charge = admission.empty_for(None, Some(&share));
            assert!(charge.grow(1));
        }
        assert!(admission.clients_counted() <= CLIENT_SWEEP_FLOOR + 1, "{}", admission.clients_counted());
        // The one still held is kept, with its count.
        let mut charge = admission.empty_for(None, Some(&kept));
        assert!(charge.grow(7));
        let again = admission.client_share(Client::Address([10, 0, 0, 1].into()));
        assert_eq!(again.held(), 7);
    }
}
