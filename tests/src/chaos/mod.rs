//! The chaos run: drive thousands of owned tasks through several real gateways and workers
//! while processes are SIGKILLed, stalled and restarted at random and Redis (AOF,
//! `appendfsync always`) is killed and restarted once; then check the invariants of the design
//! (`../shared/DESIGN.md`) against what clients saw and what Redis holds.
//!
//! Redis is one `redis-server` or, with [`RedisTopology::Cluster`], a Redis Cluster whose fault
//! is a master's SIGKILL and its replica's takeover (asynchronous replication: what the dead
//! master acknowledged but had not yet sent may be gone, which the checks then report).
//!
//! A share of the `echo` and `sleep` tasks runs in a remote agent (`echo_agent`, hosted by
//! every worker with `--agent`): their calls are cut by worker SIGKILLs and held up by agent
//! stalls, and the same invariants hold for them.
//!
//! A fraction of the tasks is created over A2A with a push notification config naming a
//! webhook receiver the run holds (`push.rs`), and their deliveries are checked too: every
//! final status delivered, in order, only to the configs the harness made.
//!
//! [`run`] is shared by the `chaos` binary (`scripts/chaos`, thousands of tasks) and by the
//! smaller run in the test suite (`tests/tests/chaos/chaos.rs`). Everything random comes from one
//! seed, printed in the report, so a failing schedule of faults can be replayed (process timing
//! still varies from run to run).

mod checks;
mod cluster;
mod load;
mod monkey;
mod push;
mod redis_fault;
mod report;
mod topology;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use report::ChaosReport;
pub use topology::RedisTopology;

use crate::process::ProcessError;
use crate::redis_cluster::ClusterError;
use crate::redis_server::HarnessError;

/// Namespace of the cluster's keys (the services' default).
const NAMESPACE: &str = "tc";

/// Shape of one chaos run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Tasks to get acknowledged (`200` from `POST /tasks`).
    pub tasks: usize,
    pub gateways: usize,
    pub workers: usize,
    /// `WORKER_CONCURRENCY` of each worker.
    pub worker_concurrency: usize,
    /// Concurrent clients creating tasks.
    pub clients: usize,
    /// Tasks created per second at most (0: as fast as the clients go), so that the load lasts
    /// long enough for many faults to land in it.
    pub rate: u32,
    /// Distinct access tokens (owners) the tasks are spread over.
    pub owners: usize,
    /// One task in this many gets an SSE subscriber that follows it to the end.
    pub subscribe_one_in: usize,
    /// Mean pause between two faults.
    pub fault_interval: Duration,
    /// One Redis server, or a Redis Cluster.
    pub redis: RedisTopology,
    /// `REDIS_SHARDS` of every gateway and worker: how many hash tags the tasks spread over.
    pub shards: u16,
    /// The Redis fault, once, half-way through the load: kill the single server (SIGKILL) and
    /// restart it, or kill a cluster's master and let its replica take over.
    pub restart_redis: bool,
    /// `WORKER_LEASE_TTL_MS`: short, so that recoveries happen within the run.
    pub lease_ttl_ms: u64,
    /// Seed of every random choice (task mix, fault schedule).
    pub seed: u64,
    /// Bound on the wait for every task to finish once the faults stop; reached only when
    /// something is lost or stuck.
    pub settle_timeout: Duration,
    /// Percentage of the tasks created over A2A (`SendMessage`) with an inline push config
    /// naming the run's webhook receiver (0: none, every task over the Lucid profile).
    pub push_percent: u32,
    /// `PUSH_CLAIM_MS` of the gateways: how long a killed gateway's claim on a task's
    /// deliveries holds them up before another gateway takes them over.
    pub push_claim_ms: u64,
    /// Percentage of the `echo` and `sleep` tasks sent instead to `remote-echo` and
    /// `remote-sleep`: entrypoints of an agent speaking the Lucid HTTP profile (`echo_agent`)
    /// that every worker hosts with `--agent` beside its built-ins, so that SIGKILLs and stalls
    /// of workers land on remote calls too, and the agent itself is stalled now and then
    /// (0: no agent).
    pub remote_percent: u32,
    /// Where to copy every process's and Redis node's log at the end (they live in temporary
    /// directories otherwise), to read a failing run's evidence.
    pub logs_dir: Option<PathBuf>,
}

