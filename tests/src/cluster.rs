//! A cluster of real processes for the multi-process suites: a private `redis-server`, workers
//! and gateways on it, built in one place so that every suite starts, waits for and stops its
//! processes the same way.
//!
//! ```no_run
//! # async fn demo() -> harness::TestResult {
//! use harness::cluster::Cluster;
//! let cluster = Cluster::builder()
//!     .worker("w1", &[("WORKER_ENTRYPOINTS", "echo,sleep")])
//!     .gateway("g1", &[("MAX_LIVE_PER_OWNER", "2")])
//!     .skills(&["echo", "sleep"])
//!     .start()
//!     .await?;
//! let card = cluster.http.get(format!("{}/.well-known/agent-card.json", cluster.base())).send().await?;
//! # let _ = card; Ok(()) }
//! ```
//!
//! What a suite does not set keeps the harness's defaults ([`ServiceProcess::start`]: fair
//! admission's limits off, every worker slot open to any entrypoint). Each worker gets its
//! `WORKER_ID` and `REDIS_URL`, each gateway its `LISTEN_ADDR` on a free loopback port and
//! `REDIS_URL`. [`ClusterBuilder::start`] returns once every gateway answers `/health` and
//! every gateway's Lucid card lists the [`ClusterBuilder::skills`] asked for. Dropping the
//! cluster stops the processes first, then Redis.

use std::net::TcpListener;
use std::time::Duration;

use serde_json::Value;

use crate::TestResult;
use crate::process::ServiceProcess;
use crate::redis_server::{RedisOptions, RedisServer};

/// How long any one wait for the cluster lasts.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// Between two looks at a condition being polled for.
pub const POLL: Duration = Duration::from_millis(25);

/// A free TCP port on loopback (bound and released: the next process to bind it gets it,
/// which is the one we start next).
pub fn free_port() -> TestResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// An HTTP client whose requests give up after [`PATIENCE`].
pub fn http() -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder().timeout(PATIENCE).build()?)
}

