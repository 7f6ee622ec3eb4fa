//! The cluster fixture ([`Cluster`]): a private redis-server, `worker`s hosting the built-ins
//! and the TCK agent, and a `gateway` speaking A2A with `A2A_DEFAULT_SKILL=tck`.

use harness::TestResult;
use harness::a2a::{A2a, http, skill_ids};
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use reqwest::StatusCode;
use serde_json::Value;

use super::{PATIENCE, POLL, ensure};

/// Redis, workers and one gateway; everything stops when it drops.
pub struct Cluster {
    pub gateway: ServiceProcess,
    pub workers: Vec<ServiceProcess>,
    pub base: String,
    pub http: reqwest::Client,
    // Last: stopped after the processes that use it.
    pub redis: RedisServer,
}

impl Cluster {
    /// Redis, worker `w1` and the gateway (the harness's cluster builder), once the A2A card
    /// lists the skills the suite uses.
    pub async fn start() -> TestResult<Cluster> {
        Cluster::start_with(&[]).await
    }

    /// [`Cluster::start`] with `gateway` added to the gateway's settings.
    pub async fn start_with(gateway: &[(&str, &str)]) -> TestResult<Cluster> {
        let mut settings = vec![("A2A_DEFAULT_SKILL", "tck")];
        settings.extend_from_slice(gateway);
        let built = harness::cluster::Cluster::builder()
            .worker("w1", WORKER_SETTINGS)
            .args(&["--a2a-tck-agent"])
            .gateway("g1", &settings)
            .start()
            .await?;
        let harness::cluster::Cluster {
            mut gateways,
            workers,
            redis,
            ..
        } = built;
        let gateway = gateways.remove(0);
        let cluster = Cluster {
            gateway: gateway.process,
            workers,
            base: gateway.base,
            http: http()?,
            redis,
        };
        cluster
            .wait_for_skills(&["tck", "count", "echo", "sleep"])
            .await?;
        Ok(cluster)
    }

    pub async fn wait_for_skills(&self, skills: &[&str]) -> TestResult {
        let start = tokio::time::Instant::now();
        loop {
            let card = self.a2a_card().await?;
            let listed = skill_ids(&card);
            if skills
                .iter()
                .all(|skill| listed.contains(&(*skill).to_owned()))
            {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(format!(
                    "the A2A card never listed {skills:?}: {card}\n{}",
                    self.gateway.log()
                )
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn a2a_card(&self) -> TestResult<Value> {
        let response = self
            .http
            .get(format!("{}/a2a/.well-known/agent-card.json", self.base))
            .send()
            .await?;
        ensure(response.status() == StatusCode::OK, || {
            format!("the A2A card answered {}", response.status())
        })?;
        Ok(response.json().await?)
    }

    /// A client calling with `token`, `A2A-Version: 1.0`.
    pub fn client(&self, token: &str) -> A2a {
        A2a::new(self.http.clone(), &self.base).with_bearer(Some(token))
    }

    pub async fn health(&self) -> TestResult<StatusCode> {
        Ok(self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await?
            .status())
    }
}

/// Short leases and sweeps, so that a dead worker's task is recovered within a test.
const WORKER_SETTINGS: &[(&str, &str)] = &[
    ("WORKER_LEASE_TTL_MS", "1000"),
    ("WORKER_RECOVERY_INTERVAL_MS", "200"),
];

/// A worker hosting the built-ins and the TCK agent, with [`WORKER_SETTINGS`] (the harness
/// gives it `REDIS_URL` and `WORKER_ID` = `id`).
pub fn worker(redis: &RedisServer, id: &str) -> TestResult<ServiceProcess> {
    let env: Vec<(&str, String)> = WORKER_SETTINGS
        .iter()
        .map(|(key, value)| (*key, (*value).to_owned()))
        .collect();
    harness::cluster::worker_process("worker", redis, id, &["--a2a-tck-agent"], &env)
}
