//! # Listing a component again when one of its calls says its lists changed
//!
//! A component's tools, resources and prompts are listed at load, in a fresh instance. A
//! component whose lists depend on state a call can change (a file in its data directory)
//! says so with the `lists-changed` import (`cordon:tool@0.2.0`): the import only marks
//! the call (`control.rs`), so a guest that calls it in a loop costs nothing more. When
//! the call ends, [`super::Call`] hands the component's name to [`Relists`]. The runtime's
//! [`Runtime::relist_when_asked`] (a loop the server runs beside the reloader) lists each
//! such component again, as a load does (fresh instance, the load's time budget, the same
//! checks), and swaps in a set where it carries its new lists, as a reload swaps, only
//! when a list differs. Clients then hear of it the way they hear of a reload.
//!
//! Bounds: a component waits in the queue once however many calls ask; the queue is
//! worked through at most once every [`RELIST_INTERVAL`], and after listings that took
//! long, not before [`RELIST_PAUSE_FACTOR`] times as long again; a listing takes a call slot
//! like any load's `list` (waiting for one at most the queue timeout, as a call would:
//! it holds the reload lock meanwhile, and a saturated server must not hold reloads off),
//! and one at a time with reloads (the reload lock), so that neither undoes the other; one
//! that found no slot is queued again, paced as any listing, and so is one that finds
//! [`RETIRED_SETS_MOST`] older versions of its component still serving requests (each
//! keeps its lists, so that relisting beside long calls would otherwise pile them up;
//! logged once, as a warning). A listing that fails, or a new list that would be refused at
//! load (a tool another component offers, limits configured for a tool that is gone),
//! is logged and changes nothing, and the component is not listed again before a pause
//! ([`RELIST_BACKOFF`], doubling at each failure in a row up to [`RELIST_BACKOFF_MAX`]):
//! a listing may run for the load's whole time budget, and one cheap call asks for one,
//! so a guest whose `list` spins would otherwise turn each of its calls into seconds of
//! work. The server runs the loop on the runtime of calls that wait, at the lower
//! priority (`main.rs`), not on the threads that serve the transports.
//!
//! A listing reads the component's state while other calls may be writing it, so it may
//! see a mix; the call that wrote last asks again when it ends, and the listing after it
//! sees the state as it was left: the lists converge.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Runtime;
use super::component::LoadedComponent;
use super::registry::ToolSet;

/// The least time between two listings of the queue: a component that asks without pause
/// is listed at most four times a second.
pub const RELIST_INTERVAL: Duration = Duration::from_millis(250);

/// The pause after listings, as a multiple of the time they took (when that is longer than
/// [`RELIST_INTERVAL`]): listings that succeed slowly (a `list` that spins for most of its
/// budget, asked for again by each cheap call) take at most a fifth of the time, of a core
/// and of the reload lock and call slot they hold.
pub const RELIST_PAUSE_FACTOR: u32 = 4;

/// The most older versions of a component that requests still run on (swapped out by its
/// listings or a reload) beside the one served: past it, its next listing waits in the
/// queue until some are let go.
pub const RETIRED_SETS_MOST: usize = 8;

/// The pause after a failed listing before the component is listed again.
pub const RELIST_BACKOFF: Duration = Duration::from_secs(5);
/// The longest pause, after failures in a row.
pub const RELIST_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The components whose calls asked to be listed again, each once.
#[derive(Default)]
pub(crate) struct Relists {
    pending: Mutex<Pending>,
    wake: Notify,
}

#[derive(Default)]
struct Pending {
    queued: Vec<Arc<str>>,
    /// Components whose listing waits for older versions to be let go (said once).
    gated: std::collections::HashSet<Arc<str>>,
    /// Components whose last listing failed: not listed again before `until`.
    held_back: HashMap<Arc<str>, Backoff>,
}

struct Backoff {
    until: Instant,
    pause: Duration,
}

impl Relists {
    /// Queue `component` to be listed again (once, however often it is asked).
    pub(crate) fn request(&self, component: &Arc<str>) {
        let mut pending = self.pending.lock().unwrap();
        if !pending.queued.contains(component) {
            pending.queued.push(component.clone());
        }
        drop(pending);
        self.wake.notify_one();
    }

