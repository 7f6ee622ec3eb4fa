//! What one priced route demands, in one shape for both x402 versions: the challenge a 402
//! carries is built from it, and every credential is checked against it.
//!
//! Two schemes: `exact` (pay the price, EIP-3009, x402 v1 and v2) and `upto` (pay at most the
//! price, the actual amount fixed at settlement, Permit2, x402 v2 only, as @x402/evm has it).

use alloy_primitives::{Address, U256};
use serde_json::{Map, Value, json};

use crate::network::Network;
use crate::wire::v1::{ChallengeV1, RequirementsV1};
use crate::wire::v2::{ChallengeV2, RequirementsV2, ResourceInfo};

/// How long an authorization may take to settle, by default (x402's usual 300 s).
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

/// Pay exactly the price (EIP-3009 `transferWithAuthorization`).
pub const SCHEME_EXACT: &str = "exact";

/// Pay at most the price; the facilitator settles the actual amount (Permit2 witness transfer
/// through x402's upto proxy).
pub const SCHEME_UPTO: &str = "upto";

/// `extra.assetTransferMethod` of an upto requirement (what @x402/evm's server writes).
pub const ASSET_TRANSFER_PERMIT2: &str = "permit2";

/// How a route is paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `amount` is the price, paid in full.
    Exact,
    /// `amount` is the maximum; the amount settled is decided after the work is done.
    /// `facilitator` is the address the payer's witness names as the only settler (the
    /// facilitator's own, `extra.facilitatorAddress`): a permit for another is unusable here.
    Upto { facilitator: Address },
}

