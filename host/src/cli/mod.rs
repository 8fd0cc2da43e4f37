//! The subcommands of the `cordon` binary whose logic is more than a few lines: kept here,
//! as a library, so that `main.rs` only parses the command line and each piece is tested.
//!
//! - [`call`]: `cordon call`, one call of a tool for its author (progress, Ctrl-C, the
//!   config's limits and grants, exit codes).
//! - [`list`]: `cordon list`, a component's tools as JSON or for people.
//! - [`render`]: what those print, as pure functions.

pub mod call;
pub mod list;
pub mod render;
