//! Mounts (`[[components.mounts]]`): read-only and read-write host directories at guest
//! paths of the operator's choosing, opened once at load, escaped by no symlink and no
//! `..`, and a read-write mount's quota enforced at every write; `cordon inspect`, and the
//! warning at load for an import the grants leave empty. Run against the hostile
//! component (`examples/hostile`).

use crate::common;

use common::{answer, call, fresh_dir, hostile};

use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon::runtime::{
    CallError, CallReport, ComponentOptions, ComponentSource, Mount, Outcome, Runtime, TenantView,
};
use serde_json::json;

fn mount(host: &Path, guest: &str, writable: bool, quota_bytes: Option<u64>) -> Mount {
    Mount { host: host.to_owned(), guest: guest.into(), writable, quota_bytes }
}

async fn runtime_with(options: ComponentOptions) -> Result<Runtime, cordon::runtime::LoadError> {
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let options = ComponentOptions { limits: common::quick_limits(), ..options };
    runtime.load_file(&hostile(), options).await.map(|()| runtime)
}

/// Whether the call answered with a tool error.
fn failed(report: &CallReport) -> bool {
    matches!(&report.outcome, Outcome::ToolError(_))
        || matches!(&report.outcome, Outcome::Completed(result) if result.is_error)
}

/// A data directory, a read-only mount and a read-write one, side by side with a
/// directory none of them may reach (`outside/secret.txt`).
struct Layout {
    root: PathBuf,
    data: PathBuf,
    ro: PathBuf,
    rw: PathBuf,
}

