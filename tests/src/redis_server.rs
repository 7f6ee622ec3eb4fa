//! A private `redis-server` for one test, always stopped.
//!
//! [`RedisServer::start`] picks a free loopback port (never 6379, where a system Redis may
//! listen), starts `redis-server` bound to `127.0.0.1` with its own temporary directory and log
//! file, and returns once the server answers `PING` *and* reports the process id of the child we
//! spawned (so a foreign server that happens to grab the port is never mistaken for ours).
//!
//! Dropping the [`RedisServer`] sends `SIGTERM`, escalates to `SIGKILL` after a timeout, reaps the
//! child and removes the directory. Drop also runs while a failing test unwinds, and then prints
//! the tail of the server log to help with the diagnosis.
//!
//! The process control methods ([`start`](RedisServer::start), [`restart`](RedisServer::restart),
//! [`stop`](RedisServer::stop), [`kill`](RedisServer::kill)) are synchronous and block for at most
//! a few seconds; they can be called from plain and from `#[tokio::test]` tests alike. The
//! helpers that talk to the server ([`client`](RedisServer::client),
//! [`info_commandstats`](RedisServer::info_commandstats)) are async.
//!
//! The server binary is `$REDIS_SERVER` when set, otherwise `redis-server` from `PATH`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// Name of the environment variable that overrides the `redis-server` binary.
pub const REDIS_SERVER_ENV: &str = "REDIS_SERVER";

/// Port a system Redis usually listens on; the harness never uses it.
const SYSTEM_REDIS_PORT: u16 = 6379;
/// Startup attempts with a fresh port when the chosen one was taken meanwhile.
const PORT_ATTEMPTS: u32 = 5;
/// Attempts to get the *same* port back on [`RedisServer::restart`].
const RESTART_ATTEMPTS: u32 = 10;
/// Default bound on the wait for the first `PING` answer.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `SIGTERM` may take before `SIGKILL` follows.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of log shown in errors and on test failure.
const LOG_TAIL_LINES: usize = 30;

const LOG_FILE: &str = "redis.log";
const OUTPUT_FILE: &str = "redis.out";
const PID_FILE: &str = "redis.pid";

/// Everything that can go wrong while running a private `redis-server`.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No `redis-server` binary could be located.
    #[error("redis-server not found: install it with `apt-get install -y redis-server` ({detail})")]
    NotFound {
        /// Where the harness looked.
        detail: String,
    },
    /// A file system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server process exited before it became ready.
    #[error("redis-server on port {port} exited during startup ({status}); log tail:\n{log_tail}")]
    Exited {
        /// Port it was started on.
        port: u16,
        /// Its exit status.
        status: String,
        /// Last lines of its log and output.
        log_tail: String,
    },
    /// The server did not answer `PING` in time.
    #[error(
        "redis-server on port {port} did not answer PING within {timeout:?} (last problem: {last_problem}); log tail:\n{log_tail}"
    )]
    NotReady {
        /// Port it was started on.
        port: u16,
        /// The bound that was exceeded.
        timeout: Duration,
        /// The last connection or protocol problem seen while polling.
        last_problem: String,
        /// Last lines of its log and output.
        log_tail: String,
    },
    /// Every attempt found its port taken by someone else.
    #[error(
        "redis-server could not get a free loopback port after {attempts} attempts; last log tail:\n{log_tail}"
    )]
    PortUnavailable {
        /// Attempts made.
        attempts: u32,
        /// Last lines of the last attempt's log and output.
        log_tail: String,
    },
    /// Sending a signal to the server failed.
    #[error("sending {signal} to redis-server (pid {pid}): {source}")]
    Signal {
        /// The signal.
        signal: Signal,
        /// The target process.
        pid: u32,
        /// The underlying error.
        #[source]
        source: nix::errno::Errno,
    },
    /// A Redis command sent by a helper failed.
    #[error("redis command failed: {0}")]
    Redis(#[from] redis::RedisError),
    /// The server answered something the harness does not understand.
    #[error("unexpected reply from redis-server: {0}")]
    Protocol(String),
}

