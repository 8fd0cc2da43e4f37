//! The metrics listener (`serve --metrics ADDRESS`): `GET /metrics`, `/healthz` and
//! `/readyz`, apart from the MCP listener, so that probes from a pod's address need no
//! exception to `/mcp`'s `Host` checks.
//!
//! It is not an attack surface: it serves at most [`MAX_CONNECTIONS`] connections at once
//! (more are closed at once, unread), one request each; a request head must fit in
//! hyper's smallest read buffer (8 KiB) and arrive within [`HEADER_TIMEOUT`]; no request
//! body is ever read; only `GET` and `HEAD` are answered (405 otherwise) and any other
//! path is 404.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
pub const MAX_CONNECTIONS: usize = 16;
/// How long a request head may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
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
        loop {
            let (stream, _) = match self.listener.accept().await {
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
            let (metrics, health) = (metrics.clone(), health.clone());
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer(&request, &metrics, &health);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let served = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .max_buf_size(MAX_HEAD_BYTES)
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(error) = served {
                    tracing::debug!("metrics connection ended: {error}");
                }
            });
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
