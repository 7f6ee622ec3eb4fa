//! `Idempotency-Key` on invoke: one run per key and request, its response replayed. An x402
//! payment's `payment-identifier` (extension of a v2 payload) is a key too, when the request
//! has no `Idempotency-Key`: the same rules, under its own namespace
//! ([`payment_identifier_key`]).
//!
//! A key belongs to the caller that first used it: the fingerprint covers the request and its
//! [`Caller`] (the payer a credential's signature recovers to, a signed-in address, a
//! `Task-Access-Token` owner, or anonymous) and the terms it was admitted on (protocol,
//! network, asset, payee, price). A paid request meets the record only after the gate checked
//! its credential offline, so a replay goes to the payer whose signature made the record;
//! anybody else with the same key gets `409 idempotency_key_conflict`, never the response.
//!
//! - the key must have 20 to 256 characters (`400 invalid_idempotency_key`);
//! - the first request claims the key (in progress for up to 15 minutes) and runs;
//! - the same request meanwhile: `409 idempotency_in_progress`, `Retry-After: 1`;
//! - the same request afterwards: the recorded status and body again, with
//!   `Idempotency-Replayed: true`, for 24 hours;
//! - another request with the key: `409 idempotency_key_conflict`;
//! - the same request after a response over `--idempotency-max-body-bytes`: it ran, its body
//!   was not kept: `409 idempotency_response_too_large` (never a second run under the key);
//! - the caller already holds `--idempotency-max-entries-per-subject` live records (see
//!   [`Caller::quota_subjects`]): `429 idempotency_quota_exceeded` with `Retry-After` (until
//!   its oldest record lapses), nothing runs; no record of anyone is evicted for it;
//! - `--idempotency-max-entries` records held in all: `503` with `Retry-After: 1`, nothing
//!   runs;
//! - the store failing: `503`.
//!
//! Only deterministic outcomes are recorded (2xx and 4xx). A 5xx or a timeout releases the
//! claim so that a retry runs; so does a request dropped mid-run. Payment and sign-in
//! refusals (`401`, `402`), `409 payment_in_progress` and `429` are never recorded either:
//! they say nothing about the request's run, and recording one would let a caller who holds
//! no funds (or a forged credential) pin a refusal to a key for a day. A response that ran but
//! could not be recorded keeps its claim (upstream's choice): a retry gets
//! `409 idempotency_in_progress` until the claim lapses instead of running a second time.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use protocol::ErrorCode;
use protocol::token::AccessToken;
use store::StoreError;
use store::idempotency::{
    Begin, Claim, DEFAULT_IN_PROGRESS_TTL, DEFAULT_RETENTION, IdempotencyKey, IdempotencyStore,
    Operation, SecurityContext, StoredResponse, Subject, scope,
};

use super::Gated;
use crate::core::pay::siwx::SignedIn;
use crate::core::pay::{Payment, Rail};
use crate::core::state::AppState;
use crate::http::error::ApiError;
use crate::http::extract::TASK_ACCESS_TOKEN;

/// Who sent a keyed request and on what terms: what its fingerprint adds to the request.
pub struct Caller {
    pub subject: Subject,
    pub security: SecurityContext,
}

