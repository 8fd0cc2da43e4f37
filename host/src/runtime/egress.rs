//! # Outbound HTTP: what a component may reach, and what its requests may hold
//!
//! Every component is linked with `wasi:http/outgoing-handler` (wasmtime-wasi-http), and
//! every request goes through [`Egress::send_request`], which wasmtime-wasi-http calls in
//! place of its own client. Nothing is reachable unless the component's `allow_http`
//! grants it ([`HttpGrants`]), and then only under these rules:
//!
//! - **The rule check comes first**, before any name is resolved or any connection made:
//!   scheme, host (exact, or `*.` for subdomains, which does not include the apex) and
//!   port (the scheme's by default) must match one rule, or the guest gets
//!   `HTTP-request-denied`, and the operator's log says so once per call, with the tool
//!   and the refused authority.
//! - **The host resolves the name itself** and refuses addresses that lead inside
//!   (loopback, private, link-local and metadata, carrier-grade NAT, multicast, reserved
//!   and IPv6's equivalents, including IPv4 addresses inside IPv6 ones), and the
//!   addresses of this machine's own interfaces (a public one too: whatever listens on it,
//!   this server included, is the host's; read afresh at each lookup), with
//!   `destination-IP-prohibited`, unless the rule that matched names that address
//!   literally (`http://127.0.0.1:9000`). It then connects to the addresses it kept (the
//!   outside ones, in turn), never resolving again, so a name that changes its answer (DNS rebinding) cannot
//!   slip past. `https` is verified against the name the guest asked for, with the
//!   bundled web PKI roots.
//! - **Per-call limits** (`limits`): `http_requests` requests per call (more get
//!   `connection-limit-reached`), `http_response_bytes` of response bodies per call, all
//!   requests together (past it, the body fails with `HTTP-response-body-size`),
//!   `http_request_bytes` of request bodies sent per call, all requests together (the
//!   frame that would pass it fails the request with `HTTP-request-body-size`, and a
//!   `content-length` past what is left is refused so before connecting), and the
//!   connect and first-byte timeouts, which also cap what the guest asks for in its
//!   `request-options` (the time between body bytes is capped by the first-byte one).
//! - **What a request makes the host hold is charged to the call** (ledger.rs): each open
//!   connection is a descriptor against `open_files` and the server's descriptor budget,
//!   and its buffers (hyper's, capped at [`CONNECTION_BUFFER_BYTES`], and TLS's) are host
//!   memory against `host_memory_bytes`, until the connection closes, and its buffers'
//!   until the response's body is done too (a body that fits one read is handed over whole
//!   as the socket closes, and a guest may keep it unread). A refused charge is
//!   `connection-limit-reached`. The body a guest sends is buffered two chunks at most,
//!   half that size each. A response's head is charged what it holds (hyper's read buffer,
//!   which its values keep: 8 KiB, or twice its size; and each line's entry, measured)
//!   from its arrival until the guest drops the
//!   response (a head outlives its connection), the future
//!   holding it included: refused on arrival, the response is the error
//!   `HTTP-response-header-section-size`; refused when the guest takes it, a trap.
//! - **What a guest builds before it sends is charged too**: every set of header fields
//!   (`fields`, the outgoing requests and responses that carry one, and the fields their
//!   `headers` hand back, which share their map) counts its most, [`FIELDS_BYTES`] (a
//!   clone of a response head's fields: the head's size, if larger), against
//!   `host_memory_bytes` while it lives, an outgoing request its
//!   target's most too ([`TARGET_BYTES`]: a method, authority and path longer than
//!   [`MAX_METHOD_BYTES`], [`MAX_AUTHORITY_BYTES`] and [`MAX_PATH_BYTES`] are refused by
//!   their setters, which wasmtime-wasi-http would keep whatever their length), and every outgoing
//!   body its buffer ([`CONNECTION_BUFFER_BYTES`]) until the body is dropped or sent and
//!   done: `wasi:http/types` constructors are shadowed in front of wasmtime-wasi-http's
//!   own, which still do the work. A refused fields set traps (the constructor has no
//!   error to return); a refused body is `body()`'s error. A trailer section a body is
//!   finished with stays charged as its fields were until the call ends (it lives on with
//!   the body, which may never be sent).
//! - **Stops**: a request runs in a task owned by the guest's resource table, so when a
//!   stopped call's store is dropped the task is aborted and the connection closed; a
//!   guest that checks for stops is woken from its wait on the response (waits.rs).
//!
//! Redirects are the guest's business: each hop is a new request, checked the same way.
//!
//! A response's trailer section is charged once the guest takes it
//! (`future-trailers.get`), by its size, as a head's fields are; until then it is not, and
//! hyper keeps one to 16 KiB (its default `TRAILER_LIMIT`, which [`send`] leaves as it is),
//! so a call's untaken trailers hold at most `http_requests` times that.
//!
//! **Names are resolved asynchronously** (hickory-resolver): from the hosts file first
//! when it names the host in either family (as the system resolver's `files` source; read
//! at a component's first lookup), else from the system's name servers
//! (`/etc/resolv.conf`, read then too; without one, from the hosts file alone), each
//! component with a resolver of its own, so its name servers' standing is its own. Over
//! UDP only and with no cache: a TCP connection or a cached answer would stay with the
//! resolver, charged to no call (and a cache would show one tenant's lookups in
//! another's timings for as long as an answer lives; a lookup still joins an identical
//! one of the same component under way, so while it runs it shows). A tool's author may control the DNS of a name it is granted and
//! make every lookup stall. A stalled lookup holds no thread (the system resolver, on
//! tokio's blocking pool, could not be interrupted and kept a thread per stall, so a few
//! hostile components held every lookup of the process): it is a future of the
//! request's task, its sockets in it, dropped with it when the call stops, and bounded
//! by the connect timeout. Each component has [`LOOKUPS_PER_COMPONENT`] under way at
//! most (one that stalls waits behind itself), one call of it [`LOOKUPS_PER_CALL`] of
//! them, and each lookup is charged to its call
//! like a connection: the sockets its queries may hold at once ([`LOOKUP_SOCKETS`])
//! against `open_files` and the server's descriptor budget, and their buffers against
//! `host_memory_bytes`. The connection tries the outside addresses in turn, IPv4 first.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::p2::bindings::http::types::{
    HostFields, HostFutureIncomingResponse as FutureIncomingResponseHost,
    HostFutureTrailers as FutureTrailersHost, HostIncomingResponse as IncomingResponseHost,
    HostOutgoingBody as OutgoingBodyHost, HostOutgoingRequest as OutgoingRequestHost,
    HostOutgoingResponse as OutgoingResponseHost, Method,
};
use wasmtime_wasi_http::p2::body::{HostFutureTrailers, HostOutgoingBody, HyperOutgoingBody};
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest, HostOutgoingResponse,
};

use super::guest::GuestState;
use super::ledger::{Ledger, MemoryCharge, StreamCharge};
use super::limits::ToolLimits;

/// The most hyper may buffer for one connection, each way; charged to the call with its
/// descriptor while the connection is open.
pub(crate) const CONNECTION_BUFFER_BYTES: usize = 64 << 10;

/// Chunks an outgoing body buffers besides the one its channel keeps free (wasmtime-wasi-
/// http's channel holds this many and one more); together they fill the body's charge,
/// [`CONNECTION_BUFFER_BYTES`].
const OUTGOING_BODY_CHUNKS: usize = 1;
/// What TLS adds to a connection's buffers (rustls' record buffers and state).
const TLS_BUFFER_BYTES: usize = 64 << 10;

/// The most a set of header fields a guest builds may count (wasmtime-wasi-http's
/// `field_size_limit`: each name's and value's length, and 32 and 40 bytes for their
/// structs): a few KiB is what real requests use (its default allows 128 KiB).
pub(crate) const FIELD_SIZE_LIMIT: usize = 16 << 10;

/// What a set of header fields a guest builds may really hold of host memory, charged
/// whole to every such set: about 3 times [`FIELD_SIZE_LIMIT`] filled (the header map's
/// entries, its vectors' spare room and each value's heap block), and up to 6 times after
/// filling it with values, removing them, and filling it with names (a map never gives
/// its vectors' room back). Measured by `held_memory` below.
pub(crate) const FIELDS_BYTES: usize = 8 * FIELD_SIZE_LIMIT;

/// What one header field line is charged beside its name's and value's bytes: its entry in
/// the header map and its index (a map made for a head has room for twice its lines, at
/// most), and the heap block of a value copied out of the head. Measured by `held_memory`
/// below.
const HEADER_ENTRY_BYTES: usize = 288;

/// hyper's first read buffer for a connection (its `INIT_BUFFER_SIZE`), which a response
/// head's values are slices of and keep whole, however few; a longer head grows it by
/// doubling.
const HEAD_BUFFER_BYTES: usize = 8 << 10;

/// The longest method (an extension token; the standard ones are a few bytes) a guest may
/// give a request...
const MAX_METHOD_BYTES: usize = 64;
/// ...the longest authority (a DNS name is at most 253 bytes, with a port and user
/// information beside it)...
const MAX_AUTHORITY_BYTES: usize = 1 << 10;
/// ...and the longest path with its query (most servers refuse a longer request line):
/// wasmtime-wasi-http keeps each as the guest gives it, so they are bounded here...
const MAX_PATH_BYTES: usize = 8 << 10;
/// ...and charged whole to every outgoing request, beside its fields.
const TARGET_BYTES: usize = MAX_METHOD_BYTES + MAX_AUTHORITY_BYTES + MAX_PATH_BYTES;

/// The `wasi:http/types` instance wasmtime-wasi-http 48 defines (older 0.2 imports
/// resolve to it).
const HTTP_TYPES: &str = "wasi:http/types@0.2.12";

