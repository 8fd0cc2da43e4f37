//! What lives in a call's `Store`: the WASI context, the limiter, and the host side of the
//! `cordon:tool/host` imports.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::cordon::tool::{host, types};
use super::component::Environment;
use super::control::{CallControl, LogLevel, Progress};
use super::egress::{ComponentEgress, Egress, FIELD_SIZE_LIMIT};
use super::files::FileGrants;
use super::ledger::{DescriptorBudget, Ledger, TableCharges};
use super::limits::{GuestLimiter, ToolLimits};
use super::quota::Quota;
use crate::text::printable;

pub(crate) struct GuestState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    /// Where its HTTP requests may go and what they may hold (egress.rs).
    egress: Egress,
    table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    /// What the guest makes the host hold for it (ledger.rs).
    ledger: Arc<Ledger>,
    /// Its resources charged to the ledger while they live: directory listings (files.rs),
    /// HTTP header fields and the requests that carry them (egress.rs).
    table_charges: TableCharges,
    /// The directories the component is granted, opened at load (files.rs).
    grants: Option<Arc<FileGrants>>,
    /// Which grant each descriptor the guest opened lies under, by its handle: preopens are
    /// tagged as the guest asks for them, and whatever is opened under a descriptor takes
    /// its tag (handles are reused, and each reuse is tagged anew).
    descriptor_grants: HashMap<u32, usize>,
    control: Arc<CallControl>,
    note_bytes: usize,
    /// What this instance may still write to the operator's log (`log` and stderr).
    operator_log: OperatorLog,
    /// Last, so dropped after the table: see [`SweepOrphansAtEnd`].
    _sweep_orphans: SweepOrphansAtEnd,
}

/// At the end of a call, once its descriptors are closed (this is dropped after the
/// table), give back what the files whose last name was removed took, where nothing holds
/// them open any more (quota.rs, `Orphans`).
struct SweepOrphansAtEnd(Option<Arc<FileGrants>>);

impl Drop for SweepOrphansAtEnd {
    fn drop(&mut self) {
        for grant in self.0.iter().flat_map(|grants| &grants.grants) {
            if let Some(quota) = &grant.quota {
                quota.sweep_orphans();
            }
        }
    }
}

