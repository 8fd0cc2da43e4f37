//! `cordon call`: one call of one tool from the command line, for the tool's author.
//!
//! It runs the call as `serve` would: with `--config`, the component's `[[components]]`
//! entry gives its limits, files, environment and egress (and no data directory unless the
//! entry grants one); without it, default limits and no file system unless `--data-dir`
//! grants one. Progress goes to stderr (a bar on a terminal, plain lines otherwise), the
//! result to stdout, printed once: for people on a terminal, one JSON document otherwise.
//! The first Ctrl-C cancels the call through the runtime's stop sequence and says how the
//! tool stopped and what its cleanup did; a second one exits at once.
//!
//! Exit codes ([`Exit`]): 0 the tool answered, 1 it failed (an error result or message, a
//! crash, a limit), 2 the call could not start (arguments, config, component, tool name),
//! 3 it was stopped (Ctrl-C, a timeout), 130 a second Ctrl-C.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use super::render;
use crate::config::Config;
use crate::runtime::{
    CallError, CallReport, ComponentOptions, LoadError, Outcome, Progress, Runtime, RuntimeSettings,
    ToolLimits,
};

/// What to call, and how, as the command line says.
#[derive(Debug, Clone, Default)]
pub struct CallRequest {
    pub component: PathBuf,
    pub tool: String,
    /// The arguments as JSON text (an object).
    pub arguments: String,
    /// A config whose `[[components]]` entry for `component` applies.
    pub config: Option<PathBuf>,
    /// With `config`: the tenant whose data directory (`<data_dir>/<tenant>`) the call gets.
    pub tenant: Option<String>,
    /// Without `config`: a data directory to grant, preopened at `/data`.
    pub data_dir: Option<PathBuf>,
    /// The call's maximum duration, in seconds, over the configured one.
    pub timeout: Option<f64>,
    /// Print the result as JSON even on a terminal.
    pub json: bool,
}

/// How `cordon call` exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The tool answered (without `isError`).
    Ok,
    /// The tool failed: an error result or message, a crash, a limit; or the host could
    /// not run it.
    Failed,
    /// The call could not start: the arguments, the config, the component or the tool
    /// name is wrong.
    Usage,
    /// The call was stopped: Ctrl-C or a timeout.
    Stopped,
    /// A second Ctrl-C: exited without waiting for the stop and the cleanup.
    Abandoned,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Stopped => 3,
            Exit::Abandoned => 130,
        }
    }
}

/// Why a call could not run.
#[derive(Debug, thiserror::Error)]
pub enum CallSetupError {
    #[error("the arguments are not JSON: {0}")]
    ArgumentsNotJson(serde_json::Error),
    #[error("--timeout {0}: give a positive number of seconds")]
    Timeout(f64),
    /// The config could not be read or resolved; the message names the file and the key.
    #[error("{0}")]
    Config(String),
    #[error("{config} has no [[components]] entry whose path is {component}: add one, or leave out --config")]
    NotInConfig { config: PathBuf, component: PathBuf },
    #[error("--tenant {tenant}: {problem}")]
    Tenant { tenant: String, problem: String },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("unknown tool {tool:?}: {component} offers {offered}")]
    UnknownTool { tool: String, component: String, offered: String },
    #[error(transparent)]
    Refused(CallError),
    #[error("starting the runtime: {0}")]
    Runtime(String),
    #[error("installing the Ctrl-C handler: {0}")]
    Signal(std::io::Error),
}

impl CallSetupError {
    /// How the process exits with this error.
    pub fn exit(&self) -> Exit {
        match self {
            Self::Runtime(_) | Self::Signal(_) => Exit::Failed,
            Self::Refused(
                CallError::Busy { .. }
                | CallError::TenantBusy { .. }
                | CallError::TenantShareBusy { .. }
                | CallError::ShuttingDown,
            ) => Exit::Failed,
            _ => Exit::Usage,
        }
    }
}

