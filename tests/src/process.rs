//! Real service processes for multi-process tests: find the workspace's binaries, start them
//! with their output captured to a log file, signal them (`SIGKILL`, `SIGTERM`, `SIGSTOP`,
//! `SIGCONT`) and always stop them on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot find or build the {0} binary: {1}")]
    Binary(String, String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("cannot signal {name}: {source}")]
    Signal { name: String, source: nix::Error },
    #[error("{name} did not exit within {timeout:?}")]
    Timeout { name: String, timeout: Duration },
}

/// The workspace's target directory for this build profile: where a test binary
/// (`target/<profile>/deps/<test>`) or a harness binary such as `chaos`
/// (`target/<profile>/chaos`) lives.
fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    if dir.file_name().and_then(|name| name.to_str()) == Some("deps") {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir.to_path_buf())
    }
}

/// Path of a workspace binary (`gateway`, `worker`, `taskctl`). The first call in a test
/// process for each binary runs `cargo build --bin <name>` (a no-op when up to date): `cargo test -p cluster-tests`
/// alone would not rebuild the binaries, and a stale one would test yesterday's code.
/// `text` without its terminal colour codes (ANSI CSI sequences: `ESC [` parameters, ended by
/// a letter), as the services and `redis-cli` colour what they print.
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn binary(name: &str) -> Result<PathBuf, ProcessError> {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let dir =
        profile_dir().ok_or_else(|| ProcessError::Binary(name.into(), "no target dir".into()))?;
    let path = dir.join(name);
    let mut built_names = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let built: Result<(), String> = if built_names.iter().any(|built| built == name) {
        Ok(())
    } else {
        let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        command.args(["build", "--workspace", "--quiet", "--bin", name]);
        if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
            command.arg("--release");
        }
        match command.status() {
            Ok(status) if status.success() => {
                built_names.push(name.to_owned());
                Ok(())
            }
            Ok(status) => Err(format!("cargo build exited with {status}")),
            Err(err) => Err(err.to_string()),
        }
    };
    drop(built_names);
    match built {
        Ok(()) if path.exists() => Ok(path),
        Ok(()) => Err(ProcessError::Binary(
            name.into(),
            format!("{} is missing", path.display()),
        )),
        Err(err) => Err(ProcessError::Binary(name.into(), err)),
    }
}

/// A running service process; stopped with SIGKILL on drop if still alive.
pub struct ServiceProcess {
    name: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ServiceProcess {
    /// Starts `binary` with `args` and `envs`; stdout and stderr go to a log file.
    pub fn start(
        binary_name: &str,
        name: &str,
        args: &[&str],
        envs: &[(&str, String)],
    ) -> Result<ServiceProcess, ProcessError> {
        let path = binary(binary_name)?;
        let dir = tempfile::tempdir().map_err(|source| ProcessError::Io {
            context: "creating a log directory".into(),
            source,
        })?;
        let log = dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|source| ProcessError::Io {
            context: "creating the log file".into(),
            source,
        })?;
        let err_file = file.try_clone().map_err(|source| ProcessError::Io {
            context: "sharing the log file".into(),
            source,
        })?;
        let mut command = Command::new(&path);
        command
            .args(args)
            .env_remove("REDIS_URL")
            .env("RUST_LOG", "info,worker=debug")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err_file);
        if binary_name == "worker" {
            // Suites count on every slot taking any entrypoint (a worker of 4 running 4
            // sleeps at once): the fair share of slots is off unless a test sets it.
            command.env("WORKER_ENTRYPOINT_SHARE", "100");
        }
        if binary_name == "gateway" {
            // The suites send many requests from 127.0.0.1, and many paid ones from one Anvil
            // payer: fair admission's per-address and per-payer limits are off unless a test
            // sets RATE_PER_ADDRESS or RATE_PER_PAYER itself.
            command
                .env("RATE_PER_ADDRESS", "0")
                .env("RATE_PER_PAYER", "0");
            // Likewise the per-owner, per-address and retained-task bounds: suites and the
            // chaos load put thousands of tasks on a few tokens, all from 127.0.0.1, and check
            // every acknowledged one at the end. Tests of the bounds set them themselves.
            command.env("MAX_LIVE_PER_OWNER", "0");
            command.env("MAX_LIVE_PER_ADDRESS", "0");
            command.env("MAX_RETAINED_PER_OWNER", "0");
            command.env("MAX_RETAINED_TASKS", "0");
            command.env("MAX_RETAINED_BYTES", "0");
        }
        for (key, value) in envs {
            command.env(key, value);
        }
        let child = command.spawn().map_err(|source| ProcessError::Io {
            context: format!("starting {}", path.display()),
            source,
        })?;
        Ok(ServiceProcess {
            name: name.to_owned(),
            child: Some(child),
            log,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything the process printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        let Some(pid) = self.pid() else { return Ok(()) };
        let pid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        kill(pid, signal).map_err(|source| ProcessError::Signal {
            name: self.name.clone(),
            source,
        })
    }

    /// SIGKILL and reap: a crash, nothing runs after it.
    pub fn kill(&mut self) -> Result<(), ProcessError> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }

    /// Waits for the process to exit on its own (after SIGTERM, say).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, ProcessError> {
        let Some(child) = self.child.as_mut() else {
            return Err(ProcessError::Timeout {
                name: self.name.clone(),
                timeout,
            });
        };
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Ok(status);
                }
                Ok(None) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    return Err(ProcessError::Timeout {
                        name: self.name.clone(),
                        timeout,
                    });
                }
                Err(source) => {
                    return Err(ProcessError::Io {
                        context: "waiting for exit".into(),
                        source,
                    });
                }
            }
        }
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        // A stopped process must be continued to die cleanly from SIGKILL's reaping view.
        let _ = self.signal(Signal::SIGCONT);
        let _ = self.kill();
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log());
        }
    }
}
