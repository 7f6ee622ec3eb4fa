//! The SIWX documents: what a server puts in its 402 (`extensions["sign-in-with-x"]`) and what
//! a client sends back in the `SIGN-IN-WITH-X` header (standard base64 of the JSON, like every
//! x402 header; read with the bounds and errors of [`crate::wire`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::SIGN_IN_WITH_X;
use crate::wire::{self, HeaderError};

/// CAIP-122 signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureType {
    /// EVM `personal_sign`, the only one verified here.
    #[serde(rename = "eip191")]
    Eip191,
    /// Solana (refused by [`super::verify`]).
    #[serde(rename = "ed25519")]
    Ed25519,
}

/// A hint for the client's signing UX (informational).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureScheme {
    #[serde(rename = "eip191")]
    Eip191,
    #[serde(rename = "eip1271")]
    Eip1271,
    #[serde(rename = "eip6492")]
    Eip6492,
    #[serde(rename = "siws")]
    Siws,
}

/// The message fields the server declares (`info`), shared by every supported chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiwxInfo {
    pub domain: String,
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// Always "1".
    pub version: String,
    pub nonce: String,
    /// RFC 3339.
    pub issued_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

/// One way to sign in the server accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedChain {
    /// CAIP-2, e.g. `eip155:84532`.
    pub chain_id: String,
    #[serde(rename = "type")]
    pub kind: SignatureType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<SignatureScheme>,
}

/// `extensions["sign-in-with-x"]` of a 402.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiwxExtension {
    pub info: SiwxInfo,
    pub supported_chains: Vec<SupportedChain>,
    /// The JSON Schema of the client's payload ([`SiwxExtension::schema`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

impl SiwxExtension {
    /// What a server declares for one challenge: a fresh random nonce (32 hex characters,
    /// as x402's server makes it), `issuedAt` = `now`, `expirationTime` = `now + valid_for`
    /// when given, `resources` = `[uri]`, every chain in `chains` (CAIP-2) as `eip191`.
    pub fn declare(
        domain: &str,
        uri: &str,
        statement: Option<&str>,
        chains: &[&str],
        now: u64,
        valid_for: Option<u64>,
    ) -> Option<Self> {
        let nonce = alloy_primitives::hex::encode(alloy_primitives::FixedBytes::<16>::random());
        Self::declare_with_nonce(domain, uri, statement, chains, now, valid_for, &nonce)
    }

    /// [`SiwxExtension::declare`] with a chosen nonce. `None` when a time is out of range.
    pub fn declare_with_nonce(
        domain: &str,
        uri: &str,
        statement: Option<&str>,
        chains: &[&str],
        now: u64,
        valid_for: Option<u64>,
        nonce: &str,
    ) -> Option<Self> {
        let expiration_time = match valid_for {
            Some(seconds) => Some(crate::rfc3339::format_millis(now.checked_add(seconds)?)?),
            None => None,
        };
        Some(SiwxExtension {
            info: SiwxInfo {
                domain: domain.into(),
                uri: uri.into(),
                statement: statement.map(str::to_owned),
                version: "1".into(),
                nonce: nonce.into(),
                issued_at: crate::rfc3339::format_millis(now)?,
                expiration_time,
                not_before: None,
                request_id: None,
                resources: Some(vec![uri.into()]),
            },
            supported_chains: chains
                .iter()
                .map(|chain| SupportedChain {
                    chain_id: (*chain).into(),
                    kind: SignatureType::Eip191,
                    signature_scheme: None,
                })
                .collect(),
            schema: Some(Self::schema()),
        })
    }

    /// The extension in a 402's `extensions` map, if there (and readable).
    pub fn from_extensions(extensions: &Map<String, Value>) -> Option<Result<Self, String>> {
        let value = extensions.get(SIGN_IN_WITH_X)?;
        Some(serde_json::from_value(value.clone()).map_err(|err| wire::describe(&err)))
    }

    /// The JSON Schema of the client's payload, as x402's `buildSIWxSchema()` writes it.
    pub fn schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "domain": {"type": "string"},
                "address": {"type": "string"},
                "statement": {"type": "string"},
                "uri": {"type": "string", "format": "uri"},
                "version": {"type": "string"},
                "chainId": {"type": "string"},
                "type": {"type": "string"},
                "nonce": {"type": "string"},
                "issuedAt": {"type": "string", "format": "date-time"},
                "expirationTime": {"type": "string", "format": "date-time"},
                "notBefore": {"type": "string", "format": "date-time"},
                "requestId": {"type": "string"},
                "resources": {"type": "array", "items": {"type": "string", "format": "uri"}},
                "signature": {"type": "string"}
            },
            "required": [
                "domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt",
                "signature"
            ]
        })
    }
}

