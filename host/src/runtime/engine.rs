//! The process-wide wasmtime `Engine`: its configuration, the epoch ticker thread, and the
//! on-disk compile cache.
//!
//! The engine runs every guest with epoch interruption (the hard stop), async support (a
//! call can be dropped while parked in a host call) and the pooling allocator with
//! copy-on-write memory images (a fresh instance per call costs about a microsecond).
//! Component-model concurrency is off: our exports are sync-lifted, and with it off host
//! calls and instantiation are measurably cheaper (research/wasmtime-hardstop.md §5).

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Engine-wide settings: what cannot vary per tool.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Calls that may run at once; the pool holds two instance slots per call (the call
    /// and its cleanup), one for loading and a few for spare instances (spare.rs).
    pub max_concurrent_calls: usize,
    /// The largest linear memory any tool may be granted.
    pub max_memory_bytes: usize,
    /// Wasm stack per call. Wasmtime fixes it per engine, so it applies to every tool.
    pub max_wasm_stack: usize,
    /// How often the epoch ticks: the worst-case latency of a stop that is not kicked, and
    /// how often a spinning guest yields to other calls.
    pub epoch_tick: Duration,
    /// Where compiled components are cached; `None` compiles on every start.
    pub cache_dir: Option<PathBuf>,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            max_concurrent_calls: 64,
            max_memory_bytes: 256 << 20,
            max_wasm_stack: 512 << 10,
            epoch_tick: Duration::from_millis(1),
            cache_dir: default_cache_dir(),
        }
    }
}

/// `$XDG_CACHE_HOME/cordon`, else `~/.cache/cordon`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("cordon"))
}

/// Make the compile cache's directory (for the server's user alone) if it is missing,
/// and resolve it as the file system does (so a grant reaching it through a symlink is
/// seen to); as given when it cannot be made.
pub(crate) fn prepare_cache_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    if let Err(error) = fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        tracing::warn!(path = %dir.display(), "cannot make the compile cache's directory: {error}");
    }
    fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned())
}

/// Core instances a component may hold: a Rust wasip2 component has 4 (the module, its
/// adapter shims), a CPython one made by componentize-py 14 (libc, libpython, its runtime
/// and their shims), and each native extension library a Python tool bundles adds one. The
/// pool only counts core instances (nothing is reserved per instance), so the headroom
/// costs nothing.
const CORE_INSTANCES_PER_SLOT: u32 = 32;
const MEMORIES_PER_SLOT: u32 = 4;
const TABLES_PER_SLOT: u32 = 8;
const KEEP_RESIDENT_BYTES: usize = 256 << 10;
const DECOMMIT_BATCH: usize = 16;
/// Wasmtime's default reservation per linear memory on 64-bit hosts (4 GiB, plus a 32 MiB
/// guard): enough that a 32-bit memory's accesses need no bounds checks.
const FULL_RESERVATION: u64 = 1 << 32;
const GUARD_BYTES: u64 = 32 << 20;
/// The address space the memory pool may reserve: half of x86-64's 128 TiB user space.
/// Past it (more than about 2,000 concurrent calls at 4 memories per slot) each memory
/// reserves only `max_memory_bytes` and the guard, and compiled code checks bounds.
const ADDRESS_SPACE_BUDGET: u64 = 64 << 40;
/// Memory mappings the pool may hold per slot: a stack and its guard page (made at start),
/// and a used memory's image, heap and guard (kept while the slot stays warm).
const MAPPINGS_PER_SLOT: u64 = 6;
/// Mappings for the rest of the process: code, heap, thread stacks.
const OTHER_MAPPINGS: u64 = 10_000;

/// Component instances the pool holds at once: each call and its cleanup, one `list` at
/// load, and the spares.
pub(crate) fn pool_slots(settings: &EngineSettings) -> usize {
    // Saturating: a config may ask for any number of calls (found by fuzzing), and
    // `build_engine` refuses a count this large before anything else asks.
    settings.max_concurrent_calls.saturating_mul(2).saturating_add(1 + super::spare::SPARE_SLOTS)
}

