//! Sign-In-With-X on the gate, for entrypoints a worker declares with `--siwx KEY[:auth-only]`.
//!
//! - The 402 of such an entrypoint (and the 401 of an auth-only one) offers
//!   `extensions["sign-in-with-x"]`: the domain and URI to sign for (the gateway's
//!   [`super::security_origin`], never a host the client chose), a fresh nonce, the time
//!   window and the chain (`payments::siwx::SiwxExtension`). The nonce is recorded as issued
//!   in Redis first (bounded: see [`store::credentials::MAX_ISSUED_NONCES`]).
//! - A request carrying `SIGN-IN-WITH-X` is checked ([`payments::siwx::verify_header`]: the
//!   domain and URI are the security origin's, the chain the gateway's network, the EIP-4361
//!   message signed by the address it names, issued at most five minutes ago), then its
//!   nonce is spent: accepted once, cluster-wide, and only if this cluster issued it and it
//!   has not expired. The signature proves control of the wallet; then an auth-only
//!   entrypoint runs, and a priced one runs without payment when that address holds an
//!   entitlement to it.
//! - A settled payment for a SIWX entrypoint entitles its payer to it for
//!   `--entitlement-ttl-seconds`, on the network, asset and payee it was paid with: a gateway
//!   taking payments on another network or for another payee does not honour it.
//!
//! Refusals are `401 auth_required` with the reason (never quoting the header) and a fresh
//! offer; never a 5xx for input, and the header is never logged.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use payments::Address;
use payments::siwx::{self, Expectations, SiwxExtension};
use protocol::ErrorCode;
use serde_json::{Value, json};
use store::StoreError;
use store::registry::EntrypointInfo;

use super::Gate;
use super::PayContext;
use crate::http::error::ApiError;
use crate::http::origin::host_of;

/// How long an offered sign-in stays valid (and its issued nonce spendable).
const OFFER_SECONDS: u64 = 300;

/// Who signed in, when a request carried a valid `SIGN-IN-WITH-X` for a SIWX entrypoint.
#[derive(Debug, Clone, Copy)]
pub enum SignedIn {
    /// Auth-only entrypoint: the signature is all it takes.
    Authenticated(Address),
    /// Priced entrypoint whose price this address already paid (an entitlement).
    Entitled(Address),
}

/// A SIWX offer to sign for `origin` (the security origin), with a fresh nonce recorded as
/// issued. `Ok(None)` only if the offer cannot be written (a clock out of range).
pub async fn offer(gate: &Gate, origin: &str) -> Result<Option<Value>, StoreError> {
    let chain = chain_of(gate);
    let Some(extension) = SiwxExtension::declare(
        host_of(origin),
        origin,
        Some("Sign in to use this agent"),
        &[chain.as_str()],
        payments::unix_now(),
        Some(OFFER_SECONDS),
    ) else {
        return Ok(None);
    };
    gate.credentials
        .issue_nonce(&extension.info.nonce, Duration::from_secs(OFFER_SECONDS))
        .await?;
    Ok(serde_json::to_value(extension).ok())
}

/// [`offer`] for a `402`, which stays payable without it: a nonce that cannot be recorded
/// leaves the sign-in offer out (logged), never the payment challenge.
pub(super) async fn offer_beside_payment(gate: &Gate, origin: &str) -> Option<Value> {
    match offer(gate, origin).await {
        Ok(offer) => offer,
        Err(err) => {
            tracing::warn!(error = %err, "could not issue a sign-in nonce; the 402 offers payment only");
            None
        }
    }
}

/// The CAIP-2 id of the gateway's network, the one chain it accepts signatures for.
fn chain_of(gate: &Gate) -> String {
    format!("{}{}", siwx::EIP155, gate.network.chain_id)
}

/// The entitlement mark of `address` to `entrypoint`, paid on `network` (CAIP-2) in `asset`
/// to `payee`: a payment on one network, asset or payee entitles nothing on another.
fn entitlement(
    entrypoint: &str,
    network: &str,
    asset: Address,
    payee: Address,
    address: Address,
) -> String {
    format!("entitlement:{entrypoint}:{network}:{asset:#x}:{payee:#x}:{address:#x}")
}

/// The entitlement mark of `address` to `entrypoint` on `gate`'s terms (its network, that
/// network's USDC, its payee): the terms every payment it admits was checked against.
fn entitlement_on(gate: &Gate, entrypoint: &str, address: Address) -> String {
    entitlement(
        entrypoint,
        gate.network.caip2,
        gate.network.usdc,
        gate.pay_to,
        address,
    )
}

