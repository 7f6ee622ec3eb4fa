//! The cluster a hostile run attacks: Redis with AOF, a fixed `maxmemory` and `noeviction` (as
//! deploy/k8s/redis.yaml runs it), the dev facilitator, workers pricing `summarize`, and two
//! gateways with the production defaults of every bound (the harness turns the fair-admission
//! bounds off for the suites; here each is set back to its default).

use std::path::Path;
use std::time::Duration;

use super::{HostileConfig, HostileError};
use crate::paid::{PAYEE, free_port};
use crate::process::ServiceProcess;
use crate::redis_server::{RedisOptions, RedisServer};

/// The priced entrypoint the paying owner buys.
pub const PAID_ENTRYPOINT: &str = "summarize";
pub const PRICE: &str = "0.001";
/// Bound on a process becoming ready; reached only when something is broken.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct Cluster {
    pub redis: RedisServer,
    pub gateways: Vec<String>,
    processes: Vec<ServiceProcess>,
}

impl Cluster {
    pub async fn start(config: &HostileConfig) -> Result<Cluster, HostileError> {
        let redis = RedisServer::start_with(
            RedisOptions::default()
                .with_aof(true)
                .arg("--maxmemory")
                .arg(format!("{}mb", config.redis_maxmemory_mb))
                .arg("--maxmemory-policy")
                .arg("noeviction"),
        )?;
        let mut processes = Vec::new();
        let port = free_port().map_err(|err| HostileError::Setup(err.to_string()))?;
        let facilitator_url = format!("http://127.0.0.1:{port}");
        processes.push(ServiceProcess::start(
            "facilitator",
            "facilitator",
            &[],
            &[
                ("FACILITATOR_LISTEN", format!("127.0.0.1:{port}")),
                ("RUST_LOG", "warn".to_owned()),
            ],
        )?);
        wait_healthy(&facilitator_url).await?;
        for index in 0..config.workers {
            processes.push(ServiceProcess::start(
                "worker",
                &format!("w{}", index + 1),
                &[],
                &[
                    ("REDIS_URL", redis.url()),
                    ("WORKER_ID", format!("w{}", index + 1)),
                    ("WORKER_CONCURRENCY", config.worker_concurrency.to_string()),
                    ("WORKER_PRICES", format!("{PAID_ENTRYPOINT}={PRICE}")),
                    // The worker's default (the harness sets 100 for the suites).
                    (
                        "WORKER_ENTRYPOINT_SHARE",
                        if config.without_bounds { "100" } else { "75" }.to_owned(),
                    ),
                    ("RUST_LOG", "warn".to_owned()),
                ],
            )?);
        }
        // A bound's default, or 0 (off) for a run without them.
        let bound = |default: u64| {
            if config.without_bounds {
                "0".to_owned()
            } else {
                default.to_string()
            }
        };
        let mut gateways = Vec::new();
        for index in 0..2 {
            let port = free_port().map_err(|err| HostileError::Setup(err.to_string()))?;
            let base = format!("http://127.0.0.1:{port}");
            processes.push(ServiceProcess::start(
                "gateway",
                &format!("g{}", index + 1),
                &[],
                &[
                    ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                    ("REDIS_URL", redis.url()),
                    ("PAY_TO", PAYEE.to_owned()),
                    ("FACILITATOR_URL", facilitator_url.clone()),
                    ("PUBLIC_URL", base.clone()),
                    // The gateway's defaults (the harness sets 0 for the suites).
                    ("RATE_PER_ADDRESS", "100".to_owned()),
                    ("RATE_PER_PAYER", "10".to_owned()),
                    (
                        "MAX_LIVE_PER_ADDRESS",
                        bound(store::DEFAULT_MAX_LIVE_PER_ADDRESS),
                    ),
                    (
                        "MAX_LIVE_PER_OWNER",
                        bound(store::DEFAULT_MAX_LIVE_PER_OWNER),
                    ),
                    (
                        "MAX_RETAINED_PER_OWNER",
                        bound(store::DEFAULT_MAX_RETAINED_PER_OWNER),
                    ),
                    ("MAX_RETAINED_TASKS", bound(store::DEFAULT_MAX_RETAINED)),
                    (
                        "MAX_RETAINED_BYTES",
                        bound(store::DEFAULT_MAX_RETAINED_BYTES),
                    ),
                    (
                        "REDIS_MEMORY_HIGH_WATER",
                        config.memory_mark_pct.to_string(),
                    ),
                    ("RUST_LOG", "warn".to_owned()),
                ],
            )?);
            wait_healthy(&base).await?;
            gateways.push(base);
        }
        let cluster = Cluster {
            redis,
            gateways,
            processes,
        };
        cluster.wait_for_entrypoints().await?;
        Ok(cluster)
    }

    /// Until every gateway's card lists the paid entrypoint (the workers registered).
    async fn wait_for_entrypoints(&self) -> Result<(), HostileError> {
        let http = reqwest::Client::new();
        let start = tokio::time::Instant::now();
        for base in &self.gateways {
            loop {
                let card = http
                    .get(format!("{base}/.well-known/agent-card.json"))
                    .send()
                    .await?
                    .text()
                    .await?;
                if card.contains(PAID_ENTRYPOINT) {
                    break;
                }
                if start.elapsed() > PATIENCE {
                    return Err(HostileError::Setup(format!(
                        "{base} never listed {PAID_ENTRYPOINT}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Stops every process; copies their logs to `logs_dir` first when given.
    pub fn stop(mut self, logs_dir: Option<&Path>) {
        if let Some(dir) = logs_dir {
            let _ = std::fs::create_dir_all(dir);
            for process in &self.processes {
                let _ = std::fs::write(dir.join(format!("{}.log", process.name())), process.log());
            }
        }
        for process in &mut self.processes {
            let _ = process.kill();
        }
    }
}

async fn wait_healthy(base: &str) -> Result<(), HostileError> {
    let http = reqwest::Client::new();
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(response) = http.get(format!("{base}/health")).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(HostileError::Setup(format!("{base} never became healthy")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
