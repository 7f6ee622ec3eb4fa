//! `hostile`: the hostile-load run (see `harness::hostile`). Prints a report and exits 1 when an
//! honest caller failed or Redis memory reached the mark, 2 when the run could not be carried out.
//!
//! Run it through `scripts/hostile`, which builds the release binaries first.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use harness::hostile::{self, HostileConfig};

#[derive(Debug, Parser)]
#[command(
    about = "Hostile-load run: anonymous floods against two gateways while a paying and a free owner measure their success"
)]
struct Args {
    /// Seconds the floods and the honest callers run.
    #[arg(long, env = "HOSTILE_SECONDS", default_value_t = 60)]
    seconds: u64,
    /// Redis maxmemory in MiB (noeviction), as deploy/k8s/redis.yaml sets it.
    #[arg(long, env = "HOSTILE_REDIS_MAXMEMORY_MB", default_value_t = 1536)]
    redis_maxmemory_mb: u64,
    /// The gateways' REDIS_MEMORY_HIGH_WATER, percent.
    #[arg(long, env = "HOSTILE_MEMORY_MARK", default_value_t = 80)]
    memory_mark: u8,
    /// Attacking client addresses (127.0.1.1, 127.0.1.2, ...).
    #[arg(long, env = "HOSTILE_ATTACKERS", default_value_t = 4)]
    attackers: u8,
    /// KiB of each large, admissible body.
    #[arg(long, env = "HOSTILE_BIG_BODY_KIB", default_value_t = 240)]
    big_body_kib: usize,
    /// ms of each anonymous sleep (the worker's WORKER_MAX_SLEEP_MS caps it at 60,000).
    #[arg(long, env = "HOSTILE_SLEEP_MS", default_value_t = 60_000)]
    sleep_ms: u64,
    /// Streams each attacker holds open at most.
    #[arg(long, env = "HOSTILE_STREAMS", default_value_t = 500)]
    streams: usize,
    /// Calls per second of each honest owner.
    #[arg(long, env = "HOSTILE_HONEST_RATE", default_value_t = 5)]
    honest_rate: u32,
    /// Seconds an honest caller waits for one call before counting it failed.
    #[arg(long, env = "HOSTILE_HONEST_DEADLINE_S", default_value_t = 10)]
    honest_deadline_s: u64,
    #[arg(long, env = "HOSTILE_WORKERS", default_value_t = 2)]
    workers: usize,
    #[arg(long, env = "HOSTILE_WORKER_CONCURRENCY", default_value_t = 16)]
    worker_concurrency: usize,
    /// Keep every process's log in this directory.
    #[arg(long, env = "HOSTILE_LOGS_DIR")]
    logs_dir: Option<PathBuf>,
    /// Run without the bounds on live tasks per address and owner, on retained tasks and
    /// bytes, and without the worker's fair share of slots (rate limits and connection caps
    /// stay): what the floods do to the honest callers without them.
    #[arg(long, env = "HOSTILE_WITHOUT_BOUNDS")]
    without_bounds: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = HostileConfig {
        duration: Duration::from_secs(args.seconds.max(1)),
        redis_maxmemory_mb: args.redis_maxmemory_mb,
        memory_mark_pct: args.memory_mark,
        attackers: args.attackers.clamp(1, 250),
        big_body_kib: args.big_body_kib,
        sleep_ms: args.sleep_ms,
        streams_per_attacker: args.streams,
        honest_rate: args.honest_rate,
        honest_deadline: Duration::from_secs(args.honest_deadline_s.max(1)),
        workers: args.workers.max(1),
        worker_concurrency: args.worker_concurrency.max(1),
        logs_dir: args.logs_dir,
        without_bounds: args.without_bounds,
    };
    match hostile::run(&config).await {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(err) => {
            eprintln!("hostile: the run could not be carried out: {err}");
            ExitCode::from(2)
        }
    }
}
