//! `facilitator`: parse settings, set up logs, connect the ledger, serve until SIGTERM or
//! SIGINT, flush telemetry.

use anyhow::Context;
use clap::Parser;
use facilitator::config::FacilitatorConfig;
use telemetry::LogFormat;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = FacilitatorConfig::parse();
    if let Some(refusal) = config.listen_refusal() {
        // One line, no backtrace: an operator error, not a crash.
        eprintln!("facilitator: {refusal}");
        std::process::exit(2);
    }
    let telemetry = telemetry::init("facilitator", LogFormat::parse(&config.log_format))
        .context("cannot set up logs and telemetry")?;

    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener.local_addr()?;
    tracing::warn!(
        "development only: this facilitator moves play money (an in-process USDC ledger), never real funds"
    );
    tracing::info!(
        %address,
        settle_fault = ?config.fault,
        verify_fault = ?config.verify_fault,
        "facilitator listening (dev only, play money); try: curl http://{address}/supported"
    );
    let served = facilitator::serve(
        &config,
        listener,
        server::signal::terminated("shutting down"),
    )
    .await;
    // Blocking: the exporters flush on their own threads.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    served.context("facilitator failed to start")
}
