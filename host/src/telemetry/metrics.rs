//! The Prometheus metrics (`prometheus-client`, one registry of our own, no global one).
//!
//! Counters and histograms move at each call's end ([`Metrics`] is a
//! [`CallObserver`]); gauges (pool, spares, HTTP connections and streams) and the compile
//! cache's and the log's counts are read from their owners at each scrape
//! ([`Metrics::attach`]).
//!
//! **Bounded labels.** `component` and `tool` come from the loaded components only: the
//! runtime's event carries no tool name for an unknown tool, which is counted with both
//! labels empty. `outcome`, `stop`, `reason` and `cleanup` are fixed enums. So the number
//! of series is bounded by the configuration and the tools loaded now, never by what
//! clients send: a tool's series go when it is no longer served under its name (a reload
//! or a new listing dropped it; a component may rename its tools at every listing). `tenant` (on
//! `cordon_tenant_calls_total`, counted only for calls made for a tenant) is a configured
//! tenant's name: a request that names no configured tenant never reaches a call.
//! A guest names its tools, up to thousands of them, and may rename them at every listing:
//! each component has at most [`MAX_TOOL_LABELS`] tool names as labels in the life of the
//! process, and its other tools are counted together under `tool="<other>"`, so that
//! neither the exposition nor the series a scraper keeps grow with what a guest lists.
//!
//! **Per-tool handles.** Looking a series up in a [`Family`] hashes its labels' strings
//! under a lock, five times per call. A tool's series (its calls by outcome, its duration
//! histogram, its cleanups) are looked up once instead ([`ToolSeries`]) and kept by the
//! identity of the loaded tool's name: the event's `Arc<str>`s come from the tool set, so
//! the same tool hands the same pointers to every call. An entry holds its `Arc`s (a
//! pointer is never reused while the entry lives) and is dropped once no tool set holds
//! them any more (a reload replaced them): the map stays as large as what is loaded.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::log::LogDropped;
use crate::runtime::{CallEnded, CallObserver, CallOutcome, CleanupResult, RefusalReason, Runtime};
use crate::transport::http::HttpStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    component: Option<Arc<str>>,
    tool: Option<Arc<str>>,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    component: Option<Arc<str>>,
    tool: Option<Arc<str>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StopLabels {
    stop: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CleanupLabels {
    component: Option<Arc<str>>,
    cleanup: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, from 100 µs to about 52 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

/// Seconds, from 10 µs to about 21 s (a stop includes the tool's grace period).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 22))
}

/// Where the gauges are read at each scrape, once the server has them.
struct Sources {
    runtime: Arc<Runtime>,
    http: Option<Arc<HttpStats>>,
}

/// One tool's series, each looked up in its family the first time it moves: its calls by
/// outcome (indexed as [`CallOutcome::ALL`]), its duration, its cleanups by result (as
/// [`CleanupResult::ALL`]).
#[derive(Default)]
struct ToolSeries {
    /// Its `tool` label: its name, or [`OTHER_TOOLS`] past its component's budget.
    tool: Option<Arc<str>>,
    calls: [OnceLock<Counter>; CallOutcome::ALL.len()],
    duration: OnceLock<Histogram>,
    cleanups: [OnceLock<Counter>; CleanupResult::ALL.len()],
}

/// The most tool names one component gets as `tool` labels in the life of the process.
pub const MAX_TOOL_LABELS: usize = 128;
/// The `tool` label of a component's tools past [`MAX_TOOL_LABELS`].
/// Outside the alphabet of tool names (`rules`), so that no tool shares it.
pub const OTHER_TOOLS: &str = "<other>";

/// A loaded tool by the identity of its names (see the module docs): equal when both
/// `Arc`s are the same allocations. `None` is the unknown tool.
#[derive(Clone)]
struct ToolKey {
    component: Option<Arc<str>>,
    tool: Option<Arc<str>>,
}

impl ToolKey {
    fn address(name: &Option<Arc<str>>) -> usize {
        name.as_ref().map_or(0, |name| Arc::as_ptr(name).cast::<u8>() as usize)
    }

    /// Whether a tool set still holds these names (the entry holds one reference of each).
    fn is_loaded(&self) -> bool {
        [&self.component, &self.tool]
            .iter()
            .all(|name| name.as_ref().is_none_or(|name| Arc::strong_count(name) > 1))
    }
}

impl PartialEq for ToolKey {
    fn eq(&self, other: &Self) -> bool {
        Self::address(&self.component) == Self::address(&other.component)
            && Self::address(&self.tool) == Self::address(&other.tool)
    }
}

impl Eq for ToolKey {}

impl std::hash::Hash for ToolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(Self::address(&self.component) ^ Self::address(&self.tool).rotate_left(17));
    }
}

