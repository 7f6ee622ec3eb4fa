//! The HTTP server loop. `axum::serve` sets no hyper timer, so hyper's header read timeout never
//! fires and a client can hold a connection by trickling headers forever; this loop configures
//! hyper directly: a header read timeout, a bound on header size, and graceful shutdown that
//! lets in-flight requests finish.
//!
//! What is bounded, per connection:
//! - the first request head: a connection whose first request (HTTP/1 request line and headers,
//!   or for HTTP/2 the connection preface and the first HEADERS frame) has not reached the
//!   router within `header_timeout` is closed. This also covers a client that connects and
//!   sends nothing (hyper's protocol detection waits for bytes without a timer).
//! - HTTP/1: each later request head too (hyper's `header_read_timeout`) and its size.
//! - HTTP/2: the header list size (same bound as HTTP/1), and liveness: a PING every
//!   `h2_keep_alive_interval` ([`H2_KEEP_ALIVE_INTERVAL`] by default), the connection closed
//!   when one goes unanswered for
//!   `header_timeout`. hyper offers no read timeout on later HTTP/2 request heads, so an
//!   HTTP/2 client that answers PINGs may keep an idle connection open; the connection caps
//!   bound how many such connections there are.
//! - how many connections are open: `max_connections` in total and `max_connections_per_ip`
//!   per client address (an IPv6 peer by its /64, [`crate::address::counted`], as the gateway's
//!   rate limits count it; a peer in `trusted_proxies` is not held to it: a proxy's one address
//!   carries many clients); more are closed at accept and counted, logged at `warn` for the
//!   first and every 1,000th refusal (a flood of connections must not become a flood of log
//!   lines).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tower::ServiceExt;

use crate::address::{TrustedProxies, counted};

/// Largest request head (request line + headers) accepted; larger heads get 431.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How often an HTTP/2 connection is PINGed to check that its client is still there, by
/// default (gateway `--h2-keep-alive-ms`).
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// Bounds on the connections the server holds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// See the module's documentation.
    pub header_timeout: Duration,
    /// How long graceful shutdown waits for open connections.
    pub drain_timeout: Duration,
    /// How often an HTTP/2 connection is PINGed (unanswered for `header_timeout`: closed).
    pub h2_keep_alive_interval: Duration,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Peers not held to `max_connections_per_ip` (the gateway's `--trusted-proxies`).
    pub trusted_proxies: TrustedProxies,
}

/// Open connections per client address (as [`counted`]: an IPv6 peer by its /64); an address
/// leaves the map when its count reaches zero.
#[derive(Default)]
struct PerIp {
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIp {
    /// Counts a connection from `peer`, unless its address already has `cap` open.
    fn try_add(self: &Arc<Self>, peer: IpAddr, cap: usize) -> Option<IpGuard> {
        let ip = counted(peer);
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= cap {
            if *count == 0 {
                open.remove(&ip);
            }
            return None;
        }
        *count += 1;
        Some(IpGuard {
            map: self.clone(),
            ip,
        })
    }
}

/// One counted connection of an address; dropping it uncounts it.
struct IpGuard {
    map: Arc<PerIp>,
    ip: IpAddr,
}

impl Drop for IpGuard {
    fn drop(&mut self) {
        let mut open = self
            .map
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Connections refused at accept, over either cap, since the process started.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Counts a refused connection; logs the first and every 1,000th at `warn`, the rest at
/// `debug`.
fn refuse(peer: std::net::SocketAddr, max: usize, why: &'static str) {
    let refused = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    if refused == 1 || refused.is_multiple_of(1_000) {
        tracing::warn!(peer = %peer, refused, max, "connection refused: {why}");
    } else {
        tracing::debug!(peer = %peer, refused, max, "connection refused: {why}");
    }
}

pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let header_timeout = limits.header_timeout;
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.h2_keep_alive_interval.max(Duration::from_millis(1)))
        .keep_alive_timeout(header_timeout)
        .max_header_list_size(u32::try_from(MAX_HEAD_BYTES).unwrap_or(u32::MAX));
    let graceful = GracefulShutdown::new();
    let total = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let per_ip = Arc::new(PerIp::default());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        let Ok(permit) = total.clone().try_acquire_owned() else {
            refuse(peer, limits.max_connections, "too many open connections");
            drop(stream);
            continue;
        };
        let ip_guard = if limits.trusted_proxies.contains(peer.ip()) {
            None
        } else if let Some(guard) = per_ip.try_add(peer.ip(), limits.max_connections_per_ip) {
            Some(guard)
        } else {
            refuse(
                peer,
                limits.max_connections_per_ip,
                "too many open connections from this address",
            );
            drop(stream);
            continue;
        };
        // Without TCP_NODELAY, an SSE event (or an answer on a keep-alive connection) written
        // while the previous one is unacknowledged waits for the client's delayed ACK (Nagle's
        // algorithm): about 40 ms per write on Linux.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY");
        }
        // Signalled when a request reaches the router: the first one ends the head deadline.
        let seen = Arc::new(Notify::new());
        let signal = seen.clone();
        let app = app.clone().map_request(
            move |mut request: axum::extract::Request<hyper::body::Incoming>| {
                // The peer address, for the per-address rate limit (`crate::ratelimit`).
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                signal.notify_one();
                request
            },
        );
        let service = TowerToHyperService::new(app);
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            let _permit = permit;
            let _ip_guard = ip_guard;
            tokio::pin!(connection);
            let first = tokio::select! {
                ended = &mut connection => Some(ended),
                waited = tokio::time::timeout(header_timeout, seen.notified()) => match waited {
                    Ok(()) => None,
                    Err(_) => {
                        tracing::debug!(peer = %peer, "no request head in time: connection closed");
                        return;
                    }
                },
            };
            let ended = match first {
                Some(ended) => ended,
                None => connection.await,
            };
            if let Err(err) = ended {
                tracing::debug!(error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections were still open at the end of the drain");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn the_cap_per_address_counts_an_ipv6_64_as_one_address() {
        let per_ip = Arc::new(PerIp::default());
        let first = per_ip.try_add(ip("2001:db8:1:2::1"), 2);
        let second = per_ip.try_add(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), 2);
        assert!(first.is_some() && second.is_some());
        // A third address of the same /64 is over the cap; the next /64 and IPv4 are not.
        assert!(per_ip.try_add(ip("2001:db8:1:2::3"), 2).is_none());
        let other = per_ip.try_add(ip("2001:db8:1:3::1"), 2);
        assert!(other.is_some());
        // An IPv4-mapped peer counts as its IPv4 address.
        let v4 = per_ip.try_add(ip("192.0.2.1"), 1);
        assert!(v4.is_some());
        assert!(per_ip.try_add(ip("::ffff:192.0.2.1"), 1).is_none());
        // Closing a connection frees its place.
        drop(first);
        assert!(per_ip.try_add(ip("2001:db8:1:2::3"), 2).is_some());
    }
}
