//! The host's integration tests, one module per file beside this one, linked into one test
//! binary: each used to be a binary of its own, and linking 28 copies of the library and
//! wasmtime took most of a CI build's time spent on this crate (about 4 of its 7 minutes
//! on 2 cores). The modules share `common` (guests, servers, the schema checks).
//!
//! Run one file's tests with `cargo test -p cordon --test suite <file>::`.

mod common;

mod admission;
mod architecture;
mod asking;
mod attacks;
mod author;
mod call;
mod client_log;
mod egress;
mod examples;
mod features;
mod hostile_guests;
mod http;
mod http_load;
mod input;
mod install;
mod js_guest;
mod loading;
mod mounts;
mod mrtr;
mod oauth;
mod plain;
mod protocol;
mod python_guest;
mod relist;
mod reload;
mod runtime;
mod stdio;
mod telemetry;
mod tenants;
