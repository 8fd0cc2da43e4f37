//! Transports: how messages reach the protocol layer and how answers leave it.
//!
//! - [`stdio`]: newline-delimited JSON-RPC on stdin and stdout.

mod pipe;
pub mod stdio;

pub use pipe::Pipe;
