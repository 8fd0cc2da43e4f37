//! A config file's text: TOML → `Config` → `plan()`, then the engine the plan asks for.
//! No panic, and no number silently wrapped: every size the file gives in KiB or MiB is
//! either refused or resolved to exactly that many bytes.
#![no_main]

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

use cordon::config::{ComponentConfig, LimitsConfig, SecretSource};
use cordon::runtime::{DEFAULT_DATA_QUOTA_BYTES, EngineSettings, Runtime, RuntimeSettings, ToolLimits};
use libfuzzer_sys::fuzz_target;

/// Paths resolve against this folder. `plan` writes nothing; it reads only secret files,
/// which are kept inside it (below), and with a component given it does not even look for
/// the example tools.
static BASE: LazyLock<PathBuf> = LazyLock::new(|| {
    let base = std::env::temp_dir().join("cordon-fuzz-config");
    std::fs::create_dir_all(&base).expect("creating the fuzz config folder");
    std::fs::write(base.join("token"), "s3cr3t\n").expect("writing a secret file");
    base
});

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else { return };
    // Parsed twice: once to plan (which consumes it), once to compare against.
    let Some(mut config) = cordon::fuzzing::config(text) else { return };
    // Without components, `plan` falls back to the example tools and fails where they are
    // not built: give it one, so that every valid config is planned and checked.
    if config.components.is_empty() {
        config.components.push(ComponentConfig {
            path: "tools.wasm".into(),
            name: None,
            data_dir: None,
            data_quota_mb: None,
            mounts: Vec::new(),
            env: Default::default(),
            secrets: Default::default(),
            allow_http: Vec::new(),
            secret_headers: Vec::new(),
            limits: LimitsConfig::default(),
            tools: Default::default(),
        });
    }
    let written = cordon::fuzzing::config(text).expect("parsing is deterministic");
    // A secret file named anywhere (`/dev/zero`, a FIFO) is read from BASE instead: the
    // target fuzzes the loader, not the file system.
    for component in &mut config.components {
        let headers = component.secret_headers.iter_mut().map(|header| &mut header.secret);
        for source in component.secrets.values_mut().chain(headers) {
            if let SecretSource::File { file } = source {
                *file = file.file_name().map_or_else(|| "missing".into(), PathBuf::from);
            }
        }
    }
    let Ok(plan) = config.plan(&BASE) else { return };

    let engine = &plan.runtime.engine;
    exact(written.server.max_memory_mb, 20, engine.max_memory_bytes as u128, "max_memory_mb");
    exact(written.http.max_body_kb, 10, plan.http.max_body_bytes as u128, "max_body_kb");
    exact(written.http.linger_kb, 10, plan.http.linger_bytes as u128, "linger_kb");
    let limits = &plan.server_limits;
    exact(
        written.server.max_queued_request_kb,
        10,
        limits.max_queued_request_bytes as u128,
        "max_queued_request_kb",
    );
    exact(written.server.max_request_cost_kb, 10, limits.max_request_cost as u128, "max_request_cost_kb");
    assert!(engine.max_concurrent_calls >= 1 && plan.http.max_connections >= 1);
    for (component, planned) in written.components.iter().zip(&plan.components) {
        check_limits(&component.limits, &planned.options.limits);
        for (mount, resolved) in component.mounts.iter().zip(&planned.options.mounts) {
            let quota = resolved.quota_bytes.map(u128::from);
            assert_eq!(
                quota,
                mount.quota_mb.map(|mb| u128::from(mb) << 20),
                "quota_mb was not resolved exactly"
            );
        }
        let data_quota =
            component.data_quota_mb.map_or(u128::from(DEFAULT_DATA_QUOTA_BYTES), |mb| u128::from(mb) << 20);
        assert_eq!(
            u128::from(planned.options.data_quota_bytes),
            data_quota,
            "data_quota_mb was not resolved exactly"
        );
        for (tool, limits) in &component.tools {
            check_limits(limits, planned.options.limits_for(tool));
        }
    }
    build_engine(engine);
});

fn check_limits(written: &LimitsConfig, planned: &ToolLimits) {
    exact(written.memory_mb, 20, planned.memory_bytes as u128, "memory_mb");
    exact(written.hostcall_kb, 10, planned.hostcall_bytes as u128, "hostcall_kb");
    exact(written.result_kb, 10, planned.result_bytes as u128, "result_kb");
    exact(written.note_kb, 10, planned.note_bytes as u128, "note_kb");
    exact(written.host_memory_kb, 10, planned.host_memory_bytes as u128, "host_memory_kb");
    exact(written.stderr_kb, 10, planned.stderr_bytes as u128, "stderr_kb");
    exact(written.http_response_kb, 10, planned.http_response_bytes as u128, "http_response_kb");
    exact(written.http_request_kb, 10, planned.http_request_bytes as u128, "http_request_kb");
}

/// A size written in units of `1 << shift` bytes resolves to exactly that many bytes.
fn exact(written: Option<usize>, shift: u32, planned: u128, key: &str) {
    if let Some(units) = written {
        assert_eq!(planned, (units as u128) << shift, "{key} = {units} was not resolved exactly");
    }
}

/// Building an engine costs about a millisecond, so each distinct setting is tried once.
fn build_engine(settings: &EngineSettings) {
    static TRIED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);
    let key = format!("{settings:?}");
    if !TRIED.lock().unwrap().insert(key) {
        return;
    }
    // The cache folder is made where the config says: kept inside BASE (an absolute
    // `cache_dir` in an input made folders all over the system's temporary folder).
    let mut settings = settings.clone();
    if settings.cache_dir.as_ref().is_some_and(|dir| {
        !dir.starts_with(&*BASE) || dir.components().any(|c| c == std::path::Component::ParentDir)
    }) {
        settings.cache_dir = Some(BASE.join("cache"));
    }
    // An error is a fine answer to an impossible engine; a panic is not.
    let _ = Runtime::new(RuntimeSettings { engine: settings, ..RuntimeSettings::default() });
}
