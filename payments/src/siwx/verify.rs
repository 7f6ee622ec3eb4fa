//! The server's checks of a SIWX payload, in the order x402's `validateSIWxMessage` and
//! `verifySIWxSignature` make them, offline: the fields (version, type, chain, domain, URI,
//! time window), then the signature (EIP-191 over the rebuilt EIP-4361 text, recovered with
//! alloy and compared with the claimed address). Smart-contract wallets (EIP-1271/6492) need
//! a chain call and are not verified here: their signatures are refused.
//!
//! The nonce's single use is the caller's: [`VerifiedSiwx::nonce`] is what to claim, and
//! [`VerifiedSiwx::valid_until`] how long the claim must be kept.

use alloy_primitives::Address;

use super::message::eip4361;
use super::payload::{SignatureType, SiwxPayload};
use super::{EIP155, MAX_AGE_SECONDS};
use crate::eip3009;
use crate::rfc3339;
use crate::wire::HeaderError;

/// What the server expects of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectations {
    /// The request's host, without port (`domain` must equal it).
    pub domain: String,
    /// The resource's URI: `uri` must be of its origin (scheme and authority).
    pub uri: String,
    /// CAIP-2 chains accepted (`eip155:<id>`).
    pub chains: Vec<String>,
    /// Unix seconds.
    pub now: u64,
    /// How old `issuedAt` may be.
    pub max_age_seconds: u64,
    /// How far ahead of `now` `issuedAt` may be (clock skew between gateways); 0 by default,
    /// as x402's checks.
    pub clock_skew_seconds: u64,
}

impl Expectations {
    pub fn new(domain: &str, uri: &str, chains: &[&str], now: u64) -> Self {
        Expectations {
            domain: domain.into(),
            uri: uri.into(),
            chains: chains.iter().map(|chain| (*chain).to_owned()).collect(),
            now,
            max_age_seconds: MAX_AGE_SECONDS,
            clock_skew_seconds: 0,
        }
    }
}

/// Why a SIWX payload is refused. Messages quote nothing of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiwxError {
    #[error("SIGN-IN-WITH-X: {0}")]
    Header(#[from] HeaderError),
    #[error("SIWX version is not \"1\"")]
    Version,
    #[error("SIWX signature type is not eip191")]
    UnsupportedType,
    #[error("SIWX chain is not one this server accepts")]
    WrongChain,
    #[error("SIWX domain is not this server's")]
    DomainMismatch,
    #[error("SIWX URI is not of this resource's origin")]
    UriMismatch,
    #[error("SIWX field {0} is not valid")]
    Malformed(&'static str),
    #[error("SIWX message has expired")]
    Expired,
    #[error("SIWX message is not valid yet")]
    NotYetValid,
    #[error("SIWX message was issued too long ago")]
    TooOld,
    #[error("SIWX message is issued in the future")]
    IssuedInFuture,
    #[error("SIWX address is not an EIP-55 EVM address")]
    InvalidAddress,
    #[error("SIWX signature is not a 65-byte EOA signature")]
    BadSignature,
    #[error("SIWX signature was not made by the claimed address")]
    AddressMismatch,
}

/// A payload that passed: who signed in, and what to claim once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSiwx {
    /// The recovered signer (equal to the claimed address).
    pub address: Address,
    /// The EIP-155 chain id.
    pub chain_id: u64,
    /// The nonce to spend once.
    pub nonce: String,
    /// Unix seconds.
    pub issued_at: u64,
    /// Until when (Unix seconds) this payload would pass again: keep the spent nonce that long.
    pub valid_until: u64,
}

