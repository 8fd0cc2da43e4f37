//! # Outbound HTTP: a small blocking client
//!
//! [`get`] and [`post`] for the common cases, [`Request`] for headers, other methods, a
//! body, timeouts and the body cap; every call returns a [`Response`] with the status, the
//! headers and the body, or an [`Error`] that converts into [`ToolError`](crate::ToolError)
//! with `?`:
//!
//! ```no_run
//! use cordon_guest::{ToolError, http};
//!
//! fn status_of(url: &str) -> Result<String, ToolError> {
//!     let response = http::Request::get(url)
//!         .header("accept", "text/plain")
//!         .max_body_bytes(64 * 1024)
//!         .send()?;
//!     Ok(format!("{} {}", response.status(), response.text()))
//! }
//! ```
//!
//! ## What the host allows
//!
//! Requests go through the host's `wasi:http/outgoing-handler`, which refuses every
//! destination the operator did not grant the component (`allow_http` in its config): the
//! default is nothing. A refused request fails with an error of kind [`ErrorKind::Denied`]
//! whose text says `denied`, before any connection is made (so does a name that resolves to
//! an inside address no rule names literally). The host also caps the number of requests per
//! call, the response bytes and the time to connect and to the first byte.
//! Redirects are not followed: a `3xx` is returned as it is, and following it is a new
//! request, checked like the first.
//!
//! ## Cancellation
//!
//! Every wait (for the request body to drain, for the response, for each piece of its body)
//! blocks on the resource's pollable, and checks `cancelled()` before and after it. Asking
//! tells the host that this call checks for stops, so a cancel, a timeout or shutdown wakes
//! the wait at once; the request then fails with [`ErrorKind::Cancelled`] (the text
//! `cancelled`, like [`Cancelled`](crate::Cancelled)), and the tool returns within
//! milliseconds. Any failure seen once the call was asked to stop is reported as cancelled.
//!
//! ## Why the `wasip2` crate
//!
//! The client is written on [`wasip2`](https://docs.rs/wasip2), the Bytecode Alliance's own
//! bindings for WASI 0.2 (from `wasi-rs`; the `wasi` crate re-exports it), and not on a
//! higher-level client such as `wstd` or `waki`:
//!
//! - It costs nothing new: the guests' lockfile already has it (the `hostile` test component
//!   uses it through `wasi`), so no new crate, no `http` crate and no executor enter the
//!   component, and only the functions a tool calls become imports.
//! - It leaves the waiting to us. `wstd` is an async runtime whose reactor owns the poll
//!   loop, and `waki` blocks inside its own `send`; with either, the check for a stop between
//!   two wakes would have to live in their code. Here each wait is one `block` between two
//!   `cancelled()` checks, which is what the host's wake-on-stop expects.
//! - What a small blocking client needs on top (split a URL, write a body, read one up to a
//!   cap, map error codes) is a few hundred lines, kept here.

use std::fmt;
use std::time::Duration;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, HeaderError, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions,
    Scheme,
};
use wasip2::io::poll::Pollable;
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

use crate::host;

/// The body cap when the request sets none: 8 MiB, the host's default response limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Bytes asked of the host per read of the response body.
const READ_CHUNK: u64 = 64 * 1024;

/// `GET url` with no extra headers, reading at most [`DEFAULT_MAX_BODY_BYTES`] of the body.
pub fn get(url: &str) -> Result<Response, Error> {
    Request::get(url).send()
}

/// `POST url` with `body`, reading at most [`DEFAULT_MAX_BODY_BYTES`] of the answer's body.
/// Set a `content-type` with [`Request::post`] and [`Request::header`].
pub fn post(url: &str, body: impl Into<Vec<u8>>) -> Result<Response, Error> {
    Request::post(url).body(body).send()
}

/// A request to build and [`send`](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    max_body_bytes: usize,
    connect_timeout: Option<Duration>,
    first_byte_timeout: Option<Duration>,
    between_bytes_timeout: Option<Duration>,
}

