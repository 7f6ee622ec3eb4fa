//! Sign-In-With-X on the gate, for entrypoints a worker declares with `--siwx KEY[:auth-only]`.
//!
//! - The 402 of such an entrypoint (and the 401 of an auth-only one) offers
//!   `extensions["sign-in-with-x"]`: the domain and URI to sign for, a fresh nonce, the time
//!   window and the chain (`payments::siwx::SiwxExtension`).
//! - A request carrying `SIGN-IN-WITH-X` is checked ([`payments::siwx::verify_header`]: the
//!   domain is the request's host, the URI its origin, the chain the gateway's network, the
//!   EIP-4361 message signed by the address it names, issued at most five minutes ago) and its
//!   nonce spent once in Redis, cluster-wide. The signature proves control of the wallet;
//!   then an auth-only entrypoint runs, and a priced one runs without payment when that
//!   address holds an entitlement to it.
//! - A settled payment for a SIWX entrypoint entitles its payer to it for
//!   `--entitlement-ttl-seconds`.
//!
//! Refusals are `401 auth_required` with the reason (never quoting the header) and a fresh
//! offer; never a 5xx for input, and the header is never logged.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use payments::Address;
use payments::siwx::{self, Expectations, SiwxExtension};
use serde_json::{Value, json};
use shared::protocol::ErrorCode;
use shared::registry::EntrypointInfo;

use super::Gate;
use crate::error::ApiError;
use crate::routes::card::origin::host_of;
use crate::state::AppState;

/// How long an offered sign-in stays valid (and a spent nonce is remembered past it).
const OFFER_SECONDS: u64 = 300;

/// Who signed in, when a request carried a valid `SIGN-IN-WITH-X` for a SIWX entrypoint.
#[derive(Debug, Clone, Copy)]
pub enum SignedIn {
    /// Auth-only entrypoint: the signature is all it takes.
    Authenticated(Address),
    /// Priced entrypoint whose price this address already paid (an entitlement).
    Entitled(Address),
}

/// The SIWX offer of `entrypoint`, as the request at `origin` should sign it.
pub fn offer(gate: &Gate, origin: &str) -> Option<Value> {
    let chain = chain_of(gate);
    let extension = SiwxExtension::declare(
        host_of(origin),
        origin,
        Some("Sign in to use this agent"),
        &[chain.as_str()],
        payments::unix_now(),
        Some(OFFER_SECONDS),
    )?;
    serde_json::to_value(extension).ok()
}

/// The CAIP-2 id of the gateway's network, the one chain it accepts signatures for.
fn chain_of(gate: &Gate) -> String {
    format!("{}{}", siwx::EIP155, gate.network.chain_id)
}

/// The entitlement mark of `address` to `entrypoint`.
fn entitlement(entrypoint: &str, address: Address) -> String {
    format!("entitlement:{entrypoint}:{address:#x}")
}

/// Records that `payer` paid for `entrypoint` (a SIWX entrypoint): later signed-in calls run
/// without paying. Failing to record it costs the payer a later payment, never a run.
pub async fn entitle(gate: &Gate, entrypoint: &str, payer: Address) {
    if let Err(err) = gate
        .credentials
        .mark(&entitlement(entrypoint, payer), gate.entitlement_ttl)
        .await
    {
        tracing::warn!(%entrypoint, %payer, error = %err, "could not record an entitlement");
    }
}

/// The gate's SIWX step for `entrypoint`, before any payment: `Ok(Some(_))` when the request
/// signed in and may run without paying, `Ok(None)` when it goes on to the payment gate (no
/// SIWX policy, no header on a priced entrypoint, or a signer without an entitlement), and the
/// answer otherwise.
pub async fn sign_in(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Option<SignedIn>, Box<Response>> {
    let Some(policy) = entrypoint.siwx else {
        return Ok(None);
    };
    let Some(gate) = state.payments.as_deref() else {
        return Err(Box::new(super::price::payments_disabled().into_response()));
    };
    let origin = crate::routes::card::origin::request_origin(headers, uri, &state.config.listen);
    let refuse = |reason: &str| Box::new(auth_required(gate, &origin, reason));
    let Some(value) = headers.get(siwx::SIGN_IN_WITH_X) else {
        if policy.auth_only {
            return Err(refuse("Sign in with SIGN-IN-WITH-X to use this entrypoint"));
        }
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| refuse("the SIGN-IN-WITH-X header is not ASCII"))?;
    let chain = chain_of(gate);
    let now = payments::unix_now();
    let verified = siwx::verify_header(
        text,
        &Expectations::new(host_of(&origin), &origin, &[chain.as_str()], now),
    )
    .map_err(|err| refuse(&format!("sign-in refused: {err}")))?;
    let keep = Duration::from_secs(
        verified
            .valid_until
            .saturating_sub(now)
            .saturating_add(OFFER_SECONDS),
    );
    let first = gate
        .credentials
        .mark_once(&format!("siwx-nonce:{}", verified.nonce), keep)
        .await
        .map_err(|err| Box::new(ApiError::from(err).into_response()))?;
    if !first {
        return Err(refuse("sign-in refused: this nonce was already used"));
    }
    if policy.auth_only {
        return Ok(Some(SignedIn::Authenticated(verified.address)));
    }
    let entitled = gate
        .credentials
        .marked(&entitlement(&entrypoint.key, verified.address))
        .await
        .map_err(|err| Box::new(ApiError::from(err).into_response()))?;
    Ok(entitled.then_some(SignedIn::Entitled(verified.address)))
}

/// `401 auth_required` with `reason` and a fresh sign-in offer.
fn auth_required(gate: &Gate, origin: &str, reason: &str) -> Response {
    let mut body = json!({"error": {"code": ErrorCode::AuthRequired.as_str(), "message": reason}});
    if let (Some(offer), Some(object)) = (offer(gate, origin), body.as_object_mut()) {
        object.insert("extensions".into(), json!({ siwx::SIGN_IN_WITH_X: offer }));
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut response = (StatusCode::UNAUTHORIZED, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