/// Checks `payload` against `expect`: the signed-in address, or why not.
pub fn verify(payload: &SiwxPayload, expect: &Expectations) -> Result<VerifiedSiwx, SiwxError> {
    if payload.version != "1" {
        return Err(SiwxError::Version);
    }
    if payload.kind != SignatureType::Eip191 {
        return Err(SiwxError::UnsupportedType);
    }
    if !expect.chains.contains(&payload.chain_id) {
        return Err(SiwxError::WrongChain);
    }
    let chain_id = evm_chain_id(&payload.chain_id).ok_or(SiwxError::WrongChain)?;
    if payload.domain != expect.domain {
        return Err(SiwxError::DomainMismatch);
    }
    match (origin(&payload.uri), origin(&expect.uri)) {
        (Some(theirs), Some(ours)) if theirs.eq_ignore_ascii_case(ours) => {}
        _ => return Err(SiwxError::UriMismatch),
    }
    check_text(payload)?;

    let now = expect.now;
    let issued_at = rfc3339::parse(&payload.issued_at).ok_or(SiwxError::Malformed("issuedAt"))?;
    if issued_at > now.saturating_add(expect.clock_skew_seconds) {
        return Err(SiwxError::IssuedInFuture);
    }
    if now.saturating_sub(issued_at) > expect.max_age_seconds {
        return Err(SiwxError::TooOld);
    }
    let mut valid_until = issued_at.saturating_add(expect.max_age_seconds);
    if let Some(text) = present(&payload.expiration_time) {
        let expires = rfc3339::parse(text).ok_or(SiwxError::Malformed("expirationTime"))?;
        if now >= expires {
            return Err(SiwxError::Expired);
        }
        valid_until = valid_until.min(expires);
    }
    if let Some(text) = present(&payload.not_before) {
        let not_before = rfc3339::parse(text).ok_or(SiwxError::Malformed("notBefore"))?;
        if now < not_before {
            return Err(SiwxError::NotYetValid);
        }
    }

    let claimed = parse_address(&payload.address)?;
    let signature =
        eip3009::parse_signature(&payload.signature).map_err(|_| SiwxError::BadSignature)?;
    let message = eip4361(&payload.info(), chain_id, claimed);
    let signer = signature
        .recover_address_from_msg(message.as_bytes())
        .map_err(|_| SiwxError::BadSignature)?;
    if signer != claimed {
        return Err(SiwxError::AddressMismatch);
    }
    Ok(VerifiedSiwx {
        address: signer,
        chain_id,
        nonce: payload.nonce.clone(),
        issued_at,
        valid_until,
    })
}

/// Reads the header and verifies it.
pub fn verify_header(header: &str, expect: &Expectations) -> Result<VerifiedSiwx, SiwxError> {
    verify(&SiwxPayload::decode(header)?, expect)
}

/// The number of `eip155:<digits>`.
pub(crate) fn evm_chain_id(caip2: &str) -> Option<u64> {
    let digits = caip2.strip_prefix(EIP155)?;
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `scheme://authority` of an absolute URI.
fn origin(uri: &str) -> Option<&str> {
    let (scheme, rest) = uri.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return None;
    }
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if authority_len == 0 {
        return None;
    }
    uri.get(..scheme.len() + 3 + authority_len)
}

/// JavaScript truthiness of an optional string (what `toMessage()` prints).
fn present(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|text| !text.is_empty())
}

/// What EIP-4361's grammar allows in each field and the message would otherwise misread: no
/// line breaks anywhere (a statement with one could pose as other fields), an alphanumeric
/// nonce of at least 8 characters.
fn check_text(payload: &SiwxPayload) -> Result<(), SiwxError> {
    let single_line = |text: &str| !text.chars().any(|c| c == '\n' || c == '\r');
    let mut fields: Vec<(&'static str, &str)> = vec![
        ("domain", &payload.domain),
        ("uri", &payload.uri),
        ("nonce", &payload.nonce),
    ];
    for (name, field) in [
        ("statement", &payload.statement),
        ("expirationTime", &payload.expiration_time),
        ("notBefore", &payload.not_before),
        ("requestId", &payload.request_id),
    ] {
        if let Some(text) = field {
            fields.push((name, text));
        }
    }
    for resource in payload.resources.iter().flatten() {
        fields.push(("resources", resource));
    }
    if let Some((name, _)) = fields.iter().find(|(_, text)| !single_line(text)) {
        return Err(SiwxError::Malformed(name));
    }
    if payload.domain.is_empty() {
        return Err(SiwxError::Malformed("domain"));
    }
    if payload.nonce.len() < 8 || !payload.nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(SiwxError::Malformed("nonce"));
    }
    Ok(())
}

