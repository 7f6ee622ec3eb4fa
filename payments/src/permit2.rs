//! The `upto` scheme's authorization: a Uniswap Permit2 `PermitWitnessTransferFrom` under
//! EIP-712, exactly as @x402/evm 2.27.0 signs and verifies it (`uptoPermit2WitnessTypes`):
//! the payer permits x402's upto proxy ([`UPTO_PROXY_ADDRESS`]) to move at most `amount` of
//! the token, and the witness binds the payee, the one facilitator that may settle and a
//! start time. The facilitator later settles any amount up to that maximum. All hashing and
//! curve work is alloy's.

use alloy_primitives::{Address, B256, Signature, U256, address};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct, eip712_domain, sol};

use crate::eip3009::AuthorizationError;
use crate::network::Network;
use crate::wire::upto::{Permit2AuthorizationWire, TokenPermissionsWire, WitnessWire};

/// Uniswap's Permit2, the same address on every EVM chain: the EIP-712 verifying contract,
/// and the keeper of the nonces.
pub const PERMIT2_ADDRESS: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");

/// x402's upto proxy (`x402UptoPermit2ProxyAddress`): the permit's only spender. It moves the
/// settled amount to the witness's payee, and only when the witness's facilitator calls it.
pub const UPTO_PROXY_ADDRESS: Address = address!("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The EIP-712 domain name of Permit2 (it has no version).
pub const PERMIT2_NAME: &str = "Permit2";

sol! {
    /// The token and the most that may be moved.
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    /// x402 upto's witness: who is paid, who may settle, from when.
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// What the payer signs (Permit2's `permitWitnessTransferFrom` with the witness above).
    struct PermitWitnessTransferFrom {
        TokenPermissions permitted;
        address spender;
        uint256 nonce;
        uint256 deadline;
        Witness witness;
    }
}

/// An upto permit, typed; the wire's nesting (`permitted.*`, `witness.*`) flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UptoAuthorization {
    /// The payer (Permit2's owner).
    pub from: Address,
    /// `permitted.token`.
    pub token: Address,
    /// `permitted.amount`: the maximum, atomic units.
    pub amount: U256,
    pub spender: Address,
    /// Permit2 nonces are unordered uint256s, spent once per (chain, owner).
    pub nonce: U256,
    /// Unix seconds: usable up to and including this second.
    pub deadline: u64,
    /// `witness.to`: the payee.
    pub to: Address,
    /// `witness.facilitator`: the only settler.
    pub facilitator: Address,
    /// `witness.validAfter`, Unix seconds: usable from this second on.
    pub valid_after: u64,
}

/// Permit2's EIP-712 domain on `network`'s chain.
pub fn domain(network: &Network) -> Eip712Domain {
    eip712_domain! {
        name: PERMIT2_NAME,
        chain_id: network.chain_id,
        verifying_contract: PERMIT2_ADDRESS,
    }
}

impl UptoAuthorization {
    pub fn from_wire(wire: &Permit2AuthorizationWire) -> Result<Self, AuthorizationError> {
        Ok(UptoAuthorization {
            from: address(&wire.from, "from")?,
            token: address(&wire.permitted.token, "permitted.token")?,
            amount: decimal(&wire.permitted.amount, "permitted.amount")?,
            spender: address(&wire.spender, "spender")?,
            nonce: decimal(&wire.nonce, "nonce")?,
            deadline: seconds(&wire.deadline, "deadline")?,
            to: address(&wire.witness.to, "witness.to")?,
            facilitator: address(&wire.witness.facilitator, "witness.facilitator")?,
            valid_after: seconds(&wire.witness.valid_after, "witness.validAfter")?,
        })
    }