impl Request {
    /// A request with any method (`"PUT"`, `"DELETE"`, ...; matched case-sensitively, as HTTP
    /// does) to an `http://` or `https://` URL.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            connect_timeout: None,
            first_byte_timeout: None,
            between_bytes_timeout: None,
        }
    }

    /// A `GET` request.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST` request (give it a [`body`](Request::body)).
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Add a header; a name may repeat. The host refuses some names (`host`, `connection`,
    /// ...), which fails the request with [`ErrorKind::InvalidRequest`].
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    /// The request body. Its length is sent as `content-length` unless you set that header.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Read at most `bytes` of the response body ([`DEFAULT_MAX_BODY_BYTES`] by default).
    /// A longer body is cut there, without reading the rest, and the response says so
    /// ([`Response::truncated`]). The host has its own limit, which fails the request instead.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long to wait for the connection (the host's limit applies if it is shorter).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long to wait for the first byte of the response.
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = Some(timeout);
        self
    }

    /// How long to wait between two pieces of the response body.
    pub fn between_bytes_timeout(mut self, timeout: Duration) -> Self {
        self.between_bytes_timeout = Some(timeout);
        self
    }

    /// Send the request and wait for the response and its body (up to the cap).
    pub fn send(self) -> Result<Response, Error> {
        if cfg!(not(target_arch = "wasm32")) {
            return Err(Error::other(
                "outbound HTTP is not available in the native test host (cordon_guest::testing); \
                 try the request with `cordon call`",
            ));
        }
        let result = self.send_inner();
        // A wait cut short by a stop may surface as any failure: report it as the stop.
        match result {
            Err(error) if error.kind != ErrorKind::Cancelled && host::cancelled() => Err(Error::cancelled()),
            result => result,
        }
    }

    fn send_inner(self) -> Result<Response, Error> {
        check_cancelled()?;
        let target = Target::parse(&self.url)?;
        let headers = Fields::new();
        for (name, value) in &self.headers {
            headers.append(name, value).map_err(|error| Error::header(name, error))?;
        }
        // The body's length up front: without it the body goes chunked, which some servers
        // refuse (411), and a POST with no body needs `content-length: 0` for the same reason.
        let sends_body =
            !self.body.is_empty() || !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE");
        if sends_body && !self.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-length")) {
            let length = self.body.len().to_string();
            headers
                .append("content-length", length.as_bytes())
                .map_err(|error| Error::header("content-length", error))?;
        }
        let request = OutgoingRequest::new(headers);
        let invalid =
            |what: &str| Error::new(ErrorKind::InvalidRequest, format!("invalid {what} in {}", self.url));
        request.set_method(&method(&self.method)).map_err(|()| invalid("method"))?;
        request.set_scheme(Some(&target.scheme)).map_err(|()| invalid("scheme"))?;
        request.set_authority(Some(&target.authority)).map_err(|()| invalid("host"))?;
        request.set_path_with_query(Some(&target.path_with_query)).map_err(|()| invalid("path"))?;
        let body = if self.body.is_empty() {
            None
        } else {
            Some(request.body().map_err(|()| Error::other("the request body was already taken"))?)
        };
        let options = self.options()?;
        let future =
            outgoing_handler::handle(request, options).map_err(|code| Error::from_code(code, &target))?;
        let written = match body {
            Some(body) => write_body(body, &self.body),
            None => Ok(()),
        };
        // A request that fails (refused by the host, refused by the server) closes its body
        // stream too: wait for the response's verdict, whose reason comes first.
        let response = {
            let ready = future.subscribe();
            loop {
                if let Some(result) = future.get() {
                    break result;
                }
                wait(&ready)?;
            }
        };
        if let (Err(error), Ok(Ok(_))) = (written, &response) {
            return Err(error);
        }
        let response = response
            .map_err(|()| Error::other("the response was already taken"))?
            .map_err(|code| Error::from_code(code, &target))?;
        let status = response.status();
        let headers = response.headers().entries();
        let body = response.consume().map_err(|()| Error::other("the response body was already taken"))?;
        let (body, truncated) = read_body(&body, self.max_body_bytes, &target)?;
        Ok(Response { status, headers, body, truncated })
    }

    fn options(&self) -> Result<Option<RequestOptions>, Error> {
        if self.connect_timeout.is_none()
            && self.first_byte_timeout.is_none()
            && self.between_bytes_timeout.is_none()
        {
            return Ok(None);
        }
        let options = RequestOptions::new();
        let refused =
            |what: &str| Error::new(ErrorKind::InvalidRequest, format!("the host does not support a {what}"));
        if let Some(timeout) = self.connect_timeout {
            options.set_connect_timeout(Some(nanos(timeout))).map_err(|()| refused("connect timeout"))?;
        }
        if let Some(timeout) = self.first_byte_timeout {
            options
                .set_first_byte_timeout(Some(nanos(timeout)))
                .map_err(|()| refused("first-byte timeout"))?;
        }
        if let Some(timeout) = self.between_bytes_timeout {
            options
                .set_between_bytes_timeout(Some(nanos(timeout)))
                .map_err(|()| refused("between-bytes timeout"))?;
        }
        Ok(Some(options))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn method(name: &str) -> Method {
    match name {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_owned()),
    }
}

