//! How a bench starts and ends: the `--bench` guard, facts about the machine, its JSON file.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Res;

/// `cargo bench` passes `--bench`; `cargo test --benches` / `--all-targets` runs a bench
/// binary without it, and a benchmark is not a test: it should do nothing then (this prints
/// `note` and returns false).
pub fn bench_requested(note: &str) -> bool {
    let requested = std::env::args().any(|arg| arg == "--bench");
    if !requested {
        eprintln!("{note}");
    }
    requested
}

/// CPUs this process may use.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// The CPU's model name from `/proc/cpuinfo` (`?` where it cannot be read).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

/// `/proc/loadavg`, trimmed.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Writes the bench's report to `BENCH_OUT` when it is set.
pub fn write_json(path: Option<&str>, report: &Value) -> Res<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(report)?)?;
        eprintln!("wrote {path}");
    }
    Ok(())
}

/// The directory of the services' logs, `<TMPDIR>/<prefix>-<pid>` (`scripts/bench-report` points
/// TMPDIR into its own temporary directory), removed with what is in it on drop.
pub struct LogDir(PathBuf);

impl LogDir {
    pub fn create(prefix: &str) -> Res<LogDir> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(LogDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
