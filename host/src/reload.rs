//! # Hot reload: the config read again, the components swapped in while calls go on
//!
//! [`Reloader`] owns what triggers a reload: SIGHUP, and with `serve --watch` a change to
//! the config file or to a component's file (inotify through the `notify` crate; a burst
//! of events, such as an editor's save or a copy in several writes, makes one reload
//! after [`DEBOUNCE`] of quiet). Each reload reads the config, and hands its
//! `[[components]]` to [`Runtime::reload`], which compiles what changed in the background
//! and swaps the new set in at once. A config that fails to read, parse or validate
//! changes nothing; a component that fails keeps its old version. Either way the error
//! is logged. A component that failed only because every call slot stayed busy while it
//! waited to be listed, or because calls of a version the reload replaced or removed
//! still hold a directory its grants overlap, is tried again after a pause (a reload of
//! what changed, as a trigger would), so that neither a saturated server nor a drain
//! needs another signal. Only
//! `[[components]]` are reloaded: every other table (`[server]`, `[http]`, `[[tenants]]`,
//! `[auth.oauth]`, ...) is read at start, and a reload that finds one changed says so in
//! a warning naming it, so that an operator who revoked a key or
//! changed a limit knows a restart is needed (rather than trusting a reload that took).
//! So a reloaded component keeps the tenants it was loaded for, and each of them its
//! own data directory: taken from new `[[tenants]]`, a component they no longer named
//! would grant its whole data directory, every tenant's in it, to the tenants still
//! served.
//!
//! [`check`] is the same work without serving: `cordon check --config FILE` in a CI
//! pipeline.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::auth::jwks::{JwksError, JwksSource, KeyCache};
use crate::config::{Config, Plan};
use crate::runtime::{LoadError, ReloadReport, Runtime};

/// How long the watched files must stay quiet before a reload starts.
pub const DEBOUNCE: Duration = Duration::from_millis(300);
/// The longest a reload waits for quiet: changes that never stop (a guest touching its
/// directory beside a watched file without pause) cannot hold reloads off for good.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(5);

/// Why a config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read, parsed or validated; the message names the key.
    #[error("{0}")]
    Config(String),
    #[error("cannot start watching files: {0}")]
    Watcher(notify::Error),
    #[error("cannot watch {path}: {source}")]
    Watch { path: PathBuf, source: notify::Error },
    #[error("installing the SIGHUP handler: {0}")]
    Signal(std::io::Error),
}

/// Read the config at `path` (or, without one, the default: the example tools) into a
/// plan, with paths resolved against the file's directory.
pub fn read_plan(path: Option<&Path>) -> Result<Plan, ReloadError> {
    let plan = match path {
        Some(path) => {
            let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
            Config::load_with_settings(path).and_then(|(config, settings)| {
                let (files, secrets) = config.protected_files(path, &base);
                let mut plan = config.plan(&base)?;
                (plan.runtime.server_files, plan.runtime.secret_files) = (files, secrets);
                plan.settings = Some(settings);
                Ok(plan)
            })
        }
        None => Config::default().plan(Path::new(".")),
    };
    plan.map_err(|error| ReloadError::Config(format!("{error:#}")))
}

/// Reload the components of the config at `path` into `runtime`, logging what changed
/// and every failure; with the rest of the plan read (its components taken), which a reload
/// does not apply.
pub async fn reload(runtime: &Runtime, path: Option<&Path>) -> Result<(ReloadReport, Plan), ReloadError> {
    let mut plan = read_plan(path).inspect_err(|error| {
        tracing::error!("reload: the config was not applied, nothing changed: {error}");
    })?;
    runtime.protect_files(&plan.runtime.server_files, &plan.runtime.secret_files);
    let report = runtime.reload(std::mem::take(&mut plan.components)).await;
    for error in &report.failed {
        if error.busy {
            tracing::warn!("reload: {error} (a component that had a version keeps it meanwhile)");
        } else {
            tracing::error!(
                "reload: {error} (the component keeps its old version if it had one that still fits)"
            );
        }
    }
    if report.swapped {
        let tools = runtime.snapshot();
        tracing::info!(
            "reload: loaded [{}], removed [{}], unchanged [{}]; serving {} tools",
            report.loaded.join(", "),
            report.removed.join(", "),
            report.unchanged.join(", "),
            tools.tools().count()
        );
    } else {
        tracing::info!("reload: nothing changed");
    }
    Ok((report, plan))
}