    /// As @x402/evm writes it: checksummed addresses, decimal numbers.
    pub fn to_wire(&self) -> Permit2AuthorizationWire {
        Permit2AuthorizationWire {
            from: self.from.to_checksum(None),
            permitted: TokenPermissionsWire {
                token: self.token.to_checksum(None),
                amount: self.amount.to_string(),
            },
            spender: self.spender.to_checksum(None),
            nonce: self.nonce.to_string(),
            deadline: self.deadline.to_string(),
            witness: WitnessWire {
                to: self.to.to_checksum(None),
                facilitator: self.facilitator.to_checksum(None),
                valid_after: self.valid_after.to_string(),
            },
        }
    }

    /// The nonce as 32 big-endian bytes (the replay key's spelling).
    pub fn nonce_bytes(&self) -> B256 {
        B256::from(self.nonce)
    }

    fn typed(&self) -> PermitWitnessTransferFrom {
        PermitWitnessTransferFrom {
            permitted: TokenPermissions {
                token: self.token,
                amount: self.amount,
            },
            spender: self.spender,
            nonce: self.nonce,
            deadline: U256::from(self.deadline),
            witness: Witness {
                to: self.to,
                facilitator: self.facilitator,
                validAfter: U256::from(self.valid_after),
            },
        }
    }

    /// The EIP-712 hash the payer signs.
    pub fn signing_hash(&self, network: &Network) -> B256 {
        self.typed().eip712_signing_hash(&domain(network))
    }

    /// The address that signed `signature` over this permit.
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

fn address(text: &str, field: &'static str) -> Result<Address, AuthorizationError> {
    text.trim()
        .parse::<Address>()
        .map_err(|_| AuthorizationError::Field(field))
}

/// Plain decimal digits only: one number, one spelling (no hex, sign or exponent).
fn digits<'a>(text: &'a str, field: &'static str) -> Result<&'a str, AuthorizationError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthorizationError::Field(field));
    }
    Ok(trimmed)
}

fn decimal(text: &str, field: &'static str) -> Result<U256, AuthorizationError> {
    U256::from_str_radix(digits(text, field)?, 10).map_err(|_| AuthorizationError::Field(field))
}

