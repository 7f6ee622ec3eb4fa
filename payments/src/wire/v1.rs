//! x402 version 1: the challenge is the 402's JSON body; the credential travels in `X-PAYMENT`
//! and the receipt in `X-PAYMENT-RESPONSE`. Networks are named (`base-sepolia`), amounts are
//! `maxAmountRequired`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementsV1 {
    pub scheme: String,
    pub network: String,
    /// Atomic units of `asset`, decimal.
    pub max_amount_required: String,
    pub resource: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub mime_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    pub asset: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// The 402 body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChallengeV1 {
    pub x402_version: u8,
    #[serde(default)]
    pub error: String,
    pub accepts: Vec<RequirementsV1>,
}

/// The `X-PAYMENT` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV1 {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    pub payload: Value,
}
