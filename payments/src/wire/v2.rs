//! x402 version 2: the challenge travels in the `PAYMENT-REQUIRED` header, the credential in
//! `PAYMENT-SIGNATURE` (echoing the requirement it accepted) and the receipt in
//! `PAYMENT-RESPONSE`. Networks are CAIP-2 ids (`eip155:84532`), amounts are `amount`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    pub url: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub mime_type: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementsV2 {
    pub scheme: String,
    pub network: String,
    /// Atomic units of `asset`, decimal.
    pub amount: String,
    pub asset: String,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// The `PAYMENT-REQUIRED` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChallengeV2 {
    pub x402_version: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub resource: ResourceInfo,
    pub accepts: Vec<RequirementsV2>,
    #[serde(default)]
    pub extensions: Map<String, Value>,
}

/// The `PAYMENT-SIGNATURE` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    pub x402_version: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    pub accepted: RequirementsV2,
    pub payload: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}