/// Put the charges in front of wasmtime-wasi-http's constructors of what a guest can make
/// the host hold before sending anything: header fields, and outgoing bodies' buffers.
pub(crate) fn shadow_http_types(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(HTTP_TYPES)?;
    types.func_wrap("[constructor]fields", |mut store: StoreContextMut<'_, GuestState>, (): ()| {
        let state = store.data_mut();
        charge_fields(state)?;
        let fields = HostFields::new(&mut state.http())?;
        state.track_charge::<FieldMap>(fields.rep(), FIELDS_BYTES);
        Ok((fields,))
    })?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: StoreContextMut<'_, GuestState>, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let state = store.data_mut();
            charge_fields(state)?;
            match HostFields::from_list(&mut state.http(), entries) {
                Ok(fields) => {
                    state.track_charge::<FieldMap>(fields.rep(), FIELDS_BYTES);
                    Ok((Ok(fields),))
                }
                Err(error) => {
                    state.ledger().release_memory(FIELDS_BYTES);
                    Ok((Err(error.downcast()?),))
                }
            }
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store: StoreContextMut<'_, GuestState>, (fields,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            // Fields are shared, not copied: the clone keeps what its source keeps.
            let bytes = fields_charge(state, &fields)?;
            charge_held(state, bytes)?;
            let copy = HostFields::clone(&mut state.http(), fields)?;
            state.track_charge::<FieldMap>(copy.rep(), bytes);
            Ok((copy,))
        },
    )?;
    // A request or response takes its fields over: made first, so that the fields'
    // charge goes (their resource is gone) before the request's comes. Refused, the guest
    // traps, and its store with the request goes.
    types.func_wrap(
        "[constructor]outgoing-request",
        |mut store: StoreContextMut<'_, GuestState>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let fields = fields_charge(state, &headers)?;
            let message = OutgoingRequestHost::new(&mut state.http(), headers)?;
            Ok((carrying_fields(state, message, fields + TARGET_BYTES)?,))
        },
    )?;
    // What a request holds beside its fields, bounded: past a bound the setter fails, as
    // for a value that does not parse.
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store: StoreContextMut<'_, GuestState>,
         (request, method): (Resource<HostOutgoingRequest>, Method)| {
            if matches!(&method, Method::Other(name) if name.len() > MAX_METHOD_BYTES) {
                return Ok((Err(()),));
            }
            Ok((OutgoingRequestHost::set_method(&mut store.data_mut().http(), request, method)?,))
        },
    )?;
    type SetText = for<'a, 'b> fn(
        &'a mut WasiHttpCtxView<'b>,
        Resource<HostOutgoingRequest>,
        Option<String>,
    ) -> wasmtime::Result<Result<(), ()>>;
    let texts: [(&str, usize, SetText); 2] = [
        ("[method]outgoing-request.set-authority", MAX_AUTHORITY_BYTES, |view, request, text| {
            OutgoingRequestHost::set_authority(view, request, text)
        }),
        ("[method]outgoing-request.set-path-with-query", MAX_PATH_BYTES, |view, request, text| {
            OutgoingRequestHost::set_path_with_query(view, request, text)
        }),
    ];
    for (name, most, set) in texts {
        types.func_wrap(
            name,
            move |mut store: StoreContextMut<'_, GuestState>,
                  (request, text): (Resource<HostOutgoingRequest>, Option<String>)| {
                if text.as_ref().is_some_and(|text| text.len() > most) {
                    return Ok((Err(()),));
                }
                Ok((set(&mut store.data_mut().http(), request, text)?,))
            },
        )?;
    }
    types.func_wrap(
        "[constructor]outgoing-response",
        |mut store: StoreContextMut<'_, GuestState>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let fields = fields_charge(state, &headers)?;
            let message = OutgoingResponseHost::new(&mut state.http(), headers)?;
            Ok((carrying_fields(state, message, fields)?,))
        },
    )?;
    // A response's head stays in host memory for as long as the guest keeps the response,
    // past the close of its connection (which gives the connection's charge back): charged
    // to the call, by its size, from its arrival (held by the future until taken here)
    // until the guest drops it.
    types.func_wrap(
        "[method]future-incoming-response.get",
        |mut store: StoreContextMut<'_, GuestState>, (future,): (Resource<HostFutureIncomingResponse>,)| {
            let state = store.data_mut();
            // Its charge from arrival ([`HeadCharge`]) is handed to the response, not
            // given back and taken again (meanwhile another request's task could take it).
            let arrived = match state.table().get_mut(&future)? {
                HostFutureIncomingResponse::Ready(Ok((response, _))) => response
                    .extensions_mut()
                    .remove::<HeadCharge>()
                    .and_then(|head| Arc::into_inner(head._charge)),
                _ => None,
            };
            let got = FutureIncomingResponseHost::get(&mut state.http(), future)?;
            if let Some(Ok(Ok(response))) = &got {
                // Its fields as the guest sees them (wasmtime-wasi-http drops forbidden
                // ones, whose bytes stay in the read buffer the others keep): charged as
                // they arrived, when that is more.
                let held = arrived.map_or(0, MemoryCharge::hand_over);
                let bytes = head_bytes(&state.table().get(response)?.headers).max(held);
                match bytes.checked_sub(held) {
                    Some(more) => {
                        if let Err(refused) = charge_held(state, more) {
                            state.ledger().release_memory(held);
                            return Err(refused);
                        }
                    }
                    None => state.ledger().release_memory(held - bytes),
                }
                state.track_charge::<HostIncomingResponse>(response.rep(), bytes);
            }
            Ok((got,))
        },
    )?;
    // The fields of a response's head share its map: kept after the response is dropped,
    // they are charged as the head is, by its size, until the guest drops them.
    types.func_wrap(
        "[method]incoming-response.headers",
        |mut store: StoreContextMut<'_, GuestState>, (response,): (Resource<HostIncomingResponse>,)| {
            let state = store.data_mut();
            // As the response is charged: its head as it arrived.
            state.settle_table_charges();
            let bytes = match state.tracked_charge(response.rep()) {
                Some(bytes) => bytes,
                None => head_bytes(&state.table().get(&response)?.headers),
            };
            let fields = IncomingResponseHost::headers(&mut state.http(), response)?;
            charge_held(state, bytes)?;
            state.track_charge::<FieldMap>(fields.rep(), bytes);
            Ok((fields,))
        },
    )?;
    // A response's trailer section, once the guest takes it, is charged by its size as a
    // head's fields are (hyper keeps one to 16 KiB; copied, it keeps no read buffer),
    // until the guest drops it.
    types.func_wrap(
        "[method]future-trailers.get",
        |mut store: StoreContextMut<'_, GuestState>, (future,): (Resource<HostFutureTrailers>,)| {
            let state = store.data_mut();
            let got = FutureTrailersHost::get(&mut state.http(), future)?;
            if let Some(Ok(Ok(Some(trailers)))) = &got {
                let bytes = fields_bytes(state.table().get(trailers)?);
                charge_held(state, bytes)?;
                state.track_charge::<FieldMap>(trailers.rep(), bytes);
            }
            Ok((got,))
        },
    )?;
    // A body finished with trailers takes them over (their resource goes, and its charge
    // with it), but the trailers live on with the body until it is sent or dropped:
    // charged again, as they were, until the call ends.
    types.func_wrap(
        "[static]outgoing-body.finish",
        |mut store: StoreContextMut<'_, GuestState>,
         (body, trailers): (Resource<HostOutgoingBody>, Option<Resource<FieldMap>>)| {
            let state = store.data_mut();
            let bytes = trailers.as_ref().map(|trailers| fields_charge(state, trailers)).transpose()?;
            match OutgoingBodyHost::finish(&mut state.http(), body, trailers) {
                Ok(()) => {
                    if let Some(bytes) = bytes {
                        charge_held(state, bytes)?;
                    }
                    Ok((Ok(()),))
                }
                Err(error) => Ok((Err(error.downcast()?),)),
            }
        },
    )?;
    shadow_outgoing::<HostOutgoingRequest>(&mut types)?;
    shadow_outgoing::<HostOutgoingResponse>(&mut types)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The `headers` and `body` methods of a request or response a guest builds, charged: see
/// `charged_headers` and `charged_body`.
fn shadow_outgoing<M: OutgoingMessage>(
    types: &mut wasmtime::component::LinkerInstance<'_, GuestState>,
) -> wasmtime::Result<()> {
    types.func_wrap(
        &format!("[method]{}.headers", M::RESOURCE),
        |mut store: StoreContextMut<'_, GuestState>, (message,): (Resource<M>,)| {
            Ok((charged_headers(store.data_mut(), message)?,))
        },
    )?;
    types.func_wrap(
        &format!("[method]{}.body", M::RESOURCE),
        |mut store: StoreContextMut<'_, GuestState>, (message,): (Resource<M>,)| {
            Ok((charged_body(store.data_mut(), message)?,))
        },
    )?;
    Ok(())
}

/// Charge one more set of header fields to the call, after giving back the charge of those
/// the guest dropped; refused, the guest traps.
fn charge_fields(state: &mut GuestState) -> wasmtime::Result<()> {
    charge_held(state, FIELDS_BYTES)
}

/// Charge `bytes` more of what the guest holds through `wasi:http/types`, after giving
/// back the charge of what it dropped; refused, the guest traps.
fn charge_held(state: &mut GuestState, bytes: usize) -> wasmtime::Result<()> {
    state.settle_table_charges();
    state.ledger().charge_memory(bytes).map_err(|refusal| {
        wasmtime::format_err!("{refusal}: the guest holds too many HTTP header fields, requests or responses")
    })
}

/// What a set of header fields keeps (their map is shared by clones, and by the request or
/// response they are given to): what they were charged (a response head's size, which
/// may pass what fields a guest builds may hold; fields the guest built, their most), or
/// untracked, their size; [`FIELDS_BYTES`] at least.
fn fields_charge(state: &mut GuestState, fields: &Resource<FieldMap>) -> wasmtime::Result<usize> {
    state.settle_table_charges();
    let bytes = match state.tracked_charge(fields.rep()) {
        Some(bytes) => bytes,
        None => head_bytes(state.table().get(fields)?),
    };
    Ok(bytes.max(FIELDS_BYTES))
}

/// Charge a request or response just made `bytes`: its fields, and a request's target.
fn carrying_fields<M: 'static>(
    state: &mut GuestState,
    message: Resource<M>,
    bytes: usize,
) -> wasmtime::Result<Resource<M>> {
    charge_held(state, bytes)?;
    state.track_charge::<M>(message.rep(), bytes);
    Ok(message)
}

/// An outgoing request or response, which a guest may give a body.
trait OutgoingMessage: Sized + Send + 'static {
    fn body_slot(&mut self) -> &mut Option<HyperOutgoingBody>;
    /// wasmtime-wasi-http's `body()` for it.
    fn open_body(
        view: &mut WasiHttpCtxView<'_>,
        message: Resource<Self>,
    ) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>>;
    /// wasmtime-wasi-http's `headers()` for it.
    fn headers(
        view: &mut WasiHttpCtxView<'_>,
        message: Resource<Self>,
    ) -> wasmtime::Result<Resource<FieldMap>>;
    /// What it is charged beside its fields (a request's target).
    const BESIDE_FIELDS: usize;
    /// Its resource's name in `wasi:http/types`.
    const RESOURCE: &'static str;
}

impl OutgoingMessage for HostOutgoingRequest {
    const BESIDE_FIELDS: usize = TARGET_BYTES;
    const RESOURCE: &'static str = "outgoing-request";
    fn body_slot(&mut self) -> &mut Option<HyperOutgoingBody> {
        &mut self.body
    }
    fn open_body(
        view: &mut WasiHttpCtxView<'_>,
        request: Resource<Self>,
    ) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>> {
        OutgoingRequestHost::body(view, request)
    }
    fn headers(
        view: &mut WasiHttpCtxView<'_>,
        request: Resource<Self>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        OutgoingRequestHost::headers(view, request)
    }
}

impl OutgoingMessage for HostOutgoingResponse {
    const BESIDE_FIELDS: usize = 0;
    const RESOURCE: &'static str = "outgoing-response";
    fn body_slot(&mut self) -> &mut Option<HyperOutgoingBody> {
        &mut self.body
    }
    fn open_body(
        view: &mut WasiHttpCtxView<'_>,
        response: Resource<Self>,
    ) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>> {
        OutgoingResponseHost::body(view, response)
    }
    fn headers(
        view: &mut WasiHttpCtxView<'_>,
        response: Resource<Self>,
    ) -> wasmtime::Result<Resource<FieldMap>> {
        OutgoingResponseHost::headers(view, response)
    }
}

