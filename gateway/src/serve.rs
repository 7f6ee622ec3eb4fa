//! The HTTP server loop. `axum::serve` sets no hyper timer, so hyper's header read timeout never
//! fires and a client can hold a connection by trickling headers forever; this loop configures
//! hyper directly: a header read timeout, a bound on header size, and graceful shutdown that
//! lets in-flight requests finish.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Largest request head (request line + headers) accepted; larger heads get 431.
const MAX_HEAD_BYTES: usize = 64 * 1024;

pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    drain_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Without TCP_NODELAY, an SSE event (or an answer on a keep-alive connection) written
        // while the previous one is unacknowledged waits for the client's delayed ACK (Nagle's
        // algorithm): about 40 ms per write on Linux.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections were still open at the end of the drain");
    }
}