/// A name as a label: a copy, so that the families' label sets never hold the tool set's
/// own allocation (which tells when a reload dropped it, [`ToolKey::is_loaded`]).
fn label(name: &Option<Arc<str>>) -> Option<Arc<str>> {
    name.as_deref().map(Arc::from)
}

/// Hashes a [`ToolKey`]'s one word as it is: pointers are already well spread.
#[derive(Default, Clone, Copy)]
struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        // Spread the word over the high bits hashbrown uses for its control bytes.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_usize(&mut self, word: usize) {
        self.0 ^= word as u64;
    }
}

type ToolSeriesMap = HashMap<ToolKey, Arc<ToolSeries>, std::hash::BuildHasherDefault<AddressHasher>>;

/// Every metric the server exports; see the README's "Metrics" for the list.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    tenant_calls: Family<TenantLabels, Counter>,
    call_duration: HistogramFamily<ToolLabels>,
    stop_latency: HistogramFamily<StopLabels>,
    cleanups: Family<CleanupLabels, Counter>,
    cleanup_duration: Histogram,
    refusals: Family<RefusalLabels, Counter>,
    queue_wait: Histogram,
    slots: Gauge,
    slots_in_use: Gauge,
    spares: Gauge,
    compile_cache_hits: Counter,
    compile_cache_misses: Counter,
    http_connections: Gauge,
    http_streams: Gauge,
    log_dropped: Counter,
    log_source: Option<LogDropped>,
    sources: OnceLock<Sources>,
    /// Each loaded tool's series, looked up once (see the module docs).
    tool_series: RwLock<ToolSeriesMap>,
    /// The tool names each component has had as labels, [`MAX_TOOL_LABELS`] at most.
    tool_labels: std::sync::Mutex<HashMap<Arc<str>, std::collections::HashSet<Arc<str>>>>,
}

