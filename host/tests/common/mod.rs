//! Test support: hostile and simple guests written in WAT, turned into components of the
//! `cordon:tool/plugin` world in-process (no guest toolchain needed), and a runtime to run
//! them in.
//!
//! A [`WatGuest`] is a core module that offers one tool. Its `list`, its memory layout and
//! its helpers are fixed here; a test writes only the body of `call` (and of `cleanup`).
//! Bodies can use:
//! - `$progress (f64 done, i32 has_total, f64 total, i32 has_msg, i32 msg_ptr, i32 msg_len)`,
//!   `$cancelled (-> i32)`, `$set_note (ptr, len)`, `$sleep_ms (i64)` (a WASI monotonic
//!   clock sleep: a host call), `$subscribe (i64 -> i32)` (a new host resource) and
//!   `$eprint (ptr, len)` (a write to a new stderr stream);
//! - `$ok_text (ptr, len -> i32)` and `$err_text (ptr, len -> i32)` to build a result;
//! - the string "done" at offset 2000 (4 bytes) and "lock" at 2010 (4 bytes).
//!
//! `cleanup` receives the flattened `cleanup-context`: params 0-5 are the call id, tool and
//! arguments (pointer, length), 6 the stop-reason case (0 cancelled, 1 idle-timeout,
//! 2 max-duration, 3 trapped, 4 out-of-memory, 5 shutdown), 7-8 the trap message, 9 whether
//! a note is present, 10-11 the note.

#![allow(dead_code)]

pub mod guests;
pub mod server;
pub mod wire;

use std::time::Duration;

use cordon::runtime::{ComponentOptions, EngineSettings, Runtime, RuntimeSettings, ToolLimits};

/// Minimal WASI interfaces, enough to sleep and to write to stderr: the real host
/// definitions satisfy them.
const WASI_IO: &str = "package wasi:io@0.2.6;
interface poll { resource pollable { block: func(); } }
interface error { resource error; }
interface streams {
    use error.{error};
    variant stream-error { last-operation-failed(error), closed }
    resource output-stream { blocking-write-and-flush: func(contents: list<u8>) -> result<_, stream-error>; }
}";
const WASI_CLI: &str = "package wasi:cli@0.2.6;
interface stderr {
    use wasi:io/streams@0.2.6.{output-stream};
    get-stderr: func() -> output-stream;
}";
const WASI_CLOCKS: &str = "package wasi:clocks@0.2.6;
interface monotonic-clock {
    use wasi:io/poll@0.2.6.{pollable};
    subscribe-duration: func(when: u64) -> pollable;
}";
const WASI_RANDOM: &str = "package wasi:random@0.2.6;
interface random { get-random-bytes: func(len: u64) -> list<u8>; }";
const TEST_WORLD: &str = "package test:guest;
world guest {
    include cordon:tool/plugin@0.1.0;
    import wasi:clocks/monotonic-clock@0.2.6;
    import wasi:cli/stderr@0.2.6;
    import wasi:random/random@0.2.6;
}";

/// A one-tool guest in WAT.
pub struct WatGuest {
    pub tool: String,
    pub input_schema: String,
    pub call: String,
    pub cleanup: String,
    /// Extra module fields (helper functions) the bodies may call.
    pub extra: String,
    /// The initial size of the linear memory, in 64 KiB pages.
    pub memory_pages: u32,
}

impl WatGuest {
    /// A tool named `tool` whose `call` runs `body` (which must leave an i32 result pointer).
    pub fn new(tool: &str, body: &str) -> Self {
        Self {
            tool: tool.to_owned(),
            input_schema: r#"{"type":"object"}"#.to_owned(),
            call: body.to_owned(),
            cleanup: String::new(),
            extra: String::new(),
            memory_pages: 1,
        }
    }

    pub fn cleanup(mut self, body: &str) -> Self {
        self.cleanup = body.to_owned();
        self
    }

