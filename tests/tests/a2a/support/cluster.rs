//! The cluster fixture ([`Cluster`]): a private redis-server, `worker`s hosting the built-ins
//! and the TCK agent, and a `gateway` speaking A2A with `A2A_DEFAULT_SKILL=tck`.

use harness::paid::{free_port, wait_healthy};
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use reqwest::StatusCode;
use serde_json::Value;

use super::client::A2a;
use super::{PATIENCE, POLL, Res, ensure};

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
    /// Redis, worker `w1` and the gateway, once the A2A card lists the skills the suite uses.
    pub async fn start() -> Res<Cluster> {
        let redis = RedisServer::start()?;
        let workers = vec![worker(&redis, "w1")?];
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        let gateway = ServiceProcess::start(
            "gateway",
            "g1",
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("REDIS_URL", redis.url()),
                ("A2A_DEFAULT_SKILL", "tck".to_owned()),
            ],
        )?;
        wait_healthy(&gateway, &base).await?;
        let cluster = Cluster {
            gateway,
            workers,
            base,
            http: http()?,
            redis,
        };
        cluster
            .wait_for_skills(&["tck", "count", "echo", "sleep"])
            .await?;
        Ok(cluster)
    }

    pub async fn wait_for_skills(&self, skills: &[&str]) -> Res {
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

    pub async fn a2a_card(&self) -> Res<Value> {
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
        A2a {
            http: self.http.clone(),
            base: self.base.clone(),
            version: Some("1.0".to_owned()),
            authorization: Some(format!("Bearer {token}")),
        }
    }

    pub async fn health(&self) -> Res<StatusCode> {
        Ok(self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await?
            .status())
    }
}

/// A worker hosting the built-ins and the TCK agent, with short leases so that a dead
/// worker's task is recovered within a test.
pub fn worker(redis: &RedisServer, id: &str) -> Res<ServiceProcess> {
    Ok(ServiceProcess::start(
        "worker",
        id,
        &["--a2a-tck-agent"],
        &[
            ("REDIS_URL", redis.url()),
            ("WORKER_ID", id.to_owned()),
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
        ],
    )?)
}

pub fn http() -> Res<reqwest::Client> {
    // Generous: an SSE response counts as one request until its stream ends.
    Ok(reqwest::Client::builder().timeout(PATIENCE * 2).build()?)
}

pub fn skill_ids(card: &Value) -> Vec<String> {
    card["skills"]
        .as_array()
        .map(|skills| {
            skills
                .iter()
                .filter_map(|skill| skill["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