/// Build the engine and start its epoch ticker.
pub(crate) fn build_engine(settings: &EngineSettings) -> Result<(Engine, Arc<Ticker>)> {
    let slots = u32::try_from(pool_slots(settings))
        .ok()
        .filter(|slots| slots.checked_mul(CORE_INSTANCES_PER_SLOT.max(TABLES_PER_SLOT)).is_some())
        .context("max_concurrent_calls is too large")?;
    check_map_count(slots);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots * CORE_INSTANCES_PER_SLOT)
        .total_memories(slots * MEMORIES_PER_SLOT)
        .total_tables(slots * TABLES_PER_SLOT)
        .total_stacks(slots)
        // A component that needs more than one slot is refused when it is instantiated
        // (at load, for `list`), rather than taking other tools' share of the pool.
        .max_core_instances_per_component(CORE_INSTANCES_PER_SLOT)
        .max_memories_per_component(MEMORIES_PER_SLOT)
        .max_tables_per_component(TABLES_PER_SLOT)
        .max_memory_size(settings.max_memory_bytes)
        // Reset small memories and tables with memset instead of madvise when a slot is
        // released, and batch the decommits that remain: dropping an instance then costs
        // about a microsecond instead of several (BENCHMARKS.md).
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .decommit_batch_size(DECOMMIT_BATCH)
        // A freed slot keeps its memory image mapped and up to `KEEP_RESIDENT_BYTES`
        // resident. With wasmtime's default (100) an instance with no free slot of its
        // own module's takes a never-used slot instead, so over a long run of mixed tools
        // nearly every memory slot of the pool ends up holding that (the soak's resident
        // memory crept up 3-5 MiB past its baseline). With 0 it takes the least recently
        // used free slot: the slots ever used are the most instances held at once, and
        // mapping a different image costs the same as mapping it into a fresh slot.
        .max_unused_warm_slots(0)
        .pagemap_scan(wasmtime::Enabled::Auto);

    let mut config = Config::new();
    let memories = u64::from(slots) * u64::from(MEMORIES_PER_SLOT);
    if memories * (FULL_RESERVATION + GUARD_BYTES) > ADDRESS_SPACE_BUDGET {
        let reservation = (settings.max_memory_bytes as u64).next_multiple_of(1 << 16);
        tracing::info!(
            memories,
            reservation_mb = reservation >> 20,
            "the memory pool is too large for 4 GiB reservations; compiled code checks bounds"
        );
        config.memory_reservation(reservation).memory_guard_size(GUARD_BYTES);
    }
    config
        .epoch_interruption(true)
        .concurrency_support(false)
        .max_wasm_stack(settings.max_wasm_stack)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine =
        Engine::new(&config).map_err(anyhow::Error::from).context("configuring the wasmtime engine")?;
    let ticker = Ticker::start(&engine, settings.epoch_tick);
    Ok((engine, ticker))
}

/// Warn when Linux's cap on a process's memory mappings is below what the pool may use: a
/// busy pool would then fail to instantiate (ENOMEM) and calls would trap.
fn check_map_count(slots: u32) {
    let Ok(text) = fs::read_to_string("/proc/sys/vm/max_map_count") else { return };
    let Ok(limit) = text.trim().parse::<u64>() else { return };
    let needed = u64::from(slots) * MAPPINGS_PER_SLOT + OTHER_MAPPINGS;
    if limit < needed {
        tracing::warn!(
            limit,
            needed,
            "vm.max_map_count is too low for max_concurrent_calls: calls past it fail to \
             instantiate; raise it (sysctl vm.max_map_count) or lower max_concurrent_calls"
        );
    }
}