impl Layout {
    fn new(what: &str) -> Self {
        let root = fresh_dir(what);
        let (data, ro, rw) = (root.join("data"), root.join("ro"), root.join("rw"));
        for dir in [&data, &ro, &rw, &root.join("outside")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(root.join("outside/secret.txt"), "secret").unwrap();
        std::fs::write(ro.join("readme.txt"), "read me").unwrap();
        Self { root, data, ro, rw }
    }

    fn options(&self, quota_bytes: Option<u64>) -> ComponentOptions {
        ComponentOptions {
            data_dir: Some(self.data.clone()),
            mounts: vec![mount(&self.ro, "/ro", false, None), mount(&self.rw, "/mnt/rw", true, quota_bytes)],
            ..ComponentOptions::default()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_mount_is_readable_and_not_writable() {
    let layout = Layout::new("ro");
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    assert_eq!(answer(&call(&runtime, "read_text", json!({ "path": "/ro/readme.txt" })).await), "read me");
    assert_eq!(
        answer(&call(&runtime, "read_at", json!({ "dir": "/ro", "path": "readme.txt" })).await),
        "read me"
    );
    for (tool, arguments) in [
        ("write_text", json!({ "path": "/ro/new.txt", "text": "x" })),
        ("write_text", json!({ "path": "/ro/readme.txt", "text": "overwritten" })),
        ("write_at", json!({ "dir": "/ro", "path": "readme.txt", "text": "overwritten" })),
        ("remove", json!({ "path": "/ro/readme.txt" })),
        ("symlink", json!({ "dir": "/ro", "target": "readme.txt", "link": "alias" })),
    ] {
        let report = call(&runtime, tool, arguments.clone()).await;
        assert!(failed(&report), "{tool} {arguments} passed: {}", answer(&report));
    }
    assert_eq!(std::fs::read_to_string(layout.ro.join("readme.txt")).unwrap(), "read me");
    let names: Vec<_> =
        std::fs::read_dir(&layout.ro).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(names, ["readme.txt"], "nothing was added to the read-only mount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_mount_is_writable_at_its_guest_path() {
    let layout = Layout::new("rw");
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    let wrote = call(&runtime, "write_text", json!({ "path": "/mnt/rw/notes.txt", "text": "hello" })).await;
    assert_eq!(answer(&wrote), "wrote 5 bytes to /mnt/rw/notes.txt");
    assert_eq!(std::fs::read_to_string(layout.rw.join("notes.txt")).unwrap(), "hello");
    assert_eq!(answer(&call(&runtime, "read_text", json!({ "path": "/mnt/rw/notes.txt" })).await), "hello");
    let linked =
        call(&runtime, "symlink", json!({ "dir": "/mnt/rw", "target": "notes.txt", "link": "alias" })).await;
    assert_eq!(answer(&linked), "linked alias -> notes.txt");
    assert_eq!(
        answer(&call(&runtime, "remove", json!({ "path": "/mnt/rw/alias" })).await),
        "removed /mnt/rw/alias"
    );
    // The data directory is still there, and separate.
    call(&runtime, "write_text", json!({ "path": "/data/d.txt", "text": "d" })).await;
    assert!(layout.data.join("d.txt").is_file() && !layout.rw.join("d.txt").exists());
}

/// Symlinks the operator (or anyone on the host) left in a grant that lead out of it, and
/// `..` in a guest's paths, reach nothing outside, from every grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_symlink_and_no_dot_dot_leads_out_of_any_mount() {
    let layout = Layout::new("escape");
    let outside = layout.root.join("outside");
    for dir in [&layout.data, &layout.ro, &layout.rw] {
        std::os::unix::fs::symlink(&outside, dir.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("relative")).unwrap();
        std::os::unix::fs::symlink("../outside/secret.txt", dir.join("file-link")).unwrap();
    }
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    for guest in ["/data", "/ro", "/mnt/rw"] {
        for path in [
            "absolute/secret.txt",
            "relative/secret.txt",
            "file-link",
            "../outside/secret.txt",
            "../../outside/secret.txt",
            "sub/../../outside/secret.txt",
            "./../outside/secret.txt",
        ] {
            // Straight to the host: open-at under the preopen.
            let report = call(&runtime, "read_at", json!({ "dir": guest, "path": path })).await;
            let text = answer(&report);
            assert!(failed(&report) && !text.contains("secret"), "{guest} {path}: {text}");
            // Through the guest's libc.
            let report = call(&runtime, "read_text", json!({ "path": format!("{guest}/{path}") })).await;
            let text = answer(&report);
            assert!(failed(&report) && !text.contains("secret"), "{guest}/{path}: {text}");
        }
        for path in ["../planted.txt", "relative/planted.txt", "absolute/planted.txt"] {
            let report = call(&runtime, "write_at", json!({ "dir": guest, "path": path, "text": "x" })).await;
            assert!(failed(&report), "{guest} {path}: {}", answer(&report));
            let report =
                call(&runtime, "write_text", json!({ "path": format!("{guest}/{path}"), "text": "x" })).await;
            assert!(failed(&report), "{guest}/{path}: {}", answer(&report));
        }
    }
    assert!(!layout.root.join("planted.txt").exists());
    assert!(!outside.join("planted.txt").exists());
    // Links a guest makes in a writable mount point down only.
    for target in ["../outside", "..", "a/../../x", "/etc/passwd"] {
        let report =
            call(&runtime, "symlink", json!({ "dir": "/mnt/rw", "target": target, "link": "escape" })).await;
        assert!(answer(&report).contains("not-permitted"), "{target}: {}", answer(&report));
        assert!(std::fs::symlink_metadata(layout.rw.join("escape")).is_err(), "{target} was linked");
    }
}

/// A symlink the host left in a writable mount that climbs (`a/b/l -> ../../inside.txt`,
/// as in a git checkout) leads out of the mount once moved up: a guest may neither rename
/// it nor link it elsewhere. Links that point down move freely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_climbing_symlink_the_host_left_cannot_be_moved_or_linked_elsewhere() {
    let layout = Layout::new("climbing-link");
    std::fs::create_dir_all(layout.rw.join("a/b")).unwrap();
    std::fs::write(layout.rw.join("inside.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("../../inside.txt", layout.rw.join("a/b/climbing")).unwrap();
    std::os::unix::fs::symlink("inside.txt", layout.rw.join("down")).unwrap();
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    for tool in ["hard_link", "rename"] {
        let moved = json!({ "from": "/mnt/rw/a/b/climbing", "to": "/mnt/rw/moved" });
        let report = call(&runtime, tool, moved).await;
        assert!(failed(&report), "{tool}: {}", answer(&report));
        assert!(std::fs::symlink_metadata(layout.rw.join("moved")).is_err(), "{tool} moved it up");
    }
    assert_eq!(std::fs::read_link(layout.rw.join("a/b/climbing")).unwrap(), Path::new("../../inside.txt"));
    let report = call(&runtime, "rename", json!({ "from": "/mnt/rw/down", "to": "/mnt/rw/a/down" })).await;
    assert!(!failed(&report), "{}", answer(&report));
    assert_eq!(std::fs::read_link(layout.rw.join("a/down")).unwrap(), Path::new("inside.txt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_holding_a_climbing_symlink_is_not_moved_up_far_enough_to_lead_out() {
    let layout = Layout::new("climbing-dir");
    // `a/b/d/l` leads to `a/inside.txt`, two levels up from `a/b/d`; `p/q/r/s/l` to the
    // top's `top.txt`, four levels up.
    for directory in ["a/b/d", "a/e", "p/q/r/s", "x"] {
        std::fs::create_dir_all(layout.rw.join(directory)).unwrap();
    }
    std::fs::write(layout.rw.join("a/inside.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("../../inside.txt", layout.rw.join("a/b/d/l")).unwrap();
    std::os::unix::fs::symlink("../../../../top.txt", layout.rw.join("p/q/r/s/l")).unwrap();
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    let moves = [
        // At the top, `d/l` would lead above the mount.
        ("a/b/d", "d", false),
        // Beside where it was: not walked.
        ("a/b/d", "a/e/d", true),
        // One level up: `a/d/l` then leads to the top's `inside.txt`, still inside.
        ("a/e/d", "a/d", true),
        ("a/d", "d", false),
        // A directory that holds one, further down: `q/r/s/l` would climb above the top.
        ("p/q", "q", false),
        ("p", "x/p", true),
        ("x/p/q", "x/q", true),
    ];
    for (from, to, allowed) in moves {
        let renamed = json!({ "from": format!("/mnt/rw/{from}"), "to": format!("/mnt/rw/{to}") });
        let report = call(&runtime, "rename", renamed).await;
        assert_eq!(!failed(&report), allowed, "{from} to {to}: {}", answer(&report));
    }
    assert_eq!(std::fs::read_link(layout.rw.join("a/d/l")).unwrap(), Path::new("../../inside.txt"));
    assert!(layout.rw.join("x/q/r/s/l").symlink_metadata().is_ok());
    for refused in ["d", "q"] {
        assert!(layout.rw.join(refused).symlink_metadata().is_err(), "{refused} is there");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_moved_into_another_grant_carries_no_link_that_climbs_out_of_it() {
    let layout = Layout::new("climbing-across");
    let other = layout.root.join("rw2");
    for directory in [layout.rw.join("a/d"), layout.rw.join("a/e"), other.join("sub")] {
        std::fs::create_dir_all(directory).unwrap();
    }
    // `a/d/l` leads to `a/x`, out of `d`; `a/e/l` leads down, into `e`.
    std::os::unix::fs::symlink("../x", layout.rw.join("a/d/l")).unwrap();
    std::os::unix::fs::symlink("inside", layout.rw.join("a/e/l")).unwrap();
    let mut options = layout.options(None);
    options.mounts.push(mount(&other, "/mnt/rw2", true, None));
    let runtime = runtime_with(options).await.unwrap();
    let moved =
        |from: &str, to: &str| json!({ "from": format!("/mnt/rw/{from}"), "to": format!("/mnt/rw2/{to}") });
    // At the same depth in the other grant, `../x` would lead to what that grant holds.
    let report = call(&runtime, "rename", moved("a/d", "sub/d")).await;
    assert!(failed(&report), "moved across: {}", answer(&report));
    assert!(layout.rw.join("a/d/l").symlink_metadata().is_ok());
    let report = call(&runtime, "rename", moved("a/e", "sub/e")).await;
    assert!(!failed(&report), "{}", answer(&report));
    assert_eq!(std::fs::read_link(other.join("sub/e/l")).unwrap(), Path::new("inside"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_is_opened_once_so_a_swapped_path_leads_nowhere() {
    let layout = Layout::new("swap");
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    let elsewhere = layout.root.join("outside");
    std::fs::rename(&layout.ro, layout.root.join("ro-moved")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &layout.ro).unwrap();
    assert_eq!(answer(&call(&runtime, "read_text", json!({ "path": "/ro/readme.txt" })).await), "read me");
    let report = call(&runtime, "read_text", json!({ "path": "/ro/secret.txt" })).await;
    assert!(failed(&report), "reached the swapped path: {}", answer(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mounts_are_load_errors_that_say_what_is_wrong() {
    let layout = Layout::new("bad");
    let missing = layout.root.join("no-such-dir");
    let file = layout.ro.join("readme.txt");
    let cases: Vec<(Vec<Mount>, String)> = vec![
        (
            vec![mount(&missing, "/m", false, None)],
            format!("the host path {} does not exist", missing.display()),
        ),
        (vec![mount(&file, "/m", false, None)], "is not a directory".into()),
        (vec![mount(&layout.ro, "m", false, None)], "is not absolute".into()),
        (vec![mount(&layout.ro, "/a/../m", false, None)], "may not hold `..`".into()),
        (
            vec![mount(&layout.ro, "/m", false, None), mount(&layout.rw, "/m/", true, None)],
            "two grants are mounted at /m".into(),
        ),
        (vec![mount(&layout.rw, "/data", true, None)], "two grants are mounted at /data".into()),
        (vec![mount(&layout.ro, "/m", false, Some(1 << 20))], "has a quota_mb".into()),
        // A writable grant inside or around another of the same component's.
        (vec![mount(&layout.data.join(".."), "/m", false, None)], "overlaps".into()),
        (vec![mount(&layout.ro, "/a", true, None), mount(&layout.ro, "/b", false, None)], "overlaps".into()),
        // The kernel's trees, and what holds them: the server's environment and memory.
        (vec![mount(Path::new("/proc"), "/m", false, None)], "is or holds /proc".into()),
        (vec![mount(Path::new("/proc/self"), "/m", false, None)], "is or holds /proc".into()),
        (vec![mount(Path::new("/"), "/m", false, None)], "is or holds /proc".into()),
        (vec![mount(Path::new("/dev"), "/m", false, None)], "is or holds /dev".into()),
        (vec![mount(Path::new("/sys/kernel"), "/m", false, None)], "is or holds /sys".into()),
    ];
    for (mounts, expected) in cases {
        let options = ComponentOptions {
            data_dir: Some(layout.data.clone()),
            mounts: mounts.clone(),
            ..Default::default()
        };
        let error = runtime_with(options).await.err().unwrap_or_else(|| panic!("{mounts:?} loaded"));
        assert!(error.problem.contains(&expected), "{mounts:?}: {error}");
    }
    // Nor is a data directory one of the kernel's trees.
    for system in ["/proc/self", "/dev"] {
        let options = ComponentOptions { data_dir: Some(system.into()), ..Default::default() };
        let error =
            runtime_with(options).await.err().unwrap_or_else(|| panic!("a data_dir of {system} loaded"));
        assert!(error.problem.contains("is or holds /"), "{system}: {error}");
    }
    // Two read-only mounts of one directory are fine.
    let options = ComponentOptions {
        mounts: vec![mount(&layout.ro, "/a", false, None), mount(&layout.ro, "/b", false, None)],
        ..Default::default()
    };
    runtime_with(options).await.unwrap();
}

/// Each of `refused`, the example tools' grants, is refused for overlapping the hostile
/// component's.
async fn refused_as_overlapping_hostile(
    runtime: &mut Runtime,
    refused: impl IntoIterator<Item = ComponentOptions>,
) {
    let tools = cordon::paths::example_tools();
    for options in refused {
        let shown = format!("{:?} {:?}", options.data_dir, options.mounts);
        let error = runtime.load_file(&tools, options).await.unwrap_err();
        assert!(
            error.problem.contains("overlaps") && error.problem.contains("component hostile"),
            "{shown}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_grant_overlapping_another_component_s_is_refused() {
    let layout = Layout::new("overlap");
    let mut runtime = runtime_with(layout.options(None)).await.unwrap();
    let refused = [
        // A read-only view into another's writable mount, or around it.
        ComponentOptions { mounts: vec![mount(&layout.rw, "/x", false, None)], ..Default::default() },
        ComponentOptions { mounts: vec![mount(&layout.root, "/x", false, None)], ..Default::default() },
        // A writable mount over another's read-only one, or its data directory.
        ComponentOptions { mounts: vec![mount(&layout.ro, "/x", true, None)], ..Default::default() },
        ComponentOptions { data_dir: Some(layout.ro.join("inner")), ..Default::default() },
        ComponentOptions { mounts: vec![mount(&layout.data, "/x", false, None)], ..Default::default() },
    ];
    refused_as_overlapping_hostile(&mut runtime, refused).await;
    // Read-only mounts of the same directory may be shared.
    let options =
        ComponentOptions { mounts: vec![mount(&layout.ro, "/shared", false, None)], ..Default::default() };
    runtime.load_file(&cordon::paths::example_tools(), options).await.unwrap();
}

/// The compile cache holds native code the server runs: no guest may be granted to write
/// inside or around it, however the path reaches it (here through a symlink); reading
/// around it is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_grant_inside_or_around_the_compile_cache_is_refused() {
    let layout = Layout::new("cache-grant");
    let cache = layout.root.join("state/cache");
    let via_link = layout.root.join("link-to-state");
    std::os::unix::fs::symlink(layout.root.join("state"), &via_link).unwrap();
    let mut settings = common::settings(4);
    settings.engine.cache_dir = Some(cache.clone());
    let load = |options: ComponentOptions| {
        let settings = settings.clone();
        async move {
            let mut runtime = Runtime::new(settings).unwrap();
            let options = ComponentOptions { limits: common::quick_limits(), ..options };
            runtime.load_file(&hostile(), options).await
        }
    };
    // Made at start, for the server's user alone.
    drop(Runtime::new(settings.clone()).unwrap());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);
    std::fs::create_dir_all(cache.join("inner")).unwrap();
    for options in [
        ComponentOptions { mounts: vec![mount(&layout.root, "/m", true, None)], ..Default::default() },
        ComponentOptions { mounts: vec![mount(&via_link, "/m", true, None)], ..Default::default() },
        ComponentOptions {
            mounts: vec![mount(&cache.join("inner"), "/m", true, None)],
            ..Default::default()
        },
        ComponentOptions { data_dir: Some(cache.join("data")), ..Default::default() },
    ] {
        let shown = format!("{:?} {:?}", options.data_dir, options.mounts);
        let error = load(options).await.expect_err(&shown);
        assert!(error.problem.contains("inside or around the compile cache"), "{shown}: {error}");
    }
    let read_only =
        ComponentOptions { mounts: vec![mount(&via_link, "/m", false, None)], ..Default::default() };
    load(read_only).await.unwrap();
    load(layout.options(None)).await.unwrap();
}

/// What the server reads is no guest's to change: `cordon check` refuses a writable grant
/// around the config file (a guest could grant itself anything at the next reload) and
/// any grant, even read-only, around a secret file; a read-only one around the config
/// loads.
#[test]
fn a_grant_around_the_config_to_write_or_around_a_secret_file_is_refused() {
    let layout = Layout::new("server-files");
    let secrets = fresh_dir("server-files-secrets");
    std::fs::write(secrets.join("token"), "s3cr3t\n").unwrap();
    let (secrets, token) = (secrets.display().to_string(), secrets.join("token").display().to_string());
    let hostile = hostile().display().to_string();
    let check = |mount: &str| {
        let config = write_config(
            &layout.root,
            &format!(
                "[[components]]\npath = {hostile:?}\nsecrets = {{ TOKEN = {{ file = {token:?} }} }}\n\
                 [[components.mounts]]\n{mount}\nguest = \"/m\"\n"
            ),
        );
        run_cordon(&["check", "--config", config.to_str().unwrap()], Duration::from_secs(60))
    };
    let (_, err, ok) = check("host = \".\"\nmode = \"rw\"");
    assert!(!ok && err.contains("cordon.toml, which the server reads"), "{err}");
    let (_, err, ok) = check(&format!("host = {secrets:?}\nmode = \"ro\""));
    assert!(!ok && err.contains("a secret file"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let (out, err, ok) = check("host = \"ro\"\nmode = \"rw\"");
    assert!(ok, "{out}\n{err}");
    let (out, err, ok) = check("host = \".\"\nmode = \"ro\"");
    assert!(ok, "read-only around the config: {out}\n{err}");
    // Named through the data directory (`data/../cordon.toml`): the directory is a step on
    // the way, not where the config lies.
    let config =
        write_config(&layout.root, &format!("[[components]]\npath = {hostile:?}\ndata_dir = \"data\"\n"));
    let through_data = layout.data.join("..").join(config.file_name().unwrap());
    let (out, err, ok) =
        run_cordon(&["check", "--config", through_data.to_str().unwrap()], Duration::from_secs(60));
    assert!(ok, "{out}\n{err}");

    // A config holding its sealing key is a secret file: no grant may hold it.
    let config = layout.root.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ncache = false\nrequest_state_key = \"{}\"\n\n[[components]]\npath = {hostile:?}\n\
             [[components.mounts]]\nhost = \".\"\nmode = \"ro\"\nguest = \"/m\"\n",
            "ab".repeat(32)
        ),
    )
    .unwrap();
    let (_, err, ok) = run_cordon(&["check", "--config", config.to_str().unwrap()], Duration::from_secs(60));
    assert!(!ok && err.contains("cordon.toml, a secret file"), "{err}");

    // The config reached through a symlink that lies in a writable grant: the guest could
    // point the link at a config of its own.
    let elsewhere = fresh_dir("server-files-real");
    std::os::unix::fs::symlink(&elsewhere, layout.rw.join("link")).unwrap();
    let rw = layout.rw.display().to_string();
    let linked = write_config(
        &elsewhere,
        &format!(
            "[[components]]\npath = {hostile:?}\n[[components.mounts]]\nhost = {rw:?}\nmode = \"rw\"\nguest = \"/m\"\n"
        ),
    );
    let through_link = layout.rw.join("link").join(linked.file_name().unwrap());
    let (_, err, ok) =
        run_cordon(&["check", "--config", through_link.to_str().unwrap()], Duration::from_secs(60));
    assert!(!ok && err.contains("which the server reads"), "{err}");
}

/// A reload's config may name a secret file inside a grant of a component it keeps as
/// it was: that component is dropped (its guests could read the new secret), not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_drops_a_component_whose_grant_now_holds_a_secret_file() {
    let layout = Layout::new("secret-at-reload");
    let source = || ComponentSource {
        name: "hostile".into(),
        path: hostile(),
        embedded: None,
        options: ComponentOptions { limits: common::quick_limits(), ..layout.options(None) },
    };
    let runtime = Runtime::new(common::settings(4)).unwrap();
    assert!(runtime.reload(vec![source()]).await.failed.is_empty());
    std::fs::write(layout.ro.join("token"), "s3cr3t").unwrap();
    runtime.protect_files(&[], &[layout.ro.join("token")]);
    let report = runtime.reload(vec![source()]).await;
    let problems: Vec<&str> = report.failed.iter().map(|error| error.problem.as_str()).collect();
    assert!(matches!(problems[..], [problem] if problem.contains("token, a secret file")), "{problems:?}");
    assert_eq!(report.removed, ["hostile"]);
    assert!(runtime.snapshot().tool_for(None, "read_text").is_none());
}

/// A component whose file lies inside another's writable grant is refused, at a reload
/// too (where the component with the grant stays, and wins: it is served): its guests
/// could replace the code the new one runs, with the new one's grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_whose_file_another_may_write_is_refused_at_reload() {
    let layout = Layout::new("file-in-grant");
    let planted = layout.rw.join("tools.wasm");
    std::fs::copy(cordon::paths::example_tools(), &planted).unwrap();
    let source = |name: &str, path: PathBuf, options: ComponentOptions| ComponentSource {
        name: name.into(),
        path,
        embedded: None,
        options: ComponentOptions { limits: common::quick_limits(), ..options },
    };
    let writer = || source("hostile", hostile(), layout.options(None));
    let runtime = Runtime::new(common::settings(4)).unwrap();
    assert!(runtime.reload(vec![writer()]).await.failed.is_empty());
    let refused = |report: &cordon::runtime::ReloadReport| {
        let problems: Vec<&str> = report.failed.iter().map(|error| error.problem.as_str()).collect();
        assert!(
            matches!(problems[..], [problem] if problem.contains("the file of component tools is inside")
                && problem.contains("of component hostile")),
            "{problems:?}"
        );
        assert_eq!(report.unchanged, ["hostile"]);
    };
    let tools = |path: &Path| source("tools", path.to_owned(), ComponentOptions::default());
    refused(&runtime.reload(vec![writer(), tools(&planted)]).await);

    // Served from elsewhere, then the same bytes moved there: no longer served.
    let report = runtime.reload(vec![writer(), tools(&cordon::paths::example_tools())]).await;
    assert_eq!(report.loaded, ["tools"]);
    let report = runtime.reload(vec![writer(), tools(&planted)]).await;
    refused(&report);
    assert_eq!(report.removed, ["tools"]);
}

/// Sum of the sizes of the regular files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let metadata = entry.unwrap().metadata().unwrap();
            if metadata.is_file() { metadata.len() } else { 0 }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_mount_s_quota_is_enforced_at_every_write() {
    let layout = Layout::new("quota");
    // 1,000 bytes are there before the component loads.
    std::fs::write(layout.rw.join("existing.bin"), vec![b'e'; 1000]).unwrap();
    let quota = 100_000u64;
    let runtime = runtime_with(layout.options(Some(quota))).await.unwrap();
    let text = |bytes: usize| "q".repeat(bytes);
    let write = |path: &str, bytes: usize| json!({ "path": format!("/mnt/rw/{path}"), "text": text(bytes) });

    // Streams (std::fs::write): 60,000 fit, 60,000 more do not, and nothing past the
    // quota lands on disk.
    assert!(!failed(&call(&runtime, "write_text", write("a.txt", 60_000)).await));
    let refused = call(&runtime, "write_text", write("b.txt", 60_000)).await;
    assert!(failed(&refused), "{}", answer(&refused));
    assert!(answer(&refused).to_lowercase().contains("quota"), "{}", answer(&refused));
    assert!(bytes_under(&layout.rw) <= quota, "{} bytes on disk", bytes_under(&layout.rw));

    // Rewriting a file (truncate, then write) gives its old bytes back first.
    for _ in 0..5 {
        let report = call(&runtime, "write_text", write("a.txt", 60_000)).await;
        assert!(!failed(&report), "{}", answer(&report));
    }
    // descriptor.write: an overwrite in place grows nothing and passes; growth past the
    // quota does not.
    let overwrite =
        call(&runtime, "write_at", json!({ "dir": "/mnt/rw", "path": "a.txt", "text": text(100) })).await;
    assert_eq!(answer(&overwrite), "wrote 100 bytes");
    let big = json!({ "dir": "/mnt/rw", "path": "c.txt", "text": text(50_000) });
    assert!(answer(&call(&runtime, "write_at", big.clone()).await).contains("quota"));
    // Removing a file frees its bytes (and its name). Four names (existing.bin, a.txt
    // gone, b.txt and c.txt made empty by the refused writes) hold 12,288 + 1,000.
    call(&runtime, "remove", json!({ "path": "/mnt/rw/a.txt" })).await;
    assert_eq!(answer(&call(&runtime, "write_at", big).await), "wrote 50000 bytes");
    let report = call(&runtime, "write_text", write("b.txt", 30_000)).await;
    assert!(!failed(&report), "{}", answer(&report));
    assert!(failed(&call(&runtime, "write_text", write("d.txt", 10_000)).await), "past the quota");
    assert!(bytes_under(&layout.rw) <= quota, "{} bytes on disk", bytes_under(&layout.rw));
    // The data directory has a quota of its own (1 GiB by default).
    let report =
        call(&runtime, "write_text", json!({ "path": "/data/big.txt", "text": text(200_000) })).await;
    assert!(!failed(&report), "{}", answer(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lengthening_renaming_and_linking_cannot_get_around_a_quota() {
    let layout = Layout::new("quota-paths");
    let quota = 100_000u64;
    let runtime = runtime_with(layout.options(Some(quota))).await.unwrap();
    let set_size = |path: &str, size: u64| json!({ "path": path, "size": size });
    // set-size: growth is charged like a write, shrinking gives bytes back.
    let report = call(&runtime, "set_size", set_size("/mnt/rw/sparse", 10 << 20)).await;
    assert!(answer(&report).to_lowercase().contains("quota"), "{}", answer(&report));
    assert_eq!(std::fs::metadata(layout.rw.join("sparse")).unwrap().len(), 0);
    assert!(!failed(&call(&runtime, "set_size", set_size("/mnt/rw/sparse", 90_000)).await));
    assert!(failed(&call(&runtime, "set_size", set_size("/mnt/rw/other", 20_000)).await));
    assert!(!failed(&call(&runtime, "set_size", set_size("/mnt/rw/sparse", 70_000)).await));
    assert!(!failed(&call(&runtime, "set_size", set_size("/mnt/rw/other", 20_000)).await));
    // A rename out of the mount (to /data), or into it, would move bytes past the count.
    for (from, to) in [("/mnt/rw/sparse", "/data/sparse"), ("/data/in", "/mnt/rw/in")] {
        call(&runtime, "write_text", json!({ "path": "/data/in", "text": "in" })).await;
        let report = call(&runtime, "rename", json!({ "from": from, "to": to })).await;
        assert!(failed(&report), "{from} -> {to}: {}", answer(&report));
    }
    assert!(layout.rw.join("sparse").is_file());
    // A rename over a file in the mount frees the file it replaces.
    let report = call(&runtime, "rename", json!({ "from": "/mnt/rw/other", "to": "/mnt/rw/sparse" })).await;
    assert!(!failed(&report), "{}", answer(&report));
    let report = call(&runtime, "rename", json!({ "from": "/mnt/rw/sparse", "to": "/mnt/rw/sparse" })).await;
    assert!(!failed(&report), "a rename onto itself frees nothing: {}", answer(&report));
    // One file of 20,000 bytes is left, and its name (4,096): a new file's name and 71,808
    // bytes fit, and not one byte past them.
    assert!(!failed(&call(&runtime, "set_size", set_size("/mnt/rw/last", 71_808)).await));
    assert!(failed(&call(&runtime, "set_size", set_size("/mnt/rw/last", 71_809)).await));
    assert!(bytes_under(&layout.rw) <= quota, "{} bytes on disk", bytes_under(&layout.rw));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_at_once_share_a_quota_and_never_pass_it_together() {
    let layout = Layout::new("quota-race");
    let quota = 200_000u64;
    let runtime = std::sync::Arc::new(runtime_with(layout.options(Some(quota))).await.unwrap());
    let calls = (0..4).map(|index| {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let arguments = json!({ "path": format!("/mnt/rw/{index}.txt"), "text": "r".repeat(90_000) });
            !failed(&call(&runtime, "write_text", arguments).await)
        })
    });
    let mut succeeded = 0;
    for call in calls {
        succeeded += usize::from(call.await.unwrap());
    }
    assert_eq!(succeeded, 2, "two of four 90,000-byte files fit in 200,000 bytes");
    assert!(bytes_under(&layout.rw) <= quota, "{} bytes on disk", bytes_under(&layout.rw));
}

/// A file whose last name is removed while the guest still holds it open keeps its blocks
/// on disk, and so its bytes stay counted until nothing holds it: a guest filling the
/// quota, holding the file and removing it (unlinked, or renamed over) gets `quota` at the
/// same point as one that kept the names. Once its call ends, the files are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_file_still_held_open_counts_against_the_quota_until_released() {
    let layout = Layout::new("quota-orphans");
    let runtime = runtime_with(layout.options(Some(1 << 20))).await.unwrap();
    // Three files of 300 KiB (and their names) fit in 1 MiB; a fourth does not.
    for by_rename in [false, true] {
        let arguments = json!({ "dir": "/mnt/rw", "count": 8, "kib": 300, "by_rename": by_rename });
        let report = call(&runtime, "hold_unlinked", arguments).await;
        let said = answer(&report);
        assert!(
            said.starts_with("filled 3, then") && said.contains("quota"),
            "by_rename {by_rename}: {said}"
        );
    }
    // Nothing holds them now: all of the quota is there again.
    let arguments = json!({ "dir": "/mnt/rw", "count": 3, "kib": 300 });
    assert_eq!(answer(&call(&runtime, "hold_unlinked", arguments).await), "filled 3");
    // Removed and held by nothing, a file's bytes are back for the next call.
    for index in 0..4 {
        let path = format!("/mnt/rw/{index}.txt");
        let report =
            call(&runtime, "write_text", json!({ "path": path, "text": "w".repeat(300 << 10) })).await;
        assert!(!failed(&report), "{}", answer(&report));
        assert!(!failed(&call(&runtime, "remove", json!({ "path": path })).await));
    }
}

/// Every name a guest makes (an empty file, a directory, a symlink) counts one 4 KiB block
/// against its grant's quota, so a quota bounds the host's inodes as well as its bytes;
/// removing or renaming over a name gives it back. The data directory has a quota of its
/// own (`data_quota_mb`), counted the same way, and a later load measures what is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_name_counts_against_a_quota_and_the_data_directory_has_one() {
    let layout = Layout::new("quota-names");
    // 64 KiB: sixteen names of no bytes.
    let quota = 64 << 10;
    let options = ComponentOptions { data_quota_bytes: quota, ..layout.options(Some(quota)) };
    let runtime = runtime_with(options.clone()).await.unwrap();

    // Empty files in the data directory: `/data/many` and fifteen files in it, no more.
    let report = call(&runtime, "make_files", json!({ "count": 1000 })).await;
    assert!(answer(&report).to_lowercase().contains("quota"), "{}", answer(&report));
    assert_eq!(names_under(&layout.data), 16);
    // Two names removed free 8,192: a name and 4,096 bytes fit, then not even an empty file.
    for index in 0..2 {
        let path = format!("/data/many/entry-with-a-long-name-{index:08}");
        assert!(!failed(&call(&runtime, "remove", json!({ "path": path })).await));
    }
    let report = call(&runtime, "write_text", json!({ "path": "/data/x", "text": "x".repeat(4096) })).await;
    assert!(!failed(&report), "{}", answer(&report));
    let report = call(&runtime, "write_text", json!({ "path": "/data/y", "text": "" })).await;
    assert!(answer(&report).to_lowercase().contains("quota"), "{}", answer(&report));
    assert_eq!(names_under(&layout.data), 15);

    // Symlinks in a read-write mount: sixteen, then `quota`.
    let link = |name: String| json!({ "dir": "/mnt/rw", "target": "t", "link": name });
    for index in 0..16 {
        let report = call(&runtime, "symlink", link(format!("l{index}"))).await;
        assert_eq!(answer(&report), format!("linked l{index} -> t"));
    }
    let refused = call(&runtime, "symlink", link("l16".into())).await;
    assert!(answer(&refused).contains("quota"), "{}", answer(&refused));
    // Removing one gives its name back; a rename over another gives that one's back.
    assert!(!failed(&call(&runtime, "remove", json!({ "path": "/mnt/rw/l0" })).await));
    assert_eq!(answer(&call(&runtime, "symlink", link("l16".into())).await), "linked l16 -> t");
    let report = call(&runtime, "rename", json!({ "from": "/mnt/rw/l1", "to": "/mnt/rw/l2" })).await;
    assert!(!failed(&report), "{}", answer(&report));
    assert_eq!(answer(&call(&runtime, "symlink", link("l17".into())).await), "linked l17 -> t");
    assert!(answer(&call(&runtime, "symlink", link("l18".into())).await).contains("quota"));
    assert_eq!(names_under(&layout.rw), 16);

    // Loaded again, the component finds both grants full.
    drop(runtime);
    let runtime = runtime_with(options).await.unwrap();
    assert!(answer(&call(&runtime, "symlink", link("l18".into())).await).contains("quota"));
    let report = call(&runtime, "write_text", json!({ "path": "/data/y", "text": "" })).await;
    assert!(answer(&report).to_lowercase().contains("quota"), "{}", answer(&report));
}

/// Every name under `dir`, at any depth (symlinks not followed).
fn names_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let inside = if entry.file_type().unwrap().is_dir() { names_under(&entry.path()) } else { 0 };
            1 + inside
        })
        .sum()
}

/// Measuring a quota walks the tree in its directory, which a guest may have filled (a name
/// per 4 KiB of quota), and a reload measures it beside calls being served: the walk runs
/// on the blocking pool, never on a thread that serves calls. On a one-thread runtime a
/// task ticking beside the load is never held up for as long as a walk takes.
#[test]
fn measuring_a_quota_never_holds_up_the_thread_that_serves_calls() {
    let layout = Layout::new("quota-walk");
    for dir in 0..150 {
        let dir = layout.rw.join(format!("d{dir}"));
        std::fs::create_dir(&dir).unwrap();
        for file in 0..1000 {
            std::fs::File::create(dir.join(format!("f{file}"))).unwrap();
        }
    }
    // What a walk of this tree takes here; the load's measurement, which also reads each
    // name's size, takes about ten times as long (250 ms against 25 for 100,000 names).
    let started = std::time::Instant::now();
    assert_eq!(names_under(&layout.rw), 150_150);
    let walk = started.elapsed();

    let threads = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let longest_gap = threads.block_on(async {
        let mut runtime = Runtime::new(common::settings(4)).unwrap();
        let loaded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ticking, started) = tokio::sync::oneshot::channel();
        let ticker = tokio::spawn({
            let loaded = loaded.clone();
            async move {
                let (mut longest, mut last) = (Duration::ZERO, std::time::Instant::now());
                ticking.send(()).unwrap();
                while !loaded.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::task::yield_now().await;
                    longest = longest.max(last.elapsed());
                    last = std::time::Instant::now();
                }
                longest
            }
        });
        started.await.unwrap();
        let options = ComponentOptions { limits: common::quick_limits(), ..layout.options(Some(1 << 30)) };
        runtime.load_file(&hostile(), options).await.unwrap();
        loaded.store(true, std::sync::atomic::Ordering::Relaxed);
        ticker.await.unwrap()
    });
    std::fs::remove_dir_all(&layout.root).unwrap();
    assert!(walk > Duration::from_millis(10), "the tree is too small to tell: a walk took {walk:?}");
    // Held by the measurement, the thread would wait about ten walks; a third of that
    // leaves room for a busy machine's scheduling.
    assert!(longest_gap < 3 * walk, "the serving thread was held up {longest_gap:?}; a walk takes {walk:?}");
}

/// A FIFO in a mount (a guest cannot make one; a host process can) is refused, not opened:
/// with no writer, opening it would block a host thread that no stop frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_a_mount_is_refused_not_opened() {
    let layout = Layout::new("special-files");
    let made = std::process::Command::new("mkfifo").arg(layout.ro.join("pipe")).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    let report = call(&runtime, "read_at", json!({ "dir": "/ro", "path": "pipe" })).await;
    let refusal = answer(&report).to_lowercase();
    assert!(refusal.contains("open refused") && refusal.contains("access"), "{refusal}");
    // Through libc's path resolution alike; and a file beside it still opens.
    let report = call(&runtime, "read_text", json!({ "path": "/ro/pipe" })).await;
    assert!(failed(&report), "{}", answer(&report));
    let report = call(&runtime, "read_at", json!({ "dir": "/ro", "path": "readme.txt" })).await;
    assert_eq!(answer(&report), "read me");
}

/// A FIFO a host process left in a writable mount is refused, never opened; a guest that
/// keeps turning a file into a link to it, beside a call that keeps opening the name, must
/// not slip the FIFO in between the host's look at the name and its open (which would
/// block a host thread for good, and the opening call with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_swapped_for_a_link_to_a_fifo_is_never_opened_between_look_and_open() {
    use std::os::unix::fs::OpenOptionsExt;
    let layout = Layout::new("fifo-swap");
    for pipe in [layout.rw.join("pipe"), layout.ro.join("pipe")] {
        let made = std::process::Command::new("mkfifo").arg(pipe).status().unwrap();
        assert!(made.success(), "mkfifo failed");
    }
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    let ms = 1500;
    let swapping =
        call(&runtime, "swap_loop", json!({ "dir": "/mnt/rw", "name": "p", "target": "pipe", "ms": ms }));
    let opening = call(&runtime, "open_loop", json!({ "dir": "/mnt/rw", "name": "p", "ms": ms }));
    let (swapped, opened) =
        tokio::time::timeout(Duration::from_secs(15), async { tokio::join!(swapping, opening) })
            .await
            .unwrap_or_else(|_| {
                // A reader left blocked in `open` is released by a writer.
                let release = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(layout.rw.join("pipe"));
                drop(release);
                panic!("a call never ended: an open blocked on the FIFO")
            });
    let (swapped, opened) = (answer(&swapped), answer(&opened));
    assert!(swapped.ends_with(" swaps") && !swapped.starts_with("0 "), "{swapped}");
    assert!(opened.contains(" opened, ") && !opened.contains(", 0 refused"), "{opened}");
    // A move whose path runs through the FIFO is refused, not opened on the way (the
    // check of a move opens the parents it names).
    for from in ["/mnt/rw/pipe/x", "/ro/pipe/x"] {
        let moved = call(&runtime, "rename", json!({ "from": from, "to": "/mnt/rw/y" }));
        let report = tokio::time::timeout(Duration::from_secs(15), moved).await.unwrap_or_else(|_| {
            for pipe in [layout.rw.join("pipe"), layout.ro.join("pipe")] {
                let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(pipe);
            }
            panic!("renaming {from} blocked on the FIFO")
        });
        assert!(failed(&report), "{}", answer(&report));
    }
}

/// A call of the hostile component as `tenant` (none: a call of no tenant).
async fn call_as(
    runtime: &Runtime,
    tenant: Option<&str>,
    tool: &str,
    arguments: serde_json::Value,
) -> CallReport {
    let view = tenant.map(|tenant| TenantView::new(tenant, ["hostile".to_owned()], None));
    let tools = runtime.snapshot();
    let call = runtime.call_in(&tools, view.as_ref(), tool, &arguments, Default::default());
    call.await.unwrap().run().await
}

/// A tenant's data directory is a name inside the component's, where the component's
/// guests could write while it had no tenants: one left there as a symlink (so that two
/// tenants share a directory, or one leads anywhere) is refused at load, not followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_data_directory_left_as_a_symlink_is_refused() {
    let layout = Layout::new("tenant-symlink");
    std::fs::create_dir(layout.data.join("shared")).unwrap();
    for tenant in ["a", "b"] {
        std::os::unix::fs::symlink("shared", layout.data.join(tenant)).unwrap();
    }
    let options = ComponentOptions { tenants: vec!["a".into(), "b".into()], ..layout.options(None) };
    let error = runtime_with(options).await.err().expect("refused");
    assert!(error.problem.contains("is a symlink"), "{}", error.problem);
}

/// A component's tenants each get a data directory of their own but share its mounts:
/// one quota for all of them (not one each), and every tenant's data directory is a grant
/// another component's may not overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_tenants_share_each_mounts_quota_and_their_data_directories_are_its_grants() {
    let layout = Layout::new("tenant-grants");
    let quota = 100_000u64;
    let options = ComponentOptions { tenants: vec!["a".into(), "b".into()], ..layout.options(Some(quota)) };
    let mut runtime = runtime_with(options).await.unwrap();
    let grow = |path: &str| json!({ "path": format!("/mnt/rw/{path}"), "size": 60_000 });
    let report = call_as(&runtime, Some("a"), "set_size", grow("a")).await;
    assert!(!failed(&report), "{}", answer(&report));
    for (tenant, path) in [(Some("b"), "b"), (None, "shared")] {
        let report = call_as(&runtime, tenant, "set_size", grow(path)).await;
        assert!(answer(&report).to_lowercase().contains("quota"), "{tenant:?}: {}", answer(&report));
    }
    assert!(bytes_under(&layout.rw) <= quota, "{} bytes on disk", bytes_under(&layout.rw));
    assert!(layout.data.join("a").is_dir() && layout.data.join("b").is_dir());

    // Another component's grant over a tenant's data directory, or inside it, is refused.
    let refused = [
        ComponentOptions { mounts: vec![mount(&layout.data, "/x", false, None)], ..Default::default() },
        ComponentOptions { data_dir: Some(layout.data.join("a").join("inner")), ..Default::default() },
    ];
    refused_as_overlapping_hostile(&mut runtime, refused).await;
}

/// A component without a data directory, removed by a reload and added again by the next
/// from a config whose `[[tenants]]` name another tenant, is that tenant's only: the
/// tenant it was started for no longer sees it (its view, read at start, still names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_added_again_by_a_reload_is_seen_only_by_the_tenants_its_new_config_names() {
    let source = |tenants: &[&str]| ComponentSource {
        name: "hostile".into(),
        path: hostile(),
        embedded: None,
        options: ComponentOptions {
            limits: common::quick_limits(),
            tenants: tenants.iter().map(|tenant| (*tenant).to_owned()).collect(),
            ..ComponentOptions::default()
        },
    };
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    assert!(runtime.load_all(vec![source(&["a"])]).await.is_empty());
    let view = TenantView::new("a", ["hostile".to_owned()], None);
    assert!(runtime.snapshot().tool_for(Some(&view), "read_text").is_some());
    assert_eq!(runtime.reload(Vec::new()).await.removed, ["hostile"]);
    assert_eq!(runtime.reload(vec![source(&["b"])]).await.loaded, ["hostile"]);
    let tools = runtime.snapshot();
    assert!(tools.tool_for(Some(&view), "read_text").is_none(), "listed to a tenant it is not for");
    let arguments = json!({ "path": "/etc/hostname" });
    let call = runtime.call_in(&tools, Some(&view), "read_text", &arguments, Default::default());
    assert!(matches!(call.await.err(), Some(CallError::UnknownTool(_))));
}

/// A reload reads `[[tenants]]` no more than a restart would: a component whose new
/// config names no tenant keeps those it was loaded for, each in its own data directory,
/// never the whole one (every tenant's); and one loaded anew for no tenant is not theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_drops_a_components_tenants_never_opens_one_tenants_data_to_another() {
    let layout = Layout::new("tenant-reload");
    let options = ComponentOptions { tenants: vec!["a".into(), "b".into()], ..layout.options(None) };
    let runtime = runtime_with(options).await.unwrap();
    let write = json!({ "path": "/data/mine.txt", "text": "a's" });
    assert!(!failed(&call_as(&runtime, Some("a"), "write_text", write).await));
    std::fs::write(layout.data.join("b/secret.txt"), "b's").unwrap();
    let untenanted = || ComponentSource {
        name: "hostile".into(),
        path: hostile(),
        embedded: None,
        options: ComponentOptions { limits: common::quick_limits(), ..layout.options(None) },
    };
    let report = runtime.reload(vec![untenanted()]).await;
    assert!(report.failed.is_empty() && report.loaded.is_empty(), "{report:?}");
    let read = |path: &str| json!({ "path": path });
    let report = call_as(&runtime, Some("a"), "read_text", read("/data/b/secret.txt")).await;
    assert!(failed(&report), "tenant a read b's file: {}", answer(&report));
    let report = call_as(&runtime, Some("a"), "read_text", read("/data/mine.txt")).await;
    assert_eq!(answer(&report), "a's");

    // Removed, then loaded again for no tenant: tenant a no longer sees it at all.
    assert_eq!(runtime.reload(Vec::new()).await.removed, ["hostile"]);
    assert_eq!(runtime.reload(vec![untenanted()]).await.loaded, ["hostile"]);
    let view = TenantView::new("a", ["hostile".to_owned()], None);
    let tools = runtime.snapshot();
    let arguments = read("/data/b/secret.txt");
    let call = runtime.call_in(&tools, Some(&view), "read_text", &arguments, Default::default());
    assert!(matches!(call.await.err(), Some(CallError::UnknownTool(_))));
    assert!(tools.tool_for(Some(&view), "read_text").is_none(), "listed to a tenant it is not for");
}

/// Run `cordon` with `args` to its end (stdin closed), within `deadline`: its stdout,
/// its stderr and whether it succeeded.
fn run_cordon(args: &[&str], deadline: Duration) -> (String, String, bool) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut out, mut err) = (String::new(), String::new());
        let _ = stdout.read_to_string(&mut out);
        let _ = stderr.read_to_string(&mut err);
        let _ = sender.send((out, err));
    });
    let Ok((out, err)) = receiver.recv_timeout(deadline) else {
        let _ = child.kill();
        panic!("cordon {args:?} did not finish within {deadline:?}");
    };
    let status = child.wait().unwrap();
    (out, err, status.success())
}

