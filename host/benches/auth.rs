//! The cost of API-key validation per request, against no auth, in one run.
//!
//! 1. End to end: two `cordon serve --http` on the example tools, one without `[[tenants]]`
//!    (no auth) and one with 100 tenants of one key each, every request carrying the last
//!    tenant's key (so that all 100 digests are compared, as always), loaded in alternating
//!    slices by the HTTP echo load generator (16 clients on kept-alive connections).
//!    Reported: the ratio of medians and the server CPU per request of each.
//! 2. In process: `Tenants::authenticate` (read the header, SHA-256 the key, compare it
//!    with every digest in constant time) against the check no-auth makes (are there
//!    tenants?), over many requests: nanoseconds per request.
//!
//! ```sh
//! cargo xtask test   # builds target/debug/cordon and the example tools
//! cargo bench -p cordon --bench auth --profile dev
//! ```

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cordon::auth::{ApiKeys, Tenant, TenantId, Tenants};
use cordon::runtime::TenantView;
use support::http::{Subject, free_port, wait_for};

const ROUNDS: u32 = 5;
const SLICE: Duration = Duration::from_secs(1);
const TENANTS: usize = 100;

fn key(tenant: usize) -> String {
    format!("bench-key-{tenant:04}-0123456789abcdef")
}

fn main() {
    let (root, cordon) = support::cordon();
    let open = support::examples_config(&root, "auth-open", "max_concurrent_calls = 64\n");
    let keyed = std::env::temp_dir().join("cordon-bench-auth-keyed.toml");
    let mut text = std::fs::read_to_string(&open)
        .unwrap()
        .replace("[[components]]\n", "[[components]]\nname = \"tools\"\n");
    for tenant in 0..TENANTS {
        text.push_str(&format!(
            "[[tenants]]\nname = \"t{tenant}\"\ncomponents = [\"tools\"]\napi_keys = {{ env = \"BENCH_KEY_{tenant}\" }}\n"
        ));
    }
    std::fs::write(&keyed, text).unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let spawn = |config: &std::path::Path, port: u16| {
        let mut command = Command::new(&cordon);
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
            .arg(config)
            .env("CORDON_LOG", "warn")
            .stderr(Stdio::null());
        for tenant in 0..TENANTS {
            command.env(format!("BENCH_KEY_{tenant}"), key(tenant));
        }
        command.spawn().unwrap()
    };
    let (open_port, keyed_port) = (free_port(), free_port());
    let open_server = spawn(&open, open_port);
    let keyed_server = spawn(&keyed, keyed_port);
    wait_for(open_port);
    wait_for(keyed_port);
    let authorization = format!("Authorization: Bearer {}\r\n", key(TENANTS - 1));
    let mut subjects = [
        Subject::new("cordon, no auth", open_server, open_port),
        Subject::new("cordon, API key of 100", keyed_server, keyed_port).with_headers(&authorization),
    ];
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.slice(&tokio, SLICE);
        }
    }
    let [open, keyed] = subjects.map(Subject::report);
    let cpu_delta_us = (keyed.cpu_per_request.as_secs_f64() - open.cpu_per_request.as_secs_f64()) * 1e6;
    println!(
        "API key / no auth: median latency {:.3}x, throughput {:.3}x, server CPU per request {cpu_delta_us:+.2} us",
        keyed.median.as_secs_f64() / open.median.as_secs_f64(),
        keyed.rate / open.rate,
    );

    // In process: the auth step alone.
    let mut keys = ApiKeys::default();
    let mut tenants = Vec::new();
    for tenant in 0..TENANTS {
        let id = TenantId::new(&format!("t{tenant}"));
        keys.add(&id, &key(tenant)).expect("each tenant has keys of its own");
        tenants.push(Tenant::new(
            id,
            TenantView::new(&format!("t{tenant}"), ["tools".to_owned()], None),
            None,
        ));
    }
    let keyed = Tenants::new(tenants, keys);
    let none = Tenants::default();
    let header = format!("Bearer {}", key(TENANTS - 1));
    const REQUESTS: u32 = 200_000;
    let time = |body: &dyn Fn() -> bool| {
        let started = Instant::now();
        let mut passed = 0u32;
        for _ in 0..REQUESTS {
            passed += u32::from(std::hint::black_box(body()));
        }
        assert_eq!(passed, REQUESTS);
        started.elapsed() / REQUESTS
    };
    let mut open_times = Vec::new();
    let mut keyed_times = Vec::new();
    for _ in 0..ROUNDS {
        open_times.push(time(&|| std::hint::black_box(&none).is_empty()));
        keyed_times
            .push(time(&|| keyed.authenticate(Some(std::hint::black_box(header.as_bytes())), None).is_ok()));
    }
    open_times.sort();
    keyed_times.sort();
    let (open_median, keyed_median) = (open_times[ROUNDS as usize / 2], keyed_times[ROUNDS as usize / 2]);
    println!(
        "in process, per request: no auth {open_median:.2?}, API key (SHA-256 + {TENANTS} constant-time \
         compares) {keyed_median:.2?}"
    );
}
