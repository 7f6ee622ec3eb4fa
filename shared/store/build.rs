//! Resolves `-- @include "name"` directives in `lua/*.lua` against `lua/includes/name.lua`
//! (BullMQ's approach): each helper is pasted once per script, before first use, and include
//! cycles fail the build. The resolved scripts land in OUT_DIR for `include_str!`.
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
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("lua") {
            continue;
        }
        let mut included = HashSet::new();
        let mut stack = Vec::new();
        let resolved = resolve(&path, &lua_dir.join("includes"), &mut included, &mut stack);
        let name = path.file_name().map(|n| n.to_owned()).unwrap_or_default();
        if let Err(err) = fs::write(out_dir.join(name), resolved) {
            panic!("cannot write resolved script: {err}");
        }
    }
}

fn resolve(
    path: &Path,
    includes: &Path,
    included: &mut HashSet<String>,
    stack: &mut Vec<String>,
) -> String {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) => panic!("cannot read {}: {err}", path.display()),
    };
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