fn write_config(dir: &Path, component: &str) -> PathBuf {
    let config = dir.join("cordon.toml");
    std::fs::write(&config, format!("[server]\ncache = false\n\n{component}")).unwrap();
    config
}

#[test]
fn inspect_shows_interfaces_and_grants_but_never_a_secret_s_value() {
    let layout = Layout::new("inspect");
    std::fs::write(layout.root.join("token"), "s3cr3t-from-file\n").unwrap();
    let hostile = hostile().display().to_string();
    let config = write_config(
        &layout.root,
        &format!(
            "[[components]]\npath = {hostile:?}\ndata_dir = \"data\"\ndata_quota_mb = 2\n\
             env = {{ REGION = \"eu-west-value\" }}\n\
             allow_http = [\"https://api.example.com\"]\n\
             secrets = {{ API_TOKEN = {{ file = \"token\" }}, OTHER = {{ env = \"CORDON_TEST_UNSET_VARIABLE\" }} }}\n\
             [[components.mounts]]\nhost = \"ro\"\nguest = \"/ro\"\nmode = \"ro\"\n\
             [[components.mounts]]\nhost = \"rw\"\nguest = \"/mnt/rw\"\nmode = \"rw\"\nquota_mb = 5\n"
        ),
    );
    let (out, err, ok) =
        run_cordon(&["inspect", &hostile, "--config", config.to_str().unwrap()], Duration::from_secs(60));
    assert!(ok, "{out}\n{err}");
    for expected in [
        "imports (with the grants of component hostile in",
        "wasi:filesystem/preopens@",
        "wasi:cli/environment@",
        "cordon:tool/host@0.2.0",
        "exports:",
        "cordon:tool/tool@0.2.0",
        "data_dir:",
        "at /data (quota 2 MiB)",
        "/ro (ro)",
        "/mnt/rw (rw, quota 5 MiB)",
        "env: REGION",
        "secrets: API_TOKEN, OTHER",
        "allow_http: https://api.example.com:443",
    ] {
        assert!(out.contains(expected), "{expected:?} missing from:\n{out}");
    }
    for secret in ["s3cr3t", "eu-west-value"] {
        assert!(!out.contains(secret) && !err.contains(secret), "{secret} shown:\n{out}\n{err}");
    }
    // Without a config: the interfaces only.
    let (out, _, ok) = run_cordon(&["inspect", &hostile], Duration::from_secs(60));
    assert!(ok && out.contains("wasi:cli/environment@") && !out.contains("secrets:"), "{out}");
}