/// `headers()` of a request or response a guest builds: the fields share its map, and
/// kept after it is dropped (which gives its charge back) they keep the map, so they are
/// charged as the fields it was made with were; refused, the guest traps.
fn charged_headers<M: OutgoingMessage>(
    state: &mut GuestState,
    message: Resource<M>,
) -> wasmtime::Result<Resource<FieldMap>> {
    state.settle_table_charges();
    let bytes = state
        .tracked_charge(message.rep())
        .map_or(FIELDS_BYTES, |charged| charged.saturating_sub(M::BESIDE_FIELDS))
        .max(FIELDS_BYTES);
    charge_held(state, bytes)?;
    let fields = M::headers(&mut state.http(), message)?;
    state.track_charge::<FieldMap>(fields.rep(), bytes);
    Ok(fields)
}

/// What a response head holds of host memory: the read buffer its values are slices of
/// (hyper's, which lives while any of them does: [`HEAD_BUFFER_BYTES`] at least, else
/// the head's size to the next power of two), and its map's entries and copied names.
fn head_bytes(headers: &http::HeaderMap) -> usize {
    let (mut read, mut map) = (0, 0);
    for (name, value) in headers {
        // A line: the name, ": ", the value and CRLF.
        read += name.as_str().len() + value.len() + 4;
        map += name.as_str().len() + HEADER_ENTRY_BYTES;
    }
    // hyper's buffer doubles what it reads next, to its most, and its vector keeps at least
    // twice what it held before.
    let buffer = if read <= HEAD_BUFFER_BYTES { HEAD_BUFFER_BYTES } else { 2 * read.next_power_of_two() };
    buffer + map
}

/// What a map of header fields copied out of what arrived (a trailer section) holds: each
/// line's name and value and an entry's overhead.
fn fields_bytes(headers: &http::HeaderMap) -> usize {
    headers.iter().map(|(name, value)| name.as_str().len() + value.len() + HEADER_ENTRY_BYTES).sum()
}

/// The charge of a response head from its arrival until the guest takes the response
/// (`future-incoming-response.get`, which drops the head's extensions and charges it
/// itself) or drops its future. In the response's extensions, which must be `Clone`.
#[derive(Clone)]
struct HeadCharge {
    _charge: Arc<MemoryCharge>,
}

/// `body()` of a request or response, its buffer charged to the call until the body is
/// dropped (sent and done, or never sent); refused, `body()`'s error.
fn charged_body<M: OutgoingMessage>(
    state: &mut GuestState,
    message: Resource<M>,
) -> wasmtime::Result<Result<Resource<HostOutgoingBody>, ()>> {
    let Ok(charge) = state.ledger().hold_memory(CONNECTION_BUFFER_BYTES) else {
        return Ok(Err(()));
    };
    let rep = message.rep();
    let body = M::open_body(&mut state.http(), message)?;
    if body.is_ok() {
        let message = state.table().get_mut(&Resource::<M>::new_borrow(rep))?;
        let slot = message.body_slot();
        *slot = slot.take().map(|body| charged(body, charge));
    }
    Ok(body)
}

/// `body` holding `charge` until it is dropped: sent and done, or never sent.
fn charged(body: HyperOutgoingBody, charge: MemoryCharge) -> HyperOutgoingBody {
    ChargedBody { inner: body, _charge: charge }.boxed_unsync()
}

struct ChargedBody {
    inner: HyperOutgoingBody,
    _charge: MemoryCharge,
}

impl Body for ChargedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A rule of `allow_http` that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow_http rule {rule:?}: {problem}")]
pub struct GrantError {
    rule: String,
    problem: &'static str,
}

/// Name lookups one component may have under way at once...
pub(crate) const LOOKUPS_PER_COMPONENT: usize = 4;
/// ...and one call of it: one call's stalling names leave the component turns for its
/// other calls (and tenants).
pub(crate) const LOOKUPS_PER_CALL: usize = 2;
/// Name servers a lookup asks at once (hickory's `num_concurrent_reqs`, at most)...
const LOOKUP_SERVERS_AT_ONCE: usize = 2;
/// ...each for both families at once, each query sent up to this many times before the
/// first answer, each time from a socket of its own (hickory's UDP retries)...
const UDP_TRIES_AT_ONCE: usize = 3;
/// ...so the sockets one lookup may hold at once, charged to its call as descriptors...
const LOOKUP_SOCKETS: usize = 2 * LOOKUP_SERVERS_AT_ONCE * UDP_TRIES_AT_ONCE;
/// ...and their receive buffers (an answer's most each, [`LOOKUP_ANSWER_BYTES`]) and the
/// answers, as host memory.
const LOOKUP_BYTES: usize = 64 << 10;
/// The longest answer a lookup takes (EDNS's payload size; a longer one is truncated, and
/// with no TCP the lookup fails).
const LOOKUP_ANSWER_BYTES: usize = 4096;

type Resolver = hickory_resolver::TokioResolver;

/// A component's resolver and the system's hosts file as it read it.
struct NameResolution {
    /// Or why it could not be made.
    resolver: Result<Resolver, String>,
    hosts: hickory_resolver::Hosts,
}

/// A loaded component's outbound HTTP: its rules, its resolver (made at its first
/// lookup) and its share of the lookups.
pub(crate) struct ComponentEgress {
    pub(crate) rules: HttpGrants,
    lookups: Arc<tokio::sync::Semaphore>,
    /// Where names are resolved: the system's name servers and hosts file, or (tests)
    /// given ones.
    name_servers: Option<(Vec<SocketAddr>, String)>,
    resolution: OnceLock<NameResolution>,
}

impl std::fmt::Debug for ComponentEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentEgress").field("rules", &self.rules).finish_non_exhaustive()
    }
}

impl ComponentEgress {
    pub(crate) fn new(rules: HttpGrants) -> Self {
        Self::resolving_with(rules, None)
    }

    fn resolving_with(rules: HttpGrants, name_servers: Option<(Vec<SocketAddr>, String)>) -> Self {
        Self {
            rules,
            lookups: Arc::new(tokio::sync::Semaphore::new(LOOKUPS_PER_COMPONENT)),
            name_servers,
            resolution: OnceLock::new(),
        }
    }

    /// This component's resolver and hosts file, made and read at its first lookup.
    fn resolution(&self) -> &NameResolution {
        use hickory_resolver::config::{
            ConnectionConfig, LookupIpStrategy, NameServerConfig, ProtocolConfig, ResolveHosts,
            ResolverConfig, ResolverOpts,
        };
        self.resolution.get_or_init(|| {
            let (config, mut options) = match &self.name_servers {
                None => hickory_resolver::system_conf::read_system_conf().unwrap_or_else(|error| {
                    tracing::warn!(
                        "the system's resolver configuration could not be read ({error}): \
                         outbound HTTP resolves names from the hosts file only"
                    );
                    (ResolverConfig::from_parts(None, Vec::new(), Vec::new()), ResolverOpts::default())
                }),
                Some((servers, _)) => {
                    let servers = servers.iter().map(|server| {
                        let mut udp = ConnectionConfig::udp();
                        udp.port = server.port();
                        NameServerConfig::new(server.ip(), true, vec![udp])
                    });
                    (ResolverConfig::from_parts(None, Vec::new(), servers.collect()), ResolverOpts::default())
                }
            };
            // Over UDP only: a TCP connection to a name server would stay with the resolver
            // past the lookup's charge and its call. EDNS lets an answer use the 4 KiB a
            // receive buffer holds; a longer one fails the lookup.
            let (domain, search, mut servers) = config.into_parts();
            for server in &mut servers {
                server.connections.retain(|connection| matches!(connection.protocol, ProtocolConfig::Udp));
            }
            let config = ResolverConfig::from_parts(domain, search, servers);
            // (The connection configs are what keep TCP out: hickory 0.26 does not read
            // `try_tcp_on_error`.)
            options.edns0 = true;
            options.edns_payload_len = LOOKUP_ANSWER_BYTES as u16;
            // No cache: it would keep answers (up to a day each) that no call is charged
            // for, and let one tenant of the component see another's lookups in its
            // timings. The hosts file is read here and answered from first, as the system
            // resolver's `files` source is.
            options.cache_size = 0;
            options.use_hosts_file = ResolveHosts::Never;
            options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
            options.num_concurrent_reqs = options.num_concurrent_reqs.clamp(1, LOOKUP_SERVERS_AT_ONCE);
            let provider = hickory_resolver::net::runtime::TokioRuntimeProvider::default();
            let resolver = Resolver::builder_with_config(config, provider)
                .with_options(options)
                .build()
                .map_err(|error| format!("the resolver could not be made: {error}"));
            let hosts = match &self.name_servers {
                None => hickory_resolver::Hosts::from_system().unwrap_or_default(),
                Some((_, text)) => {
                    let mut hosts = hickory_resolver::Hosts::default();
                    let _ = hosts.read_hosts_conf(text.as_bytes());
                    hosts
                }
            };
            NameResolution { resolver, hosts }
        })
    }
}

/// Why a name gave no address to connect to.
#[derive(Debug)]
enum LookupError {
    /// The name does not exist (`NXDOMAIN`).
    NoSuchName,
    /// The name exists but has no address.
    NoAddress,
    /// No name server answered in time.
    TimedOut,
    /// The call's budget cannot hold the lookup.
    Refused(super::ledger::Refusal),
    /// Anything else: no answer, a name that does not parse.
    Failed(String),
}

/// Resolve `host`: from the hosts file when it names it (either family), else with
/// `egress`'s resolver, within its share of lookups and the call's (`turns`), charging the
/// lookup to the call until it ends or whoever waits for it stops (the future is the
/// lookup: dropped, its sockets close). IPv4 addresses first.
async fn lookup(
    egress: &ComponentEgress,
    turns: &tokio::sync::Semaphore,
    ledger: &Arc<Ledger>,
    host: &str,
) -> Result<Vec<IpAddr>, LookupError> {
    use hickory_resolver::proto::op::Query;
    use hickory_resolver::proto::rr::{Name, RecordType};
    // Relaxed: names with an underscore are in use, and the system resolver takes them.
    let name = Name::from_str_relaxed(host).map_err(|error| LookupError::Failed(error.to_string()))?;
    let NameResolution { resolver, hosts } = egress.resolution();
    let from_hosts: Vec<IpAddr> = [RecordType::A, RecordType::AAAA]
        .into_iter()
        .filter_map(|kind| hosts.lookup_static_host(&Query::query(name.clone(), kind)))
        .flat_map(|found| {
            found.answers().iter().filter_map(|record| record.data.ip_addr()).collect::<Vec<_>>()
        })
        .collect();
    if !from_hosts.is_empty() {
        return Ok(from_hosts);
    }
    let resolver = resolver.as_ref().map_err(|why| LookupError::Failed(why.clone()))?;
    let failed = |error: tokio::sync::AcquireError| LookupError::Failed(error.to_string());
    // The call's turn first: a call waiting on its own lookups holds none of the
    // component's.
    let _call_turn = turns.acquire().await.map_err(failed)?;
    let _turn = egress.lookups.acquire().await.map_err(failed)?;
    let _charge = ledger.charge_lookup(LOOKUP_SOCKETS, LOOKUP_BYTES).map_err(LookupError::Refused)?;
    match resolver.lookup_ip(name).await {
        Ok(found) => Ok(found.iter().collect()),
        Err(error) if error.is_nx_domain() => Err(LookupError::NoSuchName),
        Err(error) if error.is_no_records_found() => Err(LookupError::NoAddress),
        Err(hickory_resolver::net::NetError::Timeout) => Err(LookupError::TimedOut),
        Err(error) => Err(LookupError::Failed(error.to_string())),
    }
}