impl HarnessError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// How to start a [`RedisServer`]; `RedisOptions::default()` is what [`RedisServer::start`] uses.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Enable the append-only file with `appendfsync always`, so that data survives
    /// [`RedisServer::restart`] and even [`RedisServer::kill`]. Without it, nothing is persisted.
    pub aof: bool,
    /// Extra command-line arguments, appended after the harness' own (so `--maxmemory 10mb` style
    /// directives override the defaults). Do not pass `--port`, `--bind`, `--dir`, `--logfile`,
    /// `--pidfile` or `--daemonize`: the harness relies on them.
    pub args: Vec<String>,
    /// Bound on the wait for readiness; 10 s when `None`.
    pub startup_timeout: Option<Duration>,
    /// The `redis-server` binary to run; `$REDIS_SERVER` or `PATH` lookup when `None`.
    pub binary: Option<PathBuf>,
}

impl RedisOptions {
    /// Sets [`RedisOptions::aof`].
    #[must_use]
    pub fn with_aof(mut self, aof: bool) -> Self {
        self.aof = aof;
        self
    }

    /// Appends one extra command-line argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets [`RedisOptions::startup_timeout`].
    #[must_use]
    pub fn with_startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = Some(timeout);
        self
    }

    /// Sets [`RedisOptions::binary`].
    #[must_use]
    pub fn with_binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }
}

/// A `redis-server` process private to one test, on `127.0.0.1:<port>` with its own directory.
///
/// Stopped (SIGTERM, then SIGKILL) and cleaned up when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    binary: PathBuf,
    options: RedisOptions,
    // Declared last: removed only after `Drop::drop` has stopped the process.
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server without persistence (`--save "" --appendonly no`).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions::default())
    }

    /// Starts a server with the given options.
    pub fn start_with(options: RedisOptions) -> Result<Self, HarnessError> {
        let binary = match &options.binary {
            Some(binary) => resolve_binary(
                binary.as_os_str().to_owned(),
                "RedisOptions::binary",
                REDIS_SERVER_ENV,
            )?,
            None => find_redis_server()?,
        };
        let dir = tempfile::Builder::new()
            .prefix("redis-harness-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating the redis-server directory", e))?;

        let mut log_tail = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            match spawn_ready(&binary, port, dir.path(), &options)? {
                Spawn::Ready(child) => {
                    return Ok(Self {
                        child: Some(child),
                        port,
                        binary,
                        options,
                        dir,
                    });
                }
                Spawn::PortTaken(tail) => log_tail = tail,
            }
        }
        Err(HarnessError::PortUnavailable {
            attempts: PORT_ATTEMPTS,
            log_tail,
        })
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port the server listens on (stays the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's working directory (AOF files, `redis.log`); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the server log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The options the server was started with.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Process id of the running server, `None` after [`stop`](Self::stop) or [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server process is still alive (it may have crashed on its own).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The last `lines` lines of the server log (and of its stdout/stderr, if any).
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(self.dir.path(), lines)
    }

    /// Stops the server gracefully: `SIGTERM` (Redis' `SHUTDOWN`), wait, `SIGKILL` after 5 s.
    ///
    /// The directory is kept, so [`restart`](Self::restart) can follow. No-op when not running.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        match self.child.take() {
            Some(mut child) => terminate(&mut child, DEFAULT_SHUTDOWN_TIMEOUT).map(drop),
            None => Ok(()),
        }
    }

    /// Kills the server with `SIGKILL` (a crash: no shutdown work) and reaps it.
    ///
    /// With [`RedisOptions::aof`], acknowledged writes survive into the next
    /// [`restart`](Self::restart). No-op when not running.
    pub fn kill(&mut self) -> Result<(), HarnessError> {
        match self.child.take() {
            Some(mut child) => hard_kill(&mut child).map(drop),
            None => Ok(()),
        }
    }

    /// Stops the server (if running) and starts it again on the same port and directory, so an
    /// AOF is reloaded. Returns once the new process answers `PING`.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        let mut log_tail = String::new();
        for attempt in 0..RESTART_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(100));
            }
            match spawn_ready(&self.binary, self.port, self.dir.path(), &self.options)? {
                Spawn::Ready(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Spawn::PortTaken(tail) => log_tail = tail,
            }
        }
        Err(HarnessError::PortUnavailable {
            attempts: RESTART_ATTEMPTS,
            log_tail,
        })
    }

    /// A new multiplexed connection to this server.
    pub async fn client(&self) -> Result<redis::aio::MultiplexedConnection, HarnessError> {
        let client = redis::Client::open(self.url())?;
        Ok(client.get_multiplexed_async_connection().await?)
    }

    /// Calls per command since start (or since [`reset_commandstats`](Self::reset_commandstats)),
    /// from `INFO commandstats`: keys are lower-case command names such as `"evalsha"`, `"set"`,
    /// or `"client|setinfo"` for subcommands.
    ///
    /// The harness' own traffic is counted too: `ping`/`info` from the readiness check, and the
    /// `client|setinfo` plus `info` of each call of this helper (the current `INFO` excluded).
    pub async fn info_commandstats(&self) -> Result<HashMap<String, u64>, HarnessError> {
        let mut conn = self.client().await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        parse_commandstats(&info)
    }

    /// Resets the statistics behind [`info_commandstats`](Self::info_commandstats)
    /// (`CONFIG RESETSTAT`).
    pub async fn reset_commandstats(&self) -> Result<(), HarnessError> {
        let mut conn = self.client().await?;
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "redis-server on port {} (dir {}), log tail:\n{}",
                self.port,
                self.dir.path().display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        if let Some(mut child) = self.child.take()
            && let Err(e) = terminate(&mut child, DEFAULT_SHUTDOWN_TIMEOUT)
        {
            eprintln!("stopping redis-server on port {}: {e}", self.port);
        }
        // `self.dir` is removed when the field is dropped, right after this.
    }
}

