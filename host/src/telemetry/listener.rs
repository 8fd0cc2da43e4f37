//! The metrics listener (`serve --metrics ADDRESS`): `GET /metrics`, `/healthz` and
//! `/readyz`, apart from the MCP listener, so that probes from a pod's address need no
//! exception to `/mcp`'s `Host` checks.
//!
//! Whoever reaches it may try to keep the probes from being answered (a pod restarted for
//! failing its liveness probe is the prize), so it serves at most [`MAX_CONNECTIONS`]
//! connections at once and [`MAX_CONNECTIONS_PER_ADDRESS`] from one address (IPv6: one
//! /64; more are closed at once, unread), one request each, each connection done within
//! [`CONNECTION_DEADLINE`] (a client that never reads its answer included); a request head
//! must fit in hyper's smallest read buffer (8 KiB) and arrive within [`HEADER_TIMEOUT`];
//! no request body is ever read; only `GET` and `HEAD` are answered (405 otherwise) and
//! any other path is 404.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::metrics::Metrics;
use crate::transport::http::HttpStats;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections served at once from one address.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 4;
/// How long a request head may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection may last, its answer written included.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// hyper's smallest read buffer: a longer request head is refused (431).
const MAX_HEAD_BYTES: usize = 8192;

/// Whether the server is alive and whether it is ready for traffic.
#[derive(Default)]
pub struct Health {
    loaded: AtomicBool,
    stopping: AtomicBool,
    listener: std::sync::OnceLock<Arc<HttpStats>>,
}

impl Health {
    /// Every configured component is compiled and loaded.
    pub fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// Readiness also waits for this MCP listener to accept connections.
    pub fn watch_listener(&self, stats: Arc<HttpStats>) {
        let _ = self.listener.set(stats);
    }

    /// Shutdown has begun: no longer ready, for good.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Ready for traffic: loaded, accepting (over HTTP), not shutting down.
    pub fn is_ready(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
            && !self.stopping.load(Ordering::Acquire)
            && self.listener.get().is_none_or(|stats| stats.accepting())
    }
}

/// The bound metrics listener.
pub struct MetricsListener {
    listener: TcpListener,
}

impl MetricsListener {
    pub async fn bind(address: SocketAddr) -> std::io::Result<Self> {
        Ok(Self { listener: TcpListener::bind(address).await? })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until the process ends (the probes must answer through shutdown).
    pub async fn serve(self, metrics: Arc<Metrics>, health: Arc<Health>) {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let per_address = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::debug!("metrics listener: accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // over the limit: closed unread
            };
            let Some(address_slot) = AddressSlot::take(&per_address, peer.ip()) else {
                continue; // over its address's share: closed unread
            };
            let (metrics, health) = (metrics.clone(), health.clone());
            tokio::spawn(async move {
                let _slots = (slot, address_slot);
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(&request, &metrics, &health);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let serving = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .max_buf_size(MAX_HEAD_BYTES)
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                match tokio::time::timeout(CONNECTION_DEADLINE, serving).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::debug!("metrics connection ended: {error}"),
                    Err(_) => tracing::debug!("metrics connection closed after {CONNECTION_DEADLINE:?}"),
                }
            });
        }
    }
}

/// A connection's place in its address's share, given back when dropped.
struct AddressSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
}

impl AddressSlot {
    /// A slot for a connection from `address`, counted with the others of its client
    /// address (an IPv6 client by its /64, which one host can fill with addresses).
    fn take(counts: &Arc<Mutex<HashMap<IpAddr, usize>>>, address: IpAddr) -> Option<Self> {
        let address = crate::transport::http::client_address(address);
        let mut held = counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(address).or_default();
        if *count >= MAX_CONNECTIONS_PER_ADDRESS {
            return None;
        }
        *count += 1;
        Some(Self { counts: counts.clone(), address })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut held = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.address);
            }
        }
    }
}

fn answer(request: &Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(metrics.scrape())));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if health.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One host's /64 is one address here too: its addresses share one share.
    #[test]
    fn an_ipv6_client_holds_one_share_however_many_addresses_of_its_64_it_uses() {
        let counts = Arc::default();
        let address = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        let held: Vec<AddressSlot> = (0..MAX_CONNECTIONS_PER_ADDRESS as u16)
            .map(|i| AddressSlot::take(&counts, address(i)).unwrap())
            .collect();
        assert!(AddressSlot::take(&counts, address(999)).is_none(), "the /64's share is taken");
        let elsewhere = IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]);
        assert!(AddressSlot::take(&counts, elsewhere).is_some(), "another /64 has its own");
        drop(held);
        assert!(AddressSlot::take(&counts, address(999)).is_some());
    }
}
