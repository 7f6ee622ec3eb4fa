//! The `upto` scheme's EVM payload: a Permit2 `PermitWitnessTransferFrom` for at most the
//! price, spendable only by x402's upto proxy on behalf of one facilitator, and its signature.
//! As @x402/evm writes it: addresses in hex, the amount, nonce, deadline and `validAfter` in
//! decimal.

use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UptoEvmPayload {
    /// 65-byte secp256k1 signature, `0x`-prefixed hex.
    pub signature: String,
    pub permit2_authorization: Permit2AuthorizationWire,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2AuthorizationWire {
    /// The payer (Permit2's `owner`).
    pub from: String,
    pub permitted: TokenPermissionsWire,
    /// x402's upto proxy: the only contract that may spend the permit.
    pub spender: String,
    /// A uint256 in decimal, chosen by the payer: spent once per (Permit2, payer).
    pub nonce: String,
    /// Unix seconds, decimal: the permit is void after it.
    pub deadline: String,
    pub witness: WitnessWire,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenPermissionsWire {
    pub token: String,
    /// The maximum, atomic units, decimal.
    pub amount: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WitnessWire {
    /// The payee.
    pub to: String,
    /// The only facilitator that may settle it.
    pub facilitator: String,
    /// Unix seconds, decimal: not valid before.
    pub valid_after: String,
}

impl std::fmt::Debug for UptoEvmPayload {
    /// The signature is what makes the permit spendable: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UptoEvmPayload")
            .field("signature", &"<redacted>")
            .field("permit2Authorization", &self.permit2_authorization)
            .finish()
    }
}