/// Write the whole request body, waiting whenever the host's buffer is full, then finish it.
fn write_body(body: OutgoingBody, mut bytes: &[u8]) -> Result<(), Error> {
    {
        let stream: OutputStream =
            body.write().map_err(|()| Error::other("the request body stream was already taken"))?;
        let ready = stream.subscribe();
        while !bytes.is_empty() {
            let room = stream.check_write().map_err(stream_error)?;
            if room == 0 {
                wait(&ready)?;
                continue;
            }
            let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            stream.write(&bytes[..n]).map_err(stream_error)?;
            bytes = &bytes[n..];
        }
        // Once every byte is written the host may close the stream on its own (a body whose
        // `content-length` is reached is complete): that is no error.
        match stream.flush() {
            Ok(()) | Err(StreamError::Closed) => {}
            Err(error) => return Err(stream_error(error)),
        }
        // A flush is done once the stream takes writes again (or is closed, complete).
        loop {
            match stream.check_write() {
                Ok(0) => wait(&ready)?,
                Ok(_) | Err(StreamError::Closed) => break,
                Err(error) => return Err(stream_error(error)),
            }
        }
    }
    OutgoingBody::finish(body, None).map_err(|code| Error::new(kind_of(&code), describe(&code)))
}

/// Read the body up to `cap` bytes; `true` when there was more (the rest is left unread).
fn read_body(body: &IncomingBody, cap: usize, target: &Target) -> Result<(Vec<u8>, bool), Error> {
    let stream: InputStream =
        body.stream().map_err(|()| Error::other("the response body stream was already taken"))?;
    let ready = stream.subscribe();
    let mut bytes = Vec::new();
    // One byte past the cap tells a body of exactly `cap` bytes from a longer one.
    while bytes.len() <= cap {
        let want = (cap - bytes.len()).saturating_add(1).min(READ_CHUNK as usize) as u64;
        match stream.read(want) {
            Ok(chunk) if chunk.is_empty() => wait(&ready)?,
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok((bytes, false)),
            Err(StreamError::LastOperationFailed(error)) => {
                return Err(match wasip2::http::types::http_error_code(&error) {
                    Some(code) => Error::from_code(code, target),
                    None => Error::new(
                        ErrorKind::Connection,
                        format!("reading the response body: {}", error.to_debug_string()),
                    ),
                });
            }
        }
    }
    bytes.truncate(cap);
    Ok((bytes, true))
}

fn stream_error(error: StreamError) -> Error {
    match error {
        StreamError::Closed => {
            Error::new(ErrorKind::Connection, "the connection closed while the request body was sent")
        }
        StreamError::LastOperationFailed(error) => match wasip2::http::types::http_error_code(&error) {
            Some(code) => Error::new(kind_of(&code), describe(&code)),
            None => Error::new(
                ErrorKind::Connection,
                format!("sending the request body: {}", error.to_debug_string()),
            ),
        },
    }
}

/// Ask whether the call should stop (which also tells the host to wake our waits on a
/// stop), block until `ready` fires or the host wakes us, and ask again.
fn wait(ready: &Pollable) -> Result<(), Error> {
    check_cancelled()?;
    ready.block();
    check_cancelled()
}

fn check_cancelled() -> Result<(), Error> {
    if host::cancelled() { Err(Error::cancelled()) } else { Ok(()) }
}

/// A URL split the way `wasi:http` takes it.
#[derive(Debug)]
struct Target {
    scheme: Scheme,
    authority: String,
    path_with_query: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, Error> {
        let invalid =
            |why: &str| Error::new(ErrorKind::InvalidRequest, format!("invalid URL {url:?}: {why}"));
        if url.chars().any(|c| c.is_ascii_whitespace() || c.is_ascii_control()) {
            return Err(invalid("it contains whitespace or control characters"));
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("expected http:// or https://"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(invalid("only http and https are supported")),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, rest) = rest.split_at(end);
        if authority.is_empty() {
            return Err(invalid("no host"));
        }
        if authority.contains('@') {
            return Err(invalid("credentials in URLs are not supported: send an authorization header"));
        }
        let rest = rest.split_once('#').map_or(rest, |(before, _fragment)| before);
        let path_with_query = if rest.starts_with('/') { rest.to_owned() } else { format!("/{rest}") };
        Ok(Self { scheme, authority: authority.to_owned(), path_with_query })
    }

    /// `scheme://authority`, as an allow-list rule names it.
    fn origin(&self) -> String {
        let scheme = match &self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Other(other) => other,
        };
        format!("{scheme}://{}", self.authority)
    }
}

