//! # Who is asking: the HTTP transport's authentication step
//!
//! Auth turns a request's credentials into the tenant it acts for; the transport then hands
//! the tenant to dispatch with the message, and nothing below dispatch knows about tokens.
//!
//! - [`oauth`]: an OAuth 2.1 resource server: JWT access tokens checked against the
//!   issuer's keys ([`jwks`]), and the Protected Resource Metadata (RFC 9728) that tells a
//!   client where to get them.

pub mod jwks;
pub mod oauth;
