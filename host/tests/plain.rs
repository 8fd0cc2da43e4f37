//! Plain WIT components (no Cordon world): the example `plain-kinds` (examples/plain, one
//! function per WIT type kind and one that never returns) and `wassette-filesystem`
//! (wassette's filesystem-rs world, unchanged), built by `cargo xtask guests`, served
//! through the runtime; and `cordon inspect`'s report on them.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use cordon::runtime::{
    CallError, CallReport, ComponentOptions, Content, Mount, Outcome, Runtime, StopPath, Timeout, ToolLimits,
};
use serde_json::{Value, json};

fn guest(name: &str) -> PathBuf {
    let path = cordon::paths::default_tools_dir().join(name);
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

async fn kinds_with(limits: ToolLimits) -> Runtime {
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    let options = ComponentOptions { limits, ..ComponentOptions::default() };
    runtime.load_file(&guest("plain-kinds.wasm"), options).await.unwrap();
    runtime
}

async fn kinds() -> Runtime {
    kinds_with(ToolLimits { grace: Duration::from_millis(100), ..ToolLimits::default() }).await
}

/// The structured result and text of a completed, successful call.
fn returned(report: &CallReport) -> (Option<Value>, Vec<String>) {
    match &report.outcome {
        Outcome::Completed(result) => {
            assert!(!result.is_error, "{result:?}");
            (result.structured.clone(), texts(&result.content))
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
}

fn texts(content: &[Content]) -> Vec<String> {
    content
        .iter()
        .map(|item| match item {
            Content::Text(text) => text.clone(),
            other => panic!("expected text, got {other:?}"),
        })
        .collect()
}

/// The error text of a call whose function returned a `result`'s `err`.
fn error_text(report: &CallReport) -> String {
    match &report.outcome {
        Outcome::Completed(result) if result.is_error => {
            assert_eq!(result.structured, None);
            texts(&result.content).concat()
        }
        other => panic!("expected an error result, got {other:?}"),
    }
}

fn integer(min: Value, max: Value) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn result_schema(schema: Value) -> Value {
    object(json!({"result": schema}), &["result"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_function_is_a_tool_with_a_schema_derived_from_its_wit_types() {
    let runtime = kinds().await;
    let tools = runtime.snapshot();
    let names: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "kinds.negate",
            "kinds.widths",
            "kinds.halve",
            "kinds.next-char",
            "kinds.greet",
            "kinds.sum",
            "kinds.first-word",
            "kinds.maybe-double",
            "kinds.divide",
            "kinds.check-name",
            "kinds.swap",
            "kinds.move-right",
            "kinds.area",
            "kinds.next-color",
            "kinds.toggle-write",
            "kinds.spin",
        ]
    );
    let input = |tool: &str| tools.tool(tool).unwrap().input_schema.clone();
    let output = |tool: &str| tools.tool(tool).unwrap().output_schema.clone();
    let boolean = json!({"type": "boolean"});
    let string = json!({"type": "string"});
    let number = json!({"type": "number"});
    let char_schema = json!({"type": "string", "minLength": 1, "maxLength": 1});
    let point = object(
        json!({"x": integer(json!(i32::MIN), json!(i32::MAX)), "y": integer(json!(i32::MIN), json!(i32::MAX))}),
        &["x", "y"],
    );
    let colors = json!({"type": "string", "enum": ["red", "green", "blue"]});
    let permissions = json!({"type": "array", "items": {"type": "string", "enum": ["read", "write", "execute"]}, "uniqueItems": true});
    let widths = [
        integer(json!(-128), json!(127)),
        integer(json!(0), json!(255)),
        integer(json!(-32768), json!(32767)),
        integer(json!(0), json!(65535)),
        integer(json!(i32::MIN), json!(i32::MAX)),
        integer(json!(0), json!(u32::MAX)),
        integer(json!(i64::MIN), json!(i64::MAX)),
        integer(json!(0), json!(u64::MAX)),
    ];

    // bool
    assert_eq!(input("kinds.negate"), object(json!({"value": boolean}), &["value"]));
    assert_eq!(output("kinds.negate"), Some(result_schema(boolean.clone())));
    // every integer width, with its range; a tuple as a fixed-length array
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let properties: serde_json::Map<String, Value> =
        names.iter().zip(&widths).map(|(name, schema)| (name.to_string(), schema.clone())).collect();
    assert_eq!(input("kinds.widths"), object(Value::Object(properties), &names));
    assert_eq!(
        output("kinds.widths"),
        Some(result_schema(json!({"type": "array", "prefixItems": widths, "items": false, "minItems": 8})))
    );
    // f32 and f64
    assert_eq!(
        input("kinds.halve"),
        object(json!({"single": number, "double": number}), &["single", "double"])
    );
    // char
    assert_eq!(input("kinds.next-char"), object(json!({"c": char_schema}), &["c"]));
    assert_eq!(output("kinds.next-char"), Some(result_schema(char_schema.clone())));
    // a record with an option field, which may be left out
    assert_eq!(
        input("kinds.greet"),
        object(
            json!({"who": object(json!({"name": string, "nickname": {"type": ["string", "null"]}}), &["name"])}),
            &["who"]
        )
    );
    assert_eq!(output("kinds.greet"), Some(result_schema(string.clone())));
    // list
    assert_eq!(
        input("kinds.sum"),
        object(
            json!({"values": {"type": "array", "items": integer(json!(i32::MIN), json!(i32::MAX))}}),
            &["values"]
        )
    );
    // option: as a result, and as a parameter (not required)
    assert_eq!(output("kinds.first-word"), Some(result_schema(json!({"type": ["string", "null"]}))));
    let optional_u32 = json!({"type": ["integer", "null"], "minimum": 0, "maximum": u32::MAX});
    assert_eq!(input("kinds.maybe-double"), object(json!({"value": optional_u32}), &[]));
    assert_eq!(output("kinds.maybe-double"), Some(result_schema(optional_u32.clone())));
    // result<T, E>: the output is T; result<_, E>: no output
    assert_eq!(output("kinds.divide"), Some(result_schema(integer(json!(i32::MIN), json!(i32::MAX)))));
    assert_eq!(input("kinds.check-name"), object(json!({"name": string}), &["name"]));
    assert_eq!(output("kinds.check-name"), None);
    // tuple
    assert_eq!(
        input("kinds.swap"),
        object(
            json!({"pair": {"type": "array", "prefixItems": [string, integer(json!(0), json!(255))], "items": false, "minItems": 2}}),
            &["pair"]
        )
    );
    // record
    assert_eq!(
        input("kinds.move-right"),
        object(json!({"p": point, "dx": integer(json!(i32::MIN), json!(i32::MAX))}), &["p", "dx"])
    );
    assert_eq!(output("kinds.move-right"), Some(result_schema(point.clone())));
    // variant: a case with a payload is an object of one key, a case without is its name
    let case = |name: &str, schema: Value| object(json!({name: schema}), &[name]);
    let rectangle = json!({"type": "array", "prefixItems": [number, number], "items": false, "minItems": 2});
    assert_eq!(
        input("kinds.area"),
        object(
            json!({"s": {"oneOf": [case("circle", number.clone()), case("rectangle", rectangle), {"const": "dot"}]}}),
            &["s"]
        )
    );
    // enum
    assert_eq!(input("kinds.next-color"), object(json!({"c": colors}), &["c"]));
    assert_eq!(output("kinds.next-color"), Some(result_schema(colors.clone())));
    // flags
    assert_eq!(input("kinds.toggle-write"), object(json!({"p": permissions}), &["p"]));
    // nothing in, nothing out
    assert_eq!(input("kinds.spin"), object(json!({}), &[]));
    assert_eq!(output("kinds.spin"), None);
    // No docs in the component (wit-bindgen does not embed them): no descriptions.
    assert!(tools.tools().all(|tool| tool.description.is_empty()));
}

/// Arguments each tool takes, and what it returns for them (`{"result": …}` and its text).
fn round_trips() -> Vec<(&'static str, Value, Value, &'static str)> {
    let widths = json!([-128, 255, -32768, 65535, i32::MIN, u32::MAX, i64::MIN, u64::MAX]);
    vec![
        ("kinds.negate", json!({"value": true}), json!(false), "false"),
        (
            "kinds.widths",
            json!({"a": -128, "b": 255, "c": -32768, "d": 65535, "e": i32::MIN, "f": u32::MAX, "g": i64::MIN, "h": u64::MAX}),
            widths,
            "[-128,255,-32768,65535,-2147483648,4294967295,-9223372036854775808,18446744073709551615]",
        ),
        ("kinds.halve", json!({"single": 3.0, "double": 5.0}), json!([1.5, 2.5]), "[1.5,2.5]"),
        ("kinds.next-char", json!({"c": "é"}), json!("ê"), "ê"),
        ("kinds.greet", json!({"who": {"name": "Ada"}}), json!("Hello, Ada!"), "Hello, Ada!"),
        (
            "kinds.greet",
            json!({"who": {"name": "Ada", "nickname": null}}),
            json!("Hello, Ada!"),
            "Hello, Ada!",
        ),
        (
            "kinds.greet",
            json!({"who": {"name": "Margaret", "nickname": "Maggie"}}),
            json!("Hello, Maggie!"),
            "Hello, Maggie!",
        ),
        ("kinds.sum", json!({"values": [1, -2, i32::MAX, i32::MAX]}), json!(4294967293i64), "4294967293"),
        ("kinds.first-word", json!({"text": "hello world"}), json!("hello"), "hello"),
        ("kinds.first-word", json!({"text": "   "}), Value::Null, "null"),
        ("kinds.maybe-double", json!({"value": 21}), json!(42), "42"),
        ("kinds.maybe-double", json!({}), Value::Null, "null"),
        ("kinds.divide", json!({"a": 7, "b": 2}), json!(3), "3"),
        ("kinds.swap", json!({"pair": ["seven", 7]}), json!([7, "seven"]), "[7,\"seven\"]"),
        (
            "kinds.move-right",
            json!({"p": {"x": 1, "y": 2}, "dx": 3}),
            json!({"x": 4, "y": 2}),
            r#"{"x":4,"y":2}"#,
        ),
        ("kinds.area", json!({"s": {"rectangle": [2.0, 3.5]}}), json!(7.0), "7.0"),
        ("kinds.area", json!({"s": "dot"}), json!(0.0), "0.0"),
        ("kinds.next-color", json!({"c": "blue"}), json!("red"), "red"),
        ("kinds.toggle-write", json!({"p": ["read"]}), json!(["read", "write"]), r#"["read","write"]"#),
        ("kinds.toggle-write", json!({"p": ["write", "execute"]}), json!(["execute"]), r#"["execute"]"#),
        ("kinds.toggle-write", json!({"p": []}), json!(["write"]), r#"["write"]"#),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_every_kind_round_trip_and_the_published_schemas_accept_what_the_calls_take() {
    let runtime = kinds().await;
    let tools = runtime.snapshot();
    for (tool, arguments, result, text) in round_trips() {
        let schema = jsonschema::validator_for(&tools.tool(tool).unwrap().input_schema).unwrap();
        assert!(schema.is_valid(&arguments), "{tool}: the published schema refuses {arguments}");
        let report = common::call(&runtime, tool, arguments.clone()).await;
        assert_eq!(report.stop_path, StopPath::Returned);
        let (structured, texts) = returned(&report);
        assert_eq!(structured, Some(json!({"result": result})), "{tool} {arguments}");
        assert_eq!(texts, [text], "{tool} {arguments}");
    }
    // A circle's area: a float that is not a round number.
    let (structured, _) =
        returned(&common::call(&runtime, "kinds.area", json!({"s": {"circle": 1.0}})).await);
    assert_eq!(structured, Some(json!({"result": std::f64::consts::PI})));
    // result<_, E>'s `ok` has nothing to say.
    let (structured, texts) =
        returned(&common::call(&runtime, "kinds.check-name", json!({"name": "Ada"})).await);
    assert_eq!((structured, texts), (None, Vec::<String>::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_err_is_an_error_result_with_its_message() {
    let runtime = kinds().await;
    let report = common::call(&runtime, "kinds.divide", json!({"a": 1, "b": 0})).await;
    assert_eq!(error_text(&report), "cannot divide 1 by 0");
    assert_eq!(report.cleanup.map(|cleanup| cleanup.outcome), None);
    let report = common::call(&runtime, "kinds.check-name", json!({"name": ""})).await;
    assert_eq!(error_text(&report), "a name cannot be empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_refused_before_the_call_with_the_path_of_what_is_wrong() {
    let runtime = kinds().await;
    let tools = runtime.snapshot();
    let cases = [
        ("kinds.greet", json!({"who": {"name": 5}}), "/who/name: expected a string, got a number"),
        ("kinds.greet", json!({"who": {}}), "/who/name: missing: this field is required"),
        ("kinds.greet", json!({"who": {"name": "x", "age": 3}}), "/who/age: no such field"),
        ("kinds.greet", json!({}), "/who: missing: this parameter is required"),
        ("kinds.negate", json!({"value": true, "extra": 1}), "/extra: no such parameter"),
        (
            "kinds.widths",
            json!({"a": 0, "b": 256, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": 0}),
            "/b: expected an integer from 0 to 255, got 256",
        ),
        (
            "kinds.widths",
            json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": -1}),
            "/h: expected an integer from 0 to 18446744073709551615, got -1",
        ),
        (
            "kinds.widths",
            json!({"a": 1.5, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 0, "h": 0}),
            "/a: expected an integer from -128 to 127, got 1.5",
        ),
        ("kinds.next-char", json!({"c": "ab"}), "/c: expected one character, got 2 characters"),
        (
            "kinds.sum",
            json!({"values": [1, "2"]}),
            "/values/1: expected an integer from -2147483648 to 2147483647, got \"2\"",
        ),
        ("kinds.swap", json!({"pair": ["x"]}), "/pair: expected 2 items, got 1"),
        (
            "kinds.move-right",
            json!({"p": {"x": 1, "y": null}, "dx": 0}),
            "/p/y: expected an integer from -2147483648 to 2147483647, got null",
        ),
        ("kinds.area", json!({"s": {"square": 1.0}}), "/s: \"square\" is not one of circle, rectangle, dot"),
        ("kinds.area", json!({"s": "circle"}), "/s: case \"circle\" needs a payload: pass {\"circle\": …}"),
        ("kinds.area", json!({"s": {"dot": 1}}), "/s: case \"dot\" has no payload: pass \"dot\" alone"),
        (
            "kinds.area",
            json!({"s": {"rectangle": [1.0, "2"]}}),
            "/s/rectangle/1: expected a number, got a string",
        ),
        ("kinds.next-color", json!({"c": "purple"}), "/c: \"purple\" is not one of red, green, blue"),
        ("kinds.toggle-write", json!({"p": ["read", "read"]}), "/p/1: \"read\" is set twice"),
        ("kinds.toggle-write", json!({"p": ["fly"]}), "/p/0: \"fly\" is not one of read, write, execute"),
    ];
    for (tool, arguments, problem) in cases {
        let schema = jsonschema::validator_for(&tools.tool(tool).unwrap().input_schema).unwrap();
        assert!(!schema.is_valid(&arguments), "{tool}: the published schema accepts {arguments}");
        match runtime.call(tool, &arguments).await {
            Err(error @ CallError::InvalidArguments { .. }) => {
                assert_eq!(error.to_string(), format!("invalid arguments for tool {tool}: {problem}"));
            }
            Err(other) => panic!("{tool} {arguments}: refused for another reason: {other}"),
            Ok(_) => panic!("{tool} {arguments}: accepted"),
        }
    }
    // The server keeps serving.
    let (structured, _) = returned(&common::call(&runtime, "kinds.negate", json!({"value": false})).await);
    assert_eq!(structured, Some(json!({"result": true})));
}

#[test]
fn a_cancelled_plain_function_that_never_returns_is_hard_stopped_with_no_cleanup() {
    let log = common::capture_log(|| async {
        let runtime = kinds().await;
        let call = runtime.call("kinds.spin", &json!({})).await.unwrap();
        let handle = call.handle();
        let running = tokio::spawn(call.run());
        handle.cancel();
        let report = running.await.unwrap();
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert!(report.hard_stopped, "spin never returns");
        assert_eq!(report.stop_path, StopPath::EpochTrap);
        assert!(report.cleanup.is_none(), "a plain component has no cleanup");
        let hard_stop_at = report.hard_stop_at.expect("grace ran out");
        assert!(report.stopped_at.saturating_duration_since(hard_stop_at) < Duration::from_secs(1));
        // The slot came back, and the component serves the next call.
        assert_eq!(runtime.pool_usage().calls, 0);
        let (structured, _) = returned(&common::call(&runtime, "kinds.negate", json!({"value": true})).await);
        assert_eq!(structured, Some(json!({"result": false})));
    });
    assert!(log.contains("no cleanup to run: a plain component has none"), "{log}");
    assert!(log.contains("reason=cancelled"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_function_that_never_returns_is_stopped_at_its_maximum_duration() {
    let max = Duration::from_millis(300);
    let limits =
        ToolLimits { grace: Duration::from_millis(100), max_duration: Some(max), ..ToolLimits::default() };
    let runtime = kinds_with(limits).await;
    let started = std::time::Instant::now();
    let report = common::call(&runtime, "kinds.spin", json!({})).await;
    assert_eq!(report.outcome, Outcome::TimedOut(Timeout::MaxDuration(max)));
    // Trapped by the hard stop at the end of grace, or by the epoch backstop at the same
    // moment: either way at an epoch check, while it computed.
    assert_eq!(report.stop_path, StopPath::EpochTrap);
    assert!(report.cleanup.is_none());
    assert!(report.stopped_at - started >= max);
    assert!(report.stopped_at - started < Duration::from_secs(5));
    assert_eq!(runtime.pool_usage().calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doc_comments_in_a_package_docs_section_become_descriptions() {
    // wit-bindgen does not embed the WIT's docs; wit-component's `package-docs` section
    // (a WIT package's encoding) carries them: append one to the example component.
    let wit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/plain/wit");
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(&wit).unwrap();
    let docs = wit_parser::PackageMetadata::extract(&resolve, package).encode().unwrap();
    let mut bytes = std::fs::read(guest("plain-kinds.wasm")).unwrap();
    bytes.extend(custom_section("package-docs", &docs));
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    runtime.load_bytes("documented", &bytes, ComponentOptions::default()).await.unwrap();
    let tools = runtime.snapshot();
    assert_eq!(tools.tool("kinds.negate").unwrap().description, "The opposite of a boolean.");
    assert_eq!(
        tools.tool("kinds.spin").unwrap().description,
        "Compute forever: never returns, for the host to stop."
    );
    assert_eq!(tools.tool("kinds.next-color").unwrap().description, "The next color of the three.");
}

/// A custom section (id 0): its size, its name, its bytes.
fn custom_section(name: &str, data: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend(name.as_bytes());
    body.extend(data);
    let mut section = vec![0];
    leb(body.len(), &mut section);
    section.extend(body);
    section
}

/// wassette's filesystem-rs world, built unchanged, with a read-only mount to read.
async fn wassette_filesystem() -> (Runtime, PathBuf) {
    let dir = common::fresh_dir("plain-fs");
    std::fs::create_dir(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes/todo.txt"), "water the plants\n").unwrap();
    std::fs::write(dir.join("readme.md"), "# hello\n").unwrap();
    let mut runtime = Runtime::new(common::settings(4)).unwrap();
    let mount = Mount { host: dir.clone(), guest: "/workspace".into(), writable: false, quota_bytes: None };
    let options = ComponentOptions { mounts: vec![mount], ..ComponentOptions::default() };
    runtime.load_file(&guest("wassette-filesystem.wasm"), options).await.unwrap();
    (runtime, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_of_wassettes_examples_shape_is_listed_and_called_unchanged() {
    let (runtime, dir) = wassette_filesystem().await;
    let tools = runtime.snapshot();
    let names: Vec<&str> = tools.tools().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["list-directory", "read-file", "search-file", "get-file-info"]);
    let string = json!({"type": "string"});
    assert_eq!(tools.tool("read-file").unwrap().input_schema, object(json!({"path": string}), &["path"]));
    assert_eq!(
        tools.tool("search-file").unwrap().input_schema,
        object(json!({"path": string, "pattern": string}), &["path", "pattern"])
    );
    assert_eq!(
        tools.tool("list-directory").unwrap().output_schema,
        Some(result_schema(json!({"type": "array", "items": string})))
    );

    let (structured, _) =
        returned(&common::call(&runtime, "list-directory", json!({"path": "/workspace"})).await);
    assert_eq!(structured, Some(json!({"result": ["[DIR] notes", "[FILE] readme.md"]})));
    let (structured, texts) =
        returned(&common::call(&runtime, "read-file", json!({"path": "/workspace/notes/todo.txt"})).await);
    assert_eq!(structured, Some(json!({"result": "water the plants\n"})));
    assert_eq!(texts, ["water the plants\n"]);
    let (_, texts) = returned(
        &common::call(&runtime, "search-file", json!({"path": "/workspace", "pattern": "TODO"})).await,
    );
    assert_eq!(texts, ["/workspace/notes/todo.txt"]);
    // Outside its mount there is nothing: the guest's own error, as an error result.
    let report = common::call(&runtime, "read-file", json!({"path": "/etc/passwd"})).await;
    assert!(error_text(&report).starts_with("Failed to read file: "), "{:?}", report.outcome);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_tells_a_cordon_component_from_a_plain_one_and_shows_their_tools() {
    let cordon_report =
        cordon::inspect::inspect(&cordon::paths::example_tools(), None).await.unwrap().to_string();
    let lines: Vec<&str> = cordon_report.lines().collect();
    assert_eq!(
        lines[1],
        "world: Cordon tool component (cordon:tool/plugin, exports cordon:tool/tool@0.2.0; Cordon 0.2.0)"
    );
    assert_eq!(lines[2], "imports (as served without a config, with nothing granted):");
    assert!(
        lines.iter().any(|line| line.starts_with("  cordon:tool/host@0.2.0: Cordon's host interface")),
        "{cordon_report}"
    );
    assert!(
        lines.iter().any(|line| line.ends_with(": every request is denied: no `allow_http` granted")
            && line.starts_with("  wasi:http/outgoing-handler@")),
        "{cordon_report}"
    );
    assert!(lines.contains(&"exports:") && lines.contains(&"  cordon:tool/tool@0.2.0"), "{cordon_report}");
    let echo = lines.iter().position(|line| line.starts_with("  echo: ")).expect("the echo tool");
    assert!(lines[echo + 1].starts_with("    input schema: {"), "{cordon_report}");
    assert!(!cordon_report.contains("REFUSED"), "{cordon_report}");

    // A 0.1.0 component is told apart from a 0.2.0 one.
    let legacy = cordon::inspect::inspect(&guest("legacy-tool.wasm"), None).await.unwrap().to_string();
    assert_eq!(
        legacy.lines().nth(1),
        Some(
            "world: Cordon tool component (cordon:tool/plugin, exports cordon:tool/tool@0.1.0; Cordon 0.1.0)"
        ),
        "{legacy}"
    );

    let plain = cordon::inspect::inspect(&guest("plain-kinds.wasm"), None).await.unwrap().to_string();
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(
        lines[1],
        "world: plain component (exports typed functions, no Cordon world): each function is a tool, stopped \
         like any other; there is no cleanup to run"
    );
    assert!(lines.contains(&"  cordon-examples:plain/kinds"), "{plain}");
    let negate = lines.iter().position(|line| *line == "  kinds.negate").expect("the negate tool");
    assert_eq!(
        lines[negate + 1],
        r#"    input schema: {"additionalProperties":false,"properties":{"value":{"type":"boolean"}},"required":["value"],"type":"object"}"#
    );
    assert_eq!(
        lines[negate + 2],
        r#"    output schema: {"additionalProperties":false,"properties":{"result":{"type":"boolean"}},"required":["result"],"type":"object"}"#
    );
    assert!(!plain.contains("left out"), "{plain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_with_a_config_shows_the_grants_and_what_each_import_will_find() {
    let dir = common::fresh_dir("plain-inspect");
    let workspace = dir.join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let config = dir.join("cordon.toml");
    std::fs::write(
        &config,
        format!(
            "[[components]]\nname = \"files\"\npath = {:?}\n[[components.mounts]]\nhost = \"workspace\"\nguest = \"/workspace\"\nmode = \"ro\"\n",
            guest("wassette-filesystem.wasm").display().to_string()
        ),
    )
    .unwrap();
    let report = cordon::inspect::inspect(&guest("wassette-filesystem.wasm"), Some(&config))
        .await
        .unwrap()
        .to_string();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[2], format!("imports (with the grants of component files in {}):", config.display()));
    assert!(
        lines.iter().any(|line| line.starts_with("  wasi:filesystem/preopens@")
            && line.ends_with(": the granted data directory and mounts only")),
        "{report}"
    );
    assert!(
        lines.iter().any(|line| line.starts_with("  wasi:cli/environment@")
            && line.ends_with(": an empty environment: no `env` or `secrets` granted")),
        "{report}"
    );
    let grants =
        lines.iter().position(|line| line.starts_with("grants (component files in ")).expect("grants");
    assert_eq!(lines[grants + 1], "  data_dir: none");
    assert_eq!(lines[grants + 3], format!("    {} at /workspace (ro)", workspace.display()));
    for tool in ["  list-directory", "  read-file", "  search-file", "  get-file-info"] {
        assert!(lines.contains(&tool), "{tool} missing from {report}");
    }

    // The same component without a config has no file system.
    let bare = cordon::inspect::inspect(&guest("wassette-filesystem.wasm"), None).await.unwrap().to_string();
    assert!(
        bare.lines().any(|line| line.starts_with("  wasi:filesystem/preopens@")
            && line.ends_with(": no file system: no `data_dir` or `[[components.mounts]]` granted")),
        "{bare}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn imports_cordon_does_not_provide_are_refused() {
    use cordon::inspect::{ImportVerdict, import_verdict};
    assert!(matches!(import_verdict("acme:db/query@1.0.0", None), ImportVerdict::Refused(_)));
    assert!(matches!(import_verdict("cordon:tool/host@0.3.0", None), ImportVerdict::Refused(_)));
    assert!(matches!(import_verdict("cordon:tool/host@0.2.0", None), ImportVerdict::Provided(_)));
    assert!(matches!(import_verdict("wasi:io/poll@0.3.0", None), ImportVerdict::Refused(_)));
    assert_eq!(import_verdict("wasi:io/poll@0.2.6", None), ImportVerdict::Provided("provided"));
    assert!(
        matches!(import_verdict("wasi:sockets/tcp@0.2.6", None), ImportVerdict::Empty(why) if why.starts_with("sockets are always refused"))
    );
}

/// A type can name another type many times over: 17 tuples, each of two of the one
/// before, declare in a few hundred bytes a parameter of 131,072 `u8`s, whose schema built
/// whole would be hundreds of thousands of JSON objects (and past 20 of them, gigabytes).
/// Its schema is counted as it is built and the function is left out, with the reason, as
/// soon as it is too large: loading a hostile component stays cheap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_whose_schema_would_explode_is_left_out_before_it_is_built() {
    let mut types = String::from("(type $t0 (tuple u8 u8))\n");
    for level in 1..17 {
        types.push_str(&format!("(type $t{level} (tuple $t{below} $t{below}))\n", below = level - 1));
    }
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "f") (param i32))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 0))
  (core instance $i (instantiate $m))
  {types}
  (func (export "big") (param "x" $t16)
    (canon lift (core func $i "f") (memory $i "memory") (realloc (func $i "realloc"))))
)"#
    );
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let started = std::time::Instant::now();
    let error = runtime.load_bytes("explode", wat.as_bytes(), ComponentOptions::default()).await.unwrap_err();
    assert!(error.problem.contains("function big left out"), "{}", error.problem);
    assert!(error.problem.contains("too large to describe"), "{}", error.problem);
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}
