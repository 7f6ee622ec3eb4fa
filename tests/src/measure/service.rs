//! The service processes a bench starts (gateway, workers): output to a log file, CPU ticks
//! read from `/proc`, SIGKILLed and reaped on drop, so that an error or a panic never leaves
//! one behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Res;
use super::cpu::process_ticks;

pub struct BenchProc {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl BenchProc {
    /// Spawns `command` (its program, arguments and environment set by the caller) with stdin
    /// closed and stdout and stderr to `log`, which is removed on drop.
    pub fn spawn(mut command: Command, name: &str, log: PathBuf) -> Res<BenchProc> {
        let file = std::fs::File::create(&log)?;
        let err_file = file.try_clone()?;
        command.stdin(Stdio::null()).stdout(file).stderr(err_file);
        let child = command.spawn().map_err(|err| {
            format!(
                "starting {}: {err}",
                PathBuf::from(command.get_program()).display()
            )
        })?;
        Ok(BenchProc {
            name: name.to_owned(),
            child: Some(child),
            log,
        })
    }

    /// Spawns the service binary `bin` as `name`, logging to `log_dir/<name>.log`. Its
    /// environment is `envs` alone: nothing of the bench's environment (N, WORKERS, a caller's
    /// REDIS_URL...) may reach the services, which read similarly named settings.
    pub fn service(
        bin: &Path,
        name: &str,
        log_dir: &Path,
        envs: &[(&str, String)],
    ) -> Res<BenchProc> {
        let mut command = Command::new(bin);
        // Benches load one gateway from 127.0.0.1 with few tokens and pay from one payer: fair
        // admission's per-address, per-payer and per-owner bounds are off (other services
        // ignore the settings).
        command
            .env_clear()
            .env("RATE_PER_ADDRESS", "0")
            .env("WORKER_ENTRYPOINT_SHARE", "100")
            .env("RATE_PER_PAYER", "0")
            .env("MAX_LIVE_PER_OWNER", "0")
            .env("MAX_LIVE_PER_ADDRESS", "0")
            .env("MAX_RETAINED_PER_OWNER", "0")
            .envs(envs.iter().map(|(k, v)| (k, v)));
        BenchProc::spawn(command, name, log_dir.join(format!("{name}.log")))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// CPU ticks (utime + stime) the process used so far.
    pub fn ticks(&self) -> u64 {
        self.pid()
            .and_then(|pid| process_ticks(&pid.to_string()))
            .unwrap_or(0)
    }

    /// The last 20 lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// An error with the end of the log when the process exited.
    pub fn check_alive(&mut self) -> Res<()> {
        let Some(child) = self.child.as_mut() else {
            return Err(format!("{} is gone", self.name).into());
        };
        match child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited with {status}; log tail:\n{}",
                self.name,
                self.log_tail()
            )
            .into()),
        }
    }

    pub fn sigterm(&self) {
        if let Some(pid) = self.pid() {
            let pid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
            let _ = kill(pid, Signal::SIGTERM);
        }
    }

    pub fn exited(&mut self) -> bool {
        !matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// SIGKILL and reap: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for BenchProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// SIGTERM to all (they drain and deregister), SIGKILL to those still running after `timeout`.
pub async fn terminate_all(procs: &mut [BenchProc], timeout: Duration) {
    for proc in procs.iter() {
        proc.sigterm();
    }
    let give_up = Instant::now() + timeout;
    while Instant::now() < give_up && !procs.iter_mut().all(BenchProc::exited) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for proc in procs.iter_mut() {
        proc.kill();
    }
}
