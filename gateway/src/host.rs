//! The gateway process as a library: what the `gateway` binary is ([`run`]), and the embedded
//! single-process mode hosting a program's own entrypoints ([`run_hosting`], feature
//! `embedded`), so that an agent's program runs with no Redis as the quick start does.
//! Parse settings, set up logs and telemetry, connect (or go embedded), serve until SIGTERM
//! or SIGINT, flush telemetry. Operator errors (a console or payment setting it refuses) print
//! one line and exit with code 2, as the binary always did.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use server::admin::MetricsListen;
use store::RedisStore;
use telemetry::LogFormat;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::core::config::GatewayConfig;
use crate::core::pay::Gate;
use crate::core::state::AppState;

type Limiter = Arc<dyn store::ratelimit::RateLimiter>;

/// The gateway process with `config`: in cluster mode (Redis configured) over Redis, else in
/// embedded mode with an in-process worker hosting the built-ins. Serves until SIGTERM or
/// SIGINT, drains, flushes telemetry.
pub async fn run(config: GatewayConfig) -> anyhow::Result<()> {
    serve_process(config, Hosted::default()).await
}

/// The embedded gateway process whose in-process worker hosts `entrypoints` (a program's
/// own) instead of the built-ins: one process serving an agent's program with no Redis.
/// Configured Redis is refused: in cluster mode the program's entrypoints run in worker
/// processes ([`worker::host`]).
#[cfg(feature = "embedded")]
pub async fn run_hosting(
    config: GatewayConfig,
    entrypoints: worker::entrypoint::Entrypoints,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !config.redis.configured(),
        "a gateway hosts a program's entrypoints only in embedded mode (REDIS_URL unset); with Redis they run in worker processes"
    );
    serve_process(
        config,
        Hosted {
            entrypoints: Some(entrypoints),
        },
    )
    .await
}

/// What the embedded worker hosts: a program's entrypoints, or (none) the built-ins.
#[derive(Default)]
struct Hosted {
    #[cfg(feature = "embedded")]
    entrypoints: Option<worker::entrypoint::Entrypoints>,
}

async fn serve_process(mut config: GatewayConfig, hosted: Hosted) -> anyhow::Result<()> {
    let settings = telemetry::settings::Settings {
        prometheus: config.metrics_listen.is_some(),
        ..telemetry::settings::Settings::from_env("gateway")
    };
    let telemetry = telemetry::init_with(settings, LogFormat::parse(&config.log_format))
        .context("cannot set up logs and telemetry")?;
    let shutdown = CancellationToken::new();
    let background = TaskTracker::new();
    let exposition = telemetry.exposition();
    // An admin listener of its own is bound before anything starts (a taken port stops the
    // gateway at once) and stops with the gateway's shutdown.
    if let (Some(MetricsListen::Address(address)), Some(exposition)) =
        (&config.metrics_listen, &exposition)
    {
        let listener = server::admin::bind(address).await?;
        background.spawn(server::admin::run(
            listener,
            exposition.clone(),
            shutdown.clone().cancelled_owned(),
        ));
    }

    // The gRPC listener too; its bound address (a port 0 made real) is what the card names.
    let grpc = match &config.grpc_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen for gRPC on {address}"))?;
            config.grpc_listen = Some(listener.local_addr()?.to_string());
            Some(listener)
        }
        None => None,
    };

    if config.trust_forwarded_for {
        let proxies = config.forwarding().proxies;
        tracing::warn!(
            trusted_proxies = %proxies,
            "TRUST_FORWARDED_FOR is deprecated: set TRUSTED_PROXIES to the networks your proxies connect from"
        );
    }
    // Before any store is opened: a key file without a public URL is an operator error.
    let card_signer = match crate::core::card_signing::CardSigner::from_config(&config) {
        Ok(signer) => signer,
        Err(err) => {
            // One line, no backtrace: an operator error, not a crash.
            eprintln!("gateway: {err:#}");
            std::process::exit(2);
        }
    };
    let members = match crate::core::members::Members::from_config(&config) {
        Ok(members) => members.map(Arc::new),
        Err(err) => {
            // One line, no backtrace, no line content: an operator error, not a crash.
            eprintln!("gateway: {err}");
            std::process::exit(2);
        }
    };
    if let Some(members) = &members {
        tracing::info!(
            members = members.len(),
            "members read: the extended card is served"
        );
    }
    let (mut state, limiter) = if config.redis.configured() {
        cluster_state(&config, &shutdown, &background).await?
    } else {
        embedded_state(&config, hosted, &shutdown, &background)?
    };
    // SIGHUP reads the key file again: a rotation step without a restart. Watched with or
    // without a key file, so that a reload sent to every process never stops a gateway.
    let reload = crate::core::card_signing::reload_on_hangup(card_signer.clone(), shutdown.clone())
        .context("cannot watch SIGHUP (card signing key reloads)")?;
    background.spawn(reload);
    state.card_signer = card_signer;
    state.members = members;
    match crate::console::start(&state, &background) {
        Ok(true) => tracing::info!("operator console at {}/console", config.base_path()),
        Ok(false) => {}
        Err(err) => {
            // One line, no backtrace: an operator error, not a crash.
            eprintln!("gateway: {err}");
            std::process::exit(2);
        }
    }
    let store = state.store.clone();
    if let Some(listener) = grpc {
        let address = listener.local_addr()?;
        tracing::info!(%address, "A2A gRPC binding listening (lf.a2a.v1.A2AService)");
        background.spawn(server::serve::serve(
            listener,
            crate::a2a::grpc::router(state.clone(), limiter.clone()),
            limits(&config),
            shutdown.clone().cancelled_owned(),
        ));
    }
    // `--metrics-listen main`: `/metrics` on the gateway's own listener.
    let metrics = match (&config.metrics_listen, exposition) {
        (Some(MetricsListen::Main), Some(exposition)) => Some(exposition),
        _ => None,
    };
    serve(&config, state, limiter, metrics, shutdown.clone()).await?;

    shutdown.cancel();
    background.close();
    background.wait().await;
    store.close().await;
    // Blocking: the exporters flush on their own threads.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    Ok(())
}