/// Locates `redis-server`: `$REDIS_SERVER` (a path, or a name looked up in `PATH`), else `PATH`.
pub fn find_redis_server() -> Result<PathBuf, HarnessError> {
    match std::env::var_os(REDIS_SERVER_ENV) {
        Some(value) if !value.is_empty() => {
            resolve_binary(value, REDIS_SERVER_ENV, REDIS_SERVER_ENV)
        }
        _ => resolve_binary(OsString::from("redis-server"), "PATH", REDIS_SERVER_ENV),
    }
}

/// Resolves `name` as a path when it contains a `/`, otherwise through `PATH`; `override_env`
/// is the variable a missing binary's error suggests.
pub(crate) fn resolve_binary(
    name: OsString,
    origin: &str,
    override_env: &str,
) -> Result<PathBuf, HarnessError> {
    let candidate = PathBuf::from(&name);
    if candidate.components().count() > 1 {
        return if is_executable(&candidate) {
            Ok(candidate)
        } else {
            Err(HarnessError::NotFound {
                detail: format!(
                    "{origin} = {} is not an executable file",
                    candidate.display()
                ),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(&candidate))
        .find(|p| is_executable(p))
        .ok_or_else(|| HarnessError::NotFound {
            detail: format!(
                "no executable {} on PATH (from {origin}); set {override_env} to override",
                candidate.display()
            ),
        })
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Picks a currently free loopback port by binding port 0 and releasing it (never 6379).
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to pick a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the picked port", e))?
            .port();
        if port != SYSTEM_REDIS_PORT {
            return Ok(port);
        }
    }
}

/// Outcome of one start attempt that did not hit a hard error.
enum Spawn {
    Ready(Child),
    /// The port was taken by someone else; carries the log tail. The child is already reaped.
    PortTaken(String),
}

fn server_args(port: u16, dir: &Path, options: &RedisOptions) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |a: &str| args.push(OsString::from(a));
    push("--port");
    push(&port.to_string());
    push("--bind");
    push("127.0.0.1");
    push("--daemonize");
    push("no");
    push("--protected-mode");
    push("yes");
    push("--save");
    push("");
    if options.aof {
        push("--appendonly");
        push("yes");
        push("--appendfsync");
        push("always");
    } else {
        push("--appendonly");
        push("no");
    }
    args.push(OsString::from("--dir"));
    args.push(dir.as_os_str().to_owned());
    args.push(OsString::from("--logfile"));
    args.push(dir.join(LOG_FILE).into_os_string());
    // Not needed by the harness; lets CI find and stop servers left behind by an aborted run.
    args.push(OsString::from("--pidfile"));
    args.push(dir.join(PID_FILE).into_os_string());
    args.extend(options.args.iter().map(OsString::from));
    args
}

/// Starts `redis-server` on `port` and waits until it is ready.
fn spawn_ready(
    binary: &Path,
    port: u16,
    dir: &Path,
    options: &RedisOptions,
) -> Result<Spawn, HarnessError> {
    let output = File::options()
        .create(true)
        .append(true)
        .open(dir.join(OUTPUT_FILE))
        .map_err(|e| HarnessError::io("opening the redis-server output file", e))?;
    let output_err = output
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the redis-server output file", e))?;
    let mut child = Command::new(binary)
        .args(server_args(port, dir, options))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output_err)
        .spawn()
        .map_err(|e| HarnessError::io(format!("spawning {}", binary.display()), e))?;

    let timeout = options.startup_timeout.unwrap_or(DEFAULT_STARTUP_TIMEOUT);
    let result = wait_ready(&mut child, port, dir, timeout);
    match result {
        Ok(Ready::Yes) => Ok(Spawn::Ready(child)),
        Ok(Ready::PortTaken) => {
            // Our child lost the race for the port: make sure it is gone before retrying.
            hard_kill(&mut child)?;
            Ok(Spawn::PortTaken(log_tail(dir, LOG_TAIL_LINES)))
        }
        Err(e) => {
            // Never leave a half-started server behind; the readiness error is the one to report.
            let _ = hard_kill(&mut child);
            Err(e)
        }
    }
}

