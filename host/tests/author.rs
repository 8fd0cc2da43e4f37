//! For plugin authors: `cordon new` and `cordon build` in a folder outside the repository,
//! the mistakes `cordon build` turns into clear errors, and what a failing guest tells its
//! caller (a panic's message, a file error's missing grant).
//!
//! The Rust project builds into `target/guest-build`, the folder `cargo xtask guests` builds
//! the examples in: the project's `Cargo.lock` starts from the examples' own, so its
//! registry crates (and, on Debian's route, std) are compiled there already and this test
//! compiles the project and its vendored SDK only. Its native `cargo test` builds in
//! `target/guest-native`, which `cargo xtask test` also uses for the example tools' tests.
//!
//! `cordon build`'s cache folder is `target/` here (`CORDON_CACHE_DIR`), so the Python and
//! JavaScript builds use the componentize-py virtualenv and the Node that `cargo xtask
//! guests` installed there (`python-guest-venv`, `js-node`); npm's and pip's own caches
//! make the project's `npm install` and its test virtualenv quick.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{fresh_dir, hostile};
use cordon::runtime::{ComponentOptions, Outcome, Runtime};
use serde_json::json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn cordon(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", repo().join("target/guest-build"))
        .env("CORDON_CACHE_DIR", repo().join("target"))
        .output()
        .unwrap()
}

/// `cordon build` in `project` with no toolchain to be found: nothing on PATH and an empty
/// cache folder.
fn build_without_toolchains(project: &Path, scratch: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
        .current_dir(project)
        .arg("build")
        .env("PATH", scratch.join("no-such-bin"))
        .env("CORDON_CACHE_DIR", scratch.join("empty-cache"))
        .output()
        .unwrap()
}

/// `cordon build` in `project` succeeded: the component it names (the first line), whose
/// file name is `component_name`, and the summary line, which names `toolchain` and `tools`.
fn built_component(project: &Path, component_name: &str, toolchain: &str, tools: &str) -> PathBuf {
    let built = succeeded("cordon build", &cordon(project, &["build"]));
    let component = PathBuf::from(built.lines().next().unwrap());
    assert!(component.is_absolute() && component.ends_with(component_name), "{built}");
    assert!(component.is_file(), "{built}");
    assert!(built.contains(&format!("KiB, built with {toolchain}")), "{built}");
    assert!(built.contains(&format!("; tools: {tools}\n")), "{built}");
    component
}

/// `cordon call` of `tool` succeeded with `text` as its result, and showed `progress` on
/// stderr.
fn call_answers(project: &Path, component: &Path, tool: &str, arguments: &str, text: &str, progress: &str) {
    let call = cordon(project, &["call", component.to_str().unwrap(), tool, arguments]);
    // Not a terminal: the result is one JSON document.
    let result: serde_json::Value = serde_json::from_str(&succeeded("cordon call", &call)).unwrap();
    assert_eq!(result["content"][0]["text"], text, "{result}");
    assert_eq!(result["isError"], false, "{result}");
    let stderr = self::text(&call.stderr);
    assert!(stderr.contains(progress), "progress is shown: {stderr}");
}

