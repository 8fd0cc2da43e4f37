//! The `cordon` command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cordon::runtime::{ComponentOptions, Runtime, RuntimeSettings};

/// jemalloc, not glibc's malloc: memory the host frees goes back to the system.
///
/// A call can make the host hold a lot for a while (file buffers, directory listings, up
/// to its `host_memory_bytes`) from any thread of the blocking pool. glibc kept what those
/// threads freed in per-thread arenas and in the main heap: after the soak's hostile file
/// work the server's RSS stayed 8–16 % above its baseline, and neither `malloc_trim` nor
/// `M_ARENA_MAX=2` changed that. jemalloc with a background thread purges freed pages
/// after about a second (`dirty_decay_ms`, with nothing kept "muzzy"): RSS came back to
/// within 5–11 % of the baseline in the soaks, from a baseline about 10 MiB lower than
/// glibc's (BENCHMARKS.md, "Soak"); a call is about 6 % cheaper in the runtime
/// benchmark. It costs about 30 s of a cold build (jemalloc's C sources). mimalloc was
/// tried too and rejected: the same soak peaked at 850 MiB (110 MiB with glibc) and
/// stayed up after.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (the symbol it reads at its first allocation).
#[cfg(feature = "jemalloc")]
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

#[cfg(feature = "jemalloc")]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: a pointer to a static C string, never written.
#[cfg(feature = "jemalloc")]
unsafe impl Sync for MallocConf {}

#[derive(Parser)]
#[command(
    name = "cordon",
    version,
    about = "Run untrusted tools compiled to WebAssembly components, and always be able to stop them."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How the log on stderr is written: `text` or `json` (one object per line).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