    pub fn extra(mut self, fields: &str) -> Self {
        self.extra = fields.to_owned();
        self
    }

    /// The input schema; a long one needs more `memory_pages` (strings start at 2100).
    pub fn input_schema(mut self, schema: &str) -> Self {
        self.input_schema = schema.to_owned();
        self
    }

    pub fn memory_pages(mut self, pages: u32) -> Self {
        self.memory_pages = pages;
        self
    }

    /// The core module's WAT text.
    pub fn module_wat(&self) -> String {
        // list's return area at 1024 -> one tool-info at 1100; strings from 2100.
        let name = self.tool.as_bytes();
        let description = b"a test tool";
        let schema = self.input_schema.as_bytes();
        let (name_at, description_at) = (2100, 2100 + name.len());
        let schema_at = description_at + description.len();
        let mut info = vec![0u8; 68]; // tool-info: 68 bytes, align 4; `requires` empty
        put_u32(&mut info, 0, name_at as u32);
        put_u32(&mut info, 4, name.len() as u32);
        put_u32(&mut info, 20, description_at as u32);
        put_u32(&mut info, 24, description.len() as u32);
        put_u32(&mut info, 28, schema_at as u32);
        put_u32(&mut info, 32, schema.len() as u32);
        let mut list_area = vec![0u8; 8];
        put_u32(&mut list_area, 0, 1100);
        put_u32(&mut list_area, 4, 1);
        let strings = [name, description.as_slice(), schema].concat();
        format!(
            r#"(module
  (import "cordon:tool/host@0.1.0" "progress" (func $progress (param f64 i32 f64 i32 i32 i32)))
  (import "cordon:tool/host@0.1.0" "cancelled" (func $cancelled (result i32)))
  (import "cordon:tool/host@0.1.0" "set-cleanup-note" (func $set_note (param i32 i32)))
  (import "cordon:tool/host@0.1.0" "log" (func $log (param i32 i32 i32)))
  (import "wasi:random/random@0.2.6" "get-random-bytes" (func $random_bytes (param i64 i32)))
  (import "wasi:clocks/monotonic-clock@0.2.6" "subscribe-duration" (func $subscribe (param i64) (result i32)))
  (import "wasi:io/poll@0.2.6" "[method]pollable.block" (func $block (param i32)))
  (import "wasi:cli/stderr@0.2.6" "get-stderr" (func $get_stderr (result i32)))
  (import "wasi:io/streams@0.2.6" "[method]output-stream.blocking-write-and-flush"
    (func $write_and_flush (param i32 i32 i32 i32)))
  (memory (export "memory") {memory_pages})
  (table $t 1 funcref)
  (global $bump (mut i32) (i32.const 32768))
  (data (i32.const 1024) "{list_area}")
  (data (i32.const 1100) "{info}")
  (data (i32.const 2000) "done")
  (data (i32.const 2010) "lock")
  (data (i32.const 2100) "{strings}")
  (func $realloc (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $ptr i32)
    (local.set $ptr (i32.and (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get 2))))
    (global.set $bump (i32.add (local.get $ptr) (local.get 3)))
    (block $fits
      (br_if $fits (i32.le_u (global.get $bump) (i32.mul (memory.size) (i32.const 65536))))
      (br_if $fits (i32.ne (i32.const -1)
        (memory.grow (i32.add (i32.const 1)
          (i32.shr_u (i32.sub (global.get $bump) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16))))))
      unreachable)
    (local.get $ptr))
  (func $eprint (param i32 i32)
    (call $write_and_flush (call $get_stderr) (local.get 0) (local.get 1) (i32.const 3200)))
  (func $sleep_ms (param i64)
    (call $block (call $subscribe (i64.mul (local.get 0) (i64.const 1000000)))))
  (func $ok_text (param i32 i32) (result i32)
    (i32.store8 (i32.const 3100) (i32.const 0))
    (i32.store (i32.const 3104) (local.get 0))
    (i32.store (i32.const 3108) (local.get 1))
    (i32.store8 (i32.const 3000) (i32.const 0))
    (i32.store (i32.const 3004) (i32.const 3100))
    (i32.store (i32.const 3008) (i32.const 1))
    (i32.store8 (i32.const 3012) (i32.const 0))
    (i32.store8 (i32.const 3024) (i32.const 0))
    (i32.const 3000))
  (func $err_text (param i32 i32) (result i32)
    (i32.store8 (i32.const 3000) (i32.const 1))
    (i32.store (i32.const 3004) (local.get 0))
    (i32.store (i32.const 3008) (local.get 1))
    (i32.const 3000))
  (func (export "cordon:tool/tool@0.1.0#list") (result i32) (i32.const 1024))
  (func (export "cordon:tool/tool@0.1.0#call") (param i32 i32 i32 i32) (result i32)
    {call})
  (func (export "cordon:tool/tool@0.1.0#cleanup") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)
    {cleanup})
  {extra}
)"#,
            list_area = escape(&list_area),
            info = escape(&info),
            strings = escape(&strings),
            call = self.call,
            cleanup = self.cleanup,
            extra = self.extra,
            memory_pages = self.memory_pages,
        )
    }

    /// The component's bytes.
    pub fn component(&self) -> Vec<u8> {
        let mut resolve = wit_parser::Resolve::default();
        resolve.push_str("wasi-io.wit", WASI_IO).unwrap();
        resolve.push_str("wasi-clocks.wit", WASI_CLOCKS).unwrap();
        resolve.push_str("wasi-cli.wit", WASI_CLI).unwrap();
        resolve.push_str("wasi-random.wit", WASI_RANDOM).unwrap();
        resolve
            .push_str(
                "cordon.wit",
                &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/cordon.wit")).unwrap(),
            )
            .unwrap();
        let package = resolve.push_str("test.wit", TEST_WORLD).unwrap();
        let world = resolve.select_world(&[package], Some("guest")).unwrap();
        let mut module = wat::parse_str(self.module_wat()).expect("test WAT parses");
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
        )
        .unwrap();
        wit_component::ComponentEncoder::default().module(&module).unwrap().validate(true).encode().unwrap()
    }
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn escape(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("\\{byte:02x}")).collect()
}

