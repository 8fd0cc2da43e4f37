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
