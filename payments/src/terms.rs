//! What one priced route demands, in one shape for both x402 versions: the challenge a 402
//! carries is built from it, and every credential is checked against it.

use alloy_primitives::{Address, U256};
use serde_json::{Map, Value, json};

use crate::network::Network;
use crate::wire::v1::{ChallengeV1, RequirementsV1};
use crate::wire::v2::{ChallengeV2, RequirementsV2, ResourceInfo};

/// How long an authorization may take to settle, by default (x402's usual 300 s).
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

/// The only scheme priced here: pay exactly the price.
pub const SCHEME_EXACT: &str = "exact";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub network: &'static Network,
    /// Atomic units of the network's USDC.
    pub amount: U256,
    pub pay_to: Address,
    pub max_timeout_seconds: u64,
    pub resource: ResourceInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TermsError {
    #[error("scheme {0:?} is not supported (only \"exact\")")]
    Scheme(String),
    #[error("network {0:?} is not supported")]
    Network(String),
    #[error("asset is not the network's USDC contract")]
    Asset,
    #[error("requirement field {0} is not valid")]
    Field(&'static str),
}

impl Terms {
    /// EIP-712 domain name and version of the asset, as `extra` carries them.
    fn extra(&self) -> Value {
        json!({"name": self.network.usdc_name, "version": self.network.usdc_version})
    }

    pub fn requirements_v2(&self) -> RequirementsV2 {
        RequirementsV2 {
            scheme: SCHEME_EXACT.into(),
            network: self.network.caip2.into(),
            amount: self.amount.to_string(),
            asset: self.network.usdc.to_checksum(None),
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            extra: Some(self.extra()),
        }
    }

    pub fn requirements_v1(&self) -> RequirementsV1 {
        RequirementsV1 {
            scheme: SCHEME_EXACT.into(),
            network: self.network.name.into(),
            max_amount_required: self.amount.to_string(),
            resource: self.resource.url.clone(),
            description: self.resource.description.clone(),
            mime_type: self.resource.mime_type.clone(),
            output_schema: None,
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            asset: self.network.usdc.to_checksum(None),
            extra: Some(self.extra()),
        }
    }

    /// The `PAYMENT-REQUIRED` document.
    pub fn challenge_v2(&self, error: Option<&str>) -> ChallengeV2 {
        ChallengeV2 {
            x402_version: 2,
            error: error.map(str::to_owned),
            resource: self.resource.clone(),
            accepts: vec![self.requirements_v2()],
            extensions: Map::new(),
        }
    }

    /// The v1 402 body.
    pub fn challenge_v1(&self, error: &str) -> ChallengeV1 {
        ChallengeV1 {
            x402_version: 1,
            error: error.to_owned(),
            accepts: vec![self.requirements_v1()],
        }
    }

    /// Terms a facilitator is asked to check (v2 requirements).
    pub fn from_v2(
        requirements: &RequirementsV2,
        resource: ResourceInfo,
    ) -> Result<Self, TermsError> {
        Terms::parse(
            &requirements.scheme,
            &requirements.network,
            &requirements.amount,
            &requirements.asset,
            &requirements.pay_to,
            requirements.max_timeout_seconds,
            resource,
        )
    }

    /// Terms a facilitator is asked to check (v1 requirements).
    pub fn from_v1(requirements: &RequirementsV1) -> Result<Self, TermsError> {
        Terms::parse(
            &requirements.scheme,
            &requirements.network,
            &requirements.max_amount_required,
            &requirements.asset,
            &requirements.pay_to,
            requirements.max_timeout_seconds,
            ResourceInfo {
                url: requirements.resource.clone(),
                description: requirements.description.clone(),
                mime_type: requirements.mime_type.clone(),
            },
        )
    }

    fn parse(
        scheme: &str,
        network: &str,
        amount: &str,
        asset: &str,
        pay_to: &str,
        max_timeout_seconds: u64,
        resource: ResourceInfo,
    ) -> Result<Self, TermsError> {
        if scheme != SCHEME_EXACT {
            return Err(TermsError::Scheme(scheme.to_owned()));
        }
        let network =
            Network::find(network).ok_or_else(|| TermsError::Network(network.to_owned()))?;
        let asset: Address = asset.parse().map_err(|_| TermsError::Field("asset"))?;
        if asset != network.usdc {
            return Err(TermsError::Asset);
        }
        if amount.is_empty() || !amount.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TermsError::Field("amount"));
        }
        Ok(Terms {
            network,
            amount: U256::from_str_radix(amount, 10).map_err(|_| TermsError::Field("amount"))?,
            pay_to: pay_to.parse().map_err(|_| TermsError::Field("payTo"))?,
            max_timeout_seconds,
            resource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Terms {
        Terms {
            network: &crate::network::NETWORKS[0],
            amount: U256::from(1000u64),
            pay_to: Address::repeat_byte(0x22),
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            resource: ResourceInfo {
                url: "http://127.0.0.1:8080/entrypoints/echo/invoke".into(),
                description: "echo".into(),
                mime_type: "application/json".into(),
            },
        }
    }

    #[test]
    fn challenges_carry_both_versions_and_parse_back() {
        let terms = sample();
        let v2 = terms.challenge_v2(None);
        let doc = serde_json::to_value(&v2).unwrap_or_default();
        assert_eq!(doc["x402Version"], 2);
        assert_eq!(doc["accepts"][0]["network"], "eip155:84532");
        assert_eq!(doc["accepts"][0]["amount"], "1000");
        assert_eq!(
            doc["accepts"][0]["asset"],
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
        );
        assert_eq!(
            doc["accepts"][0]["extra"],
            json!({"name": "USDC", "version": "2"})
        );
        assert_eq!(
            Terms::from_v2(&v2.accepts[0], terms.resource.clone()),
            Ok(terms.clone())
        );

        let v1 = terms.challenge_v1("X-PAYMENT header is required");
        let doc = serde_json::to_value(&v1).unwrap_or_default();
        assert_eq!(doc["x402Version"], 1);
        assert_eq!(doc["accepts"][0]["network"], "base-sepolia");
        assert_eq!(doc["accepts"][0]["maxAmountRequired"], "1000");
        assert_eq!(Terms::from_v1(&v1.accepts[0]), Ok(terms));
    }

    #[test]
    fn refuses_foreign_assets() {
        let mut requirements = sample().requirements_v2();
        requirements.asset = Address::repeat_byte(1).to_string();
        assert_eq!(
            Terms::from_v2(&requirements, sample().resource),
            Err(TermsError::Asset)
        );
    }
}
