//! A component in the shape of wassette's `filesystem-rs` example: the same WIT world
//! (`component:filesystem2`, world `fs`, four functions exported at the top level, each
//! returning `result<_, string>`), built with wit-bindgen and knowing nothing of Cordon.
//! Cordon serves it unchanged; the directories it may read are the operator's mounts.

wit_bindgen::generate!({ path: "wit", world: "fs" });

use std::path::{Path, PathBuf};

struct Filesystem;

impl Guest for Filesystem {
    fn list_directory(path: String) -> Result<Vec<String>, String> {
        let entries = std::fs::read_dir(resolve(&path)?)
            .map_err(|error| format!("Failed to read directory: {error}"))?;
        let mut listing = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => {
                    let tag = match entry.file_type() {
                        Ok(kind) if kind.is_dir() => "[DIR]",
                        Ok(_) => "[FILE]",
                        Err(_) => "[UNKNOWN]",
                    };
                    listing.push(format!("{tag} {}", entry.file_name().to_string_lossy()));
                }
                Err(error) => listing.push(format!("Error reading entry: {error}")),
            }
        }
        listing.sort();
        Ok(listing)
    }

    fn read_file(path: String) -> Result<String, String> {
        std::fs::read_to_string(resolve(&path)?).map_err(|error| format!("Failed to read file: {error}"))
    }

    fn search_file(path: String, pattern: String) -> Result<String, String> {
        let mut found = Vec::new();
        search(&resolve(&path)?, &pattern.to_lowercase(), &mut found)
            .map_err(|error| format!("Failed to search directory: {error}"))?;
        found.sort();
        Ok(found.join("\n"))
    }

    fn get_file_info(path: String) -> Result<String, String> {
        let metadata =
            std::fs::metadata(resolve(&path)?).map_err(|error| format!("Failed to get metadata: {error}"))?;
        let kind = if metadata.is_dir() { "directory" } else { "file" };
        Ok(format!("{kind}, {} bytes, read-only: {}", metadata.len(), metadata.permissions().readonly()))
    }
}

/// `~` and `~/…` are under `$HOME`; any other path is taken as it is.
fn resolve(path: &str) -> Result<PathBuf, String> {
    match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let home =
                std::env::var("HOME").map_err(|_| "Cannot determine home directory from $HOME".to_owned())?;
            Ok(Path::new(&home).join(rest.trim_start_matches('/')))
        }
        _ => Ok(PathBuf::from(path)),
    }
}

fn search(dir: &Path, pattern: &str, found: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().to_lowercase();
        if name.contains(pattern) {
            found.push(path.to_string_lossy().into_owned());
        }
        if path.is_dir() {
            search(&path, pattern, found)?;
        }
    }
    Ok(())
}

export!(Filesystem);
