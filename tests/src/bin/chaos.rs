//! `chaos`: the full chaos run (see `harness::chaos`). Prints a summary and exits 1 when an
//! invariant was violated, 2 when the run could not be carried out.
//!
//! Run it through `scripts/chaos`, which builds the release binaries first.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use harness::chaos::{self, ChaosConfig, RedisTopology};

#[derive(Debug, Parser)]
#[command(
    about = "Chaos run of a real cluster: kills and restarts while tasks flow, then checks the invariants"
)]
struct Args {
    /// Tasks to get acknowledged.
    #[arg(long, env = "CHAOS_TASKS", default_value_t = 5_000)]
    tasks: usize,
    #[arg(long, env = "CHAOS_GATEWAYS", default_value_t = 2)]
    gateways: usize,
    #[arg(long, env = "CHAOS_WORKERS", default_value_t = 4)]
    workers: usize,
    /// WORKER_CONCURRENCY of each worker.
    #[arg(long, env = "CHAOS_WORKER_CONCURRENCY", default_value_t = 16)]
    worker_concurrency: usize,
    /// Concurrent clients creating tasks.
    #[arg(long, env = "CHAOS_CLIENTS", default_value_t = 32)]
    clients: usize,
    /// Tasks created per second at most (0: unlimited).
    #[arg(long, env = "CHAOS_RATE", default_value_t = 100)]
    rate: u32,
    /// Mean milliseconds between two faults.
    #[arg(long, env = "CHAOS_FAULT_INTERVAL_MS", default_value_t = 700)]
    fault_interval_ms: u64,
    /// WORKER_LEASE_TTL_MS of the workers (also how long their registry entries outlive their
    /// last heartbeat, and a stall lasts twice this plus 500 ms).
    #[arg(long, env = "CHAOS_LEASE_TTL_MS", default_value_t = 1_000)]
    lease_ttl_ms: u64,
    /// Seed of the task mix and the fault schedule (random when absent).
    #[arg(long, env = "CHAOS_SEED")]
    seed: Option<u64>,
    /// Skip the Redis fault (a single server's crash and restart, a cluster master's kill and
    /// failover).
    #[arg(long, env = "CHAOS_NO_REDIS_RESTART")]
    no_redis_restart: bool,
    /// Run on a Redis Cluster of this many masters (3 or more with replicas) instead of one
    /// redis-server (0); its Redis fault is a master's SIGKILL and its replica's takeover.
    #[arg(long, env = "CHAOS_REDIS_MASTERS", default_value_t = 0)]
    redis_masters: usize,
    /// Replicas of each cluster master (at least 1 for the failover).
    #[arg(long, env = "CHAOS_REDIS_REPLICAS", default_value_t = 1)]
    redis_replicas: usize,
    /// REDIS_SHARDS of every gateway and worker: hash tags the tasks spread over.
    #[arg(long, env = "CHAOS_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    shards: u16,
    /// Percentage of the tasks created over A2A (SendMessage) with an inline push notification
    /// config naming the run's own webhook receiver, whose deliveries are checked (0: none).
    #[arg(long, env = "CHAOS_PUSH_PERCENT", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100))]
    push_percent: u32,
    /// PUSH_CLAIM_MS of the gateways (how long a killed gateway's delivery claim lasts).
    #[arg(long, env = "CHAOS_PUSH_CLAIM_MS", default_value_t = 2_000)]
    push_claim_ms: u64,
    /// Percentage of the echo and sleep tasks run by a remote agent (`echo_agent`, hosted by
    /// every worker with `--agent`) as `remote-echo` and `remote-sleep` (0: no agent).
    #[arg(long, env = "CHAOS_REMOTE_PERCENT", default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    remote_percent: u32,
    /// Copy every service's and Redis node's log into this directory at the end.
    #[arg(long, env = "CHAOS_LOGS_DIR")]
    logs_dir: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(rand::random);
    let redis = match args.redis_masters {
        0 => RedisTopology::Single,
        // The cluster harness refuses layouts it cannot build (replicas need 3 masters).
        masters => RedisTopology::Cluster {
            masters,
            replicas: args.redis_replicas,
        },
    };
    let config = ChaosConfig {
        tasks: args.tasks,
        gateways: args.gateways.max(1),
        workers: args.workers.max(1),
        worker_concurrency: args.worker_concurrency.max(1),
        clients: args.clients.max(1),
        rate: args.rate,
        fault_interval: Duration::from_millis(args.fault_interval_ms.max(10)),
        restart_redis: !args.no_redis_restart,
        redis,
        shards: args.shards,
        logs_dir: args.logs_dir,
        lease_ttl_ms: args.lease_ttl_ms.max(30),
        push_percent: args.push_percent,
        push_claim_ms: args.push_claim_ms.max(100),
        remote_percent: args.remote_percent,
        ..ChaosConfig::full(seed)
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("chaos: cannot start the runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(chaos::run(config)) {
        Ok(report) => {
            print!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(err) => {
            eprintln!("chaos: the run could not be carried out: {err}");
            ExitCode::from(2)
        }
    }
}