/// The hosts a component may reach over HTTP: its `allow_http` rules, and the secret
/// headers the host sets on requests to some of them. Empty (the default) grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpGrants {
    rules: Vec<Rule>,
    secret_headers: Vec<SecretHeader>,
}

/// A header the host sets on every request to the hosts `to` grants (`secret_headers`),
/// replacing any the guest set, with a value the guest never sees: a credential kept on
/// the host, which the guest can use with those hosts only.
#[derive(Clone, PartialEq, Eq)]
struct SecretHeader {
    name: http::HeaderName,
    /// Marked sensitive (never indexed by an HPACK encoder, never shown).
    value: http::HeaderValue,
    to: Vec<Rule>,
}

impl std::fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let to: Vec<String> = self.to.iter().map(Rule::to_string).collect();
        f.debug_struct("SecretHeader").field("name", &self.name).field("to", &to).finish_non_exhaustive()
    }
}

/// Headers a secret header may not be: the ones that frame the message or route it.
const FRAMING_HEADERS: [http::HeaderName; 7] = [
    http::header::HOST,
    http::header::CONTENT_LENGTH,
    http::header::TRANSFER_ENCODING,
    http::header::CONNECTION,
    http::header::TE,
    http::header::UPGRADE,
    http::header::TRAILER,
];

/// A `secret_headers` entry that cannot be used; never names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret header {header:?}: {problem}")]
pub struct SecretHeaderError {
    header: String,
    problem: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    tls: bool,
    host: HostRule,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    /// Exactly this name (lower case).
    Name(String),
    /// Any name ending in `.` + this (lower case); not this name itself.
    Subdomains(String),
    /// This address, named literally: the only way to reach an inside address.
    Address(IpAddr),
}

impl HttpGrants {
    /// Parse `allow_http` rules: `scheme://host[:port]`, where the scheme is `http` or
    /// `https`, the host a name, `*.` and a name, an IPv4 address or a bracketed IPv6 one,
    /// and nothing follows but an optional `/`.
    pub fn parse(rules: &[String]) -> Result<Self, GrantError> {
        let rules = rules.iter().map(|rule| Rule::parse(rule)).collect::<Result<_, _>>()?;
        Ok(Self { rules, secret_headers: Vec::new() })
    }

    /// Set the header `name` to `value` on every request to the hosts the rules `to` grant,
    /// each of which must be one of the `allow_http` rules.
    pub fn add_secret_header(
        &mut self,
        name: &str,
        value: &str,
        to: &[String],
    ) -> Result<(), SecretHeaderError> {
        let problem = |problem: String| SecretHeaderError { header: name.to_owned(), problem };
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| problem("not a header name".to_owned()))?;
        if FRAMING_HEADERS.contains(&header) {
            return Err(problem("frames or routes the message; it cannot carry a secret".to_owned()));
        }
        if self.secret_headers.iter().any(|secret| secret.name == header) {
            return Err(problem("is set twice".to_owned()));
        }
        let mut value = http::HeaderValue::from_str(value).map_err(|_| {
            problem("its value is not a valid header value (a control character?)".to_owned())
        })?;
        value.set_sensitive(true);
        if to.is_empty() {
            return Err(problem("`to` names no allow_http rule: it would be sent nowhere".to_owned()));
        }
        let to = to
            .iter()
            .map(|text| {
                let rule = Rule::parse(text).map_err(|error| problem(error.to_string()))?;
                match self.rules.contains(&rule) {
                    true => Ok(rule),
                    false => Err(problem(format!("`to` rule {text:?} is not one of allow_http"))),
                }
            })
            .collect::<Result<_, _>>()?;
        self.secret_headers.push(SecretHeader { name: header, value, to });
        Ok(())
    }

    /// The secret headers, as `name -> scheme://host:port, ...`, for `cordon inspect`.
    pub fn describe_secret_headers(&self) -> Vec<String> {
        let describe = |secret: &SecretHeader| {
            let to: Vec<String> = secret.to.iter().map(Rule::to_string).collect();
            format!("{} -> {}", secret.name, to.join(", "))
        };
        self.secret_headers.iter().map(describe).collect()
    }

    /// Set on `headers` the secret headers of the hosts that include `target`, for the
    /// methods of plain requests only: not `TRACE` (its answer shows the request as the
    /// server saw it), `CONNECT` (a tunnel) or any extension method (`TRACK` reflects as
    /// `TRACE` does on some servers; what others do is unknown).
    fn set_secret_headers(&self, target: &Target, method: &http::Method, headers: &mut http::HeaderMap) {
        use http::Method;
        let plain = [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ];
        if !plain.contains(method) {
            return;
        }
        for secret in &self.secret_headers {
            if secret.to.iter().any(|rule| rule.grants(target.tls, &target.host, target.port)) {
                headers.insert(secret.name.clone(), secret.value.clone());
            }
        }
    }

    /// Whether any host is granted at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, as `scheme://host:port`, for `cordon inspect` and messages.
    pub fn describe(&self) -> Vec<String> {
        self.rules.iter().map(Rule::to_string).collect()
    }

    /// The rule that grants `host` (as in a URI: an IPv6 address in brackets) on `port`.
    fn grant(&self, tls: bool, host: &str, port: u16) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.grants(tls, host, port))
    }
}

impl Rule {
    /// Whether it grants `host` (as in a URI: an IPv6 address in brackets) on `port`.
    fn grants(&self, tls: bool, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let address = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        self.tls == tls
            && self.port == port
            && match (&self.host, address) {
                (HostRule::Address(granted), Some(address)) => *granted == address,
                (HostRule::Name(name), None) => *name == host,
                (HostRule::Subdomains(parent), None) => {
                    host.strip_suffix(parent.as_str()).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
                }
                _ => false,
            }
    }