/// How the call's component is loaded.
struct Planned {
    settings: RuntimeSettings,
    name: String,
    options: ComponentOptions,
    /// What the user should know about the grants (said on stderr before the call).
    notes: Vec<String>,
}

/// The runtime settings and the component's name and options: from the config's entry
/// for the component, else the defaults with no file system unless `--data-dir`.
fn plan(request: &CallRequest) -> Result<Planned, CallSetupError> {
    let mut notes = Vec::new();
    let (settings, name, mut options) = match &request.config {
        None => {
            let name = request
                .component
                .file_stem()
                .map_or_else(|| "component".to_owned(), |stem| stem.to_string_lossy().into_owned());
            let options =
                ComponentOptions { data_dir: request.data_dir.clone(), ..ComponentOptions::default() };
            (RuntimeSettings::default(), name, options)
        }
        Some(config) => from_config(config, request, &mut notes)?,
    };
    if let Some(seconds) = request.timeout {
        let max = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|max| !max.is_zero())
            .ok_or(CallSetupError::Timeout(seconds))?;
        for limits in std::iter::once(&mut options.limits).chain(options.tool_limits.values_mut()) {
            limits.max_duration = Some(max);
        }
    }
    Ok(Planned { settings, name, options, notes })
}

/// The config's `[[components]]` entry for the requested component, resolved as `serve`
/// resolves it (only that entry: another's secrets are not read, nor tenants' keys).
fn from_config(
    path: &Path,
    request: &CallRequest,
    notes: &mut Vec<String>,
) -> Result<(RuntimeSettings, String, ComponentOptions), CallSetupError> {
    let config_error = |error: anyhow::Error| CallSetupError::Config(format!("{error:#}"));
    let mut config = Config::load(path).map_err(config_error)?;
    // Paths in the config are relative to its directory (a bare file name's is empty).
    let base = path.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let base = std::path::absolute(base).map_err(|error| CallSetupError::Config(error.to_string()))?;
    let wanted = request.component.canonicalize().map_err(|error| {
        LoadError::new(&request.component.display().to_string(), format!("cannot read: {error}"))
    })?;
    let entry = config
        .components
        .iter()
        .position(|entry| base.join(&entry.path).canonicalize().ok().as_ref() == Some(&wanted))
        .ok_or_else(|| CallSetupError::NotInConfig {
            config: path.to_owned(),
            component: request.component.clone(),
        })?;
    // What `serve` protects from every grant, from the whole config: its secret files and
    // the files it reads, the other components' files among them (a guest that may write
    // there would change what `serve` runs).
    let (mut files, secrets) = config.protected_files(path, &base);
    files.extend(config.components.iter().map(|entry| base.join(&entry.path)));
    let entry = config.components.swap_remove(entry);
    config.components = vec![entry];
    let tenants = std::mem::take(&mut config.tenants);
    let mut plan = config.plan(&base).map_err(config_error)?;
    (plan.runtime.server_files, plan.runtime.secret_files) = (files, secrets);
    let component = plan.components.pop().expect("the plan holds the one entry");
    let (name, mut options) = (component.name, component.options);
    let users: Vec<&str> = tenants
        .iter()
        .filter(|tenant| tenant.components.contains(&name))
        .map(|tenant| tenant.name.as_str())
        .collect();
    match (&request.tenant, options.data_dir.take()) {
        // As `serve` gives each tenant its own data directory, never the shared one.
        (Some(tenant), data_dir) => {
            let problem = if !tenants.iter().any(|entry| &entry.name == tenant) {
                Some(format!("no such tenant in {}", path.display()))
            } else if !users.contains(&tenant.as_str()) {
                Some(format!("the tenant does not use component {name}"))
            } else if !crate::paths::is_safe_name(tenant) {
                Some("the name cannot name a directory".to_owned())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(CallSetupError::Tenant { tenant: tenant.clone(), problem });
            }
            options.data_dir = data_dir.map(|dir| dir.join(tenant));
        }
        (None, Some(_)) if !users.is_empty() => notes.push(format!(
            "component {name} is used by tenants ({}): without --tenant the call gets no data directory, \
             as a call of no tenant gets none from `serve`",
            users.join(", ")
        )),
        (None, data_dir) => options.data_dir = data_dir,
    }
    Ok((plan.runtime, name, options))
}

