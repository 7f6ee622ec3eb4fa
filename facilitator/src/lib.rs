//! The project's own x402 facilitator, for development and tests: an offline stand-in for a
//! public facilitator (such as x402.org's) speaking the same `/verify`, `/settle` and
//! `/supported` API, so that the gateway and paying clients can be run end to end without a
//! chain, an RPC endpoint or test USDC.
//!
//! Two schemes, as @x402/evm 2.27.0 has them: `exact` (EIP-3009, x402 v1 and v2) and `upto`
//! (a Permit2 witness permit of a maximum, settled for the actual amount the payee asks, v2).
//! Signatures are checked for real (EIP-712 recovery, through the `payments` crate), but funds
//! are play money: a ledger of USDC balances per address (the Anvil accounts start with 1000
//! USDC each) and the spent nonces with what each settled, in memory or in Redis.
//! Faults (refusals, 500s, slowness, dropped connections) can be switched on at runtime to
//! exercise a client's failure handling. Not for production: nothing settles on a chain, and
//! the control routes are unauthenticated.
//!
//! - [`config`]: settings, each a flag and an environment variable;
//! - [`verify`]: offline checks of a request, then the ledger's (nonce, balance);
//! - [`settle`]: verification again, then the atomic ledger settlement;
//! - [`ledger`]: the [`ledger::Ledger`] trait, in memory and in Redis (one Lua script);
//! - [`faults`]: the injected faults, switchable at runtime;
//! - [`routes`]: the x402 API and the dev controls;
//!
//! [`serve`] runs the whole server on a bound listener; tests start it in-process.

pub mod config;
pub mod error;
pub mod faults;
pub mod ledger;
pub mod routes;
pub mod settle;
pub mod state;
pub mod verify;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::FacilitatorConfig;
use crate::faults::{FaultSettings, Faults};
use crate::ledger::{Ledger, LedgerError, MemoryLedger, RedisLedger};
use crate::state::{AppState, Stats};

/// How long a client may take to send its request line and headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests may take to finish once shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections the dev facilitator serves at once (its callers are a few gateways and
/// tests; the bound keeps a stray client from holding every socket).
const MAX_CONNECTIONS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot reach Redis: {0}")]
    Redis(#[source] LedgerError),
    #[error("cannot apply the starting funds: {0}")]
    Funds(#[source] LedgerError),
}

/// Connects the ledger, applies the starting funds and serves on `listener` until `shutdown`
/// completes, then drains.
pub async fn serve(
    config: &FacilitatorConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let state = build_state(config).await?;
    // The cluster's server loop: header read timeout, head size bound, graceful drain.
    server::serve::serve(
        listener,
        routes::router(state),
        server::serve::Limits {
            header_timeout: HEADER_TIMEOUT,
            drain_timeout: DRAIN_TIMEOUT,
            h2_keep_alive_interval: server::serve::H2_KEEP_ALIVE_INTERVAL,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_ip: MAX_CONNECTIONS,
            trusted_proxies: Default::default(),
        },
        shutdown,
    )
    .await;
    Ok(())
}

/// The shared state `config` describes, its ledger funded.
pub async fn build_state(config: &FacilitatorConfig) -> Result<AppState, StartError> {
    let ledger: Arc<dyn Ledger> = match &config.redis_url {
        Some(url) => {
            let ledger = RedisLedger::connect(url.expose(), &config.namespace)
                .await
                .map_err(StartError::Redis)?;
            tracing::info!(namespace = %config.namespace, "ledger in Redis");
            Arc::new(ledger)
        }
        None => {
            tracing::info!("ledger in memory (REDIS_URL unset): lost on exit");
            Arc::new(MemoryLedger::new())
        }
    };
    for funding in config.fundings() {
        let funded = ledger
            .fund_if_absent(funding.address, funding.amount)
            .await
            .map_err(StartError::Funds)?;
        if funded {
            tracing::info!(
                address = %funding.address,
                usdc = %payments::amount::to_decimal(funding.amount),
                "funded"
            );
        }
    }
    tracing::info!(address = %config.address(), "facilitator address (upto permits name it)");
    Ok(AppState {
        address: config.address(),
        ledger,
        faults: Arc::new(Faults::new(FaultSettings {
            settle: config.fault,
            verify: config.verify_fault,
            slow_ms: config.slow_ms,
        })),
        stats: Arc::new(Stats::default()),
    })
}