/// The epoch ticker: one plain OS thread (never a tokio task: a busy runtime would delay
/// the ticks that stop busy guests). It ticks while guest code runs and for a short while
/// after, then parks, so an idle server costs no CPU while a busy one never pays for a
/// wake-up; it holds the engine weakly and ends with it.
pub(crate) struct Ticker {
    /// Guest executions in progress (calls, cleanups, `list`).
    running: AtomicUsize,
    /// Whether the thread is parked (or about to park) for want of guest code.
    parked: AtomicBool,
    thread: thread::Thread,
}

/// Keeps the ticker ticking while it lives: hold one while guest code may run.
pub(crate) struct Running(Arc<Ticker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the ticker keeps ticking after the last guest code ran, before it parks.
const LINGER: Duration = Duration::from_millis(200);
/// How long the parked ticker sleeps before it checks whether the engine is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

impl Ticker {
    fn start(engine: &Engine, tick: Duration) -> Arc<Self> {
        let weak = engine.weak();
        let (sender, receiver) = std::sync::mpsc::channel::<Arc<Ticker>>();
        let thread = thread::Builder::new()
            .name("cordon-epoch".into())
            .spawn(move || {
                let Ok(ticker) = receiver.recv() else { return };
                drop(receiver);
                let mut idle_since = None;
                while let Some(engine) = weak.upgrade() {
                    if ticker.running.load(Ordering::SeqCst) == 0 {
                        let since = *idle_since.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() >= LINGER {
                            drop(engine);
                            ticker.parked.store(true, Ordering::SeqCst);
                            // Checked again after announcing the park: a call that starts
                            // in between either sees `parked` and unparks us, or is seen here.
                            if ticker.running.load(Ordering::SeqCst) == 0 {
                                thread::park_timeout(IDLE_CHECK);
                            }
                            ticker.parked.store(false, Ordering::SeqCst);
                            idle_since = None;
                            continue;
                        }
                    } else {
                        idle_since = None;
                    }
                    engine.increment_epoch();
                    drop(engine);
                    thread::sleep(tick);
                }
            })
            .expect("spawning the epoch ticker thread");
        let ticker = Arc::new(Self {
            running: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            thread: thread.thread().clone(),
        });
        let _ = sender.send(ticker.clone());
        ticker
    }

    /// Guest code is about to run: keep ticking (waking the thread if it parked) until the
    /// returned guard drops.
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
        Running(self.clone())
    }
}

/// How the compile cache served the components compiled so far.
#[derive(Debug, Default)]
pub struct CompileCache {
    hits: AtomicU64,
    /// Compiled anew: no usable entry, or no cache.
    misses: AtomicU64,
}

impl CompileCache {
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

/// Compile `bytes`, or load the result of an earlier compile from `cache_dir`; counted in
/// `counts`.
///
/// Entries are keyed by the SHA-256 of the component and the engine's compatibility hash,
/// and carry the SHA-256 of their key and payload: a corrupt, truncated or foreign entry,
/// or one moved to another's name, is detected (or rejected by wasmtime) and the component
/// is compiled again.
///
/// An entry is native code the server maps and runs, so only the server's own are read:
/// opened without following a symlink, owned by the server's user and writable by no one
/// else ([`trusted_entry`]). The digest is no defence against whoever may write the
/// directory (anyone can compute it), so no guest may: the runtime refuses a writable
/// grant inside or around the cache (`Runtime::open_files`), and the directory is made
/// for the server's user alone.
pub fn compile_component(
    engine: &Engine,
    bytes: &[u8],
    cache_dir: Option<&Path>,
    counts: &CompileCache,
) -> Result<Component> {
    let Some(cache_dir) = cache_dir else {
        counts.misses.fetch_add(1, Ordering::Relaxed);
        return Component::new(engine, bytes).map_err(anyhow::Error::from);
    };
    let key = cache_key(engine, bytes);
    let entry = cache_dir.join(format!("{key}.cwasm"));
    if let Some(component) = load_cached(engine, &entry, &key) {
        counts.hits.fetch_add(1, Ordering::Relaxed);
        return Ok(component);
    }
    counts.misses.fetch_add(1, Ordering::Relaxed);
    let component = Component::new(engine, bytes).map_err(anyhow::Error::from)?;
    if let Err(error) = store_cached(&component, cache_dir, &entry, &key) {
        tracing::warn!(path = %entry.display(), "could not write the compile cache: {error:#}");
    }
    Ok(component)
}

fn cache_key(engine: &Engine, bytes: &[u8]) -> String {
    let mut engine_hash = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut engine_hash);
    format!("{}-{:016x}", hex(&Sha256::digest(bytes)), engine_hash.finish())
}