/// A response: its status, its headers and its body, read up to the request's cap.
#[derive(Debug, Clone)]
pub struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    truncated: bool,
}

impl Response {
    /// The status code, e.g. `200`.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// True for a `2xx` status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// Every header, in the order received; names are lowercase.
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// The first value of header `name` (any case), if it is there and is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }

    /// The body bytes (at most the request's cap).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body bytes, taken.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    /// True when the body was longer than the cap and was cut there.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The body as text: invalid UTF-8 becomes U+FFFD, except that a character cut in two
    /// by the cap is dropped whole.
    pub fn text(&self) -> String {
        text_of(&self.body, self.truncated)
    }
}

fn text_of(body: &[u8], truncated: bool) -> String {
    let body = if truncated { &body[..complete_len(body)] } else { body };
    String::from_utf8_lossy(body).into_owned()
}

/// `body`'s length without the UTF-8 character a cut left incomplete at its end, if any.
fn complete_len(body: &[u8]) -> usize {
    // The last character starts at the last byte that is not a continuation (`10xxxxxx`),
    // at most three bytes before the end.
    let tail = body.len().saturating_sub(4);
    let Some(start) = (tail..body.len()).rev().find(|&i| body[i] & 0xc0 != 0x80) else {
        return body.len();
    };
    let needed = match body[start] {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    };
    if body.len() - start < needed { start } else { body.len() }
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The call was asked to stop (cancelled, timed out, host shutting down) while the
    /// request ran.
    Cancelled,
    /// The host refused the destination: the component is not granted it
    /// (`HTTP-request-denied`), or it resolves to an inside address (loopback, private, ...)
    /// that no rule names literally (`destination-IP-prohibited`).
    Denied,
    /// The request could not be made as given: a bad URL, method or header.
    InvalidRequest,
    /// Connecting, the first byte or the next ones took too long.
    Timeout,
    /// Name resolution, the connection or TLS failed, or the call used up the requests or
    /// connections the host allows it (`connection-limit-reached`).
    Connection,
    /// Anything else: a protocol error, a response over the host's limits.
    Other,
}

