//! Shutdown on a signal: SIGTERM (what an orchestrator sends) or SIGINT (Ctrl-C) both mean
//! "stop cleanly"; each process drains in its own way once [`terminated`] returns.

use tokio::signal::unix::{SignalKind, signal};

/// Waits for SIGTERM or SIGINT and logs which came, as "`SIG...`: `what`" (e.g. "shutting
/// down", "draining"). If the handlers cannot be installed it says so and never returns: the
/// process then stops only when killed, rather than at once.
pub async fn terminated(what: &str) {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: {what}"),
        _ = int.recv() => tracing::info!("SIGINT: {what}"),
    }
}