#[derive(Subcommand)]
enum Command {
    /// Serve tools over MCP.
    Serve {
        /// Speak MCP on stdin and stdout.
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Speak MCP over Streamable HTTP on this address (POST /mcp), e.g. 127.0.0.1:8080
        /// [default: none; one of --stdio and --http is required].
        #[arg(long, value_name = "ADDRESS")]
        http: Option<std::net::SocketAddr>,
        /// Another host name to accept in `Host` and `Origin` headers over HTTP (localhost,
        /// 127.0.0.1 and [::1] always are); repeat for more [default: none].
        #[arg(long, value_name = "NAME")]
        allow_host: Vec<String>,
        /// A TOML file naming the components and their limits [default: none: the example
        /// tools built into this binary, else target/guests/example-tools.wasm in the
        /// repository it was built from]. SIGHUP reloads its components.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Reload the components when the config file or a component's file changes.
        #[arg(long)]
        watch: bool,
        /// Over stdio, the `[[tenants]]` entry whose tools and quotas apply (required when
        /// the config has tenants) [default: none: the config has no tenants].
        #[arg(long, value_name = "NAME", requires = "stdio")]
        tenant: Option<String>,
        /// Serve HTTP on an address beyond loopback although the config has no
        /// `[[tenants]]`, so that anyone who reaches it may call every tool.
        #[arg(long)]
        allow_unauthenticated: bool,
        /// Serve Prometheus metrics (/metrics) and health probes (/healthz, /readyz) on this
        /// address, e.g. 127.0.0.1:9464 [default: none: no metrics listener].
        #[arg(long, value_name = "ADDRESS")]
        metrics: Option<std::net::SocketAddr>,
        /// Serve HTTPS with this PEM certificate chain (leaf first); needs --tls-key
        /// [default: none: plain HTTP, TLS terminated in front of the server].
        #[arg(long, value_name = "PEM", requires = "tls_key", requires = "http")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert [default: none].
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
    /// Validate a config and compile every component it names, without serving: exit 0
    /// with a one-line summary, or an error naming each component or key at fault.
    Check {
        /// The config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// List a component's tools: their annotations and schemas as JSON (MCP's tool shape,
    /// absent fields left out) when stdout is not a terminal, a summary for people on one.
    List {
        /// The component (.wasm).
        component: PathBuf,
        /// JSON even on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// Show the world a component targets (Cordon or plain), what each of its imports gets,
    /// its exports, its tools with their schemas and, with --config, what the config grants
    /// it (paths and variable names; never a secret's value).
    Inspect {
        /// The component (.wasm).
        component: PathBuf,
        /// A config file; the `[[components]]` entry whose `path` is this component is shown
        /// [default: none: the interfaces only].
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Call one tool once: progress on stderr (a bar on a terminal), the result on stdout
    /// (one JSON document when stdout is not a terminal). Ctrl-C stops the call (grace, hard
    /// stop, cleanup) and says how it stopped; a second Ctrl-C exits at once.
    #[command(after_help = "Exit codes: 0 the tool answered; 1 it failed (an error result or message, a \
        crash, a limit); 2 the call could not start (arguments, config, component, tool name); 3 it \
        was stopped (Ctrl-C, a timeout); 130 a second Ctrl-C.")]
    Call {
        /// The component (.wasm).
        component: PathBuf,
        /// The tool to call.
        tool: String,
        /// The arguments, as a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
        /// A config file: the `[[components]]` entry whose `path` is this component gives
        /// its limits and grants, as `serve` applies them [default: none: default limits,
        /// no file system, environment or network].
        #[arg(long)]
        config: Option<PathBuf>,
        /// With --config, the `[[tenants]]` entry whose data directory
        /// (`<data_dir>/<tenant>`) the call gets [default: none: no data directory for a
        /// component that tenants use].
        #[arg(long, value_name = "NAME", requires = "config")]
        tenant: Option<String>,
        /// A directory to grant the tool, preopened at /data [default: none: no file system].
        #[arg(long, conflicts_with = "config")]
        data_dir: Option<PathBuf>,
        /// Stop the call after this many seconds [default: the config's max_duration_ms, else 300].
        #[arg(long)]
        timeout: Option<f64>,
        /// Print the result as JSON even on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// Make a tool project in a new folder: one example tool with progress, a cancel check
    /// and a cleanup, its tests, a README and a config to serve it.
    New {
        /// The new folder; its name names the project (letters, digits, `-`, `_`).
        path: PathBuf,
        /// The language of the tools.
        #[arg(long, default_value = "rust", value_parser = clap::builder::PossibleValuesParser::new(cordon::author::Language::NAMES.iter().copied()))]
        lang: String,
    },
    /// Build the tool project in a folder into a component (.wasm), with whatever toolchain
    /// this machine has, then load it as the server would and list its tools.
    Build {
        /// The project folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.log_format.parse().expect("clap allows only known formats");
    // `call` may draw a progress bar, which log lines must not tear.
    let output: Box<dyn std::io::Write + Send> = match cli.command {
        Command::Call { .. } => Box::new(cordon::cli::call::BarAwareStderr),
        _ => Box::new(std::io::stderr()),
    };
    let log = match cordon::telemetry::log::install(output, format, std::io::stderr().is_terminal()) {
        Ok(log) => log,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The threads that read and write the transports preempt busy ones as soon as they
    // wake (`shorten_thread_slice`); calls that wait run on threads of their own.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(cordon::runtime::engine::shorten_thread_slice)
        .build()
        .expect("starting the tokio runtime");
    let code = runtime.block_on(run(cli, &log));
    log.finish(); // the log before the error
    code.unwrap_or_else(|error| {
        eprintln!("error: {error:#}");
        ExitCode::FAILURE
    })
}

async fn run(cli: Cli, log: &cordon::telemetry::LogHandle) -> Result<ExitCode> {
    match cli.command {
        Command::Serve {
            stdio,
            http,
            allow_host,
            config,
            watch,
            metrics,
            tenant,
            allow_unauthenticated,
            tls_cert,
            tls_key,
        } => {
            // The TLS key is a secret file the server read: no grant may hold it.
            let secrets_read: Vec<PathBuf> = tls_key.iter().cloned().collect();
            let transport = match (stdio, http) {
                (true, _) => Transport::Stdio { tenant },
                (false, Some(address)) => {
                    // Read before anything loads, so that a bad file is the first thing said.
                    let tls = match (tls_cert, tls_key) {
                        (Some(cert), Some(key)) => {
                            Some(cordon::transport::tls::Tls::from_pem_files(&cert, &key)?)
                        }
                        _ => None,
                    };
                    Transport::Http { address, allow_host, allow_unauthenticated, tls }
                }
                (false, None) => anyhow::bail!("choose a transport: `--stdio` or `--http 127.0.0.1:8080`"),
            };
            tokio::spawn(log.dropped().report_every(std::time::Duration::from_secs(10)));
            let telemetry = cordon::telemetry::Telemetry::start(metrics, Some(log)).await?;
            serve(config, watch, transport, telemetry, secrets_read).await
        }
        Command::Check { config } => {
            let summary = cordon::reload::check(&config).await?;
            let (count, tools) = (summary.tools.len(), summary.tools.join(", "));
            println!("{}: ok, {} components, {count} tools: {tools}", config.display(), summary.components);
            Ok(ExitCode::SUCCESS)
        }
        Command::List { component, json } => {
            let runtime = load(&component).await?;
            let tools = runtime.snapshot();
            if json || !std::io::stdout().is_terminal() {
                println!("{}", serde_json::to_string_pretty(&cordon::cli::list::tools_json(tools.tools()))?);
            } else {
                print!("{}", cordon::cli::list::tools_text(tools.tools()));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { component, config } => {
            print!("{}", cordon::inspect::inspect(&component, config.as_deref()).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Call { component, tool, arguments, config, tenant, data_dir, timeout, json } => {
            let request = cordon::cli::call::CallRequest {
                component,
                tool,
                arguments,
                config,
                tenant,
                data_dir,
                timeout,
                json,
            };
            Ok(match cordon::cli::call::run(request).await {
                Ok(exit) => ExitCode::from(exit.code()),
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(error.exit().code())
                }
            })
        }
        Command::New { path, lang } => {
            let language = cordon::author::Language::parse(&lang)?;
            cordon::author::new_project(&path, language)?;
            let dir = path.display();
            println!("made {dir}: a {lang} tool project");
            println!("next: cd {dir} && cordon build   ({})", language.next_steps());
            Ok(ExitCode::SUCCESS)
        }
        Command::Build { dir } => build(&dir).await,
    }
}

/// `cordon build`: build, then load the component as `serve` would (which catches a
/// missing `export_plugin!` and a tool list the host refuses) and say what was made.
async fn build(dir: &std::path::Path) -> Result<ExitCode> {
    let built = cordon::author::build(dir)?;
    for note in &built.notes {
        eprintln!("note: {note}");
    }
    let mut runtime = Runtime::new(RuntimeSettings::default())?;
    runtime.load_file(&built.component, ComponentOptions::default()).await.with_context(|| {
        format!("{} was built, but the server would not load it", built.component.display())
    })?;
    let tools: Vec<String> = runtime.snapshot().tools().map(|tool| tool.name.clone()).collect();
    println!("{}", built.component.display());
    let size = built.bytes as f64 / 1024.0;
    println!("{size:.1} KiB, built with {}; tools: {}", built.toolchain, tools.join(", "));
    Ok(ExitCode::SUCCESS)
}

enum Transport {
    Stdio {
        tenant: Option<String>,
    },
    Http {
        address: std::net::SocketAddr,
        allow_host: Vec<String>,
        allow_unauthenticated: bool,
        tls: Option<cordon::transport::tls::Tls>,
    },
}

/// `secrets_read`: files outside the config holding secrets the server read (the TLS key),
/// which no grant may hold, as no grant may hold the config's secret files.
async fn serve(
    config: Option<PathBuf>,
    watch: bool,
    transport: Transport,
    telemetry: cordon::telemetry::Telemetry,
    secrets_read: Vec<PathBuf>,
) -> Result<ExitCode> {
    let shutdown = telemetry.until_stopping(shutdown_signal()?);
    let hangup = cordon::reload::hangup_signal()?;
    let mut plan = cordon::reload::read_plan(config.as_deref())?;
    let started_with = cordon::reload::StartedWith::of(&plan);
    // The issuer's keys before the components, so that a bad JWKS file is said at once;
    // stdio is the local user's and takes no tokens. A reload does not change them.
    let oauth = match (&transport, plan.oauth.take()) {
        (Transport::Http { .. }, Some(oauth)) => Some(cordon::auth::oauth::Validator::start(oauth).await?),
        _ => None,
    };
    // The sealing key before the components compile, so that a bad one is said at once.
    let sealer = cordon::dispatch::sealed::Sealer::from_settings(
        plan.request_state_key.as_deref(),
        plan.request_state_ttl,
    )?;
    // Over stdio one client talks to one process: no replica could continue its calls.
    if sealer.source() == cordon::dispatch::sealed::KeySource::Random
        && matches!(transport, Transport::Http { .. })
    {
        tracing::warn!(
            "no request state key ({} or [server] request_state_key): a random one seals the requestState of tools that ask the client for input, so only this process can continue such a call; replicas behind one address must share a key",
            cordon::dispatch::sealed::KEY_VARIABLE
        );
    }
    match cordon::runtime::raise_open_file_limit() {
        Ok(limit) => tracing::debug!("the process may open {limit} files"),
        Err(error) => tracing::warn!("could not raise the open-file limit: {error}"),
    }
    let mut settings = plan.runtime.clone();
    settings.secret_files.extend(secrets_read);
    // The server's own descriptors: a fixed reserve, and one per HTTP connection it accepts.
    settings.reserved_descriptors = plan.reserved_descriptors.unwrap_or(match transport {
        Transport::Http { .. } => settings.reserved_descriptors + plan.http.max_connections,
        Transport::Stdio { .. } => settings.reserved_descriptors,
    });
    // Over stdio one tenant (or none) is served: its slots are not split among the others.
    if let Transport::Stdio { .. } = transport {
        settings.tenants = 1;
    }
    let mut tenants = std::sync::Arc::new(plan.tenants);
    // Who may call, decided before anything is loaded.
    let stdio_tenant = match &transport {
        Transport::Http { address, allow_unauthenticated, .. } => {
            if tenants.is_empty() && oauth.is_none() && !address.ip().is_loopback() && !allow_unauthenticated
            {
                anyhow::bail!(
                    "refusing to serve {address} without authentication: the config has no [[tenants]] and \
                     no [auth.oauth], so anyone who reaches the address could call every tool; configure \
                     tenants with api_keys or [auth.oauth], bind a loopback address, or pass \
                     --allow-unauthenticated"
                );
            }
            None
        }
        Transport::Stdio { tenant: None } if !tenants.is_empty() => anyhow::bail!(
            "the config has [[tenants]] ({}): choose whose tools and quotas apply with --tenant NAME",
            tenants.names().join(", ")
        ),
        Transport::Stdio { tenant: None } => None,
        // That tenant alone: the request bytes and listen streams are not split with
        // tenants this process never serves.
        Transport::Stdio { tenant: Some(name) } => match tenants.only(name) {
            Some(only) => {
                tenants = std::sync::Arc::new(only);
                tenants.get(name).cloned()
            }
            None if tenants.is_empty() => anyhow::bail!("--tenant {name}: the config has no [[tenants]]"),
            None => anyhow::bail!(
                "--tenant {name}: no such tenant in the config (it has: {})",
                tenants.names().join(", ")
            ),
        },
    };
    let mut runtime = Runtime::new(settings)?;
    telemetry.observe(&mut runtime);
    let mut failed = runtime.load_all(plan.components).await.into_iter();
    if let Some(first) = failed.next() {
        // The first is the error the server exits with; the log keeps the others.
        for error in failed {
            tracing::error!("{error}");
        }
        return Err(first.into());
    }
    let runtime = std::sync::Arc::new(runtime);
    // Watching before the log says "loaded": a change from then on is seen.
    let reloader = cordon::reload::Reloader::new(runtime.clone(), config, started_with, watch, hangup)?;
    let tools = runtime.snapshot();
    let tools: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    tracing::info!("loaded {} tools: {}", tools.len(), tools.join(", "));
    tokio::spawn(async move { reloader.run().await.inspect_err(|error| tracing::error!("{error}")) });
    // A component whose call says its lists changed is listed again (runtime/relist.rs),
    // behind the transports: its guest's `list` runs in no call of a client's.
    cordon::dispatch::spawn_behind_the_transports({
        let runtime = runtime.clone();
        async move { runtime.relist_when_asked().await }
    });
    let server = cordon::dispatch::Server::with_sealer(
        runtime.clone(),
        plan.progress_interval,
        plan.server_limits,
        tenants,
        sealer,
    );
    let stats = matches!(transport, Transport::Http { .. }).then(|| plan.http.stats.clone());
    // The tools loaded now; at shutdown, those served then (a reload may bring others).
    let drain = runtime.drain_budget();
    telemetry.loaded(runtime, stats);
    if let Transport::Http { address, allow_host, tls, .. } = transport {
        let mut settings = plan.http;
        settings.tls = tls;
        settings.oauth = oauth;
        for host in &allow_host {
            settings.allow_host(host).context("--allow-host")?;
        }
        cordon::transport::http::bind_and_serve(server, address, settings, shutdown, drain)
            .await
            .with_context(|| format!("serving HTTP on {address}"))?;
        return Ok(ExitCode::SUCCESS);
    }
    // stdin is read with blocking reads on a thread of its own; stdout, when it is a
    // pipe, is written on the reactor (a terminal or a file goes through tokio's
    // blocking-pool stdout).
    use cordon::transport::Pipe;
    let stdout: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match Pipe::stdout() {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
    };
    use std::os::fd::AsFd;
    let stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let stdin = std::io::BufReader::with_capacity(64 << 10, stdin);
    cordon::transport::stdio::serve_as(server, stdio_tenant, stdin, stdout, shutdown, drain).await?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed at once, not at the first
/// poll, so a signal that arrives while components load is not lost. A second signal
/// exits at once, without waiting for calls to drain or cleanups to run (a person pressing
/// Ctrl-C again, an orchestrator that will not wait).
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT: stopping calls in flight (again: exit at once)"),
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping calls in flight (again: exit at once)"),
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            eprintln!("a second signal: exiting without waiting for calls to stop");
            std::process::exit(130);
        });
    })
}

/// The component in `path`, loaded with default limits and no file system.
async fn load(path: &std::path::Path) -> Result<Runtime> {
    let mut runtime = Runtime::new(RuntimeSettings::default())?;
    runtime.load_file(path, ComponentOptions::default()).await?;
    Ok(runtime)
}

#[cfg(test)]
mod tests {
    use clap::{ArgAction, CommandFactory};

    /// Every flag of every subcommand shows its default in `--help`: clap's own
    /// `[default: ...]`, or one written in the help text for a default that is computed.
    /// Switches (`--stdio`, `--help`) and required positionals have none to show.
    #[test]
    fn every_flag_of_every_command_shows_its_default() {
        fn undocumented(command: &clap::Command, path: &str, found: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let switch = matches!(
                    arg.get_action(),
                    ArgAction::SetTrue
                        | ArgAction::SetFalse
                        | ArgAction::Count
                        | ArgAction::Help
                        | ArgAction::HelpShort
                        | ArgAction::HelpLong
                        | ArgAction::Version
                );
                // A required argument has no default to show (`cordon check --config`).
                let required = arg.is_required_set();
                let help =
                    arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
                let shown = !arg.get_default_values().is_empty() || help.contains("[default: ");
                if !(switch || required || shown) {
                    found.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                undocumented(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
        let command = super::Cli::command();
        let mut found = Vec::new();
        undocumented(&command, "cordon", &mut found);
        assert!(found.is_empty(), "flags whose --help shows no default: {found:?}");
    }
}