impl Caller {
    /// The caller the gate let through: a payer (its credential's signature recovered to its
    /// address), a signed-in address, the owner of a valid `Task-Access-Token`, or anonymous.
    pub fn of(state: &AppState, gated: &Gated<'_>, headers: &HeaderMap) -> Caller {
        if let Some(payment) = &gated.payment {
            return Caller::paid(payment);
        }
        if let Some(signed_in) = gated.signed_in {
            let address = match signed_in {
                SignedIn::Authenticated(address) | SignedIn::Entitled(address) => address,
            };
            return Caller {
                subject: Subject::SignedIn(format!("{address:#x}")),
                security: SecurityContext {
                    protocol: "siwx".to_owned(),
                    network: state
                        .payments
                        .as_deref()
                        .map(|gate| gate.network.caip2.to_owned()),
                    asset: None,
                    payee: None,
                    price: None,
                },
            };
        }
        let token = headers
            .get(TASK_ACCESS_TOKEN)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| AccessToken::parse(text).ok());
        Caller {
            subject: token.map_or(Subject::Anonymous, |token| {
                Subject::Token(token.owner_hash().as_str().to_owned())
            }),
            security: SecurityContext::free(),
        }
    }

    /// The quota subjects a new record of this caller is charged to: the payer of a paid
    /// request (a payment proves it, whatever address it comes from); otherwise the client
    /// address `source` (the rate limits' key), and also the token's owner or the signed-in
    /// address. Those are free to mint, so the address quota is what bounds a caller who
    /// mints them; the subject's own quota keeps one of many clients behind a shared address
    /// from holding the whole address's share.
    pub fn quota_subjects(&self, source: Option<&str>) -> Vec<String> {
        let address = format!("address:{}", source.unwrap_or("unknown"));
        match &self.subject {
            Subject::Payer(_) => vec![self.subject.to_text()],
            Subject::Anonymous => vec![address],
            Subject::Token(_) | Subject::SignedIn(_) => vec![self.subject.to_text(), address],
        }
    }

    fn paid(payment: &Payment<'_>) -> Caller {
        let terms = &payment.terms;
        Caller {
            subject: Subject::Payer(format!("{:#x}", payment.checked.payer)),
            security: SecurityContext {
                protocol: match payment.rail {
                    Rail::X402 => "x402",
                    Rail::Mpp { .. } => "mpp",
                }
                .to_owned(),
                network: Some(terms.network.caip2.to_owned()),
                asset: Some(format!("{:#x}", terms.network.usdc)),
                payee: Some(format!("{:#x}", terms.pay_to)),
                price: Some(terms.amount.to_string()),
            },
        }
    }
}

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const IDEMPOTENCY_REPLAYED: &str = "idempotency-replayed";

/// Headers recorded with a response and sent again on replay.
const KEPT_HEADERS: [HeaderName; 1] = [header::CONTENT_TYPE];

/// The request's `Idempotency-Key`, if it sent one.
pub fn read_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let invalid = || {
        ApiError::bad_request(
            ErrorCode::InvalidIdempotencyKey,
            "Idempotency-Key must contain 20 to 256 characters",
        )
    };
    let text = value.to_str().map_err(|_| invalid())?;
    IdempotencyKey::parse(text).map(Some).map_err(|_| invalid())
}

/// The idempotency key of an x402 `payment-identifier` (already checked: 16 to 128 characters
/// of `[A-Za-z0-9_-]`), as `x402-payment-identifier:<id>`.
pub fn payment_identifier_key(id: &str) -> Result<IdempotencyKey, ApiError> {
    IdempotencyKey::parse(&format!("x402-payment-identifier:{id}")).map_err(|_| {
        ApiError::bad_request(
            ErrorCode::InvalidIdempotencyKey,
            "payment-identifier is not a usable idempotency key",
        )
    })
}

fn unavailable(err: StoreError) -> ApiError {
    tracing::warn!(error = %err, "idempotency store unavailable");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ServiceUnavailable,
        "The idempotency store is unavailable; retry shortly",
    )
    .retry_after(1)
}

