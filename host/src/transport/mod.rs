//! Transports: how messages reach the protocol layer and how answers leave it.
//!
//! - [`stdio`]: newline-delimited JSON-RPC on stdin and stdout.
//! - [`http`]: Streamable HTTP, `POST /mcp`, JSON or SSE answers; over TLS with [`tls`];
//!   behind a reverse proxy, clients told apart by [`proxies`].

pub mod http;
mod pipe;
pub mod proxies;
pub mod stdio;
pub mod tls;

pub use pipe::Pipe;
