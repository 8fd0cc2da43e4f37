//! The MCP protocol, without I/O: JSON-RPC framing ([`jsonrpc`]) and the MCP message
//! shapes ([`mcp`]).

pub mod jsonrpc;
pub mod mcp;