    /// The queued components that are due, once there is at least one; those held back
    /// after a failure stay queued until their pause is over.
    async fn next(&self) -> Vec<Arc<str>> {
        loop {
            let earliest = {
                let mut pending = self.pending.lock().unwrap();
                let now = Instant::now();
                let Pending { queued, held_back, .. } = &mut *pending;
                let held =
                    |component: &Arc<str>| held_back.get(component).filter(|backoff| backoff.until > now);
                let (later, due): (Vec<_>, Vec<_>) =
                    std::mem::take(queued).into_iter().partition(|component| held(component).is_some());
                let earliest = later.iter().filter_map(held).map(|held| held.until).min();
                *queued = later;
                if !due.is_empty() {
                    return due;
                }
                earliest
            };
            // A request between the check and this wait leaves a permit: not missed.
            match earliest {
                Some(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Note that `component`'s listing waits for older versions to be let go: true the
    /// first time in a row (to be said then).
    fn gate(&self, component: &Arc<str>) -> bool {
        self.pending.lock().unwrap().gated.insert(component.clone())
    }

    /// `component`'s listing waits no longer.
    fn ungate(&self, component: &Arc<str>) {
        self.pending.lock().unwrap().gated.remove(component);
    }

    /// Forget `component`'s failed listings (a reload loaded another version, or none).
    pub(crate) fn forget_failures(&self, component: &str) {
        self.pending.lock().unwrap().held_back.remove(component);
    }

    /// Note how listing `component` went: after a failure it waits a pause before the next
    /// listing, twice as long as the last after failures in a row; a listing that went
    /// through ends that.
    fn listed(&self, component: &Arc<str>, failed: bool) {
        let mut pending = self.pending.lock().unwrap();
        if !failed {
            pending.held_back.remove(component);
            return;
        }
        let pause = match pending.held_back.get(component) {
            Some(backoff) => (backoff.pause * 2).min(RELIST_BACKOFF_MAX),
            None => RELIST_BACKOFF,
        };
        pending.held_back.insert(component.clone(), Backoff { until: Instant::now() + pause, pause });
    }
}

impl Runtime {
    /// List again each component a call asked for (`lists-changed`), until the runtime
    /// shuts down. Run it once, beside the server.
    pub async fn relist_when_asked(&self) {
        let mut shutdown = self.shutdown.subscribe();
        loop {
            let components = tokio::select! {
                components = self.relists.next() => components,
                _ = shutdown.wait_for(|stopping| *stopping) => return,
            };
            let mut took = Duration::ZERO;
            for component in components {
                let (listed, time) = self.relist(&component).await;
                took += time;
                self.relists.listed(&component, !listed);
            }
            // At most the load's time budget counted: a slot waited for is not listing.
            let took = took.min(self.settings.list_budget);
            tokio::time::sleep(RELIST_INTERVAL.max(took * RELIST_PAUSE_FACTOR)).await;
        }
    }

    /// [`Self::relist_locked`] under the reload lock, and the time it took once it held
    /// the lock (a reload's compile waited out is no listing).
    async fn relist(&self, name: &str) -> (bool, Duration) {
        let _one_at_a_time = self.reloading.lock().await;
        let started = Instant::now();
        (self.relist_locked(name).await, started.elapsed())
    }

    /// List `name` again, and swap a set with its new lists in when one differs. False
    /// when the listing failed or its lists were refused.
    async fn relist_locked(&self, name: &str) -> bool {
        let current = self.snapshot();
        // Removed or replaced by a reload since: the new version was listed at its load.
        let Some(old) = current.component(name).cloned() else { return true };
        // Each version of the component that requests still run on keeps its lists
        // (schemas parsed and compiled: many times the host-call allowance a listing may
        // fill). A guest that relists without pause beside long calls (a 2025-era call
        // waits minutes for its client) would pile them up: past the most, the listing
        // waits, queued (this component's alone: others' versions are their own).
        if self.older_versions_alive(name, &old) >= RETIRED_SETS_MOST {
            if self.relists.gate(&old.name) {
                tracing::warn!(
                    component = name,
                    "listing again after lists-changed: waits until requests let go of older versions \
                     ({RETIRED_SETS_MOST} are still in use)"
                );
            }
            self.relists.request(&old.name);
            return true;
        }
        self.relists.ungate(&old.name);
        let mut fresh = old.relisted();
        // Waiting for a slot as a call would: the reload lock is held meanwhile.
        if let Err(error) = self.list_into(&mut fresh, name, old.tools.clone()).await {
            // No slot came free: no fault of the guest's, and its request still stands.
            if error.busy {
                tracing::warn!(component = name, "listing again after lists-changed: {error}; trying again");
                self.relists.request(&old.name);
                return true;
            }
            tracing::error!(component = name, "listing again after lists-changed: {error}; its lists stay");
            return false;
        }
        if fresh.same_lists(&old) {
            tracing::debug!(component = name, "listed again after lists-changed: nothing changed");
            return true;
        }
        let fresh = Arc::new(fresh);
        let mut others = ToolSet::default();
        for component in current.components.iter().filter(|component| !Arc::ptr_eq(component, &old)) {
            others.push(component.clone());
        }
        // Off the async workers: a guest that relists without pause could otherwise keep
        // one busy comparing its templates (bounded, but up to a tenth of a second each).
        let check = {
            let (fresh, name) = (fresh.clone(), name.to_owned());
            tokio::task::spawn_blocking(move || others.clash(&name, &fresh))
        };
        match check.await {
            Ok(None) => {}
            Ok(Some(clash)) => {
                tracing::error!(
                    component = name,
                    "listing again after lists-changed: {clash}; its lists stay"
                );
                return false;
            }
            // Cancelled at shutdown, or a bug: this listing is given up, the loop goes on.
            Err(error) => {
                tracing::error!(
                    component = name,
                    "listing again after lists-changed: the check failed: {error}"
                );
                return false;
            }
        }
        let order = current
            .components
            .iter()
            .map(|component| if Arc::ptr_eq(component, &old) { fresh.clone() } else { component.clone() })
            .collect();
        let next = ToolSet::new(order, current.generation() + 1);
        old.spare.retire();
        tracing::info!(
            component = name,
            "listed again after lists-changed: {} tools, {} resources, {} resource templates, {} prompts",
            fresh.tools.len(),
            fresh.offered.resources.len(),
            fresh.offered.templates.len(),
            fresh.offered.prompts.len()
        );
        self.swap_tool_set(next);
        true
    }
}

impl LoadedComponent {
    /// The same component (code, grants, options) with nothing listed yet and no spare,
    /// to be listed again.
    fn relisted(&self) -> Self {
        Self {
            name: self.name.clone(),
            digest: self.digest,
            pre: self.pre.clone(),
            files: self.files.clone(),
            tenant_files: self.tenant_files.clone(),
            descriptors: self.descriptors.clone(),
            http_grants: self.http_grants.clone(),
            options: self.options.clone(),
            tools: Vec::new(),
            schemas: Default::default(),
            spare: Default::default(),
            growth_hinted: Default::default(),
            offered: Default::default(),
        }
    }

    /// Whether `other` lists the same tools, resources, templates and prompts. Compared
    /// as their debug forms: every field of each, in order, and only after a listing.
    fn same_lists(&self, other: &Self) -> bool {
        let lists = |component: &Self| {
            let offered = &component.offered;
            let templates: Vec<_> = offered.templates.iter().map(|template| &template.info).collect();
            format!("{:?}{:?}{:?}{:?}", component.tools, offered.resources, templates, offered.prompts)
        };
        lists(self) == lists(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_component_whose_listing_failed_waits_a_pause_that_doubles_and_then_is_listed() {
        let relists = Relists::default();
        let (spinner, other): (Arc<str>, Arc<str>) = ("spinner".into(), "other".into());
        relists.request(&spinner);
        assert_eq!(relists.next().await, std::slice::from_ref(&spinner));
        relists.listed(&spinner, true);
        // Asked again at once: held back, while another component is listed meanwhile.
        let start = Instant::now();
        relists.request(&spinner);
        relists.request(&other);
        assert_eq!(relists.next().await, std::slice::from_ref(&other));
        assert_eq!(relists.next().await, std::slice::from_ref(&spinner));
        assert_eq!(start.elapsed(), RELIST_BACKOFF);
        // Failed again: twice the pause; then listed, it is free again.
        relists.listed(&spinner, true);
        let start = Instant::now();
        relists.request(&spinner);
        assert_eq!(relists.next().await, std::slice::from_ref(&spinner));
        assert_eq!(start.elapsed(), 2 * RELIST_BACKOFF);
        relists.listed(&spinner, false);
        let start = Instant::now();
        relists.request(&spinner);
        assert_eq!(relists.next().await, std::slice::from_ref(&spinner));
        assert_eq!(start.elapsed(), Duration::ZERO);
        // A reload's new version starts afresh.
        relists.listed(&spinner, true);
        relists.forget_failures("spinner");
        relists.request(&spinner);
        assert_eq!(relists.next().await, [spinner]);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
