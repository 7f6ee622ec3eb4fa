//! The profile's error codes, one enum, and the error body `{"error":{"code","message"?,"issues"?}}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every error code the Lucid profile puts on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    // Requests.
    InvalidRequest,
    InvalidInput,
    InvalidOutput,
    NotFound,
    InternalError,
    NotImplemented,
    /// A path the profile serves, with a method it does not (`405` with `Allow`). Ours: the
    /// upstream profile answers `404 not_found` there.
    MethodNotAllowed,
    // Entrypoints.
    EntrypointNotFound,
    StreamNotSupported,
    InvalidIdempotencyKey,
    IdempotencyInProgress,
    IdempotencyKeyConflict,
    /// The request with this Idempotency-Key ran, but its response was larger than the
    /// gateway keeps for replay (`IDEMPOTENCY_MAX_BODY_BYTES`): it is not run again.
    IdempotencyResponseTooLarge,
    /// The caller holds its quota of live idempotency records: a new key waits until its
    /// oldest record lapses (`429`, Retry-After).
    IdempotencyQuotaExceeded,
    // Tasks.
    TaskAccessRequired,
    TaskNotFound,
    SkillNotFound,
    InvalidState,
    TaskCapacityExhausted,
    /// One owner holds as many unfinished tasks as it may (`MAX_LIVE_PER_OWNER`, or
    /// `MAX_RETAINED_PER_OWNER` all unfinished): `429` with Retry-After. Ours; the upstream
    /// profile has no per-owner bound.
    OwnerCapacityExhausted,
    /// One client address holds as many unfinished tasks as it may (`MAX_LIVE_PER_ADDRESS`),
    /// whatever their owners: `429` with Retry-After. Ours, like the per-owner bound.
    AddressCapacityExhausted,
    TaskTimeout,
    TaskExecutionFailed,
    TaskTerminalizationFailed,
    DurableTaskStoreRequired,
    /// A handler's output was larger than its worker stores (`WORKER_MAX_RESULT_BYTES`): the
    /// task failed with this code instead of storing it.
    ResultTooLarge,
    // Payments and authorization.
    AuthorizationFailed,
    AuthRequired,
    PaymentCapabilityUnsupported,
    PaymentVerificationFailed,
    SettlementFailed,
    PolicyViolation,
    /// Another request holds the same payment credential (it is being verified or settled).
    PaymentInProgress,
    /// Too many requests of one kind from one caller at once (`429` with Retry-After).
    RateLimited,
    // Cluster (ours): the store is unreachable, or a task ran out of attempts.
    ServiceUnavailable,
    TaskAttemptsExhausted,
    /// An operator action named a worker no live worker is (`POST
    /// /console/api/workers/{id}/drain`, `404`).
    WorkerNotFound,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::InvalidOutput => "invalid_output",
            ErrorCode::NotFound => "not_found",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::NotImplemented => "not_implemented",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::EntrypointNotFound => "entrypoint_not_found",
            ErrorCode::StreamNotSupported => "stream_not_supported",
            ErrorCode::InvalidIdempotencyKey => "invalid_idempotency_key",
            ErrorCode::IdempotencyInProgress => "idempotency_in_progress",
            ErrorCode::IdempotencyKeyConflict => "idempotency_key_conflict",
            ErrorCode::IdempotencyResponseTooLarge => "idempotency_response_too_large",
            ErrorCode::IdempotencyQuotaExceeded => "idempotency_quota_exceeded",
            ErrorCode::TaskAccessRequired => "task_access_required",
            ErrorCode::TaskNotFound => "task_not_found",
            ErrorCode::SkillNotFound => "skill_not_found",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::TaskCapacityExhausted => "task_capacity_exhausted",
            ErrorCode::OwnerCapacityExhausted => "owner_capacity_exhausted",
            ErrorCode::AddressCapacityExhausted => "address_capacity_exhausted",
            ErrorCode::TaskTimeout => "task_timeout",
            ErrorCode::TaskExecutionFailed => "task_execution_failed",
            ErrorCode::TaskTerminalizationFailed => "task_terminalization_failed",
            ErrorCode::DurableTaskStoreRequired => "durable_task_store_required",
            ErrorCode::ResultTooLarge => "result_too_large",
            ErrorCode::AuthorizationFailed => "authorization_failed",
            ErrorCode::AuthRequired => "auth_required",
            ErrorCode::PaymentCapabilityUnsupported => "payment_capability_unsupported",
            ErrorCode::PaymentVerificationFailed => "payment_verification_failed",
            ErrorCode::SettlementFailed => "settlement_failed",
            ErrorCode::PolicyViolation => "policy_violation",
            ErrorCode::PaymentInProgress => "payment_in_progress",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::ServiceUnavailable => "service_unavailable",
            ErrorCode::TaskAttemptsExhausted => "task_attempts_exhausted",
            ErrorCode::WorkerNotFound => "worker_not_found",
        }
    }
}

/// Inner error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issues: Option<Value>,
}

/// A code string that is not one of [`ErrorCode`]'s (a handler may fail a run with its own).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code {0:?}")]
pub struct UnknownErrorCode(pub String);

impl std::str::FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    /// The code whose wire name (`as_str`, the serde name) is `s`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use serde::de::IntoDeserializer;
        let text: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
            s.into_deserializer();
        ErrorCode::deserialize(text).map_err(|_| UnknownErrorCode(s.to_owned()))
    }
}

/// `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

impl ErrorEnvelope {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            error: ErrorBody {
                code,
                message: Some(message.into()),
                issues: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_serde_and_as_str() {
        for code in [
            ErrorCode::TaskAccessRequired,
            ErrorCode::IdempotencyKeyConflict,
            ErrorCode::DurableTaskStoreRequired,
            ErrorCode::PaymentCapabilityUnsupported,
            ErrorCode::ResultTooLarge,
            ErrorCode::IdempotencyResponseTooLarge,
            ErrorCode::MethodNotAllowed,
        ] {
            let text = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(text, format!("\"{}\"", code.as_str()));
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(code));
        }
        assert!("boom".parse::<ErrorCode>().is_err());
        let body = ErrorEnvelope::new(ErrorCode::TaskNotFound, "Task \"x\" not found");
        assert_eq!(
            serde_json::to_string(&body).unwrap_or_default(),
            r#"{"error":{"code":"task_not_found","message":"Task \"x\" not found"}}"#
        );
    }
}
