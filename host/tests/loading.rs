//! Bad components get a clear error naming the file and the problem, never a panic.

use crate::common;

use common::*;
use cordon::runtime::{ComponentOptions, ComponentSource, Environment, Outcome, Runtime};

async fn load_error(name: &str, bytes: &[u8]) -> String {
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let error = runtime
        .load_bytes(name, bytes, ComponentOptions::default())
        .await
        .err()
        .unwrap_or_else(|| panic!("{name} should not load"));
    let message = error.to_string();
    assert!(message.starts_with(&format!("{name}: ")), "the error names the component: {message}");
    message
}

#[tokio::test]
async fn a_file_that_is_not_wasm_is_refused() {
    let message = load_error("notes.txt", b"hello, I am text").await;
    assert!(message.contains("not a WebAssembly file"), "{message}");
}

#[tokio::test]
async fn a_core_module_is_refused_with_a_hint() {
    let module = wat::parse_str("(module (func (export \"run\")))").unwrap();
    let message = load_error("core.wasm", &module).await;
    assert!(message.contains("core WebAssembly module, not a component"), "{message}");
    assert!(message.contains("wasm32-wasip2"), "{message}");
}

#[tokio::test]
async fn a_component_of_another_world_is_refused() {
    let component = wat::parse_str("(component)").unwrap();
    let message = load_error("empty.wasm", &component).await;
    assert!(message.contains("does not implement the cordon:tool@0.1.0 `plugin` world"), "{message}");
    assert!(message.contains("cordon_guest::export_plugin!(YourPlugin);"), "the fix is named: {message}");
}

