//! The payment gate for an x402 credential carried in the request's content rather than its
//! headers: the A2A x402 extension's `x402.payment.payload` (see `crate::a2a::x402`).
//!
//! Only the carrier differs from a header credential. The terms are the same ones, built the
//! same way ([`super::check_priced`]: the same amount, payee, network and resource URL at the
//! security origin); the document meets the same offline checks
//! ([`super::credential::read_document`]); and the [`Payment`] it makes goes through the same
//! durable admission ([`super::admission::admit_paid_as`]): the same nonce claim in Redis, the
//! same facilitator calls, the same receipt stored with the task.

use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use store::registry::{EntrypointInfo, PaymentProtocol};

use super::credential::{self, Unusable};
use super::{Gate, PayContext, Payment, Priced, Rail};

/// A priced request that may be paid in-band: its gate and terms.
pub struct InBand<'a> {
    gate: &'a Gate,
    terms: payments::Terms,
    /// A SIWX entrypoint: its settled payment entitles the payer to sign in next time.
    entitles: bool,
}

/// The in-band terms of `entrypoint` through `route` for this request: `Ok(None)` when the
/// route is free, priced by MPP (no in-band carrier is defined for it), or this gateway takes
/// no payments; an answer when the price cannot be used (as [`super::check_priced`] answers).
pub async fn terms<'a>(
    state: PayContext<'a>,
    entrypoint: &EntrypointInfo,
    route: Priced,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Option<InBand<'a>>, Box<Response>> {
    let Some(price) = crate::core::prices::price_of(entrypoint, route) else {
        return Ok(None);
    };
    let protocol = entrypoint
        .price
        .as_ref()
        .map(|price| price.protocol)
        .unwrap_or_default();
    let Some(gate) = state.gate else {
        return Ok(None);
    };
    if protocol == PaymentProtocol::Mpp {
        return Ok(None);
    }
    let origin = super::security_origin(state, headers, uri);
    let resource = super::resource_url(&origin, uri.path(), &entrypoint.key);
    let terms = gate
        .terms(entrypoint, price, resource)
        .await
        .map_err(|err| Box::new(err.into_response()))?;
    Ok(Some(InBand {
        gate,
        terms,
        entitles: entrypoint.siwx.is_some(),
    }))
}

impl<'a> InBand<'a> {
    /// The x402 v2 `PaymentRequired` document for these terms (what a header challenge carries
    /// in `PAYMENT-REQUIRED`), with `error` when a credential was refused.
    pub fn required(&self, error: Option<&str>) -> serde_json::Value {
        serde_json::to_value(self.terms.challenge_v2(error)).unwrap_or_default()
    }

    /// How long a payer may take, as the terms say (`maxTimeoutSeconds`).
    pub fn max_timeout_seconds(&self) -> u64 {
        self.terms.max_timeout_seconds
    }

    /// The payment `document` makes, once it passed the offline checks.
    pub fn pay(self, document: &serde_json::Value) -> Result<Payment<'a>, Unusable> {
        let checked = credential::read_document(document, &self.terms)?;
        Ok(Payment {
            gate: self.gate,
            terms: self.terms,
            checked,
            rail: Rail::X402,
            entitles: self.entitles,
        })
    }
}
