//! The MCP protocol, without I/O: JSON-RPC framing ([`jsonrpc`]), what a message costs in
//! memory once parsed ([`cost`]) and the MCP message shapes ([`mcp`]; resources, prompts
//! and completions: [`features`]).

pub mod cost;
pub mod features;
pub mod jsonrpc;
pub mod mcp;
