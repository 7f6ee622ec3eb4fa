//! A2A errors on the gRPC binding: a `google.rpc.Status` whose code is the spec's gRPC mapping
//! (the same table that names the HTTP+JSON binding's AIP-193 `status`,
//! [`A2aError::grpc_status`]) and whose details carry a `google.rpc.ErrorInfo` with the A2A
//! reason (`TASK_NOT_FOUND`, …) in the domain `a2a-protocol.org`, as the other bindings' errors
//! do.

use std::collections::HashMap;

use a2a::errordetails::PROTOCOL_DOMAIN;
use axum::http::StatusCode;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::a2a::error::A2aError;
use crate::a2a::service::Refusal;

/// `err` as a gRPC status.
pub fn of(err: &A2aError) -> Status {
    with_reason(code(err.grpc_status()), &err.message, err.reason())
}

/// A refusal as a gRPC status: the payment gate's own HTTP answers (a `402` challenge, a `401`
/// sign-in offer) have no gRPC form, so the caller learns why and pays over an HTTP binding.
pub fn of_refusal(refusal: Refusal) -> Status {
    match refusal {
        Refusal::A2a(err) => of(&err),
        Refusal::Http(response) => match response.status() {
            StatusCode::PAYMENT_REQUIRED => with_reason(
                Code::FailedPrecondition,
                "This skill is priced: pay for it over the JSON-RPC or HTTP+JSON binding",
                "PAYMENT_REQUIRED",
            ),
            StatusCode::UNAUTHORIZED => with_reason(
                Code::Unauthenticated,
                "This skill needs a sign-in that only the HTTP bindings offer",
                "UNAUTHENTICATED",
            ),
            StatusCode::TOO_MANY_REQUESTS => with_reason(
                Code::ResourceExhausted,
                "Too many requests; retry later",
                "RATE_LIMITED",
            ),
            status => {
                tracing::warn!(%status, "an HTTP refusal without a gRPC form");
                of(&A2aError::internal())
            }
        },
    }
}

fn with_reason(code: Code, message: &str, reason: &str) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, PROTOCOL_DOMAIN, HashMap::<String, String>::new()),
    )
}

/// The code named `name` (`NOT_FOUND`, …); an unknown name is `INTERNAL`.
fn code(name: &str) -> Code {
    match name {
        "INVALID_ARGUMENT" => Code::InvalidArgument,
        "NOT_FOUND" => Code::NotFound,
        "FAILED_PRECONDITION" => Code::FailedPrecondition,
        "UNIMPLEMENTED" => Code::Unimplemented,
        "UNAUTHENTICATED" => Code::Unauthenticated,
        "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
        "UNAVAILABLE" => Code::Unavailable,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(status: &Status) -> Option<String> {
        status.get_details_error_info().map(|info| info.reason)
    }

    #[test]
    fn errors_follow_the_spec_table_with_error_info() {
        let missing = of(&A2aError::task_not_found("t1"));
        assert_eq!(missing.code(), Code::NotFound);
        assert_eq!(reason(&missing).as_deref(), Some("TASK_NOT_FOUND"));
        assert_eq!(
            missing
                .get_details_error_info()
                .map(|info| info.domain)
                .as_deref(),
            Some("a2a-protocol.org")
        );
        let cases = [
            (A2aError::not_cancelable("t"), Code::FailedPrecondition),
            (A2aError::push_not_supported(), Code::Unimplemented),
            (A2aError::unsupported("no"), Code::Unimplemented),
            (A2aError::version("9.0"), Code::Unimplemented),
            (
                A2aError::extended_card_not_configured(),
                Code::FailedPrecondition,
            ),
            (A2aError::invalid_params("bad"), Code::InvalidArgument),
            (A2aError::content_type("a/b"), Code::InvalidArgument),
            (A2aError::unauthenticated("who"), Code::Unauthenticated),
            (A2aError::internal(), Code::Internal),
        ];
        for (err, expected) in cases {
            assert_eq!(of(&err).code(), expected, "{err}");
        }
    }
}
