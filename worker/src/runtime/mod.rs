//! The worker runtime: one fetch loop claims up to `concurrency` tasks at a time, each claimed
//! task is activated and run under its run deadline and cancellation, and its result written
//! with a fenced compare-and-set. Beside it run the heartbeat (one call renews every lease this
//! worker holds, and refreshes its registry entry), the cancellation listener, the recovery
//! sweep and, when metrics are exported, the sampler of the cluster gauges. Shutdown stops claiming, lets running handlers finish within the drain timeout, then
//! leaves: unfinished leases expire and another worker recovers them.

mod active;
mod execute;
mod fetch;
mod gauges;
mod heartbeat;
mod hosted;
mod recovery;
pub mod retry;
mod share;

use std::sync::Arc;
use std::time::Duration;

use store::TaskStore;
use store::registry::{WorkerEntry, WorkerRegistry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::active::ActiveRuns;
pub use self::hosted::Hosted;
use self::share::SlotShare;

/// How often cluster gauges are sampled unless the metrics export is more frequent.
pub const DEFAULT_GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// How a worker runs; see [`crate::config::WorkerConfig`] for the defaults and flags.
/// Turns a task may take by default (`MAX_TURNS`).
pub const DEFAULT_MAX_TURNS: u32 = 32;

/// The error code of a task whose run asked for input on its last allowed turn.
pub const TOO_MANY_TURNS: &str = "too_many_turns";

/// The share of a worker's slots one entrypoint may hold by default (`WORKER_ENTRYPOINT_SHARE`).
pub const DEFAULT_ENTRYPOINT_SHARE_PCT: u8 = 75;

/// How long a waiting task waits for its caller by default: a day.
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub worker_id: String,
    pub host: String,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Lease lifetime; renewed every third of it.
    pub lease_ttl: Duration,
    /// Hard limit of one run (`maxRunMs`).
    pub max_run: Duration,
    /// Runs a task may get; a later activation fails it with `task_attempts_exhausted`.
    pub max_attempts: u32,
    /// How long a task whose run asked for input waits for the answer before it fails with
    /// `input_timeout`.
    pub input_timeout: Duration,
    /// Turns a task that asks for input may take, its first message included: a run asking
    /// for input on the last one fails its task with `too_many_turns` instead of waiting.
    pub max_turns: u32,
    /// Bytes of JSON a handler's output may take; a larger one fails the task with
    /// `result_too_large` instead of being stored.
    pub max_result_bytes: usize,
    /// How long SIGTERM waits for running handlers.
    pub drain_timeout: Duration,
    /// How often this worker sweeps for expired leases.
    pub recovery_interval: Duration,
    /// How long the fetch loop blocks on an empty queue before looking again.
    pub idle_wait: Duration,
    /// How often the cluster gauges (queue depth, leases, live workers) are sampled when
    /// metrics are exported.
    pub gauge_interval: Duration,
    /// The most of `concurrency` one entrypoint may hold at once, percent (50 to 100; 100: no
    /// bound), when the worker hosts more than one (see [`share`]).
    pub entrypoint_share_pct: u8,
    /// Retries of a handler's retryable failure, per entrypoint, and the backoff before each.
    pub retry: retry::RetryPolicy,
}

impl RuntimeConfig {
    pub fn new(worker_id: impl Into<String>) -> Self {
        RuntimeConfig {
            worker_id: worker_id.into(),
            host: String::from("localhost"),
            concurrency: 16,
            lease_ttl: Duration::from_secs(10),
            max_run: Duration::from_secs(15 * 60),
            max_attempts: store::DEFAULT_MAX_ATTEMPTS,
            input_timeout: DEFAULT_INPUT_TIMEOUT,
            max_turns: DEFAULT_MAX_TURNS,
            max_result_bytes: protocol::limits::DEFAULT_MAX_RESULT_BYTES,
            drain_timeout: Duration::from_secs(30),
            recovery_interval: Duration::from_millis(500),
            idle_wait: Duration::from_secs(1),
            gauge_interval: DEFAULT_GAUGE_INTERVAL,
            entrypoint_share_pct: DEFAULT_ENTRYPOINT_SHARE_PCT,
            retry: retry::RetryPolicy::default(),
        }
    }
}

/// What the runtime shares between its loops.
pub(crate) struct Shared {
    pub store: Arc<dyn TaskStore>,
    /// Swappable while the worker runs (a remote agent's card read again).
    pub entrypoints: Hosted,
    pub config: RuntimeConfig,
    pub active: ActiveRuns,
    pub share: SlotShare,
}

/// How often the worker publishes its tally and load for the operator console (only while a
/// console is configured somewhere in the cluster; see `store::stats`).
const STATS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