#[tokio::test]
async fn a_component_that_imports_something_unknown_is_refused() {
    let component =
        wat::parse_str(r#"(component (import "acme:secret/keys" (instance (export "get" (func)))))"#)
            .unwrap();
    let message = load_error("greedy.wasm", &component).await;
    assert!(message.contains("imports something Cordon does not provide"), "{message}");
}

#[tokio::test]
async fn a_missing_file_is_reported_with_its_path() {
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let error = runtime
        .load_file(std::path::Path::new("/nonexistent/tool.wasm"), ComponentOptions::default())
        .await
        .unwrap_err();
    assert!(error.to_string().starts_with("/nonexistent/tool.wasm: cannot read"), "{error}");
}

#[tokio::test]
async fn a_schema_that_is_not_json_is_refused() {
    let guest = WatGuest::new("broken", DONE_BODY).input_schema("{not json");
    let message = load_error("broken", &guest.component()).await;
    assert!(message.contains("tool \"broken\": input schema is not valid JSON"), "{message}");
}

#[tokio::test]
async fn a_schema_over_the_size_limit_is_refused() {
    // Schemas are evaluated in host code no epoch interrupts: their size is bounded at load.
    let padding = "x".repeat(cordon::runtime::MAX_SCHEMA_BYTES);
    let schema = format!(r#"{{"type":"object","description":"{padding}"}}"#);
    let guest = WatGuest::new("huge", DONE_BODY).input_schema(&schema).memory_pages(3);
    let message = load_error("huge", &guest.component()).await;
    assert!(
        message.contains("tool \"huge\": input schema is 65") && message.contains("limit of 65536"),
        "{message}"
    );
}

#[tokio::test]
async fn a_schema_that_is_not_an_object_is_refused() {
    let guest = WatGuest::new("stringy", DONE_BODY).input_schema(r#"{"type":"string"}"#);
    let message = load_error("stringy", &guest.component()).await;
    assert!(message.contains("must be a JSON object with `\"type\": \"object\"`"), "{message}");
}

#[tokio::test]
async fn x_mcp_header_annotations_that_break_the_rules_are_refused() {
    let cases = [
        (
            r#"{"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}"#,
            "not a string, integer or boolean",
        ),
        (r#"{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"Re gion"}}}"#, "HTTP token"),
        (r#"{"type":"object","properties":{"r":{"type":"string","x-mcp-header":""}}}"#, "HTTP token"),
        (
            r#"{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Region"},
               "b":{"type":"string","x-mcp-header":"REGION"}}}"#,
            "used twice",
        ),
        (
            r#"{"type":"object","properties":{"list":{"type":"array","items":{"type":"string","x-mcp-header":"Item"}}}}"#,
            "reached from the root through `properties`",
        ),
        (
            r#"{"type":"object","anyOf":[{"properties":{"r":{"type":"string","x-mcp-header":"R"}}}]}"#,
            "reached from the root through `properties`",
        ),
    ];
    for (schema, problem) in cases {
        let guest = WatGuest::new("headed", DONE_BODY).input_schema(schema);
        let message = load_error("headed", &guest.component()).await;
        assert!(
            message.contains("tool \"headed\": input schema: ") && message.contains(problem),
            "{schema}: {message}"
        );
    }
    // Nested properties, and a property that is merely named `x-mcp-header`, are fine.
    let schema = r#"{"type":"object","properties":{"x-mcp-header":{"type":"string"},
        "where":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}}"#;
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let guest = WatGuest::new("headed", DONE_BODY).input_schema(schema);
    runtime.load_bytes("headed", &guest.component(), ComponentOptions::default()).await.unwrap();
    let tools = runtime.snapshot();
    let headers = &tools.tool("headed").unwrap().param_headers;
    assert_eq!(headers.len(), 1);
    assert_eq!((headers[0].name.as_str(), headers[0].path.join(".")), ("Region", "where.region".into()));
}

#[tokio::test]
async fn a_tool_name_outside_the_mcp_alphabet_is_refused() {
    let guest = WatGuest::new("bad name", DONE_BODY);
    let message = load_error("bad", &guest.component()).await;
    assert!(message.contains("may only use"), "{message}");
}

#[tokio::test]
async fn two_components_offering_the_same_tool_are_refused() {
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let guest = WatGuest::new("twin", DONE_BODY).component();
    runtime.load_bytes("first", &guest, ComponentOptions::default()).await.unwrap();
    let error = runtime.load_bytes("second", &guest, ComponentOptions::default()).await.unwrap_err();
    assert!(error.to_string().contains("also offered by component first"), "{error}");
}

/// A resource, a resource template and a prompt are one component's too: a request for
/// one must reach exactly one. Second copies of the hostile component, their tools renamed,
/// then their resources, then their template, clash on the first's next feature; renamed
/// throughout, the copy loads beside it.
#[tokio::test]
async fn two_components_offering_the_same_resource_template_or_prompt_are_refused() {
    let mut runtime = Runtime::new(settings(4)).unwrap();
    runtime.load_named_file("first", &hostile(), ComponentOptions::default()).await.unwrap();
    let twin = |renamed: &str| {
        let environment =
            vec![("HOSTILE_PREFIX".into(), "twin_".into()), ("HOSTILE_RENAMED".into(), renamed.into())];
        ComponentOptions {
            environment: Environment::new(environment).unwrap(),
            ..ComponentOptions::default()
        }
    };
    for (renamed, clash) in [
        ("tools", r#"resource "hostile://item/0""#),
        ("tools,resources", r#"resource template "hostile://spin/{label}""#),
        ("tools,resources,templates", r#"prompt "spin""#),
    ] {
        let error = runtime.load_named_file("twin", &hostile(), twin(renamed)).await.unwrap_err().to_string();
        assert!(error.contains(&format!("{clash} is also offered by component first")), "{renamed}: {error}");
        // What it renamed would have loaded: the error names none of it.
        assert!(!error.contains("tool \""), "{renamed}: {error}");
        let loaded: Vec<String> = runtime.snapshot().component_names().map(str::to_owned).collect();
        assert_eq!(loaded, ["first"], "{renamed}");
    }
    runtime.load_named_file("twin", &hostile(), twin("tools,resources,templates,prompts")).await.unwrap();
    let loaded: Vec<String> = runtime.snapshot().component_names().map(str::to_owned).collect();
    assert_eq!(loaded, ["first", "twin"]);
}

/// A read goes to one component, so a template of one may not match what another's
/// template or resource list serves: with `{kind}` in place of `spin`, a copy of the
/// hostile component would take the first's reads. Each overlap is refused at load, in
/// either order, naming both sides and a URI they share; a template that shares none
/// loads beside it.
#[tokio::test]
async fn a_template_that_could_take_another_components_reads_is_refused() {
    let copy = |template: &str| {
        let environment = vec![
            ("HOSTILE_PREFIX".into(), "twin_".into()),
            ("HOSTILE_RENAMED".into(), "tools,resources,prompts".into()),
            ("HOSTILE_TEMPLATE".into(), template.into()),
        ];
        ComponentOptions {
            environment: Environment::new(environment).unwrap(),
            ..ComponentOptions::default()
        }
    };
    let mut runtime = Runtime::new(settings(4)).unwrap();
    runtime.load_named_file("first", &hostile(), ComponentOptions::default()).await.unwrap();
    for (template, clash) in [
        (
            "hostile://{kind}/{label}",
            r#"resource template "hostile://{kind}/{label}" overlaps resource template "hostile://spin/{label}" of component first: both match "hostile://spin/x""#,
        ),
        (
            "{scheme}://{host}/{label}",
            r#"overlaps resource template "hostile://spin/{label}" of component first"#,
        ),
        (
            "hostile://item/{n}",
            r#"resource template "hostile://item/{n}" matches resource "hostile://item/0" of component first"#,
        ),
    ] {
        let error =
            runtime.load_named_file("twin", &hostile(), copy(template)).await.unwrap_err().to_string();
        assert!(error.contains(clash), "{template}: {error}");
        let loaded: Vec<String> = runtime.snapshot().component_names().map(str::to_owned).collect();
        assert_eq!(loaded, ["first"], "{template}");
    }
    // The other way round: the first's resources meet a template loaded before them.
    let mut runtime = Runtime::new(settings(4)).unwrap();
    runtime.load_named_file("twin", &hostile(), copy("hostile://item/{n}")).await.unwrap();
    let error = runtime.load_named_file("first", &hostile(), ComponentOptions::default()).await.unwrap_err();
    assert!(
        error.to_string().contains(
            r#"resource "hostile://item/0" matches resource template "hostile://item/{n}" of component twin"#
        ),
        "{error}"
    );
    // Sharing no URI, it loads.
    let mut runtime = Runtime::new(settings(4)).unwrap();
    runtime.load_named_file("first", &hostile(), ComponentOptions::default()).await.unwrap();
    runtime.load_named_file("twin", &hostile(), copy("hostile://{kind}/{label}/more")).await.unwrap();
    let loaded: Vec<String> = runtime.snapshot().component_names().map(str::to_owned).collect();
    assert_eq!(loaded, ["first", "twin"]);
}

/// `load_all` (what `serve` and `check` load a config with) compiles ahead of the
/// component it loads, yet loads in order: a clash names the earlier component, every
/// component is tried, and the failures come back in the config's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_a_config_keeps_its_order_and_tries_every_component() {
    let dir = fresh_dir("load-all");
    let source = |name: &str, tool: Option<&str>| {
        let path = dir.join(format!("{name}.wasm"));
        if let Some(tool) = tool {
            std::fs::write(&path, WatGuest::new(tool, DONE_BODY).component()).unwrap();
        }
        ComponentSource { name: name.into(), path, embedded: None, options: ComponentOptions::default() }
    };
    let sources = vec![
        source("first", Some("twin")),
        source("missing", None),
        source("second", Some("twin")),
        source("third", Some("solo")),
        source("not_wasm", None),
    ];
    std::fs::write(dir.join("not_wasm.wasm"), "not a component").unwrap();
    let mut runtime = Runtime::new(settings(4)).unwrap();
    let failed: Vec<String> = runtime.load_all(sources).await.iter().map(ToString::to_string).collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(failed[0].contains("missing.wasm") && failed[0].contains("cannot read"), "{failed:?}");
    assert!(
        failed[1].contains("second.wasm") && failed[1].contains("also offered by component first"),
        "{failed:?}"
    );
    assert!(failed[2].contains("not_wasm.wasm"), "{failed:?}");
    let loaded: Vec<String> = runtime.snapshot().component_names().map(str::to_owned).collect();
    assert_eq!(loaded, ["first", "third"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_returning_structured_output_that_is_not_json_is_an_invalid_result() {
    // ok(call-result) with structured = some("done"), which is not JSON.
    let body = "(drop (call $ok_text (i32.const 2000) (i32.const 4)))
        (i32.store8 (i32.const 3012) (i32.const 1))
        (i32.store (i32.const 3016) (i32.const 2000))
        (i32.store (i32.const 3020) (i32.const 4))
        (i32.const 3000)";
    let runtime = runtime_with(&[WatGuest::new("liar", body)], quick_limits()).await;
    let report = runtime.call("liar", &serde_json::json!({})).await.unwrap().run().await;
    match report.outcome {
        Outcome::InvalidResult(message) => assert!(message.contains("not JSON"), "{message}"),
        other => panic!("expected an invalid result, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_cache_survives_corruption() {
    let cache = scratch("cache-test");
    let _ = std::fs::remove_dir_all(&cache);
    let mut settings = settings(4);
    settings.engine.cache_dir = Some(cache.clone());
    let guest = WatGuest::new("cached", DONE_BODY).component();
    for round in 0..3 {
        let mut runtime = Runtime::new(settings.clone()).unwrap();
        runtime.load_bytes("cached", &guest, ComponentOptions::default()).await.unwrap();
        let report = runtime.call("cached", &serde_json::json!({})).await.unwrap().run().await;
        assert!(matches!(report.outcome, Outcome::Completed(_)), "round {round}: {:?}", report.outcome);
        let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|entry| entry.unwrap().path()).collect();
        assert_eq!(entries.len(), 1, "one entry per component and engine");
        // Corrupt the entry (round 0) or replace it with garbage (round 1) for the next round.
        let mut bytes = std::fs::read(&entries[0]).unwrap();
        if round == 0 {
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
        } else {
            bytes = b"not an artifact at all".to_vec();
        }
        std::fs::write(&entries[0], bytes).unwrap();
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// A cache entry is native code the server runs: one another user could have written (a
/// mode that lets them, a symlink) or one moved to another component's name is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_cache_uses_only_the_servers_own_entries_under_their_own_names() {
    use std::os::unix::fs::PermissionsExt;
    let cache = scratch("cache-trust");
    let _ = std::fs::remove_dir_all(&cache);
    let mut settings = settings(4);
    settings.engine.cache_dir = Some(cache.clone());
    let first = ("first", WatGuest::new("first", DONE_BODY).component());
    let second = ("second", WatGuest::new("second", DONE_BODY).component());
    // Load `guest` in a fresh runtime: whether its compile came from the cache.
    let hit = |guest: (&'static str, Vec<u8>)| {
        let settings = settings.clone();
        async move {
            let (name, guest) = guest;
            let mut runtime = Runtime::new(settings).unwrap();
            runtime.load_bytes(name, &guest, ComponentOptions::default()).await.unwrap();
            let report = runtime.call(name, &serde_json::json!({})).await.unwrap().run().await;
            assert!(matches!(report.outcome, Outcome::Completed(_)), "{:?}", report.outcome);
            runtime.compile_cache().hits() == 1
        }
    };
    assert!(!hit(first.clone()).await);
    assert!(hit(first.clone()).await, "the server's own entry is used");
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|entry| entry.unwrap().path()).collect();
    let first_entry = entries[0].clone();
    assert_eq!(std::fs::metadata(&first_entry).unwrap().permissions().mode() & 0o777, 0o600);

    // Writable by others: not used, and written again by the compile that follows.
    std::fs::set_permissions(&first_entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!hit(first.clone()).await, "an entry others may write was used");
    assert!(hit(first.clone()).await);

    // A symlink to the server's own valid entry: not followed.
    let moved = cache.join("elsewhere");
    std::fs::rename(&first_entry, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &first_entry).unwrap();
    assert!(!hit(first.clone()).await, "an entry reached through a symlink was used");

    // The first component's entry put in place of the second's: its digest names the first.
    assert!(!hit(second.clone()).await);
    let second_entry = std::fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path != &first_entry && path != &moved && path.extension().is_some_and(|ext| ext == "cwasm")
        })
        .unwrap();
    std::fs::copy(&moved, &second_entry).unwrap();
    std::fs::set_permissions(&second_entry, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!hit(second.clone()).await, "another component's entry passed for the second's");
    let _ = std::fs::remove_dir_all(&cache);
}
