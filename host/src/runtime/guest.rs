//! What lives in a call's `Store`: the WASI context, the limiter, and the host side of the
//! `cordon:tool/host` imports.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::cordon::tool::{host, types};
use super::control::{CallControl, Progress};
use super::limits::{GuestLimiter, ToolLimits};

/// Where the tool's data directory appears inside the guest.
pub const GUEST_DATA_DIR: &str = "/data";

pub(crate) struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    control: Arc<CallControl>,
    note_bytes: usize,
    /// The component's name, for the operator's log.
    component: Arc<str>,
}

impl GuestState {
    /// State for one store. WASI is locked down: no environment, no arguments, no network,
    /// stdin closed, stdout discarded (stdout may be the MCP channel), stderr to the
    /// operator's log line by line, tagged with the component's name;
    /// the data directory, when the operator granted one, is the only file system.
    pub(crate) fn new(
        component: Arc<str>,
        limits: &ToolLimits,
        data_dir: Option<&Path>,
        control: Arc<CallControl>,
    ) -> Result<Self> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(GuestStderr {
            component: component.clone(),
            limit: limits.stderr_bytes,
            budget: Arc::new(AtomicUsize::new(limits.stderr_bytes)),
        })
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
        if let Some(dir) = data_dir {
            wasi.preopened_dir(dir, GUEST_DATA_DIR, FsPerms::ReadWrite)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("opening the data directory {}", dir.display()))?;
        }
        Ok(Self {
            wasi: wasi.build(),
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(limits.host_resources);
                table
            },
            limiter: GuestLimiter::new(limits, control.memory.clone()),
            control,
            note_bytes: limits.note_bytes,
            component,
        })
    }

    /// Bind a spare instance's state (made under `limits`, spare.rs) to the call that takes
    /// it: its control block, and a limiter that reports to it.
    pub(crate) fn bind(&mut self, limits: &ToolLimits, control: Arc<CallControl>) {
        self.limiter = GuestLimiter::new(limits, control.memory.clone());
        self.note_bytes = limits.note_bytes;
        self.control = control;
    }

    pub(crate) fn control(&self) -> &CallControl {
        &self.control
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for GuestState {}

impl host::Host for GuestState {
    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) -> wasmtime::Result<()> {
        self.control.report_progress(Progress { done, total, message });
        Ok(())
    }

    fn cancelled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.control.is_stopping())
    }

    fn time_left(&mut self) -> wasmtime::Result<Option<u64>> {
        Ok(self.control.time_left().map(|left| left.as_millis() as u64))
    }

    fn set_cleanup_note(&mut self, note: Vec<u8>) -> wasmtime::Result<()> {
        if note.len() > self.note_bytes {
            wasmtime::bail!(
                "cleanup note of {} bytes exceeds the limit of {} bytes",
                note.len(),
                self.note_bytes
            );
        }
        self.control.set_note(note);
        Ok(())
    }

    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let component = &*self.component;
        match level {
            types::LogLevel::Trace => tracing::trace!(target: "guest", component, "{message}"),
            types::LogLevel::Debug => tracing::debug!(target: "guest", component, "{message}"),
            types::LogLevel::Info => tracing::info!(target: "guest", component, "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: "guest", component, "{message}"),
            types::LogLevel::Error => tracing::error!(target: "guest", component, "{message}"),
        }
        Ok(())
    }
}

/// The longest stderr line logged as one; longer output is split.
const MAX_STDERR_LINE: usize = 4096;
/// A guest's stderr: each line becomes a log event tagged with the component's name (a
/// Rust guest's panic message lands there, for one), up to the tool's `stderr_bytes` per
/// instance, however many streams the guest opens; then one line says the rest is dropped,
/// so a hostile guest cannot flood the operator's log.
struct GuestStderr {
    component: Arc<str>,
    limit: usize,
    /// Bytes this instance may still log.
    budget: Arc<AtomicUsize>,
}

impl wasmtime_wasi::cli::IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for GuestStderr {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.lines())
    }

    /// Written in place: the default adapter would spawn a task per stream, per call.
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.lines())
    }
}

impl GuestStderr {
    fn lines(&self) -> StderrLines {
        StderrLines {
            component: self.component.clone(),
            line: Vec::new(),
            limit: self.limit,
            budget: self.budget.clone(),
        }
    }
}

/// Bytes of a guest's stderr, logged a line at a time; a last line without a newline is
/// logged when the stream drops.
struct StderrLines {
    component: Arc<str>,
    line: Vec<u8>,
    limit: usize,
    budget: Arc<AtomicUsize>,
}

impl StderrLines {
    fn push(&mut self, bytes: &[u8]) {
        let budget = self.budget.load(Ordering::Relaxed);
        if budget == 0 {
            return;
        }
        let (bytes, exhausted) = match bytes.len() < budget {
            true => (bytes, false),
            false => (&bytes[..budget], true),
        };
        self.budget.fetch_sub(bytes.len(), Ordering::Relaxed);
        for &byte in bytes {
            if byte == b'\n' {
                self.emit();
            } else {
                self.line.push(byte);
                if self.line.len() >= MAX_STDERR_LINE {
                    self.emit();
                }
            }
        }
        if exhausted {
            self.emit();
            tracing::warn!(
                target: "guest",
                component = &*self.component,
                "stderr: more output dropped (an instance may log {} bytes)",
                self.limit
            );
        }
    }

    fn emit(&mut self) {
        if !self.line.is_empty() {
            let text = String::from_utf8_lossy(&self.line);
            tracing::info!(target: "guest", component = &*self.component, "stderr: {}", text.trim_end());
            self.line.clear();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for StderrLines {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::OutputStream for StderrLines {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(MAX_STDERR_LINE)
    }
}

impl tokio::io::AsyncWrite for StderrLines {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(bytes);
        std::task::Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.emit();
        std::task::Poll::Ready(Ok(()))
    }
}

impl Drop for StderrLines {
    fn drop(&mut self) {
        self.emit();
    }
}