/// Load the component and run the call, printing as the module docs say.
pub async fn run(request: CallRequest) -> Result<Exit, CallSetupError> {
    let arguments: Value =
        serde_json::from_str(&request.arguments).map_err(CallSetupError::ArgumentsNotJson)?;
    let Planned { settings, name, options, notes } = plan(&request)?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let mut runtime =
        Runtime::new(settings).map_err(|error| CallSetupError::Runtime(format!("{error:#}")))?;
    runtime.observe(std::sync::Arc::new(crate::telemetry::CallLog::via_tracing()));
    runtime.load_named_file(&name, &request.component, options).await?;
    let tools = runtime.snapshot();
    let Some(limits) = tools.limits(&request.tool).cloned() else {
        let offered: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
        return Err(CallSetupError::UnknownTool {
            tool: request.tool.clone(),
            component: request.component.display().to_string(),
            offered: offered.join(", "),
        });
    };
    // Installed before the call starts, so that no Ctrl-C in between kills the process.
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupts = signal(SignalKind::interrupt()).map_err(CallSetupError::Signal)?;
    let call = runtime.call(&request.tool, &arguments).await.map_err(CallSetupError::Refused)?;
    let handle = call.handle();
    let mut progress = handle.progress();
    let feedback = Feedback::start(&request.tool, std::io::stderr().is_terminal());
    let started = Instant::now();
    let mut run = std::pin::pin!(call.run());
    let mut interrupted: Option<Instant> = None;
    let mut shown: Option<Progress> = None;
    let report = loop {
        tokio::select! {
            report = &mut run => break report,
            Ok(()) = progress.changed() => {
                if let Some(report) = progress.borrow_and_update().clone() {
                    feedback.progress(&report);
                    shown = Some(report);
                }
            }
            Some(()) = interrupts.recv() => {
                if interrupted.is_some() {
                    feedback.say("interrupted again: exiting at once, without waiting for the stop and the cleanup");
                    // At once, as asked: no runtime shutdown, no waiting for the guest.
                    std::process::exit(Exit::Abandoned.code().into());
                }
                interrupted = Some(Instant::now());
                handle.cancel();
                feedback.say(&format!(
                    "interrupted: stopping {} (it has {} to return by itself before a hard stop; its \
                     cleanup runs after); Ctrl-C again exits at once",
                    request.tool,
                    render::duration(limits.grace)
                ));
            }
        }
    };
    // A report that came just before the end, which the loop did not get to.
    if let Some(report) = progress.borrow().clone().filter(|report| shown.as_ref() != Some(report)) {
        feedback.progress(&report);
    }
    feedback.finish();
    let elapsed = report.stopped_at.saturating_duration_since(started);
    Ok(print_report(&report, &limits, elapsed, interrupted, request.json || !std::io::stdout().is_terminal()))
}

