//! `cordon call` and `cordon list` as an author runs them: the real binary against the
//! example components, its stdout and stderr piped (and once on a pseudo-terminal through
//! `script`), Ctrl-C sent as SIGINT.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;

/// Long enough for a cold compile of a component by a debug host on a busy machine.
const DEADLINE: Duration = Duration::from_secs(120);

fn guest(file: &str) -> PathBuf {
    let path = cordon::paths::default_tools_dir().join(file);
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

fn example_tools() -> PathBuf {
    guest("example-tools.wasm")
}

/// A config in a fresh directory: `[[components]]` for `component`, with `extra` lines.
fn config(what: &str, component: &Path, extra: &str) -> PathBuf {
    let dir = common::fresh_dir(what);
    let path = dir.join("cordon.toml");
    std::fs::write(&path, format!("[[components]]\npath = {:?}\n{extra}", component.display().to_string()))
        .unwrap();
    path
}

/// A running `cordon` with its output read line by line.
struct Running {
    pid: u32,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
    stdout: mpsc::Receiver<String>,
    exited: mpsc::Receiver<ExitStatus>,
}

fn start(args: &[&str], configure: impl FnOnce(&mut Command)) -> Running {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cordon"));
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    configure(&mut command);
    let mut child = command.spawn().unwrap();
    let (lines, stderr) = mpsc::channel();
    let reader = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || reader.lines().map_while(Result::ok).try_for_each(|line| lines.send(line)));
    let (whole, stdout) = mpsc::channel();
    let mut out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let _ = whole.send(text);
    });
    let pid = child.id();
    let (status, exited) = mpsc::channel();
    std::thread::spawn(move || status.send(child.wait().unwrap()));
    Running { pid, stderr, seen: Vec::new(), stdout, exited }
}

/// What a finished `cordon` left.
struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Running {
    /// Wait for a stderr line containing `text`.
    fn wait_for(&mut self, text: &str) {
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => {
                    panic!("no stderr line with {text:?} within {DEADLINE:?}; got:\n{}", self.seen.join("\n"))
                }
            }
        }
    }

    fn interrupt(&self) {
        // SAFETY: a plain kill(2) of the child we started, which has not been reaped (the
        // waiting thread reaps it only once it exits).
        assert_eq!(unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGINT) }, 0);
    }

    fn finish_within(mut self, deadline: Duration) -> Finished {
        let status = match self.exited.recv_timeout(deadline) {
            Ok(status) => status,
            Err(_) => {
                // SAFETY: as in `interrupt`.
                unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
                panic!("cordon did not exit within {deadline:?}; stderr so far:\n{}", self.seen.join("\n"));
            }
        };
        let stdout = self.stdout.recv_timeout(DEADLINE).expect("stdout closes at exit");
        self.seen.extend(self.stderr.iter());
        Finished { code: status.code(), stdout, stderr: self.seen.join("\n") }
    }
}

fn cordon(args: &[&str]) -> Finished {
    start(args, |_| {}).finish_within(DEADLINE)
}

fn json_out(finished: &Finished) -> Value {
    serde_json::from_str(&finished.stdout)
        .unwrap_or_else(|error| panic!("stdout is not one JSON document ({error}):\n{}", finished.stdout))
}

