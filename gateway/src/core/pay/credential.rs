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
    check(credential, terms)
        .map(Some)
        .map_err(|unusable| unusable.reason)
}

/// Why a credential is unusable: the words (as a header credential's `402` says them) and
/// what kind of fault it is, for protocols that name faults by code (the A2A x402 extension's
/// `x402.payment.error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub fault: Fault,
    pub reason: String,
}

/// The kinds of [`Unusable`] credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Not a payment payload this gateway reads (shape, size, version, scheme).
    Malformed,
    /// Made for another resource (`resource.url`).
    Resource,
    /// Made for another payee, asset or amount.
    Terms,
    Network,
    /// Outside its validity window, or valid for too long.
    Validity,
    Signature,
}

impl Unusable {
    fn new(fault: Fault, reason: impl Into<String>) -> Self {
        Unusable {
            fault,
            reason: reason.into(),
        }
    }
}

/// A credential carried as a JSON document rather than a header: the x402 `PaymentPayload` of
/// the A2A x402 extension's `x402.payment.payload`. Its `x402Version` says its shape; then it
/// meets exactly the checks of a header credential ([`read`]). It is as hostile as a header:
/// bounded by the same size (as JSON text), never logged or echoed.
pub fn read_document(document: &serde_json::Value, terms: &Terms) -> Result<Checked, Unusable> {
    let size = serde_json::to_vec(document).map_or(usize::MAX, |text| text.len());
    if size > payments::MAX_HEADER_BYTES {
        return Err(Unusable::new(
            Fault::Malformed,
            format!(
                "the payment payload is larger than {} bytes",
                payments::MAX_HEADER_BYTES
            ),
        ));
    }
    let version = match document
        .get("x402Version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(2) => X402Version::V2,
        Some(1) => X402Version::V1,
        _ => {
            return Err(Unusable::new(
                Fault::Malformed,
                "the payment payload's x402Version is not 1 or 2",
            ));
        }
    };
    let credential = Credential::from_document(version, document.clone()).map_err(|err| {
        let fault = match err {
            payments::CredentialError::Network(_) => Fault::Network,
            payments::CredentialError::Authorization(_) => Fault::Signature,
            _ => Fault::Malformed,
        };
        Unusable::new(fault, err.to_string())
    })?;
    check(credential, terms)
}

/// The offline checks every credential meets, whatever carried it: its resource (v2), the
/// terms ([`payments::precheck`]), its validity window and its `payment-identifier`.
fn check(credential: Credential, terms: &Terms) -> Result<Checked, Unusable> {
    if credential.version == X402Version::V2 {
        check_resource(&credential, terms)
            .map_err(|reason| Unusable::new(Fault::Resource, reason))?;
    }
    let now = unix_now();
    let payer = payments::precheck(&credential, terms, now).map_err(|rejection| {
        let fault = match rejection {
            payments::Rejection::Network(..) => Fault::Network,
            payments::Rejection::NotYetValid | payments::Rejection::Expired => Fault::Validity,
            payments::Rejection::Signature => Fault::Signature,
            _ => Fault::Terms,
        };
        Unusable::new(fault, rejection.to_string())
    })?;
    let horizon = now
        .saturating_add(terms.max_timeout_seconds)
        .saturating_add(VALIDITY_SLACK_SECONDS);
    if credential.valid_before() > horizon {
        return Err(Unusable::new(
            Fault::Validity,
            format!(
                "payment authorization is valid for longer than maxTimeoutSeconds ({}s)",
                terms.max_timeout_seconds
            ),
        ));
    }
    let payment_id = if super::challenge::honours_payment_identifier(&terms.resource.url) {
        payments::payment_identifier::read(&credential.document)
            .map_err(|reason| Unusable::new(Fault::Malformed, reason))?
    } else {
        None
    };
    Ok(Checked {
        credential,
        payer,
        payment_id,
    })
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

#[cfg(test)]
mod tests {
    use payments::wire::v2::ResourceInfo;
    use payments::{Address, Network, U256};
    use serde_json::json;

    use super::*;

    fn terms() -> Option<Terms> {
        Some(Terms {
            network: Network::find("base-sepolia")?,
            amount: U256::from(1000u64),
            pay_to: Address::ZERO,
            max_timeout_seconds: 60,
            scheme: payments::terms::Scheme::Exact,
            resource: ResourceInfo {
                url: "https://agent.example/a2a/jsonrpc?skillId=echo".into(),
                description: String::new(),
                mime_type: "application/json".into(),
            },
        })
    }

    fn fault(document: &serde_json::Value) -> Option<Fault> {
        read_document(document, &terms()?)
            .err()
            .map(|unusable| unusable.fault)
    }

    #[test]
    fn documents_that_are_no_payload_are_malformed() {
        assert!(terms().is_some());
        for document in [
            json!("not a payload"),
            json!({}),
            json!({"x402Version": 3}),
            json!({"x402Version": 2}),
            json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}),
            json!({"x402Version": 2, "padding": "x".repeat(payments::MAX_HEADER_BYTES)}),
        ] {
            assert_eq!(fault(&document), Some(Fault::Malformed), "{document}");
        }
    }
}
