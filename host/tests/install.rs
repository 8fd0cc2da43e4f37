//! The `cordon` binary as `cargo install --path host` leaves it: run from a directory
//! outside the repository, with no config, it serves the example tools built into it
//! (host/build.rs), not a file it would look for in the repository.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use common::wire::{Schema, meta};

#[test]
fn outside_the_repository_without_a_config_the_built_in_example_tools_are_served() {
    assert!(
        cordon::paths::EMBEDDED_EXAMPLE_TOOLS.is_some(),
        "this build embedded no example tools: run `cargo xtask guests` before building"
    );
    let empty = common::fresh_dir("install-cwd");
    let home = common::fresh_dir("install-home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["serve", "--stdio"])
        .current_dir(&empty)
        .env("HOME", &home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("CORDON_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (log_lines, log) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        stderr.lines().map_while(Result::ok).try_for_each(|line| log_lines.send(line))
    });
    let (out_lines, answers) = mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        stdout.lines().map_while(Result::ok).try_for_each(|line| out_lines.send(line))
    });

    let source = loop {
        let line =
            log.recv_timeout(Duration::from_secs(30)).expect("the server logs where its tools come from");
        if line.contains("no --config: serving the example tools") {
            break line;
        }
    };
    assert!(source.ends_with("built into this binary"), "{source}");

    let schema = Schema::new();
    let mut stdin = child.stdin.take().unwrap();
    let mut request = |id: i64, method: &str, params: Value| -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}").unwrap();
        let line = answers.recv_timeout(Duration::from_secs(30)).expect("an answer within 30 s");
        let answer: Value = serde_json::from_str(&line).unwrap();
        schema.check_sent(&answer, Some(method));
        assert_eq!(answer["id"], id, "{answer}");
        answer
    };
    let list = request(1, "tools/list", json!({"_meta": meta()}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "reindex", "locks", "spin", "order_book", "fetch", "delete_collection"]);
    let call = request(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "installed"}, "_meta": meta()}),
    );
    assert_eq!(call["result"]["content"][0]["text"], "installed", "{call}");

    // Its default data directory and compile cache are under $HOME, not the repository.
    assert!(home.join(".local/share/cordon/example-tools").is_dir());
    assert!(std::fs::read_dir(home.join(".cache/cordon")).unwrap().next().is_some());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "nothing is written to the working directory");
    let _ = child.kill();
    let _ = child.wait();
}
