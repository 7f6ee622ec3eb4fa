//! `worker`: parse settings, connect, run until SIGTERM or SIGINT, drain, exit.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use shared::registry::RedisRegistry;
use shared::store::{RedisStore, RedisStoreConfig};
use tokio_util::sync::CancellationToken;
use worker::config::WorkerConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = WorkerConfig::parse();
    init_logs(&config.log_format);

    let builtins = worker::builtins::all();
    let entrypoints = if config.entrypoints.is_empty() {
        builtins
    } else {
        builtins
            .only(&config.entrypoints)
            .map_err(|unknown| anyhow::anyhow!("unknown entrypoints: {}", unknown.join(", ")))?
    };

    let mut store_config = RedisStoreConfig::new(config.redis_url.clone());
    store_config.namespace = config.namespace.clone();
    store_config.pool_size = (config.concurrency / 2).clamp(4, 64);
    let store = RedisStore::connect(store_config)
        .await
        .context("cannot reach Redis")?;
    let registry = Arc::new(RedisRegistry::new(&store));

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    worker::runtime::run(
        Arc::new(store.clone()),
        Some(registry),
        entrypoints,
        config.runtime(),
        shutdown,
    )
    .await?;
    shared::store::TaskStore::close(&store).await;
    Ok(())
}

async fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
    shutdown.cancel();
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
