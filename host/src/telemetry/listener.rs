//! The metrics listener (`serve --metrics ADDRESS`): `GET /metrics`, `/healthz` and
//! `/readyz`, apart from the MCP listener, so that probes from a pod's address need no
//! exception to `/mcp`'s `Host` checks.
//!
//! Whoever reaches it may try to keep the probes from being answered (a pod restarted for
//! failing its liveness probe is the prize), so it serves at most [`MAX_CONNECTIONS`]
//! connections at once and [`MAX_CONNECTIONS_PER_ADDRESS`] from one address (IPv6: one
//! /48; more are closed at once, unread), one request each, each connection done within
//! [`CONNECTION_DEADLINE`] (a client that never reads its answer included); a request head
//! must fit in hyper's smallest read buffer (8 KiB) and arrive within [`HEADER_TIMEOUT`];
//! no request body is ever read; only `GET` and `HEAD` are answered (405 otherwise) and
//! any other path is 404.
//!
//! When every connection is taken, a newcomer from an address holding fewer than some
//! other address closes the oldest connection of the address holding the most
//! ([`Served::admit`]): sixteen addresses filling the 64 places, or 64 addresses one each,
//! cannot keep out a probe from an address of its own, which holds none. A newcomer from
//! an address holding as many as any other is closed unread.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;

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
        let served = Arc::new(Mutex::new(Served::default()));
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
            let Some(place) = Served::admit(&served, peer.ip()) else {
                continue; // its address holds as many as any: closed unread
            };
            let (metrics, health) = (metrics.clone(), health.clone());
            tokio::spawn(async move {
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
                tokio::select! {
                    served = tokio::time::timeout(CONNECTION_DEADLINE, serving) => match served {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::debug!("metrics connection ended: {error}"),
                        Err(_) => tracing::debug!("metrics connection closed after {CONNECTION_DEADLINE:?}"),
                    },
                    () = place.closing.notified() => {
                        tracing::debug!("metrics connection closed for a client holding fewer");
                    }
                }
            });
        }
    }
}

/// The connections being served: each one's client address (an IPv6 client by its /48,
/// which one holder can fill with addresses) and how to close it, by the order they came in.
#[derive(Default)]
struct Served {
    next_id: u64,
    /// By id, so the smallest id is the oldest.
    open: std::collections::BTreeMap<u64, (IpAddr, Arc<Notify>)>,
    per_address: HashMap<IpAddr, usize>,
}

/// A connection's place among those served, given back when dropped.
struct Place {
    served: Arc<Mutex<Served>>,
    id: u64,
    /// Notified when a newcomer takes the place.
    closing: Arc<Notify>,
}

impl Served {
    /// A place for a connection from `ip`: none if its address holds its share, or if
    /// every place is taken and no address holds more than it; otherwise, when every place
    /// is taken, the oldest connection of the address holding the most is told to close,
    /// and its place is the newcomer's.
    fn admit(served: &Arc<Mutex<Self>>, ip: IpAddr) -> Option<Place> {
        let address = crate::transport::http::client_address(ip);
        let mut this = served.lock().unwrap_or_else(PoisonError::into_inner);
        let held = this.per_address.get(&address).copied().unwrap_or(0);
        if held >= MAX_CONNECTIONS_PER_ADDRESS {
            return None;
        }
        if this.open.len() >= MAX_CONNECTIONS {
            let most = this.per_address.values().copied().max().unwrap_or(0);
            if most <= held {
                return None;
            }
            let victim = this
                .open
                .iter()
                .find(|(_, (address, _))| this.per_address.get(address) == Some(&most))
                .map(|(id, _)| *id)
                .expect("an address holding connections has one open");
            if let Some(closing) = this.release(victim) {
                // Stored if the connection is not waiting yet: it closes when it does.
                closing.notify_one();
            }
        }
        let (id, closing) = (this.next_id, Arc::new(Notify::new()));
        this.next_id += 1;
        this.open.insert(id, (address, closing.clone()));
        *this.per_address.entry(address).or_default() += 1;
        Some(Place { served: served.clone(), id, closing })
    }