    fn parse(text: &str) -> Result<Self, GrantError> {
        let problem = |problem| GrantError { rule: text.to_owned(), problem };
        let (scheme, rest) =
            text.split_once("://").ok_or_else(|| problem("must start with http:// or https://"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(problem("the scheme must be http or https")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
            return Err(problem("must be scheme://host[:port], with no path, query or user"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (address, after) = bracketed.split_once(']').ok_or_else(|| problem("an unclosed ["))?;
            let address = address.parse::<Ipv6Addr>().map_err(|_| problem("not an IPv6 address in [ ]"))?;
            (HostRule::Address(IpAddr::V6(address)), after.strip_prefix(':'))
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let host =
                HostRule::parse(host).ok_or_else(|| problem("not a host name, *.name or IP address"))?;
            if matches!(&host, HostRule::Subdomains(name) if !name.contains('.')) {
                // `*.com` grants every host anyone can register under it.
                return Err(problem(
                    "a wildcard must stand under a name of two labels or more (*.example.com)",
                ));
            }
            (host, port)
        };
        let port = match port {
            None if authority.ends_with(']') || !authority.contains(':') => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(port) => {
                port.parse::<u16>().ok().filter(|&port| port > 0).ok_or_else(|| problem("a bad port"))?
            }
            None => return Err(problem("a bad port")),
        };
        Ok(Self { tls, host, port })
    }
}

impl HostRule {
    fn parse(host: &str) -> Option<Self> {
        let host = host.to_ascii_lowercase();
        if let Ok(address) = host.parse::<Ipv4Addr>() {
            return Some(Self::Address(IpAddr::V4(address)));
        }
        let (subdomains, name) = match host.strip_prefix("*.") {
            Some(name) => (true, name),
            None => (false, host.as_str()),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        };
        if name.len() > 253 || !name.split('.').all(label_ok) {
            return None;
        }
        Some(if subdomains { Self::Subdomains(name.to_owned()) } else { Self::Name(name.to_owned()) })
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        match &self.host {
            HostRule::Name(name) => write!(f, "{scheme}://{name}:{}", self.port),
            HostRule::Subdomains(name) => write!(f, "{scheme}://*.{name}:{}", self.port),
            HostRule::Address(IpAddr::V6(address)) => write!(f, "{scheme}://[{address}]:{}", self.port),
            HostRule::Address(address) => write!(f, "{scheme}://{address}:{}", self.port),
        }
    }
}

/// Whether `address` leads inside: to this machine, a private or link-local network, a
/// cloud metadata service, or anything not globally routable. Reachable only through a
/// rule that names it.
pub(crate) fn is_inside(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_inside_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_inside_v4(v4);
            }
            let segments = v6.segments();
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (segments[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7 (AWS metadata: fd00:ec2::254)
                || (segments[0] & 0xffc0) == 0xfe80 // link-local, fe80::/10
                || (segments[0] & 0xffc0) == 0xfec0 // site-local, fec0::/10
                || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
                || (segments[0] == 0x2001 && segments[1] == 0) // Teredo: its IPv4 end is obfuscated
                || segments[..4] == [0x100, 0, 0, 0] // discard, 100::/64
                || segments[..3] == [0x64, 0xff9b, 1] // local-use NAT64 (RFC 8215): a local translator's, to any IPv4
        }
    }
}

/// The IPv4 address an IPv6 one carries, which it leads to: mapped (::ffff:0:0/96),
/// compatible (::/96, but `::` and `::1`), translated (SIIT, ::ffff:0:0:0/96), NAT64
/// (64:ff9b::/96) and 6to4 (2002::/16).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = v6.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from(((high as u32) << 16) | low as u32);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    if (segments[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified())
        || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || segments[..6] == [0, 0, 0, 0, 0xffff, 0]
    {
        return Some(embedded(segments[6], segments[7]));
    }
    (segments[0] == 0x2002).then(|| embedded(segments[1], segments[2]))
}

/// Those of `addresses` that lead outside, in order: not inside ([`is_inside`]) and not
/// one of this machine's `own` addresses, however written (an IPv6 address that carries
/// one of its IPv4 addresses leads back to it through a NAT64 or 6to4 relay that
/// hairpins); none when `own` could not be read.
fn outside_addresses(addresses: &[SocketAddr], own: Option<&[IpAddr]>) -> Vec<SocketAddr> {
    let Some(own) = own else { return Vec::new() };
    let canonical = |address: IpAddr| match address {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    };
    let outside = |address: &SocketAddr| {
        let ip = canonical(address.ip());
        !is_inside(ip) && !own.iter().any(|&mine| canonical(mine) == ip)
    };
    addresses.iter().copied().filter(outside).collect()
}

/// The most addresses of one name a connection tries, in turn, within its timeout.
const MAX_ADDRESSES_TRIED: usize = 8;

/// The addresses of this machine's network interfaces (`getifaddrs`): a name that
/// resolves to one of them leads back to this host, whatever its address looks like.
/// Only what the interfaces carry: a public address that a NAT in front of the machine
/// maps to it (a cloud's elastic IP) is not among them, and a NAT that hairpins still
/// leads such a connection back here; an operator behind one names the address in no
/// rule, or filters it at the network.
/// `None` when they cannot be read (no descriptor left for the netlink socket, say).
fn own_addresses() -> Option<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` fills `list` with a linked list that `freeifaddrs` frees; each
    // node's address is read as the structure its family says it is, before the free.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut addresses = Vec::new();
        let mut node = list;
        while !node.is_null() {
            let address = (*node).ifa_addr;
            if !address.is_null() {
                match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(address as *const libc::sockaddr_in);
                        addresses.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(address as *const libc::sockaddr_in6);
                        addresses.push(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            node = (*node).ifa_next;
        }
        libc::freeifaddrs(list);
        Some(addresses)
    }
}

fn is_inside_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_unspecified()
        || a == 0 // "this network", 0/8
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local() // 169.254/16, metadata services included
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT, 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, 192.0.0/24
        || v4.is_documentation()
        || (a == 198 && (18..20).contains(&b)) // benchmarking, 198.18/15
        || v4.is_multicast()
        || a >= 240 // reserved and broadcast
        // Azure's platform address (its WireServer, health probes and DNS), reachable from
        // every VM there on ports 80 and 32526, though it is a public address.
        || v4 == Ipv4Addr::new(168, 63, 129, 16)
}

/// One call's outbound HTTP: its grants and what is left of its limits. Made for each
/// store; a spare instance's is remade for the call that takes it.
pub(crate) struct Egress {
    grants: Arc<ComponentEgress>,
    ledger: Arc<Ledger>,
    call: Arc<CallEgress>,
}

/// What every request of one call shares, from its own task.
struct CallEgress {
    /// The component and the tool being called, for the log; no tool for a component's
    /// `list` at load.
    component: Arc<str>,
    tool: Option<Arc<str>>,
    requests_left: AtomicUsize,
    requests_limit: usize,
    response_bytes_left: AtomicUsize,
    response_bytes_limit: usize,
    request_bytes_left: AtomicUsize,
    request_bytes_limit: usize,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    /// Whether a refusal has been logged for this call yet: once is enough.
    refusal_logged: AtomicBool,
    /// The call's name lookups under way ([`LOOKUPS_PER_CALL`]).
    lookup_turns: tokio::sync::Semaphore,
}

impl Egress {
    pub(crate) fn new(
        grants: Arc<ComponentEgress>,
        component: Arc<str>,
        limits: &ToolLimits,
        ledger: Arc<Ledger>,
    ) -> Self {
        Self { grants, ledger, call: Arc::new(CallEgress::new(limits, component, None)) }
    }

    /// Start afresh for a call of `tool` under `limits`.
    /// Whether a request was sent (or its sending begun) since the instance or call began.
    pub(crate) fn sent_any(&self) -> bool {
        self.call.requests_left.load(Ordering::Relaxed) < self.call.requests_limit
    }

    pub(crate) fn begin_call(&mut self, tool: &str, limits: &ToolLimits) {
        self.call = Arc::new(CallEgress::new(limits, self.call.component.clone(), Some(tool.into())));
    }
}

impl CallEgress {
    fn new(limits: &ToolLimits, component: Arc<str>, tool: Option<Arc<str>>) -> Self {
        Self {
            component,
            tool,
            requests_left: AtomicUsize::new(limits.http_requests),
            requests_limit: limits.http_requests,
            response_bytes_left: AtomicUsize::new(limits.http_response_bytes),
            response_bytes_limit: limits.http_response_bytes,
            request_bytes_left: AtomicUsize::new(limits.http_request_bytes),
            request_bytes_limit: limits.http_request_bytes,
            connect_timeout: limits.http_connect_timeout,
            first_byte_timeout: limits.http_first_byte_timeout,
            refusal_logged: AtomicBool::new(false),
            lookup_turns: tokio::sync::Semaphore::new(LOOKUPS_PER_CALL),
        }
    }

    /// Log a refusal the first time in this call.
    fn log_refusal(&self, authority: &str, why: &str) {
        if !self.refusal_logged.swap(true, Ordering::Relaxed) {
            let component = &*self.component;
            let tool = self.tool.as_deref().unwrap_or("-");
            tracing::warn!(
                component,
                tool,
                authority,
                "outbound HTTP request refused: {why} (logged once per call)"
            );
        }
    }

    fn take_request(&self) -> bool {
        take(&self.requests_left, 1)
    }

    /// What a request body past `http_request_bytes` fails with.
    fn request_body_too_large(&self) -> HttpError {
        HttpError::HttpRequestBodySize(Some(self.request_bytes_limit as u64))
    }

    /// The guest's timeouts, capped by the call's limits.
    fn timeouts(&self, asked: Option<RequestOptions>) -> (Duration, Duration, Duration) {
        let asked = asked.unwrap_or_default();
        let cap = |asked: Option<Duration>, limit: Duration| asked.map_or(limit, |asked| asked.min(limit));
        let connect = cap(asked.connect_timeout, self.connect_timeout);
        let first_byte = cap(asked.first_byte_timeout, self.first_byte_timeout);
        let between_bytes =
            cap(asked.between_bytes_timeout, self.first_byte_timeout).max(Duration::from_nanos(1));
        (connect, first_byte, between_bytes)
    }
}

/// A request that passed the rules: where to connect, and how.
struct Target {
    host: String,
    port: u16,
    tls: bool,
    /// The matching rule named this address: it may be inside.
    literal: Option<IpAddr>,
    authority: String,
}

/// What the connection's driver returns when the connection closes.
type ConnectionFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;
type SendFuture =
    Box<dyn Future<Output = Result<(http::Response<WasiBody>, ConnectionFuture), HttpError>> + Send>;

impl WasiHttpHooks for Egress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _body_result: ConnectionFuture,
    ) -> SendFuture {
        let call = self.call.clone();
        let target = self.check(&request);
        let mut request = request;
        if let Ok(target) = &target {
            let method = request.method().clone();
            self.grants.rules.set_secret_headers(target, &method, request.headers_mut());
        }
        let (ledger, grants) = (self.ledger.clone(), self.grants.clone());
        let overflowed = Arc::new(AtomicBool::new(false));
        let request = request.map(|body| {
            RequestBody { inner: body, call: call.clone(), overflowed: overflowed.clone() }.boxed_unsync()
        });
        Box::new(async move {
            let target = target?;
            let (connect_timeout, first_byte_timeout, between_bytes_timeout) = call.timeouts(options);
            let deadline = tokio::time::Instant::now() + connect_timeout;
            let connect = connect(&target, &call, &ledger, &grants, deadline);
            let connection = tokio::time::timeout_at(deadline, connect)
                .await
                .map_err(|_| HttpError::ConnectionTimeout)??;
            // hyper reports a body that failed as its own error: say which limit it was.
            let response = send(connection, request, first_byte_timeout).await.map_err(|error| {
                if overflowed.load(Ordering::Acquire) {
                    call.log_refusal(
                        &target.authority,
                        "the call sent the request body bytes its http_request_kb allows",
                    );
                    call.request_body_too_large()
                } else {
                    error
                }
            })?;
            let (mut response, io, buffers) = response;
            // The head waits with the future until the guest takes it (`get`, which
            // charges it from then on) or drops the future, however long: charged now.
            let Ok(charge) = ledger.hold_memory(head_bytes(response.headers())) else {
                call.log_refusal(
                    &target.authority,
                    "the call's host memory budget cannot hold the response's head",
                );
                return Err(HttpError::HttpResponseHeaderSectionSize(None));
            };
            response.extensions_mut().insert(HeadCharge { _charge: Arc::new(charge) });
            let response = response.map(|incoming| {
                // An empty body buffers nothing.
                let buffers = (!incoming.is_end_stream()).then_some(buffers);
                ResponseBody {
                    incoming,
                    call: call.clone(),
                    between_bytes: between_bytes_timeout,
                    idle: None,
                    _buffers: buffers,
                }
                .boxed_unsync()
            });
            // wasmtime-wasi-http logs a connection's error as a warning, outside the call's
            // log budget: a guest and a server failing every connection would write one per
            // request. The guest learns of it from its streams; the operator at debug level.
            let io: ConnectionFuture = Box::new(async move {
                if let Err(error) = Pin::from(io).await {
                    tracing::debug!(
                        component = &*call.component,
                        "an outbound connection ended in error: {error}"
                    );
                }
                Ok(())
            });
            Ok((response, io))
        })
    }

    /// A guest's body is buffered a chunk at a time, in a channel of one chunk more than
    /// [`Self::p2_outgoing_body_buffer_chunks`]: two chunks of half the buffer a body is
    /// charged (wasmtime-wasi-http's default chunk is 1 MiB; a whole buffer's chunk let a
    /// body hold twice its charge).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        CONNECTION_BUFFER_BYTES / (OUTGOING_BODY_CHUNKS + 1)
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        OUTGOING_BODY_CHUNKS
    }
}

impl Egress {
    /// The rules, and the call's request count: what can be decided before any I/O.
    fn check(&self, request: &http::Request<WasiBody>) -> Result<Target, HttpError> {
        self.check_head(request.uri(), request.headers())
    }

    /// [`Self::check`], from what it reads of the request.
    fn check_head(&self, uri: &http::Uri, headers: &http::HeaderMap) -> Result<Target, HttpError> {
        let authority = uri.authority().map(|authority| authority.as_str()).unwrap_or("").to_owned();
        // User info (a password, say) never reaches the log.
        let logged = authority.rsplit_once('@').map_or(authority.as_str(), |(_, host)| host);
        let refuse = |why: &str, error: HttpError| {
            self.call.log_refusal(logged, why);
            Err(error)
        };
        // wasmtime-wasi-http sends the authority as the `Host` header as it is, user info
        // and all, while the rules (and secret headers) go by the host after any `@`: a
        // `Host: evil.example:443@api.example.com` is read as `evil.example` by common
        // servers, and a shared front end would route the request (its secrets with it)
        // to a virtual host no rule grants.
        if authority.contains('@') {
            return refuse("user info in its authority", HttpError::HttpRequestUriInvalid);
        }
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return refuse("not http or https", HttpError::HttpRequestDenied),
        };
        let (Some(host), Some(port)) =
            (uri.host(), uri.port_u16().or_else(|| uri.authority().map(|_| if tls { 443 } else { 80 })))
        else {
            return refuse("no host", HttpError::HttpRequestUriInvalid);
        };
        // The rest of the authority, also sent as it is in `Host`, must be a port:
        // `http` reads no port from `api.example.com:x.evil.example` (its host is
        // `api.example.com`, so a rule and its secrets would match) and does not check that
        // `[::1]` ends there, while a front end routing on a `Host` suffix sends the
        // request to the virtual host the rest names.
        let rest = authority.strip_prefix(host).unwrap_or("?");
        let port_only = rest.strip_prefix(':').is_some_and(|digits| {
            !digits.is_empty()
                && digits.bytes().all(|byte| byte.is_ascii_digit())
                && digits.parse::<u16>().is_ok()
        });
        if !rest.is_empty() && !port_only {
            return refuse("more than a port after its host", HttpError::HttpRequestUriInvalid);
        }
        let Some(rule) = self.grants.rules.grant(tls, host, port) else {
            return refuse("no allow_http rule grants it", HttpError::HttpRequestDenied);
        };
        // A body declared past what the call may still send would fail on the way: refuse
        // it before it connects.
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.call.request_bytes_left.load(Ordering::Acquire) as u64)
        {
            return refuse(
                "its content-length passes the request body bytes the call's http_request_kb leaves",
                self.call.request_body_too_large(),
            );
        }
        if !self.call.take_request() {
            return refuse(
                "the call made all the requests its http_requests allows",
                HttpError::ConnectionLimitReached,
            );
        }
        let literal = match rule.host {
            HostRule::Address(address) => Some(address),
            _ => None,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        Ok(Target { host, port, tls, literal, authority })
    }
}

/// Resolve the target (unless its rule named the address), refuse inside addresses,
/// charge the connection to the call and open it by `deadline`, with TLS for `https`.
async fn connect(
    target: &Target,
    call: &CallEgress,
    ledger: &Arc<Ledger>,
    egress: &ComponentEgress,
    deadline: tokio::time::Instant,
) -> Result<Connection, HttpError> {
    let addresses = match target.literal {
        Some(address) => vec![SocketAddr::new(address, target.port)],
        None => {
            let addresses = match lookup(egress, &call.lookup_turns, ledger, &target.host).await {
                Ok(addresses) if !addresses.is_empty() => addresses,
                Ok(_) | Err(LookupError::NoAddress) => return Err(HttpError::DestinationNotFound),
                Err(LookupError::NoSuchName) => {
                    return Err(HttpError::DnsError { rcode: Some("NXDOMAIN".into()), info_code: None });
                }
                Err(LookupError::TimedOut) => return Err(HttpError::DnsTimeout),
                Err(LookupError::Refused(refusal)) => {
                    call.log_refusal(&target.authority, &refusal.to_string());
                    return Err(HttpError::ConnectionLimitReached);
                }
                Err(LookupError::Failed(why)) => {
                    tracing::debug!(authority = %target.authority, %why, "name lookup failed");
                    return Err(HttpError::DnsError { rcode: None, info_code: None });
                }
            };
            let addresses: Vec<SocketAddr> =
                addresses.into_iter().map(|address| SocketAddr::new(address, target.port)).collect();
            let own = own_addresses();
            let outside = outside_addresses(&addresses, own.as_deref());
            if outside.is_empty() {
                let why = match own {
                    Some(_) => "its name resolves to an inside address or one of this machine's own",
                    None => "this machine's own addresses could not be read to rule them out",
                };
                call.log_refusal(&target.authority, why);
                return Err(HttpError::DestinationIpProhibited);
            }
            outside
        }
    };
    let charge =
        ledger.charge_connection(if target.tls { TLS_BUFFER_BYTES } else { 0 }).map_err(|refusal| {
            call.log_refusal(&target.authority, &refusal.to_string());
            HttpError::ConnectionLimitReached
        })?;
    // Each address in turn, as the system's connect does (on a host without an IPv4
    // route the IPv4 addresses fail at once and an IPv6 one is tried next), each within
    // an even share of the time left, so that one whose packets are dropped does not
    // take the time of those after it.
    let mut failed = None;
    let mut connected = None;
    let addresses: Vec<SocketAddr> = addresses.into_iter().take(MAX_ADDRESSES_TRIED).collect();
    for (tried, &address) in addresses.iter().enumerate() {
        let share = deadline.saturating_duration_since(tokio::time::Instant::now())
            / (addresses.len() - tried) as u32;
        match tokio::time::timeout(share, TcpStream::connect(address)).await {
            Ok(Ok(tcp)) => {
                connected = Some(tcp);
                break;
            }
            Ok(Err(error)) => failed = Some(error),
            Err(_timed_out) => failed = Some(std::io::ErrorKind::TimedOut.into()),
        }
    }
    let tcp = connected.ok_or_else(|| match failed {
        Some(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => HttpError::ConnectionRefused,
        Some(error) if error.kind() == std::io::ErrorKind::TimedOut => HttpError::ConnectionTimeout,
        Some(error) => HttpError::Connect(error),
        None => HttpError::DestinationNotFound,
    })?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Stream> = if target.tls {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let tls =
            tokio_rustls::TlsConnector::from(tls_config()).connect(name, tcp).await.map_err(tls_error)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    Ok(Connection { stream, charge })
}

/// A failed handshake as the guest's error code: a certificate the roots do not vouch for
/// for this name is `TLS-certificate-error`, an alert from the server
/// `TLS-alert-received`, anything else `TLS-protocol-error`.
fn tls_error(error: std::io::Error) -> HttpError {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => HttpError::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => HttpError::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => HttpError::TlsProtocolError,
    }
}

/// An open connection and its charge to the call, which lasts as long as it does.
struct Connection {
    stream: Box<dyn Stream>,
    charge: StreamCharge,
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// The client configuration for `https`: the web PKI roots bundled with the server (the
/// host's own store is not consulted, so what a guest may trust does not depend on it).
/// The JWKS fetch (`auth::jwks`) trusts the same roots.
pub(crate) fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            // No session cache: one for the whole process would keep tickets and chains no
            // call is charged for, and a resumed handshake would let one tenant's tool
            // tell, by its timing, which servers another's reached.
            config.resumption = rustls::client::Resumption::disabled();
            Arc::new(config)
        })
        .clone()
}

/// Send `request` on `connection` (HTTP/1.1) and wait for the response head within
/// `first_byte_timeout`; the returned future drives the connection until it closes. The
/// connection's buffers stay charged until both it and the response's body are done: a
/// body that fits one read is handed over whole when the socket closes, and the guest
/// may keep it unread.
async fn send(
    connection: Connection,
    mut request: http::Request<WasiBody>,
    first_byte_timeout: Duration,
) -> Result<(http::Response<Incoming>, ConnectionFuture, Arc<MemoryCharge>), HttpError> {
    let Connection { stream, mut charge } = connection;
    // hyper's buffers only: TLS's go with the socket.
    let buffers = Arc::new(charge.split_memory(CONNECTION_BUFFER_BYTES));
    let held = buffers.clone();
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(CONNECTION_BUFFER_BYTES)
        .handshake(TokioIo::new(stream))
        .await?;
    // The request line carries the path only: the authority is in `Host` already.
    let path = request.uri().path_and_query().map_or("/", |path| path.as_str());
    *request.uri_mut() =
        http::Uri::builder().path_and_query(path).build().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let mut connection = Box::pin(async move {
        let result = connection.await;
        drop((charge, held));
        result.map_err(HttpError::from)
    });
    let response = sender.send_request(request);
    let mut response = std::pin::pin!(tokio::time::timeout(first_byte_timeout, response));
    // Drive the connection while the response head is awaited.
    let mut closed = None;
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(response) = response.as_mut().poll(cx) {
            return Poll::Ready(response);
        }
        if closed.is_none()
            && let Poll::Ready(result) = connection.as_mut().poll(cx)
        {
            closed = Some(result);
            // The connection ended first: the response can now only fail or be ready.
            return response.as_mut().poll(cx);
        }
        Poll::Pending
    })
    .await
    .map_err(|_| HttpError::ConnectionReadTimeout)??;
    let io: ConnectionFuture = match closed {
        Some(result) => Box::new(std::future::ready(result)),
        None => Box::new(connection),
    };
    Ok((response, io, buffers))
}

/// A response body, counted against the call's `http_response_bytes`, that fails when
/// no bytes come for `between_bytes`.
struct ResponseBody {
    incoming: Incoming,
    call: Arc<CallEgress>,
    between_bytes: Duration,
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Its connection's buffers' charge, shared with the connection (see [`send`]); none
    /// for an empty body.
    _buffers: Option<Arc<MemoryCharge>>,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.idle = None;
                let size = frame.data_ref().map_or(0, Bytes::len);
                if !take(&self.call.response_bytes_left, size) {
                    let limit = self.call.response_bytes_limit as u64;
                    return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(limit)))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(HttpError::from(error)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let between_bytes = self.between_bytes;
                let idle = self.idle.get_or_insert_with(|| Box::pin(tokio::time::sleep(between_bytes)));
                match idle.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}

/// A request body, counted against the call's `http_request_bytes`: the frame that would
/// pass it fails the body (and so the request) instead of going out.
struct RequestBody {
    inner: WasiBody,
    call: Arc<CallEgress>,
    /// Set when this body failed for the limit, to name the request's error.
    overflowed: Arc<AtomicBool>,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && !take(&self.call.request_bytes_left, frame.data_ref().map_or(0, Bytes::len))
        {
            self.overflowed.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(self.call.request_body_too_large())));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Take `amount` from what is `left`, all or nothing.
fn take(left: &AtomicUsize, amount: usize) -> bool {
    left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| left.checked_sub(amount)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The address a connection tries first.
    fn outside_address(addresses: &[SocketAddr], own: Option<&[IpAddr]>) -> Option<SocketAddr> {
        outside_addresses(addresses, own).first().copied()
    }

    fn grants(rules: &[&str]) -> HttpGrants {
        HttpGrants::parse(&rules.iter().map(|rule| rule.to_string()).collect::<Vec<_>>()).unwrap()
    }

    /// A name server on the loopback: `A` queries get 203.0.113.7, `AAAA` queries no
    /// record, names under `gone.` `NXDOMAIN`, and names under `stall.` no answer ever (a
    /// tool's author who controls its granted name's DNS).
    async fn stub_name_server() -> SocketAddr {
        use hickory_resolver::proto::op::{Message, ResponseCode};
        use hickory_resolver::proto::rr::{RData, Record, RecordType, rdata::A};
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = vec![0; 4096];
            while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
                let Ok(query) = Message::from_vec(&buffer[..length]) else { continue };
                let Some(question) = query.queries.first().cloned() else { continue };
                let name = question.name().to_ascii();
                let mut reply = query.clone().into_response();
                reply.metadata.recursion_available = true;
                if name.starts_with("stall.") {
                    continue;
                } else if name.starts_with("gone.") {
                    reply.metadata.response_code = ResponseCode::NXDomain;
                } else if question.query_type() == RecordType::A {
                    let answer = RData::A(A(Ipv4Addr::new(203, 0, 113, 7)));
                    reply.add_answer(Record::from_rdata(question.name().clone(), 60, answer));
                }
                let _ = socket.send_to(&reply.to_vec().unwrap(), from).await;
            }
        });
        address
    }

    /// A call's lookup turns.
    fn call_turns() -> Arc<tokio::sync::Semaphore> {
        Arc::new(tokio::sync::Semaphore::new(LOOKUPS_PER_CALL))
    }

    fn call_ledger(server: &Arc<super::super::ledger::DescriptorBudget>) -> Arc<Ledger> {
        Arc::new(Ledger::new(&ToolLimits::default(), server.clone()))
    }

    /// Wait (polling, within a deadline) until `done`.
    async fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Lookups that stall hold no thread and no shared slot: twenty components with four
    /// stalled lookups each (the system resolver on the blocking pool held the process's
    /// sixteen with four components) leave another component's lookups answering. A
    /// stalled lookup is charged to its call, and a stopped call gives back its
    /// component's turn and its charge at once, not when a name server gives up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_lookups_hold_nothing_past_their_call_and_no_one_elses_turn() {
        let name_server = stub_name_server().await;
        let egress = || {
            ComponentEgress::resolving_with(HttpGrants::default(), Some((vec![name_server], String::new())))
        };
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(100_000, 1));
        let stalling: Vec<Arc<ComponentEgress>> = (0..20).map(|_| Arc::new(egress())).collect();
        let ledgers: Vec<Arc<Ledger>> = stalling.iter().map(|_| call_ledger(&descriptors)).collect();
        let calls: Vec<_> = stalling
            .iter()
            .zip(&ledgers)
            .flat_map(|(component, ledger)| {
                (0..LOOKUPS_PER_COMPONENT).map(move |_| {
                    let (component, ledger) = (component.clone(), ledger.clone());
                    tokio::spawn(
                        async move { lookup(&component, &call_turns(), &ledger, "stall.example").await },
                    )
                })
            })
            .collect();
        wait_until("every stalling component's turns taken", || {
            stalling.iter().all(|component| component.lookups.available_permits() == 0)
        })
        .await;
        let charged = LOOKUPS_PER_COMPONENT * LOOKUP_BYTES;
        assert!(ledgers.iter().all(|ledger| ledger.host_memory() == charged), "each lookup is charged");
        let sockets = LOOKUPS_PER_COMPONENT * LOOKUP_SOCKETS;
        let beyond_guarantees = stalling.len() * sockets.saturating_sub(descriptors.guaranteed());
        assert_eq!(descriptors.in_use(), beyond_guarantees, "each lookup's sockets are charged");

        // Another component resolves beside the eighty stalls; a name that does not exist
        // and one that stalls are told apart from it.
        let other = egress();
        let ledger = call_ledger(&descriptors);
        let turns = call_turns();
        let answer =
            tokio::time::timeout(Duration::from_secs(10), lookup(&other, &turns, &ledger, "ok.example"))
                .await
                .expect("another component's lookup is not held up by the stalls");
        assert_eq!(answer.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))]);
        assert!(matches!(
            lookup(&other, &turns, &ledger, "gone.example").await,
            Err(LookupError::NoSuchName)
        ));
        assert_eq!(ledger.host_memory(), 0, "an ended lookup's charge is given back");

        // The stalling calls stop: their turns and charges come back at once.
        calls.iter().for_each(tokio::task::JoinHandle::abort);
        wait_until("every turn and charge given back", || {
            stalling.iter().all(|component| component.lookups.available_permits() == LOOKUPS_PER_COMPONENT)
                && ledgers.iter().all(|ledger| ledger.host_memory() == 0)
        })
        .await;
    }

    /// One call's stalling lookups take at most [`LOOKUPS_PER_CALL`] of its component's
    /// turns: another call of the same component still resolves. Before, one call with
    /// four requests to names that stall held all four, and every other call of the
    /// component (any tenant's) waited out its connect timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_calls_stalling_lookups_leave_its_components_other_calls_a_turn() {
        let name_server = stub_name_server().await;
        let component = Arc::new(ComponentEgress::resolving_with(
            HttpGrants::default(),
            Some((vec![name_server], String::new())),
        ));
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(100_000, 1));
        let (stalling_turns, stalling_ledger) = (call_turns(), call_ledger(&descriptors));
        let stalls: Vec<_> = (0..2 * LOOKUPS_PER_COMPONENT)
            .map(|_| {
                let (component, turns, ledger) =
                    (component.clone(), stalling_turns.clone(), stalling_ledger.clone());
                tokio::spawn(async move { lookup(&component, &turns, &ledger, "stall.example").await })
            })
            .collect();
        wait_until("the stalling call's turns taken", || stalling_turns.available_permits() == 0).await;
        assert_eq!(component.lookups.available_permits(), LOOKUPS_PER_COMPONENT - LOOKUPS_PER_CALL);
        let other = call_ledger(&descriptors);
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            lookup(&component, &call_turns(), &other, "ok.example"),
        )
        .await
        .expect("another call of the component resolves beside the stalls");
        assert_eq!(answer.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))]);
        // Beside them, not after one gave up.
        assert!(stalls.iter().all(|stall| !stall.is_finished()), "a stall ended first");
        stalls.iter().for_each(tokio::task::JoinHandle::abort);
    }

    /// A name the hosts file gives either family is answered from it alone, before any
    /// query (the system resolver's `files` source: no name server learns of it, none is
    /// waited for); others are asked, names with an underscore too.
    #[tokio::test]
    async fn the_hosts_file_answers_first_and_names_are_taken_as_the_system_takes_them() {
        let hosts = "198.51.100.9 stall.internal.example\n".to_owned();
        let egress = ComponentEgress::resolving_with(
            HttpGrants::default(),
            Some((vec![stub_name_server().await], hosts)),
        );
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(100_000, 1));
        let ledger = call_ledger(&descriptors);
        // Under `stall.`, the name server would never answer: the hosts file does.
        let found = tokio::time::timeout(
            Duration::from_secs(10),
            lookup(&egress, &call_turns(), &ledger, "stall.internal.example"),
        )
        .await
        .expect("answered from the hosts file, with no query");
        assert_eq!(found.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(198, 51, 100, 9))]);
        let underscored = lookup(&egress, &call_turns(), &ledger, "a_b.example").await;
        assert_eq!(underscored.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))]);
    }

    /// A lookup past the call's descriptors is refused before any query goes out.
    #[tokio::test]
    async fn a_lookup_the_calls_descriptors_cannot_hold_is_refused() {
        let egress = ComponentEgress::resolving_with(
            HttpGrants::default(),
            Some((vec![stub_name_server().await], String::new())),
        );
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(100_000, 1));
        let limits = ToolLimits { open_files: LOOKUP_SOCKETS - 1, ..ToolLimits::default() };
        let ledger = Arc::new(Ledger::new(&limits, descriptors));
        let refused = lookup(&egress, &call_turns(), &ledger, "ok.example").await;
        assert!(
            matches!(refused, Err(LookupError::Refused(super::super::ledger::Refusal::OpenFiles))),
            "{refused:?}"
        );
    }

    #[test]
    fn rules_name_scheme_host_and_port() {
        let grants =
            grants(&["https://api.github.com", "https://*.example.com:8443", "http://127.0.0.1:9000/"]);
        assert!(grants.grant(true, "api.github.com", 443).is_some());
        assert!(grants.grant(true, "API.GitHub.com", 443).is_some(), "names compare without case");
        assert!(grants.grant(false, "api.github.com", 80).is_none(), "the scheme is part of the rule");
        assert!(grants.grant(true, "api.github.com", 8443).is_none(), "the port defaults to the scheme's");
        assert!(grants.grant(true, "evil.api.github.com", 443).is_none());
        assert!(grants.grant(true, "a.example.com", 8443).is_some());
        assert!(grants.grant(true, "a.b.example.com", 8443).is_some());
        assert!(grants.grant(true, "example.com", 8443).is_none(), "*. is for subdomains only");
        assert!(grants.grant(true, "badexample.com", 8443).is_none());
        assert!(grants.grant(false, "127.0.0.1", 9000).is_some());
        assert!(grants.grant(false, "localhost", 9000).is_none(), "an address rule grants that address only");
        assert_eq!(
            grants.describe(),
            ["https://api.github.com:443", "https://*.example.com:8443", "http://127.0.0.1:9000"]
        );
        let v6 = self::grants(&["http://[::1]:8080"]);
        assert!(v6.grant(false, "[::1]", 8080).is_some());
    }

    #[test]
    fn secret_headers_are_checked_set_for_their_hosts_only_and_never_shown() {
        let rules = ["https://api.example.com".to_owned(), "https://*.example.org".to_owned()];
        let mut grants = HttpGrants::parse(&rules).unwrap();
        let to = |rule: &str| [rule.to_owned()];
        for (name, value, to, problem) in [
            ("host", "x", to("https://api.example.com"), "frames or routes"),
            ("content-length", "1", to("https://api.example.com"), "frames or routes"),
            ("bad name", "x", to("https://api.example.com"), "not a header name"),
            ("authorization", "line\nbreak", to("https://api.example.com"), "not a valid header value"),
            ("authorization", "x", to("https://other.example.com"), "is not one of allow_http"),
            ("authorization", "x", to("http://api.example.com"), "is not one of allow_http"),
            ("authorization", "x", to("not a rule"), "must start with"),
        ] {
            let error = grants.add_secret_header(name, value, &to).unwrap_err().to_string();
            assert!(error.contains(problem) && !error.contains("break"), "{name}: {error}");
        }
        assert!(
            grants.add_secret_header("authorization", "x", &[]).unwrap_err().to_string().contains("nowhere")
        );
        grants.add_secret_header("authorization", "Bearer s3cr3t", &to("https://*.example.org")).unwrap();
        let twice = grants.add_secret_header("Authorization", "y", &to("https://api.example.com"));
        assert!(twice.unwrap_err().to_string().contains("set twice"));
        assert!(!format!("{grants:?}").contains("s3cr3t"), "{grants:?}");
        assert_eq!(grants.describe_secret_headers(), ["authorization -> https://*.example.org:443"]);

        let target = |host: &str, tls: bool| Target {
            host: host.to_owned(),
            port: 443,
            tls,
            literal: None,
            authority: host.to_owned(),
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("the guest's own"));
        let get = http::Method::GET;
        grants.set_secret_headers(&target("api.example.com", true), &get, &mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "the guest's own", "not a host it is bound to");
        grants.set_secret_headers(&target("a.example.org", false), &get, &mut headers);
        assert_eq!(headers[http::header::AUTHORIZATION], "the guest's own", "not over plain http");
        let extension = |name: &[u8]| http::Method::from_bytes(name).unwrap();
        for reflecting in
            [http::Method::TRACE, http::Method::CONNECT, extension(b"trace"), extension(b"TRACK")]
        {
            grants.set_secret_headers(&target("a.example.org", true), &reflecting, &mut headers);
            assert_eq!(headers[http::header::AUTHORIZATION], "the guest's own", "{reflecting}");
        }
        grants.set_secret_headers(&target("a.example.org", true), &get, &mut headers);
        assert_eq!(headers.get_all(http::header::AUTHORIZATION).iter().count(), 1);
        assert_eq!(headers[http::header::AUTHORIZATION], "Bearer s3cr3t");
        assert!(headers[http::header::AUTHORIZATION].is_sensitive());
    }

    /// `http` takes `api.example.com:x.evil.example` for a host with no port, which the
    /// rule `https://api.example.com` (and its secrets) would match, while `Host` carries
    /// all of it: only a port may follow the host.
    #[test]
    fn only_a_port_may_follow_the_host_a_rule_matched() {
        let grants =
            HttpGrants::parse(&["https://api.example.com".to_owned(), "http://[::1]:8080".to_owned()])
                .unwrap();
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(100_000, 1));
        let egress = Egress::new(
            Arc::new(ComponentEgress::resolving_with(grants, None)),
            "c".into(),
            &ToolLimits::default(),
            call_ledger(&descriptors),
        );
        let check = |uri: &str| egress.check_head(&uri.parse().unwrap(), &http::HeaderMap::new());
        for granted in ["https://api.example.com/", "https://api.example.com:443/", "http://[::1]:8080/"] {
            assert!(check(granted).is_ok(), "{granted}");
        }
        for disguised in [
            "https://api.example.com:x.evil.example/",
            "https://api.example.com:/",
            "https://api.example.com:443x/",
            "http://[::1]x.evil.example:8080/",
        ] {
            assert!(matches!(check(disguised), Err(HttpError::HttpRequestUriInvalid)), "{disguised}");
        }
    }