#[test]
fn a_component_importing_http_without_a_grant_is_warned_about_at_load_and_the_environment_is_not() {
    let dir = fresh_dir("warn");
    let hostile = hostile().display().to_string();
    let warning = "imports wasi:http/outgoing-handler but is granted no `allow_http`";
    let config = write_config(&dir, &format!("[[components]]\npath = {hostile:?}\n"));
    let (_, log, ok) =
        run_cordon(&["serve", "--stdio", "--config", config.to_str().unwrap()], Duration::from_secs(60));
    assert!(ok, "{log}");
    let line =
        log.lines().find(|line| line.contains(warning)).unwrap_or_else(|| panic!("no warning in:\n{log}"));
    assert!(line.contains("WARN") && line.contains("hostile"), "{line}");
    // Every std-built component imports the environment: an ungranted one is no news.
    assert!(!log.contains("wasi:cli/environment"), "{log}");
    let config = write_config(
        &dir,
        &format!("[[components]]\npath = {hostile:?}\nallow_http = [\"https://api.example.com\"]\n"),
    );
    let (_, log, ok) =
        run_cordon(&["serve", "--stdio", "--config", config.to_str().unwrap()], Duration::from_secs(60));
    assert!(ok && !log.contains(warning), "{log}");
}

/// A file stream takes at most what `check-write` offers (64 KiB) at once, on a mount
/// without a quota as under one: a larger write traps the guest instead of being held,
/// whole, by the host until written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_stream_write_larger_than_check_write_offers_traps() {
    let layout = Layout::new("stream-write");
    let runtime = runtime_with(layout.options(None)).await.unwrap();
    for dir in ["/mnt/rw", "/data"] {
        let write = |bytes: usize| json!({ "dir": dir, "path": "s.bin", "bytes": bytes });
        assert_eq!(answer(&call(&runtime, "stream_write", write(64 << 10)).await), "wrote 65536 bytes");
        let report = call(&runtime, "stream_write", write(4 << 20)).await;
        match &report.outcome {
            Outcome::Trapped(message) => assert!(message.contains("check_write"), "{dir}: {message}"),
            other => panic!("{dir}: expected a trap, got {other:?}"),
        }
    }
    assert_eq!(
        std::fs::metadata(layout.rw.join("s.bin")).unwrap().len(),
        64 << 10,
        "nothing more was written"
    );
}