impl Shared {
    /// What this worker holds now, for the console.
    fn load(&self) -> store::stats::WorkerLoad {
        let leases = self.active.leases();
        let mut running = std::collections::BTreeMap::new();
        for lease in &leases {
            *running.entry(lease.entrypoint.clone()).or_insert(0u64) += 1;
        }
        store::stats::WorkerLoad {
            worker_id: self.config.worker_id.clone(),
            running,
            leases: leases.len() as u64,
            at_ms: protocol::Timestamp::now().as_millis(),
        }
    }
}

/// Runs the worker until `shutdown` is cancelled (SIGTERM, or an operator's drain request
/// that the heartbeat reads), then drains and returns. `entrypoints` is
/// a fixed [`crate::entrypoint::Entrypoints`] or a [`Hosted`] set its owner may replace while
/// the worker runs.
pub async fn run(
    store: Arc<dyn TaskStore>,
    registry: Option<Arc<dyn WorkerRegistry>>,
    entrypoints: impl Into<Hosted>,
    config: RuntimeConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let entrypoints: Hosted = entrypoints.into();
    // Before the set is first read: no change made from now on goes unseen.
    let changes = entrypoints.subscribe();
    let entry = WorkerEntry {
        worker_id: config.worker_id.clone(),
        host: config.host.clone(),
        started_at_ms: protocol::Timestamp::now().as_millis(),
        concurrency: config.concurrency,
        entrypoints: entrypoints.infos(),
    };
    let share = SlotShare::new(
        entrypoints.keys(),
        config.concurrency.max(1),
        config.entrypoint_share_pct,
    );
    let shared = Arc::new(Shared {
        store,
        entrypoints,
        config,
        active: ActiveRuns::default(),
        share,
    });
    let cancellations = shared
        .store
        .watch_cancellations(&shared.config.worker_id)
        .await?;
    if let Some(registry) = &registry {
        registry
            .heartbeat(&entry, registry_ttl(&shared.config))
            .await?;
        // Before the first take: a worker started while an entrypoint is paused takes none.
        heartbeat::read_pauses(&shared, registry.as_ref()).await;
    }
    telemetry::metrics::prime_worker_counters(shared.entrypoints.keys().iter().map(String::as_str));
    tracing::info!(
        worker_id = %shared.config.worker_id,
        entrypoints = ?shared.entrypoints.keys(),
        concurrency = shared.config.concurrency,
        "worker started"
    );

    // Background loops stop with `background`, after the drain, so leases stay renewed while
    // running handlers finish.
    let background = CancellationToken::new();
    let runs = TaskTracker::new();
    let loops = TaskTracker::new();
    // The heartbeat gets `shutdown` too: an operator's drain request cancels it, as SIGTERM
    // does, and the drain below is the same.
    loops.spawn(heartbeat::run(
        shared.clone(),
        registry.clone().map(|r| (r, entry.clone())),
        shutdown.clone(),
        background.clone(),
    ));
    loops.spawn(heartbeat::listen_for_cancellations(
        shared.clone(),
        cancellations,
        background.clone(),
    ));
    loops.spawn(hosted::follow(
        shared.clone(),
        changes,
        registry.clone().map(|r| (r, entry.clone())),
        background.clone(),
    ));
    loops.spawn(recovery::run(shared.clone(), background.clone()));
    if let Some(stats) = shared.store.cluster_stats() {
        let load_of = shared.clone();
        loops.spawn(store::stats::publish_loop(
            stats,
            STATS_INTERVAL,
            move || Some(load_of.load()),
            background.clone(),
        ));
    }
    if telemetry::metrics_enabled() {
        loops.spawn(gauges::run(
            shared.clone(),
            registry.clone(),
            background.clone(),
        ));
    }

    fetch::run(shared.clone(), &runs, shutdown.clone()).await;

    // Drain: no new claims; running handlers get `drain_timeout` to finish.
    runs.close();
    let active = shared.active.len();
    if active > 0 {
        tracing::info!(active, "draining running tasks");
    }
    if tokio::time::timeout(shared.config.drain_timeout, runs.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = shared.active.len(),
            "drain timeout: leaving unfinished tasks to recovery"
        );
        shared.active.abandon_all();
        runs.wait().await;
    }
    background.cancel();
    loops.close();
    loops.wait().await;
    if let Some(registry) = &registry
        && let Err(err) = registry.deregister(&shared.config.worker_id).await
    {
        tracing::warn!(error = %err, "could not remove the registry entry; it will expire");
    }
    tracing::info!(worker_id = %shared.config.worker_id, "worker stopped");
    Ok(())
}

/// Registry entries live three heartbeats.
fn registry_ttl(config: &RuntimeConfig) -> Duration {
    config.lease_ttl
}