/// Print the result on stdout (once) or how the call ended on stderr; returns the exit.
fn print_report(
    report: &CallReport,
    limits: &ToolLimits,
    elapsed: Duration,
    interrupted: Option<Instant>,
    json: bool,
) -> Exit {
    let tool = &report.tool;
    let elapsed = render::duration(elapsed);
    if let Outcome::Completed(result) = &report.outcome {
        let printed = if json {
            serde_json::to_string_pretty(&render::result_json(result)).expect("a JSON value serializes")
        } else {
            render::result_text(result)
        };
        let mut stdout = std::io::stdout().lock();
        // A closed stdout (`| head`) is no reason to fail the call.
        let _ = writeln!(stdout, "{printed}").and_then(|()| stdout.flush());
        if result.is_error {
            eprintln!("{tool}: the tool answered with an error result after {elapsed}");
            return Exit::Failed;
        }
        eprintln!("{tool}: answered in {elapsed}");
        return Exit::Ok;
    }
    let words = match (&report.outcome, interrupted) {
        (Outcome::Cancelled, Some(_)) => "the call was cancelled (Ctrl-C)".to_owned(),
        (outcome, _) => render::outcome(outcome, limits),
    };
    eprintln!("{tool}: {words}, after {elapsed}");
    let since_interrupt = interrupted.map(|at| report.stopped_at.saturating_duration_since(at));
    if let Some(stop) = render::stop(report, limits, since_interrupt) {
        eprintln!("  how it stopped: {stop}");
    }
    match &report.cleanup {
        Some(cleanup) => eprintln!("  cleanup: {}", render::cleanup(cleanup, limits)),
        None if matches!(report.outcome, Outcome::Cancelled | Outcome::TimedOut(_)) => {
            eprintln!("  cleanup: none ran")
        }
        None => {}
    }
    match report.outcome {
        Outcome::Cancelled | Outcome::TimedOut(_) | Outcome::Shutdown => Exit::Stopped,
        _ => Exit::Failed,
    }
}

/// The progress bar shown while a call runs on a terminal; the log writes around it.
static ACTIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Stderr for the log of `cordon call`: while a progress bar is shown, each write clears the
/// bar, writes, and draws it again, so that log lines never tear it.
#[derive(Debug, Default, Clone, Copy)]
pub struct BarAwareStderr;

impl Write for BarAwareStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let bar = ACTIVE_BAR.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // Whole, so that the bar is never drawn in the middle of a line.
        let write = || std::io::stderr().lock().write_all(bytes);
        match bar {
            Some(bar) => bar.suspend(write)?,
            None => write()?,
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// How a running call shows on stderr.
enum Feedback {
    /// A terminal: a spinner, then a bar once the tool reports a total.
    Bar(ProgressBar),
    /// A pipe or a file: one line per report.
    Lines,
}

/// Progress positions are kept in thousandths, so that fractional reports still move.
const SCALE: f64 = 1000.0;

impl Feedback {
    fn start(tool: &str, terminal: bool) -> Self {
        if !terminal {
            eprintln!("calling {tool} (Ctrl-C stops it)");
            return Feedback::Lines;
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix} {elapsed} {msg}")
                .expect("the template is valid"),
        );
        bar.set_prefix(tool.to_owned());
        bar.set_message("running (Ctrl-C stops it)");
        bar.enable_steady_tick(Duration::from_millis(100));
        *ACTIVE_BAR.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar.clone());
        Feedback::Bar(bar)
    }

    fn progress(&self, report: &Progress) {
        match self {
            Feedback::Lines => eprintln!("progress: {}", render::progress(report)),
            Feedback::Bar(bar) => {
                match report.total.filter(|total| *total > 0.0) {
                    Some(total) => {
                        if bar.length().is_none() {
                            bar.set_style(
                                ProgressStyle::with_template("{spinner} {prefix} [{bar:30}] {elapsed} {msg}")
                                    .expect("the template is valid")
                                    .progress_chars("=> "),
                            );
                        }
                        bar.set_length((total * SCALE) as u64);
                        bar.set_position((report.done.min(total) * SCALE) as u64);
                    }
                    None => bar.set_position((report.done * SCALE) as u64),
                }
                bar.set_message(render::progress(report));
            }
        }
    }

    /// A line above the bar (or among the lines).
    fn say(&self, line: &str) {
        match self {
            Feedback::Bar(bar) => bar.suspend(|| eprintln!("{line}")),
            Feedback::Lines => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Feedback::Bar(bar) = self {
            ACTIVE_BAR.lock().unwrap_or_else(PoisonError::into_inner).take();
            bar.finish_and_clear();
        }
    }
}
