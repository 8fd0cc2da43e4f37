//! The module boundaries the design relies on, read from the source: `protocol` is a leaf
//! (it imports nothing else from the crate), and a transport hands messages to dispatch
//! and nothing else (it never reaches into the runtime).

use std::path::Path;

/// The code of every `.rs` file in `src/<dir>`, without comments, by file name.
fn code_of(dir: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "rs"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            // Doc links may name any module; only code couples them.
            let code: Vec<&str> = text.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
            (path.file_name().unwrap().to_string_lossy().into_owned(), code.join("\n"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no sources in {}", dir.display());
    files
}

/// Every `crate::…` path `code` names outside `allowed`, with the line it is on.
fn crate_paths_outside(code: &str, allowed: &[&str]) -> Vec<String> {
    code.lines()
        .filter(|line| {
            line.match_indices("crate::").any(|(at, _)| {
                let path = &line[at + "crate::".len()..];
                !allowed.iter().any(|module| path.starts_with(module))
            })
        })
        .map(|line| line.trim().to_owned())
        .collect()
}

#[test]
fn protocol_imports_nothing_else_from_the_crate() {
    for (file, code) in code_of("protocol") {
        let outside = crate_paths_outside(&code, &["protocol"]);
        assert!(outside.is_empty(), "protocol/{file} reaches outside protocol: {outside:#?}");
        // `super::super::…` would be the same coupling by another road.
        assert!(!code.contains("super::super"), "protocol/{file} reaches outside protocol through super");
    }
}

#[test]
fn transports_reach_the_server_through_dispatch_only() {
    for (file, code) in code_of("transport") {
        let runtime: Vec<&str> = code
            .lines()
            .filter(|line| line.contains("crate::runtime") || line.contains(".runtime()"))
            .map(str::trim)
            .collect();
        assert!(runtime.is_empty(), "transport/{file} uses the runtime directly: {runtime:#?}");
    }
}

#[test]
fn the_check_reads_what_it_checks() {
    // The filters above see these files at all, and would see an import.
    assert!(code_of("protocol").iter().any(|(file, _)| file == "mcp.rs"));
    assert!(code_of("transport").iter().any(|(file, _)| file == "http.rs"));
    let coupled = "use crate::runtime::ToolSpec;\nuse crate::protocol::jsonrpc;";
    assert_eq!(crate_paths_outside(coupled, &["protocol"]), ["use crate::runtime::ToolSpec;"]);
}