/// Cluster mode: the task store in Redis (with the gateway's bounds), the rate limiter shared
/// by every gateway through it, the payment gate when payments are configured, and the Redis
/// memory watch; the background loops run on `background` until `shutdown`.
async fn cluster_state(
    config: &GatewayConfig,
    shutdown: &CancellationToken,
    background: &TaskTracker,
) -> anyhow::Result<(AppState, Limiter)> {
    let mut store_config = config.redis.store_config();
    store_config.max_tasks = config.max_tasks;
    store_config.max_retained = config.max_retained_tasks;
    store_config.max_retained_bytes = config.max_retained_bytes;
    store_config.max_retained_per_owner = config.max_retained_per_owner;
    store_config.max_live_per_owner = config.max_live_per_owner;
    store_config.max_live_per_address = config.max_live_per_address;
    store_config.retention = Duration::from_millis(config.retention_ms);
    let store = RedisStore::connect(store_config)
        .await
        .context("cannot open the task store in Redis")?;
    tracing::info!(durability = ?store.declared_durability(), "task store durability");
    tracing::info!("cluster mode: tasks in Redis, run by worker processes");
    let limiter: Limiter = Arc::new(store::ratelimit::RedisRateLimiter::new(&store));
    let payments = payment_gate(config, &store, &limiter, shutdown, background);
    let store_memory = Arc::new(crate::core::store_memory::MemoryWatch::new(
        config.redis_memory_high_water,
    ));
    if store_memory.enabled() {
        telemetry::metrics::store_memory_high_water(
            f64::from(config.redis_memory_high_water) / 100.0,
        );
        background.spawn(crate::core::store_memory::run(
            store_memory.clone(),
            Arc::new(store.clone()),
            Duration::from_millis(config.redis_memory_check_ms),
            shutdown.clone(),
        ));
    }
    let push = push_notifications(config, &store, shutdown, background)?;
    let state = AppState {
        payments,
        store_memory,
        push,
        card_signer: None,
        members: None,
        registry: Arc::new(store.registry()),
        idempotency: Arc::new(store::idempotency::RedisIdempotency::with_limits(
            &store,
            config.idempotency_limits(),
        )),
        store: Arc::new(store),
        catalog: Arc::new(crate::core::catalog::Catalog::from_config(config)),
        config: Arc::new(config.clone()),
        shutdown: shutdown.clone(),
    };
    Ok((state, limiter))
}

/// A2A push notifications, with this gateway's deliverer, unless `--push-notifications off`;
/// a setting they refuse (an allowlist that does not parse) stops the process.
fn push_notifications(
    config: &GatewayConfig,
    store: &RedisStore,
    shutdown: &CancellationToken,
    background: &TaskTracker,
) -> anyhow::Result<Option<Arc<crate::core::push::Push>>> {
    let Some(push) = crate::core::push::Push::from_config(config, store)? else {
        tracing::info!("A2A push notifications are off");
        return Ok(None);
    };
    let push = Arc::new(push);
    background.spawn(crate::a2a::push::deliver::run(
        Arc::new(store.clone()),
        push.clone(),
        shutdown.clone(),
    ));
    Ok(Some(push))
}

