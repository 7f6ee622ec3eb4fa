//! A settlement's receipt: the facilitator's settle answer, base64 JSON, in
//! `PAYMENT-RESPONSE` (x402 v2) or `X-PAYMENT-RESPONSE` (v1) as the credential's version asks.
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
        let allowed = [payments::PAYMENT_RESPONSE, payments::X_PAYMENT_RESPONSE];
        if !allowed.contains(&self.header.as_str()) {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(self.header.as_bytes()),
            HeaderValue::from_str(&self.value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
}
