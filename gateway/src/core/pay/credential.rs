//! Reading a payment header: `PAYMENT-SIGNATURE` (v2) wins over `X-PAYMENT` (v1). Everything
//! here is hostile input: oversized, not ASCII, not base64, not JSON, the wrong shape or an
//! unknown version all become a reason for a `402`, and the value itself is never logged or
//! echoed.
//!
//! An x402 v2 payload names the resource it pays for (`resource.url`, echoed from the 402): it
//! must be this route's, so a credential made for one entrypoint does not pay another of the
//! same price. The EIP-3009 signature does not cover it, so this stops confused or replaying
//! clients, not whoever rewrites someone else's credential (MPP's binding is cryptographic).
//! v1 payloads name no resource: there is nothing to check.

use axum::http::HeaderMap;
use payments::{Credential, Terms, X402Version};

use payments::unix_now;

/// Extra validity a payer may ask for beyond `maxTimeoutSeconds` (clock skew, slow clients).
/// Bounding it bounds how long a spent credential's record must be kept.
pub const VALIDITY_SLACK_SECONDS: u64 = 600;

/// A credential that passed the offline checks, and its payer.
pub struct Checked {
    pub credential: Credential,
    pub payer: payments::Address,
    /// The x402 `payment-identifier` a v2 payload carries, on a route that honours it
    /// ([`super::challenge::honours_payment_identifier`]).
    pub payment_id: Option<String>,
}

/// The request's credential: `Ok(None)` when it carries none, `Err(reason)` when the one it
/// carries is unusable for these terms.
pub fn read(headers: &HeaderMap, terms: &Terms) -> Result<Option<Checked>, String> {
    let Some((version, value)) = header(headers)? else {
        return Ok(None);
    };
    let credential = Credential::decode(version, value).map_err(|err| err.to_string())?;
    if version == X402Version::V2 {
        check_resource(&credential, terms)?;
    }
    let now = unix_now();
    let payer = payments::precheck(&credential, terms, now).map_err(|err| err.to_string())?;
    let horizon = now
        .saturating_add(terms.max_timeout_seconds)
        .saturating_add(VALIDITY_SLACK_SECONDS);
    if credential.valid_before() > horizon {
        return Err(format!(
            "payment authorization is valid for longer than maxTimeoutSeconds ({}s)",
            terms.max_timeout_seconds
        ));
    }
    let payment_id = if super::challenge::honours_payment_identifier(&terms.resource.url) {
        payments::payment_identifier::read(&credential.document)?
    } else {
        None
    };
    Ok(Some(Checked {
        credential,
        payer,
        payment_id,
    }))
}

/// A v2 payload's `resource.url` must be the one these terms are for.
fn check_resource(credential: &Credential, terms: &Terms) -> Result<(), String> {
    let named = credential
        .document
        .get("resource")
        .and_then(|resource| resource.get("url"))
        .and_then(|url| url.as_str());
    match named {
        Some(url) if url == terms.resource.url => Ok(()),
        Some(_) => Err(format!(
            "the payment was made for another resource; this one is {}",
            terms.resource.url
        )),
        None => Err(format!(
            "the payment payload names no resource (resource.url); this one is {}",
            terms.resource.url
        )),
    }
}

fn header(headers: &HeaderMap) -> Result<Option<(X402Version, &str)>, String> {
    for (name, version) in [
        (payments::PAYMENT_SIGNATURE, X402Version::V2),
        (payments::X_PAYMENT, X402Version::V1),
    ] {
        let Some(value) = headers.get(name) else {
            continue;
        };
        if value.len() > payments::MAX_HEADER_BYTES {
            return Err(format!(
                "{name} header is larger than {} bytes",
                payments::MAX_HEADER_BYTES
            ));
        }
        let text = value
            .to_str()
            .map_err(|_| format!("{name} header is not ASCII base64"))?
            .trim();
        if text.is_empty() {
            return Err(format!("{name} header is empty"));
        }
        return Ok(Some((version, text)));
    }
    Ok(None)
}