fn seconds(text: &str, field: &'static str) -> Result<u64, AuthorizationError> {
    digits(text, field)?
        .parse::<u64>()
        .map_err(|_| AuthorizationError::Field(field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eip3009::{parse_signature, signature_hex};

    /// Anvil's well-known account #0.
    const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    fn signer() -> PrivateKeySigner {
        match ANVIL_KEY_0.parse() {
            Ok(signer) => signer,
            Err(err) => panic!("{err}"),
        }
    }

    fn network() -> &'static Network {
        match Network::find("base-sepolia") {
            Some(network) => network,
            None => panic!("base-sepolia is known"),
        }
    }

    fn permit() -> UptoAuthorization {
        UptoAuthorization {
            from: signer().address(),
            token: network().usdc,
            amount: U256::from(50_000u64),
            spender: UPTO_PROXY_ADDRESS,
            nonce: U256::from(123_456_789u64),
            deadline: 2_000_000_000,
            to: Address::repeat_byte(0x22),
            facilitator: Address::repeat_byte(0x33),
            valid_after: 0,
        }
    }

    #[test]
    fn the_type_string_is_x402s() {
        use alloy_sol_types::SolStruct;
        assert_eq!(
            PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,\
             uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)\
             Witness(address to,address facilitator,uint256 validAfter)"
        );
    }

    /// Vectors computed independently with viem 2.58.8 (@x402/evm's own path): `hashTypedData`
    /// and `privateKeyToAccount(ANVIL_KEY_0).signTypedData` of [`permit`] with
    /// `uptoPermit2WitnessTypes` on base-sepolia. Both sides sign deterministically (RFC 6979),
    /// so the signature must be byte-identical too; any drift in the types, the domain or the
    /// encoding changes both.
    #[test]
    fn the_signing_hash_and_signature_match_viem() {
        assert_eq!(permit().signing_hash(network()).to_string(), VIEM_HASH);
        let signature = permit()
            .sign(network(), &signer())
            .map(|s| signature_hex(&s));
        assert_eq!(signature.as_deref(), Some(VIEM_SIGNATURE));
    }

    const VIEM_HASH: &str = "0xdd48c465aabae44e6cd2e52b377b630ada45ae1411edae461f917e2ffee6e358";
    const VIEM_SIGNATURE: &str = "0xffcb8998ec23c703113af1f41506493afe8f96c469e6fe53c1395a00053d9b34\
                                  09e919fd454770ca615b8b72378313b96fc84acd3c2b56a3b45adbff6c2a24d11b";

    #[test]
    fn signs_and_recovers_and_any_change_recovers_someone_else() {
        let permit = permit();
        let Some(signature) = permit.sign(network(), &signer()) else {
            panic!("signs")
        };
        let parsed = match parse_signature(&signature_hex(&signature)) {
            Ok(parsed) => parsed,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(permit.recover(network(), &parsed), Some(signer().address()));
        let tampered: [(&str, UptoAuthorization); 8] = [
            (
                "amount",
                UptoAuthorization {
                    amount: U256::from(50_001u64),
                    ..permit.clone()
                },
            ),
            (
                "token",
                UptoAuthorization {
                    token: Address::repeat_byte(1),
                    ..permit.clone()
                },
            ),
            (
                "spender",
                UptoAuthorization {
                    spender: Address::repeat_byte(2),
                    ..permit.clone()
                },
            ),
            (
                "nonce",
                UptoAuthorization {
                    nonce: U256::from(1u64),
                    ..permit.clone()
                },
            ),
            (
                "deadline",
                UptoAuthorization {
                    deadline: 2_000_000_001,
                    ..permit.clone()
                },
            ),
            (
                "to",
                UptoAuthorization {
                    to: Address::repeat_byte(3),
                    ..permit.clone()
                },
            ),
            (
                "facilitator",
                UptoAuthorization {
                    facilitator: Address::repeat_byte(4),
                    ..permit.clone()
                },
            ),
            (
                "validAfter",
                UptoAuthorization {
                    valid_after: 1,
                    ..permit.clone()
                },
            ),
        ];
        for (field, other) in tampered {
            assert_ne!(
                other.recover(network(), &parsed),
                Some(signer().address()),
                "{field}"
            );
        }
        let Some(mainnet) = Network::find("base") else {
            panic!("base is known")
        };
        assert_ne!(permit.recover(mainnet, &parsed), Some(signer().address()));
    }

    #[test]
    fn the_wire_round_trips_and_refuses_malformed_fields() {
        let permit = permit();
        let wire = permit.to_wire();
        assert_eq!(wire.nonce, "123456789");
        assert_eq!(wire.spender, "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");
        assert_eq!(UptoAuthorization::from_wire(&wire), Ok(permit));
        let broken = |edit: fn(&mut Permit2AuthorizationWire)| {
            let mut wire = wire.clone();
            edit(&mut wire);
            UptoAuthorization::from_wire(&wire)
        };
        for (field, result) in [
            ("from", broken(|w| w.from = "0x12".into())),
            (
                "permitted.amount",
                broken(|w| w.permitted.amount = "-1".into()),
            ),
            (
                "permitted.amount",
                broken(|w| w.permitted.amount = "0x10".into()),
            ),
            ("nonce", broken(|w| w.nonce = "0x01".into())),
            ("nonce", broken(|w| w.nonce = "1".repeat(80))),
            ("deadline", broken(|w| w.deadline = "1e9".into())),
            ("witness.to", broken(|w| w.witness.to = String::new())),
            (
                "witness.validAfter",
                broken(|w| w.witness.valid_after = "".into()),
            ),
        ] {
            assert_eq!(result, Err(AuthorizationError::Field(field)), "{field}");
        }
    }

    #[test]
    fn the_permit2_nonce_space_is_no_tokens() {
        // Replay keys name the contract keeping the nonce: Permit2's never equals a token's.
        for network in &crate::network::NETWORKS {
            assert_ne!(network.usdc, PERMIT2_ADDRESS, "{}", network.name);
        }
    }
}
