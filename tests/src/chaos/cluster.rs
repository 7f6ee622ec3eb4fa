//! The processes of a chaos run: Redis with `appendfsync always` (one server or a cluster, see
//! `topology.rs`), gateways on fixed loopback ports (a restarted gateway comes back at the same address, as behind a load
//! balancer) and workers, and with a remote share (`ChaosConfig::remote_percent`) an
//! `echo_agent` that every worker hosts with `--agent` beside its built-ins. Killed processes are kept until the end, so that their logs can be
//! searched and printed.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::topology::RedisNodes;
use super::{ChaosConfig, ChaosError};
use crate::process::ServiceProcess;

/// Bound on a restarted process becoming ready; reached only when something is broken.
const READY_PATIENCE: Duration = Duration::from_secs(30);

pub struct Slot {
    pub process: Option<ServiceProcess>,
    generation: u32,
    /// Gateways only: the port every generation listens on.
    port: u16,
}

pub struct Cluster {
    pub redis: RedisNodes,
    /// `REDIS_SHARDS` of every process.
    pub shards: u16,
    pub gateways: Vec<Slot>,
    pub workers: Vec<Slot>,
    /// The remote agent (`echo_agent --prefix remote-`) and its base URL, when the run has a
    /// remote share. It is stalled (SIGSTOP, SIGCONT), never killed: a refused connection
    /// fails a remote task for good until remote failures are retried.
    pub agent: Option<(ServiceProcess, String)>,
    lease_ttl_ms: u64,
    worker_concurrency: usize,
    push_claim_ms: u64,
    graveyard: Vec<ServiceProcess>,
    http: reqwest::Client,
}

fn free_port() -> Result<u16, ChaosError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|err| ChaosError::Setup(format!("no free port: {err}")))?;
    let port = listener
        .local_addr()
        .map_err(|err| ChaosError::Setup(format!("no free port: {err}")))?
        .port();
    Ok(port)
}

/// Entrypoints of the remote agent (`echo_agent --prefix remote-`).
pub const REMOTE_KEYS: [&str; 2] = ["remote-echo", "remote-sleep"];
/// Built-ins every worker hosts; with `--agent` a worker hosts only the built-ins it names.
const BUILTINS: &str = "count,echo,fail,sleep,summarize";