impl Scheme {
    /// The wire name (`exact`, `upto`).
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Exact => SCHEME_EXACT,
            Scheme::Upto { .. } => SCHEME_UPTO,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub scheme: Scheme,
    pub network: &'static Network,
    /// Atomic units of the network's USDC: the price (`exact`) or the maximum (`upto`).
    pub amount: U256,
    pub pay_to: Address,
    pub max_timeout_seconds: u64,
    pub resource: ResourceInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TermsError {
    #[error("scheme {0:?} is not supported (\"exact\", or \"upto\" on x402 v2)")]
    Scheme(String),
    #[error("network {0:?} is not supported")]
    Network(String),
    #[error("asset is not the network's USDC contract")]
    Asset,
    #[error("requirement field {0} is not valid")]
    Field(&'static str),
}

impl Terms {
    /// Exact terms (the price, paid in full).
    pub fn exact(
        network: &'static Network,
        amount: U256,
        pay_to: Address,
        max_timeout_seconds: u64,
        resource: ResourceInfo,
    ) -> Self {
        Terms {
            scheme: Scheme::Exact,
            network,
            amount,
            pay_to,
            max_timeout_seconds,
            resource,
        }
    }

    /// Upto terms: at most `max_amount`, settled by `facilitator` (the address its
    /// `/supported` names: [`crate::wire::facilitator::SupportedResponse::upto_facilitator`]).
    pub fn upto(
        network: &'static Network,
        max_amount: U256,
        pay_to: Address,
        facilitator: Address,
        max_timeout_seconds: u64,
        resource: ResourceInfo,
    ) -> Self {
        Terms {
            scheme: Scheme::Upto { facilitator },
            network,
            amount: max_amount,
            pay_to,
            max_timeout_seconds,
            resource,
        }
    }

    /// EIP-712 domain name and version of the asset, as `extra` carries them; for upto also
    /// the transfer method and the facilitator, as @x402/evm's server adds them.
    fn extra(&self) -> Value {
        match self.scheme {
            Scheme::Exact => {
                json!({"name": self.network.usdc_name, "version": self.network.usdc_version})
            }
            Scheme::Upto { facilitator } => json!({
                "name": self.network.usdc_name,
                "version": self.network.usdc_version,
                "assetTransferMethod": ASSET_TRANSFER_PERMIT2,
                "facilitatorAddress": facilitator.to_checksum(None),
            }),
        }
    }

    pub fn requirements_v2(&self) -> RequirementsV2 {
        RequirementsV2 {
            scheme: self.scheme.name().into(),
            network: self.network.caip2.into(),
            amount: self.amount.to_string(),
            asset: self.network.usdc.to_checksum(None),
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            extra: Some(self.extra()),
        }
    }

    /// The v1 requirement. x402 v1 has no `upto`: upto terms write their scheme all the same,
    /// which v1 clients do not pay; price upto routes for v2 only.
    pub fn requirements_v1(&self) -> RequirementsV1 {
        RequirementsV1 {
            scheme: self.scheme.name().into(),
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

    /// The v1 402 body. x402 v1 has no `upto`: an upto route offers v1 clients nothing to
    /// pay (`accepts: []`), and the v2 header carries the offer.
    pub fn challenge_v1(&self, error: &str) -> ChallengeV1 {
        let accepts = match self.scheme {
            Scheme::Exact => vec![self.requirements_v1()],
            Scheme::Upto { .. } => Vec::new(),
        };
        ChallengeV1 {
            x402_version: 1,
            error: error.to_owned(),
            accepts,
        }
    }

    /// Terms a facilitator is asked to check (v2 requirements).
    pub fn from_v2(
        requirements: &RequirementsV2,
        resource: ResourceInfo,
    ) -> Result<Self, TermsError> {
        let upto = match requirements.scheme.as_str() {
            SCHEME_EXACT => false,
            SCHEME_UPTO => true,
            other => return Err(TermsError::Scheme(other.to_owned())),
        };
        let mut terms = Terms::parse(
            Scheme::Exact,
            &requirements.network,
            &requirements.amount,
            &requirements.asset,
            &requirements.pay_to,
            requirements.max_timeout_seconds,
            resource,
        )?;
        if upto {
            terms.scheme = Scheme::Upto {
                facilitator: facilitator_address(requirements.extra.as_ref())?,
            };
        }
        Ok(terms)
    }

    /// Terms a facilitator is asked to check (v1 requirements: `exact` only).
    pub fn from_v1(requirements: &RequirementsV1) -> Result<Self, TermsError> {
        if requirements.scheme != SCHEME_EXACT {
            return Err(TermsError::Scheme(requirements.scheme.clone()));
        }
        Terms::parse(
            Scheme::Exact,
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
        scheme: Scheme,
        network: &str,
        amount: &str,
        asset: &str,
        pay_to: &str,
        max_timeout_seconds: u64,
        resource: ResourceInfo,
    ) -> Result<Self, TermsError> {
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
            scheme,
            network,
            amount: U256::from_str_radix(amount, 10).map_err(|_| TermsError::Field("amount"))?,
            pay_to: pay_to.parse().map_err(|_| TermsError::Field("payTo"))?,
            max_timeout_seconds,
            resource,
        })
    }
}

/// `extra.facilitatorAddress` of an upto requirement: @x402/evm's client refuses to sign
/// without it, and so do we.
fn facilitator_address(extra: Option<&Value>) -> Result<Address, TermsError> {
    extra
        .and_then(|extra| extra.get("facilitatorAddress"))
        .and_then(Value::as_str)
        .and_then(|text| text.trim().parse::<Address>().ok())
        .ok_or(TermsError::Field("extra.facilitatorAddress"))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Terms {
        Terms {
            scheme: Scheme::Exact,
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

    #[test]
    fn upto_terms_name_the_facilitator_and_parse_back() {
        let base = sample();
        let facilitator = Address::repeat_byte(0x33);
        let terms = Terms::upto(
            base.network,
            U256::from(50_000u64),
            base.pay_to,
            facilitator,
            base.max_timeout_seconds,
            base.resource.clone(),
        );
        let v2 = terms.challenge_v2(None);
        let doc = serde_json::to_value(&v2).unwrap_or_default();
        assert_eq!(doc["accepts"][0]["scheme"], "upto");
        assert_eq!(doc["accepts"][0]["amount"], "50000");
        assert_eq!(
            doc["accepts"][0]["extra"],
            json!({
                "name": "USDC",
                "version": "2",
                "assetTransferMethod": "permit2",
                "facilitatorAddress": facilitator.to_checksum(None),
            })
        );
        assert_eq!(
            Terms::from_v2(&v2.accepts[0], terms.resource.clone()),
            Ok(terms.clone())
        );

        // Without a facilitator address nobody can sign: refused, as @x402/evm's client does.
        let mut anonymous = v2.accepts[0].clone();
        anonymous.extra = Some(json!({"name": "USDC", "version": "2"}));
        assert_eq!(
            Terms::from_v2(&anonymous, terms.resource.clone()),
            Err(TermsError::Field("extra.facilitatorAddress"))
        );
        // x402 v1 has no upto.
        assert_eq!(
            Terms::from_v1(&terms.requirements_v1()),
            Err(TermsError::Scheme("upto".into()))
        );
        let mut other = v2.accepts[0].clone();
        other.scheme = "stream".into();
        assert_eq!(
            Terms::from_v2(&other, terms.resource),
            Err(TermsError::Scheme("stream".into()))
        );
    }
}
