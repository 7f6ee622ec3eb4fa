//! Fair admission on the gRPC listener: `SendMessage` and `SendStreamingMessage` create tasks,
//! and `CreateTaskPushNotificationConfig` stores bytes as a task does, so they are charged to
//! the same per-address and per-owner quotas, in the same limiter, as the HTTP bindings'
//! creating requests ([`crate::core::ratelimit`]): a caller cannot get a second
//! quota by switching binding. Checked before the request message is read, as on HTTP.
//!
//! Over a limit the call ends with `RESOURCE_EXHAUSTED` (the spec's gRPC code for the
//! HTTP+JSON binding's `429`), with a `google.rpc.ErrorInfo` (reason `RATE_LIMITED`, domain
//! `a2a-protocol.org`, the policy and its quota as metadata) and a `google.rpc.RetryInfo`
//! whose delay is the HTTP answer's `Retry-After`.

use std::collections::HashMap;
use std::time::Duration;

use a2a::errordetails::PROTOCOL_DOMAIN;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use crate::core::ratelimit::{Limited, Limits};
use crate::http::client_address::Source;

/// The methods that create tasks or push notification configs.
const CREATING: [&str; 3] = [
    "/lf.a2a.v1.A2AService/SendMessage",
    "/lf.a2a.v1.A2AService/SendStreamingMessage",
    "/lf.a2a.v1.A2AService/CreateTaskPushNotificationConfig",
];

/// The middleware: checks and charges a creating call, or answers `RESOURCE_EXHAUSTED`.
pub async fn admit(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    if !limits.enabled() || !CREATING.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Source(source) = Source::of(request.extensions());
    let subjects = limits.subjects(source.as_deref(), request.headers());
    match limits.check(&subjects).await {
        None => next.run(request).await,
        Some(limited) => status(&limited).into_http::<axum::body::Body>(),
    }
}

/// The status of a call over a limit.
pub fn status(limited: &Limited) -> tonic::Status {
    let quota = limited.subject.quota;
    let mut details = ErrorDetails::new();
    details
        .set_error_info(
            "RATE_LIMITED",
            PROTOCOL_DOMAIN,
            HashMap::from([
                ("policy".to_owned(), limited.subject.policy.to_owned()),
                ("perSecond".to_owned(), quota.per_second.to_string()),
                ("burst".to_owned(), quota.burst.to_string()),
            ]),
        )
        .set_retry_info(Some(Duration::from_secs(limited.seconds)));
    tonic::Status::with_error_details(Code::ResourceExhausted, limited.message(), details)
}