/// Limits that make tests quick: short grace and cleanup budgets.
pub fn quick_limits() -> ToolLimits {
    ToolLimits {
        grace: Duration::from_millis(50),
        cleanup_budget: Duration::from_millis(300),
        idle_timeout: None,
        max_duration: Some(Duration::from_secs(20)),
        ..ToolLimits::default()
    }
}

/// Run one call of `tool` to its end.
pub async fn call(
    runtime: &Runtime,
    tool: &str,
    arguments: serde_json::Value,
) -> cordon::runtime::CallReport {
    runtime.call(tool, &arguments).await.unwrap().run().await
}

/// The text a call returned, or its tool error's message.
pub fn answer(report: &cordon::runtime::CallReport) -> String {
    use cordon::runtime::{Content, Outcome};
    match &report.outcome {
        Outcome::Completed(result) => match result.content.as_slice() {
            [Content::Text(text)] => text.clone(),
            other => panic!("expected one text item, got {other:?}"),
        },
        Outcome::ToolError(message) => message.clone(),
        other => panic!("expected an answer, got {other:?}"),
    }
}

/// The hostile example component (`examples/hostile`), built by `cargo xtask guests`.
pub fn hostile() -> std::path::PathBuf {
    let path = cordon::paths::default_tools_dir().join("hostile.wasm");
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

/// The folder that holds every file the tests of this process write (configs, data
/// directories, caches, components), made at the first call.
static SCRATCH_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Set to keep the tests' files after the run, to look at what a failing test left.
const KEEP_FILES_ENV: &str = "CORDON_KEEP_TEST_FILES";

/// `name` inside this process's scratch folder (`$TMPDIR/cordon-tests-<pid>`), which is
/// removed when the process exits, passed or failed: a run of the suite used to leave
/// about 170 folders in the system's temporary folder.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let root = SCRATCH_ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("cordon-tests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        if std::env::var_os(KEEP_FILES_ENV).is_none() {
            extern "C" fn remove_scratch_root() {
                if let Some(root) = SCRATCH_ROOT.get() {
                    let _ = std::fs::remove_dir_all(root);
                }
            }
            // libtest ends the process with `exit` whether tests failed or not, which
            // runs this.
            // SAFETY: registers a function that takes nothing and only removes files.
            assert_eq!(unsafe { libc::atexit(remove_scratch_root) }, 0);
        }
        root
    });
    root.join(name)
}