    /// Nothing of one handshake is kept for the next: no store of sessions for TLS 1.3
    /// tickets, and no TLS 1.2 resumption.
    #[test]
    fn tls_keeps_no_sessions_between_requests() {
        let resumption = format!("{:?}", tls_config().resumption);
        assert!(
            resumption.contains("NoClientSessionStorage") && resumption.contains("Disabled"),
            "{resumption}"
        );
    }

    #[test]
    fn malformed_rules_are_refused_with_the_rule_named() {
        for rule in [
            "api.github.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://user@example.com",
            "https://example.com:0",
            "https://example.com:99999",
            "https://*",
            "https://a.*.com",
            "https://*.com",
            "http://*.localhost:8080",
            "https://[::1",
            "https://exa mple.com",
            "https://",
        ] {
            let error = HttpGrants::parse(&[rule.to_owned()]).unwrap_err();
            assert!(error.to_string().contains(rule), "{error}");
        }
    }

    #[test]
    fn this_machines_own_addresses_lead_inside_whatever_they_look_like() {
        let own = own_addresses().expect("getifaddrs");
        assert!(own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{own:?}");
        // The address this machine would send from, when it has a route out at all.
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if socket.connect("192.0.2.1:53").is_ok() {
            let source = socket.local_addr().unwrap().ip();
            assert!(own.contains(&source), "{source} not in {own:?}");
        }
        // A public address of its own is refused like a private one; another is not, and
        // a mapped spelling of its own address is its own address.
        let at = |address: &str| SocketAddr::new(address.parse().unwrap(), 443);
        let mine: Vec<IpAddr> = vec!["203.0.114.7".parse().unwrap()];
        assert_eq!(outside_address(&[at("203.0.114.7")], Some(&mine)), None);
        assert_eq!(outside_address(&[at("::ffff:203.0.114.7")], Some(&mine)), None);
        // Carried by NAT64, 6to4, SIIT or the compatible form, it still leads back here
        // (a relay that hairpins).
        for carried in ["64:ff9b::cb00:7207", "2002:cb00:7207::1", "::ffff:0:cb00:7207", "::cb00:7207"] {
            assert_eq!(outside_address(&[at(carried)], Some(&mine)), None, "{carried}");
        }
        assert_eq!(outside_address(&[at("64:ff9b::cb00:7208")], Some(&mine)), Some(at("64:ff9b::cb00:7208")));
        assert_eq!(outside_address(&[at("10.0.0.1"), at("203.0.114.7")], Some(&mine)), None);
        let others = [at("203.0.114.7"), at("203.0.114.8")];
        assert_eq!(outside_address(&others, Some(&mine)), Some(at("203.0.114.8")));
        // Own addresses that cannot be read refuse every name (fail closed).
        assert_eq!(outside_address(&[at("203.0.114.8")], None), None);
    }

    #[test]
    fn inside_addresses_are_recognised_in_every_spelling() {
        for inside in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "168.63.129.16",
            "::ffff:168.63.129.16",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1:2:3::8.8.8.8",
            "::ffff:0:a9fe:a9fe",
            "::ffff:0:127.0.0.1",
            "2002:7f00:1::",
            "ff02::1",
        ] {
            assert!(is_inside(inside.parse().unwrap()), "{inside} is inside");
        }
        for outside in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "::ffff:0:808:808",
        ] {
            assert!(!is_inside(outside.parse().unwrap()), "{outside} is outside");
        }
    }
}

