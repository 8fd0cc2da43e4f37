//! The MCP protocol, without I/O and without knowing what serves it: JSON-RPC framing and
//! the messages the server writes ([`jsonrpc`]), MCP requests as the server reads them and the results it builds for them
//! ([`mcp`]), and the serde types of every MCP message it writes, in both revisions
//! ([`types`]; resources, prompts and completions: [`features`]), and what a 2025-11-25
//! server asks its client during a call ([`asking`]). A leaf: it imports nothing else from this crate (`tests/architecture.rs`).

pub mod asking;
pub mod features;
pub mod jsonrpc;
pub mod mcp;
pub mod types;
