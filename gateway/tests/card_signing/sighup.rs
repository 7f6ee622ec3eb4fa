//! The gateway binary in embedded mode on a free loopback port, spoken to over plain
//! HTTP/1.1, for the SIGHUP rotation test: its JWKS awaited (polled until a deadline), its
//! cards, its log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Public, TestResult, public_keys};

/// The bearer token of the gateway's one member.
const MEMBER_TOKEN: &str = "member-token-of-the-sighup-test";

/// Starting the binary (embedded worker included) and each reload get this long.
const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

pub struct RunningGateway {
    child: Child,
    address: String,
    log: PathBuf,
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- gateway log ---\n{}", self.log_text());
        }
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(self.log.with_extension("members"));
    }
}

impl RunningGateway {
    /// The binary with `CARD_SIGNING_KEY_FILE=key_file` (none when `None`) and
    /// `PUBLIC_URL=public`.
    pub fn start(key_file: Option<&Path>, public: &str) -> TestResult<RunningGateway> {
        // A free port: bound, noted, released (the gateway binds it right after).
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let address = format!("127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!(
            "card-signing-sighup-{}-{port}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_gateway"));
        command.env_clear();
        if let Some(key_file) = key_file {
            command.env("CARD_SIGNING_KEY_FILE", key_file);
        }
        // A member (MEMBER_TOKEN) and a private entrypoint: the extended card is served too.
        let members = log.with_extension("members");
        std::fs::write(
            &members,
            format!("tester {}\n", hex::encode(Sha256::digest(MEMBER_TOKEN))),
        )?;
        let child = command
            .env("MEMBER_TOKENS_FILE", &members)
            .env("WORKER_PRIVATE", "echo")
            .env("PUBLIC_URL", public)
            .env("LISTEN_ADDR", &address)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()?;
        Ok(RunningGateway {
            child,
            address,
            log,
        })
    }

    pub fn hangup(&self) -> TestResult {
        let pid = Pid::from_raw(i32::try_from(self.child.id())?);
        kill(pid, Signal::SIGHUP)?;
        Ok(())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds `line` (polled until the deadline).
    pub async fn log_with(&self, line: &str) -> TestResult<String> {
        let start = Instant::now();
        loop {
            let log = self.log_text();
            if log.contains(line) {
                return Ok(log);
            }
            if start.elapsed() > DEADLINE {
                return Err(format!("the log never said {line:?}:\n{log}").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `GET /health` until it answers 200 (polled until the deadline: the binary starting).
    pub async fn healthy(&self) -> TestResult {
        let start = Instant::now();
        loop {
            if let Ok((200, _, _)) = self.get("/health").await {
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                return Err(format!("never healthy:\n{}", self.log_text()).into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> TestResult<bool> {
        Ok(self.child.try_wait()?.is_some())
    }

    /// GET `path`: status, ETag, body.
    async fn get(&self, path: &str) -> TestResult<(u16, String, Vec<u8>)> {
        self.get_with(path, "").await
    }

    /// The extended card a member reads (the HTTP+JSON binding).
    pub async fn extended_card(&self) -> TestResult<Value> {
        let headers = format!("Authorization: Bearer {MEMBER_TOKEN}\r\nA2A-Version: 1.0\r\n");
        let (status, _, body) = self.get_with("/a2a/v1/extendedAgentCard", &headers).await?;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        Ok(serde_json::from_slice(&body)?)
    }

    /// GET `path` with `headers` (complete lines): status, ETag, body.
    async fn get_with(&self, path: &str, headers: &str) -> TestResult<(u16, String, Vec<u8>)> {
        let mut stream = tokio::net::TcpStream::connect(&self.address).await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: evil.example\r\n{headers}Connection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let split = response
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .ok_or("no end of headers")?;
        let head = String::from_utf8_lossy(&response[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or("no status")?;
        let etag = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("etag")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default();
        // Fixed-length documents: the body is what follows the headers.
        Ok((status, etag, response[split + 4..].to_vec()))
    }

    /// The JWKS once it lists exactly `kids` (polled until the deadline: the binary starting,
    /// or a SIGHUP being handled).
    pub async fn jwks_with(&self, kids: &[&str]) -> TestResult<Vec<(String, Public)>> {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            if let Ok((200, _, body)) = self.get("/.well-known/jwks.json").await {
                let keys = public_keys(&body)?;
                if keys
                    .iter()
                    .map(|(kid, _)| kid.as_str())
                    .eq(kids.iter().copied())
                {
                    return Ok(keys);
                }
                last = String::from_utf8_lossy(&body).into_owned();
            }
            if start.elapsed() > DEADLINE {
                return Err(format!("the JWKS never listed {kids:?}; last: {last}").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The card at `path` and its ETag.
    pub async fn card(&self, path: &str) -> TestResult<(Value, String)> {
        let (status, etag, body) = self.get(path).await?;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(!etag.is_empty(), "{path}: no ETag");
        Ok((serde_json::from_slice(&body)?, etag))
    }
}