enum Ready {
    Yes,
    PortTaken,
}

/// Polls until the server answers `PING` with our child's pid, the child exits, or `timeout`.
fn wait_ready(
    child: &mut Child,
    port: u16,
    dir: &Path,
    timeout: Duration,
) -> Result<Ready, HarnessError> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut backoff = Duration::from_millis(5);
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| HarnessError::io("checking the redis-server process", e))?
        {
            let tail = log_tail(dir, LOG_TAIL_LINES);
            if tail.contains("Address already in use") {
                return Ok(Ready::PortTaken);
            }
            return Err(HarnessError::Exited {
                port,
                status: describe(status),
                log_tail: tail,
            });
        }
        let last_problem = match probe(addr) {
            Ok(pid) if pid == child.id() => return Ok(Ready::Yes),
            // Someone else's server owns the port; ours will fail to bind and exit.
            Ok(pid) => format!("port answered by a foreign redis-server (pid {pid})"),
            Err(problem) => problem,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(HarnessError::NotReady {
                port,
                timeout,
                last_problem,
                log_tail: log_tail(dir, LOG_TAIL_LINES),
            });
        }
        std::thread::sleep(backoff.min(deadline - now));
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}

/// Sends `PING` then `INFO server` on a fresh connection; returns the server's `process_id`.
///
/// An `Err` is a human-readable reason the server is not ready yet (refused, `-LOADING`, ...).
fn probe(addr: SocketAddr) -> Result<u32, String> {
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .map_err(|e| io("connect", e))?;
    let limit = Some(Duration::from_secs(1));
    stream
        .set_read_timeout(limit)
        .map_err(|e| io("set timeout", e))?;
    stream
        .set_write_timeout(limit)
        .map_err(|e| io("set timeout", e))?;
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .map_err(|e| io("send PING", e))?;
    let mut reader = BufReader::new(stream);

    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| io("read PING reply", e))?;
    if line.trim_end() != "+PONG" {
        return Err(format!("PING answered {:?}", line.trim_end()));
    }

    line.clear();
    reader
        .read_line(&mut line)
        .map_err(|e| io("read INFO reply", e))?;
    let len: usize = line
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("INFO answered {:?}", line.trim_end()))?;
    let mut body = vec![0; len];
    reader
        .read_exact(&mut body)
        .map_err(|e| io("read INFO body", e))?;
    let body = String::from_utf8_lossy(&body);
    body.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| String::from("INFO server has no process_id"))
}