/// Runs `run` at most once per (entrypoint, key) and request fingerprint, its record charged
/// to `subjects` ([`Caller::quota_subjects`]).
pub async fn invoke<F, Fut>(
    state: &AppState,
    entrypoint: &str,
    key: &IdempotencyKey,
    fingerprint: &str,
    subjects: &[String],
    run: F,
) -> Result<Response, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Response>,
{
    let scope = scope(Operation::Invoke, entrypoint);
    let begun = state
        .idempotency
        .begin_for(
            &scope,
            key.as_str(),
            fingerprint,
            subjects,
            DEFAULT_IN_PROGRESS_TTL,
        )
        .await
        .map_err(unavailable)?;
    let claim = match begun {
        Begin::Started(claim) => claim,
        Begin::InProgress => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::IdempotencyInProgress,
                "A request with this Idempotency-Key is still in progress",
            )
            .retry_after(1));
        }
        Begin::Conflict => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::IdempotencyKeyConflict,
                "Idempotency-Key was already used for a different request",
            ));
        }
        Begin::Replay(stored) => return Ok(replay(stored)),
        Begin::NotKept { status } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::IdempotencyResponseTooLarge,
                format!(
                    "The request with this Idempotency-Key ran (status {status}), but its \
                     response was too large to keep for replay; it is not run again. Use a \
                     new key to run it again"
                ),
            ));
        }
        Begin::OverQuota { retry_after } => {
            let seconds = retry_after.as_millis().div_ceil(1000).max(1);
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::IdempotencyQuotaExceeded,
                format!(
                    "This caller holds its quota of live Idempotency-Key records; a new key \
                     is accepted once its oldest record lapses (in {seconds} s). Requests \
                     without a key, and retries of recorded ones, are not affected"
                ),
            )
            .retry_after(u64::try_from(seconds).unwrap_or(u64::MAX)));
        }
        Begin::Full => {
            tracing::warn!("idempotency records at their ceiling: request refused");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServiceUnavailable,
                "Too many requests with an Idempotency-Key are recorded; retry shortly",
            )
            .retry_after(1));
        }
    };

    let mut guard = ReleaseOnDrop::new(state.idempotency.clone(), claim);
    let response = run().await;
    if !recordable(&response) {
        guard.release().await;
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let recorded = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => String::from_utf8(bytes.to_vec()),
        Err(err) => {
            tracing::error!(error = %err, "could not read an invoke response for recording");
            guard.release().await;
            return Err(ApiError::internal());
        }
    };
    let body = match recorded {
        Ok(body) => body,
        Err(not_text) => {
            // Our responses are JSON; anything else is served but not replayed.
            guard.release().await;
            return Ok(Response::from_parts(
                parts,
                Body::from(not_text.into_bytes()),
            ));
        }
    };
    let stored = StoredResponse {
        status: parts.status.as_u16(),
        headers: KEPT_HEADERS
            .iter()
            .filter_map(|name| {
                let value = parts.headers.get(name)?.to_str().ok()?;
                Some((name.as_str().to_owned(), value.to_owned()))
            })
            .collect(),
        body,
    };
    let Some(claim) = guard.claim.take() else {
        return Err(ApiError::internal());
    };
    match state
        .idempotency
        .complete(&claim, &stored, DEFAULT_RETENTION)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(scope = %claim.scope(), "idempotency claim lapsed before its response was recorded");
        }
        // The run happened; running it again on a retry would be worse than a 409 until
        // the claim lapses.
        Err(err) => return Err(unavailable(err)),
    }
    Ok(Response::from_parts(parts, Body::from(stored.body)))
}

/// Whether `response` is the request's own outcome, to be replayed: not a 5xx (a retry may
/// succeed), not a refusal of the payment or sign-in (`401`, `402`), not another request
/// holding the credential (`409 payment_in_progress`), not a rate limit (`429`).
fn recordable(response: &Response) -> bool {
    let status = response.status();
    let payment_in_progress =
        response.extensions().get::<ErrorCode>() == Some(&ErrorCode::PaymentInProgress);
    !(status.is_server_error()
        || status == StatusCode::UNAUTHORIZED
        || status == StatusCode::PAYMENT_REQUIRED
        || status == StatusCode::TOO_MANY_REQUESTS
        || payment_in_progress)
}

/// A recorded response, sent again.
fn replay(stored: StoredResponse) -> Response {
    let mut response = Response::new(Body::from(stored.body));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    headers.insert(
        HeaderName::from_static(IDEMPOTENCY_REPLAYED),
        HeaderValue::from_static("true"),
    );
    response
}

/// Releases a claim unless it was completed: a request dropped mid-run (the client went
/// away) must not hold its key for the whole in-progress TTL.
struct ReleaseOnDrop {
    store: Arc<dyn IdempotencyStore>,
    claim: Option<Claim>,
}

impl ReleaseOnDrop {
    fn new(store: Arc<dyn IdempotencyStore>, claim: Claim) -> Self {
        ReleaseOnDrop {
            store,
            claim: Some(claim),
        }
    }

    async fn release(&mut self) {
        if let Some(claim) = self.claim.take() {
            release(self.store.as_ref(), &claim).await;
        }
    }
}

async fn release(store: &dyn IdempotencyStore, claim: &Claim) {
    match store.release(claim).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(scope = %claim.scope(), "idempotency claim had already lapsed")
        }
        // The claim lapses by itself after its TTL.
        Err(err) => tracing::warn!(error = %err, "could not release an idempotency claim"),
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move { release(store.as_ref(), &claim).await });
    }
}