impl GuestState {
    /// State for one store. WASI is locked down: only the environment the operator gave the
    /// component (nothing of the server's), no arguments, no sockets (outbound HTTP goes
    /// through `wasi:http` and egress.rs, to what the component is granted only),
    /// stdin closed, stdout discarded (stdout may be the MCP channel), stderr to the
    /// operator's log line by line, tagged with the component's name;
    /// the data directory and mounts, when the operator granted them, are the only file
    /// system: the directories opened at load, never their paths again.
    pub(crate) fn new(
        component: Arc<str>,
        limits: &ToolLimits,
        grants: Option<&Arc<FileGrants>>,
        environment: &Environment,
        http_grants: Arc<ComponentEgress>,
        descriptors: Arc<DescriptorBudget>,
        control: Arc<CallControl>,
    ) -> Self {
        let ledger = Arc::new(Ledger::new(limits, descriptors));
        let mut http = WasiHttpCtx::new();
        // Header fields the guest builds live in host memory, each set charged its most to
        // the call (egress.rs).
        http.set_field_size_limit(FIELD_SIZE_LIMIT);
        let egress = Egress::new(http_grants, component.clone(), limits, ledger.clone());
        let operator_log = OperatorLog {
            component,
            limit: limits.stderr_bytes,
            left: Arc::new(AtomicUsize::new(limits.stderr_bytes)),
            last_line: Arc::default(),
            unfinished: Arc::default(),
        };
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(GuestStderr(operator_log.clone()))
            // Random bytes are made in host memory before the guest's limits see them:
            // wasmtime-wasi's default would let one call take 64 MiB.
            .max_random_size(limits.hostcall_bytes.min(MAX_RANDOM_BYTES) as u64)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .envs(environment.variables());
        let mut wasi = wasi.build();
        if let Some(grants) = grants {
            *wasi.filesystem() = grants.filesystem();
        }
        Self {
            wasi,
            http,
            egress,
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(limits.host_resources);
                table
            },
            limiter: GuestLimiter::new(limits, control.memory.clone()),
            ledger,
            table_charges: TableCharges::default(),
            grants: grants.cloned(),
            descriptor_grants: HashMap::new(),
            control,
            note_bytes: limits.note_bytes,
            operator_log,
            _sweep_orphans: SweepOrphansAtEnd(grants.cloned()),
        }
    }

    /// Bind a spare instance's state (made under `limits`, spare.rs) to the call that takes
    /// it: its control block, and a limiter that reports to it.
    pub(crate) fn bind(&mut self, limits: &ToolLimits, control: Arc<CallControl>) {
        self.limiter.rebind(limits, control.memory.clone());
        self.note_bytes = limits.note_bytes;
        self.control = control;
    }

    /// The call about to run is one of `tool`, under `limits`: its outbound requests are
    /// counted afresh, and refusals logged with the tool's name.
    pub(crate) fn begin_call(&mut self, tool: &str, limits: &ToolLimits) {
        self.egress.begin_call(tool, limits);
    }

    /// The last line this instance wrote to stderr (at most [`LAST_LINE_BYTES`]), even past
    /// its log budget: a trapped guest's last words, such as a Rust tool's panic message,
    /// which the trap's message quotes for the client and the cleanup.
    pub(crate) fn stderr_last_line(&self) -> Option<String> {
        let last = self.operator_log.last_line.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let line = if last.current.is_empty() { &last.complete } else { &last.current };
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        (!text.is_empty()).then(|| printable(text).into_owned())
    }

    pub(crate) fn control(&self) -> &CallControl {
        &self.control
    }

    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Whether its guest sent (or began to send) an HTTP request since it began.
    pub(crate) fn sent_http(&self) -> bool {
        self.egress.sent_any()
    }

    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// wasmtime-wasi's file-system view of this store, whose functions files.rs calls.
    pub(crate) fn filesystem_view(&mut self) -> WasiFilesystemCtxView<'_> {
        WasiFilesystemCtxView { ctx: self.wasi.filesystem(), table: &mut self.table }
    }

    /// Host memory the call may still make the host hold.
    pub(crate) fn host_memory_left(&self) -> usize {
        self.ledger.host_memory_left()
    }

    /// Note that the preopen with handle `rep` is the grant the guest sees at `guest`.
    pub(crate) fn tag_preopen(&mut self, rep: u32, guest: &str) {
        if let Some(index) = self.grants.as_ref().and_then(|grants| grants.index_of(guest)) {
            self.descriptor_grants.insert(rep, index);
        }
    }

    /// Note that the descriptor `rep` was opened under the descriptor `parent`.
    pub(crate) fn tag_descriptor(&mut self, rep: u32, parent: u32) {
        match self.descriptor_grants.get(&parent).copied() {
            Some(index) => self.descriptor_grants.insert(rep, index),
            None => self.descriptor_grants.remove(&rep),
        };
    }

    /// The grant the descriptor `rep` lies under.
    pub(crate) fn grant_of(&self, rep: u32) -> Option<usize> {
        self.descriptor_grants.get(&rep).copied()
    }

    /// The move lock of the grant the descriptor `rep` lies under (moves.rs).
    pub(crate) fn move_lock_of(&self, rep: u32) -> Option<Arc<tokio::sync::Mutex<()>>> {
        let grants = self.grants.as_ref()?;
        Some(grants.grants.get(self.grant_of(rep)?)?.moves.clone())
    }

    /// How many levels below the top of the grant the descriptor `rep` lies under the open
    /// directory `directory` lies; `None` when that cannot be told.
    pub(crate) fn depth_in_grant(&self, rep: u32, directory: &std::fs::File) -> Option<usize> {
        let grants = self.grants.as_ref()?;
        super::moves::depth_below(&grants.grants.get(self.grant_of(rep)?)?.path, directory)
    }

    /// The quota of the mount the descriptor `rep` lies under, if it has one.
    pub(crate) fn quota_of(&self, rep: u32) -> Option<Arc<Quota>> {
        let grants = self.grants.as_ref()?;
        grants.grants.get(self.grant_of(rep)?)?.quota.clone()
    }

    /// Charge the resource of type `T` at `rep` `cost` bytes of host memory while it lives
    /// (the caller has charged the ledger already).
    pub(crate) fn track_charge<T: 'static>(&mut self, rep: u32, cost: usize) {
        self.table_charges.track::<T>(rep, cost, &self.ledger);
    }

    /// Give back the charge of the tracked resources the guest dropped.
    pub(crate) fn settle_table_charges(&mut self) {
        self.table_charges.settle(&mut self.table, &self.ledger);
    }

    /// What the live resource at `rep` was charged, if it is tracked (after
    /// [`Self::settle_table_charges`], whose sweep leaves one charge per live handle).
    pub(crate) fn tracked_charge(&self, rep: u32) -> Option<usize> {
        self.table_charges.charged(rep)
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.egress }
    }
}

