//! # Telemetry: what an operator sees of a running server
//!
//! Telemetry observes outcomes, it does not steer them. The runtime emits one typed
//! [`CallEnded`](crate::runtime::CallEnded) per call end to the observers it was given at
//! construction; this module owns two of them and what carries them out of the process:
//!
//! - [`log`]: the operator's log on stderr (text or JSON), written by a thread of its own
//!   so that nothing that logs ever waits for stderr, and [`CallLog`], the one line per call.
//! - [`metrics`]: the Prometheus metrics ([`Metrics`], an observer too, and the gauges read
//!   at each scrape).
//! - [`listener`]: the second HTTP listener (`--metrics`): `/metrics`, `/healthz` and
//!   `/readyz` ([`Health`]), small and bounded.
//!
//! Nothing on the data path depends on this module; it depends on the runtime's event
//! types and reads the transport's counters.

pub mod listener;
pub mod log;
pub mod metrics;

pub use listener::{Health, MetricsListener};
pub use log::{CallLog, LogDropped, LogFormat, LogHandle};
pub use metrics::Metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::runtime::Runtime;
use crate::transport::http::HttpStats;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("serving metrics on {address}: {source}")]
    Bind { address: SocketAddr, source: std::io::Error },
}

/// What a server tells its operator: the call log, and with a metrics address the
/// metrics and the probes.
pub struct Telemetry {
    call_log: CallLog,
    health: Arc<Health>,
    metrics: Option<Arc<Metrics>>,
    metrics_address: Option<SocketAddr>,
}

impl Telemetry {
    /// Bind the metrics listener (when `address` is given) and serve it at once, so that
    /// `/healthz` answers (and `/readyz` says not yet) while components compile.
    /// `log` is the installed log, if any: the call lines go straight into it, and its
    /// count of dropped events is a metric.
    pub async fn start(address: Option<SocketAddr>, log: Option<&LogHandle>) -> Result<Self, TelemetryError> {
        let health = Arc::new(Health::default());
        let call_log = log.map_or_else(CallLog::via_tracing, LogHandle::call_log);
        let Some(address) = address else {
            return Ok(Self { call_log, health, metrics: None, metrics_address: None });
        };
        let bind_error = |source| TelemetryError::Bind { address, source };
        let listener = MetricsListener::bind(address).await.map_err(bind_error)?;
        let bound = listener.local_addr().map_err(bind_error)?;
        if !bound.ip().is_loopback() {
            tracing::warn!(
                "serving metrics on {bound}, beyond loopback, to anyone who reaches it: they name every tenant \
                 and tool and count their calls; keep the port off the network clients reach"
            );
        }
        tracing::info!("serving metrics on http://{bound}/metrics");
        let metrics = Metrics::new(log.map(LogHandle::dropped));
        tokio::spawn(listener.serve(metrics.clone(), health.clone()));
        Ok(Self { call_log, health, metrics: Some(metrics), metrics_address: Some(bound) })
    }

    /// Where the metrics listener listens, if it does.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// Give `runtime` its observers: the metrics when served, then the call log. In that
    /// order, so that a call's log line is never out before the metrics count it: whoever
    /// reads the line (an operator, a test) and then scrapes sees the call counted.
    pub fn observe(&self, runtime: &mut Runtime) {
        if let Some(metrics) = &self.metrics {
            runtime.observe(metrics.clone());
        }
        runtime.observe(Arc::new(self.call_log.clone()));
    }

    /// Every component is loaded into `runtime`: read the gauges from it (and from the
    /// MCP listener's `http` counts), and be ready once that listener accepts.
    pub fn loaded(&self, runtime: Arc<Runtime>, http: Option<Arc<HttpStats>>) {
        if let Some(metrics) = &self.metrics {
            metrics.attach(runtime, http.clone());
        }
        if let Some(http) = http {
            self.health.watch_listener(http);
        }
        self.health.set_loaded();
    }

    /// `shutdown`, which also marks the server not ready when it resolves.
    pub fn until_stopping<F: std::future::Future<Output = ()>>(
        &self,
        shutdown: F,
    ) -> impl std::future::Future<Output = ()> + use<F> {
        let health = self.health.clone();
        async move {
            shutdown.await;
            health.set_stopping();
        }
    }
}
