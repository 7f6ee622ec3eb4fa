//! HTTP server spans and metrics, after the HTTP semantic conventions: one SERVER span per
//! request named `{method} {route}` (`http.request.method`, `http.route`, `url.path`,
//! `url.scheme`, `http.response.status_code`; a caller's `traceparent` makes it a child of the
//! caller's span), `http.server.request.duration` and `http.server.active_requests`.
//!
//! Headers other than `traceparent`/`tracestate` and bodies never reach a span or a log line:
//! they carry access tokens and payment credentials.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use telemetry::metrics;
use tracing::Instrument;
use tracing::field::Empty;

use super::request_id::REQUEST_ID;

/// The method as the conventions name it: the known ones as-is, anything else `_OTHER` (a
/// client must not be able to mint metric series).
fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "_OTHER",
    }
}

/// Counts a request out of `http.server.active_requests` however it ends, including a
/// client that goes away mid-request (the future is dropped).
struct Active(&'static str);

impl Active {
    fn enter(method: &'static str) -> Active {
        metrics::http_active(method, 1);
        Active(method)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        metrics::http_active(self.0, -1);
    }
}

/// The middleware: wraps the request in its server span and records the metrics. With
/// telemetry off (no `OTEL_*` exporter) it allocates nothing: the route is copied only for a
/// span name or a metric, and the log span borrows its fields (it is disabled outright unless
/// logs are at `info` or finer).
pub async fn http_span(request: Request, next: Next) -> Response {
    let method = method_name(request.method());
    let traced = telemetry::traces_enabled();
    let measured = telemetry::metrics_enabled();
    let route = if traced || measured {
        request
            .extensions()
            .get::<MatchedPath>()
            .map(|path| path.as_str().to_owned())
    } else {
        None
    };
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let span = if traced {
        let name = match &route {
            Some(route) => format!("{method} {route}"),
            None => method.to_owned(),
        };
        let span = tracing::info_span!(
            "http",
            otel.name = %name,
            otel.kind = "server",
            otel.status_code = Empty,
            http.request.method = method,
            http.route = Empty,
            url.path = %request.uri().path(),
            url.scheme = "http",
            http.response.status_code = Empty,
            request_id = %request_id,
        );
        if let Some(route) = &route {
            span.record("http.route", route.as_str());
        }
        telemetry::continue_remote(&span, request.headers());
        span
    } else {
        // Untraced, the span only gives log lines their request context.
        tracing::info_span!("http", method = %request.method(), path = %request.uri().path(), request_id = %request_id)
    };

    let _active = Active::enter(method);
    let started = measured.then(Instant::now);
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        // Server errors only: a 4xx is the client's, not this span's, failure.
        span.record("otel.status_code", "ERROR");
    }
    if let Some(started) = started {
        metrics::http_request(method, route.as_deref(), status.as_u16(), started.elapsed());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_are_other() -> Result<(), axum::http::method::InvalidMethod> {
        assert_eq!(method_name(&Method::POST), "POST");
        assert_eq!(method_name(&Method::from_bytes(b"BREW")?), "_OTHER");
        Ok(())
    }
}
