//! x402 payments, as the gateway, the dev facilitator and paying clients need them.
//!
//! What happens to a `PAYMENT-SIGNATURE` (or `X-PAYMENT`), in the order the gateway does it:
//!
//! - [`wire`]: the x402 v1 and v2 JSON documents (challenges, credentials, receipts,
//!   facilitator requests) and their base64 header encoding;
//! - [`network`]: the EVM networks we accept, their CAIP-2 ids and USDC contracts;
//! - [`amount`]: decimal USDC prices to atomic units and back;
//! - [`terms`]: what one route demands (scheme, network, asset, amount, payee), in one shape
//!   for v1 and v2;
//! - [`credential`]: a decoded payment header (`exact` or `upto`), with the replay key of its
//!   nonce;
//! - [`eip3009`]: the EIP-712 `TransferWithAuthorization` hash, recovery and signing (`exact`);
//! - [`permit2`]: the EIP-712 Permit2 `PermitWitnessTransferFrom` of x402's `upto` scheme;
//! - [`precheck`]: the offline checks done before any facilitator is asked;
//! - [`facilitator`]: the `/verify`, `/settle`, `/supported` contract, its HTTP client and the
//!   request builders (upto's settlement of the actual amount among them);
//! - [`payment_identifier`]: the `payment-identifier` extension, a caller's id that makes a
//!   paid request idempotent;
//! - [`payer`]: the paying side: answer a 402 with a signed credential from a local key;
//! - [`target`]: the paying side's guard: sign only for the requested origin and path, on
//!   known networks, for a bounded time.
//!
//! Beside x402, two more ways in:
//!
//! - [`mpp`]: the Machine Payments Protocol, the IETF "Payment" HTTP authentication scheme
//!   (`WWW-Authenticate: Payment` challenges with HMAC-bound ids, `Authorization: Payment`
//!   credentials, `Payment-Receipt`), with its `evm` `charge` method paid by EIP-3009;
//! - [`siwx`]: Sign-In-With-X (CAIP-122 / EIP-4361 signed with EIP-191), x402's
//!   `sign-in-with-x` extension: proof of a wallet, no payment.

pub mod amount;
pub mod credential;
pub mod dev;
pub mod eip3009;
pub mod facilitator;
pub mod mpp;
pub mod network;
pub mod payer;
pub mod payment_identifier;
pub mod permit2;
pub mod precheck;
mod rfc3339;
pub mod siwx;
pub mod target;
pub mod terms;
pub mod wire;

/// The address and amount types of every signature and price here (alloy's).
pub use alloy_primitives::{Address, U256};
pub use credential::{Credential, CredentialError, NonceKey, Payload, X402Version};
pub use facilitator::{Facilitator, FacilitatorError, HttpFacilitator};
pub use network::Network;
pub use payer::{LocalPayer, PayError};
pub use precheck::{Rejection, precheck};
pub use target::{Limits, Refusal, RequestTarget};
pub use terms::{Scheme, Terms};

/// Header of an x402 v2 challenge (on a 402).
pub const PAYMENT_REQUIRED: &str = "payment-required";
/// Header of an x402 v2 credential.
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
/// Header of an x402 v2 receipt.
pub const PAYMENT_RESPONSE: &str = "payment-response";
/// Header of an x402 v1 credential.
pub const X_PAYMENT: &str = "x-payment";
/// Header of an x402 v1 receipt.
pub const X_PAYMENT_RESPONSE: &str = "x-payment-response";

/// Seconds since the Unix epoch, the clock EIP-3009 validity windows count in. A clock before
/// 1970 reads as 0, which fails every validity window (closed, not open).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// Largest payment header accepted, in bytes: a credential is well under 2 KiB, so anything
/// much larger is refused before it is decoded.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