/// The A2A JSON-RPC request of `method` with `params` (id 1, `A2A-Version: 1.0`) to the
/// gateway at `base`, as bearer `token` when given; the caller may add headers before sending.
pub fn jsonrpc_request(
    http: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> reqwest::RequestBuilder {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = http
        .post(format!("{base}/a2a/jsonrpc"))
        .header("A2A-Version", "1.0")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request
}

/// Polls `base/health` until it answers 200.
pub async fn wait_healthy(process: &ServiceProcess, base: &str) -> TestResult {
    let client = http()?;
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(response) = client.get(format!("{base}/health")).send().await
            && response.status() == reqwest::StatusCode::OK
        {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!(
                "{} never became healthy:\n{}",
                process.name(),
                process.log()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the Lucid card at `base` until `ready` accepts it.
pub async fn wait_for_card(
    process: &ServiceProcess,
    base: &str,
    ready: impl Fn(&Value) -> bool,
) -> TestResult {
    let client = http()?;
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(response) = client
            .get(format!("{base}/.well-known/agent-card.json"))
            .send()
            .await
            && let Ok(card) = response.json::<Value>().await
            && ready(&card)
        {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!(
                "the card of {} never became ready:\n{}",
                process.name(),
                process.log()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the Lucid card at `base` until it lists `skill` (some worker registered it).
pub async fn wait_for_skill(process: &ServiceProcess, base: &str, skill: &str) -> TestResult {
    wait_for_card(process, base, |card| {
        lists_skills(card, &[skill.to_owned()])
    })
    .await
}

/// Whether `card` lists every one of `skills`.
pub fn lists_skills(card: &Value, skills: &[String]) -> bool {
    let listed = card["skills"].as_array();
    skills.iter().all(|wanted| {
        listed.is_some_and(|listed| listed.iter().any(|skill| skill["id"] == wanted.as_str()))
    })
}

/// A gateway `name` on a free loopback port with `env` added (`REDIS_URL` among them for a
/// cluster gateway; without it, the embedded single process), once `/health` answers. Its
/// base URL ends with `BASE_PATH` when `env` sets one.
pub async fn gateway(name: &str, args: &[&str], env: &[(&str, String)]) -> TestResult<Gateway> {
    gateway_process("gateway", free_port()?, name, args, env).await
}

/// [`gateway`] of the workspace binary `program` (`gateway`, or an agent's program serving
/// the bindings itself, embedded) on loopback `port`: for a test whose settings name the port
/// before the process starts (`PUBLIC_URL`), or a program other than `gateway`.
pub async fn gateway_process(
    program: &str,
    port: u16,
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> TestResult<Gateway> {
    let mut all = vec![("LISTEN_ADDR", format!("127.0.0.1:{port}"))];
    all.extend(env.iter().cloned());
    let process = ServiceProcess::start(program, name, args, &all)?;
    // Under a BASE_PATH every route, `/health` included, is served below it.
    let base_path = env
        .iter()
        .find(|(key, _)| *key == "BASE_PATH")
        .map(|(_, path)| path.trim_end_matches('/'))
        .unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}{base_path}");
    wait_healthy(&process, &base).await?;
    Ok(Gateway { process, base })
}

/// A worker `name` of the workspace binary `program` (`worker`, or an agent's program built
/// on the worker host) on `redis`, with `WORKER_ID` = `name`, every slot open to any
/// entrypoint, and `env` added (which may override both).
pub fn worker_process(
    program: &str,
    redis: &RedisServer,
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> TestResult<ServiceProcess> {
    let mut all = vec![("REDIS_URL", redis.url())];
    all.extend(env.iter().cloned());
    worker_on_store(program, name, args, &all)
}

/// [`worker_process`] on a store that `env` names rather than a [`RedisServer`]: a Redis
/// Cluster's `REDIS_CLUSTER_URLS`, say. `WORKER_ID` = `name`, every slot open to any
/// entrypoint, and `env` added (which may override both).
pub fn worker_on_store(
    program: &str,
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> TestResult<ServiceProcess> {
    let mut all = vec![
        ("WORKER_ID", name.to_owned()),
        // As for `worker` (ServiceProcess::start): every slot takes any entrypoint.
        ("WORKER_ENTRYPOINT_SHARE", "100".to_owned()),
    ];
    all.extend(env.iter().cloned());
    Ok(ServiceProcess::start(program, name, args, &all)?)
}

/// [`worker_process`] of the `worker` binary.
pub fn worker(
    redis: &RedisServer,
    name: &str,
    env: &[(&str, String)],
) -> TestResult<ServiceProcess> {
    worker_process("worker", redis, name, &[], env)
}

/// A process to start: its name (also `WORKER_ID` for a worker), arguments and settings.
#[derive(Clone, Debug)]
struct Spec {
    name: String,
    /// The workspace binary a worker runs: `worker`, or an agent's program built on the
    /// worker host (`research-agent`).
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Spec {
    fn new(name: &str, env: &[(&str, &str)]) -> Spec {
        Spec {
            name: name.to_owned(),
            program: "worker".to_owned(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
        }
    }

    /// The settings as [`ServiceProcess::start`] takes them.
    fn env_refs(&self) -> Vec<(&str, String)> {
        self.env
            .iter()
            .map(|(key, value)| (key.as_str(), value.clone()))
            .collect()
    }
}

/// What [`Cluster::builder`] starts.
#[must_use]
pub struct ClusterBuilder {
    redis: RedisOptions,
    workers: Vec<Spec>,
    gateways: Vec<Spec>,
    skills: Vec<String>,
    /// Whether the process added last is a gateway: where [`ClusterBuilder::args`] goes.
    last_is_gateway: bool,
}

impl ClusterBuilder {
    /// Redis started with `options` instead of the defaults (no AOF).
    pub fn redis(mut self, options: RedisOptions) -> Self {
        self.redis = options;
        self
    }

    /// A worker `name` with `env` added to its settings.
    pub fn worker(mut self, name: &str, env: &[(&str, &str)]) -> Self {
        self.workers.push(Spec::new(name, env));
        self.last_is_gateway = false;
        self
    }

    /// A gateway `name` with `env` added to its settings.
    pub fn gateway(mut self, name: &str, env: &[(&str, &str)]) -> Self {
        self.gateways.push(Spec::new(name, env));
        self.last_is_gateway = true;
        self
    }

    /// Command-line arguments of the last worker or gateway added (whichever came last).
    pub fn args(mut self, args: &[&str]) -> Self {
        let last = if self.last_is_gateway {
            self.gateways.last_mut()
        } else {
            self.workers.last_mut()
        };
        if let Some(spec) = last {
            spec.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        }
        self
    }

    /// The workspace binary the last worker added runs instead of `worker`: an agent's
    /// program on the worker host (`examples/research-agent`), with the same settings.
    pub fn program(mut self, binary: &str) -> Self {
        if !self.last_is_gateway
            && let Some(spec) = self.workers.last_mut()
        {
            spec.program = binary.to_owned();
        }
        self
    }

    /// The skills every gateway's card must list before [`ClusterBuilder::start`] returns.
    pub fn skills(mut self, skills: &[&str]) -> Self {
        self.skills = skills.iter().map(|skill| (*skill).to_owned()).collect();
        self
    }

    /// Starts Redis, the workers, then the gateways, and waits until they are ready.
    pub async fn start(self) -> TestResult<Cluster> {
        let redis = RedisServer::start_with(self.redis)?;
        let mut cluster = Cluster {
            gateways: Vec::new(),
            workers: Vec::new(),
            http: http()?,
            redis,
        };
        for spec in &self.workers {
            cluster.start_worker(spec)?;
        }
        for spec in &self.gateways {
            let index = cluster.start_gateway(spec).await?;
            let gateway = &cluster.gateways[index];
            wait_for_card(&gateway.process, &gateway.base, |card| {
                lists_skills(card, &self.skills)
            })
            .await?;
        }
        Ok(cluster)
    }
}

/// A gateway process and the URL it serves at (with its `BASE_PATH`, when it has one).
pub struct Gateway {
    pub process: ServiceProcess,
    pub base: String,
}

impl Gateway {
    /// The `host:port` it listens on (its base without scheme nor `BASE_PATH`), for the suites
    /// that speak raw TCP or HTTP/2 to it.
    pub fn address(&self) -> &str {
        let rest = self.base.trim_start_matches("http://");
        rest.split('/').next().unwrap_or(rest)
    }
}

/// Redis, workers and gateways; everything stops when it drops (processes first).
pub struct Cluster {
    pub gateways: Vec<Gateway>,
    pub workers: Vec<ServiceProcess>,
    pub http: reqwest::Client,
    // Last: dropped after the processes that use it.
    pub redis: RedisServer,
}

impl Cluster {
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            redis: RedisOptions::default(),
            workers: Vec::new(),
            gateways: Vec::new(),
            skills: Vec::new(),
            last_is_gateway: false,
        }
    }

    /// The URL of the first gateway.
    pub fn base(&self) -> &str {
        self.gateways
            .first()
            .map(|gateway| gateway.base.as_str())
            .unwrap_or_default()
    }

    /// The first gateway's process (its log, its pid).
    pub fn gateway(&self) -> Option<&ServiceProcess> {
        self.gateways.first().map(|gateway| &gateway.process)
    }

    /// [`jsonrpc_request`] to the first gateway.
    pub fn jsonrpc_request(
        &self,
        token: Option<&str>,
        method: &str,
        params: Value,
    ) -> reqwest::RequestBuilder {
        jsonrpc_request(&self.http, self.base(), token, method, params)
    }

    /// [`Cluster::jsonrpc_request`] sent: the HTTP status and the reply (`Null` when the body
    /// is not JSON, as a refusal before the JSON-RPC layer may be).
    pub async fn jsonrpc(
        &self,
        token: Option<&str>,
        method: &str,
        params: Value,
    ) -> TestResult<(u16, Value)> {
        let response = self.jsonrpc_request(token, method, params).send().await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// Starts one more worker `name` with `env` added; returns its index in `workers`.
    pub fn add_worker(&mut self, name: &str, env: &[(&str, &str)]) -> TestResult<usize> {
        self.start_worker(&Spec::new(name, env))
    }

    /// Starts one more gateway `name` with `env` added, once healthy; returns its index.
    pub async fn add_gateway(&mut self, name: &str, env: &[(&str, &str)]) -> TestResult<usize> {
        self.start_gateway(&Spec::new(name, env)).await
    }

    /// The logs of every process, for a failure message.
    pub fn logs(&self) -> String {
        let gateways = self.gateways.iter().map(|gateway| &gateway.process);
        gateways
            .chain(&self.workers)
            .map(|process| format!("--- {}\n{}", process.name(), process.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn start_worker(&mut self, spec: &Spec) -> TestResult<usize> {
        let env = spec.env_refs();
        let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
        let process = worker_process(&spec.program, &self.redis, &spec.name, &args, &env)?;
        self.workers.push(process);
        Ok(self.workers.len() - 1)
    }

    async fn start_gateway(&mut self, spec: &Spec) -> TestResult<usize> {
        let mut env = vec![("REDIS_URL", self.redis.url())];
        env.extend(spec.env_refs());
        let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
        self.gateways.push(gateway(&spec.name, &args, &env).await?);
        Ok(self.gateways.len() - 1)
    }
}