impl Metrics {
    /// Every metric at zero; `log` is the log's dropped-events count, when it has one.
    pub fn new(log: Option<LogDropped>) -> Arc<Self> {
        let mut registry = Registry::with_prefix("cordon");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register("calls", "Calls ended, by component, tool and outcome", calls.clone());
        let tenant_calls = Family::<TenantLabels, Counter>::default();
        registry.register("tenant_calls", "Calls ended, by tenant and outcome", tenant_calls.clone());
        let call_duration =
            HistogramFamily::<ToolLabels>::new_with_constructor(duration_histogram as fn() -> _);
        registry.register_with_unit(
            "call_duration",
            "From a call's slot taken to its guest stopped",
            Unit::Seconds,
            call_duration.clone(),
        );
        let stop_latency =
            HistogramFamily::<StopLabels>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register_with_unit(
            "stop_latency",
            "From a stop request (cancel, timeout, shutdown) to the guest stopped, by stop path",
            Unit::Seconds,
            stop_latency.clone(),
        );
        let cleanups = Family::<CleanupLabels, Counter>::default();
        registry.register(
            "cleanups",
            "Cleanups run after a stop, by component and outcome",
            cleanups.clone(),
        );
        let cleanup_duration = duration_histogram();
        registry.register_with_unit(
            "cleanup_duration",
            "How long cleanups ran",
            Unit::Seconds,
            cleanup_duration.clone(),
        );
        let refusals = Family::<RefusalLabels, Counter>::default();
        registry.register("refusals", "Calls refused before they ran, by reason", refusals.clone());
        let queue_wait = latency_histogram();
        registry.register_with_unit(
            "queue_wait",
            "How long calls waited for a slot in the instance pool",
            Unit::Seconds,
            queue_wait.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let slots = gauge(&mut registry, "pool_slots", "Call slots in the instance pool");
        let slots_in_use =
            gauge(&mut registry, "pool_slots_in_use", "Call slots held by calls (running or cleaning up)");
        let spares =
            gauge(&mut registry, "spare_instances", "Instances made ahead of the calls that will use them");
        let http_connections = gauge(&mut registry, "http_connections_open", "MCP HTTP connections open");
        let http_streams = gauge(&mut registry, "http_streams_open", "MCP answers being sent as SSE streams");
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let counter = Counter::default();
            registry.register(name, help, counter.clone());
            counter
        };
        let compile_cache_hits =
            counter(&mut registry, "compile_cache_hits", "Components loaded from the compile cache");
        let compile_cache_misses = counter(
            &mut registry,
            "compile_cache_misses",
            "Components compiled (no usable cache entry, or no cache)",
        );
        let log_dropped = counter(
            &mut registry,
            "log_events_dropped",
            "Log events dropped: stderr was not read fast enough",
        );
        Arc::new(Self {
            registry,
            calls,
            tenant_calls,
            call_duration,
            stop_latency,
            cleanups,
            cleanup_duration,
            refusals,
            queue_wait,
            slots,
            slots_in_use,
            spares,
            compile_cache_hits,
            compile_cache_misses,
            http_connections,
            http_streams,
            log_dropped,
            log_source: log,
            sources: OnceLock::new(),
            tool_series: RwLock::default(),
            tool_labels: std::sync::Mutex::default(),
        })
    }

    /// Read the pool, the compile cache and (over HTTP) the listener's counts from these
    /// at each scrape from now on. Only the first call counts.
    pub fn attach(&self, runtime: Arc<Runtime>, http: Option<Arc<HttpStats>>) {
        let _ = self.sources.set(Sources { runtime, http });
    }

    /// The exposition, in Prometheus text format, with every gauge read now.
    pub fn scrape(&self) -> String {
        if let Some(Sources { runtime, http }) = self.sources.get() {
            let usage = runtime.pool_usage();
            self.slots.set(runtime.call_slots() as i64);
            self.slots_in_use.set(usage.calls as i64);
            self.spares.set(usage.spares as i64);
            let cache = runtime.compile_cache();
            self.compile_cache_hits.inner().store(cache.hits(), Ordering::Relaxed);
            self.compile_cache_misses.inner().store(cache.misses(), Ordering::Relaxed);
            if let Some(http) = http {
                self.http_connections.set(http.connections() as i64);
                self.http_streams.set(http.streams() as i64);
            }
        }
        if let Some(log) = &self.log_source {
            self.log_dropped.inner().store(log.count(), Ordering::Relaxed);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String never fails");
        text
    }
}

impl Metrics {
    /// The series of the tool `event` names (made on its first call).
    fn tool_series(&self, key: &ToolKey) -> Arc<ToolSeries> {
        if let Some(series) = self.tool_series.read().unwrap().get(key) {
            return series.clone();
        }
        let mut map = self.tool_series.write().unwrap();
        // A reload's old names go once no tool set holds them.
        let mut gone = Vec::new();
        map.retain(|key, series| {
            let loaded = key.is_loaded();
            // Tools counted together keep their series: others still count there.
            if !loaded && series.tool.as_deref() != Some(OTHER_TOOLS) {
                gone.push(key.clone());
            }
            loaded
        });
        self.forget(&gone);
        let tool = self.tool_label(key);
        map.entry(key.clone())
            .or_insert_with(|| Arc::new(ToolSeries { tool, ..ToolSeries::default() }))
            .clone()
    }