/// What header fields really hold of host memory, measured against what they are charged.
#[cfg(test)]
mod held_memory {
    use super::*;
    use crate::heap_count;

    /// Heap bytes `build` leaves live on this thread (what it returns keeps).
    fn held<T>(build: impl FnOnce() -> T) -> (usize, T) {
        let before = heap_count::live();
        let built = build();
        ((heap_count::live() - before) as usize, built)
    }

    /// Header names as a guest's are checked, none forbidden (the hooks of a call).
    fn hooks() -> Egress {
        let limits = ToolLimits::default();
        let descriptors = Arc::new(super::super::ledger::DescriptorBudget::new(64, 1));
        let ledger = Arc::new(Ledger::new(&limits, descriptors));
        let grants = Arc::new(ComponentEgress::new(HttpGrants::parse(&[]).unwrap()));
        Egress::new(grants, "measured".into(), &limits, ledger)
    }

    /// Append to `fields` until wasmtime-wasi-http refuses: values of `length` bytes, to
    /// one name or each to a name of its own.
    fn fill(fields: &mut FieldMap, hooks: &mut Egress, name: &str, length: usize, distinct: bool) {
        for index in 0.. {
            let name = if distinct { format!("{name}{index}") } else { name.to_owned() };
            if fields.append(hooks, name, vec![b'v'; length]).is_err() {
                break;
            }
        }
    }

