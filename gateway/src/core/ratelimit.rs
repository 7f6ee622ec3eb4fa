//! Fair admission: rate limits on task creation, per client address and per owner (per payer:
//! see `crate::core::pay::payer_rate`, checked once a credential names its payer), checked
//! before anything else a creating route does (one middleware, [`admit`]): `POST /tasks`,
//! `POST /entrypoints/{key}/invoke` and `/stream`, and the A2A HTTP+JSON binding's
//! `message:send` and `message:stream`; on the JSON-RPC endpoint the middleware leaves a
//! [`Deferred`] check that the handler makes for `SendMessage` and `SendStreamingMessage` only
//! (JSON-RPC error `-32000`, HTTP 429, see `crate::a2a::jsonrpc`). The gRPC listener checks
//! `SendMessage` and `SendStreamingMessage` against the same limits and limiter
//! (`crate::a2a::grpc::admission`, `RESOURCE_EXHAUSTED`). A push notification config is stored
//! bytes as a task is, so its creation is charged the same way: HTTP+JSON's
//! `POST /a2a/v1/tasks/{id}/pushNotificationConfigs` here, JSON-RPC's
//! `CreateTaskPushNotificationConfig` by its handler, gRPC's by the admission middleware; an
//! inline config rides on its send's charge. The limiter is GCRA, in the store's Redis in
//! cluster mode (shared by every gateway, see [`store::ratelimit`]) and in memory in embedded
//! mode.
//!
//! The per-address key is `crate::http::client_address`'s (an IPv6 client counts by its /64;
//! behind trusted proxies the hop they recorded), the one `MAX_LIVE_PER_ADDRESS` counts under
//! too: its middleware runs first and leaves it on the request.
//!
//! Over a limit: `429 rate_limited` with `Retry-After` (whole seconds, rounded up) and the IETF
//! `RateLimit-Policy` / `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers), e.g.
//! `RateLimit-Policy: "per-address";q=100;w=2` and `RateLimit: "per-address";r=0;t=1`. On the A2A
//! binding the body is AIP-193's `RESOURCE_EXHAUSTED` (HTTP 429). The limiter failing (Redis
//! unreachable) admits the request: the store's own errors answer it further on.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;
use serde_json::json;
use store::ratelimit::{Quota, RateLimiter, Subject, Verdict};

use crate::core::config::GatewayConfig;
use crate::http::error::ApiError;

pub const PER_ADDRESS: &str = "per-address";
pub const PER_OWNER: &str = "per-owner";

/// The limits and where they are kept.
#[derive(Clone)]
pub struct Limits {
    limiter: Arc<dyn RateLimiter>,
    per_address: Option<Quota>,
    per_owner: Option<Quota>,
    base: String,
}