fn assert_files(project: &Path, files: &[&str], absent: &[&str]) {
    for file in files {
        assert!(project.join(file).is_file(), "{file} was not written");
    }
    for file in absent {
        assert!(!project.join(file).exists(), "{file} was written");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `output` succeeded, or the test fails showing both of its streams.
fn succeeded(what: &str, output: &Output) -> String {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

/// `output` failed; its stderr.
fn failed(what: &str, output: &Output) -> String {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(!output.status.success(), "{what} succeeded:\n{stdout}\n{stderr}");
    stderr
}

/// `cargo test` in `project`, natively, with the rustup toolchain the tests run under.
fn cargo_test(project: &Path) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        // The outer `cargo test`'s variables would describe the host crate, not the project.
        if key.to_string_lossy().starts_with("CARGO_") {
            command.env_remove(key);
        }
    }
    command
        .current_dir(project)
        .args(["test", "--quiet"])
        .env("CARGO_TARGET_DIR", repo().join("target/guest-native"))
        .output()
        .unwrap()
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

#[test]
fn a_new_rust_project_builds_passes_its_tests_and_answers_a_call() {
    let dir = fresh_dir("author-new");
    assert!(!dir.starts_with(repo()), "the project lies outside the repository");
    let project = dir.join("word-tools");
    succeeded("cordon new", &cordon(&dir, &["new", "word-tools"]));
    for file in ["Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", "cordon.toml", ".gitignore"] {
        assert!(project.join(file).is_file(), "{file} was not written");
    }
    for file in ["vendor/guest-sdk/src/lib.rs", "vendor/guest-sdk/wit/cordon.wit", "vendor/rules/src/lib.rs"]
    {
        assert!(project.join(file).is_file(), "{file} was not vendored");
    }
    assert!(!project.join("build.rs").exists(), "the SDK sets the initial memory itself");
    assert!(!project.join("vendor/guest-sdk/template").exists(), "templates are not vendored");
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"word-tools\""), "{manifest}");
    assert!(failed("a second cordon new", &cordon(&dir, &["new", "word-tools"])).contains("already exists"));

    let built = succeeded("cordon build", &cordon(&project, &["build"]));
    let component = PathBuf::from(built.lines().next().unwrap());
    assert!(component.ends_with("wasm32-wasip2/release/word_tools.wasm"), "{built}");
    assert!(built.contains("KiB, built with") && built.contains("; tools: count"), "{built}");

    let (component_arg, data) = (component.to_str().unwrap(), dir.join("data"));
    let arguments = r#"{"to": 3, "pause_ms": 1}"#;
    let call =
        cordon(&project, &["call", component_arg, "count", arguments, "--data-dir", data.to_str().unwrap()]);
    // Not a terminal: the result is one JSON document.
    let result: serde_json::Value = serde_json::from_str(&succeeded("cordon call", &call)).unwrap();
    assert_eq!(result["content"][0]["text"], "counted to 3", "{result}");
    let stderr = text(&call.stderr);
    assert!(stderr.contains("3 of 3"), "progress is shown: {stderr}");
    // The SDK's build script gave the component 2 MiB up front (the project has no build.rs).
    assert!(!stderr.contains("grew the component's memory"), "{stderr}");

    let tests = cargo_test(&project);
    let output = format!("{}{}", text(&tests.stdout), text(&tests.stderr));
    assert!(tests.status.success(), "the project's own tests fail:\n{output}");
    assert!(output.contains("3 passed"), "{output}");

    // A tool name the host refuses: the project's test says so, and so does `cordon build`.
    let lib = project.join("src/lib.rs");
    edit(&lib, r#"Tool::new("count","#, r#"Tool::new("count it","#);
    let tests = cargo_test(&project);
    let output = format!("{}{}", text(&tests.stdout), text(&tests.stderr));
    assert!(!tests.status.success(), "{output}");
    assert!(output.contains(r#"tool "count it": a name may only use"#), "{output}");
    let refused = failed("cordon build of a bad name", &cordon(&project, &["build"]));
    assert!(refused.contains("the server would not load it"), "{refused}");
    assert!(refused.contains(r#"tool "count it": a name may only use"#), "{refused}");
    edit(&lib, r#"Tool::new("count it","#, r#"Tool::new("count","#);

    // No export_plugin!: the component exports nothing, and the error says what to add.
    edit(&lib, "cordon_guest::export_plugin!(Tools);", "");
    let refused = failed("cordon build without export_plugin!", &cordon(&project, &["build"]));
    assert!(refused.contains("cordon_guest::export_plugin!(YourPlugin);"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_new_python_project_builds_passes_its_tests_and_answers_a_call() {
    let dir = fresh_dir("author-python");
    assert!(!dir.starts_with(repo()), "the project lies outside the repository");
    let project = dir.join("py-tools");
    let made = succeeded("cordon new", &cordon(&dir, &["new", "py-tools", "--lang", "python"]));
    assert!(made.contains("a python tool project"), "{made}");
    assert_files(
        &project,
        &[
            "app.py",
            "test_app.py",
            "pyproject.toml",
            "README.md",
            "cordon.toml",
            ".gitignore",
            "cordon-guest/src/cordon_guest/__init__.py",
            "cordon-guest/src/cordon_guest/componentize-py.toml",
            "cordon-guest/src/cordon_guest/wit/cordon.wit",
        ],
        &["cordon-guest/template", "cordon-guest/tests"],
    );
    let manifest = std::fs::read_to_string(project.join("pyproject.toml")).unwrap();
    assert!(manifest.contains("name = \"py-tools\""), "{manifest}");

    let component =
        built_component(&project, "py-tools.wasm", "componentize-py 0.25.1", "echo, import_items");
    let arguments = r#"{"batch": "b1", "count": 3, "step_ms": 1}"#;
    call_answers(
        &project,
        &component,
        "import_items",
        arguments,
        "Imported 3 items from b1",
        "Imported 3 of 3 items",
    );

    // The project's own tests, as its README says to run them: pytest in a virtualenv of
    // the project's, finding the SDK in cordon-guest/ through pyproject.toml.
    let venv = project.join(".venv");
    succeeded("python3 -m venv", &Command::new("python3").args(["-m", "venv"]).arg(&venv).output().unwrap());
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--disable-pip-version-check", "pytest==8.4.2"])
        .output()
        .unwrap();
    succeeded("pip install pytest", &pip);
    let tests = Command::new(venv.join("bin/python"))
        .current_dir(&project)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(succeeded("the project's pytest", &tests).contains("3 passed"), "{}", text(&tests.stdout));

    // A tool name the host refuses: the SDK refuses it when componentize-py imports app.py.
    edit(
        &project.join("app.py"),
        "@tool\ndef import_items",
        "@tool(name=\"import items\")\ndef import_items",
    );
    let refused = failed("cordon build of a bad name", &cordon(&project, &["build"]));
    assert!(refused.contains("import items"), "{refused}");
    assert!(refused.contains("componentize-py's errors are above"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_new_js_project_builds_and_answers_a_call() {
    let dir = fresh_dir("author-js");
    assert!(!dir.starts_with(repo()), "the project lies outside the repository");
    let project = dir.join("js-tools");
    let made = succeeded("cordon new", &cordon(&dir, &["new", "js-tools", "--lang", "js"]));
    assert!(made.contains("a js tool project"), "{made}");
    assert_files(
        &project,
        &[
            "package.json",
            "src/index.js",
            "README.md",
            ".gitignore",
            "cordon-guest/package.json",
            "cordon-guest/index.js",
            "cordon-guest/build.js",
            "cordon-guest/testing/index.js",
            "cordon-guest/testing/register.js",
            "cordon-guest/wit/cordon.wit",
            "test/index.test.js",
        ],
        &["cordon-guest/template", "cordon-guest/tests"],
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap()).unwrap();
    assert_eq!(manifest["name"], "js-tools");
    assert_eq!(manifest["dependencies"]["cordon-guest"], "file:cordon-guest");

    let component =
        built_component(&project, "dist/js-tools.wasm", "componentize-js on Node", "process_batch");
    let arguments = r#"{"batch": "first", "items": 3}"#;
    call_answers(
        &project,
        &component,
        "process_batch",
        arguments,
        "Processed 3 items of first",
        "Processed 3 of 3 items",
    );

    // The project's own tests, as its README says to run them: `npm test`, the tools run
    // natively with the SDK's test host (`cordon build` installed the project's packages),
    // on the Node `cordon build` used.
    let node = cordon_toolchain::js::node(&repo().join("target/js-node")).unwrap();
    let tests = cordon_toolchain::js::on_node("npm", &node)
        .current_dir(&project)
        .args(["test", "--silent"])
        .output()
        .unwrap();
    let report = succeeded("the project's npm test", &tests);
    assert!(report.contains("pass 2") && report.contains("fail 0"), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn python_and_js_builds_name_each_mistake_before_it_costs_a_build() {
    let dir = fresh_dir("author-lang-mistakes");
    succeeded("cordon new", &cordon(&dir, &["new", "py-mistakes", "--lang", "python"]));
    succeeded("cordon new", &cordon(&dir, &["new", "js-mistakes", "--lang", "js"]));
    let (python, js) = (dir.join("py-mistakes"), dir.join("js-mistakes"));

    let refused = failed("cordon new --lang go", &cordon(&dir, &["new", "go-tools", "--lang", "go"]));
    assert!(refused.contains("rust, python, js"), "{refused}");

    // No toolchain: each error says what to install.
    let refused = failed("cordon build without python3", &build_without_toolchains(&python, &dir));
    assert!(
        refused.contains("no python3") && refused.contains("apt-get install -y python3-venv"),
        "{refused}"
    );
    let refused = failed("cordon build without npm", &build_without_toolchains(&js, &dir));
    assert!(refused.contains("no npm") && refused.contains("apt-get install -y npm"), "{refused}");
    assert!(refused.contains("older than 20.19 is then replaced by node@22"), "{refused}");

    // No SDK beside the code: the error says where `cordon new` puts it.
    std::fs::rename(python.join("cordon-guest"), dir.join("python-sdk")).unwrap();
    let refused = failed("cordon build without the Python SDK", &cordon(&python, &["build"]));
    assert!(
        refused.contains("no SDK in cordon-guest/") && refused.contains("copy that folder here"),
        "{refused}"
    );
    let package = js.join("package.json");
    edit(&package, r#""cordon-guest": "file:cordon-guest""#, r#""left-pad": "1.3.0""#);
    let refused = failed("cordon build without the JS SDK", &cordon(&js, &["build"]));
    assert!(
        refused.contains("no `cordon-guest` dependency")
            && refused.contains(r#""cordon-guest": "file:cordon-guest""#),
        "{refused}"
    );
    // A tools module that is not there.
    edit(&python.join("pyproject.toml"), "module = \"app\"", "module = \"tools\"");
    let refused = failed("cordon build of a missing module", &cordon(&python, &["build"]));
    assert!(refused.contains("neither tools.py nor tools/__init__.py"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cordon_build_names_each_mistake_before_it_costs_a_build() {
    let dir = fresh_dir("author-mistakes");
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let refused = failed("cordon build without Cargo.toml", &cordon(&empty, &["build"]));
    assert!(refused.contains("no Cargo.toml") && refused.contains("cordon new NAME"), "{refused}");

    succeeded("cordon new", &cordon(&dir, &["new", "mistakes"]));
    let project = dir.join("mistakes");
    let manifest = project.join("Cargo.toml");
    edit(&manifest, "crate-type = [\"cdylib\"]", "");
    let refused = failed("cordon build of a crate that is no cdylib", &cordon(&project, &["build"]));
    assert!(
        refused.contains("would build no .wasm") && refused.contains("crate-type = [\"cdylib\"]"),
        "{refused}"
    );
    edit(&manifest, "[lib]\n", "[lib]\ncrate-type = [\"cdylib\"]\n");

    edit(&manifest, "cordon-guest = { path = \"vendor/guest-sdk\" }", "");
    let refused = failed("cordon build without cordon-guest", &cordon(&project, &["build"]));
    assert!(
        refused.contains("no `cordon-guest` dependency") && refused.contains("vendor/guest-sdk"),
        "{refused}"
    );
    edit(&manifest, "[dependencies]\n", "[dependencies]\ncordon-guest = { path = \"vendor/guest-sdk\" }\n");

    // No toolchain at all (no rustc on PATH): the error says what to install, both ways.
    let output = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .current_dir(&project)
        .arg("build")
        .env("PATH", dir.join("no-such-bin"))
        .output()
        .unwrap();
    let refused = failed("cordon build without a toolchain", &output);
    assert!(refused.contains("rustup target add wasm32-wasip2"), "{refused}");
    assert!(
        refused.contains("apt-get install -y rustc-web cargo-web rust-web-src lld-22 wasi-libc"),
        "{refused}"
    );

    let refused = failed("cordon new with a bad name", &cordon(&dir, &["new", "9lives"]));
    assert!(refused.contains("starts with a letter"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_panic_message_reaches_the_client_and_the_cleanup() {
    let dir = fresh_dir("author-panic");
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let options = ComponentOptions {
        limits: common::quick_limits(),
        data_dir: Some(dir.clone()),
        ..ComponentOptions::default()
    };
    runtime.load_file(&hostile(), options).await.unwrap();
    let report = common::call(&runtime, "panic", json!({"message": "the disk is full"})).await;
    let Outcome::Trapped(message) = &report.outcome else {
        panic!("expected a trap, got {:?}", report.outcome)
    };
    assert!(message.contains("unreachable"), "{message}");
    assert!(message.contains("its last line on stderr: panicked at "), "{message}");
    assert!(message.contains("src/lib.rs:") && message.ends_with(": the disk is full"), "{message}");
    let revision = cordon::protocol::types::Revision::R2026_07_28;
    let answer = cordon::dispatch::call_result(report.outcome.clone(), &common::quick_limits(), revision);
    let cordon::protocol::types::ContentBlock::Text { text: client_text } = &answer.content[0] else {
        panic!("the answer is not text: {answer:?}")
    };
    assert!(
        client_text.starts_with("The tool crashed: ") && client_text.contains("the disk is full"),
        "{answer:?}"
    );
    // The cleanup runs in a fresh instance of its own: wait for what it wrote.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let cleanup_saw = loop {
        let written = std::fs::read_to_string(dir.join("cleanup-reason")).unwrap_or_default();
        if written.ends_with(r#"Some("before the panic")"#) || std::time::Instant::now() > deadline {
            break written;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(cleanup_saw.starts_with("Trapped(") && cleanup_saw.contains("the disk is full"), "{cleanup_saw}");
    assert!(cleanup_saw.ends_with(r#"Some("before the panic")"#), "{cleanup_saw}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_file_error_without_a_grant_names_the_config_keys_that_grant_one() {
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let options = ComponentOptions { limits: common::quick_limits(), ..ComponentOptions::default() };
    runtime.load_file(&hostile(), options).await.unwrap();
    let report = common::call(&runtime, "read_text", json!({"path": "/data/notes.txt"})).await;
    let message = common::answer(&report);
    assert!(message.contains("Capabilities insufficient"), "the error itself stays: {message}");
    assert!(message.contains("`data_dir`") && message.contains("[[components.mounts]]"), "{message}");
}