    /// Remove every name `fill` gave `fields`.
    fn empty(fields: &mut FieldMap, hooks: &mut Egress) {
        let names: Vec<String> = fields.keys().map(|name| name.to_string()).collect();
        for name in names {
            fields.remove_all(hooks, name).unwrap();
        }
    }

    /// Filled to its limit in every shape, and filled again after being emptied (a map
    /// keeps its vectors' room), a fields set a guest builds holds no more than its charge.
    /// Before, it was charged its limit, 16 KiB, and held up to 90 KiB.
    #[test]
    fn a_fields_set_a_guest_builds_holds_no_more_than_it_is_charged() {
        let mut hooks = hooks();
        let mut most = (0, String::new());
        for length in (0..48).chain([64, 100, 200, 1000, 4000]) {
            for distinct in [false, true] {
                let (bytes, _fields) = held(|| {
                    let mut fields = FieldMap::new_mutable(FIELD_SIZE_LIMIT);
                    fill(&mut fields, &mut hooks, "a", length, distinct);
                    fields
                });
                most = most.max((bytes, format!("filled, values of {length}, distinct {distinct}")));
                let (bytes, _fields) = held(|| {
                    let mut fields = FieldMap::new_mutable(FIELD_SIZE_LIMIT);
                    fill(&mut fields, &mut hooks, "a", length, !distinct);
                    empty(&mut fields, &mut hooks);
                    fill(&mut fields, &mut hooks, "b", length.min(8), distinct);
                    empty(&mut fields, &mut hooks);
                    fill(&mut fields, &mut hooks, "c", length, !distinct);
                    fields
                });
                most = most.max((bytes, format!("refilled, values of {length}, distinct {distinct}")));
            }
        }
        // A clone of a response head's fields (as many lines as hyper takes) is the
        // guest's to change: its first change copies the map.
        let mut head = http::HeaderMap::new();
        head.reserve(100);
        for index in 0..100 {
            head.append(
                http::HeaderName::try_from(format!("h{index}")).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        let head = FieldMap::new_immutable(&mut hooks, head);
        let (bytes, _fields) = held(|| {
            let mut fields = head.clone();
            fields.set_mutable(FIELD_SIZE_LIMIT);
            empty(&mut fields, &mut hooks);
            fill(&mut fields, &mut hooks, "a", 1, false);
            empty(&mut fields, &mut hooks);
            fill(&mut fields, &mut hooks, "b", 1, true);
            fields
        });
        most = most.max((bytes, "a head's clone, refilled".to_owned()));
        assert!(most.0 <= FIELDS_BYTES, "{most:?}: more than the {FIELDS_BYTES} bytes charged");
        assert!(most.0 > FIELDS_BYTES / 2, "{most:?}: the charge is far above what is held");
    }

    /// What hyper's response to a request holds when `fields` and `trailers` arrive, and
    /// what it is charged: the head and the trailer section together, and the trailer
    /// section alone (the head dropped), each as (held, charged).
    fn received(fields: &[(String, String)], trailer_lines: &[(String, String)]) -> [(usize, usize); 2] {
        let lines = |fields: &[(String, String)]| -> String {
            fields.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect()
        };
        let raw = format!(
            "HTTP/1.1 200 OK\r\n{}transfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n{}\r\n",
            lines(fields),
            lines(trailer_lines)
        );
        // One thread, so that the connection's task allocates where it is counted.
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let before = heap_count::live();
            let (client, mut server) = tokio::io::duplex(256 << 10);
            let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
                .max_buf_size(CONNECTION_BUFFER_BYTES)
                .handshake(TokioIo::new(client))
                .await
                .unwrap();
            let driving = tokio::spawn(connection);
            let request = http::Request::get("/").body(http_body_util::Empty::<Bytes>::new()).unwrap();
            let answered = sender.send_request(request);
            // The request first (a response before it is unexpected).
            let _ = server.read(&mut [0; 1024]).await.unwrap();
            server.write_all(raw.as_bytes()).await.unwrap();
            let (head, body) = answered.await.unwrap().into_parts();
            let trailers = body.collect().await.unwrap().trailers().cloned().unwrap_or_default();
            drop((sender, server));
            driving.await.unwrap().unwrap();
            assert_eq!(head.headers.len(), fields.len() + 1, "hyper took every line");
            assert_eq!(trailers.len(), trailer_lines.len(), "hyper took every trailer");
            let both =
                ((heap_count::live() - before) as usize, head_bytes(&head.headers) + fields_bytes(&trailers));
            drop(head);
            let trailers_alone = ((heap_count::live() - before) as usize, fields_bytes(&trailers));
            [both, trailers_alone]
        })
    }

    /// Field lines named `{prefix}{index}` padded to `name` bytes, with values of `value`.
    fn lines(prefix: &str, count: usize, name: usize, value: usize) -> Vec<(String, String)> {
        (0..count).map(|index| (format!("{prefix}{index:0name$}"), "v".repeat(value))).collect()
    }

    /// However many lines, however long, a response's head and its trailer section hold
    /// no more than they are charged. Before, a head was charged 64 bytes a line beside
    /// its text, at least 8 KiB: 99 short lines held 33 KiB, charged 8 KiB.
    #[test]
    fn a_response_head_and_its_trailers_hold_no_more_than_they_are_charged() {
        for count in [1, 2, 5, 10, 20, 40, 47, 48, 49, 60, 90, 95, 96, 97, 99] {
            for name in [1, 24, 40] {
                for value in [1, 50, 300, 600] {
                    // hyper reads a head of up to its buffer's most.
                    if count * (name + value + 8) > CONNECTION_BUFFER_BYTES - 1024 {
                        continue;
                    }
                    let head = lines("h", count, name, value);
                    let trailers = lines("t", count.min(16), name, value.min(600));
                    for (what, (held, charged)) in
                        ["head", "trailers"].into_iter().zip(received(&head, &trailers))
                    {
                        assert!(
                            held <= charged,
                            "{what} of {count} lines, names of {name}, values of {value}: {held} bytes held, {charged} charged"
                        );
                    }
                }
            }
        }
    }
}