/// The client's proof, the `SIGN-IN-WITH-X` header's JSON. Fields in the order x402's client
/// writes them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiwxPayload {
    pub domain: String,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    pub uri: String,
    pub version: String,
    /// CAIP-2, e.g. `eip155:84532`.
    pub chain_id: String,
    #[serde(rename = "type")]
    pub kind: SignatureType,
    pub nonce: String,
    pub issued_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<SignatureScheme>,
    /// `0x` and 65 bytes of hex for an EOA.
    pub signature: String,
}

impl std::fmt::Debug for SiwxPayload {
    /// The signature is a bearer proof until its nonce is spent: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwxPayload")
            .field("domain", &self.domain)
            .field("address", &self.address)
            .field("uri", &self.uri)
            .field("chain_id", &self.chain_id)
            .field("nonce", &self.nonce)
            .field("issued_at", &self.issued_at)
            .field("signature", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl SiwxPayload {
    /// Reads a `SIGN-IN-WITH-X` header value: bounded (8 KiB, checked before decoding),
    /// standard base64 (padding optional), JSON of this shape (unknown fields ignored).
    pub fn decode(header: &str) -> Result<Self, HeaderError> {
        wire::decode(header)
    }

    /// The header value.
    pub fn encode(&self) -> String {
        wire::encode(self)
    }

    /// The message fields it carries (to rebuild the signed text).
    pub fn info(&self) -> SiwxInfo {
        SiwxInfo {
            domain: self.domain.clone(),
            uri: self.uri.clone(),
            statement: self.statement.clone(),
            version: self.version.clone(),
            nonce: self.nonce.clone(),
            issued_at: self.issued_at.clone(),
            expiration_time: self.expiration_time.clone(),
            not_before: self.not_before.clone(),
            request_id: self.request_id.clone(),
            resources: self.resources.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// The extension spec's example header decodes to the example payload.
    #[test]
    fn reads_the_spec_example_header() -> TestResult {
        let header = "eyJkb21haW4iOiJhcGkuZXhhbXBsZS5jb20iLCJhZGRyZXNzIjoiMHg4NTdiMDY1MTlFOTFlM0E1NDUzODc5MWJEYmIwRTIyMzczZTM2YjY2IiwidXJpIjoiaHR0cHM6Ly9hcGkuZXhhbXBsZS5jb20vcHJlbWl1bS1kYXRhIiwidmVyc2lvbiI6IjEiLCJjaGFpbklkIjoiZWlwMTU1Ojg0NTMiLCJ0eXBlIjoiZWlwMTkxIiwibm9uY2UiOiJhMWIyYzNkNGU1ZjY3ODkwYTFiMmMzZDRlNWY2Nzg5MCIsImlzc3VlZEF0IjoiMjAyNC0wMS0xNVQxMDozMDowMC4wMDBaIiwiZXhwaXJhdGlvblRpbWUiOiIyMDI0LTAxLTE1VDEwOjM1OjAwLjAwMFoiLCJzdGF0ZW1lbnQiOiJTaWduIGluIHRvIGFjY2VzcyBwcmVtaXVtIGRhdGEiLCJyZXNvdXJjZXMiOlsiaHR0cHM6Ly9hcGkuZXhhbXBsZS5jb20vcHJlbWl1bS1kYXRhIl0sInNpZ25hdHVyZVNjaGVtZSI6ImVpcDE5MSIsInNpZ25hdHVyZSI6IjB4MmQ2YTc1ODhkNmFjY2E1MDVjYmYwZDlhNGEyMjdlMGM1MmM2YzM0MDA4YzhlODk4NmExMjgzMjU5NzY0MTczNjA4YTJjZTY0OTY2NDJlMzc3ZDZkYThkYmJmNTgzNmU5YmQxNTA5MmY5ZWNhYjA1ZGVkM2Q2MjkzYWYxNDhiNTcxYyJ9";
        let payload = SiwxPayload::decode(header)?;
        assert_eq!(payload.domain, "api.example.com");
        assert_eq!(
            payload.address,
            "0x857b06519E91e3A54538791bDbb0E22373e36b66"
        );
        assert_eq!(payload.chain_id, "eip155:8453");
        assert_eq!(payload.kind, SignatureType::Eip191);
        assert_eq!(payload.nonce, "a1b2c3d4e5f67890a1b2c3d4e5f67890");
        assert_eq!(payload.issued_at, "2024-01-15T10:30:00.000Z");
        assert_eq!(
            payload.expiration_time.as_deref(),
            Some("2024-01-15T10:35:00.000Z")
        );
        assert_eq!(
            payload.statement.as_deref(),
            Some("Sign in to access premium data")
        );
        assert_eq!(payload.signature_scheme, Some(SignatureScheme::Eip191));
        assert_eq!(SiwxPayload::decode(&payload.encode())?, payload);
        assert!(!format!("{payload:?}").contains("2d6a7588"));
        Ok(())
    }

    #[test]
    fn refuses_malformed_headers() {
        let good = serde_json::json!({
            "domain": "a.example", "address": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "uri": "https://a.example/x", "version": "1", "chainId": "eip155:8453",
            "type": "eip191", "nonce": "abcdef0123456789", "issuedAt": "2024-01-15T10:30:00.000Z",
            "signature": "0x00"
        });
        assert!(SiwxPayload::decode(&wire::encode(&good)).is_ok());
        for (field, value) in [
            ("type", serde_json::json!("rsa")),
            ("type", Value::Null),
            ("domain", serde_json::json!(5)),
            ("resources", serde_json::json!("https://a.example")),
            ("signatureScheme", serde_json::json!("eip9999")),
            ("signature", Value::Null),
            ("issuedAt", serde_json::json!([])),
        ] {
            let mut bad = good.clone();
            if value.is_null() {
                if let Some(object) = bad.as_object_mut() {
                    object.remove(field);
                }
            } else {
                bad[field] = value;
            }
            assert!(
                matches!(
                    SiwxPayload::decode(&wire::encode(&bad)),
                    Err(HeaderError::NotJson(_))
                ),
                "{field}"
            );
        }
        assert_eq!(
            SiwxPayload::decode("%%%").map(|_| ()),
            Err(HeaderError::NotBase64)
        );
        assert_eq!(
            SiwxPayload::decode(&"A".repeat(crate::MAX_HEADER_BYTES + 1)).map(|_| ()),
            Err(HeaderError::TooLarge)
        );
        for junk in ["", "e30=", "bnVsbA==", "W10=", "\u{1f600}"] {
            assert!(SiwxPayload::decode(junk).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn declares_what_x402_servers_declare() -> TestResult {
        let extension = SiwxExtension::declare_with_nonce(
            "api.example.com",
            "https://api.example.com/premium-data",
            Some("Sign in to access premium data"),
            &["eip155:8453"],
            1_705_314_600,
            Some(300),
            "a1b2c3d4e5f67890a1b2c3d4e5f67890",
        )
        .ok_or("in range")?;
        let value = serde_json::to_value(&extension)?;
        assert_eq!(
            value["info"],
            serde_json::json!({
                "domain": "api.example.com",
                "uri": "https://api.example.com/premium-data",
                "statement": "Sign in to access premium data",
                "version": "1",
                "nonce": "a1b2c3d4e5f67890a1b2c3d4e5f67890",
                "issuedAt": "2024-01-15T10:30:00.000Z",
                "expirationTime": "2024-01-15T10:35:00.000Z",
                "resources": ["https://api.example.com/premium-data"]
            })
        );
        assert_eq!(
            value["supportedChains"],
            serde_json::json!([{"chainId": "eip155:8453", "type": "eip191"}])
        );
        assert_eq!(value["schema"]["required"][0], "domain");
        let mut extensions = Map::new();
        extensions.insert(SIGN_IN_WITH_X.into(), value);
        assert_eq!(
            SiwxExtension::from_extensions(&extensions),
            Some(Ok(extension))
        );
        assert_eq!(SiwxExtension::from_extensions(&Map::new()), None);
        let random =
            SiwxExtension::declare("a", "https://a/", None, &[], 0, None).ok_or("in range")?;
        assert_eq!(random.info.nonce.len(), 32);
        assert!(random.info.nonce.bytes().all(|b| b.is_ascii_hexdigit()));
        Ok(())
    }
}