/// Reloads `runtime` from its config on SIGHUP and, when watching, when a file changes.
pub struct Reloader {
    runtime: Arc<Runtime>,
    config: Option<PathBuf>,
    /// What a change must touch to trigger a reload.
    watched: Arc<Mutex<Watched>>,
    changed: Arc<Notify>,
    watcher: Option<notify::RecommendedWatcher>,
    /// The directories watched now (a file is watched through its directory, since editors
    /// and `cp` often replace a file rather than write it in place).
    directories: HashSet<PathBuf>,
    hangup: tokio::signal::unix::Signal,
    /// What the server started with, to say what a reload does not apply.
    started_with: StartedWith,
}

/// What a server started with that only a restart changes: the config's tables other than
/// `components`, and its tenants' API keys ([`crate::auth::Tenants::keys_fingerprint`]; a
/// key file edited since is no change of the config's text). Taken from the plan the server
/// started from ([`StartedWith::of`]), not read again later: an edit made while the
/// components compiled is a change too.
#[derive(Default)]
pub struct StartedWith {
    settings: Option<toml::Table>,
    keys: Option<crate::auth::api_keys::KeyDigest>,
}

impl StartedWith {
    /// What `plan` (read from a file) starts the server with; take it before the plan's
    /// tenants are narrowed to those one process serves.
    pub fn of(plan: &Plan) -> Self {
        let keys = plan.settings.is_some().then(|| plan.tenants.keys_fingerprint());
        Self { settings: plan.settings.clone(), keys }
    }
}

/// The tables of `now` that differ from `before` (added, removed or changed), sorted.
fn changed_settings(before: &toml::Table, now: &toml::Table) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(now.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter().filter(|key| before.get(*key) != now.get(*key)).cloned().collect()
}

/// The files whose change triggers a reload (absolute): the config and the components;
/// and the directories in which any change does: those of files that are symlinks, which
/// change when a link on the way is swapped (a Kubernetes ConfigMap volume swaps its
/// `..data` link and never touches the file's own path).
///
/// A component's granted directories (its data directory, a tenant's in it, its mounts)
/// are no change, even in such a directory: a guest may touch its own directory (`set-times`
/// on its root), and would otherwise make the server reload at will. They are known by
/// their paths and by what they are (device and inode): a grant named through `..` or a
/// symlink is still its directory when an event names it otherwise.
#[derive(Default)]
struct Watched {
    files: HashSet<PathBuf>,
    any_in: HashSet<PathBuf>,
    grants: HashSet<PathBuf>,
    grant_ids: HashSet<(u64, u64)>,
}

impl Watched {
    fn touched_by(&self, path: &Path) -> bool {
        if self.files.contains(path) {
            return true;
        }
        let Some(directory) = path.parent().filter(|directory| self.any_in.contains(*directory)) else {
            return false;
        };
        let is_grant = |path: &Path| {
            self.grants.contains(path) || identity(path).is_some_and(|id| self.grant_ids.contains(&id))
        };
        !is_grant(path) && !is_grant(directory)
    }
}

/// The device and inode of what `path` names (a symlink itself, not where it leads).
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|metadata| (metadata.dev(), metadata.ino()))
}

/// Wait for `changed` to stay quiet for [`DEBOUNCE`] (a burst of events is one change),
/// or [`MAX_DEBOUNCE`] in all.
async fn settle(changed: &Notify) {
    let deadline = tokio::time::Instant::now() + MAX_DEBOUNCE;
    loop {
        let quiet_at = (tokio::time::Instant::now() + DEBOUNCE).min(deadline);
        if tokio::time::timeout_at(quiet_at, changed.notified()).await.is_err() || quiet_at == deadline {
            return;
        }
    }
}

/// The first pause before a reload is tried again because every call slot stayed busy...
pub const BUSY_RETRY: Duration = Duration::from_secs(2);
/// ...doubling each time it is so again, up to this.
pub const BUSY_RETRY_MAX: Duration = Duration::from_secs(60);