fn load_cached(engine: &Engine, entry: &Path, key: &str) -> Option<Component> {
    let mut file = trusted_entry(entry)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).ok()?;
    let (digest, payload) = bytes.split_at_checked(32)?;
    if entry_digest(key, payload).as_slice() != digest {
        tracing::warn!(path = %entry.display(), "compile cache entry is corrupt; compiling again");
        return None;
    }
    // SAFETY: the entry is a file of the server's own user that no one else may write
    // (`trusted_entry`), in a directory no guest may write (the runtime refuses such
    // grants); its payload is what `Component::serialize` wrote for this engine
    // configuration (the key covers the compatibility hash) and for this component (the
    // digest covers the key), unmodified. Wasmtime itself rejects artifacts of another
    // version or configuration with an error.
    match unsafe { Component::deserialize(engine, payload) } {
        Ok(component) => Some(component),
        Err(error) => {
            tracing::warn!(path = %entry.display(), "compile cache entry rejected ({error}); compiling again");
            None
        }
    }
}

/// `entry` opened if it is a regular file (not a symlink) of the server's user that no
/// other user may write; `None` (with a warning when it exists but is not) otherwise.
fn trusted_entry(entry: &Path) -> Option<fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(entry).ok()?;
    let metadata = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    let own_user = unsafe { libc::geteuid() };
    if !metadata.is_file() || metadata.uid() != own_user || metadata.mode() & 0o022 != 0 {
        tracing::warn!(
            path = %entry.display(),
            "compile cache entry not used: it is not a file of the server's own user that only it may write \
             (owner {}, mode {:o}); compiling again",
            metadata.uid(),
            metadata.mode() & 0o7777
        );
        return None;
    }
    Some(file)
}

/// What an entry carries before its payload: the SHA-256 of its key and the payload, so
/// an entry renamed to another component's key does not pass for it.
fn entry_digest(key: &str, payload: &[u8]) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(key.as_bytes());
    digest.update([0]);
    digest.update(payload);
    digest.finalize().into()
}

fn store_cached(component: &Component, cache_dir: &Path, entry: &Path, key: &str) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    fs::DirBuilder::new().recursive(true).mode(0o700).create(cache_dir)?;
    let payload = component.serialize().map_err(anyhow::Error::from)?;
    let temp = entry.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&temp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)?;
    file.write_all(&entry_digest(key, &payload))?;
    file.write_all(&payload)?;
    file.sync_all()?;
    fs::rename(&temp, entry)?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Lower the calling thread's priority to nice 19, the lowest (see `dispatch.rs`, where
/// calls that wait run at it, for why 19 and not `SCHED_IDLE`), with the scheduler's
/// default slice (a thread inherits its creator's, and the transports' is short:
/// [`shorten_thread_slice`]). Any process may lower its own threads' priority.
pub fn lower_thread_priority() {
    set_fair_scheduling(LOWEST_NICE, None);
}

