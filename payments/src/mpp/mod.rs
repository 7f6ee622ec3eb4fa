//! MPP, the Machine Payments Protocol: the IETF "Payment" HTTP authentication scheme
//! (draft-ryan-httpauth-payment), with its `charge` intent and its `evm` method paid by an
//! EIP-3009 authorization.
//!
//! The flow, and the module of each step:
//!
//! - [`challenge`]: the server's `402` + `WWW-Authenticate: Payment id=…, realm=…, method=…,
//!   intent=…, request=…, expires=…, opaque=…`, its HMAC-bound `id` (unique: `opaque` carries a
//!   random per-challenge nonce), and the header written safely;
//! - [`params`]: reading a `WWW-Authenticate` value (several challenges, other schemes) on the
//!   paying side;
//! - [`credential`]: the client's `Authorization: Payment <base64url JSON>`, read strictly;
//! - [`verify`]: a credential's echoed challenge checked against the secret and the route;
//! - [`evm`]: the `evm` method's `charge` request and its `type="authorization"` payload, checked
//!   offline (recipient, amount, asset, chain, challenge-bound nonce, signature);
//! - [`receipt`]: the `Payment-Receipt` header;
//! - [`problem`]: the problem+json types every rejection maps to;
//! - [`pay`]: the paying side: answer a Payment challenge with a local key.
//!
//! # Where each format comes from
//!
//! The specs are tempoxyz/mpp-specs at commit f9506cd; the client that sends what we read is
//! wevm/mppx (the `mppx` npm package) at commit d343aae7.
//!
//! - `specs/core/draft-httpauth-payment-00.md`: challenge parameters ("Required Parameters",
//!   "Optional Parameters": `id`, `realm`, `method`, `intent`, `request`, `digest`, `expires`,
//!   `description`, `opaque`); `request` and `opaque` are base64url **without padding** of the
//!   **JCS (RFC 8785)** JSON; "Recommended: HMAC-SHA256 Binding": `id` =
//!   base64url-nopad(HMAC-SHA256(secret, realm|method|intent|request|expires|digest|opaque)),
//!   seven fixed slots, absent ones empty; "Credentials": `Payment` 1*SP base64url-nopad of
//!   `{challenge, source?, payload}`; "Payment-Receipt Header": base64url-nopad of `{status:
//!   "success", method, timestamp, reference}`; "Error Codes": problem types under
//!   `https://paymentauth.org/problems/`; "Caching": `Cache-Control: no-store` on a 402,
//!   `private` with a receipt.
//! - `specs/intents/draft-payment-intent-charge-00.md`: the shared `request` fields (`amount`
//!   in base units as a string, `currency`, `recipient`, `description`, `externalId`,
//!   `methodDetails`); expiry only in the `expires` auth-param.
//! - `specs/methods/evm/draft-evm-charge-00.md`: method `evm`; `methodDetails.chainId`
//!   (number), `credentialTypes`, `decimals`, `splits`; the `type="authorization"` payload
//!   `{type, from, to, value, validAfter, validBefore, nonce, signature}`; its nonce is the
//!   `challengeHash = keccak256(abi.encodePacked(challenge.id, challenge.realm))`, i.e. the
//!   keccak of the id's bytes followed by the realm's (the same binding our reference note
//!   gives); the receipt adds `challengeId`, `chainId` and an optional `externalId`.
//! - mppx `src/Challenge.ts` (header order `id, realm, method, intent, request, description,
//!   digest, expires, opaque`; values always quoted; CR/LF refused; HMAC test vectors, which
//!   our tests replay), `src/Credential.ts`, `src/Receipt.ts`, `src/Errors.ts` (titles, and an
//!   expired challenge answered as `payment-expired`), `src/Expires.ts` (`expires` required when
//!   verifying), `src/evm/Types.ts`, `src/evm/Methods.ts` (the request shape: `credentialTypes:
//!   ["authorization"]`, `decimals`, checksummed addresses), `src/evm/client/Charge.ts`
//!   (`validAfter` "0", `validBefore` = the challenge's `expires`, `source` =
//!   `did:pkh:eip155:<chainId>:<address>`), `src/evm/server/Charge.ts` (the offline checks).
//!
//! Where the spec and mppx differ, mppx is followed, since it is what clients send: the EVM
//! spec lists `methodDetails.permit2Address` as required "default: canonical address", mppx
//! omits it unless configured, and so do we (we accept only `authorization`, which never uses
//! Permit2); the core spec's status table files an expired challenge under `invalid-challenge`
//! while its error table and mppx use `payment-expired`, which we use.
//!
//! Never logged or printed here: the challenge secret, credentials, signatures (the `Debug`
//! of each redacts them).

pub mod challenge;
pub mod credential;
pub mod evm;
pub mod params;
pub mod pay;
pub mod problem;
pub mod receipt;
pub mod verify;

pub use challenge::{Challenge, ChallengeError, ChallengeParams, ChallengeSecret};
pub use credential::{CredentialError, PaymentCredential};
pub use evm::{ChargeRejection, VerifiedCharge, charge_params, verify_authorization_header};
pub use pay::{MppPayError, MppPayment};
pub use problem::Problem;
pub use receipt::{Receipt, ReceiptError};
pub use verify::{ChallengeRejection, MppRejection, verify_challenge};

/// The authentication scheme's name (compared without regard to case when read).
pub const SCHEME: &str = "Payment";
/// Header of a challenge (on a 402).
pub const WWW_AUTHENTICATE: &str = "www-authenticate";
/// Header of a credential.
pub const AUTHORIZATION: &str = "authorization";
/// Header of a receipt (on a 2xx only).
pub const PAYMENT_RECEIPT: &str = "payment-receipt";
/// `Cache-Control` of every 402 carrying a Payment challenge.
pub const CACHE_CONTROL_CHALLENGE: &str = "no-store";
/// `Cache-Control` of every response carrying a `Payment-Receipt`.
pub const CACHE_CONTROL_RECEIPT: &str = "private";
/// The `charge` intent, the only one issued here.
pub const INTENT_CHARGE: &str = "charge";

/// Largest `Authorization` credential read, in bytes, checked before anything is decoded (the
/// spec asks servers to take at least 4 KB; an EVM authorization credential is about 1.5 KB).
pub const MAX_CREDENTIAL_BYTES: usize = crate::MAX_HEADER_BYTES;
/// Largest `WWW-Authenticate` value read by the paying side (the spec asks servers to keep a
/// challenge under 8 KB; a value may hold several).
pub const MAX_CHALLENGE_HEADER_BYTES: usize = 32 * 1024;
/// Largest `request` parameter read by the paying side (mppx's bound).
pub const MAX_REQUEST_PARAM_BYTES: usize = 16 * 1024;

/// base64url without padding, as every MPP header value and parameter is written; padding is
/// tolerated when read (it changes nothing that is checked: a bound `request` with padding
/// fails its HMAC anyway).
pub(crate) mod b64 {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

    pub(crate) const URL_NO_PAD: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );

    pub(crate) fn encode(bytes: &[u8]) -> String {
        URL_NO_PAD.encode(bytes)
    }

    /// `None` unless `text` is base64url (alphabet `A-Z a-z 0-9 - _`, optional `=` padding).
    pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
        let body = text.trim_end_matches('=');
        if text.len() - body.len() > 2
            || !body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        URL_NO_PAD.decode(text).ok()
    }
}