/// Records that `payer` paid for `entrypoint` (a SIWX entrypoint) on `gate`'s network, asset
/// and payee: later signed-in calls on the same terms run without paying. Failing to record
/// it costs the payer a later payment, never a run.
pub async fn entitle(gate: &Gate, entrypoint: &str, payer: Address) {
    if let Err(err) = gate
        .credentials
        .mark(
            &entitlement_on(gate, entrypoint, payer),
            gate.entitlement_ttl,
        )
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
    state: PayContext<'_>,
    entrypoint: &EntrypointInfo,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Option<SignedIn>, Box<Response>> {
    let Some(policy) = entrypoint.siwx else {
        return Ok(None);
    };
    let Some(gate) = state.gate else {
        return Err(Box::new(
            crate::core::prices::payments_disabled().into_response(),
        ));
    };
    let origin = super::security_origin(state, headers, uri);
    let Some(value) = headers.get(siwx::SIGN_IN_WITH_X) else {
        if policy.auth_only {
            return Err(Box::new(
                auth_required(
                    gate,
                    &origin,
                    "Sign in with SIGN-IN-WITH-X to use this entrypoint",
                )
                .await,
            ));
        }
        return Ok(None);
    };
    let address = match signer(gate, &origin, value).await {
        Ok(address) => address,
        Err(Refused::Reason(reason)) => {
            return Err(Box::new(auth_required(gate, &origin, &reason).await));
        }
        Err(Refused::Store(err)) => return Err(Box::new(ApiError::from(err).into_response())),
    };
    if policy.auth_only {
        return Ok(Some(SignedIn::Authenticated(address)));
    }
    let entitled = gate
        .credentials
        .marked(&entitlement_on(gate, &entrypoint.key, address))
        .await
        .map_err(|err| Box::new(ApiError::from(err).into_response()))?;
    Ok(entitled.then_some(SignedIn::Entitled(address)))
}

/// Why a `SIGN-IN-WITH-X` did not sign anyone in.
enum Refused {
    /// The payload: `401` with this reason.
    Reason(String),
    /// The nonce could not be looked up: `503`.
    Store(StoreError),
}

/// The address a `SIGN-IN-WITH-X` value signs in, once: checked against `origin` and the
/// gateway's chain, then its nonce spent (it must be one this cluster issued, unexpired).
async fn signer(gate: &Gate, origin: &str, value: &HeaderValue) -> Result<Address, Refused> {
    let text = value
        .to_str()
        .map_err(|_| Refused::Reason("the SIGN-IN-WITH-X header is not ASCII".into()))?;
    let chain = chain_of(gate);
    let verified = siwx::verify_header(
        text,
        &Expectations::new(
            host_of(origin),
            origin,
            &[chain.as_str()],
            payments::unix_now(),
        ),
    )
    .map_err(|err| Refused::Reason(format!("sign-in refused: {err}")))?;
    let issued = gate
        .credentials
        .take_nonce(&verified.nonce)
        .await
        .map_err(Refused::Store)?;
    if !issued {
        return Err(Refused::Reason(
            "sign-in refused: the nonce was not issued by this server, has expired or was already used; sign the fresh offer"
                .into(),
        ));
    }
    Ok(verified.address)
}

/// `401 auth_required` with `reason` and a fresh sign-in offer (`503` when its nonce cannot
/// be recorded: an offer nobody could redeem is no offer).
async fn auth_required(gate: &Gate, origin: &str, reason: &str) -> Response {
    let offer = match offer(gate, origin).await {
        Ok(offer) => offer,
        Err(err) => return ApiError::from(err).into_response(),
    };
    let mut body = json!({"error": {"code": ErrorCode::AuthRequired.as_str(), "message": reason}});
    if let (Some(offer), Some(object)) = (offer, body.as_object_mut()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entitlement_is_bound_to_network_asset_and_payee() {
        let address = |byte: u8| Address::repeat_byte(byte);
        let paid = entitlement("echo", "eip155:84532", address(1), address(2), address(3));
        for other in [
            entitlement(
                "summarize",
                "eip155:84532",
                address(1),
                address(2),
                address(3),
            ),
            entitlement("echo", "eip155:8453", address(1), address(2), address(3)),
            entitlement("echo", "eip155:84532", address(9), address(2), address(3)),
            entitlement("echo", "eip155:84532", address(1), address(9), address(3)),
            entitlement("echo", "eip155:84532", address(1), address(2), address(9)),
        ] {
            assert_ne!(paid, other);
        }
        assert_eq!(
            paid,
            entitlement("echo", "eip155:84532", address(1), address(2), address(3))
        );
    }
}