/// Starts the remote agent on a free port and waits until it answers.
async fn start_agent() -> Result<(ServiceProcess, String), ChaosError> {
    let port = free_port()?;
    let process = ServiceProcess::start(
        "echo_agent",
        "echo-agent",
        &["--prefix", "remote-"],
        &[("LISTEN_ADDR", format!("127.0.0.1:{port}"))],
    )?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(response) = http.get(format!("{base}/health")).send().await
            && response.status() == 200
        {
            return Ok((process, base));
        }
        if start.elapsed() > READY_PATIENCE {
            return Err(ChaosError::Setup(format!(
                "the echo agent never became healthy:\n{}",
                process.log()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cluster {
    pub async fn start(config: &ChaosConfig) -> Result<Cluster, ChaosError> {
        let redis = RedisNodes::start(config).await?;
        let mut gateways = Vec::new();
        for _ in 0..config.gateways {
            gateways.push(Slot {
                process: None,
                generation: 0,
                port: free_port()?,
            });
        }
        let workers = (0..config.workers)
            .map(|_| Slot {
                process: None,
                generation: 0,
                port: 0,
            })
            .collect();
        let agent = match config.remote_percent {
            0 => None,
            _ => Some(start_agent().await?),
        };
        let mut cluster = Cluster {
            redis,
            shards: config.shards,
            gateways,
            workers,
            agent,
            lease_ttl_ms: config.lease_ttl_ms,
            worker_concurrency: config.worker_concurrency,
            push_claim_ms: config.push_claim_ms,
            graveyard: Vec::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        for index in 0..cluster.workers.len() {
            cluster.start_worker(index)?;
        }
        for index in 0..cluster.gateways.len() {
            cluster.start_gateway(index).await?;
        }
        cluster.wait_for_workers().await?;
        Ok(cluster)
    }

    pub fn gateway_urls(&self) -> Vec<String> {
        self.gateways
            .iter()
            .map(|slot| format!("http://127.0.0.1:{}", slot.port))
            .collect()
    }

    /// Starts gateway `index` and waits until `/health` answers.
    pub async fn start_gateway(&mut self, index: usize) -> Result<(), ChaosError> {
        let mut env = self.redis.service_env(index, self.shards);
        let slot = &mut self.gateways[index];
        slot.generation += 1;
        let name = format!("gateway-{index}.{}", slot.generation);
        env.extend([
            ("LISTEN_ADDR", format!("127.0.0.1:{}", slot.port)),
            // Capacity is not under test here; retention outlasts the run.
            ("MAX_TASKS", "1000000".to_owned()),
            ("RETENTION_MS", "3600000".to_owned()),
            // Push deliveries to the run's receiver on loopback; a killed gateway's claim
            // expires within the run, and a failed attempt is retried soon.
            // (Every port: the receiver starts after the gateways, on a free one.)
            ("PUSH_ALLOWLIST", "127.0.0.1:*".to_owned()),
            ("PUSH_CLAIM_MS", self.push_claim_ms.to_string()),
            ("PUSH_RETRY_BASE_MS", "100".to_owned()),
            ("PUSH_RETRY_CAP_MS", "2000".to_owned()),
        ]);
        let process = ServiceProcess::start("gateway", &name, &[], &env)?;
        slot.process = Some(process);
        let health = format!("http://127.0.0.1:{}/health", slot.port);
        let start = tokio::time::Instant::now();
        loop {
            if let Ok(response) = self.http.get(&health).send().await
                && response.status() == 200
            {
                return Ok(());
            }
            // A gateway that exited (it could not open the store) will not answer: say so now
            // rather than at the patience's end.
            let exited = !self.gateways[index]
                .process
                .as_mut()
                .is_some_and(ServiceProcess::is_running);
            if exited || start.elapsed() > READY_PATIENCE {
                let log = self.gateways[index]
                    .process
                    .as_ref()
                    .map(ServiceProcess::log)
                    .unwrap_or_default();
                // The error, without the backtrace RUST_BACKTRACE adds to it.
                let log = log.split("Stack backtrace:").next().unwrap_or_default();
                let outcome = if exited {
                    "exited"
                } else {
                    "never became healthy"
                };
                return Err(ChaosError::Setup(format!("{name} {outcome}:\n{log}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts worker `index` under a new id (as a restarted pod would get a new name).
    pub fn start_worker(&mut self, index: usize) -> Result<(), ChaosError> {
        // Offset from the gateways, so that on a cluster the workers' first seeds differ too.
        let mut env = self
            .redis
            .service_env(self.gateways.len() + index, self.shards);
        let slot = &mut self.workers[index];
        slot.generation += 1;
        let name = format!("worker-{index}.{}", slot.generation);
        env.extend([
            ("WORKER_ID", name.clone()),
            ("WORKER_LEASE_TTL_MS", self.lease_ttl_ms.to_string()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
            ("WORKER_CONCURRENCY", self.worker_concurrency.to_string()),
            ("RUST_LOG", "info".to_owned()),
        ]);
        if let Some((_, agent)) = &self.agent {
            env.extend([
                ("WORKER_AGENTS", agent.clone()),
                ("WORKER_ENTRYPOINTS", BUILTINS.to_owned()),
            ]);
        }
        let process = ServiceProcess::start("worker", &name, &[], &env)?;
        slot.process = Some(process);
        Ok(())
    }

    /// Waits until a gateway's card lists the built-ins, i.e. workers registered.
    async fn wait_for_workers(&self) -> Result<(), ChaosError> {
        let Some(base) = self.gateway_urls().into_iter().next() else {
            return Ok(());
        };
        let card_url = format!("{base}/.well-known/agent-card.json");
        let start = tokio::time::Instant::now();
        loop {
            if let Ok(response) = self.http.get(&card_url).send().await
                && let Ok(card) = response.json::<serde_json::Value>().await
            {
                let skills = card["skills"].as_array().cloned().unwrap_or_default();
                let remote: &[&str] = match self.agent {
                    Some(_) => &REMOTE_KEYS,
                    None => &[],
                };
                let listed = ["echo", "sleep", "fail", "count"]
                    .iter()
                    .chain(remote)
                    .all(|key| skills.iter().any(|skill| skill["id"] == *key));
                if listed {
                    return Ok(());
                }
            }
            if start.elapsed() > READY_PATIENCE {
                return Err(ChaosError::Setup("workers never registered".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs a process; it stays in the graveyard for its log.
    pub fn kill(slot: &mut Slot, graveyard: &mut Vec<ServiceProcess>) {
        if let Some(mut process) = slot.process.take() {
            let _ = process.kill();
            graveyard.push(process);
        }
    }

    pub fn kill_gateway(&mut self, index: usize) {
        Cluster::kill(&mut self.gateways[index], &mut self.graveyard);
    }

    pub fn kill_worker(&mut self, index: usize) {
        Cluster::kill(&mut self.workers[index], &mut self.graveyard);
    }

    pub fn signal_worker(&self, index: usize, signal: Signal) -> Result<(), ChaosError> {
        if let Some(process) = &self.workers[index].process {
            process.signal(signal)?;
        }
        Ok(())
    }

    pub fn signal_agent(&self, signal: Signal) -> Result<(), ChaosError> {
        if let Some((process, _)) = &self.agent {
            process.signal(signal)?;
        }
        Ok(())
    }

    /// Restarts whatever is down and continues whatever is stopped.
    pub async fn revive_all(&mut self) -> Result<(), ChaosError> {
        let _ = self.signal_agent(Signal::SIGCONT);
        for index in 0..self.workers.len() {
            let _ = self.signal_worker(index, Signal::SIGCONT);
            let running = self.workers[index]
                .process
                .as_mut()
                .is_some_and(ServiceProcess::is_running);
            if !running {
                self.kill_worker(index);
                self.start_worker(index)?;
            }
        }
        for index in 0..self.gateways.len() {
            let running = self.gateways[index]
                .process
                .as_mut()
                .is_some_and(ServiceProcess::is_running);
            if !running {
                self.kill_gateway(index);
                self.start_gateway(index).await?;
            }
        }
        Ok(())
    }

    /// Lines containing `needle` in the logs of every worker that ever ran.
    pub fn count_in_worker_logs(&self, needle: &str) -> usize {
        self.all_processes()
            .filter(|process| process.name().starts_with("worker"))
            .map(|process| process.log().matches(needle).count())
            .sum()
    }

    /// Every process of the run, dead or alive.
    pub fn all_processes(&self) -> impl Iterator<Item = &ServiceProcess> {
        self.gateways
            .iter()
            .chain(self.workers.iter())
            .filter_map(|slot| slot.process.as_ref())
            .chain(self.agent.iter().map(|(process, _)| process))
            .chain(self.graveyard.iter())
    }

    /// Copies every log of the run (services dead or alive, Redis nodes) into `dir`.
    pub fn save_logs(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for process in self.all_processes() {
            std::fs::write(dir.join(format!("{}.log", process.name())), process.log())?;
        }
        for (name, path) in self.redis.log_files() {
            std::fs::copy(path, dir.join(format!("{name}.log")))?;
        }
        Ok(())
    }

    /// SIGTERM everything and wait, as an operator stopping the cluster would.
    pub async fn stop(mut self) {
        tokio::task::block_in_place(|| {
            for slot in self.gateways.iter_mut().chain(self.workers.iter_mut()) {
                if let Some(process) = slot.process.as_mut() {
                    let _ = process.signal(Signal::SIGTERM);
                }
            }
            for slot in self.gateways.iter_mut().chain(self.workers.iter_mut()) {
                if let Some(process) = slot.process.as_mut() {
                    let _ = process.wait_exit(Duration::from_secs(15));
                }
            }
            // The agent last: draining workers may still be calling it.
            if let Some((process, _)) = self.agent.as_mut() {
                let _ = process.signal(Signal::SIGTERM);
                let _ = process.wait_exit(Duration::from_secs(5));
            }
            self.redis.stop();
        });
    }
}
