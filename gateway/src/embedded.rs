//! Embedded single-process mode: the gateway with an in-memory store and registry and an
//! in-process worker hosting the built-in entrypoints, or a program's own
//! ([`start_hosting`], [`crate::host::run_hosting`]) (durability `process`). What a fresh
//! machine runs with no Redis at all.

use std::sync::Arc;
use std::time::Duration;

use store::idempotency::MemoryIdempotency;
use store::registry::MemoryRegistry;
use store::{MemoryStore, MemoryStoreConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use worker::entrypoint::Entrypoints;

use crate::core::config::GatewayConfig;
use crate::core::state::AppState;

/// Builds the state and starts the in-process worker hosting the built-ins on `tracker`; it
/// stops with `shutdown`.
pub fn start(
    config: GatewayConfig,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> AppState {
    let builtins = builtins(&config);
    start_hosting(config, builtins, shutdown, tracker)
}

/// The built-in entrypoints the embedded worker hosts by default.
pub fn builtins(config: &GatewayConfig) -> Entrypoints {
    worker::builtins::all().with(worker::builtins::sleep::entrypoint_with_max(
        config.worker_max_sleep_ms,
    ))
}

/// [`start`] with the in-process worker hosting `entrypoints` (a program's own) instead.
pub fn start_hosting(
    config: GatewayConfig,
    entrypoints: Entrypoints,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> AppState {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        max_tasks: config.max_tasks,
        max_retained: config.max_retained_tasks,
        max_retained_bytes: config.max_retained_bytes,
        max_retained_per_owner: config.max_retained_per_owner,
        max_live_per_owner: config.max_live_per_owner,
        max_live_per_address: config.max_live_per_address,
        retention: Duration::from_millis(config.retention_ms),
        ..MemoryStoreConfig::default()
    }));
    let registry = Arc::new(MemoryRegistry::new());
    let mut runtime =
        worker::runtime::RuntimeConfig::new(format!("embedded-{}", std::process::id()));
    runtime.concurrency = config.worker_concurrency.max(1);
    runtime.max_attempts = config.max_attempts;
    runtime.max_result_bytes = config.worker_max_result_bytes;
    runtime.retry = worker::runtime::retry::RetryPolicy::new(
        config.worker_retry_default,
        &config.worker_retry,
        Duration::from_millis(config.worker_retry_base_ms),
        Duration::from_millis(config.worker_retry_max_ms),
    );
    tracker.spawn(worker::runtime::run(
        store.clone(),
        Some(registry.clone()),
        entrypoints,
        runtime,
        shutdown.clone(),
    ));
    AppState {
        store,
        registry,
        idempotency: Arc::new(MemoryIdempotency::with_limits(config.idempotency_limits())),
        // The registry is in this process: no staleness to bound.
        catalog: Arc::new(crate::core::catalog::Catalog::local(Duration::from_millis(
            config.entrypoint_grace_ms,
        ))),
        // A memory ledger would do for one process, but embedded mode takes no payments:
        // a paid task needs a durable store, and invoke follows the same gate.
        payments: None,
        // The in-memory store has no memory limit of its own to watch.
        store_memory: Arc::new(crate::core::store_memory::MemoryWatch::disabled()),
        // Push deliveries are kept in Redis, so that they outlive any process: none here.
        push: None,
        // Set by the host from the config, which may refuse to start over it.
        card_signer: None,
        members: None,
        config: Arc::new(config),
        shutdown,
    }
}