    /// Forget connection `id`, if it is still counted: how to tell it to close.
    fn release(&mut self, id: u64) -> Option<Arc<Notify>> {
        let (address, closing) = self.open.remove(&id)?;
        if let Some(count) = self.per_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
        Some(closing)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.served.lock().unwrap_or_else(PoisonError::into_inner).release(self.id);
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

    /// One site's /48 is one address here too: its addresses share one share.
    #[test]
    fn an_ipv6_client_holds_one_share_however_many_addresses_of_its_48_it_uses() {
        let served = Arc::default();
        let address = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, last, 0, 0, 0, last]);
        let held: Vec<Place> = (0..MAX_CONNECTIONS_PER_ADDRESS as u16)
            .map(|i| Served::admit(&served, address(i)).unwrap())
            .collect();
        assert!(Served::admit(&served, address(999)).is_none(), "the /48's share is taken");
        let elsewhere = IpAddr::from([0x2001, 0xdb8, 1, 2, 0, 0, 0, 1]);
        assert!(Served::admit(&served, elsewhere).is_some(), "another /48 has its own");
        drop(held);
        assert!(Served::admit(&served, address(999)).is_some());
    }

    fn v4(third: u8, fourth: u8) -> IpAddr {
        IpAddr::from([10, 0, third, fourth])
    }

    /// Every place taken: a newcomer from an address holding fewer than the most closes
    /// the oldest connection of the address holding the most; one from an address holding
    /// as many as any is refused.
    #[test]
    fn a_full_listener_closes_the_oldest_connection_of_the_address_holding_the_most() {
        let served = Arc::default();
        // Three addresses: the first holds one connection, the second its whole share, the
        // rest one each until every place is taken.
        let mut places = vec![Served::admit(&served, v4(0, 1)).unwrap()];
        places.extend((0..MAX_CONNECTIONS_PER_ADDRESS).map(|_| Served::admit(&served, v4(0, 2)).unwrap()));
        let mut fourth = 3;
        while places.len() < MAX_CONNECTIONS {
            places.push(Served::admit(&served, v4(1, fourth)).unwrap());
            fourth += 1;
        }
        let told = |place: &Place| {
            // A stored notification completes `notified` at once.
            let notified = place.closing.notified();
            futures_now(notified)
        };
        let probe = Served::admit(&served, v4(9, 9)).expect("a newcomer holding none comes in");
        let closed: Vec<usize> = (0..places.len()).filter(|&i| told(&places[i])).collect();
        assert_eq!(closed, [1], "the oldest of the address holding the most");
        assert!(!told(&probe));
        // Again: the next oldest of that address.
        let _second = Served::admit(&served, v4(9, 10)).unwrap();
        assert!(told(&places[2]));
        // 10.0.0.2 holds two, 10.0.9.9 one: 10.0.9.9 comes in again, in the place of
        // 10.0.0.2's next oldest; now it holds as many as any other, and is refused.
        let _third = Served::admit(&served, v4(9, 9)).unwrap();
        assert!(told(&places[3]));
        assert!(Served::admit(&served, v4(9, 9)).is_none(), "it holds as many as any other");
        assert_eq!(served.lock().unwrap().open.len(), MAX_CONNECTIONS);
        // A place closed by the newcomer is not given back twice when its task ends.
        drop(places.remove(1));
        assert_eq!(served.lock().unwrap().open.len(), MAX_CONNECTIONS);
        drop(places);
        assert_eq!(served.lock().unwrap().open.len(), 3, "the newcomers' places");
    }

    /// Whether `future` is ready at its first poll.
    fn futures_now(future: impl std::future::Future<Output = ()>) -> bool {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        future.as_mut().poll(&mut context).is_ready()
    }
}
