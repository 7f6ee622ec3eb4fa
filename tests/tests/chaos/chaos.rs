//! The smaller chaos run: hundreds of tasks through two gateways and four workers while workers
//! and gateways are SIGKILLed, stalled and restarted and Redis crashes once; every invariant of
//! the design is checked (see `harness::chaos`; `scripts/chaos` runs the full size).

use harness::TestResult;
use harness::chaos::{self, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_task_is_lost_or_corrupted_under_crashes() -> TestResult {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    let config = ChaosConfig {
        // Set to keep every log of the run (they are in temporary directories otherwise).
        logs_dir: std::env::var_os("CHAOS_LOGS_DIR").map(Into::into),
        ..ChaosConfig::small(seed)
    };
    let report = chaos::run(config).await?;
    println!("{report}");
    assert!(report.passed(), "{report}");
    // Every kind of fault really happened, and tasks really were re-run after them.
    assert!(report.faults.worker_kills >= 1, "{report}");
    assert!(report.faults.gateway_kills >= 1, "{report}");
    assert!(report.faults.worker_stalls >= 1, "{report}");
    assert_eq!(report.faults.redis_restarts, 1, "{report}");
    assert_eq!(report.acknowledged, ChaosConfig::small(seed).tasks);
    Ok(())
}
