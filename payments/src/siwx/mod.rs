//! Sign-In-With-X: a client proves control of a wallet by signing a CAIP-122 message, as
//! x402's `sign-in-with-x` extension carries it. EVM only here: the EIP-4361 ("Sign-In with
//! Ethereum") text, signed with EIP-191 (`personal_sign`), recovered with alloy.
//!
//! - [`payload`]: the `SIGN-IN-WITH-X` header (standard base64 of JSON) and the 402's
//!   `extensions["sign-in-with-x"]` (`info`, `supportedChains`, `schema`);
//! - [`message`]: the exact EIP-4361 text that is signed;
//! - [`verify`]: the server's checks (domain, URI, chain, time window, signature), giving the
//!   recovered address and the nonce;
//! - [`sign`]: the client's side: sign the 402's extension info with a local key.
//!
//! What it proves is wallet control, nothing more: that this address paid before (an
//! entitlement) is looked up by the gateway, and so is the nonce's single use (in Redis).
//!
//! # Where each format comes from
//!
//! coinbase/x402 at commit dd927a26: `specs/extensions/sign-in-with-x.md` (the header name,
//! the extension's `info` and `supportedChains`, the client payload fields, the EVM message
//! example, the verification rules: domain equal to the request's host, URI of the resource's
//! origin, `issuedAt` at most 5 minutes old and not in the future, `expirationTime` in the
//! future, `notBefore` in the past, nonce single use), and its TypeScript implementation in
//! `typescript/packages/extensions/src/sign-in-with-x/` (`types.ts` field names and the
//! `type` / `signatureScheme` values, `encode.ts` / `parse.ts` base64 of `JSON.stringify`,
//! `server.ts` how the server fills `info`: a 32-hex-character nonce, `issuedAt` from
//! `toISOString()`, `resources: [uri]`; `client.ts` / `hooks.ts` the first `supportedChains`
//! entry of type `eip191`; `evm.ts` the message built by the `SiweMessage` class of
//! `@signinwithethereum/siwe` and checked with viem's `verifyMessage`, EIP-191).
//! The message text follows that class, `toMessage()` in signinwithethereum/siwe at commit
//! 8baec43 (`packages/siwe/lib/client.ts`), to the byte: the address in EIP-55 form, a blank
//! line then the statement then a blank line when there is a statement, two blank lines when
//! there is none, optional lines only when set (`Request ID` even when empty, `Resources:`
//! even with no resources), as EIP-4361's ABNF has it.

pub mod message;
pub mod payload;
pub mod sign;
pub mod verify;

pub use payload::{SignatureType, SiwxExtension, SiwxInfo, SiwxPayload, SupportedChain};
pub use sign::SiwxSignError;
pub use verify::{Expectations, SiwxError, VerifiedSiwx, verify, verify_header};

/// The request header and the 402 extension key (headers are read without regard to case).
pub const SIGN_IN_WITH_X: &str = "sign-in-with-x";
/// How old `issuedAt` may be, by default (the extension's 5 minutes).
pub const MAX_AGE_SECONDS: u64 = 300;
/// The CAIP-2 namespace of EVM chains.
pub const EIP155: &str = "eip155:";