/// The payment gate when `PAY_TO` and a facilitator are configured, with its settlement
/// recovery loop; a configuration it refuses stops the process with exit code 2.
fn payment_gate(
    config: &GatewayConfig,
    store: &RedisStore,
    limiter: &Limiter,
    shutdown: &CancellationToken,
    background: &TaskTracker,
) -> Option<Arc<Gate>> {
    let gate = match Gate::from_config(config, Arc::new(store.credentials())) {
        Ok(gate) => gate.map(|mut gate| {
            gate.payer_rate =
                crate::core::pay::payer_rate::PayerRate::from_config(config, limiter.clone());
            Arc::new(gate)
        }),
        Err(err) => {
            // One line, no backtrace: an operator error, not a crash.
            eprintln!("gateway: {err}");
            std::process::exit(2);
        }
    };
    let gate = gate?;
    tracing::info!(pay_to = %gate.pay_to, network = gate.network.name, "priced routes take x402 payments");
    if let Some(warning) = crate::core::origin::unbound_origin_warning(config) {
        tracing::warn!("{warning}");
    }
    if config.settlement_recovery_ms > 0 {
        // A record is looked up once no settle call can still be running for it.
        let grace = crate::core::pay::recovery::grace(config);
        background.spawn(crate::core::pay::recovery::run(
            gate.clone(),
            Arc::new(store.clone()),
            Duration::from_millis(config.settlement_recovery_ms),
            grace,
            shutdown.clone(),
        ));
    }
    Some(gate)
}

/// Embedded mode: the in-memory store and an in-process worker, with a limiter of its own.
#[cfg(feature = "embedded")]
fn embedded_state(
    config: &GatewayConfig,
    hosted: Hosted,
    shutdown: &CancellationToken,
    background: &TaskTracker,
) -> anyhow::Result<(AppState, Limiter)> {
    tracing::info!("embedded mode (REDIS_URL unset): in-memory store, in-process worker");
    if config.pay_to.is_some() || config.facilitator_url.is_some() {
        tracing::warn!(
            "embedded mode takes no payments (paid tasks need a durable store); PAY_TO and FACILITATOR_URL are ignored"
        );
    }
    let entrypoints = match hosted
        .entrypoints
        .unwrap_or_else(|| crate::embedded::builtins(config))
        .private(&config.worker_private)
    {
        Ok(entrypoints) => entrypoints,
        Err(unknown) => {
            // One line, no backtrace: an operator error (a typo must not leave it public).
            eprintln!(
                "gateway: --worker-private names entrypoints the embedded worker does not host: {}",
                unknown.join(", ")
            );
            std::process::exit(2);
        }
    };
    let state =
        crate::embedded::start_hosting(config.clone(), entrypoints, shutdown.clone(), background);
    let limiter: Limiter = Arc::new(store::ratelimit::MemoryRateLimiter::default());
    Ok((state, limiter))
}

#[cfg(not(feature = "embedded"))]
fn embedded_state(
    _: &GatewayConfig,
    _: Hosted,
    _: &CancellationToken,
    _: &TaskTracker,
) -> anyhow::Result<(AppState, Limiter)> {
    anyhow::bail!(
        "this gateway was built without embedded mode (feature `embedded`): set REDIS_URL or REDIS_CLUSTER_URLS"
    )
}

/// Serves `state` on `--listen` (with `{BASE_PATH}/metrics` when `metrics` is given) until
/// SIGTERM or SIGINT, then drains.
async fn serve(
    config: &GatewayConfig,
    state: AppState,
    limiter: Limiter,
    metrics: Option<telemetry::Exposition>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "gateway listening; try: curl http://{address}/.well-known/agent-card.json");
    let base = config.base_path();
    let mut app = crate::app_with_limiter(state, limiter);
    if let Some(exposition) = metrics {
        // Merged outside the app's layers: a scrape is neither rate limited nor counted in
        // the HTTP metrics it reads.
        app = app.merge(server::admin::metrics_router(
            &format!("{base}/metrics"),
            exposition,
        ));
        tracing::info!(%address, "metrics: GET {base}/metrics");
    }
    server::serve::serve(listener, app, limits(config), async move {
        server::signal::terminated("shutting down").await;
        // Ends SSE streams and the embedded worker so the drain can finish.
        shutdown.cancel();
    })
    .await;
    Ok(())
}

/// The connection bounds of the gateway's listeners (HTTP, and gRPC when served): each
/// listener counts its own connections against them.
fn limits(config: &GatewayConfig) -> server::serve::Limits {
    server::serve::Limits {
        header_timeout: Duration::from_millis(config.header_timeout_ms),
        drain_timeout: Duration::from_secs(10),
        h2_keep_alive_interval: Duration::from_millis(config.h2_keep_alive_ms),
        max_connections: config.max_connections.max(1),
        max_connections_per_ip: config.max_connections_per_ip.max(1),
        trusted_proxies: config.forwarding().proxies,
    }
}
