//! A facilitator's HTTP API: `POST /verify`, `POST /settle` (same request), `GET /supported`.
//! The payload and requirements are forwarded as the client sent them, in its x402 version.

use alloy_primitives::{Address, U256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest {
    pub x402_version: u8,
    pub payment_payload: Value,
    pub payment_requirements: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub is_valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// A settlement, as the facilitator answers it; also the receipt sent to the payer in
/// `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`. A 200 with `success: false` is a failed
/// settlement. `amount` is what was settled (for `upto`, the actual amount; @x402/evm writes
/// `amount`, and `settledAmount` is read as the same field); an upto settlement of zero is a
/// success with an empty `transaction`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    #[serde(default)]
    pub transaction: String,
    #[serde(default)]
    pub network: String,
    #[serde(
        default,
        alias = "settledAmount",
        skip_serializing_if = "Option::is_none"
    )]
    pub amount: Option<String>,
}

impl SettleResponse {
    /// The settled amount in atomic units, when the answer states one as a plain decimal.
    pub fn settled_amount(&self) -> Option<U256> {
        let text = self.amount.as_deref()?.trim();
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        U256::from_str_radix(text, 10).ok()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// `signers` maps a CAIP family (`eip155:*`) to the facilitator's addresses there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    pub kinds: Vec<SupportedKind>,
    #[serde(default)]
    pub extensions: Vec<Value>,
    #[serde(default)]
    pub signers: Value,
}

impl SupportedResponse {
    /// The address an `upto` payer must name as its witness's facilitator on the CAIP-2
    /// network `caip2`: the v2 upto kind's `extra.facilitatorAddress`, where @x402/evm's server
    /// reads it to fill the requirement's `extra`. `None`: this facilitator does not settle
    /// upto there.
    pub fn upto_facilitator(&self, caip2: &str) -> Option<Address> {
        self.kinds
            .iter()
            .filter(|kind| {
                kind.x402_version == 2
                    && kind.scheme == crate::terms::SCHEME_UPTO
                    && kind.network == caip2
            })
            .find_map(|kind| {
                kind.extra
                    .as_ref()?
                    .get("facilitatorAddress")?
                    .as_str()?
                    .parse()
                    .ok()
            })
    }
}

/// Answer of a settlement lookup (`POST /settlement`, this project's facilitator extension):
/// whether the request's credential was settled, and that settlement. A lookup never settles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlementLookup {
    pub settled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<SettleResponse>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settled_amounts_are_read_under_either_name() -> Result<(), serde_json::Error> {
        for name in ["amount", "settledAmount"] {
            let answer: SettleResponse = serde_json::from_value(json!({
                "success": true, "transaction": "", "network": "eip155:84532", name: "1234",
            }))?;
            assert_eq!(answer.settled_amount(), Some(U256::from(1234u64)), "{name}");
            // Always written as x402 names it.
            assert_eq!(serde_json::to_value(&answer)?["amount"], "1234");
        }
        let odd: SettleResponse =
            serde_json::from_value(json!({"success": true, "amount": "0x10"}))?;
        assert_eq!(odd.settled_amount(), None);
        Ok(())
    }

    #[test]
    fn the_upto_facilitator_is_read_from_its_kind() -> Result<(), serde_json::Error> {
        let supported: SupportedResponse = serde_json::from_value(json!({
            "kinds": [
                {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
                {"x402Version": 2, "scheme": "upto", "network": "eip155:84532",
                 "extra": {"facilitatorAddress": "0x3333333333333333333333333333333333333333"}},
            ],
            "extensions": [],
            "signers": {"eip155:*": ["0x3333333333333333333333333333333333333333"]},
        }))?;
        assert_eq!(
            supported.upto_facilitator("eip155:84532"),
            Some(Address::repeat_byte(0x33))
        );
        assert_eq!(supported.upto_facilitator("eip155:8453"), None);
        Ok(())
    }
}
