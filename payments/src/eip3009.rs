//! EIP-3009 `TransferWithAuthorization` under EIP-712, as USDC defines it: the typed struct,
//! its signing hash in the token's domain, signature recovery and signing. All hashing and
//! curve work is alloy's.

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct, eip712_domain, sol};

use crate::network::Network;
use crate::wire::exact::AuthorizationWire;

sol! {
    /// The EIP-712 type USDC's `transferWithAuthorization` checks.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// A transfer authorization, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub from: Address,
    pub to: Address,
    /// Atomic units.
    pub value: U256,
    /// Unix seconds: valid strictly after `valid_after` and strictly before `valid_before`.
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorizationError {
    #[error("authorization.{0} is not valid")]
    Field(&'static str),
    #[error("signature is not a 65-byte hex signature")]
    Signature,
}

/// The token contract's EIP-712 domain.
pub fn domain(network: &Network) -> Eip712Domain {
    eip712_domain! {
        name: network.usdc_name,
        version: network.usdc_version,
        chain_id: network.chain_id,
        verifying_contract: network.usdc,
    }
}

impl Authorization {
    pub fn from_wire(wire: &AuthorizationWire) -> Result<Self, AuthorizationError> {
        let address = |text: &str, field| {
            text.parse::<Address>()
                .map_err(|_| AuthorizationError::Field(field))
        };
        let seconds = |text: &str, field| {
            let trimmed = text.trim();
            if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
                return Err(AuthorizationError::Field(field));
            }
            trimmed
                .parse::<u64>()
                .map_err(|_| AuthorizationError::Field(field))
        };
        let value = wire.value.trim();
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AuthorizationError::Field("value"));
        }
        Ok(Authorization {
            from: address(&wire.from, "from")?,
            to: address(&wire.to, "to")?,
            value: U256::from_str_radix(value, 10)
                .map_err(|_| AuthorizationError::Field("value"))?,
            valid_after: seconds(&wire.valid_after, "validAfter")?,
            valid_before: seconds(&wire.valid_before, "validBefore")?,
            nonce: wire
                .nonce
                .parse::<B256>()
                .map_err(|_| AuthorizationError::Field("nonce"))?,
        })
    }

    pub fn to_wire(&self) -> AuthorizationWire {
        AuthorizationWire {
            from: self.from.to_checksum(None),
            to: self.to.to_checksum(None),
            value: self.value.to_string(),
            valid_after: self.valid_after.to_string(),
            valid_before: self.valid_before.to_string(),
            nonce: self.nonce.to_string(),
        }
    }

    fn typed(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: U256::from(self.valid_after),
            validBefore: U256::from(self.valid_before),
            nonce: self.nonce,
        }
    }

    /// The EIP-712 hash the payer signs.
    pub fn signing_hash(&self, network: &Network) -> B256 {
        self.typed().eip712_signing_hash(&domain(network))
    }

    /// The address that signed `signature` over this authorization.
    pub fn recover(&self, network: &Network, signature: &Signature) -> Option<Address> {
        signature
            .recover_address_from_prehash(&self.signing_hash(network))
            .ok()
    }

    /// Signs with a local key (the paying client and the tests).
    pub fn sign(&self, network: &Network, signer: &PrivateKeySigner) -> Option<Signature> {
        signer.sign_hash_sync(&self.signing_hash(network)).ok()
    }
}

/// A `0x`-prefixed 65-byte hex signature.
pub fn parse_signature(text: &str) -> Result<Signature, AuthorizationError> {
    let hex = text.trim();
    let hex = hex.strip_prefix("0x").unwrap_or(hex);
    if hex.len() != 130 {
        return Err(AuthorizationError::Signature);
    }
    let mut bytes = [0u8; 65];
    for (index, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let pair = std::str::from_utf8(chunk).map_err(|_| AuthorizationError::Signature)?;
        bytes[index] = u8::from_str_radix(pair, 16).map_err(|_| AuthorizationError::Signature)?;
    }
    Signature::from_raw(&bytes).map_err(|_| AuthorizationError::Signature)
}

/// The signature as x402 writes it: `0x` and 65 bytes of hex (r, s, v with v = 27 or 28).
pub fn signature_hex(signature: &Signature) -> String {
    alloy_primitives::hex::encode_prefixed(signature.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::Network;

    /// Anvil's well-known account #0.
    const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    #[test]
    fn signs_and_recovers_with_anvil_key() {
        let signer: PrivateKeySigner = match ANVIL_KEY_0.parse() {
            Ok(signer) => signer,
            Err(err) => panic!("{err}"),
        };
        let Some(network) = Network::find("base-sepolia") else {
            panic!("base-sepolia is known")
        };
        let auth = Authorization {
            from: signer.address(),
            to: Address::repeat_byte(0x11),
            value: U256::from(1000u64),
            valid_after: 0,
            valid_before: 2_000_000_000,
            nonce: B256::repeat_byte(7),
        };
        let Some(signature) = auth.sign(network, &signer) else {
            panic!("signs")
        };
        let text = signature_hex(&signature);
        assert_eq!(text.len(), 132);
        let parsed = match parse_signature(&text) {
            Ok(parsed) => parsed,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(auth.recover(network, &parsed), Some(signer.address()));
        assert_eq!(
            signer.address().to_checksum(None),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );

        // Any change to the terms recovers someone else.
        let mut other = auth.clone();
        other.value = U256::from(1001u64);
        assert_ne!(other.recover(network, &parsed), Some(signer.address()));
        let Some(mainnet) = Network::find("base") else {
            panic!("base is known")
        };
        assert_ne!(auth.recover(mainnet, &parsed), Some(signer.address()));

        let wire = auth.to_wire();
        assert_eq!(Authorization::from_wire(&wire), Ok(auth));
    }

    #[test]
    fn refuses_malformed_fields() {
        let good = AuthorizationWire {
            from: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            to: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            value: "1".into(),
            valid_after: "0".into(),
            valid_before: "10".into(),
            nonce: format!("0x{}", "00".repeat(32)),
        };
        assert!(Authorization::from_wire(&good).is_ok());
        for (field, broken) in [
            (
                "from",
                AuthorizationWire {
                    from: "0x12".into(),
                    ..good.clone()
                },
            ),
            (
                "value",
                AuthorizationWire {
                    value: "-1".into(),
                    ..good.clone()
                },
            ),
            (
                "value",
                AuthorizationWire {
                    value: "0x10".into(),
                    ..good.clone()
                },
            ),
            (
                "validBefore",
                AuthorizationWire {
                    valid_before: "1e9".into(),
                    ..good.clone()
                },
            ),
            (
                "nonce",
                AuthorizationWire {
                    nonce: "0x00".into(),
                    ..good.clone()
                },
            ),
        ] {
            assert_eq!(
                Authorization::from_wire(&broken),
                Err(AuthorizationError::Field(field))
            );
        }
        assert!(parse_signature("0x1234").is_err());
        assert!(parse_signature(&format!("0x{}", "zz".repeat(65))).is_err());
    }
}
