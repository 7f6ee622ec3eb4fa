//! The admin listener: `/metrics` (the process's metrics in the Prometheus text format) and
//! `/health`, on an address of their own (`--metrics-listen ADDRESS`), so that a scraper reaches
//! them on a port that is not the public one, and a worker, which serves no API, has them at
//! all. [`metrics_router`] is the same `/metrics` for a gateway that serves it on its own
//! listener (`--metrics-listen main`).
//!
//! Small bounds: a handful of scrapers connect, and nothing here reads a request body.

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use telemetry::Exposition;
use tokio::net::TcpListener;

use crate::serve::{Limits, serve};

/// Where a gateway serves `/metrics` (`--metrics-listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    /// `main`: on the gateway's own listener, at `{BASE_PATH}/metrics`.
    Main,
    /// `HOST:PORT`: on an admin listener of its own, at `/metrics` (and `/health`).
    Address(String),
}

impl MetricsListen {
    /// `main`, or an address as [`parse_address`] takes it.
    pub fn parse(text: &str) -> Result<MetricsListen, String> {
        if text.trim() == "main" {
            return Ok(MetricsListen::Main);
        }
        parse_address(text).map(MetricsListen::Address)
    }
}

/// A `HOST:PORT` to listen on (`127.0.0.1:9464`, `0.0.0.0:9464`, `[::1]:9464`,
/// `localhost:9464`); a typo is refused when the settings are read, not at bind.
pub fn parse_address(text: &str) -> Result<String, String> {
    let text = text.trim();
    let valid = text
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "expected HOST:PORT (e.g. 127.0.0.1:9464), got {text:?}"
        ))
    }
}

/// How the admin listener bounds its connections.
fn limits() -> Limits {
    Limits {
        header_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(5),
        h2_keep_alive_interval: crate::serve::H2_KEEP_ALIVE_INTERVAL,
        max_connections: 64,
        max_connections_per_ip: 16,
        trusted_proxies: Default::default(),
    }
}

/// `GET {path}`: the metrics, rendered at each scrape.
pub fn metrics_router(path: &str, exposition: Exposition) -> Router {
    Router::new().route(
        path,
        get(move || {
            let exposition = exposition.clone();
            async move { metrics(&exposition) }
        }),
    )
}

/// `GET /metrics` and `GET /health`.
pub fn router(exposition: Exposition) -> Router {
    metrics_router("/metrics", exposition).route("/health", get(health))
}

fn metrics(exposition: &Exposition) -> Response {
    match exposition.render() {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, exposition.content_type())],
            text,
        )
            .into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "a metrics scrape failed");
            // The reason stays in the log: a scraper learns only that this scrape failed.
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "cannot render the metrics\n",
            )
                .into_response()
        }
    }
}

async fn health() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{\"ok\":true}",
    )
        .into_response()
}

/// Binds `address` for the admin listener; an error names the address.
pub async fn bind(address: &str) -> Result<TcpListener, std::io::Error> {
    TcpListener::bind(address).await.map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!("cannot listen on {address} (--metrics-listen): {err}"),
        )
    })
}

/// Serves [`router`] on `listener` until `shutdown` completes, then drains.
pub async fn run(
    listener: TcpListener,
    exposition: Exposition,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "metrics listening: GET /metrics, GET /health");
    }
    serve(listener, router(exposition), limits(), shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_listen_is_main_or_an_address() {
        assert_eq!(MetricsListen::parse("main"), Ok(MetricsListen::Main));
        for address in [
            "127.0.0.1:9464",
            "0.0.0.0:0",
            "[::1]:9464",
            "localhost:9464",
        ] {
            assert_eq!(
                MetricsListen::parse(address),
                Ok(MetricsListen::Address(address.to_owned()))
            );
        }
        for bad in [
            "",
            "mian",
            "9464",
            ":9464",
            "127.0.0.1",
            "127.0.0.1:http",
            "host:70000",
        ] {
            assert!(MetricsListen::parse(bad).is_err(), "{bad:?} was taken");
        }
        assert!(parse_address("main").is_err());
    }
}
