//! `worker`: parse settings, set up logs and telemetry, connect, run until SIGTERM or SIGINT,
//! drain, flush telemetry, exit.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use store::RedisStore;
use store::registry::RedisRegistry;
use telemetry::LogFormat;
use tokio_util::sync::CancellationToken;
use worker::config::WorkerConfig;
use worker::entrypoint::Entrypoints;
use worker::remote::Agents;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = WorkerConfig::parse();
    // Settings errors are one line, like clap's, before anything starts: no backtrace (which
    // anyhow prints when RUST_BACKTRACE is set) and nothing to flush.
    let (entrypoints, agents) = match hosted(&config).await {
        Ok(hosted) => hosted,
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    };
    let settings = telemetry::settings::Settings {
        prometheus: config.metrics_listen.is_some(),
        ..telemetry::settings::Settings::from_env("worker")
    };
    let telemetry = telemetry::init_with(settings, LogFormat::parse(&config.log_format))
        .context("cannot set up logs and telemetry")?;
    // Bound before anything starts, so a taken port stops the worker at once. It serves until
    // the worker has drained (the drain's metrics stay readable), then stops.
    let admin_stop = CancellationToken::new();
    let admin = match (&config.metrics_listen, telemetry.exposition()) {
        (Some(address), Some(exposition)) => {
            let listener = server::admin::bind(address).await?;
            let stop = admin_stop.clone();
            Some(tokio::spawn(server::admin::run(
                listener,
                exposition,
                stop.cancelled_owned(),
            )))
        }
        _ => None,
    };
    if !config.agents.is_empty() {
        tracing::info!(agents = %config.agents.join(", "), "hosting the entrypoints of remote agents");
    }
    if !config.prices.is_empty() {
        let prices: Vec<String> = config.prices.iter().map(ToString::to_string).collect();
        tracing::info!(prices = %prices.join(", "), "priced entrypoints (decimal USDC)");
    }

    let mut store_config = config.redis.store_config();
    store_config.pool_size = (config.concurrency / 2).clamp(4, 64);
    let store = RedisStore::connect(store_config)
        .await
        .context("cannot open the task store in Redis")?;
    let registry = Arc::new(RedisRegistry::new(&store));

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let entrypoints = worker::runtime::Hosted::new(entrypoints);
    if let Some(agents) = agents
        && config.agent_refresh_secs > 0
    {
        let flags = config.clone();
        tokio::spawn(worker::remote::refresh::run(
            agents,
            entrypoints.clone(),
            Duration::from_secs(config.agent_refresh_secs),
            move |set| decorate(&flags, set, false),
            shutdown.clone(),
        ));
    }
    let mut runtime = config.runtime();
    // Fresh values for each export, but never sampled more often than every 250 ms.
    runtime.gauge_interval = telemetry
        .settings()
        .metric_interval
        .clamp(Duration::from_millis(250), runtime.gauge_interval);
    worker::runtime::run(
        Arc::new(store.clone()),
        Some(registry),
        entrypoints,
        runtime,
        shutdown,
    )
    .await?;
    admin_stop.cancel();
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    store::TaskStore::close(&store).await;
    // Blocking: the exporters flush on their own threads.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    Ok(())
}

/// The entrypoints this worker hosts (`--entrypoints`, default every built-in or none with
/// `--agent`, plus the A2A TCK agent with `--a2a-tck-agent`, plus every entrypoint of each
/// `--agent`), priced (`--price`). A mistyped name or price stops the
/// worker: it must not leave a paid entrypoint free, nor host something other than what was
/// asked.
async fn hosted(config: &WorkerConfig) -> Result<(Entrypoints, Option<Agents>), String> {
    let mut builtins = worker::builtins::all().with(worker::builtins::sleep::entrypoint_with_max(
        config.max_sleep_ms,
    ));
    if config.a2a_tck_agent {
        builtins = builtins.with(worker::builtins::tck::entrypoint());
    }
    let entrypoints = if config.entrypoints.is_empty() && !config.agents.is_empty() {
        // An agent's keys would collide with the built-ins of the same names: with an agent,
        // built-ins are hosted only where `--entrypoints` names them.
        if config.a2a_tck_agent {
            Entrypoints::new().with(worker::builtins::tck::entrypoint())
        } else {
            Entrypoints::new()
        }
    } else if config.entrypoints.is_empty() {
        builtins
    } else {
        let only = builtins
            .only(&config.entrypoints)
            .map_err(|unknown| format!("unknown entrypoints: {}", unknown.join(", ")))?;
        // The flag asks for the agent by itself: `--entrypoints` need not name it too.
        if config.a2a_tck_agent {
            only.with(worker::builtins::tck::entrypoint())
        } else {
            only
        }
    };
    if config.agents.is_empty() {
        return Ok((decorate(config, entrypoints, true)?, None));
    }
    let token = config.agent_token()?;
    let mut agents = Agents::start(
        entrypoints,
        &config.agents,
        token.as_ref(),
        config.max_result_bytes,
    )
    .await
    .map_err(|err| err.to_string())?;
    let entrypoints = agents
        .compose(true)
        .map_err(|refused| refused.first().map(ToString::to_string).unwrap_or_default())?;
    Ok((decorate(config, entrypoints, true)?, Some(agents)))
}

/// `entrypoints` declared retry-safe, Sign-In-With-X and priced as the flags say. `strict`
/// (at start): a flag naming an entrypoint not hosted is an error. Otherwise (a refreshed
/// agent card) such names are skipped: the entrypoint may come back, and is priced again then.
fn decorate(
    config: &WorkerConfig,
    entrypoints: Entrypoints,
    strict: bool,
) -> Result<Entrypoints, String> {
    let keys = entrypoints.keys();
    let hosted = |key: &str| strict || keys.iter().any(|hosted| hosted == key);
    let retry_safe: Vec<String> = config
        .retry_safe
        .iter()
        .filter(|key| hosted(key))
        .cloned()
        .collect();
    let siwx: Vec<String> = config
        .siwx
        .iter()
        .filter(|spec| hosted(spec.trim().split(':').next().unwrap_or_default()))
        .cloned()
        .collect();
    let prices: Vec<_> = config
        .prices
        .iter()
        .filter(|spec| hosted(&spec.key))
        .cloned()
        .collect();
    let entrypoints = entrypoints.retry_safe(&retry_safe).map_err(|unknown| {
        format!(
            "--retry-safe names entrypoints this worker does not host: {}",
            unknown.join(", ")
        )
    })?;
    let entrypoints = entrypoints.siwx(&siwx).map_err(|bad| {
        format!(
            "--siwx names entrypoints this worker does not host, or options other than auth-only: {}",
            bad.join(", ")
        )
    })?;
    // A typo must not leave an entrypoint silently on the default policy (checked at start; a
    // refreshed card may drop an entrypoint the policy names, which may come back).
    if strict {
        let hosted = entrypoints.keys();
        let unknown: Vec<&str> = config
            .retry
            .iter()
            .map(|spec| spec.entrypoint.as_str())
            .filter(|key| !hosted.iter().any(|hosted| hosted == key))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "--retry names entrypoints this worker does not host: {}",
                unknown.join(", ")
            ));
        }
    }
    worker::prices::apply(entrypoints, &prices).map_err(|err| err.to_string())
}

async fn stop_on_signal(shutdown: CancellationToken) {
    server::signal::terminated("draining").await;
    shutdown.cancel();
}