impl Limits {
    pub fn new(config: &GatewayConfig, limiter: Arc<dyn RateLimiter>) -> Self {
        Limits {
            limiter,
            per_address: Quota::new(config.rate_per_address, config.rate_burst),
            per_owner: Quota::new(config.rate_per_owner, config.rate_burst),
            base: config.base_path(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.per_address.is_some() || self.per_owner.is_some()
    }

    /// What a creating request from the client address key `source` with `headers` is charged
    /// to: its address and its owner, where those limits are on.
    pub(crate) fn subjects(&self, source: Option<&str>, headers: &HeaderMap) -> Vec<Subject> {
        let mut subjects = Vec::with_capacity(2);
        if let Some(quota) = self.per_address
            && let Some(address) = source
        {
            subjects.push(Subject {
                policy: PER_ADDRESS,
                key: format!("addr:{address}"),
                quota,
            });
        }
        if let Some(quota) = self.per_owner
            && let Some(owner) = owner(headers)
        {
            subjects.push(Subject {
                policy: PER_OWNER,
                key: format!("owner:{owner}"),
                quota,
            });
        }
        subjects
    }

    /// Checks and charges `subjects` (see [`Deferred::check`]).
    pub(crate) async fn check(&self, subjects: &[Subject]) -> Option<Limited> {
        verdict(self, subjects).await
    }
}

/// Whether `path` (under the base path) creates tasks.
fn creates_task(base: &str, path: &str) -> bool {
    let Some(path) = path.strip_prefix(base) else {
        return false;
    };
    let path = path.trim_end_matches('/');
    if path == "/tasks" {
        return true;
    }
    if let Some(rest) = path.strip_prefix("/entrypoints/") {
        return rest.ends_with("/invoke") || rest.ends_with("/stream");
    }
    if matches!(path, "/a2a/v1/message:send" | "/a2a/v1/message:stream") {
        return true;
    }
    // A push notification config: stored bytes, charged like a task.
    path.strip_prefix("/a2a/v1/tasks/")
        .is_some_and(|rest| rest.ends_with("/pushNotificationConfigs"))
}

/// Whether `path` is the A2A JSON-RPC endpoint, whose method is only known to its handler.
fn is_jsonrpc(base: &str, path: &str) -> bool {
    path.strip_prefix(base)
        .is_some_and(|path| path.trim_end_matches('/') == "/a2a/jsonrpc")
}

/// The check of a JSON-RPC request, left to its handler (only `SendMessage` and
/// `SendStreamingMessage` create tasks): an extension of the request.
#[derive(Clone)]
pub struct Deferred {
    limits: Limits,
    subjects: Arc<Vec<Subject>>,
}

impl Deferred {
    /// `Some` when the request is over a limit (it was charged otherwise).
    pub async fn check(&self) -> Option<Limited> {
        verdict(&self.limits, &self.subjects).await
    }
}

/// A request over a limit: the subject and `Retry-After` in whole seconds.
pub struct Limited {
    pub subject: Subject,
    pub seconds: u64,
}

impl Limited {
    pub fn message(&self) -> String {
        format!(
            "Too many tasks created ({} policy: {} per second, burst {}); retry in {} s",
            self.subject.policy,
            self.subject.quota.per_second,
            self.subject.quota.burst,
            self.seconds
        )
    }

    /// Sets `Retry-After` and the RateLimit fields on `response`.
    pub fn headers(&self, response: &mut Response) {
        let quota = self.subject.quota;
        let window = (f64::from(quota.burst) / quota.per_second).ceil().max(1.0) as u64;
        let policy = format!("\"{}\";q={};w={window}", self.subject.policy, quota.burst);
        let state = format!("\"{}\";r=0;t={}", self.subject.policy, self.seconds);
        let headers = response.headers_mut();
        for (name, value) in [
            (header::RETRY_AFTER.as_str(), self.seconds.to_string()),
            ("ratelimit-policy", policy),
            ("ratelimit", state),
        ] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
    }
}

/// Checks and charges `subjects`; a limiter that fails admits (logged).
async fn verdict(limits: &Limits, subjects: &[Subject]) -> Option<Limited> {
    verdict_of(limits.limiter.as_ref(), subjects).await
}

/// [`verdict`] against any limiter (the per-payer limit's, see `crate::core::pay::payer_rate`).
pub(crate) async fn verdict_of(limiter: &dyn RateLimiter, subjects: &[Subject]) -> Option<Limited> {
    if subjects.is_empty() {
        return None;
    }
    match limiter.check(subjects).await {
        Ok(Verdict::Admitted) => None,
        Ok(Verdict::Limited {
            subject,
            retry_after,
        }) => {
            let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            let seconds = seconds.max(1);
            tracing::info!(
                policy = subject.policy,
                retry_after_s = seconds,
                "task creation refused: rate limited"
            );
            Some(Limited { subject, seconds })
        }
        Err(err) => {
            tracing::warn!(error = %err, "rate limiter unavailable: request admitted");
            None
        }
    }
}

/// The owner the request's token stands for (`Authorization: Bearer` or `Task-Access-Token`,
/// read as the A2A binding reads it).
fn owner(headers: &HeaderMap) -> Option<String> {
    crate::core::caller::owner(headers)
        .ok()
        .map(|owner| owner.as_str().to_owned())
}

/// The middleware: checks the creating routes' requests against the limits (and leaves the
/// JSON-RPC endpoint's to its handler, as a [`Deferred`] extension).
pub async fn admit(State(limits): State<Limits>, mut request: Request, next: Next) -> Response {
    if !limits.enabled() || request.method() != Method::POST {
        return next.run(request).await;
    }
    let path = request.uri().path();
    let jsonrpc = is_jsonrpc(&limits.base, path);
    if !jsonrpc && !creates_task(&limits.base, path) {
        return next.run(request).await;
    }
    let a2a = path
        .strip_prefix(&limits.base)
        .is_some_and(|path| path.starts_with("/a2a/"));
    let source = crate::http::client_address::Source::of(request.extensions()).0;
    let subjects = limits.subjects(source.as_deref(), request.headers());
    if jsonrpc {
        request.extensions_mut().insert(Deferred {
            limits: limits.clone(),
            subjects: Arc::new(subjects),
        });
        return next.run(request).await;
    }
    match verdict(&limits, &subjects).await {
        None => next.run(request).await,
        Some(limited) => refused(&limited, a2a),
    }
}

/// The `429` answer, with `Retry-After` and the RateLimit fields: the profile's error body
/// (`rate_limited`), or AIP-193's `RESOURCE_EXHAUSTED` on the A2A HTTP+JSON binding.
pub(crate) fn refused(limited: &Limited, a2a: bool) -> Response {
    let message = limited.message();
    let mut response = if a2a {
        let body = json!({
            "error": {
                "code": StatusCode::TOO_MANY_REQUESTS.as_u16(),
                "status": "RESOURCE_EXHAUSTED",
                "message": message,
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "RATE_LIMITED",
                    "domain": a2a::errordetails::PROTOCOL_DOMAIN,
                }],
            }
        });
        (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response()
    } else {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimited,
            message,
        )
        .into_response()
    };
    limited.headers(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creating_routes_are_limited() {
        assert!(creates_task("", "/tasks"));
        assert!(creates_task("", "/entrypoints/echo/invoke"));
        assert!(creates_task("", "/entrypoints/echo/stream"));
        assert!(creates_task("", "/a2a/v1/message:send"));
        assert!(creates_task("", "/a2a/v1/tasks/t1/pushNotificationConfigs"));
        assert!(!creates_task(
            "",
            "/a2a/v1/tasks/t1/pushNotificationConfigs/c1"
        ));
        assert!(creates_task("/base", "/base/tasks"));
        assert!(!creates_task("", "/tasks/abc/cancel"));
        assert!(!creates_task("", "/a2a/v1/tasks"));
        assert!(!creates_task("/base", "/tasks"));
        assert!(is_jsonrpc("", "/a2a/jsonrpc/"));
        assert!(!is_jsonrpc("", "/a2a/v1/message:send"));
    }
}
