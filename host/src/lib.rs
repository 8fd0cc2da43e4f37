//! # Cordon
//!
//! An MCP server that runs untrusted tools compiled to WebAssembly components and can always
//! stop them. The crate reads as the data's path:
//!
//! - [`runtime`]: engine, components, instances; the stop sequence and cleanup.
//! - [`paths`]: where Cordon keeps its data and finds its default tools.

pub mod paths;
pub mod runtime;