impl ChaosConfig {
    /// The full run of `scripts/chaos`.
    pub fn full(seed: u64) -> Self {
        ChaosConfig {
            tasks: 5_000,
            gateways: 2,
            workers: 4,
            worker_concurrency: 16,
            clients: 32,
            rate: 100,
            owners: 16,
            subscribe_one_in: 4,
            fault_interval: Duration::from_millis(700),
            redis: RedisTopology::Single,
            shards: 1,
            restart_redis: true,
            lease_ttl_ms: 1_000,
            seed,
            settle_timeout: Duration::from_secs(120),
            push_percent: 10,
            push_claim_ms: 2_000,
            remote_percent: 20,
            logs_dir: None,
        }
    }

    /// The smaller run of the test suite: every kind of fault still happens.
    pub fn small(seed: u64) -> Self {
        ChaosConfig {
            tasks: 800,
            clients: 8,
            owners: 6,
            subscribe_one_in: 3,
            fault_interval: Duration::from_millis(300),
            ..ChaosConfig::full(seed)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    #[error(transparent)]
    Redis(#[from] HarnessError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("redis: {0}")]
    RedisCommand(#[from] redis::RedisError),
    #[error("store: {0}")]
    Store(#[from] store::StoreError),
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("{0}")]
    Setup(String),
}

/// Runs one chaos run. `Err` means the run could not be carried out (a binary missing, Redis
/// would not start); broken invariants are reported in [`ChaosReport::violations`].
pub async fn run(config: ChaosConfig) -> Result<ChaosReport, ChaosError> {
    let started = Instant::now();
    let cluster = cluster::Cluster::start(&config).await?;
    let up = started.elapsed();
    let gateways = cluster.gateway_urls();
    let receiver = push::PushReceiver::start().await?;
    let load = Arc::new(load::Load::new(&config, gateways, receiver.base())?);

    let (stop_faults, faults_stopped) = tokio::sync::watch::channel(false);
    let monkey = tokio::spawn(monkey::run(
        cluster,
        config.clone(),
        Arc::clone(&load),
        faults_stopped,
    ));
    let drive = load.drive().await;
    let _ = stop_faults.send(true);
    let (mut cluster, faults) = monkey
        .await
        .map_err(|err| ChaosError::Setup(format!("fault injector panicked: {err}")))?;
    // Every process up again, so that what is left can finish.
    cluster.revive_all().await?;

    let settle = checks::settle(&cluster, &load, config.settle_timeout).await?;
    let subscribers_started = Instant::now();
    let subscribers = load.finish_subscribers(config.settle_timeout).await;
    let subscribers_took = subscribers_started.elapsed();
    // The deliveries of every finished task with a push config, awaited on the receiver.
    let push_wait = push::wait(
        &receiver,
        &load,
        &checks::store(&cluster).await?,
        &settle.unfinished,
        config.settle_timeout,
    )
    .await;
    let mut report = ChaosReport::new(&config, faults, drive, settle, subscribers);
    report.push.wait = push_wait;
    let checks_started = Instant::now();
    checks::check(&cluster, &load, &receiver, &mut report).await?;
    report.phases = vec![
        ("start", up),
        ("subscribers' end", subscribers_took),
        ("push deliveries' end", report.push.wait.duration),
        ("checks", checks_started.elapsed()),
    ];
    report.fenced_results = cluster.count_in_worker_logs("result fenced out");
    report.leases_lost = cluster.count_in_worker_logs("lease lost");
    report.acknowledged = load.acknowledged.load(Ordering::Relaxed);
    report.elapsed = started.elapsed();
    if let Some(dir) = &config.logs_dir
        && let Err(err) = cluster.save_logs(dir)
    {
        eprintln!("chaos: could not save the logs in {}: {err}", dir.display());
    }
    cluster.stop().await;
    Ok(report)
}
