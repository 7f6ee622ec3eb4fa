//! The worker process as a library: what the `worker` binary is, hosting a program's own
//! entrypoints too.
//!
//! [`Host::from_env`] reads every flag and environment variable the binary reads
//! ([`WorkerConfig`]); [`Host::run`] sets up logs, telemetry and `/metrics`, connects to
//! Redis, registers, runs tasks, and on SIGTERM or SIGINT drains, flushes telemetry and
//! returns the process's exit code. The `worker` binary is `Host::from_env().run()`; an agent's
//! program adds its entrypoints first:
//!
//! ```no_run
//! use worker::entrypoint::Entrypoint;
//! use worker::handler::HandlerError;
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let hello = Entrypoint::typed("hello", "Greets", |name: String, _ctx| async move {
//!         Ok::<_, HandlerError>(format!("Hello, {name}"))
//!     });
//!     worker::host::Host::from_env().entrypoint(hello).run().await
//! }
//! ```
//!
//! A program's entrypoints are hosted beside what the flags ask for: built-ins only where
//! `--entrypoints` names them (the binary, with none of its own, hosts every built-in by
//! default), the agents of `--agent`, the A2A TCK agent with `--a2a-tck-agent`. `--price`,
//! `--retry-safe` and `--siwx` apply to all of them. A key hosted twice stops the process at
//! start.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use store::RedisStore;
use store::registry::RedisRegistry;
use telemetry::LogFormat;
use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::entrypoint::{Entrypoint, Entrypoints};
use crate::remote::Agents;

/// Why the worker process stopped before its drain finished.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A setting names something this worker cannot host (a mistyped entrypoint, a bad price,
    /// an unreadable agent card): nothing was started.
    #[error("{0}")]
    Settings(String),
    #[error("cannot set up logs and telemetry: {0}")]
    Telemetry(String),
    #[error("cannot serve /metrics: {0}")]
    Admin(#[source] std::io::Error),
    #[error("cannot open the task store in Redis: {0}")]
    Store(#[source] store::StoreError),
    #[error("the worker runtime stopped: {0}")]
    Runtime(String),
}

impl HostError {
    /// The process's exit code: 2 for settings, as clap's usage errors, 1 otherwise.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            HostError::Settings(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}

/// A worker process: its settings and the program's own entrypoints.
pub struct Host {
    config: WorkerConfig,
    own: Entrypoints,
}

impl Host {
    /// Settings from the command line and the environment, exactly as the `worker` binary
    /// reads them; a flag that does not parse (or no Redis) prints clap's usage error and
    /// exits with code 2.
    pub fn from_env() -> Host {
        Host::new(WorkerConfig::parse())
    }

    /// A host with settings the caller built (tests, a program of its own flags).
    pub fn new(config: WorkerConfig) -> Host {
        Host {
            config,
            own: Entrypoints::new(),
        }
    }

    /// Hosts `entrypoint` too.
    pub fn entrypoint(mut self, entrypoint: Entrypoint) -> Host {
        self.own = self.own.with(entrypoint);
        self
    }

    /// Hosts every one of `entrypoints` too.
    pub fn entrypoints(mut self, entrypoints: Entrypoints) -> Host {
        for key in entrypoints.keys() {
            if let Some(entrypoint) = entrypoints.get(&key) {
                self.own = self.own.with(entrypoint.clone());
            }
        }
        self
    }

    /// Runs until SIGTERM or SIGINT and the drain, then returns the exit code; an error is
    /// printed on one line first (no backtrace: an operator's error, not a crash).
    pub async fn run(self) -> ExitCode {
        match self.serve().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                err.exit_code()
            }
        }
    }

    /// [`Host::run`] returning the error instead of printing it.
    pub async fn serve(self) -> Result<(), HostError> {
        let Host { config, own } = self;
        // Settings errors come before anything starts: nothing to flush.
        let (entrypoints, agents) = hosted(&config, own).await.map_err(HostError::Settings)?;
        let settings = telemetry::settings::Settings {
            prometheus: config.metrics_listen.is_some(),
            ..telemetry::settings::Settings::from_env("worker")
        };
        let telemetry = telemetry::init_with(settings, LogFormat::parse(&config.log_format))
            .map_err(|err| HostError::Telemetry(format!("{err:#}")))?;
        // Bound before anything starts, so a taken port stops the worker at once. It serves
        // until the worker has drained (the drain's metrics stay readable), then stops.
        let admin_stop = CancellationToken::new();
        let admin = match (&config.metrics_listen, telemetry.exposition()) {
            (Some(address), Some(exposition)) => {
                let listener = server::admin::bind(address)
                    .await
                    .map_err(HostError::Admin)?;
                Some(tokio::spawn(server::admin::run(
                    listener,
                    exposition,
                    admin_stop.clone().cancelled_owned(),
                )))
            }
            _ => None,
        };
        tracing::info!(entrypoints = %entrypoints.keys().join(", "), "hosted entrypoints");
        if !config.agents.is_empty() {
            tracing::info!(agents = %config.agents.join(", "), "hosting the entrypoints of remote agents");
        }
        if !config.prices.is_empty() {
            let prices: Vec<String> = config.prices.iter().map(ToString::to_string).collect();
            tracing::info!(prices = %prices.join(", "), "priced entrypoints (decimal USDC)");
        }

        // Signals are heard from here on: a connection that hangs (a name the resolver cannot
        // answer yet, as in a container network starting up) must not keep SIGTERM waiting.
        let shutdown = CancellationToken::new();
        // Installed here, before the connect starts (`terminated` installs when called).
        tokio::spawn(stop_on_signal(shutdown.clone()));
        let mut store_config = config.redis.store_config();
        store_config.pool_size = (config.concurrency / 2).clamp(4, 64);
        let connected = tokio::select! {
            connected = RedisStore::connect(store_config) => Some(connected),
            () = shutdown.cancelled() => None,
        };
        // One teardown for every way out: stopped while connecting, the store unreachable, or
        // the runtime done.
        let (ran, store) = match connected {
            None => {
                tracing::info!("stopped before the store was reached: nothing to drain");
                (Ok(()), None)
            }
            Some(Err(err)) => (Err(HostError::Store(err)), None),
            Some(Ok(store)) => {
                let registry = Arc::new(RedisRegistry::new(&store));
                let entrypoints = crate::runtime::Hosted::new(entrypoints);
                if let Some(agents) = agents
                    && config.agent_refresh_secs > 0
                {
                    let flags = config.clone();
                    tokio::spawn(crate::remote::refresh::run(
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
                let ran = crate::runtime::run(
                    Arc::new(store.clone()),
                    Some(registry),
                    entrypoints,
                    runtime,
                    shutdown,
                )
                .await;
                let ran = ran.map_err(|err| HostError::Runtime(format!("{err:#}")));
                (ran, Some(store))
            }
        };
        admin_stop.cancel();
        if let Some(admin) = admin {
            let _ = admin.await;
        }
        if let Some(store) = store {
            store::TaskStore::close(&store).await;
        }
        // Blocking: the exporters flush on their own threads.
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        ran
    }
}

/// The entrypoints this worker hosts: the program's own (`own`), the built-ins
/// (`--entrypoints`; by default every built-in, or none with `--agent` or entrypoints of the
/// program's own), the A2A TCK agent with `--a2a-tck-agent`, every entrypoint of each
/// `--agent`; then `--retry-safe`, `--siwx` and `--price` applied. A mistyped name or price,
/// or a key hosted twice, stops the worker: it must not leave a paid entrypoint free, nor
/// host something other than what was asked.
async fn hosted(
    config: &WorkerConfig,
    own: Entrypoints,
) -> Result<(Entrypoints, Option<Agents>), String> {
    let builtins = crate::builtins::all().with(crate::builtins::sleep::entrypoint_with_max(
        config.max_sleep_ms,
    ));
    // An agent's keys, or the program's, would collide with the built-ins of the same names:
    // with either, built-ins are hosted only where `--entrypoints` names them.
    let mut entrypoints = if config.entrypoints.is_empty() {
        if config.agents.is_empty() && own.is_empty() {
            builtins
        } else {
            Entrypoints::new()
        }
    } else {
        builtins
            .only(&config.entrypoints)
            .map_err(|unknown| format!("unknown entrypoints: {}", unknown.join(", ")))?
    };
    // The flag asks for the agent by itself: `--entrypoints` need not name it too.
    if config.a2a_tck_agent {
        entrypoints = entrypoints.with(crate::builtins::tck::entrypoint());
    }
    let twice: Vec<String> = own
        .keys()
        .into_iter()
        .filter(|key| entrypoints.get(key).is_some())
        .collect();
    if !twice.is_empty() {
        return Err(format!(
            "entrypoints hosted twice (the program's own and a built-in): {}",
            twice.join(", ")
        ));
    }
    for key in own.keys() {
        if let Some(entrypoint) = own.get(&key) {
            entrypoints = entrypoints.with(entrypoint.clone());
        }
    }
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

/// `entrypoints` declared retry-safe, private, Sign-In-With-X and priced as the flags say. `strict`
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
    let private: Vec<String> = config
        .private
        .iter()
        .filter(|key| hosted(key))
        .cloned()
        .collect();
    let entrypoints = entrypoints.private(&private).map_err(|unknown| {
        format!(
            "--private names entrypoints this worker does not host: {}",
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
    crate::prices::apply(entrypoints, &prices).map_err(|err| err.to_string())
}

/// Cancels `shutdown` on SIGTERM or SIGINT; the handlers are installed by this call, before the
/// returned future runs.
fn stop_on_signal(shutdown: CancellationToken) -> impl Future<Output = ()> {
    let terminated = server::signal::terminated("draining");
    async move {
        terminated.await;
        shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::handler::HandlerError;

    fn config(args: &[&str]) -> WorkerConfig {
        let base = ["worker", "--redis-url", "redis://x/"];
        match WorkerConfig::try_parse_from(base.iter().chain(args)) {
            Ok(config) => config,
            Err(err) => panic!("{err}"),
        }
    }

    fn own(key: &str) -> Entrypoints {
        Entrypoints::new().with(Entrypoint::typed(key, "mine", |input: Value, _ctx| async {
            Ok::<_, HandlerError>(input)
        }))
    }

    #[tokio::test]
    async fn the_binary_hosts_every_builtin_and_a_program_only_its_own() -> Result<(), String> {
        let (builtins, _) = hosted(&config(&[]), Entrypoints::new()).await?;
        assert!(builtins.get("echo").is_some() && builtins.get("sleep").is_some());
        let (program, _) = hosted(&config(&[]), own("research")).await?;
        assert_eq!(program.keys(), ["research"]);
        Ok(())
    }

    #[tokio::test]
    async fn flags_add_builtins_and_apply_to_the_programs_entrypoints() -> Result<(), String> {
        let (hosted, _) = hosted(
            &config(&[
                "--entrypoints",
                "echo",
                "--retry-safe",
                "research",
                "--price",
                "research=0.01",
            ]),
            own("research"),
        )
        .await?;
        assert_eq!(hosted.keys(), ["echo", "research"]);
        let research = hosted.get("research").ok_or("no research")?;
        assert!(research.retry_safe && research.price.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn a_key_hosted_twice_or_a_typo_stops_the_worker() {
        let twice = hosted(&config(&["--entrypoints", "echo"]), own("echo")).await;
        assert!(matches!(twice, Err(message) if message.contains("hosted twice")));
        let typo = hosted(&config(&["--retry-safe", "reserch"]), own("research")).await;
        assert!(matches!(typo, Err(message) if message.contains("reserch")));
        let private = hosted(&config(&["--private", "reserch"]), own("research")).await;
        assert!(matches!(private, Err(message) if message.contains("--private")));
    }

    #[tokio::test]
    async fn private_marks_the_named_entrypoints_only() -> Result<(), String> {
        let (hosted, _) = hosted(
            &config(&["--entrypoints", "echo", "--private", "research"]),
            own("research"),
        )
        .await?;
        let infos = hosted.infos();
        let private: Vec<&str> = infos
            .iter()
            .filter(|info| info.private)
            .map(|info| info.key.as_str())
            .collect();
        assert_eq!(private, ["research"]);
        Ok(())
    }
}