/// Give the calling thread a short scheduler slice: a thread that serves clients (a
/// transport's reader, the runtime's workers) then preempts a busy thread of the default
/// slice as soon as it wakes.
///
/// Linux's EEVDF scheduler (6.6 on) lets the running thread finish its protected slice
/// before a woken one of the same class runs, whatever their nice values: the base slice,
/// 0.75 ms scaled by the log of the cores (1.5 ms on 2 cores), so a nice-19 thread doing a
/// guest's file work held a just-woken transport thread for up to that long: the soak's
/// echo tail under load (BENCHMARKS.md, "Soak"). Since 6.12 a woken thread whose own slice
/// is shorter than the running one's cuts that protection short; the shortest slice the
/// kernel takes is 0.1 ms. Kernels before 6.12 ignore the slice.
pub fn shorten_thread_slice() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; getpriority on one's own thread id reads its
        // nice value (-1 is a valid nice, so a failure would read as -1: harmless here).
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        set_fair_scheduling(nice, Some(TRANSPORT_SLICE));
    }
}

/// Set the calling thread's nice value and its slice (`None`: the kernel's default) in the
/// normal scheduling class.
fn set_fair_scheduling(nice: libc::c_int, slice: Option<Duration>) {
    #[cfg(target_os = "linux")]
    {
        /// `struct sched_attr` (SCHED_ATTR_SIZE_VER0).
        #[repr(C)]
        struct SchedAttr {
            size: u32,
            policy: u32,
            flags: u64,
            nice: i32,
            priority: u32,
            runtime: u64,
            deadline: u64,
            period: u64,
        }
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            // For the normal class, the slice; 0 is the default one.
            runtime: slice.map_or(0, |slice| slice.as_nanos() as u64),
            deadline: 0,
            period: 0,
        };
        // SAFETY: sched_setattr on our own thread (0) with a fully initialised attr of the
        // size it declares; it changes only this thread's nice value and slice.
        let result = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if result != 0 {
            tracing::debug!(
                "changing a thread's scheduling was refused: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// The slice of threads that serve clients: the shortest Linux takes.
const TRANSPORT_SLICE: Duration = Duration::from_micros(100);

/// The nice value of threads that must not delay the transports (0 is the default).
const LOWEST_NICE: libc::c_int = 19;

/// Whose cores a compile takes. wasmtime compiles a component's functions in parallel on
/// the rayon pool it is called from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompilePriority {
    /// Before anything is served (the runtime is not shared yet): rayon's global pool, at
    /// the default priority. At nice 19 (as every compile once was), a server starting on a
    /// machine other processes keep busy got almost no CPU: 44 s to answer its first call
    /// beside three busy loops on 2 cores, against 0.5 s idle, which failed CI's tests.
    Startup,
    /// A reload, while calls are served: a pool whose threads run at the lowest priority.
    /// On a machine of few cores the compile otherwise took the cores from the transports
    /// (echo p99 during reloads 1.5-5.2x the quiet one on 2 cores; BENCHMARKS.md,
    /// "Reload"). Alone, such a compile still gets every core.
    Background,
}

/// Run `compile` (which compiles components) at `priority`.
pub(crate) fn compile_at<T: Send>(priority: CompilePriority, compile: impl FnOnce() -> T + Send) -> T {
    // The pool is made on the first reload, not at start: a server never reloaded has no
    // use for its threads.
    match priority {
        CompilePriority::Background => match background_compile_pool() {
            Some(pool) => pool.install(compile),
            None => compile(),
        },
        CompilePriority::Startup => compile(),
    }
}

/// The reloads' compile pool, made at most once per process; `None` if it cannot be.
fn background_compile_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|index| format!("cordon-compile-{index}"))
            .start_handler(|_| lower_thread_priority())
            .build()
            .inspect_err(|error| tracing::debug!("reloads compile at the default priority: {error}"))
            .ok()
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::component::Component;

    /// A component made of `count` instances of an empty core module.
    fn component_of(count: usize) -> String {
        let instances = "(core instance (instantiate $empty))\n".repeat(count);
        format!("(component (core module $empty) {instances})")
    }

    #[test]
    fn ten_thousand_concurrent_calls_fit_the_address_space() {
        // 4 GiB reservations for this pool would need about 320 TiB, more than a 47-bit
        // address space: the engine reserves `max_memory_bytes` per memory instead.
        let settings = EngineSettings { max_concurrent_calls: 10_000, cache_dir: None, ..Default::default() };
        let (engine, _ticker) = build_engine(&settings).unwrap();
        Component::new(&engine, component_of(1)).expect("a component compiles for it");
    }

    #[test]
    fn a_component_larger_than_a_pool_slot_is_refused_when_compiled() {
        let settings = EngineSettings { max_concurrent_calls: 1, cache_dir: None, ..Default::default() };
        let (engine, _ticker) = build_engine(&settings).unwrap();
        let slot = CORE_INSTANCES_PER_SLOT as usize;
        Component::new(&engine, component_of(slot)).expect("a component that fits one slot");
        let error = Component::new(&engine, component_of(slot + 1)).unwrap_err();
        assert!(format!("{error:#}").contains("core module instances"), "{error:#}");
    }

    #[tokio::test]
    async fn the_memory_slots_ever_used_are_the_most_instances_held_at_once() {
        let settings = EngineSettings { max_concurrent_calls: 8, cache_dir: None, ..Default::default() };
        let (engine, _ticker) = build_engine(&settings).unwrap();
        // Ten modules in turn, three instances of each at once; where each memory lies
        // says which pool slot it took.
        let mut slots = std::collections::HashSet::new();
        const MODULES: usize = 10;
        for module in 0..MODULES {
            let wat = format!("(module (memory (export \"memory\") 1) (data (i32.const 0) \"{module}\"))");
            let module = wasmtime::Module::new(&engine, wat).unwrap();
            let mut stores = Vec::new();
            for _ in 0..3 {
                let mut store = wasmtime::Store::new(&engine, ());
                let instance = wasmtime::Instance::new_async(&mut store, &module, &[]).await.unwrap();
                let memory = instance.get_memory(&mut store, "memory").unwrap();
                slots.insert(memory.data_ptr(&store) as usize);
                stores.push(store);
            }
        }
        // Each module's instances took slots others freed, rather than never-used ones
        // (which wasmtime's default prefers: 30 here). Freed slots wait for their reset in
        // batches, and meanwhile fresh ones are taken: at most a batch more.
        assert!(slots.len() <= 3 + DECOMMIT_BATCH, "{} slots for {} instances", slots.len(), 3 * MODULES);
    }

    #[test]
    fn a_pool_too_large_to_count_is_an_error() {
        // Each overflowed in its own place: `calls * 2`, then `slots * 16` in u32.
        for calls in [usize::MAX, 200_000_000] {
            let settings = EngineSettings { max_concurrent_calls: calls, ..EngineSettings::default() };
            let Err(error) = build_engine(&settings) else { panic!("{calls} calls") };
            assert!(format!("{error:#}").contains("too large"), "{error:#}");
        }
    }

    /// The calling thread's nice value.
    fn nice() -> libc::c_int {
        // SAFETY: as in `shorten_thread_slice`.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    /// The highest nice value among the threads that run a parallel loop under `priority`:
    /// the threads a compile there would take.
    fn compile_threads_nice(priority: CompilePriority) -> libc::c_int {
        use rayon::prelude::*;
        compile_at(priority, || (0..256).into_par_iter().map(|_| nice()).max().expect("some ran"))
    }

    #[test]
    fn a_startup_compile_takes_default_priority_threads_and_a_reload_s_the_lowest() {
        // As a server starts: its engine first (which once put rayon's global pool at nice 19).
        let (engine, _ticker) = build_engine(&EngineSettings::default()).expect("an engine");
        // Whatever priority the tests were started at (0 unless run under `nice`).
        let own = nice();
        for _ in 0..2 {
            assert_eq!(compile_threads_nice(CompilePriority::Background), LOWEST_NICE);
            assert_eq!(compile_threads_nice(CompilePriority::Startup), own);
        }
        let compiled = compile_at(CompilePriority::Background, || Component::new(&engine, component_of(4)));
        compiled.expect("a component compiles on the background pool");
    }
}
