//! Shutdown on a signal: SIGTERM (what an orchestrator sends) or SIGINT (Ctrl-C) both mean
//! "stop cleanly"; each process drains in its own way once [`terminated`] returns.

use tokio::signal::unix::{SignalKind, signal};

/// Waits for SIGTERM or SIGINT and logs which came, as "`SIG...`: `what`" (e.g. "shutting
/// down", "draining"). The handlers are installed when this is called, not when the future is
/// first polled: a process that spawns the wait and goes on (a worker connecting to Redis) is
/// stopped cleanly by a signal that comes right after, rather than killed by its default
/// action. If the handlers cannot be installed it says so and never returns: the process then
/// stops only when killed, rather than at once.
pub fn terminated(what: &str) -> impl Future<Output = ()> + Send + use<> {
    let what = what.to_owned();
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot listen for signals");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: {what}"),
            _ = int.recv() => tracing::info!("SIGINT: {what}"),
        }
    }
}
