//! The smaller chaos run on a Redis Cluster of 3 masters with 1 replica each, the namespace
//! split into 3 shards: the same load and
//! process faults as `chaos.rs`, and for Redis a master SIGKILLed while tasks flow, its replica
//! taking over and the dead node rejoining as a replica; every invariant of the design is checked
//! (see `harness::chaos`; `scripts/chaos --redis-masters 3` runs the full size).

use harness::TestResult;
use harness::chaos::{self, ChaosConfig, RedisTopology};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_task_is_lost_or_corrupted_under_crashes_and_a_master_failover() -> TestResult {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    let config = ChaosConfig {
        redis: RedisTopology::Cluster {
            masters: 3,
            replicas: 1,
        },
        // Split over the masters: the failover hits one shard while the others go on.
        shards: 3,
        // Set to keep every log of the run (they are in temporary directories otherwise).
        logs_dir: std::env::var_os("CHAOS_LOGS_DIR").map(Into::into),
        ..ChaosConfig::small(seed)
    };
    let tasks = config.tasks;
    let report = chaos::run(config).await?;
    println!("{report}");
    assert!(report.passed(), "{report}");
    // Every kind of fault really happened, the Redis one exactly once.
    assert!(report.faults.worker_kills >= 1, "{report}");
    assert!(report.faults.gateway_kills >= 1, "{report}");
    assert_eq!(report.faults.master_failovers, 1, "{report}");
    assert_eq!(report.faults.redis_restarts, 0, "{report}");
    assert_eq!(report.acknowledged, tasks);
    Ok(())
}
