//! The `Payment-Receipt` header of a successful (2xx) response: base64url-nopad of
//! `{status: "success", method, timestamp, reference}` (draft-httpauth-payment,
//! "Payment-Receipt Header"), which the EVM method extends with `challengeId`, `chainId` and
//! an optional `externalId` (draft-evm-charge, "Receipt Generation"). Unknown fields are
//! ignored when read (mppx keeps them; nothing here needs them). Sent with
//! `Cache-Control: private`, never on an error.

use serde::{Deserialize, Serialize};

use super::{MAX_CREDENTIAL_BYTES, b64};
use crate::rfc3339;

/// The only status a receipt carries: failures are 402s with a problem body.
pub const STATUS_SUCCESS: &str = "success";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// Always `success`.
    pub status: String,
    pub method: String,
    /// RFC 3339 settlement time.
    pub timestamp: String,
    /// Method-specific reference: for `evm`, the transaction hash.
    pub reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("Payment-Receipt is larger than {MAX_CREDENTIAL_BYTES} bytes")]
    TooLarge,
    #[error("Payment-Receipt is not base64url")]
    NotBase64Url,
    #[error("Payment-Receipt is not a JSON receipt: {0}")]
    NotJson(String),
    #[error("Payment-Receipt status is not \"success\"")]
    Status,
    #[error("Payment-Receipt timestamp is not an RFC 3339 date-time")]
    Timestamp,
    #[error("the settlement time is out of range")]
    Time,
}

impl Receipt {
    /// A core receipt: `method`, settled at `settled_at` (Unix seconds), with `reference`.
    pub fn success(method: &str, reference: &str, settled_at: u64) -> Result<Self, ReceiptError> {
        Ok(Receipt {
            status: STATUS_SUCCESS.into(),
            method: method.into(),
            timestamp: rfc3339::format_seconds(settled_at).ok_or(ReceiptError::Time)?,
            reference: reference.into(),
            challenge_id: None,
            chain_id: None,
            external_id: None,
        })
    }

    /// The `evm` method's receipt: a transaction hash on `chain_id`, for `challenge_id`.
    pub fn evm(
        challenge_id: &str,
        chain_id: u64,
        transaction: &str,
        settled_at: u64,
    ) -> Result<Self, ReceiptError> {
        let mut receipt = Receipt::success(super::evm::METHOD, transaction, settled_at)?;
        receipt.challenge_id = Some(challenge_id.into());
        receipt.chain_id = Some(chain_id);
        Ok(receipt)
    }

    /// The header value.
    pub fn encode(&self) -> String {
        // Serializing strings and numbers cannot fail.
        b64::encode(&serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads a header value (a client's view of its payment).
    pub fn decode(header: &str) -> Result<Self, ReceiptError> {
        if header.len() > MAX_CREDENTIAL_BYTES {
            return Err(ReceiptError::TooLarge);
        }
        let bytes = b64::decode(header.trim()).ok_or(ReceiptError::NotBase64Url)?;
        let receipt: Receipt = serde_json::from_slice(&bytes)
            .map_err(|err| ReceiptError::NotJson(crate::wire::describe(&err)))?;
        if receipt.status != STATUS_SUCCESS {
            return Err(ReceiptError::Status);
        }
        if rfc3339::parse(&receipt.timestamp).is_none() {
            return Err(ReceiptError::Timestamp);
        }
        Ok(receipt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// The spec's example receipt, byte for byte.
    #[test]
    fn reads_the_spec_example() -> TestResult {
        let header = "eyJzdGF0dXMiOiJzdWNjZXNzIiwibWV0aG9kIjoiaW52b2ljZSIsInRpbWVzdGFtcCI6IjIwMjUtMDEtMTVUMTI6MDA6MDBaIiwicmVmZXJlbmNlIjoiaW52XzEyMzQ1In0";
        let receipt = Receipt::decode(header)?;
        assert_eq!(
            receipt,
            Receipt::success("invoice", "inv_12345", 1_736_942_400)?
        );
        assert_eq!(receipt.encode(), header);
        Ok(())
    }

    #[test]
    fn evm_receipt_round_trips() -> TestResult {
        let tx = format!("0x{}", "ab".repeat(32));
        let receipt = Receipt::evm("aB3cDeF4gHiJkLmN", 84532, &tx, 1_775_044_698)?;
        let value: serde_json::Value =
            serde_json::from_slice(&b64::decode(&receipt.encode()).unwrap_or_default())?;
        assert_eq!(
            value,
            json!({
                "status": "success",
                "method": "evm",
                "timestamp": "2026-04-01T11:58:18Z",
                "reference": tx,
                "challengeId": "aB3cDeF4gHiJkLmN",
                "chainId": 84532
            })
        );
        assert_eq!(Receipt::decode(&receipt.encode())?, receipt);
        assert!(!receipt.encode().contains('='));
        Ok(())
    }

    #[test]
    fn refuses_bad_receipts() {
        let encode =
            |value: serde_json::Value| b64::encode(&serde_json::to_vec(&value).unwrap_or_default());
        let good = json!({"status": "success", "method": "evm", "timestamp": "2025-01-15T12:00:00Z", "reference": "0x1"});
        assert!(Receipt::decode(&encode(good.clone())).is_ok());
        let mut failed = good.clone();
        failed["status"] = json!("failed");
        assert_eq!(Receipt::decode(&encode(failed)), Err(ReceiptError::Status));
        let mut when = good.clone();
        when["timestamp"] = json!("yesterday");
        assert_eq!(Receipt::decode(&encode(when)), Err(ReceiptError::Timestamp));
        let mut missing = good.clone();
        if let Some(object) = missing.as_object_mut() {
            object.remove("reference");
        }
        assert!(matches!(
            Receipt::decode(&encode(missing)),
            Err(ReceiptError::NotJson(_))
        ));
        assert_eq!(Receipt::decode("%%%"), Err(ReceiptError::NotBase64Url));
        assert_eq!(
            Receipt::decode(&"A".repeat(MAX_CREDENTIAL_BYTES + 1)),
            Err(ReceiptError::TooLarge)
        );
        assert_eq!(
            Receipt::success("evm", "0x", u64::MAX),
            Err(ReceiptError::Time)
        );
    }
}
