//! # Cordon
//!
//! An MCP server that runs untrusted tools compiled to WebAssembly components and can always
//! stop them. The modules read as the data's path, each using only the ones after it:
//!
//! - [`transport`]: stdio (and Streamable HTTP): bytes in, messages out.
//! - [`protocol`]: JSON-RPC framing and MCP message shapes; no I/O.
//! - [`dispatch`]: one connection's requests: eras, concurrency, progress, cancellation.
//! - [`runtime`]: engine, components, instances; the one owner of the stop sequence.
//! - [`auth`]: a step of the HTTP transport: credentials in, the tenant they act for out.
//! - [`config`], [`paths`]: what to serve and where things live; [`text`]: guest text made
//!   safe to print.
//! - [`cli`]: the command line's subcommands for tool authors (`call`, `list`).
//! - [`reload`]: the config read again on SIGHUP or a file change, and `cordon check`.
//! - [`inspect`]: `cordon inspect`, what a component is and what it will get.
//! - [`author`]: beside the server, for plugin authors: `cordon new` and `cordon build`.
//! - [`telemetry`]: beside the path, observing it: the operator's log (one line per call),
//!   Prometheus metrics, health probes.

pub mod auth;
pub mod author;
pub mod cli;
pub mod config;
pub mod cost;
pub mod dispatch;
// Entry points for the fuzz targets in fuzz/, compiled always so that they never rot.
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod heap_count;
pub mod inspect;
pub mod paths;
pub mod protocol;
pub mod reload;
pub mod runtime;
#[cfg(test)]
mod scratch;
pub mod telemetry;
pub mod text;
pub mod transport;