impl types::Host for GuestState {}

impl super::bindings::v2::cordon::tool::input::Host for GuestState {}

impl host::Host for GuestState {
    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) -> wasmtime::Result<()> {
        self.control.report_progress(Progress { done, total, message });
        Ok(())
    }

    fn cancelled(&mut self) -> wasmtime::Result<bool> {
        self.control.note_stop_check();
        Ok(self.control.is_stopping())
    }

    fn time_left(&mut self) -> wasmtime::Result<Option<u64>> {
        self.control.note_stop_check();
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

    /// Cut to [`MAX_LOG_LINE`] bytes, control characters escaped, and charged as written
    /// (with [`LOG_EVENT_COST`]) to the same budget as stderr; and held for the caller when it asked for this level (the
    /// call's own bound, apart from the operator's budget).
    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let client_level = match level {
            types::LogLevel::Trace => LogLevel::Trace,
            types::LogLevel::Debug => LogLevel::Debug,
            types::LogLevel::Info => LogLevel::Info,
            types::LogLevel::Warn => LogLevel::Warn,
            types::LogLevel::Error => LogLevel::Error,
        };
        self.control.log_for_client(client_level, &message);
        let escaped = printable(&message[..message.floor_char_boundary(MAX_LOG_LINE)]);
        let (text, exhausted) = self.operator_log.take_event(&escaped);
        let component = &*self.operator_log.component;
        if !text.is_empty() {
            match level {
                types::LogLevel::Trace => tracing::trace!(target: "guest", component, "{text}"),
                types::LogLevel::Debug => tracing::debug!(target: "guest", component, "{text}"),
                types::LogLevel::Info => tracing::info!(target: "guest", component, "{text}"),
                types::LogLevel::Warn => tracing::warn!(target: "guest", component, "{text}"),
                types::LogLevel::Error => tracing::error!(target: "guest", component, "{text}"),
            }
        }
        if exhausted {
            self.operator_log.say_exhausted();
        }
        Ok(())
    }
}

/// The 0.2.0 `host` interface: 0.1.0's functions (whose `log-level` it shares) and
/// `lists-changed`.
impl super::bindings::v2::cordon::tool::host::Host for GuestState {
    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) -> wasmtime::Result<()> {
        host::Host::progress(self, done, total, message)
    }

    fn cancelled(&mut self) -> wasmtime::Result<bool> {
        host::Host::cancelled(self)
    }

    fn time_left(&mut self) -> wasmtime::Result<Option<u64>> {
        host::Host::time_left(self)
    }

    fn set_cleanup_note(&mut self, note: Vec<u8>) -> wasmtime::Result<()> {
        host::Host::set_cleanup_note(self, note)
    }

    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        host::Host::log(self, level, message)
    }

    /// Only marks the call: its component is listed again when it ends (relist.rs).
    fn lists_changed(&mut self) -> wasmtime::Result<()> {
        self.control.note_lists_changed();
        Ok(())
    }
}

/// The most random bytes one `get-random-bytes` call may ask for.
const MAX_RANDOM_BYTES: usize = 1 << 20;

/// The longest line a guest writes to the operator's log as one event: a longer `log`
/// message is cut, longer stderr output is split; a line whose escaping makes it longer
/// (a control character becomes up to eight bytes) is cut as written.
const MAX_LOG_LINE: usize = super::control::MAX_CLIENT_LOG_LINE;

/// What one event costs the budget besides its text: its time, level, target and
/// component, as the operator's log writes them. Without it, a guest logging one byte at a
/// time wrote some sixty times its budget, and filled the log's buffer every call shares.
const LOG_EVENT_COST: usize = 128;

/// The most of a guest's last stderr line kept for a trap's message.
pub(crate) const LAST_LINE_BYTES: usize = 512;

/// What one instance may write to the operator's log, through the `log` import and all its
/// stderr streams together: the tool's `stderr_bytes`, then one line saying the rest is
/// dropped, so a hostile guest cannot flood the log.
#[derive(Clone)]
struct OperatorLog {
    /// The component's name, which every line carries.
    component: Arc<str>,
    limit: usize,
    /// Bytes still allowed.
    left: Arc<AtomicUsize>,
    /// The last line written to stderr, kept whatever the budget.
    last_line: Arc<std::sync::Mutex<LastLine>>,
    /// The stderr line being written, shared by every stream: wasmtime-wasi makes a stream
    /// per `get-stderr`, and a line each would let one call hold 4 KiB per stream (10,000
    /// streams: 40 MiB) outside every budget.
    unfinished: Arc<std::sync::Mutex<Vec<u8>>>,
}

