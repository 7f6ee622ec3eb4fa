//! Resolves `-- @include "name"` directives in `lua/*.lua` against `lua/includes/name.lua`
//! (BullMQ's approach): each helper is pasted once per script, before first use, and include
//! cycles fail the build. The resolved scripts land in OUT_DIR for `include_str!`.
//!
//! For the task store's Redis Functions library (`src/redis/functions.rs`) it also writes each
//! script's body without its includes (`name.body.lua`) and every helper once, each after the
//! helpers it includes (`includes.lua`): the library defines the helpers once, at load, instead
//! of once per call.
//!
//! Hand-written because no crate does this for Lua; it is a few lines of text substitution.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let lua_dir = PathBuf::from("lua");
    println!("cargo:rerun-if-changed=lua");
    let out_dir = match std::env::var("OUT_DIR") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => panic!("OUT_DIR is not set"),
    };
    let entries = match fs::read_dir(&lua_dir) {
        Ok(entries) => entries,
        Err(err) => panic!("cannot read lua/: {err}"),
    };
    let includes = lua_dir.join("includes");
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("lua") {
            continue;
        }
        let mut included = HashSet::new();
        let mut stack = Vec::new();
        let resolved = resolve(&path, &includes, &mut included, &mut stack);
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        write(&out_dir.join(&name), &resolved);
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        write(&out_dir.join(format!("{stem}.body.lua")), &body(&path));
    }
    write(&out_dir.join("includes.lua"), &all_includes(&includes));
}

fn write(path: &Path, text: &str) {
    if let Err(err) = fs::write(path, text) {
        panic!("cannot write {}: {err}", path.display());
    }
}

/// A script without its include lines.
fn body(path: &Path) -> String {
    let text = read(path);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if !line.trim().starts_with("-- @include \"") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every helper once, in name order, each after the helpers it includes.
fn all_includes(includes: &Path) -> String {
    let entries = match fs::read_dir(includes) {
        Ok(entries) => entries,
        Err(err) => panic!("cannot read {}: {err}", includes.display()),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            (path.extension().and_then(|e| e.to_str()) == Some("lua"))
                .then(|| path.file_stem()?.to_str().map(str::to_owned))
                .flatten()
        })
        .collect();
    names.sort();
    let mut directives = String::new();
    for name in names {
        directives.push_str(&format!("-- @include \"{name}\"\n"));
    }
    let mut included = HashSet::new();
    let mut stack = Vec::new();
    resolve_text(&directives, includes, &mut included, &mut stack)
}

fn resolve(
    path: &Path,
    includes: &Path,
    included: &mut HashSet<String>,
    stack: &mut Vec<String>,
) -> String {
    resolve_text(&read(path), includes, included, stack)
}

fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) => panic!("cannot read {}: {err}", path.display()),
    }
}

fn resolve_text(
    text: &str,
    includes: &Path,
    included: &mut HashSet<String>,
    stack: &mut Vec<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let Some(name) = line
            .trim()
            .strip_prefix("-- @include \"")
            .and_then(|rest| rest.strip_suffix('"'))
        else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        if stack.iter().any(|open| open == name) {
            panic!("include cycle: {} -> {name}", stack.join(" -> "));
        }
        if !included.insert(name.to_owned()) {
            continue;
        }
        stack.push(name.to_owned());
        let helper = resolve(
            &includes.join(format!("{name}.lua")),
            includes,
            included,
            stack,
        );
        stack.pop();
        out.push_str(&helper);
    }
    out
}
