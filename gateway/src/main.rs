//! `gateway`: the gateway process of [`gateway::host`]: parse settings, set up logs and
//! telemetry, connect (or go embedded), serve until SIGTERM or SIGINT, flush telemetry.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    gateway::host::run(gateway::core::config::GatewayConfig::parse()).await
}
