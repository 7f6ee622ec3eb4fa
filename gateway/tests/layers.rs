//! The gateway's layering holds: the two protocol adapters (`src/lucid/`, the Lucid profile,
//! and `src/a2a/`, the A2A bindings) never import each other, and the HTTP plumbing
//! (`src/http/`) imports neither, so a change to one protocol cannot reach into the other.
//! What they share lives in the core (`src/core/`), which imports neither adapter nor the
//! console, or in the plumbing, which imports no other layer (see `src/lib.rs`).

use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The lines under `src/<layer>` that name a module of `forbidden` as `crate::<module>`,
/// `super::super::<module>` or inside a grouped `crate::{...}` import, comments left out.
fn offenders(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    let mut found = Vec::new();
    for file in sources(&root) {
        let text = fs::read_to_string(&file).unwrap_or_default();
        // Grouped imports: `use crate::{core, lucid::x}`, on one line or several.
        for group in text.split("crate::{").skip(1) {
            let names = group.split('}').next().unwrap_or_default();
            for module in forbidden {
                let named = names
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| word == *module);
                if named {
                    found.push(format!("{}: crate::{{{names}}}", file.display()));
                }
            }
        }
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for module in forbidden {
                if code.contains(&format!("crate::{module}"))
                    || code.contains(&format!("super::super::{module}"))
                {
                    found.push(format!(
                        "{}:{}: {}",
                        file.display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn the_a2a_adapter_does_not_import_the_lucid_routes() {
    let found = offenders("a2a", &["lucid", "console"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_lucid_routes_do_not_import_the_a2a_adapter() {
    let found = offenders("lucid", &["a2a", "console"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_core_imports_no_adapter_and_not_the_console() {
    let found = offenders("core", &["a2a", "lucid", "console", "host", "embedded"]);
    assert!(found.is_empty(), "{found:#?}");
}

/// The payment gate reads the state through `PayContext` and creates its tasks through
/// `core::create`: the state holds the gate, so `state -> pay -> admit -> state` is no circle.
#[test]
fn the_payment_gate_does_not_import_the_state() {
    let found = offenders("core/pay", &["core::state", "core::admit"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_http_plumbing_imports_no_other_layer() {
    // The bottom layer: the core builds on it (its errors, origins, documents), so an import
    // the other way would be a circle.
    let found = offenders("http", &["core", "a2a", "lucid", "console"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn prices_do_not_import_the_payment_gate() {
    // The gate reads prices; prices know nothing of how they are paid.
    let found = offenders("core/prices", &["core::pay"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_layers_are_where_the_checks_look() {
    // A renamed folder would make the checks above pass vacuously.
    for layer in ["a2a", "lucid", "http", "core", "core/pay", "core/prices"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(layer);
        assert!(!sources(&root).is_empty(), "no sources under src/{layer}");
    }
}