/// A `0x` EVM address, in EIP-55 form or all one case (as siwe accepts and normalizes); a
/// mixed-case address with a wrong checksum is refused.
fn parse_address(text: &str) -> Result<Address, SiwxError> {
    let hex = text.strip_prefix("0x").ok_or(SiwxError::InvalidAddress)?;
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SiwxError::InvalidAddress);
    }
    let address: Address = text.parse().map_err(|_| SiwxError::InvalidAddress)?;
    let one_case = hex == hex.to_ascii_lowercase() || hex == hex.to_ascii_uppercase();
    if !one_case && address.to_checksum(None) != text {
        return Err(SiwxError::InvalidAddress);
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Real signatures made by other implementations: spruceid/siwe's
    /// `test/verification_positive.json` ("example message", and "recovery byte starting at
    /// 0", whose `v` is 0/1 rather than 27/28). Our message text must be theirs to the byte
    /// for the signer to come back.
    #[test]
    fn verifies_siwe_reference_vectors() -> TestResult {
        let vectors = [
            (
                "login.xyz",
                "0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
                "Sign-In With Ethereum Example Statement",
                "https://login.xyz",
                "bTyXgcQxn2htgkjJn",
                "2022-01-27T17:09:38.578Z",
                Some("2100-01-07T14:31:43.952Z"),
                "0xdc35c7f8ba2720df052e0092556456127f00f7707eaa8e3bbff7e56774e7f2e05a093cfc9e02964c33d86e8e066e221b7d153d27e5a2e97ccd5ca7d3f2ce06cb1b",
            ),
            (
                "www.tally.xyz",
                "0xc95EB884FE852e241D409234bfC7045CB9E31BD7",
                "Sign in with Ethereum to Tally",
                "https://tally.xyz",
                "15050747",
                "2022-06-30T14:08:51.382Z",
                None,
                "0x8c46b6eb8505939892d8e9b075f89f8277321b17b993151f37810cdda38cce6f4a85909d2b53e6a14629c74c0ac38bf4becde78ee5b2529812bf6cceaf7b2a2501",
            ),
        ];
        for (domain, address, statement, uri, nonce, issued_at, expires, signature) in vectors {
            let payload = SiwxPayload {
                domain: domain.into(),
                address: address.into(),
                statement: Some(statement.into()),
                uri: uri.into(),
                version: "1".into(),
                chain_id: "eip155:1".into(),
                kind: SignatureType::Eip191,
                nonce: nonce.into(),
                issued_at: issued_at.into(),
                expiration_time: expires.map(str::to_owned),
                not_before: None,
                request_id: None,
                resources: None,
                signature_scheme: None,
                signature: signature.into(),
            };
            let now = rfc3339::parse(issued_at).ok_or("timestamp")? + 10;
            let verified = verify(
                &payload,
                &Expectations::new(domain, uri, &["eip155:1"], now),
            )?;
            assert_eq!(verified.address.to_checksum(None), address);
            assert_eq!(verified.chain_id, 1);
        }
        Ok(())
    }

    #[test]
    fn reads_chain_ids_and_origins() {
        assert_eq!(evm_chain_id("eip155:84532"), Some(84532));
        for bad in [
            "eip155:",
            "eip155:-1",
            "eip155:1a",
            "solana:1",
            "eip155:99999999999999999999",
        ] {
            assert_eq!(evm_chain_id(bad), None, "{bad}");
        }
        assert_eq!(
            origin("https://a.example:8443/x?y#z"),
            Some("https://a.example:8443")
        );
        assert_eq!(origin("https://a.example"), Some("https://a.example"));
        assert_eq!(origin("https://a.example?x"), Some("https://a.example"));
        for bad in ["a.example/x", "https:///x", "://a", "ht tp://a/"] {
            assert_eq!(origin(bad), None, "{bad}");
        }
    }
}
