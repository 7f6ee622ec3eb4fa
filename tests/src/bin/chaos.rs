//! `chaos`: the full chaos run (see `harness::chaos`). Prints a summary and exits 1 when an
//! invariant was violated, 2 when the run could not be carried out.
//!
//! Run it through `scripts/chaos`, which builds the release binaries first.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use harness::chaos::{self, ChaosConfig};

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
    /// Seed of the task mix and the fault schedule (random when absent).
    #[arg(long, env = "CHAOS_SEED")]
    seed: Option<u64>,
    /// Skip the Redis crash and restart.
    #[arg(long, env = "CHAOS_NO_REDIS_RESTART")]
    no_redis_restart: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(rand::random);
    let config = ChaosConfig {
        tasks: args.tasks,
        gateways: args.gateways.max(1),
        workers: args.workers.max(1),
        worker_concurrency: args.worker_concurrency.max(1),
        clients: args.clients.max(1),
        rate: args.rate,
        fault_interval: Duration::from_millis(args.fault_interval_ms.max(10)),
        restart_redis: !args.no_redis_restart,
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