/// A new empty directory for one test, named after `what`.
pub fn fresh_dir(what: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = scratch(&format!("{what}-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn settings(max_concurrent_calls: usize) -> RuntimeSettings {
    RuntimeSettings {
        engine: EngineSettings { max_concurrent_calls, cache_dir: None, ..EngineSettings::default() },
        queue_timeout: Duration::from_secs(30),
        ..RuntimeSettings::default()
    }
}

/// A runtime with these guests loaded, each under its tool's name, with `limits`.
pub async fn runtime_with(guests: &[WatGuest], limits: ToolLimits) -> Runtime {
    let mut runtime = Runtime::new(settings(256)).unwrap();
    for guest in guests {
        let options =
            ComponentOptions { limits: limits.clone(), data_dir: None, ..ComponentOptions::default() };
        runtime.load_bytes(&guest.tool, &guest.component(), options).await.unwrap();
    }
    runtime
}

/// `(loop br 0)` with a call to nothing: the non-cooperative guest.
pub const SPIN_BODY: &str = "(loop $l (br $l)) unreachable";
/// Return "done" at once.
pub const DONE_BODY: &str = "(call $ok_text (i32.const 2000) (i32.const 4))";
/// Leave the note "lock", then sleep 60 s in a WASI host call.
pub const SLEEP_BODY: &str = "(call $set_note (i32.const 2010) (i32.const 4)) (call $sleep_ms (i64.const 60000)) (call $ok_text (i32.const 2000) (i32.const 4))";
/// Cleanup that traps unless the note is "lock" (4 bytes).
pub const CLEANUP_CHECKS_NOTE: &str = "(if (i32.ne (local.get 9) (i32.const 1)) (then unreachable))
    (if (i32.ne (local.get 11) (i32.const 4)) (then unreachable))
    (if (i32.ne (i32.load (local.get 10)) (i32.load (i32.const 2010))) (then unreachable))";

std::thread_local! {
    /// The log of the [`capture_log`] running on this thread, if any.
    static CAPTURED: std::cell::RefCell<Option<std::sync::Arc<std::sync::Mutex<Vec<u8>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The global subscriber's writer: into the capture of the thread the event happens on,
/// or nowhere.
struct ThreadCapture;

impl std::io::Write for ThreadCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with(|captured| {
            if let Some(log) = &*captured.borrow() {
                log.lock().unwrap().extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `body` and return what it logged. It runs on a current-thread tokio runtime, so
/// that guest code, and the events it causes, stay on this thread.
///
/// One global subscriber (installed at the first capture) writes each event into the
/// capture of the thread it happens on. A subscriber scoped to this thread instead lost
/// events now and then: tests running on other threads, with no subscriber, left
/// callsites' interest cached as "never".
pub fn capture_log<F: std::future::Future<Output = ()>>(body: impl FnOnce() -> F) -> String {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt().with_writer(|| ThreadCapture).with_ansi(false).finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in tests");
    });
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    CAPTURED.with(|captured| *captured.borrow_mut() = Some(log.clone()));
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio.block_on(body());
    drop(tokio);
    CAPTURED.with(|captured| *captured.borrow_mut() = None);
    String::from_utf8_lossy(&log.lock().unwrap()).into_owned()
}
