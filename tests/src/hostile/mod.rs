//! The hostile-load run (binary `hostile`, `scripts/hostile`): anonymous floods of large bodies,
//! oversized bodies, long sleeps with their streams held open, and listing calls, from a few
//! client addresses against two gateways, while a paying owner and a free owner measure their
//! success rate and latency and a sampler watches Redis memory against its high-water mark.
//!
//! Every simulated client has its own loopback source address (127.0.1.N attackers, 127.0.2.N
//! honest callers), so the gateways' per-address bounds (rate limits, connection caps, live
//! tasks per address) see them as the different callers they stand for.
//!
//! The verdict: both honest owners succeed on every call (100 %), and Redis memory never reaches
//! the gateways' high-water mark.

mod attack;
mod cluster;
mod honest;
mod tally;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use tally::Report;

/// What one hostile run does.
#[derive(Debug, Clone)]
pub struct HostileConfig {
    /// How long the floods and the honest callers run.
    pub duration: Duration,
    /// Redis `maxmemory` (MiB), with `noeviction` as the shipped manifests set it.
    pub redis_maxmemory_mb: u64,
    /// The gateways' `REDIS_MEMORY_HIGH_WATER` (percent of maxmemory).
    pub memory_mark_pct: u8,
    /// Attacking client addresses (127.0.1.1 ..).
    pub attackers: u8,
    /// Size of each large (but admissible) body, KiB.
    pub big_body_kib: usize,
    /// `ms` of each anonymous sleep.
    pub sleep_ms: u64,
    /// Streams each attacker holds open at most.
    pub streams_per_attacker: usize,
    /// Calls per second of each honest owner.
    pub honest_rate: u32,
    /// How long an honest caller waits for one call (a paid invoke with its 402, or a task to
    /// its completion) before counting it failed.
    pub honest_deadline: Duration,
    /// Workers and their concurrency.
    pub workers: usize,
    pub worker_concurrency: usize,
    /// Keep every process's log here.
    pub logs_dir: Option<PathBuf>,
    /// Turn off the bounds on live tasks per address and owner, on retained tasks and bytes,
    /// and the worker's fair share of slots (rate limits and connection caps stay): what the
    /// same floods do without them.
    pub without_bounds: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum HostileError {
    #[error("setup: {0}")]
    Setup(String),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Harness(#[from] crate::redis_server::HarnessError),
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
}

/// An HTTP client whose connections leave from `source`, so the gateways see that address.
pub(crate) fn client_from(source: IpAddr) -> Result<reqwest::Client, HostileError> {
    Ok(reqwest::Client::builder()
        .local_address(source)
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Runs the whole thing: starts the cluster, floods it, measures, stops everything.
pub async fn run(config: &HostileConfig) -> Result<Report, HostileError> {
    let cluster = cluster::Cluster::start(config).await?;
    let stop = CancellationToken::new();
    let tally = Arc::new(tally::Tally::default());
    let sampler = tokio::spawn(tally::sample_memory(
        cluster.redis.url(),
        tally.clone(),
        stop.clone(),
    ));
    let mut jobs = tokio::task::JoinSet::new();
    for index in 0..config.attackers {
        attack::spawn(
            &mut jobs,
            config,
            &cluster,
            index,
            tally.clone(),
            stop.clone(),
        )?;
    }
    honest::spawn(&mut jobs, config, &cluster, tally.clone(), stop.clone())?;
    tokio::time::sleep(config.duration).await;
    stop.cancel();
    while jobs.join_next().await.is_some() {}
    let _ = sampler.await;
    let report = tally.report(config, &cluster).await;
    cluster.stop(config.logs_dir.as_deref());
    Ok(report)
}