    /// The `tool` label of `key`: its name while its component has labels left (or the
    /// name already has one), else [`OTHER_TOOLS`].
    fn tool_label(&self, key: &ToolKey) -> Option<Arc<str>> {
        let (Some(component), Some(tool)) = (&key.component, &key.tool) else { return label(&key.tool) };
        let mut labels = self.tool_labels.lock().unwrap();
        let named = labels.entry(Arc::from(&**component)).or_default();
        if named.contains(&**tool) || named.len() < MAX_TOOL_LABELS {
            named.insert(Arc::from(&**tool));
            return label(&key.tool);
        }
        Some(Arc::from(OTHER_TOOLS))
    }

    /// Drop the labelled series of tools no longer loaded under these names: a component
    /// that renames its tools at each relist (0.2.0's `lists-changed`) would otherwise
    /// grow the exposition without bound. A name a newer version still serves keeps its
    /// series (its counts go on).
    fn forget(&self, gone: &[ToolKey]) {
        let Some(Sources { runtime, .. }) = self.sources.get() else { return };
        let tools = runtime.snapshot();
        for key in gone {
            let served = key
                .tool
                .as_deref()
                .and_then(|tool| tools.component_of(tool))
                .is_some_and(|component| key.component.as_deref() == Some(&*component.name));
            if served {
                continue;
            }
            let (component, tool) = (label(&key.component), label(&key.tool));
            for outcome in CallOutcome::ALL {
                let labels = CallLabels {
                    component: component.clone(),
                    tool: tool.clone(),
                    outcome: outcome.as_str(),
                };
                self.calls.remove(&labels);
            }
            self.call_duration.remove(&ToolLabels { component, tool });
        }
    }
}

impl CallObserver for Metrics {
    fn call_ended(&self, event: &CallEnded) {
        let key = ToolKey { component: event.component.clone(), tool: event.tool.clone() };
        let series = self.tool_series(&key);
        let outcome = event.outcome;
        let calls = series.calls[outcome.index()].get_or_init(|| {
            let labels = CallLabels {
                component: label(&key.component),
                tool: series.tool.clone(),
                outcome: outcome.as_str(),
            };
            self.calls.get_or_create(&labels).clone()
        });
        calls.inc();
        if let Some(tenant) = &event.tags.tenant {
            let labels = TenantLabels { tenant: tenant.clone(), outcome: outcome.as_str() };
            self.tenant_calls.get_or_create(&labels).inc();
        }
        if let Some(reason) = event.refusal {
            self.refusals.get_or_create(&RefusalLabels { reason: reason.as_str() }).inc();
            if reason == RefusalReason::Busy {
                self.queue_wait.observe(event.queue_wait.as_secs_f64());
            }
        }
        let Some(stop) = event.stop_path else { return }; // it never ran
        self.queue_wait.observe(event.queue_wait.as_secs_f64());
        let duration = series.duration.get_or_init(|| {
            let labels = ToolLabels { component: label(&key.component), tool: series.tool.clone() };
            self.call_duration.get_or_create(&labels).clone()
        });
        duration.observe(event.duration.as_secs_f64());
        if let Some(latency) = event.stop_latency {
            self.stop_latency
                .get_or_create(&StopLabels { stop: stop.as_str() })
                .observe(latency.as_secs_f64());
        }
        if let Some(cleanup) = event.cleanup {
            let result = cleanup.result;
            let cleanups = series.cleanups[result.index()].get_or_init(|| {
                let labels = CleanupLabels { component: label(&key.component), cleanup: result.as_str() };
                self.cleanups.get_or_create(&labels).clone()
            });
            cleanups.inc();
            self.cleanup_duration.observe(cleanup.duration.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{CallOutcome, CallTags, StopPath};

    fn ran(component: &Arc<str>, tool: &Arc<str>, outcome: CallOutcome) -> CallEnded {
        CallEnded {
            component: Some(component.clone()),
            tool: Some(tool.clone()),
            stop_path: Some(StopPath::Returned),
            ..CallEnded::unstarted(CallTags::default(), outcome)
        }
    }

    #[test]
    fn a_reloaded_tool_counts_into_the_same_series_and_its_old_handles_go() {
        let metrics = Metrics::new(None);
        let (component, tool): (Arc<str>, Arc<str>) = (Arc::from("tools"), Arc::from("echo"));
        metrics.call_ended(&ran(&component, &tool, CallOutcome::Ok));
        metrics.call_ended(&ran(&component, &tool, CallOutcome::Ok));
        metrics.call_ended(&ran(&component, &tool, CallOutcome::Trapped));
        // A reload: the same names in new allocations; the old set is gone.
        drop((component, tool));
        let (component, tool): (Arc<str>, Arc<str>) = (Arc::from("tools"), Arc::from("echo"));
        metrics.call_ended(&ran(&component, &tool, CallOutcome::Ok));
        let text = metrics.scrape();
        assert!(
            text.contains(r#"cordon_calls_total{component="tools",tool="echo",outcome="ok"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"cordon_calls_total{component="tools",tool="echo",outcome="trapped"} 1"#),
            "{text}"
        );
        assert!(!text.contains(r#"outcome="limit""#), "a series appears once it moves: {text}");
        assert!(
            text.contains(r#"cordon_call_duration_seconds_count{component="tools",tool="echo"} 4"#),
            "{text}"
        );
        assert_eq!(metrics.tool_series.read().unwrap().len(), 1, "the old names' handles were dropped");
    }

    /// A guest that lists thousands of tools, or renames them at every listing, gets
    /// [`MAX_TOOL_LABELS`] tool names as labels in all; its other calls count under
    /// `<other>`, whose series stay when those names go. (Before, each name called was ~30
    /// series of its own, and each rename 30 more for a scraper to keep.)
    #[test]
    fn a_component_has_a_bounded_number_of_tool_labels_for_life() {
        let metrics = Metrics::new(None);
        let component: Arc<str> = Arc::from("hostile");
        for round in 0..3 {
            // Every round renames all 100 tools (a relist), the old names dropped.
            let tools: Vec<Arc<str>> = (0..100).map(|i| Arc::from(format!("t{round}_{i}"))).collect();
            for tool in &tools {
                metrics.call_ended(&ran(&component, tool, CallOutcome::Ok));
            }
        }
        let text = metrics.scrape();
        let labelled: std::collections::HashSet<&str> = (text.lines())
            .filter(|line| line.starts_with("cordon_calls_total{"))
            .filter_map(|line| line.split("tool=\"").nth(1)?.split('"').next())
            .collect();
        assert!(labelled.contains(OTHER_TOOLS), "{text}");
        assert!(labelled.len() <= MAX_TOOL_LABELS + 1, "{} tool labels", labelled.len());
        // 300 calls: the first 128 names called under their own, the rest under `<other>`.
        let other =
            format!("cordon_calls_total{{component=\"hostile\",tool=\"{OTHER_TOOLS}\",outcome=\"ok\"}} ");
        let counted: u64 = text.lines().find_map(|line| line.strip_prefix(&other)).unwrap().parse().unwrap();
        assert_eq!(counted, 300 - MAX_TOOL_LABELS as u64, "{text}");
        // A name already labelled keeps its label.
        let again: Arc<str> = Arc::from("t0_0");
        metrics.call_ended(&ran(&component, &again, CallOutcome::Ok));
        assert!(metrics.scrape().contains(r#"tool="t0_0""#));
    }
}
