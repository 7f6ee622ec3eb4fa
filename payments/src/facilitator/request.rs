//! The requests a payee sends its facilitator: the credential as the payer sent it, with the
//! payee's own requirements in the credential's x402 version. For `upto` the requirements'
//! `amount` says what is asked: the maximum when verifying, the actual amount when settling
//! (@x402/evm's facilitator settles `requirements.amount`, at most the permitted maximum).

use alloy_primitives::U256;
use serde_json::Value;

use crate::credential::{Credential, X402Version};
use crate::terms::{Scheme, Terms};
use crate::wire::facilitator::FacilitatorRequest;

/// Why an upto settlement request cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UptoSettleError {
    #[error("only an upto credential on upto terms settles an actual amount")]
    NotUpto,
    #[error("the actual amount {actual} is above the permitted maximum {max}")]
    ExceedsMaximum { actual: U256, max: U256 },
}

/// The `/verify` (and, for `exact`, `/settle`) request for `credential` against `terms`.
pub fn request(credential: &Credential, terms: &Terms) -> FacilitatorRequest {
    let requirements = match credential.version {
        X402Version::V2 => serde_json::to_value(terms.requirements_v2()),
        X402Version::V1 => serde_json::to_value(terms.requirements_v1()),
    }
    // Serializing plain structs of strings and numbers cannot fail.
    .unwrap_or(Value::Null);
    FacilitatorRequest {
        x402_version: credential.version.number(),
        payment_payload: credential.document.clone(),
        payment_requirements: requirements,
    }
}

/// The `/settle` request of an upto `credential` for `actual` atomic units: `terms`' requirement
/// with `amount` set to `actual`. `actual` may be zero (the facilitator then answers success
/// with an empty transaction and moves nothing) and at most the permitted maximum.
pub fn upto_settlement(
    credential: &Credential,
    terms: &Terms,
    actual: U256,
) -> Result<FacilitatorRequest, UptoSettleError> {
    let (Some(permit), Scheme::Upto { .. }) = (credential.upto(), terms.scheme) else {
        return Err(UptoSettleError::NotUpto);
    };
    if actual > permit.amount {
        return Err(UptoSettleError::ExceedsMaximum {
            actual,
            max: permit.amount,
        });
    }
    let mut request = request(credential, terms);
    request.payment_requirements["amount"] = Value::String(actual.to_string());
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payer::{Challenge, LocalPayer};
    use crate::wire::v2::ResourceInfo;
    use alloy_primitives::Address;

    const NOW: u64 = 1_800_000_000;

    fn upto_terms() -> Terms {
        Terms::upto(
            &crate::network::NETWORKS[0],
            U256::from(5000u64),
            Address::repeat_byte(0x22),
            Address::repeat_byte(0x33),
            300,
            ResourceInfo {
                url: "http://127.0.0.1/entrypoints/echo/invoke".into(),
                description: String::new(),
                mime_type: "application/json".into(),
            },
        )
    }

    #[test]
    fn an_upto_settlement_asks_for_the_actual_amount() -> Result<(), Box<dyn std::error::Error>> {
        let payer = LocalPayer::from_hex(crate::dev::ANVIL_KEYS[0])?;
        let terms = upto_terms();
        let header = payer.answer(&Challenge::V2(terms.challenge_v2(None)), None, NOW)?;
        let credential = Credential::decode(header.version, &header.value)?;

        let verify = request(&credential, &terms);
        assert_eq!(verify.payment_requirements["amount"], "5000");
        assert_eq!(verify.payment_requirements["scheme"], "upto");

        let settle = upto_settlement(&credential, &terms, U256::from(1234u64))?;
        assert_eq!(settle.payment_requirements["amount"], "1234");
        assert_eq!(settle.payment_payload, credential.document);
        // Everything else is the verified requirement.
        let mut same = settle.payment_requirements.clone();
        same["amount"] = "5000".into();
        assert_eq!(same, verify.payment_requirements);

        assert!(upto_settlement(&credential, &terms, U256::ZERO).is_ok());
        assert!(upto_settlement(&credential, &terms, U256::from(5000u64)).is_ok());
        assert_eq!(
            upto_settlement(&credential, &terms, U256::from(5001u64)).err(),
            Some(UptoSettleError::ExceedsMaximum {
                actual: U256::from(5001u64),
                max: U256::from(5000u64)
            })
        );
        let mut exact = terms.clone();
        exact.scheme = Scheme::Exact;
        assert_eq!(
            upto_settlement(&credential, &exact, U256::ZERO).err(),
            Some(UptoSettleError::NotUpto)
        );
        Ok(())
    }
}
