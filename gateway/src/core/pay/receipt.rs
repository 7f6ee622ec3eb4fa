//! A settlement's receipt: the facilitator's settle answer, base64 JSON, in
//! `PAYMENT-RESPONSE` (x402 v2) or `X-PAYMENT-RESPONSE` (v1) as the credential's version asks,
//! or MPP's `Payment-Receipt` (base64url JSON) for a payment by the "Payment" scheme.
//! The same header and value are stored with the task, so `GET /tasks/{id}` hands the receipt
//! again to a payer whose first answer was lost.

use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use payments::X402Version;
use payments::wire::facilitator::SettleResponse;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// Header name, lowercase.
    pub header: String,
    /// Header value: base64 JSON of the settlement.
    pub value: String,
}

impl Receipt {
    pub fn of(version: X402Version, settlement: &SettleResponse) -> Receipt {
        Receipt {
            header: version.response_header().to_owned(),
            value: payments::wire::encode(settlement),
        }
    }

    /// A receipt of a settle answer the gateway added to (an `upto` receipt's `maxAmount`).
    pub fn of_document(version: X402Version, document: &serde_json::Value) -> Receipt {
        Receipt {
            header: version.response_header().to_owned(),
            value: payments::wire::encode(document),
        }
    }

    /// An MPP receipt (`Payment-Receipt`: the evm method, the transaction, the challenge it
    /// answered and the chain).
    pub fn mpp(challenge_id: &str, chain_id: u64, settlement: &SettleResponse) -> Receipt {
        let value = payments::mpp::Receipt::evm(
            challenge_id,
            chain_id,
            &settlement.transaction,
            payments::unix_now(),
        )
        .map(|receipt| receipt.encode())
        .unwrap_or_default();
        Receipt {
            header: payments::mpp::PAYMENT_RECEIPT.to_owned(),
            value,
        }
    }

    /// The form stored in the task record.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored receipt; `None` for anything unreadable (never an error on a read path).
    pub fn from_stored(text: &str) -> Option<Receipt> {
        serde_json::from_str(text).ok()
    }

    /// Puts the receipt on `response`. Only the receipt headers are ever copied there.
    pub fn attach(&self, response: &mut Response) {
        let allowed = [
            payments::PAYMENT_RESPONSE,
            payments::X_PAYMENT_RESPONSE,
            payments::mpp::PAYMENT_RECEIPT,
        ];
        if !allowed.contains(&self.header.as_str()) {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(self.header.as_bytes()),
            HeaderValue::from_str(&self.value),
        ) {
            response.headers_mut().insert(name, value);
            if self.header == payments::mpp::PAYMENT_RECEIPT {
                // MPP: a receipt is for its payer only (the spec's "Caching").
                response.headers_mut().insert(
                    axum::http::header::CACHE_CONTROL,
                    HeaderValue::from_static(payments::mpp::CACHE_CONTROL_RECEIPT),
                );
            }
        }
    }
}
