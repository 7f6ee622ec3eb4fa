//! A private Prometheus server (Debian's `prometheus` package, `/usr/bin/prometheus`) for the
//! dashboard suite: it scrapes the `/metrics` of the processes it is given, on a free loopback
//! port, with its configuration and TSDB in a directory of its own, and answers PromQL over its
//! HTTP API. Stopped (SIGTERM, then SIGKILL) and its directory removed on drop; it never
//! touches a system Prometheus (`/etc/prometheus`, `/var/lib/prometheus`, port 9090).
//!
//! The binary is `$PROMETHEUS` (a path, or a name looked up in `PATH`), else `prometheus` on
//! `PATH` (`apt-get install -y --no-install-recommends prometheus`; `.ci/run` does).

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;

use crate::cluster::free_port;

/// Where the binary may be named instead of `PATH`.
const PROMETHEUS_ENV: &str = "PROMETHEUS";
/// How long the server gets to answer `/-/ready`, and to stop on SIGTERM.
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error(
        "prometheus not found ({0}): install it with `apt-get install -y --no-install-recommends prometheus`, or set {PROMETHEUS_ENV}"
    )]
    NotFound(String),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("prometheus did not become ready within {PATIENCE:?}; its log:\n{log}")]
    NotReady { log: String },
    #[error("prometheus query {query:?} failed: {detail}")]
    Query { query: String, detail: String },
}

fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> PrometheusError {
    move |source| PrometheusError::Io { context, source }
}

/// One scrape target: `host:port` and the path of its metrics.
#[derive(Debug, Clone)]
pub struct Target {
    /// The `job` label its series get (`gateway`, `worker`).
    pub job: String,
    pub address: String,
    pub path: String,
}

impl Target {
    pub fn new(job: &str, address: &str, path: &str) -> Target {
        Target {
            job: job.to_owned(),
            address: address.to_owned(),
            path: path.to_owned(),
        }
    }
}

/// The running server.
pub struct PrometheusServer {
    child: Option<Child>,
    port: u16,
    http: reqwest::Client,
    // Last: removed after the process has stopped.
    dir: TempDir,
}

impl PrometheusServer {
    /// Starts a server scraping `targets` every `scrape_interval`, and waits until it is ready.
    pub async fn start(
        targets: &[Target],
        scrape_interval: Duration,
    ) -> Result<PrometheusServer, PrometheusError> {
        let binary = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("prometheus-harness-")
            .tempdir()
            .map_err(io("creating the prometheus directory"))?;
        let config = dir.path().join("prometheus.yml");
        fs::write(&config, config_text(targets, scrape_interval))
            .map_err(io("writing prometheus.yml"))?;
        let log = fs::File::create(dir.path().join("prometheus.log"))
            .map_err(io("creating the prometheus log"))?;
        let err_log = log.try_clone().map_err(io("sharing the prometheus log"))?;
        let port = free_port().map_err(|err| PrometheusError::NotFound(err.to_string()))?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(io("starting prometheus"))?;
        let server = PrometheusServer {
            child: Some(child),
            port,
            http: reqwest::Client::builder()
                .timeout(PATIENCE)
                .build()
                .map_err(|err| PrometheusError::NotFound(err.to_string()))?,
            dir,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn wait_ready(&self) -> Result<(), PrometheusError> {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Ok(response) = self
                .http
                .get(format!("{}/-/ready", self.url()))
                .send()
                .await
                && response.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(PrometheusError::NotReady { log: self.log() })
    }

    /// The API URL `path` with one query parameter, encoded.
    fn api(&self, path: &str, name: &str, value: &str) -> Result<reqwest::Url, PrometheusError> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.url())).map_err(|err| {
            PrometheusError::Query {
                query: value.to_owned(),
                detail: err.to_string(),
            }
        })?;
        url.query_pairs_mut().append_pair(name, value);
        Ok(url)
    }

    /// An instant query (`/api/v1/query`): the `data.result` array.
    pub async fn query(&self, query: &str) -> Result<Vec<Value>, PrometheusError> {
        let data = self.get("/api/v1/query", "query", query, query).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The values of label `label` among the series matching `matcher`
    /// (`/api/v1/label/<label>/values`), as Grafana's `label_values(matcher, label)` asks.
    pub async fn label_values(
        &self,
        label: &str,
        matcher: &str,
    ) -> Result<Vec<String>, PrometheusError> {
        let path = format!("/api/v1/label/{label}/values");
        let what = format!("label_values({matcher}, {label})");
        let data = self.get(&path, "match[]", matcher, &what).await?;
        Ok(data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|value| value.as_str().map(str::to_owned))
            .collect())
    }

    /// GET of API `path` with one query parameter: the answer's `data`, or an error naming
    /// `what` was asked when the call or Prometheus failed.
    async fn get(
        &self,
        path: &str,
        name: &str,
        value: &str,
        what: &str,
    ) -> Result<Value, PrometheusError> {
        let failed = |detail: String| PrometheusError::Query {
            query: what.to_owned(),
            detail,
        };
        let mut body: Value = self
            .http
            .get(self.api(path, name, value)?)
            .send()
            .await
            .map_err(|err| failed(err.to_string()))?
            .json()
            .await
            .map_err(|err| failed(err.to_string()))?;
        if body["status"] != "success" {
            return Err(failed(body.to_string()));
        }
        Ok(body["data"].take())
    }

    /// The scrape targets and their health (`/api/v1/targets`), for a failure message.
    pub async fn targets(&self) -> String {
        match self
            .http
            .get(format!("{}/api/v1/targets", self.url()))
            .send()
            .await
        {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(err) => err.to_string(),
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The configuration: one job per target kind, each target with its own metrics path.
fn config_text(targets: &[Target], scrape_interval: Duration) -> String {
    let interval = format!("{}ms", scrape_interval.as_millis().max(1));
    let mut text = format!(
        "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: {interval}\nscrape_configs:\n"
    );
    for (i, target) in targets.iter().enumerate() {
        text.push_str(&format!(
            "  - job_name: {job}-{i}\n    metrics_path: {path:?}\n    static_configs:\n      - targets: [{address:?}]\n        labels:\n          service: {job:?}\n",
            job = target.job,
            path = target.path,
            address = target.address,
        ));
    }
    text
}

fn find_binary() -> Result<PathBuf, PrometheusError> {
    let name = std::env::var_os(PROMETHEUS_ENV)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| OsString::from("prometheus"));
    let candidate = PathBuf::from(&name);
    let executable = |path: &PathBuf| {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if candidate.components().count() > 1 {
        return executable(&candidate)
            .then_some(candidate.clone())
            .ok_or_else(|| PrometheusError::NotFound(candidate.display().to_string()));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(&candidate))
        .find(executable)
        .ok_or_else(|| PrometheusError::NotFound(format!("{} on PATH", candidate.display())))
}