/// SIGTERM, wait up to `timeout`, then SIGKILL; always reaps the child.
fn terminate(child: &mut Child, timeout: Duration) -> Result<ExitStatus, HarnessError> {
    if let Some(status) = try_wait(child)? {
        return Ok(status);
    }
    // Not reaped yet, so the pid still names our child (at worst a zombie).
    if let Err(e) = send_signal(child, Signal::SIGTERM) {
        let _ = hard_kill(child);
        return Err(e);
    }
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = try_wait(child)? {
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    hard_kill(child)
}

/// SIGKILL and reap.
fn hard_kill(child: &mut Child) -> Result<ExitStatus, HarnessError> {
    if let Some(status) = try_wait(child)? {
        return Ok(status);
    }
    send_signal(child, Signal::SIGKILL)?;
    child
        .wait()
        .map_err(|e| HarnessError::io("waiting for redis-server to exit", e))
}

fn try_wait(child: &mut Child) -> Result<Option<ExitStatus>, HarnessError> {
    child
        .try_wait()
        .map_err(|e| HarnessError::io("checking the redis-server process", e))
}

fn send_signal(child: &Child, sig: Signal) -> Result<(), HarnessError> {
    let pid = child.id();
    let raw = i32::try_from(pid).map_err(|_| HarnessError::Signal {
        signal: sig,
        pid,
        source: nix::errno::Errno::EINVAL,
    })?;
    match signal::kill(Pid::from_raw(raw), sig) {
        // Already exited but not yet reaped: fine, the caller waits next.
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(source) => Err(HarnessError::Signal {
            signal: sig,
            pid,
            source,
        }),
    }
}

pub(crate) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// The last `lines` lines of the log file, plus stdout/stderr output when there is any.
fn log_tail(dir: &Path, lines: usize) -> String {
    let tail = |file: &str| -> Option<String> {
        let text = fs::read_to_string(dir.join(file)).ok()?;
        let all: Vec<&str> = text.lines().collect();
        let start = all.len().saturating_sub(lines);
        let joined = all[start..].join("\n");
        (!joined.trim().is_empty()).then_some(joined)
    };
    let mut out = tail(LOG_FILE).unwrap_or_else(|| format!("({LOG_FILE} is empty or missing)"));
    if let Some(output) = tail(OUTPUT_FILE) {
        out.push_str("\n--- stdout/stderr ---\n");
        out.push_str(&output);
    }
    out
}

/// Parses `INFO commandstats` into calls per command.
fn parse_commandstats(info: &str) -> Result<HashMap<String, u64>, HarnessError> {
    let mut stats = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.trim_end().strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest
            .split_once(':')
            .ok_or_else(|| HarnessError::Protocol(format!("commandstats line {line:?}")))?;
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| HarnessError::Protocol(format!("no calls= in {line:?}")))?;
        stats.insert(name.to_owned(), calls);
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats() -> Result<(), HarnessError> {
        let info = "# Commandstats\r\n\
            cmdstat_set:calls=3,usec=10,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(info)?;
        assert_eq!(stats.get("set"), Some(&3));
        assert_eq!(stats.get("client|setinfo"), Some(&2));
        assert_eq!(stats.len(), 2);
        Ok(())
    }

    fn spawn_on(port: u16) -> Result<(Spawn, TempDir), HarnessError> {
        let dir = TempDir::new().map_err(|e| HarnessError::io("tempdir", e))?;
        let spawn = spawn_ready(
            &find_redis_server()?,
            port,
            dir.path(),
            &RedisOptions::default(),
        )?;
        Ok((spawn, dir))
    }

    #[test]
    fn port_held_by_a_plain_listener_is_reported_as_taken() -> Result<(), HarnessError> {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| HarnessError::io("bind", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("local_addr", e))?
            .port();
        match spawn_on(port)?.0 {
            Spawn::PortTaken(tail) => assert!(tail.contains("Address already in use"), "{tail}"),
            Spawn::Ready(mut child) => {
                hard_kill(&mut child)?;
                panic!("started on a port that was taken");
            }
        }
        Ok(())
    }

    #[test]
    fn port_held_by_a_foreign_redis_is_reported_as_taken() -> Result<(), HarnessError> {
        let foreign = RedisServer::start()?;
        match spawn_on(foreign.port())?.0 {
            Spawn::PortTaken(_) => {}
            Spawn::Ready(mut child) => {
                hard_kill(&mut child)?;
                panic!("took the foreign server for ours");
            }
        }
        Ok(())
    }

    #[test]
    fn args_disable_persistence_by_default() {
        let dir = Path::new("/tmp/x");
        let args = server_args(7000, dir, &RedisOptions::default());
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(joined.contains("--save  --appendonly no"), "{joined}");
        assert!(joined.contains("--port 7000 --bind 127.0.0.1"), "{joined}");
        let aof = server_args(
            7000,
            dir,
            &RedisOptions::default().with_aof(true).arg("--x"),
        );
        let aof: Vec<String> = aof
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            aof.join(" ")
                .contains("--appendonly yes --appendfsync always")
        );
        assert_eq!(aof.last().map(String::as_str), Some("--x"));
    }
}