/// The line being written and the last one finished, each cut to [`LAST_LINE_BYTES`].
#[derive(Default)]
struct LastLine {
    current: Vec<u8>,
    complete: Vec<u8>,
}

impl LastLine {
    fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                if !self.current.is_empty() {
                    self.complete = std::mem::take(&mut self.current);
                }
            } else if self.current.len() < LAST_LINE_BYTES {
                self.current.push(byte);
            }
        }
    }
}

impl OperatorLog {
    /// Take the budget for one event of `text` (escaped, as it is written): the text as far
    /// as the budget allows, none when it cannot pay for the event itself
    /// ([`LOG_EVENT_COST`]); and whether this take used up the last of it (then the caller
    /// writes, and calls `say_exhausted`).
    fn take_event<'t>(&self, text: &'t str) -> (&'t str, bool) {
        // Escaping makes a control character up to eight bytes: a line is cut as written.
        let text = &text[..text.floor_char_boundary(MAX_LOG_LINE)];
        let wanted = text.len() + LOG_EVENT_COST;
        let take = |left: usize| Some(left - wanted.min(left));
        let before = self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, take).unwrap_or(0);
        let granted = wanted.min(before);
        let shown = granted.saturating_sub(LOG_EVENT_COST);
        (&text[..text.floor_char_boundary(shown)], before > 0 && granted == before)
    }

    /// Whether the budget is spent: what comes now is dropped unread.
    fn spent(&self) -> bool {
        self.left.load(Ordering::Relaxed) == 0
    }

    fn say_exhausted(&self) {
        tracing::warn!(
            target: "guest",
            component = &*self.component,
            "more output dropped (an instance may log {} bytes)",
            self.limit
        );
    }
}

/// A guest's stderr: each line becomes a log event tagged with the component's name (a
/// Rust guest's panic message lands there, for one), within the instance's [`OperatorLog`].
struct GuestStderr(OperatorLog);

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
        StderrLines { log: self.0.clone() }
    }
}

/// One stream of a guest's stderr, logged a line at a time into the instance's one
/// unfinished line ([`OperatorLog::unfinished`]); a line without a newline is logged when
/// a stream drops.
struct StderrLines {
    log: OperatorLog,
}

impl StderrLines {
    fn push(&mut self, bytes: &[u8]) {
        self.log.last_line.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(bytes);
        let mut line = self.log.unfinished.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for &byte in bytes {
            if self.log.spent() {
                *line = Vec::new();
                return;
            }
            if byte == b'\n' {
                self.log.emit(&mut line);
            } else {
                line.push(byte);
                if line.len() >= MAX_LOG_LINE {
                    self.log.emit(&mut line);
                }
            }
        }
    }

    fn emit(&mut self) {
        let mut line = self.log.unfinished.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.log.emit(&mut line);
    }
}

impl OperatorLog {
    /// Log `line` and empty it, charged as it is written ([`OperatorLog::take_event`]).
    fn emit(&self, line: &mut Vec<u8>) {
        if !line.is_empty() {
            let raw = String::from_utf8_lossy(line);
            let escaped = printable(raw.trim_end());
            let (text, exhausted) = self.take_event(&escaped);
            if !text.is_empty() {
                let component = &*self.component;
                tracing::info!(target: "guest", component, "stderr: {text}");
            }
            if exhausted {
                self.say_exhausted();
            }
            line.clear();
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
        Ok(MAX_LOG_LINE)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap_count;

    /// wasmtime-wasi makes a stream at each `get-stderr`: 1,000 streams each holding an
    /// unfinished 4 KiB line held 4 MiB of host memory, outside the log's budget and the
    /// call's host memory.
    #[test]
    fn unfinished_stderr_lines_share_one_buffer_whatever_the_streams() {
        let log = OperatorLog {
            component: "flood".into(),
            limit: 64 << 10,
            left: Arc::new(AtomicUsize::new(64 << 10)),
            last_line: Arc::default(),
            unfinished: Arc::default(),
        };
        let stderr = GuestStderr(log);
        let before = heap_count::live();
        let streams: Vec<StderrLines> = (0..1_000)
            .map(|_| {
                let mut stream = stderr.lines();
                stream.push(&[b'x'; MAX_LOG_LINE - 1]);
                stream
            })
            .collect();
        let held = (heap_count::live() - before) as usize;
        assert!(held < 64 << 10, "1,000 unfinished lines hold {held} bytes");
        drop(streams);
    }
}