/// Take SIGHUP from now on (its default action ends the process): install this before
/// loading anything, and hand it to [`Reloader::new`].
pub fn hangup_signal() -> Result<tokio::signal::unix::Signal, ReloadError> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup()).map_err(ReloadError::Signal)
}

impl Reloader {
    /// A reloader for `runtime` serving the config at `config`, reloading on `hangup`
    /// ([`hangup_signal`]); with `watch`, the files are watched from now on.
    pub fn new(
        runtime: Arc<Runtime>,
        config: Option<PathBuf>,
        started_with: StartedWith,
        watch: bool,
        hangup: tokio::signal::unix::Signal,
    ) -> Result<Self, ReloadError> {
        let watched: Arc<Mutex<Watched>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let watcher = if watch {
            let (watched, changed) = (watched.clone(), changed.clone());
            let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let Ok(event) = event else { return };
                // Reading a file (the reload itself does) is no change.
                if matches!(event.kind, notify::EventKind::Access(_)) {
                    return;
                }
                let watched = watched.lock().unwrap();
                if event.paths.iter().any(|path| watched.touched_by(path)) {
                    changed.notify_one();
                }
            })
            .map_err(ReloadError::Watcher)?;
            Some(watcher)
        } else {
            None
        };
        let directories = HashSet::new();
        let mut reloader =
            Self { runtime, config, watched, changed, watcher, directories, hangup, started_with };
        reloader.watch_files()?;
        Ok(reloader)
    }

    /// Watch the config and the components the runtime now serves (from the config).
    fn watch_files(&mut self) -> Result<(), ReloadError> {
        let Some(watcher) = &mut self.watcher else { return Ok(()) };
        let mut files: HashSet<PathBuf> = HashSet::new();
        let mut grants: HashSet<PathBuf> = HashSet::new();
        if let Some(config) = &self.config {
            files.insert(config.clone());
        }
        if let Ok(plan) = read_plan(self.config.as_deref()) {
            for component in &plan.components {
                let options = &component.options;
                grants.extend(options.data_dir.iter().cloned());
                grants.extend(options.mounts.iter().map(|mount| mount.host.clone()));
            }
            // Components built into the binary have no file to watch.
            let on_disk = plan.components.into_iter().filter(|component| component.embedded.is_none());
            files.extend(on_disk.map(|component| component.path));
        }
        let grant_ids = grants
            .iter()
            .filter_map(|grant| std::fs::canonicalize(grant).ok())
            .filter_map(|grant| identity(&grant))
            .collect();
        let grants =
            grants.iter().map(|grant| std::path::absolute(grant).unwrap_or_else(|_| grant.clone())).collect();
        let files: HashSet<PathBuf> =
            files.iter().map(|file| std::path::absolute(file).unwrap_or_else(|_| file.clone())).collect();
        let directories: HashSet<PathBuf> =
            files.iter().filter_map(|file| file.parent().map(Path::to_path_buf)).collect();
        let any_in = files
            .iter()
            .filter(|file| std::fs::symlink_metadata(file).is_ok_and(|metadata| metadata.is_symlink()))
            .filter_map(|file| file.parent().map(Path::to_path_buf))
            .collect();
        use notify::Watcher;
        for gone in self.directories.difference(&directories) {
            let _ = watcher.unwatch(gone);
        }
        for new in directories.difference(&self.directories) {
            watcher
                .watch(new, notify::RecursiveMode::NonRecursive)
                .map_err(|source| ReloadError::Watch { path: new.clone(), source })?;
        }
        self.directories = directories;
        *self.watched.lock().unwrap() = Watched { files, any_in, grants, grant_ids };
        Ok(())
    }

    /// Reload on every trigger until the runtime shuts down; and again after a pause
    /// (from [`BUSY_RETRY`], doubling up to [`BUSY_RETRY_MAX`]) while a reload left
    /// components unloaded only because they waited on calls (a free call slot, or the end
    /// of calls of a version the reload replaced or removed).
    pub async fn run(mut self) -> Result<(), ReloadError> {
        let mut shutdown = self.runtime.shutting_down();
        // When to reload again, and the pause after that.
        let mut retry: Option<(tokio::time::Instant, Duration)> = None;
        loop {
            let retry_at = retry.map(|(at, _)| at);
            tokio::select! {
                _ = self.hangup.recv() => tracing::info!("SIGHUP: reloading the config"),
                () = self.changed.notified() => {
                    settle(&self.changed).await;
                    tracing::info!("a watched file changed: reloading the config");
                }
                () = async { tokio::time::sleep_until(retry_at.expect("guarded")).await }, if retry_at.is_some() => {
                    tracing::info!("reloading the config again: components waited on calls last time");
                }
                () = async { let _ = shutdown.wait_for(|stopping| *stopping).await; } => return Ok(()),
            }
            let pause = retry.map_or(BUSY_RETRY, |(_, pause)| pause);
            let again = Some((tokio::time::Instant::now() + pause, (pause * 2).min(BUSY_RETRY_MAX)));
            match reload(&self.runtime, self.config.as_deref()).await {
                Ok((report, plan)) => {
                    self.warn_of_settings_not_applied(&plan);
                    let busy: Vec<&str> = report
                        .failed
                        .iter()
                        .filter(|failure| failure.busy)
                        .map(|failure| &*failure.origin)
                        .collect();
                    retry = None;
                    if !busy.is_empty() {
                        tracing::warn!(
                            "reload: {} waited on calls (no call slot came free to list in, or calls of a replaced \
                             version still hold a directory); reading the config again in {pause:?}",
                            busy.join(", ")
                        );
                        retry = again;
                    }
                }
                // A config that fails to read (a link swapped under it, say) leaves a retry
                // that was due armed.
                Err(_) if retry.is_some() => retry = again,
                Err(_) => {}
            }
            if let Err(error) = self.watch_files() {
                tracing::error!("reload: {error}");
            }
        }
    }
}

