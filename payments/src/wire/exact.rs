//! The `exact` scheme's EVM payload: an EIP-3009 `TransferWithAuthorization` and its signature,
//! as strings (addresses and the nonce in hex, amounts and times in decimal).

use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactEvmPayload {
    /// 65-byte secp256k1 signature, `0x`-prefixed hex.
    pub signature: String,
    pub authorization: AuthorizationWire,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationWire {
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    /// 32 bytes, `0x`-prefixed hex: chosen by the payer, spent once per (asset, payer).
    pub nonce: String,
}

impl std::fmt::Debug for ExactEvmPayload {
    /// The signature is what makes the authorization spendable: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactEvmPayload")
            .field("signature", &"<redacted>")
            .field("authorization", &self.authorization)
            .finish()
    }
}