/// A failed request. Converts into [`ToolError`](crate::ToolError) with `?`, keeping its
/// text (`HTTP request to https://example.com denied by the host: ...`).
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    fn cancelled() -> Self {
        Self::new(ErrorKind::Cancelled, crate::Cancelled.to_string())
    }

    fn other(message: &str) -> Self {
        Self::new(ErrorKind::Other, message)
    }

    fn header(name: &str, error: HeaderError) -> Self {
        let why = match error {
            HeaderError::InvalidSyntax => "is not a valid header",
            HeaderError::Forbidden => "is a header the host does not let guests set",
            HeaderError::Immutable => "cannot be changed",
        };
        Self::new(ErrorKind::InvalidRequest, format!("{name:?} {why}"))
    }

    fn from_code(code: ErrorCode, target: &Target) -> Self {
        let origin = target.origin();
        match kind_of(&code) {
            ErrorKind::Denied => {
                let why = match code {
                    ErrorCode::DestinationIpProhibited => "an inside address no rule names literally",
                    _ => "not granted to this component",
                };
                Self::new(
                    ErrorKind::Denied,
                    format!("HTTP request to {origin} denied by the host ({}): {why}", describe(&code)),
                )
            }
            kind => Self::new(kind, format!("HTTP request to {origin} failed: {}", describe(&code))),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when the call was asked to stop while the request ran.
    pub fn is_cancelled(&self) -> bool {
        self.kind == ErrorKind::Cancelled
    }

    /// True when the host refused the request.
    pub fn is_denied(&self) -> bool {
        self.kind == ErrorKind::Denied
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<crate::Cancelled> for Error {
    fn from(_: crate::Cancelled) -> Self {
        Self::cancelled()
    }
}

fn kind_of(code: &ErrorCode) -> ErrorKind {
    use ErrorCode as C;
    match code {
        C::HttpRequestDenied | C::DestinationIpProhibited => ErrorKind::Denied,
        C::DnsTimeout
        | C::ConnectionTimeout
        | C::ConnectionReadTimeout
        | C::ConnectionWriteTimeout
        | C::HttpResponseTimeout => ErrorKind::Timeout,
        C::DnsError(_)
        | C::DestinationNotFound
        | C::DestinationUnavailable
        | C::DestinationIpUnroutable
        | C::ConnectionRefused
        | C::ConnectionTerminated
        | C::ConnectionLimitReached
        | C::TlsProtocolError
        | C::TlsCertificateError
        | C::TlsAlertReceived(_) => ErrorKind::Connection,
        C::HttpRequestMethodInvalid
        | C::HttpRequestUriInvalid
        | C::HttpRequestUriTooLong
        | C::HttpRequestLengthRequired
        | C::HttpRequestHeaderSectionSize(_)
        | C::HttpRequestHeaderSize(_) => ErrorKind::InvalidRequest,
        _ => ErrorKind::Other,
    }
}

/// The error code in words, for the message a client sees.
fn describe(code: &ErrorCode) -> String {
    use ErrorCode as C;
    match code {
        C::HttpRequestDenied => "HTTP-request-denied".to_owned(),
        C::DestinationIpProhibited => "destination IP prohibited".to_owned(),
        C::DnsTimeout => "DNS timeout".to_owned(),
        C::DnsError(payload) => match &payload.rcode {
            Some(rcode) => format!("DNS error ({rcode})"),
            None => "DNS error".to_owned(),
        },
        C::DestinationNotFound => "destination not found".to_owned(),
        C::DestinationUnavailable => "destination unavailable".to_owned(),
        C::ConnectionRefused => "connection refused".to_owned(),
        C::ConnectionTerminated => "connection terminated".to_owned(),
        C::ConnectionTimeout => "connect timeout".to_owned(),
        C::ConnectionReadTimeout | C::HttpResponseTimeout => "timed out waiting for the response".to_owned(),
        C::ConnectionWriteTimeout => "timed out sending the request".to_owned(),
        C::ConnectionLimitReached => "connection limit reached".to_owned(),
        C::TlsCertificateError => "TLS certificate error".to_owned(),
        C::HttpResponseBodySize(Some(limit)) => {
            format!("response body over the host's limit of {limit} bytes")
        }
        C::HttpResponseBodySize(None) => "response body over the host's limit".to_owned(),
        C::InternalError(Some(message)) => message.clone(),
        other => format!("{other:?}").trim_start_matches("ErrorCode::").to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> (String, String, String) {
        let target = Target::parse(url).unwrap();
        let origin = target.origin();
        let (scheme, authority) = origin.split_once("://").unwrap();
        (scheme.to_owned(), authority.to_owned(), target.path_with_query)
    }

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let split = |s: &str, a: &str, p: &str| (s.to_owned(), a.to_owned(), p.to_owned());
        assert_eq!(parse("http://127.0.0.1:9000"), split("http", "127.0.0.1:9000", "/"));
        assert_eq!(parse("HTTPS://example.com/a/b?c=d#frag"), split("https", "example.com", "/a/b?c=d"));
        assert_eq!(parse("http://example.com?q=1"), split("http", "example.com", "/?q=1"));
        assert_eq!(parse("http://[::1]:8080/x"), split("http", "[::1]:8080", "/x"));
    }

    #[test]
    fn bad_urls_are_invalid_requests() {
        for url in [
            "example.com",
            "ftp://example.com/",
            "http:///path",
            "http://user:pw@example.com/",
            "http://a b/",
        ] {
            let error = Target::parse(url).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{url}");
        }
    }

    #[test]
    fn a_character_cut_by_the_cap_is_dropped() {
        let body = "né".as_bytes(); // n, then é in two bytes
        assert_eq!(text_of(&body[..2], true), "n");
        assert_eq!(text_of(&body[..2], false), "n\u{fffd}");
        assert_eq!(text_of(body, true), "né");
        let check = "a✓".as_bytes(); // a, then ✓ in three bytes
        assert_eq!(text_of(&check[..3], true), "a");
        assert_eq!(text_of(&[0xff, b'a', 0xe2, 0x9c], true), "\u{fffd}a"); // bad byte kept as U+FFFD
    }

    #[test]
    fn a_denied_request_says_denied() {
        let target = Target::parse("http://10.0.0.1:81/").unwrap();
        let error = Error::from_code(ErrorCode::HttpRequestDenied, &target);
        assert!(error.is_denied());
        assert!(error.to_string().contains("denied"), "{error}");
        assert!(error.to_string().contains("http://10.0.0.1:81"), "{error}");
    }
}