impl Reloader {
    /// Warn when the config's other tables, or its tenants' keys, differ from those the
    /// server started with (`plan`: what this reload read).
    fn warn_of_settings_not_applied(&self, plan: &Plan) {
        let Some(config) = &self.config else { return };
        if let Some(before) = self.started_with.keys
            && plan.tenants.keys_fingerprint() != before
        {
            tracing::warn!(
                "reload: the tenants' API keys changed (in {} or the key files it names), and only a restart \
                 applies them: the server keeps the keys it started with, a key taken out among them",
                config.display()
            );
        }
        let (Some(before), Some(now)) = (&self.started_with.settings, &plan.settings) else { return };
        let changed = changed_settings(before, now);
        if !changed.is_empty() {
            let tables: Vec<String> = changed.iter().map(|key| format!("[{key}]")).collect();
            tracing::warn!(
                "reload: {} changed in {}, and only a restart applies it: the server keeps the settings it \
                 started with (a reload applies [[components]] only)",
                tables.join(", "),
                config.display()
            );
        }
    }
}

/// What `cordon check` found in a valid config.
#[derive(Debug)]
pub struct CheckSummary {
    pub components: usize,
    pub tools: Vec<String>,
}

/// Why `cordon check` failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Config(#[from] ReloadError),
    #[error("starting the runtime: {0:#}")]
    Runtime(anyhow::Error),
    #[error(transparent)]
    RequestStateKey(#[from] crate::dispatch::sealed::KeyError),
    /// `[auth.oauth] jwks = { file = ... }` that `serve --http` could not start with.
    #[error(transparent)]
    Jwks(#[from] JwksError),
    /// Every component that failed to load, each naming its file.
    #[error("{} of {total} components failed to load:\n{}", .failed.len(), list(.failed))]
    Components { total: usize, failed: Vec<LoadError> },
}

fn list(errors: &[LoadError]) -> String {
    errors.iter().map(|error| format!("  {error}")).collect::<Vec<_>>().join("\n")
}

/// Read and validate the config at `path`, and load every component it names (compile,
/// instantiate once, read the tool list), as `serve` would, without serving. Data
/// directories are created as `serve` creates them.
pub async fn check(path: &Path) -> Result<CheckSummary, CheckError> {
    let plan = read_plan(Some(path))?;
    // As `serve` reads it (the environment's key first), before anything compiles.
    crate::dispatch::sealed::Sealer::from_settings(
        plan.request_state_key.as_deref(),
        plan.request_state_ttl,
    )?;
    // The issuer's key set in a file, as `serve --http` reads it at startup (where one that
    // cannot be read is fatal). A URL is not fetched: serving tolerates it down.
    if let Some(oauth) = plan.oauth.as_ref().filter(|oauth| matches!(oauth.jwks, JwksSource::File(_))) {
        KeyCache::start(oauth.jwks.clone(), oauth.min_refetch_interval).await?;
    }
    let mut runtime = Runtime::new(plan.runtime.clone()).map_err(CheckError::Runtime)?;
    let total = plan.components.len();
    let failed = runtime.load_all(plan.components).await;
    if !failed.is_empty() {
        return Err(CheckError::Components { total, failed });
    }
    let tools = runtime.snapshot().tools().map(|tool| tool.name.clone()).collect();
    Ok(CheckSummary { components: total, tools })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes that never stop hold a reload off [`MAX_DEBOUNCE`] at most; a burst is
    /// waited out. (Before, a change every 200 ms held reloads off for as long as it went on.)
    #[tokio::test(start_paused = true)]
    async fn a_reload_waits_for_quiet_but_not_for_ever() {
        let changed = Arc::new(Notify::new());
        let touching = tokio::spawn({
            let changed = changed.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    changed.notify_one();
                }
            }
        });
        let started = tokio::time::Instant::now();
        settle(&changed).await;
        assert_eq!(started.elapsed(), MAX_DEBOUNCE);
        touching.abort();
        let started = tokio::time::Instant::now();
        settle(&changed).await;
        assert_eq!(started.elapsed(), DEBOUNCE, "quiet: one debounce");
    }

    /// A guest touching its own directory (or a tenant's in it) beside a watched symlinked
    /// file is no change; the file's directory's other entries (a ConfigMap's `..data`) are.
    #[test]
    fn a_granted_directory_beside_a_watched_file_is_no_change() {
        let watched = Watched {
            files: HashSet::from([PathBuf::from("/srv/cordon/cordon.toml")]),
            any_in: HashSet::from([PathBuf::from("/srv/cordon")]),
            grants: HashSet::from([PathBuf::from("/srv/cordon/data")]),
            grant_ids: HashSet::new(),
        };
        assert!(watched.touched_by(Path::new("/srv/cordon/cordon.toml")));
        assert!(watched.touched_by(Path::new("/srv/cordon/..data")));
        assert!(!watched.touched_by(Path::new("/srv/cordon/data")));
        assert!(!watched.touched_by(Path::new("/srv/cordon/data/acme")));
        assert!(!watched.touched_by(Path::new("/srv/elsewhere/file")));
        // A watched file in a granted directory (a mount of the tools, `data_dir = "."`)
        // is still watched.
        let watched = Watched {
            files: HashSet::from([PathBuf::from("/srv/tools/tools.wasm")]),
            any_in: HashSet::new(),
            grants: HashSet::from([PathBuf::from("/srv/tools")]),
            grant_ids: HashSet::new(),
        };
        assert!(watched.touched_by(Path::new("/srv/tools/tools.wasm")));
    }

    /// A grant the config names through `..` (or a link) is the directory an event names
    /// by its plain path: a guest touching it is no change either. Before, it was known by
    /// the configured path alone, and every touch reloaded the server.
    #[test]
    fn a_granted_directory_named_another_way_is_still_no_change() {
        let scratch = crate::scratch::Scratch::new("reload-grant-ids");
        let config_dir = scratch.path().join("conf");
        std::fs::create_dir_all(config_dir.join("data/acme")).unwrap();
        std::fs::create_dir_all(config_dir.join("other")).unwrap();
        let data = config_dir.join("data");
        let watched = Watched {
            files: HashSet::from([config_dir.join("cordon.toml")]),
            any_in: HashSet::from([config_dir.clone(), data.clone()]),
            grants: HashSet::from([config_dir.join("other/../data")]),
            grant_ids: HashSet::from([identity(&data).unwrap()]),
        };
        assert!(!watched.touched_by(&data));
        assert!(!watched.touched_by(&data.join("acme")));
        assert!(watched.touched_by(&config_dir.join("..data")));
        // What made the ids: the configured name, resolved.
        let resolved = std::fs::canonicalize(config_dir.join("other/../data")).unwrap();
        assert_eq!(identity(&resolved), identity(&data));
    }
}
