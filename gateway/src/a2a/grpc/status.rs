//! A2A errors on the gRPC binding: a `google.rpc.Status` whose code is the spec's gRPC mapping
//! (the same table that names the HTTP+JSON binding's AIP-193 `status`,
//! [`A2aError::grpc_status`]) and whose details carry a `google.rpc.ErrorInfo` with the A2A
//! reason (`TASK_NOT_FOUND`, …) in the domain `a2a-protocol.org`, as the other bindings' errors
//! do.

use std::collections::HashMap;

use a2a::errordetails::PROTOCOL_DOMAIN;
use axum::http::StatusCode;
use tonic::metadata::{Ascii, MetadataKey, MetadataMap};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::a2a::error::A2aError;
use crate::a2a::service::Refusal;

/// `err` as a gRPC status.
pub fn of(err: &A2aError) -> Status {
    with_reason(code(err.grpc_status()), &err.message, err.reason())
}

/// A refusal as a gRPC status. The payment gate's own HTTP answers travel as they would over
/// HTTP, their headers as the status's metadata: a `402` is `FAILED_PRECONDITION`
/// `PAYMENT_REQUIRED` carrying the challenge (`payment-required`, x402 v2; or MPP's
/// `www-authenticate`), a `401` sign-in offer is `UNAUTHENTICATED` with its
/// `payment-required` (the Sign-In-With-X extension). A client answers with the credential in
/// the next call's metadata, as it would in headers.
pub fn of_refusal(refusal: Refusal) -> Status {
    match refusal {
        Refusal::A2a(err) => of(&err),
        Refusal::Http(response) => {
            let metadata = challenge_metadata(response.headers());
            match response.status() {
                StatusCode::PAYMENT_REQUIRED => with_reason_and_metadata(
                    Code::FailedPrecondition,
                    "This skill is priced: answer the challenge in this status's metadata \
                     (payment-required, or www-authenticate for MPP) with a credential in the \
                     next call's metadata",
                    "PAYMENT_REQUIRED",
                    metadata,
                ),
                StatusCode::UNAUTHORIZED => with_reason_and_metadata(
                    Code::Unauthenticated,
                    "This skill needs a sign-in: answer the offer in this status's metadata \
                     (payment-required) with a sign-in-with-x credential in the next call's \
                     metadata",
                    "UNAUTHENTICATED",
                    metadata,
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
            }
        }
    }
}

/// The challenge headers of a gate's answer, as gRPC metadata (ASCII values only: a header
/// that is not is left out rather than mangled).
fn challenge_metadata(headers: &axum::http::HeaderMap) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    for name in [
        payments::PAYMENT_REQUIRED,
        "www-authenticate",
        "retry-after",
    ] {
        for value in headers.get_all(name) {
            let key = name.to_ascii_lowercase();
            if let (Ok(key), Ok(text)) = (
                MetadataKey::<Ascii>::from_bytes(key.as_bytes()),
                value.to_str(),
            ) && let Ok(value) = text.parse()
            {
                metadata.append(key, value);
            }
        }
    }
    metadata
}

fn with_reason_and_metadata(
    code: Code,
    message: &str,
    reason: &str,
    metadata: MetadataMap,
) -> Status {
    Status::with_error_details_and_metadata(
        code,
        message,
        ErrorDetails::with_error_info(reason, PROTOCOL_DOMAIN, HashMap::<String, String>::new()),
        metadata,
    )
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