#[test]
fn piped_a_call_prints_progress_lines_and_its_result_as_one_json_document() {
    let config = config("call-progress", &example_tools(), "data_dir = \"data\"\n");
    let finished = cordon(&[
        "call",
        example_tools().to_str().unwrap(),
        "reindex",
        r#"{"collection": "books", "total": 120, "step_ms": 100}"#,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(
        json_out(&finished),
        json!({"content": [{"type": "text", "text": "Reindexed 120 documents in books"}], "isError": false})
    );
    // Reports may collapse to the latest when they come faster than they are read, but the
    // last one is always shown.
    for line in [
        "calling reindex (Ctrl-C stops it)",
        "progress: 120/120 (100%) Indexed 120 of 120 documents",
        "reindex: answered in ",
    ] {
        assert!(
            finished.stderr.lines().any(|seen| seen.starts_with(line)),
            "no {line:?} in:\n{}",
            finished.stderr
        );
    }
    // The granted data directory, relative to the config, held the lock while it ran.
    assert!(config.parent().unwrap().join("data/locks").is_dir());
}

#[test]
fn ctrl_c_cancels_a_spinning_call_and_says_how_it_stopped_and_what_cleanup_did() {
    let config = config("call-interrupt", &example_tools(), "data_dir = \"data\"\n");
    let tools = example_tools();
    let args = [
        "call",
        tools.to_str().unwrap(),
        "spin",
        r#"{"seconds": 120}"#,
        "--config",
        config.to_str().unwrap(),
    ];
    let mut running = start(&args, |_| {});
    running.wait_for("calling spin");
    running.interrupt();
    running.wait_for("interrupted: stopping spin");
    let finished = running.finish_within(DEADLINE);
    assert_eq!(finished.code, Some(3), "{}", finished.stderr);
    assert_eq!(finished.stdout, "", "nothing on stdout for a stopped call");
    for words in [
        "spin: the call was cancelled (Ctrl-C), after ",
        "how it stopped: the tool was still computing when its grace period (250 ms) ran out: trapped at its next epoch check",
        "after Ctrl-C)",
        "cleanup: the tool's cleanup ran in a fresh instance and completed in ",
        // The example's cleanup logs what it released.
        "cleanup after spin (Cancelled): released spin",
    ] {
        assert!(finished.stderr.contains(words), "no {words:?} in:\n{}", finished.stderr);
    }
    // The cleanup really released the lock.
    let locks = cordon(&["call", tools.to_str().unwrap(), "locks", "--config", config.to_str().unwrap()]);
    assert_eq!(json_out(&locks)["structuredContent"], json!([]), "{}", locks.stderr);
}

#[test]
fn a_second_ctrl_c_exits_at_once_without_waiting_for_the_stop() {
    // A long grace: the first Ctrl-C leaves the parked guest 30 s to return by itself.
    let hostile = guest("hostile.wasm");
    let config = config("call-twice", &hostile, "limits = { grace_ms = 30000 }\n");
    let args = [
        "call",
        hostile.to_str().unwrap(),
        "park",
        r#"{"ms": 120000}"#,
        "--config",
        config.to_str().unwrap(),
    ];
    let mut running = start(&args, |_| {});
    running.wait_for("calling park");
    running.interrupt();
    running.wait_for("interrupted: stopping park (it has 30.00 s to return by itself");
    let second = Instant::now();
    running.interrupt();
    let finished = running.finish_within(Duration::from_secs(10));
    assert!(second.elapsed() < Duration::from_secs(10));
    assert_eq!(finished.code, Some(130), "{}", finished.stderr);
    assert!(finished.stderr.contains("interrupted again: exiting at once"), "{}", finished.stderr);
}

#[test]
fn a_call_parked_in_a_host_call_is_dropped_there_after_ctrl_c() {
    let hostile = guest("hostile.wasm");
    let config = config("call-park", &hostile, "limits = { grace_ms = 50 }\n");
    let args = [
        "call",
        hostile.to_str().unwrap(),
        "park",
        r#"{"ms": 120000}"#,
        "--config",
        config.to_str().unwrap(),
    ];
    let mut running = start(&args, |_| {});
    running.wait_for("calling park");
    running.interrupt();
    let finished = running.finish_within(DEADLINE);
    assert_eq!(finished.code, Some(3), "{}", finished.stderr);
    let words = "how it stopped: the tool was waiting in a host call when its grace period (50 ms) ran out: dropped there";
    assert!(finished.stderr.contains(words), "{}", finished.stderr);
    assert!(finished.stderr.contains("cleanup: the tool's cleanup ran in a fresh instance and completed"));
}

#[test]
fn the_configs_limits_apply_a_tight_max_duration_stops_the_call() {
    let config = config(
        "call-timeout",
        &example_tools(),
        "data_dir = \"data\"\n[components.tools.spin]\nmax_duration_ms = 300\n",
    );
    let finished = cordon(&[
        "call",
        example_tools().to_str().unwrap(),
        "spin",
        r#"{"seconds": 120}"#,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(finished.code, Some(3), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("spin: the call timed out: it ran for 300 ms (its maximum duration), after "),
        "{}",
        finished.stderr
    );
    assert!(
        finished.stderr.contains("cleanup after spin (MaxDuration): released spin"),
        "{}",
        finished.stderr
    );
}

#[test]
fn the_configs_grants_apply_and_without_one_there_is_no_data_directory() {
    // Without a config, nothing is granted: the lock directory cannot be made, and no
    // default data directory appears in the user's home.
    let home = common::fresh_dir("call-home");
    let tools = example_tools();
    let args = ["call", tools.to_str().unwrap(), "reindex", r#"{"collection": "c", "step_ms": 0}"#];
    let finished = start(&args, |command| {
        command.env("HOME", &home).env_remove("XDG_DATA_HOME");
    })
    .finish_within(DEADLINE);
    assert_eq!(finished.code, Some(1), "{}", finished.stderr);
    assert!(
        finished.stderr.contains("reindex: the tool failed: Capabilities insufficient")
            && finished.stderr.contains("no directory the host granted holds this path"),
        "{}",
        finished.stderr
    );
    assert!(!home.join(".local/share/cordon").exists(), "a data directory was made without a grant");

    // The config's environment reaches the guest; nothing of cordon's own does.
    let hostile = guest("hostile.wasm");
    let config = config("call-env", &hostile, "env = { REGION = \"eu\" }\n");
    let finished =
        cordon(&["call", hostile.to_str().unwrap(), "env_names", "{}", "--config", config.to_str().unwrap()]);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(json_out(&finished)["content"][0]["text"], "REGION");
}

/// What `serve` keeps from every grant, `cordon call` keeps too, from the whole config:
/// a tenant's `api_keys` file (a tenant this call is not made for) may not be read through
/// a mount, nor another component's file be in a writable one. Before, `call` kept the
/// one component and dropped the rest of the config first, and with it what to protect.
#[test]
fn a_grant_holding_what_the_whole_config_protects_is_refused() {
    let hostile = guest("hostile.wasm");
    let dir = common::fresh_dir("call-protected");
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("acme.keys"), "acme-key-0123456789abcdef\n").unwrap();
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(example_tools(), other.join("tools.wasm")).unwrap();
    let path = dir.join("cordon.toml");
    let call = |mount: &str| {
        std::fs::write(
            &path,
            format!(
                "[[components]]\npath = {:?}\n[[components.mounts]]\n{mount}\nguest = \"/m\"\n\
                 [[components]]\npath = \"other/tools.wasm\"\n\
                 [[tenants]]\nname = \"acme\"\ncomponents = [\"tools\"]\napi_keys = {{ file = \"keys/acme.keys\" }}\n",
                hostile.display().to_string()
            ),
        )
        .unwrap();
        cordon(&["call", hostile.to_str().unwrap(), "env_names", "{}", "--config", path.to_str().unwrap()])
    };
    let finished = call("host = \"keys\"\nmode = \"ro\"");
    assert_ne!(finished.code, Some(0), "{}", finished.stdout);
    assert!(finished.stderr.contains("acme.keys, a secret file"), "{}", finished.stderr);
    let finished = call("host = \"other\"\nmode = \"rw\"");
    assert_ne!(finished.code, Some(0), "{}", finished.stdout);
    assert!(finished.stderr.contains("tools.wasm, which the server reads"), "{}", finished.stderr);
    // A grant holding neither is served.
    std::fs::create_dir_all(dir.join("free")).unwrap();
    let finished = call("host = \"free\"\nmode = \"rw\"");
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
}

#[test]
fn images_and_audio_are_summarised_by_type_and_size() {
    let fixture = guest("conformance-fixture.wasm");
    for (tool, kind, mime_type) in
        [("test_image_content", "image", "image/png"), ("test_audio_content", "audio", "audio/wav")]
    {
        let finished = cordon(&["call", fixture.to_str().unwrap(), tool]);
        assert_eq!(finished.code, Some(0), "{}", finished.stderr);
        let item = &json_out(&finished)["content"][0];
        assert_eq!(item["type"], kind);
        assert_eq!(item["mimeType"], mime_type);
        assert!(item["bytes"].as_u64().is_some_and(|bytes| bytes > 0), "{item}");
        assert!(item.get("data").is_none(), "the data was dumped: {item}");
    }
}

#[test]
fn structured_output_is_printed_once() {
    // A guest whose result has the structured value both as text and as structuredContent,
    // as the guest SDK sends it.
    let value = r#"{"count":3}"#;
    let guest = common::WatGuest::new(
        "count",
        &format!(
            "(drop (call $ok_text (i32.const 2600) (i32.const {len})))
             (i32.store8 (i32.const 3012) (i32.const 1))
             (i32.store (i32.const 3016) (i32.const 2600))
             (i32.store (i32.const 3020) (i32.const {len}))
             (i32.const 3000)",
            len = value.len()
        ),
    )
    .extra(&format!("(data (i32.const 2600) {value:?})"));
    let dir = common::fresh_dir("call-structured");
    let component = dir.join("count.wasm");
    std::fs::write(&component, guest.component()).unwrap();
    let finished = cordon(&["call", component.to_str().unwrap(), "count"]);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(
        json_out(&finished),
        json!({"content": [], "structuredContent": {"count": 3}, "isError": false})
    );
}

#[test]
fn errors_are_said_in_words_with_the_usage_exit_code() {
    let tools = example_tools();
    let tools = tools.to_str().unwrap();
    let elsewhere = config("call-elsewhere", Path::new("/nonexistent/other.wasm"), "");
    let cases: [(&[&str], &str); 5] = [
        (&["call", tools, "nope"], "error: unknown tool \"nope\": "),
        (&["call", tools, "echo", "{text"], "error: the arguments are not JSON: "),
        (&["call", tools, "echo", "{}"], "error: invalid arguments for tool echo: "),
        (&["call", tools, "echo", "[1]"], "error: arguments must be a JSON object"),
        (
            &["call", tools, "echo", "--config", elsewhere.to_str().unwrap()],
            "has no [[components]] entry whose path is ",
        ),
    ];
    for (args, words) in cases {
        let finished = cordon(args);
        assert_eq!(finished.code, Some(2), "{args:?}: {}", finished.stderr);
        assert!(finished.stderr.contains(words), "{args:?}: no {words:?} in:\n{}", finished.stderr);
        assert!(
            !finished.stderr.contains("Error {") && !finished.stderr.contains("Err("),
            "{}",
            finished.stderr
        );
    }
    let unknown = cordon(&["call", tools, "nope"]);
    assert!(
        unknown.stderr.contains("offers echo, reindex, locks, spin, order_book, fetch"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn list_shows_annotations_and_leaves_out_absent_fields() {
    let finished = cordon(&["list", example_tools().to_str().unwrap()]);
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    let tools = json_out(&finished);
    let tool =
        |name: &str| tools.as_array().unwrap().iter().find(|tool| tool["name"] == name).unwrap().clone();
    assert_eq!(tool("echo")["annotations"], json!({"readOnlyHint": true, "idempotentHint": true}));
    assert_eq!(tool("fetch")["annotations"], json!({"readOnlyHint": true, "openWorldHint": true}));
    let reindex = tool("reindex");
    for absent in ["annotations", "title", "outputSchema", "requires"] {
        assert!(reindex.get(absent).is_none(), "{absent} in {reindex}");
    }
    let fixture = cordon(&["list", guest("conformance-fixture.wasm").to_str().unwrap()]);
    let fixture = json_out(&fixture);
    let sampling = fixture.as_array().unwrap().iter().find(|tool| tool["name"] == "test_missing_capability");
    assert_eq!(sampling.unwrap()["requires"], json!(["sampling"]));
}

/// `cmd` run on a pseudo-terminal by util-linux's `script`; returns what the terminal got.
fn on_a_terminal(cmd: &str) -> (Option<i32>, String) {
    let output = Command::new("script")
        .args(["--quiet", "--return", "--command", cmd, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .expect("util-linux's `script` runs");
    (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn on_a_terminal_progress_is_a_bar_and_the_result_is_for_people() {
    let config = config("call-tty", &example_tools(), "data_dir = \"data\"\n");
    let cordon = env!("CARGO_BIN_EXE_cordon");
    let tools = example_tools();
    let (code, screen) = on_a_terminal(&format!(
        "{cordon} call {} reindex '{{\"collection\": \"c\", \"total\": 400, \"step_ms\": 150}}' --config {}",
        tools.display(),
        config.display()
    ));
    assert_eq!(code, Some(0), "{screen}");
    // The bar, drawn and redrawn in place, with the tool's message beside it.
    assert!(screen.contains("reindex [="), "{screen}");
    assert!(screen.contains("Indexed 40 of 400 documents"), "{screen}");
    assert!(!screen.contains("progress: "), "plain lines on a terminal: {screen}");
    assert!(screen.contains("Reindexed 400 documents in c"), "{screen}");
    assert!(!screen.contains("\"content\""), "JSON on a terminal: {screen}");

    let (code, screen) = on_a_terminal(&format!("{cordon} list {}", tools.display()));
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("echo\r\n  Returns the text it is given.\r\n  hints: read-only, idempotent"),
        "{screen}"
    );
    assert!(screen.contains("text: string, required — The text to return."), "{screen}");
}
